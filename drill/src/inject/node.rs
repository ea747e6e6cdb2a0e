//! The real cluster's injector: commands on the node through the admin's prefix (`ssh {node}`),
//! the value before each change read first so that its undo puts it back.

use std::path::Path;

use super::loads::Loads;
use super::{InjectError, Injector, burst_for, run};
use crate::class::FaultClass;
use crate::journal::{Journal, Undo};
use crate::plan::Round;

/// A real cluster's injector: commands on the node through a prefix (`ssh {node}`).
#[derive(Debug)]
pub struct NodeExecInjector {
    /// The prefix; `{node}` is replaced by the node's name.
    pub prefix: Vec<String>,
    /// The RoCE/IB netdev the network classes change (`--interface`).
    pub interface: String,
    /// The lossless priority (PFC and ECN classes).
    pub priority: u8,
    /// The tbf rate of `congestion`.
    pub congestion_rate: String,
    /// Shared loads.
    pub loads: Loads,
}

impl NodeExecInjector {
    fn on(&self, node: &str, cmd: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = self
            .prefix
            .iter()
            .map(|w| w.replace("{node}", node))
            .collect();
        v.extend(cmd.iter().map(|s| (*s).to_owned()));
        v
    }

    /// The commands that change and undo `class` on `node`, given what `read` returns for the
    /// value before the change (pure, for the tests and `--dry-run`).
    pub fn commands(
        &self,
        class: FaultClass,
        node: &str,
        before: &str,
    ) -> Result<(Vec<String>, Vec<String>), InjectError> {
        let i = self.interface.as_str();
        let prio = self.priority;
        let both = |set: &str| {
            format!(
                "echo {set} > /sys/class/net/{i}/ecn/roce_np/enable/{prio} && echo {set} > /sys/class/net/{i}/ecn/roce_rp/enable/{prio}"
            )
        };
        Ok(match class {
            FaultClass::PortDown => (
                self.on(node, &["ip", "link", "set", "dev", i, "down"]),
                self.on(node, &["ip", "link", "set", "dev", i, "up"]),
            ),
            FaultClass::MtuDrift => {
                let old = before.trim();
                if old.is_empty() || !old.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(InjectError::Command {
                        command: format!("cat /sys/class/net/{i}/mtu"),
                        message: format!("not an MTU: {old:?}"),
                    });
                }
                (
                    self.on(node, &["ip", "link", "set", "dev", i, "mtu", "1500"]),
                    self.on(node, &["ip", "link", "set", "dev", i, "mtu", old]),
                )
            }
            FaultClass::EcnOff => (
                self.on(node, &["sh", "-c", &both("0")]),
                self.on(node, &["sh", "-c", &both(before.trim())]),
            ),
            FaultClass::PfcOff => {
                // `dcb pfc show dev IF prio-pfc` prints `prio-pfc 0:off 1:off 2:off 3:on ...`.
                let old: Vec<&str> = before
                    .split_whitespace()
                    .filter(|w| w.contains(':') && w.as_bytes()[0].is_ascii_digit())
                    .collect();
                if old.len() != 8 {
                    return Err(InjectError::Command {
                        command: format!("dcb pfc show dev {i} prio-pfc"),
                        message: format!("not eight priorities: {before:?}"),
                    });
                }
                let off = format!("{prio}:off");
                let mut undo = self.on(node, &["dcb", "pfc", "set", "dev", i, "prio-pfc"]);
                undo.extend(old.iter().map(|s| (*s).to_owned()));
                (
                    self.on(node, &["dcb", "pfc", "set", "dev", i, "prio-pfc", &off]),
                    undo,
                )
            }
            FaultClass::Congestion => {
                if before.contains("tbf") || before.contains("htb") || before.contains("mqprio") {
                    return Err(InjectError::Unsupported {
                        class: "congestion",
                        place: "this interface",
                        why: format!(
                            "{i} has a root qdisc of its own ({}); the drill would not put it back",
                            before.trim()
                        ),
                    });
                }
                let burst = burst_for(&self.congestion_rate);
                (
                    self.on(
                        node,
                        &[
                            "tc",
                            "qdisc",
                            "replace",
                            "dev",
                            i,
                            "root",
                            "tbf",
                            "rate",
                            &self.congestion_rate,
                            "burst",
                            &burst,
                            "latency",
                            "100ms",
                        ],
                    ),
                    self.on(node, &["tc", "qdisc", "del", "dev", i, "root"]),
                )
            }
            FaultClass::NodeRemoved => (
                self.on(node, &["systemctl", "stop", "slurmd"]),
                self.on(node, &["systemctl", "start", "slurmd"]),
            ),
            // The counter classes (and the controls, which inject() handles before).
            c @ (FaultClass::RateDowngrade
            | FaultClass::RoceGidMissing
            | FaultClass::LinkFlap
            | FaultClass::ErrorCounters
            | FaultClass::PauseStorm
            | FaultClass::CnpStorm
            | FaultClass::CheckpointBurst
            | FaultClass::BackgroundLoad
            | FaultClass::Clean) => {
                return Err(InjectError::Unsupported {
                    class: c.id(),
                    place: "a real cluster",
                    why: "it exists only on the testbed (counters rise only when the fault is real); leave it out with --classes".into(),
                });
            }
        })
    }

    fn read_before(&self, class: FaultClass, node: &str) -> Result<String, InjectError> {
        let i = self.interface.as_str();
        let prio = self.priority.to_string();
        let read = |cmd: &[&str]| run(node, &self.on(node, cmd), self.loads.command_limit());
        match class {
            FaultClass::MtuDrift => read(&["cat", &format!("/sys/class/net/{i}/mtu")]),
            FaultClass::EcnOff => read(&[
                "cat",
                &format!("/sys/class/net/{i}/ecn/roce_np/enable/{prio}"),
            ]),
            FaultClass::PfcOff => read(&["dcb", "pfc", "show", "dev", i, "prio-pfc"]),
            FaultClass::Congestion => read(&["tc", "qdisc", "show", "dev", i, "root"]),
            // Nothing to read first: the undo does not depend on what was there.
            FaultClass::PortDown
            | FaultClass::RateDowngrade
            | FaultClass::RoceGidMissing
            | FaultClass::LinkFlap
            | FaultClass::ErrorCounters
            | FaultClass::PauseStorm
            | FaultClass::CnpStorm
            | FaultClass::NodeRemoved
            | FaultClass::CheckpointBurst
            | FaultClass::BackgroundLoad
            | FaultClass::Clean => Ok(String::new()),
        }
    }
}

impl Injector for NodeExecInjector {
    fn inject(
        &mut self,
        round: &Round,
        ckpt_dir: &Path,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        if let Some(size) = round.size {
            // Nothing would apply the size: the real congestion cap is a fixed rate, and the
            // counter classes exist only on the testbed.
            return Err(InjectError::Unsupported {
                class: round.class.id(),
                place: "a real cluster",
                why: format!(
                    "a graded size ({size}) runs on the testbed only; drop --graded and --size here"
                ),
            });
        }
        match round.class {
            FaultClass::Clean => Ok(Vec::new()),
            FaultClass::CheckpointBurst => self.loads.checkpoint_burst(round, ckpt_dir, journal),
            FaultClass::BackgroundLoad => self.loads.background_load(round, journal),
            class => {
                let before = self.read_before(class, &round.node)?;
                let (change, undo) = self.commands(class, &round.node, &before)?;
                let id = journal.record(&round.node, class.id(), Undo::Run { argv: undo })?;
                run(&round.node, &change, self.loads.command_limit())?;
                Ok(vec![id])
            }
        }
    }

    fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError> {
        self.loads.undo(node, undo)
    }
}
