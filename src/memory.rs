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
        if self.total_bytes() <= available_bytes {
            return Ok(());
        }
        Err(Error::InsufficientMemory {
            needed_bytes: self.total_bytes(),
            available_bytes,
            detail: self.to_string(),
        })
    }
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
        if self.ranks_here > 1 {
            write!(
                f,
                "; × {} ranks on this machine = {}",
                self.ranks_here,
                human(self.total_bytes())
            )?;
        }
        Ok(())
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
    let image_elems: u64 = x_shape.iter().map(|&d| d as u64).product();
    let d = x_shape.len().saturating_sub(2) as u32;
    // The windows one denoiser call sees: this rank's share of the tiles, at most
    // `max_batch_size` at a time; without tiling, the whole image.
    let (window_elems, batch) = match &preset.tiling {
        // An exact spatial decomposition: each rank runs the network once on its block (about
        // 1/world of the image; the halo is small next to it).
        Some(t) if t.kind == crate::tiling::TilingKind::Spatial => (
            image_elems / x_shape.get(1).copied().unwrap_or(1).max(1) as u64 / world.max(1) as u64,
            1,
        ),
        Some(t) => {
            let plan = t.build()?.plan(&x_shape[2..])?;
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
    let (weights, per_voxel) = match &preset.denoiser {
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
/// input with its noise-level channel.
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
    (params, 2 * skips + 2 * nc[0] + cin + 1)
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

/// Bytes this process may still allocate: the smaller of the system's `MemAvailable` and what its
/// cgroup's limit leaves (v2 `memory.max`, or v1 `memory.limit_in_bytes`); `None` when neither
/// can be read.
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    [meminfo, cgroup_left()].into_iter().flatten().min()
}

/// What this process's cgroup limit leaves, if it has one.
fn cgroup_left() -> Option<u64> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let num = |p: &str| read(p).and_then(|s| s.parse::<u64>().ok());
    // cgroup v2: the process's own group (`0::/path`), else the root of the mount.
    let group = read("/proc/self/cgroup").and_then(|c| {
        c.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(str::to_string)
    });
    for dir in group
        .iter()
        .map(|g| format!("/sys/fs/cgroup{g}"))
        .chain(["/sys/fs/cgroup".to_string()])
    {
        if let Some(max) = num(&format!("{dir}/memory.max")) {
            let used = num(&format!("{dir}/memory.current")).unwrap_or(0);
            return Some(max.saturating_sub(used));
        }
    }
    // cgroup v1 (an unlimited group reports a huge number, which `min` then ignores).
    let limit = num("/sys/fs/cgroup/memory/memory.limit_in_bytes")?;
    let used = num("/sys/fs/cgroup/memory/memory.usage_in_bytes").unwrap_or(0);
    Some(limit.saturating_sub(used))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preset(denoiser: &str, size: usize) -> Preset {
        let text = crate::preset::BUNDLED[0]
            .1
            .replace("kind = \"tv\"\nn_it_max = 20", denoiser)
            .replace("size = [128, 128]", &format!("size = [{size}, {size}]"));
        Preset::from_toml(&text, "test", &[]).unwrap()
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
        let quick = preset("kind = \"tv\"\nn_it_max = 20", 128);
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
}
