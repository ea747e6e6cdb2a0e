//! `fabric-check bom` and the `bom.drift` check through the binary.

use assert_cmd::Command;
use serde_json::Value;

fn bin() -> Command {
    Command::cargo_bin("fabric-check").unwrap()
}

#[test]
fn bom_prints_models_firmware_rates_and_gpus() {
    let out = bin()
        .args(["bom", "--node", "n1", "--sysfs-root"])
        .arg(fabric_testkit::shared_sysfs_root!("ib8-healthy"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "hca/mlx5_0/fw_ver",
        "28.39.1002",
        "hca/mlx5_8/port1/mtu",
        "400 Gb/sec (4X NDR)",
        "H100-SXM5-80GB",
        "module/nvidia/version",
        "550.54.15",
        "gpu/count",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
}

#[test]
fn a_pinned_bom_drifts_when_firmware_changes() {
    let tree = fabric_testkit::sysfs::SysfsTree::new("ib8-healthy");
    let pin = tree.dir().join("bom.json");
    let tree = tree.path();
    bin()
        .args(["bom", "--node", "n1", "--sysfs-root"])
        .arg(tree)
        .arg("--pin")
        .arg(&pin)
        .assert()
        .success();
    let probe = || {
        let out = bin()
            .args(["probe", "--node", "n1", "--sysfs-root"])
            .arg(tree)
            .arg("--bom-pin")
            .arg(&pin)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        )
    };
    let (rc, _) = probe();
    assert_eq!(rc, 0);
    std::fs::write(tree.join("class/infiniband/mlx5_3/fw_ver"), "28.40.1000\n").unwrap();
    let (rc, doc) = probe();
    assert_eq!(rc, 1);
    let drift: Vec<&Value> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "bom.drift")
        .collect();
    assert_eq!(drift.len(), 1);
    assert_eq!(drift[0]["device"], "mlx5_3");
    let msg = drift[0]["message"].as_str().unwrap();
    assert!(
        msg.contains("28.39.1002") && msg.contains("28.40.1000"),
        "{msg}"
    );
}

#[test]
fn a_missing_pinned_bom_means_the_probe_could_not_run() {
    let out = bin()
        .args([
            "probe",
            "--node",
            "n1",
            "--bom-pin",
            "/nonexistent/bom.json",
            "--sysfs-root",
        ])
        .arg(fabric_testkit::shared_sysfs_root!("ib8-healthy"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["error"].as_str().unwrap().contains("bom --pin"));
}
