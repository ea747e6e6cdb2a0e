//! The injectors: the [`Injector`] seam and its two implementations.
//!
//! - [`TestbedInjector`]: the project's testbed. Sysfs faults replace the node's fixture tree
//!   (written by the testbed's `fabric-fixtures`) by the class's scenario, keeping the old tree
//!   to put back; congestion is `tc tbf` on both ends of the node's veth in its network
//!   namespace; node removal stops the node's slurmd with `scripts/testbed stop slurmd-NODE`.
//! - [`NodeExecInjector`]: a real cluster. Commands run on the node through a prefix the admin
//!   gives (`ssh {node}`, `pdsh -w {node}`); only the classes that can be made on real hardware
//!   exist there, each needs `--allow-hardware CLASS`, and the value before the change is read
//!   first so the undo puts that value back.
//!
//! Both write the undo into the [`Journal`] (synced) before they change anything, so that a
//! drill stopped half-way is restored by `fabric-check drill --restore` or by the next drill.
//! The two controls that load the node (`checkpoint_burst`, `background_load`) are shared: a
//! writer into the job's checkpoint folder (as the job user, never through a link), CPU hogs
//! (bounded by `timeout`) and a loopback TCP stream.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fabric_base::exec::ExecError;

use crate::journal::{Journal, JournalError, Undo};
use crate::plan::Round;

mod loads;
mod node;
mod testbed;

pub use loads::{Loads, start_ticks};
pub use node::NodeExecInjector;
pub use testbed::{TestbedInjector, bandwidth_bps, graded_raises};

/// Why an injection or an undo failed.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// The journal could not be written: nothing was changed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A command failed.
    #[error("{command} failed: {message}")]
    Command {
        /// The command.
        command: String,
        /// What it said.
        message: String,
    },
    /// A command on a node ran past its limit and was killed with every process it started.
    #[error("{command} on {node} did not finish within {limit_ms} ms and was killed")]
    TimedOut {
        /// The node it ran for.
        node: String,
        /// The command.
        command: String,
        /// The limit.
        limit_ms: u128,
    },
    /// A file operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The gates refused the injection: nothing was changed, and the drill stops.
    #[error("refused: {0}")]
    Refused(#[from] crate::refusal::GateError),
    /// The class cannot be injected here.
    #[error("class {class} cannot be injected on {place}: {why}")]
    Unsupported {
        /// The class id.
        class: &'static str,
        /// Where.
        place: &'static str,
        /// Why, and what to do.
        why: String,
    },
}

/// Injects a round's fault and undoes it.
pub trait Injector {
    /// Injects the round's fault on its node, journaling every undo before the change; returns
    /// the journal entries to undo when the round ends. `ckpt_dir` is the job's checkpoint
    /// folder (for `checkpoint_burst`).
    fn inject(
        &mut self,
        round: &Round,
        ckpt_dir: &Path,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError>;
    /// Performs one undo of a change on `node`.
    fn undo(&mut self, node: &str, undo: &Undo) -> Result<(), InjectError>;
    /// For a graded `congestion` round just injected: the share of its peers' bandwidth the
    /// node's path carried through the cap, measured, percent (taken: asked once per round).
    fn take_measured_pct(&mut self) -> Option<f64> {
        None
    }
}

/// Undoes the journal entries `ids` (newest first) and marks each done; the first error is
/// returned after every entry was tried.
pub fn restore(
    injector: &mut dyn Injector,
    journal: &mut Journal,
    ids: &[u64],
) -> Result<(), InjectError> {
    let pending = journal.pending()?;
    let mut first = None;
    for p in pending.iter().filter(|p| ids.contains(&p.id)) {
        match injector.undo(&p.node, &p.undo) {
            Ok(()) => journal.done(p.id)?,
            Err(e) => {
                tracing::error!(node = %p.node, what = %p.what, "undo failed: {e}");
                first.get_or_insert(e);
            }
        }
    }
    first.map_or(Ok(()), Err)
}

/// Undoes every pending entry of the journal (`--restore`, and the start of every drill);
/// returns how many were undone.
pub fn replay(injector: &mut dyn Injector, journal: &mut Journal) -> Result<usize, InjectError> {
    let pending = journal.pending()?;
    let ids: Vec<u64> = pending.iter().map(|p| p.id).collect();
    restore(injector, journal, &ids)?;
    Ok(ids.len())
}

/// How long one command on a node may run by default before it is killed (`ssh`, `dcb`, `tc`,
/// a fixture writer): a hung node fails its command instead of hanging the drill.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(20);

/// Runs `argv` for `node` to completion or until `limit`, then kills it and every process it
/// started. Its environment is the drill's own (`ssh` needs its agent and its home); stdin is
/// `/dev/null`. Its stdout, or why it failed.
pub(crate) fn run(node: &str, argv: &[String], limit: Duration) -> Result<String, InjectError> {
    let (program, args) = argv.split_first().ok_or_else(|| InjectError::Command {
        command: String::new(),
        message: "empty command".into(),
    })?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(std::process::Stdio::null());
    // A fixture writer or tool just written (or being replaced) can be busy for a moment: the
    // bounded runner retries a busy program within the limit.
    let out = fabric_base::exec::run_bounded(cmd, None, limit).map_err(|e| match e {
        ExecError::Timeout { .. } => InjectError::TimedOut {
            node: node.to_owned(),
            command: argv.join(" "),
            limit_ms: limit.as_millis(),
        },
        e => InjectError::Command {
            command: argv.join(" "),
            message: e.to_string(),
        },
    })?;
    if !out.status.success() {
        return Err(InjectError::Command {
            command: argv.join(" "),
            message: format!("{}: {}", out.status, out.stderr_text()),
        });
    }
    Ok(out.stdout_text())
}

pub(crate) fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| (*s).to_owned()).collect()
}

/// tbf's burst for `rate` as `scripts/netns` computes it: 5 ms worth, at least 16 KiB.
pub(crate) fn burst_for(rate: &str) -> String {
    let digits: String = rate.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n: f64 = digits.parse().unwrap_or(100.0);
    let bps = match &rate[digits.len()..] {
        "kbit" => n * 1e3,
        "gbit" => n * 1e9,
        "bit" => n,
        _ => n * 1e6,
    };
    format!("{}", ((bps / 8.0 * 0.005) as u64).max(16384))
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::{loads::*, node::*, testbed::*};
    use crate::class::FaultClass;
    use crate::grade::{Size, Thresholds};
    use crate::journal::{Journal, Undo};
    use crate::plan::Round;

    use std::os::unix::process::CommandExt;

    use std::process::Command;

    use crate::class::{Moment, NodeKind};
    use std::time::{Duration, Instant};

    fn round(class: FaultClass) -> Round {
        Round {
            index: 1,
            class,
            node: "gpu07".into(),
            kind: NodeKind::Roce,
            moment: Moment::Before,
            job: None,
            during_at_permille: None,
            size: None,
        }
    }

    #[test]
    fn a_graded_counter_fault_raises_each_of_its_counters_by_the_multiple_of_its_threshold() {
        let t = Thresholds(
            [
                ("symbol_error", 120),
                ("rx_prio_pause", 1_000_000),
                ("tx_prio_pause", 1_000_000),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        );
        let z = |s| Size::parse(s).unwrap();
        assert_eq!(
            graded_raises(FaultClass::ErrorCounters, NodeKind::Ib, z("2x"), &t).unwrap(),
            vec![("symbol_error".to_owned(), 240)]
        );
        assert_eq!(
            graded_raises(FaultClass::PauseStorm, NodeKind::Roce, z("0.5x"), &t).unwrap(),
            vec![
                ("rx_prio3_pause".to_owned(), 500_000),
                ("tx_prio3_pause".to_owned(), 500_000)
            ]
        );
        assert_eq!(
            graded_raises(FaultClass::LinkFlap, NodeKind::Ib, z("3"), &t).unwrap(),
            vec![("link_downed".to_owned(), 3)]
        );
        // The InfiniBand storm also raises the pause duration, whose threshold is missing here.
        let e = graded_raises(FaultClass::PauseStorm, NodeKind::Ib, z("2x"), &t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no threshold for rx_prio_pause_duration"), "{e}");
        let e = graded_raises(FaultClass::ErrorCounters, NodeKind::Ib, z("50%"), &t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("error_counters takes"), "{e}");
    }

    #[test]
    fn a_real_cluster_refuses_a_graded_size_and_says_where_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("journal.jsonl")).unwrap();
        let mut r = round(FaultClass::Congestion);
        r.size = Some(Size::BandwidthPct(50));
        let e = real()
            .inject(&r, dir.path(), &mut j)
            .unwrap_err()
            .to_string();
        assert!(e.contains("testbed only") && e.contains("50%"), "{e}");
        assert!(j.pending().unwrap().is_empty(), "nothing was journaled");
    }

    fn real() -> NodeExecInjector {
        NodeExecInjector {
            prefix: vec!["ssh".into(), "{node}".into()],
            interface: "ens4np0".into(),
            priority: 3,
            congestion_rate: "1gbit".into(),
            loads: Loads::default(),
        }
    }

    /// A node whose every command hangs: the prefix stands in for an `ssh` that never answers.
    fn hung(limit: Duration) -> NodeExecInjector {
        let mut loads = Loads::remote(Vec::new());
        loads.command_limit = Some(limit);
        NodeExecInjector {
            prefix: vec!["sh".into(), "-c".into(), "sleep 30".into(), "{node}".into()],
            loads,
            ..real()
        }
    }

    #[test]
    fn a_hung_node_fails_its_command_at_the_limit_naming_the_node_and_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = Journal::open(&dir.path().join("journal.jsonl")).unwrap();
        let mut inj = hung(Duration::from_millis(300));
        let start = Instant::now();
        let err = inj
            .inject(&round(FaultClass::MtuDrift), dir.path(), &mut journal)
            .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        match &err {
            InjectError::TimedOut {
                node,
                command,
                limit_ms,
            } => {
                assert_eq!(node, "gpu07");
                assert!(command.contains("/sys/class/net/ens4np0/mtu"), "{command}");
                assert_eq!(*limit_ms, 300);
            }
            other => panic!("not a timeout: {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains("gpu07") && text.contains("sleep 30"),
            "{text}"
        );
        assert!(journal.pending().unwrap().is_empty(), "nothing was changed");
    }

    #[test]
    fn a_hung_undo_fails_at_the_limit_naming_the_node() {
        let mut loads = Loads {
            command_limit: Some(Duration::from_millis(300)),
            ..Loads::default()
        };
        let start = Instant::now();
        let err = loads
            .undo(
                "gpu09",
                &Undo::Run {
                    argv: words(&["sleep", "30"]),
                },
            )
            .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert!(
            matches!(&err, InjectError::TimedOut { node, command, .. } if node == "gpu09" && command == "sleep 30"),
            "{err:?}"
        );
    }

    #[test]
    fn a_command_on_a_node_is_limited_to_twenty_seconds_unless_set() {
        assert_eq!(Loads::default().command_limit(), Duration::from_secs(20));
    }

    #[test]
    fn a_real_mtu_change_is_undone_to_the_mtu_read_before() {
        let (change, undo) = real()
            .commands(FaultClass::MtuDrift, "gpu07", "4200\n")
            .unwrap();
        assert_eq!(
            change.join(" "),
            "ssh gpu07 ip link set dev ens4np0 mtu 1500"
        );
        assert_eq!(undo.join(" "), "ssh gpu07 ip link set dev ens4np0 mtu 4200");
        assert!(real().commands(FaultClass::MtuDrift, "gpu07", "").is_err());
    }

    #[test]
    fn a_real_pfc_change_puts_back_all_eight_priorities_as_they_were() {
        let before = "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n";
        let (change, undo) = real()
            .commands(FaultClass::PfcOff, "gpu07", before)
            .unwrap();
        assert_eq!(
            change.join(" "),
            "ssh gpu07 dcb pfc set dev ens4np0 prio-pfc 3:off"
        );
        assert_eq!(
            undo.join(" "),
            "ssh gpu07 dcb pfc set dev ens4np0 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off"
        );
    }

    #[test]
    fn congestion_refuses_an_interface_with_a_root_qdisc_of_its_own() {
        let e = real()
            .commands(
                FaultClass::Congestion,
                "gpu07",
                "qdisc htb 1: root refcnt 2",
            )
            .unwrap_err();
        assert!(e.to_string().contains("would not put it back"), "{e}");
        let (c, u) = real()
            .commands(FaultClass::Congestion, "gpu07", "qdisc mq 0: root")
            .unwrap();
        assert!(c.join(" ").contains("tbf rate 1gbit burst 625000"), "{c:?}");
        assert_eq!(u.join(" "), "ssh gpu07 tc qdisc del dev ens4np0 root");
    }

    #[test]
    fn counter_classes_are_refused_on_a_real_cluster() {
        let e = real()
            .commands(FaultClass::ErrorCounters, "gpu07", "")
            .unwrap_err();
        assert!(e.to_string().contains("only on the testbed"), "{e}");
    }

    #[test]
    fn a_testbed_tree_is_replaced_and_put_back_through_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let tb = dir.path();
        std::fs::create_dir_all(tb.join("nodes/n3/sysfs")).unwrap();
        std::fs::write(tb.join("nodes/n3/sysfs/marker"), "healthy").unwrap();
        crate::fakes::stand_in_fixture_writer(tb);
        let mut inj = TestbedInjector::new(tb.to_owned(), tb.join("testbed"));
        let marker = || std::fs::read_to_string(tb.join("nodes/n3/sysfs/marker")).unwrap();
        let mut r = round(FaultClass::EcnOff);
        r.node = "n3".into();
        let mut j = Journal::open(&tb.join("journal.jsonl")).unwrap();
        let ids = inj.inject(&r, tb, &mut j).unwrap();
        assert_eq!(marker().trim(), "roce8-ecn-off");
        assert_eq!(j.pending().unwrap().len(), 1);
        restore(&mut inj, &mut j, &ids).unwrap();
        assert_eq!(marker(), "healthy");
        assert!(j.pending().unwrap().is_empty());
        let left: Vec<_> = std::fs::read_dir(tb.join("nodes/n3"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("sysfs")],
            "nothing saved is left"
        );
    }

    #[test]
    fn a_crashed_drill_is_restored_by_replaying_its_journal() {
        let dir = tempfile::tempdir().unwrap();
        let tb = dir.path();
        std::fs::create_dir_all(tb.join("nodes/n1/.drill-saved-sysfs")).unwrap();
        std::fs::write(tb.join("nodes/n1/.drill-saved-sysfs/marker"), "healthy").unwrap();
        std::fs::create_dir_all(tb.join("nodes/n1/sysfs")).unwrap();
        std::fs::write(tb.join("nodes/n1/sysfs/marker"), "port down").unwrap();
        let path = tb.join("journal.jsonl");
        {
            let mut j = Journal::open(&path).unwrap();
            j.record(
                "n1",
                "port_down",
                Undo::Rename {
                    from: tb.join("nodes/n1/.drill-saved-sysfs"),
                    to: tb.join("nodes/n1/sysfs"),
                },
            )
            .unwrap();
        }
        let mut inj = TestbedInjector::new(tb.to_owned(), tb.join("testbed"));
        let mut j = Journal::open(&path).unwrap();
        assert_eq!(replay(&mut inj, &mut j).unwrap(), 1);
        assert_eq!(
            std::fs::read_to_string(tb.join("nodes/n1/sysfs/marker")).unwrap(),
            "healthy"
        );
        assert_eq!(replay(&mut inj, &mut j).unwrap(), 0, "nothing left to undo");
    }

    #[test]
    fn remote_hogs_go_through_the_prefix_journaled_and_ended_with_no_loopback_stream() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        // `env` stands in for `ssh {node}`: the words before the hog's own.
        let mut loads = Loads::remote(vec!["env".into()]);
        loads.hogs = Some(1);
        let ids = loads
            .background_load(&round(FaultClass::BackgroundLoad), &mut j)
            .unwrap();
        assert_eq!(ids.len(), 1, "one hog, no stream");
        let p = j.pending().unwrap();
        let Undo::Kill {
            pid,
            start_ticks: t,
        } = p[0].undo
        else {
            panic!("{p:?}")
        };
        assert_eq!(start_ticks(pid), Some(t), "the hog runs");
        restore(
            &mut TestbedInjector::new(dir.path().into(), dir.path().into()),
            &mut j,
            &ids,
        )
        .unwrap();
        let gone = (0..50).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.contains(") Z "))
        });
        assert!(gone, "the hog's group was ended");
    }

    #[test]
    fn a_hog_is_killed_by_pid_only_while_it_is_the_same_process() {
        let mut child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let t = start_ticks(pid).unwrap();
        let mut loads = Loads::default();
        loads
            .undo(
                "n1",
                &Undo::Kill {
                    pid,
                    start_ticks: t + 1,
                },
            )
            .unwrap();
        assert!(
            child.try_wait().unwrap().is_none(),
            "another start time: left alone"
        );
        loads
            .undo(
                "n1",
                &Undo::Kill {
                    pid,
                    start_ticks: t,
                },
            )
            .unwrap();
        let st = child.wait().unwrap();
        assert!(!st.success());
    }

    #[test]
    fn the_checkpoint_burst_never_writes_through_a_link_planted_in_the_jobs_folder() {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path().join("job");
        let victim = dir.path().join("victim");
        std::fs::create_dir_all(&job).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        // The job, running in its folder, plants the burst's name as a link to a folder of root's.
        std::os::unix::fs::symlink(&victim, job.join("drill-burst")).unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let mut loads = Loads {
            burst_bytes: Some(1),
            ..Loads::default()
        };
        let e = loads
            .checkpoint_burst(&round(FaultClass::CheckpointBurst), &job, &mut j)
            .unwrap_err()
            .to_string();
        loads.wait_bursts();
        assert!(e.contains("must not exist yet"), "{e}");
        assert_eq!(
            std::fs::read_dir(&victim).unwrap().count(),
            0,
            "nothing written there"
        );
        assert!(
            j.pending().unwrap().is_empty(),
            "no undo left to remove the job's link"
        );
        assert!(std::fs::symlink_metadata(job.join("drill-burst")).is_ok());
        // The job's folder itself swapped for a link: refused too.
        let swapped = dir.path().join("swapped");
        std::os::unix::fs::symlink(&victim, &swapped).unwrap();
        assert!(
            loads
                .checkpoint_burst(&round(FaultClass::CheckpointBurst), &swapped, &mut j)
                .is_err()
        );
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0);
    }

    #[test]
    fn the_checkpoint_burst_is_written_as_the_job_user() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.jsonl")).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        if me == 0 {
            let d =
                crate::folder::prepare(&dir.path().join("work"), "round-001", Some(1500)).unwrap();
            let mut loads = Loads {
                burst_bytes: Some(1),
                job_uid: Some(1500),
                ..Loads::default()
            };
            let ids = loads
                .checkpoint_burst(&round(FaultClass::CheckpointBurst), &d.job_dir, &mut j)
                .unwrap();
            loads.wait_bursts();
            let burst = d.job_dir.join("drill-burst");
            assert_eq!(std::fs::metadata(&burst).unwrap().uid(), 1500);
            let shard = std::fs::metadata(burst.join("shard-0000")).unwrap();
            assert_eq!((shard.uid(), shard.len()), (1500, 4 << 20));
            restore(
                &mut TestbedInjector::new(dir.path().into(), dir.path().into()),
                &mut j,
                &ids,
            )
            .unwrap();
            assert!(!burst.exists(), "the undo removed the burst");
        } else {
            // Not root: writing as another user is impossible, so the burst is refused.
            let job = dir.path().join("job");
            std::fs::create_dir(&job).unwrap();
            let mut loads = Loads {
                burst_bytes: Some(1),
                job_uid: Some(me + 1),
                ..Loads::default()
            };
            let e = loads
                .checkpoint_burst(&round(FaultClass::CheckpointBurst), &job, &mut j)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("cannot take uid {}", me + 1)), "{e}");
            assert_eq!(std::fs::read_dir(&job).unwrap().count(), 0);
        }
    }
}
