//! A simulated job's rendezvous on loopback, for `scripts/bench-scale`: one process per node,
//! real MUNGE (a private munged's socket), node `i` at `127.0.0.(1 + i % 254)`.
//!
//! `rendezvous_sim drive --nodes N --socket S [--job J] [--base-port P] [--workers W]` starts
//! the N−1 followers, lets them begin knocking, then starts the leader and prints one JSON line:
//! the leader's wall time (from its start to its last answer), its peak memory (`VmHWM`), and
//! its CPU time with that of its `munge`/`unmunge` children (what one leader node spends, which a
//! loopback run cannot separate from the followers' load on the same cores in wall time), and
//! how many nodes were missing or failed. `lead` and `follow --rank R` are the roles it runs.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fabric_net::rendezvous::{
    MapResolver, Munge, RendezvousConfig, SystemResolver, Window, gather,
};
use serde_json::json;

struct Args {
    role: String,
    nodes: usize,
    rank: usize,
    socket: String,
    job: u64,
    base_port: u16,
    workers: usize,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let role = it
        .next()
        .ok_or("usage: rendezvous_sim drive|lead|follow --nodes N --socket S")?;
    let mut a = Args {
        role,
        nodes: 0,
        rank: 0,
        socket: String::new(),
        job: 4242,
        base_port: 44_000,
        workers: fabric_net::rendezvous::DEFAULT_WORKERS,
    };
    while let Some(k) = it.next() {
        let v = it.next().ok_or(format!("{k} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{k} {v}: {e}"));
        match k.as_str() {
            "--nodes" => a.nodes = num(&v)? as usize,
            "--rank" => a.rank = num(&v)? as usize,
            "--socket" => a.socket = v,
            "--job" => a.job = num(&v)?,
            "--base-port" => a.base_port = num(&v)? as u16,
            "--workers" => a.workers = num(&v)? as usize,
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if a.nodes < 2 || a.socket.is_empty() {
        return Err("--nodes (at least 2) and --socket are required".into());
    }
    Ok(a)
}

fn addr(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + (i % 254) as u8))
}

fn config(a: &Args, timeout: Duration) -> RendezvousConfig {
    let names: Vec<String> = (0..a.nodes).map(|i| format!("sim{i}")).collect();
    let map = MapResolver::<SystemResolver> {
        map: names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), addr(i)))
            .collect::<BTreeMap<_, _>>(),
        fallback: None,
    };
    let me = nix::unistd::geteuid().as_raw();
    let mut cfg =
        RendezvousConfig::new(names, &map, a.job, Munge::with_socket(&a.socket), vec![me])
            .expect("a valid simulated job");
    cfg.window = Window::standard(a.base_port).expect("--base-port: a window that fits");
    cfg.timeout = timeout;
    cfg.workers = a.workers;
    cfg
}

/// A prolog-sized payload: a node's verdict and a few checks.
fn payload(rank: usize) -> serde_json::Value {
    json!({"result": {"node": format!("sim{rank}"), "verdict": "pass", "checks": [
        {"id": "link.state", "verdict": "pass"}, {"id": "link.speed", "verdict": "pass"},
        {"id": "counters.errors", "verdict": "pass"}, {"id": "gpu.visible", "verdict": "pass"}]},
        "notes": []})
}

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds of this process and its waited-for children (the `munge`/`unmunge` it ran):
/// `utime + stime + cutime + cstime` of `/proc/self/stat`, in clock ticks of 1/100 s.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rendezvous_sim: {e}");
            std::process::exit(2);
        }
    };
    match a.role.as_str() {
        "follow" => {
            let cfg = config(&a, Duration::from_secs(60));
            if let Err(e) = gather(&cfg, a.rank, &payload(a.rank)) {
                eprintln!("rank {}: {e}", a.rank);
                std::process::exit(1);
            }
        }
        "lead" => {
            let cfg = config(&a, Duration::from_secs(30));
            let (t, cpu0) = (Instant::now(), cpu_s());
            let g = gather(&cfg, 0, &payload(0)).expect("the leader runs");
            let wall = t.elapsed();
            let cpu = cpu_s() - cpu0;
            println!(
                "{}",
                json!({"leader_wall_ms": wall.as_secs_f64() * 1000.0,
                    "leader_cpu_ms": cpu * 1000.0,
                    "leader_peak_rss_kib": status_kib("VmHWM:"),
                    "missing": g.missing.len(), "rejected": g.rejected.len()})
            );
        }
        "drive" => drive(&a),
        other => {
            eprintln!("rendezvous_sim: unknown role {other}");
            std::process::exit(2);
        }
    }
}

fn drive(a: &Args) {
    let me = std::env::current_exe().expect("own path");
    let common = |role: &str| {
        let mut c = Command::new(&me);
        c.arg(role)
            .args(["--nodes", &a.nodes.to_string(), "--socket", &a.socket])
            .args([
                "--job",
                &a.job.to_string(),
                "--base-port",
                &a.base_port.to_string(),
            ])
            .args(["--workers", &a.workers.to_string()]);
        c
    };
    let mut followers = Vec::new();
    for r in 1..a.nodes {
        let mut c = common("follow");
        c.args(["--rank", &r.to_string()]).stdout(Stdio::null());
        followers.push(c.spawn().expect("a follower starts"));
    }
    // Every follower is knocking (backing off) before the leader starts, as when prologs start
    // together and the leader's is last.
    std::thread::sleep(Duration::from_millis(500));
    let out = common("lead")
        .stderr(Stdio::inherit())
        .output()
        .expect("the leader runs");
    let failed = followers
        .iter_mut()
        .map(|c| c.wait().map(|s| !s.success()).unwrap_or(true))
        .filter(|f| *f)
        .count();
    let mut line: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| json!({"leader_failed": true}));
    line["nodes"] = json!(a.nodes);
    line["workers"] = json!(a.workers);
    line["followers_failed"] = json!(failed);
    println!("{line}");
}
