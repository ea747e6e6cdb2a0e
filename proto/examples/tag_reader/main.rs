//! Times the tag reader (`tag::extract`) on an `AdminComment` full of `fabric-check/v1 `
//! markers, against two named baselines over the same bytes: `str::find` (every marker found by
//! `str::match_indices`, the least any reader does) and the reader as it was before it was made
//! linear (`quadratic.rs`, kept here and in the reader's tests only). Run by
//! `scripts/bench-tag-reader`.
//!
//!     tag_reader [--bytes N] [--old-bytes N] [--runs R]
//!
//! Each shape is a marker followed by what starts a segment (`{`, ``{` ``, `b32:`, ...),
//! repeated to `--bytes` (default 1 MiB), then our readable segment: the reader must pass every
//! marker to find it. Before timing, the reader's segment and extent (through `tag::splice`) are
//! checked against the old reader's on every shape (64 KiB of it). The reader and the scan are
//! timed `--runs` times (default 3; medians); the old reader once, on the `backtick` shape (its
//! slowest) of `--old-bytes` (default `--bytes`; 0 skips it). The last line gives the figures of
//! the `backtick` shape.

use std::time::{Duration, Instant};

// `quadratic.rs` takes these from the module that includes it.
use fabric_proto::tag::{self, DB_FORM_PREFIX, Form, JobTag, MARKER, TagDecodeError};

mod quadratic;

/// The shape the old reader is timed on: its slowest (two copies of the rest per marker).
const OLD_SHAPE: &str = "backtick";

/// What follows the marker in each shape.
const SHAPES: [(&str, &str); 6] = [
    ("open-brace", "{"),
    ("backtick", "{`"),
    ("bare", ""),
    ("b32", "b32:"),
    ("open-string", "{\"a\":\""),
    ("open-list", "{\"a\":["),
];

fn comment(follow: &str, bytes: usize, ours: &str) -> String {
    let unit = format!("{MARKER}{follow}");
    let mut text = unit.repeat(bytes / unit.len());
    text.push(' ');
    text.push_str(ours);
    text
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

fn time<R>(runs: usize, mut f: impl FnMut() -> R) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The comment with our tag spliced in, as the old reader would have placed it.
fn old_splice(comment: &str, tag: &JobTag) -> String {
    let segment = tag::segment(tag, Form::Live);
    match quadratic::locate_as::<JobTag>(comment) {
        Some((range, _)) => format!(
            "{}{segment}{}",
            &comment[..range.start],
            &comment[range.end..]
        ),
        None if comment.trim().is_empty() => segment,
        None => format!("{} {segment}", comment.trim_end()),
    }
}

fn main() {
    let mut bytes = 1 << 20;
    let mut old_bytes = None;
    let mut runs = 3;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = args.next().and_then(|v| v.parse::<usize>().ok());
        match (a.as_str(), value) {
            ("--bytes", Some(v)) => bytes = v,
            ("--old-bytes", Some(v)) => old_bytes = Some(v),
            ("--runs", Some(v)) if v > 0 => runs = v,
            _ => {
                eprintln!("usage: tag_reader [--bytes N] [--old-bytes N] [--runs R]");
                std::process::exit(2);
            }
        }
    }
    let old_bytes = old_bytes.unwrap_or(bytes);
    let mut ours = JobTag {
        mode: Some("quick".into()),
        ..JobTag::default()
    };
    ours.recount();
    let segment = tag::segment(&ours, Form::Live);
    let mut last = None;
    println!(
        "{:<12} {:>10} {:>12} {:>14} {:>14} {:>12}",
        "shape", "bytes", "reader ms", "str::find ms", "reader/find", "old ms"
    );
    for (name, follow) in SHAPES {
        let text = comment(follow, bytes, &segment);
        // The same segment, decoded the same, at the same extent as the old reader's.
        let found = tag::extract(&text);
        assert!(
            matches!(&found, Some(Ok(t)) if *t == ours),
            "{name}: the reader did not find our tag after the markers"
        );
        let small = comment(follow, 64 << 10, &segment);
        assert_eq!(
            tag::splice(&small, &ours),
            old_splice(&small, &ours),
            "{name}: the reader and the old reader disagree"
        );
        let reader = time(runs, || tag::extract(&text));
        let scan = time(runs, || text.match_indices(MARKER).count());
        let old = (name == OLD_SHAPE && old_bytes > 0).then(|| {
            let text = comment(follow, old_bytes, &segment);
            time(1, || quadratic::locate_as::<JobTag>(&text).map(|(r, _)| r))
        });
        println!(
            "{name:<12} {:>10} {:>12.2} {:>14.3} {:>14.1} {:>12}",
            text.len(),
            ms(reader),
            ms(scan),
            reader.as_secs_f64() / scan.as_secs_f64(),
            old.map_or("-".to_owned(), |o| format!("{:.1}", ms(o)))
        );
        if name == OLD_SHAPE {
            last = Some((reader, scan, old));
        }
    }
    let (reader, scan, old) = last.expect("the backtick shape is measured");
    let before = match old {
        Some(o) if old_bytes == bytes => format!(
            "old reader {:.1} ms, ratio old/str::find {:.0}, old/reader {:.0}",
            ms(o),
            o.as_secs_f64() / scan.as_secs_f64(),
            o.as_secs_f64() / reader.as_secs_f64()
        ),
        Some(o) => format!("old reader {:.1} ms on {} KiB", ms(o), old_bytes >> 10),
        None => "old reader not measured".to_owned(),
    };
    println!(
        "tag-reader: {} KiB of markers ({OLD_SHAPE}), reader {:.2} ms, str::find {:.3} ms, ratio reader/str::find {:.1}; {before}",
        bytes >> 10,
        ms(reader),
        ms(scan),
        reader.as_secs_f64() / scan.as_secs_f64(),
    );
}
