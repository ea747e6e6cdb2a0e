//! `roce.mtu`: RoCE ports' netdevs agree on MTU (or have the configured one).
//!
//! RoCE's path MTU is bounded by the netdev MTU (`class/net/<if>/mtu`): a 1500 among 9000s
//! makes that port's RDMA MTU 1024 and every collective through it slower. Zero-config: an
//! ACTIVE Ethernet port whose netdev MTU differs from its group's majority fails (on a tie the
//! smaller fails). Config: `mtu`.

use serde_json::json;

use super::{Ctx, configured_or_parity, where_};
use crate::probe::gather::{Device, Port};
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::ROCE_MTU;

fn mtu(ctx: &Ctx<'_>, p: &Port) -> Option<u32> {
    if !p.is_ethernet() {
        return None;
    }
    ctx.snap.netdevs.get(p.netdev.as_ref()?)?.mtu
}

fn finding(d: &Device, p: &Port, v: u32, want: u32, why: String) -> Finding {
    Finding::new(
        ID,
        Severity::Fail,
        Some(&d.name),
        Some(p.num),
        json!({"mtu": v}),
        json!({"mtu": want}),
        format!(
            "{} has MTU {v}; {why} (ip link set dev {} mtu {want})",
            where_(d, p),
            p.netdev.as_deref().unwrap_or("?")
        ),
    )
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = configured_or_parity(ctx, |e| e.mtu, |p| mtu(ctx, p), finding);
    for d in &ctx.snap.devices {
        for p in d.ports.iter().filter(|p| p.is_ethernet()) {
            if p.netdev.is_none() {
                out.push(Finding::new(
                    ID,
                    Severity::Info,
                    Some(&d.name),
                    Some(p.num),
                    json!({"netdev": null}),
                    json!("the port's netdev"),
                    format!(
                        "{}: not verified: no netdev found (no gid_attrs/ndevs entry and no device/net link), so its MTU, ECN and PFC are not checked",
                        where_(d, p)
                    ),
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

    #[test]
    fn an_mtu_of_1500_among_9000s_fails() {
        let mut s = roce_node(8);
        s.netdevs.get_mut("eth4").unwrap().mtu = Some(1500);
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_4".into()), Some(1))]
        );
        assert!(f[0].message.contains("eth4"), "{}", f[0].message);
    }

    #[test]
    fn a_tie_fails_the_smaller_mtu() {
        let mut s = roce_node(2);
        s.netdevs.get_mut("eth1").unwrap().mtu = Some(1500);
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_1".into()), Some(1))]
        );
    }

    #[test]
    fn the_configured_mtu_is_required() {
        let e = expect(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_[0-7]\"\nmtu = 4200\n",
        );
        assert_eq!(run_with(&roce_node(2), &e, None, check).len(), 2);
        assert!(run(&roce_node(8), check).is_empty());
    }
}
