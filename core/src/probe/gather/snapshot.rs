//! The snapshot: everything one gather read, as the checks see it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use fabric_base::bom::Bom;

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

    /// Whether the port is on its way up: `INIT` or `ARMED` (the subnet manager has not made it
    /// ACTIVE yet), or its physical link in `PortConfigurationTraining`.
    pub fn is_training(&self) -> bool {
        self.state.as_ref().is_some_and(|s| matches!(s.code, 2 | 3))
            || self
                .phys_state
                .as_deref()
                .is_some_and(|s| s.contains("Training"))
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
    /// The PCIe link of the PCI function (`device/{current,max}_link_{speed,width}`).
    pub pcie: PcieLink,
    /// How long ago its `ports/` folder appeared (sysfs dates an entry when the driver makes
    /// it), in seconds: a driver reload or firmware reset restarts it as a boot does. `None`
    /// when it cannot be told.
    pub age_s: Option<f64>,
}

/// A PCIe link as the function's `current_link_speed`, `current_link_width`, `max_link_speed`
/// and `max_link_width` show it. `None`: the file is missing, reads `Unknown`, or could not be
/// used (a [`Problem`] says which) — the probe could not look.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PcieLink {
    /// The trained speed in GT/s (`16.0 GT/s PCIe` → 16.0; `8 GT/s` on older kernels).
    pub cur_gts: Option<f64>,
    /// The trained width in lanes (`16`).
    pub cur_width: Option<u32>,
    /// The highest speed the function supports, in GT/s.
    pub max_gts: Option<f64>,
    /// The widest link the function supports, in lanes.
    pub max_width: Option<u32>,
    /// The highest speed its slot supports: the upstream port's `max_link_speed`, in GT/s.
    pub slot_max_gts: Option<f64>,
    /// The widest link its slot supports: the upstream port's `max_link_width`, in lanes.
    pub slot_max_width: Option<u32>,
}

impl PcieLink {
    /// Whether none of the function's own files could be read (no PCI function, as for
    /// `rxe`/`siw`).
    pub fn is_absent(&self) -> bool {
        self.cur_gts.is_none()
            && self.cur_width.is_none()
            && self.max_gts.is_none()
            && self.max_width.is_none()
    }
}

/// Who made a GPU (PCI vendor id).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum GpuVendor {
    /// `0x10de`.
    #[default]
    Nvidia,
    /// `0x1002`.
    Amd,
}

impl GpuVendor {
    /// The PCI vendor id without `0x` (`10de`), as `lspci -n` prints it.
    pub fn pci_id(self) -> &'static str {
        match self {
            GpuVendor::Nvidia => "10de",
            GpuVendor::Amd => "1002",
        }
    }
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

/// A GPU (NVIDIA or AMD) on the PCI bus.
#[derive(Debug, Clone, Default)]
pub struct Gpu {
    /// PCI address.
    pub pci: String,
    /// Who made it.
    pub vendor: GpuVendor,
    /// The PCIe link (`bus/pci/devices/<bdf>/{current,max}_link_{speed,width}`).
    pub pcie: PcieLink,
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
    /// GPUs (NVIDIA and AMD), sorted by PCI address.
    pub gpus: Vec<Gpu>,
    /// Loaded kernel modules (`module/*`).
    pub modules: BTreeSet<String>,
    /// `module/<m>/version` for the modules that have one.
    pub module_versions: BTreeMap<String, String>,
    /// `<proc>/sys/kernel/osrelease`.
    pub kernel_release: Option<String>,
    /// Seconds since boot (`<proc>/uptime`, first field); `None` when it cannot be read.
    pub uptime_s: Option<f64>,
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
                    || {
                        format!(
                            "{}:{}",
                            g.vendor.pci_id(),
                            g.device_id.trim_start_matches("0x")
                        )
                    },
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
