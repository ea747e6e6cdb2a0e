//! `fabric-check inventory`: the node's known inventory ([`fabric_core::probe::known`]):
//! `show` prints it, `accept` records what the node has now, on purpose, with who and when.
//!
//! The first whole probe of a node records its inventory; later probes compare with it, so a
//! GPU that fell off the bus stays a fault (and `health` never resumes the node) until it is
//! back. When hardware is changed on purpose (a GPU or HCA removed or replaced, a port cabled
//! or uncabled, a VPI card flipped to Ethernet), the admin accepts the new inventory.

use std::path::PathBuf;

use anyhow::{Context, bail};
use fabric_core::probe::gather::{Roots, gather};
use fabric_core::probe::known::{self, Known, Recorded};
use fabric_core::probe::{Inventory, second_look};

/// Arguments of `fabric-check inventory`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub action: Action,
}

/// `show` or `accept`.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Print the node's known inventory and how it was recorded (exit 1 when there is none).
    Show(Where),
    /// Record what the node has now as its known inventory (replacing the one there), and say
    /// what changed. Refused while a port is training or a device file cannot be read, unless
    /// --force.
    Accept(AcceptArgs),
}

/// Which node and state folder.
#[derive(Debug, clap::Args)]
pub struct Where {
    /// The node's state folder: plugstack.conf's `state_dir=`, with `%n` expanded where it
    /// has one (the plugin's default is `/var/lib/fabric-check`).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/fabric-check")]
    pub state_dir: PathBuf,
    /// The node name (default: the short hostname).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Where procfs is (the hostname).
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,
    /// Print the record as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `inventory accept`.
#[derive(Debug, clap::Args)]
pub struct AcceptArgs {
    /// Which node and state folder.
    #[command(flatten)]
    pub at: Where,
    /// Where sysfs is (tests and testbeds point this at a fixture tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Who accepts (default: $SUDO_USER, else $USER, else the uid).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Why, kept in the record (a ticket, "GPU 3 RMA'd").
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
    /// Record the node as it is even while a port trains or a device file cannot be read.
    #[arg(long)]
    pub force: bool,
}

fn node_name(w: &Where) -> String {
    w.node
        .clone()
        .unwrap_or_else(|| super::probe::hostname(&w.proc_root))
}

fn who(by: Option<&str>) -> String {
    by.map(str::to_string)
        .or_else(|| std::env::var("SUDO_USER").ok().filter(|u| !u.is_empty()))
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| format!("uid {}", nix::unistd::getuid()))
}

/// Runs the subcommand: 0 done, 1 `show` found no record, 3 refused or could not run.
pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.action {
        Action::Show(w) => show(&w),
        Action::Accept(a) => accept(&a),
    }
}

fn show(w: &Where) -> anyhow::Result<i32> {
    let node = node_name(w);
    let path = known::known_path(&w.state_dir);
    let Some(k) = Known::load(&path, &node)? else {
        eprintln!(
            "fabric-check: {node} has no known inventory at {} yet: the first whole probe with --state-dir records one, or run `fabric-check inventory accept --state-dir {}`",
            path.display(),
            w.state_dir.display()
        );
        return Ok(1);
    };
    if w.json {
        println!("{}", serde_json::to_string_pretty(&k)?);
        return Ok(0);
    }
    println!(
        "{node}: {} ({})",
        known::summary(&k.inventory),
        k.provenance()
    );
    if let Some(n) = &k.note {
        println!("note: {n}");
    }
    for line in known::changes(&Inventory::default(), &k.inventory) {
        println!("  {}", line.trim_start_matches("+ "));
    }
    Ok(0)
}

fn accept(a: &AcceptArgs) -> anyhow::Result<i32> {
    if !a.sysfs_root.is_dir() {
        bail!(
            "sysfs root {} is not a directory: pass --sysfs-root DIR (default /sys)",
            a.sysfs_root.display()
        );
    }
    let node = node_name(&a.at);
    let path = known::known_path(&a.at.state_dir);
    // A record that cannot be read is replaced (that is what accept is for), and said.
    let old = match Known::load(&path, &node) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("fabric-check: warning: {e}; it is replaced");
            None
        }
    };
    let roots = Roots::for_sysfs(a.sysfs_root.clone(), a.at.proc_root.clone(), None);
    let snap = gather(&roots, |_| false);
    if let Some(why) = second_look::unsettled(&snap)
        && !a.force
    {
        eprintln!(
            "fabric-check: not accepted: {why}; wait until the node has settled and run it again, or pass --force to record it as it is"
        );
        return Ok(3);
    }
    let now_s = fabric_core::jobstep::now_unix();
    let mut k = Known::new(
        &node,
        Inventory::from_snapshot(&snap),
        Recorded::Accepted,
        &who(a.by.as_deref()),
        now_s,
    );
    k.note = a.note.clone();
    std::fs::create_dir_all(&a.at.state_dir).with_context(|| {
        format!(
            "cannot create the state folder {}",
            a.at.state_dir.display()
        )
    })?;
    k.save(&path)?;
    println!(
        "{node}: known inventory accepted ({}), {}",
        known::summary(&k.inventory),
        k.provenance()
    );
    match &old {
        Some(o) => {
            let changes = known::changes(&o.inventory, &k.inventory);
            if changes.is_empty() {
                println!("no change from the record it replaces ({})", o.provenance());
            } else {
                println!("changes from the record it replaces ({}):", o.provenance());
                for c in changes {
                    println!("  {c}");
                }
            }
        }
        None => println!("(the node had no readable record before)"),
    }
    Ok(0)
}
