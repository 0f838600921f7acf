//! Statistics in a box drawn over the panes (Ctrl+drag): mean, standard deviation, minimum and
//! maximum per channel, and PSNR/SSIM of the reconstruction against the ground truth inside the
//! box; and the CSV text of those statistics and of the line profile, per channel.
//!
//! Place in the flow: pure functions over the panes' float images (the [`PreviewImage`]s the
//! readout reads, at most [`super::preview::MAX_TEXTURE_SIDE`] per side); the Profile tab
//! ([`super::views::profile`]) shows them and [`super::app`] writes the CSV file chosen in the
//! save dialog. PSNR and SSIM are [`crate::metrics`]'s, with the data range 1 the runs report.

use egui::Pos2;

use crate::protocol::PreviewImage;
use crate::tensor::Tensor;

/// The data range of PSNR and SSIM, as the runs' own metrics use it.
const DATA_RANGE: f32 = 1.0;

/// A channel's statistics over the finite samples in the box.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChannelStats {
    pub mean: f64,
    /// The population standard deviation.
    pub std: f64,
    pub min: f64,
    pub max: f64,
    pub count: usize,
}

/// The pixels `[x0, x1) × [y0, y1)` of `image` that the box between the corners `a` and `b`
/// (texture coordinates 0..1, in any order) covers; `None` when it covers none.
pub fn pixel_box(image: &PreviewImage, a: Pos2, b: Pos2) -> Option<[usize; 4]> {
    let (w, h) = (image.width as f32, image.height as f32);
    let span = |lo: f32, hi: f32, n: f32| {
        let (lo, hi) = (lo.min(hi).clamp(0.0, 1.0), lo.max(hi).clamp(0.0, 1.0));
        let first = (lo * n).floor() as usize;
        let end = ((hi * n).ceil() as usize).min(n as usize);
        (first < end).then_some((first, end))
    };
    let (x0, x1) = span(a.x, b.x, w)?;
    let (y0, y1) = span(a.y, b.y, h)?;
    Some([x0, x1, y0, y1])
}

/// Per-channel statistics of `image` in the box `a`–`b`; `None` when the box covers no pixel.
pub fn box_stats(image: &PreviewImage, a: Pos2, b: Pos2) -> Option<Vec<ChannelStats>> {
    let [x0, x1, y0, y1] = pixel_box(image, a, b)?;
    let c = image.channels.max(1) as usize;
    let width = image.width as usize;
    let stats = (0..c)
        .map(|ch| {
            let (mut n, mut sum, mut sum_sq) = (0usize, 0.0f64, 0.0f64);
            let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
            for y in y0..y1 {
                for x in x0..x1 {
                    let v = image.pixels[(y * width + x) * c + ch] as f64;
                    if v.is_finite() {
                        n += 1;
                        sum += v;
                        sum_sq += v * v;
                        min = min.min(v);
                        max = max.max(v);
                    }
                }
            }
            let mean = if n > 0 { sum / n as f64 } else { f64::NAN };
            // Clamped: rounding can make the difference slightly negative for a flat box.
            let var = if n > 0 {
                (sum_sq / n as f64 - mean * mean).max(0.0)
            } else {
                f64::NAN
            };
            ChannelStats {
                mean,
                std: var.sqrt(),
                min,
                max,
                count: n,
            }
        })
        .collect();
    Some(stats)
}

/// The box of `image` as a `(1, C, h, w)` tensor.
fn crop(image: &PreviewImage, [x0, x1, y0, y1]: [usize; 4]) -> Option<Tensor> {
    let c = image.channels.max(1) as usize;
    let width = image.width as usize;
    let (w, h) = (x1 - x0, y1 - y0);
    let mut data = Vec::with_capacity(c * w * h);
    for ch in 0..c {
        for y in y0..y1 {
            for x in x0..x1 {
                data.push(image.pixels[(y * width + x) * c + ch]);
            }
        }
    }
    Tensor::from_vec(&[1, c, h, w], data).ok()
}

/// PSNR (dB) and SSIM of `x` against `truth` inside the box `a`–`b`. SSIM is `None` for a box
/// smaller than its 11-pixel window. `Err` says why nothing can be compared (sizes or channels
/// differ, an empty box).
pub fn box_fidelity(
    x: &PreviewImage,
    truth: &PreviewImage,
    a: Pos2,
    b: Pos2,
) -> Result<(f64, Option<f64>), String> {
    if (x.width, x.height, x.channels) != (truth.width, truth.height, truth.channels) {
        return Err(format!(
            "the reconstruction is {}×{}×{} and the ground truth {}×{}×{}",
            x.width, x.height, x.channels, truth.width, truth.height, truth.channels
        ));
    }
    let bx = pixel_box(x, a, b).ok_or("the box covers no pixel")?;
    let (xt, tt) = crop(x, bx)
        .zip(crop(truth, bx))
        .ok_or("the box could not be cut")?;
    let psnr = crate::metrics::psnr(&xt, &tt, DATA_RANGE).map_err(|e| e.to_string())?;
    let ssim = crate::metrics::ssim_fits(xt.shape())
        .then(|| crate::metrics::ssim(&xt, &tt, DATA_RANGE).ok())
        .flatten();
    Ok((psnr, ssim))
}

/// Profile samples: the distance from the start in pixels and every channel's value there.
pub type Samples = Vec<(f64, Vec<f32>)>;

/// Samples along the segment `a`–`b` (texture coordinates) of `image`, about one per pixel (2 to
/// 4096): the distance from `a` in pixels and every channel's value; samples outside the image
/// are left out.
pub fn profile_samples(image: &PreviewImage, a: Pos2, b: Pos2) -> Samples {
    let (w, h) = (image.width as f32, image.height as f32);
    let length_px = ((b.x - a.x) * w).hypot((b.y - a.y) * h);
    let n = (length_px.ceil() as usize).clamp(2, 4096);
    let c = image.channels.max(1) as usize;
    (0..n)
        .filter_map(|k| {
            let t = k as f32 / (n - 1) as f32;
            let (u, v) = (a.x + (b.x - a.x) * t, a.y + (b.y - a.y) * t);
            let (x, y) = ((u * w).floor() as isize, (v * h).floor() as isize);
            if x < 0 || y < 0 || x >= w as isize || y >= h as isize {
                return None;
            }
            let at = (y as usize * image.width as usize + x as usize) * c;
            Some(((t * length_px) as f64, image.pixels[at..at + c].to_vec()))
        })
        .collect()
}

/// A column name for channel `ch` of a pane with `channels` channels.
fn column(pane: &str, ch: usize, channels: usize) -> String {
    let name = if channels > 1 {
        format!("{pane} channel {ch}")
    } else {
        pane.to_string()
    };
    // A quoted field, quotes doubled (RFC 4180), so a pane title with a comma stays one column.
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The line profile of every pane as CSV: one row per sample, `distance_px` then one column per
/// pane and channel. Panes are sampled at their own resolution, so a row has a value for each
/// pane whose sample falls at that distance (to 1e-6 px) and is empty for the others.
pub fn profile_csv(panes: &[(String, &PreviewImage)], a: Pos2, b: Pos2) -> String {
    let curves: Vec<(usize, Samples)> = panes
        .iter()
        .map(|(_, img)| (img.channels.max(1) as usize, profile_samples(img, a, b)))
        .collect();
    let mut header = vec!["distance_px".to_string()];
    for ((title, _), (c, _)) in panes.iter().zip(&curves) {
        header.extend((0..*c).map(|ch| column(title, ch, *c)));
    }
    let mut distances: Vec<f64> = curves
        .iter()
        .flat_map(|(_, s)| s.iter().map(|(d, _)| *d))
        .collect();
    distances.sort_by(f64::total_cmp);
    distances.dedup_by(|x, y| (*x - *y).abs() < 1e-6);
    let mut out = header.join(",") + "\n";
    for d in distances {
        let mut row = vec![format!("{d}")];
        for (c, samples) in &curves {
            match samples.iter().find(|(s, _)| (s - d).abs() < 1e-6) {
                Some((_, values)) => row.extend(values.iter().map(|v| format!("{v}"))),
                None => row.extend(std::iter::repeat_n(String::new(), *c)),
            }
        }
        out += &row.join(",");
        out += "\n";
    }
    out
}

/// What the Profile tab shows of a box: its pixels, every pane's statistics, and PSNR/SSIM of the
/// reconstruction against the ground truth (or why they cannot be formed).
#[derive(Debug, Clone, PartialEq)]
pub struct RoiReport {
    /// `[x0, x1, y0, y1]` of the first pane's image (end exclusive).
    pub box_px: Option<[usize; 4]>,
    pub panes: Vec<(String, Vec<ChannelStats>)>,
    /// `None` when there is no reconstruction or no ground truth on screen.
    pub fidelity: Option<Result<(f64, Option<f64>), String>>,
}

/// The report of the box `a`–`b` over `panes` (title, image), with `pair` = (reconstruction,
/// ground truth) when both are on screen.
pub fn roi_report(
    panes: &[(String, &PreviewImage)],
    pair: Option<(&PreviewImage, &PreviewImage)>,
    a: Pos2,
    b: Pos2,
) -> RoiReport {
    RoiReport {
        box_px: panes.first().and_then(|(_, img)| pixel_box(img, a, b)),
        panes: panes
            .iter()
            .filter_map(|(title, img)| Some((title.clone(), box_stats(img, a, b)?)))
            .collect(),
        fidelity: pair.map(|(x, truth)| box_fidelity(x, truth, a, b)),
    }
}

/// The box's statistics as CSV: one row per pane and channel, then (when it can be formed) one
/// row of PSNR/SSIM against the ground truth.
pub fn roi_csv(report: &RoiReport) -> String {
    let mut out = String::new();
    if let Some([x0, x1, y0, y1]) = report.box_px {
        out += &format!(
            "# box x {x0}..{x1} y {y0}..{y1} (pixels of the images on screen, end exclusive)\n"
        );
    }
    out += "pane,channel,pixels,mean,std,min,max\n";
    for (title, stats) in &report.panes {
        for (ch, s) in stats.iter().enumerate() {
            out += &format!(
                "{},{ch},{},{},{},{},{}\n",
                column(title, 0, 1),
                s.count,
                s.mean,
                s.std,
                s.min,
                s.max
            );
        }
    }
    match &report.fidelity {
        Some(Ok((psnr, ssim))) => {
            let ssim = ssim.map(|s| s.to_string()).unwrap_or_default();
            out +=
                &format!("\nmetric,psnr_db,ssim\nreconstruction vs ground truth,{psnr},{ssim}\n");
        }
        Some(Err(why)) => out += &format!("\n# no PSNR/SSIM: {why}\n"),
        None => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use egui::pos2;

    /// A 4×2 two-channel image: channel 0 is the column, channel 1 the row × 10.
    fn image() -> PreviewImage {
        let mut pixels = Vec::new();
        for y in 0..2 {
            for x in 0..4 {
                pixels.push(x as f32);
                pixels.push(y as f32 * 10.0);
            }
        }
        PreviewImage {
            width: 4,
            height: 2,
            channels: 2,
            slice: None,
            pixels,
        }
    }

    #[test]
    fn statistics_are_per_channel_over_the_pixels_the_box_covers() {
        // Columns 1..3, both rows, drawn from the bottom right to the top left.
        let s = box_stats(&image(), pos2(0.74, 0.9), pos2(0.26, 0.1)).unwrap();
        assert_eq!(
            pixel_box(&image(), pos2(0.74, 0.9), pos2(0.26, 0.1)),
            Some([1, 3, 0, 2])
        );
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].min, s[0].max, s[0].mean, s[0].count),
            (1.0, 2.0, 1.5, 4)
        );
        assert!((s[0].std - 0.5).abs() < 1e-12);
        assert_eq!((s[1].min, s[1].max, s[1].mean), (0.0, 10.0, 5.0));
        assert!((s[1].std - 5.0).abs() < 1e-12);
        assert!(box_stats(&image(), pos2(1.2, 0.0), pos2(1.5, 1.0)).is_none());
    }

    #[test]
    fn fidelity_in_the_box_only_sees_the_box() {
        let truth = image();
        let mut x = image();
        // Off by 0.1 in the right half only.
        for y in 0..2 {
            for col in 2..4 {
                x.pixels[(y * 4 + col) * 2] += 0.1;
            }
        }
        let (left, _) = box_fidelity(&x, &truth, pos2(0.0, 0.0), pos2(0.5, 1.0)).unwrap();
        assert!(left.is_infinite());
        let (right, ssim) = box_fidelity(&x, &truth, pos2(0.5, 0.0), pos2(1.0, 1.0)).unwrap();
        // Half the samples of the box (channel 0) are off by 0.1: MSE 0.005.
        assert!(
            (right - 10.0 * (1.0f64 / 0.005).log10()).abs() < 1e-3,
            "{right}"
        );
        assert_eq!(ssim, None, "a 2×2 box is smaller than the SSIM window");
        let mut other = image();
        other.channels = 1;
        assert!(box_fidelity(&x, &other, pos2(0.0, 0.0), pos2(1.0, 1.0)).is_err());
    }

    #[test]
    fn csv_has_a_column_per_pane_and_channel() {
        let img = image();
        let csv = profile_csv(
            &[("Reconstruction, live".into(), &img)],
            pos2(0.0, 0.25),
            pos2(0.99, 0.25),
        );
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some(
                "distance_px,\"Reconstruction, live channel 0\",\"Reconstruction, live channel 1\""
            )
        );
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0], vec!["0", "0", "0"]);
        assert_eq!(rows[3][1..], ["3", "0"]);

        let mut report = roi_report(
            &[("Reconstruction".into(), &img)],
            Some((&img, &img)),
            pos2(0.0, 0.0),
            pos2(1.0, 1.0),
        );
        assert_eq!(report.box_px, Some([0, 4, 0, 2]));
        assert!(matches!(report.fidelity, Some(Ok((p, None))) if p.is_infinite()));
        report.fidelity = Some(Ok((30.0, Some(0.9))));
        let roi = roi_csv(&report);
        assert!(roi.contains("\"Reconstruction\",0,8,1.5,"), "{roi}");
        assert!(roi.contains("\"Reconstruction\",1,8,5,5,0,10"), "{roi}");
        assert!(
            roi.ends_with("reconstruction vs ground truth,30,0.9\n"),
            "{roi}"
        );
    }
}
