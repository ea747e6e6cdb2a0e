//! `fabric-check step-gate`: what the plugin prepends to every task of a `--fabric-check=full`
//! step on Slurm 23.11 and newer (`spank_prepend_task_argv`). It runs as the job's user.
//!
//! Local task 0 of each node runs the collective among the step's nodes and leaves the node's
//! result in the spool for the job epilog; the node's other tasks wait for it (bounded). Then
//! every task execs its own command line, unless this node was named slow under
//! `policy=enforce`: its tasks then stop before the user's program starts, with a message that
//! names the node, and the epilog drains it. A check that cannot run never stops a task.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use anyhow::Context;
use fabric_core::collective::{self, Report};
use fabric_core::hostlist::Hostlist;
use fabric_core::plugin_args::{PluginArgs, Policy};
use fabric_core::stepgate::{self, Action, STEP_PORT_BASE, StepEnv, StepResult};

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

fn note(msg: &str) {
    eprintln!("fabric-check: {msg}");
}

fn env_u32(name: &str) -> anyhow::Result<u32> {
    let v = std::env::var(name).with_context(|| format!("{name} is not set"))?;
    v.parse()
        .with_context(|| format!("{name}={v:?} is not a number"))
}

fn env_nodes(names: &[&str]) -> anyhow::Result<Vec<String>> {
    let (name, v) = names
        .iter()
        .find_map(|n| std::env::var(n).ok().map(|v| (*n, v)))
        .with_context(|| format!("none of {} is set", names.join(", ")))?;
    Hostlist::parse(&v)
        .and_then(|h| h.expand())
        .map_err(|e| anyhow::anyhow!("{name}={v:?}: {e}"))
}

/// The step as Slurm describes it to the task.
fn step_env() -> anyhow::Result<StepEnv> {
    Ok(StepEnv {
        job_id: env_u32("SLURM_JOB_ID")?,
        step_id: env_u32("SLURM_STEP_ID")?,
        node: std::env::var("SLURMD_NODENAME").context("SLURMD_NODENAME is not set")?,
        step_nodes: env_nodes(&["SLURM_STEP_NODELIST", "SLURM_NODELIST"])?,
        job_nodes: env_nodes(&["SLURM_JOB_NODELIST", "SLURM_NODELIST"])?,
        local_id: env_u32("SLURM_LOCALID")?,
    })
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
    let cfg = super::collective::tcp_config(
        super::collective::Ring {
            nodes: env.step_nodes.clone(),
            my_rank,
            job_id: u64::from(env.job_id),
            addrs: map,
            munge_socket: plugin.munge_socket.as_deref(),
            allowed: vec![nix::unistd::getuid().as_raw()],
            port_base: STEP_PORT_BASE,
        },
        budget,
        started,
    )?;
    Ok(collective::run(&cfg))
}

/// Local task 0: check, record, and tell the node's other tasks. Returns whether this node is
/// named slow.
fn check(plugin: &PluginArgs, env: &StepEnv, budget: Duration) -> bool {
    let started = Instant::now();
    let job = env.job_id.to_string();
    let (slow, line) = match run_collective(plugin, env, budget, started) {
        Ok(report) => {
            let slow = report.outliers.contains(&env.node);
            let summary = report.summary();
            let first = env.step_nodes.first() == Some(&env.node);
            if first || slow {
                note(&format!(
                    "step {}.{} collective among {} nodes: {}{}{} ({} ms)",
                    env.job_id,
                    env.step_id,
                    env.step_nodes.len(),
                    report.verdict.as_str(),
                    summary
                        .busbw_gb_s
                        .map_or(String::new(), |b| format!(", busbw {b:.3} GB/s")),
                    if report.outliers.is_empty() {
                        String::new()
                    } else {
                        format!(", slow: {}", report.outliers.join(","))
                    },
                    report.duration_ms
                ));
            }
            if let Some(e) = &report.error {
                note(&format!("the step's collective could not run: {e}"));
            }
            let result = StepResult {
                step: env.step_id,
                node: env.node.clone(),
                collective: summary,
                slow_here: slow,
                message: report.messages.first().cloned(),
            };
            (slow, Some(result.to_line()))
        }
        Err(e) => {
            note(&format!(
                "the step's collective could not run on {}: {e:#}; the task runs unchecked",
                env.node
            ));
            (false, None)
        }
    };
    let uid = nix::unistd::getuid().as_raw();
    if let Some(line) = line
        && let Some(path) = stepgate::results_path(&plugin.spool_dir, &job, &env.node)
        && let Err(e) = fabric_core::record::append_in_spool(&path, line.as_bytes(), uid)
    {
        note(&format!(
            "cannot leave the step's result in {}: {e}; the epilog will not see it",
            path.display()
        ));
    }
    if let Some(done) = stepgate::done_path(&plugin.spool_dir, &job, &env.node, env.step_id) {
        let word: &[u8] = if slow { b"slow" } else { b"ok" };
        if let Err(e) = fabric_core::record::append_in_spool(&done, word, uid) {
            note(&format!(
                "cannot tell this node's other tasks ({}: {e}); they wait out the budget",
                done.display()
            ));
        }
    }
    slow
}

/// The node's other tasks: wait for local task 0's word, bounded by the budget and a margin.
fn wait_for_check(plugin: &PluginArgs, env: &StepEnv, budget: Duration) -> bool {
    let Some(done) = stepgate::done_path(
        &plugin.spool_dir,
        &env.job_id.to_string(),
        &env.node,
        env.step_id,
    ) else {
        return false;
    };
    let deadline = Instant::now() + budget + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(&done)
            && !text.is_empty()
        {
            return text.starts_with("slow");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
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
    note(&format!("cannot run {:?}: {err}", command[0]));
    Ok(code)
}

/// Runs the gate and then the task's command; returns only when the command could not start or
/// the task was stopped.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let (plugin, problems) = PluginArgs::parse(args.plugin_args.iter().map(String::as_str));
    for p in problems {
        note(&format!("plugstack.conf: {p}"));
    }
    let env = match step_env() {
        Ok(e) => e,
        Err(e) => {
            note(&format!(
                "step-gate is not inside a Slurm step ({e:#}); running the command unchecked"
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
    let slow = match stepgate::decide(&env) {
        Action::Skip(_) => false,
        Action::Run => check(&plugin, &env, budget),
        Action::Wait => wait_for_check(&plugin, &env, budget),
    };
    if slow {
        if plugin.policy == Policy::Enforce {
            note(&format!(
                "{} is the slow node of step {}.{}'s ring: its tasks stop before your program starts \
                 (policy=enforce); the node is drained when the job ends. Resubmit excluding it: --exclude={}",
                env.node, env.job_id, env.step_id, env.node
            ));
            return Ok(1);
        }
        if env.local_id == 0 {
            note(&format!(
                "{} is the slow node of step {}.{}'s ring; running anyway (policy={})",
                env.node,
                env.job_id,
                env.step_id,
                plugin.policy.as_str()
            ));
        }
    }
    exec(&args.command)
}
