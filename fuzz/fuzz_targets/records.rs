//! fabric-run records from a user-writable spool: decoded, summarised, never trusted.
#![no_main]
use fabric_core::record::{ReadLimits, parse_records, summarize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let recs = parse_records(bytes, &ReadLimits::default());
    let _ = summarize(&recs);
});
