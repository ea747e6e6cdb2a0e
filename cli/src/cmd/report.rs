//! `fabric-check report` (not yet built).

/// Arguments of `fabric-check report`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the subcommand and returns the exit code.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`fabric-check report` is not built yet")
}
