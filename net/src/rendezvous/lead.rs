//! The leader's side of the rendezvous (rank 0): listen, greet each connection with a
//! MUNGE-signed hello and its own challenge, check each join ([`check_join`]) in a fixed pool
//! of workers, then answer every follower with the gathered payloads (or an ack) and collect
//! their signed `done`.

use super::meeting::MeetingName;
use super::*;

struct Joined {
    rank: usize,
    nonce: String,
    payload: Value,
    conn: Conn,
}

/// A greeted connection: its challenge, and the join line once it has arrived.
struct Greeted {
    conn: Conn,
    peer: SocketAddr,
    challenge: String,
    by: Instant,
}

/// An accepted connection whose `want` the leader has not read yet.
struct Asking {
    conn: Conn,
    peer: SocketAddr,
    ip: IpAddr,
    by: Instant,
}

/// Work for the leader's pool: CPU and MUNGE work only, never a wait for a peer.
enum Job {
    /// Sign and send the hello (the connection asked for this job).
    Greet(Conn, SocketAddr),
    /// Check the join line that arrived on a greeted connection.
    Check(Greeted, Vec<u8>),
}

/// What the pool hands back.
enum Out {
    /// The hello went out: wait (in the leader's poll loop) for the join.
    Greeted(Greeted),
    /// A verdict on a connection.
    Done(Admitted),
}

/// The peer, and either a join or why it was turned away.
type Admitted = (IpAddr, String, Result<Joined, PeerError>);

/// The leader's bookkeeping while followers join.
struct Tally {
    payloads: Vec<Option<Value>>,
    joined: Vec<Joined>,
    rejected: Rejections,
    nonces: HashSet<String>,
    /// Connections from an address not yet decided (greeting, waiting for a join, checking).
    in_flight: HashMap<IpAddr, usize>,
    /// Greetings an address may still get in this rendezvous (each costs a `munge`).
    greets_left: HashMap<IpAddr, usize>,
}

impl Tally {
    /// Rank 0's own payload in, every other rank missing, and each address's greetings:
    /// [`GREETS_PER_NODE`] for each of its nodes.
    fn new(n: usize, payload: &Value, per_addr: &HashMap<IpAddr, usize>) -> Self {
        let mut payloads = vec![None; n];
        payloads[0] = Some(payload.clone());
        Self {
            payloads,
            joined: Vec::new(),
            rejected: Rejections::default(),
            nonces: HashSet::new(),
            in_flight: HashMap::new(),
            greets_left: per_addr
                .iter()
                .map(|(ip, k)| (*ip, k * GREETS_PER_NODE))
                .collect(),
        }
    }

    /// Every rank has joined.
    fn complete(&self) -> bool {
        !self.payloads.iter().any(Option::is_none)
    }

    fn settle(&mut self, ip: IpAddr) {
        if let Some(c) = self.in_flight.get_mut(&canonical(ip)) {
            *c = c.saturating_sub(1);
        }
    }

    fn take(&mut self, (ip, peer, r): Admitted, deadline: Instant) {
        self.settle(ip);
        match r {
            Ok(mut j) if self.payloads[j.rank].is_some() => {
                self.rejected
                    .add(peer, format!("rank {} has already joined", j.rank));
                j.conn.reject("this rank has already joined", deadline);
            }
            Ok(mut j) if !self.nonces.insert(j.nonce.clone()) => {
                self.rejected.add(peer, "reused nonce");
                j.conn.reject("reused nonce", deadline);
            }
            Ok(j) => {
                self.payloads[j.rank] = Some(j.payload.clone());
                self.joined.push(j);
            }
            Err(reason) => self.rejected.add(peer, sanitise(&reason.to_string())),
        }
    }
}

/// What a job of the pool needs: the same on every worker and on the leader.
#[derive(Clone, Copy)]
struct Admit<'a> {
    cfg: &'a RendezvousConfig,
    port: u16,
    stop: &'a AtomicBool,
    deadline: Instant,
}

impl Admit<'_> {
    fn work(self, job: Job) -> Out {
        let Self {
            cfg,
            port,
            stop,
            deadline,
        } = self;
        if stop.load(Ordering::Relaxed) {
            let peer = match &job {
                Job::Greet(_, peer) => *peer,
                Job::Check(g, _) => g.peer,
            };
            let e = PeerError::Read(ReadError::Stopped);
            return Out::Done((peer.ip(), peer.to_string(), Err(e)));
        }
        match job {
            Job::Greet(conn, peer) => match greet(cfg, port, conn, peer, deadline) {
                Ok(g) => Out::Greeted(g),
                Err(e) => Out::Done((peer.ip(), peer.to_string(), Err(e))),
            },
            Job::Check(g, line) => {
                let (ip, name) = (g.peer.ip(), g.peer.to_string());
                Out::Done((ip, name, check_join(cfg, g, &line)))
            }
        }
    }
}

/// The leader's side of its pool: where jobs go, and whether anyone takes them.
struct Pool<'a> {
    admit: Admit<'a>,
    /// Workers started; with none the leader works inline.
    workers: usize,
    work_tx: mpsc::Sender<Job>,
}

impl Pool<'_> {
    /// Hands `job` to a worker, or does it here when there is none: a greeting done here joins
    /// `waiting`, a verdict goes to the tally.
    fn dispatch(&self, job: Job, tally: &mut Tally, waiting: &mut Vec<Greeted>) {
        let out = if self.workers == 0 {
            self.admit.work(job)
        } else {
            match self.work_tx.send(job) {
                Ok(()) => return,
                Err(mpsc::SendError(job)) => self.admit.work(job),
            }
        };
        match out {
            Out::Greeted(g) => waiting.push(g),
            Out::Done(a) => tally.take(a, self.admit.deadline),
        }
    }

    /// Workers finish what they hold (MUNGE calls, bounded by its timeout), skip what is
    /// queued, and stop.
    fn close(self) {
        self.admit.stop.store(true, Ordering::Relaxed);
        drop(self.work_tx);
    }
}

/// Starts up to `cfg.workers` admit workers, at most one per follower. Fewer (none at worst:
/// then the leader works inline) instead of a panic when the system is out of threads; the
/// number started comes back.
fn start_workers<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    admit: Admit<'env>,
    work_rx: &'env Mutex<mpsc::Receiver<Job>>,
    out_tx: mpsc::Sender<Out>,
    rejected: &mut Rejections,
) -> usize {
    let n = admit.cfg.nodes.len();
    let mut workers = 0;
    for i in 0..admit.cfg.workers.clamp(1, n.max(2) - 1) {
        let out_tx = out_tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("rdv-admit-{i}"))
            .stack_size(WORKER_STACK_BYTES)
            .spawn_scoped(scope, move || {
                loop {
                    // A poisoned lock only means another worker panicked; keep going.
                    let next = work_rx
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .recv();
                    let Ok(job) = next else { break };
                    if out_tx.send(admit.work(job)).is_err() {
                        break;
                    }
                }
            });
        match spawned {
            Ok(_) => workers += 1,
            Err(e) => {
                rejected.note(format!("started {workers} admit workers, not more: {e}"));
                break;
            }
        }
    }
    workers
}

pub(super) fn lead(cfg: &RendezvousConfig, payload: &Value) -> Result<Gathered, RendezvousError> {
    let start = Instant::now();
    let deadline = cfg.bounded(start, cfg.timeout);
    let admit_cap = cfg.nodes.len().saturating_sub(1) + ADMIT_MARGIN;
    let (listener, port) = bind(cfg, admit_cap)?;
    let door = Door::new(cfg, listener, admit_cap, deadline);
    let mut tally = Tally::new(cfg.nodes.len(), payload, &door.per_addr);
    gather(cfg, port, door, &mut tally, deadline);
    finish(cfg, port, tally)
}

/// Listen stage: the first port of the job's span that binds, on the unspecified address of
/// the leader's family, non-blocking.
fn bind(cfg: &RendezvousConfig, admit_cap: usize) -> Result<(TcpListener, u16), RendezvousError> {
    let unspecified = super::unspecified_like(cfg.addrs[0]);
    let ports = cfg.ports();
    let mut bound = None;
    let mut last_err = String::from("no port to try");
    for p in &ports {
        // The kernel queues connections until the poll loop takes them: room for a burst of
        // strangers on top of every follower, so that a follower's SYN is not dropped (and
        // retried only a second later) while the leader is busy.
        match listen(unspecified, *p, (admit_cap * 4).clamp(128, 4096)) {
            Ok(l) => {
                bound = Some((l, *p));
                break;
            }
            Err(e) => last_err = e.to_string(),
        }
    }
    let (listener, port) = bound.ok_or_else(|| RendezvousError::Bind {
        job_id: cfg.job_id,
        ports: ports.clone(),
        reason: last_err,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| RendezvousError::Io(e.to_string()))?;
    Ok((listener, port))
}

/// Gather stage: until every rank has joined or the deadline passes, take connections
/// ([`Door::accept`]), read what each asks for ([`Door::read_wants`]) and greet the job's own
/// followers on the pool, then check their joins on the pool ([`Door::read_joins`]).
fn gather(
    cfg: &RendezvousConfig,
    port: u16,
    mut door: Door<'_>,
    tally: &mut Tally,
    deadline: Instant,
) {
    let (work_tx, work_rx) = mpsc::channel::<Job>();
    let work_rx = Mutex::new(work_rx);
    let stop = AtomicBool::new(false);
    let admit = Admit {
        cfg,
        port,
        stop: &stop,
        deadline,
    };
    std::thread::scope(|scope| {
        let (out_tx, out_rx) = mpsc::channel::<Out>();
        let workers = start_workers(scope, admit, &work_rx, out_tx, &mut tally.rejected);
        let pool = Pool {
            admit,
            workers,
            work_tx,
        };
        while !tally.complete() && Instant::now() < deadline {
            let polled = door.poll();
            // Read the wants first: a follower admitted now is greeted in this pass.
            door.read_wants(&polled, tally, &pool);
            if polled.listener() {
                door.accept(tally);
            }
            door.read_joins(&polled, tally, &pool);
            while let Ok(out) = out_rx.try_recv() {
                match out {
                    Out::Greeted(g) => door.waiting.push(g),
                    Out::Done(a) => tally.take(a, deadline),
                }
            }
            door.undecided = tally.in_flight.values().sum();
        }
        door.close(tally);
        pool.close();
        while let Ok(out) = out_rx.recv() {
            if let Out::Done(a) = out {
                tally.take(a, deadline);
            }
        }
    });
}

/// What one poll found ready, and when.
struct Polled {
    /// The listener first, then each waiting connection, then each asking one.
    ready: Vec<bool>,
    /// How many connections were waiting (greeted) when polled.
    waiting: usize,
    /// Read after the poll returned.
    now: Instant,
}

impl Polled {
    /// A connection is at the listener.
    fn listener(&self) -> bool {
        self.ready.first().copied().unwrap_or(false)
    }

    /// Waiting connection `i` has something to read. Connections greeted since the poll
    /// (inline, when no admit worker runs) come last and were not polled: they wait for the
    /// next poll, which returns at once if their join is already there.
    fn waiting(&self, i: usize) -> bool {
        i < self.waiting && self.ready.get(1 + i).copied().unwrap_or(false)
    }

    /// Asking connection `i` has something to read.
    fn asking(&self, i: usize) -> bool {
        self.ready
            .get(1 + self.waiting + i)
            .copied()
            .unwrap_or(false)
    }
}

/// The leader's listener and the connections it holds between the accept and a verdict.
struct Door<'a> {
    cfg: &'a RendezvousConfig,
    listener: TcpListener,
    deadline: Instant,
    /// The job's nodes per address (the leader's own left out).
    per_addr: HashMap<IpAddr, usize>,
    /// The most connections asking at once, and undecided at once.
    admit_cap: usize,
    /// Accepted connections whose `want` has not arrived yet: they cost a descriptor and
    /// their address's place among the asking, but no `munge` and no greeting.
    asking: Vec<Asking>,
    asking_per_addr: HashMap<IpAddr, usize>,
    /// Greeted connections whose join has not arrived yet.
    waiting: Vec<Greeted>,
    /// Connections greeting, waiting for a join or being checked, as of the last pass.
    undecided: usize,
    /// Connections turned away because they asked for another job.
    other_jobs: usize,
}

impl<'a> Door<'a> {
    fn new(
        cfg: &'a RendezvousConfig,
        listener: TcpListener,
        admit_cap: usize,
        deadline: Instant,
    ) -> Self {
        // Connections are taken only from the job's nodes' addresses, at most as many undecided
        // at a time from one address as the job has nodes there (a stranger on a node can cost
        // that node its place, never another's), and at most N−1+ADMIT_MARGIN in all.
        let mut per_addr: HashMap<IpAddr, usize> = HashMap::new();
        for a in &cfg.addrs[1..] {
            *per_addr.entry(canonical(*a)).or_default() += 1;
        }
        Self {
            cfg,
            listener,
            deadline,
            per_addr,
            admit_cap,
            asking: Vec::new(),
            asking_per_addr: HashMap::new(),
            waiting: Vec::new(),
            undecided: 0,
            other_jobs: 0,
        }
    }

    /// Sleeps until a connection arrives or an open one has something to read.
    fn poll(&self) -> Polled {
        use std::os::fd::AsFd;
        let mut fds = Vec::with_capacity(self.waiting.len() + self.asking.len() + 1);
        fds.push(nix::poll::PollFd::new(
            self.listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        ));
        for g in &self.waiting {
            fds.push(nix::poll::PollFd::new(
                g.conn.stream.as_fd(),
                nix::poll::PollFlags::POLLIN,
            ));
        }
        for a in &self.asking {
            fds.push(nix::poll::PollFd::new(
                a.conn.stream.as_fd(),
                nix::poll::PollFlags::POLLIN,
            ));
        }
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(POLL_MS));
        Polled {
            ready: fds
                .iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect(),
            waiting: self.waiting.len(),
            now: Instant::now(),
        }
    }

    /// Ask stage: reads the `want` of each asking connection that has sent one. Another job's
    /// follower, a wrong protocol or a want over its address's share is turned away; the job's
    /// own follower is greeted on the pool.
    fn read_wants(&mut self, polled: &Polled, tally: &mut Tally, pool: &Pool<'_>) {
        let deadline = self.deadline;
        for (i, mut a) in std::mem::take(&mut self.asking).into_iter().enumerate() {
            let Some(asked) = self.want(&mut a, polled.asking(i), polled.now) else {
                self.asking.push(a);
                continue;
            };
            let job_id = match asked {
                Ok(j) => j,
                Err(why) => {
                    let why = why.to_string();
                    a.conn.reject(&why, deadline);
                    tally.rejected.add(a.peer, why);
                    continue;
                }
            };
            if job_id != self.cfg.job_id {
                // Another job's follower trying the ports while its own leader is not
                // listening yet (neighbouring job ids share ports): normal, cheap, and
                // counted rather than logged one by one.
                a.conn.reject(
                    &format!(
                        "this port serves the rendezvous of {}, not of {}",
                        MeetingName(self.cfg.job_id),
                        MeetingName(job_id)
                    ),
                    deadline,
                );
                self.other_jobs += 1;
                continue;
            }
            if let Err(why) = self.book_greeting(tally, a.ip) {
                a.conn.reject(why, deadline);
                tally.rejected.add(a.peer, why);
                continue;
            }
            pool.dispatch(Job::Greet(a.conn, a.peer), tally, &mut self.waiting);
        }
    }

    /// The job id an asking connection asked for, or why it is turned away; `None` while it
    /// may still send its want.
    fn want(
        &mut self,
        a: &mut Asking,
        readable: bool,
        now: Instant,
    ) -> Option<Result<u64, PeerError>> {
        let got = if readable {
            a.conn.try_read_line(MAX_WANT_BYTES)
        } else {
            Ok(None)
        };
        let line = match got {
            Ok(None) if now < a.by => return None,
            Ok(None) => Err(PeerError::NoWant(self.cfg.conn_budget().as_millis())),
            Ok(Some(line)) => Ok(line),
            Err(e) => Err(PeerError::Read(e)),
        };
        if let Some(c) = self.asking_per_addr.get_mut(&a.ip) {
            *c = c.saturating_sub(1);
        }
        Some(line.and_then(|l| match serde_json::from_slice::<Msg>(&l) {
            Ok(Msg::Want { v, .. }) if v != PROTOCOL_VERSION => Err(PeerError::WantVersion(v)),
            Ok(Msg::Want { job_id, .. }) => Ok(job_id),
            Ok(_) => Err(PeerError::NotAWant),
            Err(e) => Err(PeerError::Malformed(sanitise(&format!(
                "malformed message: {e}"
            )))),
        }))
    }

    /// Counts a greeting for the job's follower at `ip` against its address and the cap, or
    /// says why it gets none now.
    fn book_greeting(&mut self, tally: &mut Tally, ip: IpAddr) -> Result<(), &'static str> {
        let allowed = self.per_addr.get(&ip).copied().unwrap_or(0);
        let now_here = tally.in_flight.get(&ip).copied().unwrap_or(0);
        let greets = tally.greets_left.entry(ip).or_default();
        if now_here >= allowed {
            Err("more connections at once than that address has nodes")
        } else if *greets == 0 {
            Err("too many connections from that address")
        } else if self.undecided >= self.admit_cap {
            Err("too many connections waiting")
        } else {
            *greets -= 1;
            *tally.in_flight.entry(ip).or_default() += 1;
            self.undecided += 1;
            Ok(())
        }
    }

    /// Accept stage: takes every queued connection from one of the job's nodes' addresses,
    /// within its address's share and the cap, to ask what it wants.
    fn accept(&mut self, tally: &mut Tally) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let ip = canonical(peer.ip());
                    let Some(allowed) = self.per_addr.get(&ip).copied() else {
                        tally
                            .rejected
                            .add(peer, "not an address of this job's nodes");
                        continue;
                    };
                    let here = self.asking_per_addr.entry(ip).or_default();
                    let refused = if *here >= allowed {
                        Some("more connections at once than that address has nodes")
                    } else if self.asking.len() >= self.admit_cap {
                        Some("too many connections waiting")
                    } else {
                        None
                    };
                    if let Some(why) = refused {
                        tally.rejected.add(peer, why);
                        continue;
                    }
                    let conn = Conn::new(stream);
                    if let Err(e) = conn.stream.set_nonblocking(true) {
                        tally.rejected.add(peer, e.to_string());
                        continue;
                    }
                    *here += 1;
                    self.asking.push(Asking {
                        conn,
                        peer,
                        ip,
                        by: self.deadline.min(Instant::now() + self.cfg.conn_budget()),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Out of descriptors or similar: say so, try again on the next pass.
                    tally.rejected.note(format!("accept: {e}"));
                    break;
                }
            }
        }
    }

    /// Join stage: reads what greeted connections sent; a complete join goes to the pool to be
    /// checked, a connection silent past its time is turned away.
    fn read_joins(&mut self, polled: &Polled, tally: &mut Tally, pool: &Pool<'_>) {
        let deadline = self.deadline;
        let now = polled.now;
        let mut still = Vec::with_capacity(self.waiting.len());
        for (i, mut g) in std::mem::take(&mut self.waiting).into_iter().enumerate() {
            let got = if polled.waiting(i) {
                g.conn.try_read_line(MAX_JOIN_BYTES)
            } else {
                Ok(None)
            };
            match got {
                Ok(Some(line)) => pool.dispatch(Job::Check(g, line), tally, &mut still),
                Ok(None) if now < g.by => still.push(g),
                Ok(None) => {
                    let e = PeerError::Read(ReadError::Timeout);
                    g.conn.reject(&e.to_string(), deadline);
                    tally.take((g.peer.ip(), g.peer.to_string(), Err(e)), deadline);
                }
                Err(e) => {
                    let e = PeerError::Read(e);
                    g.conn.reject(&e.to_string(), deadline);
                    tally.take((g.peer.ip(), g.peer.to_string(), Err(e)), deadline);
                }
            }
        }
        self.waiting = still;
    }

    /// Stops listening, and notes what was left undecided when the rendezvous ended.
    fn close(self, tally: &mut Tally) {
        let Self {
            listener,
            asking,
            waiting,
            other_jobs,
            ..
        } = self;
        drop(listener);
        if !asking.is_empty() {
            tally.rejected.note(format!(
                "{} connection(s) that had asked for nothing yet when the rendezvous ended",
                asking.len()
            ));
        }
        if other_jobs > 0 {
            tally.rejected.note(format!(
                "{other_jobs} connection(s) asking for other jobs' rendezvous (their leaders \
                 were not listening yet, or sat on the next ports)"
            ));
        }
        for g in waiting {
            tally.settle(g.peer.ip());
            tally.rejected.add(g.peer, "no join before the deadline");
        }
    }
}

/// Result stage: the ranks that never joined, and every joined follower answered with the
/// gathered payloads (or an ack).
fn finish(cfg: &RendezvousConfig, port: u16, tally: Tally) -> Result<Gathered, RendezvousError> {
    let Tally {
        payloads,
        joined,
        rejected,
        ..
    } = tally;
    let missing: Vec<String> = (0..cfg.nodes.len())
        .filter(|r| payloads[*r].is_none())
        .map(|r| cfg.nodes[r].clone())
        .collect();
    let shared = match cfg.share {
        Share::All => Some(payloads.clone()),
        Share::Ack => None,
    };
    answer_all(cfg, joined, &missing, shared.as_ref())?;
    Ok(Gathered {
        my_rank: 0,
        port,
        payloads,
        missing,
        rejected: rejected.into_lines(),
    })
}

/// Sends every joined follower its `done`, encoding credentials on up to `cfg.workers` threads.
fn answer_all(
    cfg: &RendezvousConfig,
    joined: Vec<Joined>,
    missing: &[String],
    shared: Option<&Vec<Option<Value>>>,
) -> Result<(), RendezvousError> {
    let answer = |mut j: Joined| -> Result<(), RendezvousError> {
        let by = cfg.bounded(Instant::now(), Duration::from_secs(1));
        if shared.is_none() {
            let ack = Msg::Ack {
                job_id: cfg.job_id,
                missing: missing.to_vec(),
            };
            let _ = j.conn.write_msg(&ack, by);
            return Ok(());
        }
        let claim = DoneClaim {
            purpose: DONE_PURPOSE.into(),
            job_id: cfg.job_id,
            nonce: j.nonce.clone(),
            missing: missing.to_vec(),
            payloads: shared.cloned(),
        };
        let bytes = serde_json::to_vec(&claim).map_err(|e| RendezvousError::Io(e.to_string()))?;
        let credential = cfg.munge.encode_for(&bytes, cfg.restrict_uid)?;
        // A follower that vanished meanwhile is its own problem; the others still get answers.
        let _ = j.conn.write_msg(&Msg::Done { credential }, by);
        Ok(())
    };
    let queue = Mutex::new(joined);
    let next = || {
        queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
    };
    let run = || -> Result<(), RendezvousError> {
        while let Some(j) = next() {
            answer(j)?;
        }
        Ok(())
    };
    std::thread::scope(|scope| {
        let mut helpers = Vec::new();
        for _ in 1..cfg.workers.max(1) {
            match std::thread::Builder::new()
                .stack_size(WORKER_STACK_BYTES)
                .spawn_scoped(scope, run)
            {
                Ok(h) => helpers.push(h),
                Err(_) => break,
            }
        }
        let mut result = run();
        for h in helpers {
            match h.join() {
                Ok(r) => result = result.and(r),
                Err(_) => {
                    result = result.and(Err(RendezvousError::Io(
                        "a thread answering followers panicked".into(),
                    )));
                }
            }
        }
        result
    })
}

/// IPv4-mapped IPv6 addresses as IPv4, so one node has one key.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// On a leader's worker: sign the hello for this connection and send it.
fn greet(
    cfg: &RendezvousConfig,
    port: u16,
    mut conn: Conn,
    peer: SocketAddr,
    deadline: Instant,
) -> Result<Greeted, PeerError> {
    // A greeted peer costs a descriptor and its address's place, no thread: it may take until
    // the rendezvous's deadline (a follower slowed by a loaded node is not cut off).
    let by = deadline;
    conn.stream
        .set_nonblocking(false)
        .map_err(PeerError::Socket)?;
    let challenge = random_hex().map_err(|e| PeerError::Random(Box::new(e)))?;
    let hello = HelloClaim {
        purpose: HELLO_PURPOSE.into(),
        job_id: cfg.job_id,
        leader: cfg.nodes[0].clone(),
        port,
        challenge: challenge.clone(),
    };
    let bytes = serde_json::to_vec(&hello).map_err(PeerError::Encode)?;
    let credential = cfg
        .munge
        .encode_for(&bytes, cfg.restrict_uid)
        .map_err(PeerError::Sign)?;
    conn.write_msg(
        &Msg::Hello {
            v: PROTOCOL_VERSION,
            job_id: cfg.job_id,
            leader: cfg.nodes[0].clone(),
            challenge: challenge.clone(),
            credential,
        },
        by,
    )?;
    conn.stream
        .set_nonblocking(true)
        .map_err(PeerError::Socket)?;
    Ok(Greeted {
        conn,
        peer,
        challenge,
        by,
    })
}

/// On a leader's worker: check the follower's join (its credential, job, challenge and rank).
fn check_join(cfg: &RendezvousConfig, g: Greeted, line: &[u8]) -> Result<Joined, PeerError> {
    let Greeted {
        mut conn,
        challenge,
        by,
        ..
    } = g;
    let _ = conn.stream.set_nonblocking(false);
    let by = by.max(Instant::now() + SLICE);
    let credential = match serde_json::from_slice::<Msg>(line) {
        Ok(Msg::Join { credential }) => credential,
        Ok(_) => {
            conn.reject("expected a join message", by);
            return Err(PeerError::NotAJoin);
        }
        Err(e) => {
            let e = sanitise(&format!("malformed message: {e}"));
            conn.reject(&e, by);
            return Err(PeerError::Malformed(e));
        }
    };
    let mut refuse = |reason: PeerError| {
        conn.reject(&sanitise(&reason.to_string()), by);
        Err(reason)
    };
    let decoded = match cfg.munge.decode(&credential) {
        Ok(d) => d,
        Err(e) => return refuse(PeerError::JoinCredential(e)),
    };
    if !cfg.allowed_uids.contains(&decoded.uid) {
        return refuse(PeerError::JoinUid(decoded.uid));
    }
    let claim: JoinClaim = match serde_json::from_slice(&decoded.payload) {
        Ok(c) => c,
        Err(e) => return refuse(PeerError::NotAJoinClaim(e)),
    };
    if claim.purpose != JOIN_PURPOSE {
        return refuse(PeerError::JoinPurpose(claim.purpose));
    }
    if claim.job_id != cfg.job_id {
        return refuse(PeerError::JoinOtherJob {
            got: claim.job_id,
            want: cfg.job_id,
        });
    }
    if claim.challenge != challenge {
        return refuse(PeerError::Replayed);
    }
    if claim.rank == 0 || claim.rank >= cfg.nodes.len() || cfg.nodes[claim.rank] != claim.node {
        return refuse(PeerError::NotParticipant {
            node: claim.node,
            rank: claim.rank,
        });
    }
    Ok(Joined {
        rank: claim.rank,
        nonce: claim.nonce,
        payload: claim.payload,
        conn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_greeted_after_the_poll_does_not_read_an_asking_connections_readiness() {
        // Polled: the listener, two waiting connections, one asking; then a third was greeted
        // inline, after the poll.
        let polled = Polled {
            ready: vec![false, false, true, true],
            waiting: 2,
            now: Instant::now(),
        };
        assert!(!polled.listener());
        assert_eq!(
            (polled.waiting(0), polled.waiting(1)),
            (false, true),
            "the waiting connections' own slots"
        );
        assert!(
            polled.asking(0),
            "the asking connection's slot follows them"
        );
        assert!(
            !polled.waiting(2),
            "slot 3 is the asking connection's, not the one greeted since"
        );
        assert!(!polled.asking(1), "nothing past the polled ones");
    }
}
