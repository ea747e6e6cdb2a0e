//! How a drain for a fault seen while a job ran is worded, so that whoever reads the node's
//! reason (the drill, an admin's `sinfo -R`) can tell which part of fabric-check saw it: the
//! epilog's probe over the job window, or the in-job watch.
//!
//! The drain path adds `fabric-check: <check>: ` in front; the message is then
//! `during job <id>: <what>` (the epilog) or `during job <id> (watch): <what>` (the watch).

/// Which part of fabric-check saw a fault during a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeenBy {
    /// The epilog, comparing the job's end with its start.
    Epilog,
    /// The in-job watch, while the job ran.
    Watch,
}

const DURING_JOB: &str = "during job ";
const WATCH_MARK: &str = " (watch)";

/// The drain message for a fault `what` seen during job `job`.
pub fn drain_message(by: SeenBy, job: u32, what: &str) -> String {
    match by {
        SeenBy::Epilog => format!("{DURING_JOB}{job}: {what}"),
        SeenBy::Watch => format!("{DURING_JOB}{job}{WATCH_MARK}: {what}"),
    }
}

/// Who saw the fault a drain reason names, and the job it was seen during; `None` when the
/// reason is not one of a fault seen during a job.
pub fn seen_by(reason: &str) -> Option<(SeenBy, u32)> {
    let at = reason.find(DURING_JOB)?;
    let rest = &reason[at + DURING_JOB.len()..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let job: u32 = rest[..digits].parse().ok()?;
    let after = &rest[digits..];
    if after.starts_with(WATCH_MARK) {
        Some((SeenBy::Watch, job))
    } else if after.starts_with(':') {
        Some((SeenBy::Epilog, job))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_message_reads_back_as_who_saw_it_and_during_which_job() {
        for by in [SeenBy::Epilog, SeenBy::Watch] {
            let m = drain_message(by, 4711, "mlx5_0 port 1 is DOWN");
            let reason = format!("fabric-check: ib.port_state: {m}");
            assert_eq!(seen_by(&reason), Some((by, 4711)), "{reason}");
        }
    }

    #[test]
    fn a_reason_of_another_kind_names_no_job() {
        assert_eq!(
            seen_by("fabric-check: ib.port_state: mlx5_0 port 1 is DOWN"),
            None
        );
        assert_eq!(seen_by("Not responding"), None);
        assert_eq!(seen_by("fabric-check: x: during job x: y"), None);
        assert_eq!(seen_by("fabric-check: x: during job 12 and more"), None);
    }
}
