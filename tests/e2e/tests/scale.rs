//! slurmctld's load at job start, on the many-node testbed: the RPC budget of a passing
//! `--fabric-check` job (only the first node calls slurmctld, to read and write the tag, so the
//! job adds the same RPCs whatever its size), counted with slurmctld's own statistics (`sdiag`
//! by message type, reset with `sdiag -r` before each job).
//!
//! srun's own `REQUEST_JOB_READY` polls, whose count follows the prolog's duration, are left out,
//! and so are slurmd's own per-node messages (the same with and without the option).
//! The test brings the testbed to 16 virtual nodes (`scripts/testbed up --nodes 16`, on the
//! version matrix `scripts/matrix testbed SUITE up --nodes 16`) and back to its default four,
//! also when it fails. It runs on every Slurm of the matrix: 22.05 (host), 24.11 and 26.05.

use std::collections::BTreeMap;
use std::time::Duration;

use fabric_e2e::Testbed;

/// After `srun` returns: the epilogs run and report (`MESSAGE_EPILOG_COMPLETE`).
const SETTLE: Duration = Duration::from_millis(2500);

/// `sdiag`'s RPC counts, keyed `type REQUEST_...` (by message type) and `user NAME` (by user).
fn rpcs_by_type(tb: &Testbed) -> BTreeMap<String, i64> {
    let text = tb.ok("sdiag", &[]);
    let by_type = text
        .split("statistics by message type")
        .nth(1)
        .and_then(|s| s.split("statistics by user").next())
        .unwrap_or_else(|| panic!("sdiag printed no RPC statistics by message type:\n{text}"));
    let by_user = text
        .split("statistics by user")
        .nth(1)
        .and_then(|s| s.split("Pending RPC").next())
        .unwrap_or_else(|| panic!("sdiag printed no RPC statistics by user:\n{text}"));
    let counts = |section: &str, key: &str| -> Vec<(String, i64)> {
        section
            .lines()
            .filter_map(|l| {
                let name = l.split_whitespace().next()?;
                let count = l.split("count:").nth(1)?.split_whitespace().next()?;
                Some((format!("{key} {name}"), count.parse().ok()?))
            })
            .collect()
    };
    counts(by_type, "type")
        .into_iter()
        .chain(counts(by_user, "user"))
        .collect()
}

/// The RPCs slurmctld counted for one `srun -N SIZE [OPTION] true`, from a reset to after the
/// epilogs.
fn rpcs_of_one_job(tb: &Testbed, size: usize, option: Option<&str>) -> BTreeMap<String, i64> {
    tb.ok("sdiag", &["-r"]);
    let nodes = format!("-N{size}");
    let mut args = vec![nodes.as_str()];
    args.extend(option);
    args.push("true");
    tb.ok("srun", &args);
    std::thread::sleep(SETTLE);
    rpcs_by_type(tb)
}

/// Per message type, the least count of `runs` jobs (anything else on the cluster only adds).
fn least_of(tb: &Testbed, runs: usize, size: usize, option: Option<&str>) -> BTreeMap<String, i64> {
    let mut least: Option<BTreeMap<String, i64>> = None;
    for _ in 0..runs {
        let got = rpcs_of_one_job(tb, size, option);
        least = Some(match least {
            None => got,
            Some(prev) => {
                let names: std::collections::BTreeSet<&String> =
                    prev.keys().chain(got.keys()).collect();
                names
                    .into_iter()
                    .map(|n| {
                        let a = prev.get(n).copied().unwrap_or(0);
                        let b = got.get(n).copied().unwrap_or(0);
                        (n.clone(), a.min(b))
                    })
                    .collect()
            }
        });
    }
    least.unwrap_or_default()
}

/// `srun` polls `REQUEST_JOB_READY` while the prologs run (with a back-off), so its count follows
/// how long the prolog takes, not what the prolog asks: left out of the comparison.
const SRUNS_OWN_WAIT: &str = "type REQUEST_JOB_READY";

/// Not fabric-check's: srun's wait, and slurmd's per-node messages of every job (the same with
/// and without the option, but one run's can arrive after the sdiag read; seen once, -2).
/// `REQUEST_STEP_COMPLETE` is slurmstepd's: each node reports the step's end up the reverse tree,
/// and a parent that has heard from its children in time sends one message for them all, so the
/// count follows when the nodes finish (24.11, 16 nodes: two fewer with the option than without,
/// once in CI); the plugin sends none.
const SLURMDS_OWN: &[&str] = &[
    SRUNS_OWN_WAIT,
    "type MESSAGE_EPILOG_COMPLETE",
    "type REQUEST_COMPLETE_PROLOG",
    "type REQUEST_STEP_COMPLETE",
];

/// The RPCs `--fabric-check=quick` adds to a passing job of `size` nodes, by message type
/// (types it does not change, and srun's own wait, left out).
fn added_by_the_option(tb: &Testbed, size: usize) -> BTreeMap<String, i64> {
    // A first job of this size warms slurmctld's caches (and the page cache of fabric-check).
    tb.ok(
        "srun",
        &[&format!("-N{size}"), "--fabric-check=quick", "true"],
    );
    let without = least_of(tb, 2, size, None);
    let with = least_of(tb, 2, size, Some("--fabric-check=quick"));
    let names: std::collections::BTreeSet<&String> = with.keys().chain(without.keys()).collect();
    names
        .into_iter()
        .filter_map(|n| {
            let d = with.get(n).copied().unwrap_or(0) - without.get(n).copied().unwrap_or(0);
            // By type only: the by-user counts hold slurmd's own per-node messages too.
            let kept = !n.starts_with("user ") && !SLURMDS_OWN.contains(&n.as_str());
            (d != 0 && kept).then(|| (n.clone(), d))
        })
        .collect()
}

#[test]
fn a_passing_job_adds_at_most_three_slurmctld_rpcs_the_same_at_4_and_at_16_nodes() {
    let tb = Testbed::get();
    tb.script(&["up", "--nodes", "16"])
        .expect("scripts/testbed up --nodes 16");
    let r = std::panic::catch_unwind(|| {
        let at_4 = added_by_the_option(&tb, 4);
        let at_16 = added_by_the_option(&tb, 16);
        eprintln!(
            "Slurm {:?}: RPCs --fabric-check added to a passing job: at 4 nodes {at_4:?}, at 16 nodes {at_16:?}",
            tb.slurm_version()
        );
        assert!(
            !at_16.contains_key("type REQUEST_NODE_INFO"),
            "a passing job asked slurmctld for node records (node addresses?): {at_16:?}"
        );
        // The first node reads the tag once (`scontrol --local --json show job`:
        // REQUEST_JOB_INFO_SINGLE, and `--local` spares the REQUEST_FED_INFO that scontrol
        // would send first; on 22.05, which has no `scontrol --json`, `squeue --local --jobs=N
        // -O ...`: REQUEST_JOB_INFO_SINGLE and the REQUEST_PARTITION_INFO that 22.05's squeue
        // always sends, once per job) and writes it once (`scontrol update`); the epilog of a
        // passing job writes nothing. Nothing else. Per-node `scontrol show node` calls (the old
        // address lookup) sent one REQUEST_PARTITION_INFO per node, so one at most, and the same
        // at 16 nodes, rules them out.
        let count = |k: &str| at_4.get(k).copied().unwrap_or(0);
        assert_eq!(
            count("type REQUEST_JOB_INFO_SINGLE") + count("type REQUEST_JOB_INFO"),
            1,
            "one read of the tag: {at_4:?}"
        );
        let partition_reads = if tb.slurm_version() < (23, 2) { 1 } else { 0 };
        assert_eq!(
            count("type REQUEST_PARTITION_INFO"),
            partition_reads,
            "22.05's squeue reads the partition table once; newer releases read none: {at_4:?}"
        );
        assert_eq!(count("type REQUEST_UPDATE_JOB"), 1, "one write: {at_4:?}");
        assert_eq!(
            count("type REQUEST_FED_INFO"),
            0,
            "the tag's read and write ask for no federation: {at_4:?}"
        );
        let total: i64 = at_4.values().sum();
        assert!(
            total <= 3,
            "a passing job adds {total} slurmctld RPCs, more than 3: {at_4:?}"
        );
        let leaders = [
            "type REQUEST_JOB_INFO_SINGLE",
            "type REQUEST_JOB_INFO",
            "type REQUEST_PARTITION_INFO",
            "type REQUEST_UPDATE_JOB",
            "type REQUEST_FED_INFO",
        ];
        assert!(
            at_4.keys().all(|k| leaders.contains(&k.as_str())),
            "RPCs other than the leader's read and write of the tag: {at_4:?}"
        );
        assert_eq!(
            at_4, at_16,
            "the RPCs --fabric-check adds, by message type, at 4 nodes (left) and 16 (right)"
        );
    });
    tb.script(&["up"])
        .expect("scripts/testbed up (back to four nodes)");
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}
