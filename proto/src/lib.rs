//! `fabric-proto`: the contracts of fabric-check, i.e. everything that crosses a process boundary.
//!
//! The SPANK plugin (loaded into slurmd, slurmstepd, srun, sbatch) and the `fabric-run` wrapper
//! depend on this crate alone; `fabric-core` builds the job step, probe and collective on it. It
//! needs only serde, serde_json and thiserror, and has no `unsafe`.
//!
//! Crate map:
//!
//! | module | what it holds |
//! |---|---|
//! | [`verdict`] | [`verdict::Verdict`], [`verdict::Severity`], [`verdict::Finding`] |
//! | [`check_id`] | every check id: the probe's and the job step's own (`probe.error`, ...) |
//! | [`fabric_option`] | the `--fabric-check[=quick\|full\|off]` option value |
//! | [`plugin_args`] | the `plugstack.conf` arguments: job mode, policy, limits, paths |
//! | [`invocation`] | how the plugin runs the job step, its exit codes and decision line, `PATH` |
//! | [`job_state`] | Slurm's job states as `sacct` prints them, and which are final |
//! | [`during`] | how a drain for a fault seen during a job names who saw it (epilog or watch) |
//! | [`drill_age`] | the drill's root-owned file that dates one job's start back for its watch |
//! | [`notice`] | the in-job watch's notice to the running job (`fabric-notice-<node>.jsonl`) |
//! | [`tag`] | the `fabric-check/v1` job tag inside `AdminComment`, and the run summary |
//! | [`spares`] | `--fabric-check-spares=K`: its parsing, the tag's `spares` entry, the batch step's shrunk environment |
//! | [`straggler`] | cross-node step times: each node's window figure to the first node, the straggler verdict's settings |
//! | [`record`] | `fabric-run` JSON-lines records and their writer |
//! | [`hostlist`] | Slurm hostlist expressions (`gpu[001-128]`) |
//! | [`suggest`] | the known name nearest to a misspelt one ("did you mean") for every configuration reader |

pub mod check_id;
pub mod drill_age;
pub mod during;
pub mod ett;
pub mod fabric_option;
pub mod hostlist;
pub mod invocation;
pub mod job_state;
pub mod notice;
pub mod plugin_args;
pub mod ports;
pub mod record;
pub mod spares;
pub mod straggler;
pub mod suggest;
pub mod tag;
pub mod verdict;
