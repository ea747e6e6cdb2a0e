//! The job prolog and epilog (`slurm_spank_job_prolog|epilog`: the `fabric-check` child, its
//! decision line, the exit code Slurm sees) and the bounded child every script and step end
//! runs.

use fabric_proto::fabric_option::FabricMode;
use fabric_proto::invocation::{Invocation, JobStepExit};
use fabric_proto::plugin_args::PluginArgs;

use super::{
    CallbackError, Context, Host, Script, hooks, parse_args, read_request, read_spares,
    report_problems, wants_check,
};
use crate::spawn::{self, Outcome};

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
pub fn job_script(host: &dyn Host, words: &[String], script: Script) -> Result<(), CallbackError> {
    job_script_in(host, words, script, &ScriptEnv::from_process())
}

/// [`job_script`] with the environment given.
pub fn job_script_in(
    host: &dyn Host,
    words: &[String],
    script: Script,
    env: &ScriptEnv,
) -> Result<(), CallbackError> {
    let (args, problems) = parse_args(words);
    report_problems(host, &problems, script == Script::Prolog);
    match script {
        Script::Prolog => hooks::maybe_panic("job_prolog", Context::JobScript),
        Script::Epilog => hooks::maybe_panic("job_epilog", Context::JobScript),
        Script::StepEnd | Script::Watch => hooks::maybe_panic("exit", Context::Remote),
    }
    let mut req = read_request(host, env.node.clone());
    // Spares need the check: `--fabric-check-spares=K` alone asks for the quick one.
    // (The epilog too: a job checked for its spares alone is followed to its end.)
    let spares = match script {
        Script::Prolog | Script::Epilog => read_spares(host, args.spares_max),
        Script::StepEnd | Script::Watch => 0,
    };
    if spares > 0 && req.mode.is_none() {
        req.mode = Some(FabricMode::Quick);
    }
    let job = req.job_id.map_or_else(|| "?".to_owned(), |j| j.to_string());
    let node = req.node.clone().unwrap_or_else(|| "?".to_owned());
    let checked = wants_check(args.mode, req.mode);
    let tag = format!("fabric-check: {} job={job} node={node}", script.as_str());
    if script == Script::Prolog {
        host.info(&format!(
            "{tag} option={}{} action={}",
            req.mode.map_or("none", FabricMode::as_str),
            if spares > 0 {
                format!(" spares={spares}")
            } else {
                String::new()
            },
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
        spares: if script == Script::Prolog { spares } else { 0 },
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
        return Err(CallbackError::Drained(format!(
            "{tag}: this node failed its fabric check and is drained{how}; Slurm requeues the job ({ms} ms)"
        )));
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

/// Runs the job-step binary (`probe=`) with `child_args`, bounded by `timeout=`, with only
/// slurmd's own `SLURM_CONF` passed on, and relays what it printed (but its decision lines) to
/// the slurmd log under `tag`.
pub(super) fn run_child(
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
