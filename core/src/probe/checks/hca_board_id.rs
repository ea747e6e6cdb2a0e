//! `hca.board_id`: HCAs of one kind and shape are the same part.
//!
//! Reads `class/infiniband/<dev>/board_id` (the PSID, `MT_0000000838`). Peers are HCAs with the
//! same `hca_type`, number of ports and link layer of port 1 (so a DGX's dual-port storage
//! ConnectX-7 is not a peer of its single-port compute ones). An HCA whose board id differs from
//! its peers' majority is `warn`: a replacement of another model or an OEM variant, with its own
//! firmware line and defaults; confirm the part. Drivers without `board_id` (irdma) are not
//! judged.

use serde_json::json;

use super::Ctx;
use super::hca_fw_ver::deviations;
use crate::probe::gather::Device;
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::HCA_BOARD_ID;

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let key = |d: &Device| {
        let kind = d.hca_type.clone()?;
        let ll = d
            .ports
            .first()
            .and_then(|p| p.link_layer.clone())
            .unwrap_or_default();
        Some(format!("{kind}, {} port(s), {ll}", d.ports.len()))
    };
    deviations(&ctx.snap.devices, key, |d| d.board_id.as_deref())
        .into_iter()
        .map(|(d, v, maj, group, peers)| {
            Finding::new(
                ID,
                Severity::Warn,
                Some(&d.name),
                None,
                json!({"board_id": v}),
                json!({"board_id": maj}),
                format!(
                    "{} has board id {v}, its {peers} peers ({group}) mostly {maj}: another part or an OEM variant with its own firmware line; confirm the part number against the node's bill of materials"
                    ,d.name
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
            d.board_id = Some("MT_0000000838".into());
        }
        s
    }

    #[test]
    fn one_board_id_across_peers_passes() {
        assert!(run(&node(), check).is_empty());
    }

    #[test]
    fn a_board_id_unlike_its_peers_warns() {
        let mut s = node();
        s.devices[2].board_id = Some("MT_0000000970".into());
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Warn, Some("mlx5_2".into()), None)]);
        assert_eq!(f[0].expected, json!({"board_id": "MT_0000000838"}));
    }

    #[test]
    fn a_storage_nic_of_another_shape_is_not_a_peer() {
        let mut s = node();
        s.devices[7].board_id = Some("MT_0000000359".into());
        let second = s.devices[7].ports[0].clone();
        s.devices[7].ports.push(second);
        assert!(run(&s, check).is_empty());
    }
}
