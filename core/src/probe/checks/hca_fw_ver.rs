//! `hca.fw_ver`: HCAs of one kind run the same firmware.
//!
//! Reads `class/infiniband/<dev>/fw_ver` (`28.39.1002`). Peers are HCAs with the same
//! `hca_type`, `board_id`, link layer of port 1 and firmware major number (the major names the
//! silicon: 20 ConnectX-6, 22 ConnectX-6 Dx, 28 ConnectX-7). Virtual functions share one
//! `hca_type` (`MT4126`) whatever card they come from: a cloud A100 node shows a ConnectX-6 Dx
//! Ethernet VF on 22.35 beside ConnectX-7 InfiniBand VFs on 28.37, which are not peers. An HCA
//! whose firmware differs from its peers' majority is `warn` — a partial update or a swapped card; mixed firmware on one node behaves
//! differently under load (adaptive routing, congestion control), but still carries traffic, so
//! it does not drain. Needs no configuration; `bom.drift` compares with a pinned BOM instead.
//! A device whose `fw_ver` could not be read is left out (its read problem is reported).

use serde_json::json;

use super::{Ctx, majority};
use crate::probe::gather::Device;
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::HCA_FW_VER;

/// Devices grouped by `key`, each with its `value`: `(device, value, majority, peers)` for every
/// device whose value differs from its group's majority (groups of one are not judged).
pub(super) fn deviations(
    devices: &[Device],
    key: impl Fn(&Device) -> Option<String>,
    value: impl Fn(&Device) -> Option<&str>,
) -> Vec<(&Device, String, String, String, usize)> {
    let mut groups: std::collections::BTreeMap<String, Vec<(&Device, String)>> = Default::default();
    for d in devices {
        if let (Some(k), Some(v)) = (key(d), value(d)) {
            groups.entry(k).or_default().push((d, v.to_string()));
        }
    }
    let mut out = Vec::new();
    for (k, members) in groups {
        if members.len() < 2 {
            continue;
        }
        let Some((maj, _)) = majority(members.iter().map(|m| m.1.clone())) else {
            continue;
        };
        for (d, v) in &members {
            if *v != maj {
                out.push((*d, v.clone(), maj.clone(), k.clone(), members.len() - 1));
            }
        }
    }
    out
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let key = |d: &Device| {
        let kind = d.hca_type.clone().or_else(|| d.driver.clone())?;
        let major = d.fw_ver.as_deref()?.split('.').next()?.to_string();
        let ll = d
            .ports
            .first()
            .and_then(|p| p.link_layer.clone())
            .unwrap_or_default();
        Some(match &d.board_id {
            Some(b) => format!("{kind}, board {b}, {ll}, firmware {major}.x"),
            None => format!("{kind}, {ll}, firmware {major}.x"),
        })
    };
    deviations(&ctx.snap.devices, key, |d| d.fw_ver.as_deref())
        .into_iter()
        .map(|(d, v, maj, group, peers)| {
            Finding::new(
                ID,
                Severity::Warn,
                Some(&d.name),
                None,
                json!({"fw_ver": v}),
                json!({"fw_ver": maj}),
                format!(
                    "{} runs firmware {v}, its {peers} peers ({group}) mostly {maj}: a partial update or a swapped card; flash it to match (mlxfwmanager, or the vendor's tool) at the next drain",
                    d.name
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn node() -> crate::probe::gather::Snapshot {
        let mut s = ib_node(8);
        for d in &mut s.devices {
            d.fw_ver = Some("28.39.1002".into());
            d.board_id = Some("MT_0000000838".into());
        }
        s
    }

    #[test]
    fn uniform_firmware_passes() {
        assert!(run(&node(), check).is_empty());
    }

    #[test]
    fn one_hca_on_other_firmware_than_its_peers_warns() {
        let mut s = node();
        s.devices[4].fw_ver = Some("28.36.1010".into());
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Warn, Some("mlx5_4".into()), None)]);
        assert!(f[0].message.contains("28.36.1010") && f[0].message.contains("mostly 28.39.1002"));
    }

    #[test]
    fn different_parts_are_not_each_others_peers() {
        let mut s = node();
        s.devices[7].hca_type = Some("MT4125".into());
        s.devices[7].fw_ver = Some("22.39.2048".into());
        s.devices[6].board_id = Some("MT_0000000359".into());
        s.devices[6].fw_ver = Some("28.40.1000".into());
        assert!(run(&s, check).is_empty());
    }

    #[test]
    fn virtual_functions_of_other_cards_are_not_peers_though_they_share_an_hca_type() {
        // As a cloud A100 node's ibstat shows: MT4126 VFs, one Ethernet on 22.x, eight IB on 28.x.
        let mut s = node();
        for d in &mut s.devices {
            d.hca_type = Some("MT4126".into());
            d.board_id = None;
            d.fw_ver = Some("28.37.1014".into());
        }
        s.devices[0].fw_ver = Some("22.35.2302".into());
        s.devices[0].ports[0].link_layer = Some("Ethernet".into());
        assert!(run(&s, check).is_empty());
    }

    #[test]
    fn an_unreadable_fw_ver_is_left_out() {
        let mut s = node();
        s.devices[1].fw_ver = None;
        assert!(run(&s, check).is_empty());
    }
}
