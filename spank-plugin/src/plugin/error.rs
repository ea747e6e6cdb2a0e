//! The plugin's typed errors: what a call into the SPANK host refused ([`HostError`]) and why a
//! callback returns `-1` to Slurm ([`CallbackError`]). Each message ends with what to do; the
//! exported functions log it into the slurmd (or srun) log.

use fabric_proto::fabric_option::InvalidFabricMode;
use fabric_proto::spares::SparesRefused;

/// A call into the SPANK host that did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// `spank_option_register` refused `--fabric-check`.
    #[error(
        "fabric-check: cannot register --fabric-check (spank error {0}); check that no other \
         plugin in plugstack.conf registers an option of that name"
    )]
    Register(i64),
    /// The host has no such call (`spank_prepend_task_argv` before Slurm 23.11; a test host).
    #[error(
        "{0} is not available from this host; upgrade slurmd (spank_prepend_task_argv needs \
         Slurm 23.11 or later)"
    )]
    Unavailable(&'static str),
    /// A string for the host holds a NUL byte, which C strings cannot carry.
    #[error("{0} holds a NUL byte; remove it from the plugin's words in plugstack.conf")]
    NulByte(&'static str),
    /// More arguments than a C `int` counts.
    #[error("too many arguments ({0}); shorten the plugin's words in plugstack.conf")]
    TooManyArguments(usize),
    /// The call ran and returned a SPANK error code.
    #[error("{call} failed (spank error {rc}); see the slurmd log of this node for Slurm's reason")]
    Spank {
        /// The SPANK function.
        call: &'static str,
        /// Its return code.
        rc: i64,
    },
}

/// Why a callback fails (the exported function logs it and returns `-1`).
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    /// A call into the host failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// `--fabric-check=` holds a value the option does not know (the message names the valid
    /// ones).
    #[error("fabric-check: {0}")]
    Option(#[from] InvalidFabricMode),
    /// `--fabric-check-spares=` is refused at submission (the message says why and what to do).
    #[error("fabric-check: {0}")]
    Spares(#[from] SparesRefused),
    /// The prolog's child says this node failed its fabric check and drained it: the prolog
    /// fails so that Slurm requeues the job elsewhere (the message says so, with the tag and
    /// the time taken).
    #[error("{0}")]
    Drained(String),
}
