//! fabric-check never writes Slurm's `Comment` field: users and other tools keep their policy
//! there (docs/operations.md, "Coexistence with other AdminComment users"). Every write goes
//! through `SlurmCli`, which refuses one (`slurm.rs` unit test); this test reads the sources of
//! every program fabric-check ships and finds no `Comment=` outside `AdminComment=` and
//! `SystemComment=`, tests aside (they name other tools' calls that the shim passes through).

use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs")
            || p.parent().is_some_and(|d| d.ends_with("scripts"))
        {
            out.push(p);
        }
    }
}

#[test]
fn no_shipped_code_writes_the_comment_field() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in [
        "core/src",
        "cli/src",
        "spank-plugin/src",
        "wrapper/src",
        "proto/src",
        "report/src",
        "scripts",
    ] {
        sources(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "{} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        // Unit tests sit at the bottom of each Rust file.
        let shipped = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, line) in shipped.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for (at, _) in code.match_indices("Comment=") {
                let before = &code[..at];
                if !(before.ends_with("Admin") || before.ends_with("System")) {
                    found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                }
            }
            let lower = code.to_ascii_lowercase();
            if lower.contains("set comment") {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "writes of Comment:\n{}", found.join("\n"));
}
