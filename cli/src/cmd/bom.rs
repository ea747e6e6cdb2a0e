//! `fabric-check bom` (not yet built).

/// Arguments of `fabric-check bom`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the subcommand and returns the exit code.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`fabric-check bom` is not built yet")
}
