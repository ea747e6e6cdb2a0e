//! `sacct -P` output, any layout.
#![no_main]
use fabric_report::report::sacct_text::read_all;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = read_all(bytes, "fuzz");
});
