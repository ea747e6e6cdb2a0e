//! Degraded links for real: four network namespaces on a bridge (`scripts/netns`), one rank in
//! each (entered with `--netns`), and `tc tbf` on one node's veth. Needs root; fails without it
//! unless `FABRIC_SKIP_NETNS_TESTS=1`. Every test removes its namespaces, even when it fails.

mod collective_support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use collective_support::munged::Munged;
use collective_support::{names, run_ranks};

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

/// These tests judge timing: they run one at a time, so that three tests' twelve ranks do not
/// compete for the same cores and make each other's healthy links look slow.
static SERIAL: Mutex<()> = Mutex::new(());

/// Namespaces `PREFIX-n1..n4` and `PREFIX-hub`, deleted on drop.
struct Testbed {
    prefix: String,
    _serial: MutexGuard<'static, ()>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns")
}

impl Testbed {
    fn up(tag: &str) -> Option<Self> {
        if !nix::unistd::geteuid().is_root() {
            if std::env::var("FABRIC_SKIP_NETNS_TESTS").as_deref() == Ok("1") {
                eprintln!("skipping: not root (FABRIC_SKIP_NETNS_TESTS=1)");
                return None;
            }
            panic!("network-namespace tests need root; set FABRIC_SKIP_NETNS_TESTS=1 to skip");
        }
        let prefix = format!("c{}{tag}", std::process::id() % 100_000);
        let t = Self {
            prefix,
            _serial: SERIAL.lock().unwrap_or_else(|e| e.into_inner()),
        };
        t.netns(&["down"]);
        let out = t.netns(&["up", "4"]);
        assert!(
            out.status.success(),
            "scripts/netns up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(t)
    }

    fn netns(&self, args: &[&str]) -> std::process::Output {
        Command::new(script())
            .args(args)
            .env("FC_NETNS_PREFIX", &self.prefix)
            .output()
            .expect("run scripts/netns")
    }

    fn slow(&self, node: &str, rate: &str) {
        let out = self.netns(&["slow", node, rate]);
        assert!(
            out.status.success(),
            "scripts/netns slow: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn flags(&self, m: &Munged, node: &str) -> Vec<String> {
        let mut v = vec![
            "--munge-socket".to_string(),
            m.socket.display().to_string(),
            "--netns".into(),
            format!("{}-{node}", self.prefix),
        ];
        for (i, n) in NODES.iter().enumerate() {
            v.push("--addr".into());
            v.push(format!("{n}=10.77.0.{}", i + 1));
        }
        v
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.netns(&["down"]);
    }
}

#[test]
fn the_throttled_node_is_named_in_ten_of_ten_runs_and_never_a_healthy_one() {
    let Some(m) = Munged::start() else { return };
    let Some(tb) = Testbed::up("s") else { return };
    tb.slow("n3", "100mbit");
    for run in 0..10u64 {
        let runs = run_ranks(&NODES, &NODES, 4200 + run, &[], |n| tb.flags(&m, n));
        for r in &runs {
            assert_eq!(
                names(&r.report["outliers"]),
                vec!["n3"],
                "run {run}, {}: {} {}",
                r.node,
                r.report,
                r.stderr
            );
            assert_eq!(r.report["verdict"], "fail");
            assert_eq!(r.code, 2);
            assert_eq!(r.report["wrong"], 0, "slow is not wrong");
        }
    }
}

#[test]
fn a_healthy_ring_of_namespaces_names_no_node() {
    let Some(m) = Munged::start() else { return };
    let Some(tb) = Testbed::up("h") else { return };
    for run in 0..3u64 {
        let runs = run_ranks(&NODES, &NODES, 4300 + run, &[], |n| tb.flags(&m, n));
        for r in &runs {
            assert!(
                names(&r.report["outliers"]).is_empty(),
                "run {run}: {}",
                r.report
            );
            assert_eq!(r.report["wrong"], 0);
            assert_ne!(r.code, 3, "{}", r.stderr);
        }
    }
}

#[test]
fn a_node_that_never_arrives_is_named_within_the_budget() {
    let Some(m) = Munged::start() else { return };
    let Some(tb) = Testbed::up("m") else { return };
    let t = Instant::now();
    let runs = run_ranks(&NODES, &["n1", "n2", "n4"], 4400, &[], |n| tb.flags(&m, n));
    let took = t.elapsed();
    for r in &runs {
        assert_eq!(
            names(&r.report["missing"]),
            vec!["n3"],
            "{}: {}",
            r.node,
            r.report
        );
        assert_eq!(r.report["verdict"], "warn");
    }
    assert!(took < Duration::from_millis(3000 + 1500), "took {took:?}");
}
