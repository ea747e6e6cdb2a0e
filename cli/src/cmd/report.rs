//! `fabric-check report`: cost per accepted run and fabrics side by side, from Slurm accounting.
//!
//! Reads `sacct --json` or `sacct -P` output from a file (or `-` for stdin), or runs
//! `/usr/bin/sacct` itself (absolute path, separate arguments, no shell) with the filters given.

use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use fabric_report::cost::CostFile;
use fabric_report::report::aggregate::{self, Acc, Options};
use fabric_report::report::render::{Format, render_report};
use fabric_report::report::{GroupBy, ReportError, Streamed, sacct_json, sacct_text};

/// Arguments of `fabric-check report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// sacct output to read (`-` for stdin); without it, sacct is run with the filters below.
    /// `sacct -P` text with a column of the users' free text (JobName, Comment, WorkDir,
    /// SubmitLine, ...) is read with a warning, and refused beside AdminComment: save
    /// `sacct --json` instead, or leave those columns out.
    #[arg(long, short)]
    input: Option<PathBuf>,
    /// Form of --input: `json` (sacct --json), `text` (sacct -P) or `auto` (by the first byte).
    #[arg(long, default_value = "auto", value_parser = ["auto", "json", "text"])]
    input_format: String,
    /// For `sacct -P` text saved with --noheader (-n): the --format list it was made with
    /// (`State,JobID,Start,End,...`), since the input cannot name its columns itself.
    #[arg(long, value_name = "FORMAT")]
    input_columns: Option<String>,
    /// For `sacct -P` text: the --delimiter it was made with (default `|`; read from the header
    /// when there is one).
    #[arg(long, value_name = "DELIM")]
    input_delimiter: Option<String>,
    /// Cost file (TOML, see etc/cost.toml); without it only the usage figures are shown.
    #[arg(long)]
    cost: Option<PathBuf>,
    /// Field that makes the columns: partition, account, user, cluster or qos.
    #[arg(long, default_value = "partition")]
    group_by: GroupBy,
    /// Output format: table, markdown, csv, json or html.
    #[arg(long, short, default_value = "table")]
    format: Format,
    /// Write the report here instead of stdout.
    #[arg(long, short)]
    output: Option<PathBuf>,
    #[command(flatten)]
    filters: Box<Filters>,
    /// Worker threads for parsing (default: the CPUs available).
    #[arg(long)]
    threads: Option<usize>,
    /// A `fabric-check drill --format json` document: with `--format html`, the drill's section
    /// (scores, time-to-detect and recall/precision charts, findings) joins the report.
    #[arg(long, value_name = "FILE")]
    drill: Option<PathBuf>,
    /// The sacct binary to run (absolute path).
    #[arg(long, default_value = "/usr/bin/sacct", hide = true)]
    sacct: PathBuf,
    /// Longest the sacct run may take; at the limit it is killed, with whatever it started.
    #[arg(long, default_value = "300s", value_parser = humantime::parse_duration)]
    sacct_timeout: std::time::Duration,
}

/// Which jobs and which window (boxed: keeps the subcommand enum small).
#[derive(Debug, clap::Args)]
struct Filters {
    /// Window start (Unix seconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS, UTC); passed to sacct as -S.
    #[arg(long)]
    start: Option<String>,
    /// Window end (same forms); passed to sacct as -E.
    #[arg(long)]
    end: Option<String>,
    /// Only these partitions (comma-separated); passed to sacct as -r.
    #[arg(long)]
    partition: Option<String>,
    /// Only these accounts; passed to sacct as -A.
    #[arg(long)]
    account: Option<String>,
    /// Only these users; passed to sacct as -u (otherwise -a, all users).
    #[arg(long)]
    user: Option<String>,
}

/// Unix seconds from `--start`/`--end` ([`sacct_text::parse_when`]).
fn parse_when(s: &str, flag: &str) -> anyhow::Result<i64> {
    sacct_text::parse_when(s, flag).map_err(anyhow::Error::msg)
}

fn in_list(list: &Option<String>, v: &str) -> bool {
    list.as_deref().is_none_or(|l| l.split(',').any(|x| x == v))
}

/// Runs the subcommand and returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let costs = match &args.cost {
        Some(p) => Some(CostFile::load(p)?),
        None => None,
    };
    let when =
        |s: &Option<String>, flag: &str| s.as_deref().map(|s| parse_when(s, flag)).transpose();
    let (start, end) = (
        when(&args.filters.start, "--start")?,
        when(&args.filters.end, "--end")?,
    );
    let window = match (start, end) {
        (Some(a), Some(b)) => {
            if b <= a {
                bail!("--end must be after --start");
            }
            Some((a, b))
        }
        (Some(_), None) | (None, Some(_)) if args.input.is_some() => bail!(
            "give both --start and --end with --input: the window the report covers (without --input they are sacct's -S and -E)"
        ),
        _ => None,
    };
    if args.threads.is_some_and(|t| t == 0 || t > 1024) {
        bail!("--threads must be between 1 and 1024");
    }
    let opts = Options {
        group_by: args.group_by,
        window,
    };
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let filter = |j: &fabric_report::report::JobRecord| {
        in_list(&args.filters.partition, &j.partition)
            && in_list(&args.filters.account, &j.account)
            && in_list(&args.filters.user, &j.user)
    };
    let each = |acc: &mut Acc, j: fabric_report::report::JobRecord| {
        if filter(&j) {
            acc.add(j, &opts);
        }
    };
    let (streamed, source) = match &args.input {
        Some(path) => {
            let name = path.display().to_string();
            let mut reader: Box<dyn Read> = super::input::open(path, "--input")?;
            let mut head = [0u8; 1];
            let mut peeked = Vec::new();
            let json = match args.input_format.as_str() {
                "json" => true,
                "text" => false,
                _ => loop {
                    if reader
                        .read(&mut head)
                        .with_context(|| format!("cannot read {name} (given with --input)"))?
                        == 0
                    {
                        break true;
                    }
                    peeked.push(head[0]);
                    if !head[0].is_ascii_whitespace() {
                        break head[0] == b'{';
                    }
                },
            };
            let reader = std::io::Cursor::new(peeked).chain(reader);
            let result = if json {
                sacct_json::stream(reader, &name, threads, Acc::default, each)
            } else {
                sacct_text::stream_with(
                    BufReader::with_capacity(1 << 20, reader),
                    &name,
                    &sacct_text::TextLayout {
                        columns: args.input_columns.clone(),
                        delimiter: args.input_delimiter.clone(),
                        ..sacct_text::TextLayout::default()
                    },
                    threads,
                    Acc::default,
                    each,
                )
            };
            let streamed = result.map_err(|e: ReportError| {
                if path == Path::new("-") {
                    e
                } else {
                    e.with_line_from(path)
                }
            })?;
            (streamed, name)
        }
        None => (run_sacct(&args, threads, &each)?, "sacct".to_string()),
    };
    let mut report = aggregate::finish(Acc::merge_all(streamed.accs), &opts, costs.as_ref());
    report.note_input(&source, &streamed.notes);
    for w in &report.inputs.warnings {
        tracing::warn!("{w}");
    }
    let mut text = render_report(&report, args.format);
    if let Some(d) = &args.drill {
        text = with_drill(text, d, args.format)?;
    }
    match &args.output {
        Some(p) => {
            std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?
        }
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(0)
}

fn run_sacct(
    args: &Args,
    threads: usize,
    each: &(dyn Fn(&mut Acc, fabric_report::report::JobRecord) + Sync),
) -> anyhow::Result<Streamed<Acc>> {
    let mut words = vec!["-X", "-D", "-P", "-o", sacct_text::FIELDS];
    let start = match &args.filters.start {
        Some(s) => Some(sacct_text::utc_text(parse_when(s, "--start")?)),
        None => None,
    };
    let end = match &args.filters.end {
        Some(e) => Some(sacct_text::utc_text(parse_when(e, "--end")?)),
        None => None,
    };
    if let Some(s) = &start {
        words.extend(["-S", s]);
    }
    if let Some(e) = &end {
        words.extend(["-E", e]);
    }
    if let Some(p) = &args.filters.partition {
        words.extend(["-r", p]);
    }
    if let Some(a) = &args.filters.account {
        words.extend(["-A", a]);
    }
    match &args.filters.user {
        Some(u) => words.extend(["-u", u]),
        None => words.push("-a"),
    };
    let env = [("SLURM_TIME_FORMAT", "%s"), ("TZ", "UTC")];
    let parsed = super::input::sacct(&args.sacct, args.sacct_timeout)
        .run(&words, &env, |r| {
            sacct_text::stream(
                BufReader::with_capacity(1 << 20, r),
                "sacct",
                threads,
                Acc::default,
                each,
            )
        })
        .map_err(|e| super::input::sacct_error(e, &args.sacct, "--input"))?;
    Ok(parsed?)
}

/// The report's HTML with the drill's section (from its JSON document at `path`) before
/// `</body>`; other formats refuse `--drill`.
fn with_drill(text: String, path: &std::path::Path, format: Format) -> anyhow::Result<String> {
    if !matches!(format, Format::Html) {
        anyhow::bail!("--drill adds a section to the HTML report: use it with --format html");
    }
    let json = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the drill document {}", path.display()))?;
    let scores: fabric_drill::score::Scores = serde_json::from_str(&json).with_context(|| {
        format!(
            "{} is not a drill document: write one with `fabric-check drill --format json`",
            path.display()
        )
    })?;
    let section = fabric_drill::render::html_section(&scores);
    Ok(match text.rfind("</body>") {
        Some(at) => format!("{}{section}{}", &text[..at], &text[at..]),
        None => text + &section,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_become_the_utc_text_sacct_reads() {
        use sacct_text::utc_text;
        assert_eq!(utc_text(0), "1970-01-01T00:00:00");
        assert_eq!(utc_text(1_795_997_559), "2026-11-30T00:12:39");
        assert_eq!(utc_text(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(
            parse_when(&utc_text(1_700_000_000), "--start").unwrap(),
            1_700_000_000
        );
        assert_eq!(
            parse_when("2024-05-01", "--start").unwrap(),
            parse_when("2024-05-01T00:00", "--start").unwrap()
        );
        assert!(parse_when("", "--start").is_err());
    }
}
