//! An elastic run's checkpoint: the resolved preset, where the outputs go and the replicated state
//! after a completed iteration (epoch), in one file that `tessera run --resume DIR` continues from.
//!
//! The file is a fixed header — [`MAGIC`], [`FORMAT_VERSION`], the body's length and its FNV-1a
//! hash — and a postcard body ([`Checkpoint`]), so a truncated, corrupted or foreign file is told
//! apart from a checkpoint before anything in it is trusted, and the error names the file. It is
//! written through [`super::write_atomic`] (temporary file, then rename), so the folder always holds
//! the last whole checkpoint; [`remove`] touches nothing but this module's own file.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::RunDir;
use crate::error::{Error, Result};

/// The checkpoint's file in its folder.
pub const CHECKPOINT_FILE: &str = "checkpoint.tessera";
/// The first bytes of every checkpoint file.
pub const MAGIC: &[u8; 8] = b"TSRCKPT\n";
/// Bumped whenever [`Checkpoint`] or a state stored in it changes its encoding.
pub const FORMAT_VERSION: u32 = 2;
/// Magic, version, body length, body hash.
const HEADER_BYTES: usize = 8 + 4 + 8 + 8;

/// What kind of run a checkpoint continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunKind {
    /// An imaging preset (PnP, CG, FBP).
    Imaging,
    /// A full-waveform inversion preset.
    Inversion,
}

/// Where a checkpointed run's outputs go (the [`RunDir`] the run was started with, its paths made
/// absolute so that a resume from another working folder writes to the same place).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Destination {
    Unique { root: PathBuf },
    Exact { path: PathBuf, replace: bool },
}

impl Destination {
    pub fn of(dir: &RunDir) -> Result<Destination> {
        let absolute = |p: &Path| std::path::absolute(p).map_err(|e| Error::io("resolving", p, e));
        Ok(match dir {
            RunDir::Unique { root } => Destination::Unique {
                root: absolute(root)?,
            },
            RunDir::Exact { path, replace } => Destination::Exact {
                path: absolute(path)?,
                replace: *replace,
            },
        })
    }

    pub fn run_dir(&self) -> RunDir {
        match self {
            Destination::Unique { root } => RunDir::Unique { root: root.clone() },
            Destination::Exact { path, replace } => RunDir::Exact {
                path: path.clone(),
                replace: *replace,
            },
        }
    }
}

/// The fields every checkpoint starts with, read before its state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Head {
    /// The tessera version that wrote it: another version may compute other bytes.
    pub tessera_version: String,
    pub kind: RunKind,
    /// The resolved preset (`to_toml`), the run's whole experiment.
    pub preset_toml: String,
    /// [`preset_hash`] of `preset_toml`, to compare with a preset named on the command line.
    pub preset_hash: u64,
    pub destination: Destination,
    /// The folder the preset's relative paths resolve against, absolute: an inversion preset's
    /// own folder, so that a resume from another working folder reads the same files (`None`
    /// for an imaging preset, whose paths are made absolute when it is loaded).
    pub preset_dir: Option<PathBuf>,
    /// The iterations (epochs) completed; the state is the one after the last of them.
    pub completed: usize,
}

impl Head {
    /// The head of this tessera version for a run of `preset_toml` writing into `out`.
    fn new(
        kind: RunKind,
        preset_toml: String,
        out: &RunDir,
        preset_dir: Option<PathBuf>,
        completed: usize,
    ) -> Result<Head> {
        Ok(Head {
            tessera_version: env!("CARGO_PKG_VERSION").into(),
            kind,
            preset_hash: preset_hash(&preset_toml),
            preset_toml,
            destination: Destination::of(out)?,
            preset_dir,
            completed,
        })
    }
}

/// A run continued from a checkpoint (`tessera run --resume DIR`), as its `metrics.json` records
/// it under `resumed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resumed {
    /// The checkpoint's file, absolute.
    pub checkpoint: PathBuf,
    /// What the run counts in: "iteration" (imaging) or "epoch" (inversion).
    pub unit: String,
    /// The iterations (epochs) the checkpoint held, which the resumed run did not compute again
    /// (0 when the algorithm starts over: CG, FBP).
    pub after: usize,
}

/// A whole checkpoint: [`Head`] and the run's replicated state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint<S> {
    pub head: Head,
    pub state: S,
}

/// FNV-1a (64 bit) of `bytes`: the body's hash in the header and a preset's hash.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The hash a checkpoint records of its resolved preset.
pub fn preset_hash(preset_toml: &str) -> u64 {
    fnv1a(preset_toml.as_bytes())
}

/// The bytes of `checkpoint` as a file.
pub fn encode<S: Serialize>(checkpoint: &Checkpoint<S>) -> Result<Vec<u8>> {
    let body = postcard::to_allocvec(checkpoint)
        .map_err(|e| Error::Internal(format!("encoding a checkpoint: {e}")))?;
    let mut bytes = Vec::with_capacity(HEADER_BYTES + body.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&fnv1a(&body).to_le_bytes());
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// The body of a checkpoint file read from `path`, checked against its header.
fn body<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a [u8]> {
    let bad = |reason: String| Error::format(path, format!("not a usable checkpoint: {reason}"));
    if bytes.len() < HEADER_BYTES || &bytes[..8] != MAGIC {
        return Err(bad(
            "it does not start with a tessera checkpoint header".into()
        ));
    }
    let word = |at: usize, n: usize| -> u64 {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&bytes[at..at + n]);
        u64::from_le_bytes(b)
    };
    let version = word(8, 4);
    if version != u64::from(FORMAT_VERSION) {
        return Err(bad(format!(
            "format version {version}, this tessera reads version {FORMAT_VERSION}"
        )));
    }
    let (len, hash) = (word(12, 8), word(20, 8));
    let body = &bytes[HEADER_BYTES..];
    if body.len() as u64 != len {
        return Err(bad(format!(
            "{} bytes after the header where it says {len} (truncated?)",
            body.len()
        )));
    }
    if fnv1a(body) != hash {
        return Err(bad("its content does not match its hash (corrupted)".into()));
    }
    Ok(body)
}

/// Decodes a checkpoint of `kind` read from `path`: a clear error naming the file for anything
/// that is not one, was written by another tessera version or continues another kind of run.
pub fn decode<S: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    kind: RunKind,
) -> Result<Checkpoint<S>> {
    let head = decode_head(path, bytes)?;
    if head.kind != kind {
        return Err(Error::format(
            path,
            format!(
                "this checkpoint continues a run of another kind ({:?}, not {kind:?})",
                head.kind
            ),
        ));
    }
    postcard::from_bytes(body(path, bytes)?)
        .map_err(|e| Error::format(path, format!("not a usable checkpoint: its state: {e}")))
}

/// The [`Head`] of the checkpoint read from `path` (its state is not decoded), after checking the
/// header and the tessera version.
pub fn decode_head(path: &Path, bytes: &[u8]) -> Result<Head> {
    let (head, _): (Head, _) = postcard::take_from_bytes(body(path, bytes)?)
        .map_err(|e| Error::format(path, format!("not a usable checkpoint: {e}")))?;
    let ours = env!("CARGO_PKG_VERSION");
    if head.tessera_version != ours {
        return Err(Error::format(
            path,
            format!(
                "written by tessera {}, this is {ours}: another version may compute other \
                 numbers, so it does not continue the run",
                head.tessera_version
            ),
        ));
    }
    if preset_hash(&head.preset_toml) != head.preset_hash {
        return Err(Error::format(
            path,
            "the preset in the checkpoint does not match its recorded hash",
        ));
    }
    Ok(head)
}

/// The state a run's rank 0 hands a replacement that joins its group (`--respawn`): the checkpoint
/// of `completed` iterations (epochs) as a checkpoint file holds it, so that the group has one
/// encoding of its state, not written to disk.
pub fn encode_handover<S: Serialize>(
    kind: RunKind,
    preset_toml: String,
    out: &RunDir,
    completed: usize,
    state: S,
) -> Result<Vec<u8>> {
    encode(&Checkpoint {
        head: Head::new(kind, preset_toml, out, None, completed)?,
        state,
    })
}

/// Decodes the state rank `from` handed over ([`encode_handover`]) as a peer's bytes: anything that
/// is not a checkpoint of `kind`, of this tessera, of the preset `preset_toml` is
/// [`Error::BadPeerData`] naming the sender, never a panic.
pub fn decode_handover<S: DeserializeOwned>(
    from: usize,
    bytes: &[u8],
    kind: RunKind,
    preset_toml: &str,
) -> Result<Checkpoint<S>> {
    let what = "the run's state it handed over";
    let found: Checkpoint<S> = decode(Path::new(what), bytes, kind).map_err(|e| match e {
        Error::Format { reason, .. } => Error::bad_peer_data(from, format!("{what}: {reason}")),
        other => other,
    })?;
    if found.head.preset_hash != preset_hash(preset_toml) {
        return Err(Error::bad_peer_data(
            from,
            format!(
                "{what} is of another experiment (preset hash {:016x}, this rank's {:016x})",
                found.head.preset_hash,
                preset_hash(preset_toml)
            ),
        ));
    }
    Ok(found)
}

/// Reads the checkpoint in folder `dir`.
pub fn read<S: DeserializeOwned>(dir: &Path, kind: RunKind) -> Result<Checkpoint<S>> {
    let path = dir.join(CHECKPOINT_FILE);
    let bytes = std::fs::read(&path).map_err(|e| Error::io("reading checkpoint", &path, e))?;
    decode(&path, &bytes, kind)
}

/// Reads the head of the checkpoint in folder `dir`.
pub fn read_head(dir: &Path) -> Result<Head> {
    let path = dir.join(CHECKPOINT_FILE);
    let bytes = std::fs::read(&path).map_err(|e| Error::io("reading checkpoint", &path, e))?;
    decode_head(&path, &bytes)
}

/// Writes `checkpoint` into folder `dir` (made if missing), replacing the previous one atomically;
/// returns the file's size in bytes.
pub fn write<S: Serialize>(dir: &Path, checkpoint: &Checkpoint<S>) -> Result<u64> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating checkpoint folder", dir, e))?;
    let bytes = encode(checkpoint)?;
    super::write_atomic(&dir.join(CHECKPOINT_FILE), &bytes)?;
    Ok(bytes.len() as u64)
}

/// Removes the checkpoint of a completed run: its file, then the folder if nothing else is in it
/// (a user's file there stays, and so does the folder).
pub fn remove(dir: &Path) -> Result<()> {
    let path = dir.join(CHECKPOINT_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("removing checkpoint", &path, e)),
    }
    // A writer killed between its temporary file and the rename (`write_atomic`) leaves that
    // file: it is this module's too (never the checkpoint, which the rename alone replaces).
    let temporary = format!(".{CHECKPOINT_FILE}.tmp-");
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&temporary) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
    Ok(())
}

impl RunKind {
    /// What the run's progress is counted in.
    pub fn unit(self) -> &'static str {
        match self {
            RunKind::Imaging => "iteration",
            RunKind::Inversion => "epoch",
        }
    }
}

/// Where a run keeps its checkpoint: elastic runs, and runs resumed from one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoints {
    /// The checkpoint's folder (`tessera run --resume DIR`).
    pub dir: PathBuf,
    /// Iterations (epochs) between checkpoints.
    pub every: usize,
    /// Continue from the checkpoint in `dir`; else start over and write the first one there.
    pub resume: bool,
}

/// Writes one run's checkpoints (the group's rank 0, and a survivor when the group stops).
#[derive(Debug)]
pub struct Writer {
    pub plan: Checkpoints,
    head: Head,
}

impl Writer {
    /// The writer of checkpoints of a run of `kind` of the resolved preset `preset_toml` (its
    /// relative paths against `preset_dir`) whose outputs go to `out`.
    pub fn new(
        plan: Checkpoints,
        kind: RunKind,
        preset_toml: String,
        preset_dir: Option<&Path>,
        out: &RunDir,
    ) -> Result<Writer> {
        let preset_dir = preset_dir
            .map(|d| {
                // An empty folder is the working folder (a preset found there by name).
                let d = match d.as_os_str().is_empty() {
                    true => Path::new("."),
                    false => d,
                };
                std::path::absolute(d).map_err(|e| Error::io("finding the preset's folder", d, e))
            })
            .transpose()?;
        Ok(Writer {
            plan,
            head: Head::new(kind, preset_toml, out, preset_dir, 0)?,
        })
    }

    /// The record of a run resumed from this writer's checkpoint after `after` iterations (epochs).
    pub fn resumed_record(&self, after: usize) -> Resumed {
        let path = self.path();
        Resumed {
            checkpoint: std::path::absolute(&path).unwrap_or(path),
            unit: self.head.kind.unit().into(),
            after,
        }
    }

    /// The checkpoint's file.
    pub fn path(&self) -> PathBuf {
        self.plan.dir.join(CHECKPOINT_FILE)
    }

    /// Reads the checkpoint to resume from: one of this run's kind and preset, whose state
    /// `usable` accepts (it returns why not); every error names the file.
    pub fn resumed<S: DeserializeOwned>(
        &self,
        usable: impl FnOnce(&Checkpoint<S>) -> std::result::Result<(), String>,
    ) -> Result<Checkpoint<S>> {
        let path = self.path();
        let found: Checkpoint<S> = read(&self.plan.dir, self.head.kind)?;
        if found.head.preset_hash != self.head.preset_hash {
            return Err(Error::format(
                &path,
                format!(
                    "this checkpoint continues another experiment than the preset given \
                     (preset hash {:016x}, given {:016x})",
                    found.head.preset_hash, self.head.preset_hash
                ),
            ));
        }
        usable(&found)
            .map_err(|why| Error::format(&path, format!("not a usable checkpoint: {why}")))?;
        let unit = self.head.kind.unit();
        tracing::warn!(
            "resuming after {unit} {} from the checkpoint {}: the {unit}s the stopped run \
             completed after it (at most {} with checkpoints every {}, more when it was not \
             elastic) are done again",
            found.head.completed,
            path.display(),
            self.plan.every.saturating_sub(1),
            self.plan.every
        );
        Ok(found)
    }

    /// Whether a checkpoint is due after `completed` of `total` iterations (none after the last:
    /// the outputs follow at once).
    pub fn due(&self, completed: usize, total: usize) -> bool {
        completed.is_multiple_of(self.plan.every) && completed < total
    }

    /// Writes the checkpoint of `state` after `completed` iterations (epochs); logs its size and
    /// the time it took.
    pub fn write<S: Serialize>(&self, completed: usize, state: S) -> Result<()> {
        let t = std::time::Instant::now();
        let mut head = self.head.clone();
        head.completed = completed;
        let bytes = write(&self.plan.dir, &Checkpoint { head, state })?;
        tracing::info!(
            "checkpoint after {} {completed}: {bytes} bytes in {:.3} s: {}",
            self.head.kind.unit(),
            t.elapsed().as_secs_f64(),
            self.path().display()
        );
        Ok(())
    }

    /// The iterations (epochs) the checkpoint on disk holds (0: none, or unreadable).
    pub fn on_disk(&self) -> usize {
        read_head(&self.plan.dir).map_or(0, |h| h.completed)
    }

    /// Removes the checkpoint of the completed run ([`remove`]); a failure is only logged.
    pub fn finish(&self) {
        if let Err(e) = remove(&self.plan.dir) {
            tracing::warn!("the run is complete, but its checkpoint stays: {e}");
        }
    }
}

/// The checkpoint folder of a run that writes into `dest`: `<path>.checkpoint` beside an exact
/// folder, `<root>/<stamp>-<name>.checkpoint` among unique ones. It sits beside the run's folder,
/// not in it: that folder appears only when the run is complete.
pub fn folder_for(dest: &RunDir, name: &str, stamp: &str) -> PathBuf {
    match dest {
        RunDir::Exact { path, .. } => {
            let mut file = path.file_name().unwrap_or_default().to_os_string();
            file.push(".checkpoint");
            path.with_file_name(file)
        }
        RunDir::Unique { root } => root.join(format!(
            "{stamp}-{}.checkpoint",
            super::run_dir::file_name_safe(name)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Checkpoint<Vec<f32>> {
        let preset_toml = "name = \"quick\"\n".to_string();
        Checkpoint {
            head: Head {
                tessera_version: env!("CARGO_PKG_VERSION").into(),
                kind: RunKind::Imaging,
                preset_hash: preset_hash(&preset_toml),
                preset_toml,
                destination: Destination::Exact {
                    path: "/tmp/out".into(),
                    replace: false,
                },
                preset_dir: None,
                completed: 4,
            },
            state: vec![1.0, -2.5, 3.25],
        }
    }

    fn reason(e: Error) -> String {
        match e {
            Error::Format { path, reason } => {
                assert_eq!(path, Path::new("ck"));
                reason
            }
            other => panic!("expected a format error naming the file, got {other:?}"),
        }
    }

    #[test]
    fn a_checkpoint_round_trips_and_is_written_atomically_then_removed_alone() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("run.checkpoint");
        let size = write(&folder, &sample()).unwrap();
        assert_eq!(
            size,
            std::fs::metadata(folder.join(CHECKPOINT_FILE))
                .unwrap()
                .len()
        );
        let back: Checkpoint<Vec<f32>> = read(&folder, RunKind::Imaging).unwrap();
        assert_eq!(back, sample());
        // Only the checkpoint in the folder: no temporary file left beside it.
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 1);
        std::fs::write(folder.join("notes.txt"), "mine").unwrap();
        remove(&folder).unwrap();
        assert!(folder.join("notes.txt").exists());
        assert!(!folder.join(CHECKPOINT_FILE).exists());
    }

    #[test]
    fn a_writer_killed_before_its_rename_leaves_the_last_checkpoint_whole_and_removable() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("run.checkpoint");
        write(&folder, &sample()).unwrap();
        // What `write_atomic` had written of the next one when its process was killed.
        let torn = encode(&sample()).unwrap();
        let temporary = folder.join(format!(".{CHECKPOINT_FILE}.tmp-4242"));
        std::fs::write(&temporary, &torn[..torn.len() / 2]).unwrap();
        let back: Checkpoint<Vec<f32>> = read(&folder, RunKind::Imaging).unwrap();
        assert_eq!(back, sample());
        remove(&folder).unwrap();
        assert!(
            !folder.exists(),
            "the killed writer's file is removed with the checkpoint"
        );
    }

    #[test]
    fn another_version_kind_or_format_is_refused_by_name() {
        let mut old = sample();
        old.head.tessera_version = "0.0.1".into();
        let e = decode::<Vec<f32>>(Path::new("ck"), &encode(&old).unwrap(), RunKind::Imaging);
        assert!(reason(e.unwrap_err()).contains("written by tessera 0.0.1"));
        let bytes = encode(&sample()).unwrap();
        let e = decode::<Vec<f32>>(Path::new("ck"), &bytes, RunKind::Inversion);
        assert!(reason(e.unwrap_err()).contains("another kind"));
        let mut future = bytes.clone();
        future[8] = 9;
        let e = decode::<Vec<f32>>(Path::new("ck"), &future, RunKind::Imaging);
        assert!(reason(e.unwrap_err()).contains("format version 9"));
        let mut edited = bytes.clone();
        *edited.last_mut().unwrap() ^= 1;
        let e = decode::<Vec<f32>>(Path::new("ck"), &edited, RunKind::Imaging);
        assert!(reason(e.unwrap_err()).contains("corrupted"));
        let mut forged = sample();
        forged.head.preset_toml.push('#');
        let e = decode::<Vec<f32>>(Path::new("ck"), &encode(&forged).unwrap(), RunKind::Imaging);
        assert!(reason(e.unwrap_err()).contains("recorded hash"));
    }

    #[test]
    fn the_checkpoint_folder_sits_beside_the_run_folder() {
        let exact = RunDir::Exact {
            path: "runs/a".into(),
            replace: false,
        };
        assert_eq!(
            folder_for(&exact, "quick", "x"),
            PathBuf::from("runs/a.checkpoint")
        );
        let unique = RunDir::Unique {
            root: "out/quick".into(),
        };
        assert_eq!(
            folder_for(&unique, "quick", "20261127-223000"),
            PathBuf::from("out/quick/20261127-223000-quick.checkpoint")
        );
    }

    proptest! {
        /// Every truncation of a checkpoint, and any bytes at all, decode to an error naming the
        /// file: never a panic, never a checkpoint.
        #[test]
        fn truncated_or_random_bytes_are_an_error_never_a_panic(
            cut in 0usize..10_000,
            random in proptest::collection::vec(any::<u8>(), 0..300),
            with_header in any::<bool>(),
        ) {
            let bytes = encode(&sample()).unwrap();
            let cut = cut % bytes.len();
            let e = decode::<Vec<f32>>(Path::new("ck"), &bytes[..cut], RunKind::Imaging);
            prop_assert!(reason(e.unwrap_err()).contains("checkpoint"));
            // Random bytes, also behind a valid magic and version, with a matching length and hash
            // (so the body decoder itself sees them).
            let mut forged = Vec::new();
            if with_header {
                forged.extend_from_slice(MAGIC);
                forged.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
                forged.extend_from_slice(&(random.len() as u64).to_le_bytes());
                forged.extend_from_slice(&fnv1a(&random).to_le_bytes());
            }
            forged.extend_from_slice(&random);
            let e = decode::<Vec<f32>>(Path::new("ck"), &forged, RunKind::Imaging);
            let is_format = matches!(e, Err(Error::Format { .. }));
            prop_assert!(is_format, "{e:?}");
        }
    }

    #[test]
    fn a_handover_decodes_as_a_peer_s_bytes_and_hostile_ones_name_the_sender() {
        let out = RunDir::Exact {
            path: "o".into(),
            replace: false,
        };
        let preset = "name = \"quick\"\n";
        let bytes =
            encode_handover(RunKind::Imaging, preset.into(), &out, 3, vec![1.0f32, 2.0]).unwrap();
        let got: Checkpoint<Vec<f32>> =
            decode_handover(2, &bytes, RunKind::Imaging, preset).unwrap();
        assert_eq!((got.head.completed, got.state), (3, vec![1.0, 2.0]));
        let bad_peer = |r: Result<Checkpoint<Vec<f32>>>| match r {
            Err(Error::BadPeerData { rank: 2, what }) => what,
            other => panic!("not bad data from rank 2: {other:?}"),
        };
        let what = bad_peer(decode_handover(
            2,
            &bytes,
            RunKind::Imaging,
            "name = \"x\"\n",
        ));
        assert!(what.contains("another experiment"), "{what}");
        let what = bad_peer(decode_handover(2, &bytes, RunKind::Inversion, preset));
        assert!(what.contains("another kind"), "{what}");
        for n in [0, 7, 27, bytes.len() / 2, bytes.len() - 1] {
            let what = bad_peer(decode_handover(2, &bytes[..n], RunKind::Imaging, preset));
            assert!(what.contains("handed over"), "{what}");
        }
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        bad_peer(decode_handover(2, &flipped, RunKind::Imaging, preset));
    }

    proptest! {
        #[test]
        fn hostile_handover_bytes_are_an_error_naming_the_sender(
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let r: Result<Checkpoint<Vec<f32>>> =
                decode_handover(1, &bytes, RunKind::Imaging, "name = \"q\"\n");
            let from_rank_1 = matches!(r, Err(Error::BadPeerData { rank: 1, .. }));
            prop_assert!(from_rank_1, "not bad data from rank 1");
        }
    }
}
