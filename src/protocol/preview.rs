//! Display images ([`PreviewImage`]) made from arrays: the one box-averaging implementation behind
//! `tessera serve`'s live previews and the workbench's own views (an opened image, a volume slice,
//! a preview larger than the window needs).
//!
//! An image is reduced by the smallest integer factor that brings both sides to at most `max_side`,
//! each output pixel the mean (accumulated in f64) of its block; blocks at the right and bottom
//! edges may be partial.

use super::messages::PreviewImage;
use crate::tensor::Tensor;

/// Which 2-D section of an array `(B, C, H, W)` or `(B, C, D, H, W)` to show (batch item 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Section {
    /// For a volume: the axis cut (0 = depth, 1 = rows, 2 = columns) and the index along it;
    /// `None` is the central depth slice. Ignored for images.
    pub cut: Option<(usize, usize)>,
    /// One channel shown alone; `None` shows colour when there are three channels, else channel 0.
    pub channel: Option<usize>,
}

/// Samples of one image: channel `c` of pixel `(y, x)` is
/// `data[base + c·channel_stride + y·row_stride + x·pixel_stride]`.
struct Strided<'a> {
    data: &'a [f32],
    base: usize,
    width: usize,
    height: usize,
    channels: usize,
    channel_stride: usize,
    row_stride: usize,
    pixel_stride: usize,
}

impl Strided<'_> {
    /// Box-averages into an interleaved image with both sides ≤ `max_side`.
    fn box_average(&self, max_side: usize, slice: Option<u32>) -> PreviewImage {
        let (w, h, c) = (self.width, self.height, self.channels);
        let factor = w.max(h).div_ceil(max_side.max(1)).max(1);
        let (out_w, out_h) = (w.div_ceil(factor), h.div_ceil(factor));
        let mut pixels = vec![0f32; out_w * out_h * c];
        for ci in 0..c {
            let plane = self.base + ci * self.channel_stride;
            for oy in 0..out_h {
                let ys = oy * factor..((oy + 1) * factor).min(h);
                for ox in 0..out_w {
                    let xs = ox * factor..((ox + 1) * factor).min(w);
                    let mut sum = 0f64;
                    for y in ys.clone() {
                        let row = plane + y * self.row_stride;
                        if self.pixel_stride == 1 {
                            sum += self.data[row + xs.start..row + xs.end]
                                .iter()
                                .map(|&v| v as f64)
                                .sum::<f64>();
                        } else {
                            sum += xs
                                .clone()
                                .map(|x| self.data[row + x * self.pixel_stride] as f64)
                                .sum::<f64>();
                        }
                    }
                    let n = ys.len() * xs.len();
                    pixels[(oy * out_w + ox) * c + ci] = (sum / n as f64) as f32;
                }
            }
        }
        PreviewImage {
            width: out_w as u32,
            height: out_h as u32,
            channels: c as u8,
            slice,
            pixels,
        }
    }
}

impl PreviewImage {
    /// The section of `x` to show, reduced to at most `max_side` per side. `None` for arrays that
    /// are not images or volumes, are empty, or where the section's channel or cut does not exist.
    pub fn of_tensor(x: &Tensor, section: Section, max_side: usize) -> Option<PreviewImage> {
        let shape = x.shape();
        let (c, d, h, w) = match *shape {
            [_, c, h, w] => (c, 1, h, w),
            [_, c, d, h, w] => (c, d, h, w),
            _ => return None,
        };
        if c == 0 || d == 0 || h == 0 || w == 0 {
            return None;
        }
        let (first, channels) = match section.channel {
            Some(k) if k < c => (k, 1),
            Some(_) => return None,
            None if c == 3 => (0, 3),
            None => (0, 1),
        };
        let volume = shape.len() == 5;
        let (axis, index) = match section.cut {
            Some((axis, index)) if volume => (axis, index),
            _ => (0, d / 2),
        };
        let plane = h * w;
        // (base offset, width, height, row stride, pixel stride) of the cut inside one channel.
        let (base, width, height, row_stride, pixel_stride) = match axis {
            0 if index < d => (index * plane, w, h, w, 1),
            1 if index < h => (index * w, w, d, plane, 1),
            2 if index < w => (index, h, d, plane, w),
            _ => return None,
        };
        let strided = Strided {
            data: x.data(),
            base: base + first * d * plane,
            width,
            height,
            channels,
            channel_stride: d * plane,
            row_stride,
            pixel_stride,
        };
        Some(strided.box_average(max_side, volume.then_some(index as u32)))
    }

    /// This image reduced to at most `max_side` per side (itself when it fits). A malformed image
    /// (pixel count not matching its size) becomes an empty one.
    pub fn downsampled(self, max_side: usize) -> PreviewImage {
        let (w, h, c) = (
            self.width as usize,
            self.height as usize,
            self.channels.max(1) as usize,
        );
        if self.pixels.len() != w * h * c {
            return PreviewImage {
                width: 0,
                height: 0,
                channels: 1,
                slice: self.slice,
                pixels: Vec::new(),
            };
        }
        if w.max(h) <= max_side.max(1) {
            return self;
        }
        Strided {
            data: &self.pixels,
            base: 0,
            width: w,
            height: h,
            channels: c,
            channel_stride: 1,
            row_stride: w * c,
            pixel_stride: c,
        }
        .box_average(max_side, self.slice)
    }
}

/// A one-channel `w`×`h` image with value `f(x, y)` (for tests here and in the workbench).
#[cfg(test)]
pub(crate) fn gray(w: u32, h: u32, f: impl Fn(u32, u32) -> f32) -> PreviewImage {
    PreviewImage {
        width: w,
        height: h,
        channels: 1,
        slice: None,
        pixels: (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .map(|(x, y)| f(x, y))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_downsampling_averages_blocks_and_keeps_colour_interleaved() {
        // 1×3×4×6, channel c at (y, x) = 100c + 10y + x; factor 2 (max side 3).
        let x = Tensor::from_fn(&[1, 3, 4, 6], |i| {
            let (c, y, xx) = (i / 24, (i / 6) % 4, i % 6);
            (100 * c + 10 * y + xx) as f32
        });
        let p = PreviewImage::of_tensor(&x, Section::default(), 3).unwrap();
        assert_eq!((p.width, p.height, p.channels, p.slice), (3, 2, 3, None));
        // Block (0,0) of channel 1: mean of 100 + {0,1,10,11} = 105.5.
        assert_eq!(p.pixels[1], 105.5);
        // Block (1,2) of channel 2: 200 + mean{24,25,34,35} = 229.5.
        assert_eq!(p.pixels[(3 + 2) * 3 + 2], 229.5);
        // The same image, interleaved first, reduces to the same pixels.
        let full = PreviewImage::of_tensor(&x, Section::default(), 6).unwrap();
        assert_eq!(full.downsampled(3), p);
        // One channel alone.
        let green = Section {
            channel: Some(1),
            ..Section::default()
        };
        let g = PreviewImage::of_tensor(&x, green, 6).unwrap();
        assert_eq!((g.channels, g.pixels[7]), (1, 111.0));
        assert!(
            PreviewImage::of_tensor(
                &x,
                Section {
                    channel: Some(3),
                    ..green
                },
                6
            )
            .is_none()
        );
    }

    #[test]
    fn ragged_edges_are_partial_blocks() {
        let img = gray(5, 4, |x, y| (x + 10 * y) as f32);
        let d = img.downsampled(2);
        // factor ⌈5/2⌉ = 3: columns {0,1,2}, {3,4}; rows {0,1,2}, {3}.
        assert_eq!((d.width, d.height), (2, 2));
        let block: f32 = (0..3)
            .map(|x| (0..3).map(|y| (x + 10 * y) as f32).sum::<f32>())
            .sum();
        assert_eq!(d.pixels[0], block / 9.0);
        assert_eq!(d.pixels[3], (3.0 + 30.0 + 4.0 + 30.0) / 2.0);
        let mut bad = gray(4, 4, |_, _| 0.0);
        bad.pixels.pop();
        assert_eq!(bad.downsampled(2).width, 0);
    }

    #[test]
    fn volumes_are_cut_along_any_axis() {
        // value = 100 z + 10 y + x on a 2×3×4 volume.
        let v = Tensor::from_fn(&[1, 1, 2, 3, 4], |i| {
            let (z, y, x) = (i / 12, (i / 4) % 3, i % 4);
            (100 * z + 10 * y + x) as f32
        });
        let cut = |axis, index| Section {
            cut: Some((axis, index)),
            channel: None,
        };
        let s = PreviewImage::of_tensor(&v, cut(0, 1), 64).unwrap();
        assert_eq!(
            (s.width, s.height, s.pixels[5], s.slice),
            (4, 3, 111.0, Some(1))
        );
        let s = PreviewImage::of_tensor(&v, cut(1, 2), 64).unwrap();
        assert_eq!((s.width, s.height, s.pixels[4 + 3]), (4, 2, 123.0));
        let s = PreviewImage::of_tensor(&v, cut(2, 3), 64).unwrap();
        assert_eq!((s.width, s.height, s.pixels[3 + 1]), (3, 2, 113.0));
        assert!(PreviewImage::of_tensor(&v, cut(2, 4), 64).is_none());
        // Default: the central depth slice, every block of it constant.
        let x = Tensor::from_fn(&[1, 1, 5, 3, 3], |i| (i / 9) as f32);
        let p = PreviewImage::of_tensor(&x, Section::default(), 2).unwrap();
        assert_eq!((p.width, p.height, p.channels, p.slice), (2, 2, 1, Some(2)));
        assert!(p.pixels.iter().all(|&v| v == 2.0));
        assert!(PreviewImage::of_tensor(&Tensor::zeros(&[4, 4]), Section::default(), 8).is_none());
    }
}
