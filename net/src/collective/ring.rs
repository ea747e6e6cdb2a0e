//! One rank's run over the TCP ring: the meeting through the rendezvous, the sweep rank 0 drives
//! (a command once around the ring before each iteration, the [`Planner`] of iterations within
//! the budget), and the raw timings passed around to rank 0 and the report passed back.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use serde_json::json;

use super::data::{count_wrong, expected_coefficient, fill_input};
use super::figures::RankRaw;
use super::figures::fill_report;
use super::tcp;
use super::tcp::Ring;
use super::{
    CollectiveConfig, CollectiveError, LATENCY_ROUNDS, MAX_ITERS, MIN_ITERS, MIN_PROBES,
    PROBE_BYTES, PROBE_SHARE, PROBES, Report, SCHEMA, latency_phase,
};
use crate::rendezvous::{self, RendezvousError, Share};
use fabric_proto::verdict::Verdict;

/// A sweep command: what every rank does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd {
    Stop,
    Probe,
    Latency,
    Warmup(u32),
    Timed(u32),
}

impl Cmd {
    pub(crate) fn encode(self) -> [u8; 8] {
        let (k, s) = match self {
            Cmd::Stop => (0u32, 0u32),
            // 3 was the simultaneous probe of every link, before the phased one.
            Cmd::Probe => (4, 0),
            Cmd::Latency => (5, 0),
            Cmd::Warmup(s) => (1, s),
            Cmd::Timed(s) => (2, s),
        };
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&k.to_le_bytes());
        b[4..].copy_from_slice(&s.to_le_bytes());
        b
    }
    pub(crate) fn decode(b: [u8; 8]) -> Result<Self, CollectiveError> {
        let k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let s = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        match k {
            0 => Ok(Cmd::Stop),
            1 => Ok(Cmd::Warmup(s)),
            2 => Ok(Cmd::Timed(s)),
            4 => Ok(Cmd::Probe),
            5 => Ok(Cmd::Latency),
            3 => Err(CollectiveError::Ring(
                "a rank of an older fabric-check probes every link at once (command 3): \
                 run the same fabric-check on every node of the job"
                    .into(),
            )),
            _ => Err(CollectiveError::Ring(format!("unknown command {k}"))),
        }
    }
}

/// Runs one rank of the TCP collective. Never fails: a collective that cannot run is a report
/// with verdict `error` that says why (and names missing participants).
pub fn run(cfg: &CollectiveConfig) -> Report {
    let mut report = empty_report(cfg, "tcp");
    match run_inner(cfg) {
        Ok(r) => report = r,
        Err(failure) => {
            let (e, missing) = *failure;
            report.error = Some(e.to_string());
            report.missing = missing;
        }
    }
    report.duration_ms = cfg.started.elapsed().as_millis() as u64;
    report
}

pub(crate) fn empty_report(cfg: &CollectiveConfig, backend: &str) -> Report {
    Report {
        schema: SCHEMA.into(),
        backend: backend.into(),
        job_id: cfg.rendezvous.job_id,
        node: cfg.rendezvous.nodes[cfg.my_rank.min(cfg.rendezvous.nodes.len() - 1)].clone(),
        nodes: cfg.rendezvous.nodes.clone(),
        verdict: Verdict::Error,
        duration_ms: 0,
        budget_ms: cfg.budget.as_millis() as u64,
        sizes: Vec::new(),
        ranks: Vec::new(),
        links: Vec::new(),
        outliers: Vec::new(),
        tails: Vec::new(),
        suspects: Vec::new(),
        missing: Vec::new(),
        wrong: 0,
        messages: Vec::new(),
        error: None,
        skipped: None,
    }
}

/// An error and the participants known to be missing when it happened.
pub(super) type Failure = Box<(CollectiveError, Vec<String>)>;

pub(super) fn run_inner(cfg: &CollectiveConfig) -> Result<Report, Failure> {
    let rz = &cfg.rendezvous;
    let n_all = rz.nodes.len();
    if cfg.my_rank >= n_all {
        return Err(Box::new((
            CollectiveError::Config(format!("rank {} is not a participant", cfg.my_rank)),
            vec![],
        )));
    }
    let hard_deadline = cfg.started + cfg.budget + rz.timeout + Duration::from_secs(2);
    let meeting = meet(cfg)?;
    let fail = |e: CollectiveError| meeting.fail(e);
    let mut ring = Ring::establish(
        &meeting.listener,
        meeting.right_addr,
        meeting.left_rank,
        cfg.my_rank,
        rz.job_id,
        &meeting.session,
        hard_deadline,
    )
    .map_err(fail)?;

    let sizes: Vec<usize> = cfg
        .sizes_bytes
        .iter()
        .map(|b| ((*b / 4) as usize).max(1))
        .collect();
    let raw = sweep(cfg, &meeting, &mut ring, &sizes, hard_deadline)?;
    let report_bytes = pass_report(cfg, &meeting, &mut ring, &sizes, raw, hard_deadline)?;
    let mut report: Report = serde_json::from_slice(&report_bytes).map_err(|e| {
        fail(CollectiveError::Ring(format!(
            "bad report from rank 0: {e}"
        )))
    })?;
    report.node = rz.nodes[cfg.my_rank].clone();
    Ok(report)
}

/// This rank's place in the ring, from the rendezvous.
pub(super) struct Meeting {
    /// Where this rank's left neighbour connects for the data.
    listener: TcpListener,
    /// The participants that did not join.
    missing: Vec<String>,
    /// The ranks that joined, in order: the ring.
    present: Vec<usize>,
    /// Rank 0's session, which binds the ring's connections to this collective.
    session: String,
    /// This rank's position in `present`.
    pos: usize,
    left_rank: usize,
    right_addr: SocketAddr,
}

impl Meeting {
    fn fail(&self, e: CollectiveError) -> Failure {
        Box::new((e, self.missing.clone()))
    }
}

/// Listens for the left neighbour's data connection, meets the others over the rendezvous
/// (every rank shares its data address, rank 0 also the session) and finds this rank's
/// neighbours among those that joined.
pub(super) fn meet(cfg: &CollectiveConfig) -> Result<Meeting, Failure> {
    let rz = &cfg.rendezvous;
    let n_all = rz.nodes.len();
    let my_ip: IpAddr = rz.addrs[cfg.my_rank];
    let listener = TcpListener::bind((my_ip, 0)).map_err(|e| {
        Box::new((
            CollectiveError::Ring(format!("cannot listen on {my_ip}: {e}")),
            vec![],
        ))
    })?;
    let data_addr = listener
        .local_addr()
        .map_err(|e| Box::new((CollectiveError::Ring(e.to_string()), vec![])))?;
    let mut payload = json!({ "data": data_addr.to_string() });
    if cfg.my_rank == 0 {
        let session = rendezvous::random_hex().map_err(|e| Box::new((e.into(), vec![])))?;
        payload["session"] = json!(session);
    }
    let mut rcfg = rz.clone();
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
    if present.len() < 2 {
        return Err(fail(CollectiveError::Config(format!(
            "only {} of {n_all} participants joined; a collective needs two",
            present.len()
        ))));
    }
    let session = gathered.payloads[0]
        .as_ref()
        .and_then(|p| p["session"].as_str())
        .ok_or_else(|| fail(CollectiveError::Ring("leader sent no session".into())))?
        .to_string();
    let m = present.len();
    let pos = present
        .iter()
        .position(|r| *r == cfg.my_rank)
        .ok_or_else(|| fail(CollectiveError::Ring("not among the joined ranks".into())))?;
    let right_rank = present[(pos + 1) % m];
    let left_rank = present[(pos + m - 1) % m];
    let right_addr: SocketAddr = gathered.payloads[right_rank]
        .as_ref()
        .and_then(|p| p["data"].as_str())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            fail(CollectiveError::Ring(
                "no data address for the right neighbour".into(),
            ))
        })?;
    Ok(Meeting {
        listener,
        missing,
        present,
        session,
        pos,
        left_rank,
        right_addr,
    })
}

/// The sweep: rank 0 plans each step and sends it round the ring (every rank prepares its
/// input first), then all run it; each rank keeps its own timings and wrong-element counts.
pub(super) fn sweep(
    cfg: &CollectiveConfig,
    meeting: &Meeting,
    ring: &mut Ring,
    sizes: &[usize],
    hard_deadline: Instant,
) -> Result<RankRaw, Failure> {
    let fail = |e: CollectiveError| meeting.fail(e);
    let (present, pos, m) = (&meeting.present, meeting.pos, meeting.present.len());
    let mut raw = RankRaw {
        rank: cfg.my_rank,
        iter_s: vec![Vec::new(); sizes.len()],
        wrong: vec![0; sizes.len()],
        probe_s: Vec::new(),
        rtt_s: Vec::new(),
    };
    let mut data: Vec<f32> = Vec::new();
    let mut stage: Vec<f32> = Vec::new();
    let mut planner = Planner::new(cfg, sizes.len(), PROBES);
    let mut probe_scratch: Vec<u8> = Vec::new();
    let mut iter_no: u32 = 0;
    loop {
        // Every rank prepares its input *before* passing the command on, so when the command is
        // back at rank 0 all inputs are ready and no rank's timing includes a neighbour still
        // filling its buffer.
        let mut prepare = |cmd: Cmd, data: &mut Vec<f32>| -> Result<(), Failure> {
            if let Cmd::Warmup(s) | Cmd::Timed(s) = cmd {
                let count = *sizes.get(s as usize).ok_or_else(|| {
                    fail(CollectiveError::Ring(format!(
                        "size index {s} out of range"
                    )))
                })?;
                iter_no = iter_no.wrapping_add(1);
                fill_input(data, count, cfg.my_rank, iter_no);
            }
            Ok(())
        };
        let cmd = if pos == 0 {
            let cmd = planner.next(sizes);
            prepare(cmd, &mut data)?;
            ring.send_frame(&cmd.encode(), hard_deadline)
                .map_err(fail)?;
            let back = ring.recv_frame(hard_deadline).map_err(fail)?;
            if back != cmd.encode() {
                return Err(fail(CollectiveError::Ring(
                    "command came back changed".into(),
                )));
            }
            cmd
        } else {
            let b = ring.recv_frame(hard_deadline).map_err(fail)?;
            let arr: [u8; 8] = b
                .as_slice()
                .try_into()
                .map_err(|_| fail(CollectiveError::Ring("bad command frame".into())))?;
            let cmd = Cmd::decode(arr).map_err(fail)?;
            prepare(cmd, &mut data)?;
            ring.send_frame(&arr, hard_deadline).map_err(fail)?;
            cmd
        };
        let (si, timed) = match cmd {
            Cmd::Stop => break,
            Cmd::Probe => {
                // One link at a time where its ends would otherwise also be serving another
                // link: phased (see tcp::probe_phases).
                for (send, recv) in tcp::probe_phases(pos, m) {
                    if !send && !recv {
                        continue;
                    }
                    let t = ring
                        .probe_link_part(PROBE_BYTES, &mut probe_scratch, hard_deadline, send, recv)
                        .map_err(fail)?;
                    raw.probe_s.extend(t);
                }
                continue;
            }
            Cmd::Latency => {
                // Round trips of one byte per link, phased like the probes.
                for (send, recv) in tcp::probe_phases(pos, m) {
                    if !send && !recv {
                        continue;
                    }
                    let until = Instant::now() + latency_phase(cfg.budget);
                    let t = ring
                        .ping_part(LATENCY_ROUNDS, until, hard_deadline, send, recv)
                        .map_err(fail)?;
                    raw.rtt_s.extend(t);
                }
                continue;
            }
            Cmd::Warmup(s) => (s as usize, false),
            Cmd::Timed(s) => (s as usize, true),
        };
        let t0 = Instant::now();
        ring.all_reduce(&mut data, pos, m, &mut stage, hard_deadline)
            .map_err(fail)?;
        let dt = t0.elapsed().as_secs_f64();
        if pos == 0 {
            planner.observe(si, timed, dt);
        }
        let coef = expected_coefficient(present, iter_no);
        raw.wrong[si] += count_wrong(&data, coef);
        if timed {
            raw.iter_s[si].push(dt);
        }
    }
    Ok(raw)
}

/// Gathers every rank's raw figures at rank 0 around the ring, then passes rank 0's report
/// around; each rank gets the report's bytes.
pub(super) fn pass_report(
    cfg: &CollectiveConfig,
    meeting: &Meeting,
    ring: &mut Ring,
    sizes: &[usize],
    raw: RankRaw,
    hard_deadline: Instant,
) -> Result<Vec<u8>, Failure> {
    let fail = |e: CollectiveError| meeting.fail(e);
    let (present, missing, pos, m) = (
        &meeting.present,
        &meeting.missing,
        meeting.pos,
        meeting.present.len(),
    );
    if pos == 0 {
        let mine = serde_json::to_vec(&vec![&raw])
            .map_err(|e| fail(CollectiveError::Ring(e.to_string())))?;
        ring.send_frame(&mine, hard_deadline).map_err(fail)?;
        let all: Vec<RankRaw> =
            serde_json::from_slice(&ring.recv_frame(hard_deadline).map_err(fail)?)
                .map_err(|e| fail(CollectiveError::Ring(format!("bad gathered figures: {e}"))))?;
        let mut report = empty_report(cfg, "tcp");
        fill_report(&mut report, cfg, present, missing, sizes, &all);
        let bytes =
            serde_json::to_vec(&report).map_err(|e| fail(CollectiveError::Ring(e.to_string())))?;
        ring.send_frame(&bytes, hard_deadline).map_err(fail)?;
        Ok(bytes)
    } else {
        let mut all: Vec<RankRaw> =
            serde_json::from_slice(&ring.recv_frame(hard_deadline).map_err(fail)?)
                .map_err(|e| fail(CollectiveError::Ring(format!("bad gathered figures: {e}"))))?;
        all.push(raw);
        let bytes =
            serde_json::to_vec(&all).map_err(|e| fail(CollectiveError::Ring(e.to_string())))?;
        ring.send_frame(&bytes, hard_deadline).map_err(fail)?;
        let report = ring.recv_frame(hard_deadline).map_err(fail)?;
        if pos + 1 < m {
            ring.send_frame(&report, hard_deadline).map_err(fail)?;
        }
        Ok(report)
    }
}

/// Rank 0's sweep plan: sizes small to large, each with one warm-up and timed iterations while
/// its share of the remaining budget lasts; a size whose estimated cost does not fit ends the
/// sweep.
pub(crate) struct Planner {
    soft_end: Instant,
    n_sizes: usize,
    current: Option<usize>,
    size_start: Instant,
    slice: Duration,
    timed: u32,
    last_s: f64,
    last_count: usize,
    probes_left: u32,
    probes_done: u32,
    probes_until: Instant,
    latency_left: bool,
}

impl Planner {
    pub(crate) fn new(cfg: &CollectiveConfig, n_sizes: usize, probes: u32) -> Self {
        // Keep 15% of the budget for the result exchange and output.
        let soft_end = cfg.started + cfg.budget.mul_f64(0.85);
        Self {
            probes_until: Instant::now() + cfg.budget.mul_f64(PROBE_SHARE),
            probes_done: 0,
            soft_end,
            n_sizes,
            current: None,
            size_start: Instant::now(),
            slice: Duration::ZERO,
            timed: 0,
            last_s: 0.0,
            last_count: 0,
            probes_left: probes,
            // The latency probe goes with the link probes: both are the TCP ring's.
            latency_left: probes > 0,
        }
    }

    pub(crate) fn observe(&mut self, _si: usize, timed: bool, dt: f64) {
        self.last_s = dt;
        if timed {
            self.timed += 1;
        }
    }

    pub(crate) fn next(&mut self, sizes: &[usize]) -> Cmd {
        if self.probes_left > 0
            && (self.probes_done < MIN_PROBES || Instant::now() < self.probes_until)
        {
            self.probes_left -= 1;
            self.probes_done += 1;
            return Cmd::Probe;
        }
        if self.latency_left {
            self.latency_left = false;
            return Cmd::Latency;
        }
        let now = Instant::now();
        if let Some(si) = self.current {
            let elapsed = now.duration_since(self.size_start);
            let next_cost = Duration::from_secs_f64(self.last_s);
            let more = self.timed < MAX_ITERS
                && now + next_cost < self.soft_end
                && (self.timed < MIN_ITERS || elapsed + next_cost < self.slice);
            if more {
                return Cmd::Timed(si as u32);
            }
            self.last_count = sizes[si];
        }
        let si = self.current.map_or(0, |s| s + 1);
        if si >= self.n_sizes {
            return Cmd::Stop;
        }
        let left = self.soft_end.saturating_duration_since(now);
        let estimate = if self.last_count > 0 {
            self.last_s * sizes[si] as f64 / self.last_count as f64
        } else {
            0.0
        };
        if left.is_zero() || Duration::from_secs_f64(estimate * f64::from(MIN_ITERS + 1)) > left {
            return Cmd::Stop;
        }
        self.current = Some(si);
        self.size_start = now;
        self.slice = left / (self.n_sizes - si) as u32;
        self.timed = 0;
        Cmd::Warmup(si as u32)
    }
}
