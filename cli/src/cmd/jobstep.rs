//! `fabric-check prolog`, `epilog` and `step-end`: what the SPANK plugin runs as a child process
//! (as root) around every job that asks for a check (and at the end of each of its steps). Not meant to be run by hand.
//!
//! This file only parses the plugin's words and wires the real seams (Slurm CLI, subprocess
//! probe, MUNGE rendezvous, stdout) to the library's job step: see `fabric_core::jobstep` for what
//! the prolog and the epilog do. Exit 2 asks the plugin to fail the prolog (the node is drained
//! and Slurm requeues the job elsewhere); 0 lets the job run. Stdout carries short lines the
//! plugin copies into the slurmd log.

use std::time::Instant;

use fabric_core::jobstep::{
    self, JobStep, RendezvousMeet, Seams, Setup, StdoutRelay, SubprocessRunner,
};
use fabric_core::slurm::SlurmCli;
use fabric_net::rendezvous::SystemResolver;
use fabric_proto::invocation::{Invocation, Script};

/// The words of `prolog` and `epilog`, as the plugin writes them: `--job-id N --node X --nodes L
/// --option M [--job-uid U] -- PLUGSTACK-WORDS`, parsed by [`Invocation::parse_flags`] (the
/// contract crate owns both sides of this boundary).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `--job-id N --node X --nodes HOSTLIST --option quick|full [--job-uid U] -- WORDS...`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub words: Vec<String>,
}

/// Runs `f` on a job step of `setup` with the real seams: Slurm's CLI bounded by the setup's
/// deadline, the subprocess probe, the MUNGE rendezvous and stdout.
fn with_real_seams<T>(setup: &Setup, f: impl FnOnce(&JobStep<'_>) -> T) -> T {
    let relay = StdoutRelay;
    let slurm = SlurmCli::bounded(setup.slurm_call_limit(), setup.deadline);
    let runner = SubprocessRunner {
        program: setup.plugin.probe.clone(),
    };
    let meet = RendezvousMeet {
        slurm: &slurm,
        resolver: &SystemResolver,
        hosts_file: setup.plugin.hosts_file.clone(),
        munge_socket: setup.plugin.munge_socket.clone(),
        window: setup.plugin.ports.rendezvous,
        relay: &relay,
    };
    f(&JobStep {
        setup,
        seams: Seams {
            slurm: &slurm,
            runner: &runner,
            meet: &meet,
            relay: &relay,
        },
    })
}

/// Parses, wires the real seams, and runs `script`.
fn run(script: Script, args: Args) -> anyhow::Result<i32> {
    let started = Instant::now();
    let inv = Invocation::parse_flags(script, args.words)?;
    let setup = Setup::resolve(inv, started, &StdoutRelay)?;
    let exit = with_real_seams(&setup, |step| match script {
        Script::Prolog => jobstep::prolog::run(step),
        Script::Epilog => jobstep::epilog::run(step),
        Script::StepEnd => jobstep::step_end::run(step),
        Script::Watch => unreachable!("the watch has its own entry"),
    });
    Ok(exit.code())
}

/// `fabric-check prolog`.
pub fn prolog(args: Args) -> anyhow::Result<i32> {
    run(Script::Prolog, args)
}

/// `fabric-check epilog`.
pub fn epilog(args: Args) -> anyhow::Result<i32> {
    run(Script::Epilog, args)
}

/// `fabric-check step-end`.
pub fn step_end(args: Args) -> anyhow::Result<i32> {
    run(Script::StepEnd, args)
}

/// The real seams of one action of the watch, with a fresh deadline (`timeout=` from now).
struct RealAct;

impl jobstep::watch::Act for RealAct {
    fn with_step(&self, setup: &Setup, f: &mut dyn FnMut(&JobStep<'_>)) {
        let mut fresh = setup.clone();
        fresh.deadline = jobstep::Budget::new(setup.plugin.timeout).job_step(Instant::now());
        with_real_seams(&fresh, |step| f(step));
    }

    fn detached(&self) -> Option<Box<dyn jobstep::watch::Act + Send>> {
        Some(Box::new(RealAct))
    }
}

/// `fabric-check watch`: the in-job watch of this node (see `fabric_core::jobstep::watch`).
/// Its lines go to `<state_dir>/watch-<job>.log`, which the epilog relays into the slurmd log.
pub fn watch(args: Args) -> anyhow::Result<i32> {
    use fabric_core::jobstep::watch::{OpenError, Session, Spec};
    use fabric_core::probe::gather::Roots;
    use fabric_proto::plugin_args::expand_node;
    let started = Instant::now();
    let relay = StdoutRelay;
    let inv = Invocation::parse_flags(Script::Watch, args.words)?;
    let setup = Setup::resolve(inv, started, &relay)?;
    let Some(interval) = setup.plugin.watch_interval else {
        return Ok(0);
    };
    let job = setup.inv.job_id;
    let node = setup.inv.node.clone();
    let proc_root = std::path::PathBuf::from("/proc");
    let config = expand_node(&setup.plugin.config, &node).filter(|c| c.is_file());
    let expect = match config {
        Some(p) => fabric_core::config::Config::load(&p)?.for_node(&node),
        None => fabric_core::config::Config::default().for_node(&node),
    };
    let roots = match setup
        .plugin
        .sysfs_root
        .as_deref()
        .and_then(|r| expand_node(r, &node))
    {
        Some(sysfs) => Roots::for_sysfs(sysfs, proc_root.clone(), None),
        None => Roots::system(),
    };
    // The same known inventory the prolog judged with (read only: the watch never records
    // one), so a port the prolog found unprovisioned is not news to the watch.
    let (known, _) = fabric_core::probe::known::load_for_probe(
        &fabric_core::probe::known::known_path(&setup.state_dir),
        &node,
    );
    let metrics = setup
        .plugin
        .watch_textfile
        .as_deref()
        .and_then(|p| expand_node(p, &node));
    // The epilog ends the watch with SIGTERM: caught, so the watch ends its loop and writes its
    // last line (the epilog relays it) instead of dying in a sleep.
    let term = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spec = Spec {
        snapshot: jobstep::snapshot_path(&setup.state_dir, job),
        setup,
        interval,
        proc_root,
        expect,
        roots,
        known,
        notice: true,
        metrics,
        term: term.clone(),
    };
    let mut session = match Session::open(spec, &relay) {
        Ok(s) => s,
        Err(e @ OpenError::NoSnapshot(..)) => {
            println!("watch: {e}");
            return Ok(0);
        }
        Err(e) => return Err(e.into()),
    };
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGTERM, term) {
        println!(
            "watch: cannot catch SIGTERM ({e}); the epilog's stop ends it without its last line"
        );
    }
    println!(
        "watch: started for job {job} on {node}, every {} ms{}",
        interval.as_millis(),
        match session.dated_back_s() {
            0 => String::new(),
            s => format!("; its start dated back {s} s by a fault drill"),
        }
    );
    let summary = session.run(&RealAct);
    session.stop();
    println!(
        "watch: ended after {} samples ({} of them full){}; faults seen: {}; cleared: {}",
        summary.samples,
        summary.full_samples,
        if summary.job_gone {
            ", its job no longer running"
        } else {
            ""
        },
        if summary.appeared.is_empty() {
            "none".to_owned()
        } else {
            summary.appeared.join(",")
        },
        if summary.cleared.is_empty() {
            "none".to_owned()
        } else {
            summary.cleared.join(",")
        },
    );
    Ok(0)
}
