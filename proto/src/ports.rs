//! The TCP ports of the job step's cross-node phases: the prolog's verdict rendezvous (also the
//! epilog's and each step end's), the prolog's collective and the step gate. Every place that
//! listens on one or looks for one asks [`Window::candidates`]; nothing else computes a port.
//!
//! # The layout
//!
//! One plugin argument, `port_base=` (default [`RENDEZVOUS_BASE`]), places three windows of
//! [`WINDOW_PORTS`] ports one after the other ([`Bases`]): the rendezvous's, the collective's,
//! the step gate's. A meeting (its rendezvous id: a job id, or the job id of an epilog or a step
//! end, see `fabric_net::rendezvous::meeting`) tries [`CANDIDATES`] ports of its window, spread
//! through it [`STRIDE`] ports apart: `first + id % STRIDE + i * STRIDE`. So
//!
//! - two ids less than [`STRIDE`] apart (consecutive jobs, every job beside it) never share a
//!   candidate: their sets are disjoint residue classes of the window;
//! - one port held by something else (a fixed service port inside the window) costs a meeting one
//!   candidate of its eight, never the window;
//! - a stranger's connections cannot take every candidate of a job: the defaults lie outside
//!   Linux's ephemeral range ([`LINUX_EPHEMERAL`]), from which the kernel picks the local port of
//!   every outgoing connection.
//!
//! The windows used to be `47000 + job_id % 1000` and the next three ports: inside the
//! ephemeral range, and consecutive jobs shared three of their four ports (issue 41: a leader
//! found all four taken, and its job was never tagged). `docs/operations.md` ("Ports") says why
//! the defaults are where they are, and how a site that keeps other bases reserves them
//! (`net.ipv4.ip_local_reserved_ports`).

use std::ops::RangeInclusive;

/// The default `port_base=`: the rendezvous window's first port, below the ephemeral range and
/// clear of Slurm's daemons (6817–6819), `MpiParams=ports=12000-12999` as Slurm's docs show it,
/// Weka's 14000–14400, PyTorch's 29500 and Kubernetes' node ports (30000–32767).
pub const RENDEZVOUS_BASE: u16 = 17_000;
/// The ports of each window.
pub const WINDOW_PORTS: u16 = 2_000;
/// How many ports of its window a meeting tries (the leader binds the first free one; followers
/// try them in the same order).
pub const CANDIDATES: u16 = 8;
/// The distance between a meeting's candidates; also how many different candidate sets a window
/// holds.
pub const STRIDE: u16 = WINDOW_PORTS / CANDIDATES;
/// The collective's window, this far above the rendezvous's.
pub const COLLECTIVE_OFFSET: u16 = WINDOW_PORTS;
/// The step gate's window, this far above the rendezvous's.
pub const STEP_GATE_OFFSET: u16 = 2 * WINDOW_PORTS;
/// The ports the three windows take from `port_base=` on.
pub const SPAN_PORTS: u16 = 3 * WINDOW_PORTS;
/// The prolog's collective (`--fabric-check=full`, Slurm before 23.11) by default.
pub const COLLECTIVE_BASE: u16 = RENDEZVOUS_BASE + COLLECTIVE_OFFSET;
/// The step gate's rendezvous and collective (Slurm 23.11+) by default.
pub const STEP_GATE_BASE: u16 = RENDEZVOUS_BASE + STEP_GATE_OFFSET;
/// The lowest first port of a window (and `port_base=`): no privileged port.
pub const MIN_BASE: u16 = 1_024;
/// The highest `port_base=`: the step gate's window still ends at a port.
pub const MAX_BASE: u16 = u16::MAX - (SPAN_PORTS - 1);
/// Linux's default ephemeral range (`net.ipv4.ip_local_port_range`): outgoing connections take
/// their local port from here, so a listener inside it can find its port taken by any of them.
pub const LINUX_EPHEMERAL: RangeInclusive<u16> = 32_768..=60_999;

/// Why a window cannot be laid out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// The first port is privileged.
    #[error("port {first} is privileged: start the window at {MIN_BASE} or above")]
    Privileged {
        /// The first port asked for.
        first: u16,
    },
    /// The window would run past port 65535.
    #[error(
        "a window of {ports} ports from {first} runs past port 65535: start it at {} or below",
        u16::MAX - (ports - 1)
    )]
    PastTheLastPort {
        /// The first port asked for.
        first: u16,
        /// The window's ports.
        ports: u16,
    },
    /// No candidate, or more candidates than ports.
    #[error("{candidates} candidates do not fit a window of {ports} ports: ask for 1 to {ports}")]
    Candidates {
        /// The window's ports.
        ports: u16,
        /// The candidates asked for.
        candidates: u16,
    },
}

/// One window: `ports` ports from `first`, of which a meeting tries `candidates`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    first: u16,
    ports: u16,
    candidates: u16,
}

impl Window {
    /// A window of [`WINDOW_PORTS`] ports from `first` with [`CANDIDATES`] candidates per
    /// meeting: what `port_base=` lays out, and what `fabric-check collective --port-base`
    /// takes.
    pub fn standard(first: u16) -> Result<Self, WindowError> {
        Self::new(first, WINDOW_PORTS, CANDIDATES)
    }

    /// A window of `ports` ports from `first` whose meetings try `candidates` of them, spread
    /// `ports / candidates` apart (`Window::new(p, 4, 4)`: the four ports from `p`, for tests
    /// that need neighbouring ports).
    pub fn new(first: u16, ports: u16, candidates: u16) -> Result<Self, WindowError> {
        if first < MIN_BASE {
            return Err(WindowError::Privileged { first });
        }
        if candidates == 0 || candidates > ports {
            return Err(WindowError::Candidates { ports, candidates });
        }
        if u32::from(first) + u32::from(ports) - 1 > u32::from(u16::MAX) {
            return Err(WindowError::PastTheLastPort { first, ports });
        }
        Ok(Self {
            first,
            ports,
            candidates,
        })
    }

    /// The window's first port.
    pub fn first(&self) -> u16 {
        self.first
    }

    /// The window's last port.
    pub fn last(&self) -> u16 {
        self.first + (self.ports - 1)
    }

    /// Every port of the window.
    pub fn range(&self) -> RangeInclusive<u16> {
        self.first..=self.last()
    }

    /// The ports meeting `id` tries, in order: [`Self::candidates`] of them, `ports /
    /// candidates` apart, from `first + id % (ports / candidates)`. Ids closer than that never
    /// share one.
    pub fn candidates(&self, id: u64) -> Vec<u16> {
        let stride = self.ports / self.candidates;
        // `id % stride` < stride ≤ u16::MAX.
        let class = (id % u64::from(stride)) as u16;
        (0..self.candidates)
            .map(|i| self.first + class + i * stride)
            .collect()
    }
}

/// The three windows' first ports, from one `port_base=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bases {
    /// The verdict rendezvous of the prolog, the epilog and each step's end.
    pub rendezvous: Window,
    /// The prolog's collective.
    pub collective: Window,
    /// The step gate's rendezvous and collective.
    pub step_gate: Window,
}

impl Bases {
    /// The windows from `base` (an error outside [`MIN_BASE`]..=[`MAX_BASE`]).
    pub fn from_base(base: u16) -> Result<Self, WindowError> {
        if base > MAX_BASE {
            return Err(WindowError::PastTheLastPort {
                first: base,
                ports: SPAN_PORTS,
            });
        }
        Ok(Self {
            rendezvous: Window::standard(base)?,
            collective: Window::standard(base + COLLECTIVE_OFFSET)?,
            step_gate: Window::standard(base + STEP_GATE_OFFSET)?,
        })
    }

    /// The first port of all three (`port_base=`).
    pub fn base(&self) -> u16 {
        self.rendezvous.first()
    }

    /// The last port of all three.
    pub fn last(&self) -> u16 {
        self.step_gate.last()
    }

    /// The ports of the three windows that lie in `ephemeral` (a node's
    /// `ip_local_port_range`), as one range; `None` when none does.
    pub fn in_range(&self, ephemeral: &RangeInclusive<u16>) -> Option<RangeInclusive<u16>> {
        let from = self.base().max(*ephemeral.start());
        let to = self.last().min(*ephemeral.end());
        (from <= to).then_some(from..=to)
    }
}

impl Default for Bases {
    fn default() -> Self {
        Self {
            rendezvous: Window {
                first: RENDEZVOUS_BASE,
                ports: WINDOW_PORTS,
                candidates: CANDIDATES,
            },
            collective: Window {
                first: COLLECTIVE_BASE,
                ports: WINDOW_PORTS,
                candidates: CANDIDATES,
            },
            step_gate: Window {
                first: STEP_GATE_BASE,
                ports: WINDOW_PORTS,
                candidates: CANDIDATES,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_windows_lie_outside_linuxs_ephemeral_range() {
        let b = Bases::default();
        assert_eq!(b.in_range(&LINUX_EPHEMERAL), None, "{b:?}");
        assert!(b.last() < *LINUX_EPHEMERAL.start(), "{b:?}");
        assert_eq!(Bases::from_base(RENDEZVOUS_BASE), Ok(b));
    }

    #[test]
    fn consecutive_job_ids_get_disjoint_candidate_sets() {
        let w = Bases::default().rendezvous;
        for id in [
            0_u64,
            1,
            999,
            1_000,
            12_345,
            u64::from(u32::MAX),
            u64::MAX - 1,
        ] {
            let mine = w.candidates(id);
            let next = w.candidates(id.wrapping_add(1));
            assert_eq!(mine.len(), usize::from(CANDIDATES));
            assert!(mine.iter().all(|p| !next.contains(p)), "{mine:?} {next:?}");
            assert!(mine.iter().all(|p| w.range().contains(p)), "{mine:?}");
        }
        // Every job within a stride of another has its own set.
        let sets: std::collections::HashSet<Vec<u16>> = (5_000..5_000 + u64::from(STRIDE))
            .map(|id| w.candidates(id))
            .collect();
        assert_eq!(sets.len(), usize::from(STRIDE));
    }

    #[test]
    fn a_meetings_candidates_are_spread_through_its_window() {
        let w = Window::standard(20_000).unwrap();
        assert_eq!(
            w.candidates(1_003),
            vec![
                20_003, 20_253, 20_503, 20_753, 21_003, 21_253, 21_503, 21_753
            ]
        );
        assert_eq!(
            Window::new(9_000, 4, 4).unwrap().candidates(77),
            vec![9_000, 9_001, 9_002, 9_003]
        );
    }

    #[test]
    fn a_window_that_is_privileged_or_runs_past_the_last_port_is_refused_with_the_fix() {
        let e = Window::standard(80).unwrap_err();
        assert!(e.to_string().contains("1024 or above"), "{e}");
        let e = Window::standard(64_000).unwrap_err();
        assert!(e.to_string().contains("63536 or below"), "{e}");
        let e = Bases::from_base(MAX_BASE + 1).unwrap_err();
        assert!(
            e.to_string().contains(&format!("{MAX_BASE} or below")),
            "{e}"
        );
        assert_eq!(Bases::from_base(MAX_BASE).unwrap().last(), u16::MAX);
        assert!(Window::new(2_000, 4, 5).is_err() && Window::new(2_000, 4, 0).is_err());
    }

    #[test]
    fn a_base_inside_the_ephemeral_range_names_the_ports_there() {
        let b = Bases::from_base(30_000).unwrap();
        assert_eq!(b.in_range(&LINUX_EPHEMERAL), Some(32_768..=35_999));
        let old = Bases::from_base(47_000).unwrap();
        assert_eq!(old.in_range(&LINUX_EPHEMERAL), Some(47_000..=52_999));
    }
}
