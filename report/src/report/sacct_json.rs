//! Streaming reader of `sacct --json` output.
//!
//! Slurm writes one document, `{"meta":..,"errors":..,"jobs":[ {job}, {job}, ... ]}` (22.05
//! pretty-prints it; a million jobs is about 5 GB). Holding it would take gigabytes, so the reader
//! *frames* the `jobs` array: a byte scanner that knows only strings, escapes and bracket depth
//! finds where each job object starts and ends in 1 MiB chunks, and worker threads decode each
//! job on its own, reading only the fields listed below and skipping the rest (steps, TRES
//! requested, CPU times...). Memory stays at a few chunks.
//!
//! The decoder (`fast.rs`) fills the same structure serde would, by hand: it reads the listed
//! fields as serde does and, when a member it does not read holds a pretty-printed object or array
//! (its opener ends the member's line), jumps to the line holding only the closer at the member's
//! indent with one SIMD search instead of reading what is inside. That inside is therefore not
//! validated: a broken `steps` list that serde would refuse is passed over. Everything else it is
//! not sure of (a type it does not expect, a duplicate field, a bad escape, an odd number) goes to
//! serde, which decodes the job or words the error exactly as before; the tests hold the two to
//! the same records. serde alone would take 1.7× the CPU and miss the 10 s target whenever the
//! machine is shared (the measured reason is in `fast.rs` and `docs/benchmarks.md`).
//!
//! Fields read, with the schemas they come from (Slurm source: `src/plugins/openapi/dbv0.0.38/
//! parse.c` `parse_job[]` for 22.05; `src/plugins/data_parser/v0.0.4x/parsers.c`
//! `PARSER_ARRAY(JOB)` for newer releases):
//!
//! | path | 22.05 (dbv0.0.38) | v0.0.40+ |
//! |---|---|---|
//! | `job_id`, `array/job_id`, `array/task_id`, `het/job_id`, `het/job_offset` | integers | integers or `{set,infinite,number}` |
//! | `partition`, `account`, `user`, `cluster`, `qos`, `nodes` (for `jobs` only) | strings | strings |
//! | `state/current` | a string (`"COMPLETED"`) | a list (`["COMPLETED"]`) |
//! | `time/{submission,eligible,start,end,elapsed}` | integers | integers or `{set,infinite,number}` |
//! | `allocation_nodes` | integer | integer |
//! | `tres/allocated` | `[{type,name,id,count}]` | the same |
//! | `comment/administrator` | string | string |
//! | `restart_cnt` | absent | integer |
//!
//! 22.05's `exit_code` says `SUCCESS` with `return_code` 0 for every normal exit (it tests only
//! `WIFEXITED`), so exit codes are not read: `state/current` is the outcome.

use std::borrow::Cow;
use std::io::Read;

use serde::Deserialize;

use super::{JobDetail, JobRecord, JobState, ReportError, tag_state, unset};

mod fast;

/// A number that is either a plain integer or the newer schema's `{set, infinite, number}`;
/// 0 where Slurm says "not set" or "unlimited" (a sentinel such as `NO_VAL`, `set: false`,
/// `infinite: true`: see [`super::unset`]).
#[derive(Debug, Default, Clone, Copy)]
struct Num(i64);

impl Num {
    /// A plain integer, 0 where it is a sentinel.
    fn of(v: i64) -> Self {
        Self(u64::try_from(v).map_or(v, unset::value))
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer or {set, infinite, number}")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Num, E> {
                Ok(Num::of(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Num, E> {
                Ok(Num(match i64::try_from(v) {
                    Ok(i) => Num::of(i).0,
                    Err(_) if unset::is_sentinel(v) => 0,
                    Err(_) => i64::MAX,
                }))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Num, E> {
                Ok(Num::of(v as i64))
            }
            fn visit_unit<E>(self) -> Result<Num, E> {
                Ok(Num(0))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Num, A::Error> {
                let mut set = true;
                let mut infinite = false;
                let mut number = 0i64;
                while let Some(k) = m.next_key::<Cow<'de, str>>()? {
                    match k.as_ref() {
                        "set" => set = m.next_value()?,
                        "infinite" => infinite = m.next_value()?,
                        "number" => number = m.next_value::<Num>()?.0,
                        _ => {
                            m.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(Num(if set && !infinite { number } else { 0 }))
            }
        }
        d.deserialize_any(V)
    }
}

/// `state/current`: a string (22.05) or a list of strings (newer).
#[derive(Debug, Default)]
struct StateName(String);

impl<'de> Deserialize<'de> for StateName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = StateName;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a state name or a list of them")
            }
            fn visit_str<E>(self, v: &str) -> Result<StateName, E> {
                Ok(StateName(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<StateName, A::Error> {
                let mut first: Option<String> = None;
                while let Some(v) = s.next_element::<Cow<'de, str>>()? {
                    // REQUEUED may be listed beside the base state; it decides the record.
                    if v == "REQUEUED" || first.is_none() {
                        first = Some(v.into_owned());
                    }
                }
                Ok(StateName(first.unwrap_or_default()))
            }
            fn visit_unit<E>(self) -> Result<StateName, E> {
                Ok(StateName::default())
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawState {
    current: StateName,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawTime {
    submission: Num,
    eligible: Num,
    start: Num,
    end: Num,
    elapsed: Num,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawComment<'a> {
    #[serde(borrow)]
    administrator: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawTresItem<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    count: Num,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawTres<'a> {
    #[serde(borrow)]
    allocated: Vec<RawTresItem<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawArray {
    job_id: Num,
    task_id: Num,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawHet {
    job_id: Num,
    job_offset: Num,
}

/// Only the fields the report needs; serde skips everything else.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawJob<'a> {
    job_id: Num,
    array: RawArray,
    het: RawHet,
    #[serde(borrow)]
    partition: Option<Cow<'a, str>>,
    #[serde(borrow)]
    account: Option<Cow<'a, str>>,
    #[serde(borrow)]
    user: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cluster: Option<Cow<'a, str>>,
    #[serde(borrow)]
    qos: Option<Cow<'a, str>>,
    state: RawState,
    time: RawTime,
    allocation_nodes: Num,
    #[serde(borrow)]
    tres: RawTres<'a>,
    #[serde(borrow)]
    comment: RawComment<'a>,
    restart_cnt: Num,
    /// The node list (`n[1-4]`), kept for [`JobDetail`] only.
    #[serde(borrow)]
    nodes: Option<Cow<'a, str>>,
}

fn s(c: Option<Cow<'_, str>>) -> String {
    c.map(Cow::into_owned).unwrap_or_default()
}

impl RawJob<'_> {
    /// The record with its [`JobDetail`] (`jobs`).
    fn into_detailed_record(self) -> JobRecord {
        let detail = JobDetail {
            job_id_raw: self.job_id.0.to_string(),
            state: self.state.current.0.clone(),
            nodelist: self.nodes.as_deref().unwrap_or_default().to_string(),
            admin_comment: self
                .comment
                .administrator
                .as_deref()
                .unwrap_or_default()
                .to_string(),
        };
        JobRecord {
            detail: Some(Box::new(detail)),
            ..self.into_record()
        }
    }

    fn into_record(self) -> JobRecord {
        let job_id = if self.array.job_id.0 > 0
            && self.array.task_id.0 >= 0
            && self.array.job_id.0 != self.job_id.0
        {
            format!("{}_{}", self.array.job_id.0, self.array.task_id.0)
        } else if self.het.job_id.0 > 0 {
            format!("{}+{}", self.het.job_id.0, self.het.job_offset.0)
        } else {
            self.job_id.0.to_string()
        };
        let mut gpus: Option<u32> = None;
        let mut typed: Option<u32> = None;
        for t in &self.tres.allocated {
            if t.kind != "gres" {
                continue;
            }
            match t.name.as_deref() {
                Some("gpu") => gpus = Some(t.count.0.max(0) as u32),
                Some(n) if n.starts_with("gpu:") => {
                    typed = Some(typed.unwrap_or(0) + t.count.0.max(0) as u32)
                }
                _ => {}
            }
        }
        JobRecord {
            job_id,
            partition: s(self.partition),
            account: s(self.account),
            user: s(self.user),
            cluster: s(self.cluster),
            qos: s(self.qos),
            state: JobState::parse(&self.state.current.0),
            submit_s: self.time.submission.0,
            eligible_s: self.time.eligible.0,
            start_s: self.time.start.0,
            end_s: self.time.end.0,
            elapsed_s: self.time.elapsed.0.max(0) as u64,
            nnodes: self.allocation_nodes.0.max(0) as u32,
            gpus: gpus.or(typed),
            restarts: unset::value16(self.restart_cnt.0).max(0) as u32,
            tag: self
                .comment
                .administrator
                .as_deref()
                .map_or(super::TagState::Absent, tag_state),
            detail: None,
        }
    }
}

/// Parses one job object (the bytes of one element of `jobs`): the fast decoder when it is sure,
/// else serde (which also words the error).
pub fn parse_job(bytes: &[u8]) -> Result<JobRecord, serde_json::Error> {
    match fast::raw_job(bytes) {
        Some(raw) => Ok(raw.into_record()),
        None => parse_job_serde(bytes),
    }
}

/// Parses one job object with serde alone (the reference the fast decoder is tested against).
pub fn parse_job_serde(bytes: &[u8]) -> Result<JobRecord, serde_json::Error> {
    serde_json::from_slice::<RawJob>(bytes).map(RawJob::into_record)
}

use super::pool::{Batch, OnBad, Parsed, Recycler, Streamed, read_full, run};

/// Bytes read at a time: a chunk stays in the reading core's cache while it is framed.
const READ_BYTES: usize = 1 << 20;

/// Bytes kept before the scan position when a chunk is carried over.
const CONTEXT: usize = 256;

/// Byte classes for the scanner outside strings.
const fn class_table() -> [u8; 256] {
    let mut t = [0u8; 256];
    t[b'"' as usize] = 1;
    t[b'{' as usize] = 2;
    t[b'[' as usize] = 2;
    t[b'}' as usize] = 3;
    t[b']' as usize] = 3;
    t[b',' as usize] = 4;
    t
}
static CLASS: [u8; 256] = class_table();

/// The framing scanner's state, kept across reads.
struct Framer {
    depth: u32,
    in_string: bool,
    /// At depth 1, the next string is a key.
    expect_key: bool,
    key_start: Option<usize>,
    last_key: Vec<u8>,
    /// Inside the `jobs` array (its elements are at depth 2).
    in_jobs: bool,
    seen_jobs: bool,
    /// Start (in the buffer) of the job being scanned.
    job_start: Option<usize>,
    jobs_done: u64,
}

/// Streams `sacct --json` from `reader`, calling `each` on a worker thread for every job, with
/// `threads` workers each owning an accumulator made by `init`. Returns the workers' accumulators
/// (merge them; a JSON input has no skipped records: a job the decoder refuses stops the run). `source_name` names the input in errors; JSON errors carry a byte offset;
/// [`ReportError::with_line_from`] turns it into a line.
pub fn stream<R, A, I, F>(
    reader: R,
    source_name: &str,
    threads: usize,
    init: I,
    each: F,
) -> Result<Streamed<A>, ReportError>
where
    R: Read,
    A: Send,
    I: Fn() -> A + Sync,
    F: Fn(&mut A, JobRecord) + Sync,
{
    stream_with(reader, source_name, threads, parse_job, init, each)
}

/// [`stream`] with the per-job decoder given (the tests run serde's alone through it).
fn stream_with<R, A, I, F>(
    mut reader: R,
    source_name: &str,
    threads: usize,
    decode: fn(&[u8]) -> Result<JobRecord, serde_json::Error>,
    init: I,
    each: F,
) -> Result<Streamed<A>, ReportError>
where
    R: Read,
    A: Send,
    I: Fn() -> A + Sync,
    F: Fn(&mut A, JobRecord) + Sync,
{
    run(
        threads,
        OnBad::Stop,
        init,
        each,
        |bytes: &[u8], index: u64| {
            decode(bytes).map(Parsed::Job).map_err(|e| {
                format!(
                    "job #{} of the jobs array is not a Slurm job record: {e} (inside the job's \
                     JSON); is this `sacct --json` output?",
                    index + 1
                )
            })
        },
        |tx, recycler| frame(&mut reader, source_name, tx, recycler),
        |offset, message| ReportError::Json {
            source_name: source_name.to_string(),
            offset,
            line: None,
            message,
        },
    )
}

/// Parses one job object with its [`JobDetail`] (the fast decoder when it is sure, else serde).
fn parse_job_detailed(bytes: &[u8]) -> Result<JobRecord, serde_json::Error> {
    match fast::raw_job(bytes) {
        Some(raw) => Ok(raw.into_detailed_record()),
        None => serde_json::from_slice::<RawJob>(bytes).map(RawJob::into_detailed_record),
    }
}

/// Reads everything into [`JobRecord`]s with their [`JobDetail`], in input order, and what
/// was noted about the input (records listed twice): `fabric-check jobs`.
pub fn read_all_detailed<R: Read>(
    reader: R,
    source_name: &str,
) -> Result<(Vec<JobRecord>, super::InputNotes), ReportError> {
    let st = stream_with(
        reader,
        source_name,
        1,
        parse_job_detailed,
        Vec::new,
        |v: &mut Vec<JobRecord>, j| v.push(j),
    )?;
    let mut accs = st.accs;
    Ok((accs.pop().unwrap_or_default(), st.notes))
}

/// Reads everything into [`JobRecord`]s (tests and small inputs).
pub fn read_all<R: Read>(reader: R, source_name: &str) -> Result<Vec<JobRecord>, ReportError> {
    let mut v = stream(
        reader,
        source_name,
        1,
        Vec::new,
        |v: &mut Vec<JobRecord>, j| v.push(j),
    )?
    .accs;
    Ok(v.pop().unwrap_or_default())
}

/// Scans the input, sending each read chunk with the whole jobs it holds to the workers (the
/// chunk is handed over, not copied; only a job cut by the chunk's end is carried over).
///
/// Fast path: a pretty-printer indents consistently, and JSON strings cannot hold a raw newline,
/// so once the first job has shown that it opens with `\n<indent>{` and closes with
/// `\n<indent>}`, every later job's end is the next `\n<indent>}`, found with one SIMD search
/// instead of a byte-by-byte walk. Compact JSON (or anything unexpected) stays on the byte path;
/// the workers' decode of every job still checks the members around what the framer found.
fn frame<R: Read>(
    reader: &mut R,
    source_name: &str,
    tx: &crossbeam_channel::Sender<Batch>,
    recycler: &Recycler,
) -> Result<(), ReportError> {
    let io_err = |source| ReportError::Io {
        source_name: source_name.to_string(),
        source,
    };
    let json_err = |offset: u64, message: String| ReportError::Json {
        source_name: source_name.to_string(),
        offset,
        line: None,
        message,
    };
    // `store[..filled]` holds the input from `base` on.
    let mut store: Vec<u8> = recycler.get(READ_BYTES);
    let mut filled = 0usize;
    // Input offset of buf[0].
    let mut base: u64 = 0;
    let mut pos = 0usize;
    let mut st = Framer {
        depth: 0,
        in_string: false,
        expect_key: false,
        key_start: None,
        last_key: Vec::new(),
        in_jobs: false,
        seen_jobs: false,
        job_start: None,
        jobs_done: 0,
    };
    // `\n<indent>}` once learnt from the first job.
    let mut fast_end: Option<Vec<u8>> = None;
    let mut finder: Option<memchr::memmem::Finder<'static>> = None;
    let mut started = false;
    loop {
        if store.len() < filled + READ_BYTES {
            store.resize(filled + READ_BYTES, 0);
        }
        let n = read_full(reader, &mut store[filled..filled + READ_BYTES]).map_err(io_err)?;
        filled += n;
        let buf = &store[..filled];
        if n == 0 {
            break;
        }
        if !started {
            let first = buf.iter().position(|b| !b.is_ascii_whitespace());
            if let Some(i) = first {
                started = true;
                if buf[i] != b'{' {
                    return Err(json_err(
                        base + i as u64,
                        "this is not `sacct --json` output (it does not start with `{`); \
                         for `sacct -P` text use --input-format text"
                            .into(),
                    ));
                }
            }
        }
        let mut items = recycler.items();
        'scan: while pos < buf.len() {
            if st.in_string {
                match memchr::memchr2(b'"', b'\\', &buf[pos..]) {
                    None => pos = buf.len(),
                    Some(i) => {
                        let at = pos + i;
                        if buf[at] == b'\\' {
                            if at + 1 >= buf.len() {
                                // The escaped byte is in the next read: stop before the backslash.
                                pos = at;
                                break;
                            }
                            pos = at + 2;
                        } else {
                            st.in_string = false;
                            pos = at + 1;
                            if let Some(k) = st.key_start.take() {
                                st.last_key.clear();
                                st.last_key.extend_from_slice(&buf[k + 1..at]);
                                st.expect_key = false;
                            }
                        }
                    }
                }
                continue;
            }
            if let (Some(j), Some(f), Some(pat)) =
                (st.job_start, finder.as_ref(), fast_end.as_ref())
            {
                // Fast path: the job's end is the next `\n<indent>}`.
                match f.find(&buf[pos..]) {
                    Some(i) => {
                        let close = pos + i + pat.len() - 1;
                        items.push((j, close + 1, base + j as u64, st.jobs_done));
                        st.jobs_done += 1;
                        st.job_start = None;
                        st.depth = 2;
                        pos = close + 1;
                    }
                    None => {
                        // Not in this chunk: look again from a little before the end next time.
                        pos = buf.len().saturating_sub(pat.len()).max(j + 1);
                        break 'scan;
                    }
                }
                continue;
            }
            let b = buf[pos];
            match CLASS[b as usize] {
                0 => {}
                1 => {
                    st.in_string = true;
                    if st.depth == 1 && st.expect_key {
                        st.key_start = Some(pos);
                    }
                }
                2 => {
                    st.depth += 1;
                    if st.depth == 1 {
                        st.expect_key = true;
                    } else if st.depth == 2 && b == b'[' && st.last_key == b"jobs" && !st.seen_jobs
                    {
                        st.in_jobs = true;
                        st.seen_jobs = true;
                    } else if st.depth == 3 && st.in_jobs {
                        if b != b'{' {
                            return Err(json_err(
                                base + pos as u64,
                                format!(
                                    "job #{} of the jobs array is not an object",
                                    st.jobs_done + 1
                                ),
                            ));
                        }
                        st.job_start = Some(pos);
                        // Keep the fast path only for jobs that open the same way as the first.
                        if let Some(pat) = &fast_end {
                            let ind = &pat[..pat.len() - 1];
                            let opens_alike = pos >= ind.len() && &buf[pos - ind.len()..pos] == ind;
                            if !opens_alike {
                                fast_end = None;
                                finder = None;
                            }
                        }
                    }
                }
                3 => {
                    if st.depth == 0 {
                        return Err(json_err(base + pos as u64, "unbalanced `}` or `]`".into()));
                    }
                    st.depth -= 1;
                    if st.depth == 2 && st.in_jobs {
                        if let Some(j) = st.job_start.take() {
                            items.push((j, pos + 1, base + j as u64, st.jobs_done));
                            if st.jobs_done == 0 {
                                fast_end = learn_indent(buf, j, pos);
                                finder = fast_end
                                    .as_ref()
                                    .map(|p| memchr::memmem::Finder::new(p).into_owned());
                            }
                            st.jobs_done += 1;
                        }
                    } else if st.depth == 1 && st.in_jobs {
                        st.in_jobs = false;
                    }
                }
                _ => {
                    if st.depth == 1 {
                        st.expect_key = true;
                    }
                }
            }
            pos += 1;
        }
        // Carry what is still needed (the job or key being scanned) into the next chunk, and a
        // little before it: the indent that a job opening early in the next chunk is checked
        // against (without it, one job in the wrong place would end the fast path for the rest).
        let keep_from = st
            .job_start
            .or(st.key_start)
            .unwrap_or(pos)
            .min(pos)
            .min(pos.saturating_sub(CONTEXT));
        let carry = buf.len() - keep_from;
        let mut next = recycler.get(carry + READ_BYTES);
        next[..carry].copy_from_slice(&buf[keep_from..]);
        filled = carry;
        base += keep_from as u64;
        pos -= keep_from;
        if let Some(j) = st.job_start.as_mut() {
            *j -= keep_from;
        }
        if let Some(k) = st.key_start.as_mut() {
            *k -= keep_from;
        }
        let chunk = std::mem::replace(&mut store, next);
        if !items.is_empty() && tx.send(Batch { data: chunk, items }).is_err() {
            return Ok(());
        }
    }
    if !started {
        return Err(json_err(
            0,
            "the input is empty; did sacct print anything?".into(),
        ));
    }
    if st.depth != 0 || st.in_string || st.job_start.is_some() {
        let at = st.job_start.map_or(base + pos as u64, |j| base + j as u64);
        return Err(json_err(
            at,
            format!(
                "the input ends early (truncated after {} complete jobs, inside {}); \
                 re-run sacct and keep its whole output",
                st.jobs_done,
                if st.job_start.is_some() {
                    "a job"
                } else {
                    "the document"
                }
            ),
        ));
    }
    if !st.seen_jobs {
        return Err(json_err(
            0,
            "the JSON has no top-level `jobs` array; is this `sacct --json` output?".into(),
        ));
    }
    Ok(())
}

/// `\n<indent>}` when the job at `open..=close` opens after `\n<indent>` and closes after the
/// same `\n<indent>` (spaces or tabs only).
fn learn_indent(buf: &[u8], open: usize, close: usize) -> Option<Vec<u8>> {
    let line_start = buf[..open].iter().rposition(|b| *b == b'\n')?;
    let ind = &buf[line_start + 1..open];
    if !ind.iter().all(|b| *b == b' ' || *b == b'\t') {
        return None;
    }
    let close_line = buf[..close].iter().rposition(|b| *b == b'\n')?;
    if &buf[close_line + 1..close] != ind {
        return None;
    }
    let mut pat = Vec::with_capacity(ind.len() + 2);
    pat.push(b'\n');
    pat.extend_from_slice(ind);
    pat.push(b'}');
    Some(pat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::TagState;

    fn job_2205(id: u64, state: &str, comment: &str) -> String {
        format!(
            r#"{{"account":"ml","comment":{{"administrator":{},"job":"","system":""}},
            "allocation_nodes":2,"array":{{"job_id":0,"limits":{{"max":{{"running":{{"tasks":0}}}}}},"task":null,"task_id":null}},
            "cluster":"c1","exit_code":{{"status":"SUCCESS","return_code":0}},"job_id":{id},"name":"t\"x",
            "nodes":"n[1-2]","partition":"ib","qos":"normal","state":{{"current":"{state}","reason":"None"}},
            "steps":[{{"step":{{"id":"{id}.batch"}},"nodes":{{"list":["n1"]}}}}],
            "time":{{"elapsed":3600,"eligible":100,"end":3800,"start":200,"submission":90,"limit":600}},
            "tres":{{"allocated":[{{"type":"cpu","name":null,"id":1,"count":16}},{{"type":"gres","name":"gpu","id":1001,"count":16}}],"requested":[]}},
            "user":"ann"}}"#,
            serde_json::to_string(comment).unwrap()
        )
    }

    #[test]
    fn a_22_05_document_streams_every_job_with_its_tag() {
        let doc = format!(
            "{{\n \"meta\": {{\"plugin\": {{\"type\": \"openapi/dbv0.0.38\"}}}},\n \"errors\": [],\n \"jobs\": [\n{},\n{}\n]\n}}\n",
            job_2205(
                7,
                "COMPLETED",
                "JS1:x fabric-check/v1 {\"verdict\":\"pass\",\"nnodes\":2}"
            ),
            job_2205(8, "NODE_FAIL", "")
        );
        let jobs = read_all(doc.as_bytes(), "t.json").unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].job_id, "7");
        assert_eq!(jobs[0].gpus, Some(16));
        assert_eq!(jobs[0].nnodes, 2);
        assert_eq!(jobs[0].elapsed_s, 3600);
        assert!(matches!(&jobs[0].tag, TagState::Present(t) if t.nnodes == 2));
        assert_eq!(jobs[1].state, JobState::NodeFail);
        assert_eq!(jobs[1].tag, TagState::Absent);
    }

    #[test]
    fn pretty_printed_jobs_take_the_fast_path_and_keep_every_field() {
        let jobs: Vec<serde_json::Value> = (1..=5)
            .map(|i| serde_json::from_str(&job_2205(i, "COMPLETED", "x\n    }\n")).unwrap())
            .collect();
        let doc = serde_json::to_string_pretty(
            &serde_json::json!({"meta": {}, "jobs": jobs, "errors": []}),
        )
        .unwrap();
        let got = read_all(doc.as_bytes(), "t.json").unwrap();
        assert_eq!(
            got.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(),
            ["1", "2", "3", "4", "5"]
        );
        assert!(
            got.iter()
                .all(|j| j.gpus == Some(16) && j.elapsed_s == 3600)
        );
        // A later job indented differently falls back to the byte path.
        let mixed = doc.replacen("\n    {\n      \"account\"", "\n{\"account\"", 3);
        let got = read_all(mixed.as_bytes(), "t.json").unwrap();
        assert_eq!(got.len(), 5);
    }

    #[test]
    fn tiny_reads_frame_the_same_jobs() {
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(out.len()).min(3);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let doc = format!(
            "{{\"jobs\":[{},{}],\"meta\":{{}}}}",
            job_2205(1, "FAILED", "fabric-check/v1 {\"nnodes\":1}"),
            job_2205(2, "COMPLETED", "a\\\\b")
        );
        let jobs = read_all(Trickle(doc.as_bytes()), "t.json").unwrap();
        assert_eq!(
            jobs.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(),
            ["1", "2"]
        );
    }

    #[test]
    fn a_truncated_document_is_reported_with_its_offset() {
        let doc = format!(
            "{{\"jobs\":[{},{}",
            job_2205(1, "FAILED", ""),
            &job_2205(2, "FAILED", "")[..50]
        );
        let err = read_all(doc.as_bytes(), "t.json").unwrap_err().to_string();
        assert!(err.contains("truncated after 1 complete jobs"), "{err}");
    }

    #[test]
    fn a_document_without_jobs_is_not_sacct_output() {
        let err = read_all(&b"{\"meta\":{}}"[..], "t.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no top-level `jobs` array"), "{err}");
        let err = read_all(&b"JobID|State\n"[..], "t.txt")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--input-format text"), "{err}");
    }

    #[test]
    fn a_job_of_the_wrong_shape_names_its_index() {
        let doc = "{\"jobs\":[{\"job_id\":\"seven\"}]}";
        let err = read_all(doc.as_bytes(), "t.json").unwrap_err().to_string();
        assert!(err.contains("job #1"), "{err}");
    }

    #[test]
    fn the_newer_schema_reads_lists_and_number_objects() {
        let doc = r#"{"jobs":[{"job_id":9,"restart_cnt":2,"partition":"roce",
            "state":{"current":["FAILED"],"reason":"None"},
            "time":{"elapsed":60,"eligible":{"set":true,"infinite":false,"number":10},"start":20,"end":80,"submission":5,
                    "limit":{"set":true,"infinite":false,"number":60}},
            "array":{"job_id":0,"task_id":{"set":false,"infinite":false,"number":0}},
            "comment":{"administrator":"","job":"","system":""},
            "allocation_nodes":1,"tres":{"allocated":[{"type":"gres","name":"gpu:h100","id":1002,"count":8}]}}],
            "meta":{},"errors":[],"warnings":[]}"#;
        let jobs = read_all(doc.as_bytes(), "t.json").unwrap();
        assert_eq!(jobs[0].state, JobState::Failed);
        assert_eq!(jobs[0].eligible_s, 10);
        assert_eq!(jobs[0].restarts, 2);
        assert_eq!(jobs[0].gpus, Some(8));
        assert_eq!(jobs[0].job_id, "9");
    }

    /// The generated fixtures repeated into a history of several chunks, read on three threads
    /// with the fast decoder and on one with serde alone, give the very same report; so does the
    /// same history as `-P` text.
    #[test]
    fn a_history_of_many_chunks_gives_the_same_report_whatever_the_decoder_and_threads() {
        use crate::report::aggregate::{Acc, Options, finish};
        use crate::report::{GroupBy, sacct_text};
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/sacct/generated/"
        );
        let opts = Options {
            group_by: GroupBy::Partition,
            window: None,
        };
        let each = |a: &mut Acc, j: JobRecord| a.add(j, &opts);
        let times = 12;
        let mut reports = Vec::new();
        let mut dups = Vec::new();
        for file in ["history-22.05.json", "history-v0.0.40.json"] {
            let doc = std::fs::read_to_string(format!("{dir}{file}")).unwrap();
            let open = doc.find("\"jobs\": [\n").unwrap() + "\"jobs\": [\n".len();
            let close = doc.rfind("\n  ]").unwrap();
            let jobs = &doc[open..close];
            let mut big = doc[..open].to_string();
            for k in 0..times {
                if k > 0 {
                    big.push_str(",\n");
                }
                big.push_str(jobs);
            }
            big.push_str(&doc[close..]);
            assert!(big.len() > 3 << 20, "several chunks");
            for (decode, threads) in [
                (parse_job as fn(&[u8]) -> _, 3),
                (parse_job_serde as fn(&[u8]) -> _, 1),
            ] {
                let st =
                    stream_with(big.as_bytes(), file, threads, decode, Acc::default, each).unwrap();
                dups.push(st.notes.duplicates);
                reports.push(finish(Acc::merge_all(st.accs), &opts, None));
            }
        }
        let text = std::fs::read_to_string(format!("{dir}history.txt")).unwrap();
        let (header, lines) = text.split_once('\n').unwrap();
        let big_text = format!("{header}\n{}", lines.repeat(times));
        let st = sacct_text::stream(big_text.as_bytes(), "t.txt", 3, Acc::default, each).unwrap();
        dups.push(st.notes.duplicates);
        reports.push(finish(Acc::merge_all(st.accs), &opts, None));
        // Every copy after the first is the same records again: read, and counted once.
        let records = reports[0].groups.iter().map(|g| g.records).sum::<u64>();
        assert!(records > 40, "{records}");
        assert_eq!(dups, vec![records * (times as u64 - 1); dups.len()]);
        for r in &reports[1..] {
            assert_eq!(r, &reports[0]);
        }
    }
}
