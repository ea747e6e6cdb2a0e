//! Spare nodes (`--fabric-check-spares`) on the fakes: the leader's shrink, the fallbacks, and a
//! failing follower that leaves the job instead of failing it.

use std::collections::BTreeMap;

use crate::jobstep::payload::PrologPayload;
use crate::jobstep::{prolog, spares};
use crate::testing::{Call, FakeMeet, FakeRunner, FakeSlurm, Lines, report, seams, setup, step};
use fabric_proto::invocation::{JobStepExit, Script};
use fabric_proto::plugin_args::PluginArgs;
use fabric_proto::spares::{BatchEnv, Fallback, SparesOutcome};
use fabric_proto::tag::{self, JobTag, NodeResult, Verdict};

const FOUR: &[&str] = &["n1", "n2", "n3", "n4"];

fn tag_of(slurm: &FakeSlurm) -> JobTag {
    tag::extract(&slurm.current_comment())
        .expect("a fabric-check tag in AdminComment")
        .expect("a readable tag")
}

fn payload(verdict: Verdict, checks: &[&str], drained: bool) -> serde_json::Value {
    serde_json::to_value(PrologPayload {
        result: NodeResult {
            verdict,
            checks: checks.iter().map(|c| (*c).to_owned()).collect(),
            probe_ms: Some(3),
            drained,
        },
        notes: vec![],
        collective: None,
        fingerprint: None,
    })
    .unwrap()
}

fn pass() -> serde_json::Value {
    payload(Verdict::Pass, &[], false)
}

fn down() -> serde_json::Value {
    payload(Verdict::Fail, &["ib.port_state"], true)
}

/// The prolog on `node` of the four-node job `n[1-4]` asking for `asked` spares, with
/// `spares_max=2` and the rendezvous answering `peers`; returns its exit, its log and the
/// state folder (for the batch step's file).
fn prolog_of(
    node: &str,
    verdict: Verdict,
    asked: u32,
    slurm: &FakeSlurm,
    peers: BTreeMap<String, serde_json::Value>,
) -> (JobStepExit, Lines, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = setup(
        dir.path(),
        Script::Prolog,
        "n[1-4]",
        node,
        &["policy=enforce", "spares_max=2", "watch_interval=0"],
    );
    s.inv.spares = asked;
    let runner = FakeRunner::answering(vec![Ok(report(node, verdict))]);
    let meet = FakeMeet {
        peers,
        ..FakeMeet::default()
    };
    let lines = Lines::default();
    let exit = prolog::run(&step(&s, seams(slurm, &runner, &meet, &lines)));
    (exit, lines, dir)
}

fn shrinks(slurm: &FakeSlurm) -> Vec<String> {
    slurm
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Shrink { job, nodes } => Some(format!("{job}:{nodes}")),
            _ => None,
        })
        .collect()
}

fn requeues(slurm: &FakeSlurm) -> usize {
    slurm
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Requeue(_)))
        .count()
}

#[test]
fn a_job_with_one_spare_and_one_failed_node_is_shrunk_to_the_good_nodes_and_not_requeued() {
    let slurm = FakeSlurm::with_nodes(FOUR);
    let peers = [
        ("n2".to_owned(), pass()),
        ("n3".to_owned(), down()),
        ("n4".to_owned(), pass()),
    ]
    .into();
    let (exit, lines, dir) = prolog_of("n1", Verdict::Pass, 1, &slurm, peers);
    assert_eq!(exit, JobStepExit::Proceed, "{}", lines.text());
    assert_eq!(shrinks(&slurm), vec!["7:n[1-2,4]".to_owned()]);
    assert_eq!(requeues(&slurm), 0);
    let calls = slurm.calls();
    let wrote = calls
        .iter()
        .position(|c| matches!(c, Call::SetAdminComment(_)));
    let shrank = calls.iter().position(|c| matches!(c, Call::Shrink { .. }));
    assert!(
        wrote < shrank,
        "the tag goes in before the shrink, so both accounting records hold it: {calls:?}"
    );
    let t = tag_of(&slurm);
    let sp = t.spares.expect("a spares entry");
    assert_eq!(sp.outcome, SparesOutcome::Shrunk);
    assert_eq!(sp.kept, "n[1-2,4]");
    assert_eq!(sp.failed.len(), 1);
    assert_eq!(sp.failed[0].node, "n3");
    assert_eq!(sp.failed[0].checks, vec!["ib.port_state".to_owned()]);
    assert!(sp.released.is_empty());
    assert!(sp.saved());
    let env = std::fs::read_to_string(BatchEnv::path(&dir.path().join("state/n1"), 7)).unwrap();
    let env = BatchEnv::parse(&env).unwrap();
    assert_eq!(env.kept, ["n1", "n2", "n4"]);
    assert_eq!(env.allocated, ["n1", "n2", "n3", "n4"]);
}

#[test]
fn a_job_whose_nodes_all_pass_gives_its_surplus_healthy_nodes_back_to_the_pool() {
    let slurm = FakeSlurm::with_nodes(FOUR);
    let peers = [
        ("n2".to_owned(), pass()),
        ("n3".to_owned(), pass()),
        ("n4".to_owned(), pass()),
    ]
    .into();
    let (exit, _, _) = prolog_of("n1", Verdict::Pass, 2, &slurm, peers);
    assert_eq!(exit, JobStepExit::Proceed);
    assert_eq!(shrinks(&slurm), vec!["7:n[1-2]".to_owned()]);
    let sp = tag_of(&slurm).spares.unwrap();
    assert_eq!(sp.released, ["n3", "n4"]);
    assert!(sp.failed.is_empty());
    assert!(!sp.saved(), "nothing failed: spares saved nothing");
}

#[test]
fn a_job_whose_batch_host_failed_falls_back_to_the_requeue_and_says_so() {
    let slurm = FakeSlurm::with_nodes(FOUR);
    let peers = [
        ("n2".to_owned(), pass()),
        ("n3".to_owned(), pass()),
        ("n4".to_owned(), pass()),
    ]
    .into();
    let (exit, _, _) = prolog_of("n1", Verdict::Fail, 1, &slurm, peers);
    assert_eq!(exit, JobStepExit::Drained, "the batch host's prolog fails");
    assert!(shrinks(&slurm).is_empty());
    let sp = tag_of(&slurm).spares.unwrap();
    assert_eq!(sp.outcome, SparesOutcome::Requeued);
    assert_eq!(sp.fallback, Some(Fallback::BatchHostFailed));
    assert_eq!(sp.spare_node_s, 0.0);
}

#[test]
fn a_job_with_fewer_good_nodes_than_it_needs_is_requeued_by_the_leader() {
    let slurm = FakeSlurm::with_nodes(FOUR);
    let peers = [
        ("n2".to_owned(), down()),
        ("n3".to_owned(), down()),
        ("n4".to_owned(), pass()),
    ]
    .into();
    let (exit, _, _) = prolog_of("n1", Verdict::Pass, 1, &slurm, peers);
    assert_eq!(exit, JobStepExit::Proceed, "the leader itself passed");
    assert!(shrinks(&slurm).is_empty());
    assert!(slurm.calls().contains(&Call::Requeue(7)));
    let sp = tag_of(&slurm).spares.unwrap();
    assert_eq!(sp.fallback, Some(Fallback::TooFewPassed));
}

#[test]
fn a_shrink_that_slurmctld_refuses_falls_back_to_the_requeue() {
    let slurm = FakeSlurm::with_nodes(FOUR).failing("shrink");
    let peers = [
        ("n2".to_owned(), pass()),
        ("n3".to_owned(), pass()),
        ("n4".to_owned(), down()),
    ]
    .into();
    let (_, lines, dir) = prolog_of("n1", Verdict::Pass, 1, &slurm, peers);
    assert!(lines.has("refused the shrink"), "{}", lines.text());
    assert_eq!(requeues(&slurm), 1);
    let sp = tag_of(&slurm).spares.unwrap();
    assert_eq!(sp.fallback, Some(Fallback::ShrinkRefused));
    assert!(!BatchEnv::path(&dir.path().join("state/n1"), 7).exists());
}

#[test]
fn a_node_whose_verdict_never_arrived_is_given_up_like_a_failed_one() {
    let slurm = FakeSlurm::with_nodes(FOUR);
    let peers = [("n2".to_owned(), pass()), ("n3".to_owned(), pass())].into();
    prolog_of("n1", Verdict::Pass, 1, &slurm, peers);
    assert_eq!(shrinks(&slurm), vec!["7:n[1-3]".to_owned()]);
    let sp = tag_of(&slurm).spares.unwrap();
    assert_eq!(sp.failed[0].node, "n4");
    assert_eq!(sp.failed[0].checks, ["rendezvous.missing"]);
}

#[test]
fn a_failed_follower_in_a_job_with_spares_drains_itself_but_does_not_fail_the_job() {
    // The first node's shrink landed: slurmctld lists the job on the three others.
    let slurm = FakeSlurm::with_nodes(FOUR).with_job_nodes("n[1-2,4]");
    let (exit, lines, _) = prolog_of("n3", Verdict::Fail, 1, &slurm, BTreeMap::new());
    assert_eq!(exit, JobStepExit::Proceed, "{}", lines.text());
    assert!(slurm.node("n3").unwrap().is_drained(), "drained as today");
    assert!(lines.has("the first node gives it up"), "{}", lines.text());
    assert!(lines.has("gave n3 back"), "{}", lines.text());
    assert!(shrinks(&slurm).is_empty(), "only the leader shrinks");
}

#[test]
fn a_failed_follower_whose_node_the_job_never_gave_back_fails_its_prolog() {
    // The shrink and the fallback requeue both failed: slurmctld still lists n3.
    let slurm = FakeSlurm::with_nodes(FOUR).with_job_nodes("n[1-4]");
    let dir = tempfile::tempdir().unwrap();
    let mut s = setup(
        dir.path(),
        Script::Prolog,
        "n[1-4]",
        "n3",
        &[
            "policy=enforce",
            "spares_max=2",
            "watch_interval=0",
            "timeout=3",
        ],
    );
    s.inv.spares = 1;
    let runner = FakeRunner::answering(vec![Ok(report("n3", Verdict::Fail))]);
    let meet = FakeMeet::default();
    let lines = Lines::default();
    let exit = prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
    assert_eq!(exit, JobStepExit::Drained, "{}", lines.text());
    assert!(
        lines.has("did not give n3 back before the prolog's deadline"),
        "{}",
        lines.text()
    );
    let asked = slurm
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::JobNodes(7)))
        .count();
    assert!((2..=8).contains(&asked), "{asked} squeue calls in 3 s");
}

#[test]
fn a_failed_follower_whose_verdict_did_not_reach_the_leader_fails_the_job_as_without_spares() {
    let slurm = FakeSlurm::with_nodes(FOUR);
    let dir = tempfile::tempdir().unwrap();
    let mut s = setup(
        dir.path(),
        Script::Prolog,
        "n[1-4]",
        "n3",
        &["policy=enforce", "spares_max=2", "watch_interval=0"],
    );
    s.inv.spares = 1;
    let runner = FakeRunner::answering(vec![Ok(report("n3", Verdict::Fail))]);
    let meet = FakeMeet {
        fail: Some("the leader did not answer".into()),
        ..FakeMeet::default()
    };
    let lines = Lines::default();
    let exit = prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
    assert_eq!(exit, JobStepExit::Drained);
}

#[test]
fn a_job_cannot_keep_more_spares_than_spares_max_allows_whatever_it_asked() {
    let slurm = FakeSlurm::with_nodes(FOUR);
    let peers = [
        ("n2".to_owned(), pass()),
        ("n3".to_owned(), pass()),
        ("n4".to_owned(), pass()),
    ]
    .into();
    prolog_of("n1", Verdict::Pass, 3, &slurm, peers);
    assert_eq!(
        shrinks(&slurm),
        vec!["7:n[1-2]".to_owned()],
        "3 asked, spares_max=2: two given back"
    );
}

#[test]
fn spares_count_only_under_enforce_and_never_leave_a_job_without_nodes() {
    let (mut args, _) = PluginArgs::parse(["spares_max=4"]);
    assert_eq!(spares::effective(2, &args, 4), 2);
    assert_eq!(spares::effective(9, &args, 8), 4);
    assert_eq!(spares::effective(4, &args, 4), 0);
    args.policy = fabric_proto::plugin_args::Policy::Warn;
    assert_eq!(spares::effective(2, &args, 4), 0);
    let (none, _) = PluginArgs::parse(std::iter::empty::<&str>());
    assert_eq!(
        spares::effective(2, &none, 4),
        0,
        "spares_max defaults to 0"
    );
}

#[test]
fn a_node_the_mass_drain_guard_kept_up_is_still_given_up_by_a_job_with_spares() {
    let (args, _) = PluginArgs::parse(["policy=enforce"]);
    let nodes: Vec<String> = FOUR.iter().map(|n| (*n).to_owned()).collect();
    let mut results = BTreeMap::new();
    for n in FOUR {
        results.insert(
            (*n).to_owned(),
            NodeResult {
                verdict: if *n == "n2" {
                    Verdict::Fail
                } else {
                    Verdict::Pass
                },
                checks: vec![],
                probe_ms: None,
                drained: false,
            },
        );
    }
    let p = spares::plan(&nodes, 1, &results, &args);
    assert_eq!(p.kept, ["n1", "n3", "n4"]);
    assert_eq!(p.failed[0].node, "n2");
    assert!(p.fallback.is_none());
}

#[test]
fn the_epilog_of_a_node_given_up_to_spares_writes_no_tag_of_its_own() {
    let slurm = FakeSlurm::with_nodes(FOUR);
    let dir = tempfile::tempdir().unwrap();
    let words = ["policy=enforce", "spares_max=2", "watch_interval=0"];
    let mut s = setup(dir.path(), Script::Prolog, "n[1-4]", "n3", &words);
    s.inv.spares = 1;
    let runner = FakeRunner::answering(vec![Ok(report("n3", Verdict::Fail))]);
    let meet = FakeMeet::default();
    let lines = Lines::default();
    prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
    let writes_before = slurm
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::SetAdminComment(_) | Call::SetAdminCommentDb(_)))
        .count();
    // Slurm runs the removed node's epilog at once, with that node alone in its list.
    let e = setup(dir.path(), Script::Epilog, "n3", "n3", &words);
    let runner = FakeRunner::answering(vec![Ok(report("n3", Verdict::Fail))]);
    let lines = Lines::default();
    crate::jobstep::epilog::run(&step(&e, seams(&slurm, &runner, &meet, &lines)));
    let writes_after = slurm
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::SetAdminComment(_) | Call::SetAdminCommentDb(_)))
        .count();
    assert_eq!(writes_before, writes_after, "{}", lines.text());
    assert!(lines.has("was given up by job 7"), "{}", lines.text());
}

#[test]
fn an_array_task_is_shrunk_by_its_own_name_never_by_the_id_that_names_the_whole_array() {
    let slurm = FakeSlurm::with_nodes(FOUR).job_named("7_0");
    let peers = [
        ("n2".to_owned(), pass()),
        ("n3".to_owned(), down()),
        ("n4".to_owned(), pass()),
    ]
    .into();
    prolog_of("n1", Verdict::Pass, 1, &slurm, peers);
    assert_eq!(shrinks(&slurm), vec!["7_0:n[1-2,4]".to_owned()]);
}
