//! `fabric-check bom`: print the node's bill of materials, or pin it to a file that the
//! probe's `bom.drift` check compares against.

use std::path::PathBuf;

use anyhow::Context;
use fabric_core::probe::gather::{Roots, gather};
use fabric_core::probe::output::write_atomic;

/// Arguments of `fabric-check bom`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where sysfs is.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Where procfs is (kernel release).
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,
    /// The node name recorded in the BOM (default: the short hostname).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Write the BOM as JSON to FILE (atomically) for `probe --bom-pin` / `[bom] pin`.
    #[arg(long, value_name = "FILE")]
    pub pin: Option<PathBuf>,
    /// Print JSON instead of `key  value` lines.
    #[arg(long)]
    pub json: bool,
}

/// Exit 0 when printed or pinned, 3 when the node could not be read.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if !args.sysfs_root.is_dir() {
        anyhow::bail!(
            "sysfs root {} is not a directory: pass --sysfs-root DIR (default /sys)",
            args.sysfs_root.display()
        );
    }
    let node = args.node.clone().unwrap_or_else(|| {
        std::fs::read_to_string(args.proc_root.join("sys/kernel/hostname"))
            .map(|h| h.trim().split('.').next().unwrap_or("").to_string())
            .unwrap_or_else(|_| "localhost".into())
    });
    // BOM reading never needs the tools (PFC is configuration, not a component).
    let mut roots = Roots::for_sysfs(args.sysfs_root.clone(), args.proc_root.clone(), None);
    roots.tools =
        fabric_core::probe::gather::ToolSource::Files(args.sysfs_root.join(".fabric-check"));
    let snap = gather(&roots, |_| false);
    for p in &snap.problems {
        if p.check == "bom.drift" {
            eprintln!(
                "fabric-check: warning: cannot use {}: {}",
                p.path.display(),
                p.message
            );
        }
    }
    let bom = snap.bom(&node);
    if let Some(pin) = &args.pin {
        write_atomic(pin, bom.to_json().as_bytes()).with_context(|| {
            format!(
                "cannot write {}: check the directory is writable",
                pin.display()
            )
        })?;
        eprintln!(
            "fabric-check: pinned {} items to {}",
            bom.items.len(),
            pin.display()
        );
        return Ok(0);
    }
    if args.json {
        print!("{}", bom.to_json());
    } else {
        print!("{}", bom.to_text());
    }
    Ok(0)
}
