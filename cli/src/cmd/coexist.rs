//! `fabric-check epilog-slurmctld -- PROGRAM [ARGS]`: runs another tool's `EpilogSlurmctld`
//! (Princeton's jobstats' `slurmctldepilog.sh`) so that its wholesale `AdminComment` write and
//! our tag both end up in the accounting database, byte for byte (see
//! [`fabric_core::coexist`] and `docs/operations.md`, "Next to jobstats").
//!
//! The program runs with its environment as slurmctld gave it, plus a private folder first on
//! its `PATH` holding a `sacctmgr` that is `fabric-check sacctmgr-shim`: a write of one job's
//! `AdminComment` waits for the job's epilogs, keeps our segment and is recorded; every other
//! `sacctmgr` call goes to the real one unchanged. After the program, once the job's nodes have finished their epilogs, the
//! database copy is checked and repaired. Every loss found is logged, on stderr and to syslog
//! (tag `fabric-check`): slurmctld keeps no output of an `EpilogSlurmctld`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use fabric_base::exec::{run_bounded, safe_command};
use fabric_core::coexist::{self, AccountingDb, Captured, Reconciled};
use fabric_core::slurm::{self, Sacct};

/// Where the shim finds its capture folder.
const SHIM_DIR_ENV: &str = "FABRIC_CHECK_SHIM_DIR";
/// The file the shim records the other tool's write in.
const CAPTURED: &str = "captured.json";

/// Arguments of `fabric-check epilog-slurmctld`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The folder of the real `scontrol`, `squeue`, `sacct` and `sacctmgr`.
    #[arg(long, default_value = "/usr/bin")]
    pub slurm_bin: PathBuf,
    /// Longest wait for the job's nodes to finish their epilogs (our tag is written there).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub wait_epilogs: Duration,
    /// Looks at the database copy after the repair (a late job-complete record can overwrite it),
    /// this far apart.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub check_every: Duration,
    /// How many such looks.
    #[arg(long, default_value_t = 3)]
    pub checks: u32,
    /// Longest run of the program; it is killed after.
    #[arg(long, default_value = "300s", value_parser = humantime::parse_duration)]
    pub program_timeout: Duration,
    /// Longest a read of the database copy (`sacct`) may take; at the limit it is killed.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub sacct_timeout: Duration,
    /// The other tool's EpilogSlurmctld program and its arguments.
    #[arg(last = true, required = true)]
    pub program: Vec<String>,
}

/// Arguments of `fabric-check sacctmgr-shim` (the `sacctmgr` the program sees).
#[derive(Debug, clap::Args)]
pub struct ShimArgs {
    /// The folder of the real `sacctmgr`.
    #[arg(long, default_value = "/usr/bin")]
    pub slurm_bin: PathBuf,
    /// Longest wait for the job's nodes to finish their epilogs before the write.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub wait_epilogs: Duration,
    /// Longest a read of the database copy (`sacct`) may take; at the limit it is killed.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub sacct_timeout: Duration,
    /// `sacctmgr`'s own arguments.
    #[arg(last = true)]
    pub args: Vec<String>,
}

/// The database copy through the real Slurm commands.
struct SlurmDb {
    bin: PathBuf,
    /// Its reads, through the one door to accounting.
    sacct: Sacct,
    /// The other tool's own `sacctmgr` arguments; a write replaces the value of the word at `at`
    /// (its `AdminComment=`).
    line: Vec<String>,
    /// Where.
    at: usize,
}

/// The real `sacct` of `slurm_bin`, with a scrubbed environment (slurmctld runs this as root).
fn db_sacct(slurm_bin: &Path, timeout: Duration) -> Sacct {
    Sacct {
        program: slurm_bin.join("sacct"),
        timeout,
        inherit_env: false,
    }
}

impl AccountingDb for SlurmDb {
    fn read(&self, job: &str) -> Result<String, String> {
        // AdminComment last: it may hold the separator. The job is addressed as the other tool
        // did (`N`, or `<ArrayJobId>_<TaskId>` as jobstats does for array tasks).
        let text = self
            .sacct
            .text(
                &[
                    "-n",
                    "-P",
                    "-X",
                    "-j",
                    job,
                    "-o",
                    "JobIDRaw,JobID,AdminComment",
                ],
                &[],
            )
            .map_err(|e| e.to_string())?;
        Ok(slurm::comment_of_named_job(&text, job)
            .map(|c| c.text)
            .unwrap_or_default())
    }

    fn write(&self, _job: &str, text: &str) -> Result<(), String> {
        let mut args = self.line.clone();
        let key_len = "AdminComment=".len();
        args[self.at] = format!("{}{text}", &args[self.at][..key_len]);
        let mut c = safe_command(self.bin.join("sacctmgr"));
        c.args(&args);
        let done = run_bounded(c, None, Duration::from_secs(30)).map_err(|e| e.to_string())?;
        if done.status.success() {
            Ok(())
        } else {
            Err(format!("sacctmgr failed: {}", done.stderr_text().trim()))
        }
    }
}

/// What the shim leaves for the wrapper: the other tool's write, and its own command line (the
/// repair writes with it, so the job is addressed exactly as the tool addressed it).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ShimRecord {
    captured: Captured,
    line: Vec<String>,
    at: usize,
}

/// Says `msg` on stderr and to syslog (`logger`, as jobstats' own script does): slurmctld keeps
/// no output of an `EpilogSlurmctld` in its log.
fn say(msg: &str) {
    let line = format!("fabric-check epilog-slurmctld: {msg}");
    eprintln!("{line}");
    let logger = Path::new("/usr/bin/logger");
    if logger.exists() {
        let mut c = safe_command(logger);
        c.args(["-t", "fabric-check", "--", &line]);
        let _ = run_bounded(c, None, Duration::from_secs(5));
    }
}

/// `fabric-check sacctmgr-shim -- ARGS`: a write of one job's `AdminComment` keeps our segment
/// and is recorded; anything else runs the real `sacctmgr` unchanged.
pub fn shim(args: ShimArgs) -> anyhow::Result<i32> {
    let real = args.slurm_bin.join("sacctmgr");
    let Some((job, value, at)) = coexist::parse_admin_comment_write(&args.args) else {
        let status = Command::new(&real)
            .args(&args.args)
            .status()
            .with_context(|| format!("cannot run {}", real.display()))?;
        return Ok(status.code().unwrap_or(1));
    };
    // Our epilog writes the database copy: read and write after it, never around it.
    wait_for_epilogs(&args.slurm_bin, &job, args.wait_epilogs);
    let db = SlurmDb {
        bin: args.slurm_bin.clone(),
        sacct: db_sacct(&args.slurm_bin, args.sacct_timeout),
        line: args.args.clone(),
        at,
    };
    let captured = coexist::shim_write(&db, &job, &value, &|l| say(l)).map_err(|e| anyhow!(e))?;
    if let Some(dir) = std::env::var_os(SHIM_DIR_ENV) {
        let path = Path::new(&dir).join(CAPTURED);
        let record = ShimRecord {
            captured,
            line: args.args,
            at,
        };
        std::fs::write(&path, serde_json::to_vec(&record)?)
            .with_context(|| format!("cannot record the write in {}", path.display()))?;
    }
    Ok(0)
}

/// Makes the private folder with the `sacctmgr` the program sees.
fn shim_dir(job: &str, slurm_bin: &Path, wait: Duration) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let exe = exe.to_str().filter(|e| !e.contains('\'')).ok_or_else(|| {
        anyhow!("this program's path {exe:?} cannot be quoted for a shell script")
    })?;
    let bin = slurm_bin
        .to_str()
        .filter(|b| !b.contains('\''))
        .ok_or_else(|| anyhow!("--slurm-bin {slurm_bin:?} cannot be quoted"))?;
    let dir = std::env::temp_dir().join(format!(
        "fabric-check-epilog-slurmctld.{job}.{}",
        std::process::id()
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot make {}", dir.display()))?;
    let shim = dir.join("sacctmgr");
    let mut f = std::fs::File::create(&shim)?;
    writeln!(
        f,
        "#!/bin/sh\n# fabric-check: keeps the fabric-check segment of AdminComment\n\
         exec '{exe}' sacctmgr-shim --slurm-bin '{bin}' --wait-epilogs {}ms -- \"$@\"",
        wait.as_millis()
    )?;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Whether some node still runs an epilog of `job` (squeue lists, for a completing job, only
/// the nodes not yet done).
fn epilogs_running(bin: &Path, job: &str) -> bool {
    let mut c = safe_command(bin.join("squeue"));
    c.args(["-h", "-j", job, "-t", "all", "-o", "%T|%N"]);
    let Ok(done) = run_bounded(c, None, Duration::from_secs(10)) else {
        return false;
    };
    done.stdout_text().lines().any(|l| {
        l.split_once('|')
            .is_some_and(|(state, nodes)| state == "COMPLETING" && !nodes.trim().is_empty())
    })
}

/// Waits, at most `limit`, until no node of `job` is still in its epilog.
fn wait_for_epilogs(bin: &Path, job: &str, limit: Duration) {
    let end = Instant::now() + limit;
    while epilogs_running(bin, job) {
        if Instant::now() >= end {
            say(&format!(
                "job {job}: nodes still in their epilogs after {} s; going on",
                limit.as_secs()
            ));
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Runs `program` (its environment plus `path_front` on `PATH`), killed past `limit`.
fn run_program(program: &[String], path_front: Option<&Path>, limit: Duration) -> i32 {
    let mut c = Command::new(&program[0]);
    c.args(&program[1..]);
    if let Some(front) = path_front {
        // slurmctld may give no PATH: the shell's own default then.
        let path = std::env::var("PATH").unwrap_or_else(|_| {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
        });
        c.env("PATH", format!("{}:{path}", front.display()));
        c.env(SHIM_DIR_ENV, front);
    }
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            say(&format!("cannot run {}: {e}", program[0]));
            return 127;
        }
    };
    let end = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return s.code().unwrap_or(1),
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                say(&format!(
                    "{} ran past {} s and was killed",
                    program[0],
                    limit.as_secs()
                ));
                return 124;
            }
        }
    }
}

/// `fabric-check epilog-slurmctld -- PROGRAM [ARGS]`: returns the program's exit status.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let job = std::env::var("SLURM_JOB_ID")
        .ok()
        .filter(|j| !j.is_empty() && j.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| anyhow!("SLURM_JOB_ID is not set: run as slurm.conf's EpilogSlurmctld"))?;
    let dir = match shim_dir(&job, &args.slurm_bin, args.wait_epilogs) {
        Ok(d) => Some(d),
        Err(e) => {
            say(&format!(
                "job {job}: {e:#}; {} runs as is, and may erase the fabric-check tag",
                args.program[0]
            ));
            None
        }
    };
    let code = run_program(&args.program, dir.as_deref(), args.program_timeout);
    let Some(dir) = dir else { return Ok(code) };
    let record: Option<ShimRecord> = std::fs::read(dir.join(CAPTURED))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let _ = std::fs::remove_dir_all(&dir);
    let Some(record) = record else {
        say(&format!(
            "job {job}: {} wrote no AdminComment (or its write failed); nothing to keep",
            args.program[0]
        ));
        return Ok(code);
    };
    wait_for_epilogs(&args.slurm_bin, &job, args.wait_epilogs);
    let db = SlurmDb {
        bin: args.slurm_bin.clone(),
        sacct: db_sacct(&args.slurm_bin, args.sacct_timeout),
        line: record.line,
        at: record.at,
    };
    let checks = vec![args.check_every; args.checks as usize];
    match coexist::reconcile(&db, &record.captured, &checks, &|l| say(l)) {
        Reconciled::Intact => {}
        Reconciled::Repaired(n) => say(&format!(
            "job {job}: AdminComment repaired ({n} write(s)); both segments kept"
        )),
        Reconciled::Lost(why) => say(&format!("{why}; see docs/operations.md (Next to jobstats)")),
    }
    Ok(code)
}
