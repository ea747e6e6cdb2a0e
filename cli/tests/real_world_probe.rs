//! `fabric-check probe` on sysfs trees, counter dumps, `show_gids`, `ethtool -S`, `dcb pfc show`
//! and `mlnx_qos` outputs captured on real machines (the corpus, see `real_world_support`).
//!
//! The expectations are what a person reading each file concludes, written by hand: port
//! states and rates, which counters were skipped and why, the pause counters found, the PFC
//! priorities. Where the corpus is a text capture rather than a tree (a `cat` of every counter,
//! `show_gids`), the test builds a small sysfs tree from it in a temporary folder; classes the
//! corpus lacks are generated here too.

mod real_world_support;

use std::path::{Path, PathBuf};

use real_world_support::{file, findings, msg, probe, text, with, write};
use serde_json::Value;

fn port_of<'a>(doc: &'a Value, dev: &str, port: u64) -> &'a Value {
    doc["inventory"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == dev)
        .unwrap_or_else(|| panic!("no device {dev} in {}", doc["inventory"]))["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == port)
        .unwrap()
}

fn no_fail(doc: &Value) {
    let fails: Vec<_> = findings(doc)
        .into_iter()
        .filter(|f| f["severity"] == "fail")
        .collect();
    assert!(fails.is_empty(), "no evidence of a fault, yet: {fails:#?}");
}

#[test]
fn the_procfs_tree_reads_omni_path_connectx3_and_connectx4_ports_as_they_are_and_passes() {
    skip_without_corpus!();
    let (rc, doc) = probe(&file("sysfs/prometheus-procfs/sys"), &[]);
    assert_eq!(rc, 0, "{doc:#}");
    assert_eq!(doc["verdict"], "pass");
    let hfi = port_of(&doc, "hfi1_0", 1);
    assert_eq!(hfi["state"], "ACTIVE");
    assert_eq!(hfi["rate_gbps"], 100.0);
    let mlx4 = port_of(&doc, "mlx4_0", 2);
    assert_eq!(mlx4["rate_gbps"], 40.0);
    // link_layer is "InfiniBand\n\n" (an extra blank line): still InfiniBand.
    assert_eq!(mlx4["link_layer"], "InfiniBand");
    let mlx5 = port_of(&doc, "mlx5_0", 1);
    assert_eq!(mlx5["rate_gbps"], 25.0);
    assert_eq!(mlx5["rate"], "25 Gb/sec (1X EDR)");
    // phys_state reads "4: ACTIVE" (a port-state name, sic): shown as read, not rejected.
    assert_eq!(mlx5["phys_state"], "ACTIVE");
    let opa = with(&doc, "ib.link_layer", "info");
    assert_eq!(opa.len(), 1, "{opa:#?}");
    assert_eq!(opa[0]["device"], "hfi1_0");
    assert!(msg(&opa[0]).contains("Omni-Path"), "{}", msg(&opa[0]));
    assert!(msg(&opa[0]).contains("not verified"));
    // The mlx5 hw_counters were read, roce_adp_retrans included.
    assert_eq!(
        doc["counters"]["ports"]["mlx5_0/1"]["hw_counters"]["roce_adp_retrans"],
        99
    );
}

#[test]
fn the_node_exporter_tree_warns_only_for_the_saturated_32_bit_port_xmit_wait() {
    skip_without_corpus!();
    let (rc, doc) = probe(&file("sysfs/prometheus-node_exporter/sys"), &[]);
    assert_eq!(rc, 1, "{doc:#}");
    no_fail(&doc);
    let warns: Vec<_> = findings(&doc)
        .into_iter()
        .filter(|f| f["severity"] == "warn")
        .collect();
    assert_eq!(warns.len(), 1, "{warns:#?}");
    let w = &warns[0];
    assert_eq!(
        (&w["check"], &w["device"], &w["port"]),
        (&"ib.counters".into(), &"mlx4_0".into(), &1.into())
    );
    assert!(msg(w).contains("port_xmit_wait is saturated at 4294967295"));
    assert!(msg(w).contains("32-bit"));
    assert!(msg(w).contains("perfquery"));
    assert_eq!(w["observed"]["width_bits"], 32);
}

#[test]
fn the_mlx4_counters_ext_64_bit_files_are_preferred_over_the_32_bit_ones() {
    skip_without_corpus!();
    let (_, doc) = probe(&file("sysfs/prometheus-node_exporter/sys"), &[]);
    let c = &doc["counters"]["ports"]["mlx4_0/1"]["counters"];
    // counters/port_rcv_packets reads 6825908347, counters_ext/port_rcv_packets_64 reads 0.
    assert_eq!(c["port_rcv_packets"], 0);
    assert_eq!(c["port_xmit_data"], 3733440);
    assert_eq!(c["unicast_rcv_packets"], 61148);
    // Port 2 lacks most counters: absent, not zero, and no finding about them.
    let c2 = &doc["counters"]["ports"]["mlx4_0/2"]["counters"];
    assert!(c2.get("symbol_error").is_none());
}

#[test]
fn the_iwarp_rnic_whose_every_counter_reads_no_pma_is_not_verified_never_failed() {
    skip_without_corpus!();
    let (_, doc) = probe(&file("sysfs/prometheus-node_exporter/sys"), &[]);
    let p = port_of(&doc, "i40iw0", 1);
    assert_eq!(p["rate_gbps"], 10.0);
    assert_eq!(p["rate"], "10 Gb/sec (4X)");
    let kind: Vec<_> = with(&doc, "ib.link_layer", "info");
    assert_eq!(kind.len(), 1);
    assert!(msg(&kind[0]).contains("i40iw0 is an iWARP RNIC"));
    let na: Vec<_> = with(&doc, "ib.counters", "info")
        .into_iter()
        .filter(|f| f["device"] == "i40iw0")
        .collect();
    assert_eq!(na.len(), 1);
    assert_eq!(na[0]["observed"]["no_pma"].as_array().unwrap().len(), 17);
    assert!(msg(&na[0]).contains("N/A (no PMA)"));
}

/// A one-port InfiniBand tree whose `counters/` come from a `=== ./name ===` / value dump.
fn tree_from_counter_dump(dir: &Path, dump: &str) -> PathBuf {
    let root = dir.join("sys");
    let port = root.join("class/infiniband/mlx5_1/ports/1");
    write(&port.join("state"), "4: ACTIVE\n");
    write(&port.join("phys_state"), "5: LinkUp\n");
    write(&port.join("rate"), "400 Gb/sec (4X NDR)\n");
    write(&port.join("link_layer"), "InfiniBand\n");
    write(&root.join("class/infiniband/mlx5_1/hca_type"), "MT4129\n");
    let mut lines = dump.lines();
    let mut n = 0;
    while let Some(l) = lines.next() {
        if let Some(name) = l
            .strip_prefix("=== ./")
            .and_then(|r| r.strip_suffix(" ==="))
        {
            let v = lines.next().unwrap().trim();
            write(&port.join("counters").join(name), &format!("{v}\n"));
            n += 1;
        }
    }
    assert_eq!(n, 21, "the dump holds 21 counters");
    root
}

#[test]
fn a_connectx7_port_with_saturated_pma_counters_warns_once_per_counter_with_its_width() {
    skip_without_corpus!();
    let dir = tempfile::tempdir().unwrap();
    let root = tree_from_counter_dump(
        dir.path(),
        &text("sysfs/issue-excerpts/gpud-pr943-mlx5_1-counters-dump.txt"),
    );
    let (rc, doc) = probe(&root, &[]);
    assert_eq!(rc, 1);
    no_fail(&doc);
    let mut sat: Vec<(String, u64)> = with(&doc, "ib.counters", "warn")
        .iter()
        .map(|f| {
            (
                f["observed"]["counter"].as_str().unwrap().to_string(),
                f["observed"]["width_bits"].as_u64().unwrap(),
            )
        })
        .collect();
    sat.sort();
    assert_eq!(
        sat,
        [
            // 15 is the maximum of this 4-bit counter.
            ("excessive_buffer_overrun_errors".to_string(), 4),
            ("link_downed".to_string(), 8),
            ("port_xmit_discards".to_string(), 16),
            ("port_xmit_wait".to_string(), 32)
        ]
    );
    // port_xmit_data 205143497464492 is far above 2^32: a 64-bit counter, not saturated.
    assert!(
        findings(&doc)
            .iter()
            .all(|f| !msg(f).contains("port_xmit_data"))
    );
}

#[test]
fn two_reads_of_saturated_counters_give_no_delta_and_no_failure() {
    skip_without_corpus!();
    let dir = tempfile::tempdir().unwrap();
    let root = tree_from_counter_dump(
        dir.path(),
        &text("sysfs/issue-excerpts/gpud-pr943-mlx5_1-counters-dump.txt"),
    );
    let base = dir.path().join("base.json");
    let (_, _) = probe(&root, &["--save", base.to_str().unwrap()]);
    // A saturated link_downed at 255 twice: a delta of 0 that proves nothing, never "rose by".
    let (rc, doc) = probe(&root, &["--baseline", base.to_str().unwrap()]);
    assert_eq!(rc, 1);
    no_fail(&doc);
    assert!(
        findings(&doc).iter().all(|f| !msg(f).contains("rose by")),
        "{doc:#}"
    );
    assert_eq!(with(&doc, "ib.counters", "warn").len(), 4);
}

/// A RoCE tree of one mlx5 port bound to `ifname`, with GID entries `(index, type)`; every
/// index in `unreadable` is a directory, which cannot be read as a file (as EINVAL on real
/// sysfs for empty slots).
fn roce_tree(dir: &Path, ifname: &str, gids: &[(u32, &str)], unreadable: &[u32]) -> PathBuf {
    let root = dir.join("sys");
    let dev = root.join("class/infiniband/mlx5_0");
    let port = dev.join("ports/1");
    write(&dev.join("hca_type"), "MT4129\n");
    write(&port.join("state"), "4: ACTIVE\n");
    write(&port.join("phys_state"), "5: LinkUp\n");
    write(&port.join("rate"), "200 Gb/sec (2X NDR)\n");
    write(&port.join("link_layer"), "Ethernet\n");
    for (i, kind) in gids {
        write(
            &port.join(format!("gid_attrs/types/{i}")),
            &format!("{kind}\n"),
        );
        write(
            &port.join(format!("gid_attrs/ndevs/{i}")),
            &format!("{ifname}\n"),
        );
    }
    for i in unreadable {
        std::fs::create_dir_all(port.join(format!("gid_attrs/types/{i}"))).unwrap();
    }
    write(&root.join(format!("class/net/{ifname}/mtu")), "9000\n");
    root
}

#[test]
fn a_gid_table_populated_only_at_4_to_7_with_unreadable_empty_slots_passes_roce_gid() {
    skip_without_corpus!();
    // show_gids in a k8s pod: v1/v2 pairs at indices 4..7 on net1, slots 0..3 unreadable.
    let t = text("sysfs/issue-excerpts/nccl-issue1573-show_gids-k8s-macvlan-excerpt.txt");
    let gids: Vec<(u32, &str)> = t
        .lines()
        .filter(|l| l.starts_with("mlx5_0\t"))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').filter(|s| !s.trim().is_empty()).collect();
            let kind = if f[f.len() - 2] == "v2" {
                "RoCE v2"
            } else {
                "IB/RoCE v1"
            };
            (f[2].parse().unwrap(), kind)
        })
        .collect();
    assert_eq!(gids.len(), 4);
    let dir = tempfile::tempdir().unwrap();
    let root = roce_tree(dir.path(), "net1", &gids, &[0, 1, 2, 3]);
    let (_, doc) = probe(&root, &[]);
    no_fail(&doc);
    assert!(
        findings(&doc).iter().all(|f| f["check"] != "roce.gid"),
        "{doc:#}"
    );
    assert_eq!(port_of(&doc, "mlx5_0", 1)["netdev"], "net1");
}

#[test]
fn a_roce_port_without_gid_attrs_is_not_verified_instead_of_failed() {
    let dir = tempfile::tempdir().unwrap();
    let root = roce_tree(dir.path(), "eth0", &[], &[]);
    let (_, doc) = probe(&root, &[]);
    no_fail(&doc);
    let gid = with(&doc, "roce.gid", "info");
    assert_eq!(gid.len(), 1, "{doc:#}");
    assert!(msg(&gid[0]).contains("not verified"));
    // No netdev either (no ndevs, no device/net link): said under roce.mtu.
    let mtu = with(&doc, "roce.mtu", "info");
    assert_eq!(mtu.len(), 1);
    assert!(msg(&mtu[0]).contains("no netdev found"));
}

/// Probes a one-port RoCE tree whose saved `ethtool -S` (and, when given, PFC) outputs are the
/// given texts; `extra` adds flags.
fn probe_with_tools(
    ethtool: Option<&str>,
    pfc: Option<(&str, &str)>,
    extra: &[&str],
) -> (i32, Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let root = roce_tree(dir.path(), "eth0", &[(3, "RoCE v2")], &[]);
    let tools = dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    if let Some(t) = ethtool {
        write(&tools.join("ethtool-S/eth0"), t);
    }
    if let Some((sub, t)) = pfc {
        write(&tools.join(sub).join("eth0"), t);
    }
    let mut args = vec!["--tool-output-dir", tools.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (rc, doc) = probe(&root, &args);
    (rc, doc, dir)
}

fn ethtool_keys(doc: &Value) -> Vec<String> {
    doc["counters"]["netdevs"]["eth0"]["ethtool"]
        .as_object()
        .unwrap_or_else(|| panic!("no ethtool counters: {doc:#}"))
        .keys()
        .cloned()
        .collect()
}

fn pause_not_verified(doc: &Value) -> Vec<Value> {
    with(doc, "roce.congestion", "info")
}

#[test]
fn pause_counters_of_every_driver_and_kernel_in_the_corpus_are_found() {
    skip_without_corpus!();
    let cases: &[(&str, &[&str], &[&str])] = &[
        // mlx5, kernel 4.15, no header, no indentation, PFC off: global pause only.
        (
            "ethtool/ethq-mlx5_core-cx4-kernel4.15.txt",
            &[
                "rx_pause_ctrl_phy",
                "tx_pause_ctrl_phy",
                "rx_global_pause",
                "tx_global_pause_duration",
            ],
            &["rx_prio3_pause", "rx_prio0_pause"],
        ),
        // mlx5, old kernel names.
        (
            "ethtool/ethq-mlx5_core-old-kernel.txt",
            &["pause_ctrl_rx", "pause_ctrl_tx"],
            &["rx_pause_ctrl_phy"],
        ),
        // bnxt_en.
        (
            "ethtool/showmax-ethtool-exporter/_S_bnxten418_sfp_10gwtf1.txt",
            &[
                "rx_pause_frames",
                "tx_pause_frames",
                "rx_pfc_frames",
                "rx_pfc_ena_frames_pri0",
                "rx_pfc_ena_frames_pri7",
            ],
            &[],
        ),
        // i40e, dotted names with the NIC statistics: header.
        (
            "ethtool/showmax-ethtool-exporter/_S_i40e28_sfp_10gsr85.txt",
            &[
                "port.link_xoff_rx",
                "port.link_xon_tx",
                "port.rx_priority_3_xoff_rx",
                "port.tx_priority_7_xoff_tx",
                "port.rx_priority_0_xon_2_xoff",
            ],
            &[],
        ),
        // mlx4 (inbox driver, ConnectX-3 Pro) inside a lab guide's markdown capture.
        (
            "ethtool/dcb/enizaksoy-lab-connectx3pro-dcb-before.md",
            &["rx_pause", "tx_pause"],
            &[],
        ),
    ];
    for (rel, present, absent) in cases {
        let (_, doc, _d) = probe_with_tools(Some(&text(rel)), None, &[]);
        let keys = ethtool_keys(&doc);
        for k in *present {
            assert!(keys.iter().any(|x| x == k), "{rel}: {k} not in {keys:?}");
        }
        for k in *absent {
            assert!(!keys.iter().any(|x| x == k), "{rel}: {k} in {keys:?}");
        }
        assert!(
            !keys.iter().any(|k| k == "rx_packets"),
            "{rel}: only pause counters are kept"
        );
        assert!(
            pause_not_verified(&doc).is_empty(),
            "{rel}: the driver is in the table: {:#?}",
            pause_not_verified(&doc)
        );
    }
}

#[test]
fn a_bnxt_per_priority_pfc_storm_is_judged_with_the_mlx5_threshold() {
    skip_without_corpus!();
    // Generated from the bnxt_en capture: priority 3 receives 4 million PFC frames.
    let before = text("ethtool/showmax-ethtool-exporter/_S_bnxten418_sfp_10gwtf1.txt");
    let after = before.replace(
        "rx_pfc_ena_frames_pri3: 0",
        "rx_pfc_ena_frames_pri3: 4000000",
    );
    assert_ne!(before, after, "the capture has rx_pfc_ena_frames_pri3: 0");
    let (_, _, dir) = probe_with_tools(Some(&before), None, &[]);
    let base = dir.path().join("base.json");
    let root = dir.path().join("sys");
    let tools = dir.path().join("tools");
    let t = tools.to_str().unwrap();
    probe(
        &root,
        &["--tool-output-dir", t, "--save", base.to_str().unwrap()],
    );
    write(&tools.join("ethtool-S/eth0"), &after);
    let (_, doc) = probe(
        &root,
        &["--tool-output-dir", t, "--baseline", base.to_str().unwrap()],
    );
    let w = with(&doc, "roce.congestion", "warn");
    assert_eq!(w.len(), 1, "{doc:#}");
    assert!(msg(&w[0]).contains("rx_pfc_ena_frames_pri3 rose by 4000000"));
    assert_eq!(w[0]["expected"]["counter"], "rx_prio_pause");
}

#[test]
fn a_driver_whose_pause_names_are_not_in_the_table_is_info_not_verified() {
    let (rc, doc, _d) = probe_with_tools(
        Some("NIC statistics:\n     rx_packets: 5\n     tx_packets: 7\n"),
        None,
        &[],
    );
    assert_eq!(rc, 0, "{doc:#}");
    let f = pause_not_verified(&doc);
    assert_eq!(f.len(), 1, "{doc:#}");
    assert!(msg(&f[0]).contains("no pause counter the probe knows"));
    assert!(msg(&f[0]).contains("docs/checks.md"));
}

fn pfc_config(dir: &Path, prios: &str) -> PathBuf {
    let p = dir.join("cfg.toml");
    write(
        &p,
        &format!(
            "[[node]]\nmatch = \"n1\"\n[[node.ports]]\ndevices = \"mlx5_0\"\npfc_priorities = {prios}\n"
        ),
    );
    p
}

#[test]
fn pfc_priorities_are_read_from_dcb_of_every_layout_and_from_mlnx_qos() {
    skip_without_corpus!();
    let cases = [
        // (file, saved as, the priorities a reader sees)
        (
            "ethtool/dcb/iproute2-commit-6567cb5-dcb-pfc-example.txt",
            "dcb-pfc",
            "[1, 7]",
        ),
        (
            "ethtool/dcb/iproute2-man8-dcb-pfc-example.roff",
            "dcb-pfc",
            "[6, 7]",
        ),
        (
            "ethtool/dcb/enizaksoy-lab-connectx3pro-dcb-before.md",
            "dcb-pfc",
            "[]",
        ),
        (
            "ethtool/dcb/enizaksoy-lab-connectx3pro-dcb-after.md",
            "dcb-pfc",
            "[3]",
        ),
        (
            "ethtool/mlnx_qos/att-netarbiter-OUTPUTSAMPLE.setup-nic-lossless-layer3.sh.md",
            "mlnx_qos",
            "[3]",
        ),
    ];
    for (rel, sub, prios) in cases {
        let cfgdir = tempfile::tempdir().unwrap();
        let right = pfc_config(cfgdir.path(), prios);
        let (rc, doc, _d) = probe_with_tools(
            None,
            Some((sub, &text(rel))),
            &["--config", right.to_str().unwrap()],
        );
        assert!(
            findings(&doc).iter().all(|f| f["check"] != "roce.pfc"),
            "{rel}: PFC on {prios} as configured: {doc:#}"
        );
        assert_ne!(rc, 2, "{rel}");
        let wrong = pfc_config(cfgdir.path(), "[4]");
        let (rc, doc, _d) = probe_with_tools(
            None,
            Some((sub, &text(rel))),
            &["--config", wrong.to_str().unwrap()],
        );
        assert_eq!(rc, 2, "{rel}: PFC not on 4 fails");
        let f = with(&doc, "roce.pfc", "fail");
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0]["observed"]["priorities"]
                .to_string()
                .replace(',', ", "),
            prios,
            "{rel}"
        );
    }
}

#[test]
fn a_sysfs_tree_that_is_not_this_machine_never_runs_this_machines_ethtool_or_dcb() {
    let dir = tempfile::tempdir().unwrap();
    let root = roce_tree(dir.path(), "eth0", &[(3, "RoCE v2")], &[]);
    let (rc, doc) = probe(&root, &[]);
    assert_eq!(rc, 0, "{doc:#}");
    let pfc = with(&doc, "roce.pfc", "info");
    assert_eq!(pfc.len(), 1);
    assert!(
        msg(&pfc[0]).contains("is not this machine's /sys"),
        "{}",
        msg(&pfc[0])
    );
    assert!(msg(&pfc[0]).contains("not verified"));
    let pause = pause_not_verified(&doc);
    assert_eq!(pause.len(), 1);
    assert!(msg(&pause[0]).contains("--tool-output-dir"));
    assert!(doc["counters"]["netdevs"].get("eth0").is_none());
}

#[test]
fn an_omni_path_port_with_camelcase_hw_counters_and_device_level_counters_passes() {
    skip_without_corpus!();
    // netdata#9091: `hfi1_0/ports/1/hw_counters` (`%-20.20s  %s` lines); node_exporter#2023: the
    // tree also has device-level `hw_counters/`, `gids/0..4` and an entry named `SwLinkUp,32`.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    let dev = root.join("class/infiniband/hfi1_0");
    let port = dev.join("ports/1");
    write(&port.join("state"), "4: ACTIVE\n");
    write(&port.join("phys_state"), "5: LinkUp\n");
    write(&port.join("rate"), "100 Gb/sec (4X EDR)\n");
    write(&port.join("link_layer"), "InfiniBand\n");
    let dump = text("sysfs/issue-excerpts/netdata-pr9091-hfi1-hw_counters-excerpt.txt");
    let mut n = 0;
    for l in dump.lines().skip(2) {
        let mut it = l.split_whitespace();
        if let (Some(name), Some(v), None) = (it.next(), it.next(), it.next())
            && v.chars().all(|c| c.is_ascii_digit())
        {
            write(&port.join("hw_counters").join(name), &format!("{v}\n"));
            n += 1;
        }
    }
    assert!(n > 20, "{n} counters in the excerpt");
    let listing =
        text("sysfs/issue-excerpts/node_exporter-issue2023-hfi1-tree-listing-excerpt.txt");
    for l in listing.lines() {
        if let Some(rel) = l.strip_prefix("/sys/class/infiniband/hfi1_0/")
            && (rel.starts_with("hw_counters/")
                || rel.contains("/hw_counters/")
                || rel.contains("/gids/"))
            && !port.join(rel.trim_start_matches("ports/1/")).exists()
        {
            write(&dev.join(rel), "0\n");
        }
    }
    assert!(port.join("hw_counters/SwLinkUp,32").is_file());
    let (rc, doc) = probe(&root, &[]);
    assert_eq!(rc, 0, "{doc:#}");
    no_fail(&doc);
    let hw = &doc["counters"]["ports"]["hfi1_0/1"]["hw_counters"];
    assert_eq!(hw["RcResend"], 2079);
    assert_eq!(hw["DmaWait"], 50646);
    // `lifespan` is a setting, not a counter.
    assert!(hw.get("lifespan").is_none());
    assert_eq!(with(&doc, "ib.link_layer", "info").len(), 1);
}

/// A sysfs tree holding what `ibstat` (or `ibstatus`) printed: per CA its type and firmware,
/// per port the state, physical state, rate and link layer, in the kernel's own spelling.
fn tree_from_ibstat(dir: &Path, text: &str) -> PathBuf {
    let root = dir.join("sys");
    let ib = root.join("class/infiniband");
    let (mut ca, mut port) = (String::new(), 0u32);
    let state = |s: &str| match s {
        "Active" => "4: ACTIVE",
        "Armed" => "3: ARMED",
        "Initializing" | "Init" => "2: INIT",
        _ => "1: DOWN",
    };
    let phys = |s: &str| match s {
        "LinkUp" => "5: LinkUp",
        "Polling" => "2: Polling",
        "Disabled" => "3: Disabled",
        _ => "1: Sleep",
    };
    for l in text.lines() {
        let t = l.trim();
        if let Some(n) = t
            .strip_prefix("CA '")
            .or_else(|| t.strip_prefix("Infiniband device '"))
        {
            let (name, rest) = n.split_once('\'').unwrap();
            ca = name.to_string();
            port = rest
                .trim()
                .strip_prefix("port ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            continue;
        }
        let dev = ib.join(&ca);
        let p = dev.join(format!("ports/{port}"));
        let Some((k, v)) = t.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k {
            "CA type" => write(&dev.join("hca_type"), &format!("{v}\n")),
            "Firmware version" => write(&dev.join("fw_ver"), &format!("{v}\n")),
            "Port 1" | "Port 2" => port = k[5..].parse().unwrap(),
            "State" => write(&p.join("state"), &format!("{}\n", state(v))),
            "Physical state" => write(&p.join("phys_state"), &format!("{}\n", phys(v))),
            "Rate" => write(&p.join("rate"), &format!("{v} Gb/sec\n")),
            "Link layer" | "link_layer" => write(&p.join("link_layer"), &format!("{v}\n")),
            // ibstatus: already the sysfs spelling.
            "state" => write(&p.join("state"), &format!("{v}\n")),
            "phys state" => write(&p.join("phys_state"), &format!("{v}\n")),
            "rate" => write(&p.join("rate"), &format!("{v}\n")),
            _ => {}
        }
    }
    root
}

#[test]
fn ports_seen_through_ibstat_give_the_verdict_a_person_reads_off_them() {
    skip_without_corpus!();
    // (file, ports, ports that fail ib.port_state: down while their peers are active)
    let cases: &[(&str, usize, &[&str])] = &[
        ("ibstat.47.0.a100.all.active.0", 9, &[]),
        ("ibstat.47.0.h100.all.active.0", 12, &[]),
        ("ibstat.47.0.h100.all.active.2", 9, &[]),
        (
            "ibstat.47.0.h100.some.down.0",
            12,
            &["mlx5_2", "mlx5_7", "mlx5_8"],
        ),
        ("ibstat.47.0.h100.some.down.1", 12, &["mlx5_5", "mlx5_11"]),
        (
            "ibstat.47.0.h100.some.down.with.polling.1",
            12,
            &["mlx5_5", "mlx5_11"],
        ),
        // ibpanic on mlx5_8 after 8 good devices: the 8 that printed are healthy.
        ("ibstat.39.0.a100.failed.ibpanic.exit-255.0", 8, &[]),
        ("ibstatus.39.0.a100.all.active.0", 9, &[]),
    ];
    for (f, ports, down) in cases {
        let dir = tempfile::tempdir().unwrap();
        let root = tree_from_ibstat(
            dir.path(),
            &text(&format!("sysfs/leptonai-gpud-ibstat/{f}")),
        );
        let (rc, doc) = probe(&root, &[]);
        let n: usize = doc["inventory"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["ports"].as_array().unwrap().len())
            .sum();
        assert_eq!(n, *ports, "{f}");
        let mut fails: Vec<String> = findings(&doc)
            .iter()
            .filter(|x| x["severity"] == "fail")
            .map(|x| {
                assert_eq!(x["check"], "ib.port_state", "{f}: {x}");
                x["device"].as_str().unwrap().to_string()
            })
            .collect();
        fails.sort();
        let mut want: Vec<String> = down.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(fails, want, "{f}");
        assert_eq!(rc, if down.is_empty() { 0 } else { 2 }, "{f}: {doc:#}");
    }
}

#[test]
fn a_roce_bond_port_at_200g_among_400g_infiniband_ports_is_its_own_group() {
    skip_without_corpus!();
    let dir = tempfile::tempdir().unwrap();
    let root = tree_from_ibstat(
        dir.path(),
        &text("sysfs/leptonai-gpud-ibstat/ibstat.47.0.h100.all.active.2"),
    );
    let (_, doc) = probe(&root, &[]);
    assert_eq!(port_of(&doc, "mlx5_bond_0", 1)["rate_gbps"], 200.0);
    assert_eq!(port_of(&doc, "mlx5_bond_0", 1)["link_layer"], "Ethernet");
    assert_eq!(port_of(&doc, "mlx5_0", 1)["rate_gbps"], 400.0);
    assert!(with(&doc, "ib.port_rate", "fail").is_empty(), "{doc:#}");
}

#[test]
fn a_missing_corpus_fails_naming_the_variable_that_points_at_it() {
    let dir = tempfile::tempdir().unwrap();
    let err = real_world_support::locate(dir.path()).unwrap_err();
    assert!(err.contains("FABRIC_REAL_WORLD"), "{err}");
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
}

#[test]
fn the_real_trees_have_no_pcie_link_files_and_three_different_parts_so_parity_finds_nothing() {
    skip_without_corpus!();
    // Neither tree was captured with the PCI functions' link files (their `device` links are
    // dangling or absent), and hfi1/mlx4/mlx5 are different parts: the peer checks have no
    // evidence either way and say nothing; a first probe says only that it is one.
    for tree in [
        "sysfs/prometheus-procfs/sys",
        "sysfs/prometheus-node_exporter/sys",
    ] {
        let (_, doc) = probe(&file(tree), &[]);
        for id in ["pcie.link", "hca.fw_ver", "hca.board_id"] {
            let f: Vec<_> = findings(&doc)
                .into_iter()
                .filter(|f| f["check"] == id)
                .collect();
            assert!(f.is_empty(), "{tree}: {id}: {f:#?}");
        }
        let gone = with(&doc, "inventory.gone", "info");
        assert_eq!(gone.len(), 1, "{tree}");
        assert!(
            msg(&gone[0]).starts_with("first probe"),
            "{}",
            msg(&gone[0])
        );
    }
}

#[test]
fn virtual_functions_of_different_cards_in_a_cloud_a100_node_are_not_firmware_peers() {
    skip_without_corpus!();
    // mlx5_0 is an Ethernet VF on 22.35.2302, mlx5_1..8 InfiniBand VFs on 28.37.1014, all
    // reading CA type MT4126: the major (22 vs 28) says they are different silicon.
    let dir = tempfile::tempdir().unwrap();
    let root = tree_from_ibstat(
        dir.path(),
        &text("sysfs/leptonai-gpud-ibstat/ibstat.47.0.a100.all.active.0"),
    );
    let (rc, doc) = probe(&root, &[]);
    assert!(with(&doc, "hca.fw_ver", "warn").is_empty(), "{doc:#}");
    assert_eq!(rc, 0);
}
