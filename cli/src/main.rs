//! `fabric-check`: the binary that does the real work, run by hand, by the SPANK plugin as a child
//! process, or as Slurm's `HealthCheckProgram`.
//!
//! Each subcommand lives in its own file under `cmd/` with its clap `Args` and a `run` function
//! that returns the process exit code; this file only dispatches.

mod cmd;
mod logging;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "fabric-check",
    version,
    about = "Keep a GPU cluster honest about its RDMA fabric"
)]
struct Cli {
    /// Say more on stderr (debug; twice: trace). `FABRIC_CHECK_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Say less on stderr (warnings only; twice: errors only).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    quiet: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Node-local passive fabric checks (exit 0 pass, 1 warn, 2 fail, 3 could not run).
    Probe(cmd::probe::Args),
    /// Print or pin the node's bill of materials.
    Bom(cmd::bom::Args),
    /// Show the node's known inventory, or accept what it has now (after a deliberate change).
    Inventory(cmd::inventory::Args),
    /// Validate the plugin's plugstack.conf arguments and the TOML configuration.
    CheckConfig(cmd::check_config::Args),
    /// Cost per accepted run and fabrics side by side, from Slurm accounting.
    Report(cmd::report::Args),
    /// Jobs with their fabric verdict, failing nodes and checks, drains and run summary (sacct).
    Jobs(cmd::jobs::Args),
    /// Acceptance report from nccl-tests outputs and pinned BOMs.
    Accept(cmd::accept::Args),
    /// Drain a node with a fabric-check reason (never over another tool's reason).
    Drain(cmd::nodes::DrainArgs),
    /// Resume nodes drained by fabric-check (only those).
    Resume(cmd::nodes::ResumeArgs),
    /// HealthCheckProgram mode: probe an idle node, drain on fail, resume after clean probes, report lost job tags.
    Health(cmd::nodes::HealthArgs),
    /// Inject fabric faults on reserved (or testbed) nodes and score how well fabric-check finds
    /// them: recall, precision, false drains, time to detect, job cost.
    Drill(Box<cmd::drill::Args>),
    /// The synthetic trainer of a straggler drill's rounds (`drill --stragglers`), run by
    /// their jobs as the job user under `fabric-run`.
    #[command(hide = true)]
    DrillTrainer(cmd::drill::TrainerArgs),
    /// Run by the SPANK plugin in the job prolog (as root).
    #[command(hide = true)]
    Prolog(cmd::jobstep::Args),
    /// Run by the SPANK plugin in the job epilog (as root).
    #[command(hide = true)]
    Epilog(cmd::jobstep::Args),
    /// Run by the SPANK plugin at the end of a step, on its first node (as root).
    #[command(hide = true)]
    StepEnd(cmd::jobstep::Args),
    /// Started by the job prolog (as root, detached): the in-job watch of this node until the
    /// epilog stops it.
    #[command(hide = true)]
    Watch(cmd::jobstep::Args),
    /// One rank of a ring all-reduce among a job's nodes: figures, #wrong, slow nodes.
    Collective(cmd::collective::Args),
    /// Prepended by the SPANK plugin to a `--fabric-check=full` step's tasks (Slurm 23.11+).
    #[command(hide = true)]
    StepGate(cmd::stepgate::Args),
    /// slurm.conf's EpilogSlurmctld around another tool's (jobstats'): both AdminComment
    /// segments kept.
    EpilogSlurmctld(cmd::coexist::Args),
    /// The `sacctmgr` that `epilog-slurmctld` puts first on the other tool's PATH.
    #[command(hide = true)]
    SacctmgrShim(cmd::coexist::ShimArgs),
    /// Writes the man pages or shell completions (the package build runs it).
    #[command(hide = true)]
    Dist(cmd::dist::Args),
}

fn main() {
    // Slurm's HealthCheckProgram runs a program without arguments: a link named
    // `fabric-check-health` selects the health mode.
    let invoked_as_health = std::env::args_os()
        .next()
        .is_some_and(|a| a.to_string_lossy().ends_with("fabric-check-health"));
    let cli = if invoked_as_health && std::env::args_os().len() == 1 {
        Cli::parse_from(["fabric-check", "health"])
    } else {
        Cli::parse()
    };
    logging::init(cli.verbose, cli.quiet);
    let result = match cli.command {
        Command::Probe(a) => cmd::probe::run(a),
        Command::Bom(a) => cmd::bom::run(a),
        Command::Inventory(a) => cmd::inventory::run(a),
        Command::CheckConfig(a) => cmd::check_config::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Jobs(a) => cmd::jobs::run(a),
        Command::Accept(a) => cmd::accept::run(a),
        Command::Collective(a) => cmd::collective::run(a),
        Command::StepGate(a) => cmd::stepgate::run(a),
        Command::Drain(a) => cmd::nodes::drain(a),
        Command::Resume(a) => cmd::nodes::resume(a),
        Command::Health(a) => cmd::nodes::health(a),
        Command::Drill(a) => cmd::drill::run(*a),
        Command::DrillTrainer(a) => cmd::drill::trainer(a),
        Command::Prolog(a) => cmd::jobstep::prolog(a),
        Command::Epilog(a) => cmd::jobstep::epilog(a),
        Command::StepEnd(a) => cmd::jobstep::step_end(a),
        Command::Watch(a) => cmd::jobstep::watch(a),
        Command::EpilogSlurmctld(a) => cmd::coexist::run(a),
        Command::SacctmgrShim(a) => cmd::coexist::shim(a),
        Command::Dist(a) => cmd::dist::run(a, Cli::command()),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("fabric-check: error: {}", error_text(&err));
            std::process::exit(3);
        }
    }
}

/// The error and its causes on one line, each said once: an error whose message already
/// quotes its cause (`cannot read X: No such file or directory (os error 2); check ...`) is
/// not followed by that cause again.
fn error_text(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let said = cause.to_string();
        if out.contains(said.as_str()) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&said);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_text;

    #[test]
    fn a_cause_the_message_already_quotes_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(io).context("cannot read x.toml: No such file; check --cost");
        assert_eq!(
            error_text(&e),
            "cannot read x.toml: No such file; check --cost"
        );
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(io).context("cannot open x.txt");
        assert_eq!(error_text(&e), "cannot open x.txt: No such file");
    }
}
