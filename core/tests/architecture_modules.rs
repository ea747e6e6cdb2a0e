//! docs/architecture.md's table of the job step's modules ("## The job step") names the tree as
//! it is: every file or folder it names exists under `core/src/`, and every module of
//! `core/src/jobstep/` (tests aside) and the probe's known inventory and second look are named.
//!
//! The job step's four entry points (the prolog's, the epilog's, the health check's `run` and
//! the watch's loop) stay split along their stages: no function of their files is longer than
//! [`MAX_FN_LINES`].

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

/// The files of the job step's four entry points, relative to `core/src/`.
const ENTRY_POINTS: [&str; 4] = [
    "jobstep/prolog.rs",
    "jobstep/epilog.rs",
    "jobstep/health.rs",
    "jobstep/watch/acting.rs",
];

/// The most lines a function of [`ENTRY_POINTS`] may span, from its `fn` line to its closing
/// brace.
const MAX_FN_LINES: usize = 60;

/// `source` with its comments and the insides of its string and character literals blanked
/// (newlines kept, so that a byte's line stays its line): what is left of braces is code.
fn code_only(source: &str) -> Vec<u8> {
    let b = source.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let start = i + 2 + hashes;
            let end = b[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |n| start + n + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, (j + 1).min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\''), or a lifetime ('a), left as it is.
            let end = if rest.get(1) == Some(&b'\\') {
                rest.iter()
                    .skip(3)
                    .position(|&c| c == b'\'')
                    .map(|n| i + 3 + n + 1)
            } else {
                let ch = source[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The index of the brace that closes the one at `open`.
fn closing_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces from byte {open}");
}

/// The end of the item that starts at `from`: its closing brace, or its `;` when it has no body.
fn item_end(code: &[u8], from: usize) -> Option<usize> {
    let at = from + code[from..].iter().position(|&c| c == b'{' || c == b';')?;
    Some(if code[at] == b';' {
        at
    } else {
        closing_brace(code, at)
    })
}

/// Every function with a body in `source`, outside the items under `#[cfg(test)]`: its name
/// and how many lines it spans, from its `fn` line to its closing brace.
fn function_lengths(source: &str) -> Vec<(String, usize)> {
    let code = code_only(source);
    let text = String::from_utf8_lossy(&code).into_owned();
    let line_of = |at: usize| code[..at].iter().filter(|&&c| c == b'\n').count();
    let tests: Vec<(usize, usize)> = text
        .match_indices("#[cfg(test)]")
        .filter_map(|(at, _)| item_end(&code, at).map(|end| (at, end)))
        .collect();
    let mut found = Vec::new();
    for (at, _) in text.match_indices("fn ") {
        let word_start = at == 0 || !(code[at - 1].is_ascii_alphanumeric() || code[at - 1] == b'_');
        if !word_start || tests.iter().any(|&(s, e)| (s..=e).contains(&at)) {
            continue;
        }
        let name: String = text[at + 3..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        let Some(end) = item_end(&code, at) else {
            continue;
        };
        if code[end] == b'}' {
            found.push((name, line_of(end) - line_of(at) + 1));
        }
    }
    found
}

#[test]
fn the_line_counter_sees_through_strings_comments_and_test_modules() {
    let source = r##"
fn short() {
    let s = "}}}{";
    let c = '}';
    let r = r#"{"#;
    // }
    /* { */
}

#[cfg(test)]
mod tests {
    fn hidden() {}
}

pub(crate) fn two<'a>(x: &'a str) -> &'a str { x }
trait T {
    fn declared(&self);
}
"##;
    let found = function_lengths(source);
    assert_eq!(
        found,
        vec![("short".to_owned(), 7), ("two".to_owned(), 1)],
        "{found:?}"
    );
    let long = format!(
        "fn long() {{\n{}}}\n",
        "    step();\n".repeat(MAX_FN_LINES - 1)
    );
    assert_eq!(
        function_lengths(&long),
        vec![("long".to_owned(), MAX_FN_LINES + 1)]
    );
}

#[test]
fn the_job_steps_entry_points_and_their_stages_stay_within_sixty_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut too_long = Vec::new();
    for file in ENTRY_POINTS {
        let source = std::fs::read_to_string(src.join(file)).expect("read an entry point's file");
        let found = function_lengths(&source);
        assert!(
            found.iter().any(|(name, _)| name == "run"),
            "core/src/{file} has no `fn run`: {found:?}"
        );
        too_long.extend(
            found
                .into_iter()
                .filter(|(_, lines)| *lines > MAX_FN_LINES)
                .map(|(name, lines)| format!("core/src/{file}: fn {name} is {lines} lines")),
        );
    }
    assert!(
        too_long.is_empty(),
        "split these along their stages (each a named function of at most {MAX_FN_LINES} lines): {too_long:#?}"
    );
}
