//! sysfs attribute values: port state, rate and counters as the kernel (or a broken driver)
//! prints them.
#![no_main]
use fabric_core::probe::gather::{parse_counter, parse_rate, parse_state};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = parse_state(text);
    let _ = parse_rate(text);
    let _ = parse_counter(text);
});
