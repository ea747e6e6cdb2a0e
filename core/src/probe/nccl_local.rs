//! `nccl.local`: an active all-reduce over the node's GPUs (cargo feature `nccl`, off by default).
//!
//! Not part of the passive probe: it initialises CUDA and NCCL (seconds, not milliseconds), so it
//! runs only when asked (`fabric-check probe --nccl-local`). One process drives every local GPU
//! from one thread (`ncclCommInitAll` + group calls, NCCL user guide "Group Calls"), all-reduces
//! `f32` buffers filled with `rank + 1`, checks the sum, and reports algorithm and bus bandwidth
//! (busbw = algbw × 2(n−1)/n, as nccl-tests defines it) and latency percentiles.
//!
//! cudarc loads `libcuda` and `libnccl` at run time and panics when they are missing; its
//! presence probes are `unsafe`, which this workspace denies, so the whole run is wrapped in
//! `catch_unwind` and a missing library becomes a skip with the reason, never a crash.

use serde_json::{Value, json};

use super::{Finding, Severity};

/// The check id.
pub const ID: &str = fabric_proto::check_id::NCCL_LOCAL;

fn info(observed: Value, message: String) -> Finding {
    Finding::new(
        ID,
        Severity::Info,
        None,
        None,
        observed,
        Value::Null,
        message,
    )
}

/// nccl-tests' bus bandwidth of an all-reduce: algbw × 2(n−1)/n.
pub fn busbw_gbps(bytes: usize, seconds: f64, ranks: usize) -> f64 {
    if seconds <= 0.0 || ranks == 0 {
        return 0.0;
    }
    let algbw = bytes as f64 / seconds / 1e9;
    algbw * 2.0 * (ranks as f64 - 1.0) / ranks as f64
}

/// Runs the all-reduce (`bytes` per GPU, `iters` timed iterations after 5 warm-ups).
#[cfg(feature = "nccl")]
pub fn run(bytes: usize, iters: usize) -> Finding {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| imp::run(bytes, iters)));
    std::panic::set_hook(previous);
    match result {
        Ok(Ok(f)) => f,
        Ok(Err(msg)) => Finding::new(
            ID,
            Severity::Warn,
            None,
            None,
            Value::Null,
            Value::Null,
            msg,
        ),
        Err(p) => {
            let why = fabric_net::collective::nccl::cudarc_panic_reason(p.as_ref());
            info(
                json!({"skipped": true}),
                format!(
                    "nccl.local skipped: libcuda or libnccl could not be loaded ({why}); install the NVIDIA driver and NCCL, with libnccl.so on the library path"
                ),
            )
        }
    }
}

/// Without the `nccl` feature the check says so.
#[cfg(not(feature = "nccl"))]
pub fn run(_bytes: usize, _iters: usize) -> Finding {
    info(
        json!({"skipped": true}),
        "nccl.local skipped: this fabric-check was built without the `nccl` cargo feature".into(),
    )
}

#[cfg(feature = "nccl")]
mod imp {
    use std::time::Instant;

    use cudarc::driver::CudaContext;
    use cudarc::nccl::{Comm, ReduceOp};
    use serde_json::json;

    use super::{Finding, ID, Severity, busbw_gbps, info};
    use fabric_base::stats::percentile_of_sorted;

    pub fn run(bytes: usize, iters: usize) -> Result<Finding, String> {
        let n = CudaContext::device_count()
            .map_err(|e| format!("nccl.local: cuDeviceGetCount failed: {e:?}"))?;
        if n < 1 {
            return Ok(info(
                json!({"gpus": 0}),
                "nccl.local skipped: no CUDA device".into(),
            ));
        }
        let n = n as usize;
        let mut streams = Vec::with_capacity(n);
        for i in 0..n {
            let ctx = CudaContext::new(i)
                .map_err(|e| format!("nccl.local: cannot open GPU {i}: {e:?}"))?;
            streams.push(ctx.default_stream());
        }
        let comms = Comm::from_devices(streams.clone())
            .map_err(|e| format!("nccl.local: ncclCommInitAll failed: {e:?}"))?;
        let len = (bytes / 4).max(1);
        let mut bufs = Vec::with_capacity(n);
        for (rank, s) in streams.iter().enumerate() {
            let send = s
                .clone_htod(&vec![(rank + 1) as f32; len])
                .map_err(|e| format!("nccl.local: cannot fill GPU {rank}: {e:?}"))?;
            let recv = s
                .alloc_zeros::<f32>(len)
                .map_err(|e| format!("nccl.local: cannot allocate on GPU {rank}: {e:?}"))?;
            bufs.push((send, recv));
        }
        let mut samples_us = Vec::with_capacity(iters);
        for i in 0..iters + 5 {
            let t = Instant::now();
            cudarc::nccl::result::group_start()
                .map_err(|e| format!("nccl.local: group start: {e:?}"))?;
            for (c, (send, recv)) in comms.iter().zip(bufs.iter_mut()) {
                c.all_reduce(send, recv, &ReduceOp::Sum)
                    .map_err(|e| format!("nccl.local: all_reduce: {e:?}"))?;
            }
            cudarc::nccl::result::group_end()
                .map_err(|e| format!("nccl.local: group end: {e:?}"))?;
            for s in &streams {
                s.synchronize()
                    .map_err(|e| format!("nccl.local: synchronize: {e:?}"))?;
            }
            if i >= 5 {
                samples_us.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        let want = (n * (n + 1) / 2) as f32;
        for (rank, (s, (_, recv))) in streams.iter().zip(bufs.iter()).enumerate() {
            let host = s
                .clone_dtoh(recv)
                .map_err(|e| format!("nccl.local: copy back from GPU {rank}: {e:?}"))?;
            if let Some(bad) = host.iter().position(|v| *v != want) {
                return Ok(Finding::new(
                    ID,
                    Severity::Fail,
                    Some(&format!("gpu{rank}")),
                    None,
                    json!({"index": bad, "value": host[bad]}),
                    json!({"value": want}),
                    format!(
                        "nccl.local: all-reduce result wrong on GPU {rank} at element {bad}: {} instead of {want}",
                        host[bad]
                    ),
                ));
            }
        }
        samples_us.sort_by(f64::total_cmp);
        let pct = |p| percentile_of_sorted(&samples_us, p).unwrap_or(0.0);
        let p50 = pct(50.0);
        let busbw = busbw_gbps(len * 4, p50 / 1e6, n);
        Ok(info(
            json!({"gpus": n, "bytes": len * 4, "iters": iters, "busbw_gbps": busbw,
                   "latency_us": {"p50": p50, "p95": pct(95.0), "p99": pct(99.0)}}),
            format!(
                "nccl.local: {n} GPU(s), {} MiB all-reduce, busbw {busbw:.1} GB/s, p50 {p50:.0} µs",
                (len * 4) >> 20
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_bandwidth_follows_nccl_tests() {
        // 8 ranks: factor 2*7/8 = 1.75; 1 GB in 10 ms is 100 GB/s algbw.
        assert!((busbw_gbps(1_000_000_000, 0.01, 8) - 175.0).abs() < 1e-9);
        assert_eq!(busbw_gbps(1, 0.0, 8), 0.0);
        assert_eq!(busbw_gbps(1_000, 1.0, 1), 0.0);
    }

    #[cfg(feature = "nccl")]
    #[test]
    fn the_active_check_never_panics_even_without_a_gpu() {
        let f = run(1 << 20, 2);
        assert!(f.message.starts_with("nccl.local"), "{}", f.message);
    }

    #[cfg(not(feature = "nccl"))]
    #[test]
    fn without_the_feature_the_check_says_why_it_skipped() {
        let f = run(1 << 20, 10);
        assert_eq!(f.severity, Severity::Info);
        assert!(f.message.contains("`nccl` cargo feature"));
    }
}
