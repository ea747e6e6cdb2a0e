//! The testbed's injector: fixture trees replaced by a class's scenario, `tc tbf` in the node's
//! network namespace, the node's slurmd stopped; graded counter raises and the bandwidth a
//! congestion cap leaves.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::loads::Loads;
use super::{InjectError, Injector, burst_for, run, words};
use crate::class::FaultClass;
use crate::grade::{Size, Thresholds};
use crate::journal::{Journal, Undo};
use crate::plan::Round;

/// The testbed's injector.
#[derive(Debug)]
pub struct TestbedInjector {
    /// The testbed's state folder (`nodes/<n>/sysfs`, `bin/fabric-fixtures`).
    pub dir: PathBuf,
    /// `scripts/testbed` (for `stop|start slurmd-NODE`).
    pub script: PathBuf,
    /// The network namespace prefix (`fc`: `fc-n3`, `fc-hub`).
    pub netns_prefix: String,
    /// The tbf rate of `congestion`.
    pub congestion_rate: String,
    /// Shared loads.
    pub loads: Loads,
    /// The thresholds a graded counter fault is a multiple of.
    pub thresholds: Thresholds,
    /// How long one bandwidth measurement of a graded `congestion` round sends.
    pub measure_for: Duration,
    /// The last graded `congestion` round's measured share, percent.
    measured_pct: Option<f64>,
}

impl TestbedInjector {
    /// The testbed at `dir`, controlled by `script`. Its network namespaces are its slot's
    /// (`dir/slot`: slot 0 is `fc-*`, slot N `fcN-*`; docs/testing.md).
    pub fn new(dir: PathBuf, script: PathBuf) -> TestbedInjector {
        let slot = std::fs::read_to_string(dir.join("slot"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0);
        TestbedInjector {
            dir,
            script,
            netns_prefix: if slot == 0 {
                "fc".into()
            } else {
                format!("fc{slot}")
            },
            congestion_rate: "100mbit".into(),
            loads: Loads::default(),
            thresholds: Thresholds::default(),
            measure_for: Duration::from_millis(400),
            measured_pct: None,
        }
    }

    /// A node's address on the collective's path (`etc/collective-hosts`: `n3 10.77.2.3`).
    pub(crate) fn address(&self, node: &str) -> Result<std::net::Ipv4Addr, InjectError> {
        let path = self.dir.join("etc/collective-hosts");
        let text = std::fs::read_to_string(&path).map_err(|source| InjectError::Io {
            what: "read",
            path: path.clone(),
            source,
        })?;
        text.lines()
            .filter_map(|l| l.split_once(char::is_whitespace))
            .find(|(n, _)| *n == node)
            .and_then(|(_, a)| a.trim().parse().ok())
            .ok_or_else(|| InjectError::Unsupported {
                class: "congestion",
                place: "the testbed",
                why: format!("{} names no address for {node}", path.display()),
            })
    }

    /// The bandwidth from `from`'s namespace to `to`'s, bits per second: one TCP stream for
    /// [`TestbedInjector::measure_for`] over the testbed's own veths (loopback of no namespace
    /// but the testbed's).
    fn measure(&self, from: &str, to: &str) -> Result<f64, InjectError> {
        let ns = |n: &str| -> Result<String, InjectError> {
            Ok(format!("{}-n{}", self.netns_prefix, Self::index(n)?))
        };
        let addr = self.address(to)?;
        bandwidth_bps(&ns(from)?, &ns(to)?, addr, self.measure_for).map_err(|e| {
            InjectError::Command {
                command: format!("measure the path from {from} to {to}"),
                message: e.to_string(),
            }
        })
    }

    fn node_dir(&self, node: &str) -> PathBuf {
        self.dir.join("nodes").join(node)
    }

    /// Writes `scenario` as node's fixture tree, keeping the tree it replaces; the undo puts it
    /// back.
    pub fn write_tree(
        &mut self,
        node: &str,
        what: &str,
        scenario: &str,
        journal: &mut Journal,
    ) -> Result<u64, InjectError> {
        self.write_tree_raised(node, what, scenario, &[], journal)
    }

    /// [`TestbedInjector::write_tree`] with the scenario's counters raised by the amounts
    /// given (`fabric-fixtures --raise COUNTER=N`): a fault of graded size.
    pub fn write_tree_raised(
        &mut self,
        node: &str,
        what: &str,
        scenario: &str,
        raises: &[(String, u64)],
        journal: &mut Journal,
    ) -> Result<u64, InjectError> {
        let nd = self.node_dir(node);
        // One saved tree per change: a fault over the drill's own setup tree nests.
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let fresh = nd.join(format!(".drill-new-sysfs-{stamp}"));
        let saved = nd.join(format!(".drill-saved-sysfs-{stamp}"));
        let live = nd.join("sysfs");
        let _ = std::fs::remove_dir_all(&fresh);
        let mut argv = vec![
            self.dir.join("bin/fabric-fixtures").display().to_string(),
            scenario.to_owned(),
            fresh.display().to_string(),
        ];
        for (counter, n) in raises {
            argv.push(format!("--raise={counter}={n}"));
        }
        run(node, &argv, self.loads.command_limit())?;
        let id = journal.record(
            node,
            what,
            Undo::Rename {
                from: saved.clone(),
                to: live.clone(),
            },
        )?;
        std::fs::rename(&live, &saved).map_err(|source| InjectError::Io {
            what: "save",
            path: live.clone(),
            source,
        })?;
        std::fs::rename(&fresh, &live).map_err(|source| InjectError::Io {
            what: "install",
            path: fresh.clone(),
            source,
        })?;
        Ok(id)
    }

    /// `tc tbf` at `rate` (as tc reads it: `100mbit`, `4200kbit`) with a `burst`-byte bucket
    /// and `latency` of queue on both ends of `node`'s veth (the hub's side shapes what goes to
    /// the node, the node's `eth0` what leaves it, like a NIC that trained low); each undo,
    /// the qdisc deleted, journaled first as `what`.
    pub(crate) fn shape(
        &self,
        node: &str,
        what: &str,
        rate: &str,
        burst: &str,
        latency: &str,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        let i = Self::index(node)?;
        let p = &self.netns_prefix;
        let (ns, hub) = (format!("{p}-n{i}"), format!("{p}-hub"));
        let mut ids = Vec::new();
        for (ns, dev) in [
            (hub.as_str(), format!("h{i}")),
            (ns.as_str(), "eth0".into()),
        ] {
            ids.push(journal.record(
                node,
                what,
                Undo::Run {
                    argv: words(&[
                        "ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", &dev, "root",
                    ]),
                },
            )?);
            run(
                node,
                &words(&[
                    "ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", &dev, "root",
                    "tbf", "rate", rate, "burst", burst, "latency", latency,
                ]),
                self.loads.command_limit(),
            )?;
        }
        Ok(ids)
    }

    pub(crate) fn index(node: &str) -> Result<String, InjectError> {
        node.strip_prefix('n')
            .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_owned)
            .ok_or_else(|| InjectError::Unsupported {
                class: "congestion",
                place: "the testbed",
                why: format!("node {node} is not a testbed node n<i>"),
            })
    }
}

/// The token bucket of a graded congestion cap below 100 % (`scripts/bench-collective --curve`
/// uses the same).
pub(super) const GRADED_BURST_BYTES: u64 = 64 * 1024;

impl Injector for TestbedInjector {
    fn inject(
        &mut self,
        round: &Round,
        ckpt_dir: &Path,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        let node = round.node.as_str();
        match round.class {
            FaultClass::Clean => Ok(Vec::new()),
            FaultClass::CheckpointBurst => self.loads.checkpoint_burst(round, ckpt_dir, journal),
            FaultClass::BackgroundLoad => self.loads.background_load(round, journal),
            FaultClass::Congestion => {
                // A graded round: the share of the peers' path, measured between two of the
                // round's other nodes just before.
                let peers: Vec<&String> = round
                    .job
                    .as_ref()
                    .map(|j| j.nodes.iter().filter(|n| n.as_str() != node).collect())
                    .unwrap_or_default();
                let graded = match (round.size, peers.as_slice()) {
                    (Some(Size::BandwidthPct(pct)), [a, b, ..]) => {
                        let peer_bps = self.measure(a, b)?;
                        Some((peer_bps, pct, a.to_string()))
                    }
                    (Some(s), _) => {
                        return Err(InjectError::Unsupported {
                            class: "congestion",
                            place: "the testbed",
                            why: format!(
                                "size {s} is a share of the peers' bandwidth (50%): it needs a job with two more nodes to measure them"
                            ),
                        });
                    }
                    (None, _) => None,
                };
                let rate = match &graded {
                    Some((peer_bps, pct, _)) => {
                        format!(
                            "{}kbit",
                            ((peer_bps * f64::from(*pct) / 100.0) / 1e3).max(8.0) as u64
                        )
                    }
                    None => self.congestion_rate.clone(),
                };
                // A graded fault's cap gets a small bucket: 5 ms of tokens is megabytes at these
                // rates, and the collective's 1 MiB link probes would pass whole at the veth's
                // speed (a NIC that trained low has no burst). A control's cap (100 % and more)
                // keeps the 5 ms bucket: with a small one even a cap at the peers' own rate
                // delivered about half of it (measured 47 to 59 %), a fault and not a control.
                // The cap's measured share is kept per round either way.
                let burst = match &graded {
                    Some((_, pct, _)) if *pct < 100 => GRADED_BURST_BYTES.to_string(),
                    _ => burst_for(&rate),
                };
                let ids = self.shape(node, "congestion", &rate, &burst, "100ms", journal)?;
                if let Some((peer_bps, _, from)) = graded {
                    let capped = self.measure(&from, node)?;
                    self.measured_pct = Some(100.0 * capped / peer_bps.max(1.0));
                }
                Ok(ids)
            }
            FaultClass::NodeRemoved => {
                let script = self.script.display().to_string();
                let unit = format!("slurmd-{node}");
                let id = journal.record(
                    node,
                    "node_removed",
                    Undo::Run {
                        argv: words(&[&script, "start", &unit]),
                    },
                )?;
                run(
                    node,
                    &words(&[&script, "stop", &unit]),
                    self.loads.command_limit(),
                )?;
                Ok(vec![id])
            }
            class @ (FaultClass::PortDown
            | FaultClass::RateDowngrade
            | FaultClass::MtuDrift
            | FaultClass::PfcOff
            | FaultClass::EcnOff
            | FaultClass::RoceGidMissing
            | FaultClass::LinkFlap
            | FaultClass::ErrorCounters
            | FaultClass::PauseStorm
            | FaultClass::CnpStorm) => {
                let scenario =
                    class
                        .fixture(round.kind)
                        .ok_or_else(|| InjectError::Unsupported {
                            class: class.id(),
                            place: "the testbed",
                            why: format!("no fixture for a {} node", round.kind.id()),
                        })?;
                let raises = match round.size {
                    Some(size) => graded_raises(class, round.kind, size, &self.thresholds)?,
                    None => Vec::new(),
                };
                Ok(vec![self.write_tree_raised(
                    node,
                    class.id(),
                    scenario,
                    &raises,
                    journal,
                )?])
            }
        }
    }

    fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError> {
        self.loads.undo(node, undo)
    }

    fn take_measured_pct(&mut self) -> Option<f64> {
        self.measured_pct.take()
    }
}

/// The counters a graded round of `class` raises on a node of `kind`, and by how much: each
/// of the class's counters by `size` times its threshold's allowance (a flap count: itself).
pub fn graded_raises(
    class: FaultClass,
    kind: crate::class::NodeKind,
    size: Size,
    thresholds: &Thresholds,
) -> Result<Vec<(String, u64)>, InjectError> {
    let unsupported = |why: String| InjectError::Unsupported {
        class: class.id(),
        place: "the testbed",
        why,
    };
    class
        .check_size(size)
        .map_err(|e| unsupported(e.to_string()))?;
    let counters = class.graded_counters(kind);
    if counters.is_empty() {
        return Err(unsupported(format!(
            "it has no graded counters on a {} node",
            kind.id()
        )));
    }
    counters
        .iter()
        .map(|(name, key)| {
            let allowance = match size {
                Size::Flaps(_) => 0,
                _ => thresholds
                    .allowance(key)
                    .map_err(|e| unsupported(e.to_string()))?,
            };
            Ok(((*name).to_owned(), size.raise(allowance)))
        })
        .collect()
}

/// One TCP stream from namespace `from_ns` to `addr` in namespace `to_ns` for `dur`: the
/// receiver's bytes over the time from its first byte to the end, bits per second. Each end is
/// a thread that entered its namespace (`setns(2)` moves the calling thread only), so nothing
/// outside the testbed's namespaces is touched.
pub fn bandwidth_bps(
    from_ns: &str,
    to_ns: &str,
    addr: std::net::Ipv4Addr,
    dur: Duration,
) -> std::io::Result<f64> {
    use std::io::{Error, Read};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    fn enter(ns: &str) -> std::io::Result<()> {
        let f = std::fs::File::open(format!("/run/netns/{ns}"))?;
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(Error::from)
    }
    let (port_tx, port_rx) = std::sync::mpsc::sync_channel::<std::io::Result<u16>>(1);
    let to = to_ns.to_owned();
    let receiver = std::thread::spawn(move || -> std::io::Result<f64> {
        let bound = enter(&to).and_then(|()| TcpListener::bind((addr, 0)));
        let listener = match bound {
            Ok(l) => l,
            Err(e) => {
                let _ = port_tx.send(Err(Error::new(e.kind(), e.to_string())));
                return Err(e);
            }
        };
        let _ = port_tx.send(listener.local_addr().map(|a| a.port()));
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut s = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(Error::new(e.kind(), "no sender connected within 5 s"));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        };
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut buf = vec![0u8; 1 << 16];
        let (mut bytes, mut first) = (0u64, None);
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            first.get_or_insert_with(Instant::now);
            bytes += n as u64;
        }
        let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
        if secs <= 0.0 {
            return Err(Error::other("nothing arrived"));
        }
        Ok(bytes as f64 * 8.0 / secs)
    });
    let port = port_rx
        .recv()
        .map_err(|_| Error::other("the receiver ended before it listened"))??;
    let from = from_ns.to_owned();
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        enter(&from)?;
        let mut s =
            TcpStream::connect_timeout(&SocketAddr::from((addr, port)), Duration::from_secs(2))?;
        let buf = vec![0x5au8; 1 << 16];
        let end = Instant::now() + dur;
        while Instant::now() < end {
            s.write_all(&buf)?;
        }
        s.shutdown(std::net::Shutdown::Write)
    });
    let sent = sender
        .join()
        .map_err(|_| Error::other("the sender panicked"))?;
    let got = receiver
        .join()
        .map_err(|_| Error::other("the receiver panicked"))?;
    sent?;
    got
}
