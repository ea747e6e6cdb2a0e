//! The `fabric-fixtures` binary that scripts call through `scripts/gen-fixtures`.

use std::process::{Command, Output};

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fabric-fixtures"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn list_prints_every_scenario_one_a_line() {
    let out = run(&["--list".as_ref()]);
    assert!(out.status.success());
    let names: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(names, fabric_testkit::sysfs::SCENARIOS);
}

#[test]
fn a_scenario_is_written_where_the_script_names() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("n1/sysfs");
    let st = run(&["roce8-mtu-1500".as_ref(), out.as_os_str()]);
    assert!(st.status.success(), "{st:?}");
    let mtu = std::fs::read_to_string(out.join("class/net/ens5np0/mtu")).unwrap();
    assert_eq!(mtu, "1500\n");
}

#[test]
fn unknown_scenarios_and_busy_directories_fail_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x");
    let out = run(&["no-such-scenario".as_ref(), x.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--list") && !err.contains("backtrace"),
        "{err}"
    );
    std::fs::write(dir.path().join("busy"), "").unwrap();
    let out = run(&["ib8-healthy".as_ref(), dir.path().as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an empty directory"));
}

#[test]
fn without_arguments_it_prints_usage_and_exits_2() {
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--all"));
}
