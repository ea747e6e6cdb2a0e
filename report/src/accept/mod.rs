//! `fabric-check accept`: nccl-tests results and pinned BOMs in, an acceptance report out.
//!
//! * [`nccl_text`] reads nccl-tests' stdout tables in every layout its versions printed (with or
//!   without the `root` column, `error` or `#wrong`, per-iteration columns, `#`-less headers, MPI
//!   launcher prefixes); [`nccl_json`] reads the `-J` JSON file (with per-iteration statistics
//!   when `-I 1` was used). Both yield [`NcclRun`]s; broken input becomes a [`Problem`] with file
//!   and line, never a panic.
//! * [`analyse`] compares runs per message size (mean, spread, coefficient of variation,
//!   outlier runs and ranks), checks the node and GPU count, the BOMs' consistency and the
//!   [`thresholds::Thresholds`], and answers the purchase questions ([`questions`]) from evidence.
//! * [`render`] produces the same formats as the cost report.

pub mod analyse;
pub mod bom;
pub mod nccl_json;
pub mod nccl_text;
pub mod questions;
pub mod render;
pub mod thresholds;

use serde::Serialize;

/// A defect in an input: where, and what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    /// The file.
    pub file: String,
    /// 1-based line (0 when the whole file is concerned).
    pub line: u64,
    /// What is wrong and what to do.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        } else {
            write!(f, "{}: {}", self.file, self.message)
        }
    }
}

/// Per-iteration statistics (nccl-tests `-I 1`), microseconds and percent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct IterStats {
    /// Fastest iteration.
    pub min_us: Option<f64>,
    /// Slowest iteration.
    pub max_us: Option<f64>,
    /// 95th percentile (JSON only).
    pub p95_us: Option<f64>,
    /// 99th percentile.
    pub p99_us: Option<f64>,
    /// Coefficient of variation across iterations.
    pub cv_pct: Option<f64>,
}

/// One measurement (out-of-place or in-place) at one size.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Measure {
    /// Average time per operation, microseconds.
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s.
    pub algbw_gbps: f64,
    /// Bus bandwidth, GB/s.
    pub busbw_gbps: f64,
    /// Wrong elements (or the max error in old versions); None when not checked (`N/A`).
    pub wrong: Option<f64>,
    /// Per-iteration statistics when present.
    pub iter: Option<IterStats>,
    /// Per-process mean of the per-iteration max times (JSON with several processes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_process_mean_us: Vec<f64>,
}

/// One line of results.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SizeRow {
    /// Message size, bytes.
    pub size_b: u64,
    /// Element count.
    pub count: u64,
    /// Data type (`float`...).
    pub dtype: String,
    /// Reduction (`sum`, `none`...).
    pub redop: String,
    /// Root rank (-1 when not rooted; None in versions without the column).
    pub root: Option<i64>,
    /// Out-of-place result (absent in trace replay).
    pub out_of_place: Option<Measure>,
    /// In-place result.
    pub in_place: Option<Measure>,
    /// Line in the source file.
    #[serde(skip)]
    pub line: u64,
}

/// A rank's device as listed in the header.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Device {
    /// Rank.
    pub rank: u32,
    /// Host name.
    pub host: String,
    /// CUDA device index.
    pub device: u32,
    /// Device name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
}

/// One nccl-tests run (one file).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NcclRun {
    /// The file.
    pub file: String,
    /// `text` or `json`.
    pub form: &'static str,
    /// The test binary (`all_reduce_perf`) when the output names it.
    pub test: Option<String>,
    /// nccl-tests version line or NCCL version, when printed.
    pub version: Option<String>,
    /// Ranks listed.
    pub devices: Vec<Device>,
    /// Result rows.
    pub rows: Vec<SizeRow>,
    /// `Out of bounds values` count from the footer.
    pub out_of_bounds: Option<u64>,
    /// `Avg bus bandwidth` from the footer, GB/s.
    pub avg_busbw_gbps: Option<f64>,
}

impl NcclRun {
    /// Distinct hosts among the ranks.
    pub fn hosts(&self) -> std::collections::BTreeSet<&str> {
        self.devices.iter().map(|d| d.host.as_str()).collect()
    }
}

/// Reads one file of either form (JSON when its first non-blank byte is `{`).
pub fn read_run(file: &str, text: &str) -> (Option<NcclRun>, Vec<Problem>) {
    if text.trim_start().starts_with('{') {
        nccl_json::parse(file, text)
    } else {
        nccl_text::parse(file, text)
    }
}

/// Parses a size like `8G`, `256M`, `4K` or `1048576` (powers of 1024, as nccl-tests' `-b/-e`).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        'T' | 't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// Writes bytes the way nccl-tests' `-b/-e` accept them (`8G`, `512M`, `4K`, `12`).
pub fn fmt_size(b: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}
