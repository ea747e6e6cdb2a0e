//! One run's records reduced to what effective training time needs ([`EttFacts`]): the epilog
//! calls [`timeline`] on the lead rank's records of a node, and the report and `jobs` read the
//! result from the tag's run summary. Definitions and sources: `docs/cost-model.md`,
//! "Effective training time".
//!
//! Walking the records in time order:
//!
//! * a `step` record with a duration adds that step to the steps since the last checkpoint;
//! * a `checkpoint` keeps them (their time counts as kept);
//! * an `attempt` that exited 0 without a relaunch keeps them too (the run finished them);
//! * an `attempt` that did not (non-zero exit, a signal, a relaunch), or a launch whose records
//!   stop without `step_end` (the wrapper was killed, the node died, the job was requeued), is a
//!   **failure**: the steps since the last checkpoint are lost, and the failure is open until the
//!   next step boundary of any later attempt or launch (after its restore), which gives its time
//!   to recover.

use crate::record::{Body, Record};
use crate::tag::{EttFacts, MAX_ETT_FAILURES, RunFailure};

/// The walk's state: steps since the last checkpoint, failures so far and those still open.
#[derive(Default)]
struct Walk {
    facts: EttFacts,
    failures: Vec<RunFailure>,
    open: Vec<usize>,
    pending_s: f64,
    pending_n: u64,
    notice: bool,
}

impl Walk {
    fn keep(&mut self) {
        self.facts.kept_s += self.pending_s;
        self.pending_s = 0.0;
        self.pending_n = 0;
    }

    fn fail(&mut self, at_s: f64) {
        self.facts.lost_s += self.pending_s;
        self.facts.failures_n += 1;
        self.open.push(self.failures.len());
        self.failures.push(RunFailure {
            at_s,
            recover_s: None,
            lost_steps: self.pending_n,
            lost_s: self.pending_s,
            fabric_notice: self.notice,
        });
        self.pending_s = 0.0;
        self.pending_n = 0;
        self.notice = false;
    }
}

/// Reduces one rank's records (any order; they are sorted by their time) to [`EttFacts`];
/// `None` for no records.
pub fn timeline<'a>(records: impl IntoIterator<Item = &'a Record>) -> Option<EttFacts> {
    let mut recs: Vec<&Record> = records.into_iter().collect();
    if recs.is_empty() {
        return None;
    }
    recs.sort_by(|a, b| a.meta.ts.total_cmp(&b.meta.ts));
    let mut w = Walk::default();
    let mut running = false;
    let mut last_ts = recs[0].meta.ts;
    for r in recs {
        let ts = r.meta.ts;
        match &r.body {
            Body::StepStart { .. } => {
                if running {
                    // The launch before vanished without its step_end.
                    w.fail(last_ts);
                }
                running = true;
            }
            Body::Step { duration_s, .. } => {
                w.facts.first_step_at_s.get_or_insert(ts);
                for i in std::mem::take(&mut w.open) {
                    w.failures[i].recover_s = Some((ts - w.failures[i].at_s).max(0.0));
                }
                if let Some(d) = duration_s.filter(|d| d.is_finite() && *d >= 0.0) {
                    w.pending_s += d;
                    w.pending_n += 1;
                }
            }
            Body::Checkpoint { .. } => w.keep(),
            Body::FabricFault { .. } => w.notice = true,
            Body::Attempt {
                exit_code,
                signal,
                retry,
                ..
            } => {
                if *exit_code == Some(0) && signal.is_none() && !retry {
                    w.keep();
                } else {
                    w.fail(ts);
                }
            }
            Body::StepEnd { .. } => running = false,
            Body::Restore { .. } | Body::Output { .. } | Body::SlowSteps { .. } | Body::Unknown => {
            }
        }
        last_ts = ts;
    }
    if running {
        w.fail(last_ts);
    }
    let mut facts = w.facts;
    facts.failures = w.failures;
    facts.failures.truncate(MAX_ETT_FAILURES);
    Some(facts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Meta, Outcome, Source};

    fn rec(ts: f64, body: Body) -> Record {
        Record {
            meta: Meta {
                v: 1,
                ts,
                run: "n1:1:0".into(),
                node: "n1".into(),
                ..Meta::default()
            },
            body,
        }
    }
    fn start(ts: f64) -> Record {
        rec(
            ts,
            Body::StepStart {
                pid: 1,
                cmd: vec!["train".into()],
                deadline: None,
                retries_max: 1,
            },
        )
    }
    fn step(ts: f64, d: Option<f64>) -> Record {
        rec(
            ts,
            Body::Step {
                n: None,
                duration_s: d,
                ckpt_s: 0.0,
                attempt: 1,
            },
        )
    }
    fn ckpt(ts: f64) -> Record {
        rec(
            ts,
            Body::Checkpoint {
                duration_s: 1.0,
                source: Source::Marker,
                bytes: None,
                attempt: 1,
            },
        )
    }
    fn attempt(ts: f64, exit: i32, retry: bool) -> Record {
        rec(
            ts,
            Body::Attempt {
                attempt: 1,
                duration_s: 1.0,
                exit_code: Some(exit),
                signal: None,
                retry,
                reason: None,
            },
        )
    }
    fn end(ts: f64, outcome: Outcome) -> Record {
        rec(
            ts,
            Body::StepEnd {
                duration_s: 1.0,
                exit_code: Some(0),
                signal: None,
                outcome,
                attempts: 2,
                on_time: true,
                validated: None,
                sigterm: false,
            },
        )
    }

    #[test]
    fn a_run_without_failures_keeps_every_step() {
        let recs = [
            start(100.0),
            step(110.0, None),
            step(120.0, Some(10.0)),
            step(130.0, Some(10.0)),
            attempt(131.0, 0, false),
            end(131.0, Outcome::Accepted),
        ];
        let f = timeline(&recs).unwrap();
        assert_eq!(f.first_step_at_s, Some(110.0));
        assert_eq!((f.kept_s, f.lost_s, f.failures_n), (20.0, 0.0, 0));
    }

    #[test]
    fn a_failure_loses_the_steps_since_the_checkpoint_and_recovers_at_the_first_step_after_it() {
        let recs = [
            start(100.0),
            step(110.0, None),
            step(120.0, Some(10.0)),
            ckpt(121.0),
            step(130.0, Some(9.0)),
            step(140.0, Some(10.0)),
            rec(
                141.0,
                Body::FabricFault {
                    check: "ib.port_state".into(),
                    message: "down".into(),
                    seen_at_s: 141,
                    into_job_s: 41,
                    drained: true,
                    sent_signal: None,
                    attempt: 1,
                },
            ),
            attempt(150.0, 1, true),
            step(175.0, None),
            step(185.0, Some(10.0)),
            attempt(186.0, 0, false),
            end(186.0, Outcome::Accepted),
        ];
        let f = timeline(&recs).unwrap();
        assert_eq!(f.kept_s, 20.0);
        assert_eq!(f.lost_s, 19.0);
        assert_eq!(f.failures_n, 1);
        let x = &f.failures[0];
        assert_eq!((x.at_s, x.recover_s, x.lost_steps), (150.0, Some(25.0), 2));
        assert!(x.fabric_notice);
    }

    #[test]
    fn a_launch_that_vanishes_is_a_failure_at_its_last_record_and_one_never_resumed_has_no_recovery()
     {
        let recs = [
            start(100.0),
            step(110.0, None),
            step(120.0, Some(10.0)),
            start(300.0),
            step(320.0, None),
            step(330.0, Some(10.0)),
        ];
        let f = timeline(&recs).unwrap();
        assert_eq!(f.failures_n, 2);
        assert_eq!(f.failures[0].at_s, 120.0);
        assert_eq!(f.failures[0].recover_s, Some(200.0));
        assert!(!f.failures[0].fabric_notice);
        assert_eq!(f.failures[1].at_s, 330.0);
        assert_eq!(f.failures[1].recover_s, None);
        assert_eq!((f.kept_s, f.lost_s), (0.0, 20.0));
    }

    #[test]
    fn no_records_give_no_facts() {
        assert_eq!(timeline(&[]), None);
    }
}
