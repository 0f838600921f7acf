//! Turning float images into textures, off the UI thread.
//!
//! A [`Pump`] owns one worker thread. Backend events pass through it in order; a preview is
//! downsampled to at most [`MAX_TEXTURE_SIDE`] per side and colour-mapped there, so the UI thread
//! only swaps a texture's image (an `Arc`, no copy) once per new preview and never per frame. When
//! previews arrive faster than the worker maps them, only the newest per slot is mapped. Contrast
//! or colormap changes ([`PumpMsg::Map`]), sections of arrays the workbench holds (an opened image,
//! a volume slice, a run's outputs: [`PumpMsg::Show`]) and difference images are mapped by the same
//! worker. Reducing an image to the texture size is [`PreviewImage::of_tensor`] /
//! [`PreviewImage::downsampled`], the implementation `tessera serve` uses for its previews.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};

use egui::{Color32, ColorImage};

use super::backend::Incoming;
use crate::protocol::{Event, JobId, PreviewImage, PreviewKind, Section};
use crate::tensor::Tensor;

/// The names of a volume's axes (0 = depth, 1 = rows, 2 = columns), as panes and menus say them.
pub const AXIS_NAMES: [&str; 3] = ["depth", "rows", "columns"];

/// Largest texture side the view keeps; larger previews are box-averaged down to it.
pub const MAX_TEXTURE_SIDE: usize = 1024;

/// How float samples become colours.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Display {
    pub contrast: Contrast,
    pub colormap: Colormap,
    /// One channel of a colour image shown alone (with the colormap); `None` shows colour.
    pub channel: Option<u8>,
}

impl Default for Display {
    fn default() -> Self {
        Display {
            contrast: Contrast::Auto,
            colormap: Colormap::Gray,
            channel: None,
        }
    }
}

/// A pane's own display settings. What a pane leaves unset follows the window's default (so a
/// colormap chosen for the whole window later still reaches a pane whose contrast was set), and a
/// pane's settings belong to the document it shows: another document starts from the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PaneDisplay {
    pub contrast: Option<Contrast>,
    pub colormap: Option<Colormap>,
    pub channel: Option<Option<u8>>,
}

impl PaneDisplay {
    /// The settings this pane shows with, over `default`.
    pub fn over(self, default: Display) -> Display {
        Display {
            contrast: self.contrast.unwrap_or(default.contrast),
            colormap: self.colormap.unwrap_or(default.colormap),
            channel: self.channel.unwrap_or(default.channel),
        }
    }

    /// Sets what differs between `before` and `after` (an edit of the pane's menu) as the pane's
    /// own, leaving the rest to follow the default.
    pub fn edited(mut self, before: Display, after: Display) -> PaneDisplay {
        if after.contrast != before.contrast {
            self.contrast = Some(after.contrast);
        }
        if after.colormap != before.colormap {
            self.colormap = Some(after.colormap);
        }
        if after.channel != before.channel {
            self.channel = Some(after.channel);
        }
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Contrast {
    /// The 1st to 99th percentile of the image.
    Auto,
    /// A fixed window.
    Range { lo: f32, hi: f32 },
}

/// Colormaps for one-channel images (colour images are shown as they are): the maps of
/// [`crate::plot`], so figures and the window colour alike.
pub use crate::plot::Colormap;

/// A 256-entry lookup table of `map`.
pub fn lut(map: Colormap) -> [Color32; 256] {
    std::array::from_fn(|i| {
        let [r, g, b] = map.map(i as f32 / 255.0);
        Color32::from_rgb(r, g, b)
    })
}

/// Where an image is shown; previews of one slot replace each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Slot {
    Reconstruction,
    GroundTruth,
    Measurement(usize),
    /// The velocity gradient of an FWI epoch.
    Gradient,
    /// The image or volume slice opened in the Data panel.
    Data,
    /// Reconstruction minus ground truth (or minus the compared run's reconstruction).
    Difference,
    /// The reconstruction of another run, shown beside this one.
    Compare,
    /// One of the three orthogonal cuts (0 = depth, 1 = rows, 2 = columns) through the cursor.
    Ortho(u8),
}

impl Slot {
    /// The pane's name as the window shows it.
    pub fn title(self) -> String {
        match self {
            Slot::Reconstruction => "reconstruction".into(),
            Slot::GroundTruth => "ground truth".into(),
            Slot::Measurement(i) => format!("measurement #{i}"),
            Slot::Gradient => "gradient".into(),
            Slot::Data => "image".into(),
            Slot::Difference => "difference".into(),
            Slot::Compare => "compared run".into(),
            Slot::Ortho(a) => format!("{} cut", AXIS_NAMES[a as usize]),
        }
    }

    fn of(kind: &PreviewKind) -> Slot {
        match kind {
            PreviewKind::Reconstruction => Slot::Reconstruction,
            PreviewKind::GroundTruth => Slot::GroundTruth,
            PreviewKind::Measurement(i) => Slot::Measurement(*i),
            PreviewKind::Gradient => Slot::Gradient,
        }
    }
}

/// Counts of the finite samples of an image in equal bins over `[lo, hi]` (its min and max).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Histogram {
    pub lo: f32,
    pub hi: f32,
    pub counts: Vec<u32>,
}

/// Bins of [`Histogram`].
pub const HISTOGRAM_BINS: usize = 64;

impl Histogram {
    pub fn of(pixels: &[f32]) -> Histogram {
        let (lo, hi) = pixels
            .iter()
            .filter(|v| v.is_finite())
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        if lo > hi {
            return Histogram::default();
        }
        let mut counts = vec![0u32; HISTOGRAM_BINS];
        let scale = if hi > lo {
            HISTOGRAM_BINS as f32 / (hi - lo)
        } else {
            0.0
        };
        for &v in pixels.iter().filter(|v| v.is_finite()) {
            let bin = (((v - lo) * scale) as usize).min(HISTOGRAM_BINS - 1);
            counts[bin] += 1;
        }
        Histogram { lo, hi, counts }
    }
}

/// A mapped image, ready to become a texture.
pub struct Mapped {
    pub slot: Slot,
    /// The connection generation and job it belongs to (None for local images and re-mappings).
    pub job: Option<(u64, JobId)>,
    pub iteration: usize,
    pub color: Arc<ColorImage>,
    /// The (downsampled) float image, kept for re-mapping, pixel values and differences.
    pub raw: Arc<PreviewImage>,
    /// The contrast window that was applied.
    pub range: (f32, f32),
    pub histogram: Histogram,
    /// The image's own 1st–99th percentile window (linked contrast joins the panes' ones).
    pub auto_range: (f32, f32),
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
    /// Show a section of an array `(B, C, H, W)` or `(B, C, D, H, W)` in `slot` (converted and
    /// downsampled here, off the UI thread).
    Show {
        slot: Slot,
        tensor: Arc<Tensor>,
        section: Section,
        display: Display,
    },
    /// Show `a − b` in [`Slot::Difference`] (images of equal size).
    Difference {
        a: Arc<PreviewImage>,
        b: Arc<PreviewImage>,
        display: Display,
    },
    /// Settings for previews of `slot` that arrive from now on.
    SetDisplay(Slot, Display),
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
    let mut displays: HashMap<Slot, Display> = HashMap::new();
    let mut batch = Vec::new();
    while let Ok(first) = rx.recv() {
        batch.clear();
        batch.push(first);
        batch.extend(rx.try_iter());
        // Only the newest image of each slot (of each job) is worth mapping.
        let mut newest: HashMap<(Option<(u64, JobId)>, Slot), usize> = HashMap::new();
        for (i, m) in batch.iter().enumerate() {
            let key = match m {
                PumpMsg::Incoming(g, Incoming::Event(Event::Preview { job, what, .. })) => {
                    (Some((*g, *job)), Slot::of(what))
                }
                PumpMsg::Show { slot, .. } | PumpMsg::Map { slot, .. } => (None, *slot),
                PumpMsg::Difference { .. } => (None, Slot::Difference),
                _ => continue,
            };
            newest.insert(key, i);
        }
        let is_newest = |key, i| newest.get(&key) == Some(&i);
        for (i, m) in batch.drain(..).enumerate() {
            let out = match m {
                PumpMsg::SetDisplay(slot, d) => {
                    displays.insert(slot, d);
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
                    let display = displays.get(&slot).copied().unwrap_or_default();
                    is_newest((Some((g, job)), slot), i).then(|| {
                        let full_size = (image.width, image.height);
                        let raw = image.downsampled(MAX_TEXTURE_SIDE);
                        mapped(slot, Some((g, job)), iteration, raw, full_size, display)
                    })
                }
                PumpMsg::Incoming(g, other) => Some(PumpOut::Incoming(g, other)),
                PumpMsg::Map { slot, raw, display } => is_newest((None, slot), i).then(|| {
                    let full_size = (raw.width, raw.height);
                    mapped_arc(slot, None, 0, raw, full_size, display)
                }),
                PumpMsg::Show {
                    slot,
                    tensor,
                    section,
                    display,
                } => is_newest((None, slot), i)
                    .then(|| {
                        let full = full_size_of(&tensor, section);
                        PreviewImage::of_tensor(&tensor, section, MAX_TEXTURE_SIDE)
                            .map(|raw| mapped(slot, None, 0, raw, full, display))
                    })
                    .flatten(),
                PumpMsg::Difference { a, b, display } => is_newest((None, Slot::Difference), i)
                    .then(|| {
                        difference(&a, &b).map(|raw| {
                            let full = (raw.width, raw.height);
                            mapped(Slot::Difference, None, 0, raw, full, display)
                        })
                    })
                    .flatten(),
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

/// Width and height of the section of `t` before downsampling.
fn full_size_of(t: &Tensor, section: Section) -> (u32, u32) {
    match (t.shape(), section.cut) {
        ([_, _, d, _, w], Some((1, _))) => (*w as u32, *d as u32),
        ([_, _, d, h, _], Some((2, _))) => (*h as u32, *d as u32),
        ([_, _, _, h, w], _) | ([_, _, h, w], _) => (*w as u32, *h as u32),
        _ => (0, 0),
    }
}

fn mapped(
    slot: Slot,
    job: Option<(u64, JobId)>,
    iteration: usize,
    raw: PreviewImage,
    full_size: (u32, u32),
    display: Display,
) -> PumpOut {
    mapped_arc(slot, job, iteration, Arc::new(raw), full_size, display)
}

fn mapped_arc(
    slot: Slot,
    job: Option<(u64, JobId)>,
    iteration: usize,
    raw: Arc<PreviewImage>,
    full_size: (u32, u32),
    display: Display,
) -> PumpOut {
    let (color, range) = colorize(&raw, display);
    // An auto window is the image's own; a fixed one says nothing of the image.
    let own_auto = display.contrast == Contrast::Auto && display.colormap != Colormap::Diverging;
    let auto_range = if own_auto {
        range
    } else {
        auto_range(&raw.pixels)
    };
    PumpOut::Mapped(Mapped {
        auto_range,
        slot,
        job,
        iteration,
        color: Arc::new(color),
        histogram: Histogram::of(&raw.pixels),
        raw,
        range,
        full_size,
    })
}

/// `a − b` sample by sample, when both have the same size and channels.
pub fn difference(a: &PreviewImage, b: &PreviewImage) -> Option<PreviewImage> {
    let same = (a.width, a.height, a.channels) == (b.width, b.height, b.channels)
        && a.pixels.len() == b.pixels.len();
    same.then(|| PreviewImage {
        width: a.width,
        height: a.height,
        channels: a.channels,
        slice: a.slice,
        pixels: a.pixels.iter().zip(&b.pixels).map(|(x, y)| x - y).collect(),
    })
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

/// Maps an image to colours; returns it and the window applied. A signed image shown with the
/// diverging map gets a window symmetric about 0 (auto contrast), so white means "no difference".
pub fn colorize(image: &PreviewImage, display: Display) -> (ColorImage, (f32, f32)) {
    let (w, h, c) = (
        image.width as usize,
        image.height as usize,
        image.channels.max(1) as usize,
    );
    let channel = display
        .channel
        .map(|k| k as usize)
        .filter(|&k| k < c && c > 1);
    let samples: Vec<f32>;
    let values: &[f32] = match channel {
        Some(k) => {
            samples = image.pixels.iter().skip(k).step_by(c).copied().collect();
            &samples
        }
        None => &image.pixels,
    };
    let (lo, hi) = match display.contrast {
        Contrast::Auto if display.colormap == Colormap::Diverging => {
            let (lo, hi) = auto_range(values);
            let m = lo.abs().max(hi.abs()).max(f32::MIN_POSITIVE);
            (-m, m)
        }
        Contrast::Auto => auto_range(values),
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
    let pixels: Vec<Color32> = if c >= 3 && channel.is_none() {
        image
            .pixels
            .chunks_exact(c)
            .map(|p| Color32::from_rgb(level(p[0]), level(p[1]), level(p[2])))
            .collect()
    } else {
        let lut = lut(display.colormap);
        let step = if channel.is_some() { 1 } else { c };
        values
            .iter()
            .step_by(step)
            .map(|&v| lut[level(v) as usize])
            .collect()
    };
    (ColorImage::new([w, h], pixels), (lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::preview::gray;

    #[test]
    fn histograms_count_every_finite_value_once() {
        let pixels: Vec<f32> = (0..1000).map(|i| i as f32 / 999.0).collect();
        let h = Histogram::of(&pixels);
        assert_eq!((h.lo, h.hi), (0.0, 1.0));
        assert_eq!(h.counts.len(), HISTOGRAM_BINS);
        assert_eq!(h.counts.iter().sum::<u32>(), 1000);
        // Evenly spread values fill the bins evenly (the maximum joins the last bin).
        assert!(
            h.counts.iter().all(|&c| (15..=17).contains(&c)),
            "{:?}",
            h.counts
        );
        let mut with_bad = pixels.clone();
        with_bad.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        assert_eq!(
            Histogram::of(&with_bad),
            h,
            "non-finite values are not counted"
        );
        let flat = Histogram::of(&[0.5; 7]);
        assert_eq!((flat.lo, flat.hi, flat.counts[0]), (0.5, 0.5, 7));
        assert_eq!(Histogram::of(&[f32::NAN]), Histogram::default());
    }

    #[test]
    fn contrast_window_maps_to_full_range() {
        let img = gray(256, 1, |x, _| x as f32 / 255.0);
        let display = Display {
            contrast: Contrast::Range { lo: 0.25, hi: 0.75 },
            ..Display::default()
        };
        let (c, range) = colorize(&img, display);
        assert_eq!(range, (0.25, 0.75));
        assert_eq!(c.pixels[0], Color32::BLACK);
        assert_eq!(c.pixels[255], Color32::WHITE);
        assert_eq!(c.pixels[128].r(), 128);
        let (lo, hi) = auto_range(&img.pixels);
        assert!(lo < 0.02 && hi > 0.98, "{lo} {hi}");
        let mut bad = img.clone();
        bad.pixels.pop();
        assert_eq!(colorize(&bad, Display::default()).0.size, [1, 1]);
    }

    #[test]
    fn one_channel_of_a_colour_image_and_signed_differences() {
        // Two pixels: (R, G, B) = (0, 1, 2) and (3, 4, 5).
        let rgb = PreviewImage {
            width: 2,
            height: 1,
            channels: 3,
            slice: None,
            pixels: vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
        };
        let green = Display {
            contrast: Contrast::Range { lo: 1.0, hi: 4.0 },
            channel: Some(1),
            ..Display::default()
        };
        let (c, _) = colorize(&rgb, green);
        assert_eq!(c.pixels, vec![Color32::BLACK, Color32::WHITE]);

        let a = gray(2, 1, |x, _| x as f32);
        let b = gray(2, 1, |_, _| 0.5);
        let d = difference(&a, &b).unwrap();
        assert_eq!(d.pixels, vec![-0.5, 0.5]);
        assert!(difference(&a, &rgb).is_none());
        let diverging = Display {
            colormap: Colormap::Diverging,
            ..Display::default()
        };
        let (_, (lo, hi)) = colorize(&d, diverging);
        assert_eq!(lo, -hi, "centred on zero");

        let h = Histogram::of(&[0.0, 0.5, 1.0, f32::NAN]);
        assert_eq!((h.lo, h.hi, h.counts.iter().sum::<u32>()), (0.0, 1.0, 3));
        assert_eq!((h.counts[0], h.counts[HISTOGRAM_BINS - 1]), (1, 1));
    }
}
