//! Every nccl-tests layout reads to the same figures; broken inputs are named by file and line.

use fabric_report::accept::{NcclRun, read_runs};

fn read(p: &str) -> (Option<NcclRun>, Vec<fabric_report::accept::Problem>) {
    let path = format!(
        "{}/../tests/fixtures/nccl-tests/{p}",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap();
    let (mut runs, problems) = read_runs(p, &String::from_utf8_lossy(&bytes));
    assert!(runs.len() <= 1, "{p} holds one run: {runs:?}");
    (runs.pop(), problems)
}

fn clean(p: &str) -> NcclRun {
    let (run, problems) = read(p);
    assert!(problems.is_empty(), "{p}: {problems:?}");
    run.unwrap()
}

#[test]
fn the_modern_layout_reads_every_size_and_rank() {
    let r = clean("text/allreduce-2x8-run1.txt");
    assert_eq!(r.rows.len(), 14);
    assert_eq!(r.devices.len(), 16);
    assert_eq!(r.hosts().len(), 2);
    assert_eq!(r.test.as_deref(), Some("all_reduce_perf"));
    let first = &r.rows[0];
    assert_eq!(
        (first.size_b, first.count, first.root),
        (1_048_576, 262_144, Some(-1))
    );
    assert_eq!(first.out_of_place.as_ref().unwrap().wrong, Some(0.0));
    assert!(r.avg_busbw_gbps.unwrap() > 200.0);
}

#[test]
fn the_old_layout_without_root_and_with_an_error_column_reads() {
    let r = clean("text/allreduce-v2.0-no-root.txt");
    assert_eq!(r.rows.len(), 11);
    assert_eq!(r.rows[0].root, None);
    assert_eq!(r.devices.len(), 16);
    assert_eq!(r.devices[9].host, "node2");
    // `error` is the largest deviation (`0e+00`), not a count of wrong elements.
    let ip = r.rows[3].in_place.as_ref().unwrap();
    assert_eq!((ip.wrong, ip.max_error), (None, Some(0.0)));
}

#[test]
fn launcher_prefixes_and_hashless_headers_read_like_the_plain_output() {
    let plain = clean("text/allreduce-2x8-run1.txt");
    for p in [
        "text/allreduce-openmpi-tagged.txt",
        "text/allreduce-no-hash-header.txt",
    ] {
        let r = clean(p);
        assert_eq!(r.rows.len(), plain.rows.len(), "{p}");
        assert_eq!(r.devices.len(), plain.devices.len(), "{p}");
        assert!(r.avg_busbw_gbps.is_some(), "{p}");
    }
}

#[test]
fn per_iteration_columns_give_p99_and_cv() {
    let r = clean("text/allreduce-per-iteration.txt");
    let it = r.rows[5].out_of_place.as_ref().unwrap().iter.unwrap();
    assert!(it.p99_us.unwrap() > it.min_us.unwrap());
    assert!(it.cv_pct.is_some());
}

#[test]
fn wrong_elements_are_counted() {
    let r = clean("text/allreduce-wrong-elements.txt");
    let wrong: f64 = r
        .rows
        .iter()
        .filter_map(|x| x.out_of_place.as_ref()?.wrong)
        .sum();
    assert_eq!(wrong, 1536.0);
    assert_eq!(r.out_of_bounds, Some(1));
}

#[test]
fn a_truncated_text_run_names_the_cut_line() {
    let (run, problems) = read("text/allreduce-truncated.txt");
    assert_eq!(run.unwrap().rows.len(), 7);
    let msgs: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.starts_with("text/allreduce-truncated.txt:33: ")
                && m.contains("is the line cut?")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("without the `Avg bus bandwidth` footer")),
        "{msgs:?}"
    );
}

#[test]
fn garbage_is_reported_by_line_without_a_panic() {
    let (run, problems) = read("text/garbage.txt");
    assert!(run.is_none());
    let msgs: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert!(
        msgs.contains(&"text/garbage.txt:3: time `lots` is not a number".to_string()),
        "{msgs:?}"
    );
}

#[test]
fn a_truncated_json_run_is_reported_with_its_line() {
    let (run, problems) = read("json/allreduce-truncated.json");
    assert!(run.is_none());
    assert_eq!(problems.len(), 1);
    assert!(problems[0].line > 1);
    assert!(
        problems[0].message.contains("the JSON ends early"),
        "{}",
        problems[0]
    );
}

#[test]
fn random_bytes_never_panic() {
    let mut seed = 0x1234_5678_9abc_def0u64;
    for _ in 0..300 {
        let len = (seed % 400) as usize;
        let mut bytes = Vec::with_capacity(len);
        for _ in 0..len {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            bytes.push(b"0123456789 .e+-#|{}[]\":,\nNA/sumfloatRankon"[(seed % 41) as usize]);
        }
        let text = String::from_utf8_lossy(&bytes);
        let _ = read_runs("fuzz", &text);
        let _ = read_runs("fuzz", &format!("{{{text}"));
    }
}
