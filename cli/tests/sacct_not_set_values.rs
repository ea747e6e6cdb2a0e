//! Slurm's "not set" and "unlimited" values, in every form sacct prints them from 22.05 to
//! 26.05, read as not set by `report` and `jobs`: a job that never started has no start time,
//! so its queue wait is not counted and `jobs` shows no start.
//!
//! Each history holds two jobs, written by hand in the shapes sacct prints (the figures made
//! up): job 1 became eligible at 1000 s and started 36 s later (a wait of 0.01 h); job 2 became
//! eligible at 1000 s and never started, its start written in the form under test. A start read
//! as a time gives a mean wait of about 596,000 h (`4294967294` s, over two jobs) or more.

use assert_cmd::Command;
use serde_json::Value;

/// Slurm's sentinels (`slurm.h`).
const NO_VAL: &str = "4294967294";
const INFINITE: &str = "4294967295";
const NO_VAL16: &str = "65534";
const INFINITE16: &str = "65535";
const NO_VAL64: &str = "18446744073709551614";
const INFINITE64: &str = "18446744073709551615";

fn run(args: &[&str], input: &str, name: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, input).unwrap();
    let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    a.push(p.to_str().unwrap().to_string());
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(&a)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The report's mean queue wait of the `ib` group: (hours, jobs counted).
fn queue_wait(input: &str, name: &str) -> (f64, u64) {
    let (rc, out, err) = run(&["report", "-f", "json", "-i"], input, name);
    assert_eq!(rc, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let g = doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "ib")
        .unwrap_or_else(|| panic!("no ib group: {out}"));
    let w = &g["mean_queue_wait_h"];
    (w["value"].as_f64().unwrap(), w["n"].as_u64().unwrap())
}

/// `jobs --format json`: each job's id and start.
fn starts(input: &str, name: &str) -> Vec<(String, Value)> {
    let (rc, out, err) = run(&["jobs", "--format", "json", "--sacct-file"], input, name);
    assert_eq!(rc, 0, "{err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["job_id"].as_str().unwrap().to_string(),
                r["start_s"].clone(),
            )
        })
        .collect()
}

/// A 22.05 (`dbv0.0.38`) job: times are plain integers; `start`, `end`, the GPU count and
/// `restart_cnt` as given.
fn job_2205(id: u32, state: &str, start: &str, end: &str, gpus: &str, restarts: &str) -> String {
    format!(
        r#"{{"account":"ml","allocation_nodes":1,"array":{{"job_id":0,"task_id":{NO_VAL}}},"cluster":"c1",
        "comment":{{"administrator":"","job":"","system":""}},"job_id":{id},"name":"train","nodes":"n1",
        "partition":"ib","qos":"normal","restart_cnt":{restarts},"state":{{"current":"{state}","reason":"None"}},
        "time":{{"elapsed":0,"eligible":1000,"end":{end},"start":{start},"submission":990}},
        "tres":{{"allocated":[{{"type":"gres","name":"gpu","id":1001,"count":{gpus}}}]}},"user":"ann"}}"#
    )
}

/// A 23.02+ (`v0.0.40`) job: `state/current` a list, numbers plain or `{set,infinite,number}`.
fn job_v40(id: u32, state: &str, start: &str, end: &str) -> String {
    format!(
        r#"{{"account":"ml","allocation_nodes":1,"array":{{"job_id":0,"task_id":{{"set":false,"infinite":false,"number":0}}}},
        "cluster":"c1","comment":{{"administrator":"","job":"","system":""}},"job_id":{id},"name":"train","nodes":"n1",
        "partition":"ib","qos":"normal","restart_cnt":0,"state":{{"current":["{state}"],"reason":"None"}},
        "time":{{"elapsed":0,"eligible":1000,"end":{end},"start":{start},"submission":990}},
        "tres":{{"allocated":[]}},"user":"ann"}}"#
    )
}

fn document(jobs: &[String]) -> String {
    format!(
        "{{\"meta\":{{}},\"errors\":[],\"jobs\":[\n{}\n]}}\n",
        jobs.join(",\n")
    )
}

/// Job 1 started after 36 s; job 2 never started, its start (and end) as given.
fn history_2205(start: &str, end: &str) -> String {
    document(&[
        job_2205(1, "COMPLETED", "1036", "4636", "1", "0"),
        job_2205(2, "PENDING", start, end, "0", "0"),
    ])
}

fn history_v40(start: &str, end: &str) -> String {
    document(&[
        job_v40(1, "COMPLETED", "1036", "4636"),
        job_v40(2, "PENDING", start, end),
    ])
}

fn assert_not_started(input: &str, name: &str) {
    let (wait_h, n) = queue_wait(input, name);
    assert_eq!(n, 1, "only the job that started has a queue wait");
    assert!((wait_h - 0.01).abs() < 1e-9, "mean queue wait {wait_h} h");
    let rows = starts(input, name);
    assert_eq!(
        rows,
        [
            ("1".to_string(), Value::from(1036)),
            ("2".to_string(), Value::Null)
        ]
    );
}

#[test]
fn a_start_of_no_val_is_no_start_in_the_report_and_in_jobs() {
    assert_not_started(&history_2205(NO_VAL, NO_VAL), "h.json");
}

#[test]
fn a_start_of_infinite_is_no_start_in_the_report_and_in_jobs() {
    assert_not_started(&history_2205(INFINITE, INFINITE), "h.json");
}

#[test]
fn a_start_of_no_val64_or_infinite64_is_no_start_in_the_report_and_in_jobs() {
    assert_not_started(&history_2205(NO_VAL64, INFINITE64), "h.json");
    assert_not_started(&history_2205(INFINITE64, NO_VAL64), "h.json");
}

#[test]
fn a_start_of_zero_is_no_start_in_the_report_and_in_jobs() {
    assert_not_started(&history_2205("0", "0"), "h.json");
}

#[test]
fn a_start_object_that_is_not_set_or_infinite_is_no_start_in_the_report_and_in_jobs() {
    for (start, end) in [
        (
            r#"{"set":false,"infinite":false,"number":0}"#,
            r#"{"set":false,"infinite":false,"number":0}"#,
        ),
        (
            r#"{"set":true,"infinite":true,"number":0}"#,
            r#"{"set":false,"infinite":true,"number":0}"#,
        ),
        // A set number that is itself a sentinel.
        (
            &format!(r#"{{"set":true,"infinite":false,"number":{NO_VAL}}}"#),
            &format!(r#"{{"set":true,"infinite":false,"number":{NO_VAL64}}}"#),
        ),
    ] {
        assert_not_started(&history_v40(start, end), "h.json");
    }
}

#[test]
fn a_start_of_no_val_in_a_newer_document_is_no_start() {
    // 24.11 (`v0.0.42`) keeps a job's times plain integers: a pending job's start is NO_VAL.
    assert_not_started(&history_v40(NO_VAL, "0"), "h.json");
}

#[test]
fn a_gpu_count_of_no_val64_is_no_gpus_in_the_report() {
    let doc = document(&[
        job_2205(1, "COMPLETED", "1036", "4636", "1", "0"),
        job_2205(2, "COMPLETED", "1036", "4636", NO_VAL64, "0"),
        job_2205(3, "COMPLETED", "1036", "4636", INFINITE64, "0"),
    ])
    .replace(r#""elapsed":0"#, r#""elapsed":3600"#);
    let (rc, out, err) = run(&["report", "-f", "json", "-i"], &doc, "h.json");
    assert_eq!(rc, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // One GPU for one hour: the other jobs' counts are not set.
    assert_eq!(v["groups"][0]["allocated_gpu_h"], "1", "{out}");
}

#[test]
fn a_restart_count_of_no_val16_or_infinite16_is_no_requeue_in_the_report() {
    for restarts in [NO_VAL16, INFINITE16, NO_VAL] {
        let doc = document(&[job_2205(1, "COMPLETED", "1036", "4636", "1", restarts)]);
        let (rc, out, err) = run(&["report", "-f", "json", "-i"], &doc, "h.json");
        assert_eq!(rc, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["groups"][0]["requeues"], 0, "{restarts}: {out}");
    }
}

/// A `sacct -X -P` export (with `SLURM_TIME_FORMAT=%s` or ISO times) of the two jobs, job 2's
/// Start and End as given.
fn text_history(start: &str, end: &str) -> String {
    format!(
        "JobID|Partition|User|State|Eligible|Start|End|ElapsedRaw|NNodes|AllocTRES|AdminComment\n\
         1|ib|ann|COMPLETED|1000|1036|4636|3600|1|gres/gpu=1,node=1|\n\
         2|ib|ann|PENDING|1000|{start}|{end}|0|0||\n"
    )
}

#[test]
fn a_text_start_of_unknown_none_invalid_or_empty_is_no_start_in_the_report_and_in_jobs() {
    for (start, end) in [
        ("Unknown", "Unknown"),
        ("None", "Unknown"),
        ("INVALID", "INVALID"),
        ("", ""),
        ("unknown", "NONE"),
    ] {
        assert_not_started(&text_history(start, end), "h.txt");
    }
}

#[test]
fn a_text_start_of_a_sentinel_number_is_no_start_in_the_report_and_in_jobs() {
    for s in [NO_VAL, INFINITE, NO_VAL64, INFINITE64] {
        assert_not_started(&text_history(s, s), "h.txt");
    }
}
