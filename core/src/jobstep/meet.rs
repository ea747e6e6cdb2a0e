//! The job step's rendezvous seam: meet the job's other nodes at the first one, with a typed
//! payload ([`meet`]), through a raw [`Meet`] (the real one is [`RendezvousMeet`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::JobStep;
use crate::rendezvous::typed::{Met, decode};
use crate::rendezvous::{
    Gathered, MapResolver, Munge, RendezvousConfig, RendezvousError, SystemResolver,
};
use crate::slurm::Slurm;

/// One meeting of a job's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeetRequest {
    /// The job id (binds credentials, picks the port).
    pub job_id: u32,
    /// The job's nodes in rank order; the first leads.
    pub nodes: Vec<String>,
    /// This node's rank.
    pub rank: usize,
    /// The leader's wait for joins (followers wait for the leader's answer a little longer).
    pub timeout: Duration,
    /// No wait runs past this.
    pub deadline: Instant,
}

/// Meets the job's other nodes with a JSON payload.
pub trait Meet {
    /// Gathers every node's payload at rank 0 (the leader); followers get an acknowledgement.
    fn gather(&self, req: &MeetRequest, payload: Value) -> Result<Gathered, RendezvousError>;
}

/// The real rendezvous: MUNGE-authenticated TCP at the first node, node addresses from
/// `scontrol show node` (falling back to name resolution).
pub struct RendezvousMeet<'a> {
    /// For node addresses.
    pub slurm: &'a dyn Slurm,
    /// MUNGE's socket, when not the default.
    pub munge_socket: Option<PathBuf>,
    /// Where to say that addresses fell back to names.
    pub relay: &'a dyn super::Relay,
}

impl std::fmt::Debug for RendezvousMeet<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RendezvousMeet")
            .field("munge_socket", &self.munge_socket)
            .finish_non_exhaustive()
    }
}

impl Meet for RendezvousMeet<'_> {
    fn gather(&self, req: &MeetRequest, payload: Value) -> Result<Gathered, RendezvousError> {
        let mut map = BTreeMap::new();
        match self.slurm.node_addrs(&req.nodes) {
            Ok(pairs) => {
                for (n, a) in pairs {
                    if let Ok(ip) = a.parse() {
                        map.insert(n, ip);
                    }
                }
            }
            Err(e) => self
                .relay
                .line(&format!("no NodeAddr from scontrol ({e}); resolving names")),
        }
        let resolver = MapResolver {
            map,
            fallback: Some(SystemResolver),
        };
        let munge = self
            .munge_socket
            .clone()
            .map(Munge::with_socket)
            .unwrap_or_default();
        // Name resolution is part of the rendezvous's time, not added before it.
        let start = Instant::now();
        let by = (start + req.timeout).min(req.deadline);
        let mut cfg = RendezvousConfig::new_within(
            req.nodes.clone(),
            &resolver,
            u64::from(req.job_id),
            munge,
            vec![0],
            by,
        )?;
        cfg.timeout = by.saturating_duration_since(Instant::now());
        cfg.hard_deadline = Some(req.deadline);
        crate::rendezvous::gather(&cfg, req.rank, &payload)
    }
}

/// Meets the job's other nodes with `payload`, bounded by the step's deadline.
///
/// Returns `Some` on the leader (every decoded payload, its own included; missing nodes; nodes
/// whose payload did not decode, each logged) and `None` on followers or when the rendezvous
/// failed (logged). A one-node job meets itself.
pub fn meet<T: Serialize + DeserializeOwned>(step: &JobStep<'_>, payload: T) -> Option<Met<T>> {
    match deliver(step, payload) {
        Delivery::Leader(met) => Some(met),
        Delivery::Acknowledged | Delivery::Failed => None,
    }
}

/// What became of this node's payload at the rendezvous.
#[derive(Debug)]
pub enum Delivery<T> {
    /// This node leads: every node's payload (see [`meet`]).
    Leader(Met<T>),
    /// A follower whose payload the leader acknowledged.
    Acknowledged,
    /// The rendezvous failed (logged): the leader may not have it.
    Failed,
}

/// [`meet`], saying whether a follower's payload reached the leader (the epilog keeps a node's
/// records until then).
pub fn deliver<T: Serialize + DeserializeOwned>(step: &JobStep<'_>, payload: T) -> Delivery<T> {
    let setup = step.setup;
    let Some(rank) = setup.nodes.iter().position(|n| n == step.node()) else {
        return Delivery::Failed;
    };
    if setup.nodes.len() == 1 {
        return Delivery::Leader(Met {
            leader: true,
            payloads: [(step.node().to_owned(), payload)].into(),
            missing: vec![],
            undecodable: vec![],
            rejected: vec![],
        });
    }
    let _span = tracing::info_span!("rendezvous", rank).entered();
    // The leader waits for joins until four fifths of `timeout=` (at least half a second), and
    // never past the deadline; what remains is the tag write's.
    let timeout = setup
        .plugin
        .timeout
        .mul_f64(0.8)
        .saturating_sub(step.deadline().elapsed())
        .max(Duration::from_millis(500));
    let value = match serde_json::to_value(&payload) {
        Ok(v) => v,
        Err(e) => {
            step.say(&format!("rendezvous not possible: payload: {e}"));
            return Delivery::Failed;
        }
    };
    let req = MeetRequest {
        job_id: setup.inv.job_id,
        nodes: setup.nodes.clone(),
        rank,
        timeout: step.deadline().limit(timeout),
        deadline: step.deadline().at(),
    };
    match step.seams.meet.gather(&req, value) {
        Ok(g) if g.my_rank == 0 => {
            let met: Met<T> = decode(&setup.nodes, g);
            for r in &met.rejected {
                step.say(&format!("rendezvous refused a connection: {r}"));
            }
            for u in &met.undecodable {
                step.say(&format!(
                    "rendezvous: the payload of {} could not be read ({}); counted as missing",
                    u.node, u.reason
                ));
            }
            step.say_phase(
                "rendezvous",
                &format!(
                    "rendezvous: {} of {} nodes answered, {} missing, {} unreadable",
                    met.payloads.len(),
                    setup.nodes.len(),
                    met.missing.len(),
                    met.undecodable.len()
                ),
            );
            Delivery::Leader(met)
        }
        Ok(_) => Delivery::Acknowledged,
        Err(e) => {
            step.say(&format!("rendezvous failed: {e}"));
            Delivery::Failed
        }
    }
}
