//! Drain etiquette, as NHC users learned it the hard way:
//!
//! - our reasons read `fabric-check: <check-id>: <short message>` ([`reason`]), printable and
//!   bounded;
//! - a node drained for any other reason is never touched: no overwrite, no resume;
//! - only our own drains are resumed, by hand (`fabric-check resume`) or after N consecutive
//!   clean health checks;
//! - a mass-drain guard refuses to drain beyond a limit of nodes currently drained by
//!   fabric-check, so a bad config or a probe bug cannot empty a partition;
//! - a dry-run mode says what would happen.
//!
//! [`drain_node`] is the one place that decides, executes and settles a drain; the prolog, the
//! epilog and `health` all call it.

use std::time::Duration;

use crate::deadline::{Budget, Deadline};
use crate::relay::Relay;
use crate::slurm::{NodeInfo, Slurm};
use fabric_proto::plugin_args::DrainLimit;

/// Every reason fabric-check writes starts with this.
pub const PREFIX: &str = "fabric-check:";

/// Longest reason written, in characters.
pub const MAX_REASON_CHARS: usize = 160;

/// `fabric-check: <check>: <message>`, reduced to printable ASCII without `|`, whitespace
/// collapsed, bounded to [`MAX_REASON_CHARS`].
pub fn reason(check: &str, message: &str) -> String {
    let raw = format!("{PREFIX} {check}: {message}");
    let mut out = String::with_capacity(raw.len().min(MAX_REASON_CHARS));
    let mut last_space = false;
    for c in raw.chars() {
        let c = if c.is_ascii_graphic() && c != '|' {
            c
        } else {
            ' '
        };
        if c == ' ' && last_space {
            continue;
        }
        last_space = c == ' ';
        if out.chars().count() + 1 > MAX_REASON_CHARS {
            break;
        }
        out.push(c);
    }
    out.trim_end().to_owned()
}

/// Whether a drain reason was written by fabric-check.
pub fn is_ours(reason: &str) -> bool {
    reason.trim_start().starts_with(PREFIX)
}

/// What to do about a node that failed its probe.
#[derive(Debug, Clone, PartialEq)]
pub enum DrainAction {
    /// Drain it with this reason.
    Drain(String),
    /// Already drained by us: leave the first reason.
    AlreadyOurs(String),
    /// Drained for someone else's reason: leave it alone.
    KeepForeign(String),
    /// The mass-drain guard tripped: do not drain.
    Guarded {
        /// Nodes fabric-check has drained now.
        drained_by_us: usize,
        /// The most it may.
        limit: usize,
    },
    /// Dry run: would drain with this reason.
    DryRun(String),
}

/// The guard's limit in nodes for a cluster of `total` nodes (at least one).
pub fn limit_nodes(limit: DrainLimit, total: usize) -> usize {
    match limit {
        DrainLimit::Nodes(n) => n as usize,
        DrainLimit::Fraction(f) => ((f * total as f64).floor() as usize).max(1),
    }
}

/// Decides whether `node` may be drained with `new_reason`, given every node of the cluster.
pub fn decide(
    node: &NodeInfo,
    all: &[NodeInfo],
    limit: DrainLimit,
    dry_run: bool,
    new_reason: &str,
) -> DrainAction {
    if node.is_drained() || !node.reason.is_empty() {
        if is_ours(&node.reason) {
            return DrainAction::AlreadyOurs(node.reason.clone());
        }
        if node.is_drained() {
            return DrainAction::KeepForeign(node.reason.clone());
        }
    }
    let drained_by_us = all
        .iter()
        .filter(|n| n.name != node.name && n.is_drained() && is_ours(&n.reason))
        .count();
    let max = limit_nodes(limit, all.len());
    if drained_by_us + 1 > max {
        return DrainAction::Guarded {
            drained_by_us,
            limit: max,
        };
    }
    if dry_run {
        DrainAction::DryRun(new_reason.to_owned())
    } else {
        DrainAction::Drain(new_reason.to_owned())
    }
}

/// How long a node waits after draining before it checks for a race with other nodes that
/// drained at the same time (prologs of one job run concurrently on every node, slurmctld fans
/// `HealthCheckProgram` out to every node at once), for a Slurm whose reason times have
/// `resolution` ([`Slurm::reason_time_resolution`], one second): one and a half times it, so that
/// any drain that lands after our re-check carries a strictly later reason time than ours and
/// yields to us.
pub fn settle_wait(resolution: Duration) -> Duration {
    resolution.mul_f64(1.5)
}

/// Tries of the undo (`scontrol update State=RESUME`) before our drain is left in place.
pub const UNDO_TRIES: u32 = 5;

/// After draining `me`, whether it may stay drained: when concurrent drains pushed fabric-check
/// past its limit, the earliest drains (by reason time, then node name, which every node sees
/// alike) keep theirs and the others undo their own.
pub fn keeps_its_drain(me: &str, all: &[NodeInfo], limit: DrainLimit) -> bool {
    let mut ours: Vec<&NodeInfo> = all
        .iter()
        .filter(|n| n.is_drained() && is_ours(&n.reason))
        .collect();
    ours.sort_by(|a, b| {
        a.reason_time
            .cmp(&b.reason_time)
            .then_with(|| a.name.cmp(&b.name))
    });
    let max = limit_nodes(limit, all.len());
    ours.iter()
        .position(|n| n.name == me)
        .is_some_and(|i| i < max)
}

/// A node's wish to drain itself.
#[derive(Debug, Clone, Copy)]
pub struct DrainRequest<'a> {
    /// The node.
    pub node: &'a str,
    /// The check id the reason names.
    pub check: &'a str,
    /// The short message of the reason.
    pub message: &'a str,
    /// The mass-drain guard's limit.
    pub limit: DrainLimit,
    /// Say what would happen, change nothing.
    pub dry_run: bool,
}

/// What came of a [`DrainRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    /// Drained now, and the settle re-check kept it.
    Drained,
    /// Drained by us already (an earlier check): left with its first reason.
    AlreadyOurs,
    /// Drained for another reason: left alone.
    Foreign,
    /// The mass-drain guard refused.
    Guarded,
    /// Dry run: nothing changed.
    DryRun,
    /// Drained, then undone: concurrent drains went past the guard's limit, or the settle
    /// re-check could not be done.
    Undone,
    /// Node states could not be read, too little time was left to settle, or the drain did not
    /// happen: nothing changed.
    Failed,
    /// Drained, the settle step wanted it undone, and every undo failed: the node stays drained.
    UndoFailed,
}

impl DrainOutcome {
    /// Whether the node is out of service by fabric-check's hand after this.
    pub fn out_of_service(&self) -> bool {
        matches!(
            self,
            DrainOutcome::Drained | DrainOutcome::AlreadyOurs | DrainOutcome::UndoFailed
        )
    }
}

/// Whether `all` shows `node` drained by fabric-check.
fn drained_by_us(all: &[NodeInfo], node: &str) -> bool {
    all.iter()
        .any(|n| n.name == node && n.is_drained() && is_ours(&n.reason))
}

/// Decides, executes and settles one node's drain, with every Slurm call bounded by `deadline`;
/// says what it did through `relay`. `on_applied` runs as soon as slurmctld is known to hold the
/// drain (before the settle step): the prolog prints its decision line there, so a child killed
/// during the settle step still fails its prolog.
///
/// The guard fails closed:
///
/// - Node states are read first: no states, no drain.
/// - [`decide`] applies the etiquette and the guard.
/// - No drain starts without the time to settle it, all of it reserved before the drain
///   ([`Budget::settle_call`]): the drain call and the re-check each get a share of what is
///   left (never more than a Slurm call's own limit, at least
///   [`crate::deadline::MIN_SETTLE_CALL`]), and after them, the [`settle_wait`] and a whole
///   call's limit for the undo remain before the deadline. So however slow slurmctld answers,
///   up to its per-call limit, the undo is never cut off by the deadline.
/// - When the `scontrol` call fails (a timeout may have been applied by slurmctld all the same),
///   the drain is settled like any other: the settle re-check says whether it landed.
/// - The settle step waits [`settle_wait`], reads node states again, and undoes our own drain
///   when concurrent drains overran the guard ([`keeps_its_drain`]), when the re-check cannot be
///   read, or when the deadline left no time to wait. The undo is tried [`UNDO_TRIES`] times
///   within the deadline, each try with a call's whole limit.
pub fn drain_node(
    slurm: &dyn Slurm,
    req: &DrainRequest<'_>,
    deadline: &Deadline,
    relay: &dyn Relay,
    on_applied: &dyn Fn(),
) -> DrainOutcome {
    let node = req.node;
    let reason = reason(req.check, req.message);
    let all = match slurm.nodes() {
        Ok(a) => a,
        Err(e) => {
            relay.line(&format!("cannot read node states, not draining: {e}"));
            return DrainOutcome::Failed;
        }
    };
    let Some(me) = all.iter().find(|n| n.name == node) else {
        relay.line(&format!("node {node} is unknown to sinfo, not draining"));
        return DrainOutcome::Failed;
    };
    let wait = settle_wait(slurm.reason_time_resolution());
    let share = Budget::settle_call(deadline.remaining(), wait, slurm.call_limit());
    match decide(me, &all, req.limit, req.dry_run, &reason) {
        DrainAction::Drain(_) if share.is_none() => {
            relay.line(&format!(
                "not draining {node} ({reason}): {} ms left, too little to settle a drain before the deadline",
                deadline.left_ms()
            ));
            DrainOutcome::Failed
        }
        DrainAction::Drain(r) => {
            let share = share.unwrap_or_default();
            let settling = Settle {
                slurm,
                node,
                limit: req.limit,
                wait,
                share,
                deadline,
                relay,
            };
            match slurm.capped(share).drain(node, &r) {
                Ok(()) => {
                    relay.line(&format!(
                        "drained {node}: {r}; {} ms left",
                        deadline.left_ms()
                    ));
                    on_applied();
                    settling.run(true)
                }
                Err(e) => {
                    relay.line(&format!(
                        "the drain of {node} failed ({e}); slurmctld may have applied it all the same, settling"
                    ));
                    let outcome = settling.run(false);
                    if outcome.out_of_service() {
                        on_applied();
                    }
                    outcome
                }
            }
        }
        DrainAction::AlreadyOurs(r) => {
            relay.line(&format!("{node} is already drained by fabric-check: {r}"));
            DrainOutcome::AlreadyOurs
        }
        DrainAction::KeepForeign(r) => {
            relay.line(&format!(
                "{node} is drained for another reason, left as is: {r}"
            ));
            DrainOutcome::Foreign
        }
        DrainAction::Guarded {
            drained_by_us,
            limit,
        } => {
            relay.line(&format!(
                "MASS-DRAIN GUARD: {drained_by_us} node(s) already drained by fabric-check, limit {limit}: \
                 NOT draining {node} ({reason}); check the fabric and the configuration"
            ));
            DrainOutcome::Guarded
        }
        DrainAction::DryRun(r) => {
            relay.line(&format!("dry run: would drain {node}: {r}"));
            DrainOutcome::DryRun
        }
    }
}

/// The settle step of one drain: what it needs to know.
struct Settle<'a> {
    slurm: &'a dyn Slurm,
    node: &'a str,
    limit: DrainLimit,
    wait: Duration,
    /// The re-check's cap ([`Budget::settle_call`]).
    share: Duration,
    deadline: &'a Deadline,
    relay: &'a dyn Relay,
}

impl Settle<'_> {
    /// Checks run concurrently on many nodes (a job's prologs, slurmctld's health fan-out):
    /// wait, look again, and undo our own drain when the mass-drain guard's limit was overrun
    /// by the race (see [`keeps_its_drain`]) or when the look cannot be had. `confirmed`: the
    /// `scontrol` call said the drain was applied (else the re-check decides whether it landed).
    fn run(&self, confirmed: bool) -> DrainOutcome {
        let Settle {
            slurm,
            node,
            limit,
            wait,
            share,
            deadline,
            relay,
        } = *self;
        if deadline.remaining() < wait + share + slurm.call_limit() {
            relay.line(&format!(
                "MASS-DRAIN GUARD: {} ms left, too little to settle the drain of {node}; undoing it",
                deadline.left_ms()
            ));
            return undo(slurm, node, deadline, relay);
        }
        std::thread::sleep(wait);
        let all = match slurm.capped(share).nodes() {
            Ok(all) => all,
            Err(e) => {
                relay.line(&format!(
                    "MASS-DRAIN GUARD: cannot re-check node states after draining {node} ({e}); undoing the drain"
                ));
                return undo(slurm, node, deadline, relay);
            }
        };
        if !drained_by_us(&all, node) {
            if confirmed {
                relay.line(&format!(
                    "{node} is no longer drained by fabric-check at the re-check; left as it is"
                ));
            } else {
                relay.line(&format!(
                    "the drain of {node} did not land; nothing changed"
                ));
            }
            return DrainOutcome::Failed;
        }
        if keeps_its_drain(node, &all, limit) {
            if !confirmed {
                relay.line(&format!(
                    "drained {node} (the scontrol call failed, but slurmctld applied it); {} ms left",
                    deadline.left_ms()
                ));
            }
            return DrainOutcome::Drained;
        }
        let max = limit_nodes(limit, all.len());
        relay.line(&format!(
            "MASS-DRAIN GUARD: concurrent drains went past the limit of {max}; resuming {node} and NOT draining it; check the fabric and the configuration"
        ));
        undo(slurm, node, deadline, relay)
    }
}

/// Resumes our own drain of `node`, tried [`UNDO_TRIES`] times within the deadline.
fn undo(slurm: &dyn Slurm, node: &str, deadline: &Deadline, relay: &dyn Relay) -> DrainOutcome {
    let mut last = None;
    for i in 0..UNDO_TRIES {
        if i > 0 {
            std::thread::sleep(deadline.limit(Duration::from_millis(20) * i));
        }
        if deadline.is_past() {
            break;
        }
        match slurm.resume(node) {
            Ok(()) => return DrainOutcome::Undone,
            Err(e) => last = Some(e),
        }
    }
    relay.line(&format!(
        "could not undo the drain of {node}{}; it stays drained: resume it with `fabric-check resume`",
        last.map_or_else(|| " (no time left)".to_owned(), |e| format!(": {e}"))
    ));
    DrainOutcome::UndoFailed
}

/// What `resume` may do with a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeAction {
    /// Ours: resume it.
    Resume,
    /// Not drained: nothing to do.
    NotDrained,
    /// Drained by someone else: leave it.
    Foreign(String),
}

/// Decides whether `node` may be resumed by fabric-check.
pub fn decide_resume(node: &NodeInfo) -> ResumeAction {
    if !node.is_drained() {
        ResumeAction::NotDrained
    } else if is_ours(&node.reason) {
        ResumeAction::Resume
    } else {
        ResumeAction::Foreign(node.reason.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, state: &str, reason: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            state: state.into(),
            reason: reason.into(),
            reason_time: String::new(),
        }
    }

    #[test]
    fn reasons_are_prefixed_printable_and_bounded() {
        let r = reason("ib.port_state", "mlx5_3 port 1 is DOWN\n| injected\u{7}");
        assert_eq!(
            r,
            "fabric-check: ib.port_state: mlx5_3 port 1 is DOWN injected"
        );
        let long = reason("ib.counters", &"x".repeat(1000));
        assert_eq!(long.chars().count(), MAX_REASON_CHARS);
        assert!(is_ours(&long));
    }

    #[test]
    fn drain_keeps_a_foreign_reason() {
        let n = node("n3", "drained", "bad dimm, ticket 123");
        let all = vec![n.clone(), node("n1", "idle", "")];
        let a = decide(
            &n,
            &all,
            DrainLimit::Nodes(4),
            false,
            "fabric-check: ib.port_state: x",
        );
        assert_eq!(a, DrainAction::KeepForeign("bad dimm, ticket 123".into()));
    }

    #[test]
    fn drain_leaves_our_first_reason_in_place() {
        let n = node("n3", "drained", "fabric-check: ib.mtu: first");
        let a = decide(
            &n,
            std::slice::from_ref(&n),
            DrainLimit::Nodes(4),
            false,
            "fabric-check: ib.port_state: y",
        );
        assert_eq!(
            a,
            DrainAction::AlreadyOurs("fabric-check: ib.mtu: first".into())
        );
    }

    #[test]
    fn a_healthy_idle_node_is_drained_with_the_new_reason() {
        let n = node("n3", "idle", "");
        let all = vec![n.clone(), node("n1", "idle", ""), node("n2", "mixed", "")];
        let a = decide(
            &n,
            &all,
            DrainLimit::Nodes(1),
            false,
            "fabric-check: ib.port_rate: half",
        );
        assert_eq!(
            a,
            DrainAction::Drain("fabric-check: ib.port_rate: half".into())
        );
        assert_eq!(
            decide(&n, &all, DrainLimit::Nodes(1), true, "r"),
            DrainAction::DryRun("r".into())
        );
    }

    #[test]
    fn the_mass_drain_guard_counts_only_our_drains() {
        let n = node("n4", "idle", "");
        let all = vec![
            node("n1", "drained", "fabric-check: ib.mtu: a"),
            node("n2", "drained", "maintenance"),
            node("n3", "idle", ""),
            n.clone(),
        ];
        assert_eq!(
            decide(&n, &all, DrainLimit::Nodes(1), false, "r"),
            DrainAction::Guarded {
                drained_by_us: 1,
                limit: 1
            }
        );
        assert_eq!(
            decide(&n, &all, DrainLimit::Nodes(2), false, "r"),
            DrainAction::Drain("r".into())
        );
    }

    #[test]
    fn after_a_race_only_the_earliest_drains_stay() {
        let at = |name: &str, t: &str| NodeInfo {
            name: name.into(),
            state: "drained".into(),
            reason: "fabric-check: ib.port_state: x".into(),
            reason_time: t.into(),
        };
        let all = vec![
            at("n1", "2026-11-29T10:00:01"),
            at("n2", "2026-11-29T10:00:00"),
            at("n3", "2026-11-29T10:00:01"),
            node("n4", "idle", ""),
        ];
        assert!(keeps_its_drain("n2", &all, DrainLimit::Nodes(1)));
        assert!(!keeps_its_drain("n1", &all, DrainLimit::Nodes(1)));
        assert!(!keeps_its_drain("n3", &all, DrainLimit::Nodes(1)));
        assert!(keeps_its_drain("n1", &all, DrainLimit::Nodes(2)));
        assert!(!keeps_its_drain("n3", &all, DrainLimit::Nodes(2)));
    }

    #[test]
    fn a_fractional_limit_rounds_down_but_allows_one_node() {
        assert_eq!(limit_nodes(DrainLimit::Fraction(0.1), 4), 1);
        assert_eq!(limit_nodes(DrainLimit::Fraction(0.1), 128), 12);
        assert_eq!(limit_nodes(DrainLimit::Fraction(0.5), 4), 2);
    }

    #[test]
    fn resume_touches_only_our_drains() {
        assert_eq!(
            decide_resume(&node("n1", "drained", "fabric-check: ib.mtu: a")),
            ResumeAction::Resume
        );
        assert_eq!(
            decide_resume(&node("n1", "draining", "fabric-check: x: y")),
            ResumeAction::Resume
        );
        assert_eq!(
            decide_resume(&node("n1", "drained", "disk")),
            ResumeAction::Foreign("disk".into())
        );
        assert_eq!(
            decide_resume(&node("n1", "idle", "")),
            ResumeAction::NotDrained
        );
    }
}
