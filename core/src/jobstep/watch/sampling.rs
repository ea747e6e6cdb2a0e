//! The watch's sampling: the probe's gather and checks in this process against the prolog's
//! snapshot ([`ProbeSampler`]), behind the cheap look of [`super::vitals`] ([`QuickSampler`]).

use std::path::Path;

use super::window::rebase;
use super::{vitals, window};
use crate::probe::{Baseline, ProbeInput, Report};
use fabric_proto::verdict::Finding;

/// How often (in samples) a real node's tools (`ethtool -S`, `dcb`) are run: they are processes,
/// the rest of a sample is file reads.
pub const TOOLS_EVERY: u32 = 10;

/// One sample of the node.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The probe's report against the job's baseline.
    pub report: Report,
    /// Whether the external tools ran for it.
    pub tools_ran: bool,
}

/// Where samples come from.
pub trait Sampler {
    /// Takes one sample; `None` when nothing it reads changed since the last one (the last
    /// sample's findings stand).
    fn sample(&mut self) -> Option<Sample>;
}

/// The real sampler: the probe's gather and checks in this process, against the prolog's
/// snapshot (rebased when a counter resets), the per-hour bounds over the sliding hour of its
/// [`window::CounterRing`]; the external tools every [`TOOLS_EVERY`] samples on a real node (a
/// fixture tree's saved tool outputs are read every sample).
#[derive(Debug)]
pub struct ProbeSampler {
    input: ProbeInput,
    tools: crate::probe::gather::ToolSource,
    tools_every: u32,
    n: u32,
    ring: window::CounterRing,
    clock: window::Clock,
    /// Whether the watch has said that its clock went back behind the prolog's snapshot.
    said_clock_back: bool,
}

impl ProbeSampler {
    /// A sampler of `input` (whose baseline is the prolog's snapshot).
    pub fn new(input: ProbeInput) -> Self {
        let tools = input.roots.tools.clone();
        let tools_every = match tools {
            crate::probe::gather::ToolSource::Run => TOOLS_EVERY,
            _ => 1,
        };
        let ring = input.baseline.as_ref().map_or_else(Default::default, |b| {
            window::CounterRing::starting_at(&b.counters, &input.expect)
        });
        Self {
            input,
            tools,
            tools_every,
            n: 0,
            ring,
            clock: window::Clock::System,
            said_clock_back: false,
        }
    }

    /// The same sampler, its counters dated by `clock`.
    pub fn on_clock(mut self, clock: window::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// How many counter snapshots its sliding window holds.
    pub fn window_entries(&self) -> usize {
        self.ring.len()
    }

    /// The same sampler, its job's start (the baseline's time) moved `age_ms` back: a drill's
    /// long job ([`super::drill_age`]). The counters stay the values the prolog read, and the
    /// sliding hour keeps starting at the snapshot as it was taken: a per-hour bound is never
    /// judged over the emulated silence before it (that day would be allowance, not errors).
    pub fn dated_back(mut self, age_ms: u64) -> Self {
        if let Some(b) = &mut self.input.baseline {
            b.counters.taken_unix_ms = b.counters.taken_unix_ms.saturating_sub(age_ms);
        }
        self
    }
}

impl Sampler for ProbeSampler {
    fn sample(&mut self) -> Option<Sample> {
        let tools_ran = self.n.is_multiple_of(self.tools_every);
        self.n = self.n.wrapping_add(1);
        self.input.roots.tools = if tools_ran {
            self.tools.clone()
        } else {
            crate::probe::gather::ToolSource::Unavailable(
                "not run this sample (the watch runs tools every few samples)".into(),
            )
        };
        let now_ms = self.clock.now_unix_ms();
        if let Some(b) = &self.input.baseline
            && b.counters.taken_unix_ms > now_ms
            && !std::mem::replace(&mut self.said_clock_back, true)
        {
            tracing::warn!(
                "watch: the clock is {} ms behind the prolog's snapshot (stepped back?): counters are judged against it all the same, as if no time had passed",
                b.counters.taken_unix_ms - now_ms
            );
        }
        let with = crate::probe::RunWith {
            taken_unix_ms: Some(now_ms),
            rate_window: self.ring.window_start(now_ms),
        };
        let report = crate::probe::run_with(&self.input, with);
        if let Some(b) = &mut self.input.baseline {
            rebase(&mut b.counters, &report.counters);
            self.ring.rebase(&report.counters);
            self.ring.record(&report.counters, &self.input.expect);
        }
        Some(Sample { report, tools_ran })
    }
}

/// The watch's sampler: the few files that can make a `fail` read in place every sample
/// ([`vitals`]), the probe's whole gather and checks ([`ProbeSampler`], tools included) only
/// when one of them changed, every [`vitals::FULL_EVERY`] samples, and the first time.
#[derive(Debug)]
pub struct QuickSampler {
    full: ProbeSampler,
    vitals: Option<vitals::Vitals>,
    since_full: u32,
    /// Full samples taken.
    pub full_samples: u64,
    /// Runs right after each full gather: a test's change that lands between the gather's
    /// reads and the next sample.
    #[cfg(test)]
    pub after_gather: Option<AfterGather>,
}

/// A test's hook into [`QuickSampler`]: runs right after each full gather.
#[cfg(test)]
pub struct AfterGather(pub Box<dyn FnMut()>);

#[cfg(test)]
impl std::fmt::Debug for AfterGather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterGather")
    }
}

impl QuickSampler {
    /// A sampler of `input` (whose baseline is the prolog's snapshot).
    pub fn new(input: ProbeInput) -> Self {
        let mut full = ProbeSampler::new(input);
        // Tools run with every full sample: those are rare enough.
        full.tools_every = 1;
        Self {
            full,
            vitals: None,
            since_full: 0,
            full_samples: 0,
            #[cfg(test)]
            after_gather: None,
        }
    }

    /// The same sampler, its counters dated by `clock`.
    pub fn on_clock(mut self, clock: window::Clock) -> Self {
        self.full = self.full.on_clock(clock);
        self
    }

    /// The same sampler, its job's start moved `age_s` back ([`ProbeSampler::dated_back`]).
    pub fn dated_back(mut self, age_s: u64) -> Self {
        self.full = self.full.dated_back(age_s.saturating_mul(1000));
        self
    }

    /// The prolog's snapshot that samples are judged against (rebased on resets): a harness
    /// on an emulated clock (the false-drain soak) moves its time before each sample.
    pub fn baseline_mut(&mut self) -> Option<&mut Baseline> {
        self.full.input.baseline.as_mut()
    }

    /// A sample that its caller knows would find the files as the last full sample left them:
    /// a harness that is the only writer to the node's tree and has written nothing since (the
    /// false-drain soak). It counts as a quick sample that found no change, and reads nothing;
    /// `false` (nothing counted) when a full sample is due anyway: then call
    /// [`Sampler::sample`].
    pub fn unchanged_sample(&mut self) -> bool {
        let Some(v) = &mut self.vitals else {
            return false;
        };
        if self.since_full + 1 >= vitals::FULL_EVERY {
            return false;
        }
        self.since_full += 1;
        v.skip_unchanged();
        true
    }

    /// How many files a quick sample reads (0 before the first sample).
    pub fn files_read_in_place(&self) -> usize {
        self.vitals.as_ref().map_or(0, vitals::Vitals::len)
    }

    /// How many counter snapshots its sliding window holds.
    pub fn window_entries(&self) -> usize {
        self.full.window_entries()
    }
}

impl Sampler for QuickSampler {
    fn sample(&mut self) -> Option<Sample> {
        self.since_full += 1;
        let due = match &mut self.vitals {
            None => true,
            Some(v) => self.since_full >= vitals::FULL_EVERY || v.changed(),
        };
        if !due {
            return None;
        }
        self.since_full = 0;
        self.full_samples += 1;
        // Opened again with each full sample: a file replaced rather than rewritten (a driver
        // reload, a swapped fixture tree) is read from its new self from now on. Opened (and
        // read) *before* the gather: a change that lands after the gather read a file is then
        // a change at the next sample. Opened after it, such a change became the files' first
        // read and went unseen until the next full sample, a minute later (CI saw it: a
        // counter raised just as a job's watch took its first sample).
        let now_ms = self.full.clock.now_unix_ms();
        let bases = self.full.input.baseline.as_ref().and_then(|b| {
            Some(vitals::Bases {
                job: &b.counters,
                window: self.full.ring.window_start(now_ms)?,
            })
        });
        let vitals = vitals::Vitals::open(
            &self.full.input.roots.sysfs,
            // The full sampler's own tool source: it sets the input's to "not run" between
            // its tool runs.
            &self.full.tools,
            &self.full.input.expect,
            bases,
        );
        let sample = self.full.sample();
        #[cfg(test)]
        if let Some(AfterGather(after_gather)) = &mut self.after_gather {
            after_gather();
        }
        self.vitals = vitals;
        sample
    }
}

/// Loads what the watch starts from: the prolog's snapshot (the baseline and the findings the
/// job started with).
pub fn load_start(
    snapshot: &Path,
) -> Result<(Baseline, Vec<Finding>), crate::probe::BaselineError> {
    let base = Baseline::load(snapshot)?;
    #[derive(serde::Deserialize)]
    struct Findings {
        #[serde(default)]
        findings: Vec<Finding>,
    }
    let findings = std::fs::read_to_string(snapshot)
        .ok()
        .and_then(|t| serde_json::from_str::<Findings>(&t).ok())
        .map(|f| f.findings)
        .unwrap_or_default();
    Ok((base, findings))
}
