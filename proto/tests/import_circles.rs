//! No import circle between the modules of any crate of the workspace: a module that names
//! another (`use crate::…`, `use super::…`, or a `crate::`/`super::` path in its code) never is
//! named back, directly or around a longer loop. A circle makes two modules one in all but name:
//! neither can be read, tested or moved without the other.
//!
//! Modules are the files under each crate's `src/` (`a.rs` and `a/mod.rs` are `a`); a path names
//! the deepest module file it reaches. Comments and the `#[cfg(test)] mod tests` at the end of a
//! file are left out: nothing imports a test module, so no circle runs through one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crates, as folders under its root (the `members` of its `Cargo.toml`).
fn crates(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("the workspace lists its members");
    let list = &line[line.find('[').expect("[") + 1..line.find(']').expect("]")];
    list.split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root.join(m))
        .collect()
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module a file under `src` is, as its path words (`[]` for the crate root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut words: Vec<String> = rel
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let last = words.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    let root_file = words.is_empty() && matches!(stem, "lib" | "main");
    if stem != "mod" && !root_file {
        words.push(stem.to_owned());
    }
    words
}

/// The code of a file: comments dropped, and the trailing test module left out.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod tests"))
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let kept = line.find("// ").map_or(line, |i| &line[..i]);
        out.push_str(kept);
        out.push('\n');
    }
    out
}

/// The paths `code` names from `crate::` or `super::`, each as the
/// module words it reaches from the crate root, before the deepest known module is found.
fn named_paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        // A path starts with `c` or `s` (ASCII: a char boundary) at a word boundary.
        if !matches!(bytes[i], b'c' | b's')
            || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == b':'))
        {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        let (mut at, start): (Vec<String>, usize) = if rest.starts_with("crate::") {
            (Vec::new(), 7)
        } else if rest.starts_with("super::") {
            // `super` of `a/b.rs` is `a`; of `a/b/mod.rs` (module `a::b`) also `a`.
            let mut m = here.to_vec();
            m.pop();
            (m, 7)
        } else {
            i += 1;
            continue;
        };
        let mut j = i + start;
        // Further `super::` steps.
        while code[j..].starts_with("super::") {
            at.pop();
            j += 7;
        }
        // Words up to the first that is not followed by `::`, or a `{` group.
        let mut groups: Vec<Vec<String>> = Vec::new();
        loop {
            let w_start = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            if w_start == j {
                if j < bytes.len() && bytes[j] == b'{' {
                    // `crate::a::{b, c::d}`: each first word of the group.
                    let end = code[j..].find('}').map_or(bytes.len(), |e| j + e);
                    for item in code[j + 1..end].split(',') {
                        let mut p = at.clone();
                        p.extend(
                            item.split("::")
                                .map(|w| w.trim().trim_start_matches('{').to_owned())
                                .filter(|w| !w.is_empty() && w.bytes().all(ident)),
                        );
                        groups.push(p);
                    }
                    j = end;
                }
                break;
            }
            at.push(code[w_start..j].to_owned());
            if code[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        if groups.is_empty() {
            out.push(at);
        } else {
            out.extend(groups);
        }
        i = j.max(i + 1);
    }
    out
}

/// The deepest known module that `path` reaches.
fn deepest(path: &[String], modules: &BTreeSet<Vec<String>>) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
        .unwrap_or_default()
}

/// A circle in `edges`, as the modules around it, if any.
fn a_circle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        marks: &mut BTreeMap<Vec<String>, Mark>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = stack.iter().position(|s| s == m).expect("on the stack");
                let mut circle = stack[from..].to_vec();
                circle.push(m.clone());
                return Some(circle);
            }
            None => {}
        }
        marks.insert(m.clone(), Mark::Open);
        stack.push(m.clone());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, marks, stack) {
                return Some(c);
            }
        }
        stack.pop();
        marks.insert(m.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for m in edges.keys() {
        if let Some(c) = visit(m, edges, &mut marks, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

/// The import edges between the modules of the crate at `dir`.
fn edges_of(dir: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // A `src/bin/NAME.rs` is a crate of its own: left out.
    files.retain(|f| !f.starts_with(src.join("bin")));
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for f in &files {
        let here = module_of(&src, f);
        let text = std::fs::read_to_string(f).expect("read a source file");
        for path in named_paths(&code(&text), &here) {
            let to = deepest(&path, &modules);
            // A module naming its own items, or an ancestor's (`super::*`), is no edge between two
            // modules that could loop: an ancestor is where the module is declared.
            if to != here && !here.starts_with(&to) {
                edges.entry(here.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

fn show(circle: &[Vec<String>]) -> String {
    circle
        .iter()
        .map(|m| {
            if m.is_empty() {
                "crate".to_owned()
            } else {
                m.join("::")
            }
        })
        .collect::<Vec<_>>()
        .join(" -> ")
}

#[test]
fn no_crate_of_the_workspace_has_an_import_circle_between_its_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let crates = crates(&root);
    assert!(crates.len() >= 10, "{crates:?}");
    let mut circles = Vec::new();
    for dir in &crates {
        if let Some(c) = a_circle(&edges_of(dir)) {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            circles.push(format!("{}: {}", name.unwrap_or_default(), show(&c)));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles (move the shared item to a module of its own, or to the one that owns it):\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_reader_finds_a_circle_through_a_path_in_code_and_a_use_group() {
    let here = |m: &str| vec![m.to_owned()];
    let a = named_paths(
        "use crate::b::{Thing, c::Other};\nfn f() -> crate::d::X { todo() }\n",
        &here("a"),
    );
    assert_eq!(
        a,
        vec![
            vec!["b".to_owned(), "Thing".to_owned()],
            vec!["b".to_owned(), "c".to_owned(), "Other".to_owned()],
            vec!["d".to_owned(), "X".to_owned()],
        ]
    );
    let mut edges = BTreeMap::new();
    edges.insert(here("a"), BTreeSet::from([here("b")]));
    edges.insert(here("b"), BTreeSet::from([here("c")]));
    edges.insert(here("c"), BTreeSet::from([here("a")]));
    assert_eq!(
        show(&a_circle(&edges).expect("a circle")),
        "a -> b -> c -> a"
    );
    edges.insert(here("c"), BTreeSet::new());
    assert!(a_circle(&edges).is_none());
}

#[test]
fn comments_and_the_test_module_are_no_imports() {
    let text = "/// See [`crate::x`].\nuse crate::y::Y; // crate::z\n#[cfg(test)]\nmod tests {\n    use crate::w;\n}\n";
    let paths = named_paths(&code(text), &[]);
    assert_eq!(paths, vec![vec!["y".to_owned(), "Y".to_owned()]]);
}
