//! `fabric-check report` on Slurm accounting captured on real and emulated clusters (the corpus,
//! see `real_world_support`): slurmdbd/slurmrestd job documents of data_parser v0.0.39 to
//! v0.0.42 (Slurm 23.02 to 24.11) and `sacct -P` text of several layouts.
//!
//! Per file, what a person reading it concludes, written by hand: each job's state, nodes,
//! times and GPUs; that steps are not jobs; which lines of a broken file are broken.

mod real_world_support;

use std::io::BufReader;

use fabric_report::report::sacct_text::TextLayout;
use fabric_report::report::{InputNotes, JobRecord, JobState, sacct_json, sacct_text};
use real_world_support::{file, run};

fn json_jobs(rel: &str) -> Vec<JobRecord> {
    let f = std::fs::File::open(file(rel)).unwrap();
    sacct_json::read_all(f, rel).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn text_jobs(rel: &str, layout: &TextLayout) -> Result<Vec<JobRecord>, String> {
    let f = std::fs::File::open(file(rel)).unwrap();
    sacct_text::read_all_with(BufReader::new(f), rel, layout).map_err(|e| e.to_string())
}

fn state(name: &str) -> JobState {
    match name {
        "COMPLETED" => JobState::Completed,
        "CANCELLED" => JobState::Cancelled,
        "FAILED" => JobState::Failed,
        "TIMEOUT" => JobState::Timeout,
        "RUNNING" => JobState::Running,
        "PENDING" => JobState::Pending,
        "OUT_OF_MEMORY" => JobState::OutOfMemory,
        "NODE_FAIL" => JobState::NodeFail,
        other => panic!("no expectation for {other}"),
    }
}

/// (file under sacct/slurm-web/, job id, state, allocated nodes, start, end, elapsed, partition)
type JsonWant = (
    &'static str,
    &'static str,
    &'static str,
    u32,
    i64,
    i64,
    u64,
    &'static str,
);

const JSON: &[JsonWant] = &[
    (
        "23.02.8_v0.0.39/slurmdb-job-archived.json",
        "306",
        "COMPLETED",
        8,
        1727339062,
        1727339422,
        360,
        "debug",
    ),
    (
        "23.02.8_v0.0.39/slurmdb-job-completed.json",
        "307",
        "COMPLETED",
        64,
        1727358173,
        1727358533,
        360,
        "batch",
    ),
    (
        "23.02.8_v0.0.39/slurmdb-job-pending.json",
        "326",
        "PENDING",
        0,
        0,
        0,
        0,
        "batch",
    ),
    (
        "23.02.8_v0.0.39/slurmdb-job-running.json",
        "310",
        "RUNNING",
        16,
        1727358533,
        0,
        92,
        "batch",
    ),
    (
        "23.11.10_v0.0.40/slurmdb-job-archived.json",
        "508",
        "CANCELLED",
        1,
        1746619980,
        1746619983,
        3,
        "ia",
    ),
    (
        "23.11.10_v0.0.40/slurmdb-job-completed.json",
        "509",
        "COMPLETED",
        1,
        1746621139,
        1746621140,
        1,
        "standard",
    ),
    (
        "23.11.10_v0.0.40/slurmdb-job-failed.json",
        "510",
        "FAILED",
        1,
        1746621142,
        1746621143,
        1,
        "standard",
    ),
    (
        "23.11.10_v0.0.40/slurmdb-job-gpus-multi-nodes.json",
        "500",
        "PENDING",
        0,
        1746619951,
        0,
        0,
        "",
    ),
    (
        "23.11.10_v0.0.40/slurmdb-job-gpus-multi-types.json",
        "503",
        "RUNNING",
        1,
        1746619961,
        0,
        2,
        "ia",
    ),
    (
        "23.11.10_v0.0.40/slurmdb-job-gpus-per-node.json",
        "502",
        "RUNNING",
        2,
        1746619958,
        0,
        2,
        "ia",
    ),
    (
        "23.11.10_v0.0.40/slurmdb-job-pending.json",
        "516",
        "PENDING",
        0,
        0,
        0,
        0,
        "standard",
    ),
    (
        "23.11.10_v0.0.40/slurmdb-job-running.json",
        "511",
        "RUNNING",
        1,
        1746621142,
        0,
        19,
        "standard",
    ),
    (
        "23.11.10_v0.0.40/slurmdb-job-timeout.json",
        "609",
        "TIMEOUT",
        1,
        1746624261,
        1746624340,
        79,
        "standard",
    ),
    (
        "24.05.3_v0.0.41/slurmdb-job-archived.json",
        "649716",
        "CANCELLED",
        1,
        1747749296,
        1747749338,
        42,
        "batch",
    ),
    (
        "24.05.3_v0.0.41/slurmdb-job-completed.json",
        "649718",
        "COMPLETED",
        1,
        1747754469,
        1747754470,
        1,
        "batch",
    ),
    (
        "24.05.3_v0.0.41/slurmdb-job-failed.json",
        "649719",
        "FAILED",
        1,
        1747754472,
        1747754473,
        1,
        "batch",
    ),
    (
        "24.05.3_v0.0.41/slurmdb-job-gpus-multi-nodes.json",
        "11",
        "PENDING",
        0,
        1762529688,
        0,
        1,
        "",
    ),
    (
        "24.05.3_v0.0.41/slurmdb-job-gpus-multi-types.json",
        "4",
        "PENDING",
        0,
        1762529638,
        0,
        2,
        "",
    ),
    (
        "24.05.3_v0.0.41/slurmdb-job-gpus-per-node.json",
        "13",
        "PENDING",
        0,
        1762529694,
        0,
        1,
        "",
    ),
    (
        "24.05.3_v0.0.41/slurmdb-job-pending.json",
        "649730",
        "PENDING",
        0,
        0,
        0,
        0,
        "batch",
    ),
    (
        "24.05.3_v0.0.41/slurmdb-job-running.json",
        "649722",
        "RUNNING",
        1,
        1747754478,
        0,
        88,
        "batch",
    ),
    (
        "24.05.3_v0.0.41/slurmdb-job-timeout.json",
        "649717",
        "TIMEOUT",
        1,
        1747754466,
        1747754549,
        83,
        "batch",
    ),
    (
        "24.11.5_v0.0.42/slurmdb-job-archived.json",
        "6354",
        "COMPLETED",
        1,
        1762788123,
        1762788153,
        30,
        "ia",
    ),
    (
        "24.11.5_v0.0.42/slurmdb-job-completed.json",
        "6362",
        "COMPLETED",
        1,
        1762788776,
        1762788837,
        61,
        "standard",
    ),
    (
        "24.11.5_v0.0.42/slurmdb-job-failed.json",
        "6359",
        "FAILED",
        1,
        1762788770,
        1762788771,
        1,
        "standard",
    ),
    (
        "24.11.5_v0.0.42/slurmdb-job-gpus-multi-nodes.json",
        "6371",
        "RUNNING",
        2,
        1762788887,
        0,
        1,
        "ia",
    ),
    (
        "24.11.5_v0.0.42/slurmdb-job-gpus-multi-types.json",
        "6356",
        "RUNNING",
        1,
        1762788764,
        0,
        0,
        "ia",
    ),
    (
        "24.11.5_v0.0.42/slurmdb-job-gpus-per-node.json",
        "6377",
        "RUNNING",
        2,
        1762788939,
        0,
        0,
        "ia",
    ),
    (
        "24.11.5_v0.0.42/slurmdb-job-pending.json",
        "6370",
        "PENDING",
        0,
        0,
        0,
        0,
        "standard",
    ),
    (
        "24.11.5_v0.0.42/slurmdb-job-running.json",
        "6368",
        "RUNNING",
        1,
        1762788801,
        0,
        56,
        "standard",
    ),
    (
        "24.11.5_v0.0.42/slurmdb-job-timeout.json",
        "6357",
        "TIMEOUT",
        1,
        1762788766,
        1762788831,
        65,
        "standard",
    ),
];

#[test]
fn every_slurmdbd_job_document_from_23_02_to_24_11_reads_state_nodes_and_times() {
    skip_without_corpus!();
    for (f, id, st, nodes, start, end, elapsed, partition) in JSON {
        let jobs = json_jobs(&format!("sacct/slurm-web/{f}"));
        assert_eq!(jobs.len(), 1, "{f}");
        let j = &jobs[0];
        assert_eq!(j.job_id, *id, "{f}");
        assert_eq!(j.state, state(st), "{f}");
        assert_eq!(
            (j.nnodes, j.start_s, j.end_s, j.elapsed_s),
            (*nodes, *start, *end, *elapsed),
            "{f}"
        );
        assert_eq!(j.partition, *partition, "{f}");
        // These emulated clusters record no gres/gpu TRES (the jobs asked for GPUs on the
        // submit line, the accounting did not count them): no GPUs, not zero GPUs.
        assert_eq!(j.gpus, None, "{f}");
    }
}

#[test]
fn a_document_that_found_nothing_has_no_jobs_and_reports_cleanly() {
    skip_without_corpus!();
    for v in ["23.02.8_v0.0.39", "24.05.3_v0.0.41", "24.11.5_v0.0.42"] {
        let rel = format!("sacct/slurm-web/{v}/slurmdb-job-unfound.json");
        assert!(json_jobs(&rel).is_empty(), "{rel}");
        let (rc, _, err) = run(&["report", "-i", file(&rel).to_str().unwrap()]);
        assert_eq!(rc, 0, "{rel}: {err}");
    }
}

const HB_COLUMNS: &str = "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,Elapsed,TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,TRESUsageInMax,TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,MaxVMSizeNode,MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,Comment";

fn hb() -> TextLayout {
    TextLayout {
        columns: Some(HB_COLUMNS.into()),
        delimiter: Some("☃".into()),
        ..TextLayout::default()
    }
}

/// The Habrok capture as a `--format` without its free-text columns (JobName, Comment) would
/// have printed it: those two fields dropped from every line, in memory. The corpus file is
/// read as it is.
fn hb_without_free_text() -> (String, TextLayout) {
    let text = std::fs::read_to_string(file("sacct/hb-jobinfo/sacct.txt")).unwrap();
    let names: Vec<&str> = HB_COLUMNS.split(',').collect();
    let free = |i: usize| matches!(names.get(i), Some(&"JobName" | &"Comment"));
    let mut out = String::new();
    for line in text.lines() {
        let kept: Vec<&str> = line
            .split('☃')
            .enumerate()
            .filter(|(i, _)| !free(*i))
            .map(|(_, f)| f)
            .collect();
        out.push_str(&kept.join("☃"));
        out.push('\n');
    }
    let columns: Vec<&str> = names
        .into_iter()
        .filter(|n| !matches!(*n, "JobName" | "Comment"))
        .collect();
    (
        out,
        TextLayout {
            columns: Some(columns.join(",")),
            ..hb()
        },
    )
}

fn utc(s: &str) -> i64 {
    sacct_text::parse_time(s).unwrap()
}

#[test]
fn the_habrok_capture_with_its_free_text_columns_reads_as_it_does_without_them() {
    skip_without_corpus!();
    // JobName early and Comment last, no AdminComment: every line is as wide as the header,
    // so no value held the delimiter and every job reads where its columns say.
    let (jobs, notes) = noted_jobs("sacct/hb-jobinfo/sacct.txt", &hb());
    let (text, layout) = hb_without_free_text();
    let without = sacct_text::read_all_with(text.as_bytes(), "hb", &layout).unwrap();
    assert_eq!(jobs, without);
    assert_eq!(jobs.len(), 100);
    assert_eq!((notes.skipped, notes.padded), (0, 0));
    // Read with a warning that names the columns and the export to trust instead.
    assert!(
        notes.missing_columns.iter().any(|m| m.starts_with(
            "`JobName` and `Comment` hold a job's user's free text: the lines as wide as the header were read"
        ) && m.contains("export with `sacct --json`")),
        "{:?}",
        notes.missing_columns
    );
}

#[test]
fn the_habrok_noheader_snowman_parsable_output_reads_every_job_once() {
    skip_without_corpus!();
    let (text, layout) = hb_without_free_text();
    let jobs = sacct_text::read_all_with(text.as_bytes(), "hb", &layout).unwrap();
    // 242 lines: 100 jobs, the rest .batch/.extern/.0 steps.
    assert_eq!(jobs.len(), 100);
    let count = |s: JobState| jobs.iter().filter(|j| j.state == s).count();
    assert_eq!(count(JobState::Completed), 66);
    assert_eq!(count(JobState::Cancelled), 8);
    assert_eq!(count(JobState::Failed), 8);
    assert_eq!(count(JobState::Timeout), 7);
    assert_eq!(count(JobState::Pending), 7);
    assert_eq!(count(JobState::Running), 3);
    assert_eq!(count(JobState::NodeFail), 1);
    let by = |id: &str| jobs.iter().find(|j| j.job_id == id).unwrap();
    // `CANCELLED by 10314909`, AllocTRES `gres/gpu:v100=1,gres/gpu=1`: one GPU, not two.
    let g = by("7965768");
    assert_eq!(
        (g.state, g.gpus, g.partition.as_str()),
        (JobState::Cancelled, Some(1), "gpulong")
    );
    assert_eq!(g.start_s, utc("2024-04-04T21:45:17"));
    assert_eq!(g.end_s - g.start_s, 15 * 3600 + 28 * 60 + 22);
    assert_eq!(g.elapsed_s, 15 * 3600 + 28 * 60 + 22);
    // Cancelled before it started: Start `None`, NodeList `None assigned`.
    let c = by("4047445");
    assert_eq!((c.state, c.start_s, c.gpus), (JobState::Cancelled, 0, None));
    assert_eq!(c.end_s, utc("2023-09-01T14:55:57"));
    // An array task keeps its id; Elapsed `1-04:37:26` is a day and a bit.
    let a = by("5908801_3");
    assert_eq!(a.elapsed_s, 86_400 + 4 * 3600 + 37 * 60 + 26);
    let pending: Vec<_> = jobs
        .iter()
        .filter(|j| j.state == JobState::Pending)
        .collect();
    assert!(pending.iter().all(|j| j.start_s == 0 && j.end_s == 0));
}

#[test]
fn noheader_output_without_its_columns_is_refused_with_what_to_pass() {
    skip_without_corpus!();
    let err = text_jobs("sacct/hb-jobinfo/sacct.txt", &TextLayout::default()).unwrap_err();
    assert!(err.contains(":1: "), "{err}");
    assert!(err.contains("is not a sacct header line"), "{err}");
    assert!(err.contains("--input-columns"), "{err}");
}

#[test]
fn the_habrok_output_reports_through_the_command() {
    skip_without_corpus!();
    let (rc, with_free_text, err) = run(&[
        "report",
        "-i",
        file("sacct/hb-jobinfo/sacct.txt").to_str().unwrap(),
        "-f",
        "json",
        "--input-delimiter",
        "☃",
        "--input-columns",
        HB_COLUMNS,
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        err.contains("`JobName` and `Comment` hold a job's user's free text"),
        "{err}"
    );
    let (text, layout) = hb_without_free_text();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("hb.txt");
    std::fs::write(&p, text).unwrap();
    let (rc, out, err) = run(&[
        "report",
        "-i",
        p.to_str().unwrap(),
        "-f",
        "json",
        "--input-delimiter",
        "☃",
        "--input-columns",
        layout.columns.as_deref().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let records: u64 = doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["records"].as_u64().unwrap())
        .sum();
    assert_eq!(records, 100);
    // The same groups and figures as the capture without those columns.
    let with: serde_json::Value = serde_json::from_str(&with_free_text).unwrap();
    assert_eq!(with["groups"], doc["groups"]);
}

const HPC_COLUMNS: &str = "State,JobID,ReqCPUS,ReqMem,ReqNodes,Constraints,Submit,Eligible,Start,Elapsed,Suspended,End,ExitCode,DerivedExitCode,AllocNodes,NCPUS,MaxDiskRead,MaxDiskWrite,MaxPages,MaxRSS,MaxVMSize,CPUTime,UserCPU,SystemCPU,TotalCPU";

fn hpc(partition: bool) -> TextLayout {
    TextLayout {
        columns: Some(if partition {
            format!("{HPC_COLUMNS},Partition")
        } else {
            HPC_COLUMNS.to_string()
        }),
        delimiter: None,
        ..TextLayout::default()
    }
}

#[test]
fn the_2022_parsable2_captures_read_states_array_tasks_and_node_counts() {
    skip_without_corpus!();
    let jobs = text_jobs("sacct/hpc-cost-simulator/sacct-output.txt", &hpc(false)).unwrap();
    assert_eq!(jobs.len(), 483);
    let count = |s: JobState| jobs.iter().filter(|j| j.state == s).count();
    assert_eq!(count(JobState::OutOfMemory), 261);
    assert_eq!(count(JobState::Failed), 129);
    assert_eq!(count(JobState::Cancelled), 91);
    assert_eq!(count(JobState::Completed), 2);
    let arr = text_jobs(
        "sacct/hpc-cost-simulator/array_sacct-output.txt",
        &hpc(false),
    )
    .unwrap();
    let ids: Vec<&str> = arr.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "846_0", "846_1", "846_2", "846_3", "846_4", "846_5", "846_6", "846_7"
        ]
    );
    assert!(
        arr.iter()
            .all(|j| j.state == JobState::OutOfMemory && j.elapsed_s == 301)
    );
    let multi = text_jobs(
        "sacct/hpc-cost-simulator/multi-node_sacct-output.txt",
        &hpc(false),
    )
    .unwrap();
    assert_eq!(multi.len(), 1);
    assert_eq!((multi[0].job_id.as_str(), multi[0].nnodes), ("845", 4));
}

#[test]
fn the_lines_users_reported_as_breaking_a_parser_read_as_a_person_reads_them() {
    skip_without_corpus!();
    // A pending job: Start and End `Unknown`.
    let j = text_jobs(
        "sacct/hpc-cost-simulator/issues_5_sacct-output.txt",
        &hpc(false),
    )
    .unwrap();
    assert_eq!(
        (j.len(), j[0].state, j[0].start_s, j[0].end_s),
        (1, JobState::Pending, 0, 0)
    );
    // `CANCELLED by 32874` with Start `None`, and an INVALID record; Partition last.
    let j = text_jobs(
        "sacct/hpc-cost-simulator/issues_61_sacct-output.txt",
        &hpc(true),
    )
    .unwrap();
    assert_eq!(j.len(), 2);
    assert_eq!((j[0].state, j[0].start_s), (JobState::Cancelled, 0));
    assert_eq!(j[0].partition, "us-east-1a_all");
    assert_eq!(j[1].state, JobState::Other);
    // NODE_FAIL job 12; its step 12.0 is not a job.
    let j = text_jobs(
        "sacct/hpc-cost-simulator/issues_59_sacct-output.txt",
        &hpc(true),
    )
    .unwrap();
    assert_eq!(
        (j.len(), j[0].job_id.as_str(), j[0].state),
        (1, "12", JobState::NodeFail)
    );
    // ReqMem `0n` (the old per-node suffix) next to an `.extern` step; a job cancelled before
    // it started (Start `None`).
    let j = text_jobs(
        "sacct/hpc-cost-simulator/issues_17_sacct-output.txt",
        &hpc(false),
    )
    .unwrap();
    let ids: Vec<&str> = j.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["2346372", "39"]);
    assert_eq!(
        (j[0].state, j[0].elapsed_s),
        (JobState::Completed, 31 * 60 + 1)
    );
    assert_eq!((j[1].state, j[1].start_s), (JobState::Cancelled, 0));
    // Only an `.interactive` step: no job at all.
    let j = text_jobs(
        "sacct/hpc-cost-simulator/issues_63_sacct-output.txt",
        &hpc(false),
    )
    .unwrap();
    assert!(j.is_empty(), "{j:?}");
}

fn noted_jobs(rel: &str, layout: &TextLayout) -> (Vec<JobRecord>, InputNotes) {
    let f = std::fs::File::open(file(rel)).unwrap();
    sacct_text::read_all_noting(BufReader::new(f), rel, layout).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_truncated_job_line_is_read_without_the_cpu_time_it_lost_and_says_so() {
    skip_without_corpus!();
    // issues/20: eleven jobs 67108865..67108875, each OUT_OF_MEMORY after 5:16. Line 22 (job
    // 67108870) was cut after SystemCPU, so only TotalCPU, a column the report does not read,
    // is gone; line 31, a cut `.batch` step, is not a job. `100Mcd` and `0.07Mnz` are values
    // of columns the report does not read either.
    let (jobs, notes) = noted_jobs(
        "sacct/hpc-cost-simulator/issues_20_sacct-output.txt",
        &hpc(false),
    );
    let ids: Vec<u64> = jobs.iter().map(|j| j.job_id.parse().unwrap()).collect();
    assert_eq!(ids, (67108865..=67108875).collect::<Vec<u64>>());
    assert!(
        jobs.iter()
            .all(|j| j.state == JobState::OutOfMemory && j.elapsed_s == 5 * 60 + 16)
    );
    assert_eq!(
        (notes.skipped, notes.padded, notes.padded_first.clone()),
        (0, 1, vec![22])
    );
}

#[test]
fn a_history_mixing_captures_with_and_without_partition_reads_every_job_once() {
    skip_without_corpus!();
    // v2 appended Partition to the --format for some captures only: 16 jobs say their partition
    // (15 partition1 on lines 1-29, one partition2 on line 877), the other 467 lines, from line
    // 31 on, end before it. The jobs are those of the first capture: 483, same states.
    let (jobs, notes) = noted_jobs("sacct/hpc-cost-simulator/sacct-output-v2.txt", &hpc(true));
    assert_eq!(jobs.len(), 483);
    let count = |s: JobState| jobs.iter().filter(|j| j.state == s).count();
    assert_eq!(
        (
            count(JobState::OutOfMemory),
            count(JobState::Failed),
            count(JobState::Cancelled),
            count(JobState::Completed)
        ),
        (261, 129, 91, 2)
    );
    let in_part = |p: &str| jobs.iter().filter(|j| j.partition == p).count();
    assert_eq!(
        (in_part("partition1"), in_part("partition2"), in_part("")),
        (15, 1, 467)
    );
    assert_eq!((notes.skipped, notes.padded), (0, 467));
    assert_eq!(notes.padded_first[0], 31);
    // Through the command: the report warns, on stderr and in `inputs`, and still counts all.
    let path = file("sacct/hpc-cost-simulator/sacct-output-v2.txt");
    let columns = format!("{HPC_COLUMNS},Partition");
    let (rc, out, err) = run(&[
        "report",
        "-i",
        path.to_str().unwrap(),
        "--input-columns",
        &columns,
        "--format",
        "json",
    ]);
    assert_eq!(rc, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["inputs"]["readable"], "warn");
    assert_eq!(doc["inputs"]["padded_lines"], 467);
    let warning = doc["inputs"]["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("467 lines shorter than the header, read with the missing trailing columns empty: line 31, 33,"),
        "{warning}"
    );
    assert!(err.contains("467 lines shorter than the header"), "{err}");
    let records: u64 = doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["records"].as_u64().unwrap())
        .sum();
    assert_eq!(records, 483);
}

#[test]
fn without_the_corpus_a_test_skips_saying_so_and_fails_when_the_corpus_is_required() {
    // Runs one corpus test of this very binary with the corpus pointed at an empty folder.
    let empty = tempfile::tempdir().unwrap();
    let me = std::env::current_exe().unwrap();
    let one = |require: Option<&str>| {
        let mut cmd = std::process::Command::new(&me);
        cmd.args([
            "--exact",
            "a_truncated_job_line_is_read_without_the_cpu_time_it_lost_and_says_so",
            "--test-threads=1",
        ])
        .env(real_world_support::ENV, empty.path())
        .env_remove("CI")
        .env_remove(real_world_support::REQUIRE_ENV);
        if let Some((k, v)) = require.map(|k| k.split_once('=').unwrap()) {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, text) = one(None);
    assert!(ok, "{text}");
    assert!(
        text.contains("SKIPPED: the real-world corpus tests"),
        "{text}"
    );
    assert!(text.contains("1 passed"), "the one test ran: {text}");
    for require in ["FABRIC_REQUIRE_REAL_WORLD=1", "CI=true"] {
        let (ok, text) = one(Some(require));
        assert!(!ok, "{require}: {text}");
        assert!(text.contains("set FABRIC_REAL_WORLD"), "{require}: {text}");
    }
}

#[test]
fn a_missing_column_is_named_with_a_command_that_produces_it() {
    let err = sacct_text::read_all(&b"State|Start|End\nCOMPLETED|1|2\n"[..], "t.txt")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no `JobID` (or `JobIDRaw`) column"), "{err}");
    let (_, cmd) = err.split_once("sacct -P -o ").unwrap();
    assert!(
        cmd.starts_with("JobID,"),
        "the suggested command has JobID: {err}"
    );
    let layout = TextLayout {
        columns: Some("JobID,Start".into()),
        delimiter: None,
        ..TextLayout::default()
    };
    let err = sacct_text::read_all_with(&b"1|2\n"[..], "t.txt", &layout)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--input-columns has no `State` column"),
        "{err}"
    );
}

#[test]
fn a_header_with_a_custom_delimiter_and_a_trailing_one_reads() {
    let t = "JobID☃State☃Start☃End☃ElapsedRaw☃NNodes☃AllocTRES☃\n\
             77☃TIMEOUT☃100☃3700☃3600☃2☃billing=8,gres/gpu:a100=8,gres/gpu=8,node=2☃\n\
             77.batch☃CANCELLED☃100☃3700☃3600☃1☃☃\n";
    let jobs = sacct_text::read_all(t.as_bytes(), "t.txt").unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        (
            jobs[0].state,
            jobs[0].gpus,
            jobs[0].nnodes,
            jobs[0].elapsed_s
        ),
        (JobState::Timeout, Some(8), 2, 3600)
    );
}

#[test]
fn generated_v0_0_44_and_v0_0_38_documents_read_like_the_captured_versions() {
    // The corpus has no 22.05 (v0.0.38) or 25.x (v0.0.43/44) capture: the fields that changed.
    let v44 = r#"{"meta":{"plugin":{"type":"","name":"","data_parser":"data_parser/v0.0.44","accounting_storage":""},"slurm":{"version":{"major":"25","micro":"0","minor":"05"},"release":"25.05.0","cluster":"c1"}},
      "jobs":[{"account":"ml","allocation_nodes":2,"array":{"job_id":0,"limits":{"max":{"running":{"tasks":0}}},"task_id":{"set":false,"infinite":false,"number":0},"task":""},
        "cluster":"c1","comment":{"administrator":"","job":"","system":""},"exit_code":{"status":["SUCCESS"],"return_code":{"set":true,"infinite":false,"number":0},"signal":{"id":{"set":false,"infinite":false,"number":0},"name":""}},
        "het":{"job_id":0,"job_offset":{"set":false,"infinite":false,"number":0}},"job_id":901,"name":"train","partition":"ib","qos":"normal",
        "reservation":{"id":0,"name":"","requested":""},"restart_cnt":1,"segment_size":0,
        "state":{"current":["TIMEOUT"],"reason":"None"},
        "steps":[{"step":{"id":"901.batch","name":"batch"},"time":{"start":{"set":true,"infinite":false,"number":100},"end":{"set":true,"infinite":false,"number":3700},"limit":{"set":false,"infinite":true,"number":0}}}],
        "time":{"elapsed":3600,"eligible":90,"end":3700,"limit":{"set":true,"infinite":false,"number":60},"planned":{"set":true,"infinite":false,"number":10},"start":100,"submission":80},
        "tres":{"allocated":[{"type":"cpu","name":"","id":1,"count":64},{"type":"gres","name":"gpu","id":1001,"count":16},{"type":"gres","name":"gpu:h100","id":1002,"count":16}],"requested":[]},
        "user":"ann"}],"warnings":[],"errors":[]}"#;
    let jobs = sacct_json::read_all(v44.as_bytes(), "v44").unwrap();
    let j = &jobs[0];
    assert_eq!(
        (j.job_id.as_str(), j.state, j.gpus, j.nnodes, j.restarts),
        ("901", JobState::Timeout, Some(16), 2, 1)
    );
    assert_eq!((j.start_s, j.end_s, j.elapsed_s), (100, 3700, 3600));
    let v38 = r#"{"meta":{"plugin":{"type":"openapi\/dbv0.0.38","name":"Slurm OpenAPI dbv0.0.38"},"Slurm":{"version":{"major":22,"micro":8,"minor":5},"release":"22.05.8"}},"errors":[],
      "jobs":[{"account":"ml","allocation_nodes":1,"array":{"job_id":0,"task_id":null},"cluster":"c1","comment":{"administrator":null},
        "exit_code":{"status":"SUCCESS","return_code":0},"het":{"job_id":0,"job_offset":null},"job_id":77,"partition":"ib","qos":"normal",
        "state":{"current":"NODE_FAIL","reason":"None"},"steps":[{"step":{"id":{"job_id":77,"step_id":"batch"}}}],
        "time":{"elapsed":60,"eligible":10,"end":130,"start":70,"submission":5},
        "tres":{"allocated":[{"type":"gres","name":"gpu:a100","id":1002,"count":8}],"requested":[]},"user":"bo"}]}"#;
    let jobs = sacct_json::read_all(v38.as_bytes(), "v38").unwrap();
    let j = &jobs[0];
    assert_eq!(
        (j.job_id.as_str(), j.state, j.gpus, j.elapsed_s),
        ("77", JobState::NodeFail, Some(8), 60)
    );
}
