//! The leader's read-modify-write of the job's tag in `AdminComment`: read from structured
//! output, written to the job's exact name (`A_T`, `H+O`), in the live form through `scontrol`
//! and, once the job has finished, in the database form through `sacctmgr` (see
//! [`fabric_proto::tag::Form`]).
//!
//! Every read-modify-write of one node holds that node's tag lock (`<state_dir>/tag.lock`,
//! root's), so the step-ends and the epilog leader on one node never interleave their read and
//! write; writers on different nodes still can (see `docs/records.md`).

use std::time::Duration;

use super::JobStep;
use fabric_proto::tag::{self, Form, JobTag, Verdict};

/// What came of a tag write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagWrite {
    /// Written to the live job (`scontrol`).
    Live,
    /// Written to the accounting database (`sacctmgr`, the job has finished).
    Database,
    /// The job's comment already held exactly this tag: nothing written.
    Unchanged,
    /// Not written (said why).
    NotWritten,
}

/// Where a tag may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The live job, else (it has finished) the accounting database.
    LiveOrDatabase,
    /// The live job only: a step's end leaves a finished job to the epilog.
    LiveOnly,
}

/// Reads the job's comment, lets `update` change the tag (given the tag already there, if
/// readable), and writes it back: the live job first, the accounting database as a fallback.
/// Every call is bounded by the step's deadline.
pub fn write_tag(step: &JobStep<'_>, update: impl FnOnce(Option<JobTag>) -> JobTag) -> TagWrite {
    write_tag_to(step, Target::LiveOrDatabase, update)
}

/// This node's tag lock, held while it lives; `None` when it cannot be had in time (the write
/// goes ahead unlocked, said why: a missing tag is worse than a rare lost update).
struct TagLock(#[allow(dead_code)] std::fs::File);

impl TagLock {
    fn take(step: &JobStep<'_>) -> Option<Self> {
        use rustix::fs::{FlockOperation, flock};
        let path = step.setup.state_dir.join("tag.lock");
        let file = match std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) => {
                step.say(&format!(
                    "cannot open the tag lock {} ({e}); writing unlocked",
                    path.display()
                ));
                return None;
            }
        };
        let wait = step.setup.budget().tag_lock_wait(step.deadline());
        let until = std::time::Instant::now() + wait;
        loop {
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Some(Self(file)),
                Err(_) if std::time::Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    step.say(&format!(
                        "the tag lock {} is still held ({e}); writing unlocked",
                        path.display()
                    ));
                    return None;
                }
            }
        }
    }
}

/// [`write_tag`] to `target`.
pub fn write_tag_to(
    step: &JobStep<'_>,
    target: Target,
    update: impl FnOnce(Option<JobTag>) -> JobTag,
) -> TagWrite {
    let _span = tracing::info_span!("tag").entered();
    let _lock = TagLock::take(step);
    let slurm = step.seams.slurm;
    let job = step.job_id();
    let (name, comment) = match slurm.admin_comment(job) {
        Ok(c) => (c.job, c.text),
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
    if text == comment {
        // A step's end wrote this very tag while the job ran: it stays in its live form.
        step.say(&format!(
            "job {name}: the tag already holds this; not rewritten"
        ));
        return TagWrite::Unchanged;
    }
    let written = match slurm.set_admin_comment(&name, &text) {
        Ok(()) => TagWrite::Live,
        Err(e) if target == Target::LiveOnly => {
            step.say(&format!(
                "job {name} is no longer live ({e}); its epilog writes the tag"
            ));
            return TagWrite::NotWritten;
        }
        Err(e) => {
            // A finished job only changes in the database, through sacctmgr, which turns every
            // `"` and `'` into a backtick and in Slurm 22.05 lower-cases the whole value. Our
            // segment goes in its database form, which neither changes; another tool's content
            // might be changed, so it must hold neither quotes nor upper case.
            let text = tag::splice_as(&comment, &new, Form::Database);
            let foreign = text.replacen(&tag::segment(&new, Form::Database), "", 1);
            if foreign
                .chars()
                .any(|c| c.is_uppercase() || c == '"' || c == '\'')
            {
                step.say(&format!(
                    "tag not written: the job has finished ({e}) and sacctmgr would lower-case or unquote the other tools' content of its AdminComment"
                ));
                return TagWrite::NotWritten;
            }
            if let Err(e) = slurm.set_admin_comment_db(&name, &text) {
                step.say(&format!("tag not written: {e}"));
                return TagWrite::NotWritten;
            }
            TagWrite::Database
        }
    };
    let form = if written == TagWrite::Live {
        Form::Live
    } else {
        Form::Database
    };
    remember(step, &name, &new, form);
    step.say_phase(
        "tag",
        &format!(
            "tagged job {name}: verdict {}",
            new.verdict.map_or("none", Verdict::as_str)
        ),
    );
    written
}

/// Appends the write to this node's ledger ([`crate::tag_ledger`]): a local file, no Slurm call.
/// A ledger that cannot be written is said and changes nothing else.
fn remember(step: &JobStep<'_>, name: &str, new: &JobTag, form: Form) {
    let w = crate::tag_ledger::Written {
        job: name.to_owned(),
        at_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        form: match form {
            Form::Live => "live",
            Form::Database => "database",
        }
        .to_owned(),
        verdict: new.verdict.map_or("none", Verdict::as_str).to_owned(),
        bytes: tag::segment(new, form).len(),
    };
    if let Err(e) = crate::tag_ledger::record(&step.setup.state_dir, &w) {
        step.say(&format!(
            "the tag of job {name} is written but not recorded, so its loss would go unnoticed: {e}"
        ));
    }
}
