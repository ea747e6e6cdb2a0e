//! The straggler verdict, pure: every node's figure for a hop in ([`Judge::observe`]), what
//! the first node names out ([`Event`]). No clock, no I/O: the rules are tested on recorded
//! step series (`judge_tests.rs`).
//!
//! # The rules (docs/checks.md, "Stragglers")
//!
//! - A node's **ratio** in a window is its median step time over the job's median (the median of
//!   the nodes that reported steps; at least two must have). A window whose steps include a
//!   checkpoint or a restore on that node, or that has no steps, is not judged for it: it
//!   neither starts nor breaks a streak.
//!   Those windows are the job's own step pattern (its records say so), not the node's speed.
//! - A window is **slow** for a node when its ratio is at least [`Rules::ratio`], from its first
//!   judged window on (a node already slow when the job starts is named like one that slows
//!   down later; the job's own pattern is told apart by the rules below, not by the node's past).
//!   [`Rules::windows`] slow windows in a row **name** it ([`Named`]), unless the slowness
//!   **rotates**: another node took a turn at being slow (two windows in a row at least),
//!   while this one was not, in at least two windows of the last [`Rules::lookback`]; then it
//!   is the workload's ([`WorkloadKind::Rotating`]) and the node is not named. A single slow
//!   window of another node is noise, not a turn: it never holds a straggler back. Two nodes slow together are both named.
//! - **Every node slow together** leaves every ratio near 1 and names nobody; the job's median
//!   against its own first windows says it ([`WorkloadKind::Together`]).
//! - A named node is **cleared** after [`Rules::windows`] windows in a row that are not slow.
//! - A node that reported steps and then none for [`Rules::silent`] windows, while others still
//!   do, is **silent** ([`Event::Silent`]): no evidence, never a straggler.
//!
//! Nothing here drains: the policy table (`policy.rs`) tags and tells the job, whatever it is.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use fabric_proto::straggler::{SLOW_RATIO, WINDOWS_TO_NAME, WindowSteps};

/// The verdict's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// A node's ratio to the job's median that makes a window slow (1.10).
    pub ratio: f64,
    /// Slow windows in a row that name a node; calm ones that clear it (3).
    pub windows: u32,
    /// Judged windows that set the job's baseline median (3).
    pub baseline: u32,
    /// Windows looked back at for a rotating slow node (12: a minute of 5 s hops).
    pub lookback: u32,
    /// Windows without steps, while others report, that make a node silent (6).
    pub silent: u32,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            ratio: SLOW_RATIO,
            windows: WINDOWS_TO_NAME,
            baseline: 3,
            lookback: 12,
            silent: 6,
        }
    }
}

/// A node named a straggler.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    /// The node.
    pub node: String,
    /// Its median ratio to the job's median over the windows that named it.
    pub ratio: f64,
    /// The first slow window's hop.
    pub since_hop: u64,
    /// The hop that named it.
    pub hop: u64,
    /// A fabric fault its own watch held during those windows (a check id).
    pub fault: Option<String>,
}

/// Why a slowdown is the workload's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    /// Every node slowed together (the job's median against its first windows).
    Together,
    /// The slow node changes from window to window.
    Rotating,
}

impl WorkloadKind {
    /// How a message names it.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Together => "every node slowed together",
            WorkloadKind::Rotating => "the slow node rotates",
        }
    }
}

/// A slowdown that is the workload's.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Which pattern.
    pub kind: WorkloadKind,
    /// The ratio it showed: the job's median to its baseline (together), or the node's ratio
    /// (rotating).
    pub ratio: f64,
    /// Its first window's hop.
    pub since_hop: u64,
    /// The hop that said it.
    pub hop: u64,
    /// The nodes it concerns (every reporting node, or the rotating ones).
    pub nodes: Vec<String>,
}

/// What the first node concludes at a hop.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A node's steps are slower than the job's: a straggler.
    Named(Named),
    /// A named node's steps are back with the job's.
    Cleared {
        /// The node.
        node: String,
        /// The hop it was cleared at.
        hop: u64,
    },
    /// A slowdown that is the workload's, no node's.
    Workload(Workload),
    /// A node's step records stopped while the others' go on (no evidence either way).
    Silent {
        /// The node.
        node: String,
        /// The first hop without its steps.
        since_hop: u64,
    },
}

/// A run of slow windows (a node's or the job's).
#[derive(Debug, Default)]
struct Streak {
    ratios: Vec<f64>,
    since: Option<u64>,
    named: bool,
    calm: u32,
}

impl Streak {
    /// Adds a slow window; the streak keeps its last `keep` ratios.
    fn slow(&mut self, hop: u64, ratio: f64, keep: u32) {
        self.since.get_or_insert(hop);
        self.calm = 0;
        self.ratios.push(ratio);
        let keep = keep.max(1) as usize;
        if self.ratios.len() > keep {
            self.ratios.remove(0);
        }
    }

    /// A window that is not slow: breaks an unnamed streak; `windows` of them clear a named one
    /// (returns true then).
    fn calm(&mut self, windows: u32) -> bool {
        if !self.named {
            *self = Streak::default();
            return false;
        }
        self.calm += 1;
        if self.calm >= windows {
            *self = Streak::default();
            return true;
        }
        false
    }

    fn len(&self) -> u32 {
        u32::try_from(self.ratios.len()).unwrap_or(u32::MAX)
    }

    fn ratio(&self) -> f64 {
        median_f64(&self.ratios)
    }
}

#[derive(Debug, Default)]
struct NodeState {
    streak: Streak,
    /// Windows in a row that this node's slowness was excused as rotating.
    excused: bool,
    fault: Option<String>,
    last_seen: Option<u64>,
    silent_said: bool,
}

/// The first node's straggler verdict over a job's hops.
#[derive(Debug)]
pub struct Judge {
    rules: Rules,
    nodes: BTreeMap<String, NodeState>,
    job_first: Vec<f64>,
    job_base: Option<f64>,
    job: Streak,
    /// The nodes slow at each recent hop (at most `lookback + windows` hops).
    slow_log: VecDeque<(u64, BTreeSet<String>)>,
    rotating_said: Option<u64>,
}

/// The lower median (of an even count, the lower middle value: a window half fast and half
/// slow is not slow).
fn median_f64(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 2]
}

impl Judge {
    /// A judge with these rules.
    pub fn new(rules: Rules) -> Judge {
        Judge {
            rules,
            nodes: BTreeMap::new(),
            job_first: Vec::new(),
            job_base: None,
            job: Streak::default(),
            slow_log: VecDeque::new(),
            rotating_said: None,
        }
    }

    /// Whether `node` is named now.
    pub fn is_named(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|s| s.streak.named)
    }

    /// Judges one hop: `figures` holds the figure of every node that reported (a node missing
    /// from it, or with no steps, is not judged at this hop).
    pub fn observe(&mut self, hop: u64, figures: &BTreeMap<String, WindowSteps>) -> Vec<Event> {
        let mut events = Vec::new();
        let judged: BTreeMap<&str, f64> = figures
            .iter()
            .filter(|(_, f)| f.steps > 0 && !f.checkpoint)
            .filter_map(|(n, f)| Some((n.as_str(), f.median_ms? as f64)))
            .filter(|(_, ms)| *ms > 0.0)
            .collect();
        for (n, f) in figures {
            if f.steps > 0 {
                let s = self.nodes.entry(n.clone()).or_default();
                s.last_seen = Some(hop);
                s.silent_said = false;
            }
        }
        self.say_silent(hop, figures, &mut events);
        if judged.len() < 2 {
            return events;
        }
        let values: Vec<f64> = judged.values().copied().collect();
        let job_ms = median_f64(&values);
        self.judge_job(hop, job_ms, &judged, &mut events);
        let mut slow_now = BTreeSet::new();
        for (node, ms) in &judged {
            let ratio = ms / job_ms;
            let fault = figures.get(*node).and_then(|f| f.fault.clone());
            if self.judge_node(hop, node, ratio, fault, &mut events) {
                slow_now.insert((*node).to_owned());
            }
        }
        self.slow_log.push_back((hop, slow_now));
        let keep = u64::from(self.rules.lookback + self.rules.windows);
        while self.slow_log.front().is_some_and(|(h, _)| h + keep <= hop) {
            self.slow_log.pop_front();
        }
        self.name_streaks(hop, &mut events);
        events
    }

    fn say_silent(
        &mut self,
        hop: u64,
        figures: &BTreeMap<String, WindowSteps>,
        events: &mut Vec<Event>,
    ) {
        let reporting = figures.values().filter(|f| f.steps > 0).count();
        if reporting < 2 {
            return;
        }
        for (node, s) in &mut self.nodes {
            let Some(last) = s.last_seen else { continue };
            if !s.silent_said && hop >= last + u64::from(self.rules.silent) {
                s.silent_said = true;
                events.push(Event::Silent {
                    node: node.clone(),
                    since_hop: last + 1,
                });
            }
        }
    }

    fn judge_job(
        &mut self,
        hop: u64,
        job_ms: f64,
        judged: &BTreeMap<&str, f64>,
        events: &mut Vec<Event>,
    ) {
        let Some(base) = self.job_base else {
            self.job_first.push(job_ms);
            if self.job_first.len() >= self.rules.baseline as usize {
                self.job_base = Some(median_f64(&self.job_first));
            }
            return;
        };
        let ratio = job_ms / base;
        if ratio >= self.rules.ratio {
            self.job.slow(hop, ratio, self.rules.windows);
            if self.job.len() >= self.rules.windows && !self.job.named {
                self.job.named = true;
                events.push(Event::Workload(Workload {
                    kind: WorkloadKind::Together,
                    ratio: self.job.ratio(),
                    since_hop: self.job.since.unwrap_or(hop),
                    hop,
                    nodes: judged.keys().map(|n| (*n).to_owned()).collect(),
                }));
            }
        } else {
            self.job.calm(self.rules.windows);
        }
    }

    /// Judges one node's window; returns whether it was slow.
    fn judge_node(
        &mut self,
        hop: u64,
        node: &str,
        ratio: f64,
        fault: Option<String>,
        events: &mut Vec<Event>,
    ) -> bool {
        let rules = self.rules;
        let s = self.nodes.entry(node.to_owned()).or_default();
        if ratio >= rules.ratio {
            s.streak.slow(hop, ratio, rules.windows);
            if fault.is_some() {
                s.fault = fault;
            }
            true
        } else {
            let cleared = s.streak.calm(rules.windows);
            if !s.streak.named {
                s.fault = None;
                s.excused = false;
            }
            if cleared {
                events.push(Event::Cleared {
                    node: node.to_owned(),
                    hop,
                });
            }
            false
        }
    }

    /// Names the nodes whose streak is long enough, unless the slowness rotates.
    fn name_streaks(&mut self, hop: u64, events: &mut Vec<Event>) {
        let rules = self.rules;
        let ready: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, s)| !s.streak.named && s.streak.len() >= rules.windows)
            .map(|(n, _)| n.clone())
            .collect();
        for node in ready {
            let others = self.rotating_with(&node, hop);
            let s = self.nodes.get_mut(&node).expect("a ready node has a state");
            if others.is_empty() {
                s.streak.named = true;
                events.push(Event::Named(Named {
                    node: node.clone(),
                    ratio: s.streak.ratio(),
                    since_hop: s.streak.since.unwrap_or(hop),
                    hop,
                    fault: s.fault.clone(),
                }));
                continue;
            }
            if s.excused {
                continue;
            }
            s.excused = true;
            let ratio = s.streak.ratio();
            let since_hop = s.streak.since.unwrap_or(hop);
            let recent = self
                .rotating_said
                .is_some_and(|h| h + u64::from(rules.lookback) > hop);
            if !recent {
                self.rotating_said = Some(hop);
                let mut nodes = vec![node.clone()];
                nodes.extend(others);
                events.push(Event::Workload(Workload {
                    kind: WorkloadKind::Rotating,
                    ratio,
                    since_hop,
                    hop,
                    nodes,
                }));
            }
        }
    }

    /// The other nodes that took a turn at being slow while `node` was not: slow in two
    /// windows in a row at least (one slow window is noise, not a turn), in at least two
    /// windows of the last `lookback` in all; empty otherwise.
    fn rotating_with(&self, node: &str, hop: u64) -> Vec<String> {
        let from = hop.saturating_sub(u64::from(self.rules.lookback));
        let recent: BTreeMap<u64, &BTreeSet<String>> = self
            .slow_log
            .iter()
            .filter(|(h, slow)| *h >= from && !slow.contains(node))
            .map(|(h, slow)| (*h, slow))
            .collect();
        let mut windows = 0;
        let mut others = BTreeSet::new();
        for (h, slow) in &recent {
            let turns: Vec<&String> = slow
                .iter()
                .filter(|n| {
                    let before = h.checked_sub(1).and_then(|p| recent.get(&p));
                    let after = recent.get(&(h + 1));
                    before.is_some_and(|s| s.contains(*n)) || after.is_some_and(|s| s.contains(*n))
                })
                .collect();
            if !turns.is_empty() {
                windows += 1;
                others.extend(turns.into_iter().cloned());
            }
        }
        if windows >= 2 {
            others.into_iter().collect()
        } else {
            Vec::new()
        }
    }
}
