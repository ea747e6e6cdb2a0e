//! The committed fixture trees are exactly what `scripts/gen-fixtures --all` produces: edit the
//! scenario descriptions, regenerate, commit both.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Dir,
    File(Vec<u8>),
    Link(PathBuf),
}

fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
    for e in std::fs::read_dir(root.join(rel)).unwrap() {
        let e = e.unwrap();
        let r = rel.join(e.file_name());
        let t = e.file_type().unwrap();
        if t.is_symlink() {
            out.insert(r, Entry::Link(std::fs::read_link(e.path()).unwrap()));
        } else if t.is_dir() {
            out.insert(r.clone(), Entry::Dir);
            walk(root, &r, out);
        } else {
            out.insert(r, Entry::File(std::fs::read(e.path()).unwrap()));
        }
    }
}

#[test]
fn committed_fixtures_match_the_generator() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("python3")
        .arg(repo.join("scripts/gen-fixtures"))
        .arg("--all")
        .arg(dir.path())
        .status()
        .expect("python3 is needed to run scripts/gen-fixtures");
    assert!(st.success());
    let (mut want, mut have) = (BTreeMap::new(), BTreeMap::new());
    walk(dir.path(), Path::new(""), &mut want);
    walk(&repo.join("tests/fixtures/sysfs"), Path::new(""), &mut have);
    let missing: Vec<_> = want
        .keys()
        .filter(|k| !have.contains_key(*k))
        .take(5)
        .collect();
    let extra: Vec<_> = have
        .keys()
        .filter(|k| !want.contains_key(*k))
        .take(5)
        .collect();
    let differ: Vec<_> = want
        .iter()
        .filter(|(k, v)| have.get(*k).is_some_and(|h| h != *v))
        .map(|(k, _)| k)
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "tests/fixtures/sysfs is stale: run `rm -rf tests/fixtures/sysfs && scripts/gen-fixtures --all tests/fixtures/sysfs` and commit; missing {missing:?}, extra {extra:?}, different {differ:?}"
    );
}

#[test]
fn the_generator_refuses_unknown_scenarios_and_busy_directories() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let gen_ = |args: &[&str]| {
        std::process::Command::new("python3")
            .arg(repo.join("scripts/gen-fixtures"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = gen_(&["no-such-scenario", dir.path().join("x").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--list"));
    std::fs::write(dir.path().join("busy"), "").unwrap();
    let out = gen_(&["ib8-healthy", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an empty directory"));
}
