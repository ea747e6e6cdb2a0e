//! Shared by the `real_world_*` suites: where the corpus of outputs captured on real clusters
//! lives, and small helpers to run the binary on it.
//!
//! The corpus is not part of the project (its files came from other projects). It is read
//! from `../shared/real-world` relative to the repository root, or from the folder named by
//! `FABRIC_REAL_WORLD`. Without it these suites fail, naming the variable: CI has the corpus,
//! and a suite that passes without reading it would prove nothing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// The environment variable naming the corpus folder.
pub const ENV: &str = "FABRIC_REAL_WORLD";

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The corpus folder; panics with how to provide it when it is missing.
pub fn corpus() -> PathBuf {
    let dir = std::env::var_os(ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/real-world"));
    locate(&dir).unwrap_or_else(|m| panic!("{m}"))
}

/// `dir` when it holds the corpus, else the message that says how to provide it.
pub fn locate(dir: &Path) -> Result<PathBuf, String> {
    if dir.join("MANIFEST.md").is_file() {
        Ok(dir.to_path_buf())
    } else {
        Err(format!(
            "the real-world corpus is not at {} (no MANIFEST.md there): set {ENV} to the folder that holds it (CI provides it; these tests never pass without reading it)",
            dir.display()
        ))
    }
}

/// A file of the corpus, which must exist.
pub fn file(rel: &str) -> PathBuf {
    let p = corpus().join(rel);
    assert!(p.exists(), "corpus file {} is missing", p.display());
    p
}

/// The text of a corpus file.
pub fn text(rel: &str) -> String {
    std::fs::read_to_string(file(rel)).unwrap()
}

/// Runs `fabric-check ARGS`: (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `fabric-check probe --format json --node n1 --sysfs-root ROOT EXTRA...`: (exit code,
/// document).
pub fn probe(root: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "probe",
        "--format",
        "json",
        "--node",
        "n1",
        "--sysfs-root",
        root.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (rc, out, err) = run(&args);
    let doc: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("probe stdout is not one JSON document ({e}): {out}\n{err}"));
    (rc, doc)
}

/// The findings of a probe document.
pub fn findings(doc: &Value) -> Vec<Value> {
    doc["findings"].as_array().unwrap().clone()
}

/// The findings of one check and severity.
pub fn with(doc: &Value, check: &str, severity: &str) -> Vec<Value> {
    findings(doc)
        .into_iter()
        .filter(|f| f["check"] == check && f["severity"] == severity)
        .collect()
}

/// The message of a finding.
pub fn msg(f: &Value) -> &str {
    f["message"].as_str().unwrap()
}

/// Writes `text` to `path`, creating its folders.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}
