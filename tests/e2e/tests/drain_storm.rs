//! The mass-drain guard in a storm, on the real testbed: slurmctld fans `HealthCheckProgram`
//! out to every node at once, so four health runs on a common fault start together. With
//! `max_drain=1` at most one node may end drained by fabric-check.

use std::time::Duration;

use fabric_e2e::{Testbed, heal_all};

const FOUR: [&str; 4] = ["n1", "n2", "n3", "n4"];

fn drained_by_us(tb: &Testbed) -> Vec<&'static str> {
    FOUR.into_iter()
        .filter(|n| {
            let (st, r) = tb.node_state(n);
            st.starts_with("drain") && r.starts_with("fabric-check:")
        })
        .collect()
}

#[test]
fn four_health_runs_at_once_on_a_common_fault_drain_at_most_one_node_with_max_drain_1() {
    let tb = Testbed::get();
    heal_all(&tb);
    for n in FOUR {
        tb.script(&["node", n, "ib8-port-down"]).unwrap();
    }
    tb.with_plugstack(None, None, "max_drain=1", || {
        let bin = tb.dir.join("bin/fabric-check");
        let plugstack = tb.dir.join("etc/plugstack.conf");
        let runs: Vec<_> = FOUR
            .into_iter()
            .map(|n| {
                let (tb, bin, plugstack) = (tb.clone(), bin.clone(), plugstack.clone());
                std::thread::spawn(move || {
                    let out = tb.cmd(
                        bin.to_str().expect("utf-8 path"),
                        &[
                            "health",
                            "--plugstack",
                            plugstack.to_str().expect("utf-8 path"),
                            "--node",
                            n,
                            "--clean-probes",
                            "3",
                        ],
                    );
                    (n, String::from_utf8_lossy(&out.stdout).into_owned())
                })
            })
            .collect();
        let outputs: Vec<(&str, String)> = runs
            .into_iter()
            .map(|t| t.join().expect("a health run"))
            .collect();
        // Let slurmctld settle any last update before looking.
        std::thread::sleep(Duration::from_secs(2));
        let ours = drained_by_us(&tb);
        assert!(
            ours.len() <= 1,
            "drained by fabric-check: {ours:?}; health said: {outputs:#?}"
        );
        assert!(
            outputs.iter().any(|(_, o)| o.contains("MASS-DRAIN GUARD")),
            "the guard spoke: {outputs:#?}"
        );
    });
}
