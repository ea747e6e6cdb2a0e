//! `fabric-check dist man|completions DIR` (hidden): the man pages and shell completions of
//! `fabric-check` and `fabric-run`, generated from their clap definitions (clap_mangen,
//! clap_complete). The package build (scripts/package) runs it; `docs/man/` holds the checked-in
//! pages, and a test regenerates them and fails on any difference, so they follow the code.
//!
//! `fabric-run`'s definitions are its own `wrapper/src/cli.rs`, compiled in here as a module so
//! that both binaries' pages come from the one source of each.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;
use clap_complete::Shell;

#[allow(dead_code)]
#[path = "../../../wrapper/src/cli.rs"]
mod run_cli;

/// Arguments of `fabric-check dist`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to write.
    #[arg(value_enum)]
    what: What,
    /// Directory to write into (created if missing).
    dir: PathBuf,
}

/// What `dist` writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum What {
    /// Section 1 man pages: each binary and each of its visible subcommands.
    Man,
    /// bash, zsh and fish completions of both binaries.
    Completions,
}

/// The two binaries' clap commands, fully built (subcommands propagated, help generated).
fn commands(fabric_check: clap::Command) -> [clap::Command; 2] {
    let mut fc = fabric_check;
    fc.build();
    let mut fr = run_cli::Cli::command();
    fr.build();
    [fc, fr]
}

/// Writes `cmd`'s page and, recursively, one page per visible subcommand
/// (`fabric-check-probe.1`, ...).
fn write_man(cmd: &clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned();
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .title(name.to_uppercase())
        .section("1")
        .source(format!("fabric-check {}", env!("CARGO_PKG_VERSION")))
        .manual("fabric-check")
        .render(&mut out)
        .with_context(|| format!("cannot render the man page of {name}"))?;
    std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
    written.push(path);
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        write_man(sub, dir, written)?;
    }
    Ok(())
}

/// Runs `fabric-check dist`; `fabric_check` is this binary's own clap command.
pub fn run(args: Args, fabric_check: clap::Command) -> anyhow::Result<i32> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let mut written = Vec::new();
    for mut cmd in commands(fabric_check) {
        match args.what {
            What::Man => write_man(&cmd, &args.dir, &mut written)?,
            What::Completions => {
                let bin = cmd.get_name().to_owned();
                for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
                    let path = clap_complete::generate_to(shell, &mut cmd, &bin, &args.dir)
                        .with_context(|| format!("cannot write the {shell} completion of {bin}"))?;
                    written.push(path);
                }
            }
        }
    }
    for p in written {
        println!("{}", p.display());
    }
    Ok(0)
}
