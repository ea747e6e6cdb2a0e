//! `fabric-core`: the node-side library of fabric-check: probe, configuration, job step, drain
//! etiquette, rendezvous, collective and the Slurm CLI adapter.
//!
//! Crate map:
//!
//! | module | what it holds |
//! |---|---|
//! | [`jobstep`] | pure parts of the job prolog/epilog: node results, counter rises, tag merging |
//! | [`probe`] | node probe: sysfs gather, pure checks, verdicts, outputs |
//! | [`config`] | the TOML configuration (expectations and thresholds per node pattern) |
//! | [`bom`] | the node's bill of materials and drift against a pinned one |
//! | [`record`] | `fabric-run` records read back from a user-writable spool (types in `fabric-proto`) |
//! | [`exec`] | running programs by absolute path, scrubbed environment, bounded in time |
//! | [`drain`] | drain/resume etiquette and the mass-drain guard |
//! | [`slurm`] | the Slurm CLI adapter (`scontrol`, `sacct`, `sacctmgr`), bounded in time |
//! | [`rendezvous`] | MUNGE-authenticated rendezvous of a job's nodes at rank 0 |
//! | [`collective`] | `fabric-check collective`: ring all-reduce, figures, outlier nodes |
//! | [`stepgate`] | the Slurm 23.11+ step gate prepended to a `--fabric-check=full` step's tasks |
//!
//! The contract modules ([`tag`], [`plugin_args`], [`invocation`], [`verdict`], [`check_id`],
//! [`fabric_option`], [`hostlist`], and the record types under [`record`]) live in `fabric-proto`
//! and are re-exported here under their old paths.
//!
//! The workspace denies `unsafe`; the one file here that allows it is
//! `collective/verbs/ffi.rs`, the libibverbs FFI, compiled only with the `verbs` feature, each
//! block with a `// SAFETY:` comment.

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
