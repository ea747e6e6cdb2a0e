//! The leader's read-modify-write of the job's tag in `AdminComment`.

use super::JobStep;
use crate::tag::{self, JobTag, Verdict};

/// What came of a tag write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagWrite {
    /// Written to the live job (`scontrol`).
    Live,
    /// Written to the accounting database (`sacctmgr`, the job has finished).
    Database,
    /// Not written (said why).
    NotWritten,
}

/// Reads the job's comment, lets `update` change the tag (given the tag already there, if
/// readable), and writes it back: the live job first, the accounting database as a fallback.
/// Every call is bounded by the step's deadline.
pub fn write_tag(step: &JobStep<'_>, update: impl FnOnce(Option<JobTag>) -> JobTag) -> TagWrite {
    let _span = tracing::info_span!("tag").entered();
    let slurm = step.seams.slurm;
    let job = step.job_id();
    let comment = match slurm.admin_comment(job) {
        Ok(c) => c,
        Err(e) => {
            step.say(&format!(
                "cannot read the job's AdminComment, tag not written: {e}"
            ));
            return TagWrite::NotWritten;
        }
    };
    let previous = match tag::extract(&comment) {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            step.say(&format!(
                "replacing an unreadable fabric-check segment: {e}"
            ));
            None
        }
        None => None,
    };
    let new = update(previous);
    let text = tag::splice(&comment, &new);
    let written = match slurm.set_admin_comment(job, &text) {
        Ok(()) => TagWrite::Live,
        Err(e) => {
            // A finished job only changes in the database, through sacctmgr, which in Slurm 22.05
            // lower-cases the whole value (and stores `"` as a backtick, which `tag::extract`
            // reads back). Our own segment survives that; another tool's content may not.
            let ours = tag::splice("", &new);
            let foreign = text.replacen(&ours, "", 1);
            if foreign.chars().any(char::is_uppercase) {
                step.say(&format!(
                    "tag not written: the job has finished ({e}) and sacctmgr would lower-case the other tools' content of its AdminComment"
                ));
                return TagWrite::NotWritten;
            }
            if let Err(e) = slurm.set_admin_comment_db(job, &text.to_lowercase()) {
                step.say(&format!("tag not written: {e}"));
                return TagWrite::NotWritten;
            }
            TagWrite::Database
        }
    };
    step.say_phase(
        "tag",
        &format!(
            "tagged job {job}: verdict {}",
            new.verdict.map_or("none", Verdict::as_str)
        ),
    );
    written
}
