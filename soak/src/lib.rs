//! `fabric-soak`: the false-drain rate of fabric-check, measured.
//!
//! Many emulated node-days of benign fabric noise drawn from how real nodes behave (a healthy
//! link's occasional symbol errors, reboots and driver reloads that reset counters and retrain
//! links, saturated counters, checkpoint bursts, background load, a `slurmctld` restart, clock
//! steps) run through the real probe, its thresholds, the prolog's, epilog's, health check's and
//! in-job watch's decisions and the mass-drain guard, with fakes standing in only for Slurm and
//! the hardware. A drain of a node with no real fault is a false drain; a few real faults are
//! injected as controls, to show the harness sees a drain at all. See docs/checks.md, "False
//! drains: the soak", and `scripts/bench-soak`.
//!
//! | module | what it holds |
//! |---|---|
//! | [`noise`] | the noise kinds and the model's rates and sizes |
//! | [`node`] | one node's sysfs tree (written by `fabric-testkit`) and the changes noise makes |
//! | [`seams`] | the in-process probe runner, watch sampler and pace on the emulated clock |
//! | [`run`] | the loop: node lives in lockstep, one emulated hour per turn |
//! | [`stats`] | the rate per 1,000 node-days and its exact upper 95 % bound |
//! | [`report`] | the per-kind table and the summary line |
//!
//! Dependencies point inward: `fabric-core` (the job step, the probe, its fakes) and
//! `fabric-testkit` (the fixture trees). Nothing here runs on a production node.

pub mod node;
pub mod noise;
pub mod report;
pub mod run;
pub mod seams;
pub mod stats;
