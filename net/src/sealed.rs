//! Sealed datagrams: small messages a job's nodes send its first node between two
//! rendezvous, authenticated by a key the rendezvous handed out (the straggler figures of the
//! in-job watch, one datagram a node a hop).
//!
//! # Why not a rendezvous a message
//!
//! A rendezvous costs the first node two MUNGE calls a follower (sign a hello, check a join).
//! At one figure a node every five seconds that was most of the first node's cost, and it grows
//! with the job's size (measured with `scripts/bench-stragglers`, docs/benchmarks.md). So the
//! rendezvous runs once in a while ([`SessionKey`] travels in it, inside the leader's signed
//! answer, a MUNGE credential only root can decode), and between two of them each node seals its
//! message with the key: one `sendto` on a follower, one `recvfrom` and one HMAC on the first
//! node.
//!
//! # The datagram
//!
//! `HMAC-SHA256(key, DOMAIN ‖ body)` (32 bytes) followed by the body (the caller's JSON, at most
//! [`MAX_BODY_BYTES`]). The body names the job, the sender's rank and the hop, so a datagram
//! cannot be replayed into another job, passed off as another node's or counted at another hop
//! (the caller checks those and takes one per rank a hop). A datagram whose tag does not match is
//! refused before its body is parsed: a user on a node can send the port anything, and gets
//! nothing counted. What a user can do is flood the port so that real datagrams are dropped by
//! the kernel's buffer: the figures of that hop are then missing, which the verdict treats as a
//! silent node (never a straggler).
//!
//! The key's secrecy rests on MUNGE's: the leader's answer is a credential encoded with
//! `--restrict-uid 0` (only root can decode it) and encrypted with the cluster's MUNGE key under
//! munged's cipher (AES by default; a site that runs munged with `--cipher=none` sends it
//! readable, and someone on the wire could then forge figures: a false straggler name, which
//! never drains).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The bytes of a key.
pub const KEY_BYTES: usize = 32;
/// The bytes of a datagram's tag.
pub const TAG_BYTES: usize = 32;
/// The largest body a datagram carries.
pub const MAX_BODY_BYTES: usize = 1024;
/// The largest datagram ([`TAG_BYTES`] + [`MAX_BODY_BYTES`]).
pub const MAX_DATAGRAM_BYTES: usize = TAG_BYTES + MAX_BODY_BYTES;

/// What every tag covers first, so that a key can never authenticate another protocol's bytes.
const DOMAIN: &[u8] = b"fabric-check/sealed/v1\0";

/// A job's session key: random, held in memory only, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKey([u8; KEY_BYTES]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

/// Why a key or a datagram was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The OS gave no randomness.
    #[error("no randomness from the OS for a session key: {0}")]
    Random(String),
    /// A key's text is not 64 hex digits.
    #[error("a session key is 64 hex digits; got {0} characters that are not")]
    KeyText(usize),
    /// The body is too long to seal.
    #[error("a sealed body has at most {MAX_BODY_BYTES} bytes; this one has {0}")]
    TooLong(usize),
    /// The datagram is shorter than a tag, or longer than any datagram.
    #[error("a datagram of {0} bytes is no sealed message")]
    Size(usize),
    /// The tag does not match: another key, or bytes changed on the way.
    #[error("the datagram's tag does not match the job's key")]
    Tag,
}

impl SessionKey {
    /// A fresh random key.
    pub fn random() -> Result<Self, SealError> {
        let mut k = [0u8; KEY_BYTES];
        getrandom::fill(&mut k).map_err(|e| SealError::Random(e.to_string()))?;
        Ok(Self(k))
    }

    /// The key as hex (for the rendezvous's signed answer only).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A key from [`SessionKey::to_hex`]'s text.
    pub fn from_hex(text: &str) -> Result<Self, SealError> {
        let bytes = text.as_bytes();
        if bytes.len() != 2 * KEY_BYTES || !bytes.iter().all(u8::is_ascii_hexdigit) {
            return Err(SealError::KeyText(text.len()));
        }
        let mut k = [0u8; KEY_BYTES];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            // Two ASCII hex digits: both parses succeed (checked above).
            let s = std::str::from_utf8(pair).map_err(|_| SealError::KeyText(text.len()))?;
            k[i] = u8::from_str_radix(s, 16).map_err(|_| SealError::KeyText(text.len()))?;
        }
        Ok(Self(k))
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        m.update(DOMAIN);
        m
    }

    /// The datagram for `body`: its tag, then the body.
    pub fn seal(&self, body: &[u8]) -> Result<Vec<u8>, SealError> {
        if body.len() > MAX_BODY_BYTES {
            return Err(SealError::TooLong(body.len()));
        }
        let mut m = self.mac();
        m.update(body);
        let mut out = Vec::with_capacity(TAG_BYTES + body.len());
        out.extend_from_slice(&m.finalize().into_bytes());
        out.extend_from_slice(body);
        Ok(out)
    }

    /// The body of a datagram sealed with this key (the tag compared in constant time).
    pub fn open<'a>(&self, datagram: &'a [u8]) -> Result<&'a [u8], SealError> {
        if datagram.len() < TAG_BYTES || datagram.len() > MAX_DATAGRAM_BYTES {
            return Err(SealError::Size(datagram.len()));
        }
        let (tag, body) = datagram.split_at(TAG_BYTES);
        let mut m = self.mac();
        m.update(body);
        m.verify_slice(tag).map_err(|_| SealError::Tag)?;
        Ok(body)
    }
}

/// A UDP socket on the first of `ports` that binds (all addresses of `like`'s family), and its
/// port (port 0: the one the kernel chose); a port something else holds is skipped, as the
/// rendezvous's listener skips it.
pub fn bind_first(like: IpAddr, ports: &[u16]) -> io::Result<(UdpSocket, u16)> {
    let any = crate::rendezvous::unspecified_like(like);
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no port to bind");
    for p in ports {
        match UdpSocket::bind(SocketAddr::new(any, *p)) {
            Ok(s) => {
                let port = s.local_addr()?.port();
                return Ok((s, port));
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A UDP socket to send from (an ephemeral port of `like`'s family).
pub fn sender(like: IpAddr) -> io::Result<UdpSocket> {
    bind_first(like, &[0]).map(|(s, _)| s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_sealed_body_opens_with_its_key_and_with_no_other() {
        let k = SessionKey::random().unwrap();
        let d = k.seal(b"{\"hop\":7}").unwrap();
        assert_eq!(k.open(&d).unwrap(), b"{\"hop\":7}");
        let other = SessionKey::random().unwrap();
        assert_eq!(other.open(&d), Err(SealError::Tag));
    }

    #[test]
    fn a_changed_byte_a_cut_datagram_or_a_bare_body_is_refused() {
        let k = SessionKey::random().unwrap();
        let d = k.seal(b"{\"hop\":7,\"rank\":2}").unwrap();
        for i in [0, TAG_BYTES - 1, TAG_BYTES, d.len() - 1] {
            let mut bad = d.clone();
            bad[i] ^= 1;
            assert_eq!(k.open(&bad), Err(SealError::Tag), "byte {i}");
        }
        assert_eq!(k.open(&d[..d.len() - 1]), Err(SealError::Tag));
        assert_eq!(k.open(&d[..10]), Err(SealError::Size(10)));
        assert_eq!(
            k.open(b"{\"hop\":7,\"rank\":2}"),
            Err(SealError::Size(18)),
            "a body without a tag"
        );
    }

    #[test]
    fn a_key_round_trips_as_hex_and_bad_text_is_named() {
        let k = SessionKey::random().unwrap();
        assert_eq!(SessionKey::from_hex(&k.to_hex()).unwrap(), k);
        assert_eq!(SessionKey::from_hex("abc"), Err(SealError::KeyText(3)));
        assert!(SessionKey::from_hex(&"zz".repeat(32)).is_err());
        assert_eq!(format!("{k:?}"), "SessionKey(..)", "a key is never printed");
    }

    #[test]
    fn a_body_longer_than_a_datagram_holds_is_not_sealed() {
        let k = SessionKey::random().unwrap();
        let body = vec![b'x'; MAX_BODY_BYTES + 1];
        assert_eq!(k.seal(&body), Err(SealError::TooLong(MAX_BODY_BYTES + 1)));
        assert!(k.seal(&body[..MAX_BODY_BYTES]).is_ok());
    }

    #[test]
    fn a_port_something_else_holds_is_skipped() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (held, _) = bind_first(lo, &[0]).unwrap();
        let taken = held.local_addr().unwrap().port();
        let (s, got) = bind_first(lo, &[taken, 0]).unwrap();
        assert_ne!(got, taken, "the held port was skipped for the next");
        assert_eq!(s.local_addr().unwrap().port(), got);
        assert!(bind_first(lo, &[]).is_err());
    }
}
