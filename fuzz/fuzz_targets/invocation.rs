//! The job step's words (NUL-separated here): what parses survives its own `to_argv`.
#![no_main]
use fabric_proto::invocation::{Invocation, JobStepExit};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(inv) = Invocation::parse(text.split('\0')) {
        assert_eq!(Invocation::parse(inv.to_argv()), Ok(inv));
    }
    let _ = JobStepExit::from_output(text);
});
