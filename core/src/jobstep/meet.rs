//! The job step's rendezvous seam: meet the job's other nodes at the first one, with a typed
//! payload ([`meet`]), through a raw [`Meet`] (the real one is [`RendezvousMeet`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::JobStep;
use crate::slurm::Slurm;
use fabric_net::rendezvous::typed::{Met, decode};
use fabric_net::rendezvous::{
    Gathered, MapResolver, Munge, RendezvousConfig, RendezvousError, Resolve, SystemResolver,
};

pub use fabric_net::rendezvous::meeting::{Meeting, meeting_id};

/// One meeting of a job's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeetRequest {
    /// The job id (with the meeting, it binds credentials and picks the port).
    pub job_id: u32,
    /// Which meeting: the prolog's, the epilog's or a step end's.
    pub meeting: Meeting,
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

    /// The rendezvous `req` would run, its addresses resolved now, for a caller that meets
    /// again and again without resolving each time (the watch's straggler hops). A seam with
    /// no real rendezvous (the tests' fakes) has none.
    fn config(&self, _req: &MeetRequest) -> Result<RendezvousConfig, RendezvousError> {
        Err(RendezvousError::Config(
            "this meeting seam has no rendezvous to configure".into(),
        ))
    }
}

/// The real rendezvous: MUNGE-authenticated TCP at the first node.
///
/// Every node's address is looked up locally first: `hosts_file=`, then the system resolver
/// ([`leader_addr`] for the first node), and only the names neither knows go to slurmctld, in
/// one `scontrol show node` call per node (the documented fallback, said in the log). With the
/// names resolvable, a passing prolog calls slurmctld on the leader only, to read and write the
/// tag, whatever the job's size.
pub struct RendezvousMeet<'a> {
    /// For the leader's `NodeAddr` when nothing else knows it.
    pub slurm: &'a dyn Slurm,
    /// The system resolver (`getaddrinfo`); a map in tests.
    pub resolver: &'a dyn Resolve,
    /// `hosts_file=`: node addresses the node reads before asking the resolver.
    pub hosts_file: Option<PathBuf>,
    /// MUNGE's socket, when not the default.
    pub munge_socket: Option<PathBuf>,
    /// The rendezvous window (`port_base=`).
    pub window: fabric_net::rendezvous::Window,
    /// Where to say that the leader's address came from slurmctld.
    pub relay: &'a dyn crate::relay::Relay,
}

impl std::fmt::Debug for RendezvousMeet<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RendezvousMeet")
            .field("hosts_file", &self.hosts_file)
            .field("munge_socket", &self.munge_socket)
            .finish_non_exhaustive()
    }
}

/// The addresses of a `hosts_file=`: lines in `/etc/hosts` form (`address name [alias...]`) or
/// `name address` (the form of `collective_hosts=`); `#` starts a comment; the first address a
/// name gets is kept, as the resolver does; lines without an address are skipped.
pub fn parse_hosts(text: &str) -> BTreeMap<String, IpAddr> {
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().collect();
        let (ip, names): (IpAddr, &[&str]) = match words.as_slice() {
            [first, rest @ ..] if !rest.is_empty() => match first.parse() {
                Ok(ip) => (ip, rest),
                Err(_) => match rest[0].parse() {
                    Ok(ip) => (ip, &words[..1]),
                    Err(_) => continue,
                },
            },
            _ => continue,
        };
        for n in names {
            map.entry((*n).to_owned()).or_insert(ip);
        }
    }
    map
}

/// The leader's address: `hosts` (from `hosts_file=`), then `resolver`, then slurmctld's
/// `NodeAddr` (`scontrol show node -o LEADER`, the only Slurm call, made when nothing local
/// knows the name; said on `relay`).
pub fn leader_addr(
    leader: &str,
    hosts: &BTreeMap<String, IpAddr>,
    resolver: &dyn Resolve,
    slurm: &dyn Slurm,
    relay: &dyn crate::relay::Relay,
) -> Result<IpAddr, RendezvousError> {
    if let Some(ip) = hosts.get(leader) {
        return Ok(*ip);
    }
    let local = match resolver.resolve(leader) {
        Ok(ip) => return Ok(ip),
        Err(e) => e,
    };
    relay.line(&format!(
        "the first node {leader} does not resolve here ({local}); asking slurmctld for its \
         NodeAddr (one call per node per job: name the nodes in hosts_file= or the resolver)"
    ));
    let from_slurm = slurm
        .node_addrs(&[leader.to_owned()])
        .map_err(|e| e.to_string())
        .and_then(|pairs| {
            pairs
                .into_iter()
                .find(|(n, _)| n == leader)
                .ok_or_else(|| "scontrol does not list it".to_owned())
                .and_then(|(_, a)| {
                    a.parse::<IpAddr>()
                        .map_err(|_| format!("its NodeAddr {a:?} is not an address"))
                })
        });
    from_slurm.map_err(|slurm_said| RendezvousError::Resolve {
        node: leader.to_owned(),
        reason: format!("{local}; slurmctld: {slurm_said}"),
    })
}

impl Meet for RendezvousMeet<'_> {
    fn gather(&self, req: &MeetRequest, payload: Value) -> Result<Gathered, RendezvousError> {
        let cfg = self.config(req)?;
        fabric_net::rendezvous::gather(&cfg, req.rank, &payload)
    }

    fn config(&self, req: &MeetRequest) -> Result<RendezvousConfig, RendezvousError> {
        let hosts = match &self.hosts_file {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => parse_hosts(&text),
                Err(e) => {
                    self.relay.line(&format!(
                        "cannot read hosts_file={} ({e}); resolving names",
                        path.display()
                    ));
                    BTreeMap::new()
                }
            },
            None => BTreeMap::new(),
        };
        let leader = req
            .nodes
            .first()
            .ok_or_else(|| RendezvousError::Config("the participant list is empty".into()))?;
        let leader_ip = leader_addr(leader, &hosts, self.resolver, self.slurm, self.relay)?;
        // The leader admits connections only from the job's nodes' addresses, and a follower
        // connects from its own: every name is resolved, locally first; the names nothing
        // local knows go to slurmctld in one call (the documented fallback, logged).
        let mut map: BTreeMap<String, IpAddr> = BTreeMap::new();
        let mut unknown = Vec::new();
        for n in &req.nodes {
            let ip = if n == leader {
                Some(leader_ip)
            } else {
                hosts
                    .get(n)
                    .copied()
                    .or_else(|| self.resolver.resolve(n).ok())
            };
            match ip {
                Some(ip) => {
                    map.insert(n.clone(), ip);
                }
                None => unknown.push(n.clone()),
            }
        }
        if !unknown.is_empty() {
            self.relay.line(&format!(
                "{} of the job's nodes do not resolve here (first: {}); asking slurmctld for \
                 their NodeAddr (name the nodes in hosts_file= or the resolver)",
                unknown.len(),
                unknown[0]
            ));
            if let Ok(pairs) = self.slurm.node_addrs(&unknown) {
                for (n, a) in pairs {
                    if let Ok(ip) = a.parse() {
                        map.insert(n, ip);
                    }
                }
            }
        }
        let resolver = MapResolver::<SystemResolver> {
            map,
            fallback: None,
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
            meeting_id(req.job_id, req.meeting),
            munge,
            vec![0],
            by,
        )?;
        cfg.timeout = by.saturating_duration_since(Instant::now());
        cfg.hard_deadline = Some(req.deadline);
        cfg.window = self.window;
        Ok(cfg)
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
        Delivery::Acknowledged | Delivery::Failed(_) => None,
    }
}

/// What became of this node's payload at the rendezvous.
#[derive(Debug)]
pub enum Delivery<T> {
    /// This node leads: every node's payload (see [`meet`]).
    Leader(Met<T>),
    /// A follower whose payload the leader acknowledged.
    Acknowledged,
    /// The rendezvous failed (logged), and why: the leader may not have it.
    Failed(String),
}

/// [`meet`], saying whether a follower's payload reached the leader (the epilog keeps a node's
/// records until then). The meeting is this invocation's ([`Meeting::of`]: the job's prolog or
/// epilog, or a step's end), among `setup.nodes` (for a step end, the step's nodes there).
pub fn deliver<T: Serialize + DeserializeOwned>(step: &JobStep<'_>, payload: T) -> Delivery<T> {
    let setup = step.setup;
    let Some(meeting) = Meeting::of(&setup.inv) else {
        let why = "a step end without --step-id";
        step.say(&format!("rendezvous not possible: {why}"));
        return Delivery::Failed(why.into());
    };
    let Some(rank) = setup.nodes.iter().position(|n| n == step.node()) else {
        return Delivery::Failed(format!("{} is not one of the job's nodes", step.node()));
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
    // The leader waits for joins until its share of `timeout=` (`Budget::rendezvous`), and
    // never past the deadline; what remains is the tag write's.
    let timeout = setup.budget().rendezvous(step.deadline().elapsed());
    let value = match serde_json::to_value(&payload) {
        Ok(v) => v,
        Err(e) => {
            step.say(&format!("rendezvous not possible: payload: {e}"));
            return Delivery::Failed(format!("payload: {e}"));
        }
    };
    let req = MeetRequest {
        job_id: setup.inv.job_id,
        meeting,
        nodes: setup.nodes.clone(),
        rank,
        timeout: step.deadline().limit(timeout),
        deadline: step.deadline().at(),
    };
    match step.seams.meet.gather(&req, value) {
        Ok(g) if g.my_rank == 0 => {
            let met: Met<T> = decode(&setup.nodes, g);
            for r in &met.rejected {
                step.say(&format!("rendezvous turned away {r}"));
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
            Delivery::Failed(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Call, FakeSlurm, Lines};
    use fabric_net::rendezvous::ResolveError;

    /// A resolver that knows only these names.
    struct Known(&'static [(&'static str, &'static str)]);

    impl Resolve for Known {
        fn resolve(&self, node: &str) -> Result<IpAddr, ResolveError> {
            self.0
                .iter()
                .find(|(n, _)| *n == node)
                .map(|(_, a)| a.parse().unwrap())
                .ok_or_else(|| std::io::Error::other("Name or service not known").into())
        }
    }

    #[test]
    fn a_hosts_file_reads_etc_hosts_lines_and_node_address_lines() {
        let map = parse_hosts(
            "# testbed\n127.0.0.1 n1 n1.cluster # the first\nn2 10.0.0.2\n\
             ::1 n3\n10.0.0.9 n1\njunk\nn4 not-an-address\n",
        );
        assert_eq!(map["n1"], "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(map["n1.cluster"], "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(map["n2"], "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(map["n3"], "::1".parse::<IpAddr>().unwrap());
        assert!(!map.contains_key("n4") && !map.contains_key("junk"));
    }

    #[test]
    fn the_leader_named_in_the_hosts_file_costs_no_resolver_and_no_slurm_call() {
        let slurm = FakeSlurm::with_nodes(&["n1"]);
        let hosts = parse_hosts("10.1.0.1 n1\n");
        let lines = Lines::default();
        let ip = leader_addr("n1", &hosts, &Known(&[("n1", "10.9.9.9")]), &slurm, &lines).unwrap();
        assert_eq!(ip, "10.1.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(slurm.calls(), vec![]);
    }

    #[test]
    fn a_leader_the_resolver_knows_costs_no_slurm_call() {
        let slurm = FakeSlurm::with_nodes(&["n1"]);
        let lines = Lines::default();
        let ip = leader_addr(
            "n1",
            &BTreeMap::new(),
            &Known(&[("n1", "10.9.9.9")]),
            &slurm,
            &lines,
        )
        .unwrap();
        assert_eq!(ip, "10.9.9.9".parse::<IpAddr>().unwrap());
        assert_eq!(slurm.calls(), vec![]);
        assert_eq!(lines.text(), "");
    }

    #[test]
    fn only_a_leader_nothing_local_knows_is_asked_of_slurmctld_and_the_log_says_so() {
        let slurm = FakeSlurm::with_nodes(&["n1"]);
        let lines = Lines::default();
        let ip = leader_addr("n1", &BTreeMap::new(), &Known(&[]), &slurm, &lines).unwrap();
        assert_eq!(ip, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(slurm.calls(), vec![Call::NodeAddrs]);
        assert!(
            lines.has("asking slurmctld for its NodeAddr"),
            "{}",
            lines.text()
        );
    }

    #[test]
    fn a_leader_nobody_knows_is_a_resolve_error_naming_both_answers() {
        let slurm = FakeSlurm::with_nodes(&["n1"]).failing("node_addrs");
        let lines = Lines::default();
        let err = leader_addr("n1", &BTreeMap::new(), &Known(&[]), &slurm, &lines).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("Name or service not known") && text.contains("slurmctld"),
            "{text}"
        );
    }
}
