//! `roce.congestion`: ECN marks, CNPs and PFC pause frames, as deltas.
//!
//! Reads mlx5 `hw_counters/` (`np_cnp_sent`, `rp_cnp_handled`, `np_ecn_marked_roce_packets`)
//! and the pause statistics of `ethtool -S <if>` (`rx_prio<N>_pause`, `tx_prio<N>_pause`,
//! `*_pause_duration` in µs, `tx_pause_storm_{warning,error}_events`). Some marking and pausing
//! is a healthy lossless fabric at work; storms are not. Warn above default hourly rates;
//! any pause-storm error event (the NIC's own storm guard tripped) fails.

use super::{CounterSource, Ctx, judge_counters};
use crate::probe::Finding;

/// The check id.
pub const ID: &str = fabric_proto::check_id::ROCE_CONGESTION;

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
