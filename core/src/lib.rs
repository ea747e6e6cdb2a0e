//! `fabric-core`: everything fabric-check knows, with no process or FFI concerns.
//!
//! Crate map:
//!
//! | module | what it holds |
//! |---|---|
//! | [`jobstep`] | the job prolog, epilog and health check as functions of seams (Slurm, probe runner, rendezvous, relay) |
//! | [`deadline`] | the job step's one absolute deadline, which every phase draws from |
//! | [`probe`] | node probe: sysfs gather, pure checks, verdicts, outputs |
//! | [`config`] | the TOML configuration (expectations and thresholds per node pattern) |
//! | [`bom`] | the node's bill of materials and drift against a pinned one |
//! | [`record`] | `fabric-run` JSON-lines records |
//! | [`tag`] | the `fabric-check/v1` job tag inside `AdminComment` |
//! | [`exec`] | running programs by absolute path, scrubbed environment, bounded in time |
//! | [`drain`] | drain/resume etiquette and the mass-drain guard |
//! | [`slurm`] | the [`slurm::Slurm`] seam and its CLI adapter (`scontrol`, `sinfo`, `sacct`, `sacctmgr`), bounded in time |
//! | [`rendezvous`] | MUNGE-authenticated rendezvous of a job's nodes at rank 0 |
//! | [`collective`] | `fabric-check collective`: ring all-reduce, figures, outlier nodes |
//! | [`stepgate`] | the step gate of `--fabric-check=full` steps (Slurm 23.11+) |
//! | `testing` | fakes of the job step's seams (tests, and feature `test-fakes`) |
//!
//! Nothing here uses `unsafe`; the workspace denies it outside the SPANK plugin's FFI module.

pub mod bom;
pub mod collective;
pub mod config;
pub mod deadline;
pub mod drain;
pub mod exec;
pub mod jobstep;
pub mod probe;
pub mod record;
pub mod rendezvous;
pub mod slurm;
pub mod stepgate;
#[cfg(any(test, feature = "test-fakes"))]
pub mod testing;

pub use fabric_proto::{check_id, fabric_option, hostlist, invocation, plugin_args, tag, verdict};
