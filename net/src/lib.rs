//! `fabric-net`: fabric-check's network protocols, apart from the node-side library so that
//! their FFI lives here and `fabric-core` has no `unsafe`.
//!
//! Crate map:
//!
//! | module | what it holds |
//! |---|---|
//! | [`rendezvous`] | MUNGE-authenticated rendezvous of a job's nodes at rank 0 |
//! | [`sealed`] | datagrams sealed with a job's session key (the straggler figures between two rendezvous) |
//! | [`collective`] | `fabric-check collective`: ring all-reduce (TCP, NCCL, RDMA verbs), figures, outlier nodes |
//!
//! `fabric-core` reaches these through its job step's seams (`Meet` for the rendezvous,
//! `ProbeRunner` for the collective), whose real implementations call in here.
//!
//! The workspace denies `unsafe`; two files here allow it, each block with a `// SAFETY:`
//! comment: `rendezvous/libmunge.rs`, libmunge loaded at run time for the rendezvous's MUNGE
//! credentials, and `collective/verbs/ffi.rs`, the libibverbs FFI, compiled only with the
//! `verbs` feature.

pub mod collective;
pub mod rendezvous;
pub mod sealed;
