//! The buyer's guide's purchase questions for InfiniBand and RoCE vendors, answered from evidence
//! (pinned BOMs, probe outputs, nccl-tests runs) where a node can show it, listed as open where
//! only the vendor or the switch can answer.
//!
//! Evidence is looked up by key name in the flattened JSON of BOMs and probe outputs (see
//! [`super::bom`]); the keys relied on are named in each question's `keys`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::NcclRun;
use super::bom::NodeBom;

/// One question with its answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    /// Stable id.
    pub id: &'static str,
    /// `ib`, `roce` or `both`.
    pub applies_to: &'static str,
    /// The question to put to the vendor.
    pub question: &'static str,
    /// `answered`, `concern` (evidence shows a problem) or `open` (no evidence here).
    pub status: &'static str,
    /// The answer from evidence, or what to ask for.
    pub answer: String,
}

/// Values of keys matching `pred` (on the last non-index path segment), value → nodes.
fn find(sources: &[&NodeBom], pred: impl Fn(&str) -> bool) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for b in sources {
        let mut seen = std::collections::BTreeSet::new();
        for (path, v) in &b.fields {
            let last = path
                .rsplit('.')
                .find(|s| s.parse::<usize>().is_err())
                .unwrap_or(path);
            if pred(&last.to_ascii_lowercase()) && seen.insert(v.clone()) {
                out.entry(v.clone()).or_default().push(b.node.clone());
            }
        }
    }
    out
}

fn describe(found: &BTreeMap<String, Vec<String>>) -> String {
    found
        .iter()
        .map(|(v, nodes)| {
            format!(
                "{v} ({} node{})",
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" }
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn from_evidence(
    found: &BTreeMap<String, Vec<String>>,
    node_count: usize,
    open: &str,
) -> (&'static str, String) {
    if found.is_empty() {
        return ("open", open.to_string());
    }
    // Several values where every node has each one are per-port lists, not drift.
    let uniform = found.len() == 1 || found.values().all(|n| n.len() == node_count);
    (
        if uniform { "answered" } else { "concern" },
        describe(found),
    )
}

/// Answers every question that applies to the fabric seen (both kinds when it is unknown).
pub fn answer(
    boms: &[NodeBom],
    probes: &[NodeBom],
    runs: &[NcclRun],
    expect_nodes: Option<u32>,
) -> Vec<Answer> {
    let all: Vec<&NodeBom> = boms.iter().chain(probes.iter()).collect();
    let nodes = {
        let mut n: Vec<&str> = all.iter().map(|b| b.node.as_str()).collect();
        n.sort();
        n.dedup();
        n.len()
    };
    let link = find(&all, |k| k == "link_layer");
    let is_ib = link.keys().any(|v| v.eq_ignore_ascii_case("infiniband"));
    let is_eth = link.keys().any(|v| v.eq_ignore_ascii_case("ethernet"));
    let fabric = match (is_ib, is_eth) {
        (true, false) => "ib",
        (false, true) => "roce",
        _ => "both",
    };
    let mut out = Vec::new();
    let mut push = |id, applies_to, question, (status, answer): (&'static str, String)| {
        if fabric == "both" || applies_to == "both" || applies_to == fabric {
            out.push(Answer {
                id,
                applies_to,
                question,
                status,
                answer,
            });
        }
    };
    push(
        "fabric.kind",
        "both",
        "Which fabric is it: InfiniBand, or RoCE v2 over Ethernet?",
        from_evidence(
            &link,
            nodes,
            "ask the vendor; pin a BOM (`fabric-check bom --pin`) so link_layer is on record",
        ),
    );
    let rate = find(&all, |k| {
        k == "rate" || k == "rate_gbps" || k == "link_speed" || k == "speed"
    });
    push(
        "link.speed",
        "both",
        "Which generation and link speed does every port train to, and is it the same on every node?",
        from_evidence(
            &rate,
            nodes,
            "no port rate in the evidence; pin BOMs or pass probe outputs (--probe)",
        ),
    );
    let gdr = find(&all, |k| {
        k.contains("gdr")
            || k.contains("peermem")
            || k.contains("dmabuf")
            || k.contains("gpudirect")
    });
    push(
        "gpudirect.rdma",
        "both",
        "Is GPUDirect RDMA available on every node (nvidia-peermem or dma-buf), so NCCL moves data NIC↔GPU without a host copy?",
        from_evidence(
            &gdr,
            nodes,
            "not visible in the evidence; ask for the driver stack and check `gpu.gdr` in the probe",
        ),
    );
    let mtu = find(&all, |k| k.ends_with("mtu"));
    push(
        "mtu",
        "both",
        "Which MTU is set end to end (IB MTU, or netdev and switch MTU for RoCE), and is it uniform?",
        from_evidence(
            &mtu,
            nodes,
            "no MTU in the evidence; the switch side must come from the vendor",
        ),
    );
    let pfc = find(&all, |k| k.contains("pfc") || k.contains("pause"));
    let (s, a) = from_evidence(&pfc, nodes, "NIC side not in the evidence");
    push(
        "roce.pfc",
        "roce",
        "Is PFC enabled on exactly the RDMA priority, on NICs and every switch hop, with pause storms guarded?",
        (
            if s == "answered" { "open" } else { s },
            format!("NIC side: {a}; switch side: open (not visible from a node)"),
        ),
    );
    let ecn = find(&all, |k| {
        k.contains("ecn") || k.contains("dcqcn") || k.contains("cnp")
    });
    let (s, a) = from_evidence(&ecn, nodes, "NIC side not in the evidence");
    push(
        "roce.ecn",
        "roce",
        "Is ECN/DCQCN congestion control enabled for RoCE, and what marking thresholds do the switches use?",
        (
            if s == "answered" { "open" } else { s },
            format!("NIC side: {a}; switch marking thresholds: open"),
        ),
    );
    let counters = find(&all, |k| k.contains("counter"));
    let counter_names: BTreeMap<String, Vec<String>> = {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for b in &all {
            for (path, value) in b.fields.iter().filter(|(p, _)| p.contains("counters.")) {
                let last = path.rsplit('.').next().unwrap_or(path);
                // A list of names (`counters.0 = "symbol_error"`) or a map of name → value.
                let name = if last.parse::<usize>().is_ok() {
                    value.clone()
                } else {
                    last.to_string()
                };
                let e = m.entry(name).or_default();
                if !e.contains(&b.node) {
                    e.push(b.node.clone());
                }
            }
        }
        m
    };
    push(
        "counters.visible",
        "both",
        "Which error and congestion counters can the operator read (port counters, hw_counters, PMA), per port?",
        if !counter_names.is_empty() {
            (
                "answered",
                counter_names.keys().cloned().collect::<Vec<_>>().join(", "),
            )
        } else {
            from_evidence(
                &counters,
                nodes,
                "no counters in the evidence; pass probe outputs (--probe) to list them",
            )
        },
    );
    let fw = find(&all, |k| {
        k == "fw_ver"
            || k.contains("firmware")
            || k.contains("driver")
            || k == "cuda"
            || k.starts_with("cuda_")
            || k.starts_with("nccl")
    });
    push(
        "versions.pinned",
        "both",
        "Are NIC/HCA firmware, driver, CUDA and NCCL versions pinned and identical across nodes?",
        from_evidence(
            &fw,
            nodes,
            "no versions in the evidence; pin BOMs on every node",
        ),
    );
    let cables = find(&all, |k| {
        k.contains("cable") || k.contains("transceiver") || k.contains("optic")
    });
    push(
        "optics.qualified",
        "both",
        "Which optics and cables are fitted, and are they on the vendor's qualified list?",
        from_evidence(
            &cables,
            nodes,
            "not visible from the evidence; ask for the qualified parts list and the fitted part numbers",
        ),
    );
    let sm = find(&all, |k| {
        k.contains("subnet_manager") || k == "sm_lid" || k == "opensm"
    });
    push(
        "ib.subnet_manager",
        "ib",
        "Which subnet manager runs, where, at what version, and how does it fail over?",
        from_evidence(
            &sm,
            nodes,
            "not visible from a node beyond the SM LID; ask the vendor",
        ),
    );
    push(
        "routing.adaptive",
        "both",
        "Is adaptive routing or other congestion management on, and can it be switched off for diagnosis?",
        from_evidence(
            &find(&all, |k| k.contains("adaptive") || k.contains("routing")),
            nodes,
            "a switch setting: ask the vendor",
        ),
    );
    // Only runs known to be all_reduce answer it: a sendrecv or an unnamed table is not one.
    let (all_reduce, other): (Vec<&NcclRun>, Vec<&NcclRun>) = runs
        .iter()
        .partition(|r| r.collective().as_deref() == Some("all_reduce"));
    let hosts: std::collections::BTreeSet<&str> = all_reduce
        .iter()
        .flat_map(|r| r.devices.iter().map(|d| d.host.as_str()))
        .collect();
    push(
        "scale.exact_count",
        "both",
        "Does the all-reduce benchmark pass at the exact node count jobs will use?",
        match (expect_nodes, hosts.len()) {
            _ if all_reduce.is_empty() && !other.is_empty() => (
                "open",
                format!(
                    "no run is known to be all_reduce ({}); run all_reduce_perf at the node count jobs will use",
                    other
                        .iter()
                        .map(|r| format!(
                            "{}: {}",
                            r.file,
                            r.collective().unwrap_or_else(|| "collective unknown: the output does not name its test and its rows cannot tell".to_string())
                        ))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ),
            (_, 0) => (
                "open",
                "the nccl-tests outputs list no ranks; keep the header lines".into(),
            ),
            (Some(n), h) if h as u32 != n => (
                "concern",
                format!("the runs used {h} nodes, the target is {n}"),
            ),
            (_, h) => (
                "answered",
                format!("{h} nodes in the runs (see the checks for pass/fail)"),
            ),
        },
    );
    push(
        "support.escalation",
        "both",
        "What does support commit to: response time, RMA turnaround, and who owns a fault that spans NIC, switch and GPU vendors?",
        ("open", "a contract question: ask the vendor".into()),
    );
    out
}
