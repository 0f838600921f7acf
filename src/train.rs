//! `tessera train`: trains or fine-tunes a native DnCNN or DRUNet denoiser on the user's image or
//! volume (or a generated one), with each training batch decomposed over the group's ranks by exact
//! spatial decomposition, and saves `.safetensors` weights with deepinv's names.
//!
//! Flow: a [`TrainPreset`] (versioned TOML: `[image]`, `[denoiser]`, `[train]`) → the network graph
//! (the config's weights, or He initialisation) → per step: seeded random crops and noise levels
//! (the same on every rank), noise from a counter-based generator keyed by the global voxel index (so
//! the draws do not depend on the decomposition), forward and backward on this rank's block, weight
//! gradients summed over ranks, an Adam step (identical on every rank) → weights, `denoiser.toml`
//! (ready for `tessera denoise` and presets) and `train.json` (loss curve, per-rank times) in the
//! output folder (rank 0).
//!
//! Training images: one `[image]`, or `[[images]]` (generated samples with their own seeds, files,
//! folders — [`data`]); `[[held_out]]` images are never trained on and are scored at the end (PSNR
//! of the noisy input and of the network at each evaluation σ, in `train.json`). `--stop-after` and
//! `--resume` go through [`checkpoint`]: a resumed run equals an uninterrupted one bit for bit.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::denoise::DenoiserConfig;
use crate::dist::collective::agree_to_stop;
use crate::dist::spatial::SpatialPartition;
use crate::dist::{Collective, wire};
use crate::error::{Error, Result};
use crate::nn::layers::partition::{Grid, Region, copy_region};
use crate::nn::{Features, Network};
use crate::optim::adam::Adam;
use crate::preset::ImageSource;

pub mod augment;
pub mod bm3d;
pub mod checkpoint;
pub mod data;
pub mod eval;

pub use data::TrainImage;

/// The training preset format version.
pub const TRAIN_PRESET_VERSION: u32 = 1;

/// Bundled training presets: `(name, TOML)`.
pub const BUNDLED: &[(&str, &str)] =
    &[("train-dncnn", include_str!("../presets/train-dncnn.toml"))];

/// A training run as written in TOML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainPreset {
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seeds the crops, the noise levels, the noise and the initial weights.
    #[serde(default)]
    pub seed: u64,
    /// The training image or volume (clean); pairs are made by adding noise. Exclusive with
    /// `images`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageSource>,
    /// Several training images (samples with their own seeds, files, folders); crops are drawn
    /// from all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<TrainImage>,
    /// Images never trained on (also left out of training folders); scored after training.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_out: Vec<TrainImage>,
    /// A native `dncnn` or `drunet`; with `weights`, training starts from them (fine-tuning).
    pub denoiser: DenoiserConfig,
    pub train: TrainConfig,
}

/// How to train.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Noise levels (standard deviation, image range 0..1); each crop draws one uniformly.
    pub sigma: Vec<f32>,
    /// Optimiser steps.
    pub steps: usize,
    /// Crops per step.
    pub batch: usize,
    /// Side of the square (cubic) random crops, in pixels; `None` = the whole image every step
    /// (BigConv-style training on the full, decomposed image).
    pub crop: Option<usize>,
    /// Adam's step size at the start; it decays along a half cosine to a tenth at the end.
    pub learning_rate: f64,
    /// Ranks per spatial axis for the decomposition of each batch; `None` = chosen automatically.
    pub grid: Option<Vec<usize>>,
    /// Steps between loss reports.
    pub log_every: usize,
    /// File name of the weights in the output folder.
    pub weights: String,
    /// Steps between checkpoints (`checkpoint/` in the output folder, for `--resume`); 0 = only
    /// when stopped by `--stop-after`.
    pub checkpoint_every: usize,
    /// Noise levels at which the held-out images are scored; empty = `sigma`.
    pub eval_sigma: Vec<f32>,
    /// Flips, quarter turns, several crop scales and colour jitter (`[train.augment]`); default:
    /// none.
    #[serde(skip_serializing_if = "augment::Augment::is_inactive")]
    pub augment: augment::Augment,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            sigma: vec![0.1],
            steps: 200,
            batch: 8,
            crop: Some(64),
            learning_rate: 1e-3,
            grid: None,
            log_every: 10,
            weights: "weights.safetensors".into(),
            checkpoint_every: 500,
            eval_sigma: Vec::new(),
            augment: augment::Augment::default(),
        }
    }
}

impl TrainConfig {
    pub fn validate(&self) -> Result<()> {
        if self.eval_sigma.iter().any(|s| !(*s > 0.0 && *s <= 1.0)) {
            return Err(Error::config(
                "train.eval_sigma",
                format!("noise levels must be in (0, 1], got {:?}", self.eval_sigma),
            ));
        }
        if self.sigma.is_empty() || self.sigma.iter().any(|s| !(*s > 0.0 && *s <= 1.0)) {
            return Err(Error::config(
                "train.sigma",
                format!(
                    "give one or more noise levels in (0, 1], got {:?}",
                    self.sigma
                ),
            ));
        }
        for (field, v) in [
            ("train.steps", self.steps),
            ("train.batch", self.batch),
            ("train.log_every", self.log_every),
        ] {
            if v == 0 {
                return Err(Error::config(field, "must be ≥ 1"));
            }
        }
        if self.crop == Some(0) {
            return Err(Error::config(
                "train.crop",
                "must be ≥ 1 (leave it out to train on the whole image)",
            ));
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return Err(Error::config(
                "train.learning_rate",
                format!("must be a positive number, got {}", self.learning_rate),
            ));
        }
        self.augment.validate()?;
        if self.augment.is_active() && self.crop.is_none() {
            return Err(Error::config(
                "train.augment",
                "augmentation varies random crops: give `train.crop`",
            ));
        }
        if let Some(g) = &self.grid
            && (g.is_empty() || g.len() > 3 || g.contains(&0))
        {
            return Err(Error::config(
                "train.grid",
                format!("must be 1 to 3 positive rank counts, got {g:?}"),
            ));
        }
        let name = Path::new(&self.weights);
        if name.extension().and_then(|e| e.to_str()) != Some("safetensors")
            || name.components().count() != 1
        {
            return Err(Error::config(
                "train.weights",
                format!(
                    "must be a plain file name ending in .safetensors, got `{}`",
                    self.weights
                ),
            ));
        }
        Ok(())
    }
}

impl TrainPreset {
    /// Whether TOML text is a denoiser-training preset (a `[train]` table, no `kind = "dsn"`).
    pub fn is_train(text: &str) -> bool {
        toml::from_str::<toml::Table>(text).is_ok_and(|t| {
            t.get("train").is_some_and(toml::Value::is_table)
                && t.get("kind").and_then(|k| k.as_str()) != Some("dsn")
        })
    }

    /// The preset as TOML (what the workbench saves and sends).
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| Error::config("training preset", e.to_string()))
    }

    /// The files the preset names: the training image and the starting weights.
    pub fn paths_mut(&mut self) -> Vec<&mut PathBuf> {
        let mut paths: Vec<&mut PathBuf> = self
            .image
            .iter_mut()
            .flat_map(|i| i.path.iter_mut())
            .chain(self.images.iter_mut().flat_map(|i| i.path.iter_mut()))
            .chain(self.held_out.iter_mut().flat_map(|i| i.path.iter_mut()))
            .collect();
        paths.extend(self.denoiser.paths_mut());
        paths
    }

    /// Makes the files the preset names absolute against `base` (its folder), so that it runs
    /// wherever the backend's working directory is.
    pub fn resolve_paths(&mut self, base: &Path) {
        for p in self.paths_mut() {
            *p = crate::io::resolve(base, p);
        }
    }

    /// Parses TOML text, applies `--set` overrides and validates; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str, overrides: &[String]) -> Result<TrainPreset> {
        let preset: TrainPreset = crate::preset::parse_versioned(
            text,
            origin,
            overrides,
            "training preset",
            TRAIN_PRESET_VERSION,
        )?;
        preset.validate()?;
        Ok(preset)
    }

    /// Loads a training preset by file path or bundled name; returns it and its folder.
    pub fn load(name_or_path: &str, overrides: &[String]) -> Result<(TrainPreset, PathBuf)> {
        let Some(found) = crate::preset::find_text(name_or_path, BUNDLED)? else {
            return Err(Error::config(
                "training preset",
                format!(
                    "`{name_or_path}` is neither a file nor a bundled training preset ({})",
                    BUNDLED
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        Ok((
            TrainPreset::from_toml(&found.text, &found.origin, overrides)?,
            found.base_dir,
        ))
    }

    pub fn validate(&self) -> Result<()> {
        if self.name.trim().is_empty() {
            return Err(Error::config("name", "must not be empty"));
        }
        match (&self.image, self.images.is_empty()) {
            (Some(image), true) => {
                if image.shape.is_some() || image.inline.is_some() {
                    return Err(Error::config(
                        "image",
                        "training needs an image: give `sample` or `path`",
                    ));
                }
            }
            (Some(_), false) => {
                return Err(Error::config(
                    "images",
                    "give one `[image]` or a list of `[[images]]`, not both",
                ));
            }
            (None, true) => {
                return Err(Error::config(
                    "image",
                    "training needs an `[image]` or a list of `[[images]]`",
                ));
            }
            (None, false) => {}
        }
        for (i, e) in self.images.iter().enumerate() {
            e.validate(&format!("images[{i}]"))?;
        }
        for (i, e) in self.held_out.iter().enumerate() {
            e.validate(&format!("held_out[{i}]"))?;
        }
        data::check_disjoint(&self.training_images(), &self.held_out, self.seed)?;
        self.train.validate()?;
        match &self.denoiser {
            DenoiserConfig::Dncnn(c) => c.validate(),
            DenoiserConfig::Drunet(c) => {
                if c.opponent_colour {
                    return Err(Error::config(
                        "denoiser.opponent_colour",
                        "tessera train trains the one-channel network itself, on grey images: \
                         leave opponent_colour out (it is for denoising colour images with it)",
                    ));
                }
                if self.train.crop.is_some_and(|c| c % 8 != 0 || c < 32) {
                    return Err(Error::config(
                        "train.crop",
                        "DRUNet trains on crops that are multiples of 8 and at least 32",
                    ));
                }
                c.validate()
            }
            _ => Err(Error::config(
                "denoiser.kind",
                "tessera train trains native `dncnn` and `drunet` denoisers",
            )),
        }
    }
}

impl TrainPreset {
    /// What a run of this preset holds per rank on `world` ranks, `ranks_here` of them on this
    /// machine (see [`crate::memory::train_denoiser`]), from the images' headers and sizes — no
    /// image is loaded. `tessera serve` checks it on rank 0 before the ranks see the job, and every
    /// rank before it loads anything.
    pub fn memory(
        &self,
        base_dir: &Path,
        world: usize,
        ranks_here: usize,
    ) -> Result<crate::memory::Parts> {
        let entries = self.training_images();
        let volumetric = entries.iter().any(TrainImage::volumetric);
        let excluded = data::held_out_files(&self.held_out, base_dir)?;
        let mut shapes = data::shapes(&entries, "images", base_dir, volumetric, &excluded)?;
        let first = shapes.first().cloned().unwrap_or_default();
        shapes.extend(data::shapes(
            &self.held_out,
            "held_out",
            base_dir,
            volumetric,
            &[],
        )?);
        let whole = match first.get(2..).unwrap_or(&[]) {
            s @ [_] | s @ [_, _] | s @ [_, _, _] => crate::nn::models::drunet::dims3(s),
            // Not an image: loading it says so.
            _ => [1; 3],
        };
        // A crop larger than the image is refused by the run itself, with its own message.
        let crop = match self.train.crop {
            Some(c) => whole.map(|n| if n > 1 { c.min(n) } else { n }),
            None => whole,
        };
        crate::memory::train_denoiser(
            &self.denoiser,
            &shapes,
            self.train.batch,
            crop,
            world,
            ranks_here,
        )
    }

    /// The training images as a list (the single `[image]` is a list of one).
    pub fn training_images(&self) -> Vec<TrainImage> {
        match &self.image {
            Some(image) => vec![TrainImage::from_source(image)],
            None => self.images.clone(),
        }
    }
}

/// How far this invocation trains.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunControl {
    /// Stop once this many steps (counted from the start of training) are done, writing a
    /// checkpoint to resume from.
    pub stop_after: Option<usize>,
    /// Continue from the checkpoint in the output folder.
    pub resume: bool,
}

/// The score of the trained network on one held-out image at one noise level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOutScore {
    pub image: String,
    pub sigma: f32,
    /// PSNR (peak 1) of the noisy input and of the network's output against the clean image.
    pub noisy_psnr_db: f64,
    pub denoised_psnr_db: f64,
}

/// One reported step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossPoint {
    pub step: usize,
    /// Mean squared error of the batch (before this step's update).
    pub loss: f64,
}

/// What a training run did, as written to `train.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainSummary {
    pub name: String,
    pub denoiser: String,
    pub parameters: usize,
    pub ranks: usize,
    pub grid: [usize; 3],
    /// Steps run (fewer than the preset's when stopped).
    pub steps: usize,
    /// Stopped before the preset's last step (by the user, or by `--stop-after`).
    #[serde(default)]
    pub stopped_early: bool,
    /// The step this invocation resumed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<usize>,
    /// The images crops were drawn from.
    #[serde(default)]
    pub training_images: Vec<String>,
    pub loss: Vec<LossPoint>,
    /// Held-out images scored after training (none when stopped early).
    #[serde(default)]
    pub held_out: Vec<HeldOutScore>,
    /// Per rank, this invocation: seconds computing and seconds exchanging (halos, gradient sums).
    pub compute_secs: Vec<f64>,
    pub exchange_secs: Vec<f64>,
    pub weights: PathBuf,
}

/// Trains on every rank of `comm` (each rank calls this); rank 0 writes the outputs into `out_dir`.
/// `control` stops early (with a checkpoint) or resumes from `out_dir`'s checkpoint. `on_report` is
/// called on every rank after each reported step; when it breaks on rank 0 (a user's Stop), every
/// rank ends the run there, writes a checkpoint, and the weights reached so far are written as usual.
pub fn train(
    preset: &TrainPreset,
    base_dir: &Path,
    out_dir: &Path,
    comm: &dyn Collective,
    control: &RunControl,
    on_report: &mut dyn FnMut(&LossPoint) -> ControlFlow<()>,
) -> Result<TrainSummary> {
    preset.validate()?;
    let cfg = &preset.train;
    if control.stop_after == Some(0) {
        return Err(Error::config("stop-after", "must be ≥ 1 step"));
    }
    let entries = preset.training_images();
    let volumetric = entries.iter().any(TrainImage::volumetric);
    let excluded = data::held_out_files(&preset.held_out, base_dir)?;
    // Before any image is loaded or a batch allocated: a run that cannot fit is refused here.
    let world = comm.world_size();
    preset
        .memory(base_dir, world, crate::memory::ranks_here(world))?
        .check()?;
    let images = data::load_images(
        &entries,
        "images",
        base_dir,
        preset.seed,
        volumetric,
        &excluded,
    )?;
    if images.is_empty() {
        return Err(Error::config(
            "images",
            "every training image is also a held-out image",
        ));
    }
    let held_out = data::load_images(
        &preset.held_out,
        "held_out",
        base_dir,
        preset.seed,
        volumetric,
        &[],
    )?;
    let axes = images[0].image.ndim() - 2;
    let channels = images[0].image.shape()[1];
    let (mut net, with_sigma, describe) = network(&preset.denoiser, base_dir, preset.seed)?;
    if net.rank() != axes {
        return Err(Error::config(
            "denoiser.dim",
            format!(
                "the network is {}-D but the training image has {axes} spatial axes",
                net.rank()
            ),
        ));
    }
    let want_in = net.in_channels() - usize::from(with_sigma);
    for im in images.iter().chain(&held_out) {
        let shape = im.image.shape();
        if shape.len() - 2 != axes || shape[1] != want_in || net.out_channels() != want_in {
            return Err(Error::config(
                "denoiser.in_channels",
                format!(
                    "the network maps {want_in} → {} channels of {axes}-D images, but image {} is {:?} (set grayscale or the channel counts)",
                    net.out_channels(),
                    im.name,
                    &shape[1..]
                ),
            ));
        }
    }
    let dims: Vec<[usize; 3]> = images
        .iter()
        .map(|im| crate::nn::models::drunet::dims3(im.image.spatial()))
        .collect();
    let crop = match cfg.crop {
        Some(c) => {
            let mut d = [1; 3];
            d.iter_mut().skip(3 - axes).for_each(|v| *v = c);
            let foot = cfg.augment.footprint(d);
            if let Some((im, _)) = images
                .iter()
                .zip(&dims)
                .find(|(_, dm)| (0..3).any(|a| foot[a] > dm[a]))
            {
                let what = if foot == d {
                    format!("{c}")
                } else {
                    format!(
                        "{c} at the largest augmentation scale ({:?})",
                        &foot[3 - axes..]
                    )
                };
                return Err(Error::config(
                    "train.crop",
                    format!(
                        "{what} is larger than the image {} ({:?})",
                        im.name,
                        im.image.spatial()
                    ),
                ));
            }
            d
        }
        None if images.len() == 1 => dims[0],
        None => {
            return Err(Error::config(
                "train.crop",
                "training on whole images needs a single image; give a crop size",
            ));
        }
    };
    let grid = Grid::for_axes(cfg.grid.as_deref(), axes, world, crop, "train.grid")?;
    net.shapes(crop)?;
    let partition = SpatialPartition::new(comm, grid)?;
    let me = comm.rank();
    let block = grid.block(crop, me);
    let image_names: Vec<String> = images.iter().map(|im| im.name.clone()).collect();
    let wholes: Vec<Features> = images
        .into_iter()
        .zip(&dims)
        .map(|(im, d)| Features {
            batch: 1,
            channels,
            dims: *d,
            data: im.image.into_data(),
        })
        .collect();
    let mut adam = Adam::new(net.param_count());
    let mut loss_curve = Vec::new();
    let mut first_step = 0;
    if control.resume {
        let state = checkpoint::read_on_root(comm, out_dir, preset, net.param_count())?;
        let mut at = 0;
        for p in net.params_mut() {
            p.copy_from_slice(&state.params[at..at + p.len()]);
            at += p.len();
        }
        adam = Adam::from_state(state.adam_t, state.adam_m, state.adam_v);
        loss_curve = state.loss;
        first_step = state.step;
        tracing::info!("resuming `{}` at step {first_step}", preset.name);
    }
    let last_step = control.stop_after.map_or(cfg.steps, |s| s.min(cfg.steps));
    if last_step <= first_step {
        return Err(Error::config(
            "stop-after",
            format!("the checkpoint is already at step {first_step}; stop after a later step"),
        ));
    }
    let save_checkpoint = |net: &Network, adam: &Adam, step: usize, loss: &[LossPoint]| {
        if me != 0 {
            return Ok(());
        }
        let (t, m, v) = adam.state();
        let state = checkpoint::Checkpoint {
            step,
            adam_t: t,
            params: net
                .params()
                .iter()
                .flat_map(|(_, _, p)| p.iter().copied())
                .collect(),
            adam_m: m.to_vec(),
            adam_v: v.to_vec(),
            loss: loss.to_vec(),
        };
        std::fs::create_dir_all(out_dir).map_err(|e| Error::io("creating", out_dir, e))?;
        checkpoint::write(out_dir, preset, &state)
    };
    let total = (cfg.batch * channels * crop.iter().product::<usize>()) as f64;
    let start = Instant::now();
    let mut steps_done = first_step;
    for step in first_step..last_step {
        let mut rng = rand::rngs::StdRng::seed_from_u64(mix(preset.seed, step as u64));
        // The same crops and levels on every rank; each rank copies its block of each crop.
        let mut clean = Features {
            batch: cfg.batch,
            channels,
            dims: block.dims(),
            data: crate::heap::try_vec(
                cfg.batch
                    .saturating_mul(channels)
                    .saturating_mul(block.volume()),
                0.0,
                "a batch of training crops",
            )?,
        };
        let mut sigmas = Vec::with_capacity(cfg.batch);
        let plane = block.volume() * channels;
        for b in 0..cfg.batch {
            let part = if cfg.augment.is_active() {
                // The whole varied crop on every rank (the same draws), then this rank's block.
                let scales = &cfg.augment.scales;
                let scale = scales[rng.random_range(0..scales.len())];
                let (index, corner) =
                    data::draw_crop(&mut rng, &dims, augment::scaled(crop, scale));
                sigmas.push(cfg.sigma[rng.random_range(0..cfg.sigma.len())]);
                let v = cfg.augment.draw(&mut rng, channels);
                let whole = augment::crop(&wholes[index], dims[index], corner, scale, crop, &v)?;
                copy_region(&whole, &Region::whole(crop), &block)
            } else {
                let (index, corner) = data::draw_crop(&mut rng, &dims, crop);
                sigmas.push(cfg.sigma[rng.random_range(0..cfg.sigma.len())]);
                let at = Region {
                    lo: std::array::from_fn(|a| block.lo[a] + corner[a]),
                    hi: std::array::from_fn(|a| block.hi[a] + corner[a]),
                };
                copy_region(&wholes[index], &Region::whole(dims[index]), &at)
            };
            clean.data[b * plane..(b + 1) * plane].copy_from_slice(&part.data);
        }
        let noisy = add_noise(
            &clean,
            &block,
            crop,
            &sigmas,
            mix(preset.seed ^ NOISE_KEY, step as u64),
        );
        let input = if with_sigma {
            append_sigma_channel(&noisy, &sigmas)
        } else {
            noisy
        };
        let mut tape = net.forward_train(input, crop, &partition)?;
        let y = tape.output();
        let mut sq = 0f64;
        let dy = Features {
            batch: y.batch,
            channels: y.channels,
            dims: y.dims,
            data: y
                .data
                .iter()
                .zip(&clean.data)
                .map(|(y, c)| {
                    let r = (*y - *c) as f64;
                    sq += r * r;
                    (2.0 * r / total) as f32
                })
                .collect(),
        };
        let mut grads = net.zero_grads();
        net.backward(&mut tape, dy, &partition, &mut grads, false)?;
        drop(tape);
        let loss = sum_f64(comm, sq)? / total;
        if !loss.is_finite() {
            return Err(Error::NonFinite {
                what: format!("the training loss at step {step}"),
                count: 1,
            });
        }
        let progress = step as f64 / cfg.steps.max(2).saturating_sub(1) as f64;
        let lr = cfg.learning_rate * (0.55 + 0.45 * (std::f64::consts::PI * progress).cos());
        adam.step(net.params_mut(), &grads.data, lr);
        steps_done = step + 1;
        let mut stop = false;
        if step % cfg.log_every == 0 || step + 1 == cfg.steps {
            let point = LossPoint { step, loss };
            let asked = on_report(&point).is_break();
            loss_curve.push(point);
            stop = agree_to_stop(comm, asked)? && steps_done < cfg.steps;
        }
        if steps_done < cfg.steps
            && (stop
                || steps_done == last_step
                || (cfg.checkpoint_every > 0 && steps_done % cfg.checkpoint_every == 0))
        {
            save_checkpoint(&net, &adam, steps_done, &loss_curve)?;
        }
        if stop {
            break;
        }
    }
    let stats = partition.take_stats();
    let elapsed = start.elapsed().as_secs_f64();
    let exchange = stats.exchange_time.as_secs_f64();
    let per_rank: Vec<[f64; 2]> = wire::all_gather_as(
        comm,
        "compute and exchange seconds",
        &[elapsed - exchange, exchange],
    )?;
    let finished = steps_done == cfg.steps;
    let scores = if finished {
        score_held_out(preset, &net, with_sigma, &held_out, comm)?
    } else {
        Vec::new()
    };
    let weights = out_dir.join(&cfg.weights);
    if me == 0 {
        std::fs::create_dir_all(out_dir).map_err(|e| Error::io("creating", out_dir, e))?;
        let sd = net.state_dict(&format!("tessera train {}", preset.name))?;
        check_finite_weights(&sd)?;
        crate::nn::weights::safetensors::write(&sd, &weights)?;
        let mut trained = preset.denoiser.clone();
        set_weights(&mut trained, PathBuf::from(&cfg.weights));
        let toml = toml::to_string(&trained)
            .map_err(|e| Error::format(out_dir.join("denoiser.toml"), e.to_string()))?;
        crate::io::write_atomic(&out_dir.join("denoiser.toml"), toml.as_bytes())?;
    }
    let summary = TrainSummary {
        name: preset.name.clone(),
        denoiser: describe,
        parameters: net.param_count(),
        ranks: world,
        grid: grid.shape,
        steps: steps_done,
        stopped_early: steps_done < cfg.steps,
        resumed_from: control.resume.then_some(first_step),
        training_images: image_names,
        loss: loss_curve,
        held_out: scores,
        compute_secs: per_rank.iter().map(|t| t[0]).collect(),
        exchange_secs: per_rank.iter().map(|t| t[1]).collect(),
        weights,
    };
    if me == 0 {
        crate::io::write_json_atomic(&out_dir.join(crate::io::TRAIN_SUMMARY_FILE), &summary)?;
    }
    Ok(summary)
}

const NOISE_KEY: u64 = 0x6e6f_6973_6521;
/// Keys the held-out images' noise (image index and σ index mixed in).
const EVAL_KEY: u64 = 0x6576_616c_7561_7465;

/// PSNR of the noisy input and of the network on each held-out image at each evaluation σ, each
/// image decomposed over the group as in training (so the scores do not depend on the ranks).
fn score_held_out(
    preset: &TrainPreset,
    net: &Network,
    with_sigma: bool,
    held_out: &[data::NamedImage],
    comm: &dyn Collective,
) -> Result<Vec<HeldOutScore>> {
    let sigmas = if preset.train.eval_sigma.is_empty() {
        &preset.train.sigma
    } else {
        &preset.train.eval_sigma
    };
    let mut scores = Vec::new();
    for (i, im) in held_out.iter().enumerate() {
        let dims = crate::nn::models::drunet::dims3(im.image.spatial());
        let axes = im.image.ndim() - 2;
        let grid = Grid::for_axes(None, axes, comm.world_size(), dims, "held_out")?;
        let partition = SpatialPartition::new(comm, grid)?;
        let block = grid.block(dims, comm.rank());
        let whole = Features {
            batch: 1,
            channels: im.image.shape()[1],
            dims,
            data: im.image.data().to_vec(),
        };
        let clean = copy_region(&whole, &Region::whole(dims), &block);
        for (j, &sigma) in sigmas.iter().enumerate() {
            let key = mix(preset.seed ^ EVAL_KEY, ((i as u64) << 32) | j as u64);
            let noisy = add_noise(&clean, &block, dims, &[sigma], key);
            let input = if with_sigma {
                append_sigma_channel(&noisy, &[sigma])
            } else {
                noisy.clone()
            };
            let out = net.forward(input, dims, &partition)?;
            let sq = |x: &Features| -> f64 {
                x.data
                    .iter()
                    .zip(&clean.data)
                    .map(|(a, b)| ((*a - *b) as f64).powi(2))
                    .sum()
            };
            let n = (whole.data.len()) as f64;
            let psnr = |s: f64| -10.0 * (s / n).log10();
            let score = HeldOutScore {
                image: im.name.clone(),
                sigma,
                noisy_psnr_db: psnr(sum_f64(comm, sq(&noisy))?),
                denoised_psnr_db: psnr(sum_f64(comm, sq(&out))?),
            };
            tracing::info!(
                "held out {} at σ {sigma}: noisy {:.2} dB, denoised {:.2} dB",
                score.image,
                score.noisy_psnr_db,
                score.denoised_psnr_db
            );
            scores.push(score);
        }
    }
    Ok(scores)
}

/// The graph to train, whether it takes a noise-level channel (DRUNet), and a description.
fn network(cfg: &DenoiserConfig, base_dir: &Path, seed: u64) -> Result<(Network, bool, String)> {
    let (mut net, loaded, with_sigma, what) = match cfg {
        DenoiserConfig::Dncnn(c) => {
            let (arch, net, loaded) = c.network_to_train(base_dir)?;
            let what = format!(
                "dncnn(depth {}, nf {}, {}→{})",
                arch.depth, arch.nf, arch.in_channels, arch.out_channels
            );
            (net, loaded, false, what)
        }
        DenoiserConfig::Drunet(c) => {
            let (arch, net, loaded) = c.network_to_train(base_dir)?;
            let what = format!(
                "drunet(nc {:?}, nb {}, {}→{})",
                arch.nc, arch.nb, arch.in_channels, arch.out_channels
            );
            (net, loaded, true, what)
        }
        _ => {
            return Err(Error::config(
                "denoiser.kind",
                "tessera train trains native `dncnn` and `drunet` denoisers",
            ));
        }
    };
    if !loaded {
        he_initialise(&mut net, seed);
    }
    Ok((net, with_sigma, what))
}

/// Refuses to save weights that are not all finite (a diverged run): a NaN network must not be
/// written where `tessera denoise` or a preset would load it.
pub fn check_finite_weights(sd: &crate::nn::StateDict) -> Result<()> {
    for (key, t) in sd.iter() {
        t.check_finite(&format!("weight `{key}`"))?;
    }
    Ok(())
}

/// He-normal weights (std √(2/fan_in), fan_in as PyTorch counts it: `shape[1]·Πkernel`), zero
/// biases; the last layer's weights scaled by 0.1 so a residual network starts near the identity.
/// The last convolution of each residual block (DRUNet's `….res.2.weight`) starts at zero, so each
/// block starts as the identity: with He weights in both convolutions every block doubles the
/// signal's variance, and DRUNet's 14 blocks and skip additions started its outputs at ~10³ (a
/// first loss of 10⁵ that took hundreds of steps to come down).
fn he_initialise(net: &mut Network, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let kinds: Vec<(bool, bool, usize)> = net
        .params()
        .iter()
        .map(|(name, shape, _)| {
            (
                name.ends_with(".bias"),
                name.ends_with(".res.2.weight"),
                shape[1..].iter().product(),
            )
        })
        .collect();
    let last_weight = kinds.iter().rposition(|(bias, _, _)| !bias);
    for (i, (p, (bias, residual_out, fan_in))) in
        net.params_mut().into_iter().zip(kinds).enumerate()
    {
        if bias || residual_out {
            p.fill(0.0);
        } else {
            let scale = if Some(i) == last_weight { 0.1 } else { 1.0 };
            let he = crate::nn::weights::source::he(&mut rng, p.len(), fan_in);
            p.iter_mut().zip(he).for_each(|(w, v)| *w = v * scale);
        }
    }
}

fn set_weights(cfg: &mut DenoiserConfig, path: PathBuf) {
    match cfg {
        DenoiserConfig::Dncnn(c) => c.weights = Some(path),
        DenoiserConfig::Drunet(c) => c.weights = Some(path),
        _ => {}
    }
}

/// `x + σ_b·n`, `n` standard normal drawn from a counter-based generator keyed by the voxel's index
/// in the whole crop, so every decomposition draws the same noise.
fn add_noise(x: &Features, block: &Region, crop: [usize; 3], sigmas: &[f32], key: u64) -> Features {
    let bd = block.dims();
    let mut out = x.clone();
    let plane = block.volume();
    for (b, &sigma) in sigmas.iter().enumerate().take(x.batch) {
        for c in 0..x.channels {
            let p = (b * x.channels + c) * plane;
            let item = ((b * x.channels + c) * crop.iter().product::<usize>()) as u64;
            for z in 0..bd[0] {
                for y in 0..bd[1] {
                    for xx in 0..bd[2] {
                        let g = [
                            block.lo[0] as usize + z,
                            block.lo[1] as usize + y,
                            block.lo[2] as usize + xx,
                        ];
                        let idx = item + ((g[0] * crop[1] + g[1]) * crop[2] + g[2]) as u64;
                        let v = &mut out.data[p + (z * bd[1] + y) * bd[2] + xx];
                        *v += sigma * normal(key, idx);
                    }
                }
            }
        }
    }
    out
}

/// `x` with a channel of its item's noise level appended (DRUNet's input).
fn append_sigma_channel(x: &Features, sigmas: &[f32]) -> Features {
    let s = x.spatial_len();
    let c = x.channels;
    let mut f = Features::zeros(x.batch, c + 1, x.dims);
    for (b, &sigma) in sigmas.iter().enumerate().take(x.batch) {
        f.data[b * (c + 1) * s..][..c * s].copy_from_slice(&x.data[b * c * s..][..c * s]);
        f.data[(b * (c + 1) + c) * s..][..s].fill(sigma);
    }
    f
}

/// SplitMix64 of `a` combined with `b`.
pub(crate) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(0x632b_e59b_d9b4_e019);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A standard normal number for `(key, index)` (Box–Muller on two hashed uniforms).
fn normal(key: u64, index: u64) -> f32 {
    let h1 = mix(key, 2 * index);
    let h2 = mix(key, 2 * index + 1);
    let u1 = ((h1 >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (h2 >> 11) as f64 / (1u64 << 53) as f64;
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// The sum of `v` over ranks, added in rank order (the same on every rank).
fn sum_f64(comm: &dyn Collective, v: f64) -> Result<f64> {
    let all: Vec<f64> = wire::all_gather_as(comm, "a partial sum", &v)?;
    Ok(all.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_does_not_depend_on_the_decomposition() {
        let crop = [1, 13, 17];
        let whole = Region::whole(crop);
        let x = Features::zeros(2, 2, crop);
        let full = add_noise(&x, &whole, crop, &[0.5, 1.0], 42);
        let grid = Grid { shape: [1, 2, 3] };
        for r in 0..grid.ranks() {
            let block = grid.block(crop, r);
            let xb = copy_region(&x, &whole, &block);
            let got = add_noise(&xb, &block, crop, &[0.5, 1.0], 42);
            assert_eq!(got, copy_region(&full, &whole, &block), "rank {r}");
        }
        // Roughly standard normal, scaled per item.
        let n = crop.iter().product::<usize>() * 2;
        let var: f64 = full.data[n..]
            .iter()
            .map(|v| (*v as f64).powi(2))
            .sum::<f64>()
            / n as f64;
        assert!((var - 1.0).abs() < 0.15, "variance {var}");
    }

    /// A fresh DRUNet's output is of the input's scale (each residual block starts as the
    /// identity); with He weights in both convolutions of every block it was ~10² – 10³.
    #[test]
    fn a_fresh_drunet_starts_at_the_scale_of_its_input() {
        let cfg = DenoiserConfig::Drunet(crate::nn::DrunetConfig {
            in_channels: 1,
            out_channels: 1,
            nc: vec![16, 32, 64, 128],
            nb: 2,
            ..Default::default()
        });
        let (net, with_sigma, _) = network(&cfg, Path::new(""), 30).unwrap();
        assert!(with_sigma);
        let dims = [1, 32, 32];
        let mut x = Features::zeros(1, 2, dims);
        for (i, v) in x.data.iter_mut().enumerate() {
            *v = if i < 1024 {
                ((i * 37) % 101) as f32 / 100.0
            } else {
                0.1
            };
        }
        let y = net.forward(x, dims, &crate::nn::Whole).unwrap();
        let rms = (y.data.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 1024.0).sqrt();
        assert!(rms < 1.0, "a fresh DRUNet's output has rms {rms}");
    }

    #[test]
    fn bundled_training_presets_parse_and_round_trip() {
        for (name, _) in BUNDLED {
            let (p, _) = TrainPreset::load(name, &[]).unwrap();
            let text = toml::to_string(&p).unwrap();
            assert_eq!(TrainPreset::from_toml(&text, "round trip", &[]).unwrap(), p);
        }
        let e = TrainPreset::load("train-dncnn", &["version=2".into()]).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
    }
}
