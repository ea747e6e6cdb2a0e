//! The ends of two steps of one job, its prolog and its epilog meet at once on the same first
//! node, each apart, over the real rendezvous and a private munged: each is a meeting of its own
//! (`fabric_net::rendezvous::meeting::meeting_id`), so one meeting's payloads never reach another's
//! leader, whichever port each leader got.

// The private munged helper lives with the rendezvous tests in fabric-net.
#[path = "../../net/tests/common/mod.rs"]
mod common;

use std::thread;
use std::time::Duration;

use common::munged::Munged;
use fabric_net::rendezvous::meeting::{Meeting, meeting_id};
use fabric_net::rendezvous::{RendezvousConfig, gather};
use serde_json::json;

/// Both meetings start at the same port: the second leader takes the next one.
fn config(munged: &Munged, meeting: u64, base: u16) -> RendezvousConfig {
    common::loopback::config(munged, 2, meeting, base, Duration::from_secs(5))
}

#[test]
fn two_steps_of_one_job_ending_together_meet_apart_and_apart_from_the_jobs_prolog_and_epilog() {
    let Some(m) = Munged::start() else { return };
    let job = 4242;
    let meetings = [
        meeting_id(job, Meeting::StepEnd(0)),
        meeting_id(job, Meeting::StepEnd(1)),
        meeting_id(job, Meeting::Prolog),
        meeting_id(job, Meeting::Epilog),
    ];
    assert_eq!(meetings[2], u64::from(job), "the prolog's id is the job's");
    // Free now, none in the ephemeral range, and this run's alone (see common::ports).
    let first_port = common::ports::free_window(common::loopback::PORTS);
    let handles: Vec<_> = meetings
        .iter()
        .flat_map(|&id| {
            let cfg = config(&m, id, first_port);
            (0..2).map(move |rank| {
                let cfg = cfg.clone();
                thread::spawn(move || {
                    (
                        id,
                        rank,
                        gather(&cfg, rank, &json!({"meeting": id, "rank": rank})),
                    )
                })
            })
        })
        .collect();
    for h in handles {
        let (id, rank, got) = h.join().unwrap();
        let g = got.unwrap_or_else(|e| panic!("meeting {id} rank {rank}: {e}"));
        if rank == 0 {
            assert!(g.missing.is_empty(), "meeting {id}: {g:?}");
            for p in g.payloads.iter().flatten() {
                assert_eq!(
                    p["meeting"],
                    json!(id),
                    "a payload of another meeting: {g:?}"
                );
            }
        }
    }
}
