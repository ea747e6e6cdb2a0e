//! The `sacct -P` reader's tests.

use super::*;
use crate::report::{JobState, TagState};

const HEADER: &str = "JobID|Partition|Account|User|Cluster|QOS|State|Submit|Eligible|Start|End|ElapsedRaw|NNodes|AllocTRES|AdminComment\n";

#[test]
fn steps_are_skipped_and_a_comment_with_bars_is_kept_whole() {
    let text = format!(
        "{HEADER}12|ib|ml|ann|c1|normal|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:00:00|2024-05-01T10:01:00|2024-05-01T11:01:00|3600|2|billing=16,cpu=16,gres/gpu=16,node=2|JS1:a|b fabric-check/v1 {{\"nnodes\":2}}\n12.batch|||||||||||||||\n"
    );
    let jobs = read_all(text.as_bytes(), "t.txt").unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].gpus, Some(16));
    assert_eq!(jobs[0].start_s - jobs[0].submit_s, 60);
    assert!(matches!(&jobs[0].tag, TagState::Present(t) if t.nnodes == 2));
}

#[test]
fn a_header_wider_than_the_split_array_reads_the_same() {
    let extra = 40;
    // Columns the report does not read (of a fixed form: any free text refuses the input).
    let pad = |s: &str| format!("{}{s}", "1|".repeat(extra));
    let header = format!("{}{HEADER}", "NTasks|".repeat(extra));
    let line = "12|ib|ml|ann|c1|normal|COMPLETED|100|100|160|3760|3600|2|gres/gpu=16|JS1:a|b fabric-check/v1 {\"nnodes\":2}\n";
    let narrow = read_all(format!("{HEADER}{line}").as_bytes(), "t.txt").unwrap();
    let wide = read_all(format!("{header}{}", pad(line)).as_bytes(), "t.txt").unwrap();
    assert_eq!(narrow, wide);
    assert!(matches!(&wide[0].tag, TagState::Present(t) if t.nnodes == 2));
    let err = read_all(format!("{header}12|ib\n").as_bytes(), "t.txt")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "t.txt:2: 2 fields where the header has 55 and its JobID is missing or may be cut; was the output cut or mixed with other text?"
    );
}

/// A passing tag of ours, and a failing one (root's).
const PASS: &str = r#"fabric-check/v1 {"verdict":"pass","nnodes":1,"counts":{"pass":1}}"#;
const FAIL: &str = r#"fabric-check/v1 {"verdict":"fail","nnodes":1,"counts":{"fail":1}}"#;

/// The verdicts read, by job: `(job, state, verdict)`.
fn verdicts(jobs: &[JobRecord]) -> Vec<(String, JobState, Option<fabric_proto::tag::Verdict>)> {
    jobs.iter()
        .map(|j| {
            let v = match &j.tag {
                TagState::Present(t) => t.verdict,
                _ => None,
            };
            (j.job_id.clone(), j.state, v)
        })
        .collect()
}

#[test]
fn a_job_name_holding_the_delimiter_cannot_pass_a_failed_job_off_as_completed_with_a_pass() {
    // Job 12 FAILED and root wrote `fail`; its user named it so that the fields after the
    // name shift and the user's segment comes first in the joined AdminComment.
    let header = "JobID|JobName|State|ElapsedRaw|NNodes|AdminComment
";
    let name = format!("train|COMPLETED|60|1|{PASS}");
    let text = format!(
        "{header}12|{name}|FAILED|60|1|{FAIL}
"
    );
    let read = read_all_noting(text.as_bytes(), "saved.txt", &TextLayout::default());
    if let Ok((jobs, _)) = &read {
        assert!(
            !verdicts(jobs)
                .iter()
                .any(|(_, s, _)| *s == JobState::Completed),
            "the user's text was read as the job's row: {:?}",
            verdicts(jobs)
        );
    }
    let err = read.unwrap_err().to_string();
    assert!(
        err.starts_with("saved.txt:1: the header names `JobName`, a column a job's user writes as free text: such a value can hold line breaks as well as the delimiter, so beside AdminComment"),
        "{err}"
    );
    assert!(err.contains("export with `sacct --json` instead"), "{err}");
    assert!(err.contains("leaves it out"), "{err}");
}

#[test]
fn a_work_dir_holding_a_line_break_cannot_forge_a_whole_row_as_wide_as_the_header() {
    // The user's text holds the delimiter and a line break, placed so that both lines have
    // exactly the header's six fields: a forged row for job 12, then job 12's real fields
    // (FAILED, root's `fail`) under a job id the user chose.
    let header = "JobID|WorkDir|State|ElapsedRaw|NNodes|AdminComment
";
    let dir = format!(
        "/home/ann|COMPLETED|60|1|{PASS}
13|/tmp"
    );
    let text = format!(
        "{header}12|{dir}|FAILED|60|1|{FAIL}
"
    );
    assert!(text.lines().skip(1).all(|l| l.split('|').count() == 6));
    let read = read_all_noting(text.as_bytes(), "saved.txt", &TextLayout::default());
    if let Ok((jobs, _)) = &read {
        panic!("a forged row was read: {:?}", verdicts(jobs));
    }
    let err = read.unwrap_err().to_string();
    assert!(
        err.contains("names `WorkDir`, a column a job's user writes"),
        "{err}"
    );
    // The same when the columns are given for output made without a header.
    let layout = TextLayout {
        columns: Some("JobID,Comment,SubmitLine,State,AdminComment".into()),
        ..TextLayout::default()
    };
    let err = read_all_with(
        &b"12|a|b|FAILED|
"[..],
        "saved.txt",
        &layout,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--input-columns names `Comment` and `SubmitLine`, columns a job's user writes as free text"),
        "{err}"
    );
    assert!(err.contains("leaves them out"), "{err}");
}

#[test]
fn extra_fields_join_the_one_column_that_can_hold_the_delimiter_and_are_skipped_when_two_can() {
    // Fixed columns only: another tool's `|` in AdminComment is joined back.
    let fixed = format!(
        "JobID|State|ElapsedRaw|AdminComment
12|FAILED|60|JS1:a|b {FAIL}
"
    );
    let jobs = read_all(fixed.as_bytes(), "t.txt").unwrap();
    assert_eq!(
        verdicts(&jobs),
        [(
            "12".to_string(),
            JobState::Failed,
            Some(fabric_proto::tag::Verdict::Fail)
        )]
    );
    // `Constraints` can hold `|` (`a|b`) as well: the extra fields could be either's, so that
    // line is skipped with the reason, for `|` and for any other delimiter alike, and the line
    // as wide as the header is read.
    for (d, text) in [
        (
            "|",
            format!(
                "JobID|Constraints|State|AdminComment
11|a|COMPLETED|
12|a|b|FAILED|{FAIL}
"
            ),
        ),
        (
            "☃",
            format!(
                "JobID☃Constraints☃State☃AdminComment
11☃a☃COMPLETED☃
12☃a☃b☃FAILED☃{FAIL}
"
            ),
        ),
    ] {
        let (jobs, notes) =
            read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
        assert_eq!(
            verdicts(&jobs),
            [("11".to_string(), JobState::Completed, None)],
            "{d}"
        );
        let (line, why) = &notes.skipped_first[0];
        assert_eq!(*line, 3, "{d}");
        assert!(
            why.starts_with("job 12: 5 fields where the header has 4, and `Constraints` and `AdminComment` can each hold the delimiter: which field holds the extra ones cannot be told, so the line is not read"),
            "{d}: {why}"
        );
        assert!(why.contains("export with `sacct --json`"), "{why}");
    }
    // One such column anywhere takes the extra fields: the ones after it stay in place.
    let text = "JobID|Constraints|State|ElapsedRaw
11|a|COMPLETED|60
12|a|b|FAILED|60
";
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    assert_eq!(notes.skipped, 0);
    assert_eq!(jobs[1].state, JobState::Failed);
    assert_eq!(jobs[1].elapsed_s, 60);
}

#[test]
fn a_column_this_reader_does_not_know_is_taken_for_free_text() {
    // Beside AdminComment it refuses the export.
    let err = read_all(
        &b"JobID|State|Notes|AdminComment
1|COMPLETED|x|
"[..],
        "t.txt",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("t.txt:1: the header names `Notes`, not a sacct column this reader knows (misspelt?): it could hold a job's user's free text"),
        "{err}"
    );
    assert!(err.contains("export with `sacct --json` instead"), "{err}");
    // Without it, the export reads with a warning that names it.
    let (jobs, notes) = read_all_noting(
        &b"JobID|State|Notes\n1|COMPLETED|x\n"[..],
        "t.txt",
        &TextLayout::default(),
    )
    .unwrap();
    assert_eq!(jobs.len(), 1);
    assert!(
        notes.missing_columns.iter().any(|m| m.starts_with(
            "`Notes` holds a job's user's free text (`Notes` is not a sacct column this reader knows (misspelt?), so it is taken for free text)"
        )),
        "{:?}",
        notes.missing_columns
    );
    // A misspelt column the report needs is named as missing first.
    let err = read_all(&b"JobID|Stat\n1|COMPLETED\n"[..], "t.txt")
        .unwrap_err()
        .to_string();
    assert!(err.contains("the header has no `State` column"), "{err}");
    // Beside a known free-text column it is named too.
    let err = read_all(
        &b"JobID|State|JobName|Notes|AdminComment\n1|COMPLETED|a|b|\n"[..],
        "t.txt",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("names `JobName`, a column a job's user writes as free text")
            && err.ends_with("(`Notes` is not a sacct column this reader knows (misspelt?), so it is taken for free text too)"),
        "{err}"
    );
    assert_eq!(column_form("ALLOCTRES"), ColumnForm::Fixed);
    assert_eq!(column_form("Constraints"), ColumnForm::MayHoldDelimiter);
    assert_eq!(column_form("jobname"), ColumnForm::FreeText);
}

#[test]
fn a_short_line_is_reported_with_its_line_number() {
    let text = format!("{HEADER}12|ib|ml\n");
    let err = read_all(text.as_bytes(), "t.txt").unwrap_err().to_string();
    assert_eq!(
        err,
        "t.txt:2: 3 fields where the header has 15 and its State is missing or may be cut; was the output cut or mixed with other text?"
    );
}

#[test]
fn a_cut_line_is_skipped_and_counted_while_the_lines_around_it_are_read() {
    // Line 4 stops inside State, line 5 inside End (both read by the report): skipped.
    // Line 6 stops after ExitCode, which the report does not read: only NNodes is gone,
    // whole, and reads as empty.
    let header = "JobID|State|Start|End|ExitCode|NNodes\n";
    let text = format!(
        "{header}1|COMPLETED|100|200|0:0|2\n2|FAILED|100|200|0:0|\n3|FAIL\n4|COMPLETED|100|20\n5|TIMEOUT|100|900|0:0\n6|COMPLETED|100|300|0:0|1\n"
    );
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["1", "2", "5", "6"]);
    assert_eq!((jobs[2].state, jobs[2].nnodes), (JobState::Timeout, 0));
    assert_eq!(notes.skipped, 2);
    let lines: Vec<u64> = notes.skipped_first.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, [4, 5]);
    assert!(
        notes.skipped_first[0]
            .1
            .contains("its State is missing or may be cut")
    );
    assert!(
        notes.skipped_first[1]
            .1
            .contains("its last field, End, may be cut")
    );
    assert_eq!((notes.padded, notes.padded_first.clone()), (1, vec![6]));
    let w = notes.warnings();
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(
        w[0].starts_with("2 lines skipped: line 4: 2 fields"),
        "{w:?}"
    );
    assert!(
        w[2].starts_with("no AllocTRES (or AllocGRES) column"),
        "{w:?}"
    );
    // The strict reader refuses the same input at the first cut line.
    let err = read_all(text.as_bytes(), "t.txt").unwrap_err().to_string();
    assert!(
        err.starts_with("t.txt:4: 2 fields where the header has 6"),
        "{err}"
    );
}

#[test]
fn a_line_missing_only_trailing_columns_after_an_unread_one_is_read_with_them_empty() {
    // Partition added last to the --format halfway through a saved history.
    let header = "JobID|State|ElapsedRaw|TotalCPU|Partition\n";
    let text = format!("{header}1|COMPLETED|60|00:10|ib\n2|FAILED|30|00:05\n");
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!((jobs[1].state, jobs[1].elapsed_s), (JobState::Failed, 30));
    assert_eq!(jobs[1].partition, "");
    assert_eq!(
        (notes.skipped, notes.padded, notes.padded_first.clone()),
        (0, 1, vec![3])
    );
    assert_eq!(
        notes.warnings(),
        [
            "1 line shorter than the header, read with the missing trailing columns empty: line 3",
            "no AllocTRES (or AllocGRES) column: the jobs' GPUs are unknown, so GPU-hours show 0; add AllocTRES to sacct's --format",
            "no NNodes (or AllocNodes) column: node-hours are unknown and counted as 0; add NNodes to sacct's --format",
        ]
    );
}

#[test]
fn an_input_where_no_line_reads_is_an_error_not_an_empty_report() {
    let text = "JobID|State|End\n1|COMP\n2|FAIL\n";
    let err = stream(text.as_bytes(), "t.txt", 1, || (), |_: &mut (), _| {})
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("t.txt:2: 2 fields"), "{err}");
}

#[test]
fn more_skipped_lines_than_are_named_are_counted() {
    let header = "JobID|State|End\n";
    let mut text = format!("{header}1|COMPLETED|5\n");
    for i in 0..8 {
        text.push_str(&format!("{i}|X\n"));
    }
    let (_, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    assert_eq!(
        (notes.skipped, notes.skipped_first.len()),
        (8, crate::report::NAMED)
    );
    assert!(
        notes.warnings()[0].ends_with("; and 3 more"),
        "{:?}",
        notes.warnings()
    );
}

#[test]
fn a_header_without_state_says_how_to_run_sacct() {
    let err = read_all(&b"JobID|Partition\n"[..], "t.txt")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("t.txt:1: the header has no `State` column; run `sacct -P -o JobID"),
        "{err}"
    );
}

#[test]
fn a_capture_listing_every_job_twice_counts_each_job_once_and_says_so() {
    let header = "JobID|Partition|State|Start|End|ElapsedRaw|NNodes|AllocTRES\n";
    let once =
        "101|ib|COMPLETED|100|7300|7200|2|gres/gpu=8\n102|roce|FAILED|100|3700|3600|1|gres/gpu=4\n";
    // A requeued job's earlier attempt (`sacct -D`) has the same JobID but its own times:
    // it is another record, not a repeat.
    let requeue = "102|roce|REQUEUED|50|90|40|1|gres/gpu=4\n";
    let text = format!("{header}{once}{requeue}{once}");
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["101", "102", "102"]);
    assert_eq!(notes.duplicates, 2);
    let w = notes.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("2 records listed a second time (same JobID, cluster, times and state) and counted once: job 101, 102;"),
        "{w:?}"
    );
    assert!(!notes.is_clean());
}

#[test]
fn without_an_elapsed_column_an_ended_jobs_duration_is_end_minus_start() {
    let header = "JobID|State|Start|End|NNodes|AllocTRES\n";
    let text = format!(
        "{header}7|COMPLETED|2024-05-01T10:00:00|2024-05-01T12:30:00|2|gres/gpu=8\n8|RUNNING|2024-05-01T10:00:00|Unknown|1|gres/gpu=8\n"
    );
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    assert_eq!(jobs[0].elapsed_s, 9000);
    assert_eq!(jobs[1].elapsed_s, 0);
    assert!(notes.is_clean(), "{:?}", notes.warnings());
}

#[test]
fn a_history_without_durations_or_gpus_names_the_missing_columns() {
    let text = "JobID|State|Start|NNodes\n7|COMPLETED|2024-05-01T10:00:00|2\n";
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    assert_eq!((jobs[0].elapsed_s, jobs[0].gpus), (0, None));
    assert_eq!(
        notes.warnings(),
        [
            "no Elapsed (or ElapsedRaw) column, nor both Start and End: every job's duration, and so its node-hours and GPU-hours, is unknown and counted as 0; add ElapsedRaw to sacct's --format",
            "no AllocTRES (or AllocGRES) column: the jobs' GPUs are unknown, so GPU-hours show 0; add AllocTRES to sacct's --format",
        ]
    );
}

#[test]
fn allocgres_gives_the_gpus_where_alloctres_is_absent() {
    let text = "JobID|State|ElapsedRaw|NNodes|AllocGRES\n7|COMPLETED|60|1|gpu:a100:4(IDX:0-3)\n8|COMPLETED|60|2|gpu:v100:1,gpu:a100:2\n10|COMPLETED|60|1|gpu:4,gpu:a100:4\n9|COMPLETED|60|1|\n";
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    let gpus: Vec<Option<u32>> = jobs.iter().map(|j| j.gpus).collect();
    assert_eq!(gpus, [Some(4), Some(3), Some(4), None]);
    assert!(notes.is_clean(), "{:?}", notes.warnings());
    assert_eq!(gpus_from_gres("mps:100"), None);
}

#[test]
fn times_read_as_epoch_or_iso() {
    assert_eq!(parse_time("1700000000").unwrap(), 1_700_000_000);
    assert_eq!(parse_time("1970-01-02T00:00:01").unwrap(), 86_401);
    assert_eq!(parse_time("Unknown").unwrap(), 0);
    assert!(parse_time("yesterday").is_err());
    // The calendar is checked: no 30th of February, no 25th hour.
    assert!(parse_time("2023-02-30T00:00:00").is_err());
    assert!(parse_time("2024-05-01T25:00:00").is_err());
    assert_eq!(parse_time("2024-02-29T00:00:00").unwrap(), 1_709_164_800);
    assert_eq!(utc_text(1_709_164_800), "2024-02-29T00:00:00");
    assert_eq!(utc_text(-1), "1969-12-31T23:59:59");
    assert_eq!(parse_elapsed("1-02:00:05"), Some(93_605));
}

/// The warning a free-text export is read with.
fn caution(notes: &InputNotes) -> &str {
    notes
        .missing_columns
        .iter()
        .find(|m| m.contains("free text"))
        .map_or("", String::as_str)
}

#[test]
fn an_export_with_the_job_name_last_and_no_admin_comment_reads_every_job() {
    // The shape XDMoD's shredder asks for: fixed columns, then JobName last, `--parsable2`.
    // A name holding the delimiter can only have moved its own fields: they are joined back.
    let text =
        "JobID|User|Partition|State|Submit|Eligible|Start|End|ElapsedRaw|NNodes|AllocTRES|JobName
11|ann|ib|COMPLETED|100|100|160|3760|3600|2|gres/gpu=8,node=2|train
12|bob|ib|FAILED|100|100|130|1930|1800|1|gres/gpu=4,node=1|sweep|lr=0.1
13|ann|ib|PENDING|100|100|Unknown|Unknown|0|0||
";
    let (jobs, notes) =
        read_all_noting(text.as_bytes(), "xdmod.txt", &TextLayout::default()).unwrap();
    assert_eq!(
        verdicts(&jobs),
        [
            ("11".to_string(), JobState::Completed, None),
            ("12".to_string(), JobState::Failed, None),
            ("13".to_string(), JobState::Pending, None),
        ]
    );
    assert_eq!((jobs[1].elapsed_s, jobs[1].gpus), (1800, Some(4)));
    assert_eq!((notes.skipped, notes.padded), (0, 0));
    assert!(
        caution(&notes).starts_with("`JobName` holds a job's user's free text: the lines as wide as the header were read, but a line break in such a value could frame a line"),
        "{notes:?}"
    );
}

#[test]
fn an_export_with_the_job_name_early_and_every_row_as_wide_as_the_header_reads_every_job() {
    let text = "JobID|JobName|User|Partition|State|Start|End|ElapsedRaw|NNodes|AllocTRES
21|prep|ann|ib|COMPLETED|160|3760|3600|2|gres/gpu=8,node=2
22|train run|bob|roce|TIMEOUT|130|1930|1800|1|gres/gpu=4,node=1
";
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(
        (jobs[1].partition.as_str(), jobs[1].state, jobs[1].elapsed_s),
        ("roce", JobState::Timeout, 1800)
    );
    assert_eq!(notes.skipped, 0);
    // A name holding the delimiter, with no other column that can: its fields are joined back.
    let text = format!("{text}23|a|b|ann|ib|FAILED|100|160|60|1|gres/gpu=1\n");
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    assert_eq!((jobs.len(), notes.skipped), (3, 0));
    assert_eq!((jobs[2].state, jobs[2].elapsed_s), (JobState::Failed, 60));
}

#[test]
fn a_row_whose_extra_fields_two_free_text_columns_could_hold_is_skipped_with_a_warning_naming_it() {
    // JobName early and Comment last (the Habrok layout): a `|` in either shifts the same way.
    let text = "JobID|JobName|State|ElapsedRaw|NNodes|Comment
31|a|COMPLETED|60|1|x
32|a|b|FAILED|60|1|y
33|c|FAILED|60|1|z
";
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    assert_eq!(
        verdicts(&jobs),
        [
            ("31".to_string(), JobState::Completed, None),
            ("33".to_string(), JobState::Failed, None),
        ]
    );
    assert_eq!(notes.skipped, 1);
    let warning = notes.warnings().join("\n");
    assert!(
        warning.contains("1 line skipped: line 3: job 32: 7 fields where the header has 6, and `JobName` and `Comment` can each hold the delimiter: which field holds the extra ones cannot be told, so the line is not read; export with `sacct --json`, or with `--parsable2 --delimiter=` a character no value holds"),
        "{warning}"
    );
}

#[test]
fn an_export_of_which_no_row_can_be_read_safely_is_refused_with_what_to_export_instead() {
    let text = "JobName|JobID|State|Comment
a|b|41|FAILED|x
c|42|FAILED|y|z
";
    let err = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default())
        .unwrap_err()
        .to_string();
    // The JobID sits between the two columns: it cannot be told either.
    assert!(
        err.starts_with("t.txt:2: 5 fields where the header has 4, and `JobName` and `Comment` can each hold the delimiter: which field holds the extra ones cannot be told, so the line is not read; export with `sacct --json`, or with `--parsable2 --delimiter=`"),
        "{err}"
    );
}

#[test]
fn a_line_shorter_than_the_header_is_not_read_when_a_free_text_value_may_have_broken_it() {
    // Job 52's name held a line break: neither piece is a row of its own.
    let text = "JobID|State|ElapsedRaw|NNodes|JobName
51|COMPLETED|60|1|a
52|FAILED|60|1|first
second
";
    let (jobs, notes) = read_all_noting(text.as_bytes(), "t.txt", &TextLayout::default()).unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!((notes.skipped, notes.padded), (1, 0));
    assert!(
        notes.skipped_first[0]
            .1
            .contains("`JobName` can hold a line break, so it may be a piece of a line"),
        "{notes:?}"
    );
}
