//! `fabric-run` records: JSON lines, one object per line, each `{"type":..,"v":1,...}`.
//!
//! The wrapper writes them with [`RecordWriter`] (one `write(2)` per line on an `O_APPEND`
//! descriptor, so the ranks of one node can share a file without interleaving), and the root-run
//! epilog reads them back with `fabric_core::record::summarize_records`, which is written for a user-writable spool:
//! no symlinks followed, regular files only, bounded bytes, malformed lines skipped and counted.
//!
//! Every field, with its unit, is documented in `docs/records.md`.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The record schema version carried in every line's `v`.
pub const VERSION: u32 = 1;

/// Where records go when neither `--record` nor [`SPOOL_ENV`] says otherwise.
pub const DEFAULT_SPOOL_ROOT: &str = "/var/spool/fabric-check/jobs";

/// Environment variable that replaces [`DEFAULT_SPOOL_ROOT`] for the wrapper (not for the epilog,
/// which never sees the job's environment).
pub const SPOOL_ENV: &str = "FABRIC_RUN_SPOOL";

/// Environment variable the SPANK plugin sets in every task of a job (`slurm_spank_user_init`)
/// to its `spool_dir=`, so that `fabric-run` writes where the epilog reads with no user
/// configuration. It wins over [`SPOOL_ENV`]; under it the wrapper never makes the job's
/// folder (the prolog made it, as root, for the job's uid). The job's user can set it too: only
/// the wrapper reads it, never the root-run epilog, which reads `spool_dir=` from plugstack.conf.
pub const PLUGIN_SPOOL_ENV: &str = "FABRIC_CHECK_SPOOL_DIR";

/// The file one node's wrappers append to: `<spool_root>/<job_id>/<node>.jsonl`.
///
/// Returns `None` when the job id or node name would escape the spool (empty, `.`/`..`, or
/// containing `/` or a NUL byte): the caller then writes no records rather than a wrong path.
pub fn node_records_path(spool_root: &Path, job_id: &str, node: &str) -> Option<PathBuf> {
    let ok = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\0']);
    (ok(job_id) && ok(node)).then(|| spool_root.join(job_id).join(format!("{node}.jsonl")))
}

/// The file a node's wrappers append their live events to, for the job to read while it runs:
/// `<spool_root>/<job_id>/fabric-run-events-<node>.jsonl` (record lines, today `slow_steps`).
///
/// Written by the wrapper as the job's user, next to its records; never the watch's root-owned
/// notice file ([`crate::notice::notice_path`]). `None` as for [`node_records_path`].
pub fn run_events_path(spool_root: &Path, job_id: &str, node: &str) -> Option<PathBuf> {
    node_records_path(spool_root, job_id, node)
        .map(|p| p.with_file_name(format!("fabric-run-events-{node}.jsonl")))
}

/// Where a checkpoint or restore was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `fabric-run mark checkpoint-begin|checkpoint-end` (or restore) from inside the job.
    Marker,
    /// inotify on `--checkpoint-dir`.
    Dir,
    /// `--checkpoint-regex` / `--restore-regex` on the child's output.
    Regex,
}

/// How a run ended.
///
/// Ordered by how much the value says about *why* a multi-rank run did not succeed, so that the
/// `max` over the ranks of one launch is the launch's outcome: one rank's `failed` explains the
/// others being killed, a `timeout` explains a SIGTERM, and so on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Finished with status 0, passed `--accept-cmd`, before `--deadline`.
    Accepted,
    /// Ended by SIGKILL (OOM killer, Slurm after `KillWait`), or the wrapper vanished.
    Killed,
    /// The wrapper received SIGTERM (Slurm preemption, `scancel`) before the child ended.
    Preempted,
    /// Ended after `--deadline`.
    Timeout,
    /// Non-zero exit, another signal, a failed `--accept-cmd`, or the command could not start.
    Failed,
}

impl Outcome {
    /// Parses the lower-case name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Accepted,
            Self::Killed,
            Self::Preempted,
            Self::Timeout,
            Self::Failed,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }

    /// The lower-case name used in records and the job tag.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Killed => "killed",
            Self::Preempted => "preempted",
            Self::Timeout => "timeout",
            Self::Failed => "failed",
        }
    }
}

/// Fields every record carries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Schema version, [`VERSION`].
    pub v: u32,
    /// Wall-clock time the record was written, Unix seconds.
    pub ts: f64,
    /// Identifies one wrapper invocation: `<node>:<pid>:<start Unix ms>`.
    pub run: String,
    /// `SLURMD_NODENAME`, else the host name.
    pub node: String,
    /// `SLURM_PROCID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// `SLURM_LOCALID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    /// `SLURM_JOB_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// `SLURM_STEP_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// `SLURM_RESTART_COUNT` (0 when unset under Slurm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<u32>,
}

/// The type-specific part of a record; `type` is the tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Body {
    /// The wrapper started (written before the command is spawned).
    StepStart {
        /// The wrapper's process id.
        pid: u32,
        /// The command and its arguments.
        cmd: Vec<String>,
        /// `--deadline` as Unix seconds, if set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<f64>,
        /// `--retries`.
        #[serde(default)]
        retries_max: u32,
    },
    /// One launch of the command ended.
    Attempt {
        /// 1-based attempt number.
        attempt: u32,
        /// Wall time of this attempt, seconds.
        duration_s: f64,
        /// Exit status when it exited.
        exit_code: Option<i32>,
        /// Signal number when a signal ended it.
        signal: Option<i32>,
        /// Whether the wrapper relaunches the command after this attempt.
        retry: bool,
        /// Why it is (or is not) retried, e.g. `exit 1 matched --retry-on`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A checkpoint write.
    Checkpoint {
        /// Seconds from the first write to the last close-after-write (or begin to end marker).
        duration_s: f64,
        /// How it was seen.
        source: Source,
        /// Bytes written, when known (directory watching).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes: Option<u64>,
        /// The attempt during which it happened.
        #[serde(default)]
        attempt: u32,
    },
    /// A checkpoint read (restore).
    Restore {
        /// Seconds from the first read to the last close.
        duration_s: f64,
        /// How it was seen.
        source: Source,
        /// Bytes of the files read, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes: Option<u64>,
        /// The attempt during which it happened.
        #[serde(default)]
        attempt: u32,
    },
    /// A training step ended.
    Step {
        /// The step number, when the job said it (`mark step N` or a capture group).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        n: Option<u64>,
        /// Seconds since the previous step boundary, less checkpoint/restore time in between;
        /// `None` for the first boundary of an attempt (it only starts the clock).
        duration_s: Option<f64>,
        /// Checkpoint and restore seconds subtracted from this interval.
        #[serde(default)]
        ckpt_s: f64,
        /// The attempt during which it happened.
        #[serde(default)]
        attempt: u32,
    },
    /// Accepted inference outputs.
    Output {
        /// Outputs added by this record.
        n: u64,
        /// The attempt during which they were produced.
        #[serde(default)]
        attempt: u32,
    },
    /// A fabric fault the in-job watch told the job of (its notice file,
    /// [`crate::notice`]), seen by the wrapper while it ran. The node is the record's `node`:
    /// a wrapper follows its own node's notice file.
    FabricFault {
        /// The check that failed (`ib.port_state`, ...).
        check: String,
        /// What the watch found.
        #[serde(default)]
        message: String,
        /// When the watch saw it, Unix seconds.
        seen_at_s: u64,
        /// How long into the job (since the prolog) that was, seconds.
        #[serde(default)]
        into_job_s: u64,
        /// Whether the watch drained the node for it (the job keeps running).
        #[serde(default)]
        drained: bool,
        /// The signal `--on-fabric-fault=signal:SIG` sent to the command for it, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sent_signal: Option<i32>,
        /// The attempt running when it was seen (0: before the first).
        #[serde(default)]
        attempt: u32,
    },
    /// Step times regressed within the run: the median of the last `window` steps is over
    /// `factor` times the run's median so far. Evidence for the job and the admin, never a drain.
    SlowSteps {
        /// Median of the last `window` step times, seconds.
        window_median_s: f64,
        /// Median of all step times of the run so far, seconds (to within 1 %).
        run_median_s: f64,
        /// `--slow-step-factor`.
        factor: f64,
        /// `--slow-step-window`: how many recent steps the window holds.
        window: u32,
        /// Step times seen so far in the run.
        steps: u64,
        /// The attempt during which it was flagged.
        #[serde(default)]
        attempt: u32,
    },
    /// The wrapper finished (written last, then the file is synced).
    StepEnd {
        /// Wall time of the whole run, all attempts and backoff, seconds.
        duration_s: f64,
        /// The exit status the wrapper passes on, when the last attempt exited.
        exit_code: Option<i32>,
        /// The signal that ended the last attempt.
        signal: Option<i32>,
        /// The outcome.
        outcome: Outcome,
        /// Attempts made.
        attempts: u32,
        /// Finished before `--deadline` (true when none was set).
        on_time: bool,
        /// `--accept-cmd` result, when it ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        validated: Option<bool>,
        /// Whether the wrapper received SIGTERM during the run.
        #[serde(default)]
        sigterm: bool,
    },
    /// A record type this version does not know (ignored by the reader).
    #[serde(other)]
    Unknown,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Record {
    /// Common fields.
    #[serde(flatten)]
    pub meta: Meta,
    /// Type-specific fields.
    #[serde(flatten)]
    pub body: Body,
}

impl Record {
    /// One JSON line (without the newline), `type` first, then `v` and the common fields.
    pub fn to_line(&self) -> String {
        let body = serde_json::to_string(&self.body).unwrap_or_default();
        let meta = serde_json::to_string(&self.meta).unwrap_or_default();
        // body is `{"type":"<snake_case>"` then `}` or `,<fields>}`; meta is `{<fields>}`.
        let type_end = body.find([',', '}']).unwrap_or(body.len());
        let meta_inner = meta.trim_start_matches('{').trim_end_matches('}');
        format!("{},{}{}", &body[..type_end], meta_inner, &body[type_end..])
    }
}

/// Now as Unix seconds.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Creates the job's spool directory (mode 0700) if missing and checks it is a real directory
/// owned by `uid`: another user may have made it first, or planted a symlink.
fn ensure_job_dir(dir: &Path, uid: u32) -> io::Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    check_job_dir(dir, uid)
}

/// Checks that the job's spool folder `dir` is a real directory owned by `uid` (without making
/// it: under [`PLUGIN_SPOOL_ENV`] the prolog made it).
pub fn check_job_dir(dir: &Path, uid: u32) -> io::Result<()> {
    let md = match std::fs::symlink_metadata(dir) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} does not exist: the job's prolog makes it when the job is checked \
                     (--fabric-check, or mode=always in plugstack.conf)",
                    dir.display()
                ),
            ));
        }
        Err(e) => return Err(e),
    };
    if !md.is_dir() || md.uid() != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory owned by uid {uid}: remove it or ask the admin",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Linux's `O_NOFOLLOW` for this target (`asm-generic/fcntl.h`, and the arm/powerpc overrides).
///
/// Written out so that this crate needs no libc binding: the plugin and the wrapper link it
/// alone. `fabric-core`'s tests check it against rustix's value on every build target.
#[cfg(any(
    target_arch = "arm",
    target_arch = "aarch64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "m68k"
))]
pub const O_NOFOLLOW: i32 = 0o100_000;
/// Linux's `O_NOFOLLOW` for this target (`asm-generic/fcntl.h`; mips and sparc use the same).
#[cfg(not(any(
    target_arch = "arm",
    target_arch = "aarch64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "m68k"
)))]
pub const O_NOFOLLOW: i32 = 0o400_000;

/// Appends `bytes` with one `write(2)` to `path` in the shared spool (mode 0600, `O_NOFOLLOW`,
/// job directory checked as for [`RecordWriter::open_in_spool`]).
pub fn append_in_spool(path: &Path, bytes: &[u8], uid: u32) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        ensure_job_dir(dir, uid)?;
    }
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(O_NOFOLLOW)
        .open(path)?;
    let n = file.write(bytes)?;
    if n != bytes.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short write to {}", path.display()),
        ));
    }
    Ok(())
}

/// Appends records to one file: one `write(2)` per line on an `O_APPEND` descriptor.
///
/// POSIX makes each `O_APPEND` write land at the end of file atomically with respect to other
/// appenders on a local file system, so concurrent wrappers on one node never interleave lines
/// (NFS gives no such promise: keep the spool node-local). Lines are far below any partial-write
/// threshold; a short write is reported, never completed with a second `write` that could land
/// after another process's line.
#[derive(Debug)]
pub struct RecordWriter {
    file: File,
    path: PathBuf,
    meta: Meta,
}

impl RecordWriter {
    /// Opens (creating mode 0600, and the parent directory mode 0700 if missing) `path` for
    /// appending; `meta` is stamped on every record (its `ts` is replaced at each write).
    pub fn open(path: &Path, meta: Meta) -> io::Result<Self> {
        Self::open_with(path, meta, false)
    }

    /// [`RecordWriter::open`] for a file in the shared spool: the job directory must be a real
    /// directory owned by `uid` (another user may have made it first, or planted a symlink) and
    /// the file is opened with `O_NOFOLLOW`, so records never land in someone else's file.
    pub fn open_in_spool(path: &Path, meta: Meta, uid: u32) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            ensure_job_dir(dir, uid)?;
        }
        Self::open_with(path, meta, true)
    }

    /// [`RecordWriter::open_in_spool`] in a folder the prolog made: it must exist already.
    pub fn open_in_prolog_spool(path: &Path, meta: Meta, uid: u32) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            check_job_dir(dir, uid)?;
        }
        Self::open_with(path, meta, true)
    }

    fn open_with(path: &Path, meta: Meta, no_follow: bool) -> io::Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
            && !parent.is_dir()
        {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        let mut opts = OpenOptions::new();
        opts.append(true).create(true).mode(0o600);
        if no_follow {
            opts.custom_flags(O_NOFOLLOW);
        }
        let file = opts.open(path)?;
        Ok(Self {
            file,
            path: path.to_owned(),
            meta,
        })
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one record as one line with a single `write(2)`.
    pub fn write(&mut self, body: Body) -> io::Result<()> {
        let mut meta = self.meta.clone();
        meta.v = VERSION;
        meta.ts = unix_now();
        let mut line = Record { meta, body }.to_line();
        line.push('\n');
        let n = self.file.write(line.as_bytes())?;
        if n != line.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {n} of {} bytes", line.len()),
            ));
        }
        Ok(())
    }

    /// `fdatasync(2)`: the records so far survive a node crash.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            v: VERSION,
            ts: 1.5,
            run: "n1:10:1".into(),
            node: "n1".into(),
            rank: Some(3),
            ..Meta::default()
        }
    }

    #[test]
    fn a_line_starts_with_type_then_version() {
        let r = Record {
            meta: meta(),
            body: Body::Output { n: 2, attempt: 1 },
        };
        let line = r.to_line();
        assert!(
            line.starts_with(r#"{"type":"output","v":1,"ts":1.5,"#),
            "{line}"
        );
        let back: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn a_unit_like_body_still_makes_valid_json() {
        let r = Record {
            meta: meta(),
            body: Body::StepStart {
                pid: 1,
                cmd: vec!["true".into()],
                deadline: None,
                retries_max: 0,
            },
        };
        let back: Record = serde_json::from_str(&r.to_line()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn an_unknown_record_type_decodes_as_unknown() {
        let line = r#"{"type":"future_thing","v":1,"ts":1,"run":"r","node":"n","x":3}"#;
        let back: Record = serde_json::from_str(line).unwrap();
        assert_eq!(back.body, Body::Unknown);
    }

    #[test]
    fn step_end_always_carries_exit_code_and_signal_keys() {
        let r = Record {
            meta: meta(),
            body: Body::StepEnd {
                duration_s: 1.0,
                exit_code: None,
                signal: Some(9),
                outcome: Outcome::Killed,
                attempts: 1,
                on_time: true,
                validated: None,
                sigterm: false,
            },
        };
        let line = r.to_line();
        assert!(line.contains(r#""exit_code":null"#), "{line}");
        assert!(line.contains(r#""signal":9"#), "{line}");
        assert!(line.contains(r#""outcome":"killed""#), "{line}");
    }

    #[test]
    fn the_spool_writer_refuses_a_symlink_and_a_foreign_directory() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::fs::metadata(dir.path()).unwrap().uid();
        let job = dir.path().join("42");
        std::fs::create_dir(&job).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        std::os::unix::fs::symlink(&victim, job.join("n1.jsonl")).unwrap();
        assert!(RecordWriter::open_in_spool(&job.join("n1.jsonl"), meta(), me).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        let e = RecordWriter::open_in_spool(&job.join("n2.jsonl"), meta(), me + 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        let mut w = RecordWriter::open_in_spool(&job.join("n2.jsonl"), meta(), me).unwrap();
        w.write(Body::Output { n: 1, attempt: 1 }).unwrap();
    }

    #[test]
    fn fabric_fault_and_slow_steps_records_read_back_as_written() {
        for body in [
            Body::FabricFault {
                check: "ib.port_state".into(),
                message: "mlx5_0 port 1 is DOWN".into(),
                seen_at_s: 1_700_000_000,
                into_job_s: 42,
                drained: true,
                sent_signal: Some(10),
                attempt: 1,
            },
            Body::SlowSteps {
                window_median_s: 3.0,
                run_median_s: 1.5,
                factor: 1.5,
                window: 20,
                steps: 412,
                attempt: 1,
            },
        ] {
            let r = Record { meta: meta(), body };
            let line = r.to_line();
            let back: Record = serde_json::from_str(&line).unwrap();
            assert_eq!(back, r, "{line}");
        }
        let line = Record {
            meta: meta(),
            body: Body::FabricFault {
                check: "c".into(),
                message: "m".into(),
                seen_at_s: 1,
                into_job_s: 0,
                drained: false,
                sent_signal: None,
                attempt: 0,
            },
        }
        .to_line();
        assert!(
            line.starts_with(r#"{"type":"fabric_fault","v":1,"#),
            "{line}"
        );
        assert!(!line.contains("sent_signal"), "{line}");
    }

    #[test]
    fn the_events_file_sits_next_to_the_records_and_never_escapes_the_spool() {
        let root = Path::new("/spool");
        assert_eq!(
            run_events_path(root, "42", "n1"),
            Some(PathBuf::from("/spool/42/fabric-run-events-n1.jsonl"))
        );
        assert_eq!(run_events_path(root, "..", "n1"), None);
        assert_eq!(run_events_path(root, "42", "a/b"), None);
    }

    #[test]
    fn a_spool_path_never_escapes_the_spool_root() {
        let root = Path::new("/spool");
        assert_eq!(
            node_records_path(root, "42", "n1"),
            Some(PathBuf::from("/spool/42/n1.jsonl"))
        );
        assert_eq!(node_records_path(root, "..", "n1"), None);
        assert_eq!(node_records_path(root, "42", "a/b"), None);
        assert_eq!(node_records_path(root, "", "n1"), None);
    }
}
