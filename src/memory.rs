//! Will a job fit in memory? An estimate of what one rank holds — network weights, the
//! activations of one denoiser call (a batch of tiles, or the whole image), and the image with its
//! working copies and every measurement — against what the machine (or its cgroup) has available,
//! so a job that cannot run is refused with both numbers before it starts instead of getting the
//! process killed.
//!
//! The estimate follows the structure of the computation, not a measurement: weights are counted
//! exactly (deepinv's DRUNet and DnCNN layouts), activations and image copies approximately (the
//! buffers alive at the peak). It errs on the generous side only for activations, so a job refused
//! here would not have run.

use crate::denoise::DenoiserConfig;
use crate::error::{Error, Result, human_bytes as human};
use crate::nn::{DncnnConfig, DrunetConfig};
use crate::preset::Preset;
use crate::tiling::{Decomposition, TilingConfig};

const F32: u64 = 4;
/// Working copies of the image an algorithm keeps (iterate, previous iterate, gradient, denoiser
/// input and output, ground truth, back-projection).
const IMAGE_COPIES: u64 = 7;
/// Copies of every measurement (the data, and the forward image of each iteration).
const MEASUREMENT_COPIES: u64 = 2;

/// What one rank of a job needs, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    pub weights_bytes: u64,
    /// One denoiser call: `batch` windows of `window_elems` elements each.
    pub activations_bytes: u64,
    pub batch: u64,
    pub image_bytes: u64,
    /// Ranks that share this machine's memory.
    pub ranks_here: u64,
}

impl MemoryEstimate {
    pub fn per_rank_bytes(&self) -> u64 {
        self.weights_bytes
            .saturating_add(self.activations_bytes)
            .saturating_add(self.image_bytes)
    }

    /// What the ranks on this machine need together.
    pub fn total_bytes(&self) -> u64 {
        self.per_rank_bytes().saturating_mul(self.ranks_here)
    }

    /// Fails with both numbers when the job needs more than `available_bytes`.
    pub fn check_fits(&self, available_bytes: u64) -> Result<()> {
        fits(self.total_bytes(), available_bytes, self)
    }
}

/// `Ok` when `needed_bytes` fit in `available_bytes`; else the refusal with the estimate.
fn fits(needed_bytes: u64, available_bytes: u64, estimate: &dyn std::fmt::Display) -> Result<()> {
    if needed_bytes <= available_bytes {
        return Ok(());
    }
    Err(Error::InsufficientMemory {
        needed_bytes,
        available_bytes,
        detail: estimate.to_string(),
    })
}

/// The estimate's tail when several ranks share this machine.
fn write_ranks(f: &mut std::fmt::Formatter<'_>, ranks_here: u64, total: u64) -> std::fmt::Result {
    if ranks_here > 1 {
        write!(
            f,
            "; × {ranks_here} ranks on this machine = {}",
            human(total)
        )?;
    }
    Ok(())
}

impl std::fmt::Display for MemoryEstimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "≈ {} per rank: weights {}, activations {} (a denoiser call on {} window(s)), image and \
             measurements {}",
            human(self.per_rank_bytes()),
            human(self.weights_bytes),
            human(self.activations_bytes),
            self.batch,
            human(self.image_bytes),
        )?;
        write_ranks(f, self.ranks_here, self.total_bytes())
    }
}

/// The estimate for `preset` on an image of shape `x_shape` `(B, C, …)`, with `measurement_elems`
/// elements in all its measurements together, run by `world` ranks of which `ranks_here` share this
/// machine.
pub fn estimate(
    preset: &Preset,
    x_shape: &[usize],
    measurement_elems: u64,
    world: usize,
    ranks_here: usize,
) -> Result<MemoryEstimate> {
    estimate_with(
        preset.denoiser.as_ref(),
        preset.tiling.as_ref(),
        x_shape,
        measurement_elems,
        (world, ranks_here),
    )
}

/// The estimate for `tessera denoise`: one process applying `denoiser` (tiled by `tiling`) to an
/// array of shape `x_shape` `(B, C, …)`.
pub fn denoise(
    denoiser: &DenoiserConfig,
    tiling: Option<&TilingConfig>,
    x_shape: &[usize],
) -> Result<MemoryEstimate> {
    let mut shape = x_shape.to_vec();
    while shape.len() < 4 {
        shape.insert(0, 1);
    }
    estimate_with(Some(denoiser), tiling, &shape, 0, (1, 1))
}

/// [`estimate`] from its parts: the denoiser and tiling of a job (none: the algorithm alone).
fn estimate_with(
    denoiser: Option<&DenoiserConfig>,
    tiling: Option<&TilingConfig>,
    x_shape: &[usize],
    measurement_elems: u64,
    (world, ranks_here): (usize, usize),
) -> Result<MemoryEstimate> {
    let image_elems: u64 = elems(x_shape);
    let d = x_shape.len().saturating_sub(2) as u32;
    // The windows one denoiser call sees: this rank's share of the tiles, at most
    // `max_batch_size` at a time; without tiling, the whole image.
    let tiling = tiling
        .map(|t| t.decomposition().map(|d| (t, d)))
        .transpose()?;
    let (window_elems, batch) = match tiling {
        // An exact spatial decomposition: each rank runs the network once on its block (about
        // 1/world of the image; the halo is small next to it).
        Some((_, Decomposition::Spatial)) => (
            image_elems / x_shape.get(1).copied().unwrap_or(1).max(1) as u64 / world.max(1) as u64,
            1,
        ),
        Some((t, Decomposition::Tiles(strategy))) => {
            let plan = strategy.plan(&x_shape[2..])?;
            let window: u64 = plan
                .tiles()
                .iter()
                .map(|t| t.window_shape().iter().map(|&s| s as u64).product::<u64>())
                .max()
                .unwrap_or(0);
            let mine = plan.num_tiles().div_ceil(world.max(1)) as u64;
            let batch = t
                .max_batch_size
                .map_or(mine, |b| (b as u64).min(mine))
                .max(1);
            // Per channel-less voxel; channels are counted per layer below.
            (window * x_shape[0] as u64, batch)
        }
        None => (
            image_elems / x_shape.get(1).copied().unwrap_or(1).max(1) as u64,
            1,
        ),
    };
    let channels = x_shape.get(1).copied().unwrap_or(1) as u64;
    let (weights, per_voxel) = match denoiser {
        Some(DenoiserConfig::Drunet(c)) => drunet(c, d),
        Some(DenoiserConfig::Dncnn(c)) => dncnn(c, d),
        // Classical denoisers keep a few image-sized buffers per channel.
        Some(_) => (0, 6 * channels),
        None => (0, 0),
    };
    Ok(MemoryEstimate {
        weights_bytes: weights.saturating_mul(F32),
        activations_bytes: batch
            .saturating_mul(window_elems)
            .saturating_mul(per_voxel)
            .saturating_mul(F32),
        batch,
        image_bytes: image_elems
            .saturating_mul(IMAGE_COPIES)
            .saturating_add(measurement_elems.saturating_mul(MEASUREMENT_COPIES))
            .saturating_mul(F32),
        ranks_here: ranks_here.max(1) as u64,
    })
}

/// DRUNet (deepinv's layout, no biases): parameters, and floats alive per input voxel at the
/// peak — the skip tensors of the four scales, two working tensors at full resolution, and the
/// input with its noise-level channel (three times over in the opponent colour space).
pub fn drunet(c: &DrunetConfig, d: u32) -> (u64, u64) {
    let k = 3u64.pow(d);
    let nc: Vec<u64> = c.nc.iter().map(|&n| n as u64).collect();
    let (nb, cin, cout) = (c.nb as u64, c.in_channels as u64, c.out_channels as u64);
    let down = 2u64.pow(d);
    let blocks = |n: u64| nb * 2 * n * n * k;
    let mut params = (cin + 1) * nc[0] * k + nc[0] * cout * k + blocks(nc[3]);
    for s in 0..3 {
        // Residual blocks on the way down and up, the strided conv down and the transposed up.
        params += 2 * blocks(nc[s]) + 2 * nc[s] * nc[s + 1] * down;
    }
    let skips: u64 = (0..4).map(|s| nc[s] / down.pow(s as u32).max(1)).sum();
    // In the opponent colour space each colour pixel is three one-channel items, in one batch.
    let items = if c.opponent_colour { 3 } else { 1 };
    (params, items * (2 * skips + 2 * nc[0] + cin + 1))
}

/// DnCNN (deepinv's layout): parameters, and floats alive per voxel (two hidden tensors).
pub fn dncnn(c: &DncnnConfig, d: u32) -> (u64, u64) {
    let k = 3u64.pow(d);
    let (nf, cin, cout, depth) = (
        c.nf as u64,
        c.in_channels as u64,
        c.out_channels as u64,
        c.depth as u64,
    );
    let bias = |n: u64| if c.bias { n } else { 0 };
    let params = cin * nf * k
        + bias(nf)
        + depth.saturating_sub(2) * (nf * nf * k + bias(nf))
        + nf * cout * k
        + bias(cout);
    (params, 2 * nf + cin + cout)
}

pub use crate::heap::available_bytes;

/// One rank's memory for a training job or an inversion, as named parts: each a buffer (or a group
/// of buffers) the computation holds at its peak, so a refusal says where the memory goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    /// What runs, e.g. `denoiser training`.
    pub job: &'static str,
    pub parts: Vec<(String, u64)>,
    /// Ranks that share this machine's memory.
    pub ranks_here: u64,
}

impl Parts {
    pub fn new(job: &'static str, ranks_here: usize) -> Parts {
        Parts {
            job,
            parts: Vec::new(),
            ranks_here: ranks_here.max(1) as u64,
        }
    }

    fn add(&mut self, what: impl Into<String>, bytes: u64) {
        self.parts.push((what.into(), bytes));
    }

    pub fn per_rank_bytes(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |sum, (_, b)| sum.saturating_add(*b))
    }

    pub fn total_bytes(&self) -> u64 {
        self.per_rank_bytes().saturating_mul(self.ranks_here)
    }

    /// Fails with the estimate and `available_bytes` when the job needs more.
    pub fn check_fits(&self, available_bytes: u64) -> Result<()> {
        fits(self.total_bytes(), available_bytes, self)
    }

    /// [`Parts::check_fits`] against what this machine (or cgroup) has available now; passes where
    /// that cannot be read.
    pub fn check(&self) -> Result<()> {
        match available_bytes() {
            Some(available) => self.check_fits(available),
            None => Ok(()),
        }
    }
}

/// A device job's memory per rank: the named parts of `device::solve::footprint`, for the
/// `ranks_on_device` ranks of this machine that share the device.
pub fn device_job(parts: Vec<(String, u64)>, ranks_on_device: usize) -> Parts {
    Parts {
        job: "device job",
        parts,
        ranks_here: ranks_on_device.max(1) as u64,
    }
}

impl Parts {
    /// Fails, naming the estimate, the free memory and `device` (`NVIDIA H100 80GB HBM3 (cuda:0)`),
    /// when the job needs more than the device's `free_bytes` of `total_bytes`.
    pub fn check_device(&self, device: &str, free_bytes: u64, total_bytes: u64) -> Result<()> {
        let detail = format!(
            "{device} has {} free of {}; {self}",
            human(free_bytes),
            human(total_bytes)
        );
        fits(self.total_bytes(), free_bytes, &detail)
    }
}

impl std::fmt::Display for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .parts
            .iter()
            .map(|(what, b)| format!("{what} {}", human(*b)))
            .collect();
        write!(
            f,
            "{}: ≈ {} per rank: {}",
            self.job,
            human(self.per_rank_bytes()),
            parts.join(", ")
        )?;
        write_ranks(f, self.ranks_here, self.total_bytes())
    }
}

/// Ranks of a `world`-rank group on this machine, as the launcher told this process
/// (`LOCAL_WORLD_SIZE` and its Open MPI, PMI and Slurm forms); all of them where it did not say.
pub fn ranks_here(world: usize) -> usize {
    crate::dist::env::RankInfo::discover(&Default::default())
        .ok()
        .filter(|i| i.world_size == world)
        .map_or(world, |i| i.local_world_size)
        .max(1)
}

/// Elements of an array of `shape`.
fn elems(shape: &[usize]) -> u64 {
    shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64))
}

/// What training a denoiser keeps per rank: the parameters with their gradients and Adam's two
/// f64 moments (replicated on every rank), the training and held-out images (every rank holds
/// them whole), and one step's batch — the clean and noisy crops, the network's input and the
/// output's gradient — with the activations kept for the backward pass (the tape: every node's
/// output, on this rank's share of each crop). `images` are the shapes `(1, C, …)` of the training
/// and held-out images, `crop` the crop's spatial size `[D, H, W]` (D = 1 for images), `blocks` the
/// ranks each crop is split over.
pub fn train_denoiser(
    denoiser: &DenoiserConfig,
    images: &[Vec<usize>],
    batch: usize,
    crop: [usize; 3],
    blocks: usize,
    ranks_here: usize,
) -> Result<Parts> {
    let d = images.first().map_or(2, |s| s.len().saturating_sub(2)) as u32;
    let channels = images.first().and_then(|s| s.get(1)).copied().unwrap_or(1) as u64;
    let (params, tape) = match denoiser {
        DenoiserConfig::Drunet(c) => (drunet(c, d).0, drunet_tape(c, crop)),
        DenoiserConfig::Dncnn(c) => (dncnn(c, d).0, dncnn_tape(c, crop)),
        _ => {
            return Err(Error::config(
                "denoiser.kind",
                "tessera train trains native `dncnn` and `drunet` denoisers",
            ));
        }
    };
    let blocks = blocks.max(1) as u64;
    let mut parts = Parts::new("denoiser training", ranks_here);
    // f32 weights and gradients, f64 first and second moments.
    parts.add(
        "weights, gradients and Adam moments",
        params.saturating_mul(F32 + F32 + 8 + 8),
    );
    let image_elems = images.iter().fold(0u64, |n, s| n.saturating_add(elems(s)));
    parts.add("images", image_elems.saturating_mul(F32));
    let block_voxels = elems(&crop).div_ceil(blocks);
    // Clean, noisy, network input (with a noise-level channel for DRUNet), output gradient.
    parts.add(
        format!("a batch of {batch} crops"),
        block_voxels
            .saturating_mul(4 * channels + 1)
            .saturating_mul(F32)
            .saturating_mul(batch as u64),
    );
    // The backward pass holds the gradients of about two node outputs at a time beside the tape:
    // an eighth of it is generous for every network tessera trains.
    parts.add(
        "activations kept for the backward pass",
        tape.div_ceil(blocks)
            .saturating_add(tape.div_ceil(8 * blocks))
            .saturating_mul(F32)
            .saturating_mul(batch as u64),
    );
    Ok(parts)
}

/// Voxels of a map of `crop` (`[D, H, W]`, D = 1 for images) after `s` halvings of its `d`
/// spatial axes.
fn voxels_at(crop: [usize; 3], d: usize, s: u32) -> u64 {
    crop.iter()
        .enumerate()
        .map(|(a, &n)| if a >= 3 - d { n >> s } else { n })
        .fold(1u64, |v, n| v.saturating_mul(n as u64))
}

/// DnCNN's training tape on one crop, in floats: the input, `depth − 1` hidden outputs and the
/// output (the nodes of [`crate::nn::Dncnn`]'s graph), all at the crop's size.
pub fn dncnn_tape(c: &DncnnConfig, crop: [usize; 3]) -> u64 {
    let (nf, depth) = (c.nf as u64, c.depth as u64);
    let per_voxel = (c.in_channels as u64)
        .saturating_add(depth.saturating_sub(1).saturating_mul(nf))
        .saturating_add(c.out_channels as u64);
    per_voxel.saturating_mul(elems(&crop))
}

/// DRUNet's training tape on one crop, in floats: every node of deepinv's U-Net (the head, two
/// convolutions per residual block, the strided convolutions down, the skip additions, the
/// transposed convolutions up, the tail), each scale at half the size per axis of the one above.
pub fn drunet_tape(c: &DrunetConfig, crop: [usize; 3]) -> u64 {
    let d = c.dim.unwrap_or(if crop[0] > 1 { 3 } else { 2 });
    let nc: Vec<u64> = c.nc.iter().map(|&n| n as u64).collect();
    let nb = c.nb as u64;
    let at = |ch: u64, s: u32| ch.saturating_mul(voxels_at(crop, d, s));
    let mut floats = at(c.in_channels as u64 + 1 + nc[0], 0);
    for s in 0..3u32 {
        floats += at(2 * nb * nc[s as usize], s) + at(nc[s as usize + 1], s + 1);
    }
    floats += at(2 * nb * nc[3], 3);
    for s in (1..4u32).rev() {
        // The skip addition, the transposed convolution up, the blocks of the scale above.
        floats += at(nc[s as usize], s) + at((1 + 2 * nb) * nc[s as usize - 1], s - 1);
    }
    floats + at(nc[0] + c.out_channels as u64, 0)
}

/// The sizes of a Multi-DSN network that its memory depends on (`dsn::network::DsnArch`'s, which
/// converts into this, so that the estimates need nothing of `dsn`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DsnNetwork {
    /// Side of the square single-channel images, in pixels.
    pub image_size: usize,
    /// Channels of the first convolution (the second has twice as many).
    pub width: usize,
    /// Length of the shared and of the private codes.
    pub code: usize,
    /// Hidden units of the task and domain classifiers.
    pub hidden: usize,
    /// Classes of the task.
    pub classes: usize,
}

/// What training a Multi-DSN keeps per rank: the shared parameters (shared encoder, decoder,
/// task and domain classifiers) and the private encoders of the `held` domains placed on this
/// rank, each with its gradient and Adam's two f64 moments; the shared gradients of every domain
/// (summed in domain order); the `images` of the held domains (`image_size`² floats each); and one
/// step's activations: per held domain a batch through both encoders and the decoder, kept for the
/// backward pass, split over `ranks_per_domain` ranks — their trunks' whole outputs gathered.
pub fn dsn(
    arch: &DsnNetwork,
    domains: usize,
    held: usize,
    images: u64,
    batch: usize,
    ranks_per_domain: usize,
    ranks_here: usize,
) -> Parts {
    let (w, code, hidden) = (arch.width as u64, arch.code as u64, arch.hidden as u64);
    let side = arch.image_size as u64;
    let pixels = side.saturating_mul(side);
    // The trunks' maps after two poolings: 2w channels of (side/4)².
    let trunk_len = 2 * w * (side / 4) * (side / 4);
    let conv = |c_in: u64, c_out: u64, k: u64| c_in * c_out * k + c_out;
    let linear = |i: u64, o: u64| i.saturating_mul(o).saturating_add(o);
    let encoder = conv(1, w, 9) + conv(w, 2 * w, 9) + linear(trunk_len, code);
    let decoder = linear(code, trunk_len)
        + conv(2 * w, 2 * w, 4)
        + conv(2 * w, w, 9)
        + conv(w, w, 4)
        + conv(w, 1, 9);
    let classifiers = linear(code, hidden)
        + linear(hidden, arch.classes as u64)
        + linear(code, hidden)
        + linear(hidden, domains as u64);
    let shared = encoder + decoder + classifiers;
    let params = shared.saturating_add(encoder.saturating_mul(held as u64));
    let mut parts = Parts::new("Multi-DSN training", ranks_here);
    parts.add(
        "weights, gradients and Adam moments",
        params.saturating_mul(F32 + F32 + 8 + 8),
    );
    parts.add(
        "shared gradients of every domain",
        shared.saturating_mul(domains as u64).saturating_mul(F32),
    );
    parts.add("images", images.saturating_mul(pixels).saturating_mul(F32));
    // Each encoder's trunk keeps 1 + w + w/4 + w/2 + w/8 maps of the image's size, the decoder's
    // as many: three networks per image, their gradients beside them.
    let per_image = pixels
        .saturating_mul(6 + 12 * w)
        .div_ceil(ranks_per_domain.max(1) as u64)
        .saturating_add(3 * trunk_len);
    parts.add(
        format!("activations of a batch of {batch} per domain"),
        per_image
            .saturating_mul((batch * held) as u64)
            .saturating_mul(F32),
    );
    parts
}

/// The numbers of a full-waveform inversion that size one rank's memory (see [`fwi`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwiSize {
    /// Model cells, and the propagation grid's (with absorbing layers and guard cells).
    pub cells: u64,
    pub padded_cells: u64,
    /// Recorded samples of the whole survey (receivers × samples, summed over shots).
    pub samples: u64,
    /// Bytes of the propagation's float (4 or 8).
    pub real_bytes: u64,
    /// Shots of one batch this rank models, and how many of them run at once (its threads).
    pub shots_per_rank: u64,
    pub shots_at_once: u64,
    /// Shots in a batch.
    pub batch: u64,
    /// One shot's gradient and its resampling ([`crate::physics::wave::Solver::gradient_bytes`]).
    pub shot_gradient_bytes: u64,
    /// One shot's forward modelling of the observed data, and how many rank 0 models at once
    /// (0 when the data are loaded).
    pub shot_forward_bytes: u64,
    pub modelled_at_once: u64,
}

/// What an inversion holds per rank: the velocity models (true and starting in f64, the current
/// one, Adam's moments, the summed gradient with the illumination, their f32 copies for events),
/// the observed data (decoded from rank 0's broadcast, then as gathers), the shots of a batch in
/// flight — or, on rank 0 before the first epoch, the survey being modelled — and the batch's
/// gradients gathered for the exact sum.
pub fn fwi(s: &FwiSize, ranks_here: usize) -> Parts {
    let t = s.real_bytes;
    let mut parts = Parts::new("full-waveform inversion", ranks_here);
    parts.add(
        "velocity models, Adam moments and gradient sums",
        s.cells
            .saturating_mul(2 * 8 + 9 * t + 3 * F32 + 1)
            .saturating_add(s.padded_cells.saturating_mul(3 * t)),
    );
    // The broadcast bytes and their f64 values, then the data twice in the propagation's float.
    parts.add("observed data", s.samples.saturating_mul(3 * 8 + 2 * t));
    let modelling = s.shot_forward_bytes.saturating_mul(s.modelled_at_once);
    let epoch = s
        .shot_gradient_bytes
        .saturating_mul(s.shots_at_once)
        // Each finished shot's gradient and illumination wait for the sum.
        .saturating_add(s.shots_per_rank.saturating_mul(3 * s.cells * t));
    let (what, at_once, bytes) = if modelling > epoch {
        ("modelling the observed data", s.modelled_at_once, modelling)
    } else {
        ("the shots of a batch in flight", s.shots_at_once, epoch)
    };
    parts.add(format!("{what} ({at_once} at once)"), bytes);
    parts.add(
        "a batch's gradients gathered for the exact sum",
        s.batch.saturating_mul(3 * s.cells).saturating_mul(2 * t),
    );
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick preset at `size`² with its `[denoiser]` table replaced by `denoiser` (TOML lines).
    fn preset(denoiser: &str, size: usize) -> Preset {
        let text = crate::preset::BUNDLED[0]
            .1
            .replace("size = [128, 128]", &format!("size = [{size}, {size}]"));
        let table = format!("denoiser={{{}}}", denoiser.replace('\n', ", "));
        Preset::from_toml(&text, "test", &[table]).unwrap()
    }

    #[test]
    fn absurd_networks_are_refused_with_both_numbers_and_the_quick_preset_fits() {
        let x = [1, 3, 128, 128];
        let dncnn = preset("kind = \"dncnn\"\ndepth = 1000\nnf = 4096", 128);
        let e = estimate(&dncnn, &x, 3 * 128 * 128, 2, 2).unwrap();
        // 998 hidden 3×3 convolutions of 4096² weights: ≈ 603 GB of weights alone.
        assert!(e.weights_bytes > 600_000_000_000, "{e}");
        let err = e.check_fits(24 << 30).unwrap_err().to_string();
        assert!(
            err.contains("GiB") && err.contains("available") && err.contains("weights"),
            "{err}"
        );
        let drunet = preset(
            "kind = \"drunet\"\nnc = [4096, 4096, 4096, 4096]\nnb = 64",
            128,
        );
        let e = estimate(&drunet, &x, 3 * 128 * 128, 2, 2).unwrap();
        assert!(e.check_fits(24 << 30).is_err(), "{e}");
        let quick = Preset::load("quick", &[]).unwrap().preset;
        let e = estimate(&quick, &x, 3 * 128 * 128, 1, 1).unwrap();
        assert!(e.total_bytes() < 64 << 20, "{e}");
        e.check_fits(available_bytes().unwrap()).unwrap();
    }

    #[test]
    fn activations_follow_the_tile_batch() {
        let mut p = preset("kind = \"dncnn\"", 512);
        p.tiling = Some(toml::from_str("patch_size = 64\noverlap = 8").unwrap());
        let x = [1, 3, 512, 512];
        let all = estimate(&p, &x, 0, 1, 1).unwrap();
        p.tiling.as_mut().unwrap().max_batch_size = Some(2);
        let two = estimate(&p, &x, 0, 1, 1).unwrap();
        assert_eq!(two.batch, 2);
        assert_eq!(all.batch, 64);
        assert_eq!(two.activations_bytes * 32, all.activations_bytes);
        // Two ranks share the tiles: half the batch each, twice the ranks on the machine.
        let shared = estimate(
            &{
                let mut q = p.clone();
                q.tiling.as_mut().unwrap().max_batch_size = None;
                q
            },
            &x,
            0,
            2,
            2,
        )
        .unwrap();
        assert_eq!(shared.batch, 32);
        assert_eq!(shared.weights_bytes, all.weights_bytes);
    }

    /// Σ channels × voxels over every node of the network `tessera train` builds.
    fn built_tape(net: &crate::nn::Network, crop: [usize; 3]) -> u64 {
        net.shapes(crop)
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, d)| net.channels(i) as u64 * d.iter().product::<usize>() as u64)
            .sum()
    }

    #[test]
    fn the_training_tape_is_every_node_of_the_built_network() {
        let here = std::path::Path::new("");
        for (dim, crop) in [(2, [1, 32, 24]), (3, [8, 8, 16])] {
            let dncnn = DncnnConfig {
                depth: 5,
                nf: 6,
                in_channels: 2,
                out_channels: 2,
                dim: Some(dim),
                weights: Some("random".into()),
                ..DncnnConfig::default()
            };
            let (_, net, _) = dncnn.network_to_train(here).unwrap();
            assert_eq!(dncnn_tape(&dncnn, crop), built_tape(&net, crop), "{dim}-D");
            let drunet = DrunetConfig {
                nc: vec![4, 6, 8, 10],
                nb: 2,
                in_channels: 1,
                out_channels: 1,
                dim: Some(dim),
                weights: Some("random".into()),
                ..DrunetConfig::default()
            };
            let (_, net, _) = drunet.network_to_train(here).unwrap();
            assert_eq!(
                drunet_tape(&drunet, crop),
                built_tape(&net, crop),
                "{dim}-D"
            );
        }
    }

    #[test]
    fn a_training_batch_that_cannot_fit_is_refused_and_the_bundled_preset_fits() {
        let p = crate::train::TrainPreset::load("train-dncnn", &[])
            .unwrap()
            .0;
        let image = vec![vec![1, 1, 256, 256]];
        let crop = p.train.crop.unwrap();
        let e = train_denoiser(&p.denoiser, &image, p.train.batch, [1, crop, crop], 1, 1).unwrap();
        assert!(e.total_bytes() < 256 << 20, "{e}");
        // The job: 100 000 crops of 64² through an 8-layer DnCNN of 32 features.
        let e = train_denoiser(&p.denoiser, &image, 100_000, [1, 64, 64], 1, 2).unwrap();
        assert!(e.total_bytes() > 100 << 30, "{e}");
        let err = e.check_fits(24 << 30).unwrap_err().to_string();
        assert!(
            err.contains("activations kept for the backward pass") && err.contains("available"),
            "{err}"
        );
    }
}
