//! `ib.counters`: port error counters, judged only as deltas against a baseline.
//!
//! Reads every file in `ports/<n>/counters/` (IBA PortCounters: `symbol_error`, `link_downed`,
//! `link_error_recovery`, `port_rcv_errors`, `local_link_integrity_errors`,
//! `excessive_buffer_overrun_errors`, `port_xmit_discards`, ...). Since-boot totals say nothing
//! about now, so without a baseline (`--baseline`, `--state-dir`) nothing is judged and that is
//! said once. Defaults: any `link_downed` increase fails, `symbol_error` above 120/h fails,
//! other error counters warn above small rates (`config::default_thresholds`). Saturated legacy
//! counters, counters going backwards (reset), `N/A (no PMA)` and a missing `counters/`
//! directory (irdma) are said as `info`, never errors.

use serde_json::{Value, json};

use super::{CounterSource, Ctx, judge_counters, usable_baseline, where_};
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::IB_COUNTERS;

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    let has_counters = ctx.snap.devices.iter().any(|d| {
        d.ports
            .iter()
            .any(|p| p.counters.is_some() || p.hw_counters.is_some())
    });
    if has_counters && let Err(why) = usable_baseline(ctx) {
        out.push(Finding::new(
            ID,
            Severity::Info,
            None,
            None,
            Value::Null,
            Value::Null,
            format!("{why}: counters recorded, deltas judged on a later run (pass --baseline FILE or --state-dir DIR)"),
        ));
    }
    for d in &ctx.snap.devices {
        for p in &d.ports {
            match &p.counters {
                None => out.push(Finding::new(
                    ID,
                    Severity::Info,
                    Some(&d.name),
                    Some(p.num),
                    Value::Null,
                    Value::Null,
                    format!("{} has no counters/ directory (driver {}); its error counters are not judged", where_(d, p), d.driver.as_deref().unwrap_or("unknown")),
                )),
                Some(_) => {
                    if !p.no_pma.is_empty() {
                        out.push(Finding::new(
                            ID,
                            Severity::Info,
                            Some(&d.name),
                            Some(p.num),
                            json!({"no_pma": p.no_pma}),
                            Value::Null,
                            format!("{}: {} read N/A (no PMA) and are skipped", where_(d, p), p.no_pma.join(", ")),
                        ));
                    }
                    out.extend(judge_counters(ctx, ID, d, p, CounterSource::Counters, |_| true));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::{Baseline, CounterSnapshot, SCHEMA};
    use std::collections::BTreeMap;

    fn with_counters(s: &mut crate::probe::gather::Snapshot, dev: usize, pairs: &[(&str, u64)]) {
        let m: BTreeMap<String, u64> = pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        s.devices[dev].ports[0].counters = Some(m);
    }

    fn baseline_of(s: &crate::probe::gather::Snapshot, ago_ms: u64) -> Baseline {
        let mut c = CounterSnapshot::from_snapshot(s);
        c.taken_unix_ms = c.taken_unix_ms.saturating_sub(ago_ms);
        Baseline {
            schema: SCHEMA.into(),
            node: "n1".into(),
            counters: c,
        }
    }

    fn node(symbol: u64, downed: u64) -> crate::probe::gather::Snapshot {
        let mut s = ib_node(2);
        s.taken_unix_ms = 10_000_000;
        for i in 0..2 {
            with_counters(
                &mut s,
                i,
                &[
                    ("symbol_error", 40),
                    ("link_downed", 1),
                    ("port_rcv_data", 5),
                ],
            );
        }
        with_counters(
            &mut s,
            1,
            &[
                ("symbol_error", symbol),
                ("link_downed", downed),
                ("port_rcv_data", 9),
            ],
        );
        s
    }

    #[test]
    fn without_a_baseline_totals_are_not_judged_and_that_is_said() {
        let f = run(&node(60_000, 200), check);
        assert_eq!(brief(&f), [(Severity::Info, None, None)]);
        assert!(f[0].message.contains("no baseline"));
    }

    #[test]
    fn a_link_downed_increase_fails() {
        let b = baseline_of(&node(40, 1), 1000);
        let f = run_with(&node(40, 2), &Default::default(), Some(&b), check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_1".into()), Some(1))]
        );
        assert!(
            f[0].message.contains("link_downed rose by 1"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn symbol_errors_fail_only_above_the_hourly_allowance() {
        let b = baseline_of(&node(40, 1), 1000);
        assert!(run_with(&node(160, 1), &Default::default(), Some(&b), check).is_empty());
        let f = run_with(&node(161, 1), &Default::default(), Some(&b), check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_1".into()), Some(1))]
        );
    }

    #[test]
    fn a_counter_that_went_back_is_said_not_judged() {
        let b = baseline_of(&node(500, 3), 1000);
        let f = run_with(&node(0, 0), &Default::default(), Some(&b), check);
        assert!(f.iter().all(|f| f.severity == Severity::Info), "{f:?}");
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn a_saturated_counter_is_said() {
        let b = baseline_of(&node(65535, 1), 1000);
        let f = run_with(&node(65535, 1), &Default::default(), Some(&b), check);
        assert_eq!(
            brief(&f),
            [(Severity::Info, Some("mlx5_1".into()), Some(1))]
        );
        assert!(f[0].message.contains("saturated"));
    }

    #[test]
    fn a_baseline_from_another_node_is_not_used() {
        let mut b = baseline_of(&node(40, 1), 1000);
        b.node = "n2".into();
        let f = run_with(&node(40, 9), &Default::default(), Some(&b), check);
        assert_eq!(brief(&f), [(Severity::Info, None, None)]);
        assert!(f[0].message.contains("n2"));
    }

    #[test]
    fn missing_counters_and_no_pma_are_said() {
        let mut s = ib_node(2);
        s.devices[0].ports[0].counters = Some(BTreeMap::new());
        s.devices[0].ports[0].no_pma = vec!["VL15_dropped".into()];
        let f = run(&s, check);
        let b = brief(&f);
        assert!(b.contains(&(Severity::Info, Some("mlx5_0".into()), Some(1))));
        assert!(b.contains(&(Severity::Info, Some("mlx5_1".into()), Some(1))));
        assert!(f.iter().all(|f| f.severity == Severity::Info));
    }
}
