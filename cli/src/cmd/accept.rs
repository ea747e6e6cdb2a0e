//! `fabric-check accept`: the acceptance report from nccl-tests outputs and pinned BOMs.
//!
//! Exit status: 0 every check passed, 2 a check failed (or an input was broken), 3 nothing
//! usable was read.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use fabric_report::accept::analyse::{Inputs, analyse};
use fabric_report::accept::render::render_accept;
use fabric_report::accept::thresholds::Thresholds;
use fabric_report::accept::{Problem, bom, read_runs};
use fabric_report::report::render::Format;

/// Arguments of `fabric-check accept`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// nccl-tests outputs: stdout text or `-J` JSON (repeat runs for variation; a log holding
    /// several invocations or collectives gives one run per invocation; a launcher prefix on
    /// every line is removed; an excerpt whose rows leave out sizes its header asks for warns).
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// Pinned BOM of a node (JSON); repeat for every node.
    #[arg(long, num_args = 1..)]
    bom: Vec<PathBuf>,
    /// `fabric-check probe --format json` output of a node; repeat for every node.
    #[arg(long, num_args = 1..)]
    probe: Vec<PathBuf>,
    /// Node count the runs must use.
    #[arg(long)]
    nodes: Option<u32>,
    /// GPUs per node the runs must use.
    #[arg(long)]
    gpus_per_node: Option<u32>,
    /// Thresholds file (TOML; see docs/cost-model.md).
    #[arg(long)]
    thresholds: Option<PathBuf>,
    /// Output format: table, markdown, csv, json or html.
    #[arg(long, short, default_value = "table")]
    format: Format,
    /// Write the report here instead of stdout.
    #[arg(long, short)]
    output: Option<PathBuf>,
}

fn read_text(p: &PathBuf, problems: &mut Vec<Problem>) -> Option<String> {
    match std::fs::read(p) {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) => {
            problems.push(Problem::fail(
                &p.display().to_string(),
                0,
                format!("cannot read: {e}"),
            ));
            None
        }
    }
}

/// Runs the subcommand and returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let thresholds = match &args.thresholds {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read thresholds file {}", p.display()))?;
            Thresholds::parse(&text, &p.display().to_string()).map_err(anyhow::Error::msg)?
        }
        None => Thresholds::default(),
    };
    let mut inp = Inputs {
        expect_nodes: args.nodes,
        expect_gpus_per_node: args.gpus_per_node,
        thresholds,
        ..Inputs::default()
    };
    for p in &args.results {
        if let Some(text) = read_text(p, &mut inp.problems) {
            let (runs, problems) = read_runs(&p.display().to_string(), &text);
            inp.problems.extend(problems);
            inp.runs.extend(runs);
        }
    }
    for (paths, into_probes) in [(&args.bom, false), (&args.probe, true)] {
        for p in paths {
            if let Some(text) = read_text(p, &mut inp.problems) {
                match bom::read(&p.display().to_string(), &text) {
                    Ok(b) if into_probes => inp.probes.push(b),
                    Ok(b) => inp.boms.push(b),
                    Err(problem) => inp.problems.push(problem),
                }
            }
        }
    }
    let report = analyse(&inp);
    let text = render_accept(&report, args.format);
    match &args.output {
        Some(p) => {
            std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?
        }
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    for p in &report.problems {
        eprintln!("fabric-check: {p}");
    }
    Ok(if inp.runs.is_empty() {
        3
    } else if report.verdict == "pass" {
        0
    } else if report.verdict == "warn" {
        1
    } else {
        2
    })
}
