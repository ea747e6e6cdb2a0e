//! `inventory.gone`: every HCA and GPU the node is known to have is still there.
//!
//! Compares the node's known inventory ([`crate::probe::known`]: recorded by its first whole
//! probe, replaced only by `fabric-check inventory accept`) with this run; without one, the
//! inventory of the baseline (the probe document saved in `--state-dir` as `last.json`, or
//! `--baseline FILE`; in a job, the prolog's snapshot). An HCA or GPU that was there and is gone
//! fell off the bus (a GPU's Xid 79, a NIC's PCIe link failure) or lost its driver — `fail`, with
//! no configured count needed, on every look until it is back. Devices are matched by PCI
//! address (a device gone renames the `mlx5_<n>` after it on the next boot), by name where the
//! address is unknown. New devices are not judged. A first probe (no baseline, no record), a
//! baseline of another node or one without an inventory says so as `info`; a device whose files
//! could not be read this run, or GPUs when `bus/pci/devices` could not be listed, are `info`
//! "not verified". Ignored devices (`ignore` in the configuration) are not compared.

use serde_json::json;

use super::Ctx;
use crate::probe::{Finding, Inventory, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::INVENTORY_GONE;

fn info(message: String) -> Finding {
    Finding::new(
        ID,
        Severity::Info,
        None,
        None,
        serde_json::Value::Null,
        serde_json::Value::Null,
        message,
    )
}

/// The inventory to compare with and how to name it, or the `info` that says why nothing is
/// compared.
fn compared_with<'a>(ctx: &Ctx<'a>) -> Result<(&'a Inventory, String), Box<Finding>> {
    if let Some(k) = ctx.known {
        return Ok((
            &k.inventory,
            format!("this node's known inventory ({})", k.provenance()),
        ));
    }
    let Some(base) = ctx.baseline else {
        return Err(Box::new(info(
            "first probe of this node (no known inventory or saved probe to compare with; pass --state-dir DIR): the HCA and GPU inventory is recorded for later runs to compare".into(),
        )));
    };
    if base.node != ctx.node {
        return Err(Box::new(info(format!(
            "not verified: the baseline is node {}'s, not {}'s; the inventory is not compared",
            base.node, ctx.node
        ))));
    }
    match &base.inventory {
        Some(was) => Ok((was, "this node's last saved probe".to_string())),
        None => Err(Box::new(info(
            "not verified: the baseline has no inventory (an older document); the next saved probe will have one".into(),
        ))),
    }
}

/// What to do when the change was made on purpose.
fn accept_hint(ctx: &Ctx<'_>) -> &'static str {
    if ctx.known.is_some() {
        "; if it was removed on purpose, run `fabric-check inventory accept` on the node"
    } else {
        ""
    }
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let (was, source) = match compared_with(ctx) {
        Ok(x) => x,
        Err(note) => return vec![*note],
    };
    let snap = ctx.snap;
    let mut out = Vec::new();
    for d in &was.devices {
        if ctx.expect.ignores(&d.name) {
            continue;
        }
        let here = snap.devices.iter().any(|n| match (&d.pci, &n.pci) {
            (Some(a), Some(b)) => a == b,
            _ => n.name == d.name,
        });
        if here {
            continue;
        }
        let at = d
            .pci
            .as_deref()
            .map_or(String::new(), |p| format!(" (PCI {p})"));
        let unread = snap
            .problems
            .iter()
            .any(|p| p.unreadable && p.device.as_deref() == Some(d.name.as_str()));
        if unread {
            out.push(Finding::new(
                ID,
                Severity::Info,
                Some(&d.name),
                None,
                json!({"present": null}),
                json!({"name": d.name, "pci": d.pci}),
                format!("not verified: {}{at} could not be read this run (see the finding naming the file)", d.name),
            ));
            continue;
        }
        out.push(Finding::new(
            ID,
            Severity::Fail,
            Some(&d.name),
            None,
            json!({"present": false}),
            json!({"name": d.name, "pci": d.pci, "hca_type": d.hca_type}),
            format!(
                "HCA {}{at} was in {source} and is gone: it fell off the PCIe bus or its driver did not bind; check `dmesg` for PCIe/AER or mlx5 errors, then reseat or replace the card{}",
                d.name,
                accept_hint(ctx)
            ),
        ));
    }
    if !was.gpus.is_empty() {
        if let Some(why) = &snap.gpus_unreadable {
            out.push(info(format!(
                "not verified: {why}, so the {} GPU(s) of {source} are not compared",
                was.gpus.len()
            )));
            return out;
        }
        for g in &was.gpus {
            if snap.gpus.iter().any(|n| n.pci == g.pci) {
                continue;
            }
            let model = g.model.as_deref().unwrap_or(g.device_id.as_str());
            out.push(Finding::new(
                ID,
                Severity::Fail,
                Some(&g.pci),
                None,
                json!({"present": false}),
                json!({"pci": g.pci, "model": model}),
                format!(
                    "GPU {} ({model}) was in {source} and is gone from the PCIe bus: look for Xid 79 (\"fallen off the bus\") in `dmesg`, then reset or replace the GPU{}",
                    g.pci,
                    accept_hint(ctx)
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
    use crate::probe::gather::{Gpu, Problem, Snapshot};
    use crate::probe::{Baseline, CounterSnapshot, Inventory, SCHEMA};

    fn node() -> Snapshot {
        let mut s = ib_node(4);
        for (i, d) in s.devices.iter_mut().enumerate() {
            d.pci = Some(format!("0000:{:02x}:00.0", 0x12 + i));
        }
        s.gpus = (0..4)
            .map(|i| Gpu {
                pci: format!("0000:{:02x}:00.0", 0x19 + i),
                device_id: "0x2330".into(),
                model: Some("H100-SXM5-80GB"),
                ..Gpu::default()
            })
            .collect();
        s
    }

    fn saved(s: &Snapshot, node: &str) -> Baseline {
        Baseline {
            schema: SCHEMA.into(),
            node: node.into(),
            counters: CounterSnapshot::from_snapshot(s),
            inventory: Some(Inventory::from_snapshot(s)),
        }
    }

    fn run_against(now: &Snapshot, base: &Baseline) -> Vec<Finding> {
        run_with(now, &Default::default(), Some(base), check)
    }

    #[test]
    fn the_same_devices_as_last_time_pass() {
        let s = node();
        assert!(run_against(&s, &saved(&s, "n1")).is_empty());
    }

    #[test]
    fn a_gpu_gone_since_the_last_saved_probe_fails_without_a_configured_count() {
        let before = node();
        let mut now = node();
        now.gpus.remove(2);
        let f = run_against(&now, &saved(&before, "n1"));
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("0000:1b:00.0".into()), None)]
        );
        assert!(f[0].message.contains("Xid 79"), "{}", f[0].message);
    }

    #[test]
    fn an_hca_gone_is_found_by_pci_address_even_when_the_names_after_it_shift() {
        let before = node();
        let mut now = node();
        now.devices.remove(1);
        for (i, d) in now.devices.iter_mut().enumerate() {
            d.name = format!("mlx5_{i}");
        }
        let f = run_against(&now, &saved(&before, "n1"));
        assert_eq!(brief(&f), [(Severity::Fail, Some("mlx5_1".into()), None)]);
        assert!(f[0].message.contains("0000:13:00.0"), "{}", f[0].message);
    }

    #[test]
    fn a_first_probe_says_it_has_nothing_to_compare_and_does_not_fail() {
        let f = run(&node(), check);
        assert_eq!(brief(&f), [(Severity::Info, None, None)]);
        assert!(f[0].message.starts_with("first probe"), "{}", f[0].message);
    }

    #[test]
    fn another_nodes_baseline_or_one_without_inventory_is_not_compared() {
        let s = node();
        let f = run_against(&s, &saved(&s, "n2"));
        assert_eq!(brief(&f), [(Severity::Info, None, None)]);
        let mut b = saved(&s, "n1");
        b.inventory = None;
        assert_eq!(brief(&run_against(&s, &b)), [(Severity::Info, None, None)]);
    }

    #[test]
    fn a_device_that_could_not_be_read_is_not_verified_rather_than_gone() {
        let before = node();
        let mut now = node();
        now.devices.remove(3);
        now.problems.push(Problem {
            check: "ib.port_count",
            device: Some("mlx5_3".into()),
            port: None,
            path: "/sys/class/infiniband/mlx5_3".into(),
            message: "cannot resolve".into(),
            unreadable: true,
        });
        let f = run_against(&now, &saved(&before, "n1"));
        assert_eq!(brief(&f), [(Severity::Info, Some("mlx5_3".into()), None)]);
    }

    #[test]
    fn unlisted_gpus_are_not_verified_rather_than_gone() {
        let before = node();
        let mut now = node();
        now.gpus.clear();
        now.gpus_unreadable = Some("cannot list /sys/bus/pci/devices: denied".into());
        let f = run_against(&now, &saved(&before, "n1"));
        assert_eq!(brief(&f), [(Severity::Info, None, None)]);
    }

    #[test]
    fn a_gpu_gone_from_the_known_inventory_fails_though_the_last_probe_lacked_it_too() {
        let before = node();
        let mut now = node();
        now.gpus.remove(1);
        let k = known_of(&before);
        // The last saved probe already lacks it: alone, it would pass.
        assert!(run_against(&now, &saved(&now, "n1")).is_empty());
        let f = run_known(&now, &k, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("0000:1a:00.0".into()), None)]
        );
        assert!(f[0].message.contains("known inventory"), "{}", f[0].message);
        assert!(
            f[0].message.contains("inventory accept"),
            "{}",
            f[0].message
        );
    }
}
