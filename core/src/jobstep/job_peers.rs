//! Peers across the job's nodes: a node that is uniform inside but unlike the job's other nodes
//! is named by the first node at the rendezvous, with zero configuration.
//!
//! The probe's peer rules compare a node's ports with each other, so a node whose eight rails
//! all trained at 200 Gb/s, all run MTU 2048, or all carry an older firmware, passes them: it
//! agrees with itself. Each node sends the first node a [`Fingerprint`] of its fabric with its
//! prolog payload (a few hundred bytes: per HCA type, link layer and port number, how many
//! ports are ACTIVE and the most common rate, MTU and firmware); the first node names every
//! node whose value differs from a strict majority of the job's nodes, as
//! [`fabric_proto::check_id::JOB_PEER_PARITY`] — a `warn` in the tag, never a drain: which side
//! is right is for an admin to say (a rolling firmware update leaves a minority behind on
//! purpose). Jobs of fewer than three nodes have no majority and are not judged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::probe::{Inventory, known::was_active};

/// One group of a node's ports: what the job's nodes compare.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupPrint {
    /// Ports ACTIVE.
    pub active: u32,
    /// The most common rate of the ACTIVE ports, Gb/s (rounded to 1 Mb/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_gbps: Option<f64>,
    /// The most common MTU of the ports' netdevs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The most common firmware of the group's HCAs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fw_ver: Option<String>,
}

/// A node's fabric in brief, keyed `<HCA type> <link layer> port <n>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The groups.
    pub groups: BTreeMap<String, GroupPrint>,
}

fn most_common<V: Ord + Clone>(vals: impl IntoIterator<Item = V>) -> Option<V> {
    crate::probe::checks::majority(vals).map(|(v, _)| v)
}

impl Fingerprint {
    /// The fingerprint of a probe's inventory.
    pub fn of(inv: &Inventory) -> Self {
        let mut ports: BTreeMap<String, Vec<(&str, &crate::probe::InventoryPort)>> =
            BTreeMap::new();
        for d in &inv.devices {
            let hca = d.hca_type.as_deref().unwrap_or("unknown HCA");
            for p in &d.ports {
                let ll = p.link_layer.as_deref().unwrap_or("unknown link layer");
                ports
                    .entry(format!("{hca} {ll} port {}", p.port))
                    .or_default()
                    .push((d.fw_ver.as_deref().unwrap_or(""), p));
            }
        }
        let groups = ports
            .into_iter()
            .map(|(k, members)| {
                let active: Vec<_> = members.iter().filter(|(_, p)| was_active(p)).collect();
                let g = GroupPrint {
                    active: active.len() as u32,
                    rate_gbps: most_common(
                        active
                            .iter()
                            .filter_map(|(_, p)| p.rate_gbps.map(|r| (r * 1000.0).round() as u64)),
                    )
                    .map(|m| m as f64 / 1000.0),
                    mtu: most_common(active.iter().filter_map(|(_, p)| p.mtu)),
                    fw_ver: most_common(
                        members
                            .iter()
                            .map(|(f, _)| *f)
                            .filter(|f| !f.is_empty())
                            .map(str::to_string),
                    ),
                };
                (k, g)
            })
            .collect();
        Self { groups }
    }
}

/// One attribute of a group, as text (`400 Gb/s`, `MTU 4096`, `firmware 28.39.1002`, `8 ACTIVE`,
/// `none`).
fn attributes(g: Option<&GroupPrint>) -> [(&'static str, String); 4] {
    let none = || "none".to_string();
    [
        (
            "ACTIVE ports",
            g.map_or_else(none, |g| g.active.to_string()),
        ),
        (
            "rate",
            g.and_then(|g| g.rate_gbps)
                .map_or_else(none, |r| format!("{r} Gb/s")),
        ),
        (
            "MTU",
            g.and_then(|g| g.mtu).map_or_else(none, |m| m.to_string()),
        ),
        (
            "firmware",
            g.and_then(|g| g.fw_ver.clone()).unwrap_or_else(none),
        ),
    ]
}

/// Every node unlike a strict majority of the job's nodes, with what differs
/// (`MT4129 InfiniBand port 1: rate 200 Gb/s, 3 of the job's 4 nodes 400 Gb/s`). Nodes without
/// a fingerprint (an older build, a probe that could not run) are left out.
pub fn judge(prints: &BTreeMap<String, Fingerprint>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let n = prints.len();
    if n < 3 {
        return out;
    }
    let keys: std::collections::BTreeSet<&String> =
        prints.values().flat_map(|f| f.groups.keys()).collect();
    for key in keys {
        let per_node: Vec<(&String, [(&str, String); 4])> = prints
            .iter()
            .map(|(node, f)| (node, attributes(f.groups.get(key))))
            .collect();
        for i in 0..4 {
            let Some((maj, count)) =
                crate::probe::checks::majority(per_node.iter().map(|(_, a)| a[i].1.clone()))
            else {
                continue;
            };
            if count * 2 <= n {
                continue;
            }
            for (node, a) in &per_node {
                if a[i].1 != maj {
                    out.entry((*node).clone()).or_default().push(format!(
                        "{key}: {} {}, {count} of the job's {n} nodes {maj}",
                        a[i].0, a[i].1
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{InventoryDevice, InventoryPort};

    fn node(rate: f64, fw: &str, ll: &str) -> Fingerprint {
        Fingerprint::of(&Inventory {
            devices: (0..8)
                .map(|i| InventoryDevice {
                    name: format!("mlx5_{i}"),
                    hca_type: Some("MT4129".into()),
                    fw_ver: Some(fw.into()),
                    ports: vec![InventoryPort {
                        port: 1,
                        state: Some("ACTIVE".into()),
                        rate_gbps: Some(rate),
                        link_layer: Some(ll.into()),
                        mtu: Some(4096),
                        ..InventoryPort::default()
                    }],
                    ..InventoryDevice::default()
                })
                .collect(),
            ..Inventory::default()
        })
    }

    fn job(odd: Fingerprint) -> BTreeMap<String, Fingerprint> {
        let mut m: BTreeMap<String, Fingerprint> = ["n1", "n2", "n3"]
            .iter()
            .map(|n| (n.to_string(), node(400.0, "28.39.1002", "InfiniBand")))
            .collect();
        m.insert("n4".into(), odd);
        m
    }

    #[test]
    fn a_node_whose_every_rail_trained_at_half_rate_is_named_though_it_agrees_with_itself() {
        let odd = judge(&job(node(200.0, "28.39.1002", "InfiniBand")));
        assert_eq!(odd.keys().collect::<Vec<_>>(), ["n4"]);
        assert_eq!(
            odd["n4"],
            ["MT4129 InfiniBand port 1: rate 200 Gb/s, 3 of the job's 4 nodes 400 Gb/s"]
        );
    }

    #[test]
    fn a_node_on_older_firmware_or_in_another_link_layer_is_named() {
        let odd = judge(&job(node(400.0, "28.36.1010", "InfiniBand")));
        assert!(odd["n4"][0].contains("firmware 28.36.1010"), "{odd:?}");
        let odd = judge(&job(node(400.0, "28.39.1002", "Ethernet")));
        assert!(
            odd["n4"]
                .iter()
                .any(|w| w.contains("InfiniBand port 1: ACTIVE ports none")),
            "{odd:?}"
        );
    }

    #[test]
    fn alike_nodes_and_jobs_without_a_majority_are_not_judged() {
        assert!(judge(&job(node(400.0, "28.39.1002", "InfiniBand"))).is_empty());
        let two: BTreeMap<String, Fingerprint> = [
            ("n1".to_string(), node(400.0, "28.39.1002", "InfiniBand")),
            ("n2".to_string(), node(200.0, "28.39.1002", "InfiniBand")),
        ]
        .into();
        assert!(judge(&two).is_empty());
    }

    #[test]
    fn a_fingerprint_of_ten_hcas_stays_small_on_the_wire() {
        let f = node(400.0, "28.39.1002", "InfiniBand");
        assert!(serde_json::to_vec(&f).unwrap().len() < 400);
    }
}
