//! tessera's CUDA C kernels compile with NVRTC (the `cuda` feature): CI installs NVRTC from PyPI and
//! sets `TESSERA_REQUIRE_NVRTC`, so a kernel that does not compile fails CI, not a GPU run. Elsewhere
//! the tests print `skipped: …` when libnvrtc is absent. No GPU is needed.
#![cfg(feature = "cuda")]

use tessera::cuda::{libs, nvrtc};
use tessera::device::kernels::{KERNELS, KernelSource, SOURCES};

/// Whether NVRTC can be loaded; fails when CI requires it and it cannot.
fn nvrtc_present() -> bool {
    if libs::NVRTC.present() {
        return true;
    }
    assert!(
        std::env::var_os("TESSERA_REQUIRE_NVRTC").is_none(),
        "TESSERA_REQUIRE_NVRTC is set but {}",
        libs::NVRTC.missing()
    );
    println!("skipped: {}", libs::NVRTC.missing());
    false
}

/// Every kernel source compiles for Hopper (sm_90) and defines every registered kernel.
#[test]
fn every_kernel_compiles_for_sm_90() {
    if !nvrtc_present() {
        return;
    }
    for source in SOURCES {
        let ptx = nvrtc::compile(source, (9, 0)).unwrap_or_else(|e| panic!("{e}"));
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
    if !nvrtc_present() {
        return;
    }
    static BROKEN: KernelSource = KernelSource {
        file: "broken.cu",
        source: "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }",
    };
    let e = nvrtc::compile(&BROKEN, (9, 0)).unwrap_err().to_string();
    assert!(
        e.contains("broken.cu does not compile") && e.contains("undefined_name"),
        "{e}"
    );
}
