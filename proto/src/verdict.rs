//! Verdicts, severities and findings: what a check says and what the node's probe concludes.
//!
//! The probe document (`fabric-check/probe/v1`) carries them across the process boundary from
//! `fabric-check probe` to the job step, and the job tag carries the verdict into `sacct`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Said, never changes the verdict.
    Info,
    /// Degraded or unverifiable: exit 1.
    Warn,
    /// Unhealthy: exit 2; drains the node under the `enforce` policy.
    Fail,
}

impl Severity {
    /// `info`, `warn`, `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Fail => "fail",
        }
    }
}

/// The node's verdict, ordered from best to worst so that `max` gives a job's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// No warn or fail finding.
    Pass,
    /// At least one warn, no fail.
    Warn,
    /// At least one fail.
    Fail,
    /// The probe could not run.
    Error,
}

impl Verdict {
    /// Nagios convention: 0 pass, 1 warn, 2 fail, 3 could not run.
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Pass => 0,
            Verdict::Warn => 1,
            Verdict::Fail => 2,
            Verdict::Error => 3,
        }
    }

    /// `pass`, `warn`, `fail`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
            Verdict::Error => "error",
        }
    }

    /// The verdict the worst finding earns.
    pub fn from_findings(findings: &[Finding]) -> Self {
        match findings.iter().map(|f| f.severity).max() {
            Some(Severity::Fail) => Verdict::Fail,
            Some(Severity::Warn) => Verdict::Warn,
            _ => Verdict::Pass,
        }
    }
}

/// One thing a check says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The stable check id (`ib.port_state`).
    pub check: String,
    /// How bad.
    pub severity: Severity,
    /// The RDMA device (`mlx5_3`), or the GPU's PCI address for `gpu.*`; null when node-wide.
    pub device: Option<String>,
    /// The port number; null when not about one port.
    pub port: Option<u32>,
    /// What was seen.
    pub observed: Value,
    /// What was expected.
    pub expected: Value,
    /// One sentence an admin can act on (the netdev is named where one is involved).
    pub message: String,
}

impl Finding {
    /// A finding with every field given.
    pub fn new(
        check: &str,
        severity: Severity,
        device: Option<&str>,
        port: Option<u32>,
        observed: Value,
        expected: Value,
        message: String,
    ) -> Self {
        Self {
            check: check.to_string(),
            severity,
            device: device.map(str::to_string),
            port,
            observed,
            expected,
            message,
        }
    }
}
