//! Pure pieces of the job prolog and epilog: a node's result from its probe document, counter
//! rises over the job window, and the watch's live events in a tag. How a phase's results merge
//! into the job's tag is [`super::tag_update`]'s.

use std::collections::BTreeMap;

use crate::probe::{CounterSnapshot, Report};
use fabric_proto::tag::{DuringJob, NodeResult, Verdict};
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
}
