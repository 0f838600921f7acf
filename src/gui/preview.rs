//! Turning float images into textures, off the UI thread.
//!
//! A [`Pump`] owns one worker thread. Backend events pass through it in order; a preview is
//! downsampled to at most [`MAX_TEXTURE_SIDE`] per side and colour-mapped there, so the UI thread
//! only swaps a texture's image (an `Arc`, no copy) once per new preview and never per frame. When
//! previews arrive faster than the worker maps them, only the newest per slot is mapped. Contrast
//! or colormap changes and volume slices are mapped by the same worker ([`PumpMsg::Map`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};

use egui::{Color32, ColorImage};

use super::backend::Incoming;
use crate::protocol::{Event, JobId, PreviewImage, PreviewKind};
use crate::tensor::Tensor;

/// Largest texture side the view keeps; larger previews are box-averaged down to it.
pub const MAX_TEXTURE_SIDE: usize = 1024;

/// How float samples become colours.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Display {
    pub contrast: Contrast,
    pub colormap: Colormap,
}

impl Default for Display {
    fn default() -> Self {
        Display {
            contrast: Contrast::Auto,
            colormap: Colormap::Gray,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Contrast {
    /// The 1st to 99th percentile of the image.
    Auto,
    /// A fixed window.
    Range { lo: f32, hi: f32 },
}

/// Colormaps for one-channel images (colour images are shown as they are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Colormap {
    Gray,
    Viridis,
    Magma,
}

impl Colormap {
    pub const ALL: [Colormap; 3] = [Colormap::Gray, Colormap::Viridis, Colormap::Magma];

    pub fn name(self) -> &'static str {
        match self {
            Colormap::Gray => "gray",
            Colormap::Viridis => "viridis",
            Colormap::Magma => "magma",
        }
    }

    /// Control points at t = 0, 1/8, …, 1 (sampled from matplotlib's maps), linearly interpolated.
    fn stops(self) -> &'static [[u8; 3]; 9] {
        const VIRIDIS: [[u8; 3]; 9] = [
            [68, 1, 84],
            [71, 44, 122],
            [59, 81, 139],
            [44, 113, 142],
            [33, 144, 141],
            [39, 173, 129],
            [92, 200, 99],
            [170, 220, 50],
            [253, 231, 37],
        ];
        const MAGMA: [[u8; 3]; 9] = [
            [0, 0, 4],
            [28, 16, 68],
            [79, 18, 123],
            [129, 37, 129],
            [181, 54, 122],
            [229, 80, 100],
            [251, 135, 97],
            [254, 194, 135],
            [252, 253, 191],
        ];
        const GRAY: [[u8; 3]; 9] = [
            [0, 0, 0],
            [32, 32, 32],
            [64, 64, 64],
            [96, 96, 96],
            [128, 128, 128],
            [159, 159, 159],
            [191, 191, 191],
            [223, 223, 223],
            [255, 255, 255],
        ];
        match self {
            Colormap::Gray => &GRAY,
            Colormap::Viridis => &VIRIDIS,
            Colormap::Magma => &MAGMA,
        }
    }

    /// A 256-entry lookup table.
    pub fn lut(self) -> [Color32; 256] {
        let stops = self.stops();
        std::array::from_fn(|i| {
            let t = i as f32 / 255.0 * 8.0;
            let k = (t as usize).min(7);
            let f = t - k as f32;
            let mix = |c: usize| {
                (stops[k][c] as f32 * (1.0 - f) + stops[k + 1][c] as f32 * f).round() as u8
            };
            Color32::from_rgb(mix(0), mix(1), mix(2))
        })
    }
}

/// Where an image is shown; previews of one slot replace each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    Reconstruction,
    GroundTruth,
    Measurement(usize),
    /// The image or volume slice opened in the Data panel.
    Data,
}

impl Slot {
    fn of(kind: &PreviewKind) -> Slot {
        match kind {
            PreviewKind::Reconstruction => Slot::Reconstruction,
            PreviewKind::GroundTruth => Slot::GroundTruth,
            PreviewKind::Measurement(i) => Slot::Measurement(*i),
        }
    }
}

/// A mapped image, ready to become a texture.
pub struct Mapped {
    pub slot: Slot,
    /// The connection generation and job it belongs to (None for local images and re-mappings).
    pub job: Option<(u64, JobId)>,
    pub iteration: usize,
    pub color: ColorImage,
    /// The (downsampled) float image, kept for re-mapping when the contrast changes.
    pub raw: Arc<PreviewImage>,
    /// The contrast window that was applied.
    pub range: (f32, f32),
    /// Size of the image before downsampling (width, height).
    pub full_size: (u32, u32),
}

/// Input of the worker.
pub enum PumpMsg {
    /// An event of the connection with this generation number.
    Incoming(u64, Incoming),
    /// Map this image (again) with these settings.
    Map {
        slot: Slot,
        raw: Arc<PreviewImage>,
        display: Display,
    },
    /// Show an array in `slot`: an image `(B, C, H, W)` (first item), or the central depth slice of
    /// a volume `(B, C, D, H, W)`; converted and downsampled here, off the UI thread.
    Show {
        slot: Slot,
        tensor: Arc<Tensor>,
        display: Display,
    },
    /// Cut a slice of a volume `(B, C, D, H, W)` along `axis` (0 = depth, 1 = rows, 2 = columns) and map it.
    Slice {
        volume: Arc<Tensor>,
        axis: usize,
        index: usize,
        display: Display,
    },
    /// Settings for previews that arrive from now on.
    SetDisplay(Display),
}

/// Output of the worker, in the order events arrived.
pub enum PumpOut {
    Incoming(u64, Incoming),
    Mapped(Mapped),
}

/// The worker thread and its channels.
pub struct Pump {
    tx: Sender<PumpMsg>,
    rx: Receiver<PumpOut>,
}

impl Pump {
    /// Starts the worker; `wake` is called after each batch (the app passes `ctx.request_repaint`).
    pub fn start(wake: impl Fn() + Send + 'static) -> Pump {
        let (tx, in_rx) = mpsc::channel::<PumpMsg>();
        let (out_tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gui-preview".into())
            .spawn(move || worker(in_rx, out_tx, wake))
            .expect("spawning a thread");
        Pump { tx, rx }
    }

    pub fn send(&self, msg: PumpMsg) {
        // The worker lives as long as the pump.
        let _ = self.tx.send(msg);
    }

    /// Everything ready now (never blocks).
    pub fn drain(&self) -> Vec<PumpOut> {
        self.rx.try_iter().collect()
    }
}

fn worker(rx: Receiver<PumpMsg>, tx: Sender<PumpOut>, wake: impl Fn()) {
    let mut display = Display::default();
    let mut batch = Vec::new();
    while let Ok(first) = rx.recv() {
        batch.clear();
        batch.push(first);
        batch.extend(rx.try_iter());
        // Only the newest preview of each slot (of each job) is worth mapping.
        let mut newest: HashMap<(u64, JobId, Slot), usize> = HashMap::new();
        for (i, m) in batch.iter().enumerate() {
            if let PumpMsg::Incoming(g, Incoming::Event(Event::Preview { job, what, .. })) = m {
                newest.insert((*g, *job, Slot::of(what)), i);
            }
        }
        for (i, m) in batch.drain(..).enumerate() {
            let out = match m {
                PumpMsg::SetDisplay(d) => {
                    display = d;
                    None
                }
                PumpMsg::Incoming(
                    g,
                    Incoming::Event(Event::Preview {
                        job,
                        iteration,
                        what,
                        image,
                    }),
                ) => {
                    let slot = Slot::of(&what);
                    (newest.get(&(g, job, slot)) == Some(&i))
                        .then(|| map_preview(slot, Some((g, job)), iteration, image, display))
                        .map(PumpOut::Mapped)
                }
                PumpMsg::Incoming(g, other) => Some(PumpOut::Incoming(g, other)),
                PumpMsg::Map { slot, raw, display } => {
                    let (color, range) = colorize(&raw, display);
                    Some(PumpOut::Mapped(Mapped {
                        slot,
                        job: None,
                        iteration: 0,
                        full_size: (raw.width, raw.height),
                        color,
                        raw,
                        range,
                    }))
                }
                PumpMsg::Show {
                    slot,
                    tensor,
                    display,
                } => match tensor.shape().len() {
                    5 => slice(&tensor, 0, tensor.shape()[2] / 2),
                    _ => tensor_image(&tensor),
                }
                .map(|img| PumpOut::Mapped(map_preview(slot, None, 0, img, display))),
                PumpMsg::Slice {
                    volume,
                    axis,
                    index,
                    display,
                } => slice(&volume, axis, index)
                    .map(|img| PumpOut::Mapped(map_preview(Slot::Data, None, 0, img, display))),
            };
            if let Some(out) = out
                && tx.send(out).is_err()
            {
                return;
            }
        }
        wake();
    }
}

fn map_preview(
    slot: Slot,
    job: Option<(u64, JobId)>,
    iteration: usize,
    image: PreviewImage,
    display: Display,
) -> Mapped {
    let full_size = (image.width, image.height);
    let raw = Arc::new(downsample(image, MAX_TEXTURE_SIDE));
    let (color, range) = colorize(&raw, display);
    Mapped {
        slot,
        job,
        iteration,
        color,
        raw,
        range,
        full_size,
    }
}

/// Box-averages `image` by the smallest integer factor that brings both sides to ≤ `max_side`.
/// A malformed image (pixel count not matching its size) becomes an empty one.
pub fn downsample(image: PreviewImage, max_side: usize) -> PreviewImage {
    let (w, h, c) = (
        image.width as usize,
        image.height as usize,
        image.channels.max(1) as usize,
    );
    if image.pixels.len() != w * h * c {
        return PreviewImage {
            width: 0,
            height: 0,
            channels: 1,
            slice: image.slice,
            pixels: Vec::new(),
        };
    }
    let f = w.max(h).div_ceil(max_side.max(1)).max(1);
    if f == 1 {
        return image;
    }
    let (ow, oh) = (w.div_ceil(f), h.div_ceil(f));
    let mut out = vec![0.0f32; ow * oh * c];
    let mut count = vec![0u32; ow * oh];
    for y in 0..h {
        let row = &image.pixels[y * w * c..(y + 1) * w * c];
        let orow = (y / f) * ow;
        for x in 0..w {
            let o = orow + x / f;
            count[o] += 1;
            for k in 0..c {
                out[o * c + k] += row[x * c + k];
            }
        }
    }
    for (o, n) in count.iter().enumerate() {
        for k in 0..c {
            out[o * c + k] /= *n as f32;
        }
    }
    PreviewImage {
        width: ow as u32,
        height: oh as u32,
        channels: c as u8,
        slice: image.slice,
        pixels: out,
    }
}

/// The 1st and 99th percentiles of the finite samples (from at most ~65k of them).
pub fn auto_range(pixels: &[f32]) -> (f32, f32) {
    let step = (pixels.len() / 65_536).max(1);
    let mut sample: Vec<f32> = pixels
        .iter()
        .step_by(step)
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    if sample.is_empty() {
        return (0.0, 1.0);
    }
    sample.sort_unstable_by(f32::total_cmp);
    let at = |q: f64| sample[((sample.len() - 1) as f64 * q).round() as usize];
    let (lo, hi) = (at(0.01), at(0.99));
    if hi > lo { (lo, hi) } else { (lo, lo + 1.0) }
}

/// Maps an image to colours; returns it and the window applied.
pub fn colorize(image: &PreviewImage, display: Display) -> (ColorImage, (f32, f32)) {
    let (w, h, c) = (
        image.width as usize,
        image.height as usize,
        image.channels.max(1) as usize,
    );
    let (lo, hi) = match display.contrast {
        Contrast::Auto => auto_range(&image.pixels),
        Contrast::Range { lo, hi } if hi > lo => (lo, hi),
        Contrast::Range { lo, .. } => (lo, lo + 1.0),
    };
    if image.pixels.len() != w * h * c || w == 0 || h == 0 {
        return (ColorImage::new([1, 1], vec![Color32::BLACK]), (lo, hi));
    }
    let scale = 255.0 / (hi - lo);
    let level = |v: f32| -> u8 {
        // NaN maps to 0 through the saturating cast.
        ((v - lo) * scale).clamp(0.0, 255.0) as u8
    };
    let pixels: Vec<Color32> = if c >= 3 {
        image
            .pixels
            .chunks_exact(c)
            .map(|p| Color32::from_rgb(level(p[0]), level(p[1]), level(p[2])))
            .collect()
    } else {
        let lut = display.colormap.lut();
        image
            .pixels
            .iter()
            .map(|&v| lut[level(v) as usize])
            .collect()
    };
    (ColorImage::new([w, h], pixels), (lo, hi))
}

/// A float image of a tensor `(B, C, H, W)` (first batch item; 1 or 3 channels, others shown as
/// the first channel).
pub fn tensor_image(t: &Tensor) -> Option<PreviewImage> {
    let s = t.shape();
    if s.len() != 4 {
        return None;
    }
    let (ch, h, w) = (s[1], s[2], s[3]);
    let c = if ch == 3 { 3 } else { 1 };
    let plane = h * w;
    let data = t.data();
    let mut pixels = Vec::with_capacity(plane * c);
    for i in 0..plane {
        for k in 0..c {
            pixels.push(data[k * plane + i]);
        }
    }
    Some(PreviewImage {
        width: w as u32,
        height: h as u32,
        channels: c as u8,
        slice: None,
        pixels,
    })
}

/// Slice `index` of a volume `(B, C, D, H, W)` along `axis` (first batch item and channel).
pub fn slice(volume: &Tensor, axis: usize, index: usize) -> Option<PreviewImage> {
    let s = volume.shape();
    if s.len() != 5 || axis > 2 {
        return None;
    }
    let (d, h, w) = (s[2], s[3], s[4]);
    let dims = [d, h, w];
    let index = index.min(dims[axis].saturating_sub(1));
    let data = volume.data();
    let at = |z: usize, y: usize, x: usize| data[(z * h + y) * w + x];
    let (ow, oh, pixels): (usize, usize, Vec<f32>) = match axis {
        0 => (
            w,
            h,
            (0..h)
                .flat_map(|y| (0..w).map(move |x| (y, x)))
                .map(|(y, x)| at(index, y, x))
                .collect(),
        ),
        1 => (
            w,
            d,
            (0..d)
                .flat_map(|z| (0..w).map(move |x| (z, x)))
                .map(|(z, x)| at(z, index, x))
                .collect(),
        ),
        _ => (
            h,
            d,
            (0..d)
                .flat_map(|z| (0..h).map(move |y| (z, y)))
                .map(|(z, y)| at(z, y, index))
                .collect(),
        ),
    };
    Some(PreviewImage {
        width: ow as u32,
        height: oh as u32,
        channels: 1,
        slice: Some(index as u32),
        pixels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gray(w: u32, h: u32, f: impl Fn(u32, u32) -> f32) -> PreviewImage {
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

    #[test]
    fn downsample_averages_blocks_and_keeps_ragged_edges() {
        let img = gray(5, 4, |x, y| (x + 10 * y) as f32);
        let d = downsample(img, 2);
        // factor ⌈5/2⌉ = 3: columns {0,1,2}, {3,4}; rows {0,1,2}, {3}.
        assert_eq!((d.width, d.height), (2, 2));
        assert_eq!(
            d.pixels[0],
            (0..3)
                .map(|x| (0..3).map(|y| (x + 10 * y) as f32).sum::<f32>())
                .sum::<f32>()
                / 9.0
        );
        assert_eq!(d.pixels[3], (3.0 + 30.0 + 4.0 + 30.0) / 2.0);
    }

    #[test]
    fn malformed_previews_do_not_panic() {
        let mut img = gray(4, 4, |_, _| 0.0);
        img.pixels.pop();
        let d = downsample(img.clone(), 2);
        assert_eq!((d.width, d.height), (0, 0));
        let (c, _) = colorize(&img, Display::default());
        assert_eq!(c.size, [1, 1]);
    }

    #[test]
    fn contrast_window_maps_to_full_range() {
        let img = gray(256, 1, |x, _| x as f32 / 255.0);
        let display = Display {
            contrast: Contrast::Range { lo: 0.25, hi: 0.75 },
            colormap: Colormap::Gray,
        };
        let (c, range) = colorize(&img, display);
        assert_eq!(range, (0.25, 0.75));
        assert_eq!(c.pixels[0], Color32::BLACK);
        assert_eq!(c.pixels[255], Color32::WHITE);
        assert_eq!(c.pixels[128].r(), 128);
        let (lo, hi) = auto_range(&img.pixels);
        assert!(lo < 0.02 && hi > 0.98, "{lo} {hi}");
    }

    #[test]
    fn slices_follow_the_axis() {
        // value = 100 z + 10 y + x on a 2×3×4 volume.
        let data: Vec<f32> = (0..2)
            .flat_map(|z| {
                (0..3).flat_map(move |y| (0..4).map(move |x| (100 * z + 10 * y + x) as f32))
            })
            .collect();
        let v = Tensor::from_vec(&[1, 1, 2, 3, 4], data).unwrap();
        let s = slice(&v, 0, 1).unwrap();
        assert_eq!((s.width, s.height, s.pixels[5]), (4, 3, 111.0));
        let s = slice(&v, 1, 2).unwrap();
        assert_eq!((s.width, s.height, s.pixels[4 + 3]), (4, 2, 123.0));
        let s = slice(&v, 2, 9).unwrap();
        assert_eq!((s.width, s.height, s.slice), (3, 2, Some(3)));
    }
}
