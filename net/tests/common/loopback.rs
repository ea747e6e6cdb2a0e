//! A rendezvous of virtual nodes `n1..nN` that all resolve to 127.0.0.1, signed by a private
//! munged, with this user as the job's owner: the set-up of every test that meets for real.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use fabric_net::rendezvous::{MapResolver, Munge, RendezvousConfig, SystemResolver, Window};

use super::munged::Munged;

/// How many ports a test's window has: every meeting of a test tries all of them, in order
/// (a window of neighbouring ports, whatever the id: `Window::new(first, PORTS, PORTS)`).
pub const PORTS: u16 = 4;

/// The window of [`PORTS`] neighbouring ports from `first_port` that every meeting of a test
/// tries in the same order.
pub fn window(first_port: u16) -> Window {
    Window::new(first_port, PORTS, PORTS).expect("a test window fits")
}

/// The configuration of `nodes` loopback nodes meeting for `id` (a job or a step's meeting),
/// whose first port is `first_port` itself (each test keeps to its own window of ports), with
/// the leader's wait `timeout`.
pub fn config(
    munged: &Munged,
    nodes: usize,
    id: u64,
    first_port: u16,
    timeout: Duration,
) -> RendezvousConfig {
    let names: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
    let map = MapResolver::<SystemResolver> {
        map: names
            .iter()
            .map(|n| (n.clone(), IpAddr::V4(Ipv4Addr::LOCALHOST)))
            .collect::<BTreeMap<_, _>>(),
        fallback: None,
    };
    let me = nix::unistd::getuid().as_raw();
    let mut cfg = RendezvousConfig::new(
        names,
        &map,
        id,
        Munge::with_socket(&munged.socket),
        vec![me],
    )
    .unwrap();
    cfg.window = window(first_port);
    cfg.timeout = timeout;
    cfg
}
