//! Spare nodes: the user's `--fabric-check-spares=K`, the admin's `spares_max=`, the job
//! prolog leader's decision as the tag records it, and the batch step's environment after the
//! job was shrunk to its good nodes.
//!
//! A job asks for N+K nodes (`-N` counts all of them) and runs on N: every node is checked in
//! the prolog, the first node (the batch host) gathers every verdict, and when at least N nodes
//! passed, the batch host among them, it shrinks the job to N good nodes (`scontrol update
//! JobId=J NodeList=...`, root, the job's own id); failing nodes are drained as without spares,
//! healthy surplus nodes go back to the pool. Otherwise the job is requeued as without spares,
//! and the tag says why ([`Fallback`]).
//!
//! Slurm hands the batch script the node list of the allocation, built before the prolog ran
//! (see `docs/slurm-versions.md`): the leader leaves the kept nodes in [`BatchEnv`] on the
//! batch host, and the plugin's `slurm_spank_user_init` in the batch step rewrites the
//! variables ([`BatchEnv::variables`]) so that the script and a bare `srun` see only them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::hostlist;

/// The option's name, registered next to `--fabric-check` (`--fabric-check-spares=K`).
pub const SPARES_OPTION: &str = "fabric-check-spares";

/// The most spares any job may ask for, whatever `spares_max=` says.
pub const MAX_SPARES: u32 = 64;

/// Why a `--fabric-check-spares` request is refused at submission (or ignored in the prolog).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SparesRefused {
    /// Not a plain decimal number.
    #[error(
        "invalid --{SPARES_OPTION} value {value:?}: write the number of spare nodes, e.g. \
         --{SPARES_OPTION}=1 (-N counts them: -N 4 --{SPARES_OPTION}=1 runs on 3)"
    )]
    NotANumber {
        /// The value, bounded to 32 characters.
        value: String,
    },
    /// More than the cluster allows (`spares_max=`).
    #[error(
        "--{SPARES_OPTION}={asked} is refused: this cluster allows at most {allowed} spare \
         node(s) per job (spares_max= in plugstack.conf){hint}",
        hint = if *allowed == 0 { "; ask your admin to allow spares" } else { "" }
    )]
    AboveMax {
        /// What the job asked for.
        asked: u32,
        /// `spares_max=`.
        allowed: u32,
    },
    /// The cluster's policy is not `enforce`: a failing node costs no requeue there, and the
    /// job would hold its spares to its end.
    #[error(
        "--{SPARES_OPTION} is refused: fabric-check does not take failing nodes out of jobs on \
         this cluster (policy={policy}), so the job would keep its spare nodes to its end; \
         submit without spares"
    )]
    NotEnforced {
        /// The cluster's `policy=`.
        policy: &'static str,
    },
    /// The cluster cannot shrink a running job.
    #[error(
        "--{SPARES_OPTION} is refused: this cluster's SchedulerParameters has \
         disable_job_shrink, so a job cannot give nodes back; submit without spares"
    )]
    ShrinkDisabled,
    /// The job has no batch script (an srun or salloc that makes its own allocation).
    #[error(
        "--{SPARES_OPTION} is for batch jobs (sbatch): an allocation made by srun or salloc \
         cannot be shrunk before its first task"
    )]
    NotBatch,
    /// As many spares as nodes (or more): nothing would be left to run on.
    #[error("--{SPARES_OPTION}={spares} needs more than {spares} nodes, the job has {nodes}")]
    NoNodesLeft {
        /// The spares asked for.
        spares: u32,
        /// The job's nodes.
        nodes: u32,
    },
}

/// Parses the option's value strictly: one to three ASCII digits, nothing else (no sign, no
/// space, no unit), at most [`MAX_SPARES`]. `None` (a bare flag) is refused: say how many.
pub fn parse_spares(optarg: Option<&str>) -> Result<u32, SparesRefused> {
    let v = optarg.unwrap_or("");
    let refused = || SparesRefused::NotANumber {
        value: v.chars().take(32).collect(),
    };
    if v.is_empty() || v.len() > 3 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refused());
    }
    let n: u32 = v.parse().map_err(|_| refused())?;
    if n > MAX_SPARES {
        return Err(SparesRefused::AboveMax {
            asked: n,
            allowed: MAX_SPARES,
        });
    }
    Ok(n)
}

/// What the admin allows: the request `asked` against `spares_max=` (`allowed`).
pub fn allowed(asked: u32, allowed: u32) -> Result<u32, SparesRefused> {
    if asked > allowed {
        Err(SparesRefused::AboveMax { asked, allowed })
    } else {
        Ok(asked)
    }
}

/// Whether `slurm.conf` text sets `disable_job_shrink` in `SchedulerParameters` (keys are
/// case-insensitive in slurm.conf; the last `SchedulerParameters` line wins, as in Slurm).
pub fn shrink_disabled(slurm_conf: &str) -> bool {
    let mut last = None;
    for line in slurm_conf.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if let Some((k, v)) = line.split_once('=')
            && k.trim().eq_ignore_ascii_case("SchedulerParameters")
        {
            last = Some(v.trim().to_owned());
        }
    }
    last.is_some_and(|v| {
        v.split(',')
            .any(|p| p.trim().eq_ignore_ascii_case("disable_job_shrink"))
    })
}

/// What became of a job that asked for spares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SparesOutcome {
    /// Shrunk to N good nodes before its first task: no requeue.
    Shrunk,
    /// Requeued as without spares ([`Fallback`] says why).
    Requeued,
}

/// Why a job with spares was requeued after all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// The batch host (the job's first node) failed: Slurm cannot remove it from a job.
    BatchHostFailed,
    /// Fewer than N nodes passed.
    TooFewPassed,
    /// slurmctld refused the shrink (or could not be reached).
    ShrinkRefused,
}

/// A node the job gave up because it failed (or its verdict never arrived).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GivenUp {
    /// The node.
    pub node: String,
    /// Its failing checks (`rendezvous.missing` when its verdict never reached the leader).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
}

/// The `spares` entry of the job tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SparesRecord {
    /// Spares the job asked for (after `spares_max=`).
    pub asked: u32,
    /// The nodes the job runs on (N of them), a Slurm hostlist.
    pub kept: String,
    /// What happened.
    pub outcome: SparesOutcome,
    /// Why it was requeued, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// Failed nodes the job gave up, with their checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<GivenUp>,
    /// Healthy surplus nodes given back to the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<String>,
    /// Seconds the job held its spare nodes (the prolog, on each node given up).
    #[serde(default)]
    pub spare_node_s: f64,
}

impl SparesRecord {
    /// Whether spares saved the job from a requeue: it was shrunk and gave up a failed node.
    pub fn saved(&self) -> bool {
        self.outcome == SparesOutcome::Shrunk && !self.failed.is_empty()
    }
}

/// The batch step's view of a shrunk job, left by the prolog leader on the batch host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchEnv {
    /// The job.
    pub job_id: u32,
    /// The job's nodes at allocation, in order (what Slurm put in the batch environment).
    pub allocated: Vec<String>,
    /// The nodes it keeps, in the same order.
    pub kept: Vec<String>,
}

/// The most bytes of a [`BatchEnv`] file the plugin reads.
pub const MAX_BATCH_ENV_BYTES: u64 = 1 << 20;

impl BatchEnv {
    /// Where the leader leaves it: `<state_dir>/spares-<job>.json` (the node's state folder).
    pub fn path(state_dir: &Path, job_id: u32) -> PathBuf {
        state_dir.join(format!("spares-{job_id}.json"))
    }

    /// Reads the leader's file.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The file's text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The variables of the batch step to change, from the values Slurm gave (`get`): `Some`
    /// to set, `None` to unset. The node lists and counts of the kept nodes; the per-node lists
    /// (`SLURM_TASKS_PER_NODE`, `SLURM_JOB_CPUS_PER_NODE`) without the entries of the nodes
    /// given up; the job's task count (`SLURM_NTASKS`, `SLURM_NPROCS`: what a bare `srun`, MPI
    /// and torchrun take as the job's size) and GPU count (`SLURM_GPUS`) for the kept nodes.
    /// Where a value cannot be recomputed from what Slurm gave, it is unset, as Slurm's own
    /// resize script does ("We don't have sufficient information to recreate these"), so no
    /// launcher asks for tasks or GPUs on nodes the job no longer has.
    pub fn variables(
        &self,
        get: impl Fn(&str) -> Option<String>,
    ) -> Vec<(&'static str, Option<String>)> {
        let Some(list) = hostlist::compress(&self.kept) else {
            return Vec::new();
        };
        let k = self.kept.len();
        let n = k.to_string();
        let mut out = vec![
            ("SLURM_JOB_NODELIST", Some(list.clone())),
            ("SLURM_NODELIST", Some(list)),
            ("SLURM_JOB_NUM_NODES", Some(n.clone())),
            ("SLURM_NNODES", Some(n)),
        ];
        let keep: Vec<bool> = self
            .allocated
            .iter()
            .map(|a| self.kept.contains(a))
            .collect();
        let kept_counts = |var: &str| -> Option<Vec<u32>> {
            let v = get(var).and_then(|v| expand_counts(&v))?;
            (v.len() == keep.len()).then(|| {
                v.iter()
                    .zip(&keep)
                    .filter(|(_, k)| **k)
                    .map(|(c, _)| *c)
                    .collect()
            })
        };
        let tasks_per_node = kept_counts("SLURM_TASKS_PER_NODE");
        for var in ["SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"] {
            match kept_counts(var) {
                Some(kept) => out.push((var, Some(compress_counts(&kept)))),
                None if var == "SLURM_TASKS_PER_NODE" && get(var).is_some() => {
                    out.push((var, None))
                }
                None => {}
            }
        }
        let per_node = get("SLURM_NTASKS_PER_NODE").and_then(|v| v.trim().parse::<u64>().ok());
        let ntasks = match (per_node, &tasks_per_node) {
            (Some(p), _) if p > 0 => Some(p * k as u64),
            (_, Some(kept)) => Some(kept.iter().map(|c| u64::from(*c)).sum()),
            _ => None,
        };
        for var in ["SLURM_NTASKS", "SLURM_NPROCS"] {
            if get(var).is_some() {
                out.push((var, ntasks.map(|t| t.to_string())));
            }
        }
        if get("SLURM_GPUS").is_some() {
            out.push(("SLURM_GPUS", gpus_for(&get, self.allocated.len(), k)));
        }
        out
    }
}

/// `SLURM_GPUS` (`--gpus=[type:]N`, the job's total) for `kept` of `allocated` nodes: from
/// `SLURM_GPUS_PER_NODE` when it is one `[type:]count`, else the total scaled when it divides
/// evenly among the allocated nodes; `None` (unset) otherwise.
fn gpus_for(
    get: &impl Fn(&str) -> Option<String>,
    allocated: usize,
    kept: usize,
) -> Option<String> {
    let split = |v: &str| -> Option<(String, u64)> {
        let (ty, count) = match v.rsplit_once(':') {
            Some((t, c)) => (format!("{t}:"), c),
            None => (String::new(), v),
        };
        Some((ty, count.trim().parse().ok()?))
    };
    if let Some((ty, per)) = get("SLURM_GPUS_PER_NODE")
        .filter(|v| !v.contains(','))
        .and_then(|v| split(&v))
    {
        return Some(format!("{ty}{}", per * kept as u64));
    }
    let (ty, total) = split(&get("SLURM_GPUS")?)?;
    let allocated = allocated as u64;
    (allocated > 0 && total % allocated == 0)
        .then(|| format!("{ty}{}", total / allocated * kept as u64))
}

/// Slurm's per-node count list (`2(x3),1`) expanded; `None` when it does not parse, is empty,
/// repeats a count zero times or names more than 100,000 entries.
pub fn expand_counts(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let (count, times) = match part.split_once("(x") {
            Some((c, rest)) => (c, rest.strip_suffix(')')?.parse::<usize>().ok()?),
            None => (part, 1),
        };
        let c: u32 = count.parse().ok()?;
        if times == 0 || out.len() + times > 100_000 {
            return None;
        }
        out.extend(std::iter::repeat_n(c, times));
    }
    Some(out)
}

/// The inverse of [`expand_counts`]: runs of one count as `c(xN)`.
pub fn compress_counts(counts: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let c = counts[i];
        let run = counts[i..].iter().take_while(|x| **x == c).count();
        parts.push(if run == 1 {
            c.to_string()
        } else {
            format!("{c}(x{run})")
        });
        i += run;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spares_value_is_a_plain_small_number_and_nothing_else() {
        assert_eq!(parse_spares(Some("2")), Ok(2));
        assert_eq!(parse_spares(Some("0")), Ok(0));
        for bad in [
            None,
            Some(""),
            Some("(null)"),
            Some("-1"),
            Some("+1"),
            Some(" 1"),
            Some("1 "),
            Some("0x1"),
            Some("1e2"),
            Some("1000"),
            Some("١"),
        ] {
            assert!(
                matches!(parse_spares(bad), Err(SparesRefused::NotANumber { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_spares(Some("65")),
            Err(SparesRefused::AboveMax {
                asked: 65,
                allowed: MAX_SPARES
            })
        );
    }

    #[test]
    fn a_request_above_spares_max_is_refused_with_the_limit_named() {
        assert_eq!(allowed(2, 2), Ok(2));
        let e = allowed(3, 2).unwrap_err();
        assert!(e.to_string().contains("at most 2 spare"), "{e}");
        let e = allowed(1, 0).unwrap_err();
        assert!(e.to_string().contains("ask your admin"), "{e}");
    }

    #[test]
    fn disable_job_shrink_is_found_in_the_last_scheduler_parameters_line() {
        assert!(shrink_disabled(
            "SchedulerParameters=sched_interval=2,disable_job_shrink\n"
        ));
        assert!(shrink_disabled("schedulerparameters = DISABLE_JOB_SHRINK"));
        assert!(!shrink_disabled(
            "SchedulerParameters=disable_job_shrink\nSchedulerParameters=sched_interval=2\n"
        ));
        assert!(!shrink_disabled(
            "#SchedulerParameters=disable_job_shrink\nPrologFlags=Alloc\n"
        ));
        assert!(!shrink_disabled(
            "SchedulerParameters=disable_job_shrink_x\n"
        ));
    }

    #[test]
    fn the_batch_steps_variables_name_only_the_kept_nodes() {
        let env = BatchEnv {
            job_id: 7,
            allocated: vec!["n1".into(), "n2".into(), "n3".into(), "n4".into()],
            kept: vec!["n1".into(), "n2".into(), "n4".into()],
        };
        let vars = env.variables(|v| match v {
            "SLURM_TASKS_PER_NODE" => Some("1(x4)".into()),
            "SLURM_JOB_CPUS_PER_NODE" => Some("2,4,8(x2)".into()),
            _ => None,
        });
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .and_then(|(_, v)| v.as_deref())
        };
        assert_eq!(get("SLURM_JOB_NODELIST"), Some("n[1-2,4]"));
        assert_eq!(get("SLURM_NODELIST"), Some("n[1-2,4]"));
        assert_eq!(get("SLURM_JOB_NUM_NODES"), Some("3"));
        assert_eq!(get("SLURM_NNODES"), Some("3"));
        assert_eq!(get("SLURM_TASKS_PER_NODE"), Some("1(x3)"));
        assert_eq!(get("SLURM_JOB_CPUS_PER_NODE"), Some("2,4,8"));
    }

    /// The changes `variables` makes for 4 allocated nodes of which n3 is given up, with the
    /// batch environment `env`.
    fn changes_of(env: &[(&str, &str)]) -> Vec<(&'static str, Option<String>)> {
        let b = BatchEnv {
            job_id: 7,
            allocated: vec!["n1".into(), "n2".into(), "n3".into(), "n4".into()],
            kept: vec!["n1".into(), "n2".into(), "n4".into()],
        };
        b.variables(|v| {
            env.iter()
                .find(|(k, _)| *k == v)
                .map(|(_, x)| (*x).to_string())
        })
    }

    fn change(vars: &[(&'static str, Option<String>)], k: &str) -> Option<Option<String>> {
        vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn an_ntasks_per_node_job_of_four_nodes_shrunk_to_three_asks_for_six_tasks() {
        let vars = changes_of(&[
            ("SLURM_NTASKS", "8"),
            ("SLURM_NPROCS", "8"),
            ("SLURM_NTASKS_PER_NODE", "2"),
            ("SLURM_TASKS_PER_NODE", "2(x4)"),
        ]);
        assert_eq!(change(&vars, "SLURM_NTASKS"), Some(Some("6".into())));
        assert_eq!(change(&vars, "SLURM_NPROCS"), Some(Some("6".into())));
        assert_eq!(
            change(&vars, "SLURM_TASKS_PER_NODE"),
            Some(Some("2(x3)".into()))
        );
    }

    #[test]
    fn a_task_count_without_a_per_node_layout_is_taken_from_the_kept_nodes_tasks() {
        let vars = changes_of(&[
            ("SLURM_NTASKS", "10"),
            ("SLURM_TASKS_PER_NODE", "3(x2),2(x2)"),
        ]);
        assert_eq!(change(&vars, "SLURM_NTASKS"), Some(Some("8".into())));
    }

    #[test]
    fn a_task_count_that_cannot_be_recomputed_is_unset_as_slurms_resize_script_does() {
        let vars = changes_of(&[("SLURM_NTASKS", "8"), ("SLURM_NPROCS", "8")]);
        assert_eq!(change(&vars, "SLURM_NTASKS"), Some(None));
        assert_eq!(change(&vars, "SLURM_NPROCS"), Some(None));
        // Nothing to change where Slurm set nothing.
        assert_eq!(change(&changes_of(&[]), "SLURM_NTASKS"), None);
    }

    #[test]
    fn the_jobs_gpu_count_follows_the_kept_nodes_or_is_unset() {
        let vars = changes_of(&[("SLURM_GPUS", "h100:32"), ("SLURM_GPUS_PER_NODE", "h100:8")]);
        assert_eq!(change(&vars, "SLURM_GPUS"), Some(Some("h100:24".into())));
        let vars = changes_of(&[("SLURM_GPUS", "32")]);
        assert_eq!(change(&vars, "SLURM_GPUS"), Some(Some("24".into())));
        let vars = changes_of(&[("SLURM_GPUS", "30")]);
        assert_eq!(change(&vars, "SLURM_GPUS"), Some(None));
    }

    #[test]
    fn a_per_node_list_that_does_not_match_the_allocation_is_unset_and_a_cpu_list_left_alone() {
        let env = BatchEnv {
            job_id: 7,
            allocated: vec!["n1".into(), "n2".into()],
            kept: vec!["n1".into()],
        };
        let vars = env.variables(|v| match v {
            "SLURM_TASKS_PER_NODE" => Some("1(x3)".into()),
            "SLURM_JOB_CPUS_PER_NODE" => Some("junk".into()),
            _ => None,
        });
        assert_eq!(vars.len(), 5, "{vars:?}");
        assert_eq!(change(&vars, "SLURM_TASKS_PER_NODE"), Some(None));
        assert_eq!(change(&vars, "SLURM_JOB_CPUS_PER_NODE"), None);
    }

    #[test]
    fn counts_expand_and_compress_back() {
        assert_eq!(expand_counts("2(x3),1"), Some(vec![2, 2, 2, 1]));
        assert_eq!(compress_counts(&[2, 2, 2, 1]), "2(x3),1");
        assert_eq!(expand_counts("1(x999999)"), None);
        assert_eq!(expand_counts("a"), None);
        assert_eq!(expand_counts(""), None);
        assert_eq!(expand_counts("1(x0)"), None);
    }

    #[test]
    fn a_job_is_saved_by_spares_only_when_shrunk_past_a_failed_node() {
        let mut r = SparesRecord {
            asked: 1,
            kept: "n[1-3]".into(),
            outcome: SparesOutcome::Shrunk,
            fallback: None,
            failed: vec![],
            released: vec!["n4".into()],
            spare_node_s: 1.0,
        };
        assert!(!r.saved());
        r.failed.push(GivenUp {
            node: "n4".into(),
            checks: vec!["ib.port_state".into()],
        });
        assert!(r.saved());
        r.outcome = SparesOutcome::Requeued;
        assert!(!r.saved());
    }
}
