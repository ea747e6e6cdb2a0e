//! The step gate (Slurm 23.11 and newer): what `fabric-check step-gate` decides before a
//! `--fabric-check=full` step's tasks start, and what it leaves for the job epilog.
//!
//! The plugin prepends `fabric-check step-gate --plugin-arg ... --` to every task of the step
//! (`spank_prepend_task_argv`). On each node, local task 0 runs the collective among the step's
//! nodes (as the job's user, in the tasks' network namespace) and writes the node's result into
//! the spool; the node's other tasks wait for that result, bounded. Then every task execs its
//! own command, except on a node named slow under `policy=enforce`, where the tasks stop before
//! the user's program starts. The job epilog (root) reads the spool file with the same checks as
//! `fabric-run` records, drains a node named slow by policy, and merges the worst step into the
//! job tag.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use fabric_proto::tag::{CollectiveSummary, Verdict};

/// What Slurm tells a task about its step (from its environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepEnv {
    /// `SLURM_JOB_ID`.
    pub job_id: u32,
    /// `SLURM_STEP_ID`.
    pub step_id: u32,
    /// `SLURMD_NODENAME`.
    pub node: String,
    /// `SLURM_STEP_NODELIST`, expanded.
    pub step_nodes: Vec<String>,
    /// `SLURM_JOB_NODELIST`, expanded.
    pub job_nodes: Vec<String>,
    /// `SLURM_LOCALID`: the task's index on this node.
    pub local_id: u32,
}

/// What this task does before it execs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run the command at once, for this reason.
    Skip(&'static str),
    /// Run the collective for this node (local task 0).
    Run,
    /// Wait for local task 0's result on this node.
    Wait,
}

/// Decides what a task does.
///
/// A one-node step has no ring. Step 0 on exactly the job's nodes was checked by the job prolog
/// at job start (the job asked for `full` too), so it is not checked twice.
pub fn decide(env: &StepEnv) -> Action {
    if env.step_nodes.len() < 2 {
        return Action::Skip("a one-node step has no ring to check");
    }
    if env.step_id == 0 && env.step_nodes == env.job_nodes {
        return Action::Skip("the job prolog checked these nodes at job start");
    }
    if !env.step_nodes.contains(&env.node) {
        return Action::Skip("this node is not in the step's node list");
    }
    if env.local_id == 0 {
        Action::Run
    } else {
        Action::Wait
    }
}

/// One gated step's result on one node: a line of `<spool>/<job>/<node>.steps.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// The step id.
    pub step: u32,
    /// The node.
    pub node: String,
    /// The collective's condensed result.
    pub collective: CollectiveSummary,
    /// Whether this node was named slow.
    pub slow_here: bool,
    /// The collective's first message (why the node is slow), bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The longest message kept in a [`StepResult`].
pub const MAX_MESSAGE_CHARS: usize = 300;

impl StepResult {
    /// The JSON line written to the spool (bounded message, newline-terminated).
    pub fn to_line(&self) -> String {
        let mut r = self.clone();
        if let Some(m) = &mut r.message {
            *m = m.chars().take(MAX_MESSAGE_CHARS).collect();
        }
        let mut s = serde_json::to_string(&r).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Where one node's step results go: `<spool>/<job>/<node>.steps.jsonl`; `None` when the names
/// would escape the spool.
pub fn results_path(spool_root: &Path, job_id: &str, node: &str) -> Option<PathBuf> {
    fabric_proto::record::node_records_path(spool_root, job_id, node)
        .map(|p| p.with_file_name(format!("{node}.steps.jsonl")))
}

/// Where local task 0 tells this node's other tasks that the step's check is over:
/// `<spool>/<job>/<node>.step-<step>.done`, holding `ok` or `slow`.
pub fn done_path(spool_root: &Path, job_id: &str, node: &str, step: u32) -> Option<PathBuf> {
    fabric_proto::record::node_records_path(spool_root, job_id, node)
        .map(|p| p.with_file_name(format!("{node}.step-{step}.done")))
}

/// Parses step result lines; lines that are not a [`StepResult`] are counted, not fatal.
pub fn parse_results(text: &str) -> (Vec<StepResult>, usize) {
    let mut ok = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<StepResult>(line) {
            Ok(r) => ok.push(r),
            Err(_) => bad += 1,
        }
    }
    (ok, bad)
}

/// The summary the tag keeps: the worst of what it holds and the steps' results (a later step
/// replaces an equally bad one, so the tag shows the latest of the worst).
pub fn worst(
    current: Option<CollectiveSummary>,
    steps: &[CollectiveSummary],
) -> Option<CollectiveSummary> {
    let rank = |s: &CollectiveSummary| s.verdict.unwrap_or(Verdict::Pass);
    let mut best = current;
    for s in steps {
        match &best {
            Some(b) if rank(b) > rank(s) => {}
            _ => best = Some(s.clone()),
        }
    }
    best
}

/// Reads a `node address` file (`#` comments, blank lines skipped) into pairs.
pub fn parse_hosts_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_owned(), w.next()?.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(step: u32, step_nodes: &[&str], local: u32) -> StepEnv {
        StepEnv {
            job_id: 7,
            step_id: step,
            node: "n1".into(),
            step_nodes: step_nodes.iter().map(|s| s.to_string()).collect(),
            job_nodes: ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect(),
            local_id: local,
        }
    }

    #[test]
    fn local_task_zero_runs_the_check_and_the_others_wait() {
        assert_eq!(decide(&env(1, &["n1", "n2"], 0)), Action::Run);
        assert_eq!(decide(&env(1, &["n1", "n2"], 3)), Action::Wait);
    }

    #[test]
    fn the_first_step_on_all_the_jobs_nodes_is_not_checked_twice() {
        assert!(matches!(
            decide(&env(0, &["n1", "n2", "n3"], 0)),
            Action::Skip(_)
        ));
        assert_eq!(decide(&env(0, &["n1", "n2"], 0)), Action::Run);
        assert_eq!(decide(&env(2, &["n1", "n2", "n3"], 0)), Action::Run);
    }

    #[test]
    fn a_one_node_step_or_a_foreign_node_runs_unchecked() {
        assert!(matches!(decide(&env(1, &["n1"], 0)), Action::Skip(_)));
        assert!(matches!(decide(&env(1, &["n2", "n3"], 0)), Action::Skip(_)));
    }

    #[test]
    fn result_lines_round_trip_with_a_bounded_message() {
        let r = StepResult {
            step: 4,
            node: "n3".into(),
            collective: CollectiveSummary {
                verdict: Some(Verdict::Fail),
                outliers: vec!["n3".into()],
                ..CollectiveSummary::default()
            },
            slow_here: true,
            message: Some("x".repeat(1000)),
        };
        let text = format!("{}garbage\n{}", r.to_line(), r.to_line());
        let (got, bad) = parse_results(&text);
        assert_eq!(bad, 1);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0].message.as_deref().map(str::len),
            Some(MAX_MESSAGE_CHARS)
        );
        assert!(got[0].slow_here);
    }

    #[test]
    fn the_tag_keeps_the_worst_and_latest_step() {
        let s = |v: Verdict, bw: f64| CollectiveSummary {
            verdict: Some(v),
            busbw_gb_s: Some(bw),
            ..CollectiveSummary::default()
        };
        let got = worst(
            Some(s(Verdict::Pass, 1.0)),
            &[s(Verdict::Fail, 2.0), s(Verdict::Pass, 3.0)],
        );
        assert_eq!(got, Some(s(Verdict::Fail, 2.0)));
        assert_eq!(
            worst(None, &[s(Verdict::Pass, 1.0), s(Verdict::Pass, 2.0)]),
            Some(s(Verdict::Pass, 2.0))
        );
        assert_eq!(worst(None, &[]), None);
    }

    #[test]
    fn paths_stay_inside_the_spool() {
        let root = Path::new("/spool");
        assert_eq!(
            results_path(root, "12", "n1"),
            Some(PathBuf::from("/spool/12/n1.steps.jsonl"))
        );
        assert_eq!(
            done_path(root, "12", "n1", 3),
            Some(PathBuf::from("/spool/12/n1.step-3.done"))
        );
        assert_eq!(results_path(root, "..", "n1"), None);
        assert_eq!(done_path(root, "12", "a/b", 0), None);
    }

    #[test]
    fn hosts_files_skip_comments_and_short_lines() {
        let got = parse_hosts_file("# c\n\nn1 10.0.0.1\nn2\n n3  10.0.0.3 extra\n");
        assert_eq!(
            got,
            vec![
                ("n1".to_owned(), "10.0.0.1".to_owned()),
                ("n3".to_owned(), "10.0.0.3".to_owned())
            ]
        );
    }
}
