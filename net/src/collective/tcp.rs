//! The TCP backend: a ring of TCP connections and NCCL's ring all-reduce over it.
//!
//! Each rank keeps two connections: one it opened to its right neighbour (sends) and one it
//! accepted from its left neighbour (receives). Both are nonblocking and served by one `poll`
//! loop, so a rank sends and receives at the same time without threads (a ring where every rank
//! first writes a large chunk with blocking sockets deadlocks once the socket buffers fill).
//!
//! All-reduce is NCCL's ring algorithm: the buffer is cut into one chunk per rank; n−1
//! reduce-scatter steps (send a chunk right, receive one from the left and add it in), then n−1
//! all-gather steps (pass the fully reduced chunks on). Each rank sends 2(n−1)/n of the buffer,
//! which is what nccl-tests' bus bandwidth assumes.
//!
//! Per-link timing ([`Ring::probe_link`]): every rank asks its left neighbour for a block (one
//! byte back along the left connection); the sender times from that request to the receiver's
//! one-byte acknowledgement: `bytes / rate + RTT` of one link, on one clock, with no other rank's
//! lateness in it. All links are probed at once. Timing chunks inside the all-reduce does not
//! work: a chunk that sat in the socket buffer before the receiver looked measures memory, and
//! in a ring slowed by one node most healthy chunks do; and a receiver-side clock started at
//! the request picks up the sender's lateness, which in a ring is the slow node's.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use serde::{Deserialize, Serialize};

use super::CollectiveError;

/// The phases of a phased link probe for ring position `pos` of `m`: `(send, recv)` per phase.
/// Positions are coloured so that no rank sends and receives in the same phase (alternating
/// colours, a third for the last position of an odd ring): each link is then timed while its
/// two ends do nothing else, so a slow node cannot slow its neighbours' other links.
pub fn probe_phases(pos: usize, m: usize) -> Vec<(bool, bool)> {
    let colour = |p: usize| {
        if m % 2 == 1 && p == m - 1 { 2 } else { p % 2 }
    };
    let phases = if m % 2 == 1 { 3 } else { 2 };
    let left = (pos + m - 1) % m;
    (0..phases)
        .map(|c| (colour(pos) == c, colour(left) == c))
        .collect()
}

/// Writes one byte to a nonblocking stream, waiting until `deadline` for room.
fn write_byte(
    s: &mut TcpStream,
    byte: u8,
    deadline: Instant,
    what: &str,
) -> Result<(), CollectiveError> {
    loop {
        match s.write(&[byte]) {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(CollectiveError::Ring(format!("{what}: connection closed"))),
            Err(e) if would_block(&e) => wait_ready(s, PollFlags::POLLOUT, deadline, what)?,
            Err(e) => return Err(io_err(what, e)),
        }
    }
}

/// Reads one byte from a nonblocking stream, waiting until `deadline` for it.
fn read_byte(s: &mut TcpStream, deadline: Instant, what: &str) -> Result<u8, CollectiveError> {
    let mut b = [0u8; 1];
    loop {
        match s.read(&mut b) {
            Ok(1) => return Ok(b[0]),
            Ok(_) => return Err(CollectiveError::Ring(format!("{what}: connection closed"))),
            Err(e) if would_block(&e) => wait_ready(s, PollFlags::POLLIN, deadline, what)?,
            Err(e) => return Err(io_err(what, e)),
        }
    }
}

/// [`poll_until`] for one socket and one readiness.
fn wait_ready(
    s: &TcpStream,
    flags: PollFlags,
    deadline: Instant,
    what: &str,
) -> Result<(), CollectiveError> {
    poll_until(&mut [PollFd::new(s.as_fd(), flags)], deadline, what)
}

/// Whether an I/O error of a nonblocking socket only means "not now".
fn would_block(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
}

/// Waits on `fds` for at most a second, never past `deadline` (past it: the timeout error
/// naming `what`). Every nonblocking loop of the ring waits here between its tries.
fn poll_until(fds: &mut [PollFd], deadline: Instant, what: &str) -> Result<(), CollectiveError> {
    let left = remaining(deadline, what)?;
    let ms = left.as_millis().min(1000) as u16;
    match poll(fds, PollTimeout::from(ms.max(1))) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
        Err(e) => Err(io_err("poll", e)),
    }
}

/// The pipelined all-reduce forwards a chunk's reduced bytes once this many are ready.
pub const PIPELINE_SLICE_BYTES: usize = 128 * 1024;
/// The largest control frame accepted.
pub const MAX_FRAME_BYTES: usize = 64 << 20;
/// The largest hello accepted.
const MAX_HELLO_BYTES: usize = 4096;
/// How long a connection to the ring's listener has to send its whole hello (its sender wrote
/// it right after connecting); never longer than the ring's deadline.
pub const HELLO_WITHIN: Duration = Duration::from_secs(1);

/// The two connections of one rank.
#[derive(Debug)]
pub struct Ring {
    left: TcpStream,
    right: TcpStream,
}

#[derive(Debug, Serialize, Deserialize)]
struct DataHello {
    job_id: u64,
    session: String,
    rank: usize,
}

fn io_err(what: &str, e: impl std::fmt::Display) -> CollectiveError {
    CollectiveError::Ring(format!("{what}: {e}"))
}

fn remaining(deadline: Instant, what: &str) -> Result<Duration, CollectiveError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(CollectiveError::Timeout(what.to_string()));
    }
    Ok(left)
}

impl Ring {
    /// Connects to the right neighbour and accepts the left one (checking its job, session and
    /// rank: a stranger's connection is dropped and the wait goes on until `deadline`).
    #[allow(clippy::too_many_arguments)]
    pub fn establish(
        listener: &TcpListener,
        right: SocketAddr,
        left_rank: usize,
        my_rank: usize,
        job_id: u64,
        session: &str,
        deadline: Instant,
    ) -> Result<Self, CollectiveError> {
        let mut right_stream = loop {
            let left = remaining(deadline, "connecting to the right neighbour")?;
            match TcpStream::connect_timeout(&right, left.min(Duration::from_millis(500))) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(io_err(&format!("connecting to {right}"), e));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        right_stream
            .set_nodelay(true)
            .map_err(|e| io_err("nodelay", e))?;
        let hello = DataHello {
            job_id,
            session: session.to_string(),
            rank: my_rank,
        };
        right_stream
            .set_write_timeout(Some(remaining(deadline, "greeting the right neighbour")?))
            .map_err(|e| io_err("timeout", e))?;
        let bytes = serde_json::to_vec(&hello).map_err(|e| io_err("hello", e))?;
        write_frame_blocking(&mut right_stream, &bytes)?;

        listener
            .set_nonblocking(true)
            .map_err(|e| io_err("listener", e))?;
        let left_stream = loop {
            remaining(deadline, "waiting for the left neighbour to connect")?;
            let (mut s, _) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                Err(e) => return Err(io_err("accept", e)),
            };
            // One deadline for the whole hello, never past the ring's: a connection that
            // drips its hello a byte at a time is dropped when that time is up.
            remaining(deadline, "reading the left neighbour's hello")?;
            let hello_by = deadline.min(Instant::now() + HELLO_WITHIN);
            let ok = read_hello(&mut s, hello_by)
                .ok()
                .and_then(|b| serde_json::from_slice::<DataHello>(&b).ok())
                .is_some_and(|h| h.job_id == job_id && h.session == session && h.rank == left_rank);
            if ok {
                break s;
            }
        };
        left_stream
            .set_nodelay(true)
            .map_err(|e| io_err("nodelay", e))?;
        left_stream
            .set_nonblocking(true)
            .map_err(|e| io_err("nonblocking", e))?;
        right_stream
            .set_nonblocking(true)
            .map_err(|e| io_err("nonblocking", e))?;
        Ok(Self {
            left: left_stream,
            right: right_stream,
        })
    }

    /// Sends `send` to the right while receiving exactly `recv.len()` bytes from the left.
    /// Returns the receive's (first read, last read, bytes after the first read).
    pub fn exchange(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        deadline: Instant,
    ) -> Result<(Option<Instant>, Option<Instant>, usize), CollectiveError> {
        let (mut sent, mut got) = (0usize, 0usize);
        let (mut first, mut last, mut after_first) = (None, None, 0usize);
        while sent < send.len() || got < recv.len() {
            // Try without waiting first; poll only when both sides would block.
            let mut progressed = false;
            if sent < send.len() {
                match self.right.write(&send[sent..]) {
                    Ok(0) => return Err(CollectiveError::Ring("right neighbour closed".into())),
                    Ok(k) => {
                        sent += k;
                        progressed = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_err("sending to the right neighbour", e)),
                }
            }
            if got < recv.len() {
                match self.left.read(&mut recv[got..]) {
                    Ok(0) => return Err(CollectiveError::Ring("left neighbour closed".into())),
                    Ok(k) => {
                        let now = Instant::now();
                        if first.is_none() {
                            first = Some(now);
                        } else {
                            after_first += k;
                        }
                        last = Some(now);
                        got += k;
                        progressed = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_err("receiving from the left neighbour", e)),
                }
            }
            if progressed {
                continue;
            }
            let mut fds = Vec::with_capacity(2);
            if sent < send.len() {
                fds.push(PollFd::new(self.right.as_fd(), PollFlags::POLLOUT));
            }
            if got < recv.len() {
                fds.push(PollFd::new(self.left.as_fd(), PollFlags::POLLIN));
            }
            poll_until(
                &mut fds,
                deadline,
                "exchanging data with the ring neighbours",
            )?;
        }
        Ok((first, last, after_first))
    }

    /// Measures the link to the right neighbour: waits for its request (one byte on that
    /// connection), sends it `bytes` bytes and returns the seconds from the request to the
    /// receiver's acknowledgement (one byte after the last one): `bytes / rate + RTT` of that one
    /// link, timed on the sender alone, so no other rank's lateness is in it. Meanwhile it asks
    /// the left neighbour for the same and acknowledges its block; all ranks call it together.
    pub fn probe_link(
        &mut self,
        bytes: usize,
        scratch: &mut Vec<u8>,
        deadline: Instant,
    ) -> Result<f64, CollectiveError> {
        self.probe_link_part(bytes, scratch, deadline, true, true)?
            .ok_or_else(|| CollectiveError::Ring("link probe ended without timing".into()))
    }

    /// One part of [`Ring::probe_link`]: `times_right` times the link to the right neighbour
    /// (its seconds are returned), `serves_left` serves the left neighbour's probe; a phased probe
    /// ([`probe_phases`]) runs each link alone.
    pub fn probe_link_part(
        &mut self,
        bytes: usize,
        scratch: &mut Vec<u8>,
        deadline: Instant,
        times_right: bool,
        serves_left: bool,
    ) -> Result<Option<f64>, CollectiveError> {
        if scratch.len() < 2 * bytes {
            scratch.resize(2 * bytes, 0);
        }
        let (send, recv) = scratch.split_at_mut(bytes);
        let recv = &mut recv[..bytes];
        // Left connection: write the request, read the block, write the acknowledgement.
        // Right connection: read the request, write the block, read the acknowledgement.
        let (mut asked, mut acked) = (!serves_left, !serves_left);
        let (mut go_at, mut ack_at): (Option<Instant>, Option<Instant>) = (None, None);
        let (mut sent, mut got) = (
            if times_right { 0 } else { bytes },
            if serves_left { 0 } else { bytes },
        );
        if !times_right {
            let now = Instant::now();
            (go_at, ack_at) = (Some(now), Some(now));
        }
        while !(asked && acked && ack_at.is_some() && sent == bytes && got == bytes) {
            let mut progressed = false;
            if !asked || (got == bytes && !acked) {
                match self.left.write(&[1u8]) {
                    Ok(1) => {
                        if asked {
                            acked = true;
                        } else {
                            asked = true;
                        }
                        progressed = true;
                    }
                    Ok(_) => return Err(CollectiveError::Ring("left neighbour closed".into())),
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(io_err("writing to the left neighbour", e)),
                }
            }
            if go_at.is_none() || (sent == bytes && ack_at.is_none()) {
                let mut b = [0u8; 1];
                match self.right.read(&mut b) {
                    Ok(1) => {
                        if go_at.is_none() {
                            go_at = Some(Instant::now());
                        } else {
                            ack_at = Some(Instant::now());
                        }
                        progressed = true;
                    }
                    Ok(_) => return Err(CollectiveError::Ring("right neighbour closed".into())),
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(io_err("reading from the right neighbour", e)),
                }
            }
            if go_at.is_some() && sent < bytes {
                match self.right.write(&send[sent..]) {
                    Ok(0) => return Err(CollectiveError::Ring("right neighbour closed".into())),
                    Ok(k) => {
                        sent += k;
                        progressed = true;
                    }
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(io_err("sending to the right neighbour", e)),
                }
            }
            if asked && got < bytes {
                match self.left.read(&mut recv[got..]) {
                    Ok(0) => return Err(CollectiveError::Ring("left neighbour closed".into())),
                    Ok(k) => {
                        got += k;
                        progressed = true;
                    }
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(io_err("receiving from the left neighbour", e)),
                }
            }
            if progressed {
                continue;
            }
            let mut right_flags = PollFlags::empty();
            if go_at.is_none() || (sent == bytes && ack_at.is_none()) {
                right_flags |= PollFlags::POLLIN;
            }
            if go_at.is_some() && sent < bytes {
                right_flags |= PollFlags::POLLOUT;
            }
            let mut left_flags = PollFlags::empty();
            if !asked || (got == bytes && !acked) {
                left_flags |= PollFlags::POLLOUT;
            }
            if asked && got < bytes {
                left_flags |= PollFlags::POLLIN;
            }
            let mut fds = Vec::with_capacity(2);
            if !right_flags.is_empty() {
                fds.push(PollFd::new(self.right.as_fd(), right_flags));
            }
            if !left_flags.is_empty() {
                fds.push(PollFd::new(self.left.as_fd(), left_flags));
            }
            poll_until(&mut fds, deadline, "probing the ring links")?;
        }
        match (go_at, ack_at) {
            (Some(g), Some(a)) if times_right => Ok(Some((a - g).as_secs_f64())),
            _ if !times_right => Ok(None),
            _ => Err(CollectiveError::Ring(
                "link probe ended without timing".into(),
            )),
        }
    }

    /// One part of a latency probe: `times_right` times round trips of one byte on the link to
    /// the right neighbour (its seconds are returned, one per round trip), `serves_left` echoes
    /// the left neighbour's. A phased probe ([`probe_phases`]) gives a rank one role per phase.
    ///
    /// The timing side sends `1` for "more" and `0` for its last round trip, at most `rounds`
    /// of them and none started after `until` (a link whose round trips are slow is cut short,
    /// not the budget); the serving side echoes every byte and ends after the `0`. So both ends
    /// agree on when the link is done without a count fixed in advance.
    pub fn ping_part(
        &mut self,
        rounds: u32,
        until: Instant,
        deadline: Instant,
        times_right: bool,
        serves_left: bool,
    ) -> Result<Vec<f64>, CollectiveError> {
        if times_right && serves_left {
            return Err(CollectiveError::Ring(
                "a latency probe gives a rank one role per phase".into(),
            ));
        }
        let mut rtt_s = Vec::new();
        if times_right {
            rtt_s.reserve(rounds as usize);
            loop {
                let last = rtt_s.len() + 1 >= rounds as usize || Instant::now() >= until;
                let byte = u8::from(!last);
                let t0 = Instant::now();
                write_byte(
                    &mut self.right,
                    byte,
                    deadline,
                    "pinging the right neighbour",
                )?;
                let echo = read_byte(
                    &mut self.right,
                    deadline,
                    "waiting for the right neighbour's echo",
                )?;
                rtt_s.push(t0.elapsed().as_secs_f64());
                if echo != byte {
                    return Err(CollectiveError::Ring(format!(
                        "the right neighbour echoed {echo} for {byte}"
                    )));
                }
                if last {
                    break;
                }
            }
        } else if serves_left {
            loop {
                let byte = read_byte(
                    &mut self.left,
                    deadline,
                    "waiting for the left neighbour's ping",
                )?;
                write_byte(
                    &mut self.left,
                    byte,
                    deadline,
                    "echoing the left neighbour's ping",
                )?;
                if byte == 0 {
                    break;
                }
            }
        }
        Ok(rtt_s)
    }

    /// Sends a length-prefixed frame to the right.
    pub fn send_frame(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), CollectiveError> {
        if bytes.len() > MAX_FRAME_BYTES {
            return Err(CollectiveError::Ring("frame too large".into()));
        }
        let mut buf = (bytes.len() as u32).to_le_bytes().to_vec();
        buf.extend_from_slice(bytes);
        self.exchange(&buf, &mut [], deadline).map(|_| ())
    }

    /// Receives a length-prefixed frame from the left.
    pub fn recv_frame(&mut self, deadline: Instant) -> Result<Vec<u8>, CollectiveError> {
        let mut len = [0u8; 4];
        self.exchange(&[], &mut len, deadline)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(CollectiveError::Ring(format!(
                "left neighbour sent a {len}-byte frame"
            )));
        }
        let mut buf = vec![0u8; len];
        self.exchange(&[], &mut buf, deadline)?;
        Ok(buf)
    }

    /// In-place ring all-reduce (sum) of `data` among the `n` ranks of the ring, this rank at
    /// position `pos`; `stage` is scratch space.
    ///
    /// Pipelined like NCCL's ring: the 2(n−1) steps are not run in lock-step. The chunk sent at
    /// step s is the one received at step s−1, so its bytes go out as soon as they have arrived
    /// and been reduced (whole floats), while later bytes are still on their way. Receiving can
    /// run ahead of sending; it only ever overwrites (all-gather) bytes this rank has already
    /// handed to the kernel, because every byte it receives for a chunk derives, around the
    /// ring, from the same position of this rank's own earlier send of that chunk.
    pub fn all_reduce(
        &mut self,
        data: &mut [f32],
        pos: usize,
        n: usize,
        stage: &mut Vec<f32>,
        deadline: Instant,
    ) -> Result<(), CollectiveError> {
        if n < 2 {
            return Ok(());
        }
        let len = data.len();
        let bounds = |i: usize| (i * len / n, (i + 1) * len / n);
        let max_chunk = (0..n).map(|i| bounds(i).1 - bounds(i).0).max().unwrap_or(0);
        if stage.len() < max_chunk {
            stage.resize(max_chunk, 0.0);
        }
        let steps = 2 * (n - 1);
        // The chunk received at step s: p − s − 1 (mod n), in both phases; sent at s: that of s−1.
        let recv_chunk = |s: usize| (pos + 2 * n - (s % n) - 1) % n;
        let send_chunk = |s: usize| (pos + n - (s % n)) % n;
        let (mut ss, mut soff) = (0usize, 0usize);
        let (mut rs, mut roff, mut done) = (0usize, 0usize, 0usize);
        loop {
            // Skip empty chunks (fewer elements than ranks).
            while ss < steps && bounds(send_chunk(ss)).0 == bounds(send_chunk(ss)).1 {
                ss += 1;
            }
            while rs < steps && bounds(recv_chunk(rs)).0 == bounds(recv_chunk(rs)).1 {
                rs += 1;
            }
            if ss >= steps && rs >= steps {
                return Ok(());
            }
            let mut progressed = false;
            let mut send_ready = 0;
            if ss < steps {
                let (a, b) = bounds(send_chunk(ss));
                let full = (b - a) * 4;
                send_ready = if ss == 0 || rs >= ss {
                    full
                } else {
                    // Forward in slices, not every few bytes that arrive: fewer syscalls.
                    let ready = done * 4;
                    if ready - soff.min(ready) >= PIPELINE_SLICE_BYTES {
                        ready
                    } else {
                        soff
                    }
                };
                if soff < send_ready {
                    let bytes: &[u8] = bytemuck::cast_slice(&data[a..b]);
                    match self.right.write(&bytes[soff..send_ready]) {
                        Ok(0) => {
                            return Err(CollectiveError::Ring("right neighbour closed".into()));
                        }
                        Ok(k) => {
                            soff += k;
                            progressed = true;
                        }
                        Err(e) if would_block(&e) => {}
                        Err(e) => return Err(io_err("sending to the right neighbour", e)),
                    }
                }
                if soff == full {
                    ss += 1;
                    soff = 0;
                    continue;
                }
            }
            if rs < steps {
                let (a, b) = bounds(recv_chunk(rs));
                let full = (b - a) * 4;
                // Reduce-scatter reads into the stage and adds; all-gather reads straight into
                // place (it only overwrites).
                let reducing = rs < n - 1;
                let target: &mut [u8] = if reducing {
                    bytemuck::cast_slice_mut(&mut stage[..b - a])
                } else {
                    bytemuck::cast_slice_mut(&mut data[a..b])
                };
                match self.left.read(&mut target[roff..full]) {
                    Ok(0) => return Err(CollectiveError::Ring("left neighbour closed".into())),
                    Ok(k) => {
                        roff += k;
                        progressed = true;
                        let complete = roff / 4;
                        if reducing {
                            for (d, x) in data[a + done..a + complete]
                                .iter_mut()
                                .zip(&stage[done..complete])
                            {
                                *d += *x;
                            }
                        }
                        done = complete;
                        if roff == full {
                            rs += 1;
                            roff = 0;
                            done = 0;
                        }
                    }
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(io_err("receiving from the left neighbour", e)),
                }
            }
            if progressed {
                continue;
            }
            let mut fds = Vec::with_capacity(2);
            if ss < steps && soff < send_ready {
                fds.push(PollFd::new(self.right.as_fd(), PollFlags::POLLOUT));
            }
            if rs < steps {
                fds.push(PollFd::new(self.left.as_fd(), PollFlags::POLLIN));
            }
            poll_until(
                &mut fds,
                deadline,
                "exchanging data with the ring neighbours",
            )?;
        }
    }
}

fn write_frame_blocking(s: &mut TcpStream, bytes: &[u8]) -> Result<(), CollectiveError> {
    let mut buf = (bytes.len() as u32).to_le_bytes().to_vec();
    buf.extend_from_slice(bytes);
    s.write_all(&buf).map_err(|e| io_err("sending hello", e))
}

/// Reads one hello frame (length, then at most 4 KiB of JSON) by `deadline`, checked before
/// every read: each read waits at most what is left, so a peer that drips a byte per read
/// gains nothing.
fn read_hello(s: &mut TcpStream, deadline: Instant) -> Result<Vec<u8>, CollectiveError> {
    let what = "reading the left neighbour's hello";
    s.set_nonblocking(true).map_err(|e| io_err(what, e))?;
    let mut len = [0u8; 4];
    read_until(s, &mut len, deadline, what)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_HELLO_BYTES {
        return Err(CollectiveError::Ring("oversized hello".into()));
    }
    let mut buf = vec![0u8; len];
    read_until(s, &mut buf, deadline, what)?;
    Ok(buf)
}

/// Fills `buf` from a nonblocking stream by `deadline` (past it: the timeout error naming
/// `what`).
fn read_until(
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
    what: &str,
) -> Result<(), CollectiveError> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(CollectiveError::Ring(format!("{what}: connection closed"))),
            Ok(n) => got += n,
            Err(e) if would_block(&e) => wait_ready(s, PollFlags::POLLIN, deadline, what)?,
            Err(e) => return Err(io_err(what, e)),
        }
        if got < buf.len() {
            remaining(deadline, what)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// Runs `f` on every rank of a ring of `n` over loopback, each in a thread of its own with
    /// its ring established (deadline 20 s); their results in rank order.
    fn on_a_ring<T: Send + 'static>(
        n: usize,
        f: impl Fn(Ring, usize, Instant) -> T + Copy + Send + 'static,
    ) -> Vec<T> {
        let listeners: Vec<TcpListener> = (0..n)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap())
            .collect();
        let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        let handles: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let right = addrs[(r + 1) % n];
                std::thread::spawn(move || {
                    let ring =
                        Ring::establish(&l, right, (r + n - 1) % n, r, 7, "s", deadline).unwrap();
                    f(ring, r, deadline)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn a_connection_that_trickles_its_hello_does_not_hold_the_ring_past_its_deadline() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let at = listener.local_addr().unwrap();
        // The right neighbour's listener: its backlog takes the connection and the hello.
        let right = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let right_at = right.local_addr().unwrap();
        // A stranger connects first and sends a hello of 200 bytes, one byte every 0.4 s.
        let mut trickler = TcpStream::connect(at).unwrap();
        let dripping = std::thread::spawn(move || {
            let _ = trickler.write_all(&200u32.to_le_bytes());
            for _ in 0..20 {
                if trickler.write_all(b" ").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(400));
            }
        });
        // The real left neighbour connects right after and greets at once.
        std::thread::sleep(Duration::from_millis(100));
        let mut neighbour = TcpStream::connect(at).unwrap();
        let hello = serde_json::to_vec(&DataHello {
            job_id: 7,
            session: "s".into(),
            rank: 1,
        })
        .unwrap();
        write_frame_blocking(&mut neighbour, &hello).unwrap();
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(3);
        let got = Ring::establish(&listener, right_at, 1, 0, 7, "s", deadline);
        let took = t0.elapsed();
        assert!(got.is_ok(), "{got:?} after {took:?}");
        assert!(took < Duration::from_secs(3), "took {took:?}");
        drop(got);
        dripping.join().unwrap();
    }

    fn ring_all_reduce(n: usize, len: usize) -> Vec<Vec<f32>> {
        on_a_ring(n, move |mut ring, r, deadline| {
            let mut data: Vec<f32> = (0..len).map(|i| (r * 1000 + i) as f32).collect();
            let mut stage = Vec::new();
            ring.all_reduce(&mut data, r, n, &mut stage, deadline)
                .unwrap();
            data
        })
    }

    #[test]
    fn ring_all_reduce_sums_every_element_on_every_rank() {
        for (n, len) in [
            (2, 1),
            (2, 10),
            (3, 7),
            (3, 1_000_001),
            (4, 100_003),
            (4, 3),
            (5, 3),
            (6, 262_144),
        ] {
            let expected: Vec<f32> = (0..len)
                .map(|i| (0..n).map(|r| (r * 1000 + i) as f32).sum())
                .collect();
            for (r, got) in ring_all_reduce(n, len).into_iter().enumerate() {
                assert_eq!(got, expected, "n={n} len={len} rank={r}");
            }
        }
    }

    #[test]
    fn every_rank_times_the_block_from_its_left_neighbour() {
        let n = 3;
        let ranks = on_a_ring(n, move |mut ring, r, deadline| {
            let mut scratch = Vec::new();
            let t = ring.probe_link(1 << 20, &mut scratch, deadline).unwrap();
            // The ring still works afterwards: nothing of the probe is left in flight.
            let mut data = vec![1.0f32; 10];
            ring.all_reduce(&mut data, r, n, &mut Vec::new(), deadline)
                .unwrap();
            (t, data)
        });
        for (t, data) in ranks {
            assert!(t > 0.0 && t < 20.0, "{t}");
            assert_eq!(data, vec![3.0f32; 10]);
        }
    }

    #[test]
    fn in_a_phased_probe_no_rank_sends_and_receives_at_once_and_every_link_has_both_ends_in_one_phase()
     {
        for m in 2..10 {
            let all: Vec<Vec<(bool, bool)>> = (0..m).map(|p| probe_phases(p, m)).collect();
            for p in 0..m {
                let right = (p + 1) % m;
                let sends: Vec<usize> = (0..all[p].len()).filter(|c| all[p][*c].0).collect();
                assert_eq!(sends.len(), 1, "m={m} p={p}: one phase sends");
                assert!(
                    all[right][sends[0]].1,
                    "m={m}: {p}->{right} has its receiver in the same phase"
                );
                if m > 2 {
                    assert!(
                        all[p].iter().all(|(s, r)| !(*s && *r)),
                        "m={m} p={p}: {:?}",
                        all[p]
                    );
                }
            }
        }
    }

    #[test]
    fn a_phased_probe_gives_every_rank_the_time_of_its_own_link() {
        for n in [3usize, 4] {
            let ranks = on_a_ring(n, move |mut ring, r, deadline| {
                let mut scratch = Vec::new();
                let mut times = Vec::new();
                for (send, recv) in probe_phases(r, n) {
                    if send || recv {
                        times.extend(
                            ring.probe_link_part(1 << 20, &mut scratch, deadline, send, recv)
                                .unwrap(),
                        );
                    }
                }
                let mut data = vec![1.0f32; 10];
                ring.all_reduce(&mut data, r, n, &mut Vec::new(), deadline)
                    .unwrap();
                (times, data)
            });
            for (times, data) in ranks {
                assert_eq!(times.len(), 1, "n={n}: one timed link per rank");
                assert!(times[0] > 0.0 && times[0] < 20.0, "{times:?}");
                assert_eq!(data, vec![n as f32; 10]);
            }
        }
    }

    #[test]
    fn a_phased_latency_probe_gives_every_rank_the_round_trips_of_its_own_link() {
        for n in [2usize, 3, 4, 5] {
            let got = on_a_ring(n, move |mut ring, r, deadline| {
                let mut rtt = Vec::new();
                for (send, recv) in probe_phases(r, n) {
                    if !send && !recv {
                        continue;
                    }
                    let until = Instant::now() + Duration::from_secs(5);
                    rtt.extend(ring.ping_part(50, until, deadline, send, recv).unwrap());
                }
                // Every byte of the probe was read: the ring carries a frame around afterwards.
                if r == 0 {
                    ring.send_frame(b"after", deadline).unwrap();
                    assert_eq!(ring.recv_frame(deadline).unwrap(), b"after");
                } else {
                    let f = ring.recv_frame(deadline).unwrap();
                    ring.send_frame(&f, deadline).unwrap();
                }
                rtt
            });
            for (r, rtt) in got.iter().enumerate() {
                assert_eq!(rtt.len(), 50, "ring of {n}, rank {r}");
                assert!(rtt.iter().all(|t| *t > 0.0 && *t < 5.0), "{rtt:?}");
            }
        }
    }

    #[test]
    fn a_latency_probe_past_its_time_ends_after_one_round_trip_on_both_ends() {
        let got = on_a_ring(3, |mut ring, r, deadline| {
            let mut rtt = Vec::new();
            for (send, recv) in probe_phases(r, 3) {
                if send || recv {
                    // `until` already passed: one round trip, the last, and both ends stop.
                    rtt.extend(
                        ring.ping_part(1000, Instant::now(), deadline, send, recv)
                            .unwrap(),
                    );
                }
            }
            rtt.len()
        });
        assert_eq!(got, vec![1, 1, 1]);
    }

    #[test]
    fn a_stranger_connecting_first_does_not_take_the_left_neighbours_place() {
        let l0 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let l1 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (a0, a1) = (l0.local_addr().unwrap(), l1.local_addr().unwrap());
        // A stranger greets rank 0 with the wrong session first.
        let mut stranger = TcpStream::connect(a0).unwrap();
        let hello = serde_json::to_vec(&DataHello {
            job_id: 7,
            session: "guess".into(),
            rank: 1,
        })
        .unwrap();
        write_frame_blocking(&mut stranger, &hello).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let t = std::thread::spawn(move || {
            let mut ring = Ring::establish(&l1, a0, 0, 1, 7, "s", deadline).unwrap();
            ring.recv_frame(deadline).unwrap()
        });
        let mut ring = Ring::establish(&l0, a1, 1, 0, 7, "s", deadline).unwrap();
        ring.send_frame(b"hi", deadline).unwrap();
        assert_eq!(t.join().unwrap(), b"hi");
        // Rank 1 has gone: a closed neighbour is an error, not a hang.
        assert!(ring.recv_frame(deadline).is_err());
    }
}
