//! Shared by the collective tests: a private munged, and N `fabric-check collective` ranks.
#![allow(dead_code)]

#[path = "../../../net/tests/common/munged.rs"]
pub mod munged;

use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// One rank's outcome.
#[derive(Debug)]
pub struct RankRun {
    /// Node name.
    pub node: String,
    /// Exit code.
    pub code: i32,
    /// Parsed stdout (`Value::Null` when it was not JSON).
    pub report: Value,
    /// Stdout as text.
    pub stdout: String,
    /// Stderr.
    pub stderr: String,
}

/// Runs one `fabric-check collective` per node in `run` at once (all of `nodes` are
/// participants) and waits for all. `extra(node)` adds per-node flags.
pub fn run_ranks(
    nodes: &[&str],
    run: &[&str],
    job_id: u64,
    common: &[String],
    extra: impl Fn(&str) -> Vec<String>,
) -> Vec<RankRun> {
    let children: Vec<_> = run
        .iter()
        .map(|node| {
            let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("fabric-check"));
            cmd.arg("collective")
                .arg("--nodes")
                .arg(nodes.join(","))
                .arg("--node")
                .arg(node)
                .arg("--job-id")
                .arg(job_id.to_string())
                .args(common)
                .args(extra(node))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            (node.to_string(), cmd.spawn().expect("spawn fabric-check"))
        })
        .collect();
    children
        .into_iter()
        .map(|(node, child)| {
            let Output {
                status,
                stdout,
                stderr,
            } = child.wait_with_output().unwrap();
            RankRun {
                node,
                code: status.code().unwrap_or(-1),
                report: serde_json::from_slice(&stdout).unwrap_or(Value::Null),
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            }
        })
        .collect()
}

/// The report without the per-node field, for comparing what ranks printed.
pub fn without_node(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("node");
        o.remove("duration_ms");
    }
    v
}

/// Node names as strings from a JSON array.
pub fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
