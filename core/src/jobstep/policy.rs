//! The one policy table: what each phase of the job step does with what it found, under the
//! plugin's `policy=` (and `drain_on_error=`).
//!
//! Every path that can drain, stop a step or tag asks [`decide`]; none tests
//! [`Policy::Enforce`] itself. The table is total (a `match` without a default arm, so a new
//! phase or finding is a compile error until it is decided) and is written out in
//! docs/operations.md by [`markdown_table`]; a test compares the two row by row.
//!
//! What the job produced (its step gates' results, its `fabric-run` records) is
//! [`Found::JobReportedSlow`]: it is tagged as the job's and never drains, under any policy.

use fabric_proto::plugin_args::{PluginArgs, Policy};
use fabric_proto::tag::Verdict;

/// Where in the job's life the finding was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// `fabric-check prolog` (job start, every node, root).
    Prolog,
    /// `fabric-check epilog` (job end, every node, root).
    Epilog,
    /// `fabric-check health` (`HealthCheckProgram`, root, no job).
    Health,
    /// `fabric-check step-gate` (a `--fabric-check=full` step's tasks, job user).
    StepGate,
    /// `fabric-check watch` (the in-job watch, root, while the job runs).
    Watch,
}

impl Phase {
    /// Every phase, in the documented order.
    pub const ALL: [Phase; 5] = [
        Phase::Prolog,
        Phase::Epilog,
        Phase::Health,
        Phase::StepGate,
        Phase::Watch,
    ];

    /// The name used in logs and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Prolog => "prolog",
            Phase::Epilog => "epilog",
            Phase::Health => "health",
            Phase::StepGate => "step gate",
            Phase::Watch => "watch",
        }
    }
}

/// What was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Found {
    /// Root's probe gave `fail` (a port, a setting, or counters that rose past a `fail` bound).
    Fail,
    /// Root's probe gave `warn`.
    Warn,
    /// Root's own collective (the prolog's `full` check) named this node slow.
    SlowNode,
    /// The job's step gate (run as the job's user) named this node slow.
    JobReportedSlow,
    /// The probe could not look (timeout, crash, no document): not a node failure.
    CouldNotLook,
    /// The job's own steps, compared across its nodes by the first node's watch: a straggler,
    /// or a slowdown that is the workload's (evidence, like the step gate's claims).
    Straggler,
}

impl Found {
    /// Every finding, in the documented order.
    pub const ALL: [Found; 6] = [
        Found::Fail,
        Found::Warn,
        Found::SlowNode,
        Found::JobReportedSlow,
        Found::CouldNotLook,
        Found::Straggler,
    ];

    /// What root's probe verdict is as a finding (`pass` finds nothing).
    pub fn of_verdict(verdict: Verdict) -> Option<Found> {
        match verdict {
            Verdict::Pass => None,
            Verdict::Warn => Some(Found::Warn),
            Verdict::Fail => Some(Found::Fail),
            Verdict::Error => Some(Found::CouldNotLook),
        }
    }

    /// The name used in docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Found::Fail => "fail",
            Found::Warn => "warn",
            Found::SlowNode => "slow node (root's collective)",
            Found::JobReportedSlow => "slow node (the job's step gate)",
            Found::CouldNotLook => "could not look",
            Found::Straggler => "straggler (the job's steps, across its nodes)",
        }
    }
}

/// What to do. Everything found is logged in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Action {
    /// Drain this node (through [`crate::drain::drain_node`]: etiquette, guard, settle).
    pub drain: bool,
    /// Stop the step's tasks on this node before the user's program starts.
    pub stop_step: bool,
    /// Record it in the job's tag.
    pub tag: bool,
    /// Tell the running job (the notice file `fabric-run` reads).
    pub tell_job: bool,
}

impl Action {
    const LOG: Action = Action {
        drain: false,
        stop_step: false,
        tag: false,
        tell_job: false,
    };
    const TAG: Action = Action {
        tag: true,
        ..Action::LOG
    };
    const DRAIN_TAG: Action = Action {
        drain: true,
        tag: true,
        ..Action::LOG
    };
    const DRAIN: Action = Action {
        drain: true,
        ..Action::LOG
    };

    /// The documented words: `drain + tag`, `stop step + tag`, `log`, ...
    pub fn words(self) -> String {
        let mut w = Vec::new();
        if self.drain {
            w.push("drain");
        }
        if self.stop_step {
            w.push("stop step");
        }
        if self.tag {
            w.push("tag");
        }
        if self.tell_job {
            w.push("tell job");
        }
        if w.is_empty() {
            "log".to_owned()
        } else {
            w.join(" + ")
        }
    }
}

/// The table: what `phase` does with `found` under `policy` (and `drain_on_error`).
///
/// `None` means the phase never makes that finding (the health run has no collective, the step
/// gate runs no probe).
pub fn decide_with(
    phase: Phase,
    found: Found,
    policy: Policy,
    drain_on_error: bool,
) -> Option<Action> {
    use Found::*;
    use Phase::*;
    use Policy::*;
    let tell = |a: Action| Action {
        tell_job: true,
        ..a
    };
    Some(match (phase, found, policy) {
        // Job start: a failing node leaves the job (drain → the prolog fails → requeue).
        (Prolog | Epilog, Fail, Enforce) => Action::DRAIN_TAG,
        (Prolog | Epilog, Fail, Policy::Warn) => Action::TAG,
        (Prolog | Epilog, Fail, Observe) => Action::LOG,
        (Prolog | Epilog, Found::Warn, Enforce | Policy::Warn) => Action::TAG,
        (Prolog | Epilog, Found::Warn, Observe) => Action::LOG,
        (Prolog, SlowNode, Enforce) => Action::DRAIN_TAG,
        (Prolog, SlowNode, Policy::Warn) => Action::TAG,
        (Prolog, SlowNode, Observe) => Action::LOG,
        (Prolog, CouldNotLook, Enforce) if drain_on_error => Action::DRAIN_TAG,
        (Prolog, CouldNotLook, Enforce | Policy::Warn) => Action::TAG,
        (Prolog, CouldNotLook, Observe) => Action::LOG,
        // Job end: the epilog's own probe failing drains; the job's claims are only shown.
        (Epilog, CouldNotLook, _) => Action::LOG,
        (Epilog | StepGate, JobReportedSlow, Observe) => Action::LOG,
        (Epilog, JobReportedSlow, Enforce | Policy::Warn) => Action::TAG,
        (Epilog | Health | StepGate | Watch, SlowNode, _) => return None,
        (Prolog | Health | Watch, JobReportedSlow, _) => return None,
        // Idle nodes: no job to tag.
        (Health, Fail, Enforce) => Action::DRAIN,
        (Health, Fail, Policy::Warn | Observe) => Action::LOG,
        (Health, Found::Warn | CouldNotLook, _) => Action::LOG,
        // The step gate runs as the job's user: it can stop its own tasks, never drain.
        (StepGate, JobReportedSlow, Enforce) => Action {
            stop_step: true,
            tag: true,
            ..Action::LOG
        },
        (StepGate, JobReportedSlow, Policy::Warn) => Action::TAG,
        (StepGate, Fail | Found::Warn | CouldNotLook, _) => return None,
        // The in-job watch: a fault that appears while the job runs; the job is told at once.
        (Watch, Fail, Enforce) => tell(Action::DRAIN_TAG),
        (Watch, Fail, Policy::Warn) => tell(Action::TAG),
        (Watch, Fail, Observe) => Action::LOG,
        // A `warn` that appears (a pause storm, a counter over its warn bound) goes into the
        // live tag and the job's notice at once, marked a warning; never a drain (and
        // `fabric-run` sends no signal for it).
        (Watch, Found::Warn, Enforce | Policy::Warn) => tell(Action::TAG),
        (Watch, Found::Warn, Observe) | (Watch, CouldNotLook, _) => Action::LOG,
        // The job's own steps across its nodes: a straggler (or the workload's slowdown) is
        // evidence, tagged and told, and never drains, whatever the policy.
        (Watch, Straggler, Enforce | Policy::Warn) => tell(Action::TAG),
        (Watch, Straggler, Observe) => Action::LOG,
        (Prolog | Epilog | Health | StepGate, Straggler, _) => return None,
    })
}

/// [`decide_with`] for the plugin's `policy=` and `drain_on_error=`; a finding the phase never
/// makes is only logged.
pub fn decide(phase: Phase, found: Found, plugin: &PluginArgs) -> Action {
    decide_with(phase, found, plugin.policy, plugin.drain_on_error).unwrap_or_default()
}

/// Whether root's probe `verdict` drains in `phase` under the plugin's settings.
pub fn verdict_drains(phase: Phase, verdict: Verdict, plugin: &PluginArgs) -> bool {
    Found::of_verdict(verdict).is_some_and(|f| decide(phase, f, plugin).drain)
}

/// Whether `phase` writes a tag at all under `policy` (`observe` tags nothing).
pub fn tags(policy: Policy) -> bool {
    policy != Policy::Observe
}

/// The policy table as docs/operations.md shows it, one row per phase and finding, one column
/// per policy (with `drain_on_error=yes` a column of its own where it changes the answer).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| phase | found | `enforce` | `enforce` + `drain_on_error=yes` | `warn` | `observe` |\n\
         |---|---|---|---|---|---|\n",
    );
    for phase in Phase::ALL {
        for found in Found::ALL {
            let Some(enforce) = decide_with(phase, found, Policy::Enforce, false) else {
                continue;
            };
            let cell = |p, doe| {
                decide_with(phase, found, p, doe)
                    .unwrap_or_default()
                    .words()
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                phase.as_str(),
                found.as_str(),
                enforce.words(),
                cell(Policy::Enforce, true),
                cell(Policy::Warn, false),
                cell(Policy::Observe, false),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = include_str!("../../../docs/operations.md");
    const BEGIN: &str = "<!-- policy-table:begin (generated by core/src/jobstep/policy.rs) -->\n";
    const END: &str = "<!-- policy-table:end -->";

    #[test]
    fn a_straggler_is_tagged_and_told_and_never_drains_under_any_policy() {
        for policy in [Policy::Enforce, Policy::Warn, Policy::Observe] {
            for drain_on_error in [false, true] {
                for phase in [Phase::Prolog, Phase::Epilog, Phase::Health, Phase::StepGate] {
                    assert_eq!(
                        decide_with(phase, Found::Straggler, policy, drain_on_error),
                        None
                    );
                }
                let a = decide_with(Phase::Watch, Found::Straggler, policy, drain_on_error)
                    .expect("the watch names stragglers");
                assert!(!a.drain && !a.stop_step, "{policy:?}: {a:?}");
                assert_eq!(a.tag, policy != Policy::Observe, "{policy:?}");
                assert_eq!(a.tell_job, policy != Policy::Observe, "{policy:?}");
            }
        }
    }

    #[test]
    fn the_documented_policy_table_is_the_one_the_code_decides_with() {
        let start = DOC
            .find(BEGIN)
            .expect("docs/operations.md has the policy table markers")
            + BEGIN.len();
        let len = DOC[start..].find(END).expect("the end marker follows");
        let doc = &DOC[start..start + len];
        let code = markdown_table();
        for (i, (d, c)) in doc.lines().zip(code.lines()).enumerate() {
            assert_eq!(
                d, c,
                "row {i} of docs/operations.md's policy table differs from the code"
            );
        }
        assert_eq!(
            doc.lines().count(),
            code.lines().count(),
            "docs/operations.md's policy table has another number of rows; paste:\n{code}"
        );
    }

    #[test]
    fn only_enforce_drains_in_any_phase() {
        for phase in Phase::ALL {
            for found in Found::ALL {
                for doe in [false, true] {
                    for p in [Policy::Warn, Policy::Observe] {
                        let a = decide_with(phase, found, p, doe).unwrap_or_default();
                        assert!(!a.drain, "{phase:?} {found:?} drains under {p:?}");
                        assert!(!a.stop_step, "{phase:?} {found:?} stops a step under {p:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn what_the_job_reported_never_drains() {
        for phase in Phase::ALL {
            for p in [Policy::Enforce, Policy::Warn, Policy::Observe] {
                for doe in [false, true] {
                    let a = decide_with(phase, Found::JobReportedSlow, p, doe).unwrap_or_default();
                    assert!(!a.drain, "{phase:?} drains on the job's claim under {p:?}");
                }
            }
        }
    }

    #[test]
    fn a_probe_that_could_not_look_drains_only_a_prolog_under_drain_on_error() {
        for phase in Phase::ALL {
            let a =
                decide_with(phase, Found::CouldNotLook, Policy::Enforce, true).unwrap_or_default();
            assert_eq!(a.drain, phase == Phase::Prolog, "{phase:?}");
            let a =
                decide_with(phase, Found::CouldNotLook, Policy::Enforce, false).unwrap_or_default();
            assert!(
                !a.drain,
                "{phase:?} drains on could-not-look without drain_on_error"
            );
        }
    }

    #[test]
    fn health_under_warn_drains_nothing() {
        let a = decide_with(Phase::Health, Found::Fail, Policy::Warn, false).unwrap();
        assert_eq!(a, Action::LOG);
    }

    #[test]
    fn observe_tags_and_tells_nothing() {
        for phase in Phase::ALL {
            for found in Found::ALL {
                let a = decide_with(phase, found, Policy::Observe, true).unwrap_or_default();
                assert_eq!(a, Action::LOG, "{phase:?} {found:?} under observe");
            }
        }
    }

    #[test]
    fn the_watch_tells_the_job_of_a_failure_under_enforce_and_warn() {
        assert_eq!(
            decide_with(Phase::Watch, Found::Fail, Policy::Enforce, false).unwrap(),
            Action {
                drain: true,
                tag: true,
                tell_job: true,
                stop_step: false
            }
        );
        let warn = decide_with(Phase::Watch, Found::Fail, Policy::Warn, false).unwrap();
        assert!(warn.tell_job && warn.tag && !warn.drain);
    }
}
