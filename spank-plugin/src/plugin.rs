//! What each SPANK callback does, written against [`Host`] so it can be tested without Slurm.

use fabric_proto::fabric_option::FabricMode;
use fabric_proto::hostlist::{Hostlist, Limits};
use fabric_proto::invocation::{BATCH_STEP_ID, FIRST_SPECIAL_STEP_ID, Invocation, JobStepExit};
use fabric_proto::plugin_args::{ArgProblem, JobMode, PluginArgs};
use fabric_proto::record::PLUGIN_SPOOL_ENV;

use crate::spawn::{self, Outcome};

/// Where the plugin is running (`spank_context()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// srun.
    Local,
    /// slurmstepd.
    Remote,
    /// sbatch or salloc.
    Allocator,
    /// slurmd itself.
    Slurmd,
    /// `slurmstepd spank prolog|epilog`.
    JobScript,
    /// Anything else (an error from Slurm).
    Unknown,
}

impl Context {
    /// The lower-case name used in logs and test hooks.
    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Remote => "remote",
            Self::Allocator => "allocator",
            Self::Slurmd => "slurmd",
            Self::JobScript => "job_script",
            Self::Unknown => "unknown",
        }
    }

    /// Whether `slurm_spank_init` registers the option here (srun, sbatch/salloc, slurmstepd).
    /// Everywhere else (slurmd, the prolog/epilog processes, or a context Slurm cannot name) a
    /// failing init would stop a daemon or fail a job script for nothing, so it never fails:
    /// Slurm refuses to start slurmd when a required plugin's init fails.
    pub fn registers_option(self) -> bool {
        matches!(self, Self::Local | Self::Remote | Self::Allocator)
    }
}

/// What the plugin needs from its host process; implemented over a live `spank_t` in `ffi`.
pub trait Host {
    /// The calling context.
    fn context(&self) -> Context;
    /// Registers `--fabric-check` (only valid inside `slurm_spank_init`).
    fn register_option(&self) -> Result<(), String>;
    /// `None` when the user did not give the option, `Some(None)` for a bare flag seen as NULL,
    /// `Some(Some(value))` otherwise (a bare flag may arrive as `"(null)"`).
    fn option(&self) -> Option<Option<String>>;
    /// The job id (`S_JOB_ID`).
    fn job_id(&self) -> Option<u32>;
    /// The job owner's uid (`S_JOB_UID`).
    fn job_uid(&self) -> Option<u32>;
    /// Logs at info level (the slurmd log in the prolog).
    fn info(&self, msg: &str);
    /// Logs at error level (shown to the user in srun/sbatch).
    fn error(&self, msg: &str);
    /// Logs at debug level.
    fn debug(&self, msg: &str);
    /// The step id (`S_JOB_STEPID`), in a task.
    fn step_id(&self) -> Option<u32> {
        None
    }
    /// This node's index among the step's nodes (`S_JOB_NODEID`), in slurmstepd.
    fn node_id(&self) -> Option<u32> {
        None
    }
    /// The step's node count (`S_JOB_NNODES`), in slurmstepd.
    fn step_nnodes(&self) -> Option<u32> {
        None
    }
    /// A variable of the job's environment (`spank_getenv`, remote context). The job's user
    /// sets that environment: what it says is hostile and is checked against what Slurm says.
    fn job_env(&self, _name: &str) -> Option<String> {
        None
    }
    /// Whether the host offers `spank_prepend_task_argv` (Slurm 23.11 and newer), found at run
    /// time: referencing it at link time would stop the plugin loading on older Slurm.
    fn can_prepend_task_argv(&self) -> bool {
        false
    }
    /// Sets `name=value` in the job's environment (`spank_setenv`, remote context), replacing
    /// a value the user set.
    fn setenv(&self, _name: &str, _value: &str) -> Result<(), String> {
        Err("spank_setenv is not available".into())
    }
    /// Prepends `argv` to the task's command line (valid in `slurm_spank_task_init`).
    fn prepend_task_argv(&self, _argv: &[String]) -> Result<(), String> {
        Err("spank_prepend_task_argv is not available".into())
    }
}

#[cfg(feature = "test-hooks")]
mod hooks {
    //! Test-only: `test_panic=<callback>` makes that callback panic, to prove the guard holds.
    use std::sync::Mutex;

    static PANIC_IN: Mutex<Option<String>> = Mutex::new(None);

    pub(super) fn take_hook_args(words: &[String]) -> Vec<String> {
        let mut rest = Vec::new();
        for w in words {
            match w.strip_prefix("test_panic=") {
                Some(cb) => {
                    if let Ok(mut g) = PANIC_IN.lock() {
                        *g = Some(cb.to_owned());
                    }
                }
                None => rest.push(w.clone()),
            }
        }
        rest
    }

    /// Panics when the hook names `callback`, or `callback:<context>` in that context
    /// (`local`, `remote`, `allocator`, `slurmd`, `job_script`).
    pub(super) fn maybe_panic(callback: &str, ctx: super::Context) {
        let want = PANIC_IN.lock().ok().and_then(|g| g.clone());
        let hit = match want
            .as_deref()
            .map(|w| w.split_once(':').unwrap_or((w, "")))
        {
            Some((cb, "")) => cb == callback,
            Some((cb, c)) => cb == callback && c == ctx.name(),
            None => false,
        };
        if hit {
            panic!("test hook: forced panic in {callback}");
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
mod hooks {
    pub(super) fn take_hook_args(words: &[String]) -> Vec<String> {
        words.to_vec()
    }

    pub(super) fn maybe_panic(_callback: &str, _ctx: super::Context) {}
}

fn parse_args(words: &[String]) -> (PluginArgs, Vec<ArgProblem>) {
    let words = hooks::take_hook_args(words);
    PluginArgs::parse(words.iter().map(String::as_str))
}

fn report_problems(host: &dyn Host, problems: &[ArgProblem], loud: bool) {
    for p in problems {
        let msg = format!("fabric-check: plugstack.conf: {p}");
        if loud {
            host.error(&msg)
        } else {
            host.debug(&msg)
        }
    }
}

/// `slurm_spank_init`: registers the option in srun, sbatch/salloc and slurmstepd.
pub fn init(host: &dyn Host, words: &[String]) -> Result<(), String> {
    let (_, problems) = parse_args(words);
    let ctx = host.context();
    hooks::maybe_panic("init", ctx);
    // Users see errors logged in srun/sbatch; admin mistakes are for the slurmd log.
    report_problems(host, &problems, ctx == Context::Remote);
    if ctx.registers_option() {
        host.register_option()
    } else {
        Ok(())
    }
}

/// The option callback: refuses an invalid value at submission with the valid values named.
pub fn option_value(_val: i32, optarg: Option<&str>, _remote: bool) -> Result<(), String> {
    hooks::maybe_panic("option", Context::Unknown);
    FabricMode::from_optarg(optarg)
        .map(|_| ())
        .map_err(|e| format!("fabric-check: {e}"))
}

/// What the prolog learnt about the job's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The job id, when Slurm gave it.
    pub job_id: Option<u32>,
    /// The node name from `SLURMD_NODENAME`.
    pub node: Option<String>,
    /// The option's value; `None` when not given.
    pub mode: Option<FabricMode>,
}

/// Reads the job's `--fabric-check` request; an invalid value (which srun would have refused)
/// is logged and treated as not given.
pub fn read_request(host: &dyn Host, node: Option<String>) -> Request {
    let mode = match host.option() {
        None => None,
        Some(raw) => match FabricMode::from_optarg(raw.as_deref()) {
            Ok(m) => Some(m),
            Err(e) => {
                host.error(&format!(
                    "fabric-check: {e}; treating the job as not asking"
                ));
                None
            }
        },
    };
    Request {
        job_id: host.job_id(),
        node,
        mode,
    }
}

/// Whether this job is checked, given the admin's mode and the user's option.
pub fn wants_check(mode: JobMode, asked: Option<FabricMode>) -> bool {
    match (mode, asked) {
        (JobMode::Off, _) | (_, Some(FabricMode::Off)) => false,
        (JobMode::Always, _) => true,
        (JobMode::OptIn, asked) => asked.is_some(),
    }
}

/// Which job script is running (`slurm_spank_job_prolog` or `slurm_spank_job_epilog`).
pub use fabric_proto::invocation::Script;

/// What a job script reads from the environment slurmstepd gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptEnv {
    /// `SLURMD_NODENAME`.
    pub node: Option<String>,
    /// `SLURM_JOB_NODELIST` (or `SLURM_NODELIST`).
    pub nodes: Option<String>,
    /// `SLURM_CONF`: slurmd's own setting, passed to the child.
    pub slurm_conf: Option<String>,
}

impl ScriptEnv {
    /// From this process's environment.
    pub fn from_process() -> Self {
        Self {
            node: std::env::var("SLURMD_NODENAME").ok(),
            nodes: std::env::var("SLURM_JOB_NODELIST")
                .or_else(|_| std::env::var("SLURM_NODELIST"))
                .ok(),
            slurm_conf: std::env::var("SLURM_CONF").ok(),
        }
    }

    /// What the child's environment gets: `SLURM_CONF`, slurmd's own setting, not the job's;
    /// nothing else is passed on.
    fn passed_on(&self) -> Vec<(&'static str, String)> {
        self.slurm_conf
            .clone()
            .map(|v| ("SLURM_CONF", v))
            .into_iter()
            .collect()
    }
}

/// `slurm_spank_job_prolog` and `slurm_spank_job_epilog`: read the request, log it, and when the
/// job is checked run `fabric-check prolog|epilog` as a child with the plugin's hard timeout.
///
/// Only the prolog ever fails: when the child says this node failed and was drained (exit 2, or
/// its decision line `fabric-check-exit=2` when the exit status is lost, it timed out or it was
/// killed: the child prints that line as soon as the drain is applied), so Slurm requeues the
/// job elsewhere. A child that could not run, crashed or timed out without a drain is logged and
/// the job proceeds: "the probe could not look" is not a node failure.
pub fn job_script(host: &dyn Host, words: &[String], script: Script) -> Result<(), String> {
    job_script_in(host, words, script, &ScriptEnv::from_process())
}

/// [`job_script`] with the environment given.
pub fn job_script_in(
    host: &dyn Host,
    words: &[String],
    script: Script,
    env: &ScriptEnv,
) -> Result<(), String> {
    let (args, problems) = parse_args(words);
    report_problems(host, &problems, script == Script::Prolog);
    match script {
        Script::Prolog => hooks::maybe_panic("job_prolog", Context::JobScript),
        Script::Epilog => hooks::maybe_panic("job_epilog", Context::JobScript),
        Script::StepEnd | Script::Watch => hooks::maybe_panic("exit", Context::Remote),
    }
    let req = read_request(host, env.node.clone());
    let job = req.job_id.map_or_else(|| "?".to_owned(), |j| j.to_string());
    let node = req.node.clone().unwrap_or_else(|| "?".to_owned());
    let checked = wants_check(args.mode, req.mode);
    let tag = format!("fabric-check: {} job={job} node={node}", script.as_str());
    if script == Script::Prolog {
        host.info(&format!(
            "{tag} option={} action={}",
            req.mode.map_or("none", FabricMode::as_str),
            if checked { "check" } else { "none" }
        ));
    }
    if !checked {
        return Ok(());
    }
    let (Some(job_id), Some(node_name)) = (req.job_id, req.node) else {
        host.error(&format!("{tag}: no job id or SLURMD_NODENAME; not checked"));
        return Ok(());
    };
    let nodes = env.nodes.clone().unwrap_or_else(|| node_name.clone());
    let child_args = Invocation {
        script,
        job_id,
        node: node_name,
        nodes,
        option: req.mode.unwrap_or(FabricMode::Quick),
        job_uid: host.job_uid(),
        step_id: None,
        plugin_args: hooks::take_hook_args(words),
    }
    .to_argv();
    let ran = run_child(host, &args, &child_args, env, &tag);
    let ms = ran.elapsed.as_millis();
    let said = JobStepExit::from_output(&ran.output);
    // The exit code when it is one of ours; otherwise (timed out, killed, reaped by slurmstepd,
    // crashed) the last decision line the child printed.
    let decision = match ran.outcome {
        Outcome::Exited(c) => JobStepExit::from_code(c).or(said),
        Outcome::Signalled(_) | Outcome::TimedOut => said,
        Outcome::SpawnFailed(_) => None,
    };
    if script == Script::Prolog && decision == Some(JobStepExit::Drained) {
        let how = match ran.outcome {
            Outcome::Exited(_) => String::new(),
            ref o => format!(", and then it ended early ({o:?})"),
        };
        return Err(format!(
            "{tag}: this node failed its fabric check and is drained{how}; Slurm requeues the job ({ms} ms)"
        ));
    }
    match ran.outcome {
        Outcome::Exited(c) if JobStepExit::from_code(c) == Some(JobStepExit::Proceed) => {
            host.info(&format!("{tag}: done in {ms} ms"));
            Ok(())
        }
        Outcome::TimedOut => {
            host.error(&format!(
                "{tag}: {} timed out after {} s and was killed; the job proceeds unchecked",
                args.probe.display(),
                args.timeout.as_secs()
            ));
            Ok(())
        }
        other => {
            host.error(&format!(
                "{tag}: {} {} failed ({other:?}); probe error, the job proceeds unchecked",
                args.probe.display(),
                script.as_str()
            ));
            Ok(())
        }
    }
}

/// `slurm_spank_user_init` (in slurmstepd, as the job's user, before its tasks start, for every
/// step including the batch script): tells the tasks where `fabric-run` delivers its records,
/// [`PLUGIN_SPOOL_ENV`] = `spool_dir=`, so the wrapper needs no configuration. The epilog never
/// reads that variable (the user may change it); it reads `spool_dir=` itself. Never fails the
/// step: a problem is logged.
pub fn user_init(host: &dyn Host, words: &[String]) -> Result<(), String> {
    if host.context() != Context::Remote {
        return Ok(());
    }
    hooks::maybe_panic("user_init", Context::Remote);
    let (args, _) = parse_args(words);
    if args.mode == JobMode::Off {
        return Ok(());
    }
    remember_step_request(read_request(host, None).mode);
    let Some(dir) = args.spool_dir.to_str() else {
        host.error("fabric-check: spool_dir= is not UTF-8; fabric-run is not told where to record");
        return Ok(());
    };
    if let Err(e) = host.setenv(PLUGIN_SPOOL_ENV, dir) {
        host.error(&format!(
            "fabric-check: cannot set {PLUGIN_SPOOL_ENV} ({e}); fabric-run records go to its default"
        ));
    }
    Ok(())
}

/// Runs the job-step binary (`probe=`) with `child_args`, bounded by `timeout=`, with only
/// slurmd's own `SLURM_CONF` passed on, and relays what it printed (but its decision lines) to
/// the slurmd log under `tag`.
fn run_child(
    host: &dyn Host,
    args: &PluginArgs,
    child_args: &[String],
    env: &ScriptEnv,
    tag: &str,
) -> spawn::Ran {
    let ran = spawn::run(&args.probe, child_args, &env.passed_on(), args.timeout);
    for line in ran
        .output
        .lines()
        .filter(|l| !JobStepExit::is_line(l) && !l.trim().is_empty())
    {
        host.info(&format!("{tag}: {line}"));
    }
    ran
}

/// What the plugin returns to Slurm for a job script whose callback returned `rc` (0, or -1 for
/// an error or a caught panic, already logged).
///
/// Only the prolog may fail: that is how a node that failed its check keeps the job off it. A
/// failing epilog is never a fabric fault (the epilog only delivers records and the tag), yet
/// slurmd reports it and slurmctld drains the node with "Epilog error"; so an epilog problem is
/// logged and the epilog succeeds.
pub fn script_rc(script: Script, rc: i32) -> i32 {
    match script {
        Script::Prolog => rc,
        Script::Epilog | Script::StepEnd | Script::Watch => 0,
    }
}

/// The command `slurm_spank_task_init` prepends to every task of a `--fabric-check=full` step:
/// `<probe> step-gate --plugin-arg WORD... --`, followed by the task's own command line.
pub fn step_gate_argv(args: &PluginArgs, words: &[String]) -> Vec<String> {
    let mut argv = vec![args.probe.display().to_string(), "step-gate".to_owned()];
    argv.extend(
        hooks::take_hook_args(words)
            .into_iter()
            .map(|w| format!("--plugin-arg={w}")),
    );
    argv.push("--".to_owned());
    argv
}

/// `slurm_spank_task_init` (in each task, as the job's user, before it execs): on Slurm 23.11
/// and newer, a step run with `--fabric-check=full` gets the step gate prepended, which runs the
/// collective among the step's nodes and then execs the task. On older Slurm, or for any other
/// step, nothing happens (the job prolog ran the collective among the job's nodes). Never fails
/// the task for a problem of ours: it is logged and the task runs unchecked.
pub fn task_init(host: &dyn Host, words: &[String]) -> Result<(), String> {
    if host.context() != Context::Remote {
        return Ok(());
    }
    hooks::maybe_panic("task_init", Context::Remote);
    let (args, _) = parse_args(words);
    let asked = read_request(host, None).mode;
    if !wants_check(args.mode, asked) || asked != Some(FabricMode::Full) {
        return Ok(());
    }
    if host.step_id().is_none_or(|id| id >= FIRST_SPECIAL_STEP_ID) {
        return Ok(());
    }
    if !host.can_prepend_task_argv() {
        host.debug(
            "fabric-check: no spank_prepend_task_argv (Slurm before 23.11): the job prolog ran the collective",
        );
        return Ok(());
    }
    if let Err(e) = host.prepend_task_argv(&step_gate_argv(&args, words)) {
        host.error(&format!(
            "fabric-check: cannot run the step's collective ({e}); the task runs unchecked"
        ));
    }
    Ok(())
}

/// The step's `--fabric-check` request as `slurm_spank_user_init` read it: Slurm refuses
/// `spank_option_getopt` in `slurm_spank_exit` (`ESPANK_NOT_AVAIL` in the `SPANK_EXIT` phase,
/// `src/common/plugstack.c` / `spank.c`), so the step's end uses what its start saw. One
/// slurmstepd per step, no threads: a process-wide cell is the step's own.
static STEP_REQUEST: std::sync::Mutex<Option<FabricMode>> = std::sync::Mutex::new(None);

fn remember_step_request(mode: Option<FabricMode>) {
    if let Ok(mut g) = STEP_REQUEST.lock() {
        *g = mode;
    }
}

fn remembered_step_request() -> Option<FabricMode> {
    STEP_REQUEST.lock().ok().and_then(|g| *g)
}

/// `slurm_spank_exit` in slurmstepd (remote context, as root, once the step's tasks have
/// ended and before slurmstepd reports the step complete, the job still running): on the step's
/// first node (`S_JOB_NODEID` 0) of a checked job, when that node holds `fabric-run` records for
/// the job, runs `fabric-check step-end`, which puts the node's run summary into the live tag.
/// A step on several nodes (its `SLURM_STEP_NODELIST`, checked) runs it on every node where the prolog made the
/// job's spool folder, with the step's nodes: they meet at the first, which writes the summary
/// of all of them.
/// The batch script's step counts too (its end is the job's last live moment); the extern step
/// (it ends with the job) and a step without records spawn nothing and make no Slurm call.
/// Never fails the step: what goes wrong is logged.
pub fn step_exit(host: &dyn Host, words: &[String]) -> Result<(), String> {
    step_exit_in(
        host,
        words,
        &ScriptEnv::from_process(),
        remembered_step_request(),
    )
}

/// Whether this node's records file is in the job's spool folder, looked up inside slurmstepd
/// without following a link the job's user could have planted: the job's folder (the user's)
/// is opened `O_PATH | O_NOFOLLOW | O_DIRECTORY`, so a folder swapped for a link to an
/// automounted or NFS path is refused at once instead of being walked into (with no time bound
/// there), and the file is looked at relative to that descriptor without following it.
fn records_present(spool: &std::path::Path, job: &str, node: &str) -> bool {
    use nix::fcntl::{AtFlags, OFlag};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(file) = fabric_proto::record::node_records_path(spool, job, node) else {
        return false;
    };
    let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
        return false;
    };
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(dir) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(dir)
    else {
        return false;
    };
    nix::sys::stat::fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
}

/// [`step_exit`] with the environment given (slurmstepd sets `SLURMD_NODENAME` in its own
/// environment, `src/slurmd/slurmstepd/slurmstepd.c`; the job's environment is never read) and
/// the request `slurm_spank_user_init` saw (used when Slurm no longer answers the option).
pub fn step_exit_in(
    host: &dyn Host,
    words: &[String],
    env: &ScriptEnv,
    seen_at_start: Option<FabricMode>,
) -> Result<(), String> {
    if host.context() != Context::Remote {
        return Ok(());
    }
    hooks::maybe_panic("exit", Context::Remote);
    let (args, _) = parse_args(words);
    let asked = read_request(host, None).mode.or(seen_at_start);
    if !wants_check(args.mode, asked) {
        return Ok(());
    }
    let (Some(job_id), Some(step_id)) = (host.job_id(), host.step_id()) else {
        return Ok(());
    };
    let counted = step_id < FIRST_SPECIAL_STEP_ID || step_id == BATCH_STEP_ID;
    if !counted {
        return Ok(());
    }
    let Some(node) = env.node.clone() else {
        host.debug("fabric-check: step end: no SLURMD_NODENAME in slurmstepd; left to the epilog");
        return Ok(());
    };
    // The batch script's step runs on the first node alone, whatever its environment says.
    let several = if step_id == BATCH_STEP_ID {
        None
    } else {
        step_nodes(host, &node)
    };
    let nodes = match several {
        // A step on several nodes: every node meets the first with its summary, so every node
        // where the prolog made the job's spool folder runs the child (a node without records
        // still tells the first node so, rather than leave it waiting).
        Some(list) => {
            let folder = args.spool_dir.join(job_id.to_string());
            if std::fs::symlink_metadata(folder).is_err() {
                return Ok(());
            }
            list
        }
        None => {
            if host.node_id() != Some(0) {
                return Ok(());
            }
            // The cheap test first: no records file of this node, no child and no Slurm call.
            if !records_present(&args.spool_dir, &job_id.to_string(), &node) {
                return Ok(());
            }
            node.clone()
        }
    };
    let child_args = Invocation {
        script: Script::StepEnd,
        job_id,
        nodes,
        node: node.clone(),
        option: asked.unwrap_or(FabricMode::Quick),
        job_uid: host.job_uid(),
        step_id: Some(step_id),
        plugin_args: hooks::take_hook_args(words),
    }
    .to_argv();
    let tag = format!("fabric-check: step-end job={job_id}.{step_id} node={node}");
    let ran = run_child(host, &args, &child_args, env, &tag);
    let ms = ran.elapsed.as_millis();
    match ran.outcome {
        Outcome::Exited(c) if JobStepExit::from_code(c) == Some(JobStepExit::Proceed) => {
            host.info(&format!("{tag}: done in {ms} ms"));
        }
        Outcome::TimedOut => host.error(&format!(
            "{tag}: timed out after {} s and was killed; the epilog writes the run summary",
            args.timeout.as_secs()
        )),
        other => host.error(&format!(
            "{tag}: {} step-end failed ({other:?}); the epilog writes the run summary",
            args.probe.display()
        )),
    }
    Ok(())
}

/// The most nodes a step's end meets across (a larger step leaves its summary to the epilog).
const MAX_STEP_NODES: u32 = 4096;

/// The longest node name a step's list is believed to hold (a DNS name's 255 bytes): the
/// expansion of a list of `n` nodes is bounded to `n` times this.
const MAX_NODE_NAME_BYTES: u64 = 255;

/// The step's nodes when it runs on several, as a hostlist, or `None` (one node, or what the
/// job's environment says does not agree with Slurm). `SLURM_STEP_NODELIST` comes from the
/// job's environment, which its user controls: it is believed only when it names exactly
/// `S_JOB_NNODES` nodes and this node at its `S_JOB_NODEID`. A lie could then only misdirect
/// the job's own step-end meeting (MUNGE-authenticated as root, bounded by `timeout=`), whose
/// result is the job's own reported summary.
///
/// It costs nothing before it is believed: Slurm's count is checked against
/// [`MAX_STEP_NODES`] first; the list is parsed within that count (a range of more numbers is
/// refused as it is read) and counted, in names and in bytes, with checked arithmetic; only a
/// list of exactly that many names of at most [`MAX_NODE_NAME_BYTES`] each is expanded.
fn step_nodes(host: &dyn Host, node: &str) -> Option<String> {
    let (count, id) = (host.step_nnodes()?, host.node_id()?);
    let disbelieved = |why: &str| {
        host.debug(&format!(
            "fabric-check: step end: SLURM_STEP_NODELIST does not match the step ({count} nodes, this node {id}: {why}); the first node's summary only"
        ));
        None
    };
    if count < 2 {
        return None;
    }
    if count > MAX_STEP_NODES {
        host.debug(&format!(
            "fabric-check: step end: a step of {count} nodes (over {MAX_STEP_NODES}); the first node's summary only"
        ));
        return None;
    }
    let list = host.job_env("SLURM_STEP_NODELIST")?;
    let limits = Limits {
        names: u64::from(count),
        bytes: u64::from(count) * MAX_NODE_NAME_BYTES,
    };
    let parsed = match Hostlist::parse_within(&list, limits) {
        Ok(parsed) => parsed,
        Err(e) => return disbelieved(&e.to_string()),
    };
    if parsed.count() != Some(u64::from(count)) {
        return disbelieved("another number of names");
    }
    let names = match parsed.expand_within(limits) {
        Ok(names) => names,
        Err(e) => return disbelieved(&e.to_string()),
    };
    if names.get(id as usize).map(String::as_str) != Some(node) {
        return disbelieved("this node is not at its index");
    }
    Some(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[derive(Default)]
    struct FakeHost {
        ctx: Option<Context>,
        opt: Option<Option<String>>,
        log: RefCell<Vec<String>>,
        registered: RefCell<u32>,
        step: Option<u32>,
        node_id: Option<u32>,
        prepend: bool,
        prepended: RefCell<Vec<Vec<String>>>,
        env: RefCell<Vec<(String, String)>>,
        step_nodes: Option<(String, u32)>,
    }

    impl Host for FakeHost {
        fn context(&self) -> Context {
            self.ctx.unwrap_or(Context::Unknown)
        }
        fn register_option(&self) -> Result<(), String> {
            *self.registered.borrow_mut() += 1;
            Ok(())
        }
        fn option(&self) -> Option<Option<String>> {
            self.opt.clone()
        }
        fn job_id(&self) -> Option<u32> {
            Some(42)
        }
        fn job_uid(&self) -> Option<u32> {
            Some(1000)
        }
        fn info(&self, m: &str) {
            self.log.borrow_mut().push(format!("info {m}"));
        }
        fn error(&self, m: &str) {
            self.log.borrow_mut().push(format!("error {m}"));
        }
        fn debug(&self, m: &str) {
            self.log.borrow_mut().push(format!("debug {m}"));
        }
        fn step_id(&self) -> Option<u32> {
            self.step
        }
        fn node_id(&self) -> Option<u32> {
            self.node_id
        }
        fn can_prepend_task_argv(&self) -> bool {
            self.prepend
        }
        fn prepend_task_argv(&self, argv: &[String]) -> Result<(), String> {
            self.prepended.borrow_mut().push(argv.to_vec());
            Ok(())
        }
        fn setenv(&self, name: &str, value: &str) -> Result<(), String> {
            self.env.borrow_mut().push((name.into(), value.into()));
            Ok(())
        }
        fn step_nnodes(&self) -> Option<u32> {
            self.step_nodes.as_ref().map(|(_, n)| *n)
        }
        fn job_env(&self, name: &str) -> Option<String> {
            (name == "SLURM_STEP_NODELIST")
                .then(|| self.step_nodes.as_ref().map(|(l, _)| l.clone()))
                .flatten()
        }
    }

    #[test]
    fn every_step_is_told_the_admins_spool_dir_and_nothing_outside_slurmstepd() {
        let words = ["spool_dir=/srv/fc-spool".to_owned()];
        let remote = FakeHost {
            ctx: Some(Context::Remote),
            ..FakeHost::default()
        };
        user_init(&remote, &words).unwrap();
        assert_eq!(
            *remote.env.borrow(),
            vec![(PLUGIN_SPOOL_ENV.to_owned(), "/srv/fc-spool".to_owned())]
        );
        let default = FakeHost {
            ctx: Some(Context::Remote),
            ..FakeHost::default()
        };
        user_init(&default, &[]).unwrap();
        assert_eq!(
            default.env.borrow()[0].1,
            fabric_proto::record::DEFAULT_SPOOL_ROOT
        );
        for ctx in [Context::Local, Context::Allocator, Context::JobScript] {
            let h = FakeHost {
                ctx: Some(ctx),
                ..FakeHost::default()
            };
            user_init(&h, &words).unwrap();
            assert!(h.env.borrow().is_empty(), "{ctx:?}");
        }
        let off = FakeHost {
            ctx: Some(Context::Remote),
            ..FakeHost::default()
        };
        user_init(&off, &["mode=off".to_owned()]).unwrap();
        assert!(off.env.borrow().is_empty());
    }

    fn task_host(opt: &str, step: u32, prepend: bool) -> FakeHost {
        FakeHost {
            ctx: Some(Context::Remote),
            opt: Some(Some(opt.to_owned())),
            step: Some(step),
            prepend,
            ..FakeHost::default()
        }
    }

    #[test]
    fn a_full_step_gets_the_step_gate_in_front_of_its_command() {
        let h = task_host("full", 1, true);
        let words = [
            "probe=/opt/fc/fabric-check".to_owned(),
            "timeout=9".to_owned(),
        ];
        task_init(&h, &words).unwrap();
        assert_eq!(
            *h.prepended.borrow(),
            vec![vec![
                "/opt/fc/fabric-check".to_owned(),
                "step-gate".to_owned(),
                "--plugin-arg=probe=/opt/fc/fabric-check".to_owned(),
                "--plugin-arg=timeout=9".to_owned(),
                "--".to_owned(),
            ]]
        );
    }

    #[test]
    fn quick_steps_special_steps_and_old_slurm_get_no_step_gate() {
        for (opt, step, prepend) in [
            ("quick", 1, true),
            ("off", 1, true),
            ("full", 0xffff_fffb, true),
            ("full", 0xffff_fffc, true),
            ("full", 3, false),
        ] {
            let h = task_host(opt, step, prepend);
            task_init(&h, &[]).unwrap();
            assert!(h.prepended.borrow().is_empty(), "{opt} {step:#x} {prepend}");
        }
        let local = FakeHost {
            ctx: Some(Context::Local),
            ..task_host("full", 1, true)
        };
        task_init(&local, &[]).unwrap();
        assert!(local.prepended.borrow().is_empty());
        let off = task_host("full", 1, true);
        task_init(&off, &["mode=off".to_owned()]).unwrap();
        assert!(off.prepended.borrow().is_empty());
    }

    #[test]
    fn init_registers_the_option_in_srun_sbatch_and_slurmstepd_only() {
        for (ctx, want) in [
            (Context::Local, 1),
            (Context::Remote, 1),
            (Context::Allocator, 1),
            (Context::Slurmd, 0),
            (Context::JobScript, 0),
        ] {
            let h = FakeHost {
                ctx: Some(ctx),
                ..FakeHost::default()
            };
            init(&h, &[]).unwrap();
            assert_eq!(*h.registered.borrow(), want, "{ctx:?}");
        }
    }

    #[test]
    fn a_bogus_option_value_is_refused_naming_the_valid_values() {
        let err = option_value(1, Some("bogus"), false).unwrap_err();
        assert!(err.contains("quick, full or off"), "{err}");
        assert!(option_value(1, None, false).is_ok());
        assert!(option_value(1, Some("full"), true).is_ok());
    }

    #[test]
    fn the_prolog_reads_a_bare_flag_as_quick() {
        let h = FakeHost {
            opt: Some(Some("(null)".into())),
            ..FakeHost::default()
        };
        let req = read_request(&h, Some("n1".into()));
        assert_eq!(req.mode, Some(FabricMode::Quick));
        assert_eq!(req.job_id, Some(42));
    }

    #[test]
    fn the_prolog_treats_an_absent_option_as_not_asking() {
        let h = FakeHost::default();
        assert_eq!(read_request(&h, None).mode, None);
    }

    #[test]
    fn unknown_plugin_arguments_are_logged_by_name_in_the_prolog() {
        let h = FakeHost::default();
        job_script(&h, &["timout=3".to_owned()], Script::Prolog).unwrap();
        let log = h.log.borrow();
        assert!(
            log.iter()
                .any(|l| l.starts_with("error") && l.contains("\"timout\"")),
            "{log:?}"
        );
        assert!(
            log.iter().any(|l| l.contains("option=none action=none")),
            "{log:?}"
        );
    }

    /// A prolog child that prints `body` (a shell script), run by the plugin with `timeout=1`.
    /// The prolog with a stand-in child running `body` under the plugin's `timeout=` of
    /// `timeout_s` (long enough that a loaded machine still runs the child's first lines).
    fn prolog_with_child(body: &str, timeout_s: u32) -> (Result<(), String>, Vec<String>) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let child = dir.path().join("fabric-check");
        std::fs::write(&child, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).unwrap();
        let h = FakeHost {
            opt: Some(Some("quick".into())),
            ..FakeHost::default()
        };
        let env = ScriptEnv {
            node: Some("n1".into()),
            nodes: Some("n1".into()),
            slurm_conf: None,
        };
        let words = [
            format!("probe={}", child.display()),
            format!("timeout={timeout_s}"),
        ];
        let r = job_script_in(&h, &words, Script::Prolog, &env);
        let log = h.log.borrow().clone();
        (r, log)
    }

    #[test]
    fn a_prolog_child_that_hangs_after_its_drain_fails_the_prolog_so_the_job_leaves_the_node() {
        let (r, log) = prolog_with_child(
            "echo 'drained n1: fabric-check: ib.port_state: x'; echo fabric-check-exit=2; exec sleep 30",
            3,
        );
        let err = r.expect_err("a timeout after a drain is not success");
        assert!(err.contains("is drained"), "{err}");
        assert!(err.contains("TimedOut"), "{err}");
        assert!(log.iter().any(|l| l.contains("drained n1")), "{log:?}");
    }

    #[test]
    fn a_prolog_child_killed_right_after_its_drain_fails_the_prolog() {
        let (r, log) = prolog_with_child("echo fabric-check-exit=2; kill -KILL $$", 30);
        let Err(err) = r else {
            panic!("a killed child that drained is not success: {log:?}")
        };
        assert!(err.contains("Signalled(9)"), "{err}");
    }

    #[test]
    fn a_drain_undone_by_the_guard_lets_the_job_proceed_on_the_last_decision_line() {
        let (r, _) = prolog_with_child(
            "echo fabric-check-exit=2; echo 'MASS-DRAIN GUARD: resuming n1'; echo fabric-check-exit=0; exec sleep 30",
            3,
        );
        assert!(r.is_ok(), "{r:?}");
    }

    #[test]
    fn a_prolog_child_that_times_out_without_a_drain_lets_the_job_proceed_unchecked() {
        let (r, log) = prolog_with_child("echo probing; exec sleep 30", 3);
        assert!(r.is_ok(), "{r:?}");
        assert!(
            log.iter()
                .any(|l| l.starts_with("error") && l.contains("proceeds unchecked")),
            "{log:?}"
        );
    }

    #[test]
    fn only_the_prolog_can_fail_a_job_script() {
        assert_eq!(script_rc(Script::Prolog, -1), -1);
        assert_eq!(script_rc(Script::Prolog, 0), 0);
        assert_eq!(script_rc(Script::Epilog, -1), 0);
        assert_eq!(script_rc(Script::Epilog, 0), 0);
    }

    #[test]
    fn the_admin_mode_and_the_user_option_decide_together() {
        use FabricMode::*;
        assert!(!wants_check(JobMode::OptIn, None));
        assert!(wants_check(JobMode::OptIn, Some(Quick)));
        assert!(!wants_check(JobMode::OptIn, Some(Off)));
        assert!(wants_check(JobMode::Always, None));
        assert!(!wants_check(JobMode::Always, Some(Off)));
        assert!(!wants_check(JobMode::Off, Some(Full)));
    }

    /// The step end on a stand-in child that writes its words to `argv.txt` beside it, with a
    /// records file of node `n1` for job 42 when `records`.
    fn step_exit_with_child(
        host: &FakeHost,
        records: bool,
        seen: Option<FabricMode>,
    ) -> (Option<String>, Vec<String>) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let child = dir.path().join("fabric-check");
        let out = dir.path().join("argv.txt");
        std::fs::write(
            &child,
            format!(
                "#!/bin/sh\necho \"$@\" > {}\necho 'run summary in the live tag'\necho fabric-check-exit=0\n",
                out.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spool = dir.path().join("spool");
        std::fs::create_dir_all(spool.join("42")).unwrap();
        if records {
            std::fs::write(spool.join("42/n1.jsonl"), "{}\n").unwrap();
        }
        let env = ScriptEnv {
            node: Some("n1".into()),
            nodes: None,
            slurm_conf: Some("/etc/slurm/slurm.conf".into()),
        };
        let words = [
            format!("probe={}", child.display()),
            format!("spool_dir={}", spool.display()),
            "timeout=5".to_owned(),
        ];
        step_exit_in(host, &words, &env, seen).unwrap();
        let log = host.log.borrow().clone();
        (std::fs::read_to_string(&out).ok(), log)
    }

    fn step_host(ctx: Context, step: u32, node_id: u32) -> FakeHost {
        FakeHost {
            ctx: Some(ctx),
            opt: Some(Some("quick".to_owned())),
            step: Some(step),
            node_id: Some(node_id),
            ..FakeHost::default()
        }
    }

    #[test]
    fn the_step_end_test_for_records_never_walks_a_job_folder_swapped_for_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("spool");
        let elsewhere = dir.path().join("automounted");
        std::fs::create_dir_all(spool.join("7")).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(spool.join("7/n1.jsonl"), b"{}\n").unwrap();
        std::fs::write(elsewhere.join("n1.jsonl"), b"{}\n").unwrap();
        assert!(records_present(&spool, "7", "n1"));
        assert!(!records_present(&spool, "7", "n2"));
        // The job's user swaps its folder for a link (to an automount, an NFS path).
        std::os::unix::fs::symlink(&elsewhere, spool.join("8")).unwrap();
        assert!(!records_present(&spool, "8", "n1"), "the link was walked");
        assert!(!records_present(&spool, "..", "n1"));
    }

    #[test]
    fn a_steps_end_on_its_first_node_with_records_runs_step_end_as_a_child_and_logs_its_lines() {
        let h = step_host(Context::Remote, 3, 0);
        let (argv, log) = step_exit_with_child(&h, true, None);
        let argv = argv.expect("the child ran");
        let words: Vec<&str> = argv.split_whitespace().collect();
        assert_eq!(words[0], "step-end", "{argv}");
        let after = |flag: &str| words.iter().position(|w| *w == flag).map(|i| words[i + 1]);
        assert_eq!(after("--job-id"), Some("42"), "{argv}");
        assert_eq!(after("--step-id"), Some("3"), "{argv}");
        assert_eq!(after("--node"), Some("n1"), "{argv}");
        assert_eq!(after("--job-uid"), Some("1000"), "{argv}");
        assert!(
            log.iter()
                .any(|l| l.contains("step-end job=42.3 node=n1: run summary in the live tag")),
            "{log:?}"
        );
        assert!(log.iter().any(|l| l.contains("done in")), "{log:?}");
    }

    #[test]
    fn at_exit_where_slurm_no_longer_answers_the_option_the_request_seen_at_the_steps_start_counts()
    {
        let h = FakeHost {
            opt: None,
            ..step_host(Context::Remote, 3, 0)
        };
        let (argv, log) = step_exit_with_child(&h, true, Some(FabricMode::Full));
        let argv = argv.unwrap_or_else(|| panic!("no child: {log:?}"));
        assert!(argv.contains("--option full"), "{argv}");
        // (user_init is where it is seen: the e2e suite's live_summary runs it for real.)
    }

    #[test]
    fn the_batch_scripts_end_runs_step_end_too_since_the_job_is_still_running_there() {
        let h = step_host(Context::Remote, BATCH_STEP_ID, 0);
        let (argv, log) = step_exit_with_child(&h, true, None);
        let argv = argv.unwrap_or_else(|| panic!("no child: {log:?}"));
        assert!(argv.contains("--step-id 4294967291"), "{argv}");
    }

    #[test]
    fn no_child_runs_for_other_nodes_the_extern_step_steps_without_records_or_outside_slurmstepd() {
        for (h, records, why) in [
            (step_host(Context::Remote, 3, 1), true, "not the first node"),
            (
                step_host(Context::Remote, 0xffff_fffc, 0),
                true,
                "the extern step",
            ),
            (step_host(Context::Remote, 3, 0), false, "no records file"),
            (step_host(Context::Local, 3, 0), true, "srun"),
            (
                FakeHost {
                    opt: None,
                    ..step_host(Context::Remote, 3, 0)
                },
                true,
                "the job did not ask",
            ),
        ] {
            let (argv, log) = step_exit_with_child(&h, records, None);
            assert_eq!(argv, None, "{why}: {log:?}");
        }
    }

    #[test]
    fn every_node_of_a_multi_node_step_runs_step_end_with_the_steps_nodes_records_or_not() {
        // The stand-in's node is n1: first of n[1-2], second of n[0-1].
        for (list, node_id, records) in [
            ("n[1-2]", 0, true),
            ("n[0-1]", 1, false),
            ("n[0-1]", 1, true),
        ] {
            let h = FakeHost {
                step_nodes: Some((list.into(), 2)),
                ..step_host(Context::Remote, 3, node_id)
            };
            let (argv, log) = step_exit_with_child(&h, records, None);
            let argv = argv.unwrap_or_else(|| panic!("no child on node {node_id}: {log:?}"));
            assert!(argv.contains(&format!("--nodes {list}")), "{argv}");
            assert!(argv.contains("--node n1"), "{argv}");
        }
    }

    #[test]
    fn the_batch_scripts_end_stays_on_its_node_whatever_the_environment_lists() {
        let h = FakeHost {
            step_nodes: Some(("n[1-2]".into(), 2)),
            ..step_host(Context::Remote, BATCH_STEP_ID, 0)
        };
        let (argv, log) = step_exit_with_child(&h, true, None);
        let argv = argv.unwrap_or_else(|| panic!("no child: {log:?}"));
        assert!(argv.contains("--nodes n1 "), "{argv}");
    }

    #[test]
    fn a_step_node_list_that_disagrees_with_slurm_is_not_believed() {
        for (list, count, why) in [
            ("n[1-3]", 2, "three names for two nodes"),
            ("n[5-6]", 2, "this node is not in it"),
            ("n[1-2]", 2, "this node at another index"),
            ("n[1-2", 2, "not a hostlist"),
        ] {
            // This node is n1 at index 1.
            let h = FakeHost {
                step_nodes: Some((list.into(), count)),
                ..step_host(Context::Remote, 3, 1)
            };
            let (argv, log) = step_exit_with_child(&h, true, None);
            assert_eq!(argv, None, "{why}: {log:?}");
        }
        // At index 0 a disbelieved list falls back to this node alone.
        let h = FakeHost {
            step_nodes: Some(("n[1-3]".into(), 2)),
            ..step_host(Context::Remote, 3, 0)
        };
        let (argv, _) = step_exit_with_child(&h, true, None);
        assert!(argv.unwrap().contains("--nodes n1 "));
    }

    #[test]
    fn a_step_node_list_that_overflows_or_stands_for_gigabytes_is_refused_before_it_is_expanded() {
        let gigabyte = format!("{}[0000-1023][0000-1023],n1", "x".repeat(1000));
        let long_name = format!("{},n1", "y".repeat(600));
        for (list, count, why) in [
            (
                "n[0-18446744073709551615]",
                2,
                "a range whose size wraps to 0",
            ),
            (
                "n[0-9223372036854775807,0-9223372036854775808]",
                2,
                "sizes that add up past u64",
            ),
            (gigabyte.as_str(), 2, "a gigabyte of names from a kilobyte"),
            ("n[1-4096],n1", 2, "a range larger than the step"),
            ("n[0-1023][0-1023],n1", 2, "a million names"),
            (long_name.as_str(), 2, "a name longer than any node's"),
            ("n[0-4096]", 4097, "a step larger than the meeting's limit"),
        ] {
            // This node is n1 at index 1: a believed list would name it there.
            let h = FakeHost {
                step_nodes: Some((list.to_owned(), count)),
                ..step_host(Context::Remote, 3, 1)
            };
            let started = std::time::Instant::now();
            let (argv, log) = step_exit_with_child(&h, true, None);
            assert_eq!(argv, None, "{why}: {log:?}");
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "{why}: nothing was expanded"
            );
            assert!(log.iter().all(|l| l.len() < 512), "{why}: {log:?}");
        }
        // A list within Slurm's count is believed: this node meets the step's first.
        let h = FakeHost {
            step_nodes: Some(("n[0-1]".into(), 2)),
            ..step_host(Context::Remote, 3, 1)
        };
        let (argv, log) = step_exit_with_child(&h, true, None);
        assert!(argv.unwrap().contains("--nodes n[0-1] "), "{log:?}");
    }

    #[test]
    fn a_step_end_child_that_hangs_is_killed_at_the_timeout_and_the_step_still_succeeds() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let child = dir.path().join("fabric-check");
        std::fs::write(&child, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spool = dir.path().join("spool");
        std::fs::create_dir_all(spool.join("42")).unwrap();
        std::fs::write(spool.join("42/n1.jsonl"), "{}\n").unwrap();
        let h = step_host(Context::Remote, 1, 0);
        let env = ScriptEnv {
            node: Some("n1".into()),
            ..ScriptEnv::default()
        };
        let words = [
            format!("probe={}", child.display()),
            format!("spool_dir={}", spool.display()),
            "timeout=1".to_owned(),
        ];
        let started = std::time::Instant::now();
        assert!(step_exit_in(&h, &words, &env, None).is_ok());
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        let log = h.log.borrow();
        assert!(
            log.iter()
                .any(|l| l.starts_with("error") && l.contains("timed out")),
            "{log:?}"
        );
    }
}
