//! Files sent with a job ([`InlineFile`]: an FWI preset's models and data, from a client whose files
//! this server cannot read). Rank 0 checks them against the preset before any rank sees the job;
//! every rank then writes them into a folder of the job's own, which the preset's relative paths
//! resolve in, and which is removed when the job ends however it ends.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fwi::FwiPreset;
use crate::protocol::InlineFile;

/// Checks that every sent file has a bare, unique name, that every relative path of the preset is
/// one of them, and that every file is named by the preset. Without files, relative paths are the
/// server's own (from its working directory), as before files could be sent.
pub fn check(files: &[InlineFile], preset: &mut FwiPreset) -> Result<()> {
    let mut names = HashSet::new();
    for f in files {
        let field = || format!("sent file `{}`", f.name);
        let bare = !f.name.is_empty()
            && f.name.len() <= 255
            && f.name != "."
            && f.name != ".."
            && !f.name.contains(['/', '\\', '\0']);
        if !bare {
            return Err(Error::config(
                field(),
                "must be a bare file name (no folders, not `.` or `..`)",
            ));
        }
        if !names.insert(f.name.as_str()) {
            return Err(Error::config(field(), "is sent twice"));
        }
    }
    if files.is_empty() {
        return Ok(());
    }
    let mut used = HashSet::new();
    for p in preset.paths_mut() {
        if p.is_absolute() {
            continue;
        }
        let name = p.to_string_lossy();
        match names.get(name.as_ref()) {
            Some(n) => {
                used.insert(*n);
            }
            None => {
                return Err(Error::config(
                    format!("file `{name}`"),
                    "the preset names it by a relative path but it was not sent with the job",
                ));
            }
        }
    }
    if let Some(extra) = names.difference(&used).next() {
        return Err(Error::config(
            format!("sent file `{extra}`"),
            "the preset does not name it",
        ));
    }
    Ok(())
}

/// A job's folder of sent files on this rank; removed on drop.
#[derive(Debug)]
pub struct JobFolder {
    dir: PathBuf,
}

impl JobFolder {
    /// Writes `files` into a new folder private to this process and job.
    pub fn write(files: &[InlineFile], job: u64) -> Result<JobFolder> {
        let dir =
            std::env::temp_dir().join(format!("tessera-serve-{}-job-{job}", std::process::id()));
        // A folder of the same name is left over from a process that had this pid: not ours.
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| Error::io("removing a stale job folder", &dir, e))?;
        }
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt as _;
            builder.mode(0o700);
        }
        builder
            .create(&dir)
            .map_err(|e| Error::io("creating the job's folder of sent files", &dir, e))?;
        // From here on the folder is removed whatever happens.
        let folder = JobFolder { dir };
        for f in files {
            let path = folder.dir.join(&f.name);
            std::fs::write(&path, &f.bytes)
                .map_err(|e| Error::io("writing a file sent with the job", &path, e))?;
        }
        Ok(folder)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for JobFolder {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(
                "could not remove the job's sent files in {}: {e}",
                self.dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fwi::config::{ArrayFile, ModelSource};

    fn preset_with(paths: &[&str]) -> FwiPreset {
        let (_, text) = crate::fwi::config::BUNDLED_FWI[0];
        let mut p = FwiPreset::from_toml(text, "t", &[]).unwrap();
        let file = |s: &str| ArrayFile {
            path: PathBuf::from(s),
            shape: None,
            transpose: false,
        };
        p.model.truth = Some(ModelSource::File(file(paths[0])));
        if let Some(d) = paths.get(1) {
            p.data = Some(file(d));
        }
        p
    }

    fn sent(name: &str) -> InlineFile {
        InlineFile {
            name: name.into(),
            bytes: vec![1, 2, 3],
        }
    }

    #[test]
    fn names_must_be_bare_unique_and_match_the_preset_both_ways() {
        let mut p = preset_with(&["0-true.npy", "1-data.segy"]);
        check(&[sent("0-true.npy"), sent("1-data.segy")], &mut p).unwrap();
        for bad in ["../x", "a/b", "", "..", "."] {
            let e = check(&[sent(bad)], &mut p).unwrap_err().to_string();
            assert!(e.contains("bare file name"), "{bad}: {e}");
        }
        let e = check(&[sent("0-true.npy"), sent("0-true.npy")], &mut p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");
        let e = check(&[sent("0-true.npy")], &mut p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1-data.segy") && e.contains("not sent"), "{e}");
        let e = check(
            &[sent("0-true.npy"), sent("1-data.segy"), sent("extra.npy")],
            &mut p,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("extra.npy") && e.contains("does not name"),
            "{e}"
        );
        // Absolute paths are the server's and need no file.
        let mut p = preset_with(&["/srv/models/true.npy"]);
        check(&[], &mut p).unwrap();
    }

    #[test]
    fn the_folder_holds_the_files_and_goes_away() {
        let dir;
        {
            let f = JobFolder::write(&[sent("0-a.npy"), sent("1-b.bin")], 987_654).unwrap();
            dir = f.path().to_path_buf();
            assert_eq!(std::fs::read(dir.join("1-b.bin")).unwrap(), [1, 2, 3]);
        }
        assert!(!dir.exists(), "{} is left behind", dir.display());
    }
}
