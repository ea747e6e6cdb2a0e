//! Links `fabric-run` as a position-dependent executable (`-no-pie`).
//!
//! fabric-run sits in front of every job step, so its start-up is paid per command. As a PIE, the
//! dynamic loader applies about 12 000 relative relocations at every start (panic locations,
//! vtables, clap's and regex's tables), writing to some 60 pages of RELRO data that each cost a
//! copy-on-write page fault. A fixed-address executable has none of that: the start-up's page
//! faults drop from about 205 to about 145, fewer than coreutils `timeout` (scripts/bench-wrapper).
//! fabric-run runs as the job's user, not as root; shared libraries and the stack keep ASLR.
fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
}
