//! `roce.retrans`: transport retries and sequence errors, as deltas.
//!
//! Reads mlx5 `ports/<n>/hw_counters/` (`out_of_sequence`, `packet_seq_err`,
//! `implied_nak_seq_err`, `local_ack_timeout_err`, `rnr_nak_retry_err`, `roce_adp_retrans`,
//! `roce_adp_retrans_to`; kernel `drivers/infiniband/hw/mlx5/counters.c`). Rising retries on a
//! lossless fabric mean drops: a bad link, PFC not honoured, or a congested switch. Warn above
//! default hourly rates; counters without a threshold are recorded only.

use super::{CounterSource, Ctx, judge_counters};
use crate::probe::Finding;

/// The check id.
pub const ID: &str = fabric_proto::check_id::ROCE_RETRANS;

/// Whether a hw_counter belongs to this check (the rest of `hw_counters/` is congestion).
pub fn is_retrans(name: &str) -> bool {
    !(name.contains("cnp") || name.contains("ecn"))
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
                is_retrans,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::{Baseline, CounterSnapshot, SCHEMA, Severity};

    fn node(timeouts: u64) -> crate::probe::gather::Snapshot {
        let mut s = roce_node(2);
        s.taken_unix_ms = 50_000_000;
        for d in &mut s.devices {
            d.ports[0].hw_counters = Some(
                [
                    ("local_ack_timeout_err".to_string(), 10),
                    ("np_cnp_sent".to_string(), 5),
                ]
                .into(),
            );
        }
        s.devices[1].ports[0]
            .hw_counters
            .as_mut()
            .unwrap()
            .insert("local_ack_timeout_err".into(), timeouts);
        s
    }

    #[test]
    fn rising_ack_timeouts_warn() {
        let mut c = CounterSnapshot::from_snapshot(&node(10));
        c.taken_unix_ms -= 60_000;
        let b = Baseline {
            schema: SCHEMA.into(),
            node: "n1".into(),
            counters: c,
            inventory: None,
        };
        assert!(run_with(&node(110), &Default::default(), Some(&b), check).is_empty());
        let f = run_with(&node(111), &Default::default(), Some(&b), check);
        assert_eq!(
            brief(&f),
            [(Severity::Warn, Some("mlx5_1".into()), Some(1))]
        );
        assert!(f[0].message.contains("eth1"));
    }

    #[test]
    fn cnp_counters_belong_to_congestion() {
        assert!(!is_retrans("np_cnp_sent"));
        assert!(!is_retrans("np_ecn_marked_roce_packets"));
        assert!(is_retrans("out_of_sequence"));
    }
}
