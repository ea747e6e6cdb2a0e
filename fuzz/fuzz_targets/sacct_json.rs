//! `sacct --json` documents and single job objects: the fast decoder and serde agree on what
//! they accept.
#![no_main]
use fabric_report::report::sacct_json::{parse_job, parse_job_serde, read_all};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = read_all(bytes, "fuzz");
    if let Ok(fast) = parse_job(bytes) {
        if let Ok(slow) = parse_job_serde(bytes) {
            assert_eq!(format!("{fast:?}"), format!("{slow:?}"));
        }
    }
});
