//! `--fabric-check-spares=` as Slurm hands it over (the job user's), `slurm.conf`'s
//! `SchedulerParameters` as the submitting command reads it, the per-node count lists of the
//! batch step's environment (the job's), and the leader's batch-step file: a value that parses
//! reads back as itself, counts expand and compress back, nothing panics.
#![no_main]
use fabric_proto::spares::{
    BatchEnv, compress_counts, expand_counts, parse_spares, shrink_disabled,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(k) = parse_spares(Some(text)) {
        assert_eq!(parse_spares(Some(&k.to_string())), Ok(k));
    }
    let _ = shrink_disabled(text);
    if let Some(counts) = expand_counts(text) {
        assert_eq!(expand_counts(&compress_counts(&counts)), Some(counts));
    }
    if let Ok(env) = BatchEnv::parse(text) {
        let _ = env.variables(|_| Some(text.to_owned()));
    }
});
