//! The watch's decisions and its loop, on fakes.
use super::*;
use super::{acting::*, life::*, outputs::*, sampling::*, tracker::*};
use crate::jobstep::{JobStep, Setup, now_unix};
use crate::probe::CounterSnapshot;
use crate::testing::{Call, FakeMeet, FakeRunner, FakeSlurm, Lines, report, seams, setup, step};
use fabric_proto::invocation::Script;
use fabric_proto::notice::FabricNotice;
use fabric_proto::tag::WatchEvent;
use fabric_proto::tag::{self, Verdict};
use fabric_proto::verdict::{Finding, Severity};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn fail(check: &str, device: &str, msg: &str) -> Finding {
    Finding::new(
        check,
        Severity::Fail,
        Some(device),
        Some(1),
        Value::Null,
        Value::Null,
        msg.into(),
    )
}

#[test]
fn a_fault_the_job_started_with_is_not_news_but_a_new_one_is_reported_once() {
    let old = fail("ib.port_rate", "mlx5_1", "half rate");
    let mut t = Tracker::new(std::slice::from_ref(&old));
    assert_eq!(t.observe(std::slice::from_ref(&old), true), vec![]);
    let down = fail("ib.port_state", "mlx5_3", "DOWN");
    let both = [old.clone(), down.clone()];
    assert_eq!(
        t.observe(&both, true),
        vec![Change::Appeared(Fault::of(&down))]
    );
    assert_eq!(t.observe(&both, true), vec![], "reported once");
}

#[test]
fn a_flap_is_reported_when_it_appears_when_it_clears_and_again_when_it_returns() {
    let mut t = Tracker::new(&[]);
    let down = fail("ib.port_state", "mlx5_3", "DOWN");
    assert_eq!(t.observe(std::slice::from_ref(&down), true).len(), 1);
    assert_eq!(
        t.observe(&[], true),
        vec![Change::Cleared(Fault::of(&down))]
    );
    assert_eq!(
        t.observe(std::slice::from_ref(&down), true),
        vec![Change::Appeared(Fault::of(&down))]
    );
}

#[test]
fn a_sample_without_the_tools_neither_finds_nor_clears_a_pfc_fault() {
    let mut t = Tracker::new(&[]);
    let pfc = fail("roce.pfc", "mlx5_0", "PFC off on priority 3");
    assert_eq!(t.observe(std::slice::from_ref(&pfc), false), vec![]);
    assert_eq!(t.observe(std::slice::from_ref(&pfc), true).len(), 1);
    assert_eq!(
        t.observe(&[], false),
        vec![],
        "not judged without the tools"
    );
    assert_eq!(
        t.observe(&[], true).len(),
        1,
        "cleared once the tools say so"
    );
}

#[test]
fn a_counter_reset_mid_job_moves_the_baseline_so_later_errors_still_count() {
    let mut base = CounterSnapshot::default();
    base.ports
        .entry("mlx5_0/1".into())
        .or_default()
        .counters
        .insert("symbol_error".into(), 1000);
    let mut now = CounterSnapshot::default();
    now.ports
        .entry("mlx5_0/1".into())
        .or_default()
        .counters
        .insert("symbol_error".into(), 3);
    rebase(&mut base, &now);
    assert_eq!(base.ports["mlx5_0/1"].counters["symbol_error"], 3);
    // A counter that rose is left alone: the rise is measured from the job's start.
    now.ports
        .get_mut("mlx5_0/1")
        .unwrap()
        .counters
        .insert("symbol_error".into(), 700);
    rebase(&mut base, &now);
    assert_eq!(base.ports["mlx5_0/1"].counters["symbol_error"], 3);
}

struct Script3(VecDeque<Vec<Finding>>);
impl Sampler for Script3 {
    fn sample(&mut self) -> Option<Sample> {
        let mut r = report("n1", Verdict::Pass);
        r.findings = self.0.pop_front().unwrap_or_default();
        Some(Sample {
            report: r,
            tools_ran: true,
        })
    }
}
/// A pace of `n` samples whose clock moves 150 s a sample: past the hold-down at each.
struct Samples(usize);
impl Pace for Samples {
    fn sleep(&mut self, _d: Duration) {}
    fn now_s(&self) -> u64 {
        10_000_000 - self.0 as u64 * 150
    }
    fn should_stop(&mut self) -> bool {
        if self.0 == 0 {
            return true;
        }
        self.0 -= 1;
        false
    }
}
struct FakeAct<'a> {
    slurm: &'a FakeSlurm,
    lines: &'a Lines,
    runner: FakeRunner,
    meet: FakeMeet,
    actions: RefCell<u32>,
}
impl<'a> FakeAct<'a> {
    fn on(slurm: &'a FakeSlurm, lines: &'a Lines) -> Self {
        Self {
            slurm,
            lines,
            runner: FakeRunner::answering(vec![]),
            meet: FakeMeet::default(),
            actions: RefCell::new(0),
        }
    }
}
impl Act for FakeAct<'_> {
    fn with_step(&self, setup: &Setup, f: &mut dyn FnMut(&JobStep<'_>)) {
        *self.actions.borrow_mut() += 1;
        f(&step(
            setup,
            seams(self.slurm, &self.runner, &self.meet, self.lines),
        ));
    }
}

fn watch_a_port_going_down(
    policy: &str,
) -> (FakeSlurm, Lines, WatchSummary, String, tempfile::TempDir) {
    watch_a_port_going_down_with(policy, &[], false)
}

fn watch_a_port_going_down_with(
    policy: &str,
    more: &[&str],
    job_asks_requeue: bool,
) -> (FakeSlurm, Lines, WatchSummary, String, tempfile::TempDir) {
    let down = fail("ib.port_state", "mlx5_3", "mlx5_3 port 1 is DOWN");
    let samples = vec![vec![], vec![], vec![down.clone()], vec![down], vec![]];
    let (slurm, lines, summary, notices, dir) =
        watch_these(policy, more, samples, job_asks_requeue);
    if policy != "observe" {
        let prom = std::fs::read_to_string(dir.path().join("watch.prom")).unwrap();
        assert!(
            prom.contains("fabric_check_watch_faults_total{node=\"n1\",check=\"ib.port_state\"} 1"),
            "{prom}"
        );
    }
    (slurm, lines, summary, notices, dir)
}

/// The watch of job 7 on n1 (of n[1-4]) under `policy`, one of `samples` per interval, 600 s
/// into the job: its summary, the notice file's text and the state folder.
fn watch_these(
    policy: &str,
    more: &[&str],
    samples: Vec<Vec<Finding>>,
    job_asks_requeue: bool,
) -> (FakeSlurm, Lines, WatchSummary, String, tempfile::TempDir) {
    // One more sample, all clear, 150 s on: past the hold-down of a fault that cleared at the
    // last one.
    let mut pace = Samples(samples.len() + 1);
    watch_these_paced(policy, more, samples, job_asks_requeue, &mut pace)
}

/// [`watch_these`] on `pace`'s clock.
fn watch_these_paced(
    policy: &str,
    more: &[&str],
    samples: Vec<Vec<Finding>>,
    job_asks_requeue: bool,
    pace: &mut dyn Pace,
) -> (FakeSlurm, Lines, WatchSummary, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let pol = format!("policy={policy}");
    let mut args = vec![pol.as_str()];
    args.extend_from_slice(more);
    let s = setup(dir.path(), Script::Watch, "n[1-4]", "n1", &args);
    let slurm = FakeSlurm::with_nodes(&["n1", "n2", "n3", "n4"]);
    let lines = Lines::default();
    let act = FakeAct::on(&slurm, &lines);
    let mut sampler = Script3(samples.into());
    let spool = dir.path().join("spool/7");
    std::fs::create_dir_all(&spool).unwrap();
    if job_asks_requeue {
        std::fs::write(spool.join("fabric-run-requeue-n1"), "").unwrap();
    }
    let notice_at = spool.join("fabric-notice-n1.jsonl");
    let job_dir = crate::record::JobDir::open(&dir.path().join("spool"), "7", s.inv.job_uid)
        .unwrap()
        .unwrap();
    let mut notice = NoticeFile::create(&job_dir, "n1").unwrap();
    let textfile = dir.path().join("watch.prom");
    let summary = run(
        &s,
        Duration::from_millis(1),
        now_unix() - 600,
        &[],
        &mut sampler,
        &act,
        pace,
        Some(&mut notice),
        Some(&textfile),
    );
    let notices = std::fs::read_to_string(&notice_at).unwrap();
    (slurm, lines, summary, notices, dir)
}

#[test]
fn under_enforce_a_port_that_goes_down_mid_job_drains_tags_live_and_tells_the_job() {
    let (slurm, lines, summary, notices, _dir) = watch_a_port_going_down("enforce");
    assert_eq!(summary.samples, 6);
    assert_eq!(summary.appeared, vec!["ib.port_state"]);
    assert_eq!(
        summary.cleared,
        vec!["ib.port_state"],
        "the flap is recorded"
    );
    assert!(summary.drained);
    let n1 = slurm.node("n1").unwrap();
    assert!(n1.is_drained(), "{}", lines.text());
    assert!(
        n1.reason
            .starts_with("fabric-check: ib.port_state: during job 7"),
        "{}",
        n1.reason
    );
    let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
    let row = t
        .during
        .iter()
        .find(|d| d.node == "n1")
        .expect("a live during entry");
    assert_eq!(row.verdict, Verdict::Fail);
    assert_eq!(row.watch.len(), 1);
    let ev = &row.watch[0];
    assert_eq!(ev.check, "ib.port_state");
    assert!(ev.drained);
    assert!((600..700).contains(&ev.into_job_s), "{}", ev.into_job_s);
    assert!(ev.cleared_at_s.is_some(), "the clearing is recorded");
    let n = FabricNotice::parse_line(notices.lines().next().unwrap()).unwrap();
    assert_eq!(
        (n.job, n.node.as_str(), n.check.as_str(), n.drained),
        (7, "n1", "ib.port_state", true)
    );
}

#[test]
fn a_job_that_asked_is_requeued_after_the_drain_only_where_on_fault_requeue_allows_it_and_its_tag_says_so()
 {
    let requeues = |slurm: &FakeSlurm| {
        slurm
            .calls()
            .iter()
            .filter(|c| matches!(c, Call::Requeue(7)))
            .count()
    };
    let (slurm, lines, summary, notices, _dir) =
        watch_a_port_going_down_with("enforce", &["on_fault=requeue"], true);
    assert!(summary.drained && summary.requeued, "{}", lines.text());
    assert_eq!(requeues(&slurm), 1, "once, for this job alone");
    assert!(lines.has("watch: requeued job 7"), "{}", lines.text());
    let n = FabricNotice::parse_line(notices.lines().next().unwrap()).unwrap();
    assert!(n.drained && n.requeued);
    let requeued_in_tag = |slurm: &FakeSlurm| {
        let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
        t.during.iter().flat_map(|d| &d.watch).any(|e| e.requeued)
    };
    assert!(
        requeued_in_tag(&slurm),
        "the tag's watch event says the job was requeued"
    );

    let (slurm, lines, summary, _, _dir) = watch_a_port_going_down_with("enforce", &[], true);
    assert!(summary.drained && !summary.requeued);
    assert!(!requeued_in_tag(&slurm));
    assert_eq!(requeues(&slurm), 0, "the admin did not allow it");
    assert!(lines.has("on_fault=requeue"), "{}", lines.text());

    let (slurm, _, summary, _, _dir) =
        watch_a_port_going_down_with("enforce", &["on_fault=requeue"], false);
    assert!(!summary.requeued);
    assert_eq!(requeues(&slurm), 0, "the job did not ask");

    let (slurm, _, summary, _, _dir) =
        watch_a_port_going_down_with("warn", &["on_fault=requeue"], true);
    assert!(!summary.requeued);
    assert_eq!(requeues(&slurm), 0, "no drain, no requeue");
}

#[test]
fn a_watch_whose_job_is_gone_ends_without_draining_tagging_or_telling_anyone() {
    struct Gone(usize);
    impl Pace for Gone {
        fn sleep(&mut self, _d: Duration) {}
        fn should_stop(&mut self) -> bool {
            self.0 = self.0.saturating_sub(1);
            self.0 == 0
        }
        fn job_still_here(&mut self) -> bool {
            false
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let s = enforcing_watch_of_n1(dir.path());
    let lines = Lines::default();
    // A port goes down on the second sample, with no slurmstepd of the job on the host.
    let port_down_without_a_stepd = |slurm: &FakeSlurm| {
        let act = FakeAct::on(slurm, &lines);
        let down = fail("ib.port_state", "mlx5_3", "mlx5_3 port 1 is DOWN");
        let mut sampler = Script3([vec![], vec![down]].into());
        run(
            &s,
            Duration::from_millis(1),
            now_unix() - 600,
            &[],
            &mut sampler,
            &act,
            &mut Gone(5),
            None,
            None,
        )
    };
    let slurm = FakeSlurm::with_nodes(&["n1", "n2", "n3", "n4"]).job_finished();
    let summary = port_down_without_a_stepd(&slurm);
    assert!(summary.job_gone);
    assert!(summary.appeared.is_empty(), "nothing acted on: {summary:?}");
    assert!(!slurm.node("n1").unwrap().is_drained());
    assert_eq!(
        slurm.calls(),
        vec![Call::JobRunning(7)],
        "one question, no drain, no tag"
    );

    // A node of a batch job where no step runs yet: no slurmstepd here, but slurmctld says
    // the job runs, so the watch acts.
    let slurm = FakeSlurm::with_nodes(&["n1", "n2", "n3", "n4"]);
    let summary = port_down_without_a_stepd(&slurm);
    assert!(!summary.job_gone && summary.drained, "{}", lines.text());
}

#[test]
fn under_warn_the_watch_tags_and_tells_but_never_drains() {
    let (slurm, lines, summary, notices, _dir) = watch_a_port_going_down("warn");
    assert!(!summary.drained);
    assert!(!slurm.node("n1").unwrap().is_drained(), "{}", lines.text());
    let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
    assert_eq!(t.during[0].watch.len(), 1);
    assert_eq!(notices.lines().count(), 1);
}

#[test]
fn under_observe_the_watch_only_logs() {
    let (slurm, lines, summary, notices, _dir) = watch_a_port_going_down("observe");
    assert_eq!(summary.appeared, vec!["ib.port_state"]);
    assert!(!slurm.node("n1").unwrap().is_drained());
    assert!(slurm.current_comment().is_empty(), "no tag under observe");
    assert!(notices.is_empty());
    assert!(lines.has("watch: ib.port_state"), "{}", lines.text());
}

#[test]
fn a_healthy_job_costs_no_slurm_call() {
    let dir = tempfile::tempdir().unwrap();
    let s = setup(dir.path(), Script::Watch, "n1", "n1", &[]);
    let slurm = FakeSlurm::with_nodes(&["n1"]);
    let lines = Lines::default();
    let act = FakeAct::on(&slurm, &lines);
    let mut sampler = Script3(VecDeque::new());
    let summary = run(
        &s,
        Duration::from_millis(1),
        now_unix(),
        &[],
        &mut sampler,
        &act,
        &mut Samples(50),
        None,
        None,
    );
    assert_eq!(summary.samples, 50);
    assert_eq!(slurm.calls(), vec![]);
    assert_eq!(*act.actions.borrow(), 0);
}

/// A stand-in watch of job 7: `program args` in a process group of its own, named by a pid
/// file in `state_dir` as the watch names itself.
fn stand_in_watch(
    state_dir: &Path,
    program: &str,
    args: &[&str],
) -> (std::process::Child, PidFile) {
    use std::os::unix::process::CommandExt;
    let child = std::process::Command::new(program)
        .args(args)
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id();
    let pf = PidFile {
        pid,
        start: start_time(Path::new("/proc"), pid).unwrap(),
    };
    pf.write(&pid_path(state_dir, 7)).unwrap();
    (child, pf)
}

#[test]
fn the_epilog_ends_a_running_watch_and_says_when_it_was_lost() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = Path::new("/proc");
    // A stand-in watch that ignores nothing.
    let (mut child, pf) = stand_in_watch(dir.path(), "sleep", &["30"]);
    assert_eq!(
        stop(dir.path(), proc_root, 7, Duration::from_secs(2)),
        Stopped::Ended
    );
    let status = child.wait().unwrap();
    assert!(!status.success(), "ended by a signal");
    assert!(!pid_path(dir.path(), 7).exists());
    // A pid file whose process is gone (or whose pid was reused) is a lost watch, not a kill.
    pf.write(&pid_path(dir.path(), 7)).unwrap();
    assert_eq!(
        stop(dir.path(), proc_root, 7, Duration::from_secs(1)),
        Stopped::Lost
    );
    assert_eq!(
        stop(dir.path(), proc_root, 7, Duration::from_secs(1)),
        Stopped::NoWatch
    );
}

#[test]
fn the_notice_file_is_never_created_through_a_planted_link() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(spool.join("7")).unwrap();
    let target = dir.path().join("root-file");
    std::fs::write(&target, "keep").unwrap();
    std::os::unix::fs::symlink(&target, spool.join("7/fabric-notice-n1.jsonl")).unwrap();
    let me = Some(nix::unistd::getuid().as_raw());
    let job_dir = crate::record::JobDir::open(&spool, "7", me)
        .unwrap()
        .unwrap();
    assert!(NoticeFile::create(&job_dir, "n1").is_err());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
}

#[test]
fn a_job_folder_swapped_for_a_link_never_leads_roots_notice_into_another_folder() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    // A root-only folder, and the job's folder replaced by a link to it.
    let private = dir.path().join("root-only");
    std::fs::create_dir(&private).unwrap();
    std::os::unix::fs::symlink(&private, spool.join("7")).unwrap();
    let me = Some(nix::unistd::getuid().as_raw());
    assert!(crate::record::JobDir::open(&spool, "7", me).is_err());
    // Opened before the swap: the notice lands in the folder that was checked.
    std::fs::remove_file(spool.join("7")).unwrap();
    std::fs::create_dir(spool.join("7")).unwrap();
    let job_dir = crate::record::JobDir::open(&spool, "7", me)
        .unwrap()
        .unwrap();
    std::fs::rename(spool.join("7"), spool.join("7.away")).unwrap();
    std::os::unix::fs::symlink(&private, spool.join("7")).unwrap();
    let mut notice = NoticeFile::create(&job_dir, "n1").unwrap();
    notice
        .append(&FabricNotice::new(7, "n1", "ib.port_state", "down", 1))
        .unwrap();
    assert_eq!(
        std::fs::read_dir(&private).unwrap().count(),
        0,
        "nothing in the root-only folder"
    );
    assert!(spool.join("7.away/fabric-notice-n1.jsonl").is_file());
}

#[test]
fn a_warning_that_appears_mid_job_is_tagged_and_told_to_the_job_at_once_but_never_drains() {
    let mut storm = fail(
        "roce.congestion",
        "mlx5_0",
        "rx_prio3_pause rose by 4000000 in 20 s",
    );
    storm.severity = Severity::Warn;
    let (slurm, lines, summary, notices, _dir) = watch_these(
        "enforce",
        &[],
        vec![vec![], vec![storm.clone()], vec![storm]],
        false,
    );
    assert_eq!(
        summary.appeared,
        vec!["roce.congestion"],
        "{}",
        lines.text()
    );
    assert!(!summary.drained);
    assert!(!slurm.node("n1").unwrap().is_drained());
    let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
    let row = t
        .during
        .iter()
        .find(|d| d.node == "n1")
        .expect("a live entry");
    assert_eq!(row.verdict, Verdict::Warn);
    assert_eq!(row.watch.len(), 1, "recorded once");
    assert!(row.watch[0].warn && !row.watch[0].drained);
    assert_eq!(notices.lines().count(), 1, "told once: {notices}");
    let n = fabric_proto::notice::FabricNotice::parse_line(notices.lines().next().unwrap())
        .expect("a notice");
    assert!(n.warn && !n.drained, "{notices}");
}

#[test]
fn a_warning_that_turns_into_a_failure_is_a_new_fault() {
    let mut t = Tracker::new(&[]);
    let mut warn = fail("ib.counters", "mlx5_3", "symbol_error rising");
    warn.severity = Severity::Warn;
    let failing = fail("ib.counters", "mlx5_3", "symbol_error over its bound");
    assert_eq!(
        t.observe(std::slice::from_ref(&warn), true),
        vec![Change::Appeared(Fault::of(&warn))]
    );
    let changes = t.observe(std::slice::from_ref(&failing), true);
    assert!(
        changes.contains(&Change::Appeared(Fault::of(&failing))),
        "{changes:?}"
    );
    assert!(
        changes.contains(&Change::Cleared(Fault::of(&warn))),
        "{changes:?}"
    );
}

#[test]
fn the_watch_keeps_each_event_on_the_node_so_the_epilog_can_tag_it_whatever_the_live_write_did() {
    let (_slurm, _lines, _summary, _notices, dir) = watch_a_port_going_down("enforce");
    let kept = read_events(&events_path(&dir.path().join("state/n1"), 7));
    assert_eq!(kept.len(), 1, "{kept:?}");
    let ev = &kept[0];
    assert_eq!(ev.check, "ib.port_state");
    assert!(ev.drained, "the state after the drain is the one kept");
    assert!(ev.cleared_at_s.is_some(), "the clearing is kept too");
    assert!(!ev.warn);
}

#[test]
fn under_observe_the_watch_keeps_no_event_for_the_tag() {
    let (_slurm, _lines, _summary, _notices, dir) = watch_a_port_going_down("observe");
    assert!(!events_path(&dir.path().join("state/n1"), 7).exists());
}

#[test]
fn an_events_file_gives_each_events_last_state_skips_bad_lines_and_keeps_at_most_the_tags_share() {
    let dir = tempfile::tempdir().unwrap();
    let path = events_path(dir.path(), 7);
    let ev = |check: &str, seen: u64| WatchEvent {
        check: check.into(),
        message: format!("{check} went bad\u{1b}[31m"),
        seen_at_s: seen,
        into_job_s: 5,
        cleared_at_s: None,
        drained: false,
        requeued: false,
        warn: false,
    };
    let mut lines = vec![
        serde_json::to_string(&ev("ib.port_state", 100)).unwrap(),
        "not json".to_owned(),
    ];
    let mut drained = ev("ib.port_state", 100);
    drained.drained = true;
    lines.push(serde_json::to_string(&drained).unwrap());
    for i in 0..20 {
        lines.push(serde_json::to_string(&ev("ib.counters", 200 + i)).unwrap());
    }
    std::fs::write(&path, lines.join("\n")).unwrap();
    let kept = read_events(&path);
    assert_eq!(kept.len(), tag::MAX_WATCH_EVENTS);
    assert_eq!(kept[0].check, "ib.port_state");
    assert!(kept[0].drained, "the later line of the same event wins");
    assert!(
        !kept[0].message.contains('\u{1b}'),
        "control characters are scrubbed: {:?}",
        kept[0].message
    );
    assert_eq!(kept[1].seen_at_s, 200, "the first ones are kept");
}

#[test]
fn an_events_file_planted_as_a_link_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(
        &elsewhere,
        r#"{"check":"ib.port_state","message":"x","seen_at_s":1,"into_job_s":1}"#,
    )
    .unwrap();
    let path = events_path(dir.path(), 7);
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    assert!(read_events(&path).is_empty());
}

#[test]
fn the_epilogs_stop_signals_the_watch_alone_so_a_slurm_call_it_is_making_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = Path::new("/proc");
    let started = dir.path().join("call-started");
    let done = dir.path().join("call-done");
    // A stand-in watch whose child (its Slurm call) is in its process group.
    let script = format!(
        "(touch {}; sleep 0.5; touch {}) & wait",
        started.display(),
        done.display()
    );
    let (mut child, _) = stand_in_watch(dir.path(), "sh", &["-c", &script]);
    // The call is under way before the epilog's stop (a SIGTERM before the fork ends it all).
    let until = Instant::now() + Duration::from_secs(5);
    while !started.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = Instant::now();
    assert_eq!(
        stop(dir.path(), proc_root, 7, Duration::from_secs(3)),
        Stopped::Ended
    );
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "the watch ended on its SIGTERM, not at the grace's SIGKILL"
    );
    let _ = child.wait();
    let until = Instant::now() + Duration::from_secs(5);
    while !done.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        done.exists(),
        "the child of the watch was not killed by the stop's SIGTERM"
    );
}

#[test]
fn two_ports_that_fail_one_check_in_the_same_second_are_two_events_on_the_node_and_in_the_tag() {
    let a = fail("ib.port_state", "mlx5_3", "mlx5_3 port 1 is DOWN");
    let b = fail("ib.port_state", "mlx5_5", "mlx5_5 port 1 is DOWN");
    let both = vec![a.clone(), b.clone()];
    // Under `warn` nothing waits between the two (a drain's settle step would put seconds
    // between their times).
    let (slurm, _lines, summary, _notices, dir) =
        watch_these("warn", &[], vec![vec![], both.clone(), both, vec![]], false);
    assert_eq!(summary.appeared, vec!["ib.port_state", "ib.port_state"]);
    let kept = read_events(&events_path(&dir.path().join("state/n1"), 7));
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept.iter().all(|e| e.cleared_at_s.is_some()), "{kept:?}");
    let mut messages: Vec<&str> = kept.iter().map(|e| e.message.as_str()).collect();
    messages.sort_unstable();
    assert_eq!(messages, vec![a.message.as_str(), b.message.as_str()]);
    let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
    let live = &t.during.iter().find(|d| d.node == "n1").unwrap().watch;
    assert_eq!(live.len(), 2, "{live:?}");
    // The epilog's row (from the events file) and the live row merge into the same two.
    let mut row = super::super::tag_update::during_row("n1");
    for ev in kept {
        super::super::tag_update::push_watch_event(&mut row, ev);
    }
    let merged = super::super::tag_update::merge_during(t.during.clone(), vec![row]);
    assert_eq!(merged[0].watch.len(), 2, "{merged:?}");
}

#[test]
fn when_one_of_two_ports_down_on_one_check_comes_back_the_tag_marks_that_one_cleared() {
    let a = fail("ib.port_state", "mlx5_3", "mlx5_3 port 1 is DOWN");
    let b = fail("ib.port_state", "mlx5_5", "mlx5_5 port 1 is DOWN");
    let both = vec![a.clone(), b.clone()];
    let (slurm, _lines, summary, _notices, dir) = watch_these(
        "warn",
        &[],
        vec![vec![], both.clone(), both, vec![b.clone()]],
        false,
    );
    assert_eq!(summary.cleared, vec!["ib.port_state"]);
    let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
    let live = &t.during.iter().find(|d| d.node == "n1").unwrap().watch;
    let state = |events: &[WatchEvent], msg: &str| {
        events
            .iter()
            .find(|e| e.message == msg)
            .map(|e| e.cleared_at_s.is_some())
    };
    assert_eq!(state(live, &a.message), Some(true), "{live:?}");
    assert_eq!(state(live, &b.message), Some(false), "{live:?}");
    let kept = read_events(&events_path(&dir.path().join("state/n1"), 7));
    assert_eq!(state(&kept, &a.message), Some(true), "{kept:?}");
    assert_eq!(state(&kept, &b.message), Some(false), "{kept:?}");
}

/// A process in the fake `/proc` at `root`: its command line, name and real uid.
fn fake_process(root: &Path, pid: u32, cmdline: &str, name: &str, uid: u32) {
    let d = root.join(pid.to_string());
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cmdline"), format!("{cmdline}\0")).unwrap();
    std::fs::write(
        d.join("status"),
        format!("Name:\t{name}\nState:\tS (sleeping)\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
    )
    .unwrap();
}

#[test]
fn only_roots_slurmstepd_says_the_job_runs() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path();
    // The job's user names a process after the job's slurmstepd (and sets its comm).
    fake_process(proc_root, 100, "slurmstepd: [7.0]", "slurmstepd", 1000);
    // Root runs something whose command line mentions it.
    fake_process(proc_root, 101, "grep slurmstepd: [7.0]", "grep", 0);
    assert!(!job_has_stepd(proc_root, 7));
    fake_process(proc_root, 102, "slurmstepd: [7.batch]", "slurmstepd", 0);
    assert!(job_has_stepd(proc_root, 7));
    assert!(!job_has_stepd(proc_root, 8));
}

#[test]
fn an_orphaned_watch_kept_company_by_a_users_process_named_slurmstepd_does_not_drain() {
    /// The real pace's look at `/proc`, with samples counted.
    struct Counted(RealPace, usize);
    impl Pace for Counted {
        fn sleep(&mut self, _d: Duration) {}
        fn should_stop(&mut self) -> bool {
            self.1 = self.1.saturating_sub(1);
            self.1 == 0 || self.0.should_stop()
        }
        fn job_still_here(&mut self) -> bool {
            self.0.job_still_here()
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let s = enforcing_watch_of_n1(dir.path());
    let proc_root = dir.path().join("proc");
    fake_process(&proc_root, 4242, "slurmstepd: [7.0]", "slurmstepd", 1000);
    std::fs::create_dir_all(&s.state_dir).unwrap();
    let me = PidFile { pid: 1, start: 1 };
    let pid_at = pid_path(&s.state_dir, 7);
    me.write(&pid_at).unwrap();
    // The epilog ran no child (mode=off was set while the job ran): the pid file stays.
    let mut pace = Counted(
        RealPace {
            pid_path: pid_at,
            me,
            proc_root,
            job: 7,
            last_seen: Instant::now(),
            last_scan: Instant::now(),
            term: Default::default(),
        },
        5,
    );
    let slurm = FakeSlurm::with_nodes(&["n1", "n2", "n3", "n4"]).job_finished();
    let lines = Lines::default();
    let act = FakeAct::on(&slurm, &lines);
    let down = fail("ib.port_state", "mlx5_3", "mlx5_3 port 1 is DOWN");
    let summary = run(
        &s,
        Duration::from_millis(1),
        now_unix() - 600,
        &[],
        &mut Script3([vec![], vec![down]].into()),
        &act,
        &mut pace,
        None,
        None,
    );
    assert!(summary.job_gone, "{summary:?} {}", lines.text());
    assert!(!slurm.node("n1").unwrap().is_drained(), "{}", lines.text());
}

#[test]
fn past_max_watches_the_prolog_starts_no_watch_and_the_tag_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let s = setup(dir.path(), Script::Prolog, "n1", "n1", &["max_watches=2"]);
    std::fs::create_dir_all(&s.state_dir).unwrap();
    let proc_root = Path::new("/proc");
    let me = PidFile {
        pid: std::process::id(),
        start: start_time(proc_root, std::process::id()).unwrap(),
    };
    // A watch that died left its pid file: it does not count.
    PidFile {
        pid: me.pid,
        start: me.start + 1,
    }
    .write(&pid_path(&s.state_dir, 40))
    .unwrap();
    me.write(&pid_path(&s.state_dir, 41)).unwrap();
    let prolog = |s: &Setup| {
        let slurm = FakeSlurm::with_nodes(&["n1"]);
        let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
        let lines = Lines::default();
        crate::jobstep::prolog::run(&step(
            s,
            seams(&slurm, &runner, &FakeMeet::default(), &lines),
        ));
        let started = runner.watches.borrow().len();
        (slurm, lines, started)
    };
    let (_, lines, started) = prolog(&s);
    assert_eq!(
        started,
        1,
        "one live watch of two allowed: {}",
        lines.text()
    );
    // Two other jobs' watches run: job 7 goes unwatched.
    me.write(&pid_path(&s.state_dir, 42)).unwrap();
    let (slurm, lines, started) = prolog(&s);
    assert_eq!(started, 0, "{}", lines.text());
    assert!(
        lines
            .has("job 7 is not watched: 2 in-job watches already run on this node (max_watches=2)"),
        "{}",
        lines.text()
    );
    let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
    assert!(
        t.notes.iter().any(|n| n.contains("job 7 is not watched")),
        "{:?}",
        t.notes
    );
}

#[test]
fn eight_watches_run_on_a_node_unless_max_watches_says_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let s = setup(dir.path(), Script::Prolog, "n1", "n1", &[]);
    assert_eq!(s.plugin.max_watches, 8);
}

/// The watch of job 7 on n1 of n[1-4] under `policy=enforce`, its folders in `dir`.
fn enforcing_watch_of_n1(dir: &Path) -> Setup {
    setup(dir, Script::Watch, "n[1-4]", "n1", &["policy=enforce"])
}

/// A pace of `n` samples one second apart.
struct Seconds(usize, u64);
impl Pace for Seconds {
    fn sleep(&mut self, _d: Duration) {}
    fn now_s(&self) -> u64 {
        self.1
    }
    fn should_stop(&mut self) -> bool {
        if self.0 == 0 {
            return true;
        }
        self.0 -= 1;
        self.1 += 1;
        false
    }
}

#[test]
fn a_fault_that_returns_within_the_hold_down_is_one_fault_with_its_flaps_counted() {
    let down = fail("ib.port_state", "mlx5_2", "mlx5_2 port 1 is DOWN");
    let mut t = Tracker::new(&[]).hold_down(Duration::from_secs(120));
    let mut appeared = 0;
    let mut cleared = 0;
    // 40 flaps in 24 s: down 0.3 s, up 0.3 s, one sample each.
    for i in 0..80u64 {
        let seen: &[Finding] = if i % 2 == 0 {
            std::slice::from_ref(&down)
        } else {
            &[]
        };
        for c in t.observe_at(seen, true, 1_000 + i * 3 / 10) {
            match c {
                Change::Appeared(_) => appeared += 1,
                Change::Cleared(_) => cleared += 1,
            }
        }
    }
    assert_eq!((appeared, cleared), (1, 0));
    assert_eq!(t.flaps("ib.port_state|mlx5_2|1|fail"), 39);
    assert_eq!(t.holding(), 1);
    // Clear for the whole hold-down: cleared once.
    assert!(t.observe_at(&[], true, 1_100).is_empty());
    assert_eq!(t.observe_at(&[], true, 1_024 + 120).len(), 1);
}

#[test]
fn a_port_flapping_forty_times_costs_one_drain_one_tag_entry_and_one_notice() {
    let down = fail("ib.port_state", "mlx5_2", "mlx5_2 port 1 is DOWN");
    // 40 flaps, a sample a second: all within the hold-down.
    let samples: Vec<Vec<Finding>> = (0..80)
        .map(|i| {
            if i % 2 == 0 {
                vec![down.clone()]
            } else {
                vec![]
            }
        })
        .collect();
    let (slurm, lines, summary, notices, _dir) =
        watch_these_paced("enforce", &[], samples, false, &mut Seconds(80, 5_000));
    assert_eq!(summary.appeared, ["ib.port_state"], "{}", lines.text());
    assert!(summary.cleared.is_empty(), "still in its hold-down");
    let drains = slurm
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Drain { .. }))
        .count();
    assert_eq!(drains, 1);
    assert_eq!(notices.lines().count(), 1, "{notices}");
    let t = tag::extract(&slurm.current_comment()).unwrap().unwrap();
    let row = t.during.iter().find(|d| d.node == "n1").unwrap();
    assert_eq!(row.watch.len(), 1);
}

#[test]
fn a_big_jobs_watches_spread_their_acting_over_at_most_ten_seconds() {
    assert_eq!(act_delay(0, 1), Duration::ZERO);
    assert_eq!(act_delay(3, 4), Duration::from_millis(30));
    assert_eq!(act_delay(0, 1000), Duration::ZERO);
    assert_eq!(act_delay(500, 1000), Duration::from_secs(5));
    assert!(act_delay(9999, 10_000) < Duration::from_secs(10));
    // Evenly: a thousand watches, at most about a hundred a second.
    let mut per_s = [0u32; 10];
    for i in 0..1000 {
        per_s[act_delay(i, 1000).as_secs() as usize] += 1;
    }
    assert!(per_s.iter().all(|n| *n == 100), "{per_s:?}");
}

/// A [`Spec`] of the watch of job 7 on n1 in `dir`, telling no job.
fn spec_in(dir: &std::path::Path) -> Spec {
    let s = setup(dir, Script::Watch, "n1", "n1", &["policy=warn"]);
    Spec {
        snapshot: crate::jobstep::snapshot_path(&s.state_dir, 7),
        interval: Duration::from_millis(1),
        proc_root: PathBuf::from("/proc"),
        expect: crate::config::Config::default().for_node("n1"),
        roots: crate::probe::gather::Roots::for_sysfs(dir.join("sysfs"), "/proc".into(), None),
        known: None,
        notice: false,
        metrics: None,
        term: std::sync::Arc::default(),
        setup: s,
    }
}

#[test]
fn a_session_without_the_prologs_snapshot_does_not_open_and_leaves_no_pid_file() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_in(dir.path());
    let pid_at = pid_path(&spec.setup.state_dir, 7);
    let err = Session::open(spec, &Lines::default()).unwrap_err();
    assert!(matches!(err, OpenError::NoSnapshot(_, 7)), "{err}");
    assert!(
        err.to_string()
            .ends_with("the watch does not run for job 7"),
        "{err}"
    );
    assert!(!pid_at.exists());
}

#[test]
fn a_session_opens_from_the_snapshot_the_prolog_saved_and_its_stop_removes_its_pid_file() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_in(dir.path());
    let step_snapshot = {
        let s = &spec.setup;
        crate::jobstep::snapshot_path(&s.state_dir, s.inv.job_id)
    };
    assert_eq!(spec.snapshot, step_snapshot);
    assert!(spec.snapshot.ends_with("job-7.json"));
    std::fs::write(
        &spec.snapshot,
        serde_json::to_vec(&report("n1", Verdict::Pass)).unwrap(),
    )
    .unwrap();
    let pid_at = pid_path(&spec.setup.state_dir, 7);
    let session = Session::open(spec, &Lines::default()).unwrap();
    assert_eq!(session.setup().inv.job_id, 7);
    assert_eq!(
        PidFile::read(&pid_at).map(|p| p.pid),
        Some(std::process::id())
    );
    session.stop();
    assert!(!pid_at.exists());
}

#[test]
fn a_session_dated_back_by_a_drills_file_for_its_job_says_so_and_leaves_the_prologs_snapshot_as_it_was()
 {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_in(dir.path());
    let state_dir = spec.setup.state_dir.clone();
    let now_s = now_unix();
    let mut prolog = report("n1", Verdict::Pass);
    prolog.counters.taken_unix_ms = (now_s - 2) * 1000;
    let snapshot = spec.snapshot.clone();
    std::fs::write(&snapshot, serde_json::to_vec(&prolog).unwrap()).unwrap();
    let as_written = std::fs::read(&snapshot).unwrap();
    let hook = drill_age::path(&state_dir);
    let write_hook = |job: u32| {
        let f = fabric_proto::drill_age::DrillJobAge::new(job, 86_400, now_s);
        std::fs::write(&hook, serde_json::to_vec(&f).unwrap()).unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
    };
    write_hook(7);
    let lines = Lines::default();
    let session = Session::open(spec, &lines).unwrap();
    assert_eq!(session.dated_back_s(), 86_400);
    assert_eq!(session.started_at_s(), now_s - 2 - 86_400);
    assert!(
        lines.has("watch: job 7's start is dated back 86400 s by a fault drill"),
        "{}",
        lines.text()
    );
    assert_eq!(
        std::fs::read(&snapshot).unwrap(),
        as_written,
        "the epilog judges the job from the snapshot as the prolog wrote it"
    );
    session.stop();
    // Another job's file: job 7 keeps its real start.
    write_hook(8);
    let lines = Lines::default();
    let session = Session::open(spec_in(dir.path()), &lines).unwrap();
    assert_eq!(session.dated_back_s(), 0);
    assert_eq!(session.started_at_s(), now_s - 2);
    assert!(lines.has("it is for job 8, not job 7"), "{}", lines.text());
    session.stop();
}
