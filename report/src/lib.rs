//! `fabric-report`: what platform leads and buyers read, kept apart from the node-side library.
//!
//! Crate map:
//!
//! | module | what it holds |
//! |---|---|
//! | [`cost`] | the cost model: cost per accepted run, from a TOML cost file |
//! | [`report`] | `fabric-check report`: sacct parsing (JSON and `-P`) and side-by-side reports |
//! | [`accept`] | `fabric-check accept`: nccl-tests parsing and the acceptance report |
//! | [`jobs`] | `fabric-check jobs`: jobs from `sacct -X -P` with their fabric verdict, tag decoded |
//!
//! It depends on `fabric-proto` (the job tag and its codec) and `fabric-base` only, never on
//! `fabric-core`; neither the SPANK plugin nor the wrapper links it, so plotters and
//! rust_decimal stay out of the `.so`.
//! No `unsafe` here.

pub mod accept;
pub mod cost;
pub mod jobs;
pub mod report;
