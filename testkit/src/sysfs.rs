//! Sysfs fixture trees that stand in for the RDMA HCAs and GPUs a test machine lacks.
//!
//! The trees are laid out like real sysfs (kernel `Documentation/ABI/stable/sysfs-class-infiniband`,
//! `sysfs-class-net`): `class/infiniband/<dev>`, `class/net/<if>` and `bus/pci/devices/<bdf>` are
//! relative symlinks into `devices/pci0000:xx/...`, attribute files hold what the kernel prints,
//! newline included. Two things a real node gets from tools rather than sysfs live under
//! `.fabric-check/` (a name real sysfs never has): `ethtool-S/<if>` (the text of `ethtool -S
//! <if>`) and `dcb-pfc/<if>` (the text of `dcb pfc show dev <if>`); the probe reads them there
//! when the directory exists. Real sysfs returns EINVAL for unpopulated `gid_attrs/types/<i>`
//! entries; plain files cannot do that, so only populated GID indices are written.
//!
//! A scenario is a node kind plus a list of faults ([`SCENARIOS`]). Counter-storm scenarios are
//! the healthy tree with some counters raised: probe the healthy tree with `--save`, then the
//! storm tree with `--baseline` to see the delta.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Why a scenario could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name is not one of [`SCENARIOS`].
    #[error("unknown scenario {0:?}; run with --list for the names")]
    UnknownScenario(String),
    /// A raise names a counter the scenario does not raise.
    #[error(
        "scenario {scenario} raises no counter {counter}; it raises: {raised} (use one of those in --raise)"
    )]
    NotRaised {
        /// The scenario.
        scenario: String,
        /// The counter named.
        counter: String,
        /// The counters it raises.
        raised: String,
    },
    /// The output directory already holds something.
    #[error("{} exists and is not an empty directory; remove it or pick another", .0.display())]
    Busy(PathBuf),
    /// A file or link could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The path being written.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

/// Every scenario name, in the order `--list` prints them.
pub const SCENARIOS: &[&str] = &[
    "ib8-healthy",
    "ib8-port-down",
    "ib8-half-rate",
    "ib8-no-roce-v2-gid",
    "ib8-symbol-errors",
    "ib8-link-downed",
    "ib8-pause-storm",
    "ib8-bad-files",
    "ib8-pcie-x8",
    "ib8-pcie-gen4",
    "ib8-fw-mismatch",
    "ib8-board-id-mismatch",
    "ib8-gpu-gone",
    "roce8-healthy",
    "roce8-port-down",
    "roce8-half-rate",
    "roce8-mtu-1500",
    "roce8-no-v2-gid",
    "roce8-ecn-off",
    "roce8-pfc-off",
    "roce8-pause-storm",
    "roce8-cnp-storm",
    "roce8-retrans",
    "irdma-healthy",
    "irdma-port-down",
];

/// The node kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// 8× InfiniBand NDR (ConnectX-7) for the GPUs, 2× RoCE 200G (ConnectX-6 Dx) for storage.
    Ib8,
    /// 8× RoCE 400G (ConnectX-7 in Ethernet mode), lossless on priority 3.
    Roce8,
    /// Intel E810 with irdma: two RoCE ports, no `counters/` directory, no ECN in sysfs.
    Irdma,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Ib8 => "ib8",
            Kind::Roce8 => "roce8",
            Kind::Irdma => "irdma",
        }
    }
}

/// One fault on one device.
#[derive(Debug, Clone)]
enum Fault {
    /// Port 1 down (state, phys_state, rate and operstate as a down port shows them).
    PortDown,
    /// Port 1 at this rate.
    Rate(&'static str),
    /// No RoCE v2 GID on port 1.
    NoV2Gid,
    /// This counter (relative to the port) raised by this much over the healthy value.
    Counter(&'static str, u64),
    /// This `ethtool -S` statistic raised by this much.
    Ethtool(&'static str, u64),
    /// The netdev at this MTU.
    Mtu(u32),
    /// ECN (`roce_np`, `roce_rp`) off on this priority.
    EcnOff(u8),
    /// PFC off on this priority.
    PfcOff(u8),
    /// This file (relative to the port) holds these bytes instead.
    Raw(&'static str, String),
    /// This file (relative to the port) is a symlink to itself.
    Loop(&'static str),
    /// This file (relative to the port) is a directory.
    Dir(&'static str),
    /// `class/infiniband/<device>` is a symlink to itself.
    ClassLoop,
    /// The NIC's PCIe link trained at this width (`current_link_width`).
    PcieWidth(u32),
    /// The NIC's PCIe link trained at this speed (`current_link_speed`).
    PcieSpeed(&'static str),
    /// This `fw_ver`.
    FwVer(&'static str),
    /// This `board_id`.
    BoardId(&'static str),
    /// The GPU paired with this NIC is not on the bus (fell off since the last probe).
    GpuGone,
}

fn scenario(name: &str) -> Option<(Kind, Vec<(&'static str, Fault)>)> {
    use Fault::*;
    let s = match name {
        "ib8-healthy" => (Kind::Ib8, vec![]),
        "ib8-port-down" => (Kind::Ib8, vec![("mlx5_3", PortDown)]),
        "ib8-half-rate" => (Kind::Ib8, vec![("mlx5_5", Rate("200 Gb/sec (2X NDR)"))]),
        "ib8-no-roce-v2-gid" => (Kind::Ib8, vec![("mlx5_9", NoV2Gid)]),
        "ib8-symbol-errors" => (
            Kind::Ib8,
            vec![("mlx5_2", Counter("counters/symbol_error", 500))],
        ),
        "ib8-link-downed" => (
            Kind::Ib8,
            vec![("mlx5_6", Counter("counters/link_downed", 1))],
        ),
        "ib8-pause-storm" => (
            Kind::Ib8,
            vec![
                ("mlx5_8", Ethtool("rx_prio3_pause", 4_000_000)),
                ("mlx5_8", Ethtool("rx_prio3_pause_duration", 90_000_000)),
            ],
        ),
        "ib8-bad-files" => (
            Kind::Ib8,
            vec![
                ("mlx5_1", Raw("counters/symbol_error", "abc\n".into())),
                ("mlx5_1", Raw("counters/port_rcv_errors", String::new())),
                (
                    "mlx5_2",
                    Raw(
                        "counters/port_xmit_discards",
                        format!("{}\n", "9".repeat(8192)),
                    ),
                ),
                (
                    "mlx5_3",
                    Raw("counters/VL15_dropped", "N/A (no PMA)\n".into()),
                ),
                (
                    "mlx5_4",
                    Raw(
                        "counters/port_rcv_remote_physical_errors",
                        "99999999999999999999999\n".into(),
                    ),
                ),
                ("mlx5_4", Loop("counters/local_link_integrity_errors")),
                ("mlx5_7", Loop("rate")),
                ("mlx5_0", Dir("hw_counters/out_of_sequence")),
                ("loop0", ClassLoop),
            ],
        ),
        "ib8-pcie-x8" => (Kind::Ib8, vec![("mlx5_3", PcieWidth(8))]),
        "ib8-pcie-gen4" => (Kind::Ib8, vec![("mlx5_6", PcieSpeed("16.0 GT/s PCIe"))]),
        "ib8-fw-mismatch" => (Kind::Ib8, vec![("mlx5_4", FwVer("28.36.1010"))]),
        "ib8-board-id-mismatch" => (Kind::Ib8, vec![("mlx5_2", BoardId("MT_0000000970"))]),
        "ib8-gpu-gone" => (Kind::Ib8, vec![("mlx5_5", GpuGone)]),
        "roce8-healthy" => (Kind::Roce8, vec![]),
        "roce8-port-down" => (Kind::Roce8, vec![("mlx5_1", PortDown)]),
        "roce8-half-rate" => (Kind::Roce8, vec![("mlx5_7", Rate("200 Gb/sec (4X HDR)"))]),
        "roce8-mtu-1500" => (Kind::Roce8, vec![("mlx5_4", Mtu(1500))]),
        "roce8-no-v2-gid" => (Kind::Roce8, vec![("mlx5_2", NoV2Gid)]),
        "roce8-ecn-off" => (Kind::Roce8, vec![("mlx5_5", EcnOff(3))]),
        "roce8-pfc-off" => (Kind::Roce8, vec![("mlx5_6", PfcOff(3))]),
        "roce8-pause-storm" => (
            Kind::Roce8,
            vec![
                ("mlx5_3", Ethtool("rx_prio3_pause", 4_000_000)),
                ("mlx5_3", Ethtool("tx_prio3_pause", 2_500_000)),
            ],
        ),
        "roce8-cnp-storm" => (
            Kind::Roce8,
            vec![
                ("mlx5_0", Counter("hw_counters/np_cnp_sent", 60_000_000)),
                ("mlx5_0", Counter("hw_counters/rp_cnp_handled", 45_000_000)),
                (
                    "mlx5_0",
                    Counter("hw_counters/np_ecn_marked_roce_packets", 80_000_000),
                ),
            ],
        ),
        "roce8-retrans" => (
            Kind::Roce8,
            vec![
                ("mlx5_6", Counter("hw_counters/local_ack_timeout_err", 900)),
                ("mlx5_6", Counter("hw_counters/packet_seq_err", 5000)),
            ],
        ),
        "irdma-healthy" => (Kind::Irdma, vec![]),
        "irdma-port-down" => (Kind::Irdma, vec![("irdma1", PortDown)]),
        _ => return None,
    };
    Some(s)
}

const IB_COUNTERS: &[&str] = &[
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
];

const MLX5_HW_COUNTERS: &[&str] = &[
    "duplicate_request",
    "implied_nak_seq_err",
    "lifespan",
    "local_ack_timeout_err",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "rx_atomic_requests",
    "rx_dct_connect",
    "rx_icrc_encapsulated",
    "rx_read_requests",
    "rx_write_requests",
];

const IRDMA_HW_COUNTERS: &[&str] = &[
    "ip4InDiscards",
    "ip4InReceives",
    "ip4OutSegRq",
    "tcpRetransSegs",
    "tcpInSegs",
    "RxECNMrkd",
    "cnpHandled",
    "cnpSent",
];

/// A plausible since-boot total: error counters are non-zero, so that a probe judging totals
/// instead of deltas would be caught by the healthy scenarios. `link_downed` is 0 so that a
/// testbed's `echo 1 > .../counters/link_downed` is a rise.
fn healthy_counter(seed: usize, name: &str) -> u64 {
    let seed = seed as u64;
    if name == "lifespan" {
        return 10;
    }
    if name.ends_with("_data") || name.ends_with("_packets") || name.starts_with("rx_") {
        return 1_000_000_007 * (seed + 3);
    }
    if name == "link_downed" {
        return 0;
    }
    if name == "local_link_integrity_errors" || name == "excessive_buffer_overrun_errors" {
        return seed % 5 + 1; // 4-bit IBA counters
    }
    7 * (seed + 1) + name.len() as u64
}

/// One NIC of a node.
#[derive(Debug)]
struct Nic {
    dev: String,
    netdev: String,
    infiniband: bool,
    rate: &'static str,
    hca: &'static str,
    board: &'static str,
    fw: &'static str,
    pci_dev: &'static str,
    class: &'static str,
    mtu: u32,
    driver: &'static str,
    gpu: Option<usize>,
    numa: u8,
    hw: &'static [&'static str],
    counters: bool,
    ecn: bool,
    function: u8,
    vendor: &'static str,
    /// `max_link_speed` and `max_link_width` of the NIC's PCI function.
    pcie: (&'static str, u32),
}

/// ConnectX-7 and H100 SXM: PCIe 5.0 x16.
const GEN5_X16: (&str, u32) = ("32.0 GT/s PCIe", 16);
/// ConnectX-6 Dx and E810: PCIe 4.0 x16.
const GEN4_X16: (&str, u32) = ("16.0 GT/s PCIe", 16);

fn nic_plan(kind: Kind) -> Vec<Nic> {
    let mut nics = Vec::new();
    match kind {
        Kind::Ib8 => {
            for i in 0..8 {
                nics.push(Nic {
                    dev: format!("mlx5_{i}"),
                    netdev: format!("ibp{i}s0"),
                    infiniband: true,
                    rate: "400 Gb/sec (4X NDR)",
                    hca: "MT4129",
                    board: "MT_0000000838",
                    fw: "28.39.1002",
                    pci_dev: "0x1021",
                    class: "0x020700",
                    mtu: 4092,
                    driver: "mlx5_core",
                    gpu: Some(i),
                    numa: if i < 4 { 0 } else { 1 },
                    hw: MLX5_HW_COUNTERS,
                    counters: true,
                    ecn: false,
                    function: 0,
                    vendor: "0x15b3",
                    pcie: GEN5_X16,
                });
            }
            for (j, i) in [8, 9].into_iter().enumerate() {
                nics.push(Nic {
                    dev: format!("mlx5_{i}"),
                    netdev: format!("ens9f{j}np{j}"),
                    infiniband: false,
                    rate: "200 Gb/sec (4X HDR)",
                    hca: "MT4125",
                    board: "MT_0000000359",
                    fw: "22.39.2048",
                    pci_dev: "0x101d",
                    class: "0x020000",
                    mtu: 9000,
                    driver: "mlx5_core",
                    gpu: None,
                    numa: 1,
                    hw: MLX5_HW_COUNTERS,
                    counters: true,
                    ecn: true,
                    function: j as u8,
                    vendor: "0x15b3",
                    pcie: GEN4_X16,
                });
            }
        }
        Kind::Roce8 => {
            for i in 0..8 {
                nics.push(Nic {
                    dev: format!("mlx5_{i}"),
                    netdev: format!("ens{}np0", i + 1),
                    infiniband: false,
                    rate: "400 Gb/sec (4X NDR)",
                    hca: "MT4129",
                    board: "MT_0000000838",
                    fw: "28.39.1002",
                    pci_dev: "0x1021",
                    class: "0x020000",
                    mtu: 9000,
                    driver: "mlx5_core",
                    gpu: Some(i),
                    numa: if i < 4 { 0 } else { 1 },
                    hw: MLX5_HW_COUNTERS,
                    counters: true,
                    ecn: true,
                    function: 0,
                    vendor: "0x15b3",
                    pcie: GEN5_X16,
                });
            }
        }
        Kind::Irdma => {
            for i in 0..2 {
                nics.push(Nic {
                    dev: format!("irdma{i}"),
                    netdev: format!("ens801f{i}"),
                    infiniband: false,
                    rate: "100 Gb/sec (4X EDR)",
                    hca: "",
                    board: "",
                    fw: "1.70",
                    pci_dev: "0x1592",
                    class: "0x020000",
                    mtu: 9000,
                    driver: "ice",
                    gpu: None,
                    numa: 0,
                    hw: IRDMA_HW_COUNTERS,
                    counters: false,
                    ecn: false,
                    function: i,
                    vendor: "0x8086",
                    pcie: GEN4_X16,
                });
            }
        }
    }
    nics
}

/// Writes files and relative symlinks below a root.
struct Tree<'a> {
    root: &'a Path,
}

impl Tree<'_> {
    fn io<T>(&self, rel: &str, r: io::Result<T>) -> Result<T, Error> {
        r.map_err(|source| Error::Io {
            path: self.root.join(rel),
            source,
        })
    }

    fn parent(&self, rel: &str) -> Result<PathBuf, Error> {
        let p = self.root.join(rel);
        if let Some(d) = p.parent() {
            self.io(rel, fs::create_dir_all(d))?;
        }
        Ok(p)
    }

    fn write(&self, rel: &str, text: &str) -> Result<(), Error> {
        let p = self.parent(rel)?;
        self.io(rel, fs::write(p, text))
    }

    fn remove(&self, rel: &str) -> Result<(), Error> {
        self.io(rel, fs::remove_file(self.root.join(rel)))
    }

    fn symlink(&self, rel: &str, target: &str) -> Result<(), Error> {
        let p = self.parent(rel)?;
        if p.symlink_metadata().is_ok() {
            self.io(rel, fs::remove_file(&p))?;
        }
        self.io(rel, std::os::unix::fs::symlink(target, p))
    }

    /// A relative symlink at `rel` pointing at `target_rel` (both relative to the root).
    fn link_to(&self, rel: &str, target_rel: &str) -> Result<(), Error> {
        self.symlink(rel, &relative(target_rel, dirname(rel)))
    }
}

fn dirname(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(d, _)| d)
}

fn basename(rel: &str) -> &str {
    rel.rsplit_once('/').map_or(rel, |(_, b)| b)
}

/// `target` as seen from the directory `from` (both relative to the same root, no `.`/`..`).
fn relative(target: &str, from: &str) -> String {
    let t: Vec<&str> = target.split('/').filter(|c| !c.is_empty()).collect();
    let f: Vec<&str> = from.split('/').filter(|c| !c.is_empty()).collect();
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = vec![".."; f.len() - common];
    parts.extend(&t[common..]);
    if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    }
}

/// NIC and GPU functions behind the PCIe switch of pair `nic_index` (root port, switch
/// upstream port, downstream ports).
fn pci_paths(nic_index: usize, numa: u8) -> (String, String) {
    let host = if numa == 0 {
        "pci0000:00"
    } else {
        "pci0000:80"
    };
    let base = (if numa == 0 { 0x10 } else { 0x90 }) + 0x10 * (nic_index % 4);
    let rp = format!(
        "{host}/0000:{:02x}:{:02x}.0",
        if numa == 0 { 0x00 } else { 0x80 },
        nic_index % 4 + 1
    );
    let up = format!("{rp}/0000:{base:02x}:00.0");
    let nic = format!("{up}/0000:{:02x}:00.0/0000:{:02x}:00.0", base + 1, base + 2);
    let gpu = format!("{up}/0000:{:02x}:01.0/0000:{:02x}:00.0", base + 1, base + 3);
    (nic, gpu)
}

fn pci_function(
    t: &Tree,
    rel: &str,
    vendor: &str,
    device: &str,
    class: &str,
    numa: u8,
    driver: &str,
) -> Result<(), Error> {
    t.write(&format!("{rel}/vendor"), &format!("{vendor}\n"))?;
    t.write(&format!("{rel}/device"), &format!("{device}\n"))?;
    t.write(&format!("{rel}/class"), &format!("{class}\n"))?;
    t.write(&format!("{rel}/numa_node"), &format!("{numa}\n"))?;
    if !driver.is_empty() {
        t.link_to(
            &format!("{rel}/driver"),
            &format!("bus/pci/drivers/{driver}"),
        )?;
        // As in real sysfs, the driver's folder links back to each device bound to it.
        t.link_to(&format!("bus/pci/drivers/{driver}/{}", basename(rel)), rel)?;
    }
    t.link_to(&format!("bus/pci/devices/{}", basename(rel)), rel)
}

/// The PCIe link files of a function: trained at `cur`, capable of `max` (speed text, width).
fn pcie_link(t: &Tree, rel: &str, cur: (&str, u32), max: (&str, u32)) -> Result<(), Error> {
    t.write(
        &format!("{rel}/current_link_speed"),
        &format!("{}\n", cur.0),
    )?;
    t.write(
        &format!("{rel}/current_link_width"),
        &format!("{}\n", cur.1),
    )?;
    t.write(&format!("{rel}/max_link_speed"), &format!("{}\n", max.0))?;
    t.write(&format!("{rel}/max_link_width"), &format!("{}\n", max.1))
}

/// A PCIe bridge (root port or switch port) whose link can carry up to `max` (speed text,
/// width): the slot maxima `pcie.link` judges a device below it against.
fn bridge(t: &Tree, rel: &str, numa: u8, max: (&str, u32)) -> Result<(), Error> {
    t.write(&format!("{rel}/vendor"), "0x10b5\n")?;
    t.write(&format!("{rel}/device"), "0xc040\n")?;
    t.write(&format!("{rel}/class"), "0x060400\n")?;
    t.write(&format!("{rel}/numa_node"), &format!("{numa}\n"))?;
    t.write(&format!("{rel}/max_link_speed"), &format!("{}\n", max.0))?;
    t.write(&format!("{rel}/max_link_width"), &format!("{}\n", max.1))?;
    t.link_to(&format!("bus/pci/devices/{}", basename(rel)), rel)
}

/// Sets the slot maxima of the PCI function `bdf` (`0000:f0:00.0`) of the tree at `root`: the
/// `max_link_speed` and `max_link_width` of its upstream bridge, as a slot wired for less than
/// the card (a Gen5 card in a Gen4 slot: `"16.0 GT/s PCIe"`, 16). Returns the bridge's address.
pub fn set_slot_max(root: &Path, bdf: &str, speed: &str, width: u32) -> io::Result<String> {
    let function = fs::canonicalize(root.join("bus/pci/devices").join(bdf))?;
    let up = function
        .parent()
        .ok_or_else(|| io::Error::other(format!("{bdf} has no upstream bridge")))?;
    fs::write(up.join("max_link_speed"), format!("{speed}\n"))?;
    fs::write(up.join("max_link_width"), format!("{width}\n"))?;
    Ok(up
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// The faults on device `dev`, in the scenario's order.
fn faults_of<'a>(
    faults: &'a [(&'static str, Fault)],
    dev: &'a str,
) -> impl Iterator<Item = &'a Fault> + 'a {
    faults
        .iter()
        .filter(move |(d, _)| *d == dev)
        .map(|(_, f)| f)
}

fn build(kind: Kind, faults: &[(&'static str, Fault)], out: &Path) -> Result<(), Error> {
    let t = Tree { root: out };
    let nics = nic_plan(kind);
    let has = |dev| faults_of(faults, dev);
    let mut storage_slot = 0u8;
    for (idx, n) in nics.iter().enumerate() {
        let dev = n.dev.as_str();
        let nic_rel = if let Some(gpu) = n.gpu {
            let (nic, gpu) = pci_paths(gpu, n.numa);
            let nic_rel = format!("devices/{nic}");
            let gpu_rel = format!("devices/{gpu}");
            let up = dirname(dirname(&nic_rel));
            // The switch and its root port carry the fastest device below them; each
            // downstream port its own device's maximum.
            bridge(&t, dirname(up), n.numa, GEN5_X16)?;
            bridge(&t, up, n.numa, GEN5_X16)?;
            bridge(&t, dirname(&nic_rel), n.numa, n.pcie)?;
            bridge(&t, dirname(&gpu_rel), n.numa, GEN5_X16)?;
            if !has(dev).any(|f| matches!(f, Fault::GpuGone)) {
                pci_function(
                    &t, &gpu_rel, "0x10de", "0x2330", "0x030200", n.numa, "nvidia",
                )?;
                pcie_link(&t, &gpu_rel, GEN5_X16, GEN5_X16)?;
            }
            nic_rel
        } else {
            let host = if n.numa != 0 {
                "pci0000:80"
            } else {
                "pci0000:00"
            };
            let hb: u8 = if n.numa != 0 { 0x80 } else { 0x00 };
            let rp = format!("devices/{host}/0000:{hb:02x}:1{}.0", storage_slot / 2);
            bridge(&t, &rp, n.numa, n.pcie)?;
            let nic_rel = format!(
                "{rp}/0000:{:02x}:00.{}",
                hb + 0x70 + storage_slot / 2,
                n.function
            );
            storage_slot += 1;
            nic_rel
        };
        pci_function(&t, &nic_rel, n.vendor, n.pci_dev, n.class, n.numa, n.driver)?;
        let mut link = n.pcie;
        for f in has(dev) {
            match f {
                Fault::PcieWidth(w) => link.1 = *w,
                Fault::PcieSpeed(sp) => link.0 = sp,
                _ => {}
            }
        }
        pcie_link(&t, &nic_rel, link, n.pcie)?;
        let mut fw = n.fw;
        let mut board = n.board;
        for f in has(dev) {
            match f {
                Fault::FwVer(v) => fw = v,
                Fault::BoardId(b) => board = b,
                _ => {}
            }
        }
        let ib = format!("{nic_rel}/infiniband/{dev}");
        t.link_to(&format!("class/infiniband/{dev}"), &ib)?;
        t.link_to(&format!("{ib}/device"), &nic_rel)?;
        t.write(&format!("{ib}/fw_ver"), &format!("{fw}\n"))?;
        if !n.hca.is_empty() {
            t.write(&format!("{ib}/hca_type"), &format!("{}\n", n.hca))?;
            t.write(&format!("{ib}/board_id"), &format!("{board}\n"))?;
        }
        let guid = format!("b8ce:f603:00{idx:02x}:{:04x}", 0x1a2b + idx);
        t.write(&format!("{ib}/node_guid"), &format!("{guid}\n"))?;
        t.write(&format!("{ib}/node_type"), "1: CA\n")?;
        t.write(
            &format!("{ib}/node_desc"),
            &format!("{}-node {dev}\n", kind.name()),
        )?;
        let p = format!("{ib}/ports/1");
        let down = has(dev).any(|f| matches!(f, Fault::PortDown));
        t.write(
            &format!("{p}/state"),
            if down { "1: DOWN\n" } else { "4: ACTIVE\n" },
        )?;
        t.write(
            &format!("{p}/phys_state"),
            match (down, n.infiniband) {
                (true, false) => "3: Disabled\n",
                (true, true) => "2: Polling\n",
                (false, _) => "5: LinkUp\n",
            },
        )?;
        let mut rate = n.rate;
        if down {
            rate = if n.infiniband {
                "10 Gb/sec (4X SDR)"
            } else {
                "40 Gb/sec (4X QDR)"
            };
        }
        for f in has(dev) {
            if let Fault::Rate(r) = f {
                rate = r;
            }
        }
        t.write(&format!("{p}/rate"), &format!("{rate}\n"))?;
        let ll = if n.infiniband {
            "InfiniBand"
        } else {
            "Ethernet"
        };
        t.write(&format!("{p}/link_layer"), &format!("{ll}\n"))?;
        let lid = if n.infiniband {
            format!("0x{:x}\n", idx + 1)
        } else {
            "0x0\n".to_owned()
        };
        t.write(&format!("{p}/lid"), &lid)?;
        t.write(
            &format!("{p}/sm_lid"),
            if n.infiniband { "0x1\n" } else { "0x0\n" },
        )?;
        t.write(&format!("{p}/cap_mask"), "0xa751e84a\n")?;
        if n.counters {
            for c in IB_COUNTERS {
                t.write(
                    &format!("{p}/counters/{c}"),
                    &format!("{}\n", healthy_counter(idx, c)),
                )?;
            }
        }
        for c in n.hw {
            t.write(
                &format!("{p}/hw_counters/{c}"),
                &format!("{}\n", healthy_counter(idx, c)),
            )?;
        }
        for f in has(dev) {
            if let Fault::Counter(rel, by) = f {
                let before = healthy_counter(idx, basename(rel));
                t.write(&format!("{p}/{rel}"), &format!("{}\n", before + by))?;
            }
        }
        // The port's netdev and its PCI function.
        let nd = n.netdev.as_str();
        let net = format!("{nic_rel}/net/{nd}");
        t.link_to(&format!("class/net/{nd}"), &net)?;
        t.link_to(&format!("{net}/device"), &nic_rel)?;
        let mut mtu = n.mtu;
        for f in has(dev) {
            if let Fault::Mtu(m) = f {
                mtu = *m;
            }
        }
        t.write(&format!("{net}/mtu"), &format!("{mtu}\n"))?;
        t.write(
            &format!("{net}/operstate"),
            if down { "down\n" } else { "up\n" },
        )?;
        t.write(&format!("{net}/dev_port"), "0\n")?;
        t.write(
            &format!("{net}/type"),
            if n.infiniband { "32\n" } else { "1\n" },
        )?;
        t.write(
            &format!("{net}/address"),
            &format!("b8:ce:f6:03:{idx:02x}:{:02x}\n", 0x10 + idx),
        )?;
        if n.infiniband {
            t.write(
                &format!("{p}/gids/0"),
                &format!("fe80:0000:0000:0000:{guid}\n"),
            )?;
        } else {
            ethernet_port(&t, kind, n, idx, &p, &net, faults)?;
        }
        // File-level faults last, so they replace what was written above.
        for f in has(dev) {
            match f {
                Fault::Raw(rel, text) => t.write(&format!("{p}/{rel}"), text)?,
                Fault::Loop(rel) => {
                    let rel = format!("{p}/{rel}");
                    t.remove(&rel)?;
                    t.symlink(&rel, basename(&rel))?;
                }
                Fault::Dir(rel) => {
                    let rel = format!("{p}/{rel}");
                    t.remove(&rel)?;
                    t.write(
                        &format!("{rel}/README"),
                        "a directory where the kernel has a file\n",
                    )?;
                }
                _ => {}
            }
        }
    }
    for (dev, f) in faults {
        if matches!(f, Fault::ClassLoop) {
            t.symlink(&format!("class/infiniband/{dev}"), dev)?;
        }
    }
    // Kernel modules: loaded modules appear under /sys/module.
    let mut mods = vec!["ib_core", "ib_uverbs", "rdma_cm"];
    if kind == Kind::Irdma {
        mods.extend(["ice", "irdma"]);
    } else {
        mods.extend(["mlx5_core", "mlx5_ib"]);
    }
    if nics.iter().any(|n| n.gpu.is_some()) {
        mods.extend(["nvidia", "nvidia_peermem"]);
        t.write("module/nvidia/version", "550.54.15\n")?;
    }
    for m in mods {
        t.write(&format!("module/{m}/refcnt"), "1\n")?;
    }
    Ok(())
}

/// GIDs, ECN, and the tool output (`ethtool -S`, `dcb pfc show`) of an Ethernet port.
fn ethernet_port(
    t: &Tree,
    kind: Kind,
    n: &Nic,
    idx: usize,
    p: &str,
    net: &str,
    faults: &[(&'static str, Fault)],
) -> Result<(), Error> {
    let mine = || faults_of(faults, &n.dev);
    let nd = n.netdev.as_str();
    let link_local = format!("fe80:0000:0000:0000:bace:f6ff:fe03:{idx:04x}");
    let v4 = format!("0000:0000:0000:0000:0000:ffff:0a00:{:04x}", idx + 1);
    let mut gids = vec![
        (link_local.clone(), "IB/RoCE v1"),
        (link_local, "RoCE v2"),
        (v4.clone(), "IB/RoCE v1"),
        (v4, "RoCE v2"),
    ];
    if mine().any(|f| matches!(f, Fault::NoV2Gid)) {
        gids.retain(|g| g.1 != "RoCE v2");
    }
    for (gi, (gid, typ)) in gids.iter().enumerate() {
        t.write(&format!("{p}/gids/{gi}"), &format!("{gid}\n"))?;
        t.write(&format!("{p}/gid_attrs/types/{gi}"), &format!("{typ}\n"))?;
        t.write(&format!("{p}/gid_attrs/ndevs/{gi}"), &format!("{nd}\n"))?;
    }
    if n.ecn {
        let off: BTreeSet<u8> = mine()
            .filter_map(|f| match f {
                Fault::EcnOff(q) => Some(*q),
                _ => None,
            })
            .collect();
        for side in ["roce_np", "roce_rp"] {
            for prio in 0..8u8 {
                let on = u8::from(prio == 3 && !off.contains(&prio));
                t.write(
                    &format!("{net}/ecn/{side}/enable/{prio}"),
                    &format!("{on}\n"),
                )?;
            }
        }
    }
    // Tool output: ethtool -S (pause counters) and dcb pfc show (PFC config).
    let i = idx as u64;
    let mut stats: Vec<(String, u64)> = vec![
        ("rx_packets".into(), 1_000_000_007 * (i + 3)),
        ("tx_packets".into(), 900_000_011 * (i + 3)),
        ("rx_pause_ctrl_phy".into(), 0),
        ("tx_pause_ctrl_phy".into(), 0),
        ("tx_pause_storm_warning_events".into(), 0),
        ("tx_pause_storm_error_events".into(), 0),
    ];
    for prio in 0..8 {
        for d in ["rx", "tx"] {
            let hot = prio == 3;
            stats.push((
                format!("{d}_prio{prio}_pause"),
                if hot { 1000 + i } else { 0 },
            ));
            stats.push((
                format!("{d}_prio{prio}_pause_duration"),
                if hot { 20_000 + i } else { 0 },
            ));
            stats.push((
                format!("{d}_prio{prio}_pause_transition"),
                if hot { 500 + i } else { 0 },
            ));
        }
    }
    for f in mine() {
        if let Fault::Ethtool(name, by) = f
            && let Some(s) = stats.iter_mut().find(|(k, _)| k == name)
        {
            s.1 += by;
        }
    }
    let mut text = String::from("NIC statistics:\n");
    for (k, v) in &stats {
        text.push_str(&format!("     {k}: {v}\n"));
    }
    t.write(&format!(".fabric-check/ethtool-S/{nd}"), &text)?;
    let off: BTreeSet<u8> = mine()
        .filter_map(|f| match f {
            Fault::PfcOff(q) => Some(*q),
            _ => None,
        })
        .collect();
    let pfc_on = |q: u8| (kind == Kind::Roce8 || n.ecn) && q == 3 && !off.contains(&q);
    let prio: Vec<String> = (0..8u8)
        .map(|q| format!("{q}:{}", if pfc_on(q) { "on" } else { "off" }))
        .collect();
    t.write(
        &format!(".fabric-check/dcb-pfc/{nd}"),
        &format!(
            "pfc-cap 8 macsec-bypass off delay 0 \nprio-pfc {} \n",
            prio.join(" ")
        ),
    )
}

/// Writes scenario `name` as a sysfs root in `out`, which must be absent or an empty directory.
pub fn write(name: &str, out: &Path) -> Result<(), Error> {
    write_raised(name, out, &[])
}

/// The counters (sysfs counter files by name, `ethtool -S` statistics) scenario `name` raises,
/// and by how much, in its order.
pub fn raises(name: &str) -> Result<Vec<(&'static str, u64)>, Error> {
    let (_, faults) = scenario(name).ok_or_else(|| Error::UnknownScenario(name.to_owned()))?;
    Ok(faults
        .iter()
        .filter_map(|(_, f)| match f {
            Fault::Counter(rel, by) => Some((rel.rsplit('/').next().unwrap_or(rel), *by)),
            Fault::Ethtool(n, by) => Some((*n, *by)),
            _ => None,
        })
        .collect())
}

/// Writes scenario `name` as [`write()`] does, with each counter of `raised` (a counter the
/// scenario raises, by its file or statistic name: `symbol_error`, `rx_prio3_pause`) raised by
/// the amount given instead of the scenario's own: a fault of graded size.
pub fn write_raised(name: &str, out: &Path, raised: &[(String, u64)]) -> Result<(), Error> {
    let (kind, mut faults) =
        scenario(name).ok_or_else(|| Error::UnknownScenario(name.to_owned()))?;
    for (counter, amount) in raised {
        let mut found = false;
        for (_, f) in &mut faults {
            match f {
                Fault::Counter(rel, by) if rel.rsplit('/').next() == Some(counter.as_str()) => {
                    *by = *amount;
                    found = true;
                }
                Fault::Ethtool(n, by) if *n == counter.as_str() => {
                    *by = *amount;
                    found = true;
                }
                _ => {}
            }
        }
        if !found {
            let list: Vec<&str> = raises(name)?.into_iter().map(|(n, _)| n).collect();
            return Err(Error::NotRaised {
                scenario: name.to_owned(),
                counter: counter.clone(),
                raised: if list.is_empty() {
                    "none".to_owned()
                } else {
                    list.join(", ")
                },
            });
        }
    }
    if out.symlink_metadata().is_ok() {
        let empty = out.is_dir()
            && fs::read_dir(out)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
        if !empty {
            return Err(Error::Busy(out.to_owned()));
        }
    }
    fs::create_dir_all(out).map_err(|source| Error::Io {
        path: out.to_owned(),
        source,
    })?;
    build(kind, &faults, out)
}

/// Every scenario into `dir/<scenario>/`, replacing what was there.
pub fn write_all(dir: &Path) -> Result<(), Error> {
    for name in SCENARIOS {
        let out = dir.join(name);
        if out.symlink_metadata().is_ok() {
            fs::remove_dir_all(&out).map_err(|source| Error::Io {
                path: out.clone(),
                source,
            })?;
        }
        write(name, &out)?;
    }
    Ok(())
}

/// A fingerprint of this generator (its source text, FNV-1a): trees cached under one
/// fingerprint are what this source writes.
fn fingerprint() -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in include_str!("sysfs.rs").bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Scenario `name`, written once into `cache` (a build folder such as the test's
/// `CARGO_TARGET_TMPDIR`; see [`shared_sysfs_root!`](crate::shared_sysfs_root)) and shared by
/// every test, test binary and later run until the generator changes. Read it, never change
/// it: a test that changes a tree takes its own with [`SysfsTree::new`].
///
/// Concurrent callers are safe: each writes into a private temporary folder and renames it
/// into place; the first rename wins and the others drop theirs. Trees of earlier
/// fingerprints are removed when a new fingerprint's folder is made.
///
/// # Panics
/// When the name is unknown or the tree cannot be written (test support).
pub fn shared(cache: &Path, name: &str) -> PathBuf {
    let top = cache.join("fabric-sysfs");
    let dir = top.join(fingerprint());
    let root = dir.join(name);
    if root.is_dir() {
        return root;
    }
    if !dir.is_dir() {
        // The generator changed: trees of earlier fingerprints are stale (best effort).
        for e in fs::read_dir(&top).into_iter().flatten().flatten() {
            let _ = fs::remove_dir_all(e.path());
        }
    }
    fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot make the fixture cache {}: {e}", dir.display()));
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .tempdir_in(&dir)
        .unwrap_or_else(|e| panic!("cannot make a temporary folder in {}: {e}", dir.display()));
    let fresh = tmp.path().join(name);
    write(name, &fresh).unwrap_or_else(|e| panic!("cannot write scenario {name}: {e}"));
    // Losing the race to another process is fine: its tree is the same.
    if fs::rename(&fresh, &root).is_err() && !root.is_dir() {
        panic!("cannot move scenario {name} into {}", root.display());
    }
    root
}

/// The shared, read-only tree of a scenario, cached in the calling test's
/// `CARGO_TARGET_TMPDIR` (integration tests and benchmarks): see [`sysfs::shared`](crate::sysfs::shared).
#[macro_export]
macro_rules! shared_sysfs_root {
    ($name:expr) => {
        $crate::sysfs::shared(::std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), $name)
    };
}

/// A private scenario tree in its own temporary directory, removed when dropped. Tests may
/// change it (raise a counter, rewrite a file) without affecting any other test.
#[derive(Debug)]
pub struct SysfsTree {
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl SysfsTree {
    /// Writes scenario `name` into a fresh temporary directory.
    ///
    /// # Panics
    /// When the name is not one of [`SCENARIOS`] or the tree cannot be written: this is test
    /// support, and a test cannot go on without its fixture.
    pub fn new(name: &str) -> SysfsTree {
        let dir = tempfile::Builder::new()
            .prefix("fabric-sysfs-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot make a temporary directory for {name}: {e}"));
        let root = dir.path().join(name);
        write(name, &root).unwrap_or_else(|e| panic!("cannot write scenario {name}: {e}"));
        SysfsTree { dir, root }
    }

    /// The sysfs root (what `--sysfs-root` takes).
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The temporary directory holding the tree, for a test's other files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_names_a_device_of_its_node() {
        for name in SCENARIOS {
            let (kind, faults) = scenario(name).unwrap();
            let devs: Vec<String> = nic_plan(kind).into_iter().map(|n| n.dev).collect();
            for (dev, f) in &faults {
                assert!(
                    matches!(f, Fault::ClassLoop) || devs.iter().any(|d| d == dev),
                    "{name}: {dev}"
                );
            }
        }
    }

    #[test]
    fn a_shared_tree_is_written_once_and_then_reused() {
        let cache = tempfile::tempdir().unwrap();
        let a = shared(cache.path(), "irdma-healthy");
        let marker = a.join("marker");
        fs::write(&marker, "").unwrap();
        let b = shared(cache.path(), "irdma-healthy");
        assert_eq!(a, b);
        assert!(marker.exists(), "the second call rewrote the tree");
        assert!(b.join("class/infiniband/irdma0").exists());
    }

    #[test]
    fn trees_of_an_earlier_generator_are_removed() {
        let cache = tempfile::tempdir().unwrap();
        let stale = cache
            .path()
            .join("fabric-sysfs/0123456789abcdef/irdma-healthy");
        fs::create_dir_all(&stale).unwrap();
        let fresh = shared(cache.path(), "irdma-healthy");
        assert!(fresh.join("class/infiniband/irdma1").exists());
        assert!(!stale.exists(), "the stale tree is still there");
    }

    #[test]
    fn relative_links_climb_to_the_common_ancestor() {
        assert_eq!(
            relative("devices/a/b", "class/infiniband"),
            "../../devices/a/b"
        );
        assert_eq!(relative("devices/a/b", "devices/a/b/net/x"), "../..");
        assert_eq!(
            relative("bus/pci/drivers/ice", "devices/p/q"),
            "../../../bus/pci/drivers/ice"
        );
    }

    #[test]
    fn every_listed_scenario_has_a_description() {
        for name in SCENARIOS {
            assert!(scenario(name).is_some(), "{name}");
        }
        assert!(scenario("no-such-scenario").is_none());
    }

    #[test]
    fn unknown_scenarios_and_busy_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = write("no-such-scenario", &dir.path().join("x")).unwrap_err();
        assert!(e.to_string().contains("--list"), "{e}");
        fs::write(dir.path().join("busy"), "").unwrap();
        let e = write("ib8-healthy", dir.path()).unwrap_err();
        assert!(e.to_string().contains("not an empty directory"), "{e}");
    }

    #[test]
    fn a_port_down_fault_changes_only_that_port() {
        let healthy = SysfsTree::new("ib8-healthy");
        let down = SysfsTree::new("ib8-port-down");
        let state = |t: &SysfsTree, dev: &str| {
            fs::read_to_string(
                t.path()
                    .join(format!("class/infiniband/{dev}/ports/1/state")),
            )
            .unwrap()
        };
        assert_eq!(state(&healthy, "mlx5_3"), "4: ACTIVE\n");
        assert_eq!(state(&down, "mlx5_3"), "1: DOWN\n");
        assert_eq!(state(&down, "mlx5_2"), "4: ACTIVE\n");
    }

    #[test]
    fn a_raised_scenario_raises_its_counters_by_the_amounts_given_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("graded");
        write_raised("ib8-symbol-errors", &out, &[("symbol_error".into(), 60)]).unwrap();
        let v =
            fs::read_to_string(out.join("class/infiniband/mlx5_2/ports/1/counters/symbol_error"))
                .unwrap();
        assert_eq!(v, format!("{}\n", healthy_counter(2, "symbol_error") + 60));
        let out = dir.path().join("pause");
        write_raised("ib8-pause-storm", &out, &[("rx_prio3_pause".into(), 7)]).unwrap();
        assert_eq!(
            raises("ib8-pause-storm").unwrap(),
            vec![
                ("rx_prio3_pause", 4_000_000),
                ("rx_prio3_pause_duration", 90_000_000)
            ]
        );
        let e = write_raised(
            "ib8-symbol-errors",
            &dir.path().join("other"),
            &[("link_downed".into(), 1)],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("raises no counter link_downed") && e.contains("it raises: symbol_error"),
            "{e}"
        );
    }

    #[test]
    fn a_counter_fault_raises_the_healthy_value() {
        let t = SysfsTree::new("ib8-symbol-errors");
        let read = |dev: &str| {
            fs::read_to_string(t.path().join(format!(
                "class/infiniband/{dev}/ports/1/counters/symbol_error"
            )))
            .unwrap()
        };
        assert_eq!(
            read("mlx5_2"),
            format!("{}\n", healthy_counter(2, "symbol_error") + 500)
        );
        assert_eq!(
            read("mlx5_1"),
            format!("{}\n", healthy_counter(1, "symbol_error"))
        );
    }

    #[test]
    fn every_bridge_carries_its_device_s_own_maximum_and_a_slot_can_be_set_to_gen4() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t");
        write("ib8-healthy", &root).unwrap();
        let read = |p: PathBuf| fs::read_to_string(p).unwrap();
        let nic = fs::canonicalize(root.join("class/infiniband/mlx5_0/device")).unwrap();
        let up = nic.parent().unwrap();
        assert_eq!(read(up.join("max_link_speed")), "32.0 GT/s PCIe\n");
        assert_eq!(read(up.join("max_link_width")), "16\n");
        let storage = fs::canonicalize(root.join("class/infiniband/mlx5_8/device")).unwrap();
        let slot = storage.parent().unwrap();
        assert_eq!(read(slot.join("max_link_speed")), "16.0 GT/s PCIe\n");
        let bdf = nic.file_name().unwrap().to_string_lossy().into_owned();
        let bridge = set_slot_max(&root, &bdf, "16.0 GT/s PCIe", 16).unwrap();
        assert_eq!(bridge, up.file_name().unwrap().to_string_lossy());
        assert_eq!(read(up.join("max_link_speed")), "16.0 GT/s PCIe\n");
    }
}
