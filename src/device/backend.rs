//! The seam between device operations and the machine that runs their kernels.
//!
//! A [`Backend`] owns memory, launches the kernels of [`super::kernels`] and runs real FFTs. The
//! device operations (`super::ops`) are written once against it: `cuda::Gpu` runs them on an NVIDIA
//! GPU (cudarc, NVRTC, cuFFT), and the unit tests run the very same host code on the CPU through
//! `super::emulator` (the kernels compiled by g++, FFTs by the CPU engine), so launch geometry,
//! argument order and buffer sizes are tested on machines without a GPU.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

    /// The device's name and label, for `metrics.json`: (`NVIDIA H100 80GB HBM3`, `cuda:0`).
    fn identity(&self) -> (String, String);

    /// The device's free and total memory now, bytes (a GPU's `cuMemGetInfo`: what every process
    /// on it leaves free).
    fn memory_info(&self) -> Result<(u64, u64)>;

    /// The bytes this backend's buffers hold, counted where they are allocated and freed.
    fn meter(&self) -> &Arc<MemoryMeter>;

    /// Devices of this kind on the machine (ranks share them round robin: `Device::ordinal`).
    fn device_count(&self) -> usize {
        1
    }

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

/// The device memory one backend's buffers hold: the bytes in use and their peak since the last
/// [`MemoryMeter::reset_peak`]. Every device buffer is a [`DeviceVec`] (or a GPU's FFT work area),
/// which charges the meter when it is allocated and releases it when it is dropped, on the GPU and
/// on the emulator alike; a rank has one backend, so this is the rank's device memory.
#[derive(Debug, Default)]
pub struct MemoryMeter {
    in_use: AtomicU64,
    peak: AtomicU64,
}

impl MemoryMeter {
    pub fn new() -> Arc<MemoryMeter> {
        Arc::new(MemoryMeter::default())
    }

    /// Counts `bytes` as allocated until the returned charge is dropped.
    pub fn charge(self: &Arc<Self>, bytes: u64) -> Charge {
        let now = self.in_use.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
        Charge {
            meter: self.clone(),
            bytes,
        }
    }

    pub fn in_use_bytes(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// The most bytes in use at once since the last reset.
    pub fn peak_bytes(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Starts a new peak from what is in use now (a job's peak starts with the job).
    pub fn reset_peak(&self) {
        self.peak.store(self.in_use_bytes(), Ordering::Relaxed);
    }
}

/// Bytes counted by a [`MemoryMeter`] while this lives.
#[derive(Debug)]
pub struct Charge {
    meter: Arc<MemoryMeter>,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.meter.in_use.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A typed array in a backend's memory.
pub struct DeviceVec<B: Backend, T: Pod> {
    // Declared before the charge: the memory is freed, then uncounted.
    buf: B::Buffer,
    len: usize,
    _charge: Charge,
    _element: PhantomData<T>,
}

impl<B: Backend, T: Pod> DeviceVec<B, T> {
    /// `len` zeros.
    pub fn zeros(backend: &B, len: usize) -> Result<Self> {
        let bytes = len * size_of::<T>();
        Ok(DeviceVec {
            buf: backend.alloc_zeroed(bytes)?,
            len,
            _charge: backend.meter().charge(bytes as u64),
            _element: PhantomData,
        })
    }

    /// A copy of `host` on the device.
    pub fn from_host(backend: &B, host: &[T]) -> Result<Self> {
        let bytes = std::mem::size_of_val(host);
        Ok(DeviceVec {
            buf: backend.upload(bytemuck::cast_slice(host))?,
            len: host.len(),
            _charge: backend.meter().charge(bytes as u64),
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
