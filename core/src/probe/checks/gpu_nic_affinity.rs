//! `gpu.nic_affinity`: each GPU has an RDMA NIC close to it.
//!
//! From the resolved PCI paths (`devices/pci0000:xx/<root port>/<switch>/...`) and
//! `numa_node`: a GPU sharing a PCIe switch with an RDMA NIC can use GPUDirect RDMA at full
//! speed (NCCL's PIX/PXB paths); one that only shares a NUMA node crosses the CPU's root complex
//! (PHB/NODE: said as `info`); one with neither crosses the inter-socket link (SYS), which
//! halves bandwidth: `warn`. A GPU whose NUMA node is unknown (unreadable, or `-1` on a machine
//! without NUMA information) is `info` "not verified". `device` is the GPU's PCI address.

use serde_json::json;

use super::Ctx;
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::GPU_NIC_AFFINITY;

/// Whether two PCI paths share a switch: a common ancestor below the root port.
pub fn same_switch(a: &[String], b: &[String]) -> bool {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    common >= 2 && common < a.len() && common < b.len()
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let nics: Vec<_> = ctx
        .snap
        .devices
        .iter()
        .filter(|d| !d.pci_path.is_empty())
        .collect();
    if nics.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for g in &ctx.snap.gpus {
        if nics.iter().any(|n| same_switch(&g.pci_path, &n.pci_path)) {
            continue;
        }
        let near: Vec<&str> = nics
            .iter()
            .filter(|n| {
                n.numa_node.is_some() && n.numa_node == g.numa_node && g.numa_node != Some(-1)
            })
            .map(|n| n.name.as_str())
            .collect();
        let model = g.model.unwrap_or("GPU");
        let numa_unknown = matches!(g.numa_node, None | Some(-1));
        let (sev, msg) = if near.is_empty() && numa_unknown {
            (
                Severity::Info,
                format!(
                    "{model} {}: not verified: no RDMA NIC under its PCIe switch and its NUMA node is unknown (numa_node {}), so whether its traffic crosses sockets cannot be told",
                    g.pci,
                    g.numa_node
                        .map_or("unreadable".to_string(), |n| n.to_string())
                ),
            )
        } else if near.is_empty() {
            (
                Severity::Warn,
                format!(
                    "{model} {} (NUMA {}) has no RDMA NIC under its PCIe switch or on its NUMA node; its traffic crosses sockets",
                    g.pci,
                    g.numa_node.unwrap_or(-1)
                ),
            )
        } else {
            (
                Severity::Info,
                format!(
                    "{model} {} has no RDMA NIC under its PCIe switch; nearest on NUMA {}: {}",
                    g.pci,
                    g.numa_node.unwrap_or(-1),
                    near.join(", ")
                ),
            )
        };
        out.push(Finding::new(
            ID,
            sev,
            Some(&g.pci),
            None,
            json!({"numa_node": g.numa_node, "same_numa_nics": near}),
            json!("an RDMA NIC under the same PCIe switch"),
            msg,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::gather::Gpu;

    fn path(s: &str) -> Vec<String> {
        s.split('/').map(str::to_string).collect()
    }

    fn node(gpu_path: &str, gpu_numa: i32) -> crate::probe::gather::Snapshot {
        let mut s = ib_node(1);
        s.devices[0].pci_path = path("0000:00:01.0/0000:10:00.0/0000:11:00.0/0000:12:00.0");
        s.devices[0].numa_node = Some(0);
        s.gpus = vec![Gpu {
            pci: gpu_path.rsplit('/').next().unwrap().into(),
            pci_path: path(gpu_path),
            numa_node: Some(gpu_numa),
            ..Gpu::default()
        }];
        s
    }

    #[test]
    fn a_gpu_under_the_nics_switch_passes() {
        assert!(
            run(
                &node("0000:00:01.0/0000:10:00.0/0000:11:01.0/0000:13:00.0", 0),
                check
            )
            .is_empty()
        );
    }

    #[test]
    fn a_gpu_only_on_the_same_numa_node_is_said() {
        let f = run(
            &node("0000:00:02.0/0000:20:00.0/0000:21:01.0/0000:23:00.0", 0),
            check,
        );
        assert_eq!(
            brief(&f),
            [(Severity::Info, Some("0000:23:00.0".into()), None)]
        );
    }

    #[test]
    fn a_gpu_whose_numa_node_is_unknown_is_not_verified_never_warned() {
        let f = run(
            &node("0000:80:02.0/0000:a0:00.0/0000:a1:01.0/0000:a3:00.0", -1),
            check,
        );
        assert_eq!(
            brief(&f),
            [(Severity::Info, Some("0000:a3:00.0".into()), None)]
        );
        assert!(f[0].message.contains("not verified"), "{}", f[0].message);
    }

    #[test]
    fn a_gpu_on_another_socket_warns() {
        let f = run(
            &node("0000:80:02.0/0000:a0:00.0/0000:a1:01.0/0000:a3:00.0", 1),
            check,
        );
        assert_eq!(
            brief(&f),
            [(Severity::Warn, Some("0000:a3:00.0".into()), None)]
        );
    }

    #[test]
    fn sharing_only_a_root_port_is_not_a_switch() {
        assert!(!same_switch(&path("a/b"), &path("a/c")));
        assert!(same_switch(&path("a/b/c"), &path("a/b/d")));
    }
}
