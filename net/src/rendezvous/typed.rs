//! Typed payloads over the rendezvous: each participant sends one serde value `T`, and the leader
//! gets them back decoded, by node name. A payload that does not decode as `T` (a peer of another
//! version, a bug) is neither dropped silently nor fatal: it is listed in
//! [`Met::undecodable`] with the reason, for the caller to log and count.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;

use super::{Gathered, sanitise};

/// A payload that did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// The node that sent it.
    pub node: String,
    /// Why it did not decode.
    pub reason: String,
}

/// What a participant gets out of a typed rendezvous.
#[derive(Debug, Clone, PartialEq)]
pub struct Met<T> {
    /// Whether this participant led (only the leader sees the others' payloads with
    /// [`super::Share::Ack`]).
    pub leader: bool,
    /// Decoded payloads by node name (the leader's own included).
    pub payloads: BTreeMap<String, T>,
    /// Participants that never joined, in rank order.
    pub missing: Vec<String>,
    /// Participants whose payload did not decode as `T`.
    pub undecodable: Vec<Undecodable>,
    /// Connections the leader refused (`peer: reason`).
    pub rejected: Vec<String>,
}

/// Decodes the payloads of `gathered` (rank order, named by `nodes`) as `T`.
pub fn decode<T: DeserializeOwned>(nodes: &[String], gathered: Gathered) -> Met<T> {
    let mut payloads = BTreeMap::new();
    let mut undecodable = Vec::new();
    for (rank, p) in gathered.payloads.into_iter().enumerate() {
        let (Some(p), Some(node)) = (p, nodes.get(rank)) else {
            continue;
        };
        match serde_json::from_value::<T>(p) {
            Ok(v) => {
                payloads.insert(node.clone(), v);
            }
            Err(e) => undecodable.push(Undecodable {
                node: node.clone(),
                // serde quotes what it did not expect: the peer's text.
                reason: sanitise(&e.to_string()),
            }),
        }
    }
    Met {
        leader: gathered.my_rank == 0,
        payloads,
        missing: gathered.missing,
        undecodable,
        rejected: gathered.rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct P {
        n: u32,
    }

    #[test]
    fn a_payload_that_does_not_decode_is_listed_with_its_reason_not_dropped() {
        let nodes: Vec<String> = ["a", "b", "c", "d"].map(String::from).into();
        let g = Gathered {
            my_rank: 0,
            port: 1,
            payloads: vec![
                Some(json!({"n": 1})),
                Some(json!({"n": "two"})),
                None,
                Some(json!({"n": 4})),
            ],
            missing: vec!["c".into()],
            rejected: vec![],
        };
        let met: Met<P> = decode(&nodes, g);
        assert!(met.leader);
        assert_eq!(met.payloads.len(), 2);
        assert_eq!(met.payloads["d"], P { n: 4 });
        assert_eq!(met.missing, vec!["c".to_owned()]);
        assert_eq!(met.undecodable.len(), 1);
        assert_eq!(met.undecodable[0].node, "b");
        assert!(
            met.undecodable[0].reason.contains("invalid type"),
            "{:?}",
            met.undecodable
        );
    }
}
