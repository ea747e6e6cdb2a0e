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

mod data;
mod figures;
mod ring;
pub mod stats;
pub mod tcp;

#[cfg(feature = "nccl")]
pub mod nccl;
#[cfg(feature = "verbs")]
pub mod verbs;

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::rendezvous::{RendezvousConfig, RendezvousError};

pub use data::{count_wrong, fill_input, input_value};
pub use figures::{
    Attribution, LOCAL_MIN_RANKS, LOCAL_SLOW_FACTOR, SLOW_LINK_FACTOR, VERY_SLOW_LINK_FACTOR,
    attribute, attribute_tails, link_probe_s, size_figures, tail_p99,
};
pub use ring::run;
// The NCCL backend (feature `nccl`) drives the same sweep and checks the same data.
#[cfg_attr(not(feature = "nccl"), allow(unused_imports))]
pub(crate) use data::expected_coefficient;
#[cfg_attr(not(feature = "nccl"), allow(unused_imports))]
pub(crate) use ring::{Cmd, Planner, empty_report};

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

#[cfg(test)]
mod tests {
    use super::ring::*;
    use super::*;

    use std::time::{Duration, Instant};

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
