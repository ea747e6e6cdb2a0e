//! `--fabric-check-spares=K`: refused at submission when it is not a plain number, above the
//! cluster's `spares_max=`, asked of a cluster that cannot shrink jobs, or given to an srun or
//! salloc that makes its own allocation; read again in the job prolog, where the job step checks
//! it against `spares_max=` once more (the option travels in the job's environment, which its
//! user controls).

use std::sync::Mutex;

use fabric_proto::plugin_args::Policy;
use fabric_proto::spares::{self, SparesRefused};

use super::{CallbackError, Host, hooks};

/// `spares_max=` and `policy=` as `slurm_spank_init` read them in srun/sbatch/salloc (the option
/// callback gets no plugin arguments). One process, no threads: a process-wide cell.
static AT_INIT: Mutex<Option<(u32, Policy)>> = Mutex::new(None);

/// Keeps `spares_max=` and `policy=` for the option callback.
pub(super) fn remember_limit(max: u32, policy: Policy) {
    if let Ok(mut g) = AT_INIT.lock() {
        *g = Some((max, policy));
    }
}

/// What `slurm_spank_init` kept: `spares_max=` (0, none allowed, when it kept nothing) and
/// `policy=` (`enforce` by default, as the plugin's).
fn at_init() -> (u32, Policy) {
    AT_INIT
        .lock()
        .ok()
        .and_then(|g| *g)
        .unwrap_or((0, Policy::Enforce))
}

/// The largest `slurm.conf` the submission check reads.
const MAX_CONF_BYTES: u64 = 4 << 20;

/// What the option callback learns from the submitting process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submission {
    /// `slurm.conf`'s text, when it could be read (`SLURM_CONF`, else Slurm's default path).
    pub slurm_conf: Option<String>,
    /// Whether the command runs inside a job (`SLURM_JOB_ID` set): an srun there makes a step,
    /// not an allocation.
    pub in_job: bool,
    /// Whether it is srun or salloc making an allocation of its own (not sbatch).
    pub own_allocation: bool,
}

impl Submission {
    fn from_process() -> Self {
        use std::io::Read;
        let path = std::env::var("SLURM_CONF").unwrap_or_else(|_| "/etc/slurm/slurm.conf".into());
        let slurm_conf = std::fs::File::open(path).ok().and_then(|f| {
            let mut s = String::new();
            f.take(MAX_CONF_BYTES)
                .read_to_string(&mut s)
                .ok()
                .map(|_| s)
        });
        let prog = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
        Self {
            slurm_conf,
            in_job: std::env::var_os("SLURM_JOB_ID").is_some(),
            own_allocation: matches!(prog.trim(), "srun" | "salloc"),
        }
    }
}

/// The spares option's callback: the value against the cluster at submission; in slurmstepd
/// (`remote`) only the value's form.
pub fn spares_value(optarg: Option<&str>, remote: bool) -> Result<(), CallbackError> {
    let sub = if remote {
        Submission::default()
    } else {
        Submission::from_process()
    };
    let (max, p) = at_init();
    spares_value_in(optarg, remote, max, &sub)?;
    if !remote && p != Policy::Enforce && spares::parse_spares(optarg).is_ok_and(|k| k > 0) {
        return Err(SparesRefused::NotEnforced { policy: p.as_str() }.into());
    }
    Ok(())
}

/// [`spares_value`] with the limit and the submitting process given.
pub fn spares_value_in(
    optarg: Option<&str>,
    remote: bool,
    max: u32,
    sub: &Submission,
) -> Result<(), CallbackError> {
    hooks::maybe_panic("option", super::Context::Unknown);
    let asked = spares::parse_spares(optarg)?;
    if remote || asked == 0 {
        return Ok(());
    }
    spares::allowed(asked, max)?;
    if sub.own_allocation && !sub.in_job {
        return Err(SparesRefused::NotBatch.into());
    }
    if sub
        .slurm_conf
        .as_deref()
        .is_some_and(spares::shrink_disabled)
    {
        return Err(SparesRefused::ShrinkDisabled.into());
    }
    Ok(())
}

/// The job's spares request in the job prolog, checked against `spares_max=` again: a value
/// that does not parse or is above the limit is logged and taken as none (the job runs, and
/// is requeued as without spares when a node fails).
pub fn read_spares(host: &dyn Host, max: u32) -> u32 {
    let Some(raw) = host.spares_option() else {
        return 0;
    };
    match spares::parse_spares(raw.as_deref()).and_then(|k| spares::allowed(k, max)) {
        Ok(k) => k,
        Err(e) => {
            host.error(&format!("fabric-check: {e}; the job runs without spares"));
            0
        }
    }
}
