//! The figures of an inversion (rank 0, drawn with [`crate::plot`]): `ricker.png` (the source
//! wavelet), `observed_data.png` (shot gathers), `loss.png` (loss and model error per epoch) and the
//! per-epoch panels `epoch_NNNN.png` (true model, inverted model, gradient, source and receiver
//! illumination, with the sources and receivers drawn over the models).

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::float::Float;
use crate::physics::wave::{Acquisition, Gather};
use crate::plot::{Colormap, Figure, Heatmap, LineChart, MarkShape, Marks, Rgb, Series, grid};

/// Width of one panel in pixels.
const PANEL_WIDTH: u32 = 560;
/// The shot gathers shown in `observed_data.png` (first, middle, last).
const GATHERS_SHOWN: usize = 3;
/// Gathers are clipped at this quantile of |amplitude|, so that reflections are not drowned by the
/// direct wave.
const CLIP_QUANTILE: f64 = 0.98;
/// Illumination is shown in decibels below its peak, down to this (the source spots would otherwise
/// hide everything else).
const ILLUMINATION_DB: f32 = 60.0;
/// The wavelet is drawn up to this many times the end of its energy (amplitude above 1e-3 of peak).
const WAVELET_MARGIN: f64 = 1.5;

/// The model grid and where the sources and receivers sit on it, in metres.
pub struct Layout {
    pub nz: usize,
    pub nx: usize,
    pub dz: f64,
    pub dx: f64,
    sources: Vec<(f64, f64)>,
    receivers: Vec<(f64, f64)>,
}

impl Layout {
    pub fn new(nz: usize, nx: usize, dz: f64, dx: f64, acquisition: &Acquisition) -> Layout {
        let metres = |cells: &mut dyn Iterator<Item = &[usize; 2]>| {
            let mut unique: Vec<[usize; 2]> = cells.copied().collect();
            unique.sort_unstable();
            unique.dedup();
            unique
                .into_iter()
                .map(|[z, x]| (x as f64 * dx, z as f64 * dz))
                .collect()
        };
        let shots = &acquisition.shots;
        Layout {
            nz,
            nx,
            dz,
            dx,
            sources: metres(&mut shots.iter().flat_map(|s| &s.sources)),
            receivers: metres(&mut shots.iter().flat_map(|s| &s.receivers)),
        }
    }

    /// A heatmap of one model-grid quantity with axes in metres.
    fn heatmap<'a>(&self, title: String, values: &'a [f32], unit: &str) -> Heatmap<'a> {
        Heatmap::new(title, values, self.nz, self.nx)
            .extent(
                (0.0, self.nx as f64 * self.dx),
                (0.0, self.nz as f64 * self.dz),
            )
            .labels("x (m)", "depth (m)", unit)
            .width(PANEL_WIDTH)
    }

    /// `heatmap` with the sources (red circles) and receivers (white triangles) drawn over it.
    fn with_acquisition<'a>(&self, map: Heatmap<'a>) -> Heatmap<'a> {
        map.marks(Marks {
            points: self.receivers.clone(),
            shape: MarkShape::Triangle,
            color: [255, 255, 255],
            size: 4,
        })
        .marks(Marks {
            points: self.sources.clone(),
            shape: MarkShape::Circle,
            color: [220, 30, 30],
            size: 4,
        })
    }
}

/// The per-epoch panel `epoch_NNNN.png`: true model (when known) and inverted model on one velocity
/// scale with the acquisition drawn over them, the gradient (diverging, symmetric about zero) and the
/// source and receiver illumination (when computed). Returns the file name.
pub fn epoch_panel(
    out_dir: &Path,
    (epoch, model_error): (usize, Option<f64>),
    layout: &Layout,
    truth: Option<&[f32]>,
    model: &[f32],
    gradient: &[f32],
    illumination: Option<(&[f32], &[f32])>,
) -> Result<PathBuf> {
    let range = |v: &[f32]| {
        v.iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            })
    };
    // The true model's range when known, so that both models share one colour scale.
    let (lo, hi) = range(truth.unwrap_or(model));
    let velocity = |title: String, v| {
        layout.with_acquisition(
            layout
                .heatmap(title, v, "m/s")
                .colormap(Colormap::Viridis)
                .range(lo, hi),
        )
    };
    let mut panels: Vec<Rgb> = Vec::with_capacity(5);
    if let Some(t) = truth {
        panels.push(velocity("true model".into(), t).render()?);
    }
    let error = model_error
        .map(|e| format!(", error {:.2} %", 100.0 * e))
        .unwrap_or_default();
    panels.push(velocity(format!("model after epoch {epoch}{error}"), model).render()?);
    panels.push(
        layout
            .heatmap("gradient ∂loss/∂v".into(), gradient, "")
            .colormap(Colormap::Diverging)
            .render()?,
    );
    if let Some((src, rcv)) = illumination {
        for (title, v) in [
            ("source illumination Σ u²", src),
            ("receiver illumination Σ λ²", rcv),
        ] {
            let db = decibels(v);
            panels.push(
                layout
                    .heatmap(title.into(), &db, "dB")
                    .colormap(Colormap::Magma)
                    .range(-ILLUMINATION_DB, 0.0)
                    .render()?,
            );
        }
    }
    let columns = if panels.len() > 4 { 3 } else { 2 };
    let name = PathBuf::from(format!("epoch_{epoch:04}.png"));
    grid(&panels, columns)?.write_png(&out_dir.join(&name))?;
    Ok(name)
}

/// `ricker.png`, `observed_data.png`, `loss.png`; returns their file names. `history` holds
/// `(epoch, loss, model error, low-pass cutoff)` per epoch, `initial_error` the starting model's
/// error; `observed[i]` was recorded by `acquisition.shots[i]`.
pub fn summary_figures<T: Float>(
    out_dir: &Path,
    history: &[(usize, f64, Option<f64>, Option<f64>)],
    initial_error: Option<f64>,
    wavelet: &[f64],
    dt_s: f64,
    (observed, acquisition, dx): (&[Gather<T>], &Acquisition, f64),
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut put = |name: &str, figure: Rgb| -> Result<()> {
        figure.write_png(&out_dir.join(name))?;
        written.push(PathBuf::from(name));
        Ok(())
    };

    let peak = wavelet.iter().fold(0.0f64, |m, a| m.max(a.abs()));
    let end = wavelet
        .iter()
        .rposition(|a| a.abs() > 1e-3 * peak)
        .map_or(wavelet.len(), |i| {
            (((i + 1) as f64 * WAVELET_MARGIN) as usize).min(wavelet.len())
        });
    let wave: Vec<(f64, f64)> = wavelet[..end]
        .iter()
        .enumerate()
        .map(|(i, &a)| (i as f64 * dt_s, a))
        .collect();
    put(
        "ricker.png",
        LineChart::new("source wavelet")
            .labels("time (s)", "amplitude")
            .series(Series::new("wavelet", wave))
            .render()?,
    )?;

    if !observed.is_empty() {
        let n = observed.len();
        let mut shown: Vec<usize> = (0..GATHERS_SHOWN)
            .map(|k| k * (n - 1) / (GATHERS_SHOWN - 1).max(1))
            .collect();
        shown.dedup();
        let gathers: Vec<(usize, Vec<f32>)> = shown
            .iter()
            .map(|&i| (i, time_major(&observed[i])))
            .collect();
        // One clip for all panels, so that amplitudes compare across shots.
        let mut all: Vec<f32> = gathers
            .iter()
            .flat_map(|(_, g)| g.iter().map(|v| v.abs()))
            .filter(|v| v.is_finite())
            .collect();
        let clip = quantile(&mut all, CLIP_QUANTILE).max(f32::MIN_POSITIVE);
        let panels = gathers
            .iter()
            .map(|(i, g)| {
                let gather = &observed[*i];
                // Receivers along x (metres) and time in milliseconds: a gather's usual aspect.
                let xs = acquisition.shots.get(*i).map(|s| {
                    let first = s.receivers.first().map_or(0, |c| c[1]) as f64 * dx;
                    let last = s.receivers.last().map_or(0, |c| c[1]) as f64 * dx;
                    (first, last)
                });
                let (x0, x1) = match xs {
                    Some((a, b)) if a != b => (a, b),
                    _ => (0.0, gather.receivers as f64 * dx),
                };
                Heatmap::new(format!("shot {}", i + 1), g, gather.nt, gather.receivers)
                    .extent((x0, x1), (0.0, gather.nt as f64 * dt_s * 1e3))
                    .labels("receiver x (m)", "time (ms)", "amplitude")
                    .colormap(Colormap::Diverging)
                    .range(-clip, clip)
                    .width(PANEL_WIDTH)
                    .render()
            })
            .collect::<Result<Vec<_>>>()?;
        put("observed_data.png", grid(&panels, panels.len())?)?;
    }

    if !history.is_empty() {
        // One series per frequency stage: the loss rises where the cutoff steps up.
        let mut misfit = LineChart::new("data misfit per frequency stage")
            .labels("epoch", "loss")
            .log_y();
        for (k, stage) in history.chunk_by(|a, b| a.3 == b.3).enumerate() {
            let label = match stage[0].3 {
                Some(c) => format!("≤ {c} Hz"),
                None => "full band".into(),
            };
            let points = stage.iter().map(|r| (r.0 as f64, r.1)).collect();
            misfit = misfit.series(Series::new(label, points).markers().color(k));
        }
        let mut charts = vec![misfit.render()?];
        let error: Vec<(f64, f64)> = history
            .iter()
            .filter_map(|r| Some((r.0 as f64, 100.0 * r.2?)))
            .collect();
        if !error.is_empty() {
            let mut error = error;
            if let Some(e0) = initial_error {
                error.insert(0, (0.0, 100.0 * e0));
            }
            charts.push(
                LineChart::new("relative model error ‖v − v_true‖ / ‖v_true‖")
                    .labels("epoch", "error (%)")
                    .series(Series::new("model error", error).markers().color(3))
                    .render()?,
            );
        }
        put("loss.png", grid(&charts, charts.len())?)?;
    }
    Ok(written)
}

/// A gather (`receivers × nt`) as `nt × receivers`, time down the rows.
fn time_major<T: Float>(g: &Gather<T>) -> Vec<f32> {
    let mut out = vec![0.0f32; g.data.len()];
    for r in 0..g.receivers {
        for t in 0..g.nt {
            out[t * g.receivers + r] = g.data[r * g.nt + t].to_f64() as f32;
        }
    }
    out
}

/// `10 log10(v / max v)`, floored at `-ILLUMINATION_DB`.
fn decibels(v: &[f32]) -> Vec<f32> {
    let peak = v.iter().fold(0.0f32, |m, &x| m.max(x));
    v.iter()
        .map(|&x| {
            if peak > 0.0 && x > 0.0 {
                (10.0 * (x / peak).log10()).max(-ILLUMINATION_DB)
            } else {
                -ILLUMINATION_DB
            }
        })
        .collect()
}

/// The `q` quantile of `values` (reordered in place); 0 when empty.
fn quantile(values: &mut [f32], q: f64) -> f32 {
    if values.is_empty() {
        return 0.0;
    }
    let k = ((values.len() - 1) as f64 * q).round() as usize;
    *values.select_nth_unstable_by(k, f32::total_cmp).1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physics::wave::Shot;

    #[test]
    fn gathers_are_drawn_time_down_the_rows() {
        let g = Gather {
            receivers: 2,
            nt: 3,
            data: vec![1.0f64, 2.0, 3.0, 10.0, 20.0, 30.0],
        };
        assert_eq!(time_major(&g), vec![1.0, 10.0, 2.0, 20.0, 3.0, 30.0]);
    }

    #[test]
    fn quantile_picks_the_ordered_value() {
        let mut v: Vec<f32> = (0..101).rev().map(|i| i as f32).collect();
        assert_eq!(quantile(&mut v, 0.98), 98.0);
        assert_eq!(quantile(&mut [], 0.5), 0.0);
    }

    #[test]
    fn illumination_is_decibels_below_the_peak() {
        assert_eq!(
            decibels(&[100.0, 10.0, 1.0, 0.0]),
            vec![0.0, -10.0, -20.0, -60.0]
        );
    }

    #[test]
    fn layout_places_each_cell_once_in_metres() {
        let shot = |s: usize| Shot {
            sources: vec![[1, s]],
            receivers: vec![[0, 0], [0, 4]],
        };
        let acq = Acquisition {
            shots: vec![shot(2), shot(3)],
        };
        let l = Layout::new(5, 6, 10.0, 4.0, &acq);
        assert_eq!(l.sources, vec![(8.0, 10.0), (12.0, 10.0)]);
        assert_eq!(l.receivers, vec![(0.0, 0.0), (16.0, 0.0)]);
    }
}
