//! Tessera's kernels compiled by NVRTC: CUDA C source → PTX for one GPU architecture. The driver
//! turns the PTX into machine code when a module is loaded (`super::Gpu` does that once per module
//! and device).

use std::panic::{AssertUnwindSafe, catch_unwind};

use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use super::libs;
use crate::device::kernels::KernelSource;
use crate::error::{Error, Result};

/// Compiles `source` for `compute_<major><minor>`.
pub fn compile(source: &KernelSource, arch: (i32, i32)) -> Result<Ptx> {
    let device = format!("NVRTC (compute_{}{})", arch.0, arch.1);
    libs::NVRTC.require(&device)?;
    let options = CompileOptions {
        options: vec![format!("--gpu-architecture=compute_{}{}", arch.0, arch.1)],
        name: Some(source.file.to_string()),
        ..Default::default()
    };
    // cudarc panics where NVRTC returns something it does not expect (an older library without a
    // function it calls, say): that is one more way of NVRTC not working, not a tessera bug.
    let compiled = catch_unwind(AssertUnwindSafe(|| {
        cudarc::nvrtc::compile_ptx_with_opts(source.source, options)
    }))
    .map_err(|panic| Error::Device {
        device: device.clone(),
        reason: format!(
            "NVRTC failed on {}: {}",
            source.file,
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)")
        ),
    })?;
    compiled.map_err(|e| Error::Device {
        device,
        reason: match e {
            CompileError::CompileError { log, .. } => format!(
                "{} does not compile:\n{}",
                source.file,
                log.to_string_lossy()
            ),
            other => format!("NVRTC could not compile {}: {other:?}", source.file),
        },
    })
}
