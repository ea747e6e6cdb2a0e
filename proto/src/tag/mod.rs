//! The job tag: one `fabric-check/v1 ...` segment inside a job's `AdminComment`.
//!
//! The field is shared with other tools (Princeton's jobstats writes `JS1:...`), so the tag is a
//! *segment*: the marker [`MARKER`] followed by the tag in one of two [`Form`]s. Written to a
//! live job (`scontrol`, which stores the bytes as given) it is one compact JSON object; written
//! after the job ended (`sacctmgr`, whose `strip_quotes` turns `"` and `'` into backticks and
//! which lower-cases the value in Slurm 22.05) it is [`DB_FORM_PREFIX`] followed by the same JSON
//! in lower-case, padded base32 (RFC 4648), which both manglings leave intact. [`extract`] reads
//! either (and the backtick-mangled JSON older releases wrote); [`splice`] and [`splice_as`]
//! replace our segment in place or append it after a space, keeping every other byte. Both
//! read in time linear in the comment's length, however many markers it holds.
//!
//! [`JobTag::bounded_to`] keeps the JSON within a byte bound (4 KiB, [`MAX_TAG_BYTES`]): it
//! summarises passing nodes as a Slurm hostlist (`"n[1-1023]":{"verdict":"pass"}`) first, then
//! drops timings, notes and counter detail, then groups nodes with identical results under
//! hostlist keys; failing and missing nodes are kept to the last.
//!
//! What the job contributed ([`JobTag::job_reported`], [`JobTag::run`]) is bounded apart from
//! root's evidence and shrunk first: [`JobTag::scrub`] (run by every bound) caps it to its
//! share of the bound, makes every number finite (JSON has no `inf`: `serde_json` would write
//! `null`, which does not decode) and strips segment markers, backticks and control characters
//! from every string, so nothing written into the tag can end, forge or hide a segment.
//!
//! The module is cut by concern: `schema.rs` (the tag's types, [`JobTag`] and its parts),
//! `bound.rs` (the size policy: [`JobTag::bounded_to`], [`JobTag::scrub`], [`scrub_text`] and
//! the bounds), `wire.rs` (the segment in a comment: [`extract`], [`segment`], [`splice`]) and
//! `base32.rs` (the database form's encoding). Everything public is re-exported here, so the
//! paths stay `fabric_proto::tag::...`.

mod base32;
mod bound;
mod schema;
mod wire;

pub use bound::{
    JOB_SHARE_DIVISOR, MAX_NAME_CHARS, MAX_NOTE_BYTES, MAX_REPORTED_NAMES, MAX_SECONDS,
    MAX_SLOW_CLAIMS, clamp_seconds, scrub_text,
};
pub use schema::{
    CollectiveSummary, DuringJob, EttFacts, JobReported, JobTag, MAX_CLAIM_CHARS, MAX_ETT_FAILURES,
    MAX_WATCH_EVENTS, NodeResult, Reporter, RunFailure, RunSummary, SlowClaim, TagDecodeError,
    WatchEvent,
};
pub use wire::{extract, extract_as, segment, splice, splice_as};

/// The reader as it was before it was made linear: the reference the tests compare it with (and
/// the baseline of `scripts/bench-tag-reader`, whose example holds the file).
#[cfg(test)]
#[path = "../../examples/tag_reader/quadratic.rs"]
mod quadratic;

/// The segment marker, followed by one space and the JSON object.
pub const MARKER: &str = "fabric-check/v1 ";

/// Upper bound of the segment's text after the marker, in bytes (the JSON of the live form, the
/// prefix and base32 of the database form).
pub const MAX_TAG_BYTES: usize = 4096;

/// What follows the marker in the database form: `fabric-check/v1 b32:<base32 of the JSON>`.
pub const DB_FORM_PREFIX: &str = "b32:";

/// Bound of the JSON of the database form, so that its base32 (8 characters per 5 bytes) and
/// prefix stay within [`MAX_TAG_BYTES`].
pub const MAX_DB_JSON_BYTES: usize = (MAX_TAG_BYTES - DB_FORM_PREFIX.len()) / 8 * 5;

/// How the tag is written after the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Compact JSON, for `scontrol update` of a live job (stored as given).
    Live,
    /// [`DB_FORM_PREFIX`] and lower-case padded base32 of the JSON, for `sacctmgr modify job`
    /// (no quotes, no upper case: nothing its quote stripping or lower-casing changes).
    Database,
}

/// The verdict of a node or a job. Its home is [`crate::verdict`]; this is its one re-export,
/// for the tag's readers.
pub use crate::verdict::Verdict;

#[cfg(test)]
mod tests;
