//! etc/grafana-dashboard.json is a dashboard Grafana imports: the structure its JSON model
//! requires (uid, title, schemaVersion, panels with unique ids on a 24-column grid that do not
//! overlap, targets with refIds), the datasource input it declares, the `$node` variable it uses,
//! and only metrics that `fabric-check probe --format prometheus` really writes.

use std::collections::BTreeSet;
use std::path::PathBuf;

use assert_cmd::Command;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo().join("etc/grafana-dashboard.json")).unwrap();
    serde_json::from_str(&text).expect("etc/grafana-dashboard.json is JSON")
}

fn panels(d: &Value) -> &Vec<Value> {
    d["panels"].as_array().expect("panels is an array")
}

fn exprs(d: &Value) -> Vec<String> {
    panels(d)
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| {
            t["expr"]
                .as_str()
                .expect("every target has an expr")
                .to_owned()
        })
        .collect()
}

/// The metric names `fabric-check probe` writes for a fixture with ports and counters.
fn exported_metrics() -> BTreeSet<String> {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args([
            "probe",
            "--node",
            "n1",
            "--format",
            "prometheus",
            "--sysfs-root",
        ])
        .arg(repo().join("tests/fixtures/sysfs/ib8-symbol-errors"))
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect()
}

#[test]
fn the_dashboard_has_what_grafanas_json_model_requires() {
    let d = dashboard();
    assert_eq!(d["uid"], "fabric-check");
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    assert!(d["time"]["from"].is_string() && d["time"]["to"].is_string());
    let mut ids = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for p in panels(&d) {
        let id = p["id"].as_u64().expect("panel id is a number");
        assert!(ids.insert(id), "panel id {id} is used twice");
        let kind = p["type"].as_str().unwrap();
        assert!(
            ["stat", "timeseries", "table"].contains(&kind),
            "panel type {kind}"
        );
        assert!(
            p["title"].as_str().is_some_and(|t| !t.is_empty()),
            "panel {id} has no title"
        );
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_u64().unwrap(),
            g["y"].as_u64().unwrap(),
            g["w"].as_u64().unwrap(),
            g["h"].as_u64().unwrap(),
        );
        assert!(
            w > 0 && h > 0 && x + w <= 24,
            "panel {id} does not fit the 24-column grid"
        );
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(
                    cells.insert((cx, cy)),
                    "panel {id} overlaps another at {cx},{cy}"
                );
            }
        }
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {id} queries nothing");
        let refs: BTreeSet<&str> = targets
            .iter()
            .map(|t| t["refId"].as_str().unwrap())
            .collect();
        assert_eq!(
            refs.len(),
            targets.len(),
            "panel {id}: refIds must be unique"
        );
    }
}

#[test]
fn every_datasource_is_the_declared_input_and_every_variable_is_defined() {
    let d = dashboard();
    assert_eq!(d["__inputs"][0]["name"], "DS_PROMETHEUS");
    assert_eq!(d["__inputs"][0]["pluginId"], "prometheus");
    for p in panels(&d) {
        assert_eq!(
            p["datasource"]["uid"], "${DS_PROMETHEUS}",
            "panel {}",
            p["id"]
        );
    }
    let vars: BTreeSet<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for e in exprs(&d) {
        for (i, _) in e.match_indices('$') {
            let name: String = e[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                vars.contains(name.as_str()),
                "{e}: ${name} is not a dashboard variable"
            );
        }
    }
}

#[test]
fn the_dashboard_queries_only_metrics_the_probe_writes() {
    let exported = exported_metrics();
    assert!(exported.contains("fabric_check_verdict"), "{exported:?}");
    let mut used = BTreeSet::new();
    for e in exprs(&dashboard()) {
        let mut rest = e.as_str();
        while let Some(i) = rest.find("fabric_check_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            assert!(
                exported.contains(&name),
                "{e}: {name} is not written by the probe"
            );
            used.insert(name);
        }
    }
    for m in &exported {
        assert!(used.contains(m), "the dashboard shows nothing of {m}");
    }
}
