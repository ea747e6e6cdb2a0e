//! Stragglers from the job's own steps: every node's in-job watch follows its `fabric-run`
//! records and sends a figure (the median step time of the last window) to the first node at
//! every hop; the first node's watch compares the nodes and names a node whose steps are slower
//! than the job's, or says the slowdown is the workload's (docs/checks.md, "Stragglers").
//!
//! | file | what it holds |
//! |---|---|
//! | [`steps`] | a node's side: its records followed, a hop's figure |
//! | [`judge`] | the verdict, pure: figures in, [`judge::Event`]s out |
//! | [`link`] | the watch's side: the thread started, the node's faults passed to it, the first node's events acted on |
//! | [`exchange`] | the hop loop in its own thread, and the [`exchange::Exchange`] seam |
//! | [`session`] | the real exchange: a rendezvous once a minute (the session's key and port), sealed datagrams between |
//! | this file | what an event becomes: its message and its entry in the job's tag |
//!
//! A straggler is evidence: the policy table tags it and tells the job, and **never drains**
//! (`policy.rs`), like the step gate's slow claims. A node whose own watch found a fabric fault
//! at the same time is drained by that fault's rule; the straggler event names both.

pub mod exchange;
pub mod judge;
pub mod link;
pub mod session;
pub mod steps;

#[cfg(test)]
mod judge_tests;

use fabric_proto::check_id::{JOB_STRAGGLER, JOB_WORKLOAD_SLOW};
use fabric_proto::tag::WatchEvent;

use judge::{Event, WorkloadKind};

/// When a hop's window started, Unix seconds (`hop_ms` apart; each window `window_ms` long).
pub fn window_start_s(hop: u64, hop_ms: u64, window_ms: u64) -> u64 {
    (hop * hop_ms).saturating_sub(window_ms) / 1000
}

/// A Unix time as `HH:MM:SS UTC`.
fn clock(unix_s: u64) -> String {
    let d = unix_s % 86_400;
    format!("{:02}:{:02}:{:02} UTC", d / 3600, d / 60 % 60, d % 60)
}

/// What the first node records for an event: the node whose `during` row it goes in, and the
/// watch event (a `warn`: never drained). `None` for what only goes to the log (a silent
/// node, a cleared one).
pub fn watch_event(
    ev: &Event,
    leader: &str,
    hop_ms: u64,
    window_ms: u64,
    job_start_s: u64,
) -> Option<(String, WatchEvent)> {
    let now_s = |hop: u64| hop * hop_ms / 1000;
    let (node, check, message, hop) = match ev {
        Event::Named(n) => {
            let since = window_start_s(n.since_hop, hop_ms, window_ms);
            let mut m = format!(
                "steps {:.2}x the job's median since {} ({} s windows); evidence only, never drained",
                n.ratio,
                clock(since),
                window_ms / 1000
            );
            if let Some(f) = &n.fault {
                m += &format!("; its own watch found {f} at the same time");
            }
            (n.node.clone(), JOB_STRAGGLER, m, n.hop)
        }
        Event::Workload(w) => {
            let since = window_start_s(w.since_hop, hop_ms, window_ms);
            let who = w.nodes.join(",");
            let m = match w.kind {
                WorkloadKind::Together => format!(
                    "{}: the job's median step {:.2}x its first windows' since {} ({who}); the workload's, no node is blamed",
                    w.kind.as_str(),
                    w.ratio,
                    clock(since)
                ),
                WorkloadKind::Rotating => format!(
                    "{} ({who}) since {}: the workload's, no node is blamed",
                    w.kind.as_str(),
                    clock(since)
                ),
            };
            (leader.to_owned(), JOB_WORKLOAD_SLOW, m, w.hop)
        }
        Event::Cleared { .. } | Event::Silent { .. } => return None,
    };
    let seen_at_s = now_s(hop);
    Some((
        node,
        WatchEvent {
            check: check.to_owned(),
            message,
            seen_at_s,
            into_job_s: seen_at_s.saturating_sub(job_start_s),
            cleared_at_s: None,
            drained: false,
            requeued: false,
            warn: true,
        },
    ))
}

/// The log line of an event.
pub fn log_line(ev: &Event, hop_ms: u64, window_ms: u64) -> String {
    match ev {
        Event::Named(n) => format!(
            "stragglers: {} named: steps {:.2}x the job's median since {}{}",
            n.node,
            n.ratio,
            clock(window_start_s(n.since_hop, hop_ms, window_ms)),
            n.fault
                .as_ref()
                .map(|f| format!(" (its own watch: {f})"))
                .unwrap_or_default()
        ),
        Event::Cleared { node, .. } => {
            format!("stragglers: {node}'s steps are back with the job's")
        }
        Event::Workload(w) => format!(
            "stragglers: {} ({}), {:.2}x: the workload's, no node named",
            w.kind.as_str(),
            w.nodes.join(","),
            w.ratio
        ),
        Event::Silent { node, since_hop } => format!(
            "stragglers: no step records from {node} since {} (not judged)",
            clock(window_start_s(*since_hop, hop_ms, 0))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use judge::{Named, Workload};

    #[test]
    fn a_named_straggler_goes_in_its_own_row_as_a_warning_naming_a_fault_beside_it() {
        let ev = Event::Named(Named {
            node: "n3".into(),
            ratio: 1.5,
            since_hop: 2,
            hop: 5,
            fault: Some("ib.port_rate".into()),
        });
        let (node, w) = watch_event(&ev, "n1", 5_000, 10_000, 0).unwrap();
        assert_eq!(node, "n3");
        assert_eq!(w.check, JOB_STRAGGLER);
        assert!(w.warn && !w.drained);
        assert_eq!(w.seen_at_s, 25);
        assert!(w.message.contains("1.50x"), "{}", w.message);
        assert!(w.message.contains("ib.port_rate"), "{}", w.message);
        assert!(w.message.contains("00:00:00 UTC"), "{}", w.message);
    }

    #[test]
    fn a_workload_slowdown_goes_in_the_first_nodes_row_and_blames_no_node() {
        let ev = Event::Workload(Workload {
            kind: WorkloadKind::Together,
            ratio: 1.4,
            since_hop: 10,
            hop: 13,
            nodes: vec!["n1".into(), "n2".into()],
        });
        let (node, w) = watch_event(&ev, "n1", 5_000, 10_000, 0).unwrap();
        assert_eq!(node, "n1");
        assert_eq!(w.check, JOB_WORKLOAD_SLOW);
        assert!(w.message.contains("no node is blamed"), "{}", w.message);
    }
}
