//! The plugin and the wrapper link the contract crate alone: slurmd, slurmstepd and srun load the
//! plugin, and every job step runs the wrapper, so neither may pull in the heavy library.

use std::process::Command;

/// The packages `package` links (normal and build dependencies, any feature), one name a line.
fn linked_packages(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--locked", "-p", package, "-e", "normal,build"])
        .args(["--prefix", "none", "--format", "{p}", "--all-features"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

const HEAVY: &[&str] = &[
    "fabric-core",
    "fabric-report",
    "plotters",
    "rust_decimal",
    "cudarc",
    "rdma-sys",
];

/// `package` links the contract crate and none of [`HEAVY`].
fn links_the_contract_crate_and_nothing_heavy(package: &str) {
    let linked = linked_packages(package);
    assert!(linked.iter().any(|p| p == "fabric-proto"), "{linked:?}");
    for heavy in HEAVY {
        assert!(
            !linked.iter().any(|p| p == heavy),
            "{package} links {heavy}: {linked:?}"
        );
    }
}

#[test]
fn the_spank_plugin_links_the_contract_crate_and_nothing_heavy() {
    links_the_contract_crate_and_nothing_heavy("fabric-spank");
}

#[test]
fn the_wrapper_links_the_contract_crate_and_nothing_heavy() {
    links_the_contract_crate_and_nothing_heavy("fabric-run");
}

#[test]
fn the_contract_crate_needs_only_serde_and_thiserror() {
    let direct = {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args([
                "tree",
                "--locked",
                "-p",
                "fabric-proto",
                "-e",
                "normal",
                "--depth",
                "1",
            ])
            .args(["--prefix", "none", "--format", "{p}"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo tree");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let mut names = direct.clone();
    names.sort();
    assert_eq!(names, ["serde", "serde_json", "thiserror"], "{direct:?}");
}

#[test]
fn the_report_crate_links_the_contract_and_leaf_crates_but_not_core() {
    let linked = linked_packages("fabric-report");
    for needed in ["fabric-proto", "fabric-base"] {
        assert!(linked.iter().any(|p| p == needed), "{linked:?}");
    }
    for below in ["fabric-core", "cudarc", "rdma-sys"] {
        assert!(
            !linked.iter().any(|p| p == below),
            "fabric-report links {below}: {linked:?}"
        );
    }
}
