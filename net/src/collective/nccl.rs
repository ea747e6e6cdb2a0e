//! The NCCL backend (feature `nccl`): the same sweep as the TCP backend, run by NCCL on one GPU
//! per rank, through cudarc with `dynamic-loading` (no CUDA needed to build).
//!
//! * Presence first: cudarc panics when it cannot load `libcuda`/`libnccl`, and its own
//!   `is_culib_present` is `unsafe`, which the workspace denies. [`library_present`] looks for the
//!   exact file names cudarc tries (`cudarc::get_lib_name_candidates`) where the dynamic loader
//!   looks (`LD_LIBRARY_PATH`, the `ldconfig` cache, the system library directories). Missing
//!   libraries or no GPU are a *skip* (verdict `pass`, `skipped` says why), not an error. A
//!   panic that still escapes cudarc is caught and reported as an error.
//! * cudarc's NCCL name list has `libnccl.so` but not `libnccl.so.2`: nodes with only the runtime
//!   package need a `libnccl.so` symlink (the skip message says so).
//! * `ncclUniqueId` (128 bytes) comes from rank 0 through the MUNGE-authenticated rendezvous.
//! * Every rank must run the same iterations: before each, rank 0's command travels in a
//!   two-float all-reduce (others contribute zeros), like the TCP backend's ring token.
//! * `NCCL_ALGO=Ring` makes busbw reflect the network; setting the environment in-process is
//!   `unsafe` in edition 2024, so the CLI re-executes itself with it when it is unset.
//! * Per-link attribution is the TCP backend's: NCCL's own transport hides per-link timing.

use std::path::{Path, PathBuf};
use std::time::Instant;

use cudarc::driver::CudaContext;
use cudarc::nccl::{Comm, Id, ReduceOp};
use serde_json::json;

use super::{
    Cmd, CollectiveConfig, CollectiveError, Planner, Report, Verdict, count_wrong, empty_report,
    expected_coefficient, fill_input, size_figures,
};
use crate::rendezvous::{self, RendezvousError, Share};

/// Directories the dynamic loader searches by default on Debian/RHEL x86_64 and aarch64.
const SYSTEM_LIB_DIRS: [&str; 6] = [
    "/lib",
    "/usr/lib",
    "/lib64",
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
];

fn ldconfig_paths() -> Vec<PathBuf> {
    let Ok(out) = std::process::Command::new("/sbin/ldconfig")
        .arg("-p")
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split("=>").nth(1))
        .map(|p| PathBuf::from(p.trim()))
        .collect()
}

/// The reason in a panic cudarc raised for a library it could not load: its first clause (it
/// appends every library name it tried), bounded to 160 characters.
pub fn cudarc_panic_reason(panic: &(dyn std::any::Any + Send)) -> String {
    let why = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown".into());
    why.split(" - ")
        .next()
        .unwrap_or("")
        .chars()
        .take(160)
        .collect()
}

/// Whether cudarc would find library `name` (`"cuda"`, `"nccl"`): the path of the first file,
/// among the names cudarc tries, that the loader can see.
pub fn library_present(name: &str) -> Option<PathBuf> {
    let candidates = cudarc::get_lib_name_candidates(name);
    let mut dirs: Vec<PathBuf> = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    dirs.extend(SYSTEM_LIB_DIRS.iter().map(PathBuf::from));
    for c in &candidates {
        if let Some(p) = dirs.iter().map(|d| d.join(c)).find(|p| p.exists()) {
            return Some(p);
        }
    }
    let cached = ldconfig_paths();
    candidates.iter().find_map(|c| {
        cached
            .iter()
            .find(|p| p.file_name().is_some_and(|f| f == c.as_str()))
            .cloned()
    })
}

/// Why NCCL cannot run here, or `Ok` with the libraries found.
pub fn availability() -> Result<(PathBuf, PathBuf), CollectiveError> {
    let cuda = library_present("cuda").ok_or_else(|| {
        CollectiveError::Unavailable("no GPU driver: libcuda.so not found".into())
    })?;
    let nccl = library_present("nccl").ok_or_else(|| {
        let runtime_only = SYSTEM_LIB_DIRS
            .iter()
            .any(|d| Path::new(d).join("libnccl.so.2").exists());
        CollectiveError::Unavailable(if runtime_only {
            "libnccl.so.2 is installed but cudarc loads libnccl.so: add the symlink or install libnccl-dev".into()
        } else {
            "libnccl.so not found (install NCCL)".into()
        })
    })?;
    Ok((cuda, nccl))
}

/// Runs one rank of the NCCL collective on GPU `CUDA_VISIBLE_DEVICES`'s first device. Never
/// fails: a skip or an error is in the report.
pub fn run(cfg: &CollectiveConfig) -> Report {
    let mut report = empty_report(cfg, "nccl");
    let outcome = std::panic::catch_unwind(|| run_inner(cfg));
    match outcome {
        Ok(Ok(r)) => report = r,
        Ok(Err(failure)) => match *failure {
            (CollectiveError::Unavailable(why), _) => {
                report.verdict = Verdict::Pass;
                report.skipped = Some(why);
            }
            (e, missing) => {
                report.error = Some(e.to_string());
                report.missing = missing;
            }
        },
        Err(_) => {
            report.error = Some("cudarc panicked (a CUDA or NCCL library failed to load)".into())
        }
    }
    report.duration_ms = cfg.started.elapsed().as_millis() as u64;
    report
}

/// An error and the participants known to be missing when it happened.
type Failure = Box<(CollectiveError, Vec<String>)>;

fn nccl_err(what: &str, e: impl std::fmt::Debug) -> CollectiveError {
    CollectiveError::Ring(format!("{what}: {e:?}"))
}

fn run_inner(cfg: &CollectiveConfig) -> Result<Report, Failure> {
    let none = |e: CollectiveError| Box::new((e, Vec::new()));
    availability().map_err(none)?;
    let ctx = CudaContext::new(0).map_err(|e| {
        none(CollectiveError::Unavailable(format!(
            "no usable GPU: {e:?}"
        )))
    })?;
    let stream = ctx.default_stream();

    let mut payload = json!({});
    if cfg.my_rank == 0 {
        let id = Id::new().map_err(|e| none(nccl_err("ncclGetUniqueId", e)))?;
        let hex: String = id
            .internal()
            .iter()
            .map(|b| format!("{:02x}", *b as u8))
            .collect();
        payload["nccl_id"] = json!(hex);
    }
    let mut rcfg = cfg.rendezvous.clone();
    rcfg.share = Share::All;
    let gathered = rendezvous::gather(&rcfg, cfg.my_rank, &payload).map_err(|e| {
        let missing = match &e {
            RendezvousError::NoLeader { leader, .. } => vec![leader.clone()],
            _ => vec![],
        };
        Box::new((e.into(), missing))
    })?;
    let missing = gathered.missing.clone();
    let fail = |e: CollectiveError| Box::new((e, missing.clone()));
    let present = gathered.present();
    let m = present.len();
    let pos = present
        .iter()
        .position(|r| *r == cfg.my_rank)
        .ok_or_else(|| fail(CollectiveError::Ring("not among the joined ranks".into())))?;
    let hex = gathered.payloads[0]
        .as_ref()
        .and_then(|p| p["nccl_id"].as_str())
        .ok_or_else(|| fail(CollectiveError::Ring("leader sent no NCCL id".into())))?;
    if hex.len() != 256 {
        return Err(fail(CollectiveError::Ring(
            "NCCL id is not 128 bytes".into(),
        )));
    }
    let mut internal = [0 as std::ffi::c_char; 128];
    for (i, b) in internal.iter_mut().enumerate() {
        let byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| fail(CollectiveError::Ring("NCCL id is not hex".into())))?;
        *b = byte as std::ffi::c_char;
    }
    let comm = Comm::from_rank(stream.clone(), pos, m, Id::uninit(internal))
        .map_err(|e| fail(nccl_err("ncclCommInitRank", e)))?;

    let sizes: Vec<usize> = cfg
        .sizes_bytes
        .iter()
        .map(|b| ((*b / 4) as usize).max(1))
        .collect();
    let mut iter_s: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
    let mut wrong: Vec<u64> = vec![0; sizes.len()];
    let mut planner = Planner::new(cfg, sizes.len(), 0);
    let mut ctrl = stream
        .alloc_zeros::<f32>(2)
        .map_err(|e| fail(nccl_err("alloc", e)))?;
    let mut bufs: Option<(
        usize,
        cudarc::driver::CudaSlice<f32>,
        cudarc::driver::CudaSlice<f32>,
    )> = None;
    let mut iter_no: u32 = 0;
    loop {
        let word = if pos == 0 {
            let c = planner.next(&sizes).encode();
            [
                f32::from(u16::from_le_bytes([c[0], c[1]])),
                f32::from(u16::from_le_bytes([c[4], c[5]])),
            ]
        } else {
            [0.0, 0.0]
        };
        stream
            .memcpy_htod(&word, &mut ctrl)
            .map_err(|e| fail(nccl_err("copy", e)))?;
        comm.all_reduce_in_place(&mut ctrl, &ReduceOp::Sum)
            .map_err(|e| fail(nccl_err("all-reduce of the command", e)))?;
        let got = stream
            .clone_dtoh(&ctrl)
            .map_err(|e| fail(nccl_err("copy", e)))?;
        let (k, si) = (got[0] as u16, got[1] as u16);
        let mut raw = [0u8; 8];
        raw[..2].copy_from_slice(&k.to_le_bytes());
        raw[4..6].copy_from_slice(&si.to_le_bytes());
        let (si, timed) = match Cmd::decode(raw).map_err(fail)? {
            Cmd::Stop => break,
            // The link and latency probes are the TCP ring's; the planner plans none here.
            Cmd::Probe | Cmd::Latency => continue,
            Cmd::Warmup(s) => (s as usize, false),
            Cmd::Timed(s) => (s as usize, true),
        };
        let count = *sizes.get(si).ok_or_else(|| {
            fail(CollectiveError::Ring(format!(
                "size index {si} out of range"
            )))
        })?;
        if bufs.as_ref().is_none_or(|(c, _, _)| *c != count) {
            let send = stream
                .alloc_zeros::<f32>(count)
                .map_err(|e| fail(nccl_err("alloc", e)))?;
            let recv = stream
                .alloc_zeros::<f32>(count)
                .map_err(|e| fail(nccl_err("alloc", e)))?;
            bufs = Some((count, send, recv));
        }
        let Some((_, send, recv)) = bufs.as_mut() else {
            unreachable!("buffers were just allocated")
        };
        iter_no = iter_no.wrapping_add(1);
        let mut host = Vec::new();
        fill_input(&mut host, count, cfg.my_rank, iter_no);
        stream
            .memcpy_htod(&host, send)
            .map_err(|e| fail(nccl_err("copy", e)))?;
        stream
            .synchronize()
            .map_err(|e| fail(nccl_err("sync", e)))?;
        let t0 = Instant::now();
        comm.all_reduce(send, recv, &ReduceOp::Sum)
            .map_err(|e| fail(nccl_err("ncclAllReduce", e)))?;
        stream
            .synchronize()
            .map_err(|e| fail(nccl_err("sync", e)))?;
        let dt = t0.elapsed().as_secs_f64();
        if pos == 0 {
            planner.observe(si, timed, dt);
        }
        let out = stream
            .clone_dtoh(recv)
            .map_err(|e| fail(nccl_err("copy", e)))?;
        let coef = expected_coefficient(&present, iter_no);
        wrong[si] += count_wrong(&out, coef);
        if timed {
            iter_s[si].push(dt);
        }
    }

    // Per-iteration mean over ranks and total #wrong: one f64 all-reduce each. Every rank ran the
    // same iterations, so the vectors line up.
    let flat: Vec<f64> = iter_s.iter().flatten().copied().collect();
    let mut sums = flat.clone();
    sums.extend(wrong.iter().map(|w| *w as f64));
    let mut dev = stream
        .clone_htod(&sums)
        .map_err(|e| fail(nccl_err("copy", e)))?;
    comm.all_reduce_in_place(&mut dev, &ReduceOp::Sum)
        .map_err(|e| fail(nccl_err("all-reduce of the figures", e)))?;
    let sums = stream
        .clone_dtoh(&dev)
        .map_err(|e| fail(nccl_err("copy", e)))?;
    let mut report = empty_report(cfg, "nccl");
    let mut at = 0;
    for (si, times) in iter_s.iter().enumerate() {
        let n = times.len();
        let per_iter: Vec<f64> = sums[at..at + n].iter().map(|s| s / m as f64).collect();
        at += n;
        let w = sums[flat.len() + si] as u64;
        report.wrong += w;
        if n >= super::MIN_ITERS as usize {
            report
                .sizes
                .push(size_figures(sizes[si] as u64, &per_iter, m, w));
        }
    }
    report.missing = missing.clone();
    report.verdict = if report.wrong > 0 {
        report.messages.push(format!(
            "{} wrong elements in the reduced data",
            report.wrong
        ));
        Verdict::Fail
    } else if !missing.is_empty() {
        Verdict::Warn
    } else {
        Verdict::Pass
    };
    report.messages.push(format!(
        "NCCL_ALGO={}",
        std::env::var("NCCL_ALGO").unwrap_or_else(|_| "(unset)".into())
    ));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_does_not_exist_is_not_present() {
        assert_eq!(library_present("fabric-check-no-such-library"), None);
    }

    #[test]
    fn without_libcuda_the_backend_is_a_skip_not_an_error() {
        if library_present("cuda").is_some() {
            return; // a GPU machine: the hardware test covers it.
        }
        let err = availability().unwrap_err();
        assert!(
            matches!(err, CollectiveError::Unavailable(ref w) if w.contains("libcuda")),
            "{err}"
        );
    }

    /// Hardware: one rank on this machine's first GPU (`scripts/hw-test`).
    #[test]
    #[ignore = "needs a GPU with libcuda and libnccl"]
    fn one_rank_on_a_gpu_reduces_correctly() {
        use crate::rendezvous::{MapResolver, Munge, RendezvousConfig, SystemResolver};
        let map = MapResolver::<SystemResolver> {
            map: [("gpu0".to_string(), std::net::IpAddr::from([127, 0, 0, 1]))].into(),
            fallback: None,
        };
        let rz = RendezvousConfig::new(vec!["gpu0".into()], &map, 77, Munge::default(), vec![0])
            .unwrap();
        let cfg = CollectiveConfig::new(rz, 0, Instant::now());
        let r = run(&cfg);
        assert_eq!(r.skipped, None, "{r:?}");
        assert_eq!(r.error, None, "{r:?}");
        assert_eq!(r.wrong, 0);
        assert!(!r.sizes.is_empty());
    }
}
