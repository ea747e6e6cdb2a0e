//! `fabric-check step-gate`: what the plugin prepends to every task of a `--fabric-check=full`
//! step on Slurm 23.11 and newer (`spank_prepend_task_argv`). It runs as the job's user.
//!
//! Local task 0 of each node runs the collective among the step's nodes and leaves the node's
//! result in the spool for the job epilog; the node's other tasks wait for it (bounded). Then
//! every task execs its own command line, unless this node was named slow under
//! `policy=enforce`: its tasks then stop before the user's program starts, with a message that
//! names the node, and the epilog drains it. A check that cannot run never stops a task.
//!
//! The gate itself is `fabric_core::jobstep::gate`; this file reads the environment, wires the
//! TCP collective and the task's stderr to it, and execs the command.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use anyhow::Context;
use fabric_core::jobstep::Relay;
use fabric_core::jobstep::gate::{self, GateOutcome, StepCollective};
use fabric_core::stepgate::{self, StepEnv};
use fabric_net::collective::{self, Report};
use fabric_proto::plugin_args::PluginArgs;

/// Arguments of `step-gate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// One of the plugin's plugstack.conf words (repeatable), e.g. `--plugin-arg=spool_dir=/x`.
    #[arg(long = "plugin-arg", value_name = "KEY=VALUE")]
    pub plugin_args: Vec<String>,
    /// The collective's budget, all in, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub budget_ms: u64,
    /// The task's own command line, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The task's stderr, each line marked as ours.
struct Note;

impl Relay for Note {
    fn line(&self, text: &str) {
        eprintln!("fabric-check: {text}");
    }
}

/// The step's ring over TCP, as the job's user.
struct TcpRing;

impl StepCollective for TcpRing {
    fn run(
        &self,
        plugin: &PluginArgs,
        env: &StepEnv,
        budget: Duration,
        started: Instant,
    ) -> Result<Report, String> {
        run_collective(plugin, env, budget, started).map_err(|e| format!("{e:#}"))
    }
}

/// Runs this node's rank of the collective among the step's nodes.
fn run_collective(
    plugin: &PluginArgs,
    env: &StepEnv,
    budget: Duration,
    started: Instant,
) -> anyhow::Result<Report> {
    let my_rank = env
        .step_nodes
        .iter()
        .position(|n| *n == env.node)
        .context("this node is not in the step")?;
    let mut map = BTreeMap::new();
    if let Some(file) = plugin
        .step_hosts
        .as_ref()
        .or(plugin.collective_hosts.as_ref())
    {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        for (n, a) in stepgate::parse_hosts_file(&text) {
            let ip: IpAddr = a
                .parse()
                .with_context(|| format!("{}: {a:?} is not an IP address", file.display()))?;
            map.insert(n, ip);
        }
    }
    let mut cfg = super::collective::tcp_config(
        super::collective::Ring {
            nodes: env.step_nodes.clone(),
            my_rank,
            job_id: u64::from(env.job_id),
            addrs: map,
            munge_socket: plugin.munge_socket.as_deref(),
            allowed: vec![nix::unistd::getuid().as_raw()],
            window: plugin.ports.step_gate,
        },
        budget,
        started,
    )?;
    // Among the job's own tasks a rank that loses its CPU to the job measures as a slow node
    // does: the local rule's warnings are the prolog's only (docs/collective.md).
    cfg.local_rule = false;
    Ok(collective::run(&cfg))
}

fn exec(command: &[String]) -> anyhow::Result<i32> {
    let err = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Note.line(&format!("cannot run {:?}: {err}", command[0]));
    Ok(code)
}

/// Runs the gate and then the task's command; returns only when the command could not start or
/// the task was stopped.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let (plugin, problems) = PluginArgs::parse(args.plugin_args.iter().map(String::as_str));
    for p in problems {
        Note.line(&format!("plugstack.conf: {p}"));
    }
    let env = match gate::step_env(|k| std::env::var(k).ok()) {
        Ok(e) => e,
        Err(e) => {
            Note.line(&format!(
                "step-gate is not inside a Slurm step ({e}); running the command unchecked"
            ));
            return exec(&args.command);
        }
    };
    if args.budget_ms < 100 {
        anyhow::bail!(
            "--budget-ms {} is too small: give the collective at least 100 ms",
            args.budget_ms
        );
    }
    let budget = Duration::from_millis(args.budget_ms);
    let uid = nix::unistd::getuid().as_raw();
    match gate::run(&plugin, &env, budget, &TcpRing, uid, &Note) {
        GateOutcome::Stop => Ok(1),
        GateOutcome::Run => exec(&args.command),
    }
}
