//! Windows of free ports for the tests that meet for real.
//!
//! A fixed port is not the test's to take: another run of the same tests (another checkout on
//! the machine) wants the same one, anything else may listen there, and the kernel hands ports
//! of its ephemeral range (`ip_local_port_range`, 32768–60999 by default) to every outgoing
//! connection, the tests' own included. So a window is taken below that range, from a place
//! that differs from one test process to the next, and only when every port in it can be bound
//! right now (the way the leader binds: `SO_REUSEADDR`, the unspecified address).

use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

/// The lowest port a window may start at.
const LOWEST: u32 = 10_000;

/// Where this process looks next (`None` until the first window).
static NEXT: Mutex<Option<u32>> = Mutex::new(None);

/// The kernel's ephemeral range, or Linux's default when it cannot be read.
fn ephemeral() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(str::parse::<u32>);
            Some((it.next()?.ok()?, it.next()?.ok()?))
        })
        .unwrap_or((32_768, 60_999))
}

/// The ports windows come from: below the ephemeral range, or above it when too little is
/// left below.
fn pool() -> (u32, u32) {
    let (low, high) = ephemeral();
    if low >= LOWEST + 2_000 {
        (LOWEST, low)
    } else {
        (high + 1, 65_536)
    }
}

/// The first port of `span` consecutive ports, none of them in the ephemeral range, that were
/// all free when it looked. Successive calls in one process never return overlapping windows
/// (until the whole pool has been gone through). Panics when no window is free.
pub fn free_window(span: u16) -> u16 {
    let span = u32::from(span.max(1));
    let (lo, hi) = pool();
    let windows = (hi - lo) / span;
    assert!(
        windows > 0,
        "no room for a window of {span} ports in {lo}..{hi}"
    );
    let mut next = NEXT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut i = next.unwrap_or_else(|| {
        // Another test process starts elsewhere: the pid and the clock pick the place.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        (std::process::id().wrapping_mul(7_919) ^ nanos) % windows
    });
    for _ in 0..windows {
        let first = lo + (i % windows) * span;
        i = (i % windows) + 1;
        let held: Option<Vec<TcpListener>> = (first..first + span)
            .map(|p| TcpListener::bind((Ipv4Addr::UNSPECIFIED, p as u16)).ok())
            .collect();
        if held.is_some() {
            *next = Some(i);
            return first as u16;
        }
    }
    panic!("no window of {span} free ports in {lo}..{hi}");
}

/// The inodes of the sockets this process holds open.
fn our_sockets() -> std::collections::HashSet<u64> {
    std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Whether a socket of this process listens on TCP `port` (read from `/proc/net/tcp` and
/// `tcp6`, without a connection that the listener would have to deal with).
pub fn we_listen_on(port: u16) -> bool {
    let ours = our_sockets();
    let hex_port = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        let Ok(text) = std::fs::read_to_string(table) else {
            return false;
        };
        text.lines().skip(1).any(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            f.len() > 9
                && f[1].ends_with(&hex_port)
                && f[3] == "0A"
                && f[9].parse().is_ok_and(|inode: u64| ours.contains(&inode))
        })
    })
}

/// Waits until a socket of this process listens on `port`; panics, naming `who`, when none
/// does within `within`.
pub fn wait_until_we_listen(port: u16, who: &str, within: std::time::Duration) {
    let t = std::time::Instant::now();
    while !we_listen_on(port) {
        assert!(
            t.elapsed() < within,
            "{who} never listened on port {port} within {within:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
