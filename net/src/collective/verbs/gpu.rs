//! GPU memory for the verbs loopback (feature `gpudirect`): opens the GPU through cudarc, picks
//! how the HCA registers its memory and allocates it. Safe code only: the CUDA calls that are
//! `unsafe` (`cuMemAlloc`, `cuMemGetHandleForAddressRange`, `cuMemFree`) are in `ffi`.
//!
//! cudarc loads `libcuda` at run time and panics when the library or one of its symbols is
//! missing, so the presence check of the NCCL backend ([`nccl::library_present`]) comes first,
//! and a panic that still escapes (an old driver without `cuMemGetHandleForAddressRange`) is
//! caught and becomes a skip that says so.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use cudarc::driver::CudaContext;
use cudarc::driver::sys::CUdevice_attribute as Attr;

use super::{
    BUF_BYTES, CudaError, GpuRegistration, GpuRun, Memory, VerbsError, ffi, pci_address,
    registration_method,
};
use crate::collective::{CollectiveError, nccl};

/// GPU memory ready to register: the buffer (which keeps its CUDA context alive) and how.
#[derive(Debug)]
pub(super) struct GpuMemory {
    index: usize,
    registration: GpuRegistration,
    buffer: ffi::GpuBuffer,
}

impl GpuMemory {
    /// Opens GPU `run.gpu`, chooses the registration (recorded in `run` with the GPU's PCI
    /// address and name) and allocates [`BUF_BYTES`] of device memory, exported as a dma-buf
    /// when that is the method. Missing libcuda, no GPU or no GPUDirect path:
    /// [`CollectiveError::Unavailable`] (a skip); anything else is an error.
    pub(super) fn prepare(sysfs_root: &Path, run: &mut GpuRun) -> Result<Self, CollectiveError> {
        if nccl::library_present("cuda").is_none() {
            return Err(CollectiveError::Unavailable(
                "no GPU driver: libcuda.so not found; install the NVIDIA driver to test GPU memory"
                    .into(),
            ));
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| open(sysfs_root, run))) {
            Ok(r) => r,
            Err(p) => {
                let why = nccl::cudarc_panic_reason(p.as_ref());
                Err(CollectiveError::Unavailable(format!(
                    "libcuda could not be used ({why}); install an NVIDIA driver with CUDA 11.7 or newer"
                )))
            }
        }
    }

    /// This memory as a result names it.
    pub(super) fn memory(&self) -> Memory {
        Memory::Gpu {
            gpu: self.index,
            registration: self.registration,
        }
    }

    /// Registers the buffer in `pd` the chosen way.
    pub(super) fn register<'a>(&'a self, pd: &'a ffi::Pd<'_>) -> Result<ffi::Mr<'a>, VerbsError> {
        match self.registration {
            GpuRegistration::DmaBuf => pd.reg_gpu_dma_buf(&self.buffer),
            GpuRegistration::Peermem => pd.reg_gpu_peermem(&self.buffer),
        }
    }
}

fn open(sysfs_root: &Path, run: &mut GpuRun) -> Result<GpuMemory, CollectiveError> {
    let count = CudaContext::device_count().map_err(|e| {
        CollectiveError::Unavailable(format!(
            "no usable GPU: cuInit or cuDeviceGetCount failed ({:?}); check `nvidia-smi`",
            e.0
        ))
    })?;
    let count = usize::try_from(count).unwrap_or(0);
    if count == 0 {
        return Err(CollectiveError::Unavailable(
            "no CUDA device visible; check `nvidia-smi` and CUDA_VISIBLE_DEVICES".into(),
        ));
    }
    if run.gpu >= count {
        return Err(CollectiveError::Config(format!(
            "GPU {} does not exist: {count} visible; pass --verbs-gpu with an index below {count}",
            run.gpu
        )));
    }
    let ctx =
        CudaContext::new(run.gpu).map_err(|e| CudaError::driver("cuDevicePrimaryCtxRetain", e))?;
    let attr = |a: Attr| {
        ctx.attribute(a)
            .map_err(|e| CudaError::driver("cuDeviceGetAttribute", e))
    };
    run.pci = Some(pci_address(
        attr(Attr::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        attr(Attr::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        attr(Attr::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
    ));
    run.name = ctx.name().ok();
    let dma_buf = attr(Attr::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)? != 0;
    let registration =
        registration_method(sysfs_root, dma_buf).map_err(CollectiveError::Unavailable)?;
    run.registration = Some(registration);
    let mut buffer = ffi::GpuBuffer::alloc(ctx, BUF_BYTES)?;
    if registration == GpuRegistration::DmaBuf {
        buffer.export_dma_buf()?;
    }
    Ok(GpuMemory {
        index: run.gpu,
        registration,
        buffer,
    })
}
