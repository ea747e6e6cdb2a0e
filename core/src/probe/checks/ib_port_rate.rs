//! `ib.port_rate`: ACTIVE ports run at the rate of their peers (or the configured rate).
//!
//! Reads `ports/<n>/rate` (`400 Gb/sec (4X NDR)`). Zero-config: an ACTIVE port whose rate
//! differs from its group's majority fails (on a tie the lower rate fails): this catches a link
//! trained at half width or a lower speed. Config: `rate_gbps` in a `[[node.ports]]` rule.
//! Ports that are not ACTIVE are left to `ib.port_state` (their rate is meaningless).

use serde_json::json;

use super::{Ctx, parity_deviations, where_};
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::IB_PORT_RATE;

fn mbps(g: f64) -> u64 {
    (g * 1000.0).round() as u64
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    let configured = |dev: &str| ctx.expect.expect(dev, |p| p.rate_gbps);
    for d in &ctx.snap.devices {
        let Some(want) = configured(&d.name) else {
            continue;
        };
        for p in d.ports.iter().filter(|p| p.is_active()) {
            let Some(r) = &p.rate else { continue };
            if mbps(r.gbps) != mbps(want) {
                out.push(Finding::new(
                    ID,
                    Severity::Fail,
                    Some(&d.name),
                    Some(p.num),
                    json!({"rate_gbps": r.gbps, "rate": r.text}),
                    json!({"rate_gbps": want}),
                    format!(
                        "{} runs at {}; the configuration expects {want} Gb/sec",
                        where_(d, p),
                        r.text
                    ),
                ));
            }
        }
    }
    for (d, p, v, maj, peers) in
        parity_deviations(ctx.snap, |_, p| p.rate.as_ref().map(|r| mbps(r.gbps)))
    {
        if configured(&d.name).is_some() {
            continue;
        }
        let text = p.rate.as_ref().map(|r| r.text.clone()).unwrap_or_default();
        out.push(Finding::new(
            ID,
            Severity::Fail,
            Some(&d.name),
            Some(p.num),
            json!({"rate_gbps": v as f64 / 1000.0, "rate": text}),
            json!({"rate_gbps": maj as f64 / 1000.0}),
            format!(
                "{} runs at {text}, its {peers} ACTIVE peers mostly at {} Gb/sec; reseat or replace the cable or transceiver",
                where_(d, p),
                maj as f64 / 1000.0
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn a_half_rate_port_fails() {
        let mut s = ib_node(8);
        s.devices[5].ports[0].rate.as_mut().unwrap().gbps = 200.0;
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_5".into()), Some(1))]
        );
        assert_eq!(f[0].expected, json!({"rate_gbps": 400.0}));
    }

    #[test]
    fn equal_rates_pass() {
        assert!(run(&ib_node(8), check).is_empty());
    }

    #[test]
    fn a_down_port_is_not_judged_on_rate() {
        let mut s = ib_node(4);
        s.devices[1].ports[0] = down(s.devices[1].ports[0].clone());
        s.devices[1].ports[0].rate.as_mut().unwrap().gbps = 10.0;
        assert!(run(&s, check).is_empty());
    }

    #[test]
    fn the_configured_rate_overrides_parity() {
        let s = ib_node(2);
        let e = expect(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_[0-1]\"\nrate_gbps = 200\n",
        );
        let f = run_with(&s, &e, None, check);
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|f| f.severity == Severity::Fail));
    }
}
