//! `fabric-check probe`: the node-local fabric probe (docs/checks.md, "The document").
//!
//! Exit codes (Nagios): 0 pass, 1 warn, 2 fail, 3 the probe could not run. In `json` mode
//! stdout holds exactly one document, also when the probe could not run (`verdict: error` with
//! an `error` message); warnings go to stderr.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use fabric_base::bom::Bom;
use fabric_core::config::Config;
use fabric_core::probe::gather::Roots;
use fabric_core::probe::{self, Baseline, ProbeInput, Report, known, output};
use fabric_proto::verdict::{Finding, Severity};
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
    /// The node's known inventory to compare with (default: DIR/known.json of --state-dir,
    /// which the first whole probe records; `fabric-check inventory accept` replaces it).
    #[arg(long, value_name = "FILE")]
    pub known: Option<PathBuf>,
    /// When the first look sees a device or port gone or a device file unreadable (what a
    /// driver reload, a firmware reset or a port in training also shows), look again after MS
    /// milliseconds; 0: one look.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub second_look_ms: u64,
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
    /// Also run `verbs.loopback` from GPU memory (GPUDirect RDMA: dma-buf, else nvidia_peermem)
    /// on CUDA device N, counted within CUDA_VISIBLE_DEVICES (default 0: the first visible GPU);
    /// implies --verbs-loopback. Needs a build with the `gpudirect` feature; when GPUDirect is
    /// unavailable the GPU run is skipped with the reason, never a failure.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "0")]
    pub verbs_gpu: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
    /// Write the output to FILE atomically instead of stdout (for the Prometheus textfile
    /// collector).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// The short hostname from `proc_root` (else the real `/proc`), or `localhost`.
pub(crate) fn hostname(proc_root: &Path) -> String {
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
/// so it does not fail a node on its own). `gpu`: also from GPU memory on that CUDA device.
#[cfg(feature = "verbs")]
fn verbs_loopback(sysfs_root: &Path, gpu: Option<usize>) -> Finding {
    use fabric_net::collective::{CollectiveError, verbs};
    match verbs::loopback(sysfs_root, verbs::DEFAULT_PORT_BUDGET, gpu) {
        Ok(r) => loopback_finding(&r),
        Err(CollectiveError::Unavailable(why)) => {
            info(VERBS_ID, format!("verbs.loopback skipped: {why}"))
        }
        Err(e) => Finding::new(
            VERBS_ID,
            Severity::Warn,
            None,
            None,
            Value::Null,
            Value::Null,
            format!("verbs.loopback could not run: {e}"),
        ),
    }
}

#[cfg(feature = "verbs")]
const VERBS_ID: &str = fabric_proto::check_id::VERBS_LOOPBACK;

/// The finding of a loopback that ran: each port's host figures, its GPU figures next to them,
/// and the GPU run's note. A skipped GPU run stays `info`; a failed one is a `warn` (the host
/// figures are kept).
#[cfg(feature = "verbs")]
fn loopback_finding(r: &fabric_net::collective::verbs::LoopbackReport) -> Finding {
    let mut parts: Vec<String> = r
        .ports
        .iter()
        .map(|p| {
            format!(
                "{}/{} {}: {:.2} GB/s, p50 {:.2} us, p99 {:.2} us",
                p.device, p.port, p.memory, p.bw_gb_s, p.lat_us_p50, p.lat_us_p99
            )
        })
        .collect();
    let mut severity = Severity::Info;
    if let Some(g) = &r.gpu {
        let which = match (&g.pci, &g.name) {
            (Some(pci), Some(name)) => format!("GPU {} ({pci}, {name})", g.gpu),
            (Some(pci), None) => format!("GPU {} ({pci})", g.gpu),
            _ => format!("GPU {}", g.gpu),
        };
        if let Some(why) = &g.skipped {
            parts.push(format!("{which} memory skipped: {why}"));
        }
        if !g.errors.is_empty() {
            severity = Severity::Warn;
            parts.push(format!("{which} memory failed: {}", g.errors.join("; ")));
        }
    }
    Finding::new(
        VERBS_ID,
        severity,
        None,
        None,
        serde_json::to_value(r).unwrap_or(Value::Null),
        Value::Null,
        format!("verbs loopback: {}", parts.join("; ")),
    )
}

/// Without the `verbs` feature the check says so.
#[cfg(not(feature = "verbs"))]
fn verbs_loopback(_sysfs_root: &Path, _gpu: Option<usize>) -> Finding {
    info(
        fabric_proto::check_id::VERBS_LOOPBACK,
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
    let known_path = args
        .known
        .clone()
        .or_else(|| args.state_dir.as_deref().map(known::known_path));
    let known_rec = match &known_path {
        Some(p) => {
            let (k, note) = known::load_for_probe(p, node);
            notes.extend(note);
            k
        }
        None => None,
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
            known: known_rec,
            second_look: (args.second_look_ms > 0)
                .then(|| std::time::Duration::from_millis(args.second_look_ms)),
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
    if args.verbs_loopback || args.verbs_gpu.is_some() {
        report.push(verbs_loopback(&args.sysfs_root, args.verbs_gpu));
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
                    "{}{}: {e}; the next run has no baseline",
                    fabric_core::jobstep::results::SAVE_FAILED,
                    p.display()
                ),
            ));
        }
    }
    // The first whole look (or a device gone on a node without a record) records the node's
    // known inventory; only `fabric-check inventory accept` replaces it.
    if let Some(dir) = &args.state_dir {
        let path = args.known.clone().unwrap_or_else(|| known::known_path(dir));
        let now_s = fabric_core::jobstep::now_unix();
        if let Some(f) = known::record_after_probe(&path, &input, &report, now_s) {
            report.push(f);
        }
    }
    report.duration_ms = (start.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    emit(&args, &report)?;
    Ok(report.verdict.exit_code())
}

#[cfg(all(test, feature = "verbs"))]
mod tests {
    use super::*;
    use fabric_net::collective::verbs::{
        GpuRegistration, GpuRun, LoopbackReport, Memory, PortLoopback,
    };

    fn port(memory: Memory, bw_gb_s: f64) -> PortLoopback {
        PortLoopback {
            device: "mlx5_0".into(),
            port: 1,
            link_layer: "InfiniBand".into(),
            lid: 7,
            gid_index: None,
            mtu_bytes: 4096,
            memory,
            bw_msg_bytes: 65536,
            bw_writes: 5000,
            bw_gb_s,
            lat_msg_bytes: 8,
            lat_samples: 1000,
            lat_us_p50: 2.5,
            lat_us_p99: 3.5,
            duration_ms: 900,
        }
    }

    fn gpu_run() -> GpuRun {
        GpuRun {
            gpu: 0,
            pci: Some("0000:13:00.0".into()),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            registration: None,
            skipped: None,
            errors: Vec::new(),
        }
    }

    #[test]
    fn gpu_figures_follow_the_host_figures_with_the_gpu_and_its_registration() {
        let gpu = Memory::Gpu {
            gpu: 0,
            registration: GpuRegistration::DmaBuf,
        };
        let r = LoopbackReport {
            ports: vec![port(Memory::Host, 24.0), port(gpu, 22.0)],
            gpu: Some(GpuRun {
                registration: Some(GpuRegistration::DmaBuf),
                ..gpu_run()
            }),
        };
        let f = loopback_finding(&r);
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(
            f.message,
            "verbs loopback: mlx5_0/1 host: 24.00 GB/s, p50 2.50 us, p99 3.50 us; \
             mlx5_0/1 gpu0 dma_buf: 22.00 GB/s, p50 2.50 us, p99 3.50 us"
        );
        assert_eq!(f.observed["ports"][0]["memory"]["kind"], "host");
        assert_eq!(f.observed["ports"][1]["memory"]["kind"], "gpu");
        assert_eq!(f.observed["ports"][1]["memory"]["gpu"], 0);
        assert_eq!(f.observed["ports"][1]["memory"]["registration"], "dma_buf");
        assert_eq!(f.observed["gpu"]["pci"], "0000:13:00.0");
    }

    #[test]
    fn a_skipped_gpu_run_is_an_info_note_next_to_the_host_figures() {
        let r = LoopbackReport {
            ports: vec![port(Memory::Host, 24.0)],
            gpu: Some(GpuRun {
                skipped: Some("GPUDirect RDMA unavailable: no dma-buf support".into()),
                ..gpu_run()
            }),
        };
        let f = loopback_finding(&r);
        assert_eq!(f.severity, Severity::Info);
        assert!(
            f.message.contains("mlx5_0/1 host: 24.00 GB/s"),
            "{}",
            f.message
        );
        assert!(
            f.message.contains(
                "GPU 0 (0000:13:00.0, NVIDIA H100 80GB HBM3) memory skipped: GPUDirect RDMA unavailable"
            ),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_failed_gpu_run_warns_and_keeps_the_host_figures() {
        let r = LoopbackReport {
            ports: vec![port(Memory::Host, 24.0)],
            gpu: Some(GpuRun {
                registration: Some(GpuRegistration::Peermem),
                errors: vec!["mlx5_0/1: verbs: ibv_reg_mr failed: EFAULT".into()],
                ..gpu_run()
            }),
        };
        let f = loopback_finding(&r);
        assert_eq!(f.severity, Severity::Warn);
        assert!(
            f.message.contains("mlx5_0/1 host: 24.00 GB/s"),
            "{}",
            f.message
        );
        assert!(
            f.message
                .contains("memory failed: mlx5_0/1: verbs: ibv_reg_mr failed: EFAULT"),
            "{}",
            f.message
        );
        assert_eq!(f.observed["ports"][0]["bw_gb_s"], 24.0);
    }

    #[test]
    fn without_a_gpu_run_the_report_has_no_gpu_part() {
        let r = LoopbackReport {
            ports: vec![port(Memory::Host, 24.0)],
            gpu: None,
        };
        let f = loopback_finding(&r);
        assert!(f.observed.get("gpu").is_none(), "{}", f.observed);
        assert_eq!(f.severity, Severity::Info);
    }
}
