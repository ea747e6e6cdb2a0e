//! Pause and PFC counter names of `ethtool -S` across drivers and kernels, and the PFC
//! configuration printed by `dcb pfc show` and `mlnx_qos`.
//!
//! Every driver names the same 802.3x/802.1Qbb counters differently, and a counter that is
//! absent is normal (mlx5 shows `rx_prio<N>_pause` only for priorities with PFC on), never 0.
//! [`classify`] maps each known name to what it counts; `docs/checks.md` lists the table:
//!
//! | driver | global pause | per priority |
//! |---|---|---|
//! | mlx5 (kernel ≥ 4.x) | `rx_pause_ctrl_phy`, `tx_pause_ctrl_phy`, `rx_global_pause`, `tx_global_pause`, `*_global_pause_duration`, `rx_global_pause_transition` | `rx_prio<N>_pause`, `tx_prio<N>_pause`, `*_prio<N>_pause_duration`, `rx_prio<N>_pause_transition`; `tx_pause_storm_{warning,error}_events` |
//! | mlx5 (older kernels) | `pause_ctrl_rx`, `pause_ctrl_tx` | — |
//! | mlx4 | `rx_pause`, `tx_pause`, `rx_pause_duration`, `tx_pause_duration`, `rx_pause_transition`, `tx_pause_transition` | `rx_pause_prio_<N>`, `tx_pause_prio_<N>`, `*_pause_duration_prio_<N>`, `*_pause_transition_prio_<N>` |
//! | bnxt_en | `rx_pause_frames`, `tx_pause_frames`, `rx_pfc_frames`, `tx_pfc_frames` | `rx_pfc_ena_frames_pri<N>`, `tx_pfc_ena_frames_pri<N>` |
//! | i40e | `port.link_xoff_rx`, `port.link_xoff_tx`, `port.link_xon_rx`, `port.link_xon_tx` | `port.rx_priority_<N>_xoff_rx`, `port.tx_priority_<N>_xoff_tx`, `port.*_priority_<N>_xon_*`, `port.rx_priority_<N>_xon_2_xoff` |
//! | ice | `link_xoff_rx`, `link_xoff_tx`, `link_xon_rx`, `link_xon_tx` | `rx_priority_<N>_xoff`, `tx_priority_<N>_xoff`, `*_priority_<N>_xon` |
//!
//! Current `ice` drivers print their port-wide statistics with a `.nic` suffix
//! (`link_xoff_rx.nic`, `rx_priority_3_xoff.nic`); a name with that suffix is read as the `ice`
//! name without it (and only as an `ice` name).

use std::collections::{BTreeMap, BTreeSet};

/// Receive or transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dir {
    /// Pause frames received (the peer asked us to stop).
    Rx,
    /// Pause frames sent (we asked the peer to stop).
    Tx,
}

impl Dir {
    fn as_str(self) -> &'static str {
        match self {
            Dir::Rx => "rx",
            Dir::Tx => "tx",
        }
    }
}

/// What a pause counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Pause (XOFF) frames.
    Frames,
    /// Time paused, in µs (mlx4/mlx5).
    DurationUs,
    /// XOFF→XON transitions, or XON frames.
    Transition,
    /// mlx5's pause-storm detector warned.
    StormWarning,
    /// mlx5's pause-storm detector stopped honouring pause.
    StormError,
}

/// One known pause counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PauseCounter {
    /// Direction.
    pub dir: Dir,
    /// The 802.1p priority for PFC counters; `None` for link-level (802.3x) pause.
    pub prio: Option<u8>,
    /// What it counts.
    pub kind: Kind,
    /// The driver family whose name this is (`mlx5`, `mlx5-old`, `mlx4`, `bnxt_en`, `i40e`,
    /// `ice`).
    pub family: &'static str,
}

impl PauseCounter {
    /// The threshold key shared by every driver's name for the same thing: `rx_prio_pause`,
    /// `tx_prio_pause_duration`, `rx_pause` (link-level), `tx_pause_storm_error_events`.
    pub fn threshold_key(&self) -> String {
        let d = self.dir.as_str();
        let p = if self.prio.is_some() { "prio_" } else { "" };
        match self.kind {
            Kind::Frames => format!("{d}_{p}pause"),
            Kind::DurationUs => format!("{d}_{p}pause_duration"),
            Kind::Transition => format!("{d}_{p}pause_transition"),
            Kind::StormWarning => "tx_pause_storm_warning_events".to_string(),
            Kind::StormError => "tx_pause_storm_error_events".to_string(),
        }
    }
}

fn prio(s: &str) -> Option<u8> {
    s.parse::<u8>().ok().filter(|p| *p < 8)
}

/// Whether `name` has `pause`, `pfc` or `xo` (`xoff`, `xon`) in it: every name [`classify`]
/// knows has.
fn may_be_pause(name: &str) -> bool {
    let b = name.as_bytes();
    (0..b.len()).any(|i| {
        let rest = &b[i..];
        rest.starts_with(b"xo") || rest.starts_with(b"pfc") || rest.starts_with(b"pause")
    })
}

/// What an `ethtool -S` statistic counts, when it is a pause counter of a known driver.
pub fn classify(name: &str) -> Option<PauseCounter> {
    // Every name below has `pause`, `pfc`, `xoff` or `xon` in it: any other (an IB or RDMA
    // counter, judged by every probe and watch sample) is none, without the searches below.
    if !may_be_pause(name) {
        return None;
    }
    classify_named(name)
}

/// [`classify`] without its quick test.
fn classify_named(name: &str) -> Option<PauseCounter> {
    if let Some(base) = name.strip_suffix(".nic") {
        return classify(base).filter(|c| c.family == "ice");
    }
    use Dir::{Rx, Tx};
    use Kind::{DurationUs, Frames, StormError, StormWarning, Transition};
    let c = |dir, prio, kind, family| {
        Some(PauseCounter {
            dir,
            prio,
            kind,
            family,
        })
    };
    let dir_of = |s: &str| match s {
        "rx" => Some(Rx),
        "tx" => Some(Tx),
        _ => None,
    };
    match name {
        "rx_pause_ctrl_phy" | "rx_global_pause" => return c(Rx, None, Frames, "mlx5"),
        "tx_pause_ctrl_phy" | "tx_global_pause" => return c(Tx, None, Frames, "mlx5"),
        "rx_global_pause_duration" => return c(Rx, None, DurationUs, "mlx5"),
        "tx_global_pause_duration" => return c(Tx, None, DurationUs, "mlx5"),
        "rx_global_pause_transition" => return c(Rx, None, Transition, "mlx5"),
        "tx_pause_storm_warning_events" => return c(Tx, None, StormWarning, "mlx5"),
        "tx_pause_storm_error_events" => return c(Tx, None, StormError, "mlx5"),
        "pause_ctrl_rx" => return c(Rx, None, Frames, "mlx5-old"),
        "pause_ctrl_tx" => return c(Tx, None, Frames, "mlx5-old"),
        "rx_pause" => return c(Rx, None, Frames, "mlx4"),
        "tx_pause" => return c(Tx, None, Frames, "mlx4"),
        "rx_pause_duration" => return c(Rx, None, DurationUs, "mlx4"),
        "tx_pause_duration" => return c(Tx, None, DurationUs, "mlx4"),
        "rx_pause_transition" => return c(Rx, None, Transition, "mlx4"),
        "tx_pause_transition" => return c(Tx, None, Transition, "mlx4"),
        "rx_pause_frames" | "rx_pfc_frames" => return c(Rx, None, Frames, "bnxt_en"),
        "tx_pause_frames" | "tx_pfc_frames" => return c(Tx, None, Frames, "bnxt_en"),
        "port.link_xoff_rx" => return c(Rx, None, Frames, "i40e"),
        "port.link_xoff_tx" => return c(Tx, None, Frames, "i40e"),
        "port.link_xon_rx" => return c(Rx, None, Transition, "i40e"),
        "port.link_xon_tx" => return c(Tx, None, Transition, "i40e"),
        "link_xoff_rx" => return c(Rx, None, Frames, "ice"),
        "link_xoff_tx" => return c(Tx, None, Frames, "ice"),
        "link_xon_rx" => return c(Rx, None, Transition, "ice"),
        "link_xon_tx" => return c(Tx, None, Transition, "ice"),
        _ => {}
    }
    // mlx5: rx_prio3_pause, tx_prio3_pause_duration, rx_prio3_pause_transition.
    for (head, dir) in [("rx_prio", Rx), ("tx_prio", Tx)] {
        if let Some(rest) = name.strip_prefix(head)
            && let Some((n, tail)) = rest.split_once('_')
            && let Some(q) = prio(n)
        {
            return match tail {
                "pause" => c(dir, Some(q), Frames, "mlx5"),
                "pause_duration" => c(dir, Some(q), DurationUs, "mlx5"),
                "pause_transition" => c(dir, Some(q), Transition, "mlx5"),
                _ => None,
            };
        }
    }
    // mlx4: rx_pause_prio_3, rx_pause_duration_prio_3, tx_pause_transition_prio_3.
    if let Some((head, n)) = name.rsplit_once("_prio_")
        && let Some(q) = prio(n)
        && let Some((d, what)) = head.split_once('_')
        && let Some(dir) = dir_of(d)
    {
        return match what {
            "pause" => c(dir, Some(q), Frames, "mlx4"),
            "pause_duration" => c(dir, Some(q), DurationUs, "mlx4"),
            "pause_transition" => c(dir, Some(q), Transition, "mlx4"),
            _ => None,
        };
    }
    // bnxt_en: rx_pfc_ena_frames_pri3.
    if let Some((head, n)) = name.rsplit_once("_pfc_ena_frames_pri")
        && let Some(q) = prio(n)
        && let Some(dir) = dir_of(head)
    {
        return c(dir, Some(q), Frames, "bnxt_en");
    }
    // i40e: port.rx_priority_3_xoff_rx, port.tx_priority_3_xon_tx, port.rx_priority_3_xon_2_xoff;
    // ice: rx_priority_3_xoff, tx_priority_3_xon.
    let (body, family) = match name.strip_prefix("port.") {
        Some(b) => (b, "i40e"),
        None => (name, "ice"),
    };
    if let Some((d, rest)) = body.split_once("_priority_")
        && let Some(dir) = dir_of(d)
        && let Some((n, what)) = rest.split_once('_')
        && let Some(q) = prio(n)
    {
        let what = what
            .strip_suffix("_rx")
            .or_else(|| what.strip_suffix("_tx"))
            .unwrap_or(what);
        return match what {
            "xoff" => c(dir, Some(q), Frames, family),
            "xon" | "xon_2_xoff" => c(dir, Some(q), Transition, family),
            _ => None,
        };
    }
    None
}

/// The pause statistics of `ethtool -S` text: every known pause counter (see [`classify`])
/// and, for drivers not in the table, any statistic with `pause` or `pfc` in its name (kept
/// for the record). Accepts output with or without the `NIC statistics:` header and with any
/// indentation; a key with a non-numeric value is skipped.
pub fn parse_ethtool_stats(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter_map(|(k, v)| {
            let k = k.trim();
            let known = classify(k).is_some() || k.contains("pause") || k.contains("pfc");
            known.then_some(())?;
            Some((k.to_string(), v.trim().parse::<u64>().ok()?))
        })
        .collect()
}

/// Priorities with PFC on, from `dcb pfc show dev <if>` (`prio-pfc 0:off ... 3:on ...`; the
/// older `pg-pfc` key too) or from `mlnx_qos -i <if>` (`PFC configuration:` then the
/// `priority` and `enabled` rows). `None` when the text has neither. Where the text holds
/// several outputs (a terminal capture), the last one counts.
pub fn parse_pfc_config(text: &str) -> Option<BTreeSet<u8>> {
    let mut last: Option<BTreeSet<u8>> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let mut toks = line.split_whitespace();
        match toks.next() {
            Some("prio-pfc" | "pg-pfc") => {
                let mut on = BTreeSet::new();
                for t in toks {
                    let Some((q, v)) = t.split_once(':') else {
                        break;
                    };
                    let Some(q) = prio(q) else { break };
                    if v == "on" {
                        on.insert(q);
                    }
                }
                last = Some(on);
            }
            Some("PFC") if line.trim() == "PFC configuration:" => {
                // mlnx_qos: "priority 0 1 ... 7" then "enabled 0 0 0 1 0 0 0 0" (trailing spaces).
                let mut prios: Vec<u8> = Vec::new();
                while let Some(next) = lines.peek() {
                    let mut t = next.split_whitespace();
                    match t.next() {
                        Some("priority") => prios = t.filter_map(prio).collect(),
                        Some("enabled") => {
                            let on: BTreeSet<u8> = t
                                .zip(&prios)
                                .filter(|(v, _)| *v == "1")
                                .map(|(_, q)| *q)
                                .collect();
                            last = Some(on);
                        }
                        _ => break,
                    }
                    lines.next();
                }
            }
            _ => {}
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_drivers_per_priority_pause_frames_share_one_threshold_key() {
        for n in [
            "rx_prio3_pause",
            "rx_pause_prio_3",
            "rx_pfc_ena_frames_pri3",
            "port.rx_priority_3_xoff_rx",
            "rx_priority_3_xoff",
        ] {
            let c = classify(n).unwrap_or_else(|| panic!("{n} not classified"));
            assert_eq!(
                (c.dir, c.prio, c.kind),
                (Dir::Rx, Some(3), Kind::Frames),
                "{n}"
            );
            assert_eq!(c.threshold_key(), "rx_prio_pause", "{n}");
        }
        assert_eq!(
            classify("tx_prio7_pause_duration").unwrap().threshold_key(),
            "tx_prio_pause_duration"
        );
    }

    #[test]
    fn link_level_pause_names_of_old_and_new_kernels_are_known() {
        for (n, fam) in [
            ("rx_pause_ctrl_phy", "mlx5"),
            ("pause_ctrl_rx", "mlx5-old"),
            ("rx_pause", "mlx4"),
            ("rx_pause_frames", "bnxt_en"),
            ("port.link_xoff_rx", "i40e"),
        ] {
            let c = classify(n).unwrap();
            assert_eq!((c.dir, c.prio, c.family), (Dir::Rx, None, fam), "{n}");
        }
        assert_eq!(classify("rx_packets"), None);
        assert_eq!(classify("rx_prio9_pause"), None);
        assert_eq!(classify("rx_prio3_bytes"), None);
    }

    #[test]
    fn the_quick_test_passes_every_name_the_table_knows() {
        let mut names: Vec<String> = [
            "rx_pause_ctrl_phy",
            "rx_global_pause",
            "tx_pause_ctrl_phy",
            "tx_global_pause",
            "rx_global_pause_duration",
            "tx_global_pause_duration",
            "rx_global_pause_transition",
            "tx_pause_storm_warning_events",
            "tx_pause_storm_error_events",
            "pause_ctrl_rx",
            "pause_ctrl_tx",
            "rx_pause",
            "tx_pause",
            "rx_pause_duration",
            "tx_pause_duration",
            "rx_pause_transition",
            "tx_pause_transition",
            "rx_pause_frames",
            "rx_pfc_frames",
            "tx_pause_frames",
            "tx_pfc_frames",
            "port.link_xoff_rx",
            "port.link_xoff_tx",
            "port.link_xon_rx",
            "port.link_xon_tx",
            "link_xoff_rx",
            "link_xoff_tx",
            "link_xon_rx",
            "link_xon_tx",
        ]
        .map(String::from)
        .to_vec();
        for d in ["rx", "tx"] {
            for q in 0..8 {
                for t in ["pause", "pause_duration", "pause_transition"] {
                    names.push(format!("{d}_prio{q}_{t}"));
                    names.push(format!("{d}_{t}_prio_{q}"));
                }
                names.push(format!("{d}_pfc_ena_frames_pri{q}"));
                for w in ["xoff", "xon", "xon_2_xoff"] {
                    for tail in ["", "_rx", "_tx"] {
                        names.push(format!("port.{d}_priority_{q}_{w}{tail}"));
                        names.push(format!("{d}_priority_{q}_{w}{tail}"));
                    }
                }
            }
        }
        let with_nic: Vec<String> = names.iter().map(|n| format!("{n}.nic")).collect();
        let mut known = 0;
        for n in names.iter().chain(&with_nic) {
            if classify_named(n).is_some() {
                known += 1;
                assert!(may_be_pause(n), "{n}");
                assert_eq!(classify(n), classify_named(n), "{n}");
            }
        }
        assert!(known > 300, "{known}");
        for n in [
            "symbol_error",
            "port_xmit_wait",
            "np_cnp_sent",
            "out_of_buffer",
            "rx_bytes",
        ] {
            assert!(!may_be_pause(n), "{n}");
        }
    }

    #[test]
    fn current_ice_names_with_a_nic_suffix_are_the_ice_counters() {
        let c = classify("link_xoff_rx.nic").unwrap();
        assert_eq!(
            (c.dir, c.prio, c.kind, c.family),
            (Dir::Rx, None, Kind::Frames, "ice")
        );
        let c = classify("rx_priority_3_xoff.nic").unwrap();
        assert_eq!(c.threshold_key(), "rx_prio_pause");
        assert_eq!((c.prio, c.family), (Some(3), "ice"));
        let c = classify("tx_priority_5_xon.nic").unwrap();
        assert_eq!((c.dir, c.kind), (Dir::Tx, Kind::Transition));
        // Only ice prints the suffix: another driver's name with it is not a pause counter.
        assert_eq!(classify("rx_pause_ctrl_phy.nic"), None);
        assert_eq!(classify("rx_bytes.nic"), None);
        let stats = parse_ethtool_stats(
            "NIC statistics:\n     rx_bytes.nic: 123\n     link_xoff_rx.nic: 7\n     rx_priority_3_xoff.nic: 42\n",
        );
        assert_eq!(stats.get("link_xoff_rx.nic"), Some(&7));
        assert_eq!(stats.get("rx_priority_3_xoff.nic"), Some(&42));
        assert!(!stats.contains_key("rx_bytes.nic"));
    }

    #[test]
    fn dcb_pfc_reads_prio_pfc_and_the_older_pg_pfc_key() {
        let on =
            parse_pfc_config("pfc-cap 8 macsec-bypass off delay 0 \nprio-pfc 0:off 3:on 5:on\n")
                .unwrap();
        assert_eq!(on.into_iter().collect::<Vec<_>>(), [3, 5]);
        let on =
            parse_pfc_config("    pg-pfc 0:off 1:on 2:off 7:on\n    requests 0:0 1:217\n").unwrap();
        assert_eq!(on.into_iter().collect::<Vec<_>>(), [1, 7]);
        assert_eq!(parse_pfc_config("garbage"), None);
    }

    #[test]
    fn mlnx_qos_pfc_rows_with_trailing_spaces_give_the_enabled_priorities() {
        let t = "PFC configuration:\n        priority    0   1   2   3   4   5   6   7\n        enabled     0   0   0   1   0   0   0   1   \ntc: 0 ratelimit: unlimited, tsa: vendor\n";
        let on = parse_pfc_config(t).unwrap();
        assert_eq!(on.into_iter().collect::<Vec<_>>(), [3, 7]);
    }
}
