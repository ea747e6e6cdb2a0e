//! The node probe: gather once from sysfs, run small pure checks over the snapshot, report.
//!
//! [`gather::gather`] reads every file once into a [`gather::Snapshot`]; each check in
//! [`checks`] is a pure function of the snapshot, the node's [`NodeExpectations`], the counter
//! baseline and the BOMs, so checks are unit-tested without files. [`run`] ties them together
//! into a [`Report`], the `fabric-check/probe/v1` JSON document of docs/checks.md; [`output`] renders
//! it as a table or a Prometheus textfile.
//!
//! Severity and verdict: a `fail` finding means the node is unhealthy; `warn` means degraded or
//! unverifiable; `info` is said but never changes the verdict. "The probe could not run" is not
//! a finding but [`Verdict::Error`] (exit 3), produced by the caller when an input it was told
//! to use (config, baseline, pinned BOM, sysfs root) is unusable.

pub mod checks;
pub mod gather;
pub mod known;
pub mod nccl_local;
pub mod output;
pub mod pause;
pub mod second_look;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::NodeExpectations;
use fabric_base::bom::Bom;
use gather::{Roots, Snapshot};

/// The `schema` value of a probe document.
pub const SCHEMA: &str = "fabric-check/probe/v1";

use fabric_proto::verdict::{Finding, Severity, Verdict};

/// One port's counters in a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PortCounters {
    /// `counters/*`.
    #[serde(default)]
    pub counters: BTreeMap<String, u64>,
    /// `hw_counters/*`.
    #[serde(default)]
    pub hw_counters: BTreeMap<String, u64>,
}

/// One netdev's counters in a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetdevCounters {
    /// Pause-related `ethtool -S` statistics.
    #[serde(default)]
    pub ethtool: BTreeMap<String, u64>,
}

/// The `counters` object: what a later run needs to compute deltas.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    /// When the counters were read (ms since the Unix epoch).
    pub taken_unix_ms: u64,
    /// Keyed `<device>/<port>` (`mlx5_3/1`).
    #[serde(default)]
    pub ports: BTreeMap<String, PortCounters>,
    /// Keyed by netdev name.
    #[serde(default)]
    pub netdevs: BTreeMap<String, NetdevCounters>,
}

impl CounterSnapshot {
    /// The counters of a snapshot.
    pub fn from_snapshot(snap: &Snapshot) -> Self {
        let mut c = CounterSnapshot {
            taken_unix_ms: snap.taken_unix_ms,
            ..Self::default()
        };
        for d in &snap.devices {
            for p in &d.ports {
                if p.counters.is_none() && p.hw_counters.is_none() {
                    continue;
                }
                c.ports.insert(
                    port_key(&d.name, p.num),
                    PortCounters {
                        counters: p.counters.clone().unwrap_or_default(),
                        hw_counters: p.hw_counters.clone().unwrap_or_default(),
                    },
                );
            }
        }
        for (name, nd) in &snap.netdevs {
            if let Some(e) = &nd.ethtool {
                c.netdevs
                    .insert(name.clone(), NetdevCounters { ethtool: e.clone() });
            }
        }
        c
    }
}

/// `mlx5_3/1`.
pub fn port_key(device: &str, port: u32) -> String {
    format!("{device}/{port}")
}

/// One port in the inventory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InventoryPort {
    /// Port number.
    pub port: u32,
    /// `ACTIVE`, `DOWN`, ...
    pub state: Option<String>,
    /// `LinkUp`, `Polling`, ...
    pub phys_state: Option<String>,
    /// Gb/s.
    pub rate_gbps: Option<f64>,
    /// `400 Gb/sec (4X NDR)`.
    pub rate: Option<String>,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: Option<String>,
    /// The port's netdev.
    pub netdev: Option<String>,
    /// The netdev's MTU.
    pub mtu: Option<u32>,
}

/// One RDMA device in the inventory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InventoryDevice {
    /// `mlx5_0`.
    pub name: String,
    /// `MT4129`.
    pub hca_type: Option<String>,
    /// Firmware version.
    pub fw_ver: Option<String>,
    /// Board id.
    pub board_id: Option<String>,
    /// PCI address.
    pub pci: Option<String>,
    /// NUMA node.
    pub numa_node: Option<i32>,
    /// The PCIe link of its PCI function, where any of its files could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<InventoryPcie>,
    /// Ports.
    pub ports: Vec<InventoryPort>,
}

/// A PCIe link in the inventory (`current_link_*` and `max_link_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct InventoryPcie {
    /// Trained speed, GT/s.
    pub speed_gts: Option<f64>,
    /// Trained width, lanes.
    pub width: Option<u32>,
    /// Highest supported speed, GT/s.
    pub max_speed_gts: Option<f64>,
    /// Widest supported link, lanes.
    pub max_width: Option<u32>,
    /// The slot's highest speed (the upstream port's `max_link_speed`), GT/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_max_speed_gts: Option<f64>,
    /// The slot's widest link (the upstream port's `max_link_width`), lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_max_width: Option<u32>,
}

impl InventoryPcie {
    /// The link as the inventory shows it; `None` when no file could be read.
    pub fn of(l: &gather::PcieLink) -> Option<Self> {
        (!l.is_absent()).then_some(Self {
            speed_gts: l.cur_gts,
            width: l.cur_width,
            max_speed_gts: l.max_gts,
            max_width: l.max_width,
            slot_max_speed_gts: l.slot_max_gts,
            slot_max_width: l.slot_max_width,
        })
    }
}

/// One GPU in the inventory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InventoryGpu {
    /// PCI address.
    pub pci: String,
    /// Model, where the device id is known.
    pub model: Option<String>,
    /// PCI device id.
    pub device_id: String,
    /// NUMA node.
    pub numa_node: Option<i32>,
    /// The PCIe link, where any of its files could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<InventoryPcie>,
}

/// The `inventory` object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// RDMA devices.
    pub devices: Vec<InventoryDevice>,
    /// NVIDIA GPUs.
    pub gpus: Vec<InventoryGpu>,
    /// Kernel release.
    pub kernel: Option<String>,
}

impl Inventory {
    /// The inventory of a snapshot.
    pub fn from_snapshot(snap: &Snapshot) -> Self {
        Self {
            devices: snap
                .devices
                .iter()
                .map(|d| InventoryDevice {
                    name: d.name.clone(),
                    hca_type: d.hca_type.clone(),
                    fw_ver: d.fw_ver.clone(),
                    board_id: d.board_id.clone(),
                    pci: d.pci.clone(),
                    numa_node: d.numa_node,
                    pcie: InventoryPcie::of(&d.pcie),
                    ports: d
                        .ports
                        .iter()
                        .map(|p| InventoryPort {
                            port: p.num,
                            state: p.state.as_ref().map(|s| s.name.clone()),
                            phys_state: p.phys_state.as_ref().map(|s| {
                                s.split_once(':')
                                    .map_or(s.as_str(), |x| x.1)
                                    .trim()
                                    .to_string()
                            }),
                            rate_gbps: p.rate.as_ref().map(|r| r.gbps),
                            rate: p.rate.as_ref().map(|r| r.text.clone()),
                            link_layer: p.link_layer.clone(),
                            netdev: p.netdev.clone(),
                            mtu: p
                                .netdev
                                .as_ref()
                                .and_then(|n| snap.netdevs.get(n))
                                .and_then(|n| n.mtu),
                        })
                        .collect(),
                })
                .collect(),
            gpus: snap
                .gpus
                .iter()
                .map(|g| InventoryGpu {
                    pci: g.pci.clone(),
                    model: g.model.map(str::to_string),
                    device_id: g.device_id.clone(),
                    numa_node: g.numa_node,
                    pcie: InventoryPcie::of(&g.pcie),
                })
                .collect(),
            kernel: snap.kernel_release.clone(),
        }
    }
}

/// The probe's document (`fabric-check/probe/v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The node name.
    pub node: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Wall time of gather and checks.
    pub duration_ms: f64,
    /// What is there.
    pub inventory: Inventory,
    /// The counters, for a later run's deltas.
    pub counters: CounterSnapshot,
    /// Every finding, failures first.
    pub findings: Vec<Finding>,
    /// Why the probe could not run (verdict `error` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why this look is not whole enough to be recorded as the node's known inventory (a
    /// `fail`, a device file that could not be read, a port in training); `None`: it is.
    /// Not part of the document.
    #[serde(skip)]
    pub not_whole: Option<String>,
}

impl Report {
    /// The document for "the probe could not run": verdict `error`, exit 3.
    pub fn error(node: &str, duration_ms: f64, message: String) -> Self {
        Self {
            schema: SCHEMA.to_string(),
            node: node.to_string(),
            verdict: Verdict::Error,
            duration_ms,
            inventory: Inventory::default(),
            counters: CounterSnapshot::default(),
            findings: Vec::new(),
            error: Some(message),
            not_whole: Some("the probe could not run".into()),
        }
    }

    /// Adds a finding and updates the verdict.
    pub fn push(&mut self, f: Finding) {
        self.findings.push(f);
        sort_findings(&mut self.findings);
        if self.verdict != Verdict::Error {
            self.verdict = Verdict::from_findings(&self.findings);
        }
    }
}

/// What makes an earlier document unusable as a baseline.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// Unreadable.
    #[error("cannot read baseline {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a probe document.
    #[error(
        "baseline {path} is not a fabric-check/probe/v1 document ({message}); pass a file written by `fabric-check probe --save`"
    )]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// The parser's explanation.
        message: String,
    },
}

/// The parts of an earlier document a baseline needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Baseline {
    /// Must be [`SCHEMA`].
    pub schema: String,
    /// The node it was taken on.
    pub node: String,
    /// Its counters.
    pub counters: CounterSnapshot,
    /// Its inventory (`inventory.gone` compares the HCAs and GPUs); `None` in a document that
    /// has none.
    #[serde(default)]
    pub inventory: Option<Inventory>,
}

impl Baseline {
    /// Reads and checks an earlier probe document.
    pub fn load(path: &Path) -> Result<Self, BaselineError> {
        let text = std::fs::read_to_string(path).map_err(|source| BaselineError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let b: Baseline = serde_json::from_str(&text).map_err(|e| BaselineError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if b.schema != SCHEMA {
            return Err(BaselineError::Parse {
                path: path.to_path_buf(),
                message: format!("schema is {:?}", b.schema),
            });
        }
        Ok(b)
    }
}

/// Everything one probe run uses.
#[derive(Debug, Clone)]
pub struct ProbeInput {
    /// The node name (findings, baseline matching, config patterns).
    pub node: String,
    /// Where to read.
    pub roots: Roots,
    /// The node's expectations (defaults when there is no config).
    pub expect: NodeExpectations,
    /// An earlier document, for counter deltas.
    pub baseline: Option<Baseline>,
    /// A pinned BOM, for `bom.drift`.
    pub bom_pin: Option<Bom>,
    /// The node's known inventory ([`known`]), when it has one: `inventory.gone`,
    /// `ib.port_state` and `ib.link_layer` judge against it.
    pub known: Option<known::Known>,
    /// How long to wait before a second look when the first saw something that a driver
    /// reload, a firmware reset or a port in training also shows (a device or port gone, a
    /// device file unreadable); `None`: one look.
    pub second_look: Option<std::time::Duration>,
}

/// Failures first, then by device (naturally), port, check and message.
pub fn sort_findings(v: &mut [Finding]) {
    v.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| {
                gather::natural_cmp(
                    a.device.as_deref().unwrap_or(""),
                    b.device.as_deref().unwrap_or(""),
                )
            })
            .then_with(|| a.port.cmp(&b.port))
            .then_with(|| a.check.cmp(&b.check))
            .then_with(|| a.message.cmp(&b.message))
    });
}

/// Runs the probe: gather, every check, verdict; a second look after
/// [`ProbeInput::second_look`] when the first saw what a transient also shows ([`second_look`]).
pub fn run(input: &ProbeInput) -> Report {
    run_with(input, RunWith::default())
}

/// What a caller other than the probe's own command changes about one run ([`run_with`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunWith<'a> {
    /// The time the run's counters are dated with (ms since the Unix epoch); `None`: the
    /// gather's own clock. The watch's tests run it on an emulated clock.
    pub taken_unix_ms: Option<u64>,
    /// Where the per-hour bounds' window starts ([`checks::Ctx::rate_window`]); `None`: at the
    /// baseline.
    pub rate_window: Option<&'a CounterSnapshot>,
}

/// [`run`], with the counters dated and the per-hour bounds judged as `with` says.
pub fn run_with(input: &ProbeInput, with: RunWith<'_>) -> Report {
    let expect = &input.expect;
    run_looks(
        input,
        with,
        &mut || {
            let mut snap = gather::gather(&input.roots, |d| expect.ignores(d));
            if let Some(ms) = with.taken_unix_ms {
                snap.taken_unix_ms = ms;
            }
            snap
        },
        &mut std::thread::sleep,
    )
}

/// One look: the checks over one snapshot.
struct Look {
    snap: Snapshot,
    counters: CounterSnapshot,
    findings: Vec<Finding>,
}

fn look(input: &ProbeInput, with: RunWith<'_>, snap: Snapshot) -> Look {
    let counters = CounterSnapshot::from_snapshot(&snap);
    let bom_now = snap.bom(&input.node);
    let ctx = checks::Ctx {
        node: &input.node,
        snap: &snap,
        expect: &input.expect,
        now: &counters,
        baseline: input.baseline.as_ref(),
        rate_window: with.rate_window,
        bom_now: &bom_now,
        bom_pin: input.bom_pin.as_ref(),
        known: input.known.as_ref(),
    };
    let mut findings = checks::run_all(&ctx);
    sort_findings(&mut findings);
    Look {
        snap,
        counters,
        findings,
    }
}

/// [`run`] with its gather and its sleep as seams (tests change the node between looks).
pub fn run_looks(
    input: &ProbeInput,
    with: RunWith<'_>,
    gather: &mut dyn FnMut() -> Snapshot,
    sleep: &mut dyn FnMut(std::time::Duration),
) -> Report {
    let start = std::time::Instant::now();
    let mut now = look(input, with, gather());
    if let Some(settle) = input.second_look
        && second_look::wanted(&now.snap, &now.findings)
    {
        let first = now;
        sleep(settle);
        now = look(input, with, gather());
        let gap_ms = now
            .snap
            .taken_unix_ms
            .saturating_sub(first.snap.taken_unix_ms);
        now.findings.extend(second_look::came_back(
            &first.findings,
            &now.findings,
            gap_ms,
        ));
        sort_findings(&mut now.findings);
    }
    let verdict = Verdict::from_findings(&now.findings);
    let not_whole = second_look::not_whole(&now.snap, verdict);
    Report {
        schema: SCHEMA.to_string(),
        node: input.node.clone(),
        verdict,
        duration_ms: (start.elapsed().as_secs_f64() * 1e6).round() / 1e3,
        inventory: Inventory::from_snapshot(&now.snap),
        counters: now.counters,
        findings: now.findings,
        error: None,
        not_whole,
    }
}
