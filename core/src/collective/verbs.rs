//! RDMA verbs loopback (feature `verbs`, rdma-sys 0.3): a perftest-like RC queue-pair loopback
//! per active HCA port, measuring RDMA WRITE bandwidth and completion latency of host memory.
//!
//! Per device and active port: open the device, query the port (state, LID, active MTU, link
//! layer), pick the address (InfiniBand: the LID; RoCE: a RoCE v2 GID found in sysfs
//! `ports/N/gid_attrs/types/I`, routed with a GRH), allocate a PD, register one host buffer
//! (LOCAL_WRITE | REMOTE_WRITE), create one CQ and two RC QPs connected to each other
//! (INIT → RTR → RTS with perftest's attributes), then
//! - bandwidth: signalled [`BW_MSG_BYTES`] writes from the first half of the buffer to the
//!   second, [`TX_DEPTH`] in flight, GB/s = bytes / (first post … last completion);
//! - latency: one [`LAT_MSG_BYTES`]-byte signalled write at a time, post → completion (this
//!   includes the responder's ACK, so it is about one round trip through the HCA, not the half
//!   round trip `ib_write_lat` prints), p50/p99 in µs.
//!
//! Both phases stop at their share of the per-port budget. Every resource is an RAII guard of
//! `ffi` (the only module with `unsafe`), released in reverse order on every path. Without
//! devices the loopback is a skip ([`CollectiveError::Unavailable`]); a failing verbs call is a
//! [`CollectiveError::Verbs`] naming the call and errno.
//!
//! Untested on hardware: this machine has no HCA and no Soft-RoCE; see docs/collective.md.
//! GPU memory (GPUDirect, `nvidia_peermem`/dma-buf) is not done: host memory only.

mod ffi;

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use self::ffi::VerbsError;
use super::CollectiveError;
use super::stats::percentile;

/// The queue-pair type of the loopback: reliable connected, as perftest's `ib_write_bw`.
pub const LOOPBACK_QP_TYPE: rdma_sys::ibv_qp_type::Type = rdma_sys::ibv_qp_type::IBV_QPT_RC;
/// Bytes per bandwidth write (perftest's `ib_write_bw` default size).
pub const BW_MSG_BYTES: u32 = 64 * 1024;
/// Bytes per latency write.
pub const LAT_MSG_BYTES: u32 = 8;
/// Writes in flight during the bandwidth phase (perftest's default tx depth).
pub const TX_DEPTH: u32 = 128;
/// At most this many bandwidth writes (5000 × 64 KiB = 328 MB).
pub const BW_MAX_WRITES: u64 = 5000;
/// At most this many latency samples.
pub const LAT_MAX_SAMPLES: usize = 1000;
/// The default budget per port.
pub const DEFAULT_PORT_BUDGET: Duration = Duration::from_secs(1);

const PORT_ACTIVE: u32 = 4;
const LINK_LAYER_ETHERNET: u8 = 2;

/// One port's loopback figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortLoopback {
    /// The HCA (`mlx5_0`).
    pub device: String,
    /// The port number (1-based).
    pub port: u8,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// The RoCE v2 GID index used (RoCE only).
    pub gid_index: Option<u8>,
    /// The active MTU in bytes, used as the path MTU.
    pub mtu_bytes: u32,
    /// `host` (GPU memory is not done).
    pub memory: String,
    /// Bytes per bandwidth write.
    pub bw_msg_bytes: u32,
    /// Bandwidth writes completed.
    pub bw_writes: u64,
    /// RDMA WRITE bandwidth, GB/s (10^9 bytes).
    pub bw_gb_s: f64,
    /// Bytes per latency write.
    pub lat_msg_bytes: u32,
    /// Latency samples taken.
    pub lat_samples: usize,
    /// Median post → completion time, µs.
    pub lat_us_p50: f64,
    /// 99th percentile post → completion time, µs.
    pub lat_us_p99: f64,
    /// Wall time of this port's loopback, ms.
    pub duration_ms: u64,
}

/// The loopback of every active port of every HCA.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopbackReport {
    /// One entry per active port, by device then port.
    pub ports: Vec<PortLoopback>,
}

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

fn port_dir(sysfs_root: &Path, device: &str, port: u8) -> std::path::PathBuf {
    sysfs_root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string())
}

/// The ports of `device` whose sysfs `state` is `4: ACTIVE`, ascending.
pub fn active_ports(sysfs_root: &Path, device: &str) -> Vec<u8> {
    let Ok(dir) = std::fs::read_dir(
        sysfs_root
            .join("class/infiniband")
            .join(device)
            .join("ports"),
    ) else {
        return Vec::new();
    };
    let mut v: Vec<u8> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|p: &u8| {
            std::fs::read_to_string(port_dir(sysfs_root, device, *p).join("state"))
                .is_ok_and(|s| s.trim() == "4: ACTIVE")
        })
        .collect();
    v.sort_unstable();
    v
}

/// The RoCE v2 GID index of `device` port `port`, from sysfs (`gid_attrs/types/I` = `RoCE v2`
/// with a non-zero `gids/I`; kernel ABI `sysfs-class-infiniband`). An IPv4-mapped GID
/// (`::ffff:a.b.c.d`) is preferred, as perftest does, since it is routable on most RoCE fabrics;
/// otherwise the lowest index. `None` when the port has no RoCE v2 GID (e.g. no IP address).
pub fn roce_v2_gid_index(sysfs_root: &Path, device: &str, port: u8) -> Option<u8> {
    let dir = port_dir(sysfs_root, device, port);
    let types = std::fs::read_dir(dir.join("gid_attrs/types")).ok()?;
    let mut found: Vec<(u8, bool)> = types
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u8>().ok())
        .filter_map(|i| {
            // Unpopulated entries fail to read (EINVAL) on a real kernel: skip them.
            let t = std::fs::read_to_string(dir.join(format!("gid_attrs/types/{i}"))).ok()?;
            if t.trim() != "RoCE v2" {
                return None;
            }
            let gid = std::fs::read_to_string(dir.join(format!("gids/{i}"))).ok()?;
            let gid = gid.trim();
            if gid.chars().all(|c| c == '0' || c == ':') {
                return None;
            }
            Some((i, gid.starts_with("0000:0000:0000:0000:0000:ffff:")))
        })
        .collect();
    found.sort_unstable_by_key(|&(i, v4)| (!v4, i));
    found.first().map(|&(i, _)| i)
}

/// `ibv_mtu` enum → bytes (1 = 256 ... 5 = 4096); `None` for an unknown value.
pub fn mtu_bytes(mtu: u32) -> Option<u32> {
    (1..=5).contains(&mtu).then(|| 128 << mtu)
}

/// GB/s (10^9 bytes per second) of `bytes` in `elapsed`; 0 for no time.
pub fn rate_gb_s(bytes: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 { bytes as f64 / s / 1e9 } else { 0.0 }
}

/// p50 and p99 of latency samples in µs; `(0, 0)` for none.
pub fn latency_p50_p99_us(samples_us: &[f64]) -> (f64, f64) {
    (
        percentile(samples_us, 50.0).unwrap_or(0.0),
        percentile(samples_us, 99.0).unwrap_or(0.0),
    )
}

/// The loopback on every active port of every HCA, `budget_per_port` each (about half for
/// bandwidth, half for latency). No devices: [`CollectiveError::Unavailable`]; devices but no
/// active port: [`CollectiveError::Config`] naming them.
pub fn loopback(
    sysfs_root: &Path,
    budget_per_port: Duration,
) -> Result<LoopbackReport, CollectiveError> {
    let devs = devices(sysfs_root);
    if devs.is_empty() {
        return Err(CollectiveError::Unavailable("no RDMA devices".into()));
    }
    let list = ffi::DeviceList::get()?;
    let known = list.names();
    let mut ports = Vec::new();
    for dev in &devs {
        if !known.contains(dev) {
            return Err(CollectiveError::Config(format!(
                "RDMA device {dev} is in sysfs but not seen by libibverbs; install its provider (rdma-core) and check `ibv_devices`"
            )));
        }
        for port in active_ports(sysfs_root, dev) {
            ports.push(port_loopback(
                &list,
                sysfs_root,
                dev,
                port,
                budget_per_port,
            )?);
        }
    }
    if ports.is_empty() {
        return Err(CollectiveError::Config(format!(
            "RDMA devices {} have no active port; check cabling and the subnet manager (ibstat)",
            devs.join(",")
        )));
    }
    Ok(LoopbackReport { ports })
}

fn port_loopback(
    list: &ffi::DeviceList,
    sysfs_root: &Path,
    device: &str,
    port: u8,
    budget: Duration,
) -> Result<PortLoopback, CollectiveError> {
    let start = Instant::now();
    let ctx = list.open(device)?;
    let attr = ctx.query_port(port)?;
    if attr.state != PORT_ACTIVE {
        return Err(CollectiveError::Config(format!(
            "{device} port {port} is not active to verbs (state {}); check `ibstat {device}`",
            attr.state
        )));
    }
    let mtu = mtu_bytes(attr.active_mtu).ok_or_else(|| {
        CollectiveError::Config(format!(
            "{device} port {port} reports an unknown active MTU ({})",
            attr.active_mtu
        ))
    })?;
    let roce = attr.link_layer == LINK_LAYER_ETHERNET;
    let gid_index = if roce {
        let i = roce_v2_gid_index(sysfs_root, device, port).ok_or_else(|| {
            CollectiveError::Config(format!(
                "{device} port {port} is RoCE but has no RoCE v2 GID; give its netdev an IP address"
            ))
        })?;
        Some(i)
    } else {
        None
    };
    let grh = match gid_index {
        Some(i) => Some((ctx.query_gid(port, i)?, i)),
        None => None,
    };

    // Declared in dependency order, so they drop in reverse: QPs, MR, CQ, PD, context.
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(2 * TX_DEPTH as i32)?;
    let mr = pd.reg_host_buffer(2 * BW_MSG_BYTES as usize)?;
    let a = pd.create_rc_qp(&cq, TX_DEPTH)?;
    let b = pd.create_rc_qp(&cq, 1)?;
    const PSN_A: u32 = 0x1234;
    const PSN_B: u32 = 0x5678;
    let peer_of = |qp_num| ffi::Peer {
        qp_num,
        lid: attr.lid,
        grh,
    };
    a.to_init(port)?;
    b.to_init(port)?;
    // A sends from PSN_B and B expects it; B sends from PSN_A and A expects it.
    a.to_rtr(port, attr.active_mtu, PSN_A, &peer_of(b.qp_num()))?;
    b.to_rtr(port, attr.active_mtu, PSN_B, &peer_of(a.qp_num()))?;
    a.to_rts(PSN_B)?;
    b.to_rts(PSN_A)?;

    let half = budget / 2;
    let (bw_writes, bw_elapsed) = bandwidth(&a, &cq, &mr, Instant::now() + half)?;
    let lat = latency(&a, &cq, &mr, Instant::now() + half)?;
    let (p50, p99) = latency_p50_p99_us(&lat);
    Ok(PortLoopback {
        device: device.to_owned(),
        port,
        link_layer: if roce { "Ethernet" } else { "InfiniBand" }.into(),
        lid: attr.lid,
        gid_index,
        mtu_bytes: mtu,
        memory: "host".into(),
        bw_msg_bytes: BW_MSG_BYTES,
        bw_writes,
        bw_gb_s: rate_gb_s(bw_writes * u64::from(BW_MSG_BYTES), bw_elapsed),
        lat_msg_bytes: LAT_MSG_BYTES,
        lat_samples: lat.len(),
        lat_us_p50: p50,
        lat_us_p99: p99,
        duration_ms: start.elapsed().as_millis() as u64,
    })
}

/// Waits for completions, failing on a bad status; returns how many arrived.
fn reap(cq: &ffi::Cq<'_>) -> Result<usize, CollectiveError> {
    let mut wc = [ffi::Completion {
        wr_id: 0,
        status: 0,
    }; 16];
    let n = cq.poll(&mut wc)?;
    for c in &wc[..n] {
        if c.status != 0 {
            return Err(CollectiveError::Ring(format!(
                "RDMA write {} completed with {} (status {}); check the port, the GID and the MTU",
                c.wr_id,
                ffi::wc_status_str(c.status),
                c.status
            )));
        }
    }
    Ok(n)
}

/// Completions of writes in flight must arrive within this grace after the budget.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

fn bandwidth(
    qp: &ffi::Qp<'_>,
    cq: &ffi::Cq<'_>,
    mr: &ffi::Mr<'_>,
    deadline: Instant,
) -> Result<(u64, Duration), CollectiveError> {
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    loop {
        let now = Instant::now();
        let stop = posted >= BW_MAX_WRITES || now >= deadline;
        if stop && done == posted {
            break;
        }
        if stop && now >= deadline + DRAIN_GRACE {
            return Err(CollectiveError::Timeout(format!(
                "waiting for {} RDMA write completions",
                posted - done
            )));
        }
        while !stop && posted - done < u64::from(TX_DEPTH) && posted < BW_MAX_WRITES {
            qp.post_write(mr, 0, BW_MSG_BYTES as usize, BW_MSG_BYTES, posted)?;
            posted += 1;
        }
        done += reap(cq)? as u64;
    }
    Ok((done, start.elapsed()))
}

fn latency(
    qp: &ffi::Qp<'_>,
    cq: &ffi::Cq<'_>,
    mr: &ffi::Mr<'_>,
    deadline: Instant,
) -> Result<Vec<f64>, CollectiveError> {
    let mut samples = Vec::with_capacity(LAT_MAX_SAMPLES);
    while samples.len() < LAT_MAX_SAMPLES && Instant::now() < deadline {
        let t0 = Instant::now();
        qp.post_write(
            mr,
            0,
            BW_MSG_BYTES as usize,
            LAT_MSG_BYTES,
            samples.len() as u64,
        )?;
        while reap(cq)? == 0 {
            if t0.elapsed() > DRAIN_GRACE {
                return Err(CollectiveError::Timeout(
                    "waiting for an RDMA write completion".into(),
                ));
            }
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn no_devices_is_a_skip_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = loopback(dir.path(), DEFAULT_PORT_BUDGET).unwrap_err();
        assert!(matches!(err, CollectiveError::Unavailable(ref w) if w == "no RDMA devices"));
    }

    #[test]
    fn devices_are_listed_from_sysfs_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["mlx5_1", "mlx5_0"] {
            fs::create_dir_all(dir.path().join("class/infiniband").join(d)).unwrap();
        }
        assert_eq!(devices(dir.path()), ["mlx5_0", "mlx5_1"]);
    }

    /// A port directory as the kernel shows it for a RoCE port (mlx5, ConnectX-6 Dx): GID 0/1
    /// link-local v1/v2, 2/3 IPv4-mapped v1/v2; entries past the populated ones fail to read.
    fn roce_port(root: &Path, dev: &str, port: u8, state: &str, gids: &[(&str, &str)]) {
        let p = port_dir(root, dev, port);
        fs::create_dir_all(p.join("gids")).unwrap();
        fs::create_dir_all(p.join("gid_attrs/types")).unwrap();
        fs::write(p.join("state"), format!("{state}\n")).unwrap();
        for (i, (gid, ty)) in gids.iter().enumerate() {
            fs::write(p.join(format!("gids/{i}")), format!("{gid}\n")).unwrap();
            if !ty.is_empty() {
                fs::write(p.join(format!("gid_attrs/types/{i}")), format!("{ty}\n")).unwrap();
            }
        }
    }

    const LINK_LOCAL: &str = "fe80:0000:0000:0000:0a00:27ff:fe4d:2b1c";
    const V4_MAPPED: &str = "0000:0000:0000:0000:0000:ffff:0a4d:0001";
    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

    #[test]
    fn the_ipv4_mapped_roce_v2_gid_is_preferred() {
        let dir = tempfile::tempdir().unwrap();
        roce_port(
            dir.path(),
            "mlx5_0",
            1,
            "4: ACTIVE",
            &[
                (LINK_LOCAL, "IB/RoCE v1"),
                (LINK_LOCAL, "RoCE v2"),
                (V4_MAPPED, "IB/RoCE v1"),
                (V4_MAPPED, "RoCE v2"),
                (ZERO, ""),
            ],
        );
        assert_eq!(roce_v2_gid_index(dir.path(), "mlx5_0", 1), Some(3));
    }

    #[test]
    fn without_an_ip_the_link_local_roce_v2_gid_is_used() {
        let dir = tempfile::tempdir().unwrap();
        roce_port(
            dir.path(),
            "mlx5_0",
            1,
            "4: ACTIVE",
            &[
                (LINK_LOCAL, "IB/RoCE v1"),
                (LINK_LOCAL, "RoCE v2"),
                (ZERO, ""),
            ],
        );
        assert_eq!(roce_v2_gid_index(dir.path(), "mlx5_0", 1), Some(1));
    }

    #[test]
    fn a_port_with_only_roce_v1_or_zero_gids_has_no_roce_v2_index() {
        let dir = tempfile::tempdir().unwrap();
        roce_port(
            dir.path(),
            "mlx5_0",
            1,
            "4: ACTIVE",
            &[(LINK_LOCAL, "IB/RoCE v1"), (ZERO, "RoCE v2")],
        );
        assert_eq!(roce_v2_gid_index(dir.path(), "mlx5_0", 1), None);
        assert_eq!(roce_v2_gid_index(dir.path(), "mlx5_0", 2), None);
    }

    #[test]
    fn only_active_ports_are_tested() {
        let dir = tempfile::tempdir().unwrap();
        roce_port(dir.path(), "mlx5_0", 2, "4: ACTIVE", &[]);
        roce_port(dir.path(), "mlx5_0", 1, "1: DOWN", &[]);
        roce_port(dir.path(), "mlx5_0", 3, "4: ACTIVE", &[]);
        assert_eq!(active_ports(dir.path(), "mlx5_0"), [2, 3]);
        assert!(active_ports(dir.path(), "mlx5_1").is_empty());
    }

    /// Runs the real `ibv_get_device_list` (and `ibv_free_device_list`) of this machine, which
    /// has no HCA: a device that only a sysfs tree shows is named, not opened.
    #[test]
    fn a_device_libibverbs_does_not_see_is_named_not_opened() {
        if !devices(Path::new("/sys")).is_empty() {
            return; // a machine with HCAs: the ignored hardware test covers it
        }
        let dir = tempfile::tempdir().unwrap();
        roce_port(dir.path(), "fake_0", 1, "4: ACTIVE", &[]);
        let err = loopback(dir.path(), DEFAULT_PORT_BUDGET).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, CollectiveError::Config(_) if msg.contains("fake_0 is in sysfs but not seen by libibverbs"))
                || matches!(
                    err,
                    CollectiveError::Verbs(VerbsError {
                        call: "ibv_get_device_list",
                        ..
                    })
                ),
            "{msg}"
        );
    }

    #[test]
    fn mtu_enum_maps_to_bytes() {
        assert_eq!(mtu_bytes(1), Some(256));
        assert_eq!(mtu_bytes(3), Some(1024));
        assert_eq!(mtu_bytes(5), Some(4096));
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_bytes(6), None);
    }

    #[test]
    fn rate_is_bytes_per_nanosecond() {
        assert_eq!(rate_gb_s(25_000_000_000, Duration::from_secs(2)), 12.5);
        assert_eq!(rate_gb_s(1, Duration::ZERO), 0.0);
    }

    #[test]
    fn latency_percentiles_use_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(latency_p50_p99_us(&samples), (50.0, 99.0));
        assert_eq!(latency_p50_p99_us(&[]), (0.0, 0.0));
    }

    #[test]
    fn verbs_errors_name_the_call_and_errno() {
        let e = CollectiveError::from(VerbsError {
            call: "ibv_reg_mr",
            errno: libc::ENOMEM,
        });
        let msg = e.to_string();
        assert!(msg.contains("ibv_reg_mr failed"), "{msg}");
        assert!(msg.contains("ENOMEM"), "{msg}");
    }

    /// Hardware: a loopback on every active HCA port of this machine (`scripts/hw-test`).
    #[test]
    #[ignore = "needs an RDMA device"]
    fn every_hca_passes_a_loopback() {
        let report = loopback(Path::new("/sys"), DEFAULT_PORT_BUDGET).unwrap();
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
        for p in &report.ports {
            assert!(p.bw_writes > 0 && p.bw_gb_s > 0.0, "{p:?}");
            assert!(p.lat_samples > 0 && p.lat_us_p50 > 0.0, "{p:?}");
            assert!(p.lat_us_p50 <= p.lat_us_p99, "{p:?}");
        }
    }
}
