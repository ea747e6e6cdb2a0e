//! `fabric-check drain`, `resume` and `health`: node service state with fabric-check's
//! etiquette (our reasons only, a mass-drain guard, bounded `scontrol` calls, dry runs).
//!
//! `health` is for Slurm's `HealthCheckProgram` (which runs a program without arguments: point
//! it at a link named `fabric-check-health`, which selects this mode). It probes the idle node
//! with the plugin's own settings from `plugstack.conf`, drains on `fail`, and resumes a node we
//! drained after N consecutive clean probes.

use std::path::{Path, PathBuf};

use anyhow::Context;
use fabric_core::drain::{self, DrainAction, ResumeAction};
use fabric_core::exec::{run_bounded, safe_command};
use fabric_core::jobstep;
use fabric_core::plugin_args::{PluginArgs, expand_node, plugstack_lines};
use fabric_core::probe::Report;
use fabric_core::slurm::SlurmCli;
use fabric_core::tag::Verdict;

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
    let limit = fabric_core::plugin_args::DrainLimit::Nodes(u32::MAX);
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

fn streak_file(state_dir: &Path) -> PathBuf {
    state_dir.join("health-clean-streak")
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
    let state_dir =
        expand_node(&plugin.state_dir, &node).context("node name unusable in a path")?;
    std::fs::create_dir_all(&state_dir)?;
    let mut cmd = safe_command(&plugin.probe);
    cmd.args(["probe", "--format", "json", "--node", &node, "--state-dir"])
        .arg(&state_dir);
    if let Some(root) = plugin
        .sysfs_root
        .as_deref()
        .and_then(|r| expand_node(r, &node))
    {
        cmd.arg("--sysfs-root").arg(root);
    }
    if let Some(conf) = expand_node(&plugin.config, &node).filter(|c| c.is_file()) {
        cmd.arg("--config").arg(conf);
    }
    let report: Option<Report> = run_bounded(cmd, None, plugin.timeout)
        .ok()
        .and_then(|d| serde_json::from_slice(&d.stdout).ok());
    let Some(report) = report else {
        println!("{node}: the probe could not run; node state unchanged");
        return Ok(3);
    };
    let slurm = SlurmCli::default();
    let all = slurm.nodes()?;
    let me = all
        .iter()
        .find(|n| n.name == node)
        .with_context(|| format!("sinfo does not know {node}"))?;
    let streak_path = streak_file(&state_dir);
    match report.verdict {
        Verdict::Fail => {
            let _ = std::fs::write(&streak_path, "0");
            let (check, message) =
                jobstep::worst_finding(&report).unwrap_or(("probe".into(), "fail".into()));
            let reason = drain::reason(&check, &message);
            match drain::decide(me, &all, plugin.max_drain, plugin.dry_run, &reason) {
                DrainAction::Drain(r) => {
                    slurm.drain(&node, &r)?;
                    println!("drained {node}: {r}");
                }
                other => println!("{node}: fail, not drained: {other:?}"),
            }
        }
        Verdict::Pass | Verdict::Warn => {
            let streak: u32 = std::fs::read_to_string(&streak_path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
                + 1;
            std::fs::write(&streak_path, streak.to_string())?;
            if drain::decide_resume(me) == ResumeAction::Resume {
                if streak >= args.clean_probes {
                    if plugin.dry_run {
                        println!("dry run: would resume {node} after {streak} clean probes");
                    } else {
                        slurm.resume(&node)?;
                        println!(
                            "resumed {node} after {streak} clean probes (was: {})",
                            me.reason
                        );
                    }
                } else {
                    println!(
                        "{node}: clean probe {streak} of {} before resuming",
                        args.clean_probes
                    );
                }
            }
        }
        Verdict::Error => println!("{node}: probe error; node state unchanged"),
    }
    Ok(report.verdict.exit_code())
}
