//! The drill's fault classes: what each injects, how it is restored, where it applies and
//! whether it may touch real hardware.
//!
//! Every class has a stable id (`port_down`, ...) used on the command line, in the JSON and
//! Prometheus output and in docs/drill.md. Three classes are controls that must **not** lead to
//! a drain or a non-passing verdict: `checkpoint_burst`, `background_load` and `clean`.

use serde::{Deserialize, Serialize};

use crate::grade::{Grading, Size, SizeKind};

/// The multiples of a threshold `--graded` runs by default: two controls (half of it, and at it:
/// the checks fire above a threshold) and two faults.
const THRESHOLD_SIZES: &[Size] = &[
    Size::ThresholdMilli(500),
    Size::ThresholdMilli(1000),
    Size::ThresholdMilli(2000),
    Size::ThresholdMilli(10_000),
];

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

    /// The testbed's healthy fixture scenario of this kind (what a node's tree is between faults).
    pub fn healthy_fixture(self) -> &'static str {
        match self {
            NodeKind::Ib => "ib8-healthy",
            NodeKind::Roce => "roce8-healthy",
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
    /// DCQCN congestion notifications (CNPs sent and handled, ECN marks) storm.
    CnpStorm,
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
    FaultClass::CnpStorm,
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

/// Everything the drill decides about one class: one row of [`FaultClass::spec`]'s table. Every
/// field is spelled out for every class, so a new class cannot be added without a decision on
/// each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassSpec {
    /// The stable id (command line, JSON, Prometheus, docs/drill.md).
    pub id: &'static str,
    /// A control: must end with no drain and every verdict passing.
    pub control: bool,
    /// What the injector does (docs/drill.md has the same table).
    pub injects: &'static str,
    /// How the injector undoes it.
    pub restores: &'static str,
    /// On a real cluster it changes real hardware or a daemon (`--allow-hardware CLASS`).
    pub touches_hardware: bool,
    /// It exists only on the testbed (written into a fixture tree).
    pub testbed_only: bool,
    /// The moments it is injected at.
    pub moments: &'static [Moment],
    /// The node kinds it applies to.
    pub kinds: &'static [NodeKind],
    /// The testbed fixture scenario holding the fault on an InfiniBand node, when it is one.
    pub ib_fixture: Option<&'static str>,
    /// The testbed fixture scenario holding the fault on a RoCE node, when it is one.
    pub roce_fixture: Option<&'static str>,
    /// How many nodes the round's job needs (the collective needs three for a majority, four
    /// for its local rule); on a smaller cluster the job takes every node there is.
    pub job_nodes: usize,
    /// How the class is graded (`--graded`, `--size`), when it has a size.
    pub grading: Option<Grading>,
    /// Only Slurm can see it (the node itself is gone: no probe, no watch runs there), so its
    /// time to detect is Slurm's `SlurmdTimeout`, counted apart from the `during` figure.
    pub seen_only_by_slurm: bool,
}

/// The restore of the classes written into a sysfs tree.
const SYSFS_RESTORE: &str = "the node's sysfs tree as it was before (a healthy tree of its kind); \
                             on real hardware the value read before the change";

impl FaultClass {
    /// The class's row of the table: every decision about it in one place.
    pub const fn spec(self) -> ClassSpec {
        use Moment::{Before, During, Idle};
        use NodeKind::{Ib, Roce};
        match self {
            FaultClass::PortDown => ClassSpec {
                id: "port_down",
                control: false,
                injects: "port 1 of one HCA down (state, phys_state, rate, operstate)",
                restores: SYSFS_RESTORE,
                touches_hardware: true,
                testbed_only: false,
                moments: &[Before, During, Idle],
                kinds: &[Ib, Roce],
                ib_fixture: Some("ib8-port-down"),
                roce_fixture: Some("roce8-port-down"),
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: None,
            },
            FaultClass::RateDowngrade => ClassSpec {
                id: "rate_downgrade",
                control: false,
                injects: "port 1 of one HCA at half its rate",
                restores: SYSFS_RESTORE,
                touches_hardware: false,
                testbed_only: true,
                moments: &[Before, During, Idle],
                kinds: &[Ib, Roce],
                ib_fixture: Some("ib8-half-rate"),
                roce_fixture: Some("roce8-half-rate"),
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: None,
            },
            FaultClass::MtuDrift => ClassSpec {
                id: "mtu_drift",
                control: false,
                injects: "one RoCE netdev's MTU at 1500",
                restores: SYSFS_RESTORE,
                touches_hardware: true,
                testbed_only: false,
                moments: &[Before, During, Idle],
                kinds: &[Roce],
                ib_fixture: None,
                roce_fixture: Some("roce8-mtu-1500"),
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: None,
            },
            FaultClass::PfcOff => ClassSpec {
                id: "pfc_off",
                control: false,
                injects: "PFC off on the lossless priority 3 of one RoCE port",
                restores: SYSFS_RESTORE,
                touches_hardware: true,
                testbed_only: false,
                moments: &[Before, During, Idle],
                kinds: &[Roce],
                ib_fixture: None,
                roce_fixture: Some("roce8-pfc-off"),
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: None,
            },
            FaultClass::EcnOff => ClassSpec {
                id: "ecn_off",
                control: false,
                injects: "ECN (roce_np, roce_rp) off on priority 3 of one RoCE port",
                restores: SYSFS_RESTORE,
                touches_hardware: true,
                testbed_only: false,
                moments: &[Before, During, Idle],
                kinds: &[Roce],
                ib_fixture: None,
                roce_fixture: Some("roce8-ecn-off"),
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: None,
            },
            FaultClass::RoceGidMissing => ClassSpec {
                id: "roce_gid_missing",
                control: false,
                injects: "no RoCE v2 GID on one port's netdev",
                restores: SYSFS_RESTORE,
                touches_hardware: false,
                testbed_only: true,
                moments: &[Before, During, Idle],
                kinds: &[Ib, Roce],
                ib_fixture: Some("ib8-no-roce-v2-gid"),
                roce_fixture: Some("roce8-no-v2-gid"),
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: None,
            },
            FaultClass::LinkFlap => ClassSpec {
                id: "link_flap",
                control: false,
                injects: "link_downed +1 on one port while the job runs",
                restores: SYSFS_RESTORE,
                touches_hardware: false,
                testbed_only: true,
                moments: &[During],
                kinds: &[Ib],
                ib_fixture: Some("ib8-link-downed"),
                roce_fixture: None,
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: Some(Grading {
                    kind: SizeKind::Flaps,
                    defaults: &[
                        Size::Flaps(0),
                        Size::Flaps(1),
                        Size::Flaps(2),
                        Size::Flaps(5),
                    ],
                    ib_counters: &[("link_downed", "link_downed")],
                    roce_counters: &[],
                }),
            },
            FaultClass::ErrorCounters => ClassSpec {
                id: "error_counters",
                control: false,
                injects: "symbol_error +500 on one port",
                restores: SYSFS_RESTORE,
                touches_hardware: false,
                testbed_only: true,
                moments: &[Before, During, Idle],
                kinds: &[Ib],
                ib_fixture: Some("ib8-symbol-errors"),
                roce_fixture: None,
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: Some(Grading {
                    kind: SizeKind::Threshold,
                    defaults: THRESHOLD_SIZES,
                    ib_counters: &[("symbol_error", "symbol_error")],
                    roce_counters: &[],
                }),
            },
            FaultClass::PauseStorm => ClassSpec {
                id: "pause_storm",
                control: false,
                injects: "rx/tx priority-3 pause frames +millions on one port",
                restores: SYSFS_RESTORE,
                touches_hardware: false,
                testbed_only: true,
                moments: &[Before, During],
                kinds: &[Ib, Roce],
                ib_fixture: Some("ib8-pause-storm"),
                roce_fixture: Some("roce8-pause-storm"),
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: Some(Grading {
                    kind: SizeKind::Threshold,
                    defaults: THRESHOLD_SIZES,
                    ib_counters: &[
                        ("rx_prio3_pause", "rx_prio_pause"),
                        ("rx_prio3_pause_duration", "rx_prio_pause_duration"),
                    ],
                    roce_counters: &[
                        ("rx_prio3_pause", "rx_prio_pause"),
                        ("tx_prio3_pause", "tx_prio_pause"),
                    ],
                }),
            },
            FaultClass::CnpStorm => ClassSpec {
                id: "cnp_storm",
                control: false,
                injects: "CNPs sent and handled +tens of millions, ECN-marked packets likewise, on one RoCE port",
                restores: SYSFS_RESTORE,
                touches_hardware: false,
                testbed_only: true,
                moments: &[Before, During],
                kinds: &[Roce],
                ib_fixture: None,
                roce_fixture: Some("roce8-cnp-storm"),
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: Some(Grading {
                    kind: SizeKind::Threshold,
                    defaults: THRESHOLD_SIZES,
                    ib_counters: &[],
                    roce_counters: &[
                        ("np_cnp_sent", "np_cnp_sent"),
                        ("rp_cnp_handled", "rp_cnp_handled"),
                        ("np_ecn_marked_roce_packets", "np_ecn_marked_roce_packets"),
                    ],
                }),
            },
            FaultClass::Congestion => ClassSpec {
                id: "congestion",
                control: false,
                injects: "tc tbf at 100 mbit on the node's collective path",
                restores: "the tbf qdisc deleted",
                touches_hardware: true,
                testbed_only: false,
                moments: &[Before],
                kinds: &[Ib, Roce],
                ib_fixture: None,
                roce_fixture: None,
                seen_only_by_slurm: false,
                // Four: the collective's local rule, which names a node at half its peers'
                // rate, judges only rings of four or more (docs/collective.md).
                job_nodes: 4,
                grading: Some(Grading {
                    kind: SizeKind::Bandwidth,
                    defaults: &[
                        Size::BandwidthPct(100),
                        Size::BandwidthPct(75),
                        Size::BandwidthPct(50),
                        Size::BandwidthPct(33),
                        Size::BandwidthPct(10),
                    ],
                    ib_counters: &[],
                    roce_counters: &[],
                }),
            },
            FaultClass::NodeRemoved => ClassSpec {
                id: "node_removed",
                control: false,
                injects: "the node's slurmd stopped while a job runs on it",
                restores: "slurmd started again and the node resumed",
                touches_hardware: true,
                testbed_only: false,
                moments: &[During],
                kinds: &[Ib, Roce],
                ib_fixture: None,
                roce_fixture: None,
                seen_only_by_slurm: true,
                job_nodes: 2,
                grading: None,
            },
            FaultClass::CheckpointBurst => ClassSpec {
                id: "checkpoint_burst",
                control: true,
                injects: "256 MiB written and synced into the job's checkpoint folder",
                restores: "the burst's files deleted",
                touches_hardware: false,
                testbed_only: false,
                moments: &[During],
                kinds: &[Ib, Roce],
                ib_fixture: None,
                roce_fixture: None,
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: None,
            },
            FaultClass::BackgroundLoad => ClassSpec {
                id: "background_load",
                control: true,
                injects: "CPU hogs and a loopback TCP stream while the job runs",
                restores: "the hogs killed by pid, the stream closed",
                touches_hardware: false,
                testbed_only: false,
                moments: &[During],
                kinds: &[Ib, Roce],
                ib_fixture: None,
                roce_fixture: None,
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: None,
            },
            FaultClass::Clean => ClassSpec {
                id: "clean",
                control: true,
                injects: "nothing",
                restores: "nothing",
                touches_hardware: false,
                testbed_only: false,
                moments: &[Before, During],
                kinds: &[Ib, Roce],
                ib_fixture: None,
                roce_fixture: None,
                seen_only_by_slurm: false,
                job_nodes: 2,
                grading: None,
            },
        }
    }

    /// The stable id.
    pub fn id(self) -> &'static str {
        self.spec().id
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
        self.spec().control
    }

    /// What the injector does (docs/drill.md has the same table).
    pub fn injects(self) -> &'static str {
        self.spec().injects
    }

    /// How the injector undoes it.
    pub fn restores(self) -> &'static str {
        self.spec().restores
    }

    /// Whether, on a real cluster, the injector changes real hardware or a daemon, and so runs
    /// only with `--allow-hardware CLASS`. The counter classes cannot be injected on real
    /// hardware at all (counters only rise when the fault is real): see [`FaultClass::testbed_only`].
    pub fn touches_hardware(self) -> bool {
        self.spec().touches_hardware
    }

    /// Classes that exist only on the testbed (written into a fixture tree).
    pub fn testbed_only(self) -> bool {
        self.spec().testbed_only
    }

    /// The moments the class is injected at.
    pub fn moments(self) -> &'static [Moment] {
        self.spec().moments
    }

    /// The node kinds the class applies to.
    pub fn kinds(self) -> &'static [NodeKind] {
        self.spec().kinds
    }

    /// A class that raises counters in the node's tree (their restore lowers them again).
    pub fn raises_counters(self) -> bool {
        matches!(
            self,
            FaultClass::LinkFlap
                | FaultClass::ErrorCounters
                | FaultClass::PauseStorm
                | FaultClass::CnpStorm
        )
    }

    /// How the class is graded, when it has a size.
    pub fn grading(self) -> Option<Grading> {
        self.spec().grading
    }

    /// The counters a size raises on a node of `kind`: (name in the tree, threshold key).
    pub fn graded_counters(self, kind: NodeKind) -> &'static [(&'static str, &'static str)] {
        match (self.grading(), kind) {
            (Some(g), NodeKind::Ib) => g.ib_counters,
            (Some(g), NodeKind::Roce) => g.roce_counters,
            (None, _) => &[],
        }
    }

    /// Checks that `size` is one this class takes.
    pub fn check_size(self, size: Size) -> Result<(), crate::grade::SizeError> {
        let g = self
            .grading()
            .ok_or_else(|| crate::grade::SizeError::NotGraded(self.id().to_owned()))?;
        if size.kind() != g.kind {
            return Err(crate::grade::SizeError::WrongKind {
                class: self.id(),
                value: size.to_string(),
                kind: g.kind,
            });
        }
        Ok(())
    }

    /// The testbed fixture scenario that holds the fault on a node of `kind`
    /// (`scripts/gen-fixtures --list`), for the classes written into a sysfs tree.
    pub fn fixture(self, kind: NodeKind) -> Option<&'static str> {
        let s = self.spec();
        match kind {
            NodeKind::Ib => s.ib_fixture,
            NodeKind::Roce => s.roce_fixture,
        }
    }

    /// How many nodes the round's job needs (the collective needs three for a majority, four
    /// for its local rule); on a smaller cluster the job takes every node there is.
    pub fn job_nodes(self) -> usize {
        self.spec().job_nodes
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
            if c.restores() != SYSFS_RESTORE {
                continue;
            }
            for k in c.kinds() {
                assert!(c.fixture(*k).is_some(), "{} on {}", c.id(), k.id());
            }
        }
    }

    #[test]
    fn a_class_names_a_fixture_only_for_a_kind_it_applies_to_and_only_when_it_is_a_sysfs_class() {
        for c in ALL {
            for k in [NodeKind::Ib, NodeKind::Roce] {
                if let Some(f) = c.fixture(k) {
                    assert!(
                        c.kinds().contains(&k),
                        "{} names {f} for {}",
                        c.id(),
                        k.id()
                    );
                    assert_eq!(c.restores(), SYSFS_RESTORE, "{}", c.id());
                    assert!(f.starts_with(k.fixture_prefix()), "{f}");
                }
            }
        }
    }

    #[test]
    fn a_graded_class_raises_counters_on_each_of_its_kinds_and_its_defaults_are_of_its_kind() {
        let graded: Vec<&str> = ALL
            .iter()
            .filter(|c| c.grading().is_some())
            .map(|c| c.id())
            .collect();
        assert_eq!(
            graded,
            vec![
                "link_flap",
                "error_counters",
                "pause_storm",
                "cnp_storm",
                "congestion"
            ]
        );
        for c in ALL {
            let Some(g) = c.grading() else { continue };
            assert!(g.defaults.iter().any(|s| s.is_control()), "{}", c.id());
            assert!(g.defaults.iter().any(|s| !s.is_control()), "{}", c.id());
            for s in g.defaults {
                c.check_size(*s).unwrap();
            }
            for k in c.kinds() {
                // A size is written into the class's fixture tree, or onto its path.
                let counters = c.graded_counters(*k);
                assert_eq!(
                    counters.is_empty(),
                    g.kind == SizeKind::Bandwidth,
                    "{} on {}",
                    c.id(),
                    k.id()
                );
            }
        }
        let e = FaultClass::PortDown.check_size(Size::Flaps(1)).unwrap_err();
        assert!(e.to_string().contains("port_down has no size"), "{e}");
        let e = FaultClass::Congestion
            .check_size(Size::ThresholdMilli(2000))
            .unwrap_err();
        assert!(
            e.to_string().contains("\"2x\"") && e.to_string().contains("50%"),
            "{e}"
        );
    }

    #[test]
    fn every_fixture_scenario_a_class_or_kind_names_exists_in_the_testkit() {
        let known = fabric_testkit::sysfs::SCENARIOS;
        for k in [NodeKind::Ib, NodeKind::Roce] {
            assert!(
                known.contains(&k.healthy_fixture()),
                "{}",
                k.healthy_fixture()
            );
            for c in ALL {
                if let Some(f) = c.fixture(k) {
                    assert!(
                        known.contains(&f),
                        "{} names {f}, which the testkit lacks",
                        c.id()
                    );
                }
            }
        }
    }

    #[test]
    fn a_class_is_never_both_testbed_only_and_a_hardware_class_nor_a_control_that_injects() {
        for c in ALL {
            assert!(!(c.testbed_only() && c.touches_hardware()), "{}", c.id());
            if c.is_control() {
                assert!(!c.touches_hardware() && !c.testbed_only(), "{}", c.id());
                assert_eq!(
                    (c.fixture(NodeKind::Ib), c.fixture(NodeKind::Roce)),
                    (None, None)
                );
            }
            assert!(
                !c.moments().is_empty() && !c.kinds().is_empty(),
                "{}",
                c.id()
            );
        }
    }
}
