//! `fabric-run` records: the types and writer live in [`fabric_proto::record`] (the wrapper links
//! that crate alone); reading them back in the root-run epilog, from a user-writable spool, is
//! here ([`summarize_records`]): no symlinks followed, regular files only, bounded bytes,
//! malformed lines skipped and counted. The per-job folder is made by root in the prolog
//! ([`prepare_job_dir`]) and read and emptied by the epilog through one verified descriptor
//! ([`JobDir`]); the epilog and a step's end share the job's files through [`open_job_dir`],
//! [`read_node_records`] and [`forget_peer_runs`] (`job_files.rs`).
//!
//! Every field, with its unit, is documented in `docs/records.md`.

mod job_files;
mod spool;
mod summary;

pub use job_files::{
    forget_peer_runs, open_job_dir, peer_runs_path, read_node_records, step_ends_path,
    written_run_path,
};
pub use spool::{FOREIGN_PREFIX, JOB_DIR_MODE, JobDir, Prepared, SpoolError, prepare_job_dir};
pub use summary::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_LINE_BYTES, ReadLimits, RecordError, Records, merge_nodes,
    parse_records, read_records, read_user_file, summarize, summarize_records,
};

#[cfg(test)]
mod tests {
    #[test]
    fn the_contract_crates_o_nofollow_is_the_kernels() {
        assert_eq!(
            fabric_proto::record::O_NOFOLLOW,
            rustix::fs::OFlags::NOFOLLOW.bits() as i32
        );
    }
}
