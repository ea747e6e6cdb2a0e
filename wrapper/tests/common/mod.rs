//! Shared helpers for fabric-run's integration tests. Records are decoded into the tests' own
//! types, not the library's, so a change of the record format breaks these tests.

#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fabric-run"))
}

/// `tests/fixtures/fake-train` at the workspace root.
pub fn fake_train() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/fake-train")
}

/// PATH with the binary's directory first, so `fabric-run mark` works inside jobs.
pub fn path_env() -> OsString {
    let mut p = OsString::from(bin().parent().unwrap());
    p.push(":");
    p.push(std::env::var_os("PATH").unwrap_or_default());
    p
}

/// A fabric-run command with a clean Slurm-free environment and PATH set.
pub fn fabric_run() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::new(bin());
    for v in [
        "SLURM_JOB_ID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURMD_NODENAME",
        "SLURM_STEP_ID",
        "SLURM_RESTART_COUNT",
        "FABRIC_RUN_SOCKET",
        "FABRIC_RUN_SPOOL",
        fabric_proto::record::PLUGIN_SPOOL_ENV,
    ] {
        c.env_remove(v);
    }
    c.env("PATH", path_env());
    c
}

/// One record line, as the tests read the documented format.
#[derive(Debug, Clone, Deserialize)]
pub struct Rec {
    #[serde(rename = "type")]
    pub kind: String,
    pub v: u32,
    pub ts: f64,
    pub run: String,
    pub node: String,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub job_id: Option<String>,
    pub step_id: Option<String>,
    pub restart_count: Option<u32>,
    pub duration_s: Option<f64>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub outcome: Option<String>,
    pub source: Option<String>,
    pub bytes: Option<u64>,
    pub n: Option<u64>,
    pub attempt: Option<u32>,
    pub attempts: Option<u32>,
    pub retry: Option<bool>,
    pub on_time: Option<bool>,
    pub validated: Option<bool>,
    pub sigterm: Option<bool>,
    pub cmd: Option<Vec<String>>,
    pub check: Option<String>,
    pub message: Option<String>,
    pub seen_at_s: Option<u64>,
    pub into_job_s: Option<u64>,
    pub drained: Option<bool>,
    pub sent_signal: Option<i32>,
    pub window_median_s: Option<f64>,
    pub run_median_s: Option<f64>,
    pub factor: Option<f64>,
    pub window: Option<u32>,
    pub steps: Option<u64>,
}

/// Every line of a records file, each of which must decode.
pub fn records(path: &Path) -> Vec<Rec> {
    let text = std::fs::read_to_string(path).expect("records file");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

/// Records of one type.
pub fn of(recs: &[Rec], kind: &str) -> Vec<Rec> {
    recs.iter().filter(|r| r.kind == kind).cloned().collect()
}

/// The single `step_end`.
pub fn step_end(recs: &[Rec]) -> Rec {
    let ends = of(recs, "step_end");
    assert_eq!(ends.len(), 1, "{recs:#?}");
    ends[0].clone()
}
