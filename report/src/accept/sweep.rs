//! The message sizes a run asked for, and the ones its rows leave out.
//!
//! nccl-tests (and rccl-tests) print what they were asked for before the table:
//! `# nThread 1 nGpus 1 minBytes 524288 maxBytes 17179869184 step: 2(factor) ...` (or
//! `step: 1048576(bytes)`), lowered by `# Reducing maxBytes to N due to memory limitation`;
//! a log may also hold the command line (`all_reduce_perf -b 512K -e 16G -f 2`). The test then
//! measures `minBytes`, stepping by the factor (or adding the bytes) while the size stays at or
//! below `maxBytes`, once per data type, reduction and root. A row prints the size the test
//! really moved, rounded down to whole elements per rank (`all_gather` on 16 ranks prints 0
//! for 8 bytes), never more than asked.
//!
//! An excerpt whose rows do not cover those sizes is not the whole run: the footer's
//! `Avg bus bandwidth` then averages rows that are not there.

use std::collections::BTreeMap;

use super::{SizeRow, fmt_size};

/// How the sizes grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Multiply by this (`-f`, `step: 2(factor)`).
    Factor(u64),
    /// Add this many bytes (`-i`, `step: 1048576(bytes)`).
    Bytes(u64),
}

/// The sizes one run asked for, and where that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    /// Line of the header or command line that says it.
    pub line: u64,
    /// `the header's minBytes/maxBytes` or `the command line's -b/-e`.
    pub source: &'static str,
    /// Smallest size, bytes.
    pub min_b: u64,
    /// Largest size, bytes.
    pub max_b: u64,
    /// Growth.
    pub step: Step,
}

/// More sizes than this are not listed (a byte step over a wide range): coverage is not judged.
const MAX_SIZES: usize = 4096;

/// nccl-tests' defaults when the command line leaves a flag out.
const DEFAULT_MIN_B: u64 = 32 << 20;
const DEFAULT_STEP_B: u64 = 1 << 20;

impl Sweep {
    /// Reads the header line after its `#`: `nThread 1 nGpus 1 minBytes 8 maxBytes 16 step:
    /// 2(factor) ...`.
    pub fn from_header(comment: &str, line: u64) -> Option<Self> {
        let t: Vec<&str> = comment.split_whitespace().collect();
        let after = |k: &str| t.iter().position(|x| *x == k).and_then(|i| t.get(i + 1));
        let min_b = after("minBytes")?.parse().ok()?;
        let max_b = after("maxBytes")?.parse().ok()?;
        let step = after("step:")?;
        let (n, kind) = step.split_once('(')?;
        let n: u64 = n.parse().ok()?;
        let step = match kind.trim_end_matches(')') {
            "factor" if n > 1 => Step::Factor(n),
            "bytes" => Step::Bytes(n),
            _ => return None,
        };
        Some(Self {
            line,
            source: "the header's minBytes/maxBytes",
            min_b,
            max_b,
            step,
        })
    }

    /// Reads a command line that starts a test binary (`..._perf` or `..._perf_mpi`): the
    /// binary, and the sizes its `-b/-e/-f/-i` (or `--minbytes`...) ask for, nccl-tests'
    /// defaults filling the flags left out. `None` when the line starts no test.
    pub fn from_command(text: &str, line: u64) -> Option<(String, Self)> {
        let t: Vec<&str> = text.split_whitespace().collect();
        let at = t.iter().position(|w| {
            let base = w.rsplit('/').next().unwrap_or(w);
            let base = base.strip_suffix("_mpi").unwrap_or(base);
            base.len() > 5 && base.ends_with("_perf")
        })?;
        let (mut min_b, mut max_b) = (None, None);
        let (mut factor, mut bytes) = (None, None);
        let mut i = at + 1;
        while i < t.len() {
            let (flag, inline) = match t[i].split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v)),
                _ if t[i].len() > 2 && !t[i].starts_with("--") && t[i].starts_with('-') => {
                    (&t[i][..2], Some(&t[i][2..]))
                }
                _ => (t[i], None),
            };
            let value = match inline {
                Some(v) => Some(v),
                None => {
                    i += 1;
                    t.get(i).copied()
                }
            };
            let size = value.and_then(super::parse_size);
            match flag {
                "-b" | "--minbytes" => min_b = size,
                "-e" | "--maxbytes" => max_b = size,
                "-f" | "--stepfactor" => factor = size,
                "-i" | "--stepbytes" => bytes = size,
                // Every other flag takes a value too (`-g 1`, `-c 0`); a bare word ends them.
                f if f.starts_with('-') => {}
                _ => break,
            }
            i += 1;
        }
        let min_b = min_b.unwrap_or(DEFAULT_MIN_B);
        let step = match factor {
            Some(f) if f > 1 => Step::Factor(f),
            _ => Step::Bytes(bytes.unwrap_or(DEFAULT_STEP_B)),
        };
        let sweep = Self {
            line,
            source: "the command line's -b/-e",
            min_b,
            max_b: max_b.unwrap_or(min_b.max(DEFAULT_MIN_B)),
            step,
        };
        Some((t[at].to_string(), sweep))
    }

    /// The sizes asked for, smallest first; `None` when there are more than 4096 or
    /// the step cannot move (0 bytes).
    pub fn sizes(&self) -> Option<Vec<u64>> {
        let mut v = Vec::new();
        let mut s = self.min_b;
        while s <= self.max_b {
            if v.len() == MAX_SIZES {
                return None;
            }
            v.push(s);
            s = match self.step {
                Step::Factor(f) => s.checked_mul(f)?,
                Step::Bytes(0) => return None,
                Step::Bytes(b) => s.checked_add(b)?,
            };
            if s == 0 {
                return None;
            }
        }
        Some(v)
    }

    /// The sizes asked for that no row shows, for any data type, reduction and root the rows
    /// have; `cut`: the output stops early, so sizes above a sweep's last row are explained by
    /// the cut and not listed. `None` when the sizes cannot be listed.
    pub fn missing(&self, rows: &[SizeRow], ranks: usize, cut: bool) -> Option<Vec<u64>> {
        let asked = self.sizes()?;
        let mut sweeps: BTreeMap<(&str, &str, Option<i64>), Vec<u64>> = BTreeMap::new();
        for r in rows {
            sweeps
                .entry((r.dtype.as_str(), r.redop.as_str(), r.root))
                .or_default()
                .push(r.size_b);
        }
        let mut missing: Vec<u64> = Vec::new();
        for ((dtype, _, _), shown) in &mut sweeps {
            // A row rounds its size down by less than one element per rank, and never below
            // the size asked for before it unless by that rounding.
            let slack = word_size(dtype) * ranks.max(1) as u64;
            shown.sort_unstable();
            let last = shown.last().copied().unwrap_or(0);
            let (mut next, mut below) = (0, 0);
            for &s in &asked {
                // Rows at or below `lo` can cover no size from here on.
                let lo = s.checked_sub(slack).map(|d| d.min(below));
                while lo.is_some_and(|lo| next < shown.len() && shown[next] <= lo) {
                    next += 1;
                }
                if next < shown.len() && shown[next] <= s {
                    next += 1;
                } else if !(cut && s > last) {
                    missing.push(s);
                }
                below = s;
            }
        }
        missing.sort_unstable();
        missing.dedup();
        Some(missing)
    }

    /// `512K to 16G, factor 2` / `8 to 3M, +1M`.
    pub fn describe(&self) -> String {
        let step = match self.step {
            Step::Factor(f) => format!("factor {f}"),
            Step::Bytes(b) => format!("+{}", fmt_size(b)),
        };
        format!(
            "{} to {}, {step}",
            fmt_size(self.min_b),
            fmt_size(self.max_b)
        )
    }

    /// The missing sizes as ranges of consecutive sizes asked for: `512K–4G, 64M`.
    pub fn ranges(&self, missing: &[u64]) -> String {
        let asked = self.sizes().unwrap_or_default();
        let mut out: Vec<String> = Vec::new();
        let mut run: Option<(u64, u64)> = None;
        for s in asked {
            match (missing.binary_search(&s).is_ok(), run) {
                (true, None) => run = Some((s, s)),
                (true, Some((a, _))) => run = Some((a, s)),
                (false, Some(r)) => {
                    out.push(range(r));
                    run = None;
                }
                (false, None) => {}
            }
        }
        out.extend(run.map(range));
        out.join(", ")
    }
}

fn range((a, b): (u64, u64)) -> String {
    if a == b {
        fmt_size(a)
    } else {
        format!("{}–{}", fmt_size(a), fmt_size(b))
    }
}

/// Bytes per element of a data type as nccl-tests names it; 8 (the widest) when unknown.
fn word_size(dtype: &str) -> u64 {
    match dtype {
        "int8" | "uint8" | "char" | "f8e4m3" | "f8e5m2" | "fp8_e4m3" | "fp8_e5m2" => 1,
        "half" | "float16" | "bfloat16" | "fp16" | "bf16" => 2,
        "float" | "float32" | "int32" | "uint32" | "int" => 4,
        _ => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(size_b: u64) -> SizeRow {
        SizeRow {
            size_b,
            dtype: "float".into(),
            redop: "sum".into(),
            root: Some(-1),
            ..SizeRow::default()
        }
    }

    #[test]
    fn the_header_line_gives_the_sizes_asked_for() {
        let s = Sweep::from_header(
            "nThread 1 nGpus 1 minBytes 524288 maxBytes 17179869184 step: 2(factor) warmup iters: 1",
            2,
        )
        .unwrap();
        assert_eq!(s.sizes().unwrap().len(), 16);
        assert_eq!(s.describe(), "512K to 16G, factor 2");
        let s = Sweep::from_header("nThread 1 minBytes 8 maxBytes 24 step: 8(bytes)", 1).unwrap();
        assert_eq!(s.sizes().unwrap(), [8, 16, 24]);
    }

    #[test]
    fn a_command_line_gives_the_binary_and_the_sizes_with_defaults_for_flags_left_out() {
        let (bin, s) = Sweep::from_command(
            "+ srun --mpi=pmix ./build/all_gather_perf -b 512K -e 16G -f 2 -g 1",
            3,
        )
        .unwrap();
        assert_eq!(bin, "./build/all_gather_perf");
        assert_eq!(
            (s.min_b, s.max_b, s.step),
            (512 << 10, 16 << 30, Step::Factor(2))
        );
        let (_, s) = Sweep::from_command("all_reduce_perf_mpi --minbytes=1M -e8M", 1).unwrap();
        assert_eq!(
            (s.min_b, s.max_b, s.step),
            (1 << 20, 8 << 20, Step::Bytes(1 << 20))
        );
        assert!(Sweep::from_command("mpirun -np 16 hostname", 1).is_none());
    }

    #[test]
    fn rows_rounded_down_per_rank_cover_their_size_and_missing_ones_read_as_ranges() {
        let s = Sweep::from_header("minBytes 8 maxBytes 128 step: 2(factor)", 1).unwrap();
        // all_gather on 16 ranks: 8, 16 and 32 bytes are less than one float per rank.
        let rows: Vec<SizeRow> = [0, 0, 0, 64, 128].into_iter().map(row).collect();
        assert_eq!(s.missing(&rows, 16, false).unwrap(), Vec::<u64>::new());
        let rows: Vec<SizeRow> = [8, 128].into_iter().map(row).collect();
        let m = s.missing(&rows, 1, false).unwrap();
        assert_eq!(m, [16, 32, 64]);
        assert_eq!(s.ranges(&m), "16–64");
        // Cut after 16: what follows the last row is the cut's, not the excerpt's.
        let rows: Vec<SizeRow> = [8, 16].into_iter().map(row).collect();
        assert!(s.missing(&rows, 1, true).unwrap().is_empty());
    }
}
