//! The second look: what a driver reload, an `mlxfwreset` window or a port in training also
//! shows is looked at again before it is a fault.
//!
//! A driver reload empties `class/infiniband` for seconds; a firmware reset makes a device's
//! files fail with `ENODEV`/`EIO`; a port retrains through `Polling` and `INIT`. One look at such
//! a moment sees ten HCAs gone. So when the first look has a `fail` from a check that such a
//! moment also trips ([`TRANSIENT`]), or a device file it could not read, the probe waits the
//! settle time it was given (`--second-look-ms`, inside its own limit) and looks again. The
//! second look is the verdict: what is still gone is a fault; what came back is an `info` with
//! the gap's length (at most the time between the two looks). A reload that outlasts the
//! settle fails as before; the node comes back by itself (`health`) when the reload is over.

use std::collections::BTreeSet;

use serde_json::json;

use super::gather::Snapshot;
use super::{Finding, Severity, Verdict};
use fabric_proto::check_id;

/// Checks whose `fail` a transient also makes: a device gone, a port not ACTIVE, fewer ports
/// or GPUs than expected.
pub const TRANSIENT: &[&str] = &[
    check_id::INVENTORY_GONE,
    check_id::IB_PORT_STATE,
    check_id::IB_PORT_COUNT,
    check_id::GPU_COUNT,
];

/// Whether the first look warrants a second.
pub fn wanted(snap: &Snapshot, findings: &[Finding]) -> bool {
    findings
        .iter()
        .any(|f| f.severity == Severity::Fail && TRANSIENT.contains(&f.check.as_str()))
        || snap
            .problems
            .iter()
            .any(|p| p.unreadable && p.device.is_some())
}

fn key(f: &Finding) -> (String, String, Option<u32>) {
    (
        f.check.clone(),
        f.device.clone().unwrap_or_default(),
        f.port,
    )
}

/// An `info` for each `fail` of the first look that the second no longer has.
pub fn came_back(first: &[Finding], second: &[Finding], gap_ms: u64) -> Vec<Finding> {
    let still: BTreeSet<_> = second
        .iter()
        .filter(|f| f.severity == Severity::Fail)
        .map(key)
        .collect();
    first
        .iter()
        .filter(|f| f.severity == Severity::Fail && !still.contains(&key(f)))
        .map(|f| {
            Finding::new(
                &f.check,
                Severity::Info,
                f.device.as_deref(),
                f.port,
                json!({"gap_ms_at_most": gap_ms, "first_look": f.message}),
                serde_json::Value::Null,
                format!(
                    "came back within {gap_ms} ms (a second look): {}; a driver reload, firmware reset or port retraining, not a fault",
                    f.message
                ),
            )
        })
        .collect()
}

/// Why a look may not be recorded as the node's known inventory, or `None` when it may.
pub fn not_whole(snap: &Snapshot, verdict: Verdict) -> Option<String> {
    if matches!(verdict, Verdict::Fail | Verdict::Error) {
        return Some(format!("the probe's verdict is {}", verdict.as_str()));
    }
    unsettled(snap)
}

/// Why a look is not settled (a file that could not be read, GPUs not listed, a port in
/// training), or `None` when it is.
pub fn unsettled(snap: &Snapshot) -> Option<String> {
    if let Some(p) = snap.problems.iter().find(|p| p.unreadable) {
        return Some(format!(
            "{} could not be read ({})",
            p.path.display(),
            p.message
        ));
    }
    if let Some(why) = &snap.gpus_unreadable {
        return Some(why.clone());
    }
    if snap
        .devices
        .iter()
        .flat_map(|d| &d.ports)
        .any(|p| p.is_training())
    {
        return Some("a port is still training (INIT, ARMED or PortConfigurationTraining)".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use super::*;
    use crate::config::Config;
    use crate::probe::checks::testing::{dgx_node, known_of};
    use crate::probe::gather::Roots;
    use crate::probe::{ProbeInput, Report, run_looks};

    fn input(known: Option<crate::probe::known::Known>) -> ProbeInput {
        ProbeInput {
            node: "n1".into(),
            roots: Roots::for_sysfs("/nonexistent".into(), "/nonexistent".into(), None),
            expect: Config::default().for_node("n1"),
            baseline: None,
            bom_pin: None,
            known,
            second_look: Some(Duration::from_millis(1500)),
        }
    }

    /// Runs the probe over `looks` in turn (the last one repeats), each 1.5 s after the last;
    /// returns the report and how many looks were taken.
    fn probe(input: &ProbeInput, looks: &[Snapshot]) -> (Report, usize) {
        let n = Cell::new(0usize);
        let report = run_looks(
            input,
            crate::probe::RunWith::default(),
            &mut || {
                let i = n.get();
                n.set(i + 1);
                let mut s = looks[i.min(looks.len() - 1)].clone();
                s.taken_unix_ms = 1_000_000 + 1_500 * i as u64;
                s
            },
            &mut |d| assert_eq!(d, Duration::from_millis(1500)),
        );
        (report, n.get())
    }

    /// `check device` of each `fail` (`Fail`) or each "came back" `info` (`Info`).
    fn ids(r: &Report, sev: Severity) -> Vec<String> {
        r.findings
            .iter()
            .filter(|f| f.severity == sev)
            .filter(|f| sev != Severity::Info || f.message.starts_with("came back"))
            .map(|f| format!("{} {}", f.check, f.device.as_deref().unwrap_or("")))
            .collect()
    }

    #[test]
    fn a_driver_reload_that_empties_class_infiniband_is_an_info_with_its_gap() {
        let healthy = dgx_node();
        let mut reloading = healthy.clone();
        reloading.devices.clear();
        let (r, looks) = probe(&input(Some(known_of(&healthy))), &[reloading, healthy]);
        assert_eq!(looks, 2);
        assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.findings);
        let back = ids(&r, Severity::Info);
        assert_eq!(back.len(), 10, "{back:?}");
        let f = r
            .findings
            .iter()
            .find(|f| f.message.starts_with("came back"))
            .unwrap();
        assert!(
            f.message.starts_with("came back within 1500 ms"),
            "{}",
            f.message
        );
        assert_eq!(f.observed["gap_ms_at_most"], 1500);
    }

    #[test]
    fn a_gpu_still_gone_at_the_second_look_is_a_fault() {
        let healthy = dgx_node();
        let mut gone = healthy.clone();
        gone.gpus.remove(5);
        let (r, looks) = probe(&input(Some(known_of(&healthy))), &[gone]);
        assert_eq!(looks, 2);
        assert_eq!(
            ids(&r, Severity::Fail),
            [format!("inventory.gone {}", healthy.gpus[5].pci)]
        );
        assert!(ids(&r, Severity::Info).is_empty());
    }

    #[test]
    fn a_port_retraining_at_the_first_look_and_active_at_the_second_passes() {
        let healthy = dgx_node();
        let mut training = healthy.clone();
        training.devices[4].ports[0].state = Some(crate::probe::gather::PortState {
            code: 1,
            name: "DOWN".into(),
        });
        training.devices[4].ports[0].phys_state = Some("2: Polling".into());
        let (r, looks) = probe(&input(Some(known_of(&healthy))), &[training, healthy]);
        assert_eq!((looks, r.verdict), (2, Verdict::Pass));
        assert_eq!(ids(&r, Severity::Info), ["ib.port_state mlx5_4"]);
    }

    #[test]
    fn a_healthy_node_is_looked_at_once() {
        let healthy = dgx_node();
        let (r, looks) = probe(&input(Some(known_of(&healthy))), &[healthy]);
        assert_eq!((looks, r.verdict), (1, Verdict::Pass));
        assert_eq!(r.not_whole, None);
    }

    #[test]
    fn without_a_settle_time_there_is_one_look() {
        let healthy = dgx_node();
        let mut gone = healthy.clone();
        gone.gpus.clear();
        let mut i = input(Some(known_of(&healthy)));
        i.second_look = None;
        let (r, looks) = probe(&i, &[gone, healthy]);
        assert_eq!((looks, r.verdict), (1, Verdict::Fail));
    }

    #[test]
    fn a_look_with_a_port_in_training_or_a_fail_is_not_whole() {
        let mut s = dgx_node();
        assert_eq!(not_whole(&s, Verdict::Warn), None);
        assert!(not_whole(&s, Verdict::Fail).is_some());
        s.devices[0].ports[0].state = Some(crate::probe::gather::PortState {
            code: 2,
            name: "INIT".into(),
        });
        assert!(not_whole(&s, Verdict::Pass).unwrap().contains("training"));
    }
}
