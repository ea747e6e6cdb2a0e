//! A job's meetings and their rendezvous ids: the id on the wire ([`meeting_id`]) and how a log
//! line names it ([`MeetingName`]), kept together so that the two read the same layout.

use std::fmt;

use fabric_proto::invocation::{BATCH_STEP_ID, FIRST_SPECIAL_STEP_ID, Invocation, Script};

/// Which of a job's meetings: each has a rendezvous id of its own ([`meeting_id`]), so a node
/// still looking for one meeting's leader never joins another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meeting {
    /// The prolog's: every node's probe verdict to the first node.
    Prolog,
    /// The epilog's: counter rises and records to the first node. Apart from the prolog's since
    /// a node's prolog can still be looking for its leader when the job's epilog starts (seen on
    /// 26.05: the prolog's leader found no free port, the job ended, and the other node's prolog
    /// joined the epilog's leader, which took its verdict for that node's epilog).
    Epilog,
    /// The end of this step, among the step's nodes.
    StepEnd(u32),
    /// The in-job watches' step times for one hop (`fabric_proto::straggler`), at the first
    /// node: a meeting every few seconds while the job runs, each with an id of its own.
    Stragglers(u64),
}

impl Meeting {
    /// The meeting this invocation of the job step holds; `None` for a step end without
    /// `--step-id`.
    pub fn of(inv: &Invocation) -> Option<Meeting> {
        match inv.script {
            Script::Prolog => Some(Meeting::Prolog),
            Script::Epilog => Some(Meeting::Epilog),
            Script::StepEnd => inv.step_id.map(Meeting::StepEnd),
            // The watch acts for its own node; its straggler hops meet by their own id.
            Script::Watch => None,
        }
    }
}

/// The epilog's bit.
const EPILOG: u64 = 1 << 63;
/// Step ids fold into the 31 bits between the job id and the epilog's bit.
const STEP_BITS: u64 = (1 << 31) - 1;

/// The rendezvous id of a meeting (it binds the MUNGE credentials and picks the port): the job
/// id for the prolog; the job id with the top bit set for the epilog; for a step's end, the job
/// id with `step + 1` in the 31 bits above it, so that two steps of one job ending at once on
/// the same first node meet apart, and apart from the job's prolog and epilog. Slurm's step ids
/// are small, or its special steps near `u32::MAX` (batch, extern), which fold to the top of the
/// 31 bits and stay distinct from each other, from the prolog's (never 0 above the job id) and
/// from the epilog's (never the top bit). A step's meeting keeps the id it had before the
/// epilog's got its own (`(step + 1) << 32 | job`) for every step id below 2^31 - 1.
pub fn meeting_id(job_id: u32, meeting: Meeting) -> u64 {
    let job = u64::from(job_id);
    match meeting {
        Meeting::Prolog => job,
        Meeting::Epilog => EPILOG | job,
        Meeting::StepEnd(s) => {
            // step + 1 in 1..=2^31-1: 0 is the prolog's, the top bit the epilog's.
            let tag = (u64::from(s) % STEP_BITS) + 1;
            (tag << 32) | job
        }
        Meeting::Stragglers(hop) => {
            // The epilog's bit with a tag above the job id: no other meeting has both.
            let tag = (hop % STEP_BITS) + 1;
            EPILOG | (tag << 32) | job
        }
    }
}

/// How a log line or a rejection names a rendezvous id: `job 7` (the prolog's meeting, and any
/// other plain job id, such as the collective's), `job 7's epilog`, `job 7's step 3 end`,
/// `job 7's batch step end`; rather than the 64-bit number an epilog's or a step end's id is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeetingName(pub u64);

impl fmt::Display for MeetingName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = self.0;
        let job = id & 0xffff_ffff;
        let tag = (id >> 32) & STEP_BITS;
        match (id & EPILOG != 0, tag) {
            (false, 0) => write!(f, "job {job}"),
            (true, 0) => write!(f, "job {job}'s epilog"),
            (false, tag) => {
                // Undo the fold of Slurm's special steps (the only ids that far up).
                let folded = tag - 1;
                let special = u64::from(FIRST_SPECIAL_STEP_ID) - STEP_BITS;
                let step = if folded >= special {
                    folded + STEP_BITS
                } else {
                    folded
                };
                if step == u64::from(BATCH_STEP_ID) {
                    write!(f, "job {job}'s batch step end")
                } else {
                    write!(f, "job {job}'s step {step} end")
                }
            }
            (true, tag) => write!(f, "job {job}'s straggler hop {}", tag - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_meeting_of_a_job_has_an_id_of_its_own_and_steps_keep_theirs() {
        assert_eq!(
            MeetingName(meeting_id(7, Meeting::Stragglers(41))).to_string(),
            "job 7's straggler hop 41"
        );
        let job = 360_873;
        let mut ids = vec![
            meeting_id(job, Meeting::Prolog),
            meeting_id(job, Meeting::Epilog),
        ];
        // Small step ids and Slurm's special ones near u32::MAX (interactive, batch, extern,
        // pending; 0xffffffff is no step's).
        let steps = [
            0,
            1,
            2,
            999,
            0xffff_fff0,
            0xffff_fffa,
            0xffff_fffb,
            0xffff_fffc,
        ];
        ids.extend(steps.iter().map(|&s| meeting_id(job, Meeting::StepEnd(s))));
        // The watch's straggler hops: a hop far up the clock, the first hops, one that folds.
        let hops = [0, 1, 2, 355_000_000, (1 << 31) - 2];
        ids.extend(
            hops.iter()
                .map(|&h| meeting_id(job, Meeting::Stragglers(h))),
        );
        let distinct: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), ids.len(), "{ids:x?}");
        // The job id is in every id's low 32 bits (it binds the credentials).
        assert!(ids.iter().all(|id| id & 0xffff_ffff == u64::from(job)));
        assert_eq!(meeting_id(job, Meeting::Prolog), u64::from(job));
        // A step's id as older releases computed it, so a step's meeting spans an upgrade.
        assert_eq!(
            meeting_id(job, Meeting::StepEnd(3)),
            (4u64 << 32) | u64::from(job)
        );
    }

    #[test]
    fn a_meeting_is_named_by_its_job_and_what_it_is_not_by_its_64_bit_id() {
        let name = |m| MeetingName(meeting_id(9_302, m)).to_string();
        assert_eq!(name(Meeting::Prolog), "job 9302");
        assert_eq!(name(Meeting::Epilog), "job 9302's epilog");
        assert_eq!(name(Meeting::StepEnd(0)), "job 9302's step 0 end");
        assert_eq!(name(Meeting::StepEnd(4_000)), "job 9302's step 4000 end");
        assert_eq!(
            name(Meeting::StepEnd(BATCH_STEP_ID)),
            "job 9302's batch step end"
        );
        assert_eq!(
            name(Meeting::StepEnd(0xffff_fffc)),
            "job 9302's step 4294967292 end",
            "the extern step, unfolded"
        );
        assert_eq!(
            MeetingName((1 << 63) | (5 << 32) | 7).to_string(),
            "job 7's straggler hop 4",
            "the epilog's bit with a tag is a straggler hop's"
        );
        assert_eq!(name(Meeting::Stragglers(0)), "job 9302's straggler hop 0");
    }
}
