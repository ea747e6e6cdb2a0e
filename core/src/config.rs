//! The probe's TOML configuration: expectations and counter thresholds per node pattern.
//!
//! With no file at all the probe is still useful (peer parity, default counter thresholds);
//! a file adds what parity cannot know: the rate, link layer, port count and MTU a node class
//! must have, the PFC and ECN priorities of a lossless RoCE fabric, GPU counts, a pinned bill
//! of materials, and different thresholds. `[[node]]` blocks select nodes with Slurm hostlist
//! syntax; every block that matches applies, in file order, later values winning and `ports`
//! lists adding up. Unknown keys are refused, so a typo never silently disables a check.
//! `etc/fabric-check.toml` is a commented example; `docs/checks.md` lists every key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use fabric_proto::hostlist::{Hostlist, HostlistError};
use fabric_proto::verdict::Severity;

/// What is wrong with a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}; pass a readable file with --config")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys or wrong types.
    #[error("config {path} is invalid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The TOML parser's explanation (line and key).
        message: String,
    },
    /// A `match` or `devices` value is not a hostlist.
    #[error("config {path}: {source}")]
    Hostlist {
        /// The file.
        path: PathBuf,
        /// The hostlist problem.
        source: HostlistError,
    },
    /// A value out of its range.
    #[error("config {path}: {message}")]
    Value {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to write instead.
        message: String,
    },
}

/// When a counter's increase between two snapshots is a finding.
///
/// A `*_delta` bound applies to the raw increase. A `*_per_hour` bound is scaled by the time
/// between the snapshots but never below one hour: the allowance is `per_hour × max(hours, 1)`,
/// so two snapshots a second apart are not judged as if the second were an hour's worth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    /// Warn when the increase exceeds this.
    pub warn_delta: Option<u64>,
    /// Fail when the increase exceeds this (`0`: any increase fails).
    pub fail_delta: Option<u64>,
    /// Warn when the increase exceeds this many per hour.
    pub warn_per_hour: Option<f64>,
    /// Fail when the increase exceeds this many per hour.
    pub fail_per_hour: Option<f64>,
    /// The name is a counter of a driver this version does not list ([`known_counter_keys`]):
    /// take it as written instead of refusing it as a misspelling.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub driver_specific: bool,
}

impl Threshold {
    /// The severity an increase of `delta` over `elapsed_s` seconds earns, if any: the worse of
    /// [`Self::judge_delta`] and [`Self::judge_rate`] over the same window.
    pub fn judge(&self, delta: u64, elapsed_s: f64) -> Option<Severity> {
        self.judge_delta(delta)
            .max(self.judge_rate(delta, elapsed_s))
    }

    /// The severity the `*_delta` bounds give an increase of `delta`, if any.
    pub fn judge_delta(&self, delta: u64) -> Option<Severity> {
        let over = |d: Option<u64>| d.is_some_and(|d| delta > d);
        Self::graded(over(self.fail_delta), over(self.warn_delta))
    }

    /// The severity the `*_per_hour` bounds give an increase of `delta` over `elapsed_s`
    /// seconds, if any (the allowance is never below one hour's).
    pub fn judge_rate(&self, delta: u64, elapsed_s: f64) -> Option<Severity> {
        let hours = (elapsed_s / 3600.0).max(1.0);
        let over = |r: Option<f64>| r.is_some_and(|r| delta as f64 > r * hours);
        Self::graded(over(self.fail_per_hour), over(self.warn_per_hour))
    }

    fn graded(fail: bool, warn: bool) -> Option<Severity> {
        if fail {
            Some(Severity::Fail)
        } else if warn {
            Some(Severity::Warn)
        } else {
            None
        }
    }

    /// The bound as people read it, for messages: `at most 120/h allowed`.
    pub fn describe(&self, severity: Severity) -> String {
        let (d, r) = match severity {
            Severity::Fail => (self.fail_delta, self.fail_per_hour),
            _ => (self.warn_delta, self.warn_per_hour),
        };
        match (d, r) {
            (Some(0), _) => "no increase allowed".to_string(),
            (Some(d), _) => format!("at most {d} allowed"),
            (None, Some(r)) => format!("at most {r}/h allowed"),
            (None, None) => "no bound".to_string(),
        }
    }

    /// The per-hour bound of `severity` as people read it: `at most 120/h allowed`.
    pub fn describe_rate(&self, severity: Severity) -> String {
        Threshold {
            warn_delta: None,
            fail_delta: None,
            ..*self
        }
        .describe(severity)
    }
}

fn per_hour(warn: Option<f64>, fail: Option<f64>) -> Threshold {
    Threshold {
        warn_per_hour: warn,
        fail_per_hour: fail,
        ..Threshold::default()
    }
}

/// The default thresholds, keyed by counter name. Ethtool per-priority pause counters are keyed
/// without their priority (`rx_prio3_pause` → `rx_prio_pause`). Reasons: `docs/checks.md`.
pub fn default_thresholds() -> BTreeMap<String, Threshold> {
    let mut m = BTreeMap::new();
    let any_fails = Threshold {
        fail_delta: Some(0),
        ..Threshold::default()
    };
    let any_warns = Threshold {
        warn_delta: Some(0),
        ..Threshold::default()
    };
    // ib.counters (IBA PortCounters error counters).
    m.insert("link_downed".into(), any_fails);
    m.insert("symbol_error".into(), per_hour(None, Some(120.0)));
    m.insert("link_error_recovery".into(), per_hour(Some(10.0), None));
    m.insert("port_rcv_errors".into(), per_hour(Some(100.0), None));
    m.insert(
        "port_rcv_remote_physical_errors".into(),
        per_hour(Some(100.0), None),
    );
    m.insert(
        "port_rcv_switch_relay_errors".into(),
        per_hour(Some(100.0), None),
    );
    m.insert(
        "local_link_integrity_errors".into(),
        per_hour(Some(10.0), None),
    );
    m.insert(
        "excessive_buffer_overrun_errors".into(),
        per_hour(Some(10.0), None),
    );
    m.insert("port_xmit_discards".into(), per_hour(Some(1000.0), None));
    m.insert(
        "port_xmit_constraint_errors".into(),
        per_hour(Some(100.0), None),
    );
    m.insert(
        "port_rcv_constraint_errors".into(),
        per_hour(Some(100.0), None),
    );
    // roce.retrans (mlx5 hw_counters).
    m.insert("out_of_sequence".into(), per_hour(Some(10_000.0), None));
    m.insert("packet_seq_err".into(), per_hour(Some(1000.0), None));
    m.insert("implied_nak_seq_err".into(), per_hour(Some(1000.0), None));
    m.insert("local_ack_timeout_err".into(), per_hour(Some(100.0), None));
    m.insert("rnr_nak_retry_err".into(), per_hour(Some(100.0), None));
    m.insert("roce_adp_retrans".into(), per_hour(Some(10_000.0), None));
    m.insert("roce_adp_retrans_to".into(), per_hour(Some(100.0), None));
    // roce.congestion (mlx5 hw_counters and ethtool pause statistics).
    m.insert("np_cnp_sent".into(), per_hour(Some(1_000_000.0), None));
    m.insert("rp_cnp_handled".into(), per_hour(Some(1_000_000.0), None));
    m.insert(
        "np_ecn_marked_roce_packets".into(),
        per_hour(Some(10_000_000.0), None),
    );
    m.insert("rx_prio_pause".into(), per_hour(Some(1_000_000.0), None));
    m.insert("tx_prio_pause".into(), per_hour(Some(1_000_000.0), None));
    m.insert(
        "rx_prio_pause_duration".into(),
        per_hour(Some(60_000_000.0), None),
    );
    m.insert(
        "tx_prio_pause_duration".into(),
        per_hour(Some(60_000_000.0), None),
    );
    m.insert("tx_pause_storm_warning_events".into(), any_warns);
    m.insert("tx_pause_storm_error_events".into(), any_fails);
    m
}

/// Every counter name a `[counters.<name>]` table may use: the threshold keys of the defaults,
/// the IBA PortCounters files of `ports/<n>/counters/`, mlx5's `hw_counters`, and the threshold
/// keys every driver's pause counters map to (`rx_prio_pause`, see [`crate::probe::pause`]).
/// Another name is refused as a likely misspelling, with the nearest of these suggested, unless
/// its table says `driver_specific = true`.
pub fn known_counter_keys() -> std::collections::BTreeSet<String> {
    const IBA: &[&str] = &[
        "symbol_error",
        "link_error_recovery",
        "link_downed",
        "port_rcv_errors",
        "port_rcv_remote_physical_errors",
        "port_rcv_switch_relay_errors",
        "port_xmit_discards",
        "port_xmit_constraint_errors",
        "port_rcv_constraint_errors",
        "local_link_integrity_errors",
        "excessive_buffer_overrun_errors",
        "VL15_dropped",
        "port_xmit_data",
        "port_rcv_data",
        "port_xmit_packets",
        "port_rcv_packets",
        "unicast_rcv_packets",
        "unicast_xmit_packets",
        "multicast_rcv_packets",
        "multicast_xmit_packets",
        "port_xmit_wait",
    ];
    // mlx5 `hw_counters` (the kernel's mlx5 ib driver, `counters.c`).
    const MLX5: &[&str] = &[
        "out_of_buffer",
        "out_of_sequence",
        "duplicate_request",
        "rnr_nak_retry_err",
        "packet_seq_err",
        "implied_nak_seq_err",
        "local_ack_timeout_err",
        "resp_local_length_error",
        "resp_cqe_error",
        "req_cqe_error",
        "req_remote_invalid_request",
        "req_remote_access_errors",
        "resp_remote_access_errors",
        "resp_cqe_flush_error",
        "req_cqe_flush_error",
        "req_rnr_retries_exceeded",
        "req_transport_retries_exceeded",
        "roce_adp_retrans",
        "roce_adp_retrans_to",
        "roce_slow_restart",
        "roce_slow_restart_cnps",
        "roce_slow_restart_trans",
        "rp_cnp_ignored",
        "rp_cnp_handled",
        "np_ecn_marked_roce_packets",
        "np_cnp_sent",
        "rx_icrc_encapsulated",
        "rx_write_requests",
        "rx_read_requests",
        "rx_atomic_requests",
        "rx_dct_connect",
    ];
    let mut keys: std::collections::BTreeSet<String> = default_thresholds().into_keys().collect();
    keys.extend(IBA.iter().chain(MLX5).map(|k| k.to_string()));
    for d in ["rx", "tx"] {
        for p in ["", "prio_"] {
            for what in ["pause", "pause_duration", "pause_transition"] {
                keys.insert(format!("{d}_{p}{what}"));
            }
        }
    }
    keys
}

/// `[bom]`: the pinned bill of materials that `bom.drift` compares with.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BomConfig {
    /// A file written by `fabric-check bom --pin FILE`.
    pub pin: Option<PathBuf>,
    /// Severity of each change (`warn` by default; `fail` drains on any change).
    pub drift_severity: Option<Severity>,
}

/// `[[node.ports]]`: what a set of RDMA ports on matching nodes must look like.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortExpect {
    /// RDMA device names, hostlist syntax (`mlx5_[0-7]`).
    pub devices: String,
    /// `InfiniBand` or `Ethernet` (`ib.link_layer`).
    pub link_layer: Option<String>,
    /// How many ports these devices must have (`ib.port_count`).
    pub count: Option<u32>,
    /// Link rate in Gb/s (`ib.port_rate`).
    pub rate_gbps: Option<f64>,
    /// Netdev MTU of RoCE ports (`roce.mtu`).
    pub mtu: Option<u32>,
    /// Netdev MTU of the IPoIB interface of InfiniBand ports (`ib.mtu`).
    pub ipoib_mtu: Option<u32>,
    /// Priorities that must have PFC enabled, and no others (`roce.pfc`).
    pub pfc_priorities: Option<Vec<u8>>,
    /// Priorities that must have ECN enabled on both sides, roce_np and roce_rp (`roce.ecn`).
    pub ecn_priorities: Option<Vec<u8>>,
}

/// `[[node]]`: expectations for the nodes a hostlist names.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeBlock {
    /// Node names, hostlist syntax (`gpu[001-128]`).
    #[serde(rename = "match")]
    pub pattern: String,
    /// How many NVIDIA GPUs the node must show (`gpu.count`).
    pub gpus: Option<u32>,
    /// RDMA devices the probe skips entirely (hostlist syntax).
    pub ignore_devices: Option<String>,
    /// A pinned BOM for these nodes (overrides `[bom] pin`).
    pub bom_pin: Option<PathBuf>,
    /// Counter threshold overrides for these nodes.
    #[serde(default)]
    pub counters: BTreeMap<String, Threshold>,
    /// Port expectations.
    #[serde(default)]
    pub ports: Vec<PortExpect>,
}

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[bom]`.
    #[serde(default)]
    pub bom: BomConfig,
    /// `[counters.<name>]`: threshold overrides for every node.
    #[serde(default)]
    pub counters: BTreeMap<String, Threshold>,
    /// `[[node]]` blocks.
    #[serde(default, rename = "node")]
    pub nodes: Vec<NodeBlock>,
}

/// A port expectation with its device pattern parsed.
#[derive(Debug, Clone)]
pub struct PortRule {
    /// The parsed `devices` pattern.
    pub devices: Hostlist,
    /// The expectation as written.
    pub expect: PortExpect,
}

/// Everything the checks need to know about one node, resolved from the file.
#[derive(Debug, Clone)]
pub struct NodeExpectations {
    /// `gpu.count`.
    pub gpus: Option<u32>,
    /// Devices skipped by every check.
    pub ignore_devices: Vec<Hostlist>,
    /// Port rules, in file order.
    pub ports: Vec<PortRule>,
    /// Defaults with every override applied.
    pub thresholds: BTreeMap<String, Threshold>,
    /// The pinned BOM to compare with.
    pub bom_pin: Option<PathBuf>,
    /// Severity of a BOM change.
    pub drift_severity: Severity,
}

impl Default for NodeExpectations {
    fn default() -> Self {
        Self {
            gpus: None,
            ignore_devices: Vec::new(),
            ports: Vec::new(),
            thresholds: default_thresholds(),
            bom_pin: None,
            drift_severity: Severity::Warn,
        }
    }
}

impl NodeExpectations {
    /// Whether the configuration says to skip this RDMA device.
    pub fn ignores(&self, device: &str) -> bool {
        self.ignore_devices.iter().any(|h| h.matches(device))
    }

    /// The port rules whose device pattern names `device`.
    pub fn rules_for<'a>(&'a self, device: &'a str) -> impl Iterator<Item = &'a PortExpect> + 'a {
        self.ports
            .iter()
            .filter(move |r| r.devices.matches(device))
            .map(|r| &r.expect)
    }

    /// The last rule's value of one field for `device` (later rules win).
    pub fn expect<T: Clone>(
        &self,
        device: &str,
        f: impl Fn(&PortExpect) -> Option<T>,
    ) -> Option<T> {
        self.rules_for(device).filter_map(f).last()
    }
}

impl Config {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: fabric_base::toml_error::toml_message(text, &e),
        })?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let value = |message: String| ConfigError::Value {
            path: path.to_path_buf(),
            message,
        };
        let hl = |s: &str| {
            Hostlist::parse(s).map_err(|source| ConfigError::Hostlist {
                path: path.to_path_buf(),
                source,
            })
        };
        for node in &self.nodes {
            hl(&node.pattern)?;
            if let Some(i) = &node.ignore_devices {
                hl(i)?;
            }
            for p in &node.ports {
                hl(&p.devices)?;
                if let Some(ll) = &p.link_layer
                    && ll != "InfiniBand"
                    && ll != "Ethernet"
                {
                    return Err(value(format!(
                        "link_layer {ll:?} for devices {:?}: write \"InfiniBand\" or \"Ethernet\" as sysfs spells it",
                        p.devices
                    )));
                }
                for prios in [&p.pfc_priorities, &p.ecn_priorities].into_iter().flatten() {
                    if let Some(bad) = prios.iter().find(|&&q| q > 7) {
                        return Err(value(format!(
                            "priority {bad} for devices {:?}: priorities are 0 to 7",
                            p.devices
                        )));
                    }
                }
                if p.rate_gbps.is_some_and(|r| r.is_nan() || r <= 0.0) {
                    return Err(value(format!(
                        "rate_gbps for devices {:?} must be a positive number of Gb/s",
                        p.devices
                    )));
                }
            }
        }
        let thresholds = self
            .counters
            .iter()
            .chain(self.nodes.iter().flat_map(|n| n.counters.iter()));
        let known = known_counter_keys();
        for (name, t) in thresholds {
            if !t.driver_specific && !known.contains(name) {
                let hint =
                    match fabric_proto::suggest::nearest(name, known.iter().map(String::as_str)) {
                        Some(k) => format!("did you mean `{k}`? "),
                        None => String::new(),
                    };
                return Err(value(format!(
                    "[counters.{name}]: no counter of that name is known, so this threshold would judge nothing; {hint}(a counter of a driver this version does not list: add `driver_specific = true` to the table; docs/checks.md lists the known names)"
                )));
            }
            for r in [t.warn_per_hour, t.fail_per_hour].into_iter().flatten() {
                if r.is_nan() || r < 0.0 {
                    return Err(value(format!(
                        "counters.{name}: a per-hour threshold must be a number ≥ 0"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The expectations for `node`: every matching `[[node]]` block applied in file order.
    pub fn for_node(&self, node: &str) -> NodeExpectations {
        let mut e = NodeExpectations::default();
        e.bom_pin.clone_from(&self.bom.pin);
        if let Some(s) = self.bom.drift_severity {
            e.drift_severity = s;
        }
        e.thresholds.extend(self.counters.clone());
        for block in &self.nodes {
            // Validated in `parse`; a block that does not parse matches nothing.
            let Ok(pattern) = Hostlist::parse(&block.pattern) else {
                continue;
            };
            if !pattern.matches(node) {
                continue;
            }
            if block.gpus.is_some() {
                e.gpus = block.gpus;
            }
            if let Some(i) = block
                .ignore_devices
                .as_deref()
                .and_then(|s| Hostlist::parse(s).ok())
            {
                e.ignore_devices.push(i);
            }
            if block.bom_pin.is_some() {
                e.bom_pin.clone_from(&block.bom_pin);
            }
            e.thresholds.extend(block.counters.clone());
            for p in &block.ports {
                if let Ok(devices) = Hostlist::parse(&p.devices) {
                    e.ports.push(PortRule {
                        devices,
                        expect: p.clone(),
                    });
                }
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn an_empty_file_gives_the_defaults() {
        let e = parse("").unwrap().for_node("n1");
        assert_eq!(e.thresholds, default_thresholds());
        assert!(e.ports.is_empty());
        assert_eq!(e.drift_severity, Severity::Warn);
    }

    #[test]
    fn matching_blocks_apply_in_order_and_later_values_win() {
        let cfg = parse(
            r#"
            [counters.symbol_error]
            fail_per_hour = 50.0
            [[node]]
            match = "gpu[001-128]"
            gpus = 8
            [[node.ports]]
            devices = "mlx5_[0-7]"
            rate_gbps = 400
            [[node]]
            match = "gpu[100-128]"
            gpus = 4
            [node.counters.symbol_error]
            fail_per_hour = 10.0
            [[node.ports]]
            devices = "mlx5_[0-3]"
            rate_gbps = 200
            "#,
        )
        .unwrap();
        let a = cfg.for_node("gpu007");
        assert_eq!(a.gpus, Some(8));
        assert_eq!(a.thresholds["symbol_error"].fail_per_hour, Some(50.0));
        assert_eq!(a.expect("mlx5_2", |p| p.rate_gbps), Some(400.0));
        let b = cfg.for_node("gpu120");
        assert_eq!(b.gpus, Some(4));
        assert_eq!(b.thresholds["symbol_error"].fail_per_hour, Some(10.0));
        assert_eq!(b.expect("mlx5_2", |p| p.rate_gbps), Some(200.0));
        assert_eq!(b.expect("mlx5_6", |p| p.rate_gbps), Some(400.0));
        assert_eq!(cfg.for_node("login1").gpus, None);
    }

    #[test]
    fn unknown_keys_are_refused_with_the_key_named() {
        let err = parse("[[node]]\nmatch = \"n1\"\ngpu = 8\n").unwrap_err();
        assert!(err.to_string().contains("gpu"), "{err}");
    }

    #[test]
    fn an_unknown_key_is_refused_with_the_nearest_known_key_suggested() {
        let err = parse("[[node]]\nmatch = \"n1\"\ngpu = 8\n").unwrap_err();
        assert!(err.to_string().contains("did you mean `gpus`?"), "{err}");
        let err = parse("[bom]\ndrift_severty = \"fail\"\n").unwrap_err();
        assert!(
            err.to_string().contains("did you mean `drift_severity`?"),
            "{err}"
        );
    }

    #[test]
    fn a_misspelt_counter_name_is_refused_with_the_name_meant() {
        let err = parse("[counters.symbol_eror]\nfail_per_hour = 10.0\n").unwrap_err();
        let m = err.to_string();
        assert!(
            m.starts_with(
                "config test.toml: [counters.symbol_eror]: no counter of that name is known"
            ),
            "{m}"
        );
        assert!(m.contains("did you mean `symbol_error`?"), "{m}");
        let err = parse("[[node]]\nmatch = \"n1\"\n[node.counters.rx_prio_pase]\nwarn_delta = 1\n")
            .unwrap_err();
        assert!(
            err.to_string().contains("did you mean `rx_prio_pause`?"),
            "{err}"
        );
        // Every default, every pause key and a named hfi1 counter read.
        let cfg = parse(
            "[counters.rx_pause_duration]\nwarn_delta = 1\n[counters.port_xmit_wait]\nwarn_delta = 1\n[counters.RcvHdrOvr0]\nwarn_delta = 1\ndriver_specific = true\n",
        )
        .unwrap();
        assert_eq!(
            cfg.for_node("n1").thresholds["RcvHdrOvr0"].warn_delta,
            Some(1)
        );
        for k in default_thresholds().keys() {
            assert!(known_counter_keys().contains(k), "{k}");
        }
    }

    #[test]
    fn a_bad_hostlist_is_refused() {
        let err = parse("[[node]]\nmatch = \"n[1-\"\n").unwrap_err();
        assert!(matches!(err, ConfigError::Hostlist { .. }), "{err}");
    }

    #[test]
    fn a_misspelt_link_layer_is_refused() {
        let err = parse(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_0\"\nlink_layer = \"IB\"\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("InfiniBand"), "{err}");
    }

    #[test]
    fn priorities_above_seven_are_refused() {
        let err = parse(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_0\"\npfc_priorities = [8]\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("0 to 7"), "{err}");
    }

    #[test]
    fn per_hour_allowances_never_shrink_below_an_hour() {
        let t = per_hour(None, Some(120.0));
        assert_eq!(t.judge(120, 1.0), None);
        assert_eq!(t.judge(121, 1.0), Some(Severity::Fail));
        assert_eq!(t.judge(200, 2.0 * 3600.0), None);
        assert_eq!(t.judge(241, 2.0 * 3600.0), Some(Severity::Fail));
    }

    #[test]
    fn a_zero_delta_bound_fails_any_increase() {
        let t = default_thresholds()["link_downed"];
        assert_eq!(t.judge(0, 10.0), None);
        assert_eq!(t.judge(1, 10.0), Some(Severity::Fail));
        assert_eq!(t.describe(Severity::Fail), "no increase allowed");
    }

    #[test]
    fn ignored_devices_are_recognised() {
        let cfg =
            parse("[[node]]\nmatch = \"n[1-4]\"\nignore_devices = \"mlx5_bond_0\"\n").unwrap();
        assert!(cfg.for_node("n2").ignores("mlx5_bond_0"));
        assert!(!cfg.for_node("n2").ignores("mlx5_0"));
        assert!(!cfg.for_node("n9").ignores("mlx5_bond_0"));
    }
}
