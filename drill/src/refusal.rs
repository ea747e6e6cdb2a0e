//! Why the drill refuses to go on: the one error the gates ([`crate::gate`]) latch and an
//! injection ([`crate::inject::InjectError::Refused`]) carries. Its own module so that the
//! injectors need not know the gates, nor the gates the injectors' inside.

/// Why the drill refuses to go on. Each says what was wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// A class that only exists on the testbed, on a real cluster.
    #[error(
        "class {0} exists only on the testbed (its counters rise only when the fault is real); leave it out of --classes (or choose another --workload-fault)"
    )]
    TestbedOnly(&'static str),
    /// A class that changes hardware or a daemon, without `--allow-hardware CLASS`.
    #[error(
        "class {0} changes real hardware or a daemon on the reservation's nodes: add --allow-hardware {0} to allow it (it is restored from the journal), or leave it out"
    )]
    NeedsAllowHardware(&'static str),
    /// A node that is not one of the drill's.
    #[error(
        "node {node} is not one of the drill's nodes ({nodes}): the drill changes only the nodes of --nodes, all held by its reservation"
    )]
    NotADrillNode {
        /// The node.
        node: String,
        /// The drill's nodes, comma-separated.
        nodes: String,
    },
    /// The reservation does not hold a node (any more), or cannot be read.
    #[error(
        "reservation {reservation}: {why}; the drill changes only nodes its reservation holds: extend or recreate the reservation, or leave the node out with --nodes"
    )]
    Reservation {
        /// The reservation.
        reservation: String,
        /// What is wrong.
        why: String,
    },
    /// Jobs this drill did not submit run on its nodes.
    #[error(
        "the drill's nodes run jobs this drill did not submit ({}): the drill changes nothing while they run (a job's name proves nothing, only the ids the drill submitted are its own); wait until they end, cancel them if they are a stopped drill's, or drill on other nodes",
        .0.join(", ")
    )]
    ForeignJobs(Vec<String>),
    /// Nodes out of service that the drill did not take out (or not yet back).
    #[error(
        "the drill's nodes must be in service, and these are not: {}; the drill resumes only what its own faults drained: check them, resume them (`fabric-check resume NODE`) or leave them out with --nodes",
        .0.join(", ")
    )]
    OutOfService(Vec<String>),
    /// A node the drill faulted was taken out by something else than fabric-check.
    #[error(
        "node {node} was taken out by something other than fabric-check ({why}) while the drill's fault was on it: the drill restored its fault and leaves the node as it is; check it, then `fabric-check resume {node}`"
    )]
    TakenOut {
        /// The node.
        node: String,
        /// Its state and reason.
        why: String,
    },
    /// A signal asked the drill to stop ([`crate::halt`]).
    #[error(
        "stopped by {0}: no round starts and no fault goes in; the round under way restored its fault"
    )]
    Signalled(String),
    /// Slurm could not be asked: the drill changes nothing it cannot check.
    #[error(
        "cannot check {what} before a change: {error}; the drill changes nothing it cannot check: look at slurmctld, then run the drill again"
    )]
    Unchecked {
        /// What was being checked.
        what: &'static str,
        /// What went wrong.
        error: String,
    },
}
