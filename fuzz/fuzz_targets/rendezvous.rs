//! What a peer sends the rendezvous: hello, join, reject and done messages, the claims inside
//! MUNGE credentials, and the job step's typed payloads gathered at the leader.
#![no_main]
use fabric_core::jobstep::payload::{EpilogPayload, PrologPayload};
use fabric_net::rendezvous::{Gathered, fuzzing, typed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    fuzzing::decode_peer_bytes(bytes);
    if let Ok(g) = serde_json::from_slice::<Gathered>(bytes) {
        let nodes: Vec<String> = (0..g.payloads.len().min(64)).map(|i| format!("n{i}")).collect();
        let _ = typed::decode::<PrologPayload>(&nodes, g.clone());
        let _ = typed::decode::<EpilogPayload>(&nodes, g);
    }
});
