//! The only unsafe code of the verbs loopback: libibverbs through rdma-sys 0.3.
//!
//! Layering, as cudarc does for CUDA and `spank-plugin/src/ffi.rs` does for Slurm: raw rdma-sys
//! calls → small functions that check the return value and give a [`VerbsError`] naming the call
//! and errno → safe RAII types ([`DeviceList`], [`Context`], [`Pd`], [`Mr`], [`Cq`], [`Qp`]) whose
//! `Drop` releases the resource. Lifetimes tie each child to its parent (a `Qp` borrows its `Pd`
//! and `Cq`, which borrow the `Context`), so Rust's reverse drop order is also the order
//! libibverbs requires (QP, CQ, MR, PD, device), on every path, error or not.
//!
//! rdma-sys implements verbs.h's `static inline` functions in Rust (`ibv_post_send`,
//! `ibv_poll_cq` through `context->ops`, `ibv_query_port` as `___ibv_query_port` through the
//! extended context); its versions `unwrap()` the provider's function pointer, so this module
//! checks the pointer first and returns an error instead of panicking.
//!
//! With the `gpudirect` feature it also holds the CUDA side of GPU memory: [`GpuBuffer`]
//! (`cuMemAlloc`, optionally exported as a dma-buf with `cuMemGetHandleForAddressRange`, freed
//! with `cuMemFree` after the fd is closed) and its two registrations, [`Pd::reg_gpu_dma_buf`]
//! (`ibv_reg_dmabuf_mr`, bound by rdma-sys from verbs.h of rdma-core ≥ 34) and
//! [`Pd::reg_gpu_peermem`] (plain `ibv_reg_mr` of the device pointer, which only works while
//! `nvidia_peermem` is loaded). The CUDA context itself is cudarc's safe `CudaContext`.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use rdma_sys as sys;

/// A failed verbs call: which one and the errno it left.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {}; check the HCA driver (ib_uverbs loaded, `ibv_devinfo`) and the memlock limit (`ulimit -l`)", nix::errno::Errno::from_raw(*errno))]
pub struct VerbsError {
    /// The libibverbs function.
    pub call: &'static str,
    /// The errno it returned or set.
    pub errno: i32,
}

impl VerbsError {
    /// The error for a call that returned NULL and set `errno`.
    fn last(call: &'static str) -> Self {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .filter(|e| *e != 0)
            .unwrap_or(libc::EIO);
        VerbsError { call, errno }
    }

    /// The error for a call that returns the errno itself (`ibv_modify_qp`, `ibv_post_send`).
    fn code(call: &'static str, rc: c_int) -> Self {
        let errno = if rc < 0 { -rc } else { rc };
        VerbsError {
            call,
            errno: if errno == 0 { libc::EIO } else { errno },
        }
    }
}

/// Checks an `int` return of libibverbs: 0 is success, anything else an errno.
fn check(call: &'static str, rc: c_int) -> Result<(), VerbsError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(VerbsError::code(call, rc))
    }
}

/// `ibv_get_device_list`'s result, freed with `ibv_free_device_list`.
#[derive(Debug)]
pub struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

impl DeviceList {
    /// All RDMA devices libibverbs sees.
    pub fn get() -> Result<Self, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out pointer; the returned array is owned by us until
        // `ibv_free_device_list` (in `Drop`).
        let raw = unsafe { sys::ibv_get_device_list(&mut n) };
        let list = NonNull::new(raw).ok_or_else(|| VerbsError::last("ibv_get_device_list"))?;
        Ok(DeviceList {
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    fn device(&self, i: usize) -> Option<*mut sys::ibv_device> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `i < len`, and libibverbs returns an array of `len` valid device pointers
        // (NULL-terminated after them), alive while the list is.
        let d = unsafe { *self.list.as_ptr().add(i) };
        (!d.is_null()).then_some(d)
    }

    fn name(d: *mut sys::ibv_device) -> String {
        // SAFETY: `d` is a live device of this list; the name is a NUL-terminated string
        // inside the device struct, copied before the list can be freed.
        let name = unsafe { sys::ibv_get_device_name(d) };
        if name.is_null() {
            return String::new();
        }
        // SAFETY: non-NULL, NUL-terminated, alive while the list is.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// The kernel names of the devices (`mlx5_0`, ...), in libibverbs' order.
    pub fn names(&self) -> Vec<String> {
        (0..self.len)
            .filter_map(|i| self.device(i))
            .map(Self::name)
            .collect()
    }

    /// Opens the device named `name`.
    pub fn open(&self, name: &str) -> Result<Context, VerbsError> {
        let dev = (0..self.len)
            .filter_map(|i| self.device(i))
            .find(|&d| Self::name(d) == name)
            .ok_or(VerbsError {
                call: "ibv_get_device_list",
                errno: libc::ENODEV,
            })?;
        // SAFETY: `dev` is a live device of this list; the context it returns stays valid
        // after the list is freed (libibverbs keeps a reference), until `ibv_close_device`.
        let ctx = unsafe { sys::ibv_open_device(dev) };
        let ctx = NonNull::new(ctx).ok_or_else(|| VerbsError::last("ibv_open_device"))?;
        Ok(Context { ctx })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `ibv_get_device_list` and is freed exactly once.
        unsafe { sys::ibv_free_device_list(self.list.as_ptr()) }
    }
}

/// What the loopback needs of `ibv_query_port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// `ibv_port_state` (4 = ACTIVE).
    pub state: u32,
    /// `ibv_mtu` enum (1 = 256 ... 5 = 4096).
    pub active_mtu: u32,
    /// The port's LID (InfiniBand only).
    pub lid: u16,
    /// `IBV_LINK_LAYER_*`: 0 unspecified (InfiniBand), 1 InfiniBand, 2 Ethernet.
    pub link_layer: u8,
    /// The GID table's length.
    pub gid_tbl_len: i32,
}

/// An open device (`ibv_open_device`), closed with `ibv_close_device`.
#[derive(Debug)]
pub struct Context {
    ctx: NonNull<sys::ibv_context>,
}

impl Context {
    /// `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        // SAFETY: `ibv_port_attr` is plain data; all-zero is a valid value.
        let mut attr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; `attr` is a valid out pointer of the size rdma-sys
        // passes along (its binding of the installed verbs.h).
        let rc = unsafe { sys::___ibv_query_port(self.ctx.as_ptr(), port, &mut attr) };
        check("ibv_query_port", rc)?;
        Ok(PortAttr {
            state: attr.state,
            active_mtu: attr.active_mtu,
            lid: attr.lid,
            link_layer: attr.link_layer,
            gid_tbl_len: attr.gid_tbl_len,
        })
    }

    /// `ibv_query_gid`: the raw 16 bytes of GID `index` of `port`.
    pub fn query_gid(&self, port: u8, index: u8) -> Result<[u8; 16], VerbsError> {
        let mut gid = sys::ibv_gid { raw: [0; 16] };
        // SAFETY: the context is open; `gid` is a valid out pointer to a 16-byte union.
        let rc =
            unsafe { sys::ibv_query_gid(self.ctx.as_ptr(), port, c_int::from(index), &mut gid) };
        check("ibv_query_gid", rc)?;
        // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
        Ok(unsafe { gid.raw })
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd<'_>, VerbsError> {
        // SAFETY: the context is open; the PD is freed in `Pd::drop` before the context closes
        // (the borrow guarantees it).
        let pd = unsafe { sys::ibv_alloc_pd(self.ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| VerbsError::last("ibv_alloc_pd"))?;
        Ok(Pd {
            pd,
            _ctx: PhantomData,
        })
    }

    /// `ibv_create_cq` with `depth` entries, no channel, vector 0.
    pub fn create_cq(&self, depth: i32) -> Result<Cq<'_>, VerbsError> {
        // SAFETY: the context is open; NULL context/channel are allowed; the CQ is destroyed in
        // `Cq::drop` while the context is still open (the borrow guarantees it).
        let cq = unsafe {
            sys::ibv_create_cq(
                self.ctx.as_ptr(),
                depth,
                ptr::null_mut(),
                ptr::null_mut(),
                0,
            )
        };
        let cq = NonNull::new(cq).ok_or_else(|| VerbsError::last("ibv_create_cq"))?;
        Ok(Cq {
            cq,
            _ctx: PhantomData,
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: opened by `ibv_open_device`, closed once; every child borrowed `self` and so
        // is already gone.
        let _ = unsafe { sys::ibv_close_device(self.ctx.as_ptr()) };
    }
}

/// A protection domain, deallocated with `ibv_dealloc_pd`.
#[derive(Debug)]
pub struct Pd<'c> {
    pd: NonNull<sys::ibv_pd>,
    _ctx: PhantomData<&'c Context>,
}

impl<'c> Pd<'c> {
    /// Allocates a zeroed host buffer of `len` bytes and registers it with LOCAL_WRITE |
    /// REMOTE_WRITE (`ibv_reg_mr`). The buffer belongs to the [`Mr`] and is only touched by
    /// the HCA, never through a Rust reference, while registered.
    pub fn reg_host_buffer(&self, len: usize) -> Result<Mr<'_>, VerbsError> {
        // The HCA writes into the buffer behind Rust's back, so no Rust reference to it may
        // exist while it is registered: keep it as a raw pointer until `Mr::drop`.
        let buf: *mut [u8] = Box::into_raw(vec![0u8; len].into_boxed_slice());
        let access = (sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE)
            .0;
        // SAFETY: the PD is live; `buf` is `len` writable bytes that stay allocated until after
        // `ibv_dereg_mr` (in `Mr::drop`, or just below when registration fails).
        let mr = unsafe { sys::ibv_reg_mr(self.pd.as_ptr(), buf.cast(), len, access as c_int) };
        let Some(mr) = NonNull::new(mr) else {
            let err = VerbsError::last("ibv_reg_mr");
            // SAFETY: `buf` came from `Box::into_raw` above and was never registered.
            drop(unsafe { Box::from_raw(buf) });
            return Err(err);
        };
        Ok(Mr {
            mr,
            addr: buf.cast::<u8>() as u64,
            len,
            host: Some(buf),
            _pd: PhantomData,
        })
    }

    /// Registers GPU memory through the peer-memory client (`nvidia_peermem`): plain
    /// `ibv_reg_mr` of the device pointer, LOCAL_WRITE | REMOTE_WRITE. Without the module the
    /// kernel cannot pin the pages and the call fails (EFAULT or EINVAL).
    #[cfg(feature = "gpudirect")]
    pub fn reg_gpu_peermem<'a>(&'a self, gpu: &'a GpuBuffer) -> Result<Mr<'a>, VerbsError> {
        let access = (sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE)
            .0;
        // SAFETY: the PD is live; the pointer is `gpu.len` bytes of device memory from
        // `cuMemAlloc` that stay allocated until after `ibv_dereg_mr`: the `Mr` borrows `gpu`.
        // The CPU never dereferences it; the kernel resolves it through nvidia_peermem.
        let mr = unsafe {
            sys::ibv_reg_mr(
                self.pd.as_ptr(),
                gpu.ptr as usize as *mut std::ffi::c_void,
                gpu.len,
                access as c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| VerbsError::last("ibv_reg_mr"))?;
        Ok(Mr {
            mr,
            addr: gpu.ptr,
            len: gpu.len,
            host: None,
            _pd: PhantomData,
        })
    }

    /// Registers GPU memory through its dma-buf (`ibv_reg_dmabuf_mr`, iova = the device
    /// pointer, as perftest does), LOCAL_WRITE | REMOTE_WRITE. The buffer must have been
    /// exported ([`GpuBuffer::export_dma_buf`]); otherwise EBADF.
    #[cfg(feature = "gpudirect")]
    pub fn reg_gpu_dma_buf<'a>(&'a self, gpu: &'a GpuBuffer) -> Result<Mr<'a>, VerbsError> {
        use std::os::fd::AsRawFd;
        let Some(fd) = gpu.dma_buf.as_ref() else {
            return Err(VerbsError {
                call: "ibv_reg_dmabuf_mr",
                errno: libc::EBADF,
            });
        };
        let access = (sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE)
            .0;
        // SAFETY: the PD is live; `fd` is an open dma-buf of exactly the window (offset 0,
        // `gpu.len` bytes), which with the fd stays alive until after `ibv_dereg_mr`: the `Mr`
        // borrows `gpu`.
        let mr = unsafe {
            sys::ibv_reg_dmabuf_mr(
                self.pd.as_ptr(),
                0,
                gpu.len,
                gpu.ptr,
                fd.as_raw_fd(),
                access as c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| VerbsError::last("ibv_reg_dmabuf_mr"))?;
        // libibverbs sets `mr->addr` to the dma-buf offset, not the iova: keep the iova.
        Ok(Mr {
            mr,
            addr: gpu.ptr,
            len: gpu.len,
            host: None,
            _pd: PhantomData,
        })
    }

    /// `ibv_create_qp`: an RC QP on `cq` (send and receive) with `send_depth` send WRs.
    pub fn create_rc_qp<'a>(
        &'a self,
        cq: &'a Cq<'c>,
        send_depth: u32,
    ) -> Result<Qp<'a>, VerbsError> {
        // SAFETY: plain data; all-zero is valid (NULL pointers, no SRQ).
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq.cq.as_ptr();
        init.recv_cq = cq.cq.as_ptr();
        init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        init.cap.max_send_wr = send_depth;
        init.cap.max_recv_wr = 1;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = 0;
        // SAFETY: PD and CQ are live and outlive the QP (borrows); `init` is a valid attr.
        let qp = unsafe { sys::ibv_create_qp(self.pd.as_ptr(), &mut init) };
        let qp = NonNull::new(qp).ok_or_else(|| VerbsError::last("ibv_create_qp"))?;
        Ok(Qp {
            qp,
            _parents: PhantomData,
        })
    }
}

impl Drop for Pd<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by `ibv_alloc_pd`, freed once, after every MR and QP (borrows).
        let _ = unsafe { sys::ibv_dealloc_pd(self.pd.as_ptr()) };
    }
}

/// A registered buffer, deregistered with `ibv_dereg_mr` before the memory is released: a host
/// buffer it owns, or GPU memory it borrows ([`GpuBuffer`], feature `gpudirect`).
#[derive(Debug)]
pub struct Mr<'p> {
    mr: NonNull<sys::ibv_mr>,
    /// The address work requests use: the host buffer's, or the GPU buffer's iova.
    addr: u64,
    len: usize,
    /// The host buffer this MR owns; `None` for GPU memory (owned by the `GpuBuffer`).
    host: Option<*mut [u8]>,
    _pd: PhantomData<&'p ()>,
}

impl Mr<'_> {
    fn raw(&self) -> sys::ibv_mr {
        // SAFETY: the MR is registered; its public fields are plain data.
        unsafe { ptr::read(self.mr.as_ptr()) }
    }

    /// The buffer's address as work requests name it (the host buffer's virtual address, or
    /// the GPU buffer's device pointer used as iova).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The registered length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.len
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }
}

impl Drop for Mr<'_> {
    fn drop(&mut self) {
        // SAFETY: registered by `ibv_reg_mr` or `ibv_reg_dmabuf_mr`, deregistered once; the QPs
        // that used it are destroyed first (declared after it by the caller, and borrowing the
        // same PD).
        let _ = unsafe { sys::ibv_dereg_mr(self.mr.as_ptr()) };
        if let Some(buf) = self.host.take() {
            // SAFETY: `buf` came from `Box::into_raw` in `reg_host_buffer`; after
            // deregistration the HCA no longer touches it, and it is freed exactly once.
            drop(unsafe { Box::from_raw(buf) });
        }
    }
}

/// One work completion, copied out of `ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// `ibv_wc_status` (0 = success).
    pub status: u32,
}

/// A completion status's text (`ibv_wc_status_str`).
pub fn wc_status_str(status: u32) -> String {
    // SAFETY: returns a pointer to a static string for any value ("unknown" for bad ones).
    let s = unsafe { sys::ibv_wc_status_str(status) };
    if s.is_null() {
        return format!("status {status}");
    }
    // SAFETY: non-NULL, static, NUL-terminated.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// A completion queue, destroyed with `ibv_destroy_cq`.
#[derive(Debug)]
pub struct Cq<'c> {
    cq: NonNull<sys::ibv_cq>,
    _ctx: PhantomData<&'c Context>,
}

impl Cq<'_> {
    /// `ibv_poll_cq`: up to `out.len()` (at most 16) completions; returns how many.
    pub fn poll(&self, out: &mut [Completion]) -> Result<usize, VerbsError> {
        const MAX: usize = 16;
        // SAFETY: plain data; all-zero is valid.
        let mut wc: [sys::ibv_wc; MAX] = unsafe { std::mem::zeroed() };
        let want = out.len().min(MAX);
        // SAFETY: the CQ is live, so `cq->context` is the open context; reading its ops table
        // is how verbs.h's inline `ibv_poll_cq` dispatches.
        let has_op = unsafe { (*(*self.cq.as_ptr()).context).ops.poll_cq.is_some() };
        if !has_op {
            return Err(VerbsError {
                call: "ibv_poll_cq",
                errno: libc::ENOSYS,
            });
        }
        // SAFETY: the CQ is live; `wc` has room for `want` entries; the op exists (checked).
        let n = unsafe { sys::ibv_poll_cq(self.cq.as_ptr(), want as c_int, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::code("ibv_poll_cq", n));
        }
        let n = (n as usize).min(want);
        for (o, w) in out.iter_mut().zip(&wc[..n]) {
            *o = Completion {
                wr_id: w.wr_id,
                status: w.status,
            };
        }
        Ok(n)
    }
}

impl Drop for Cq<'_> {
    fn drop(&mut self) {
        // SAFETY: created by `ibv_create_cq`, destroyed once, after the QPs using it (borrows).
        let _ = unsafe { sys::ibv_destroy_cq(self.cq.as_ptr()) };
    }
}

/// Where the peer of an RC QP is, for the RTR transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The peer QP's number.
    pub qp_num: u32,
    /// Its LID (InfiniBand).
    pub lid: u16,
    /// `Some((gid, sgid_index))` to route with a GRH (RoCE, always; InfiniBand, never here).
    pub grh: Option<([u8; 16], u8)>,
}

/// A queue pair, destroyed with `ibv_destroy_qp`.
#[derive(Debug)]
pub struct Qp<'a> {
    qp: NonNull<sys::ibv_qp>,
    _parents: PhantomData<&'a ()>,
}

impl Qp<'_> {
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is live; `qp_num` is plain data set at creation.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: sys::ibv_qp_attr_mask,
    ) -> Result<(), VerbsError> {
        // SAFETY: the QP is live; `attr` is a valid attr for the fields named in `mask`.
        let rc = unsafe { sys::ibv_modify_qp(self.qp.as_ptr(), attr, mask.0 as c_int) };
        check("ibv_modify_qp", rc)
    }

    /// RESET → INIT with LOCAL_WRITE | REMOTE_WRITE access on `port`, P_Key index 0.
    pub fn to_init(&self, port: u8) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as m;
        // SAFETY: plain data; all-zero is valid.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = port;
        a.qp_access_flags = (sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE)
            .0;
        self.modify(
            &mut a,
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS,
        )
    }

    /// INIT → RTR towards `peer` on `port` with path MTU `mtu`, expecting the peer's first PSN
    /// `my_rq_psn` (its `sq_psn`); perftest's attributes:
    /// max_dest_rd_atomic 1, min_rnr_timer 12, SL 0, hop limit 0xFF).
    pub fn to_rtr(
        &self,
        port: u8,
        mtu: u32,
        my_rq_psn: u32,
        peer: &Peer,
    ) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as m;
        // SAFETY: plain data; all-zero is valid.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = mtu;
        a.dest_qp_num = peer.qp_num;
        a.rq_psn = my_rq_psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = peer.lid;
        a.ah_attr.sl = 0;
        a.ah_attr.src_path_bits = 0;
        a.ah_attr.port_num = port;
        if let Some((gid, index)) = peer.grh {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = sys::ibv_gid { raw: gid };
            a.ah_attr.grh.sgid_index = index;
            a.ah_attr.grh.hop_limit = 0xFF;
            a.ah_attr.grh.traffic_class = 0;
            a.ah_attr.grh.flow_label = 0;
        }
        self.modify(
            &mut a,
            m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER,
        )
    }

    /// RTR → RTS (perftest's attributes: timeout 14, retry 7, RNR retry 7, max_rd_atomic 1).
    pub fn to_rts(&self, sq_psn: u32) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as m;
        // SAFETY: plain data; all-zero is valid.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = sq_psn;
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC,
        )
    }

    /// `ibv_post_send` of one signalled RDMA WRITE of `len` bytes from `mr` at `src_offset`
    /// to `mr` at `dst_offset` (the loopback writes within its own region, through its rkey).
    pub fn post_write(
        &self,
        mr: &Mr<'_>,
        src_offset: usize,
        dst_offset: usize,
        len: u32,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        let end = |o: usize| {
            o.checked_add(len as usize)
                .is_some_and(|e| e <= mr.len_bytes())
        };
        if !end(src_offset) || !end(dst_offset) {
            return Err(VerbsError {
                call: "ibv_post_send",
                errno: libc::EINVAL,
            });
        }
        let mut sge = sys::ibv_sge {
            addr: mr.addr() + src_offset as u64,
            length: len,
            lkey: mr.lkey(),
        };
        // SAFETY: plain data (pointers NULL, unions of plain data); all-zero is valid.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.next = ptr::null_mut();
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.rdma = sys::rdma_t {
            remote_addr: mr.addr() + dst_offset as u64,
            rkey: mr.rkey(),
        };
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP is live, so `qp->context` is the open context.
        let has_op = unsafe { (*(*self.qp.as_ptr()).context).ops.post_send.is_some() };
        if !has_op {
            return Err(VerbsError {
                call: "ibv_post_send",
                errno: libc::ENOSYS,
            });
        }
        // SAFETY: the QP is live; `wr`, `sge` and `bad` outlive the call (the provider copies
        // the WR into the send queue); the SGE lies inside the registered region (checked).
        let rc = unsafe { sys::ibv_post_send(self.qp.as_ptr(), &mut wr, &mut bad) };
        check("ibv_post_send", rc)
    }
}

impl Drop for Qp<'_> {
    fn drop(&mut self) {
        // SAFETY: created by `ibv_create_qp`, destroyed once, before its CQ and PD (borrows);
        // outstanding WRs are flushed by the destroy.
        let _ = unsafe { sys::ibv_destroy_qp(self.qp.as_ptr()) };
    }
}

/// A failed CUDA driver call: which one and the `CUresult` it returned.
#[cfg(feature = "gpudirect")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{call} failed: {result}; check the NVIDIA driver (`nvidia-smi`) and the GPU index (`--verbs-gpu N` counts the GPUs CUDA_VISIBLE_DEVICES leaves visible)"
)]
pub struct CudaError {
    /// The CUDA driver function.
    pub call: &'static str,
    /// Its `CUresult` (`CUDA_ERROR_NOT_SUPPORTED`, ...).
    pub result: String,
}

#[cfg(feature = "gpudirect")]
impl CudaError {
    /// The error for a cudarc driver call.
    pub fn driver(call: &'static str, e: cudarc::driver::DriverError) -> Self {
        CudaError {
            call,
            result: format!("{:?}", e.0),
        }
    }
}

/// Device memory for the loopback: one `cuMemAlloc` allocation with a host-page-aligned window
/// of `len` bytes inside it (see [`super::gpu_window`]), and the window's dma-buf fd once
/// exported. `Drop` closes the fd, then frees the memory (`cuMemFree`), then drops its
/// reference to the CUDA context; every [`Mr`] on it borrows it and so is deregistered first.
#[cfg(feature = "gpudirect")]
#[derive(Debug)]
pub struct GpuBuffer {
    ctx: std::sync::Arc<cudarc::driver::CudaContext>,
    /// What `cuMemAlloc` returned (what `cuMemFree` takes).
    alloc: u64,
    /// The page-aligned window registered with the HCA.
    ptr: u64,
    len: usize,
    dma_buf: Option<std::os::fd::OwnedFd>,
}

#[cfg(feature = "gpudirect")]
impl GpuBuffer {
    /// Allocates device memory in `ctx` holding a host-page-aligned window of at least `len`
    /// bytes. The memory is not initialised: only the HCA touches it.
    pub fn alloc(
        ctx: std::sync::Arc<cudarc::driver::CudaContext>,
        len: usize,
    ) -> Result<Self, CudaError> {
        let page = rustix::param::page_size();
        let (alloc_len, window_len) = super::gpu_alloc_len(len, page);
        ctx.bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
        // SAFETY: `ctx` is current on this thread (bound just above). The memory is returned
        // uninitialised, which is fine: it is never read as a Rust value, only by the HCA. It
        // is freed exactly once, in `Drop`, in the same context (kept alive by the Arc).
        let alloc = unsafe { cudarc::driver::result::malloc_sync(alloc_len) }
            .map_err(|e| CudaError::driver("cuMemAlloc", e))?;
        Ok(GpuBuffer {
            ctx,
            alloc,
            ptr: super::gpu_window(alloc, page as u64),
            len: window_len,
            dma_buf: None,
        })
    }

    /// Exports the window as a dma-buf fd (`cuMemGetHandleForAddressRange`,
    /// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`), kept until `Drop`.
    pub fn export_dma_buf(&mut self) -> Result<(), CudaError> {
        use cudarc::driver::sys;
        use std::os::fd::FromRawFd;
        self.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
        let mut fd: c_int = -1;
        // SAFETY: the context is current; `[ptr, ptr + len)` lies inside the live allocation
        // and both ends are host-page aligned, as the call requires; `fd` is a valid out
        // pointer for the int the driver writes for this handle type.
        let rc = unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut c_int).cast(),
                self.ptr,
                self.len,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        };
        rc.result()
            .map_err(|e| CudaError::driver("cuMemGetHandleForAddressRange", e))?;
        if fd < 0 {
            return Err(CudaError {
                call: "cuMemGetHandleForAddressRange",
                result: format!("no fd ({fd})"),
            });
        }
        // SAFETY: the driver just opened `fd` for us; nothing else owns or closes it.
        self.dma_buf = Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
        Ok(())
    }
}

#[cfg(feature = "gpudirect")]
impl Drop for GpuBuffer {
    fn drop(&mut self) {
        // The fd first: every MR registered on it borrowed `self` and is deregistered already.
        drop(self.dma_buf.take());
        // Errors cannot be returned from `drop`; cudarc records them in the context.
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `alloc` came from `cuMemAlloc` in this context (current again just above),
        // is freed exactly once, and no MR refers to it any more (they borrowed `self`).
        let _ = unsafe { cudarc::driver::result::free_sync(self.alloc) };
    }
}
