//! BM3D beside tessera's denoisers in `tessera bench denoisers`: BM3D is not part of tessera, so
//! the bench writes its seeded noisy inputs (the very tensors the other columns denoise) as `.npy`
//! files with a manifest, runs `scripts/bench_bm3d.py` in the benchmark environment (PyPI `bm3d`
//! 4.0.3, told each input's σ exactly) and reads its outputs back. Without that environment the
//! column is left out and the reason is printed under the table.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The manifest's file name in the exchange folder.
pub const MANIFEST: &str = "bm3d.json";

/// One noisy input: `input` (written by tessera) and `output` (written by the script), both file
/// names in the exchange folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub image: String,
    pub sigma: f32,
    pub input: String,
    pub output: String,
}

/// Where the script and the Python that runs it are.
#[derive(Debug, Clone, PartialEq)]
pub struct Runner {
    pub python: PathBuf,
    pub script: PathBuf,
}

impl Runner {
    /// The benchmark environment: `$TESSERA_BENCH_VENV` (default
    /// `~/.cache/tessera/deepinv-venv`, made by scripts/setup-deepinv.sh) and this source tree's
    /// `scripts/bench_bm3d.py`; `Err` says which of them is missing.
    pub fn from_environment() -> std::result::Result<Runner, String> {
        let venv = match std::env::var_os("TESSERA_BENCH_VENV") {
            Some(v) => PathBuf::from(v),
            None => match std::env::var_os("HOME") {
                Some(home) => Path::new(&home).join(".cache/tessera/deepinv-venv"),
                None => return Err("HOME is not set and TESSERA_BENCH_VENV is not given".into()),
            },
        };
        let python = venv.join("bin/python");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench_bm3d.py");
        if !python.is_file() {
            return Err(format!(
                "no benchmark environment at {} (scripts/setup-deepinv.sh makes it; \
                 TESSERA_BENCH_VENV names another)",
                venv.display()
            ));
        }
        if !script.is_file() {
            return Err(format!(
                "{} is not there (BM3D runs from a tessera source tree)",
                script.display()
            ));
        }
        Ok(Runner { python, script })
    }

    /// Denoises every `(image, σ, noisy)` with BM3D in `dir` (created; left with the inputs and
    /// outputs for inspection): the outputs in the same order.
    pub fn denoise(&self, dir: &Path, inputs: &[(String, f32, &Tensor)]) -> Result<Vec<Tensor>> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
        let mut jobs = Vec::with_capacity(inputs.len());
        for (k, (image, sigma, noisy)) in inputs.iter().enumerate() {
            let job = Job {
                image: image.clone(),
                sigma: *sigma,
                input: format!("noisy_{k:03}.npy"),
                output: format!("bm3d_{k:03}.npy"),
            };
            crate::io::write_array(&dir.join(&job.input), noisy)?;
            // A stale output from an earlier run must not be read back as this run's.
            let _ = std::fs::remove_file(dir.join(&job.output));
            jobs.push(job);
        }
        crate::io::write_json_atomic(&dir.join(MANIFEST), &jobs)?;
        let what = format!("{} {}", self.python.display(), self.script.display());
        let out = Command::new(&self.python)
            .arg(&self.script)
            .arg(dir)
            .output()
            .map_err(|e| Error::ChildFailed {
                what: what.clone(),
                reason: e.to_string(),
            })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(3).collect();
            return Err(Error::ChildFailed {
                what,
                reason: format!(
                    "{}: {}",
                    out.status,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
                ),
            });
        }
        jobs.iter()
            .zip(inputs)
            .map(|(job, (_, _, noisy))| {
                let path = dir.join(&job.output);
                let y = crate::io::read_array(&path)?;
                if y.shape() != noisy.shape() {
                    return Err(Error::format(
                        &path,
                        format!(
                            "BM3D's output has shape {:?}, its input {:?}",
                            y.shape(),
                            noisy.shape()
                        ),
                    ));
                }
                y.check_finite(&format!("BM3D's output {}", path.display()))?;
                Ok(y)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in script (plain shell, no Python packages) that copies each input to its output:
    /// the exchange round-trips the tensors exactly, and a failing or lying script is an error.
    #[test]
    fn inputs_go_out_and_outputs_come_back_in_order_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("copy.sh");
        std::fs::write(
            &script,
            "cd \"$1\" && for f in noisy_*.npy; do cp \"$f\" \"bm3d_${f#noisy_}\"; done\n",
        )
        .unwrap();
        let runner = Runner {
            python: PathBuf::from("sh"),
            script,
        };
        let a = Tensor::from_fn(&[1, 1, 5, 7], |i| i as f32 * 0.01);
        let b = Tensor::from_fn(&[1, 3, 4, 4], |i| 1.0 - i as f32 * 0.01);
        let inputs = [("a".to_string(), 0.1, &a), ("b".to_string(), 0.02, &b)];
        let ex = dir.path().join("ex");
        let got = runner.denoise(&ex, &inputs).unwrap();
        assert_eq!(got, vec![a.clone(), b.clone()]);
        let jobs: Vec<Job> =
            serde_json::from_slice(&std::fs::read(ex.join(MANIFEST)).unwrap()).unwrap();
        assert_eq!((jobs[1].image.as_str(), jobs[1].sigma), ("b", 0.02));

        let failing = Runner {
            python: PathBuf::from("sh"),
            script: dir.path().join("missing.sh"),
        };
        let e = failing.denoise(&ex, &inputs).unwrap_err().to_string();
        assert!(e.contains("missing.sh"), "{e}");

        let wrong = dir.path().join("wrong.sh");
        std::fs::write(
            &wrong,
            "cd \"$1\" && cp noisy_001.npy bm3d_000.npy && cp noisy_001.npy bm3d_001.npy\n",
        )
        .unwrap();
        let lying = Runner {
            python: PathBuf::from("sh"),
            script: wrong,
        };
        let e = lying.denoise(&ex, &inputs).unwrap_err().to_string();
        assert!(e.contains("bm3d_000.npy") && e.contains("shape"), "{e}");
    }
}
