//! `ib.link_layer`: ports use the link layer the configuration names.
//!
//! Reads `ports/<n>/link_layer` (`InfiniBand` or `Ethernet`). Peer groups already separate link
//! layers, so zero-config cannot tell a VPI card flipped to Ethernet from a storage port; this
//! check needs `link_layer` in a `[[node.ports]]` rule.

use serde_json::json;

use super::{Ctx, where_};
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::IB_LINK_LAYER;

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
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

    #[test]
    fn without_configuration_nothing_is_judged() {
        let mut s = ib_node(2);
        s.devices[1].ports[0].link_layer = Some("Ethernet".into());
        assert!(run(&s, check).is_empty());
    }
}
