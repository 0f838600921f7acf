//! The seam between device operations and the machine that runs their kernels.
//!
//! A [`Backend`] owns memory, launches the kernels of [`super::kernels`] and runs real FFTs. The
//! device operations (`super::ops`) are written once against it: `cuda::Gpu` runs them on an NVIDIA
//! GPU (cudarc, NVRTC, cuFFT), and the unit tests run the very same host code on the CPU through
//! `super::emulator` (the kernels compiled by g++, FFTs by the CPU engine), so launch geometry,
//! argument order and buffer sizes are tested on machines without a GPU.

use std::marker::PhantomData;

use bytemuck::Pod;

use super::kernels::Kernel;
use crate::error::Result;

/// Grid and block dimensions of a launch (CUDA's `gridDim`/`blockDim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

/// Threads per block of the element-wise kernels.
pub const BLOCK_THREADS: u32 = 256;

/// The most blocks an element-wise (grid-stride) launch uses: enough to fill any current GPU.
const MAX_GRID_BLOCKS: usize = 65_535;

impl LaunchConfig {
    /// A 1-D grid-stride launch over `n` elements.
    pub fn elementwise(n: usize) -> LaunchConfig {
        let blocks = n.div_ceil(BLOCK_THREADS as usize).clamp(1, MAX_GRID_BLOCKS);
        LaunchConfig {
            grid: [blocks as u32, 1, 1],
            block: [BLOCK_THREADS, 1, 1],
        }
    }
}

/// One kernel argument, in the order of the kernel's parameters.
pub enum Arg<'a, Buffer> {
    /// A device pointer.
    Buf(&'a Buffer),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
}

/// Memory, kernel launches and FFTs on one device. Operations are queued in order (one stream);
/// `download` waits for what was queued before it.
pub trait Backend: Send + Sync + 'static {
    /// Device memory: bytes, freed on drop.
    type Buffer: Send + Sync;
    /// A batched real-FFT plan for one grid and batch size.
    type Fft: Send + Sync;

    /// What this device is, for reports: `NVIDIA H100 80GB HBM3 (cuda:0)`.
    fn describe(&self) -> String;

    /// `bytes` zeroed bytes.
    fn alloc_zeroed(&self, bytes: usize) -> Result<Self::Buffer>;

    /// A copy of `bytes` on the device.
    fn upload(&self, bytes: &[u8]) -> Result<Self::Buffer>;

    /// Copies the first `out.len()` bytes of `buf` to the host.
    fn download(&self, buf: &Self::Buffer, out: &mut [u8]) -> Result<()>;

    /// Copies the first `bytes` bytes of `src` into `dst` on the device.
    fn copy(&self, src: &Self::Buffer, dst: &Self::Buffer, bytes: usize) -> Result<()>;

    /// Queues `kernel` over `config` with `args`.
    fn launch(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        args: &[Arg<'_, Self::Buffer>],
    ) -> Result<()>;

    /// A plan for `batch` real FFTs of `grid` (C order, every entry ≥ 1): spectra of
    /// `grid[0]·grid[1]·(grid[2]/2+1)` complex values as (re, im) f32 pairs, unnormalised, in a
    /// layout of the backend's choosing (the device code multiplies spectra pointwise only, so
    /// spectra of one plan always agree with each other).
    fn fft_plan(&self, grid: [usize; 3], batch: usize) -> Result<Self::Fft>;

    /// `spectrum ← FFT(real)` for the plan's batch; `real` is left unchanged.
    fn fft_forward(
        &self,
        plan: &Self::Fft,
        real: &Self::Buffer,
        spectrum: &Self::Buffer,
    ) -> Result<()>;

    /// `real ← IFFT(spectrum)` (unnormalised) for the plan's batch; `spectrum` may be overwritten.
    fn fft_inverse(
        &self,
        plan: &Self::Fft,
        spectrum: &Self::Buffer,
        real: &Self::Buffer,
    ) -> Result<()>;

    /// Waits until everything queued has finished, reporting the first failure.
    fn synchronize(&self) -> Result<()>;
}

/// A typed array in a backend's memory.
pub struct DeviceVec<B: Backend, T: Pod> {
    buf: B::Buffer,
    len: usize,
    _element: PhantomData<T>,
}

impl<B: Backend, T: Pod> DeviceVec<B, T> {
    /// `len` zeros.
    pub fn zeros(backend: &B, len: usize) -> Result<Self> {
        Ok(DeviceVec {
            buf: backend.alloc_zeroed(len * size_of::<T>())?,
            len,
            _element: PhantomData,
        })
    }

    /// A copy of `host` on the device.
    pub fn from_host(backend: &B, host: &[T]) -> Result<Self> {
        Ok(DeviceVec {
            buf: backend.upload(bytemuck::cast_slice(host))?,
            len: host.len(),
            _element: PhantomData,
        })
    }

    /// A copy on the host (waits for the queued work).
    pub fn to_host(&self, backend: &B) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.len];
        backend.download(&self.buf, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// A copy on the device.
    pub fn duplicate(&self, backend: &B) -> Result<Self> {
        let copy = Self::zeros(backend, self.len)?;
        backend.copy(&self.buf, &copy.buf, self.len * size_of::<T>())?;
        Ok(copy)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The array as a kernel argument (a device pointer).
    pub fn arg(&self) -> Arg<'_, B::Buffer> {
        Arg::Buf(&self.buf)
    }

    pub fn buffer(&self) -> &B::Buffer {
        &self.buf
    }
}
