//! The tag's size policy: [`JobTag::bounded_to`] keeps the JSON within a byte bound, and
//! [`JobTag::scrub`] caps what the job contributed to its share, makes every number finite and
//! strips segment markers and control characters from every string.

use std::collections::BTreeMap;

use super::schema::{
    CollectiveSummary, DuringJob, JobReported, JobTag, MAX_CLAIM_CHARS, NodeResult, RunSummary,
    SlowClaim,
};
use super::{MARKER, MAX_TAG_BYTES};
use crate::hostlist::{self, Hostlist};
use crate::verdict::Verdict;

impl JobTag {
    /// Compact JSON within [`MAX_TAG_BYTES`] (see [`JobTag::bounded_to`]).
    pub fn bounded(&self) -> String {
        self.bounded_to(MAX_TAG_BYTES)
    }

    /// Compact JSON within `limit` bytes, summarised in steps until it fits:
    ///
    /// 1. passing nodes become one hostlist entry (`"n[1-1023]":{"verdict":"pass"}`);
    /// 2. probe times, notes beyond two, counter rises beyond four per node and the collective's
    ///    outlier detail go; counter entries of more than eight nodes collapse per verdict;
    /// 3. nodes with the same result (`nodes` and `earlier`), `missing` and the collective's
    ///    lists become hostlists;
    /// 4. notes and failing checks go (every failing node is still named, by hostlist).
    ///
    /// Failing, erroring and missing nodes are never dropped before passing ones; only a tag
    /// whose failing node names cannot be compressed into `limit` (thousands of unrelated
    /// names) loses some, and then says so in `counts` (always kept) and `truncated`.
    pub fn bounded_to(&self, limit: usize) -> String {
        let fits = |t: &JobTag| {
            let json = serde_json::to_string(t).unwrap_or_default();
            (json.len() <= limit).then_some(json)
        };
        let mut tag = self.clone();
        tag.scrub(limit / JOB_SHARE_DIVISOR);
        if let Some(json) = fits(&tag) {
            return json;
        }
        tag.truncated = true;
        let passing = |r: &NodeResult| r.verdict == Verdict::Pass && !r.drained;
        for r in tag.nodes.values_mut().filter(|r| passing(r)) {
            r.probe_ms = None;
        }
        group_nodes(&mut tag.nodes, passing);
        if let Some(json) = fits(&tag) {
            return json;
        }
        // The job's part goes before any of root's evidence: its detail, then all of it.
        tag.job_reported.shrink();
        if let Some(json) = fits(&tag) {
            return json;
        }
        tag.job_reported = JobReported::default();
        tag.run = None;
        if let Some(json) = fits(&tag) {
            return json;
        }
        // 2. timings, notes and counter detail.
        for r in tag.nodes.values_mut().chain(tag.earlier.values_mut()) {
            r.probe_ms = None;
        }
        tag.notes.truncate(2);
        for d in &mut tag.during {
            d.rises = std::mem::take(&mut d.rises).into_iter().take(4).collect();
        }
        tag.job_reported.slow.truncate(4);
        if tag.during.len() > 8 {
            tag.during = collapse_during(&tag.during);
        }
        if let Some(json) = fits(&tag) {
            return json;
        }
        // 3. hostlists of nodes with the same result, and of the name lists.
        group_nodes(&mut tag.nodes, |r| !r.drained);
        group_nodes(&mut tag.earlier, |r| !r.drained);
        tag.missing = compress_list(&tag.missing);
        if let Some(c) = &mut tag.collective {
            c.missing = compress_list(&c.missing);
            c.outliers = compress_list(&c.outliers);
            c.tails = compress_list(&c.tails);
        }
        if let Some(json) = fits(&tag) {
            return json;
        }
        // 4. notes and checks; drained nodes join their verdict's hostlist.
        tag.notes.clear();
        tag.during = collapse_during(&tag.during);
        for r in tag.nodes.values_mut().chain(tag.earlier.values_mut()) {
            r.checks.clear();
            r.drained = false;
        }
        group_nodes(&mut tag.nodes, |_| true);
        group_nodes(&mut tag.earlier, |_| true);
        if let Some(json) = fits(&tag) {
            return json;
        }
        // Names that do not compress: the bound wins, earlier attempts and passing nodes first.
        tag.earlier.clear();
        tag.nodes.retain(|_, r| r.verdict != Verdict::Pass);
        tag.during.clear();
        loop {
            if let Some(json) = fits(&tag) {
                return json;
            }
            if tag.nodes.is_empty() && tag.missing.is_empty() && tag.collective.is_none() {
                // Only the job-wide fields are left: the verdict and the counts, which always fit.
                let least = JobTag {
                    verdict: tag.verdict,
                    nnodes: tag.nnodes,
                    counts: tag.counts.clone(),
                    truncated: true,
                    ..JobTag::default()
                };
                return fits(&least).unwrap_or_default();
            }
            if tag.missing.len() > tag.nodes.len() {
                tag.missing.truncate(tag.missing.len() / 2);
            } else if !tag.nodes.is_empty() {
                let keep = tag.nodes.len() / 2;
                tag.nodes = std::mem::take(&mut tag.nodes)
                    .into_iter()
                    .take(keep)
                    .collect();
            } else {
                tag.collective = None;
            }
        }
    }
}

/// Longest note kept, in bytes.
pub const MAX_NOTE_BYTES: usize = 200;

/// The job's part of the tag ([`JobTag::job_reported`] and [`JobTag::run`]) may take at most
/// this fraction (one over it) of the bound, whatever the job wrote.
pub const JOB_SHARE_DIVISOR: usize = 4;

/// The most slow-node claims of the whole job the tag keeps.
pub const MAX_SLOW_CLAIMS: usize = 16;

/// The most node names a job-reported list (a step's outliers or missing nodes) keeps.
pub const MAX_REPORTED_NAMES: usize = 16;

/// The longest node name or short word the job can put into the tag, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// The largest number of seconds a duration in the tag may say (about 31 years); larger, negative
/// and non-finite values are clamped into `0..=MAX_SECONDS`.
pub const MAX_SECONDS: f64 = 1e9;

/// Text fit for the tag: at most `max_chars` characters; control characters (newlines, escape
/// sequences, NUL) become spaces; and every segment marker is broken
/// (`fabric-check/v1` becomes `fabric-check-v1`), so no text inside the tag, and no text a job
/// wrote, can be read as a segment of its own.
pub fn scrub_text(text: &str, max_chars: usize) -> String {
    let marker = MARKER.trim_end();
    let mut out: String = text
        .chars()
        .take(max_chars)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    while let Some(i) = out.find(marker) {
        out.replace_range(i..i + marker.len(), "fabric-check-v1");
    }
    out
}

/// `x` if finite, within `0..=MAX_SECONDS`, else clamped (non-finite: 0).
pub fn clamp_seconds(x: f64) -> f64 {
    if x.is_finite() {
        // `+ 0.0` turns the `-0.0` of an empty sum into `0.0`.
        x.clamp(0.0, MAX_SECONDS) + 0.0
    } else {
        0.0
    }
}

/// `x` if finite and not negative, else `None` (a measure without a meaningful value).
fn finite_measure(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite() && *v >= 0.0)
}

impl RunSummary {
    /// Makes every number finite and in range, and the outcome a short clean word.
    pub fn scrub(&mut self) {
        for d in [
            &mut self.step_p50_s,
            &mut self.step_p95_s,
            &mut self.step_max_s,
        ] {
            *d = d.map(clamp_seconds);
        }
        for d in [
            &mut self.ckpt_total_s,
            &mut self.ckpt_max_s,
            &mut self.restore_total_s,
            &mut self.duration_s,
        ] {
            *d = clamp_seconds(*d);
        }
        self.outcome = scrub_text(&self.outcome, 16);
        if let Some(e) = &mut self.ett {
            e.first_step_at_s = e.first_step_at_s.filter(|t| t.is_finite() && *t >= 0.0);
            e.kept_s = clamp_seconds(e.kept_s);
            e.lost_s = clamp_seconds(e.lost_s);
            e.failures.truncate(super::MAX_ETT_FAILURES);
            for f in &mut e.failures {
                f.at_s = if f.at_s.is_finite() {
                    f.at_s.max(0.0)
                } else {
                    0.0
                };
                f.recover_s = f.recover_s.map(clamp_seconds);
                f.lost_s = clamp_seconds(f.lost_s);
            }
        }
    }
}

impl CollectiveSummary {
    /// Makes every number finite and bounds the name lists (to `max_names` names of
    /// [`MAX_NAME_CHARS`]): for the job's step results, whose every byte the job wrote.
    pub fn scrub(&mut self, max_names: usize) {
        self.busbw_gb_s = finite_measure(self.busbw_gb_s);
        self.small_time_us = finite_measure(self.small_time_us);
        for list in [&mut self.outliers, &mut self.tails, &mut self.missing] {
            list.truncate(max_names);
            for n in list.iter_mut() {
                *n = scrub_text(n, MAX_NAME_CHARS);
            }
        }
    }
}

impl SlowClaim {
    /// Bounds and cleans the job's words in it.
    pub fn scrub(&mut self) {
        self.node = scrub_text(&self.node, MAX_NAME_CHARS);
        self.message = self
            .message
            .as_deref()
            .map(|m| scrub_text(m, MAX_CLAIM_CHARS));
    }
}

impl JobReported {
    /// Bounds and cleans what the job reported: at most [`MAX_SLOW_CLAIMS`] claims and
    /// [`MAX_REPORTED_NAMES`] names per list, every string scrubbed, every number finite.
    pub fn scrub(&mut self) {
        self.slow.truncate(MAX_SLOW_CLAIMS);
        for c in &mut self.slow {
            c.scrub();
        }
        if let Some(s) = &mut self.steps {
            s.scrub(MAX_REPORTED_NAMES);
        }
    }

    /// The least of it worth keeping: the step's verdict and figures, four claims without
    /// messages, no name lists.
    pub fn shrink(&mut self) {
        self.slow.truncate(4);
        for c in &mut self.slow {
            c.message = None;
        }
        if let Some(s) = &mut self.steps {
            s.outliers.truncate(4);
            s.tails.truncate(4);
            s.missing.truncate(4);
        }
    }
}

impl JobTag {
    /// Makes the tag safe to write, whatever the job contributed: every number finite, every
    /// string scrubbed ([`scrub_text`]; notes to [`MAX_NOTE_BYTES`]), and the job's part
    /// ([`JobTag::job_reported`], [`JobTag::run`]) bounded and, when its JSON is over
    /// `job_bytes`, shrunk and then dropped (said in `truncated`). Root's evidence is not
    /// shortened here.
    pub fn scrub(&mut self, job_bytes: usize) {
        for n in &mut self.notes {
            *n = scrub_text(n, MAX_NOTE_BYTES);
            if n.len() > MAX_NOTE_BYTES {
                let mut end = MAX_NOTE_BYTES;
                while !n.is_char_boundary(end) {
                    end -= 1;
                }
                n.truncate(end);
            }
        }
        if let Some(m) = &mut self.mode {
            *m = scrub_text(m, 16);
        }
        for r in self.nodes.values_mut().chain(self.earlier.values_mut()) {
            for c in &mut r.checks {
                *c = scrub_text(c, MAX_NAME_CHARS);
            }
        }
        if self
            .nodes
            .keys()
            .chain(self.earlier.keys())
            .any(|k| scrub_text(k, usize::MAX) != *k)
        {
            for map in [&mut self.nodes, &mut self.earlier] {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(k, r)| (scrub_text(&k, usize::MAX), r))
                    .collect();
            }
        }
        for d in &mut self.during {
            d.node = scrub_text(&d.node, usize::MAX);
            if d.rises.keys().any(|k| scrub_text(k, usize::MAX) != *k) {
                d.rises = std::mem::take(&mut d.rises)
                    .into_iter()
                    .map(|(k, v)| (scrub_text(&k, usize::MAX), v))
                    .collect();
            }
        }
        for n in self.missing.iter_mut() {
            *n = scrub_text(n, usize::MAX);
        }
        if let Some(c) = &mut self.collective {
            // Root's: its lists are not shortened, only cleaned.
            c.scrub(usize::MAX);
        }
        self.job_reported.scrub();
        if let Some(r) = &mut self.run {
            r.scrub();
        }
        let job_len = |t: &JobTag| {
            serde_json::to_string(&t.job_reported).map_or(usize::MAX, |s| s.len())
                + serde_json::to_string(&t.run).map_or(usize::MAX, |s| s.len())
        };
        if job_len(self) > job_bytes {
            self.truncated = true;
            self.job_reported.shrink();
            if job_len(self) > job_bytes {
                self.job_reported = JobReported::default();
            }
            if job_len(self) > job_bytes {
                self.run = None;
            }
        }
    }
}

/// The names a key of `nodes` stands for (itself unless it is a hostlist).
pub(super) fn names_of(key: &str) -> Vec<String> {
    if key.contains('[')
        && let Ok(names) = Hostlist::parse(key).and_then(|h| h.expand())
    {
        return names;
    }
    vec![key.to_owned()]
}

/// Replaces the entries `which` selects by one hostlist entry per distinct result.
fn group_nodes(map: &mut BTreeMap<String, NodeResult>, which: impl Fn(&NodeResult) -> bool) {
    let mut by_result: Vec<(NodeResult, Vec<String>)> = Vec::new();
    let mut kept = BTreeMap::new();
    for (key, r) in std::mem::take(map) {
        if !which(&r) {
            kept.insert(key, r);
            continue;
        }
        match by_result.iter_mut().find(|(res, _)| *res == r) {
            Some((_, names)) => names.extend(names_of(&key)),
            None => by_result.push((r, names_of(&key))),
        }
    }
    for (r, names) in by_result {
        match hostlist::compress(&names) {
            Some(key) => {
                kept.insert(key, r);
            }
            None => kept.extend(names.into_iter().map(|n| (n, r.clone()))),
        }
    }
    *map = kept;
}

/// A list of names (or hostlists) as one hostlist entry, when it compresses.
fn compress_list(list: &[String]) -> Vec<String> {
    let names: Vec<String> = list.iter().flat_map(|k| names_of(k)).collect();
    match hostlist::compress(&names) {
        Some(h) if !names.is_empty() => vec![h],
        _ => list.to_vec(),
    }
}

/// One counter entry per verdict, its node a hostlist, its rises dropped.
fn collapse_during(during: &[DuringJob]) -> Vec<DuringJob> {
    let mut by_verdict: BTreeMap<Verdict, Vec<String>> = BTreeMap::new();
    for d in during {
        by_verdict
            .entry(d.verdict)
            .or_default()
            .extend(names_of(&d.node));
    }
    by_verdict
        .into_iter()
        .map(|(verdict, names)| DuringJob {
            node: hostlist::compress(&names).unwrap_or_else(|| names.join(",")),
            rises: BTreeMap::new(),
            verdict,
            watch: Vec::new(),
        })
        .collect()
}
