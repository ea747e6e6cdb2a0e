//! nccl-tests output shapes met on real clusters that earlier versions misread, each written
//! here in the shape it was seen (the numbers are made up): a log holding several invocations
//! of the same binary, the MPI build's `*_perf_mpi` name, old alltoall/broadcast tables
//! whose `redop` column is blank on every row, launcher prefixes no list names (Ray before
//! Open MPI's tag, pdsh's host, grep over `mpirun --output-filename` files), a log of several
//! collectives in turn, and excerpts whose rows leave out sizes the header asks for.

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

// ---- launcher prefixes learned from the lines themselves ---------------------------------

/// A whole all_reduce_perf output of 2 ranks on 2 hosts (1 MiB and 2 MiB), each line behind
/// `prefix(line number)`.
fn prefixed_all_reduce(prefix: impl Fn(usize) -> String) -> String {
    let body = "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
                #\n\
                # Using devices\n\
                #  Rank  0 Group  0 Pid   3101 on   gpu-n01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n\
                #  Rank  1 Group  0 Pid   3102 on   gpu-n02 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n\
                #\n\
                #                                                              out-of-place                       in-place\n\
                #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
                #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n\
                \x20    1048576        262144     float     sum      -1    50.00   20.97   20.97      0    50.00   20.97   20.97      0\n\
                \x20    2097152        524288     float     sum      -1    80.00   26.21   26.21      0    80.00   26.21   26.21      0\n\
                # Out of bounds values : 0 OK\n\
                # Avg bus bandwidth    : 23.59\n";
    body.lines()
        .enumerate()
        .map(|(i, l)| format!("{}{l}\n", prefix(i)))
        .collect()
}

/// The prefixed output reads as the plain one: two sizes, two ranks on two hosts, the footer.
fn reads_like_the_plain_output(text: &str) {
    let r = one_run(text);
    assert_eq!(
        (r.rows.len(), r.devices.len(), r.hosts().len()),
        (2, 2, 2),
        "{r:?}"
    );
    assert_eq!(r.devices[1].host, "gpu-n02");
    assert_eq!(r.rows[1].in_place.as_ref().unwrap().busbw_gbps, 26.21);
    assert_eq!(
        (r.avg_busbw_gbps, r.avg_busbw_from_footer),
        (Some(23.59), true)
    );
}

#[test]
fn a_ray_prefix_before_open_mpis_tag_on_every_line_is_learned_and_both_are_removed() {
    // SkyPilot/Ray put `(head, rank=0, pid=N) ` before Open MPI's `--tag-output` tag.
    reads_like_the_plain_output(&prefixed_all_reduce(|_| {
        "(head, rank=0, pid=48213) [1,0]<stdout>:".into()
    }));
}

#[test]
fn a_ray_prefix_whose_inner_open_mpi_tags_differ_from_line_to_line_still_reads() {
    // The rank lines come tagged by the rank that wrote them: the outer prefix is learned,
    // the inner tags are Open MPI's known form.
    reads_like_the_plain_output(&prefixed_all_reduce(|i| {
        format!("(head, rank=0, pid=48213) [1,{}]<stdout>:", i % 2)
    }));
}

#[test]
fn a_pdsh_host_prefix_is_learned_and_removed() {
    reads_like_the_plain_output(&prefixed_all_reduce(|_| "gpu-n01: ".into()));
}

#[test]
fn a_grep_over_mpirun_output_filename_files_reads_from_the_file_names_on_every_line() {
    // `mpirun --output-filename out` writes out/1/rank.N/stdout; `grep -r . out` stitches
    // them with the path before every line, other ranks' NCCL lines among them.
    let mut text = prefixed_all_reduce(|_| "out/1/rank.0/stdout:".into());
    text.insert_str(
        0,
        "out/1/rank.1/stderr:gpu-n02:3102:3102 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>\n",
    );
    reads_like_the_plain_output(&text);
}

#[test]
fn a_prefix_whose_numbers_change_from_line_to_line_is_learned_by_its_shape() {
    // Process ids and labels differ, the prefix's shape repeats: `[node3:pid 4711] `.
    reads_like_the_plain_output(&prefixed_all_reduce(|i| {
        format!("[node3:pid {}] ", 4700 + i)
    }));
}

// ---- several collectives in one log -------------------------------------------------------

/// One invocation of `binary` as nccl-tests 2.17 prints it: 2 ranks, 1 MiB and 2 MiB, busbw
/// `b` at both (algbw `a`), in-place `#wrong` as given.
fn collective_run(binary: &str, redop: &str, a: f64, b: f64, in_place_wrong: &str) -> String {
    format!(
        "# nccl-tests version 2.17.6 nccl-headers=22602 nccl-library=22602\n\
         # Collective test starting: {binary}\n\
         # nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
         #\n\
         # Using devices\n\
         #  Rank  0 Group  0 Pid   1001 on     node-a device  0 [0000:07:00] NVIDIA H100 80GB HBM3\n\
         #  Rank  1 Group  0 Pid   1002 on     node-b device  0 [0000:07:00] NVIDIA H100 80GB HBM3\n\
         #\n\
         #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n\
         \x20    1048576        262144     float  {redop:>6}      -1    50.00  {a:6.2}  {b:6.2}       0    50.00  {a:6.2}  {b:6.2}  {in_place_wrong:>6}\n\
         \x20    2097152        524288     float  {redop:>6}      -1    80.00  {a:6.2}  {b:6.2}       0    80.00  {a:6.2}  {b:6.2}  {in_place_wrong:>6}\n\
         # Out of bounds values : 0 OK\n\
         # Avg bus bandwidth    : {b}\n\
         #\n\
         # Collective test concluded: {binary}\n"
    )
}

/// all_reduce, all_gather, reduce_scatter, alltoall and sendrecv in turn, as a sweep script
/// runs them into one log.
fn five_collective_log() -> String {
    [
        collective_run("all_reduce_perf", "sum", 160.27, 320.54, "0"),
        collective_run("all_gather_perf", "none", 180.0, 90.0, "0"),
        collective_run("reduce_scatter_perf", "sum", 170.0, 85.0, "0"),
        collective_run("alltoall_perf", "none", 100.0, 50.0, "N/A"),
        collective_run("sendrecv_perf", "sum", 15.22, 15.22, "N/A"),
    ]
    .concat()
}

fn accept_json(name: &str, text: &str, format: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["accept", "-f", format])
        .arg(&p)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_log_of_five_collectives_keeps_each_collectives_sizes_apart() {
    let doc: Value =
        serde_json::from_str(&accept_json("sweep.log", &five_collective_log(), "json")).unwrap();
    let sizes = doc["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 10, "{sizes:#?}");
    assert!(sizes.iter().all(|s| s["runs"] == 1), "{sizes:#?}");
    let at_1m = |collective: &str| {
        sizes
            .iter()
            .find(|s| s["collective"] == collective && s["size_b"] == 1_048_576)
            .unwrap_or_else(|| panic!("{collective}: {sizes:#?}"))
    };
    assert_eq!(at_1m("all_reduce")["busbw_mean_gbps"], 320.54);
    assert_eq!(at_1m("sendrecv")["busbw_mean_gbps"], 15.22);
    assert_eq!(at_1m("sendrecv")["cv_pct"], Value::Null);
    assert_eq!(at_1m("reduce_scatter")["busbw_mean_gbps"], 85.0);
    assert_eq!(at_1m("all_gather")["busbw_mean_gbps"], 90.0);
    assert_eq!(at_1m("alltoall")["busbw_mean_gbps"], 50.0);
}

#[test]
fn the_per_size_table_names_the_collective_in_text_and_html() {
    let text = accept_json("sweep.log", &five_collective_log(), "markdown");
    assert!(text.contains("| all_reduce 1M float sum |"), "{text}");
    assert!(text.contains("| sendrecv 1M float sum |"), "{text}");
    let html = accept_json("sweep.log", &five_collective_log(), "html");
    assert!(html.contains("sendrecv 2M float sum"), "{html}");
}

// ---- excerpts that leave out sizes the header asks for -----------------------------------

/// rccl-tests all_reduce_perf on one MI300X node (8 ranks) asked for 512 KiB to 16 GiB, of
/// which a post shows the rows given (the author cut the rest) and the footer.
fn rccl_excerpt(sizes: &[u64]) -> String {
    let devices: String = (0..8)
        .map(|i| format!("#  Rank  {i} Group  0 Pid  {} on   mi300-07 device  {i} [0000:{:02x}:00] AMD Instinct MI300X\n", 7100 + i, 0x0c + 0x16 * i))
        .collect();
    let rows: String = sizes
        .iter()
        .map(|s| format!("{s:>12}  {:>12}     float     sum      -1    40000  300.00  360.00      0    40000  300.00  360.00      0\n", s / 4))
        .collect();
    format!(
        "# rccl-tests version 2.17.9-develop:2596ca5f71 rccl-headers=22803 rccl-library=22707\n\
         # Collective test starting: all_reduce_perf\n\
         # nThread 1 nGpus 8 minBytes 524288 maxBytes 17179869184 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
         #\n\
         # Using devices\n\
         {devices}\
         #\n\
         #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
         {rows}\
         # Errors with asterisks indicate errors that have exceeded the maximum threshold.\n\
         # Out of bounds values : 0 OK\n\
         # Avg bus bandwidth    : 212.45 \n"
    )
}

#[test]
fn an_excerpt_showing_two_of_the_sixteen_sizes_its_header_asks_for_warns_and_drops_the_footer_average()
 {
    let (runs, problems) = read_runs("rccl.txt", &rccl_excerpt(&[8 << 30, 16 << 30]));
    let run = &runs[0];
    assert_eq!(problems.len(), 1, "{problems:?}");
    let p = &problems[0];
    assert_eq!((p.severity, p.line), ("warn", 3));
    assert!(
        p.message.starts_with("the header's minBytes/maxBytes ask for 16 size(s) (512K to 16G, factor 2) but the rows leave out 14: 512K–4G"),
        "{p}"
    );
    assert!(p.message.contains("footer's average (212.45)"), "{p}");
    // The run's average is the rows', not the footer's.
    assert!(!run.avg_busbw_from_footer);
    assert_eq!(run.avg_busbw_gbps, Some(360.0));
    // accept warns rather than passes.
    let doc: Value = serde_json::from_str(&accept_json(
        "rccl.txt",
        &rccl_excerpt(&[8 << 30, 16 << 30]),
        "json",
    ))
    .unwrap();
    assert_eq!(doc["verdict"], "warn");
    assert_eq!(doc["runs"][0]["avg_busbw_from"], "rows");
}

#[test]
fn a_size_left_out_of_the_middle_of_a_table_is_named() {
    let sizes: Vec<u64> = (19..=34)
        .map(|k| 1u64 << k)
        .filter(|s| *s != 64 << 20)
        .collect();
    let (_, problems) = read_runs("rccl.txt", &rccl_excerpt(&sizes));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .message
            .contains("leave out 1: 64M (an excerpt?)"),
        "{problems:?}"
    );
}

#[test]
fn a_command_line_with_b_e_f_says_what_a_headerless_excerpt_left_out_and_names_the_test() {
    // Someone pasted the command and the last rows with the footer, not the header.
    let t = "$ mpirun -np 8 ./build/all_gather_perf -b 512K -e 16G -f 2 -g 1\n\
             #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
             \x20 8589934592     268435456     float    none      -1    48000  178.96  156.59      0    47800  179.71  157.25      0\n\
             17179869184     536870912     float    none      -1    95000  180.84  158.24      0    94800  181.22  158.57      0\n\
             # Out of bounds values : 0 OK\n\
             # Avg bus bandwidth    : 88.12\n";
    let (runs, problems) = read_runs("ag.txt", t);
    assert_eq!(runs[0].test.as_deref(), Some("all_gather_perf"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].line, 1);
    assert!(
        problems[0].message.starts_with(
            "the command line's -b/-e ask for 16 size(s) (512K to 16G, factor 2) but the rows leave out 14: 512K–4G"
        ),
        "{problems:?}"
    );
    assert!(!runs[0].avg_busbw_from_footer);
}

#[test]
fn each_command_line_in_a_log_names_the_run_it_starts_not_the_one_before() {
    // An old-layout sweep script echoes each command before its output: no `# Collective test
    // starting` line, so the command line is the only place the binary is named.
    let run = |binary: &str, redop: &str, busbw: f64| {
        format!(
            "+ mpirun -np 2 ./build/{binary} -b 1M -e 1M -g 1\n\
             # nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 1048576(bytes) warmup iters: 5 iters: 20 validation: 1\n\
             #   Rank  0 Pid  1234 on host-a device  0 [0x3d] Tesla V100-SXM2-16GB\n\
             #   Rank  1 Pid  1235 on host-b device  0 [0x3d] Tesla V100-SXM2-16GB\n\
             #       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n\
             \x20    1048576        262144     float  {redop:>6}    100.0   10.49  {busbw:.2}  1e-06    100.0   10.49  {busbw:.2}  1e-06\n\
             # Out of bounds values : 0 OK\n# Avg bus bandwidth    : {busbw:.2}\n"
        )
    };
    let text = [
        run("all_reduce_perf", "sum", 10.49),
        run("reduce_scatter_perf", "sum", 5.25),
    ]
    .concat();
    let (runs, problems) = read_runs("old.log", &text);
    assert!(problems.is_empty(), "{problems:?}");
    let tests: Vec<Option<&str>> = runs.iter().map(|r| r.test.as_deref()).collect();
    assert_eq!(
        tests,
        [Some("all_reduce_perf"), Some("reduce_scatter_perf")]
    );
}

#[test]
fn a_whole_sweep_with_sizes_rounded_per_rank_or_a_max_lowered_for_memory_is_not_an_excerpt() {
    // all_gather on 16 ranks from 8 bytes: the first sizes are less than a float per rank and
    // print as 0; the header's maxBytes was lowered before the table.
    let devices: String = (0..16)
        .map(|i| format!("#  Rank {i:2} Group  0 Pid {} on node-{} device {} [0000:18:00] NVIDIA H100 80GB HBM3\n", 500 + i, i / 8, i % 8))
        .collect();
    let rows: String = [0u64, 0, 0, 64, 128]
        .iter()
        .map(|s| format!("{s:>12}  {:>12}     float    none      -1    20.00    0.00    0.00      0    20.00    0.00    0.00      0\n", s / 4))
        .collect();
    let t = format!(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
         # Using devices\n\
         {devices}\
         # Reducing maxBytes to 200 due to memory limitation\n\
         #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
         {rows}\
         # Out of bounds values : 0 OK\n\
         # Avg bus bandwidth    : 0\n"
    );
    let r = one_run(&t);
    assert!(r.avg_busbw_from_footer);
}
