//! Figures as PNG files: line charts (a quantity against iteration, time or ranks), stacked bars
//! (a total split into parts, per category) and colour-mapped images with a colour bar, for run outputs and reports (scaling studies, full-waveform inversion).
//!
//! Drawn with plotters into an RGB buffer ([`Rgb`]) and encoded by `io` with an atomic write, so a
//! figure is either complete or absent. All text uses the bundled DejaVu Sans subset
//! (`assets/fonts`), registered once per process: no system font or font library is needed.
//! Figures are values (`LineChart`, `StackedBars`, `Heatmap`) that render on demand through one
//! trait, [`Figure`]: each kind says its size (or why its data cannot be drawn) and how it draws,
//! and the fonts, the raster and the PNG are shared; [`grid`] puts several rendered figures side
//! by side.

mod bars;
mod colormap;
mod heatmap;
mod line;

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{FontStyle, RGBColor, register_font};

use crate::error::{Error, Result};

pub use bars::StackedBars;
pub use colormap::Colormap;
pub use heatmap::{Heatmap, MarkShape, Marks, Outline};
pub use line::{Dash, LineChart, Series};

const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-subset.ttf");
const FAMILY: &str = "sans-serif";

/// Registers the bundled font under plotters' default family name (once per process).
fn fonts() -> Result<()> {
    static REGISTERED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font(FAMILY, FontStyle::Normal, FONT)
                .map_err(|_| "the bundled font cannot be parsed".to_string())
        })
        .clone()
        .map_err(|reason| Error::Unsupported(format!("drawing figures: {reason}")))
}

/// What drawing on a plotters backend returns.
pub type Drawn<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A figure that renders on demand. A kind says its size and how it draws; rendering (the bundled
/// font, a white raster, plotters' errors as ours) and the PNG are the same for every kind.
pub trait Figure {
    /// The title, which also names the figure in errors.
    fn title(&self) -> &str;

    /// The raster's width and height in pixels, or why this figure's data cannot be drawn.
    fn pixels(&self) -> Result<(u32, u32)>;

    /// Draws the figure on a white area of [`Figure::pixels`].
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn<DB>;

    /// Renders the figure into an RGB raster.
    fn render(&self) -> Result<Rgb> {
        fonts()?;
        let size = self.pixels()?;
        raster(size, self.title(), |root| self.draw(root))
    }

    /// Renders the figure into a PNG file (written atomically).
    fn write_png(&self, path: &Path) -> Result<()> {
        self.render()?.write_png(path)
    }
}

/// A chart's size, refused below 200×150 px, where the axes' labels and the legend overlap.
fn chart_pixels((width, height): (u32, u32)) -> Result<(u32, u32)> {
    if width < 200 || height < 150 {
        return Err(Error::config(
            "figure size",
            format!("{width}×{height} px is too small for a chart (at least 200×150)"),
        ));
    }
    Ok((width, height))
}

/// Turns a plotters error into ours (`what` names the figure).
fn drawing<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| Error::Unsupported(format!("drawing the figure '{what}': {e}"))
}

/// Draws one figure of `(width, height)` pixels on a white raster; `what` names it in errors.
fn raster<F>(size: (u32, u32), what: &str, draw: F) -> Result<Rgb>
where
    F: FnOnce(
        &DrawingArea<BitMapBackend<'_>, Shift>,
    ) -> std::result::Result<
        (),
        DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>,
    >,
{
    let (width, height) = size;
    let mut data = vec![255u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut data, size).into_drawing_area();
        draw(&root).map_err(drawing(what))?;
        root.present().map_err(drawing(what))?;
    }
    Ok(Rgb {
        width,
        height,
        data,
    })
}

/// An RGB raster, 3 bytes per pixel, rows top to bottom.
#[derive(Debug, Clone, PartialEq)]
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

impl Rgb {
    /// A raster filled with `color`.
    pub fn filled(width: u32, height: u32, color: [u8; 3]) -> Self {
        let data = color
            .iter()
            .copied()
            .cycle()
            .take(width as usize * height as usize * 3)
            .collect();
        Rgb {
            width,
            height,
            data,
        }
    }

    /// The pixel at column `x`, row `y`.
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let i = (y as usize * self.width as usize + x as usize) * 3;
        [self.data[i], self.data[i + 1], self.data[i + 2]]
    }

    /// Encodes the raster as an 8-bit RGB PNG at `path` (atomically).
    pub fn write_png(&self, path: &Path) -> Result<()> {
        crate::io::encode_png_rgb8(path, &self.data, self.width, self.height)
    }
}

/// Distinct colours for series and per-rank figures (Tableau 10).
pub const PALETTE: [[u8; 3]; 10] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
];

/// The palette colour for index `i` (wrapping).
pub fn palette(i: usize) -> [u8; 3] {
    PALETTE[i % PALETTE.len()]
}

fn rgb(c: [u8; 3]) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

/// Places rendered figures in a grid of `columns`, row by row, on a white background.
pub fn grid(figures: &[Rgb], columns: usize) -> Result<Rgb> {
    if figures.is_empty() || columns == 0 {
        return Err(Error::config(
            "figure grid",
            "needs at least one figure and one column",
        ));
    }
    let columns = columns.min(figures.len());
    let rows = figures.len().div_ceil(columns);
    let col_w: Vec<u32> = (0..columns)
        .map(|c| {
            figures
                .iter()
                .skip(c)
                .step_by(columns)
                .map(|f| f.width)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let row_h: Vec<u32> = (0..rows)
        .map(|r| {
            figures
                .iter()
                .skip(r * columns)
                .take(columns)
                .map(|f| f.height)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let (w, h) = (col_w.iter().sum::<u32>(), row_h.iter().sum::<u32>());
    let mut out = Rgb::filled(w, h, [255, 255, 255]);
    for (i, f) in figures.iter().enumerate() {
        let (r, c) = (i / columns, i % columns);
        let x0 = col_w[..c].iter().sum::<u32>() as usize;
        let y0 = row_h[..r].iter().sum::<u32>() as usize;
        for y in 0..f.height as usize {
            let src = &f.data[y * f.width as usize * 3..(y + 1) * f.width as usize * 3];
            let dst = ((y0 + y) * w as usize + x0) * 3;
            out.data[dst..dst + src.len()].copy_from_slice(src);
        }
    }
    Ok(out)
}

/// Pixels of `img` exactly `color` (tests of every figure).
#[cfg(test)]
fn count(img: &Rgb, color: [u8; 3]) -> usize {
    img.data.chunks(3).filter(|p| *p == color).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_places_figures_row_by_row() {
        let a = Rgb::filled(3, 2, [1, 1, 1]);
        let b = Rgb::filled(2, 4, [2, 2, 2]);
        let c = Rgb::filled(3, 1, [3, 3, 3]);
        let g = grid(&[a, b, c], 2).unwrap();
        assert_eq!((g.width, g.height), (5, 5));
        assert_eq!(g.pixel(0, 0), [1, 1, 1]);
        assert_eq!(g.pixel(3, 3), [2, 2, 2]);
        assert_eq!(g.pixel(0, 4), [3, 3, 3]);
        assert_eq!(g.pixel(4, 4), [255, 255, 255]);
        assert!(grid(&[], 2).is_err());
    }

    #[test]
    fn figures_are_written_as_png_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loss.png");
        LineChart::new("loss")
            .log_y()
            .series(Series::new(
                "loss",
                vec![(0.0, 10.0), (1.0, 3.0), (2.0, 1.0)],
            ))
            .write_png(&path)
            .unwrap();
        let back = crate::io::read_image(&path).unwrap();
        assert_eq!(back.shape(), &[1, 3, 500, 800]);
    }
}
