//! `fabric-check check-config`: reports every plugin argument in `plugstack.conf` that the plugin
//! would refuse, by name, and every error in the probe's TOML configuration (unknown keys, wrong
//! types, bad hostlists), so that a typo is caught before slurmd is restarted.

use std::path::{Path, PathBuf};

use anyhow::Context;
use fabric_core::config::Config;
use fabric_proto::plugin_args::{PluginArgs, plugstack_lines};

/// The plugstack.conf read when neither `--plugstack` nor `--config` is given.
const DEFAULT_PLUGSTACK: &str = "/etc/slurm/plugstack.conf";

/// Arguments of `fabric-check check-config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plugstack.conf to read [default: /etc/slurm/plugstack.conf, unless only --config is
    /// given]. The configuration its `config=` names is validated too (when it has no `%n`).
    #[arg(long, value_name = "FILE")]
    plugstack: Option<PathBuf>,
    /// A probe configuration (fabric-check.toml(5)) to validate.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Validates one TOML configuration; prints the result and returns the number of problems.
fn check_toml(path: &Path) -> usize {
    match Config::load(path) {
        Ok(_) => {
            println!("{}: ok (fabric-check.toml)", path.display());
            0
        }
        Err(e) => {
            println!("{e}");
            1
        }
    }
}

/// Exit 0 when every argument and the configuration are usable, 2 when any is not, 3 when the
/// plugstack.conf cannot be read.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let mut bad = 0;
    if let Some(cfg) = &args.config {
        bad += check_toml(cfg);
    }
    let plugstack = match (&args.plugstack, &args.config) {
        (Some(p), _) => p.clone(),
        (None, Some(_)) => return Ok(if bad == 0 { 0 } else { 2 }),
        (None, None) => PathBuf::from(DEFAULT_PLUGSTACK),
    };
    bad += check_plugstack(&plugstack, args.config.as_deref())?;
    Ok(if bad == 0 { 0 } else { 2 })
}

/// Checks every fabric-check line of `plugstack`, and the configuration each names (unless it
/// is `checked_config`, already checked, or has a `%n`); returns the number of problems.
fn check_plugstack(plugstack: &Path, checked_config: Option<&Path>) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(plugstack).with_context(|| {
        format!(
            "cannot read {}: pass the file that loads spank_fabric_check.so with --plugstack",
            plugstack.display()
        )
    })?;
    let lines = plugstack_lines(&text);
    if lines.is_empty() {
        println!(
            "{}: no line loads spank_fabric_check.so; add: required /path/to/spank_fabric_check.so",
            plugstack.display()
        );
        return Ok(1);
    }
    let at = |line: usize| format!("{}:{line}", plugstack.display());
    let mut bad = 0;
    for line in &lines {
        let (parsed, problems) = PluginArgs::parse(line.args.iter().map(String::as_str));
        for p in &problems {
            let level = if p.is_warning() { "warning: " } else { "" };
            println!("{}: {level}{p}", at(line.line));
        }
        // A warning's setting is used as written: worth a look, not a failed check.
        bad += problems.iter().filter(|p| !p.is_warning()).count();
        if !Path::new(&line.so_path).exists() {
            println!("{}: {} does not exist", at(line.line), line.so_path);
            bad += 1;
        }
        if !parsed.probe.exists() {
            println!(
                "{}: probe binary {} does not exist: set probe=/absolute/path/to/fabric-check",
                at(line.line),
                parsed.probe.display()
            );
            bad += 1;
        }
        let config = parsed.config.as_path();
        if config.to_string_lossy().contains("%n") || Some(config) == checked_config {
            continue;
        }
        if config.exists() {
            bad += check_toml(config);
        } else {
            println!(
                "{}: config {} does not exist: the probe runs on its defaults (peer parity, \
                 default counter thresholds)",
                at(line.line),
                config.display()
            );
        }
    }
    if bad == 0 {
        println!(
            "{}: ok ({} fabric-check line(s))",
            plugstack.display(),
            lines.len()
        );
    }
    Ok(bad)
}
