//! The TOML configuration: parsed, then asked for a node's expectations.
#![no_main]
use std::path::Path;

use fabric_core::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(cfg) = Config::parse(text, Path::new("fuzz.toml")) {
        let _ = cfg.for_node("gpu001");
    }
});
