//! The job-step invocation: how the SPANK plugin runs `fabric-check prolog|epilog|step-end`, and
//! how the child answers.
//!
//! The plugin builds an [`Invocation`] and spawns `<probe> <argv>` with [`Invocation::to_argv`];
//! the child parses the same words back with [`Invocation::parse`]. The child's answer is its
//! exit status, one of [`JobStepExit`], repeated as its decision line ([`JobStepExit::line`]):
//! slurmstepd may reap the child before the plugin can (`wait3`), and the plugin then reads the
//! line instead of the lost status. Both sides use these types, never literals.

use std::fmt;
use std::io;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::fabric_option::{FabricMode, InvalidFabricMode};

/// The only `PATH` a child of the plugin or of the job step sees.
pub const SAFE_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// Spawns `cmd`, trying again every 5 ms while its program is busy (`ETXTBSY`: open for writing
/// somewhere, as while an install copies it in place, or in a process that forked between another
/// thread's write of it and its own `exec`), until `limit` after `start`. The plugin's child, and
/// every command `fabric_base::exec` and the drill's injectors run, start through this.
pub fn spawn_retrying_busy(
    cmd: &mut Command,
    start: Instant,
    limit: Duration,
) -> io::Result<Child> {
    loop {
        match cmd.spawn() {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// The marker of the child's decision line (`fabric-check-exit=N`).
pub const EXIT_MARKER: &str = "fabric-check-exit=";

/// The most bytes of the child's output the plugin keeps and relays to the slurmd log: the
/// first ones. A line the child writes past them is lost, so every line before root's own
/// (the tag write, the drain) is bounded, whatever the job's files name.
pub const MAX_CHILD_OUTPUT: usize = 64 * 1024;

/// Slurm's id of the batch script's step (`SLURM_BATCH_SCRIPT`, `0xfffffffb`): its end is the
/// job's last moment as `RUNNING` (slurmstepd reports the batch script complete only after its
/// `slurm_spank_exit`), so `step-end` there writes the summary of every step of its node.
pub const BATCH_STEP_ID: u32 = 0xffff_fffb;

/// Step ids from here up are Slurm's special steps (batch script, extern, interactive, pending):
/// none of them is a parallel step (no collective checks one, no `step-end` but the batch
/// script's runs at one).
pub const FIRST_SPECIAL_STEP_ID: u32 = 0xffff_fff0;

/// The job step's TCP windows, kept where they always were: see [`crate::ports`].
pub use crate::ports;

/// Which job script the child runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Script {
    /// Before the job: probe, policy, rendezvous, tag.
    Prolog,
    /// After the job: counter rises, records, run summary.
    Epilog,
    /// At the end of one step, on the step's first node (slurmstepd's `slurm_spank_exit`, as
    /// root, the job still running): that node's run summary into the live tag.
    StepEnd,
    /// The in-job watch: started by the prolog (root, its own process group), it samples the
    /// node until the epilog stops it, and acts on a fault that appears while the job runs.
    Watch,
}

impl Script {
    /// The subcommand name: `prolog`, `epilog` or `step-end`.
    pub fn as_str(self) -> &'static str {
        match self {
            Script::Prolog => "prolog",
            Script::Epilog => "epilog",
            Script::StepEnd => "step-end",
            Script::Watch => "watch",
        }
    }
}

impl fmt::Display for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the job step's child answers the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStepExit {
    /// The job may run on this node (also: the check could not look, which is not a failure).
    Proceed,
    /// This node failed its check and drained itself: the plugin fails the prolog, and Slurm
    /// requeues the job elsewhere.
    Drained,
}

impl JobStepExit {
    /// The process exit code.
    pub fn code(self) -> i32 {
        match self {
            JobStepExit::Proceed => 0,
            JobStepExit::Drained => 2,
        }
    }

    /// The answer an exit code means, if it is one of ours.
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 => Some(JobStepExit::Proceed),
            2 => Some(JobStepExit::Drained),
            _ => None,
        }
    }

    /// The decision line the child prints: `fabric-check-exit=N`.
    pub fn line(self) -> String {
        format!("{EXIT_MARKER}{}", self.code())
    }

    /// The last decision line in `output`, if any.
    pub fn from_output(output: &str) -> Option<Self> {
        output
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(EXIT_MARKER))
            .and_then(|c| c.trim().parse().ok())
            .and_then(Self::from_code)
    }

    /// Whether `line` is a decision line (the plugin keeps those out of the slurmd log).
    pub fn is_line(line: &str) -> bool {
        line.starts_with(EXIT_MARKER)
    }
}

/// `fabric-check prolog|epilog|step-end --job-id N --node X --nodes L --option M [--job-uid U]
/// [--step-id S] -- WORDS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Prolog or epilog.
    pub script: Script,
    /// The job id.
    pub job_id: u32,
    /// This node's name (`SLURMD_NODENAME`).
    pub node: String,
    /// The job's nodes, as a Slurm hostlist (`SLURM_JOB_NODELIST`).
    pub nodes: String,
    /// The job's `--fabric-check` value.
    pub option: FabricMode,
    /// The job owner's uid: `fabric-run` records must belong to it.
    pub job_uid: Option<u32>,
    /// The step that ended (`S_JOB_STEPID`), for `step-end`.
    pub step_id: Option<u32>,
    /// The spare nodes the job asked for (`--fabric-check-spares`, checked against
    /// `spares_max=` by the plugin; the job step checks again); 0 when none.
    pub spares: u32,
    /// The plugin's `plugstack.conf` words, after `--`.
    pub plugin_args: Vec<String>,
}

/// Words that are not a job-step invocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvocationError {
    /// The first word is not `prolog`, `epilog` or `step-end`.
    #[error(
        "expected `prolog`, `epilog` or `step-end`, got {0:?}: this command is run by the SPANK plugin"
    )]
    Script(String),
    /// A flag this version does not know.
    #[error(
        "unknown flag {0:?}: the plugin and fabric-check are of different versions; install both from one build"
    )]
    UnknownFlag(String),
    /// A flag without its value.
    #[error("{0} needs a value")]
    MissingValue(&'static str),
    /// A value that does not parse.
    #[error("{flag} {value:?} is not a number")]
    NotANumber {
        /// The flag.
        flag: &'static str,
        /// What came.
        value: String,
    },
    /// A bad `--option`.
    #[error(transparent)]
    Option(#[from] InvalidFabricMode),
    /// A required flag is absent.
    #[error("{0} is required")]
    Required(&'static str),
}

impl Invocation {
    /// The words after the program name.
    pub fn to_argv(&self) -> Vec<String> {
        let mut argv = vec![
            self.script.as_str().to_owned(),
            "--job-id".to_owned(),
            self.job_id.to_string(),
            "--node".to_owned(),
            self.node.clone(),
            "--nodes".to_owned(),
            self.nodes.clone(),
            "--option".to_owned(),
            self.option.as_str().to_owned(),
        ];
        if let Some(uid) = self.job_uid {
            argv.extend(["--job-uid".to_owned(), uid.to_string()]);
        }
        if let Some(step) = self.step_id {
            argv.extend(["--step-id".to_owned(), step.to_string()]);
        }
        if self.spares > 0 {
            argv.extend(["--spares".to_owned(), self.spares.to_string()]);
        }
        argv.push("--".to_owned());
        argv.extend(self.plugin_args.iter().cloned());
        argv
    }

    /// Parses the words after the program name (the inverse of [`Invocation::to_argv`]).
    pub fn parse<I, S>(argv: I) -> Result<Self, InvocationError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut words = argv.into_iter().map(Into::into);
        let script = match words.next().as_deref() {
            Some("prolog") => Script::Prolog,
            Some("epilog") => Script::Epilog,
            Some("step-end") => Script::StepEnd,
            Some("watch") => Script::Watch,
            other => return Err(InvocationError::Script(other.unwrap_or("").to_owned())),
        };
        Self::parse_flags(script, words)
    }

    /// Parses the flags of `script` (the subcommand word already taken).
    pub fn parse_flags<I, S>(script: Script, words: I) -> Result<Self, InvocationError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut words = words.into_iter().map(Into::into);
        let (mut job_id, mut node, mut nodes) = (None, None, None);
        let (mut option, mut job_uid, mut step_id) = (FabricMode::Quick, None, None);
        let mut spares = 0;
        let mut plugin_args = Vec::new();
        let number = |flag: &'static str, v: String| {
            v.parse::<u32>()
                .map_err(|_| InvocationError::NotANumber { flag, value: v })
        };
        while let Some(w) = words.next() {
            let flag: &'static str = match w.as_str() {
                "--" => {
                    plugin_args.extend(words.by_ref());
                    break;
                }
                "--job-id" => "--job-id",
                "--node" => "--node",
                "--nodes" => "--nodes",
                "--option" => "--option",
                "--job-uid" => "--job-uid",
                "--step-id" => "--step-id",
                "--spares" => "--spares",
                _ => return Err(InvocationError::UnknownFlag(w)),
            };
            let v = words.next().ok_or(InvocationError::MissingValue(flag))?;
            match flag {
                "--job-id" => job_id = Some(number(flag, v)?),
                "--node" => node = Some(v),
                "--nodes" => nodes = Some(v),
                "--option" => option = v.parse()?,
                "--step-id" => step_id = Some(number(flag, v)?),
                "--spares" => spares = number(flag, v)?,
                _ => job_uid = Some(number(flag, v)?),
            }
        }
        Ok(Self {
            script,
            job_id: job_id.ok_or(InvocationError::Required("--job-id"))?,
            node: node.ok_or(InvocationError::Required("--node"))?,
            nodes: nodes.ok_or(InvocationError::Required("--nodes"))?,
            option,
            job_uid,
            step_id,
            spares,
            plugin_args,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_busy_past_the_limit_is_the_busy_error_after_the_limit() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy");
        // Held open for writing by this test until the end.
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let start = Instant::now();
        let limit = Duration::from_millis(60);
        let e = spawn_retrying_busy(&mut Command::new(&path), start, limit).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ExecutableFileBusy);
        assert!(start.elapsed() >= limit, "it tried until the limit");
        drop(f);
    }

    fn sample() -> Invocation {
        Invocation {
            script: Script::Prolog,
            job_id: 42,
            node: "n1".into(),
            nodes: "n[1-4]".into(),
            option: FabricMode::Full,
            job_uid: Some(1000),
            step_id: None,
            spares: 0,
            plugin_args: vec!["policy=enforce".into(), "--odd".into()],
        }
    }

    #[test]
    fn an_invocation_survives_its_own_argv() {
        let inv = sample();
        assert_eq!(Invocation::parse(inv.to_argv()).unwrap(), inv);
        let epilog = Invocation {
            script: Script::Epilog,
            job_uid: None,
            plugin_args: vec![],
            ..inv
        };
        assert_eq!(Invocation::parse(epilog.to_argv()).unwrap(), epilog);
        let step_end = Invocation {
            script: Script::StepEnd,
            step_id: Some(3),
            ..sample()
        };
        let with_spares = Invocation {
            spares: 2,
            ..sample()
        };
        assert_eq!(
            Invocation::parse(with_spares.to_argv()).unwrap(),
            with_spares
        );
        let argv = step_end.to_argv();
        assert_eq!(argv[0], "step-end");
        assert_eq!(Invocation::parse(argv).unwrap(), step_end);
    }

    #[test]
    fn words_after_the_separator_are_plugin_words_even_if_they_look_like_flags() {
        let inv = Invocation::parse([
            "epilog", "--job-id", "7", "--node", "a", "--nodes", "a", "--", "--job-id", "9",
        ])
        .unwrap();
        assert_eq!(inv.job_id, 7);
        assert_eq!(inv.plugin_args, ["--job-id", "9"]);
        assert_eq!(
            inv.option,
            FabricMode::Quick,
            "the option defaults to quick"
        );
    }

    #[test]
    fn a_bad_invocation_is_named() {
        let err = |w: &[&str]| Invocation::parse(w.iter().copied()).unwrap_err();
        assert_eq!(err(&["probe"]), InvocationError::Script("probe".into()));
        assert_eq!(
            err(&["prolog", "--node", "a", "--nodes", "a"]),
            InvocationError::Required("--job-id")
        );
        assert_eq!(
            err(&["prolog", "--job-id"]),
            InvocationError::MissingValue("--job-id")
        );
        assert!(matches!(
            err(&["prolog", "--job-id", "x"]),
            InvocationError::NotANumber { .. }
        ));
        assert!(matches!(
            err(&["prolog", "--option", "fast"]),
            InvocationError::Option(_)
        ));
        assert_eq!(
            err(&["prolog", "--verbose"]),
            InvocationError::UnknownFlag("--verbose".into())
        );
    }

    #[test]
    fn the_decision_line_is_read_back_from_the_last_one_printed() {
        let out = format!(
            "probe: pass\n{}\nnoise\n{}\n",
            JobStepExit::Proceed.line(),
            JobStepExit::Drained.line()
        );
        assert_eq!(JobStepExit::from_output(&out), Some(JobStepExit::Drained));
        assert_eq!(
            JobStepExit::from_output("fabric-check-exit=7\n"),
            None,
            "not one of ours"
        );
        assert_eq!(JobStepExit::from_output("no line"), None);
        assert!(JobStepExit::is_line(&JobStepExit::Drained.line()));
    }

    #[test]
    fn exit_codes_round_trip() {
        for e in [JobStepExit::Proceed, JobStepExit::Drained] {
            assert_eq!(JobStepExit::from_code(e.code()), Some(e));
        }
        assert_eq!(JobStepExit::from_code(1), None);
    }
}
