//! The run history: the runs under the workbench's output root (each in a folder of its own with a
//! `metrics.json`, written last when the run is complete) and this window's runs, read on helper
//! threads. A run can be reopened (its reconstruction and ground truth become the panes' arrays)
//! or compared with the one on screen.
//!
//! Folders are read defensively: a hidden folder is a run still being staged, a folder without a
//! readable `metrics.json` is not a complete run, and the older `job-N` layout reads the same way.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};
use std::time::SystemTime;

use crate::fwi::FwiPreset;
use crate::preset::Preset;
use crate::tensor::Tensor;

/// One complete run, from its `metrics.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEntry {
    pub folder: PathBuf,
    /// The preset's name.
    pub name: String,
    /// How far it ran, in `unit`s.
    pub iterations: usize,
    /// `iterations` of an imaging run, `epochs` of an FWI or Multi-DSN run, `steps` of a
    /// denoiser's training.
    pub unit: &'static str,
    pub stopped_early: bool,
    /// PSNR of the final reconstruction (None without a ground truth).
    pub psnr_db: Option<f64>,
    /// The result in words where it is not a PSNR: an FWI run's final model error (or loss), a
    /// training run's final loss or target accuracy.
    pub result: Option<String>,
    /// A training run (`train.json`), which has no image to compare.
    pub training: bool,
    pub modified: SystemTime,
}

impl RunEntry {
    /// Reads `folder/metrics.json` (or a training run's `train.json`); None when the folder is not
    /// a complete run.
    pub fn read(folder: &Path) -> Option<RunEntry> {
        if folder.join(crate::io::TRAIN_SUMMARY_FILE).is_file()
            && !folder.join(crate::io::METRICS_FILE).exists()
        {
            return Self::read_training(folder);
        }
        let path = folder.join(crate::io::METRICS_FILE);
        let text = std::fs::read_to_string(&path).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let stopped_early = v["stopped_early"].as_bool().unwrap_or(false);
        let name = v["name"].as_str().unwrap_or("?").to_string();
        if let Some(history) = v["history"]
            .as_array()
            .filter(|_| v.get("model_shape").is_some())
        {
            // An FWI run: its epochs, and the model error it reached (else the last loss).
            let last = history.last();
            let result = last
                .and_then(|e| {
                    v["final_model_error"]
                        .as_f64()
                        .or(e["model_error"].as_f64())
                })
                .map(|m| format!("model error {:.2} %", 100.0 * m))
                .or_else(|| {
                    last.and_then(|e| e["loss"].as_f64())
                        .map(|l| format!("loss {l:.3e}"))
                });
            return Some(RunEntry {
                folder: folder.to_path_buf(),
                name,
                iterations: history.len(),
                unit: "epochs",
                stopped_early,
                psnr_db: None,
                result,
                training: false,
                modified,
            });
        }
        Some(RunEntry {
            folder: folder.to_path_buf(),
            name,
            iterations: v["iterations"].as_u64().unwrap_or(0) as usize,
            unit: "iterations",
            stopped_early,
            psnr_db: v["reconstruction"]["psnr_db"].as_f64(),
            result: None,
            training: false,
            modified,
        })
    }

    fn read_training(folder: &Path) -> Option<RunEntry> {
        let path = folder.join(crate::io::TRAIN_SUMMARY_FILE);
        let text = std::fs::read_to_string(&path).ok()?;
        let result = super::session::TrainResult::parse(&text).ok()?;
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let (name, iterations, unit, stopped_early, words) = match result {
            super::session::TrainResult::Denoiser(s) => {
                let words = s.loss.last().map_or("trained".into(), |p| {
                    format!("loss {:.2e} ({:.1} dB)", p.loss, -10.0 * p.loss.log10())
                });
                (s.name, s.steps, "steps", s.stopped_early, words)
            }
            super::session::TrainResult::Dsn(s) => {
                let words = s.epochs.last().map_or("trained".into(), |e| {
                    format!("target accuracy {:.1} %", 100.0 * e.target_accuracy)
                });
                (s.name, s.epochs.len(), "epochs", s.stopped_early, words)
            }
        };
        Some(RunEntry {
            folder: folder.to_path_buf(),
            name,
            iterations,
            unit,
            stopped_early,
            psnr_db: None,
            result: Some(words),
            training: true,
            modified,
        })
    }

    /// The folder's name (`20250101-120000-quick-1`, or `job-3` from older servers).
    pub fn label(&self) -> String {
        self.folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.folder.display().to_string())
    }
}

/// The complete runs directly under `root`, newest first.
pub fn scan(root: &Path) -> Vec<RunEntry> {
    let Ok(dir) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut runs: Vec<RunEntry> = dir
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| RunEntry::read(&e.path()))
        .collect();
    runs.sort_by(|a, b| b.modified.cmp(&a.modified).then(b.folder.cmp(&a.folder)));
    runs
}

/// A run's arrays, read back from its folder.
pub struct RunArrays {
    pub folder: PathBuf,
    pub reconstruction: Option<Arc<Tensor>>,
    pub ground_truth: Option<Arc<Tensor>>,
    /// Measurements the run wrote (`measurement_i.npy`), by operator.
    pub measurements: Vec<(usize, Arc<Tensor>)>,
    /// Why the reconstruction could not be read, if it could not.
    pub error: Option<String>,
    /// The preset the run ran (read for a reopen only), or why it cannot be had.
    pub preset: Option<Result<RunPreset, String>>,
}

/// The preset a run's `metrics.json` records (`"preset"`: the TOML that ran).
// One per reopen: the size difference costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum RunPreset {
    Imaging(Preset),
    Fwi(FwiPreset),
}

/// Reads the preset recorded in `folder/metrics.json`.
pub fn read_preset(folder: &Path) -> Result<RunPreset, String> {
    let path = folder.join(crate::io::METRICS_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{e}: {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{e}: {}", path.display()))?;
    let toml = v["preset"]
        .as_str()
        .ok_or_else(|| format!("it records no preset: {}", path.display()))?;
    let origin = format!("run {}", folder.display());
    let preset = if FwiPreset::is_fwi(toml) {
        FwiPreset::from_toml(toml, &origin, &[]).map(RunPreset::Fwi)
    } else {
        Preset::from_toml(toml, &origin, &[]).map(RunPreset::Imaging)
    };
    preset.map_err(|e| e.to_string())
}

/// Reads `reconstruction.npy` (or `.nii.gz`), `ground_truth.*` and `measurement_i.npy` from a run
/// folder; of an FWI run, `inverted_model.npy` and `true_model.npy` (2-D, shown as one channel).
pub fn read_arrays(folder: &Path) -> RunArrays {
    let first = |stems: [&str; 2]| {
        stems.iter().find_map(|stem| {
            ["npy", "nii.gz"]
                .iter()
                .map(|ext| folder.join(format!("{stem}.{ext}")))
                .find(|p| p.is_file())
        })
    };
    let read = |p: PathBuf| {
        let t = crate::io::read_array(&p)?;
        let t = match *t.shape() {
            [h, w] => t.reshape(&[1, 1, h, w])?,
            _ => t,
        };
        Ok::<_, crate::Error>(Arc::new(t))
    };
    let (reconstruction, error) = match first(["reconstruction", "inverted_model"]).map(read) {
        Some(Ok(t)) => (Some(t), None),
        Some(Err(e)) => (None, Some(e.to_string())),
        None => (
            None,
            Some(format!("no reconstruction in {}", folder.display())),
        ),
    };
    let ground_truth = first(["ground_truth", "true_model"]).and_then(|p| read(p).ok());
    let measurements = (0..)
        .map(|i| (i, folder.join(format!("measurement_{i}.npy"))))
        .take_while(|(_, p)| p.is_file())
        .filter_map(|(i, p)| read(p).ok().map(|t| (i, t)))
        .collect();
    RunArrays {
        folder: folder.to_path_buf(),
        reconstruction,
        ground_truth,
        measurements,
        error,
        preset: None,
    }
}

/// What a reopened run is for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Purpose {
    /// Shown in the panes of the document that ran it (the run just made on a local backend, or
    /// fetched from a remote one).
    Show,
    /// Reopened from the Runs tab: its preset goes back into the editor, then its arrays into the
    /// panes.
    Reopen,
    /// Shown beside the current reconstruction (and in the difference pane).
    Compare,
}

/// The runs listed in the History view.
#[derive(Default)]
pub struct RunHistory {
    /// The workbench's output root (None: only this window's runs).
    pub root: Option<PathBuf>,
    pub runs: Vec<RunEntry>,
    /// Folders of runs made from this window.
    pub this_window: HashSet<PathBuf>,
    /// The run whose arrays are on screen, and the one compared with it.
    pub shown: Option<PathBuf>,
    pub compared: Option<PathBuf>,
    scanning: Option<Receiver<Vec<RunEntry>>>,
    reading: Vec<(Purpose, Receiver<RunArrays>)>,
}

impl RunHistory {
    pub fn new(root: Option<PathBuf>) -> RunHistory {
        RunHistory {
            root,
            ..RunHistory::default()
        }
    }

    /// Lists the runs again on a helper thread (this window's runs that live elsewhere too).
    pub fn rescan(&mut self, wake: impl Fn() + Send + 'static) {
        let root = self.root.clone();
        let extra: Vec<PathBuf> = self.this_window.iter().cloned().collect();
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gui-history".into())
            .spawn(move || {
                let mut runs = root.as_deref().map(scan).unwrap_or_default();
                for f in extra {
                    if !runs.iter().any(|r| r.folder == f)
                        && let Some(r) = RunEntry::read(&f)
                    {
                        runs.push(r);
                    }
                }
                runs.sort_by(|a, b| b.modified.cmp(&a.modified).then(b.folder.cmp(&a.folder)));
                let _ = tx.send(runs);
                wake();
            })
            .expect("spawning a thread");
        self.scanning = Some(rx);
    }

    /// Reads a run's arrays on a helper thread.
    pub fn open(&mut self, folder: &Path, purpose: Purpose, wake: impl Fn() + Send + 'static) {
        let folder = folder.to_path_buf();
        match purpose {
            Purpose::Show | Purpose::Reopen => self.shown = Some(folder.clone()),
            Purpose::Compare => self.compared = Some(folder.clone()),
        }
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gui-reopen".into())
            .spawn(move || {
                let mut arrays = read_arrays(&folder);
                if purpose == Purpose::Reopen {
                    arrays.preset = Some(read_preset(&folder));
                }
                let _ = tx.send(arrays);
                wake();
            })
            .expect("spawning a thread");
        let shows = |p: Purpose| p != Purpose::Compare;
        self.reading
            .retain(|(p, _)| *p != purpose && !(shows(*p) && shows(purpose)));
        self.reading.push((purpose, rx));
    }

    pub fn is_busy(&self) -> bool {
        self.scanning.is_some() || !self.reading.is_empty()
    }

    /// Takes a finished listing and finished reads.
    pub fn poll(&mut self) -> Vec<(Purpose, RunArrays)> {
        if let Some(rx) = &self.scanning {
            match rx.try_recv() {
                Ok(runs) => {
                    self.runs = runs;
                    self.scanning = None;
                }
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => self.scanning = None,
            }
        }
        let mut done = Vec::new();
        self.reading.retain(|(purpose, rx)| match rx.try_recv() {
            Ok(arrays) => {
                done.push((*purpose, arrays));
                false
            }
            Err(mpsc::TryRecvError::Empty) => true,
            Err(mpsc::TryRecvError::Disconnected) => false,
        });
        done
    }
}

/// Opens a folder in the desktop's file manager (`xdg-open`); the error says why not.
pub fn open_folder(folder: &Path) -> Result<(), String> {
    std::process::Command::new("xdg-open")
        .arg(folder)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(|_| ())
        .map_err(|e| {
            format!(
                "could not run xdg-open ({e}); the folder is {}",
                folder.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_runs_are_listed_newest_first_and_staging_folders_skipped() {
        let root = tempfile::tempdir().unwrap();
        let run = |name: &str, psnr: f64| {
            let d = root.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            let json = format!(
                r#"{{"name": "quick", "iterations": 30, "stopped_early": false,
                    "reconstruction": {{"psnr_db": {psnr}, "ssim": 0.9}}}}"#
            );
            std::fs::write(d.join("metrics.json"), json).unwrap();
            crate::io::write_npy(&d.join("reconstruction.npy"), &Tensor::zeros(&[1, 1, 4, 5]))
                .unwrap();
            d
        };
        let old = run("job-1", 20.0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let new = run("20250101-120000-quick-1", 25.5);
        // Staged (hidden) and incomplete (no metrics.json) folders are not runs.
        run(".20250101-120001-quick-2.partial", 1.0);
        std::fs::create_dir_all(root.path().join("20250101-120002-quick-3")).unwrap();
        std::fs::write(root.path().join("serve-1.log"), "log").unwrap();

        let runs = scan(root.path());
        let folders: Vec<&Path> = runs.iter().map(|r| r.folder.as_path()).collect();
        assert_eq!(folders, vec![new.as_path(), old.as_path()]);
        assert_eq!(runs[0].psnr_db, Some(25.5));
        assert_eq!(runs[0].label(), "20250101-120000-quick-1");

        let arrays = read_arrays(&new);
        assert_eq!(arrays.reconstruction.unwrap().shape(), &[1, 1, 4, 5]);
        assert!(arrays.ground_truth.is_none() && arrays.error.is_none());
        let missing = read_arrays(&root.path().join("20250101-120002-quick-3"));
        assert!(missing.error.unwrap().contains("no reconstruction"));
    }
}
