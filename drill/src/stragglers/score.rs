//! What a straggler drill measured, pure: the rounds' outcomes in, recall by class and size, the
//! time to name, what the controls and the clean jobs were wrongly told, the table and the
//! benchmark's line out.
//!
//! - A fault round is **named** when the live tag's `during` row of its slowed node got a
//!   `job.straggler` at or after the injection (one before it is a false flag, not a hit).
//!   Its **time to name** runs from the injection to the drill's first poll that saw it.
//! - `recall_at_125pct`: named / fault rounds at 1.25× or more (rounds whose slowdown could
//!   not go in are errors, not misses).
//! - `workload_blamed_on_node`: control rounds (`all_slow`, `rotating`, `checkpoint_burst`) in
//!   which any node got a `job.straggler`, whenever in the job.
//! - `false_flags_per_100_clean_jobs`: clean rounds with any `job.straggler` or
//!   `job.workload_slow`, per 100 clean rounds.

use std::collections::BTreeMap;

use fabric_base::stats::{median, percentile};
use fabric_proto::check_id::{JOB_STRAGGLER, JOB_WORKLOAD_SLOW};
use serde::{Deserialize, Serialize};

use super::plan::{Kind, Round, factor_text};

/// A straggler event the drill saw in the job's live tag: first seen at `at_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sighting {
    /// The node whose `during` row holds it.
    pub node: String,
    /// `job.straggler` or `job.workload_slow`.
    pub check: String,
    /// Unix milliseconds of the drill's poll that first saw it.
    pub at_ms: u64,
}

/// What one round did and saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The round.
    pub round: Round,
    /// Its job.
    pub job: Option<u32>,
    /// When its slowdown went in (for a clean round: when it would have), Unix milliseconds.
    pub injected_at_ms: Option<u64>,
    /// Every straggler event seen, once each per node and check.
    pub seen: Vec<Sighting>,
    /// The slowdown the judge's own inputs show after the injection: the slowed node's median
    /// step over the other nodes' median (their `fabric-run` records).
    pub achieved: Option<f64>,
    /// How it was injected (`quota 1667/10000 us`, `tbf 4200kbit`).
    pub how: Option<String>,
    /// What went wrong; a round whose slowdown did not go in is not scored.
    pub error: Option<String>,
}

/// One round, scored.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoundScore {
    /// A fault round's node named after the injection.
    pub named: bool,
    /// From the injection to the poll that saw it named, seconds.
    pub ttn_s: Option<f64>,
    /// Other nodes named (a fault round), or every node named (a control).
    pub wrongly_named: Vec<String>,
    /// A `job.workload_slow` was said.
    pub workload_said: bool,
}

/// Scores one round.
pub fn score_round(o: &Outcome) -> RoundScore {
    let mut s = RoundScore::default();
    let injected = o.injected_at_ms.unwrap_or(u64::MAX);
    for x in &o.seen {
        if x.check == JOB_WORKLOAD_SLOW {
            s.workload_said = true;
        }
        if x.check != JOB_STRAGGLER {
            continue;
        }
        if o.round.kind.is_fault() && x.node == o.round.node && x.at_ms >= injected {
            s.named = true;
            s.ttn_s = Some((x.at_ms - injected) as f64 / 1000.0);
        } else if !s.wrongly_named.contains(&x.node) {
            s.wrongly_named.push(x.node.clone());
        }
    }
    s
}

/// Recall and time to name of one fault class at one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The class.
    pub class: String,
    /// The size (`1.25x`).
    pub size: String,
    /// The size, thousandths.
    pub factor_permille: u32,
    /// Rounds scored.
    pub rounds: usize,
    /// Rounds whose node was named.
    pub named: usize,
    /// named / rounds.
    pub recall: Option<f64>,
    /// Time to name, median, seconds.
    pub ttn_p50_s: Option<f64>,
    /// Time to name, 95th percentile, seconds.
    pub ttn_p95_s: Option<f64>,
    /// Rounds in which another node was named.
    pub others_named: usize,
    /// Rounds in which the slowdown was said to be the workload's.
    pub workload_said: usize,
    /// The median achieved slowdown.
    pub achieved_p50: Option<f64>,
    /// Rounds whose slowdown did not go in.
    pub errors: usize,
}

/// What a control (or the clean rounds) was told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlRow {
    /// The control.
    pub class: String,
    /// Rounds scored.
    pub rounds: usize,
    /// Rounds in which a node was named a straggler.
    pub named: usize,
    /// Rounds in which the slowdown was said to be the workload's.
    pub workload_said: usize,
    /// Rounds with either.
    pub flagged: usize,
    /// Rounds that did not run.
    pub errors: usize,
}

/// A straggler drill's scores (`fabric-check/drill-stragglers/v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// The plan's seed.
    pub seed: u64,
    /// Per fault class and size.
    pub cells: Vec<Cell>,
    /// Per control, then the clean rounds.
    pub controls: Vec<ControlRow>,
    /// Fault classes with at least one scored round.
    pub classes: usize,
    /// Named / fault rounds at 1.25× or more.
    pub recall_at_125pct: Option<f64>,
    /// 95th percentile of the time to name over the named fault rounds, seconds.
    pub time_to_name_p95_s: Option<f64>,
    /// Control rounds in which a node was named.
    pub workload_blamed_on_node: usize,
    /// Clean rounds with any straggler event, per 100 clean rounds.
    pub false_flags_per_100_clean_jobs: Option<f64>,
    /// Rounds not scored (their slowdown did not go in), and why, per class.
    pub errors: BTreeMap<String, Vec<String>>,
}

/// Scores every round.
pub fn score(seed: u64, outcomes: &[Outcome]) -> Scores {
    let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let scored = |o: &Outcome| o.injected_at_ms.is_some();
    for o in outcomes.iter().filter(|o| !scored(o)) {
        errors
            .entry(o.round.kind.id().to_owned())
            .or_default()
            .push(format!(
                "round {}: {}",
                o.round.index,
                o.error.as_deref().unwrap_or("not run")
            ));
    }
    let mut cells = Vec::new();
    let mut all_ttn = Vec::new();
    let (mut hi_rounds, mut hi_named) = (0usize, 0usize);
    let mut classes = 0;
    for kind in Kind::ALL.iter().filter(|k| k.is_fault()) {
        let mine: Vec<&Outcome> = outcomes.iter().filter(|o| o.round.kind == *kind).collect();
        if mine.iter().any(|o| scored(o)) {
            classes += 1;
        }
        let mut sizes: Vec<u32> = mine.iter().map(|o| o.round.factor_permille).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for z in sizes {
            let at: Vec<&&Outcome> = mine
                .iter()
                .filter(|o| o.round.factor_permille == z)
                .collect();
            let ok: Vec<&&Outcome> = at.iter().copied().filter(|o| scored(o)).collect();
            let rs: Vec<RoundScore> = ok.iter().map(|o| score_round(o)).collect();
            let named = rs.iter().filter(|r| r.named).count();
            let ttn: Vec<f64> = rs.iter().filter_map(|r| r.ttn_s).collect();
            all_ttn.extend(&ttn);
            if z >= 1250 {
                hi_rounds += ok.len();
                hi_named += named;
            }
            let achieved: Vec<f64> = ok.iter().filter_map(|o| o.achieved).collect();
            cells.push(Cell {
                class: kind.id().to_owned(),
                size: factor_text(z),
                factor_permille: z,
                rounds: ok.len(),
                named,
                recall: (!ok.is_empty()).then(|| named as f64 / ok.len() as f64),
                ttn_p50_s: median(&ttn),
                ttn_p95_s: percentile(&ttn, 95.0),
                others_named: rs.iter().filter(|r| !r.wrongly_named.is_empty()).count(),
                workload_said: rs.iter().filter(|r| r.workload_said).count(),
                achieved_p50: median(&achieved),
                errors: at.len() - ok.len(),
            });
        }
    }
    let mut controls = Vec::new();
    let mut blamed = 0;
    let mut clean_flagged = None;
    for kind in Kind::ALL.iter().filter(|k| !k.is_fault()) {
        let mine: Vec<&Outcome> = outcomes.iter().filter(|o| o.round.kind == *kind).collect();
        if mine.is_empty() {
            continue;
        }
        let ok: Vec<&&Outcome> = mine.iter().filter(|o| scored(o)).collect();
        let rs: Vec<RoundScore> = ok.iter().map(|o| score_round(o)).collect();
        let named = rs.iter().filter(|r| !r.wrongly_named.is_empty()).count();
        let workload_said = rs.iter().filter(|r| r.workload_said).count();
        let flagged = rs
            .iter()
            .filter(|r| r.workload_said || !r.wrongly_named.is_empty())
            .count();
        if *kind == Kind::Clean {
            clean_flagged = (!ok.is_empty()).then(|| 100.0 * flagged as f64 / ok.len() as f64);
        } else {
            blamed += named;
        }
        controls.push(ControlRow {
            class: kind.id().to_owned(),
            rounds: ok.len(),
            named,
            workload_said,
            flagged,
            errors: mine.len() - ok.len(),
        });
    }
    Scores {
        seed,
        cells,
        controls,
        classes,
        recall_at_125pct: (hi_rounds > 0).then(|| hi_named as f64 / hi_rounds as f64),
        time_to_name_p95_s: percentile(&all_ttn, 95.0),
        workload_blamed_on_node: blamed,
        false_flags_per_100_clean_jobs: clean_flagged,
        errors,
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.digits$}"))
}

/// The benchmark's line: `drill-stragglers: classes C, recall_at_125pct R,
/// time_to_name_p95_s T, workload_blamed_on_node W, false_flags_per_100_clean_jobs F` (`none`
/// where nothing was measured).
pub fn summary_line(s: &Scores) -> String {
    let none =
        |v: Option<f64>, d: usize| v.map_or_else(|| "none".to_owned(), |x| format!("{x:.d$}"));
    format!(
        "drill-stragglers: classes {}, recall_at_125pct {}, time_to_name_p95_s {}, workload_blamed_on_node {}, false_flags_per_100_clean_jobs {}",
        s.classes,
        none(s.recall_at_125pct, 3),
        none(s.time_to_name_p95_s, 1),
        s.workload_blamed_on_node,
        none(s.false_flags_per_100_clean_jobs, 1)
    )
}

/// The table: a row per fault class and size, then a row per control and the clean rounds,
/// then the rounds that did not run.
pub fn table(s: &Scores) -> String {
    let mut t = format!(
        "{:<12} {:>6} {:>6} {:>5} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>4}\n",
        "class",
        "size",
        "rounds",
        "named",
        "recall",
        "p50_s",
        "p95_s",
        "others",
        "workload",
        "achieved",
        "err"
    );
    for c in &s.cells {
        t += &format!(
            "{:<12} {:>6} {:>6} {:>5} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>4}\n",
            c.class,
            c.size,
            c.rounds,
            c.named,
            opt(c.recall, 2),
            opt(c.ttn_p50_s, 1),
            opt(c.ttn_p95_s, 1),
            c.others_named,
            c.workload_said,
            c.achieved_p50
                .map_or_else(|| "-".into(), |a| format!("{a:.2}x")),
            c.errors
        );
    }
    t += &format!(
        "\n{:<17} {:>6} {:>6} {:>8} {:>7} {:>4}\n",
        "control", "rounds", "named", "workload", "flagged", "err"
    );
    for c in &s.controls {
        t += &format!(
            "{:<17} {:>6} {:>6} {:>8} {:>7} {:>4}\n",
            c.class, c.rounds, c.named, c.workload_said, c.flagged, c.errors
        );
    }
    for (class, why) in &s.errors {
        for w in why {
            t += &format!("not scored: {class} {w}\n");
        }
    }
    t
}

/// The line a round ends with.
pub fn round_line(o: &Outcome) -> String {
    let r = score_round(o);
    let size = if o.round.kind.is_fault() || matches!(o.round.kind, Kind::AllSlow | Kind::Rotating)
    {
        factor_text(o.round.factor_permille)
    } else {
        "-".into()
    };
    let what = if let Some(e) = &o.error
        && o.injected_at_ms.is_none()
    {
        format!("not run: {e}")
    } else if o.round.kind.is_fault() {
        match r.ttn_s {
            Some(t) => format!("named in {t:.1} s"),
            None => "MISSED".into(),
        }
    } else if !r.wrongly_named.is_empty() {
        format!("NAMED {}", r.wrongly_named.join(","))
    } else if r.workload_said {
        "said the workload's (job.workload_slow)".into()
    } else {
        "quiet".into()
    };
    let mut extra = Vec::new();
    if o.round.kind.is_fault() && !r.wrongly_named.is_empty() {
        extra.push(format!("also named {}", r.wrongly_named.join(",")));
    }
    if o.round.kind.is_fault() && r.workload_said {
        extra.push("job.workload_slow said".into());
    }
    if let Some(a) = o.achieved {
        extra.push(format!("achieved {a:.2}x"));
    }
    if let Some(h) = &o.how {
        extra.push(h.clone());
    }
    if let Some(e) = &o.error
        && o.injected_at_ms.is_some()
    {
        extra.push(format!("error: {e}"));
    }
    format!(
        "stragglers round {:>3} {:<16} {:<5} {:<4} job {:<8} {}{}",
        o.round.index,
        o.round.kind.id(),
        size,
        o.round.node,
        o.job.map_or_else(|| "-".into(), |j| j.to_string()),
        what,
        if extra.is_empty() {
            String::new()
        } else {
            format!(" ({})", extra.join("; "))
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(kind: Kind, node: &str, permille: u32) -> Round {
        Round {
            index: 1,
            kind,
            node: node.into(),
            factor_permille: permille,
            inject_after_ms: 25_000,
        }
    }

    fn seen(node: &str, check: &str, at_ms: u64) -> Sighting {
        Sighting {
            node: node.into(),
            check: check.into(),
            at_ms,
        }
    }

    fn outcome(kind: Kind, node: &str, permille: u32, seen: Vec<Sighting>) -> Outcome {
        Outcome {
            round: round(kind, node, permille),
            job: Some(7),
            injected_at_ms: Some(100_000),
            seen,
            achieved: None,
            how: None,
            error: None,
        }
    }

    #[test]
    fn a_fault_round_is_named_only_by_its_own_node_after_the_injection_timed_from_it() {
        let o = outcome(
            Kind::StepSleep,
            "n3",
            1500,
            vec![seen("n3", JOB_STRAGGLER, 122_400)],
        );
        let r = score_round(&o);
        assert!(r.named);
        assert_eq!(r.ttn_s, Some(22.4));
        // Another node named instead: a miss and a wrong name.
        let o = outcome(
            Kind::StepSleep,
            "n3",
            1500,
            vec![seen("n2", JOB_STRAGGLER, 122_400)],
        );
        let r = score_round(&o);
        assert!(!r.named);
        assert_eq!(r.wrongly_named, vec!["n2".to_owned()]);
        // Its own node named before the slowdown went in: a false flag, not a hit.
        let o = outcome(
            Kind::CpuCapped,
            "n3",
            1500,
            vec![seen("n3", JOB_STRAGGLER, 90_000)],
        );
        let r = score_round(&o);
        assert!(!r.named && r.ttn_s.is_none());
        assert_eq!(r.wrongly_named, vec!["n3".to_owned()]);
    }

    #[test]
    fn recall_at_125pct_counts_only_sizes_of_one_and_a_quarter_or_more_and_leaves_errors_out() {
        let mut rounds = vec![
            // 1.1x missed: not in the figure.
            outcome(Kind::StepSleep, "n1", 1100, vec![]),
            outcome(
                Kind::StepSleep,
                "n1",
                1250,
                vec![seen("n1", JOB_STRAGGLER, 120_000)],
            ),
            outcome(Kind::PathShaped, "n2", 2000, vec![]),
            outcome(
                Kind::CpuCapped,
                "n4",
                1500,
                vec![seen("n4", JOB_STRAGGLER, 130_000)],
            ),
        ];
        let mut failed = outcome(Kind::CpuCapped, "n2", 2000, vec![]);
        failed.injected_at_ms = None;
        failed.error = Some("blocked: no cgroup".into());
        rounds.push(failed);
        let s = score(1, &rounds);
        assert_eq!(s.recall_at_125pct, Some(2.0 / 3.0));
        assert_eq!(s.classes, 3);
        assert_eq!(s.errors["cpu_capped"], vec!["round 1: blocked: no cgroup"]);
        let cell = s
            .cells
            .iter()
            .find(|c| c.class == "cpu_capped" && c.size == "2x")
            .unwrap();
        assert_eq!((cell.rounds, cell.errors, cell.recall), (0, 1, None));
        let cell = s.cells.iter().find(|c| c.size == "1.1x").unwrap();
        assert_eq!(cell.recall, Some(0.0));
        // The time to name is over the named rounds of every size: 20 s and 30 s.
        assert_eq!(s.time_to_name_p95_s, Some(29.5));
    }

    #[test]
    fn a_control_round_that_names_any_node_blames_the_workload_on_a_node_and_saying_workload_does_not()
     {
        let s = score(
            1,
            &[
                outcome(
                    Kind::AllSlow,
                    "n1",
                    1500,
                    vec![seen("n1", JOB_WORKLOAD_SLOW, 120_000)],
                ),
                outcome(
                    Kind::Rotating,
                    "n2",
                    1500,
                    vec![seen("n3", JOB_STRAGGLER, 50_000)],
                ),
                outcome(Kind::CheckpointBurst, "n1", 1000, vec![]),
            ],
        );
        assert_eq!(s.workload_blamed_on_node, 1);
        let all = s.controls.iter().find(|c| c.class == "all_slow").unwrap();
        assert_eq!((all.named, all.workload_said, all.flagged), (0, 1, 1));
        assert_eq!(s.false_flags_per_100_clean_jobs, None, "no clean round ran");
        assert_eq!(s.recall_at_125pct, None);
    }

    #[test]
    fn a_clean_round_with_any_straggler_event_is_a_false_flag_per_hundred_clean_jobs() {
        let mut rounds: Vec<Outcome> = (0..9)
            .map(|_| outcome(Kind::Clean, "n1", 1000, vec![]))
            .collect();
        rounds.push(outcome(
            Kind::Clean,
            "n1",
            1000,
            vec![seen("n1", JOB_WORKLOAD_SLOW, 1)],
        ));
        let s = score(1, &rounds);
        assert_eq!(s.false_flags_per_100_clean_jobs, Some(10.0));
        assert_eq!(s.workload_blamed_on_node, 0, "a clean round is no control");
    }

    #[test]
    fn the_summary_line_is_the_benchmarks_exact_line_and_says_none_for_what_did_not_run() {
        let s = score(
            1,
            &[
                outcome(
                    Kind::StepSleep,
                    "n1",
                    1250,
                    vec![seen("n1", JOB_STRAGGLER, 121_000)],
                ),
                outcome(Kind::Clean, "n1", 1000, vec![]),
            ],
        );
        assert_eq!(
            summary_line(&s),
            "drill-stragglers: classes 1, recall_at_125pct 1.000, time_to_name_p95_s 21.0, workload_blamed_on_node 0, false_flags_per_100_clean_jobs 0.0"
        );
        let s = score(1, &[]);
        assert_eq!(
            summary_line(&s),
            "drill-stragglers: classes 0, recall_at_125pct none, time_to_name_p95_s none, workload_blamed_on_node 0, false_flags_per_100_clean_jobs none"
        );
        let t = table(&score(1, &[outcome(Kind::PathShaped, "n2", 1500, vec![])]));
        assert!(t.contains("path_shaped"), "{t}");
        assert!(t.contains("1.5x"), "{t}");
    }
}
