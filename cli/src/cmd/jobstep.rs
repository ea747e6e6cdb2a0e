//! `fabric-check prolog` and `fabric-check epilog`: what the SPANK plugin runs as a child process
//! (as root) around every job that asks for a check. Not meant to be run by hand.
//!
//! Prolog: run the probe (a grandchild, killed at its budget), apply policy (drain with
//! etiquette), meet the job's other nodes at the first node (MUNGE-authenticated rendezvous), and
//! there, as the job's one writer, splice the verdicts into `AdminComment`. Exit 2 asks the
//! plugin to fail the prolog (the node is drained and Slurm requeues the job elsewhere); 0 lets
//! the job run.
//!
//! Epilog: probe again against the prolog's snapshot, attribute counter rises to the job window,
//! drain on a fatal rise, and let the first node merge every node's rises into the tag.
//!
//! Stdout carries short lines the plugin copies into the slurmd log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fabric_core::check_id;
use fabric_core::drain::{self, DrainAction};
use fabric_core::exec::{ExecError, run_bounded, safe_command};
use fabric_core::fabric_option::FabricMode;
use fabric_core::hostlist::Hostlist;
use fabric_core::invocation::{Invocation, JobStepExit, Script};
use fabric_core::jobstep;
use fabric_core::plugin_args::{PluginArgs, Policy, expand_node};
use fabric_core::probe::{Baseline, Report};
use fabric_core::record::{self, ReadLimits, RecordError};
use fabric_core::rendezvous::{self, MapResolver, Munge, RendezvousConfig, SystemResolver};
use fabric_core::slurm::SlurmCli;
use fabric_core::stepgate;
use fabric_core::tag::{self, DuringJob, NodeResult, RunSummary, Verdict};

/// The words of `prolog` and `epilog`, as the plugin writes them: `--job-id N --node X --nodes L
/// --option M [--job-uid U] -- PLUGSTACK-WORDS`, parsed by [`Invocation::parse_flags`] (the
/// contract crate owns both sides of this boundary).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `--job-id N --node X --nodes HOSTLIST --option quick|full [--job-uid U] -- WORDS...`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub words: Vec<String>,
}

/// Everything the job step needs, resolved once.
struct Step {
    args: Invocation,
    plugin: PluginArgs,
    nodes: Vec<String>,
    state_dir: PathBuf,
    slurm: SlurmCli,
    started: Instant,
}

fn say(msg: &str) {
    println!("{msg}");
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Step {
    fn new(script: Script, args: Args) -> anyhow::Result<Self> {
        let args = Invocation::parse_flags(script, args.words)?;
        let (plugin, problems) = PluginArgs::parse(args.plugin_args.iter().map(String::as_str));
        for p in problems {
            say(&format!("plugstack.conf: {p}"));
        }
        let nodes = Hostlist::parse(&args.nodes)
            .and_then(|h| h.expand())
            .map_err(|e| anyhow::anyhow!("bad node list {:?}: {e}", args.nodes))?;
        anyhow::ensure!(
            nodes.contains(&args.node),
            "node {} is not in the job's node list {}",
            args.node,
            args.nodes
        );
        let state_dir = expand_node(&plugin.state_dir, &args.node)
            .ok_or_else(|| anyhow::anyhow!("node name {:?} cannot be used in a path", args.node))?;
        std::fs::create_dir_all(&state_dir)?;
        let slurm = SlurmCli {
            timeout: plugin.timeout.mul_f64(0.25).max(Duration::from_secs(2)),
            ..SlurmCli::default()
        };
        Ok(Self {
            args,
            plugin,
            nodes,
            state_dir,
            slurm,
            started: Instant::now(),
        })
    }

    fn snapshot_path(&self) -> PathBuf {
        self.state_dir
            .join(format!("job-{}.json", self.args.job_id))
    }

    /// Budget for the probe: two fifths of the plugin's timeout.
    fn probe_budget(&self) -> Duration {
        self.plugin.timeout.mul_f64(0.4)
    }

    /// Budget for the rendezvous: what is left of the next two fifths.
    fn rendezvous_budget(&self) -> Duration {
        self.plugin
            .timeout
            .mul_f64(0.8)
            .saturating_sub(self.started.elapsed())
            .max(Duration::from_millis(500))
    }

    /// Runs `<probe> probe --format json ...` as a grandchild, bounded.
    fn probe(&self, baseline: Option<&Path>, save: Option<&Path>) -> Result<Report, String> {
        let mut cmd = safe_command(&self.plugin.probe);
        cmd.args(["probe", "--format", "json", "--node", &self.args.node]);
        if let Some(root) = &self.plugin.sysfs_root {
            let root = expand_node(root, &self.args.node).ok_or("bad node name for sysfs_root")?;
            cmd.arg("--sysfs-root").arg(root);
        }
        if let Some(conf) =
            expand_node(&self.plugin.config, &self.args.node).filter(|c| c.is_file())
        {
            cmd.arg("--config").arg(conf);
        }
        match baseline {
            Some(b) => cmd.arg("--baseline").arg(b),
            None => cmd.arg("--state-dir").arg(&self.state_dir),
        };
        if let Some(s) = save {
            cmd.arg("--save").arg(s);
        }
        let budget = self.probe_budget();
        match run_bounded(cmd, None, budget) {
            Ok(done) => match serde_json::from_slice::<Report>(&done.stdout) {
                Ok(r) => Ok(r),
                Err(_) if done.status.code().is_none() => Err(format!(
                    "probe crashed (exit {}): {}",
                    done.code(),
                    done.stderr_text()
                )),
                Err(e) => Err(format!(
                    "probe gave no probe document (exit {}): {e}; {}",
                    done.code(),
                    done.stderr_text()
                )),
            },
            Err(ExecError::Timeout { .. }) => {
                Err(format!("probe timed out after {} ms", budget.as_millis()))
            }
            Err(e) => Err(format!("probe could not run: {e}")),
        }
    }

    /// Drains this node per policy and etiquette; returns whether the node is now out of service.
    fn drain_self(&self, check: &str, message: &str) -> bool {
        let reason = drain::reason(check, message);
        let all = match self.slurm.nodes() {
            Ok(a) => a,
            Err(e) => {
                say(&format!("cannot read node states, not draining: {e}"));
                return false;
            }
        };
        let Some(me) = all.iter().find(|n| n.name == self.args.node) else {
            say(&format!(
                "node {} is unknown to sinfo, not draining",
                self.args.node
            ));
            return false;
        };
        match drain::decide(
            me,
            &all,
            self.plugin.max_drain,
            self.plugin.dry_run,
            &reason,
        ) {
            DrainAction::Drain(r) => match self.slurm.drain(&self.args.node, &r) {
                Ok(()) => {
                    say(&format!("drained {}: {r}", self.args.node));
                    self.settle_race()
                }
                Err(e) => {
                    say(&format!("drain of {} failed: {e}", self.args.node));
                    false
                }
            },
            DrainAction::AlreadyOurs(r) => {
                say(&format!(
                    "{} is already drained by fabric-check: {r}",
                    self.args.node
                ));
                true
            }
            DrainAction::KeepForeign(r) => {
                say(&format!(
                    "{} is drained for another reason, left as is: {r}",
                    self.args.node
                ));
                false
            }
            DrainAction::Guarded {
                drained_by_us,
                limit,
            } => {
                say(&format!(
                    "MASS-DRAIN GUARD: {drained_by_us} node(s) already drained by fabric-check, limit {limit}: \
                     NOT draining {} ({reason}); check the fabric and the configuration",
                    self.args.node
                ));
                false
            }
            DrainAction::DryRun(r) => {
                say(&format!("dry run: would drain {}: {r}", self.args.node));
                false
            }
        }
    }

    /// Prologs of one job drain concurrently: wait, look again, and undo our own drain when the
    /// mass-drain guard's limit was overrun by the race (see `drain::keeps_its_drain`).
    fn settle_race(&self) -> bool {
        std::thread::sleep(drain::RACE_SETTLE);
        let Ok(all) = self.slurm.nodes() else {
            return true;
        };
        if drain::keeps_its_drain(&self.args.node, &all, self.plugin.max_drain) {
            return true;
        }
        let limit = drain::limit_nodes(self.plugin.max_drain, all.len());
        say(&format!(
            "MASS-DRAIN GUARD: concurrent drains went past the limit of {limit}; resuming {} and NOT draining it; check the fabric and the configuration",
            self.args.node
        ));
        if let Err(e) = self.slurm.resume(&self.args.node) {
            say(&format!(
                "could not undo the drain of {}: {e}",
                self.args.node
            ));
            return true;
        }
        false
    }

    fn rendezvous_config(&self) -> Result<RendezvousConfig, String> {
        let mut map = BTreeMap::new();
        if self.nodes.len() > 1 {
            match self.slurm.node_addrs(&self.nodes) {
                Ok(pairs) => {
                    for (n, a) in pairs {
                        if let Ok(ip) = a.parse() {
                            map.insert(n, ip);
                        }
                    }
                }
                Err(e) => say(&format!("no NodeAddr from scontrol ({e}); resolving names")),
            }
        }
        let resolver = MapResolver {
            map,
            fallback: Some(SystemResolver),
        };
        let munge = self
            .plugin
            .munge_socket
            .clone()
            .map(Munge::with_socket)
            .unwrap_or_default();
        let mut cfg = RendezvousConfig::new(
            self.nodes.clone(),
            &resolver,
            u64::from(self.args.job_id),
            munge,
            vec![0],
        )
        .map_err(|e| e.to_string())?;
        cfg.timeout = self.rendezvous_budget();
        Ok(cfg)
    }

    /// Meets the job's other nodes; the leader gets `Some(payloads by node, missing)`.
    fn meet(
        &self,
        payload: serde_json::Value,
    ) -> Option<(BTreeMap<String, serde_json::Value>, Vec<String>)> {
        let rank = self.nodes.iter().position(|n| n == &self.args.node)?;
        if self.nodes.len() == 1 {
            return Some(([(self.args.node.clone(), payload)].into(), vec![]));
        }
        let cfg = match self.rendezvous_config() {
            Ok(c) => c,
            Err(e) => {
                say(&format!("rendezvous not possible: {e}"));
                return None;
            }
        };
        match rendezvous::gather(&cfg, rank, &payload) {
            Ok(g) if rank == 0 => {
                for r in &g.rejected {
                    say(&format!("rendezvous refused a connection: {r}"));
                }
                let got = g
                    .payloads
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, p)| p.map(|p| (self.nodes[i].clone(), p)))
                    .collect();
                Some((got, g.missing))
            }
            Ok(_) => None,
            Err(e) => {
                say(&format!("rendezvous failed: {e}"));
                None
            }
        }
    }

    /// Reads the job's comment, lets `update` change the tag, writes it back (live job first,
    /// accounting database as a fallback).
    fn write_tag(&self, update: impl FnOnce(Option<tag::JobTag>) -> tag::JobTag) {
        let job = self.args.job_id;
        let comment = match self.slurm.admin_comment(job) {
            Ok(c) => c,
            Err(e) => {
                say(&format!(
                    "cannot read the job's AdminComment, tag not written: {e}"
                ));
                return;
            }
        };
        let previous = match tag::extract(&comment) {
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                say(&format!(
                    "replacing an unreadable fabric-check segment: {e}"
                ));
                None
            }
            None => None,
        };
        let new = update(previous);
        let text = tag::splice(&comment, &new);
        if let Err(e) = self.slurm.set_admin_comment(job, &text) {
            // A finished job only changes in the database, through sacctmgr, which in Slurm 22.05
            // lower-cases the whole value (and stores `"` as a backtick, which `tag::extract`
            // reads back). Our own segment survives that; another tool's content may not.
            let ours = tag::splice("", &new);
            let foreign = text.replacen(&ours, "", 1);
            if foreign.chars().any(char::is_uppercase) {
                say(&format!(
                    "tag not written: the job has finished ({e}) and sacctmgr would lower-case the other tools' content of its AdminComment"
                ));
                return;
            }
            if let Err(e) = self.slurm.set_admin_comment_db(job, &text.to_lowercase()) {
                say(&format!("tag not written: {e}"));
                return;
            }
        }
        say(&format!(
            "tagged job {job}: verdict {}",
            new.verdict.map_or("none", Verdict::as_str)
        ));
    }
}

/// The collective's data path uses its own ports, away from the verdict rendezvous.
const COLLECTIVE_PORT_BASE: u16 = fabric_core::invocation::ports::COLLECTIVE_BASE;

impl Step {
    /// `--fabric-check=full`: one rank of the cross-node collective, as a bounded grandchild.
    /// Every rank gets the same report, so each node knows whether it was named slow.
    fn collective(&self) -> Result<fabric_core::collective::Report, String> {
        let mut cmd = safe_command(&self.plugin.probe);
        cmd.args([
            "collective",
            "--format",
            "json",
            "--nodes",
            &self.args.nodes,
            "--node",
            &self.args.node,
        ]);
        cmd.args([
            "--job-id",
            &self.args.job_id.to_string(),
            "--allow-uid",
            "0",
        ]);
        cmd.args([
            "--port-base",
            &COLLECTIVE_PORT_BASE.to_string(),
            "--budget-ms",
            "3000",
        ]);
        if let Some(sock) = &self.plugin.munge_socket {
            cmd.arg("--munge-socket").arg(sock);
        }
        if let Some(ns) = &self.plugin.collective_netns {
            cmd.args(["--netns", &ns.replace("%n", &self.args.node)]);
        }
        if let Some(hosts) = &self.plugin.collective_hosts {
            let text = std::fs::read_to_string(hosts)
                .map_err(|e| format!("cannot read {}: {e}", hosts.display()))?;
            for (n, a) in stepgate::parse_hosts_file(&text) {
                cmd.args(["--addr", &format!("{n}={a}")]);
            }
        }
        let budget = Duration::from_millis(3000 + 2000);
        let done = run_bounded(cmd, None, budget).map_err(|e| format!("collective: {e}"))?;
        serde_json::from_slice(&done.stdout).map_err(|e| {
            format!(
                "collective gave no report (exit {}): {e}; {}",
                done.code(),
                done.stderr_text()
            )
        })
    }
}

/// `fabric-check prolog`.
pub fn prolog(args: Args) -> anyhow::Result<i32> {
    let step = Step::new(Script::Prolog, args)?;
    let snapshot = step.snapshot_path();
    let mut notes = Vec::new();
    let t0 = Instant::now();
    let (mut result, failing) = match step.probe(None, Some(&snapshot)) {
        Ok(report) => (
            jobstep::node_result(&report),
            jobstep::worst_finding(&report),
        ),
        Err(why) => {
            notes.push(format!("{}: {why}", step.args.node));
            let check = if why.contains("timed out") {
                check_id::PROBE_TIMEOUT
            } else {
                check_id::PROBE_ERROR
            };
            let r = NodeResult {
                verdict: Verdict::Error,
                checks: vec![check.into()],
                probe_ms: None,
                drained: false,
            };
            (r, Some((check.to_owned(), why)))
        }
    };
    let probe_ms = t0.elapsed().as_millis();
    say(&format!(
        "probe verdict {} on {} ({})",
        result.verdict.as_str(),
        step.args.node,
        if result.checks.is_empty() {
            "no findings".to_owned()
        } else {
            result.checks.join(",")
        }
    ));
    let wants_drain = match result.verdict {
        Verdict::Fail => step.plugin.policy == Policy::Enforce,
        Verdict::Error => step.plugin.drain_on_error && step.plugin.policy == Policy::Enforce,
        _ => false,
    };
    if wants_drain && let Some((check, message)) = &failing {
        result.drained = step.drain_self(check, message);
    }
    let mut collective = None;
    if step.args.option == FabricMode::Full && step.nodes.len() > 1 {
        match step.collective() {
            Ok(report) => {
                say(&format!(
                    "collective verdict {} among {} nodes{}",
                    report.verdict.as_str(),
                    report.nodes.len(),
                    if report.outliers.is_empty() {
                        String::new()
                    } else {
                        format!(", slow: {}", report.outliers.join(","))
                    }
                ));
                if report.outliers.contains(&step.args.node) {
                    result.verdict = result.verdict.max(Verdict::Fail);
                    result.checks.push(check_id::COLLECTIVE_SLOW_NODE.into());
                    if step.plugin.policy == Policy::Enforce && !result.drained {
                        let msg = report
                            .messages
                            .first()
                            .cloned()
                            .unwrap_or_else(|| "slowest node of the ring".into());
                        result.drained = step.drain_self(check_id::COLLECTIVE_SLOW_NODE, &msg);
                    }
                }
                collective = Some(report.summary());
            }
            Err(why) => {
                say(&why);
                notes.push(format!("{}: {why}", step.args.node));
            }
        }
    }
    if step.plugin.policy != Policy::Observe {
        let payload =
            serde_json::json!({ "result": result, "notes": notes, "collective": collective });
        if let Some((got, missing)) = step.meet(payload) {
            let mut nodes = BTreeMap::new();
            let mut all_notes = Vec::new();
            // Every rank holds the same collective report: take the first one present.
            let got_collective = got.values().find_map(|p| {
                serde_json::from_value::<tag::CollectiveSummary>(p["collective"].clone()).ok()
            });
            for (n, p) in got {
                if let Ok(r) = serde_json::from_value::<NodeResult>(p["result"].clone()) {
                    nodes.insert(n, r);
                }
                if let Some(ns) = p["notes"].as_array() {
                    all_notes.extend(ns.iter().filter_map(|v| v.as_str().map(str::to_owned)));
                }
            }
            for m in &missing {
                all_notes.push(format!("{m}: no verdict reached the first node in time"));
            }
            let mode = step.args.option.as_str();
            step.write_tag(|prev| {
                let mut t = jobstep::prolog_tag(prev, mode, now_unix(), nodes, missing, all_notes);
                t.collective = got_collective;
                t
            });
        }
    }
    say(&format!(
        "timing: probe {} ms, policy+rendezvous+tag {} ms",
        probe_ms,
        t0.elapsed().as_millis().saturating_sub(probe_ms)
    ));
    let exit = if result.drained {
        JobStepExit::Drained
    } else {
        JobStepExit::Proceed
    };
    // The plugin reads this line when slurmstepd reaped us before it could.
    say(&exit.line());
    Ok(exit.code())
}

/// This node's `fabric-run` records for the job, summarised, then removed. The spool is
/// user-writable and we are root: the reader refuses links and foreign owners and bounds sizes.
fn read_run_summary(step: &Step) -> Option<RunSummary> {
    let job = step.args.job_id.to_string();
    let path = record::node_records_path(&step.plugin.spool_dir, &job, &step.args.node)?;
    let limits = ReadLimits {
        owner_uid: step.args.job_uid,
        ..ReadLimits::default()
    };
    let summary = match record::summarize_records(&path, &limits) {
        Ok(s) => s,
        Err(RecordError::Missing(_)) => return None,
        Err(e) => {
            say(&format!("fabric-run records of job {job} skipped: {e}"));
            return None;
        }
    };
    if summary.malformed_lines > 0 {
        say(&format!(
            "fabric-run records of job {job}: {} malformed line(s) skipped",
            summary.malformed_lines
        ));
    }
    let _ = std::fs::remove_file(&path);
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir(dir);
    }
    Some(summary)
}

/// This node's step gate results for the job (Slurm 23.11+, `--fabric-check=full` steps), read
/// with the records' rules (the file is the user's), then removed with the gate's markers.
fn read_step_results(step: &Step) -> Vec<stepgate::StepResult> {
    let job = step.args.job_id.to_string();
    let Some(path) = stepgate::results_path(&step.plugin.spool_dir, &job, &step.args.node) else {
        return Vec::new();
    };
    let limits = ReadLimits {
        owner_uid: step.args.job_uid,
        max_bytes: 256 * 1024,
        ..ReadLimits::default()
    };
    let bytes = match record::read_user_file(&path, &limits) {
        Ok(b) => b,
        Err(RecordError::Missing(_)) => {
            remove_gate_markers(step, &path);
            return Vec::new();
        }
        Err(e) => {
            say(&format!("step results of job {job} skipped: {e}"));
            return Vec::new();
        }
    };
    let (results, bad) = stepgate::parse_results(&String::from_utf8_lossy(&bytes));
    if bad > 0 {
        say(&format!(
            "step results of job {job}: {bad} malformed line(s) skipped"
        ));
    }
    let _ = std::fs::remove_file(&path);
    remove_gate_markers(step, &path);
    results
        .into_iter()
        .filter(|r| r.node == step.args.node)
        .collect()
}

/// Removes this node's step gate markers (`<node>.step-<id>.done`) next to `results`, also
/// those of steps whose check left no result.
fn remove_gate_markers(step: &Step, results: &Path) {
    let Some(dir) = results.parent() else { return };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!("{}.step-", step.args.node);
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".done") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `fabric-check epilog`.
pub fn epilog(args: Args) -> anyhow::Result<i32> {
    let step = Step::new(Script::Epilog, args)?;
    let snapshot = step.snapshot_path();
    let during = match Baseline::load(&snapshot) {
        Ok(base) => match step.probe(Some(&snapshot), None) {
            Ok(report) => {
                let d = jobstep::during_job(&step.args.node, &base.counters, &report);
                if report.verdict == Verdict::Fail
                    && step.plugin.policy == Policy::Enforce
                    && let Some((check, message)) = jobstep::worst_finding(&report)
                {
                    step.drain_self(
                        &check,
                        &format!("during job {}: {message}", step.args.job_id),
                    );
                }
                Some(d)
            }
            Err(why) => {
                say(&format!("epilog probe on {}: {why}", step.args.node));
                None
            }
        },
        Err(e) => {
            say(&format!(
                "no prolog snapshot for job {} ({e}); no job-window counters",
                step.args.job_id
            ));
            None
        }
    };
    let _ = std::fs::remove_file(&snapshot);
    if let Some(d) = &during
        && !d.rises.is_empty()
    {
        let list: Vec<String> = d.rises.iter().map(|(k, v)| format!("{k}+{v}")).collect();
        say(&format!(
            "counters rose during job {} on {}: {}",
            step.args.job_id,
            step.args.node,
            list.join(" ")
        ));
    }
    if step.plugin.policy == Policy::Observe {
        return Ok(0);
    }
    let run = read_run_summary(&step);
    let step_results = read_step_results(&step);
    for r in step_results.iter().filter(|r| r.slow_here) {
        let why = r
            .message
            .clone()
            .unwrap_or_else(|| "slowest node of the ring".into());
        say(&format!(
            "step {}.{}: {} was named slow: {why}",
            step.args.job_id, r.step, step.args.node
        ));
        if step.plugin.policy == Policy::Enforce {
            step.drain_self(
                check_id::COLLECTIVE_SLOW_NODE,
                &format!("step {}.{}: {why}", step.args.job_id, r.step),
            );
        }
    }
    let steps: Vec<tag::CollectiveSummary> =
        step_results.into_iter().map(|r| r.collective).collect();
    let payload = serde_json::json!({ "during": during, "run": run, "steps": steps });
    if let Some((got, _missing)) = step.meet(payload) {
        let runs: Vec<RunSummary> = got
            .values()
            .filter_map(|p| serde_json::from_value::<RunSummary>(p["run"].clone()).ok())
            .collect();
        let run = record::merge_nodes(&runs);
        let steps: Vec<tag::CollectiveSummary> = got
            .values()
            .filter_map(|p| {
                serde_json::from_value::<Vec<tag::CollectiveSummary>>(p["steps"].clone()).ok()
            })
            .flatten()
            .collect();
        let mut rows: Vec<DuringJob> = got
            .into_values()
            .filter_map(|p| serde_json::from_value::<DuringJob>(p["during"].clone()).ok())
            .filter(|d| !d.rises.is_empty() || d.verdict != Verdict::Pass)
            .collect();
        rows.sort_by(|a, b| a.node.cmp(&b.node));
        if rows.is_empty() && run.is_none() && steps.is_empty() {
            say(&format!(
                "job {}: no counter rose and no fabric-run records; tag unchanged",
                step.args.job_id
            ));
            say(&JobStepExit::Proceed.line());
            return Ok(JobStepExit::Proceed.code());
        }
        step.write_tag(|prev| {
            let mut t = prev.unwrap_or_default();
            t.during = rows;
            if run.is_some() {
                t.run = run;
            }
            t.collective = stepgate::worst(t.collective.take(), &steps);
            t
        });
    }
    say(&JobStepExit::Proceed.line());
    Ok(JobStepExit::Proceed.code())
}
