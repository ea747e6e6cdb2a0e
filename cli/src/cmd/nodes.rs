//! `fabric-check drain`, `resume` and `health`: node service state with fabric-check's
//! etiquette (our reasons only, a mass-drain guard, bounded `scontrol` calls, dry runs).
//!
//! `health` is for Slurm's `HealthCheckProgram` (which runs a program without arguments: point
//! it at a link named `fabric-check-health`, which selects this mode). It probes the idle node
//! with the plugin's own settings from `plugstack.conf`, drains on `fail`, and resumes a node we
//! drained after N consecutive clean probes.

use std::path::PathBuf;

use anyhow::Context;
use fabric_core::drain::{self, DrainAction, ResumeAction};
use fabric_core::jobstep::health::HealthSetup;
use fabric_core::jobstep::{self, StdoutRelay, SubprocessRunner};
use fabric_core::slurm::SlurmCli;
use fabric_proto::plugin_args::{PluginArgs, plugstack_lines};

/// Arguments of `fabric-check drain`.
#[derive(Debug, clap::Args)]
pub struct DrainArgs {
    /// The node to drain.
    pub node: String,
    /// The check id the reason names.
    #[arg(long, default_value = "manual")]
    pub check: String,
    /// The short message of the reason.
    #[arg(long)]
    pub message: String,
    /// Say what would happen, change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `fabric-check resume`.
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// Nodes to resume (only those drained by fabric-check are touched).
    #[arg(required_unless_present = "all")]
    pub nodes: Vec<String>,
    /// Every node drained by fabric-check.
    #[arg(long)]
    pub all: bool,
    /// Say what would happen, change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `fabric-check health`.
#[derive(Debug, clap::Args)]
pub struct HealthArgs {
    /// The plugstack.conf whose fabric-check line gives the settings.
    #[arg(long, default_value = "/etc/slurm/plugstack.conf")]
    pub plugstack: PathBuf,
    /// This node's name (default: SLURMD_NODENAME, else the short host name).
    #[arg(long)]
    pub node: Option<String>,
    /// Consecutive clean probes before a node drained by fabric-check is resumed.
    #[arg(long, default_value_t = 3)]
    pub clean_probes: u32,
    /// Seconds after a job's end before the tags this node wrote are compared with accounting
    /// (a tag gone by then is logged as lost; see docs/operations.md).
    #[arg(long, default_value_t = fabric_core::jobstep::health::TAG_GRACE.as_secs())]
    pub tag_grace_s: u64,
}

/// `fabric-check drain`.
pub fn drain(args: DrainArgs) -> anyhow::Result<i32> {
    let slurm = SlurmCli::default();
    let all = slurm.nodes()?;
    let me = all
        .iter()
        .find(|n| n.name == args.node)
        .with_context(|| format!("no node named {}", args.node))?;
    let reason = drain::reason(&args.check, &args.message);
    // By hand there is no mass-drain guard: the admin decides.
    let limit = fabric_proto::plugin_args::DrainLimit::Nodes(u32::MAX);
    match drain::decide(me, &all, limit, args.dry_run, &reason) {
        DrainAction::Drain(r) => {
            slurm.drain(&args.node, &r)?;
            println!("drained {}: {r}", args.node);
            Ok(0)
        }
        DrainAction::DryRun(r) => {
            println!("dry run: would drain {}: {r}", args.node);
            Ok(0)
        }
        DrainAction::AlreadyOurs(r) => {
            println!("{} is already drained by fabric-check: {r}", args.node);
            Ok(0)
        }
        DrainAction::KeepForeign(r) => {
            println!(
                "{} is drained for another reason, left as is: {r}",
                args.node
            );
            Ok(1)
        }
        DrainAction::Guarded { .. } => unreachable!("no guard by hand"),
    }
}

/// `fabric-check resume`.
pub fn resume(args: ResumeArgs) -> anyhow::Result<i32> {
    let slurm = SlurmCli::default();
    let all = slurm.nodes()?;
    let targets: Vec<_> = if args.all {
        all.iter()
            .filter(|n| drain::decide_resume(n) == ResumeAction::Resume)
            .collect()
    } else {
        let mut v = Vec::new();
        for name in &args.nodes {
            v.push(
                all.iter()
                    .find(|n| &n.name == name)
                    .with_context(|| format!("no node named {name}"))?,
            );
        }
        v
    };
    let mut refused = 0;
    for n in targets {
        match drain::decide_resume(n) {
            ResumeAction::Resume if args.dry_run => {
                println!("dry run: would resume {} ({})", n.name, n.reason)
            }
            ResumeAction::Resume => {
                slurm.resume(&n.name)?;
                println!("resumed {} (was: {})", n.name, n.reason);
            }
            ResumeAction::NotDrained => println!("{} is not drained", n.name),
            ResumeAction::Foreign(r) => {
                println!("{} is drained for another reason, left as is: {r}", n.name);
                refused += 1;
            }
        }
    }
    Ok(if refused > 0 { 1 } else { 0 })
}

fn short_hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| h.split('.').next().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

/// `fabric-check health`.
pub fn health(args: HealthArgs) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(&args.plugstack)
        .with_context(|| format!("cannot read {}: pass --plugstack", args.plugstack.display()))?;
    let words = plugstack_lines(&text)
        .into_iter()
        .next()
        .map(|l| l.args)
        .unwrap_or_default();
    let (plugin, problems) = PluginArgs::parse(words.iter().map(String::as_str));
    for p in problems {
        eprintln!("fabric-check: plugstack.conf: {p}");
    }
    let node = args
        .node
        .or_else(|| std::env::var("SLURMD_NODENAME").ok())
        .unwrap_or_else(short_hostname);
    let mut setup = HealthSetup::new(node, plugin, args.clean_probes)?;
    setup.tag_grace = std::time::Duration::from_secs(args.tag_grace_s);
    let slurm = SlurmCli {
        deadline: Some(setup.deadline),
        ..SlurmCli::default()
    };
    let runner = SubprocessRunner {
        program: setup.plugin.probe.clone(),
    };
    Ok(jobstep::health::run(&setup, &slurm, &runner, &StdoutRelay)?)
}
