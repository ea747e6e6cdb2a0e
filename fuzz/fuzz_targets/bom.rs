//! Bills of materials: the pinned BOM the probe compares with, and those `accept` reads.
#![no_main]
use fabric_base::bom::Bom;
use fabric_report::accept::bom::read;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(b) = serde_json::from_str::<Bom>(text) {
        let _ = b.to_text();
    }
    let _ = read("fuzz.json", text);
});
