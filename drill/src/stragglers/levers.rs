//! The slowdowns of a straggler round that change the system, behind the [`Lever`] seam (the
//! round loop's tests use a fake): a node's trainer in a capped CPU cgroup ([`super::cgroup`]),
//! a node's network path shaped with `tc tbf`, and the path itself.
//!
//! **The path.** A trainer runs as the job user in the host's network namespace, while the
//! testbed's links are the veths of its per-node namespaces (`PREFIX-n<i>`, bridged in
//! `PREFIX-hub`). So the drill carries each node's transfer there: it gives the hub's bridge
//! an address of the testbed's subnet (`.254`, journaled), runs a sink on it (inside the hub's
//! namespace: it reads, and sends one byte back for every [`PathService::bytes`]), and one
//! relay per node: a loopback port in the host's namespace whose every connection is carried on
//! from inside the node's namespace to the sink. A node's transfer thus crosses its own veth,
//! which `tc tbf` shapes like the congestion class does. Traffic goes nowhere but loopback and
//! the testbed's own namespaces. Any local user can reach the relays while the drill runs (the
//! sink discards what it reads; at most 16 connections a relay): the testbed's, never a real
//! cluster's.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::cgroup::CpuCgroup;
use super::plan::Kind;
use crate::inject::{InjectError, Injector, TestbedInjector, words};
use crate::journal::{Journal, Undo};
use crate::plan::Round;

/// What a straggler round changes beyond its control files.
pub trait Lever {
    /// Caps the CPU of `pids` (`node`'s trainer) at `(quota_us, period_us)`; the journal
    /// entries to undo.
    fn cap_cpu(
        &mut self,
        node: &str,
        pids: &[u32],
        cap: (u64, u64),
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError>;
    /// Shapes `node`'s network path at `rate_bps` with a `burst_bytes` bucket.
    fn shape_path(
        &mut self,
        node: &str,
        rate_bps: u64,
        burst_bytes: u64,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError>;
    /// The loopback port of `node`'s path relay; `None` when no relay runs.
    fn path_port(&self, node: &str) -> Option<u16>;
    /// Why `kind` cannot be injected here; `None` when it can.
    fn blocked(&self, kind: Kind) -> Option<String>;
    /// Performs one undo.
    fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError>;
}

/// A [`Lever`] as an [`Injector`] that only undoes: for [`crate::inject::restore`].
#[derive(Debug)]
pub struct UndoOnly<'a, L: Lever + ?Sized>(pub &'a mut L);

impl<L: Lever + ?Sized> Injector for UndoOnly<'_, L> {
    fn inject(&mut self, r: &Round, _: &Path, _: &mut Journal) -> Result<Vec<u64>, InjectError> {
        Err(InjectError::Unsupported {
            class: r.class.id(),
            place: "a straggler round",
            why: "it only undoes".into(),
        })
    }
    fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError> {
        self.0.undo(node, undo)
    }
}

/// The bucket of a shaped path: small, so that a step's transfer cannot pass whole.
pub const PATH_BURST_BYTES: u64 = 16 * 1024;

/// The testbed's levers.
#[derive(Debug)]
pub struct TestbedLever {
    inj: TestbedInjector,
    cgroup: Result<CpuCgroup, String>,
    path: Result<PathService, String>,
    setup: Vec<u64>,
    /// `/proc` (the trainers' cgroups are read there).
    pub proc: PathBuf,
}

impl TestbedLever {
    /// The levers of the testbed at `dir` for `nodes`: the CPU controller found under
    /// `/sys/fs/cgroup`, and the path service (the hub's address journaled in `journal`) for
    /// transfers of `transfer_bytes`. What cannot be set up is said by [`Lever::blocked`].
    pub fn open(
        dir: &Path,
        nodes: &[String],
        transfer_bytes: usize,
        journal: &mut Journal,
    ) -> TestbedLever {
        let inj = TestbedInjector::new(dir.to_owned(), PathBuf::new());
        let cgroup = super::cgroup::detect(Path::new("/sys/fs/cgroup"));
        let mut setup = Vec::new();
        let path = start_path(&inj, nodes, transfer_bytes, journal, &mut setup);
        TestbedLever {
            inj,
            cgroup,
            path,
            setup,
            proc: PathBuf::from("/proc"),
        }
    }

    /// Stops the path service and undoes the set-up (the hub's address).
    pub fn close(&mut self, journal: &mut Journal) -> Result<(), InjectError> {
        if let Ok(p) = &mut self.path {
            p.stop();
        }
        let ids = std::mem::take(&mut self.setup);
        crate::inject::restore(&mut UndoOnly(self), journal, &ids)
    }

    /// How the CPU is capped here (or why it cannot be).
    pub fn cgroup(&self) -> &Result<CpuCgroup, String> {
        &self.cgroup
    }
}

fn start_path(
    inj: &TestbedInjector,
    nodes: &[String],
    bytes: usize,
    journal: &mut Journal,
    setup: &mut Vec<u64>,
) -> Result<PathService, String> {
    let first = nodes.first().ok_or("no node")?;
    let a = inj.address(first).map_err(|e| e.to_string())?;
    let [x, y, z, _] = a.octets();
    let sink = Ipv4Addr::new(x, y, z, 254);
    let p = &inj.netns_prefix;
    let hub = format!("{p}-hub");
    let cidr = format!("{sink}/24");
    let mut ns = BTreeMap::new();
    for n in nodes {
        let i = TestbedInjector::index(n).map_err(|e| e.to_string())?;
        ns.insert(n.clone(), format!("{p}-n{i}"));
    }
    let id = journal
        .record(
            first,
            "stragglers path sink",
            Undo::Run {
                argv: words(&["ip", "-n", &hub, "addr", "del", &cidr, "dev", "br0"]),
            },
        )
        .map_err(|e| e.to_string())?;
    if let Err(e) = crate::inject::run(
        first,
        &words(&["ip", "-n", &hub, "addr", "replace", &cidr, "dev", "br0"]),
        inj.loads.command_limit(),
    ) {
        // `addr replace` changes all or nothing: there is nothing to undo.
        let _ = journal.done(id);
        return Err(format!("cannot give the hub {hub} the sink's address: {e}"));
    }
    setup.push(id);
    PathService::start(&hub, sink, &ns, bytes)
        .map_err(|e| format!("cannot start the path relays through {hub}: {e}"))
}

impl Lever for TestbedLever {
    fn cap_cpu(
        &mut self,
        node: &str,
        pids: &[u32],
        cap: (u64, u64),
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        let cg = self
            .cgroup
            .as_ref()
            .map_err(|why| InjectError::Unsupported {
                class: "cpu_capped",
                place: "this host",
                why: why.clone(),
            })?;
        cg.cap(node, pids, cap, &self.proc, journal)
    }

    fn shape_path(
        &mut self,
        node: &str,
        rate_bps: u64,
        burst_bytes: u64,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        let rate = format!("{}kbit", (rate_bps / 1000).max(8));
        // A second of queue: the transfer waits in it rather than being dropped, so its time
        // is the rate's, not TCP's retransmission timers'.
        self.inj.shape(
            node,
            "path_shaped",
            &rate,
            &burst_bytes.to_string(),
            "1s",
            journal,
        )
    }

    fn path_port(&self, node: &str) -> Option<u16> {
        self.path.as_ref().ok()?.ports.get(node).copied()
    }

    fn blocked(&self, kind: Kind) -> Option<String> {
        match kind {
            Kind::CpuCapped => self.cgroup.as_ref().err().cloned(),
            Kind::PathShaped => self.path.as_ref().err().cloned(),
            _ => None,
        }
    }

    fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError> {
        self.inj.undo(node, undo)
    }
}

/// Enters the network namespace `ns` (this thread only).
fn enter(ns: &str) -> std::io::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{ns}"))?;
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)
}

/// The most connections a relay carries at once (a trainer holds one).
const MAX_CONNECTIONS: usize = 16;

/// The sink in the hub and a relay per node (see the module docs); threads of the drill,
/// ended by [`PathService::stop`] (or when the drill exits).
#[derive(Debug)]
pub struct PathService {
    /// The relays' loopback ports, by node.
    pub ports: BTreeMap<String, u16>,
    /// The sink answers one byte for every this many.
    pub bytes: usize,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl PathService {
    /// Starts the sink at `sink` inside namespace `hub` and a relay for each node of `ns`
    /// (node → its namespace).
    pub fn start(
        hub: &str,
        sink: Ipv4Addr,
        ns: &BTreeMap<String, String>,
        bytes: usize,
    ) -> std::io::Result<PathService> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<u16>>(1);
        let (hub_ns, st) = (hub.to_owned(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let l = enter(&hub_ns).and_then(|()| TcpListener::bind((sink, 0)));
            let l = match l {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let _ = tx.send(l.local_addr().map(|a| a.port()));
            accept_loop(&l, &st, |s, st| {
                std::thread::spawn(move || sink_conn(s, bytes.max(1), &st));
            });
        }));
        let sink_port = rx
            .recv()
            .map_err(|_| std::io::Error::other("the sink ended before it listened"))??;
        let to = SocketAddr::from((sink, sink_port));
        let mut ports = BTreeMap::new();
        for (node, node_ns) in ns {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            ports.insert(node.clone(), l.local_addr()?.port());
            let (st, node_ns) = (stop.clone(), node_ns.clone());
            let live = Arc::new(AtomicUsize::new(0));
            threads.push(std::thread::spawn(move || {
                accept_loop(&l, &st, |client, st| {
                    if live.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                        return;
                    }
                    live.fetch_add(1, Ordering::Relaxed);
                    let (node_ns, live) = (node_ns.clone(), live.clone());
                    std::thread::spawn(move || {
                        let _ = relay(client, &node_ns, to, &st);
                        live.fetch_sub(1, Ordering::Relaxed);
                    });
                });
            }));
        }
        Ok(PathService {
            ports,
            bytes,
            stop,
            threads,
        })
    }

    /// Stops every thread (each looks within half a second) and waits for the listeners.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for PathService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Accepts on `l` until `stop`, handing each connection to `each`.
fn accept_loop(
    l: &TcpListener,
    stop: &Arc<AtomicBool>,
    mut each: impl FnMut(TcpStream, Arc<AtomicBool>),
) {
    if l.set_nonblocking(true).is_err() {
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                if s.set_nonblocking(false).is_ok() {
                    each(s, stop.clone());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Whether a read that failed only timed out (look at `stop`, read again).
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// The sink's side of a connection: one byte back for every `bytes` read.
fn sink_conn(mut s: TcpStream, bytes: usize, stop: &AtomicBool) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.set_nodelay(true);
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0usize;
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                got += n;
                while got >= bytes {
                    got -= bytes;
                    if s.write_all(&[1]).is_err() {
                        return;
                    }
                }
            }
            Err(e) if timed_out(&e) => {}
            Err(_) => return,
        }
    }
}

/// Carries `client` (loopback, host namespace) on to `to` from inside namespace `ns`, both
/// ways, until either side closes or `stop`.
fn relay(
    client: TcpStream,
    ns: &str,
    to: SocketAddr,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<()> {
    enter(ns)?;
    let far = TcpStream::connect_timeout(&to, Duration::from_secs(2))?;
    for s in [&client, &far] {
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        s.set_nodelay(true)?;
    }
    let (c2, f2, st) = (client.try_clone()?, far.try_clone()?, stop.clone());
    let back = std::thread::spawn(move || copy(f2, c2, &st));
    copy(client, far, stop);
    let _ = back.join();
    Ok(())
}

/// Copies `from` to `to` until `from` ends, an error, or `stop`; then shuts both down.
fn copy(mut from: TcpStream, mut to: TcpStream, stop: &AtomicBool) {
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if timed_out(&e) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sink_answers_one_byte_for_every_transfer_whatever_the_reads() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            sink_conn(s, 1000, &st);
        });
        let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut ack = [0u8; 1];
        for _ in 0..3 {
            c.write_all(&[7u8; 1000]).unwrap();
            c.read_exact(&mut ack).unwrap();
        }
        // Half a transfer gets no answer.
        c.write_all(&[7u8; 500]).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(c.read_exact(&mut ack).is_err());
        stop.store(true, Ordering::Relaxed);
        drop(c);
        t.join().unwrap();
    }
}
