//! The plugin loaded by real Slurm: srun, sbatch, salloc, slurmd and slurmstepd.

use fabric_e2e::Testbed;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_tests_jobs_run_as_an_unprivileged_user_so_the_plugins_owner_checks_are_exercised() {
    let tb = Testbed::get();
    let uid = tb
        .job_uid()
        .expect("the testbed names no job user: jobs would run as root");
    assert_ne!(uid, 0, "the job user is root");
    let out = tb.ok("srun", &["-N1", "--fabric-check=off", "id", "-u"]);
    assert_eq!(out.trim(), uid.to_string(), "srun id -u printed {out:?}");
}

#[test]
fn srun_sbatch_and_salloc_help_list_the_option() {
    let tb = Testbed::get();
    for tool in ["srun", "sbatch", "salloc"] {
        let out = tb.cmd(tool, &["--help"]);
        let text = stdout(&out) + &stderr(&out);
        assert!(
            text.contains("--fabric-check=quick|full|off"),
            "{tool} --help:\n{text}"
        );
    }
}

#[test]
fn an_invalid_value_is_refused_at_submission_naming_the_valid_values() {
    let tb = Testbed::get();
    for tool in ["sbatch", "srun"] {
        let args: &[&str] = if tool == "sbatch" {
            &["--fabric-check=bogus", "--wrap", "true"]
        } else {
            &["--fabric-check=bogus", "true"]
        };
        let out = tb.cmd(tool, args);
        assert!(
            !out.status.success(),
            "{tool} accepted --fabric-check=bogus"
        );
        let err = stderr(&out);
        assert!(
            err.contains("invalid --fabric-check value \"bogus\""),
            "{tool}: {err}"
        );
        assert!(err.contains("quick, full or off"), "{tool}: {err}");
    }
}

#[test]
fn every_node_of_a_four_node_srun_job_sees_quick_in_its_prolog() {
    let tb = Testbed::get();
    tb.resume_all();
    let out = tb.ok(
        "srun",
        &[
            "-N4",
            "--fabric-check=quick",
            "sh",
            "-c",
            "echo $SLURM_JOB_ID",
        ],
    );
    let job: u32 = out
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("job id");
    for node in ["n1", "n2", "n3", "n4"] {
        let lines = tb.prolog_lines(node, job);
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("prolog job={job} node={node} option=quick"))),
            "{node}: {lines:?}"
        );
    }
}

#[test]
fn a_job_without_the_option_sees_none_in_its_prolog() {
    let tb = Testbed::get();
    tb.resume_all();
    let job = tb.sbatch_wait(&["-N2", "--wrap", "true"]);
    let nodes = tb.ok(
        "sacct",
        &["-n", "-P", "-X", "-j", &job.to_string(), "-o", "NodeList"],
    );
    let mut seen = 0;
    for node in ["n1", "n2", "n3", "n4"] {
        let lines = tb.prolog_lines(node, job);
        if !lines.is_empty() {
            seen += 1;
            assert!(
                lines.iter().all(|l| l.contains("option=none")),
                "{node}: {lines:?}"
            );
        }
    }
    assert_eq!(
        seen, 2,
        "prolog lines on two nodes expected, job ran on {nodes}"
    );
}

#[test]
fn sbatch_and_salloc_jobs_carry_the_value_to_every_prolog() {
    let tb = Testbed::get();
    tb.resume_all();
    let job = tb.sbatch_wait(&["-N2", "--fabric-check=full", "--wrap", "true"]);
    let full: usize = ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| {
            tb.prolog_lines(n, job)
                .iter()
                .filter(|l| l.contains("option=full"))
                .count()
        })
        .sum();
    assert_eq!(full, 2, "sbatch job {job}");

    let out = tb.cmd(
        "salloc",
        &[
            "-N2",
            "--fabric-check=off",
            "sh",
            "-c",
            "echo JOB=$SLURM_JOB_ID",
        ],
    );
    let text = stdout(&out);
    let job: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("JOB="))
        .and_then(|j| j.trim().parse().ok())
        .unwrap_or_else(|| panic!("salloc printed no job id: {text} {}", stderr(&out)));
    let off: usize = ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| {
            tb.prolog_lines(n, job)
                .iter()
                .filter(|l| l.contains("option=off"))
                .count()
        })
        .sum();
    assert_eq!(off, 2, "salloc job {job}");
}

#[test]
fn check_config_accepts_the_testbed_plugstack() {
    let tb = Testbed::get();
    let bin = tb.dir.join("bin/fabric-check");
    let plugstack = tb.dir.join("etc/plugstack.conf");
    let out = tb.cmd(
        bin.to_str().expect("utf-8 path"),
        &[
            "check-config",
            "--plugstack",
            plugstack.to_str().expect("utf-8 path"),
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains(": ok"), "{}", stdout(&out));
}
