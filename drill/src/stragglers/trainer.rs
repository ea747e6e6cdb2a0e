//! The synthetic trainer a straggler round runs on every node, under `fabric-run --step-regex
//! '^step ([0-9]+)'` (`fabric-check drill-trainer`, as the job user).
//!
//! Each step is a fixed busy part ([`TrainerSpec::busy_ms`] of the thread's own CPU time, so
//! that a CPU cap stretches it), a small transfer over the node's own network path (when the
//! drill runs a path relay for the node: [`TrainerSpec::transfer_bytes`] sent to a loopback port,
//! which the drill's relay carries through the node's network namespace, and one byte back),
//! and a sleep that fills the step to [`TrainerSpec::step_ms`]; then it prints `step N`.
//!
//! Before every step it reads what the drill says to its node (`ctl-<node>` in the round's
//! folder, root's: [`Control`]): a factor that makes the step sleep longer (the job's own
//! slowdown on one node, `(factor - 1)` times its usual step more), a checkpoint count (each
//! new one is a checkpoint: `checkpoint begin`, a file written and synced, a pause, `checkpoint
//! end`), or stop. It tells the drill its pid and its usual times (`trainer-<node>` in its own
//! folder: [`Status`]), from which the drill sizes a CPU cap or a path's rate.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a trainer runs.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerSpec {
    /// The round's folder (root's): `ctl-<node>`, `path-<node>`.
    pub control: PathBuf,
    /// The job's own folder: `trainer-<node>`, `ckpt-<node>`.
    pub out: PathBuf,
    /// This node.
    pub node: String,
    /// A step's usual length, milliseconds.
    pub step_ms: u64,
    /// CPU time each step burns, milliseconds.
    pub busy_ms: u64,
    /// Bytes each step sends over the node's path (0: none).
    pub transfer_bytes: usize,
    /// Bytes a checkpoint writes.
    pub ckpt_bytes: usize,
    /// How long a checkpoint pauses the training, milliseconds.
    pub ckpt_ms: u64,
    /// The longest the trainer runs, seconds.
    pub max_s: u64,
}

/// What the drill says to one node's trainer: `ctl-<node>`, `key=value` lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    /// Steps last this many times their usual length (1: as usual).
    pub factor: f64,
    /// Checkpoints asked for so far: each increase is one checkpoint.
    pub checkpoint: u32,
    /// Stop training.
    pub stop: bool,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            factor: 1.0,
            checkpoint: 0,
            stop: false,
        }
    }
}

impl Control {
    /// Parses a control file; what it does not understand is left at the default.
    pub fn parse(text: &str) -> Control {
        let mut c = Control::default();
        for (k, v) in text.lines().filter_map(|l| l.split_once('=')) {
            match k.trim() {
                "factor" => {
                    if let Ok(f) = v.trim().parse::<f64>()
                        && f.is_finite()
                        && (1.0..=20.0).contains(&f)
                    {
                        c.factor = f;
                    }
                }
                "checkpoint" => c.checkpoint = v.trim().parse().unwrap_or(0),
                "stop" => c.stop = v.trim() == "1",
                _ => {}
            }
        }
        c
    }

    /// The file's text.
    pub fn render(&self) -> String {
        format!(
            "factor={}\ncheckpoint={}\nstop={}\n",
            self.factor,
            self.checkpoint,
            u8::from(self.stop)
        )
    }
}

/// What a trainer tells the drill (`trainer-<node>`): its pid and its usual times, the medians
/// of its last steps at factor 1 (milliseconds).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Status {
    /// The trainer's pid.
    pub pid: u32,
    /// Steps so far.
    pub steps: u64,
    /// Its usual step, print to print.
    pub base_ms: f64,
    /// Its busy part, wall time.
    pub busy_wall_ms: f64,
    /// Its busy part, CPU time.
    pub busy_cpu_ms: f64,
    /// Its transfer, wall time.
    pub transfer_ms: f64,
}

impl Status {
    /// Parses a status file (`None` without a pid).
    pub fn parse(text: &str) -> Option<Status> {
        let mut s = Status::default();
        for (k, v) in text.lines().filter_map(|l| l.split_once('=')) {
            let f = || v.trim().parse::<f64>().ok().filter(|x| x.is_finite());
            match k.trim() {
                "pid" => s.pid = v.trim().parse().ok()?,
                "steps" => s.steps = v.trim().parse().unwrap_or(0),
                "base_ms" => s.base_ms = f().unwrap_or(0.0),
                "busy_wall_ms" => s.busy_wall_ms = f().unwrap_or(0.0),
                "busy_cpu_ms" => s.busy_cpu_ms = f().unwrap_or(0.0),
                "transfer_ms" => s.transfer_ms = f().unwrap_or(0.0),
                _ => {}
            }
        }
        (s.pid > 0).then_some(s)
    }

    /// The file's text.
    pub fn render(&self) -> String {
        format!(
            "pid={}\nsteps={}\nbase_ms={:.1}\nbusy_wall_ms={:.1}\nbusy_cpu_ms={:.1}\ntransfer_ms={:.1}\n",
            self.pid,
            self.steps,
            self.base_ms,
            self.busy_wall_ms,
            self.busy_cpu_ms,
            self.transfer_ms
        )
    }
}

/// The last few values of a figure, and their median.
#[derive(Debug, Default)]
struct Recent(VecDeque<f64>);

impl Recent {
    const KEEP: usize = 20;

    fn push(&mut self, v: f64) {
        if self.0.len() >= Self::KEEP {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    fn median(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.0.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    }
}

/// The extra sleep of a step at `factor`: `(factor - 1)` times the usual step.
pub fn extra_sleep(factor: f64, base_ms: f64) -> Duration {
    Duration::from_secs_f64(((factor - 1.0).max(0.0) * base_ms / 1000.0).max(0.0))
}

fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(Duration::ZERO, Duration::from)
}

/// Burns `d` of this thread's CPU time (whatever the wall time it takes: a capped CPU
/// stretches it).
pub fn burn_cpu(d: Duration) -> u64 {
    let until = thread_cpu() + d;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    loop {
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        if thread_cpu() >= until {
            return std::hint::black_box(x);
        }
    }
}

/// The node's path: a connection to the drill's relay, made again after a failure.
#[derive(Debug, Default)]
struct NodePath {
    port: Option<u16>,
    conn: Option<TcpStream>,
}

impl NodePath {
    /// Sends `buf` and waits for the one byte back; false when it could not.
    fn transfer(&mut self, buf: &[u8]) -> bool {
        let Some(port) = self.port else { return false };
        if self.conn.is_none() {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
                return false;
            };
            let _ = s.set_nodelay(true);
            let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
            let _ = s.set_write_timeout(Some(Duration::from_secs(20)));
            self.conn = Some(s);
        }
        let Some(s) = self.conn.as_mut() else {
            return false;
        };
        let mut ack = [0u8; 1];
        let ok = s.write_all(buf).is_ok() && s.read_exact(&mut ack).is_ok();
        if !ok {
            self.conn = None;
        }
        ok
    }
}

/// Reads a small file (at most 4 KiB).
fn read_small(path: &Path) -> Option<String> {
    let f = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    f.take(4096).read_to_string(&mut text).ok()?;
    Some(text)
}

/// Writes `text` as `dir/name` by rename (a reader never sees half of it).
fn write_atomic(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dir.join(name))
}

/// Runs the trainer until it is told to stop or [`TrainerSpec::max_s`] passed; its step lines
/// go to `out`.
pub fn run(spec: &TrainerSpec, out: &mut dyn Write) -> std::io::Result<()> {
    let node = &spec.node;
    let ctl_path = spec.control.join(format!("ctl-{node}"));
    let mut path = NodePath {
        port: read_small(&spec.control.join(format!("path-{node}")))
            .and_then(|t| t.trim().parse().ok()),
        conn: None,
    };
    let buf = vec![0x5au8; spec.transfer_bytes];
    let start = Instant::now();
    let (mut base, mut busy_wall, mut busy_cpu, mut xfer) = (
        Recent::default(),
        Recent::default(),
        Recent::default(),
        Recent::default(),
    );
    let mut status = Status {
        pid: std::process::id(),
        base_ms: spec.step_ms as f64,
        busy_cpu_ms: spec.busy_ms as f64,
        busy_wall_ms: spec.busy_ms as f64,
        ..Status::default()
    };
    write_atomic(&spec.out, &format!("trainer-{node}"), &status.render())?;
    let mut ckpts = 0u32;
    let mut last_print: Option<Instant> = None;
    let rest = Duration::from_millis(spec.step_ms.saturating_sub(spec.busy_ms));
    while start.elapsed() < Duration::from_secs(spec.max_s) {
        let ctl = read_small(&ctl_path)
            .map(|t| Control::parse(&t))
            .unwrap_or_default();
        if ctl.stop {
            break;
        }
        // Whether the interval that ends at this step's print is a usual step (factor 1, no
        // checkpoint): only those make the usual times.
        let mut usual = ctl.factor <= 1.0;
        if ctl.checkpoint > ckpts {
            ckpts = ctl.checkpoint;
            usual = false;
            checkpoint(spec, out)?;
        }
        let t0 = Instant::now();
        let c0 = thread_cpu();
        burn_cpu(Duration::from_millis(spec.busy_ms));
        let (b_wall, b_cpu) = (t0.elapsed(), thread_cpu().saturating_sub(c0));
        let t1 = Instant::now();
        let sent = path.transfer(&buf);
        let x = t1.elapsed();
        std::thread::sleep(rest);
        if ctl.factor > 1.0 {
            std::thread::sleep(extra_sleep(
                ctl.factor,
                base.median().unwrap_or(spec.step_ms as f64),
            ));
        }
        status.steps += 1;
        writeln!(out, "step {}", status.steps)?;
        out.flush()?;
        let now = Instant::now();
        if usual {
            if let Some(p) = last_print {
                base.push(now.duration_since(p).as_secs_f64() * 1000.0);
            }
            busy_wall.push(b_wall.as_secs_f64() * 1000.0);
            busy_cpu.push(b_cpu.as_secs_f64() * 1000.0);
            if sent {
                xfer.push(x.as_secs_f64() * 1000.0);
            }
        }
        last_print = Some(now);
        if usual && (status.steps <= 10 || status.steps.is_multiple_of(5)) {
            status.base_ms = base.median().unwrap_or(status.base_ms);
            status.busy_wall_ms = busy_wall.median().unwrap_or(status.busy_wall_ms);
            status.busy_cpu_ms = busy_cpu.median().unwrap_or(status.busy_cpu_ms);
            status.transfer_ms = xfer.median().unwrap_or(0.0);
            // A status that cannot be written leaves the last one: the drill reads that.
            let _ = write_atomic(&spec.out, &format!("trainer-{node}"), &status.render());
        }
    }
    Ok(())
}

/// One checkpoint: `checkpoint begin`, [`TrainerSpec::ckpt_bytes`] written to `ckpt-<node>`
/// and synced, a pause to [`TrainerSpec::ckpt_ms`] in all, `checkpoint end`.
fn checkpoint(spec: &TrainerSpec, out: &mut dyn Write) -> std::io::Result<()> {
    let t0 = Instant::now();
    writeln!(out, "checkpoint begin")?;
    out.flush()?;
    let path = spec.out.join(format!("ckpt-{}", spec.node));
    let mut f = std::fs::File::create(&path)?;
    let chunk = vec![0u8; 1 << 20];
    let mut left = spec.ckpt_bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n])?;
        left -= n;
    }
    f.sync_all()?;
    if let Some(rest) = Duration::from_millis(spec.ckpt_ms).checked_sub(t0.elapsed()) {
        std::thread::sleep(rest);
    }
    writeln!(out, "checkpoint end")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_file_says_the_factor_the_checkpoints_and_stop_and_ignores_the_rest() {
        let c = Control::parse("factor=1.5\ncheckpoint=2\nstop=0\njunk\nfactor2=9\n");
        assert_eq!(
            c,
            Control {
                factor: 1.5,
                checkpoint: 2,
                stop: false
            }
        );
        assert_eq!(Control::parse(&c.render()), c);
        // A factor outside what a trainer takes is the usual step.
        assert_eq!(Control::parse("factor=0.2").factor, 1.0);
        assert_eq!(Control::parse("factor=NaN").factor, 1.0);
        assert!(Control::parse("stop=1").stop);
    }

    #[test]
    fn a_status_without_a_pid_is_none_and_a_whole_one_round_trips() {
        assert_eq!(Status::parse("base_ms=500\n"), None);
        let s = Status {
            pid: 77,
            steps: 12,
            base_ms: 503.2,
            busy_wall_ms: 51.0,
            busy_cpu_ms: 50.0,
            transfer_ms: 1.5,
        };
        assert_eq!(Status::parse(&s.render()), Some(s));
    }

    #[test]
    fn a_slowed_step_sleeps_its_factor_less_one_times_the_usual_step_more() {
        assert_eq!(extra_sleep(1.5, 500.0), Duration::from_millis(250));
        assert_eq!(extra_sleep(2.0, 480.0), Duration::from_millis(480));
        assert_eq!(extra_sleep(1.0, 500.0), Duration::ZERO);
    }

    #[test]
    fn the_busy_part_burns_cpu_time_not_wall_time() {
        let c0 = thread_cpu();
        burn_cpu(Duration::from_millis(30));
        assert!(thread_cpu() - c0 >= Duration::from_millis(30));
    }

    #[test]
    fn a_trainer_prints_its_steps_tells_its_pid_checkpoints_when_asked_and_stops_when_told() {
        let d = tempfile::tempdir().unwrap();
        let spec = TrainerSpec {
            control: d.path().to_owned(),
            out: d.path().to_owned(),
            node: "n2".into(),
            step_ms: 20,
            busy_ms: 2,
            transfer_bytes: 0,
            ckpt_bytes: 1024,
            ckpt_ms: 10,
            max_s: 2,
        };
        std::fs::write(d.path().join("ctl-n2"), "checkpoint=1\n").unwrap();
        let ctl = d.path().join("ctl-n2");
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::write(ctl, "checkpoint=1\nstop=1\n").unwrap();
        });
        let mut out = Vec::new();
        run(&spec, &mut out).unwrap();
        stopper.join().unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "checkpoint begin");
        assert_eq!(lines[1], "checkpoint end");
        assert_eq!(lines[2], "step 1");
        assert_eq!(
            text.matches("checkpoint begin").count(),
            1,
            "one checkpoint per count"
        );
        assert!(lines.len() > 5, "{text}");
        let st =
            Status::parse(&std::fs::read_to_string(d.path().join("trainer-n2")).unwrap()).unwrap();
        assert_eq!(st.pid, std::process::id());
        assert!(st.base_ms >= 20.0, "{st:?}");
        assert_eq!(
            std::fs::metadata(d.path().join("ckpt-n2")).unwrap().len(),
            1024
        );
    }
}
