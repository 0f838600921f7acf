//! A [`Backend`] on the CPU for tests: the CUDA C kernels compiled by g++ through `emulator.h`
//! (a loop over the grid; one OS thread per CUDA thread for kernels that synchronise), memory on
//! the host heap, FFTs by the CPU engine (`physics::fft`). The device operations run their real
//! host code against it, so a test here exercises launch geometry, argument order, buffer sizes
//! and the kernels' arithmetic. It proves nothing about the GPU's memory model, cuFFT or NVRTC
//! (docs/GPU.md says what only a GPU run proves).

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use rustfft::num_complex::Complex32;

use super::backend::{Arg, Backend, LaunchConfig, MemoryMeter};
use super::kernels::{KERNELS, Kernel, KernelSource};
use crate::error::{Error, Result};
use crate::physics::fft::RealFft3;

/// A shared library of compiled kernels (a `dlopen` handle, never closed).
struct Library(usize);

/// Host memory standing in for device memory (16-byte aligned, zeroed).
pub(crate) struct EmulatedBuffer {
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the buffer is plain memory owned by this value; kernels write it only inside `launch`,
// which runs on the caller's thread and returns when they are done.
unsafe impl Send for EmulatedBuffer {}
unsafe impl Sync for EmulatedBuffer {}

const ALIGN: usize = 16;

impl EmulatedBuffer {
    fn new(bytes: usize) -> EmulatedBuffer {
        let layout =
            std::alloc::Layout::from_size_align(bytes.max(ALIGN), ALIGN).expect("a buffer layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for an emulated buffer");
        EmulatedBuffer { ptr, bytes }
    }

    fn floats(&self) -> &[f32] {
        // SAFETY: the allocation holds `bytes` bytes, 16-byte aligned and initialised (zeroed at
        // allocation); nothing writes it while this view lives (one FFT call on one thread).
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<f32>(), self.bytes / 4) }
    }

    /// Writes `values` from float `offset` on.
    fn write(&self, offset: usize, values: &[f32]) {
        assert!(
            (offset + values.len()) * 4 <= self.bytes,
            "write past the end of a buffer"
        );
        // SAFETY: in bounds (asserted); `values` is host memory of another allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                values.as_ptr(),
                self.ptr.cast::<f32>().add(offset),
                values.len(),
            )
        }
    }
}

impl Drop for EmulatedBuffer {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.bytes.max(ALIGN), ALIGN)
            .expect("a buffer layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) }
    }
}

/// The kernels on the CPU; see the module docs. Its memory is the host's, counted as a GPU's
/// would be, against a total that stands for the GPU's ([`Emulator::new`]).
pub(crate) struct Emulator {
    meter: Arc<MemoryMeter>,
    total_bytes: u64,
}

/// The emulated GPU's memory when `TESSERA_EMULATOR_MEMORY` does not say: an H100's 80 GiB.
pub(crate) const DEFAULT_MEMORY_BYTES: u64 = 80 << 30;

impl Emulator {
    /// An emulated GPU with `TESSERA_EMULATOR_MEMORY` bytes (a number of bytes, or with a binary
    /// suffix: `512MiB`, `2GiB`), else [`DEFAULT_MEMORY_BYTES`]; a value that does not parse is an
    /// error naming it.
    pub(crate) fn new() -> Result<Emulator> {
        let total_bytes = match std::env::var("TESSERA_EMULATOR_MEMORY") {
            Ok(text) => parse_bytes(&text).ok_or_else(|| {
                Error::config(
                    "TESSERA_EMULATOR_MEMORY",
                    format!("expected bytes such as 2147483648 or 2GiB, got `{text}`"),
                )
            })?,
            Err(_) => DEFAULT_MEMORY_BYTES,
        };
        Ok(Emulator::with_memory(total_bytes))
    }

    /// An emulated GPU with `total_bytes` of memory.
    pub(crate) fn with_memory(total_bytes: u64) -> Emulator {
        Emulator {
            meter: MemoryMeter::new(),
            total_bytes,
        }
    }
}

/// `123`, `64KiB`, `512MiB`, `2GiB` as bytes.
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = [("KiB", 10), ("MiB", 20), ("GiB", 30), ("TiB", 40)]
        .iter()
        .find_map(|(suffix, shift)| text.strip_suffix(suffix).map(|d| (d.trim(), *shift)))
        .unwrap_or((text, 0));
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

thread_local! {
    /// The size in bytes of every download this thread made (tests count the iterate's copies to
    /// the host; each test runs on its own thread).
    static DOWNLOADS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The sizes in bytes of the downloads this thread made since the last call, which forgets them.
pub(crate) fn take_downloads() -> Vec<usize> {
    DOWNLOADS.with_borrow_mut(std::mem::take)
}

/// Builds (once per process) and loads the library of one kernel source.
fn library(source: &'static KernelSource) -> Result<usize> {
    static LIBS: OnceLock<Mutex<HashMap<&'static str, Library>>> = OnceLock::new();
    let mut libs = LIBS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(lib) = libs.get(source.file) {
        return Ok(lib.0);
    }
    let dir = std::env::temp_dir().join(format!(
        "tessera-emulator-{}-{}",
        std::process::id(),
        source.file
    ));
    let built = build(source, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let handle = built?;
    libs.insert(source.file, Library(handle));
    Ok(handle)
}

fn build(source: &'static KernelSource, dir: &Path) -> Result<usize> {
    let io = |action, path: &Path, e| Error::io(action, path, e);
    std::fs::create_dir_all(dir).map_err(|e| io("creating the emulator's folder", dir, e))?;
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| io("writing an emulator source", &path, e))
    };
    write("emulator.h", include_str!("emulator.h"))?;
    // TESSERA_EMULATOR_KERNELS=DIR reads the sources from DIR instead of the embedded copies: a
    // kernel can be changed (or broken on purpose, to see a test fail) without rebuilding.
    let text = match std::env::var_os("TESSERA_EMULATOR_KERNELS") {
        Some(dir) => {
            let path = Path::new(&dir).join(source.file);
            std::fs::read_to_string(&path).map_err(|e| io("reading a kernel source", &path, e))?
        }
        None => source.source.to_string(),
    };
    write(source.file, &text)?;
    let mut wrapper = format!("#include \"emulator.h\"\n#include \"{}\"\n", source.file);
    for k in KERNELS.iter().filter(|k| k.source.file == source.file) {
        wrapper.push_str(&format!("EMU_EXPORT({})\n", k.name));
    }
    write("wrapper.cpp", &wrapper)?;
    let lib = dir.join("kernels.so");
    let output = Command::new("g++")
        .args([
            "-std=c++17",
            "-O2",
            "-ffp-contract=off",
            "-fPIC",
            "-shared",
            "-pthread",
        ])
        .arg("-o")
        .arg(&lib)
        .arg(dir.join("wrapper.cpp"))
        .output()
        .map_err(|e| io("running g++ (the kernel emulator needs it)", dir, e))?;
    if !output.status.success() {
        return Err(Error::Device {
            device: "emulator".into(),
            reason: format!(
                "g++ could not compile {}:\n{}",
                source.file,
                String::from_utf8_lossy(&output.stderr)
            ),
        });
    }
    let path = CString::new(lib.to_string_lossy().as_bytes())
        .map_err(|_| Error::Internal("a temporary path with a NUL byte".into()))?;
    // SAFETY: dlopen of a library we just built; RTLD_NOW resolves everything here.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(Error::Device {
            device: "emulator".into(),
            reason: format!("could not load the kernels of {}", source.file),
        });
    }
    Ok(handle as usize)
}

type EmulatedKernel = unsafe extern "C" fn(
    grid: *const u32,
    block: *const u32,
    threaded: i32,
    args: *mut *mut c_void,
);

impl Backend for Emulator {
    type Buffer = EmulatedBuffer;
    type Fft = ([usize; 3], usize);

    fn describe(&self) -> String {
        "CPU emulator (g++)".into()
    }

    fn identity(&self) -> (String, String) {
        ("CPU emulator (g++)".into(), "emulator".into())
    }

    fn memory_info(&self) -> Result<(u64, u64)> {
        let used = self.meter.in_use_bytes();
        Ok((self.total_bytes.saturating_sub(used), self.total_bytes))
    }

    fn meter(&self) -> &Arc<MemoryMeter> {
        &self.meter
    }

    fn alloc_zeroed(&self, bytes: usize) -> Result<EmulatedBuffer> {
        Ok(EmulatedBuffer::new(bytes))
    }

    fn upload(&self, bytes: &[u8]) -> Result<EmulatedBuffer> {
        let buf = EmulatedBuffer::new(bytes.len());
        // SAFETY: the buffer holds at least `bytes.len()` bytes and does not overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.ptr, bytes.len()) };
        Ok(buf)
    }

    fn download(&self, buf: &EmulatedBuffer, out: &mut [u8]) -> Result<()> {
        if out.len() > buf.bytes {
            return Err(Error::Internal("download past the end of a buffer".into()));
        }
        // SAFETY: in bounds (checked), distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping(buf.ptr, out.as_mut_ptr(), out.len()) };
        DOWNLOADS.with_borrow_mut(|d| d.push(out.len()));
        Ok(())
    }

    fn copy(&self, src: &EmulatedBuffer, dst: &EmulatedBuffer, bytes: usize) -> Result<()> {
        if bytes > src.bytes || bytes > dst.bytes {
            return Err(Error::Internal("copy past the end of a buffer".into()));
        }
        // SAFETY: in bounds (checked); `copy` allows overlap.
        unsafe { std::ptr::copy(src.ptr, dst.ptr, bytes) };
        Ok(())
    }

    fn launch(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        args: &[Arg<'_, EmulatedBuffer>],
    ) -> Result<()> {
        let lib = library(kernel.source)?;
        let symbol = CString::new(format!("emu_{}", kernel.name))
            .map_err(|_| Error::Internal("a kernel name with a NUL byte".into()))?;
        // SAFETY: a symbol lookup in a library we built.
        let f = unsafe { libc::dlsym(lib as *mut c_void, symbol.as_ptr()) };
        if f.is_null() {
            return Err(Error::Internal(format!(
                "no emulated kernel {}",
                kernel.name
            )));
        }
        // SAFETY: EMU_EXPORT defines every `emu_` symbol with this signature.
        let f: EmulatedKernel = unsafe { std::mem::transmute(f) };
        // Each argument's value in an 8-byte slot; on a little-endian machine a pointer to the slot
        // is a pointer to the value for every argument type.
        let mut slots: Vec<u64> = args
            .iter()
            .map(|a| match a {
                Arg::Buf(b) => b.ptr as usize as u64,
                Arg::I32(v) => *v as u32 as u64,
                Arg::U32(v) => *v as u64,
                Arg::I64(v) => *v as u64,
                Arg::F32(v) => v.to_bits() as u64,
            })
            .collect();
        let mut pointers: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast::<c_void>())
            .collect();
        // SAFETY: the kernel reads its parameters through `pointers` (one per parameter, in order,
        // as the device code passes them) and the buffers they point to, all alive until it returns.
        unsafe {
            f(
                config.grid.as_ptr(),
                config.block.as_ptr(),
                kernel.barriers.into(),
                pointers.as_mut_ptr(),
            )
        };
        Ok(())
    }

    fn fft_plan(&self, grid: [usize; 3], batch: usize) -> Result<([usize; 3], usize)> {
        Ok((grid, batch))
    }

    fn fft_forward(
        &self,
        plan: &([usize; 3], usize),
        real: &EmulatedBuffer,
        spectrum: &EmulatedBuffer,
    ) -> Result<()> {
        let (grid, batch) = *plan;
        let fft = RealFft3::get(grid);
        let (n, m) = (fft.real_len(), fft.spectrum_len());
        let input = real.floats();
        for b in 0..batch {
            let spec = fft.forward(&mut input[b * n..(b + 1) * n].to_vec());
            let pairs: Vec<f32> = spec.iter().flat_map(|c| [c.re, c.im]).collect();
            spectrum.write(2 * b * m, &pairs);
        }
        Ok(())
    }

    fn fft_inverse(
        &self,
        plan: &([usize; 3], usize),
        spectrum: &EmulatedBuffer,
        real: &EmulatedBuffer,
    ) -> Result<()> {
        let (grid, batch) = *plan;
        let fft = RealFft3::get(grid);
        let (n, m) = (fft.real_len(), fft.spectrum_len());
        let input = spectrum.floats();
        for b in 0..batch {
            let spec = input[2 * b * m..2 * (b + 1) * m]
                .chunks_exact(2)
                .map(|c| Complex32::new(c[0], c[1]))
                .collect();
            real.write(b * n, &fft.inverse(spec));
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_memory_sizes_parse() {
        assert_eq!(parse_bytes("123"), Some(123));
        assert_eq!(parse_bytes(" 2GiB "), Some(2 << 30));
        assert_eq!(parse_bytes("512 MiB"), Some(512 << 20));
        for bad in ["", "2GB", "-1", "x", "99999999999TiB"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }
}
