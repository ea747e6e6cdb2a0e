//! Synthetic Slurm accounting histories for tests and benchmarks (`scripts/gen-sacct` runs this).
//!
//! Writes `sacct --json` in Slurm 22.05's layout (`--schema 22.05`, pretty-printed like Slurm,
//! about 4 KB a job with steps and TRES) or the newer data_parser layout (`--schema new`), or
//! `sacct -P` text (`--format text`). Two fabrics by default, `ib` and `roce`, with different
//! failure, requeue, drain and step-time mixes; jobs carry `fabric-check/v1` tags (sometimes after
//! another tool's `JS1:` segment), a few carry none or a broken one. Deterministic for a seed.
//!
//! ```text
//! gen_sacct --jobs 1000000 --format json --schema 22.05 --seed 1 > history.json
//! ```

use std::io::{BufWriter, Write};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn f(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

struct Fabric {
    name: &'static str,
    /// Cumulative probabilities: failed, timeout, node_fail, cancelled, requeued (prolog drain).
    p_failed: f64,
    p_timeout: f64,
    p_node_fail: f64,
    p_cancelled: f64,
    p_drain: f64,
    p_late: f64,
    step_s: f64,
    /// Fabric-caused failures per node-hour of a run (a link or port lost mid-job, seen by the
    /// watch), and failures of anything else (code, storage, GPUs) per run-hour.
    p_fabric_fail_node_h: f64,
    p_other_fail_h: f64,
    checks: &'static [&'static str],
}

const FABRICS: [Fabric; 2] = [
    Fabric {
        name: "ib",
        p_failed: 0.03,
        p_timeout: 0.01,
        p_node_fail: 0.005,
        p_cancelled: 0.02,
        p_drain: 0.004,
        p_late: 0.02,
        step_s: 1.00,
        p_fabric_fail_node_h: 0.004,
        p_other_fail_h: 0.03,
        checks: &["ib.port_rate", "ib.counters", "ib.port_state", "gpu.count"],
    },
    Fabric {
        name: "roce",
        p_failed: 0.05,
        p_timeout: 0.02,
        p_node_fail: 0.01,
        p_cancelled: 0.02,
        p_drain: 0.012,
        p_late: 0.04,
        step_s: 1.07,
        p_fabric_fail_node_h: 0.015,
        p_other_fail_h: 0.03,
        checks: &[
            "roce.pfc",
            "roce.ecn",
            "roce.mtu",
            "roce.retrans",
            "roce.gid",
        ],
    },
];

struct Args {
    jobs: u64,
    text: bool,
    new_schema: bool,
    seed: u64,
    start: i64,
    nodes: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        jobs: 1000,
        text: false,
        new_schema: false,
        seed: 1,
        start: 1_714_521_600,
        nodes: 512,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or_else(|| format!("{k} needs a value"));
        match k.as_str() {
            "--jobs" => a.jobs = v()?.parse().map_err(|_| "--jobs wants a count")?,
            "--format" => {
                a.text = match v()?.as_str() {
                    "json" => false,
                    "text" => true,
                    o => return Err(format!("--format {o}: use json or text")),
                }
            }
            "--schema" => {
                a.new_schema = match v()?.as_str() {
                    "22.05" => false,
                    "new" => true,
                    o => return Err(format!("--schema {o}: use 22.05 or new")),
                }
            }
            "--seed" => a.seed = v()?.parse().map_err(|_| "--seed wants a number")?,
            "--start" => a.start = v()?.parse().map_err(|_| "--start wants Unix seconds")?,
            "--nodes-per-fabric" => {
                a.nodes = v()?
                    .parse()
                    .map_err(|_| "--nodes-per-fabric wants a count")?
            }
            "-h" | "--help" => {
                return Err("usage: gen_sacct [--jobs N] [--format json|text] [--schema 22.05|new] [--seed N] [--start UNIX_S] [--nodes-per-fabric N]".into());
            }
            o => return Err(format!("unknown argument {o}")),
        }
    }
    Ok(a)
}

struct Job {
    id: u64,
    fabric: usize,
    user: String,
    account: &'static str,
    state: &'static str,
    submit: i64,
    eligible: i64,
    start: i64,
    end: i64,
    elapsed: i64,
    nnodes: u32,
    first_node: u32,
    gpus: u32,
    comment: String,
    restarts: u32,
}

fn iso(t: i64) -> String {
    fabric_report::report::sacct_text::utc_text(t)
}

fn make_job(r: &mut Rng, a: &Args, i: u64, clock: &mut i64) -> Job {
    let fabric = (r.next() % 2) as usize;
    let f = &FABRICS[fabric];
    // Arrivals keep both fabrics about 80 % busy: mean node-seconds per job is 3 nodes × 7800 s.
    let mean_gap = (3.0 * 7800.0 / (1.6 * f64::from(a.nodes))).max(1.0) as u64;
    *clock += r.range(0, 2 * mean_gap) as i64;
    let submit = *clock;
    let eligible = submit + r.range(0, 5) as i64;
    let start = eligible + r.range(0, 1800) as i64;
    let nnodes = [1u32, 1, 2, 2, 4, 8][r.range(0, 5) as usize].min(a.nodes);
    let first_node = r.range(1, u64::from(a.nodes - nnodes + 1)) as u32;
    let gpus = nnodes * 8;
    let mut elapsed = r.range(600, 4 * 3600) as i64;
    let x = r.f();
    let mut c = 0.0;
    let mut state = "COMPLETED";
    let mut outcome = "accepted";
    let mut drained_check: Option<&str> = None;
    for (p, s, o) in [
        (f.p_failed, "FAILED", "failed"),
        (f.p_timeout, "TIMEOUT", "timeout"),
        (f.p_node_fail, "NODE_FAIL", "failed"),
        (f.p_cancelled, "CANCELLED by 1000", "killed"),
        (f.p_drain, "REQUEUED", "preempted"),
    ] {
        c += p;
        if x < c && state == "COMPLETED" {
            state = s;
            outcome = o;
            if s == "REQUEUED" {
                drained_check = Some(f.checks[r.range(0, f.checks.len() as u64 - 1) as usize]);
                elapsed = r.range(1, 20) as i64;
            } else if s == "NODE_FAIL" && r.f() < 0.5 {
                drained_check = Some(f.checks[r.range(0, f.checks.len() as u64 - 1) as usize]);
            }
        }
    }
    let end = start + elapsed;
    let node = |k: u32| format!("{}{:03}", f.name, first_node + k);
    let mut nodes_json = String::new();
    let verdict = if drained_check.is_some() {
        "fail"
    } else {
        "pass"
    };
    if let Some(check) = drained_check {
        nodes_json = format!(
            "\"{}\":{{\"verdict\":\"fail\",\"checks\":[\"{check}\"],\"probe_ms\":{},\"drained\":true}}",
            node(0),
            r.range(20, 900)
        );
    }
    let counts = if drained_check.is_some() {
        if nnodes > 1 {
            format!("{{\"pass\":{},\"fail\":1}}", nnodes - 1)
        } else {
            "{\"fail\":1}".into()
        }
    } else {
        format!("{{\"pass\":{nnodes}}}")
    };
    let run = if state == "REQUEUED" {
        String::new()
    } else {
        let p50 = f.step_s * (0.95 + 0.1 * r.f()) * (1.0 + 0.02 * f64::from(nnodes.ilog2()));
        let p95 = p50 * (1.15 + 0.35 * r.f());
        let steps = (elapsed as f64 / p50 * 0.9) as u64;
        let ckpt_n = (elapsed / 900).max(1) as u64;
        let ckpt_total = ckpt_n as f64 * (8.0 + 20.0 * r.f());
        let retries = u64::from(r.f() < 0.03);
        let late = state == "COMPLETED" && r.f() < f.p_late;
        let accepted = state == "COMPLETED";
        let outputs = if r.f() < 0.2 {
            format!(",\"outputs\":{}", r.range(1000, 50_000))
        } else {
            String::new()
        };
        let (ett, during, restores) =
            ett_model(a.seed, i, f, start, elapsed, p50, nnodes, &node, accepted);
        format!(
            ",\"run\":{{\"steps\":{steps},\"step_p50_s\":{p50:.4},\"step_p95_s\":{p95:.4},\"ckpt_n\":{ckpt_n},\"ckpt_total_s\":{ckpt_total:.1},\"ckpt_max_s\":{:.1},\"retries\":{retries},\"requeues\":0{outputs},\"duration_s\":{elapsed}.0,\"outcome\":\"{}\",\"accepted\":{accepted},\"on_time\":{}{restores}{ett}}}{during}",
            ckpt_total / ckpt_n as f64 * 1.3,
            if accepted { "accepted" } else { outcome },
            !late
        )
    };
    let tag = format!(
        "fabric-check/v1 {{\"verdict\":\"{verdict}\",\"mode\":\"quick\",\"probed_at\":{start},\"nnodes\":{nnodes},\"counts\":{counts},\"nodes\":{{{nodes_json}}}{run}}}"
    );
    let roll = r.f();
    let comment = if roll < 0.01 {
        String::new()
    } else if roll < 0.012 {
        "fabric-check/v1 {broken".to_string()
    } else if roll < 0.3 {
        format!("JS1:Shg4AAAAAAAAAH1Pz0+D {tag}")
    } else {
        tag
    };
    Job {
        id: 1000 + i,
        fabric,
        user: format!("user{:02}", r.range(1, 40)),
        account: ["ml-train", "ml-infer", "research"][r.range(0, 2) as usize],
        state,
        submit,
        eligible,
        start,
        end,
        elapsed,
        nnodes,
        first_node,
        gpus,
        comment,
        restarts: u32::from(state == "REQUEUED"),
    }
}

/// The run's timeline for effective training time, drawn from its own generator (so the rest
/// of the history is what it was without it): failures of the fabric (a `fail` watch event on
/// one of the job's nodes about 20 s before, and sometimes `fabric-run`'s notice) and of anything
/// else, each losing the steps since the last checkpoint (every 900 s) and recovering after a
/// restart and a restore; a run that did not end accepted fails once more at its end (the
/// fabric's when its tag's verdict is `fail`). Returns the `ett` member, the `during` member and the
/// restore counts.
#[allow(clippy::too_many_arguments)]
fn ett_model(
    seed: u64,
    i: u64,
    f: &Fabric,
    start: i64,
    elapsed: i64,
    p50: f64,
    nnodes: u32,
    node: &dyn Fn(u32) -> String,
    accepted: bool,
) -> (String, String, String) {
    let mut r =
        Rng((seed ^ 0x9E37_79B9_7F4A_7C15).wrapping_add(i.wrapping_mul(0xD1B5_4A32_D192_ED03)) | 1);
    let startup = r.range(60, 300) as f64;
    let first_step = start as f64 + startup;
    let hours = elapsed as f64 / 3600.0;
    let mut at = Vec::new();
    for h in 0..(hours.ceil() as u64) {
        if r.f() < f.p_fabric_fail_node_h * f64::from(nnodes) {
            at.push((h as f64 * 3600.0 + r.f() * 3600.0, true));
        }
        if r.f() < f.p_other_fail_h {
            at.push((h as f64 * 3600.0 + r.f() * 3600.0, false));
        }
    }
    at.retain(|(t, _)| *t > startup + 60.0 && *t < elapsed as f64 - 600.0);
    at.sort_by(|a, b| a.0.total_cmp(&b.0));
    at.truncate(3);
    let mut failures = Vec::new();
    let mut during = Vec::new();
    let (mut lost_total, mut down, mut restores, mut restore_s) = (0.0, 0.0, 0u64, 0.0);
    for (t, fabric) in &at {
        let lost = r.f() * 900.0;
        let restore = 20.0 + r.f() * 60.0;
        let recover = 60.0 + r.f() * 240.0 + restore;
        let at_s = start as f64 + t;
        lost_total += lost;
        down += recover;
        restores += 1;
        restore_s += restore;
        let notice = *fabric && r.f() < 0.5;
        failures.push(format!(
            "{{\"at_s\":{at_s:.1},\"recover_s\":{recover:.1},\"lost_steps\":{},\"lost_s\":{lost:.1}{}}}",
            (lost / p50) as u64,
            if notice { ",\"fabric_notice\":true" } else { "" }
        ));
        if *fabric {
            let n = node(r.range(0, u64::from(nnodes) - 1) as u32);
            let seen = at_s as u64 - 20;
            during.push(format!(
                "{{\"node\":\"{n}\",\"rises\":{{}},\"verdict\":\"fail\",\"watch\":[{{\"check\":\"{}\",\"message\":\"port 1 went down\",\"seen_at_s\":{seen},\"into_job_s\":{},\"drained\":true}}]}}",
                f.checks[0],
                seen as i64 - start
            ));
        }
    }
    let mut n = failures.len();
    if !accepted {
        // The run ends failed: what it did since its last checkpoint is lost for good.
        let lost = (r.f() * 900.0).min(elapsed as f64 / 2.0);
        lost_total += lost;
        n += 1;
        failures.push(format!(
            "{{\"at_s\":{}.0,\"lost_steps\":{},\"lost_s\":{lost:.1}}}",
            start + elapsed,
            (lost / p50) as u64
        ));
    }
    let kept = (elapsed as f64 - startup - lost_total - down).max(0.0) * 0.97;
    let ett = format!(
        ",\"ett\":{{\"first_step_at_s\":{first_step:.1},\"kept_s\":{kept:.1},\"lost_s\":{lost_total:.1},\"failures_n\":{n}{}}}",
        if failures.is_empty() {
            String::new()
        } else {
            format!(",\"failures\":[{}]", failures.join(","))
        }
    );
    let during = if during.is_empty() {
        String::new()
    } else {
        format!(",\"during\":[{}]", during.join(","))
    };
    let restores = if restores > 0 {
        format!(",\"restore_n\":{restores},\"restore_total_s\":{restore_s:.1}")
    } else {
        String::new()
    };
    (ett, during, restores)
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn num(new: bool, v: i64) -> String {
    if new {
        format!("{{\"set\": true, \"infinite\": false, \"number\": {v}}}")
    } else {
        v.to_string()
    }
}

fn write_json_job(w: &mut impl Write, j: &Job, new: bool) -> std::io::Result<()> {
    let f = &FABRICS[j.fabric];
    let nodes = if j.nnodes == 1 {
        format!("{}{:03}", f.name, j.first_node)
    } else {
        format!(
            "{}[{:03}-{:03}]",
            f.name,
            j.first_node,
            j.first_node + j.nnodes - 1
        )
    };
    let state = if new {
        format!("[\"{}\"]", j.state.split(' ').next().unwrap_or(""))
    } else {
        format!("\"{}\"", j.state.split(' ').next().unwrap_or(""))
    };
    let ec = if new {
        "{\"status\": [\"SUCCESS\"], \"return_code\": {\"set\": true, \"infinite\": false, \"number\": 0}, \"signal\": {\"id\": {\"set\": false, \"infinite\": false, \"number\": 0}, \"name\": \"\"}}".to_string()
    } else {
        "{\n        \"status\": \"SUCCESS\",\n        \"return_code\": 0\n      }".to_string()
    };
    let tres = |cpus: u32, mem: u64, gpus: u32, nodes: u32| {
        format!(
            "[\n          {{\n            \"type\": \"cpu\",\n            \"name\": \"\",\n            \"id\": 1,\n            \"count\": {cpus}\n          }},\n          {{\n            \"type\": \"mem\",\n            \"name\": \"\",\n            \"id\": 2,\n            \"count\": {mem}\n          }},\n          {{\n            \"type\": \"node\",\n            \"name\": \"\",\n            \"id\": 4,\n            \"count\": {nodes}\n          }},\n          {{\n            \"type\": \"billing\",\n            \"name\": \"\",\n            \"id\": 5,\n            \"count\": {cpus}\n          }},\n          {{\n            \"type\": \"gres\",\n            \"name\": \"gpu\",\n            \"id\": 1001,\n            \"count\": {gpus}\n          }}\n        ]"
        )
    };
    let cpus = j.nnodes * 64;
    let mem = u64::from(j.nnodes) * 512_000;
    let steps = if j.state == "REQUEUED" {
        "[]".to_string()
    } else {
        let mut s = String::from("[");
        {
            let (k, name) = ("0", "python");
            s.push_str(&format!(
                "\n        {{\n          \"time\": {{\n            \"elapsed\": {e},\n            \"end\": {end},\n            \"start\": {start},\n            \"suspended\": 0,\n            \"system\": {{\n              \"seconds\": 12,\n              \"microseconds\": 345\n            }},\n            \"total\": {{\n              \"seconds\": {tot},\n              \"microseconds\": 0\n            }},\n            \"user\": {{\n              \"seconds\": {tot},\n              \"microseconds\": 0\n            }}\n          }},\n          \"exit_code\": {ec},\n          \"nodes\": {{\n            \"count\": {nn},\n            \"range\": \"{nodes}\"\n          }},\n          \"tasks\": {{\n            \"count\": {nn}\n          }},\n          \"pid\": \"\",\n          \"kill_request_user\": null,\n          \"state\": \"COMPLETED\",\n          \"statistics\": {{\n            \"CPU\": {{\n              \"actual_frequency\": 2000000\n            }},\n            \"energy\": {{\n              \"consumed\": 0\n            }}\n          }},\n          \"step\": {{\n            \"job_id\": {id},\n            \"het\": {{\n              \"component\": null\n            }},\n            \"id\": \"{id}.{k}\",\n            \"name\": \"{name}\"\n          }},\n          \"task\": {{\n            \"distribution\": \"Block\"\n          }},\n          \"tres\": {{\n            \"requested\": {{\n              \"max\": [],\n              \"min\": [],\n              \"average\": [],\n              \"total\": []\n            }},\n            \"consumed\": {{\n              \"max\": [],\n              \"min\": [],\n              \"average\": [],\n              \"total\": []\n            }},\n            \"allocated\": []\n          }}\n        }}",
                e = j.elapsed,
                end = j.end,
                start = j.start,
                tot = j.elapsed * 60,
                nn = j.nnodes,
                id = j.id,
            ));
        }
        s.push_str("\n      ]");
        s
    };
    let restart = if new {
        format!("\n      \"restart_cnt\": {},", j.restarts)
    } else {
        String::new()
    };
    write!(
        w,
        "    {{\n      \"account\": \"{acct}\",\n      \"comment\": {{\n        \"administrator\": {comment},\n        \"job\": \"\",\n        \"system\": \"\"\n      }},\n      \"allocation_nodes\": {nn},\n      \"array\": {{\n        \"job_id\": 0,\n        \"limits\": {{\n          \"max\": {{\n            \"running\": {{\n              \"tasks\": 0\n            }}\n          }}\n        }},\n        \"task\": null,\n        \"task_id\": {tid}\n      }},\n      \"association\": {{\n        \"account\": \"{acct}\",\n        \"cluster\": \"gpucluster\",\n        \"partition\": null,\n        \"user\": \"{user}\"\n      }},\n      \"cluster\": \"gpucluster\",\n      \"constraints\": \"\",\n      \"container\": \"\",\n      \"derived_exit_code\": {ec},\n      \"time\": {{\n        \"elapsed\": {elapsed},\n        \"eligible\": {eligible},\n        \"end\": {end},\n        \"start\": {start},\n        \"submission\": {submit},\n        \"suspended\": 0,\n        \"system\": {{\n          \"seconds\": 12,\n          \"microseconds\": 345\n        }},\n        \"limit\": {limit},\n        \"total\": {{\n          \"seconds\": 0,\n          \"microseconds\": 0\n        }},\n        \"user\": {{\n          \"seconds\": 0,\n          \"microseconds\": 0\n        }}\n      }},\n      \"exit_code\": {ec},\n      \"flags\": [\n        \"CLEAR_SCHEDULING\",\n        \"STARTED_ON_SUBMIT\"\n      ],\n      \"group\": \"users\",\n      \"het\": {{\n        \"job_id\": 0,\n        \"job_offset\": null\n      }},\n      \"job_id\": {id},\n      \"name\": \"train-{id}\",\n      \"mcs\": {{\n        \"label\": \"\"\n      }},\n      \"nodes\": \"{nodes}\",\n      \"partition\": \"{part}\",\n      \"priority\": 4294901759,\n      \"qos\": \"normal\",\n      \"required\": {{\n        \"CPUs\": {cpus},\n        \"memory\": 512000\n      }},\n      \"kill_request_user\": null,{restart}\n      \"reservation\": {{\n        \"id\": 0,\n        \"name\": 0\n      }},\n      \"state\": {{\n        \"current\": {state},\n        \"reason\": \"None\"\n      }},\n      \"steps\": {steps},\n      \"tres\": {{\n        \"allocated\": {alloc},\n        \"requested\": {req}\n      }},\n      \"user\": \"{user}\",\n      \"wckey\": {{\n        \"wckey\": \"\",\n        \"flags\": []\n      }},\n      \"working_directory\": \"/home/{user}/run\"\n    }}",
        acct = j.account,
        comment = json_str(&j.comment),
        nn = j.nnodes,
        tid = if new {
            num(true, 0).replace("true", "false")
        } else {
            "null".into()
        },
        user = j.user,
        elapsed = j.elapsed,
        eligible = num(new, j.eligible),
        end = j.end,
        start = j.start,
        submit = j.submit,
        limit = num(new, 300),
        id = j.id,
        part = f.name,
        alloc = tres(cpus, mem, j.gpus, j.nnodes),
        req = tres(cpus, mem, j.gpus, j.nnodes),
    )
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gen_sacct: {e}");
            std::process::exit(2);
        }
    };
    let mut r = Rng(a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let out = std::io::stdout();
    let mut w = BufWriter::with_capacity(1 << 20, out.lock());
    let mut clock = a.start;
    let res = (|| -> std::io::Result<()> {
        if a.text {
            writeln!(
                w,
                "JobID|Partition|Account|User|Cluster|QOS|State|Submit|Eligible|Start|End|ElapsedRaw|NNodes|AllocTRES|AdminComment"
            )?;
            for i in 0..a.jobs {
                let j = make_job(&mut r, &a, i, &mut clock);
                let f = &FABRICS[j.fabric];
                writeln!(
                    w,
                    "{}|{}|{}|{}|gpucluster|normal|{}|{}|{}|{}|{}|{}|{}|billing={c},cpu={c},gres/gpu={g},mem={m}M,node={n}|{}",
                    j.id,
                    f.name,
                    j.account,
                    j.user,
                    j.state,
                    iso(j.submit),
                    iso(j.eligible),
                    iso(j.start),
                    iso(j.end),
                    j.elapsed,
                    j.nnodes,
                    j.comment,
                    c = j.nnodes * 64,
                    g = j.gpus,
                    m = u64::from(j.nnodes) * 512_000,
                    n = j.nnodes
                )?;
                if j.state != "REQUEUED" {
                    writeln!(
                        w,
                        "{}.batch||{}|{}|gpucluster||COMPLETED|{}|{}|{}|{}|{}|1|cpu=64,mem=512000M,node=1|",
                        j.id,
                        j.account,
                        j.user,
                        iso(j.submit),
                        iso(j.eligible),
                        iso(j.start),
                        iso(j.end),
                        j.elapsed
                    )?;
                }
            }
        } else {
            let meta = if a.new_schema {
                "{\n  \"meta\": {\n    \"plugin\": {\n      \"type\": \"openapi/slurmdbd\",\n      \"name\": \"Slurm OpenAPI slurmdbd\",\n      \"data_parser\": \"data_parser/v0.0.40\"\n    },\n    \"client\": {\n      \"source\": \"/dev/pts/0\",\n      \"user\": \"root\",\n      \"group\": \"root\"\n    },\n    \"command\": [\n      \"sacct\",\n      \"--json\"\n    ],\n    \"slurm\": {\n      \"version\": {\n        \"major\": \"23\",\n        \"micro\": \"4\",\n        \"minor\": \"11\"\n      },\n      \"release\": \"23.11.4\",\n      \"cluster\": \"gpucluster\"\n    }\n  },\n  \"jobs\": [\n"
            } else {
                "{\n  \"meta\": {\n    \"plugin\": {\n      \"type\": \"openapi\\/dbv0.0.38\",\n      \"name\": \"Slurm OpenAPI DB v0.0.38\"\n    },\n    \"Slurm\": {\n      \"version\": {\n        \"major\": 22,\n        \"micro\": 8,\n        \"minor\": 5\n      },\n      \"release\": \"22.05.8\"\n    }\n  },\n  \"errors\": [\n  ],\n  \"jobs\": [\n"
            };
            w.write_all(meta.as_bytes())?;
            for i in 0..a.jobs {
                let j = make_job(&mut r, &a, i, &mut clock);
                if i > 0 {
                    w.write_all(b",\n")?;
                }
                write_json_job(&mut w, &j, a.new_schema)?;
            }
            w.write_all(b"\n  ]")?;
            if a.new_schema {
                w.write_all(b",\n  \"warnings\": [],\n  \"errors\": []")?;
            }
            w.write_all(b"\n}\n")?;
        }
        w.flush()
    })();
    if let Err(e) = res
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("gen_sacct: {e}");
        std::process::exit(1);
    }
}
