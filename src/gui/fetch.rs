//! Copies a finished run's files from a remote `tessera serve` into a folder on this machine, so
//! that the run appears in the history and can be reopened, compared and sliced like a local one.
//!
//! The files come one chunk per [`Request::Fetch`] (the server answers with [`Event::File`]) and
//! are written into a hidden staging folder beside the destination; `metrics.json` comes last and
//! the folder is renamed into place only when every file is complete, so a half-fetched run never
//! looks like a run (the history skips hidden folders). The UI thread drives it: each answer asks
//! for the next chunk.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::protocol::{Event, JobId, Request};

/// One run being fetched.
#[derive(Debug)]
pub struct RemoteFetch {
    job: JobId,
    /// Names still to fetch, in order (`metrics.json` last); the first is in progress.
    names: Vec<String>,
    offset: u64,
    file: Option<File>,
    staging: PathBuf,
    dest: PathBuf,
}

/// What one answer led to.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Ask the server for this next.
    Next(Request),
    /// Every file is here, in this folder.
    Done(PathBuf),
    /// The fetch stopped (the staging folder is removed); the message says why.
    Failed(String),
    /// Not an answer to this fetch.
    Ignored,
}

impl RemoteFetch {
    /// Starts fetching `outputs` (plain names in the server's `run_dir`) of `job` into
    /// `root/<run_dir's name>` (a suffix `-2`, `-3`, … when that folder exists already). Returns
    /// the fetch and its first request; None when there is nothing to fetch.
    pub fn start(
        job: JobId,
        run_dir: &Path,
        outputs: &[PathBuf],
        root: &Path,
    ) -> Result<Option<(RemoteFetch, Request)>, String> {
        // Every name is checked before the disk is touched (the same check as `tessera run
        // --attach --fetch`).
        let mut names =
            crate::protocol::client::output_names(outputs).map_err(|e| e.to_string())?;
        // metrics.json (train.json for a training run) marks a complete run: written last.
        names.sort_by_key(|n| n == crate::io::METRICS_FILE || n == crate::io::TRAIN_SUMMARY_FILE);
        if names.is_empty() {
            return Ok(None);
        }
        let base = run_dir
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| !n.starts_with('.'))
            .unwrap_or("run")
            .to_string();
        std::fs::create_dir_all(root)
            .map_err(|e| format!("creating {} for fetched runs: {e}", root.display()))?;
        let dest = (1..)
            .map(|i| match i {
                1 => root.join(&base),
                _ => root.join(format!("{base}-{i}")),
            })
            .find(|p| !p.exists())
            .expect("some free name");
        let staging = root.join(format!(
            ".{}.fetching",
            dest.file_name().unwrap().to_string_lossy()
        ));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir(&staging)
            .map_err(|e| format!("creating {}: {e}", staging.display()))?;
        let fetch = RemoteFetch {
            job,
            names,
            offset: 0,
            file: None,
            staging,
            dest,
        };
        let first = fetch.request();
        Ok(Some((fetch, first)))
    }

    pub fn job(&self) -> JobId {
        self.job
    }

    /// Where the run will be once complete.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    fn request(&self) -> Request {
        Request::Fetch {
            job: self.job,
            file: self.names[0].clone(),
            offset: self.offset,
        }
    }

    /// Takes one event; only `File`/`FetchFailed` for the file in progress concern it.
    pub fn on_event(&mut self, event: &Event) -> Step {
        match event {
            Event::File {
                job,
                file,
                offset,
                total,
                data,
            } if *job == self.job && *file == self.names[0] && *offset == self.offset => {
                match self.write(*total, data) {
                    Ok(step) => step,
                    Err(e) => self.fail(e),
                }
            }
            Event::FetchFailed { job, file, error }
                if *job == self.job && *file == self.names[0] =>
            {
                self.fail(format!("the server could not send {file}: {error}"))
            }
            _ => Step::Ignored,
        }
    }

    fn write(&mut self, total: u64, data: &[u8]) -> Result<Step, String> {
        let path = self.staging.join(&self.names[0]);
        if self.file.is_none() {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            self.file = Some(File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?);
        }
        let end = self.offset + data.len() as u64;
        if end > total || (data.is_empty() && end < total) {
            return Err(format!(
                "{}: the server sent bytes {}..{end} of a {total}-byte file",
                self.names[0], self.offset
            ));
        }
        let file = self.file.as_mut().expect("opened above");
        file.write_all(data)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        self.offset = end;
        if end < total {
            return Ok(Step::Next(self.request()));
        }
        self.file
            .take()
            .expect("opened above")
            .sync_all()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        self.names.remove(0);
        self.offset = 0;
        if !self.names.is_empty() {
            return Ok(Step::Next(self.request()));
        }
        std::fs::rename(&self.staging, &self.dest).map_err(|e| {
            format!(
                "moving {} to {}: {e}",
                self.staging.display(),
                self.dest.display()
            )
        })?;
        Ok(Step::Done(self.dest.clone()))
    }

    fn fail(&mut self, why: String) -> Step {
        self.file = None;
        let _ = std::fs::remove_dir_all(&self.staging);
        Step::Failed(why)
    }
}

impl Drop for RemoteFetch {
    /// A fetch abandoned half-way (backend gone, window closed) leaves no staging folder.
    fn drop(&mut self) {
        if self.staging.exists() {
            self.file = None;
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays the server: answers every request from `files` in chunks of `chunk` bytes.
    fn serve(
        fetch: &mut RemoteFetch,
        first: Request,
        files: &[(&str, Vec<u8>)],
        chunk: usize,
    ) -> Step {
        let mut next = first;
        loop {
            let Request::Fetch { job, file, offset } = next else {
                panic!("not a fetch: {next:?}")
            };
            let data = &files.iter().find(|(n, _)| *n == file).unwrap().1;
            let start = offset as usize;
            let end = (start + chunk).min(data.len());
            let step = fetch.on_event(&Event::File {
                job,
                file,
                offset,
                total: data.len() as u64,
                data: data[start..end].to_vec(),
            });
            match step {
                Step::Next(r) => next = r,
                other => return other,
            }
        }
    }

    #[test]
    fn files_arrive_in_chunks_and_the_folder_appears_complete() {
        let root = tempfile::tempdir().unwrap();
        let files = [
            ("metrics.json", b"{\"name\":\"quick\"}".to_vec()),
            (
                "reconstruction.npy",
                (0..2500u32).map(|i| i as u8).collect(),
            ),
            ("empty.txt", vec![]),
        ];
        let outputs: Vec<PathBuf> = files.iter().map(|(n, _)| n.into()).collect();
        let run_dir = Path::new("/srv/out/20261123-040000-quick-1");
        let (mut fetch, first) = RemoteFetch::start(7, run_dir, &outputs, root.path())
            .unwrap()
            .unwrap();
        // metrics.json is asked for last.
        assert!(matches!(&first, Request::Fetch { file, .. } if file == "reconstruction.npy"));
        let dest = root.path().join("20261123-040000-quick-1");
        assert!(!dest.exists(), "nothing in place before the end");
        assert_eq!(
            serve(&mut fetch, first, &files, 1000),
            Step::Done(dest.clone())
        );
        for (name, data) in &files {
            assert_eq!(&std::fs::read(dest.join(name)).unwrap(), data, "{name}");
        }
        assert_eq!(
            std::fs::read_dir(root.path()).unwrap().count(),
            1,
            "no staging left"
        );

        // The same run fetched again goes beside it, not over it.
        let (mut again, first) = RemoteFetch::start(7, run_dir, &outputs, root.path())
            .unwrap()
            .unwrap();
        let second = root.path().join("20261123-040000-quick-1-2");
        assert_eq!(serve(&mut again, first, &files, 4096), Step::Done(second));
    }

    #[test]
    fn a_training_runs_nested_outputs_land_in_their_folders_and_train_json_comes_last() {
        let root = tempfile::tempdir().unwrap();
        let outputs: Vec<PathBuf> = ["train.json", "reconstructions/source.png", "w.safetensors"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let files = [
            ("train.json", b"{}".to_vec()),
            ("reconstructions/source.png", vec![7u8; 10]),
            ("w.safetensors", vec![1u8; 5]),
        ];
        let (mut fetch, first) =
            RemoteFetch::start(3, Path::new("/srv/out/run-1"), &outputs, root.path())
                .unwrap()
                .unwrap();
        assert_eq!(fetch.names.last().map(String::as_str), Some("train.json"));
        let dest = root.path().join("run-1");
        assert_eq!(
            serve(&mut fetch, first, &files, 4),
            Step::Done(dest.clone())
        );
        assert_eq!(
            std::fs::read(dest.join("reconstructions/source.png")).unwrap(),
            vec![7u8; 10]
        );
        for bad in ["/etc/passwd", "reconstructions/../../x", ""] {
            assert!(
                RemoteFetch::start(3, Path::new("/srv/run"), &[bad.into()], root.path()).is_err(),
                "`{bad}` accepted"
            );
        }
    }

    #[test]
    fn a_failure_or_a_lying_server_leaves_nothing_behind() {
        let root = tempfile::tempdir().unwrap();
        let outputs = vec![PathBuf::from("a.npy"), PathBuf::from("metrics.json")];
        let (mut fetch, _) = RemoteFetch::start(1, Path::new("/x/run"), &outputs, root.path())
            .unwrap()
            .unwrap();
        assert_eq!(
            fetch.on_event(&Event::File {
                job: 2,
                file: "a.npy".into(),
                offset: 0,
                total: 3,
                data: vec![1, 2, 3],
            }),
            Step::Ignored,
            "another job's file"
        );
        let step = fetch.on_event(&Event::File {
            job: 1,
            file: "a.npy".into(),
            offset: 0,
            total: 2,
            data: vec![1, 2, 3],
        });
        assert!(
            matches!(&step, Step::Failed(m) if m.contains("2-byte file")),
            "{step:?}"
        );
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);

        let (mut fetch, _) = RemoteFetch::start(1, Path::new("/x/run"), &outputs, root.path())
            .unwrap()
            .unwrap();
        let step = fetch.on_event(&Event::FetchFailed {
            job: 1,
            file: "a.npy".into(),
            error: "job 1 is not known".into(),
        });
        assert!(
            matches!(&step, Step::Failed(m) if m.contains("not known")),
            "{step:?}"
        );
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);

        // Dropped half-way (the backend went away): no staging folder either.
        let (fetch, _) = RemoteFetch::start(1, Path::new("/x/run"), &outputs, root.path())
            .unwrap()
            .unwrap();
        drop(fetch);
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);

        let err = RemoteFetch::start(
            1,
            Path::new("/x/run"),
            &["../etc/passwd".into()],
            root.path(),
        )
        .unwrap_err();
        assert!(err.contains("../etc/passwd"), "{err}");
    }
}
