//! DRUNet (Zhang et al. 2021, deepinv `models/drunet.py`) on the native kernels.
//!
//! Four scales with `nc[i]` channels and `nb` residual blocks `x + conv(relu(conv(x)))` per scale,
//! 2×2 stride-2 convolutions down, 2×2 stride-2 transposed convolutions up, additive skips, no
//! biases; the noise level enters as an extra constant input channel (`cat(x, σ)`). 2-D networks use
//! 3×3 convolutions, 3-D networks 3×3×3. Sizes follow deepinv's `forward` exactly:
//! - every spatial size a multiple of 8 and > 31: the U-Net runs as is;
//! - else, if some size is < 64: edge-replicate padding at the high end of every axis to a multiple
//!   of 16 (deepinv's `test_pad`), then crop;
//! - else (2-D): four overlapping corner crops of a multiple-of-64 size, each run alone and pasted
//!   back by quadrant (deepinv's `test_onesplit`, `refield = 64`). deepinv raises for 3-D here;
//!   tessera pads as in the previous case instead.
//!
//! Weight names are deepinv's `state_dict` keys (`m_head.weight`, `m_down1.0.res.0.weight`, …,
//! `m_tail.weight`), so PyTorch checkpoints load unchanged.

use std::sync::OnceLock;

use crate::denoise::{Denoiser, check_sigma};
use crate::error::{Error, Result};
use crate::nn::kernels::conv::{Conv, ConvTranspose, Features};
use crate::nn::layers::graph::Network;
use crate::nn::layers::partition::{BlockDenoiser, Grid, Partition, Region, Whole, add_region};
use crate::nn::weights::StateDict;
use crate::nn::weights::source::{LayerKind, WeightSource, inflate_2d_to_3d};
use crate::tensor::Tensor;

/// The architecture: what deepinv's `DRUNet(in_channels, out_channels, nc, nb, dim)` is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrunetArch {
    /// Image channels (the network sees one more: the noise level map).
    pub in_channels: usize,
    pub out_channels: usize,
    /// Channels per scale (deepinv default `[64, 128, 256, 512]`).
    pub nc: [usize; 4],
    /// Residual blocks per scale (deepinv default 4), ≥ 1.
    pub nb: usize,
    /// Spatial axes: 2 or 3.
    pub dim: usize,
}

impl Default for DrunetArch {
    fn default() -> Self {
        DrunetArch {
            in_channels: 3,
            out_channels: 3,
            nc: [64, 128, 256, 512],
            nb: 4,
            dim: 2,
        }
    }
}

/// Builds deepinv's `forward_unet` as a graph: head, three scales down (residual blocks
/// `x + conv(relu(conv(x)))`, then a 2×2 stride-2 convolution), the body blocks, three scales up
/// (add the skip, 2×2 stride-2 transposed convolution, residual blocks), add the first skip, tail.
/// Every spatial size must be a multiple of 8.
pub(crate) fn build_unet(arch: &DrunetArch, src: &mut WeightSource) -> Result<Network> {
    let r = arch.dim;
    let nb = arch.nb;
    let nc = arch.nc;
    let mut net = Network::new(r, arch.in_channels + 1);
    let conv3 = |src: &mut WeightSource, name: &str, c_in: usize, c_out: usize, relu: bool| {
        let w = src.weight(
            &format!("{name}.weight"),
            LayerKind::Conv,
            [c_out, c_in, 3],
            r,
        )?;
        Ok::<_, Error>(Conv::new(r, c_in, c_out, 3, 1, 1, w, None, relu))
    };
    let block = |net: &mut Network, src: &mut WeightSource, prefix: &str, c: usize| {
        let x = net.last();
        let c1 = conv3(src, &format!("{prefix}.res.0"), c, c, true)?;
        let t = net.conv(&format!("{prefix}.res.0"), x, None, c1);
        let c2 = conv3(src, &format!("{prefix}.res.2"), c, c, false)?;
        net.conv(&format!("{prefix}.res.2"), t, Some(x), c2);
        Ok::<_, Error>(())
    };
    let head = conv3(src, "m_head", arch.in_channels + 1, nc[0], false)?;
    let mut skips = vec![net.conv("m_head", 0, None, head)];
    for i in 0..3 {
        let (c, c_next) = (nc[i], nc[i + 1]);
        let name = format!("m_down{}", i + 1);
        for j in 0..nb {
            block(&mut net, src, &format!("{name}.{j}"), c)?;
        }
        let key = format!("{name}.{nb}");
        let w = src.weight(&format!("{key}.weight"), LayerKind::Conv, [c_next, c, 2], r)?;
        let x = net.last();
        skips.push(net.conv(
            &key,
            x,
            None,
            Conv::new(r, c, c_next, 2, 2, 0, w, None, false),
        ));
    }
    // deepinv's `sequential` unwraps a single module, so one body block has no index.
    for j in 0..nb {
        let prefix = if nb == 1 {
            "m_body".to_string()
        } else {
            format!("m_body.{j}")
        };
        block(&mut net, src, &prefix, nc[3])?;
    }
    for i in (1..4).rev() {
        let (c, c_prev) = (nc[i], nc[i - 1]);
        let name = format!("m_up{i}");
        let x = net.last();
        let sum = net.add(x, skips.pop().expect("skip"));
        let key = format!("{name}.0");
        let w = src.weight(
            &format!("{key}.weight"),
            LayerKind::Transposed,
            [c, c_prev, 2],
            r,
        )?;
        net.conv_transpose(&key, sum, ConvTranspose::new_2x(r, c, c_prev, w));
        for j in 0..nb {
            block(&mut net, src, &format!("{name}.{}", j + 1), c_prev)?;
        }
    }
    let x = net.last();
    let sum = net.add(x, skips.pop().expect("skip"));
    let tail = conv3(src, "m_tail", nc[0], arch.out_channels, false)?;
    net.conv("m_tail", sum, None, tail);
    Ok(net)
}

/// The same network with every 2-D kernel inflated to 3-D (see [`inflate_2d_to_3d`]).
fn inflated(net: &Network) -> Network {
    net.map_layers(
        |c| {
            let k = c.kernel[1];
            let w = inflate_2d_to_3d(&c.weight, LayerKind::Conv, c.c_out * c.c_in, k);
            Conv::new(
                3,
                c.c_in,
                c.c_out,
                k,
                c.stride[1],
                c.pad[1],
                w,
                c.bias.clone(),
                c.relu,
            )
        },
        |t| {
            let w = inflate_2d_to_3d(&t.weight, LayerKind::Transposed, t.c_in * t.c_out, 2);
            ConvTranspose::new_2x(3, t.c_in, t.c_out, w)
        },
        3,
    )
}

/// A DRUNet denoiser on the native engine.
pub struct Drunet {
    arch: DrunetArch,
    net: Network,
    /// With 2-D weights and no fixed `dim`, a 5-D input runs an inflated copy, built on first use.
    inflate_on_demand: bool,
    net3d: OnceLock<Network>,
    /// Where the weights came from, or `None` for random weights.
    weights_from: Option<String>,
}

impl Drunet {
    /// Builds the network with the weights of `dict` (deepinv key names). With `inflate_3d`, `dict`
    /// holds 2-D weights and `arch.dim` must be 3. Every key must be used.
    pub fn from_state_dict(arch: DrunetArch, dict: StateDict, inflate_3d: bool) -> Result<Self> {
        check_arch(&arch)?;
        let source = dict.source().to_string();
        let mut src = WeightSource::Dict {
            dict,
            inflate: inflate_3d,
        };
        let net = build_unet(&arch, &mut src)?;
        src.finish()?;
        Ok(Drunet {
            arch,
            net,
            inflate_on_demand: false,
            net3d: OnceLock::new(),
            weights_from: Some(source),
        })
    }

    /// Builds the network with seeded random weights: for timing only, its output means nothing
    /// (a warning is logged, and [`Denoiser::name`] says so).
    pub fn random(arch: DrunetArch, seed: u64) -> Result<Self> {
        check_arch(&arch)?;
        tracing::warn!(
            "DRUNet built with RANDOM weights (no `weights` file): its output is meaningless; use it for timing only"
        );
        let net = build_unet(&arch, &mut WeightSource::random(seed))?;
        Ok(Drunet {
            arch,
            net,
            inflate_on_demand: false,
            net3d: OnceLock::new(),
            weights_from: None,
        })
    }

    /// Lets a 2-D network also denoise volumes `(B, C, D, H, W)`, with its kernels inflated to 3-D
    /// (built on the first 5-D input).
    pub fn with_inflation_on_demand(mut self) -> Self {
        self.inflate_on_demand = self.arch.dim == 2;
        self
    }

    pub fn arch(&self) -> &DrunetArch {
        &self.arch
    }

    /// The network graph (for training and spatial decomposition); its input is the image
    /// channels plus the noise-level channel.
    pub fn network(&self) -> &Network {
        &self.net
    }

    fn net_for(&self, rank: usize) -> Result<&Network> {
        if rank == self.arch.dim + 2 {
            Ok(&self.net)
        } else if rank == 5 && self.inflate_on_demand {
            Ok(self.net3d.get_or_init(|| inflated(&self.net)))
        } else {
            Err(Error::Unsupported(format!(
                "this DRUNet is {}-D and takes (B, C, {}) arrays, got a {rank}-D array",
                self.arch.dim,
                if self.arch.dim == 3 {
                    "D, H, W"
                } else {
                    "H, W"
                }
            )))
        }
    }
}

pub(crate) fn check_arch(arch: &DrunetArch) -> Result<()> {
    if !(1..=64).contains(&arch.in_channels) {
        return Err(Error::config(
            "denoiser.in_channels",
            format!("must be in 1..=64, got {}", arch.in_channels),
        ));
    }
    if !(1..=64).contains(&arch.out_channels) {
        return Err(Error::config(
            "denoiser.out_channels",
            format!("must be in 1..=64, got {}", arch.out_channels),
        ));
    }
    if arch.nc.iter().any(|&c| !(1..=4096).contains(&c)) {
        return Err(Error::config(
            "denoiser.nc",
            format!("every channel count must be in 1..=4096, got {:?}", arch.nc),
        ));
    }
    if !(1..=64).contains(&arch.nb) {
        return Err(Error::config(
            "denoiser.nb",
            format!("must be in 1..=64, got {}", arch.nb),
        ));
    }
    if !(2..=3).contains(&arch.dim) {
        return Err(Error::config(
            "denoiser.dim",
            format!("must be 2 or 3, got {}", arch.dim),
        ));
    }
    Ok(())
}

/// `[D, H, W]` of a 2-D (`[H, W]`) or 3-D spatial shape.
pub(crate) fn dims3(spatial: &[usize]) -> [usize; 3] {
    match *spatial {
        [w] => [1, 1, w],
        [h, w] => [1, h, w],
        [d, h, w] => [d, h, w],
        _ => unreachable!("rank checked"),
    }
}

/// `x` with a constant channel `sigma` appended (DRUNet's noise-level map).
fn with_sigma_channel(x: &Features, sigma: f32) -> Features {
    let s = x.spatial_len();
    let c = x.channels;
    let mut f = Features::zeros(x.batch, c + 1, x.dims);
    for b in 0..x.batch {
        f.data[b * (c + 1) * s..][..c * s].copy_from_slice(&x.data[b * c * s..][..c * s]);
        f.data[(b * (c + 1) + c) * s..][..s].fill(sigma);
    }
    f
}

/// `block` (of the map `dims`) shifted by `offset`.
fn shifted(r: &Region, offset: [usize; 3]) -> Region {
    Region {
        lo: std::array::from_fn(|a| r.lo[a] + offset[a] as isize),
        hi: std::array::from_fn(|a| r.hi[a] + offset[a] as isize),
    }
}

/// Whether DRUNet runs `net` once over `dims` as they are (sides multiples of 8, at least 32), with
/// no padding or splitting around it.
fn runs_whole(net: &Network, dims: [usize; 3]) -> bool {
    dims[3 - net.rank()..].iter().all(|&s| s % 8 == 0 && s > 31)
}

impl BlockDenoiser for Drunet {
    fn out_channels(&self) -> usize {
        self.arch.out_channels
    }

    fn halo_volumes(
        &self,
        dims: [usize; 3],
        spatial_axes: usize,
        grid: Grid,
    ) -> Result<Option<Vec<(String, usize)>>> {
        let net = self.net_for(spatial_axes + 2)?;
        match runs_whole(net, dims) {
            true => net.halo_volumes(dims, grid).map(Some),
            false => Ok(None),
        }
    }

    /// deepinv's DRUNet `forward` (with its size handling) on this rank's block `x` (`C` image
    /// channels) of a batch with `spatial_axes` (2 or 3) axes of global size `dims`; returns this
    /// rank's block of the output. On one process the partition is [`Whole`] and the block is the
    /// whole image.
    fn denoise_block(
        &self,
        x: &Features,
        dims: [usize; 3],
        spatial_axes: usize,
        sigma: f32,
        partition: &dyn Partition<f32>,
    ) -> Result<Features> {
        check_sigma("denoiser", sigma)?;
        let net = self.net_for(spatial_axes + 2)?;
        if x.channels != self.arch.in_channels {
            return Err(Error::shape(
                "drunet input channels",
                &[self.arch.in_channels],
                &[x.channels],
            ));
        }
        let grid = partition.grid();
        let me = partition.rank();
        if runs_whole(net, dims) {
            return net.forward(with_sigma_channel(x, sigma), dims, partition);
        }
        let spatial = &dims[3 - net.rank()..];
        let out_c = self.arch.out_channels;
        if net.rank() == 3 || spatial.iter().any(|&s| s < 64) {
            // deepinv `test_pad(modulo=16)`: replicate-pad the high end, run, crop.
            let mut padded = dims;
            for a in 3 - net.rank()..3 {
                padded[a] = dims[a].div_ceil(16) * 16;
            }
            // Each padded block reads the image at min(i, n − 1): gather that, then replicate.
            let clamp = |r: Region| Region {
                lo: std::array::from_fn(|a| r.lo[a].min(dims[a] as isize - 1)),
                hi: std::array::from_fn(|a| (r.hi[a] - 1).min(dims[a] as isize - 1) + 1),
            };
            let needs: Vec<Region> = (0..grid.ranks())
                .map(|r| clamp(grid.block(padded, r)))
                .collect();
            let src = partition.gather(x, dims, &needs)?;
            let block = grid.block(padded, me);
            let xin = replicate_into(&src, &needs[me], &block);
            let y = net.forward(with_sigma_channel(&xin, sigma), padded, partition)?;
            // Crop: this rank's block of the output from the blocks of the padded output.
            let needs: Vec<Region> = (0..grid.ranks()).map(|r| grid.block(dims, r)).collect();
            return Ok(partition.gather(&y, padded, &needs)?.into_owned());
        }
        // deepinv `test_onesplit(refield=64)`: four corner crops of side (s/2/64 + 1)·64, each
        // denoised alone; each quadrant of the output comes from the crop at its corner.
        let (h, w) = (dims[1], dims[2]);
        let crop = [1, (h / 2 / 64 + 1) * 64, (w / 2 / 64 + 1) * 64];
        let own = grid.block(dims, me);
        let mut out = Features::zeros(x.batch, out_c, own.dims());
        for (top, left) in [(true, true), (true, false), (false, true), (false, false)] {
            let off = [
                0,
                if top { 0 } else { h - crop[1] },
                if left { 0 } else { w - crop[2] },
            ];
            let needs: Vec<Region> = (0..grid.ranks())
                .map(|r| shifted(&grid.block(crop, r), off))
                .collect();
            let xc = partition.gather(x, dims, &needs)?;
            let y = net.forward(with_sigma_channel(&xc, sigma), crop, partition)?;
            // Quadrant rows: top → 0..h/2 (first rows of the crop); bottom → h/2..h (last rows).
            let quadrant = Region {
                lo: [
                    0,
                    if top { 0 } else { h / 2 } as isize,
                    if left { 0 } else { w / 2 } as isize,
                ],
                hi: [
                    1,
                    if top { h / 2 } else { h } as isize,
                    if left { w / 2 } else { w } as isize,
                ],
            };
            // Each rank's part of this quadrant, in crop coordinates.
            let back = |r: &Region| Region {
                lo: std::array::from_fn(|a| r.lo[a] - off[a] as isize),
                hi: std::array::from_fn(|a| r.hi[a] - off[a] as isize),
            };
            let needs: Vec<Region> = (0..grid.ranks())
                .map(|r| back(&grid.block(dims, r).intersect(&quadrant)))
                .collect();
            let part = partition.gather(&y, crop, &needs)?;
            let at = own.intersect(&quadrant);
            if !at.is_empty() {
                add_region(&mut out, &own, &part, &at);
            }
        }
        Ok(out)
    }
}

/// The block `to` of a map whose voxel `i` is the source voxel `min(i, last)`, from `src` holding the
/// clamped region `src_at` (edge replication at the high end).
fn replicate_into(src: &Features, src_at: &Region, to: &Region) -> Features {
    let td = to.dims();
    let sd = src_at.dims();
    let mut out = Features::zeros(src.batch, src.channels, td);
    let (sv, tv) = (src.spatial_len(), out.spatial_len());
    let idx = |a: usize, i: usize| {
        let g = (to.lo[a] + i as isize).min(src_at.hi[a] - 1);
        (g - src_at.lo[a]) as usize
    };
    for p in 0..src.batch * src.channels {
        for z in 0..td[0] {
            for y in 0..td[1] {
                let srow = &src.data[p * sv + (idx(0, z) * sd[1] + idx(1, y)) * sd[2]..][..sd[2]];
                let drow = &mut out.data[p * tv + (z * td[1] + y) * td[2]..][..td[2]];
                for (xx, d) in drow.iter_mut().enumerate() {
                    *d = srow[idx(2, xx)];
                }
            }
        }
    }
    out
}

impl Denoiser for Drunet {
    fn name(&self) -> String {
        let a = &self.arch;
        let what = format!(
            "drunet({}D, {}→{} channels, nc {:?}, nb {}",
            a.dim, a.in_channels, a.out_channels, a.nc, a.nb
        );
        super::described(what, self.weights_from.as_deref())
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        check_sigma("denoiser", sigma)?;
        x.expect_rank("drunet", &[4, 5])?;
        let c = x.shape()[1];
        if x.numel() == 0 {
            return Err(Error::shape("drunet input", &[1], x.shape()));
        }
        let dims = dims3(x.spatial());
        let input = Features {
            batch: x.shape()[0],
            channels: c,
            dims,
            data: x.data().to_vec(),
        };
        let y = self.denoise_block(&input, dims, x.ndim() - 2, sigma, &Whole)?;
        let mut out_shape = x.shape().to_vec();
        out_shape[1] = self.arch.out_channels;
        Tensor::from_vec(&out_shape, y.data)
    }

    fn as_block_denoiser(&self) -> Option<&dyn BlockDenoiser> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_arch(dim: usize) -> DrunetArch {
        DrunetArch {
            in_channels: 2,
            out_channels: 2,
            nc: [4, 6, 8, 10],
            nb: 1,
            dim,
        }
    }

    #[test]
    fn random_network_says_so_and_keeps_shapes_of_any_size() {
        let net = Drunet::random(small_arch(2), 1).unwrap();
        assert!(net.name().contains("RANDOM"), "{}", net.name());
        for (h, w) in [(32, 40), (17, 9), (70, 130), (64, 64), (1, 1)] {
            let x = Tensor::from_fn(&[2, 2, h, w], |i| (i % 7) as f32 * 0.1);
            let y = net.denoise(&x, 0.1).unwrap();
            assert_eq!(y.shape(), &[2, 2, h, w]);
            assert!(y.data().iter().all(|v| v.is_finite()));
        }
        let e = net
            .denoise(&Tensor::zeros(&[1, 3, 32, 32]), 0.1)
            .unwrap_err();
        assert!(e.to_string().contains("channels"), "{e}");
        let e = net
            .denoise(&Tensor::zeros(&[1, 2, 8, 32, 32]), 0.1)
            .unwrap_err();
        assert!(e.to_string().contains("2-D"), "{e}");
        assert!(net.denoise(&Tensor::zeros(&[1, 2, 32, 32]), -1.0).is_err());
    }

    #[test]
    fn batch_items_are_independent() {
        let net = Drunet::random(small_arch(2), 2).unwrap();
        let x = Tensor::from_fn(&[3, 2, 40, 24], |i| ((i * 37) % 101) as f32 / 101.0);
        let y = net.denoise(&x, 0.05).unwrap();
        for b in 0..3 {
            let yb = net.denoise(&x.batch_range(b, b + 1), 0.05).unwrap();
            assert!(yb.max_abs_diff(&y.batch_range(b, b + 1)) < 1e-5);
        }
    }

    #[test]
    fn inflated_network_on_stacked_slices_reproduces_the_2d_output() {
        let net = Drunet::random(small_arch(2), 3)
            .unwrap()
            .with_inflation_on_demand();
        let (h, w, d) = (24, 40, 5);
        let x2 = Tensor::from_fn(&[1, 2, h, w], |i| ((i * 13) % 29) as f32 / 29.0);
        let y2 = net.denoise(&x2, 0.1).unwrap();
        let mut v = Vec::new();
        for c in 0..2 {
            for _ in 0..d {
                v.extend_from_slice(x2.plane(c));
            }
        }
        let x3 = Tensor::from_vec(&[1, 2, d, h, w], v).unwrap();
        let y3 = net.denoise(&x3, 0.1).unwrap();
        for c in 0..2 {
            for z in 0..d {
                let slice = &y3.plane(c)[z * h * w..(z + 1) * h * w];
                let e = slice
                    .iter()
                    .zip(y2.plane(c))
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(e < 1e-4, "channel {c} slice {z}: {e}");
            }
        }
    }

    #[test]
    fn onesplit_quadrants_come_from_their_corner_crop() {
        // 72×136: not multiples of 8 and ≥ 64, so the four-crop path runs. A constant image gives
        // the same answer by every path (the network is translation-equivariant away from edges
        // only, so compare against a padded run at the centre instead of the whole image).
        let net = Drunet::random(small_arch(2), 4).unwrap();
        let x = Tensor::from_fn(&[1, 2, 72, 136], |i| ((i * 7) % 17) as f32 / 17.0);
        let y = net.denoise(&x, 0.1).unwrap();
        // The top-left quadrant equals the network run on the top-left 64×128 crop.
        let mut crop_data = Vec::new();
        for c in 0..2 {
            for r in 0..64 {
                crop_data.extend_from_slice(&x.plane(c)[r * 136..r * 136 + 128]);
            }
        }
        let xc = Tensor::from_vec(&[1, 2, 64, 128], crop_data).unwrap();
        let yc = net.denoise(&xc, 0.1).unwrap();
        for c in 0..2 {
            for r in 0..36 {
                for col in 0..68 {
                    let a = y.plane(c)[r * 136 + col];
                    let b = yc.plane(c)[r * 128 + col];
                    assert!((a - b).abs() < 1e-5, "({c},{r},{col}) {a} vs {b}");
                }
            }
        }
    }
}
