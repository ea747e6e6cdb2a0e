//! Slurm hostlists: parse, match and expand stay within the expansion bound, which is counted
//! (names and bytes) before anything is expanded.
#![no_main]
use fabric_proto::hostlist::Hostlist;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(h) = Hostlist::parse(text) {
        let _ = h.matches("n1");
        let (count, size) = (h.count(), h.expanded_bytes());
        if let Ok(names) = h.expand() {
            assert_eq!(Some(names.len() as u64), count, "{text:?}");
            assert_eq!(Some(names.iter().map(|n| n.len() as u64).sum()), size, "{text:?}");
            for n in names.iter().take(64) {
                assert!(h.matches(n), "{text:?} expands to {n:?} but does not match it");
            }
        }
    }
});
