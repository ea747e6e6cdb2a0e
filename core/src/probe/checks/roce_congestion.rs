//! `roce.congestion`: ECN marks, CNPs and PFC pause frames, as deltas.
//!
//! Reads mlx5 `hw_counters/` (`np_cnp_sent`, `rp_cnp_handled`, `np_ecn_marked_roce_packets`)
//! and the pause statistics of `ethtool -S <if>` (`rx_prio<N>_pause`, `tx_prio<N>_pause`,
//! `*_pause_duration` in µs, `tx_pause_storm_{warning,error}_events`). Some marking and pausing
//! is a healthy lossless fabric at work; storms are not. Warn above default hourly rates;
//! any pause-storm error event (the NIC's own storm guard tripped) fails. Pause counter names of
//! mlx5 (old and new kernels), mlx4, bnxt_en, i40e and ice share threshold keys
//! ([`crate::probe::pause`]); a driver whose names are not in the table, or a port whose
//! `ethtool -S` could not be read, is `info` "not verified".

use serde_json::json;

use super::{CounterSource, Ctx, judge_counters, where_};
use crate::probe::gather::{Device, Port};
use crate::probe::{Finding, Severity, pause};

/// The check id.
pub const ID: &str = fabric_proto::check_id::ROCE_CONGESTION;

/// `info` "not verified" when the port's pause counters could not be read, or when `ethtool -S`
/// has none of the names in the driver table ([`pause::classify`], docs/checks.md).
fn unverified(ctx: &Ctx<'_>, d: &Device, p: &Port) -> Option<Finding> {
    let nd = ctx.snap.netdevs.get(p.netdev.as_ref()?)?;
    let driver = d.driver.as_deref().unwrap_or("unknown");
    let msg = match &nd.ethtool {
        None => format!(
            "{}: not verified: pause counters not read ({})",
            where_(d, p),
            nd.tool_note.as_deref().unwrap_or("no ethtool -S output")
        ),
        Some(stats) if !stats.keys().any(|k| pause::classify(k).is_some()) => format!(
            "{}: not verified: ethtool -S of {} has no pause counter the probe knows (driver {driver}; the table of names per driver is in docs/checks.md){}",
            where_(d, p),
            nd.name,
            if stats.is_empty() {
                String::new()
            } else {
                format!(
                    "; kept for the record: {}",
                    stats.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            }
        ),
        Some(_) => return None,
    };
    Some(Finding::new(
        ID,
        Severity::Info,
        Some(&d.name),
        Some(p.num),
        json!({"netdev": nd.name, "driver": driver}),
        json!("pause counters of a driver in the table"),
        msg,
    ))
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in &ctx.snap.devices {
        for p in &d.ports {
            out.extend(judge_counters(
                ctx,
                ID,
                d,
                p,
                CounterSource::HwCounters,
                |n| !super::roce_retrans::is_retrans(n),
            ));
            if p.is_ethernet() {
                out.extend(unverified(ctx, d, p));
                out.extend(judge_counters(
                    ctx,
                    ID,
                    d,
                    p,
                    CounterSource::Ethtool,
                    |_| true,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::{Baseline, CounterSnapshot, SCHEMA, Severity};

    fn node(pause: u64, storm_err: u64) -> crate::probe::gather::Snapshot {
        let mut s = roce_node(2);
        s.taken_unix_ms = 50_000_000;
        for nd in s.netdevs.values_mut() {
            nd.ethtool = Some(
                [
                    ("rx_prio3_pause".to_string(), 100),
                    ("tx_pause_storm_error_events".to_string(), 0),
                ]
                .into(),
            );
        }
        let e = s.netdevs.get_mut("eth0").unwrap().ethtool.as_mut().unwrap();
        e.insert("rx_prio3_pause".into(), pause);
        e.insert("tx_pause_storm_error_events".into(), storm_err);
        s
    }

    fn base() -> Baseline {
        let mut c = CounterSnapshot::from_snapshot(&node(100, 0));
        c.taken_unix_ms -= 5_000;
        Baseline {
            schema: SCHEMA.into(),
            node: "n1".into(),
            counters: c,
            inventory: None,
        }
    }

    #[test]
    fn a_pause_storm_warns_naming_the_netdev() {
        let f = run_with(
            &node(5_000_000, 0),
            &Default::default(),
            Some(&base()),
            check,
        );
        assert_eq!(
            brief(&f),
            [(Severity::Warn, Some("mlx5_0".into()), Some(1))]
        );
        assert!(f[0].message.contains("eth0") && f[0].message.contains("rx_prio3_pause"));
    }

    #[test]
    fn ordinary_pausing_passes() {
        assert!(run_with(&node(50_000, 0), &Default::default(), Some(&base()), check).is_empty());
    }

    #[test]
    fn a_pause_storm_error_event_fails() {
        let f = run_with(&node(100, 1), &Default::default(), Some(&base()), check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_0".into()), Some(1))]
        );
    }
}
