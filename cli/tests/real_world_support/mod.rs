//! Shared by the `real_world_*` suites: where the corpus of outputs captured on real clusters
//! lives, and small helpers to run the binary on it.
//!
//! The corpus is not part of the project (its files came from other projects). It is read
//! from `../shared/real-world` relative to the repository root, or from the folder named by
//! `FABRIC_REAL_WORLD`. Without it each test of these suites skips, saying so once on stderr
//! (outside the test harness's capture) — unless the corpus is required: in CI (`CI` set, as
//! every CI service sets it) or with `FABRIC_REQUIRE_REAL_WORLD=1` (`scripts/test` sets it),
//! a missing corpus fails every test, naming the variable: there a suite that passes without
//! reading it would prove nothing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// The environment variable naming the corpus folder.
pub const ENV: &str = "FABRIC_REAL_WORLD";

/// The environment variable that makes a missing corpus a failure outside CI.
pub const REQUIRE_ENV: &str = "FABRIC_REQUIRE_REAL_WORLD";

/// Whether a missing corpus fails the tests: `CI` set to anything but `false`/`0`/empty, or
/// `FABRIC_REQUIRE_REAL_WORLD=1`.
pub fn required() -> bool {
    let set = |name: &str| {
        std::env::var(name)
            .map(|v| !matches!(v.trim(), "" | "0" | "false"))
            .unwrap_or(false)
    };
    set("CI") || set(REQUIRE_ENV)
}

/// The folder the corpus is looked for in.
pub fn corpus_dir() -> PathBuf {
    std::env::var_os(ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/real-world"))
}

/// True when the corpus is missing and not required: the caller returns (skips). Says so once
/// per test binary on stderr, bypassing the harness's capture so that a plain `cargo test`
/// shows it. Panics with how to provide the corpus when it is required.
pub fn absent() -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    match locate(&corpus_dir()) {
        Ok(_) => false,
        Err(m) if required() => panic!("{m}"),
        Err(m) => {
            SAID.call_once(|| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: the real-world corpus tests of this binary: {m} (set {REQUIRE_ENV}=1 or CI to make this a failure)"
                );
            });
            true
        }
    }
}

/// Skips the calling test (returns) when the corpus is absent and not required.
#[macro_export]
macro_rules! skip_without_corpus {
    () => {
        if $crate::real_world_support::absent() {
            return;
        }
    };
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The corpus folder; panics with how to provide it when it is missing.
pub fn corpus() -> PathBuf {
    locate(&corpus_dir()).unwrap_or_else(|m| panic!("{m}"))
}

/// `dir` when it holds the corpus, else the message that says how to provide it.
pub fn locate(dir: &Path) -> Result<PathBuf, String> {
    if dir.join("MANIFEST.md").is_file() {
        Ok(dir.to_path_buf())
    } else {
        Err(format!(
            "the real-world corpus is not at {} (no MANIFEST.md there): set {ENV} to the folder that holds it (CI provides it; without it these tests skip outside CI and fail in CI or with FABRIC_REQUIRE_REAL_WORLD=1)",
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
