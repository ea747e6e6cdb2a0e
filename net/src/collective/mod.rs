//! `fabric-check collective`: a ring all-reduce among a job's nodes, its figures, and the node
//! that slows it down.
//!
//! One process per node runs [`run`]. The ranks meet through the MUNGE-authenticated
//! [`crate::rendezvous`] (each learns its neighbours' data addresses and the leader's session
//! token), form a ring of TCP connections ([`tcp`]), and sweep all-reduce sizes from small to
//! large within a time budget. Rank 0 drives the sweep: before each iteration a 16-byte command
//! travels once around the ring, so every rank runs the same iterations without a shared clock.
//! At the end each rank's raw timings travel around the ring to rank 0, which computes the
//! [`Report`] and sends it around again, so every rank prints the same result.
//!
//! Figures follow nccl-tests (`doc/PERFORMANCE.md`): per-iteration time is the mean over ranks
//! (nccl-tests' default `-a 1`), `algbw = S/t`, `busbw = algbw × 2(n−1)/n`, and `#wrong` counts
//! elements that differ from the exact sum (inputs are small integers, so float sums are exact).
//! Slow-node attribution is in [`attribute`].

pub mod stats;
pub mod tcp;

#[cfg(feature = "nccl")]
pub mod nccl;
#[cfg(feature = "verbs")]
pub mod verbs;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::rendezvous::{self, RendezvousConfig, RendezvousError, Share};
use tcp::Ring;

/// The JSON schema name of a [`Report`].
pub const SCHEMA: &str = "fabric-check/collective/v1";
/// The default time budget, all in (rendezvous, sweep, result exchange).
pub const DEFAULT_BUDGET: Duration = Duration::from_millis(3000);
/// The default sweep, in bytes: 4 KiB to 32 MiB.
pub const DEFAULT_SIZES_BYTES: [u64; 5] = [4 << 10, 64 << 10, 1 << 20, 8 << 20, 32 << 20];
/// The most timed iterations per size.
pub const MAX_ITERS: u32 = 100;
/// The fewest timed iterations a size needs to be run at all.
pub const MIN_ITERS: u32 = 3;
/// Bytes of one link probe ([`tcp::Ring::probe_link`]): large enough that scheduling noise of a
/// few milliseconds on a healthy link stays small against a slow link's transfer time.
pub const PROBE_BYTES: usize = 1 << 20;
/// Link probes before the sweep, each phased ([`tcp::probe_phases`]), at most: after
/// [`MIN_PROBES`] the planner stops once the probes have taken [`PROBE_SHARE`] of the budget.
/// Each link's time is its fast tenth ([`link_probe_s`]): a probe is only ever slowed by a rank
/// losing its CPU, never sped up, so the fast end of many is the link's own rate.
pub const PROBES: u32 = 21;
/// Link probes that always run, whatever they cost.
pub const MIN_PROBES: u32 = 5;
/// The share of the budget after which no further link probe starts (past [`MIN_PROBES`]).
pub const PROBE_SHARE: f64 = 0.10;
/// Round trips of one byte per link in the latency probe ([`tcp::Ring::ping_part`]): enough
/// that p99 is not just the slowest one (linear interpolation puts it between the third and
/// the second slowest of 200).
pub const LATENCY_ROUNDS: u32 = 200;
/// A link's round trips stop after this long (in its phase), whatever the count: a lossy link,
/// whose round trips wait for retransmissions, is cut short rather than the budget. A lost
/// one-byte segment waits for TCP's loss probe or retransmission timer, at least 200 ms on
/// Linux, so the phase must hold a few of those for a lossy link's p99 to show them.
pub fn latency_phase(budget: Duration) -> Duration {
    budget.mul_f64(0.15).min(Duration::from_millis(600))
}
/// A node has a latency tail when the p99 round trip of both its ring links is this many times
/// the typical node's (and a robust outlier, and [`TAIL_FLOOR_S`] above it).
pub const TAIL_FACTOR: f64 = 5.0;
/// ... and at least this much above the typical node's p99, in seconds. Round trips are tens of
/// microseconds, but a rank that loses its CPU on a busy host adds milliseconds: with three CPU
/// hogs on the testbed's two cores, healthy nodes scored up to 4.0 ms (0.12 ms on a quiet
/// machine; `scripts/bench-collective --tails`, docs/collective.md), so 5 ms was too close. A
/// lost segment's stall is 200 ms and more.
pub const TAIL_FLOOR_S: f64 = 0.020;

/// Why a collective could not run.
#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    /// The rendezvous failed.
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    /// The ring's data path failed.
    #[error("ring: {0}")]
    Ring(String),
    /// A wait ran out.
    #[error("timed out {0}")]
    Timeout(String),
    /// Bad input.
    #[error("{0}")]
    Config(String),
    /// The backend is not usable here (no GPU, no libnccl, no RDMA device): a skip, not a fault.
    #[error("skipped: {0}")]
    Unavailable(String),
    /// A verbs call of the RDMA loopback failed (names the call and errno).
    #[cfg(feature = "verbs")]
    #[error("verbs: {0}")]
    Verbs(#[from] verbs::VerbsError),
    /// A CUDA driver call of the loopback's GPU memory failed (names the call and `CUresult`).
    #[cfg(feature = "gpudirect")]
    #[error("cuda: {0}")]
    Cuda(#[from] verbs::CudaError),
}

use fabric_proto::verdict::Verdict;

/// Figures of one size of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeFigures {
    /// Bytes per rank (`S` in nccl-tests).
    pub bytes: u64,
    /// f32 elements.
    pub count: u64,
    /// Timed iterations.
    pub iterations: u32,
    /// Mean iteration time.
    pub time_us_mean: f64,
    /// Latency percentiles over iterations.
    pub time_us_p50: f64,
    /// 95th percentile.
    pub time_us_p95: f64,
    /// 99th percentile.
    pub time_us_p99: f64,
    /// Fastest iteration.
    pub time_us_min: f64,
    /// Slowest iteration.
    pub time_us_max: f64,
    /// Coefficient of variation of iteration times.
    pub cv: f64,
    /// nccl-tests' algorithm bandwidth, GB/s.
    pub algbw_gb_s: f64,
    /// nccl-tests' bus bandwidth, GB/s.
    pub busbw_gb_s: f64,
    /// Wrong elements over all ranks and iterations (nccl-tests' `#wrong`).
    pub wrong: u64,
}

/// Figures of one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankFigures {
    /// Rank (index in the node list).
    pub rank: usize,
    /// Node name.
    pub node: String,
    /// Rate of the link from the left neighbour, GB/s (`None`: no large chunk was measured).
    pub in_link_gb_s: Option<f64>,
    /// Rate of the link to the right neighbour (as measured there), GB/s.
    pub out_link_gb_s: Option<f64>,
    /// Mean over this rank's timed iterations of its own all-reduce time, µs.
    pub time_us_mean: f64,
    /// Robust z-score of the node's best link's time per byte against its peers.
    pub robust_z: Option<f64>,
    /// The local score: how many times slower both of this node's links are than the links
    /// beside them (named above [`LOCAL_SLOW_FACTOR`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_ratio: Option<f64>,
    /// Whether this node is named as an outlier.
    pub outlier: bool,
    /// Wrong elements seen by this rank.
    pub wrong: u64,
}

/// One directed link of the ring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkFigures {
    /// Sending node.
    pub from: String,
    /// Receiving node.
    pub to: String,
    /// Measured rate, GB/s (the fast tenth of the link probes, [`link_probe_s`]; `None`: not
    /// probed).
    pub rate_gb_s: Option<f64>,
    /// Less than half the typical node's best link.
    pub slow: bool,
    /// Median one-byte round trip over the link (the latency probe), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us_p50: Option<f64>,
    /// 99th percentile of those round trips, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us_p99: Option<f64>,
    /// Round trips timed.
    #[serde(default)]
    pub rtt_samples: u32,
}

/// The result of `fabric-check collective` (schema [`SCHEMA`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// `tcp` or `nccl`.
    pub backend: String,
    /// The job id.
    pub job_id: u64,
    /// The node that printed this report.
    pub node: String,
    /// All participants, rank order.
    pub nodes: Vec<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// Wall time from start to report on this node, ms.
    pub duration_ms: u64,
    /// The budget, ms.
    pub budget_ms: u64,
    /// Per size.
    pub sizes: Vec<SizeFigures>,
    /// Per rank that took part.
    pub ranks: Vec<RankFigures>,
    /// Per ring link.
    pub links: Vec<LinkFigures>,
    /// Nodes named as slow.
    pub outliers: Vec<String>,
    /// Nodes named with a latency tail: the p99 round trip of both their ring links far above
    /// the typical node's (a `warn`, never a drain).
    #[serde(default)]
    pub tails: Vec<String>,
    /// Nodes named by the local rule alone ([`LOCAL_SLOW_FACTOR`]: both ring links about half
    /// as fast as the links beside them): a `warn`, never a drain, since a node whose ranks lost
    /// their CPU to other work can measure so too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspects: Vec<String>,
    /// Participants that never joined.
    pub missing: Vec<String>,
    /// Wrong elements in total.
    pub wrong: u64,
    /// Human-readable findings.
    pub messages: Vec<String>,
    /// Why the collective could not run, for verdict `error`.
    pub error: Option<String>,
    /// Why the backend did not run at all (no GPU, no libnccl): a skip, reported with verdict
    /// `pass` and exit 0, since the node is not at fault.
    pub skipped: Option<String>,
}

/// How to run one rank of the collective.
#[derive(Debug, Clone)]
pub struct CollectiveConfig {
    /// The rendezvous (participants, addresses, job id, MUNGE, allowed UIDs). Its `timeout` is the
    /// rendezvous share of the budget.
    pub rendezvous: RendezvousConfig,
    /// This node's rank.
    pub my_rank: usize,
    /// The budget, all in, counted from `started`.
    pub budget: Duration,
    /// When this process started (the budget counts from here).
    pub started: Instant,
    /// The sweep, bytes per rank, small to large (each rounded down to whole f32s).
    pub sizes_bytes: Vec<u64>,
    /// A node is slow when its best link is this many times slower than the median node's
    /// (and a robust outlier); see [`DEFAULT_SLOW_FACTOR`].
    pub slow_factor: f64,
    /// Whether the local rule reports suspects ([`LOCAL_SLOW_FACTOR`]). The step gate turns it
    /// off: it runs among the job's own tasks, whose CPU the job's processes share, and a rank
    /// that loses its CPU measures as a slow node does.
    pub local_rule: bool,
}

/// The default [`CollectiveConfig::slow_factor`]: a node at a third of its peers' rate. On the
/// shared two-core testbed (load average 8), healthy veth links probed within 1.7× of each other
/// and a `tc tbf` 100mbit node 20–47× slower; dedicated nodes can use 2 to catch a half-rate port.
pub const DEFAULT_SLOW_FACTOR: f64 = 3.0;

impl CollectiveConfig {
    /// A configuration with the default budget and sweep; the rendezvous gets half the budget.
    pub fn new(mut rendezvous: RendezvousConfig, my_rank: usize, started: Instant) -> Self {
        rendezvous.timeout = DEFAULT_BUDGET / 2;
        Self {
            rendezvous,
            my_rank,
            budget: DEFAULT_BUDGET,
            started,
            sizes_bytes: DEFAULT_SIZES_BYTES.to_vec(),
            slow_factor: DEFAULT_SLOW_FACTOR,
            local_rule: true,
        }
    }
}

/// Per-rank raw figures, sent to rank 0 at the end.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RankRaw {
    rank: usize,
    /// Per size index: this rank's timed iteration durations, seconds.
    iter_s: Vec<Vec<f64>>,
    /// Per size index: wrong elements.
    wrong: Vec<u64>,
    /// Seconds of each link probe (the link to the right neighbour).
    probe_s: Vec<f64>,
    /// Seconds of each round trip of the latency probe (the link to the right neighbour).
    #[serde(default)]
    rtt_s: Vec<f64>,
}

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

/// The input of rank `rank` at element `i` in iteration `iter`: a small integer, so sums of up
/// to thousands of ranks are exact in f32.
pub fn input_value(rank: usize, i: usize, iter: u32) -> f32 {
    ((((rank as u64 + u64::from(iter)) % 7) + 1) * (i as u64 % 251 + 1)) as f32
}

/// The period of the input pattern: element `i` carries `i % INPUT_PERIOD + 1` times a rank's
/// coefficient.
const INPUT_PERIOD: usize = 251;

/// `1.0, 2.0, …, 251.0`: one period of the input pattern.
fn input_pattern() -> &'static [f32; INPUT_PERIOD] {
    static PATTERN: std::sync::OnceLock<[f32; INPUT_PERIOD]> = std::sync::OnceLock::new();
    PATTERN.get_or_init(|| std::array::from_fn(|i| (i + 1) as f32))
}

fn rank_coefficient(rank: usize, iter: u32) -> f32 {
    (((rank as u64 + u64::from(iter)) % 7) + 1) as f32
}

/// Fills `out` with `count` inputs of `rank` in iteration `iter` (the values of
/// [`input_value`], period by period, with no division per element: the fill runs between
/// timed iterations on cores the other ranks may share).
pub fn fill_input(out: &mut Vec<f32>, count: usize, rank: usize, iter: u32) {
    let c = rank_coefficient(rank, iter);
    let pattern = input_pattern();
    out.clear();
    out.reserve(count);
    let mut left = count;
    while left > 0 {
        let k = left.min(INPUT_PERIOD);
        out.extend(pattern[..k].iter().map(|p| c * p));
        left -= k;
    }
}

/// How many elements of a reduced buffer differ from the exact sum `coef * (i % 251 + 1)`
/// (nccl-tests' `#wrong`).
pub fn count_wrong(data: &[f32], coef: f32) -> u64 {
    let pattern = input_pattern();
    data.chunks(INPUT_PERIOD)
        .map(|chunk| {
            let differ: u32 = chunk
                .iter()
                .zip(pattern.iter())
                .map(|(v, p)| u32::from(*v != coef * *p))
                .sum();
            u64::from(differ)
        })
        .sum()
}

pub(crate) fn expected_coefficient(ranks: &[usize], iter: u32) -> f32 {
    ranks
        .iter()
        .map(|r| ((*r as u64 + u64::from(iter)) % 7) + 1)
        .sum::<u64>() as f32
}

impl Report {
    /// The nodes it names, for a log line: `, slow: n3, latency tail: n5` (empty for none).
    pub fn named(&self) -> String {
        let mut out = String::new();
        for (what, nodes) in [
            ("slow", &self.outliers),
            ("slow (reported)", &self.suspects),
            ("latency tail", &self.tails),
        ] {
            if !nodes.is_empty() {
                out.push_str(&format!(", {what}: {}", nodes.join(",")));
            }
        }
        out
    }

    /// The condensed form the job tag keeps.
    pub fn summary(&self) -> fabric_proto::tag::CollectiveSummary {
        fabric_proto::tag::CollectiveSummary {
            verdict: Some(self.verdict),
            busbw_gb_s: self.sizes.iter().map(|s| s.busbw_gb_s).reduce(f64::max),
            small_time_us: self.sizes.first().map(|s| s.time_us_mean),
            wrong: self.wrong,
            outliers: self.outliers.clone(),
            tails: self.tails.clone(),
            missing: self.missing.clone(),
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
type Failure = Box<(CollectiveError, Vec<String>)>;

fn run_inner(cfg: &CollectiveConfig) -> Result<Report, Failure> {
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
struct Meeting {
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
fn meet(cfg: &CollectiveConfig) -> Result<Meeting, Failure> {
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
fn sweep(
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
fn pass_report(
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

fn fill_report(
    report: &mut Report,
    cfg: &CollectiveConfig,
    present: &[usize],
    missing: &[String],
    sizes: &[usize],
    all: &[RankRaw],
) {
    let nodes = &cfg.rendezvous.nodes;
    let m = present.len();
    let by_rank = |r: usize| all.iter().find(|x| x.rank == r);
    for (si, count) in sizes.iter().enumerate() {
        let iters = all.iter().map(|r| r.iter_s[si].len()).min().unwrap_or(0);
        let wrong: u64 = all.iter().map(|r| r.wrong[si]).sum();
        report.wrong += wrong;
        if iters < MIN_ITERS as usize {
            if iters > 0 {
                report.messages.push(format!(
                    "{} bytes: only {iters} timed iteration(s) fit in the budget; not reported",
                    *count as u64 * 4
                ));
            }
            continue;
        }
        // Per iteration: the mean over ranks (nccl-tests' default).
        let per_iter: Vec<f64> = (0..iters)
            .map(|i| all.iter().map(|r| r.iter_s[si][i]).sum::<f64>() / all.len() as f64)
            .collect();
        report
            .sizes
            .push(size_figures(*count as u64, &per_iter, m, wrong));
    }
    // Link rates: the link into present[p] comes from present[p-1].
    // The probe of the rank at position p-1 timed the link into position p.
    let in_rate: Vec<Option<f64>> = (0..m)
        .map(|p| present[(p + m - 1) % m])
        .map(|r| {
            by_rank(r)
                .and_then(|x| link_probe_s(&x.probe_s))
                .filter(|t| *t > 0.0)
                .map(|t| PROBE_BYTES as f64 / t / 1e9)
        })
        .collect();
    let mut attr = attribute(&in_rate, cfg.slow_factor);
    if !cfg.local_rule {
        attr.suspects.clear();
    }
    // Round trips: the link into present[p], timed by the rank at p-1.
    let in_rtt: Vec<&[f64]> = (0..m)
        .map(|p| present[(p + m - 1) % m])
        .map(|r| by_rank(r).map_or(&[][..], |x| x.rtt_s.as_slice()))
        .collect();
    let pct = |v: &[f64], q: f64| fabric_base::stats::percentile(v, q);
    let in_p99: Vec<Option<f64>> = in_rtt.iter().map(|v| tail_p99(v)).collect();
    let tails = attribute_tails(&in_p99, TAIL_FACTOR, TAIL_FLOOR_S);
    for (p, r) in present.iter().enumerate() {
        let raw = by_rank(*r);
        let times: Vec<f64> = raw
            .map(|x| x.iter_s.iter().flatten().copied().collect())
            .unwrap_or_default();
        report.ranks.push(RankFigures {
            rank: *r,
            node: nodes[*r].clone(),
            in_link_gb_s: in_rate[p],
            out_link_gb_s: in_rate[(p + 1) % m],
            time_us_mean: stats::mean(&times).unwrap_or(0.0) * 1e6,
            robust_z: attr.z.get(p).copied().flatten(),
            local_ratio: attr.local.get(p).copied().flatten(),
            outlier: attr.outliers.contains(&p),
            wrong: raw.map(|x| x.wrong.iter().sum()).unwrap_or(0),
        });
        report.links.push(LinkFigures {
            from: nodes[present[(p + m - 1) % m]].clone(),
            to: nodes[*r].clone(),
            rate_gb_s: in_rate[p],
            slow: attr.slow_links.contains(&p),
            rtt_us_p50: pct(in_rtt[p], 50.0).map(|t| t * 1e6),
            rtt_us_p99: in_p99[p].map(|t| t * 1e6),
            rtt_samples: in_rtt[p].len() as u32,
        });
    }
    report.outliers = attr
        .outliers
        .iter()
        .map(|p| nodes[present[*p]].clone())
        .collect();
    report.tails = tails.iter().map(|p| nodes[present[*p]].clone()).collect();
    report.suspects = attr
        .suspects
        .iter()
        .map(|p| nodes[present[*p]].clone())
        .collect();
    report.missing = missing.to_vec();
    let mut verdict = Verdict::Pass;
    if !attr.suspects.is_empty() {
        verdict = Verdict::Warn;
        let gb = |v: Option<f64>| v.map_or("-".to_string(), |r| format!("{r:.3}"));
        let named: Vec<String> = attr
            .suspects
            .iter()
            .map(|p| {
                format!(
                    "{} (in {} GB/s, out {} GB/s, {:.2}x slower than the links beside them)",
                    nodes[present[*p]],
                    gb(in_rate[*p]),
                    gb(in_rate[(*p + 1) % m]),
                    attr.local[*p].unwrap_or(0.0)
                )
            })
            .collect();
        report.messages.push(format!(
            "slow node(s) reported, not drained: {} (both ring links under 1/{LOCAL_SLOW_FACTOR} \
             of the links beside them)",
            named.join(", ")
        ));
    }
    if !tails.is_empty() {
        verdict = Verdict::Warn;
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |t| format!("{:.2}", t * 1e3));
        let typical = fabric_base::stats::median(&node_tail_scores(&in_p99));
        let named: Vec<String> = tails
            .iter()
            .map(|p| {
                format!(
                    "{} ({} ms in, {} ms out)",
                    nodes[present[*p]],
                    ms(in_p99[*p]),
                    ms(in_p99[(*p + 1) % m])
                )
            })
            .collect();
        report.messages.push(format!(
            "latency tail: {} (p99 round trip of both ring links against {} ms for the typical node)",
            named.join(", "),
            ms(typical)
        ));
    }
    if !missing.is_empty() {
        verdict = Verdict::Warn;
        report.messages.push(format!(
            "{} of {} participants never joined: {}",
            missing.len(),
            nodes.len(),
            missing.join(",")
        ));
    }
    let unattributed: Vec<String> = attr
        .very_slow_links
        .iter()
        .map(|p| &report.links[*p])
        .filter(|l| !report.outliers.contains(&l.from) && !report.outliers.contains(&l.to))
        .map(|l| format!("{}->{}", l.from, l.to))
        .collect();
    if !unattributed.is_empty() {
        verdict = Verdict::Warn;
        report.messages.push(format!(
            "slow links not attributable to one node: {}",
            unattributed.join(",")
        ));
    }
    if report.sizes.is_empty() {
        verdict = Verdict::Warn;
        report
            .messages
            .push("no size completed within the budget; raise --budget-ms".into());
    }
    if !report.outliers.is_empty() {
        verdict = Verdict::Fail;
        report.messages.push(format!(
            "slow node(s): {} (both ring links at under 1/{} of the typical node's best link)",
            report.outliers.join(","),
            cfg.slow_factor
        ));
    }
    if report.wrong > 0 {
        verdict = Verdict::Fail;
        report.messages.push(format!(
            "{} wrong elements in the reduced data",
            report.wrong
        ));
    }
    report.verdict = verdict;
}

/// The figures of one size from its per-iteration times (seconds, already averaged over ranks).
pub fn size_figures(count: u64, per_iter_s: &[f64], ranks: usize, wrong: u64) -> SizeFigures {
    let mean_s = stats::mean(per_iter_s).unwrap_or(0.0);
    let bytes = count * 4;
    let algbw = stats::algbw_gb_s(bytes, mean_s);
    let us = |x: Option<f64>| x.unwrap_or(0.0) * 1e6;
    SizeFigures {
        bytes,
        count,
        iterations: per_iter_s.len() as u32,
        time_us_mean: mean_s * 1e6,
        time_us_p50: us(fabric_base::stats::percentile(per_iter_s, 50.0)),
        time_us_p95: us(fabric_base::stats::percentile(per_iter_s, 95.0)),
        time_us_p99: us(fabric_base::stats::percentile(per_iter_s, 99.0)),
        time_us_min: us(fabric_base::stats::percentile(per_iter_s, 0.0)),
        time_us_max: us(fabric_base::stats::percentile(per_iter_s, 100.0)),
        cv: stats::coefficient_of_variation(per_iter_s).unwrap_or(0.0),
        algbw_gb_s: algbw,
        busbw_gb_s: stats::allreduce_busbw_gb_s(algbw, ranks),
        wrong,
    }
}

/// A link's probe time from its probes: the fast tenth (the fastest of up to 9, the second
/// fastest of 10 to 19, the third of 20 or 21). Noise on a shared host only slows a probe, so the
/// fast end measures the link; the second of eleven, not the first, so that one probe timed
/// wrong does not carry a link (docs/collective.md, "The detection curve").
pub fn link_probe_s(probe_s: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = probe_s.iter().copied().filter(|t| t.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 10).copied()
}

/// The local rule: a node is reported slow (a `warn`, [`Report::suspects`]) when both of its
/// links are this many times slower than the two links beside them (the left neighbour's link
/// in, the right neighbour's link out). A slow node's neighbours each compare one slow link
/// with another slow link, so they are never named by it. On the quiet testbed (21 probes, the
/// fast tenth) healthy nodes scored at most 1.39 in 200 clean runs, a healthy neighbour of a
/// capped node at most 1.89 (explained by the capped node, which scored higher: see
/// [`attribute`]), and a node at a measured third to half of its peers' rate 1.76 to 3.0; beside
/// three CPU hogs healthy nodes reached 2.02, hence a warning and not a drain
/// (docs/collective.md).
pub const LOCAL_SLOW_FACTOR: f64 = 1.7;
/// The fewest ranks the local rule judges ([`LOCAL_SLOW_FACTOR`]).
pub const LOCAL_MIN_RANKS: usize = 4;

/// Each ring position's local score: the smaller of (the left neighbour's incoming link ÷ its
/// own incoming link) and (the right neighbour's outgoing link ÷ its own outgoing link), rates
/// in `rate[p]` for the link into position p.
fn local_scores(rate: &[f64]) -> Vec<f64> {
    let m = rate.len();
    (0..m)
        .map(|p| {
            let (own_in, own_out) = (rate[p], rate[(p + 1) % m]);
            let (beside_in, beside_out) = (rate[(p + m - 1) % m], rate[(p + 2) % m]);
            (beside_in / own_in).min(beside_out / own_out)
        })
        .collect()
}

/// A link is marked slow when it is this many times slower than the typical node's best link.
pub const SLOW_LINK_FACTOR: f64 = 2.0;
/// A slow link that no slow node explains warns only when it is this many times slower than the
/// typical node's best link: single link rates are noisier than node scores (which take the
/// better of two links).
pub const VERY_SLOW_LINK_FACTOR: f64 = 8.0;

/// Which nodes and links of a ring are slow.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attribution {
    /// Ring positions named as slow nodes.
    pub outliers: Vec<usize>,
    /// Ring positions whose *incoming* link is slow.
    pub slow_links: Vec<usize>,
    /// Ring positions whose incoming link is [`VERY_SLOW_LINK_FACTOR`] times slow.
    pub very_slow_links: Vec<usize>,
    /// Robust z-score per position (of its best link's time per byte).
    pub z: Vec<Option<f64>>,
    /// The local score per position ([`LOCAL_SLOW_FACTOR`]).
    pub local: Vec<Option<f64>>,
    /// Positions named by the local rule and not by the global one (a `warn`).
    pub suspects: Vec<usize>,
}

/// Names slow nodes from incoming link rates per ring position (`in_rate[p]`: the link from
/// position p−1 into p).
///
/// A node's NIC (or, on the testbed, its `tc tbf`-limited veth) slows *both* of its links: the
/// one in from the left and the one out to the right. So each node is scored by its **best**
/// link's time per byte: only a node whose two links are both slow scores high, and its
/// neighbours (one slow link each) do not. Scores are compared with the robust z-score against
/// the median of the peers ([`stats::high_outliers`]: z > 3.5 and `slow_factor` times the median).
/// A node that only the local rule names ([`LOCAL_SLOW_FACTOR`]: both of its links slower than
/// the links beside them; it finds a node at half its peers' rate) is a suspect, reported with
/// a `warn` and never drained. With fewer than three ranks nothing can be attributed: both
/// nodes share both links.
pub fn attribute(in_rate: &[Option<f64>], slow_factor: f64) -> Attribution {
    let m = in_rate.len();
    if m < 3 || in_rate.iter().any(Option::is_none) {
        return Attribution {
            z: vec![None; m],
            local: vec![None; m],
            ..Attribution::default()
        };
    }
    let rate: Vec<f64> = in_rate
        .iter()
        .map(|r| r.unwrap_or(0.0).max(1e-12))
        .collect();
    let best: Vec<f64> = (0..m).map(|p| rate[p].max(rate[(p + 1) % m])).collect();
    let score: Vec<f64> = best.iter().map(|b| 1.0 / b).collect();
    let z = stats::robust_z(&score);
    let local = local_scores(&rate);
    let outliers = stats::high_outliers(&score, slow_factor);
    // In a ring of three both links beside a node are the one link opposite it: one
    // measurement, too little (2 of 12 healthy three-node jobs warned on the Slurm testbed).
    let suspects = if m < LOCAL_MIN_RANKS {
        Vec::new()
    } else {
        // A neighbour of a slow node may score above the factor when the slow node's two links
        // measure unlike (one slow link beside a slower one): a node that scores lower than a
        // neighbour over the factor is explained by it.
        let over = |p: usize| local[p] > LOCAL_SLOW_FACTOR;
        (0..m)
            .filter(|&p| {
                over(p)
                    && !outliers.contains(&p)
                    && ![(p + m - 1) % m, (p + 1) % m]
                        .iter()
                        .any(|&q| over(q) && local[q] > local[p])
            })
            .collect()
    };
    let typical = fabric_base::stats::median(&best).unwrap_or(0.0);
    let slow_links = (0..m)
        .filter(|p| rate[*p] * SLOW_LINK_FACTOR < typical)
        .collect();
    let very_slow_links = (0..m)
        .filter(|p| rate[*p] * VERY_SLOW_LINK_FACTOR < typical)
        .collect();
    Attribution {
        outliers,
        slow_links,
        very_slow_links,
        z: z.into_iter().map(Some).collect(),
        local: local.into_iter().map(Some).collect(),
        suspects,
    }
}

/// A link's p99 round trip over the [`LATENCY_ROUNDS`] it was given: rounds it did not get to
/// because its time ran out ([`latency_phase`]) count as slow as its slowest finished one. A
/// lossy link waits 200 ms and more for each lost segment, so it may finish only a few rounds;
/// the p99 of those alone would hide what cut it short. `None` for a link never timed.
pub fn tail_p99(rtt_s: &[f64]) -> Option<f64> {
    let slowest = rtt_s.iter().copied().reduce(f64::max)?;
    let mut all = rtt_s.to_vec();
    all.resize(rtt_s.len().max(LATENCY_ROUNDS as usize), slowest);
    fabric_base::stats::percentile(&all, 99.0)
}

/// Each node's tail score: the smaller of its two links' p99 round trips (the link in from the
/// left, `in_p99[p]`, and the one out to the right, `in_p99[p + 1]`), so only a node whose
/// *both* links have a tail scores high. Empty when a link has no p99.
fn node_tail_scores(in_p99: &[Option<f64>]) -> Vec<f64> {
    let m = in_p99.len();
    if in_p99.iter().any(Option::is_none) {
        return Vec::new();
    }
    let v: Vec<f64> = in_p99.iter().map(|x| x.unwrap_or(0.0)).collect();
    (0..m).map(|p| v[p].min(v[(p + 1) % m])).collect()
}

/// Names the ring positions with a latency tail from the p99 round trip of the link into each
/// position (`in_p99[p]`: from p−1 into p; `None`: too few round trips).
///
/// A node's path (its NIC, cable or switch port; on the testbed its veth, where packets are
/// dropped with `iptables`) delays its own packets: the pings it sends to the right and its
/// echoes to the left. So both of its links have the tail, and each neighbour only one. A node
/// is named when its score (the smaller of its two links' p99) is a robust outlier more than
/// `factor` times the typical node's ([`stats::high_outliers`]) and at least `floor_s` above it.
pub fn attribute_tails(in_p99: &[Option<f64>], factor: f64, floor_s: f64) -> Vec<usize> {
    let score = node_tail_scores(in_p99);
    if score.len() < 3 {
        return Vec::new();
    }
    let typical = fabric_base::stats::median(&score).unwrap_or(0.0);
    stats::high_outliers(&score, factor)
        .into_iter()
        .filter(|p| score[*p] - typical >= floor_s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[f64]) -> Vec<Option<f64>> {
        v.iter().map(|x| Some(x / 1e3)).collect()
    }

    #[test]
    fn the_node_whose_two_links_have_a_tail_is_named_and_its_neighbours_are_not() {
        // Ring of 5; position 3's path loses packets: links 2->3 (in[3]) and 3->4 (in[4]).
        let in_p99 = ms(&[0.09, 0.11, 0.08, 210.0, 190.0]);
        assert_eq!(attribute_tails(&in_p99, TAIL_FACTOR, TAIL_FLOOR_S), vec![3]);
    }

    #[test]
    fn a_link_cut_short_by_its_time_counts_its_missing_round_trips_as_slow_as_its_slowest() {
        let full: Vec<f64> = (0..LATENCY_ROUNDS).map(|_| 50e-6).collect();
        assert!((tail_p99(&full).unwrap() - 50e-6).abs() < 1e-12);
        // Two round trips, the second waited for a retransmission: the link is all tail.
        assert!((tail_p99(&[50e-6, 0.6]).unwrap() - 0.6).abs() < 1e-12);
        // Two slow ones among all 200 finished: under p99 (the third slowest).
        let mut two = full.clone();
        two[0] = 0.2;
        two[1] = 0.2;
        assert!(tail_p99(&two).unwrap() < 0.005);
        assert_eq!(tail_p99(&[]), None);
    }

    #[test]
    fn one_link_with_a_tail_names_no_node() {
        let in_p99 = ms(&[0.09, 0.11, 210.0, 0.08, 0.1]);
        assert!(attribute_tails(&in_p99, TAIL_FACTOR, TAIL_FLOOR_S).is_empty());
    }

    #[test]
    fn a_tail_of_a_few_milliseconds_is_below_the_floor() {
        // Forty times the others, but 4 ms: a busy host's scheduling, not a fabric fault.
        let in_p99 = ms(&[0.1, 0.1, 0.1, 4.0, 4.0]);
        assert!(attribute_tails(&in_p99, TAIL_FACTOR, TAIL_FLOOR_S).is_empty());
        assert_eq!(attribute_tails(&in_p99, TAIL_FACTOR, 0.0005), vec![3]);
    }

    #[test]
    fn a_link_without_enough_round_trips_or_a_ring_of_two_names_no_tail() {
        let mut in_p99 = ms(&[0.09, 0.11, 0.08, 210.0, 190.0]);
        in_p99[0] = None;
        assert!(attribute_tails(&in_p99, TAIL_FACTOR, TAIL_FLOOR_S).is_empty());
        assert!(attribute_tails(&ms(&[0.1, 200.0]), TAIL_FACTOR, TAIL_FLOOR_S).is_empty());
    }

    #[test]
    fn the_node_common_to_two_slow_links_is_the_outlier() {
        // Ring of 4; node at position 2 is slow: links 1->2 (in_rate[2]) and 2->3 (in_rate[3]).
        let a = attribute(&[Some(2.0), Some(2.2), Some(0.1), Some(0.12)], 2.0);
        assert_eq!(a.outliers, vec![2]);
        assert_eq!(a.slow_links, vec![2, 3]);
    }

    #[test]
    fn a_healthy_ring_with_noise_has_no_outlier() {
        let a = attribute(
            &[Some(2.0), Some(1.4), Some(2.6), Some(1.9), Some(2.2)],
            2.0,
        );
        assert!(a.outliers.is_empty());
        assert!(a.slow_links.is_empty());
    }

    #[test]
    fn a_node_at_half_its_peers_rate_is_named_by_the_local_rule_and_its_neighbours_are_not() {
        // Ring of 6, healthy links spread 1.3 to 1.9 GB/s (as the testbed's); the node at
        // position 3 runs at half: its links in (2 -> 3) and out (3 -> 4) measure 0.7 and 0.75.
        let rates = [1.6, 1.3, 1.9, 0.7, 0.75, 1.5];
        let a = attribute(&rates.map(Some), DEFAULT_SLOW_FACTOR);
        assert_eq!(a.suspects, vec![3], "local scores {:?}", a.local);
        assert!(a.outliers.is_empty());
        // The global rule alone (3x the typical best link) would not have named it.
        assert!(stats::high_outliers(&rates.map(|r| 1.0 / r), DEFAULT_SLOW_FACTOR).is_empty());
        let score = a.local[3].unwrap();
        assert!(score > LOCAL_SLOW_FACTOR && score < 2.6, "{score}");
    }

    #[test]
    fn a_healthy_ring_whose_links_differ_one_and_a_half_times_names_no_node_by_the_local_rule() {
        // Every node with one link at the low end and one at the high end of the testbed's
        // healthy spread, in the worst arrangement: a fast pair beside a slow pair.
        let a = attribute(
            &[1.0, 1.0, 1.55, 1.55, 1.0, 1.0].map(Some),
            DEFAULT_SLOW_FACTOR,
        );
        assert!(
            a.outliers.is_empty() && a.suspects.is_empty(),
            "{:?}",
            a.local
        );
    }

    #[test]
    fn a_neighbour_beside_a_slow_node_whose_links_measure_unlike_is_not_named() {
        // Measured on the testbed (n3 capped; its link out measured half its link in): n4's
        // local score was 1.89, n3's 2.65. Only n3 is named.
        let a = attribute(&[1.311, 3.002, 0.934, 0.495].map(Some), DEFAULT_SLOW_FACTOR);
        assert!(a.local[3].unwrap() > LOCAL_SLOW_FACTOR, "{:?}", a.local);
        assert_eq!(a.suspects, vec![2]);
    }

    #[test]
    fn a_ring_of_three_is_left_to_the_global_rule() {
        // Both links beside a node of a three-ring are the one link opposite it.
        let a = attribute(&[0.9, 2.0, 1.0].map(Some), DEFAULT_SLOW_FACTOR);
        assert!(a.local[2].unwrap() > LOCAL_SLOW_FACTOR, "{:?}", a.local);
        assert!(a.suspects.is_empty() && a.outliers.is_empty());
    }

    #[test]
    fn two_slow_neighbours_are_left_to_the_global_rule() {
        // Positions 2 and 3 both slow: the link between them is slow on both sides, so the
        // local rule cannot tell; far below the typical node, the global rule names both.
        let a = attribute(
            &[2.0, 2.0, 0.1, 0.1, 0.1, 2.0, 2.0].map(Some),
            DEFAULT_SLOW_FACTOR,
        );
        assert_eq!(a.outliers, vec![2, 3]);
        assert!(a.suspects.is_empty());
    }

    #[test]
    fn a_links_time_is_the_fast_tenth_of_its_probes() {
        assert_eq!(link_probe_s(&[]), None);
        assert_eq!(link_probe_s(&[3.0, 1.0, 2.0, 5.0, 4.0]), Some(1.0));
        let eleven: Vec<f64> = (1..=11).rev().map(f64::from).collect();
        assert_eq!(link_probe_s(&eleven), Some(2.0));
        let twenty_one: Vec<f64> = (1..=21).map(f64::from).collect();
        assert_eq!(link_probe_s(&twenty_one), Some(3.0));
        assert_eq!(link_probe_s(&[f64::NAN, 2.0]), Some(2.0));
    }

    #[test]
    fn one_slow_link_alone_is_not_blamed_on_a_node() {
        let a = attribute(&[Some(2.0), Some(0.1), Some(2.0), Some(2.0)], 2.0);
        assert!(a.outliers.is_empty());
        assert_eq!(a.slow_links, vec![1]);
        assert_eq!(a.very_slow_links, vec![1]);
    }

    #[test]
    fn two_ranks_cannot_name_a_node() {
        assert!(attribute(&[Some(2.0), Some(0.1)], 2.0).outliers.is_empty());
    }

    #[test]
    fn inputs_sum_exactly_in_f32() {
        let ranks: Vec<usize> = (0..64).collect();
        for i in [0usize, 250, 251, 1_000_003] {
            let sum: f32 = ranks.iter().map(|r| input_value(*r, i, 5)).sum();
            assert_eq!(
                sum,
                expected_coefficient(&ranks, 5) * ((i % 251 + 1) as f32)
            );
        }
    }

    #[test]
    fn the_fast_fill_gives_every_rank_its_input_values() {
        let mut out = Vec::new();
        for (rank, iter, count) in [(0, 1, 0), (3, 9, 1), (2, 4, 251), (5, 7, 1_000)] {
            fill_input(&mut out, count, rank, iter);
            let want: Vec<f32> = (0..count).map(|i| input_value(rank, i, iter)).collect();
            assert_eq!(out, want, "rank {rank} iter {iter} count {count}");
        }
    }

    #[test]
    fn count_wrong_counts_exactly_the_damaged_elements() {
        let ranks = [0usize, 1, 2];
        let coef = expected_coefficient(&ranks, 3);
        let mut sum = vec![0.0f32; 1_000];
        let mut one = Vec::new();
        for r in ranks {
            fill_input(&mut one, sum.len(), r, 3);
            sum.iter_mut().zip(&one).for_each(|(s, x)| *s += x);
        }
        assert_eq!(count_wrong(&sum, coef), 0);
        sum[0] += 1.0;
        sum[250] = f32::NAN;
        sum[251] = 0.0;
        sum[999] *= 2.0;
        assert_eq!(count_wrong(&sum, coef), 4);
    }

    /// A collective of one node on loopback, started now (for the planner).
    fn one_node_config() -> CollectiveConfig {
        use crate::rendezvous::{MapResolver, Munge, RendezvousConfig, SystemResolver};
        let map = MapResolver::<SystemResolver> {
            map: [("n1".to_string(), std::net::IpAddr::from([127, 0, 0, 1]))].into(),
            fallback: None,
        };
        let rz =
            RendezvousConfig::new(vec!["n1".into()], &map, 77, Munge::default(), vec![0]).unwrap();
        CollectiveConfig::new(rz, 0, Instant::now())
    }

    #[test]
    fn the_planner_runs_the_link_probes_then_one_latency_probe_and_neither_without_probes() {
        let cfg = one_node_config();
        let sizes = [1024usize];
        let mut tcp = Planner::new(&cfg, 1, 2);
        let first: Vec<Cmd> = (0..4).map(|_| tcp.next(&sizes)).collect();
        assert_eq!(
            first,
            vec![Cmd::Probe, Cmd::Probe, Cmd::Latency, Cmd::Warmup(0)]
        );
        let mut nccl = Planner::new(&cfg, 1, 0);
        assert_eq!(nccl.next(&sizes), Cmd::Warmup(0));
    }

    #[test]
    fn the_planner_stops_probing_after_the_first_five_once_their_share_of_the_budget_is_spent() {
        let mut cfg = one_node_config();
        cfg.budget = Duration::from_millis(20);
        let sizes = [1024usize];
        let mut planner = Planner::new(&cfg, 1, PROBES);
        std::thread::sleep(Duration::from_millis(5));
        let probes = |p: &mut Planner| {
            std::iter::from_fn(|| Some(p.next(&sizes)))
                .take_while(|c| *c == Cmd::Probe)
                .count()
        };
        // The probes' share (2 ms of 20) was spent before the first probe: only the five run.
        assert_eq!(probes(&mut planner) as u32, MIN_PROBES);
        cfg.budget = Duration::from_secs(60);
        let mut roomy = Planner::new(&cfg, 1, PROBES);
        assert_eq!(probes(&mut roomy) as u32, PROBES);
    }

    #[test]
    fn commands_round_trip_and_unknown_ones_are_errors() {
        for c in [
            Cmd::Stop,
            Cmd::Probe,
            Cmd::Latency,
            Cmd::Warmup(3),
            Cmd::Timed(4),
        ] {
            assert_eq!(Cmd::decode(c.encode()).unwrap(), c);
        }
        assert!(Cmd::decode([9, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn an_older_ranks_simultaneous_probe_is_refused_with_what_to_do() {
        let e = Cmd::decode([3, 0, 0, 0, 0, 0, 0, 0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("older fabric-check"), "{e}");
        assert!(e.contains("same fabric-check on every node"), "{e}");
    }
}
