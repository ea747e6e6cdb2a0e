//! The session on loopback: real sealed datagrams, the meetings a board in memory.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabric_net::rendezvous::Gathered;
use fabric_net::sealed::SessionKey;
use fabric_proto::straggler::{HopDatagram, HopMeet, SessionOffer, WindowSteps};
use serde_json::Value;

use super::*;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const N: usize = 4;
const JOB: u32 = 4242;

/// The meetings: what followers brought, the first node's offer, who is cut off.
#[derive(Default)]
struct Board {
    offer: Option<SessionOffer>,
    posted: Vec<(usize, u64, Value)>,
    /// Meetings held, by rank.
    meetings: BTreeMap<usize, u32>,
    down: Vec<usize>,
}

fn nodes() -> Vec<String> {
    (1..=N).map(|i| format!("n{i}")).collect()
}

fn fake(board: Arc<Mutex<Board>>, rank: usize) -> MeetFn {
    Box::new(move |hop, payload| {
        let mut b = board.lock().unwrap();
        *b.meetings.entry(rank).or_default() += 1;
        if b.down.contains(&rank) {
            return Err("no first node answered".into());
        }
        let mut payloads = vec![None; N];
        if rank == 0 {
            payloads[0] = Some(payload.clone());
            for (r, h, p) in std::mem::take(&mut b.posted) {
                if h == hop {
                    payloads[r] = Some(p);
                }
            }
        } else {
            b.posted.push((rank, hop, payload.clone()));
            let lead = HopMeet {
                figure: figure(hop, 1000),
                session: b.offer.clone(),
            };
            payloads[0] = Some(serde_json::to_value(lead).unwrap());
            payloads[rank] = Some(payload.clone());
        }
        Ok(Gathered {
            my_rank: rank,
            port: 0,
            payloads,
            missing: vec![],
            rejected: vec![],
        })
    })
}

fn figure(hop: u64, ms: u64) -> WindowSteps {
    WindowSteps {
        hop,
        steps: 10,
        median_ms: Some(ms),
        checkpoint: false,
        fault: None,
    }
}

struct Job {
    board: Arc<Mutex<Board>>,
    lead: SessionExchange,
    follow: Vec<SessionExchange>,
}

fn job(ports: &[u16]) -> Job {
    let board = Arc::new(Mutex::new(Board::default()));
    let timeout = Duration::from_millis(400);
    let make = |rank: usize| {
        SessionExchange::new(
            JOB,
            rank,
            nodes(),
            vec![LO; N],
            ports,
            timeout,
            fake(board.clone(), rank),
        )
    };
    let lead = make(0);
    board.lock().unwrap().offer = lead.offer();
    let follow = (1..N).map(make).collect();
    Job {
        board,
        lead,
        follow,
    }
}

impl Job {
    /// One hop: the followers (rank r's step time 1000 + r ms), then the first node; what the
    /// first node got, by node, as step times.
    fn hop(&mut self, hop: u64) -> BTreeMap<String, u64> {
        for (i, f) in self.follow.iter_mut().enumerate() {
            let _ = f.meet(hop, &figure(hop, 1001 + i as u64));
        }
        let got = self
            .lead
            .meet(hop, &figure(hop, 1000))
            .expect("the first node's hop")
            .expect("the first node gets the figures");
        got.into_iter()
            .map(|(n, f)| (n, f.median_ms.unwrap()))
            .collect()
    }

    fn meetings(&self) -> u32 {
        self.board.lock().unwrap().meetings.values().sum()
    }
}

fn everyone() -> BTreeMap<String, u64> {
    (0..N as u64)
        .map(|r| (format!("n{}", r + 1), 1000 + r))
        .collect()
}

#[test]
fn between_two_meetings_every_figure_arrives_sealed_and_nobody_meets() {
    let mut j = job(&[0]);
    // Hop 12 is a meeting hop (every node brings its figure and gets the key).
    assert_eq!(j.hop(12), everyone());
    assert_eq!(j.meetings(), N as u32);
    for hop in 13..24 {
        assert_eq!(j.hop(hop), everyone(), "hop {hop}");
    }
    assert_eq!(
        j.meetings(),
        N as u32,
        "no meeting between two meeting hops"
    );
    assert_eq!(j.hop(24), everyone());
    assert_eq!(j.meetings(), 2 * N as u32, "the next minute's meeting");
    assert!(j.lead.lines().is_empty());
}

#[test]
fn a_node_that_missed_the_first_meeting_gets_the_key_at_the_next_hop() {
    let mut j = job(&[0]);
    j.board.lock().unwrap().down.push(3);
    let mut want = everyone();
    want.remove("n4");
    assert_eq!(j.hop(13), want);
    j.board.lock().unwrap().down.clear();
    // n4 has no key and meets; the first node meets too, since n4 was not heard at hop 13.
    let before = j.meetings();
    assert_eq!(j.hop(14), everyone());
    assert_eq!(
        j.meetings() - before,
        2,
        "n4's meeting and the first node's"
    );
    let before = j.meetings();
    assert_eq!(j.hop(15), everyone());
    assert_eq!(j.meetings(), before, "everyone keyed: datagrams only");
}

#[test]
fn a_keyed_node_whose_meeting_fails_still_sends_its_figure() {
    let mut j = job(&[0]);
    j.hop(13);
    j.board.lock().unwrap().down.push(2);
    assert_eq!(j.hop(24), everyone());
}

#[test]
fn forged_misaddressed_and_late_datagrams_are_not_counted_and_forgeries_are_said() {
    let mut j = job(&[0]);
    j.hop(13);
    let offer = j.lead.offer().unwrap();
    let to = SocketAddr::new(LO, offer.port);
    let s = UdpSocket::bind((LO, 0)).unwrap();
    let body = |job: u32, rank: usize, hop: u64, ms: u64| {
        serde_json::to_vec(&HopDatagram {
            job,
            rank,
            figure: figure(hop, ms),
        })
        .unwrap()
    };
    let key = SessionKey::from_hex(&offer.key).unwrap();
    let other = SessionKey::random().unwrap();
    // Another key, another job, a rank outside the job, a late hop, bytes without a tag.
    s.send_to(&other.seal(&body(JOB, 2, 14, 9999)).unwrap(), to)
        .unwrap();
    s.send_to(&key.seal(&body(JOB + 1, 2, 14, 9999)).unwrap(), to)
        .unwrap();
    s.send_to(&key.seal(&body(JOB, 9, 14, 9999)).unwrap(), to)
        .unwrap();
    s.send_to(&key.seal(&body(JOB, 2, 13, 9999)).unwrap(), to)
        .unwrap();
    s.send_to(b"{\"job\":4242}", to).unwrap();
    assert_eq!(j.hop(14), everyone(), "none of them counted");
    let lines = j.lead.lines().join("\n");
    assert!(lines.contains("tag does not match"), "{lines}");
    assert!(
        lines.contains("names another job or a rank outside it (2 connections"),
        "{lines}"
    );
    assert!(lines.contains("is no sealed message"), "{lines}");
    assert!(!lines.contains("9999"), "{lines}");
}

#[test]
fn a_node_whose_datagrams_never_come_is_said_once_with_the_port_to_open() {
    let mut j = job(&[0]);
    j.hop(12);
    // n3's datagrams are lost (UDP blocked): it stops sending, though it has its key.
    let blocked = j.follow.remove(1);
    let mut want = everyone();
    want.remove("n3");
    for hop in 13..17 {
        for (i, f) in j.follow.iter_mut().enumerate() {
            let ms = if i == 0 { 1001 } else { 1003 };
            let _ = f.meet(hop, &figure(hop, ms));
        }
        let got = j.lead.meet(hop, &figure(hop, 1000)).unwrap().unwrap();
        assert_eq!(got.len(), 3, "hop {hop}: {got:?}");
    }
    let lines = j.lead.lines().join("\n");
    assert_eq!(
        lines
            .matches("n3 has had the job's key since hop 12")
            .count(),
        1,
        "{lines}"
    );
    assert!(lines.contains("is UDP open between the nodes"), "{lines}");
    drop(blocked);
}

#[test]
fn a_first_node_that_binds_no_port_offers_no_session_and_every_hop_is_a_meeting() {
    let mut j = job(&[]);
    assert!(j.lead.offer().is_none());
    assert!(
        j.lead
            .lines()
            .join("\n")
            .contains("every hop is a rendezvous"),
        "said once"
    );
    for hop in 13..16 {
        assert_eq!(j.hop(hop), everyone());
    }
    assert_eq!(j.meetings(), 3 * N as u32);
}
