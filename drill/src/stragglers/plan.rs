//! The straggler drill's plan: which slowdown, on which node, at which size, round by round,
//! drawn from a seed (`--seed` repeats it, `--dry-run` prints it).

use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// What a straggler round does to the job's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// One node's training step sleeps longer: the job's own slowdown on that node.
    StepSleep,
    /// One node's trainer in a CPU cgroup whose quota stretches the step's busy part.
    CpuCapped,
    /// One node's network path shaped with `tc tbf`, so the step's transfer takes longer.
    PathShaped,
    /// Control: every node slow together (1.5×): the workload's, no node to name.
    AllSlow,
    /// Control: one node slow at a time (1.5×), the next one every 10 s, round robin.
    Rotating,
    /// Control: every node pauses for a checkpoint (twice, 20 s apart).
    CheckpointBurst,
    /// Control: nothing changes.
    Clean,
}

/// The classes that slow one node (scored by recall).
pub const FAULTS: [Kind; 3] = [Kind::StepSleep, Kind::CpuCapped, Kind::PathShaped];
/// The loads that must name no node.
pub const CONTROLS: [Kind; 3] = [Kind::AllSlow, Kind::Rotating, Kind::CheckpointBurst];
/// The sizes of a fault, thousandths of the usual step (1.1×, 1.25×, 1.5×, 2×).
pub const DEFAULT_SIZES: [u32; 4] = [1100, 1250, 1500, 2000];
/// How slow the `all_slow` and `rotating` controls make a node, thousandths.
pub const CONTROL_FACTOR: u32 = 1500;

impl Kind {
    /// Every kind, in table order.
    pub const ALL: [Kind; 7] = [
        Kind::StepSleep,
        Kind::CpuCapped,
        Kind::PathShaped,
        Kind::AllSlow,
        Kind::Rotating,
        Kind::CheckpointBurst,
        Kind::Clean,
    ];

    /// Its id.
    pub fn id(self) -> &'static str {
        match self {
            Kind::StepSleep => "step_sleep",
            Kind::CpuCapped => "cpu_capped",
            Kind::PathShaped => "path_shaped",
            Kind::AllSlow => "all_slow",
            Kind::Rotating => "rotating",
            Kind::CheckpointBurst => "checkpoint_burst",
            Kind::Clean => "clean",
        }
    }

    /// The kind `id` names.
    pub fn parse(id: &str) -> Result<Kind, String> {
        Kind::ALL
            .iter()
            .copied()
            .find(|k| k.id() == id.trim())
            .ok_or_else(|| {
                format!(
                    "unknown straggler class {id:?}: choose among {}",
                    Kind::ALL
                        .iter()
                        .filter(|k| **k != Kind::Clean)
                        .map(|k| k.id())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }

    /// Whether it slows one node (a fault), rather than being a control.
    pub fn is_fault(self) -> bool {
        FAULTS.contains(&self)
    }
}

/// A factor in thousandths as it is written: `1.1x`, `1.25x`, `2x`.
pub fn factor_text(permille: u32) -> String {
    let whole = format!("{:.3}", f64::from(permille) / 1000.0);
    format!("{}x", whole.trim_end_matches('0').trim_end_matches('.'))
}

/// Parses a size (`1.25`, `1.25x`) into thousandths: more than 1, at most 10.
pub fn parse_factor(s: &str) -> Result<u32, String> {
    let t = s.trim().trim_end_matches(['x', 'X']);
    match t.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 1.0 && f <= 10.0 => Ok((f * 1000.0).round() as u32),
        _ => Err(format!(
            "{s:?} is not a slowdown: write how many times the usual step, more than 1 and at most 10 (1.1, 1.25x, 2)"
        )),
    }
}

/// What to plan.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    /// The job's nodes (every one of the drill's; at least three, so that the job's median is
    /// not the slow node's).
    pub nodes: Vec<String>,
    /// The faults and controls to run (`clean` rounds come from [`PlanSpec::clean`]).
    pub kinds: Vec<Kind>,
    /// The sizes of each fault, thousandths.
    pub sizes: Vec<u32>,
    /// Rounds per fault and size.
    pub per_size: usize,
    /// Rounds per control.
    pub per_control: usize,
    /// Clean rounds.
    pub clean: usize,
    /// The seed.
    pub seed: u64,
    /// When the slowdown goes in after the job runs, milliseconds: drawn in this range
    /// (after the job's first windows, which set its baseline, and off the hop boundaries).
    pub inject_after_ms: (u64, u64),
}

/// One round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    /// 1-based.
    pub index: usize,
    /// What it does.
    pub kind: Kind,
    /// The slowed node (a fault), the first slow node (`rotating`), the first node (others).
    pub node: String,
    /// How slow, thousandths (1000 for `checkpoint_burst` and `clean`).
    pub factor_permille: u32,
    /// When the slowdown (or the control) goes in after the job runs, milliseconds.
    pub inject_after_ms: u64,
}

/// The rounds of a straggler drill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The rounds, in order.
    pub rounds: Vec<Round>,
}

impl Plan {
    /// Draws the plan: every fault at every size `per_size` times on a node drawn from the
    /// seed, every control `per_control` times, `clean` clean rounds, shuffled together.
    pub fn draw(spec: &PlanSpec) -> Result<Plan, String> {
        if spec.nodes.len() < 3 {
            return Err(format!(
                "a straggler drill needs at least three nodes (the job's median must not be the slow node's), not {}",
                spec.nodes.len()
            ));
        }
        if let Some(z) = spec.sizes.iter().find(|z| **z <= 1000) {
            return Err(format!(
                "size {} is no slowdown: a size is more than 1x",
                factor_text(*z)
            ));
        }
        let (lo, hi) = spec.inject_after_ms;
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let mut rounds = Vec::new();
        let mut add = |kind: Kind, factor: u32, rng: &mut ChaCha8Rng| {
            let node = match kind {
                Kind::Clean | Kind::AllSlow | Kind::CheckpointBurst => spec.nodes[0].clone(),
                _ => spec.nodes.choose(rng).expect("three nodes").clone(),
            };
            rounds.push(Round {
                index: 0,
                kind,
                node,
                factor_permille: factor,
                inject_after_ms: 0,
            });
        };
        for kind in Kind::ALL.iter().filter(|k| spec.kinds.contains(k)) {
            if kind.is_fault() {
                for z in &spec.sizes {
                    for _ in 0..spec.per_size {
                        add(*kind, *z, &mut rng);
                    }
                }
            } else if *kind != Kind::Clean {
                let factor = match kind {
                    Kind::AllSlow | Kind::Rotating => CONTROL_FACTOR,
                    _ => 1000,
                };
                for _ in 0..spec.per_control {
                    add(*kind, factor, &mut rng);
                }
            }
        }
        for _ in 0..spec.clean {
            add(Kind::Clean, 1000, &mut rng);
        }
        if rounds.is_empty() {
            return Err(
                "the plan has no round: give sizes, rounds per size, controls or clean rounds"
                    .into(),
            );
        }
        rounds.shuffle(&mut rng);
        for (i, r) in rounds.iter_mut().enumerate() {
            r.index = i + 1;
            r.inject_after_ms = if hi > lo {
                rng.random_range(lo..=hi)
            } else {
                lo
            };
        }
        Ok(Plan {
            seed: spec.seed,
            rounds,
        })
    }

    /// The plan as text (`--dry-run`).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "straggler drill, seed {}, {} rounds\n",
            self.seed,
            self.rounds.len()
        );
        for r in &self.rounds {
            s += &format!(
                "round {:>3} {:<17} {:<5} on {:<6} at {:.1} s into the job\n",
                r.index,
                r.kind.id(),
                if r.kind.is_fault() || matches!(r.kind, Kind::AllSlow | Kind::Rotating) {
                    factor_text(r.factor_permille)
                } else {
                    "-".into()
                },
                r.node,
                r.inject_after_ms as f64 / 1000.0
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PlanSpec {
        PlanSpec {
            nodes: ["n1", "n2", "n3", "n4"].map(String::from).to_vec(),
            kinds: Kind::ALL.to_vec(),
            sizes: DEFAULT_SIZES.to_vec(),
            per_size: 2,
            per_control: 1,
            clean: 3,
            seed: 44,
            inject_after_ms: (25_000, 30_000),
        }
    }

    #[test]
    fn every_fault_runs_at_every_size_its_rounds_and_every_control_and_clean_round_is_planned() {
        let p = Plan::draw(&spec()).unwrap();
        assert_eq!(p.rounds.len(), 3 * 4 * 2 + 3 + 3);
        for k in FAULTS {
            for z in DEFAULT_SIZES {
                let n = p
                    .rounds
                    .iter()
                    .filter(|r| r.kind == k && r.factor_permille == z)
                    .count();
                assert_eq!(n, 2, "{} at {}", k.id(), factor_text(z));
            }
        }
        for k in [Kind::AllSlow, Kind::Rotating] {
            let r = p.rounds.iter().find(|r| r.kind == k).unwrap();
            assert_eq!(r.factor_permille, CONTROL_FACTOR);
        }
        assert_eq!(p.rounds.iter().filter(|r| r.kind == Kind::Clean).count(), 3);
        let idx: Vec<usize> = p.rounds.iter().map(|r| r.index).collect();
        assert_eq!(idx, (1..=p.rounds.len()).collect::<Vec<_>>());
        assert!(
            p.rounds
                .iter()
                .all(|r| (25_000..=30_000).contains(&r.inject_after_ms))
        );
    }

    #[test]
    fn a_seed_repeats_its_plan_and_another_seed_draws_another() {
        let a = Plan::draw(&spec()).unwrap();
        assert_eq!(a, Plan::draw(&spec()).unwrap());
        let b = Plan::draw(&PlanSpec { seed: 45, ..spec() }).unwrap();
        assert_ne!(a.rounds, b.rounds);
        // The faults land on more than one node.
        let nodes: std::collections::BTreeSet<&str> = a
            .rounds
            .iter()
            .filter(|r| r.kind.is_fault())
            .map(|r| r.node.as_str())
            .collect();
        assert!(nodes.len() > 1, "{nodes:?}");
    }

    #[test]
    fn only_the_kinds_asked_for_are_planned() {
        let p = Plan::draw(&PlanSpec {
            kinds: vec![Kind::CpuCapped],
            clean: 0,
            ..spec()
        })
        .unwrap();
        assert!(p.rounds.iter().all(|r| r.kind == Kind::CpuCapped));
        assert_eq!(p.rounds.len(), 8);
    }

    #[test]
    fn too_few_nodes_a_size_that_is_no_slowdown_and_an_empty_plan_are_refused() {
        let e = Plan::draw(&PlanSpec {
            nodes: vec!["n1".into(), "n2".into()],
            ..spec()
        })
        .unwrap_err();
        assert!(e.contains("at least three nodes"), "{e}");
        let e = Plan::draw(&PlanSpec {
            sizes: vec![1000],
            ..spec()
        })
        .unwrap_err();
        assert!(e.contains("size 1x is no slowdown"), "{e}");
        let e = Plan::draw(&PlanSpec {
            kinds: vec![],
            clean: 0,
            ..spec()
        })
        .unwrap_err();
        assert!(e.contains("no round"), "{e}");
    }

    #[test]
    fn sizes_read_and_print_as_multiples_of_the_usual_step() {
        assert_eq!(parse_factor("1.25x"), Ok(1250));
        assert_eq!(parse_factor("2"), Ok(2000));
        assert_eq!(factor_text(1100), "1.1x");
        assert_eq!(factor_text(1250), "1.25x");
        assert_eq!(factor_text(2000), "2x");
        for bad in ["1", "0.9", "half", "11"] {
            assert!(parse_factor(bad).is_err(), "{bad}");
        }
        assert_eq!(Kind::parse("path_shaped"), Ok(Kind::PathShaped));
        assert!(Kind::parse("port_down").unwrap_err().contains("cpu_capped"));
    }
}
