//! `fabric-core`: everything fabric-check knows, with no process or FFI concerns.
//!
//! Crate map:
//!
//! | module | what it holds |
//! |---|---|
//! | [`jobstep`] | pure parts of the job prolog/epilog: node results, counter rises, tag merging |
//! | [`probe`] | node probe: sysfs gather, pure checks, verdicts, outputs |
//! | [`config`] | the TOML configuration (expectations and thresholds per node pattern) |
//! | [`bom`] | the node's bill of materials and drift against a pinned one |
//! | [`record`] | `fabric-run` JSON-lines records |
//! | [`tag`] | the `fabric-check/v1` job tag inside `AdminComment` |
//! | [`exec`] | running programs by absolute path, scrubbed environment, bounded in time |
//! | [`drain`] | drain/resume etiquette and the mass-drain guard |
//! | [`slurm`] | the Slurm CLI adapter (`scontrol`, `sacct`, `sacctmgr`), bounded in time |
//! | [`rendezvous`] | MUNGE-authenticated rendezvous of a job's nodes at rank 0 |
//! | [`collective`] | `fabric-check collective`: ring all-reduce, figures, outlier nodes |
//!
//! Nothing here uses `unsafe`; the workspace denies it outside the SPANK plugin's FFI module.

pub mod bom;
pub mod collective;
pub mod config;
pub mod drain;
pub mod exec;
pub mod jobstep;
pub mod probe;
pub mod record;
pub mod rendezvous;
pub mod slurm;
pub mod stepgate;

pub use fabric_proto::{check_id, fabric_option, hostlist, invocation, plugin_args, tag, verdict};
