//! The `--fabric-check=` value as Slurm hands it over: a value that parses prints back as itself.
#![no_main]
use fabric_proto::fabric_option::FabricMode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|value: &str| {
    if let Ok(mode) = FabricMode::from_optarg(Some(value)) {
        assert_eq!(FabricMode::from_optarg(Some(mode.as_str())), Ok(mode));
    }
});
