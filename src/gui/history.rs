//! The run history: the runs under the workbench's output root (each in a folder of its own with a
//! `metrics.json`, written last when the run is complete) and this window's runs, read on helper
//! threads. A run can be reopened (its reconstruction and ground truth become the panes' arrays)
//! or compared with the one on screen.
//!
//! Folders are read defensively: a hidden folder is a run still being staged, a folder without a
//! readable `metrics.json` is not a complete run, and the older `job-N` layout reads the same way.
//!
//! The browser adds to each run a thumbnail of its reconstruction, the name of its input (from
//! the preset it recorded) and the user's notes, kept in [`NOTES_FILE`] beside the outputs (the
//! only file of a run the workbench writes); deleting a run removes its folder and nothing else.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};
use std::time::SystemTime;

use egui::ColorImage;

use crate::Error;
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
    /// What the run reconstructed from, in words (the image's file or sample, the measured data's
    /// file), from the preset it recorded.
    pub input: Option<String>,
    /// The user's notes ([`NOTES_FILE`]; empty without).
    pub notes: String,
    /// The reconstruction (a volume's central slice), small, in gray with auto contrast.
    pub thumbnail: Option<Arc<ColorImage>>,
}

/// The file in a run's folder that holds the user's notes on it.
pub const NOTES_FILE: &str = "notes.txt";

/// Longest side of a run's thumbnail, in pixels.
pub const THUMBNAIL_SIDE: usize = 48;

/// Reconstructions larger than this are not read for a thumbnail (the listing stays quick).
const THUMBNAIL_MAX_BYTES: u64 = 64 << 20;

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
                input: input_of(&v),
                notes: read_notes(folder),
                thumbnail: thumbnail(folder),
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
            input: input_of(&v),
            notes: read_notes(folder),
            thumbnail: thumbnail(folder),
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
            input: None,
            notes: read_notes(folder),
            thumbnail: None,
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

/// The run's input in words, from the preset TOML its `metrics.json` records: the image's file
/// name, the built-in sample, the image sent from the workbench, or the measured data's files.
fn input_of(metrics: &serde_json::Value) -> Option<String> {
    let preset: toml::Table = metrics["preset"].as_str()?.parse().ok()?;
    let file_name = |p: &toml::Value| {
        let p = Path::new(p.as_str()?);
        Some(
            p.file_name()
                .unwrap_or(p.as_os_str())
                .to_string_lossy()
                .into_owned(),
        )
    };
    let image = preset.get("image").or(preset.get("model"))?;
    if let Some(name) = image.get("path").and_then(file_name) {
        return Some(name);
    }
    if let Some(sample) = image.get("sample") {
        let name = sample
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| sample.to_string());
        return Some(format!("sample {name}"));
    }
    if let Some(name) = image.get("inline").and_then(|v| v.as_str()) {
        return Some(format!("opened image {name}"));
    }
    let measured: Vec<String> = preset
        .get("measurements")
        .and_then(|m| m.get("paths"))
        .and_then(|p| p.as_array())
        .map(|paths| paths.iter().filter_map(file_name).collect())
        .unwrap_or_default();
    (!measured.is_empty()).then(|| format!("measured {}", measured.join(", ")))
}

/// The notes kept in `folder` (empty when there are none or they cannot be read).
pub fn read_notes(folder: &Path) -> String {
    std::fs::read_to_string(folder.join(NOTES_FILE)).unwrap_or_default()
}

/// Keeps `notes` in `folder`'s [`NOTES_FILE`] (empty notes remove the file). Written to a
/// temporary file first and renamed over, so a failed write leaves the old notes whole.
pub fn save_notes(folder: &Path, notes: &str) -> Result<(), Error> {
    let path = folder.join(NOTES_FILE);
    if notes.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io("removing the notes", path, e))
            }
            _ => Ok(()),
        };
    }
    let staged = folder.join(format!(".{NOTES_FILE}.tmp"));
    std::fs::write(&staged, notes).map_err(|e| Error::io("writing the notes", &staged, e))?;
    std::fs::rename(&staged, &path).map_err(|e| {
        let _ = std::fs::remove_file(&staged);
        Error::io("saving the notes", &path, e)
    })
}

/// Deletes the run in `folder`: that folder and what is in it, nothing else. Refused unless it
/// is a complete run's own folder (not a link to one, whose target would be left while the user
/// believes it gone) and, when `root` is given, directly under it or in `also` (this window's
/// runs elsewhere).
pub fn delete_run(
    folder: &Path,
    root: Option<&Path>,
    also: &HashSet<PathBuf>,
) -> Result<(), Error> {
    let refuse = |reason: &str| Error::Format {
        path: folder.to_path_buf(),
        reason: format!("not deleted: {reason}"),
    };
    let meta = std::fs::symlink_metadata(folder)
        .map_err(|e| Error::io("reading the run folder", folder, e))?;
    if meta.file_type().is_symlink() {
        return Err(refuse("it is a link to a folder, not a run's own folder"));
    }
    if !meta.is_dir() || RunEntry::read(folder).is_none() {
        return Err(refuse("it is not a complete run's folder"));
    }
    let under_root = root.is_some_and(|r| folder.parent() == Some(r));
    if !under_root && !also.contains(folder) {
        return Err(refuse(
            "it is not a run of the runs folder or of this window",
        ));
    }
    std::fs::remove_dir_all(folder).map_err(|e| Error::io("deleting the run", folder, e))
}

/// Which runs the browser lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    /// Words that the run's folder, preset, input or notes contain (any case).
    pub text: String,
    /// Only runs of this preset.
    pub preset: Option<String>,
    pub status: StatusFilter,
}

/// How a run ended, for [`RunFilter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StatusFilter {
    #[default]
    Any,
    /// Ran to its end.
    Finished,
    /// Stopped before its end.
    Stopped,
}

impl StatusFilter {
    pub const ALL: [StatusFilter; 3] = [
        StatusFilter::Any,
        StatusFilter::Finished,
        StatusFilter::Stopped,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StatusFilter::Any => "any status",
            StatusFilter::Finished => "finished",
            StatusFilter::Stopped => "stopped",
        }
    }
}

impl RunFilter {
    pub fn keeps(&self, run: &RunEntry) -> bool {
        let status = match self.status {
            StatusFilter::Any => true,
            StatusFilter::Finished => !run.stopped_early,
            StatusFilter::Stopped => run.stopped_early,
        };
        let text = self.text.trim().to_lowercase();
        let words = [
            run.label(),
            run.name.clone(),
            run.input.clone().unwrap_or_default(),
            run.notes.clone(),
        ]
        .join("\n")
        .to_lowercase();
        status
            && self.preset.as_ref().is_none_or(|p| *p == run.name)
            && text.split_whitespace().all(|w| words.contains(w))
    }
}

/// The thumbnail of the run in `folder` (None without a readable reconstruction).
fn thumbnail(folder: &Path) -> Option<Arc<ColorImage>> {
    let path = [
        "reconstruction.npy",
        "reconstruction.nii.gz",
        "inverted_model.npy",
    ]
    .iter()
    .map(|f| folder.join(f))
    .find(|p| p.is_file())?;
    if std::fs::metadata(&path).ok()?.len() > THUMBNAIL_MAX_BYTES {
        return None;
    }
    let t = crate::io::read_array(&path).ok()?;
    let t = match *t.shape() {
        [h, w] => t.reshape(&[1, 1, h, w]).ok()?,
        _ => t,
    };
    let section = crate::protocol::Section {
        cut: None,
        channel: None,
    };
    let image = crate::protocol::PreviewImage::of_tensor(&t, section, THUMBNAIL_SIDE)?;
    let (color, _) = super::preview::colorize(&image, super::preview::Display::default());
    Some(Arc::new(color))
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

    fn complete_run(root: &Path, name: &str) -> PathBuf {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("metrics.json"),
            r#"{"name": "quick", "iterations": 3, "preset": "[image]\npath = \"a/b.png\""}"#,
        )
        .unwrap();
        d
    }

    #[test]
    fn deleting_a_run_removes_its_folder_only_and_refuses_anything_else() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let run = complete_run(root.path(), "r1");
        let outside = complete_run(elsewhere.path(), "r2");
        let not_a_run = root.path().join("plain");
        std::fs::create_dir_all(&not_a_run).unwrap();
        let none = HashSet::new();
        let refused = |folder: &Path, also: &HashSet<PathBuf>| {
            delete_run(folder, Some(root.path()), also)
                .unwrap_err()
                .to_string()
        };
        assert!(refused(&not_a_run, &none).contains("not a complete run"));
        assert!(refused(&outside, &none).contains("not a run of the runs folder"));
        #[cfg(unix)]
        {
            let link = root.path().join("link");
            std::os::unix::fs::symlink(&outside, &link).unwrap();
            assert!(refused(&link, &none).contains("a link"));
            assert!(
                outside.join("metrics.json").is_file(),
                "the link's target stays"
            );
        }
        delete_run(&run, Some(root.path()), &none).unwrap();
        assert!(!run.exists() && not_a_run.is_dir());
        // A run of this window outside the root.
        let also = HashSet::from([outside.clone()]);
        delete_run(&outside, Some(root.path()), &also).unwrap();
        assert!(!outside.exists() && elsewhere.path().is_dir());
    }

    #[test]
    fn notes_are_kept_beside_the_outputs_and_the_filter_reads_them() {
        let root = tempfile::tempdir().unwrap();
        let run = complete_run(root.path(), "20250101-quick-1");
        save_notes(&run, "edges ringing").unwrap();
        assert_eq!(read_notes(&run), "edges ringing");
        let entry = RunEntry::read(&run).unwrap();
        assert_eq!(entry.input.as_deref(), Some("b.png"));
        assert_eq!(entry.notes, "edges ringing");
        let names: Vec<String> = std::fs::read_dir(&run)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "metrics.json and notes.txt only: {names:?}");
        let keeps = |f: RunFilter| f.keeps(&entry);
        assert!(keeps(RunFilter {
            text: "RINGING b.png".into(),
            ..RunFilter::default()
        }));
        assert!(!keeps(RunFilter {
            text: "blur".into(),
            ..RunFilter::default()
        }));
        assert!(!keeps(RunFilter {
            status: StatusFilter::Stopped,
            ..RunFilter::default()
        }));
        assert!(!keeps(RunFilter {
            preset: Some("other".into()),
            ..RunFilter::default()
        }));
        save_notes(&run, "").unwrap();
        assert!(!run.join(NOTES_FILE).exists());
    }
}
