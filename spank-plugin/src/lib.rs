//! `spank_fabric_check.so`: the thin SPANK plugin.
//!
//! Slurm loads this library into srun, sbatch, salloc, slurmd, every slurmstepd and a fresh
//! `slurmstepd spank prolog|epilog` process per job, so it stays thin, synchronous and
//! thread-free: it registers `--fabric-check`, reads it back where it matters, spawns the
//! `fabric-check` binary for real work and applies policy to its answer.
//!
//! Crate map:
//!
//! | module | what it holds | unsafe |
//! |---|---|---|
//! | `ffi` | generated bindings, the exported symbols, the [`Host`] implementation over a live `spank_t` | **yes, only here** |
//! | [`plugin`] | what each callback does, written against the [`Host`] trait | no |
//! | [`spawn`] | the thread-free, time-bounded child runner | no |
//!
//! Every exported function catches panics and returns `-1` on failure; nothing here links
//! `-lslurm` (the `spank_*` and `slurm_*` functions come from the host process).

mod ffi;
pub mod plugin;
pub mod spawn;

pub use plugin::{Context, Host};
