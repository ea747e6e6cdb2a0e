//! The node's known inventory: what the node had when it was last healthy, kept until an admin
//! accepts another (`<state_dir>/`[`KNOWN_FILE`], `fabric-check/known/v1`).
//!
//! `inventory.gone` used to compare with the last saved probe (`last.json`), which every probe
//! overwrites: a GPU that fell off the bus failed one look, and the next looks compared with a
//! `last.json` that no longer had it, counted as clean, and `health` put the node back. The known
//! inventory does not forget:
//!
//! - it is recorded by the first probe whose look is whole (no `fail`, no unreadable device
//!   file, no port training), or seeded from the last saved probe when a node without a record
//!   finds a device gone (a node upgraded from a release without the record);
//! - later probes compare with it: an HCA, GPU or ACTIVE port that is gone stays a fault on every
//!   look until it is back, so `health` never resumes a node whose inventory is short;
//! - ports that were not ACTIVE when it was recorded are *unprovisioned* (aux ports, a second
//!   port without a cable), never faults; a port that was ACTIVE in one link layer and now reads
//!   another is a rail lost to its fabric;
//! - only `fabric-check inventory accept` replaces it, and the record says who and when.
//!
//! The record is small (a few KiB for ten HCAs and eight GPUs), written atomically by root
//! into the root-owned state folder, and versioned by its `schema`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Finding, Inventory, InventoryDevice, InventoryPort, ProbeInput, Report, Severity};

/// The check id whose findings speak of the record.
const ID: &str = fabric_proto::check_id::INVENTORY_GONE;

/// The `schema` of a known-inventory record.
pub const KNOWN_SCHEMA: &str = "fabric-check/known/v1";

/// The record's file name in a node's state folder.
pub const KNOWN_FILE: &str = "known.json";

/// The record's path in `state_dir`.
pub fn known_path(state_dir: &Path) -> PathBuf {
    state_dir.join(KNOWN_FILE)
}

/// How a record came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recorded {
    /// The node's first probe whose look was whole.
    FirstHealthyProbe,
    /// Seeded from the last saved probe (`last.json`) when a node without a record found a
    /// device gone.
    SeededFromLastProbe,
    /// An admin ran `fabric-check inventory accept`.
    Accepted,
}

impl Recorded {
    /// How an admin reads it.
    pub fn words(self) -> &'static str {
        match self {
            Recorded::FirstHealthyProbe => "the node's first healthy probe",
            Recorded::SeededFromLastProbe => "the last saved probe (seeded)",
            Recorded::Accepted => "an admin's `fabric-check inventory accept`",
        }
    }
}

/// The record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Known {
    /// Always [`KNOWN_SCHEMA`].
    pub schema: String,
    /// The node it was recorded on.
    pub node: String,
    /// When (seconds since the Unix epoch).
    pub recorded_unix_s: u64,
    /// How.
    pub how: Recorded,
    /// Who (the admin's name for [`Recorded::Accepted`]; `fabric-check` otherwise).
    pub by: String,
    /// The admin's note, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What the node had.
    pub inventory: Inventory,
}

/// Why a record could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KnownError {
    /// Unreadable.
    #[error("cannot read the known inventory {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a record of this version.
    #[error(
        "the known inventory {path} is not a {KNOWN_SCHEMA} record ({message}); record the node's inventory again with `fabric-check inventory accept`"
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// Written on another node.
    #[error(
        "the known inventory {path} is node {was}'s, not {node}'s (a state folder copied or shared?); give each node its own state_dir= and run `fabric-check inventory accept` on {node}"
    )]
    OtherNode {
        /// The file.
        path: PathBuf,
        /// The node it names.
        was: String,
        /// This node.
        node: String,
    },
    /// Could not be written.
    #[error("cannot write the known inventory {path}: {source}; check the state folder")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Known {
    /// A record of `inventory` made now.
    pub fn new(node: &str, inventory: Inventory, how: Recorded, by: &str, now_s: u64) -> Self {
        Self {
            schema: KNOWN_SCHEMA.to_string(),
            node: node.to_string(),
            recorded_unix_s: now_s,
            how,
            by: by.to_string(),
            note: None,
            inventory,
        }
    }

    /// Reads the record at `path` for `node`: `Ok(None)` when there is none.
    pub fn load(path: &Path, node: &str) -> Result<Option<Self>, KnownError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(KnownError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let parse = |message: String| KnownError::Parse {
            path: path.to_path_buf(),
            message,
        };
        let k: Known = serde_json::from_str(&text).map_err(|e| parse(e.to_string()))?;
        if k.schema != KNOWN_SCHEMA {
            return Err(parse(format!("schema is {:?}", k.schema)));
        }
        if k.node != node {
            return Err(KnownError::OtherNode {
                path: path.to_path_buf(),
                was: k.node,
                node: node.to_string(),
            });
        }
        Ok(Some(k))
    }

    /// Writes the record to `path` atomically (a temporary file renamed into place).
    pub fn save(&self, path: &Path) -> Result<(), KnownError> {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        crate::atomic_file::write_atomic(path, text.as_bytes()).map_err(|source| {
            KnownError::Write {
                path: path.to_path_buf(),
                source,
            }
        })
    }

    /// The recorded device that `name` (at PCI address `pci`) is: matched by PCI address (a
    /// device gone renames the `mlx5_<n>` after it on the next boot), by name where either
    /// address is unknown.
    pub fn device(&self, name: &str, pci: Option<&str>) -> Option<&InventoryDevice> {
        self.inventory
            .devices
            .iter()
            .find(|d| match (d.pci.as_deref(), pci) {
                (Some(a), Some(b)) => a == b,
                _ => d.name == name,
            })
    }

    /// The recorded port `num` of the device `name` (at `pci`).
    pub fn port(&self, name: &str, pci: Option<&str>, num: u32) -> Option<&InventoryPort> {
        self.device(name, pci)?.ports.iter().find(|p| p.port == num)
    }

    /// "recorded 2026-12-06 12:00 UTC by the node's first healthy probe".
    pub fn provenance(&self) -> String {
        let when = jiff::Timestamp::from_second(self.recorded_unix_s as i64)
            .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_else(|_| format!("at {} s", self.recorded_unix_s));
        match self.how {
            Recorded::Accepted => format!("accepted {when} by {}", self.by),
            how => format!("recorded {when} from {}", how.words()),
        }
    }
}

/// Whether a recorded port was ACTIVE.
pub fn was_active(p: &InventoryPort) -> bool {
    p.state.as_deref() == Some("ACTIVE")
}

/// The record at `path` for a probe of `node`: the record when there is one, and a finding to
/// add when it could not be used (a `warn`: the node is then judged as one without a record,
/// and the file is kept for the admin to look at).
pub fn load_for_probe(path: &Path, node: &str) -> (Option<Known>, Option<Finding>) {
    match Known::load(path, node) {
        Ok(k) => (k, None),
        Err(e) => (
            None,
            Some(Finding::new(
                ID,
                Severity::Warn,
                None,
                None,
                json!({"path": path.display().to_string()}),
                Value::Null,
                format!("{e}; until then devices are compared with the last saved probe"),
            )),
        ),
    }
}

/// After a probe in a state folder: records the node's known inventory at `path` when it has
/// none, from the probe's `input` (the record it judged with, the last saved probe's
/// inventory) and its `report`.
///
/// - A look that finds a device gone (`inventory.gone` fails against the last saved probe)
///   seeds the record from the last saved probe, which still had it: the next look, which
///   compares with a `last.json` without the device, cannot count as clean.
/// - A whole look ([`Report::not_whole`] is `None`) is recorded as it is.
///
/// Returns the `info` to add to the report, or a `warn` when the record could not be written.
pub fn record_after_probe(
    path: &Path,
    input: &ProbeInput,
    report: &Report,
    now_s: u64,
) -> Option<Finding> {
    // Never over a record, even one that could not be read: only an admin's accept replaces it.
    if input.known.is_some() || path.exists() {
        return None;
    }
    let last = input.baseline.as_ref().and_then(|b| b.inventory.as_ref());
    let gone = report
        .findings
        .iter()
        .any(|f| f.check == ID && f.severity == Severity::Fail);
    let (inventory, how, what) = match (gone, last) {
        (true, Some(last)) => (
            last.clone(),
            Recorded::SeededFromLastProbe,
            "seeded from the last saved probe, which still had what is gone now",
        ),
        (false, _) if report.not_whole.is_none() => (
            report.inventory.clone(),
            Recorded::FirstHealthyProbe,
            "recorded from this look",
        ),
        _ => return None,
    };
    let k = Known::new(&report.node, inventory, how, "fabric-check", now_s);
    Some(match k.save(path) {
        Ok(()) => Finding::new(
            ID,
            Severity::Info,
            None,
            None,
            json!({"path": path.display().to_string(), "how": how}),
            Value::Null,
            format!(
                "the node's known inventory ({}) was {what}: later probes compare with it, and `fabric-check inventory accept` replaces it",
                summary(&k.inventory)
            ),
        ),
        Err(e) => Finding::new(
            ID,
            Severity::Warn,
            None,
            None,
            Value::Null,
            Value::Null,
            format!("{e}; devices are compared with the last saved probe until it is written"),
        ),
    })
}

/// "10 HCAs, 10 ports ACTIVE, 8 GPUs".
pub fn summary(inv: &Inventory) -> String {
    let active = inv
        .devices
        .iter()
        .flat_map(|d| &d.ports)
        .filter(|p| was_active(p))
        .count();
    format!(
        "{} HCAs, {active} ports ACTIVE, {} GPUs",
        inv.devices.len(),
        inv.gpus.len()
    )
}

/// What `new` lacks or adds against `old`, one line each (`- GPU 0000:1b:00.0 (H100)`,
/// `+ mlx5_9 port 1 ACTIVE Ethernet`): devices and GPUs by PCI address, ports by their ACTIVE
/// state and link layer.
pub fn changes(old: &Inventory, new: &Inventory) -> Vec<String> {
    let mut out = Vec::new();
    let dev_key = |d: &InventoryDevice| d.pci.clone().unwrap_or_else(|| d.name.clone());
    let port_line = |d: &InventoryDevice, p: &InventoryPort| {
        format!(
            "{} port {} {} {}",
            d.name,
            p.port,
            p.state.as_deref().unwrap_or("state unknown"),
            p.link_layer.as_deref().unwrap_or("")
        )
        .trim_end()
        .to_string()
    };
    for d in &old.devices {
        match new.devices.iter().find(|n| dev_key(n) == dev_key(d)) {
            None => out.push(format!("- HCA {} ({})", d.name, dev_key(d))),
            Some(n) => {
                for p in &d.ports {
                    let now = n.ports.iter().find(|q| q.port == p.port);
                    let same = now.is_some_and(|q| {
                        was_active(q) == was_active(p) && q.link_layer == p.link_layer
                    });
                    if !same {
                        out.push(format!("- {}", port_line(d, p)));
                        if let Some(q) = now {
                            out.push(format!("+ {}", port_line(n, q)));
                        }
                    }
                }
            }
        }
    }
    for n in &new.devices {
        if !old.devices.iter().any(|d| dev_key(d) == dev_key(n)) {
            out.push(format!("+ HCA {} ({})", n.name, dev_key(n)));
        }
    }
    let gpu_line = |g: &super::InventoryGpu| {
        format!(
            "GPU {} ({})",
            g.pci,
            g.model.as_deref().unwrap_or(g.device_id.as_str())
        )
    };
    for g in &old.gpus {
        if !new.gpus.iter().any(|n| n.pci == g.pci) {
            out.push(format!("- {}", gpu_line(g)));
        }
    }
    for g in &new.gpus {
        if !old.gpus.iter().any(|o| o.pci == g.pci) {
            out.push(format!("+ {}", gpu_line(g)));
        }
    }
    out
}
