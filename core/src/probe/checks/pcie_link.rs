//! `pcie.link`: every HCA and GPU trained its PCIe link as wide and as fast as its peers.
//!
//! Reads `class/infiniband/<dev>/device/{current,max}_link_{speed,width}` (the PCI function of
//! the HCA) and `bus/pci/devices/<bdf>/{current,max}_link_{speed,width}` of each GPU. A NIC
//! trained at x8 of x16, or one generation low, has lost half its bandwidth while every port
//! reads ACTIVE at full rate.
//!
//! Each link is judged against the lower of its own maximum and its slot's: the upstream port's
//! `max_link_speed` and `max_link_width` (`bus/pci/devices/<bridge>/`), so a Gen5 card in a
//! slot wired for Gen4 is at its maximum at 16 GT/s. HCAs are peers of the same type in the
//! same role on the node ([`super::Role`]: compute rails under a GPU's switch, or the others).
//!
//! Verdicts, as an admin reads them:
//! - below its own maximum **and** below its peers' majority (same HCA type, or same GPU
//!   device id): `fail` — the same part in the same node trained better elsewhere, so this
//!   slot, riser, card or cable is at fault;
//! - below its peers but at its own maximum: `warn` — a lesser part (or one that reports a
//!   lower capability) among its peers;
//! - below its peers but at the most its slot allows: `info` — the platform's wiring;
//! - below its own maximum but not below its peers (all peers alike, or no peer): `info` —
//!   that is most often the platform (slot wiring, bifurcation, a BIOS PCIe generation
//!   setting), which a per-node verdict cannot tell from a fault.
//!
//! GPUs are judged on width only: NVIDIA and AMD GPUs lower their link speed when idle (power
//! management; an idle H100 reads `2.5 GT/s PCIe`), so a GPU's current speed says nothing.
//! Missing files or `Unknown` are `info` "not verified", never a failure; devices without a
//! PCI function (`rxe`, `siw`) are not judged.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Ctx, majority, role};
use crate::probe::gather::PcieLink;
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::PCIE_LINK;

/// One device's link, as the check sees it.
struct Member<'a> {
    /// Finding subject: the HCA name or the GPU's PCI address.
    subject: &'a str,
    /// `mlx5_3` or `GPU 0000:19:00.0`.
    label: String,
    link: PcieLink,
    /// Whether the speed is judged (HCAs: yes; GPUs: no).
    speed_judged: bool,
}

fn mts(gts: f64) -> u64 {
    (gts * 1000.0).round() as u64
}

fn gts_text(mts: u64) -> String {
    format!("{} GT/s", mts as f64 / 1000.0)
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut groups: BTreeMap<String, Vec<Member<'_>>> = BTreeMap::new();
    for d in &ctx.snap.devices {
        if d.pci.is_none() && d.pcie.is_absent() {
            continue;
        }
        let kind = d
            .hca_type
            .clone()
            .or_else(|| d.driver.clone())
            .unwrap_or_default();
        groups
            .entry(format!("hca {kind} {:?}", role(ctx.snap, d)))
            .or_default()
            .push(Member {
                subject: &d.name,
                label: d.name.clone(),
                link: d.pcie,
                speed_judged: true,
            });
    }
    for g in &ctx.snap.gpus {
        groups
            .entry(format!("gpu {:?} {}", g.vendor, g.device_id))
            .or_default()
            .push(Member {
                subject: &g.pci,
                label: format!("GPU {}", g.pci),
                link: g.pcie,
                speed_judged: false,
            });
    }
    let mut out = Vec::new();
    for members in groups.values() {
        judge_group(members, &mut out);
    }
    out
}

fn judge_group(members: &[Member<'_>], out: &mut Vec<Finding>) {
    let maj_width = majority(members.iter().filter_map(|m| m.link.cur_width))
        .filter(|_| {
            members
                .iter()
                .filter(|m| m.link.cur_width.is_some())
                .count()
                >= 2
        })
        .map(|x| x.0);
    let maj_mts = majority(
        members
            .iter()
            .filter_map(|m| m.link.cur_gts.map(mts))
            .collect::<Vec<_>>(),
    )
    .filter(|_| members.iter().filter(|m| m.link.cur_gts.is_some()).count() >= 2)
    .map(|x| x.0);
    let peers = members.len().saturating_sub(1);
    for m in members {
        let l = m.link;
        let (Some(cw), Some(xw)) = (l.cur_width, l.max_width) else {
            out.push(not_verified(m));
            continue;
        };
        let speed = if m.speed_judged {
            match (l.cur_gts.map(mts), l.max_gts.map(mts)) {
                (Some(c), Some(x)) => Some((c, x)),
                _ => {
                    out.push(not_verified(m));
                    continue;
                }
            }
        } else {
            None
        };
        let mut lost = Vec::new();
        let mut below_max = false;
        let mut below_both = false;
        // Below its peers but at the most its part *and* its slot allow: the part's own
        // maximum is the lower (a lesser part, `warn`) or the slot's is (the platform, `info`).
        let mut lesser_part = false;
        let mut slot_bound = false;
        let slot_w = l.slot_max_width.filter(|s| *s < xw);
        let eff_xw = slot_w.unwrap_or(xw);
        let w_max = cw < eff_xw;
        let w_peers = maj_width.is_some_and(|p| cw < p);
        if w_max || w_peers {
            lost.push(format!(
                "width x{cw} of x{xw}{}{}",
                slot_w.map_or(String::new(), |s| format!(" (its slot x{s})")),
                maj_width.map_or(String::new(), |p| format!(", peers x{p}"))
            ));
        }
        below_max |= w_max;
        below_both |= w_max && w_peers;
        lesser_part |= w_peers && !w_max && slot_w.is_none();
        slot_bound |= w_peers && !w_max && slot_w.is_some();
        if let Some((c, x)) = speed {
            let slot_s = l.slot_max_gts.map(mts).filter(|s| *s < x);
            let s_max = c < slot_s.unwrap_or(x);
            let s_peers = maj_mts.is_some_and(|p| c < p);
            if s_max || s_peers {
                lost.push(format!(
                    "speed {} of {}{}{}",
                    gts_text(c),
                    gts_text(x),
                    slot_s.map_or(String::new(), |s| format!(" (its slot {})", gts_text(s))),
                    maj_mts.map_or(String::new(), |p| format!(", peers {}", gts_text(p)))
                ));
            }
            below_max |= s_max;
            below_both |= s_max && s_peers;
            lesser_part |= s_peers && !s_max && slot_s.is_none();
            slot_bound |= s_peers && !s_max && slot_s.is_some();
        }
        if lost.is_empty() {
            continue;
        }
        let observed = json!({
            "speed_gts": l.cur_gts, "width": cw,
            "max_speed_gts": l.max_gts, "max_width": xw,
            "slot_max_speed_gts": l.slot_max_gts, "slot_max_width": l.slot_max_width,
        });
        let expected = json!({
            "speed_gts": if m.speed_judged { maj_mts.map(|v| v as f64 / 1000.0) } else { None },
            "width": maj_width,
        });
        let what = lost.join("; ");
        let (severity, message) = if below_both {
            (
                Severity::Fail,
                format!(
                    "{} PCIe link trained low ({what}): the same part trains better in this node, so this one moves a fraction of its bandwidth while its ports read ACTIVE; reseat the card or check its slot, riser and retimer, then reboot",
                    m.label
                ),
            )
        } else if lesser_part {
            (
                Severity::Warn,
                format!(
                    "{} PCIe link is below its {peers} peers' ({what}) but at its own maximum: a lesser part or slot than its peers; check the part number (hca.board_id) and the slot",
                    m.label
                ),
            )
        } else if slot_bound && !below_max {
            (
                Severity::Info,
                format!(
                    "{} PCIe link is below its {peers} peers' ({what}) but at the most its slot allows (the upstream port's max_link_speed/max_link_width): the platform's wiring, not a fault",
                    m.label
                ),
            )
        } else {
            debug_assert!(below_max || slot_bound);
            (
                Severity::Info,
                format!(
                    "{} PCIe link is below its own maximum ({what}) like its peers, or without peers to compare: most often the platform (slot wiring, bifurcation, BIOS PCIe generation); not judged",
                    m.label
                ),
            )
        };
        out.push(Finding::new(
            ID,
            severity,
            Some(m.subject),
            None,
            observed,
            expected,
            message,
        ));
    }
}

fn not_verified(m: &Member<'_>) -> Finding {
    Finding::new(
        ID,
        Severity::Info,
        Some(m.subject),
        None,
        json!({
            "speed_gts": m.link.cur_gts, "width": m.link.cur_width,
            "max_speed_gts": m.link.max_gts, "max_width": m.link.max_width,
        }),
        serde_json::Value::Null,
        format!(
            "not verified: {}'s PCIe link files (current_link_speed, current_link_width, max_link_speed, max_link_width) are missing or read Unknown",
            m.label
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::gather::{Gpu, Snapshot};

    fn gen5_x16() -> PcieLink {
        PcieLink {
            cur_gts: Some(32.0),
            cur_width: Some(16),
            max_gts: Some(32.0),
            max_width: Some(16),
            ..PcieLink::default()
        }
    }

    fn node() -> Snapshot {
        let mut s = ib_node(8);
        for d in &mut s.devices {
            d.pci = Some(format!("0000:{}:00.0", d.name.len()));
            d.pcie = gen5_x16();
        }
        s.gpus = (0..8)
            .map(|i| Gpu {
                pci: format!("0000:{:02x}:00.0", 0x19 + i),
                device_id: "0x2330".into(),
                pcie: gen5_x16(),
                ..Gpu::default()
            })
            .collect();
        s
    }

    #[test]
    fn a_node_whose_links_all_trained_fully_passes() {
        assert!(run(&node(), check).is_empty());
    }

    #[test]
    fn a_nic_trained_at_x8_of_x16_among_x16_peers_fails() {
        let mut s = node();
        s.devices[3].pcie.cur_width = Some(8);
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Fail, Some("mlx5_3".into()), None)]);
        assert!(
            f[0].message.contains("width x8 of x16, peers x16"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].expected["width"], json!(16));
    }

    #[test]
    fn a_nic_one_generation_low_among_full_speed_peers_fails() {
        let mut s = node();
        s.devices[6].pcie.cur_gts = Some(16.0);
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Fail, Some("mlx5_6".into()), None)]);
        assert!(
            f[0].message.contains("speed 16 GT/s of 32 GT/s"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn every_nic_below_its_maximum_alike_is_a_platform_limit_and_only_info() {
        let mut s = node();
        for d in &mut s.devices {
            d.pcie.cur_width = Some(8);
        }
        let f = run(&s, check);
        assert_eq!(f.len(), 8);
        assert!(f.iter().all(|f| f.severity == Severity::Info));
    }

    #[test]
    fn a_lesser_part_at_its_own_maximum_below_its_peers_warns() {
        let mut s = node();
        s.devices[2].pcie.cur_gts = Some(16.0);
        s.devices[2].pcie.max_gts = Some(16.0);
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Warn, Some("mlx5_2".into()), None)]);
    }

    #[test]
    fn an_idle_gpu_at_low_speed_is_not_judged_but_a_narrow_gpu_fails() {
        let mut s = node();
        s.gpus[1].pcie.cur_gts = Some(2.5);
        assert!(run(&s, check).is_empty());
        s.gpus[5].pcie.cur_width = Some(4);
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("0000:1e:00.0".into()), None)]
        );
    }

    #[test]
    fn unknown_link_files_are_not_verified_never_a_failure() {
        let mut s = node();
        s.devices[0].pcie = PcieLink {
            cur_width: Some(16),
            max_width: Some(16),
            ..PcieLink::default()
        };
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Info, Some("mlx5_0".into()), None)]);
        assert!(f[0].message.starts_with("not verified"));
    }

    #[test]
    fn a_device_without_a_pci_function_is_not_judged() {
        let mut s = node();
        s.devices[0].pci = None;
        s.devices[0].pcie = PcieLink::default();
        assert!(run(&s, check).is_empty());
    }

    #[test]
    fn a_lone_nic_below_its_maximum_is_only_info() {
        let mut s = ib_node(1);
        s.devices[0].pci = Some("0000:12:00.0".into());
        s.devices[0].pcie = gen5_x16();
        s.devices[0].pcie.cur_width = Some(8);
        assert_eq!(
            brief(&run(&s, check)),
            [(Severity::Info, Some("mlx5_0".into()), None)]
        );
    }

    #[test]
    fn a_gen5_card_in_a_slot_wired_for_gen4_is_the_platform_not_a_fault() {
        let mut s = node();
        s.devices[4].pcie.cur_gts = Some(16.0);
        s.devices[4].pcie.slot_max_gts = Some(16.0);
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Info, Some("mlx5_4".into()), None)]);
        assert!(f[0].message.contains("its slot allows"), "{}", f[0].message);
    }

    #[test]
    fn a_card_trained_below_its_gen5_slot_still_fails() {
        let mut s = node();
        s.devices[4].pcie.cur_gts = Some(16.0);
        s.devices[4].pcie.slot_max_gts = Some(32.0);
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Fail, Some("mlx5_4".into()), None)]);
    }

    #[test]
    fn a_card_in_an_x8_slot_is_judged_against_the_slot_width() {
        let mut s = node();
        s.devices[1].pcie.cur_width = Some(8);
        s.devices[1].pcie.slot_max_width = Some(8);
        assert_eq!(brief(&run(&s, check))[0].0, Severity::Info);
        s.devices[1].pcie.cur_width = Some(4);
        assert_eq!(brief(&run(&s, check))[0].0, Severity::Fail);
    }
}
