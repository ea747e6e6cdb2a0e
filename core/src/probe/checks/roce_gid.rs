//! `roce.gid`: every ACTIVE RoCE port has a RoCE v2 GID bound to its netdev.
//!
//! Reads `ports/<n>/gid_attrs/types/<i>` and `ndevs/<i>`. NCCL and most RoCE deployments use
//! RoCE v2 (routable, UDP); a port whose GID table has only `IB/RoCE v1` entries (no IP address
//! on the netdev, or a v1-only default) cannot carry that traffic. Entries whose type cannot be
//! read (EINVAL on an empty slot, as on real kernels) are empty slots, not faults; a port whose
//! `gid_attrs/types/` directory is missing or unreadable is `info` "not verified".

use serde_json::json;

use super::{Ctx, where_};
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::ROCE_GID;

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in &ctx.snap.devices {
        if super::ib_link_layer::other_kind(d).is_some() {
            continue;
        }
        for p in d.ports.iter().filter(|p| p.is_ethernet() && p.is_active()) {
            if !p.gid_table_read {
                out.push(Finding::new(
                    ID,
                    Severity::Info,
                    Some(&d.name),
                    Some(p.num),
                    json!({"gid_attrs": null}),
                    json!({"gid_types": ["RoCE v2"]}),
                    format!(
                        "{}: not verified: no readable gid_attrs/types/ directory (driver {}), so its GID table is not checked",
                        where_(d, p),
                        d.driver.as_deref().unwrap_or("unknown")
                    ),
                ));
                continue;
            }
            let v2 = p
                .gids
                .iter()
                .any(|g| g.kind == "RoCE v2" && g.ndev.is_some());
            if !v2 {
                let kinds: Vec<String> = p.gids.iter().map(|g| g.kind.clone()).collect();
                out.push(Finding::new(
                    ID,
                    Severity::Fail,
                    Some(&d.name),
                    Some(p.num),
                    json!({"gid_types": kinds}),
                    json!({"gid_types": ["RoCE v2"]}),
                    format!(
                        "{} has no RoCE v2 GID bound to a netdev ({} GID entries); give the netdev an IP address and check the default RoCE mode (cma_roce_mode)",
                        where_(d, p),
                        kinds.len()
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
    use crate::probe::gather::Gid;

    fn gid(kind: &str) -> Gid {
        Gid {
            index: 0,
            kind: kind.into(),
            ndev: Some("eth0".into()),
        }
    }

    #[test]
    fn a_port_with_only_v1_gids_fails() {
        let mut s = roce_node(2);
        s.devices[0].ports[0].gids = vec![gid("RoCE v2")];
        s.devices[1].ports[0].gids = vec![gid("IB/RoCE v1")];
        for d in &mut s.devices {
            d.ports[0].gid_table_read = true;
        }
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_1".into()), Some(1))]
        );
    }

    #[test]
    fn a_port_without_a_readable_gid_table_is_not_verified_never_failed() {
        let s = roce_node(2);
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [
                (Severity::Info, Some("mlx5_0".into()), Some(1)),
                (Severity::Info, Some("mlx5_1".into()), Some(1))
            ]
        );
        assert!(f[0].message.contains("not verified"), "{}", f[0].message);
        assert!(f[0].message.contains("gid_attrs/types"));
    }

    #[test]
    fn infiniband_ports_are_not_judged() {
        assert!(run(&ib_node(2), check).is_empty());
    }
}
