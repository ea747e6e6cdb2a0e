//! A flood of connections and oversized lines at a rendezvous leader: its threads and memory
//! stay bounded and the real follower still joins. Alone in its test binary, so that the
//! process-wide figures of `/proc/self/status` are the leader's.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use common::munged::Munged;
use fabric_net::rendezvous::{
    DEFAULT_WORKERS, MapResolver, Munge, PROTOCOL_VERSION, RendezvousConfig, SystemResolver, gather,
};
use serde_json::json;

/// `Threads:` and `VmRSS:` (KiB) of this process.
fn threads_and_rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (field("Threads:"), field("VmRSS:"))
}

/// A TCP connection to the leader from the loopback address `from`.
fn connect_from(from: Ipv4Addr, port: u16) -> Option<TcpStream> {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).ok()?;
    rustix::net::sockopt::set_socket_reuseaddr(&fd, true).ok()?;
    bind(&fd, &SocketAddr::new(IpAddr::V4(from), 0)).ok()?;
    connect(&fd, &SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)).ok()?;
    Some(TcpStream::from(fd))
}

#[test]
fn a_flood_of_connections_and_oversized_lines_leaves_the_leader_bounded_and_the_follower_joins() {
    let Some(m) = Munged::start() else { return };
    // 40 nodes at 127.0.0.1..=40: n1 leads, n2 is the only real follower, the flood comes from
    // the addresses of the others (a job user on every other node) and from outside the job.
    let names: Vec<String> = (1..=40).map(|i| format!("n{i}")).collect();
    let addr = |i: u8| Ipv4Addr::new(127, 0, 0, i);
    let map = MapResolver::<SystemResolver> {
        map: names
            .iter()
            .zip(1u8..)
            .map(|(n, i)| (n.clone(), IpAddr::V4(addr(i))))
            .collect(),
        fallback: None,
    };
    let me = nix::unistd::getuid().as_raw();
    let mut cfg =
        RendezvousConfig::new(names, &map, 1301, Munge::with_socket(&m.socket), vec![me]).unwrap();
    // A window of free ports (see common::ports), the job's first port its first.
    cfg.window = common::loopback::window(common::ports::free_window(common::loopback::PORTS));
    cfg.timeout = Duration::from_secs(3);
    let port = cfg.ports()[0];

    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let stop = stop.clone();
        thread::spawn(move || {
            let base = threads_and_rss_kib();
            let mut peak = base;
            while !stop.load(Ordering::Relaxed) {
                let (t, r) = threads_and_rss_kib();
                peak = (peak.0.max(t), peak.1.max(r));
                thread::sleep(Duration::from_millis(2));
            }
            (base, peak)
        })
    };
    thread::sleep(Duration::from_millis(20));
    let leader = {
        let cfg = cfg.clone();
        thread::spawn(move || gather(&cfg, 0, &json!({"rank": 0})))
    };
    common::ports::wait_until_we_listen(port, "the leader", Duration::from_secs(30));

    // Oversized lines: after the hello, 24 MiB without a newline, from four nodes' addresses.
    let mut refused_early = 0;
    for i in 3..7 {
        let Some(s) = connect_from(addr(i), port) else {
            continue;
        };
        let mut w = s;
        let want = serde_json::json!({"type": "want", "v": PROTOCOL_VERSION, "job_id": 1301});
        writeln!(w, "{want}").unwrap();
        let mut hello = String::new();
        BufReader::new(w.try_clone().unwrap())
            .read_line(&mut hello)
            .unwrap();
        assert!(hello.contains("\"hello\""), "{hello}");
        w.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let chunk = vec![b'x'; 1 << 20];
        let mut sent = 0usize;
        while sent < 24 << 20 && w.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
        refused_early += usize::from(sent < 24 << 20);
    }
    // The flood, while the real follower joins: 400 connections that say nothing, from every
    // other node's address and from an address outside the job; they stay open until the end.
    let follower = {
        let cfg = cfg.clone();
        thread::spawn(move || gather(&cfg, 1, &json!({"rank": 1})))
    };
    let mut flood = Vec::new();
    for k in 0..400u32 {
        let from = if k % 10 == 0 {
            addr(200)
        } else {
            addr(7 + (k % 33) as u8)
        };
        if let Some(s) = connect_from(from, port) {
            flood.push(s);
        }
    }
    let f = follower.join().unwrap();
    let g = leader.join().unwrap().unwrap();

    stop.store(true, Ordering::Relaxed);
    let ((base_threads, base_rss), (peak_threads, peak_rss)) = monitor.join().unwrap();
    drop(flood);

    assert!(f.is_ok(), "the follower did not join: {f:?}");
    assert_eq!(g.payloads[1], Some(json!({"rank": 1})));
    assert_eq!(refused_early, 4, "the leader read a whole oversized line");
    assert!(
        g.rejected
            .iter()
            .any(|r| r.contains("not an address of this job")),
        "{:?}",
        g.rejected
    );
    // Counted per reason, not a line (and a list entry) per connection: the flood cannot fill
    // the prolog's share of the slurmd log.
    assert!(
        g.rejected.len() <= fabric_net::rendezvous::rejections::MAX_REASONS + 1,
        "{} lines for 400 connections: {:?}",
        g.rejected.len(),
        g.rejected
    );
    // Workers, each with at most two reader threads of a munge client, and the follower's.
    let thread_bound = (DEFAULT_WORKERS as u64) * 3 + 8;
    assert!(
        peak_threads - base_threads <= thread_bound,
        "threads rose from {base_threads} to {peak_threads} (bound +{thread_bound})"
    );
    assert!(
        peak_rss.saturating_sub(base_rss) < 48 * 1024,
        "memory rose from {base_rss} KiB to {peak_rss} KiB"
    );
}
