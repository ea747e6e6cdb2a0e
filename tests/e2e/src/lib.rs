//! Helpers shared by the end-to-end tests, which run against the project's real Slurm testbed
//! (`scripts/testbed up`): real slurmctld, four slurmd virtual nodes, slurmdbd with MariaDB, munge.
//!
//! The tests share one cluster, so they run one at a time (`--test-threads=1`, as `scripts/test`
//! does) and each leaves the cluster as it found it (nodes resumed, plugstack restored).
//!
//! The same tests run against the clusters of the Slurm version matrix (`scripts/matrix`, Slurm
//! in a Debian root), which `scripts/matrix env SUITE` points them at:
//!
//! - `FABRIC_TESTBED_DIR`: the cluster's state folder (`etc/slurm.conf`, `bin/`, `log/`, ...),
//!   the same path inside the cluster's root and out;
//! - `FABRIC_TESTBED_EXEC`: words put before every Slurm command (run it inside the root);
//! - `FABRIC_TESTBED_SCRIPT`: words that replace `scripts/testbed` (`node`, `plugstack`);
//! - `FABRIC_TESTBED_JOB_UID`: the unprivileged user jobs run as (the folders a job writes to
//!   are given to it).
//!
//! On the host testbed (none of these set) `srun`, `sbatch` and `salloc` run as the testbed's
//! unprivileged user `fabric` ([`HOST_JOB_UID`]) through `scripts/testbed exec`: no test's job
//! runs as root, so every owner check of the plugin is exercised.
//!
//! Expectations that differ between Slurm releases read [`Testbed::slurm_version`].

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fabric_proto::job_state::JobState;

/// The uid of the host testbed's job user `fabric` (`scripts/testbed up` creates it; the same
/// uid as the matrix clusters' job user).
pub const HOST_JOB_UID: u32 = 1500;

/// The running testbed.
#[derive(Debug, Clone)]
pub struct Testbed {
    /// Repository root.
    pub repo: PathBuf,
    /// The testbed's state folder.
    pub dir: PathBuf,
    /// Its `slurm.conf`.
    pub slurm_conf: PathBuf,
    /// Words before every command (`FABRIC_TESTBED_EXEC`); empty for the host testbed.
    exec: Vec<String>,
    /// The control script and its first words (`FABRIC_TESTBED_SCRIPT`, or `scripts/testbed`).
    script: Vec<String>,
    /// The job user's uid when jobs do not run as root (`FABRIC_TESTBED_JOB_UID`).
    job_uid: Option<u32>,
}

fn words(var: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

impl Testbed {
    /// Finds the testbed and checks that slurmctld answers; fails with what to run otherwise.
    pub fn get() -> Testbed {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .expect("repo root");
        let dir = std::env::var_os("FABRIC_TESTBED_DIR")
            .map_or_else(|| repo.join(".testbed"), PathBuf::from);
        let mut script = words("FABRIC_TESTBED_SCRIPT");
        if script.is_empty() {
            script.push(repo.join("scripts/testbed").display().to_string());
        }
        let mut job_uid = std::env::var("FABRIC_TESTBED_JOB_UID").ok().map(|u| {
            u.parse()
                .unwrap_or_else(|_| panic!("FABRIC_TESTBED_JOB_UID={u:?} is not a uid"))
        });
        let mut exec = words("FABRIC_TESTBED_EXEC");
        if exec.is_empty() && std::env::var_os("FABRIC_TESTBED_DIR").is_none() {
            // The host testbed: jobs run as its unprivileged user, as on the matrix's clusters.
            exec = vec![script[0].clone(), "exec".to_owned()];
            job_uid = job_uid.or(Some(HOST_JOB_UID));
        }
        let tb = Testbed {
            slurm_conf: dir.join("etc/slurm.conf"),
            repo,
            dir,
            exec,
            script,
            job_uid,
        };
        // Batch jobs write their output here (see `Testbed::sbatch`), never into a checkout.
        std::fs::create_dir_all(tb.jobs_dir()).expect("the testbed's jobs folder");
        let ping = tb.cmd("scontrol", &["ping"]);
        assert!(
            ping.status.success(),
            "the Slurm testbed is not up: run `scripts/testbed up` (as root) first, or \
             `scripts/matrix up SUITE` and `eval \"$(scripts/matrix env SUITE)\"`\n{}{}",
            String::from_utf8_lossy(&ping.stdout),
            String::from_utf8_lossy(&ping.stderr)
        );
        tb
    }

    /// The uid the tests' jobs run as; `None` when they run as whoever runs the tests.
    pub fn job_uid(&self) -> Option<u32> {
        self.job_uid
    }

    /// Runs a Slurm (or any) command against this testbed, bounded to 120 s.
    pub fn cmd(&self, program: &str, args: &[&str]) -> Output {
        self.cmd_env(program, args, &[])
    }

    /// Like [`Testbed::cmd`] with extra environment variables.
    pub fn cmd_env(&self, program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = Command::new("timeout");
        c.arg("120")
            .args(&self.exec)
            .arg(program)
            .args(args)
            .env("SLURM_CONF", &self.slurm_conf);
        c.current_dir(std::env::temp_dir()).stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
    }

    /// Runs a command that must succeed and returns its stdout.
    pub fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.cmd(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Where batch jobs write their output: `jobs/` in the testbed's folder.
    pub fn jobs_dir(&self) -> PathBuf {
        self.dir.join("jobs")
    }

    /// `--output=<jobs_dir>/slurm-%j.out` unless ARGS name an output already.
    fn output_arg(&self, args: &[&str]) -> Option<String> {
        let named = args.iter().any(|a| {
            *a == "-o" || a.starts_with("--output") || (a.starts_with("-o") && a.len() > 2)
        });
        (!named).then(|| format!("--output={}/slurm-%j.out", self.jobs_dir().display()))
    }

    /// `sbatch --parsable --wait ARGS`: submits, waits for the end, returns the job id. The
    /// job's output goes to [`Testbed::jobs_dir`] unless ARGS name one.
    pub fn sbatch_wait(&self, args: &[&str]) -> u32 {
        let output = self.output_arg(args);
        let mut all = vec!["--parsable", "--wait"];
        all.extend(output.as_deref());
        all.extend_from_slice(args);
        let out = self.cmd("sbatch", &all);
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .split(';')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "sbatch {all:?} gave no job id ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    }

    /// `sbatch --parsable ARGS` without waiting (output as for [`Testbed::sbatch_wait`]).
    pub fn sbatch(&self, args: &[&str]) -> u32 {
        let output = self.output_arg(args);
        let mut all = vec!["--parsable"];
        all.extend(output.as_deref());
        all.extend_from_slice(args);
        let text = self.ok("sbatch", &all);
        text.trim()
            .split(';')
            .next()
            .and_then(|s| s.parse().ok())
            .expect("job id")
    }

    /// The slurmd log of one virtual node.
    pub fn slurmd_log(&self, node: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("log/slurmd-{node}.log"))).unwrap_or_default()
    }

    /// Lines of the node's slurmd log that mention `job=<id> `.
    pub fn prolog_lines(&self, node: &str, job: u32) -> Vec<String> {
        let needle = format!("job={job} ");
        self.slurmd_log(node)
            .lines()
            .filter(|l| l.contains(&needle))
            .map(str::to_owned)
            .collect()
    }

    /// Pids of the four slurmd daemons (from their pid files) that are alive.
    pub fn live_slurmds(&self) -> Vec<u32> {
        (1..=4)
            .filter_map(|i| {
                std::fs::read_to_string(self.dir.join(format!("run/slurmd-n{i}.pid"))).ok()
            })
            .filter_map(|p| p.trim().parse().ok())
            .filter(|pid: &u32| Path::new(&format!("/proc/{pid}")).exists())
            .collect()
    }

    /// The Slurm release of the cluster as (major, minor), from `scontrol --version`.
    pub fn slurm_version(&self) -> (u32, u32) {
        let text = self.ok("scontrol", &["--version"]);
        let v = text.split_whitespace().nth(1).unwrap_or_default();
        let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
        match (parts.next().flatten(), parts.next().flatten()) {
            (Some(major), Some(minor)) => (major, minor),
            _ => panic!("scontrol --version printed no version: {text:?}"),
        }
    }

    /// A fresh folder in the testbed's state folder that the job user may write to (jobs write
    /// their output and marker files there; the tests read them).
    pub fn work_dir(&self, name: &str) -> PathBuf {
        let d = self.dir.join(format!("work-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create the work folder");
        if let Some(uid) = self.job_uid {
            let st = Command::new("chown")
                .arg(format!("{uid}:{uid}"))
                .arg(&d)
                .status()
                .expect("run chown");
            assert!(st.success(), "chown {uid} {}", d.display());
        }
        d
    }

    /// `scripts/testbed ARGS` (or the matrix cluster's counterpart).
    pub fn script(&self, args: &[&str]) -> Result<()> {
        let out = Command::new(&self.script[0])
            .args(&self.script[1..])
            .args(args)
            .env("FABRIC_TESTBED_DIR", &self.dir)
            .output()
            .context("run scripts/testbed")?;
        if !out.status.success() {
            bail!(
                "scripts/testbed {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Node state and reason as `sinfo` reports them.
    pub fn node_state(&self, node: &str) -> (String, String) {
        let out = self.ok("sinfo", &["-h", "-N", "-n", node, "-o", "%T|%E"]);
        let line = out.lines().next().unwrap_or_default();
        let (s, r) = line.split_once('|').unwrap_or((line, ""));
        (s.to_owned(), r.to_owned())
    }

    /// Resumes every drained or down node, whatever the reason (test cleanup).
    pub fn resume_all(&self) {
        for n in ["n1", "n2", "n3", "n4"] {
            let (state, _) = self.node_state(n);
            if state.contains("drain") || state.contains("down") || state.contains("fail") {
                let _ = self.cmd(
                    "scontrol",
                    &["update", &format!("NodeName={n}"), "State=RESUME"],
                );
            }
        }
    }

    /// The job's `AdminComment` from accounting (the job record, not its steps).
    pub fn admin_comment(&self, job: u32) -> String {
        let out = self.ok(
            "sacct",
            &[
                "-n",
                "-P",
                "-X",
                "-j",
                &job.to_string(),
                "-o",
                "AdminComment",
            ],
        );
        out.lines().next().unwrap_or_default().to_owned()
    }
}

/// Polls `f` until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The text of the job tag's segment after its marker, as an admin's standard tools read it:
/// the live form as it stands (JSON, then whatever follows it), the database form
/// (`b32:` + lower-case base32) decoded by coreutils' `base32 -d` after `tr a-z A-Z`.
pub fn tag_text(comment: &str) -> Option<String> {
    let at = comment.find("fabric-check/v1 ")?;
    let rest = &comment[at + "fabric-check/v1 ".len()..];
    let Some(encoded) = rest.strip_prefix("b32:") else {
        return Some(rest.to_owned());
    };
    let encoded = encoded.split_whitespace().next().unwrap_or_default();
    let mut child = Command::new("base32")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    use std::io::Write;
    child
        .stdin
        .take()?
        .write_all(encoded.to_ascii_uppercase().as_bytes())
        .ok()?;
    let out = child.wait_with_output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The tag of one `AdminComment` (of job `job`, for the message), decoded by a standard parser
/// as one whole JSON document (our segment is the field's last, so nothing may follow the JSON).
pub fn strict_tag(job: &str, comment: &str) -> serde_json::Value {
    let text = tag_text(comment).unwrap_or_else(|| panic!("job {job}: no tag in {comment:?}"));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("job {job}: not one JSON document ({e}): {text}"))
}

/// `sacct -n -P -X -j JOBS -o FIELDS`, each row split into its fields; the last field (put
/// `AdminComment` there) keeps any `|` it holds.
pub fn sacct_rows(tb: &Testbed, jobs: &str, fields: &[&str]) -> Vec<Vec<String>> {
    tb.ok(
        "sacct",
        &["-n", "-P", "-X", "-j", jobs, "-o", &fields.join(",")],
    )
    .lines()
    .map(|l| {
        l.splitn(fields.len(), '|')
            .map(str::to_owned)
            .collect::<Vec<_>>()
    })
    .filter(|row| row.len() == fields.len())
    .collect()
}

/// Submits a het job of two components, one node then two, each `sleep 1` with the check.
pub fn sbatch_het_one_then_two(tb: &Testbed) -> u32 {
    tb.sbatch(&[
        "-N1",
        "--fabric-check",
        "--wrap",
        "sleep 1",
        ":",
        "-N2",
        "--fabric-check",
        "--wrap",
        "sleep 1",
    ])
}

/// The job's tag decoded from accounting, if present and readable (either form; JSON that an
/// older release let sacctmgr mangle, backticks for quotes, too).
pub fn job_tag(tb: &Testbed, job: u32) -> Option<serde_json::Value> {
    let text = tag_text(&tb.admin_comment(job))?;
    let json = if text.starts_with("{`") {
        text.replace('`', "\"")
    } else {
        text
    };
    serde_json::Deserializer::from_str(&json)
        .into_iter::<serde_json::Value>()
        .next()?
        .ok()
}

/// Waits until `sacct` shows the job in a final state; returns that state.
pub fn wait_job_end(tb: &Testbed, job: u32, timeout: Duration) -> Option<String> {
    wait_for(timeout, || {
        let s = tb.ok(
            "sacct",
            &["-n", "-P", "-X", "-j", &job.to_string(), "-o", "State"],
        );
        let s = s.trim().to_owned();
        JobState::parse(&s).has_ended().then_some(s)
    })
}

/// Waits until the job's accounting record has a readable tag matching `pred`.
pub fn wait_tag(
    tb: &Testbed,
    job: u32,
    timeout: Duration,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> Option<serde_json::Value> {
    wait_for(timeout, || job_tag(tb, job).filter(|t| pred(t)))
}

/// Restores every virtual node's healthy fixture, clears their saved counter state, resumes
/// every node and reinstalls the normal plugstack (test cleanup).
pub fn heal_all(tb: &Testbed) {
    for n in ["n1", "n2", "n3", "n4"] {
        tb.script(&["node", n, "ib8-healthy"])
            .expect("heal fixture");
        let _ = std::fs::remove_file(tb.dir.join(format!("state/{n}/last.json")));
        let _ = std::fs::remove_file(tb.dir.join(format!("state/{n}/known.json")));
    }
    tb.resume_all();
}

impl Testbed {
    /// Runs `f`, then restores a healthy cluster (`heal_all`) whether or not `f` panicked.
    pub fn healing(&self, f: impl FnOnce()) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        heal_all(self);
        if let Err(p) = r {
            std::panic::resume_unwind(p);
        }
    }

    /// Runs `f` with a modified plugstack line (restarting the slurmds), then restores the normal
    /// plugstack and a healthy cluster, also when `f` panics. `so` replaces the plugin, `probe`
    /// the `probe=` binary, and `extra` words are appended.
    pub fn with_plugstack(
        &self,
        so: Option<&Path>,
        probe: Option<&Path>,
        extra: &str,
        f: impl FnOnce(),
    ) {
        self.script(&["plugstack", "plugin"])
            .expect("normal plugstack");
        let normal =
            std::fs::read_to_string(self.dir.join("etc/plugstack.conf")).expect("read plugstack");
        let mut words: Vec<String> = normal.split_whitespace().map(str::to_owned).collect();
        if let Some(so) = so {
            words[1] = so.display().to_string();
        }
        if let Some(p) = probe {
            for w in &mut words {
                if w.starts_with("probe=") {
                    *w = format!("probe={}", p.display());
                }
            }
        }
        words.extend(extra.split_whitespace().map(str::to_owned));
        let conf = self.dir.join("etc/plugstack.test.conf");
        std::fs::write(&conf, words.join(" ") + "\n").expect("write plugstack");
        self.script(&["plugstack", conf.to_str().expect("utf-8 path")])
            .expect("install plugstack");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        self.script(&["plugstack", "plugin"])
            .expect("restore plugstack");
        heal_all(self);
        if let Err(p) = r {
            std::panic::resume_unwind(p);
        }
    }
}
