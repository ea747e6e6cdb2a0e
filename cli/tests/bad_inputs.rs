//! Every command's inputs, bad in every way a person or a broken pipe makes them bad: the
//! message names the file and what is wrong (and what to do), says it once, and the exit
//! status says the command could not do its work (3; `check-config`: 2, "the configuration is
//! not usable").

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// The inputs, written for this test in the shapes that break readers.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        let history =
            std::fs::read_to_string(fixtures.join("sacct/generated/history.txt")).unwrap();
        let json =
            std::fs::read_to_string(fixtures.join("sacct/generated/history-22.05.json")).unwrap();
        let cost = std::fs::read_to_string(fixtures.join("sacct/generated/cost.toml")).unwrap();
        let w = |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).unwrap();
        std::fs::create_dir(dir.path().join("a-directory")).unwrap();
        w("empty", b"");
        w(
            "binary",
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\xff\xfe\x00binary",
        );
        w("history.txt", history.as_bytes());
        w("truncated.json", &json.as_bytes()[..json.len() / 3]);
        w("truncated.txt", &history.as_bytes()[..200]);
        w(
            "misspelt-column.txt",
            history.replacen("|State|", "|Stat|", 1).as_bytes(),
        );
        w(
            "job-name-column.txt",
            history
                .replacen("JobID|", "JobID|JobName|", 1)
                .lines()
                .enumerate()
                .map(|(i, l)| match (i, l.split_once('|')) {
                    (0, _) | (_, None) => format!("{l}\n"),
                    (_, Some((id, rest))) => format!("{id}|train|{rest}\n"),
                })
                .collect::<String>()
                .as_bytes(),
        );
        w(
            "cost-misspelt.toml",
            cost.replacen("hours_per_week", "hours_per_wek", 1)
                .as_bytes(),
        );
        w(
            "cost-type.toml",
            cost.replacen("gpus = 128", "gpus = \"many\"", 1).as_bytes(),
        );
        w(
            "cost-negative.toml",
            cost.replacen("years = 4 }", "years = -4 }", 1).as_bytes(),
        );
        w(
            "cost-huge.toml",
            cost.replacen("gpus = 128", "gpus = 99999999999999999999", 1)
                .as_bytes(),
        );
        w("cfg-key.toml", b"[[node]]\nmatch = \"n1\"\ngpu = 8\n");
        w(
            "cfg-counter.toml",
            b"[counters.symbol_eror]\nfail_per_hour = 10.0\n",
        );
        w(
            "cfg-type.toml",
            b"[[node]]\nmatch = \"n1\"\ngpus = \"eight\"\n",
        );
        w(
            "cfg-negative.toml",
            b"[[node]]\nmatch = \"n1\"\ngpus = -8\n",
        );
        w(
            "cfg-huge.toml",
            b"[[node]]\nmatch = \"n1\"\ngpus = 99999999999\n",
        );
        w(
            "cfg-truncated.toml",
            b"[[node]]\nmatch = \"n1\"\n[[node.ports]\n",
        );
        w(
            "thr-misspelt.toml",
            b"min_busbw = [{ size = \"8G\", gbpss = 300 }]\n",
        );
        w("thr-type.toml", b"max_cv_pct = \"lots\"\n");
        w("thr-negative.toml", b"max_cv_pct = -5\n");
        w(
            "thr-huge.toml",
            b"max_outlier_runs = 99999999999999999999\n",
        );
        Self { dir }
    }

    fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// One bad input: the command line (`{F}` is replaced by the case's file, `{H}` by a good
/// sacct history, `{N}` by a good nccl-tests output), the exit status, and what the message
/// must say.
struct Case {
    args: &'static str,
    file: &'static str,
    rc: i32,
    says: &'static [&'static str],
}

const CASES: &[Case] = &[
    // report --input
    Case {
        args: "report -f json -i {F}",
        file: "missing",
        rc: 3,
        says: &[
            "cannot read {F} (given with --input); check the path",
            "No such file",
        ],
    },
    Case {
        args: "report -f json -i {F}",
        file: "a-directory",
        rc: 3,
        says: &["{F} (given with --input) is a directory; give the file itself"],
    },
    Case {
        args: "report -f json -i {F}",
        file: "empty",
        rc: 3,
        says: &["{F}:line 1: the input is empty; did sacct print anything?"],
    },
    Case {
        args: "report -f json --input-format text -i {F}",
        file: "binary",
        rc: 3,
        says: &["cannot read {F}", "UTF-8"],
    },
    Case {
        args: "report -f json -i {F}",
        file: "truncated.json",
        rc: 3,
        says: &[
            "{F}:line ",
            "the input ends early",
            "re-run sacct and keep its whole output",
        ],
    },
    Case {
        args: "report -f json -i {F}",
        file: "truncated.txt",
        rc: 3,
        says: &["{F}:2: ", "was the output cut"],
    },
    Case {
        args: "report -f json -i {F}",
        file: "misspelt-column.txt",
        rc: 3,
        says: &["{F}:1: ", "no `State` column", "run `sacct -P -o JobID"],
    },
    Case {
        args: "report -f json -i {F}",
        file: "job-name-column.txt",
        rc: 3,
        says: &[
            "{F}:1: ",
            "names `JobName`, a column a job's user writes as free text",
            "export with `sacct --json` instead",
        ],
    },
    // report --cost
    Case {
        args: "report -f json -i {H} --cost {F}",
        file: "missing",
        rc: 3,
        says: &[
            "cannot read cost file {F}: No such file",
            "check the path given to --cost",
        ],
    },
    Case {
        args: "report -f json -i {H} --cost {F}",
        file: "a-directory",
        rc: 3,
        says: &[
            "cannot read cost file {F}",
            "check the path given to --cost",
        ],
    },
    Case {
        args: "report -f json -i {H} --cost {F}",
        file: "empty",
        rc: 3,
        says: &["cost file {F} is invalid: no [fabric.NAME] entry"],
    },
    Case {
        args: "report -f json -i {H} --cost {F}",
        file: "binary",
        rc: 3,
        says: &["cannot read cost file {F}", "UTF-8"],
    },
    Case {
        args: "report -f json -i {H} --cost {F}",
        file: "cost-misspelt.toml",
        rc: 3,
        says: &[
            "cost file {F} is invalid: line 22, column 1: unknown field `hours_per_wek`",
            "did you mean `hours_per_week`?",
            "see etc/cost.toml",
        ],
    },
    Case {
        args: "report -f json -i {H} --cost {F}",
        file: "cost-type.toml",
        rc: 3,
        says: &["cost file {F} is invalid: line 6, column 8: invalid type: string \"many\""],
    },
    Case {
        args: "report -f json -i {H} --cost {F}",
        file: "cost-negative.toml",
        rc: 3,
        says: &["cost file {F}: fabric `ib`: capital.compute_capacity.years must be above 0"],
    },
    Case {
        args: "report -f json -i {H} --cost {F}",
        file: "cost-huge.toml",
        rc: 3,
        says: &["cost file {F} is invalid: line 6, column 8: number too large"],
    },
    // report's dates and numbers
    Case {
        args: "report -f json -i {H} --start yesterday --end 2024-06-01",
        file: "",
        rc: 3,
        says: &[
            "--start `yesterday` is not a time: write YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] (UTC) or Unix seconds",
        ],
    },
    Case {
        args: "report -f json -i {H} --start 2024-06-01",
        file: "",
        rc: 3,
        says: &["give both --start and --end with --input"],
    },
    Case {
        args: "report -f json -i {H} --start 2024-06-02 --end 2024-06-01",
        file: "",
        rc: 3,
        says: &["--end must be after --start"],
    },
    Case {
        args: "report -f json -i {H} --threads 0",
        file: "",
        rc: 3,
        says: &["--threads must be between 1 and 1024"],
    },
    // jobs --sacct-file
    Case {
        args: "jobs --sacct-file {F}",
        file: "missing",
        rc: 3,
        says: &[
            "cannot read {F} (given with --sacct-file); check the path",
            "No such file",
        ],
    },
    Case {
        args: "jobs --sacct-file {F}",
        file: "a-directory",
        rc: 3,
        says: &["{F} (given with --sacct-file) is a directory"],
    },
    Case {
        args: "jobs --sacct-file {F}",
        file: "empty",
        rc: 3,
        says: &["{F}: the input is empty; did sacct print anything?"],
    },
    Case {
        args: "jobs --sacct-file {F}",
        file: "binary",
        rc: 3,
        says: &[
            "{F} (given with --sacct-file) is not text",
            "not a compressed or binary one",
        ],
    },
    Case {
        args: "jobs --sacct-file {F}",
        file: "truncated.json",
        rc: 3,
        says: &["{F}:line ", "the input ends early"],
    },
    Case {
        args: "jobs --sacct-file {F}",
        file: "misspelt-column.txt",
        rc: 3,
        says: &["{F}:1: ", "no `State` column"],
    },
    Case {
        args: "jobs --sacct-file {H} --job garbage",
        file: "",
        rc: 3,
        says: &["--job `garbage` is not a job id"],
    },
    Case {
        args: "jobs --sacct-file {H} --since 2024-13-45",
        file: "",
        rc: 3,
        says: &["--since `2024-13-45` is not a time: write YYYY-MM-DD"],
    },
    // accept
    Case {
        args: "accept -f json {F}",
        file: "missing",
        rc: 3,
        says: &["{F}: cannot read", "No such file"],
    },
    Case {
        args: "accept -f json {F}",
        file: "a-directory",
        rc: 3,
        says: &["{F}: cannot read", "Is a directory"],
    },
    Case {
        args: "accept -f json {F}",
        file: "empty",
        rc: 3,
        says: &["{F}: no nccl-tests result table found; is this nccl-tests output?"],
    },
    Case {
        args: "accept -f json {F}",
        file: "binary",
        rc: 3,
        says: &["{F}: no nccl-tests result table found"],
    },
    Case {
        args: "accept -f json {N} --thresholds {F}",
        file: "thr-misspelt.toml",
        rc: 3,
        says: &[
            "thresholds file {F} is invalid: line 1, column 29: unknown field `gbpss`",
            "did you mean `gbps`?",
        ],
    },
    Case {
        args: "accept -f json {N} --thresholds {F}",
        file: "thr-type.toml",
        rc: 3,
        says: &["thresholds file {F} is invalid: line 1, column 14: invalid type: string \"lots\""],
    },
    Case {
        args: "accept -f json {N} --thresholds {F}",
        file: "thr-negative.toml",
        rc: 3,
        says: &["thresholds file {F}: max_cv_pct = -5 is not a number ≥ 0"],
    },
    Case {
        args: "accept -f json {N} --thresholds {F}",
        file: "thr-huge.toml",
        rc: 3,
        says: &["thresholds file {F} is invalid: line 1"],
    },
    Case {
        args: "accept -f json {N} --thresholds {F}",
        file: "missing",
        rc: 3,
        says: &["cannot read thresholds file {F}", "No such file"],
    },
    // check-config --config
    Case {
        args: "check-config --config {F}",
        file: "missing",
        rc: 2,
        says: &[
            "cannot read config {F}: No such file",
            "pass a readable file with --config",
        ],
    },
    Case {
        args: "check-config --config {F}",
        file: "a-directory",
        rc: 2,
        says: &[
            "cannot read config {F}",
            "pass a readable file with --config",
        ],
    },
    Case {
        args: "check-config --config {F}",
        file: "binary",
        rc: 2,
        says: &["cannot read config {F}", "UTF-8"],
    },
    Case {
        args: "check-config --config {F}",
        file: "cfg-key.toml",
        rc: 2,
        says: &[
            "config {F} is invalid: line 3, column 1: unknown field `gpu`",
            "did you mean `gpus`?",
        ],
    },
    Case {
        args: "check-config --config {F}",
        file: "cfg-counter.toml",
        rc: 2,
        says: &[
            "config {F}: [counters.symbol_eror]: no counter of that name is known",
            "did you mean `symbol_error`?",
        ],
    },
    Case {
        args: "check-config --config {F}",
        file: "cfg-type.toml",
        rc: 2,
        says: &[
            "config {F} is invalid: line 3, column 8: invalid type: string \"eight\", expected u32",
        ],
    },
    Case {
        args: "check-config --config {F}",
        file: "cfg-negative.toml",
        rc: 2,
        says: &[
            "config {F} is invalid: line 3, column 8: invalid value: integer `-8`, expected u32",
        ],
    },
    Case {
        args: "check-config --config {F}",
        file: "cfg-huge.toml",
        rc: 2,
        says: &["config {F} is invalid: line 3, column 8: invalid value: integer `99999999999`"],
    },
    Case {
        args: "check-config --config {F}",
        file: "cfg-truncated.toml",
        rc: 2,
        says: &["config {F} is invalid: line 3, column 13: invalid table header"],
    },
    // the probe, which reads the same configuration
    Case {
        args: "probe --format json --sysfs-root {D} --config {F}",
        file: "cfg-counter.toml",
        rc: 3,
        says: &[
            "config {F}: [counters.symbol_eror]",
            "did you mean `symbol_error`?",
        ],
    },
];

#[test]
fn every_bad_input_is_refused_once_with_the_file_and_what_to_do() {
    let files = Files::new();
    let good_nccl = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/nccl-tests/text/allreduce-2x8-run1.txt");
    let mut failures = Vec::new();
    for case in CASES {
        let f = files.p(case.file).display().to_string();
        let fill = |s: &str| {
            s.replace("{F}", &f)
                .replace("{H}", &files.p("history.txt").display().to_string())
                .replace("{N}", &good_nccl.display().to_string())
                .replace("{D}", &files.p("a-directory").display().to_string())
        };
        let args: Vec<String> = case.args.split(' ').map(fill).collect();
        let out = Command::cargo_bin("fabric-check")
            .unwrap()
            .args(&args)
            .output()
            .unwrap();
        let rc = out.status.code().unwrap_or(-1);
        // check-config prints its findings on stdout; every other command on stderr.
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            if args[0] == "check-config" {
                String::from_utf8_lossy(&out.stdout).into_owned()
            } else {
                String::new()
            }
        );
        let mut wrong = Vec::new();
        if rc != case.rc {
            wrong.push(format!("exit {rc}, want {}", case.rc));
        }
        for s in case.says {
            let s = fill(s);
            match said.matches(s.as_str()).count() {
                1 => {}
                0 => wrong.push(format!("does not say `{s}`")),
                n => wrong.push(format!("says `{s}` {n} times")),
            }
        }
        if said.matches("(os error").count() > 1 {
            wrong.push("repeats the OS error".into());
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "{}: {}\n  said: {said}",
                args.join(" "),
                wrong.join("; ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
