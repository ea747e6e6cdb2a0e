//! The node's bill of materials (BOM) and its drift against a pinned one.
//!
//! The buyer's acceptance guide says to lock the BOM (GPU, NIC/HCA model, firmware, driver,
//! MTU, kernel, CUDA, NCCL, ...) and re-test when any of it changes. A BOM here is a flat map of
//! stable keys to values, so a change names itself: `hca/mlx5_3/fw_ver: 28.39.1002 → 28.40.1000`.
//! Keys: `kernel`, `hca/<dev>/{model,board_id,fw_ver,driver}`,
//! `hca/<dev>/port<n>/{link_layer,rate,mtu}` (rate of ACTIVE ports only), `gpu/count`,
//! `gpu/<pci>/model`, `module/<name>/version` (e.g. the NVIDIA driver). CUDA and NCCL versions
//! are not visible in sysfs; they are left to the acceptance report, which runs them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The `schema` value of a BOM document.
pub const SCHEMA: &str = "fabric-check/bom/v1";

/// What is wrong with a BOM file.
#[derive(Debug, thiserror::Error)]
pub enum BomError {
    /// Unreadable.
    #[error(
        "cannot read pinned BOM {path}: {source}; write one with `fabric-check bom --pin FILE`"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a BOM document.
    #[error(
        "{path} is not a fabric-check/bom/v1 document ({message}); write one with `fabric-check bom --pin FILE`"
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's explanation.
        message: String,
    },
    /// Could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A bill of materials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bom {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The node it was taken on.
    pub node: String,
    /// Key → value.
    pub items: BTreeMap<String, String>,
}

impl Bom {
    /// Reads a pinned BOM.
    pub fn load(path: &Path) -> Result<Self, BomError> {
        let text = std::fs::read_to_string(path).map_err(|source| BomError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let b: Bom = serde_json::from_str(&text).map_err(|e| BomError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if b.schema != SCHEMA {
            return Err(BomError::Parse {
                path: path.to_path_buf(),
                message: format!("schema is {:?}", b.schema),
            });
        }
        Ok(b)
    }

    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Human-readable lines, `key  value`.
    pub fn to_text(&self) -> String {
        let w = self.items.keys().map(String::len).max().unwrap_or(0);
        let mut s = format!("# bill of materials of {}\n", self.node);
        for (k, v) in &self.items {
            s.push_str(&format!("{k:<w$}  {v}\n"));
        }
        s
    }
}

/// One difference between a pinned BOM and now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The key.
    pub key: String,
    /// The pinned value (absent: added since).
    pub pinned: Option<String>,
    /// The value now (absent: gone since).
    pub now: Option<String>,
}

impl Change {
    /// `hca/mlx5_3/fw_ver changed from 28.39.1002 to 28.40.1000 since the pin; re-test`.
    pub fn describe(&self) -> String {
        match (&self.pinned, &self.now) {
            (Some(a), Some(b)) => format!(
                "{} changed from {a} to {b} since the BOM was pinned; re-run acceptance and re-pin",
                self.key
            ),
            (Some(a), None) => format!("{} ({a}) is gone since the BOM was pinned", self.key),
            (None, Some(b)) => format!(
                "{} ({b}) is new since the BOM was pinned; re-run acceptance and re-pin",
                self.key
            ),
            (None, None) => self.key.clone(),
        }
    }
}

/// Every key whose value differs, in key order.
pub fn diff(pinned: &Bom, now: &Bom) -> Vec<Change> {
    let mut keys: Vec<&String> = pinned.items.keys().chain(now.items.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let a = pinned.items.get(k);
            let b = now.items.get(k);
            (a != b).then(|| Change {
                key: k.clone(),
                pinned: a.cloned(),
                now: b.cloned(),
            })
        })
        .collect()
}

/// The device and port a key is about: `hca/mlx5_3/port1/rate` → (`mlx5_3`, 1);
/// `gpu/0000:13:00.0/model` → (`0000:13:00.0`, none).
pub fn key_subject(key: &str) -> (Option<String>, Option<u32>) {
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        ["hca", dev, port, _] => (
            Some(dev.to_string()),
            port.strip_prefix("port").and_then(|p| p.parse().ok()),
        ),
        ["hca", dev, _] => (Some(dev.to_string()), None),
        ["gpu", pci, _] => (Some(pci.to_string()), None),
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bom(pairs: &[(&str, &str)]) -> Bom {
        Bom {
            schema: SCHEMA.into(),
            node: "n1".into(),
            items: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn diff_names_changed_added_and_removed_keys() {
        let a = bom(&[
            ("kernel", "6.1"),
            ("hca/mlx5_0/fw_ver", "1"),
            ("gpu/count", "8"),
        ]);
        let b = bom(&[
            ("kernel", "6.1"),
            ("hca/mlx5_0/fw_ver", "2"),
            ("hca/mlx5_1/fw_ver", "2"),
        ]);
        let d = diff(&a, &b);
        assert_eq!(d.len(), 3);
        assert_eq!(d[0].key, "gpu/count");
        assert_eq!(d[0].now, None);
        assert!(d[1].describe().contains("from 1 to 2"));
        assert!(d[2].describe().contains("is new"));
    }

    #[test]
    fn identical_boms_have_no_drift() {
        let a = bom(&[("kernel", "6.1")]);
        assert!(diff(&a, &a.clone()).is_empty());
    }

    #[test]
    fn keys_name_their_device_and_port() {
        assert_eq!(
            key_subject("hca/mlx5_3/port1/rate"),
            (Some("mlx5_3".into()), Some(1))
        );
        assert_eq!(
            key_subject("hca/mlx5_3/fw_ver"),
            (Some("mlx5_3".into()), None)
        );
        assert_eq!(key_subject("kernel"), (None, None));
    }

    #[test]
    fn a_bom_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bom.json");
        let a = bom(&[("kernel", "6.1")]);
        std::fs::write(&p, a.to_json()).unwrap();
        assert_eq!(Bom::load(&p).unwrap(), a);
        std::fs::write(&p, "{}").unwrap();
        assert!(matches!(Bom::load(&p), Err(BomError::Parse { .. })));
    }
}
