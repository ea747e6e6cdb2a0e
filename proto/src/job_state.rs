//! Slurm's job states as `sacct` and `squeue` print them, parsed once for every reader: the
//! report, the tag ledger's settled check, the end-to-end tests.

use serde::Serialize;

/// A job's final state as Slurm names it (the base state; flags are dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Finished with exit code 0.
    Completed,
    /// Non-zero exit.
    Failed,
    /// Hit its time limit.
    Timeout,
    /// A node of the job failed.
    NodeFail,
    /// Out of memory.
    OutOfMemory,
    /// Node boot failure.
    BootFail,
    /// Missed its deadline.
    Deadline,
    /// Cancelled by a user or admin.
    Cancelled,
    /// Preempted.
    Preempted,
    /// An attempt that was requeued (a record seen with `sacct --duplicates`).
    Requeued,
    /// Still running.
    Running,
    /// Not started.
    Pending,
    /// Suspended.
    Suspended,
    /// The record of an allocation before a shrink (`scontrol update JobId=J NodeList=`, which
    /// spare nodes use): the job goes on under the same id in a record of its own.
    Resizing,
    /// Anything else.
    Other,
}

impl JobState {
    /// Parses Slurm's state name (`"COMPLETED"`, `"CANCELLED by 0"`, `"FAILED"`...).
    pub fn parse(s: &str) -> Self {
        let base = s.split_whitespace().next().unwrap_or("");
        match base {
            "COMPLETED" | "CD" => Self::Completed,
            "FAILED" | "F" => Self::Failed,
            "TIMEOUT" | "TO" => Self::Timeout,
            "NODE_FAIL" | "NF" => Self::NodeFail,
            "OUT_OF_MEMORY" | "OOM" => Self::OutOfMemory,
            "BOOT_FAIL" | "BF" => Self::BootFail,
            "DEADLINE" | "DL" => Self::Deadline,
            "CANCELLED" | "CA" => Self::Cancelled,
            "PREEMPTED" | "PR" => Self::Preempted,
            "REQUEUED" | "RQ" | "REQUEUE_HOLD" | "REQUEUE_FED" => Self::Requeued,
            "RUNNING" | "R" | "COMPLETING" => Self::Running,
            "PENDING" | "PD" => Self::Pending,
            "SUSPENDED" | "S" => Self::Suspended,
            "RESIZING" | "RS" => Self::Resizing,
            _ => Self::Other,
        }
    }

    /// Ended badly in a way that wastes the GPU time spent (not cancellation).
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Self::Failed
                | Self::Timeout
                | Self::NodeFail
                | Self::OutOfMemory
                | Self::BootFail
                | Self::Deadline
        )
    }

    /// Has not ended yet.
    pub fn is_live(self) -> bool {
        matches!(self, Self::Running | Self::Pending | Self::Suspended)
    }

    /// A final state: the job will not run again under this id (a requeued attempt and an
    /// unknown state are not final).
    pub fn has_ended(self) -> bool {
        self.is_failure() || matches!(self, Self::Completed | Self::Cancelled | Self::Preempted)
    }
}

#[cfg(test)]
mod tests {
    use super::JobState;

    #[test]
    fn only_final_states_have_ended_whatever_sacct_appends() {
        for s in [
            "COMPLETED",
            "CANCELLED by 0",
            "FAILED",
            "OUT_OF_MEMORY",
            "PREEMPTED",
            "DEADLINE",
        ] {
            assert!(JobState::parse(s).has_ended(), "{s}");
        }
        for s in [
            "RUNNING",
            "COMPLETING",
            "PENDING",
            "REQUEUED",
            "SUSPENDED",
            "",
        ] {
            assert!(!JobState::parse(s).has_ended(), "{s}");
        }
    }
}
