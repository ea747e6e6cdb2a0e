//! The sysfs walk: RDMA devices, their ports and netdevs, and GPUs on the PCI bus.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use super::dir::natural_cmp;
pub(super) use super::dir::{Dir, Read1, read_capped};
use super::{
    Device, Gid, Gpu, GpuVendor, MAX_ATTR_BYTES, NetDev, PcieLink, Port, PortState, Problem, Rate,
};

/// Where the sysfs symlink `name` in `dir` points, resolved lexically against `dir` (sysfs
/// links are relative and `devices/` has no further links, so this equals the canonical path
/// without a syscall per component).
fn resolve_link(dir: &Dir, name: &str) -> Option<PathBuf> {
    let target = dir.read_link(name)?;
    let joined = dir.path().join(target);
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// Collects problems while reading.
pub(super) struct Reader<'a> {
    pub(super) problems: &'a mut Vec<Problem>,
}

impl Reader<'_> {
    pub(super) fn problem(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        path: &Path,
        message: String,
    ) {
        self.push(check, dev, port, path, message, false);
    }

    /// Records a file or directory that could not be opened, read or listed.
    pub(super) fn unreadable(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        path: &Path,
        message: String,
    ) {
        self.push(check, dev, port, path, message, true);
    }

    fn push(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        path: &Path,
        message: String,
        unreadable: bool,
    ) {
        self.problems.push(Problem {
            check,
            device: dev.map(str::to_string),
            port,
            path: path.to_path_buf(),
            message,
            unreadable,
        });
    }

    /// A text attribute every port has (`state`, `rate`, `link_layer`): a missing one is
    /// recorded as "could not look" too. Read once (it was read twice before: a tenth of the
    /// port's opens).
    fn required_text(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        dir: &Dir,
        name: &str,
    ) -> Option<String> {
        let read = dir.read(name, MAX_ATTR_BYTES);
        if let Read1::Missing = read
            && std::fs::symlink_metadata(dir.join(name)).is_err()
        {
            self.unreadable(
                check,
                dev,
                port,
                &dir.join(name),
                "no such file (the driver does not expose it)".to_string(),
            );
            return None;
        }
        self.outcome(check, dev, port, read, || dir.join(name))
    }

    /// A required attribute parsed by `parse`; text that does not parse is recorded as "not
    /// <what>".
    fn required_parsed<T>(
        &mut self,
        (check, dev, port): (&'static str, Option<&str>, Option<u32>),
        (dir, name): (&Dir, &str),
        parse: impl Fn(&str) -> Option<T>,
        what: &str,
    ) -> Option<T> {
        let text = self.required_text(check, dev, port, dir, name)?;
        let parsed = parse(&text);
        if parsed.is_none() {
            self.problem(
                check,
                dev,
                port,
                &dir.join(name),
                format!("not {what}: {text:?}"),
            );
        }
        parsed
    }

    /// A text attribute; `None` when missing or bad (bad ones are recorded).
    pub(super) fn text(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        dir: &Dir,
        name: &str,
    ) -> Option<String> {
        let read = dir.read(name, MAX_ATTR_BYTES);
        self.outcome(check, dev, port, read, || dir.join(name))
    }

    /// What a read gave: its text, or `None` with a bad or unreadable file recorded.
    fn outcome(
        &mut self,
        check: &'static str,
        dev: Option<&str>,
        port: Option<u32>,
        read: Read1,
        path: impl FnOnce() -> PathBuf,
    ) -> Option<String> {
        match read {
            Read1::Missing => None,
            Read1::Text(s) => Some(s),
            Read1::Unreadable(m) => {
                self.unreadable(check, dev, port, &path(), m);
                None
            }
            Read1::Bad(m) => {
                self.problem(check, dev, port, &path(), m);
                None
            }
        }
    }
}

fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// PCI addresses along a resolved device path, root port first.
fn pci_chain(resolved: &Path) -> Vec<String> {
    resolved
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .filter(|s| is_bdf(s))
        .map(str::to_string)
        .collect()
}

/// Parses `4: ACTIVE`.
pub fn parse_state(s: &str) -> Option<PortState> {
    let (code, name) = s.split_once(':')?;
    Some(PortState {
        code: code.trim().parse().ok()?,
        name: name.trim().to_string(),
    })
}

/// Parses `400 Gb/sec (4X NDR)` or `2.5 Gb/sec (1X SDR)`.
pub fn parse_rate(s: &str) -> Option<Rate> {
    let num = s.split_whitespace().next()?;
    let gbps: f64 = num.parse().ok()?;
    if !gbps.is_finite() || gbps < 0.0 || !s.contains("Gb/sec") {
        return None;
    }
    Some(Rate {
        gbps,
        text: s.to_string(),
    })
}

/// Parses a PCIe link speed as the kernel prints it: `32.0 GT/s PCIe` (5.x and later),
/// `8 GT/s` or `2.5 GT/s` (older kernels). `Unknown` and anything else: `None`.
pub fn parse_pcie_speed(s: &str) -> Option<f64> {
    let (num, unit) = s.trim().split_once(' ')?;
    if !unit.trim_start().starts_with("GT/s") {
        return None;
    }
    let gts: f64 = num.parse().ok()?;
    (gts.is_finite() && gts > 0.0).then_some(gts)
}

/// Parses a PCIe link width (`16`; some kernels print `x16`). `Unknown`: `None`.
pub fn parse_pcie_width(s: &str) -> Option<u32> {
    s.trim().trim_start_matches('x').parse().ok()
}

/// The four PCIe link files of a PCI function directory, each read once. A missing file or
/// `Unknown` is "could not look" (no problem recorded: virtual functions and some platforms
/// do not report a link); text that is neither a value nor `Unknown` is a problem.
pub(super) fn read_pcie(r: &mut Reader<'_>, check: &'static str, dev: &str, dir: &Dir) -> PcieLink {
    fn one<T>(
        r: &mut Reader<'_>,
        check: &'static str,
        dev: &str,
        (dir, name): (&Dir, &str),
        parse: fn(&str) -> Option<T>,
        what: &str,
    ) -> Option<T> {
        let text = r.text(check, Some(dev), None, dir, name)?;
        if text.is_empty() || text.eq_ignore_ascii_case("unknown") {
            return None;
        }
        let v = parse(&text);
        if v.is_none() {
            r.problem(
                check,
                Some(dev),
                None,
                &dir.join(name),
                format!("not {what}: {text:?}"),
            );
        }
        v
    }
    PcieLink {
        cur_gts: one(
            r,
            check,
            dev,
            (dir, "current_link_speed"),
            parse_pcie_speed,
            "a PCIe link speed",
        ),
        cur_width: one(
            r,
            check,
            dev,
            (dir, "current_link_width"),
            parse_pcie_width,
            "a PCIe link width",
        ),
        max_gts: one(
            r,
            check,
            dev,
            (dir, "max_link_speed"),
            parse_pcie_speed,
            "a PCIe link speed",
        ),
        max_width: one(
            r,
            check,
            dev,
            (dir, "max_link_width"),
            parse_pcie_width,
            "a PCIe link width",
        ),
        slot_max_gts: None,
        slot_max_width: None,
    }
}

/// The slot's maxima of a function at `pci_path` (root port first): the upstream port's
/// `max_link_speed` and `max_link_width` under `bus/pci/devices/`. Read quietly: a bridge that
/// does not say (or a function straight on a root complex) leaves them unknown, and the link
/// is judged against the function's own maxima as before. `bus` is `bus/pci/devices/`.
pub(super) fn read_slot_max(bus: &Dir, pci_path: &[String], link: &mut PcieLink) {
    let Some(up) = pci_path.len().checked_sub(2).map(|i| &pci_path[i]) else {
        return;
    };
    // Relative to `bus/pci/devices/`, opened once for the whole gather.
    let text = |f: &str| match bus.read(&format!("{up}/{f}"), MAX_ATTR_BYTES) {
        Read1::Text(t) => Some(t),
        _ => None,
    };
    link.slot_max_gts = text("max_link_speed").as_deref().and_then(parse_pcie_speed);
    link.slot_max_width = text("max_link_width").as_deref().and_then(parse_pcie_width);
}

/// How long ago the device at `dev_dir` (`class/infiniband/<dev>`) made its `ports/` folder,
/// in seconds ([`crate::probe::gather::Device::age_s`]); `None` when that cannot be told.
pub fn device_age_s(dev_dir: &Path) -> Option<f64> {
    age_s(
        std::fs::metadata(dev_dir.join("ports"))
            .and_then(|m| m.modified())
            .ok(),
    )
}

/// Seconds since `made` on the real clock.
fn age_s(made: Option<std::time::SystemTime>) -> Option<f64> {
    std::time::SystemTime::now()
        .duration_since(made?)
        .ok()
        .map(|d| d.as_secs_f64())
}

/// Parses a counter file's text: `Ok(Some(n))`, `Ok(None)` for `N/A (no PMA)`, `Err` otherwise.
pub fn parse_counter(s: &str) -> Result<Option<u64>, String> {
    if s.starts_with("N/A") {
        return Ok(None);
    }
    if s.is_empty() {
        return Err("empty (a counter file holds a number)".to_string());
    }
    s.parse::<u64>().map(Some).map_err(|e| {
        let shown: String = s.chars().take(40).collect();
        format!("not a counter value ({e}): {shown:?}")
    })
}

/// The counters in folder `sub` of `parent` (`counters`, `hw_counters`, ...), by name; `None`
/// when the folder is not there.
fn read_counters(
    r: &mut Reader<'_>,
    (parent, sub): (&Dir, &str),
    check: &'static str,
    dev: &str,
    port: u32,
    no_pma: Option<&mut Vec<String>>,
) -> Option<BTreeMap<String, u64>> {
    // Listed and read through one descriptor of the folder.
    let (files, names) = match parent.list_sub(sub) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            r.unreadable(
                check,
                Some(dev),
                Some(port),
                &parent.join(sub),
                format!("cannot list: {e}"),
            );
            return None;
        }
    };
    let mut out = BTreeMap::new();
    let mut na = Vec::new();
    for name in names {
        if name == "lifespan" {
            // mlx5's hw_counters refresh interval in ms: a setting, not a counter.
            continue;
        }
        // Parsed from the read's own buffer (no copy of the text).
        match files.read_map(&name, MAX_ATTR_BYTES, parse_counter) {
            Read1::Missing => {}
            Read1::Unreadable(m) => {
                r.unreadable(check, Some(dev), Some(port), &files.join(&name), m)
            }
            Read1::Bad(m) => r.problem(check, Some(dev), Some(port), &files.join(&name), m),
            Read1::Text(parsed) => match parsed {
                Ok(Some(v)) => {
                    out.insert(name, v);
                }
                Ok(None) => na.push(name),
                Err(m) => r.problem(check, Some(dev), Some(port), &files.join(&name), m),
            },
        }
    }
    if let Some(v) = no_pma {
        *v = na;
    }
    Some(out)
}

/// The `counters/` name a `counters_ext/` file is the 64-bit copy of: `port_xmit_data_64` →
/// `port_xmit_data`, `port_unicast_rcv_packets` → `unicast_rcv_packets`.
pub fn counters_ext_legacy_name(name: &str) -> String {
    if let Some(base) = name.strip_suffix("_64") {
        return base.to_string();
    }
    for cast in ["port_unicast_", "port_multicast_"] {
        if let Some(rest) = name.strip_prefix(cast) {
            return format!("{}{rest}", &cast["port_".len()..]);
        }
    }
    name.to_string()
}

/// Which check a hw_counter belongs to, for naming read problems.
fn hw_counter_check(name: &str) -> &'static str {
    if name.contains("cnp") || name.contains("ecn") {
        "roce.congestion"
    } else {
        "roce.retrans"
    }
}

/// Port `num` of device `dev`: `ports` is its `ports/` folder, `dev_dir` the device's.
fn gather_port(r: &mut Reader<'_>, dev: &str, (dev_dir, ports): (&Dir, &Dir), num: u32) -> Port {
    let pd = ports.sub(&num.to_string());
    let mut port = Port {
        num,
        ..Port::default()
    };
    let d = Some(dev);
    let n = Some(num);
    port.state = r.required_parsed(
        ("ib.port_state", d, n),
        (&pd, "state"),
        parse_state,
        "a port state",
    );
    port.phys_state = r.text("ib.port_state", d, n, &pd, "phys_state");
    port.rate = r.required_parsed(("ib.port_rate", d, n), (&pd, "rate"), parse_rate, "a rate");
    port.link_layer = r.required_text("ib.link_layer", d, n, &pd, "link_layer");
    port.lid = r.text("ib.port_state", d, n, &pd, "lid");
    port.sm_lid = r.text("ib.port_state", d, n, &pd, "sm_lid");
    let mut no_pma = Vec::new();
    port.counters = read_counters(
        r,
        (&pd, "counters"),
        "ib.counters",
        dev,
        num,
        Some(&mut no_pma),
    );
    port.no_pma = no_pma;
    if let Some(counters) = port.counters.as_mut() {
        let ext = read_counters(r, (&pd, "counters_ext"), "ib.counters", dev, num, None);
        for (name, v) in ext.unwrap_or_default() {
            let legacy = counters_ext_legacy_name(&name);
            counters.insert(legacy.clone(), v);
            port.counters_64.insert(legacy);
        }
    }
    // hw_counters problems are attributed by name after the fact.
    let before = r.problems.len();
    port.hw_counters = read_counters(r, (&pd, "hw_counters"), "roce.retrans", dev, num, None);
    for prob in &mut r.problems[before..] {
        if let Some(name) = prob.path.file_name().and_then(|s| s.to_str()) {
            prob.check = hw_counter_check(name);
        }
    }
    if port.is_ethernet() {
        if let Ok((types, idx)) = pd.list_sub("gid_attrs/types") {
            port.gid_table_read = true;
            let ndevs = pd.sub("gid_attrs/ndevs");
            for i in idx {
                let Ok(index) = i.parse::<u32>() else {
                    continue;
                };
                // Unpopulated entries fail with EINVAL on real sysfs: not a problem.
                let Read1::Text(kind) = types.read(&i, MAX_ATTR_BYTES) else {
                    continue;
                };
                let ndev = match ndevs.read(&i, MAX_ATTR_BYTES) {
                    Read1::Text(s) if !s.is_empty() => Some(s),
                    _ => None,
                };
                port.gids.push(Gid { index, kind, ndev });
            }
        }
        port.netdev = port.gids.iter().find_map(|g| g.ndev.clone());
    }
    if port.netdev.is_none() {
        port.netdev = netdev_by_dev_port(dev_dir, num);
    }
    port
}

/// The PCI function's netdev whose `dev_port` is `port - 1` (missing `dev_port` reads as 0).
fn netdev_by_dev_port(dev_dir: &Dir, port: u32) -> Option<String> {
    let (net, names) = dev_dir.list_sub("device/net").ok()?;
    let want = port.saturating_sub(1);
    names.into_iter().find(|n| {
        let dp = match net.read(&format!("{n}/dev_port"), MAX_ATTR_BYTES) {
            Read1::Text(s) => s.parse::<u32>().unwrap_or(0),
            _ => 0,
        };
        dp == want
    })
}

/// Device `name` of `class/infiniband/` (`class`); `bus` is `bus/pci/devices/`.
pub(super) fn gather_device(
    r: &mut Reader<'_>,
    (class, bus): (&Dir, &Dir),
    name: &str,
) -> Option<Device> {
    let dev_dir = class.join(name);
    let d = Some(name);
    if let Err(e) = class.stat(name) {
        r.unreadable(
            "ib.port_count",
            d,
            None,
            &dev_dir,
            format!("cannot resolve: {e}; the device is not counted"),
        );
        return None;
    }
    let mut dev = Device {
        name: name.to_string(),
        ..Device::default()
    };
    let dd = class.sub(name);
    dev.fw_ver = r.text("bom.drift", d, None, &dd, "fw_ver");
    dev.hca_type = r.text("bom.drift", d, None, &dd, "hca_type");
    dev.board_id = r.text("bom.drift", d, None, &dd, "board_id");
    dev.node_guid = r.text("bom.drift", d, None, &dd, "node_guid");
    dev.node_type = r.text("ib.link_layer", d, None, &dd, "node_type");
    if let Some(resolved) = resolve_link(class, name) {
        dev.pci_path = pci_chain(&resolved);
        dev.pci = dev.pci_path.last().cloned();
    }
    let pci = dd.sub("device");
    dev.numa_node = match pci.read("numa_node", MAX_ATTR_BYTES) {
        Read1::Text(s) => s.parse().ok(),
        _ => None,
    };
    dev.pcie = read_pcie(r, "pcie.link", name, &pci);
    read_slot_max(bus, &dev.pci_path, &mut dev.pcie);
    dev.driver = pci
        .read_link("driver")
        .and_then(|l| l.file_name().and_then(|s| s.to_str()).map(str::to_string));
    let ports_dir = dev_dir.join("ports");
    match dd.list_sub("ports") {
        Ok((ports, names)) => {
            // The age of `ports/` from the descriptor just opened (as [`device_age_s`]).
            dev.age_s = age_s(ports.modified());
            for p in names {
                match p.parse::<u32>() {
                    Ok(num) => dev.ports.push(gather_port(r, name, (&dd, &ports), num)),
                    Err(_) => r.problem(
                        "ib.port_count",
                        d,
                        None,
                        &ports_dir.join(&p),
                        "not a port number".into(),
                    ),
                }
            }
        }
        Err(e) => {
            dev.age_s = device_age_s(&dev_dir);
            if e.kind() != std::io::ErrorKind::NotFound {
                r.unreadable(
                    "ib.port_count",
                    d,
                    None,
                    &ports_dir,
                    format!("cannot list: {e}"),
                );
            }
        }
    }
    dev.ports.sort_by_key(|p| p.num);
    Some(dev)
}

pub(super) fn gather_netdev(
    r: &mut Reader<'_>,
    sysfs: &Path,
    name: &str,
    dev: &str,
    port: u32,
) -> NetDev {
    let dir = Dir::open(sysfs.join("class").join("net").join(name));
    let d = Some(dev);
    let n = Some(port);
    let mut nd = NetDev {
        name: name.to_string(),
        ..NetDev::default()
    };
    nd.mtu = r
        .text("roce.mtu", d, n, &dir, "mtu")
        .and_then(|s| match s.parse() {
            Ok(v) => Some(v),
            Err(_) => {
                r.problem(
                    "roce.mtu",
                    d,
                    n,
                    &dir.join("mtu"),
                    format!("not an MTU: {s:?}"),
                );
                None
            }
        });
    nd.operstate = r.text("ib.port_state", d, n, &dir, "operstate");
    let ecn = |r: &mut Reader<'_>, side: &str| -> Option<BTreeMap<u8, bool>> {
        let (base, prios) = dir.list_sub(&format!("ecn/{side}/enable")).ok()?;
        let mut m = BTreeMap::new();
        for p in prios {
            let Ok(q) = p.parse::<u8>() else { continue };
            match r.text("roce.ecn", d, n, &base, &p).as_deref() {
                Some("1") => {
                    m.insert(q, true);
                }
                Some("0") => {
                    m.insert(q, false);
                }
                Some(other) => r.problem(
                    "roce.ecn",
                    d,
                    n,
                    &base.join(&p),
                    format!("expected 0 or 1, read {other:?}"),
                ),
                None => {}
            }
        }
        Some(m)
    };
    nd.ecn_np = ecn(r, "roce_np");
    nd.ecn_rp = ecn(r, "roce_rp");
    nd
}

/// PCI device ids of data-centre GPUs, for the BOM and messages. Unknown ids stay numeric.
pub fn gpu_model(device_id: &str) -> Option<&'static str> {
    Some(match device_id {
        "0x20b0" => "A100-SXM4-40GB",
        "0x20b2" => "A100-SXM4-80GB",
        "0x20b5" => "A100-PCIE-80GB",
        "0x20f1" => "A100-PCIE-40GB",
        "0x2330" => "H100-SXM5-80GB",
        "0x2331" => "H100-PCIE-80GB",
        "0x2335" => "H200-SXM-141GB",
        "0x2324" => "H800",
        "0x26b9" => "L40S",
        "0x2901" => "B200",
        _ => return None,
    })
}

/// The GPUs among `bus/pci/devices/` (`bus`, listed as `names`).
pub(super) fn gather_gpus(
    r: &mut Reader<'_>,
    bus: &Dir,
    names: std::io::Result<Vec<String>>,
) -> Result<Vec<Gpu>, String> {
    let names = names.map_err(|e| format!("cannot list {}: {e}", bus.path().display()))?;
    let mut gpus = Vec::new();
    for n in names {
        // Each function's `vendor` relative to the bus folder; only a GPU's folder is opened.
        let Read1::Text(vendor) = bus.read(&format!("{n}/vendor"), MAX_ATTR_BYTES) else {
            continue;
        };
        let vendor = match vendor.as_str() {
            "0x10de" => GpuVendor::Nvidia,
            "0x1002" => GpuVendor::Amd,
            _ => continue,
        };
        let dir = bus.sub(&n);
        let class = r
            .text("gpu.count", Some(&n), None, &dir, "class")
            .unwrap_or_default();
        // 0x0300xx VGA, 0x0302xx 3D controller (PCI code and ID assignment spec).
        if !(class.starts_with("0x0300") || class.starts_with("0x0302")) {
            continue;
        }
        let device_id = r
            .text("gpu.count", Some(&n), None, &dir, "device")
            .unwrap_or_default();
        let numa_node = match dir.read("numa_node", MAX_ATTR_BYTES) {
            Read1::Text(s) => s.parse().ok(),
            _ => None,
        };
        let pci_path = resolve_link(bus, &n)
            .map(|p| pci_chain(&p))
            .unwrap_or_default();
        let mut pcie = read_pcie(r, "pcie.link", &n, &dir);
        read_slot_max(bus, &pci_path, &mut pcie);
        gpus.push(Gpu {
            pci: n.clone(),
            vendor,
            pcie,
            model: gpu_model(&device_id),
            device_id,
            numa_node,
            pci_path,
        });
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_states_and_rates_parse_as_the_kernel_prints_them() {
        assert_eq!(
            parse_state("4: ACTIVE"),
            Some(PortState {
                code: 4,
                name: "ACTIVE".into()
            })
        );
        assert_eq!(parse_state("ACTIVE"), None);
        assert_eq!(parse_rate("400 Gb/sec (4X NDR)").unwrap().gbps, 400.0);
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)").unwrap().gbps, 2.5);
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(parse_rate("NaN Gb/sec"), None);
    }

    #[test]
    fn counter_text_is_a_number_or_no_pma_or_an_error() {
        assert_eq!(parse_counter("42"), Ok(Some(42)));
        assert_eq!(parse_counter("N/A (no PMA)"), Ok(None));
        assert!(parse_counter("").unwrap_err().contains("empty"));
        assert!(parse_counter("abc").unwrap_err().contains("not a counter"));
        assert!(parse_counter("99999999999999999999999").is_err());
    }

    #[test]
    fn pcie_speeds_parse_as_old_and_new_kernels_print_them() {
        assert_eq!(parse_pcie_speed("32.0 GT/s PCIe"), Some(32.0));
        assert_eq!(parse_pcie_speed("16.0 GT/s PCIe"), Some(16.0));
        assert_eq!(parse_pcie_speed("8 GT/s"), Some(8.0));
        assert_eq!(parse_pcie_speed("2.5 GT/s"), Some(2.5));
        assert_eq!(parse_pcie_speed("Unknown"), None);
        assert_eq!(parse_pcie_speed("fast"), None);
        assert_eq!(parse_pcie_width("16"), Some(16));
        assert_eq!(parse_pcie_width("x8"), Some(8));
        assert_eq!(parse_pcie_width("Unknown"), None);
    }

    #[test]
    fn unknown_or_missing_pcie_files_are_could_not_look_and_garbage_is_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("current_link_speed"), "Unknown\n").unwrap();
        std::fs::write(d.join("current_link_width"), "8\n").unwrap();
        std::fs::write(d.join("max_link_speed"), "lots\n").unwrap();
        let mut problems = Vec::new();
        let mut r = Reader {
            problems: &mut problems,
        };
        let l = read_pcie(&mut r, "pcie.link", "mlx5_0", &Dir::open(d.to_owned()));
        assert_eq!(
            l,
            PcieLink {
                cur_gts: None,
                cur_width: Some(8),
                max_gts: None,
                max_width: None,
                ..PcieLink::default()
            }
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].path.ends_with("max_link_speed") && !problems[0].unreadable);
    }

    #[test]
    fn device_names_sort_naturally() {
        let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_1"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["mlx5_1", "mlx5_2", "mlx5_10"]);
    }

    #[test]
    fn oversized_files_are_bad_and_loops_and_directories_unreadable_never_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, "9".repeat(MAX_ATTR_BYTES + 1)).unwrap();
        assert!(matches!(read_capped(&big, MAX_ATTR_BYTES), Read1::Bad(m) if m.contains("longer")));
        let lp = dir.path().join("loop");
        std::os::unix::fs::symlink("loop", &lp).unwrap();
        assert!(matches!(
            read_capped(&lp, MAX_ATTR_BYTES),
            Read1::Unreadable(_)
        ));
        assert!(matches!(
            read_capped(&dir.path().join("nope"), MAX_ATTR_BYTES),
            Read1::Missing
        ));
        assert!(matches!(
            read_capped(dir.path(), MAX_ATTR_BYTES),
            Read1::Unreadable(_)
        ));
    }

    #[test]
    fn a_fifo_without_a_writer_reads_as_empty_instead_of_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        assert!(matches!(read_capped(&fifo, MAX_ATTR_BYTES), Read1::Text(t) if t.is_empty()));
    }
}
