//! `cpu_capped`: a node's trainer moved into a CPU cgroup of the drill's own, whose bandwidth
//! limit stretches the busy part of each step so that the whole step lasts `factor` times as
//! long, and moved back when the round ends.
//!
//! cgroup v2 caps with `cpu.max` (`QUOTA PERIOD`); where the CPU controller is bound to a v1
//! hierarchy instead (a hybrid host: the unified hierarchy then has no `cpu`), the same CFS
//! bandwidth limit is `cpu.cfs_quota_us` and `cpu.cfs_period_us` there. Either way the drill's
//! cgroups are `<hierarchy>/fabric-drill-stragglers/<node>`; the journal's
//! [`Undo::Cgroup`] moves their processes back to the cgroup they came from and removes them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::inject::InjectError;
use crate::journal::{Journal, Undo};

/// The drill's folder in the CPU hierarchy; a node's cgroup is a folder inside it.
pub const DRILL_CGROUP: &str = "fabric-drill-stragglers";

/// The shortest period the drill uses, microseconds.
pub const PERIOD_US: u64 = 10_000;
/// The kernel's smallest quota, microseconds.
pub const MIN_QUOTA_US: u64 = 1_000;

/// Where the CPU controller is, and how it caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuCgroup {
    /// cgroup v2: `cpu.max`, in the unified hierarchy mounted here.
    V2(PathBuf),
    /// cgroup v1: the `cpu` controller's own hierarchy mounted here (`cpu.cfs_quota_us`).
    V1(PathBuf),
}

fn words_of(path: &Path) -> Option<Vec<String>> {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.split_whitespace().map(str::to_owned).collect())
}

/// Finds the CPU controller under `sys` (`/sys/fs/cgroup`): cgroup v2 (at `sys`, or at
/// `sys/unified` on a hybrid host) when its root lets its children use `cpu`, else v1's `cpu`
/// hierarchy. `Err` says why neither can cap, and what to do.
pub fn detect(sys: &Path) -> Result<CpuCgroup, String> {
    let mut why = Vec::new();
    for root in [sys.to_path_buf(), sys.join("unified")] {
        let Some(controllers) = words_of(&root.join("cgroup.controllers")) else {
            continue;
        };
        if !controllers.iter().any(|c| c == "cpu") {
            why.push(format!(
                "the cgroup v2 hierarchy at {} has no cpu controller ({}): it is bound to a v1 hierarchy",
                root.display(),
                if controllers.is_empty() {
                    "none".to_owned()
                } else {
                    controllers.join(" ")
                }
            ));
            continue;
        }
        let sub = words_of(&root.join("cgroup.subtree_control")).unwrap_or_default();
        if sub.iter().any(|c| c == "cpu") {
            return Ok(CpuCgroup::V2(root));
        }
        why.push(format!(
            "the cgroup v2 hierarchy at {} does not give its children the cpu controller: `echo +cpu > {}/cgroup.subtree_control` (the drill does not change the root's controllers itself)",
            root.display(),
            root.display()
        ));
    }
    for name in ["cpu", "cpu,cpuacct", "cpuacct,cpu"] {
        let root = sys.join(name);
        if root.join("cpu.cfs_quota_us").exists() {
            return Ok(CpuCgroup::V1(root));
        }
    }
    if why.is_empty() {
        why.push(format!("no CPU controller under {}", sys.display()));
    }
    Err(why.join("; "))
}

/// The cap that makes a step `factor` times as long: its busy part took `busy_wall_ms` for
/// `busy_cpu_ms` of CPU, the whole step `base_ms`, so the busy part must take
/// `busy_wall_ms + (factor - 1) * base_ms`; under a quota of Q µs per period P it takes about
/// `busy_cpu_ms * P / Q`. `(quota_us, period_us)`: the period is [`PERIOD_US`], longer when the
/// quota would fall under the kernel's floor ([`MIN_QUOTA_US`]). `None` when no cap is needed
/// (a factor of 1 or less) or the figures make no sense.
pub fn quota_for(
    busy_cpu_ms: f64,
    busy_wall_ms: f64,
    base_ms: f64,
    factor: f64,
) -> Option<(u64, u64)> {
    let target = busy_wall_ms + (factor - 1.0) * base_ms;
    if !(busy_cpu_ms > 0.0 && target.is_finite() && target > 0.0 && factor > 1.0) {
        return None;
    }
    let share = busy_cpu_ms / target;
    if share >= 1.0 {
        return None;
    }
    let quota = (share * PERIOD_US as f64).round() as u64;
    if quota >= MIN_QUOTA_US {
        return Some((quota, PERIOD_US));
    }
    Some((MIN_QUOTA_US, (MIN_QUOTA_US as f64 / share).round() as u64))
}

/// The cgroup of a process in the hierarchy of `cgroup`, from its `/proc/PID/cgroup` text: v2's
/// `0::/path` line, or the v1 line whose controllers include `cpu`. Relative to the
/// hierarchy's root.
pub fn cgroup_of(cgroup: &CpuCgroup, proc_cgroup: &str) -> Option<PathBuf> {
    proc_cgroup.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, controllers, path) = (it.next()?, it.next()?, it.next()?);
        let ours = match cgroup {
            CpuCgroup::V2(_) => controllers.is_empty(),
            CpuCgroup::V1(_) => controllers.split(',').any(|c| c == "cpu"),
        };
        ours.then(|| PathBuf::from(path.trim_start_matches('/')))
    })
}

fn write_to(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(text.as_bytes())
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl Fn(std::io::Error) -> InjectError + 'a {
    move |source| InjectError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

impl CpuCgroup {
    /// The hierarchy's root.
    pub fn root(&self) -> &Path {
        match self {
            CpuCgroup::V2(p) | CpuCgroup::V1(p) => p,
        }
    }

    /// Which cgroup version.
    pub fn version(&self) -> &'static str {
        match self {
            CpuCgroup::V2(_) => "cgroup v2 cpu.max",
            CpuCgroup::V1(_) => "cgroup v1 cpu.cfs_quota_us",
        }
    }

    /// The drill's cgroup for `node`.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.root().join(DRILL_CGROUP).join(node)
    }

    /// Caps `pids` (the node's trainer) at `quota_us` per `period_us`: journals the undo
    /// (everything moved back to the cgroup the first pid is in now, the drill's cgroup
    /// removed), makes the cgroup, sets its limit, moves the processes. `proc` is `/proc`.
    pub fn cap(
        &self,
        node: &str,
        pids: &[u32],
        (quota_us, period_us): (u64, u64),
        proc: &Path,
        journal: &mut Journal,
    ) -> Result<Vec<u64>, InjectError> {
        let first = pids.first().ok_or_else(|| InjectError::Command {
            command: format!("cap the CPU of {node}'s trainer"),
            message: "no process to cap".into(),
        })?;
        let file = proc.join(first.to_string()).join("cgroup");
        let text = std::fs::read_to_string(&file).map_err(io_err("read", &file))?;
        let back = cgroup_of(self, &text)
            .map(|rel| self.root().join(rel))
            .ok_or_else(|| InjectError::Command {
                command: format!("read {}", file.display()),
                message: format!("no cgroup of {} there", self.version()),
            })?;
        let parent = self.root().join(DRILL_CGROUP);
        let dir = parent.join(node);
        let id = journal.record(
            node,
            "cpu_capped",
            Undo::Cgroup {
                dir: dir.clone(),
                back,
            },
        )?;
        if !parent.exists() {
            std::fs::create_dir(&parent).map_err(io_err("make the cgroup", &parent))?;
        }
        if let CpuCgroup::V2(_) = self {
            let sub = parent.join("cgroup.subtree_control");
            write_to(&sub, "+cpu").map_err(io_err("enable cpu in", &sub))?;
        }
        if !dir.exists() {
            std::fs::create_dir(&dir).map_err(io_err("make the cgroup", &dir))?;
        }
        match self {
            CpuCgroup::V2(_) => {
                let f = dir.join("cpu.max");
                write_to(&f, &format!("{quota_us} {period_us}")).map_err(io_err("write", &f))?;
            }
            CpuCgroup::V1(_) => {
                let f = dir.join("cpu.cfs_period_us");
                write_to(&f, &period_us.to_string()).map_err(io_err("write", &f))?;
                let f = dir.join("cpu.cfs_quota_us");
                write_to(&f, &quota_us.to_string()).map_err(io_err("write", &f))?;
            }
        }
        let procs = dir.join("cgroup.procs");
        for pid in pids {
            write_to(&procs, &pid.to_string()).map_err(io_err("move a process into", &procs))?;
        }
        Ok(vec![id])
    }
}

/// The undo of [`CpuCgroup::cap`]: every process still in `dir` back into `back`, `dir`
/// removed, and its parent too when it is the drill's folder and empty. Nothing to do when
/// `dir` is gone (an undo replayed twice).
pub fn put_back(dir: &Path, back: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.split_whitespace() {
        match write_to(&back.join("cgroup.procs"), pid) {
            Ok(()) => {}
            // The process ended meanwhile.
            Err(e) if e.raw_os_error() == Some(nix::libc::ESRCH) => {}
            Err(e) => return Err(e),
        }
    }
    // A cgroup whose last process just left may be busy for a moment.
    let mut tries = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) if tries < 20 && e.raw_os_error() == Some(nix::libc::EBUSY) => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(parent) = dir.parent()
        && parent.file_name().is_some_and(|n| n == DRILL_CGROUP)
    {
        // Another node's cgroup may still be there: then it stays, for that node's undo.
        let _ = std::fs::remove_dir(parent);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, text) in files {
            let path = d.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        d
    }

    #[test]
    fn a_hybrid_host_whose_cpu_controller_is_v1s_caps_through_the_v1_hierarchy() {
        let d = tree(&[
            ("unified/cgroup.controllers", "hugetlb\n"),
            ("unified/cgroup.subtree_control", ""),
            ("cpu/cpu.cfs_quota_us", "-1\n"),
        ]);
        assert_eq!(detect(d.path()), Ok(CpuCgroup::V1(d.path().join("cpu"))));
    }

    #[test]
    fn a_v2_host_caps_with_cpu_max_only_when_its_root_gives_children_the_cpu_controller() {
        let d = tree(&[
            ("cgroup.controllers", "cpuset cpu io memory pids\n"),
            ("cgroup.subtree_control", "cpu memory pids\n"),
        ]);
        assert_eq!(detect(d.path()), Ok(CpuCgroup::V2(d.path().to_owned())));
        let d = tree(&[
            ("cgroup.controllers", "cpuset cpu io memory pids\n"),
            ("cgroup.subtree_control", "memory pids\n"),
        ]);
        let e = detect(d.path()).unwrap_err();
        assert!(e.contains("echo +cpu >"), "{e}");
        let d = tree(&[("unified/cgroup.controllers", "hugetlb\n")]);
        let e = detect(d.path()).unwrap_err();
        assert!(e.contains("no cpu controller (hugetlb)"), "{e}");
    }

    #[test]
    fn the_quota_stretches_the_busy_part_by_the_steps_extra_time_and_keeps_above_the_kernels_floor()
    {
        // 50 ms of CPU in a 500 ms step, 1.5x: the busy part must last 50 + 250 = 300 ms, so a
        // sixth of a CPU: 1667 µs a 10 ms period.
        assert_eq!(quota_for(50.0, 50.0, 500.0, 1.5), Some((1667, 10_000)));
        // 2x: 50 / 550 of a CPU is under 1 ms a 10 ms period: the period grows instead.
        assert_eq!(quota_for(50.0, 50.0, 500.0, 2.0), Some((1000, 11_000)));
        assert_eq!(quota_for(50.0, 50.0, 500.0, 1.0), None, "no slowdown");
        assert_eq!(quota_for(0.0, 50.0, 500.0, 2.0), None);
    }

    #[test]
    fn a_process_cgroup_is_read_from_its_own_hierarchys_line() {
        let text = "12:pids:/x\n4:cpu,cpuacct:/slurm/job1\n0::/user.slice/a\n";
        let v1 = CpuCgroup::V1("/c".into());
        let v2 = CpuCgroup::V2("/c".into());
        assert_eq!(cgroup_of(&v1, text), Some(PathBuf::from("slurm/job1")));
        assert_eq!(cgroup_of(&v2, text), Some(PathBuf::from("user.slice/a")));
        assert_eq!(cgroup_of(&v1, "1:cpuacct:/\n"), None);
    }

    #[test]
    fn a_cap_is_journaled_before_the_cgroup_is_made_and_sets_the_v1_limits() {
        let d = tree(&[
            ("cpu/cpu.cfs_quota_us", "-1\n"),
            ("cpu/cgroup.procs", ""),
            ("proc/4242/cgroup", "1:cpu:/\n"),
        ]);
        let cg = CpuCgroup::V1(d.path().join("cpu"));
        let dir = cg.node_dir("n3");
        // A plain folder stands in for the cgroup file system: its files are made ahead.
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["cpu.cfs_period_us", "cpu.cfs_quota_us", "cgroup.procs"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let mut j = Journal::open(&d.path().join("state/journal.jsonl")).unwrap();
        let ids = cg
            .cap(
                "n3",
                &[4242],
                (1667, 10_000),
                &d.path().join("proc"),
                &mut j,
            )
            .unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("cpu.cfs_period_us"), "10000");
        assert_eq!(read("cpu.cfs_quota_us"), "1667");
        assert_eq!(read("cgroup.procs"), "4242");
        let p = j.pending().unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].id, ids[0]);
        assert_eq!(
            p[0].undo,
            Undo::Cgroup {
                dir: dir.clone(),
                back: d.path().join("cpu"),
            }
        );
        assert!(
            put_back(&d.path().join("gone"), &dir).is_ok(),
            "nothing to undo"
        );
    }

    /// As root on a host with a CPU controller: a real process is capped, slowed, and put back.
    #[test]
    fn a_capped_process_runs_slower_and_is_put_back_where_it_was() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let Ok(cg) = detect(Path::new("/sys/fs/cgroup")) else {
            return;
        };
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let before = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("journal.jsonl")).unwrap();
        let node = format!("test-{}", std::process::id());
        let r = cg.cap(&node, &[pid], (1000, 10_000), Path::new("/proc"), &mut j);
        let inside = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let p = j.pending().unwrap();
        let Undo::Cgroup { dir: cdir, back } = &p[0].undo else {
            panic!("{p:?}")
        };
        put_back(cdir, back).unwrap();
        let after = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        r.unwrap();
        assert!(inside.contains(DRILL_CGROUP), "{inside}");
        assert_eq!(after, before, "back where it was");
        assert!(!cdir.exists(), "the drill's cgroup is removed");
    }
}
