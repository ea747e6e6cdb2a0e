//! Slurm hostlist expressions: `gpu[001-128]`, `n[1-3,7]`, `rack[1-2]-n[01-04],login1`.
//!
//! The syntax is Slurm's (`scontrol show hostnames`, slurm.conf(5) "NodeName"): a comma-separated
//! list of items, each item literal text with bracketed sets of numbers or ranges; a range keeps
//! the zero padding of its lower bound (`[001-128]` gives `gpu001`, never `gpu1`). The same syntax
//! names RDMA devices in the probe's configuration (`mlx5_[0-7]`).
//!
//! [`Hostlist::matches`] decides membership without expanding, so `node[1-100000]` costs nothing;
//! [`Hostlist::expand`] refuses lists longer than [`MAX_EXPANSION`].

use std::fmt;

/// The most names [`Hostlist::expand`] produces before refusing.
pub const MAX_EXPANSION: usize = 1 << 20;

/// What is wrong with a hostlist expression.
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
    /// Expansion would produce more than [`MAX_EXPANSION`] names.
    #[error("{0:?} expands to more than {MAX_EXPANSION} names: use matching instead of expanding")]
    TooLarge(String),
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Set(Vec<Range>),
}

/// A parsed hostlist expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostlist {
    source: String,
    items: Vec<Vec<Segment>>,
}

impl Hostlist {
    /// Parses an expression such as `gpu[001-128],login[1-2]`.
    pub fn parse(expr: &str) -> Result<Self, HostlistError> {
        let expr_s = expr.trim().to_string();
        let mut items = Vec::new();
        for item in split_top_level(&expr_s)? {
            if item.is_empty() {
                return Err(HostlistError::EmptyItem(expr_s.clone()));
            }
            items.push(parse_item(item, &expr_s)?);
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

    /// Every name, in order, duplicates kept as Slurm keeps them.
    pub fn expand(&self) -> Result<Vec<String>, HostlistError> {
        let mut out = Vec::new();
        for segs in &self.items {
            let mut partial = vec![String::new()];
            for seg in segs {
                match seg {
                    Segment::Literal(s) => partial.iter_mut().for_each(|p| p.push_str(s)),
                    Segment::Set(ranges) => {
                        let count: u64 = ranges.iter().map(|r| r.hi - r.lo + 1).sum();
                        if (partial.len() as u64).saturating_mul(count) > MAX_EXPANSION as u64 {
                            return Err(HostlistError::TooLarge(self.source.clone()));
                        }
                        let mut next = Vec::with_capacity(partial.len() * count as usize);
                        for p in &partial {
                            for r in ranges {
                                for n in r.lo..=r.hi {
                                    next.push(format!("{p}{}", r.render(n)));
                                }
                            }
                        }
                        partial = next;
                    }
                }
            }
            if out.len() + partial.len() > MAX_EXPANSION {
                return Err(HostlistError::TooLarge(self.source.clone()));
            }
            out.extend(partial);
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
                    return Err(HostlistError::Unbalanced(expr.to_string()));
                }
            }
            ']' => {
                depth -= 1;
                if depth < 0 {
                    return Err(HostlistError::Unbalanced(expr.to_string()));
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
        return Err(HostlistError::Unbalanced(expr.to_string()));
    }
    out.push(expr[start..].trim());
    Ok(out)
}

fn parse_item(item: &str, expr: &str) -> Result<Vec<Segment>, HostlistError> {
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
                .ok_or_else(|| HostlistError::Unbalanced(expr.to_string()))?;
            let mut ranges = Vec::new();
            for el in rest[open + 1..close].split(',') {
                ranges.push(parse_range(el.trim(), expr)?);
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
        range: el.to_string(),
        expr: expr.to_string(),
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
            range: el.to_string(),
            expr: expr.to_string(),
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
        assert!(matches!(h.expand(), Err(HostlistError::TooLarge(_))));
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
}
