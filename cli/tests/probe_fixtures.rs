//! Runs the `fabric-check` binary on every sysfs scenario of `fabric-testkit` and asserts the exact set of findings
//! (check, severity, device, port): each fault is found once, healthy ports say nothing.

use std::path::PathBuf;

use assert_cmd::Command;
use serde_json::Value;

type Key = (String, String, Option<String>, Option<u32>);

/// A scenario's shared, read-only tree (written once by the test kit).
fn fixture(name: &str) -> PathBuf {
    fabric_testkit::shared_sysfs_root!(name)
}

fn probe(scenario: &str, extra: &[&str]) -> (i32, Value) {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["probe", "--format", "json", "--node", "n1", "--sysfs-root"])
        .arg(fixture(scenario))
        .args(extra)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{scenario}: stdout is not one JSON document ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap(), doc)
}

fn keys(doc: &Value) -> Vec<Key> {
    let mut v: Vec<Key> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["check"].as_str().unwrap().to_string(),
                f["severity"].as_str().unwrap().to_string(),
                f["device"].as_str().map(str::to_string),
                f["port"].as_u64().map(|p| p as u32),
            )
        })
        .collect();
    v.sort();
    v
}

fn k(check: &str, sev: &str, dev: Option<&str>, port: Option<u32>) -> Key {
    (check.into(), sev.into(), dev.map(str::to_string), port)
}

fn no_baseline() -> Key {
    k("ib.counters", "info", None, None)
}

/// Without a baseline, `inventory.gone` says it has nothing to compare with, as `ib.counters`
/// does: [`no_baseline`] in `want` stands for both.
fn assert_findings(scenario: &str, extra: &[&str], code: i32, mut want: Vec<Key>) {
    let (rc, doc) = probe(scenario, extra);
    if want.contains(&no_baseline()) {
        want.push(k("inventory.gone", "info", None, None));
    }
    want.sort();
    assert_eq!(
        keys(&doc),
        want,
        "{scenario}: findings differ; document: {doc:#}"
    );
    assert_eq!(rc, code, "{scenario}: exit code");
    let verdict = ["pass", "warn", "fail", "error"][code as usize];
    assert_eq!(doc["verdict"], verdict, "{scenario}");
    assert_eq!(doc["schema"], "fabric-check/probe/v1");
    assert_eq!(doc["node"], "n1");
}

#[test]
fn healthy_nodes_say_only_that_there_is_no_baseline() {
    for s in ["ib8-healthy", "roce8-healthy"] {
        assert_findings(s, &[], 0, vec![no_baseline()]);
    }
}

#[test]
fn the_irdma_node_says_what_it_cannot_see() {
    let mut want = vec![no_baseline()];
    for d in ["irdma0", "irdma1"] {
        want.push(k("ib.counters", "info", Some(d), Some(1)));
        want.push(k("roce.ecn", "info", Some(d), Some(1)));
    }
    assert_findings("irdma-healthy", &[], 0, want.clone());
    want.push(k("ib.port_state", "fail", Some("irdma1"), Some(1)));
    assert_findings("irdma-port-down", &[], 2, want);
}

#[test]
fn one_port_down_gives_exactly_one_port_state_failure() {
    assert_findings(
        "ib8-port-down",
        &[],
        2,
        vec![
            k("ib.port_state", "fail", Some("mlx5_3"), Some(1)),
            no_baseline(),
        ],
    );
    assert_findings(
        "roce8-port-down",
        &[],
        2,
        vec![
            k("ib.port_state", "fail", Some("mlx5_1"), Some(1)),
            no_baseline(),
        ],
    );
}

#[test]
fn a_half_rate_port_fails_its_rate() {
    assert_findings(
        "ib8-half-rate",
        &[],
        2,
        vec![
            k("ib.port_rate", "fail", Some("mlx5_5"), Some(1)),
            no_baseline(),
        ],
    );
    assert_findings(
        "roce8-half-rate",
        &[],
        2,
        vec![
            k("ib.port_rate", "fail", Some("mlx5_7"), Some(1)),
            no_baseline(),
        ],
    );
}

#[test]
fn roce_configuration_faults_fail_their_checks() {
    assert_findings(
        "roce8-mtu-1500",
        &[],
        2,
        vec![
            k("roce.mtu", "fail", Some("mlx5_4"), Some(1)),
            no_baseline(),
        ],
    );
    assert_findings(
        "roce8-no-v2-gid",
        &[],
        2,
        vec![
            k("roce.gid", "fail", Some("mlx5_2"), Some(1)),
            no_baseline(),
        ],
    );
    assert_findings(
        "ib8-no-roce-v2-gid",
        &[],
        2,
        vec![
            k("roce.gid", "fail", Some("mlx5_9"), Some(1)),
            no_baseline(),
        ],
    );
    assert_findings(
        "roce8-ecn-off",
        &[],
        2,
        vec![
            k("roce.ecn", "fail", Some("mlx5_5"), Some(1)),
            no_baseline(),
        ],
    );
    assert_findings(
        "roce8-pfc-off",
        &[],
        2,
        vec![
            k("roce.pfc", "fail", Some("mlx5_6"), Some(1)),
            no_baseline(),
        ],
    );
}

#[test]
fn the_netdev_is_named_in_roce_messages() {
    let (_, doc) = probe("roce8-mtu-1500", &[]);
    let msg = doc["findings"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("ens5np0") && msg.contains("1500") && msg.contains("9000"),
        "{msg}"
    );
}

#[test]
fn counter_storms_without_a_baseline_are_not_judged() {
    for s in [
        "ib8-symbol-errors",
        "ib8-link-downed",
        "ib8-pause-storm",
        "roce8-pause-storm",
        "roce8-cnp-storm",
        "roce8-retrans",
    ] {
        assert_findings(s, &[], 0, vec![no_baseline()]);
    }
}

/// Probes `before` with --save, then `after` with --baseline.
fn two_snapshots(before: &str, after: &str, code: i32, want: Vec<Key>) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.json");
    let (rc, _) = probe(before, &["--save", base.to_str().unwrap()]);
    assert_eq!(rc, 0, "{before} should pass");
    assert_findings(after, &["--baseline", base.to_str().unwrap()], code, want);
}

#[test]
fn a_link_downed_increase_fails() {
    two_snapshots(
        "ib8-healthy",
        "ib8-link-downed",
        2,
        vec![k("ib.counters", "fail", Some("mlx5_6"), Some(1))],
    );
}

#[test]
fn rising_symbol_errors_fail() {
    two_snapshots(
        "ib8-healthy",
        "ib8-symbol-errors",
        2,
        vec![k("ib.counters", "fail", Some("mlx5_2"), Some(1))],
    );
}

#[test]
fn pause_and_cnp_storms_warn() {
    two_snapshots(
        "ib8-healthy",
        "ib8-pause-storm",
        1,
        vec![k("roce.congestion", "warn", Some("mlx5_8"), Some(1)); 2],
    );
    two_snapshots(
        "roce8-healthy",
        "roce8-pause-storm",
        1,
        vec![k("roce.congestion", "warn", Some("mlx5_3"), Some(1)); 2],
    );
    two_snapshots(
        "roce8-healthy",
        "roce8-cnp-storm",
        1,
        vec![k("roce.congestion", "warn", Some("mlx5_0"), Some(1)); 3],
    );
}

#[test]
fn rising_retransmissions_warn() {
    two_snapshots(
        "roce8-healthy",
        "roce8-retrans",
        1,
        vec![k("roce.retrans", "warn", Some("mlx5_6"), Some(1)); 2],
    );
}

#[test]
fn an_unchanged_node_against_its_own_baseline_is_silent() {
    two_snapshots("ib8-healthy", "ib8-healthy", 0, vec![]);
    two_snapshots("roce8-healthy", "roce8-healthy", 0, vec![]);
}

#[test]
fn a_nic_trained_at_x8_of_x16_fails_its_pcie_link() {
    assert_findings(
        "ib8-pcie-x8",
        &[],
        2,
        vec![k("pcie.link", "fail", Some("mlx5_3"), None), no_baseline()],
    );
    let (_, doc) = probe("ib8-pcie-x8", &[]);
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "pcie.link")
        .unwrap();
    assert_eq!(f["observed"]["width"], 8);
    assert_eq!(f["observed"]["max_width"], 16);
}

#[test]
fn a_nic_one_pcie_generation_low_fails_its_pcie_link() {
    assert_findings(
        "ib8-pcie-gen4",
        &[],
        2,
        vec![k("pcie.link", "fail", Some("mlx5_6"), None), no_baseline()],
    );
}

#[test]
fn firmware_and_board_id_unlike_their_peers_warn() {
    assert_findings(
        "ib8-fw-mismatch",
        &[],
        1,
        vec![k("hca.fw_ver", "warn", Some("mlx5_4"), None), no_baseline()],
    );
    // Another board id is another peer group for firmware, so only the board id is named.
    assert_findings(
        "ib8-board-id-mismatch",
        &[],
        1,
        vec![
            k("hca.board_id", "warn", Some("mlx5_2"), None),
            no_baseline(),
        ],
    );
}

#[test]
fn a_gpu_gone_since_the_last_saved_probe_fails_without_a_configured_count() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let (rc, _) = probe("ib8-healthy", &["--state-dir", state]);
    assert_eq!(rc, 0);
    // The GPU paired with mlx5_5 (NUMA 1, second switch: 0000:a3:00.0) is gone.
    let (rc, doc) = probe("ib8-gpu-gone", &["--state-dir", state]);
    assert_eq!(
        keys(&doc),
        [k("inventory.gone", "fail", Some("0000:a3:00.0"), None)],
        "{doc:#}"
    );
    assert_eq!(rc, 2);
    // Its first probe had nothing to compare with and did not fail.
    assert_findings("ib8-gpu-gone", &[], 0, vec![no_baseline()]);
}

#[test]
fn bad_files_are_findings_naming_the_file_never_a_crash() {
    // Malformed content (not a number, empty, too long) warns; a file or folder that cannot be
    // opened, read or resolved is "could not look": info, never a fault.
    let want = vec![
        k("ib.port_count", "info", Some("loop0"), None),
        k("roce.retrans", "info", Some("mlx5_0"), Some(1)),
        k("ib.counters", "warn", Some("mlx5_1"), Some(1)),
        k("ib.counters", "warn", Some("mlx5_1"), Some(1)),
        k("ib.counters", "warn", Some("mlx5_2"), Some(1)),
        k("ib.counters", "info", Some("mlx5_3"), Some(1)),
        k("ib.counters", "info", Some("mlx5_4"), Some(1)),
        k("ib.counters", "warn", Some("mlx5_4"), Some(1)),
        k("ib.port_rate", "info", Some("mlx5_7"), Some(1)),
        no_baseline(),
    ];
    assert_findings("ib8-bad-files", &[], 1, want);
    let (_, doc) = probe("ib8-bad-files", &[]);
    let msgs: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["message"].as_str().unwrap())
        .collect();
    for needle in [
        "mlx5_1/ports/1/counters/symbol_error: not a counter value",
        "mlx5_1/ports/1/counters/port_rcv_errors: empty",
        "mlx5_2/ports/1/counters/port_xmit_discards: longer than 4096 bytes",
        "mlx5_4/ports/1/counters/local_link_integrity_errors: cannot open",
        "mlx5_4/ports/1/counters/port_rcv_remote_physical_errors: not a counter value",
        "mlx5_7/ports/1/rate: cannot open",
        "mlx5_0/ports/1/hw_counters/out_of_sequence: cannot read",
        "class/infiniband/loop0: cannot resolve",
        "VL15_dropped read N/A (no PMA)",
    ] {
        assert!(
            msgs.iter().any(|m| m.contains(needle)),
            "no message contains {needle:?}: {msgs:#?}"
        );
    }
}

#[test]
fn the_inventory_lists_devices_ports_and_gpus() {
    let (_, doc) = probe("ib8-healthy", &[]);
    let inv = &doc["inventory"];
    assert_eq!(inv["devices"].as_array().unwrap().len(), 10);
    assert_eq!(inv["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(inv["gpus"][0]["model"], "H100-SXM5-80GB");
    assert_eq!(inv["gpus"][0]["pcie"]["width"], 16);
    assert_eq!(inv["devices"][0]["pcie"]["speed_gts"], 32.0);
    assert_eq!(inv["devices"][8]["pcie"]["max_speed_gts"], 16.0);
    let m8 = &inv["devices"][8];
    assert_eq!(m8["name"], "mlx5_8");
    assert_eq!(m8["ports"][0]["link_layer"], "Ethernet");
    assert_eq!(m8["ports"][0]["netdev"], "ens9f0np0");
    assert_eq!(m8["ports"][0]["mtu"], 9000);
    assert_eq!(inv["devices"][0]["ports"][0]["rate_gbps"], 400.0);
    let c = &doc["counters"];
    assert!(c["taken_unix_ms"].as_u64().unwrap() > 0);
    assert!(c["ports"]["mlx5_0/1"]["counters"]["symbol_error"].is_u64());
    assert!(c["ports"]["mlx5_0/1"]["hw_counters"]["out_of_sequence"].is_u64());
    assert!(c["netdevs"]["ens9f0np0"]["ethtool"]["rx_prio3_pause"].is_u64());
}
