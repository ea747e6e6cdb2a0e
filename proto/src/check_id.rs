//! Every check id, in one place: the probe's checks, and what the job step itself concludes.
//!
//! Ids are stable and dotted (`<area>.<what>`), and used the same way in the configuration, the
//! probe's JSON, drain reasons, the job tag and `docs/checks.md`. Code on either side of a process
//! boundary names them through these constants, never as literals.

/// Port state is not ACTIVE/LinkUp, or differs from its group.
pub const IB_PORT_STATE: &str = "ib.port_state";
/// Port rate below the expected or the group's majority.
pub const IB_PORT_RATE: &str = "ib.port_rate";
/// Link layer (InfiniBand or Ethernet) not the expected one.
pub const IB_LINK_LAYER: &str = "ib.link_layer";
/// Fewer (or more) RDMA ports than expected.
pub const IB_PORT_COUNT: &str = "ib.port_count";
/// InfiniBand MTU differs from the expected or the group's majority.
pub const IB_MTU: &str = "ib.mtu";
/// Error counters rose (deltas only, never since-boot totals).
pub const IB_COUNTERS: &str = "ib.counters";
/// A RoCE v2 GID bound to the port's netdev.
pub const ROCE_GID: &str = "roce.gid";
/// The netdev MTU of a RoCE port.
pub const ROCE_MTU: &str = "roce.mtu";
/// ECN enabled on the RoCE priorities.
pub const ROCE_ECN: &str = "roce.ecn";
/// PFC on the RoCE priority.
pub const ROCE_PFC: &str = "roce.pfc";
/// ECN marks, CNPs and pause frames.
pub const ROCE_CONGESTION: &str = "roce.congestion";
/// Retransmission and sequence-error counters.
pub const ROCE_RETRANS: &str = "roce.retrans";
/// The node's bill of materials drifted from the pinned one.
pub const BOM_DRIFT: &str = "bom.drift";
/// GPU count differs from the expected.
pub const GPU_COUNT: &str = "gpu.count";
/// GPU ↔ NIC PCIe affinity.
pub const GPU_NIC_AFFINITY: &str = "gpu.nic_affinity";
/// GPUDirect RDMA availability.
pub const GPU_GDR: &str = "gpu.gdr";
/// An HCA's or GPU's PCIe link trained below its maximum and below its peers.
pub const PCIE_LINK: &str = "pcie.link";
/// HCAs of one kind run different firmware.
pub const HCA_FW_VER: &str = "hca.fw_ver";
/// HCAs of one kind and shape have different board ids (PSIDs).
pub const HCA_BOARD_ID: &str = "hca.board_id";
/// An HCA or GPU of the node's last saved probe is gone.
pub const INVENTORY_GONE: &str = "inventory.gone";
/// The node-local NCCL all-reduce (`probe --nccl-local`).
pub const NCCL_LOCAL: &str = "nccl.local";
/// The verbs loopback (`probe --verbs`).
pub const VERBS_LOOPBACK: &str = "verbs.loopback";

/// The probe child could not run, crashed or printed no document (not a node failure).
pub const PROBE_ERROR: &str = "probe.error";
/// The probe child ran past its share of the deadline and was killed (not a node failure).
pub const PROBE_TIMEOUT: &str = "probe.timeout";
/// The job's collective found this node slow on both ring links.
pub const COLLECTIVE_SLOW_NODE: &str = "collective.slow_node";
/// The job's collective found both of this node's ring links about half as fast as the links
/// beside them, and not slow enough for [`COLLECTIVE_SLOW_NODE`] (a `warn`, never drained).
pub const COLLECTIVE_SLOW_SUSPECT: &str = "collective.slow_suspect";
/// The job's collective found a latency tail on both of this node's ring links (a `warn`).
pub const COLLECTIVE_LATENCY_TAIL: &str = "collective.latency_tail";
/// A node of the job never joined the rendezvous.
pub const RENDEZVOUS_MISSING: &str = "rendezvous.missing";
/// A node uniform inside but unlike the job's other nodes (port rates, MTU, link layer,
/// firmware), named by the first node at the rendezvous (a `warn`, never drained).
pub const JOB_PEER_PARITY: &str = "job.peer_parity";
/// A node whose training steps ran at least 1.10× the job's median in three consecutive
/// windows while the job ran, named by the first node's watch (evidence, never drained).
pub const JOB_STRAGGLER: &str = "job.straggler";
/// The job's steps slowed, but as the workload's (every node together, a slow rank that
/// rotates, a node slower since its first steps), never as a node's (evidence, never drained).
pub const JOB_WORKLOAD_SLOW: &str = "job.workload_slow";

/// The ids of the probe's checks, in the order `docs/checks.md` lists them.
pub const PROBE_CHECKS: &[&str] = &[
    IB_PORT_STATE,
    IB_PORT_RATE,
    IB_LINK_LAYER,
    IB_PORT_COUNT,
    IB_MTU,
    IB_COUNTERS,
    ROCE_GID,
    ROCE_MTU,
    ROCE_ECN,
    ROCE_PFC,
    ROCE_CONGESTION,
    ROCE_RETRANS,
    BOM_DRIFT,
    GPU_COUNT,
    GPU_NIC_AFFINITY,
    GPU_GDR,
    PCIE_LINK,
    HCA_FW_VER,
    HCA_BOARD_ID,
    INVENTORY_GONE,
    NCCL_LOCAL,
    VERBS_LOOPBACK,
];

/// The ids the job step itself writes into a node's result.
pub const JOB_STEP_CHECKS: &[&str] = &[
    PROBE_ERROR,
    PROBE_TIMEOUT,
    COLLECTIVE_SLOW_NODE,
    COLLECTIVE_SLOW_SUSPECT,
    RENDEZVOUS_MISSING,
    JOB_PEER_PARITY,
    JOB_STRAGGLER,
    JOB_WORKLOAD_SLOW,
];

/// Whether `id` is one this version knows.
pub fn is_known(id: &str) -> bool {
    PROBE_CHECKS.contains(&id) || JOB_STEP_CHECKS.contains(&id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_is_dotted_lowercase_and_listed_once() {
        let mut all: Vec<&str> = PROBE_CHECKS
            .iter()
            .chain(JOB_STEP_CHECKS)
            .copied()
            .collect();
        for id in &all {
            let (area, what) = id.split_once('.').expect("dotted");
            assert!(
                !area.is_empty() && !what.is_empty() && !what.contains('.'),
                "{id}"
            );
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '.' || c == '_'),
                "{id}"
            );
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "an id is listed twice");
    }

    #[test]
    fn an_unknown_id_is_not_known() {
        assert!(is_known(COLLECTIVE_SLOW_NODE));
        assert!(!is_known("ib.port_stat"));
    }
}
