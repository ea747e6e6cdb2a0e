//! `--fabric-check=full`: the cross-node collective in the prolog, among the job's nodes, over
//! the testbed's network namespaces (one per virtual node, `scripts/netns`).

use std::time::Duration;

use fabric_e2e::{Testbed, heal_all, wait_job_end, wait_tag};

/// `scripts/netns` on this testbed's own namespaces (`scripts/testbed netns`: each checkout's
/// testbed has its own prefix).
fn netns(tb: &Testbed, args: &[&str]) {
    let mut words = vec!["netns"];
    words.extend_from_slice(args);
    tb.script(&words)
        .unwrap_or_else(|e| panic!("scripts/testbed netns {args:?}: {e:#}"));
}

#[test]
fn a_full_check_tags_the_collective_figures_of_a_healthy_ring() {
    let tb = Testbed::get();
    heal_all(&tb);
    let job = tb.sbatch_wait(&["-N4", "--fabric-check=full", "--wrap", "true"]);
    let tag = wait_tag(&tb, job, Duration::from_secs(60), |t| {
        t["collective"].is_object()
    })
    .expect("tag");
    assert_eq!(tag["mode"], "full", "{tag}");
    assert_eq!(tag["collective"]["verdict"], "pass", "{tag}");
    assert_eq!(tag["collective"]["wrong"], 0, "{tag}");
    assert!(
        tag["collective"]["busbw_gb_s"].as_f64().unwrap_or(0.0) > 0.0,
        "{tag}"
    );
    assert!(tag["collective"].get("outliers").is_none(), "{tag}");
}

#[test]
fn a_node_slowed_with_tbf_is_named_drained_and_the_job_completes_elsewhere() {
    let tb = Testbed::get();
    heal_all(&tb);
    netns(&tb, &["slow", "n3", "100mbit"]);
    // Restores n3's link when the test ends, also by a panic.
    struct Fast<'a>(&'a Testbed);
    impl Drop for Fast<'_> {
        fn drop(&mut self) {
            netns(self.0, &["fast", "n3"]);
        }
    }
    let _fast = Fast(&tb);
    tb.healing(|| {
        let job = tb.sbatch(&["-N3", "--fabric-check=full", "--wrap", "true"]);
        let state = wait_job_end(&tb, job, Duration::from_secs(300));
        assert_eq!(state.as_deref(), Some("COMPLETED"));
        let (st, reason) = tb.node_state("n3");
        assert!(st.starts_with("drain"), "n3 is {st}");
        assert!(
            reason.starts_with("fabric-check: collective.slow_node:"),
            "{reason}"
        );
        for healthy in ["n1", "n2", "n4"] {
            assert!(
                !tb.node_state(healthy).0.starts_with("drain"),
                "{healthy} drained"
            );
        }
        let tag = wait_tag(&tb, job, Duration::from_secs(60), |t| {
            t["earlier"]["n3"].is_object()
        })
        .expect("tag");
        let checks = tag["earlier"]["n3"]["checks"].to_string();
        assert!(checks.contains("collective.slow_node"), "{tag}");
        assert_eq!(tag["earlier"]["n3"]["drained"], true, "{tag}");
    });
}
