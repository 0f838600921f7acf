//! A run's output folder as one unit: files are written into a hidden staging folder next to the
//! destination and the folder is renamed into place when the run is complete, so a folder that
//! exists under its final name always holds a whole run (with its `metrics.json`), and two runs
//! never share a folder.
//!
//! Two ways to name the destination ([`RunDir`]): `Unique` (`<root>/<YYYYMMDD-HHMMSS>-<name>-<n>`, the
//! first free `n`, never reused — what `tessera serve` and `tessera run` without `--out` use) and
//! `Exact` (the folder the user named; it must not hold files unless `replace` is set, and then the
//! previous run is replaced only once the new one is complete).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Where a run's outputs go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunDir {
    /// A new folder `<root>/<YYYYMMDD-HHMMSS>-<name>-<n>` (local time of the run's start, the
    /// first `n` ≥ 1 that is free).
    Unique { root: PathBuf },
    /// Exactly `path`. It must not exist or be empty, unless `replace`: then a previous run there
    /// is replaced when this one completes (never before, so a failed run loses nothing).
    Exact { path: PathBuf, replace: bool },
}

impl From<&Path> for RunDir {
    fn from(path: &Path) -> RunDir {
        RunDir::Exact {
            path: path.to_path_buf(),
            replace: false,
        }
    }
}

impl RunDir {
    /// Fails early (before any computing) when the destination cannot take this run: an `Exact`
    /// folder that already holds files without `replace`, or a path that is a file.
    pub fn check(&self) -> Result<()> {
        match self {
            RunDir::Unique { root } => {
                if root.exists() && !root.is_dir() {
                    return Err(Error::format(root, "the output root is not a folder"));
                }
                Ok(())
            }
            RunDir::Exact { path, replace } => {
                if !path.exists() {
                    return Ok(());
                }
                if !path.is_dir() {
                    return Err(Error::format(path, "the output folder is a file"));
                }
                check_same_file_system(path)?;
                let has_files = std::fs::read_dir(path)
                    .map_err(|e| Error::io("reading output folder", path, e))?
                    .next()
                    .is_some();
                if has_files && !replace {
                    return Err(Error::config(
                        "--out",
                        format!(
                            "the output folder already holds files (a previous run?); choose \
                             another folder, or pass --replace to replace them once this run \
                             completes: {}",
                            path.display()
                        ),
                    ));
                }
                if has_files {
                    check_is_run(path, None)?;
                }
                Ok(())
            }
        }
    }

    /// The folder that staging folders are made in (on the destination's file system).
    fn parent(&self) -> PathBuf {
        match self {
            RunDir::Unique { root } => root.clone(),
            RunDir::Exact { path, .. } => match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            },
        }
    }
}

/// The start of every staging folder's name: `<STAGING_PREFIX><host>-<pid of the writing
/// process>-<n>` ([`staging_prefix`] adds the host).
pub const STAGING_PREFIX: &str = ".tessera-partial-";

/// Removes the staging folders directly under `root` that a run of this machine left when it was
/// killed (its process is gone: a backend restarted from the workbench cannot drop its
/// [`Staging`], and no one else will ever commit the folder). Folders of other machines (a shared
/// file system) and of live processes are left alone; a failure to remove one is only logged.
/// Returns the folders removed.
pub fn remove_abandoned_staging(root: &Path) -> Vec<PathBuf> {
    let prefix = staging_prefix();
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<libc::pid_t>().ok()))
            .filter(|pid| *pid > 0)
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks whether the process exists; nothing is sent.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if !gone {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => removed.push(entry.path()),
            Err(e) => tracing::warn!(
                "could not remove an abandoned staging folder: {e}: {}",
                entry.path().display()
            ),
        }
    }
    removed
}

/// A run's folder while it is being written: hidden, removed if dropped before [`Staging::commit`].
#[derive(Debug)]
pub struct Staging {
    dest: RunDir,
    path: PathBuf,
    /// `YYYYMMDD-HHMMSS` of the run's start.
    stamp: String,
    committed: bool,
}

impl Staging {
    /// Checks the destination and creates the staging folder — which also proves the destination's
    /// file system is writable, before the run computes anything.
    pub fn create(dest: &RunDir) -> Result<Staging> {
        dest.check()?;
        let parent = dest.parent();
        std::fs::create_dir_all(&parent)
            .map_err(|e| Error::io("creating output folder", &parent, e))?;
        remove_abandoned_staging(&parent);
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = parent.join(format!("{}{}-{n}", staging_prefix(), std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => {
                    return Ok(Staging {
                        dest: dest.clone(),
                        path,
                        stamp: local_timestamp(),
                        committed: false,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(Error::io(
                        "creating a folder in the output folder (is it writable?)",
                        &parent,
                        e,
                    ));
                }
            }
        }
    }

    /// Where the run writes its files now.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the complete run into place and returns its final folder. `name` (the preset's name)
    /// goes into a unique folder's name.
    pub fn commit(mut self, name: &str) -> Result<PathBuf> {
        let dest = self.dest.clone();
        let final_path = match &dest {
            RunDir::Unique { root } => {
                let base = format!("{}-{}", self.stamp, file_name_safe(name));
                let mut n = 1u64;
                loop {
                    let candidate = root.join(format!("{base}-{n}"));
                    match rename_no_replace(&self.path, &candidate) {
                        Ok(()) => break candidate,
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
                        Err(e) => return Err(Error::io("moving the run into place", candidate, e)),
                    }
                }
            }
            RunDir::Exact { path, replace } => {
                // An empty folder (made by the user, or a temporary folder) is not a previous run.
                let _ = std::fs::remove_dir(path);
                match rename_no_replace(&self.path, path) {
                    Ok(()) => path.clone(),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && *replace => {
                        // Checked again: files may have been put there while the run computed.
                        if !is_run(path) {
                            let kept = self.keep();
                            check_is_run(path, Some(&kept))?;
                        }
                        replace_dir(&self.path, path)?;
                        path.clone()
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        return Err(Error::config(
                            "--out",
                            format!(
                                "another run wrote into the output folder meanwhile; this run is \
                                 left in {}: {}",
                                self.keep().display(),
                                path.display()
                            ),
                        ));
                    }
                    Err(e) => return Err(Error::io("moving the run into place", path, e)),
                }
            }
        };
        self.committed = true;
        Ok(final_path)
    }

    /// Keeps the staging folder (it is not removed on drop) and returns its path.
    fn keep(&mut self) -> PathBuf {
        self.committed = true;
        self.path.clone()
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// `.tessera-partial-<host>-`: the start of this machine's staging folders' names (the process id
/// and a counter follow), so an abandoned one is known by its host and process.
fn staging_prefix() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let host = match unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } {
        0 => {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            file_name_safe(&String::from_utf8_lossy(&buf[..end]))
        }
        _ => "host".into(),
    };
    format!("{STAGING_PREFIX}{host}-")
}

/// A run folder is moved into place by `rename(2)`, which cannot cross file systems: an existing
/// output folder on another one than its parent (an empty mount point) is refused now, before the
/// run, rather than after it.
fn check_same_file_system(path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev());
    match (dev(path), dev(parent)) {
        (Ok(a), Ok(b)) if a != b => Err(Error::config(
            "--out",
            format!(
                "the output folder is a mount point (another file system than its parent), and a \
                 run is moved into its folder by a rename, which cannot cross file systems: give a \
                 folder inside it: {}",
                path.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// The files that mark a folder as a whole tessera run, one of them written last by every kind of
/// run (`metrics.json`: imaging and FWI; `train.json`: training).
const RUN_MARKERS: [&str; 2] = [super::METRICS_FILE, super::TRAIN_SUMMARY_FILE];

/// Whether `dir` holds a tessera run: one of [`RUN_MARKERS`] as a regular file holding a JSON
/// object (its first byte past white space is `{`).
pub fn is_run(dir: &Path) -> bool {
    use std::io::Read;
    RUN_MARKERS.iter().any(|m| {
        let path = dir.join(m);
        let regular = std::fs::symlink_metadata(&path).is_ok_and(|md| md.file_type().is_file());
        let mut head = [0u8; 64];
        regular
            && std::fs::File::open(&path)
                .and_then(|mut f| f.read(&mut head))
                .is_ok_and(|n| head[..n].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'))
    })
}

/// `--replace` removes only a previous run: a folder of anything else (notes, a thesis) is refused,
/// naming some of what it holds (and where the finished run was `kept`, when it was).
fn check_is_run(dir: &Path, kept: Option<&Path>) -> Result<()> {
    if is_run(dir) {
        return Ok(());
    }
    const SHOWN: usize = 5;
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::io("reading output folder", dir, e))?
        .filter_map(|e| e.ok())
        .map(|e| {
            let slash = if e.file_type().is_ok_and(|t| t.is_dir()) {
                "/"
            } else {
                ""
            };
            format!("{}{slash}", e.file_name().to_string_lossy())
        })
        .collect();
    names.sort();
    let more = names.len().saturating_sub(SHOWN);
    names.truncate(SHOWN);
    let mut listing = names.join(", ");
    if more > 0 {
        listing.push_str(&format!(" and {more} more"));
    }
    Err(Error::config(
        "--replace",
        format!(
            "the output folder is not a tessera run (it has no {}) and --replace replaces only a \
             previous run; it holds {listing}: choose another folder, or move those files away \
             yourself{}: {}",
            RUN_MARKERS.join(" or "),
            kept.map(|k| format!(" (this run is left in {})", k.display()))
                .unwrap_or_default(),
            dir.display()
        ),
    ))
}

/// Replaces the folder `dest` by `src`: the old folder is first moved aside under a hidden name
/// (so at every moment one complete run is in place or being moved), then removed.
fn replace_dir(src: &Path, dest: &Path) -> Result<()> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    let aside = parent.join(format!(
        ".tessera-replaced-{}-{}",
        std::process::id(),
        local_timestamp()
    ));
    std::fs::rename(dest, &aside)
        .map_err(|e| Error::io("moving the previous run aside", dest, e))?;
    if let Err(e) = std::fs::rename(src, dest) {
        let _ = std::fs::rename(&aside, dest);
        return Err(Error::io("moving the run into place", dest, e));
    }
    std::fs::remove_dir_all(&aside).map_err(|e| Error::io("removing the previous run", aside, e))
}

/// `rename(2)` that fails with `AlreadyExists` instead of replacing an existing (empty) folder.
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))
    };
    let (cf, ct) = (c(from)?, c(to)?);
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them like rename(2).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cf.as_ptr(),
            libc::AT_FDCWD,
            ct.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        // File systems without RENAME_NOREPLACE: check, then rename (a narrow race remains).
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            if to.exists() {
                return Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists));
            }
            std::fs::rename(from, to)
        }
        // rename onto a non-empty folder reports ENOTEMPTY on some file systems.
        Some(libc::ENOTEMPTY) => Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists)),
        _ => Err(e),
    }
}

/// A name with only letters, digits, `-`, `_` and `.` (others become `_`), for folder names.
pub(super) fn file_name_safe(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match s.trim_start_matches('.') {
        "" => "run".into(),
        t => t.chars().take(64).collect(),
    }
}

/// The local time now as `YYYYMMDD-HHMMSS`.
pub fn local_timestamp() -> String {
    // SAFETY: time(NULL) has no preconditions; localtime_r writes only into `tm`.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return format!("t{t}");
        }
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn staging_folders_of_dead_processes_are_removed_and_live_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let dest = RunDir::Unique {
            root: root.path().to_path_buf(),
        };
        let live = Staging::create(&dest).unwrap();
        // A process that has exited (and been reaped): its pid names no process now.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        let dead = root
            .path()
            .join(format!("{}{dead_pid}-0", staging_prefix()));
        std::fs::create_dir(&dead).unwrap();
        write(&dead, "reconstruction.npy", "half a run");
        let run = root.path().join("20250101-120000-quick-1");
        std::fs::create_dir(&run).unwrap();

        assert_eq!(remove_abandoned_staging(root.path()), vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(live.path().is_dir() && run.is_dir());
        assert!(remove_abandoned_staging(&root.path().join("missing")).is_empty());
    }

    #[test]
    fn unique_folders_are_never_reused() {
        let root = tempfile::tempdir().unwrap();
        let dest = RunDir::Unique {
            root: root.path().join("runs"),
        };
        let a = Staging::create(&dest).unwrap();
        let b = Staging::create(&dest).unwrap();
        write(a.path(), "metrics.json", "a");
        write(b.path(), "metrics.json", "b");
        // Staged folders are hidden until complete.
        assert!(
            a.path()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with('.')
        );
        let (pa, pb) = (a.commit("my run/1").unwrap(), b.commit("my run/1").unwrap());
        assert_ne!(pa, pb);
        let name = pa.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.ends_with("-my_run_1-1"), "{name}");
        assert_eq!(name.len(), "YYYYMMDD-HHMMSS".len() + "-my_run_1-1".len());
        assert!(pb.to_string_lossy().ends_with("-my_run_1-2") || pb != pa);
        assert_eq!(
            std::fs::read_to_string(pa.join("metrics.json")).unwrap(),
            "a"
        );
        assert_eq!(
            std::fs::read_to_string(pb.join("metrics.json")).unwrap(),
            "b"
        );
        let entries = std::fs::read_dir(root.path().join("runs")).unwrap().count();
        assert_eq!(entries, 2, "no staging folder is left behind");
    }

    #[test]
    fn an_abandoned_run_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let dest = RunDir::Exact {
            path: root.path().join("out"),
            replace: false,
        };
        let s = Staging::create(&dest).unwrap();
        write(s.path(), "reconstruction.npy", "half");
        drop(s);
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_exact_folder_with_files_is_refused_unless_replaced_after_success() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        std::fs::create_dir(&out).unwrap();
        // An empty folder is fine.
        let s = Staging::create(&RunDir::from(out.as_path())).unwrap();
        write(s.path(), "metrics.json", "{\"run\": 1}");
        assert_eq!(s.commit("x").unwrap(), out);
        // A folder with a previous run is refused before anything is computed …
        let err = Staging::create(&RunDir::from(out.as_path())).unwrap_err();
        assert!(err.to_string().contains("--replace"), "{err}");
        // … and with `replace`, the previous run stays until the new one is complete.
        let replace = RunDir::Exact {
            path: out.clone(),
            replace: true,
        };
        let failed = Staging::create(&replace).unwrap();
        drop(failed);
        assert_eq!(
            std::fs::read_to_string(out.join("metrics.json")).unwrap(),
            "{\"run\": 1}"
        );
        let s = Staging::create(&replace).unwrap();
        write(s.path(), "metrics.json", "{\"run\": 2}");
        s.commit("x").unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("metrics.json")).unwrap(),
            "{\"run\": 2}"
        );
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1);
    }

    #[test]
    fn replace_refuses_a_folder_that_is_not_a_run_and_names_what_is_there() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("mydir");
        std::fs::create_dir_all(out.join("sub")).unwrap();
        write(&out, "notes.txt", "mine");
        write(&out.join("sub"), "thesis.tex", "mine too");
        let replace = RunDir::Exact {
            path: out.clone(),
            replace: true,
        };
        let err = Staging::create(&replace).unwrap_err().to_string();
        assert!(
            err.contains("not a tessera run") && err.contains("notes.txt, sub/"),
            "{err}"
        );
        // A folder that became a non-run while the run computed is refused at the end too, and
        // the finished run is kept.
        std::fs::remove_file(out.join("notes.txt")).unwrap();
        write(&out, "metrics.json", "{}");
        let s = Staging::create(&replace).unwrap();
        write(s.path(), "metrics.json", "{\"new\": 1}");
        std::fs::remove_file(out.join("metrics.json")).unwrap();
        let staging = s.path().to_path_buf();
        let err = s.commit("x").unwrap_err().to_string();
        assert!(
            err.contains("not a tessera run") && err.contains("this run is left in"),
            "{err}"
        );
        assert!(staging.join("metrics.json").exists());
        assert_eq!(
            std::fs::read_to_string(out.join("sub/thesis.tex")).unwrap(),
            "mine too"
        );
        // A marker that is not a JSON object, or a link to one, does not make a run either.
        write(&out, "metrics.json", "not json");
        assert!(!is_run(&out));
        std::fs::remove_file(out.join("metrics.json")).unwrap();
        write(root.path(), "elsewhere.json", "{}");
        std::os::unix::fs::symlink(root.path().join("elsewhere.json"), out.join("train.json"))
            .unwrap();
        assert!(!is_run(&out));
    }

    #[test]
    fn a_read_only_destination_fails_before_the_run() {
        if unsafe { libc::geteuid() } == 0 {
            // root writes into read-only folders; the permission check cannot be observed.
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let ro = root.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        let err = Staging::create(&RunDir::Unique { root: ro.clone() }).unwrap_err();
        assert!(err.to_string().contains("writable"), "{err}");
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn staging_folders_of_killed_runs_are_removed_and_live_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let prefix = staging_prefix();
        let abandoned = root.path().join(format!("{prefix}{dead}-3"));
        let live = root
            .path()
            .join(format!("{prefix}{}-999", std::process::id()));
        let foreign = root
            .path()
            .join(format!(".tessera-partial-elsewhere-{dead}-3"));
        for d in [&abandoned, &live, &foreign] {
            std::fs::create_dir(d).unwrap();
            write(d, "reconstruction.npy", "half");
        }
        let s = Staging::create(&RunDir::Unique {
            root: root.path().to_path_buf(),
        })
        .unwrap();
        assert!(!abandoned.exists(), "a killed run's folder stays");
        assert!(live.exists() && foreign.exists());
        drop(s);
    }

    #[test]
    fn a_mount_point_as_the_output_folder_is_refused_before_the_run() {
        // /proc is a mount point on every Linux system; nothing is written to it.
        let err = RunDir::Exact {
            path: PathBuf::from("/proc"),
            replace: false,
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(err.contains("mount point"), "{err}");
    }
}
