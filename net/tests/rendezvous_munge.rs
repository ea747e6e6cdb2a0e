//! The rendezvous against a real, private munged: genuine participants meet, strangers and
//! forgeries are turned away, a missing participant is named.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use common::munged::Munged;
use fabric_net::rendezvous::meeting::{Meeting, meeting_id};
use fabric_net::rendezvous::{
    self, Gathered, Munge, RendezvousConfig, RendezvousError, Share, gather,
};
use serde_json::{Value, json};

/// How long the test itself waits for something that comes at once on an idle machine (a
/// leader listening, a thread's answer): long enough for a loaded one, and only ever the bound
/// of a wait for that event, never a figure a test asserts.
const PATIENCE: Duration = Duration::from_secs(30);

/// The leader's wait: the timing assertions below are figured against it.
fn config(munged: &Munged, nodes: usize, job_id: u64, base: u16) -> RendezvousConfig {
    common::loopback::config(munged, nodes, job_id, base, Duration::from_millis(1500))
}

/// Each test gets its own window of free ports (all the ports a follower tries), so that tests
/// in parallel, another run of this suite and the kernel's ephemeral ports do not meet.
fn base() -> u16 {
    common::ports::free_window(common::loopback::PORTS)
}

fn spawn_rank(
    cfg: &RendezvousConfig,
    rank: usize,
) -> thread::JoinHandle<Result<Gathered, RendezvousError>> {
    let cfg = cfg.clone();
    thread::spawn(move || gather(&cfg, rank, &json!({ "rank": rank, "verdict": "pass" })))
}

/// Connects to the leader's port once this process listens there (the leader, not whoever else
/// may hold the port), waiting for that up to [`PATIENCE`].
fn connect_to_leader(port: u16) -> TcpStream {
    common::ports::wait_until_we_listen(port, "the leader", PATIENCE);
    TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .unwrap_or_else(|e| panic!("the leader listened on port {port}, then refused: {e}"))
}

/// The follower's first line: the job it looks for.
fn want(job_id: u64) -> String {
    format!(
        "{}\n",
        json!({"type": "want", "v": rendezvous::PROTOCOL_VERSION, "job_id": job_id})
    )
}

/// Connects to the leader of `job_id` on `port`, asks for that job and returns the stream and
/// the leader's first line (its hello, or a reject).
fn ask(port: u16, job_id: u64) -> (TcpStream, BufReader<TcpStream>, Value) {
    let mut stream = connect_to_leader(port);
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(want(job_id).as_bytes()).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    (
        stream,
        reader,
        serde_json::from_str(&line).unwrap_or(Value::Null),
    )
}

/// Speaks the protocol by hand: asks for the job, reads the hello, sends `join` with
/// `credential(challenge)`, and returns the leader's answer line.
fn forge(port: u16, job_id: u64, credential: impl FnOnce(&Value) -> String) -> Value {
    let (mut writer, mut reader, hello) = ask(port, job_id);
    assert_eq!(hello["type"], "hello", "{hello}");
    let mut line = String::new();
    let cred = credential(&hello);
    writeln!(writer, "{}", json!({"type": "join", "credential": cred})).unwrap();
    reader.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or(Value::Null)
}

fn claim(hello: &Value, job_id: u64, node: &str, rank: usize) -> Vec<u8> {
    let v = rendezvous::join_claim_json(
        job_id,
        node,
        rank,
        &rendezvous::random_hex().unwrap(),
        hello["challenge"].as_str().unwrap(),
        &json!({"forged": true}),
    );
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn four_participants_meet_and_every_one_gets_every_payload() {
    let Some(m) = Munged::start() else { return };
    let mut cfg = config(&m, 4, 1001, base());
    cfg.share = Share::All;
    let handles: Vec<_> = (0..4).map(|r| spawn_rank(&cfg, r)).collect();
    let results: Vec<Gathered> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    for (r, g) in results.iter().enumerate() {
        assert_eq!(g.my_rank, r);
        assert!(g.missing.is_empty(), "{g:?}");
        for (k, p) in g.payloads.iter().enumerate() {
            assert_eq!(
                p.as_ref().unwrap()["rank"],
                json!(k),
                "rank {r} sees rank {k}"
            );
        }
    }
}

#[test]
fn followers_get_only_an_ack_when_payloads_are_not_shared() {
    let Some(m) = Munged::start() else { return };
    let cfg = config(&m, 3, 1002, base());
    let handles: Vec<_> = (0..3).map(|r| spawn_rank(&cfg, r)).collect();
    let results: Vec<Gathered> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    assert_eq!(results[0].present(), vec![0, 1, 2]);
    assert_eq!(results[1].present(), vec![1]);
    assert_eq!(results[2].present(), vec![2]);
}

#[test]
fn a_participant_that_never_arrives_is_named_within_the_timeout() {
    let Some(m) = Munged::start() else { return };
    let cfg = config(&m, 4, 1003, base());
    let t = Instant::now();
    let handles: Vec<_> = [0, 1, 3].iter().map(|r| spawn_rank(&cfg, *r)).collect();
    let results: Vec<Gathered> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    assert!(t.elapsed() < cfg.timeout + Duration::from_secs(1));
    for g in &results {
        assert_eq!(g.missing, vec!["n3".to_string()]);
    }
    assert_eq!(results[0].present(), vec![0, 1, 3]);
}

#[test]
fn a_follower_without_a_leader_gives_up_naming_it() {
    let Some(m) = Munged::start() else { return };
    let mut cfg = config(&m, 2, 1004, base());
    cfg.timeout = Duration::from_millis(400);
    let err = gather(&cfg, 1, &json!(null)).unwrap_err();
    assert!(
        matches!(err, RendezvousError::NoLeader { ref leader, .. } if leader == "n1"),
        "{err}"
    );
}

/// Runs a 2-node leader alone and lets `attack` talk to it; returns the leader's result.
fn leader_facing(job_id: u64, attack: impl FnOnce(&Munged, u16)) -> Option<Gathered> {
    let m = Munged::start()?;
    let cfg = config(&m, 2, job_id, base());
    let port = cfg.ports()[0];
    let leader = spawn_rank(&cfg, 0);
    attack(&m, port);
    Some(leader.join().unwrap().unwrap())
}

fn assert_turned_away(g: &Gathered, reason: &str) {
    assert_eq!(
        g.missing,
        vec!["n2".to_string()],
        "the forger must not count as n2"
    );
    assert!(
        g.rejected.iter().any(|r| r.contains(reason)),
        "expected a rejection containing {reason:?}, got {:?}",
        g.rejected
    );
}

#[test]
fn a_participant_without_a_credential_is_rejected() {
    let Some(g) = leader_facing(1101, |_, port| {
        let answer = forge(port, 1101, |_| "not-a-credential".into());
        assert_eq!(answer["type"], "reject");
    }) else {
        return;
    };
    assert_turned_away(&g, "rejected by MUNGE");
}

#[test]
fn a_credential_from_another_munge_key_is_rejected() {
    // Started before the leader, whose wait it would otherwise eat into on a loaded machine.
    let Some(other) = Munged::start() else { return };
    let Some(g) = leader_facing(1102, |_, port| {
        let answer = forge(port, 1102, |hello| {
            Munge::with_socket(&other.socket)
                .encode(&claim(hello, 1102, "n2", 1))
                .unwrap()
        });
        assert_eq!(answer["type"], "reject");
        assert!(answer["reason"].as_str().unwrap().contains("munge status"));
    }) else {
        return;
    };
    assert_turned_away(&g, "rejected by MUNGE");
}

#[test]
fn a_replayed_credential_is_rejected() {
    let Some(g) = leader_facing(1103, |m, port| {
        let munge = Munge::with_socket(&m.socket);
        // A valid credential for another connection's challenge, decoded once already (as an
        // eavesdropper would capture it after the real participant used it).
        let mut captured = String::new();
        let answer = forge(port, 1103, |hello| {
            captured = munge.encode(&claim(hello, 1103, "n2", 1)).unwrap();
            munge.decode(&captured).unwrap();
            captured.clone()
        });
        assert_eq!(answer["type"], "reject");
        assert!(
            answer["reason"].as_str().unwrap().contains("replayed"),
            "{answer}"
        );
    }) else {
        return;
    };
    assert_turned_away(&g, "replayed");
}

#[test]
fn a_credential_for_another_connections_challenge_is_rejected() {
    let Some(g) = leader_facing(1104, |m, port| {
        let munge = Munge::with_socket(&m.socket);
        let answer = forge(port, 1104, |_| {
            let stale = json!({"challenge": "00112233445566778899aabbccddeeff"});
            munge.encode(&claim(&stale, 1104, "n2", 1)).unwrap()
        });
        assert_eq!(answer["type"], "reject");
    }) else {
        return;
    };
    assert_turned_away(&g, "challenge");
}

#[test]
fn a_credential_for_another_job_is_rejected() {
    let Some(g) = leader_facing(1105, |m, port| {
        let munge = Munge::with_socket(&m.socket);
        let answer = forge(port, 1105, |hello| {
            munge.encode(&claim(hello, 9999, "n2", 1)).unwrap()
        });
        assert_eq!(answer["type"], "reject");
    }) else {
        return;
    };
    assert_turned_away(&g, "job 9999");
}

#[test]
fn a_node_claiming_another_nodes_rank_is_rejected() {
    let Some(g) = leader_facing(1106, |m, port| {
        let munge = Munge::with_socket(&m.socket);
        let answer = forge(port, 1106, |hello| {
            munge.encode(&claim(hello, 1106, "intruder", 1)).unwrap()
        });
        assert_eq!(answer["type"], "reject");
    }) else {
        return;
    };
    assert_turned_away(&g, "not participant rank 1");
}

#[test]
fn a_leader_whose_uid_is_outside_the_allowed_set_is_not_joined() {
    let Some(m) = Munged::start() else { return };
    let mut cfg = config(&m, 2, 1107, base());
    cfg.allowed_uids = vec![4_000_000];
    let leader = spawn_rank(&cfg, 0);
    let follower = spawn_rank(&cfg, 1);
    let err = follower.join().unwrap().unwrap_err();
    assert!(
        matches!(err, RendezvousError::NoLeader { ref last, .. } if last.contains("not an allowed one")),
        "{err}"
    );
    let g = leader.join().unwrap().unwrap();
    assert_eq!(g.missing, vec!["n2".to_string()]);
}

#[test]
fn a_follower_skips_another_jobs_leader_on_its_port() {
    let Some(m) = Munged::start() else { return };
    let b = base();
    // Job 2042 and job 42 share the first port (the test's window gives every id the same
    // candidates; ids of one stride class share them in a real window). Job 2042's leader takes
    // it; job 42's leader moves to the next port, and job 42's follower must find it there.
    let other = config(&m, 2, 2042, b);
    let mine = config(&m, 2, 42, b);
    assert_eq!(other.ports()[0], mine.ports()[0]);
    let other_leader = spawn_rank(&other, 0);
    common::ports::wait_until_we_listen(other.ports()[0], "job 2042's leader", PATIENCE);
    let leader = spawn_rank(&mine, 0);
    let follower = spawn_rank(&mine, 1);
    let g = follower.join().unwrap().unwrap();
    assert_eq!(g.port, mine.ports()[1]);
    assert!(leader.join().unwrap().unwrap().missing.is_empty());
    assert_eq!(
        other_leader.join().unwrap().unwrap().missing,
        vec!["n2".to_string()]
    );
}

/// A listener on `port` that runs `serve` on each connection (a thread each).
struct Squat {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accepting: thread::JoinHandle<usize>,
}

impl Squat {
    /// Stops taking connections, waits for every one taken to be served, and says how many
    /// were.
    fn end(self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.accepting.join().unwrap()
    }
}

/// Listens on `port` (bound before it returns) until [`Squat::end`], at most [`PATIENCE`].
fn squat(port: u16, serve: impl Fn(TcpStream) + Send + Sync + 'static) -> Squat {
    let listener = std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let serve = std::sync::Arc::new(serve);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let accepting = thread::spawn(move || {
        let end = Instant::now() + PATIENCE;
        let mut served = Vec::new();
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    let serve = serve.clone();
                    served.push(thread::spawn(move || serve(s)));
                }
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
        let n = served.len();
        for h in served {
            h.join().unwrap();
        }
        n
    });
    Squat { stop, accepting }
}

#[test]
fn a_squatter_on_the_leaders_port_is_sent_only_the_job_id_and_followers_reach_the_real_leader() {
    let Some(m) = Munged::start() else { return };
    let cfg = config(&m, 3, 1201, base());
    let port = cfg.ports()[0];
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
    let seen = received.clone();
    // It says hello as a leader of this job would, but cannot sign it (a made-up credential),
    // and keeps every byte each connection sent it.
    let squatter = squat(port, move |mut s| {
        let hello = json!({"type":"hello","v":rendezvous::PROTOCOL_VERSION,"job_id":1201,
            "leader":"n1","challenge":"00112233445566778899aabbccddeeff",
            "credential":"MUNGE:forged:"});
        let _ = writeln!(s, "{hello}");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut s, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        seen.lock().unwrap().push(got);
    });
    let leader = spawn_rank(&cfg, 0);
    let followers: Vec<_> = (1..3).map(|r| spawn_rank(&cfg, r)).collect();
    for f in followers {
        let g = f.join().unwrap().unwrap();
        assert_eq!(
            g.port,
            cfg.ports()[1],
            "the real leader moved to the next port"
        );
    }
    assert!(leader.join().unwrap().unwrap().missing.is_empty());
    assert!(
        squatter.end() >= 2,
        "every follower tried the squatter first"
    );
    let received = received.lock().unwrap();
    assert!(!received.is_empty(), "the squatter was never reached");
    for got in received.iter() {
        let text = String::from_utf8_lossy(got);
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
            .collect();
        assert_eq!(
            lines,
            vec![json!({"type": "want", "v": rendezvous::PROTOCOL_VERSION, "job_id": 1201})],
            "a follower sent the squatter more than the job id it looks for: {text}"
        );
    }
}

#[test]
fn a_listener_that_drips_its_hello_holds_a_follower_only_for_its_connection_budget() {
    let Some(m) = Munged::start() else { return };
    let cfg = config(&m, 2, 1202, base());
    let dripper = squat(cfg.ports()[0], |mut s| {
        for b in br#"{"type":"hello","v":2,"job_id":1202,"leader":"n1","challenge":""#
            .iter()
            .cycle()
            .take(80)
        {
            if s.write_all(&[*b]).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
    });
    let t = Instant::now();
    let leader = spawn_rank(&cfg, 0);
    let g = spawn_rank(&cfg, 1).join().unwrap().unwrap();
    assert_eq!(g.port, cfg.ports()[1]);
    assert!(
        t.elapsed() < cfg.timeout,
        "the follower took {:?}",
        t.elapsed()
    );
    assert!(leader.join().unwrap().unwrap().missing.is_empty());
    dripper.end();
}

#[test]
fn a_follower_without_a_real_leader_gives_up_at_its_deadline_even_when_a_listener_drips() {
    let Some(m) = Munged::start() else { return };
    let mut cfg = config(&m, 2, 1203, base());
    cfg.window = rendezvous::Window::new(cfg.ports()[0], 1, 1).unwrap();
    let dripper = squat(cfg.ports()[0], |mut s| {
        for _ in 0..80 {
            if s.write_all(b" ").is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(40));
        }
    });
    let t = Instant::now();
    let err = gather(&cfg, 1, &json!(null)).unwrap_err();
    assert!(matches!(err, RendezvousError::NoLeader { .. }), "{err}");
    assert!(
        t.elapsed() < cfg.timeout + Duration::from_millis(300),
        "the follower took {:?}",
        t.elapsed()
    );
    dripper.end();
}

#[test]
fn a_peer_that_drips_its_join_is_cut_off_at_the_leaders_deadline() {
    let Some(m) = Munged::start() else { return };
    let cfg = config(&m, 2, 1204, base());
    let port = cfg.ports()[0];
    let leader = spawn_rank(&cfg, 0);
    let (mut w, _reader, hello) = ask(port, 1204);
    assert_eq!(hello["type"], "hello", "{hello}");
    let started = Instant::now();
    let cut_off = loop {
        if w.write_all(b"{").is_err() || started.elapsed() > Duration::from_secs(6) {
            break started.elapsed();
        }
        thread::sleep(Duration::from_millis(50));
    };
    let g = leader.join().unwrap().unwrap();
    assert_eq!(g.missing, vec!["n2".to_string()]);
    assert!(
        cut_off < cfg.timeout + Duration::from_millis(500),
        "the leader kept reading a dripping peer for {cut_off:?}"
    );
    // Cut off either by its connection's deadline or, when the rendezvous's own deadline comes
    // first (a loaded machine), as still waiting when the leader stopped.
    assert!(
        g.rejected
            .iter()
            .any(|r| r.contains("did not finish in time")
                || r.contains("no join before the deadline")),
        "{:?}",
        g.rejected
    );
}

#[test]
fn a_join_line_longer_than_the_limit_is_refused_without_being_read() {
    let Some(g) = leader_facing(1205, |_, port| {
        let (mut w, _reader, hello) = ask(port, 1205);
        assert_eq!(hello["type"], "hello", "{hello}");
        w.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let big = vec![b'x'; 1 << 20];
        let mut sent = 0usize;
        while sent < 32 << 20 && w.write_all(&big).is_ok() {
            sent += big.len();
        }
        assert!(sent < 32 << 20, "the leader took all of a 32 MiB line");
    }) else {
        return;
    };
    assert_turned_away(&g, "longer than");
}

#[test]
fn followers_of_other_jobs_retrying_on_the_port_do_not_lock_its_own_follower_out() {
    let Some(m) = Munged::start() else { return };
    let b = base();
    let cfg = config(&m, 2, 1301, b);
    // Four followers of a job whose leader never comes (as a neighbouring job's followers do
    // while their leader is not listening yet) retry over the same ports, from the same
    // address as our follower, for the whole rendezvous: far more tries than the 8 greetings
    // an address gets.
    let strangers: Vec<_> = (0..4)
        .map(|_| {
            let other = config(&m, 2, 7301, b);
            thread::spawn(move || gather(&other, 1, &json!(null)))
        })
        .collect();
    let leader = spawn_rank(&cfg, 0);
    thread::sleep(Duration::from_millis(500));
    let mine = spawn_rank(&cfg, 1).join().unwrap();
    let g = leader.join().unwrap().unwrap();
    let strangers: Vec<_> = strangers.into_iter().map(|s| s.join().unwrap()).collect();
    assert!(mine.is_ok(), "our follower was locked out: {mine:?}");
    assert!(g.missing.is_empty(), "{:?}", g.rejected);
    for s in strangers {
        let err = s.unwrap_err();
        assert!(
            matches!(err, RendezvousError::NoLeader { ref last, .. }
                if last.contains("serves the rendezvous of job 1301, not of job 7301")),
            "{err}"
        );
    }
    assert!(
        !g.rejected
            .iter()
            .any(|r| r.contains("too many connections")),
        "{:?}",
        g.rejected
    );
    assert!(
        g.rejected.iter().any(|r| r.ends_with(
            "connection(s) asking for other jobs' rendezvous (their \
                 leaders were not listening yet, or sat on the next ports)"
        )),
        "{:?}",
        g.rejected
    );
}

#[test]
fn a_connection_asking_for_another_job_is_turned_away_naming_both_jobs() {
    let Some(g) = leader_facing(1302, |_, port| {
        let (_w, _r, answer) = ask(port, 9302);
        assert_eq!(answer["type"], "reject", "{answer}");
        assert_eq!(
            answer["reason"],
            "this port serves the rendezvous of job 1302, not of job 9302"
        );
        // Another job's epilog meeting, by job and meeting rather than its 64-bit id.
        let (_w, _r, answer) = ask(port, meeting_id(9302, Meeting::Epilog));
        assert_eq!(
            answer["reason"],
            "this port serves the rendezvous of job 1302, not of job 9302's epilog"
        );
    }) else {
        return;
    };
    assert_eq!(g.missing, vec!["n2".to_string()]);
    assert!(
        g.rejected
            .iter()
            .any(|r| r.starts_with("2 connection(s) asking for other jobs' rendezvous")),
        "{:?}",
        g.rejected
    );
}

#[test]
fn a_follower_of_an_older_protocol_is_told_to_run_one_release_everywhere() {
    let Some(g) = leader_facing(1303, |_, port| {
        let mut s = connect_to_leader(port);
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        writeln!(s, "{}", json!({"type": "want", "v": 2, "job_id": 1303})).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["type"], "reject", "{answer}");
        assert!(
            answer["reason"]
                .as_str()
                .unwrap()
                .contains("protocol version 2, this leader 3: run one fabric-check release"),
            "{answer}"
        );
    }) else {
        return;
    };
    assert_turned_away(&g, "protocol version 2");
}
