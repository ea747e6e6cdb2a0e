//! `roce.ecn`: ECN (DCQCN) is enabled on the same priorities on every RoCE port.
//!
//! Reads mlx5 `class/net/<if>/ecn/roce_np/enable/<prio>` (notification point: send CNPs) and
//! `roce_rp/enable/<prio>` (reaction point: slow down on CNPs). A port with ECN off where its
//! peers have it on neither reacts to nor reports congestion, and hurts every flow it shares a
//! switch with. Zero-config: the enabled sets must match the group majority (fail). Config:
//! `ecn_priorities` must be enabled on both sides. Drivers that do not expose these files
//! (irdma/ice) are said as `info`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{Ctx, parity_deviations, where_};
use crate::probe::gather::Port;
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::ROCE_ECN;

type Sets = (BTreeSet<u8>, BTreeSet<u8>);

fn enabled(ctx: &Ctx<'_>, p: &Port) -> Option<Sets> {
    if !p.is_ethernet() {
        return None;
    }
    let nd = ctx.snap.netdevs.get(p.netdev.as_ref()?)?;
    let on = |m: &std::collections::BTreeMap<u8, bool>| {
        m.iter().filter(|(_, v)| **v).map(|(k, _)| *k).collect()
    };
    Some((on(nd.ecn_np.as_ref()?), on(nd.ecn_rp.as_ref()?)))
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
        let want = ctx.expect.expect(&d.name, |e| e.ecn_priorities.clone());
        for p in d.ports.iter().filter(|p| p.is_ethernet()) {
            match enabled(ctx, p) {
                None => out.push(Finding::new(
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
                    if p.netdev.is_none() {
                        format!(
                            "{}: no netdev found, so its ECN enables cannot be read; ECN is not verified",
                            where_(d, p)
                        )
                    } else {
                        format!(
                            "{}: ECN enables are not exposed in sysfs (driver {}); ECN is not verified",
                            where_(d, p),
                            d.driver.as_deref().unwrap_or("unknown")
                        )
                    },
                )),
                Some((np, rp)) => {
                    let Some(want) = &want else { continue };
                    let missing: BTreeSet<u8> = want
                        .iter()
                        .copied()
                        .filter(|q| !np.contains(q) || !rp.contains(q))
                        .collect();
                    if !missing.is_empty() {
                        out.push(Finding::new(
                            ID,
                            Severity::Fail,
                            Some(&d.name),
                            Some(p.num),
                            json!({"roce_np": np, "roce_rp": rp}),
                            json!({"priorities": want}),
                            format!("{}: ECN is off on priority {} (roce_np {}, roce_rp {}); the configuration expects it on", where_(d, p), show(&missing), show(&np), show(&rp)),
                        ));
                    }
                }
            }
        }
    }
    for (d, p, (np, rp), (mnp, mrp), peers) in parity_deviations(ctx.snap, |_, p| enabled(ctx, p)) {
        if ctx
            .expect
            .expect(&d.name, |e| e.ecn_priorities.clone())
            .is_some()
        {
            continue;
        }
        out.push(Finding::new(
            ID,
            Severity::Fail,
            Some(&d.name),
            Some(p.num),
            json!({"roce_np": np, "roce_rp": rp}),
            json!({"roce_np": mnp, "roce_rp": mrp}),
            format!(
                "{}: ECN enabled on priorities roce_np {} / roce_rp {}, its {peers} peers mostly {} / {}; write 1 to ecn/roce_np/enable/<prio> and roce_rp/enable/<prio>",
                where_(d, p), show(&np), show(&rp), show(&mnp), show(&mrp)
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
            let m: std::collections::BTreeMap<u8, bool> = (0..8).map(|q| (q, q == 3)).collect();
            nd.ecn_np = Some(m.clone());
            nd.ecn_rp = Some(m);
        }
        s
    }

    #[test]
    fn ecn_off_on_one_port_fails() {
        let mut s = node(8);
        s.netdevs
            .get_mut("eth5")
            .unwrap()
            .ecn_np
            .as_mut()
            .unwrap()
            .insert(3, false);
        let f = run(&s, check);
        assert_eq!(
            brief(&f),
            [(Severity::Fail, Some("mlx5_5".into()), Some(1))]
        );
    }

    #[test]
    fn equal_settings_pass() {
        assert!(run(&node(8), check).is_empty());
    }

    #[test]
    fn configured_priorities_must_be_on() {
        let e = expect(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_[0-7]\"\necn_priorities = [3, 4]\n",
        );
        assert_eq!(run_with(&node(2), &e, None, check).len(), 2);
    }

    #[test]
    fn unexposed_ecn_is_said_as_info() {
        let f = run(&roce_node(1), check);
        assert_eq!(
            brief(&f),
            [(Severity::Info, Some("mlx5_0".into()), Some(1))]
        );
    }
}
