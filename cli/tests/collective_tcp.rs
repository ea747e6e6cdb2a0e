//! `fabric-check collective` with the TCP backend among four local ranks (loopback), with a
//! private munged: correct data, consistent figures, missing participants named.

mod collective_support;

use std::time::{Duration, Instant};

use assert_cmd::Command;
use collective_support::munged::Munged;
use collective_support::{names, run_ranks, without_node};
use predicates::str::contains;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

fn common(m: &Munged, port_base: u16) -> Vec<String> {
    let mut v = vec![
        "--munge-socket".to_string(),
        m.socket.display().to_string(),
        "--port-base".into(),
        port_base.to_string(),
    ];
    for n in NODES {
        v.push("--addr".into());
        v.push(format!("{n}=127.0.0.1"));
    }
    v
}

#[test]
fn four_local_ranks_print_the_same_correct_report() {
    let Some(m) = Munged::start() else { return };
    let runs = run_ranks(&NODES, &NODES, 3101, &common(&m, 43_000), |_| vec![]);
    let first = &runs[0].report;
    for r in &runs {
        assert_ne!(
            r.code, 3,
            "{} could not run: {} {}",
            r.node, r.report, r.stderr
        );
        assert_eq!(r.report["schema"], "fabric-check/collective/v1");
        assert_eq!(r.report["node"], r.node.as_str());
        assert_eq!(
            without_node(&r.report),
            without_node(first),
            "ranks disagree"
        );
    }
    assert_eq!(first["wrong"], 0);
    assert!(names(&first["missing"]).is_empty());
    let sizes = first["sizes"].as_array().unwrap();
    assert!(
        sizes.len() >= 2,
        "the sweep ran at least two sizes: {first}"
    );
    let mut last_bytes = 0;
    for s in sizes {
        let f = |k: &str| s[k].as_f64().unwrap();
        assert!(f("bytes") as u64 > last_bytes, "sizes run small to large");
        last_bytes = f("bytes") as u64;
        assert!(f("iterations") >= 3.0);
        assert_eq!(f("wrong"), 0.0);
        assert!(f("time_us_min") <= f("time_us_p50"));
        assert!(f("time_us_p50") <= f("time_us_p95"));
        assert!(f("time_us_p95") <= f("time_us_p99"));
        assert!(f("time_us_p99") <= f("time_us_max"));
        // nccl-tests: algbw = S/t, busbw = algbw * 2(n-1)/n.
        let algbw = f("bytes") / (f("time_us_mean") * 1e-6) / 1e9;
        assert!((f("algbw_gb_s") - algbw).abs() <= 1e-9 * algbw.max(1.0));
        assert!((f("busbw_gb_s") - algbw * 1.5).abs() <= 1e-6 * algbw.max(1.0));
    }
    assert_eq!(first["ranks"].as_array().unwrap().len(), 4);
    assert_eq!(first["links"].as_array().unwrap().len(), 4);
    for k in first["ranks"].as_array().unwrap() {
        assert!(
            k["in_link_gb_s"].as_f64().unwrap() > 0.0,
            "every link was probed: {k}"
        );
    }
}

#[test]
fn a_participant_that_never_arrives_is_named_within_the_budget() {
    let Some(m) = Munged::start() else { return };
    let t = Instant::now();
    let mut c = common(&m, 43_100);
    // This test is about who is missing, not who is slow: on one loopback shared with the other
    // tests' ranks, a busy 2-core runner measured one rank's links 40x below the others' and
    // named it a slow node (verdict fail). A factor no loopback noise reaches keeps the slow-node
    // judgement out of it; a very slow link alone still only warns.
    c.extend([
        "--budget-ms".into(),
        "2000".into(),
        "--slow-factor".into(),
        "1000000".into(),
    ]);
    let runs = run_ranks(&NODES, &["n1", "n2", "n4"], 3102, &c, |_| vec![]);
    let took = t.elapsed();
    for r in &runs {
        assert_eq!(
            r.code, 1,
            "{}: warn expected: {} {}",
            r.node, r.report, r.stderr
        );
        assert_eq!(names(&r.report["missing"]), vec!["n3"]);
        assert!(names(&r.report["outliers"]).is_empty(), "{}", r.report);
        assert_eq!(r.report["verdict"], "warn");
        assert_eq!(
            r.report["wrong"], 0,
            "the three present ranks reduce correctly"
        );
    }
    // Bounded, not fast: the whole thing ends within the budget plus process start-up.
    assert!(took < Duration::from_millis(2000 + 1500), "took {took:?}");
}

#[test]
fn followers_without_a_leader_fail_with_error_naming_it() {
    let Some(m) = Munged::start() else { return };
    let mut c = common(&m, 43_200);
    c.extend(["--budget-ms".into(), "1000".into()]);
    let runs = run_ranks(&NODES, &["n2", "n3"], 3103, &c, |_| vec![]);
    for r in &runs {
        assert_eq!(r.code, 3, "{}: {}", r.node, r.report);
        assert_eq!(r.report["verdict"], "error");
        assert_eq!(names(&r.report["missing"]), vec!["n1"]);
        assert!(
            r.report["error"].as_str().unwrap().contains("no leader"),
            "{}",
            r.report
        );
    }
}

#[test]
fn the_table_format_prints_the_sweep_with_nccl_tests_columns() {
    let Some(m) = Munged::start() else { return };
    let runs = run_ranks(&NODES[..2], &NODES[..2], 3104, &common(&m, 43_300), |n| {
        if n == "n1" {
            vec!["--format".into(), "table".into()]
        } else {
            vec![]
        }
    });
    assert_ne!(runs[1].code, 3, "{}", runs[1].stderr);
    assert_eq!(
        runs[0].code, runs[1].code,
        "both ranks reach the same verdict"
    );
    let table = &runs[0].stdout;
    assert!(
        table.starts_with("collective tcp job 3104 on n1 (2 of 2 ranks)"),
        "{table}"
    );
    for col in ["bytes", "p99_us", "algbw", "busbw", "#wrong"] {
        assert!(table.contains(col), "no {col} column: {table}");
    }
    assert!(table.contains("rank   1 n2"), "{table}");
}

fn cli() -> Command {
    let mut c = Command::cargo_bin("fabric-check").unwrap();
    c.arg("collective");
    c
}

#[test]
fn a_node_outside_the_list_is_refused_with_the_list() {
    cli()
        .args(["--nodes", "n[1-3]", "--node", "n9", "--job-id", "1"])
        .assert()
        .code(3)
        .stderr(contains("--node n9 is not in --nodes n[1-3] (n1,n2,n3)"));
}

#[test]
fn a_malformed_addr_is_refused_saying_how_to_write_it() {
    cli()
        .args([
            "--nodes",
            "n1,n2",
            "--node",
            "n1",
            "--job-id",
            "1",
            "--addr",
            "n2:10.0.0.1",
        ])
        .assert()
        .code(3)
        .stderr(contains("write NAME=IP"));
    cli()
        .args([
            "--nodes",
            "n1,n2",
            "--node",
            "n1",
            "--job-id",
            "1",
            "--addr",
            "n2=10.0.0",
        ])
        .assert()
        .code(3)
        .stderr(contains("is not an IP address"));
}

#[test]
fn a_netns_path_is_refused_in_favour_of_a_name() {
    cli()
        .args([
            "--nodes",
            "n1",
            "--node",
            "n1",
            "--job-id",
            "1",
            "--netns",
            "/run/netns/x",
        ])
        .assert()
        .code(3)
        .stderr(contains("takes a namespace name"));
}

#[test]
fn sizes_must_run_from_small_to_large() {
    cli()
        .args([
            "--nodes", "n1", "--node", "n1", "--job-id", "1", "--sizes", "1M,4K",
        ])
        .args(["--addr", "n1=127.0.0.1"])
        .assert()
        .code(3)
        .stderr(contains("small to large"));
}

#[test]
fn an_unclosed_hostlist_is_refused() {
    cli()
        .args(["--nodes", "n[1-4", "--node", "n1", "--job-id", "1"])
        .assert()
        .code(3)
        .stderr(contains("every `[` needs a matching `]`"));
}
