//! docs/architecture.md's table of the job step's modules ("## The job step") names the tree as
//! it is: every file or folder it names exists under `core/src/`, and every module of
//! `core/src/jobstep/` (tests aside) and the probe's known inventory and second look are named.

use std::collections::BTreeSet;
use std::path::Path;

/// The paths the table names, relative to `core/src/`: a cell's first path gives its folder to
/// the bare names after it (`jobstep/prolog.rs`, `epilog.rs` is `jobstep/epilog.rs`).
fn named_in_the_table() -> BTreeSet<String> {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let doc = std::fs::read_to_string(&doc_path).expect("read docs/architecture.md");
    let start = doc
        .find("## The job step")
        .expect("docs/architecture.md has its section \"The job step\"");
    let section = &doc[start..];
    let table = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    let mut named = BTreeSet::new();
    for row in table {
        let Some(cell) = row.split('|').nth(1) else {
            continue;
        };
        let mut folder = String::new();
        for (i, quoted) in cell.split('`').enumerate() {
            if i % 2 == 0 || !(quoted.ends_with(".rs") || quoted.ends_with('/')) {
                continue;
            }
            let path = if quoted.contains('/') && !quoted.ends_with('/') {
                folder = quoted[..=quoted.rfind('/').expect("a slash")].to_owned();
                quoted.to_owned()
            } else if quoted.ends_with('/') {
                quoted.to_owned()
            } else {
                format!("{folder}{quoted}")
            };
            named.insert(path);
        }
    }
    named
}

#[test]
fn every_module_the_architecture_names_exists() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let named = named_in_the_table();
    assert!(named.len() > 10, "{named:?}");
    let missing: Vec<&String> = named.iter().filter(|p| !src.join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names modules that are not under core/src: {missing:?}"
    );
}

#[test]
fn every_module_of_the_job_step_is_in_the_architecture() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let named = named_in_the_table();
    let mut wanted = vec![
        "probe/known.rs".to_owned(),
        "probe/second_look.rs".to_owned(),
    ];
    for e in std::fs::read_dir(src.join("jobstep")).expect("read core/src/jobstep") {
        let e = e.expect("an entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().is_dir() {
            wanted.push(format!("jobstep/{name}/"));
        } else if name.ends_with(".rs") && !(name == "tests.rs" || name.ends_with("_tests.rs")) {
            wanted.push(format!("jobstep/{name}"));
        }
    }
    let missing: Vec<&String> = wanted.iter().filter(|w| !named.contains(*w)).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's table in \"The job step\" leaves out {missing:?}: add a row saying what each holds"
    );
}
