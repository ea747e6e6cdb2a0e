//! A follower's side of the rendezvous: find the job's leader on its ports, check its hello
//! ([`check_hello`]), send a signed join for the hello's challenge and read the answer.

use super::*;

/// Checks a hello: the right job, and a credential from an allowed UID that names this job,
/// this port and this connection's challenge. Returns the challenge to answer.
fn check_hello(cfg: &RendezvousConfig, port: u16, msg: Msg) -> Result<String, PeerError> {
    if let Msg::Reject { reason } = &msg {
        return Err(PeerError::TurnedAway(sanitise(reason)));
    }
    let Msg::Hello {
        v,
        job_id,
        challenge,
        credential,
        ..
    } = msg
    else {
        return Err(PeerError::NoHello);
    };
    if v != PROTOCOL_VERSION {
        return Err(PeerError::HelloVersion(v));
    }
    if job_id != cfg.job_id {
        return Err(PeerError::OtherLeader(job_id));
    }
    let decoded = cfg
        .munge
        .decode(&credential)
        .map_err(PeerError::HelloCredential)?;
    if !cfg.allowed_uids.contains(&decoded.uid) {
        return Err(PeerError::HelloUid(decoded.uid));
    }
    let claim: HelloClaim =
        serde_json::from_slice(&decoded.payload).map_err(PeerError::NotAHello)?;
    if claim.purpose != HELLO_PURPOSE
        || claim.job_id != cfg.job_id
        || claim.port != port
        || claim.leader != cfg.nodes[0]
        || claim.challenge != challenge
    {
        return Err(PeerError::HelloMismatch);
    }
    Ok(challenge)
}

pub(super) fn follow(
    cfg: &RendezvousConfig,
    my_rank: usize,
    payload: &Value,
) -> Result<Gathered, RendezvousError> {
    let start = Instant::now();
    let deadline = cfg.bounded(start, cfg.timeout);
    let leader = cfg.addrs[0];
    let me = cfg.addrs[my_rank];
    let ports = cfg.ports();
    let nonce = random_hex()?;
    let claim_len = serde_json::to_vec(payload).map_or(0, |p| p.len());
    if !payload_fits(claim_len) {
        return Err(RendezvousError::Config(format!(
            "this node's payload is {claim_len} bytes; a join may have at most {MAX_JOIN_BYTES} bytes"
        )));
    }
    let mut backoff = Duration::from_millis(10);
    let cap = max_backoff(cfg.nodes.len());
    let mut last = String::from("nothing listened");
    let mut found_listener = false;
    loop {
        for port in &ports {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let to = SocketAddr::new(leader, *port);
            let (mut conn, challenge) = match ask(cfg, me, to, left, deadline) {
                Ok(asked) => asked,
                Err(Unanswered::Nothing(why)) => {
                    if !found_listener {
                        last = why;
                    }
                    continue;
                }
                Err(Unanswered::Listener(e)) => {
                    // What a listener said matters more than the ports where none listened;
                    // the first few different complaints are kept.
                    let seen = format!("port {port}: the listener {}", sanitise(&e.to_string()));
                    if !found_listener {
                        last.clear();
                    }
                    found_listener = true;
                    if !last.contains(&seen) && last.matches("; ").count() < 2 {
                        if !last.is_empty() {
                            last.push_str("; ");
                        }
                        last.push_str(&seen);
                    }
                    continue;
                }
            };
            // The leader is authenticated: from here on only the rendezvous's deadline counts.
            join(
                cfg, my_rank, &nonce, payload, &mut conn, challenge, deadline,
            )?;
            return answer(cfg, my_rank, *port, &nonce, payload, &mut conn);
        }
        if Instant::now() >= deadline {
            return Err(RendezvousError::NoLeader {
                job_id: cfg.job_id,
                leader: cfg.nodes[0].clone(),
                addr: leader,
                ports,
                timeout_ms: u64::try_from(cfg.timeout.as_millis()).unwrap_or(u64::MAX),
                last,
            });
        }
        // Back off with jitter, so that N followers retrying do not arrive in one burst.
        let left = deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(jittered(backoff).min(left));
        backoff = (backoff * 2).min(cap);
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
        .map_err(|e| RendezvousError::BadLeader(sanitise(&format!("payload: {e}"))))?;
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
        missing: claim.missing.iter().map(|m| sanitise(m)).collect(),
        rejected: Vec::new(),
    })
}

/// Why a port gave no leader to join.
enum Unanswered {
    /// Nothing listened there (what to say, should no listener be found at all).
    Nothing(String),
    /// A listener that is not the job's leader, or said no: what it did.
    Listener(PeerError),
}

/// Ask stage: connects to `to` within `left` (at most half a second) and, within the connection
/// budget and the rendezvous's `deadline`, asks for the job and checks the listener's hello.
/// Returns the connection and the hello's challenge.
fn ask(
    cfg: &RendezvousConfig,
    me: IpAddr,
    to: SocketAddr,
    left: Duration,
    deadline: Instant,
) -> Result<(Conn, String), Unanswered> {
    let port = to.port();
    let stream = match connect_from(me, to, left.min(Duration::from_millis(500))) {
        // A connection to itself: the kernel gave our socket the very port we asked for
        // while nothing listened there (the rendezvous ports lie in the ephemeral range;
        // likely only when nodes share an address, as virtual nodes do). It would wait a
        // whole conn_budget for a hello it can only send itself.
        Ok(s) if is_self_connected(&s) => {
            return Err(Unanswered::Nothing(format!(
                "port {port}: nothing listened (connected to itself)"
            )));
        }
        Ok(s) => s,
        Err(e) => return Err(Unanswered::Nothing(format!("port {port}: {e}"))),
    };
    let conn_deadline = deadline.min(Instant::now() + cfg.conn_budget());
    let mut conn = Conn::new(stream);
    // Only the job id goes out before the leader has proven itself: another job's
    // leader turns us away at once, without a `munge` call on its side.
    let want = Msg::Want {
        v: PROTOCOL_VERSION,
        job_id: cfg.job_id,
    };
    conn.write_msg(&want, conn_deadline)
        .and_then(|()| conn.read_msg(MAX_HELLO_BYTES, conn_deadline))
        .and_then(|m| check_hello(cfg, port, m))
        .map(|challenge| (conn, challenge))
        .map_err(Unanswered::Listener)
}

/// Join stage: sends the signed join that answers the leader's `challenge`.
fn join(
    cfg: &RendezvousConfig,
    my_rank: usize,
    nonce: &str,
    payload: &Value,
    conn: &mut Conn,
    challenge: String,
    deadline: Instant,
) -> Result<(), RendezvousError> {
    let claim = JoinClaim {
        purpose: JOIN_PURPOSE.into(),
        job_id: cfg.job_id,
        node: cfg.nodes[my_rank].clone(),
        rank: my_rank,
        nonce: nonce.to_owned(),
        challenge,
        payload: payload.clone(),
    };
    let bytes = serde_json::to_vec(&claim).map_err(|e| RendezvousError::Io(e.to_string()))?;
    let credential = cfg.munge.encode_for(&bytes, cfg.restrict_uid)?;
    conn.write_msg(&Msg::Join { credential }, deadline)
        .map_err(|e| RendezvousError::Io(e.to_string()))
}

/// Result stage: reads the leader's answer to the join on `port`: a reject, the signed `done`
/// with the gathered payloads, or (payloads not shared) an ack.
fn answer(
    cfg: &RendezvousConfig,
    my_rank: usize,
    port: u16,
    nonce: &str,
    payload: &Value,
    conn: &mut Conn,
) -> Result<Gathered, RendezvousError> {
    let answer_by = cfg.bounded(Instant::now(), cfg.timeout + cfg.grace());
    let answer = match conn.read_line(done_limit(cfg.nodes.len(), cfg.share), answer_by) {
        Ok(line) => line,
        Err(ReadError::Timeout) => {
            return Err(RendezvousError::Timeout(
                "waiting for the leader's answer".into(),
            ));
        }
        Err(e) => return Err(RendezvousError::Io(format!("the leader {e}"))),
    };
    match serde_json::from_slice::<Msg>(&answer) {
        Ok(Msg::Reject { reason }) => Err(RendezvousError::Rejected(sanitise(&reason))),
        Ok(Msg::Done { credential }) => {
            accept_done(cfg, my_rank, port, nonce, payload, &credential)
        }
        Ok(Msg::Ack { job_id, missing }) if cfg.share == Share::Ack && job_id == cfg.job_id => {
            let mut payloads = vec![None; cfg.nodes.len()];
            payloads[my_rank] = Some(payload.clone());
            Ok(Gathered {
                my_rank,
                port,
                payloads,
                missing: missing
                    .iter()
                    .take(cfg.nodes.len())
                    .map(|m| sanitise(m))
                    .collect(),
                rejected: Vec::new(),
            })
        }
        _ => Err(RendezvousError::BadLeader(
            "answered with an unexpected message".into(),
        )),
    }
}
