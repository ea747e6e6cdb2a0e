//! A MUNGE-authenticated rendezvous: every participant of a job meets rank 0 (the leader).
//!
//! Used by `fabric-check collective` (each rank learns its peers' data addresses and the leader's
//! session values, e.g. NCCL's unique id) and by the job prolog (one writer gathers every node's
//! probe verdict). Slurm starts prologs and tasks on different nodes without synchronising them
//! (SPANK: "prologs on different nodes are not synchronised"), so the rendezvous is ours.
//!
//! # Protocol (newline-delimited JSON over one TCP connection per follower)
//!
//! 1. The leader listens on `base_port + job_id % 1000`, or the next of `port_span` ports when one
//!    is taken (`EADDRINUSE`). Followers try the same ports in order.
//! 2. Leader → follower: `{"type":"hello","v":1,"job_id":J,"leader":NODE,"challenge":HEX}` with a
//!    fresh random challenge per connection. A follower that reads another job id closes the
//!    connection and tries the next port, so it never joins the wrong job.
//! 3. Follower → leader: `{"type":"join","credential":C}`, C a MUNGE credential whose payload is
//!    `{"purpose":"fabric-check/rendezvous/join/v1","job_id","node","rank","nonce","challenge",
//!    "payload"}`. The leader decodes it with `unmunge` and accepts it only if munged says it is
//!    valid (right key, not expired, not replayed on this host), its UID is in the allowed set,
//!    the job id, the challenge of *this* connection, and the node name for that rank all match,
//!    and the rank has not joined yet. Anything else gets `{"type":"reject","reason":..}`; a
//!    rejected stranger does not count as the participant it claimed to be.
//! 4. When every rank has joined, or at the deadline, the leader answers each joined follower with
//!    `{"type":"done","credential":C}`, C binding the follower's nonce, the job id, the names of
//!    missing participants and (with [`Share::All`]) every participant's payload. Followers check
//!    the leader's credential the same way.
//!
//! # Waits and threads
//!
//! Every wait is bounded: the leader stops accepting at `timeout` after it started; a follower
//! stops trying to connect at `timeout`, and waits for the leader's answer at most
//! `timeout + grace` after it joined. The leader runs one `std::thread` per accepted connection
//! (reads there are bounded by the same deadline) and collects them over an `mpsc` channel; it runs
//! in the `fabric-check` child process, never in the SPANK plugin. Followers use no threads
//! except the short-lived reader inside [`munge::Munge`].

pub mod munge;
pub mod typed;

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use munge::{Munge, MungeError};

/// The default first port: `base_port + job_id % 1000`.
pub const DEFAULT_BASE_PORT: u16 = fabric_proto::invocation::ports::RENDEZVOUS_BASE;
/// How many successive ports leader and followers try.
pub const DEFAULT_PORT_SPAN: u16 = 4;
/// The most bytes one protocol line may have (a gathered payload included).
pub const MAX_LINE_BYTES: u64 = 16 << 20;

const JOIN_PURPOSE: &str = "fabric-check/rendezvous/join/v1";
const DONE_PURPOSE: &str = "fabric-check/rendezvous/done/v1";

/// Why a rendezvous failed.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    /// The configuration cannot work.
    #[error("invalid rendezvous configuration: {0}")]
    Config(String),
    /// A node name could not be turned into an address.
    #[error("cannot resolve node {node}: {reason}; pass its address explicitly (--addr {node}=IP)")]
    Resolve {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
    /// The leader could bind none of its ports.
    #[error("leader cannot listen on any of ports {ports:?}: {reason}")]
    Bind {
        /// The ports tried.
        ports: Vec<u16>,
        /// The last error.
        reason: String,
    },
    /// A follower found no leader for this job before the deadline.
    #[error(
        "no leader for job {job_id} answered at {addr} on ports {ports:?} within {timeout_ms} ms (is {leader} up?)"
    )]
    NoLeader {
        /// The job id.
        job_id: u64,
        /// The leader's node name.
        leader: String,
        /// Where it was looked for.
        addr: IpAddr,
        /// The ports tried.
        ports: Vec<u16>,
        /// The limit.
        timeout_ms: u128,
    },
    /// The leader refused this follower.
    #[error("leader rejected this participant: {0}")]
    Rejected(String),
    /// The leader's answer failed authentication or made no sense.
    #[error("leader's answer is not trustworthy: {0}")]
    BadLeader(String),
    /// A wait ran out.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A socket failed.
    #[error("network error: {0}")]
    Io(String),
    /// MUNGE failed on our side (encode).
    #[error(transparent)]
    Munge(#[from] MungeError),
}

/// Turns a node name into an address (pluggable: a map, the system resolver, or both).
pub trait Resolve {
    /// The address of `node`, or why there is none.
    fn resolve(&self, node: &str) -> Result<IpAddr, String>;
}

/// The system resolver (`getaddrinfo`: `/etc/hosts`, DNS), IPv4 first.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, node: &str) -> Result<IpAddr, String> {
        let addrs: Vec<SocketAddr> = (node, 0)
            .to_socket_addrs()
            .map_err(|e| e.to_string())?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or_else(|| addrs.first())
            .map(SocketAddr::ip)
            .ok_or_else(|| "no address".to_string())
    }
}

/// Explicit addresses first (`--addr NODE=IP`), then a fallback resolver, if any.
#[derive(Debug, Default)]
pub struct MapResolver<R = SystemResolver> {
    /// Explicit addresses.
    pub map: BTreeMap<String, IpAddr>,
    /// What to ask for names not in the map; `None` makes them an error.
    pub fallback: Option<R>,
}

impl<R: Resolve> Resolve for MapResolver<R> {
    fn resolve(&self, node: &str) -> Result<IpAddr, String> {
        if let Some(ip) = self.map.get(node) {
            return Ok(*ip);
        }
        match &self.fallback {
            Some(r) => r.resolve(node),
            None => Err("not in the address map".into()),
        }
    }
}

/// What the leader sends back to followers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Share {
    /// Only the leader gets the payloads; followers get an ack (the prolog's verdict gathering).
    #[default]
    Ack,
    /// Every participant gets every payload (an all-gather: the collective's peer addresses).
    All,
}

/// Everything a rendezvous needs; identical on every participant.
#[derive(Debug, Clone)]
pub struct RendezvousConfig {
    /// Participants in rank order; rank 0 leads.
    pub nodes: Vec<String>,
    /// The address of each participant, in rank order.
    pub addrs: Vec<IpAddr>,
    /// The Slurm job id (binds credentials and chooses the port).
    pub job_id: u64,
    /// The first port is `base_port + job_id % 1000`.
    pub base_port: u16,
    /// How many successive ports to try.
    pub port_span: u16,
    /// The bound of every wait (see the module docs).
    pub timeout: Duration,
    /// How to reach MUNGE.
    pub munge: Munge,
    /// UIDs whose credentials are accepted (root/SlurmUser for the prolog, the job's uid for a
    /// collective).
    pub allowed_uids: Vec<u32>,
    /// What followers receive.
    pub share: Share,
    /// No wait runs past this instant (the job step's deadline), whatever `timeout` and the
    /// follower's grace say.
    pub hard_deadline: Option<Instant>,
}

impl RendezvousConfig {
    /// Builds a configuration, resolving every node with `resolver`.
    pub fn new(
        nodes: Vec<String>,
        resolver: &dyn Resolve,
        job_id: u64,
        munge: Munge,
        allowed_uids: Vec<u32>,
    ) -> Result<Self, RendezvousError> {
        if nodes.is_empty() {
            return Err(RendezvousError::Config(
                "the participant list is empty".into(),
            ));
        }
        let mut seen = HashSet::new();
        for n in &nodes {
            if !seen.insert(n.as_str()) {
                return Err(RendezvousError::Config(format!(
                    "node {n} appears twice in the participant list"
                )));
            }
        }
        if allowed_uids.is_empty() {
            return Err(RendezvousError::Config(
                "no allowed UID: pass the UIDs whose credentials to accept".into(),
            ));
        }
        let addrs = nodes
            .iter()
            .map(|n| {
                resolver
                    .resolve(n)
                    .map_err(|reason| RendezvousError::Resolve {
                        node: n.clone(),
                        reason,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            nodes,
            addrs,
            job_id,
            base_port: DEFAULT_BASE_PORT,
            port_span: DEFAULT_PORT_SPAN,
            timeout: Duration::from_secs(10),
            munge,
            allowed_uids,
            share: Share::Ack,
            hard_deadline: None,
        })
    }

    /// The ports leader and followers try, in order.
    pub fn ports(&self) -> Vec<u16> {
        let first = u32::from(self.base_port) + (self.job_id % 1000) as u32;
        (0..u32::from(self.port_span.max(1)))
            .map(|i| first + i)
            .filter(|p| *p <= u32::from(u16::MAX))
            .map(|p| p as u16)
            .collect()
    }

    /// The rank of `node`, if it participates.
    pub fn rank_of(&self, node: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n == node)
    }

    fn grace(&self) -> Duration {
        (self.timeout / 2).max(Duration::from_secs(1))
    }

    /// `start + d`, never past [`RendezvousConfig::hard_deadline`].
    fn bounded(&self, start: Instant, d: Duration) -> Instant {
        let t = start + d;
        self.hard_deadline.map_or(t, |h| t.min(h))
    }
}

/// What a participant gets out of a rendezvous.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gathered {
    /// This participant's rank.
    pub my_rank: usize,
    /// The port the rendezvous ran on.
    pub port: u16,
    /// Payloads in rank order; `None` for missing ranks. Followers with [`Share::Ack`] see only
    /// their own.
    pub payloads: Vec<Option<Value>>,
    /// Participants that never joined (node names, rank order).
    pub missing: Vec<String>,
    /// Connections the leader refused, each `peer address: reason` (leader only).
    pub rejected: Vec<String>,
}

impl Gathered {
    /// The ranks that took part, in order.
    pub fn present(&self) -> Vec<usize> {
        (0..self.payloads.len())
            .filter(|r| self.payloads[*r].is_some())
            .collect()
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Msg {
    Hello {
        v: u32,
        job_id: u64,
        leader: String,
        challenge: String,
    },
    Join {
        credential: String,
    },
    Reject {
        reason: String,
    },
    Done {
        credential: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct JoinClaim {
    purpose: String,
    job_id: u64,
    node: String,
    rank: usize,
    nonce: String,
    challenge: String,
    payload: Value,
}

#[derive(Debug, Serialize, Deserialize)]
struct DoneClaim {
    purpose: String,
    job_id: u64,
    nonce: String,
    missing: Vec<String>,
    payloads: Option<Vec<Option<Value>>>,
}

/// A fresh random 128-bit value, hex-encoded.
pub fn random_hex() -> Result<String, RendezvousError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| RendezvousError::Io(format!("no randomness from the OS: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Meets the other participants: the leader (rank 0) collects every payload, followers join.
pub fn gather(
    cfg: &RendezvousConfig,
    my_rank: usize,
    payload: &Value,
) -> Result<Gathered, RendezvousError> {
    if cfg.addrs.len() != cfg.nodes.len() {
        return Err(RendezvousError::Config(format!(
            "{} nodes but {} addresses",
            cfg.nodes.len(),
            cfg.addrs.len()
        )));
    }
    if my_rank >= cfg.nodes.len() {
        return Err(RendezvousError::Config(format!(
            "rank {my_rank} is outside the {} participants",
            cfg.nodes.len()
        )));
    }
    if my_rank == 0 {
        lead(cfg, payload)
    } else {
        follow(cfg, my_rank, payload)
    }
}

fn write_msg(stream: &mut TcpStream, msg: &Msg) -> Result<(), RendezvousError> {
    let mut line = serde_json::to_vec(msg).map_err(|e| RendezvousError::Io(e.to_string()))?;
    line.push(b'\n');
    stream
        .write_all(&line)
        .map_err(|e| RendezvousError::Io(format!("send: {e}")))
}

fn read_msg(
    reader: &mut BufReader<TcpStream>,
    deadline: Instant,
    what: &str,
) -> Result<Msg, RendezvousError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(RendezvousError::Timeout(format!("waiting for {what}")));
    }
    reader
        .get_ref()
        .set_read_timeout(Some(left))
        .map_err(|e| RendezvousError::Io(e.to_string()))?;
    let mut line = Vec::new();
    let n = reader
        .by_ref()
        .take(MAX_LINE_BYTES)
        .read_until(b'\n', &mut line)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                RendezvousError::Timeout(format!("waiting for {what}"))
            }
            _ => RendezvousError::Io(format!("reading {what}: {e}")),
        })?;
    if n == 0 {
        return Err(RendezvousError::Io(format!(
            "connection closed while waiting for {what}"
        )));
    }
    serde_json::from_slice(&line).map_err(|e| RendezvousError::Io(format!("malformed {what}: {e}")))
}

struct Joined {
    rank: usize,
    nonce: String,
    payload: Value,
    stream: TcpStream,
}

fn lead(cfg: &RendezvousConfig, payload: &Value) -> Result<Gathered, RendezvousError> {
    let start = Instant::now();
    let deadline = cfg.bounded(start, cfg.timeout);
    let unspecified = match cfg.addrs[0] {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let ports = cfg.ports();
    let mut bound = None;
    let mut last_err = String::from("no port to try");
    for p in &ports {
        match TcpListener::bind((unspecified, *p)) {
            Ok(l) => {
                bound = Some((l, *p));
                break;
            }
            Err(e) => last_err = e.to_string(),
        }
    }
    let (listener, port) = bound.ok_or_else(|| RendezvousError::Bind {
        ports: ports.clone(),
        reason: last_err,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| RendezvousError::Io(e.to_string()))?;

    let n = cfg.nodes.len();
    let mut payloads: Vec<Option<Value>> = vec![None; n];
    payloads[0] = Some(payload.clone());
    let mut joined: Vec<Joined> = Vec::new();
    let mut rejected = Vec::new();
    let (tx, rx) = mpsc::channel::<(String, Result<Joined, String>)>();
    let mut nonces = HashSet::new();

    while payloads.iter().any(Option::is_none) && Instant::now() < deadline {
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    let tx = tx.clone();
                    let cfg = cfg.clone();
                    std::thread::spawn(move || {
                        let r = admit(&cfg, stream, deadline);
                        let _ = tx.send((peer.to_string(), r));
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    rejected.push(format!("accept: {e}"));
                    break;
                }
            }
        }
        while let Ok((peer, r)) = rx.recv_timeout(Duration::from_millis(2)) {
            match r {
                Ok(j) if payloads[j.rank].is_some() => {
                    rejected.push(format!("{peer}: rank {} has already joined", j.rank));
                    reject(j.stream, "this rank has already joined");
                }
                Ok(j) if !nonces.insert(j.nonce.clone()) => {
                    rejected.push(format!("{peer}: reused nonce"));
                    reject(j.stream, "reused nonce");
                }
                Ok(j) => {
                    payloads[j.rank] = Some(j.payload.clone());
                    joined.push(j);
                }
                Err(reason) => rejected.push(format!("{peer}: {reason}")),
            }
        }
    }
    drop(listener);
    let missing: Vec<String> = (0..n)
        .filter(|r| payloads[*r].is_none())
        .map(|r| cfg.nodes[r].clone())
        .collect();
    let shared = match cfg.share {
        Share::All => Some(payloads.clone()),
        Share::Ack => None,
    };
    for mut j in joined {
        let claim = DoneClaim {
            purpose: DONE_PURPOSE.into(),
            job_id: cfg.job_id,
            nonce: j.nonce.clone(),
            missing: missing.clone(),
            payloads: shared.clone(),
        };
        let bytes = serde_json::to_vec(&claim).map_err(|e| RendezvousError::Io(e.to_string()))?;
        let credential = cfg.munge.encode(&bytes)?;
        // A follower that vanished meanwhile is its own problem; the others still get answers.
        let _ = write_msg(&mut j.stream, &Msg::Done { credential });
    }
    Ok(Gathered {
        my_rank: 0,
        port,
        payloads,
        missing,
        rejected,
    })
}

fn reject(mut stream: TcpStream, reason: &str) {
    let _ = write_msg(
        &mut stream,
        &Msg::Reject {
            reason: reason.into(),
        },
    );
}

/// Runs on the leader, one thread per connection: greet, read the join, check the credential.
fn admit(cfg: &RendezvousConfig, stream: TcpStream, deadline: Instant) -> Result<Joined, String> {
    let _ = stream.set_nonblocking(false);
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let challenge = random_hex().map_err(|e| e.to_string())?;
    write_msg(
        &mut writer,
        &Msg::Hello {
            v: 1,
            job_id: cfg.job_id,
            leader: cfg.nodes[0].clone(),
            challenge: challenge.clone(),
        },
    )
    .map_err(|e| e.to_string())?;
    let credential = match read_msg(&mut reader, deadline, "a join") {
        Ok(Msg::Join { credential }) => credential,
        Ok(_) => {
            reject(writer, "expected a join message");
            return Err("sent something other than a join".into());
        }
        Err(e) => return Err(e.to_string()),
    };
    let refuse = |writer: TcpStream, reason: String| {
        reject(writer, &reason);
        Err(reason)
    };
    let decoded = match cfg.munge.decode(&credential) {
        Ok(d) => d,
        Err(e) => return refuse(writer, e.to_string()),
    };
    if !cfg.allowed_uids.contains(&decoded.uid) {
        return refuse(
            writer,
            format!("credential of uid {} is not allowed", decoded.uid),
        );
    }
    let claim: JoinClaim = match serde_json::from_slice(&decoded.payload) {
        Ok(c) => c,
        Err(e) => return refuse(writer, format!("credential payload is not a join: {e}")),
    };
    if claim.purpose != JOIN_PURPOSE {
        return refuse(writer, format!("credential is for {:?}", claim.purpose));
    }
    if claim.job_id != cfg.job_id {
        return refuse(
            writer,
            format!("credential is for job {}, not {}", claim.job_id, cfg.job_id),
        );
    }
    if claim.challenge != challenge {
        return refuse(
            writer,
            "credential does not answer this connection's challenge (replayed?)".into(),
        );
    }
    if claim.rank == 0 || claim.rank >= cfg.nodes.len() || cfg.nodes[claim.rank] != claim.node {
        return refuse(
            writer,
            format!("node {} is not participant rank {}", claim.node, claim.rank),
        );
    }
    Ok(Joined {
        rank: claim.rank,
        nonce: claim.nonce,
        payload: claim.payload,
        stream: writer,
    })
}

fn follow(
    cfg: &RendezvousConfig,
    my_rank: usize,
    payload: &Value,
) -> Result<Gathered, RendezvousError> {
    let start = Instant::now();
    let deadline = cfg.bounded(start, cfg.timeout);
    let leader = cfg.addrs[0];
    let ports = cfg.ports();
    let nonce = random_hex()?;
    loop {
        for port in &ports {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let Ok(stream) = TcpStream::connect_timeout(
                &SocketAddr::new(leader, *port),
                left.min(Duration::from_millis(500)),
            ) else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let mut writer = stream
                .try_clone()
                .map_err(|e| RendezvousError::Io(e.to_string()))?;
            let mut reader = BufReader::new(stream);
            let challenge = match read_msg(&mut reader, deadline, "the leader's hello") {
                Ok(Msg::Hello {
                    v: 1,
                    job_id,
                    challenge,
                    ..
                }) if job_id == cfg.job_id => challenge,
                // Another job's leader (or something else) on this port: try the next one.
                _ => continue,
            };
            let claim = JoinClaim {
                purpose: JOIN_PURPOSE.into(),
                job_id: cfg.job_id,
                node: cfg.nodes[my_rank].clone(),
                rank: my_rank,
                nonce: nonce.clone(),
                challenge,
                payload: payload.clone(),
            };
            let bytes =
                serde_json::to_vec(&claim).map_err(|e| RendezvousError::Io(e.to_string()))?;
            let credential = cfg.munge.encode(&bytes)?;
            write_msg(&mut writer, &Msg::Join { credential })?;
            let answer_by = cfg.bounded(Instant::now(), cfg.timeout + cfg.grace());
            return match read_msg(&mut reader, answer_by, "the leader's answer")? {
                Msg::Reject { reason } => Err(RendezvousError::Rejected(reason)),
                Msg::Done { credential } => {
                    accept_done(cfg, my_rank, *port, &nonce, payload, &credential)
                }
                _ => Err(RendezvousError::BadLeader(
                    "answered with an unexpected message".into(),
                )),
            };
        }
        if Instant::now() >= deadline {
            return Err(RendezvousError::NoLeader {
                job_id: cfg.job_id,
                leader: cfg.nodes[0].clone(),
                addr: leader,
                ports,
                timeout_ms: cfg.timeout.as_millis(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn accept_done(
    cfg: &RendezvousConfig,
    my_rank: usize,
    port: u16,
    nonce: &str,
    payload: &Value,
    credential: &str,
) -> Result<Gathered, RendezvousError> {
    let decoded = cfg
        .munge
        .decode(credential)
        .map_err(|e| RendezvousError::BadLeader(e.to_string()))?;
    if !cfg.allowed_uids.contains(&decoded.uid) {
        return Err(RendezvousError::BadLeader(format!(
            "credential of uid {} is not allowed",
            decoded.uid
        )));
    }
    let claim: DoneClaim = serde_json::from_slice(&decoded.payload)
        .map_err(|e| RendezvousError::BadLeader(format!("payload: {e}")))?;
    if claim.purpose != DONE_PURPOSE || claim.job_id != cfg.job_id || claim.nonce != nonce {
        return Err(RendezvousError::BadLeader(
            "credential is not an answer to this join".into(),
        ));
    }
    let n = cfg.nodes.len();
    let payloads = match claim.payloads {
        Some(p) if p.len() == n => p,
        Some(p) => {
            return Err(RendezvousError::BadLeader(format!(
                "{} payloads for {n} participants",
                p.len()
            )));
        }
        None => {
            let mut p = vec![None; n];
            p[my_rank] = Some(payload.clone());
            p
        }
    };
    Ok(Gathered {
        my_rank,
        port,
        payloads,
        missing: claim.missing,
        rejected: Vec::new(),
    })
}

/// Everything about a would-be participant, for tests and tools that speak the protocol by hand:
/// the join claim a follower would munge for `challenge`.
pub fn join_claim_json(
    job_id: u64,
    node: &str,
    rank: usize,
    nonce: &str,
    challenge: &str,
    payload: &Value,
) -> Value {
    json!({
        "purpose": JOIN_PURPOSE, "job_id": job_id, "node": node, "rank": rank,
        "nonce": nonce, "challenge": challenge, "payload": payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(job_id: u64) -> RendezvousConfig {
        let map = MapResolver::<SystemResolver> {
            map: [("a".to_string(), IpAddr::from([127, 0, 0, 1]))].into(),
            fallback: None,
        };
        RendezvousConfig::new(vec!["a".into()], &map, job_id, Munge::default(), vec![0]).unwrap()
    }

    #[test]
    fn ports_start_at_base_plus_job_id_modulo_1000() {
        assert_eq!(cfg(12_345).ports(), vec![47_345, 47_346, 47_347, 47_348]);
    }

    #[test]
    fn an_unresolvable_node_names_itself_and_the_flag_to_use() {
        let map = MapResolver::<SystemResolver>::default();
        let err = RendezvousConfig::new(vec!["x1".into()], &map, 1, Munge::default(), vec![0])
            .unwrap_err();
        assert!(err.to_string().contains("--addr x1=IP"), "{err}");
    }

    #[test]
    fn a_duplicate_node_is_a_config_error() {
        let map = MapResolver::<SystemResolver>::default();
        let err = RendezvousConfig::new(
            vec!["a".into(), "a".into()],
            &map,
            1,
            Munge::default(),
            vec![0],
        )
        .unwrap_err();
        assert!(err.to_string().contains("appears twice"), "{err}");
    }

    #[test]
    fn a_lone_leader_gathers_only_itself_without_waiting() {
        let c = cfg(999_001);
        let t = Instant::now();
        let g = gather(&c, 0, &json!({"x": 1})).unwrap();
        assert_eq!(g.payloads, vec![Some(json!({"x": 1}))]);
        assert!(g.missing.is_empty());
        assert!(t.elapsed() < c.timeout);
    }

    #[test]
    fn the_system_resolver_knows_localhost() {
        assert!(SystemResolver.resolve("localhost").unwrap().is_loopback());
    }
}

/// Entry points for the fuzz targets (`fuzz/fuzz_targets/rendezvous.rs`): the decoders a peer's
/// bytes reach, with nothing else exposed.
#[doc(hidden)]
pub mod fuzzing {
    /// Decodes `bytes` as every kind of message and claim the rendezvous reads from a peer.
    pub fn decode_peer_bytes(bytes: &[u8]) {
        let _ = serde_json::from_slice::<super::Msg>(bytes);
        let _ = serde_json::from_slice::<super::JoinClaim>(bytes);
        let _ = serde_json::from_slice::<super::DoneClaim>(bytes);
    }
}
