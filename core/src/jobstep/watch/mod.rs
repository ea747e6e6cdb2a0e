//! The in-job watch: a fault that appears while a checked job runs is found in seconds, not
//! when the job ends.
//!
//! The prolog of a checked job starts `fabric-check watch` on its node ([`start`]): root, in a
//! process group of its own, stdin/stdout/stderr on `/dev/null`, so it neither holds up the
//! prolog nor dies with the prolog child's group. Every `watch_interval=` (default 1 s) it
//! reads the few files that can make a `fail` (or a counter's `warn`) in place ([`vitals`]), and
//! when one changed (or every [`vitals::FULL_EVERY`] samples) runs the probe's own gather and
//! checks, in this process (no child, no Slurm call), against the prolog's snapshot: port state
//! and rate, link layer, MTU, GID, PFC/ECN, and the health counters with the probe's thresholds,
//! a `*_delta` bound over the job window and a per-hour bound over the last hour ([`window`]: a
//! ring of counter snapshots; one hour's allowance, never scaled by the job's age and never less,
//! so a single error never drains and a storm late in a long job is seen as fast as an early
//! one; a fault drill may date the job's start back, [`drill_age`]). A `fail` or `warn` finding that the prolog did not already see is a fault; [`policy`](crate::jobstep::policy) says what to do with it
//! ([`Phase::Watch`](crate::jobstep::policy::Phase::Watch)): under `enforce` drain through the one drain path (etiquette, guard,
//! settle), write a live `during` entry into the job's tag, and tell the job through its notice
//! file ([`fabric_proto::notice`]); under `warn` the same without the drain. A fault that clears
//! (a flap) stays recorded, marked cleared.
//!
//! Its life: it writes `<state_dir>/watch-<job>.pid` (its pid and start time) and exits when
//! that file is gone or names another process; the epilog ([`stop`]) removes the file, sends the
//! watch SIGTERM (a drain or tag write under way finishes, within the epilog's
//! [`crate::deadline::WATCH_STOP`]), then SIGKILLs its process group, so it never outlives the
//! epilog. Each event is also kept on the node ([`events_path`]) before the watch acts on it; the
//! epilog puts those into its own tag write, so an event whose live write the job's end cut
//! short is still tagged. A watch that died before the epilog is said in the epilog's log
//! ("the watch was lost"). As a last
//! guard (an epilog that failed or never ran), it makes sure its job still runs before it acts,
//! and when no `slurmstepd` of its job has been seen on the host for [`JOB_GONE_AFTER`]: a
//! `slurmstepd` of the job says so at no cost; without one (a node of a batch job that runs no
//! step there, where `PrologFlags=Contain` is not set) slurmctld is asked, one `squeue`; a job
//! that no longer runs ends the watch without acting. A `slurmd` restart does not touch it (it
//! is not slurmd's child).
//!
//! The decisions are pure ([`Tracker`]); the sampling and the acting are seams ([`Sampler`],
//! [`Act`]), so the loop ([`run`]) is tested on fakes.

mod acting;
pub mod drill_age;
mod life;
mod outputs;
mod sampling;
mod session;
mod tracker;
pub mod vitals;
pub mod window;

pub use acting::{Act, WatchSummary, act_delay, run};
pub use life::{
    JOB_GONE_AFTER, JOB_SCAN_EVERY, MAX_RELAYED_LOG_BYTES, Pace, PidFile, RealPace, SLEEP_SLICE,
    Stopped, finish, job_has_stepd, live_watches, log_path, no_room, pid_path, start, start_time,
    stop,
};
pub use outputs::{NoticeFile, bump_metrics, events_path, read_events, write_metrics};
#[cfg(test)]
pub use sampling::AfterGather;
pub use sampling::{ProbeSampler, QuickSampler, Sample, Sampler, TOOLS_EVERY, load_start};
pub use session::{OpenError, Session, Spec};
pub use tracker::{Change, Fault, HOLD_DOWN, Tracker};
pub use window::rebase;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod window_tests;
