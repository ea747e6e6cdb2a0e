//! How the job step changes the job's tag, in one place: each function takes the tag Slurm
//! holds now (`None`: none yet) and what a phase found, and returns the tag to write. Writing
//! it (lock, read, retry, the RPC) is [`super::tag_write`]'s; keeping a prolog verdict Slurm
//! could not take is [`super::pending`]'s; what travels between nodes is [`super::payload`]'s.
//!
//! - the prolog leader: every node's [`PrologPayload`] folded into one result
//!   ([`prolog_result`]), written over the comment's tag ([`PendingPrologTag::apply`], which
//!   builds on [`prolog_tag`]); the epilog writes the same result later when the prolog could
//!   not;
//! - the epilog leader: every node's rises, run summary and step results ([`EpilogMerge`]),
//!   joined to the watch's live rows ([`merge_during`]); and for a checked job whose tag has no
//!   verdict then (the prolog's rendezvous failed), the epilog's own verdicts with a note that
//!   says why ([`Untagged`]);
//! - the in-job watch: a live fault added to its node's row ([`add_watch_event`]), and marked
//!   cleared ([`clear_watch_event`]).

use std::collections::BTreeMap;

use super::payload::PrologPayload;
use super::pending::PendingPrologTag;
use crate::stepgate;
use fabric_net::rendezvous::typed::Met;
use fabric_proto::tag::{
    CollectiveSummary, DuringJob, JobTag, NodeResult, RunSummary, SlowClaim, Verdict, WatchEvent,
};

/// The prolog leader's result from every node's payload: each node's verdict and notes, the
/// first collective summary present (every rank holds the same), and the nodes whose verdict
/// never arrived or could not be read, each with a note.
pub fn prolog_result(mode: &str, probed_at_s: u64, met: Met<PrologPayload>) -> PendingPrologTag {
    let mut nodes = BTreeMap::new();
    let mut all_notes = Vec::new();
    // Every rank holds the same collective report: take the first one present.
    let got_collective = met.payloads.values().find_map(|p| p.collective.clone());
    for (n, p) in met.payloads {
        nodes.insert(n, p.result);
        all_notes.extend(p.notes);
    }
    let mut missing = met.missing;
    for m in &missing {
        all_notes.push(format!("{m}: no verdict reached the first node in time"));
    }
    for u in met.undecodable {
        all_notes.push(format!(
            "{}: its verdict reached the first node but could not be read",
            u.node
        ));
        missing.push(u.node);
    }
    PendingPrologTag {
        mode: mode.to_owned(),
        probed_at_s,
        nodes,
        missing,
        notes: all_notes,
        collective: got_collective,
        spares: None,
    }
}

impl PendingPrologTag {
    /// The tag the prolog writes over `previous` (the comment's tag, if any).
    /// When `previous` already holds this very result (the write reached slurmctld but its
    /// answer did not come back: same mode, same probe second, which a requeued attempt, at
    /// least `cred_expire` later, never shares), it is kept as it is.
    ///
    /// A kept result belongs to the attempt whose prolog probed at `probed_at_s`. When
    /// `previous` holds a later attempt (a requeue whose prolog could write), the kept result is
    /// stale: it never replaces that attempt's verdict; only its non-passing nodes join
    /// `earlier`, as any earlier attempt's do.
    pub fn apply(self, previous: Option<JobTag>) -> JobTag {
        if let Some(p) = &previous
            && p.probed_at == Some(self.probed_at_s)
            && p.mode.as_deref() == Some(self.mode.as_str())
        {
            let mut p = previous.unwrap_or_default();
            // The same attempt written again because its spares ended otherwise than planned
            // (a refused shrink): only that entry changes.
            if self.spares.is_some() {
                p.spares = self.spares;
            }
            return p;
        }
        if previous
            .as_ref()
            .and_then(|p| p.probed_at)
            .is_some_and(|later| later > self.probed_at_s)
        {
            let mut p = previous.unwrap_or_default();
            for (n, r) in self.nodes {
                if r.verdict != Verdict::Pass {
                    p.earlier.entry(n).or_insert(r);
                }
            }
            return p;
        }
        let mut t = prolog_tag(
            previous,
            &self.mode,
            self.probed_at_s,
            self.nodes,
            self.missing,
            self.notes,
        );
        t.collective = self.collective;
        t.spares = self.spares;
        t
    }
}

/// Builds the tag of a new prolog attempt on top of whatever the job's comment already holds:
/// earlier attempts' non-passing nodes move to `earlier`, so a requeued job still names the node
/// that failed it.
pub fn prolog_tag(
    previous: Option<JobTag>,
    mode: &str,
    probed_at: u64,
    nodes: BTreeMap<String, NodeResult>,
    missing: Vec<String>,
    notes: Vec<String>,
) -> JobTag {
    let mut earlier = BTreeMap::new();
    if let Some(prev) = previous {
        earlier = prev.earlier;
        for (n, r) in prev.nodes {
            if r.verdict != Verdict::Pass {
                earlier.insert(n, r);
            }
        }
        for n in prev.missing {
            earlier.entry(n).or_insert(NodeResult {
                verdict: Verdict::Error,
                checks: vec![fabric_proto::check_id::RENDEZVOUS_MISSING.into()],
                probe_ms: None,
                drained: false,
            });
        }
    }
    let mut tag = JobTag {
        mode: Some(mode.to_owned()),
        probed_at: Some(probed_at),
        nnodes: (nodes.len() + missing.len()) as u32,
        nodes,
        missing,
        earlier,
        notes: notes
            .into_iter()
            .map(|n| n.chars().take(200).collect())
            .collect(),
        ..JobTag::default()
    };
    tag.recount();
    tag
}

/// What the epilog leader merges into the tag: a prolog verdict kept for it, every node's
/// `during` rows, the merged run summary, the step results and the slow-node claims.
#[derive(Debug, Clone, Default)]
pub struct EpilogMerge {
    /// The prolog's verdict that could not be written then (it goes in first).
    pub pending: Option<PendingPrologTag>,
    /// Each node's row with a rise or a verdict other than `pass`, by node.
    pub rows: Vec<DuringJob>,
    /// Every node's `fabric-run` summary, merged.
    pub run: Option<RunSummary>,
    /// The step gates' results (the job's).
    pub steps: Vec<CollectiveSummary>,
    /// The step gates' slow-node claims (the job's).
    pub slow: Vec<SlowClaim>,
    /// The verdicts to write when the tag has none (no prolog verdict reached Slurm).
    pub untagged: Option<Untagged>,
}

/// The prolog's part of the tag of a checked job that has none at its epilog (the prolog's
/// rendezvous failed on the first node, or the prolog did not finish there): the epilog's own
/// verdict of each node that reached it, the others missing, and notes that say why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Untagged {
    /// `quick` or `full`.
    pub mode: String,
    /// When the prolog gave up (or the epilog probed), Unix seconds.
    pub probed_at_s: u64,
    /// Each node's verdict as the epilog knows it.
    pub nodes: BTreeMap<String, NodeResult>,
    /// Nodes whose epilog payload never reached the first node either.
    pub missing: Vec<String>,
    /// Why there was no tag (`the rendezvous failed: ...`).
    pub notes: Vec<String>,
}

impl Untagged {
    /// The note of a rendezvous that failed with `reason`.
    pub fn note(reason: &str) -> String {
        format!("the rendezvous failed: {reason}")
    }

    /// Puts the prolog's part into `t` when it has no verdict (else leaves it); whether it did.
    fn fill(self, t: &mut JobTag) -> bool {
        if t.verdict.is_some() || !t.nodes.is_empty() || !t.missing.is_empty() {
            return false;
        }
        let built = prolog_tag(
            None,
            &self.mode,
            self.probed_at_s,
            self.nodes,
            self.missing,
            self.notes,
        );
        t.mode = built.mode;
        t.probed_at = built.probed_at;
        t.nnodes = built.nnodes;
        t.nodes = built.nodes;
        t.missing = built.missing;
        t.notes.extend(built.notes);
        t.recount();
        true
    }
}

impl EpilogMerge {
    /// Nothing to write: no kept verdict, no row, no run summary, no step result, no claim.
    pub fn is_empty(&self) -> bool {
        self.pending.is_none()
            && self.rows.is_empty()
            && self.run.is_none()
            && self.steps.is_empty()
            && self.slow.is_empty()
    }

    /// The tag the epilog writes over `prev`.
    pub fn apply(self, prev: Option<JobTag>) -> JobTag {
        // The prolog's verdict that could not be written then goes in first.
        let mut t = match self.pending {
            Some(p) => p.apply(prev),
            None => prev.unwrap_or_default(),
        };
        t.during = merge_during(std::mem::take(&mut t.during), self.rows);
        if self.run.is_some() {
            t.run = self.run;
        }
        let reported = &mut t.job_reported;
        reported.steps = stepgate::worst(reported.steps.take(), &self.steps);
        reported.slow.extend(self.slow);
        if let Some(u) = self.untagged {
            u.fill(&mut t);
        }
        t
    }
}

/// The epilog's `during` rows merged with what the tag already holds: the in-job watch's live
/// entries ([`DuringJob::watch`]) stay, joined to the epilog's row of the same node (whose
/// verdict becomes the worse of the two). A row that brings the watch's events from its node
/// (the events file) gives their latest state; a live event it lacks is kept.
pub fn merge_during(previous: Vec<DuringJob>, rows: Vec<DuringJob>) -> Vec<DuringJob> {
    let mut by_node: BTreeMap<String, DuringJob> =
        rows.into_iter().map(|d| (d.node.clone(), d)).collect();
    for prev in previous.into_iter().filter(|p| !p.watch.is_empty()) {
        match by_node.get_mut(&prev.node) {
            Some(row) => {
                row.verdict = row.verdict.max(prev.verdict);
                for ev in prev.watch {
                    push_watch_event(row, ev);
                }
                row.watch.sort_by_key(|e| e.seen_at_s);
            }
            None => {
                by_node.insert(
                    prev.node.clone(),
                    DuringJob {
                        rises: BTreeMap::new(),
                        ..prev
                    },
                );
            }
        }
    }
    by_node.into_values().collect()
}

/// Whether `a` and `b` are states of one watch event (seen, drained, cleared): the same check,
/// message (which names the device and port) and second it was seen.
pub fn same_watch_event(a: &WatchEvent, b: &WatchEvent) -> bool {
    a.check == b.check && a.seen_at_s == b.seen_at_s && a.message == b.message
}

/// `node`'s `during` row with nothing in it yet.
pub fn during_row(node: &str) -> DuringJob {
    DuringJob {
        node: node.to_owned(),
        rises: BTreeMap::new(),
        verdict: Verdict::Pass,
        watch: Vec::new(),
    }
}

/// Adds one watch event to `row` (its verdict at least the event's), unless the row holds it
/// already ([`same_watch_event`]) or holds [`fabric_proto::tag::MAX_WATCH_EVENTS`]. Returns
/// whether the row changed.
pub fn push_watch_event(row: &mut DuringJob, event: WatchEvent) -> bool {
    row.verdict = row.verdict.max(if event.warn {
        Verdict::Warn
    } else {
        Verdict::Fail
    });
    if row.watch.iter().any(|e| same_watch_event(e, &event))
        || row.watch.len() >= fabric_proto::tag::MAX_WATCH_EVENTS
    {
        return false;
    }
    row.watch.push(event);
    true
}

/// Adds one watch event to `node`'s live `during` entry (made if missing), as
/// [`push_watch_event`]. Returns whether the tag changed.
pub fn add_watch_event(tag: &mut JobTag, node: &str, event: WatchEvent) -> bool {
    let idx = match tag.during.iter().position(|d| d.node == node) {
        Some(i) => i,
        None => {
            tag.during.push(during_row(node));
            tag.during.len() - 1
        }
    };
    push_watch_event(&mut tag.during[idx], event)
}

/// Marks `node`'s watch event `event` ([`same_watch_event`]) as cleared at `at_s`, if it is
/// there and open. Returns whether it changed.
pub fn clear_watch_event(tag: &mut JobTag, node: &str, event: &WatchEvent, at_s: u64) -> bool {
    let Some(row) = tag.during.iter_mut().find(|d| d.node == node) else {
        return false;
    };
    match row
        .watch
        .iter_mut()
        .find(|e| same_watch_event(e, event) && e.cleared_at_s.is_none())
    {
        Some(e) => {
            e.cleared_at_s = Some(at_s);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(v: Verdict) -> NodeResult {
        NodeResult {
            verdict: v,
            checks: vec![],
            probe_ms: Some(2),
            drained: false,
        }
    }

    fn event(check: &str, seen_at_s: u64, drained: bool) -> fabric_proto::tag::WatchEvent {
        fabric_proto::tag::WatchEvent {
            check: check.into(),
            message: "m".into(),
            seen_at_s,
            into_job_s: 1,
            cleared_at_s: None,
            drained,
            requeued: false,
            warn: false,
        }
    }

    fn row(node: &str, watch: Vec<fabric_proto::tag::WatchEvent>) -> DuringJob {
        DuringJob {
            node: node.into(),
            rises: BTreeMap::new(),
            verdict: if watch.is_empty() {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
            watch,
        }
    }

    #[test]
    fn the_epilogs_kept_watch_events_join_the_live_ones_and_give_their_latest_state() {
        // Live: the watch wrote its first event before its drain landed; its second event never
        // reached the tag (the job ended first). The node's events file has both, the first
        // drained.
        let live = vec![
            row("n1", vec![event("ib.port_state", 10, false)]),
            row("n2", vec![event("ib.mtu", 12, false)]),
        ];
        let epilog = vec![row(
            "n1",
            vec![
                event("ib.port_state", 10, true),
                event("ib.counters", 11, false),
            ],
        )];
        let merged = merge_during(live, epilog);
        assert_eq!(merged.len(), 2);
        let n1 = &merged[0];
        assert_eq!(n1.node, "n1");
        assert_eq!(n1.watch.len(), 2, "{n1:?}");
        assert!(n1.watch[0].drained, "the kept state wins over the live one");
        assert_eq!(n1.watch[1].check, "ib.counters");
        assert_eq!(
            merged[1].watch[0].check, "ib.mtu",
            "a node without a row keeps its live events"
        );
    }

    #[test]
    fn a_requeued_job_keeps_the_node_that_failed_its_first_attempt() {
        let mut first_nodes = BTreeMap::new();
        first_nodes.insert("n1".to_owned(), result(Verdict::Pass));
        let mut bad = result(Verdict::Fail);
        bad.checks = vec!["ib.port_state".into()];
        bad.drained = true;
        first_nodes.insert("n3".to_owned(), bad.clone());
        let first = prolog_tag(None, "quick", 1, first_nodes, vec![], vec![]);
        assert_eq!(first.verdict, Some(Verdict::Fail));

        let mut second_nodes = BTreeMap::new();
        second_nodes.insert("n1".to_owned(), result(Verdict::Pass));
        second_nodes.insert("n2".to_owned(), result(Verdict::Pass));
        let second = prolog_tag(Some(first), "quick", 2, second_nodes, vec![], vec![]);
        assert_eq!(second.verdict, Some(Verdict::Pass));
        assert_eq!(second.earlier.get("n3"), Some(&bad));
        assert_eq!(second.nnodes, 2);
    }

    #[test]
    fn missing_nodes_make_the_verdict_an_error() {
        let mut nodes = BTreeMap::new();
        nodes.insert("n1".to_owned(), result(Verdict::Pass));
        let t = prolog_tag(
            None,
            "quick",
            1,
            nodes,
            vec!["n2".into()],
            vec!["n2: no answer".into()],
        );
        assert_eq!(t.verdict, Some(Verdict::Error));
        assert_eq!(t.nnodes, 2);
    }
}
