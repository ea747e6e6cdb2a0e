//! RDMA verbs loopback (feature `verbs`, rdma-sys 0.3): the start of a perftest-like RC
//! queue-pair loopback per HCA.
//!
//! What works: the feature builds and links libibverbs (rdma-sys's build script needs
//! `libibverbs-dev librdmacm-dev libclang-dev`), and [`devices`] lists the HCAs from sysfs
//! (`/sys/class/infiniband`, kernel ABI `sysfs-class-infiniband`); with none, [`loopback`] is a
//! skip ([`CollectiveError::Unavailable`]), which is what every machine without RDMA gets.
//!
//! What does not exist yet: the queue-pair loopback itself. Every rdma-sys function is an
//! `unsafe` FFI call (`ibv_open_device`, `ibv_reg_mr`, `ibv_create_qp`, `ibv_post_send`,
//! `ibv_poll_cq`) and the workspace denies `unsafe_code`; it needs a small, reviewed FFI crate
//! (as the SPANK plugin has) or perftest's `ib_write_bw`/`ib_write_lat` run as programs. With a
//! device present, [`loopback`] says so instead of pretending.

use std::path::Path;

use super::CollectiveError;

/// The queue-pair type the loopback will use: reliable connected, as perftest's `ib_write_bw`.
pub const LOOPBACK_QP_TYPE: rdma_sys::ibv_qp_type::Type = rdma_sys::ibv_qp_type::IBV_QPT_RC;

/// RDMA devices (`mlx5_0`, ...) under `SYSFS_ROOT/class/infiniband`, sorted.
pub fn devices(sysfs_root: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(sysfs_root.join("class/infiniband")) else {
        return Vec::new();
    };
    let mut v: Vec<String> = dir
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Per-HCA loopback: a skip without devices; not implemented with them (see the module docs).
pub fn loopback(sysfs_root: &Path) -> Result<(), CollectiveError> {
    let devs = devices(sysfs_root);
    if devs.is_empty() {
        return Err(CollectiveError::Unavailable("no RDMA devices".into()));
    }
    Err(CollectiveError::Config(format!(
        "RDMA devices {} present, but the verbs loopback is not implemented (needs unsafe FFI; see docs/collective.md)",
        devs.join(",")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_devices_is_a_skip_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = loopback(dir.path()).unwrap_err();
        assert!(matches!(err, CollectiveError::Unavailable(ref w) if w == "no RDMA devices"));
    }

    #[test]
    fn devices_are_listed_from_sysfs_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["mlx5_1", "mlx5_0"] {
            std::fs::create_dir_all(dir.path().join("class/infiniband").join(d)).unwrap();
        }
        assert_eq!(devices(dir.path()), ["mlx5_0", "mlx5_1"]);
    }

    /// Hardware: a loopback on every HCA of this machine (`scripts/hw-test`).
    #[test]
    #[ignore = "needs an RDMA device"]
    fn every_hca_passes_a_loopback() {
        loopback(Path::new("/sys")).unwrap();
    }
}
