//! What each SPANK callback does, written against [`Host`] so it can be tested without Slurm.
//!
//! Here: the [`Host`] trait, the option (`init`, its callback) and the job's request; `script.rs`:
//! the job prolog and epilog ([`job_script`]) and their bounded child; `step.rs`: a step's start
//! and end in slurmstepd ([`user_init`], [`task_init`], [`step_exit`]); `error.rs`:
//! the typed errors ([`HostError`], [`CallbackError`]).

use fabric_proto::fabric_option::FabricMode;
use fabric_proto::plugin_args::{ArgProblem, JobMode, PluginArgs};

mod error;
mod script;
mod spares;
mod step;

pub use error::{CallbackError, HostError};
pub use script::{ScriptEnv, job_script, job_script_in, script_rc};
pub use spares::{Submission, read_spares, spares_value, spares_value_in};
pub use step::{
    step_exit, step_exit_in, step_gate_argv, task_init, task_init_privileged, user_init,
};

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
    fn register_option(&self) -> Result<(), HostError>;
    /// `None` when the user did not give the option, `Some(None)` for a bare flag seen as NULL,
    /// `Some(Some(value))` otherwise (a bare flag may arrive as `"(null)"`).
    fn option(&self) -> Option<Option<String>>;
    /// `--fabric-check-spares`'s value, as [`Host::option`] (the job prolog reads it; absent
    /// when the job did not ask).
    fn spares_option(&self) -> Option<Option<String>> {
        None
    }
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
    fn setenv(&self, _name: &str, _value: &str) -> Result<(), HostError> {
        Err(HostError::Unavailable("spank_setenv"))
    }
    /// Removes a variable from the job's environment (`spank_unsetenv`; remote context only).
    fn unsetenv(&self, _name: &str) -> Result<(), HostError> {
        Ok(())
    }
    /// Prepends `argv` to the task's command line (valid in `slurm_spank_task_init`).
    fn prepend_task_argv(&self, _argv: &[String]) -> Result<(), HostError> {
        Err(HostError::Unavailable("spank_prepend_task_argv"))
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
pub fn init(host: &dyn Host, words: &[String]) -> Result<(), CallbackError> {
    let (_, problems) = parse_args(words);
    let ctx = host.context();
    hooks::maybe_panic("init", ctx);
    // Users see errors logged in srun/sbatch; admin mistakes are for the slurmd log.
    report_problems(host, &problems, ctx == Context::Remote);
    if matches!(ctx, Context::Local | Context::Allocator) {
        // The spares option's callback (at submission) checks against this cluster's limit.
        let (args, _) = parse_args(words);
        spares::remember_limit(args.spares_max, args.policy);
    }
    if ctx.registers_option() {
        Ok(host.register_option()?)
    } else {
        Ok(())
    }
}

/// The option callback: refuses an invalid value at submission with the valid values named.
pub fn option_value(_val: i32, optarg: Option<&str>, _remote: bool) -> Result<(), CallbackError> {
    hooks::maybe_panic("option", Context::Unknown);
    FabricMode::from_optarg(optarg)
        .map(|_| ())
        .map_err(CallbackError::Option)
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

#[cfg(test)]
mod tests;
