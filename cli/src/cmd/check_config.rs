//! `fabric-check check-config`: reports every plugin argument in `plugstack.conf` that the plugin
//! would refuse, by name, so that a typo is caught before slurmd is restarted.

use std::path::PathBuf;

use anyhow::Context;
use fabric_core::plugin_args::{PluginArgs, plugstack_lines};

/// Arguments of `fabric-check check-config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plugstack.conf to read.
    #[arg(long, default_value = "/etc/slurm/plugstack.conf")]
    plugstack: PathBuf,
}

/// Exit 0 when every argument is usable, 2 when any is not, 3 when the file cannot be read.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(&args.plugstack).with_context(|| {
        format!(
            "cannot read {}: pass the file that loads spank_fabric_check.so with --plugstack",
            args.plugstack.display()
        )
    })?;
    let lines = plugstack_lines(&text);
    if lines.is_empty() {
        println!(
            "{}: no line loads spank_fabric_check.so; add: required /path/to/spank_fabric_check.so",
            args.plugstack.display()
        );
        return Ok(2);
    }
    let mut bad = 0;
    for line in &lines {
        let (parsed, problems) = PluginArgs::parse(line.args.iter().map(String::as_str));
        for p in &problems {
            println!("{}:{}: {p}", args.plugstack.display(), line.line);
        }
        bad += problems.len();
        if !std::path::Path::new(&line.so_path).exists() {
            println!(
                "{}:{}: {} does not exist",
                args.plugstack.display(),
                line.line,
                line.so_path
            );
            bad += 1;
        }
        if !parsed.probe.exists() {
            println!(
                "{}:{}: probe binary {} does not exist: set probe=/absolute/path/to/fabric-check",
                args.plugstack.display(),
                line.line,
                parsed.probe.display()
            );
            bad += 1;
        }
    }
    if bad == 0 {
        println!(
            "{}: ok ({} fabric-check line(s))",
            args.plugstack.display(),
            lines.len()
        );
        Ok(0)
    } else {
        Ok(2)
    }
}
