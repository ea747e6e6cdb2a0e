//! nccl-tests' text output.
//!
//! Layout facts (from nccl-tests `src/common.cu` and `src/util.cu`, versions 2.0 to 2.19):
//!
//! * a header of two lines names the columns: `size count type redop root time algbw busbw #wrong
//!   time algbw busbw #wrong` today; versions before 2.10 had no `root` column and called the last
//!   column `error` (a max error printed with `%6.0e`, e.g. `0e+00`); `-I 1` adds `i_min i_max
//!   i_p99 i_cv%` after each half; `-C 1` prints `cputime` for `time`; `-T 1` appends a timestamp.
//!   The header starts with `#`, but launchers and log collectors sometimes drop it.
//! * numbers are printed by `getFloatStr`: `%.2f`, falling back to fewer decimals and then to
//!   scientific notation (`1.2e+03`) when the column is too narrow; `#wrong` is `%6g` or `N/A`.
//! * trace replay leaves the out-of-place half blank.
//! * rank lines: `#  Rank  0 Group  0 Pid  1234 on host device  0 [0x07] NVIDIA ...` (`Group`
//!   appeared in 2.11; the bus id became `[0000:07:00]` in later versions).
//! * footer: `# Out of bounds values : 0 OK` and `# Avg bus bandwidth    : 12.34`.
//! * MPI launchers prefix lines: Open MPI `--tag-output` writes `[1,0]<stdout>:`, `srun -l`
//!   writes `0: `, `mpirun -prepend-rank` writes `[0] `. The prefix is removed before parsing.

use super::{Device, IterStats, Measure, NcclRun, Problem, SizeRow};

/// Removes a launcher prefix.
pub fn strip_prefix(line: &str) -> &str {
    let t = line;
    if t.starts_with('[') {
        if let Some(i) = t.find("]<stdout>:").or_else(|| t.find("]<stderr>:")) {
            return &t[i + 10..];
        }
        // `[0] ` from -prepend-rank, `[host:12345] ` from some wrappers.
        if let Some(end) = t.find("] ")
            && end > 1
            && !t[1..end].contains(' ')
        {
            return &t[end + 2..];
        }
    }
    // `srun -l`: `12: `
    if let Some(i) = t.find(": ")
        && i > 0
        && i <= 6
        && t[..i].trim_start().chars().all(|c| c.is_ascii_digit())
    {
        return &t[i + 2..];
    }
    t
}

#[derive(Debug, Clone, Default)]
struct Layout {
    has_root: bool,
    /// Columns per half: time algbw busbw wrong [i_min i_max i_p99 i_cv%].
    per_iter: bool,
}

impl Layout {
    fn half(&self) -> usize {
        if self.per_iter { 8 } else { 4 }
    }
    fn pre(&self) -> usize {
        if self.has_root { 5 } else { 4 }
    }
}

fn header_layout(tokens: &[&str]) -> Option<Layout> {
    let t: Vec<&str> = tokens
        .iter()
        .map(|s| s.trim_start_matches('#'))
        .filter(|s| !s.is_empty())
        .collect();
    if t.first() != Some(&"size") || t.get(1) != Some(&"count") {
        return None;
    }
    Some(Layout {
        has_root: t.contains(&"root"),
        per_iter: t.contains(&"i_min"),
    })
}

fn num(s: &str) -> Option<f64> {
    match s {
        "N/A" => None,
        "nan" | "-nan" => Some(f64::NAN),
        "inf" => Some(f64::INFINITY),
        _ => s.parse::<f64>().ok(),
    }
}

fn measure(t: &[&str], per_iter: bool) -> Result<Measure, String> {
    let f = |i: usize, name: &str| -> Result<f64, String> {
        num(t[i]).ok_or_else(|| format!("{name} `{}` is not a number", t[i]))
    };
    let wrong = match t[3] {
        "N/A" => None,
        s => Some(num(s).ok_or_else(|| format!("#wrong `{s}` is not a number or N/A"))?),
    };
    let iter = if per_iter {
        Some(IterStats {
            min_us: Some(f(4, "i_min")?),
            max_us: Some(f(5, "i_max")?),
            p95_us: None,
            p99_us: Some(f(6, "i_p99")?),
            cv_pct: Some(f(7, "i_cv%")?),
        })
    } else {
        None
    };
    Ok(Measure {
        time_us: f(0, "time")?,
        algbw_gbps: f(1, "algbw")?,
        busbw_gbps: f(2, "busbw")?,
        wrong,
        iter,
        per_process_mean_us: Vec::new(),
    })
}

fn parse_row(tokens: &[&str], layout: &Layout) -> Result<SizeRow, String> {
    let pre = layout.pre();
    let half = layout.half();
    // A timestamp (`-T 1`) may follow: ignore anything after the two halves.
    let body = &tokens[pre.min(tokens.len())..];
    if tokens.len() < pre + half {
        return Err(format!(
            "{} fields where a result line has at least {}; is the line cut?",
            tokens.len(),
            pre + half
        ));
    }
    let size_b = tokens[0]
        .parse::<u64>()
        .map_err(|_| format!("size `{}` is not a byte count", tokens[0]))?;
    let count = tokens[1]
        .parse::<u64>()
        .map_err(|_| format!("count `{}` is not an element count", tokens[1]))?;
    let root = if layout.has_root {
        Some(
            tokens[4]
                .parse::<i64>()
                .map_err(|_| format!("root `{}` is not a rank", tokens[4]))?,
        )
    } else {
        None
    };
    let (oop, ip) = if body.len() >= 2 * half && num(body[half]).is_some() {
        (
            Some(measure(&body[..half], layout.per_iter)?),
            Some(measure(&body[half..2 * half], layout.per_iter)?),
        )
    } else {
        // Trace replay: only the in-place half is printed.
        (None, Some(measure(&body[..half], layout.per_iter)?))
    };
    Ok(SizeRow {
        size_b,
        count,
        dtype: tokens[2].to_string(),
        redop: tokens[3].to_string(),
        root,
        out_of_place: oop,
        in_place: ip,
        line: 0,
    })
}

fn parse_device(rest: &str) -> Option<Device> {
    let t: Vec<&str> = rest.split_whitespace().collect();
    let at = |k: &str| t.iter().position(|x| *x == k);
    let rank = t.get(at("Rank")? + 1)?.parse().ok()?;
    let host = t.get(at("on")? + 1)?.to_string();
    let device = t.get(at("device")? + 1)?.parse().ok()?;
    let name = rest
        .find(']')
        .map_or(String::new(), |i| rest[i + 1..].trim().to_string());
    Some(Device {
        rank,
        host,
        device,
        name,
    })
}

/// Parses one file's text.
pub fn parse(file: &str, text: &str) -> (Option<NcclRun>, Vec<Problem>) {
    let mut run = NcclRun {
        file: file.to_string(),
        form: "text",
        ..NcclRun::default()
    };
    let mut problems = Vec::new();
    let mut layout: Option<Layout> = None;
    let mut last_row_line = 0u64;
    let mut saw_footer = false;
    let mut problem = |line: u64, message: String| {
        problems.push(Problem {
            file: file.to_string(),
            line,
            message,
        })
    };
    for (i, raw) in text.lines().enumerate() {
        let no = i as u64 + 1;
        let line = strip_prefix(raw.trim_end_matches('\r'));
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let comment = trimmed.strip_prefix('#').map(str::trim);
        let tokens: Vec<&str> = trimmed.split_whitespace().collect();
        if let Some(l) = header_layout(&tokens) {
            layout = Some(l);
            continue;
        }
        if let Some(c) = comment {
            if let Some(v) = c.strip_prefix("nccl-tests version") {
                run.version = Some(format!("nccl-tests {}", v.trim()));
            } else if let Some(v) = c.strip_prefix("Collective test starting:") {
                run.test = Some(v.trim().to_string());
            } else if c.starts_with("Rank") {
                match parse_device(c) {
                    Some(d) => run.devices.push(d),
                    None => problem(
                        no,
                        "a rank line without `Rank N ... on HOST device N`; is the header cut?"
                            .into(),
                    ),
                }
            } else if let Some(v) = c.strip_prefix("Out of bounds values") {
                run.out_of_bounds = v
                    .trim_start_matches([' ', ':'])
                    .split_whitespace()
                    .next()
                    .and_then(|x| x.parse().ok());
            } else if let Some(v) = c.strip_prefix("Avg bus bandwidth") {
                saw_footer = true;
                run.avg_busbw_gbps = v
                    .trim_start_matches([' ', ':'])
                    .split_whitespace()
                    .next()
                    .and_then(num);
            }
            continue;
        }
        // A result line starts with the size in bytes.
        if tokens
            .first()
            .is_some_and(|t| t.chars().all(|c| c.is_ascii_digit()))
            && tokens.len() >= 3
        {
            let Some(l) = &layout else {
                problem(
                    no,
                    "a result line before any column header; is the start of the output missing?"
                        .into(),
                );
                continue;
            };
            match parse_row(&tokens, l) {
                Ok(mut r) => {
                    r.line = no;
                    last_row_line = no;
                    run.rows.push(r);
                }
                Err(e) => problem(no, e),
            }
        }
        // Anything else (NCCL INFO lines, warnings) is not ours to judge.
    }
    if run.rows.is_empty() {
        problem(
            0,
            if layout.is_some() {
                "the column header is there but no result line follows; did the test crash?".into()
            } else {
                "no nccl-tests result table found; is this nccl-tests output?".into()
            },
        );
        return (None, problems);
    }
    if !saw_footer {
        problem(
            last_row_line,
            "the output ends without the `Avg bus bandwidth` footer after this line (truncated or the test crashed); re-run it".into(),
        );
    }
    (Some(run), problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_prefixes_are_removed() {
        assert_eq!(strip_prefix("[1,0]<stdout>:#  Rank  0"), "#  Rank  0");
        assert_eq!(strip_prefix("0: #  Rank  0"), "#  Rank  0");
        assert_eq!(strip_prefix("[3] 1024 256 float"), "1024 256 float");
        assert_eq!(
            strip_prefix("#  Rank  0 on h device 0 [0x07] GPU"),
            "#  Rank  0 on h device 0 [0x07] GPU"
        );
    }

    #[test]
    fn a_row_in_scientific_notation_parses() {
        let l = Layout {
            has_root: false,
            per_iter: false,
        };
        let t: Vec<&str> =
            "8589934592 2147483648 float sum 1.2e+05 71.40 133.88 0e+00 1.2e+05 71.45 133.97 0e+00"
                .split_whitespace()
                .collect();
        let r = parse_row(&t, &l).unwrap();
        assert_eq!(r.out_of_place.unwrap().time_us, 1.2e5);
        assert_eq!(r.in_place.unwrap().wrong, Some(0.0));
        assert_eq!(r.root, None);
    }
}
