//! The drill's fault classes: what each injects, how it is restored, where it applies and
//! whether it may touch real hardware.
//!
//! Every class has a stable id (`port_down`, ...) used on the command line, in the JSON and
//! Prometheus output and in docs/drill.md. Three classes are controls that must **not** lead to
//! a drain or a non-passing verdict: `checkpoint_burst`, `background_load` and `clean`.

use serde::{Deserialize, Serialize};

/// When the fault is injected, relative to the round's job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// On an idle node, before the round's job is submitted: the prolog's probe (or, for
    /// congestion, the collective) should catch it.
    Before,
    /// While the round's job runs: the epilog's job window should catch it.
    During,
    /// On an idle node with no job at all: `fabric-check health` (Slurm's HealthCheckProgram)
    /// should catch it.
    Idle,
}

impl Moment {
    /// The stable id.
    pub fn id(self) -> &'static str {
        match self {
            Moment::Before => "before",
            Moment::During => "during",
            Moment::Idle => "idle",
        }
    }
}

/// The kind of fabric a node has, which decides the classes that apply to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// InfiniBand for the GPUs (and RoCE ports for storage).
    Ib,
    /// RoCE v2 for the GPUs.
    Roce,
}

impl NodeKind {
    /// The stable id.
    pub fn id(self) -> &'static str {
        match self {
            NodeKind::Ib => "ib",
            NodeKind::Roce => "roce",
        }
    }

    /// The testbed's fixture scenario prefix (`scripts/gen-fixtures --list`).
    pub fn fixture_prefix(self) -> &'static str {
        match self {
            NodeKind::Ib => "ib8",
            NodeKind::Roce => "roce8",
        }
    }
}

/// One fault class (or control).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultClass {
    /// One port down.
    PortDown,
    /// One port trained at half its rate.
    RateDowngrade,
    /// The RoCE netdev's MTU drifted to 1500.
    MtuDrift,
    /// PFC off on the lossless priority.
    PfcOff,
    /// ECN (notification and reaction point) off on the lossless priority.
    EcnOff,
    /// No RoCE v2 GID bound to a port's netdev.
    RoceGidMissing,
    /// The link went down and up again: `link_downed` rises.
    LinkFlap,
    /// Physical errors: `symbol_error` rises.
    ErrorCounters,
    /// Pause-frame storm counters rise.
    PauseStorm,
    /// One node's path is slow (`tc tbf`), seen by the collective.
    Congestion,
    /// A node removed from a running job: its slurmd is stopped.
    NodeRemoved,
    /// Control: heavy I/O into the job's checkpoint folder while it runs.
    CheckpointBurst,
    /// Control: CPU hogs and loopback traffic while the job runs.
    BackgroundLoad,
    /// Control: nothing injected.
    Clean,
}

/// Every class, faults first, then the three controls.
pub const ALL: &[FaultClass] = &[
    FaultClass::PortDown,
    FaultClass::RateDowngrade,
    FaultClass::MtuDrift,
    FaultClass::PfcOff,
    FaultClass::EcnOff,
    FaultClass::RoceGidMissing,
    FaultClass::LinkFlap,
    FaultClass::ErrorCounters,
    FaultClass::PauseStorm,
    FaultClass::Congestion,
    FaultClass::NodeRemoved,
    FaultClass::CheckpointBurst,
    FaultClass::BackgroundLoad,
    FaultClass::Clean,
];

/// A class id that is not one of [`ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown drill class {0:?}; the classes are: {list}", list = ids().join(", "))]
pub struct UnknownClass(pub String);

/// Every class id, in [`ALL`]'s order.
pub fn ids() -> Vec<&'static str> {
    ALL.iter().map(|c| c.id()).collect()
}

impl FaultClass {
    /// The stable id.
    pub fn id(self) -> &'static str {
        match self {
            FaultClass::PortDown => "port_down",
            FaultClass::RateDowngrade => "rate_downgrade",
            FaultClass::MtuDrift => "mtu_drift",
            FaultClass::PfcOff => "pfc_off",
            FaultClass::EcnOff => "ecn_off",
            FaultClass::RoceGidMissing => "roce_gid_missing",
            FaultClass::LinkFlap => "link_flap",
            FaultClass::ErrorCounters => "error_counters",
            FaultClass::PauseStorm => "pause_storm",
            FaultClass::Congestion => "congestion",
            FaultClass::NodeRemoved => "node_removed",
            FaultClass::CheckpointBurst => "checkpoint_burst",
            FaultClass::BackgroundLoad => "background_load",
            FaultClass::Clean => "clean",
        }
    }

    /// The class with this id.
    pub fn parse(id: &str) -> Result<FaultClass, UnknownClass> {
        ALL.iter()
            .copied()
            .find(|c| c.id() == id)
            .ok_or_else(|| UnknownClass(id.to_owned()))
    }

    /// A control: must end with no drain and every verdict passing.
    pub fn is_control(self) -> bool {
        matches!(
            self,
            FaultClass::CheckpointBurst | FaultClass::BackgroundLoad | FaultClass::Clean
        )
    }

    /// What the injector does (docs/drill.md has the same table).
    pub fn injects(self) -> &'static str {
        match self {
            FaultClass::PortDown => "port 1 of one HCA down (state, phys_state, rate, operstate)",
            FaultClass::RateDowngrade => "port 1 of one HCA at half its rate",
            FaultClass::MtuDrift => "one RoCE netdev's MTU at 1500",
            FaultClass::PfcOff => "PFC off on the lossless priority 3 of one RoCE port",
            FaultClass::EcnOff => "ECN (roce_np, roce_rp) off on priority 3 of one RoCE port",
            FaultClass::RoceGidMissing => "no RoCE v2 GID on one port's netdev",
            FaultClass::LinkFlap => "link_downed +1 on one port while the job runs",
            FaultClass::ErrorCounters => "symbol_error +500 on one port",
            FaultClass::PauseStorm => "rx/tx priority-3 pause frames +millions on one port",
            FaultClass::Congestion => "tc tbf at 100 mbit on the node's collective path",
            FaultClass::NodeRemoved => "the node's slurmd stopped while a job runs on it",
            FaultClass::CheckpointBurst => {
                "256 MiB written and synced into the job's checkpoint folder"
            }
            FaultClass::BackgroundLoad => "CPU hogs and a loopback TCP stream while the job runs",
            FaultClass::Clean => "nothing",
        }
    }

    /// How the injector undoes it.
    pub fn restores(self) -> &'static str {
        match self {
            FaultClass::PortDown
            | FaultClass::RateDowngrade
            | FaultClass::MtuDrift
            | FaultClass::PfcOff
            | FaultClass::EcnOff
            | FaultClass::RoceGidMissing
            | FaultClass::LinkFlap
            | FaultClass::ErrorCounters
            | FaultClass::PauseStorm => {
                "the node's sysfs tree as it was before (a healthy tree of its kind); on real \
                 hardware the value read before the change"
            }
            FaultClass::Congestion => "the tbf qdisc deleted",
            FaultClass::NodeRemoved => "slurmd started again and the node resumed",
            FaultClass::CheckpointBurst => "the burst's files deleted",
            FaultClass::BackgroundLoad => "the hogs killed by pid, the stream closed",
            FaultClass::Clean => "nothing",
        }
    }

    /// Whether, on a real cluster, the injector changes real hardware or a daemon, and so runs
    /// only with `--allow-hardware CLASS`. The counter classes cannot be injected on real
    /// hardware at all (counters only rise when the fault is real): see [`FaultClass::testbed_only`].
    pub fn touches_hardware(self) -> bool {
        matches!(
            self,
            FaultClass::PortDown
                | FaultClass::MtuDrift
                | FaultClass::PfcOff
                | FaultClass::EcnOff
                | FaultClass::Congestion
                | FaultClass::NodeRemoved
        )
    }

    /// Classes that exist only on the testbed (written into a fixture tree).
    pub fn testbed_only(self) -> bool {
        matches!(
            self,
            FaultClass::RateDowngrade
                | FaultClass::RoceGidMissing
                | FaultClass::LinkFlap
                | FaultClass::ErrorCounters
                | FaultClass::PauseStorm
        )
    }

    /// The moments the class is injected at.
    pub fn moments(self) -> &'static [Moment] {
        use Moment::*;
        match self {
            FaultClass::PortDown
            | FaultClass::RateDowngrade
            | FaultClass::MtuDrift
            | FaultClass::PfcOff
            | FaultClass::EcnOff
            | FaultClass::RoceGidMissing
            | FaultClass::ErrorCounters => &[Before, During, Idle],
            FaultClass::PauseStorm => &[Before, During],
            FaultClass::LinkFlap
            | FaultClass::NodeRemoved
            | FaultClass::CheckpointBurst
            | FaultClass::BackgroundLoad => &[During],
            FaultClass::Congestion => &[Before],
            FaultClass::Clean => &[Before, During],
        }
    }

    /// The node kinds the class applies to.
    pub fn kinds(self) -> &'static [NodeKind] {
        match self {
            FaultClass::MtuDrift | FaultClass::PfcOff | FaultClass::EcnOff => &[NodeKind::Roce],
            FaultClass::LinkFlap | FaultClass::ErrorCounters => &[NodeKind::Ib],
            _ => &[NodeKind::Ib, NodeKind::Roce],
        }
    }

    /// The testbed fixture scenario that holds the fault on a node of `kind`
    /// (`scripts/gen-fixtures --list`), for the classes written into a sysfs tree.
    pub fn fixture(self, kind: NodeKind) -> Option<&'static str> {
        use NodeKind::*;
        Some(match (self, kind) {
            (FaultClass::PortDown, Ib) => "ib8-port-down",
            (FaultClass::PortDown, Roce) => "roce8-port-down",
            (FaultClass::RateDowngrade, Ib) => "ib8-half-rate",
            (FaultClass::RateDowngrade, Roce) => "roce8-half-rate",
            (FaultClass::MtuDrift, Roce) => "roce8-mtu-1500",
            (FaultClass::PfcOff, Roce) => "roce8-pfc-off",
            (FaultClass::EcnOff, Roce) => "roce8-ecn-off",
            (FaultClass::RoceGidMissing, Ib) => "ib8-no-roce-v2-gid",
            (FaultClass::RoceGidMissing, Roce) => "roce8-no-v2-gid",
            (FaultClass::LinkFlap, Ib) => "ib8-link-downed",
            (FaultClass::ErrorCounters, Ib) => "ib8-symbol-errors",
            (FaultClass::PauseStorm, Ib) => "ib8-pause-storm",
            (FaultClass::PauseStorm, Roce) => "roce8-pause-storm",
            _ => return None,
        })
    }

    /// How many nodes the round's job needs (the collective needs three for a majority).
    pub fn job_nodes(self) -> usize {
        match self {
            FaultClass::Congestion => 3,
            _ => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_id_parses_back_to_its_class_and_ids_are_unique() {
        for c in ALL {
            assert_eq!(FaultClass::parse(c.id()), Ok(*c));
        }
        let mut ids = ids();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), ALL.len());
    }

    #[test]
    fn an_unknown_class_names_the_known_ones() {
        let e = FaultClass::parse("port-down").unwrap_err().to_string();
        assert!(e.contains("port_down") && e.contains("clean"), "{e}");
    }

    #[test]
    fn there_are_at_least_ten_fault_classes_and_three_controls() {
        let faults = ALL.iter().filter(|c| !c.is_control()).count();
        let controls = ALL.iter().filter(|c| c.is_control()).count();
        assert!(faults >= 10, "{faults}");
        assert_eq!(controls, 3);
    }

    #[test]
    fn every_sysfs_class_has_a_fixture_for_each_kind_it_applies_to() {
        for c in ALL {
            if matches!(
                c,
                FaultClass::Congestion
                    | FaultClass::NodeRemoved
                    | FaultClass::CheckpointBurst
                    | FaultClass::BackgroundLoad
                    | FaultClass::Clean
            ) {
                continue;
            }
            for k in c.kinds() {
                assert!(c.fixture(*k).is_some(), "{} on {}", c.id(), k.id());
            }
        }
    }
}
