//! The tag reader as it was before it was made linear, kept as the named baseline of
//! `scripts/bench-tag-reader` and as the reference the reader's tests compare it with: every
//! marker sliced, copied (the backtick repairs) and rescanned (the extent of an unreadable
//! segment) the rest of the comment, so a comment full of markers took time quadratic in its
//! length. Behaviour is the reader's own: the same segment, extent and decoding.
//!
//! Only public items of `fabric_proto::tag` are used, through the including module (`super`),
//! so the same file compiles inside the crate's tests and in the example.

use std::ops::Range;

use super::{DB_FORM_PREFIX, MARKER, TagDecodeError};

/// The segment and its extent, as the reader found it before.
pub fn locate_as<T: serde::de::DeserializeOwned>(
    comment: &str,
) -> Option<(Range<usize>, Result<T, TagDecodeError>)> {
    let mut first_unreadable = None;
    let mut covered_until = 0;
    for (start, _) in comment.match_indices(MARKER) {
        if start < covered_until {
            continue;
        }
        let found = locate_at::<T>(comment, start);
        if found.1.is_ok() {
            return Some(found);
        }
        if comment[start + MARKER.len()..].starts_with('{') {
            covered_until = found.0.end;
        }
        first_unreadable.get_or_insert(found);
    }
    first_unreadable
}

fn locate_at<T: serde::de::DeserializeOwned>(
    comment: &str,
    start: usize,
) -> (Range<usize>, Result<T, TagDecodeError>) {
    let json_start = start + MARKER.len();
    let rest = &comment[json_start..];
    if let Some(encoded) = rest.strip_prefix(DB_FORM_PREFIX) {
        let len = encoded
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(encoded.len());
        let end = json_start + DB_FORM_PREFIX.len() + len;
        let decoded = base32_decode(&encoded[..len])
            .ok_or_else(|| custom("the b32: form holds a character outside base32"))
            .and_then(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|_| custom("the b32: form does not decode to UTF-8 text"))
            })
            .and_then(|json| serde_json::from_str::<T>(&json).map_err(TagDecodeError::from));
        return (start..end, decoded);
    }
    let parse = |text: &str| {
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<T>();
        match stream.next() {
            Some(Ok(tag)) => Ok((tag, stream.byte_offset())),
            Some(Err(e)) => Err(TagDecodeError::from(e)),
            None => Err(custom("nothing follows the marker")),
        }
    };
    let mut found = parse(rest);
    if found.is_err() && rest.starts_with("{`") {
        found = parse(&unmangle_backticks(rest)).or_else(|_| parse(&rest.replace('`', "\"")));
    }
    match found {
        Ok((tag, len)) => (start..json_start + len, Ok(tag)),
        Err(e) => (start..json_start + unreadable_len(rest), Err(e)),
    }
}

fn custom(msg: &str) -> TagDecodeError {
    TagDecodeError::from(<serde_json::Error as serde::de::Error>::custom(msg))
}

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

fn unreadable_len(rest: &str) -> usize {
    let next_space = rest.find(' ').unwrap_or(rest.len());
    if !rest.starts_with('{') {
        return next_space;
    }
    let mut depth = 0usize;
    for (i, c) in rest.char_indices() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    next_space
}

fn base32_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    let (mut acc, mut nbits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c.to_ascii_lowercase() {
            c @ b'a'..=b'z' => c - b'a',
            c @ b'2'..=b'7' => c - b'2' + 26,
            _ => return None,
        };
        acc = (acc << 5) | u32::from(v);
        nbits += 5;
        if nbits >= 8 {
            nbits -= 8;
            out.push((acc >> nbits) as u8);
            acc &= (1 << nbits) - 1;
        }
    }
    Some(out)
}
