//! Data augmentation for `tessera train` (`[train.augment]`): each training crop is cut from the
//! image at one of several scales (a square `s·crop` wide, averaged down by `s`), turned by one of
//! the eight symmetries of the square (flips and quarter turns of the last two axes) and, with colour
//! jitter, each channel scaled by its own gain. Every choice comes from the step's seeded generator,
//! so a preset trains the same on any number of ranks and when resumed: the whole crop is built on
//! every rank (crops are small) and each rank then keeps its block.

use rand::RngExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::nn::Features;
use crate::nn::layers::partition::{Region, copy_region};

/// How the training crops are varied; the default changes nothing (and draws nothing, so presets
/// without `[train.augment]` train exactly as before it existed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Augment {
    /// Flip and turn each crop by one of the eight symmetries of the square, drawn uniformly.
    pub flips: bool,
    /// Integer scale factors, drawn uniformly per crop: a crop at scale `s` covers `s·crop` pixels
    /// of the image per axis, averaged over `s×s` blocks (zoomed out, which also lowers its noise-free
    /// detail like a smaller photograph would). `[1]` = the image's own scale only.
    pub scales: Vec<usize>,
    /// Colour jitter: each channel of a crop is multiplied by a gain drawn uniformly from
    /// `[1 − j, 1 + j]` and clipped to 0..1 (brightness and white balance); 0 = none.
    pub colour_jitter: f32,
}

impl Default for Augment {
    fn default() -> Self {
        Augment {
            flips: false,
            scales: vec![1],
            colour_jitter: 0.0,
        }
    }
}

impl Augment {
    /// Whether any augmentation is asked for.
    pub fn is_active(&self) -> bool {
        *self != Augment::default()
    }

    /// The default (left out of a preset written as TOML).
    pub fn is_inactive(&self) -> bool {
        !self.is_active()
    }

    pub fn validate(&self) -> Result<()> {
        if self.scales.is_empty() || self.scales.contains(&0) {
            return Err(Error::config(
                "train.augment.scales",
                format!(
                    "give one or more integer scale factors ≥ 1, got {:?}",
                    self.scales
                ),
            ));
        }
        if !(0.0..1.0).contains(&self.colour_jitter) {
            return Err(Error::config(
                "train.augment.colour_jitter",
                format!("must be in [0, 1), got {}", self.colour_jitter),
            ));
        }
        Ok(())
    }

    /// The largest region (per axis) a crop of side `crop` is cut from.
    pub fn footprint(&self, crop: [usize; 3]) -> [usize; 3] {
        let s = self.scales.iter().copied().max().unwrap_or(1);
        scaled(crop, s)
    }

    /// Draws how one crop is varied (after the crop's scale and position are drawn).
    pub fn draw(&self, rng: &mut impl rand::Rng, channels: usize) -> Variation {
        let symmetry = if self.flips {
            rng.random_range(0..8u8)
        } else {
            0
        };
        let gains = (0..channels)
            .map(|_| {
                if self.colour_jitter > 0.0 {
                    1.0 + self.colour_jitter * rng.random_range(-1.0f32..=1.0)
                } else {
                    1.0
                }
            })
            .collect();
        Variation { symmetry, gains }
    }
}

/// `crop` at scale `s` on its spatial axes (a 2-D crop keeps its depth of 1).
pub fn scaled(crop: [usize; 3], s: usize) -> [usize; 3] {
    crop.map(|n| if n > 1 { n * s } else { n })
}

/// One crop's symmetry and channel gains.
#[derive(Debug, Clone, PartialEq)]
pub struct Variation {
    /// Bit 0: flip the last axis; bit 1: flip the second-last axis; bit 2: swap the two.
    pub symmetry: u8,
    pub gains: Vec<f32>,
}

/// The crop of `whole` (one image, `dims`) whose scaled footprint starts at `corner`, averaged down
/// by `scale` to `crop`, varied by `v`: the whole crop, `(1, C, crop)`.
pub fn crop(
    whole: &Features,
    dims: [usize; 3],
    corner: [isize; 3],
    scale: usize,
    crop: [usize; 3],
    v: &Variation,
) -> Result<Features> {
    let foot = scaled(crop, scale);
    let at = Region {
        lo: corner,
        hi: std::array::from_fn(|a| corner[a] + foot[a] as isize),
    };
    let big = copy_region(whole, &Region::whole(dims), &at);
    let small = downsample(&big, foot, scale, crop);
    let [d, h, w] = crop;
    if v.symmetry & 4 != 0 && h != w {
        return Err(Error::Internal(format!(
            "augment: a quarter turn needs a square crop, got {h}×{w}"
        )));
    }
    let mut out = Features::zeros(1, whole.channels, crop);
    for c in 0..whole.channels {
        let g = v.gains.get(c).copied().unwrap_or(1.0);
        for z in 0..d {
            for y in 0..h {
                for x in 0..w {
                    let (mut sy, mut sx) = if v.symmetry & 4 != 0 { (x, y) } else { (y, x) };
                    if v.symmetry & 1 != 0 {
                        sx = w - 1 - sx;
                    }
                    if v.symmetry & 2 != 0 {
                        sy = h - 1 - sy;
                    }
                    let value = small.data[((c * d + z) * h + sy) * w + sx];
                    out.data[((c * d + z) * h + y) * w + x] = if g == 1.0 {
                        value
                    } else {
                        (value * g).clamp(0.0, 1.0)
                    };
                }
            }
        }
    }
    Ok(out)
}

/// The mean of each `scale`-wide block (of the spatial axes longer than 1) of `x` (`foot`) → `crop`.
fn downsample(x: &Features, foot: [usize; 3], scale: usize, crop: [usize; 3]) -> Features {
    if scale == 1 {
        return x.clone();
    }
    let f = |n: usize| if n > 1 { scale } else { 1 };
    let (fz, fy, fx) = (f(crop[0]), f(crop[1]), f(crop[2]));
    let inv = 1.0 / (fz * fy * fx) as f32;
    let mut out = Features::zeros(x.batch, x.channels, crop);
    let [d, h, w] = crop;
    for p in 0..x.batch * x.channels {
        let src = &x.data[p * foot.iter().product::<usize>()..];
        for z in 0..d {
            for y in 0..h {
                for xx in 0..w {
                    let mut sum = 0.0f32;
                    for dz in 0..fz {
                        for dy in 0..fy {
                            let row = ((z * fz + dz) * foot[1] + y * fy + dy) * foot[2] + xx * fx;
                            sum += src[row..row + fx].iter().sum::<f32>();
                        }
                    }
                    out.data[((p * d + z) * h + y) * w + xx] = sum * inv;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ramp(channels: usize, dims: [usize; 3]) -> Features {
        let mut f = Features::zeros(1, channels, dims);
        for (i, v) in f.data.iter_mut().enumerate() {
            *v = i as f32 / 1000.0;
        }
        f
    }

    #[test]
    fn the_eight_symmetries_are_distinct_and_keep_the_pixels() {
        let dims = [1, 4, 4];
        let whole = ramp(1, dims);
        let mut seen = Vec::new();
        for symmetry in 0..8 {
            let v = Variation {
                symmetry,
                gains: vec![1.0],
            };
            let out = crop(&whole, dims, [0, 0, 0], 1, dims, &v).unwrap();
            let mut sorted = out.data.clone();
            sorted.sort_by(f32::total_cmp);
            assert_eq!(sorted, whole.data, "symmetry {symmetry} keeps every pixel");
            assert!(!seen.contains(&out.data), "symmetry {symmetry} repeats one");
            seen.push(out.data);
        }
        // Symmetry 1 flips the columns: the first row reversed.
        assert_eq!(&seen[1][..4], &[0.003, 0.002, 0.001, 0.0]);
        // Symmetry 4 transposes: the first row is the first column.
        assert_eq!(&seen[4][..4], &[0.0, 0.004, 0.008, 0.012]);
    }

    #[test]
    fn a_scaled_crop_is_the_block_mean_of_its_footprint() {
        let dims = [1, 6, 8];
        let whole = ramp(2, dims);
        let v = Variation {
            symmetry: 0,
            gains: vec![1.0, 1.0],
        };
        let out = crop(&whole, dims, [0, 2, 4], 2, [1, 2, 2], &v).unwrap();
        // Channel 1, output pixel (1, 0): rows 4–5, columns 4–5 of the second plane.
        let at = |c: usize, y: usize, x: usize| whole.data[(c * 6 + y) * 8 + x];
        let want = (at(1, 4, 4) + at(1, 4, 5) + at(1, 5, 4) + at(1, 5, 5)) / 4.0;
        assert!((out.data[4 + 2] - want).abs() < 1e-6);
        assert_eq!(out.dims, [1, 2, 2]);
    }

    #[test]
    fn gains_scale_each_channel_and_clip_to_the_image_range() {
        let dims = [1, 2, 2];
        let mut whole = Features::zeros(1, 2, dims);
        whole.data = vec![0.2, 0.4, 0.6, 0.8, 0.5, 0.5, 0.5, 0.9];
        let v = Variation {
            symmetry: 0,
            gains: vec![0.5, 1.5],
        };
        let out = crop(&whole, dims, [0, 0, 0], 1, dims, &v).unwrap();
        assert_eq!(out.data, vec![0.1, 0.2, 0.3, 0.4, 0.75, 0.75, 0.75, 1.0]);
    }

    #[test]
    fn draws_repeat_for_a_seed_and_cover_every_symmetry() {
        let a = Augment {
            flips: true,
            scales: vec![1, 2],
            colour_jitter: 0.1,
        };
        let draw = |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            (0..64).map(|_| a.draw(&mut rng, 3)).collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
        let all = draw(5);
        for s in 0..8 {
            assert!(all.iter().any(|v| v.symmetry == s), "symmetry {s} drawn");
        }
        assert!(
            all.iter()
                .flat_map(|v| &v.gains)
                .all(|g| (0.9..=1.1).contains(g))
        );
        // Without augmentation nothing is drawn from the generator.
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let none = Augment::default().draw(&mut rng, 3);
        assert_eq!(none.symmetry, 0);
        assert_eq!(
            rng.random_range(0..u64::MAX),
            rand::rngs::StdRng::seed_from_u64(1).random_range(0..u64::MAX)
        );
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let e = Augment {
            scales: vec![0],
            ..Augment::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("train.augment.scales"), "{e}");
        let e = Augment {
            colour_jitter: 1.5,
            ..Augment::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("colour_jitter"), "{e}");
    }
}
