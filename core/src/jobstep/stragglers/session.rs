//! The straggler figures' transport ([`SessionExchange`]): a rendezvous once a minute, sealed
//! datagrams between.
//!
//! A rendezvous a hop (what this replaced) cost the first node two MUNGE calls a follower every
//! five seconds, most of its cost, growing with the job's nodes. Now:
//!
//! - **Meetings** ([`MEET_EVERY_HOPS`], the job's MUNGE-authenticated rendezvous, an id of
//!   [`Meeting::Stragglers`], root's credentials only, [`Share::All`]): the first node brings a
//!   [`SessionOffer`] (a UDP port of the rendezvous window and a random key), which reaches every
//!   node inside its signed answer (a credential only root can decode). Every node brings its
//!   figure, so a meeting hop loses none.
//! - **Between meetings** each follower sends its figure in one datagram sealed with the key
//!   ([`fabric_net::sealed`]); the first node takes, for the hop, one datagram a rank whose tag
//!   matches, from that rank's address, naming this job and this hop. Everything else is counted
//!   by reason and said in one line.
//! - A follower without a key meets at every hop; so does the first node while a node was not
//!   heard at the last hop (a late node gets its key at the next hop, not the next minute). A
//!   first node that could bind no UDP port offers no session: then every hop is a meeting, as
//!   before.
//!
//! The meeting is a seam ([`MeetFn`]): the real one runs [`fabric_net::rendezvous::gather`], the
//! tests a board in memory; the datagrams are real (loopback in the tests).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use fabric_net::rendezvous::rejections::Rejections;
use fabric_net::rendezvous::typed::decode;
use fabric_net::rendezvous::{Gathered, RendezvousConfig, Share, gather};
use fabric_net::sealed::{MAX_DATAGRAM_BYTES, SessionKey, bind_first, sender};
use fabric_proto::straggler::{HopDatagram, HopMeet, MEET_EVERY_HOPS, SessionOffer, WindowSteps};
use serde_json::Value;

use super::exchange::Exchange;
use crate::jobstep::meet::{Meeting, meeting_id};

/// A hop's meeting: the hop and this node's [`HopMeet`] (as JSON) in, what the rendezvous
/// gathered out.
pub type MeetFn = Box<dyn FnMut(u64, &Value) -> Result<Gathered, String> + Send>;

/// The real meeting: the job's rendezvous with the id of [`Meeting::Stragglers`]`(hop)`, every
/// payload shared (the first node's offer reaches every node signed), bounded by `timeout`.
pub fn rendezvous_meeting(
    base: RendezvousConfig,
    job: u32,
    rank: usize,
    timeout: Duration,
) -> MeetFn {
    Box::new(move |hop, payload| {
        let mut cfg = base.clone();
        cfg.job_id = meeting_id(job, Meeting::Stragglers(hop));
        cfg.timeout = timeout;
        cfg.hard_deadline = Some(Instant::now() + timeout * 2);
        cfg.share = Share::All;
        // One admitting thread is plenty for a figure a node a meeting: the default pool of
        // eight, started at every meeting, cost the first node more than its MUNGE work
        // (scripts/bench-stragglers, when every hop was a meeting: 0.0147 % of a core with
        // eight, 0.0108 % with one).
        cfg.workers = 1;
        gather(&cfg, rank, payload).map_err(|e| e.to_string())
    })
}

/// The first node's side of the session.
struct Lead {
    /// The socket figures arrive on, and what the meetings offer (`None`: no port bound).
    session: Option<(UdpSocket, SessionKey, SessionOffer)>,
    /// The last hop each rank was heard at (a meeting or a datagram); 0: never.
    heard: Vec<u64>,
    /// The hop each rank got its key at (its first meeting); 0: not yet.
    keyed_at: Vec<u64>,
    /// Whether a datagram of each rank ever counted.
    sealed_seen: Vec<bool>,
    /// Whether a rank's missing datagrams were said.
    blocked_said: Vec<bool>,
}

/// The job as the first node checks a datagram against it.
struct Roster<'a> {
    job: u32,
    nodes: &'a [String],
    addrs: &'a [IpAddr],
}

impl Lead {
    /// Whether this hop is a meeting: no session, the minute's meeting, or a node not heard at
    /// the last hop (it may have no key).
    fn must_meet(&self, hop: u64) -> bool {
        self.session.is_none()
            || hop.is_multiple_of(MEET_EVERY_HOPS)
            || self.heard.iter().skip(1).any(|h| h + 1 < hop)
    }

    /// The figures a meeting brought (this hop's only); a node that met has the key.
    fn take_met(
        &mut self,
        nodes: &[String],
        hop: u64,
        g: Gathered,
        all: &mut BTreeMap<String, WindowSteps>,
    ) {
        for (node, m) in decode::<HopMeet>(nodes, g).payloads {
            let Some(r) = nodes.iter().position(|x| *x == node) else {
                continue;
            };
            if r != 0 && m.figure.hop == hop {
                self.heard[r] = hop;
                if self.keyed_at[r] == 0 {
                    self.keyed_at[r] = hop;
                }
                all.insert(node, m.figure);
            }
        }
    }

    /// This hop's sealed datagrams, until every node was heard or `deadline`; what was refused
    /// is said in one line a reason.
    fn take_sealed(
        &mut self,
        roster: &Roster<'_>,
        hop: u64,
        deadline: Instant,
        all: &mut BTreeMap<String, WindowSteps>,
        lines: &mut Vec<String>,
    ) {
        let Some((socket, key, _)) = &self.session else {
            return;
        };
        let n = roster.nodes.len();
        let mut refused = Rejections::default();
        let (heard, sealed_seen) = (&mut self.heard, &mut self.sealed_seen);
        receive(
            socket,
            key,
            deadline,
            roster.addrs,
            &mut refused,
            |src, d: HopDatagram| {
                if d.job != roster.job || d.rank == 0 || d.rank >= n {
                    return Err("names another job or a rank outside it");
                }
                if roster.addrs[d.rank] != src {
                    return Err("came from another node's address than its rank's");
                }
                // Late for its hop (or a clock far off), or a second one: not counted.
                if d.figure.hop != hop || heard[d.rank] == hop {
                    return Ok(false);
                }
                heard[d.rank] = hop;
                sealed_seen[d.rank] = true;
                all.insert(roster.nodes[d.rank].clone(), d.figure);
                Ok(all.len() == n)
            },
        );
        lines.extend(
            refused
                .into_lines()
                .into_iter()
                .map(|l| format!("straggler figures: hop {hop}: datagram refused: {l}")),
        );
    }

    /// Says, once a node, a node that has had the key for three hops and never sent a
    /// datagram that counted (UDP blocked between the nodes, most likely).
    fn say_blocked(&mut self, roster: &Roster<'_>, hop: u64, lines: &mut Vec<String>) {
        let Some((socket, _, _)) = &self.session else {
            return;
        };
        for r in 1..roster.nodes.len() {
            let keyed = self.keyed_at[r];
            if keyed > 0 && hop >= keyed + 3 && !self.sealed_seen[r] && !self.blocked_said[r] {
                self.blocked_said[r] = true;
                lines.push(format!(
                    "straggler figures: {} has had the job's key since hop {keyed} and no datagram of it came to UDP port {}: is UDP open between the nodes in the rendezvous window (docs/operations.md, Ports)?",
                    roster.nodes[r],
                    socket.local_addr().map_or(0, |a| a.port())
                ));
            }
        }
    }
}

/// A follower's side.
struct Follow {
    socket: Option<UdpSocket>,
    /// The key and the first node's address, from the last meeting.
    to: Option<(SessionKey, SocketAddr)>,
}

enum Side {
    Lead(Lead),
    Follow(Follow),
}

/// The figures' transport of one node ([`Exchange`]).
pub struct SessionExchange {
    job: u32,
    rank: usize,
    nodes: Vec<String>,
    addrs: Vec<IpAddr>,
    /// The longest a hop's exchange waits (under a hop).
    timeout: Duration,
    meet: MeetFn,
    side: Side,
    lines: Vec<String>,
}

impl std::fmt::Debug for SessionExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionExchange")
            .field("job", &self.job)
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

impl SessionExchange {
    /// This node's transport: `nodes` and `addrs` in rank order (the rendezvous's), the first
    /// node's UDP port the first of `ports` that binds.
    pub fn new(
        job: u32,
        rank: usize,
        nodes: Vec<String>,
        addrs: Vec<IpAddr>,
        ports: &[u16],
        timeout: Duration,
        meet: MeetFn,
    ) -> Self {
        let mut lines = Vec::new();
        let like = addrs
            .get(rank)
            .copied()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        let side = if rank == 0 {
            let session = match (bind_first(like, ports), SessionKey::random()) {
                (Ok((socket, port)), Ok(key)) => {
                    let offer = SessionOffer {
                        port,
                        key: key.to_hex(),
                    };
                    Some((socket, key, offer))
                }
                (Err(e), _) => {
                    lines.push(format!(
                        "straggler figures: no UDP port of {ports:?} binds ({e}); every hop is a rendezvous"
                    ));
                    None
                }
                (_, Err(e)) => {
                    lines.push(format!("straggler figures: {e}; every hop is a rendezvous"));
                    None
                }
            };
            Side::Lead(Lead {
                session,
                heard: vec![0; nodes.len()],
                keyed_at: vec![0; nodes.len()],
                sealed_seen: vec![false; nodes.len()],
                blocked_said: vec![false; nodes.len()],
            })
        } else {
            Side::Follow(Follow {
                socket: sender(like).ok(),
                to: None,
            })
        };
        Self {
            job,
            rank,
            nodes,
            addrs,
            timeout,
            meet,
            side,
            lines,
        }
    }

    /// The first node's offer (tests hand it to their fake meetings).
    pub fn offer(&self) -> Option<SessionOffer> {
        match &self.side {
            Side::Lead(l) => l.session.as_ref().map(|s| s.2.clone()),
            Side::Follow(_) => None,
        }
    }

    fn lead(
        &mut self,
        hop: u64,
        mine: &WindowSteps,
    ) -> Result<BTreeMap<String, WindowSteps>, String> {
        let deadline = Instant::now() + self.timeout;
        let Side::Lead(lead) = &mut self.side else {
            unreachable!("lead() runs on the first node only")
        };
        let mut all = BTreeMap::from([(self.nodes[0].clone(), mine.clone())]);
        lead.heard[0] = hop;
        let mut failed = None;
        if lead.must_meet(hop) {
            let payload = HopMeet {
                figure: mine.clone(),
                session: lead.session.as_ref().map(|s| s.2.clone()),
            };
            let value = serde_json::to_value(&payload).map_err(|e| e.to_string())?;
            match (self.meet)(hop, &value) {
                Ok(g) => lead.take_met(&self.nodes, hop, g, &mut all),
                Err(e) => failed = Some(e),
            }
        }
        let roster = Roster {
            job: self.job,
            nodes: &self.nodes,
            addrs: &self.addrs,
        };
        lead.take_sealed(&roster, hop, deadline, &mut all, &mut self.lines);
        lead.say_blocked(&roster, hop, &mut self.lines);
        match failed {
            Some(e) if all.len() == 1 => Err(e),
            _ => Ok(all),
        }
    }

    fn follow(&mut self, hop: u64, mine: &WindowSteps) -> Result<(), String> {
        let Side::Follow(f) = &mut self.side else {
            unreachable!("follow() runs on followers only")
        };
        if f.to.is_none() || hop.is_multiple_of(MEET_EVERY_HOPS) {
            let payload = HopMeet {
                figure: mine.clone(),
                session: None,
            };
            let value = serde_json::to_value(&payload).map_err(|e| e.to_string())?;
            match (self.meet)(hop, &value) {
                Ok(g) => {
                    let met = decode::<HopMeet>(&self.nodes, g);
                    let offer = met
                        .payloads
                        .get(&self.nodes[0])
                        .and_then(|m| m.session.clone());
                    // A first node with no session offers none: every hop a meeting.
                    f.to = offer.and_then(|o| {
                        let key = SessionKey::from_hex(&o.key).ok()?;
                        Some((key, SocketAddr::new(self.addrs[0], o.port)))
                    });
                    return Ok(());
                }
                // A node with a key sends its figure anyway.
                Err(e) if f.to.is_none() => return Err(e),
                Err(_) => {}
            }
        }
        let (Some((key, to)), Some(socket)) = (&f.to, &f.socket) else {
            return Err("no socket to send the figure from".into());
        };
        let body = serde_json::to_vec(&HopDatagram {
            job: self.job,
            rank: self.rank,
            figure: mine.clone(),
        })
        .map_err(|e| e.to_string())?;
        let d = key.seal(&body).map_err(|e| e.to_string())?;
        socket
            .send_to(&d, to)
            .map(|_| ())
            .map_err(|e| format!("the figure's datagram to {to} was not sent: {e}"))
    }
}

/// Takes datagrams off `socket` until `take` says every rank was heard, or `deadline` (what is
/// queued then is still read, without waiting), at most a bounded count a hop (a flood costs a
/// hop's figures, never more than the hop's time). A datagram from outside the job's addresses,
/// of the wrong size, with a tag that does not match or a body that does not parse is refused
/// before `take` sees it; `take` refuses with a reason, takes (`Ok(done)`), or ignores
/// (`Ok(false)`: late, a second one).
fn receive(
    socket: &UdpSocket,
    key: &SessionKey,
    deadline: Instant,
    addrs: &[IpAddr],
    refused: &mut Rejections,
    mut take: impl FnMut(IpAddr, HopDatagram) -> Result<bool, &'static str>,
) {
    let mut buf = [0u8; MAX_DATAGRAM_BYTES + 1];
    let cap = 16 * addrs.len() + 64;
    for _ in 0..cap {
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = left.max(Duration::from_millis(1));
        if socket.set_read_timeout(Some(wait)).is_err() {
            return;
        }
        let (len, src) = match socket.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if left.is_zero() {
                    return;
                }
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                refused.note(format!("the socket failed: {e}"));
                return;
            }
        };
        let ip = src.ip();
        if !addrs.contains(&ip) {
            refused.add(src, "not from one of the job's nodes");
            continue;
        }
        let body = match key.open(&buf[..len]) {
            Ok(b) => b,
            Err(e) => {
                refused.add(src, e.to_string());
                continue;
            }
        };
        let d = match serde_json::from_slice::<HopDatagram>(body) {
            Ok(d) => d,
            Err(_) => {
                refused.add(src, "a sealed body that is no figure");
                continue;
            }
        };
        match take(ip, d) {
            Ok(true) => return,
            Ok(false) => {}
            Err(reason) => refused.add(src, reason),
        }
    }
    refused.note(format!(
        "more than {cap} datagrams in one hop; the rest were left unread"
    ));
}

impl Exchange for SessionExchange {
    fn meet(
        &mut self,
        hop: u64,
        mine: &WindowSteps,
    ) -> Result<Option<BTreeMap<String, WindowSteps>>, String> {
        match self.side {
            Side::Lead(_) => self.lead(hop, mine).map(Some),
            Side::Follow(_) => self.follow(hop, mine).map(|()| None),
        }
    }

    fn lines(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
