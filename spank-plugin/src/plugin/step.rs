//! A step's start and end in slurmstepd: where `fabric-run` records (`slurm_spank_user_init`),
//! the step gate prepended to a `--fabric-check=full`
//! step's tasks (`slurm_spank_task_init`), and `fabric-check step-end` at a step's end on the
//! nodes that hold records (`slurm_spank_exit`), with the step's node list checked against Slurm.

use fabric_proto::fabric_option::FabricMode;
use fabric_proto::hostlist::{Hostlist, Limits};
use fabric_proto::invocation::{BATCH_STEP_ID, FIRST_SPECIAL_STEP_ID, Invocation, JobStepExit};
use fabric_proto::plugin_args::{JobMode, PluginArgs};
use fabric_proto::record::PLUGIN_SPOOL_ENV;
use fabric_proto::spares::{BatchEnv, MAX_BATCH_ENV_BYTES};

use super::script::run_child;
use super::{
    CallbackError, Context, Host, Script, ScriptEnv, hooks, parse_args, read_request, wants_check,
};
use crate::spawn::Outcome;

/// `slurm_spank_user_init` (in slurmstepd, as the job's user, before its tasks start, for every
/// step including the batch script): tells the tasks where `fabric-run` delivers its records,
/// [`PLUGIN_SPOOL_ENV`] = `spool_dir=`, so the wrapper needs no configuration. The epilog never
/// reads that variable (the user may change it); it reads `spool_dir=` itself. Never fails the
/// step: a problem is logged.
pub fn user_init(host: &dyn Host, words: &[String]) -> Result<(), CallbackError> {
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

/// The batch step of a job the prolog leader shrank to its good nodes (`--fabric-check-spares`)
/// as read by `slurm_spank_task_init_privileged` (root: the file is in root's state folder) for
/// `slurm_spank_task_init` of the same task process (the user) to apply. One task process, no
/// threads: a process-wide cell.
static BATCH_ENV: std::sync::Mutex<Option<BatchEnv>> = std::sync::Mutex::new(None);

/// `slurm_spank_task_init_privileged` (in the task, as root, before it becomes the job's user):
/// in the batch step of a shrunk job, reads the kept nodes the prolog leader (this node, the
/// batch host) left ([`BatchEnv::path`]). Slurm built the batch script's environment at
/// allocation, before the prolog, so it still names every allocated node; `task_init` rewrites
/// it. No file (no shrink): nothing. A file that cannot be read is logged; the job runs with
/// Slurm's variables. Never fails the task.
pub fn task_init_privileged(host: &dyn Host, words: &[String]) -> Result<(), CallbackError> {
    if host.context() != Context::Remote || host.step_id() != Some(BATCH_STEP_ID) {
        return Ok(());
    }
    hooks::maybe_panic("task_init_privileged", Context::Remote);
    let (args, _) = parse_args(words);
    if args.mode == JobMode::Off {
        return Ok(());
    }
    let env = read_batch_env(
        host,
        &args,
        std::env::var("SLURMD_NODENAME").ok().as_deref(),
    );
    if let Ok(mut g) = BATCH_ENV.lock() {
        *g = env;
    }
    Ok(())
}

/// The kept nodes of this job on `node`, if the prolog leader left them (see
/// [`task_init_privileged`]).
pub(super) fn read_batch_env(
    host: &dyn Host,
    args: &PluginArgs,
    node: Option<&str>,
) -> Option<BatchEnv> {
    use std::io::Read;
    let job = host.job_id()?;
    let dir = fabric_proto::plugin_args::expand_node(&args.state_dir, node?)?;
    let path = BatchEnv::path(&dir, job);
    let said = |what: &str, e: &dyn std::fmt::Display| {
        host.error(&format!(
            "fabric-check: cannot {what} {} ({e}); the batch script sees every allocated node",
            path.display()
        ));
    };
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            said("open", &e);
            return None;
        }
    };
    let mut text = String::new();
    if let Err(e) = file.take(MAX_BATCH_ENV_BYTES).read_to_string(&mut text) {
        said("read", &e);
        return None;
    }
    match BatchEnv::parse(&text) {
        Ok(env) if env.job_id == job => Some(env),
        Ok(_) => None,
        Err(e) => {
            said("use", &e);
            None
        }
    }
}

/// Sets the batch script's node variables to those of the kept nodes ([`BatchEnv::variables`]),
/// in `slurm_spank_task_init`: after slurmstepd's own `setup_env`, just before the script runs.
pub(super) fn apply_batch_env(host: &dyn Host, env: &BatchEnv) {
    for (name, value) in env.variables(|v| host.job_env(v)) {
        let done = match &value {
            Some(v) => host.setenv(name, v),
            None => host.unsetenv(name),
        };
        if let Err(e) = done {
            host.error(&format!("fabric-check: cannot set {name} ({e})"));
        }
    }
    host.info(&format!(
        "fabric-check: job {} runs on its {} good node(s) {}: the batch script's environment names only them",
        env.job_id,
        env.kept.len(),
        fabric_proto::hostlist::compress(&env.kept).unwrap_or_default()
    ));
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
pub fn task_init(host: &dyn Host, words: &[String]) -> Result<(), CallbackError> {
    if host.context() != Context::Remote {
        return Ok(());
    }
    hooks::maybe_panic("task_init", Context::Remote);
    if host.step_id() == Some(BATCH_STEP_ID)
        && let Some(env) = BATCH_ENV.lock().ok().and_then(|mut g| g.take())
    {
        apply_batch_env(host, &env);
    }
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
pub fn step_exit(host: &dyn Host, words: &[String]) -> Result<(), CallbackError> {
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
pub(super) fn records_present(spool: &std::path::Path, job: &str, node: &str) -> bool {
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
) -> Result<(), CallbackError> {
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
        spares: 0,
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
