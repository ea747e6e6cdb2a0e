//! `ib.link_layer`: ports use the link layer the configuration names.
//!
//! Reads `ports/<n>/link_layer` (`InfiniBand` or `Ethernet`). Peer groups already separate link
//! layers, so the port groups cannot tell a VPI card flipped to Ethernet from a storage port;
//! `link_layer` in a `[[node.ports]]` rule judges that (`fail`). Without one, the same part
//! tells: among HCAs with the same `hca_type`, `board_id` and port count, a port whose link
//! layer differs from a strict majority of its peers is `warn` (a VPI card flipped by
//! `mlxconfig`, or one deliberately used for storage — name it in a rule if so); a tie is not
//! judged, nor are devices without a `board_id`. Peers share a role on the node as well
//! ([`super::Role`]: compute rails under a GPU's PCIe switch, or the other ports), so a
//! deliberate mix across roles (rails in InfiniBand, storage ports of the same part in
//! Ethernet) is not a finding. With a known inventory ([`crate::probe::known`]) the record
//! judges instead: a port that was ACTIVE in one link layer and reads another `fail`s (the rail
//! has left its fabric), and recorded ports are left out of the majority rule. Devices of a kind the checks were not
//! written for (Omni-Path `hfi1`, iWARP `i40iw` whose `link_layer` reads `InfiniBand`) are said
//! once each as `info` "not verified", never judged as faulty InfiniBand.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Ctx, Role, role, where_};

use crate::probe::gather::{Device, Port};
use crate::probe::{Finding, Severity, known};

/// The check id.
pub const ID: &str = fabric_proto::check_id::IB_LINK_LAYER;

/// A kind of RDMA device the InfiniBand and RoCE checks were not written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtherKind {
    /// Intel/Cornelis Omni-Path (`hfi1`) or TrueScale (`qib`).
    OmniPath,
    /// An iWARP RNIC (`i40iw`, `iw_cxgb4`; `node_type` `4: RNIC`).
    Iwarp,
}

/// The kind of a device, when it is one the checks do not know.
pub fn other_kind(d: &Device) -> Option<OtherKind> {
    let n = d.name.as_str();
    if n.starts_with("hfi1") || n.starts_with("qib") {
        return Some(OtherKind::OmniPath);
    }
    let rnic = d
        .node_type
        .as_deref()
        .is_some_and(|t| t.trim_start().starts_with("4:") || t.contains("RNIC"));
    if rnic || n.starts_with("i40iw") || n.starts_with("iw_cxgb") || n.starts_with("cxgb") {
        return Some(OtherKind::Iwarp);
    }
    None
}

/// The `info` "not verified" for a device the checks do not know.
fn other_kind_finding(d: &Device, kind: OtherKind) -> Finding {
    let ll: Vec<String> = d
        .ports
        .iter()
        .map(|p| {
            format!(
                "port {} {}",
                p.num,
                p.link_layer.as_deref().unwrap_or("unknown")
            )
        })
        .collect();
    let what = match kind {
        OtherKind::OmniPath => format!(
            "{} is an Omni-Path HFI (hfi1/qib, not an InfiniBand HCA although its link_layer reads InfiniBand): port state, rate and PMA counters are read, but IPoIB MTU, GID, ECN and PFC checks do not apply and are not verified",
            d.name
        ),
        OtherKind::Iwarp => format!(
            "{} is an iWARP RNIC ({}): its link_layer reads {} though it runs over Ethernet TCP; port state and rate are read, the InfiniBand counter, RoCE GID, ECN and PFC checks are not verified for it",
            d.name,
            d.driver.as_deref().unwrap_or("driver unknown"),
            d.ports
                .first()
                .and_then(|p| p.link_layer.as_deref())
                .unwrap_or("unknown")
        ),
    };
    Finding::new(
        ID,
        Severity::Info,
        Some(&d.name),
        None,
        json!({"kind": format!("{kind:?}"), "link_layers": ll}),
        json!("an InfiniBand HCA or a RoCE NIC"),
        what,
    )
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out: Vec<Finding> = ctx
        .snap
        .devices
        .iter()
        .filter_map(|d| other_kind(d).map(|k| other_kind_finding(d, k)))
        .collect();
    for d in &ctx.snap.devices {
        let Some(want) = ctx.expect.expect(&d.name, |p| p.link_layer.clone()) else {
            continue;
        };
        for p in &d.ports {
            let Some(ll) = &p.link_layer else { continue };
            if *ll != want {
                out.push(Finding::new(
                    ID,
                    Severity::Fail,
                    Some(&d.name),
                    Some(p.num),
                    json!(ll),
                    json!(want),
                    format!("{} has link layer {ll}; the configuration expects {want} (set the port type with mlxconfig LINK_TYPE_P{})", where_(d, p), p.num),
                ));
            }
        }
    }
    out.extend(against_known(ctx));
    out.extend(parity(ctx));
    out
}

/// With a known inventory: a port that was ACTIVE in one link layer and reads another now has
/// left its fabric (`fail`), whatever its peers read.
fn against_known(ctx: &Ctx<'_>) -> Vec<Finding> {
    let Some(k) = ctx.known else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for d in &ctx.snap.devices {
        if ctx
            .expect
            .expect(&d.name, |p| p.link_layer.clone())
            .is_some()
        {
            continue;
        }
        for p in &d.ports {
            let (Some(ll), Some(r)) = (&p.link_layer, k.port(&d.name, d.pci.as_deref(), p.num))
            else {
                continue;
            };
            let Some(was) = r.link_layer.as_deref().filter(|_| known::was_active(r)) else {
                continue;
            };
            if was == ll {
                continue;
            }
            out.push(Finding::new(
                ID,
                Severity::Fail,
                Some(&d.name),
                Some(p.num),
                json!(ll),
                json!(was),
                format!(
                    "{} ({}) has link layer {ll}; it was an ACTIVE {was} port in this node's known inventory ({}), so it has left its fabric: set it back with mlxconfig LINK_TYPE_P{} and reset the card, or run `fabric-check inventory accept` if the change is meant",
                    where_(d, p),
                    role(ctx.snap, d).words(),
                    k.provenance(),
                    p.num
                ),
            ));
        }
    }
    out
}

/// (HCA type, board id, port count, role, port number): the same port of the same part in the
/// same role on the node.
type PartPort = (String, String, usize, Role, u32);

/// Zero-config: link layers unlike a strict majority of the same part's ports.
fn parity(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut groups: BTreeMap<PartPort, Vec<(&Device, &Port, &str)>> = BTreeMap::new();
    for d in &ctx.snap.devices {
        let (Some(hca), Some(board)) = (&d.hca_type, &d.board_id) else {
            continue;
        };
        if ctx
            .expect
            .expect(&d.name, |p| p.link_layer.clone())
            .is_some()
            || other_kind(d).is_some()
        {
            continue;
        }
        let r = role(ctx.snap, d);
        for p in &d.ports {
            let recorded = ctx
                .known
                .is_some_and(|k| k.port(&d.name, d.pci.as_deref(), p.num).is_some());
            if recorded {
                // The known inventory judges it (`against_known`).
                continue;
            }
            if let Some(ll) = &p.link_layer {
                groups
                    .entry((hca.clone(), board.clone(), d.ports.len(), r, p.num))
                    .or_default()
                    .push((d, p, ll.as_str()));
            }
        }
    }
    let mut out = Vec::new();
    for ((hca, board, _, r, _), members) in groups {
        let Some((maj, n)) = super::majority(members.iter().map(|m| m.2)) else {
            continue;
        };
        if n * 2 <= members.len() {
            continue;
        }
        for (d, p, ll) in &members {
            if *ll != maj {
                out.push(Finding::new(
                    ID,
                    Severity::Warn,
                    Some(&d.name),
                    Some(p.num),
                    json!(ll),
                    json!(maj),
                    format!(
                        "{} has link layer {ll}, {n} of its {} peers ({hca}, board {board}, {}s) {maj}: a VPI card flipped by mlxconfig LINK_TYPE_P{}, or one used for something else on purpose (then name it in a [[node.ports]] link_layer rule)",
                        where_(d, p),
                        members.len() - 1,
                        r.words(),
                        p.num
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
    fn a_port_in_the_wrong_link_layer_fails() {
        let mut s = ib_node(2);
        s.devices[1].ports[0].link_layer = Some("Ethernet".into());
        let e = expect(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_[0-1]\"\nlink_layer = \"InfiniBand\"\n",
        );
        let f = run_with(&s, &e, None, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_1".into()), Some(1))]
        );
    }

    fn same_part_node() -> crate::probe::gather::Snapshot {
        let mut s = ib_node(8);
        for d in &mut s.devices {
            d.board_id = Some("MT_0000000838".into());
        }
        s
    }

    #[test]
    fn one_card_of_eight_identical_ones_flipped_to_ethernet_warns_without_configuration() {
        let mut s = same_part_node();
        s.devices[6].ports[0].link_layer = Some("Ethernet".into());
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Warn, Some("mlx5_6".into()), Some(1))]
        );
        assert!(
            f[0].message.contains("7 of its 7 peers"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_half_and_half_split_of_the_same_part_is_not_judged() {
        let mut s = same_part_node();
        for d in &mut s.devices[4..] {
            d.ports[0].link_layer = Some("Ethernet".into());
        }
        assert!(run(&s, check).is_empty());
    }

    #[test]
    fn without_configuration_nothing_is_judged() {
        let mut s = ib_node(2);
        s.devices[1].ports[0].link_layer = Some("Ethernet".into());
        assert!(run(&s, check).is_empty());
    }

    #[test]
    fn storage_ports_of_the_same_part_in_ethernet_beside_infiniband_rails_are_not_a_finding() {
        assert!(run(&dgx_node(), check).is_empty());
    }

    #[test]
    fn a_compute_rail_flipped_to_ethernet_warns_without_a_record_and_fails_with_one() {
        let healthy = dgx_node();
        let k = known_of(&healthy);
        let mut s = healthy.clone();
        s.devices[2].ports[0].link_layer = Some("Ethernet".into());
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Warn, Some("mlx5_2".into()), Some(1))]
        );
        assert!(f[0].message.contains("compute rails"), "{}", f[0].message);
        let f = run_known(&s, &k, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_2".into()), Some(1))]
        );
        assert!(
            f[0].message.contains("was an ACTIVE InfiniBand port"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_recorded_mix_of_link_layers_on_one_part_is_not_judged_by_the_majority() {
        // No GPUs, so no roles: six InfiniBand ports and two Ethernet ones of one part.
        let mut s = ib_node(8);
        for d in &mut s.devices {
            d.board_id = Some("MT_0000000838".into());
        }
        for i in [6, 7] {
            s.devices[i].ports[0].link_layer = Some("Ethernet".into());
        }
        assert_eq!(
            run(&s, check).len(),
            2,
            "without a record the majority warns"
        );
        assert!(run_known(&s, &known_of(&s), check).is_empty());
    }
}
