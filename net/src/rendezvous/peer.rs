//! What went wrong on one peer connection of the rendezvous, typed ([`PeerError`]). Its text
//! goes where the text of earlier releases went, unchanged: into the leader's rejection tally,
//! a reject sent to the peer (sanitised), or a follower's "last try" in
//! [`RendezvousError::NoLeader`](super::RendezvousError::NoLeader), whose own message says what
//! to do.

use super::meeting::MeetingName;
use super::{MungeError, PROTOCOL_VERSION, ReadError, RendezvousError};

/// Why a connection did not carry the rendezvous through (either side's view).
#[derive(Debug, thiserror::Error)]
pub(super) enum PeerError {
    /// A line could not be read.
    #[error("{0}")]
    Read(ReadError),
    /// A line is not a message (the text already sanitised).
    #[error("{0}")]
    Malformed(String),
    /// Our message did not serialise.
    #[error("{0}")]
    Encode(serde_json::Error),
    /// The peer did not take our message before the deadline.
    #[error("the peer did not take our message in time")]
    SendTimeout,
    /// The socket refused a setting.
    #[error("{0}")]
    Socket(std::io::Error),
    /// The peer closed the connection while we sent.
    #[error("the peer closed the connection")]
    PeerClosed,
    /// Sending failed.
    #[error("send: {0}")]
    Send(std::io::Error),
    /// The listener sent a reject (its reason, sanitised).
    #[error("turned us away: {0}")]
    TurnedAway(String),
    /// The listener's first message is not a hello.
    #[error("did not start with a hello")]
    NoHello,
    /// The listener speaks another protocol version.
    #[error("speaks protocol version {0}")]
    HelloVersion(u32),
    /// The listener leads another rendezvous.
    #[error("is the leader of {}", MeetingName(*.0))]
    OtherLeader(u64),
    /// The hello's credential did not decode.
    #[error("its hello credential: {0}")]
    HelloCredential(MungeError),
    /// The hello is signed by a UID not allowed.
    #[error("its hello is signed by uid {0}, not an allowed one")]
    HelloUid(u32),
    /// The hello's credential holds no hello.
    #[error("its hello credential is not a hello: {0}")]
    NotAHello(serde_json::Error),
    /// The hello's credential is for another job, port or connection.
    #[error("its hello credential is not for this job, port and connection")]
    HelloMismatch,
    /// No want arrived within the connection budget.
    #[error(
        "asked for nothing within {0} ms (a follower of protocol 2 or older waits for a hello \
         instead: run one fabric-check release on every node)"
    )]
    NoWant(u128),
    /// The follower speaks another protocol version.
    #[error(
        "speaks protocol version {0}, this leader {PROTOCOL_VERSION}: run one fabric-check \
         release on every node"
    )]
    WantVersion(u32),
    /// The follower's first message is not a want.
    #[error("did not start with a want")]
    NotAWant,
    /// No randomness for the challenge.
    #[error("{0}")]
    Random(Box<RendezvousError>),
    /// Our hello could not be signed.
    #[error("cannot sign our hello: {0}")]
    Sign(MungeError),
    /// The follower sent something other than a join.
    #[error("sent something other than a join")]
    NotAJoin,
    /// The join's credential did not decode.
    #[error("{0}")]
    JoinCredential(MungeError),
    /// The join is signed by a UID not allowed.
    #[error("credential of uid {0} is not allowed")]
    JoinUid(u32),
    /// The join's credential holds no join.
    #[error("credential payload is not a join: {0}")]
    NotAJoinClaim(serde_json::Error),
    /// The join's credential is for another purpose.
    #[error("credential is for {0:?}")]
    JoinPurpose(String),
    /// The join's credential is for another rendezvous.
    #[error("credential is for {}, not {}", MeetingName(*.got), MeetingName(*.want))]
    JoinOtherJob {
        /// The rendezvous it names.
        got: u64,
        /// Ours.
        want: u64,
    },
    /// The join does not answer this connection's challenge.
    #[error("credential does not answer this connection's challenge (replayed?)")]
    Replayed,
    /// The join names a node that is not the participant of its rank.
    #[error("node {node} is not participant rank {rank}")]
    NotParticipant {
        /// The node it names.
        node: String,
        /// The rank it claims.
        rank: usize,
    },
}
