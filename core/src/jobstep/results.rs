//! Pure pieces of the job prolog and epilog: a node's result from its probe document, counter
//! rises over the job window, and how a new attempt's results merge into an existing tag.

use std::collections::BTreeMap;

use crate::probe::{CounterSnapshot, Report};
use fabric_proto::tag::{DuringJob, JobTag, NodeResult, Verdict, WatchEvent};
use fabric_proto::verdict::Severity;

/// Counters that rise with any traffic and say nothing about health.
fn is_traffic(name: &str) -> bool {
    name.contains("_data")
        || name.contains("_packets")
        || name.contains("_pkts")
        || name.ends_with("_bytes")
}

/// A node's tag entry from its probe document: the verdict and the ids of the checks that
/// earned it (fail checks for `fail`, warn checks for `warn`).
pub fn node_result(report: &Report) -> NodeResult {
    let wanted = match report.verdict {
        Verdict::Fail => Some(Severity::Fail),
        Verdict::Warn => Some(Severity::Warn),
        _ => None,
    };
    let mut checks: Vec<String> = Vec::new();
    for f in &report.findings {
        if Some(f.severity) == wanted && !checks.contains(&f.check) {
            checks.push(f.check.clone());
        }
    }
    if report.verdict == Verdict::Error {
        checks.push(fabric_proto::check_id::PROBE_ERROR.into());
    }
    NodeResult {
        verdict: report.verdict,
        checks,
        probe_ms: Some(report.duration_ms.round() as u64),
        drained: false,
    }
}

/// How the probe's message starts when it could not save its snapshot (`fabric-check probe`
/// reports it as an `info` finding, so it changes no verdict).
pub const SAVE_FAILED: &str = "cannot save ";

/// The probe's messages about snapshots it could not save (a full or read-only state folder):
/// the job-window counters of this job will be missing, which the prolog says in its log.
pub fn save_failures(report: &Report) -> Vec<&str> {
    report
        .findings
        .iter()
        .filter(|f| f.message.starts_with(SAVE_FAILED))
        .map(|f| f.message.as_str())
        .collect()
}

/// The first finding of the worst severity, as `(check, message)` for a drain reason.
pub fn worst_finding(report: &Report) -> Option<(String, String)> {
    report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Fail)
        .map(|f| (f.check.clone(), f.message.clone()))
        .next()
}

/// Health counters that rose between two snapshots, keyed `<device>/<port>/<counter>` (and
/// `<netdev>/<statistic>` for ethtool statistics). A counter that went down (reset, wrap) is
/// not a rise.
pub fn rises(before: &CounterSnapshot, after: &CounterSnapshot) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (port, now) in &after.ports {
        let Some(then) = before.ports.get(port) else {
            continue;
        };
        for (set_now, set_then) in [
            (&now.counters, &then.counters),
            (&now.hw_counters, &then.hw_counters),
        ] {
            for (name, v) in set_now {
                if is_traffic(name) {
                    continue;
                }
                if let Some(old) = set_then.get(name).filter(|old| v > *old) {
                    out.insert(format!("{port}/{name}"), v - old);
                }
            }
        }
    }
    for (dev, now) in &after.netdevs {
        let Some(then) = before.netdevs.get(dev) else {
            continue;
        };
        for (name, v) in &now.ethtool {
            if let Some(old) = then.ethtool.get(name).filter(|old| v > *old) {
                out.insert(format!("{dev}/{name}"), v - old);
            }
        }
    }
    out
}

/// The epilog's entry for one node.
pub fn during_job(node: &str, baseline: &CounterSnapshot, report: &Report) -> DuringJob {
    DuringJob {
        node: node.to_owned(),
        rises: rises(baseline, &report.counters),
        verdict: report.verdict,
        watch: Vec::new(),
    }
}

/// The epilog's `during` rows merged with what the tag already holds: the in-job watch's live
/// entries ([`DuringJob::watch`]) stay, joined to the epilog's row of the same node (whose
/// verdict becomes the worse of the two).
pub fn merge_during(previous: Vec<DuringJob>, rows: Vec<DuringJob>) -> Vec<DuringJob> {
    let mut by_node: BTreeMap<String, DuringJob> =
        rows.into_iter().map(|d| (d.node.clone(), d)).collect();
    for prev in previous.into_iter().filter(|p| !p.watch.is_empty()) {
        match by_node.get_mut(&prev.node) {
            Some(row) => {
                row.verdict = row.verdict.max(prev.verdict);
                row.watch = prev.watch;
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

/// Adds one watch event to `node`'s live `during` entry (made if missing), keeping at most
/// [`fabric_proto::tag::MAX_WATCH_EVENTS`]; an event of the same check that has not cleared
/// is not added twice. Returns whether the tag changed.
pub fn add_watch_event(tag: &mut JobTag, node: &str, event: WatchEvent) -> bool {
    let idx = match tag.during.iter().position(|d| d.node == node) {
        Some(i) => i,
        None => {
            tag.during.push(DuringJob {
                node: node.to_owned(),
                rises: BTreeMap::new(),
                verdict: Verdict::Pass,
                watch: Vec::new(),
            });
            tag.during.len() - 1
        }
    };
    let row = &mut tag.during[idx];
    row.verdict = row.verdict.max(Verdict::Fail);
    if row.watch.iter().any(|e| {
        e.check == event.check && e.seen_at_s == event.seen_at_s && e.message == event.message
    }) || row.watch.len() >= fabric_proto::tag::MAX_WATCH_EVENTS
    {
        return false;
    }
    row.watch.push(event);
    true
}

/// Marks `node`'s open watch event of `check` as cleared at `at_s`. Returns whether it changed.
pub fn clear_watch_event(tag: &mut JobTag, node: &str, check: &str, at_s: u64) -> bool {
    let Some(row) = tag.during.iter_mut().find(|d| d.node == node) else {
        return false;
    };
    match row
        .watch
        .iter_mut()
        .rev()
        .find(|e| e.check == check && e.cleared_at_s.is_none())
    {
        Some(e) => {
            e.cleared_at_s = Some(at_s);
            true
        }
        None => false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::PortCounters;

    fn snap(link_downed: u64, data: u64, cnp: u64) -> CounterSnapshot {
        let mut s = CounterSnapshot::default();
        s.ports.insert(
            "mlx5_0/1".into(),
            PortCounters {
                counters: [
                    ("link_downed".to_owned(), link_downed),
                    ("port_xmit_data".to_owned(), data),
                ]
                .into(),
                hw_counters: [("np_cnp_sent".to_owned(), cnp)].into(),
            },
        );
        s
    }

    #[test]
    fn rises_name_health_counters_and_ignore_traffic() {
        let r = rises(&snap(0, 100, 5), &snap(1, 9_000, 12));
        assert_eq!(
            r,
            [
                ("mlx5_0/1/link_downed".to_owned(), 1),
                ("mlx5_0/1/np_cnp_sent".to_owned(), 7)
            ]
            .into()
        );
    }

    #[test]
    fn a_snapshot_the_probe_could_not_save_is_picked_out_of_its_findings() {
        use fabric_proto::verdict::{Finding, Severity};
        let f = |m: &str| {
            Finding::new(
                "ib.counters",
                Severity::Info,
                None,
                None,
                serde_json::Value::Null,
                serde_json::Value::Null,
                m.to_owned(),
            )
        };
        let mut report = Report::error("n1", 1.0, String::new());
        report.findings = vec![
            f(
                "cannot save /s/job-7.json: No space left on device (os error 28); the next run has no baseline",
            ),
            f("no baseline"),
        ];
        assert_eq!(
            save_failures(&report),
            vec![
                "cannot save /s/job-7.json: No space left on device (os error 28); the next run has no baseline"
            ]
        );
    }

    #[test]
    fn a_counter_that_went_down_is_not_a_rise() {
        assert!(rises(&snap(5, 0, 0), &snap(0, 0, 0)).is_empty());
    }

    fn result(v: Verdict) -> NodeResult {
        NodeResult {
            verdict: v,
            checks: vec![],
            probe_ms: Some(2),
            drained: false,
        }
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
