//! The drill's plan: which class, on which node, at which moment, with which job, round by
//! round, drawn from a seed so that a drill can be repeated exactly (`--seed`) and printed before
//! it runs (`--dry-run`).

use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::class::{FaultClass, Moment, NodeKind};
use crate::grade::Size;

/// A node the drill may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrillNode {
    /// Slurm's node name.
    pub name: String,
    /// Its fabric.
    pub kind: NodeKind,
}

/// What to plan.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    /// The nodes (at least three: a job of two and the collective's three).
    pub nodes: Vec<DrillNode>,
    /// The classes to inject (controls `checkpoint_burst` and `background_load` may be among
    /// them; `clean` rounds come from `controls`).
    pub classes: Vec<FaultClass>,
    /// Rounds per class (per size, for a class with sizes).
    pub per_class: usize,
    /// Clean control rounds, interleaved.
    pub controls: usize,
    /// The seed.
    pub seed: u64,
    /// The sizes of the graded classes (`--graded`, `--size`): `per_class` rounds of each. A
    /// class absent here runs at its fixed size.
    pub sizes: BTreeMap<FaultClass, Vec<Size>>,
}

/// The job a round runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Its nodes, the round's target first.
    pub nodes: Vec<String>,
    /// `--fabric-check=full` (the collective) rather than quick.
    pub full: bool,
    /// Under `fabric-run` (step times and checkpoints in the tag).
    pub fabric_run: bool,
    /// Spare nodes among `nodes` (`--fabric-check-spares=K`: the job runs on the others);
    /// 0 for none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spares: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    /// 1-based.
    pub index: usize,
    /// The class (`clean` for a control round).
    pub class: FaultClass,
    /// The node the fault goes to (the control's watched node).
    pub node: String,
    /// Its kind.
    pub kind: NodeKind,
    /// When.
    pub moment: Moment,
    /// The job, none for [`Moment::Idle`].
    pub job: Option<JobSpec>,
    /// For a `during` round: where in its job the fault goes in, in thousandths of the job's
    /// length (drawn between 150 and 750, from the seed and the round's index alone, so that
    /// adding it changed no other draw of a seed's plan).
    #[serde(default)]
    pub during_at_permille: Option<u16>,
    /// The fault's size, for a graded round ([`crate::grade`]); `None`: the class's fixed size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Size>,
}

impl Round {
    /// A round that must stay quiet: a control class, or a graded fault at a control size.
    pub fn is_control(&self) -> bool {
        self.class.is_control() || self.size.is_some_and(Size::is_control)
    }
}

/// The whole plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Its rounds, in order.
    pub rounds: Vec<Round>,
}

/// Why no plan could be drawn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Too few nodes.
    #[error(
        "the drill needs at least 3 nodes (a job of two, a collective of three), got {0}; name more with --nodes or a larger reservation"
    )]
    TooFewNodes(usize),
    /// No node of a kind the class needs.
    #[error(
        "class {class} needs a node with {kind} ports and none of the drill's nodes has them; leave it out (--classes) or add such a node"
    )]
    NoNodeFor {
        /// The class id.
        class: &'static str,
        /// The kind id.
        kind: &'static str,
    },
}

impl Plan {
    /// Draws the plan: `per_class` rounds of each class, `controls` clean rounds, shuffled.
    pub fn draw(spec: &PlanSpec) -> Result<Plan, PlanError> {
        if spec.nodes.len() < 3 {
            return Err(PlanError::TooFewNodes(spec.nodes.len()));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let mut drafts: Vec<(FaultClass, Option<Size>)> = Vec::new();
        for c in &spec.classes {
            if *c == FaultClass::Clean {
                continue;
            }
            match spec.sizes.get(c) {
                Some(sizes) => {
                    for s in sizes {
                        drafts.extend(std::iter::repeat_n((*c, Some(*s)), spec.per_class));
                    }
                }
                None => drafts.extend(std::iter::repeat_n((*c, None), spec.per_class)),
            }
        }
        drafts.extend(std::iter::repeat_n(
            (FaultClass::Clean, None),
            spec.controls,
        ));
        drafts.shuffle(&mut rng);
        let mut rounds = Vec::with_capacity(drafts.len());
        for (i, (class, size)) in drafts.into_iter().enumerate() {
            let fits: Vec<&DrillNode> = spec
                .nodes
                .iter()
                .filter(|n| class.kinds().contains(&n.kind))
                .collect();
            let Some(target) = fits.choose(&mut rng) else {
                return Err(PlanError::NoNodeFor {
                    class: class.id(),
                    kind: class.kinds()[0].id(),
                });
            };
            let moment = *class.moments().choose(&mut rng).unwrap_or(&Moment::Before);
            let job = (moment != Moment::Idle).then(|| {
                let mut others: Vec<&DrillNode> = spec
                    .nodes
                    .iter()
                    .filter(|n| n.name != target.name)
                    .collect();
                others.shuffle(&mut rng);
                let mut nodes = vec![target.name.clone()];
                nodes.extend(
                    others
                        .iter()
                        .take(class.job_nodes() - 1)
                        .map(|n| n.name.clone()),
                );
                JobSpec {
                    nodes,
                    full: class == FaultClass::Congestion || rng.random_bool(0.3),
                    fabric_run: class == FaultClass::CheckpointBurst || rng.random_bool(0.5),
                    spares: 0,
                }
            });
            let during_at_permille = (moment == Moment::During).then(|| {
                let mut r = ChaCha8Rng::seed_from_u64(
                    spec.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                );
                r.random_range(150..=750)
            });
            rounds.push(Round {
                index: i + 1,
                class,
                node: target.name.clone(),
                kind: target.kind,
                moment,
                job,
                during_at_permille,
                size,
            });
        }
        Ok(Plan {
            seed: spec.seed,
            rounds,
        })
    }

    /// One line per round, for `--dry-run`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "drill plan, seed {}, {} rounds\n",
            self.seed,
            self.rounds.len()
        );
        for r in &self.rounds {
            let job = match &r.job {
                None => "no job (health)".to_owned(),
                Some(j) => format!(
                    "job on {} ({}{})",
                    j.nodes.join(","),
                    if j.full { "full" } else { "quick" },
                    if j.fabric_run { ", fabric-run" } else { "" }
                ),
            };
            // A graded round's size replaces the class's fixed magnitude.
            let injects = match r.size {
                Some(z) => format!(
                    "{} {z}{}",
                    match z.kind() {
                        crate::grade::SizeKind::Bandwidth =>
                            "tc tbf on the node's path at a share of its peers' bandwidth:",
                        crate::grade::SizeKind::Threshold =>
                            "the class's counters raised by a multiple of their threshold:",
                        crate::grade::SizeKind::Flaps => "link_downed raised by",
                    },
                    if z.is_control() { " (control)" } else { "" }
                ),
                None => r.class.injects().to_owned(),
            };
            s.push_str(&format!(
                "{:>3}  {:<17} {:<5} {:<6} {}: {injects}\n",
                r.index,
                r.class.id(),
                r.node,
                r.moment.id(),
                job,
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::ALL;

    fn nodes() -> Vec<DrillNode> {
        [
            ("n1", NodeKind::Ib),
            ("n2", NodeKind::Ib),
            ("n3", NodeKind::Roce),
            ("n4", NodeKind::Roce),
        ]
        .into_iter()
        .map(|(n, k)| DrillNode {
            name: n.into(),
            kind: k,
        })
        .collect()
    }

    fn spec(seed: u64) -> PlanSpec {
        PlanSpec {
            nodes: nodes(),
            classes: ALL.to_vec(),
            per_class: 5,
            controls: 4,
            seed,
            sizes: BTreeMap::new(),
        }
    }

    #[test]
    fn a_graded_class_gets_its_rounds_at_each_size_and_an_ungraded_one_at_its_fixed_size() {
        let mut s = spec(5);
        s.classes = vec![FaultClass::ErrorCounters, FaultClass::PortDown];
        s.per_class = 3;
        s.controls = 0;
        let sizes = Size::parse_list("0.5x,2x,10x").unwrap();
        s.sizes.insert(FaultClass::ErrorCounters, sizes.clone());
        let p = Plan::draw(&s).unwrap();
        assert_eq!(p.rounds.len(), 3 * 3 + 3);
        for z in &sizes {
            let n = p
                .rounds
                .iter()
                .filter(|r| r.class == FaultClass::ErrorCounters && r.size == Some(*z))
                .count();
            assert_eq!(n, 3, "{z}");
        }
        for r in &p.rounds {
            assert_eq!(r.size.is_none(), r.class == FaultClass::PortDown, "{r:?}");
            assert_eq!(r.is_control(), r.size == Some(sizes[0]), "{r:?}");
        }
        let text = p.describe();
        assert!(
            text.contains("raised by a multiple of their threshold: 0.5x (control)"),
            "{text}"
        );
        // The fixed magnitude is not claimed for a graded round.
        assert!(
            text.lines()
                .filter(|l| l.contains("error_counters"))
                .all(|l| !l.contains("+500")),
            "{text}"
        );
    }

    #[test]
    fn the_same_seed_draws_the_same_plan_and_another_seed_another() {
        let a = Plan::draw(&spec(7)).unwrap();
        assert_eq!(a, Plan::draw(&spec(7)).unwrap());
        assert_ne!(a, Plan::draw(&spec(8)).unwrap());
    }

    #[test]
    fn a_during_rounds_fault_point_is_drawn_within_its_job_and_the_same_seed_draws_it_again() {
        let spec = spec(11);
        let a = Plan::draw(&spec).unwrap();
        let b = Plan::draw(&spec).unwrap();
        assert_eq!(a, b);
        let mut during = 0;
        for r in &a.rounds {
            match r.moment {
                Moment::During => {
                    during += 1;
                    let p = r.during_at_permille.expect("a during round has its point");
                    assert!((150..=750).contains(&p), "{p}");
                }
                _ => assert_eq!(r.during_at_permille, None),
            }
        }
        assert!(during > 0, "the seed drew no during round: {a:?}");
    }

    #[test]
    fn each_class_gets_its_rounds_on_a_node_of_its_kind_at_one_of_its_moments() {
        let p = Plan::draw(&spec(1)).unwrap();
        // 14 classes besides clean, 5 each, and 4 clean rounds.
        assert_eq!(p.rounds.len(), 14 * 5 + 4);
        for r in &p.rounds {
            assert!(r.class.kinds().contains(&r.kind), "{r:?}");
            assert!(r.class.moments().contains(&r.moment), "{r:?}");
            let kind = nodes().into_iter().find(|n| n.name == r.node).unwrap().kind;
            assert_eq!(kind, r.kind);
            match &r.job {
                None => assert_eq!(r.moment, Moment::Idle),
                Some(j) => {
                    assert_eq!(j.nodes[0], r.node);
                    assert_eq!(j.nodes.len(), r.class.job_nodes());
                    let mut d = j.nodes.clone();
                    d.dedup();
                    assert_eq!(d.len(), j.nodes.len(), "{j:?}");
                }
            }
        }
        let clean = p
            .rounds
            .iter()
            .filter(|r| r.class == FaultClass::Clean)
            .count();
        assert_eq!(clean, 4);
    }

    #[test]
    fn the_collective_class_runs_a_full_job_of_four_nodes() {
        let p = Plan::draw(&spec(3)).unwrap();
        for r in p
            .rounds
            .iter()
            .filter(|r| r.class == FaultClass::Congestion)
        {
            let j = r.job.as_ref().unwrap();
            assert!(j.full && j.nodes.len() == 4, "{r:?}");
        }
    }

    #[test]
    fn a_class_without_a_node_of_its_kind_is_refused_with_what_to_do() {
        let mut s = spec(1);
        s.nodes.retain(|n| n.kind == NodeKind::Ib);
        s.nodes.push(DrillNode {
            name: "n5".into(),
            kind: NodeKind::Ib,
        });
        let e = Plan::draw(&s).unwrap_err();
        assert!(
            matches!(e, PlanError::NoNodeFor { kind: "roce", .. }),
            "{e}"
        );
        assert!(e.to_string().contains("--classes"));
    }

    #[test]
    fn fewer_than_three_nodes_are_refused() {
        let mut s = spec(1);
        s.nodes.truncate(2);
        assert_eq!(Plan::draw(&s).unwrap_err(), PlanError::TooFewNodes(2));
    }

    #[test]
    fn the_dry_run_text_names_every_round() {
        let p = Plan::draw(&spec(2)).unwrap();
        let text = p.describe();
        assert_eq!(text.lines().count(), p.rounds.len() + 1);
        assert!(text.contains("seed 2"));
    }
}
