//! `ib.port_count`: the node has as many RDMA ports as the configuration says.
//!
//! Counts the ports under `class/infiniband/<dev>/ports/` of the devices a `[[node.ports]]`
//! rule names (and of its `link_layer`, when given) against the rule's `count`. A missing HCA
//! (fallen off the bus, driver not bound) shows here. Devices whose class entry cannot be
//! resolved (a symlink loop) are reported by the gather step under this id as `info`; when such
//! an entry may be one of the missing ports, the count is "not verified" instead of failed.

use serde_json::json;

use super::Ctx;
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::IB_PORT_COUNT;

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    if ctx.snap.devices.is_empty() && ctx.expect.ports.iter().all(|r| r.expect.count.is_none()) {
        out.push(Finding::new(
            ID,
            Severity::Info,
            None,
            None,
            json!({"count": 0}),
            serde_json::Value::Null,
            "no RDMA devices under class/infiniband (driver not loaded, or not an RDMA node); nothing to judge".to_string(),
        ));
    }
    for rule in &ctx.expect.ports {
        let Some(want) = rule.expect.count else {
            continue;
        };
        let ports: Vec<String> = ctx
            .snap
            .devices
            .iter()
            .filter(|d| rule.devices.matches(&d.name))
            .flat_map(|d| {
                d.ports
                    .iter()
                    .filter(|p| match &rule.expect.link_layer {
                        Some(ll) => p.link_layer.as_ref() == Some(ll),
                        None => true,
                    })
                    .map(move |p| format!("{}/{}", d.name, p.num))
            })
            .collect();
        let unread: Vec<String> = ctx
            .snap
            .problems
            .iter()
            .filter(|p| p.unreadable && p.check == ID)
            .filter(|p| p.device.as_ref().is_none_or(|d| rule.devices.matches(d)))
            .map(|p| p.path.display().to_string())
            .collect();
        if (ports.len() as u32) < want && !unread.is_empty() {
            out.push(Finding::new(
                ID,
                Severity::Info,
                None,
                None,
                json!({"count": ports.len(), "ports": ports, "unreadable": unread}),
                json!({"count": want, "devices": rule.devices.as_str()}),
                format!(
                    "not verified: {} port(s) counted on devices {}, the configuration expects {want}, but {} could not be read",
                    ports.len(),
                    rule.devices,
                    unread.join(", ")
                ),
            ));
            continue;
        }
        if ports.len() as u32 != want {
            let ll = rule
                .expect
                .link_layer
                .as_deref()
                .map(|l| format!(" {l}"))
                .unwrap_or_default();
            out.push(Finding::new(
                ID,
                Severity::Fail,
                None,
                None,
                json!({"count": ports.len(), "ports": ports}),
                json!({"count": want, "devices": rule.devices.as_str()}),
                format!(
                    "{} {} port(s) on devices {}; the configuration expects {want} (check that every HCA is seated and its driver bound: lspci, dmesg)",
                    ports.len(),
                    ll.trim(),
                    rule.devices
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
    fn a_missing_hca_fails_the_count() {
        let s = ib_node(7);
        let e = expect(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_[0-7]\"\nlink_layer = \"InfiniBand\"\ncount = 8\n",
        );
        let f = run_with(&s, &e, None, check);
        assert_eq!(brief(&f), [(Severity::Fail, None, None)]);
        assert_eq!(f[0].observed["count"], 7);
    }

    #[test]
    fn a_node_without_rdma_devices_is_said() {
        let f = run(&crate::probe::gather::Snapshot::default(), check);
        assert_eq!(brief(&f), [(Severity::Info, None, None)]);
    }

    #[test]
    fn the_right_count_passes() {
        let e = expect(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_[0-7]\"\ncount = 8\n",
        );
        assert!(run_with(&ib_node(8), &e, None, check).is_empty());
    }

    #[test]
    fn ports_of_another_link_layer_do_not_count() {
        let mut s = ib_node(8);
        s.devices[0].ports[0].link_layer = Some("Ethernet".into());
        let e = expect(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_[0-7]\"\nlink_layer = \"InfiniBand\"\ncount = 8\n",
        );
        assert_eq!(run_with(&s, &e, None, check).len(), 1);
    }
}
