//! Test support for fabric-check: the fixtures that tests, the testbed, the demo and the
//! benchmarks need, written on demand instead of committed.
//!
//! - [`sysfs`]: sysfs trees of RDMA nodes (InfiniBand, RoCE, irdma) with or without faults.
//!   Tests take a private copy with [`sysfs::SysfsTree::new`]; scripts call the
//!   `fabric-fixtures` binary (through `scripts/gen-fixtures`).
//!
//! Used only as a dev-dependency and by that binary; nothing here runs on a production node.

pub mod sysfs;
