//! `fabric-check health` (Slurm's `HealthCheckProgram`): probe the idle node, drain on `fail`
//! through the one drain path ([`crate::drain::drain_node`], settle step included), and resume a
//! node we drained after a streak of clean probes.
//!
//! The streak is a counter file in the node's state folder: a `fail` resets it, each `pass` or
//! `warn` adds one, an `error` (the probe could not look) leaves it. A prolog or epilog drain
//! resets it too ([`reset_streak`]), so a node the epilog drained is not resumed by the next
//! health run.
//!
//! [`run`] goes through its stages in order, each a function of its own: `probe_node`, this
//! node's Slurm state, `spare_training_ports` (a port still training is not drained at first
//! sight), `act_on_verdict` (a `fail` drained, a clean probe counted by `count_clean_probe`,
//! our drain resumed after the streak) and `check_tags`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::policy::{self, Phase};
use super::runner::{Against, ProbeRequest, ProbeRunner};
use crate::deadline::Deadline;
use crate::drain::{self, DrainRequest, ResumeAction};
use crate::relay::Relay;
use crate::slurm::{NodeInfo, Slurm, SlurmError};
use fabric_proto::plugin_args::{PluginArgs, expand_node};
use fabric_proto::tag::Verdict;
use fabric_proto::verdict::Severity;

/// The exit code when the probe could not run.
pub const EXIT_COULD_NOT_RUN: i32 = 3;

/// A health run's settings.
#[derive(Debug, Clone)]
pub struct HealthSetup {
    /// This node.
    pub node: String,
    /// The plugin's settings (from `plugstack.conf`).
    pub plugin: PluginArgs,
    /// This node's state folder (created by [`HealthSetup::new`]).
    pub state_dir: PathBuf,
    /// Consecutive clean probes before our drain is resumed.
    pub clean_probes: u32,
    /// The run's one deadline ([`crate::deadline::Budget::health`]): `timeout=` for the probe
    /// plus [`crate::deadline::HEALTH_SLURM`] for Slurm calls.
    pub deadline: Deadline,
    /// How long after a job's end its tag is checked against accounting
    /// ([`crate::tag_ledger`]; [`TAG_GRACE`] unless set).
    pub tag_grace: Duration,
}

/// The default [`HealthSetup::tag_grace`]: other tools' `EpilogSlurmctld` writes (jobstats
/// sleeps 5 s) and our own post-job writes are done well before.
pub const TAG_GRACE: Duration = Duration::from_secs(120);

/// Why a health run could not decide.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// The node name cannot be put into a path.
    #[error("node name {0:?} cannot be used in a path")]
    NodeName(String),
    /// A file of the state folder.
    #[error("{path}: {source}; check state_dir= in plugstack.conf")]
    State {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Node states could not be read.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// sinfo does not list this node.
    #[error("sinfo does not know {0}; pass --node with the node's Slurm name")]
    UnknownNode(String),
}

impl HealthSetup {
    /// Resolves the state folder (created) and starts the deadline.
    pub fn new(node: String, plugin: PluginArgs, clean_probes: u32) -> Result<Self, HealthError> {
        let state_dir = expand_node(&plugin.state_dir, &node)
            .ok_or_else(|| HealthError::NodeName(node.clone()))?;
        std::fs::create_dir_all(&state_dir).map_err(|source| HealthError::State {
            path: state_dir.clone(),
            source,
        })?;
        let deadline = crate::deadline::Budget::new(plugin.timeout).health();
        Ok(Self {
            node,
            plugin,
            state_dir,
            clean_probes,
            deadline,
            tag_grace: TAG_GRACE,
        })
    }

    /// The clean-probe streak file.
    pub fn streak_path(&self) -> PathBuf {
        streak_path(&self.state_dir)
    }
}

/// The clean-probe streak file in a node's state folder (the prolog's and the epilog's folder
/// too: `state_dir=` expands alike for all three).
pub fn streak_path(state_dir: &Path) -> PathBuf {
    state_dir.join("health-clean-streak")
}

/// Starts the clean-probe streak over: a prolog or epilog that drained the node (or found it
/// drained by us already) has seen it fail, so `health` must see `clean_probes` clean runs from
/// now before it resumes the node.
pub fn reset_streak(state_dir: &Path) -> Result<(), HealthError> {
    write_streak(&streak_path(state_dir), 0)
}

fn read_streak(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn write_streak(path: &Path, n: u32) -> Result<(), HealthError> {
    std::fs::write(path, n.to_string()).map_err(|source| HealthError::State {
        path: path.to_owned(),
        source,
    })
}

/// The file in the state folder that keeps the ports the last health check saw training.
pub const TRAINING_FILE: &str = "health-training";

/// Whether an `ib.port_state` finding is of a port that is training: `INIT` or `ARMED` with
/// its physical link up.
fn is_training(f: &fabric_proto::verdict::Finding) -> bool {
    let state = f
        .observed
        .get("state")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let phys = f
        .observed
        .get("phys_state")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    matches!(state, "INIT" | "ARMED") && phys.contains("LinkUp")
}

/// The training ports of a report's failing `ib.port_state` findings, as `device/port`.
fn training_ports(report: &crate::probe::Report) -> std::collections::BTreeSet<String> {
    report
        .findings
        .iter()
        .filter(|f| {
            f.severity == Severity::Fail
                && f.check == fabric_proto::check_id::IB_PORT_STATE
                && is_training(f)
        })
        .map(|f| {
            format!(
                "{}/{}",
                f.device.as_deref().unwrap_or("?"),
                f.port.unwrap_or(0)
            )
        })
        .collect()
}

/// The ports the last health check saw training (none when the file is missing or unreadable).
fn read_training(path: &Path) -> std::collections::BTreeSet<String> {
    std::fs::read_to_string(path)
        .map(|t| {
            t.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn write_training(path: &Path, ports: &std::collections::BTreeSet<String>) -> std::io::Result<()> {
    if ports.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let text: String = ports.iter().map(|p| format!("{p}\n")).collect();
    std::fs::write(path, text)
}

/// One health run; returns the exit code (the probe's verdict code, or
/// [`EXIT_COULD_NOT_RUN`]). Its stages are the module's, in order.
pub fn run(
    setup: &HealthSetup,
    slurm: &dyn Slurm,
    runner: &dyn ProbeRunner,
    relay: &dyn Relay,
) -> Result<i32, HealthError> {
    let node = setup.node.as_str();
    let _span = tracing::info_span!("health", node).entered();
    let Some(report) = probe_node(setup, runner, relay) else {
        return Ok(EXIT_COULD_NOT_RUN);
    };
    let all = slurm.nodes()?;
    let me = all
        .iter()
        .find(|n| n.name == node)
        .ok_or_else(|| HealthError::UnknownNode(node.to_owned()))?;
    if spare_training_ports(setup, &report, relay)? {
        return Ok(report.verdict.exit_code());
    }
    act_on_verdict(setup, &report, me, slurm, relay)?;
    check_tags(setup, slurm, relay);
    Ok(report.verdict.exit_code())
}

/// Probes the idle node against its state folder; none, said, when the probe could not run
/// (the node's state unchanged).
fn probe_node(
    setup: &HealthSetup,
    runner: &dyn ProbeRunner,
    relay: &dyn Relay,
) -> Option<crate::probe::Report> {
    let node = setup.node.as_str();
    let plugin = &setup.plugin;
    let req = ProbeRequest {
        node: node.to_owned(),
        sysfs_root: plugin
            .sysfs_root
            .as_deref()
            .and_then(|r| expand_node(r, node)),
        config: expand_node(&plugin.config, node).filter(|c| c.is_file()),
        against: Against::StateDir(setup.state_dir.clone()),
        save: None,
        known: None,
    };
    match runner.probe(&req, setup.deadline.limit(plugin.timeout)) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::debug!(error = %e, "probe gave no document");
            relay.line(&format!(
                "{node}: the probe could not run; node state unchanged"
            ));
            None
        }
    }
}

/// Keeps the ports the report saw training ([`TRAINING_FILE`]) and whether the run ends here:
/// when every failing finding is of a port still training (INIT or ARMED, its link up) that
/// the previous health check did not see training, the node is not drained at first sight (the
/// streak starts over, and that is said).
fn spare_training_ports(
    setup: &HealthSetup,
    report: &crate::probe::Report,
    relay: &dyn Relay,
) -> Result<bool, HealthError> {
    let node = setup.node.as_str();
    // A port still training (INIT or ARMED, its link up) is drained only when the previous
    // health check saw it training too: a driver reload or a subnet manager's late sweep ends
    // within one HealthCheckInterval (the false-drain soak: every drain it still saw was that).
    let training = training_ports(report);
    let training_path = setup.state_dir.join(TRAINING_FILE);
    let seen_before = read_training(&training_path);
    if let Err(e) = write_training(&training_path, &training) {
        relay.line(&format!(
            "{node}: cannot keep the ports seen training in {} ({e}); a training port is drained at first sight",
            training_path.display()
        ));
    }
    let only_training = report.verdict == Verdict::Fail
        && report
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Fail)
            .all(|f| f.check == fabric_proto::check_id::IB_PORT_STATE && is_training(f));
    if only_training && !training.is_subset(&seen_before) {
        write_streak(&setup.streak_path(), 0)?;
        relay.line(&format!(
            "{node}: {} not ACTIVE yet but training (link up, waiting for the subnet manager); not drained on first sight: drained if still so at the next health check",
            training.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
        return Ok(true);
    }
    Ok(false)
}

/// Acts on the probe's verdict: a `fail` starts the streak over and drains through the one
/// drain path (or, where the policy does not drain, says so); a `pass` or `warn` counts a clean
/// probe ([`count_clean_probe`]); an `error` changes nothing.
fn act_on_verdict(
    setup: &HealthSetup,
    report: &crate::probe::Report,
    me: &NodeInfo,
    slurm: &dyn Slurm,
    relay: &dyn Relay,
) -> Result<(), HealthError> {
    let node = setup.node.as_str();
    let plugin = &setup.plugin;
    let streak_path = setup.streak_path();
    match report.verdict {
        Verdict::Fail if !policy::verdict_drains(Phase::Health, Verdict::Fail, plugin) => {
            write_streak(&streak_path, 0)?;
            let (check, message) =
                super::results::worst_finding(report).unwrap_or(("probe".into(), "fail".into()));
            relay.line(&format!(
                "{node}: {check}: {message}; not drained (policy={})",
                plugin.policy.as_str()
            ));
        }
        Verdict::Fail => {
            write_streak(&streak_path, 0)?;
            let (check, message) =
                super::results::worst_finding(report).unwrap_or(("probe".into(), "fail".into()));
            drain::drain_node(
                slurm,
                &DrainRequest {
                    node,
                    check: &check,
                    message: &message,
                    limit: plugin.max_drain,
                    dry_run: plugin.dry_run,
                },
                &setup.deadline,
                relay,
                &|| {},
            );
        }
        Verdict::Pass | Verdict::Warn => count_clean_probe(setup, me, slurm, relay)?,
        Verdict::Error => relay.line(&format!("{node}: probe error; node state unchanged")),
    }
    Ok(())
}

/// A clean probe: the streak grows by one, and a node we drained is resumed once the streak
/// reaches `clean_probes` (a dry run says it would); until then, how far it is is said.
fn count_clean_probe(
    setup: &HealthSetup,
    me: &NodeInfo,
    slurm: &dyn Slurm,
    relay: &dyn Relay,
) -> Result<(), HealthError> {
    let node = setup.node.as_str();
    let streak_path = setup.streak_path();
    let streak = read_streak(&streak_path).saturating_add(1);
    write_streak(&streak_path, streak)?;
    if drain::decide_resume(me) == ResumeAction::Resume {
        if streak >= setup.clean_probes {
            if setup.plugin.dry_run {
                relay.line(&format!(
                    "dry run: would resume {node} after {streak} clean probes"
                ));
            } else {
                slurm.resume(node)?;
                relay.line(&format!(
                    "resumed {node} after {streak} clean probes (was: {})",
                    me.reason
                ));
            }
        } else {
            relay.line(&format!(
                "{node}: clean probe {streak} of {} before resuming",
                setup.clean_probes
            ));
        }
    }
    Ok(())
}

/// Logs every prolog verdict kept here that never reached Slurm ([`super::pending::stranded`]),
/// then compares the tags this node wrote with accounting and logs every one that is gone
/// ([`crate::tag_ledger`]); a check that cannot run is logged and changes nothing.
fn check_tags(setup: &HealthSetup, slurm: &dyn Slurm, relay: &dyn Relay) {
    let now = std::time::SystemTime::now();
    for s in super::pending::stranded(&setup.state_dir, setup.tag_grace, now) {
        tracing::error!(job = %s.job, "{s}");
        relay.line(&s.to_string());
    }
    let removed = super::step_end::remove_leftovers(&setup.state_dir, now);
    if removed > 0 {
        tracing::info!(
            removed,
            "removed step-end files of jobs whose epilog never ran here"
        );
    }
    let now_s = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match crate::tag_ledger::check(&setup.state_dir, slurm, now_s, setup.tag_grace.as_secs()) {
        Ok(losses) => {
            for loss in losses {
                tracing::error!(job = %loss.job, "{loss}");
                relay.line(&loss.to_string());
            }
        }
        Err(e) => {
            tracing::warn!("cannot compare the tags written here with accounting: {e}");
            relay.line(&format!(
                "{}: cannot compare the tags written here with accounting: {e}",
                setup.node
            ));
        }
    }
}
