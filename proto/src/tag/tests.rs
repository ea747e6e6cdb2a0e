//! The tag's tests: schema, bound, wire form and base32 together.

use std::collections::BTreeMap;

use super::bound::names_of;
use super::wire::locate_as;
use super::*;

#[test]
fn a_bare_marker_ahead_of_ours_does_not_hide_our_tag() {
    let tag = JobTag::default();
    for comment in [
        "fabric-check/v1",
        "x fabric-check/v1 {broken",
        "fabric-check/v1 fabric-check/v1",
        "fabric-check/v1 b32:",
        "fabric-check/v1 b32:zz\u{e9} fabric-check/v1 {",
        "fabric-check/v1 {`a` \u{fc}} x",
        "fabric-check/v1 {[}]\u{fc}",
        "fabric-check/v1 b32:mzxw6=== tail",
    ] {
        let spliced = splice(comment, &tag);
        let back = extract(&spliced)
            .expect("a segment")
            .unwrap_or_else(|e| panic!("{comment:?} -> {spliced:?}: {e}"));
        assert_eq!(back.verdict, tag.verdict, "{spliced:?}");
        let again = splice(&spliced, &tag);
        assert_eq!(again, spliced, "a second splice replaces ours in place");
    }
}

fn node(v: Verdict) -> NodeResult {
    NodeResult {
        verdict: v,
        checks: vec![],
        probe_ms: Some(3),
        drained: false,
    }
}

fn tag_with(nodes: &[(&str, Verdict)]) -> JobTag {
    let mut t = JobTag {
        nnodes: nodes.len() as u32,
        nodes: nodes
            .iter()
            .map(|(n, v)| (n.to_string(), node(*v)))
            .collect(),
        ..JobTag::default()
    };
    t.recount();
    t
}

#[test]
fn the_job_verdict_is_the_worst_node_verdict() {
    let t = tag_with(&[
        ("n1", Verdict::Pass),
        ("n2", Verdict::Fail),
        ("n3", Verdict::Warn),
    ]);
    assert_eq!(t.verdict, Some(Verdict::Fail));
    assert_eq!(t.counts[&Verdict::Pass], 1);
    assert_eq!(t.counts[&Verdict::Fail], 1);
}

#[test]
fn a_missing_node_counts_as_an_error() {
    let mut t = tag_with(&[("n1", Verdict::Pass)]);
    t.missing = vec!["n2".into()];
    t.recount();
    assert_eq!(t.verdict, Some(Verdict::Error));
}

#[test]
fn splice_keeps_a_foreign_prefix_and_suffix() {
    let t = tag_with(&[("n1", Verdict::Pass)]);
    let first = splice("JS1:abcd", &t);
    assert!(first.starts_with("JS1:abcd fabric-check/v1 {"), "{first}");
    let with_suffix = format!("{first} other:xyz");
    let mut t2 = t.clone();
    t2.notes.push("second write".into());
    let second = splice(&with_suffix, &t2);
    assert!(second.starts_with("JS1:abcd fabric-check/v1 {"), "{second}");
    assert!(second.ends_with(" other:xyz"), "{second}");
    assert_eq!(second.matches(MARKER).count(), 1);
    assert_eq!(extract(&second).unwrap().unwrap(), t2);
}

#[test]
fn a_segment_that_a_broken_one_ahead_would_swallow_once_spliced_goes_first_and_reads_back() {
    // Found by the fuzzer: the broken segment's `[` leaves its braces unbalanced, so the readable
    // segment inside it is found; once ours replaces that one, the braces balance and the broken
    // segment's extent covers ours.
    let comment = r#"JS1:H4sIAAAA fabric-check/v1 {"v":1,"verdict":"fail","option":"full","probed_at":1764000000,"nnod\s":2,"nodes":{ fabric-check/v1 {"v":1,"verdict":"fail","option":"full","pain[d":true}}} tail"#;
    let t = tag_with(&[("n1", Verdict::Pass)]);
    let spliced = splice(comment, &t);
    assert_eq!(extract(&spliced).unwrap().unwrap(), t, "{spliced}");
    assert!(spliced.starts_with(MARKER), "{spliced}");
    assert!(
        spliced.contains(r#"JS1:H4sIAAAA fabric-check/v1 {"v":1,"verdict":"fail""#),
        "the other text is kept: {spliced}"
    );
    assert!(spliced.ends_with("}} tail"), "{spliced}");
    // Spliced again, it stays in its place.
    let again = splice(&spliced, &t);
    assert_eq!(again, spliced);
}

#[test]
fn splice_into_an_empty_comment_is_just_the_segment() {
    let t = tag_with(&[("n1", Verdict::Warn)]);
    let s = splice("", &t);
    assert!(s.starts_with(MARKER));
    assert_eq!(extract(&s).unwrap().unwrap().verdict, Some(Verdict::Warn));
}

#[test]
fn a_broken_segment_is_reported_and_replaced_without_touching_the_rest() {
    let comment = "JS1:aa fabric-check/v1 {broken tail:zz";
    assert!(extract(comment).unwrap().is_err());
    let t = tag_with(&[("n1", Verdict::Pass)]);
    let s = splice(comment, &t);
    assert!(s.starts_with("JS1:aa fabric-check/v1 {"));
    assert!(s.ends_with(" tail:zz"), "{s}");
}

#[test]
fn a_tag_mangled_by_sacctmgr_quoting_is_still_read_and_replaced_in_place() {
    let t = tag_with(&[("n1", Verdict::Pass), ("n2", Verdict::Fail)]);
    let mangled = splice("JS1:aa", &t).replace('"', "`") + " tail:zz";
    assert_eq!(extract(&mangled).unwrap().unwrap(), t);
    let again = splice(&mangled, &t);
    assert_eq!(again, format!("{} tail:zz", splice("JS1:aa", &t)));
}

#[test]
fn a_comment_without_our_marker_has_no_tag() {
    assert!(extract("JS1:abc").is_none());
}

#[test]
fn a_huge_job_tag_stays_within_bound_and_keeps_failing_nodes() {
    let mut nodes: Vec<(String, Verdict)> = (0..2000)
        .map(|i| (format!("gpu{i:04}"), Verdict::Pass))
        .collect();
    nodes.push(("gpu9999".into(), Verdict::Fail));
    let refs: Vec<(&str, Verdict)> = nodes.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let t = tag_with(&refs);
    let json = t.bounded();
    assert!(json.len() <= MAX_TAG_BYTES, "{}", json.len());
    let back: JobTag = serde_json::from_str(&json).unwrap();
    assert!(back.truncated);
    assert_eq!(back.counts[&Verdict::Pass], 2000);
    assert_eq!(back.nodes["gpu9999"].verdict, Verdict::Fail);
    assert_eq!(back.nodes["gpu[0000-1999]"].verdict, Verdict::Pass);
    assert_eq!(back.result_of("gpu0042").unwrap().verdict, Verdict::Pass);
    assert_eq!(back.verdict, Some(Verdict::Fail));
}

/// Every node the tag names for `verdict`, hostlist keys expanded.
fn named(map: &BTreeMap<String, NodeResult>, verdict: Verdict) -> Vec<String> {
    let mut out: Vec<String> = map
        .iter()
        .filter(|(_, r)| r.verdict == verdict)
        .flat_map(|(k, _)| names_of(k))
        .collect();
    out.sort();
    out
}

fn expanded(list: &[String]) -> Vec<String> {
    let mut out: Vec<String> = list.iter().flat_map(|k| names_of(k)).collect();
    out.sort();
    out
}

/// A `n`-node job: nodes `fail_every`th fail with a check of their own kind, the last
/// `unreachable` never reported (missing, and missing from the collective).
fn big_job(n: u32, fail_every: u32, unreachable: u32) -> JobTag {
    let mut t = JobTag {
        nnodes: n,
        mode: Some("full".into()),
        ..JobTag::default()
    };
    for i in 1..=n - unreachable {
        let failing = i % fail_every == 0;
        t.nodes.insert(
            format!("gpu{i:04}"),
            NodeResult {
                verdict: if failing {
                    Verdict::Fail
                } else {
                    Verdict::Pass
                },
                checks: if failing {
                    vec![format!("ib.check_{}", i % 3)]
                } else {
                    vec![]
                },
                probe_ms: Some(u64::from(i % 97)),
                drained: false,
            },
        );
    }
    t.missing = (n - unreachable + 1..=n)
        .map(|i| format!("gpu{i:04}"))
        .collect();
    for i in (1..=n).step_by(7) {
        t.earlier.insert(format!("gpu{i:04}"), node(Verdict::Fail));
    }
    t.collective = Some(CollectiveSummary {
        verdict: Some(Verdict::Error),
        missing: t.missing.clone(),
        outliers: (1..=40).map(|i| format!("gpu{:04}", i * 13)).collect(),
        ..CollectiveSummary::default()
    });
    t.notes = (0..30)
        .map(|i| format!("gpu{i:04}: probe took long"))
        .collect();
    t.recount();
    t
}

fn assert_bounded_keeps_failing(t: &JobTag, limit: usize) -> JobTag {
    let json = t.bounded_to(limit);
    assert!(json.len() <= limit, "{} bytes > {limit}", json.len());
    let back: JobTag = serde_json::from_str(&json).unwrap();
    assert!(back.truncated);
    assert_eq!(back.counts, t.counts, "counts are always kept");
    assert_eq!(back.verdict, t.verdict);
    for v in [Verdict::Fail, Verdict::Error, Verdict::Warn] {
        assert_eq!(named(&back.nodes, v), named(&t.nodes, v), "{v:?} nodes");
        assert_eq!(
            named(&back.earlier, v),
            named(&t.earlier, v),
            "earlier {v:?}"
        );
    }
    assert_eq!(expanded(&back.missing), expanded(&t.missing));
    let (c, c0) = (
        back.collective.as_ref().unwrap(),
        t.collective.as_ref().unwrap(),
    );
    assert_eq!(expanded(&c.missing), expanded(&c0.missing));
    assert_eq!(expanded(&c.outliers), expanded(&c0.outliers));
    back
}

#[test]
fn a_600_node_tag_with_unreachable_followers_stays_within_the_bound_naming_every_failing_and_missing_node()
 {
    let t = big_job(600, 11, 150);
    assert!(serde_json::to_string(&t).unwrap().len() > 3 * MAX_TAG_BYTES);
    let back = assert_bounded_keeps_failing(&t, MAX_TAG_BYTES);
    assert_eq!(back.result_of("gpu0001").unwrap().verdict, Verdict::Pass);
    assert_bounded_keeps_failing(&t, MAX_DB_JSON_BYTES);
}

#[test]
fn a_1024_node_tag_summarises_passing_nodes_as_a_hostlist_and_keeps_every_failing_node() {
    let t = big_job(1024, 37, 3);
    let back = assert_bounded_keeps_failing(&t, MAX_TAG_BYTES);
    let pass_key = back
        .nodes
        .iter()
        .find(|(_, r)| r.verdict == Verdict::Pass)
        .map(|(k, _)| k.clone())
        .unwrap();
    assert!(pass_key.starts_with("gpu[0001-0036,0038-"), "{pass_key}");
    assert_bounded_keeps_failing(&t, MAX_DB_JSON_BYTES);
    let segment = segment(&t, Form::Database);
    assert!(
        segment.len() - MARKER.len() <= MAX_TAG_BYTES,
        "{}",
        segment.len()
    );
}

#[test]
fn failing_nodes_keep_their_checks_before_passing_detail_is_dropped() {
    let mut t = big_job(300, 10, 0);
    t.earlier.clear();
    t.collective = None;
    t.notes.clear();
    let back: JobTag = serde_json::from_str(&t.bounded()).unwrap();
    assert_eq!(back.nodes["gpu0010"].checks, vec!["ib.check_1".to_string()]);
    assert!(
        back.nodes["gpu0010"].probe_ms.is_some(),
        "timings go second"
    );
    assert_eq!(named(&back.nodes, Verdict::Pass).len(), 270);
}

/// What `sacctmgr -i modify job ... set AdminComment=` of Slurm 22.05 stores: every `"` and
/// `'` a backtick (`strip_quotes`), and everything lower case (`make_lower`).
fn through_sacctmgr_2205(value: &str) -> String {
    value.replace(['"', '\''], "`").to_lowercase()
}

#[test]
fn the_database_form_survives_sacctmgr_and_a_note_with_both_quotes_round_trips_in_original_case() {
    let mut t = tag_with(&[("GPU-A1", Verdict::Pass), ("GPU-B2", Verdict::Fail)]);
    t.notes
        .push("GPU-B2: probe panicked: thread 'main' said \"No Port\" `x`".into());
    let written = splice_as("js1:aa", &t, Form::Database);
    assert!(
        written.starts_with("js1:aa fabric-check/v1 b32:"),
        "{written}"
    );
    let stored = through_sacctmgr_2205(&written);
    assert_eq!(
        stored, written,
        "nothing in the database form is changed by sacctmgr"
    );
    assert_eq!(extract(&stored).unwrap().unwrap(), t);
    let value: serde_json::Value = extract_as(&stored).unwrap().unwrap();
    assert_eq!(value["notes"][0], t.notes[0].as_str());
    // A later live write replaces it in place, and a database write replaces that.
    let live = splice(&format!("{stored} tail:zz"), &t);
    assert_eq!(live, format!("js1:aa {MARKER}{} tail:zz", t.bounded()));
    assert_eq!(
        splice_as(&live, &t, Form::Database),
        format!("{written} tail:zz")
    );
}

#[test]
fn the_live_form_is_one_json_object_a_standard_parser_reads_to_the_tag() {
    let mut t = tag_with(&[("Node-1", Verdict::Warn)]);
    t.notes.push("it's \"quoted\"".into());
    let s = splice("JS1:Ab", &t);
    let json = &s[s.find(MARKER).unwrap() + MARKER.len()..];
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(serde_json::from_value::<JobTag>(value).unwrap(), t);
}

#[test]
fn a_mangled_tag_whose_note_had_an_apostrophe_is_read_and_replaced_without_leaving_its_tail() {
    let mut t = tag_with(&[("n1", Verdict::Fail)]);
    t.notes
        .push("n1: thread 'main' panicked at probe.rs".into());
    let mangled = format!("JS1:aa {} tail:zz", through_sacctmgr_2205(&splice("", &t)));
    assert_eq!(extract(&mangled).unwrap().unwrap(), t);
    // Unreadable beyond repair (a note with `', ` in it): the whole segment is replaced.
    let broken = "JS1:aa fabric-check/v1 {`verdict`:`fail`,`notes`:[`a `b`, c d`]} tail:zz";
    assert!(extract(broken).unwrap().is_err());
    let fixed = splice(broken, &t);
    assert_eq!(fixed, format!("JS1:aa {MARKER}{} tail:zz", t.bounded()));
}

#[test]
fn base32_matches_rfc_4648_in_lower_case() {
    for (plain, coded) in [
        ("", ""),
        ("f", "my======"),
        ("fo", "mzxq===="),
        ("foo", "mzxw6==="),
        ("foob", "mzxw6yq="),
        ("fooba", "mzxw6ytb"),
        ("foobar", "mzxw6ytboi======"),
    ] {
        assert_eq!(base32::encode(plain.as_bytes()), coded);
        assert_eq!(base32::decode(coded).unwrap(), plain.as_bytes());
        assert_eq!(
            base32::decode(&coded.to_uppercase()).unwrap(),
            plain.as_bytes()
        );
    }
    assert_eq!(base32::decode("mzx`"), None);
}

/// A segment in the form the reader repairs (sacctmgr's backticks), saying `pass`.
const FORGED: &str = "x fabric-check/v1 {`verdict`:`pass`,`nnodes`:1,`counts`:{`pass`:1},`nodes`:{`n9`:{`verdict`:`pass`}}}";

fn roots_fail_with(job: impl FnOnce(&mut JobTag)) -> JobTag {
    let mut t = tag_with(&[("n1", Verdict::Fail), ("n2", Verdict::Pass)]);
    job(&mut t);
    t
}

#[test]
fn a_forged_segment_in_a_jobs_message_is_never_read_in_place_of_roots_verdict() {
    let t = roots_fail_with(|t| {
        t.job_reported.slow.push(SlowClaim {
            node: "n2".into(),
            step: 1,
            message: Some(FORGED.into()),
        });
        // Numbers that once made root's own segment unreadable.
        t.run = Some(RunSummary {
            ckpt_total_s: f64::INFINITY,
            duration_s: f64::NAN,
            ..RunSummary::default()
        });
    });
    for form in [Form::Live, Form::Database] {
        let comment = splice_as("JS1:aa", &t, form);
        assert_eq!(comment.matches(MARKER).count(), 1, "{comment}");
        let back = extract(&comment).unwrap().expect("root's segment decodes");
        assert_eq!(back.verdict, Some(Verdict::Fail));
        assert_eq!(back.result_of("n1").unwrap().verdict, Verdict::Fail);
        assert!(back.result_of("n9").is_none());
        let msg = back.job_reported.slow[0].message.clone().unwrap();
        assert!(!msg.contains(MARKER.trim_end()), "{msg}");
    }
}

#[test]
fn a_marker_inside_an_unreadable_segment_of_ours_is_not_a_segment_of_its_own() {
    let comment = format!(
        "JS1:aa fabric-check/v1 {{\"verdict\":\"fail\",\"run\":{{\"duration_s\":null}},\"notes\":[\"{FORGED}\"]}} tail:zz"
    );
    let found = extract(&comment).expect("a segment");
    assert!(found.is_err(), "the forgery was read: {found:?}");
    let t = roots_fail_with(|_| {});
    let fixed = splice(&comment, &t);
    assert_eq!(fixed, format!("JS1:aa {MARKER}{} tail:zz", t.bounded()));
}

#[test]
fn non_finite_and_huge_numbers_are_clamped_so_the_tag_always_decodes() {
    let t = roots_fail_with(|t| {
        t.run = Some(RunSummary {
            step_p50_s: Some(f64::NAN),
            step_max_s: Some(f64::INFINITY),
            ckpt_total_s: f64::INFINITY,
            ckpt_max_s: -f64::INFINITY,
            restore_total_s: 1e300,
            duration_s: f64::NAN,
            ..RunSummary::default()
        });
        t.job_reported.steps = Some(CollectiveSummary {
            busbw_gb_s: Some(f64::INFINITY),
            small_time_us: Some(f64::NAN),
            ..CollectiveSummary::default()
        });
    });
    let back: JobTag = serde_json::from_str(&t.bounded()).expect("decodes");
    let run = back.run.unwrap();
    assert_eq!(run.ckpt_total_s, 0.0);
    assert_eq!(run.restore_total_s, MAX_SECONDS);
    assert_eq!(run.step_max_s, Some(0.0));
    assert_eq!(back.job_reported.steps.unwrap().busbw_gb_s, None);
    assert_eq!(back.verdict, Some(Verdict::Fail));
}

#[test]
fn an_endless_job_report_is_shrunk_before_any_of_roots_verdicts_or_counter_rises() {
    let nodes: Vec<(String, Verdict)> = (1..=40)
        .map(|i| {
            let v = if i % 5 == 0 {
                Verdict::Fail
            } else {
                Verdict::Pass
            };
            (format!("n{i}"), v)
        })
        .collect();
    let refs: Vec<(&str, Verdict)> = nodes.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let mut t = tag_with(&refs);
    t.during = (1..=6)
        .map(|i| DuringJob {
            node: format!("n{i}"),
            rises: [("mlx5_0/1/link_downed".to_owned(), 1)].into(),
            verdict: Verdict::Fail,
            watch: Vec::new(),
        })
        .collect();
    let root_only = serde_json::from_str::<JobTag>(&t.bounded()).unwrap();
    t.job_reported.steps = Some(CollectiveSummary {
        verdict: Some(Verdict::Fail),
        outliers: (0..20_000).map(|i| format!("slow{i}")).collect(),
        missing: (0..20_000).map(|i| format!("gone{i}")).collect(),
        ..CollectiveSummary::default()
    });
    t.job_reported.slow = (0..5_000)
        .map(|i| SlowClaim {
            node: format!("n{i}"),
            step: i,
            message: Some("m".repeat(500)),
        })
        .collect();
    for limit in [MAX_TAG_BYTES, MAX_DB_JSON_BYTES] {
        let json = t.bounded_to(limit);
        assert!(json.len() <= limit, "{} > {limit}", json.len());
        let back: JobTag = serde_json::from_str(&json).unwrap();
        assert_eq!(back.verdict, Some(Verdict::Fail));
        assert_eq!(back.counts, t.counts);
        for (n, v) in &refs {
            assert_eq!(back.result_of(n).map(|r| r.verdict), Some(*v), "{n}");
        }
        assert_eq!(
            back.during, root_only.during,
            "root's counter rises are whole"
        );
    }
}

/// A small seeded generator (xorshift), so the properties below need no extra crate.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Any number a job could make the summary hold, non-finite ones included.
    fn number(&mut self) -> f64 {
        match self.below(6) {
            0 => f64::INFINITY,
            1 => f64::NAN,
            2 => -f64::MAX,
            3 => f64::MAX,
            4 => f64::from_bits(self.next()),
            _ => self.below(1_000_000) as f64 / 7.0,
        }
    }
    /// Text with markers, backticks, quotes, control bytes and any characters.
    fn text(&mut self, max: u64) -> String {
        let len = self.below(max);
        let mut out = String::new();
        while (out.len() as u64) < len {
            match self.below(8) {
                0 => out.push_str(FORGED),
                1 => out.push_str("\"}`{'\\"),
                2 => out.push(char::from(self.below(32) as u8)),
                3 => out.push_str(MARKER),
                _ => out.push(char::from_u32(self.below(0x3000) as u32).unwrap_or('?')),
            }
        }
        out
    }
}

/// Root's part of a tag: `n` nodes, some failing, some missing, some with counter rises.
fn roots_part(g: &mut Gen) -> (JobTag, Vec<String>) {
    let n = 1 + g.below(48) as u32;
    let mut t = JobTag {
        nnodes: n,
        mode: Some("full".into()),
        probed_at: Some(1_700_000_000),
        ..JobTag::default()
    };
    let mut rises = Vec::new();
    for i in 1..=n {
        let name = format!("gpu{i:03}");
        match g.below(10) {
            0 => t.missing.push(name),
            1 | 2 => {
                t.nodes.insert(
                    name.clone(),
                    NodeResult {
                        verdict: Verdict::Fail,
                        checks: vec!["ib.port_state".into()],
                        probe_ms: Some(g.below(900)),
                        drained: g.below(2) == 0,
                    },
                );
                rises.push(name);
            }
            _ => {
                t.nodes.insert(name, node(Verdict::Pass));
            }
        }
    }
    t.during = rises
        .iter()
        .map(|n| DuringJob {
            node: n.clone(),
            rises: [("mlx5_0/1/link_downed".to_owned(), 1 + g.below(5))].into(),
            verdict: Verdict::Fail,
            watch: Vec::new(),
        })
        .collect();
    t.recount();
    (t, rises)
}

fn jobs_part(g: &mut Gen, t: &mut JobTag) {
    let names =
        |g: &mut Gen, n: u64| -> Vec<String> { (0..g.below(n)).map(|_| g.text(80)).collect() };
    t.job_reported.steps = Some(CollectiveSummary {
        verdict: Some(Verdict::Pass),
        busbw_gb_s: Some(g.number()),
        small_time_us: Some(g.number()),
        wrong: g.next(),
        outliers: names(g, 3000),
        tails: names(g, 300),
        missing: names(g, 300),
    });
    t.job_reported.slow = (0..g.below(400))
        .map(|_| SlowClaim {
            node: g.text(100),
            step: g.next() as u32,
            message: Some(g.text(2000)),
        })
        .collect();
    t.run = Some(RunSummary {
        steps: g.next(),
        step_p50_s: Some(g.number()),
        step_p95_s: Some(g.number()),
        step_max_s: Some(g.number()),
        ckpt_n: g.next(),
        ckpt_total_s: g.number(),
        ckpt_max_s: g.number(),
        restore_total_s: g.number(),
        duration_s: g.number(),
        outcome: g.text(300),
        ..RunSummary::default()
    });
}

#[test]
fn whatever_a_job_writes_the_stored_tag_fits_decodes_and_holds_roots_verdict_for_every_node() {
    for seed in 1..=300u64 {
        let mut g = Gen(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let (root, rises) = roots_part(&mut g);
        let mut t = root.clone();
        jobs_part(&mut g, &mut t);
        for form in [Form::Live, Form::Database] {
            let comment = splice_as("JS1:aa", &t, form);
            let segment = &comment[comment.find(MARKER).unwrap() + MARKER.len()..];
            assert!(
                segment.len() <= MAX_TAG_BYTES,
                "seed {seed}: {} bytes",
                segment.len()
            );
            assert_eq!(comment.matches(MARKER).count(), 1, "seed {seed}: {comment}");
            let back = extract(&comment)
                .unwrap()
                .unwrap_or_else(|e| panic!("seed {seed} {form:?}: {e}: {comment}"));
            assert_eq!(back.verdict, root.verdict, "seed {seed}");
            assert_eq!(back.counts, root.counts, "seed {seed}");
            for (n, r) in &root.nodes {
                assert_eq!(
                    back.result_of(n).map(|b| b.verdict),
                    Some(r.verdict),
                    "seed {seed}: {n}"
                );
            }
            assert_eq!(
                expanded(&back.missing),
                expanded(&root.missing),
                "seed {seed}"
            );
            let named: Vec<String> = back.during.iter().flat_map(|d| names_of(&d.node)).collect();
            for n in &rises {
                assert!(named.contains(n), "seed {seed}: {n}'s rise is gone");
            }
        }
    }
}

#[test]
fn the_run_summary_round_trips() {
    let mut t = tag_with(&[("n1", Verdict::Pass)]);
    t.run = Some(RunSummary {
        steps: 10,
        step_p50_s: Some(1.5),
        ckpt_n: 2,
        ckpt_total_s: 4.0,
        ckpt_max_s: 3.0,
        outcome: "accepted".into(),
        accepted: true,
        on_time: true,
        ..RunSummary::default()
    });
    let s = splice("", &t);
    assert_eq!(extract(&s).unwrap().unwrap(), t);
}

#[test]
fn fabric_faults_and_slow_step_events_are_carried_and_a_summary_without_them_still_decodes() {
    let mut t = tag_with(&[("n1", Verdict::Pass)]);
    t.run = Some(RunSummary {
        steps: 10,
        outcome: "accepted".into(),
        fabric_faults: Some(2),
        slow_step_events: Some(1),
        ..RunSummary::default()
    });
    let s = splice("", &t);
    assert!(s.contains(r#""fabric_faults":2"#), "{s}");
    assert!(s.contains(r#""slow_step_events":1"#), "{s}");
    assert_eq!(extract(&s).unwrap().unwrap(), t);
    let old = r#"{"steps":3,"ckpt_n":0,"ckpt_total_s":0.0,"ckpt_max_s":0.0,"retries":0,"requeues":0,"duration_s":1.0,"outcome":"accepted","accepted":true,"on_time":true}"#;
    let back: RunSummary = serde_json::from_str(old).unwrap();
    assert_eq!((back.fabric_faults, back.slow_step_events), (None, None));
    let quiet = serde_json::to_string(&back).unwrap();
    assert!(
        !quiet.contains("fabric_faults") && !quiet.contains("slow_step"),
        "{quiet}"
    );
}

/// A comment of `bytes` of `fabric-check/v1 ` markers, each followed by `follow`, then
/// `ours`.
fn markers_then(follow: &str, bytes: usize, ours: &str) -> String {
    let unit = format!("{MARKER}{follow}");
    format!("{} {ours}", unit.repeat(bytes / unit.len()))
}

#[test]
fn a_megabyte_of_markers_is_read_through_to_our_segment_and_spliced_in_place() {
    // Every marker used to copy or rescan the rest of the comment: a megabyte of these took
    // minutes. Each shape starts a segment that never decodes.
    let t = tag_with(&[("n1", Verdict::Pass), ("n2", Verdict::Fail)]);
    let newer = tag_with(&[("n1", Verdict::Fail), ("n2", Verdict::Fail)]);
    for follow in [
        "{",
        "{`",
        "",
        "b32:",
        "{\"a\":\"",
        "{\"a\":[",
        "[`{",
        "{`a`:`",
    ] {
        for form in [Form::Live, Form::Database] {
            let comment = markers_then(follow, 1 << 20, &segment(&t, form));
            assert!(comment.len() >= 1 << 20);
            let found = extract(&comment).expect("a segment");
            assert_eq!(found.unwrap(), t, "{follow:?} {form:?}");
            let spliced = splice_as(&comment, &newer, form);
            let ours_at = comment.len() - segment(&t, form).len();
            assert!(
                spliced[..ours_at] == comment[..ours_at],
                "{follow:?}: the markers are kept as they were"
            );
            assert_eq!(spliced[ours_at..], segment(&newer, form), "{follow:?}");
            assert_eq!(extract(&spliced).unwrap().unwrap(), newer);
        }
        // None of them decodes: the first is reported unreadable and replaced.
        let comment = markers_then(follow, 1 << 20, "JS1:aa");
        assert!(extract(&comment).expect("a segment").is_err(), "{follow:?}");
        let spliced = splice(&comment, &t);
        assert_eq!(extract(&spliced).unwrap().unwrap(), t, "{follow:?}");
        assert!(spliced.ends_with(" JS1:aa"), "{follow:?}");
    }
}

#[test]
fn the_reader_finds_the_segment_and_extent_the_old_reader_found_in_every_generated_comment() {
    let t = tag_with(&[("n1", Verdict::Pass), ("n2", Verdict::Warn)]);
    let live = segment(&t, Form::Live);
    let pieces = [
        MARKER.to_owned(),
        MARKER.to_owned(),
        live.clone(),
        live.replace('"', "`"),
        live[..live.len() / 2].to_owned(),
        segment(&t, Form::Database),
        DB_FORM_PREFIX.to_owned(),
        "mzxw6===".to_owned(),
        "{".into(),
        "}".into(),
        "[".into(),
        "]".into(),
        "`".into(),
        "\"".into(),
        "'".into(),
        "\\".into(),
        ":".into(),
        ",".into(),
        " ".into(),
        "\n".into(),
        "{`".into(),
        "`:`".into(),
        "{\"a\":".into(),
        "{\"mode\":\"quick\"}".into(),
        "JS1:aa".into(),
        "1".into(),
        "\u{e9}".into(),
        "\u{1f600}".into(),
    ];
    let mut g = Gen(0x5eed_1e55_f00d_cafe);
    for case in 0..20_000 {
        let n = 1 + g.below(24);
        let comment: String = (0..n)
            .map(|_| pieces[g.below(pieces.len() as u64) as usize].as_str())
            .collect();
        let new = locate_as::<JobTag>(&comment);
        let old = quadratic::locate_as::<JobTag>(&comment);
        match (&new, &old) {
            (None, None) => {}
            (Some((r, a)), Some((s, b))) => {
                assert_eq!(r, s, "case {case}: {comment:?}");
                match (a, b) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "case {case}: {comment:?}"),
                    (Err(a), Err(b)) => {
                        assert_eq!(a.to_string(), b.to_string(), "case {case}: {comment:?}")
                    }
                    _ => panic!("case {case}: {comment:?}: {a:?} against {b:?}"),
                }
            }
            _ => panic!("case {case}: {comment:?}: {new:?} against {old:?}"),
        }
    }
}
