//! Build script: with the `torch` feature, records libtorch's directory as the rpath of every binary
//! (tessera, tests, benches), so that they find libtorch at run time without LD_LIBRARY_PATH, and
//! makes them load libtorch's CUDA part.
//!
//! torch-sys (tch's FFI crate, `links = "tch"`) prints `cargo:libtorch_lib=DIR` when it builds, which
//! cargo hands to direct dependents as `DEP_TCH_LIBTORCH_LIB`; that is why Cargo.toml names torch-sys
//! beside tch. The default build has no torch-sys and this script does nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let Ok(lib_dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        // Only torch-sys versions that do not print their directory get here; then the libraries
        // must be found the usual way (ld.so.conf or LD_LIBRARY_PATH).
        println!(
            "cargo:warning=torch-sys did not report libtorch's directory; set LD_LIBRARY_PATH at run time"
        );
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    // tch links libtorch_cpu and libc10 only, and the linker's --as-needed would drop any library
    // the code does not call directly. libtorch.so pulls in libtorch_cuda.so, whose static
    // initialisers register CUDA with libtorch: without it tch::Cuda::is_available() is false even
    // on a GPU. (tch's own build.rs does the same for tch's binaries; link args do not propagate.)
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-ltorch");
    // For error messages and `tessera --version`-style reports: where this build expects libtorch.
    println!("cargo:rustc-env=TESSERA_LIBTORCH_LIB={lib_dir}");
}
