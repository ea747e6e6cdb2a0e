//! The soak's report: a table per noise kind, the drains, and the one summary line
//! `scripts/bench-soak` prints last.

use std::fmt::Write;

use crate::noise::Kind;
use crate::run::{Drain, Outcome};
use crate::stats::per_1000_node_days;

/// `soak: node_days N, false_drains F, false_resumes R, per_1000_node_days X, upper95 U,
/// faults_caught C/T`.
pub fn summary_line(o: &Outcome) -> String {
    let f = o.false_drains.len() as u64;
    let (rate, upper) = per_1000_node_days(f, o.node_days);
    let t = o.controls_injected.len();
    format!(
        "soak: node_days {}, false_drains {f}, false_resumes {}, per_1000_node_days {rate:.3}, upper95 {upper:.3}, faults_caught {}/{t}",
        o.node_days,
        o.false_resumes.len(),
        t - o.controls_missed.len()
    )
}

fn drain_line(d: &Drain) -> String {
    let recent: Vec<&str> = d.recent.iter().map(|k| k.as_str()).collect();
    format!(
        "  {} day {} hour {:02} ({}): {} [noise in the 24 h before: {}]",
        d.node,
        d.hour / 24,
        d.hour % 24,
        d.phase,
        d.reason,
        if recent.is_empty() {
            "none".to_owned()
        } else {
            recent.join(", ")
        }
    )
}

/// The whole report: what ran, the per-kind table, every drain, the controls; the summary
/// line last.
pub fn text(o: &Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "soak ran {} node-days in {:.1} s: {} jobs, {} probes (prolog, epilog, health; {} looks, {} of an unchanged tree), {} watch samples (1 s, in windows; {} of a tree unchanged since the last full sample), {} health checks",
        o.node_days,
        o.elapsed.as_secs_f64(),
        o.jobs,
        o.probes,
        o.looks.0,
        o.looks.1,
        o.watch_samples,
        o.watch_unread,
        o.health_runs
    );
    let _ = writeln!(
        s,
        "\n{:<18} {:>9} {:>13}",
        "noise", "events", "false_drains"
    );
    for k in Kind::ALL {
        let events = o.events.get(&k).copied().unwrap_or(0);
        let drains = o
            .false_drains
            .iter()
            .filter(|d| d.recent.contains(&k))
            .count();
        let _ = writeln!(s, "{:<18} {events:>9} {drains:>13}", k.as_str());
    }
    let _ = writeln!(
        s,
        "(a false drain counts against every kind of noise its node saw in the 24 h before it)"
    );
    let _ = writeln!(
        s,
        "\nmass-drain guard refusals: {}; resumes after clean probes: {}",
        o.guard_refusals, o.resumes
    );
    if !o.false_drains.is_empty() {
        let _ = writeln!(s, "\nfalse drains:");
        for d in &o.false_drains {
            let _ = writeln!(s, "{}", drain_line(d));
        }
    }
    if !o.outage_drains.is_empty() {
        let mut back = o.outage_back_min.clone();
        back.sort_by(f64::total_cmp);
        let median = back.get(back.len() / 2).copied().unwrap_or(f64::NAN);
        let longest = back.last().copied().unwrap_or(f64::NAN);
        let _ = writeln!(
            s,
            "\ndrains while a driver reload had the node's fabric out (devices gone, or a port not yet ACTIVE again; the probe failed as it should, not counted as false while the node came back by itself): {}, back in service {} of them, median {median:.0} min after the reload was over, longest {longest:.0} min; a day later still drained (counted false above): {}",
            o.outage_drains.len(),
            back.len(),
            o.outage_overdue,
        );
        for d in &o.outage_drains {
            let _ = writeln!(s, "{}", drain_line(d));
        }
    }
    let _ = writeln!(
        s,
        "\ncontrols (real faults, not counted above): {} injected, {} drained, {} missed",
        o.controls_injected.len(),
        o.control_drains.len(),
        o.controls_missed.len()
    );
    for d in &o.control_drains {
        let _ = writeln!(
            s,
            "{} <- {}",
            drain_line(d),
            d.control.map_or("", |c| c.as_str())
        );
    }
    for (node, c, hour, port) in &o.controls_missed {
        let _ = writeln!(
            s,
            "  MISSED: {} on {node} day {} hour {:02} (rail {port})",
            c.as_str(),
            hour / 24,
            hour % 24
        );
    }
    for (node, c, hour) in &o.false_resumes {
        let _ = writeln!(
            s,
            "  FALSE RESUME: {node} day {} hour {:02}, its {} still there",
            hour / 24,
            hour % 24,
            c.as_str()
        );
    }
    s.push_str(&summary_line(o));
    s.push('\n');
    s
}
