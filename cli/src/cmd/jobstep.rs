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

/// Parses, wires the real seams, and runs `script`.
fn run(script: Script, args: Args) -> anyhow::Result<i32> {
    let started = Instant::now();
    let relay = StdoutRelay;
    let inv = Invocation::parse_flags(script, args.words)?;
    let setup = Setup::resolve(inv, started, &relay)?;
    let slurm = SlurmCli::bounded(setup.slurm_call_limit(), setup.deadline);
    let runner = SubprocessRunner {
        program: setup.plugin.probe.clone(),
    };
    let meet = RendezvousMeet {
        slurm: &slurm,
        resolver: &SystemResolver,
        hosts_file: setup.plugin.hosts_file.clone(),
        munge_socket: setup.plugin.munge_socket.clone(),
        relay: &relay,
    };
    let step = JobStep {
        setup: &setup,
        seams: Seams {
            slurm: &slurm,
            runner: &runner,
            meet: &meet,
            relay: &relay,
        },
    };
    let exit = match script {
        Script::Prolog => jobstep::prolog::run(&step),
        Script::Epilog => jobstep::epilog::run(&step),
        Script::StepEnd => jobstep::step_end::run(&step),
    };
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
