//! `fabric-check accept` on nccl-tests outputs captured on real clusters (the corpus, see
//! `real_world_support`), and generated outputs for the layouts the corpus lacks.
//!
//! Per file, what a person reading it concludes, written by hand: the collective, the ranks
//! and hosts, the number of sizes, the footer's average, and whether the run is complete.
//! A truncated run is still read (`inputs.readable` warns with the line where it stops); only
//! an input without result rows is unusable.

mod real_world_support;

use fabric_report::accept::{NcclRun, Problem, read_runs};
use real_world_support::{file, run, text};
use serde_json::Value;

/// `fabric-check accept -f json FILE`: (exit code, report).
fn accept(rel: &str) -> (i32, Value) {
    let p = file(rel);
    let (rc, out, err) = run(&["accept", "-f", "json", p.to_str().unwrap()]);
    let doc = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{rel}: accept stdout is not JSON ({e}): {out}\n{err}"));
    (rc, doc)
}

fn check<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap()
}

/// What a person reads off one file.
struct Want {
    file: &'static str,
    collective: &'static str,
    ranks: u64,
    hosts: u64,
    sizes: u64,
    /// The footer's `Avg bus bandwidth`, when the file has one.
    footer: Option<f64>,
    /// The line of the first warning (`inputs.readable` warns), or None for a clean file.
    warn_at: Option<u64>,
}

const USABLE: &[Want] = &[
    Want {
        file: "nccl/awsome-distributed-training/aws-batch-mpirun-tag-output.txt",
        collective: "all_reduce",
        ranks: 0,
        hosts: 0,
        sizes: 32,
        footer: Some(156.742),
        warn_at: None,
    },
    Want {
        file: "nccl/awsome-distributed-training/p4de-2node-allreduce-srun-label.txt",
        collective: "all_reduce",
        ranks: 0,
        hosts: 0,
        sizes: 29,
        footer: None,
        warn_at: Some(31),
    },
    Want {
        file: "nccl/awsome-distributed-training/p5-2node-allreduce-srun-label.txt",
        collective: "all_reduce",
        ranks: 0,
        hosts: 0,
        sizes: 32,
        footer: None,
        warn_at: Some(34),
    },
    Want {
        file: "nccl/awsome-distributed-training/p5en-elided.txt",
        collective: "all_reduce",
        ranks: 0,
        hosts: 0,
        sizes: 3,
        footer: Some(84.0569),
        warn_at: Some(5),
    },
    Want {
        file: "nccl/dstack/lambda-2.17.6-allreduce-doc-excerpt.txt",
        collective: "all_reduce",
        ranks: 0,
        hosts: 0,
        sizes: 29,
        footer: Some(137.179),
        warn_at: None,
    },
    Want {
        file: "nccl/issues/nccl-issue-1453-rank-prefix-midline-excerpt.txt",
        collective: "all_reduce",
        ranks: 0,
        hosts: 0,
        sizes: 10,
        footer: None,
        warn_at: Some(1),
    },
    Want {
        file: "nccl/issues/nccl-tests-issue-176-error-column-excerpt.txt",
        collective: "all_reduce",
        ranks: 0,
        hosts: 0,
        sizes: 6,
        footer: None,
        warn_at: Some(9),
    },
    Want {
        file: "nccl/issues/nccl-tests-issue-287-rtx5090-alltoall.txt",
        collective: "alltoall",
        ranks: 1,
        hosts: 1,
        sizes: 1,
        footer: Some(0.0),
        warn_at: None,
    },
    Want {
        file: "nccl/issues/nccl-tests-issue-322-128node-1024rank-h100-failure.txt",
        collective: "all_reduce",
        ranks: 100,
        hosts: 13,
        sizes: 5,
        footer: None,
        warn_at: Some(118),
    },
    Want {
        file: "nccl/issues/npkit-issue-19-2080ti-old-format-excerpt.txt",
        collective: "all_reduce or reduce_scatter",
        ranks: 4,
        hosts: 1,
        sizes: 3,
        footer: None,
        warn_at: Some(14),
    },
    Want {
        file: "nccl/unattributed/oci-gb300-1node-4gpu-alltoall-doc-excerpt.txt",
        collective: "alltoall",
        ranks: 4,
        hosts: 1,
        sizes: 2,
        // The header asks for 512K to 16G, the excerpt shows 8G and 16G: the footer
        // averages sizes not shown, so it is not the run's.
        footer: None,
        warn_at: Some(2),
    },
    Want {
        file: "nccl/unattributed/oci-gb300-32host-128rank-alltoall-doc-excerpt.txt",
        collective: "alltoall",
        ranks: 128,
        hosts: 2,
        sizes: 2,
        // The header asks for 512K to 16G, the excerpt shows 8G and 16G: the footer
        // averages sizes not shown, so it is not the run's.
        footer: None,
        warn_at: Some(2),
    },
];

#[test]
fn every_usable_corpus_run_reads_its_collective_ranks_hosts_sizes_and_average() {
    skip_without_corpus!();
    for w in USABLE {
        let (rc, doc) = accept(w.file);
        let r = &doc["runs"][0];
        assert_eq!(r["collective"], w.collective, "{}", w.file);
        assert_eq!(r["ranks"], w.ranks, "{}", w.file);
        assert_eq!(r["hosts"], w.hosts, "{}", w.file);
        assert_eq!(r["rows"], w.sizes, "{}", w.file);
        assert_eq!(doc["sizes"].as_array().unwrap().len() as u64, w.sizes);
        match w.footer {
            Some(f) => {
                assert_eq!(r["avg_busbw_gbps"], f, "{}", w.file);
                assert_eq!(r["avg_busbw_from"], "footer", "{}", w.file);
            }
            None => assert_eq!(r["avg_busbw_from"], "rows", "{}", w.file),
        }
        let readable = check(&doc, "inputs.readable");
        let problems = doc["problems"].as_array().unwrap();
        match w.warn_at {
            None => {
                assert_eq!(readable["status"], "pass", "{}: {problems:#?}", w.file);
                assert_eq!(rc, 0, "{}", w.file);
            }
            Some(line) => {
                assert_eq!(readable["status"], "warn", "{}: {problems:#?}", w.file);
                assert_eq!(problems[0]["line"], line, "{}: {problems:#?}", w.file);
                assert!(problems.iter().all(|p| p["severity"] == "warn"));
                assert_eq!(doc["verdict"], "warn", "{}", w.file);
                assert_eq!(rc, 1, "{}", w.file);
            }
        }
    }
}

fn read(rel: &str) -> (Option<NcclRun>, Vec<Problem>) {
    read_one(rel, &text(rel))
}

/// The one run a file holds (none when it holds no usable table).
fn read_one(file: &str, text: &str) -> (Option<NcclRun>, Vec<Problem>) {
    let (mut runs, problems) = read_runs(file, text);
    assert!(runs.len() <= 1, "{file} holds one run: {runs:?}");
    (runs.pop(), problems)
}

#[test]
fn the_gb300_excerpts_name_the_sizes_their_header_asks_for_and_the_rows_leave_out() {
    skip_without_corpus!();
    for (rel, footer) in [
        (
            "nccl/unattributed/oci-gb300-1node-4gpu-alltoall-doc-excerpt.txt",
            381.478,
        ),
        (
            "nccl/unattributed/oci-gb300-32host-128rank-alltoall-doc-excerpt.txt",
            28.0844,
        ),
    ] {
        let (run, problems) = read(rel);
        let run = run.unwrap();
        let p = &problems[0];
        assert_eq!((p.line, p.severity), (2, "warn"), "{rel}: {problems:?}");
        assert!(
            p.message.starts_with("the header's minBytes/maxBytes ask for 16 size(s) (512K to 16G, factor 2) but the rows leave out 14: 512K–4G (an excerpt?)"),
            "{rel}: {p}"
        );
        assert!(
            p.message.contains(&format!(
                "the footer's average ({footer}) covers sizes not shown"
            )),
            "{rel}: {p}"
        );
        assert!(!run.avg_busbw_from_footer, "{rel}");
        assert_eq!(run.avg_busbw_gbps, run.avg_busbw_from_rows(), "{rel}");
    }
}

#[test]
fn the_average_busbw_we_compute_equals_the_footer_of_every_complete_corpus_table() {
    skip_without_corpus!();
    for rel in [
        "nccl/awsome-distributed-training/aws-batch-mpirun-tag-output.txt",
        "nccl/dstack/lambda-2.17.6-allreduce-doc-excerpt.txt",
        "nccl/issues/nccl-tests-issue-287-rtx5090-alltoall.txt",
    ] {
        let (run, _) = read(rel);
        let run = run.unwrap();
        let ours = run.avg_busbw_from_rows().unwrap();
        let footer = run.avg_busbw_gbps.unwrap();
        // The rows are printed with 2 decimals, the footer with 6 significant digits.
        assert!(
            (ours - footer).abs() < 0.006,
            "{rel}: {ours} from the rows, {footer} in the footer"
        );
    }
}

#[test]
fn the_old_error_column_is_a_max_error_not_wrong_elements() {
    skip_without_corpus!();
    let (run, _) = read("nccl/issues/nccl-tests-issue-176-error-column-excerpt.txt");
    let m = run.unwrap().rows[0].out_of_place.clone().unwrap();
    assert_eq!((m.wrong, m.max_error), (None, Some(1e-6)));
    let (run, _) = read("nccl/issues/npkit-issue-19-2080ti-old-format-excerpt.txt");
    let run = run.unwrap();
    assert_eq!(
        run.rows[0].out_of_place.as_ref().unwrap().max_error,
        Some(1e-7)
    );
    assert_eq!(run.rows[0].in_place.as_ref().unwrap().max_error, Some(0.0));
    assert_eq!(run.devices[0].name, "NVIDIA GeForce RTX 2080 Ti");
    let (_, doc) = accept("nccl/issues/nccl-tests-issue-176-error-column-excerpt.txt");
    assert_ne!(check(&doc, "correctness.wrong")["status"], "fail");
}

#[test]
fn in_place_alltoall_wrong_na_and_an_overflowing_algbw_read_as_printed() {
    skip_without_corpus!();
    let (run, problems) = read("nccl/issues/nccl-tests-issue-287-rtx5090-alltoall.txt");
    assert!(problems.is_empty(), "{problems:?}");
    let r = &run.unwrap().rows[0];
    let ip = r.in_place.as_ref().unwrap();
    assert_eq!((ip.algbw_gbps, ip.wrong), (43046.10, None));
    assert_eq!(r.out_of_place.as_ref().unwrap().wrong, Some(0.0));
    assert_eq!((r.redop.as_str(), r.root), ("none", Some(-1)));
}

#[test]
fn rank_tags_in_the_middle_of_rows_do_not_stop_the_parser() {
    skip_without_corpus!();
    let (run, _) = read("nccl/issues/nccl-issue-1453-rank-prefix-midline-excerpt.txt");
    let run = run.unwrap();
    let r = &run.rows[0];
    assert_eq!(r.size_b, 1_048_576);
    assert_eq!(r.out_of_place.as_ref().unwrap().time_us, 1626.5);
    assert_eq!(r.in_place.as_ref().unwrap().busbw_gbps, 0.87);
    assert_eq!(run.rows[9].out_of_place.as_ref().unwrap().time_us, 193909.0);
}

#[test]
fn a_failed_128_node_run_keeps_its_five_sizes_and_names_the_failure_line() {
    skip_without_corpus!();
    let (run, problems) =
        read("nccl/issues/nccl-tests-issue-322-128node-1024rank-h100-failure.txt");
    let run = run.unwrap();
    assert_eq!(run.rows.last().unwrap().size_b, 17_179_869_184);
    assert_eq!(
        run.rows
            .last()
            .unwrap()
            .in_place
            .as_ref()
            .unwrap()
            .busbw_gbps,
        367.44
    );
    assert_eq!(run.devices.last().unwrap().rank, 99);
    assert_eq!(run.devices[0].host, "HCA-32");
    let p = &problems[0];
    assert_eq!(p.line, 118);
    assert!(
        p.message.contains("Test NCCL failure common.cu:1204"),
        "{p}"
    );
    assert!(p.message.contains("after 5 result line(s)"));
}

#[test]
fn inputs_without_a_result_row_are_unusable_and_say_why() {
    skip_without_corpus!();
    let (rc, doc) = accept("nccl/issues/nccl-tests-issue-107-nonmpi-build-duplicated-excerpt.txt");
    assert_eq!(rc, 3);
    assert_eq!(check(&doc, "inputs.readable")["status"], "fail");
    let msgs: Vec<&str> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("rank 0 is listed on ip-172-31-20-228 and on ip-172-31-22-230")),
        "{msgs:?}"
    );
    let (rc, doc) = accept("nccl/issues/nccl-tests-issue-294-h100-2node-devices-excerpt.txt");
    assert_eq!(rc, 3);
    let m = doc["problems"][0]["message"].as_str().unwrap();
    assert!(m.contains("12 ranks on 2 host(s)"), "{m}");
}

#[test]
fn azure_style_pci_domains_and_right_aligned_hostnames_read() {
    skip_without_corpus!();
    let (_, problems) = read("nccl/issues/nccl-tests-issue-294-h100-2node-devices-excerpt.txt");
    assert_eq!(problems.len(), 1, "{problems:?}");
    // Through the library: the devices are there even though the table is not.
    let t = text("nccl/issues/nccl-tests-issue-294-h100-2node-devices-excerpt.txt");
    let with_table = format!(
        "{t}#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n   134217728      33554432     float     sum      -1   1000.0  134.22  246.07      0   1000.0  134.22  246.07      0\n"
    );
    let (run, _) = read_one("generated", &with_table);
    let run = run.unwrap();
    assert_eq!(run.devices.len(), 12);
    assert_eq!(run.devices[4].host, "h100-2");
    assert_eq!(run.devices[11].host, "h100-4");
    assert_eq!(run.devices[11].device, 3);
    assert_eq!(run.devices[11].name, "NVIDIA H100 80GB HBM3");
}

// ---- generated: layouts the corpus lacks -------------------------------------------------

fn gen_run(text: &str) -> (NcclRun, Vec<Problem>) {
    let (run, problems) = read_one("generated", text);
    (run.unwrap_or_else(|| panic!("{problems:?}")), problems)
}

#[test]
fn old_per_test_headers_of_rooted_and_gathering_tests_read() {
    // Pre-2.13 broadcast: `root` but no `redop`; all_gather: neither.
    let bc = "#       size         count      type    root     time   algbw   busbw  error     time   algbw   busbw  error\n\
              #        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n\
              \x20   33554432       8388608     float       0    402.1   83.45   83.45  0e+00    401.7   83.53   83.53  0e+00\n\
              # Out of bounds values : 0 OK\n# Avg bus bandwidth    : 83.49\n";
    let (r, p) = gen_run(bc);
    assert!(p.is_empty(), "{p:?}");
    assert_eq!(
        (r.rows[0].root, r.rows[0].redop.as_str()),
        (Some(0), "none")
    );
    assert_eq!(
        r.collective().as_deref(),
        Some("broadcast, scatter or gather")
    );
    let ag = "#       size         count      type     time   algbw   busbw  error     time   algbw   busbw  error\n\
              \x20   33554432       1048576     float    301.2  111.40   97.48  0e+00    299.9  111.89   97.90  0e+00\n\
              # Avg bus bandwidth    : 97.69\n";
    let (r, p) = gen_run(ag);
    assert!(p.is_empty(), "{p:?}");
    assert_eq!(r.rows[0].out_of_place.as_ref().unwrap().busbw_gbps, 97.48);
    // Checked in place: all_gather (alltoall never checks in place).
    assert_eq!(r.collective().as_deref(), Some("all_gather"));
}

#[test]
fn scientific_notation_wrong_counts_as_g_and_per_iteration_columns_with_a_timestamp_read() {
    let t = "#  Rank 1023 Group  0 Pid  9999 on node-0127 device  7 [0000:c2:00] NVIDIA H100 80GB HBM3\n\
             #                                                              out-of-place (+ per-iteration)\n\
             #       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99   i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99   i_cv%  timestamp\n\
             \x20 8589934592    2147483648     float     sum      -1  1.2e+05   71.40  133.88 1.23457e+06  1.1e+05  1.3e+05  1.3e+05    2.10  1.2e+05   71.45  133.97       0  1.1e+05  1.3e+05  1.3e+05    1.90  2025-10-01T12:00:00\n\
             # Out of bounds values : 1 FAILED\n# Avg bus bandwidth    : 133.925\n";
    let (r, p) = gen_run(t);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].message.contains("goes up to rank 1023"), "{p:?}");
    let oop = r.rows[0].out_of_place.as_ref().unwrap();
    assert_eq!((oop.time_us, oop.wrong), (1.2e5, Some(1_234_570.0)));
    assert_eq!(oop.iter.unwrap().cv_pct, Some(2.10));
    assert_eq!(r.rank_count(), 1024);
    assert_eq!(r.devices[0].host, "node-0127");
    let ours = r.avg_busbw_from_rows().unwrap();
    assert!((ours - 133.925).abs() < 0.006, "{ours}");
}

#[test]
fn sendrecv_and_reduce_scatter_are_told_from_their_bandwidth_ratio() {
    let row = |redop: &str, algbw: f64, busbw: f64, in_place_wrong: &str| {
        format!(
            "#  Rank  0 Group  0 Pid 1 on h1 device  0 [0x07] GPU\n#  Rank  1 Group  0 Pid 2 on h1 device  1 [0x08] GPU\n#  Rank  2 Group  0 Pid 3 on h2 device  0 [0x07] GPU\n#  Rank  3 Group  0 Pid 4 on h2 device  1 [0x08] GPU\n\
             # size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n\
             1073741824 268435456 float {redop} -1 5000.0 {algbw} {busbw} 0 5000.0 {algbw} {busbw} {in_place_wrong}\n# Avg bus bandwidth : {busbw}\n"
        )
    };
    let (r, _) = gen_run(&row("sum", 200.0, 150.0, "0"));
    assert_eq!(r.collective().as_deref(), Some("reduce_scatter"));
    let (r, _) = gen_run(&row("sum", 200.0, 300.0, "0"));
    assert_eq!(r.collective().as_deref(), Some("all_reduce"));
    // sendrecv as nccl-tests prints it: the operation (`sum`), busbw = algbw, and in place
    // never checked.
    let (r, _) = gen_run(&row("sum", 200.0, 200.0, "N/A"));
    assert_eq!(r.collective().as_deref(), Some("sendrecv"));
    assert_eq!(r.hosts().len(), 2);
    // No test prints `none`, busbw = algbw and checks in place without a root: unknown.
    let (r, _) = gen_run(&row("none", 200.0, 200.0, "0"));
    assert_eq!(r.collective(), None);
}

#[test]
fn nccl_and_mpi_chatter_between_the_device_lines_and_inside_the_table_is_skipped() {
    let t = "[1,0]<stdout>:# Using devices\n\
             [1,0]<stdout>:#  Rank  0 Group  0 Pid 1 on h1 device  0 [0x07] GPU\n\
             [h1:12345] 3 more processes have sent help message help-mpi-btl-openib.txt / no device params found\n\
             [1,1]<stdout>:#  Rank  1 Group  0 Pid 2 on h2 device  0 [0x07] GPU\n\
             h1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n\
             [1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
             [1,0]<stdout>:        1024           256     float     sum      -1    20.00    0.05    0.05      0    20.00    0.05    0.05      0\n\
             h1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n\
             [1,0]<stdout>:        2048           512     float     sum      -1    20.00    0.10    0.10      0    20.00    0.10    0.10      0\n\
             [1,0]<stdout>:# Out of bounds values : 0 OK\n[1,0]<stdout>:# Avg bus bandwidth    : 0.075\n";
    let (r, p) = gen_run(t);
    assert!(p.is_empty(), "{p:?}");
    assert_eq!((r.rows.len(), r.devices.len(), r.hosts().len()), (2, 2, 2));
}

#[test]
fn a_timestamp_column_before_the_size_is_passed_over() {
    let t = "#            timestamp        size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
             2025-10-01 12:00:00.123     1048576        262144     float     sum      -1    56.56   18.54   34.76      0    55.90   18.76   35.17      0\n\
             2025-10-01T12:00:01     2097152        524288     float     sum      -1    80.00   26.21   49.15      0    80.00   26.21   49.15      0\n\
             # Avg bus bandwidth    : 42.0575\n";
    let (r, p) = gen_run(t);
    assert!(p.is_empty(), "{p:?}");
    assert_eq!(r.rows.len(), 2);
    assert_eq!(r.rows[0].size_b, 1_048_576);
    assert_eq!(r.rows[1].in_place.as_ref().unwrap().busbw_gbps, 49.15);
}

#[test]
fn an_elided_device_list_leaves_the_node_count_open_instead_of_failing_it() {
    skip_without_corpus!();
    // 128 ranks on 32 hosts, but the doc shows ranks 0, 1, 126 and 127 only (2 hosts).
    let p = file("nccl/unattributed/oci-gb300-32host-128rank-alltoall-doc-excerpt.txt");
    let (_, out, _) = run(&[
        "accept",
        "-f",
        "json",
        "--nodes",
        "32",
        "--gpus-per-node",
        "4",
        p.to_str().unwrap(),
    ]);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(check(&doc, "scale.nodes")["status"], "open");
    // The ranks are known from the highest rank listed: 128 = 32 × 4.
    assert_eq!(check(&doc, "scale.gpus")["status"], "pass");
}

// ---- generated: nccl-tests with validation off, an unnamed sendrecv, rccl-tests ----------
// The corpus holds no capture of these classes (MANIFEST.md: `N/A` only in in-place alltoall,
// no sendrecv, no rccl-tests); each is written here in the shape nccl-tests' and rccl-tests'
// sources print (`src/util.cu`, `src/common.cu`), the figures made up.

/// `fabric-check accept -f json FILE EXTRA...` on `text` written to a temporary FILE:
/// (exit code, report, text report).
fn accept_generated(name: &str, text: &str, extra: &[&str]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    let p = p.to_str().unwrap();
    let mut args = vec!["accept", "-f", "json", p];
    args.extend_from_slice(extra);
    let (rc, out, err) = run(&args);
    let doc: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {out}\n{err}"));
    let mut args = vec!["accept", p];
    args.extend_from_slice(extra);
    let (_, table, _) = run(&args);
    (rc, doc, table)
}

fn question<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["questions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["id"] == id)
        .unwrap()
}

/// all_reduce_perf on 2 nodes × 1 GPU (nccl-tests 2.17 layout), validation as given: `-c 0`
/// prints `N/A` for every `#wrong` and still `Out of bounds values : 0 OK`.
fn all_reduce_2x1(validation: u8) -> String {
    let w = if validation == 0 { "   N/A" } else { "     0" };
    format!(
        "# nccl-tests version 2.17.6 nccl-headers=22602 nccl-library=22602\n\
         # Collective test starting: all_reduce_perf\n\
         # nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: {validation} graph: 0\n\
         #\n\
         # Using devices\n\
         #  Rank  0 Group  0 Pid   2201 on     node-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n\
         #  Rank  1 Group  0 Pid   2202 on     node-b device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n\
         #\n\
         #                                                              out-of-place                       in-place\n\
         #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n\
         #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n\
         \x20    1048576        262144     float     sum      -1    50.00   20.97   20.97  {w}    50.00   20.97   20.97  {w}\n\
         \x20    2097152        524288     float     sum      -1    80.00   26.21   26.21  {w}    80.00   26.21   26.21  {w}\n\
         # Out of bounds values : 0 OK\n\
         # Avg bus bandwidth    : 23.59\n\
         #\n\
         # Collective test concluded: all_reduce_perf\n"
    )
}

#[test]
fn a_run_with_validation_off_leaves_correctness_unknown_not_passed() {
    let (rc, doc, table) = accept_generated("c0.txt", &all_reduce_2x1(0), &[]);
    let c = check(&doc, "correctness.wrong");
    assert_eq!(c["status"], "open", "{c:#}");
    let o = c["observed"].as_str().unwrap();
    assert!(o.starts_with("correctness unknown, not passed: #wrong is N/A on every row of 1 of 1 run(s), so validation was off (-c 0)"), "{o}");
    assert!(o.contains("rerun with -c 1"), "{o}");
    assert!(table.contains("correctness unknown, not passed"), "{table}");
    // Everything else reads as usual: the binary names the collective, the footer its average.
    assert_eq!(doc["runs"][0]["collective"], "all_reduce");
    assert_eq!(doc["runs"][0]["avg_busbw_gbps"], 23.59);
    assert_eq!(check(&doc, "inputs.readable")["status"], "pass");
    assert_eq!(rc, 0);
    // Beside a run that was checked, the unchecked one is still named, and the check open.
    let dir = tempfile::tempdir().unwrap();
    let (on, off) = (dir.path().join("c1.txt"), dir.path().join("c0.txt"));
    std::fs::write(&on, all_reduce_2x1(1)).unwrap();
    std::fs::write(&off, all_reduce_2x1(0)).unwrap();
    let (_, out, _) = run(&[
        "accept",
        "-f",
        "json",
        on.to_str().unwrap(),
        off.to_str().unwrap(),
    ]);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let c = check(&doc, "correctness.wrong");
    assert_eq!(c["status"], "open", "{c:#}");
    let o = c["observed"].as_str().unwrap();
    assert!(
        o.contains("1 of 2 run(s)")
            && o.ends_with(
                "c0.txt; the 1 checked run(s): 0 wrong elements, 0 out-of-bounds values"
            ),
        "{o}"
    );
    // Checked alone, it passes.
    let (_, doc, _) = accept_generated("c1.txt", &all_reduce_2x1(1), &[]);
    assert_eq!(check(&doc, "correctness.wrong")["status"], "pass");
}

/// An excerpt of `sendrecv_perf -t 2` (two threads, one GPU each, one host) with NCCL_DEBUG=INFO:
/// NCCL's lines before, inside and after the table, no line naming the test. nccl-tests prints
/// sendrecv's operation (`sum`) and never checks it in place (`N/A`); busbw = algbw.
fn sendrecv_t2_excerpt(validation: bool, device_lines: bool) -> String {
    let w = if validation { "     0" } else { "   N/A" };
    let devices = if device_lines {
        "#  Rank  0 Group  0 Pid  41873 on    gpu-n07 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n\
         #  Rank  1 Group  0 Pid  41873 on    gpu-n07 device  1 [0000:2a:00] NVIDIA H100 80GB HBM3\n"
    } else {
        ""
    };
    format!(
        "# nThread 2 nGpus 1 minBytes 1048576 maxBytes 8388608 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: {} graph: 0\n\
         #\n\
         # Using devices\n\
         {devices}\
         gpu-n07:41873:41873 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.7<0>\n\
         gpu-n07:41873:41873 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)\n\
         NCCL version 2.21.5+cuda12.4\n\
         gpu-n07:41873:41901 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
         gpu-n07:41873:41902 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n\
         gpu-n07:41873:41901 [0] NCCL INFO Connected all rings\n\
         gpu-n07:41873:41901 [0] NCCL INFO ncclCommInitAll comm 0x55d0c8a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x2f1c - Init COMPLETE\n\
         #\n\
         #                                                              out-of-place                       in-place\n\
         #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
         #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n\
         \x20    1048576        262144     float     sum      -1    14.21   73.79   73.79 {w}    14.05   74.63   74.63    N/A\n\
         gpu-n07:41873:41910 [0] NCCL INFO Channel 02/1 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
         gpu-n07:41873:41911 [1] NCCL INFO Channel 02/1 : 1[1] -> 0[0] via P2P/CUMEM/read\n\
         \x20    2097152        524288     float     sum      -1    21.37   98.14   98.14 {w}    21.12   99.30   99.30    N/A\n\
         \x20    4194304       1048576     float     sum      -1    35.90  116.83  116.83 {w}    35.61  117.78  117.78    N/A\n\
         \x20    8388608       2097152     float     sum      -1    64.84  129.37  129.37 {w}    64.55  129.96  129.96    N/A\n\
         # Out of bounds values : 0 OK\n\
         # Avg bus bandwidth    : 104.975\n\
         #\n\
         gpu-n07:41873:41873 [0] NCCL INFO comm 0x55d0c8a0 rank 0 nranks 2 cudaDev 0 busId 18000 - Destroy COMPLETE\n\
         gpu-n07:41873:41873 [1] NCCL INFO comm 0x55d0c9b0 rank 1 nranks 2 cudaDev 1 busId 2a000 - Destroy COMPLETE\n",
        u8::from(validation)
    )
}

#[test]
fn an_unnamed_sendrecv_excerpt_with_two_threads_and_nccl_info_lines_is_not_taken_for_all_reduce() {
    // 2 ranks, busbw = algbw: all_reduce's 2(n−1)/n is 1 too, but all_reduce always checks in
    // place, and this table never does.
    let (rc, doc, table) = accept_generated(
        "sendrecv.log",
        &sendrecv_t2_excerpt(true, true),
        &["--nodes", "1"],
    );
    let r = &doc["runs"][0];
    assert_eq!(r["collective"], "sendrecv", "{r:#}");
    assert_eq!(
        (r["test"].clone(), r["ranks"].clone(), r["hosts"].clone()),
        (Value::Null, 2.into(), 1.into())
    );
    assert_eq!(r["rows"], 4);
    assert_eq!(
        (r["avg_busbw_gbps"].clone(), r["avg_busbw_from"].clone()),
        (104.975.into(), "footer".into())
    );
    assert_eq!(r["version"], "NCCL 2.21.5+cuda12.4");
    // NCCL's lines are not problems; out of place was checked: 0 wrong.
    assert_eq!(
        check(&doc, "inputs.readable")["status"],
        "pass",
        "{:#}",
        doc["problems"]
    );
    assert_eq!(check(&doc, "correctness.wrong")["status"], "pass");
    assert_eq!(rc, 0);
    // It does not answer the all-reduce question.
    let q = question(&doc, "scale.exact_count");
    assert_eq!(q["status"], "open", "{q:#}");
    assert!(
        q["answer"]
            .as_str()
            .unwrap()
            .starts_with("no run is known to be all_reduce ("),
        "{q:#}"
    );
    assert!(
        table.contains("(text, sendrecv, 2 ranks on 1 hosts)"),
        "{table}"
    );
    // Without the device lines the rows still tell it.
    let (_, doc, _) = accept_generated("sendrecv.log", &sendrecv_t2_excerpt(true, false), &[]);
    assert_eq!(doc["runs"][0]["collective"], "sendrecv");
    // With validation off nothing is checked in place or out: 2 ranks at busbw = algbw are
    // all_reduce's or sendrecv's, and the report says it cannot tell.
    let (_, doc, _) = accept_generated("sendrecv-c0.log", &sendrecv_t2_excerpt(false, true), &[]);
    assert_eq!(doc["runs"][0]["collective"], "all_reduce or sendrecv");
    assert_eq!(check(&doc, "correctness.wrong")["status"], "open");
    let q = question(&doc, "scale.exact_count");
    assert_eq!(q["status"], "open");
    assert!(
        q["answer"]
            .as_str()
            .unwrap()
            .contains("sendrecv-c0.log: all_reduce or sendrecv"),
        "{q:#}"
    );
}

#[test]
fn a_table_whose_rows_fit_no_collective_says_the_collective_is_unknown() {
    // A reduction never checked in place at busbw = algbw / 2: neither sendrecv (busbw = algbw)
    // nor alltoall (no reduction) nor any test that checks in place.
    let t = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
             \x20   67108864      16777216     float     sum      -1    500.0  134.22   67.11      0    500.0  134.22   67.11    N/A\n\
             # Out of bounds values : 0 OK\n# Avg bus bandwidth    : 67.11\n";
    let (_, doc, table) = accept_generated("odd.txt", t, &[]);
    assert_eq!(doc["runs"][0]["collective"], Value::Null);
    assert!(
        table.contains("(text, collective unknown, 0 ranks on 0 hosts)"),
        "{table}"
    );
    let q = question(&doc, "scale.exact_count");
    assert!(q["answer"].as_str().unwrap().contains("odd.txt: collective unknown: the output does not name its test and its rows cannot tell"), "{q:#}");
}

/// all_reduce_perf of rccl-tests 2.17.9 on one MI300X node (8 ranks), as its sources print it:
/// its own version line, and `# Errors with asterisks ...` before the footer of a validated run.
fn rccl_all_reduce(busbw: f64) -> String {
    let devices: String = (0..8)
        .map(|i| format!("#  Rank  {i} Group  0 Pid   {} on   mi300-01 device  {i} [0000:{:02x}:00] AMD Instinct MI300X\n", 9000 + i, 0x0c + 0x16 * i))
        .collect();
    format!(
        "# rccl-tests version 2.17.9-develop:2596ca5f71 rccl-headers=22803 rccl-library=22707\n\
         # Collective test starting: all_reduce_perf\n\
         # nThread 1 nGpus 8 minBytes 8589934592 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
         #\n\
         # Using devices\n\
         {devices}\
         #\n\
         #                                                              out-of-place                       in-place\n\
         #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
         #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n\
         \x20 8589934592    2147483648     float     sum      -1    36956  232.43  {busbw:6.2}      0    36911  232.72  {busbw:6.2}      0\n\
         # Errors with asterisks indicate errors that have exceeded the maximum threshold.\n\
         # Out of bounds values : 0 OK\n\
         # Avg bus bandwidth    : {busbw} \n\
         #\n\
         # Collective test concluded: all_reduce_perf\n"
    )
}

#[test]
fn an_rccl_tests_run_names_its_version_and_its_asterisk_line_is_not_a_sign_of_cut_rows() {
    let (rc, doc, _) = accept_generated(
        "rccl.txt",
        &rccl_all_reduce(406.76),
        &["--nodes", "1", "--gpus-per-node", "8"],
    );
    let r = &doc["runs"][0];
    assert_eq!(
        r["version"],
        "rccl-tests 2.17.9-develop:2596ca5f71 rccl-headers=22803 rccl-library=22707"
    );
    assert_eq!(
        (
            r["collective"].clone(),
            r["ranks"].clone(),
            r["hosts"].clone()
        ),
        ("all_reduce".into(), 8.into(), 1.into())
    );
    assert_eq!(
        doc["problems"],
        Value::Array(vec![]),
        "{:#}",
        doc["problems"]
    );
    assert_eq!(check(&doc, "inputs.readable")["status"], "pass");
    assert_eq!(check(&doc, "correctness.wrong")["status"], "pass");
    assert_eq!((doc["verdict"].clone(), rc), ("pass".into(), 0));
    // Two invocations in one log are two runs, split at rccl-tests' version line.
    let log = [rccl_all_reduce(406.76), rccl_all_reduce(401.5)].concat();
    let (runs, problems) = read_runs("sweep.log", &log);
    assert!(problems.is_empty(), "{problems:?}");
    let avgs: Vec<Option<f64>> = runs.iter().map(|r| r.avg_busbw_gbps).collect();
    assert_eq!(avgs, [Some(406.76), Some(401.5)]);
}

#[test]
fn an_older_rccl_tests_run_reads_its_version_line_and_a_result_marked_over_its_threshold() {
    // Before its `# rccl-tests version` line rccl-tests printed `rccl-tests: Version ...`, and
    // the max error `%5.0le` with `*` when it exceeded the threshold.
    let t = "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
             #\n\
             rccl-tests: Version develop:33cc4df\n\
             # Using devices\n\
             #  Rank  0 Group  0 Pid   6081 on     corona device  0 [0000:07:00] AMD Radeon AI PRO R9700\n\
             #  Rank  1 Group  0 Pid   6768 on     bootes device  0 [0000:07:00] AMD Radeon AI PRO R9700\n\
             #\n\
             #       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n\
             \x20          8             2     float     sum    30.12    0.00    0.00  0e+00    29.80    0.00    0.00  0e+00\n\
             \x20         16             4     float     sum    30.40    0.00    0.00  2e-03*    30.05    0.00    0.00  0e+00\n\
             # Errors with asterisks indicate errors that have exceeded the maximum threshold.\n\
             # Out of bounds values : 1 FAILED\n\
             # Avg bus bandwidth    : 0 \n";
    let (run, problems) = read_one("rccl-old.txt", t);
    assert!(problems.is_empty(), "{problems:?}");
    let run = run.unwrap();
    assert_eq!(run.version.as_deref(), Some("rccl-tests develop:33cc4df"));
    assert_eq!(run.rows.len(), 2);
    assert_eq!(
        run.rows[1].out_of_place.as_ref().unwrap().max_error,
        Some(2e-3)
    );
    assert_eq!(run.out_of_bounds, Some(1));
    // Cut before its footer, the marked result still fails correctness.
    let cut: String = t.lines().take(10).map(|l| format!("{l}\n")).collect();
    let (_, doc, _) = accept_generated("rccl-cut.txt", &cut, &[]);
    assert_eq!(check(&doc, "correctness.wrong")["status"], "fail");
}
