//! A MUNGE-authenticated rendezvous: every participant of a job meets rank 0 (the leader).
//!
//! Used by `fabric-check collective` (each rank learns its peers' data addresses and the leader's
//! session values, e.g. NCCL's unique id) and by the job prolog (one writer gathers every node's
//! probe verdict). Slurm starts prologs and tasks on different nodes without synchronising them
//! (SPANK: "prologs on different nodes are not synchronised"), so the rendezvous is ours.
//!
//! # Protocol (newline-delimited JSON over one TCP connection per follower)
//!
//! 1. The leader listens on the first of its candidate ports that binds
//!    ([`RendezvousConfig::ports`]: [`Window::candidates`] of the job's id, spread through the
//!    window so that neighbouring job ids never share one); one that is taken (`EADDRINUSE`) is
//!    skipped, and when none binds the error names every port and what to do
//!    ([`RendezvousError::Bind`]). Followers try the same ports in order.
//! 2. Follower → leader: `{"type":"want","v":3,"job_id":J}`, the job it looks for, nothing
//!    secret. A leader of another job (neighbouring job ids share ports; a follower tries them
//!    while its own leader is not listening yet) answers `reject` at once: no `munge` call, no
//!    greeting of its budget, one summary line in its log. Protocol 2 had the leader sign a hello
//!    for every connection first, so a storm of neighbouring jobs' followers used up a job's
//!    greetings and locked its own followers out (`rendezvous_munge.rs`,
//!    `followers_of_other_jobs_retrying_on_the_port_do_not_lock_its_own_follower_out`).
//! 3. Leader → follower: `{"type":"hello","v":3,"job_id":J,"leader":NODE,"challenge":HEX,
//!    "credential":H}` with a fresh random challenge per connection; H is a MUNGE credential of
//!    `{"purpose":"fabric-check/rendezvous/hello/v1","job_id","leader","port","challenge"}`. A
//!    follower sends **nothing more** until that credential decodes, comes from an allowed UID and
//!    names this job, this leader, the port it connected to and the challenge beside it; anything
//!    else (a squatter on the port, another job's leader, a silent or dripping listener) makes it
//!    close the connection and try the next port, until its deadline.
//! 4. Follower → leader: `{"type":"join","credential":C}`, C a MUNGE credential whose payload is
//!    `{"purpose":"fabric-check/rendezvous/join/v1","job_id","node","rank","nonce","challenge",
//!    "payload"}`. The leader decodes it (libmunge, or `unmunge`) and accepts it only if munged says it is
//!    valid (right key, not expired, not replayed on this host), its UID is in the allowed set,
//!    the job id, the challenge of *this* connection, and the node name for that rank all match,
//!    and the rank has not joined yet. Anything else gets `{"type":"reject","reason":..}`; a
//!    rejected stranger does not count as the participant it claimed to be.
//! 5. When every rank has joined, or at the deadline, the leader answers each joined follower.
//!    With [`Share::All`]: `{"type":"done","credential":C}`, C binding the follower's nonce, the
//!    job id, the names of missing participants and every participant's payload; followers check
//!    it the same way. With [`Share::Ack`] (the prolog and epilog, whose followers act on nothing
//!    in the answer): `{"type":"ack","job_id":J,"missing":[..]}`, unsigned, which saves the
//!    leader one `munge` per follower.
//!
//! Every credential is encoded with `munge --restrict-uid` ([`RendezvousConfig::restrict_uid`],
//! by default our own effective UID: root in the prolog, the job's user in a collective), so one
//! that reaches a listener of another UID cannot be decoded there.
//!
//! # Limits: what a stranger can cost the leader
//!
//! The leader takes connections only from the job's node addresses, and from each at most as
//! many at a time as the job has nodes there, twice over: while they ask (the `want` not read
//! yet: [`MAX_WANT_BYTES`], within [`RendezvousConfig::conn_budget`]) and, once they asked for
//! this job, while undecided; at most N−1+[`ADMIT_MARGIN`] of each in all. The rest are closed
//! at once. A fixed pool of [`RendezvousConfig::workers`] threads
//! (small stacks; a failed `spawn` means fewer workers, never a panic) does only MUNGE work:
//! sign a hello, check a join. Waiting for a follower's join is done by the leader's own poll
//! loop, so a peer that says nothing, or drips a byte at a time, holds a descriptor and its
//! address's place until the rendezvous's deadline, never a thread. A join line may have
//! [`MAX_JOIN_BYTES`], a hello [`MAX_HELLO_BYTES`]; longer ones are refused without being
//! buffered. A follower waits for a listener's hello at most [`RendezvousConfig::conn_budget`]
//! (one deadline for all reads of that line), then tries the next port. Strings a peer sent pass
//! through [`sanitise`] before they reach a log.
//!
//! # Waits and threads
//!
//! Every wait is bounded: the leader stops accepting at `timeout` after it started; a follower
//! stops trying to connect at `timeout` (backing off with jitter between tries, so N followers
//! do not arrive in one burst), and waits for the leader's answer at most `timeout + grace`
//! after it joined. Name resolution ([`RendezvousConfig::new_within`]) runs on a helper thread
//! and is abandoned at its deadline. The leader runs in the `fabric-check` child process, never
//! in the SPANK plugin. Followers use no threads except the short-lived readers inside
//! [`munge::Munge`].
//!
//! # Files
//!
//! By stage: this file holds the wire (messages, claims, bounded line reads, sockets) and
//! [`gather`]; `lead.rs` the leader's side (greet, check joins in the worker pool, answer
//! all); `follow.rs` a follower's (find the leader, check its hello, join, read the answer);
//! `munge.rs` and `libmunge.rs` the credentials; `typed.rs` the typed payloads; `meeting.rs`
//! the ids of a job's meetings (prolog, epilog, step end) and how log lines name them.

mod follow;
mod lead;
mod libmunge;
pub mod meeting;
pub mod munge;
mod peer;
pub mod rejections;
pub mod typed;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use peer::PeerError;
use rejections::Rejections;

pub use munge::{Munge, MungeError};

pub use fabric_proto::ports::Window;

/// The default rendezvous window's first port (`port_base=`'s default).
pub const DEFAULT_BASE_PORT: u16 = fabric_proto::ports::RENDEZVOUS_BASE;
/// The most bytes of a follower's join line (its credential, its payload inside).
pub const MAX_JOIN_BYTES: usize = 16 * 1024;
/// The most bytes of a leader's hello line.
pub const MAX_HELLO_BYTES: usize = 4 * 1024;

/// The largest payload (its compact JSON) a join carries: the credential is base64 of the
/// encrypted claim, about 4/3 of it, plus MUNGE's header, within [`MAX_JOIN_BYTES`].
pub const MAX_PAYLOAD_BYTES: usize = (MAX_JOIN_BYTES - 1024) * 3 / 4;

/// Whether a payload of `len` bytes fits a join ([`MAX_PAYLOAD_BYTES`]).
pub fn payload_fits(len: usize) -> bool {
    len <= MAX_PAYLOAD_BYTES
}
/// How many connections beyond the job's N−1 followers may wait for a worker at once.
pub const ADMIT_MARGIN: usize = 8;
/// The default number of leader threads that admit followers (and so of MUNGE decodes at once).
pub const DEFAULT_WORKERS: usize = 8;
/// The most characters of a peer-supplied string that reach a log.
pub const MAX_LOGGED_CHARS: usize = 160;
/// The most bytes of a follower's first line, the `want` naming its job.
pub const MAX_WANT_BYTES: usize = 256;
/// The protocol version in the follower's `want` and the leader's hello.
pub const PROTOCOL_VERSION: u32 = 3;
/// How many greetings (each a `munge` call) one node's address may get in a rendezvous.
const GREETS_PER_NODE: usize = 8;
/// The leader's poll interval while nothing happens, in milliseconds.
const POLL_MS: u16 = 5;
/// The longest pause between a follower's tries, for the largest jobs (see `max_backoff`).
const MAX_BACKOFF: Duration = Duration::from_millis(200);
/// The longest pause between a follower's tries in a small job.
const MIN_MAX_BACKOFF: Duration = Duration::from_millis(20);
/// Stack of a leader's worker thread (it parses JSON of at most a join line).
const WORKER_STACK_BYTES: usize = 256 * 1024;
/// How long name resolution may take by default ([`RendezvousConfig::new`]).
pub const DEFAULT_RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

const HELLO_PURPOSE: &str = "fabric-check/rendezvous/hello/v1";
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
    #[error(
        "the first node cannot listen for {} on any of the {} ports it tries ({}): {reason}; \
         something else holds every one of them (`ss -ltnp` on this node names it). Ask this \
         node's administrator to free them or to reserve the job step's windows \
         (net.ipv4.ip_local_reserved_ports), or the cluster's Slurm administrator to move them \
         with port_base= in plugstack.conf (the same on every node); see docs/operations.md, \
         \"Ports\"",
        meeting::MeetingName(*.job_id),
        ports.len(),
        ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")
    )]
    Bind {
        /// The rendezvous id (the job's, or one of its meetings').
        job_id: u64,
        /// The ports tried, in order.
        ports: Vec<u16>,
        /// What the last one answered.
        reason: String,
    },
    /// A follower found no leader for this job before the deadline.
    #[error(
        "no leader for {} answered at {addr} on ports {ports:?} within {timeout_ms} ms (is {leader} up?); last try: {last}",
        meeting::MeetingName(*.job_id)
    )]
    NoLeader {
        /// The rendezvous id (the job's, or one of its meetings').
        job_id: u64,
        /// The leader's node name.
        leader: String,
        /// Where it was looked for.
        addr: IpAddr,
        /// The ports tried.
        ports: Vec<u16>,
        /// The limit.
        timeout_ms: u64,
        /// What the last try found (sanitised).
        last: String,
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

/// Why a node name did not become an address ([`Resolve`]). The rendezvous names the node and
/// the fix ([`RendezvousError::Resolve`]); each message here says what to look at.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The system resolver failed (`getaddrinfo`'s own words).
    #[error("{0}")]
    Lookup(#[from] std::io::Error),
    /// The system resolver answered with no address.
    #[error("no address")]
    NoAddress,
    /// The name is not in the explicit map and there is nothing to fall back on.
    #[error("not in the address map")]
    NotInMap,
    /// The name was never looked up (a fallback that answered for fewer names).
    #[error("not resolved")]
    NotResolved,
    /// The deadline passed before this name's turn.
    #[error("name resolution ran out of time")]
    OutOfTime,
    /// The resolver's helper had not answered for this name at the deadline.
    #[error("name resolution did not answer before the rendezvous deadline")]
    NoAnswer,
    /// The resolver's helper thread could not start.
    #[error("cannot start name resolution: {0}")]
    Spawn(String),
}

/// Turns a node name into an address (pluggable: a map, the system resolver, or both).
pub trait Resolve {
    /// The address of `node`, or why there is none.
    fn resolve(&self, node: &str) -> Result<IpAddr, ResolveError>;

    /// The addresses of `nodes`, in order, given up at `deadline`. The default asks
    /// [`Resolve::resolve`] in turn and cannot interrupt one slow answer; resolvers that may
    /// block (the system's) run on a helper thread instead ([`resolve_bounded`]).
    fn resolve_all(
        &self,
        nodes: &[String],
        deadline: Instant,
    ) -> Vec<Result<IpAddr, ResolveError>> {
        nodes
            .iter()
            .map(|n| {
                if Instant::now() >= deadline {
                    Err(ResolveError::OutOfTime)
                } else {
                    self.resolve(n)
                }
            })
            .collect()
    }
}

/// Resolves `nodes` with `resolver` on a helper thread and waits for it until `deadline`; names
/// not resolved by then get an error. A helper stuck in `getaddrinfo` is left to finish on its
/// own (it holds nothing of ours).
pub fn resolve_bounded<R: Resolve + Send + 'static>(
    resolver: R,
    nodes: &[String],
    deadline: Instant,
) -> Vec<Result<IpAddr, ResolveError>> {
    let (tx, rx) = mpsc::channel();
    let names = nodes.to_vec();
    let spawned = std::thread::Builder::new()
        .name("rdv-resolve".into())
        .stack_size(WORKER_STACK_BYTES)
        .spawn(move || {
            for (i, n) in names.iter().enumerate() {
                if tx.send((i, resolver.resolve(n))).is_err() {
                    break;
                }
            }
        });
    let mut out: Vec<Result<IpAddr, ResolveError>> =
        nodes.iter().map(|_| Err(ResolveError::NoAnswer)).collect();
    if let Err(e) = spawned {
        for o in &mut out {
            *o = Err(ResolveError::Spawn(e.to_string()));
        }
        return out;
    }
    for _ in nodes {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, r)) => out[i] = r,
            Err(_) => break,
        }
    }
    out
}

/// The system resolver (`getaddrinfo`: `/etc/hosts`, DNS), IPv4 first.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, node: &str) -> Result<IpAddr, ResolveError> {
        let addrs: Vec<SocketAddr> = (node, 0).to_socket_addrs()?.collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or_else(|| addrs.first())
            .map(SocketAddr::ip)
            .ok_or(ResolveError::NoAddress)
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

impl<R: Resolve + Clone + Send + 'static> Resolve for MapResolver<R> {
    fn resolve(&self, node: &str) -> Result<IpAddr, ResolveError> {
        if let Some(ip) = self.map.get(node) {
            return Ok(*ip);
        }
        match &self.fallback {
            Some(r) => r.resolve(node),
            None => Err(ResolveError::NotInMap),
        }
    }

    /// Names in the map at once; the others through the fallback on a helper thread, bounded by
    /// `deadline`.
    fn resolve_all(
        &self,
        nodes: &[String],
        deadline: Instant,
    ) -> Vec<Result<IpAddr, ResolveError>> {
        let rest: Vec<String> = nodes
            .iter()
            .filter(|n| !self.map.contains_key(*n))
            .cloned()
            .collect();
        let mut looked_up = match (&self.fallback, rest.is_empty()) {
            (_, true) => Vec::new(),
            (Some(r), false) => resolve_bounded(r.clone(), &rest, deadline),
            (None, false) => rest.iter().map(|_| Err(ResolveError::NotInMap)).collect(),
        }
        .into_iter();
        nodes
            .iter()
            .map(|n| match self.map.get(n) {
                Some(ip) => Ok(*ip),
                None => looked_up.next().unwrap_or(Err(ResolveError::NotResolved)),
            })
            .collect()
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
    /// The ports leader and followers try: [`Window::candidates`] of `job_id`.
    pub window: Window,
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
    /// Every credential we encode decodes only for this UID (`munge --restrict-uid`); by
    /// default our own effective UID, since every participant runs as the same user.
    pub restrict_uid: Option<u32>,
    /// Leader threads admitting followers (each runs one MUNGE decode at a time): size it to
    /// munged's `--num-threads` (see docs/operations.md).
    pub workers: usize,
}

impl RendezvousConfig {
    /// Builds a configuration, resolving every node with `resolver` within
    /// [`DEFAULT_RESOLVE_TIMEOUT`].
    pub fn new(
        nodes: Vec<String>,
        resolver: &dyn Resolve,
        job_id: u64,
        munge: Munge,
        allowed_uids: Vec<u32>,
    ) -> Result<Self, RendezvousError> {
        let by = Instant::now() + DEFAULT_RESOLVE_TIMEOUT;
        Self::new_within(nodes, resolver, job_id, munge, allowed_uids, by)
    }

    /// Builds a configuration, resolving every node with `resolver`, giving up at `resolve_by`
    /// (a name that has not resolved by then is a [`RendezvousError::Resolve`]).
    pub fn new_within(
        nodes: Vec<String>,
        resolver: &dyn Resolve,
        job_id: u64,
        munge: Munge,
        allowed_uids: Vec<u32>,
        resolve_by: Instant,
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
            .zip(resolver.resolve_all(&nodes, resolve_by))
            .map(|(n, r)| {
                r.map_err(|reason| RendezvousError::Resolve {
                    node: n.clone(),
                    reason: reason.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            nodes,
            addrs,
            job_id,
            window: fabric_proto::ports::Bases::default().rendezvous,
            timeout: Duration::from_secs(10),
            munge,
            allowed_uids,
            share: Share::Ack,
            hard_deadline: None,
            restrict_uid: Some(nix::unistd::geteuid().as_raw()),
            workers: DEFAULT_WORKERS,
        })
    }

    /// The ports leader and followers try, in order.
    pub fn ports(&self) -> Vec<u16> {
        self.window.candidates(self.job_id)
    }

    fn grace(&self) -> Duration {
        (self.timeout / 2).max(Duration::from_secs(1))
    }

    /// How long a follower waits for a listener's hello (one deadline for all its reads):
    /// half of `timeout`, at least half a second; then it tries the next port.
    pub fn conn_budget(&self) -> Duration {
        (self.timeout / 2).max(Duration::from_millis(500))
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
    /// Connections the leader turned away, counted per reason, one line each (`peer: reason`
    /// for a reason seen once, else the count and the first peer; at most
    /// [`rejections::MAX_REASONS`] + 1 lines, whatever the flood) (leader only).
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
    /// A follower's first line: the job whose leader it looks for. It carries nothing secret
    /// (job ids are public), and it lets another job's leader on the port turn the follower
    /// away without a `munge` call or a greeting of that job's budget.
    Want {
        v: u32,
        job_id: u64,
    },
    Hello {
        v: u32,
        job_id: u64,
        leader: String,
        challenge: String,
        /// A MUNGE credential of a [`HelloClaim`]: the leader proves it is the job's leader
        /// before a follower sends anything.
        credential: String,
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
    /// The answer with [`Share::Ack`]: nothing a follower acts on, so not signed (a `munge` per
    /// follower saved on the leader).
    Ack {
        job_id: u64,
        missing: Vec<String>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct HelloClaim {
    purpose: String,
    job_id: u64,
    leader: String,
    port: u16,
    challenge: String,
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

/// The unspecified address of `ip`'s family (`0.0.0.0` or `::`): where a leader's listener
/// binds, and the straggler figures' UDP socket.
pub fn unspecified_like(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// A fresh random 128-bit value, hex-encoded.
pub fn random_hex() -> Result<String, RendezvousError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| RendezvousError::Io(format!("no randomness from the OS: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// A uniformly random duration in `[d/2, d]` (jitter for back-off); `d` when the OS gives no
/// randomness.
fn jittered(d: Duration) -> Duration {
    let mut b = [0u8; 4];
    if getrandom::fill(&mut b).is_err() {
        return d;
    }
    let frac = f64::from(u32::from_le_bytes(b)) / f64::from(u32::MAX);
    d.mul_f64(0.5 + frac / 2.0)
}

/// The cap of a follower's back-off in a job of `n` nodes: a quarter of a millisecond per node,
/// from 20 ms to 200 ms. A follower whose probe finished before the leader's knocks on ports
/// nobody listens on yet; every pause it takes past the moment the leader listens adds to the
/// prolog of every node. A small job's few refused knocks cost nothing, so its followers come
/// back within 20 ms; a job of a thousand nodes spreads its followers' knocks over 200 ms, so
/// that the leader's node is not hit by all of them at once.
pub fn max_backoff(n: usize) -> Duration {
    let per_node = Duration::from_micros(250);
    per_node
        .saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
        .clamp(MIN_MAX_BACKOFF, MAX_BACKOFF)
}

/// A peer-supplied string made safe to log: control characters (newlines, escapes, NUL) become
/// `?`, and it is cut to [`MAX_LOGGED_CHARS`] characters (`…` marks the cut).
pub fn sanitise(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(MAX_LOGGED_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if s.chars().nth(MAX_LOGGED_CHARS).is_some() {
        out.push('…');
    }
    out
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
        lead::lead(cfg, payload)
    } else {
        follow::follow(cfg, my_rank, payload)
    }
}

/// Why a line could not be read.
#[derive(Debug)]
enum ReadError {
    Timeout,
    TooLong(usize),
    Closed,
    Stopped,
    Io(std::io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => write!(f, "did not finish in time"),
            Self::TooLong(limit) => write!(f, "sent a line longer than {limit} bytes"),
            Self::Closed => write!(f, "closed the connection"),
            Self::Stopped => write!(f, "the rendezvous ended meanwhile"),
            Self::Io(e) => write!(f, "socket error: {e}"),
        }
    }
}

/// One connection: lines are read with a byte limit and against one deadline for the whole line
/// (a peer that drips a byte per read gains nothing), writes are bounded by the same deadline.
struct Conn {
    stream: TcpStream,
    pending: Vec<u8>,
}

/// How long one blocking read or write may last before the deadline and the stop flag are
/// looked at again.
const SLICE: Duration = Duration::from_millis(100);

impl Conn {
    fn new(stream: TcpStream) -> Self {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_nodelay(true);
        Self {
            stream,
            pending: Vec::new(),
        }
    }

    fn read_line(&mut self, limit: usize, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(i) = self.pending.iter().position(|b| *b == b'\n') {
                let rest = self.pending.split_off(i + 1);
                let mut line = std::mem::replace(&mut self.pending, rest);
                line.pop();
                return Ok(line);
            }
            if self.pending.len() > limit {
                return Err(ReadError::TooLong(limit));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ReadError::Timeout);
            }
            self.stream
                .set_read_timeout(Some(left.min(SLICE)))
                .map_err(ReadError::Io)?;
            let want = (limit + 1 - self.pending.len()).min(chunk.len());
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => return Err(ReadError::Closed),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if try_again(&e) => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    /// What a non-blocking connection has sent so far: a complete line, `None` when there is
    /// none yet, or why it is no good (too long, closed).
    fn try_read_line(&mut self, limit: usize) -> Result<Option<Vec<u8>>, ReadError> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(i) = self.pending.iter().position(|b| *b == b'\n') {
                let rest = self.pending.split_off(i + 1);
                let mut line = std::mem::replace(&mut self.pending, rest);
                line.pop();
                return Ok(Some(line));
            }
            if self.pending.len() > limit {
                return Err(ReadError::TooLong(limit));
            }
            let want = (limit + 1 - self.pending.len()).min(chunk.len());
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => return Err(ReadError::Closed),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    fn read_msg(&mut self, limit: usize, deadline: Instant) -> Result<Msg, PeerError> {
        let line = self.read_line(limit, deadline).map_err(PeerError::Read)?;
        serde_json::from_slice(&line)
            .map_err(|e| PeerError::Malformed(sanitise(&format!("malformed message: {e}"))))
    }

    fn write_msg(&mut self, msg: &Msg, deadline: Instant) -> Result<(), PeerError> {
        let mut line = serde_json::to_vec(msg).map_err(PeerError::Encode)?;
        line.push(b'\n');
        let mut sent = 0;
        while sent < line.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PeerError::SendTimeout);
            }
            self.stream
                .set_write_timeout(Some(left.min(SLICE)))
                .map_err(PeerError::Socket)?;
            match self.stream.write(&line[sent..]) {
                Ok(0) => return Err(PeerError::PeerClosed),
                Ok(n) => sent += n,
                Err(e) if try_again(&e) => {}
                Err(e) => return Err(PeerError::Send(e)),
            }
        }
        Ok(())
    }

    fn reject(&mut self, reason: &str, deadline: Instant) {
        let _ = self.write_msg(
            &Msg::Reject {
                reason: reason.into(),
            },
            deadline.min(Instant::now() + SLICE),
        );
    }
}

/// The most bytes of a `done` line for `n` participants: every payload may come back.
fn done_limit(n: usize, share: Share) -> usize {
    match share {
        Share::All => 8 * 1024 + n.saturating_mul(MAX_JOIN_BYTES * 2),
        Share::Ack => 8 * 1024 + n.saturating_mul(512),
    }
}

/// The listening socket, with a backlog for every follower (a burst of N connections is queued
/// by the kernel, not refused).
fn listen(ip: IpAddr, port: u16, backlog: usize) -> std::io::Result<TcpListener> {
    use rustix::net::{AddressFamily, SocketType, bind, socket, sockopt};
    let family = if ip.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = socket(family, SocketType::STREAM, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    bind(&fd, &SocketAddr::new(ip, port))?;
    rustix::net::listen(&fd, i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(TcpListener::from(fd))
}

/// Connects to `to` within `limit`, from `from` when that address is ours (so the leader sees
/// the address it knows this node by), else from whatever address the kernel picks.
fn connect_from(from: IpAddr, to: SocketAddr, limit: Duration) -> std::io::Result<TcpStream> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, bind, connect, socket_with};
    let family = if to.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    // A bound client socket must not keep a listener (ours or another job's) off its port.
    let _ = rustix::net::sockopt::set_socket_reuseaddr(&fd, true);
    if from.is_ipv4() == to.is_ipv4() && !from.is_unspecified() {
        // Not our address (a name that resolves elsewhere, NAT): connect from the default one.
        let _ = bind(&fd, &SocketAddr::new(from, 0));
    }
    match connect(&fd, &to) {
        Ok(()) => {}
        Err(rustix::io::Errno::INPROGRESS) => {
            let mut fds = [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(&fd),
                nix::poll::PollFlags::POLLOUT,
            )];
            let ms = u16::try_from(limit.as_millis()).unwrap_or(u16::MAX);
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
                Ok(0) => return Err(std::io::ErrorKind::TimedOut.into()),
                Ok(_) => {}
                Err(e) => return Err(std::io::Error::from(e)),
            }
            if let Err(e) = rustix::net::sockopt::socket_error(&fd)? {
                return Err(e.into());
            }
        }
        Err(e) => return Err(e.into()),
    }
    Ok(TcpStream::from(fd))
}

/// Whether `s` is connected to itself (TCP self-connect: its local and peer address are one).
fn is_self_connected(s: &TcpStream) -> bool {
    matches!((s.local_addr(), s.peer_addr()), (Ok(l), Ok(p)) if l == p)
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

/// A read or write that returned without progress but may make some on the next try (the
/// socket's timeout, a signal); the caller's deadline decides when to stop.
fn try_again(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
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
    fn the_ports_tried_are_the_windows_candidates_of_the_meeting() {
        let c = cfg(12_345);
        assert_eq!(c.ports(), c.window.candidates(12_345));
        assert_eq!(c.ports()[0], DEFAULT_BASE_PORT + 12_345 % 250);
    }

    #[test]
    fn a_leader_whose_every_candidate_port_is_held_says_which_it_tried_and_whom_to_ask() {
        // Another process's listeners on 127.0.0.1 hold every candidate: the leader, which
        // listens on the unspecified address, can bind none. The window is one the kernel
        // gave free a moment ago, spread as the real one is.
        let mut c = cfg(4_242);
        c.nodes.push("b".into());
        c.addrs.push(IpAddr::from([127, 0, 0, 1]));
        let held: Vec<TcpListener> = (0..50)
            .find_map(|_| {
                let free = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
                let first = free.local_addr().ok()?.port().checked_sub(2)?;
                drop(free);
                c.window = Window::new(first, 16, 8).ok()?;
                c.ports()
                    .iter()
                    .map(|p| TcpListener::bind((Ipv4Addr::LOCALHOST, *p)).ok())
                    .collect()
            })
            .expect("no window of free loopback ports");
        let tried = c.ports();
        assert_eq!(held.len(), tried.len());
        let err = gather(&c, 0, &serde_json::json!({})).unwrap_err();
        let text = err.to_string();
        let RendezvousError::Bind { ports, .. } = &err else {
            panic!("not a bind error: {text}");
        };
        assert_eq!(ports, &tried);
        for p in &tried {
            assert!(text.contains(&p.to_string()), "port {p} not named: {text}");
        }
        assert!(
            text.contains("job 4242")
                && text.contains("ip_local_reserved_ports")
                && text.contains("port_base=")
                && text.contains("administrator"),
            "{text}"
        );
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

    /// A resolver that never answers in time (a DNS server that drops queries).
    #[derive(Clone)]
    struct Hangs;

    impl Resolve for Hangs {
        fn resolve(&self, _node: &str) -> Result<IpAddr, ResolveError> {
            std::thread::sleep(Duration::from_secs(30));
            Err(ResolveError::NoAnswer)
        }
    }

    #[test]
    fn name_resolution_that_hangs_is_given_up_at_its_deadline_naming_the_node() {
        let map = MapResolver {
            map: [("a".to_string(), IpAddr::from([127, 0, 0, 1]))].into(),
            fallback: Some(Hangs),
        };
        let t = Instant::now();
        let err = RendezvousConfig::new_within(
            vec!["a".into(), "b".into()],
            &map,
            1,
            Munge::default(),
            vec![0],
            t + Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(
            matches!(err, RendezvousError::Resolve { ref node, ref reason }
                if node == "b" && reason.contains("deadline")),
            "{err}"
        );
    }

    #[test]
    fn names_in_the_map_do_not_wait_for_the_fallback() {
        let map = MapResolver {
            map: [("a".to_string(), IpAddr::from([127, 0, 0, 1]))].into(),
            fallback: Some(Hangs),
        };
        let t = Instant::now();
        let c =
            RendezvousConfig::new(vec!["a".into()], &map, 1, Munge::default(), vec![0]).unwrap();
        assert_eq!(c.addrs, vec![IpAddr::from([127, 0, 0, 1])]);
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn peer_text_loses_its_control_characters_and_is_cut_for_the_log() {
        assert_eq!(
            sanitise("ok\nFAKE: drained\x1b[2J\0"),
            "ok?FAKE: drained?[2J?"
        );
        let long = "x".repeat(10_000);
        let s = sanitise(&long);
        assert_eq!(s.chars().count(), MAX_LOGGED_CHARS + 1);
        assert!(s.ends_with('…'));
        assert_eq!(sanitise("n[1-4] é"), "n[1-4] é");
    }

    #[test]
    fn a_line_longer_than_its_limit_is_refused_before_it_is_all_read() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = l.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let _ = s.write_all(&vec![b'x'; 1 << 20]);
        });
        let (s, _) = l.accept().unwrap();
        let mut c = Conn::new(s);
        let err = c
            .read_line(1024, Instant::now() + Duration::from_secs(5))
            .unwrap_err();
        assert!(matches!(err, ReadError::TooLong(1024)), "{err}");
        assert!(c.pending.len() <= 1025, "buffered {}", c.pending.len());
        drop(c);
        writer.join().unwrap();
    }

    #[test]
    fn one_deadline_bounds_a_whole_line_however_the_bytes_drip() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = l.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            for _ in 0..40 {
                if s.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(25));
            }
        });
        let (s, _) = l.accept().unwrap();
        let mut c = Conn::new(s);
        let t = Instant::now();
        let err = c
            .read_line(1024, t + Duration::from_millis(300))
            .unwrap_err();
        assert!(matches!(err, ReadError::Timeout), "{err}");
        assert!(
            t.elapsed() < Duration::from_millis(600),
            "{:?}",
            t.elapsed()
        );
        drop(c);
        writer.join().unwrap();
    }

    #[test]
    fn followers_of_a_small_job_retry_within_20_ms_and_of_a_thousand_nodes_within_200() {
        assert_eq!(max_backoff(2), Duration::from_millis(20));
        assert_eq!(max_backoff(32), Duration::from_millis(20));
        assert_eq!(max_backoff(256), Duration::from_millis(64));
        assert_eq!(max_backoff(1024), Duration::from_millis(200));
        assert_eq!(max_backoff(usize::MAX), Duration::from_millis(200));
    }

    #[test]
    fn a_socket_connected_to_itself_is_told_apart_from_one_to_a_listener() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_listener = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(!is_self_connected(&to_listener));
        // A self-connect on demand: bind a port, then connect to that same port.
        let port = {
            let probe = TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let to = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let sock = rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::STREAM,
            None,
        )
        .unwrap();
        rustix::net::sockopt::set_socket_reuseaddr(&sock, true).unwrap();
        rustix::net::bind(&sock, &to).unwrap();
        rustix::net::connect(&sock, &to).unwrap();
        assert!(is_self_connected(&TcpStream::from(sock)));
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
    /// Decodes `bytes` as every kind of message and claim the rendezvous reads from a peer, and
    /// as text to log.
    pub fn decode_peer_bytes(bytes: &[u8]) {
        let s = super::sanitise(&String::from_utf8_lossy(bytes));
        assert!(
            !s.chars().any(char::is_control),
            "sanitised text has a control character"
        );
        let _ = serde_json::from_slice::<super::Msg>(bytes);
        let _ = serde_json::from_slice::<super::HelloClaim>(bytes);
        let _ = serde_json::from_slice::<super::JoinClaim>(bytes);
        let _ = serde_json::from_slice::<super::DoneClaim>(bytes);
    }
}
