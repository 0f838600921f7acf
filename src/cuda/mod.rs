//! NVIDIA GPUs through cudarc (cargo feature `cuda`): [`Gpu`] is the [`Backend`] that runs the
//! device operations (`crate::device::ops`) on one GPU — memory, kernels compiled by NVRTC and
//! cached per device ([`nvrtc`]), cuFFT plans ([`fft`]). Every library is loaded at run time; what
//! is missing is one clear [`Error::Device`] ([`libs`]).

pub mod fft;
pub mod libs;
pub mod nvrtc;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DriverError,
    LaunchConfig as CudaLaunch, PushKernelArg,
};

use crate::device::Device;
use crate::device::backend::{Arg, Backend, LaunchConfig, MemoryMeter};
use crate::device::kernels::Kernel;
use crate::device::selftest::{self, Level, Report};
use crate::error::{Error, Result};

/// One GPU with its context, its stream and its compiled kernels.
pub struct Gpu {
    label: String,
    name: String,
    arch: (i32, i32),
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
    /// The bytes this rank's buffers and FFT work areas hold on the GPU.
    meter: Arc<MemoryMeter>,
    /// GPUs on this machine.
    count: usize,
}

impl Gpu {
    /// Opens the GPU that `device` names for local rank `local_rank`, after checking the libraries
    /// the device operations need (driver, NVRTC, cuFFT).
    pub fn open(device: Device, local_rank: usize) -> Result<Gpu> {
        let what = device.to_string();
        if !device.is_cuda() {
            return Err(Error::Internal(format!("Gpu::open({what})")));
        }
        libs::DRIVER.require(&what)?;
        let count = CudaContext::device_count().map_err(|e| Error::Device {
            device: what.clone(),
            reason: format!("the CUDA driver cannot list GPUs: {e}"),
        })?;
        let ordinal = device
            .ordinal(local_rank, count.max(0) as usize)?
            .ok_or_else(|| Error::Internal("a CUDA device without an ordinal".into()))?;
        let label = format!("cuda:{ordinal}");
        libs::NVRTC.require(&label)?;
        libs::CUFFT.require(&label)?;
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::Device {
            device: label.clone(),
            reason: format!("opening the GPU: {e}"),
        })?;
        // One stream per GPU: cudarc's per-buffer events only matter across streams.
        // SAFETY: called before any buffer exists.
        unsafe { ctx.disable_event_tracking() };
        let driver = |what: &str| {
            let label = label.clone();
            let what = what.to_string();
            move |e: DriverError| Error::Device {
                device: label,
                reason: format!("{what}: {e}"),
            }
        };
        let name = ctx.name().map_err(driver("reading the GPU's name"))?;
        let arch = ctx
            .compute_capability()
            .map_err(driver("reading the GPU's compute capability"))?;
        let stream = ctx.default_stream();
        Ok(Gpu {
            label,
            name,
            arch,
            ctx,
            stream,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            meter: MemoryMeter::new(),
            count: count.max(1) as usize,
        })
    }

    /// `cuda:N`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The GPU's name (`NVIDIA H100 80GB HBM3`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Free and total device memory, bytes.
    pub fn memory(&self) -> Result<(usize, usize)> {
        self.ctx
            .mem_get_info()
            .map_err(|e| self.error("reading free memory", e))
    }

    fn error(&self, what: &str, e: DriverError) -> Error {
        Error::Device {
            device: self.label.clone(),
            reason: format!("{what}: {e}"),
        }
    }

    /// Makes this GPU's context current on the calling thread, for the calls that do not go
    /// through cudarc's safe API (which does it itself).
    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.error("making the GPU's context current", e))
    }

    /// The kernel's function, compiling and loading its module on first use.
    fn function(&self, kernel: &Kernel) -> Result<CudaFunction> {
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(kernel.name)
        {
            return Ok(f.clone());
        }
        let module = {
            let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
            match modules.get(kernel.source.file) {
                Some(m) => m.clone(),
                None => {
                    let ptx = nvrtc::compile(kernel.source, self.arch)?;
                    let m = self.ctx.load_module(ptx).map_err(|e| {
                        self.error(
                            &format!(
                                "loading {} (PTX from NVRTC; a driver older than NVRTC refuses it)",
                                kernel.source.file
                            ),
                            e,
                        )
                    })?;
                    tracing::debug!(module = kernel.source.file, gpu = %self.label, "kernels compiled");
                    modules.insert(kernel.source.file, m.clone());
                    m
                }
            }
        };
        let f = module
            .load_function(kernel.name)
            .map_err(|e| self.error(&format!("finding kernel {}", kernel.name), e))?;
        self.functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(kernel.name, f.clone());
        Ok(f)
    }
}

/// The device self-test (`device::selftest`) on the GPU that `device` names, as local rank 0
/// would choose it.
pub fn selftest(device: Device, level: Level) -> Result<Report> {
    selftest::requires_gpu(device)?;
    let gpu = std::sync::Arc::new(Gpu::open(device, 0)?);
    selftest::run(&gpu, level)
}

/// Device allocations are never empty (a zero-byte `cuMemAlloc` fails).
fn alloc_len(bytes: usize) -> usize {
    bytes.max(4)
}

impl Backend for Gpu {
    type Buffer = CudaSlice<u8>;
    type Fft = fft::FftPlans;

    fn describe(&self) -> String {
        let memory = match self.memory() {
            Ok((free, total)) => format!(
                ", {} free of {}",
                crate::error::human_bytes(free as u64),
                crate::error::human_bytes(total as u64)
            ),
            Err(_) => String::new(),
        };
        format!(
            "{} ({}, sm_{}{}{memory})",
            self.name, self.label, self.arch.0, self.arch.1
        )
    }

    fn identity(&self) -> (String, String) {
        (self.name.clone(), self.label.clone())
    }

    fn memory_info(&self) -> Result<(u64, u64)> {
        let (free, total) = self.memory()?;
        Ok((free as u64, total as u64))
    }

    fn meter(&self) -> &Arc<MemoryMeter> {
        &self.meter
    }

    fn device_count(&self) -> usize {
        self.count
    }

    fn alloc_zeroed(&self, bytes: usize) -> Result<CudaSlice<u8>> {
        self.stream
            .alloc_zeros::<u8>(alloc_len(bytes))
            .map_err(|e| self.error(&format!("allocating {bytes} bytes"), e))
    }

    fn upload(&self, bytes: &[u8]) -> Result<CudaSlice<u8>> {
        let mut buf = self.alloc_zeroed(bytes.len())?;
        if !bytes.is_empty() {
            self.stream
                .memcpy_htod(bytes, &mut buf.slice_mut(..bytes.len()))
                .map_err(|e| self.error("copying to the GPU", e))?;
        }
        Ok(buf)
    }

    fn download(&self, buf: &CudaSlice<u8>, out: &mut [u8]) -> Result<()> {
        if out.len() > buf.len() {
            return Err(Error::Internal("download past the end of a buffer".into()));
        }
        if !out.is_empty() {
            self.stream
                .memcpy_dtoh(&buf.slice(..out.len()), out)
                .map_err(|e| self.error("copying from the GPU", e))?;
        }
        self.synchronize()
    }

    fn copy(&self, src: &CudaSlice<u8>, dst: &CudaSlice<u8>, bytes: usize) -> Result<()> {
        if bytes > src.len() || bytes > dst.len() {
            return Err(Error::Internal("copy past the end of a buffer".into()));
        }
        self.bind()?;
        let (s, _s) = src.device_ptr(&self.stream);
        let (d, _d) = dst.device_ptr(&self.stream);
        // SAFETY: both ranges are in bounds (checked) on this context; the stream orders the copy
        // after every queued write and before every later read.
        unsafe { cudarc::driver::result::memcpy_dtod_async(d, s, bytes, self.stream.cu_stream()) }
            .map_err(|e| self.error("copying on the GPU", e))
    }

    fn launch(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        args: &[Arg<'_, CudaSlice<u8>>],
    ) -> Result<()> {
        let f = self.function(kernel)?;
        let mut launch = self.stream.launch_builder(&f);
        for arg in args {
            match arg {
                Arg::Buf(b) => launch.arg(*b),
                Arg::I32(v) => launch.arg(v),
                Arg::U32(v) => launch.arg(v),
                Arg::I64(v) => launch.arg(v),
                Arg::F32(v) => launch.arg(v),
            };
        }
        let cfg = CudaLaunch {
            grid_dim: config.grid.into(),
            block_dim: config.block.into(),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments follow the kernel's parameter list (device::ops passes them in
        // order, checked on the CPU by the emulator tests), and every buffer outlives the launch
        // on this stream (buffers are freed through the same stream).
        unsafe { launch.launch(cfg) }
            .map(drop)
            .map_err(|e| self.error(&format!("launching {}", kernel.name), e))
    }

    fn fft_plan(&self, grid: [usize; 3], batch: usize) -> Result<fft::FftPlans> {
        self.bind()?;
        fft::FftPlans::new(&self.label, &self.stream, &self.meter, grid, batch)
    }

    fn fft_forward(
        &self,
        plan: &fft::FftPlans,
        real: &CudaSlice<u8>,
        spectrum: &CudaSlice<u8>,
    ) -> Result<()> {
        self.bind()?;
        let (r, _r) = real.device_ptr(&self.stream);
        let (s, _s) = spectrum.device_ptr(&self.stream);
        // SAFETY: the plan's sizes match the buffers (device::ops::blur_engine allocates them from the
        // same grid and batch); cuFFT runs on this stream.
        unsafe { cudarc::cufft::result::exec_r2c(plan.forward, r as *mut f32, s as *mut _) }
            .map_err(|e| fft::error(&self.label, "forward transform", e))
    }

    fn fft_inverse(
        &self,
        plan: &fft::FftPlans,
        spectrum: &CudaSlice<u8>,
        real: &CudaSlice<u8>,
    ) -> Result<()> {
        self.bind()?;
        let (s, _s) = spectrum.device_ptr(&self.stream);
        let (r, _r) = real.device_ptr(&self.stream);
        // SAFETY: as in `fft_forward`.
        unsafe { cudarc::cufft::result::exec_c2r(plan.inverse, s as *mut _, r as *mut f32) }
            .map_err(|e| fft::error(&self.label, "inverse transform", e))
    }

    fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| self.error("waiting for the GPU", e))
    }
}
