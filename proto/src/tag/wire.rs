//! The tag as a segment of a comment: found and decoded ([`extract`], in time linear in the
//! comment's length), written in either [`Form`] ([`segment`]), and spliced in place of ours
//! ([`splice`], [`splice_as`]), every other byte kept.

use super::base32;
use super::schema::{JobTag, TagDecodeError};
use super::{DB_FORM_PREFIX, Form, MARKER, MAX_DB_JSON_BYTES};

/// Finds our segment in a comment: the byte range of marker + JSON, and the decoded tag.
///
/// The first occurrence of the marker that decodes wins; when none decodes, the first one is
/// reported unreadable. So a comment where another tool (or a user's text copied into a field)
/// left a bare or broken marker ahead of ours still yields our tag, and a splice replaces ours.
///
/// A marker inside the extent of an earlier segment is text of that segment, never a segment
/// of its own: when our segment is unreadable, nothing quoted inside it (a note, a job's
/// message) is read in its place.
fn locate(comment: &str) -> Option<(std::ops::Range<usize>, Result<JobTag, TagDecodeError>)> {
    locate_as(comment)
}

/// [`locate`] decoding the segment as `T`: a reader's own view of the tag.
///
/// Linear in the comment's length however many markers it holds: no marker copies or rescans
/// the rest of the comment. What a segment needs of the whole comment (the backtick repairs,
/// where each `{` closes) is made once, by [`Whole`], and only when a segment first needs it;
/// what a marker still reads on its own ends at the next marker (its trailing space), or is a
/// JSON parse, which can only run past a later marker inside a JSON string, so at most two
/// parses ever cover one byte.
pub(super) fn locate_as<T: serde::de::DeserializeOwned>(
    comment: &str,
) -> Option<(std::ops::Range<usize>, Result<T, TagDecodeError>)> {
    let mut whole = Whole::new(comment);
    let mut first_unreadable = None;
    let mut covered_until = 0;
    for (start, _) in comment.match_indices(MARKER) {
        if start < covered_until {
            continue;
        }
        let found = locate_at::<T>(&mut whole, start);
        if found.1.is_ok() {
            return Some(found);
        }
        if comment[start + MARKER.len()..].starts_with('{') {
            // An object of ours, however broken: what it quotes is its own text.
            covered_until = found.0.end;
        }
        first_unreadable.get_or_insert(found);
    }
    first_unreadable
}

/// What reading a comment's segments needs of the whole comment, each made at most once and
/// only when a segment first needs it.
struct Whole<'a> {
    comment: &'a str,
    /// The comment with its backticks repaired as [`unmangle_backticks`] repairs them (every
    /// byte at its offset).
    unmangled: Option<String>,
    /// The comment with every backtick taken for a quote.
    requoted: Option<String>,
    /// From the first segment that asked on: for each marker followed by `{`, the length of
    /// its extent up to the bracket that closes that `{` ([`bracket_closers`]).
    closers: Option<(usize, std::collections::HashMap<usize, usize>)>,
}

impl<'a> Whole<'a> {
    fn new(comment: &'a str) -> Self {
        Self {
            comment,
            unmangled: None,
            requoted: None,
            closers: None,
        }
    }

    /// The repaired text from `at`, which starts with `{`: [`unmangle_backticks`] of the rest
    /// of the comment is this slice of its repair of the whole (a byte's repair depends on its
    /// neighbours alone, and the `{` at `at` is none of the repaired bytes).
    fn unmangled_from(&mut self, at: usize) -> &str {
        let comment = self.comment;
        &self
            .unmangled
            .get_or_insert_with(|| unmangle_backticks(comment))[at..]
    }

    /// The rest of the comment from `at` with every backtick taken for a quote.
    fn requoted_from(&mut self, at: usize) -> &str {
        let comment = self.comment;
        &self
            .requoted
            .get_or_insert_with(|| comment.replace('`', "\""))[at..]
    }

    /// Where the unreadable segment whose text starts at `at` (just after its marker) ends:
    /// after the bracket that closes its opening `{` (counted without regard to strings, which
    /// may be the broken part), else at the next space.
    fn unreadable_len(&mut self, at: usize) -> usize {
        let rest = &self.comment[at..];
        // The next space is at the latest the one ending the next marker.
        let next_space = rest.find(' ').unwrap_or(rest.len());
        if !rest.starts_with('{') {
            return next_space;
        }
        let comment = self.comment;
        let (from, closers) = match &mut self.closers {
            Some(made) if made.0 <= at => made,
            slot => slot.insert((at, bracket_closers(comment, at))),
        };
        debug_assert!(*from <= at, "segments are read in order");
        closers.get(&at).copied().unwrap_or(next_space)
    }
}

/// For every marker followed by `{` at or after byte `from`: the length from that `{` to just
/// after the bracket that closes it, counting `{` and `[` in, `}` and `]` out, without regard to
/// strings, as [`Whole::unreadable_len`] counts. One pass: the open `{`s still waiting for their
/// bracket sit on a stack, deepest last.
fn bracket_closers(comment: &str, from: usize) -> std::collections::HashMap<usize, usize> {
    let bytes = comment.as_bytes();
    let mut closers = std::collections::HashMap::new();
    // (depth before the `{`, where it is), for the `{`s after a marker not closed yet.
    let mut waiting: Vec<(usize, usize)> = Vec::new();
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(from) {
        match b {
            b'{' | b'[' => {
                if b == b'{' && bytes[..i].ends_with(MARKER.as_bytes()) {
                    waiting.push((depth, i));
                }
                depth += 1;
            }
            b'}' | b']' => {
                // A bracket closing one opened before `from` leaves the depth at 0: no `{`
                // after `from` waits that low.
                depth = depth.saturating_sub(1);
                while let Some(&(opened_at, at)) = waiting.last() {
                    if opened_at < depth {
                        break;
                    }
                    closers.insert(at, i + 1 - at);
                    waiting.pop();
                }
            }
            _ => {}
        }
    }
    closers
}

/// The segment whose marker starts at byte `start`.
fn locate_at<T: serde::de::DeserializeOwned>(
    whole: &mut Whole<'_>,
    start: usize,
) -> (std::ops::Range<usize>, Result<T, TagDecodeError>) {
    let comment = whole.comment;
    let json_start = start + MARKER.len();
    let rest = &comment[json_start..];
    if let Some(encoded) = rest.strip_prefix(DB_FORM_PREFIX) {
        // Ends at the latest at the space that ends the next marker.
        let len = encoded
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(encoded.len());
        let end = json_start + DB_FORM_PREFIX.len() + len;
        let decoded = base32::decode(&encoded[..len])
            .ok_or_else(|| custom("the b32: form holds a character outside base32"))
            .and_then(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|_| custom("the b32: form does not decode to UTF-8 text"))
            })
            .and_then(|json| serde_json::from_str::<T>(&json).map_err(TagDecodeError));
        return (start..end, decoded);
    }
    let parse = |text: &str| {
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<T>();
        match stream.next() {
            Some(Ok(tag)) => Ok((tag, stream.byte_offset())),
            Some(Err(e)) => Err(TagDecodeError(e)),
            None => Err(custom("nothing follows the marker")),
        }
    };
    let mut found = parse(rest);
    if found.is_err() && rest.starts_with("{`") {
        // JSON that went through sacctmgr (older releases of fabric-check wrote it): every `"`
        // and `'` became a backtick. Quotes are put back where JSON's structure needs them and
        // apostrophes elsewhere; failing that, every backtick is taken for a quote. Both
        // repairs keep every byte offset.
        found = parse(whole.unmangled_from(json_start))
            .or_else(|_| parse(whole.requoted_from(json_start)));
    }
    match found {
        Ok((tag, len)) => (start..json_start + len, Ok(tag)),
        Err(e) => (start..json_start + whole.unreadable_len(json_start), Err(e)),
    }
}

fn custom(msg: &str) -> TagDecodeError {
    TagDecodeError(serde::de::Error::custom(msg))
}

/// `"` for each backtick that stands where JSON needs a quote (next to `{ [ , :` or `} ] , :`,
/// or escaped), `'` for the others.
fn unmangle_backticks(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        if c != '`' {
            out.push(c);
            continue;
        }
        let before = i.checked_sub(1).map(|j| b[j]);
        let after = b.get(i + 1).copied();
        let structural = matches!(before, Some(b'{' | b'[' | b',' | b':' | b'\\'))
            || matches!(after, Some(b':' | b',' | b'}' | b']'));
        out.push(if structural { '"' } else { '\'' });
    }
    out
}

/// Decodes the fabric-check segment of an `AdminComment`, if there is one (either [`Form`], and
/// the backtick-mangled JSON of older releases).
pub fn extract(comment: &str) -> Option<Result<JobTag, TagDecodeError>> {
    locate(comment).map(|(_, t)| t)
}

/// [`extract`] decoding the segment as `T`, a reader's own view of the tag (a subset of
/// [`JobTag`]'s fields, as the report reads a million of them): the segment is found exactly as
/// [`extract`] finds it, so every reader agrees on which segment is the tag.
pub fn extract_as<T: serde::de::DeserializeOwned>(
    comment: &str,
) -> Option<Result<T, TagDecodeError>> {
    locate_as(comment).map(|(_, t)| t)
}

/// The whole segment (marker and tag) in `form`, bounded.
pub fn segment(tag: &JobTag, form: Form) -> String {
    match form {
        Form::Live => format!("{MARKER}{}", tag.bounded()),
        Form::Database => format!(
            "{MARKER}{DB_FORM_PREFIX}{}",
            base32::encode(tag.bounded_to(MAX_DB_JSON_BYTES).as_bytes())
        ),
    }
}

/// Writes `tag` into `comment` in the live form (see [`splice_as`]).
pub fn splice(comment: &str, tag: &JobTag) -> String {
    splice_as(comment, tag, Form::Live)
}

/// Writes `tag` into `comment` in `form`: replaces an existing segment in place (a readable one,
/// else the first unreadable one, its whole extent), else appends it after a space. Every byte
/// outside our segment is kept.
///
/// When the segment replaced in place would not read back (an unreadable segment ahead of it
/// whose extent, counted by brackets, ours changes and so swallows it), ours goes first
/// instead, and the segment it replaces is taken out: readers take the first readable one.
pub fn splice_as(comment: &str, tag: &JobTag, form: Form) -> String {
    let segment = segment(tag, form);
    match locate(comment) {
        Some((range, _)) => {
            let mut out = String::with_capacity(comment.len() + segment.len());
            out.push_str(&comment[..range.start]);
            out.push_str(&segment);
            out.push_str(&comment[range.end..]);
            if matches!(locate(&out), Some((r, Ok(_))) if r.start == range.start) {
                return out;
            }
            let mut first = String::with_capacity(comment.len() + segment.len() + 1);
            first.push_str(&segment);
            first.push(' ');
            first.push_str(&comment[..range.start]);
            first.push_str(&comment[range.end..]);
            first
        }
        None if comment.trim().is_empty() => segment,
        None => format!("{} {segment}", comment.trim_end()),
    }
}
