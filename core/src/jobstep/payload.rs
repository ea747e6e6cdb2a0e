//! What each node sends the first node over the rendezvous (the wire shape of earlier releases:
//! JSON objects with these field names, so nodes of the previous and the next build still meet).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use fabric_proto::tag::{CollectiveSummary, DuringJob, NodeResult, RunSummary, SlowClaim};

/// A field the job wrote, decoded on its own: when it does not decode, it is taken as absent,
/// and the rest of the payload (root's evidence) still arrives.
fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let v = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}

/// The prolog's payload: the node's verdict, its notes and (`full`) the collective's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrologPayload {
    /// The node's result for the tag.
    pub result: NodeResult,
    /// Why the node could not look, if so.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The collective's summary (every rank holds the same).
    #[serde(default)]
    pub collective: Option<CollectiveSummary>,
    /// The node's fabric in brief, for the first node to compare the job's nodes
    /// ([`super::job_peers`]); absent from older builds and when the probe could not run.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub fingerprint: Option<super::job_peers::Fingerprint>,
}

/// The epilog's payload: counter rises, the `fabric-run` summary and the step gate's results.
///
/// Root's evidence (`during`) travels apart from what the job wrote (`run`, `steps`, `slow`):
/// each of the job's fields decodes on its own, so a part the leader cannot read
/// costs only that part, and [`EpilogPayload::fit`] shrinks the job's part, never root's, until
/// the payload fits a join.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EpilogPayload {
    /// Counter rises over the job window (none without a prolog snapshot).
    #[serde(default)]
    pub during: Option<DuringJob>,
    /// This node's `fabric-run` records, summarised.
    #[serde(default, deserialize_with = "lenient")]
    pub run: Option<RunSummary>,
    /// This node's step gate results.
    #[serde(default, deserialize_with = "lenient")]
    pub steps: Vec<CollectiveSummary>,
    /// Steps whose gate named this node slow (reported by the job, never a reason to drain).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient"
    )]
    pub slow: Vec<SlowClaim>,
}

/// The most step results of one node a payload carries (the latest are kept).
pub const MAX_STEP_RESULTS: usize = 16;

impl EpilogPayload {
    /// Shrinks the job's part until the whole payload's JSON is at most `max_bytes`: the step
    /// results to the worst one, then the slow claims, then the run summary. Root's `during` is
    /// never touched. Returns what was dropped, for the log (empty when it fitted).
    pub fn fit(&mut self, max_bytes: usize) -> Vec<&'static str> {
        let len = |p: &Self| serde_json::to_vec(p).map_or(usize::MAX, |b| b.len());
        let mut dropped = Vec::new();
        if len(self) > max_bytes && self.steps.len() > 1 {
            self.steps = crate::stepgate::worst(None, &self.steps)
                .into_iter()
                .collect();
            dropped.push("all but the worst step result");
        }
        if len(self) > max_bytes && !self.steps.is_empty() {
            self.steps.clear();
            dropped.push("the step results");
        }
        if len(self) > max_bytes && !self.slow.is_empty() {
            self.slow.clear();
            dropped.push("the slow-node claims");
        }
        if len(self) > max_bytes && self.run.is_some() {
            self.run = None;
            dropped.push("the run summary");
        }
        dropped
    }
}

/// What each node of a multi-node step sends the step's first node at the step's end: its
/// `fabric-run` records summarised (every step so far on the node, as the epilog reads them).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StepEndPayload {
    /// This node's records, summarised (`None`: none, or none readable).
    #[serde(default)]
    pub run: Option<RunSummary>,
    /// Whether one of those records names the step that ended.
    #[serde(default)]
    pub this_step: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_proto::tag::Verdict;
    use serde_json::json;

    #[test]
    fn the_payloads_keep_the_wire_shape_of_the_untyped_release() {
        let old = json!({
            "result": {"verdict": "fail", "checks": ["ib.mtu"], "probe_ms": 3, "drained": true},
            "notes": ["n1: x"],
            "collective": null
        });
        let p: PrologPayload = serde_json::from_value(old).unwrap();
        assert_eq!(p.result.verdict, Verdict::Fail);
        assert!(p.result.drained);
        assert_eq!(p.notes, vec!["n1: x".to_owned()]);
        let old = json!({"during": null, "run": null, "steps": []});
        let e: EpilogPayload = serde_json::from_value(old).unwrap();
        assert_eq!(e, EpilogPayload::default());
        let back = serde_json::to_value(&e).unwrap();
        assert_eq!(back, json!({"during": null, "run": null, "steps": []}));
    }
}
