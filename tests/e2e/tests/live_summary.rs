//! The run summary of a `fabric-run` step in the live tag while the job still runs (every
//! node's, gathered by the step's first node, so that the epilog has nothing to add and the tag
//! stays plain JSON in `sacct`: the `b32:` form is counted and must not occur), and what
//! each SPANK callback of this Slurm can still do (the measurement behind the table in
//! `docs/slurm-versions.md`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fabric_e2e::{Testbed, heal_all, tag_text, wait_for, wait_job_end, wait_tag};

/// The job's record in slurmctld's structured output: `scontrol --json show job` where it
/// exists (23.02 and later), `squeue --json` on 22.05 (which lists every job), picked by id.
fn live_job(tb: &Testbed, job: u32) -> Option<serde_json::Value> {
    let id = job.to_string();
    let out = if tb.slurm_version() >= (23, 2) {
        tb.cmd("scontrol", &["--json", "show", "job", &id])
    } else {
        tb.cmd("squeue", &["--json"])
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let number = |x: &serde_json::Value| x.as_u64().or_else(|| x["number"].as_u64());
    v["jobs"]
        .as_array()?
        .iter()
        .find(|j| number(&j["job_id"]) == Some(u64::from(job)))
        .cloned()
}

/// `RUNNING` whether the data parser writes the state as a string or a list of flags.
fn state_of(job: &serde_json::Value) -> String {
    let s = &job["job_state"];
    s.as_str().map(str::to_owned).unwrap_or_else(|| {
        s.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    })
}

/// Every virtual node's slurmd log, one after the other.
fn all_logs(tb: &Testbed) -> String {
    ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| tb.slurmd_log(n))
        .collect::<Vec<_>>()
        .join("\n")
}

fn bin_path(tb: &Testbed) -> String {
    format!(
        "{}:/usr/sbin:/usr/bin:/sbin:/bin",
        tb.dir.join("bin").display()
    )
}

#[test]
fn a_fabric_run_steps_summary_is_in_the_live_tag_as_plain_json_before_the_job_ends_and_in_sacct_after()
 {
    let tb = Testbed::get();
    heal_all(&tb);
    let work = tb.work_dir("live");
    let release = work.join("release");
    let script = format!(
        "#!/bin/sh\nexport PATH={path}\n\
         srun -N2 fabric-run --step-regex '^step ([0-9]+)' -- {fake} --steps 4 --step-sleep 0.1\n\
         i=0; while [ ! -e {release} ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done\n",
        path = bin_path(&tb),
        fake = tb.dir.join("bin/fake-train").display(),
        release = release.display(),
    );
    let batch = work.join("job.sh");
    std::fs::write(&batch, script).unwrap();
    let job = tb.sbatch(&["-N2", "--fabric-check", batch.to_str().unwrap()]);
    // While the batch script waits for `release`, the step has ended and the job runs.
    let live = wait_for(Duration::from_secs(90), || {
        let j = live_job(&tb, job)?;
        let comment = j["admin_comment"].as_str()?.to_owned();
        let text = comment.split_once("fabric-check/v1 ")?.1.to_owned();
        let tag: serde_json::Value = serde_json::Deserializer::from_str(&text)
            .into_iter::<serde_json::Value>()
            .next()?
            .ok()?;
        // Both nodes' summaries, gathered at the step's end by its first node.
        (tag["run"]["ranks"] == 2).then_some((state_of(&j), comment, tag))
    });
    std::fs::write(&release, "").unwrap();
    let (state, comment, tag) = live.unwrap_or_else(|| {
        panic!(
            "no run summary in the live tag of job {job}; n1's log: {:?}",
            tb.prolog_lines("n1", job)
        )
    });
    assert!(state.contains("RUNNING"), "{state}: {comment}");
    assert!(
        !comment.contains("b32:"),
        "the live form is plain JSON: {comment}"
    );
    assert_eq!(tag["run"]["steps"], 4, "{tag}");
    assert_eq!(tag["run"]["reported_by"], "job", "{tag}");
    assert_eq!(
        tag["verdict"], "pass",
        "the prolog's verdict is kept: {tag}"
    );
    assert_eq!(
        wait_job_end(&tb, job, Duration::from_secs(120)).as_deref(),
        Some("COMPLETED")
    );
    // After the job the epilog merged both nodes' records again, found what the live tag
    // holds and wrote nothing: sacct shows the plain-JSON live form, not `b32:`.
    let after = wait_tag(&tb, job, Duration::from_secs(60), |t| {
        t["run"]["ranks"] == 2
    })
    .unwrap_or_else(|| panic!("sacct: {:?}", tb.admin_comment(job)));
    assert_eq!(after["run"]["steps"], 4, "{after}");
    assert_eq!(after["verdict"], "pass", "{after}");
    let stored = tb.admin_comment(job);
    assert!(
        !stored.contains("b32:"),
        "the epilog rewrote the tag after the job: {stored}"
    );
    assert!(
        tag_text(&tb.admin_comment(job)).is_some(),
        "sacct -X -P -o AdminComment holds the segment"
    );
    let log = all_logs(&tb);
    let mine = format!("step-end job={job}.0 node=");
    assert!(
        log.lines()
            .any(|l| l.contains(&mine) && l.contains("run summary of")),
        "no {mine:?} in the slurmd logs"
    );
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_batch_script_ending_with_srun_fabric_run_keeps_its_summary_in_sacct_as_plain_json() {
    let tb = Testbed::get();
    heal_all(&tb);
    let work = tb.work_dir("last");
    let batch = work.join("job.sh");
    std::fs::write(
        &batch,
        format!(
            "#!/bin/sh\nexport PATH={}\nsrun -N1 fabric-run --step-regex '^step ([0-9]+)' -- {} --steps 3 --step-sleep 0.1\n",
            bin_path(&tb),
            tb.dir.join("bin/fake-train").display()
        ),
    )
    .unwrap();
    let job = tb.sbatch_wait(&["-N1", "--fabric-check", batch.to_str().unwrap()]);
    // The batch script's own end (the job still running) wrote it live; the epilog found the
    // same summary and left it as it was.
    let tag = wait_tag(&tb, job, Duration::from_secs(60), |t| t["run"].is_object())
        .unwrap_or_else(|| panic!("sacct: {:?}", tb.admin_comment(job)));
    assert_eq!(tag["run"]["steps"], 3, "{tag}");
    let comment = tb.admin_comment(job);
    let json = comment
        .split_once("fabric-check/v1 ")
        .map(|(_, t)| t)
        .unwrap_or_default();
    assert!(
        json.starts_with('{'),
        "sacct holds the live plain-JSON form: {comment}"
    );
    let v: serde_json::Value = serde_json::Deserializer::from_str(json)
        .into_iter::<serde_json::Value>()
        .next()
        .expect("a JSON value")
        .expect("valid JSON");
    assert_eq!(v["run"]["steps"], 3, "{v}");
    let log = all_logs(&tb);
    let batch_end = format!("step-end job={job}.4294967291 node=");
    assert!(
        log.contains(&batch_end),
        "no {batch_end:?} in the slurmd logs"
    );
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn ordinary_multi_node_jobs_keep_plain_json_tags_in_sacct_and_none_ends_in_the_b32_form() {
    let tb = Testbed::get();
    heal_all(&tb);
    let work = tb.work_dir("b32-count");
    let batch = work.join("job.sh");
    // Two steps on both nodes, then the batch script ends: the common training-job shape.
    std::fs::write(
        &batch,
        format!(
            "#!/bin/sh
export PATH={path}
             srun -N2 fabric-run --step-regex '^step ([0-9]+)' -- {fake} --steps 3 --step-sleep 0.05
             srun -N2 fabric-run --step-regex '^step ([0-9]+)' -- {fake} --steps 2 --step-sleep 0.05
",
            path = bin_path(&tb),
            fake = tb.dir.join("bin/fake-train").display()
        ),
    )
    .unwrap();
    let jobs: Vec<u32> = (0..3)
        .map(|_| tb.sbatch(&["-N2", "--fabric-check", batch.to_str().unwrap()]))
        .collect();
    for &job in &jobs {
        assert_eq!(
            wait_job_end(&tb, job, Duration::from_secs(180)).as_deref(),
            Some("COMPLETED"),
            "job {job}"
        );
    }
    let mut b32 = 0;
    for &job in &jobs {
        let tag = wait_tag(&tb, job, Duration::from_secs(60), |t| {
            t["run"]["ranks"] == 2 && t["run"]["steps"] == 5
        })
        .unwrap_or_else(|| panic!("job {job}: sacct: {:?}", tb.admin_comment(job)));
        assert_eq!(tag["run"]["outcome"], "accepted", "{tag}");
        if tb.admin_comment(job).contains("fabric-check/v1 b32:") {
            b32 += 1;
        }
    }
    println!("tags in the b32: form: {b32} of {}", jobs.len());
    assert_eq!(b32, 0, "ordinary jobs keep the live form");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_step_without_fabric_run_spawns_no_step_end() {
    let tb = Testbed::get();
    heal_all(&tb);
    let job = tb.sbatch_wait(&["-N1", "--fabric-check", "--wrap", "srun -N1 /bin/true"]);
    let log = all_logs(&tb);
    let mine = format!("step-end job={job}.");
    assert!(!log.contains(&mine), "a step-end ran for job {job}");
}

/// One line of the measuring plugin's log, as `key=value` words.
#[derive(Debug, Clone)]
struct Seen(Vec<(String, String)>);

impl Seen {
    fn get(&self, k: &str) -> &str {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The headers of the testbed's Slurm: a matrix cluster's state folder is `<root>/srv/fabric`.
fn slurm_include(tb: &Testbed) -> PathBuf {
    let root = tb.dir.join("../../usr/include");
    if root.join("slurm/spank.h").exists() {
        root
    } else {
        PathBuf::from("/usr/include")
    }
}

fn build_where(tb: &Testbed, out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/spank_where.c");
    let st = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-shared", "-fPIC", "-I"])
        .arg(slurm_include(tb))
        .arg("-o")
        .arg(out)
        .arg(src)
        .status()
        .expect("run cc");
    assert!(st.success(), "building the measuring plugin failed");
}

#[test]
fn each_spank_callback_of_a_step_is_measured_and_slurmstepds_exit_is_root_with_the_job_running() {
    let tb = Testbed::get();
    heal_all(&tb);
    let dir = tb.work_dir("where");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let so = dir.join("spank_where.so");
    build_where(&tb, &so);
    let log = dir.join("where.log");
    std::fs::write(&log, "").unwrap();
    std::fs::set_permissions(&log, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    tb.script(&["plugstack", "plugin"])
        .expect("normal plugstack");
    let normal = std::fs::read_to_string(tb.dir.join("etc/plugstack.conf")).unwrap();
    let conf = tb.dir.join("etc/plugstack.where.conf");
    std::fs::write(
        &conf,
        format!(
            "{}\noptional {} log={}\n",
            normal.trim_end(),
            so.display(),
            log.display()
        ),
    )
    .unwrap();
    tb.script(&["plugstack", conf.to_str().unwrap()])
        .expect("install the measuring plugstack");
    let r = std::panic::catch_unwind(|| {
        let job = tb.sbatch_wait(&["-N2", "--wrap", "srun -N2 -n2 /bin/true"]);
        // The epilog's line comes after the job's end.
        wait_for(Duration::from_secs(30), || {
            let text = std::fs::read_to_string(&log).ok()?;
            text.contains("cb=job_epilog").then_some(())
        });
        (job, std::fs::read_to_string(&log).unwrap())
    });
    tb.script(&["plugstack", "plugin"])
        .expect("restore plugstack");
    heal_all(&tb);
    let (job, text) = r.unwrap_or_else(|p| std::panic::resume_unwind(p));
    let seen: Vec<Seen> = text
        .lines()
        .map(|l| {
            Seen(
                l.split_whitespace()
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            )
        })
        .filter(|s| s.get("job") == job.to_string() || s.get("job") == "0")
        .collect();
    let (major, minor) = tb.slurm_version();
    let table = std::iter::once(format!(
        "Slurm {major}.{minor}, job {job}: cb ctx uid euid step nodeid state steps update stored"
    ))
    .chain(seen.iter().map(|s| {
        [
            "cb", "ctx", "uid", "euid", "step", "nodeid", "state", "steps", "update", "stored",
        ]
        .iter()
        .map(|k| s.get(k))
        .collect::<Vec<_>>()
        .join(" ")
    }))
    .collect::<Vec<_>>()
    .join("\n");
    std::fs::write(
        tb.dir.join(format!("log/spank-where-{major}.{minor}.txt")),
        &table,
    )
    .unwrap();
    println!("{table}");
    let step0 = |cb: &str, ctx: &str| {
        seen.iter()
            .find(|s| s.get("cb") == cb && s.get("ctx") == ctx && s.get("step") == "0")
            .cloned()
            .unwrap_or_else(|| panic!("no {cb} in {ctx} for step 0:\n{table}"))
    };
    // What step-end relies on: slurmstepd's exit of a step is root, the job runs, the write holds.
    let exit = step0("exit", "remote");
    assert_eq!(exit.get("euid"), "0", "{table}");
    assert_eq!(exit.get("state"), "RUNNING", "{table}");
    assert_eq!(exit.get("update"), "0", "{table}");
    // (`stored` is only informative: the other node's callbacks and the batch step write at
    // the same moments, so a read-back may see their comment; `update` is slurmctld's answer.)
    // user_init runs with the job user's euid (its real uid stays root); the tasks are the user.
    let user = step0("user_init", "remote");
    assert_ne!(user.get("euid"), "0", "{table}");
    let task = step0("task_init", "remote");
    assert_ne!(task.get("uid"), "0", "{table}");
    assert_ne!(task.get("update"), "0", "{table}");
    // The job epilog is root but the job is no longer live: scontrol update is refused.
    let epilog = seen
        .iter()
        .find(|s| s.get("cb") == "job_epilog")
        .unwrap_or_else(|| panic!("no job_epilog:\n{table}"));
    assert_eq!(epilog.get("euid"), "0", "{table}");
    assert_ne!(epilog.get("update"), "0", "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}
