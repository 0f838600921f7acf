//! PyTorch timings for the benchmarks that compare the native engine with it: a script under
//! `scripts/` run by the benchmark environment's Python prints `torch NAME MEDIAN MIN` lines.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The Python with torch and deepinv: `TESSERA_TORCH_PYTHON`, else the venv that
/// `scripts/setup-deepinv.sh` makes (`None` when neither exists).
pub fn torch_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TESSERA_TORCH_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".cache/tessera/deepinv-venv/bin/python");
    p.exists().then_some(p)
}

/// Runs `scripts/SCRIPT ARGS…` and returns its `(name, median s, min s)` lines, or why not.
pub fn torch_times(
    python: &PathBuf,
    script: &str,
    args: &[String],
) -> Result<Vec<(String, f64, f64)>, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(script);
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<(String, f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                ["torch", name, med, min] => {
                    Some((name.to_string(), med.parse().ok()?, min.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect();
    if lines.is_empty() {
        Err(format!("no `torch NAME MEDIAN MIN` lines in: {text}"))
    } else {
        Ok(lines)
    }
}

/// Runs `scripts/SCRIPT --threads 2 --reps REPS` and prints each pass's native median beside
/// PyTorch's (the script's line of the same name) under `header`, or says why it cannot.
/// `native`: (label, the script's name for the pass, (median, min) seconds).
pub fn print_comparison(
    script: &str,
    reps: usize,
    header: &str,
    native: &[(&str, &str, (f64, f64))],
) {
    let Some(python) = torch_python() else {
        println!(
            "(no PyTorch comparison: ~/.cache/tessera/deepinv-venv/bin/python not found; set TESSERA_TORCH_PYTHON)"
        );
        return;
    };
    let args = vec![
        "--threads".to_string(),
        "2".into(),
        "--reps".into(),
        reps.to_string(),
    ];
    let torch = match torch_times(&python, script, &args) {
        Ok(t) => t,
        Err(e) => {
            println!("PyTorch comparison failed: {}", e.trim());
            return;
        }
    };
    crate::timing::print_ratio_table(
        header,
        ["native s", "torch s", "native/torch"],
        native,
        |name| {
            torch
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, med, _)| *med)
        },
    );
}
