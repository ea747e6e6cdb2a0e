//! `fabric-check jobs`: the admin's question answered directly — which jobs ran on a degraded
//! fabric, on which nodes, with which checks failing, what was drained and how the run went.
//!
//! Runs `/usr/bin/sacct -X -P -o <fabric_report::jobs::FIELDS>` (absolute path, separate
//! arguments, no shell; times as Unix seconds) with the window and filters given, or reads a
//! saved output of that command (`--sacct-file`, `-` for stdin). sacct is asked for the job or
//! the array/het leader (`-j 123`) and the exact id (`123_4`, `123+1`) is kept afterwards, so a
//! sibling never stands in for the job asked about. Jobs still running or pending take their tag
//! from slurmctld (accounting has it only once they end): one `squeue` run for all of them
//! ([`jobs::read_with_live`]), never one per job.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use fabric_report::jobs::{self, JobFilter, JobId};
use fabric_report::report::sacct_text;

/// Output forms of `jobs`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// An aligned table with a summary line.
    Table,
    /// A JSON array, one object per job, the tag decoded.
    Json,
    /// CSV with a header row, the table's columns.
    Csv,
}

/// Arguments of `fabric-check jobs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs running at some time after this (Unix seconds, YYYY-MM-DD or `YYYY-MM-DDTHH:MM[:SS]`,
    /// UTC); sacct's -S. Without --since, --until or --job, sacct's default (today).
    #[arg(long)]
    since: Option<String>,
    /// Jobs that started before this (same forms); sacct's -E.
    #[arg(long)]
    until: Option<String>,
    /// These jobs (comma-separated): `123` with all its array tasks or het components, `123_4`
    /// one task, `123+1` one component.
    #[arg(long, value_delimiter = ',')]
    job: Vec<String>,
    /// Jobs that ran on this node; sacct's -N.
    #[arg(long)]
    node: Option<String>,
    /// Only these partitions (comma-separated); sacct's -r.
    #[arg(long, value_delimiter = ',')]
    partition: Vec<String>,
    /// Only these users (comma-separated); sacct's -u (otherwise -a, all users).
    #[arg(long, value_delimiter = ',')]
    user: Vec<String>,
    /// Only jobs with these fabric verdicts (comma-separated): pass, warn, fail, error, or none
    /// (no readable tag).
    #[arg(long, value_delimiter = ',', value_parser = ["pass", "warn", "fail", "error", "none"])]
    verdict: Vec<String>,
    /// Only jobs in these states (comma-separated, the first word of sacct's state, any case):
    /// running, pending, completed, failed, cancelled, timeout, ...
    #[arg(long, value_delimiter = ',')]
    state: Vec<String>,
    /// Output form.
    #[arg(long, short, value_enum, default_value = "table")]
    format: Format,
    /// Read this saved `sacct -X -P -o <FIELDS>` output, or the `sacct --json` history that
    /// `report` reads (`-` for stdin), instead of running sacct. `-P` text with a column of the
    /// users' free text (JobName, Comment, WorkDir, SubmitLine, ...) beside AdminComment is
    /// refused: a line break in it could pass a failed job off as a passing one.
    #[arg(long, value_name = "FILE")]
    sacct_file: Option<PathBuf>,
    /// The sacct binary to run (absolute path).
    #[arg(long, default_value = "/usr/bin/sacct", hide = true)]
    sacct: PathBuf,
    /// Longest a sacct run may take; at the limit it is killed, with whatever it started.
    #[arg(long, default_value = "300s", value_parser = humantime::parse_duration)]
    sacct_timeout: std::time::Duration,
    /// The squeue binary that reads running and pending jobs' tags from slurmctld (absolute
    /// path).
    #[arg(long, default_value = "/usr/bin/squeue", hide = true)]
    squeue: PathBuf,
    /// Longest the one squeue run for running and pending jobs may take; past it those jobs
    /// keep accounting's tag, with a warning.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    squeue_timeout: std::time::Duration,
}

/// Unix seconds from the forms `--since`/`--until` take ([`sacct_text::parse_when`]).
fn parse_when(s: &str, flag: &str) -> anyhow::Result<i64> {
    sacct_text::parse_when(s, flag).map_err(anyhow::Error::msg)
}

/// The sacct arguments for `args`.
fn sacct_args(args: &Args, filter: &JobFilter) -> anyhow::Result<Vec<String>> {
    let mut a: Vec<String> = ["-X", "-P", "-o", jobs::FIELDS]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(s) = filter.since_s {
        a.extend(["-S".into(), sacct_text::utc_text(s)]);
    }
    if let Some(u) = filter.until_s {
        a.extend(["-E".into(), sacct_text::utc_text(u)]);
    }
    if !args.job.is_empty() {
        let mut bases = Vec::new();
        for j in &args.job {
            let base = JobId::parse(j)
                .base()
                .with_context(|| format!("--job `{j}` is not a job id (123, 123_4 or 123+1)"))?;
            if !bases.contains(&base) {
                bases.push(base);
            }
        }
        let list: Vec<String> = bases.iter().map(u64::to_string).collect();
        // With -j and no -S, sacct searches from the epoch, not from today.
        a.extend(["-j".into(), list.join(",")]);
    }
    if let Some(n) = &args.node {
        a.extend(["-N".into(), n.clone()]);
    }
    if !args.partition.is_empty() {
        a.extend(["-r".into(), args.partition.join(",")]);
    }
    if args.user.is_empty() {
        a.push("-a".into());
    } else {
        a.extend(["-u".into(), args.user.join(",")]);
    }
    Ok(a)
}

/// Runs the subcommand and returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let since_s = args
        .since
        .as_deref()
        .map(|s| parse_when(s, "--since"))
        .transpose()?;
    let until_s = args
        .until
        .as_deref()
        .map(|s| parse_when(s, "--until"))
        .transpose()?;
    if let (Some(a), Some(b)) = (since_s, until_s)
        && b <= a
    {
        bail!("--until must be after --since");
    }
    for j in &args.job {
        if JobId::parse(j).base().is_none() {
            bail!(
                "--job `{j}` is not a job id: write 123, 123_4 (an array task) or 123+1 (a het component)"
            );
        }
    }
    let filter = JobFilter {
        since_s,
        until_s,
        job_ids: args.job.clone(),
        node: args.node.clone(),
        partitions: args.partition.clone(),
        users: args.user.clone(),
        verdicts: args.verdict.clone(),
        states: args.state.iter().map(|s| s.to_ascii_lowercase()).collect(),
    };
    let (text, name) = match &args.sacct_file {
        Some(p) if p.as_os_str() == "-" => (
            super::input::read_text(p, "--sacct-file")?,
            "stdin".to_string(),
        ),
        Some(p) => (
            super::input::read_text(p, "--sacct-file")?,
            p.display().to_string(),
        ),
        None => (run_sacct(&args, &filter)?, "sacct".to_string()),
    };
    // Accounting has a job's tag only once the job ends: for those still running or pending,
    // slurmctld's copy, in one squeue run for all of them (never for a saved output).
    let mut live = |ids: &[u64]| run_squeue(&args, ids);
    let live: Option<&mut jobs::LiveQuery> = args.sacct_file.is_none().then_some(&mut live as _);
    let read = jobs::read_with_live(&text, &name, &filter, live);
    let (list, live_error) = read.map_err(|e| match (e, &args.sacct_file) {
        // A JSON error's byte offset, as the line of the file.
        (jobs::JobsError::Input(e), Some(p)) if p.as_os_str() != "-" => {
            jobs::JobsError::Input(e.with_line_from(p))
        }
        (e, _) => e,
    })?;
    for w in list.notes.warnings() {
        tracing::warn!("{name}: {w}");
    }
    if let Some(e) = live_error {
        tracing::warn!("running and pending jobs show accounting's tag (none until they end): {e}");
    }
    let out = match args.format {
        Format::Table => jobs::to_table(&list),
        Format::Json => jobs::to_json(&list),
        Format::Csv => jobs::to_csv(&list),
    };
    if !matches!(args.format, Format::Table) {
        tracing::info!("{}", jobs::summary(&list));
    }
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(0)
}

/// The one live read: `squeue -h --local --states=all --jobs=IDS -O` with
/// [`jobs::SQUEUE_FIELDS`], bounded by `--squeue-timeout`, through the same bounded runner as
/// sacct.
fn run_squeue(args: &Args, ids: &[u64]) -> Result<String, String> {
    let words = jobs::live_query_args(ids);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    super::input::sacct(&args.squeue, args.squeue_timeout)
        .text(&words, &[])
        .map_err(|e| e.to_string())
}

fn run_sacct(args: &Args, filter: &JobFilter) -> anyhow::Result<String> {
    let words = sacct_args(args, filter)?;
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let env = [("SLURM_TIME_FORMAT", "%s"), ("TZ", "UTC")];
    let out = super::input::sacct(&args.sacct, args.sacct_timeout)
        .run(&words, &env, |r| {
            let mut b = Vec::new();
            r.read_to_end(&mut b).map(|_| b)
        })
        .map_err(|e| super::input::sacct_error(e, &args.sacct, "--sacct-file"))?
        .context("cannot read sacct's output")?;
    String::from_utf8(out).context("sacct printed text that is not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    #[test]
    fn sacct_is_asked_for_the_leader_of_an_array_task_or_het_component_once() {
        let t = T::parse_from(["t", "--job", "123_4,123+1,77", "--user", "ann"]);
        let f = JobFilter::default();
        let a = sacct_args(&t.a, &f).unwrap();
        let j = a.iter().position(|x| x == "-j").unwrap();
        assert_eq!(a[j + 1], "123,77");
        assert!(a.windows(2).any(|w| w == ["-u", "ann"]));
        assert!(!a.contains(&"-a".to_string()));
        assert_eq!(&a[..4], ["-X", "-P", "-o", jobs::FIELDS]);
        let t = T::parse_from(["t", "--job", "abc"]);
        assert!(sacct_args(&t.a, &f).is_err());
    }
}
