//! Checkpoints of `tessera train`, so a run stopped with `--stop-after` (or killed) resumes with
//! `--resume RUN_DIR` bit for bit: `RUN_DIR/checkpoint/` holds the weights and Adam's moments as
//! raw little-endian numbers (`state.bin`: f32 weights, f64 first moments, f64 second moments) and
//! `checkpoint.json` (the steps done, Adam's step count, the loss curve so far, and the preset
//! that made it). Nothing else is needed: each step's crops, noise levels and noise are drawn from
//! generators seeded by `(seed, step)`.
//!
//! The folder is written as a unit (staged under a hidden name, then renamed into place), so a run
//! killed while writing keeps its previous checkpoint. `checkpoint.json` holds the CRC-32 of
//! `state.bin`, and a checkpoint whose bytes do not match it, or whose numbers are not all finite,
//! is refused: a damaged checkpoint never resumes into a network of NaN.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dist::{Collective, wire};
use crate::error::{Error, Result};

use super::{LossPoint, TrainPreset};

/// Format version of `checkpoint.json` (2: with `state_crc32`).
const FORMAT: u32 = 2;
/// Preset fields that do not change the numbers a run computes (a resumed run may change them).
const FREE_FIELDS: &[&str] = &[
    "description",
    "train.log_every",
    "train.checkpoint_every",
    "train.weights",
    "train.eval_sigma",
];

/// The folder of a run's checkpoint.
pub fn dir_of(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoint")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    format: u32,
    /// Optimiser steps done.
    step: usize,
    /// Adam's step count.
    adam_t: i32,
    parameters: usize,
    /// CRC-32 of `state.bin`.
    state_crc32: u32,
    loss: Vec<LossPoint>,
    /// The preset as TOML.
    preset: String,
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

/// A training state to resume from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub step: usize,
    pub adam_t: i32,
    pub params: Vec<f32>,
    pub adam_m: Vec<f64>,
    pub adam_v: Vec<f64>,
    pub loss: Vec<LossPoint>,
}

/// Writes `state` for `preset` into `run_dir/checkpoint` (replacing the previous one as a unit).
pub fn write(run_dir: &Path, preset: &TrainPreset, state: &Checkpoint) -> Result<()> {
    let n = state.params.len();
    if state.adam_m.len() != n || state.adam_v.len() != n {
        return Err(Error::Internal(format!(
            "checkpoint: {n} weights but {} and {} Adam moments",
            state.adam_m.len(),
            state.adam_v.len()
        )));
    }
    if let Some(what) = [
        ("weights", state.params.iter().any(|v| !v.is_finite())),
        (
            "Adam moments",
            state
                .adam_m
                .iter()
                .chain(&state.adam_v)
                .any(|v| !v.is_finite()),
        ),
    ]
    .iter()
    .find_map(|(what, bad)| bad.then_some(*what))
    {
        return Err(Error::NonFinite {
            what: format!("the {what} of the checkpoint at step {}", state.step),
            count: 1,
        });
    }
    let mut bytes = Vec::with_capacity(n * 20);
    bytes.extend(state.params.iter().flat_map(|v| v.to_le_bytes()));
    bytes.extend(state.adam_m.iter().flat_map(|v| v.to_le_bytes()));
    bytes.extend(state.adam_v.iter().flat_map(|v| v.to_le_bytes()));
    let meta = Meta {
        format: FORMAT,
        step: state.step,
        adam_t: state.adam_t,
        parameters: n,
        state_crc32: crc32(&bytes),
        loss: state.loss.clone(),
        preset: toml::to_string(preset)
            .map_err(|e| Error::Internal(format!("checkpoint: the preset as TOML: {e}")))?,
    };
    let final_dir = dir_of(run_dir);
    let staged = run_dir.join(".checkpoint.partial");
    let old = run_dir.join(".checkpoint.old");
    for d in [&staged, &old] {
        if d.exists() {
            std::fs::remove_dir_all(d).map_err(|e| Error::io("removing", d, e))?;
        }
    }
    std::fs::create_dir_all(&staged).map_err(|e| Error::io("creating", &staged, e))?;
    let state_path = staged.join("state.bin");
    std::fs::write(&state_path, &bytes).map_err(|e| Error::io("writing", &state_path, e))?;
    let json = serde_json::to_string_pretty(&meta)
        .map_err(|e| Error::Internal(format!("checkpoint.json: {e}")))?;
    let json_path = staged.join("checkpoint.json");
    std::fs::write(&json_path, json).map_err(|e| Error::io("writing", &json_path, e))?;
    if final_dir.exists() {
        std::fs::rename(&final_dir, &old).map_err(|e| Error::io("moving aside", &final_dir, e))?;
    }
    std::fs::rename(&staged, &final_dir).map_err(|e| Error::io("renaming into", &final_dir, e))?;
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(|e| Error::io("removing", &old, e))?;
    }
    Ok(())
}

/// Reads `run_dir/checkpoint` and checks it against `preset` and a network of `parameters`
/// weights; a checkpoint made by another preset is refused, naming the first field that differs.
pub fn read(run_dir: &Path, preset: &TrainPreset, parameters: usize) -> Result<Checkpoint> {
    let dir = dir_of(run_dir);
    let json_path = dir.join("checkpoint.json");
    let meta = read_meta(&json_path)?;
    if meta.format != FORMAT {
        return Err(Error::format(
            &json_path,
            format!(
                "checkpoint format {} (this tessera reads {FORMAT}, whose data carry a checksum)",
                meta.format
            ),
        ));
    }
    let theirs: toml::Value = toml::from_str(&meta.preset)
        .map_err(|e| Error::format(&json_path, format!("its preset does not parse: {e}")))?;
    // Through TOML text as the checkpoint's copy went, so f32 fields compare as written.
    let ours: toml::Value = toml::to_string(preset)
        .ok()
        .and_then(|t| toml::from_str(&t).ok())
        .ok_or_else(|| Error::Internal("the preset does not round-trip through TOML".into()))?;
    if let Some((field, was, now)) = first_difference(&theirs, &ours, "") {
        return Err(Error::config(
            "resume",
            format!(
                "the checkpoint was made with another preset: `{field}` was {was}, is now {now} (resume with the preset that made it): {}",
                json_path.display()
            ),
        ));
    }
    if meta.parameters != parameters {
        return Err(Error::config(
            "resume",
            format!(
                "the checkpoint holds {} weights but the network has {parameters}: {}",
                meta.parameters,
                json_path.display()
            ),
        ));
    }
    if meta.step >= preset.train.steps {
        return Err(Error::config(
            "resume",
            format!(
                "the checkpoint is at step {} of {}: nothing left to train: {}",
                meta.step,
                preset.train.steps,
                json_path.display()
            ),
        ));
    }
    let state_path = dir.join("state.bin");
    let bytes = std::fs::read(&state_path).map_err(|e| Error::io("reading", &state_path, e))?;
    let n = meta.parameters;
    if bytes.len() != n * 20 {
        return Err(Error::format(
            &state_path,
            format!(
                "{} bytes, expected {} for {n} weights and their Adam moments",
                bytes.len(),
                n * 20
            ),
        ));
    }
    let crc = crc32(&bytes);
    if crc != meta.state_crc32 {
        return Err(Error::format(
            &state_path,
            format!(
                "the checkpoint's data are damaged (CRC-32 {crc:08x}, checkpoint.json says {:08x}); \
                 it cannot be resumed",
                meta.state_crc32
            ),
        ));
    }
    let (w, rest) = bytes.split_at(4 * n);
    let (m, v) = rest.split_at(8 * n);
    let f64s = |b: &[u8]| -> Vec<f64> {
        b.chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect()
    };
    let state = Checkpoint {
        step: meta.step,
        adam_t: meta.adam_t,
        params: w
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
            .collect(),
        adam_m: f64s(m),
        adam_v: f64s(v),
        loss: meta.loss,
    };
    // A checksum that matches numbers that are not finite: written by hand, not by tessera.
    let bad = state.params.iter().filter(|v| !v.is_finite()).count()
        + state
            .adam_m
            .iter()
            .chain(&state.adam_v)
            .filter(|v| !v.is_finite())
            .count();
    if bad > 0 {
        return Err(Error::NonFinite {
            what: format!("the checkpoint {}", state_path.display()),
            count: bad,
        });
    }
    Ok(state)
}

/// [`read`] on rank 0, whose state every rank then receives: the other ranks need no copy of
/// the folder (a backend's followers, or ranks on hosts that do not share its disk). A failure
/// on rank 0 fails the others through the group's usual failure path.
pub fn read_on_root(
    comm: &dyn Collective,
    run_dir: &Path,
    preset: &TrainPreset,
    parameters: usize,
) -> Result<Checkpoint> {
    let mut bytes = match comm.rank() {
        0 => wire::encode(&read(run_dir, preset, parameters)?)?,
        _ => Vec::new(),
    };
    comm.broadcast(&mut bytes, 0)?;
    let state: Checkpoint = wire::decode_from(0, "training checkpoint", &bytes)?;
    if state.params.len() != parameters {
        return Err(Error::bad_peer_data(
            0,
            format!(
                "a checkpoint of {} weights for a network of {parameters}",
                state.params.len()
            ),
        ));
    }
    Ok(state)
}

/// The loss curve a run's checkpoint holds (what a resumed run's curve starts with).
pub fn loss_curve(run_dir: &Path) -> Result<Vec<LossPoint>> {
    Ok(read_meta(&dir_of(run_dir).join("checkpoint.json"))?.loss)
}

/// `checkpoint.json`, parsed.
fn read_meta(json_path: &Path) -> Result<Meta> {
    let text =
        std::fs::read_to_string(json_path).map_err(|e| Error::io("reading", json_path, e))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::format(json_path, format!("not a tessera training checkpoint: {e}")))
}

/// Fails, naming the folder, unless `run_dir` holds a checkpoint.
pub fn check_exists(run_dir: &Path) -> Result<()> {
    let dir = dir_of(run_dir);
    match dir.join("checkpoint.json").is_file() && dir.join("state.bin").is_file() {
        true => Ok(()),
        false => Err(Error::config(
            "resume",
            format!(
                "{} holds no training checkpoint (a run stopped before its last step writes one \
                 in checkpoint/)",
                run_dir.display()
            ),
        )),
    }
}

/// Copies `from`'s checkpoint into `to` (a new run folder that resumes it); `from` is left as
/// it was.
pub fn copy(from: &Path, to: &Path) -> Result<()> {
    check_exists(from)?;
    let (src, dst) = (dir_of(from), dir_of(to));
    std::fs::create_dir_all(&dst).map_err(|e| Error::io("creating", &dst, e))?;
    for name in ["checkpoint.json", "state.bin"] {
        std::fs::copy(src.join(name), dst.join(name))
            .map_err(|e| Error::io("copying", src.join(name), e))?;
    }
    Ok(())
}

/// The first field (dotted path) where `a` and `b` differ, with both values; fields in
/// [`FREE_FIELDS`] are skipped.
fn first_difference(
    a: &toml::Value,
    b: &toml::Value,
    at: &str,
) -> Option<(String, String, String)> {
    if FREE_FIELDS.contains(&at) {
        return None;
    }
    let show = |v: Option<&toml::Value>| v.map_or("unset".to_string(), |v| v.to_string());
    match (a, b) {
        (toml::Value::Table(x), toml::Value::Table(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = first_difference(p, q, &path) {
                            return Some(d);
                        }
                    }
                    (p, q) if !FREE_FIELDS.contains(&path.as_str()) => {
                        return Some((path, show(p), show(q)));
                    }
                    _ => {}
                }
            }
            None
        }
        _ if a == b => None,
        _ => Some((at.to_string(), a.to_string(), b.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preset() -> TrainPreset {
        TrainPreset::load("train-dncnn", &[]).unwrap().0
    }

    #[test]
    fn a_checkpoint_reads_back_exactly_and_refuses_another_preset() {
        let dir = tempfile::tempdir().unwrap();
        let p = preset();
        let state = Checkpoint {
            step: 7,
            adam_t: 7,
            params: vec![1.5, -0.0, f32::MIN_POSITIVE, 3.25e-7],
            adam_m: vec![0.1, 0.2, -1e-300, 4.0],
            adam_v: vec![1e-12, 0.0, 2.0, 9.5],
            loss: vec![LossPoint { step: 0, loss: 0.5 }],
        };
        write(dir.path(), &p, &state).unwrap();
        // Written twice: the second replaces the first as a unit.
        write(dir.path(), &p, &state).unwrap();
        let back = read(dir.path(), &p, 4).unwrap();
        assert_eq!(back, state);
        assert!(back.params[1].is_sign_negative());

        let mut other = p.clone();
        other.train.batch += 1;
        let e = read(dir.path(), &other, 4).unwrap_err().to_string();
        assert!(e.contains("train.batch") && e.contains("was 8"), "{e}");
        let mut other = p.clone();
        other.seed = 99;
        let e = read(dir.path(), &other, 4).unwrap_err().to_string();
        assert!(e.contains("`seed`"), "{e}");
        // Fields that do not change the numbers may change.
        let mut free = p.clone();
        free.train.log_every = 3;
        free.description = "changed".into();
        read(dir.path(), &free, 4).unwrap();
        let e = read(dir.path(), &p, 5).unwrap_err().to_string();
        assert!(e.contains("holds 4 weights"), "{e}");
        let mut done = p.clone();
        done.train.steps = 7;
        let e = read(dir.path(), &done, 4).unwrap_err().to_string();
        assert!(
            e.contains("train.steps") || e.contains("nothing left"),
            "{e}"
        );

        std::fs::write(dir_of(dir.path()).join("state.bin"), [0u8; 10]).unwrap();
        let e = read(dir.path(), &p, 4).unwrap_err().to_string();
        assert!(e.contains("10 bytes"), "{e}");
        let e = read(&dir.path().join("missing"), &p, 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("checkpoint.json"), "{e}");
    }
}
