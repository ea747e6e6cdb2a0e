//! Fast tests of the built `.so` without Slurm: a small C host that exports stub `spank_*` and
//! `slurm_*` functions loads it with immediate binding and calls its callbacks; the exported
//! symbol list is exactly what Slurm needs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn plugin_so() -> PathBuf {
    // tests run from target/<profile>/deps/; the cdylib sits in target/<profile>/.
    let exe = std::env::current_exe().expect("test exe");
    let so = exe
        .parent()
        .and_then(Path::parent)
        .expect("profile dir")
        .join("libspank_fabric_check.so");
    assert!(
        so.exists(),
        "{} missing: build with `cargo build -p fabric-spank`",
        so.display()
    );
    so
}

/// Which Slurm the stub host stands in for.
#[derive(Clone, Copy)]
enum Slurm {
    /// 22.05: no `spank_prepend_task_argv`.
    Old,
    /// 23.11 and newer: exports `spank_prepend_task_argv`.
    WithPrepend,
}

fn build_stub_host(with_prepend: bool) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/host/stub_host.c");
    let out = std::env::temp_dir().join(format!(
        "fabric_stub_host_{}{}",
        std::process::id(),
        if with_prepend { "_prepend" } else { "" }
    ));
    let mut cc = Command::new("cc");
    cc.args(["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-rdynamic"]);
    if with_prepend {
        cc.arg("-DWITH_PREPEND");
    }
    let st = cc
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .arg("-ldl")
        .status()
        .expect("run cc (install gcc)");
    assert!(st.success(), "compiling the stub host failed");
    out
}

fn stub_host(slurm: Slurm) -> &'static Path {
    static OLD: OnceLock<PathBuf> = OnceLock::new();
    static NEW: OnceLock<PathBuf> = OnceLock::new();
    match slurm {
        Slurm::Old => OLD.get_or_init(|| build_stub_host(false)),
        Slurm::WithPrepend => NEW.get_or_init(|| build_stub_host(true)),
    }
}

fn run_host(env: &[(&str, &str)], args: &[&str]) -> String {
    run_host_as(Slurm::Old, env, args)
}

fn run_host_as(slurm: Slurm, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut c = Command::new(stub_host(slurm));
    c.arg(plugin_so()).args(args).env_remove("SLURMD_NODENAME");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run stub host");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "stub host failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn the_plugin_loads_with_immediate_binding_and_names_itself() {
    let text = run_host(&[("STUB_CTX", "local")], &[]);
    assert!(
        text.contains("plugin_name=fabric_check plugin_type=spank"),
        "{text}"
    );
    let header = std::fs::read_to_string("/usr/include/slurm/slurm_version.h").unwrap_or_default();
    let want = header
        .lines()
        .find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER "))
        .map(|v| v.trim().to_lowercase());
    if let Some(v) = want {
        assert!(
            text.contains(&format!("plugin_version={v}")),
            "expected {v}: {text}"
        );
    }
}

#[test]
fn init_registers_an_optional_argument_option_with_a_usage_line() {
    let text = run_host(&[("STUB_CTX", "allocator")], &[]);
    assert!(
        text.contains("registered name=fabric-check arginfo=quick|full|off has_arg=2 usage_set=1"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("rc=0"), "{text}");
}

#[test]
fn init_in_slurmd_registers_nothing_and_succeeds() {
    let text = run_host(&[("STUB_CTX", "slurmd")], &[]);
    assert!(!text.contains("registered"), "{text}");
    assert!(text.contains("rc=0"), "{text}");
}

#[test]
fn the_option_callback_returns_minus_one_for_a_bogus_value() {
    let text = run_host(&[("STUB_CTX", "local"), ("STUB_CALL", "option:bogus")], &[]);
    assert!(
        text.contains("error: fabric-check: invalid --fabric-check value \"bogus\""),
        "{text}"
    );
    assert!(text.contains("rc=-1"), "{text}");
    let ok = run_host(&[("STUB_CTX", "local"), ("STUB_CALL", "option:full")], &[]);
    assert!(ok.contains("rc=0"), "{ok}");
}

#[test]
fn the_spares_option_is_registered_and_refuses_a_request_above_spares_max_at_submission() {
    let text = run_host(&[("STUB_CTX", "allocator")], &[]);
    assert!(
        text.contains("registered name=fabric-check-spares arginfo=K has_arg=1 usage_set=1"),
        "{text}"
    );
    let refused = run_host(
        &[("STUB_CTX", "allocator"), ("STUB_CALL", "spares:2")],
        &["spares_max=1"],
    );
    assert!(refused.contains("at most 1 spare node(s)"), "{refused}");
    assert!(refused.contains("rc=-1"), "{refused}");
    let ok = run_host(
        &[
            ("STUB_CTX", "allocator"),
            ("STUB_CALL", "spares:1"),
            ("SLURM_CONF", "/nonexistent"),
        ],
        &["spares_max=1"],
    );
    assert!(ok.trim_end().ends_with("rc=0"), "{ok}");
    let warn = run_host(
        &[
            ("STUB_CTX", "allocator"),
            ("STUB_CALL", "spares:1"),
            ("SLURM_CONF", "/nonexistent"),
        ],
        &["spares_max=1", "policy=warn"],
    );
    assert!(warn.contains("(policy=warn)"), "{warn}");
    assert!(warn.contains("rc=-1"), "{warn}");
}

#[test]
fn the_prolog_logs_the_request_and_names_bad_plugin_arguments() {
    let text = run_host(
        &[
            ("STUB_CTX", "job_script"),
            ("STUB_CALL", "prolog"),
            ("STUB_OPT", "(null)"),
        ],
        &["mode=sometimes", "bogus"],
    );
    assert!(
        text.contains("info: fabric-check: prolog job=4242 node=? option=quick"),
        "{text}"
    );
    assert!(
        text.contains("plugin argument mode=\"sometimes\" is invalid"),
        "{text}"
    );
    assert!(
        text.contains("malformed plugin argument \"bogus\""),
        "{text}"
    );
    let none = run_host(
        &[
            ("STUB_CTX", "job_script"),
            ("STUB_CALL", "prolog"),
            ("STUB_OPT", "-"),
        ],
        &[],
    );
    assert!(none.contains("option=none"), "{none}");
}

#[test]
fn a_steps_end_in_slurmstepd_spawns_step_end_on_the_first_node_only_when_it_holds_records() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("fabric-check");
    let seen = dir.path().join("argv.txt");
    std::fs::write(
        &child,
        format!(
            "#!/bin/sh\necho \"$@\" > {}\necho fabric-check-exit=0\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(spool.join("4242")).unwrap();
    std::fs::write(spool.join("4242/n1.jsonl"), "{}\n").unwrap();
    let probe = format!("probe={}", child.display());
    let spool_word = format!("spool_dir={}", spool.display());
    let args = [probe.as_str(), spool_word.as_str(), "timeout=5"];
    let run = |nodeid: &str, node: &str| {
        let _ = std::fs::remove_file(&seen);
        let text = run_host(
            &[
                ("STUB_CTX", "remote"),
                ("STUB_CALL", "exit"),
                ("STUB_OPT", "quick"),
                ("STUB_STEP", "2"),
                ("STUB_NODEID", nodeid),
                ("SLURMD_NODENAME", node),
            ],
            &args,
        );
        assert!(text.contains("rc=0"), "{text}");
        (std::fs::read_to_string(&seen).ok(), text)
    };
    let (argv, text) = run("0", "n1");
    let argv = argv.unwrap_or_else(|| panic!("no child ran: {text}"));
    assert!(
        argv.starts_with("step-end --job-id 4242 --node n1 --nodes n1 --option quick --job-uid 1000 --step-id 2 --"),
        "{argv}"
    );
    assert!(
        text.contains("step-end job=4242.2 node=n1: done in"),
        "{text}"
    );
    assert_eq!(run("1", "n1").0, None, "a follower node spawns nothing");
    assert_eq!(run("0", "n2").0, None, "no records of n2: nothing spawned");
}

#[test]
fn on_slurm_with_prepend_a_full_step_runs_behind_the_step_gate() {
    let env = [
        ("STUB_CTX", "remote"),
        ("STUB_CALL", "task_init"),
        ("STUB_OPT", "full"),
    ];
    let text = run_host_as(
        Slurm::WithPrepend,
        &env,
        &["probe=/opt/fc/bin/fabric-check", "timeout=9"],
    );
    assert!(
        text.contains(
            "prepend argc=5 [/opt/fc/bin/fabric-check] [step-gate] \
             [--plugin-arg=probe=/opt/fc/bin/fabric-check] [--plugin-arg=timeout=9] [--] null_end=1"
        ),
        "{text}"
    );
    assert!(text.contains("rc=0"), "{text}");
}

#[test]
fn on_slurm_without_prepend_and_for_batch_or_quick_steps_the_task_is_left_alone() {
    let old = run_host_as(
        Slurm::Old,
        &[
            ("STUB_CTX", "remote"),
            ("STUB_CALL", "task_init"),
            ("STUB_OPT", "full"),
        ],
        &[],
    );
    assert!(!old.contains("prepend argc"), "{old}");
    assert!(old.contains("no spank_prepend_task_argv"), "{old}");
    assert!(old.contains("rc=0"), "{old}");
    for (opt, step) in [("full", "0xfffffffb"), ("quick", "1")] {
        let text = run_host_as(
            Slurm::WithPrepend,
            &[
                ("STUB_CTX", "remote"),
                ("STUB_CALL", "task_init"),
                ("STUB_OPT", opt),
                ("STUB_STEP", step),
            ],
            &[],
        );
        assert!(!text.contains("prepend argc"), "{opt} {step}: {text}");
        assert!(text.contains("rc=0"), "{text}");
    }
}

/// The exported symbols that docs/architecture.md lists between its `exported-symbols`
/// markers, one `` - `name` `` line each, sorted.
fn documented_symbols() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let doc = std::fs::read_to_string(&path).expect("read docs/architecture.md");
    let start = doc
        .find("<!-- exported-symbols -->")
        .expect("docs/architecture.md has its <!-- exported-symbols --> marker");
    let end = doc
        .find("<!-- /exported-symbols -->")
        .expect("docs/architecture.md has its <!-- /exported-symbols --> marker");
    let mut names: Vec<String> = doc[start..end]
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("- `")?
                .strip_suffix('`')
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

#[test]
fn only_the_spank_symbols_are_exported() {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(plugin_so())
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success());
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "plugin_name",
            "plugin_type",
            "plugin_version",
            "slurm_spank_exit",
            "slurm_spank_init",
            "slurm_spank_job_epilog",
            "slurm_spank_job_prolog",
            "slurm_spank_task_init",
            "slurm_spank_task_init_privileged",
            "slurm_spank_user_init"
        ],
        "exported symbols changed: update this list only on purpose"
    );
    assert_eq!(
        names,
        documented_symbols(),
        "docs/architecture.md lists other exported symbols than the library's: keep the list \
         between its exported-symbols markers equal to `nm -D --defined-only`"
    );
    let undefined = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(plugin_so())
        .output()
        .expect("nm");
    let text = String::from_utf8_lossy(&undefined.stdout);
    assert!(
        !text.contains("libslurm"),
        "the plugin must not link -lslurm"
    );
    assert!(
        !text.contains("pthread_create"),
        "the plugin must not start threads"
    );
    assert!(
        !text.contains("spank_prepend_task_argv"),
        "spank_prepend_task_argv must be looked up at run time: linking it breaks Slurm 22.05"
    );
}
