//! Tessera's own GPU kernels: CUDA C sources kept in `src/device/kernels/` and embedded in the
//! binary, compiled at run time by NVRTC for the GPU at hand (`cuda::Gpu` caches the modules), so
//! no CUDA compiler is needed to build or ship tessera. CI compiles every source with NVRTC
//! (`tests/kernels.rs`), and the unit tests run every kernel on the CPU (`device::emulator`).

/// One CUDA C source file: a module of kernels.
#[derive(Debug)]
pub struct KernelSource {
    /// The file's name under `src/device/kernels/`, also the module's name in caches and errors.
    pub file: &'static str,
    pub source: &'static str,
}

/// A kernel: its module and its `extern "C"` name.
#[derive(Debug)]
pub struct Kernel {
    pub source: &'static KernelSource,
    pub name: &'static str,
    /// Whether the kernel calls `__syncthreads` (the CPU emulator then runs a block's threads
    /// concurrently).
    pub barriers: bool,
}

pub static VECTOR: KernelSource = KernelSource {
    file: "vector.cu",
    source: include_str!("kernels/vector.cu"),
};

pub static TOMOGRAPHY: KernelSource = KernelSource {
    file: "tomography.cu",
    source: include_str!("kernels/tomography.cu"),
};

pub static CONV: KernelSource = KernelSource {
    file: "conv.cu",
    source: include_str!("kernels/conv.cu"),
};

pub static TV: KernelSource = KernelSource {
    file: "tv.cu",
    source: include_str!("kernels/tv.cu"),
};

pub static WAVELET: KernelSource = KernelSource {
    file: "wavelet.cu",
    source: include_str!("kernels/wavelet.cu"),
};

/// Every source, for compilation checks.
pub static SOURCES: [&KernelSource; 5] = [&VECTOR, &TOMOGRAPHY, &CONV, &TV, &WAVELET];

const fn kernel(source: &'static KernelSource, name: &'static str) -> Kernel {
    Kernel {
        source,
        name,
        barriers: false,
    }
}

const fn with_barriers(source: &'static KernelSource, name: &'static str) -> Kernel {
    Kernel {
        source,
        name,
        barriers: true,
    }
}

pub static AXPY: Kernel = kernel(&VECTOR, "tsr_axpy");
pub static SCALE: Kernel = kernel(&VECTOR, "tsr_scale");
pub static SUB: Kernel = kernel(&VECTOR, "tsr_sub");
pub static CLAMP: Kernel = kernel(&VECTOR, "tsr_clamp");
pub static DOT_PARTIALS: Kernel = with_barriers(&VECTOR, "tsr_dot_partials");
pub static SUM_PARTIALS: Kernel = with_barriers(&VECTOR, "tsr_sum_partials");
pub static TRANSPOSE: Kernel = kernel(&VECTOR, "tsr_transpose");
pub static TOMO_BORDER: Kernel = kernel(&TOMOGRAPHY, "tsr_tomo_border");
pub static TOMO_FORWARD: Kernel = kernel(&TOMOGRAPHY, "tsr_tomo_forward");
pub static TOMO_ADJOINT: Kernel = kernel(&TOMOGRAPHY, "tsr_tomo_adjoint");
pub static CONV_PAD: Kernel = kernel(&CONV, "tsr_conv_pad");
pub static CONV_CROP: Kernel = kernel(&CONV, "tsr_conv_crop");
pub static CONV_FOLD: Kernel = kernel(&CONV, "tsr_conv_fold");
pub static SPECTRUM_MULTIPLY: Kernel = kernel(&CONV, "tsr_spectrum_multiply");
pub static SPECTRUM_SHIFTED_INVERSE: Kernel = kernel(&CONV, "tsr_spectrum_shifted_inverse");
pub static TV_PRIMAL: Kernel = kernel(&TV, "tsr_tv_primal");
pub static TV_DUAL: Kernel = kernel(&TV, "tsr_tv_dual");
pub static TV_PLANE_SUMS: Kernel = with_barriers(&TV, "tsr_tv_plane_sums");
pub static WAVELET_COPY_BOX: Kernel = kernel(&WAVELET, "tsr_wav_copy_box");
pub static WAVELET_FORWARD: Kernel = kernel(&WAVELET, "tsr_wav_forward");
pub static WAVELET_INVERSE: Kernel = kernel(&WAVELET, "tsr_wav_inverse");
pub static WAVELET_THRESHOLD: Kernel = kernel(&WAVELET, "tsr_wav_threshold");

/// Every kernel, for the checks that each one compiles and is found in its module.
pub static KERNELS: [&Kernel; 22] = [
    &AXPY,
    &SCALE,
    &SUB,
    &CLAMP,
    &DOT_PARTIALS,
    &SUM_PARTIALS,
    &TRANSPOSE,
    &TOMO_BORDER,
    &TOMO_FORWARD,
    &TOMO_ADJOINT,
    &CONV_PAD,
    &CONV_CROP,
    &CONV_FOLD,
    &SPECTRUM_MULTIPLY,
    &SPECTRUM_SHIFTED_INVERSE,
    &TV_PRIMAL,
    &TV_DUAL,
    &TV_PLANE_SUMS,
    &WAVELET_COPY_BOX,
    &WAVELET_FORWARD,
    &WAVELET_INVERSE,
    &WAVELET_THRESHOLD,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `extern "C" __global__` kernel of every source is registered (and vice versa), and a
    /// kernel marked as synchronising is exactly one whose body reaches `__syncthreads`.
    #[test]
    fn registry_matches_the_sources() {
        const OPEN: &str = "extern \"C\" __global__ void ";
        let mut declared = Vec::new();
        for source in SOURCES {
            let text = source.source;
            for (at, _) in text.match_indices(OPEN) {
                let rest = &text[at + OPEN.len()..];
                let name = rest[..rest.find('(').expect("a parameter list")].trim();
                // The body runs to the next kernel or helper (or the end of the file).
                let end = [OPEN, "__device__"]
                    .iter()
                    .filter_map(|m| rest.find(m))
                    .min()
                    .unwrap_or(rest.len());
                let body = &rest[..end];
                let syncs = body.contains("__syncthreads") || body.contains("tsr_block_sum(");
                declared.push((source.file, name, syncs));
            }
        }
        let mut registered: Vec<_> = KERNELS
            .iter()
            .map(|k| (k.source.file, k.name, k.barriers))
            .collect();
        registered.sort();
        declared.sort();
        assert_eq!(registered, declared);
    }
}
