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

use crate::tensor::Tensor;

/// One complete run, from its `metrics.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEntry {
    pub folder: PathBuf,
    /// The preset's name.
    pub name: String,
    pub iterations: usize,
    pub stopped_early: bool,
    /// PSNR of the final reconstruction (None without a ground truth).
    pub psnr_db: Option<f64>,
    /// A training run (`train.json`): its result in words (final loss, target accuracy).
    pub training: Option<String>,
    pub modified: SystemTime,
}

impl RunEntry {
    /// Reads `folder/metrics.json` (or a training run's `train.json`); None when the folder is not
    /// a complete run.
    pub fn read(folder: &Path) -> Option<RunEntry> {
        if folder.join("train.json").is_file() && !folder.join("metrics.json").exists() {
            return Self::read_training(folder);
        }
        let path = folder.join("metrics.json");
        let text = std::fs::read_to_string(&path).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        Some(RunEntry {
            folder: folder.to_path_buf(),
            name: v["name"].as_str().unwrap_or("?").to_string(),
            iterations: v["iterations"].as_u64().unwrap_or(0) as usize,
            stopped_early: v["stopped_early"].as_bool().unwrap_or(false),
            psnr_db: v["reconstruction"]["psnr_db"].as_f64(),
            training: None,
            modified,
        })
    }

    fn read_training(folder: &Path) -> Option<RunEntry> {
        let path = folder.join("train.json");
        let text = std::fs::read_to_string(&path).ok()?;
        let result = super::session::TrainResult::parse(&text).ok()?;
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let (name, iterations, stopped_early, words) = match result {
            super::session::TrainResult::Denoiser(s) => {
                let words = s.loss.last().map_or("trained".into(), |p| {
                    format!("loss {:.2e} ({:.1} dB)", p.loss, -10.0 * p.loss.log10())
                });
                (s.name, s.steps, s.stopped_early, words)
            }
            super::session::TrainResult::Dsn(s) => {
                let words = s.epochs.last().map_or("trained".into(), |e| {
                    format!("target accuracy {:.1} %", 100.0 * e.target_accuracy)
                });
                (s.name, s.epochs.len(), s.stopped_early, words)
            }
        };
        Some(RunEntry {
            folder: folder.to_path_buf(),
            name,
            iterations,
            stopped_early,
            psnr_db: None,
            training: Some(words),
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
    }
}

/// What a reopened run is for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Purpose {
    /// Shown in the panes as if it had just run (after a run on a local backend, or Reopen).
    Show,
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
            Purpose::Show => self.shown = Some(folder.clone()),
            Purpose::Compare => self.compared = Some(folder.clone()),
        }
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gui-reopen".into())
            .spawn(move || {
                let _ = tx.send(read_arrays(&folder));
                wake();
            })
            .expect("spawning a thread");
        self.reading.retain(|(p, _)| *p != purpose);
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
