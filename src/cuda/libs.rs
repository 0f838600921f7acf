//! Which NVIDIA libraries this process can load, asked before any is used: cudarc loads them at
//! run time and panics when one is absent, so tessera checks first and turns each absence into one
//! [`Error::Device`] naming the library, the file names tried and how to provide it.
//!
//! cudarc (CUDA 13.0 API) tries, for a library `x`: `libx.so`, `libx64*.so` variants, then
//! `libx.so.13`, `.12`, `.11`, `.10`, `.9`, `.1`. That finds the driver (`libcuda.so.1`), NVRTC and
//! cuBLAS 13 (`.so.13`), cuFFT 12 (CUDA 13's, `.so.12`) and cuDNN 9 (`.so.9`), but not NCCL's
//! `libnccl.so.2`: `scripts/cuda-env.sh` adds a `libnccl.so` link for it (docs/GPU.md).

use crate::error::{Error, Result};

/// A library tessera may load.
#[derive(Debug, Clone, Copy)]
pub struct Library {
    /// What it is, in messages: `the CUDA driver`, `NVRTC`, …
    pub what: &'static str,
    /// The file a CUDA 13 installation provides.
    pub file: &'static str,
    present: unsafe fn() -> bool,
}

impl Library {
    /// Whether a file cudarc tries can be loaded.
    pub fn present(&self) -> bool {
        // SAFETY: these functions only dlopen candidate names and close them again.
        unsafe { (self.present)() }
    }

    /// `Ok` when present, else the error that names it.
    pub fn require(&self, device: &str) -> Result<()> {
        if self.present() {
            return Ok(());
        }
        Err(Error::Device {
            device: device.into(),
            reason: self.missing(),
        })
    }

    /// Why this library is needed and how to provide it.
    pub fn missing(&self) -> String {
        if self.file.starts_with("libcuda.") {
            return format!(
                "no NVIDIA driver: {} ({}) cannot be loaded, so this machine has no usable \
                 NVIDIA GPU",
                self.what, self.file
            );
        }
        format!(
            "{} ({}) was not found on the library path; on a machine with a CUDA 13 PyTorch, \
             `eval \"$(scripts/cuda-env.sh)\"` adds its NVIDIA libraries to LD_LIBRARY_PATH \
             (docs/GPU.md)",
            self.what, self.file
        )
    }
}

pub const DRIVER: Library = Library {
    what: "the CUDA driver library",
    file: "libcuda.so.1",
    present: cudarc::driver::sys::is_culib_present,
};

pub const NVRTC: Library = Library {
    what: "NVRTC, the CUDA run-time compiler",
    file: "libnvrtc.so.13",
    present: cudarc::nvrtc::sys::is_culib_present,
};

pub const CUFFT: Library = Library {
    what: "cuFFT",
    file: "libcufft.so.12",
    present: cudarc::cufft::sys::is_culib_present,
};

pub const CUBLAS: Library = Library {
    what: "cuBLAS",
    file: "libcublas.so.13",
    present: cudarc::cublas::sys::is_culib_present,
};

pub const CUDNN: Library = Library {
    what: "cuDNN 9",
    file: "libcudnn.so.9",
    present: cudarc::cudnn::sys::is_culib_present,
};

pub const NCCL: Library = Library {
    what: "NCCL",
    file: "libnccl.so (a link to libnccl.so.2)",
    present: cudarc::nccl::sys::is_culib_present,
};

/// Every library, in the order a report lists them.
pub const ALL: [Library; 6] = [DRIVER, NVRTC, CUFFT, CUBLAS, CUDNN, NCCL];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_named_with_the_way_to_provide_it() {
        let absent = Library {
            what: "NVRTC, the CUDA run-time compiler",
            file: "libnvrtc.so.13",
            present: || false,
        };
        let e = absent.require("cuda:0").unwrap_err().to_string();
        assert!(e.starts_with("cuda:0: NVRTC"), "{e}");
        assert!(
            e.contains("libnvrtc.so.13") && e.contains("scripts/cuda-env.sh"),
            "{e}"
        );
        let no_driver = Library {
            present: || false,
            ..DRIVER
        };
        let e = no_driver.require("cuda").unwrap_err().to_string();
        assert!(
            e.contains("no NVIDIA driver") && e.contains("libcuda.so.1"),
            "{e}"
        );
    }
}
