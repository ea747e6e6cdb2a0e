//! `fabric-soak [NODE_DAYS] [SEED]`: runs the false-drain soak and prints its report, the
//! summary line last (see `scripts/bench-soak`).

use anyhow::Context;

/// The soak's allocator: mimalloc, not the C library's. The soak's twenty node threads allocate
/// and free many small strings and maps a probe (counter names, snapshots, documents); with the
/// C library's allocator that was 14 % of the soak's CPU (`malloc`, `free`, `realloc` and
/// their arena upkeep, `perf`, seed 1). Only this binary: the plugin and `fabric-check` keep
/// the system allocator.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use clap::Parser;

/// The false-drain soak of fabric-check on the fakes.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Node-days to emulate.
    #[arg(default_value_t = 10_000)]
    node_days: u64,
    /// The seed of every draw (the same seed repeats the same run).
    #[arg(default_value_t = 1)]
    seed: u64,
    /// Nodes in the emulated cluster.
    #[arg(long, default_value_t = 20)]
    nodes: usize,
    /// Node threads that run at once (default: the CPUs this process may use).
    #[arg(long)]
    cores: Option<usize>,
    /// Leave out the health check at `slurmd`'s start that sees ports still training.
    #[arg(long)]
    no_boot_race: bool,
    /// Do not accept the inventory of nodes with an unprovisioned port at installation (they
    /// drain at their first probe: docs/checks.md).
    #[arg(long)]
    no_accept: bool,
    /// Hours between two health checks of a quiet node (after an event: every 5 min).
    #[arg(long, default_value_t = 4)]
    health_every_h: u64,
    /// Repeat one node's life of this run alone (e.g. `gpu017`, as the report names it): its
    /// draws do not depend on the other nodes', so its findings come back in a fraction of the
    /// time.
    #[arg(long, value_name = "NODE")]
    only_node: Option<String>,
    /// End the run at this emulated day (the schedule of faults stays that of NODE_DAYS).
    #[arg(long, value_name = "DAY")]
    until_day: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut opts = fabric_soak::run::Options::new(args.node_days, args.seed);
    opts.nodes = args.nodes;
    if let Some(c) = args.cores {
        opts.cores = c;
    }
    opts.model.boot_race = !args.no_boot_race;
    opts.accept_unprovisioned = !args.no_accept;
    opts.health_every_h = args.health_every_h;
    opts.only_node = args.only_node;
    opts.until_day = args.until_day;
    // The node trees are read thousands of times: in memory (tmpfs) when the system has one and
    // TMPDIR does not say otherwise.
    let shm = std::path::Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("fabric-soak-");
    let dir = if std::env::var_os("TMPDIR").is_none_or(|t| t.is_empty()) && shm.is_dir() {
        builder.tempdir_in(shm)
    } else {
        builder.tempdir()
    }
    .context("cannot make the soak's temporary folder")?;
    let out = fabric_soak::run::run_in(&opts, dir.path()).context("the soak could not run")?;
    print!("{}", fabric_soak::report::text(&out));
    Ok(())
}
