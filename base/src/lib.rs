//! `fabric-base`: the leaf under `fabric-core`, `fabric-net` and `fabric-report`: what more than
//! one of them needs and that is not a contract (contracts live in `fabric-proto`).
//!
//! Crate map:
//!
//! | module | what it holds |
//! |---|---|
//! | [`stats`] | the project's one percentile (linear interpolation, numpy's default) and median |
//! | [`exec`] | running programs by absolute path, scrubbed environment, bounded in time |
//! | [`bom`] | the node's bill of materials and drift against a pinned one (made from a probe snapshot by `fabric_core::probe::gather::Snapshot::bom`) |
//! | [`toml_error`] | one line for a TOML error, with the nearest known key |
//!
//! No `unsafe`.

pub mod bom;
pub mod exec;
pub mod stats;
pub mod toml_error;
