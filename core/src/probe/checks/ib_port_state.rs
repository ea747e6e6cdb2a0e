//! `ib.port_state`: every port that should carry traffic is ACTIVE.
//!
//! Reads `ports/<n>/state` and `phys_state` (sysfs-class-infiniband). Zero-config: a port that
//! is not ACTIVE while a peer in its group (HCA type, link layer, port number) is ACTIVE fails;
//! a port named by a `[[node.ports]]` rule must be ACTIVE. A group with no ACTIVE port at all
//! (unused second ports, say) is only said, as `info`, unless a rule names it.
//!
//! With a known inventory ([`crate::probe::known`]) the record decides first: a port that was
//! ACTIVE when it was recorded must be ACTIVE (whatever its peers do), and one that was not is
//! unprovisioned (`info`: an aux port, a second port without a cable), never a fault. Compute
//! rails (HCAs under a GPU's PCIe switch) are peers whatever their link layer, so a rail
//! flipped to Ethernet and down fails beside the rails it left.
//!
//! A port that is training after a boot is not a fault yet: within [`BOOT_GRACE_S`] of boot
//! (`/proc/uptime`), or of its driver making the device (a reload, a firmware reset: the
//! device's `ports/` folder is that young), a port in `INIT` or `ARMED` whose `phys_state` is `LinkUp` (the cable is
//! up; the subnet manager has not made it ACTIVE yet) is a `warn`, not a `fail`. Slurm runs the
//! health check when `slurmd` starts, often before the subnet manager has swept a rebooted
//! node; the false-drain soak (`scripts/bench-soak`) found that race behind every false drain
//! it saw. A port still not ACTIVE after the grace fails as before.

use serde_json::json;

use std::collections::BTreeMap;

use super::{Ctx, GroupKey, Role, groups, role, where_};
use crate::probe::gather::{Device, Port, Snapshot};
use crate::probe::{Finding, Severity, known};

/// The check id.
pub const ID: &str = fabric_proto::check_id::IB_PORT_STATE;

/// How long after boot a port with its link up may still wait for the subnet manager.
pub const BOOT_GRACE_S: f64 = 600.0;

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for members in state_groups(ctx.snap).values() {
        let active = members.iter().filter(|(_, p)| p.is_active()).count();
        for (d, p) in members {
            let Some(state) = &p.state else { continue };
            if state.is_active() {
                continue;
            }
            let phys = p.phys_state.as_deref().unwrap_or("unknown");
            let configured = ctx.expect.rules_for(&d.name).next().is_some();
            let recorded = ctx
                .known
                .and_then(|k| k.port(&d.name, d.pci.as_deref(), p.num).map(|r| (k, r)));
            let (sev, why) = if configured {
                (
                    Severity::Fail,
                    "the configuration expects it ACTIVE".to_string(),
                )
            } else if let Some((k, r)) = recorded {
                if known::was_active(r) {
                    (
                        Severity::Fail,
                        format!(
                            "it was an ACTIVE {} port in this node's known inventory ({})",
                            r.link_layer.as_deref().unwrap_or("RDMA"),
                            k.provenance()
                        ),
                    )
                } else {
                    (
                        Severity::Info,
                        format!(
                            "unprovisioned: it was not ACTIVE in this node's known inventory ({}) either; name it in a [[node.ports]] rule to require it",
                            k.provenance()
                        ),
                    )
                }
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
            // Since the node booted, or since the driver made the device (a reload or a
            // firmware reset retrains every port as a boot does).
            let since = [
                ctx.snap.uptime_s.map(|u| (u, "the node booted")),
                d.age_s.map(|a| (a, "its driver made the device")),
            ]
            .into_iter()
            .flatten()
            .min_by(|a, b| a.0.total_cmp(&b.0));
            let training = p.is_training()
                && phys.contains("LinkUp")
                && since.is_some_and(|(s, _)| s < BOOT_GRACE_S);
            let (sev, why) = match since {
                Some((s, what)) if training && sev == Severity::Fail => (
                    Severity::Warn,
                    format!(
                        "{why}; {what} {s:.0} s ago and its link is up, so the subnet manager may not have swept it yet: it fails if still not ACTIVE {BOOT_GRACE_S:.0} s after that"
                    ),
                ),
                _ => (sev, why),
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
                json!({"state": state.name, "phys_state": phys, "link_layer": p.link_layer}),
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

/// The port groups of this check: as [`super::groups`], except that a node's compute rails
/// (HCAs under a GPU's PCIe switch, [`Role::Compute`]) are peers whatever their link layer
/// reads, so a rail flipped to Ethernet and down is judged beside the rails it left.
fn state_groups(snap: &Snapshot) -> BTreeMap<GroupKey, Vec<(&Device, &Port)>> {
    let mut g: BTreeMap<GroupKey, Vec<(&Device, &Port)>> = BTreeMap::new();
    for ((hca, ll, num), members) in groups(snap) {
        for (d, p) in members {
            let layer = match role(snap, d) {
                Role::Compute => "compute rail".to_string(),
                Role::Other => ll.clone(),
            };
            g.entry((hca.clone(), layer, num)).or_default().push((d, p));
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn training(mut p: crate::probe::gather::Port) -> crate::probe::gather::Port {
        p.state = Some(crate::probe::gather::PortState {
            code: 2,
            name: "INIT".into(),
        });
        p.phys_state = Some("5: LinkUp".into());
        p
    }

    #[test]
    fn a_port_still_training_soon_after_boot_warns_and_fails_once_the_grace_is_over() {
        let mut s = ib_node(8);
        s.devices[2].ports[0] = training(s.devices[2].ports[0].clone());
        s.uptime_s = Some(95.0);
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Warn, Some("mlx5_2".into()), Some(1))]
        );
        assert!(f[0].message.contains("booted 95 s ago"), "{}", f[0].message);
        s.uptime_s = Some(BOOT_GRACE_S + 1.0);
        assert_eq!(brief(&run(&s, check))[0].0, Severity::Fail);
        s.uptime_s = None;
        assert_eq!(
            brief(&run(&s, check))[0].0,
            Severity::Fail,
            "no uptime, no grace"
        );
    }

    #[test]
    fn a_port_whose_link_is_down_fails_even_right_after_boot() {
        let mut s = ib_node(8);
        s.devices[3].ports[0] = down(s.devices[3].ports[0].clone());
        s.uptime_s = Some(30.0);
        assert_eq!(brief(&run(&s, check))[0].0, Severity::Fail);
    }

    #[test]
    fn a_down_port_among_active_peers_fails() {
        let mut s = ib_node(8);
        s.devices[3].ports[0] = down(s.devices[3].ports[0].clone());
        fails_beside_seven_active_peers(&s, "mlx5_3");
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

    #[test]
    fn a_port_that_was_not_active_when_the_inventory_was_recorded_is_unprovisioned() {
        let mut s = ib_node(8);
        s.devices[5].ports[0] = down(s.devices[5].ports[0].clone());
        let k = known_of(&s);
        let f = run_known(&s, &k, check);
        assert_eq!(
            brief(&f),
            [(Severity::Info, Some("mlx5_5".into()), Some(1))]
        );
        assert!(f[0].message.contains("unprovisioned"), "{}", f[0].message);
    }

    #[test]
    fn a_port_that_was_active_when_recorded_fails_even_when_every_peer_is_down_too() {
        let healthy = ib_node(2);
        let k = known_of(&healthy);
        let mut s = healthy.clone();
        for d in &mut s.devices {
            d.ports[0] = down(d.ports[0].clone());
        }
        // Without the record: a group with no ACTIVE port is only said.
        assert!(run(&s, check).iter().all(|f| f.severity == Severity::Info));
        let f = run_known(&s, &k, check);
        assert_eq!(
            brief(&f),
            [
                (Severity::Fail, Some("mlx5_0".into()), Some(1)),
                (Severity::Fail, Some("mlx5_1".into()), Some(1))
            ]
        );
        assert!(f[0].message.contains("known inventory"), "{}", f[0].message);
    }

    #[test]
    fn a_compute_rail_flipped_to_ethernet_and_down_fails_beside_the_rails_it_left() {
        let mut s = dgx_node();
        s.devices[3].ports[0].link_layer = Some("Ethernet".into());
        s.devices[3].ports[0] = down(s.devices[3].ports[0].clone());
        fails_beside_seven_active_peers(&s, "mlx5_3");
    }

    /// `device`'s port 1 alone fails, its 7 peers ACTIVE.
    fn fails_beside_seven_active_peers(s: &crate::probe::gather::Snapshot, device: &str) {
        let f = run(s, check);
        assert_eq!(brief(&f), [(Severity::Fail, Some(device.into()), Some(1))]);
        assert!(
            f[0].message.contains("7 of its 7 peers"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn storage_ports_down_beside_active_rails_of_the_same_part_are_only_said() {
        let mut s = dgx_node();
        for i in [8, 9] {
            s.devices[i].ports[0] = down(s.devices[i].ports[0].clone());
        }
        assert!(run(&s, check).iter().all(|f| f.severity == Severity::Info));
    }
}
