//! The SPANK plugin's arguments: the `key=value` words after the `.so` path in `plugstack.conf`.
//!
//! Parsing never fails as a whole: every word that is unknown, malformed or out of range becomes
//! an [`ArgProblem`] (named in the slurmd log and by `fabric-check check-config`) and the setting
//! keeps its documented default, so a typo never stops slurmd and is never silently ignored.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Whether the prolog probes every job or only jobs that ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobMode {
    /// Every job is probed unless it says `--fabric-check=off`.
    Always,
    /// Only jobs with `--fabric-check` are probed (the default).
    OptIn,
    /// The plugin registers its option but never probes.
    Off,
}

/// What the prolog does with a `fail` verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Drain the node with a specific reason and fail the prolog so Slurm requeues the job.
    Enforce,
    /// Tag the job only.
    Warn,
    /// Log only.
    Observe,
}

impl Policy {
    /// The value as written in plugstack.conf.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::Warn => "warn",
            Self::Observe => "observe",
        }
    }
}

/// The mass-drain guard's limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DrainLimit {
    /// At most this many nodes drained by fabric-check at once.
    Nodes(u32),
    /// At most this fraction (0..=1) of the cluster's nodes.
    Fraction(f64),
}

/// The plugin's settings, every one with a documented default.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginArgs {
    /// `config=`: the probe's TOML configuration (`%n` expands to the node name).
    pub config: PathBuf,
    /// `probe=`: absolute path of the `fabric-check` binary the prolog runs.
    pub probe: PathBuf,
    /// `mode=always|opt-in|off`.
    pub mode: JobMode,
    /// `timeout=SECONDS`: hard limit for one probe run, after which its process group is killed.
    pub timeout: Duration,
    /// `policy=enforce|warn|observe`.
    pub policy: Policy,
    /// `sysfs_root=DIR`: where the probe reads sysfs (`%n` expands; for testbeds and containers).
    pub sysfs_root: Option<PathBuf>,
    /// `state_dir=DIR`: node-local state (counter snapshots keyed by job id).
    pub state_dir: PathBuf,
    /// `drain_on_error=yes|no`: drain when the probe could not run (default no).
    pub drain_on_error: bool,
    /// `max_drain=N|P%`: the mass-drain guard.
    pub max_drain: DrainLimit,
    /// `dry_run=yes|no`: log what would be drained instead of draining.
    pub dry_run: bool,
    /// `munge_socket=PATH`: the munged socket for the job's rendezvous (default: munge's own).
    pub munge_socket: Option<PathBuf>,
    /// `spool_dir=DIR`: where `fabric-run` leaves per-job records (`<dir>/<job>/<node>.jsonl`).
    pub spool_dir: PathBuf,
    /// `collective_netns=NAME`: run the collective inside this network namespace (`%n`
    /// expands; for testbeds whose virtual nodes live in namespaces).
    pub collective_netns: Option<String>,
    /// `collective_hosts=FILE`: `node address` lines for the collective's data path (default:
    /// the job's nodes as `hosts_file=` lists them, then the system resolver).
    pub collective_hosts: Option<PathBuf>,
    /// `step_hosts=FILE`: the same for the step gate, which runs as the job's user in the
    /// tasks' network namespace (default: `collective_hosts`).
    pub step_hosts: Option<PathBuf>,
    /// `hosts_file=FILE`: node addresses for the job step's rendezvous, in `/etc/hosts` form
    /// (`address name...`) or `name address` lines; names not in it go to the system resolver,
    /// and only then to `scontrol show node` (one slurmctld call per node per job).
    pub hosts_file: Option<PathBuf>,
    /// `watch_interval=SECONDS`: how often the in-job watch samples a checked job's node
    /// (default 1 s; `0` turns the watch off; 0.1 to 3600).
    pub watch_interval: Option<Duration>,
    /// `straggler_window=SECONDS`: the window of step times each node's watch sends the job's
    /// first node, which names stragglers (default [`crate::straggler::DEFAULT_WINDOW_S`]; `0`
    /// turns it off; 2 to 600; whole seconds). Needs the watch.
    pub straggler_window_s: u64,
    /// `watch_textfile=FILE`: where the watch keeps its fault counters for node_exporter's
    /// textfile collector (`%n` expands; default: none).
    pub watch_textfile: Option<PathBuf>,
    /// `max_watches=N`: the most in-job watches that run on a node at once (default
    /// [`DEFAULT_MAX_WATCHES`], 1 to [`MAX_MAX_WATCHES`]); a job checked beyond it is not
    /// watched (its prolog says so and its tag marks it), its faults found by its epilog.
    pub max_watches: u32,
    /// `on_fault=none|requeue`: what a job may ask for when the in-job watch drains a node
    /// under it (default `none`: the job runs on and is told).
    pub on_fault: OnFault,
    /// `spares_max=N`: the most spare nodes a job may ask for with `--fabric-check-spares`
    /// (default 0: spares are not allowed; at most [`crate::spares::MAX_SPARES`]).
    pub spares_max: u32,
    /// `port_base=PORT`: the first port of the job step's three TCP windows of
    /// [`crate::ports::WINDOW_PORTS`] ports each (the rendezvous, the prolog's collective, the
    /// step gate; default [`crate::ports::RENDEZVOUS_BASE`]); each meeting tries
    /// [`crate::ports::CANDIDATES`] ports of its window ([`crate::ports::Window::candidates`]).
    /// Every node of a cluster must use the same. A base whose windows reach into Linux's
    /// ephemeral range is used, with a warning ([`ArgProblem::PortsInEphemeralRange`]).
    pub ports: crate::invocation::ports::Bases,
}

/// `on_fault=`: whether jobs may ask to be requeued when the in-job watch drains one of their
/// nodes (`fabric-run --on-fabric-fault=requeue` asks; [`crate::notice::requeue_wish_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFault {
    /// `none`: no job is requeued by fabric-check.
    #[default]
    None,
    /// `requeue`: a job that asked is requeued (by root, with its own id) after the drain, so it
    /// starts again on other nodes.
    Requeue,
}

impl Default for PluginArgs {
    fn default() -> Self {
        Self {
            config: PathBuf::from("/etc/fabric-check/fabric-check.toml"),
            probe: PathBuf::from("/usr/local/bin/fabric-check"),
            mode: JobMode::OptIn,
            timeout: Duration::from_secs(20),
            policy: Policy::Enforce,
            sysfs_root: None,
            state_dir: PathBuf::from("/var/lib/fabric-check"),
            drain_on_error: false,
            max_drain: DrainLimit::Fraction(0.1),
            dry_run: false,
            munge_socket: None,
            spool_dir: PathBuf::from(crate::record::DEFAULT_SPOOL_ROOT),
            collective_netns: None,
            collective_hosts: None,
            step_hosts: None,
            hosts_file: None,
            watch_interval: Some(DEFAULT_WATCH_INTERVAL),
            straggler_window_s: crate::straggler::DEFAULT_WINDOW_S,
            watch_textfile: None,
            max_watches: DEFAULT_MAX_WATCHES,
            on_fault: OnFault::None,
            spares_max: 0,
            ports: crate::invocation::ports::Bases::default(),
        }
    }
}

/// Every key the plugin accepts, for messages.
pub const KNOWN_KEYS: &[&str] = &[
    "config",
    "probe",
    "mode",
    "timeout",
    "policy",
    "sysfs_root",
    "state_dir",
    "drain_on_error",
    "max_drain",
    "dry_run",
    "munge_socket",
    "spool_dir",
    "collective_netns",
    "collective_hosts",
    "step_hosts",
    "hosts_file",
    "watch_interval",
    "straggler_window",
    "watch_textfile",
    "max_watches",
    "on_fault",
    "spares_max",
    "port_base",
];

/// The in-job watch's default sampling interval.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// The most in-job watches that run on a node at once, unless `max_watches=` says otherwise.
pub const DEFAULT_MAX_WATCHES: u32 = 8;

/// The highest `max_watches=` accepted.
pub const MAX_MAX_WATCHES: u32 = 256;

/// Longest timeout accepted; Slurm's own `PrologEpilogTimeout` should be longer still.
pub const MAX_TIMEOUT_S: u64 = 600;

/// One plugin argument that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgProblem {
    /// A key the plugin does not know.
    #[error(
        "unknown plugin argument {key:?}{hint}: known keys are {known}",
        hint = crate::suggest::nearest(key, KNOWN_KEYS.iter().copied())
            .map_or(String::new(), |k| format!(" (did you mean {k}?)")),
        known = KNOWN_KEYS.join(", ")
    )]
    Unknown {
        /// The key as written.
        key: String,
    },
    /// A word without `=` or with an empty key.
    #[error("malformed plugin argument {word:?}: write key=value")]
    Malformed {
        /// The word as written.
        word: String,
    },
    /// A known key with a value it cannot take.
    #[error("plugin argument {key}={value:?} is invalid: {expected}; using the default")]
    BadValue {
        /// The key.
        key: String,
        /// The value as written (bounded).
        value: String,
        /// What the key takes.
        expected: &'static str,
    },
    /// `port_base=` with a number the windows cannot start at.
    #[error(
        "plugin argument port_base={value} is invalid: {reason}; using the default ({})",
        crate::ports::RENDEZVOUS_BASE
    )]
    BadPorts {
        /// The value as written.
        value: u16,
        /// Why.
        reason: crate::ports::WindowError,
    },
    /// A warning, the setting is used: `port_base=` puts some of the job step's ports inside
    /// Linux's default ephemeral range, where outgoing connections can hold every port a job
    /// tries unless the site reserves them.
    #[error(
        "plugin argument port_base={base} puts ports {first}-{last} of the job step's windows \
         inside Linux's default ephemeral range ({}-{}), where outgoing connections can hold \
         every port a job tries: reserve them on every node (sysctl -w \
         net.ipv4.ip_local_reserved_ports={first}-{last}, see docs/operations.md \"Ports\") or \
         leave port_base= out (default {}); using it",
        crate::ports::LINUX_EPHEMERAL.start(),
        crate::ports::LINUX_EPHEMERAL.end(),
        crate::ports::RENDEZVOUS_BASE
    )]
    PortsInEphemeralRange {
        /// `port_base=` as given.
        base: u16,
        /// The first of its ports in the range.
        first: u16,
        /// The last of its ports in the range.
        last: u16,
    },
    /// The same key twice.
    #[error("plugin argument {key:?} is given more than once: the last one wins")]
    Repeated {
        /// The key.
        key: String,
    },
}

impl ArgProblem {
    /// Whether the setting was used as written and the problem is only worth a look (the
    /// plugin still logs it; `fabric-check check-config` prints it and does not fail).
    pub fn is_warning(&self) -> bool {
        matches!(self, Self::PortsInEphemeralRange { .. })
    }
}

/// What `port_base=` takes, for a value that is not a port number.
const PORT_BASE_EXPECTED: &str =
    "a port number from 1024 to 59536 (three windows of 2000 ports follow it)";

/// `port_base=`: the windows, or why not; a base inside the ephemeral range is used and said.
fn parse_port_base(
    value: &str,
    args: &mut PluginArgs,
    problems: &mut Vec<ArgProblem>,
) -> Result<(), ArgProblem> {
    let base = value
        .parse::<u16>()
        .ok()
        .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| ArgProblem::BadValue {
            key: "port_base".into(),
            value: bounded(value),
            expected: PORT_BASE_EXPECTED,
        })?;
    let bases = crate::ports::Bases::from_base(base).map_err(|reason| ArgProblem::BadPorts {
        value: base,
        reason,
    })?;
    if let Some(inside) = bases.in_range(&crate::ports::LINUX_EPHEMERAL) {
        problems.push(ArgProblem::PortsInEphemeralRange {
            base,
            first: *inside.start(),
            last: *inside.end(),
        });
    }
    args.ports = bases;
    Ok(())
}

fn bounded(s: &str) -> String {
    s.chars().take(200).collect()
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "yes" | "true" | "1" | "on" => Some(true),
        "no" | "false" | "0" | "off" => Some(false),
        _ => None,
    }
}

fn absolute_path(v: &str) -> Option<PathBuf> {
    let p = PathBuf::from(v);
    (p.is_absolute() && !v.contains('\0')).then_some(p)
}

fn parse_drain_limit(v: &str) -> Option<DrainLimit> {
    if let Some(pct) = v.strip_suffix('%') {
        let p: f64 = pct.parse().ok()?;
        (p > 0.0 && p <= 100.0).then_some(DrainLimit::Fraction(p / 100.0))
    } else {
        v.parse().ok().map(DrainLimit::Nodes)
    }
}

impl PluginArgs {
    /// Parses the plugin's argument words; never fails, see the module docs.
    pub fn parse<'a>(words: impl IntoIterator<Item = &'a str>) -> (Self, Vec<ArgProblem>) {
        let mut args = Self::default();
        let mut problems = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        for word in words {
            let Some((key, value)) = word.split_once('=').filter(|(k, _)| !k.is_empty()) else {
                problems.push(ArgProblem::Malformed {
                    word: bounded(word),
                });
                continue;
            };
            if !KNOWN_KEYS.contains(&key) {
                problems.push(ArgProblem::Unknown { key: bounded(key) });
                continue;
            }
            if seen.iter().any(|k| k == key) {
                problems.push(ArgProblem::Repeated {
                    key: key.to_owned(),
                });
            }
            seen.push(key.to_owned());
            let bad = |expected| ArgProblem::BadValue {
                key: key.to_owned(),
                value: bounded(value),
                expected,
            };
            const ABS: &str = "an absolute path";
            const YES_NO: &str = "yes or no";
            let result = match key {
                "config" => absolute_path(value)
                    .map(|p| args.config = p)
                    .ok_or(bad(ABS)),
                "probe" => absolute_path(value).map(|p| args.probe = p).ok_or(bad(ABS)),
                "sysfs_root" => absolute_path(value)
                    .map(|p| args.sysfs_root = Some(p))
                    .ok_or(bad(ABS)),
                "state_dir" => absolute_path(value)
                    .map(|p| args.state_dir = p)
                    .ok_or(bad(ABS)),
                "mode" => match value {
                    "always" => Some(JobMode::Always),
                    "opt-in" => Some(JobMode::OptIn),
                    "off" => Some(JobMode::Off),
                    _ => None,
                }
                .map(|m| args.mode = m)
                .ok_or(bad("always, opt-in or off")),
                "policy" => match value {
                    "enforce" => Some(Policy::Enforce),
                    "warn" => Some(Policy::Warn),
                    "observe" => Some(Policy::Observe),
                    _ => None,
                }
                .map(|p| args.policy = p)
                .ok_or(bad("enforce, warn or observe")),
                "timeout" => value
                    .parse::<u64>()
                    .ok()
                    .filter(|s| (1..=MAX_TIMEOUT_S).contains(s))
                    .map(|s| args.timeout = Duration::from_secs(s))
                    .ok_or(bad("whole seconds from 1 to 600")),
                "watch_interval" => value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s == 0.0 || (0.1..=3600.0).contains(s))
                    .map(|s| {
                        args.watch_interval = (s > 0.0).then(|| Duration::from_secs_f64(s));
                    })
                    .ok_or(bad("seconds from 0.1 to 3600, or 0 to turn the watch off")),
                "straggler_window" => value
                    .parse::<u64>()
                    .ok()
                    .filter(|s| {
                        (*s == 0 || (2..=600).contains(s))
                            && value.bytes().all(|b| b.is_ascii_digit())
                    })
                    .map(|s| args.straggler_window_s = s)
                    .ok_or(bad(
                        "whole seconds from 2 to 600, or 0 to turn straggler figures off",
                    )),
                "max_watches" => value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| {
                        (1..=MAX_MAX_WATCHES).contains(n)
                            && value.bytes().all(|b| b.is_ascii_digit())
                    })
                    .map(|n| args.max_watches = n)
                    .ok_or(bad("a number of watches from 1 to 256")),
                "on_fault" => match value {
                    "none" => Some(OnFault::None),
                    "requeue" => Some(OnFault::Requeue),
                    _ => None,
                }
                .map(|v| args.on_fault = v)
                .ok_or(bad("none or requeue")),
                "spares_max" => value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n <= crate::spares::MAX_SPARES && !value.starts_with('+'))
                    .map(|n| args.spares_max = n)
                    .ok_or(bad("a number of nodes from 0 to 64")),
                "port_base" => parse_port_base(value, &mut args, &mut problems),
                "watch_textfile" => absolute_path(value)
                    .map(|p| args.watch_textfile = Some(p))
                    .ok_or(bad("an absolute path")),
                "drain_on_error" => parse_bool(value)
                    .map(|b| args.drain_on_error = b)
                    .ok_or(bad(YES_NO)),
                "dry_run" => parse_bool(value)
                    .map(|b| args.dry_run = b)
                    .ok_or(bad(YES_NO)),
                "max_drain" => parse_drain_limit(value)
                    .map(|l| args.max_drain = l)
                    .ok_or(bad("a node count (e.g. 2) or a percentage (e.g. 10%)")),
                "munge_socket" => absolute_path(value)
                    .map(|p| args.munge_socket = Some(p))
                    .ok_or(bad(ABS)),
                "spool_dir" => absolute_path(value)
                    .map(|p| args.spool_dir = p)
                    .ok_or(bad(ABS)),
                "collective_netns" => Some(value)
                    .filter(|v| {
                        !v.is_empty()
                            && v.len() <= 64
                            && v.bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b"-_.%".contains(&b))
                    })
                    .map(|v| args.collective_netns = Some(v.to_owned()))
                    .ok_or(bad("a namespace name (letters, digits, - _ . and %n)")),
                "collective_hosts" => absolute_path(value)
                    .map(|p| args.collective_hosts = Some(p))
                    .ok_or(bad(ABS)),
                "step_hosts" => absolute_path(value)
                    .map(|p| args.step_hosts = Some(p))
                    .ok_or(bad(ABS)),
                "hosts_file" => absolute_path(value)
                    .map(|p| args.hosts_file = Some(p))
                    .ok_or(bad(ABS)),
                // Every key was checked against KNOWN_KEYS above.
                _ => Ok(()),
            };
            if let Err(p) = result {
                problems.push(p);
            }
        }
        (args, problems)
    }
}

/// Expands `%n` in a configured path to the node name (other `%` sequences are kept as written).
///
/// The node name is checked to be a plain host name so that it cannot walk out of the directory.
pub fn expand_node(path: &std::path::Path, node: &str) -> Option<PathBuf> {
    let text = path.to_str()?;
    if !text.contains("%n") {
        return Some(path.to_path_buf());
    }
    let plain = !node.is_empty()
        && node.len() <= 64
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && node != "."
        && node != "..";
    plain.then(|| PathBuf::from(text.replace("%n", node)))
}

/// One `plugstack.conf` line that loads fabric-check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlugstackLine {
    /// 1-based line number.
    pub line: usize,
    /// `required` or `optional`.
    pub kind: String,
    /// The `.so` path as written.
    pub so_path: String,
    /// The argument words.
    pub args: Vec<String>,
}

impl fmt::Display for PlugstackLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {} {}", self.line, self.kind, self.so_path)
    }
}

/// Finds the lines of a `plugstack.conf` text that load `spank_fabric_check.so`.
pub fn plugstack_lines(text: &str) -> Vec<PlugstackLine> {
    text.lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let line = raw.split('#').next().unwrap_or("");
            let mut words = line.split_whitespace();
            let kind = words.next()?;
            if kind != "required" && kind != "optional" {
                return None;
            }
            let so_path = words.next()?;
            if !so_path.ends_with("spank_fabric_check.so") {
                return None;
            }
            Some(PlugstackLine {
                line: i + 1,
                kind: kind.to_owned(),
                so_path: so_path.to_owned(),
                args: words.map(str::to_owned).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn straggler_window_takes_whole_seconds_or_zero_and_names_what_it_wants_otherwise() {
        assert_eq!(PluginArgs::parse([]).0.straggler_window_s, 10);
        let (args, problems) = PluginArgs::parse(["straggler_window=30"]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(args.straggler_window_s, 30);
        assert_eq!(
            PluginArgs::parse(["straggler_window=0"])
                .0
                .straggler_window_s,
            0
        );
        for bad in ["1", "601", "2.5", "+5", "ten"] {
            let (args, problems) = PluginArgs::parse([format!("straggler_window={bad}").as_str()]);
            assert_eq!(args.straggler_window_s, 10, "{bad}");
            assert_eq!(problems.len(), 1, "{bad}");
            assert!(
                problems[0].to_string().contains("2 to 600"),
                "{}",
                problems[0]
            );
        }
    }

    #[test]
    fn no_arguments_give_the_documented_defaults() {
        let (args, problems) = PluginArgs::parse([]);
        assert!(problems.is_empty());
        assert_eq!(args, PluginArgs::default());
        assert_eq!(args.mode, JobMode::OptIn);
        assert_eq!(args.timeout, Duration::from_secs(20));
    }

    #[test]
    fn every_known_key_is_applied() {
        let (args, problems) = PluginArgs::parse([
            "config=/etc/fc/%n.toml",
            "probe=/opt/fc/bin/fabric-check",
            "mode=always",
            "timeout=7",
            "policy=warn",
            "sysfs_root=/srv/sysfs/%n",
            "state_dir=/var/tmp/fc",
            "drain_on_error=yes",
            "max_drain=25%",
            "dry_run=true",
            "munge_socket=/run/munge/alt.socket",
        ]);
        assert_eq!(problems, vec![]);
        assert_eq!(args.config, PathBuf::from("/etc/fc/%n.toml"));
        assert_eq!(args.probe, PathBuf::from("/opt/fc/bin/fabric-check"));
        assert_eq!(args.mode, JobMode::Always);
        assert_eq!(args.timeout, Duration::from_secs(7));
        assert_eq!(args.policy, Policy::Warn);
        assert_eq!(args.sysfs_root, Some(PathBuf::from("/srv/sysfs/%n")));
        assert_eq!(args.state_dir, PathBuf::from("/var/tmp/fc"));
        assert!(args.drain_on_error && args.dry_run);
        assert_eq!(args.max_drain, DrainLimit::Fraction(0.25));
        assert_eq!(
            args.munge_socket,
            Some(PathBuf::from("/run/munge/alt.socket"))
        );
    }

    #[test]
    fn port_base_moves_all_three_windows_and_a_base_that_would_overflow_is_refused() {
        let (args, problems) = PluginArgs::parse(["port_base=7100"]);
        assert_eq!(problems, vec![]);
        assert_eq!(
            (
                args.ports.rendezvous.first(),
                args.ports.collective.first(),
                args.ports.step_gate.first()
            ),
            (7100, 9100, 11100)
        );
        assert_eq!(
            PluginArgs::default().ports.rendezvous.first(),
            crate::ports::RENDEZVOUS_BASE
        );
        for (bad, says) in [
            ("port_base=80", "1024 or above"),
            ("port_base=59537", "59536 or below"),
            ("port_base=+7100", "1024 to 59536"),
            ("port_base=http", "1024 to 59536"),
        ] {
            let (args, problems) = PluginArgs::parse([bad]);
            assert_eq!(args.ports, PluginArgs::default().ports, "{bad}");
            assert!(
                problems.len() == 1
                    && !problems[0].is_warning()
                    && problems[0].to_string().contains(says),
                "{bad}: {problems:?}"
            );
        }
        let (args, _) = PluginArgs::parse(["port_base=59536"]);
        assert_eq!(args.ports.step_gate.last(), u16::MAX);
    }

    #[test]
    fn what_port_base_takes_is_said_with_the_layouts_own_numbers() {
        let expected = format!(
            "a port number from {} to {} (three windows of {} ports follow it)",
            crate::ports::MIN_BASE,
            crate::ports::MAX_BASE,
            crate::ports::WINDOW_PORTS
        );
        assert_eq!(PORT_BASE_EXPECTED, expected);
    }

    #[test]
    fn an_admins_base_inside_the_ephemeral_range_is_used_with_a_warning_naming_the_reservation() {
        let (args, problems) = PluginArgs::parse(["port_base=47000"]);
        assert_eq!(args.ports.base(), 47_000);
        assert_eq!(
            problems,
            vec![ArgProblem::PortsInEphemeralRange {
                base: 47_000,
                first: 47_000,
                last: 52_999
            }]
        );
        assert!(problems[0].is_warning());
        let text = problems[0].to_string();
        assert!(
            text.contains("net.ipv4.ip_local_reserved_ports=47000-52999")
                && text.contains("using it"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_key_is_named_and_the_rest_still_apply() {
        let (args, problems) = PluginArgs::parse(["timout=5", "mode=always"]);
        assert_eq!(
            problems,
            vec![ArgProblem::Unknown {
                key: "timout".into()
            }]
        );
        assert!(problems[0].to_string().contains("\"timout\""));
        assert!(
            problems[0]
                .to_string()
                .contains("\"timout\" (did you mean timeout?)"),
            "{}",
            problems[0]
        );
        assert_eq!(args.mode, JobMode::Always);
        assert_eq!(args.timeout, PluginArgs::default().timeout);
    }

    #[test]
    fn malformed_words_and_bad_values_are_reported_and_keep_defaults() {
        let (args, problems) = PluginArgs::parse([
            "verbose",
            "=x",
            "probe=fabric-check",
            "timeout=0",
            "timeout=forever",
            "mode=sometimes",
            "max_drain=150%",
        ]);
        assert_eq!(problems.len(), 8, "{problems:?}");
        assert!(matches!(&problems[0], ArgProblem::Malformed { word } if word == "verbose"));
        assert!(problems[2].to_string().contains("absolute path"));
        assert!(matches!(&problems[4], ArgProblem::Repeated { key } if key == "timeout"));
        assert!(problems[6].to_string().contains("always, opt-in or off"));
        assert_eq!(args, PluginArgs::default());
    }

    #[test]
    fn a_repeated_key_is_reported_and_the_last_wins() {
        let (args, problems) = PluginArgs::parse(["timeout=5", "timeout=9"]);
        assert_eq!(
            problems,
            vec![ArgProblem::Repeated {
                key: "timeout".into()
            }]
        );
        assert_eq!(args.timeout, Duration::from_secs(9));
    }

    #[test]
    fn node_expansion_refuses_names_that_could_escape_the_directory() {
        let p = std::path::Path::new("/srv/%n/sysfs");
        assert_eq!(expand_node(p, "n3"), Some(PathBuf::from("/srv/n3/sysfs")));
        assert_eq!(expand_node(p, ".."), None);
        assert_eq!(expand_node(p, "a/b"), None);
        assert_eq!(expand_node(p, ""), None);
        let fixed = std::path::Path::new("/etc/x.toml");
        assert_eq!(expand_node(fixed, ""), Some(fixed.to_path_buf()));
    }

    #[test]
    fn plugstack_lines_find_our_plugin_and_its_words_only() {
        let text = "# comment\ninclude /etc/slurm/plugstack.conf.d/*\n\
                    optional /usr/lib/other.so a=b\n\
                    required /usr/lib/slurm/spank_fabric_check.so mode=always timeout=5 # note\n";
        let lines = plugstack_lines(text);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].line, 4);
        assert_eq!(lines[0].kind, "required");
        assert_eq!(lines[0].args, vec!["mode=always", "timeout=5"]);
    }
}
