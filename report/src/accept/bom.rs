//! BOM consistency across nodes, read as generic JSON.
//!
//! The BOM type is owned by `fabric_base::bom`; this module deliberately does not depend on its Rust
//! shape, only on the pinned files being JSON objects. Each file is flattened into dotted paths
//! (`nics.0.fw_ver`), and every path is compared across nodes. Keys that identify a node rather
//! than describe it (node and host names, serials, GUIDs, MAC addresses, timestamps) are expected
//! to differ and are not compared; the thresholds file can add more.
//!
//! The node's name comes from a top-level `node` or `hostname` key, else the file name.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::Problem;

/// Key names (last path segment) that identify a node and may differ.
pub const IDENTITY_KEYS: &[&str] = &[
    "node",
    "hostname",
    "host",
    "nodename",
    "pinned_at",
    "captured_at",
    "collected_at",
    "timestamp",
    "serial",
    "serial_number",
    "board_serial",
    "node_guid",
    "sys_image_guid",
    "port_guid",
    "guid",
    "mac",
    "mac_address",
    "address",
    "uuid",
    "ip",
    "lid",
    "sm_lid",
    "node_desc",
    "bus_id",
    "pci",
    "schema",
];

/// One node's BOM flattened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeBom {
    /// Node name.
    pub node: String,
    /// The file.
    pub file: String,
    /// Dotted path → value as text.
    pub fields: BTreeMap<String, String>,
}

/// A path whose value differs between nodes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drift {
    /// Dotted path.
    pub path: String,
    /// Value → nodes holding it (a missing key shows as `(absent)`).
    pub values: BTreeMap<String, Vec<String>>,
}

/// The comparison.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BomReport {
    /// Nodes compared.
    pub nodes: Vec<String>,
    /// Paths compared.
    pub compared: usize,
    /// Paths that differ.
    pub drift: Vec<Drift>,
}

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, x, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                flatten(&format!("{prefix}.{i}"), x, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// Reads one pinned BOM file's text.
pub fn read(file: &str, text: &str) -> Result<NodeBom, Problem> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        Problem::fail(
            file,
            e.line() as u64,
            format!("the BOM is not valid JSON ({e}); pin it again with `fabric-check bom`"),
        )
    })?;
    if !v.is_object() {
        return Err(Problem::fail(
            file,
            1,
            "the BOM is not a JSON object".into(),
        ));
    }
    let node = ["node", "hostname", "host"]
        .iter()
        .find_map(|k| v[*k].as_str())
        .map(String::from)
        .unwrap_or_else(|| {
            std::path::Path::new(file)
                .file_stem()
                .map_or(file.to_string(), |s| s.to_string_lossy().into_owned())
        });
    let mut fields = BTreeMap::new();
    flatten("", &v, &mut fields);
    Ok(NodeBom {
        node,
        file: file.to_string(),
        fields,
    })
}

fn ignored(path: &str, extra: &[String]) -> bool {
    let last = path
        .rsplit('.')
        .find(|s| s.parse::<usize>().is_err())
        .unwrap_or(path);
    IDENTITY_KEYS.contains(&last) || extra.iter().any(|e| e == last || e == path)
}

/// Compares every path across nodes.
pub fn compare(boms: &[NodeBom], ignore: &[String]) -> BomReport {
    let mut paths: std::collections::BTreeSet<&str> = Default::default();
    for b in boms {
        paths.extend(b.fields.keys().map(String::as_str));
    }
    let mut report = BomReport {
        nodes: boms.iter().map(|b| b.node.clone()).collect(),
        ..Default::default()
    };
    for p in paths {
        if ignored(p, ignore) {
            continue;
        }
        report.compared += 1;
        let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for b in boms {
            let v = b
                .fields
                .get(p)
                .cloned()
                .unwrap_or_else(|| "(absent)".into());
            values.entry(v).or_default().push(b.node.clone());
        }
        if values.len() > 1 {
            report.drift.push(Drift {
                path: p.to_string(),
                values,
            });
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firmware_drift_is_found_and_serials_are_not() {
        let a = read(
            "a.json",
            r#"{"node":"n1","nics":[{"fw_ver":"28.39.1002","serial":"X1"}],"mtu":4096}"#,
        )
        .unwrap();
        let b = read(
            "b.json",
            r#"{"node":"n2","nics":[{"fw_ver":"28.36.1010","serial":"X2"}],"mtu":4096}"#,
        )
        .unwrap();
        let r = compare(&[a, b], &[]);
        assert_eq!(r.compared, 2);
        assert_eq!(r.drift.len(), 1);
        assert_eq!(r.drift[0].path, "nics.0.fw_ver");
        assert_eq!(r.drift[0].values["28.36.1010"], vec!["n2".to_string()]);
    }
}
