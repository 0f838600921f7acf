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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::kernels::{KERNELS, SOURCES};

    /// Every kernel source compiles for Hopper (sm_90) and defines every registered kernel. CI
    /// installs NVRTC from PyPI (`.ci/run`); where it is truly absent the test says so and passes,
    /// unless `TESSERA_REQUIRE_NVRTC` is set (CI sets it, so a missing NVRTC fails there).
    #[test]
    fn every_kernel_compiles_for_sm_90() {
        if !libs::NVRTC.present() {
            assert!(
                std::env::var_os("TESSERA_REQUIRE_NVRTC").is_none(),
                "TESSERA_REQUIRE_NVRTC is set but {}",
                libs::NVRTC.missing()
            );
            println!("skipped: {}", libs::NVRTC.missing());
            return;
        }
        for source in SOURCES {
            let ptx = compile(source, (9, 0)).unwrap_or_else(|e| panic!("{e}"));
            let text = ptx.to_src();
            assert!(text.contains(".target sm_90"), "{}", source.file);
            for kernel in KERNELS.iter().filter(|k| k.source.file == source.file) {
                assert!(
                    text.contains(&format!(".entry {}(", kernel.name)),
                    "{} has no entry {}",
                    source.file,
                    kernel.name
                );
            }
            println!("{}: {} bytes of PTX", source.file, text.len());
        }
    }

    /// A kernel that does not compile is one error carrying NVRTC's log.
    #[test]
    fn a_compile_error_carries_the_log() {
        if !libs::NVRTC.present() {
            println!("skipped: {}", libs::NVRTC.missing());
            return;
        }
        static BROKEN: KernelSource = KernelSource {
            file: "broken.cu",
            source: "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }",
        };
        let e = compile(&BROKEN, (9, 0)).unwrap_err().to_string();
        assert!(e.contains("broken.cu does not compile") && e.contains("undefined_name"), "{e}");
    }
}
