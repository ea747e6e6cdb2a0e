//! `fabric-check check-config` validates the probe's TOML configuration as well as plugstack.conf.

use std::path::PathBuf;

use assert_cmd::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn check_config(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .arg("check-config")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn the_shipped_example_configuration_is_valid() {
    let example = repo().join("etc/fabric-check.toml");
    let (code, out) = check_config(&["--config".as_ref(), example.as_os_str()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(": ok (fabric-check.toml)"), "{out}");
}

#[test]
fn an_unknown_key_is_named_with_its_line_and_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("fc.toml");
    std::fs::write(&cfg, "[[node]]\nmatch = \"gpu[1-4]\"\ngpu = 8\n").unwrap();
    let (code, out) = check_config(&["--config".as_ref(), cfg.as_os_str()]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("unknown field `gpu`") && out.contains("line 3"),
        "{out}"
    );
}

#[test]
fn a_bad_hostlist_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("fc.toml");
    std::fs::write(&cfg, "[[node]]\nmatch = \"gpu[1-\"\n").unwrap();
    let (code, out) = check_config(&["--config".as_ref(), cfg.as_os_str()]);
    assert_eq!(code, 2, "{out}");
}

#[test]
fn the_configuration_a_plugstack_line_names_is_validated_too() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("fc.toml");
    std::fs::write(&cfg, "[bom]\ndrift_severity = \"loud\"\n").unwrap();
    let so = tmp.path().join("spank_fabric_check.so");
    std::fs::write(&so, "").unwrap();
    let probe = assert_cmd::cargo::cargo_bin("fabric-check");
    let plugstack = tmp.path().join("plugstack.conf");
    std::fs::write(
        &plugstack,
        format!(
            "required {} probe={} config={}\n",
            so.display(),
            probe.display(),
            cfg.display()
        ),
    )
    .unwrap();
    let (code, out) = check_config(&["--plugstack".as_ref(), plugstack.as_os_str()]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("drift_severity") || out.contains("loud"),
        "{out}"
    );
    std::fs::write(&cfg, "[bom]\ndrift_severity = \"fail\"\n").unwrap();
    let (code, out) = check_config(&["--plugstack".as_ref(), plugstack.as_os_str()]);
    assert_eq!(code, 0, "{out}");
}
