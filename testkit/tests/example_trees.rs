//! The example trees committed under `docs/examples/sysfs/` for people to read are exactly what
//! the generator writes: change a scenario, then rewrite its example with
//! `scripts/gen-fixtures NAME docs/examples/sysfs/NAME` (after removing the old one).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fabric_testkit::sysfs;

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
fn every_committed_example_tree_matches_the_generator() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/sysfs");
    let mut checked = 0;
    for e in std::fs::read_dir(&examples).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        let fresh = sysfs::SysfsTree::new(&name);
        let (mut want, mut have) = (BTreeMap::new(), BTreeMap::new());
        walk(fresh.path(), Path::new(""), &mut want);
        walk(&examples.join(&name), Path::new(""), &mut have);
        let missing: Vec<_> = want.keys().filter(|k| !have.contains_key(*k)).collect();
        let extra: Vec<_> = have.keys().filter(|k| !want.contains_key(*k)).collect();
        let differ: Vec<_> = want
            .iter()
            .filter(|(k, v)| have.get(*k).is_some_and(|h| h != *v))
            .map(|(k, _)| k)
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty() && differ.is_empty(),
            "docs/examples/sysfs/{name} is stale: rewrite it with scripts/gen-fixtures; \
             missing {missing:?}, extra {extra:?}, different {differ:?}"
        );
        checked += 1;
    }
    assert!(checked > 0, "no example trees under {}", examples.display());
}
