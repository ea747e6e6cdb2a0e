//! The watch's cheap look: the few sysfs files whose change can make a `fail` or a counter's
//! `warn`, read in place every interval, and the probe's whole gather only when one of them
//! changed (or every [`FULL_EVERY`] samples, for what is not among them).
//!
//! Why not the whole gather every second: on the 8×IB + 2×RoCE tree the probe's gather and
//! checks read about 970 files and cost 6.4 ms a sample, 0.64 % of a core at the default
//! interval (`scripts/bench-watch`, before this file), thirteen times the bound of
//! 0.05 %. Most of those files cannot change under a running job in a way the watch acts on
//! (PCI topology, GPU list, module versions, traffic counters) or change all the time without
//! meaning a fault (data and congestion counters). The watch drains only on `fail` findings and
//! tags `warn` ones, so what it must see at once is what can make either:
//!
//! - per port: `state`, `phys_state`, `rate`, `link_layer`;
//! - per port: `counters/<c>` and `hw_counters/<c>` for every counter `c` whose threshold can
//!   fail (`fail_delta` or `fail_per_hour`: by default `link_downed`, `symbol_error`,
//!   `tx_pause_storm_error_events` where it is a hw counter): any change;
//! - per port: the same for every counter with only a warn bound (`warn_delta`,
//!   `warn_per_hour`: by default `link_error_recovery`, `port_rcv_errors` and the other IBA error
//!   counters, mlx5's retransmission and CNP counters, `tx_pause_storm_warning_events`), but as
//!   a number: a change only once it is above the value where a bound can be crossed
//!   ([`Bases`]: the prolog's value plus `warn_delta`, the sliding hour's start plus one hour of
//!   `warn_per_hour`). A counter that moves all the time under a busy job (CNPs, adaptive
//!   routing's out-of-sequence packets) so costs no whole look until it nears its bound, and one
//!   already past it (its `warn` stands) is not read until the next full sample. They are read
//!   in turns, a fifth of them each sample ([`WARN_EVERY`]), so each is seen within five
//!   samples. Cost: more files kept open and read in place. On the `ib8-healthy` fixture (8 IB
//!   and 2 RoCE ports) 124 files were read every sample; now 314 are open (about 19 more a
//!   port: the IBA error counters and mlx5's `hw_counters`) and 162 are read a sample (124 and
//!   a turn of 38, a number parsed for each of those). The figures below and in
//!   `scripts/bench-watch` were measured before this change and have not been rerun since;
//! - per netdev of an RDMA device: `mtu`, `operstate`, and mlx5's ECN switches
//!   `ecn/roce_np/enable/<prio>` and `ecn/roce_rp/enable/<prio>`;
//! - per Ethernet (RoCE) port: the GID types that read at the start, `gid_attrs/types/<i>` (a
//!   GID that goes away then fails to read: a change);
//! - where the tools' outputs are files (a fixture tree's `.fabric-check/`, `--tool-output-dir`):
//!   `dcb-pfc/<netdev>`, `mlnx_qos/<netdev>` and `ethtool-S/<netdev>`. On a real node `dcb` and
//!   `ethtool` are processes, run only with the whole look below.
//!
//! These are opened once and read with `pread` at offset 0 (sysfs regenerates an attribute on
//! every read at offset 0); a sample compares the bytes with the last read. A changed byte, a
//! read error (the device went away: `ENODEV`) or a sysfs root that is no longer the same
//! directory (a tree swapped under a fixture node) makes the sample a full one, which opens
//! the files again, and reads them, *before* its gather: a change that lands after the gather
//! read a file is a change at the next sample, not the files' first read. Everything else the probe judges (on a real node PFC and pause
//! counters through the tools, GPUs, congestion counters, a device that appeared) is judged by
//! the full sample every [`FULL_EVERY`] samples: a minute at the default interval, the
//! cadence of the "probe once a minute" it is measured against (`scripts/bench-watch`: every
//! 30 samples it cost 0.060 % of a core, every 60 about 0.045 %).

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::config::{NodeExpectations, Threshold};
use crate::probe::CounterSnapshot;
use crate::probe::gather::{Dir, ToolSource};

/// Every this many samples the watch runs the whole gather, changed or not.
pub const FULL_EVERY: u32 = 60;

/// Each counter with only a warn bound is read every this many samples (a share of them each
/// sample): its `warn` is seen within seconds, at a fifth of the reads.
pub const WARN_EVERY: u32 = 5;

/// How many bytes of each file are compared: a sysfs attribute is at most a page; a saved tool
/// output (`ethtool -S` of a NIC with many queues) a few KiB.
const READ_BYTES: usize = 64 * 1024;

/// One file read in place.
#[derive(Debug)]
struct Vital {
    file: File,
    last: Vec<u8>,
    /// A counter with only a warn bound: a change only once its value is above this (the value
    /// past which a bound can be crossed); `None`: any change.
    above: Option<u64>,
}

/// Where a counter's bounds start, for the counters with only a warn bound: the prolog's
/// snapshot (the `*_delta` bounds) and the start of the sliding hour (the `*_per_hour` bounds,
/// [`super::window::CounterRing::window_start`]).
#[derive(Debug, Clone, Copy)]
pub struct Bases<'a> {
    /// The prolog's snapshot (rebased on resets).
    pub job: &'a CounterSnapshot,
    /// The start of the per-hour bounds' window.
    pub window: &'a CounterSnapshot,
}

impl Bases<'_> {
    /// The value of counter `name` (of `counters/` or, `hw`, `hw_counters/` of the port `key`)
    /// past which one of the warn bounds of `t` can be crossed: the lowest of
    /// `job + warn_delta` and `window + warn_per_hour` (one hour's allowance, the least any
    /// window of the watch gives: the window's start only moves on, so a later window's
    /// bound is never lower). `None` when neither base has the counter (then it is not judged).
    fn warn_level(&self, key: &str, hw: bool, name: &str, t: &Threshold) -> Option<u64> {
        let value = |snap: &CounterSnapshot| {
            let pc = snap.ports.get(key)?;
            let set = if hw { &pc.hw_counters } else { &pc.counters };
            set.get(name).copied()
        };
        let job = value(self.job);
        let by_delta = job.zip(t.warn_delta).map(|(b, d)| b.saturating_add(d));
        let by_rate = value(self.window)
            .map(|w| w.max(job.unwrap_or(0)))
            .zip(t.warn_per_hour)
            // A rise of more than `r` crosses the bound: a value above `w + floor(r)`.
            .map(|(w, r)| w.saturating_add(r as u64));
        match (by_delta, by_rate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The files a sample reads in place, opened once.
#[derive(Debug)]
pub struct Vitals {
    root: PathBuf,
    root_id: (u64, u64),
    files: Vec<Vital>,
    /// The counters with only a warn bound, read in turns ([`WARN_EVERY`]).
    warn_files: Vec<Vital>,
    /// Where the next sample's turn of `warn_files` starts.
    warn_next: usize,
    buf: Vec<u8>,
}

/// Counters whose threshold can fail: a rise in them can make a `fail` at once.
fn failing_counters(expect: &NodeExpectations) -> Vec<String> {
    expect
        .thresholds
        .iter()
        .filter(|(_, t)| can_fail(t))
        .map(|(name, _)| name.clone())
        .collect()
}

fn can_fail(t: &Threshold) -> bool {
    t.fail_delta.is_some() || t.fail_per_hour.is_some()
}

/// Counters with only a warn bound, and their thresholds.
fn warning_counters(expect: &NodeExpectations) -> Vec<(&String, &Threshold)> {
    expect
        .thresholds
        .iter()
        .filter(|(_, t)| !can_fail(t) && (t.warn_delta.is_some() || t.warn_per_hour.is_some()))
        .collect()
}

/// The folder `name` below `parent`, opened relative to it, and its names (sorted).
fn listed(parent: &Dir, name: &str) -> (Dir, Vec<String>) {
    match parent.list_sub(name) {
        Ok((dir, mut names)) => {
            names.sort();
            (dir, names)
        }
        Err(_) => (parent.sub(name), Vec::new()),
    }
}

/// The files to watch: each a folder (an index into `dirs`), a name relative to it, and the
/// value above which it is a change (`None`: any change). Every folder is opened once and each
/// file relative to it (the kernel walked the whole path from the root for each before).
#[derive(Default)]
struct Watched {
    dirs: Vec<Dir>,
    files: Vec<(usize, String, Option<u64>)>,
}

impl Watched {
    fn dir(&mut self, d: Dir) -> usize {
        self.dirs.push(d);
        self.dirs.len() - 1
    }

    fn file(&mut self, dir: usize, name: impl Into<String>, above: Option<u64>) {
        self.files.push((dir, name.into(), above));
    }
}

impl Vitals {
    /// Opens the files of `sysfs` (and of `tools`, when those are saved files) that can make a
    /// `fail` under `expect`, and, given the counters' `bases`, those of the counters with only
    /// a warn bound that are still under it. `None` when the root cannot be read (the caller
    /// then takes full samples only).
    pub fn open(
        sysfs: &Path,
        tools: &ToolSource,
        expect: &NodeExpectations,
        bases: Option<Bases<'_>>,
    ) -> Option<Self> {
        let meta = std::fs::metadata(sysfs).ok()?;
        let counters = failing_counters(expect);
        let warning = if bases.is_some() {
            warning_counters(expect)
        } else {
            Vec::new()
        };
        let mut w = Watched::default();
        let tool_dirs: Vec<(&str, usize)> = match tools {
            ToolSource::Files(dir) => ["dcb-pfc", "mlnx_qos", "ethtool-S"]
                .into_iter()
                .map(|t| (t, w.dir(Dir::open(dir.join(t)))))
                .collect(),
            _ => Vec::new(),
        };
        let root = Dir::open(sysfs.to_path_buf());
        let (ib, devs) = listed(&root, "class/infiniband");
        for dev in devs {
            if expect.ignores(&dev) {
                continue;
            }
            let (ports, port_names) = listed(&ib, &format!("{dev}/ports"));
            for port in port_names {
                let p = ports.sub(&port);
                let (types, gids) = listed(&p, "gid_attrs/types");
                let p = w.dir(p);
                for f in ["state", "phys_state", "rate", "link_layer"] {
                    w.file(p, f, None);
                }
                for c in &counters {
                    w.file(p, format!("counters/{c}"), None);
                    w.file(p, format!("hw_counters/{c}"), None);
                }
                if let (Some(b), Ok(num)) = (bases, port.parse::<u32>()) {
                    let key = crate::probe::port_key(&dev, num);
                    for (c, t) in &warning {
                        for (set, hw) in [("counters", false), ("hw_counters", true)] {
                            if let Some(level) = b.warn_level(&key, hw, c, t) {
                                w.file(p, format!("{set}/{c}"), Some(level));
                            }
                        }
                    }
                }
                let types = w.dir(types);
                for i in gids {
                    w.file(types, i, None);
                }
            }
            let (net, netdevs) = listed(&ib, &format!("{dev}/device/net"));
            for nd in netdevs {
                let n = net.sub(&nd);
                let ecn: Vec<_> = ["ecn/roce_np/enable", "ecn/roce_rp/enable"]
                    .into_iter()
                    .map(|side| listed(&n, side))
                    .collect();
                let n = w.dir(n);
                for f in ["mtu", "operstate"] {
                    w.file(n, f, None);
                }
                for (side, prios) in ecn {
                    let side = w.dir(side);
                    for prio in prios {
                        w.file(side, prio, None);
                    }
                }
                for &(_, t) in &tool_dirs {
                    w.file(t, nd.clone(), None);
                }
            }
        }
        let mut v = Self {
            root: sysfs.to_path_buf(),
            root_id: (meta.dev(), meta.ino()),
            files: Vec::with_capacity(w.files.len()),
            warn_files: Vec::new(),
            warn_next: 0,
            buf: vec![0; READ_BYTES],
        };
        for (dir, name, above) in w.files {
            // A counter the driver does not have (hw_counters on IB, counters on irdma), or a
            // GID slot that is empty (it fails to read) is not there: nothing to watch.
            let Ok(file) = w.dirs[dir].open_file(&name) else {
                continue;
            };
            let Ok(n) = file.read_at(&mut v.buf, 0) else {
                continue;
            };
            // A warn-bound counter already past its level (its warning stands, or the full
            // sample every minute judges it) or that does not read as a number: not watched.
            if let Some(level) = above
                && counter_value(&v.buf[..n]).is_none_or(|now| now > level)
            {
                continue;
            }
            let vital = Vital {
                file,
                last: v.buf[..n].to_vec(),
                above,
            };
            match above {
                None => v.files.push(vital),
                Some(_) => v.warn_files.push(vital),
            }
        }
        Some(v)
    }

    /// How many files a sample reads.
    pub fn len(&self) -> usize {
        self.files.len() + self.warn_files.len()
    }

    /// How many files one sample reads: every file that can make a `fail`, and a turn of the
    /// warn-bound counters.
    pub fn read_per_sample(&self) -> usize {
        self.files.len() + self.warn_turn()
    }

    fn warn_turn(&self) -> usize {
        self.warn_files.len().div_ceil(WARN_EVERY as usize)
    }

    /// Whether no file is read (no RDMA device under the root).
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.warn_files.is_empty()
    }

    /// Takes a turn without reading, for a caller that knows no file changed since these were
    /// opened and read (the only writer to the tree, with nothing written since): the turn
    /// of the warn-bound files moves on as [`Vitals::changed`] would have moved it.
    pub fn skip_unchanged(&mut self) {
        let n = self.warn_files.len();
        if n > 0 {
            self.warn_next = (self.warn_next + self.warn_turn()) % n;
        }
    }

    /// Reads the files again; whether anything changed since the last read (a read error and
    /// a swapped root count as a change). It stops at the first change, which it keeps as the
    /// last read: the caller then looks at everything and opens the files again.
    pub fn changed(&mut self) -> bool {
        let same_root = std::fs::metadata(&self.root)
            .map(|m| (m.dev(), m.ino()) == self.root_id)
            .unwrap_or(false);
        if !same_root {
            return true;
        }
        let turn = self.warn_turn();
        let buf = &mut self.buf;
        if self.files.iter_mut().any(|v| v.changed(buf)) {
            return true;
        }
        let n = self.warn_files.len();
        for _ in 0..turn {
            let i = self.warn_next % n;
            self.warn_next = (i + 1) % n;
            if self.warn_files[i].changed(buf) {
                return true;
            }
        }
        false
    }
}

impl Vital {
    /// Reads the file again into `buf`; whether it changed (a read error counts as a change; a
    /// warn-bound counter that stays at or under its level does not). A change is kept as the
    /// last read.
    fn changed(&mut self, buf: &mut [u8]) -> bool {
        // The `pread` system call itself (std's goes through the C library's cancellable
        // wrapper, a tenth of this read's cost in the soak's profile).
        match rustix::io::pread(&self.file, &mut *buf, 0) {
            Ok(n) if buf[..n] == self.last[..] => false,
            Ok(n)
                if self.above.is_some_and(|level| {
                    counter_value(&buf[..n]).is_some_and(|now| now <= level)
                }) =>
            {
                false
            }
            Ok(n) => {
                self.last.clear();
                self.last.extend_from_slice(&buf[..n]);
                true
            }
            Err(_) => true,
        }
    }
}

/// A counter file's value (`123\n`).
fn counter_value(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn tree(scenario: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sysfs");
        fabric_testkit::sysfs::write(scenario, &root).unwrap();
        (dir, root)
    }

    fn tools(root: &Path) -> ToolSource {
        ToolSource::Files(root.join(".fabric-check"))
    }

    fn port_file(root: &Path, rel: &str) -> PathBuf {
        root.join("class/infiniband").join(rel)
    }

    #[test]
    fn a_quiet_node_reads_as_unchanged_and_a_port_going_down_reads_as_changed() {
        let (_d, root) = tree("ib8-healthy");
        let expect = Config::default().for_node("n1");
        let mut v = Vitals::open(&root, &tools(&root), &expect, None).unwrap();
        assert!(!v.is_empty());
        assert!(!v.changed(), "nothing was written");
        std::fs::write(port_file(&root, "mlx5_3/ports/1/state"), "1: DOWN\n").unwrap();
        assert!(v.changed(), "a port's state was written in place");
        assert!(!v.changed(), "the new state is the last read now");
    }

    #[test]
    fn a_rise_of_a_counter_that_can_fail_is_a_change_and_a_traffic_counter_is_not() {
        let (_d, root) = tree("ib8-healthy");
        let expect = Config::default().for_node("n1");
        let mut v = Vitals::open(&root, &tools(&root), &expect, None).unwrap();
        std::fs::write(
            port_file(&root, "mlx5_0/ports/1/counters/port_xmit_data"),
            "123456789\n",
        )
        .unwrap();
        assert!(
            !v.changed(),
            "traffic moves under every job: not a reason to look"
        );
        std::fs::write(
            port_file(&root, "mlx5_0/ports/1/counters/link_downed"),
            "1\n",
        )
        .unwrap();
        assert!(v.changed());
    }

    #[test]
    fn an_ecn_switch_a_gid_type_and_a_saved_pfc_output_are_read_in_place() {
        let (_d, root) = tree("ib8-healthy");
        let expect = Config::default().for_node("n1");
        let mut v = Vitals::open(&root, &tools(&root), &expect, None).unwrap();
        let net = root.join("class/net/ens9f0np0");
        std::fs::write(net.join("ecn/roce_np/enable/3"), "0\n").unwrap();
        assert!(v.changed(), "ECN switched off");
        let gid_types = root.join("class/infiniband/mlx5_8/ports/1/gid_attrs/types");
        let first = listed(&Dir::open(gid_types.clone()), ".")
            .1
            .into_iter()
            .next()
            .expect("a GID type");
        let was = std::fs::read_to_string(gid_types.join(&first)).unwrap();
        let other = if was.contains("v2") {
            "IB/RoCE v1\n"
        } else {
            "RoCE v2\n"
        };
        std::fs::write(gid_types.join(&first), other).unwrap();
        assert!(v.changed(), "a GID changed type");
        let pfc = root.join(".fabric-check/dcb-pfc/ens9f0np0");
        let mut text = std::fs::read_to_string(&pfc).unwrap();
        text.push('\n');
        std::fs::write(&pfc, text).unwrap();
        assert!(v.changed(), "the saved dcb output changed");
        assert!(!v.changed());
    }

    #[test]
    fn a_sysfs_root_swapped_for_another_directory_reads_as_changed() {
        let (d, root) = tree("ib8-healthy");
        let expect = Config::default().for_node("n1");
        let mut v = Vitals::open(&root, &tools(&root), &expect, None).unwrap();
        std::fs::rename(&root, d.path().join("saved")).unwrap();
        fabric_testkit::sysfs::write("ib8-healthy", &root).unwrap();
        assert!(
            v.changed(),
            "the same files, but not the tree that was opened"
        );
    }

    #[test]
    fn a_warn_bound_counter_is_a_change_only_past_the_value_where_its_bound_can_be_crossed() {
        let (d, root) = tree("ib8-healthy");
        let expect = Config::default().for_node("n1");
        let input = crate::probe::ProbeInput {
            node: "n1".into(),
            roots: crate::probe::gather::Roots::for_sysfs(root.clone(), d.path().join("p"), None),
            expect: expect.clone(),
            baseline: None,
            bom_pin: None,
            known: None,
            second_look: None,
        };
        let at_start = crate::probe::run(&input).counters;
        let bases = Bases {
            job: &at_start,
            window: &at_start,
        };
        let without = Vitals::open(&root, &tools(&root), &expect, None).unwrap();
        let mut v = Vitals::open(&root, &tools(&root), &expect, Some(bases)).unwrap();
        println!(
            "files read in place: {} → {} open, {} a sample",
            without.len(),
            v.len(),
            v.read_per_sample()
        );
        assert!(v.len() > without.len());
        // link_error_recovery: warn above 10/h.
        let counter = port_file(&root, "mlx5_4/ports/1/counters/link_error_recovery");
        let was = counter_value(std::fs::read(&counter).unwrap().as_slice()).unwrap();
        std::fs::write(&counter, format!("{}\n", was + 10)).unwrap();
        assert!(
            !(0..WARN_EVERY).any(|_| v.changed()),
            "within an hour's allowance"
        );
        std::fs::write(&counter, format!("{}\n", was + 11)).unwrap();
        assert!(
            (0..WARN_EVERY).any(|_| v.changed()),
            "past it, within a turn"
        );
    }

    #[test]
    fn devices_the_node_config_ignores_are_not_read() {
        let (_d, root) = tree("ib8-healthy");
        let all = Config::default().for_node("n1");
        let n_all = Vitals::open(&root, &tools(&root), &all, None)
            .unwrap()
            .len();
        let cfg = Config::parse(
            "[[node]]\nmatch = \"n1\"\nignore_devices = \"mlx5_0\"\n",
            Path::new("fabric-check.toml"),
        )
        .unwrap();
        let some = cfg.for_node("n1");
        assert!(
            Vitals::open(&root, &tools(&root), &some, None)
                .unwrap()
                .len()
                < n_all
        );
    }
}

#[cfg(test)]
mod sampler_tests {
    use super::FULL_EVERY;
    use crate::config::Config;
    use crate::jobstep::watch::{AfterGather, QuickSampler, Sampler};
    use crate::probe::ProbeInput;
    use crate::probe::gather::Roots;
    use fabric_proto::verdict::Severity;

    /// A healthy 8-HCA tree in `dir` and the probe's input of n1 over it (no baseline).
    fn healthy_input(dir: &std::path::Path) -> (std::path::PathBuf, ProbeInput) {
        let root = dir.join("sysfs");
        fabric_testkit::sysfs::write("ib8-healthy", &root).unwrap();
        let input = ProbeInput {
            node: "n1".into(),
            roots: Roots::for_sysfs(root.clone(), dir.join("proc"), None),
            expect: Config::default().for_node("n1"),
            baseline: None,
            bom_pin: None,
            known: None,
            second_look: None,
        };
        (root, input)
    }

    #[test]
    fn the_watch_gathers_everything_only_when_a_file_that_can_fail_changed_or_every_full_every_samples()
     {
        let dir = tempfile::tempdir().unwrap();
        let (root, input) = healthy_input(dir.path());
        let mut s = QuickSampler::new(input);
        let first = s.sample().expect("the first sample gathers everything");
        assert!(
            first
                .report
                .findings
                .iter()
                .all(|f| f.severity != Severity::Fail)
        );
        assert!(s.files_read_in_place() > 0);
        assert!(s.sample().is_none(), "nothing changed");
        std::fs::write(
            root.join("class/infiniband/mlx5_2/ports/1/state"),
            "1: DOWN\n",
        )
        .unwrap();
        let after = s.sample().expect("a port's state changed");
        assert!(
            after
                .report
                .findings
                .iter()
                .any(|f| f.severity == Severity::Fail && f.check == "ib.port_state"),
            "{:?}",
            after.report.findings
        );
        let quiet = (1..FULL_EVERY).filter(|_| s.sample().is_some()).count();
        assert_eq!(quiet, 0, "nothing changed after the port went down");
        assert!(
            s.sample().is_some(),
            "every FULL_EVERY-th sample gathers everything"
        );
        assert_eq!(s.full_samples, 3);
    }

    #[test]
    fn a_counter_raised_just_after_a_full_gather_read_it_is_seen_at_the_next_sample() {
        let dir = tempfile::tempdir().unwrap();
        let (root, mut input) = healthy_input(dir.path());
        let counter = root.join("class/infiniband/mlx5_1/ports/1/counters/link_downed");
        // The prolog's snapshot.
        input.baseline = Some(crate::probe::Baseline {
            schema: crate::probe::SCHEMA.into(),
            node: "n1".into(),
            counters: crate::probe::run(&input).counters,
            inventory: None,
        });
        let mut s = QuickSampler::new(input);
        let raise = counter.clone();
        s.after_gather = Some(AfterGather(Box::new(move || {
            let was: u64 = std::fs::read_to_string(&raise)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            std::fs::write(&raise, format!("{}\n", was + 1)).unwrap();
        })));
        let first = s.sample().expect("the first sample gathers everything");
        assert!(
            first
                .report
                .findings
                .iter()
                .all(|f| f.severity != Severity::Fail),
            "the gather read the counter before it rose: {:?}",
            first.report.findings
        );
        s.after_gather = None;
        let next = s
            .sample()
            .expect("the rise came after the gather, so the next sample sees a change");
        assert!(
            next.report
                .findings
                .iter()
                .any(|f| f.severity == Severity::Fail && f.check == "ib.counters"),
            "{:?}",
            next.report.findings
        );
    }
}
