//! `gpu.count`: the node shows as many NVIDIA GPUs as the configuration says.
//!
//! Counts PCI functions with vendor `0x10de` and class `0x0300xx`/`0x0302xx` under
//! `bus/pci/devices/` (sysfs-bus-pci). A GPU that fell off the bus disappears here before any
//! job notices. Needs `gpus` in a `[[node]]` block; without it the GPUs are only inventoried.
//! When `bus/pci/devices/` cannot be listed the count is `info` "not verified", never a fail.

use serde_json::json;

use super::Ctx;
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::GPU_COUNT;

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let Some(want) = ctx.expect.gpus else {
        return Vec::new();
    };
    if let Some(why) = &ctx.snap.gpus_unreadable {
        return vec![Finding::new(
            ID,
            Severity::Info,
            None,
            None,
            json!({"gpus": null}),
            json!({"gpus": want}),
            format!("not verified: {why}, so the GPUs cannot be counted"),
        )];
    }
    let n = ctx.snap.gpus.len() as u32;
    if n == want {
        return Vec::new();
    }
    vec![Finding::new(
        ID,
        Severity::Fail,
        None,
        None,
        json!({"gpus": n, "pci": ctx.snap.gpus.iter().map(|g| g.pci.clone()).collect::<Vec<_>>()}),
        json!({"gpus": want}),
        format!(
            "{n} NVIDIA GPU(s) on the PCI bus; the configuration expects {want} (check dmesg for Xid 79 \"fallen off the bus\")"
        ),
    )]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::gather::Gpu;

    #[test]
    fn a_missing_gpu_fails() {
        let mut s = ib_node(1);
        s.gpus = (0..7)
            .map(|i| Gpu {
                pci: format!("0000:{i:02x}:00.0"),
                ..Gpu::default()
            })
            .collect();
        let e = expect("[[node]]\nmatch = \"n1\"\ngpus = 8\n");
        let f = run_with(&s, &e, None, check);
        assert_eq!(brief(&f), [(Severity::Fail, None, None)]);
        s.gpus.push(Gpu::default());
        assert!(run_with(&s, &e, None, check).is_empty());
    }

    #[test]
    fn an_unlistable_pci_bus_is_not_verified_never_failed() {
        let mut s = ib_node(1);
        s.gpus_unreadable = Some("cannot list /x/bus/pci/devices: denied".into());
        let e = expect("[[node]]\nmatch = \"n1\"\ngpus = 8\n");
        let f = run_with(&s, &e, None, check);
        assert_eq!(brief(&f), [(Severity::Info, None, None)]);
        assert!(f[0].message.contains("not verified"));
    }

    #[test]
    fn without_configuration_nothing_is_judged() {
        assert!(run(&ib_node(1), check).is_empty());
    }
}
