//! The cost model: what a fabric costs per accepted training run (see `docs/cost-model.md`).
//!
//! The buyer's guide writes the fabric-adjusted cluster cost as a sum of ten terms. Seven of them
//! are *spend* (capital amortised per hour, running costs, operations hours × rate); the other two
//! that come from the data, failed-job/retry waste and idle GPU time, are not extra spend: they are
//! the part of that same spend that bought nothing. Adding them to the spend would count those
//! GPU-hours twice, so here they are **attributions**: shares of the capacity cost, shown as line
//! items ("of which"), never added to the total.
//!
//! All money is [`rust_decimal::Decimal`]; GPU time is integer GPU-seconds until it is turned into
//! hours, so every figure is exact up to the final rounding for display.

use std::collections::BTreeMap;
use std::path::Path;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize};

/// Hours in a year used to amortise capital (365 days; leap days are ignored on purpose so a
/// yearly rate is the same in every year).
pub const HOURS_PER_YEAR: u32 = 8760;

/// Errors reading a cost file.
#[derive(Debug, thiserror::Error)]
pub enum CostError {
    /// The file could not be read.
    #[error("cannot read cost file {path}: {source}; check the path given to --cost")]
    Read {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The TOML is invalid or a field has the wrong type.
    #[error("cost file {path} is invalid: {message}; see etc/cost.toml for the format")]
    Parse {
        /// The path.
        path: String,
        /// What the parser said.
        message: String,
    },
    /// A value is out of range.
    #[error("cost file {path}: fabric `{fabric}`: {message}")]
    Invalid {
        /// The path.
        path: String,
        /// The fabric entry.
        fabric: String,
        /// What is wrong and what to do.
        message: String,
    },
}

/// An exact amount of money (or hours), written in TOML as a string (`"1234.56"`) or an integer.
/// Floats are refused: they cannot hold most decimal fractions exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Exact(pub Decimal);

impl<'de> Deserialize<'de> for Exact {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Exact;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a decimal amount as a string (\"1234.56\") or an integer")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Exact, E> {
                Ok(Exact(Decimal::from(v)))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Exact, E> {
                Ok(Exact(Decimal::from(v)))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Exact, E> {
                Err(E::custom(format!(
                    "{v} is a float; write amounts as strings (\"{v}\") so they stay exact"
                )))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Exact, E> {
                v.trim()
                    .parse::<Decimal>()
                    .map(Exact)
                    .map_err(|e| E::custom(format!("`{v}` is not a decimal amount ({e})")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A capital item: purchase price written off in equal parts over `years`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CapitalItem {
    /// Purchase price, currency units.
    pub price: Exact,
    /// Amortisation period, years.
    pub years: Exact,
}

/// The four capital items of the guide.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Capital {
    /// GPU servers.
    pub compute_capacity: Option<CapitalItem>,
    /// NICs / HCAs.
    pub network_adapters: Option<CapitalItem>,
    /// Leaf and spine switches.
    pub switches: Option<CapitalItem>,
    /// Transceivers and cables.
    pub optics_and_cables: Option<CapitalItem>,
}

/// Running items, currency units per hour.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Running {
    /// Rack power, cooling and floor space, per hour.
    pub rack_power_and_space: Option<Exact>,
    /// Storage and the data path, per hour.
    pub storage_and_data_path: Option<Exact>,
    /// Vendor support and escalation contracts, per hour.
    pub support_and_escalation: Option<Exact>,
}

/// Fabric operations: people's hours times a rate.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Operations {
    /// Standing hours per week to keep the fabric stable (monitoring, firmware, tickets).
    #[serde(default)]
    pub hours_per_week: Exact,
    /// Extra hours per node drain seen in the data (triage, reseat, RMA, resume).
    #[serde(default)]
    pub hours_per_drain: Exact,
    /// Loaded cost of one operations hour.
    #[serde(default)]
    pub rate_per_hour: Exact,
}

/// One fabric's (or partition's) cost entry.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FabricCost {
    /// Values of the grouping field (partition by default) this entry covers; the entry's own
    /// name when empty.
    #[serde(default, rename = "match")]
    pub matches: Vec<String>,
    /// Installed GPUs: the capacity the spend buys.
    pub gpus: u32,
    /// Installed nodes (informational; drains are normalised by node-hours used).
    #[serde(default)]
    pub nodes: Option<u32>,
    /// GPUs per node, used when a job's TRES carry no `gres/gpu` (testbeds without GPUs).
    #[serde(default)]
    pub gpus_per_node: Option<u32>,
    /// Capital items.
    #[serde(default)]
    pub capital: Capital,
    /// Running items.
    #[serde(default)]
    pub running: Running,
    /// Operations.
    #[serde(default)]
    pub operations: Operations,
}

/// The whole cost file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CostFile {
    /// Currency code shown with every amount.
    #[serde(default = "default_currency")]
    pub currency: String,
    /// Entries by fabric name.
    #[serde(default)]
    pub fabric: BTreeMap<String, FabricCost>,
}

fn default_currency() -> String {
    "USD".into()
}

impl CostFile {
    /// Parses a cost file's text; `path` only names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Self, CostError> {
        let file: CostFile = toml::from_str(text).map_err(|e| CostError::Parse {
            path: path.into(),
            message: fabric_base::toml_error::toml_message(text, &e),
        })?;
        if file.fabric.is_empty() {
            return Err(CostError::Parse {
                path: path.into(),
                message: "no [fabric.NAME] entry, so no figure could be priced".into(),
            });
        }
        for (name, f) in &file.fabric {
            let bad = |message: String| CostError::Invalid {
                path: path.into(),
                fabric: name.clone(),
                message,
            };
            if f.gpus == 0 {
                return Err(bad("`gpus` must be the installed GPU count, above 0".into()));
            }
            let items = [
                ("compute_capacity", &f.capital.compute_capacity),
                ("network_adapters", &f.capital.network_adapters),
                ("switches", &f.capital.switches),
                ("optics_and_cables", &f.capital.optics_and_cables),
            ];
            for (item, c) in items {
                if let Some(c) = c {
                    if c.years.0 <= Decimal::ZERO {
                        return Err(bad(format!("capital.{item}.years must be above 0")));
                    }
                    if c.price.0 < Decimal::ZERO {
                        return Err(bad(format!("capital.{item}.price must not be negative")));
                    }
                }
            }
        }
        Ok(file)
    }

    /// Reads and parses a cost file.
    pub fn load(path: &Path) -> Result<Self, CostError> {
        let text = std::fs::read_to_string(path).map_err(|source| CostError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The entry covering a group value: one whose `match` lists it, else one named after it.
    pub fn entry_for(&self, group: &str) -> Option<(&str, &FabricCost)> {
        self.fabric
            .iter()
            .find(|(_, f)| f.matches.iter().any(|m| m == group))
            .or_else(|| {
                self.fabric
                    .iter()
                    .find(|(n, f)| f.matches.is_empty() && *n == group)
            })
            .map(|(n, f)| (n.as_str(), f))
    }
}

/// What the accounting data says about one fabric over the window (inputs to [`compute`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageFigures {
    /// GPU-seconds allocated to jobs inside the window.
    pub allocated_gpu_s: u64,
    /// GPU-seconds of failed jobs, requeued attempts and wrapper retries (a part of allocated).
    pub waste_gpu_s: u64,
    /// Node drains seen in the data.
    pub drains: u64,
    /// Accepted training runs (accepted and on time).
    pub accepted_runs: u64,
    /// Accepted inference outputs, when counted.
    pub accepted_outputs: Option<u64>,
    /// GPU-seconds of spare nodes that jobs held through their prolog and gave back
    /// (`--fabric-check-spares`; a part of allocated).
    pub spare_gpu_s: u64,
}

/// One line of the breakdown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostLine {
    /// The guide's term, snake case.
    pub item: &'static str,
    /// Amount over the window, currency units.
    pub amount: Decimal,
    /// `spend` (adds up to the total) or `share` (a part of the capacity spend, not added).
    pub kind: &'static str,
}

/// The cost of one fabric over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostBreakdown {
    /// Currency code.
    pub currency: String,
    /// Window length, hours.
    pub window_h: Decimal,
    /// Installed GPU-hours in the window (`gpus × window_h`).
    pub capacity_gpu_h: Decimal,
    /// Spend lines then share lines.
    pub lines: Vec<CostLine>,
    /// The fabric-adjusted cluster cost: the sum of the spend lines.
    pub total: Decimal,
    /// Capacity cost (capital + running) per installed GPU-hour.
    pub capacity_cost_per_gpu_h: Decimal,
    /// Operations hours in the window.
    pub operations_h: Decimal,
    /// GPU-hours idle: capacity minus allocated (never negative).
    pub idle_gpu_h: Decimal,
    /// GPU-hours wasted (failed, requeued, retried).
    pub waste_gpu_h: Decimal,
    /// Useful GPU-hours: allocated minus waste.
    pub useful_gpu_h: Decimal,
    /// `total / accepted_runs`, none when no run was accepted.
    pub per_accepted_run: Option<Decimal>,
    /// `total / accepted_outputs`, none when outputs are not counted or zero.
    pub per_accepted_output: Option<Decimal>,
}

fn per_hour(c: &Option<CapitalItem>) -> Decimal {
    c.as_ref().map_or(Decimal::ZERO, |c| {
        c.price.0 / (c.years.0 * Decimal::from(HOURS_PER_YEAR))
    })
}

/// GPU-seconds to GPU-hours, exact to 28 significant digits.
pub fn gpu_s_to_h(s: u64) -> Decimal {
    Decimal::from(s) / Decimal::from(3600)
}

/// Computes the breakdown for one fabric over `window_h` hours.
///
/// Spend: capital items `price / (years × 8760) × window_h`; running items `per_hour ×
/// window_h`; operations `(hours_per_week × window_h / 168 + hours_per_drain × drains) ×
/// rate_per_hour`. Shares of the capacity spend (capital + running): idle GPU time and
/// failed-job/retry waste, each `GPU-hours × capacity cost per installed GPU-hour`.
pub fn compute(
    currency: &str,
    entry: &FabricCost,
    window_h: Decimal,
    usage: &UsageFigures,
) -> CostBreakdown {
    let mut lines = Vec::new();
    let capital = [
        ("compute_capacity", &entry.capital.compute_capacity),
        ("network_adapters", &entry.capital.network_adapters),
        ("switches", &entry.capital.switches),
        ("optics_and_cables", &entry.capital.optics_and_cables),
    ];
    for (item, c) in capital {
        lines.push(CostLine {
            item,
            amount: per_hour(c) * window_h,
            kind: "spend",
        });
    }
    let running = [
        ("rack_power_and_space", entry.running.rack_power_and_space),
        ("storage_and_data_path", entry.running.storage_and_data_path),
        (
            "support_and_escalation",
            entry.running.support_and_escalation,
        ),
    ];
    for (item, r) in running {
        lines.push(CostLine {
            item,
            amount: r.map_or(Decimal::ZERO, |r| r.0) * window_h,
            kind: "spend",
        });
    }
    let ops = &entry.operations;
    let operations_h = ops.hours_per_week.0 * window_h / Decimal::from(168)
        + ops.hours_per_drain.0 * Decimal::from(usage.drains);
    lines.push(CostLine {
        item: "fabric_operations",
        amount: operations_h * ops.rate_per_hour.0,
        kind: "spend",
    });
    let total: Decimal = lines.iter().map(|l| l.amount).sum();
    let capacity_spend: Decimal = lines
        .iter()
        .filter(|l| l.item != "fabric_operations")
        .map(|l| l.amount)
        .sum();
    let capacity_gpu_h = Decimal::from(entry.gpus) * window_h;
    let capacity_cost_per_gpu_h = if capacity_gpu_h.is_zero() {
        Decimal::ZERO
    } else {
        capacity_spend / capacity_gpu_h
    };
    let allocated_gpu_h = gpu_s_to_h(usage.allocated_gpu_s);
    let idle_gpu_h = (capacity_gpu_h - allocated_gpu_h).max(Decimal::ZERO);
    let waste_gpu_h = gpu_s_to_h(usage.waste_gpu_s);
    lines.push(CostLine {
        item: "failed_job_and_retry_waste",
        amount: waste_gpu_h * capacity_cost_per_gpu_h,
        kind: "share",
    });
    lines.push(CostLine {
        item: "queue_delay_and_idle_gpu_time",
        amount: idle_gpu_h * capacity_cost_per_gpu_h,
        kind: "share",
    });
    if usage.spare_gpu_s > 0 {
        // What the spares cost (their prolog-long hold), to weigh against the requeues they
        // avoided; only where a job used spares, so a report without them is unchanged.
        lines.push(CostLine {
            item: "spare_nodes_held",
            amount: gpu_s_to_h(usage.spare_gpu_s) * capacity_cost_per_gpu_h,
            kind: "share",
        });
    }
    let per_accepted_run =
        (usage.accepted_runs > 0).then(|| total / Decimal::from(usage.accepted_runs));
    let per_accepted_output = usage
        .accepted_outputs
        .filter(|n| *n > 0)
        .map(|n| total / Decimal::from(n));
    CostBreakdown {
        currency: currency.to_string(),
        window_h,
        capacity_gpu_h,
        lines,
        total,
        capacity_cost_per_gpu_h,
        operations_h,
        idle_gpu_h,
        waste_gpu_h,
        useful_gpu_h: (allocated_gpu_h - waste_gpu_h).max(Decimal::ZERO),
        per_accepted_run,
        per_accepted_output,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
currency = "EUR"
[fabric.ib]
match = ["gpu-ib"]
gpus = 16
[fabric.ib.capital]
compute_capacity = { price = "876000", years = 5 }
switches = { price = "87600", years = 2 }
[fabric.ib.running]
rack_power_and_space = "10"
[fabric.ib.operations]
hours_per_week = "16.8"
hours_per_drain = "2"
rate_per_hour = "100"
"#;

    fn dec(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn a_group_value_finds_its_entry_by_match_list() {
        let f = CostFile::parse(FILE, "cost.toml").unwrap();
        assert_eq!(f.entry_for("gpu-ib").unwrap().0, "ib");
        assert!(
            f.entry_for("ib").is_none(),
            "a match list replaces the name"
        );
        assert!(f.entry_for("roce").is_none());
    }

    #[test]
    fn a_float_amount_is_refused_with_advice() {
        let text = FILE.replace("\"10\"", "10.5");
        let err = CostFile::parse(&text, "cost.toml").unwrap_err().to_string();
        assert!(err.contains("write amounts as strings"), "{err}");
    }

    #[test]
    fn zero_years_is_refused() {
        let text = FILE.replace("years = 2", "years = 0");
        let err = CostFile::parse(&text, "cost.toml").unwrap_err().to_string();
        assert!(err.contains("capital.switches.years"), "{err}");
    }

    /// Ten hours, 16 GPUs (160 GPU-h of capacity).
    /// compute 876000/(5×8760) = 20/h → 200; switches 87600/(2×8760) = 5/h → 50; rack 10/h → 100.
    /// Capacity spend 350 → 350/160 = 2.1875 per GPU-h. Operations (16.8 × 10/168 + 2 × 1) h = 3 h
    /// × 100 = 300. Total 650. Allocated 120 GPU-h, waste 20 GPU-h → 43.75; idle 40 GPU-h → 87.5.
    /// Two accepted runs → 325 each.
    #[test]
    fn the_breakdown_follows_the_documented_arithmetic() {
        let f = CostFile::parse(FILE, "cost.toml").unwrap();
        let usage = UsageFigures {
            allocated_gpu_s: 120 * 3600,
            waste_gpu_s: 20 * 3600,
            drains: 1,
            accepted_runs: 2,
            accepted_outputs: None,
            spare_gpu_s: 0,
        };
        let b = compute(&f.currency, &f.fabric["ib"], Decimal::from(10), &usage);
        let get = |item| b.lines.iter().find(|l| l.item == item).unwrap().amount;
        assert_eq!(get("compute_capacity"), dec("200"));
        assert_eq!(get("switches"), dec("50"));
        assert_eq!(get("rack_power_and_space"), dec("100"));
        assert_eq!(b.operations_h, dec("3"));
        assert_eq!(get("fabric_operations"), dec("300"));
        assert_eq!(b.total, dec("650"));
        assert_eq!(b.capacity_cost_per_gpu_h, dec("2.1875"));
        assert_eq!(get("failed_job_and_retry_waste"), dec("43.75"));
        assert_eq!(get("queue_delay_and_idle_gpu_time"), dec("87.5"));
        assert_eq!(b.useful_gpu_h, dec("100"));
        assert_eq!(b.per_accepted_run, Some(dec("325")));
        assert_eq!(b.per_accepted_output, None);
    }
}
