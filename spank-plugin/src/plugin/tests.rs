//! The callbacks against a fake [`Host`].

use super::spares::Submission;
use super::step::{apply_batch_env, read_batch_env, records_present};
use super::*;
use fabric_proto::invocation::BATCH_STEP_ID;
use fabric_proto::record::PLUGIN_SPOOL_ENV;
use std::cell::RefCell;

#[derive(Default)]
struct FakeHost {
    ctx: Option<Context>,
    opt: Option<Option<String>>,
    log: RefCell<Vec<String>>,
    registered: RefCell<u32>,
    step: Option<u32>,
    node_id: Option<u32>,
    prepend: bool,
    prepended: RefCell<Vec<Vec<String>>>,
    env: RefCell<Vec<(String, String)>>,
    step_nodes: Option<(String, u32)>,
    spares: Option<Option<String>>,
}

impl Host for FakeHost {
    fn context(&self) -> Context {
        self.ctx.unwrap_or(Context::Unknown)
    }
    fn register_option(&self) -> Result<(), HostError> {
        *self.registered.borrow_mut() += 1;
        Ok(())
    }
    fn option(&self) -> Option<Option<String>> {
        self.opt.clone()
    }
    fn spares_option(&self) -> Option<Option<String>> {
        self.spares.clone()
    }
    fn job_id(&self) -> Option<u32> {
        Some(42)
    }
    fn job_uid(&self) -> Option<u32> {
        Some(1000)
    }
    fn info(&self, m: &str) {
        self.log.borrow_mut().push(format!("info {m}"));
    }
    fn error(&self, m: &str) {
        self.log.borrow_mut().push(format!("error {m}"));
    }
    fn debug(&self, m: &str) {
        self.log.borrow_mut().push(format!("debug {m}"));
    }
    fn step_id(&self) -> Option<u32> {
        self.step
    }
    fn node_id(&self) -> Option<u32> {
        self.node_id
    }
    fn can_prepend_task_argv(&self) -> bool {
        self.prepend
    }
    fn prepend_task_argv(&self, argv: &[String]) -> Result<(), HostError> {
        self.prepended.borrow_mut().push(argv.to_vec());
        Ok(())
    }
    fn setenv(&self, name: &str, value: &str) -> Result<(), HostError> {
        self.env.borrow_mut().push((name.into(), value.into()));
        Ok(())
    }
    fn step_nnodes(&self) -> Option<u32> {
        self.step_nodes.as_ref().map(|(_, n)| *n)
    }
    fn job_env(&self, name: &str) -> Option<String> {
        if name == "SLURM_TASKS_PER_NODE" {
            return Some("1(x4)".into());
        }
        (name == "SLURM_STEP_NODELIST")
            .then(|| self.step_nodes.as_ref().map(|(l, _)| l.clone()))
            .flatten()
    }
}

#[test]
fn every_step_is_told_the_admins_spool_dir_and_nothing_outside_slurmstepd() {
    let words = ["spool_dir=/srv/fc-spool".to_owned()];
    let remote = FakeHost {
        ctx: Some(Context::Remote),
        ..FakeHost::default()
    };
    user_init(&remote, &words).unwrap();
    assert_eq!(
        *remote.env.borrow(),
        vec![(PLUGIN_SPOOL_ENV.to_owned(), "/srv/fc-spool".to_owned())]
    );
    let default = FakeHost {
        ctx: Some(Context::Remote),
        ..FakeHost::default()
    };
    user_init(&default, &[]).unwrap();
    assert_eq!(
        default.env.borrow()[0].1,
        fabric_proto::record::DEFAULT_SPOOL_ROOT
    );
    for ctx in [Context::Local, Context::Allocator, Context::JobScript] {
        let h = FakeHost {
            ctx: Some(ctx),
            ..FakeHost::default()
        };
        user_init(&h, &words).unwrap();
        assert!(h.env.borrow().is_empty(), "{ctx:?}");
    }
    let off = FakeHost {
        ctx: Some(Context::Remote),
        ..FakeHost::default()
    };
    user_init(&off, &["mode=off".to_owned()]).unwrap();
    assert!(off.env.borrow().is_empty());
}

fn task_host(opt: &str, step: u32, prepend: bool) -> FakeHost {
    FakeHost {
        ctx: Some(Context::Remote),
        opt: Some(Some(opt.to_owned())),
        step: Some(step),
        prepend,
        ..FakeHost::default()
    }
}

#[test]
fn a_full_step_gets_the_step_gate_in_front_of_its_command() {
    let h = task_host("full", 1, true);
    let words = [
        "probe=/opt/fc/fabric-check".to_owned(),
        "timeout=9".to_owned(),
    ];
    task_init(&h, &words).unwrap();
    assert_eq!(
        *h.prepended.borrow(),
        vec![vec![
            "/opt/fc/fabric-check".to_owned(),
            "step-gate".to_owned(),
            "--plugin-arg=probe=/opt/fc/fabric-check".to_owned(),
            "--plugin-arg=timeout=9".to_owned(),
            "--".to_owned(),
        ]]
    );
}

#[test]
fn quick_steps_special_steps_and_old_slurm_get_no_step_gate() {
    for (opt, step, prepend) in [
        ("quick", 1, true),
        ("off", 1, true),
        ("full", 0xffff_fffb, true),
        ("full", 0xffff_fffc, true),
        ("full", 3, false),
    ] {
        let h = task_host(opt, step, prepend);
        task_init(&h, &[]).unwrap();
        assert!(h.prepended.borrow().is_empty(), "{opt} {step:#x} {prepend}");
    }
    let local = FakeHost {
        ctx: Some(Context::Local),
        ..task_host("full", 1, true)
    };
    task_init(&local, &[]).unwrap();
    assert!(local.prepended.borrow().is_empty());
    let off = task_host("full", 1, true);
    task_init(&off, &["mode=off".to_owned()]).unwrap();
    assert!(off.prepended.borrow().is_empty());
}

#[test]
fn init_registers_the_option_in_srun_sbatch_and_slurmstepd_only() {
    for (ctx, want) in [
        (Context::Local, 1),
        (Context::Remote, 1),
        (Context::Allocator, 1),
        (Context::Slurmd, 0),
        (Context::JobScript, 0),
    ] {
        let h = FakeHost {
            ctx: Some(ctx),
            ..FakeHost::default()
        };
        init(&h, &[]).unwrap();
        assert_eq!(*h.registered.borrow(), want, "{ctx:?}");
    }
}

#[test]
fn a_bogus_option_value_is_refused_naming_the_valid_values() {
    let err = option_value(1, Some("bogus"), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("quick, full or off"), "{err}");
    assert!(option_value(1, None, false).is_ok());
    assert!(option_value(1, Some("full"), true).is_ok());
}

#[test]
fn the_prolog_reads_a_bare_flag_as_quick() {
    let h = FakeHost {
        opt: Some(Some("(null)".into())),
        ..FakeHost::default()
    };
    let req = read_request(&h, Some("n1".into()));
    assert_eq!(req.mode, Some(FabricMode::Quick));
    assert_eq!(req.job_id, Some(42));
}

#[test]
fn the_prolog_treats_an_absent_option_as_not_asking() {
    let h = FakeHost::default();
    assert_eq!(read_request(&h, None).mode, None);
}

#[test]
fn unknown_plugin_arguments_are_logged_by_name_in_the_prolog() {
    let h = FakeHost::default();
    job_script(&h, &["timout=3".to_owned()], Script::Prolog).unwrap();
    let log = h.log.borrow();
    assert!(
        log.iter()
            .any(|l| l.starts_with("error") && l.contains("\"timout\"")),
        "{log:?}"
    );
    assert!(
        log.iter().any(|l| l.contains("option=none action=none")),
        "{log:?}"
    );
}

/// A prolog child that prints `body` (a shell script), run by the plugin with `timeout=1`.
/// The prolog with a stand-in child running `body` under the plugin's `timeout=` of
/// `timeout_s` (long enough that a loaded machine still runs the child's first lines).
fn prolog_with_child(body: &str, timeout_s: u32) -> (Result<(), CallbackError>, Vec<String>) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("fabric-check");
    std::fs::write(&child, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).unwrap();
    let h = FakeHost {
        opt: Some(Some("quick".into())),
        ..FakeHost::default()
    };
    let env = ScriptEnv {
        node: Some("n1".into()),
        nodes: Some("n1".into()),
        slurm_conf: None,
    };
    let words = [
        format!("probe={}", child.display()),
        format!("timeout={timeout_s}"),
    ];
    let r = job_script_in(&h, &words, Script::Prolog, &env);
    let log = h.log.borrow().clone();
    (r, log)
}

#[test]
fn a_prolog_child_that_hangs_after_its_drain_fails_the_prolog_so_the_job_leaves_the_node() {
    let (r, log) = prolog_with_child(
        "echo 'drained n1: fabric-check: ib.port_state: x'; echo fabric-check-exit=2; exec sleep 30",
        3,
    );
    let err = r
        .expect_err("a timeout after a drain is not success")
        .to_string();
    assert!(err.contains("is drained"), "{err}");
    assert!(err.contains("TimedOut"), "{err}");
    assert!(log.iter().any(|l| l.contains("drained n1")), "{log:?}");
}

#[test]
fn a_prolog_child_killed_right_after_its_drain_fails_the_prolog() {
    let (r, log) = prolog_with_child("echo fabric-check-exit=2; kill -KILL $$", 30);
    let Err(err) = r.map_err(|e| e.to_string()) else {
        panic!("a killed child that drained is not success: {log:?}")
    };
    assert!(err.contains("Signalled(9)"), "{err}");
}

#[test]
fn a_drain_undone_by_the_guard_lets_the_job_proceed_on_the_last_decision_line() {
    let (r, _) = prolog_with_child(
        "echo fabric-check-exit=2; echo 'MASS-DRAIN GUARD: resuming n1'; echo fabric-check-exit=0; exec sleep 30",
        3,
    );
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn a_prolog_child_that_times_out_without_a_drain_lets_the_job_proceed_unchecked() {
    let (r, log) = prolog_with_child("echo probing; exec sleep 30", 3);
    assert!(r.is_ok(), "{r:?}");
    assert!(
        log.iter()
            .any(|l| l.starts_with("error") && l.contains("proceeds unchecked")),
        "{log:?}"
    );
}

#[test]
fn only_the_prolog_can_fail_a_job_script() {
    assert_eq!(script_rc(Script::Prolog, -1), -1);
    assert_eq!(script_rc(Script::Prolog, 0), 0);
    assert_eq!(script_rc(Script::Epilog, -1), 0);
    assert_eq!(script_rc(Script::Epilog, 0), 0);
}

#[test]
fn the_admin_mode_and_the_user_option_decide_together() {
    use FabricMode::*;
    assert!(!wants_check(JobMode::OptIn, None));
    assert!(wants_check(JobMode::OptIn, Some(Quick)));
    assert!(!wants_check(JobMode::OptIn, Some(Off)));
    assert!(wants_check(JobMode::Always, None));
    assert!(!wants_check(JobMode::Always, Some(Off)));
    assert!(!wants_check(JobMode::Off, Some(Full)));
}

/// The step end on a stand-in child that writes its words to `argv.txt` beside it, with a
/// records file of node `n1` for job 42 when `records`.
fn step_exit_with_child(
    host: &FakeHost,
    records: bool,
    seen: Option<FabricMode>,
) -> (Option<String>, Vec<String>) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("fabric-check");
    let out = dir.path().join("argv.txt");
    std::fs::write(
        &child,
        format!(
            "#!/bin/sh\necho \"$@\" > {}\necho 'run summary in the live tag'\necho fabric-check-exit=0\n",
            out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(spool.join("42")).unwrap();
    if records {
        std::fs::write(spool.join("42/n1.jsonl"), "{}\n").unwrap();
    }
    let env = ScriptEnv {
        node: Some("n1".into()),
        nodes: None,
        slurm_conf: Some("/etc/slurm/slurm.conf".into()),
    };
    let words = [
        format!("probe={}", child.display()),
        format!("spool_dir={}", spool.display()),
        "timeout=5".to_owned(),
    ];
    step_exit_in(host, &words, &env, seen).unwrap();
    let log = host.log.borrow().clone();
    (std::fs::read_to_string(&out).ok(), log)
}

fn step_host(ctx: Context, step: u32, node_id: u32) -> FakeHost {
    FakeHost {
        ctx: Some(ctx),
        opt: Some(Some("quick".to_owned())),
        step: Some(step),
        node_id: Some(node_id),
        ..FakeHost::default()
    }
}

#[test]
fn the_step_end_test_for_records_never_walks_a_job_folder_swapped_for_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let elsewhere = dir.path().join("automounted");
    std::fs::create_dir_all(spool.join("7")).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(spool.join("7/n1.jsonl"), b"{}\n").unwrap();
    std::fs::write(elsewhere.join("n1.jsonl"), b"{}\n").unwrap();
    assert!(records_present(&spool, "7", "n1"));
    assert!(!records_present(&spool, "7", "n2"));
    // The job's user swaps its folder for a link (to an automount, an NFS path).
    std::os::unix::fs::symlink(&elsewhere, spool.join("8")).unwrap();
    assert!(!records_present(&spool, "8", "n1"), "the link was walked");
    assert!(!records_present(&spool, "..", "n1"));
}

#[test]
fn a_steps_end_on_its_first_node_with_records_runs_step_end_as_a_child_and_logs_its_lines() {
    let h = step_host(Context::Remote, 3, 0);
    let (argv, log) = step_exit_with_child(&h, true, None);
    let argv = argv.expect("the child ran");
    let words: Vec<&str> = argv.split_whitespace().collect();
    assert_eq!(words[0], "step-end", "{argv}");
    let after = |flag: &str| words.iter().position(|w| *w == flag).map(|i| words[i + 1]);
    assert_eq!(after("--job-id"), Some("42"), "{argv}");
    assert_eq!(after("--step-id"), Some("3"), "{argv}");
    assert_eq!(after("--node"), Some("n1"), "{argv}");
    assert_eq!(after("--job-uid"), Some("1000"), "{argv}");
    assert!(
        log.iter()
            .any(|l| l.contains("step-end job=42.3 node=n1: run summary in the live tag")),
        "{log:?}"
    );
    assert!(log.iter().any(|l| l.contains("done in")), "{log:?}");
}

#[test]
fn at_exit_where_slurm_no_longer_answers_the_option_the_request_seen_at_the_steps_start_counts() {
    let h = FakeHost {
        opt: None,
        ..step_host(Context::Remote, 3, 0)
    };
    let (argv, log) = step_exit_with_child(&h, true, Some(FabricMode::Full));
    let argv = argv.unwrap_or_else(|| panic!("no child: {log:?}"));
    assert!(argv.contains("--option full"), "{argv}");
    // (user_init is where it is seen: the e2e suite's live_summary runs it for real.)
}

#[test]
fn the_batch_scripts_end_runs_step_end_too_since_the_job_is_still_running_there() {
    let h = step_host(Context::Remote, BATCH_STEP_ID, 0);
    let (argv, log) = step_exit_with_child(&h, true, None);
    let argv = argv.unwrap_or_else(|| panic!("no child: {log:?}"));
    assert!(argv.contains("--step-id 4294967291"), "{argv}");
}

#[test]
fn no_child_runs_for_other_nodes_the_extern_step_steps_without_records_or_outside_slurmstepd() {
    for (h, records, why) in [
        (step_host(Context::Remote, 3, 1), true, "not the first node"),
        (
            step_host(Context::Remote, 0xffff_fffc, 0),
            true,
            "the extern step",
        ),
        (step_host(Context::Remote, 3, 0), false, "no records file"),
        (step_host(Context::Local, 3, 0), true, "srun"),
        (
            FakeHost {
                opt: None,
                ..step_host(Context::Remote, 3, 0)
            },
            true,
            "the job did not ask",
        ),
    ] {
        let (argv, log) = step_exit_with_child(&h, records, None);
        assert_eq!(argv, None, "{why}: {log:?}");
    }
}

#[test]
fn every_node_of_a_multi_node_step_runs_step_end_with_the_steps_nodes_records_or_not() {
    // The stand-in's node is n1: first of n[1-2], second of n[0-1].
    for (list, node_id, records) in [
        ("n[1-2]", 0, true),
        ("n[0-1]", 1, false),
        ("n[0-1]", 1, true),
    ] {
        let h = FakeHost {
            step_nodes: Some((list.into(), 2)),
            ..step_host(Context::Remote, 3, node_id)
        };
        let (argv, log) = step_exit_with_child(&h, records, None);
        let argv = argv.unwrap_or_else(|| panic!("no child on node {node_id}: {log:?}"));
        assert!(argv.contains(&format!("--nodes {list}")), "{argv}");
        assert!(argv.contains("--node n1"), "{argv}");
    }
}

#[test]
fn the_batch_scripts_end_stays_on_its_node_whatever_the_environment_lists() {
    let h = FakeHost {
        step_nodes: Some(("n[1-2]".into(), 2)),
        ..step_host(Context::Remote, BATCH_STEP_ID, 0)
    };
    let (argv, log) = step_exit_with_child(&h, true, None);
    let argv = argv.unwrap_or_else(|| panic!("no child: {log:?}"));
    assert!(argv.contains("--nodes n1 "), "{argv}");
}

#[test]
fn a_step_node_list_that_disagrees_with_slurm_is_not_believed() {
    for (list, count, why) in [
        ("n[1-3]", 2, "three names for two nodes"),
        ("n[5-6]", 2, "this node is not in it"),
        ("n[1-2]", 2, "this node at another index"),
        ("n[1-2", 2, "not a hostlist"),
    ] {
        // This node is n1 at index 1.
        let h = FakeHost {
            step_nodes: Some((list.into(), count)),
            ..step_host(Context::Remote, 3, 1)
        };
        let (argv, log) = step_exit_with_child(&h, true, None);
        assert_eq!(argv, None, "{why}: {log:?}");
    }
    // At index 0 a disbelieved list falls back to this node alone.
    let h = FakeHost {
        step_nodes: Some(("n[1-3]".into(), 2)),
        ..step_host(Context::Remote, 3, 0)
    };
    let (argv, _) = step_exit_with_child(&h, true, None);
    assert!(argv.unwrap().contains("--nodes n1 "));
}

#[test]
fn a_step_node_list_that_overflows_or_stands_for_gigabytes_is_refused_before_it_is_expanded() {
    let gigabyte = format!("{}[0000-1023][0000-1023],n1", "x".repeat(1000));
    let long_name = format!("{},n1", "y".repeat(600));
    for (list, count, why) in [
        (
            "n[0-18446744073709551615]",
            2,
            "a range whose size wraps to 0",
        ),
        (
            "n[0-9223372036854775807,0-9223372036854775808]",
            2,
            "sizes that add up past u64",
        ),
        (gigabyte.as_str(), 2, "a gigabyte of names from a kilobyte"),
        ("n[1-4096],n1", 2, "a range larger than the step"),
        ("n[0-1023][0-1023],n1", 2, "a million names"),
        (long_name.as_str(), 2, "a name longer than any node's"),
        ("n[0-4096]", 4097, "a step larger than the meeting's limit"),
    ] {
        // This node is n1 at index 1: a believed list would name it there.
        let h = FakeHost {
            step_nodes: Some((list.to_owned(), count)),
            ..step_host(Context::Remote, 3, 1)
        };
        let started = std::time::Instant::now();
        let (argv, log) = step_exit_with_child(&h, true, None);
        assert_eq!(argv, None, "{why}: {log:?}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{why}: nothing was expanded"
        );
        assert!(log.iter().all(|l| l.len() < 512), "{why}: {log:?}");
    }
    // A list within Slurm's count is believed: this node meets the step's first.
    let h = FakeHost {
        step_nodes: Some(("n[0-1]".into(), 2)),
        ..step_host(Context::Remote, 3, 1)
    };
    let (argv, log) = step_exit_with_child(&h, true, None);
    assert!(argv.unwrap().contains("--nodes n[0-1] "), "{log:?}");
}

#[test]
fn a_step_end_child_that_hangs_is_killed_at_the_timeout_and_the_step_still_succeeds() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("fabric-check");
    std::fs::write(&child, "#!/bin/sh\nexec sleep 30\n").unwrap();
    std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(spool.join("42")).unwrap();
    std::fs::write(spool.join("42/n1.jsonl"), "{}\n").unwrap();
    let h = step_host(Context::Remote, 1, 0);
    let env = ScriptEnv {
        node: Some("n1".into()),
        ..ScriptEnv::default()
    };
    let words = [
        format!("probe={}", child.display()),
        format!("spool_dir={}", spool.display()),
        "timeout=1".to_owned(),
    ];
    let started = std::time::Instant::now();
    assert!(step_exit_in(&h, &words, &env, None).is_ok());
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let log = h.log.borrow();
    assert!(
        log.iter()
            .any(|l| l.starts_with("error") && l.contains("timed out")),
        "{log:?}"
    );
}

mod spares_option {
    use super::*;

    fn sbatch() -> Submission {
        Submission {
            slurm_conf: Some("SchedulerParameters=sched_interval=2\n".into()),
            in_job: false,
            own_allocation: false,
        }
    }

    #[test]
    fn a_spares_request_within_spares_max_is_accepted_at_submission() {
        assert!(spares_value_in(Some("1"), false, 2, &sbatch()).is_ok());
        assert!(spares_value_in(Some("0"), false, 0, &sbatch()).is_ok());
    }

    #[test]
    fn a_spares_request_above_spares_max_is_refused_at_submission_with_the_limit() {
        let e = spares_value_in(Some("3"), false, 2, &sbatch()).unwrap_err();
        assert!(e.to_string().contains("at most 2 spare node(s)"), "{e}");
        let e = spares_value_in(Some("1"), false, 0, &sbatch()).unwrap_err();
        assert!(e.to_string().contains("ask your admin"), "{e}");
    }

    #[test]
    fn a_spares_value_that_is_not_a_plain_number_is_refused_everywhere() {
        for bad in [None, Some("1;x"), Some("-1"), Some(" 1"), Some("one")] {
            assert!(
                spares_value_in(bad, false, 4, &sbatch()).is_err(),
                "{bad:?}"
            );
            assert!(spares_value_in(bad, true, 4, &sbatch()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_cluster_that_disables_job_shrink_tells_the_job_at_submission() {
        let sub = Submission {
            slurm_conf: Some("SchedulerParameters=disable_job_shrink\n".into()),
            ..sbatch()
        };
        let e = spares_value_in(Some("1"), false, 2, &sub).unwrap_err();
        assert!(e.to_string().contains("disable_job_shrink"), "{e}");
    }

    #[test]
    fn an_srun_that_makes_its_own_allocation_is_told_spares_are_for_batch_jobs() {
        let own = Submission {
            own_allocation: true,
            ..sbatch()
        };
        let e = spares_value_in(Some("1"), false, 2, &own).unwrap_err();
        assert!(e.to_string().contains("batch jobs"), "{e}");
        let inside = Submission {
            own_allocation: true,
            in_job: true,
            ..sbatch()
        };
        assert!(spares_value_in(Some("1"), false, 2, &inside).is_ok());
    }

    #[test]
    fn the_prolog_takes_a_spares_request_above_spares_max_as_none_and_says_so() {
        let h = FakeHost {
            ctx: Some(Context::JobScript),
            spares: Some(Some("5".into())),
            ..FakeHost::default()
        };
        assert_eq!(read_spares(&h, 2), 0);
        assert!(h.log.borrow().iter().any(|l| l.contains("without spares")));
        let ok = FakeHost {
            spares: Some(Some("2".into())),
            ..FakeHost::default()
        };
        assert_eq!(read_spares(&ok, 2), 2);
    }

    #[test]
    fn the_batch_step_of_a_shrunk_job_sees_only_its_kept_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("n1");
        std::fs::create_dir_all(&state).unwrap();
        let env = fabric_proto::spares::BatchEnv {
            job_id: 42,
            allocated: vec!["n1".into(), "n2".into(), "n3".into(), "n4".into()],
            kept: vec!["n1".into(), "n2".into(), "n4".into()],
        };
        std::fs::write(
            fabric_proto::spares::BatchEnv::path(&state, 42),
            env.to_json(),
        )
        .unwrap();
        let (args, _) = fabric_proto::plugin_args::PluginArgs::parse([format!(
            "state_dir={}/%n",
            dir.path().display()
        )
        .as_str()]);
        let h = FakeHost {
            ctx: Some(Context::Remote),
            step: Some(BATCH_STEP_ID),
            ..FakeHost::default()
        };
        let read = read_batch_env(&h, &args, Some("n1")).expect("the leader's file");
        apply_batch_env(&h, &read);
        let set = h.env.borrow().clone();
        let get = |k: &str| set.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("SLURM_JOB_NODELIST").as_deref(), Some("n[1-2,4]"));
        assert_eq!(get("SLURM_NNODES").as_deref(), Some("3"));
        assert_eq!(get("SLURM_TASKS_PER_NODE").as_deref(), Some("1(x3)"));
        // Another node, or no file: nothing changes.
        let other = FakeHost {
            ctx: Some(Context::Remote),
            step: Some(BATCH_STEP_ID),
            ..FakeHost::default()
        };
        assert!(read_batch_env(&other, &args, Some("n2")).is_none());
    }
}
