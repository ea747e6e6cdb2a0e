//! `fabric-fixtures`: writes the sysfs fixture scenarios for scripts (`scripts/gen-fixtures`
//! calls it): one scenario into a directory, every scenario into a folder each, or the names.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};
use fabric_testkit::sysfs;

/// Writes sysfs fixture trees (RDMA HCAs, NICs and GPUs this machine lacks).
#[derive(Debug, Parser)]
#[command(name = "fabric-fixtures")]
struct Args {
    /// Print the scenario names, one a line.
    #[arg(long, conflicts_with_all = ["all", "scenario"])]
    list: bool,
    /// Write every scenario into DIR/SCENARIO/ (replacing those folders).
    #[arg(long, value_name = "DIR", conflicts_with = "scenario")]
    all: Option<PathBuf>,
    /// The scenario to write.
    #[arg(requires = "outdir")]
    scenario: Option<String>,
    /// Where to write it: absent or an empty directory.
    outdir: Option<PathBuf>,
    /// Raise COUNTER (one the scenario raises: `symbol_error`, `rx_prio3_pause`) by N instead of
    /// the scenario's own amount: a fault of graded size (repeatable).
    #[arg(long, value_name = "COUNTER=N", requires = "scenario", value_parser = parse_raise)]
    raise: Vec<(String, u64)>,
}

/// `--raise COUNTER=N`.
fn parse_raise(s: &str) -> Result<(String, u64), String> {
    let bad =
        || format!("{s:?} is not COUNTER=N (a counter name and a whole number: symbol_error=240)");
    let (name, n) = s.split_once('=').ok_or_else(bad)?;
    let n: u64 = n.trim().parse().map_err(|_| bad())?;
    if name.trim().is_empty() {
        return Err(bad());
    }
    Ok((name.trim().to_owned(), n))
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fabric-fixtures: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<ExitCode> {
    if args.list {
        for name in sysfs::SCENARIOS {
            println!("{name}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(dir) = args.all {
        sysfs::write_all(&dir)
            .with_context(|| format!("writing every scenario into {}", dir.display()))?;
        return Ok(ExitCode::SUCCESS);
    }
    match (args.scenario, args.outdir) {
        (Some(name), Some(out)) => {
            sysfs::write_raised(&name, &out, &args.raise)?;
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            Args::command().write_help(&mut std::io::stderr())?;
            Ok(ExitCode::from(2))
        }
    }
}
