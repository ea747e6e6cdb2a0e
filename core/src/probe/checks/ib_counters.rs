//! `ib.counters`: port error counters, judged only as deltas against a baseline.
//!
//! Reads every file in `ports/<n>/counters/` (IBA PortCounters: `symbol_error`, `link_downed`,
//! `link_error_recovery`, `port_rcv_errors`, `local_link_integrity_errors`,
//! `excessive_buffer_overrun_errors`, `port_xmit_discards`, ...). Since-boot totals say nothing
//! about now, so without a baseline (`--baseline`, `--state-dir`) nothing is judged and that is
//! said once. Defaults: any `link_downed` increase fails, `symbol_error` above 120/h fails,
//! other error counters warn above small rates (`config::default_thresholds`). A counter stuck
//! at the maximum of its width (`link_downed` 255, `port_xmit_discards` 65535, `port_xmit_wait`
//! 4294967295) no longer counts: `warn`, with the width and how to reset it, with or without a
//! baseline, and its delta is never computed; 64-bit `counters_ext/*_64` copies (mlx4) are
//! preferred where the kernel has them. Counters going backwards (reset), `N/A (no PMA)` and a
//! missing `counters/` directory (irdma) are said as `info`, never errors.

use serde_json::{Value, json};

use super::{
    CounterSource, Ctx, baseline_dated_ahead_ms, counter_width_bits, is_saturated,
    is_traffic_counter, judge_counters, usable_baseline, where_,
};
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::IB_COUNTERS;

/// One finding per counter of the port that sits at its maximum: `warn` for error and wait
/// counters (a delta of 0 between two saturated reads hides new errors), `info` for traffic
/// counters. Counters read from a 64-bit `counters_ext/` copy never saturate.
fn saturated(d: &crate::probe::gather::Device, p: &crate::probe::gather::Port) -> Vec<Finding> {
    let Some(counters) = &p.counters else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, &v) in counters {
        if !is_saturated(p, name, v) {
            continue;
        }
        let bits = counter_width_bits(name).unwrap_or(64);
        let traffic = is_traffic_counter(name);
        let ext = if bits == 32 {
            " (the kernel exposes no 64-bit counters_ext copy for it here)"
        } else {
            ""
        };
        out.push(Finding::new(
            ID,
            if traffic { Severity::Info } else { Severity::Warn },
            Some(&d.name),
            Some(p.num),
            json!({"counter": name, "value": v, "width_bits": bits}),
            json!({"below": v}),
            format!(
                "{}: {name} is saturated at {v}, the maximum of its {bits}-bit counter{ext}; it no longer counts, so a delta of 0 hides new {}; reset the port counters (perfquery -R -a, or perfquery -x -R on HCAs with extended counters) to judge it again",
                where_(d, p),
                if traffic { "traffic" } else { "events" }
            ),
        ));
    }
    out
}

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
    if has_counters
        && usable_baseline(ctx).is_ok()
        && let Some(ahead_ms) = baseline_dated_ahead_ms(ctx)
    {
        out.push(Finding::new(
            ID,
            Severity::Info,
            None,
            None,
            json!({"baseline_ahead_ms": ahead_ms}),
            Value::Null,
            format!(
                "the baseline is dated {} after this run (the clock went back?): its counters are judged all the same, as if no time had passed",
                super::fmt_elapsed(ahead_ms as f64 / 1000.0)
            ),
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
                    out.extend(saturated(d, p));
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
            inventory: None,
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
    fn a_link_downed_rise_is_judged_when_the_clock_went_back_since_the_baseline() {
        let mut b = baseline_of(&node(40, 1), 0);
        // The prolog's snapshot is dated 90 s after this run: the clock was stepped back.
        b.counters.taken_unix_ms += 90_000;
        let f = run_with(&node(40, 2), &Default::default(), Some(&b), check);
        let fails: Vec<_> = f.iter().filter(|f| f.severity == Severity::Fail).collect();
        assert_eq!(fails.len(), 1, "{f:?}");
        assert!(fails[0].message.contains("link_downed rose by 1"), "{f:?}");
        let said = f
            .iter()
            .find(|f| f.severity == Severity::Info && f.message.contains("clock went back"))
            .unwrap_or_else(|| panic!("the clock step is not said: {f:?}"));
        assert!(
            said.message.contains("90 s after this run"),
            "{}",
            said.message
        );
        // Symbols within one hour's allowance still pass: no time passing is not a storm.
        assert!(
            run_with(&node(160, 1), &Default::default(), Some(&b), check)
                .iter()
                .all(|f| f.severity == Severity::Info)
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
    fn a_saturated_counter_warns_with_its_width_and_how_to_reset_it_and_no_delta() {
        let b = baseline_of(&node(65535, 1), 1000);
        let f = run_with(&node(65535, 1), &Default::default(), Some(&b), check);
        assert_eq!(
            brief(&f),
            [(Severity::Warn, Some("mlx5_1".into()), Some(1))]
        );
        assert!(f[0].message.contains("symbol_error is saturated at 65535"));
        assert!(f[0].message.contains("16-bit"));
        assert!(f[0].message.contains("perfquery"));
        assert_eq!(f[0].observed["width_bits"], 16);
    }

    #[test]
    fn a_saturated_counter_warns_also_without_a_baseline() {
        let f = run(&node(40, 255), check);
        let w: Vec<_> = f.iter().filter(|f| f.severity == Severity::Warn).collect();
        assert_eq!(w.len(), 1, "{f:?}");
        assert!(w[0].message.contains("link_downed is saturated at 255"));
        assert!(w[0].message.contains("8-bit"));
    }

    #[test]
    fn a_64_bit_counters_ext_copy_never_counts_as_saturated() {
        let mut s = node(40, 1);
        s.devices[1].ports[0]
            .counters
            .as_mut()
            .unwrap()
            .insert("port_xmit_data".into(), u32::MAX as u64);
        s.devices[1].ports[0]
            .counters_64
            .insert("port_xmit_data".into());
        let f = run(&s, check);
        assert!(f.iter().all(|f| !f.message.contains("saturated")), "{f:?}");
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
