//! The straggler verdict on recorded step series: each test plays a job hop by hop (5 s hops
//! of 10 s windows, as the defaults are) and checks what the first node concludes.

use std::collections::BTreeMap;

use super::judge::{Event, Judge, Rules, WorkloadKind};
use fabric_proto::straggler::WindowSteps;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
/// Seconds per hop.
const HOP_S: u64 = 5;

/// A node's figure: `ms` per step (about 10 steps a window), or nothing.
fn fig(hop: u64, ms: Option<u64>) -> WindowSteps {
    WindowSteps {
        hop,
        steps: if ms.is_some() { 10 } else { 0 },
        median_ms: ms,
        checkpoint: false,
        fault: None,
    }
}

/// A small, fixed jitter (±3 %) so that no series is perfectly flat.
fn jitter(hop: u64, node: usize) -> f64 {
    let x = (hop * 7 + node as u64 * 13) % 7;
    1.0 + (x as f64 - 3.0) / 100.0
}

/// Plays `hops` hops; `speed(hop, node_index)` is the node's slowness (1.0 = normal, `None`
/// = no figure). Returns every event with its hop.
fn play(hops: u64, speed: impl Fn(u64, usize) -> Option<f64>) -> Vec<(u64, Event)> {
    play_with(hops, speed, |_, _, f| f)
}

fn play_with(
    hops: u64,
    speed: impl Fn(u64, usize) -> Option<f64>,
    edit: impl Fn(u64, usize, WindowSteps) -> WindowSteps,
) -> Vec<(u64, Event)> {
    let mut judge = Judge::new(Rules::default());
    let mut out = Vec::new();
    for hop in 0..hops {
        let mut figs = BTreeMap::new();
        for (i, n) in NODES.iter().enumerate() {
            let ms = speed(hop, i).map(|s| (1000.0 * s * jitter(hop, i)).round() as u64);
            if let Some(ms) = ms {
                figs.insert((*n).to_owned(), edit(hop, i, fig(hop, Some(ms))));
            }
        }
        out.extend(judge.observe(hop, &figs).into_iter().map(|e| (hop, e)));
    }
    out
}

fn named(events: &[(u64, Event)]) -> Vec<(u64, String)> {
    events
        .iter()
        .filter_map(|(h, e)| match e {
            Event::Named(n) => Some((*h, n.node.clone())),
            _ => None,
        })
        .collect()
}

fn workload(events: &[(u64, Event)]) -> Vec<WorkloadKind> {
    events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Workload(w) => Some(w.kind),
            _ => None,
        })
        .collect()
}

#[test]
fn one_node_slowed_to_one_and_a_half_is_named_within_thirty_seconds() {
    let onset = 20;
    let ev = play(60, |h, i| {
        Some(if i == 2 && h >= onset { 1.5 } else { 1.0 })
    });
    let n = named(&ev);
    assert_eq!(n.len(), 1, "{ev:?}");
    let (hop, node) = &n[0];
    assert_eq!(node, "n3");
    assert!(
        (hop - onset) * HOP_S <= 30,
        "named {} s after",
        (hop - onset) * HOP_S
    );
    assert!(workload(&ev).is_empty(), "{ev:?}");
    let Event::Named(first) = &ev
        .iter()
        .find(|(_, e)| matches!(e, Event::Named(_)))
        .unwrap()
        .1
    else {
        unreachable!()
    };
    assert!((1.4..1.6).contains(&first.ratio), "{first:?}");
    assert_eq!(first.since_hop, onset);
}

#[test]
fn a_node_only_ten_percent_slower_is_named_and_five_percent_is_not() {
    let at_110 = play(40, |h, i| Some(if i == 1 && h >= 10 { 1.16 } else { 1.0 }));
    assert_eq!(named(&at_110).len(), 1, "{at_110:?}");
    let at_105 = play(40, |h, i| Some(if i == 1 && h >= 10 { 1.05 } else { 1.0 }));
    assert!(named(&at_105).is_empty(), "{at_105:?}");
}

#[test]
fn every_node_slow_together_is_the_workloads_and_names_no_node() {
    let ev = play(40, |h, _| Some(if h >= 10 { 1.5 } else { 1.0 }));
    assert!(named(&ev).is_empty(), "{ev:?}");
    assert_eq!(workload(&ev), vec![WorkloadKind::Together], "{ev:?}");
}

#[test]
fn a_slow_rank_that_rotates_from_window_to_window_names_no_node() {
    // The slow node changes every window (two hops), round the job's nodes.
    let ev = play(80, |h, i| {
        Some(if h >= 6 && (h / 2) as usize % 4 == i {
            1.5
        } else {
            1.0
        })
    });
    assert!(named(&ev).is_empty(), "{ev:?}");
}

#[test]
fn a_slow_rank_that_rotates_every_few_windows_is_said_to_be_the_workloads() {
    // Each node is slow for three windows (six hops) in turn: long enough to be named, but
    // the others were slow just before.
    let ev = play(90, |h, i| {
        Some(if h >= 6 && ((h - 6) / 6) as usize % 4 == i {
            1.5
        } else {
            1.0
        })
    });
    let n = named(&ev);
    // The first node of the rotation is named (nothing rotated yet); every later turn is not.
    assert!(n.len() <= 1, "{n:?}");
    assert!(workload(&ev).contains(&WorkloadKind::Rotating), "{ev:?}");
}

#[test]
fn single_slow_windows_of_other_nodes_early_in_the_job_do_not_hold_a_straggler_back() {
    // Seen in the straggler drill: start-up noise (one slow window here and there on n2, n3
    // and n4) was still in the lookback when n1 slowed to 1.25x, and read as a rotation.
    let noisy = [(4, 1), (6, 2), (9, 3), (11, 1)];
    let onset = 14;
    let ev = play(40, |h, i| {
        Some(if i == 0 && h >= onset {
            1.25
        } else if noisy.contains(&(h, i)) {
            1.3
        } else {
            1.0
        })
    });
    let n = named(&ev);
    assert_eq!(n, vec![(onset + 2, "n1".to_owned())], "{ev:?}");
    assert!(workload(&ev).is_empty(), "{ev:?}");
}

#[test]
fn a_checkpoint_burst_on_one_node_names_nobody() {
    // n1 writes the checkpoint: its windows with one are slow and marked.
    let ev = play_with(
        60,
        |h, i| {
            Some(if i == 0 && (20..26).contains(&h) {
                3.0
            } else {
                1.0
            })
        },
        |h, i, mut f| {
            if i == 0 && (20..26).contains(&h) {
                f.checkpoint = true;
            }
            f
        },
    );
    assert!(ev.is_empty(), "{ev:?}");
}

#[test]
fn a_node_that_joins_late_is_judged_from_its_first_window_on() {
    // n4's figures start at hop 20, as fast as the others: nothing to say.
    let ev = play(60, |h, i| {
        if i == 3 {
            (h >= 20).then_some(1.0)
        } else {
            Some(1.0)
        }
    });
    assert!(ev.is_empty(), "{ev:?}");
    // A late node that then slows down is named three windows after.
    let ev = play(60, |h, i| {
        if i == 3 {
            (h >= 20).then_some(if h >= 35 { 1.5 } else { 1.0 })
        } else {
            Some(1.0)
        }
    });
    assert_eq!(named(&ev), vec![(37, "n4".to_owned())], "{ev:?}");
}

#[test]
fn a_node_slow_from_the_jobs_first_steps_is_named_by_its_third_window() {
    let ev = play(30, |_, i| Some(if i == 2 { 1.5 } else { 1.0 }));
    assert_eq!(named(&ev), vec![(2, "n3".to_owned())], "{ev:?}");
    assert!(workload(&ev).is_empty(), "{ev:?}");
}

#[test]
fn a_node_whose_records_stop_is_said_silent_and_never_named() {
    let ev = play(40, |h, i| if i == 1 && h >= 15 { None } else { Some(1.0) });
    assert!(named(&ev).is_empty(), "{ev:?}");
    let silent: Vec<_> = ev
        .iter()
        .filter_map(|(h, e)| match e {
            Event::Silent { node, since_hop } => Some((*h, node.clone(), *since_hop)),
            _ => None,
        })
        .collect();
    assert_eq!(silent, vec![(20, "n2".to_owned(), 15)], "{ev:?}");
}

#[test]
fn two_nodes_slow_at_once_are_both_named() {
    let ev = play(40, |h, i| Some(if i >= 2 && h >= 10 { 1.5 } else { 1.0 }));
    let mut nodes: Vec<String> = named(&ev).into_iter().map(|(_, n)| n).collect();
    nodes.sort();
    assert_eq!(nodes, vec!["n3", "n4"], "{ev:?}");
}

#[test]
fn a_named_node_is_cleared_when_its_steps_are_back_and_named_again_if_it_slows_again() {
    let ev = play(80, |h, i| {
        Some(if i == 2 && ((10..25).contains(&h) || h >= 50) {
            1.5
        } else {
            1.0
        })
    });
    let kinds: Vec<&str> = ev
        .iter()
        .map(|(_, e)| match e {
            Event::Named(_) => "named",
            Event::Cleared { .. } => "cleared",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, vec!["named", "cleared", "named"], "{ev:?}");
}

#[test]
fn a_straggler_whose_node_holds_a_fabric_fault_names_both() {
    let ev = play_with(
        40,
        |h, i| Some(if i == 2 && h >= 10 { 1.5 } else { 1.0 }),
        |h, i, mut f| {
            if i == 2 && h >= 11 {
                f.fault = Some("ib.port_rate".into());
            }
            f
        },
    );
    let Some((_, Event::Named(n))) = ev.iter().find(|(_, e)| matches!(e, Event::Named(_))) else {
        panic!("{ev:?}")
    };
    assert_eq!(n.fault.as_deref(), Some("ib.port_rate"));
}

#[test]
fn a_clean_job_with_noisy_steps_names_nobody_in_a_day() {
    // ±3 % jitter and, now and then, one slow window on a random node.
    let ev = play(17_280, |h, i| {
        let spike = (h * 2_654_435_761 + i as u64 * 40_503).is_multiple_of(997);
        Some(if spike { 1.4 } else { 1.0 })
    });
    assert!(named(&ev).is_empty(), "{:?}", &ev[..ev.len().min(5)]);
}

#[test]
fn a_job_of_one_reporting_node_is_not_judged() {
    let mut judge = Judge::new(Rules::default());
    for hop in 0..20 {
        let figs = BTreeMap::from([("n1".to_owned(), fig(hop, Some(1000 + hop * 500)))]);
        assert!(judge.observe(hop, &figs).is_empty());
    }
}
