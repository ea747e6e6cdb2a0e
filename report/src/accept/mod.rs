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
pub mod sweep;
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
    /// `warn`: the input is used as far as it goes (a truncated run, an elided table, an
    /// inferred header); `fail`: the input could not be used.
    pub severity: &'static str,
}

impl Problem {
    /// A problem that makes the input unusable.
    pub fn fail(file: &str, line: u64, message: String) -> Self {
        Self {
            file: file.to_string(),
            line,
            message,
            severity: "fail",
        }
    }

    /// Whether the input is still used.
    pub fn is_warning(&self) -> bool {
        self.severity == "warn"
    }
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
    /// Wrong elements; None when not checked (`N/A`) or when the column is the old `error`.
    pub wrong: Option<f64>,
    /// The old `error` column: the largest deviation from the expected result (`1e-06`), not
    /// a count; its verdict is the footer's `Out of bounds values`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_error: Option<f64>,
    /// Per-iteration statistics when present.
    pub iter: Option<IterStats>,
    /// Per-process mean of the per-iteration max times (JSON with several processes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_process_mean_us: Vec<f64>,
}

impl Measure {
    /// Whether the result was checked: `#wrong` a count or `error` a max error, not `N/A`.
    pub fn checked(&self) -> bool {
        self.wrong.is_some() || self.max_error.is_some()
    }
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

/// One nccl-tests run (one invocation of a test binary; a file can hold several).
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
    /// The average bus bandwidth, GB/s: the footer's `Avg bus bandwidth` when the output has
    /// one, else the mean over the rows read ([`NcclRun::avg_busbw_from_rows`]).
    pub avg_busbw_gbps: Option<f64>,
    /// Whether `avg_busbw_gbps` is the footer's.
    pub avg_busbw_from_footer: bool,
}

impl NcclRun {
    /// Distinct hosts among the ranks.
    pub fn hosts(&self) -> std::collections::BTreeSet<&str> {
        self.devices.iter().map(|d| d.host.as_str()).collect()
    }

    /// Ranks in the run: the highest rank listed plus one (a device list elided with `...`
    /// lists fewer), 0 when none is listed.
    pub fn rank_count(&self) -> usize {
        let distinct: std::collections::BTreeSet<u32> =
            self.devices.iter().map(|d| d.rank).collect();
        distinct
            .last()
            .map_or(0, |m| (*m as usize + 1).max(distinct.len()))
    }

    /// Whether every rank up to the highest one is listed (no `...` gap, no cut list).
    pub fn device_list_complete(&self) -> bool {
        let distinct: std::collections::BTreeSet<u32> =
            self.devices.iter().map(|d| d.rank).collect();
        distinct.len() == self.rank_count()
    }

    /// The mean bus bandwidth over every out-of-place and in-place result of the rows, as
    /// nccl-tests computes its `Avg bus bandwidth` footer (from the printed, rounded values).
    pub fn avg_busbw_from_rows(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .rows
            .iter()
            .flat_map(|r| [r.out_of_place.as_ref(), r.in_place.as_ref()])
            .flatten()
            .map(|m| m.busbw_gbps)
            .filter(|b| b.is_finite())
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Whether any result of the run was checked (`#wrong` a count, or the old `error` a max
    /// error): with validation off (`-c 0`) every one is `N/A`, and the footer's
    /// `Out of bounds values : 0 OK` then says nothing about correctness.
    pub fn validated(&self) -> bool {
        self.rows
            .iter()
            .flat_map(|r| [r.out_of_place.as_ref(), r.in_place.as_ref()])
            .flatten()
            .any(Measure::checked)
    }

    /// The collective: the binary named by the output (`all_reduce_perf` → `all_reduce`), else
    /// what the rows show, as nccl-tests' sources print them:
    ///
    /// * `root` ≥ 0: reduce (with a reduction), else broadcast, scatter or gather;
    /// * in-place `#wrong` `N/A` on every row while out-of-place results are checked: the tests
    ///   that never check in place, alltoall (printing `none`) and sendrecv (printing the
    ///   operation, busbw = algbw); all_reduce always checks in place;
    /// * busbw/algbw: 2(n−1)/n all_reduce (the only factor above 1), (n−1)/n reduce_scatter and
    ///   all_gather, 1 sendrecv (n ranks, when the device list gives them);
    ///
    /// alternatives (`all_reduce or sendrecv`: validation off, 2 ranks) when the rows leave
    /// several, `None` (the collective is unknown) when they leave none.
    pub fn collective(&self) -> Option<String> {
        if let Some(t) = &self.test {
            return Some(collective_of_binary(t));
        }
        let r = self
            .rows
            .iter()
            .filter(|r| r.out_of_place.as_ref().is_some_and(|m| m.algbw_gbps >= 1.0))
            .max_by_key(|r| r.size_b)
            .or_else(|| self.rows.iter().max_by_key(|r| r.size_b))?;
        let m = r.out_of_place.as_ref()?;
        let f = m.busbw_gbps / m.algbw_gbps;
        let n = self.rank_count() as f64;
        let near = |want: f64| (f - want).abs() < 0.02 * want.max(0.05);
        let rooted = r.root.is_some_and(|x| x >= 0);
        let reducing = r.redop != "none";
        let halves = |half: fn(&SizeRow) -> Option<&Measure>| {
            self.rows.iter().filter_map(half).any(Measure::checked)
        };
        let oop_checked = halves(|r| r.out_of_place.as_ref());
        let ip_checked = halves(|r| r.in_place.as_ref());
        if rooted {
            let c = if reducing {
                "reduce"
            } else {
                "broadcast, scatter or gather"
            };
            return Some(c.to_string());
        }
        if oop_checked && !ip_checked {
            return match () {
                _ if !reducing => Some("alltoall".to_string()),
                _ if near(1.0) => Some("sendrecv".to_string()),
                _ => None,
            };
        }
        // Out of the tests without a root, those a ratio of `f` allows; sendrecv and alltoall
        // only when in place was not checked either (validation off).
        let known_n = n > 1.0;
        let mut could: Vec<&str> = Vec::new();
        if reducing {
            if (known_n && near(2.0 * (n - 1.0) / n)) || (!known_n && (f > 1.02 || near(1.0))) {
                could.push("all_reduce");
            }
            if (known_n && near((n - 1.0) / n)) || (!known_n && f < 0.98) {
                could.push("reduce_scatter");
            }
            if !ip_checked && near(1.0) {
                could.push("sendrecv");
            }
        } else if (known_n && near((n - 1.0) / n)) || (!known_n && f < 0.98) {
            could.push("all_gather");
            if !ip_checked {
                could.push("alltoall");
            }
        }
        match could.as_slice() {
            [] if reducing && r.root.is_none() => Some("all_reduce or reduce_scatter".to_string()),
            [] => None,
            several => Some(several.join(" or ")),
        }
    }
}

/// The collective a test binary measures: `all_gather_perf` and the MPI build's
/// `all_gather_perf_mpi` (or a path to either) are `all_gather`.
pub fn collective_of_binary(binary: &str) -> String {
    let name = binary.rsplit('/').next().unwrap_or(binary).trim();
    let name = name.strip_suffix("_mpi").unwrap_or(name);
    name.strip_suffix("_perf").unwrap_or(name).to_string()
}

/// Reads one file of either form (JSON when its first non-blank byte is `{`): the runs it
/// holds (a text log can hold several invocations, see [`nccl_text::parse`]) and its problems.
pub fn read_runs(file: &str, text: &str) -> (Vec<NcclRun>, Vec<Problem>) {
    if text.trim_start().starts_with('{') {
        let (run, problems) = nccl_json::parse(file, text);
        (run.into_iter().collect(), problems)
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
