//! The thresholds file (TOML) that turns figures into pass/fail.
//!
//! ```toml
//! max_cv_pct = 5.0           # run-to-run coefficient of variation of busbw, per size
//! cv_min_size = "1M"         # ... at sizes from this one up
//! zero_wrong = true          # any wrong element fails
//! max_outlier_runs = 0       # runs more than `outlier_drop_pct` below the median at some size
//! outlier_drop_pct = 10.0
//! max_rank_skew_pct = 10.0   # a rank this much slower than the median rank is an outlier
//! [[min_busbw]]
//! size = "8G"                # or a byte count
//! gbps = 180.0
//! [bom]
//! ignore = ["node", "hostname", "pinned_at"]   # keys allowed to differ between nodes
//! ```

use serde::{Deserialize, Serialize};

/// A minimum bus bandwidth at one size.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MinBusbw {
    /// Size: `8G`, `512M` or bytes.
    pub size: toml::Value,
    /// Minimum mean bus bandwidth over runs, GB/s.
    pub gbps: f64,
}

/// BOM comparison settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BomRules {
    /// Key names (last path segment) or dotted paths allowed to differ between nodes.
    #[serde(default)]
    pub ignore: Vec<String>,
}

/// The thresholds.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// Largest run-to-run CV of busbw at any size, percent.
    #[serde(default)]
    pub max_cv_pct: Option<f64>,
    /// Fail on any wrong element.
    #[serde(default = "yes")]
    pub zero_wrong: bool,
    /// Smallest size the CV limit applies to (latency-bound sizes vary by nature): `1M` default.
    #[serde(default)]
    pub cv_min_size: Option<toml::Value>,
    /// Largest number of outlier runs.
    #[serde(default)]
    pub max_outlier_runs: Option<u64>,
    /// How far below the median a run's busbw must be to count as an outlier, percent.
    #[serde(default = "ten")]
    pub outlier_drop_pct: f64,
    /// How much slower than the median rank a rank must be to count as an outlier, percent.
    #[serde(default = "ten")]
    pub max_rank_skew_pct: f64,
    /// Minimum busbw per size.
    #[serde(default)]
    pub min_busbw: Vec<MinBusbw>,
    /// BOM rules.
    #[serde(default)]
    pub bom: BomRules,
}

fn yes() -> bool {
    true
}
fn ten() -> f64 {
    10.0
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            max_cv_pct: None,
            zero_wrong: true,
            cv_min_size: None,
            max_outlier_runs: None,
            outlier_drop_pct: 10.0,
            max_rank_skew_pct: 10.0,
            min_busbw: Vec::new(),
            bom: BomRules::default(),
        }
    }
}

impl Thresholds {
    /// The smallest size the CV limit applies to, bytes.
    pub fn cv_min_bytes(&self) -> u64 {
        match &self.cv_min_size {
            Some(toml::Value::Integer(i)) => u64::try_from(*i).unwrap_or(0),
            Some(toml::Value::String(s)) => super::parse_size(s).unwrap_or(1 << 20),
            _ => 1 << 20,
        }
    }

    /// Parses a thresholds file's text; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Self, String> {
        let t: Thresholds = toml::from_str(text).map_err(|e| {
            format!(
                "thresholds file {path} is invalid: {}; see docs/cost-model.md",
                fabric_base::toml_error::toml_message(text, &e)
            )
        })?;
        let numbers = [
            ("max_cv_pct", t.max_cv_pct),
            ("outlier_drop_pct", Some(t.outlier_drop_pct)),
            ("max_rank_skew_pct", Some(t.max_rank_skew_pct)),
        ]
        .into_iter()
        .chain(t.min_busbw.iter().map(|m| ("min_busbw gbps", Some(m.gbps))));
        for (name, v) in numbers {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!(
                    "thresholds file {path}: {name} = {v} is not a number ≥ 0; write a percentage or GB/s figure"
                ));
            }
        }
        if let Some(v) = &t.cv_min_size
            && !matches!(v, toml::Value::Integer(i) if *i >= 0)
            && !matches!(v, toml::Value::String(s) if super::parse_size(s).is_some())
        {
            return Err(format!(
                "thresholds file {path}: cv_min_size {v} is not a size; write \"1M\", \"512K\" or a byte count"
            ));
        }
        for m in &t.min_busbw {
            if MinBusbw::bytes(m).is_none() {
                return Err(format!(
                    "thresholds file {path}: min_busbw size {} is not a size; write \"8G\", \"512M\" or a byte count",
                    m.size
                ));
            }
        }
        Ok(t)
    }
}

impl MinBusbw {
    /// The size in bytes.
    pub fn bytes(&self) -> Option<u64> {
        match &self.size {
            toml::Value::Integer(i) => u64::try_from(*i).ok(),
            toml::Value::String(s) => super::parse_size(s),
            _ => None,
        }
    }
}
