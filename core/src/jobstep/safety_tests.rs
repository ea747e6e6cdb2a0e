//! Issue 12 on the fakes: what a job user can write never drains a node, and the mass-drain
//! guard holds whatever the timing.

use crate::deadline::Budget;
use crate::jobstep::{epilog, payload::EpilogPayload};
use crate::stepgate::StepResult;
use crate::testing::{Call, FakeMeet, FakeRunner, FakeSlurm, Lines, report, seams, setup, step};
use fabric_proto::invocation::{JobStepExit, Script};
use fabric_proto::tag::{self, CollectiveSummary, JobTag, Reporter, SlowClaim, Verdict};

const FOUR: &[&str] = &["n1", "n2", "n3", "n4"];

fn tag_of(slurm: &FakeSlurm) -> JobTag {
    tag::extract(&slurm.current_comment())
        .expect("a fabric-check tag in AdminComment")
        .expect("a readable tag")
}

fn drain_calls(slurm: &FakeSlurm) -> usize {
    slurm
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Drain { .. }))
        .count()
}

mod forged_drains {
    use super::*;
    use std::io::Write;

    /// What a job user can leave in `<spool>/7/`: a step gate result naming the node slow with
    /// the user's own text, and `fabric-run` records.
    fn forge_spool(dir: &std::path::Path, node: &str) {
        let spool = dir.join("spool/7");
        std::fs::create_dir_all(&spool).unwrap();
        let forged = StepResult {
            step: 3,
            node: node.into(),
            collective: CollectiveSummary {
                verdict: Some(Verdict::Fail),
                outliers: vec![node.into()],
                ..CollectiveSummary::default()
            },
            slow_here: true,
            message: Some("ignore previous reason | drained by the user".into()),
        };
        std::fs::write(spool.join(format!("{node}.steps.jsonl")), forged.to_line()).unwrap();
        let mut f = std::fs::File::create(spool.join(format!("{node}.jsonl"))).unwrap();
        let meta = format!(
            r#""v":1,"run":"a","node":"{node}","rank":0,"job_id":"7","step_id":"0","restart_count":0"#
        );
        for (ts, body) in [
            (10.0, r#""type":"step_start","pid":1,"cmd":["train"]"#),
            (11.0, r#""type":"step","duration_s":1.0"#),
            (
                13.0,
                r#""type":"step_end","duration_s":3.0,"exit_code":0,"signal":null,"outcome":"completed","attempts":1,"on_time":true"#,
            ),
        ] {
            writeln!(f, "{{\"ts\":{ts},{meta},{body}}}").unwrap();
        }
    }

    #[test]
    fn a_forged_slow_step_result_under_enforce_drains_nothing_and_is_tagged_as_reported_by_the_job()
    {
        let dir = tempfile::tempdir().unwrap();
        forge_spool(dir.path(), "n1");
        let s = setup(
            dir.path(),
            Script::Epilog,
            "n[1-2]",
            "n1",
            &["policy=enforce", "max_drain=1"],
        );
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
        // The other node's epilog relays its own user's forged claim to the leader.
        let peer = EpilogPayload {
            slow: vec![SlowClaim {
                node: "n2".into(),
                step: 3,
                message: Some("forged too".into()),
            }],
            ..EpilogPayload::default()
        };
        let meet = FakeMeet {
            peers: [("n2".to_owned(), serde_json::to_value(peer).unwrap())].into(),
            ..FakeMeet::default()
        };
        let lines = Lines::default();
        let exit = epilog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        assert_eq!(exit, JobStepExit::Proceed);
        assert_eq!(drain_calls(&slurm), 0, "{}", lines.text());
        assert!(!slurm.node("n1").unwrap().is_drained());
        assert!(
            lines.has("named n1 slow (reported by the job, not a reason to drain)"),
            "{}",
            lines.text()
        );
        let t = tag_of(&slurm);
        assert_eq!(
            t.collective, None,
            "root's collective field is not the job's to fill"
        );
        assert_eq!(t.job_reported.reported_by, Reporter::Job);
        let claimed: Vec<&str> = t
            .job_reported
            .slow
            .iter()
            .map(|c| c.node.as_str())
            .collect();
        assert_eq!(claimed, vec!["n1", "n2"], "{t:?}");
        assert_eq!(
            t.job_reported.steps.as_ref().and_then(|c| c.verdict),
            Some(Verdict::Fail)
        );
        let run = t.run.expect("the records' summary");
        assert_eq!(run.reported_by, Reporter::Job);
        let json = tag::splice("", &tag_of(&slurm));
        assert!(
            json.contains(r#""job_reported":{"reported_by":"job""#),
            "the tag says who reported it: {json}"
        );
    }

    #[test]
    fn forged_claims_on_every_node_leave_the_guard_free_for_a_real_fault() {
        let dir = tempfile::tempdir().unwrap();
        let slurm = FakeSlurm::with_nodes(FOUR);
        for n in ["n2", "n3"] {
            forge_spool(dir.path(), n);
            let s = setup(
                dir.path(),
                Script::Epilog,
                "n[2-3]",
                n,
                &["policy=enforce", "max_drain=1"],
            );
            let runner = FakeRunner::answering(vec![Ok(report(n, Verdict::Pass))]);
            let meet = FakeMeet::default();
            let lines = Lines::default();
            epilog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        }
        assert_eq!(drain_calls(&slurm), 0);
        // A fault root's own probe finds still gets the one drain the guard allows.
        let s = setup(
            dir.path(),
            Script::Epilog,
            "n1",
            "n1",
            &["policy=enforce", "max_drain=1"],
        );
        std::fs::write(
            s.state_dir.join("job-7.json"),
            serde_json::to_vec(&report("n1", Verdict::Pass)).unwrap(),
        )
        .unwrap();
        let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Fail))]);
        let meet = FakeMeet::default();
        let lines = Lines::default();
        epilog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        assert!(slurm.node("n1").unwrap().is_drained(), "{}", lines.text());
    }
}

mod health_after_a_job_drain {
    use super::*;
    use crate::jobstep::health::{self, HealthSetup};
    use fabric_proto::plugin_args::PluginArgs;

    #[test]
    fn an_epilog_drain_starts_the_clean_probe_streak_over_so_health_does_not_resume_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let state = format!("state_dir={}/state/%n", dir.path().display());
        let (plugin, _) = PluginArgs::parse([state.as_str()]);
        let hs = HealthSetup::new("n1".into(), plugin, 3).unwrap();
        let slurm = FakeSlurm::with_nodes(FOUR);
        let lines = Lines::default();
        let clean = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
        // Three clean health runs while the node is in service: a streak of 3.
        for _ in 0..3 {
            health::run(&hs, &slurm, &clean, &lines).unwrap();
        }
        // The epilog's own probe finds a fault and drains the node.
        let s = setup(dir.path(), Script::Epilog, "n1", "n1", &["policy=enforce"]);
        std::fs::write(
            s.state_dir.join("job-7.json"),
            serde_json::to_vec(&report("n1", Verdict::Pass)).unwrap(),
        )
        .unwrap();
        let failing = FakeRunner::answering(vec![Ok(report("n1", Verdict::Fail))]);
        let meet = FakeMeet::default();
        epilog::run(&step(&s, seams(&slurm, &failing, &meet, &lines)));
        assert!(slurm.node("n1").unwrap().is_drained(), "{}", lines.text());
        // The next health run counts from zero and leaves the drain in place.
        health::run(&hs, &slurm, &clean, &lines).unwrap();
        assert!(
            slurm.node("n1").unwrap().is_drained(),
            "resumed right after the epilog's drain: {}",
            lines.text()
        );
        assert!(
            lines.has("n1: clean probe 1 of 3 before resuming"),
            "{}",
            lines.text()
        );
    }
}

mod mass_drain_storm {
    use super::*;
    use crate::drain::is_ours;
    use crate::jobstep::health::{self, HealthSetup};
    use crate::jobstep::prolog;
    use crate::testing::{Fault, FaultPlan, SharedCluster};
    use fabric_proto::plugin_args::PluginArgs;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    /// Slurm calls that take up to 25 ms, and each fails (or, for a drain, lands but its client
    /// times out) about one time in seven.
    fn stormy(seed: u64) -> FaultPlan {
        let mut rng = fastrand::Rng::with_seed(seed);
        Box::new(move |method| {
            let delay = Duration::from_millis(rng.u64(0..25));
            let fault = match (method, rng.u8(0..100)) {
                (_, 0..15) => Fault::Fail,
                ("drain", 15..30) => Fault::AppliedThenTimeout,
                _ => Fault::None,
            };
            (delay, fault)
        })
    }

    #[derive(Debug, Clone, Copy)]
    enum Run {
        Prolog,
        Epilog,
        Health,
    }

    /// One node's run of `what` on a common fault (every probe fails), through `cluster`.
    fn fail_on(cluster: &SharedCluster, dir: &std::path::Path, node: &str, what: Run, seed: u64) {
        let words = ["policy=enforce", "max_drain=1", "timeout=3"];
        let runner = FakeRunner::answering(vec![Ok(report(node, Verdict::Fail))]);
        let lines = Lines::default();
        let meet = FakeMeet::default();
        match what {
            Run::Prolog | Run::Epilog => {
                let script = if matches!(what, Run::Prolog) {
                    Script::Prolog
                } else {
                    Script::Epilog
                };
                let s = setup(dir, script, node, node, &words);
                if matches!(what, Run::Epilog) {
                    std::fs::write(
                        s.state_dir.join("job-7.json"),
                        serde_json::to_vec(&report(node, Verdict::Pass)).unwrap(),
                    )
                    .unwrap();
                }
                let slurm = cluster.view(stormy(seed), s.deadline);
                let st = step(
                    &s,
                    crate::jobstep::Seams {
                        slurm: &slurm,
                        runner: &runner,
                        meet: &meet,
                        relay: &lines,
                    },
                );
                if matches!(what, Run::Prolog) {
                    prolog::run(&st);
                } else {
                    epilog::run(&st);
                }
            }
            Run::Health => {
                let state = format!("state_dir={}/state/%n", dir.display());
                let (plugin, _) = PluginArgs::parse(words.iter().copied().chain([state.as_str()]));
                let hs = HealthSetup::new(node.into(), plugin, 3).unwrap();
                let slurm = cluster.view(stormy(seed), hs.deadline);
                let _ = health::run(&hs, &slurm, &runner, &lines);
            }
        }
    }

    /// The nodes drained with a reason of ours.
    pub(super) fn drained_by_fabric_check(cluster: &SharedCluster) -> Vec<String> {
        cluster
            .nodes()
            .into_iter()
            .filter(|n| n.is_drained() && is_ours(&n.reason))
            .map(|n| n.name)
            .collect()
    }

    /// Four nodes fail at once (a common fault) in prologs, an epilog and health runs, with
    /// `max_drain=1` and slow, failing and timing-out Slurm calls; 20 seeded repetitions with
    /// varied start times and faults.
    #[test]
    fn a_storm_of_four_failures_through_prolog_epilog_and_health_drains_at_most_one_node() {
        let mut drained_somewhere = 0;
        for rep in 0..20u64 {
            let dir = tempfile::tempdir().unwrap();
            let cluster = SharedCluster::new(FOUR, Duration::from_millis(20));
            let mut rng = fastrand::Rng::with_seed(rep);
            let kinds = [Run::Prolog, Run::Epilog, Run::Health, Run::Health];
            let start = Arc::new(Barrier::new(FOUR.len()));
            let threads: Vec<_> = FOUR
                .iter()
                .enumerate()
                .map(|(i, node)| {
                    let (cluster, start) = (cluster.clone(), start.clone());
                    let dir = dir.path().to_owned();
                    let node = (*node).to_owned();
                    let what = kinds[(i + rep as usize) % kinds.len()];
                    let jitter = Duration::from_millis(rng.u64(0..30));
                    let seed = rep * 100 + i as u64;
                    std::thread::spawn(move || {
                        start.wait();
                        std::thread::sleep(jitter);
                        fail_on(&cluster, &dir, &node, what, seed);
                    })
                })
                .collect();
            for t in threads {
                t.join().expect("a job step thread panicked");
            }
            let drained = drained_by_fabric_check(&cluster);
            assert!(
                drained.len() <= 1,
                "repetition {rep}: fabric-check drained {drained:?} with max_drain=1"
            );
            drained_somewhere += drained.len();
        }
        assert!(
            drained_somewhere > 0,
            "the guard must still let one node drain in some storm"
        );
    }
}

mod decision_line {
    use super::*;
    use crate::jobstep::prolog;
    use crate::testing::NodesAnswer;

    fn prolog_on_n1(slurm: &FakeSlurm) -> (JobStepExit, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), Script::Prolog, "n1", "n1", &["max_drain=2"]);
        let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Fail))]);
        let meet = FakeMeet::default();
        let lines = Lines::default();
        let exit = prolog::run(&step(&s, seams(slurm, &runner, &meet, &lines)));
        (exit, lines.text().lines().map(str::to_owned).collect())
    }

    #[test]
    fn the_prolog_says_drained_as_soon_as_the_drain_is_applied_before_the_settle_step() {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let (exit, lines) = prolog_on_n1(&slurm);
        assert_eq!(exit, JobStepExit::Drained);
        let drained = lines
            .iter()
            .position(|l| l.starts_with("drained n1"))
            .unwrap();
        assert_eq!(
            lines[drained + 1],
            JobStepExit::Drained.line(),
            "the decision line follows the drain at once: {lines:?}"
        );
        assert_eq!(lines.last(), Some(&JobStepExit::Drained.line()));
    }

    #[test]
    fn a_drain_the_settle_step_undoes_is_followed_at_once_by_a_proceed_line() {
        let slurm = FakeSlurm::with_nodes(FOUR).answer_nodes_call(
            1,
            NodesAnswer::Fail("Unable to contact slurm controller".into()),
        );
        let (exit, lines) = prolog_on_n1(&slurm);
        assert_eq!(exit, JobStepExit::Proceed, "{lines:?}");
        let said = lines
            .iter()
            .position(|l| *l == JobStepExit::Drained.line())
            .expect("the decision line after the drain");
        assert!(
            lines[said..]
                .iter()
                .take_while(|l| !l.starts_with("timing:"))
                .any(|l| *l == JobStepExit::Proceed.line()),
            "the undo is said at once, before the later phases: {lines:?}"
        );
        assert_eq!(
            JobStepExit::from_output(&lines.join("\n")),
            Some(JobStepExit::Proceed)
        );
    }
}

mod settle_time {
    use super::*;
    use crate::jobstep::prolog;

    #[test]
    fn a_prolog_without_the_time_to_settle_a_drain_does_not_start_one() {
        let dir = tempfile::tempdir().unwrap();
        // timeout=2: a deadline 1.8 s out, less than the 1.5 s settle wait and its 0.5 s reserve.
        let s = setup(dir.path(), Script::Prolog, "n1", "n1", &["timeout=2"]);
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Fail))]);
        let meet = FakeMeet::default();
        let lines = Lines::default();
        let exit = prolog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        assert_eq!(exit, JobStepExit::Proceed);
        assert_eq!(drain_calls(&slurm), 0);
        assert!(
            lines.has("too little to settle a drain before the deadline"),
            "{}",
            lines.text()
        );
    }
}

/// Issue 22 on the fakes: nothing a job writes can hide, forge or crowd out root's evidence.
mod roots_evidence {
    use super::*;
    use crate::jobstep::prolog;
    use std::io::Write;

    /// A segment in the form the tag reader repairs (sacctmgr's backticks), saying `pass` for a
    /// node outside the job.
    const FORGED: &str = "fabric-check/v1 {`verdict`:`pass`,`nnodes`:1,`counts`:{`pass`:1},`nodes`:{`n9`:{`verdict`:`pass`}}}";

    /// A job user's step results on `node`: `lines` results, each naming `names` nodes slow,
    /// its message carrying a forged segment.
    fn hostile_step_results(spool: &std::path::Path, node: &str, lines: usize, names: usize) {
        std::fs::create_dir_all(spool).unwrap();
        let mut f = std::fs::File::create(spool.join(format!("{node}.steps.jsonl"))).unwrap();
        for step in 0..lines {
            let r = StepResult {
                step: step as u32,
                node: node.into(),
                collective: CollectiveSummary {
                    verdict: Some(Verdict::Fail),
                    outliers: (0..names).map(|i| format!("slow-node-{i:05}")).collect(),
                    ..CollectiveSummary::default()
                },
                slow_here: true,
                message: Some(format!("x\u{1b}[2J\n {FORGED}")),
            };
            f.write_all(r.to_line().as_bytes()).unwrap();
        }
    }

    /// `fabric-run` records whose checkpoint times add up past the f64 range.
    fn overflowing_records(spool: &std::path::Path, node: &str) {
        let mut f = std::fs::File::create(spool.join(format!("{node}.jsonl"))).unwrap();
        let meta = format!(
            r#""v":1,"run":"a","node":"{node}","rank":0,"job_id":"7","step_id":"0","restart_count":0"#
        );
        for (ts, body) in [
            (10.0, r#""type":"step_start","pid":1,"cmd":["train"]"#),
            (
                11.0,
                r#""type":"checkpoint","duration_s":1.7e308,"source":"marker""#,
            ),
            (
                12.0,
                r#""type":"checkpoint","duration_s":1.7e308,"source":"marker""#,
            ),
            (
                13.0,
                r#""type":"step_end","duration_s":3.0,"exit_code":0,"signal":null,"outcome":"accepted","attempts":1,"on_time":true"#,
            ),
        ] {
            writeln!(f, "{{\"ts\":{ts},{meta},{body}}}").unwrap();
        }
    }

    /// The prolog of job 7 on n1 of `nodes` fails n1 (policy=warn: tagged, not drained); then
    /// its epilog runs over the job's hostile spool, `peers` answering the rendezvous.
    fn job_with_hostile_spool(
        dir: &std::path::Path,
        nodes: &str,
        peers: &[(&str, serde_json::Value)],
    ) -> (FakeSlurm, Lines) {
        let slurm = FakeSlurm::with_nodes(FOUR);
        let passing = crate::jobstep::payload::PrologPayload {
            result: crate::jobstep::node_result(&report("n2", Verdict::Pass)),
            notes: vec![],
            collective: None,
            fingerprint: None,
        };
        let at_prolog = FakeMeet {
            peers: peers
                .iter()
                .map(|(n, _)| ((*n).to_owned(), serde_json::to_value(&passing).unwrap()))
                .collect(),
            ..FakeMeet::default()
        };
        let meet = FakeMeet {
            peers: peers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.clone()))
                .collect(),
            ..FakeMeet::default()
        };
        let lines = Lines::default();
        let s = setup(dir, Script::Prolog, nodes, "n1", &["policy=warn"]);
        let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Fail))]);
        prolog::run(&step(&s, seams(&slurm, &runner, &at_prolog, &lines)));
        assert_eq!(
            tag_of(&slurm).verdict,
            Some(Verdict::Fail),
            "{}",
            lines.text()
        );
        let spool = dir.join("spool/7");
        hostile_step_results(&spool, "n1", 3, 4_000);
        overflowing_records(&spool, "n1");
        let s = setup(dir, Script::Epilog, nodes, "n1", &["policy=warn"]);
        let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
        epilog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        (slurm, lines)
    }

    #[test]
    fn a_forged_segment_and_overflowing_numbers_in_the_jobs_files_leave_roots_fail_in_the_tag() {
        let dir = tempfile::tempdir().unwrap();
        let (slurm, lines) = job_with_hostile_spool(dir.path(), "n1", &[]);
        let comment = slurm.current_comment();
        assert_eq!(comment.matches(tag::MARKER).count(), 1, "{comment}");
        let t = tag::extract(&comment)
            .expect("a tag")
            .unwrap_or_else(|e| panic!("root's segment does not decode: {e}: {}", lines.text()));
        assert_eq!(t.verdict, Some(Verdict::Fail));
        assert_eq!(t.result_of("n1").map(|r| r.verdict), Some(Verdict::Fail));
        assert!(t.result_of("n9").is_none(), "{t:?}");
        let run = t
            .run
            .expect("the records' summary, what could be read of it");
        assert!(run.ckpt_total_s.is_finite());
        assert!(run.malformed_lines >= 2);
    }

    #[test]
    fn an_endless_list_of_nodes_the_job_calls_slow_is_shrunk_and_never_crowds_out_roots_verdicts() {
        let dir = tempfile::tempdir().unwrap();
        let n2_fails = serde_json::json!({
            "during": {"node": "n2", "rises": {"mlx5_0/1/link_downed": 1}, "verdict": "fail"},
            "run": null,
            "steps": [],
        });
        let (slurm, lines) = job_with_hostile_spool(dir.path(), "n[1-2]", &[("n2", n2_fails)]);
        let comment = slurm.current_comment();
        let segment = &comment[comment.find(tag::MARKER).unwrap() + tag::MARKER.len()..];
        assert!(
            segment.len() <= tag::MAX_TAG_BYTES,
            "{} bytes",
            segment.len()
        );
        let t = tag_of(&slurm);
        assert_eq!(t.verdict, Some(Verdict::Fail), "{}", lines.text());
        assert_eq!(t.result_of("n1").map(|r| r.verdict), Some(Verdict::Fail));
        let n2 = t
            .during
            .iter()
            .find(|d| d.node == "n2")
            .expect("n2's counter rise");
        assert_eq!(n2.rises.get("mlx5_0/1/link_downed"), Some(&1));
        let steps = t
            .job_reported
            .steps
            .clone()
            .unwrap_or_else(|| panic!("{}", lines.text()));
        assert!(steps.outliers.len() <= tag::MAX_REPORTED_NAMES);
        assert!(t.job_reported.slow.len() <= tag::MAX_SLOW_CLAIMS);
    }

    #[test]
    fn a_followers_unreadable_run_summary_costs_only_that_part_and_its_counter_rise_arrives() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), Script::Epilog, "n[1-2]", "n1", &["policy=warn"]);
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Pass))]);
        // What a follower's records once made of its payload: `inf` sent as `null`.
        let peer = serde_json::json!({
            "during": {"node": "n2", "rises": {"mlx5_0/1/link_downed": 3}, "verdict": "fail"},
            "run": {"steps": 1, "ckpt_n": 2, "ckpt_total_s": null, "ckpt_max_s": 1.0,
                    "retries": 0, "requeues": 0, "duration_s": 1.0, "outcome": "accepted",
                    "accepted": true, "on_time": true},
            "steps": [{"verdict": "pass", "wrong": "many"}],
            "slow": "not a list",
        });
        let meet = FakeMeet {
            peers: [("n2".to_owned(), peer)].into(),
            ..FakeMeet::default()
        };
        let lines = Lines::default();
        epilog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        assert!(!lines.has("could not be read"), "{}", lines.text());
        let t = tag_of(&slurm);
        let n2 = t
            .during
            .iter()
            .find(|d| d.node == "n2")
            .expect("n2's counter rise");
        assert_eq!(n2.rises.get("mlx5_0/1/link_downed"), Some(&3));
        assert_eq!(n2.verdict, Verdict::Fail);
        assert!(t.run.is_none() && t.job_reported.is_empty(), "{t:?}");
    }

    #[test]
    fn a_follower_whose_job_wrote_the_largest_files_still_delivers_root_evidence_in_one_join() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("spool/7");
        // Just under the 256 KiB the epilog reads of a step results file.
        hostile_step_results(&spool, "n2", 40, 200);
        overflowing_records(&spool, "n2");
        let s = setup(dir.path(), Script::Epilog, "n[1-2]", "n2", &["policy=warn"]);
        std::fs::write(
            s.state_dir.join("job-7.json"),
            serde_json::to_vec(&report("n2", Verdict::Pass)).unwrap(),
        )
        .unwrap();
        let slurm = FakeSlurm::with_nodes(FOUR);
        let runner = FakeRunner::answering(vec![Ok(report("n2", Verdict::Fail))]);
        let meet = FakeMeet::default();
        let lines = Lines::default();
        epilog::run(&step(&s, seams(&slurm, &runner, &meet, &lines)));
        assert!(!lines.has("not delivered"), "{}", lines.text());
        let sent = meet.sent.borrow();
        let (_, payload) = sent.last().expect("a payload sent");
        let len = serde_json::to_vec(payload).unwrap().len();
        assert!(fabric_net::rendezvous::payload_fits(len), "{len} bytes");
        let p: EpilogPayload = serde_json::from_value(payload.clone()).unwrap();
        assert_eq!(
            p.during.map(|d| d.verdict),
            Some(Verdict::Fail),
            "root's evidence travels"
        );
        assert!(
            !spool.join("n2.steps.jsonl").exists(),
            "delivered, so the job's files are cleared"
        );
    }
}

/// Issue 22 item 5: the mass-drain guard holds however slowly slurmctld answers, up to each
/// call's own limit.
mod slow_slurmctld {
    use super::*;
    use crate::jobstep::prolog;
    use crate::testing::{Fault, FaultPlan, SharedCluster};
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    /// Prologs of one failing job on every node of `cluster` at once (`max_drain=1`,
    /// `timeout=`), each node's Slurm calls bounded at `call_limit` and delayed and faulted as
    /// `plan(node index)` says; the nodes fabric-check left drained.
    fn storm(
        cluster: &SharedCluster,
        timeout_s: u64,
        call_limit: Duration,
        plan: impl Fn(usize) -> FaultPlan + Send + Sync + 'static,
    ) -> Vec<String> {
        let plan = Arc::new(plan);
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = cluster.nodes().into_iter().map(|n| n.name).collect();
        let start = Arc::new(Barrier::new(names.len()));
        let threads: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let (cluster, start, node) = (cluster.clone(), start.clone(), node.clone());
                let dir = dir.path().to_owned();
                let plan = plan.clone();
                std::thread::spawn(move || {
                    let plan = plan(i);
                    let timeout = format!("timeout={timeout_s}");
                    let words = ["policy=enforce", "max_drain=1", timeout.as_str()];
                    let s = setup(&dir, Script::Prolog, &node, &node, &words);
                    let slurm = cluster.view_bounded(plan, s.deadline, call_limit);
                    let runner = FakeRunner::answering(vec![Ok(report(&node, Verdict::Fail))]);
                    let (meet, lines) = (FakeMeet::default(), Lines::default());
                    start.wait();
                    prolog::run(&step(
                        &s,
                        crate::jobstep::Seams {
                            slurm: &slurm,
                            runner: &runner,
                            meet: &meet,
                            relay: &lines,
                        },
                    ));
                    lines.text()
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a prolog thread panicked");
        }
        super::mass_drain_storm::drained_by_fabric_check(cluster)
    }

    #[test]
    fn every_call_answered_just_inside_its_limit_drains_no_more_than_max_drain_at_timeout_8_and_20()
    {
        let runs: Vec<_> = [8u64, 20]
            .into_iter()
            .map(|timeout_s| {
                std::thread::spawn(move || {
                    let cluster = SharedCluster::new(&["n1", "n2", "n3"], Duration::from_secs(1));
                    // The job step's own per-call limit at this timeout.
                    let limit = Budget::new(Duration::from_secs(timeout_s)).slurm_call();
                    let just_inside = limit - Duration::from_millis(20);
                    let drained = storm(&cluster, timeout_s, limit, move |_| {
                        Box::new(move |_| (just_inside, Fault::None))
                    });
                    (timeout_s, drained)
                })
            })
            .collect();
        for r in runs {
            let (timeout_s, drained) = r.join().unwrap();
            assert!(
                drained.len() <= 1,
                "timeout={timeout_s}: fabric-check drained {drained:?} with max_drain=1"
            );
        }
    }

    /// Calls that take any time up to `limit` (a third of them just inside it), some drains
    /// landing though their client timed out.
    fn latency_up_to(limit: Duration, seed: u64) -> FaultPlan {
        let mut rng = fastrand::Rng::with_seed(seed);
        Box::new(move |method| {
            let delay = if rng.u8(0..3) == 0 {
                limit - Duration::from_millis(5)
            } else {
                limit.mul_f64(rng.f64())
            };
            let fault = match (method, rng.u8(0..100)) {
                ("drain", 0..20) => Fault::AppliedThenTimeout,
                _ => Fault::None,
            };
            (delay, fault)
        })
    }

    /// Twelve seeded storms at `timeout=3`, each with its own per-call limit (0.4 s, 0.9 s or
    /// the job step's own 2 s) and latencies up to it.
    #[test]
    fn max_drain_holds_for_any_slurm_latency_up_to_the_per_call_limit() {
        let reps: Vec<_> = (0..12u64)
            .map(|rep| {
                let limit = [400, 900, 2000].map(Duration::from_millis)[rep as usize % 3];
                std::thread::spawn(move || {
                    let cluster =
                        SharedCluster::new(&["n1", "n2", "n3", "n4"], Duration::from_millis(20));
                    let drained = storm(&cluster, 3, limit, move |i| {
                        latency_up_to(limit, rep * 100 + i as u64)
                    });
                    (rep, drained)
                })
            })
            .collect();
        let mut drained_somewhere = 0;
        for r in reps {
            let (rep, drained) = r.join().unwrap();
            assert!(
                drained.len() <= 1,
                "repetition {rep}: fabric-check drained {drained:?} with max_drain=1"
            );
            drained_somewhere += drained.len();
        }
        assert!(
            drained_somewhere > 0,
            "the guard must still let one node drain"
        );
    }
}

/// Whatever a job writes (any bytes, any size within the read bounds, any number), the stored
/// tag is within 4 KiB, decodes, and holds root's verdict and evidence for every node.
mod whatever_a_job_writes {
    use crate::stepgate::StepResult;
    use crate::testing::job_files_through_the_tag;
    use fabric_proto::tag::{CollectiveSummary, Verdict};

    const FORGED: &str = "fabric-check/v1 {`verdict`:`pass`,`nodes`:{`n1`:{`verdict`:`pass`}}}";

    fn number(rng: &mut fastrand::Rng) -> String {
        match rng.u8(0..8) {
            0 => "1.7e308".into(),
            1 => "-1.7e308".into(),
            2 => "1e400".into(),
            3 => u64::MAX.to_string(),
            4 => "-0".into(),
            5 => format!("{}", rng.f64() * 1e12),
            _ => format!("{}", rng.u32(..) as f64 / 1000.0),
        }
    }

    fn text(rng: &mut fastrand::Rng, max: usize) -> String {
        let mut s = String::new();
        let len = rng.usize(..max.max(1));
        while s.len() < len {
            match rng.u8(0..6) {
                0 => s.push_str(FORGED),
                1 => s.push(char::from(rng.u8(0..32))),
                2 => s.push_str("\\u0000\\\"`}"),
                _ => s.push(rng.char('a'..='z')),
            }
        }
        s
    }

    fn records(rng: &mut fastrand::Rng) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..rng.usize(0..400) {
            let meta = format!(
                r#""v":1,"ts":{},"run":"{}","node":"n1","rank":{},"job_id":"7","step_id":"{}","restart_count":{}"#,
                number(rng),
                text(rng, 12).escape_default(),
                rng.u32(..),
                rng.u8(0..3),
                rng.u32(..)
            );
            let n = number(rng);
            let body = match rng.u8(0..8) {
                0 => r#""type":"step_start","pid":1,"cmd":["train"]"#.to_owned(),
                1 => format!(r#""type":"checkpoint","duration_s":{n},"source":"marker""#),
                2 => format!(r#""type":"restore","duration_s":{n},"source":"dir""#),
                3 => format!(r#""type":"step","duration_s":{n},"ckpt_s":{}"#, number(rng)),
                4 => format!(r#""type":"output","n":{}"#, rng.u64(..)),
                5 => format!(
                    r#""type":"step_end","duration_s":{n},"exit_code":0,"signal":null,"outcome":"accepted","attempts":{},"on_time":true"#,
                    rng.u32(..)
                ),
                6 => format!(
                    r#""type":"attempt","attempt":1,"duration_s":{n},"exit_code":1,"signal":null,"retry":true,"reason":"{}""#,
                    text(rng, 300).escape_default()
                ),
                _ => text(rng, 200),
            };
            out.extend_from_slice(format!("{{{meta},{body}}}\n").as_bytes());
            if rng.u8(0..20) == 0 {
                out.extend((0..rng.usize(0..2000)).map(|_| rng.u8(..)));
            }
        }
        out
    }

    fn step_results(rng: &mut fastrand::Rng, node: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for step in 0..rng.usize(0..40) {
            let most = if rng.bool() { 20 } else { 300 };
            let names = (0..rng.usize(0..most)).map(|_| text(rng, 40)).collect();
            let r = StepResult {
                step: step as u32,
                node: if rng.u8(0..4) == 0 {
                    text(rng, 20)
                } else {
                    node.into()
                },
                collective: CollectiveSummary {
                    verdict: Some(Verdict::Fail),
                    busbw_gb_s: Some(rng.f64() * 1e300),
                    outliers: names,
                    ..CollectiveSummary::default()
                },
                slow_here: rng.bool(),
                message: Some(text(rng, 600)),
            };
            out.extend_from_slice(r.to_line().as_bytes());
        }
        out.truncate(250 * 1024);
        out
    }

    #[test]
    fn whatever_a_job_writes_the_stored_tag_fits_decodes_and_holds_roots_verdicts_and_evidence() {
        let (mut runs, mut reported) = (0, 0);
        for seed in 0..40u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let dir = tempfile::tempdir().unwrap();
            let records = records(&mut rng);
            // Both nodes read the same file; results naming either node are kept by both.
            let node = if rng.bool() { "n1" } else { "n2" };
            let results = step_results(&mut rng, node);
            let comment = job_files_through_the_tag(dir.path(), &records, &results)
                .unwrap_or_else(|why| panic!("seed {seed}: {why}"));
            let t = fabric_proto::tag::extract(&comment).unwrap().unwrap();
            runs += usize::from(t.run.is_some());
            reported += usize::from(!t.job_reported.is_empty());
        }
        // Not a vacuous pass: the job's files were read and shown where they fit.
        assert!(
            runs > 5 && reported > 5,
            "{runs} runs, {reported} job reports"
        );
    }
}
