//! `fabric-core`: the node-side library of fabric-check: probe, configuration, job step, drain
//! etiquette and the Slurm CLI adapter.
//!
//! Crate map:
//!
//! | module | what it holds |
//! |---|---|
//! | [`jobstep`] | the job prolog, epilog and health check as functions of seams (Slurm, probe runner, rendezvous, relay) |
//! | [`deadline`] | the job step's one absolute deadline, which every phase draws from |
//! | [`probe`] | node probe: sysfs gather, pure checks, verdicts, outputs |
//! | [`atomic_file`] | files replaced whole (temporary file, fsync, rename), a leaf |
//! | [`config`] | the TOML configuration (expectations and thresholds per node pattern) |
//! | [`record`] | `fabric-run` records read back from a user-writable spool (types in `fabric-proto`) |
//! | [`drain`] | drain/resume etiquette and the mass-drain guard |
//! | [`relay`] | the [`relay::Relay`] seam: where the job step's lines go (the slurmd log), a leaf under `drain` and `jobstep` |
//! | [`slurm`] | the [`slurm::Slurm`] seam and its CLI adapter (`scontrol`, `sinfo`, `sacct`, `sacctmgr`), bounded in time |
//! | [`coexist`] | sharing `AdminComment` with jobstats-style tools: the `EpilogSlurmctld` wrapper's merge and repair |
//! | [`stepgate`] | the Slurm 23.11+ step gate prepended to a `--fabric-check=full` step's tasks |
//! | `testing` | fakes of the job step's seams (tests, and feature `test-fakes`) |
//!
//! The percentile, bounded program runs, the bill of materials and TOML error lines live in
//! `fabric-base`, under core and `fabric-report` alike.
//!
//! The contracts (tag, plugin arguments, invocation, verdict, check ids, the `--fabric-check`
//! option, hostlists and the record types) live in `fabric-proto` and are named there
//! (`fabric_proto::tag`, ...); core does not re-export them.
//!
//! The rendezvous and the collective, with their FFI (libmunge, verbs, NCCL), live in
//! `fabric-net`; the job step reaches them through its `Meet` and `ProbeRunner` seams, whose real
//! implementations call that crate. Core has no `unsafe` (`forbid`, below).

#![forbid(unsafe_code)]

pub mod atomic_file;
pub mod coexist;
pub mod config;
pub mod deadline;
pub mod drain;
pub mod jobstep;
pub mod probe;
pub mod record;
pub mod relay;
pub mod slurm;
pub mod stepgate;
pub mod tag_ledger;
#[cfg(any(test, feature = "test-fakes"))]
pub mod testing;
