//! The step gate (`fabric-check step-gate`, Slurm 23.11+) as a function of its seams: the step's
//! environment ([`step_env`], from any variable source), the collective ([`StepCollective`]),
//! the spool, and a [`Relay`] for the task's stderr. What the gate decides is in
//! [`crate::stepgate`]; the binary only execs the task's command or stops it.

use std::time::{Duration, Instant};

use super::policy::{Found, Phase};
use crate::deadline::Deadline;
use crate::relay::Relay;
use crate::stepgate::{self, Action, StepEnv, StepResult};
use fabric_net::collective;
use fabric_proto::hostlist::Hostlist;
use fabric_proto::plugin_args::PluginArgs;

/// What the task's environment lacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepEnvError {
    /// A variable is not set.
    #[error("{0} is not set")]
    Unset(String),
    /// A number that is not one.
    #[error("{name}={value:?} is not a number")]
    NotANumber {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
    },
    /// A node list that does not parse.
    #[error("{name}={value:?}: {reason}")]
    NodeList {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
        /// Why.
        reason: String,
    },
}

/// The step as Slurm describes it to the task, from `var` (the process environment in the
/// binary).
pub fn step_env(var: impl Fn(&str) -> Option<String>) -> Result<StepEnv, StepEnvError> {
    let num = |name: &str| -> Result<u32, StepEnvError> {
        let v = var(name).ok_or_else(|| StepEnvError::Unset(name.into()))?;
        v.parse().map_err(|_| StepEnvError::NotANumber {
            name: name.into(),
            value: v,
        })
    };
    let nodes = |names: &[&str]| -> Result<Vec<String>, StepEnvError> {
        let (name, v) = names
            .iter()
            .find_map(|n| var(n).map(|v| (*n, v)))
            .ok_or_else(|| StepEnvError::Unset(format!("none of {}", names.join(", "))))?;
        Hostlist::parse(&v)
            .and_then(|h| h.expand())
            .map_err(|e| StepEnvError::NodeList {
                name: name.into(),
                value: v,
                reason: e.to_string(),
            })
    };
    Ok(StepEnv {
        job_id: num("SLURM_JOB_ID")?,
        step_id: num("SLURM_STEP_ID")?,
        node: var("SLURMD_NODENAME")
            .ok_or_else(|| StepEnvError::Unset("SLURMD_NODENAME".into()))?,
        step_nodes: nodes(&["SLURM_STEP_NODELIST", "SLURM_NODELIST"])?,
        job_nodes: nodes(&["SLURM_JOB_NODELIST", "SLURM_NODELIST"])?,
        local_id: num("SLURM_LOCALID")?,
    })
}

/// Runs this node's rank of the collective among the step's nodes.
pub trait StepCollective {
    /// The collective's report, within `budget` (counted from `started`).
    fn run(
        &self,
        plugin: &PluginArgs,
        env: &StepEnv,
        budget: Duration,
        started: Instant,
    ) -> Result<collective::Report, String>;
}

/// What the task does after the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateOutcome {
    /// Exec the task's command.
    Run,
    /// Stop before the user's program starts (this node is the slow one, `policy=enforce`).
    Stop,
}

/// The gate of one task: decide ([`stepgate::decide`]), run or wait for the node's check, and
/// say what the task does. `uid` owns the spool files written.
pub fn run(
    plugin: &PluginArgs,
    env: &StepEnv,
    budget: Duration,
    collective: &dyn StepCollective,
    uid: u32,
    relay: &dyn Relay,
) -> GateOutcome {
    let _span =
        tracing::info_span!("step_gate", job = env.job_id, step = env.step_id, node = %env.node)
            .entered();
    let slow = match stepgate::decide(env) {
        Action::Skip(_) => false,
        Action::Run => check(plugin, env, budget, collective, uid, relay),
        Action::Wait => wait_for_check(plugin, env, budget),
    };
    if !slow {
        return GateOutcome::Run;
    }
    if super::policy::decide(Phase::StepGate, Found::JobReportedSlow, plugin).stop_step {
        relay.line(&format!(
            "{} is the slow node of step {}.{}'s ring: its tasks stop before your program starts \
             (policy=enforce); the job reported it, so the node is not drained for it. Resubmit excluding it: --exclude={}",
            env.node, env.job_id, env.step_id, env.node
        ));
        return GateOutcome::Stop;
    }
    if env.local_id == 0 {
        relay.line(&format!(
            "{} is the slow node of step {}.{}'s ring; running anyway (policy={})",
            env.node,
            env.job_id,
            env.step_id,
            plugin.policy.as_str()
        ));
    }
    GateOutcome::Run
}

/// Local task 0: check, record, and tell the node's other tasks. Returns whether this node is
/// named slow.
fn check(
    plugin: &PluginArgs,
    env: &StepEnv,
    budget: Duration,
    collective: &dyn StepCollective,
    uid: u32,
    relay: &dyn Relay,
) -> bool {
    let started = Instant::now();
    let job = env.job_id.to_string();
    let (slow, line) = match collective.run(plugin, env, budget, started) {
        Ok(report) => {
            let slow = report.outliers.contains(&env.node);
            let summary = report.summary();
            let first = env.step_nodes.first() == Some(&env.node);
            if first || slow {
                relay.line(&format!(
                    "step {}.{} collective among {} nodes: {}{}{} ({} ms)",
                    env.job_id,
                    env.step_id,
                    env.step_nodes.len(),
                    report.verdict.as_str(),
                    summary
                        .busbw_gb_s
                        .map_or(String::new(), |b| format!(", busbw {b:.3} GB/s")),
                    report.named(),
                    report.duration_ms
                ));
            }
            if let Some(e) = &report.error {
                relay.line(&format!("the step's collective could not run: {e}"));
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
            relay.line(&format!(
                "the step's collective could not run on {}: {e}; the task runs unchecked",
                env.node
            ));
            (false, None)
        }
    };
    if let Some(line) = line
        && let Some(path) = stepgate::results_path(&plugin.spool_dir, &job, &env.node)
        && let Err(e) = fabric_proto::record::append_in_spool(&path, line.as_bytes(), uid)
    {
        relay.line(&format!(
            "cannot leave the step's result in {}: {e}; the epilog will not see it",
            path.display()
        ));
    }
    if let Some(done) = stepgate::done_path(&plugin.spool_dir, &job, &env.node, env.step_id) {
        let word: &[u8] = if slow { b"slow" } else { b"ok" };
        if let Err(e) = fabric_proto::record::append_in_spool(&done, word, uid) {
            relay.line(&format!(
                "cannot tell this node's other tasks ({}: {e}); they wait out the budget",
                done.display()
            ));
        }
    }
    slow
}

/// How long the node's other tasks wait for local task 0 beyond the collective's budget.
pub const WAIT_MARGIN: Duration = Duration::from_secs(3);

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
    let deadline = Deadline::after(budget + WAIT_MARGIN);
    while !deadline.is_past() {
        if let Ok(text) = std::fs::read_to_string(&done)
            && !text.is_empty()
        {
            return text.starts_with("slow");
        }
        std::thread::sleep(deadline.limit(Duration::from_millis(20)));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Lines;
    use std::collections::BTreeMap;

    struct Canned(Result<collective::Report, String>);

    impl StepCollective for Canned {
        fn run(
            &self,
            _: &PluginArgs,
            _: &StepEnv,
            _: Duration,
            _: Instant,
        ) -> Result<collective::Report, String> {
            self.0.clone()
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn env(local_id: u32) -> StepEnv {
        step_env(vars(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_ID", "1"),
            ("SLURMD_NODENAME", "n2"),
            ("SLURM_STEP_NODELIST", "n[1-2]"),
            ("SLURM_JOB_NODELIST", "n[1-3]"),
            ("SLURM_LOCALID", &local_id.to_string()),
        ]))
        .unwrap()
    }

    fn plugin(dir: &std::path::Path, policy: &str) -> PluginArgs {
        let spool = format!("spool_dir={}", dir.display());
        let policy = format!("policy={policy}");
        PluginArgs::parse([spool.as_str(), policy.as_str()]).0
    }

    /// The gate of local task `local_id` with half a second left and `collective`'s answer.
    fn gate(
        p: &PluginArgs,
        local_id: u32,
        collective: &Canned,
        uid: u32,
        lines: &Lines,
    ) -> GateOutcome {
        run(
            p,
            &env(local_id),
            Duration::from_millis(500),
            collective,
            uid,
            lines,
        )
    }

    fn slow_report(slow: &str) -> collective::Report {
        collective::Report {
            schema: collective::SCHEMA.into(),
            backend: "tcp".into(),
            job_id: 7,
            node: "n2".into(),
            nodes: vec!["n1".into(), "n2".into()],
            verdict: fabric_proto::tag::Verdict::Fail,
            duration_ms: 40,
            budget_ms: 500,
            sizes: vec![],
            ranks: vec![],
            links: vec![],
            outliers: vec![slow.to_owned()],
            tails: vec![],
            suspects: vec![],
            missing: vec![],
            wrong: 0,
            messages: vec![format!("{slow} is slow")],
            error: None,
            skipped: None,
        }
    }

    #[test]
    fn the_step_environment_names_what_is_missing_or_malformed() {
        assert_eq!(
            step_env(vars(&[])).unwrap_err().to_string(),
            "SLURM_JOB_ID is not set"
        );
        let err = step_env(vars(&[("SLURM_JOB_ID", "x")])).unwrap_err();
        assert_eq!(err.to_string(), "SLURM_JOB_ID=\"x\" is not a number");
        let e = env(0);
        assert_eq!(e.step_nodes, vec!["n1".to_owned(), "n2".to_owned()]);
        assert_eq!(e.job_nodes.len(), 3);
    }

    #[test]
    fn a_node_named_slow_under_enforce_stops_its_tasks_and_leaves_its_result_for_the_epilog() {
        let dir = tempfile::tempdir().unwrap();
        let p = plugin(dir.path(), "enforce");
        let lines = Lines::default();
        let uid = nix::unistd::getuid().as_raw();
        let out = gate(&p, 0, &Canned(Ok(slow_report("n2"))), uid, &lines);
        assert_eq!(out, GateOutcome::Stop);
        assert!(lines.has("--exclude=n2"), "{}", lines.text());
        let results = std::fs::read_to_string(dir.path().join("7/n2.steps.jsonl")).unwrap();
        let (got, bad) = stepgate::parse_results(&results);
        assert_eq!(bad, 0);
        assert!(got[0].slow_here);
        // The node's other tasks read local task 0's word and stop too.
        assert_eq!(
            gate(&p, 1, &Canned(Err("unused".into())), uid, &lines),
            GateOutcome::Stop
        );
    }

    #[test]
    fn a_slow_node_under_warn_runs_and_a_collective_that_cannot_run_never_stops_a_task() {
        let dir = tempfile::tempdir().unwrap();
        let uid = nix::unistd::getuid().as_raw();
        let lines = Lines::default();
        let p = plugin(dir.path(), "warn");
        assert_eq!(
            gate(&p, 0, &Canned(Ok(slow_report("n2"))), uid, &lines),
            GateOutcome::Run
        );
        assert!(
            lines.has("running anyway (policy=warn)"),
            "{}",
            lines.text()
        );
        let dir = tempfile::tempdir().unwrap();
        let p = plugin(dir.path(), "enforce");
        assert_eq!(
            gate(&p, 0, &Canned(Err("no munge".into())), uid, &lines),
            GateOutcome::Run
        );
        assert!(lines.has("could not run on n2: no munge; the task runs unchecked"));
    }
}
