//! The figures of a run, pure: per-size figures after nccl-tests, the link probes, and which
//! node or link slows the ring down ([`attribute`], [`attribute_tails`]).

use super::stats;
use super::{
    CollectiveConfig, LATENCY_ROUNDS, LinkFigures, MIN_ITERS, PROBE_BYTES, RankFigures, Report,
    SizeFigures, TAIL_FACTOR, TAIL_FLOOR_S,
};
use fabric_proto::verdict::Verdict;
use serde::{Deserialize, Serialize};

pub(super) fn fill_report(
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
pub(super) fn local_scores(rate: &[f64]) -> Vec<f64> {
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
/// because its time ran out ([`latency_phase`](super::latency_phase)) count as slow as its slowest finished one. A
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
pub(super) fn node_tail_scores(in_p99: &[Option<f64>]) -> Vec<f64> {
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

/// Per-rank raw figures, sent to rank 0 at the end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct RankRaw {
    pub(super) rank: usize,
    /// Per size index: this rank's timed iteration durations, seconds.
    pub(super) iter_s: Vec<Vec<f64>>,
    /// Per size index: wrong elements.
    pub(super) wrong: Vec<u64>,
    /// Seconds of each link probe (the link to the right neighbour).
    pub(super) probe_s: Vec<f64>,
    /// Seconds of each round trip of the latency probe (the link to the right neighbour).
    #[serde(default)]
    pub(super) rtt_s: Vec<f64>,
}
