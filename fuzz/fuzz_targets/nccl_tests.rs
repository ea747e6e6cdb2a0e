//! nccl-tests output, text (any version, launcher prefixes) and JSON.
#![no_main]
use fabric_report::accept::{nccl_json, nccl_text, read_runs};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = nccl_text::parse("fuzz.txt", text);
    let _ = nccl_json::parse("fuzz.json", text);
    let _ = read_runs("fuzz", text);
});
