//! The man pages and completions follow the code: `docs/man/*.1` are exactly what
//! `fabric-check dist man` generates from the clap definitions, the completions name every
//! subcommand, spank_fabric_check(8) documents exactly the plugin's arguments, and
//! fabric-check.toml(5) every key the configuration parser accepts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use fabric_core::config::Config;
use fabric_proto::plugin_args::KNOWN_KEYS;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn man_dir() -> PathBuf {
    repo().join("docs/man")
}

fn dist(what: &str, dir: &Path) -> Vec<PathBuf> {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["dist", what])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fabric-check dist {what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(PathBuf::from)
        .collect()
}

fn names_in(dir: &Path, ext: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(ext))
        .collect()
}

const REGENERATE: &str = "regenerate them: cargo run -p fabric-check -- dist man docs/man";

#[test]
fn checked_in_section_1_pages_are_exactly_what_the_clap_definitions_generate() {
    let tmp = tempfile::tempdir().unwrap();
    let written = dist("man", tmp.path());
    assert!(
        written.len() >= 12,
        "expected a page per subcommand, got {written:?}"
    );
    assert_eq!(
        names_in(tmp.path(), ".1"),
        names_in(&man_dir(), ".1"),
        "the set of section 1 pages in docs/man differs from the generated one: {REGENERATE}"
    );
    for page in &written {
        let name = page.file_name().unwrap();
        let want = std::fs::read_to_string(page).unwrap();
        let have = std::fs::read_to_string(man_dir().join(name)).unwrap_or_default();
        assert!(
            want == have,
            "docs/man/{} is out of date with the clap definitions: {REGENERATE}",
            name.to_string_lossy()
        );
    }
}

#[test]
fn every_visible_subcommand_and_fabric_run_have_a_page() {
    let pages = names_in(&man_dir(), ".1");
    for name in [
        "fabric-check.1",
        "fabric-check-probe.1",
        "fabric-check-bom.1",
        "fabric-check-check-config.1",
        "fabric-check-report.1",
        "fabric-check-jobs.1",
        "fabric-check-accept.1",
        "fabric-check-drain.1",
        "fabric-check-resume.1",
        "fabric-check-health.1",
        "fabric-check-collective.1",
        "fabric-check-epilog-slurmctld.1",
        "fabric-run.1",
        "fabric-run-mark.1",
    ] {
        assert!(pages.contains(name), "docs/man has no {name}: {pages:?}");
    }
    for hidden in [
        "fabric-check-prolog.1",
        "fabric-check-epilog.1",
        "fabric-check-dist.1",
        "fabric-check-sacctmgr-shim.1",
    ] {
        assert!(
            !pages.contains(hidden),
            "{hidden} documents an internal subcommand"
        );
    }
}

#[test]
fn completions_for_bash_zsh_and_fish_name_every_subcommand() {
    let tmp = tempfile::tempdir().unwrap();
    let written = dist("completions", tmp.path());
    let names: BTreeSet<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for f in [
        "fabric-check.bash",
        "_fabric-check",
        "fabric-check.fish",
        "fabric-run.bash",
        "_fabric-run",
        "fabric-run.fish",
    ] {
        assert!(names.contains(f), "no completion file {f}: {names:?}");
    }
    for f in ["fabric-check.bash", "_fabric-check", "fabric-check.fish"] {
        let text = std::fs::read_to_string(tmp.path().join(f)).unwrap();
        for sub in [
            "probe",
            "bom",
            "check-config",
            "report",
            "jobs",
            "accept",
            "drain",
            "resume",
            "health",
            "collective",
        ] {
            assert!(
                text.contains(sub),
                "{f} does not complete the subcommand {sub}"
            );
        }
        assert!(
            text.contains("plugstack"),
            "{f} does not complete check-config's options"
        );
    }
    let run = std::fs::read_to_string(tmp.path().join("fabric-run.bash")).unwrap();
    assert!(
        run.contains("--checkpoint-dir") && run.contains("mark"),
        "fabric-run.bash lacks options"
    );
}

/// The `key=` words of the OPTIONS section of spank_fabric_check(8).
fn documented_plugin_keys(page: &str) -> BTreeSet<String> {
    let options = page
        .split(".SH OPTIONS")
        .nth(1)
        .and_then(|s| s.split(".SH ").next())
        .expect("spank_fabric_check.8 has an OPTIONS section");
    let mut keys = BTreeSet::new();
    let mut lines = options.lines().peekable();
    while let Some(l) = lines.next() {
        if l == ".TP" {
            let item = lines.next().unwrap_or_default();
            let word = item.split_whitespace().nth(1).unwrap_or_default();
            if let Some(k) = word.split('=').next().filter(|_| word.contains('=')) {
                keys.insert(k.to_owned());
            }
        }
    }
    keys
}

#[test]
fn spank_fabric_check_8_documents_exactly_the_plugin_arguments() {
    let page = std::fs::read_to_string(man_dir().join("spank_fabric_check.8")).unwrap();
    let documented = documented_plugin_keys(&page);
    let known: BTreeSet<String> = KNOWN_KEYS.iter().map(|k| k.to_string()).collect();
    assert_eq!(
        documented, known,
        "docs/man/spank_fabric_check.8 must document every key in plugin_args::KNOWN_KEYS, and no other"
    );
}

/// The fields a table accepts, from the parser's own refusal of an unknown one.
fn accepted_fields(doc: &str) -> Vec<String> {
    let err = Config::parse(doc, Path::new("probe.toml"))
        .expect_err("an unknown key must be refused")
        .to_string();
    let list = err
        .split("expected one of")
        .nth(1)
        .or_else(|| err.split("expected").nth(1))
        .unwrap_or_else(|| panic!("no list of fields in {err:?}"));
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn fabric_check_toml_5_documents_every_key_the_parser_accepts() {
    let page = std::fs::read_to_string(man_dir().join("fabric-check.toml.5")).unwrap();
    let tables = [
        ("[bom]", "[bom]\nzz_unknown = 1\n"),
        (
            "[counters.NAME]",
            "[counters.symbol_error]\nzz_unknown = 1\n",
        ),
        ("[[node]]", "[[node]]\nmatch = \"n1\"\nzz_unknown = 1\n"),
        (
            "[[node.ports]]",
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_0\"\nzz_unknown = 1\n",
        ),
    ];
    for (section, doc) in tables {
        let body = page
            .split(&format!(".SH \"{section}\""))
            .nth(1)
            .and_then(|s| s.split("\n.SH ").next())
            .unwrap_or_else(|| panic!("fabric-check.toml.5 has no section {section}"));
        let fields = accepted_fields(doc);
        assert!(!fields.is_empty(), "{section}: no fields found");
        for f in fields {
            assert!(
                body.contains(&format!(".BI {f} "))
                    || body.contains(&format!(".BR {f} "))
                    || body.contains(&format!(".B {f}\n")),
                "fabric-check.toml.5 section {section} does not document `{f}`"
            );
        }
    }
}
