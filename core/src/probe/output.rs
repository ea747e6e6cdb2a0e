//! Renderings of a [`Report`]: JSON (the contract), a table for people, a Prometheus textfile.
//!
//! The Prometheus form follows node_exporter's textfile collector conventions: `# HELP` and
//! `# TYPE` lines, `snake_case` names with units, one file per producer written to a temporary
//! name and renamed into place so the collector never reads half a file ([`write_atomic`]).

use std::collections::BTreeMap;

pub use crate::atomic_file::write_atomic;

use super::checks::ALL;
use super::{Finding, Report, Severity};

/// Compact JSON, one line, newline-terminated.
pub fn json(r: &Report) -> String {
    let mut s = serde_json::to_string(r).unwrap_or_default();
    s.push('\n');
    s
}

fn paint(s: &str, sev: Severity, colour: bool) -> String {
    if !colour {
        return s.to_string();
    }
    let code = match sev {
        Severity::Fail => "1;31",
        Severity::Warn => "33",
        Severity::Info => "2",
    };
    format!("\x1b[{code}m{s}\x1b[0m")
}

/// A table grouped by device, the worst device first, failures first within each.
pub fn table(r: &Report, colour: bool) -> String {
    let mut out = String::new();
    let verdict = r.verdict.as_str().to_uppercase();
    let vsev = match r.verdict {
        super::Verdict::Fail | super::Verdict::Error => Severity::Fail,
        super::Verdict::Warn => Severity::Warn,
        super::Verdict::Pass => Severity::Info,
    };
    let count = |s| r.findings.iter().filter(|f| f.severity == s).count();
    out.push_str(&format!(
        "node {}  verdict {}  ({} fail, {} warn, {} info; {:.1} ms)\n",
        r.node,
        paint(&verdict, vsev, colour),
        count(Severity::Fail),
        count(Severity::Warn),
        count(Severity::Info),
        r.duration_ms
    ));
    if let Some(e) = &r.error {
        out.push_str(&format!("error: {e}\n"));
    }
    let mut by_dev: BTreeMap<String, Vec<&Finding>> = BTreeMap::new();
    for f in &r.findings {
        by_dev
            .entry(f.device.clone().unwrap_or_else(|| "(node)".into()))
            .or_default()
            .push(f);
    }
    let mut groups: Vec<(String, Vec<&Finding>)> = by_dev.into_iter().collect();
    groups.sort_by(|a, b| {
        let worst = |v: &[&Finding]| v.iter().map(|f| f.severity).max();
        worst(&b.1)
            .cmp(&worst(&a.1))
            .then_with(|| super::gather::natural_cmp(&a.0, &b.0))
    });
    let idw = ALL.iter().map(|c| c.0.len()).max().unwrap_or(16);
    for (dev, mut fs) in groups {
        fs.sort_by(|a, b| {
            b.severity
                .cmp(&a.severity)
                .then_with(|| a.port.cmp(&b.port))
        });
        out.push_str(&format!("\n{dev}\n"));
        for f in fs {
            let sev = format!("{:<4}", f.severity.as_str().to_uppercase());
            let port = f.port.map(|p| format!("port {p}")).unwrap_or_default();
            out.push_str(&format!(
                "  {} {:<idw$} {:<7} {}\n",
                paint(&sev, f.severity, colour),
                f.check,
                port,
                f.message
            ));
        }
    }
    if r.findings.is_empty() && r.error.is_none() {
        out.push_str("no findings\n");
    }
    out
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus textfile rendering (node_exporter conventions; the metrics are listed in
/// docs/operations.md, "Metrics"): base units in names (`_seconds`, `_bytes_per_second`),
/// counters end in `_total`, attributes go in a `_info` metric of value 1, and every series has
/// the labels `node` plus `device`/`port` (ports) or `check`/`severity` (findings).
pub fn prometheus(r: &Report) -> String {
    let node = esc(&r.node);
    let mut s = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, rows: Vec<(String, String)>| {
        s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, v) in rows {
            s.push_str(&format!("{name}{{{labels}}} {v}\n"));
        }
    };
    let at_node = format!("node=\"{node}\"");
    metric(
        "fabric_check_verdict",
        "gauge",
        "Probe verdict: 0 pass, 1 warn, 2 fail, 3 could not run.",
        vec![(at_node.clone(), r.verdict.exit_code().to_string())],
    );
    metric(
        "fabric_check_probe_duration_seconds",
        "gauge",
        "Wall time of the probe's gather and checks, in seconds.",
        vec![(at_node.clone(), float(r.duration_ms / 1000.0))],
    );
    metric(
        "fabric_check_probe_timestamp_seconds",
        "gauge",
        "When the probe read the node, in seconds since the Unix epoch.",
        vec![(
            at_node.clone(),
            float(r.counters.taken_unix_ms as f64 / 1000.0),
        )],
    );
    let mut rows = Vec::new();
    for (id, _) in ALL {
        for sev in [Severity::Warn, Severity::Fail] {
            let n = r
                .findings
                .iter()
                .filter(|f| f.check == *id && f.severity == sev)
                .count();
            rows.push((
                format!("{at_node},check=\"{id}\",severity=\"{}\"", sev.as_str()),
                n.to_string(),
            ));
        }
    }
    metric(
        "fabric_check_findings",
        "gauge",
        "Findings of this probe run by check id and severity (every check, zeros included).",
        rows,
    );
    let mut info = Vec::new();
    let mut up = Vec::new();
    let mut rate = Vec::new();
    for d in &r.inventory.devices {
        for p in &d.ports {
            let l = format!("{at_node},device=\"{}\",port=\"{}\"", esc(&d.name), p.port);
            info.push((
                format!(
                    "{l},link_layer=\"{}\",netdev=\"{}\"",
                    esc(p.link_layer.as_deref().unwrap_or("")),
                    esc(p.netdev.as_deref().unwrap_or(""))
                ),
                "1".to_owned(),
            ));
            up.push((
                l.clone(),
                u8::from(p.state.as_deref() == Some("ACTIVE")).to_string(),
            ));
            if let Some(g) = p.rate_gbps {
                rate.push((l, float(g * 1e9 / 8.0)));
            }
        }
    }
    metric(
        "fabric_check_port_info",
        "gauge",
        "RDMA port attributes (link layer, netdev); the value is always 1.",
        info,
    );
    metric(
        "fabric_check_port_active",
        "gauge",
        "1 when the RDMA port's state is ACTIVE, else 0.",
        up,
    );
    metric(
        "fabric_check_port_rate_bytes_per_second",
        "gauge",
        "RDMA port link rate, in bytes per second.",
        rate,
    );
    let watched = crate::config::default_thresholds();
    let mut events = Vec::new();
    for (key, pc) in &r.counters.ports {
        let Some((dev, port)) = key.rsplit_once('/') else {
            continue;
        };
        for (name, v) in pc.counters.iter().chain(&pc.hw_counters) {
            if watched.contains_key(name) {
                events.push((
                    format!(
                        "{at_node},device=\"{}\",port=\"{}\",counter=\"{}\"",
                        esc(dev),
                        esc(port),
                        esc(name)
                    ),
                    v.to_string(),
                ));
            }
        }
    }
    metric(
        "fabric_check_port_events_total",
        "counter",
        "The port's error and pause counters that fabric-check judges (sysfs counters and \
         hw_counters, as the kernel counts them).",
        events,
    );
    s
}

/// A sample value without `f32`-style noise: the shortest form that reads back as the same `f64`.
fn float(v: f64) -> String {
    if v == 0.0 {
        "0".to_owned()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{CounterSnapshot, Inventory, SCHEMA, Verdict};
    use serde_json::Value;

    fn report() -> Report {
        let f = |sev, dev: &str| {
            Finding::new(
                "ib.port_state",
                sev,
                Some(dev),
                Some(1),
                Value::Null,
                Value::Null,
                format!("{dev} msg"),
            )
        };
        Report {
            schema: SCHEMA.into(),
            node: "n\"1".into(),
            verdict: Verdict::Fail,
            duration_ms: 1.5,
            inventory: Inventory::default(),
            counters: CounterSnapshot::default(),
            findings: vec![f(Severity::Info, "mlx5_0"), f(Severity::Fail, "mlx5_3")],
            error: None,
            not_whole: None,
        }
    }

    #[test]
    fn the_table_puts_the_failing_device_first_and_colours_only_when_asked() {
        let t = table(&report(), false);
        let a = t.find("mlx5_3").unwrap();
        let b = t.find("mlx5_0").unwrap();
        assert!(a < b, "{t}");
        assert!(!t.contains('\x1b'));
        assert!(table(&report(), true).contains("\x1b[1;31m"));
    }

    #[test]
    fn prometheus_output_escapes_labels_and_declares_types() {
        let p = prometheus(&report());
        assert!(p.contains("fabric_check_verdict{node=\"n\\\"1\"} 2"), "{p}");
        assert!(p.contains("# TYPE fabric_check_findings gauge"));
        assert!(p.contains("check=\"ib.port_state\",severity=\"fail\"} 1"));
    }

    fn report_with_ports() -> Report {
        let mut r = report();
        let mut dev = crate::probe::InventoryDevice {
            name: "mlx5_0".into(),
            ..Default::default()
        };
        dev.ports.push(crate::probe::InventoryPort {
            port: 1,
            state: Some("ACTIVE".into()),
            rate_gbps: Some(400.0),
            link_layer: Some("InfiniBand".into()),
            netdev: Some("ib0".into()),
            ..Default::default()
        });
        r.inventory.devices.push(dev);
        let mut pc = crate::probe::PortCounters::default();
        pc.counters.insert("symbol_error".into(), 7);
        pc.counters.insert("port_rcv_data".into(), 123_456);
        r.counters.ports.insert("mlx5_0/1".into(), pc);
        r.counters.taken_unix_ms = 1_764_000_000_123;
        r
    }

    /// node_exporter's conventions, checked line by line: HELP and TYPE before the samples,
    /// snake_case names under `fabric_check_`, counters (and only counters) ending in `_total`,
    /// a base unit or `_info` on every gauge that is not a count or a 0/1 state.
    #[test]
    fn prometheus_output_follows_node_exporter_naming_conventions() {
        let p = prometheus(&report_with_ports());
        let mut kinds = BTreeMap::new();
        let mut helped = std::collections::BTreeSet::new();
        for line in p.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                helped.insert(rest.split(' ').next().unwrap().to_owned());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(helped.contains(name), "TYPE before HELP for {name}");
                kinds.insert(name.to_owned(), kind.to_owned());
            } else {
                let name = line.split('{').next().unwrap();
                assert!(kinds.contains_key(name), "sample before TYPE: {line}");
                let value = line.rsplit(' ').next().unwrap();
                assert!(value.parse::<f64>().is_ok(), "not a number: {line}");
                assert!(!value.starts_with("-0"), "negative zero: {line}");
            }
        }
        for (name, kind) in &kinds {
            assert!(name.starts_with("fabric_check_"), "{name}");
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}"
            );
            assert_eq!(
                name.ends_with("_total"),
                kind == "counter",
                "{name} is a {kind}"
            );
            let unitless = [
                "fabric_check_verdict",
                "fabric_check_findings",
                "fabric_check_port_active",
            ];
            if kind == "gauge" && !unitless.contains(&name.as_str()) {
                assert!(
                    ["_seconds", "_bytes_per_second", "_info"]
                        .iter()
                        .any(|u| name.ends_with(u)),
                    "{name} has no base unit in its name"
                );
            }
            assert!(
                !name.contains("gbps") && !name.contains("_ms"),
                "{name}: not a base unit"
            );
        }
        assert!(
            p.contains(
                "fabric_check_port_rate_bytes_per_second{node=\"n\\\"1\",device=\"mlx5_0\",port=\"1\"} 50000000000"
            ),
            "{p}"
        );
        assert!(p.contains("fabric_check_port_events_total{node=\"n\\\"1\",device=\"mlx5_0\",port=\"1\",counter=\"symbol_error\"} 7"), "{p}");
        assert!(
            !p.contains("port_rcv_data"),
            "a data counter is not an event: {p}"
        );
        assert!(
            p.contains("fabric_check_probe_timestamp_seconds{node=\"n\\\"1\"} 1764000000.123"),
            "{p}"
        );
        assert!(
            p.contains("link_layer=\"InfiniBand\",netdev=\"ib0\"} 1"),
            "{p}"
        );
    }
}
