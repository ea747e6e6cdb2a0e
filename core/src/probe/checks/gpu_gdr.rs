//! `gpu.gdr`: GPUDirect RDMA has a path on a node with both GPUs and RDMA devices.
//!
//! GPUDirect RDMA needs either the peer-memory module (`nvidia_peermem`, or the older
//! `nv_peer_mem`; visible as `module/<name>` in sysfs when loaded) or dma-buf (Linux ≥ 5.12
//! with NVIDIA's open kernel module, which says "Open Kernel Module" in
//! `/proc/driver/nvidia/version`). Without either, NCCL silently stages through host memory.
//! Neither visible: `warn`; dma-buf only: `info`.

use serde_json::json;

use super::Ctx;
use crate::probe::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::GPU_GDR;

/// Whether a kernel release (`6.1.0-18-amd64`) is at least `major.minor`.
pub fn kernel_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty());
    let a: u32 = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let b: u32 = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (a, b) >= (major, minor)
}

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let s = ctx.snap;
    // GPUDirect RDMA through nvidia_peermem/dma-buf is NVIDIA's; AMD GPUs are not judged here.
    let nvidia = s
        .gpus
        .iter()
        .filter(|g| g.vendor == crate::probe::gather::GpuVendor::Nvidia)
        .count();
    if nvidia == 0 || s.devices.is_empty() {
        return Vec::new();
    }
    if let Some(why) = &s.modules_unreadable {
        return vec![Finding::new(
            ID,
            Severity::Info,
            None,
            None,
            json!({"modules": null}),
            json!("nvidia_peermem loaded, or dma-buf"),
            format!(
                "not verified: {why}, so the loaded modules (nvidia, nvidia_peermem) are unknown"
            ),
        )];
    }
    let peermem = ["nvidia_peermem", "nv_peer_mem"]
        .into_iter()
        .find(|m| s.modules.contains(*m));
    if peermem.is_some() {
        return Vec::new();
    }
    let f = |sev, observed, msg: String| {
        vec![Finding::new(
            ID,
            sev,
            None,
            None,
            observed,
            json!("nvidia_peermem loaded, or dma-buf"),
            msg,
        )]
    };
    if !s.modules.contains("nvidia") {
        return f(
            Severity::Warn,
            json!({"nvidia": false}),
            format!(
                "{nvidia} NVIDIA GPU(s) but the nvidia driver is not loaded; GPUDirect RDMA is impossible"
            ),
        );
    }
    let open = s
        .nvidia_proc_version
        .as_deref()
        .is_some_and(|v| v.contains("Open Kernel Module"));
    let kernel_ok = s
        .kernel_release
        .as_deref()
        .is_some_and(|k| kernel_at_least(k, 5, 12));
    if open && kernel_ok {
        return f(Severity::Info, json!({"peermem": false, "dma_buf": true}), "nvidia_peermem not loaded; GPUDirect RDMA relies on dma-buf (open kernel module, Linux ≥ 5.12)".to_string());
    }
    f(Severity::Warn, json!({"peermem": false, "dma_buf": false}), "no GPUDirect RDMA path: nvidia_peermem is not loaded and dma-buf needs the open kernel module on Linux ≥ 5.12; run modprobe nvidia_peermem".to_string())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::gather::Gpu;

    fn node(mods: &[&str]) -> crate::probe::gather::Snapshot {
        let mut s = ib_node(1);
        s.gpus = vec![Gpu::default()];
        s.modules = mods.iter().map(|m| m.to_string()).collect();
        s
    }

    #[test]
    fn peermem_loaded_passes() {
        assert!(run(&node(&["nvidia", "nvidia_peermem"]), check).is_empty());
    }

    #[test]
    fn no_peermem_and_no_dma_buf_warns() {
        let f = run(&node(&["nvidia"]), check);
        assert_eq!(brief(&f), [(Severity::Warn, None, None)]);
    }

    #[test]
    fn dma_buf_alone_is_said() {
        let mut s = node(&["nvidia"]);
        s.kernel_release = Some("6.1.0-18-amd64".into());
        s.nvidia_proc_version =
            Some("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15".into());
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Info, None, None)]);
    }

    #[test]
    fn unlistable_modules_are_not_verified_never_warned() {
        let mut s = node(&[]);
        s.modules_unreadable = Some("cannot list /x/module: denied".into());
        let f = run(&s, check);
        assert_eq!(brief(&f), [(Severity::Info, None, None)]);
        assert!(f[0].message.starts_with("not verified"));
    }

    #[test]
    fn kernel_versions_compare_numerically() {
        assert!(kernel_at_least("5.12.0", 5, 12));
        assert!(kernel_at_least("6.1.0-18-amd64", 5, 12));
        assert!(!kernel_at_least("5.4.0-150-generic", 5, 12));
    }

    #[test]
    fn a_node_without_gpus_is_not_judged() {
        assert!(run(&ib_node(1), check).is_empty());
    }
}
