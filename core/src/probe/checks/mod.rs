//! The checks: one file per stable check id, each a pure function of a [`Ctx`].
//!
//! Shared rules live here: peer groups for zero-config parity (ports grouped by HCA type, link
//! layer and port number; docs/checks.md, "Zero-config peer parity"), the majority value of a
//! group, and counter deltas against the baseline (judged only as deltas, never as since-boot
//! totals).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::gather::{Device, Port, Snapshot};
use super::{Baseline, CounterSnapshot, Finding, Severity, port_key};
use crate::config::NodeExpectations;
use fabric_base::bom::Bom;

pub mod bom_drift;
pub mod gpu_count;
pub mod gpu_gdr;
pub mod gpu_nic_affinity;
pub mod hca_board_id;
pub mod hca_fw_ver;
pub mod ib_counters;
pub mod ib_link_layer;
pub mod ib_mtu;
pub mod ib_port_count;
pub mod ib_port_rate;
pub mod ib_port_state;
pub mod inventory_gone;
pub mod pcie_link;
pub mod roce_congestion;
pub mod roce_ecn;
pub mod roce_gid;
pub mod roce_mtu;
pub mod roce_pfc;
pub mod roce_retrans;

/// What a check sees.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// The node name.
    pub node: &'a str,
    /// Everything gathered.
    pub snap: &'a Snapshot,
    /// The node's expectations.
    pub expect: &'a NodeExpectations,
    /// This run's counters.
    pub now: &'a CounterSnapshot,
    /// An earlier document.
    pub baseline: Option<&'a Baseline>,
    /// Where the per-hour bounds' window starts, when not at the baseline: the in-job watch's
    /// sliding hour (`None`: every bound is judged over the whole interval since the baseline).
    pub rate_window: Option<&'a CounterSnapshot>,
    /// This node's BOM.
    pub bom_now: &'a Bom,
    /// The pinned BOM.
    pub bom_pin: Option<&'a Bom>,
    /// The node's known inventory ([`crate::probe::known`]), when it has one.
    pub known: Option<&'a crate::probe::known::Known>,
}

/// A check: its id and its function.
pub type Check = (&'static str, fn(&Ctx<'_>) -> Vec<Finding>);

/// Every check (docs/checks.md describes each).
pub const ALL: &[Check] = &[
    (ib_port_state::ID, ib_port_state::check),
    (ib_port_rate::ID, ib_port_rate::check),
    (ib_link_layer::ID, ib_link_layer::check),
    (ib_port_count::ID, ib_port_count::check),
    (ib_mtu::ID, ib_mtu::check),
    (ib_counters::ID, ib_counters::check),
    (roce_gid::ID, roce_gid::check),
    (roce_mtu::ID, roce_mtu::check),
    (roce_ecn::ID, roce_ecn::check),
    (roce_pfc::ID, roce_pfc::check),
    (roce_congestion::ID, roce_congestion::check),
    (roce_retrans::ID, roce_retrans::check),
    (bom_drift::ID, bom_drift::check),
    (gpu_count::ID, gpu_count::check),
    (gpu_nic_affinity::ID, gpu_nic_affinity::check),
    (gpu_gdr::ID, gpu_gdr::check),
    (pcie_link::ID, pcie_link::check),
    (hca_fw_ver::ID, hca_fw_ver::check),
    (hca_board_id::ID, hca_board_id::check),
    (inventory_gone::ID, inventory_gone::check),
];

/// Every check's findings plus one `warn` per file that exists but could not be used.
pub fn run_all(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out: Vec<Finding> = ALL.iter().flat_map(|(_, f)| f(ctx)).collect();
    for p in &ctx.snap.problems {
        if p.unreadable {
            // Could not look: no evidence about the port either way.
            out.push(Finding::new(
                p.check,
                Severity::Info,
                p.device.as_deref(),
                p.port,
                json!({"path": p.path.display().to_string(), "error": p.message}),
                Value::Null,
                format!(
                    "not verified: cannot read {}: {}",
                    p.path.display(),
                    p.message
                ),
            ));
            continue;
        }
        out.push(Finding::new(
            p.check,
            Severity::Warn,
            p.device.as_deref(),
            p.port,
            Value::Null,
            Value::Null,
            if p.message.contains(';') {
                format!("cannot use {}: {}", p.path.display(), p.message)
            } else {
                format!(
                    "cannot use {}: {}; not judged (check the driver or the file)",
                    p.path.display(),
                    p.message
                )
            },
        ));
    }
    out
}

/// `mlx5_3 port 1` or `mlx5_8 port 1 (ens9f0np0)`.
pub fn where_(dev: &Device, port: &Port) -> String {
    match &port.netdev {
        Some(n) => format!("{} port {} ({n})", dev.name, port.num),
        None => format!("{} port {}", dev.name, port.num),
    }
}

/// What an HCA is for on its node, told from the topology with zero configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// It shares a PCIe switch with a GPU (the affinity `gpu.nic_affinity` reads): a compute
    /// rail, which GPUDirect RDMA uses.
    Compute,
    /// Any other: storage, management, or a node without GPUs.
    Other,
}

impl Role {
    /// `compute rail` or `other port`.
    pub fn words(self) -> &'static str {
        match self {
            Role::Compute => "compute rail",
            Role::Other => "storage or management port",
        }
    }
}

/// The role of `dev` on the node of `snap`.
pub fn role(snap: &Snapshot, dev: &Device) -> Role {
    let compute = !dev.pci_path.is_empty()
        && snap
            .gpus
            .iter()
            .any(|g| gpu_nic_affinity::same_switch(&g.pci_path, &dev.pci_path));
    if compute { Role::Compute } else { Role::Other }
}

/// Peer-group key: (HCA type, link layer, port number).
pub type GroupKey = (String, String, u32);

/// Ports grouped for parity; ports whose link layer could not be read are left out.
pub fn groups(snap: &Snapshot) -> BTreeMap<GroupKey, Vec<(&Device, &Port)>> {
    let mut g: BTreeMap<GroupKey, Vec<(&Device, &Port)>> = BTreeMap::new();
    for d in &snap.devices {
        for p in &d.ports {
            let Some(ll) = &p.link_layer else { continue };
            let hca = d
                .hca_type
                .clone()
                .or_else(|| d.driver.clone())
                .unwrap_or_default();
            g.entry((hca, ll.clone(), p.num)).or_default().push((d, p));
        }
    }
    g
}

/// The most common value; on a tie, the greatest (the "better" value: higher rate, larger MTU).
pub fn majority<V: Ord + Clone>(values: impl IntoIterator<Item = V>) -> Option<(V, usize)> {
    let mut counts: BTreeMap<V, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)))
}

/// The shared shape of value checks (MTU and the like): an active port whose value differs from
/// the configured one, or, where nothing is configured for its device, from its peer group's
/// majority. `finding(device, port, observed, expected, why)` words the result.
pub fn configured_or_parity<V: Ord + Clone + std::fmt::Display>(
    ctx: &Ctx<'_>,
    configured: impl Fn(&crate::config::PortExpect) -> Option<V> + Copy,
    value: impl Fn(&Port) -> Option<V> + Copy,
    finding: impl Fn(&Device, &Port, V, V, String) -> Finding,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in &ctx.snap.devices {
        let Some(want) = ctx.expect.expect(&d.name, configured) else {
            continue;
        };
        for p in d.ports.iter().filter(|p| p.is_active()) {
            if let Some(v) = value(p).filter(|v| *v != want) {
                out.push(finding(
                    d,
                    p,
                    v,
                    want.clone(),
                    format!("the configuration expects {want}"),
                ));
            }
        }
    }
    for (d, p, v, maj, peers) in parity_deviations(ctx.snap, |_, p| value(p)) {
        if ctx.expect.expect(&d.name, configured).is_none() {
            let why = format!("its {peers} peers mostly use {maj}");
            out.push(finding(d, p, v, maj, why));
        }
    }
    out
}

/// Parity over one value of the ACTIVE ports of each group: `(device, port, value, majority,
/// peers)` for every port whose value differs from its group's majority.
pub fn parity_deviations<V: Ord + Clone>(
    snap: &Snapshot,
    value: impl Fn(&Device, &Port) -> Option<V>,
) -> Vec<(&Device, &Port, V, V, usize)> {
    let mut out = Vec::new();
    for members in groups(snap).values() {
        let vals: Vec<(&Device, &Port, V)> = members
            .iter()
            .filter(|(_, p)| p.is_active())
            .filter_map(|(d, p)| value(d, p).map(|v| (*d, *p, v)))
            .collect();
        if vals.len() < 2 {
            continue;
        }
        let Some((maj, _)) = majority(vals.iter().map(|x| x.2.clone())) else {
            continue;
        };
        for (d, p, v) in &vals {
            if *v != maj {
                out.push((*d, *p, v.clone(), maj.clone(), vals.len() - 1));
            }
        }
    }
    out
}

/// Counter name → value.
pub type Counters = BTreeMap<String, u64>;

/// Which check judges a counter: `counters/` → `ib.counters`; `hw_counters/` with `cnp` or
/// `ecn` in the name and ethtool pause statistics → `roce.congestion`; other `hw_counters/` →
/// `roce.retrans`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterSource {
    /// `ports/<n>/counters/`.
    Counters,
    /// `ports/<n>/hw_counters/`.
    HwCounters,
    /// `ethtool -S` of the port's netdev.
    Ethtool,
}

/// The threshold key of a counter: every driver's pause counter names map to one key and
/// per-priority names lose their priority (`rx_prio3_pause`, `rx_pfc_ena_frames_pri3` and
/// `port.rx_priority_3_xoff_rx` are all `rx_prio_pause`; see [`crate::probe::pause`]).
pub fn threshold_key(name: &str) -> std::borrow::Cow<'_, str> {
    match crate::probe::pause::classify(name) {
        Some(c) => std::borrow::Cow::Owned(c.threshold_key()),
        None => std::borrow::Cow::Borrowed(name),
    }
}

/// The width in bits of an IBA PortCounters field as the legacy `counters/` files expose it
/// (IBA 1.x §16.1.3.5, PortCounters): such a counter stops at its maximum instead of wrapping.
/// The traffic counters are 32-bit in the legacy attribute (64-bit where the kernel reads
/// PortCountersExtended, or in mlx4's `counters_ext/*_64`, which the gather step prefers).
pub fn counter_width_bits(name: &str) -> Option<u32> {
    Some(match name {
        "symbol_error"
        | "port_rcv_errors"
        | "port_rcv_remote_physical_errors"
        | "port_rcv_switch_relay_errors"
        | "port_xmit_discards"
        | "VL15_dropped" => 16,
        "link_error_recovery"
        | "link_downed"
        | "port_xmit_constraint_errors"
        | "port_rcv_constraint_errors" => 8,
        "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => 4,
        "port_xmit_wait"
        | "port_xmit_data"
        | "port_rcv_data"
        | "port_xmit_packets"
        | "port_rcv_packets"
        | "unicast_xmit_packets"
        | "unicast_rcv_packets"
        | "multicast_xmit_packets"
        | "multicast_rcv_packets" => 32,
        _ => return None,
    })
}

/// Whether a counter counts traffic (data, packets) rather than errors or waiting.
pub fn is_traffic_counter(name: &str) -> bool {
    name.ends_with("_data") || name.ends_with("_packets")
}

/// The largest value of a `counters/` field that saturates; at it, the counter no longer counts.
pub fn saturation_max(name: &str) -> Option<u64> {
    counter_width_bits(name).map(|w| (1u64 << w) - 1)
}

/// Whether `counters/<name>` sits exactly at the maximum of its legacy width on this port. A
/// value above it shows the kernel exposes a wider counter (PortCountersExtended), and a
/// 64-bit `counters_ext` copy, when the gather step used one, never saturates.
pub fn is_saturated(port: &Port, name: &str, value: u64) -> bool {
    !port.counters_64.contains(name) && saturation_max(name) == Some(value)
}

/// The baseline if it is usable for this node, else the reason it is not, and the time since
/// it in seconds. A baseline dated after this run (the clock was stepped back) is used all the
/// same, its elapsed time taken as 0 (the per-hour bounds' one-hour floor then applies): the
/// counters' deltas do not depend on the clock ([`baseline_dated_ahead_ms`] says by how much).
pub fn usable_baseline<'a>(ctx: &Ctx<'a>) -> Result<(&'a CounterSnapshot, f64), String> {
    let Some(b) = ctx.baseline else {
        return Err("no baseline".to_string());
    };
    if b.node != ctx.node {
        return Err(format!(
            "the baseline was taken on node {:?}, not {:?}",
            b.node, ctx.node
        ));
    }
    let elapsed_ms = ctx
        .now
        .taken_unix_ms
        .saturating_sub(b.counters.taken_unix_ms);
    Ok((&b.counters, elapsed_ms as f64 / 1000.0))
}

/// How far after this run the baseline is dated (ms), when it is (the clock went back since it
/// was taken).
pub fn baseline_dated_ahead_ms(ctx: &Ctx<'_>) -> Option<u64> {
    let b = ctx.baseline?;
    b.counters
        .taken_unix_ms
        .checked_sub(ctx.now.taken_unix_ms)
        .filter(|ms| *ms > 0)
}

fn fmt_elapsed(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// The counters of one port or netdev from `source` in `snap`.
fn counters_of<'a>(
    snap: &'a CounterSnapshot,
    key: &str,
    port: &Port,
    source: CounterSource,
) -> Option<&'a Counters> {
    match source {
        CounterSource::Counters | CounterSource::HwCounters => {
            let pc = snap.ports.get(key)?;
            Some(match source {
                CounterSource::Counters => &pc.counters,
                _ => &pc.hw_counters,
            })
        }
        CounterSource::Ethtool => Some(&snap.netdevs.get(port.netdev.as_ref()?)?.ethtool),
    }
}

/// The per-hour bounds' window, when the caller gave one ([`Ctx::rate_window`]) that is not
/// newer than this run: its counters and its age in seconds.
fn rate_window<'a>(ctx: &Ctx<'a>) -> Option<(&'a CounterSnapshot, f64)> {
    let w = ctx.rate_window?;
    let elapsed_ms = ctx.now.taken_unix_ms.checked_sub(w.taken_unix_ms)?;
    Some((w, elapsed_ms as f64 / 1000.0))
}

/// Judges the counters of one port or netdev from `source` that `select` keeps, against the
/// baseline: one finding per counter over its threshold, an `info` per counter that went back
/// (reset) or sits saturated. The `*_delta` bounds are judged over the whole interval since the
/// baseline; the `*_per_hour` bounds over [`Ctx::rate_window`] where one is given (the watch's
/// sliding hour), else over that same interval.
#[allow(clippy::too_many_arguments)]
pub fn judge_counters(
    ctx: &Ctx<'_>,
    id: &str,
    dev: &Device,
    port: &Port,
    source: CounterSource,
    select: impl Fn(&str) -> bool,
) -> Vec<Finding> {
    let Ok((base, elapsed_s)) = usable_baseline(ctx) else {
        return Vec::new();
    };
    // The port's key made once for its three maps, and its label only when a finding needs it
    // (this runs for every port and counter of every look: issue 40).
    let pk = port_key(&dev.name, port.num);
    let (Some(now), Some(before)) = (
        counters_of(ctx.now, &pk, port, source),
        counters_of(base, &pk, port, source),
    ) else {
        return Vec::new();
    };
    let window =
        rate_window(ctx).and_then(|(w, el)| counters_of(w, &pk, port, source).map(|c| (c, el)));
    let label = std::cell::OnceCell::new();
    let label = || label.get_or_init(|| where_(dev, port));
    let mut out = Vec::new();
    for (name, &v) in now.iter().filter(|(n, _)| select(n)) {
        let Some(&b) = before.get(name) else { continue };
        let key = threshold_key(name);
        let Some(t) = ctx.expect.thresholds.get(&*key) else {
            continue;
        };
        // The rate window's value (never below the baseline's: a counter only rises).
        let win = window.and_then(|(w, el)| w.get(name).map(|&w| (w.max(b), el)));
        let went_back_from = win.map_or(b, |(w, _)| w);
        if v < went_back_from {
            out.push(Finding::new(
                id,
                Severity::Info,
                Some(&dev.name),
                Some(port.num),
                json!({"counter": name, "before": went_back_from, "now": v}),
                Value::Null,
                format!("{}: {name} went from {went_back_from} to {v} (counters reset or driver reloaded); its delta is skipped", label()),
            ));
            continue;
        }
        let delta = v - b;
        let saturated = source == CounterSource::Counters && is_saturated(port, name, v);
        if saturated && delta == 0 {
            // Said once per port by `ib.counters` (warn, with the width and how to reset).
            continue;
        }
        let (rate_delta, rate_elapsed_s) = win.map_or((delta, elapsed_s), |(w, el)| (v - w, el));
        let by_delta = t.judge_delta(delta);
        let by_rate = t.judge_rate(rate_delta, rate_elapsed_s);
        let (sev, delta, elapsed_s, bound) = match (by_delta, by_rate) {
            (d, Some(r)) if Some(r) > d => {
                let sliding = if win.is_some() {
                    "over the sliding hour; "
                } else {
                    ""
                };
                (
                    r,
                    rate_delta,
                    rate_elapsed_s,
                    format!("{sliding}{}", t.describe_rate(r)),
                )
            }
            (Some(d), _) => (d, delta, elapsed_s, t.describe(d)),
            (None, _) => continue,
        };
        let sat = if saturated {
            " (now saturated: at least this many)"
        } else {
            ""
        };
        out.push(Finding::new(
            id,
            sev,
            Some(&dev.name),
            Some(port.num),
            json!({"counter": name, "delta": delta, "elapsed_s": (elapsed_s * 1000.0).round() / 1000.0}),
            json!({"counter": key, "threshold": t}),
            format!(
                "{}: {name} rose by {delta}{sat} in {} ({bound})",
                label(),
                fmt_elapsed(elapsed_s),
            ),
        ));
    }
    out
}

/// Test helpers: snapshots built in code.
#[cfg(test)]
pub mod testing {
    use super::super::gather::{Device, Gpu, NetDev, Port, PortState, Rate, Snapshot};
    use super::*;

    /// An ACTIVE port.
    pub fn port(num: u32, ll: &str, gbps: f64) -> Port {
        Port {
            num,
            state: Some(PortState {
                code: 4,
                name: "ACTIVE".into(),
            }),
            phys_state: Some("5: LinkUp".into()),
            rate: Some(Rate {
                gbps,
                text: format!("{gbps} Gb/sec (4X NDR)"),
            }),
            link_layer: Some(ll.into()),
            ..Port::default()
        }
    }

    /// A DOWN port.
    pub fn down(mut p: Port) -> Port {
        p.state = Some(PortState {
            code: 1,
            name: "DOWN".into(),
        });
        p.phys_state = Some("2: Polling".into());
        p
    }

    /// A device with one port.
    pub fn dev(name: &str, hca: &str, p: Port) -> Device {
        Device {
            name: name.into(),
            hca_type: Some(hca.into()),
            ports: vec![p],
            ..Device::default()
        }
    }

    /// n InfiniBand devices `mlx5_0..` at 400 Gb/s.
    pub fn ib_node(n: usize) -> Snapshot {
        Snapshot {
            devices: (0..n)
                .map(|i| dev(&format!("mlx5_{i}"), "MT4129", port(1, "InfiniBand", 400.0)))
                .collect(),
            ..Snapshot::default()
        }
    }

    /// n RoCE devices `mlx5_0..` with netdevs `eth0..` at MTU 9000.
    pub fn roce_node(n: usize) -> Snapshot {
        let mut s = Snapshot::default();
        for i in 0..n {
            let mut p = port(1, "Ethernet", 400.0);
            p.netdev = Some(format!("eth{i}"));
            s.devices.push(dev(&format!("mlx5_{i}"), "MT4129", p));
            s.netdevs.insert(
                format!("eth{i}"),
                NetDev {
                    name: format!("eth{i}"),
                    mtu: Some(9000),
                    ..NetDev::default()
                },
            );
        }
        s
    }

    /// A DGX-like node: eight ConnectX-7 compute rails in InfiniBand mode, each under a GPU's
    /// PCIe switch (`mlx5_0..7`), and two storage ports of the same part and board id in
    /// Ethernet mode on root ports of their own (`mlx5_8`, `mlx5_9`).
    pub fn dgx_node() -> Snapshot {
        let mut s = Snapshot::default();
        for i in 0..10u32 {
            let rail = i < 8;
            let mut d = dev(
                &format!("mlx5_{i}"),
                "MT4129",
                port(1, if rail { "InfiniBand" } else { "Ethernet" }, 400.0),
            );
            d.board_id = Some("MT_0000000838".into());
            let bus = 0x10 * (i + 1);
            d.pci_path = if rail {
                vec![
                    format!("0000:00:{:02x}.0", i + 1),
                    format!("0000:{bus:02x}:00.0"),
                    format!("0000:{:02x}:00.0", bus + 1),
                    format!("0000:{:02x}:00.0", bus + 2),
                ]
            } else {
                vec![format!("0000:00:1{i}.0"), format!("0000:{bus:02x}:00.0")]
            };
            d.pci = d.pci_path.last().cloned();
            if rail {
                s.gpus.push(Gpu {
                    pci: format!("0000:{:02x}:00.0", bus + 3),
                    device_id: "0x2330".into(),
                    pci_path: vec![
                        d.pci_path[0].clone(),
                        d.pci_path[1].clone(),
                        format!("0000:{:02x}:01.0", bus + 1),
                        format!("0000:{:02x}:00.0", bus + 3),
                    ],
                    ..Gpu::default()
                });
            }
            s.devices.push(d);
        }
        s.modules = ["nvidia", "nvidia_peermem"].map(String::from).into();
        s
    }

    /// The known inventory of `snap`, recorded as its first healthy probe.
    pub fn known_of(snap: &Snapshot) -> crate::probe::known::Known {
        crate::probe::known::Known::new(
            "n1",
            crate::probe::Inventory::from_snapshot(snap),
            crate::probe::known::Recorded::FirstHealthyProbe,
            "fabric-check",
            1_796_000_000,
        )
    }

    /// Runs one check against a known inventory.
    pub fn run_known(
        snap: &Snapshot,
        known: &crate::probe::known::Known,
        f: fn(&Ctx<'_>) -> Vec<Finding>,
    ) -> Vec<Finding> {
        run_full(snap, &NodeExpectations::default(), None, Some(known), f)
    }

    /// Runs one check with default expectations and no baseline.
    pub fn run(snap: &Snapshot, f: fn(&Ctx<'_>) -> Vec<Finding>) -> Vec<Finding> {
        run_with(snap, &NodeExpectations::default(), None, f)
    }

    /// Runs one check with the given expectations and baseline.
    pub fn run_with(
        snap: &Snapshot,
        expect: &NodeExpectations,
        baseline: Option<&Baseline>,
        f: fn(&Ctx<'_>) -> Vec<Finding>,
    ) -> Vec<Finding> {
        run_full(snap, expect, baseline, None, f)
    }

    fn run_full(
        snap: &Snapshot,
        expect: &NodeExpectations,
        baseline: Option<&Baseline>,
        known: Option<&crate::probe::known::Known>,
        f: fn(&Ctx<'_>) -> Vec<Finding>,
    ) -> Vec<Finding> {
        let now = CounterSnapshot::from_snapshot(snap);
        let bom = snap.bom("n1");
        f(&Ctx {
            node: "n1",
            snap,
            expect,
            now: &now,
            baseline,
            rate_window: None,
            bom_now: &bom,
            bom_pin: None,
            known,
        })
    }

    /// Expectations from TOML text, for node `n1`.
    pub fn expect(toml: &str) -> NodeExpectations {
        crate::config::Config::parse(toml, std::path::Path::new("t.toml"))
            .unwrap()
            .for_node("n1")
    }

    /// `(severity, device, port)` of each finding.
    pub fn brief(v: &[Finding]) -> Vec<(Severity, Option<String>, Option<u32>)> {
        v.iter()
            .map(|f| (f.severity, f.device.clone(), f.port))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_majority_wins_and_ties_go_to_the_greater_value() {
        assert_eq!(majority([1, 2, 2, 3]), Some((2, 2)));
        assert_eq!(majority([200, 400]), Some((400, 1)));
        assert_eq!(majority(Vec::<u32>::new()), None);
    }

    #[test]
    fn per_priority_pause_counters_share_one_threshold_key() {
        assert_eq!(threshold_key("rx_prio3_pause"), "rx_prio_pause");
        assert_eq!(
            threshold_key("tx_prio7_pause_duration"),
            "tx_prio_pause_duration"
        );
        assert_eq!(threshold_key("symbol_error"), "symbol_error");
        assert_eq!(threshold_key("rx_prio_x"), "rx_prio_x");
    }

    #[test]
    fn every_check_id_is_unique_and_dotted() {
        let mut ids: Vec<&str> = ALL.iter().map(|c| c.0).collect();
        assert_eq!(ids.len(), 20);
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 20);
        assert!(ids.iter().all(|i| i.split('.').count() == 2));
    }
}
