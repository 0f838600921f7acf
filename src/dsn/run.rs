//! A Multi-DSN training run: the preset (versioned TOML, `kind = "dsn"`, unknown fields rejected),
//! the epoch loop over a group of ranks, and the outputs — `dsn.safetensors` (every parameter,
//! private encoders gathered from their ranks) and `train.json` (per-epoch per-domain losses and
//! accuracies, per-rank times and peak memory) — written by rank 0.

use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use super::data::{DomainConfig, DomainData, load_domain};
use super::network::{DannSchedule, DomainBatch, DomainLosses, DsnArch, LossWeights, Similarity};
use super::parallel::{Placement, Trainer, spatial_grid};
use crate::dist::{Collective, codec, wire};
use crate::error::{Error, Result};
use crate::nn::Features;
use crate::tensor::Tensor;

/// The Multi-DSN preset format version.
pub const DSN_PRESET_VERSION: u32 = 1;

/// Bundled Multi-DSN presets: `(name, TOML)`.
pub const BUNDLED: &[(&str, &str)] = &[
    ("dsn_shapes", include_str!("../../presets/dsn_shapes.toml")),
    (
        "dsn_shapes7",
        include_str!("../../presets/dsn_shapes7.toml"),
    ),
];

/// The preset's kind tag (`kind = "dsn"`), which tells `tessera train` what it trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DsnKind {
    Dsn,
}

/// A Multi-DSN training run as written in TOML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DsnPreset {
    pub version: u32,
    pub kind: DsnKind,
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seeds the data, the initial weights and the batches.
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub model: DsnArch,
    #[serde(default)]
    pub losses: LossWeights,
    #[serde(default)]
    pub train: DsnTrainConfig,
    /// Domain 0 is the labelled source; the others are unlabelled targets.
    pub domains: Vec<DomainConfig>,
    /// How domains are spread over the ranks.
    #[serde(default, skip_serializing_if = "DsnDistributed::is_default")]
    pub distributed: DsnDistributed,
}

/// `[distributed]`: how a Multi-DSN uses its ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DsnDistributed {
    /// Ranks per domain group: each domain lives on a group of this many ranks whose encoders
    /// run spatially decomposed over the blocks of each image (halo exchange per convolution);
    /// the run's rank count must be a multiple of it. 1: one rank per domain, whole images.
    pub ranks_per_domain: usize,
}

impl Default for DsnDistributed {
    fn default() -> Self {
        DsnDistributed {
            ranks_per_domain: 1,
        }
    }
}

impl DsnDistributed {
    fn is_default(&self) -> bool {
        *self == DsnDistributed::default()
    }

    pub fn validate(&self, arch: &DsnArch) -> Result<()> {
        let n = self.ranks_per_domain;
        if !(1..=64).contains(&n) {
            return Err(Error::config(
                "distributed.ranks_per_domain",
                format!("must be 1 to 64, got {n}"),
            ));
        }
        if n > 1 {
            spatial_grid(arch, n)?;
        }
        Ok(())
    }
}

/// How to train.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DsnTrainConfig {
    pub similarity: Similarity,
    /// DANN: the largest factor λ of the reversed domain-classifier gradient (λ_max).
    pub dann_lambda: f64,
    /// DANN: how λ grows with training progress p (`ramp`: λ_max·(2/(1+exp(−γ·p)) − 1), or
    /// `constant`).
    pub dann_schedule: DannSchedule,
    /// DANN: the ramp's steepness γ (Ganin & Lempitsky's 10).
    pub dann_gamma: f64,
    /// DANN: the encoders ascend each image's domain cross-entropy only up to chance (ln D for D
    /// domains); `false` is plain gradient reversal, which diverges on `dsn_shapes`.
    pub dann_clip_at_chance: bool,
    pub epochs: usize,
    pub steps_per_epoch: usize,
    /// Images per domain per step.
    pub batch: usize,
    pub learning_rate: f64,
    /// Generated training images per domain (folder domains use 4 of every 5 images).
    pub train_images: usize,
    /// Generated held-out images per domain for the accuracies (folder domains: every 5th image).
    pub test_images: usize,
    /// Train the same network with the source's task loss only (the source-only baseline).
    pub source_only: bool,
    /// File name of the weights in the output folder.
    pub weights: String,
    /// Also write `reconstructions/` every this many epochs (they are always written at the end).
    pub reconstructions_every: Option<usize>,
}

impl Default for DsnTrainConfig {
    fn default() -> Self {
        DsnTrainConfig {
            similarity: Similarity::Dann,
            dann_lambda: 1.0,
            dann_schedule: DannSchedule::Ramp,
            dann_gamma: 10.0,
            dann_clip_at_chance: true,
            epochs: 10,
            steps_per_epoch: 20,
            batch: 16,
            learning_rate: 1e-3,
            train_images: 512,
            test_images: 256,
            source_only: false,
            weights: "dsn.safetensors".into(),
            reconstructions_every: None,
        }
    }
}

impl DsnPreset {
    /// Whether TOML text is a Multi-DSN preset (`kind = "dsn"`).
    pub fn is_dsn(text: &str) -> bool {
        toml::from_str::<toml::Table>(text)
            .is_ok_and(|t| t.get("kind").and_then(|k| k.as_str()) == Some("dsn"))
    }

    /// The preset as TOML (what the workbench saves and sends).
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| Error::config("Multi-DSN preset", e.to_string()))
    }

    /// Makes the domains' image folders absolute against `base` (the preset's folder).
    pub fn resolve_paths(&mut self, base: &Path) {
        for f in self.domains.iter_mut().filter_map(|d| d.folder.as_mut()) {
            *f = crate::io::resolve(base, f);
        }
    }

    /// Parses TOML text, applies `--set` overrides and validates; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str, overrides: &[String]) -> Result<DsnPreset> {
        let preset: DsnPreset = crate::preset::parse_versioned(
            text,
            origin,
            overrides,
            "Multi-DSN preset",
            DSN_PRESET_VERSION,
        )?;
        preset.validate()?;
        Ok(preset)
    }

    /// Loads a bundled Multi-DSN preset by name or a file that is one; `Ok(None)` when
    /// `name_or_path` is neither. Returns the preset and its folder (for relative paths).
    pub fn load(name_or_path: &str, overrides: &[String]) -> Result<Option<(DsnPreset, PathBuf)>> {
        match crate::preset::find_text(name_or_path, BUNDLED)? {
            Some(found) if Self::is_dsn(&found.text) => Ok(Some((
                Self::from_toml(&found.text, &found.origin, overrides)?,
                found.base_dir,
            ))),
            _ => Ok(None),
        }
    }

    /// What a run holds per rank on `world` ranks, `ranks_here` of them on this machine (see
    /// [`crate::memory::dsn`]); a folder domain's images are counted, not read.
    pub fn memory(
        &self,
        base_dir: &Path,
        world: usize,
        ranks_here: usize,
    ) -> Result<crate::memory::Parts> {
        let t = &self.train;
        let r = self.distributed.ranks_per_domain.max(1);
        let groups = (world / r).max(1);
        let held = self.domains.len().div_ceil(groups);
        // The domains with the most images stand for the ones this rank holds.
        let mut counts: Vec<u64> = self
            .domains
            .iter()
            .map(|d| match &d.folder {
                Some(f) => super::data::count_images(&crate::io::resolve(base_dir, f)),
                None => (t.train_images + t.test_images) as u64,
            })
            .collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let images = counts.iter().take(held).sum();
        Ok(crate::memory::dsn(
            &(&self.model).into(),
            self.domains.len(),
            held,
            images,
            t.batch,
            r,
            ranks_here,
        ))
    }

    pub fn validate(&self) -> Result<()> {
        if self.name.trim().is_empty() {
            return Err(Error::config("name", "must not be empty"));
        }
        self.model.validate()?;
        self.losses.validate()?;
        self.distributed.validate(&self.model)?;
        let t = &self.train;
        for (field, v) in [
            ("train.epochs", t.epochs),
            ("train.steps_per_epoch", t.steps_per_epoch),
            ("train.batch", t.batch),
            ("train.train_images", t.train_images),
            ("train.test_images", t.test_images),
        ] {
            if v == 0 {
                return Err(Error::config(field, "must be ≥ 1"));
            }
        }
        if !(t.learning_rate > 0.0 && t.learning_rate.is_finite()) {
            return Err(Error::config(
                "train.learning_rate",
                format!("must be a positive number, got {}", t.learning_rate),
            ));
        }
        if !(t.dann_lambda >= 0.0 && t.dann_lambda.is_finite()) {
            return Err(Error::config(
                "train.dann_lambda",
                format!("must be a finite number ≥ 0, got {}", t.dann_lambda),
            ));
        }
        if !(t.dann_gamma > 0.0 && t.dann_gamma.is_finite()) {
            return Err(Error::config(
                "train.dann_gamma",
                format!(
                    "must be a positive number (10 in Ganin & Lempitsky; for a constant λ set train.dann_schedule = \"constant\"), got {}",
                    t.dann_gamma
                ),
            ));
        }
        let name = Path::new(&t.weights);
        if name.extension().and_then(|e| e.to_str()) != Some("safetensors")
            || name.components().count() != 1
        {
            return Err(Error::config(
                "train.weights",
                format!(
                    "must be a plain file name ending in .safetensors, got `{}`",
                    t.weights
                ),
            ));
        }
        if t.reconstructions_every == Some(0) {
            return Err(Error::config(
                "train.reconstructions_every",
                "must be ≥ 1 (leave it out to write reconstructions at the end only)",
            ));
        }
        if !(2..=64).contains(&self.domains.len()) {
            return Err(Error::config(
                "domains",
                format!(
                    "give a source and 1 to 63 target domains, got {} domains",
                    self.domains.len()
                ),
            ));
        }
        for (i, d) in self.domains.iter().enumerate() {
            d.validate(&format!("domains[{i}]"))?;
            // Names become file names (`reconstructions/<name>.png`).
            let n = &d.name;
            if n.is_empty()
                || n.starts_with('.')
                || !n
                    .chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return Err(Error::config(
                    format!("domains[{i}].name"),
                    format!(
                        "must be a non-empty file name of letters, digits, `-`, `_` and `.` (not starting with `.`), got `{n}`"
                    ),
                ));
            }
            if let Some(j) = self.domains[..i].iter().position(|o| &o.name == n) {
                return Err(Error::config(
                    format!("domains[{i}].name"),
                    format!("`{n}` is also the name of domains[{j}]"),
                ));
            }
        }
        Ok(())
    }
}

/// One epoch's figures (the same on every rank).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochReport {
    pub epoch: usize,
    /// Mean weighted losses over the epoch's steps, per domain.
    pub losses: Vec<DomainLosses>,
    /// Accuracy of the task classifier on each domain's held-out images.
    pub accuracy: Vec<f64>,
    /// Mean target accuracy (domains 1…K).
    pub target_accuracy: f64,
}

/// Per-rank figures of the whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankReport {
    pub rank: usize,
    pub domains: Vec<usize>,
    pub compute_secs: f64,
    pub exchange_secs: f64,
    /// The process's peak resident memory (`VmHWM`); ranks that are threads of one process share it.
    pub peak_rss_bytes: Option<u64>,
    /// Payload bytes received from other ranks by the training steps (shared codes, shared
    /// gradients, losses), in all.
    pub received_bytes: u64,
}

/// What `train.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DsnSummary {
    pub name: String,
    pub ranks: usize,
    /// Ranks per domain group (`[distributed] ranks_per_domain`; 1 without spatial decomposition).
    #[serde(default = "one")]
    pub ranks_per_domain: usize,
    pub domains: Vec<String>,
    pub similarity: Similarity,
    pub source_only: bool,
    /// Stopped by the user before the preset's last epoch.
    #[serde(default)]
    pub stopped_early: bool,
    pub shared_parameters: usize,
    pub private_parameters_per_domain: usize,
    pub epochs: Vec<EpochReport>,
    pub per_rank: Vec<RankReport>,
    pub weights: PathBuf,
    /// `reconstructions/<domain>.png` per domain (with a `.npy` beside each).
    pub reconstructions: Vec<PathBuf>,
}

fn one() -> usize {
    1
}

fn mix(a: u64, b: u64) -> u64 {
    let z = (a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^ (z >> 31)
}

/// A domain's training and held-out images.
struct Split {
    train: DomainData,
    test: DomainData,
}

fn load_split(p: &DsnPreset, base_dir: &Path, d: usize) -> Result<Split> {
    let mut cfg = p.domains[d].clone();
    if let Some(f) = cfg.folder.as_mut() {
        *f = crate::io::resolve(base_dir, f);
    }
    let (c, s) = (p.model.classes, p.model.image_size);
    let t = &p.train;
    if cfg.folder.is_some() {
        let all = load_domain(&cfg, d, c, s, 0, p.seed)?;
        let pick = |test: bool| {
            let idx: Vec<usize> = (0..all.len()).filter(|i| (i % 5 == 0) == test).collect();
            DomainData {
                size: s,
                images: idx.iter().flat_map(|&i| all.image(i).to_vec()).collect(),
                labels: idx.iter().map(|&i| all.labels[i]).collect(),
            }
        };
        let (train, test) = (pick(false), pick(true));
        if train.is_empty() || test.is_empty() {
            return Err(Error::config(
                format!("domains[{d}].folder"),
                format!(
                    "needs at least 2 images to hold one out for testing, has {}",
                    all.len()
                ),
            ));
        }
        return Ok(Split { train, test });
    }
    Ok(Split {
        train: load_domain(&cfg, d, c, s, t.train_images, p.seed)?,
        test: load_domain(&cfg, d, c, s, t.test_images, mix(p.seed, 0x7e57))?,
    })
}

fn features(images: Vec<f32>, n: usize, size: usize) -> Features<f32> {
    Features {
        batch: n,
        channels: 1,
        dims: [1, size, size],
        data: images,
    }
}

/// Trains on every rank of `comm` (each rank calls this); rank 0 writes the outputs into
/// `out_dir`. `on_epoch` is called on every rank after each epoch; when it breaks on rank 0 (a
/// user's Stop), every rank ends the run after that epoch and writes what it reached as usual.
pub fn train(
    p: &DsnPreset,
    base_dir: &Path,
    out_dir: &Path,
    comm: &dyn Collective,
    on_epoch: &mut dyn FnMut(&EpochReport) -> std::ops::ControlFlow<()>,
) -> Result<DsnSummary> {
    p.validate()?;
    // Before any weight or image is allocated.
    let world = comm.world_size();
    p.memory(base_dir, world, crate::memory::ranks_here(world))?
        .check()?;
    let t = &p.train;
    let n_domains = p.domains.len();
    let weights = if t.source_only {
        LossWeights {
            task: p.losses.task,
            reconstruction: 0.0,
            difference: 0.0,
            similarity: 0.0,
        }
    } else {
        p.losses
    };
    let mut trainer = Trainer::with_ranks_per_domain(
        comm,
        p.model,
        n_domains,
        p.seed,
        weights,
        t.similarity,
        p.distributed.ranks_per_domain,
    )?
    .with_dann_clip_at_chance(t.dann_clip_at_chance);
    let held = trainer.held().to_vec();
    let data = held
        .iter()
        .map(|&d| load_split(p, base_dir, d))
        .collect::<Result<Vec<_>>>()?;
    let s = p.model.image_size;
    let k = s * s;
    let mut epochs = Vec::with_capacity(t.epochs);
    let (mut compute_secs, mut exchange_secs, mut received_bytes) = (0.0, 0.0, 0);
    let total_steps = t.epochs * t.steps_per_epoch;
    for epoch in 0..t.epochs {
        let mut sums = vec![DomainLosses::default(); n_domains];
        for step in 0..t.steps_per_epoch {
            let global_step = epoch * t.steps_per_epoch + step;
            let batches: Vec<DomainBatch<f32>> = held
                .iter()
                .zip(&data)
                .map(|(&d, split)| {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(mix(
                        mix(p.seed, d as u64),
                        global_step as u64,
                    ));
                    let idx: Vec<usize> = (0..t.batch)
                        .map(|_| rng.random_range(0..split.train.len()))
                        .collect();
                    DomainBatch {
                        domain: d,
                        images: features(
                            idx.iter()
                                .flat_map(|&i| split.train.image(i).to_vec())
                                .collect(),
                            t.batch,
                            s,
                        ),
                        labels: (d == 0)
                            .then(|| idx.iter().map(|&i| split.train.labels[i]).collect()),
                    }
                })
                .collect();
            // Cosine decay to a tenth over the run.
            let progress = global_step as f64 / total_steps.max(1) as f64;
            let lr = t.learning_rate * (0.55 + 0.45 * (std::f64::consts::PI * progress).cos());
            let lambda = t
                .dann_schedule
                .lambda(t.dann_lambda, t.dann_gamma, progress);
            let (losses, times) = trainer.step(&batches, lr, lambda)?;
            compute_secs += times.compute_secs;
            exchange_secs += times.exchange_secs;
            received_bytes += times.received_bytes;
            for (acc, l) in sums.iter_mut().zip(&losses) {
                acc.task += l.task;
                acc.reconstruction += l.reconstruction;
                acc.difference += l.difference;
                acc.similarity += l.similarity;
            }
        }
        let n = t.steps_per_epoch as f64;
        let losses = sums
            .into_iter()
            .map(|l| DomainLosses {
                task: l.task / n,
                reconstruction: l.reconstruction / n,
                difference: l.difference / n,
                similarity: l.similarity / n,
            })
            .collect();
        let counts = data
            .iter()
            .map(|split| {
                let test = &split.test;
                let mut correct = 0;
                for chunk in (0..test.len()).collect::<Vec<_>>().chunks(64) {
                    let images =
                        test.images[chunk[0] * k..(chunk[chunk.len() - 1] + 1) * k].to_vec();
                    let pred = trainer.classify(&features(images, chunk.len(), s))?;
                    correct += pred
                        .iter()
                        .zip(chunk)
                        .filter(|(p, i)| **p == test.labels[**i])
                        .count();
                }
                Ok((correct, test.len()))
            })
            .collect::<Result<Vec<_>>>()?;
        let accuracy: Vec<f64> = trainer
            .gather_counts(&counts)?
            .into_iter()
            .map(|(c, n)| c as f64 / n.max(1) as f64)
            .collect();
        let target_accuracy = accuracy[1..].iter().sum::<f64>() / (n_domains - 1) as f64;
        let report = EpochReport {
            epoch,
            losses,
            accuracy,
            target_accuracy,
        };
        // Counted from 1, as `tessera train` and the workbench show epochs.
        tracing::info!(
            epoch = epoch + 1,
            target_accuracy,
            source_accuracy = report.accuracy[0],
            "dsn epoch"
        );
        let stop = on_epoch(&report).is_break();
        epochs.push(report);
        if crate::dist::collective::agree_to_stop(comm, stop)? && epoch + 1 < t.epochs {
            break;
        }
        if t.reconstructions_every
            .is_some_and(|every| (epoch + 1) % every == 0 && epoch + 1 < t.epochs)
        {
            write_reconstructions(p, &trainer, &data, comm, out_dir)?;
        }
    }
    let reconstructions = write_reconstructions(p, &trainer, &data, comm, out_dir)?;
    let per_rank = gather_rank_reports(
        comm,
        trainer.placement(),
        compute_secs,
        exchange_secs,
        received_bytes,
    )?;
    let weights_path = out_dir.join(&t.weights);
    let state = gather_state(&trainer, comm)?;
    let summary = DsnSummary {
        name: p.name.clone(),
        ranks: comm.world_size(),
        ranks_per_domain: p.distributed.ranks_per_domain,
        domains: p.domains.iter().map(|d| d.name.clone()).collect(),
        similarity: t.similarity,
        source_only: t.source_only,
        stopped_early: epochs.len() < t.epochs,
        shared_parameters: trainer.model.shared_param_count(),
        private_parameters_per_domain: trainer.model.private_param_count(),
        epochs,
        per_rank,
        weights: weights_path.clone(),
        reconstructions,
    };
    if comm.rank() == 0 {
        std::fs::create_dir_all(out_dir)
            .map_err(|e| Error::io("creating the output folder", out_dir, e))?;
        let state = state.expect("rank 0 assembles the weights");
        crate::train::check_finite_weights(&state)?;
        crate::nn::weights::safetensors::write(&state, &weights_path)?;
        let json = serde_json::to_string_pretty(&summary)
            .map_err(|e| Error::Internal(format!("train.json: {e}")))?;
        let path = out_dir.join(crate::io::TRAIN_SUMMARY_FILE);
        std::fs::write(&path, json).map_err(|e| Error::io("writing", &path, e))?;
    }
    Ok(summary)
}

/// Held-out images per domain in `reconstructions/` (fewer where a domain holds out fewer).
pub const RECONSTRUCTION_IMAGES: usize = 6;

/// The rows of `reconstructions/<domain>.{png,npy}`, top to bottom.
pub const RECONSTRUCTION_ROWS: [&str; 4] = [
    "input",
    "full reconstruction (shared + private code)",
    "shared code only (private zeroed)",
    "private code only (shared zeroed)",
];

/// Writes `reconstructions/<domain>.npy` (`4 × n × side × side`: [`RECONSTRUCTION_ROWS`] of the
/// domain's first `n` held-out images, as the decoder made them) and a PNG of the same grid, each
/// image scaled to its own range (scale-invariant MSE leaves a reconstruction's offset free). Each
/// rank decodes its domains (with its group, when split spatially; the leader sends them); rank 0
/// gathers and writes, and returns the PNG paths (empty elsewhere).
fn write_reconstructions(
    p: &DsnPreset,
    trainer: &Trainer,
    data: &[Split],
    comm: &dyn Collective,
    out_dir: &Path,
) -> Result<Vec<PathBuf>> {
    let s = p.model.image_size;
    let k = s * s;
    let rows = RECONSTRUCTION_ROWS.len();
    let mut mine: Vec<(usize, [usize; 4], Vec<f32>)> = Vec::new();
    for (&d, split) in trainer.held().iter().zip(data) {
        let n = RECONSTRUCTION_IMAGES.min(split.test.len());
        let input = split.test.images[..n * k].to_vec();
        let parts = trainer.reconstruct_parts(d, &features(input.clone(), n, s))?;
        if !trainer.placement().is_leader(comm.rank()) {
            continue;
        }
        let values = std::iter::once(&input).chain(&parts).flatten().copied();
        mine.push((d, [rows, n, s, s], values.collect()));
    }
    let records: Vec<(usize, &[usize], &[f32])> = mine
        .iter()
        .map(|(d, shape, v)| (*d, &shape[..], &v[..]))
        .collect();
    let per_rank = comm.all_gather(&codec::encode_slices(&records)?)?;
    drop(mine);
    if comm.rank() != 0 {
        return Ok(Vec::new());
    }
    let mut grids: Vec<Option<(usize, Vec<f32>)>> = vec![None; p.domains.len()];
    for (r, bytes) in per_rank.iter().enumerate() {
        let held = trainer.placement().reported(r);
        let theirs = codec::decode(r, bytes)?;
        if theirs.len() != held.len() {
            return Err(Error::bad_peer_data(
                r,
                format!(
                    "reconstructions of {} domains, it reports {}",
                    theirs.len(),
                    held.len()
                ),
            ));
        }
        for (d, (index, t)) in held.into_iter().zip(theirs) {
            let n = t.shape().get(1).copied().unwrap_or(0);
            if index != d || t.shape() != [rows, n, s, s] || n > RECONSTRUCTION_IMAGES {
                return Err(Error::bad_peer_data(
                    r,
                    format!(
                        "reconstructions of domain {index} of shape {:?}, expected domain {d} of \
                         shape [{rows}, n ≤ {RECONSTRUCTION_IMAGES}, {s}, {s}]",
                        t.shape()
                    ),
                ));
            }
            grids[d] = Some((n, t.into_data()));
        }
    }
    let dir = out_dir.join("reconstructions");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating the output folder", &dir, e))?;
    let mut written = Vec::with_capacity(grids.len());
    for (cfg, grid) in p.domains.iter().zip(grids) {
        let (n, values) = grid.ok_or_else(|| {
            Error::Internal(format!("no rank sent the reconstructions of {}", cfg.name))
        })?;
        let npy = dir.join(format!("{}.npy", cfg.name));
        crate::io::write_npy(
            &npy,
            &Tensor::from_vec(&[RECONSTRUCTION_ROWS.len(), n, s, s], values.clone())?,
        )?;
        let png = dir.join(format!("{}.png", cfg.name));
        reconstruction_figure(&cfg.name, &values, n, s)?.write_png(&png)?;
        written.push(png);
    }
    Ok(written)
}

/// One gray mosaic per row of [`RECONSTRUCTION_ROWS`], `n` images side by side with a one-pixel
/// white gap, each image min–max scaled to [0, 1].
fn reconstruction_figure(
    domain: &str,
    values: &[f32],
    n: usize,
    s: usize,
) -> Result<crate::plot::Rgb> {
    use crate::plot::{Colormap, Figure, Heatmap, grid};
    let k = s * s;
    let cols = n * (s + 1) - 1;
    let figures = RECONSTRUCTION_ROWS
        .iter()
        .enumerate()
        .map(|(row, label)| {
            let mut mosaic = vec![1.0f32; s * cols];
            for i in 0..n {
                let img = &values[(row * n + i) * k..(row * n + i + 1) * k];
                let (lo, hi) = img
                    .iter()
                    .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                        (a.min(v), b.max(v))
                    });
                let span = if hi > lo { hi - lo } else { 1.0 };
                for y in 0..s {
                    for x in 0..s {
                        mosaic[y * cols + i * (s + 1) + x] = (img[y * s + x] - lo) / span;
                    }
                }
            }
            Heatmap::new(format!("{domain}: {label}"), &mosaic, s, cols)
                .colormap(Colormap::Gray)
                .range(0.0, 1.0)
                .width(200 + 6 * cols as u32)
                .render()
        })
        .collect::<Result<Vec<_>>>()?;
    grid(&figures, 1)
}

fn gather_rank_reports(
    comm: &dyn Collective,
    placement: Placement,
    compute_secs: f64,
    exchange_secs: f64,
    received_bytes: u64,
) -> Result<Vec<RankReport>> {
    /// What each rank says of itself.
    #[derive(Serialize, Deserialize)]
    struct Times {
        compute_secs: f64,
        exchange_secs: f64,
        peak_rss_bytes: Option<u64>,
        received_bytes: u64,
    }
    let mine = Times {
        compute_secs,
        exchange_secs,
        peak_rss_bytes: crate::dist::profile::peak_rss_bytes(),
        received_bytes,
    };
    Ok(wire::all_gather_as(comm, "rank report", &mine)?
        .into_iter()
        .enumerate()
        .map(|(r, t)| RankReport {
            rank: r,
            domains: placement.held(r),
            compute_secs: t.compute_secs,
            exchange_secs: t.exchange_secs,
            peak_rss_bytes: t.peak_rss_bytes,
            received_bytes: t.received_bytes,
        })
        .collect())
}

/// Every parameter as a state dict on rank 0 (private encoders gathered from their ranks); `None`
/// elsewhere.
fn gather_state(trainer: &Trainer, comm: &dyn Collective) -> Result<Option<crate::nn::StateDict>> {
    let named = trainer.model.named_params();
    let placement = trainer.placement();
    // The other ranks of a group hold copies of the leader's private encoders.
    let private: Vec<(usize, &[usize], &[f32])> = named
        .iter()
        .filter(|(n, _, _)| placement.is_leader(comm.rank()) && n.starts_with("private_encoder."))
        .enumerate()
        .map(|(k, (_, shape, v))| (k, &shape[..], &v[..]))
        .collect();
    let per_rank = comm.all_gather(&codec::encode_slices(&private)?)?;
    drop(private);
    if comm.rank() != 0 {
        return Ok(None);
    }
    let mut sd = crate::nn::StateDict::new("tessera dsn");
    for (name, shape, v) in &named {
        if !name.starts_with("private_encoder.") {
            sd.insert(name.clone(), Tensor::from_vec(shape, v.to_vec())?);
        }
    }
    // Every rank's private encoders have the names and shapes of domain 0's (held on rank 0).
    let template: Vec<(String, Vec<usize>)> = named
        .iter()
        .filter_map(|(n, s, _)| {
            n.strip_prefix("private_encoder.0.")
                .map(|n| (n.to_string(), s.clone()))
        })
        .collect();
    for (r, bytes) in per_rank.iter().enumerate() {
        let held = placement.reported(r);
        let theirs = codec::decode(r, bytes)?;
        if theirs.len() != held.len() * template.len() {
            return Err(Error::bad_peer_data(
                r,
                format!(
                    "{} private encoder tensors for {} domains of {} each",
                    theirs.len(),
                    held.len(),
                    template.len()
                ),
            ));
        }
        let slots = held
            .iter()
            .flat_map(|d| template.iter().map(move |t| (d, t)));
        for (k, ((d, (n, shape)), (index, t))) in slots.zip(theirs).enumerate() {
            if index != k || t.shape() != shape.as_slice() {
                return Err(Error::bad_peer_data(
                    r,
                    format!(
                        "private encoder tensor {index} of shape {:?}, expected {k}: \
                         `private_encoder.{d}.{n}` of shape {shape:?}",
                        t.shape()
                    ),
                ));
            }
            sd.insert(format!("private_encoder.{d}.{n}"), t);
        }
    }
    Ok(Some(sd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_presets_parse_and_unknown_fields_are_named() {
        for (name, text) in BUNDLED {
            assert!(DsnPreset::is_dsn(text), "{name}");
            DsnPreset::from_toml(text, name, &[]).unwrap();
        }
        let text = BUNDLED[0].1;
        let e = DsnPreset::from_toml(text, "p", &["train.epoch=3".into()]).unwrap_err();
        assert!(e.to_string().contains("epoch"), "{e}");
        let e = DsnPreset::from_toml(text, "p", &["model.clases=3".into()]).unwrap_err();
        assert!(e.to_string().contains("clases"), "{e}");
        let e = DsnPreset::from_toml(text, "p", &["version=2".into()]).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
        let e =
            DsnPreset::from_toml(text, "p", &["train.similarity=\"cosine\"".into()]).unwrap_err();
        assert!(e.to_string().contains("cosine"), "{e}");
        for (set, field) in [
            ("train.dann_gamma=0", "train.dann_gamma"),
            ("train.dann_gamma=-3", "train.dann_gamma"),
            ("train.dann_gamma=nan", "train.dann_gamma"),
            ("train.dann_lambda=-1", "train.dann_lambda"),
            ("train.dann_lambda=inf", "train.dann_lambda"),
            ("train.dann_schedule=\"linear\"", "linear"),
            (
                "train.reconstructions_every=0",
                "train.reconstructions_every",
            ),
            ("domains.1.name=\"../x\"", "domains[1].name"),
            ("domains.2.name=\"\"", "domains[2].name"),
            ("domains.3.name=\"blurred\"", "domains[1]"),
            (
                "distributed.ranks_per_domain=0",
                "distributed.ranks_per_domain",
            ),
            ("distributed.ranks_per_domain=65", "1 to 64"),
            ("distributed.ranks=2", "ranks"),
        ] {
            let e = DsnPreset::from_toml(text, "p", &[set.into()]).unwrap_err();
            assert!(e.to_string().contains(field), "{set}: {e}");
        }
        let p = DsnPreset::from_toml(
            text,
            "p",
            &[
                "train.dann_schedule=\"constant\"".into(),
                "train.dann_lambda=0.5".into(),
            ],
        )
        .unwrap();
        assert_eq!(p.train.dann_schedule, DannSchedule::Constant);
        assert_eq!(p.train.dann_lambda, 0.5);
        // The option is left out of the TOML when it is the default, kept otherwise.
        assert!(!p.to_toml().unwrap().contains("distributed"));
        let e = DsnPreset::from_toml(
            text,
            "p",
            &[
                "model.image_size=8".into(),
                "distributed.ranks_per_domain=8".into(),
            ],
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("distributed.ranks_per_domain") && e.to_string().contains("2×2"),
            "{e}"
        );
        let p =
            DsnPreset::from_toml(text, "p", &["distributed.ranks_per_domain=2".into()]).unwrap();
        assert_eq!(p.distributed.ranks_per_domain, 2);
        let again = DsnPreset::from_toml(&p.to_toml().unwrap(), "p", &[]).unwrap();
        assert_eq!(again, p);
    }
}
