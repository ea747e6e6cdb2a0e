//! The job tag on the real testbed: read from structured output (a renamed job cannot forge
//! it), written to the job itself (array tasks and het components each get their own), and
//! readable in `sacct` by a standard JSON parser, original case.
//!
//! Each test starts from and returns to a healthy cluster (`heal_all`).

use std::time::Duration;

use fabric_e2e::{
    Testbed, heal_all, sacct_rows, sbatch_het_one_then_two, strict_tag, wait_for, wait_job_end,
};

const LONG: Duration = Duration::from_secs(150);

/// `sacct -P -X` of `JobIDRaw,JobID,NodeList,AdminComment` for the job and its siblings.
fn records(tb: &Testbed, job: &str) -> Vec<(String, String, String, String)> {
    sacct_rows(tb, job, &["JobIDRaw", "JobID", "NodeList", "AdminComment"])
        .into_iter()
        .map(|r| {
            let [raw, id, nodes, comment]: [String; 4] = r.try_into().expect("four fields");
            (raw, id, nodes, comment)
        })
        .collect()
}

/// Waits until every record of `job` has a tag; returns the records.
fn all_tagged(tb: &Testbed, job: &str, n: usize) -> Vec<(String, String, String, String)> {
    wait_for(LONG, || {
        let r = records(tb, job);
        (r.len() == n && r.iter().all(|(.., c)| c.contains("fabric-check/v1 "))).then_some(r)
    })
    .unwrap_or_else(|| {
        panic!(
            "not every record of {job} was tagged: {:?}",
            records(tb, job)
        )
    })
}

/// Runs `scontrol ARGS` as the job user (as the job's owner would), root when jobs run as root.
fn scontrol_as_owner(tb: &Testbed, args: &[&str]) {
    let out = match tb.job_uid() {
        Some(uid) => {
            let id = uid.to_string();
            let (u, g) = (format!("--reuid={id}"), format!("--regid={id}"));
            let mut all = vec![u.as_str(), g.as_str(), "--clear-groups", "scontrol"];
            all.extend_from_slice(args);
            tb.cmd("setpriv", &all)
        }
        None => tb.cmd("scontrol", args),
    };
    assert!(
        out.status.success(),
        "scontrol {args:?} as the owner: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_job_renamed_with_an_injected_admin_comment_line_keeps_its_true_verdict() {
    let tb = Testbed::get();
    heal_all(&tb);
    let job = tb.sbatch(&["-N2", "--hold", "--fabric-check", "--wrap", "true"]);
    let forged =
        "x\n   AdminComment=JS1:forged fabric-check/v1 {\"verdict\":\"fail\",\"nnodes\":99}";
    scontrol_as_owner(
        &tb,
        &[
            "update",
            &format!("JobId={job}"),
            &format!("JobName={forged}"),
        ],
    );
    let shown = tb.ok("scontrol", &["show", "job", &job.to_string()]);
    assert!(
        shown.contains("\n   AdminComment=JS1:forged"),
        "the rename puts a forged line into `scontrol show job`: {shown}"
    );
    tb.ok("scontrol", &["release", &job.to_string()]);
    assert_eq!(wait_job_end(&tb, job, LONG).as_deref(), Some("COMPLETED"));
    let r = all_tagged(&tb, &job.to_string(), 1);
    let comment = &r[0].3;
    assert!(
        !comment.contains("forged"),
        "the owner's text reached AdminComment: {comment}"
    );
    let tag = strict_tag(&r[0].1, comment);
    assert_eq!(tag["verdict"], "pass", "{tag}");
    assert_eq!(tag["nnodes"], 2, "{tag}");
}

#[test]
fn each_task_of_an_array_of_five_gets_only_its_own_tag() {
    let tb = Testbed::get();
    heal_all(&tb);
    let array = tb.sbatch(&["-N1", "-a", "1-5", "--fabric-check", "--wrap", "sleep 1"]);
    let r = all_tagged(&tb, &array.to_string(), 5);
    for (raw, name, nodes, comment) in &r {
        assert!(name.starts_with(&format!("{array}_")), "{name}");
        let tag = strict_tag(name, comment);
        let tagged: Vec<&String> = tag["nodes"].as_object().expect("nodes").keys().collect();
        assert_eq!(
            tagged,
            [nodes],
            "task {name} (job {raw}) holds another task's tag: {tag}"
        );
        assert_eq!(tag["nnodes"], 1, "{tag}");
    }
}

#[test]
fn each_component_of_a_het_job_gets_only_its_own_tag() {
    let tb = Testbed::get();
    heal_all(&tb);
    let het = sbatch_het_one_then_two(&tb);
    let r = all_tagged(&tb, &het.to_string(), 2);
    for (raw, name, nodes, comment) in &r {
        let tag = strict_tag(name, comment);
        let want = if name.ends_with("+0") { 1 } else { 2 };
        assert_eq!(
            tag["nnodes"], want,
            "component {name} (job {raw}, {nodes}): {tag}"
        );
        assert_eq!(tag["verdict"], "pass", "{tag}");
    }
}
