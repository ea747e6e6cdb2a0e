//! nccl-tests output shapes met on real clusters that earlier versions misread, each written
//! here in the shape it was seen (the numbers are made up): a log holding several invocations
//! of the same binary, the MPI build's `*_perf_mpi` name, and old alltoall/broadcast tables
//! whose `redop` column is blank on every row.

use assert_cmd::Command;
use fabric_report::accept::{NcclRun, read_runs};
use serde_json::Value;

/// One invocation of `all_gather_perf_mpi` (nccl-tests 2.17 layout) with the given busbw at
/// 1 MiB and 2 MiB (out-of-place, in-place) and the footer nccl-tests prints.
fn all_gather_run(busbw: [f64; 4]) -> String {
    let avg = busbw.iter().sum::<f64>() / 4.0;
    let [a, b, c, d] = busbw;
    format!(
        "# nccl-tests version 2.17.6 nccl-headers=22602 nccl-library=22602\n\
         # Collective test starting: all_gather_perf_mpi\n\
         # nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
         #\n\
         # Using devices\n\
         #  Rank  0 Group  0 Pid   1001 on     node-a device  0 [0000:07:00] NVIDIA H100 80GB HBM3\n\
         #  Rank  1 Group  0 Pid   1002 on     node-b device  0 [0000:07:00] NVIDIA H100 80GB HBM3\n\
         #\n\
         #                                                              out-of-place                       in-place\n\
         #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n\
         #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n\
         \x20    1048576        131072     float    none      -1    50.00   20.97  {a:6.2}       0    49.00   21.40  {b:6.2}       0\n\
         \x20    2097152        262144     float    none      -1    80.00   26.21  {c:6.2}       0    79.00   26.55  {d:6.2}       0\n\
         # Out of bounds values : 0 OK\n\
         # Avg bus bandwidth    : {avg:.4}\n\
         #\n\
         # Collective test concluded: all_gather_perf_mpi\n\n"
    )
}

/// The same binary started three times, its outputs one after the other in one log.
fn three_run_log() -> String {
    [
        all_gather_run([10.0, 11.0, 13.0, 14.0]),
        all_gather_run([5.0, 6.0, 7.0, 8.0]),
        all_gather_run([10.5, 11.5, 13.5, 14.5]),
    ]
    .concat()
}

fn one_run(text: &str) -> NcclRun {
    let (mut runs, problems) = read_runs("generated.txt", text);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs.remove(0)
}

#[test]
fn a_log_of_three_invocations_reads_as_three_runs_each_with_its_own_rows_and_footer() {
    let (runs, problems) = read_runs("sweep.log", &three_run_log());
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(runs.len(), 3);
    let avgs: Vec<f64> = runs.iter().map(|r| r.avg_busbw_gbps.unwrap()).collect();
    assert_eq!(avgs, [12.0, 6.5, 12.5]);
    assert!(
        runs.iter()
            .all(|r| r.rows.len() == 2 && r.devices.len() == 2)
    );
    assert!(runs.iter().all(|r| r.avg_busbw_from_footer));
    assert_eq!(runs[0].file, "sweep.log (run 1 of 3, from line 1)");
    assert_eq!(runs[1].file, "sweep.log (run 2 of 3, from line 19)");
}

#[test]
fn old_layout_logs_without_version_lines_split_at_each_nthread_header() {
    let run = |busbw: f64| {
        format!(
            "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 1048576(bytes) warmup iters: 5 iters: 20 validation: 1\n\
             #\n# Using devices\n\
             #   Rank  0 Pid  1234 on host-a device  0 [0x3d] Tesla V100-SXM2-16GB\n\
             #\n\
             #       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n\
             \x20    1048576        262144     float     sum    100.0   10.49  {busbw:.2}  1e-06    100.0   10.49  {busbw:.2}  1e-06\n\
             # Out of bounds values : 0 OK\n# Avg bus bandwidth    : {busbw:.2}\n"
        )
    };
    let text = [run(18.0), run(19.0)].concat();
    let (runs, problems) = read_runs("old.log", &text);
    assert!(problems.is_empty(), "{problems:?}");
    let avgs: Vec<f64> = runs.iter().map(|r| r.avg_busbw_gbps.unwrap()).collect();
    assert_eq!(avgs, [18.0, 19.0]);
}

#[test]
fn a_run_that_failed_before_its_table_does_not_swallow_the_next_run() {
    let failed = "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152\n\
                  #  Rank  0 Group  0 Pid   1001 on     node-a device  0 [0000:07:00] NVIDIA H100 80GB HBM3\n\
                  node-a: Test NCCL failure common.cu:1204 'unhandled system error'\n";
    let text = format!("{failed}{}", all_gather_run([10.0, 11.0, 13.0, 14.0]));
    let (runs, problems) = read_runs("retry.log", &text);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].avg_busbw_gbps, Some(12.0));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].severity, "fail");
    assert!(
        problems[0]
            .message
            .starts_with("run 1 of 2, from line 1: the test failed"),
        "{problems:?}"
    );
}

#[test]
fn accept_counts_each_invocation_as_a_run_in_its_per_size_table() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sweep.log");
    std::fs::write(&p, three_run_log()).unwrap();
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["accept", "-f", "json"])
        .arg(&p)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["runs"].as_array().unwrap().len(), 3, "{doc:#}");
    let sizes = doc["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 2);
    assert!(sizes.iter().all(|s| s["runs"] == 3), "{sizes:#?}");
    // Mean of the three runs' out-of-place busbw at 1 MiB: (10 + 5 + 10.5) / 3.
    assert_eq!(sizes[0]["busbw_mean_gbps"], 8.5);
    assert_eq!(doc["runs"][1]["avg_busbw_gbps"], 6.5);
    assert_eq!(doc["runs"][1]["collective"], "all_gather");
}

#[test]
fn the_mpi_builds_binary_names_the_collective_without_its_mpi_suffix() {
    let r = one_run(&all_gather_run([10.0, 11.0, 13.0, 14.0]));
    assert_eq!(r.test.as_deref(), Some("all_gather_perf_mpi"));
    assert_eq!(r.collective().as_deref(), Some("all_gather"));
    assert_eq!(
        fabric_report::accept::collective_of_binary("/opt/nccl-tests/build/alltoall_perf_mpi"),
        "alltoall"
    );
    assert_eq!(
        fabric_report::accept::collective_of_binary("all_reduce_perf"),
        "all_reduce"
    );
}

#[test]
fn an_old_alltoall_table_with_a_blank_redop_column_reads() {
    let t = "#                                                       out-of-place                       in-place\n\
             #       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n\
             #        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n\
             \x20    1048576        131072     float             60.00   17.48   15.29  0e+00    59.00   17.77   15.55  0e+00\n\
             \x20    2097152        262144     float             90.00   23.30   20.39  0e+00    89.00   23.56   20.62  0e+00\n\
             # Out of bounds values : 0 OK\n# Avg bus bandwidth    : 17.9625\n";
    let r = one_run(t);
    assert_eq!(r.rows.len(), 2);
    let row = &r.rows[1];
    assert_eq!((row.redop.as_str(), row.root), ("none", None));
    assert_eq!(row.out_of_place.as_ref().unwrap().busbw_gbps, 20.39);
    assert_eq!(row.in_place.as_ref().unwrap().time_us, 89.0);
    assert_eq!(row.in_place.as_ref().unwrap().max_error, Some(0.0));
}

#[test]
fn an_old_broadcast_table_with_a_blank_redop_and_a_root_reads() {
    let t = "#       size         count      type   redop    root     time   algbw   busbw  error     time   algbw   busbw  error\n\
             \x20    1048576        262144     float               0    40.00   26.21   26.21  0e+00    39.00   26.89   26.89  0e+00\n\
             # Out of bounds values : 0 OK\n# Avg bus bandwidth    : 26.55\n";
    let r = one_run(t);
    let row = &r.rows[0];
    assert_eq!((row.redop.as_str(), row.root), ("none", Some(0)));
    assert_eq!(row.out_of_place.as_ref().unwrap().busbw_gbps, 26.21);
    assert_eq!(
        r.collective().as_deref(),
        Some("broadcast, scatter or gather")
    );
}
