//! `fabric-check jobs` on saved `sacct -X -P` outputs (tests/fixtures/sacct/jobs, see its
//! README for what each job is): what an admin asks — which jobs failed, which ran on a node,
//! one array task or het component exactly — answered as table, JSON and CSV.

use assert_cmd::Command;
use serde_json::Value;

fn fixture() -> String {
    format!(
        "{}/../tests/fixtures/sacct/jobs/sacct-jobs.txt",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `fabric-check jobs --sacct-file FIXTURE ARGS`: (exit code, stdout, stderr).
fn jobs(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["jobs", "--sacct-file", &fixture()])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> Vec<Value> {
    let mut a = vec!["--format", "json"];
    a.extend_from_slice(args);
    let (rc, out, err) = jobs(&a);
    assert_eq!(rc, 0, "{err}");
    serde_json::from_str::<Value>(&out)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
        .as_array()
        .unwrap()
        .clone()
}

fn ids(args: &[&str]) -> Vec<String> {
    json(args)
        .iter()
        .map(|j| j["job_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_table_lists_every_job_once_and_says_how_many_had_no_tag() {
    let (rc, out, err) = jobs(&[]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("job "), "{out}");
    // 12 jobs (the .batch step is not one), then the summary.
    assert_eq!(lines.len(), 1 + 12 + 1, "{out}");
    assert_eq!(
        lines[13],
        "12 jobs, 2 without a fabric-check tag, 1 with an unreadable tag"
    );
    let row = lines.iter().find(|l| l.starts_with("1002 ")).unwrap();
    for cell in [
        "bo",
        "roce",
        "FAILED",
        "2025-12-01T03:00:00",
        "n[3-4]",
        "fail",
    ] {
        assert!(row.contains(cell), "{cell} in {row}");
    }
    assert!(row.contains("n3: roce.pfc roce.ecn"), "{row}");
    assert!(
        row.contains("90 steps p50 2.5 s, 1 retries, failed"),
        "{row}"
    );
}

#[test]
fn verdict_fail_lists_the_failed_jobs_and_node_narrows_to_those_that_ran_there() {
    assert_eq!(ids(&["--verdict", "fail"]), ["1002", "1005+1", "1008"]);
    // n3 is in 1002's n[3-4], 1003_2's n3, 1007's n3, 1011's n[3,9] and 1012's n3.
    assert_eq!(
        ids(&["--node", "n3"]),
        ["1002", "1003_2", "1007", "1011", "1012"]
    );
    // n4: 1002's n[3-4], and 1012's first attempt, drained there before the requeue.
    assert_eq!(ids(&["--node", "n4"]), ["1002", "1012"]);
    assert_eq!(ids(&["--verdict", "fail", "--node", "n3"]), ["1002"]);
    assert_eq!(ids(&["--verdict", "none"]), ["1007", "1009", "1010_[1-4]"]);
    assert_eq!(
        ids(&["--user", "cy", "--partition", "roce"]),
        ["1005+0", "1005+1", "1011"]
    );
}

#[test]
fn an_array_task_or_het_component_is_addressed_exactly_and_its_leader_means_all() {
    assert_eq!(ids(&["--job", "1003"]), ["1003_1", "1003_2"]);
    assert_eq!(ids(&["--job", "1003_2"]), ["1003_2"]);
    assert_eq!(ids(&["--job", "1005+1"]), ["1005+1"]);
    assert_eq!(ids(&["--job", "1005"]), ["1005+0", "1005+1"]);
    assert_eq!(ids(&["--job", "1002,1010"]), ["1002", "1010_[1-4]"]);
    let task = &json(&["--job", "1003_2"])[0];
    assert_eq!(task["id"]["kind"], "array");
    assert_eq!(task["id"]["array_job_id"], 1003);
    assert_eq!(task["id"]["task"], "2");
    let het = &json(&["--job", "1005+1"])[0];
    assert_eq!(
        (
            &het["id"]["kind"],
            &het["id"]["het_job_id"],
            &het["id"]["offset"]
        ),
        (&Value::from("het"), &Value::from(1005), &Value::from(1))
    );
}

#[test]
fn a_window_keeps_the_jobs_that_ran_inside_it() {
    // 1007 ends at 10:00 sharp (not after --since); the pending array has not started.
    assert_eq!(
        ids(&["--since", "2025-12-01T10:00", "--until", "2025-12-01T14:00"]),
        ["1008", "1009"]
    );
    let (rc, _, err) = jobs(&["--since", "2025-12-02", "--until", "2025-12-01"]);
    assert_eq!(rc, 3);
    assert!(err.contains("--until must be after --since"), "{err}");
}

#[test]
fn json_has_one_object_per_job_with_the_tag_decoded_even_when_sacctmgr_mangled_its_quotes() {
    let all = json(&[]);
    assert_eq!(all.len(), 12);
    let by = |id: &str| all.iter().find(|j| j["job_id"] == id).unwrap().clone();
    let j = by("1001");
    assert_eq!(j["tag"]["run"]["steps"], 412);
    assert_eq!(j["tag"]["run"]["step_p50_s"], 1.2);
    assert_eq!(j["nnodes"], 2);
    assert_eq!(j["tag_status"], "tagged");
    // Every `"` of 1008's tag is a backtick in sacct; the tag still decodes.
    let j = by("1008");
    assert_eq!(j["verdict"], "fail");
    assert_eq!(j["tag"]["nodes"]["n7"]["checks"][0], "ib.port_state");
    assert_eq!(j["drained"][0], "n7");
    let j = by("1009");
    assert_eq!(j["tag_status"], "unreadable");
    assert!(j["tag_error"].as_str().unwrap().contains("not valid JSON"));
    assert_eq!(j["tag"], Value::Null);
    // Another tool's `|` ahead of our segment; n3 never reported.
    let j = by("1011");
    assert_eq!(j["verdict"], "error");
    assert_eq!(j["failing"][0]["node"], "n3");
    assert_eq!(j["failing"][0]["checks"][0], "rendezvous.missing");
    let j = by("1012");
    assert_eq!(
        (&j["verdict"], &j["failing"]),
        (&Value::from("pass"), &Value::Array(vec![]))
    );
    assert_eq!(j["earlier_failing"][0]["node"], "n4");
    assert_eq!(j["earlier_failing"][0]["checks"][0], "roce.mtu");
    let j = by("1010_[1-4]");
    assert_eq!(
        (&j["start_s"], &j["tag_status"]),
        (&Value::Null, &Value::from("untagged"))
    );
}

#[test]
fn csv_has_the_table_columns_and_quotes_cells_with_commas() {
    let (rc, out, err) = jobs(&["--format", "csv", "--job", "1002"]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "job,user,partition,state,start (UTC),elapsed_s,nodes,verdict,failing (node: checks),drained,run,effective training"
    );
    assert_eq!(
        lines[1],
        "1002,bo,roce,FAILED,2025-12-01T03:00:00,3600,n[3-4],fail,n3: roce.pfc roce.ecn,n3,\"90 steps p50 2.5 s, 1 retries, failed\",ETT not measured"
    );
    assert_eq!(lines.len(), 2);
    assert!(err.contains("1 job, 0 without a fabric-check tag"), "{err}");
}

#[test]
fn sacct_is_run_with_the_named_fields_and_the_leader_of_the_job_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let argv = dir.path().join("argv");
    let fake = dir.path().join("sacct");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" \"TIME=$SLURM_TIME_FORMAT\" > '{}'\ncat '{}'\n",
            argv.display(),
            fixture()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args([
            "jobs",
            "--sacct",
            fake.to_str().unwrap(),
            "--job",
            "1003_2",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got.len(), 1, "only the task asked for, not its sibling");
    let argv = std::fs::read_to_string(argv).unwrap();
    let argv: Vec<&str> = argv.lines().collect();
    assert_eq!(
        argv,
        [
            "-X",
            "-P",
            "-o",
            fabric_report::jobs::FIELDS,
            "-j",
            "1003",
            "-a",
            "TIME=%s"
        ]
    );
}

#[test]
fn an_output_without_admin_comment_is_refused_with_the_command_to_run() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.txt");
    std::fs::write(&p, "JobID|State\n1|COMPLETED\n").unwrap();
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["jobs", "--sacct-file", p.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has no `AdminComment` column; run `sacct -X -P -o JobID,JobIDRaw,"),
        "{err}"
    );
}

/// A sacct stand-in printing `text`, as `jobs` runs it (no `--sacct-file`).
fn fake_sacct(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let out = dir.join("out.txt");
    std::fs::write(&out, text).unwrap();
    let fake = dir.join("sacct");
    std::fs::write(&fake, format!("#!/bin/sh\ncat '{}'\n", out.display())).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    fake
}

#[test]
fn the_fields_jobs_asks_sacct_for_leave_it_nothing_to_warn_about() {
    // `jobs` shows no GPUs, so its own query has no AllocTRES and must not warn that it lacks it.
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_sacct(dir.path(), &std::fs::read_to_string(fixture()).unwrap());
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["jobs", "--sacct", fake.to_str().unwrap(), "--job", "1001"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("AllocTRES"), "{err}");
    assert!(!err.contains("WARN"), "{err}");
    // The same saved output read back says nothing either.
    let (rc, _, err) = jobs(&[]);
    assert_eq!(rc, 0, "{err}");
    assert!(!err.contains("WARN"), "{err}");
}

#[test]
fn a_saved_export_whose_job_name_forges_a_passing_row_is_refused_not_shown_as_completed() {
    // Job 77 FAILED and root wrote `fail`; the name holds the delimiter and a passing segment.
    let pass = r#"fabric-check/v1 {"verdict":"pass","nnodes":1,"counts":{"pass":1}}"#;
    let fail = r#"fabric-check/v1 {"verdict":"fail","nnodes":1,"counts":{"fail":1},"nodes":{"n3":{"verdict":"fail","checks":["roce.pfc"],"drained":true}}}"#;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("saved.txt");
    std::fs::write(
        &p,
        format!(
            "JobID|JobName|User|State|NodeList|AdminComment\n77|train|ann|COMPLETED|n3|{pass}|ann|FAILED|n3|{fail}\n"
        ),
    )
    .unwrap();
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["jobs", "--sacct-file", p.to_str().unwrap()])
        .output()
        .unwrap();
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!stdout.contains("COMPLETED"), "{stdout}");
    assert_eq!(out.status.code(), Some(3), "{stdout}{err}");
    assert!(
        err.contains(
            "saved.txt:1: the header names `JobName`, a column a job's user writes as free text"
        ),
        "{err}"
    );
    assert!(err.contains("export with `sacct --json` instead"), "{err}");
}

/// `fabric-check jobs --format json --sacct-file PATH` (a fixture of tests/fixtures/sacct).
fn json_of(rel: &str) -> Vec<Value> {
    let p = format!(
        "{}/../tests/fixtures/sacct/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["jobs", "--format", "json", "--sacct-file", &p])
        .output()
        .unwrap();
    assert!(out.status.success(), "{rel}: {out:?}");
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn the_sacct_json_history_that_report_reads_gives_the_same_jobs_as_its_text_form() {
    let text = json_of("generated/history.txt");
    assert_eq!(text.len(), 60);
    for rel in [
        "generated/history-22.05.json",
        "generated/history-v0.0.40.json",
    ] {
        let json = json_of(rel);
        assert_eq!(json.len(), text.len(), "{rel}");
        for (j, t) in json.iter().zip(&text) {
            for key in ["job_id", "user", "partition", "verdict", "failing", "tag"] {
                assert_eq!(j[key], t[key], "{rel}: job {} {key}", t["job_id"]);
            }
        }
        // The JSON has the node list that this text capture lacks.
        assert!(
            json.iter()
                .all(|j| !j["nodelist"].as_str().unwrap().is_empty())
        );
    }
}

#[test]
fn a_job_id_that_is_not_one_is_refused_instead_of_matching_nothing() {
    let (rc, out, err) = jobs(&["--job", "garbage"]);
    assert_eq!(rc, 3, "{out}");
    assert!(
        err.contains("--job `garbage` is not a job id: write 123, 123_4"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
}

/// A squeue stand-in that appends its arguments to `calls` (one line per run) and prints `text`.
fn fake_squeue(dir: &std::path::Path, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let out = dir.join("squeue-out.txt");
    std::fs::write(&out, text).unwrap();
    let calls = dir.join("squeue-calls.txt");
    let fake = dir.join("squeue");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncat '{}'\n",
            calls.display(),
            out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    (fake, calls)
}

#[test]
fn running_jobs_take_the_live_tag_from_one_squeue_run_and_state_running_lists_them() {
    // Accounting has no tag for the running jobs yet; slurmctld holds the watch's live entry.
    let header = fabric_report::jobs::FIELDS.replace(',', "|");
    let sacct = format!(
        "{header}\n41|41|ann|ib|RUNNING|100||14|2|n[1-2]|\n42|42|ann|ib|RUNNING|100||14|1|n3|\n43|43|bob|ib|COMPLETED|50|90|40|1|n4|\n"
    );
    let live = r#"fabric-check/v1 {"verdict":"pass","nnodes":2,"nodes":{"n[1-2]":{"verdict":"pass"}},"during":[{"node":"n2","rises":{},"verdict":"fail","watch":[{"check":"ib.port_state","message":"mlx5_0 port 1 is DOWN","seen_at_s":110,"into_job_s":10,"drained":true}]}]}"#;
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_sacct(dir.path(), &sacct);
    let (squeue, calls) = fake_squeue(
        dir.path(),
        &format!("41|41|RUNNING|{live}\n42|42|RUNNING|(null)\n"),
    );
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["jobs", "--format", "json", "--state", "running"])
        .args(["--sacct", fake.to_str().unwrap()])
        .args(["--squeue", squeue.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["41", "42"]);
    assert_eq!(rows[0]["tag_source"], "slurmctld");
    assert_eq!(rows[0]["drained"], serde_json::json!(["n2"]));
    assert_eq!(rows[1]["tag_source"], "slurmctld");
    assert_eq!(rows[1]["tag_status"], "untagged");
    let calls = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(
        calls.lines().count(),
        1,
        "one squeue run for every live job: {calls}"
    );
    assert!(calls.contains("--jobs=41,42"), "{calls}");
    assert!(calls.contains("admin_comment"), "{calls}");
}
