//! What the drill saw: drains with their reasons (`sinfo`), verdicts in the job tags (`sacct`),
//! what `health` said, each as a [`Signal`] with the time it was seen or recorded.
//!
//! The functions here are pure: they turn what the [`crate::cluster::Cluster`] seam read into
//! signals. Which detector caught a fault follows from where the signal came from: the prolog's
//! node results, the collective's `collective.slow_node`, the epilog's `during` window (and its
//! drain reason `during job N:`), the in-job watch (its live `during[].watch` entries and its
//! drain reason `during job N (watch):`, [`fabric_proto::during`]), `health`, or Slurm itself (a reason not written by
//! fabric-check, such as `Not responding`).

use fabric_proto::check_id;
use fabric_proto::tag::JobTag;
use fabric_proto::verdict::Verdict;
use serde::{Deserialize, Serialize};

/// Who caught it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detector {
    /// The prolog's node probe.
    Prolog,
    /// The prolog's cross-node collective (`--fabric-check=full`).
    Collective,
    /// The epilog's probe over the job window.
    Epilog,
    /// The in-job watch, while the job ran.
    Watch,
    /// `fabric-check health` on an idle node.
    Health,
    /// Slurm itself (a node not responding), not fabric-check.
    Slurm,
}

impl Detector {
    /// The stable id.
    pub fn id(self) -> &'static str {
        match self {
            Detector::Prolog => "prolog",
            Detector::Collective => "collective",
            Detector::Epilog => "epilog",
            Detector::Watch => "watch",
            Detector::Health => "health",
            Detector::Slurm => "slurm",
        }
    }
}

/// How strong the signal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strength {
    /// A `warn` verdict recorded against the job.
    Warn,
    /// A `fail` verdict.
    Fail,
    /// The node out of service (drained, or down).
    Drain,
}

/// One thing a detector said about one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    /// The node.
    pub node: String,
    /// When it was seen or recorded, Unix milliseconds.
    pub at_ms: u64,
    /// Who said it.
    pub detector: Detector,
    /// How strong.
    pub strength: Strength,
    /// The check id (or the reason's first word for Slurm's own).
    pub check: String,
    /// The job it is about, if any.
    pub job: Option<u32>,
}

/// A node as `sinfo` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    /// Name.
    pub name: String,
    /// Long state, lower case (`idle`, `drained`, `down*`, `mixed`, ...).
    pub state: String,
    /// Reason (empty when none).
    pub reason: String,
}

impl NodeView {
    /// Out of service: drained, draining, down, failed, or not responding (`*`: slurmctld
    /// could not reach its slurmd and schedules nothing there).
    pub fn out_of_service(&self) -> bool {
        let s = self.state.as_str();
        s.contains("drain") || s.contains("down") || s.contains("fail") || s.ends_with('*')
    }

    /// Whether the reason is fabric-check's.
    pub fn ours(&self) -> bool {
        self.reason.starts_with("fabric-check:")
    }
}

/// A drain seen in `node`'s view at `at_ms`, when it is out of service; `health_ran` says the
/// drill had just run `health` on it (the reason does not tell `health` from the prolog).
pub fn drain_signal(node: &NodeView, at_ms: u64, health_ran: bool) -> Option<Signal> {
    if !node.out_of_service() {
        return None;
    }
    let (detector, check) = if let Some(rest) = node.reason.strip_prefix("fabric-check:") {
        let rest = rest.trim_start();
        let check = rest.split(':').next().unwrap_or_default().trim().to_owned();
        let detector = if check == check_id::COLLECTIVE_SLOW_NODE {
            Detector::Collective
        } else if let Some((by, _)) = fabric_proto::during::seen_by(rest) {
            match by {
                fabric_proto::during::SeenBy::Watch => Detector::Watch,
                fabric_proto::during::SeenBy::Epilog => Detector::Epilog,
            }
        } else if health_ran {
            Detector::Health
        } else {
            Detector::Prolog
        };
        (detector, check)
    } else {
        let what = if node.state.ends_with('*') {
            "not_responding".to_owned()
        } else {
            node.reason
                .split_whitespace()
                .next()
                .unwrap_or("down")
                .to_lowercase()
        };
        (Detector::Slurm, format!("slurm.{what}"))
    };
    Some(Signal {
        node: node.name.clone(),
        at_ms,
        detector,
        strength: Strength::Drain,
        check,
        job: None,
    })
}

/// What the job's accounting record holds, as the drill reads it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// Job id.
    pub id: u32,
    /// `sacct` State (`COMPLETED`, `CANCELLED by 0`, `PENDING`, ...).
    pub state: String,
    /// Times Slurm requeued or restarted it.
    pub requeues: u32,
    /// Elapsed seconds.
    pub elapsed_s: f64,
    /// Nodes allocated (the last attempt).
    pub nnodes: u32,
    /// Start of the last attempt, Unix milliseconds (0 before it starts).
    pub start_ms: u64,
    /// End, Unix milliseconds (0 while it runs).
    pub end_ms: u64,
    /// The decoded tag, if any.
    pub tag: Option<JobTag>,
}

fn strength(v: Verdict) -> Option<Strength> {
    match v {
        Verdict::Warn => Some(Strength::Warn),
        Verdict::Fail => Some(Strength::Fail),
        _ => None,
    }
}

/// The warn and fail verdicts of a job's tag as signals: the prolog's node results (and those of
/// attempts before a requeue, `earlier`), at the probe time; the epilog's `during` window, at the
/// job's end; each at the last millisecond of its whole second.
pub fn tag_signals(job: &JobView) -> Vec<Signal> {
    let Some(tag) = &job.tag else {
        return Vec::new();
    };
    // Slurm's and the tag's times are whole seconds: the end of that second is the earliest
    // time the drill can be sure the verdict existed, so a time to detect is never understated.
    let probed_ms = tag.probed_at.map_or(0, |s| s * 1000 + 999);
    let mut out = Vec::new();
    for (node, r) in tag.nodes.iter().chain(tag.earlier.iter()) {
        let Some(s) = strength(r.verdict) else {
            continue;
        };
        let collective = r
            .checks
            .iter()
            .any(|c| c == check_id::COLLECTIVE_SLOW_NODE || c == check_id::COLLECTIVE_SLOW_SUSPECT);
        out.push(Signal {
            node: node.clone(),
            at_ms: probed_ms,
            detector: if collective {
                Detector::Collective
            } else {
                Detector::Prolog
            },
            strength: s,
            check: r.checks.first().cloned().unwrap_or_default(),
            job: Some(job.id),
        });
    }
    for d in &tag.during {
        // The watch's live entries, each at the second it was seen.
        for w in &d.watch {
            out.push(Signal {
                node: d.node.clone(),
                at_ms: w.seen_at_s * 1000 + 999,
                detector: Detector::Watch,
                strength: if w.drained {
                    Strength::Drain
                } else if w.warn {
                    Strength::Warn
                } else {
                    Strength::Fail
                },
                check: w.check.clone(),
                job: Some(job.id),
            });
        }
        let Some(s) = strength(d.verdict) else {
            continue;
        };
        out.push(Signal {
            node: d.node.clone(),
            at_ms: if job.end_ms > 0 {
                job.end_ms + 999
            } else {
                probed_ms
            },
            detector: Detector::Epilog,
            strength: s,
            check: d
                .rises
                .keys()
                .next()
                .map(|k| k.rsplit('/').next().unwrap_or(k).to_owned())
                .unwrap_or_else(|| "epilog.probe".to_owned()),
            job: Some(job.id),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_proto::tag::{DuringJob, NodeResult};

    fn view(state: &str, reason: &str) -> NodeView {
        NodeView {
            name: "n3".into(),
            state: state.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn a_drain_reason_names_its_detector() {
        let s = drain_signal(
            &view("drained", "fabric-check: ib.port_state: mlx5_3 down"),
            5,
            false,
        )
        .unwrap();
        assert_eq!(
            (s.detector, s.check.as_str()),
            (Detector::Prolog, "ib.port_state")
        );
        let s = drain_signal(
            &view("drained", "fabric-check: roce.ecn: during job 12: ecn off"),
            5,
            false,
        )
        .unwrap();
        assert_eq!(s.detector, Detector::Epilog);
        let s = drain_signal(
            &view(
                "draining",
                "fabric-check: collective.slow_node: n3 at 0.1 of median",
            ),
            5,
            false,
        )
        .unwrap();
        assert_eq!(s.detector, Detector::Collective);
        let s = drain_signal(&view("drained", "fabric-check: roce.pfc: off"), 5, true).unwrap();
        assert_eq!(s.detector, Detector::Health);
        let s = drain_signal(&view("down*", "Not responding"), 5, false).unwrap();
        assert_eq!(
            (s.detector, s.check.as_str()),
            (Detector::Slurm, "slurm.not_responding")
        );
        let s = drain_signal(&view("mixed*", ""), 5, false).unwrap();
        assert_eq!(s.check, "slurm.not_responding");
        let s = drain_signal(&view("down", "Kill task failed"), 5, false).unwrap();
        assert_eq!(s.check, "slurm.kill");
        assert_eq!(s.strength, Strength::Drain);
    }

    #[test]
    fn a_node_in_service_gives_no_drain_signal() {
        assert!(drain_signal(&view("idle", ""), 5, false).is_none());
        assert!(drain_signal(&view("mixed", ""), 5, false).is_none());
    }

    #[test]
    fn a_tag_gives_prolog_collective_and_epilog_signals_for_non_passing_nodes_only() {
        let mut tag = JobTag {
            probed_at: Some(100),
            ..JobTag::default()
        };
        tag.nodes.insert(
            "n1".into(),
            NodeResult {
                verdict: Verdict::Pass,
                checks: vec![],
                probe_ms: None,
                drained: false,
            },
        );
        tag.nodes.insert(
            "n2".into(),
            NodeResult {
                verdict: Verdict::Warn,
                checks: vec!["roce.congestion".into()],
                probe_ms: None,
                drained: false,
            },
        );
        tag.earlier.insert(
            "n3".into(),
            NodeResult {
                verdict: Verdict::Fail,
                checks: vec!["collective.slow_node".into()],
                probe_ms: None,
                drained: true,
            },
        );
        tag.during.push(DuringJob {
            node: "n4".into(),
            rises: [("mlx5_6/1/link_downed".to_owned(), 1)].into(),
            verdict: Verdict::Fail,
            watch: Vec::new(),
        });
        let job = JobView {
            id: 9,
            end_ms: 104_000,
            tag: Some(tag),
            ..JobView::default()
        };
        let s = tag_signals(&job);
        assert_eq!(s.len(), 3, "{s:?}");
        let n2 = s.iter().find(|s| s.node == "n2").unwrap();
        assert_eq!(
            (n2.detector, n2.strength, n2.at_ms),
            (Detector::Prolog, Strength::Warn, 100_999)
        );
        let n3 = s.iter().find(|s| s.node == "n3").unwrap();
        assert_eq!(n3.detector, Detector::Collective);
        let n4 = s.iter().find(|s| s.node == "n4").unwrap();
        assert_eq!(
            (n4.detector, n4.check.as_str(), n4.at_ms),
            (Detector::Epilog, "link_downed", 104_999)
        );
    }

    #[test]
    fn the_watchs_drain_and_its_live_entries_are_signals_of_the_watch_at_the_second_they_were_seen()
    {
        let node = NodeView {
            name: "n2".into(),
            state: "drained".into(),
            reason: "fabric-check: ib.port_state: during job 12 (watch): mlx5_0 port 1 is DOWN"
                .into(),
        };
        let s = drain_signal(&node, 5_000, false).unwrap();
        assert_eq!(
            (s.detector, s.check.as_str()),
            (Detector::Watch, "ib.port_state")
        );
        let epilog = NodeView {
            reason: "fabric-check: ib.port_state: during job 12: mlx5_0 port 1 is DOWN".into(),
            ..node
        };
        assert_eq!(
            drain_signal(&epilog, 5_000, false).unwrap().detector,
            Detector::Epilog
        );

        let mut tag = JobTag::default();
        tag.during.push(DuringJob {
            node: "n2".into(),
            rises: Default::default(),
            verdict: Verdict::Fail,
            watch: vec![fabric_proto::tag::WatchEvent {
                check: "ib.port_state".into(),
                message: "mlx5_0 port 1 is DOWN".into(),
                seen_at_s: 200,
                into_job_s: 11,
                cleared_at_s: None,
                drained: true,
                requeued: false,
                warn: false,
            }],
        });
        let job = JobView {
            id: 12,
            end_ms: 260_000,
            tag: Some(tag),
            ..JobView::default()
        };
        let w = tag_signals(&job)
            .into_iter()
            .find(|s| s.detector == Detector::Watch)
            .expect("a watch signal");
        assert_eq!((w.at_ms, w.strength), (200_999, Strength::Drain));
    }
}
