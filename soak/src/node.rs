//! One emulated node's hardware: its sysfs tree (written by `fabric-testkit`), the ports found
//! in it, and the changes noise and faults make to it (counters that rise, saturate or reset;
//! port states; saved `ethtool -S` statistics).
//!
//! Counter rises are gathered in memory and written to the tree just before a probe reads it
//! ([`Hardware::flush`]), so that an hour's noise costs one write per counter that moved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fabric_core::probe::checks::saturation_max;

/// Why a node's tree could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HardwareError {
    /// The fixture writer failed.
    #[error("cannot write the node's sysfs tree: {0}")]
    Fixture(#[from] fabric_testkit::sysfs::Error),
    /// A file of the tree.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HardwareError + '_ {
    move |source| HardwareError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One RDMA port of the node.
#[derive(Debug, Clone)]
pub struct Port {
    /// `mlx5_3`.
    pub dev: String,
    /// `<root>/class/infiniband/<dev>/ports/1`.
    pub dir: PathBuf,
    /// InfiniBand (the GPU fabric) or Ethernet (the storage NICs).
    pub infiniband: bool,
    /// The link's rate.
    pub gbps: f64,
}

/// The node's tree and what is pending for it.
#[derive(Debug)]
pub struct Hardware {
    /// The sysfs root.
    pub root: PathBuf,
    /// Its ports, in device order.
    pub ports: Vec<Port>,
    /// The saved `ethtool -S` outputs (one per Ethernet netdev).
    pub ethtool: Vec<PathBuf>,
    /// Counter rises not yet written: (port index, `counters/symbol_error`) → rise.
    pending: BTreeMap<(usize, &'static str), u64>,
    /// `ethtool -S` rises not yet written: statistic → rise (every Ethernet netdev alike).
    pending_ethtool: BTreeMap<&'static str, u64>,
    /// Each port's folder (`ports[i].dir`), opened once (`O_PATH`) for [`Hardware::flush`]:
    /// the device folders it resolves to stay for the node's life (a reload moves only the
    /// links of `class/infiniband`).
    port_dirs: Vec<Option<rustix::fd::OwnedFd>>,
    /// The counter files [`Hardware::flush`] has rewritten, held open with what it last wrote
    /// in them (see [`OpenCounter`]).
    open_counters: BTreeMap<(usize, &'static str), OpenCounter>,
    /// [`files_replaced_generation`] when `open_counters` was filled: another one, and every
    /// file is opened again.
    opened_at: u64,
    /// [`tree_generation`] right after the last [`Hardware::flush`]: the same at the next one,
    /// and nothing but the flush has written the trees since, so each held file still holds
    /// what the flush wrote in it.
    flushed_at: Option<u64>,
}

/// A counter file held open by [`Hardware::flush`], and what it holds when known (what the
/// flush wrote in it last, while nothing else has written the trees since).
#[derive(Debug)]
struct OpenCounter {
    file: std::fs::File,
    now: Option<InPlace>,
}

#[cfg(test)]
fn read_u64(path: &Path) -> Result<u64, HardwareError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    Ok(text.trim().parse().unwrap_or(0))
}

/// A counter file's value as [`read_u64`] takes it, and its length in bytes.
#[derive(Debug, Clone, Copy)]
struct InPlace {
    value: u64,
    len: usize,
}

/// Reads an open counter file from its start (one `pread` when it is shorter than a page).
fn read_in_place(file: &std::fs::File) -> std::io::Result<InPlace> {
    use std::os::unix::fs::FileExt;
    let mut page = [0u8; 4096];
    let n = file.read_at(&mut page, 0)?;
    let mut all = Vec::new();
    let bytes = if n < page.len() {
        &page[..n]
    } else {
        std::io::Read::read_to_end(&mut &*file, &mut all)?;
        &all[..]
    };
    // As `std::fs::read_to_string`: text or an error.
    let text = std::str::from_utf8(bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(InPlace {
        value: text.trim().parse().unwrap_or(0),
        len: bytes.len(),
    })
}

/// Writes `text` over an open file of `old_len` bytes, as `std::fs::write` would leave it.
fn rewrite_in_place(file: &std::fs::File, text: &[u8], old_len: usize) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(text, 0)?;
    if text.len() < old_len {
        file.set_len(text.len() as u64)?;
    }
    Ok(())
}

fn write_text(path: &Path, text: &str) -> Result<(), HardwareError> {
    tree_changes();
    std::fs::write(path, text).map_err(io(path))
}

std::thread_local! {
    /// How many times this thread has changed a tree (see [`tree_generation`]).
    static TREE_GENERATION: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// How many times this thread has put a file or folder of a tree in another's place (see
    /// [`files_replaced_generation`]).
    static FILES_REPLACED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Notes that a file or folder of this thread's node's trees may now be another one than
/// before (a tree written anew, a file broken or restored, a reload, a GPU gone or back): a
/// descriptor opened before may no longer be the file its path names. Writing a file's
/// contents (truncated and written again) keeps it the same file.
fn files_replaced() {
    FILES_REPLACED.with(|g| g.set(g.get() + 1));
}

/// The generation of this thread's trees' files: unchanged since an earlier reading, every
/// path still names the file it named then.
fn files_replaced_generation() -> u64 {
    FILES_REPLACED.with(std::cell::Cell::get)
}

/// Notes a change to a tree of this thread's node: every write, rename, removal or link the
/// soak makes in a node's sysfs tree or procfs calls it first.
pub fn tree_changes() {
    TREE_GENERATION.with(|g| g.set(g.get() + 1));
}

/// The generation of this thread's trees: unchanged since an earlier reading, nothing in the
/// node's sysfs tree or procfs has been written since (each node lives in its own thread and
/// is the only writer to its trees; the probe and the job steps write only state folders).
pub fn tree_generation() -> u64 {
    TREE_GENERATION.with(std::cell::Cell::get)
}

impl Hardware {
    /// Writes fixture scenario `scenario` at `root` and finds its ports.
    pub fn write(scenario: &str, root: &Path) -> Result<Self, HardwareError> {
        tree_changes();
        files_replaced();
        fabric_testkit::sysfs::write(scenario, root)?;
        let class = root.join("class/infiniband");
        let mut devs: Vec<String> = std::fs::read_dir(&class)
            .map_err(io(&class))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        devs.sort_by_key(|d| {
            let digits: String = d.chars().filter(char::is_ascii_digit).collect();
            (digits.parse::<u32>().unwrap_or(0), d.clone())
        });
        let mut ports = Vec::new();
        for dev in devs {
            let dir = class.join(&dev).join("ports/1");
            let layer = std::fs::read_to_string(dir.join("link_layer")).unwrap_or_default();
            let rate = std::fs::read_to_string(dir.join("rate")).unwrap_or_default();
            let gbps = rate
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(100.0);
            ports.push(Port {
                dev,
                dir,
                infiniband: layer.trim() == "InfiniBand",
                gbps,
            });
        }
        let tools = root.join(".fabric-check/ethtool-S");
        let mut ethtool: Vec<PathBuf> = std::fs::read_dir(&tools)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        ethtool.sort();
        let flags =
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC;
        let port_dirs = ports
            .iter()
            .map(|p| rustix::fs::open(&p.dir, flags, rustix::fs::Mode::empty()).ok())
            .collect();
        Ok(Self {
            root: root.to_owned(),
            ports,
            ethtool,
            pending: BTreeMap::new(),
            pending_ethtool: BTreeMap::new(),
            port_dirs,
            open_counters: BTreeMap::new(),
            opened_at: files_replaced_generation(),
            flushed_at: None,
        })
    }

    /// Raises `counter` (`counters/symbol_error`, `hw_counters/np_cnp_sent`) of port `port` by
    /// `by`, at the next [`Hardware::flush`].
    pub fn rise(&mut self, port: usize, counter: &'static str, by: u64) {
        if by > 0 {
            *self.pending.entry((port, counter)).or_default() += by;
        }
    }

    /// Raises the `ethtool -S` statistic `name` of every Ethernet netdev by `by`.
    pub fn rise_ethtool(&mut self, name: &'static str, by: u64) {
        if by > 0 {
            *self.pending_ethtool.entry(name).or_default() += by;
        }
    }

    /// Writes every pending rise. Legacy `counters/` files stop at the maximum of their IBA
    /// width, as the kernel's do.
    ///
    /// Each counter is read and rewritten in place through one descriptor opened relative to
    /// its port's folder (opened once): four system calls a counter, where reading and writing
    /// it by its whole path took eight and walked the path (through the `class/infiniband`
    /// link) twice (this was a tenth of the soak's CPU). The file is the same one the path
    /// names (a broken file, a link to itself, fails alike: `ELOOP`).
    ///
    /// The files stay open from one flush to the next, until a file of the trees is put in
    /// another's place (a tree written anew, a file broken or restored, a reload, a GPU gone or
    /// back); and while nothing but the flushes has written the trees ([`tree_generation`]), a
    /// held file holds what the last flush wrote there, so it is not read again: one `pwrite` a
    /// counter where it was four system calls (issue 40).
    pub fn flush(&mut self) -> Result<(), HardwareError> {
        if self.opened_at != files_replaced_generation() {
            self.open_counters.clear();
            self.opened_at = files_replaced_generation();
        }
        // Unless nothing but the flushes wrote the trees since the last one, what the held files
        // hold is read again.
        if self.flushed_at != Some(tree_generation()) {
            for held in self.open_counters.values_mut() {
                held.now = None;
            }
        }
        let pending = std::mem::take(&mut self.pending);
        for ((port, counter), by) in pending {
            let folder = &self.ports[port].dir;
            let path = || folder.join(counter);
            let (held, now) = match self.open_counters.entry((port, counter)) {
                std::collections::btree_map::Entry::Occupied(o) => {
                    let held = o.into_mut();
                    let now = match held.now {
                        Some(now) => now,
                        None => read_in_place(&held.file).map_err(|e| io(&path())(e))?,
                    };
                    (held, now)
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC;
                    let file = match &self.port_dirs[port] {
                        Some(fd) => {
                            rustix::fs::openat(fd, counter, flags, rustix::fs::Mode::empty())
                        }
                        None => rustix::fs::open(path(), flags, rustix::fs::Mode::empty()),
                    }
                    .map(std::fs::File::from)
                    .map_err(|e| io(&path())(e.into()))?;
                    let now = read_in_place(&file).map_err(|e| io(&path())(e))?;
                    (v.insert(OpenCounter { file, now: None }), now)
                }
            };
            let name = counter.rsplit('/').next().unwrap_or(counter);
            let mut next = now.value.saturating_add(by);
            if counter.starts_with("counters/")
                && let Some(max) = saturation_max(name)
            {
                next = next.min(max);
            }
            tree_changes();
            // `{next}\n`, written in place without a string.
            let mut buf = [0u8; 24];
            let len = {
                let mut w = &mut buf[..];
                std::io::Write::write_fmt(&mut w, format_args!("{next}\n"))
                    .map_err(|e| io(&path())(e))?;
                24 - w.len()
            };
            rewrite_in_place(&held.file, &buf[..len], now.len).map_err(|e| io(&path())(e))?;
            // As `read_in_place` would read it back.
            held.now = Some(InPlace { value: next, len });
        }
        let rises = std::mem::take(&mut self.pending_ethtool);
        if !rises.is_empty() {
            for file in &self.ethtool {
                let text = std::fs::read_to_string(file).map_err(io(file))?;
                let out = map_ethtool(&text, |name, v| {
                    rises.get(name).map_or(v, |by| v.saturating_add(*by))
                });
                write_text(file, &out)?;
            }
        }
        self.flushed_at = Some(tree_generation());
        Ok(())
    }

    /// Sets counter `counter` of port `port` to `value` now (a saturated counter).
    pub fn set_counter(
        &mut self,
        port: usize,
        counter: &str,
        value: u64,
    ) -> Result<(), HardwareError> {
        write_text(&self.ports[port].dir.join(counter), &format!("{value}\n"))
    }

    /// Every counter back to 0, as a reboot or a driver reload leaves them; pending rises are
    /// dropped (they happened before the reset).
    pub fn reset_counters(&mut self) -> Result<(), HardwareError> {
        self.pending.clear();
        self.pending_ethtool.clear();
        for p in &self.ports {
            for sub in ["counters", "hw_counters"] {
                let dir = p.dir.join(sub);
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for e in entries.flatten() {
                    write_text(&e.path(), "0\n")?;
                }
            }
        }
        for file in &self.ethtool {
            let text = std::fs::read_to_string(file).map_err(io(file))?;
            write_text(file, &map_ethtool(&text, |_, _| 0))?;
        }
        Ok(())
    }

    /// Writes `text` to the file `rel` below the root (a control's or a class's change).
    pub fn write_rel(&self, rel: &str, text: &str) -> Result<(), HardwareError> {
        write_text(&self.root.join(rel), text)
    }

    /// Reads the file `rel` below the root.
    pub fn read_rel(&self, rel: &str) -> Result<String, HardwareError> {
        let p = self.root.join(rel);
        std::fs::read_to_string(&p).map_err(io(&p))
    }

    /// The PCI address of port `port`'s device (`0000:12:00.0`).
    pub fn pci_of(&self, port: usize) -> Option<String> {
        let dev = self
            .root
            .join("class/infiniband")
            .join(&self.ports[port].dev);
        let real = std::fs::canonicalize(dev.join("device")).ok()?;
        Some(real.file_name()?.to_string_lossy().into_owned())
    }

    /// The PCI addresses of the node's GPUs (the functions `nvidia` is bound to).
    pub fn gpus(&self) -> Vec<String> {
        let dir = self.root.join("bus/pci/drivers/nvidia");
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("0000:"))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// GPU `bdf` falls off the bus (`true`: its `bus/pci/devices` entry, driver link and
    /// function folder go away, kept aside) or is back (`false`).
    pub fn gpu_gone(&self, bdf: &str, gone: bool) -> Result<(), HardwareError> {
        tree_changes();
        files_replaced();
        let entry = self.root.join("bus/pci/devices").join(bdf);
        let driver = self.root.join("bus/pci/drivers/nvidia").join(bdf);
        let aside = self.root.join(format!(".gone-{bdf}"));
        let target_file = self.root.join(format!(".gone-{bdf}.link"));
        if gone {
            let target = std::fs::read_link(&entry).map_err(io(&entry))?;
            let by = std::fs::read_link(&driver).map_err(io(&driver))?;
            let real = std::fs::canonicalize(&entry).map_err(io(&entry))?;
            write_text(
                &target_file,
                &format!("{}\n{}\n{}", target.display(), by.display(), real.display()),
            )?;
            std::fs::rename(&real, &aside).map_err(io(&real))?;
            std::fs::remove_file(&entry).map_err(io(&entry))?;
            std::fs::remove_file(&driver).map_err(io(&driver))?;
        } else {
            let saved = std::fs::read_to_string(&target_file).map_err(io(&target_file))?;
            let mut lines = saved.lines();
            let (target, by, real) = (
                lines.next().unwrap_or_default(),
                lines.next().unwrap_or_default(),
                lines.next().unwrap_or_default(),
            );
            std::fs::rename(&aside, real).map_err(io(&aside))?;
            std::os::unix::fs::symlink(target, &entry).map_err(io(&entry))?;
            std::os::unix::fs::symlink(by, &driver).map_err(io(&driver))?;
            std::fs::remove_file(&target_file).map_err(io(&target_file))?;
        }
        Ok(())
    }

    /// Port `port` has no cable: DOWN and `Disabled` (its netdev down), as it was at the first
    /// probe and stays.
    pub fn unprovisioned(&self, port: usize) -> Result<(), HardwareError> {
        self.set_state(port, "1: DOWN", "3: Disabled")?;
        let net = self
            .root
            .join("class/infiniband")
            .join(&self.ports[port].dev)
            .join("device/net");
        if let Ok(rd) = std::fs::read_dir(&net) {
            for e in rd.flatten() {
                write_text(&e.path().join("operstate"), "down\n")?;
            }
        }
        Ok(())
    }

    /// The card of ports `ports` (its functions) is a Gen5-capable ConnectX-7 (`MT4129`,
    /// 32 GT/s) in a slot wired for Gen4: trained at 16 GT/s, its upstream bridge's
    /// `max_link_speed` 16 GT/s.
    pub fn gen5_card_in_gen4_slot(&self, ports: &[usize]) -> Result<(), HardwareError> {
        tree_changes();
        files_replaced();
        for &p in ports {
            let dev = self.root.join("class/infiniband").join(&self.ports[p].dev);
            write_text(&dev.join("hca_type"), "MT4129\n")?;
            write_text(&dev.join("fw_ver"), "28.39.1002\n")?;
            write_text(&dev.join("board_id"), "MT_0000000891\n")?;
            write_text(&dev.join("device/device"), "0x1021\n")?;
            write_text(&dev.join("device/max_link_speed"), "32.0 GT/s PCIe\n")?;
            write_text(&dev.join("device/current_link_speed"), "16.0 GT/s PCIe\n")?;
            if let Some(bdf) = self.pci_of(p) {
                fabric_testkit::sysfs::set_slot_max(&self.root, &bdf, "16.0 GT/s PCIe", 16)
                    .map_err(io(&dev))?;
            }
        }
        Ok(())
    }

    /// Port `port`'s state and physical state files (`4: ACTIVE`, `5: LinkUp`).
    pub fn set_state(&self, port: usize, state: &str, phys: &str) -> Result<(), HardwareError> {
        let dir = &self.ports[port].dir;
        write_text(&dir.join("state"), &format!("{state}\n"))?;
        write_text(&dir.join("phys_state"), &format!("{phys}\n"))
    }
}

/// A change of a node's tree at an emulated moment, applied by [`Timeline::until`] before the
/// probe or watch sample that moment belongs to (a driver reload's devices come back while a
/// probe waits for its second look).
#[derive(Debug, Clone)]
pub enum Change {
    /// A driver reload (`openibd restart`): `class/infiniband` empty (`true`) or back.
    ClassEmpty(bool),
    /// A firmware reset or a flaky read: these files fail to read (a symbolic link to itself,
    /// `ELOOP`, standing in for `EIO`/`ENODEV`) until they are restored.
    Break(Vec<PathBuf>),
    /// The broken files back with these contents.
    Restore(Vec<(PathBuf, String)>),
    /// Port `port`'s state and physical state.
    PortState(usize, &'static str, &'static str),
}

/// The tree changes due at later emulated moments.
#[derive(Debug, Default)]
pub struct Timeline {
    /// The sysfs root.
    pub root: PathBuf,
    /// Its ports (as [`Hardware::ports`]).
    pub ports: Vec<Port>,
    due: std::cell::RefCell<Vec<(u64, Change)>>,
}

impl Timeline {
    /// The timeline of `hw`'s tree.
    pub fn of(hw: &Hardware) -> Self {
        Self {
            root: hw.root.clone(),
            ports: hw.ports.clone(),
            due: Default::default(),
        }
    }

    /// Schedules `change` at `at_ms` (emulated).
    pub fn at(&self, at_ms: u64, change: Change) {
        let mut due = self.due.borrow_mut();
        let i = due.partition_point(|(t, _)| *t <= at_ms);
        due.insert(i, (at_ms, change));
    }

    /// Whether nothing is scheduled.
    pub fn is_idle(&self) -> bool {
        self.due.borrow().is_empty()
    }

    /// Applies every change due at or before `now_ms`, in order.
    pub fn until(&self, now_ms: u64) -> Result<(), HardwareError> {
        loop {
            let next = {
                let mut due = self.due.borrow_mut();
                if due.first().is_none_or(|(t, _)| *t > now_ms) {
                    return Ok(());
                }
                due.remove(0).1
            };
            self.apply(&next)?;
        }
    }

    /// Applies every change still scheduled (the end of the soak, a test).
    pub fn flush_all(&self) -> Result<(), HardwareError> {
        self.until(u64::MAX)
    }

    fn apply(&self, c: &Change) -> Result<(), HardwareError> {
        tree_changes();
        files_replaced();
        match c {
            Change::ClassEmpty(empty) => {
                let class = self.root.join("class/infiniband");
                let away = self.root.join("class/.infiniband-reloading");
                if *empty {
                    std::fs::rename(&class, &away).map_err(io(&class))?;
                    std::fs::create_dir(&class).map_err(io(&class))?;
                } else {
                    std::fs::remove_dir(&class).map_err(io(&class))?;
                    std::fs::rename(&away, &class).map_err(io(&away))?;
                }
            }
            Change::Break(files) => {
                for f in files {
                    // The old file emptied first: a reader holding it open (the watch's
                    // in-place reads) sees a change, as a failing read is one.
                    write_text(f, "")?;
                    std::fs::remove_file(f).map_err(io(f))?;
                    let name = f.file_name().unwrap_or_default();
                    std::os::unix::fs::symlink(name, f).map_err(io(f))?;
                }
            }
            Change::Restore(files) => {
                for (f, text) in files {
                    let _ = std::fs::remove_file(f);
                    write_text(f, text)?;
                }
            }
            Change::PortState(port, state, phys) => {
                let dir = &self.ports[*port].dir;
                write_text(&dir.join("state"), &format!("{state}\n"))?;
                write_text(&dir.join("phys_state"), &format!("{phys}\n"))?;
            }
        }
        Ok(())
    }

    /// Breaks `files` now (at `at_ms`) and restores their contents at `back_ms`.
    pub fn break_for(
        &self,
        files: Vec<PathBuf>,
        at_ms: u64,
        back_ms: u64,
    ) -> Result<(), HardwareError> {
        let mut saved = Vec::new();
        for f in &files {
            saved.push((f.clone(), std::fs::read_to_string(f).map_err(io(f))?));
        }
        self.at(at_ms, Change::Break(files));
        self.at(back_ms, Change::Restore(saved));
        Ok(())
    }
}

/// `ethtool -S` text with every `name: value` line's value replaced by `f(name, value)`.
fn map_ethtool(text: &str, f: impl Fn(&str, u64) -> u64) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        match line.split_once(':') {
            Some((name, v)) if v.trim().parse::<u64>().is_ok() => {
                let indent = &name[..name.len() - name.trim_start().len()];
                let value = f(name.trim(), v.trim().parse().unwrap_or(0));
                out.push_str(&format!("{indent}{}: {value}\n", name.trim()));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legacy_counter_stops_at_its_width_and_a_reset_zeroes_everything() {
        let dir = tempfile::tempdir().unwrap();
        let mut hw = Hardware::write("ib8-healthy", &dir.path().join("sysfs")).unwrap();
        assert_eq!(hw.ports.len(), 10);
        assert_eq!(hw.ports.iter().filter(|p| p.infiniband).count(), 8);
        assert_eq!(hw.ethtool.len(), 2);
        hw.rise(0, "counters/symbol_error", 100_000);
        hw.rise_ethtool("rx_prio3_pause", 5);
        hw.flush().unwrap();
        let sym = hw.ports[0].dir.join("counters/symbol_error");
        assert_eq!(read_u64(&sym).unwrap(), 65_535);
        let eth = std::fs::read_to_string(&hw.ethtool[0]).unwrap();
        assert!(eth.contains("     rx_prio3_pause: 1013\n"), "{eth}");
        hw.reset_counters().unwrap();
        assert_eq!(read_u64(&sym).unwrap(), 0);
        let eth = std::fs::read_to_string(&hw.ethtool[0]).unwrap();
        assert!(eth.contains("     rx_prio3_pause: 0\n"), "{eth}");
    }

    #[test]
    fn the_flush_holds_its_files_and_reads_again_what_another_write_changed() {
        let (_d, mut hw) = node();
        let sym = hw.ports[0].dir.join("counters/symbol_error");
        let oob = hw.ports[1].dir.join("hw_counters/out_of_buffer");
        let sym0 = read_u64(&sym).unwrap();
        hw.rise(0, "counters/symbol_error", 7);
        hw.rise(1, "hw_counters/out_of_buffer", 3);
        hw.flush().unwrap();
        hw.rise(0, "counters/symbol_error", 5);
        hw.flush().unwrap();
        assert_eq!(read_u64(&sym).unwrap(), sym0 + 12);
        // A reset writes past the held files; one flush later (of another counter) the held
        // symbol_error is not taken for what the flush wrote there.
        hw.reset_counters().unwrap();
        hw.rise(1, "hw_counters/out_of_buffer", 1);
        hw.flush().unwrap();
        hw.rise(0, "counters/symbol_error", 2);
        hw.flush().unwrap();
        assert_eq!(read_u64(&sym).unwrap(), 2);
        assert_eq!(read_u64(&oob).unwrap(), 1);
        // A file broken and restored is another file: opened again.
        let t = Timeline::of(&hw);
        t.break_for(vec![sym.clone()], 1, 2).unwrap();
        t.flush_all().unwrap();
        hw.rise(0, "counters/symbol_error", 100);
        hw.flush().unwrap();
        assert_eq!(read_u64(&sym).unwrap(), 102);
    }

    fn node() -> (tempfile::TempDir, Hardware) {
        let dir = tempfile::tempdir().unwrap();
        let hw = Hardware::write("ib8-healthy", &dir.path().join("sysfs")).unwrap();
        (dir, hw)
    }

    #[test]
    fn a_driver_reload_empties_class_infiniband_for_its_window_then_brings_every_device_back() {
        let (_d, hw) = node();
        let t = Timeline::of(&hw);
        t.at(1_000, Change::ClassEmpty(true));
        t.at(6_000, Change::ClassEmpty(false));
        let class = hw.root.join("class/infiniband");
        t.until(999).unwrap();
        assert_eq!(std::fs::read_dir(&class).unwrap().count(), 10);
        t.until(1_000).unwrap();
        assert_eq!(std::fs::read_dir(&class).unwrap().count(), 0);
        t.until(6_000).unwrap();
        assert_eq!(std::fs::read_dir(&class).unwrap().count(), 10);
        assert!(t.is_idle());
    }

    #[test]
    fn a_file_broken_by_a_read_error_or_firmware_reset_fails_to_read_until_its_window_ends() {
        let (_d, hw) = node();
        let t = Timeline::of(&hw);
        let state = hw.ports[3].dir.join("state");
        t.break_for(vec![state.clone()], 10, 20).unwrap();
        t.until(10).unwrap();
        assert!(std::fs::read_to_string(&state).is_err());
        t.until(20).unwrap();
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "4: ACTIVE\n");
    }

    #[test]
    fn a_gpu_that_falls_off_the_bus_leaves_bus_pci_devices_and_comes_back_when_repaired() {
        let (_d, hw) = node();
        let gpus = hw.gpus();
        assert_eq!(gpus.len(), 8);
        hw.gpu_gone(&gpus[2], true).unwrap();
        assert_eq!(hw.gpus().len(), 7);
        assert!(!hw.root.join("bus/pci/devices").join(&gpus[2]).exists());
        hw.gpu_gone(&gpus[2], false).unwrap();
        assert_eq!(hw.gpus(), gpus);
        assert!(
            hw.root
                .join("bus/pci/devices")
                .join(&gpus[2])
                .join("vendor")
                .exists()
        );
    }

    #[test]
    fn a_gen5_storage_card_in_a_gen4_slot_trains_at_16_gts_under_a_16_gts_bridge() {
        let (_d, hw) = node();
        hw.gen5_card_in_gen4_slot(&[8, 9]).unwrap();
        let dev = hw.root.join("class/infiniband/mlx5_8/device");
        assert_eq!(
            std::fs::read_to_string(dev.join("max_link_speed")).unwrap(),
            "32.0 GT/s PCIe\n"
        );
        let up = std::fs::canonicalize(&dev)
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        assert_eq!(
            std::fs::read_to_string(up.join("max_link_speed")).unwrap(),
            "16.0 GT/s PCIe\n"
        );
    }

    #[test]
    fn an_unprovisioned_port_reads_down_and_disabled_with_its_netdev_down() {
        let (_d, hw) = node();
        hw.unprovisioned(9).unwrap();
        assert_eq!(
            std::fs::read_to_string(hw.ports[9].dir.join("state")).unwrap(),
            "1: DOWN\n"
        );
        let net = hw.root.join("class/net/ens9f1np1/operstate");
        assert_eq!(std::fs::read_to_string(net).unwrap(), "down\n");
    }
}
