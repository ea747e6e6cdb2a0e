//! The end of a `fabric-run` step, on the fakes: the run summary lands in the live tag while the
//! job runs, from this step's records only, never drains, costs no Slurm call without records,
//! and the epilog after the job keeps it.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::jobstep::meet::Meeting;
use crate::jobstep::step_end::{StepEnd, end_of_step};
use crate::jobstep::tag_write::TagWrite;
use crate::jobstep::{Setup, epilog};
use crate::record::prepare_job_dir;
use crate::testing::{Call, FakeMeet, FakeRunner, FakeSlurm, Lines, report, seams, setup, step};
use fabric_proto::invocation::Script;
use fabric_proto::tag::{self, Reporter, Verdict};

/// A `fabric-run` record line of job 7, step `step`, on `node`.
fn line(node: &str, step: &str, ts: f64, body: &str) -> String {
    format!(
        r#"{{"v":1,"ts":{ts},"run":"{node}:1:{step}","node":"{node}","rank":0,"job_id":"7","step_id":"{step}","restart_count":0,{body}}}"#
    )
}

/// One run of `steps` training steps ending with `outcome`, by step `step` on `node`.
fn run_lines(node: &str, step: &str, steps: u32, outcome: &str) -> Vec<String> {
    let mut v = vec![line(
        node,
        step,
        10.0,
        r#""type":"step_start","pid":1,"cmd":["train"]"#,
    )];
    for i in 0..steps {
        v.push(line(
            node,
            step,
            11.0 + f64::from(i),
            r#""type":"step","duration_s":1.0"#,
        ));
    }
    v.push(line(
        node,
        step,
        20.0,
        &format!(
            r#""type":"step_end","duration_s":10.0,"exit_code":1,"signal":null,"outcome":"{outcome}","attempts":1,"on_time":true"#
        ),
    ));
    v
}

/// Appends `lines` to `node`'s records file of job 7 in the folder the prolog made.
fn append(dir: &Path, node: &str, lines: &[String]) -> PathBuf {
    let spool = dir.join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let me = nix::unistd::getuid().as_raw();
    prepare_job_dir(&spool, "7", me, None).unwrap();
    let path = spool.join("7").join(format!("{node}.jsonl"));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
    path
}

fn step_end_setup(dir: &Path, step_id: u32) -> Setup {
    let mut s = setup(dir, Script::StepEnd, "n1", "n1", &["policy=enforce"]);
    s.inv.step_id = Some(step_id);
    s
}

fn step_end_on(dir: &Path, step_id: u32, slurm: &FakeSlurm) -> (StepEnd, Lines) {
    let s = step_end_setup(dir, step_id);
    let (runner, meet, lines) = (
        FakeRunner::answering(vec![]),
        FakeMeet::default(),
        Lines::default(),
    );
    let done = end_of_step(&step(&s, seams(slurm, &runner, &meet, &lines)));
    (done, lines)
}

fn epilog_on(dir: &Path, slurm: &FakeSlurm) -> Lines {
    let s = setup(dir, Script::Epilog, "n1", "n1", &["policy=enforce"]);
    let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
    let (meet, lines) = (FakeMeet::default(), Lines::default());
    epilog::run(&step(&s, seams(slurm, &runner, &meet, &lines)));
    lines
}

fn live_json(slurm: &FakeSlurm) -> serde_json::Value {
    let stored = slurm.current_comment();
    let json = stored
        .strip_prefix("fabric-check/v1 ")
        .unwrap_or_else(|| panic!("a live segment: {stored}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("plain JSON ({e}): {stored}"))
}

#[test]
fn a_steps_end_puts_its_run_summary_in_the_live_tag_as_plain_json_with_one_read_and_one_write() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n1", &run_lines("n1", "0", 5, "accepted"));
    let slurm = FakeSlurm::with_nodes(&["n1"]);
    let (done, lines) = step_end_on(dir.path(), 0, &slurm);
    assert_eq!(done, StepEnd::Written(TagWrite::Live), "{}", lines.text());
    let json = live_json(&slurm);
    assert_eq!(json["run"]["steps"], 5, "{json}");
    assert_eq!(json["run"]["outcome"], "accepted", "{json}");
    assert_eq!(json["run"]["reported_by"], "job", "{json}");
    let calls = slurm.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(matches!(calls[0], Call::AdminComment), "{calls:?}");
    assert!(matches!(calls[1], Call::SetAdminComment(_)), "{calls:?}");
    assert!(lines.has("step 7.0: run summary of n1 in the live tag"));
}

#[test]
fn a_later_step_rewrites_the_summary_of_every_step_so_far_without_counting_one_twice() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::with_nodes(&["n1"]);
    append(dir.path(), "n1", &run_lines("n1", "0", 3, "accepted"));
    step_end_on(dir.path(), 0, &slurm);
    append(dir.path(), "n1", &run_lines("n1", "1", 4, "accepted"));
    step_end_on(dir.path(), 1, &slurm);
    assert_eq!(live_json(&slurm)["run"]["steps"], 7);
    // The same step's end seen twice (a retried spawn) changes nothing: the summary is the one
    // this node last wrote, so it neither writes nor asks slurmctld for the tag.
    let before = slurm.calls().len();
    let (done, lines) = step_end_on(dir.path(), 1, &slurm);
    assert_eq!(done, StepEnd::Written(TagWrite::Unchanged));
    assert_eq!(slurm.calls().len(), before, "no read, no write");
    assert!(lines.has("the tag is not read again"), "{}", lines.text());
    assert_eq!(live_json(&slurm)["run"]["steps"], 7);
}

#[test]
fn a_step_without_its_own_records_makes_no_slurm_call() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::with_nodes(&["n1"]);
    // No folder, no file.
    assert_eq!(step_end_on(dir.path(), 0, &slurm).0, StepEnd::NoRecords);
    // Records of another step only.
    append(dir.path(), "n1", &run_lines("n1", "0", 3, "accepted"));
    assert_eq!(step_end_on(dir.path(), 4, &slurm).0, StepEnd::NoRecords);
    // Only garbage.
    let other = tempfile::tempdir().unwrap();
    append(other.path(), "n1", &["not json".into(), "{\"v\":9}".into()]);
    assert_eq!(step_end_on(other.path(), 0, &slurm).0, StepEnd::NoRecords);
    assert!(slurm.calls().is_empty(), "{:?}", slurm.calls());
}

#[test]
fn hostile_records_never_drain_and_a_linked_records_file_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut hostile = run_lines("n1", "0", 2, "failed");
    // A record claiming a verdict and a drain, an overlong line, and bytes that are not UTF-8.
    hostile.push(line(
        "n1",
        "0",
        30.0,
        r#""type":"step","duration_s":1.0,"verdict":"fail","drained":true"#,
    ));
    hostile.push("x".repeat(70 * 1024));
    hostile.push(String::from_utf8_lossy(&[0xff, 0xfe, b'{']).into_owned());
    append(dir.path(), "n1", &hostile);
    let slurm = FakeSlurm::with_nodes(&["n1"]);
    let (done, lines) = step_end_on(dir.path(), 0, &slurm);
    assert_eq!(done, StepEnd::Written(TagWrite::Live), "{}", lines.text());
    assert!(
        !slurm
            .calls()
            .iter()
            .any(|c| matches!(c, Call::Drain { .. })),
        "{:?}",
        slurm.calls()
    );
    let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
    assert_eq!(t.verdict, None, "the job's records set no verdict");
    assert!(t.nodes.is_empty(), "nor any node's result");
    let run = t.run.expect("the summary");
    assert_eq!(run.outcome, "failed");
    assert_eq!(run.reported_by, Reporter::Job);
    assert!(run.malformed_lines >= 1, "{run:?}");

    // A records file that is a symlink to root's file is refused: no read through it, no call.
    let linked = tempfile::tempdir().unwrap();
    let path = append(linked.path(), "n2", &run_lines("n2", "0", 1, "accepted"));
    let target = linked.path().join("spool/7/n1.jsonl");
    std::os::unix::fs::symlink(&path, &target).unwrap();
    let slurm = FakeSlurm::with_nodes(&["n1"]);
    let (done, lines) = step_end_on(linked.path(), 0, &slurm);
    assert_eq!(done, StepEnd::NoRecords);
    assert!(lines.has("symlink"), "{}", lines.text());
    assert!(slurm.calls().is_empty());
}

#[test]
fn the_batch_scripts_end_summarises_every_step_of_its_node_in_the_live_tag() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n1", &run_lines("n1", "0", 2, "accepted"));
    append(dir.path(), "n1", &run_lines("n1", "1", 3, "accepted"));
    let slurm = FakeSlurm::with_nodes(&["n1"]);
    let (done, lines) = step_end_on(dir.path(), fabric_proto::invocation::BATCH_STEP_ID, &slurm);
    assert_eq!(done, StepEnd::Written(TagWrite::Live), "{}", lines.text());
    assert_eq!(live_json(&slurm)["run"]["steps"], 5);
}

#[test]
fn a_job_already_completing_is_left_to_its_epilog_and_nothing_goes_to_the_database() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n1", &run_lines("n1", "0", 3, "accepted"));
    let slurm = FakeSlurm::with_nodes(&["n1"]).job_finished();
    let (done, lines) = step_end_on(dir.path(), 0, &slurm);
    assert_eq!(done, StepEnd::Written(TagWrite::NotWritten));
    assert!(lines.has("its epilog writes the tag"), "{}", lines.text());
    assert!(
        !slurm
            .calls()
            .iter()
            .any(|c| matches!(c, Call::SetAdminCommentDb(_))),
        "{:?}",
        slurm.calls()
    );
    assert!(
        dir.path().join("spool/7/n1.jsonl").exists(),
        "kept for the epilog"
    );
}

#[test]
fn the_epilog_after_the_job_keeps_the_live_summary_in_plain_json_and_adds_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n1", &run_lines("n1", "0", 6, "accepted"));
    let slurm = FakeSlurm::with_nodes(&["n1"]);
    step_end_on(dir.path(), 0, &slurm);
    let live = slurm.current_comment();
    slurm.finish();
    let lines = epilog_on(dir.path(), &slurm);
    assert!(lines.has("not rewritten"), "{}", lines.text());
    assert_eq!(slurm.current_comment(), live, "still the live form");
    assert_eq!(live_json(&slurm)["run"]["steps"], 6);
    assert!(
        !dir.path().join("spool/7").exists(),
        "the epilog delivered and removed the records"
    );
}

#[test]
fn the_epilog_completes_a_live_summary_with_records_written_after_the_last_step_end() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n1", &run_lines("n1", "0", 2, "accepted"));
    let slurm = FakeSlurm::with_nodes(&["n1"]);
    step_end_on(dir.path(), 0, &slurm);
    // The batch script ran fabric-run itself afterwards (no step-end for the batch step).
    append(dir.path(), "n1", &run_lines("n1", "batch", 3, "accepted"));
    slurm.finish();
    epilog_on(dir.path(), &slurm);
    let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
    assert_eq!(t.run.map(|r| r.steps), Some(5), "2 + 3, each once");
}

// ---- a step on several nodes: the first node gathers the others' summaries -----------------

/// `run_lines` of `node` as rank `rank` (each rank its own run).
fn rank_lines(node: &str, rank: u32, step: &str, steps: u32, outcome: &str) -> Vec<String> {
    run_lines(node, step, steps, outcome)
        .into_iter()
        .map(|l| {
            l.replace("\"rank\":0", &format!("\"rank\":{rank}"))
                .replace(
                    &format!("{node}:1:{step}"),
                    &format!("{node}:{rank}:{step}"),
                )
        })
        .collect()
}

/// `node`'s records of job 7, summarised as the epilog reads them.
fn summary_of(dir: &Path, node: &str) -> fabric_proto::tag::RunSummary {
    let me = nix::unistd::getuid().as_raw();
    let jd = crate::record::JobDir::open(&dir.join("spool"), "7", Some(me))
        .unwrap()
        .unwrap();
    let limits = crate::record::ReadLimits {
        owner_uid: Some(me),
        ..Default::default()
    };
    crate::record::summarize(&jd.read_records(&format!("{node}.jsonl"), &limits).unwrap()).unwrap()
}

/// The end of step `step_id` on `node` of a step on `nodes`, the other nodes' payloads given.
fn multi_step_end(
    dir: &Path,
    nodes: &str,
    node: &str,
    step_id: u32,
    peers: &[(&str, serde_json::Value)],
    slurm: &FakeSlurm,
) -> (StepEnd, FakeMeet, Lines) {
    let mut s = setup(dir, Script::StepEnd, nodes, node, &["policy=enforce"]);
    s.inv.step_id = Some(step_id);
    let runner = FakeRunner::answering(vec![]);
    let meet = FakeMeet {
        peers: peers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.clone()))
            .collect(),
        ..FakeMeet::default()
    };
    let lines = Lines::default();
    let done = end_of_step(&step(&s, seams(slurm, &runner, &meet, &lines)));
    (done, meet, lines)
}

fn step_payload(run: &fabric_proto::tag::RunSummary) -> serde_json::Value {
    serde_json::to_value(crate::jobstep::payload::StepEndPayload {
        run: Some(run.clone()),
        this_step: true,
    })
    .unwrap()
}

fn epilog_payload(run: &fabric_proto::tag::RunSummary) -> serde_json::Value {
    serde_json::to_value(crate::jobstep::payload::EpilogPayload {
        run: Some(run.clone()),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn a_two_node_steps_first_node_writes_both_nodes_summary_live_and_the_epilog_then_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n1", &rank_lines("n1", 0, "0", 5, "accepted"));
    append(dir.path(), "n2", &rank_lines("n2", 1, "0", 5, "accepted"));
    let n2 = summary_of(dir.path(), "n2");
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    let (done, meet, lines) = multi_step_end(
        dir.path(),
        "n[1-2]",
        "n1",
        0,
        &[("n2", step_payload(&n2))],
        &slurm,
    );
    assert_eq!(done, StepEnd::Written(TagWrite::Live), "{}", lines.text());
    // The step's own meeting, among the step's nodes.
    let sent = meet.sent.borrow();
    assert_eq!(sent[0].0.meeting, Meeting::StepEnd(0));
    assert_eq!(sent[0].0.nodes, ["n1", "n2"]);
    let json = live_json(&slurm);
    assert_eq!(json["run"]["ranks"], 2, "both nodes' ranks: {json}");
    assert_eq!(json["run"]["steps"], 5, "rank 0's steps: {json}");
    assert!(
        lines.has("(2 node(s) heard at this end)"),
        "{}",
        lines.text()
    );
    // The epilog merges the same records with the same rule: nothing new, nothing written, so
    // the tag stays plain JSON (no `b32:` write after the job).
    let writes = |s: &FakeSlurm| {
        s.calls()
            .iter()
            .filter(|c| matches!(c, Call::SetAdminComment(_) | Call::SetAdminCommentDb(_)))
            .count()
    };
    let before = writes(&slurm);
    let s = setup(
        dir.path(),
        Script::Epilog,
        "n[1-2]",
        "n1",
        &["policy=enforce"],
    );
    let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
    let meet = FakeMeet {
        peers: [("n2".to_owned(), epilog_payload(&n2))].into(),
        ..FakeMeet::default()
    };
    let elines = Lines::default();
    epilog::run(&step(&s, seams(&slurm, &runner, &meet, &elines)));
    assert_eq!(writes(&slurm), before, "{}", elines.text());
    assert!(
        elines.has("the tag already holds this; not rewritten"),
        "{}",
        elines.text()
    );
    assert!(slurm.current_comment().starts_with("fabric-check/v1 {"));
    // The kept summaries went with the job.
    assert!(!dir.path().join("state/n1/step-runs-7.json").exists());
}

#[test]
fn a_follower_of_a_multi_node_step_hands_its_summary_to_the_first_node_without_a_slurm_call() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n2", &rank_lines("n2", 1, "3", 4, "accepted"));
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    let (done, meet, _) = multi_step_end(dir.path(), "n[1-2]", "n2", 3, &[], &slurm);
    assert_eq!(done, StepEnd::Delivered);
    assert_eq!(slurm.calls(), vec![]);
    let sent = meet.sent.borrow();
    let (req, payload) = &sent[0];
    assert_eq!((req.rank, req.meeting), (1, Meeting::StepEnd(3)));
    assert_eq!(payload["this_step"], true);
    assert_eq!(payload["run"]["steps"], 4);
}

#[test]
fn the_batch_scripts_end_after_a_two_node_step_keeps_both_nodes_in_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n1", &rank_lines("n1", 0, "0", 5, "accepted"));
    append(dir.path(), "n2", &rank_lines("n2", 1, "0", 5, "accepted"));
    let n2 = summary_of(dir.path(), "n2");
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    multi_step_end(
        dir.path(),
        "n[1-2]",
        "n1",
        0,
        &[("n2", step_payload(&n2))],
        &slurm,
    );
    assert_eq!(live_json(&slurm)["run"]["ranks"], 2);
    // The batch script's step runs on the first node alone: it merges what the step's end
    // heard from n2 instead of writing n1's summary over both.
    let (done, meet, lines) = multi_step_end(
        dir.path(),
        "n1",
        "n1",
        fabric_proto::invocation::BATCH_STEP_ID,
        &[],
        &slurm,
    );
    assert_eq!(
        done,
        StepEnd::Written(TagWrite::Unchanged),
        "{}",
        lines.text()
    );
    assert!(meet.sent.borrow().is_empty(), "one node: no meeting");
    assert_eq!(live_json(&slurm)["run"]["ranks"], 2);
}

#[test]
fn a_multi_node_step_whose_nodes_have_no_record_of_it_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n1", &rank_lines("n1", 0, "0", 5, "accepted"));
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    let quiet = serde_json::to_value(crate::jobstep::payload::StepEndPayload::default()).unwrap();
    // Step 1 ran no fabric-run anywhere: n1's records are step 0's, n2 has none.
    let (done, _, _) = multi_step_end(dir.path(), "n[1-2]", "n1", 1, &[("n2", quiet)], &slurm);
    assert_eq!(done, StepEnd::NoRecords);
    assert_eq!(slurm.calls(), vec![]);
}

// ---- the batch script's end and the step ends still in flight on its node ------------------

/// Job 7 with a two-node step 1 whose records are on both nodes; n2's summary.
fn two_node_step_one(dir: &Path) -> fabric_proto::tag::RunSummary {
    append(dir, "n1", &rank_lines("n1", 0, "1", 5, "accepted"));
    append(dir, "n2", &rank_lines("n2", 1, "1", 5, "accepted"));
    summary_of(dir, "n2")
}

/// Step 1's end on its first node n1, in a thread of the test (as slurmstepd runs it beside the
/// batch script's): it starts after `start_after` and meets n2 for `meeting` (its own fake
/// Slurm, whose live tag it returns; what it keeps for the batch end is on disk).
fn leader_of_step_one(
    dir: &Path,
    n2: &fabric_proto::tag::RunSummary,
    start_after: std::time::Duration,
    meeting: std::time::Duration,
) -> std::thread::JoinHandle<(StepEnd, serde_json::Value)> {
    let dir = dir.to_owned();
    let payload = step_payload(n2);
    std::thread::spawn(move || {
        std::thread::sleep(start_after);
        let mut s = setup(&dir, Script::StepEnd, "n[1-2]", "n1", &["policy=enforce"]);
        s.inv.step_id = Some(1);
        let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
        let runner = FakeRunner::answering(vec![]);
        let meet = FakeMeet {
            peers: [("n2".to_owned(), payload)].into(),
            delay: meeting,
            ..FakeMeet::default()
        };
        let lines = Lines::default();
        let done = end_of_step(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        (done, live_json(&slurm))
    })
}

/// The batch script's end on n1 (job 7 on n1 and n2), with how long it took.
fn batch_end(dir: &Path, slurm: &FakeSlurm) -> (StepEnd, Lines, std::time::Duration) {
    let started = std::time::Instant::now();
    let (done, _, lines) = multi_step_end(
        dir,
        "n1",
        "n1",
        fabric_proto::invocation::BATCH_STEP_ID,
        &[],
        slurm,
    );
    (done, lines, started.elapsed())
}

#[test]
fn a_batch_end_that_starts_while_a_steps_first_node_is_still_meeting_waits_and_keeps_both_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let n2 = two_node_step_one(dir.path());
    let ms = std::time::Duration::from_millis;
    let leader = leader_of_step_one(dir.path(), &n2, ms(0), ms(700));
    // srun has returned and the batch script ended while step 1's end is gathering.
    std::thread::sleep(ms(150));
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    let (done, lines, _) = batch_end(dir.path(), &slurm);
    // It waited for step 1's end, which wrote both nodes' summary: the batch end's own summary
    // (n1's records and what step 1's end heard from n2) is that one, so it asks slurmctld
    // nothing. Without the wait it would have written n1 alone.
    assert_eq!(
        done,
        StepEnd::Written(TagWrite::Unchanged),
        "{}",
        lines.text()
    );
    assert_eq!(slurm.calls(), vec![], "{}", lines.text());
    assert!(lines.has("waiting for the step ends"), "{}", lines.text());
    assert!(lines.has("are over after"), "{}", lines.text());
    let (leader_done, leader_tag) = leader.join().unwrap();
    assert_eq!(leader_done, StepEnd::Written(TagWrite::Live));
    assert_eq!(
        leader_tag["run"]["ranks"], 2,
        "n2's ranks, heard at step 1's meeting, are in the live tag"
    );
}

#[test]
fn a_batch_end_that_starts_before_the_last_steps_end_has_begun_waits_for_it_too() {
    let dir = tempfile::tempdir().unwrap();
    let n2 = two_node_step_one(dir.path());
    let ms = std::time::Duration::from_millis;
    // slurmstepd has not spawned step 1's end yet when the batch script's end starts: no lock
    // is held, but n1's records name step 1 and its end is not over.
    let leader = leader_of_step_one(dir.path(), &n2, ms(400), ms(300));
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    let (done, lines, _) = batch_end(dir.path(), &slurm);
    assert_eq!(
        done,
        StepEnd::Written(TagWrite::Unchanged),
        "it waited for step 1's end and found its summary written: {}",
        lines.text()
    );
    assert_eq!(slurm.calls(), vec![], "{}", lines.text());
    let (leader_done, leader_tag) = leader.join().unwrap();
    assert_eq!(leader_done, StepEnd::Written(TagWrite::Live));
    assert_eq!(leader_tag["run"]["ranks"], 2);
}

#[test]
fn a_batch_end_with_no_step_end_in_flight_or_to_come_does_not_wait() {
    let dir = tempfile::tempdir().unwrap();
    let n2 = two_node_step_one(dir.path());
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    // Step 1's end came and went before the batch script ended.
    let (done, _, _) = multi_step_end(
        dir.path(),
        "n[1-2]",
        "n1",
        1,
        &[("n2", step_payload(&n2))],
        &slurm,
    );
    assert_eq!(done, StepEnd::Written(TagWrite::Live));
    let (done, lines, took) = batch_end(dir.path(), &slurm);
    assert_eq!(
        done,
        StepEnd::Written(TagWrite::Unchanged),
        "{}",
        lines.text()
    );
    assert!(!lines.has("waiting for the step ends"), "{}", lines.text());
    assert!(
        took < crate::jobstep::step_end::STEP_END_GRACE,
        "no wait: {took:?}"
    );
    assert_eq!(live_json(&slurm)["run"]["ranks"], 2);
    // The epilog takes the list of ended steps with the kept summaries.
    epilog_on(dir.path(), &slurm);
    assert!(!dir.path().join("state/n1/step-ends-7").exists());
}

#[test]
fn a_batch_end_whose_steps_end_never_comes_waits_only_the_grace_and_writes_its_own_node() {
    let dir = tempfile::tempdir().unwrap();
    // Step 1's end on n1 was killed before it listed itself (or the job's records name a step
    // that never ran: the job's words cost at most the grace).
    two_node_step_one(dir.path());
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    let (done, lines, took) = batch_end(dir.path(), &slurm);
    assert_eq!(done, StepEnd::Written(TagWrite::Live), "{}", lines.text());
    assert!(lines.has("no step end is running"), "{}", lines.text());
    assert!(
        took >= crate::jobstep::step_end::STEP_END_GRACE,
        "{took:?}: the grace"
    );
    assert_eq!(
        live_json(&slurm)["run"]["ranks"],
        1,
        "n1 alone; the epilog adds n2"
    );
}

#[test]
fn a_batch_end_whose_records_name_thirty_thousand_steps_logs_a_bounded_wait_and_its_tag_write_is_relayed()
 {
    let dir = tempfile::tempdir().unwrap();
    append(dir.path(), "n1", &rank_lines("n1", 0, "1", 5, "accepted"));
    // The job's records name 30,000 made-up steps, none of whose ends will come.
    let made_up: Vec<String> = (100..30_100)
        .map(|id| {
            line(
                "n1",
                &id.to_string(),
                12.0,
                r#""type":"step","duration_s":1.0"#,
            )
        })
        .collect();
    append(dir.path(), "n1", &made_up);
    let slurm = FakeSlurm::with_nodes(&["n1", "n2"]);
    let (done, lines, _) = batch_end(dir.path(), &slurm);
    let text = lines.text();
    let head = |t: &str| t.chars().take(600).collect::<String>();
    assert_eq!(done, StepEnd::Written(TagWrite::Live), "{}", head(&text));
    // The plugin relays the child's first 64 KiB: root's line about the tag write is there.
    let output = format!("{text}\n");
    let relayed = String::from_utf8_lossy(
        &output.as_bytes()[..output.len().min(fabric_proto::invocation::MAX_CHILD_OUTPUT)],
    );
    assert!(
        relayed.contains("run summary of n1 in the live tag"),
        "root's line was pushed out of the relayed output: {}",
        head(&text)
    );
    for l in relayed.lines() {
        assert!(l.len() < 512, "an unbounded line: {}", head(l));
    }
    let named = "30001 steps: 1, 100, 101, 102, 103, 104, 105, 106 and 29993 more";
    assert_eq!(
        lines.count(named),
        2,
        "the wait and its end: {}",
        head(&text)
    );
}

#[test]
fn health_removes_the_step_end_files_of_a_job_whose_epilog_never_ran_after_a_week_only() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "step-runs-7.json",
        "step-run-written-7.json",
        "step-ends-7",
        "prolog-tag-7.json",
        "tags-written.jsonl",
    ] {
        std::fs::write(dir.path().join(name), "{}").unwrap();
    }
    let now = std::time::SystemTime::now();
    let day = std::time::Duration::from_secs(86_400);
    assert_eq!(
        crate::jobstep::step_end::remove_leftovers(dir.path(), now + day),
        0,
        "a day old: the epilog may still come"
    );
    assert_eq!(
        crate::jobstep::step_end::remove_leftovers(dir.path(), now + 8 * day),
        3
    );
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["prolog-tag-7.json", "tags-written.jsonl"]);
}
