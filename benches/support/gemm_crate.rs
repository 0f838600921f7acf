//! The benchmarks' second baseline: this binary again as a child process with
//! `TESSERA_PATCH_GEMM=crate`, which turns off the own AVX-512 kernels (the patch product of the
//! forward and of the strided input gradient, and the weight gradient's patch dot:
//! `tessera::nn::kernels::simd`) so that the `gemm` crate runs in their place. The child prints `gemm NAME MEDIAN MIN` lines; the parent prints own / gemm per pass.

#![allow(dead_code)]

/// The switch, as `tessera::nn::kernels::simd::SWITCH` names it.
const SWITCH: (&str, &str) = tessera::nn::kernels::simd::SWITCH;

/// Whether this process is the child that times the `gemm` crate.
pub fn is_child() -> bool {
    tessera::nn::kernels::simd::switched_off()
}

/// The child's line for one pass.
pub fn print_child_line(name: &str, t: (f64, f64)) {
    println!("gemm {name} {:.6} {:.6}", t.0, t.1);
}

/// Runs this binary as the child and prints each pass's own-kernel median beside the child's
/// (the line of the same name) under `header`, or says why it cannot.
/// `native`: (label, name, (median, min) seconds).
pub fn compare(header: &str, native: &[(&str, &str, (f64, f64))]) {
    let out = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .env(SWITCH.0, SWITCH.1)
            .output()
    });
    let text = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            println!(
                "gemm-crate baseline failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            println!("gemm-crate baseline failed to start: {e}");
            return;
        }
    };
    crate::timing::print_ratio_table(header, ["own s", "gemm s", "own/gemm"], native, |name| {
        text.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some("gemm") && f.next() == Some(name))
                .then(|| f.next()?.parse::<f64>().ok())
                .flatten()
        })
    });
}
