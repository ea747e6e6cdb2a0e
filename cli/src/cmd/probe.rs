//! `fabric-check probe`: the node-local fabric probe (DESIGN.md "Contracts").
//!
//! Exit codes (Nagios): 0 pass, 1 warn, 2 fail, 3 the probe could not run. In `json` mode
//! stdout holds exactly one document, also when the probe could not run (`verdict: error` with
//! an `error` message); warnings go to stderr.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use fabric_core::bom::Bom;
use fabric_core::config::Config;
use fabric_core::probe::gather::Roots;
use fabric_core::probe::{self, Baseline, Finding, ProbeInput, Report, Severity, output};
use serde_json::Value;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The `fabric-check/probe/v1` document, one line.
    Json,
    /// A table grouped by device, failures first.
    Table,
    /// node_exporter textfile metrics.
    Prometheus,
}

/// Arguments of `fabric-check probe`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where sysfs is (tests and testbeds point this at a fixture tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Where procfs is (kernel release, NVIDIA driver version, hostname).
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,
    /// Read saved `ethtool -S` and `dcb pfc show` outputs from DIR/ethtool-S/IFACE and
    /// DIR/dcb-pfc/IFACE instead of running the tools (default: SYSFS_ROOT/.fabric-check when
    /// it exists).
    #[arg(long, value_name = "DIR")]
    pub tool_output_dir: Option<PathBuf>,
    /// TOML configuration: expectations and thresholds per node pattern.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// An earlier probe JSON document: enables counter deltas.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Use DIR/last.json as the baseline (unless --baseline) and save this run there.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Write this run's JSON document (with counters) to FILE atomically, for a later --baseline.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// The node name (default: the short hostname).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// A BOM written by `fabric-check bom --pin`: enables bom.drift (overrides the config's).
    #[arg(long, value_name = "FILE")]
    pub bom_pin: Option<PathBuf>,
    /// Also run `nccl.local`: a 32 MiB all-reduce over the node's GPUs (needs a build with the
    /// `nccl` feature, libcuda and libnccl; takes seconds, not milliseconds).
    #[arg(long)]
    pub nccl_local: bool,
    /// Also run `verbs.loopback`: an RC queue-pair RDMA WRITE loopback (bandwidth, latency) on
    /// every active HCA port (needs a build with the `verbs` feature; about 1 s per port).
    #[arg(long)]
    pub verbs_loopback: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
    /// Write the output to FILE atomically instead of stdout (for the Prometheus textfile
    /// collector).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

fn hostname(proc_root: &Path) -> String {
    let read = |p: &Path| std::fs::read_to_string(p.join("sys/kernel/hostname")).ok();
    read(proc_root)
        .or_else(|| read(Path::new("/proc")))
        .map(|h| h.trim().split('.').next().unwrap_or("").to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

fn info(check: &str, message: String) -> Finding {
    Finding::new(
        check,
        Severity::Info,
        None,
        None,
        Value::Null,
        Value::Null,
        message,
    )
}

/// `verbs.loopback`: info with the per-port figures, info when skipped (no RDMA devices),
/// warn when a verbs call or a completion failed (the loopback is new and untested on hardware,
/// so it does not fail a node on its own).
#[cfg(feature = "verbs")]
fn verbs_loopback(sysfs_root: &Path) -> Finding {
    use fabric_core::collective::{CollectiveError, verbs};
    const ID: &str = "verbs.loopback";
    match verbs::loopback(sysfs_root, verbs::DEFAULT_PORT_BUDGET) {
        Ok(r) => {
            let summary: Vec<String> = r
                .ports
                .iter()
                .map(|p| {
                    format!(
                        "{}/{}: {:.2} GB/s, p50 {:.2} us, p99 {:.2} us",
                        p.device, p.port, p.bw_gb_s, p.lat_us_p50, p.lat_us_p99
                    )
                })
                .collect();
            Finding::new(
                ID,
                Severity::Info,
                None,
                None,
                serde_json::to_value(&r).unwrap_or(Value::Null),
                Value::Null,
                format!("verbs loopback: {}", summary.join("; ")),
            )
        }
        Err(CollectiveError::Unavailable(why)) => {
            info(ID, format!("verbs.loopback skipped: {why}"))
        }
        Err(e) => Finding::new(
            ID,
            Severity::Warn,
            None,
            None,
            Value::Null,
            Value::Null,
            format!("verbs.loopback could not run: {e}"),
        ),
    }
}

/// Without the `verbs` feature the check says so.
#[cfg(not(feature = "verbs"))]
fn verbs_loopback(_sysfs_root: &Path) -> Finding {
    info(
        "verbs.loopback",
        "verbs.loopback skipped: this fabric-check was built without the `verbs` cargo feature"
            .into(),
    )
}

/// Everything before the checks: returns the input and notes to add as findings.
fn prepare(args: &Args, node: &str) -> anyhow::Result<(ProbeInput, Vec<Finding>)> {
    let mut notes = Vec::new();
    if !args.sysfs_root.is_dir() {
        bail!(
            "sysfs root {} is not a directory: pass --sysfs-root DIR (default /sys)",
            args.sysfs_root.display()
        );
    }
    let config = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let expect = config.for_node(node);
    let baseline = match (&args.baseline, &args.state_dir) {
        (Some(p), _) => Some(Baseline::load(p)?),
        (None, Some(dir)) => {
            let last = dir.join("last.json");
            if last.exists() {
                match Baseline::load(&last) {
                    Ok(b) => Some(b),
                    Err(e) => {
                        eprintln!("fabric-check: warning: {e}; counter deltas skipped this run");
                        notes.push(info(
                            "ib.counters",
                            format!("{e}; it is replaced by this run"),
                        ));
                        None
                    }
                }
            } else {
                None
            }
        }
        (None, None) => None,
    };
    let pin_path = args.bom_pin.clone().or_else(|| expect.bom_pin.clone());
    let bom_pin = pin_path.as_deref().map(Bom::load).transpose()?;
    let roots = Roots::for_sysfs(
        args.sysfs_root.clone(),
        args.proc_root.clone(),
        args.tool_output_dir.clone(),
    );
    Ok((
        ProbeInput {
            node: node.to_string(),
            roots,
            expect,
            baseline,
            bom_pin,
        },
        notes,
    ))
}

fn render(args: &Args, report: &Report) -> String {
    match args.format {
        Format::Json => output::json(report),
        Format::Prometheus => output::prometheus(report),
        Format::Table => {
            let colour = args.output.is_none() && std::io::stdout().is_terminal();
            output::table(report, colour)
        }
    }
}

fn emit(args: &Args, report: &Report) -> anyhow::Result<()> {
    let text = render(args, report);
    match &args.output {
        Some(p) => output::write_atomic(p, text.as_bytes()).with_context(|| {
            format!(
                "cannot write {}: check the directory exists and is writable",
                p.display()
            )
        }),
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            // A closed stdout (a pipe to `head`) is not the probe's failure.
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
            Ok(())
        }
    }
}

/// Runs the probe and returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let start = Instant::now();
    let node = args
        .node
        .clone()
        .unwrap_or_else(|| hostname(&args.proc_root));
    let (input, notes) = match prepare(&args, &node) {
        Ok(x) => x,
        Err(e) => {
            let msg = format!("{e:#}");
            eprintln!("fabric-check: error: {msg}");
            let ms = start.elapsed().as_secs_f64() * 1e3;
            emit(&args, &Report::error(&node, ms, msg))?;
            return Ok(3);
        }
    };
    let mut report = probe::run(&input);
    for n in notes {
        report.push(n);
    }
    if args.nccl_local {
        report.push(probe::nccl_local::run(32 << 20, 20));
    }
    if args.verbs_loopback {
        report.push(verbs_loopback(&args.sysfs_root));
    }
    let doc = output::json(&report);
    let mut saves: Vec<PathBuf> = args.save.iter().cloned().collect();
    if let Some(dir) = &args.state_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!(
                "fabric-check: warning: cannot create state dir {}: {e}",
                dir.display()
            );
        }
        saves.push(dir.join("last.json"));
    }
    for p in saves {
        if let Err(e) = output::write_atomic(&p, doc.as_bytes()) {
            eprintln!(
                "fabric-check: warning: cannot save {}: {e}; the next run has no baseline",
                p.display()
            );
            report.push(info(
                "ib.counters",
                format!(
                    "cannot save {}: {e}; the next run has no baseline",
                    p.display()
                ),
            ));
        }
    }
    report.duration_ms = (start.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    emit(&args, &report)?;
    Ok(report.verdict.exit_code())
}
