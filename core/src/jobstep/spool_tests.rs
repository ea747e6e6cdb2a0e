//! The epilog and the job's spool folder, on the fakes: a node's records go only once delivered,
//! and the prolog makes the folder the epilog reads.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::jobstep::{epilog, prolog};
use crate::record::prepare_job_dir;
use crate::testing::{FakeMeet, FakeRunner, FakeSlurm, Lines, report, seams, setup, step};
use fabric_proto::invocation::Script;
use fabric_proto::tag::Verdict;

const TWO: &[&str] = &["n1", "n2"];

/// `node`'s records of job 7 (one accepted run) in the folder the prolog made.
fn records(dir: &Path, node: &str) -> PathBuf {
    let spool = dir.join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let me = nix::unistd::getuid().as_raw();
    prepare_job_dir(&spool, "7", me, None).unwrap();
    let path = spool.join("7").join(format!("{node}.jsonl"));
    let mut f = std::fs::File::create(&path).unwrap();
    let meta =
        format!(r#""v":1,"run":"a","node":"{node}","rank":0,"job_id":"7","restart_count":0"#);
    for (ts, body) in [
        (10.0, r#""type":"step_start","pid":1,"cmd":["train"]"#),
        (
            13.0,
            r#""type":"step_end","duration_s":3.0,"exit_code":0,"signal":null,"outcome":"accepted","attempts":1,"on_time":true"#,
        ),
    ] {
        writeln!(f, "{{\"ts\":{ts},{meta},{body}}}").unwrap();
    }
    path
}

fn epilog_on(dir: &Path, node: &str, slurm: &FakeSlurm, meet: &FakeMeet) -> Lines {
    let s = setup(dir, Script::Epilog, "n[1-2]", node, &[]);
    let runner = FakeRunner::answering(vec![Ok(report(node, Verdict::Pass))]);
    let lines = Lines::default();
    epilog::run(&step(&s, seams(slurm, &runner, meet, &lines)));
    lines
}

#[test]
fn a_followers_records_stay_when_the_rendezvous_fails_and_go_once_the_leader_has_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = records(dir.path(), "n2");
    let slurm = FakeSlurm::with_nodes(TWO);
    let failing = FakeMeet {
        fail: Some("no leader".into()),
        ..FakeMeet::default()
    };
    let lines = epilog_on(dir.path(), "n2", &slurm, &failing);
    assert!(path.exists(), "deleted before delivery: {}", lines.text());
    assert!(
        lines.has("records were not delivered; kept in"),
        "{}",
        lines.text()
    );
    let sent = epilog_on(dir.path(), "n2", &slurm, &FakeMeet::default());
    assert!(!path.exists(), "{}", sent.text());
    assert!(
        !path.parent().unwrap().exists(),
        "the emptied folder goes too"
    );
}

#[test]
fn the_leaders_records_stay_when_the_tag_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = records(dir.path(), "n1");
    let meet = FakeMeet {
        peers: [("n2".to_owned(), serde_json::json!({}))].into(),
        ..FakeMeet::default()
    };
    let broken = FakeSlurm::with_nodes(TWO).failing("admin_comment");
    let lines = epilog_on(dir.path(), "n1", &broken, &meet);
    assert!(path.exists(), "deleted with no tag: {}", lines.text());
    let slurm = FakeSlurm::with_nodes(TWO);
    let lines = epilog_on(dir.path(), "n1", &slurm, &meet);
    assert!(!path.exists(), "{}", lines.text());
    let tag = fabric_proto::tag::extract(&slurm.current_comment())
        .unwrap()
        .unwrap();
    assert_eq!(tag.run.map(|r| r.outcome).as_deref(), Some("accepted"));
}

#[test]
fn one_nodes_epilog_leaves_the_other_nodes_records_in_a_shared_spool() {
    let dir = tempfile::tempdir().unwrap();
    let mine = records(dir.path(), "n2");
    let theirs = records(dir.path(), "n1");
    epilog_on(
        dir.path(),
        "n2",
        &FakeSlurm::with_nodes(TWO),
        &FakeMeet::default(),
    );
    assert!(!mine.exists());
    assert!(theirs.exists());
}

#[test]
fn the_prolog_makes_the_jobs_spool_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("spool")).unwrap();
    let s = setup(dir.path(), Script::Prolog, "n1", "n1", &[]);
    let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
    let (slurm, meet, lines) = (
        FakeSlurm::with_nodes(TWO),
        FakeMeet::default(),
        Lines::default(),
    );
    prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
    let md = std::fs::symlink_metadata(dir.path().join("spool/7")).unwrap();
    assert!(md.is_dir(), "{}", lines.text());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(md.mode() & 0o777, 0o700);
    assert_eq!(md.uid(), nix::unistd::getuid().as_raw());
}

#[test]
fn under_observe_the_epilog_tags_nothing_and_still_clears_the_nodes_records_and_folder() {
    let dir = tempfile::tempdir().unwrap();
    let path = records(dir.path(), "n1");
    let slurm = FakeSlurm::with_nodes(TWO);
    let s = setup(dir.path(), Script::Epilog, "n1", "n1", &["policy=observe"]);
    let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
    let lines = Lines::default();
    epilog::run(&step(
        &s,
        seams(&slurm, &runner, &FakeMeet::default(), &lines),
    ));
    assert_eq!(slurm.calls(), vec![], "observe touches nothing in Slurm");
    assert!(!path.exists(), "records left behind: {}", lines.text());
    assert!(
        !path.parent().unwrap().exists(),
        "the job's folder is left behind: {}",
        lines.text()
    );
}

#[test]
fn the_epilog_removes_the_jobs_requeue_wish_so_a_requeued_run_does_not_inherit_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = records(dir.path(), "n2");
    let wish = path.with_file_name("fabric-run-requeue-n2");
    std::fs::write(&wish, "").unwrap();
    let slurm = FakeSlurm::with_nodes(TWO);
    // The records cannot be delivered and stay; the wish goes all the same.
    let failing = FakeMeet {
        fail: Some("no leader".into()),
        ..FakeMeet::default()
    };
    let lines = epilog_on(dir.path(), "n2", &slurm, &failing);
    assert!(path.exists(), "{}", lines.text());
    assert!(
        !wish.exists(),
        "the wish outlives the job: {}",
        lines.text()
    );
    // Delivered: the folder goes too, nothing of the job's left in it.
    std::fs::write(&wish, "").unwrap();
    let sent = epilog_on(dir.path(), "n2", &slurm, &FakeMeet::default());
    assert!(
        !path.parent().unwrap().exists(),
        "the job's folder is left behind: {}",
        sent.text()
    );
}
