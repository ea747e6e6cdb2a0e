//! `ethtool -S` and `dcb pfc show` output of any driver and version.
#![no_main]
use fabric_core::probe::gather::{parse_dcb_pfc, parse_ethtool_stats};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = parse_ethtool_stats(text);
    if let Some(prios) = parse_dcb_pfc(text) {
        assert!(prios.iter().all(|p| *p < 8), "PFC priorities are 0-7: {prios:?}");
    }
});
