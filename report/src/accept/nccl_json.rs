//! nccl-tests' `-J file.json` output.
//!
//! Shape (nccl-tests `src/util.cu`, JSON_FILE_VERSION 1): `{version, start_time, args, env,
//! nccl_version, config: {nthreads, ngpus, ..., devices: [{rank, group, pid, hostname, device,
//! device_hex, device_info}]}, results: [{size, count, type, redop, root, out_of_place: {time |
//! cpu_time, alg_bw, bus_bw, nwrong} | null, out_of_place_per_iter: {min_us, max_us, avg_us,
//! p50_us, p95_us, p99_us, stdev_us, cv_pct, times_us, per_process_max_times_us}, in_place...,
//! actual_iterations, experiment_name}], out_of_bounds: {count, okay}, average_bus_bandwidth:
//! {bandwidth, okay}, end_time}`. Doubles that are NaN are written as the string `"nan"`; `root`
//! is a string padded to six characters. A crashed run leaves the file unterminated.

use serde_json::Value;

use super::{Device, IterStats, Measure, NcclRun, Problem, SizeRow};

fn f(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) if s == "nan" => Some(f64::NAN),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn measure(v: &Value, per_iter: &Value) -> Option<Measure> {
    if !v.is_object() {
        return None;
    }
    let iter = per_iter.is_object().then(|| IterStats {
        min_us: f(&per_iter["min_us"]),
        max_us: f(&per_iter["max_us"]),
        p95_us: f(&per_iter["p95_us"]),
        p99_us: f(&per_iter["p99_us"]),
        cv_pct: f(&per_iter["cv_pct"]),
    });
    let per_process_mean_us = per_iter["per_process_max_times_us"]
        .as_array()
        .map(|procs| {
            procs
                .iter()
                .filter_map(|p| {
                    let t: Vec<f64> = p.as_array()?.iter().filter_map(f).collect();
                    (!t.is_empty()).then(|| t.iter().sum::<f64>() / t.len() as f64)
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Measure {
        time_us: f(&v["time"]).or_else(|| f(&v["cpu_time"]))?,
        algbw_gbps: f(&v["alg_bw"])?,
        busbw_gbps: f(&v["bus_bw"])?,
        wrong: f(&v["nwrong"]),
        max_error: None,
        iter,
        per_process_mean_us,
    })
}

/// Parses one JSON file.
pub fn parse(file: &str, text: &str) -> (Option<NcclRun>, Vec<Problem>) {
    let problem = |line: u64, message: String| Problem::fail(file, line, message);
    let doc: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let what = if e.is_eof() {
                "the JSON ends early (the test crashed or the file was cut); re-run it".to_string()
            } else {
                format!("not valid JSON: {e}")
            };
            return (None, vec![problem(e.line() as u64, what)]);
        }
    };
    let Some(results) = doc["results"].as_array() else {
        return (
            None,
            vec![problem(
                0,
                "no `results` list; is this an nccl-tests -J file?".into(),
            )],
        );
    };
    let mut problems = Vec::new();
    let mut run = NcclRun {
        file: file.to_string(),
        form: "json",
        test: doc["args"]
            .as_array()
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .map(|s| s.rsplit('/').next().unwrap_or(s).to_string()),
        version: doc["nccl_version"].as_i64().map(|v| format!("NCCL {v}")),
        ..NcclRun::default()
    };
    for d in doc["config"]["devices"].as_array().into_iter().flatten() {
        run.devices.push(Device {
            rank: d["rank"].as_u64().unwrap_or(0) as u32,
            host: d["hostname"].as_str().unwrap_or("").trim().to_string(),
            device: d["device"].as_u64().unwrap_or(0) as u32,
            name: d["device_info"].as_str().unwrap_or("").trim().to_string(),
        });
    }
    for (i, r) in results.iter().enumerate() {
        let (Some(size_b), Some(count)) = (r["size"].as_u64(), r["count"].as_u64()) else {
            problems.push(problem(
                0,
                format!("results[{i}] has no numeric size and count; the entry is skipped"),
            ));
            continue;
        };
        let oop = measure(&r["out_of_place"], &r["out_of_place_per_iter"]);
        let ip = measure(&r["in_place"], &r["in_place_per_iter"]);
        if oop.is_none() && ip.is_none() {
            problems.push(problem(
                0,
                format!(
                    "results[{i}] (size {size_b}) has neither out_of_place nor in_place figures"
                ),
            ));
            continue;
        }
        run.rows.push(SizeRow {
            size_b,
            count,
            dtype: r["type"].as_str().unwrap_or("").to_string(),
            redop: r["redop"].as_str().unwrap_or("").to_string(),
            root: match &r["root"] {
                Value::String(s) => s.trim().parse().ok(),
                v => v.as_i64(),
            },
            out_of_place: oop,
            in_place: ip,
            line: 0,
        });
    }
    run.out_of_bounds = doc["out_of_bounds"]["count"].as_u64();
    run.avg_busbw_gbps = f(&doc["average_bus_bandwidth"]["bandwidth"]);
    run.avg_busbw_from_footer = run.avg_busbw_gbps.is_some();
    if run.rows.is_empty() {
        problems.push(problem(
            0,
            "the results list is empty; did the test run?".into(),
        ));
        return (None, problems);
    }
    (Some(run), problems)
}
