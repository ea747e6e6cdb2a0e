//! `ib.port_state`: every port that should carry traffic is ACTIVE.
//!
//! Reads `ports/<n>/state` and `phys_state` (sysfs-class-infiniband). Zero-config: a port that
//! is not ACTIVE while a peer in its group (HCA type, link layer, port number) is ACTIVE fails;
//! a port named by a `[[node.ports]]` rule must be ACTIVE. A group with no ACTIVE port at all
//! (unused second ports, say) is only said, as `info`, unless a rule names it.

use serde_json::json;

use super::{Ctx, groups, where_};
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::IB_PORT_STATE;

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for members in groups(ctx.snap).values() {
        let active = members.iter().filter(|(_, p)| p.is_active()).count();
        for (d, p) in members {
            let Some(state) = &p.state else { continue };
            if state.is_active() {
                continue;
            }
            let phys = p.phys_state.as_deref().unwrap_or("unknown");
            let configured = ctx.expect.rules_for(&d.name).next().is_some();
            let (sev, why) = if configured {
                (
                    Severity::Fail,
                    "the configuration expects it ACTIVE".to_string(),
                )
            } else if active > 0 {
                (Severity::Fail, {
                    let peers = members.len() - 1;
                    let noun = if peers == 1 { "peer is" } else { "peers are" };
                    format!("{active} of its {peers} {noun} ACTIVE")
                })
            } else {
                (
                    Severity::Info,
                    "no port in its group is ACTIVE (unused ports?); name the devices in a [[node.ports]] rule to require them".to_string(),
                )
            };
            let hint = if state.code == 2 {
                " (INIT: no subnet manager has configured it)"
            } else {
                ""
            };
            out.push(Finding::new(
                ID,
                sev,
                Some(&d.name),
                Some(p.num),
                json!({"state": state.name, "phys_state": phys}),
                json!({"state": "ACTIVE"}),
                format!(
                    "{} is {}{hint}, phys_state {phys}; {why}",
                    where_(d, p),
                    state.name
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn a_down_port_among_active_peers_fails() {
        let mut s = ib_node(8);
        s.devices[3].ports[0] = down(s.devices[3].ports[0].clone());
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_3".into()), Some(1))]
        );
        assert!(
            f[0].message.contains("7 of its 7 peers"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_down_port_beside_one_active_peer_says_peer_in_the_singular() {
        let mut s = ib_node(2);
        s.devices[1].ports[0] = down(s.devices[1].ports[0].clone());
        let f = run(&s, check);
        assert!(
            f[0].message.ends_with("1 of its 1 peer is ACTIVE"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_healthy_node_has_no_findings() {
        assert!(run(&ib_node(8), check).is_empty());
    }

    #[test]
    fn a_group_with_no_active_port_is_only_said() {
        let mut s = ib_node(2);
        for d in &mut s.devices {
            d.ports[0] = down(d.ports[0].clone());
        }
        let f = run(&s, check);
        assert!(f.iter().all(|f| f.severity == Severity::Info));
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn a_configured_port_must_be_active_even_alone() {
        let mut s = ib_node(1);
        s.devices[0].ports[0] = down(s.devices[0].ports[0].clone());
        let e = expect("[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_0\"\n");
        let f = run_with(&s, &e, None, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_0".into()), Some(1))]
        );
    }

    #[test]
    fn different_hca_types_are_not_peers() {
        let mut s = ib_node(2);
        s.devices[1].hca_type = Some("MT4125".into());
        s.devices[1].ports[0] = down(s.devices[1].ports[0].clone());
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Info, Some("mlx5_1".into()), Some(1))]
        );
    }
}
