//! MUNGE credentials: through `libmunge` where the host has it, else the `munge` and `unmunge`
//! client programs.
//!
//! The library ([`Backend::Library`], loaded at run time by `libmunge.rs`, the one unsafe file
//! here) is one round trip to munged per call; a program start costs some 3 ms of CPU, which
//! the rendezvous leader paid once per follower. The programs ([`Backend::Programs`]) are what
//! every MUNGE installation ships (`munge(1)`, `unmunge(1)`) and stay the fallback: they are run
//! by absolute path with separate arguments, never through a shell. `-S SOCKET` (or the
//! library's socket option) is passed through so tests and the testbed can use a private
//! `munged`. Every call is bounded in time: a hung `munged` turns into [`MungeError::Timeout`]
//! (a program is killed; a library call is left on the thread it ran on, which the process's
//! own end takes with it).
//!
//! `unmunge` exits with the MUNGE error code (`munge.h`: 15 expired, 16 rewound, 17 replayed,
//! 18 unauthorized, 8–14 a bad or foreign credential) and still prints the metadata block.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fabric_base::exec::{ExecError, run_bounded, safe_command};

/// The absolute path of the `munge` client on Debian and RHEL.
pub const MUNGE_BIN: &str = "/usr/bin/munge";
/// The absolute path of the `unmunge` client on Debian and RHEL.
pub const UNMUNGE_BIN: &str = "/usr/bin/unmunge";

/// Why a MUNGE operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MungeError {
    /// The program could not be started.
    #[error("cannot run {program}: {source}; install munge or pass its path")]
    Spawn {
        /// The program's path.
        program: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The program did not finish in time.
    #[error("{program} did not answer within {timeout_ms} ms; is munged running and responsive?")]
    Timeout {
        /// The program's path.
        program: String,
        /// The limit that was hit.
        timeout_ms: u128,
    },
    /// `munge` could not encode a credential.
    #[error(
        "munge could not encode a credential (exit {status}): {stderr}; check that munged runs and the socket path is right"
    )]
    Encode {
        /// The exit status.
        status: i32,
        /// What munge printed.
        stderr: String,
    },
    /// `unmunge` rejected the credential (bad key, expired, replayed, ...).
    #[error("credential rejected by MUNGE (munge status {status}: {reason})")]
    Rejected {
        /// The MUNGE error code.
        status: i32,
        /// Its meaning.
        reason: String,
    },
    /// `unmunge` printed something this module cannot parse.
    #[error("cannot parse unmunge output: {0}")]
    Malformed(String),
}

/// A decoded, valid credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The UID of the process that encoded it.
    pub uid: u32,
    /// Its GID.
    pub gid: u32,
    /// The payload it carried.
    pub payload: Vec<u8>,
}

/// Which MUNGE client a [`Munge`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `libmunge.so.2`, loaded at run time (falls back to the programs where it cannot load).
    Library,
    /// The `munge` and `unmunge` programs.
    Programs,
}

impl Backend {
    /// The library where this host has it, else the programs.
    pub fn best() -> Self {
        if super::libmunge::available() {
            Self::Library
        } else {
            Self::Programs
        }
    }
}

/// How to reach MUNGE: the client, the `munged` socket and a time limit per call.
#[derive(Debug, Clone)]
pub struct Munge {
    /// The library or the programs ([`Backend::best`] by default).
    pub backend: Backend,
    /// Path of `munge`.
    pub munge_bin: PathBuf,
    /// Path of `unmunge`.
    pub unmunge_bin: PathBuf,
    /// `munged`'s socket (`-S`); `None` uses the compiled-in default.
    pub socket: Option<PathBuf>,
    /// The limit for one call.
    pub timeout: Duration,
}

impl Default for Munge {
    fn default() -> Self {
        Self {
            backend: Backend::best(),
            munge_bin: PathBuf::from(MUNGE_BIN),
            unmunge_bin: PathBuf::from(UNMUNGE_BIN),
            socket: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// The meaning of a MUNGE error code (`munge.h`, `munge_err_t`).
pub fn status_reason(status: i32) -> &'static str {
    match status {
        1 => "internal error",
        2 => "bad argument",
        3 => "bad length",
        4 => "buffer overflow",
        5 => "out of memory",
        6 => "cannot reach munged's socket",
        7 => "munged timed out",
        8 => "bad credential",
        9 => "bad credential version",
        10 => "bad cipher",
        11 => "bad MAC (a credential from another key?)",
        12 => "bad compression",
        13 => "bad realm",
        14 => "invalid credential (a credential from another key?)",
        15 => "expired credential",
        16 => "rewound credential (clock skew?)",
        17 => "replayed credential",
        18 => "unauthorized credential",
        _ => "unknown munge error",
    }
}

impl Munge {
    /// Uses the given `munged` socket.
    pub fn with_socket(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: Some(socket.into()),
            ..Self::default()
        }
    }

    /// `program [-S SOCKET]` with a scrubbed environment in the job step's process group;
    /// [`run_bounded`] kills it and anything it started at its limit.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = safe_command(program);
        if let Some(socket) = &self.socket {
            cmd.arg("-S").arg(socket);
        }
        cmd
    }

    /// Encodes `payload` into a credential (`munge` reads the payload on stdin).
    pub fn encode(&self, payload: &[u8]) -> Result<String, MungeError> {
        self.encode_for(payload, None)
    }

    /// Encodes `payload` into a credential that only a process of `restrict_uid` can decode
    /// (`munge --restrict-uid`; root included: a credential restricted to another UID does not
    /// decode for root either). `munge -U` is something else: it sets the credential's *own* UID,
    /// which only root may do.
    pub fn encode_for(
        &self,
        payload: &[u8],
        restrict_uid: Option<u32>,
    ) -> Result<String, MungeError> {
        if self.backend == Backend::Library {
            let (socket, payload) = (self.socket.clone(), payload.to_vec());
            let call = move || super::libmunge::encode(socket.as_deref(), &payload, restrict_uid);
            if let Some(done) = self.bounded("munge_encode", call) {
                return done.and_then(|r| {
                    r.map_err(|e| MungeError::Encode {
                        status: e.status,
                        stderr: e.detail,
                    })
                });
            }
        }
        let mut cmd = self.command(&self.munge_bin);
        if let Some(uid) = restrict_uid {
            cmd.arg("--restrict-uid").arg(uid.to_string());
        }
        let out = self.run(&self.munge_bin, cmd, payload)?;
        if out.status != 0 {
            return Err(MungeError::Encode {
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let cred = String::from_utf8(out.stdout)
            .map_err(|_| MungeError::Malformed("munge printed non-UTF-8".into()))?;
        Ok(cred.trim().to_string())
    }

    /// Decodes and validates a credential with `unmunge -N`.
    pub fn decode(&self, credential: &str) -> Result<Decoded, MungeError> {
        if self.backend == Backend::Library {
            let (socket, credential) = (self.socket.clone(), credential.to_owned());
            let call = move || super::libmunge::decode(socket.as_deref(), &credential);
            if let Some(done) = self.bounded("munge_decode", call) {
                return done.and_then(|r| {
                    r.map(|(uid, gid, payload)| Decoded { uid, gid, payload })
                        .map_err(|e| MungeError::Rejected {
                            status: e.status,
                            reason: status_reason(e.status).to_string(),
                        })
                });
            }
        }
        let mut cmd = self.command(&self.unmunge_bin);
        cmd.arg("-N");
        let out = self.run(&self.unmunge_bin, cmd, credential.as_bytes())?;
        if out.status != 0 {
            return Err(MungeError::Rejected {
                status: out.status,
                reason: status_reason(out.status).to_string(),
            });
        }
        parse_unmunge(&out.stdout)
    }

    /// Runs one library call on its own small thread and waits at most [`Munge::timeout`]:
    /// libmunge has no time limit of its own (it retries a busy socket), so a hung munged
    /// leaves that thread behind instead of the caller. `None`: the library is not loaded, or
    /// no thread could be started; the caller uses the programs.
    fn bounded<T: Send + 'static>(
        &self,
        what: &str,
        call: impl FnOnce() -> Option<T> + Send + 'static,
    ) -> Option<Result<T, MungeError>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("libmunge".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                let _ = tx.send(call());
            })
            .ok()?;
        match rx.recv_timeout(self.timeout) {
            Ok(answer) => answer.map(Ok),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Some(Err(MungeError::Timeout {
                program: format!("libmunge {what}"),
                timeout_ms: self.timeout.as_millis(),
            })),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Some(Err(
                MungeError::Malformed(format!("libmunge {what} ended without an answer")),
            )),
        }
    }

    fn run(&self, program: &Path, cmd: Command, input: &[u8]) -> Result<RunOutput, MungeError> {
        let program = program.display().to_string();
        // Both programs read all of stdin before writing anything, so writing it first cannot
        // deadlock; a program that exits early gives EPIPE, reported through its exit status.
        match run_bounded(cmd, Some(input), self.timeout) {
            Ok(done) => Ok(RunOutput {
                status: done.status.code().unwrap_or(-1),
                stdout: done.stdout,
                stderr: done.stderr,
            }),
            Err(ExecError::Timeout { .. }) => Err(MungeError::Timeout {
                program,
                timeout_ms: self.timeout.as_millis(),
            }),
            Err(ExecError::Spawn { source, .. } | ExecError::Wait { source, .. }) => {
                Err(MungeError::Spawn { program, source })
            }
        }
    }
}

struct RunOutput {
    status: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Parses `unmunge -N` output: `KEY: value` lines, a blank line, then the payload.
fn parse_unmunge(out: &[u8]) -> Result<Decoded, MungeError> {
    let split = out
        .windows(2)
        .position(|w| w == b"\n\n")
        .ok_or_else(|| MungeError::Malformed("no blank line after the metadata".into()))?;
    let meta = std::str::from_utf8(&out[..split])
        .map_err(|_| MungeError::Malformed("metadata is not UTF-8".into()))?;
    let payload = out[split + 2..].to_vec();
    let field = |key: &str| -> Result<u32, MungeError> {
        meta.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(str::trim))
            .ok_or_else(|| MungeError::Malformed(format!("no {key} line")))?
            .parse()
            .map_err(|_| MungeError::Malformed(format!("{key} is not a number")))
    };
    Ok(Decoded {
        uid: field("UID")?,
        gid: field("GID")?,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmunge_output_is_split_into_ids_and_payload() {
        let out = b"STATUS:          0\nENCODE_HOST:     127.0.0.1\nUID:             1000\nGID:             100\nLENGTH:          7\n\n{\"a\":1}";
        let d = parse_unmunge(out).unwrap();
        assert_eq!((d.uid, d.gid), (1000, 100));
        assert_eq!(d.payload, b"{\"a\":1}");
    }

    #[test]
    fn unmunge_output_without_uid_is_malformed() {
        let err = parse_unmunge(b"STATUS: 0\n\nx").unwrap_err();
        assert!(err.to_string().contains("no UID line"), "{err}");
    }

    #[test]
    fn a_missing_munge_binary_is_a_spawn_error_naming_it() {
        let m = Munge {
            backend: Backend::Programs,
            munge_bin: PathBuf::from("/nonexistent/munge"),
            ..Munge::default()
        };
        let err = m.encode(b"x").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/munge"), "{err}");
    }
}
