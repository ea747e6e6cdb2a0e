//! Slurm hostlist expressions: `gpu[001-128]`, `n[1-3,7]`, `rack[1-2]-n[01-04],login1`.
//!
//! The syntax is Slurm's (`scontrol show hostnames`, slurm.conf(5) "NodeName"): a comma-separated
//! list of items, each item literal text with bracketed sets of numbers or ranges; a range keeps
//! the zero padding of its lower bound (`[001-128]` gives `gpu001`, never `gpu1`). The same syntax
//! names RDMA devices in the probe's configuration (`mlx5_[0-7]`).
//!
//! [`Hostlist::matches`] decides membership without expanding, so `node[1-100000]` costs nothing.
//! [`Hostlist::count`] and [`Hostlist::expanded_bytes`] say, with checked arithmetic and without
//! expanding, how many names and how many bytes of names an expression stands for;
//! [`Hostlist::expand`] refuses, before it expands anything, lists of more than
//! [`MAX_EXPANSION`] names or [`MAX_EXPANSION_BYTES`] bytes, and [`Hostlist::expand_within`]
//! takes tighter [`Limits`]. A list that comes from someone else (a job's environment) is parsed
//! with [`Hostlist::parse_within`], which refuses a range larger than its limits while parsing.

use std::fmt;

/// The most names [`Hostlist::expand`] produces before refusing.
pub const MAX_EXPANSION: usize = 1 << 20;

/// The most bytes of names (their lengths added up) [`Hostlist::expand`] produces before
/// refusing: a short expression can stand for few names that are long (`n[1-1048576]` after a
/// kilobyte of text is a gigabyte).
pub const MAX_EXPANSION_BYTES: usize = 16 << 20;

/// The longest part of an expression an error quotes: the expression may be anybody's text.
const QUOTED_CHARS: usize = 80;

/// How much an expansion may produce: names, and bytes of names (their lengths added up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most names.
    pub names: u64,
    /// The most bytes, the names' lengths added up.
    pub bytes: u64,
}

impl Limits {
    /// [`MAX_EXPANSION`] names and [`MAX_EXPANSION_BYTES`] bytes, the bounds of
    /// [`Hostlist::expand`].
    pub const DEFAULT: Limits = Limits {
        names: MAX_EXPANSION as u64,
        bytes: MAX_EXPANSION_BYTES as u64,
    };
}

/// What is wrong with a hostlist expression. Each variant quotes the expression, cut to its
/// first 80 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    /// The expression (or one comma-separated item of it) is empty.
    #[error("empty hostlist item in {0:?}: remove the stray comma")]
    EmptyItem(String),
    /// A `[` without its `]`, or a `]` without its `[`.
    #[error("unbalanced bracket in {0:?}: every `[` needs a matching `]`")]
    Unbalanced(String),
    /// A bracket element that is neither a number nor a `lo-hi` range of numbers.
    #[error("bad range {range:?} in {expr:?}: write numbers or lo-hi, e.g. [001-128] or [1-3,7]")]
    BadRange {
        /// The element as written.
        range: String,
        /// The whole expression.
        expr: String,
    },
    /// A range whose upper bound is below its lower bound.
    #[error("reversed range {range:?} in {expr:?}: write the smaller number first")]
    Reversed {
        /// The element as written.
        range: String,
        /// The whole expression.
        expr: String,
    },
    /// A range of more numbers than the list may name ([`Hostlist::parse_within`]).
    #[error("range {range:?} in {expr:?} holds more than {max_names} numbers")]
    RangeTooLarge {
        /// The element as written.
        range: String,
        /// The whole expression.
        expr: String,
        /// The most names the list may have.
        max_names: u64,
    },
    /// Expansion would produce more names than its limit (by default [`MAX_EXPANSION`]).
    #[error("{expr:?} expands to more than {max_names} names: use matching instead of expanding")]
    TooLarge {
        /// The whole expression.
        expr: String,
        /// The limit it is over.
        max_names: u64,
    },
    /// Expansion would produce more bytes of names than its limit (by default
    /// [`MAX_EXPANSION_BYTES`]).
    #[error(
        "{expr:?} expands to more than {max_bytes} bytes of names: use matching instead of expanding"
    )]
    TooLong {
        /// The whole expression.
        expr: String,
        /// The limit it is over.
        max_bytes: u64,
    },
}

/// `text` as an error quotes it: its first [`QUOTED_CHARS`] characters, `...` when cut.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    lo: u64,
    hi: u64,
    /// Zero-padded width (the lower bound's digit count when it starts with `0`), else 0.
    width: usize,
}

impl Range {
    fn render(&self, n: u64) -> String {
        format!("{n:0width$}", width = self.width)
    }

    /// Whether `digits` (all ASCII digits) names a member of this range.
    fn accepts(&self, digits: &str) -> bool {
        let Ok(n) = digits.parse::<u64>() else {
            return false;
        };
        n >= self.lo && n <= self.hi && self.render(n) == digits
    }

    /// How many numbers the range holds; `None` past `u64` (only `[0-18446744073709551615]`).
    fn count(&self) -> Option<u64> {
        (self.hi - self.lo).checked_add(1)
    }

    /// The bytes of its numbers as written (padded to `width`), added up; `None` past `u64`.
    fn digit_bytes(&self) -> Option<u64> {
        // By number of digits: 0-9 have one, 10-99 two, ... up to u64::MAX's twenty.
        let mut total: u64 = 0;
        let mut first: u64 = 0;
        for digits in 1..=20u64 {
            let last = 10u64
                .checked_pow(digits as u32)
                .map_or(u64::MAX, |next| next - 1);
            let (lo, hi) = (self.lo.max(first), self.hi.min(last));
            if lo <= hi {
                let each = digits.max(self.width as u64);
                total = total.checked_add((hi - lo).checked_add(1)?.checked_mul(each)?)?;
            }
            if last == u64::MAX {
                break;
            }
            first = last + 1;
        }
        Some(total)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Set(Vec<Range>),
}

/// How many names a bracketed set gives; `None` past `u64`.
fn set_count(ranges: &[Range]) -> Option<u64> {
    ranges
        .iter()
        .try_fold(0u64, |sum, r| sum.checked_add(r.count()?))
}

/// How many names an item gives; `None` past `u64`.
fn item_count(segs: &[Segment]) -> Option<u64> {
    segs.iter().try_fold(1u64, |product, seg| match seg {
        Segment::Literal(_) => Some(product),
        Segment::Set(ranges) => product.checked_mul(set_count(ranges)?),
    })
}

/// The bytes of an item's names added up; `None` past `u64`. Each segment is in every name
/// once: a literal as itself, a set's numbers each as often as the other sets combine.
fn item_bytes(segs: &[Segment]) -> Option<u64> {
    let count = item_count(segs)?;
    segs.iter().try_fold(0u64, |sum, seg| {
        let bytes = match seg {
            Segment::Literal(s) => (s.len() as u64).checked_mul(count)?,
            Segment::Set(ranges) => {
                let digits = ranges
                    .iter()
                    .try_fold(0u64, |sum, r| sum.checked_add(r.digit_bytes()?))?;
                // `count` is this set's count times the others': the division is exact.
                digits.checked_mul(count / set_count(ranges)?)?
            }
        };
        sum.checked_add(bytes)
    })
}

/// Appends every name of one item to `out`, in order, without recursion (an item may hold
/// thousands of segments): an odometer over its sets, the last set turning fastest.
fn expand_item(segs: &[Segment], out: &mut Vec<String>) {
    // For each set: which range, and which number in it.
    let mut at: Vec<(usize, u64)> = segs
        .iter()
        .filter_map(|seg| match seg {
            Segment::Set(ranges) => Some((0, ranges[0].lo)),
            Segment::Literal(_) => None,
        })
        .collect();
    loop {
        let mut name = String::new();
        let mut sets = at.iter();
        for seg in segs {
            match seg {
                Segment::Literal(s) => name.push_str(s),
                Segment::Set(ranges) => {
                    // One position per set, made above.
                    if let Some(&(r, n)) = sets.next() {
                        name.push_str(&ranges[r].render(n));
                    }
                }
            }
        }
        out.push(name);
        // Turn the odometer: the last set first; a set that wraps carries into the one before.
        let mut carried = true;
        let set_ranges = segs.iter().filter_map(|seg| match seg {
            Segment::Set(ranges) => Some(ranges),
            Segment::Literal(_) => None,
        });
        for (ranges, (r, n)) in set_ranges.rev().zip(at.iter_mut().rev()) {
            if *n < ranges[*r].hi {
                *n += 1;
                carried = false;
                break;
            }
            if *r + 1 < ranges.len() {
                *r += 1;
                *n = ranges[*r].lo;
                carried = false;
                break;
            }
            (*r, *n) = (0, ranges[0].lo);
        }
        if carried {
            return;
        }
    }
}

/// A parsed hostlist expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostlist {
    source: String,
    items: Vec<Vec<Segment>>,
}

impl Hostlist {
    /// Parses an expression such as `gpu[001-128],login[1-2]`. Ranges may be of any size (a
    /// pattern to match); see [`Hostlist::parse_within`] for a list of names to expand.
    pub fn parse(expr: &str) -> Result<Self, HostlistError> {
        Self::parse_ranges_up_to(expr, None)
    }

    /// Parses a list of names that is to be expanded within `limits` (a list someone else
    /// wrote): a range of more than `limits.names` numbers is refused as soon as it is read,
    /// then the whole list is counted, in names and in bytes, before anything is expanded, and
    /// refused when over either limit. What it returns expands within `limits`.
    pub fn parse_within(expr: &str, limits: Limits) -> Result<Self, HostlistError> {
        let list = Self::parse_ranges_up_to(expr, Some(limits.names))?;
        list.check(limits)?;
        Ok(list)
    }

    fn parse_ranges_up_to(expr: &str, max_range: Option<u64>) -> Result<Self, HostlistError> {
        let expr_s = expr.trim().to_string();
        let mut items = Vec::new();
        for item in split_top_level(&expr_s)? {
            if item.is_empty() {
                return Err(HostlistError::EmptyItem(quoted(&expr_s)));
            }
            items.push(parse_item(item, &expr_s, max_range)?);
        }
        Ok(Self {
            source: expr_s,
            items,
        })
    }

    /// Whether `name` is one of the names the expression denotes.
    pub fn matches(&self, name: &str) -> bool {
        self.items.iter().any(|segs| match_segments(segs, name))
    }

    /// How many names the expression stands for (duplicates counted), without expanding it;
    /// `None` when the number does not fit in a `u64`.
    pub fn count(&self) -> Option<u64> {
        self.items
            .iter()
            .try_fold(0u64, |sum, segs| sum.checked_add(item_count(segs)?))
    }

    /// The bytes of all its names, their lengths added up, without expanding it; `None` when
    /// the number does not fit in a `u64`.
    pub fn expanded_bytes(&self) -> Option<u64> {
        self.items
            .iter()
            .try_fold(0u64, |sum, segs| sum.checked_add(item_bytes(segs)?))
    }

    /// Refuses the expression when its expansion would be over `limits`.
    fn check(&self, limits: Limits) -> Result<(), HostlistError> {
        if self.count().is_none_or(|n| n > limits.names) {
            return Err(HostlistError::TooLarge {
                expr: quoted(&self.source),
                max_names: limits.names,
            });
        }
        if self.expanded_bytes().is_none_or(|n| n > limits.bytes) {
            return Err(HostlistError::TooLong {
                expr: quoted(&self.source),
                max_bytes: limits.bytes,
            });
        }
        Ok(())
    }

    /// Every name, in order, duplicates kept as Slurm keeps them; refused, before anything is
    /// expanded, past [`Limits::DEFAULT`].
    pub fn expand(&self) -> Result<Vec<String>, HostlistError> {
        self.expand_within(Limits::DEFAULT)
    }

    /// [`Hostlist::expand`] within `limits`: the names and their bytes are counted first, and
    /// nothing is expanded when either is over.
    pub fn expand_within(&self, limits: Limits) -> Result<Vec<String>, HostlistError> {
        self.check(limits)?;
        // Within `limits.names`, checked above.
        let mut out = Vec::with_capacity(self.count().unwrap_or(0) as usize);
        for segs in &self.items {
            expand_item(segs, &mut out);
        }
        Ok(out)
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl fmt::Display for Hostlist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl std::str::FromStr for Hostlist {
    type Err = HostlistError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Splits on commas outside brackets.
fn split_top_level(expr: &str) -> Result<Vec<&str>, HostlistError> {
    let mut depth = 0i32;
    let mut start = 0;
    let mut out = Vec::new();
    for (i, c) in expr.char_indices() {
        match c {
            '[' => {
                depth += 1;
                if depth > 1 {
                    return Err(HostlistError::Unbalanced(quoted(expr)));
                }
            }
            ']' => {
                depth -= 1;
                if depth < 0 {
                    return Err(HostlistError::Unbalanced(quoted(expr)));
                }
            }
            ',' if depth == 0 => {
                out.push(expr[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Unbalanced(quoted(expr)));
    }
    out.push(expr[start..].trim());
    Ok(out)
}

/// The segments of one item; a range of more than `max_range` numbers is refused.
fn parse_item(
    item: &str,
    expr: &str,
    max_range: Option<u64>,
) -> Result<Vec<Segment>, HostlistError> {
    let mut segs = Vec::new();
    let mut rest = item;
    while !rest.is_empty() {
        if let Some(open) = rest.find('[') {
            if open > 0 {
                segs.push(Segment::Literal(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find(']')
                .map(|c| c + open)
                .ok_or_else(|| HostlistError::Unbalanced(quoted(expr)))?;
            let mut ranges = Vec::new();
            for el in rest[open + 1..close].split(',') {
                let range = parse_range(el.trim(), expr)?;
                if let Some(max) = max_range
                    && range.count().is_none_or(|n| n > max)
                {
                    return Err(HostlistError::RangeTooLarge {
                        range: quoted(el.trim()),
                        expr: quoted(expr),
                        max_names: max,
                    });
                }
                ranges.push(range);
            }
            segs.push(Segment::Set(ranges));
            rest = &rest[close + 1..];
        } else {
            segs.push(Segment::Literal(rest.to_string()));
            rest = "";
        }
    }
    Ok(segs)
}

fn parse_range(el: &str, expr: &str) -> Result<Range, HostlistError> {
    let bad = || HostlistError::BadRange {
        range: quoted(el),
        expr: quoted(expr),
    };
    let (lo_s, hi_s) = el.split_once('-').unwrap_or((el, el));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(lo_s) || !digits(hi_s) {
        return Err(bad());
    }
    let lo: u64 = lo_s.parse().map_err(|_| bad())?;
    let hi: u64 = hi_s.parse().map_err(|_| bad())?;
    if hi < lo {
        return Err(HostlistError::Reversed {
            range: quoted(el),
            expr: quoted(expr),
        });
    }
    let width = if lo_s.len() > 1 && lo_s.starts_with('0') {
        lo_s.len()
    } else {
        0
    };
    Ok(Range { lo, hi, width })
}

fn match_segments(segs: &[Segment], name: &str) -> bool {
    let Some((first, rest)) = segs.split_first() else {
        return name.is_empty();
    };
    match first {
        Segment::Literal(s) => name
            .strip_prefix(s.as_str())
            .is_some_and(|tail| match_segments(rest, tail)),
        Segment::Set(ranges) => {
            let run = name.bytes().take_while(u8::is_ascii_digit).count();
            (1..=run).any(|k| {
                let (digits, tail) = name.split_at(k);
                ranges.iter().any(|r| r.accepts(digits)) && match_segments(rest, tail)
            })
        }
    }
}

/// The Slurm hostlist of `names`, compressed as `scontrol show hostlist` would: names that differ
/// only in their trailing number (same text before it, same zero padding) share one bracketed
/// set of ranges, `n[1-1023]`, `gpu[001-004,009]`. Duplicates collapse; groups come out in name
/// order. `None` when a name holds `[`, `]` or `,` (it could not be written in the syntax).
///
/// [`Hostlist::parse`] of the result followed by [`Hostlist::expand`] gives the names back,
/// sorted by group and number.
pub fn compress<S: AsRef<str>>(names: &[S]) -> Option<String> {
    use std::collections::{BTreeMap, BTreeSet};
    // (text before the number, padded width or 0) -> numbers; names without a number stay whole.
    let mut groups: BTreeMap<(&str, usize), BTreeSet<u64>> = BTreeMap::new();
    let mut whole: BTreeSet<&str> = BTreeSet::new();
    fn split(name: &str) -> (&str, &str) {
        let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
        name.split_at(name.len() - digits)
    }
    let padded = |num: &str| num.len() > 1 && num.starts_with('0');
    // Padded widths per prefix: an unpadded number of that many digits (`gpu1000` beside
    // `gpu0999`) renders the same in the padded set.
    let mut widths: BTreeSet<(&str, usize)> = BTreeSet::new();
    for name in names {
        let name = name.as_ref();
        if name.is_empty() || name.contains(['[', ']', ',']) {
            return None;
        }
        let (prefix, num) = split(name);
        if padded(num) {
            widths.insert((prefix, num.len()));
        }
    }
    for name in names {
        let name = name.as_ref();
        let (prefix, num) = split(name);
        match num.parse::<u64>() {
            Ok(n) if !num.is_empty() => {
                let width = if padded(num) || widths.contains(&(prefix, num.len())) {
                    num.len()
                } else {
                    0
                };
                groups.entry((prefix, width)).or_default().insert(n);
            }
            _ => {
                whole.insert(name);
            }
        }
    }
    let mut items: Vec<(String, String)> = whole
        .into_iter()
        .map(|n| (n.to_owned(), n.to_owned()))
        .collect();
    for ((prefix, width), numbers) in groups {
        let render = |n: u64| format!("{n:0width$}");
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for n in numbers {
            match ranges.last_mut() {
                Some((_, hi)) if *hi + 1 == n => *hi = n,
                _ => ranges.push((n, n)),
            }
        }
        let text = if ranges.len() == 1 && ranges[0].0 == ranges[0].1 {
            format!("{prefix}{}", render(ranges[0].0))
        } else {
            let set: Vec<String> = ranges
                .iter()
                .map(|&(lo, hi)| {
                    if lo == hi {
                        render(lo)
                    } else {
                        format!("{}-{}", render(lo), render(hi))
                    }
                })
                .collect();
            format!("{prefix}[{}]", set.join(","))
        };
        items.push((prefix.to_owned(), text));
    }
    items.sort();
    Some(
        items
            .into_iter()
            .map(|(_, t)| t)
            .collect::<Vec<_>>()
            .join(","),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compress_gives_back_the_names_it_was_given_in_slurm_syntax() {
        let names: Vec<String> = (1..=1023).map(|i| format!("n{i}")).collect();
        assert_eq!(compress(&names).unwrap(), "n[1-1023]");
        let mixed = [
            "gpu003", "gpu001", "gpu002", "gpu009", "n9", "n10", "login", "n9", "gpu010",
        ];
        let text = compress(&mixed).unwrap();
        assert_eq!(text, "gpu[001-003,009-010],login,n[9-10]");
        let mut back = Hostlist::parse(&text).unwrap().expand().unwrap();
        back.sort();
        let mut want: Vec<String> = mixed.iter().map(|s| s.to_string()).collect();
        want.sort();
        want.dedup();
        assert_eq!(back, want);
        assert_eq!(compress(&["a1", "a01"]).unwrap(), "a01,a1");
        assert_eq!(compress(&["n5"]).unwrap(), "n5");
        assert_eq!(
            compress(&["g0999", "g1000", "g1001"]).unwrap(),
            "g[0999-1001]"
        );
        assert_eq!(compress(&["n[1]"]), None);
    }

    #[test]
    fn a_padded_range_expands_with_its_padding() {
        let h = Hostlist::parse("gpu[001-003]").unwrap();
        assert_eq!(h.expand().unwrap(), ["gpu001", "gpu002", "gpu003"]);
    }

    #[test]
    fn sets_mix_ranges_and_single_numbers() {
        let h = Hostlist::parse("n[1-3,7]").unwrap();
        assert_eq!(h.expand().unwrap(), ["n1", "n2", "n3", "n7"]);
    }

    #[test]
    fn several_brackets_and_items_expand_in_order() {
        let h = Hostlist::parse("r[1-2]-n[01-02],login1").unwrap();
        assert_eq!(
            h.expand().unwrap(),
            ["r1-n01", "r1-n02", "r2-n01", "r2-n02", "login1"]
        );
    }

    #[test]
    fn matching_respects_padding_and_bounds() {
        let h = Hostlist::parse("gpu[001-128]").unwrap();
        assert!(h.matches("gpu001"));
        assert!(h.matches("gpu128"));
        assert!(!h.matches("gpu1"));
        assert!(!h.matches("gpu129"));
        assert!(!h.matches("gpu0010"));
        assert!(!h.matches("cpu001"));
    }

    #[test]
    fn matching_a_huge_range_does_not_expand_it() {
        let h = Hostlist::parse("node[1-999999999]").unwrap();
        assert!(h.matches("node123456789"));
        assert!(matches!(h.expand(), Err(HostlistError::TooLarge { .. })));
    }

    #[test]
    fn a_plain_name_matches_only_itself() {
        let h = Hostlist::parse("n3").unwrap();
        assert!(h.matches("n3"));
        assert!(!h.matches("n33"));
    }

    #[test]
    fn device_patterns_use_the_same_syntax() {
        let h = Hostlist::parse("mlx5_[0-7]").unwrap();
        assert!(h.matches("mlx5_7"));
        assert!(!h.matches("mlx5_8"));
        assert!(!h.matches("mlx5_10"));
    }

    #[test]
    fn digits_after_a_bracket_are_matched_by_backtracking() {
        let h = Hostlist::parse("n[1-12]0").unwrap();
        assert!(h.matches("n120"));
        assert!(h.matches("n10"));
        assert!(!h.matches("n130"));
    }

    #[test]
    fn malformed_expressions_are_refused_with_a_reason() {
        assert!(matches!(
            Hostlist::parse("n[1-3"),
            Err(HostlistError::Unbalanced(_))
        ));
        assert!(matches!(
            Hostlist::parse("n1-3]"),
            Err(HostlistError::Unbalanced(_))
        ));
        assert!(matches!(
            Hostlist::parse("n[a-c]"),
            Err(HostlistError::BadRange { .. })
        ));
        assert!(matches!(
            Hostlist::parse("n[5-1]"),
            Err(HostlistError::Reversed { .. })
        ));
        assert!(matches!(
            Hostlist::parse("n1,,n2"),
            Err(HostlistError::EmptyItem(_))
        ));
        assert!(matches!(
            Hostlist::parse(""),
            Err(HostlistError::EmptyItem(_))
        ));
        let msg = Hostlist::parse("n[5-1]").unwrap_err().to_string();
        assert!(msg.contains("smaller number first"), "{msg}");
    }

    #[test]
    fn a_range_whose_size_overflows_a_u64_is_refused_as_too_large_never_taken_for_empty() {
        // hi - lo + 1 wraps to 0 for the first: a zero count passed the cap, then the
        // expansion filled memory.
        for expr in [
            "n[0-18446744073709551615]",
            "n[0-9223372036854775807,0-9223372036854775808]",
            "n[1-4294967296][1-4294967296]",
            "a1,n[0-18446744073709551615]",
        ] {
            let h = Hostlist::parse(expr).unwrap();
            assert_eq!(h.count(), None, "{expr}");
            assert!(
                matches!(h.expand(), Err(HostlistError::TooLarge { .. })),
                "{expr}"
            );
            assert!(h.matches("n55"), "matching still works: {expr}");
        }
        let h = Hostlist::parse("n[18446744073709551610-18446744073709551615]").unwrap();
        assert_eq!(h.count(), Some(6));
        assert_eq!(h.expanded_bytes(), Some(6 * 21));
        assert_eq!(h.expand().unwrap().last().unwrap(), "n18446744073709551615");
    }

    #[test]
    fn a_short_expression_standing_for_gigabytes_of_names_is_refused_before_anything_is_expanded() {
        // 2^20 names (the name cap) of 40 bytes: 40 MiB from 48 bytes of text.
        let expr = format!("{}[0000-1023][0000-1023]", "x".repeat(32));
        let h = Hostlist::parse(&expr).unwrap();
        assert_eq!(h.count(), Some(1 << 20));
        assert_eq!(h.expanded_bytes(), Some(40 << 20));
        let err = h.expand().unwrap_err();
        assert!(
            matches!(err, HostlistError::TooLong { .. }),
            "{expr}: {err}"
        );
        // A gigabyte from a kilobyte: refused as fast, the error quoting 80 characters.
        let expr = format!("{}[0000-1023][0000-1023]", "x".repeat(1000));
        let err = Hostlist::parse(&expr).unwrap().expand().unwrap_err();
        assert!(matches!(err, HostlistError::TooLong { .. }), "{err}");
        assert!(err.to_string().len() < 300, "{err}");
        // Within the bound it expands.
        let h = Hostlist::parse("x[0000-1023][0-9]").unwrap();
        assert_eq!(h.expand().unwrap().len(), 10_240);
    }

    #[test]
    fn a_range_over_the_count_is_refused_before_a_syntax_error_later_in_the_list_is_read() {
        let limits = Limits {
            names: 2,
            bytes: 2 * 255,
        };
        let expr = "x[0001-1023][u0000-1023],n1";
        assert!(matches!(
            Hostlist::parse_within(expr, limits),
            Err(HostlistError::RangeTooLarge { max_names: 2, .. })
        ));
        assert!(
            Hostlist::parse(expr).is_err(),
            "read to its end, the list is malformed"
        );
    }

    #[test]
    fn a_list_parsed_within_limits_refuses_a_range_larger_than_the_limit_while_parsing() {
        let limits = Limits {
            names: 4096,
            bytes: 4096 * 255,
        };
        for (expr, why) in [
            ("n[1-5000]", "one range over the names"),
            ("n[1-2],n[0-18446744073709551615]", "a range past u64"),
            ("n[4-100000]-x,m5", "a range inside an item"),
        ] {
            let err = Hostlist::parse_within(expr, limits).unwrap_err();
            assert!(
                matches!(
                    err,
                    HostlistError::RangeTooLarge {
                        max_names: 4096,
                        ..
                    }
                ),
                "{why}: {err}"
            );
        }
        let err = Hostlist::parse_within("n[1-3000],m[1-3000]", limits).unwrap_err();
        assert!(matches!(err, HostlistError::TooLarge { .. }), "{err}");
        let err = Hostlist::parse_within(
            "[1-65][1-64]",
            Limits {
                names: 4096,
                bytes: 1 << 20,
            },
        )
        .unwrap_err();
        assert!(matches!(err, HostlistError::TooLarge { .. }), "{err}");
        let long = format!("{}[1-2]", "y".repeat(300));
        let err = Hostlist::parse_within(
            &long,
            Limits {
                names: 2,
                bytes: 510,
            },
        )
        .unwrap_err();
        assert!(matches!(err, HostlistError::TooLong { .. }), "{err}");
        let h = Hostlist::parse_within("n[1-4000],m[1-96]", limits).unwrap();
        assert_eq!(h.count(), Some(4096));
        assert_eq!(h.expand_within(limits).unwrap().len(), 4096);
    }

    #[test]
    fn the_bytes_of_a_range_are_counted_as_written_across_every_digit_count_and_padding() {
        let edges = [
            0u64, 1, 8, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 9999, 10_000, 99_999, 100_000,
        ];
        for width in [0usize, 2, 3, 4, 6] {
            for &lo in &edges {
                for &hi in edges.iter().filter(|&&hi| hi >= lo) {
                    let r = Range { lo, hi, width };
                    let brute: u64 = (lo..=hi).map(|n| r.render(n).len() as u64).sum();
                    assert_eq!(r.digit_bytes(), Some(brute), "[{lo}-{hi}] width {width}");
                    assert_eq!(r.count(), Some(hi - lo + 1));
                }
            }
        }
        let top = Range {
            lo: 9_999_999_999_999_999_999,
            hi: 10_000_000_000_000_000_000,
            width: 0,
        };
        assert_eq!(top.digit_bytes(), Some(19 + 20));
        let all = Range {
            lo: 1,
            hi: u64::MAX,
            width: 0,
        };
        assert_eq!(all.count(), Some(u64::MAX));
        assert_eq!(all.digit_bytes(), None, "past u64");
    }

    #[test]
    fn an_item_of_twenty_thousand_brackets_expands_without_recursion() {
        let h = Hostlist::parse(&"[7]".repeat(20_000)).unwrap();
        assert_eq!(h.count(), Some(1));
        assert_eq!(h.expand().unwrap(), ["7".repeat(20_000)]);
    }

    /// A small deterministic generator (xorshift), for the properties below.
    struct Gen(u64);

    impl Gen {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// A generated item: literal text and sets of `(lo, hi, width)`.
    enum Part {
        Text(String),
        Set(Vec<(u64, u64, usize)>),
    }

    fn arbitrary_list(g: &mut Gen) -> Vec<Vec<Part>> {
        const STARTS: [u64; 10] = [0, 1, 7, 9, 10, 98, 99, 100, 999, 1000];
        let items = 1 + g.below(3);
        (0..items)
            .map(|_| {
                let parts = 1 + g.below(4);
                (0..parts)
                    .map(|i| {
                        if g.below(2) == 0 || (i == 0 && g.below(3) == 0) {
                            let len = 1 + g.below(4) as usize;
                            Part::Text(
                                (0..len)
                                    .map(|_| b"ab-_.x"[g.below(6) as usize] as char)
                                    .collect(),
                            )
                        } else {
                            let ranges = 1 + g.below(2);
                            Part::Set(
                                (0..ranges)
                                    .map(|_| {
                                        let lo = STARTS[g.below(10) as usize];
                                        let hi = lo + g.below(7);
                                        let digits = lo.to_string().len();
                                        // Padding only where Slurm writes it: a leading zero.
                                        let width = if g.below(3) == 0 {
                                            digits + 1 + g.below(2) as usize
                                        } else {
                                            0
                                        };
                                        (lo, hi, width)
                                    })
                                    .collect(),
                            )
                        }
                    })
                    .collect()
            })
            .collect()
    }

    fn written(list: &[Vec<Part>]) -> String {
        let item = |parts: &Vec<Part>| {
            parts
                .iter()
                .map(|p| match p {
                    Part::Text(t) => t.clone(),
                    Part::Set(rs) => {
                        let rs: Vec<String> = rs
                            .iter()
                            .map(|&(lo, hi, w)| format!("{lo:0w$}-{hi:0w$}"))
                            .collect();
                        format!("[{}]", rs.join(","))
                    }
                })
                .collect::<String>()
        };
        list.iter().map(item).collect::<Vec<_>>().join(",")
    }

    /// The names, by the plain cartesian product.
    fn names_of(list: &[Vec<Part>]) -> Vec<String> {
        let mut out = Vec::new();
        for parts in list {
            let mut names = vec![String::new()];
            for p in parts {
                names = match p {
                    Part::Text(t) => names.into_iter().map(|n| n + t).collect(),
                    Part::Set(rs) => names
                        .iter()
                        .flat_map(|n| {
                            rs.iter().flat_map(move |&(lo, hi, w)| {
                                (lo..=hi).map(move |x| format!("{n}{x:0w$}"))
                            })
                        })
                        .collect(),
                };
            }
            out.extend(names);
        }
        out
    }

    #[test]
    fn count_bytes_and_expansion_agree_with_the_plain_product_for_every_generated_list() {
        let mut g = Gen(0x9e37_79b9_7f4a_7c15);
        for case in 0..3000 {
            let list = arbitrary_list(&mut g);
            let text = written(&list);
            let want = names_of(&list);
            let bytes: u64 = want.iter().map(|n| n.len() as u64).sum();
            let h = Hostlist::parse(&text).unwrap_or_else(|e| panic!("case {case}: {text}: {e}"));
            assert_eq!(h.count(), Some(want.len() as u64), "case {case}: {text}");
            assert_eq!(h.expanded_bytes(), Some(bytes), "case {case}: {text}");
            assert_eq!(h.expand().unwrap(), want, "case {case}: {text}");
            for n in &want {
                assert!(h.matches(n), "case {case}: {text} expands to {n}");
            }
            // Any limits: within both it expands, else it is refused, never half done.
            let limits = Limits {
                names: g.below(want.len() as u64 + 2),
                bytes: g.below(bytes + 2),
            };
            let fits = want.len() as u64 <= limits.names && bytes <= limits.bytes;
            assert_eq!(
                h.expand_within(limits).is_ok(),
                fits,
                "case {case}: {text} {limits:?}"
            );
            let largest_range = list
                .iter()
                .flatten()
                .filter_map(|p| match p {
                    Part::Set(rs) => rs.iter().map(|&(lo, hi, _)| hi - lo + 1).max(),
                    Part::Text(_) => None,
                })
                .max()
                .unwrap_or(0);
            match Hostlist::parse_within(&text, limits) {
                Ok(parsed) => {
                    assert!(fits, "case {case}: {text} {limits:?}");
                    assert_eq!(parsed.expand_within(limits).unwrap(), want);
                }
                Err(HostlistError::RangeTooLarge { .. }) => {
                    assert!(
                        largest_range > limits.names,
                        "case {case}: {text} {limits:?}"
                    )
                }
                Err(e) => {
                    assert!(!fits, "case {case}: {text} {limits:?}: {e}");
                    assert!(largest_range <= limits.names, "case {case}: {text}: {e}");
                }
            }
        }
    }
}
