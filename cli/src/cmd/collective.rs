//! `fabric-check collective`: one rank of a ring all-reduce among a job's nodes.
//!
//! Run once per node (by the SPANK plugin's child, by `srun`, or by hand); every rank prints the
//! same report. Exit codes as `probe`: 0 pass, 1 warn, 2 fail (wrong data or a slow node),
//! 3 the collective could not run.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fabric_net::collective::{self, CollectiveConfig, Report};
use fabric_net::rendezvous::{MapResolver, Munge, RendezvousConfig, SystemResolver, Window};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The `fabric-check/collective/v1` JSON document.
    Json,
    /// A human-readable table.
    Table,
}

/// Backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// TCP over the node's IP path (always available).
    Tcp,
    /// NCCL on the node's GPU (builds with `--features nccl`; skipped without GPU or libnccl).
    Nccl,
}

/// Arguments of `fabric-check collective`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Participants, rank order: a Slurm hostlist (`n[1-4]`) or a comma list. Rank 0 leads.
    #[arg(long)]
    pub nodes: String,
    /// This node's name (one of --nodes).
    #[arg(long)]
    pub node: String,
    /// The Slurm job id (binds credentials; chooses the rendezvous port).
    #[arg(long)]
    pub job_id: u64,
    /// A node's address, NAME=IP (repeatable); other names go to the system resolver.
    #[arg(long = "addr", value_name = "NAME=IP")]
    pub addrs: Vec<String>,
    /// Enter the network namespace /run/netns/NAME before opening sockets (testbed; root only).
    #[arg(long)]
    pub netns: Option<String>,
    /// munged's socket (default: munge's compiled-in one).
    #[arg(long)]
    pub munge_socket: Option<PathBuf>,
    /// A UID whose MUNGE credentials are accepted (repeatable; default: this process's UID).
    #[arg(long = "allow-uid", value_name = "UID")]
    pub allow_uids: Vec<u32>,
    /// Time budget, all in, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub budget_ms: u64,
    /// Rendezvous share of the budget, in milliseconds (default: half the budget).
    #[arg(long)]
    pub rendezvous_ms: Option<u64>,
    /// First port of the rendezvous window (2000 ports); the leader listens on the first free
    /// one of the job's 8 candidates in it, spread 250 ports apart from PORT_BASE + job_id % 250.
    #[arg(long, default_value_t = fabric_net::rendezvous::DEFAULT_BASE_PORT, value_parser = window_base)]
    pub port_base: u16,
    /// Sweep sizes in bytes per rank, small to large (suffixes K, M): `4K,64K,1M`.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<String>,
    /// Name a node slow when its best link is this many times slower than the median node's.
    #[arg(long, default_value_t = collective::DEFAULT_SLOW_FACTOR)]
    pub slow_factor: f64,
    /// The backend.
    #[arg(long, value_enum, default_value_t = Backend::Tcp)]
    pub backend: Backend,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
}

fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("--sizes: {s:?} is not a size like 4K, 1M or 4096"))?;
    let bytes = n * mult;
    if !(4..=(1 << 30)).contains(&bytes) {
        bail!("--sizes: {s:?} must be between 4 bytes and 1G");
    }
    Ok(bytes)
}

fn enter_netns(name: &str) -> anyhow::Result<()> {
    if name.contains('/') || name.is_empty() {
        bail!("--netns takes a namespace name as `ip netns` lists it, not a path: {name:?}");
    }
    let path = format!("/run/netns/{name}");
    let file = std::fs::File::open(&path)
        .with_context(|| format!("cannot open {path}; create it with `ip netns add {name}`"))?;
    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).with_context(|| {
        format!("cannot enter network namespace {name}: entering one needs root (CAP_SYS_ADMIN)")
    })?;
    Ok(())
}

/// Runs the subcommand and returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let started = Instant::now();
    if args.backend == Backend::Nccl
        && cfg!(feature = "nccl")
        && std::env::var_os("NCCL_ALGO").is_none()
    {
        // NCCL reads NCCL_ALGO at communicator creation; setting the environment in-process is
        // `unsafe` (edition 2024), so run again with it: busbw then reflects the ring over the
        // network, comparable to the TCP backend and to nccl-tests run with the same setting.
        let status = std::process::Command::new(std::env::current_exe()?)
            .args(std::env::args_os().skip(1))
            .env("NCCL_ALGO", "Ring")
            .status()
            .context("re-running with NCCL_ALGO=Ring")?;
        return Ok(status.code().unwrap_or(3));
    }
    // setns(2) affects the calling thread only: do it before any thread or socket exists.
    if let Some(ns) = &args.netns {
        enter_netns(ns)?;
    }
    let nodes = fabric_proto::hostlist::Hostlist::parse(&args.nodes)
        .and_then(|h| h.expand())
        .map_err(|e| anyhow::anyhow!("--nodes {:?}: {e}", args.nodes))?;
    let my_rank = nodes
        .iter()
        .position(|n| *n == args.node)
        .with_context(|| {
            format!(
                "--node {} is not in --nodes {} ({})",
                args.node,
                args.nodes,
                nodes.join(",")
            )
        })?;
    let mut map = BTreeMap::new();
    for a in &args.addrs {
        let (name, ip) = a
            .split_once('=')
            .with_context(|| format!("--addr {a:?}: write NAME=IP"))?;
        let ip: IpAddr = ip
            .parse()
            .with_context(|| format!("--addr {a:?}: {ip:?} is not an IP address"))?;
        map.insert(name.to_string(), ip);
    }
    let allowed = if args.allow_uids.is_empty() {
        vec![nix::unistd::getuid().as_raw()]
    } else {
        args.allow_uids.clone()
    };
    if args.budget_ms < 100 {
        bail!(
            "--budget-ms {} is too small: give the collective at least 100 ms",
            args.budget_ms
        );
    }
    let mut cfg = tcp_config(
        Ring {
            nodes,
            my_rank,
            job_id: args.job_id,
            addrs: map,
            munge_socket: args.munge_socket.as_deref(),
            allowed,
            window: Window::standard(args.port_base)?,
        },
        Duration::from_millis(args.budget_ms),
        started,
    )?;
    cfg.rendezvous.timeout =
        Duration::from_millis(args.rendezvous_ms.unwrap_or(args.budget_ms / 2));
    if !(args.slow_factor > 1.0 && args.slow_factor.is_finite()) {
        bail!(
            "--slow-factor {} must be a number above 1 (e.g. 4)",
            args.slow_factor
        );
    }
    cfg.slow_factor = args.slow_factor;
    if !args.sizes.is_empty() {
        cfg.sizes_bytes = args
            .sizes
            .iter()
            .map(|s| parse_size(s))
            .collect::<anyhow::Result<_>>()?;
        if cfg.sizes_bytes.windows(2).any(|w| w[0] > w[1]) {
            bail!("--sizes must run from small to large");
        }
    }
    let report = match args.backend {
        Backend::Tcp => collective::run(&cfg),
        Backend::Nccl => run_nccl(&cfg)?,
    };
    match args.format {
        Format::Json => println!("{}", serde_json::to_string(&report)?),
        Format::Table => print_table(&report),
    }
    Ok(report.verdict.exit_code())
}

/// Who takes part in a collective and how they meet.
pub(crate) struct Ring<'a> {
    /// Participants in rank order.
    pub nodes: Vec<String>,
    /// This node's rank.
    pub my_rank: usize,
    /// The job id (binds credentials, picks the port).
    pub job_id: u64,
    /// Addresses by node name; other names go to the system resolver.
    pub addrs: BTreeMap<String, IpAddr>,
    /// munged's socket, or munge's default.
    pub munge_socket: Option<&'a std::path::Path>,
    /// UIDs whose credentials are accepted.
    pub allowed: Vec<u32>,
    /// The rendezvous window.
    pub window: Window,
}

/// `--port-base`: the first port of a window that fits.
fn window_base(s: &str) -> Result<u16, String> {
    let first: u16 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a port number"))?;
    Window::standard(first).map_err(|e| e.to_string())?;
    Ok(first)
}

/// The collective's configuration, as `collective` and `step-gate` build it: the budget all in,
/// half of it for the rendezvous.
pub(crate) fn tcp_config(
    ring: Ring<'_>,
    budget: Duration,
    started: Instant,
) -> anyhow::Result<CollectiveConfig> {
    let resolver = MapResolver {
        map: ring.addrs,
        fallback: Some(SystemResolver),
    };
    let munge = match ring.munge_socket {
        Some(s) => Munge::with_socket(s),
        None => Munge::default(),
    };
    let mut rz = RendezvousConfig::new(ring.nodes, &resolver, ring.job_id, munge, ring.allowed)?;
    rz.window = ring.window;
    let mut cfg = CollectiveConfig::new(rz, ring.my_rank, started);
    cfg.budget = budget;
    cfg.rendezvous.timeout = budget / 2;
    Ok(cfg)
}

#[cfg(feature = "nccl")]
fn run_nccl(cfg: &CollectiveConfig) -> anyhow::Result<Report> {
    Ok(collective::nccl::run(cfg))
}

#[cfg(not(feature = "nccl"))]
fn run_nccl(_cfg: &CollectiveConfig) -> anyhow::Result<Report> {
    bail!("this fabric-check was built without NCCL; rebuild with `--features nccl`")
}

fn print_table(r: &Report) {
    println!(
        "collective {} job {} on {} ({} of {} ranks): {:?} in {} ms",
        r.backend,
        r.job_id,
        r.node,
        r.ranks.len(),
        r.nodes.len(),
        r.verdict,
        r.duration_ms
    );
    if let Some(e) = &r.error {
        println!("error: {e}");
    }
    println!(
        "{:>10} {:>6} {:>10} {:>10} {:>10} {:>10} {:>6} {:>9} {:>9} {:>6}",
        "bytes", "iters", "mean_us", "p50_us", "p95_us", "p99_us", "cv", "algbw", "busbw", "#wrong"
    );
    for s in &r.sizes {
        println!(
            "{:>10} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>6.3} {:>9.3} {:>9.3} {:>6}",
            s.bytes,
            s.iterations,
            s.time_us_mean,
            s.time_us_p50,
            s.time_us_p95,
            s.time_us_p99,
            s.cv,
            s.algbw_gb_s,
            s.busbw_gb_s,
            s.wrong
        );
    }
    for k in &r.ranks {
        println!(
            "rank {:>3} {:<16} in {:>8} GB/s  out {:>8} GB/s  z {:>7}{}",
            k.rank,
            k.node,
            k.in_link_gb_s.map_or("-".into(), |x| format!("{x:.3}")),
            k.out_link_gb_s.map_or("-".into(), |x| format!("{x:.3}")),
            k.robust_z.map_or("-".into(), |x| format!("{x:.1}")),
            if k.outlier { "  OUTLIER" } else { "" }
        );
    }
    for m in &r.messages {
        println!("- {m}");
    }
    if !r.missing.is_empty() {
        println!("missing: {}", r.missing.join(","));
    }
}
