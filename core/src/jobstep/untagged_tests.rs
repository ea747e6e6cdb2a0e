//! No checked job without a tag: a first node whose rendezvous failed (every candidate port held,
//! no follower in time) keeps why, and its epilog writes a tag with its own verdicts and a note
//! that says so. On the fakes, with the real rendezvous where the ports are the point.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, TcpListener};

use crate::jobstep::meet::{Meeting, RendezvousMeet, meeting_id};
use crate::jobstep::{Seams, epilog, prolog};
use crate::testing::{FakeMeet, FakeRunner, FakeSlurm, Lines, report, seams, setup, step};
use fabric_net::rendezvous::{MapResolver, SystemResolver, Window};
use fabric_proto::invocation::Script;
use fabric_proto::tag::{self, JobTag, Verdict};

const NODES: &[&str] = &["n1", "n2"];

fn tag_of(slurm: &FakeSlurm) -> Option<JobTag> {
    tag::extract(&slurm.current_comment()).map(|t| t.expect("a readable tag"))
}

fn kept(dir: &std::path::Path) -> Vec<String> {
    let s = setup(dir, Script::Epilog, "n[1-2]", "n1", &[]);
    std::fs::read_dir(&s.state_dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("rendezvous-failed-"))
                .collect()
        })
        .unwrap_or_default()
}

/// The epilog of job 7 on `node` of n[1-2] (its prolog's snapshot in place) meeting through
/// `meet`.
fn epilog_on(dir: &std::path::Path, slurm: &FakeSlurm, node: &str, meet: &FakeMeet) -> Lines {
    let s = setup(dir, Script::Epilog, "n[1-2]", node, &["policy=warn"]);
    std::fs::write(
        s.state_dir.join("job-7.json"),
        serde_json::to_vec(&report(node, Verdict::Pass)).unwrap(),
    )
    .unwrap();
    let runner = FakeRunner::answering(vec![Ok(report(node, Verdict::Pass))]);
    let lines = Lines::default();
    epilog::run(&step(&s, seams(slurm, &runner, meet, &lines)));
    lines
}

/// The prolog of job 7 on `node` of n[1-2] whose probe says `verdict`, meeting through `meet`.
fn prolog_on(
    dir: &std::path::Path,
    slurm: &FakeSlurm,
    node: &str,
    verdict: Verdict,
    meet: &FakeMeet,
) -> Lines {
    let s = setup(dir, Script::Prolog, "n[1-2]", node, &["policy=warn"]);
    let runner = FakeRunner::answering(vec![Ok(report(node, verdict))]);
    let lines = Lines::default();
    prolog::run(&step(&s, seams(slurm, &runner, meet, &lines)));
    lines
}

/// A window whose candidates for job 7's prolog are all held now by listeners on 127.0.0.1,
/// the listeners, and those ports.
fn every_candidate_held() -> (Window, Vec<TcpListener>, Vec<u16>) {
    let id = meeting_id(7, Meeting::Prolog);
    (0..50)
        .find_map(|_| {
            let free = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
            let first = free.local_addr().ok()?.port().checked_sub(4)?;
            drop(free);
            let window = Window::new(first, 16, 8).ok()?;
            let ports = window.candidates(id);
            let held: Vec<TcpListener> = ports
                .iter()
                .map(|p| TcpListener::bind((Ipv4Addr::LOCALHOST, *p)).ok())
                .collect::<Option<_>>()?;
            Some((window, held, ports))
        })
        .expect("no window of free loopback ports")
}

#[test]
fn a_first_node_whose_every_candidate_port_is_held_names_them_and_its_job_still_ends_with_a_tag() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::with_nodes(NODES);
    let (window, _held, ports) = every_candidate_held();

    // The prolog on the first node, through the real rendezvous: no port to listen on.
    let s = setup(dir.path(), Script::Prolog, "n[1-2]", "n1", &["policy=warn"]);
    let lines = Lines::default();
    let resolver = MapResolver::<SystemResolver> {
        map: NODES
            .iter()
            .map(|n| ((*n).to_owned(), IpAddr::V4(Ipv4Addr::LOCALHOST)))
            .collect::<BTreeMap<_, _>>(),
        fallback: None,
    };
    let real = RendezvousMeet {
        slurm: &slurm,
        resolver: &resolver,
        hosts_file: None,
        munge_socket: None,
        window,
        relay: &lines,
    };
    let runner = FakeRunner::answering(vec![Ok(report("n1", Verdict::Warn))]);
    prolog::run(&step(
        &s,
        Seams {
            slurm: &slurm,
            runner: &runner,
            meet: &real,
            relay: &lines,
        },
    ));
    let said = lines.text();
    for p in &ports {
        assert!(said.contains(&p.to_string()), "port {p} not named: {said}");
    }
    assert!(
        said.contains("ip_local_reserved_ports") && said.contains("port_base="),
        "{said}"
    );
    assert_eq!(tag_of(&slurm), None, "the prolog met nobody: {said}");
    assert_eq!(kept(dir.path()).len(), 1, "why is kept for the epilog");

    // The epilog's meeting works (its own ports); nothing rose, no records: today it would
    // leave the job untagged.
    let lines = epilog_on(dir.path(), &slurm, "n1", &FakeMeet::default());
    let t = tag_of(&slurm).unwrap_or_else(|| panic!("no tag: {}", lines.text()));
    assert_eq!(t.verdict, Some(Verdict::Error), "n2 never met: {t:?}");
    assert_eq!(
        t.nodes["n1"].verdict,
        Verdict::Warn,
        "the prolog's own verdict"
    );
    assert_eq!(t.missing, ["n2"]);
    assert_eq!(t.mode.as_deref(), Some("quick"));
    let note = t
        .notes
        .iter()
        .find(|n| n.starts_with("the rendezvous failed: "))
        .unwrap_or_else(|| panic!("no note: {:?}", t.notes));
    assert!(note.contains(&ports[0].to_string()), "{note}");
    assert!(kept(dir.path()).is_empty(), "removed once the tag holds it");
}

#[test]
fn a_first_node_that_meets_nobody_at_prolog_or_epilog_still_tags_the_job_with_its_own_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::with_nodes(NODES);
    let nobody = FakeMeet {
        fail: Some("no follower joined within 7900 ms".into()),
        ..FakeMeet::default()
    };
    prolog_on(dir.path(), &slurm, "n1", Verdict::Pass, &nobody);
    assert_eq!(tag_of(&slurm), None);

    let lines = epilog_on(dir.path(), &slurm, "n1", &nobody);
    let t = tag_of(&slurm).unwrap_or_else(|| panic!("no tag: {}", lines.text()));
    assert_eq!(t.nodes["n1"].verdict, Verdict::Pass, "{t:?}");
    assert_eq!(t.missing, ["n2"]);
    assert!(
        t.notes
            .iter()
            .any(|n| n == "the rendezvous failed: timed out: no follower joined within 7900 ms"),
        "{:?}",
        t.notes
    );
    assert!(
        t.notes
            .iter()
            .any(|n| n.starts_with("the epilog's the rendezvous failed: ")),
        "{:?}",
        t.notes
    );
}

#[test]
fn an_epilog_keeps_the_prologs_verdict_where_the_job_has_one() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::with_nodes(NODES);
    let both = FakeMeet {
        peers: [(
            "n2".to_owned(),
            serde_json::json!({"result": {"verdict": "fail", "checks": ["ib.port_state"]},
                "notes": [], "collective": null}),
        )]
        .into(),
        ..FakeMeet::default()
    };
    prolog_on(dir.path(), &slurm, "n1", Verdict::Pass, &both);
    assert_eq!(tag_of(&slurm).and_then(|t| t.verdict), Some(Verdict::Fail));
    assert!(kept(dir.path()).is_empty());
    // The epilog's meeting fails: it writes its own part, never its verdicts over the prolog's.
    let nobody = FakeMeet {
        fail: Some("gone".into()),
        ..FakeMeet::default()
    };
    epilog_on(dir.path(), &slurm, "n1", &nobody);
    let t = tag_of(&slurm).unwrap();
    assert_eq!(t.verdict, Some(Verdict::Fail), "{t:?}");
    assert!(t.missing.is_empty() && t.notes.is_empty(), "{t:?}");
}

#[test]
fn a_follower_whose_rendezvous_failed_keeps_nothing_and_writes_no_tag() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::with_nodes(NODES);
    let nobody = FakeMeet {
        fail: Some("no leader".into()),
        ..FakeMeet::default()
    };
    prolog_on(dir.path(), &slurm, "n2", Verdict::Pass, &nobody);
    epilog_on(dir.path(), &slurm, "n2", &nobody);
    assert_eq!(tag_of(&slurm), None);
    let s = setup(dir.path(), Script::Epilog, "n[1-2]", "n2", &[]);
    assert!(
        std::fs::read_dir(&s.state_dir)
            .unwrap()
            .flatten()
            .all(|e| !e
                .file_name()
                .to_string_lossy()
                .starts_with("rendezvous-failed-")),
        "a follower keeps nothing"
    );
}
