//! Whatever a job writes into the spool, through the real epilogs: its `fabric-run` records and
//! step gate results (the input, split at its first NUL byte) go records → summary → payload →
//! tag, and the stored tag must stay within 4 KiB, decode, and hold root's verdict for every
//! node and root's counter evidence (`fabric_core::testing::job_files_through_the_tag`).
#![no_main]
use fabric_core::testing::job_files_through_the_tag;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let (records, results) = match bytes.iter().position(|&b| b == 0) {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, &[][..]),
    };
    let dir = std::env::temp_dir().join(format!("fabric-fuzz-records-tag-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    if let Err(why) = job_files_through_the_tag(&dir, records, results) {
        panic!("{why}");
    }
});
