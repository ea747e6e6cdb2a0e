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
            sysfs::write(&name, &out)?;
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            Args::command().write_help(&mut std::io::stderr())?;
            Ok(ExitCode::from(2))
        }
    }
}
