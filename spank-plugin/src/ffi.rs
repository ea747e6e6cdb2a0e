//! The only unsafe code of the plugin: bindings generated from the installed `slurm/spank.h`,
//! the symbols Slurm looks up, and [`SlurmHost`], the safe face of a live `spank_t`.
//!
//! Layering, as cudarc does for CUDA: raw bindings (`sys`) → small functions that return Rust
//! values (`SlurmHost` methods) → the safe [`Host`] trait used by [`crate::plugin`].
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::plugin::{self, CallbackError, Context, Host, HostError};

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_debug_implementations,
    clippy::all
)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/spank_bindings.rs"));
}

/// The plugin's name; Slurm derives the option's environment variable from it
/// (`SPANK__SLURM_SPANK_OPTION_fabric_check_fabric_check`).
// SAFETY: a NUL-terminated byte array with the exact name and type Slurm's loader looks up.
#[unsafe(no_mangle)]
pub static plugin_name: [u8; 13] = *b"fabric_check\0";

/// Marks the library as a SPANK plugin.
// SAFETY: as above; Slurm requires the value "spank".
#[unsafe(no_mangle)]
pub static plugin_type: [u8; 6] = *b"spank\0";

/// The Slurm version the plugin was built against; Slurm loads it only on the same major.minor.
// SAFETY: an `unsigned int`, as `SPANK_PLUGIN()` in spank.h declares it.
#[unsafe(no_mangle)]
pub static plugin_version: u32 = sys::SLURM_VERSION_NUMBER;

/// The `spank_option` Slurm keeps a pointer to after registration, so it must be static.
struct OptionCell(sys::spank_option);

// SAFETY: the struct only holds pointers to 'static C string literals and a function pointer;
// neither we nor Slurm write through them, and the plugin starts no threads.
unsafe impl Sync for OptionCell {}

static FABRIC_OPTION: OptionCell = OptionCell(sys::spank_option {
    name: c"fabric-check".as_ptr().cast_mut(),
    arginfo: c"quick|full|off".as_ptr().cast_mut(),
    usage: c"Check the RDMA fabric of the job's nodes before it starts: quick (node probe, the default), full (probe and a cross-node collective) or off.".as_ptr().cast_mut(),
    has_arg: 2,
    val: 1,
    cb: Some(option_cb),
});

fn option_ptr() -> *mut sys::spank_option {
    std::ptr::from_ref(&FABRIC_OPTION.0).cast_mut()
}

/// `--fabric-check-spares=K` (`fabric_proto::spares::SPARES_OPTION`), registered next to it.
static SPARES_OPTION: OptionCell = OptionCell(sys::spank_option {
    name: c"fabric-check-spares".as_ptr().cast_mut(),
    arginfo: c"K".as_ptr().cast_mut(),
    usage: c"Ask for K spare nodes among the job's -N: every node is checked before the job starts, and the job runs on N-K nodes that passed, without a requeue (batch jobs; the cluster's spares_max= limits K).".as_ptr().cast_mut(),
    has_arg: 1,
    val: 2,
    cb: Some(spares_cb),
});

fn spares_ptr() -> *mut sys::spank_option {
    std::ptr::from_ref(&SPARES_OPTION.0).cast_mut()
}

/// `spank_option_getopt` of one of the plugin's options.
fn getopt(sp: sys::spank_t, opt: *mut sys::spank_option) -> Option<Option<String>> {
    let mut optarg: *mut c_char = std::ptr::null_mut();
    // SAFETY: valid handle, 'static option, and a valid out-pointer.
    let rc = unsafe { sys::spank_option_getopt(sp, opt, &mut optarg) };
    if rc != sys::ESPANK_SUCCESS {
        return None;
    }
    if optarg.is_null() {
        return Some(None);
    }
    // SAFETY: Slurm returns a NUL-terminated string it owns for the callback's duration.
    let s = unsafe { CStr::from_ptr(optarg) }
        .to_string_lossy()
        .into_owned();
    Some(Some(s))
}

/// Runs `f`, turning an error or a panic into a logged message and `-1`.
fn guard(callback: &str, f: impl FnOnce() -> Result<(), CallbackError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            log_error(&e.to_string());
            -1
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log_error(&format!(
                "fabric-check: internal error in {callback}: {what}; the callback failed cleanly, please report it"
            ));
            -1
        }
    }
}

fn c_message(msg: &str) -> CString {
    let clean: String = msg
        .chars()
        .map(|c| if c == '\0' { '?' } else { c })
        .collect();
    CString::new(clean).unwrap_or_default()
}

fn log_info(msg: &str) {
    let m = c_message(msg);
    // SAFETY: "%s" with one valid NUL-terminated string, as slurm_info's printf contract wants.
    unsafe { sys::slurm_info(c"%s".as_ptr(), m.as_ptr()) }
}

fn log_error(msg: &str) {
    let m = c_message(msg);
    // SAFETY: as in `log_info`.
    unsafe { sys::slurm_error(c"%s".as_ptr(), m.as_ptr()) }
}

fn log_debug(msg: &str) {
    let m = c_message(msg);
    // SAFETY: as in `log_info`.
    unsafe { sys::slurm_debug(c"%s".as_ptr(), m.as_ptr()) }
}

/// Copies `argv[0..ac]` into owned strings (lossy UTF-8).
///
/// # Safety
/// `av` must point to `ac` valid NUL-terminated strings (Slurm's contract), or be null.
unsafe fn args(ac: c_int, av: *mut *mut c_char) -> Vec<String> {
    if av.is_null() || ac <= 0 {
        return Vec::new();
    }
    (0..ac as usize)
        .filter_map(|i| {
            // SAFETY: i < ac and av holds ac pointers (caller's contract).
            let p = unsafe { *av.add(i) };
            // SAFETY: each non-null entry is a NUL-terminated string owned by Slurm.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
        .collect()
}

/// The safe face of a live `spank_t`, valid for one callback.
struct SlurmHost {
    sp: sys::spank_t,
}

impl Host for SlurmHost {
    fn context(&self) -> Context {
        // SAFETY: no arguments; valid in every callback.
        match unsafe { sys::spank_context() } {
            sys::spank_context::S_CTX_LOCAL => Context::Local,
            sys::spank_context::S_CTX_REMOTE => Context::Remote,
            sys::spank_context::S_CTX_ALLOCATOR => Context::Allocator,
            sys::spank_context::S_CTX_SLURMD => Context::Slurmd,
            sys::spank_context::S_CTX_JOB_SCRIPT => Context::JobScript,
            _ => Context::Unknown,
        }
    }

    fn register_option(&self) -> Result<(), HostError> {
        // SAFETY: `sp` is the handle of the running callback; the option is 'static.
        let rc = unsafe { sys::spank_option_register(self.sp, option_ptr()) };
        if rc != sys::ESPANK_SUCCESS {
            return Err(HostError::Register(rc.into()));
        }
        // SAFETY: as above, for the second 'static option.
        let rc = unsafe { sys::spank_option_register(self.sp, spares_ptr()) };
        if rc == sys::ESPANK_SUCCESS {
            Ok(())
        } else {
            Err(HostError::Register(rc.into()))
        }
    }

    fn option(&self) -> Option<Option<String>> {
        getopt(self.sp, option_ptr())
    }

    fn spares_option(&self) -> Option<Option<String>> {
        getopt(self.sp, spares_ptr())
    }

    fn job_id(&self) -> Option<u32> {
        let mut id: u32 = 0;
        // SAFETY: S_JOB_ID takes one `uint32_t *` (spank.h).
        let rc =
            unsafe { sys::spank_get_item(self.sp, sys::spank_item_S_JOB_ID, &mut id as *mut u32) };
        (rc == sys::ESPANK_SUCCESS).then_some(id)
    }

    fn job_uid(&self) -> Option<u32> {
        let mut uid: u32 = 0;
        // SAFETY: S_JOB_UID takes one `uid_t *` (spank.h); uid_t is 32 bits on Linux.
        let rc = unsafe {
            sys::spank_get_item(self.sp, sys::spank_item_S_JOB_UID, &mut uid as *mut u32)
        };
        (rc == sys::ESPANK_SUCCESS).then_some(uid)
    }

    fn step_id(&self) -> Option<u32> {
        let mut id: u32 = 0;
        // SAFETY: S_JOB_STEPID takes one `uint32_t *` (spank.h).
        let rc = unsafe {
            sys::spank_get_item(self.sp, sys::spank_item_S_JOB_STEPID, &mut id as *mut u32)
        };
        (rc == sys::ESPANK_SUCCESS).then_some(id)
    }

    fn node_id(&self) -> Option<u32> {
        let mut id: u32 = 0;
        // SAFETY: S_JOB_NODEID takes one `uint32_t *` (spank.h).
        let rc = unsafe {
            sys::spank_get_item(self.sp, sys::spank_item_S_JOB_NODEID, &mut id as *mut u32)
        };
        (rc == sys::ESPANK_SUCCESS).then_some(id)
    }

    fn step_nnodes(&self) -> Option<u32> {
        let mut n: u32 = 0;
        // SAFETY: S_JOB_NNODES takes one `uint32_t *` (spank.h).
        let rc = unsafe {
            sys::spank_get_item(self.sp, sys::spank_item_S_JOB_NNODES, &mut n as *mut u32)
        };
        (rc == sys::ESPANK_SUCCESS).then_some(n)
    }

    fn job_env(&self, name: &str) -> Option<String> {
        let var = CString::new(name).ok()?;
        // A node list of thousands of nodes in Slurm's compressed form fits; a longer value
        // (ESPANK_NOSPACE) is not used.
        let mut buf = vec![0u8; 64 * 1024];
        let len = c_int::try_from(buf.len()).ok()?;
        // SAFETY: `var` is NUL-terminated and outlives the call; `buf` is `len` writable bytes
        // that spank_getenv fills with a NUL-terminated value when it fits (spank.h:
        // `spank_getenv(spank_t, const char *var, char *buf, int len)`).
        let rc = unsafe {
            sys::spank_getenv(
                self.sp,
                var.as_ptr(),
                buf.as_mut_ptr().cast::<c_char>(),
                len,
            )
        };
        if rc != sys::ESPANK_SUCCESS {
            return None;
        }
        let end = buf.iter().position(|b| *b == 0)?;
        buf.truncate(end);
        String::from_utf8(buf).ok()
    }

    fn can_prepend_task_argv(&self) -> bool {
        prepend_fn().is_some()
    }

    fn prepend_task_argv(&self, argv: &[String]) -> Result<(), HostError> {
        let f = prepend_fn().ok_or(HostError::Unavailable("spank_prepend_task_argv"))?;
        let owned: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_str()))
            .collect::<Result<_, _>>()
            .map_err(|_| HostError::NulByte("an argument"))?;
        let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let argc =
            c_int::try_from(owned.len()).map_err(|_| HostError::TooManyArguments(owned.len()))?;
        // SAFETY: `f` is Slurm's `spank_prepend_task_argv(spank_t, int, const char **)`, found by
        // name in the host; `sp` is the handle of the running callback; `ptrs` holds `argc` valid
        // NUL-terminated strings (plus a NULL) that outlive the call, and Slurm copies them.
        let rc = unsafe { f(self.sp, argc, ptrs.as_ptr()) };
        if rc == sys::ESPANK_SUCCESS {
            Ok(())
        } else {
            Err(HostError::Spank {
                call: "spank_prepend_task_argv",
                rc: rc.into(),
            })
        }
    }

    fn setenv(&self, name: &str, value: &str) -> Result<(), HostError> {
        let (Ok(n), Ok(v)) = (CString::new(name), CString::new(value)) else {
            return Err(HostError::NulByte("the variable's name or value"));
        };
        // SAFETY: two NUL-terminated strings that outlive the call; spank_setenv copies them
        // (spank.h: `spank_setenv(spank_t, const char *var, const char *val, int overwrite)`).
        let rc = unsafe { sys::spank_setenv(self.sp, n.as_ptr(), v.as_ptr(), 1) };
        if rc == sys::ESPANK_SUCCESS {
            Ok(())
        } else {
            Err(HostError::Spank {
                call: "spank_setenv",
                rc: rc.into(),
            })
        }
    }

    fn unsetenv(&self, name: &str) -> Result<(), HostError> {
        let Ok(n) = CString::new(name) else {
            return Err(HostError::NulByte("the variable's name"));
        };
        // SAFETY: a NUL-terminated string that outlives the call; spank_unsetenv only reads it
        // (spank.h: `spank_unsetenv(spank_t, const char *var)`).
        let rc = unsafe { sys::spank_unsetenv(self.sp, n.as_ptr()) };
        if rc == sys::ESPANK_SUCCESS {
            Ok(())
        } else {
            Err(HostError::Spank {
                call: "spank_unsetenv",
                rc: rc.into(),
            })
        }
    }

    fn info(&self, msg: &str) {
        log_info(msg);
    }

    fn error(&self, msg: &str) {
        log_error(msg);
    }

    fn debug(&self, msg: &str) {
        log_debug(msg);
    }
}

/// `spank_prepend_task_argv`'s C signature (spank.h of Slurm 23.11 and newer).
type PrependFn =
    unsafe extern "C" fn(sys::spank_t, c_int, *const *const c_char) -> sys::spank_err_t;

/// Looks up `spank_prepend_task_argv` in the host process (Slurm 23.11+ exports it from
/// slurmstepd). Linking it directly would make `dlopen` fail on older Slurm.
fn prepend_fn() -> Option<PrependFn> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only searches loaded objects.
    let p =
        unsafe { nix::libc::dlsym(nix::libc::RTLD_DEFAULT, c"spank_prepend_task_argv".as_ptr()) };
    // SAFETY: when present, the symbol is Slurm's function with exactly this signature
    // (`spank_err_t spank_prepend_task_argv(spank_t, int, const char *argv[])`).
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut std::ffi::c_void, PrependFn>(p) })
}

extern "C" fn option_cb(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    guard("the --fabric-check option", || {
        let value = (!optarg.is_null()).then(|| {
            // SAFETY: Slurm passes the user's argument as a NUL-terminated string or NULL.
            unsafe { CStr::from_ptr(optarg) }
                .to_string_lossy()
                .into_owned()
        });
        plugin::option_value(val, value.as_deref(), remote != 0)
    })
}

extern "C" fn spares_cb(_val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    guard("the --fabric-check-spares option", || {
        let value = (!optarg.is_null()).then(|| {
            // SAFETY: Slurm passes the user's argument as a NUL-terminated string or NULL.
            unsafe { CStr::from_ptr(optarg) }
                .to_string_lossy()
                .into_owned()
        });
        plugin::spares_value(value.as_deref(), remote != 0)
    })
}

/// Called by Slurm in srun, sbatch, salloc and slurmstepd; registers `--fabric-check`.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    let host = SlurmHost { sp };
    let rc = guard("slurm_spank_init", || {
        // SAFETY: Slurm passes the plugin's plugstack.conf words as (ac, av).
        let words = unsafe { args(ac, av) };
        plugin::init(&host, &words)
    });
    // A failing init stops slurmd itself (for a required plugin); the plugin has nothing to do
    // there at init, so it never takes the node down with it.
    if rc != 0 && !host.context().registers_option() {
        log_error("fabric-check: continuing without the option in this daemon");
        return 0;
    }
    rc
}

/// Called as root in `slurmstepd spank prolog` on every node of the job before it starts.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_job_prolog(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    guard("slurm_spank_job_prolog", || {
        // SAFETY: as in `slurm_spank_init`.
        let words = unsafe { args(ac, av) };
        plugin::job_script(&SlurmHost { sp }, &words, plugin::Script::Prolog)
    })
}

/// Called as root in `slurmstepd spank epilog` on every node of the job after it ends. Never
/// fails: an error or a caught panic is logged, and Slurm would drain the node for it
/// ([`plugin::script_rc`]).
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_job_epilog(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    let rc = guard("slurm_spank_job_epilog", || {
        // SAFETY: as in `slurm_spank_init`.
        let words = unsafe { args(ac, av) };
        plugin::job_script(&SlurmHost { sp }, &words, plugin::Script::Epilog)
    });
    if rc != 0 {
        log_error(
            "fabric-check: epilog: the error above is logged, not returned: the node stays up",
        );
    }
    plugin::script_rc(plugin::Script::Epilog, rc)
}

/// Called in slurmstepd as the job's user before a step's tasks start: tells them the spool.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_user_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    guard("slurm_spank_user_init", || {
        // SAFETY: as in `slurm_spank_init`.
        let words = unsafe { args(ac, av) };
        plugin::user_init(&SlurmHost { sp }, &words)
    })
}

/// Called in each task of a step as root, before it becomes the job's user: the batch step of
/// a job shrunk to its good nodes (`--fabric-check-spares`) reads them here.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_task_init_privileged(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    guard("slurm_spank_task_init_privileged", || {
        // SAFETY: as in `slurm_spank_init`.
        let words = unsafe { args(ac, av) };
        plugin::task_init_privileged(&SlurmHost { sp }, &words)
    })
}

/// Called in each task of a step (as the job's user, before it execs): on Slurm 23.11+ a
/// `--fabric-check=full` step gets the step gate prepended to its command line.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_task_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    guard("slurm_spank_task_init", || {
        // SAFETY: as in `slurm_spank_init`.
        let words = unsafe { args(ac, av) };
        plugin::task_init(&SlurmHost { sp }, &words)
    })
}

/// Called in srun, sbatch/salloc and slurmstepd when the plugin is unloaded; in slurmstepd (as
/// root, the step's tasks ended, the job still running) the step's first node writes its run
/// summary into the live tag. Never fails the step.
#[unsafe(no_mangle)]
pub extern "C" fn slurm_spank_exit(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    let rc = guard("slurm_spank_exit", || {
        // SAFETY: as in `slurm_spank_init`.
        let words = unsafe { args(ac, av) };
        plugin::step_exit(&SlurmHost { sp }, &words)
    });
    if rc != 0 {
        log_error("fabric-check: step end: the error above is logged, not returned");
    }
    0
}
