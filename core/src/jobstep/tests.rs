//! The job step on the fakes: no Slurm, no probe binary, no network.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::jobstep::payload::PrologPayload;
use crate::jobstep::{ProbeRunError, epilog, health, prolog};
use crate::probe::Report;
use crate::testing::{
    Call, FakeMeet, FakeRunner, FakeSlurm, Lines, NodesAnswer, drained_by_us, report, seams, setup,
    step,
};
use fabric_proto::invocation::{JobStepExit, Script};
use fabric_proto::tag::{self, JobTag, NodeResult, Verdict};

const FOUR: &[&str] = &["n1", "n2", "n3", "n4"];

fn tag_of(slurm: &FakeSlurm) -> JobTag {
    tag::extract(&slurm.current_comment())
        .expect("a fabric-check tag in AdminComment")
        .expect("a readable tag")
}

fn drains(slurm: &FakeSlurm) -> usize {
    slurm
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Drain { .. }))
        .count()
}

/// Runs the prolog of a one-node job on n1 (of a four-node cluster) with these plugin words.
fn prolog_on_n1(
    slurm: &FakeSlurm,
    runner: &FakeRunner,
    words: &[&str],
) -> (JobStepExit, Lines, Duration) {
    let dir = tempfile::tempdir().unwrap();
    prolog_on_n1_in(dir.path(), slurm, runner, words)
}

/// [`prolog_on_n1`] with the node's state in `dir` (for an epilog to find).
fn prolog_on_n1_in(
    dir: &std::path::Path,
    slurm: &FakeSlurm,
    runner: &FakeRunner,
    words: &[&str],
) -> (JobStepExit, Lines, Duration) {
    let s = setup(dir, Script::Prolog, "n1", "n1", words);
    let meet = FakeMeet::default();
    let lines = Lines::default();
    let t0 = Instant::now();
    let exit = prolog::run(&step(&s, seams(slurm, runner, &meet, &lines)));
    (exit, lines, t0.elapsed())
}

fn answering(r: Report) -> FakeRunner {
    FakeRunner::answering(vec![Ok(r)])
}

mod prolog_policy {
    use super::*;

    #[test]
    fn a_fail_verdict_under_enforce_drains_the_node_tags_it_drained_and_fails_the_prolog() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, lines, _) = prolog_on_n1(&slurm, &runner, &["policy=enforce"]);
        assert_eq!(exit, JobStepExit::Drained);
        let n1 = slurm.node("n1").unwrap();
        assert!(n1.is_drained(), "{n1:?}");
        assert_eq!(
            n1.reason,
            "fabric-check: ib.port_state: mlx5_3 port 1 is DOWN"
        );
        let t = tag_of(&slurm);
        assert_eq!(t.verdict, Some(Verdict::Fail));
        assert!(t.nodes["n1"].drained);
        assert_eq!(t.nodes["n1"].checks, vec!["ib.port_state".to_owned()]);
        assert!(lines.has("fabric-check-exit=2"), "{}", lines.text());
    }

    #[test]
    fn a_fail_verdict_under_warn_tags_the_job_and_drains_nothing() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, lines, _) = prolog_on_n1(&slurm, &runner, &["policy=warn"]);
        assert_eq!(exit, JobStepExit::Proceed);
        assert_eq!(drains(&slurm), 0);
        let t = tag_of(&slurm);
        assert_eq!(t.verdict, Some(Verdict::Fail));
        assert!(!t.nodes["n1"].drained);
        assert!(lines.has("fabric-check-exit=0"), "{}", lines.text());
    }

    #[test]
    fn a_fail_verdict_under_observe_only_logs() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, lines, _) = prolog_on_n1(&slurm, &runner, &["policy=observe"]);
        assert_eq!(exit, JobStepExit::Proceed);
        assert_eq!(slurm.calls(), vec![], "observe touches nothing in Slurm");
        assert!(
            lines.has("probe verdict fail on n1 (ib.port_state)"),
            "{}",
            lines.text()
        );
    }

    #[test]
    fn a_fail_verdict_under_enforce_with_dry_run_says_what_it_would_drain() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, lines, _) = prolog_on_n1(&slurm, &runner, &["policy=enforce", "dry_run=true"]);
        assert_eq!(exit, JobStepExit::Proceed);
        assert_eq!(drains(&slurm), 0);
        assert!(lines.has("dry run: would drain n1"), "{}", lines.text());
    }

    #[test]
    fn a_warn_verdict_under_enforce_is_tagged_and_not_drained() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Warn));
        let (exit, _, _) = prolog_on_n1(&slurm, &runner, &["policy=enforce"]);
        assert_eq!(exit, JobStepExit::Proceed);
        assert_eq!(drains(&slurm), 0);
        assert_eq!(tag_of(&slurm).nodes["n1"].checks, vec!["ib.mtu".to_owned()]);
    }

    #[test]
    fn the_mass_drain_guard_refuses_a_drain_past_its_limit() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        slurm.set_node(drained_by_us("n2", "2026-12-01T09:00:00"));
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, lines, _) = prolog_on_n1(&slurm, &runner, &["max_drain=1"]);
        assert_eq!(exit, JobStepExit::Proceed);
        assert_eq!(drains(&slurm), 0);
        assert!(lines.has("MASS-DRAIN GUARD: 1 node(s)"), "{}", lines.text());
    }
}

mod prolog_probe_errors {
    use super::*;

    fn check_error(
        answer: Result<Report, ProbeRunError>,
        delay: Duration,
        check: &str,
        note: &str,
    ) {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = FakeRunner::answering(vec![answer]).slow(delay);
        let (exit, _, _) = prolog_on_n1(&slurm, &runner, &["policy=enforce", "timeout=2"]);
        assert_eq!(
            exit,
            JobStepExit::Proceed,
            "a probe that cannot look drains nothing"
        );
        assert_eq!(drains(&slurm), 0);
        let t = tag_of(&slurm);
        assert_eq!(t.verdict, Some(Verdict::Error));
        assert_eq!(t.nodes["n1"].checks, vec![check.to_owned()]);
        assert!(
            t.notes
                .iter()
                .any(|n| n.starts_with("n1: ") && n.contains(note)),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn a_probe_that_times_out_is_tagged_probe_timeout_and_drains_nothing() {
        check_error(
            Ok(report("n1", Verdict::Pass)),
            Duration::from_secs(30),
            "probe.timeout",
            "probe timed out after 800 ms",
        );
    }

    #[test]
    fn a_probe_that_crashes_is_tagged_probe_error_and_drains_nothing() {
        let crash = ProbeRunError::Crashed {
            what: "probe",
            code: 139,
            stderr: String::new(),
        };
        check_error(
            Err(crash),
            Duration::ZERO,
            "probe.error",
            "probe crashed (exit 139)",
        );
    }

    #[test]
    fn a_probe_that_prints_no_json_is_tagged_probe_error_and_drains_nothing() {
        let none = ProbeRunError::NoDocument {
            what: "probe",
            code: 3,
            reason: "expected value at line 1 column 1".into(),
            stderr: String::new(),
        };
        check_error(
            Err(none),
            Duration::ZERO,
            "probe.error",
            "gave no probe document",
        );
    }

    #[test]
    fn with_drain_on_error_a_probe_error_drains_under_enforce() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = FakeRunner::answering(vec![Err(ProbeRunError::CannotRun {
            what: "probe",
            reason: "no such file".into(),
        })]);
        let (exit, _, _) =
            prolog_on_n1(&slurm, &runner, &["policy=enforce", "drain_on_error=true"]);
        assert_eq!(exit, JobStepExit::Drained);
        assert!(
            slurm
                .node("n1")
                .unwrap()
                .reason
                .starts_with("fabric-check: probe.error:")
        );
    }
}

mod prolog_deadline {
    use super::*;

    #[test]
    fn a_slurm_that_hangs_cannot_hold_the_prolog_past_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), Script::Prolog, "n1", "n1", &["timeout=2"]);
        let slurm = FakeSlurm::with_nodes(FOUR).slow(Duration::from_secs(60), s.deadline);
        let runner = answering(report("n1", Verdict::Fail));
        let meet = FakeMeet::default();
        let lines = Lines::default();
        let t0 = Instant::now();
        let exit = prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        let took = t0.elapsed();
        // The plugin kills the child at timeout=2 s; the deadline keeps a margin before that.
        assert!(took < Duration::from_millis(1950), "took {took:?}");
        assert_eq!(exit, JobStepExit::Proceed, "{}", lines.text());
        assert!(
            lines.has("cannot read node states, not draining"),
            "{}",
            lines.text()
        );
        assert!(lines.has("tag not written") || lines.has("AdminComment, tag not written"));
        assert!(lines.has("fabric-check-exit=0"));
    }

    #[test]
    fn every_phase_draws_from_one_deadline_and_says_what_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), Script::Prolog, "n[1-2]", "n1", &["timeout=10"]);
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Pass));
        let meet = FakeMeet::default();
        let lines = Lines::default();
        prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        let (_, probe_limit) = runner.probes.borrow()[0].clone();
        assert_eq!(
            probe_limit,
            Duration::from_secs(4),
            "two fifths of timeout="
        );
        let (req, _) = meet.sent.borrow()[0].clone();
        assert_eq!(req.deadline, s.deadline.at());
        assert!(req.timeout <= Duration::from_secs(8), "{:?}", req.timeout);
        for phase in ["probe verdict", "rendezvous:", "tagged job 7", "timing:"] {
            let line = lines.text();
            let l = line
                .lines()
                .find(|l| l.starts_with(phase))
                .unwrap_or_else(|| panic!("no {phase} line in {line}"));
            assert!(l.ends_with(" ms left"), "{l}");
        }
    }
}

mod prolog_drain_and_settle {
    use super::*;

    #[test]
    fn a_drain_that_slurmctld_applied_but_whose_client_timed_out_counts_and_is_settled() {
        let slurm = FakeSlurm::with_nodes(FOUR).drain_applies_but_times_out();
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, lines, _) = prolog_on_n1(&slurm, &runner, &["max_drain=2"]);
        assert_eq!(exit, JobStepExit::Drained, "{}", lines.text());
        assert!(lines.has("but slurmctld applied it"), "{}", lines.text());
        let calls = slurm.calls();
        let drain_at = calls
            .iter()
            .position(|c| matches!(c, Call::Drain { .. }))
            .unwrap();
        let after: Vec<&Call> = calls[drain_at + 1..]
            .iter()
            .filter(|c| **c == Call::Nodes)
            .collect();
        assert_eq!(after.len(), 1, "the settle re-check: {calls:?}");
        assert!(tag_of(&slurm).nodes["n1"].drained);
    }

    #[test]
    fn a_drain_that_slurmctld_did_not_apply_is_not_counted() {
        let slurm = FakeSlurm::with_nodes(FOUR).failing("drain");
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, lines, _) = prolog_on_n1(&slurm, &runner, &[]);
        assert_eq!(exit, JobStepExit::Proceed);
        assert!(lines.has("drain of n1 failed"), "{}", lines.text());
        assert!(!tag_of(&slurm).nodes["n1"].drained);
    }

    #[test]
    fn a_settle_recheck_that_finds_two_others_drained_earlier_undoes_our_drain() {
        let slurm = FakeSlurm::with_nodes(FOUR).answer_nodes_call(
            1,
            NodesAnswer::Nodes(vec![
                drained_by_us("n1", "2026-12-01T10:00:05"),
                drained_by_us("n2", "2026-12-01T10:00:01"),
                drained_by_us("n3", "2026-12-01T10:00:02"),
                crate::testing::idle("n4"),
            ]),
        );
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, lines, _) = prolog_on_n1(&slurm, &runner, &["max_drain=2"]);
        assert_eq!(exit, JobStepExit::Proceed, "{}", lines.text());
        assert!(slurm.calls().contains(&Call::Resume("n1".into())));
        assert!(!slurm.node("n1").unwrap().is_drained());
        assert!(
            lines.has("MASS-DRAIN GUARD: concurrent drains went past the limit of 2; resuming n1"),
            "{}",
            lines.text()
        );
        assert!(!tag_of(&slurm).nodes["n1"].drained);
    }

    #[test]
    fn a_settle_recheck_that_finds_itself_among_the_earliest_keeps_the_drain() {
        let slurm = FakeSlurm::with_nodes(FOUR).answer_nodes_call(
            1,
            NodesAnswer::Nodes(vec![
                drained_by_us("n1", "2026-12-01T10:00:01"),
                drained_by_us("n2", "2026-12-01T10:00:05"),
                drained_by_us("n3", "2026-12-01T10:00:06"),
                crate::testing::idle("n4"),
            ]),
        );
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, _, _) = prolog_on_n1(&slurm, &runner, &["max_drain=2"]);
        assert_eq!(exit, JobStepExit::Drained);
        assert!(!slurm.calls().iter().any(|c| matches!(c, Call::Resume(_))));
    }

    #[test]
    fn a_settle_recheck_that_fails_undoes_the_drain_and_says_so() {
        let slurm = FakeSlurm::with_nodes(FOUR).answer_nodes_call(
            1,
            NodesAnswer::Fail("Unable to contact slurm controller".into()),
        );
        let runner = answering(report("n1", Verdict::Fail));
        let (exit, lines, _) = prolog_on_n1(&slurm, &runner, &["max_drain=2"]);
        assert_eq!(exit, JobStepExit::Proceed, "{}", lines.text());
        assert!(
            lines.has("cannot re-check node states after draining n1"),
            "{}",
            lines.text()
        );
        assert!(slurm.calls().contains(&Call::Resume("n1".into())));
        assert!(!slurm.node("n1").unwrap().is_drained());
    }
}

mod prolog_tag {
    use super::*;

    fn payload(verdict: Verdict) -> serde_json::Value {
        serde_json::to_value(PrologPayload {
            result: NodeResult {
                verdict,
                checks: vec![],
                probe_ms: Some(3),
                drained: false,
            },
            notes: vec![],
            collective: None,
            fingerprint: None,
        })
        .unwrap()
    }

    fn lead(slurm: &FakeSlurm, meet: &FakeMeet) -> Lines {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), Script::Prolog, "n[1-3]", "n1", &[]);
        let runner = answering(report("n1", Verdict::Pass));
        let lines = Lines::default();
        prolog::run(&step(&s, seams(slurm, &runner, meet, &lines)));
        lines
    }

    #[test]
    fn the_leaders_tag_without_earlier_attempts_holds_every_nodes_verdict() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let meet = FakeMeet {
            peers: [
                ("n2".to_owned(), payload(Verdict::Pass)),
                ("n3".to_owned(), payload(Verdict::Pass)),
            ]
            .into(),
            ..FakeMeet::default()
        };
        lead(&slurm, &meet);
        let t = tag_of(&slurm);
        assert_eq!(t.verdict, Some(Verdict::Pass));
        assert_eq!(t.nnodes, 3);
        assert_eq!(t.nodes.len(), 3);
        assert!(t.earlier.is_empty());
        assert!(t.missing.is_empty());
        assert!(slurm.current_comment().starts_with("fabric-check/v1 {"));
    }

    /// Eight MT4129 InfiniBand rails at `rate_gbps`, as a probe's inventory.
    fn rails(rate_gbps: f64) -> crate::probe::Inventory {
        use crate::probe::{Inventory, InventoryDevice, InventoryPort};
        Inventory {
            devices: (0..8)
                .map(|i| InventoryDevice {
                    name: format!("mlx5_{i}"),
                    hca_type: Some("MT4129".into()),
                    fw_ver: Some("28.39.1002".into()),
                    ports: vec![InventoryPort {
                        port: 1,
                        state: Some("ACTIVE".into()),
                        rate_gbps: Some(rate_gbps),
                        link_layer: Some("InfiniBand".into()),
                        ..InventoryPort::default()
                    }],
                    ..InventoryDevice::default()
                })
                .collect(),
            ..Inventory::default()
        }
    }

    fn payload_of(rate_gbps: f64) -> serde_json::Value {
        let mut p: PrologPayload = serde_json::from_value(payload(Verdict::Pass)).unwrap();
        p.fingerprint = Some(crate::jobstep::job_peers::Fingerprint::of(&rails(
            rate_gbps,
        )));
        serde_json::to_value(p).unwrap()
    }

    #[test]
    fn a_node_whose_rails_all_trained_at_half_rate_is_named_unlike_the_jobs_others_and_not_drained()
    {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let meet = FakeMeet {
            peers: [
                ("n2".to_owned(), payload_of(400.0)),
                ("n3".to_owned(), payload_of(400.0)),
                ("n4".to_owned(), payload_of(200.0)),
            ]
            .into(),
            ..FakeMeet::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), Script::Prolog, "n[1-4]", "n1", &[]);
        let mut own = report("n1", Verdict::Pass);
        own.inventory = rails(400.0);
        let runner = answering(own);
        let lines = Lines::default();
        prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        let t = tag_of(&slurm);
        assert_eq!(t.nodes["n4"].verdict, Verdict::Warn, "{t:?}");
        assert_eq!(t.nodes["n4"].checks, ["job.peer_parity"]);
        assert_eq!(t.nodes["n1"].verdict, Verdict::Pass);
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("n4 is unlike") && n.contains("rate 200 Gb/s")),
            "{:?}",
            t.notes
        );
        assert_eq!(drains(&slurm), 0);
    }

    #[test]
    fn the_leaders_tag_after_an_earlier_attempt_keeps_its_failing_node_and_foreign_content() {
        let mut first = BTreeMapNodes::new();
        first.insert(
            "n4".to_owned(),
            NodeResult {
                verdict: Verdict::Fail,
                checks: vec!["ib.port_state".into()],
                probe_ms: Some(2),
                drained: true,
            },
        );
        let earlier = crate::jobstep::prolog_tag(None, "quick", 1, first, vec![], vec![]);
        let comment = format!("JS1:abc {}", tag::splice("", &earlier));
        let slurm = FakeSlurm::with_nodes(FOUR).comment(&comment);
        let meet = FakeMeet {
            peers: [
                ("n2".to_owned(), payload(Verdict::Pass)),
                ("n3".to_owned(), payload(Verdict::Pass)),
            ]
            .into(),
            ..FakeMeet::default()
        };
        lead(&slurm, &meet);
        let t = tag_of(&slurm);
        assert_eq!(t.verdict, Some(Verdict::Pass));
        assert!(t.earlier["n4"].drained, "{t:?}");
        assert_eq!(t.earlier["n4"].verdict, Verdict::Fail);
        assert!(
            slurm
                .current_comment()
                .starts_with("JS1:abc fabric-check/v1 {")
        );
    }

    type BTreeMapNodes = std::collections::BTreeMap<String, NodeResult>;

    #[test]
    fn a_payload_that_does_not_decode_is_logged_and_counted_as_missing() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let meet = FakeMeet {
            peers: [
                ("n2".to_owned(), payload(Verdict::Pass)),
                ("n3".to_owned(), json!({"result": "pass"})),
            ]
            .into(),
            ..FakeMeet::default()
        };
        let lines = lead(&slurm, &meet);
        assert!(
            lines.has("the payload of n3 could not be read"),
            "{}",
            lines.text()
        );
        assert!(lines.has("1 unreadable"), "{}", lines.text());
        let t = tag_of(&slurm);
        assert_eq!(t.missing, vec!["n3".to_owned()]);
        assert_eq!(t.verdict, Some(Verdict::Error));
        assert!(
            t.notes
                .iter()
                .any(|n| n.starts_with("n3: its verdict reached")),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn a_node_that_never_joined_is_named_missing() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let meet = FakeMeet {
            peers: [("n2".to_owned(), payload(Verdict::Pass))].into(),
            ..FakeMeet::default()
        };
        lead(&slurm, &meet);
        let t = tag_of(&slurm);
        assert_eq!(t.missing, vec!["n3".to_owned()]);
        assert!(
            t.notes
                .iter()
                .any(|n| n == "n3: no verdict reached the first node in time")
        );
    }

    #[test]
    fn a_follower_sends_its_verdict_and_writes_no_tag() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), Script::Prolog, "n[1-3]", "n2", &[]);
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n2", Verdict::Warn));
        let meet = FakeMeet::default();
        let lines = Lines::default();
        prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        let sent = meet.sent.borrow();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0.rank, 1);
        let p: PrologPayload = serde_json::from_value(sent[0].1.clone()).unwrap();
        assert_eq!(p.result.verdict, Verdict::Warn);
        assert!(!slurm.calls().contains(&Call::AdminComment));
    }

    /// A node's prolog can still be looking for its leader when the job's epilog starts (the
    /// prolog's leader found no free port, the job ended): the two meet apart, so the epilog's
    /// leader never takes a prolog's verdict for that node's epilog.
    #[test]
    fn the_prolog_and_the_epilog_of_one_job_meet_at_meetings_of_their_own() {
        use crate::jobstep::meet::{Meeting, meeting_id};
        let dir = tempfile::tempdir().unwrap();
        let slurm = FakeSlurm::with_nodes(FOUR);
        let lines = Lines::default();
        let mut met = Vec::new();
        for script in [Script::Prolog, Script::Epilog] {
            let s = setup(dir.path(), script, "n[1-2]", "n2", &[]);
            let runner = answering(report("n2", Verdict::Pass));
            let meet = FakeMeet::default();
            match script {
                Script::Prolog => prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines))),
                _ => epilog::run(&step(&s, seams(&slurm, &runner, &meet, &lines))),
            };
            let sent = meet.sent.borrow();
            let (req, _) = sent.last().expect("n2 meets its first node");
            met.push(req.meeting);
        }
        assert_eq!(met, [Meeting::Prolog, Meeting::Epilog]);
        assert_ne!(
            meeting_id(7, Meeting::Prolog),
            meeting_id(7, Meeting::Epilog)
        );
    }

    /// The Slurm calls of a passing prolog on `node` of a job on `list` whose other nodes all pass.
    fn passing_prolog_calls(list: &str, node: &str) -> Vec<Call> {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), Script::Prolog, list, node, &[]);
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report(node, Verdict::Pass));
        let peers = s
            .nodes
            .iter()
            .filter(|n| *n != node)
            .map(|n| (n.clone(), payload(Verdict::Pass)))
            .collect();
        let meet = FakeMeet {
            peers,
            ..FakeMeet::default()
        };
        let lines = Lines::default();
        let exit = prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        assert_eq!(exit, JobStepExit::Proceed, "{}", lines.text());
        slurm.calls()
    }

    #[test]
    fn a_passing_follower_calls_slurm_not_at_all_whatever_the_jobs_size() {
        assert_eq!(passing_prolog_calls("n[1-4]", "n2"), vec![]);
        assert_eq!(passing_prolog_calls("n[1-1024]", "n777"), vec![]);
    }

    #[test]
    fn a_passing_leader_reads_and_writes_the_tag_and_nothing_more_whatever_the_jobs_size() {
        let at_4 = passing_prolog_calls("n[1-4]", "n1");
        assert!(
            matches!(
                at_4.as_slice(),
                [Call::AdminComment, Call::SetAdminComment(_)]
            ),
            "{at_4:?}"
        );
        let at_1024 = passing_prolog_calls("n[1-1024]", "n1");
        assert!(
            matches!(
                at_1024.as_slice(),
                [Call::AdminComment, Call::SetAdminComment(_)]
            ),
            "{at_1024:?}"
        );
    }

    #[test]
    fn a_finished_jobs_tag_goes_to_the_database_in_lower_case() {
        let slurm = FakeSlurm::with_nodes(FOUR).job_finished();
        let meet = FakeMeet {
            peers: [
                ("n2".to_owned(), payload(Verdict::Pass)),
                ("n3".to_owned(), payload(Verdict::Pass)),
            ]
            .into(),
            ..FakeMeet::default()
        };
        lead(&slurm, &meet);
        assert!(slurm.calls().iter().any(|c| matches!(
            c,
            Call::SetAdminCommentDb(t) if t.starts_with("fabric-check/v1 b32:")
        )));
        assert_eq!(tag_of(&slurm).verdict, Some(Verdict::Pass));
    }
}

mod tag_writes {
    use super::*;
    use crate::jobstep::tag_write::{TagWrite, write_tag};

    fn write(slurm: &FakeSlurm, tag: &JobTag) -> (TagWrite, Lines) {
        let dir = tempfile::tempdir().unwrap();
        write_in(dir.path(), slurm, tag)
    }

    /// [`write`] with the node's state (its ledger) in `dir`.
    fn write_in(dir: &std::path::Path, slurm: &FakeSlurm, tag: &JobTag) -> (TagWrite, Lines) {
        let s = setup(dir, Script::Epilog, "n1", "n1", &[]);
        let (runner, meet, lines) = (
            answering(report("n1", Verdict::Pass)),
            FakeMeet::default(),
            Lines::default(),
        );
        let written = write_tag(&step(&s, seams(slurm, &runner, &meet, &lines)), |_| {
            tag.clone()
        });
        (written, lines)
    }

    #[test]
    fn every_tag_write_is_recorded_in_the_node_ledger_live_or_database() {
        let dir = tempfile::tempdir().unwrap();
        let tag = noted();
        let live = FakeSlurm::with_nodes(&["n1"]).job_named("8_3");
        write_in(dir.path(), &live, &tag);
        let ended = FakeSlurm::with_nodes(&["n1"])
            .job_named("8_3")
            .job_finished();
        write_in(dir.path(), &ended, &tag);
        let state_dir = setup(dir.path(), Script::Epilog, "n1", "n1", &[]).state_dir;
        let ledger = crate::tag_ledger::entries(&state_dir).unwrap();
        let forms: Vec<(&str, &str, &str)> = ledger
            .iter()
            .map(|w| (w.job.as_str(), w.form.as_str(), w.verdict.as_str()))
            .collect();
        assert_eq!(
            forms,
            [("8_3", "live", "fail"), ("8_3", "database", "fail")]
        );
        assert!(ledger.iter().all(|w| w.bytes > 20 && w.at_s > 0));
    }

    /// A tag with upper-case node names and a note holding both quotes (a probe panic's).
    fn noted() -> JobTag {
        let mut t = JobTag {
            nnodes: 2,
            nodes: [
                (
                    "GPU-A1".to_owned(),
                    NodeResult {
                        verdict: Verdict::Fail,
                        checks: vec!["ib.port_state".into()],
                        probe_ms: Some(4),
                        drained: true,
                    },
                ),
                (
                    "GPU-B2".to_owned(),
                    NodeResult {
                        verdict: Verdict::Pass,
                        checks: vec![],
                        probe_ms: Some(3),
                        drained: false,
                    },
                ),
            ]
            .into(),
            notes: vec!["GPU-A1: probe panicked: thread 'main' at \"No Port\"".into()],
            ..JobTag::default()
        };
        t.recount();
        t
    }

    #[test]
    fn a_note_with_both_quotes_round_trips_through_the_sacctmgr_of_22_05_in_original_case() {
        for slurm in [
            FakeSlurm::with_nodes(FOUR)
                .job_finished()
                .comment("js1:abc"),
            FakeSlurm::with_nodes(FOUR)
                .job_finished()
                .comment("JS1:Abc")
                .sacctmgr_of_22_05(),
        ] {
            let lowercases = slurm.current_comment() == "JS1:Abc";
            let (written, lines) = write(&slurm, &noted());
            if lowercases {
                // Upper case in another tool's content would be lost: refused, and said.
                assert_eq!(written, TagWrite::NotWritten);
                assert!(lines.has("lower-case or unquote"), "{lines:?}");
                continue;
            }
            assert_eq!(written, TagWrite::Database);
            assert_eq!(tag_of(&slurm), noted());
        }
        let slurm = FakeSlurm::with_nodes(FOUR)
            .job_finished()
            .comment("js1:abc")
            .sacctmgr_of_22_05();
        assert_eq!(write(&slurm, &noted()).0, TagWrite::Database);
        let stored = slurm.current_comment();
        assert!(
            stored.starts_with("js1:abc fabric-check/v1 b32:"),
            "{stored}"
        );
        assert_eq!(
            tag_of(&slurm),
            noted(),
            "original case and quotes, through lower-casing"
        );
    }

    #[test]
    fn a_finished_jobs_tag_is_not_written_over_another_tools_quotes() {
        let slurm = FakeSlurm::with_nodes(FOUR)
            .job_finished()
            .comment("other:'q'");
        assert_eq!(write(&slurm, &noted()).0, TagWrite::NotWritten);
        assert_eq!(slurm.current_comment(), "other:'q'");
    }

    #[test]
    fn the_live_tag_is_json_a_standard_parser_reads_to_the_tag_written() {
        let slurm = FakeSlurm::with_nodes(FOUR).comment("JS1:Abc");
        assert_eq!(write(&slurm, &noted()).0, TagWrite::Live);
        let stored = slurm.current_comment();
        let json = stored
            .strip_prefix("JS1:Abc fabric-check/v1 ")
            .expect("our segment after theirs");
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::from_value::<JobTag>(value).unwrap(), noted());
    }

    #[test]
    fn an_array_task_and_a_het_component_are_written_by_their_exact_names() {
        for name in ["8_3", "9+0"] {
            let live = FakeSlurm::with_nodes(FOUR).job_named(name);
            write(&live, &noted());
            let done = FakeSlurm::with_nodes(FOUR).job_named(name).job_finished();
            write(&done, &noted());
            assert_eq!(live.written_to(), [name]);
            assert_eq!(done.written_to(), [name]);
        }
    }
}

mod epilog_runs {
    use super::*;
    use std::io::Write;

    pub(super) fn epilog_on_n1(
        dir: &std::path::Path,
        slurm: &FakeSlurm,
        runner: &FakeRunner,
        words: &[&str],
    ) -> Lines {
        let s = setup(dir, Script::Epilog, "n1", "n1", words);
        // The prolog's snapshot: the probe document it saved.
        let snap = s.state_dir.join("job-7.json");
        std::fs::write(
            &snap,
            serde_json::to_vec(&report("n1", Verdict::Pass)).unwrap(),
        )
        .unwrap();
        let meet = FakeMeet::default();
        let lines = Lines::default();
        let exit = epilog::run(&step(&s, seams(slurm, runner, &meet, &lines)));
        assert_eq!(exit, JobStepExit::Proceed);
        assert!(!snap.exists(), "the snapshot is removed");
        lines
    }

    #[test]
    fn an_epilog_without_records_or_rises_leaves_the_tag_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let slurm = FakeSlurm::with_nodes(FOUR).comment("fabric-check/v1 {}");
        let runner = answering(report("n1", Verdict::Pass));
        let lines = epilog_on_n1(dir.path(), &slurm, &runner, &[]);
        assert!(lines.has("no counter rose and no fabric-run records; tag unchanged"));
        assert!(
            !slurm
                .calls()
                .iter()
                .any(|c| matches!(c, Call::SetAdminComment(_) | Call::AdminComment))
        );
    }

    #[test]
    fn an_epilog_with_records_puts_the_run_summary_into_the_tag_and_removes_them() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("spool/7");
        std::fs::create_dir_all(&spool).unwrap();
        let path = spool.join("n1.jsonl");
        let mut f = std::fs::File::create(&path).unwrap();
        let meta =
            r#""v":1,"run":"a","node":"n1","rank":0,"job_id":"7","step_id":"0","restart_count":0"#;
        for (ts, body) in [
            (10.0, r#""type":"step_start","pid":1,"cmd":["train"]"#),
            (11.0, r#""type":"step","duration_s":1.0"#),
            (12.0, r#""type":"step","duration_s":1.5"#),
            (
                13.0,
                r#""type":"step_end","duration_s":3.0,"exit_code":0,"signal":null,"outcome":"completed","attempts":1,"on_time":true"#,
            ),
        ] {
            writeln!(f, "{{\"ts\":{ts},{meta},{body}}}").unwrap();
        }
        drop(f);
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Pass));
        let lines = epilog_on_n1(dir.path(), &slurm, &runner, &[]);
        let t = tag_of(&slurm);
        assert!(t.run.is_some(), "{t:?} / {}", lines.text());
        assert!(!path.exists(), "the records are removed once read");
    }

    #[test]
    fn an_epilog_whose_probe_fails_drains_the_node_naming_the_job() {
        let dir = tempfile::tempdir().unwrap();
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Fail));
        epilog_on_n1(dir.path(), &slurm, &runner, &["policy=enforce"]);
        let n1 = slurm.node("n1").unwrap();
        assert!(n1.is_drained());
        assert!(
            n1.reason
                .starts_with("fabric-check: ib.port_state: during job 7:"),
            "{}",
            n1.reason
        );
        let t = tag_of(&slurm);
        assert_eq!(t.during.len(), 1);
        assert_eq!(t.during[0].verdict, Verdict::Fail);
    }

    #[test]
    fn an_epilog_without_a_snapshot_does_not_probe() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), Script::Epilog, "n1", "n1", &[]);
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Fail));
        let meet = FakeMeet::default();
        let lines = Lines::default();
        epilog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        assert!(runner.probes.borrow().is_empty());
        assert!(
            lines.has("no prolog snapshot for job 7"),
            "{}",
            lines.text()
        );
        assert_eq!(drains(&slurm), 0);
    }
}

mod prolog_tag_kept {
    use super::*;
    use crate::jobstep::pending::PendingPrologTag;

    /// The prolog of a one-node job on n1 (state in `dir`) whose verdict is `verdict`.
    fn prolog_in(dir: &std::path::Path, slurm: &FakeSlurm, verdict: Verdict) -> Lines {
        let runner = answering(report("n1", verdict));
        prolog_on_n1_in(dir, slurm, &runner, &["policy=warn"]).1
    }

    fn epilog_in(dir: &std::path::Path, slurm: &FakeSlurm) -> Lines {
        let runner = answering(report("n1", Verdict::Pass));
        super::epilog_runs::epilog_on_n1(dir, slurm, &runner, &["policy=warn"])
    }

    fn kept(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let s = setup(dir, Script::Epilog, "n1", "n1", &[]);
        std::fs::read_dir(&s.state_dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("prolog-tag-"))
            })
            .collect()
    }

    #[test]
    fn a_prolog_verdict_slurm_could_not_take_is_written_by_the_epilog_once_it_answers() {
        let dir = tempfile::tempdir().unwrap();
        let away = FakeSlurm::with_nodes(FOUR).failing("admin_comment");
        let lines = prolog_in(dir.path(), &away, Verdict::Warn);
        assert!(away.current_comment().is_empty());
        assert!(lines.has("the epilog writes it"), "{}", lines.text());
        assert_eq!(kept(dir.path()).len(), 1);

        let back = FakeSlurm::with_nodes(FOUR);
        let lines = epilog_in(dir.path(), &back);
        let t = tag_of(&back);
        assert_eq!(t.verdict, Some(Verdict::Warn), "{}", lines.text());
        assert_eq!(t.mode.as_deref(), Some("quick"));
        assert_eq!(t.nnodes, 1);
        assert!(t.earlier.is_empty(), "{t:?}");
        assert!(kept(dir.path()).is_empty(), "removed once written");
    }

    #[test]
    fn a_kept_verdict_stays_kept_while_the_epilog_cannot_write_either() {
        let dir = tempfile::tempdir().unwrap();
        prolog_in(
            dir.path(),
            &FakeSlurm::with_nodes(FOUR).failing("admin_comment"),
            Verdict::Pass,
        );
        let still_away = FakeSlurm::with_nodes(FOUR).failing("admin_comment");
        let lines = epilog_in(dir.path(), &still_away);
        assert!(lines.has("tag not written"), "{}", lines.text());
        assert_eq!(kept(dir.path()).len(), 1);
    }

    #[test]
    fn a_prolog_whose_tag_was_written_keeps_nothing_for_the_epilog() {
        let dir = tempfile::tempdir().unwrap();
        let slurm = FakeSlurm::with_nodes(FOUR);
        prolog_in(dir.path(), &slurm, Verdict::Pass);
        assert_eq!(tag_of(&slurm).verdict, Some(Verdict::Pass));
        assert!(kept(dir.path()).is_empty());
    }

    fn result(probed_at_s: u64, verdict: Verdict) -> PendingPrologTag {
        PendingPrologTag {
            mode: "quick".into(),
            probed_at_s,
            nodes: [(
                "n1".to_owned(),
                NodeResult {
                    verdict,
                    checks: vec![],
                    probe_ms: Some(3),
                    drained: false,
                },
            )]
            .into(),
            missing: vec![],
            notes: vec![],
            collective: None,
            spares: None,
        }
    }

    #[test]
    fn a_kept_verdict_over_an_earlier_attempts_tag_moves_that_attempts_failure_to_earlier() {
        let earlier = result(100, Verdict::Fail).apply(None);
        let t = result(200, Verdict::Pass).apply(Some(earlier));
        assert_eq!(t.verdict, Some(Verdict::Pass));
        assert_eq!(t.earlier["n1"].verdict, Verdict::Fail);
    }

    #[test]
    fn a_stale_kept_verdict_of_an_earlier_attempt_never_replaces_a_later_attempts_tag() {
        let later = result(200, Verdict::Pass).apply(None);
        let t = result(100, Verdict::Fail).apply(Some(later.clone()));
        assert_eq!(t.verdict, Some(Verdict::Pass));
        assert_eq!(t.probed_at, Some(200));
        assert_eq!(t.nodes, later.nodes);
        assert_eq!(
            t.earlier["n1"].verdict,
            Verdict::Fail,
            "attempt 1's failure is kept"
        );
    }

    #[test]
    fn an_epilog_after_a_requeue_keeps_the_new_attempts_pass_over_attempt_ones_kept_fail() {
        let dir = tempfile::tempdir().unwrap();
        // Attempt 1, an hour ago: slurmctld and slurmdbd away through its prolog and epilog.
        let s = setup(dir.path(), Script::Epilog, "n1", "n1", &[]);
        let stale = result(crate::jobstep::now_unix() - 3600, Verdict::Fail);
        std::fs::write(
            s.state_dir.join("prolog-tag-7.json"),
            serde_json::to_vec(&stale).unwrap(),
        )
        .unwrap();
        // Attempt 2: its prolog writes its pass, then its epilog runs.
        let slurm = FakeSlurm::with_nodes(FOUR);
        prolog_in(dir.path(), &slurm, Verdict::Pass);
        let attempt_two = tag_of(&slurm);
        let lines = epilog_in(dir.path(), &slurm);
        let t = tag_of(&slurm);
        assert_eq!(t.verdict, Some(Verdict::Pass), "{}", lines.text());
        assert_eq!(t.probed_at, attempt_two.probed_at);
        assert_eq!(t.earlier["n1"].verdict, Verdict::Fail);
        assert!(kept(dir.path()).is_empty(), "the stale verdict is gone");
    }

    #[test]
    fn a_kept_verdict_that_had_reached_slurm_after_all_is_not_counted_twice() {
        let landed = result(100, Verdict::Fail).apply(None);
        let t = result(100, Verdict::Fail).apply(Some(landed.clone()));
        assert_eq!(t, landed);
        assert!(t.earlier.is_empty());
    }
}

mod health_streaks {
    use super::*;
    use crate::jobstep::health::{EXIT_COULD_NOT_RUN, HealthSetup};
    use fabric_proto::plugin_args::PluginArgs;
    use fabric_proto::verdict::{Finding, Severity};

    fn health_setup(dir: &std::path::Path) -> HealthSetup {
        let (plugin, problems) =
            PluginArgs::parse([format!("state_dir={}/%n", dir.display()).as_str()]);
        assert!(problems.is_empty());
        HealthSetup::new("n1".into(), plugin, 3).unwrap()
    }

    fn run(setup: &HealthSetup, slurm: &FakeSlurm, verdict: Verdict, lines: &Lines) -> i32 {
        let runner = answering(report("n1", verdict));
        health::run(setup, slurm, &runner, lines).unwrap()
    }

    #[test]
    fn a_health_run_reports_a_job_whose_tag_jobstats_replaced_naming_job_writer_and_setup() {
        let dir = tempfile::tempdir().unwrap();
        let s = health_setup(dir.path());
        let long_ago = crate::tag_ledger::Written {
            job: "41".into(),
            at_s: 1_000,
            form: "live".into(),
            verdict: "pass".into(),
            bytes: 90,
        };
        crate::tag_ledger::record(&s.state_dir, &long_ago).unwrap();
        let slurm = FakeSlurm::with_nodes(FOUR);
        slurm.set_job_records(vec![crate::slurm::JobRecord {
            job: "41".into(),
            state: "COMPLETED".into(),
            end_s: Some(1_010),
            comment: "JS1:H4sIAAAAAAAAA6tWSkktLlGyUlAqS8wpTVWqBQCb1RwVEQAAAA==".into(),
        }]);
        let lines = Lines::default();
        assert_eq!(run(&s, &slurm, Verdict::Pass, &lines), 0);
        let text = lines.text();
        assert!(text.contains("TAG LOST: job 41"), "{text}");
        assert!(text.contains("jobstats `JS1:` segment"), "{text}");
        assert!(text.contains("fabric-check epilog-slurmctld"), "{text}");
        assert!(crate::tag_ledger::entries(&s.state_dir).unwrap().is_empty());
        // Reported once: the next run has nothing to ask.
        let again = Lines::default();
        run(&s, &slurm, Verdict::Pass, &again);
        assert!(!again.text().contains("TAG LOST"), "{}", again.text());
    }

    #[test]
    fn a_health_run_names_a_job_whose_kept_prolog_verdict_never_reached_slurm() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = health_setup(dir.path());
        std::fs::write(s.state_dir.join("prolog-tag-9.json"), "{}").unwrap();
        s.tag_grace = Duration::ZERO;
        std::thread::sleep(Duration::from_millis(20));
        let lines = Lines::default();
        run(&s, &FakeSlurm::with_nodes(FOUR), Verdict::Pass, &lines);
        let text = lines.text();
        assert!(
            text.contains("job 9: its prolog's verdict never reached Slurm"),
            "{text}"
        );
        assert!(
            s.state_dir.join("prolog-tag-9.json").exists(),
            "kept a week"
        );
    }

    #[test]
    fn our_drain_is_resumed_only_after_three_clean_probes_in_a_row() {
        let dir = tempfile::tempdir().unwrap();
        let s = health_setup(dir.path());
        let slurm = FakeSlurm::with_nodes(FOUR);
        slurm.set_node(drained_by_us("n1", "2026-12-01T09:00:00"));
        let lines = Lines::default();
        for _ in 0..2 {
            assert_eq!(run(&s, &slurm, Verdict::Pass, &lines), 0);
        }
        assert!(lines.has("n1: clean probe 1 of 3 before resuming"));
        assert!(lines.has("n1: clean probe 2 of 3 before resuming"));
        assert!(slurm.node("n1").unwrap().is_drained());
        run(&s, &slurm, Verdict::Warn, &lines);
        assert!(
            lines.has("resumed n1 after 3 clean probes"),
            "{}",
            lines.text()
        );
        assert!(!slurm.node("n1").unwrap().is_drained());
    }

    #[test]
    fn a_failing_probe_resets_the_streak_and_keeps_our_first_reason() {
        let dir = tempfile::tempdir().unwrap();
        let s = health_setup(dir.path());
        let slurm = FakeSlurm::with_nodes(FOUR);
        slurm.set_node(drained_by_us("n1", "2026-12-01T09:00:00"));
        let lines = Lines::default();
        run(&s, &slurm, Verdict::Pass, &lines);
        run(&s, &slurm, Verdict::Pass, &lines);
        assert_eq!(run(&s, &slurm, Verdict::Fail, &lines), 2);
        assert!(lines.has("n1 is already drained by fabric-check"));
        assert_eq!(drains(&slurm), 0);
        run(&s, &slurm, Verdict::Pass, &lines);
        assert_eq!(lines.count("clean probe 1 of 3"), 2, "{}", lines.text());
        assert!(slurm.node("n1").unwrap().is_drained());
    }

    #[test]
    fn a_failing_idle_node_is_drained_through_the_settle_step() {
        let dir = tempfile::tempdir().unwrap();
        let s = health_setup(dir.path());
        let slurm = FakeSlurm::with_nodes(FOUR);
        let lines = Lines::default();
        assert_eq!(run(&s, &slurm, Verdict::Fail, &lines), 2);
        assert!(slurm.node("n1").unwrap().is_drained());
        let calls = slurm.calls();
        assert_eq!(
            calls.last(),
            Some(&Call::Nodes),
            "the settle re-check: {calls:?}"
        );
    }

    fn training_report(device: &str) -> crate::probe::Report {
        let mut r = report("n1", Verdict::Pass);
        r.push(Finding::new(
            fabric_proto::check_id::IB_PORT_STATE,
            Severity::Fail,
            Some(device),
            Some(1),
            serde_json::json!({"state": "INIT", "phys_state": "5: LinkUp"}),
            serde_json::json!({"state": "ACTIVE"}),
            format!("{device} port 1 is INIT, phys_state 5: LinkUp; 7 of its 7 peers are ACTIVE"),
        ));
        r
    }

    #[test]
    fn a_port_still_training_is_drained_only_when_the_next_health_check_sees_it_training_too() {
        let dir = tempfile::tempdir().unwrap();
        let s = health_setup(dir.path());
        let slurm = FakeSlurm::with_nodes(FOUR);
        let lines = Lines::default();
        let once =
            |r: crate::probe::Report| health::run(&s, &slurm, &answering(r), &lines).unwrap();
        once(training_report("mlx5_2"));
        assert!(!slurm.node("n1").unwrap().is_drained(), "{}", lines.text());
        assert!(lines.has("not drained on first sight"), "{}", lines.text());
        // It came up: the next check passes, and forgets it.
        once(report("n1", Verdict::Pass));
        once(training_report("mlx5_3"));
        assert!(
            !slurm.node("n1").unwrap().is_drained(),
            "another port, first sight"
        );
        once(training_report("mlx5_3"));
        assert!(
            slurm.node("n1").unwrap().is_drained(),
            "still training at the next check: {}",
            lines.text()
        );
    }

    #[test]
    fn a_port_that_is_down_is_drained_at_first_sight_even_beside_a_training_one() {
        let dir = tempfile::tempdir().unwrap();
        let s = health_setup(dir.path());
        let slurm = FakeSlurm::with_nodes(FOUR);
        let lines = Lines::default();
        let mut r = training_report("mlx5_2");
        r.push(Finding::new(
            fabric_proto::check_id::IB_PORT_STATE,
            Severity::Fail,
            Some("mlx5_5"),
            Some(1),
            serde_json::json!({"state": "DOWN", "phys_state": "3: Disabled"}),
            serde_json::json!({"state": "ACTIVE"}),
            "mlx5_5 port 1 is DOWN".into(),
        ));
        health::run(&s, &slurm, &answering(r), &lines).unwrap();
        assert!(slurm.node("n1").unwrap().is_drained(), "{}", lines.text());
    }

    #[test]
    fn a_failing_health_probe_under_policy_warn_or_observe_drains_nothing_and_says_why() {
        for policy in ["warn", "observe"] {
            let dir = tempfile::tempdir().unwrap();
            let state = format!("state_dir={}/%n", dir.path().display());
            let pol = format!("policy={policy}");
            let (plugin, problems) = PluginArgs::parse([state.as_str(), pol.as_str()]);
            assert!(problems.is_empty());
            let s = HealthSetup::new("n1".into(), plugin, 3).unwrap();
            let slurm = FakeSlurm::with_nodes(FOUR);
            let lines = Lines::default();
            assert_eq!(
                run(&s, &slurm, Verdict::Fail, &lines),
                2,
                "the verdict's exit code"
            );
            assert!(
                !slurm.node("n1").unwrap().is_drained(),
                "policy={policy} drained: {}",
                lines.text()
            );
            assert!(
                !slurm
                    .calls()
                    .iter()
                    .any(|c| matches!(c, Call::Drain { .. })),
                "policy={policy}: {:?}",
                slurm.calls()
            );
            assert!(
                lines.has(&format!("not drained (policy={policy})")),
                "{}",
                lines.text()
            );
        }
    }

    #[test]
    fn a_probe_that_could_not_run_changes_nothing_and_exits_3() {
        let dir = tempfile::tempdir().unwrap();
        let s = health_setup(dir.path());
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = FakeRunner::answering(vec![Err(ProbeRunError::Crashed {
            what: "probe",
            code: 139,
            stderr: String::new(),
        })]);
        let lines = Lines::default();
        assert_eq!(
            health::run(&s, &slurm, &runner, &lines).unwrap(),
            EXIT_COULD_NOT_RUN
        );
        assert_eq!(slurm.calls(), vec![]);
        assert!(lines.has("the probe could not run; node state unchanged"));
    }

    #[test]
    fn a_probe_error_leaves_the_streak_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let s = health_setup(dir.path());
        let slurm = FakeSlurm::with_nodes(FOUR);
        slurm.set_node(drained_by_us("n1", "2026-12-01T09:00:00"));
        let lines = Lines::default();
        run(&s, &slurm, Verdict::Pass, &lines);
        run(&s, &slurm, Verdict::Error, &lines);
        run(&s, &slurm, Verdict::Pass, &lines);
        assert!(lines.has("n1: probe error; node state unchanged"));
        assert!(lines.has("clean probe 2 of 3"), "{}", lines.text());
    }
}

mod collective_addresses {
    use super::*;
    use fabric_proto::fabric_option::FabricMode;

    /// The `full` prolog of a two-node job on n1; returns the collective's addresses.
    fn collective_addrs(words: &[&str]) -> Vec<(String, String)> {
        let dir = tempfile::tempdir().unwrap();
        let words: Vec<String> = words
            .iter()
            .map(|w| w.replace("DIR", &dir.path().display().to_string()))
            .collect();
        std::fs::write(
            dir.path().join("hosts"),
            "# the admin's file\n10.0.0.1 n1 n1.cluster\n10.0.0.2 n2\n10.0.0.9 n9\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("data-hosts"), "n1 10.1.0.1\nn2 10.1.0.2\n").unwrap();
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let mut s = setup(dir.path(), Script::Prolog, "n[1-2]", "n1", &refs);
        s.inv.option = FabricMode::Full;
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = answering(report("n1", Verdict::Pass));
        let meet = FakeMeet::default();
        let lines = Lines::default();
        prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        let reqs = runner.collectives.borrow();
        assert_eq!(reqs.len(), 1, "one collective run: {}", lines.text());
        reqs[0].addrs.clone()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, a)| ((*n).to_owned(), (*a).to_owned()))
            .collect()
    }

    /// Runs n1's prolog of a two-node `full` job under `policy=enforce` whose collective
    /// answers with a `warn` report naming n1 in `list` (`tails` or `suspects`); returns the exit,
    /// whether n1 was drained, the log lines and the payload n1 sent to the leader.
    fn prolog_beside_a_warning_collective(
        list: &str,
        message: &str,
    ) -> (JobStepExit, bool, String, PrologPayload) {
        let dir = tempfile::tempdir().unwrap();
        let mut s = setup(
            dir.path(),
            Script::Prolog,
            "n[1-2]",
            "n1",
            &["policy=enforce"],
        );
        s.inv.option = FabricMode::Full;
        let slurm = FakeSlurm::with_nodes(FOUR);
        let mut answer = json!({
            "schema": fabric_net::collective::SCHEMA, "backend": "tcp", "job_id": 7,
            "node": "n1", "nodes": ["n1", "n2"], "verdict": "warn", "duration_ms": 900,
            "budget_ms": 3000, "sizes": [], "ranks": [], "links": [], "outliers": [],
            "tails": [], "missing": [], "wrong": 0, "messages": [message],
            "error": null, "skipped": null
        });
        answer[list] = json!(["n1"]);
        let answer: fabric_net::collective::Report = serde_json::from_value(answer).unwrap();
        let runner = answering(report("n1", Verdict::Pass)).collective(Ok(answer));
        let meet = FakeMeet::default();
        let lines = Lines::default();
        let exit = prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        let drained = slurm.node("n1").unwrap().is_drained();
        let sent = meet.sent.borrow();
        let p: PrologPayload = serde_json::from_value(sent[0].1.clone()).unwrap();
        (exit, drained, lines.text(), p)
    }

    #[test]
    fn a_latency_tail_on_this_node_warns_names_its_check_and_drains_nothing_even_under_enforce() {
        let (exit, drained, lines, p) = prolog_beside_a_warning_collective(
            "tails",
            "latency tail: n1 (212.00 ms in, 190.00 ms out) ...",
        );
        assert_eq!(exit, JobStepExit::Proceed, "{lines}");
        assert!(!drained);
        assert!(lines.contains("latency tail: n1"), "{lines}");
        assert_eq!(p.result.verdict, Verdict::Warn);
        assert!(
            p.result
                .checks
                .iter()
                .any(|c| c == fabric_proto::check_id::COLLECTIVE_LATENCY_TAIL),
            "{:?}",
            p.result.checks
        );
        assert_eq!(p.collective.unwrap().tails, vec!["n1".to_string()]);
    }

    #[test]
    fn a_node_only_the_local_rule_names_warns_names_its_check_and_is_not_drained_under_enforce() {
        let (exit, drained, lines, p) = prolog_beside_a_warning_collective(
            "suspects",
            "slow node(s) reported, not drained: n1 (in 0.700 GB/s, out 0.750 GB/s, 2.13x slower \
             than the links beside them) ...",
        );
        assert_eq!(exit, JobStepExit::Proceed, "{lines}");
        assert!(!drained);
        assert!(lines.contains("slow (reported): n1"), "{lines}");
        assert_eq!(p.result.verdict, Verdict::Warn);
        assert!(
            p.result
                .checks
                .iter()
                .any(|c| c == fabric_proto::check_id::COLLECTIVE_SLOW_SUSPECT),
            "{:?}",
            p.result.checks
        );
        assert!(p.collective.unwrap().outliers.is_empty());
    }

    #[test]
    fn without_collective_hosts_the_collective_uses_the_job_nodes_of_hosts_file() {
        let got = collective_addrs(&["hosts_file=DIR/hosts"]);
        assert_eq!(got, pairs(&[("n1", "10.0.0.1"), ("n2", "10.0.0.2")]));
    }

    #[test]
    fn collective_hosts_wins_over_hosts_file_for_the_data_path() {
        let got = collective_addrs(&["hosts_file=DIR/hosts", "collective_hosts=DIR/data-hosts"]);
        assert_eq!(got, pairs(&[("n1", "10.1.0.1"), ("n2", "10.1.0.2")]));
    }

    #[test]
    fn with_neither_file_the_collective_gets_no_addresses_and_resolves_names_itself() {
        assert_eq!(collective_addrs(&[]), vec![]);
    }
}
