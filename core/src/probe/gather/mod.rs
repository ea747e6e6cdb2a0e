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
//! - GPUs (vendor `0x10de` NVIDIA or `0x1002` AMD, class `0x0300xx`/`0x0302xx`) from
//!   `bus/pci/devices/*/{vendor,class,device,numa_node}`; the PCIe link of each HCA's PCI
//!   function and each GPU from `{current,max}_link_{speed,width}`; PCIe ancestry from the
//!   resolved device path; loaded modules from `module/`; the kernel release from
//!   `<proc-root>/sys/kernel/osrelease`, `<proc-root>/uptime`.
//!
//! A missing file is "not exposed" (irdma has no `counters/`), never an error. Any other read
//! problem (unreadable, a directory, a symlink loop, longer than a sysfs page, not UTF-8, not a
//! number) becomes a [`Problem`] naming the file, which the probe reports as a finding.
//!
//! Layout: `snapshot.rs` holds the types the checks read ([`Snapshot`] and its parts),
//! `sysfs.rs` walks sysfs (and procfs), `tools.rs` runs or reads `ethtool -S` and
//! `dcb pfc show`; [`gather`] here ties them together.

mod dir;
mod snapshot;
mod sysfs;
mod tools;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use dir::Dir;
pub use snapshot::*;
pub use sysfs::{
    counters_ext_legacy_name, device_age_s, gpu_model, natural_cmp, parse_counter,
    parse_pcie_speed, parse_pcie_width, parse_rate, parse_state,
};
pub use tools::{parse_dcb_pfc, parse_ethtool_stats, parse_pfc_config};

use sysfs::{Read1, Reader, gather_device, gather_gpus, gather_netdev, read_capped};
use tools::gather_tools;

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
    // `bus/pci/devices/` is listed here, for the GPUs below, and its descriptor serves the
    // slot maxima of every HCA and GPU.
    let bus_path = roots.sysfs.join("bus").join("pci").join("devices");
    let (bus, bus_names) = match Dir::list(bus_path.clone()) {
        Ok((d, names)) => (d, Ok(names)),
        Err(e) => (Dir::open(bus_path), Err(e)),
    };
    let class = roots.sysfs.join("class").join("infiniband");
    match Dir::list(class.clone()) {
        Ok((class_dir, names)) => {
            for name in names.iter().filter(|n| !ignore(n)) {
                if let Some(d) = gather_device(&mut r, (&class_dir, &bus), name) {
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
    match gather_gpus(&mut r, &bus, bus_names) {
        Ok(g) => snap.gpus = g,
        Err(why) => snap.gpus_unreadable = Some(why),
    }
    let module_dir = roots.sysfs.join("module");
    // Listed once (it was listed twice), each `version` opened relative to the directory.
    match Dir::list(module_dir.clone()) {
        Ok((dir, mods)) => {
            for m in mods {
                if let Read1::Text(v) = dir.read(&format!("{m}/version"), MAX_ATTR_BYTES) {
                    snap.module_versions.insert(m.clone(), v);
                }
                snap.modules.insert(m);
            }
        }
        Err(e) => {
            snap.modules_unreadable = Some(format!("cannot list {}: {e}", module_dir.display()))
        }
    }
    if let Read1::Text(k) = read_capped(&roots.proc.join("sys/kernel/osrelease"), MAX_ATTR_BYTES) {
        snap.kernel_release = Some(k);
    }
    if let Read1::Text(u) = read_capped(&roots.proc.join("uptime"), MAX_ATTR_BYTES) {
        snap.uptime_s = u
            .split_whitespace()
            .next()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0);
    }
    if let Read1::Text(v) = read_capped(&roots.proc.join("driver/nvidia/version"), MAX_ATTR_BYTES) {
        snap.nvidia_proc_version = v.lines().next().map(str::to_string);
    }
    snap.problems = problems;
    snap
}
