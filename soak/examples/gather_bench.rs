//! `cargo run --release -p fabric-soak --example gather_bench -- WHAT [N]`: times what the
//! soak spends most of its CPU on, one piece at a time, on the `ib8-healthy` fixture tree (in
//! `/dev/shm` as the soak's, unless `TMPDIR` is set), printing wall, user and system time each
//! (the process's own, from `/proc/self/stat`). A benchmark tool for the soak's speed (issue
//! 40, docs/checks.md "False drains: the soak"); no test runs it.
//!
//! - `gather`: the probe's gather, `N` times (default 1,000).
//! - `probe`: the whole probe (gather, checks, thresholds) without a baseline, `N` times.
//! - `quick`: the watch's sampler (`QuickSampler`) against a saved probe, `N` samples.
//! - `threads`: `N` gathers over `THREADS` trees (default 20) in as many threads, `TOKENS` of
//!   them running at once (default all), each with a file table of its own when `UNSHARE` is
//!   set: the soak's node threads taking turns on the cores.

use fabric_core::jobstep::watch::{QuickSampler, Sampler};
use fabric_core::probe::ProbeInput;
use fabric_core::probe::gather::{self, Roots};
use std::time::Instant;

/// This process's user and system CPU seconds so far.
fn cpu() -> (f64, f64) {
    let st = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &st[st.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Clock ticks: 100 a second on Linux (USER_HZ).
    let t = |i: usize| f[i].parse::<f64>().unwrap() / 100.0;
    (t(11), t(12))
}

/// A probe of node `n1` on `roots` with the default configuration and no saved state.
fn probe_input(roots: &Roots) -> ProbeInput {
    ProbeInput {
        node: "n1".into(),
        roots: roots.clone(),
        expect: fabric_core::config::Config::default().for_node("n1"),
        baseline: None,
        bom_pin: None,
        known: None,
        second_look: None,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or("gather".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let shm = std::path::Path::new("/dev/shm");
    let dir = if std::env::var_os("TMPDIR").is_none_or(|t| t.is_empty()) && shm.is_dir() {
        tempfile::Builder::new().tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .unwrap();
    let root = dir.path().join("sysfs");
    fabric_testkit::sysfs::write("ib8-healthy", &root).unwrap();
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(&proc_root).unwrap();
    std::fs::write(proc_root.join("uptime"), "1000.00 0.00\n").unwrap();
    let roots = Roots::for_sysfs(root.clone(), proc_root.clone(), None);
    let (u0, s0) = cpu();
    let t0 = Instant::now();
    match what.as_str() {
        "gather" => {
            for _ in 0..n {
                let s = gather::gather(&roots, |_| false);
                std::hint::black_box(s);
            }
        }
        "threads" => {
            let k: usize = std::env::var("THREADS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(20);
            let trees: Vec<Roots> = (0..k)
                .map(|i| {
                    let r = dir.path().join(format!("t{i}"));
                    fabric_testkit::sysfs::write("ib8-healthy", &r).unwrap();
                    Roots::for_sysfs(r, proc_root.clone(), None)
                })
                .collect();
            let (u0, s0) = cpu();
            let t0 = Instant::now();
            let tokens: usize = std::env::var("TOKENS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(k);
            let sem = (std::sync::Mutex::new(tokens), std::sync::Condvar::new());
            let sem = &sem;
            std::thread::scope(|sc| {
                for r in &trees {
                    sc.spawn(move || {
                        if std::env::var_os("UNSHARE").is_some() {
                            nix::sched::unshare(nix::sched::CloneFlags::CLONE_FILES).unwrap();
                        }
                        let mut left = n / k;
                        while left > 0 {
                            {
                                let mut t = sem.0.lock().unwrap();
                                while *t == 0 {
                                    t = sem.1.wait(t).unwrap();
                                }
                                *t -= 1;
                            }
                            for _ in 0..left.min(30) {
                                std::hint::black_box(gather::gather(r, |_| false));
                            }
                            left -= left.min(30);
                            *sem.0.lock().unwrap() += 1;
                            sem.1.notify_one();
                        }
                    });
                }
            });
            let el = t0.elapsed().as_secs_f64();
            let (u1, s1) = cpu();
            println!(
                "threads {k}: {:.1} us wall, {:.1} us user, {:.1} us sys per gather",
                el / n as f64 * 1e6,
                (u1 - u0) / n as f64 * 1e6,
                (s1 - s0) / n as f64 * 1e6
            );
            return;
        }
        "probe" => {
            let input = probe_input(&roots);
            for _ in 0..n {
                std::hint::black_box(fabric_core::probe::run(&input));
            }
        }
        "quick" => {
            let input = probe_input(&roots);
            let base = fabric_core::probe::run(&input);
            let bp = dir.path().join("base.json");
            eprintln!(
                "json bytes {}",
                fabric_core::probe::output::json(&base).len()
            );
            std::fs::write(&bp, fabric_core::probe::output::json(&base)).unwrap();
            let input = ProbeInput {
                baseline: Some(fabric_core::probe::Baseline::load(&bp).unwrap()),
                ..input
            };
            let mut q = QuickSampler::new(input);
            for _ in 0..n {
                std::hint::black_box(q.sample());
            }
            eprintln!("full samples {}", q.full_samples);
        }
        _ => panic!("gather_bench: WHAT is gather, probe, quick or threads"),
    }
    let el = t0.elapsed().as_secs_f64();
    let (u1, s1) = cpu();
    println!(
        "{what} x{n}: {:.1} us wall, {:.1} us user, {:.1} us sys each",
        el / n as f64 * 1e6,
        (u1 - u0) / n as f64 * 1e6,
        (s1 - s0) / n as f64 * 1e6
    );
}
