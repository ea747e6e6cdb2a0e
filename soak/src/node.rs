//! One emulated node's hardware: its sysfs tree (written by `fabric-testkit`), the ports found
//! in it, and the changes noise and faults make to it (counters that rise, saturate or reset;
//! port states; saved `ethtool -S` statistics).
//!
//! Counter rises are gathered in memory and written to the tree just before a probe reads it
//! ([`Hardware::flush`]), so that an hour's noise costs one write per counter that moved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fabric_core::probe::checks::saturation_max;

/// Why a node's tree could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HardwareError {
    /// The fixture writer failed.
    #[error("cannot write the node's sysfs tree: {0}")]
    Fixture(#[from] fabric_testkit::sysfs::Error),
    /// A file of the tree.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HardwareError + '_ {
    move |source| HardwareError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One RDMA port of the node.
#[derive(Debug, Clone)]
pub struct Port {
    /// `mlx5_3`.
    pub dev: String,
    /// `<root>/class/infiniband/<dev>/ports/1`.
    pub dir: PathBuf,
    /// InfiniBand (the GPU fabric) or Ethernet (the storage NICs).
    pub infiniband: bool,
    /// The link's rate.
    pub gbps: f64,
}

/// The node's tree and what is pending for it.
#[derive(Debug)]
pub struct Hardware {
    /// The sysfs root.
    pub root: PathBuf,
    /// Its ports, in device order.
    pub ports: Vec<Port>,
    /// The saved `ethtool -S` outputs (one per Ethernet netdev).
    pub ethtool: Vec<PathBuf>,
    /// Counter rises not yet written: (port index, `counters/symbol_error`) → rise.
    pending: BTreeMap<(usize, &'static str), u64>,
    /// `ethtool -S` rises not yet written: statistic → rise (every Ethernet netdev alike).
    pending_ethtool: BTreeMap<&'static str, u64>,
}

fn read_u64(path: &Path) -> Result<u64, HardwareError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    Ok(text.trim().parse().unwrap_or(0))
}

fn write_text(path: &Path, text: &str) -> Result<(), HardwareError> {
    std::fs::write(path, text).map_err(io(path))
}

impl Hardware {
    /// Writes fixture scenario `scenario` at `root` and finds its ports.
    pub fn write(scenario: &str, root: &Path) -> Result<Self, HardwareError> {
        fabric_testkit::sysfs::write(scenario, root)?;
        let class = root.join("class/infiniband");
        let mut devs: Vec<String> = std::fs::read_dir(&class)
            .map_err(io(&class))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        devs.sort_by_key(|d| {
            let digits: String = d.chars().filter(char::is_ascii_digit).collect();
            (digits.parse::<u32>().unwrap_or(0), d.clone())
        });
        let mut ports = Vec::new();
        for dev in devs {
            let dir = class.join(&dev).join("ports/1");
            let layer = std::fs::read_to_string(dir.join("link_layer")).unwrap_or_default();
            let rate = std::fs::read_to_string(dir.join("rate")).unwrap_or_default();
            let gbps = rate
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(100.0);
            ports.push(Port {
                dev,
                dir,
                infiniband: layer.trim() == "InfiniBand",
                gbps,
            });
        }
        let tools = root.join(".fabric-check/ethtool-S");
        let mut ethtool: Vec<PathBuf> = std::fs::read_dir(&tools)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        ethtool.sort();
        Ok(Self {
            root: root.to_owned(),
            ports,
            ethtool,
            pending: BTreeMap::new(),
            pending_ethtool: BTreeMap::new(),
        })
    }

    /// Raises `counter` (`counters/symbol_error`, `hw_counters/np_cnp_sent`) of port `port` by
    /// `by`, at the next [`Hardware::flush`].
    pub fn rise(&mut self, port: usize, counter: &'static str, by: u64) {
        if by > 0 {
            *self.pending.entry((port, counter)).or_default() += by;
        }
    }

    /// Raises the `ethtool -S` statistic `name` of every Ethernet netdev by `by`.
    pub fn rise_ethtool(&mut self, name: &'static str, by: u64) {
        if by > 0 {
            *self.pending_ethtool.entry(name).or_default() += by;
        }
    }

    /// Writes every pending rise. Legacy `counters/` files stop at the maximum of their IBA
    /// width, as the kernel's do.
    pub fn flush(&mut self) -> Result<(), HardwareError> {
        for ((port, counter), by) in std::mem::take(&mut self.pending) {
            let path = self.ports[port].dir.join(counter);
            let now = read_u64(&path)?;
            let name = counter.rsplit('/').next().unwrap_or(counter);
            let mut next = now.saturating_add(by);
            if counter.starts_with("counters/")
                && let Some(max) = saturation_max(name)
            {
                next = next.min(max);
            }
            write_text(&path, &format!("{next}\n"))?;
        }
        let rises = std::mem::take(&mut self.pending_ethtool);
        if rises.is_empty() {
            return Ok(());
        }
        for file in &self.ethtool {
            let text = std::fs::read_to_string(file).map_err(io(file))?;
            let out = map_ethtool(&text, |name, v| {
                rises.get(name).map_or(v, |by| v.saturating_add(*by))
            });
            write_text(file, &out)?;
        }
        Ok(())
    }

    /// Sets counter `counter` of port `port` to `value` now (a saturated counter).
    pub fn set_counter(
        &mut self,
        port: usize,
        counter: &str,
        value: u64,
    ) -> Result<(), HardwareError> {
        write_text(&self.ports[port].dir.join(counter), &format!("{value}\n"))
    }

    /// Every counter back to 0, as a reboot or a driver reload leaves them; pending rises are
    /// dropped (they happened before the reset).
    pub fn reset_counters(&mut self) -> Result<(), HardwareError> {
        self.pending.clear();
        self.pending_ethtool.clear();
        for p in &self.ports {
            for sub in ["counters", "hw_counters"] {
                let dir = p.dir.join(sub);
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for e in entries.flatten() {
                    write_text(&e.path(), "0\n")?;
                }
            }
        }
        for file in &self.ethtool {
            let text = std::fs::read_to_string(file).map_err(io(file))?;
            write_text(file, &map_ethtool(&text, |_, _| 0))?;
        }
        Ok(())
    }

    /// Port `port`'s state and physical state files (`4: ACTIVE`, `5: LinkUp`).
    pub fn set_state(&self, port: usize, state: &str, phys: &str) -> Result<(), HardwareError> {
        let dir = &self.ports[port].dir;
        write_text(&dir.join("state"), &format!("{state}\n"))?;
        write_text(&dir.join("phys_state"), &format!("{phys}\n"))
    }
}

/// `ethtool -S` text with every `name: value` line's value replaced by `f(name, value)`.
fn map_ethtool(text: &str, f: impl Fn(&str, u64) -> u64) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        match line.split_once(':') {
            Some((name, v)) if v.trim().parse::<u64>().is_ok() => {
                let indent = &name[..name.len() - name.trim_start().len()];
                let value = f(name.trim(), v.trim().parse().unwrap_or(0));
                out.push_str(&format!("{indent}{}: {value}\n", name.trim()));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legacy_counter_stops_at_its_width_and_a_reset_zeroes_everything() {
        let dir = tempfile::tempdir().unwrap();
        let mut hw = Hardware::write("ib8-healthy", &dir.path().join("sysfs")).unwrap();
        assert_eq!(hw.ports.len(), 10);
        assert_eq!(hw.ports.iter().filter(|p| p.infiniband).count(), 8);
        assert_eq!(hw.ethtool.len(), 2);
        hw.rise(0, "counters/symbol_error", 100_000);
        hw.rise_ethtool("rx_prio3_pause", 5);
        hw.flush().unwrap();
        let sym = hw.ports[0].dir.join("counters/symbol_error");
        assert_eq!(read_u64(&sym).unwrap(), 65_535);
        let eth = std::fs::read_to_string(&hw.ethtool[0]).unwrap();
        assert!(eth.contains("     rx_prio3_pause: 1013\n"), "{eth}");
        hw.reset_counters().unwrap();
        assert_eq!(read_u64(&sym).unwrap(), 0);
        let eth = std::fs::read_to_string(&hw.ethtool[0]).unwrap();
        assert!(eth.contains("     rx_prio3_pause: 0\n"), "{eth}");
    }
}
