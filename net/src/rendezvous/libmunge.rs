//! MUNGE credentials through `libmunge`, loaded at run time: raw FFI → `Result` → safe types.
//!
//! Why: each `munge`/`unmunge` program start costs the rendezvous leader about 3 ms of CPU (a
//! fork, an exec, a dynamic link and a connect to munged), once per follower, which made a
//! 1,024-node rendezvous take seconds (`docs/benchmarks.md`, `bench-scale` (a)). A call through
//! the library is one round trip to munged's socket.
//!
//! How: the library is opened once by absolute path from the system's own library folders
//! (never through `LD_LIBRARY_PATH` or a search of the caller's environment: this runs as root
//! from the job step), and a host without it uses the programs ([`super::munge`]). Every call
//! makes its own MUNGE context, as `munge.h` asks of threaded callers, and frees what libmunge
//! allocated. Time limits are the caller's ([`super::munge::Munge`] runs each call on a thread
//! it can walk away from).
//!
//! This file and the plugin's and the verbs loopback's FFI files are the only places with
//! `unsafe`.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

/// `munge_opt_t`'s `MUNGE_OPT_SOCKET` (munge.h): the socket to reach munged on (a string).
const MUNGE_OPT_SOCKET: c_int = 8;
/// `munge_opt_t`'s `MUNGE_OPT_UID_RESTRICTION` (munge.h): the one UID that may decode (`uid_t`).
const MUNGE_OPT_UID_RESTRICTION: c_int = 9;
/// `EMUNGE_NO_MEMORY` (munge.h), for a context that could not be made.
const EMUNGE_NO_MEMORY: c_int = 5;
/// `EMUNGE_BAD_ARG` (munge.h), for input libmunge cannot take (a NUL byte, a huge payload).
const EMUNGE_BAD_ARG: c_int = 2;

type Ctx = *mut c_void;
type EncodeFn = unsafe extern "C" fn(*mut *mut c_char, Ctx, *const c_void, c_int) -> c_int;
type DecodeFn = unsafe extern "C" fn(
    *const c_char,
    Ctx,
    *mut *mut c_void,
    *mut c_int,
    *mut nix::libc::uid_t,
    *mut nix::libc::gid_t,
) -> c_int;
type CtxCreateFn = unsafe extern "C" fn() -> Ctx;
type CtxDestroyFn = unsafe extern "C" fn(Ctx);
type CtxSetFn = unsafe extern "C" fn(Ctx, c_int, ...) -> c_int;
type CtxStrerrorFn = unsafe extern "C" fn(Ctx) -> *const c_char;

/// libmunge's functions, resolved once; the library stays loaded for the life of the process.
struct Api {
    _library: libloading::Library,
    encode: EncodeFn,
    decode: DecodeFn,
    ctx_create: CtxCreateFn,
    ctx_destroy: CtxDestroyFn,
    ctx_set: CtxSetFn,
    ctx_strerror: CtxStrerrorFn,
}

/// Where libmunge's runtime library is on Debian/Ubuntu (multiarch), RHEL/Rocky and source
/// installs into `/usr`; root-owned system folders only.
fn candidates() -> Vec<String> {
    let arch = std::env::consts::ARCH;
    vec![
        format!("/usr/lib/{arch}-linux-gnu/libmunge.so.2"),
        "/usr/lib64/libmunge.so.2".to_owned(),
        "/usr/lib/libmunge.so.2".to_owned(),
    ]
}

fn load(path: &Path) -> Option<Api> {
    // SAFETY: loading libmunge runs only its (empty) initialisers; the path is absolute, so the
    // loader searches no folder the environment names.
    let library = unsafe { libloading::Library::new(path) }.ok()?;
    // SAFETY: each symbol is libmunge's function of exactly this C signature (munge.h of every
    // libmunge.so.2, MUNGE 0.5.x): munge_encode, munge_decode, munge_ctx_create,
    // munge_ctx_destroy, the variadic munge_ctx_set and munge_ctx_strerror. The pointers are
    // copied out while `library`, stored beside them, keeps them valid.
    unsafe {
        let encode = *library.get::<EncodeFn>(b"munge_encode\0").ok()?;
        let decode = *library.get::<DecodeFn>(b"munge_decode\0").ok()?;
        let ctx_create = *library.get::<CtxCreateFn>(b"munge_ctx_create\0").ok()?;
        let ctx_destroy = *library.get::<CtxDestroyFn>(b"munge_ctx_destroy\0").ok()?;
        let ctx_set = *library.get::<CtxSetFn>(b"munge_ctx_set\0").ok()?;
        let ctx_strerror = *library.get::<CtxStrerrorFn>(b"munge_ctx_strerror\0").ok()?;
        Some(Api {
            _library: library,
            encode,
            decode,
            ctx_create,
            ctx_destroy,
            ctx_set,
            ctx_strerror,
        })
    }
}

fn api() -> Option<&'static Api> {
    static API: OnceLock<Option<Api>> = OnceLock::new();
    API.get_or_init(|| candidates().iter().find_map(|p| load(Path::new(p))))
        .as_ref()
}

/// Whether libmunge could be loaded on this host (else the programs are used).
pub fn available() -> bool {
    api().is_some()
}

/// A MUNGE error from the library: its code (`munge_err_t`) and libmunge's own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibError {
    /// The `munge_err_t` code (the same numbers `unmunge` exits with).
    pub status: i32,
    /// libmunge's message for it, when it gave one.
    pub detail: String,
}

/// One MUNGE context, destroyed on drop; the socket path it was given lives as long as it.
struct Context {
    api: &'static Api,
    ctx: Ctx,
    _socket: Option<CString>,
}

impl Context {
    fn new(api: &'static Api, socket: Option<&Path>) -> Result<Self, LibError> {
        // SAFETY: munge_ctx_create takes nothing and returns a new context or NULL.
        let ctx = unsafe { (api.ctx_create)() };
        if ctx.is_null() {
            return Err(LibError {
                status: EMUNGE_NO_MEMORY,
                detail: "libmunge could not make a context".to_owned(),
            });
        }
        let mut me = Self {
            api,
            ctx,
            _socket: None,
        };
        if let Some(path) = socket {
            let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| LibError {
                status: EMUNGE_BAD_ARG,
                detail: "the munged socket path holds a NUL byte".to_owned(),
            })?;
            // SAFETY: MUNGE_OPT_SOCKET takes one `const char *`; `c` is NUL-terminated and is
            // kept beside the context for as long as it lives.
            let rc = unsafe { (api.ctx_set)(me.ctx, MUNGE_OPT_SOCKET, c.as_ptr()) };
            me._socket = Some(c);
            me.check(rc)?;
        }
        Ok(me)
    }

    fn restrict_to(&self, uid: u32) -> Result<(), LibError> {
        // SAFETY: MUNGE_OPT_UID_RESTRICTION takes one `uid_t` (an unsigned int on Linux).
        let rc = unsafe {
            (self.api.ctx_set)(self.ctx, MUNGE_OPT_UID_RESTRICTION, uid as nix::libc::uid_t)
        };
        self.check(rc)
    }

    /// `rc` as a result, with the context's message for an error.
    fn check(&self, rc: c_int) -> Result<(), LibError> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: munge_ctx_strerror returns NULL or a NUL-terminated string owned by the
        // context, read here before the context can change or go.
        let msg = unsafe { (self.api.ctx_strerror)(self.ctx) };
        let detail = if msg.is_null() {
            String::new()
        } else {
            // SAFETY: non-NULL, NUL-terminated (above).
            unsafe { CStr::from_ptr(msg) }
                .to_string_lossy()
                .into_owned()
        };
        Err(LibError { status: rc, detail })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from munge_ctx_create and is destroyed once, here.
        unsafe { (self.api.ctx_destroy)(self.ctx) }
    }
}

/// Frees memory libmunge allocated for the caller (a credential or a payload).
fn free_munge(p: *mut c_void) {
    if !p.is_null() {
        // SAFETY: libmunge allocates what it returns with malloc and the caller frees it.
        unsafe { nix::libc::free(p) }
    }
}

/// Encodes `payload`, decodable only by `restrict_uid` when given. `None`: no libmunge here.
pub fn encode(
    socket: Option<&Path>,
    payload: &[u8],
    restrict_uid: Option<u32>,
) -> Option<Result<String, LibError>> {
    let api = api()?;
    Some((|| {
        let ctx = Context::new(api, socket)?;
        if let Some(uid) = restrict_uid {
            ctx.restrict_to(uid)?;
        }
        let len = c_int::try_from(payload.len()).map_err(|_| LibError {
            status: EMUNGE_BAD_ARG,
            detail: format!("a payload of {} bytes is too long for MUNGE", payload.len()),
        })?;
        let mut cred: *mut c_char = std::ptr::null_mut();
        // SAFETY: `payload` is valid for `len` bytes; `cred` receives a malloc'd NUL-terminated
        // string (or stays NULL on error), freed below.
        let rc = unsafe { (api.encode)(&mut cred, ctx.ctx, payload.as_ptr().cast(), len) };
        let text = (!cred.is_null()).then(|| {
            // SAFETY: non-NULL: libmunge's NUL-terminated base64 credential.
            unsafe { CStr::from_ptr(cred) }
                .to_string_lossy()
                .into_owned()
        });
        free_munge(cred.cast());
        ctx.check(rc)?;
        text.ok_or_else(|| LibError {
            status: 1,
            detail: "libmunge reported success but returned no credential".to_owned(),
        })
    })())
}

/// What a decode gave: the encoder's ids and the payload.
pub type DecodedParts = (u32, u32, Vec<u8>);

/// Decodes and validates `credential`. `None`: no libmunge here.
pub fn decode(socket: Option<&Path>, credential: &str) -> Option<Result<DecodedParts, LibError>> {
    let api = api()?;
    Some((|| {
        let ctx = Context::new(api, socket)?;
        let cred = CString::new(credential).map_err(|_| LibError {
            status: 8,
            detail: "the credential holds a NUL byte".to_owned(),
        })?;
        let mut buf: *mut c_void = std::ptr::null_mut();
        let mut len: c_int = 0;
        let mut uid: nix::libc::uid_t = 0;
        let mut gid: nix::libc::gid_t = 0;
        // SAFETY: `cred` is NUL-terminated; the out-pointers are valid locals; libmunge sets
        // `buf` to a malloc'd payload of `len` bytes (or NULL), also for some errors, freed below.
        let rc = unsafe {
            (api.decode)(
                cred.as_ptr(),
                ctx.ctx,
                &mut buf,
                &mut len,
                &mut uid,
                &mut gid,
            )
        };
        let payload = match usize::try_from(len) {
            Ok(n) if n > 0 && !buf.is_null() => {
                // SAFETY: non-NULL and `len` bytes long, as munge_decode promises.
                unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) }.to_vec()
            }
            _ => Vec::new(),
        };
        free_munge(buf);
        ctx.check(rc)?;
        Ok((uid, gid, payload))
    })())
}
