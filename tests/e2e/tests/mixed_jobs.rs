//! Fifty mixed jobs at once, as a cluster runs them: 1 to 4 nodes, two arrays of five, a het
//! job, jobs with and without `srun fabric-run`, jobs on a faulty node, jobs requeued by
//! `scontrol requeue`, a job whose probe panics with both quotes in its message, jobs that fail
//! and jobs without `--fabric-check`. Afterwards every job's `sacct -X -P` `AdminComment`
//! decodes with a standard JSON parser (after the documented base32 decode for the post-job
//! form) to the tag written for that job, in original case, no sibling holding another's; and
//! `fabric-check jobs` answers from the same real sacct: by exact id, by verdict, by node, with
//! the count of jobs without a tag.
//!
//! A second test removes the supported jobstats setup and shows the loss it causes reported by
//! `fabric-check health` (the tag ledger, docs/operations.md).
//!
//! The jobs run as the testbed's unprivileged user; the plugin's policy is `warn` here, so a
//! job on the faulty node runs and keeps its `fail` verdict (the drain and requeue of `enforce`
//! are `slurm_integration`'s).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fabric_e2e::{
    Testbed, heal_all, sacct_rows, sbatch_het_one_then_two, strict_tag, tag_text, wait_for,
    wait_job_end,
};
use fabric_proto::hostlist::Hostlist;
use fabric_proto::job_state::JobState;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(240);

/// The faulty node (fixture `ib8-port-down`).
const FAULTY: &str = "n4";
/// The node whose probe panics for the note job.
const NOTE_NODE: &str = "n3";
/// The probe's panic message: both quotes and upper case.
const PANIC: &str = "thread 'main' panicked at \"No Port\" on GPU-A1";
/// jobstats' payload: gzip'd JSON in base64, upper-case letters included.
const JS1: &str = "JS1:H4sIAAAAAAAAA6tWSkktLlGyUlAqS8wpTVWqBQCb1RwVEQAAAA==";

/// What was submitted: the sacct id of the job (or of the array/het leader) and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Array,
    Het,
    FabricRun,
    Requeued,
    Note,
    Untagged,
    UserFails,
}

/// One `sacct -X -P` record.
#[derive(Debug, Clone)]
struct Rec {
    raw: String,
    id: String,
    nnodes: u32,
    nodes: Vec<String>,
    state: String,
    comment: String,
}

fn records(tb: &Testbed, ids: &[u32]) -> Vec<Rec> {
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    let fields = [
        "JobIDRaw",
        "JobID",
        "NNodes",
        "NodeList",
        "State",
        "AdminComment",
    ];
    sacct_rows(tb, &list.join(","), &fields)
        .into_iter()
        .map(|r| {
            let [raw, id, nn, nl, state, comment]: [String; 6] = r.try_into().expect("six fields");
            let nodes = Hostlist::parse(&nl)
                .ok()
                .and_then(|h| h.expand().ok())
                .unwrap_or_default();
            Rec {
                raw,
                id,
                nnodes: nn.parse().unwrap_or(0),
                nodes,
                state,
                comment,
            }
        })
        .collect()
}

fn write_script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A stand-in `fabric-check` whose probe panics (stderr with both quotes, exit 101) for the job
/// named in `etc/note-job` only, on [`NOTE_NODE`]; otherwise the real one.
fn panicking_probe(tb: &Testbed) -> PathBuf {
    let path = tb.dir.join("bin/quoting-fabric-check");
    let mark = tb.dir.join("etc/note-job");
    let panic = PANIC.replace('"', "\\\"");
    write_script(
        &path,
        &format!(
            "#!/bin/sh\nif [ \"$1\" = probe ] && [ -f {m} ]; then\n  case \"$*\" in\n    *\"--node {NOTE_NODE} \"*\"job-$(cat {m}).json\"*) echo \"{panic}\" >&2; exit 101 ;;\n  esac\nfi\nexec {real} \"$@\"\n",
            m = mark.display(),
            real = tb.dir.join("bin/fabric-check").display(),
        ),
    );
    path
}

/// A batch script with one `srun fabric-run` step of three steps.
fn fabric_run_script(tb: &Testbed, work: &Path) -> PathBuf {
    let path = format!(
        "{}:/usr/sbin:/usr/bin:/sbin:/bin",
        tb.dir.join("bin").display()
    );
    let batch = work.join("run.sh");
    write_script(
        &batch,
        &format!(
            "#!/bin/sh\nexport PATH={path}\nsrun fabric-run --step-regex '^step ([0-9]+)' -- {} --steps 3 --step-sleep 0.2\n",
            tb.dir.join("bin/fake-train").display()
        ),
    );
    batch
}

/// Runs the testbed's `fabric-check` (inside the cluster's root on the matrix).
fn fabric_check(tb: &Testbed, args: &[&str]) -> std::process::Output {
    let bin = tb.dir.join("bin/fabric-check");
    tb.cmd(bin.to_str().expect("utf-8 path"), args)
}

fn fabric_check_ok(tb: &Testbed, args: &[&str]) -> String {
    let out = fabric_check(tb, args);
    assert!(
        out.status.success(),
        "fabric-check {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `fabric-check jobs ARGS --format json`: the job ids of the rows, and the rows by id.
fn jobs_json(tb: &Testbed, args: &[&str]) -> BTreeMap<String, Value> {
    let mut all = vec!["jobs"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    let text = fabric_check_ok(tb, &all);
    let rows: Vec<Value> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("jobs {args:?}: {e}: {text}"));
    rows.into_iter()
        .map(|r| (r["job_id"].as_str().unwrap_or_default().to_owned(), r))
        .collect()
}

/// The last writes of each job over every node's tag ledger (`state/<node>/tags-written.jsonl`):
/// those of the latest second (two nodes may write within one).
fn ledgers(tb: &Testbed) -> BTreeMap<String, Vec<Value>> {
    let mut last: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for n in ["n1", "n2", "n3", "n4"] {
        let path = tb.dir.join(format!("state/{n}/tags-written.jsonl"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for w in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            let job = w["job"].as_str().unwrap_or_default().to_owned();
            let at = w["at_s"].as_u64();
            let entry = last.entry(job).or_default();
            match entry.first().map(|l| l["at_s"].as_u64()) {
                Some(t) if t > at => {}
                Some(t) if t == at => entry.push(w),
                _ => *entry = vec![w],
            }
        }
    }
    last
}

/// Submits the fifty jobs; returns (sacct id, kind, records it makes).
fn submit_fifty(tb: &Testbed, work: &Path) -> Vec<(u32, Kind, usize)> {
    let run = fabric_run_script(tb, work);
    let run = run.to_str().unwrap();
    let mut jobs = Vec::new();
    // The note job first, held until the stand-in probe knows its id.
    let note = tb.sbatch(&[
        "-N1",
        "-w",
        NOTE_NODE,
        "--hold",
        "--fabric-check",
        "--wrap",
        "sleep 1",
    ]);
    std::fs::write(tb.dir.join("etc/note-job"), note.to_string()).unwrap();
    tb.ok("scontrol", &["release", &note.to_string()]);
    jobs.push((note, Kind::Note, 1));
    for i in 0..15 {
        let n = format!("-N{}", 1 + i % 4);
        let j = tb.sbatch(&[&n, "--fabric-check", "--wrap", "sleep 1"]);
        jobs.push((j, Kind::Plain, 1));
    }
    for _ in 0..2 {
        let j = tb.sbatch(&["-N1", "-a", "1-5", "--fabric-check", "--wrap", "sleep 1"]);
        jobs.push((j, Kind::Array, 5));
    }
    let het = sbatch_het_one_then_two(tb);
    jobs.push((het, Kind::Het, 2));
    for i in 0..8 {
        let n = format!("-N{}", 1 + i % 2);
        let j = tb.sbatch(&[&n, "--fabric-check", run]);
        jobs.push((j, Kind::FabricRun, 1));
    }
    // On the faulty node for certain.
    for w in [FAULTY, FAULTY, "n[3-4]"] {
        let n = if w.contains('[') { "-N2" } else { "-N1" };
        let j = tb.sbatch(&[n, "-w", w, "--fabric-check", "--wrap", "sleep 1"]);
        jobs.push((j, Kind::Plain, 1));
    }
    for _ in 0..3 {
        let j = tb.sbatch(&["-N2", "--fabric-check", "--wrap", "sleep 12"]);
        jobs.push((j, Kind::Requeued, 1));
    }
    for i in 0..6 {
        let n = format!("-N{}", 1 + i % 3);
        let j = tb.sbatch(&[&n, "--wrap", "true"]);
        jobs.push((j, Kind::Untagged, 1));
    }
    for _ in 0..2 {
        let j = tb.sbatch(&["-N1", "--fabric-check", "--wrap", "exit 3"]);
        jobs.push((j, Kind::UserFails, 1));
    }
    jobs
}

/// Requeues each job once it runs and its prolog has tagged it (RUNNING comes before the prolog
/// ends). The tag is looked for in the live job: accounting may lag by more than the job runs.
fn requeue_when_running(tb: &Testbed, jobs: &[u32]) {
    for job in jobs {
        let id = job.to_string();
        wait_for(LONG, || {
            let out = tb.cmd("scontrol", &["show", "job", &id]);
            let text = String::from_utf8_lossy(&out.stdout);
            (text.contains("JobState=RUNNING") && text.contains("AdminComment=fabric-check/v1"))
                .then_some(())
        })
        .unwrap_or_else(|| panic!("job {job} never ran tagged"));
        tb.ok("scontrol", &["requeue", &id]);
    }
}

#[test]
fn fifty_mixed_jobs_each_keep_their_own_tag_as_json_and_fabric_check_jobs_finds_them() {
    let tb = Testbed::get();
    heal_all(&tb);
    let t0 = Instant::now();
    tb.script(&["node", FAULTY, "ib8-port-down"]).unwrap();
    let probe = panicking_probe(&tb);
    let work = tb.work_dir("mixed");
    // timeout=30 (the clusters' plugstack says 10, the last word wins): fifty jobs start their
    // prologs at once on this machine's two cores, and on 26.05 one follower's verdict once
    // missed the first node's 8 s window (tagged `missing`, verdict `error`, as designed). This
    // test is about where the tags land, not about the rendezvous under that load.
    tb.with_plugstack(None, Some(&probe), "policy=warn timeout=30", || {
        let jobs = submit_fifty(&tb, &work);
        let requeued: Vec<u32> = jobs
            .iter()
            .filter(|j| j.1 == Kind::Requeued)
            .map(|j| j.0)
            .collect();
        requeue_when_running(&tb, &requeued);
        let ids: Vec<u32> = jobs.iter().map(|j| j.0).collect();
        let want: usize = jobs.iter().map(|j| j.2).sum();
        assert_eq!(want, 50, "the mix is fifty jobs");
        let kind_of = |r: &Rec| -> Kind {
            let base: u32 =
                r.id.split(['_', '+'])
                    .next()
                    .and_then(|b| b.parse().ok())
                    .unwrap_or(0);
            jobs.iter()
                .find(|j| j.0 == base)
                .map(|j| j.1)
                .expect("ours")
        };
        // Every record ended, and every tag (with its run summary) is in accounting.
        let recs = wait_for(Duration::from_secs(420), || {
            let r = records(&tb, &ids);
            let done = r.len() == want
                && r.iter().all(|x| JobState::parse(&x.state).has_ended())
                && r.iter().all(|x| {
                    let k = kind_of(x);
                    k == Kind::Untagged
                        || tag_text(&x.comment)
                            .is_some_and(|t| k != Kind::FabricRun || t.contains("\"run\":"))
                });
            done.then_some(r)
        })
        .unwrap_or_else(|| panic!("not every job ended tagged: {:#?}", records(&tb, &ids)));
        eprintln!("fifty jobs ended and tagged after {:?}", t0.elapsed());

        let written = ledgers(&tb);
        let mut tags: BTreeMap<String, Value> = BTreeMap::new();
        for r in &recs {
            let kind = kind_of(r);
            let expect_state = if kind == Kind::UserFails {
                "FAILED"
            } else {
                "COMPLETED"
            };
            assert!(r.state.starts_with(expect_state), "{r:?}");
            if kind == Kind::Untagged {
                assert!(!r.comment.contains("fabric-check/v1"), "{r:?}");
                continue;
            }
            let tag = strict_tag(&r.id, &r.comment);
            // The segment in accounting is the one written last for this job (the writers'
            // ledgers record its length and verdict), byte for byte as long.
            let segment = &r.comment[r.comment.find("fabric-check/v1 ").unwrap()..];
            let last = written
                .get(&r.id)
                .unwrap_or_else(|| panic!("job {}: no write in any node's ledger", r.id));
            assert!(
                last.iter()
                    .any(|w| w["bytes"].as_u64() == Some(segment.len() as u64)
                        && w["verdict"] == tag["verdict"]),
                "job {}: written {last:?}, in accounting {segment}",
                r.id
            );
            // Its own nodes, no sibling's: the tag names exactly the record's NodeList.
            let named: Vec<String> = tag["nodes"]
                .as_object()
                .unwrap_or_else(|| panic!("job {}: no nodes: {tag}", r.id))
                .keys()
                .cloned()
                .collect();
            let mut listed = r.nodes.clone();
            listed.sort();
            assert_eq!(named, listed, "job {} ({}): {tag}", r.id, r.raw);
            assert_eq!(tag["nnodes"], r.nnodes, "job {}: {tag}", r.id);
            let on_faulty = r.nodes.iter().any(|n| n == FAULTY);
            let want_verdict = match (kind, on_faulty) {
                (Kind::Note, _) => "error",
                (_, true) => "fail",
                _ => "pass",
            };
            assert_eq!(tag["verdict"], want_verdict, "job {}: {tag}", r.id);
            if on_faulty {
                assert_eq!(
                    tag["nodes"][FAULTY]["checks"][0], "ib.port_state",
                    "job {}: {tag}",
                    r.id
                );
            }
            if kind == Kind::FabricRun {
                assert_eq!(tag["run"]["steps"], 3, "job {}: {tag}", r.id);
            }
            if kind == Kind::Note {
                let notes = tag["notes"].to_string();
                let note = tag["notes"][0].as_str().unwrap_or_default();
                assert!(
                    note.starts_with(&format!("{NOTE_NODE}: probe ")) && note.contains(PANIC),
                    "the note did not round-trip in original case: {notes}"
                );
            }
            tags.insert(r.id.clone(), tag);
        }
        let arrays: Vec<&Rec> = recs.iter().filter(|r| kind_of(r) == Kind::Array).collect();
        assert_eq!(arrays.len(), 10);
        assert!(arrays.iter().all(|r| r.id.contains('_')), "{arrays:?}");
        eprintln!("fifty tags checked after {:?}", t0.elapsed());

        // `fabric-check jobs` against the same sacct.
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        let list = list.join(",");
        let every = jobs_json(&tb, &["--job", &list]);
        let names: BTreeSet<&String> = every.keys().collect();
        let want_names: BTreeSet<&String> = recs.iter().map(|r| &r.id).collect();
        assert_eq!(names, want_names, "every record, by its own id");
        for (id, row) in &every {
            match tags.get(id) {
                Some(t) => {
                    assert_eq!(row["tag_status"], "tagged", "{id}: {row}");
                    assert_eq!(row["verdict"], t["verdict"], "{id}: {row}");
                }
                None => assert_eq!(row["tag_status"], "untagged", "{id}: {row}"),
            }
        }
        let failing = jobs_json(&tb, &["--job", &list, "--verdict", "fail"]);
        let want_failing: BTreeSet<&String> = tags
            .iter()
            .filter(|(_, t)| t["verdict"] == "fail")
            .map(|(id, _)| id)
            .collect();
        assert!(want_failing.len() >= 3, "{want_failing:?}");
        assert_eq!(failing.keys().collect::<BTreeSet<_>>(), want_failing);
        for (id, row) in &failing {
            let nodes: Vec<&str> = row["failing"]
                .as_array()
                .expect("failing")
                .iter()
                .filter_map(|f| f["node"].as_str())
                .collect();
            assert_eq!(nodes, [FAULTY], "{id}: {row}");
            assert_eq!(
                row["failing"][0]["checks"][0], "ib.port_state",
                "{id}: {row}"
            );
        }
        let on_faulty = jobs_json(&tb, &["--job", &list, "--node", FAULTY]);
        let want_on: BTreeSet<&String> = recs
            .iter()
            .filter(|r| {
                r.nodes.iter().any(|n| n == FAULTY)
                    || tags
                        .get(&r.id)
                        .is_some_and(|t| t["earlier"][FAULTY].is_object())
            })
            .map(|r| &r.id)
            .collect();
        assert_eq!(on_faulty.keys().collect::<BTreeSet<_>>(), want_on);
        // One array task and one het component, by exact id.
        let task = format!("{}_3", arrays[0].id.split('_').next().unwrap());
        let one = jobs_json(&tb, &["--job", &task]);
        assert_eq!(one.keys().collect::<Vec<_>>(), [&task]);
        assert_eq!(one[&task]["id"]["kind"], "array");
        let het = jobs.iter().find(|j| j.1 == Kind::Het).unwrap().0;
        let comp = format!("{het}+1");
        let one = jobs_json(&tb, &["--job", &comp]);
        assert_eq!(one.keys().collect::<Vec<_>>(), [&comp]);
        assert_eq!(one[&comp]["nnodes"], 2, "{}", one[&comp]);
        assert_eq!(one[&comp]["tag"]["nnodes"], 2, "{}", one[&comp]);
        // The count of jobs without a tag, in the table's summary line and the CSV's rows.
        let table = fabric_check_ok(&tb, &["jobs", "--job", &list]);
        let untagged = recs.iter().filter(|r| kind_of(r) == Kind::Untagged).count();
        assert!(
            table.contains(&format!("50 jobs, {untagged} without a fabric-check tag")),
            "{table}"
        );
        let csv = fabric_check_ok(&tb, &["jobs", "--job", &list, "--format", "csv"]);
        assert_eq!(csv.lines().count(), 51, "a header and fifty rows: {csv}");
        eprintln!("fabric-check jobs checked after {:?}", t0.elapsed());
    });
    let _ = std::fs::remove_file(tb.dir.join("etc/note-job"));
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn without_the_wrapper_a_jobstats_style_epilog_that_erases_our_tag_is_reported_lost_by_health() {
    let tb = Testbed::get();
    heal_all(&tb);
    let etc = tb.dir.join("etc");
    // jobstats' write: sleep, then the whole field, in the database only.
    let write =
        |job: &str| format!("sacctmgr -i update job where jobid={job} set AdminComment={JS1}");
    // jobstats as it is deployed: its own EpilogSlurmctld, no `fabric-check epilog-slurmctld`,
    // where the cluster has the testbed's EpilogSlurmctld hook (the host testbed); a matrix
    // cluster has none, and there the test does jobstats' write itself once the job ended.
    let hook = tb.dir.join("bin/epilog-slurmctld").exists();
    let active = etc.join("epilog-slurmctld.active");
    if hook {
        write_script(
            &active,
            &format!(
                "#!/bin/sh\nexport SLURM_CONF={d}/etc/slurm.conf\nsleep 3\n{}\n",
                write("$SLURM_JOB_ID"),
                d = tb.dir.display()
            ),
        );
    }
    let outcome = std::panic::catch_unwind(|| {
        let job = tb.sbatch(&["-N1", "-w", "n1", "--fabric-check", "--wrap", "true"]);
        assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
        let id = job.to_string();
        wait_for(LONG, || {
            let out = tb.ok("squeue", &["-h", "-j", &id, "-t", "all", "-o", "%T"]);
            (!out.contains("COMPLETING")).then_some(())
        })
        .expect("the EpilogSlurmctld finishes");
        if !hook {
            std::thread::sleep(Duration::from_secs(3));
            let w = write(&id);
            let words: Vec<&str> = w.split_whitespace().collect();
            tb.ok(words[0], &words[1..]);
        }
        // The loss itself: jobstats' wholesale write left no tag.
        let comment = wait_for(Duration::from_secs(30), || {
            let c = tb.admin_comment(job);
            c.to_ascii_uppercase().starts_with("JS1:").then_some(c)
        })
        .unwrap_or_else(|| panic!("jobstats' write did not land: {}", tb.admin_comment(job)));
        assert!(!comment.contains("fabric-check/v1"), "{comment}");
        let plugstack = tb.dir.join("etc/plugstack.conf");
        // n1's health check, with no grace: every job it tagged is old enough to look at.
        let health = || {
            fabric_check(
                &tb,
                &[
                    "health",
                    "--plugstack",
                    plugstack.to_str().unwrap(),
                    "--node",
                    "n1",
                    "--tag-grace-s",
                    "0",
                ],
            )
        };
        let out = health();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let lost: Vec<&str> = text.lines().filter(|l| l.contains("TAG LOST")).collect();
        assert!(
            lost.iter()
                .any(|l| l.contains(&format!("TAG LOST: job {job}:"))
                    && l.contains("jobstats `JS1:` segment")
                    && l.contains("fabric-check epilog-slurmctld")),
            "health did not report the lost tag of job {job}:\n{text}"
        );
        // Only that job: every other tag n1 wrote is still in accounting.
        assert!(
            lost.iter().all(|l| l.contains(&format!("job {job}:"))),
            "{lost:#?}"
        );
        // Said once: the job left the ledger.
        let again = health();
        assert!(
            !String::from_utf8_lossy(&again.stdout).contains(&format!("job {job}:")),
            "reported twice"
        );
    });
    if hook {
        let _ = std::fs::remove_file(&active);
    }
    heal_all(&tb);
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}
