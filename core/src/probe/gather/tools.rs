//! External tools: `ethtool -S` and `dcb pfc show` (or `mlnx_qos`), run or read from saved
//! outputs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::sysfs::{Read1, Reader, read_capped};
use super::{MAX_TOOL_BYTES, NetDev, TOOL_TIMEOUT, ToolSource};

pub use crate::probe::pause::{parse_ethtool_stats, parse_pfc_config};

/// Priorities with PFC on, from `dcb pfc show` or `mlnx_qos` text (see [`parse_pfc_config`]).
pub fn parse_dcb_pfc(text: &str) -> Option<BTreeSet<u8>> {
    parse_pfc_config(text)
}

fn find_tool(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Runs `tool args...` (absolute path, no shell) for each netdev concurrently, bounded by
/// [`TOOL_TIMEOUT`] for all of them together. Returns, per netdev, the text or why not.
fn run_tool_each(
    tool: &str,
    args: &[&str],
    ifs: &[String],
) -> BTreeMap<String, Result<String, String>> {
    let mut out = BTreeMap::new();
    let Some(bin) = find_tool(tool) else {
        for i in ifs {
            out.insert(
                i.clone(),
                Err(format!(
                    "{tool} not found in /usr/sbin or /sbin; install it to read PFC data"
                )),
            );
        }
        return out;
    };
    let mut running = Vec::new();
    for i in ifs {
        let child = Command::new(&bin)
            .args(args)
            .arg(i)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(mut c) => {
                let stdout = c.stdout.take();
                let reader = std::thread::spawn(move || {
                    let mut s = String::new();
                    if let Some(o) = stdout {
                        let _ = o.take(MAX_TOOL_BYTES as u64).read_to_string(&mut s);
                    }
                    s
                });
                running.push((i.clone(), c, reader));
            }
            Err(e) => {
                out.insert(i.clone(), Err(format!("cannot run {}: {e}", bin.display())));
            }
        }
    }
    let deadline = Instant::now() + TOOL_TIMEOUT;
    for (i, mut c, reader) in running {
        let status = loop {
            match c.try_wait() {
                Ok(Some(s)) => break Ok(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Ok(None) => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break Err(format!(
                        "{} {} {i} took longer than {:?}; killed",
                        bin.display(),
                        args.join(" "),
                        TOOL_TIMEOUT
                    ));
                }
                Err(e) => break Err(format!("waiting for {}: {e}", bin.display())),
            }
        };
        let text = reader.join().unwrap_or_default();
        let res = match status {
            Ok(s) if s.success() => Ok(text),
            Ok(s) => Err(format!(
                "{} {} {i} exited with {s}",
                bin.display(),
                args.join(" ")
            )),
            Err(m) => Err(m),
        };
        out.insert(i, res);
    }
    out
}

pub(super) fn gather_tools(
    r: &mut Reader<'_>,
    tools: &ToolSource,
    netdevs: &mut BTreeMap<String, NetDev>,
    roce: &[(String, String, u32)],
) {
    if roce.is_empty() {
        return;
    }
    let names: Vec<String> = roce.iter().map(|(n, _, _)| n.clone()).collect();
    let (stats, pfc): (BTreeMap<_, _>, BTreeMap<_, _>) = match tools {
        ToolSource::Files(dir) => {
            let mut read = |sub: &str,
                            check: &'static str|
             -> BTreeMap<String, Result<String, String>> {
                roce.iter()
                    .map(|(nd, dev, port)| {
                        let path = dir.join(sub).join(nd);
                        let res = match read_capped(&path, MAX_TOOL_BYTES) {
                            Read1::Text(t) => Ok(t),
                            Read1::Missing => Err(format!("no saved output at {}", path.display())),
                            Read1::Unreadable(m) => Err(format!("{}: {m}", path.display())),
                            Read1::Bad(m) => {
                                r.problem(check, Some(dev), Some(*port), &path, m.clone());
                                Err(m)
                            }
                        };
                        (nd.clone(), res)
                    })
                    .collect()
            };
            let stats = read("ethtool-S", "roce.congestion");
            let mut pfc = read("dcb-pfc", "roce.pfc");
            // mlnx_qos output is the other way to save the PFC configuration.
            if let Ok(qos) =
                std::fs::read_dir(dir.join("mlnx_qos")).map(|_| read("mlnx_qos", "roce.pfc"))
            {
                for (nd, res) in qos {
                    if res.is_ok() && pfc.get(&nd).is_some_and(|r| r.is_err()) {
                        pfc.insert(nd, res);
                    }
                }
            }
            (stats, pfc)
        }
        ToolSource::Run => (
            run_tool_each("ethtool", &["-S"], &names),
            run_tool_each("dcb", &["pfc", "show", "dev"], &names),
        ),
        ToolSource::Unavailable(why) => {
            let all = || -> BTreeMap<String, Result<String, String>> {
                names
                    .iter()
                    .map(|n| (n.clone(), Err(why.clone())))
                    .collect()
            };
            (all(), BTreeMap::new())
        }
    };
    for (name, nd) in netdevs.iter_mut() {
        let mut notes = Vec::new();
        match stats.get(name) {
            Some(Ok(t)) => nd.ethtool = Some(parse_ethtool_stats(t)),
            Some(Err(m)) => notes.push(m.clone()),
            None => {}
        }
        match pfc.get(name) {
            Some(Ok(t)) => {
                nd.pfc = parse_dcb_pfc(t);
                if nd.pfc.is_none() {
                    notes.push(
                        "the PFC output has neither a dcb prio-pfc/pg-pfc line nor an mlnx_qos PFC configuration block (a layout the probe does not know)".to_string(),
                    );
                }
            }
            Some(Err(m)) => notes.push(m.clone()),
            None => {}
        }
        if !notes.is_empty() {
            nd.tool_note = Some(notes.join("; "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethtool_output_keeps_only_pause_statistics() {
        let s = parse_ethtool_stats(
            "NIC statistics:\n     rx_packets: 5\n     rx_prio3_pause: 7\n     tx_pause_storm_error_events: 0\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s["rx_prio3_pause"], 7);
    }

    #[test]
    fn dcb_output_gives_the_pfc_priorities() {
        let on = parse_dcb_pfc("pfc-cap 8 macsec-bypass off delay 0 \nprio-pfc 0:off 1:off 2:off 3:on 4:off 5:on 6:off 7:off \n").unwrap();
        assert_eq!(on.into_iter().collect::<Vec<_>>(), [3, 5]);
        assert_eq!(parse_dcb_pfc("garbage"), None);
    }
}
