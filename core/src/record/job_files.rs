//! The job's files that the epilog and a step's end both read or clear: the job's spool folder
//! (`<spool_dir>/<job>/`, opened once and verified), this node's `fabric-run` records in it, and
//! the run summaries the step ends keep in root's state folder. Each helper takes paths and ids,
//! never a job step; what it refuses is said through a [`Relay`].

use std::path::{Path, PathBuf};

use super::{JobDir, ReadLimits, RecordError, Records};
use crate::relay::Relay;

/// The job's spool folder, `<spool_dir>/<job>/` (root's, made in the prolog), opened once and
/// verified; `None` when absent or refused (said why). The job's environment never names it.
pub fn open_job_dir(
    spool_dir: &Path,
    job: u32,
    job_uid: Option<u32>,
    relay: &dyn Relay,
) -> Option<JobDir> {
    let job = job.to_string();
    match JobDir::open(spool_dir, &job, job_uid) {
        Ok(d) => d,
        Err(e) => {
            relay.line(&format!("fabric-run records of job {job} skipped: {e}"));
            None
        }
    }
}

/// `node`'s `fabric-run` records for the job (`<node>.jsonl`); `None` when there are none or
/// they are refused (said why). The spool is user-writable and we are root: the reader refuses
/// links and foreign owners (anyone but `job_uid`) and bounds sizes.
pub fn read_node_records(
    spool_dir: &Path,
    job: u32,
    job_uid: Option<u32>,
    node: &str,
    dir: &JobDir,
    relay: &dyn Relay,
) -> Option<(PathBuf, Records)> {
    let job = job.to_string();
    let path = fabric_proto::record::node_records_path(spool_dir, &job, node)?;
    let name = path.file_name()?.to_str()?;
    let limits = ReadLimits {
        owner_uid: job_uid,
        ..ReadLimits::default()
    };
    match dir.read_records(name, &limits) {
        Ok(recs) => Some((path, recs)),
        Err(RecordError::Missing(_)) => None,
        Err(e) => {
            relay.line(&format!("fabric-run records of job {job} skipped: {e}"));
            None
        }
    }
}

/// The run summaries earlier step ends of `job` on this node heard, by node
/// (`<state_dir>/step-runs-<job>.json`, root's).
pub fn peer_runs_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("step-runs-{job}.json"))
}

/// The run summary this node's step ends of `job` last put in the live tag
/// (`<state_dir>/step-run-written-<job>.json`, root's).
pub fn written_run_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("step-run-written-{job}.json"))
}

/// The lock and list of the step ends of `job` whose end is over (`<state_dir>/step-ends-<job>`,
/// root's).
pub fn step_ends_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("step-ends-{job}"))
}

/// Removes the run summaries the step ends of `job` kept on this node (the epilog, once the
/// job's summary is merged).
pub fn forget_peer_runs(state_dir: &Path, job: u32) {
    let _ = std::fs::remove_file(peer_runs_path(state_dir, job));
    let _ = std::fs::remove_file(written_run_path(state_dir, job));
    let _ = std::fs::remove_file(step_ends_path(state_dir, job));
}
