//! Markers from inside the job: a unix datagram socket advertised in `FABRIC_RUN_SOCKET`.
//!
//! One datagram per marker, ASCII: `checkpoint-begin`, `checkpoint-end`, `restore-begin`,
//! `restore-end`, `step [N]`, `output [N]`. The socket lives in a private (0700) temporary
//! directory (on tmpfs when possible), so only the job's user can send to it. Anything else is
//! ignored. From Python:
//!
//! ```text
//! import os, socket
//! s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
//! s.sendto(b"step 42", os.environ["FABRIC_RUN_SOCKET"])
//! ```

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

use fabric_proto::record::Source;

use crate::cli::{MarkArgs, MarkKind};
use crate::tracker::Event;

/// The environment variable holding the socket path.
pub const SOCKET_ENV: &str = "FABRIC_RUN_SOCKET";

/// The datagram for a marker.
pub fn encode(kind: MarkKind, n: Option<u64>) -> String {
    let word = match kind {
        MarkKind::CheckpointBegin => "checkpoint-begin",
        MarkKind::CheckpointEnd => "checkpoint-end",
        MarkKind::RestoreBegin => "restore-begin",
        MarkKind::RestoreEnd => "restore-end",
        MarkKind::Step => "step",
        MarkKind::Output => "output",
    };
    match n {
        Some(n) => format!("{word} {n}"),
        None => word.to_owned(),
    }
}

/// Decodes a datagram; `None` for anything that is not a marker.
pub fn decode(msg: &[u8]) -> Option<Event> {
    let text = std::str::from_utf8(msg).ok()?.trim();
    let mut words = text.split_ascii_whitespace();
    let word = words.next()?;
    let n = match words.next() {
        Some(w) => Some(w.parse::<u64>().ok()?),
        None => None,
    };
    if words.next().is_some() {
        return None;
    }
    Some(match (word, n) {
        ("checkpoint-begin", None) => Event::CheckpointBegin(Source::Marker),
        ("checkpoint-end", None) => Event::CheckpointEnd(Source::Marker),
        ("restore-begin", None) => Event::RestoreBegin(Source::Marker),
        ("restore-end", None) => Event::RestoreEnd(Source::Marker),
        ("step", n) => Event::Step(n),
        ("output", n) => Event::Output(n.unwrap_or(1)),
        _ => return None,
    })
}

/// The receiving end, owned by the wrapper.
#[derive(Debug)]
pub struct MarkSocket {
    /// The bound socket (non-blocking).
    pub socket: UnixDatagram,
    /// Its path, for the child's environment.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl MarkSocket {
    /// Binds a socket in a fresh private directory on a memory file system when there is one:
    /// `$XDG_RUNTIME_DIR` (the XDG base-directory spec's place for sockets), else `/dev/shm`,
    /// else `$TMPDIR`. Creating and removing it on a disk-backed `/tmp` costs milliseconds of
    /// journal work on every job step.
    pub fn bind() -> std::io::Result<Self> {
        let bases = [
            std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
            Some(PathBuf::from("/dev/shm")),
        ];
        let builder = || {
            let mut b = tempfile::Builder::new();
            b.prefix("fabric-run-");
            b
        };
        let dir = bases
            .into_iter()
            .flatten()
            .filter(|b| b.is_dir())
            .find_map(|b| builder().tempdir_in(b).ok())
            .map_or_else(|| builder().tempdir(), Ok)?;
        let path = dir.path().join("mark.sock");
        let socket = UnixDatagram::bind(&path)?;
        socket.set_nonblocking(true)?;
        Ok(Self {
            socket,
            path,
            _dir: dir,
        })
    }

    /// Receives every pending marker.
    pub fn drain(&self) -> Vec<Event> {
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok(n) = self.socket.recv(&mut buf) {
            out.extend(decode(&buf[..n]));
        }
        out
    }
}

/// `fabric-run mark`: sends the marker; outside fabric-run (no `FABRIC_RUN_SOCKET`) it does
/// nothing. A wrapper that has gone away is a warning, never a failure of the job's script.
pub fn send(args: &MarkArgs) -> i32 {
    let Some(path) = std::env::var_os(SOCKET_ENV) else {
        return 0;
    };
    let msg = encode(args.kind, args.n);
    let sent = UnixDatagram::unbound().and_then(|s| s.send_to(msg.as_bytes(), &path));
    if let Err(e) = sent {
        tracing::warn!(
            "fabric-run mark: warning: cannot reach fabric-run at {}: {e}; marker `{msg}` dropped",
            PathBuf::from(path).display()
        );
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marker_round_trips_through_its_datagram() {
        for (kind, n) in [
            (MarkKind::CheckpointBegin, None),
            (MarkKind::CheckpointEnd, None),
            (MarkKind::RestoreBegin, None),
            (MarkKind::RestoreEnd, None),
            (MarkKind::Step, Some(7)),
            (MarkKind::Output, Some(3)),
        ] {
            assert!(decode(encode(kind, n).as_bytes()).is_some(), "{kind:?}");
        }
        assert_eq!(decode(b"step 42"), Some(Event::Step(Some(42))));
        assert_eq!(decode(b"output"), Some(Event::Output(1)));
    }

    #[test]
    fn junk_datagrams_are_ignored() {
        for junk in [
            &b"hello"[..],
            b"step x",
            b"step 1 2",
            b"checkpoint-begin 3",
            b"\xff",
            b"",
        ] {
            assert_eq!(decode(junk), None, "{junk:?}");
        }
    }
}
