//! Golden outputs of `fabric-check accept` over the nccl-tests fixtures.

use assert_cmd::Command;

const T: &str = "tests/fixtures/nccl-tests";

fn accept(args: &[&str]) -> (i32, String) {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .current_dir(format!("{}/..", env!("CARGO_MANIFEST_DIR")))
        .arg("accept")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn thresholds() -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        f.path(),
        "max_cv_pct = 5.0\nmax_outlier_runs = 0\n[[min_busbw]]\nsize = \"8G\"\ngbps = 340.0\n[[min_busbw]]\nsize = 1048576\ngbps = 45.0\n",
    )
    .unwrap();
    f
}

#[test]
fn three_runs_with_one_slow_and_drifting_firmware_fail_acceptance() {
    let th = thresholds();
    let (code, out) = accept(&[
        &format!("{T}/text/allreduce-2x8-run1.txt"),
        &format!("{T}/text/allreduce-2x8-run2.txt"),
        &format!("{T}/text/allreduce-2x8-run3-slow.txt"),
        "--bom",
        &format!("{T}/boms/gpu-a01.json"),
        &format!("{T}/boms/gpu-a02.json"),
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--thresholds",
        th.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    insta::assert_snapshot!(out);
}

#[test]
fn two_clean_runs_pass_acceptance() {
    let th = thresholds();
    let (code, out) = accept(&[
        &format!("{T}/text/allreduce-2x8-run1.txt"),
        &format!("{T}/text/allreduce-2x8-run2.txt"),
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--thresholds",
        th.path().to_str().unwrap(),
        "--format",
        "markdown",
    ]);
    assert_eq!(code, 0, "{out}");
    insta::assert_snapshot!(out);
}

#[test]
fn the_json_run_finds_the_slow_rank_and_its_host() {
    let (code, out) = accept(&[
        &format!("{T}/json/allreduce-2x8-per-rank.json"),
        "--format",
        "json",
    ]);
    assert_eq!(code, 2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ranks = v["outlier_ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 1, "{ranks:?}");
    assert_eq!(ranks[0]["rank"], 5);
    assert_eq!(ranks[0]["host"], "gpu-a01");
    assert!(ranks[0]["worst_skew_pct"].as_f64().unwrap() > 20.0);
    let p95 = v["sizes"][0]["p95_us"].as_f64();
    assert!(p95.is_some(), "p95 comes from the per-iteration statistics");
    insta::assert_snapshot!(out);
}

#[test]
fn a_roce_bom_gets_the_roce_questions_and_not_the_subnet_manager_one() {
    let (_, out) = accept(&[
        &format!("{T}/text/allreduce-2x8-run1.txt"),
        "--bom",
        &format!("{T}/boms/roce-b01.json"),
        "--format",
        "csv",
    ]);
    assert!(
        out.contains("roce.pfc") && out.contains("roce.ecn"),
        "{out}"
    );
    assert!(!out.contains("ib.subnet_manager"), "{out}");
    insta::assert_snapshot!(out);
}
