//! `roce.pfc`: PFC (802.1Qbb) is enabled on the same priorities on every RoCE port.
//!
//! PFC configuration is not in sysfs: it is read from `dcb pfc show dev <if>` (iproute2's DCB
//! netlink client, run by absolute path with a timeout) or its saved output. A port without PFC
//! on the lossless priority its peers use drops instead of pausing: retransmissions and
//! slow collectives. Zero-config: the enabled set must match the group majority (fail).
//! Config: `pfc_priorities` is the exact set. When the tool or its data is missing, `info`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{Ctx, parity_deviations, where_};
use crate::probe::gather::Port;
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::ROCE_PFC;

fn pfc(ctx: &Ctx<'_>, p: &Port) -> Option<BTreeSet<u8>> {
    if !p.is_ethernet() {
        return None;
    }
    ctx.snap.netdevs.get(p.netdev.as_ref()?)?.pfc.clone()
}

fn show(s: &BTreeSet<u8>) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
    }
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in &ctx.snap.devices {
        let want: Option<BTreeSet<u8>> = ctx
            .expect
            .expect(&d.name, |e| e.pfc_priorities.clone())
            .map(|v| v.into_iter().collect());
        for p in d.ports.iter().filter(|p| p.is_ethernet()) {
            match pfc(ctx, p) {
                None => {
                    let note = p
                        .netdev
                        .as_ref()
                        .and_then(|n| ctx.snap.netdevs.get(n))
                        .and_then(|n| n.tool_note.clone())
                        .unwrap_or_else(|| "no netdev".into());
                    out.push(Finding::new(
                        ID,
                        if want.is_some() {
                            Severity::Warn
                        } else {
                            Severity::Info
                        },
                        Some(&d.name),
                        Some(p.num),
                        Value::Null,
                        json!(want),
                        format!(
                            "{}: PFC configuration not read ({note}); PFC is not verified",
                            where_(d, p)
                        ),
                    ));
                }
                Some(on) => {
                    if let Some(w) = &want
                        && *w != on
                    {
                        out.push(Finding::new(
                            ID,
                            Severity::Fail,
                            Some(&d.name),
                            Some(p.num),
                            json!({"priorities": on}),
                            json!({"priorities": w}),
                            format!("{}: PFC on priorities {}; the configuration expects {} (dcb pfc set dev {} prio-pfc ...)", where_(d, p), show(&on), show(w), p.netdev.as_deref().unwrap_or("?")),
                        ));
                    }
                }
            }
        }
    }
    for (d, p, on, maj, peers) in parity_deviations(ctx.snap, |_, p| pfc(ctx, p)) {
        if ctx
            .expect
            .expect(&d.name, |e| e.pfc_priorities.clone())
            .is_some()
        {
            continue;
        }
        out.push(Finding::new(
            ID,
            Severity::Fail,
            Some(&d.name),
            Some(p.num),
            json!({"priorities": on}),
            json!({"priorities": maj}),
            format!(
                "{}: PFC on priorities {}, its {peers} peers mostly on {}",
                where_(d, p),
                show(&on),
                show(&maj)
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn node(n: usize) -> crate::probe::gather::Snapshot {
        let mut s = roce_node(n);
        for nd in s.netdevs.values_mut() {
            nd.pfc = Some([3].into());
        }
        s
    }

    #[test]
    fn pfc_off_on_one_port_fails() {
        let mut s = node(8);
        s.netdevs.get_mut("eth6").unwrap().pfc = Some(BTreeSet::new());
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_6".into()), Some(1))]
        );
    }

    #[test]
    fn equal_settings_pass() {
        assert!(run(&node(8), check).is_empty());
    }

    #[test]
    fn the_configured_set_is_exact() {
        let e = expect(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_[0-1]\"\npfc_priorities = [3, 4]\n",
        );
        assert_eq!(run_with(&node(2), &e, None, check).len(), 2);
    }

    #[test]
    fn missing_tool_data_is_said() {
        let mut s = roce_node(1);
        s.netdevs.get_mut("eth0").unwrap().tool_note = Some("dcb not found".into());
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Info, Some("mlx5_0".into()), Some(1))]
        );
        assert!(f[0].message.contains("dcb not found"));
    }
}
