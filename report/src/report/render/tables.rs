//! The report as tables: the side-by-side worksheet, the cost breakdown and the drain reasons.

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

use super::super::aggregate::{GroupReport, Report, Sampled};
use super::{Better, Row, Table};

/// `YYYY-MM-DDTHH:MM:SSZ` of Unix seconds.
fn iso(t: i64) -> String {
    format!("{}Z", super::super::sacct_text::utc_text(t))
}

/// `d` to the cent, with its currency.
pub(super) fn money(d: Decimal, cur: &str) -> String {
    format!("{:.2} {cur}", d.round_dp(2))
}

fn sampled(s: &Sampled, digits: usize) -> Option<(f64, String)> {
    s.value.map(|v| (v, format!("{v:.digits$} (n={})", s.n)))
}

fn dnum(d: Decimal, dp: u32) -> (f64, String) {
    (
        d.to_f64().unwrap_or(0.0),
        format!("{:.*}", dp as usize, d.round_dp(dp)),
    )
}

/// The report as tables: the side-by-side worksheet, the cost breakdown and drain reasons.
pub fn report_tables(r: &Report) -> Vec<Table> {
    // A group whose field is empty in accounting (no partition recorded) gets a visible heading.
    let cols: Vec<String> = r
        .groups
        .iter()
        .map(|g| {
            if g.name.is_empty() {
                "(none)".to_string()
            } else {
                g.name.clone()
            }
        })
        .collect();
    let cur = r.currency.as_str();
    let per = |f: &dyn Fn(&GroupReport) -> Option<(f64, String)>| {
        r.groups.iter().map(f).collect::<Vec<_>>()
    };
    let mut rows = vec![
        Row::compare(
            "cost per accepted run",
            cur,
            Better::Lower,
            per(&|g| {
                g.cost
                    .as_ref()?
                    .per_accepted_run
                    .map(|d| (d.to_f64().unwrap_or(0.0), money(d, cur)))
            }),
        ),
        Row::compare(
            "cost per accepted output",
            cur,
            Better::Lower,
            per(&|g| {
                g.cost.as_ref()?.per_accepted_output.map(|d| {
                    (
                        d.to_f64().unwrap_or(0.0),
                        format!("{:.6} {cur}", d.round_dp(6)),
                    )
                })
            }),
        ),
        Row::compare(
            "fabric-adjusted cost",
            cur,
            Better::Neither,
            per(&|g| {
                g.cost
                    .as_ref()
                    .map(|c| (c.total.to_f64().unwrap_or(0.0), money(c.total, cur)))
            }),
        ),
        Row::compare(
            "accepted runs",
            "runs",
            Better::Neither,
            per(&|g| {
                Some((
                    g.accepted_runs as f64,
                    format!("{} of {}", g.accepted_runs, g.runs),
                ))
            }),
        ),
        Row::compare(
            "acceptance rate",
            "%",
            Better::Higher,
            per(&|g| sampled(&g.acceptance_rate_pct, 1)),
        ),
        Row::compare(
            "useful GPU utilisation",
            "%",
            Better::Higher,
            per(&|g| g.useful_utilisation_pct.map(|d| dnum(d, 1))),
        ),
        Row::compare(
            "failed-job and retry waste",
            "GPU-h",
            Better::Lower,
            per(&|g| {
                Some((
                    g.waste_gpu_h.to_f64().unwrap_or(0.0),
                    format!(
                        "{:.1} ({})",
                        g.waste_gpu_h.round_dp(1),
                        g.waste_pct
                            .map_or("n/a".into(), |p| format!("{:.1}%", p.round_dp(1)))
                    ),
                ))
            }),
        ),
        Row::compare(
            "idle GPU time",
            "GPU-h",
            Better::Lower,
            per(&|g| g.idle_gpu_h.map(|d| dnum(d, 1))),
        ),
        Row::compare(
            "drains per 1000 node-hours",
            "drains",
            Better::Lower,
            per(&|g| {
                g.drains_per_1000_node_h.map(|d| {
                    (
                        d.to_f64().unwrap_or(0.0),
                        format!("{:.2} (n={})", d.round_dp(2), g.drains),
                    )
                })
            }),
        ),
        Row::compare(
            "top drain reason",
            "check",
            Better::Neither,
            per(&|g| {
                g.top_drain_reasons
                    .first()
                    .map(|(k, n)| (0.0, format!("{k} ({n})")))
            }),
        ),
        Row::compare(
            "operations hours",
            "h",
            Better::Lower,
            per(&|g| g.cost.as_ref().map(|c| dnum(c.operations_h, 1))),
        ),
        Row::compare(
            "step time p50",
            "s",
            Better::Lower,
            per(&|g| sampled(&g.step_p50_s, 3)),
        ),
        Row::compare(
            "step time p95",
            "s",
            Better::Lower,
            per(&|g| sampled(&g.step_p95_s, 3)),
        ),
        Row::compare(
            "checkpoint share of wall time",
            "%",
            Better::Lower,
            per(&|g| sampled(&g.checkpoint_share_pct, 1)),
        ),
        Row::compare(
            "requeues avoided by spares (spare node-h held)",
            "jobs",
            Better::Higher,
            per(&|g| {
                (g.spares_saved > 0 || !g.spare_node_h.is_zero()).then(|| {
                    (
                        g.spares_saved as f64,
                        format!("{} ({})", g.spares_saved, g.spare_node_h.round_dp(3)),
                    )
                })
            }),
        ),
        Row::compare(
            "mean queue wait",
            "h",
            Better::Lower,
            per(&|g| sampled(&g.mean_queue_wait_h, 2)),
        ),
        Row::compare(
            "allocated GPU time",
            "GPU-h",
            Better::Neither,
            per(&|g| Some(dnum(g.allocated_gpu_h, 1))),
        ),
        Row::compare(
            "jobs read (untagged, unreadable tag)",
            "jobs",
            Better::Neither,
            per(&|g| {
                Some((
                    0.0,
                    format!("{} ({}, {})", g.records, g.untagged, g.unreadable_tags),
                ))
            }),
        ),
    ];
    rows.retain(|row| row.cells.iter().any(|c| c.text != "n/a"));
    let notes = side_by_side_notes(r);
    let mut tables = vec![Table {
        title: "Fabrics side by side".into(),
        columns: cols.clone(),
        rows,
        notes,
    }];
    tables.push(ett_table(r, &cols));
    tables.extend(cost_table(r, &cols, cur));
    tables.extend(drain_table(r, &cols));
    tables
}

/// Effective training time and what it is made of, per group; a figure no job of the group
/// measured reads "not measured" (never 0).
fn ett_table(r: &Report, cols: &[String]) -> Table {
    use super::super::ett::{EttReport, NOT_MEASURED};
    let per = |better: Better, f: &dyn Fn(&EttReport) -> Option<(f64, String)>| {
        let mut row = Row::compare("", "", better, r.groups.iter().map(|g| f(&g.ett)).collect());
        for c in &mut row.cells {
            if c.text == "n/a" {
                c.text = NOT_MEASURED.into();
            }
        }
        row
    };
    let row =
        |label: &str, unit: &str, better, f: &dyn Fn(&EttReport) -> Option<(f64, String)>| Row {
            label: label.into(),
            unit: unit.into(),
            ..per(better, f)
        };
    let count = |n: Option<u64>| n.map(|n| (n as f64, n.to_string()));
    let rows = vec![
        row("effective training time (ETT)", "%", Better::Higher, &|e| {
            e.ett_pct
                .map(|p| (p, format!("{p:.1} (n={})", e.jobs_measured)))
        }),
        row("time to start (median)", "s", Better::Lower, &|e| {
            e.time_to_start_p50_s
                .map(|s| (s, format!("{s:.0} (n={})", e.time_to_start_n)))
        }),
        row("time to recover (median)", "s", Better::Lower, &|e| {
            e.time_to_recover_p50_s
                .map(|s| (s, format!("{s:.0} (n={})", e.time_to_recover_n)))
        }),
        row("failures", "failures", Better::Lower, &|e| {
            count(e.failures)
        }),
        row("of which the fabric's", "failures", Better::Lower, &|e| {
            e.fabric_failures.map(|n| {
                let share = e
                    .fabric_failure_share_pct
                    .map_or(String::new(), |p| format!(" ({p:.1}%)"));
                (n as f64, format!("{n}{share}"))
            })
        }),
        row("of which anything else", "failures", Better::Lower, &|e| {
            count(e.other_failures)
        }),
        row(
            "lost progress (steps since checkpoint)",
            "steps",
            Better::Lower,
            &|e| {
                e.lost_steps
                    .zip(e.lost_node_h)
                    .map(|(n, h)| (n as f64, format!("{n} ({h:.2} node-h)")))
            },
        ),
        row(
            "node time lost to fabric failures",
            "%",
            Better::Lower,
            &|e| e.fabric_lost_pct.map(|p| (p, format!("{p:.2}"))),
        ),
        row(
            "jobs measured (not measured: no fabric-run records)",
            "jobs",
            Better::Neither,
            &|e| {
                Some((
                    0.0,
                    format!("{} ({} not measured)", e.jobs_measured, e.jobs_not_measured),
                ))
            },
        ),
    ];
    Table {
        title: "Effective training time".into(),
        columns: cols.to_vec(),
        rows,
        notes: vec![
            "ETT: step time whose progress was kept over the allocation (node-time weighted); time to start: submission to the first step; time to recover: a failure to the first step after the restore; a failure is the fabric's when the watch saw a fabric fault on the job's nodes before it (see docs/cost-model.md).".into(),
        ],
    }
}

/// The notes under the side-by-side table: the window, input warnings, small samples, groups
/// without a price or a drain rate, a short window, GPUs counted from the cost file.
fn side_by_side_notes(r: &Report) -> Vec<String> {
    let mut notes = vec![format!(
        "window: {} h ({} to {}, from the {}); grouped by {}; n = sample size.",
        r.window.hours.round_dp(2),
        iso(r.window.start_s),
        iso(r.window.end_s),
        if r.window.source == "given" {
            "command line"
        } else {
            "span of the jobs"
        },
        serde_json::to_value(r.group_by)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    )];
    for w in &r.inputs.warnings {
        notes.push(format!("input warning: {w}"));
    }
    let small: Vec<&str> = r
        .groups
        .iter()
        .filter(|g| g.runs < 30)
        .map(|g| g.name.as_str())
        .collect();
    if !small.is_empty() {
        notes.push(format!(
            "small sample (fewer than 30 runs): {}; read these columns as indications, not verdicts.",
            small.join(", ")
        ));
    }
    let unpriced: Vec<&str> = r
        .groups
        .iter()
        .filter(|g| g.cost.is_none())
        .map(|g| g.name.as_str())
        .collect();
    if !unpriced.is_empty() {
        notes.push(format!(
            "no cost entry for: {} (add one to the cost file to price them).",
            unpriced.join(", ")
        ));
    }
    let no_rate: Vec<String> = r
        .groups
        .iter()
        .filter(|g| g.drains_per_1000_node_h.is_none() && !g.node_h.is_zero())
        .map(|g| {
            format!(
                "{} ({} node-h, {} drains)",
                g.name,
                g.node_h.round_dp(2),
                g.drains
            )
        })
        .collect();
    if !no_rate.is_empty() {
        notes.push(format!(
            "no drain rate for {}: fewer than {} node-hours in the window, too few to give drains per 1000 node-hours; the counts are shown instead.",
            no_rate.join(", "),
            super::super::aggregate::MIN_NODE_H_FOR_RATE
        ));
    }
    if r.window.hours < Decimal::from(24) && r.groups.iter().any(|g| g.cost.is_some()) {
        notes.push(format!(
            "the window is {} h: fixed costs (operations hours per week, per drain) weigh on so little work that costs per run compare the window, not the fabrics; compare over weeks.",
            r.window.hours.round_dp(2)
        ));
    }
    if r.groups.iter().any(|g| g.gpus_from_cost_file) {
        notes.push("some jobs had no gres/gpu in their TRES; their GPUs were counted as nodes × gpus_per_node from the cost file.".into());
    }
    notes
}

/// The cost breakdown over the window, when any group is priced.
fn cost_table(r: &Report, cols: &[String], cur: &str) -> Option<Table> {
    if !r.groups.iter().any(|g| g.cost.is_some()) {
        return None;
    }
    let items: Vec<(&'static str, &'static str)> = r
        .groups
        .iter()
        .find_map(|g| g.cost.as_ref())
        .map(|c| c.lines.iter().map(|l| (l.item, l.kind)).collect())
        .unwrap_or_default();
    let mut rows: Vec<Row> = items
        .iter()
        .map(|(item, kind)| {
            let label = if *kind == "share" {
                format!("  of which {item}")
            } else {
                (*item).to_string()
            };
            Row::text(
                &label,
                cur,
                r.groups
                    .iter()
                    .map(|g| {
                        g.cost
                            .as_ref()
                            .and_then(|c| c.lines.iter().find(|l| l.item == *item))
                            .map_or("n/a".into(), |l| money(l.amount, cur))
                    })
                    .collect(),
            )
        })
        .collect();
    rows.push(Row::text(
        "total (spend lines only)",
        cur,
        r.groups
            .iter()
            .map(|g| {
                g.cost
                    .as_ref()
                    .map_or("n/a".into(), |c| money(c.total, cur))
            })
            .collect(),
    ));
    rows.push(Row::text(
        "capacity cost per GPU-hour",
        cur,
        r.groups
            .iter()
            .map(|g| {
                g.cost.as_ref().map_or("n/a".into(), |c| {
                    format!("{:.4} {cur}", c.capacity_cost_per_gpu_h.round_dp(4))
                })
            })
            .collect(),
    ));
    Some(Table {
        title: "Cost breakdown over the window".into(),
        columns: cols.to_vec(),
        rows,
        notes: vec!["\"of which\" lines are shares of the capital and running spend above, not added to the total (docs/cost-model.md).".into()],
    })
}

/// Drain reasons (first failing check) per group, when any group drained.
fn drain_table(r: &Report, cols: &[String]) -> Option<Table> {
    if !r.groups.iter().any(|g| g.drains > 0) {
        return None;
    }
    let mut reasons: Vec<String> = r
        .groups
        .iter()
        .flat_map(|g| g.top_drain_reasons.iter().map(|(k, _)| k.clone()))
        .collect();
    reasons.sort();
    reasons.dedup();
    let rows = reasons
        .iter()
        .map(|k| {
            Row::text(
                k,
                "drains",
                r.groups
                    .iter()
                    .map(|g| {
                        g.top_drain_reasons
                            .iter()
                            .find(|(x, _)| x == k)
                            .map_or("0".into(), |(_, n)| n.to_string())
                    })
                    .collect(),
            )
        })
        .collect();
    Some(Table {
        title: "Drain reasons (first failing check)".into(),
        columns: cols.to_vec(),
        rows,
        notes: vec![],
    })
}
