//! `fabric-check probe` flags, formats, state handling and refusals, through the binary.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use fabric_testkit::sysfs::SysfsTree;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A scenario's shared, read-only tree (written once by the test kit).
fn fixture(name: &str) -> PathBuf {
    fabric_testkit::shared_sysfs_root!(name)
}

fn probe(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .arg("probe")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn json_doc(stdout: &str) -> Value {
    assert_eq!(
        stdout.lines().count(),
        1,
        "json mode prints exactly one line: {stdout}"
    );
    serde_json::from_str(stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_missing_sysfs_root_is_exit_3_with_one_error_document() {
    let (rc, out, err) = probe(&["--node", "n1", "--sysfs-root", "/nonexistent/sys"]);
    assert_eq!(rc, 3);
    let doc = json_doc(&out);
    assert_eq!(doc["verdict"], "error");
    assert!(doc["error"].as_str().unwrap().contains("/nonexistent/sys"));
    assert!(err.contains("--sysfs-root"), "{err}");
}

#[test]
fn a_config_with_an_unknown_key_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[[node]]\nmatch = \"n1\"\ngpu = 8\n").unwrap();
    let (rc, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(&fixture("ib8-healthy")),
        "--config",
        s(&cfg),
    ]);
    assert_eq!(rc, 3);
    let e = json_doc(&out)["error"].as_str().unwrap().to_string();
    assert!(e.contains("c.toml") && e.contains("gpu"), "{e}");
}

#[test]
fn an_unusable_baseline_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path().join("b.json");
    std::fs::write(&b, "{\"schema\":\"other\"}").unwrap();
    let (rc, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(&fixture("ib8-healthy")),
        "--baseline",
        s(&b),
    ]);
    assert_eq!(rc, 3);
    assert!(
        json_doc(&out)["error"]
            .as_str()
            .unwrap()
            .contains("fabric-check probe --save")
    );
}

#[test]
fn the_state_dir_gives_deltas_across_runs_as_on_the_testbed() {
    let kit = SysfsTree::new("ib8-healthy");
    let tree = kit.path();
    let state = kit.dir().join("state");
    let args = [
        "--node",
        "n3",
        "--sysfs-root",
        s(tree),
        "--state-dir",
        s(&state),
    ];
    let (rc, out, _) = probe(&args);
    assert_eq!(rc, 0);
    assert!(
        json_doc(&out)["findings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("no baseline")
    );
    assert!(state.join("last.json").is_file());
    let (rc, out, _) = probe(&args);
    assert_eq!(
        (rc, json_doc(&out)["findings"].as_array().unwrap().len()),
        (0, 0)
    );
    std::fs::write(
        tree.join("class/infiniband/mlx5_6/ports/1/counters/link_downed"),
        "1\n", // what the testbed writes
    )
    .unwrap();
    let (rc, out, _) = probe(&args);
    assert_eq!(rc, 2);
    let f = &json_doc(&out)["findings"][0];
    assert_eq!(
        (
            f["check"].as_str(),
            f["device"].as_str(),
            f["port"].as_u64()
        ),
        (Some("ib.counters"), Some("mlx5_6"), Some(1))
    );
    // The failing run became the new baseline: the next run has nothing new to say.
    let (rc, _, _) = probe(&args);
    assert_eq!(rc, 0);
}

#[test]
fn save_writes_the_same_document_as_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("snap.json");
    let (_, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(&fixture("roce8-healthy")),
        "--save",
        s(&saved),
    ]);
    let a = json_doc(&out);
    let b: Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    assert_eq!(a["counters"], b["counters"]);
    assert_eq!(a["findings"], b["findings"]);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file is left"
    );
}

#[test]
fn a_baseline_from_another_node_is_said_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path().join("b.json");
    probe(&[
        "--node",
        "n2",
        "--sysfs-root",
        s(&fixture("ib8-healthy")),
        "--save",
        s(&b),
    ]);
    let (rc, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(&fixture("ib8-link-downed")),
        "--baseline",
        s(&b),
    ]);
    assert_eq!(rc, 0);
    assert!(
        json_doc(&out)["findings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("\"n2\"")
    );
}

#[test]
fn prometheus_output_goes_atomically_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("fabric.prom");
    let (rc, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(&fixture("ib8-port-down")),
        "--format",
        "prometheus",
        "--output",
        s(&prom),
    ]);
    assert_eq!(rc, 2);
    assert!(out.is_empty());
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.contains("fabric_check_verdict{node=\"n1\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("fabric_check_port_active{node=\"n1\",device=\"mlx5_3\",port=\"1\"} 0"),
        "{text}"
    );
    assert!(text.contains("fabric_check_port_info{node=\"n1\",device=\"mlx5_3\",port=\"1\",link_layer=\"InfiniBand\""), "{text}");
    assert!(text.contains(
        "fabric_check_findings{node=\"n1\",check=\"ib.port_state\",severity=\"fail\"} 1"
    ));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn the_table_puts_failures_first_and_has_no_colour_in_a_pipe() {
    let (rc, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(&fixture("ib8-port-down")),
        "--format",
        "table",
    ]);
    assert_eq!(rc, 2);
    assert!(!out.contains('\x1b'));
    assert!(
        out.find("FAIL ib.port_state").unwrap() < out.find("INFO ib.counters").unwrap(),
        "{out}"
    );
}

#[test]
fn config_expectations_add_to_parity() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        r#"
[[node]]
match = "gpu[001-128]"
gpus = 7
[[node.ports]]
devices = "mlx5_[0-7]"
link_layer = "InfiniBand"
count = 8
rate_gbps = 400
[[node.ports]]
devices = "mlx5_[8-9]"
link_layer = "Ethernet"
mtu = 9000
pfc_priorities = [3]
ecn_priorities = [3]
"#,
    )
    .unwrap();
    let run = |node: &str| {
        let (rc, out, _) = probe(&[
            "--node",
            node,
            "--sysfs-root",
            s(&fixture("ib8-healthy")),
            "--config",
            s(&cfg),
        ]);
        let doc = json_doc(&out);
        let checks: Vec<String> = doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["severity"] != "info")
            .map(|f| f["check"].as_str().unwrap().to_string())
            .collect();
        (rc, checks)
    };
    assert_eq!(run("gpu042"), (2, vec!["gpu.count".to_string()]));
    assert_eq!(run("login1"), (0, vec![]));
}

#[test]
fn a_looping_counter_directory_is_an_info_not_verified_naming_it_and_no_fault() {
    let kit = SysfsTree::new("roce8-healthy");
    let tree = kit.path();
    let hw = tree.join("class/infiniband/mlx5_2/ports/1/hw_counters");
    std::fs::remove_dir_all(&hw).unwrap();
    std::os::unix::fs::symlink("hw_counters", &hw).unwrap();
    let (rc, out, _) = probe(&["--node", "n1", "--sysfs-root", s(tree)]);
    assert_eq!(rc, 0, "could not look is not a fault: {out}");
    let doc = json_doc(&out);
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["message"]
                .as_str()
                .unwrap()
                .contains("hw_counters: cannot list")
        })
        .unwrap()
        .clone();
    assert_eq!(f["device"], "mlx5_2");
    assert_eq!(f["severity"], "info");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .starts_with("not verified: cannot read"),
        "{f}"
    );
}

#[test]
fn the_example_config_is_valid_and_passes_the_healthy_fixture() {
    let cfg = repo().join("etc/fabric-check.toml");
    let (rc, out, err) = probe(&[
        "--node",
        "gpu007",
        "--sysfs-root",
        s(&fixture("ib8-healthy")),
        "--config",
        s(&cfg),
    ]);
    let doc = json_doc(&out);
    assert_eq!(rc, 0, "{doc:#} {err}");
    let (rc, out, _) = probe(&[
        "--node",
        "gpu007",
        "--sysfs-root",
        s(&fixture("ib8-half-rate")),
        "--config",
        s(&cfg),
    ]);
    assert_eq!(rc, 2);
    let doc = json_doc(&out);
    assert_eq!(doc["findings"][0]["check"], "ib.port_rate");
    assert!(
        doc["findings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("configuration expects 400")
    );
}

#[cfg(not(feature = "nccl"))]
#[test]
fn nccl_local_without_the_feature_is_an_info_skip() {
    let (rc, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(&fixture("ib8-healthy")),
        "--nccl-local",
    ]);
    assert_eq!(rc, 0);
    let doc = json_doc(&out);
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "nccl.local")
        .unwrap()
        .clone();
    assert_eq!(f["severity"], "info");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("`nccl` cargo feature")
    );
}

#[cfg(not(feature = "verbs"))]
#[test]
fn verbs_loopback_without_the_feature_is_an_info_skip() {
    let (rc, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(&fixture("ib8-healthy")),
        "--verbs-loopback",
    ]);
    assert_eq!(rc, 0);
    let doc = json_doc(&out);
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "verbs.loopback")
        .unwrap()
        .clone();
    assert_eq!(f["severity"], "info");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("`verbs` cargo feature")
    );
}

fn verbs_finding(doc: &Value) -> Value {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "verbs.loopback")
        .expect("--verbs-gpu runs verbs.loopback")
        .clone()
}

#[cfg(not(feature = "verbs"))]
#[test]
fn verbs_gpu_implies_the_loopback_and_without_the_feature_is_an_info_skip() {
    let (rc, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(&fixture("ib8-healthy")),
        "--verbs-gpu",
    ]);
    assert_eq!(rc, 0);
    let f = verbs_finding(&json_doc(&out));
    assert_eq!(f["severity"], "info");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("`verbs` cargo feature")
    );
}

/// With the feature, on a sysfs root without RDMA devices: the loopback (and so the GPU run) is
/// an info skip, and the node passes.
#[cfg(feature = "verbs")]
#[test]
fn verbs_gpu_without_rdma_devices_is_an_info_skip_and_the_node_passes() {
    let dir = tempfile::tempdir().unwrap();
    let (rc, out, _) = probe(&[
        "--node",
        "n1",
        "--sysfs-root",
        s(dir.path()),
        "--verbs-gpu",
        "1",
    ]);
    assert_eq!(rc, 0);
    let f = verbs_finding(&json_doc(&out));
    assert_eq!(f["severity"], "info");
    assert_eq!(f["message"], "verbs.loopback skipped: no RDMA devices");
}
