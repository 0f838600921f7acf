//! Measurement files picked in the Physics panel (`[measurements] paths`), read on helper threads:
//! the Measurement pane shows them before a run, and an attached remote backend (which cannot read
//! this machine's files) receives them inline with the job. The UI thread never reads a file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};

use crate::tensor::Tensor;

/// One file's state.
#[derive(Debug, Clone)]
pub enum Measured {
    /// Being read by the load with this generation (a newer read of the same path replaces it).
    Loading(u64),
    Ready(Arc<Tensor>),
    Failed(String),
}

/// The files read so far, by path.
pub struct MeasurementFiles {
    files: HashMap<PathBuf, Measured>,
    next_generation: u64,
    tx: Sender<(PathBuf, u64, Result<Tensor, String>)>,
    rx: Receiver<(PathBuf, u64, Result<Tensor, String>)>,
}

impl Default for MeasurementFiles {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel();
        MeasurementFiles {
            files: HashMap::new(),
            next_generation: 0,
            tx,
            rx,
        }
    }
}

impl MeasurementFiles {
    /// Reads `path` on a helper thread (again if `reread`: the user picked it anew and the file may
    /// have changed); `wake` is called when it is done.
    pub fn request(&mut self, path: &Path, reread: bool, wake: impl Fn() + Send + 'static) {
        if path.as_os_str().is_empty() || (!reread && self.files.contains_key(path)) {
            return;
        }
        self.next_generation += 1;
        let generation = self.next_generation;
        self.files
            .insert(path.to_path_buf(), Measured::Loading(generation));
        let tx = self.tx.clone();
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("gui-measurement".into())
            .spawn(move || {
                let r = crate::io::read_array(&path)
                    .and_then(|t| {
                        t.check_finite(&path.display().to_string())?;
                        Ok(t)
                    })
                    .map_err(|e| e.to_string());
                let _ = tx.send((path, generation, r));
                wake();
            })
            .expect("spawning a thread");
    }

    /// Takes finished reads; returns the paths that became ready.
    pub fn poll(&mut self) -> Vec<PathBuf> {
        let mut ready = Vec::new();
        while let Ok((path, generation, r)) = self.rx.try_recv() {
            if !matches!(self.files.get(&path), Some(Measured::Loading(g)) if *g == generation) {
                continue;
            }
            let state = match r {
                Ok(t) => {
                    ready.push(path.clone());
                    Measured::Ready(Arc::new(t))
                }
                Err(e) => Measured::Failed(e),
            };
            self.files.insert(path, state);
        }
        ready
    }

    pub fn get(&self, path: &Path) -> Option<&Measured> {
        self.files.get(path)
    }

    /// Whether any file is still being read.
    pub fn loading(&self) -> bool {
        self.files
            .values()
            .any(|m| matches!(m, Measured::Loading(_)))
    }

    /// One line for the Physics panel: the file's name and shape, or why it is not usable.
    pub fn describe(&self, path: &Path) -> String {
        if path.as_os_str().is_empty() {
            return "no file chosen".into();
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        match self.files.get(path) {
            None | Some(Measured::Loading(_)) => format!("{name} (reading…)"),
            Some(Measured::Ready(t)) => format!("{name} {:?}", t.shape()),
            Some(Measured::Failed(e)) => format!("{name}: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn wait(files: &mut MeasurementFiles) -> Vec<PathBuf> {
        let start = Instant::now();
        let mut ready = Vec::new();
        while files.loading() {
            assert!(start.elapsed() < Duration::from_secs(20));
            ready.extend(files.poll());
            std::thread::sleep(Duration::from_millis(2));
        }
        ready
    }

    #[test]
    fn files_are_read_off_thread_and_errors_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("y.npy");
        crate::io::write_npy(&good, &Tensor::zeros(&[1, 2, 3, 4])).unwrap();
        let bad = dir.path().join("bad.npy");
        std::fs::write(&bad, b"not an array").unwrap();
        let mut files = MeasurementFiles::default();
        files.request(&good, false, || {});
        files.request(&bad, false, || {});
        assert_eq!(wait(&mut files), vec![good.clone()]);
        assert_eq!(files.describe(&good), "y.npy [1, 2, 3, 4]");
        assert!(
            files.describe(&bad).starts_with("bad.npy: "),
            "{}",
            files.describe(&bad)
        );
        assert_eq!(files.describe(Path::new("")), "no file chosen");

        // A file picked again is read again (it may have changed on disk).
        crate::io::write_npy(&good, &Tensor::zeros(&[1, 1, 5, 5])).unwrap();
        files.request(&good, false, || {});
        assert!(!files.loading(), "not re-read unless asked");
        files.request(&good, true, || {});
        assert_eq!(wait(&mut files), vec![good.clone()]);
        assert_eq!(files.describe(&good), "y.npy [1, 1, 5, 5]");
    }
}
