//! Links `fabric-run` as a position-dependent executable (`-no-pie`).
//!
//! fabric-run sits in front of every job step, so its start-up is paid per command. As a PIE, the
//! dynamic loader applies about 12 000 relative relocations at every start (panic locations,
//! vtables, clap's and regex's tables), writing to some 60 pages of RELRO data that each cost a
//! copy-on-write page fault. A fixed-address executable has none of that. Measured again with
//! `perf stat -r 300 -e task-clock,page-faults fabric-run -- /usr/bin/true` (release, three
//! alternating rounds): PIE 215-219 page faults and 1.46/1.72/2.36 ms of CPU, `-no-pie` 157-159
//! page faults and 1.54/1.46/1.36 ms (coreutils `timeout 1d true`: 163 faults). The faults are
//! the steady figure on a shared machine; the CPU times follow them. fabric-run runs as the
//! job's user, not as root; its stack, heap and mappings (and a dynamic build's libraries)
//! keep ASLR.
//!
//! What ships goes one step further: `scripts/build-fabric-run` links the same executable
//! statically (`crt-static` with `relocation-model=static`, which `-no-pie` needs: a PIC static
//! build under `-no-pie` crashes at start), so no dynamic loader runs at all
//! (`docs/benchmarks.md`, "Wrapper start-up").
fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
}
