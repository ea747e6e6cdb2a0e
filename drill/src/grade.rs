//! Graded faults: a size per injection, and recall by size (a detection curve).
//!
//! A class that has a size ([`crate::class::ClassSpec::grading`]) takes one per round:
//!
//! - `congestion`: the bandwidth left on the node's path, in percent of its peers' path
//!   (`50%`), measured before and after the cap (the tbf rate is that share of the peers'
//!   measured bandwidth; the share measured through the cap is kept with the round);
//! - the counter classes (`error_counters`, `pause_storm`): the counters raised by a multiple
//!   of the threshold in force (`0.5x`, `2x`);
//! - `link_flap`: a flap count (`link_downed` rises by it: `3`).
//!
//! A size that leaves the node within what fabric-check calls healthy is a **control**: a
//! multiple of at most 1 (the checks fire *above* a threshold), a path at 100 % or more of its
//! peers', no flap. A signal on its node is a false positive, a drain there a false drain.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// What a class's size measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeKind {
    /// Bandwidth left on the node's path, percent of its peers' (`50%`).
    Bandwidth,
    /// Counters raised by a multiple of their threshold (`0.5x`).
    Threshold,
    /// A number of link flaps (`2`).
    Flaps,
}

impl SizeKind {
    /// The forms a size of this kind is written in, for messages.
    pub fn forms(self) -> &'static str {
        match self {
            SizeKind::Bandwidth => "a share of the peers' bandwidth in percent, 1% to 200% (50%)",
            SizeKind::Threshold => "a multiple of the threshold, 0x to 1000x (0.5x, 2x)",
            SizeKind::Flaps => "a flap count, 0 to 255 (3)",
        }
    }
}

/// One size of a graded fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Size {
    /// Bandwidth left on the node's path, percent of its peers'.
    BandwidthPct(u16),
    /// The counters raised by this multiple of their threshold, in thousandths (`2x`: 2000).
    ThresholdMilli(u32),
    /// Link flaps.
    Flaps(u32),
}

/// A `--size` value that is none of the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not a size at all.
    #[error(
        "{0:?} is not a fault size; write a share of the peers' bandwidth (50%), a multiple of the threshold (0.5x, 2x) or a flap count (3)"
    )]
    Malformed(String),
    /// Out of its kind's range.
    #[error("{value:?} is out of range: {}", kind.forms())]
    OutOfRange {
        /// What was written.
        value: String,
        /// Its kind.
        kind: SizeKind,
    },
    /// A size of another kind than the class takes.
    #[error("class {class} takes {}, not {value:?}", kind.forms())]
    WrongKind {
        /// The class id.
        class: &'static str,
        /// What was written.
        value: String,
        /// The kind the class takes.
        kind: SizeKind,
    },
    /// A class without sizes.
    #[error(
        "class {0} has no size (the graded classes are congestion, error_counters, pause_storm, cnp_storm and link_flap)"
    )]
    NotGraded(String),
}

impl Size {
    /// Parses `50%`, `0.5x` (or `0.5×`) and `3`.
    pub fn parse(s: &str) -> Result<Size, SizeError> {
        let t = s.trim();
        let bad = || SizeError::Malformed(s.to_owned());
        let range = |kind| SizeError::OutOfRange {
            value: s.to_owned(),
            kind,
        };
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(1.0..=200.0).contains(&v) || v.fract() != 0.0 {
                return Err(range(SizeKind::Bandwidth));
            }
            return Ok(Size::BandwidthPct(v as u16));
        }
        if let Some(m) = t.strip_suffix('x').or_else(|| t.strip_suffix('×')) {
            let v: f64 = m.trim().parse().map_err(|_| bad())?;
            if !v.is_finite() || !(0.0..=1000.0).contains(&v) {
                return Err(range(SizeKind::Threshold));
            }
            return Ok(Size::ThresholdMilli((v * 1000.0).round() as u32));
        }
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            let v: u32 = t.parse().map_err(|_| range(SizeKind::Flaps))?;
            if v > 255 {
                return Err(range(SizeKind::Flaps));
            }
            return Ok(Size::Flaps(v));
        }
        Err(bad())
    }

    /// Parses a comma-separated list (`0.5x,1x,2x`).
    pub fn parse_list(s: &str) -> Result<Vec<Size>, SizeError> {
        s.split(',').map(Size::parse).collect()
    }

    /// What it measures.
    pub fn kind(self) -> SizeKind {
        match self {
            Size::BandwidthPct(_) => SizeKind::Bandwidth,
            Size::ThresholdMilli(_) => SizeKind::Threshold,
            Size::Flaps(_) => SizeKind::Flaps,
        }
    }

    /// A size that leaves the node within what fabric-check calls healthy: it must stay quiet.
    pub fn is_control(self) -> bool {
        match self {
            Size::BandwidthPct(p) => p >= 100,
            Size::ThresholdMilli(m) => m <= 1000,
            Size::Flaps(n) => n == 0,
        }
    }

    /// The multiple of the threshold, for a threshold size.
    pub fn multiple(self) -> Option<f64> {
        match self {
            Size::ThresholdMilli(m) => Some(f64::from(m) / 1000.0),
            _ => None,
        }
    }

    /// How many of each counter a threshold size raises, given the counter's allowance (the
    /// increase it may show without a signal): the multiple times the allowance, rounded.
    /// A flap count raises `link_downed` by itself.
    pub fn raise(self, allowance: u64) -> u64 {
        match self {
            Size::ThresholdMilli(m) => ((u128::from(allowance) * u128::from(m) + 500) / 1000)
                .min(u128::from(u64::MAX)) as u64,
            Size::Flaps(n) => u64::from(n),
            Size::BandwidthPct(_) => 0,
        }
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Size::BandwidthPct(p) => write!(f, "{p}%"),
            Size::ThresholdMilli(m) => {
                let v = f64::from(*m) / 1000.0;
                write!(f, "{v}x")
            }
            Size::Flaps(n) => write!(f, "{n}"),
        }
    }
}

impl From<Size> for String {
    fn from(s: Size) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for Size {
    type Error = SizeError;
    fn try_from(s: String) -> Result<Size, SizeError> {
        Size::parse(&s)
    }
}

/// How a class is graded: one field of its row in [`crate::class::FaultClass::spec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grading {
    /// What its size measures.
    pub kind: SizeKind,
    /// The sizes `--graded` runs when `--size` names none for it.
    pub defaults: &'static [Size],
    /// The counters a size raises on an InfiniBand node's fixture tree: (the counter's name in
    /// the tree, its threshold key).
    pub ib_counters: &'static [(&'static str, &'static str)],
    /// The same on a RoCE node.
    pub roce_counters: &'static [(&'static str, &'static str)],
}

/// The allowance of each threshold key: the largest increase over an interval under an hour
/// that gives no signal (the smallest of its warn and fail bounds; a per-hour bound counts an
/// hour, as the checks never scale it below one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds(pub BTreeMap<String, u64>);

/// A threshold key the drill needs and the thresholds lack.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no threshold for {0} is in force, so a multiple of it means nothing; give it one in the configuration or leave the class out of --graded"
)]
pub struct NoThreshold(pub String);

impl Thresholds {
    /// The allowance of `key`.
    pub fn allowance(&self, key: &str) -> Result<u64, NoThreshold> {
        self.0
            .get(key)
            .copied()
            .ok_or_else(|| NoThreshold(key.to_owned()))
    }
}

/// One point of a class's curve.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SizePoint {
    /// The size as written (`50%`, `2x`, `3`).
    pub size: String,
    /// A control size (must stay quiet).
    pub control: bool,
    /// Rounds run at this size.
    pub rounds: usize,
    /// Rounds whose fault went in.
    pub injections: usize,
    /// Of those, a signal on the node (for a control size: a false positive).
    pub detected: usize,
    /// Of those, the node drained (for a control size: a false drain).
    pub drained: usize,
    /// detected / injections, for a fault size.
    pub recall: Option<f64>,
    /// For a control size: rounds with no signal on the node / injections.
    pub quiet: Option<f64>,
    /// Signals on the round's other nodes (and on the node, at a control size).
    pub false_positives: usize,
    /// Drains among them.
    pub false_drains: usize,
    /// For a bandwidth size: the share of the peers' bandwidth measured through the cap,
    /// median over the rounds, percent.
    pub measured_pct: Option<f64>,
}

/// One class's curve.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassCurve {
    /// Class id.
    pub class: String,
    /// What its sizes measure.
    pub kind: Option<SizeKind>,
    /// One point per size, mildest first.
    pub points: Vec<SizePoint>,
}

/// The graded drill's headline figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GradedSummary {
    /// Classes with a curve.
    pub classes: usize,
    /// Sizes over all classes.
    pub sizes: usize,
    /// Recall of `congestion` at 50 % (None when not run).
    pub recall_at_half_bw: Option<f64>,
    /// Rounds at control sizes that stayed quiet / all such rounds (None when none ran).
    pub quiet_below_threshold: Option<f64>,
    /// False drains over every graded round.
    pub false_drains: usize,
}

impl GradedSummary {
    /// The benchmark's line: `drill-graded: classes C, sizes S, recall_at_half_bw R50,
    /// quiet_below_threshold Q, false_drains F` (`none` for a figure no round gave).
    pub fn line(&self) -> String {
        let f = |v: Option<f64>| v.map_or("none".to_owned(), |v| format!("{v:.2}"));
        format!(
            "drill-graded: classes {}, sizes {}, recall_at_half_bw {}, quiet_below_threshold {}, false_drains {}",
            self.classes,
            self.sizes,
            f(self.recall_at_half_bw),
            f(self.quiet_below_threshold),
            self.false_drains
        )
    }
}

/// A class's line in `--summary-line` mode: `drill-graded congestion: 100% 0/5 quiet, 75% 1/5, ...`.
pub fn class_line(c: &ClassCurve) -> String {
    let pts: Vec<String> = c
        .points
        .iter()
        .map(|p| {
            let measured = p
                .measured_pct
                .map(|m| format!(" (measured {m:.0}%)"))
                .unwrap_or_default();
            if p.control {
                format!(
                    "{} quiet {}/{}{}",
                    p.size,
                    p.injections - p.detected,
                    p.injections,
                    measured
                )
            } else {
                format!(
                    "{} recall {}/{}{}",
                    p.size, p.detected, p.injections, measured
                )
            }
        })
        .collect();
    format!("drill-graded {}: {}", c.class, pts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse_and_print_back_as_written() {
        for s in ["50%", "0.5x", "2x", "10x", "3", "0"] {
            assert_eq!(Size::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(Size::parse("0.5×").unwrap(), Size::ThresholdMilli(500));
        assert_eq!(
            Size::parse_list("75%,50%,33%").unwrap(),
            vec![
                Size::BandwidthPct(75),
                Size::BandwidthPct(50),
                Size::BandwidthPct(33)
            ]
        );
    }

    #[test]
    fn a_bad_size_names_the_value_and_the_accepted_forms() {
        let e = Size::parse("half").unwrap_err().to_string();
        assert!(
            e.contains("\"half\"") && e.contains("50%") && e.contains("0.5x"),
            "{e}"
        );
        let e = Size::parse("0%").unwrap_err().to_string();
        assert!(e.contains("\"0%\"") && e.contains("1% to 200%"), "{e}");
        let e = Size::parse("-2x").unwrap_err().to_string();
        assert!(e.contains("0x to 1000x"), "{e}");
        assert!(Size::parse("300").is_err());
    }

    #[test]
    fn sizes_within_what_the_checks_call_healthy_are_controls_and_the_others_faults() {
        let control = |s: &str| Size::parse(s).unwrap().is_control();
        assert!(control("0.5x") && control("1x") && control("100%") && control("0"));
        assert!(!control("1.01x") && !control("2x") && !control("75%") && !control("1"));
    }

    #[test]
    fn a_multiple_raises_that_many_allowances_and_a_flap_count_itself() {
        assert_eq!(Size::parse("0.5x").unwrap().raise(120), 60);
        assert_eq!(Size::parse("1x").unwrap().raise(120), 120);
        assert_eq!(Size::parse("10x").unwrap().raise(1_000_000), 10_000_000);
        assert_eq!(Size::parse("3").unwrap().raise(0), 3);
    }

    #[test]
    fn a_size_reads_back_from_its_json_string() {
        let v = serde_json::to_string(&Size::ThresholdMilli(2000)).unwrap();
        assert_eq!(v, "\"2x\"");
        assert_eq!(
            serde_json::from_str::<Size>(&v).unwrap(),
            Size::ThresholdMilli(2000)
        );
    }

    #[test]
    fn the_benchmark_line_says_none_for_a_figure_no_round_gave() {
        let s = GradedSummary {
            classes: 2,
            sizes: 8,
            recall_at_half_bw: None,
            quiet_below_threshold: Some(1.0),
            false_drains: 0,
        };
        assert_eq!(
            s.line(),
            "drill-graded: classes 2, sizes 8, recall_at_half_bw none, quiet_below_threshold 1.00, false_drains 0"
        );
    }
}
