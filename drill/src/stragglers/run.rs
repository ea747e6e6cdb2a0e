//! The straggler drill's loop: for each round, a checked job on every drill node runs the
//! synthetic trainer ([`super::trainer`]) under `fabric-run`; once the job's first windows have
//! set its baseline, the round's slowdown goes in (through the gates); the drill reads the live
//! tag every second for `job.straggler` and `job.workload_slow`; after a bounded wait (or once
//! a fault's node is named) the job is cancelled and everything restored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fabric_proto::check_id::{JOB_STRAGGLER, JOB_WORKLOAD_SLOW};
use fabric_proto::record::{Body, Record};

use super::cgroup;
use super::levers::{Lever, PATH_BURST_BYTES, UndoOnly};
use super::plan::{CONTROL_FACTOR, Kind, Plan, Round};
use super::score::{Outcome, Sighting};
use super::trainer::{Control, Status};
use crate::cluster::Cluster;
use crate::folder::{self, RunDir};
use crate::gate::Gates;
use crate::journal::Journal;
use crate::plan::JobSpec;
use crate::run::HALT_SLICE;

/// How the straggler rounds run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where each round's folder goes (`stragglers-NNN/`, root's, with the job's `job/`).
    pub work_dir: PathBuf,
    /// The uid the jobs run as.
    pub job_uid: Option<u32>,
    /// Folder put first on the job's `PATH` (`fabric-run`, `fabric-check`).
    pub bin_dir: Option<PathBuf>,
    /// The jobs' `fabric-run` records (`<spool>`: `<spool>/<job>/<node>.jsonl`), for the
    /// slowdown each round achieved; `None`: not measured.
    pub records_dir: Option<PathBuf>,
    /// The job's nodes: every drill node.
    pub nodes: Vec<String>,
    /// The trainer's usual step, milliseconds.
    pub step_ms: u64,
    /// The CPU time of each step, milliseconds.
    pub busy_ms: u64,
    /// Bytes each step sends over its node's path.
    pub transfer_bytes: usize,
    /// Bytes a checkpoint writes.
    pub ckpt_bytes: usize,
    /// How long a checkpoint pauses, milliseconds.
    pub ckpt_ms: u64,
    /// How long the tag is watched after the injection.
    pub observe: Duration,
    /// How often the tag is read.
    pub poll: Duration,
    /// `rotating`: how long each node is the slow one.
    pub rotate_every: Duration,
    /// `checkpoint_burst`: the time between the starts of its two checkpoints.
    pub checkpoint_every: Duration,
    /// A fault round ends once its node is named (its watch window is not needed any more).
    pub stop_when_named: bool,
    /// `/proc`, where a trainer's pid is checked before its CPU is capped.
    pub proc_dir: PathBuf,
}

impl Config {
    /// Defaults for `nodes`, round folders under `work_dir`.
    pub fn new(work_dir: PathBuf, nodes: Vec<String>) -> Config {
        Config {
            work_dir,
            job_uid: None,
            bin_dir: None,
            records_dir: None,
            nodes,
            step_ms: 500,
            busy_ms: 50,
            transfer_bytes: 256 * 1024,
            ckpt_bytes: 32 << 20,
            ckpt_ms: 6000,
            observe: Duration::from_secs(45),
            poll: Duration::from_secs(1),
            rotate_every: Duration::from_secs(10),
            checkpoint_every: Duration::from_secs(20),
            stop_when_named: true,
            proc_dir: PathBuf::from("/proc"),
        }
    }
}

/// The batch script of a round's job: the trainer on every node (one task each) under
/// `fabric-run`, its steps and checkpoints recorded.
pub fn job_script(cfg: &Config, dir: &Path, job_dir: &Path, title: &str) -> String {
    let mut s = format!("#!/bin/sh\n# {title}\n");
    if let Some(b) = &cfg.bin_dir {
        s += &format!("export PATH='{}':$PATH\n", b.display());
    }
    s += &format!("cd '{}' || exit 1\n", job_dir.display());
    s += &format!(
        "exec srun --ntasks-per-node=1 fabric-run --step-regex '^step ([0-9]+)' \
         --checkpoint-regex '^checkpoint begin' '^checkpoint end' -- \
         fabric-check drill-trainer --control '{}' --out '{}' --step-ms {} --busy-ms {} \
         --transfer-bytes {} --ckpt-bytes {} --ckpt-ms {} --max-s {}\n",
        dir.display(),
        job_dir.display(),
        cfg.step_ms,
        cfg.busy_ms,
        cfg.transfer_bytes,
        cfg.ckpt_bytes,
        cfg.ckpt_ms,
        // Bounded whatever happens to the drill: the job's start, the baseline, the watch.
        (cfg.observe.as_secs() + 150).max(60),
    );
    s
}

/// The rate that makes a step `factor` times as long through its transfer: the step took
/// `base_ms` with a transfer of `transfer_ms`, so the transfer must take `transfer_ms +
/// (factor - 1) * base_ms`; the bucket's bytes pass at once, the rest at the rate. Bits per
/// second.
pub fn rate_for(bytes: usize, burst: u64, transfer_ms: f64, base_ms: f64, factor: f64) -> u64 {
    let secs = (transfer_ms + (factor - 1.0) * base_ms).max(1.0) / 1000.0;
    let shaped = (bytes as u64).saturating_sub(burst).max(1) as f64;
    (shaped * 8.0 / secs).round() as u64
}

/// The straggler drill's round loop.
pub struct Drill<'a> {
    /// The cluster.
    pub cluster: &'a mut dyn Cluster,
    /// CPU caps, shaped paths, the path relays.
    pub lever: &'a mut dyn Lever,
    /// The restore journal.
    pub journal: &'a mut Journal,
    /// What the drill may touch.
    pub gates: &'a mut Gates,
    /// How.
    pub cfg: Config,
}

impl std::fmt::Debug for Drill<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drill").field("cfg", &self.cfg).finish()
    }
}

/// What a round keeps while it runs.
#[derive(Debug, Default)]
struct Seen {
    first: BTreeMap<(String, String), u64>,
}

impl Seen {
    fn into_sightings(self) -> Vec<Sighting> {
        let mut v: Vec<Sighting> = self
            .first
            .into_iter()
            .map(|((node, check), at_ms)| Sighting { node, check, at_ms })
            .collect();
        v.sort_by_key(|s| s.at_ms);
        v
    }

    fn named(&self, node: &str) -> bool {
        self.first
            .contains_key(&(node.to_owned(), JOB_STRAGGLER.to_owned()))
    }
}

impl Drill<'_> {
    /// Runs every round; `each` sees each outcome as it comes. Stops at the gates' first
    /// refusal (or a signal): that round is not among the outcomes.
    pub fn run(&mut self, plan: &Plan, mut each: impl FnMut(&Outcome)) -> Vec<Outcome> {
        let mut out = Vec::new();
        if self.gates.start(self.cluster).is_err() {
            return out;
        }
        for r in &plan.rounds {
            if self.gates.halted() {
                break;
            }
            let o = self.round(r);
            if self.gates.stopped().is_some() {
                break;
            }
            each(&o);
            out.push(o);
        }
        let _ = self.journal.compact();
        out
    }

    /// Waits `d` in slices, cut short by a signal; whether it was.
    fn pause(&mut self, d: Duration) -> bool {
        let until = self.cluster.now_ms().saturating_add(d.as_millis() as u64);
        loop {
            if self.gates.halted() {
                return true;
            }
            let left = until.saturating_sub(self.cluster.now_ms());
            if left == 0 {
                return false;
            }
            self.cluster
                .sleep(Duration::from_millis(left).min(HALT_SLICE));
        }
    }

    /// Reads the live tag once: every straggler event not seen before is noted now.
    fn look(&mut self, id: u32, seen: &mut Seen) {
        let Ok(Some(tag)) = self.cluster.live_tag(id) else {
            return;
        };
        let now = self.cluster.now_ms();
        for row in &tag.during {
            for ev in &row.watch {
                if ev.check == JOB_STRAGGLER || ev.check == JOB_WORKLOAD_SLOW {
                    seen.first
                        .entry((row.node.clone(), ev.check.clone()))
                        .or_insert(now);
                }
            }
        }
    }

    /// Waits until the job runs; when it did (Unix ms).
    fn wait_running(&mut self, id: u32) -> Result<u64, String> {
        let until = self.cluster.now_ms() + 60_000;
        while self.cluster.now_ms() < until {
            match self.cluster.queue_state(id) {
                Ok(Some(s)) if s == "RUNNING" => return Ok(self.cluster.now_ms()),
                Ok(None) => return Err(format!("job {id} ended before it ran")),
                _ => {}
            }
            if self.pause(Duration::from_millis(250)) {
                return Err(format!("stopped before job {id} ran"));
            }
        }
        Err(format!("job {id} did not start within 60 s"))
    }

    /// Waits until `at` (Unix ms), reading the tag meanwhile; false when stopped or the job
    /// ended.
    fn watch_until(&mut self, id: u32, at: u64, seen: &mut Seen) -> Result<(), String> {
        while self.cluster.now_ms() < at {
            self.look(id, seen);
            if let Ok(None) = self.cluster.queue_state(id) {
                return Err(format!("job {id} ended before its slowdown went in"));
            }
            let left = at.saturating_sub(self.cluster.now_ms());
            if self.pause(self.cfg.poll.min(Duration::from_millis(left))) {
                return Err("stopped before its slowdown went in".into());
            }
        }
        Ok(())
    }

    /// The trainers' statuses as they stand.
    fn statuses(&self, dir: &RunDir) -> BTreeMap<String, Status> {
        self.cfg
            .nodes
            .iter()
            .filter_map(|n| {
                let text = dir.read_job_file(&format!("trainer-{n}"), 4096)?;
                Some((n.clone(), Status::parse(&text)?))
            })
            .collect()
    }

    /// Every trainer's status, once each has one (at most 30 s after the job ran).
    fn trainers(
        &mut self,
        dir: &RunDir,
        id: u32,
        seen: &mut Seen,
    ) -> Result<BTreeMap<String, Status>, String> {
        let until = self.cluster.now_ms() + 30_000;
        loop {
            let got = self.statuses(dir);
            if got.len() == self.cfg.nodes.len() {
                return Ok(got);
            }
            if self.cluster.now_ms() >= until {
                let missing: Vec<&str> = self
                    .cfg
                    .nodes
                    .iter()
                    .filter(|n| !got.contains_key(*n))
                    .map(String::as_str)
                    .collect();
                return Err(format!(
                    "no trainer started on {} within 30 s of job {id}",
                    missing.join(",")
                ));
            }
            self.look(id, seen);
            if self.pause(Duration::from_millis(500)) {
                return Err("stopped before the trainers started".into());
            }
        }
    }

    /// Writes node's control file.
    fn control(&self, dir: &RunDir, node: &str, c: &Control) -> Result<(), String> {
        dir.replace_file(&format!("ctl-{node}"), &c.render())
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// A trainer's pid, checked: its process is the job user's and runs the trainer.
    fn trainer_pid(&self, node: &str, st: &Status) -> Result<u32, String> {
        let p = self.cfg.proc_dir.join(st.pid.to_string());
        let status = std::fs::read_to_string(p.join("status"))
            .map_err(|e| format!("{node}'s trainer (pid {}) is gone: {e}", st.pid))?;
        if let Some(uid) = self.cfg.job_uid {
            let uids: Vec<&str> = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|l| l.split_whitespace().collect())
                .unwrap_or_default();
            let want = uid.to_string();
            if uids.len() != 4 || uids.iter().any(|u| *u != want) {
                return Err(format!(
                    "pid {} that {node}'s trainer names is not the job user's: its CPU is not capped",
                    st.pid
                ));
            }
        }
        let cmdline = std::fs::read(p.join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains("drill-trainer") {
            return Err(format!(
                "pid {} that {node}'s trainer names does not run the trainer: its CPU is not capped",
                st.pid
            ));
        }
        Ok(st.pid)
    }

    /// Puts the round's slowdown in; the journal entries to undo and how it went in.
    fn inject(
        &mut self,
        r: &Round,
        dir: &RunDir,
        st: &BTreeMap<String, Status>,
    ) -> Result<(Vec<u64>, Option<String>), String> {
        let factor = f64::from(r.factor_permille) / 1000.0;
        let slow = Control {
            factor,
            ..Control::default()
        };
        let status = |n: &str| st.get(n).cloned().ok_or(format!("no trainer on {n}"));
        match r.kind {
            Kind::Clean => Ok((Vec::new(), None)),
            Kind::StepSleep | Kind::Rotating => {
                self.control(dir, &r.node, &slow)?;
                Ok((Vec::new(), None))
            }
            Kind::AllSlow => {
                for n in self.cfg.nodes.clone() {
                    self.control(dir, &n, &slow)?;
                }
                Ok((Vec::new(), None))
            }
            Kind::CheckpointBurst => {
                for n in self.cfg.nodes.clone() {
                    self.control(
                        dir,
                        &n,
                        &Control {
                            checkpoint: 1,
                            ..Control::default()
                        },
                    )?;
                }
                Ok((Vec::new(), None))
            }
            Kind::CpuCapped => {
                let s = status(&r.node)?;
                let pid = self.trainer_pid(&r.node, &s)?;
                let cap = cgroup::quota_for(s.busy_cpu_ms, s.busy_wall_ms, s.base_ms, factor)
                    .ok_or_else(|| format!("no CPU cap makes {factor}x of {s:?}"))?;
                let ids = self
                    .lever
                    .cap_cpu(&r.node, &[pid], cap, self.journal)
                    .map_err(|e| e.to_string())?;
                Ok((
                    ids,
                    Some(format!(
                        "quota {}/{} us, step {:.0} ms, busy {:.0} ms cpu",
                        cap.0, cap.1, s.base_ms, s.busy_cpu_ms
                    )),
                ))
            }
            Kind::PathShaped => {
                let s = status(&r.node)?;
                if s.transfer_ms <= 0.0 {
                    return Err(format!(
                        "{}'s trainer made no transfer over its path (no relay reached)",
                        r.node
                    ));
                }
                let rate = rate_for(
                    self.cfg.transfer_bytes,
                    PATH_BURST_BYTES,
                    s.transfer_ms,
                    s.base_ms,
                    factor,
                );
                let ids = self
                    .lever
                    .shape_path(&r.node, rate, PATH_BURST_BYTES, self.journal)
                    .map_err(|e| e.to_string())?;
                Ok((
                    ids,
                    Some(format!(
                        "tbf {:.2} Mbit/s, step {:.0} ms, transfer {:.1} ms",
                        rate as f64 / 1e6,
                        s.base_ms,
                        s.transfer_ms
                    )),
                ))
            }
        }
    }

    /// Runs one round.
    pub fn round(&mut self, r: &Round) -> Outcome {
        let mut out = Outcome {
            round: r.clone(),
            job: None,
            injected_at_ms: None,
            seen: Vec::new(),
            achieved: None,
            how: None,
            error: None,
        };
        if let Some(why) = self.lever.blocked(r.kind) {
            out.error = Some(format!("blocked: {why}"));
            return out;
        }
        let dir = match self.prepare(r) {
            Ok(d) => d,
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        };
        let script = match dir.write_script(
            "job.sh",
            &job_script(
                &self.cfg,
                &dir.path,
                &dir.job_dir,
                &format!(
                    "fabric-check drill straggler round {}: {} on {}",
                    r.index,
                    r.kind.id(),
                    r.node
                ),
            ),
        ) {
            Ok(s) => s,
            Err(e) => {
                out.error = Some(e.to_string());
                return out;
            }
        };
        let job = JobSpec {
            nodes: self.cfg.nodes.clone(),
            full: false,
            fabric_run: true,
            spares: 0,
        };
        let id = match self.gates.submit(self.cluster, &script, &job, None) {
            Ok(id) => id,
            Err(e) => {
                out.error = Some(e.to_string());
                return out;
            }
        };
        out.job = Some(id);
        let mut seen = Seen::default();
        let mut ids = Vec::new();
        let result = self.drive(r, &dir, id, &mut seen, &mut ids, &mut out);
        if let Err(e) = result {
            out.error = Some(e);
        }
        // The records go with the job (its epilog delivers and deletes them): read first.
        if let (true, Some(at), Some(records)) = (
            r.kind.is_fault(),
            out.injected_at_ms,
            self.cfg.records_dir.as_deref(),
        ) {
            let now = self.cluster.now_ms();
            out.achieved = achieved(records, id, &r.node, &self.cfg.nodes, at + 10_000, now);
        }
        let _ = self.cluster.cancel(id);
        if let Err(e) = crate::inject::restore(&mut UndoOnly(&mut *self.lever), self.journal, &ids)
        {
            out.error.get_or_insert_with(|| format!("restore: {e}"));
        }
        // The job's nodes are handed back before the next round.
        let until = self.cluster.now_ms() + 60_000;
        while self.cluster.now_ms() < until {
            if let Ok(None) = self.cluster.queue_state(id) {
                break;
            }
            if self.pause(Duration::from_millis(500)) {
                break;
            }
        }
        out.seen = seen.into_sightings();
        out
    }

    /// The round's folder with every node's control file (usual steps) and path port.
    fn prepare(&mut self, r: &Round) -> Result<RunDir, String> {
        let dir = folder::prepare(
            &self.cfg.work_dir,
            &format!("stragglers-{:03}", r.index),
            self.cfg.job_uid,
        )
        .map_err(|e| e.to_string())?;
        for n in &self.cfg.nodes {
            self.control(&dir, n, &Control::default())?;
            if let Some(port) = self.lever.path_port(n) {
                dir.write_script(&format!("path-{n}"), &format!("{port}\n"))
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(dir)
    }

    /// From the job's start to the end of its watch window.
    fn drive(
        &mut self,
        r: &Round,
        dir: &RunDir,
        id: u32,
        seen: &mut Seen,
        ids: &mut Vec<u64>,
        out: &mut Outcome,
    ) -> Result<(), String> {
        let start = self.wait_running(id)?;
        let mut st = self.trainers(dir, id, seen)?;
        self.watch_until(id, start + r.inject_after_ms, seen)?;
        // The trainers' usual times as they stand now, after the job's first windows.
        st.extend(self.statuses(dir));
        self.gates
            .before_change(self.cluster, &self.cfg.nodes.clone())
            .map_err(|e| e.to_string())?;
        let (done, how) = self.inject(r, dir, &st)?;
        ids.extend(done);
        out.how = how;
        let at = self.cluster.now_ms();
        out.injected_at_ms = Some(at);
        let deadline = at + self.cfg.observe.as_millis() as u64;
        let rotate = self.cfg.rotate_every.as_millis() as u64;
        let mut slow_at = self
            .cfg
            .nodes
            .iter()
            .position(|n| *n == r.node)
            .unwrap_or(0);
        let mut next_rotate = at + rotate;
        let mut checkpoints = 1u32;
        let next_checkpoint = at + self.cfg.checkpoint_every.as_millis() as u64;
        loop {
            self.look(id, seen);
            if r.kind.is_fault() && self.cfg.stop_when_named && seen.named(&r.node) {
                return Ok(());
            }
            let now = self.cluster.now_ms();
            if now >= deadline {
                return Ok(());
            }
            if let Ok(None) = self.cluster.queue_state(id) {
                return Err(format!("job {id} ended before its watch window did"));
            }
            if r.kind == Kind::Rotating && now >= next_rotate {
                let n = self.cfg.nodes.len();
                self.control(dir, &self.cfg.nodes[slow_at].clone(), &Control::default())?;
                slow_at = (slow_at + 1) % n;
                let f = f64::from(CONTROL_FACTOR) / 1000.0;
                self.control(
                    dir,
                    &self.cfg.nodes[slow_at].clone(),
                    &Control {
                        factor: f,
                        ..Control::default()
                    },
                )?;
                next_rotate += rotate;
            }
            if r.kind == Kind::CheckpointBurst && checkpoints < 2 && now >= next_checkpoint {
                checkpoints += 1;
                for n in self.cfg.nodes.clone() {
                    self.control(
                        dir,
                        &n,
                        &Control {
                            checkpoint: checkpoints,
                            ..Control::default()
                        },
                    )?;
                }
            }
            if self.pause(self.cfg.poll) {
                return Err("stopped while its slowdown was on".into());
            }
        }
    }
}

/// The step times (seconds) that `node`'s records hold for steps that ended in `[from_ms,
/// to_ms]`: the job user's file `<records>/<job>/<node>.jsonl`, opened without following a
/// link, at most 16 MiB read.
pub fn step_times(records: &Path, job: u32, node: &str, from_ms: u64, to_ms: u64) -> Vec<f64> {
    use rustix::fs::{FileType, Mode, OFlags, fstat, openat};
    use std::io::Read;
    let open = |dir: &std::os::fd::OwnedFd, name: &str, flags: OFlags| {
        openat(
            dir,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    };
    let Ok(root) = openat(
        rustix::fs::CWD,
        records,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Vec::new();
    };
    let Some(jd) = open(&root, &job.to_string(), OFlags::RDONLY | OFlags::DIRECTORY) else {
        return Vec::new();
    };
    let Some(fd) = open(
        &jd,
        &format!("{node}.jsonl"),
        OFlags::RDONLY | OFlags::NONBLOCK,
    ) else {
        return Vec::new();
    };
    if fstat(&fd).map(|s| FileType::from_raw_mode(s.st_mode)) != Ok(FileType::RegularFile) {
        return Vec::new();
    }
    let mut text = String::new();
    if std::fs::File::from(fd)
        .take(16 << 20)
        .read_to_string(&mut text)
        .is_err()
    {
        return Vec::new();
    }
    text.lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter_map(|rec| {
            let end = (rec.meta.ts * 1000.0) as u64;
            match rec.body {
                Body::Step {
                    duration_s: Some(d),
                    ..
                } if (from_ms..=to_ms).contains(&end) && d.is_finite() && d > 0.0 => Some(d),
                _ => None,
            }
        })
        .collect()
}

/// The slowdown a round achieved: `node`'s median step over the median of the other nodes'
/// medians, over the steps that ended in `[from_ms, to_ms]`.
pub fn achieved(
    records: &Path,
    job: u32,
    node: &str,
    nodes: &[String],
    from_ms: u64,
    to_ms: u64,
) -> Option<f64> {
    use fabric_base::stats::median;
    let mine = median(&step_times(records, job, node, from_ms, to_ms))?;
    let others: Vec<f64> = nodes
        .iter()
        .filter(|n| *n != node)
        .filter_map(|n| median(&step_times(records, job, n, from_ms, to_ms)))
        .collect();
    let theirs = median(&others)?;
    (theirs > 0.0).then(|| mine / theirs)
}
