//! Gather: read everything the checks need, once, from redirectable roots.
//!
//! Sources (kernel ABI: `Documentation/ABI/stable/sysfs-class-infiniband`,
//! `Documentation/ABI/testing/sysfs-class-net`, `Documentation/ABI/testing/sysfs-bus-pci`):
//! - `class/infiniband/<dev>/{fw_ver,hca_type,board_id,node_guid}` and
//!   `ports/<n>/{state,phys_state,rate,link_layer,lid,sm_lid}`, `counters/*`, `hw_counters/*`,
//!   `gid_attrs/{types,ndevs}/<i>`;
//! - the port's netdev (`gid_attrs/ndevs`, else the PCI function's `net/` matched by `dev_port`):
//!   `mtu`, `operstate`, and on mlx5 `ecn/roce_{np,rp}/enable/<prio>`;
//! - PFC pause counters and PFC configuration, which are not in sysfs: the text of
//!   `ethtool -S <if>` and `dcb pfc show dev <if>`, run by absolute path with a short timeout and
//!   no shell, or read from a directory of saved outputs (`<dir>/ethtool-S/<if>`,
//!   `<dir>/dcb-pfc/<if>`; fixtures keep them in `<sysfs-root>/.fabric-check/`);
//! - GPUs from `bus/pci/devices/*/{vendor,class,device,numa_node}`; PCIe ancestry from the
//!   resolved device path; loaded modules from `module/`; the kernel release from
//!   `<proc-root>/sys/kernel/osrelease`.
//!
//! A missing file is "not exposed" (irdma has no `counters/`), never an error. Any other read
//! problem (unreadable, a directory, a symlink loop, longer than a sysfs page, not UTF-8, not a
//! number) becomes a [`Problem`] naming the file, which the probe reports as a finding.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fabric_base::bom::Bom;

/// Sysfs attributes are at most one page; anything longer is not one.
pub const MAX_ATTR_BYTES: usize = 4096;
/// Tool outputs (ethtool -S on a big NIC is tens of KiB) are capped here.
pub const MAX_TOOL_BYTES: usize = 4 << 20;
/// How long `ethtool`/`dcb` may take, all of them together.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the probe reads.
#[derive(Debug, Clone)]
pub struct Roots {
    /// sysfs (`/sys`).
    pub sysfs: PathBuf,
    /// procfs (`/proc`).
    pub proc: PathBuf,
    /// Where PFC counters and configuration come from.
    pub tools: ToolSource,
}

impl Roots {
    /// The roots of a real node: `/sys`, `/proc`, and the tools by absolute path.
    pub fn system() -> Self {
        Self {
            sysfs: PathBuf::from("/sys"),
            proc: PathBuf::from("/proc"),
            tools: ToolSource::Run,
        }
    }

    /// Roots for a sysfs tree: saved tool outputs are taken from `tool_dir`, else from
    /// `<sysfs>/.fabric-check/` when that directory exists (fixtures). The tools themselves are
    /// run only when the tree is this machine's own `/sys`: a copied tree's interface names are
    /// not this machine's, so running `ethtool -S eth0` here would judge the wrong NIC (or
    /// nothing); PFC data is then "not verified".
    pub fn for_sysfs(sysfs: PathBuf, proc: PathBuf, tool_dir: Option<PathBuf>) -> Self {
        let tools = match tool_dir {
            Some(d) => ToolSource::Files(d),
            None => {
                let saved = sysfs.join(".fabric-check");
                if saved.is_dir() {
                    ToolSource::Files(saved)
                } else if is_this_machines_sysfs(&sysfs) {
                    ToolSource::Run
                } else {
                    ToolSource::Unavailable(format!(
                        "--sysfs-root {} is not this machine's /sys, so this machine's ethtool and dcb are not run against its interface names; save their outputs as DIR/ethtool-S/IFACE and DIR/dcb-pfc/IFACE and pass --tool-output-dir DIR",
                        sysfs.display()
                    ))
                }
            }
        };
        Self { sysfs, proc, tools }
    }
}

/// Whether `path` is this machine's `/sys` (itself, or a link to it).
pub fn is_this_machines_sysfs(path: &Path) -> bool {
    match (std::fs::canonicalize(path), std::fs::canonicalize("/sys")) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Where `ethtool -S` and `dcb pfc show` text comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSource {
    /// Run `/usr/sbin/ethtool` (or `/sbin/ethtool`) and `/usr/sbin/dcb` (or `/sbin/dcb`).
    Run,
    /// Read `<dir>/ethtool-S/<if>` and `<dir>/dcb-pfc/<if>` (or `<dir>/mlnx_qos/<if>`).
    Files(PathBuf),
    /// Neither: the sysfs tree is not this machine's and no saved outputs were given (why).
    Unavailable(String),
}

/// A file that exists but could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The check whose input it is.
    pub check: &'static str,
    /// The RDMA device (or GPU/netdev) concerned.
    pub device: Option<String>,
    /// The port concerned.
    pub port: Option<u32>,
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
    /// Whether the probe merely could not look (open/read/list failed): reported as `info`
    /// "not verified", never as a fault. `false`: the content is malformed (`warn`).
    pub unreadable: bool,
}

/// `state`: `4: ACTIVE`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortState {
    /// The number before the colon.
    pub code: u8,
    /// The name after it (`ACTIVE`, `DOWN`, `INIT`, `ARMED`).
    pub name: String,
}

impl PortState {
    /// Whether the port can carry traffic.
    pub fn is_active(&self) -> bool {
        self.code == 4
    }
}

/// `rate`: `400 Gb/sec (4X NDR)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    /// The number of Gb/s.
    pub gbps: f64,
    /// The file's text, trimmed.
    pub text: String,
}

/// One GID table entry whose type could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gid {
    /// Table index.
    pub index: u32,
    /// `IB/RoCE v1` or `RoCE v2`.
    pub kind: String,
    /// The netdev it is bound to.
    pub ndev: Option<String>,
}

/// One RDMA port.
#[derive(Debug, Clone, Default)]
pub struct Port {
    /// Port number (1-based).
    pub num: u32,
    /// `state`.
    pub state: Option<PortState>,
    /// `phys_state` (`5: LinkUp`), trimmed.
    pub phys_state: Option<String>,
    /// `rate`.
    pub rate: Option<Rate>,
    /// `link_layer`.
    pub link_layer: Option<String>,
    /// `lid`.
    pub lid: Option<String>,
    /// `sm_lid`.
    pub sm_lid: Option<String>,
    /// `counters/*` that read as numbers; `None` when the directory is missing.
    pub counters: Option<BTreeMap<String, u64>>,
    /// `counters/*` that read `N/A (no PMA)`.
    pub no_pma: Vec<String>,
    /// `counters/*` whose value was taken from a 64-bit `counters_ext/` file (mlx4:
    /// `port_xmit_data_64` for `port_xmit_data`, `port_unicast_xmit_packets` for
    /// `unicast_xmit_packets`): these never saturate.
    pub counters_64: BTreeSet<String>,
    /// Whether `gid_attrs/types/` could be listed (Ethernet ports): without it the GID table
    /// is not verified, which says nothing about the port.
    pub gid_table_read: bool,
    /// `hw_counters/*` that read as numbers; `None` when the directory is missing.
    pub hw_counters: Option<BTreeMap<String, u64>>,
    /// Populated GID entries (Ethernet ports only).
    pub gids: Vec<Gid>,
    /// The port's netdev.
    pub netdev: Option<String>,
}

impl Port {
    /// Whether the port reads ACTIVE.
    pub fn is_active(&self) -> bool {
        self.state.as_ref().is_some_and(PortState::is_active)
    }

    /// Whether the link layer is Ethernet (RoCE).
    pub fn is_ethernet(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }
}

/// One RDMA device (`class/infiniband/<dev>`).
#[derive(Debug, Clone, Default)]
pub struct Device {
    /// `mlx5_3`.
    pub name: String,
    /// `hca_type` (`MT4129`).
    pub hca_type: Option<String>,
    /// `board_id`.
    pub board_id: Option<String>,
    /// `fw_ver`.
    pub fw_ver: Option<String>,
    /// `node_guid`.
    pub node_guid: Option<String>,
    /// `node_type` (`1: CA`, `4: RNIC` for iWARP).
    pub node_type: Option<String>,
    /// The PCI driver (`mlx5_core`, `ice`).
    pub driver: Option<String>,
    /// The PCI function (`0000:12:00.0`).
    pub pci: Option<String>,
    /// PCI addresses from the root port down to the function.
    pub pci_path: Vec<String>,
    /// `numa_node` of the PCI function (`-1`: none).
    pub numa_node: Option<i32>,
    /// Ports, by number.
    pub ports: Vec<Port>,
}

/// A netdev bound to an RDMA port.
#[derive(Debug, Clone, Default)]
pub struct NetDev {
    /// `ens1np0`.
    pub name: String,
    /// `mtu`.
    pub mtu: Option<u32>,
    /// `operstate`.
    pub operstate: Option<String>,
    /// mlx5 `ecn/roce_np/enable/<prio>` that read 1 or 0; `None` when not exposed.
    pub ecn_np: Option<BTreeMap<u8, bool>>,
    /// mlx5 `ecn/roce_rp/enable/<prio>`.
    pub ecn_rp: Option<BTreeMap<u8, bool>>,
    /// Pause-related `ethtool -S` statistics; `None` when not available.
    pub ethtool: Option<BTreeMap<String, u64>>,
    /// Priorities with PFC enabled (`dcb pfc show`); `None` when not available.
    pub pfc: Option<BTreeSet<u8>>,
    /// Why `ethtool`/`dcb` data is missing, when it is.
    pub tool_note: Option<String>,
}

/// An NVIDIA GPU on the PCI bus.
#[derive(Debug, Clone, Default)]
pub struct Gpu {
    /// PCI address.
    pub pci: String,
    /// PCI device id (`0x2330`).
    pub device_id: String,
    /// Marketing name where the device id is known.
    pub model: Option<&'static str>,
    /// `numa_node`.
    pub numa_node: Option<i32>,
    /// PCI addresses from the root port down.
    pub pci_path: Vec<String>,
}

/// Everything read in one pass.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// When the gather started (ms since the Unix epoch).
    pub taken_unix_ms: u64,
    /// RDMA devices, sorted by name.
    pub devices: Vec<Device>,
    /// Netdevs bound to RDMA ports.
    pub netdevs: BTreeMap<String, NetDev>,
    /// NVIDIA GPUs, sorted by PCI address.
    pub gpus: Vec<Gpu>,
    /// Loaded kernel modules (`module/*`).
    pub modules: BTreeSet<String>,
    /// `module/<m>/version` for the modules that have one.
    pub module_versions: BTreeMap<String, String>,
    /// `<proc>/sys/kernel/osrelease`.
    pub kernel_release: Option<String>,
    /// `<proc>/driver/nvidia/version`, first line.
    pub nvidia_proc_version: Option<String>,
    /// Files that exist but could not be used.
    pub problems: Vec<Problem>,
    /// Why `bus/pci/devices/` could not be listed (GPUs not counted), when it could not.
    pub gpus_unreadable: Option<String>,
    /// Why `module/` could not be listed (loaded modules unknown), when it could not.
    pub modules_unreadable: Option<String>,
}

impl Snapshot {
    /// The node's bill of materials ([`Bom`]) as this snapshot shows it.
    pub fn bom(&self, node: &str) -> Bom {
        let snap = self;
        let mut items = BTreeMap::new();
        let mut put = |k: String, v: Option<String>| {
            if let Some(v) = v {
                items.insert(k, v);
            }
        };
        put("kernel".into(), snap.kernel_release.clone());
        for d in &snap.devices {
            let h = format!("hca/{}", d.name);
            put(format!("{h}/model"), d.hca_type.clone());
            put(format!("{h}/board_id"), d.board_id.clone());
            put(format!("{h}/fw_ver"), d.fw_ver.clone());
            put(format!("{h}/driver"), d.driver.clone());
            for p in &d.ports {
                let pk = format!("{h}/port{}", p.num);
                put(format!("{pk}/link_layer"), p.link_layer.clone());
                if p.is_active() {
                    put(
                        format!("{pk}/rate"),
                        p.rate.as_ref().map(|r| r.text.clone()),
                    );
                }
                let mtu = p
                    .netdev
                    .as_ref()
                    .and_then(|n| snap.netdevs.get(n))
                    .and_then(|n| n.mtu);
                put(format!("{pk}/mtu"), mtu.map(|m| m.to_string()));
            }
        }
        put("gpu/count".into(), Some(snap.gpus.len().to_string()));
        for g in &snap.gpus {
            put(
                format!("gpu/{}/model", g.pci),
                Some(g.model.map_or_else(
                    || format!("10de:{}", g.device_id.trim_start_matches("0x")),
                    str::to_string,
                )),
            );
        }
        for (m, v) in &snap.module_versions {
            put(format!("module/{m}/version"), Some(v.clone()));
        }
        Bom {
            schema: fabric_base::bom::SCHEMA.to_string(),
            node: node.to_string(),
            items,
        }
    }
}

/// How one attribute read went.
#[derive(Debug)]
enum Read1 {
    Missing,
    Text(String),
    /// The file is there but could not be opened or read (permissions, EINVAL, EIO): the
    /// probe could not look, which says nothing about the port.
    Unreadable(String),
    /// The file was read but is not what the attribute holds (too long, not UTF-8).
    Bad(String),
}

fn read_capped(path: &Path, cap: usize) -> Read1 {
    // O_NONBLOCK: a FIFO planted in the tree must not hang the probe (no effect on files).
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Read1::Missing,
        Err(e) => return Read1::Unreadable(format!("cannot open: {e}")),
    };
    let buf = if cap <= MAX_ATTR_BYTES {
        // One read: sysfs hands an attribute over whole (at most a page) and a regular file's
        // read returns everything up to the size asked for; one syscall fewer per file.
        let mut page = [0u8; MAX_ATTR_BYTES + 1];
        let want = cap + 1;
        match file.read(&mut page[..want]) {
            Ok(n) => page[..n].to_vec(),
            Err(e) => return Read1::Unreadable(format!("cannot read: {e}")),
        }
    } else {
        let mut v = Vec::new();
        if let Err(e) = file.take(cap as u64 + 1).read_to_end(&mut v) {
            return Read1::Unreadable(format!("cannot read: {e}"));
        }
        v
    };
    if buf.len() > cap {
        return Read1::Bad(format!(
            "longer than {cap} bytes, which no sysfs attribute is"
        ));
    }
    match String::from_utf8(buf) {
        Ok(s) => Read1::Text(s.trim().to_string()),
        Err(_) => Read1::Bad("not UTF-8 text".to_string()),
    }
}

/// Where a sysfs symlink points, resolved lexically against its own directory (sysfs links are
/// relative and `devices/` has no further links, so this equals the canonical path without a
/// syscall per component).
fn resolve_link(path: &Path) -> Option<PathBuf> {
    let target = std::fs::read_link(path).ok()?;
    let joined = path.parent().unwrap_or(Path::new("")).join(target);
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// Collects problems while reading.
struct Reader<'a> {
    problems: &'a mut Vec<Problem>,
}

impl Reader<'_> {
    fn problem(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        path: &Path,
        message: String,
    ) {
        self.push(check, dev, port, path, message, false);
    }

    /// Records a file or directory that could not be opened, read or listed.
    fn unreadable(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        path: &Path,
        message: String,
    ) {
        self.push(check, dev, port, path, message, true);
    }

    fn push(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        path: &Path,
        message: String,
        unreadable: bool,
    ) {
        self.problems.push(Problem {
            check,
            device: dev.map(str::to_string),
            port,
            path: path.to_path_buf(),
            message,
            unreadable,
        });
    }

    /// A text attribute every port has (`state`, `rate`, `link_layer`): a missing one is
    /// recorded as "could not look" too.
    fn required_text(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        path: &Path,
    ) -> Option<String> {
        if let Read1::Missing = read_capped(path, MAX_ATTR_BYTES)
            && std::fs::symlink_metadata(path).is_err()
        {
            self.unreadable(
                check,
                dev,
                port,
                path,
                "no such file (the driver does not expose it)".to_string(),
            );
            return None;
        }
        self.text(check, dev, port, path)
    }

    /// A required attribute parsed by `parse`; text that does not parse is recorded as "not
    /// <what>".
    fn required_parsed<T>(
        &mut self,
        (check, dev, port): (&'static str, Option<&str>, Option<u32>),
        path: &Path,
        parse: impl Fn(&str) -> Option<T>,
        what: &str,
    ) -> Option<T> {
        let text = self.required_text(check, dev, port, path)?;
        let parsed = parse(&text);
        if parsed.is_none() {
            self.problem(check, dev, port, path, format!("not {what}: {text:?}"));
        }
        parsed
    }

    /// A text attribute; `None` when missing or bad (bad ones are recorded).
    fn text(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        path: &Path,
    ) -> Option<String> {
        match read_capped(path, MAX_ATTR_BYTES) {
            Read1::Missing => None,
            Read1::Text(s) => Some(s),
            Read1::Unreadable(m) => {
                self.unreadable(check, dev, port, path, m);
                None
            }
            Read1::Bad(m) => {
                self.problem(check, dev, port, path, m);
                None
            }
        }
    }
}

fn list_dir(path: &Path) -> std::io::Result<Vec<String>> {
    let mut v: Vec<String> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort_by(|a, b| natural_cmp(a, b));
    Ok(v)
}

/// `mlx5_2` before `mlx5_10`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |s: &str| {
        let cut = s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (head, tail) = s.split_at(cut);
        (
            head.to_string(),
            tail.parse::<u64>().unwrap_or(0),
            s.to_string(),
        )
    };
    split(a).cmp(&split(b))
}

fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// PCI addresses along a resolved device path, root port first.
fn pci_chain(resolved: &Path) -> Vec<String> {
    resolved
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .filter(|s| is_bdf(s))
        .map(str::to_string)
        .collect()
}

/// Parses `4: ACTIVE`.
pub fn parse_state(s: &str) -> Option<PortState> {
    let (code, name) = s.split_once(':')?;
    Some(PortState {
        code: code.trim().parse().ok()?,
        name: name.trim().to_string(),
    })
}

/// Parses `400 Gb/sec (4X NDR)` or `2.5 Gb/sec (1X SDR)`.
pub fn parse_rate(s: &str) -> Option<Rate> {
    let num = s.split_whitespace().next()?;
    let gbps: f64 = num.parse().ok()?;
    if !gbps.is_finite() || gbps < 0.0 || !s.contains("Gb/sec") {
        return None;
    }
    Some(Rate {
        gbps,
        text: s.to_string(),
    })
}

/// Parses a counter file's text: `Ok(Some(n))`, `Ok(None)` for `N/A (no PMA)`, `Err` otherwise.
pub fn parse_counter(s: &str) -> Result<Option<u64>, String> {
    if s.starts_with("N/A") {
        return Ok(None);
    }
    if s.is_empty() {
        return Err("empty (a counter file holds a number)".to_string());
    }
    s.parse::<u64>().map(Some).map_err(|e| {
        let shown: String = s.chars().take(40).collect();
        format!("not a counter value ({e}): {shown:?}")
    })
}

fn read_counters(
    r: &mut Reader<'_>,
    dir: &Path,
    check: &'static str,
    dev: &str,
    port: u32,
    no_pma: Option<&mut Vec<String>>,
) -> Option<BTreeMap<String, u64>> {
    let names = match list_dir(dir) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            r.unreadable(
                check,
                Some(dev),
                Some(port),
                dir,
                format!("cannot list: {e}"),
            );
            return None;
        }
    };
    let mut out = BTreeMap::new();
    let mut na = Vec::new();
    for name in names {
        if name == "lifespan" {
            // mlx5's hw_counters refresh interval in ms: a setting, not a counter.
            continue;
        }
        let path = dir.join(&name);
        match read_capped(&path, MAX_ATTR_BYTES) {
            Read1::Missing => {}
            Read1::Unreadable(m) => r.unreadable(check, Some(dev), Some(port), &path, m),
            Read1::Bad(m) => r.problem(check, Some(dev), Some(port), &path, m),
            Read1::Text(t) => match parse_counter(&t) {
                Ok(Some(v)) => {
                    out.insert(name, v);
                }
                Ok(None) => na.push(name),
                Err(m) => r.problem(check, Some(dev), Some(port), &path, m),
            },
        }
    }
    if let Some(v) = no_pma {
        *v = na;
    }
    Some(out)
}

/// The `counters/` name a `counters_ext/` file is the 64-bit copy of: `port_xmit_data_64` →
/// `port_xmit_data`, `port_unicast_rcv_packets` → `unicast_rcv_packets`.
pub fn counters_ext_legacy_name(name: &str) -> String {
    if let Some(base) = name.strip_suffix("_64") {
        return base.to_string();
    }
    for cast in ["port_unicast_", "port_multicast_"] {
        if let Some(rest) = name.strip_prefix(cast) {
            return format!("{}{rest}", &cast["port_".len()..]);
        }
    }
    name.to_string()
}

/// Which check a hw_counter belongs to, for naming read problems.
fn hw_counter_check(name: &str) -> &'static str {
    if name.contains("cnp") || name.contains("ecn") {
        "roce.congestion"
    } else {
        "roce.retrans"
    }
}

fn gather_port(r: &mut Reader<'_>, dev: &str, dev_dir: &Path, num: u32) -> Port {
    let p = dev_dir.join("ports").join(num.to_string());
    let mut port = Port {
        num,
        ..Port::default()
    };
    let d = Some(dev);
    let n = Some(num);
    port.state = r.required_parsed(
        ("ib.port_state", d, n),
        &p.join("state"),
        parse_state,
        "a port state",
    );
    port.phys_state = r.text("ib.port_state", d, n, &p.join("phys_state"));
    port.rate = r.required_parsed(
        ("ib.port_rate", d, n),
        &p.join("rate"),
        parse_rate,
        "a rate",
    );
    port.link_layer = r.required_text("ib.link_layer", d, n, &p.join("link_layer"));
    port.lid = r.text("ib.port_state", d, n, &p.join("lid"));
    port.sm_lid = r.text("ib.port_state", d, n, &p.join("sm_lid"));
    let mut no_pma = Vec::new();
    port.counters = read_counters(
        r,
        &p.join("counters"),
        "ib.counters",
        dev,
        num,
        Some(&mut no_pma),
    );
    port.no_pma = no_pma;
    if let Some(counters) = port.counters.as_mut() {
        let ext = read_counters(r, &p.join("counters_ext"), "ib.counters", dev, num, None);
        for (name, v) in ext.unwrap_or_default() {
            let legacy = counters_ext_legacy_name(&name);
            counters.insert(legacy.clone(), v);
            port.counters_64.insert(legacy);
        }
    }
    // hw_counters problems are attributed by name after the fact.
    let before = r.problems.len();
    port.hw_counters = read_counters(r, &p.join("hw_counters"), "roce.retrans", dev, num, None);
    for prob in &mut r.problems[before..] {
        if let Some(name) = prob.path.file_name().and_then(|s| s.to_str()) {
            prob.check = hw_counter_check(name);
        }
    }
    if port.is_ethernet() {
        let types = p.join("gid_attrs").join("types");
        if let Ok(idx) = list_dir(&types) {
            port.gid_table_read = true;
            for i in idx {
                let Ok(index) = i.parse::<u32>() else {
                    continue;
                };
                // Unpopulated entries fail with EINVAL on real sysfs: not a problem.
                let Read1::Text(kind) = read_capped(&types.join(&i), MAX_ATTR_BYTES) else {
                    continue;
                };
                let ndev = match read_capped(
                    &p.join("gid_attrs").join("ndevs").join(&i),
                    MAX_ATTR_BYTES,
                ) {
                    Read1::Text(s) if !s.is_empty() => Some(s),
                    _ => None,
                };
                port.gids.push(Gid { index, kind, ndev });
            }
        }
        port.netdev = port.gids.iter().find_map(|g| g.ndev.clone());
    }
    if port.netdev.is_none() {
        port.netdev = netdev_by_dev_port(dev_dir, num);
    }
    port
}

/// The PCI function's netdev whose `dev_port` is `port - 1` (missing `dev_port` reads as 0).
fn netdev_by_dev_port(dev_dir: &Path, port: u32) -> Option<String> {
    let net = dev_dir.join("device").join("net");
    let names = list_dir(&net).ok()?;
    let want = port.saturating_sub(1);
    names.into_iter().find(|n| {
        let dp = match read_capped(&net.join(n).join("dev_port"), MAX_ATTR_BYTES) {
            Read1::Text(s) => s.parse::<u32>().unwrap_or(0),
            _ => 0,
        };
        dp == want
    })
}

fn gather_device(r: &mut Reader<'_>, class_dir: &Path, name: &str) -> Option<Device> {
    let dev_dir = class_dir.join(name);
    let d = Some(name);
    if let Err(e) = std::fs::metadata(&dev_dir) {
        r.unreadable(
            "ib.port_count",
            d,
            None,
            &dev_dir,
            format!("cannot resolve: {e}; the device is not counted"),
        );
        return None;
    }
    let mut dev = Device {
        name: name.to_string(),
        ..Device::default()
    };
    dev.fw_ver = r.text("bom.drift", d, None, &dev_dir.join("fw_ver"));
    dev.hca_type = r.text("bom.drift", d, None, &dev_dir.join("hca_type"));
    dev.board_id = r.text("bom.drift", d, None, &dev_dir.join("board_id"));
    dev.node_guid = r.text("bom.drift", d, None, &dev_dir.join("node_guid"));
    dev.node_type = r.text("ib.link_layer", d, None, &dev_dir.join("node_type"));
    if let Some(resolved) = resolve_link(&dev_dir) {
        dev.pci_path = pci_chain(&resolved);
        dev.pci = dev.pci_path.last().cloned();
    }
    let pci = dev_dir.join("device");
    dev.numa_node = match read_capped(&pci.join("numa_node"), MAX_ATTR_BYTES) {
        Read1::Text(s) => s.parse().ok(),
        _ => None,
    };
    dev.driver = std::fs::read_link(pci.join("driver"))
        .ok()
        .and_then(|l| l.file_name().and_then(|s| s.to_str()).map(str::to_string));
    let ports_dir = dev_dir.join("ports");
    match list_dir(&ports_dir) {
        Ok(ports) => {
            for p in ports {
                match p.parse::<u32>() {
                    Ok(num) => dev.ports.push(gather_port(r, name, &dev_dir, num)),
                    Err(_) => r.problem(
                        "ib.port_count",
                        d,
                        None,
                        &ports_dir.join(&p),
                        "not a port number".into(),
                    ),
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => r.unreadable(
            "ib.port_count",
            d,
            None,
            &ports_dir,
            format!("cannot list: {e}"),
        ),
    }
    dev.ports.sort_by_key(|p| p.num);
    Some(dev)
}

fn gather_netdev(r: &mut Reader<'_>, sysfs: &Path, name: &str, dev: &str, port: u32) -> NetDev {
    let dir = sysfs.join("class").join("net").join(name);
    let d = Some(dev);
    let n = Some(port);
    let mut nd = NetDev {
        name: name.to_string(),
        ..NetDev::default()
    };
    nd.mtu = r
        .text("roce.mtu", d, n, &dir.join("mtu"))
        .and_then(|s| match s.parse() {
            Ok(v) => Some(v),
            Err(_) => {
                r.problem(
                    "roce.mtu",
                    d,
                    n,
                    &dir.join("mtu"),
                    format!("not an MTU: {s:?}"),
                );
                None
            }
        });
    nd.operstate = r.text("ib.port_state", d, n, &dir.join("operstate"));
    let ecn = |r: &mut Reader<'_>, side: &str| -> Option<BTreeMap<u8, bool>> {
        let base = dir.join("ecn").join(side).join("enable");
        let prios = list_dir(&base).ok()?;
        let mut m = BTreeMap::new();
        for p in prios {
            let Ok(q) = p.parse::<u8>() else { continue };
            let path = base.join(&p);
            match r.text("roce.ecn", d, n, &path).as_deref() {
                Some("1") => {
                    m.insert(q, true);
                }
                Some("0") => {
                    m.insert(q, false);
                }
                Some(other) => r.problem(
                    "roce.ecn",
                    d,
                    n,
                    &path,
                    format!("expected 0 or 1, read {other:?}"),
                ),
                None => {}
            }
        }
        Some(m)
    };
    nd.ecn_np = ecn(r, "roce_np");
    nd.ecn_rp = ecn(r, "roce_rp");
    nd
}

pub use super::pause::{parse_ethtool_stats, parse_pfc_config};

/// Priorities with PFC on, from `dcb pfc show` or `mlnx_qos` text (see [`parse_pfc_config`]).
pub fn parse_dcb_pfc(text: &str) -> Option<BTreeSet<u8>> {
    parse_pfc_config(text)
}

fn find_tool(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Runs `tool args...` (absolute path, no shell) for each netdev concurrently, bounded by
/// [`TOOL_TIMEOUT`] for all of them together. Returns, per netdev, the text or why not.
fn run_tool_each(
    tool: &str,
    args: &[&str],
    ifs: &[String],
) -> BTreeMap<String, Result<String, String>> {
    let mut out = BTreeMap::new();
    let Some(bin) = find_tool(tool) else {
        for i in ifs {
            out.insert(
                i.clone(),
                Err(format!(
                    "{tool} not found in /usr/sbin or /sbin; install it to read PFC data"
                )),
            );
        }
        return out;
    };
    let mut running = Vec::new();
    for i in ifs {
        let child = Command::new(&bin)
            .args(args)
            .arg(i)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(mut c) => {
                let stdout = c.stdout.take();
                let reader = std::thread::spawn(move || {
                    let mut s = String::new();
                    if let Some(o) = stdout {
                        let _ = o.take(MAX_TOOL_BYTES as u64).read_to_string(&mut s);
                    }
                    s
                });
                running.push((i.clone(), c, reader));
            }
            Err(e) => {
                out.insert(i.clone(), Err(format!("cannot run {}: {e}", bin.display())));
            }
        }
    }
    let deadline = Instant::now() + TOOL_TIMEOUT;
    for (i, mut c, reader) in running {
        let status = loop {
            match c.try_wait() {
                Ok(Some(s)) => break Ok(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Ok(None) => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break Err(format!(
                        "{} {} {i} took longer than {:?}; killed",
                        bin.display(),
                        args.join(" "),
                        TOOL_TIMEOUT
                    ));
                }
                Err(e) => break Err(format!("waiting for {}: {e}", bin.display())),
            }
        };
        let text = reader.join().unwrap_or_default();
        let res = match status {
            Ok(s) if s.success() => Ok(text),
            Ok(s) => Err(format!(
                "{} {} {i} exited with {s}",
                bin.display(),
                args.join(" ")
            )),
            Err(m) => Err(m),
        };
        out.insert(i, res);
    }
    out
}

fn gather_tools(
    r: &mut Reader<'_>,
    tools: &ToolSource,
    netdevs: &mut BTreeMap<String, NetDev>,
    roce: &[(String, String, u32)],
) {
    if roce.is_empty() {
        return;
    }
    let names: Vec<String> = roce.iter().map(|(n, _, _)| n.clone()).collect();
    let (stats, pfc): (BTreeMap<_, _>, BTreeMap<_, _>) = match tools {
        ToolSource::Files(dir) => {
            let mut read = |sub: &str,
                            check: &'static str|
             -> BTreeMap<String, Result<String, String>> {
                roce.iter()
                    .map(|(nd, dev, port)| {
                        let path = dir.join(sub).join(nd);
                        let res = match read_capped(&path, MAX_TOOL_BYTES) {
                            Read1::Text(t) => Ok(t),
                            Read1::Missing => Err(format!("no saved output at {}", path.display())),
                            Read1::Unreadable(m) => Err(format!("{}: {m}", path.display())),
                            Read1::Bad(m) => {
                                r.problem(check, Some(dev), Some(*port), &path, m.clone());
                                Err(m)
                            }
                        };
                        (nd.clone(), res)
                    })
                    .collect()
            };
            let stats = read("ethtool-S", "roce.congestion");
            let mut pfc = read("dcb-pfc", "roce.pfc");
            // mlnx_qos output is the other way to save the PFC configuration.
            if let Ok(qos) =
                std::fs::read_dir(dir.join("mlnx_qos")).map(|_| read("mlnx_qos", "roce.pfc"))
            {
                for (nd, res) in qos {
                    if res.is_ok() && pfc.get(&nd).is_some_and(|r| r.is_err()) {
                        pfc.insert(nd, res);
                    }
                }
            }
            (stats, pfc)
        }
        ToolSource::Run => (
            run_tool_each("ethtool", &["-S"], &names),
            run_tool_each("dcb", &["pfc", "show", "dev"], &names),
        ),
        ToolSource::Unavailable(why) => {
            let all = || -> BTreeMap<String, Result<String, String>> {
                names
                    .iter()
                    .map(|n| (n.clone(), Err(why.clone())))
                    .collect()
            };
            (all(), BTreeMap::new())
        }
    };
    for (name, nd) in netdevs.iter_mut() {
        let mut notes = Vec::new();
        match stats.get(name) {
            Some(Ok(t)) => nd.ethtool = Some(parse_ethtool_stats(t)),
            Some(Err(m)) => notes.push(m.clone()),
            None => {}
        }
        match pfc.get(name) {
            Some(Ok(t)) => {
                nd.pfc = parse_dcb_pfc(t);
                if nd.pfc.is_none() {
                    notes.push(
                        "the PFC output has neither a dcb prio-pfc/pg-pfc line nor an mlnx_qos PFC configuration block (a layout the probe does not know)".to_string(),
                    );
                }
            }
            Some(Err(m)) => notes.push(m.clone()),
            None => {}
        }
        if !notes.is_empty() {
            nd.tool_note = Some(notes.join("; "));
        }
    }
}

/// PCI device ids of data-centre GPUs, for the BOM and messages. Unknown ids stay numeric.
pub fn gpu_model(device_id: &str) -> Option<&'static str> {
    Some(match device_id {
        "0x20b0" => "A100-SXM4-40GB",
        "0x20b2" => "A100-SXM4-80GB",
        "0x20b5" => "A100-PCIE-80GB",
        "0x20f1" => "A100-PCIE-40GB",
        "0x2330" => "H100-SXM5-80GB",
        "0x2331" => "H100-PCIE-80GB",
        "0x2335" => "H200-SXM-141GB",
        "0x2324" => "H800",
        "0x26b9" => "L40S",
        "0x2901" => "B200",
        _ => return None,
    })
}

fn gather_gpus(r: &mut Reader<'_>, sysfs: &Path) -> Result<Vec<Gpu>, String> {
    let bus = sysfs.join("bus").join("pci").join("devices");
    let names = list_dir(&bus).map_err(|e| format!("cannot list {}: {e}", bus.display()))?;
    let mut gpus = Vec::new();
    for n in names {
        let dir = bus.join(&n);
        let Read1::Text(vendor) = read_capped(&dir.join("vendor"), MAX_ATTR_BYTES) else {
            continue;
        };
        if vendor != "0x10de" {
            continue;
        }
        let class = r
            .text("gpu.count", Some(&n), None, &dir.join("class"))
            .unwrap_or_default();
        // 0x0300xx VGA, 0x0302xx 3D controller (PCI code and ID assignment spec).
        if !(class.starts_with("0x0300") || class.starts_with("0x0302")) {
            continue;
        }
        let device_id = r
            .text("gpu.count", Some(&n), None, &dir.join("device"))
            .unwrap_or_default();
        let numa_node = match read_capped(&dir.join("numa_node"), MAX_ATTR_BYTES) {
            Read1::Text(s) => s.parse().ok(),
            _ => None,
        };
        let pci_path = resolve_link(&dir)
            .map(|p| pci_chain(&p))
            .unwrap_or_default();
        gpus.push(Gpu {
            pci: n.clone(),
            model: gpu_model(&device_id),
            device_id,
            numa_node,
            pci_path,
        });
    }
    Ok(gpus)
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Reads everything once. Never fails: what cannot be read is recorded in `problems`.
pub fn gather(roots: &Roots, ignore: impl Fn(&str) -> bool) -> Snapshot {
    let mut snap = Snapshot {
        taken_unix_ms: unix_ms(),
        ..Snapshot::default()
    };
    let mut problems = Vec::new();
    let mut r = Reader {
        problems: &mut problems,
    };
    let class = roots.sysfs.join("class").join("infiniband");
    match list_dir(&class) {
        Ok(names) => {
            for name in names.iter().filter(|n| !ignore(n)) {
                if let Some(d) = gather_device(&mut r, &class, name) {
                    snap.devices.push(d);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => r.unreadable(
            "ib.port_count",
            None,
            None,
            &class,
            format!("cannot list: {e}"),
        ),
    }
    let mut roce = Vec::new();
    for dev in &snap.devices {
        for port in &dev.ports {
            if let Some(nd) = &port.netdev {
                if snap.netdevs.contains_key(nd) {
                    continue;
                }
                let n = gather_netdev(&mut r, &roots.sysfs, nd, &dev.name, port.num);
                if port.is_ethernet() {
                    roce.push((nd.clone(), dev.name.clone(), port.num));
                }
                snap.netdevs.insert(nd.clone(), n);
            }
        }
    }
    gather_tools(&mut r, &roots.tools, &mut snap.netdevs, &roce);
    match gather_gpus(&mut r, &roots.sysfs) {
        Ok(g) => snap.gpus = g,
        Err(why) => snap.gpus_unreadable = Some(why),
    }
    let module_dir = roots.sysfs.join("module");
    match list_dir(&module_dir) {
        Ok(_) => {}
        Err(e) => {
            snap.modules_unreadable = Some(format!("cannot list {}: {e}", module_dir.display()))
        }
    }
    if let Ok(mods) = list_dir(&module_dir) {
        for m in mods {
            if let Read1::Text(v) = read_capped(
                &roots.sysfs.join("module").join(&m).join("version"),
                MAX_ATTR_BYTES,
            ) {
                snap.module_versions.insert(m.clone(), v);
            }
            snap.modules.insert(m);
        }
    }
    if let Read1::Text(k) = read_capped(&roots.proc.join("sys/kernel/osrelease"), MAX_ATTR_BYTES) {
        snap.kernel_release = Some(k);
    }
    if let Read1::Text(v) = read_capped(&roots.proc.join("driver/nvidia/version"), MAX_ATTR_BYTES) {
        snap.nvidia_proc_version = v.lines().next().map(str::to_string);
    }
    snap.problems = problems;
    snap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_states_and_rates_parse_as_the_kernel_prints_them() {
        assert_eq!(
            parse_state("4: ACTIVE"),
            Some(PortState {
                code: 4,
                name: "ACTIVE".into()
            })
        );
        assert_eq!(parse_state("ACTIVE"), None);
        assert_eq!(parse_rate("400 Gb/sec (4X NDR)").unwrap().gbps, 400.0);
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)").unwrap().gbps, 2.5);
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(parse_rate("NaN Gb/sec"), None);
    }

    #[test]
    fn counter_text_is_a_number_or_no_pma_or_an_error() {
        assert_eq!(parse_counter("42"), Ok(Some(42)));
        assert_eq!(parse_counter("N/A (no PMA)"), Ok(None));
        assert!(parse_counter("").unwrap_err().contains("empty"));
        assert!(parse_counter("abc").unwrap_err().contains("not a counter"));
        assert!(parse_counter("99999999999999999999999").is_err());
    }

    #[test]
    fn ethtool_output_keeps_only_pause_statistics() {
        let s = parse_ethtool_stats(
            "NIC statistics:\n     rx_packets: 5\n     rx_prio3_pause: 7\n     tx_pause_storm_error_events: 0\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s["rx_prio3_pause"], 7);
    }

    #[test]
    fn dcb_output_gives_the_pfc_priorities() {
        let on = parse_dcb_pfc("pfc-cap 8 macsec-bypass off delay 0 \nprio-pfc 0:off 1:off 2:off 3:on 4:off 5:on 6:off 7:off \n").unwrap();
        assert_eq!(on.into_iter().collect::<Vec<_>>(), [3, 5]);
        assert_eq!(parse_dcb_pfc("garbage"), None);
    }

    #[test]
    fn device_names_sort_naturally() {
        let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_1"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["mlx5_1", "mlx5_2", "mlx5_10"]);
    }

    #[test]
    fn oversized_files_are_bad_and_loops_and_directories_unreadable_never_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, "9".repeat(MAX_ATTR_BYTES + 1)).unwrap();
        assert!(matches!(read_capped(&big, MAX_ATTR_BYTES), Read1::Bad(m) if m.contains("longer")));
        let lp = dir.path().join("loop");
        std::os::unix::fs::symlink("loop", &lp).unwrap();
        assert!(matches!(
            read_capped(&lp, MAX_ATTR_BYTES),
            Read1::Unreadable(_)
        ));
        assert!(matches!(
            read_capped(&dir.path().join("nope"), MAX_ATTR_BYTES),
            Read1::Missing
        ));
        assert!(matches!(
            read_capped(dir.path(), MAX_ATTR_BYTES),
            Read1::Unreadable(_)
        ));
    }

    #[test]
    fn a_fifo_without_a_writer_reads_as_empty_instead_of_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        assert!(matches!(read_capped(&fifo, MAX_ATTR_BYTES), Read1::Text(t) if t.is_empty()));
    }
}
