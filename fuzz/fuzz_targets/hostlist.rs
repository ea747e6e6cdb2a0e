//! Slurm hostlists: parse, match and expand stay within the expansion bound.
#![no_main]
use fabric_proto::hostlist::Hostlist;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(h) = Hostlist::parse(text) {
        let _ = h.matches("n1");
        if let Ok(names) = h.expand() {
            for n in names.iter().take(64) {
                assert!(h.matches(n), "{text:?} expands to {n:?} but does not match it");
            }
        }
    }
});
