//! RDMA verbs loopback (feature `verbs`, rdma-sys 0.3): a perftest-like RC queue-pair loopback
//! per active HCA port, measuring RDMA WRITE bandwidth and completion latency of host memory,
//! and of GPU memory (GPUDirect RDMA) when asked for and built with the `gpudirect` feature.
//!
//! Per device and active port: open the device, query the port (state, LID, active MTU, link
//! layer), pick the address (InfiniBand: the LID; RoCE: a RoCE v2 GID found in sysfs
//! `ports/N/gid_attrs/types/I`, routed with a GRH), allocate a PD, register one host buffer
//! (LOCAL_WRITE | REMOTE_WRITE), create one CQ and two RC QPs connected to each other
//! (INIT → RTR → RTS with perftest's attributes), then, per memory, the same two phases:
//! - bandwidth: signalled [`BW_MSG_BYTES`] writes from the first half of the buffer to the
//!   second, [`TX_DEPTH`] in flight, GB/s = bytes / (first post … last completion);
//! - latency: one [`LAT_MSG_BYTES`]-byte signalled write at a time, post → completion (this
//!   includes the responder's ACK, so it is about one round trip through the HCA, not the half
//!   round trip `ib_write_lat` prints), p50/p99 in µs.
//!
//! GPU memory (`loopback(.., Some(gpu))`, `fabric-check probe --verbs-gpu [N]`, feature
//! `gpudirect`): once per loopback, the GPU (a CUDA device ordinal,
//! counted within `CUDA_VISIBLE_DEVICES`) is opened through cudarc after the presence check of
//! `libcuda` that the NCCL backend uses (`nccl::library_present`); the registration is
//! chosen by [`registration_method`]: dma-buf when `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`
//! (`cuMemAlloc` → `cuMemGetHandleForAddressRange` → `ibv_reg_dmabuf_mr`), else the peer-memory
//! module when `SYSFS_ROOT/module/nvidia_peermem` (or the legacy `nv_peer_mem`) exists (plain
//! `ibv_reg_mr` of the device pointer), else a skip that says what is missing. Each port then
//! registers that GPU buffer in its PD next to the host buffer and runs the same phases on the
//! same QPs; the result is a second [`PortLoopback`] with [`Memory::Gpu`] right after the host
//! one. A GPU run that is skipped or fails is recorded in [`LoopbackReport::gpu`] and never
//! takes the host figures with it.
//!
//! Both phases stop at their share of the per-port budget (per memory). Every resource is an
//! RAII guard of `ffi` (the only module with `unsafe`), released in reverse order on every
//! path: per port the QPs, the MRs, the CQ, the PD and the device; after all ports the GPU
//! buffer (dma-buf fd, then `cuMemFree`) and the CUDA context. Without devices the loopback is a
//! skip ([`CollectiveError::Unavailable`]); a failing verbs call is a [`CollectiveError::Verbs`]
//! naming the call and errno.
//!
//! Untested on hardware: this machine has no HCA, no Soft-RoCE, no GPU and no libcuda, so
//! neither the host loopback nor anything of the GPU path past the presence check has run; see
//! docs/collective.md for exactly what has and has not run.

mod ffi;
#[cfg(feature = "gpudirect")]
mod gpu;

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

#[cfg(feature = "gpudirect")]
pub use self::ffi::CudaError;
pub use self::ffi::VerbsError;
use super::CollectiveError;
use fabric_base::stats::percentile;

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
/// The default budget per port and memory.
pub const DEFAULT_PORT_BUDGET: Duration = Duration::from_secs(1);
/// The registered buffer, host or GPU: two halves of [`BW_MSG_BYTES`].
pub const BUF_BYTES: usize = 2 * BW_MSG_BYTES as usize;
/// Peer-memory modules that let `ibv_reg_mr` pin GPU memory, current name first.
pub const PEERMEM_MODULES: [&str; 2] = ["nvidia_peermem", "nv_peer_mem"];

const PORT_ACTIVE: u32 = 4;
const LINK_LAYER_ETHERNET: u8 = 2;

/// How GPU memory is registered with the HCA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuRegistration {
    /// `cuMemGetHandleForAddressRange` (dma-buf fd) → `ibv_reg_dmabuf_mr`.
    DmaBuf,
    /// `ibv_reg_mr` of the device pointer, resolved by the `nvidia_peermem` kernel module.
    Peermem,
}

impl GpuRegistration {
    /// `dma_buf` or `peermem`, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuRegistration::DmaBuf => "dma_buf",
            GpuRegistration::Peermem => "peermem",
        }
    }
}

/// The memory a run wrote from and to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Memory {
    /// A host buffer (`ibv_reg_mr`).
    Host,
    /// GPU memory (`cuMemAlloc`).
    Gpu {
        /// The CUDA device ordinal, counted within `CUDA_VISIBLE_DEVICES`.
        gpu: usize,
        /// How the HCA registered it.
        registration: GpuRegistration,
    },
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Memory::Host => f.write_str("host"),
            Memory::Gpu { gpu, registration } => write!(f, "gpu{gpu} {}", registration.as_str()),
        }
    }
}

/// One port's loopback figures, from one memory.
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
    /// Host memory, or which GPU and how it was registered.
    pub memory: Memory,
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
    /// Wall time of this run, ms (the host run's includes the port's setup).
    pub duration_ms: u64,
}

/// The GPU-memory part of a loopback, when asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuRun {
    /// The CUDA device ordinal asked for (counted within `CUDA_VISIBLE_DEVICES`).
    pub gpu: usize,
    /// Its PCI address (`0000:13:00.0`), once CUDA has opened it.
    pub pci: Option<String>,
    /// Its name (`NVIDIA H100 80GB HBM3`), once CUDA has opened it.
    pub name: Option<String>,
    /// How its memory was registered; `None` when skipped before the choice.
    pub registration: Option<GpuRegistration>,
    /// Why the GPU run was skipped: a note, not a failure (no libcuda, no GPU, no GPUDirect
    /// path, a build without the `gpudirect` feature).
    pub skipped: Option<String>,
    /// What failed: preparing the GPU memory, or `mlx5_0/1: ...` for a port's GPU run.
    pub errors: Vec<String>,
}

impl GpuRun {
    fn new(gpu: usize) -> Self {
        GpuRun {
            gpu,
            pci: None,
            name: None,
            registration: None,
            skipped: None,
            errors: Vec::new(),
        }
    }
}

/// The loopback of every active port of every HCA.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopbackReport {
    /// One entry per active port and memory, by device then port; a port's GPU entry follows
    /// its host entry.
    pub ports: Vec<PortLoopback>,
    /// The GPU-memory run; absent when not asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuRun>,
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

/// The peer-memory module loaded under `SYSFS_ROOT/module` (`nvidia_peermem`, or the legacy
/// `nv_peer_mem`), if any.
pub fn peermem_module(sysfs_root: &Path) -> Option<&'static str> {
    PEERMEM_MODULES
        .into_iter()
        .find(|m| sysfs_root.join("module").join(m).exists())
}

/// How to register GPU memory: dma-buf when the GPU supports it (preferred: no out-of-tree
/// module), else the loaded peer-memory module, else why GPUDirect RDMA is unavailable.
pub fn choose_registration(
    dma_buf_supported: bool,
    peermem: Option<&str>,
) -> Result<GpuRegistration, String> {
    match (dma_buf_supported, peermem) {
        (true, _) => Ok(GpuRegistration::DmaBuf),
        (false, Some(_)) => Ok(GpuRegistration::Peermem),
        (false, None) => Err(
            "GPUDirect RDMA unavailable: no dma-buf support and nvidia_peermem not loaded; load nvidia_peermem (`modprobe nvidia_peermem`) or use a driver/kernel with dma-buf (NVIDIA open kernel module, Linux >= 5.12)".into(),
        ),
    }
}

/// [`choose_registration`] with the peer-memory module looked up under `SYSFS_ROOT/module`.
pub fn registration_method(
    sysfs_root: &Path,
    dma_buf_supported: bool,
) -> Result<GpuRegistration, String> {
    choose_registration(dma_buf_supported, peermem_module(sysfs_root))
}

/// Bytes to `cuMemAlloc` for a registered window of at least `len` bytes, and that window's
/// length: `len` rounded up to whole host pages, plus one page of slack so that a page-aligned
/// window fits wherever the allocation starts (dma-buf export needs page-aligned ends).
pub fn gpu_alloc_len(len: usize, page: usize) -> (usize, usize) {
    let window = len.div_ceil(page) * page;
    (window + page, window)
}

/// The page-aligned start of the registered window inside an allocation at `alloc`.
pub fn gpu_window(alloc: u64, page: u64) -> u64 {
    alloc.div_ceil(page) * page
}

/// A PCI address as sysfs writes it (`0000:13:00.0`), from CUDA's domain, bus and device ids.
pub fn pci_address(domain: i32, bus: i32, device: i32) -> String {
    format!("{domain:04x}:{bus:02x}:{device:02x}.0")
}

#[cfg(feature = "gpudirect")]
use self::gpu::GpuMemory;

/// Without the `gpudirect` feature there is never GPU memory to register.
#[cfg(not(feature = "gpudirect"))]
#[derive(Debug)]
enum GpuMemory {}

#[cfg(not(feature = "gpudirect"))]
impl GpuMemory {
    fn prepare(_sysfs_root: &Path, _run: &mut GpuRun) -> Result<Self, CollectiveError> {
        Err(CollectiveError::Unavailable(
            "this fabric-check was built without the `gpudirect` cargo feature; rebuild with `--features gpudirect` to test GPU memory".into(),
        ))
    }

    fn memory(&self) -> Memory {
        match *self {}
    }

    fn register<'a>(&'a self, _pd: &'a ffi::Pd<'_>) -> Result<ffi::Mr<'a>, VerbsError> {
        match *self {}
    }
}

/// The loopback on every active port of every HCA, `budget_per_port` per memory (about half for
/// bandwidth, half for latency): host memory always, and GPU `gpu` (a CUDA device ordinal) too
/// when given. No devices: [`CollectiveError::Unavailable`], before any GPU is touched; devices
/// but no active port: [`CollectiveError::Config`] naming them. A GPU run that is skipped or
/// fails is in [`LoopbackReport::gpu`], never an `Err`.
pub fn loopback(
    sysfs_root: &Path,
    budget_per_port: Duration,
    gpu: Option<usize>,
) -> Result<LoopbackReport, CollectiveError> {
    let devs = devices(sysfs_root);
    if devs.is_empty() {
        return Err(CollectiveError::Unavailable("no RDMA devices".into()));
    }
    let list = ffi::DeviceList::get()?;
    let known = list.names();
    let mut targets = Vec::new();
    for dev in &devs {
        if !known.contains(dev) {
            return Err(CollectiveError::Config(format!(
                "RDMA device {dev} is in sysfs but not seen by libibverbs; install its provider (rdma-core) and check `ibv_devices`"
            )));
        }
        targets.extend(active_ports(sysfs_root, dev).into_iter().map(|p| (dev, p)));
    }
    if targets.is_empty() {
        return Err(CollectiveError::Config(format!(
            "RDMA devices {} have no active port; check cabling and the subnet manager (ibstat)",
            devs.join(",")
        )));
    }
    // GPU memory is prepared once and registered in each port's PD; it is declared before the
    // ports' resources, so it outlives every MR on it (they borrow it).
    let mut gpu_run = gpu.map(GpuRun::new);
    let gpu_mem = match gpu_run.as_mut() {
        None => None,
        Some(run) => match GpuMemory::prepare(sysfs_root, run) {
            Ok(m) => Some(m),
            Err(CollectiveError::Unavailable(why)) => {
                run.skipped = Some(why);
                None
            }
            Err(e) => {
                run.errors.push(e.to_string());
                None
            }
        },
    };
    let mut ports = Vec::new();
    for (dev, port) in targets {
        let (host, gpu) = port_loopback(
            &list,
            sysfs_root,
            dev,
            port,
            budget_per_port,
            gpu_mem.as_ref(),
        )?;
        ports.push(host);
        match (gpu, gpu_run.as_mut()) {
            (Some(Ok(p)), _) => ports.push(p),
            (Some(Err(e)), Some(run)) => run.errors.push(format!("{dev}/{port}: {e}")),
            _ => {}
        }
    }
    Ok(LoopbackReport {
        ports,
        gpu: gpu_run,
    })
}

/// A port's host run, and its GPU run when there is GPU memory (its error kept apart, so that
/// it does not take the host figures with it).
type PortRuns = (PortLoopback, Option<Result<PortLoopback, CollectiveError>>);

/// One port's runs: host memory, then GPU memory when there is some.
fn port_loopback(
    list: &ffi::DeviceList,
    sysfs_root: &Path,
    device: &str,
    port: u8,
    budget: Duration,
    gpu: Option<&GpuMemory>,
) -> Result<PortRuns, CollectiveError> {
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

    // Declared in dependency order, so they drop in reverse: QPs, MRs (GPU, host), CQ, PD,
    // context. The GPU memory itself belongs to the caller and outlives them all.
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(2 * TX_DEPTH as i32)?;
    let host_mr = pd.reg_host_buffer(BUF_BYTES)?;
    let gpu_mr = gpu.map(|g| g.register(&pd).map(|mr| (g.memory(), mr)));
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

    let entry = |memory: Memory, f: Figures, since: Instant| {
        let (p50, p99) = latency_p50_p99_us(&f.lat_us);
        PortLoopback {
            device: device.to_owned(),
            port,
            link_layer: if roce { "Ethernet" } else { "InfiniBand" }.into(),
            lid: attr.lid,
            gid_index,
            mtu_bytes: mtu,
            memory,
            bw_msg_bytes: BW_MSG_BYTES,
            bw_writes: f.bw_writes,
            bw_gb_s: rate_gb_s(f.bw_writes * u64::from(BW_MSG_BYTES), f.bw_elapsed),
            lat_msg_bytes: LAT_MSG_BYTES,
            lat_samples: f.lat_us.len(),
            lat_us_p50: p50,
            lat_us_p99: p99,
            duration_ms: since.elapsed().as_millis() as u64,
        }
    };
    let host = entry(Memory::Host, measure(&a, &cq, &host_mr, budget)?, start);
    let gpu = gpu_mr.map(|registered| {
        let since = Instant::now();
        let (memory, mr) = registered?;
        Ok(entry(memory, measure(&a, &cq, &mr, budget)?, since))
    });
    Ok((host, gpu))
}

/// What both phases measured on one memory.
#[derive(Debug)]
struct Figures {
    bw_writes: u64,
    bw_elapsed: Duration,
    lat_us: Vec<f64>,
}

/// The bandwidth phase, then the latency phase, on `mr` (host or GPU memory alike), each
/// stopping at half of `budget`.
fn measure(
    qp: &ffi::Qp<'_>,
    cq: &ffi::Cq<'_>,
    mr: &ffi::Mr<'_>,
    budget: Duration,
) -> Result<Figures, CollectiveError> {
    let half = budget / 2;
    let (bw_writes, bw_elapsed) = bandwidth(qp, cq, mr, Instant::now() + half)?;
    let lat_us = latency(qp, cq, mr, Instant::now() + half)?;
    Ok(Figures {
        bw_writes,
        bw_elapsed,
        lat_us,
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
        let err = loopback(dir.path(), DEFAULT_PORT_BUDGET, None).unwrap_err();
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
        let err = loopback(dir.path(), DEFAULT_PORT_BUDGET, None).unwrap_err();
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
    fn latency_percentiles_interpolate_between_samples() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let (p50, p99) = latency_p50_p99_us(&samples);
        assert_eq!(p50, 50.5);
        assert!((p99 - 99.01).abs() < 1e-9, "{p99}");
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

    #[test]
    fn no_devices_is_a_skip_also_when_gpu_memory_is_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let err = loopback(dir.path(), DEFAULT_PORT_BUDGET, Some(0)).unwrap_err();
        assert!(matches!(err, CollectiveError::Unavailable(ref w) if w == "no RDMA devices"));
    }

    fn with_module(root: &Path, module: &str) {
        fs::create_dir_all(root.join("module").join(module)).unwrap();
    }

    #[test]
    fn the_peermem_module_is_found_under_its_current_or_legacy_name() {
        let none = tempfile::tempdir().unwrap();
        with_module(none.path(), "nvidia");
        assert_eq!(peermem_module(none.path()), None);
        let legacy = tempfile::tempdir().unwrap();
        with_module(legacy.path(), "nv_peer_mem");
        assert_eq!(peermem_module(legacy.path()), Some("nv_peer_mem"));
        let both = tempfile::tempdir().unwrap();
        with_module(both.path(), "nv_peer_mem");
        with_module(both.path(), "nvidia_peermem");
        assert_eq!(peermem_module(both.path()), Some("nvidia_peermem"));
    }

    #[test]
    fn dma_buf_is_preferred_even_when_peermem_is_loaded() {
        let dir = tempfile::tempdir().unwrap();
        with_module(dir.path(), "nvidia_peermem");
        assert_eq!(
            registration_method(dir.path(), true),
            Ok(GpuRegistration::DmaBuf)
        );
        let bare = tempfile::tempdir().unwrap();
        assert_eq!(
            registration_method(bare.path(), true),
            Ok(GpuRegistration::DmaBuf)
        );
    }

    #[test]
    fn without_dma_buf_a_loaded_peermem_module_registers_gpu_memory() {
        let dir = tempfile::tempdir().unwrap();
        with_module(dir.path(), "nvidia_peermem");
        assert_eq!(
            registration_method(dir.path(), false),
            Ok(GpuRegistration::Peermem)
        );
        let legacy = tempfile::tempdir().unwrap();
        with_module(legacy.path(), "nv_peer_mem");
        assert_eq!(
            registration_method(legacy.path(), false),
            Ok(GpuRegistration::Peermem)
        );
    }

    #[test]
    fn without_dma_buf_or_peermem_the_gpu_run_is_skipped_saying_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        with_module(dir.path(), "nvidia");
        let why = registration_method(dir.path(), false).unwrap_err();
        assert!(
            why.starts_with(
                "GPUDirect RDMA unavailable: no dma-buf support and nvidia_peermem not loaded; load nvidia_peermem"
            ),
            "{why}"
        );
        assert!(why.contains("dma-buf"), "{why}");
    }

    #[test]
    fn the_gpu_window_is_page_aligned_and_inside_its_allocation() {
        let page = 4096;
        let (alloc_len, window) = gpu_alloc_len(BUF_BYTES, page);
        assert_eq!(window, BUF_BYTES);
        assert_eq!(alloc_len, BUF_BYTES + page);
        assert_eq!(gpu_alloc_len(5000, page), (3 * page, 2 * page));
        for alloc in [0x7f00_0000_0000u64, 0x7f00_0000_0200, 0x7f00_0000_0fff] {
            let start = gpu_window(alloc, page as u64);
            assert_eq!(start % page as u64, 0, "{alloc:#x}");
            assert!(start >= alloc, "{alloc:#x}");
            assert!(
                start + window as u64 <= alloc + alloc_len as u64,
                "{alloc:#x}"
            );
        }
        // 64 KiB pages (aarch64)
        let (alloc_len, window) = gpu_alloc_len(BUF_BYTES, 65536);
        let start = gpu_window(0x1_0000_0100, 65536);
        assert_eq!(start, 0x1_0001_0000);
        assert!(start + window as u64 <= 0x1_0000_0100 + alloc_len as u64);
    }

    #[test]
    fn the_gpu_is_recorded_by_its_pci_address_as_sysfs_writes_it() {
        assert_eq!(pci_address(0, 0x13, 0), "0000:13:00.0");
        assert_eq!(pci_address(1, 0xa3, 0x1f), "0001:a3:1f.0");
    }

    #[test]
    fn memory_kinds_serialise_with_the_gpu_and_its_registration() {
        assert_eq!(
            serde_json::to_value(Memory::Host).unwrap(),
            serde_json::json!({"kind": "host"})
        );
        let gpu = Memory::Gpu {
            gpu: 1,
            registration: GpuRegistration::Peermem,
        };
        assert_eq!(
            serde_json::to_value(gpu).unwrap(),
            serde_json::json!({"kind": "gpu", "gpu": 1, "registration": "peermem"})
        );
        assert_eq!(gpu.to_string(), "gpu1 peermem");
        assert_eq!(Memory::Host.to_string(), "host");
    }

    /// Without the feature, asking for GPU memory is a skip that says how to get it.
    #[cfg(not(feature = "gpudirect"))]
    #[test]
    fn without_the_gpudirect_feature_the_gpu_run_is_a_skip_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = GpuRun::new(0);
        let err = GpuMemory::prepare(dir.path(), &mut run).unwrap_err();
        assert!(
            matches!(err, CollectiveError::Unavailable(ref w) if w.contains("`gpudirect` cargo feature")),
            "{err}"
        );
    }

    /// Real on a machine without libcuda (this one): the GPU run is a skip naming libcuda, and
    /// nothing of cudarc runs.
    #[cfg(feature = "gpudirect")]
    #[test]
    fn without_libcuda_the_gpu_run_is_a_skip_not_an_error() {
        if crate::collective::nccl::library_present("cuda").is_some() {
            return; // a GPU machine: the ignored hardware test covers it.
        }
        let dir = tempfile::tempdir().unwrap();
        let mut run = GpuRun::new(0);
        let err = GpuMemory::prepare(dir.path(), &mut run).unwrap_err();
        assert!(
            matches!(err, CollectiveError::Unavailable(ref w) if w.contains("libcuda.so not found")),
            "{err}"
        );
        assert_eq!(run.registration, None);
        assert_eq!(run.pci, None);
    }

    #[cfg(feature = "gpudirect")]
    #[test]
    fn cuda_errors_name_the_call_and_what_to_check() {
        let e = CollectiveError::from(CudaError {
            call: "cuMemGetHandleForAddressRange",
            result: "CUDA_ERROR_NOT_SUPPORTED".into(),
        });
        let msg = e.to_string();
        assert!(
            msg.starts_with(
                "cuda: cuMemGetHandleForAddressRange failed: CUDA_ERROR_NOT_SUPPORTED; check"
            ),
            "{msg}"
        );
        assert!(msg.contains("nvidia-smi"), "{msg}");
    }

    /// Hardware: a loopback on every active HCA port of this machine (`scripts/hw-test`).
    #[test]
    #[ignore = "needs an RDMA device"]
    fn every_hca_passes_a_loopback() {
        let report = loopback(Path::new("/sys"), DEFAULT_PORT_BUDGET, None).unwrap();
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
        for p in &report.ports {
            assert!(p.bw_writes > 0 && p.bw_gb_s > 0.0, "{p:?}");
            assert!(p.lat_samples > 0 && p.lat_us_p50 > 0.0, "{p:?}");
            assert!(p.lat_us_p50 <= p.lat_us_p99, "{p:?}");
        }
    }

    /// Hardware: the loopback from GPU 0's memory on every active HCA port, next to host memory
    /// (`scripts/hw-test gpudirect`). Fails with the reason when GPUDirect RDMA is unavailable.
    #[cfg(feature = "gpudirect")]
    #[test]
    #[ignore = "needs an RDMA device, a GPU and GPUDirect RDMA (dma-buf or nvidia_peermem)"]
    fn every_hca_passes_a_loopback_from_gpu_memory() {
        let report = loopback(Path::new("/sys"), DEFAULT_PORT_BUDGET, Some(0)).unwrap();
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
        let run = report.gpu.as_ref().unwrap();
        assert_eq!(run.skipped, None, "{run:?}");
        assert!(run.errors.is_empty(), "{run:?}");
        let registration = run.registration.unwrap();
        let host = report
            .ports
            .iter()
            .filter(|p| p.memory == Memory::Host)
            .count();
        let gpu: Vec<&PortLoopback> = report
            .ports
            .iter()
            .filter(|p| p.memory != Memory::Host)
            .collect();
        assert_eq!(gpu.len(), host, "every port has a GPU run");
        for p in gpu {
            assert_eq!(
                p.memory,
                Memory::Gpu {
                    gpu: 0,
                    registration
                }
            );
            assert!(p.bw_writes > 0 && p.bw_gb_s > 0.0, "{p:?}");
            assert!(p.lat_samples > 0 && p.lat_us_p50 > 0.0, "{p:?}");
            assert!(p.lat_us_p50 <= p.lat_us_p99, "{p:?}");
        }
    }
}
