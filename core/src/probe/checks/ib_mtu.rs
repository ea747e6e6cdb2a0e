//! `ib.mtu`: InfiniBand ports' IPoIB interfaces agree on MTU.
//!
//! Upstream sysfs has no active IB MTU attribute (it comes from a verbs port query), so
//! this check reads the MTU of the port's IPoIB netdev (`class/net/<ib>/mtu`: 2044 datagram,
//! 4092 with a 4K IB MTU, up to 65520 connected mode). Zero-config: an ACTIVE port whose IPoIB
//! MTU differs from its group's majority fails. Config: `ipoib_mtu`.

use serde_json::json;

use super::{Ctx, configured_or_parity, where_};
use crate::probe::gather::{Device, Port};
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::IB_MTU;

fn mtu(ctx: &Ctx<'_>, p: &Port) -> Option<u32> {
    if p.link_layer.as_deref() != Some("InfiniBand") {
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
        json!({"ipoib_mtu": v}),
        json!({"ipoib_mtu": want}),
        format!("{} has IPoIB MTU {v}; {why}", where_(d, p)),
    )
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    configured_or_parity(ctx, |e| e.ipoib_mtu, |p| mtu(ctx, p), finding)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::gather::NetDev;

    fn with_ipoib(n: usize, odd: u32) -> crate::probe::gather::Snapshot {
        let mut s = ib_node(n);
        for (i, d) in s.devices.iter_mut().enumerate() {
            let name = format!("ib{i}");
            d.ports[0].netdev = Some(name.clone());
            let mtu = if i == 2 { odd } else { 4092 };
            s.netdevs.insert(
                name.clone(),
                NetDev {
                    name,
                    mtu: Some(mtu),
                    ..NetDev::default()
                },
            );
        }
        s
    }

    #[test]
    fn an_odd_ipoib_mtu_fails() {
        let f = run(&with_ipoib(4, 2044), check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_2".into()), Some(1))]
        );
    }

    #[test]
    fn equal_mtus_pass() {
        assert!(run(&with_ipoib(4, 4092), check).is_empty());
    }
}
