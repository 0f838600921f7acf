//! Figures as PNG files: line charts (a quantity against iteration, time or ranks), stacked bars
//! (a total split into parts, per category) and colour-mapped images with a colour bar, for run outputs and reports (scaling studies, full-waveform inversion).
//!
//! Drawn with plotters into an RGB buffer ([`Rgb`]) and encoded by `io` with an atomic write, so a
//! figure is either complete or absent. All text uses the bundled DejaVu Sans subset
//! (`assets/fonts`), registered once per process: no system font or font library is needed.
//! Figures are values (`LineChart`, `Heatmap`) that render on demand; [`grid`] puts several rendered
//! figures side by side.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::element::{DashedPathElement, DottedPathElement};
use plotters::prelude::*;
use plotters::style::{FontStyle, RGBColor, register_font};

use crate::error::{Error, Result};

const FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans-subset.ttf");
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

/// How a series' line is drawn, so that series can be told apart without colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dash {
    #[default]
    Solid,
    Dashed,
    Dotted,
}

/// One curve of a [`LineChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub dash: Dash,
    /// Index into the chart palette; `None` takes the series' position.
    pub color: Option<usize>,
    /// Draw a marker at every point (for sparse measurements such as one point per rank count).
    pub markers: bool,
}

impl Series {
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            label: label.into(),
            points,
            dash: Dash::Solid,
            color: None,
            markers: false,
        }
    }
    pub fn dash(mut self, dash: Dash) -> Self {
        self.dash = dash;
        self
    }
    pub fn color(mut self, index: usize) -> Self {
        self.color = Some(index);
        self
    }
    pub fn markers(mut self) -> Self {
        self.markers = true;
        self
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

/// A chart of curves, with axis labels, a legend outside the data and optional log axes.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    /// Fixed y range; `None` fits the data (with a minimum span, so a flat curve is not magnified
    /// into noise).
    pub y_range: Option<(f64, f64)>,
    pub series: Vec<Series>,
    pub size: (u32, u32),
}

impl LineChart {
    pub fn new(title: impl Into<String>) -> Self {
        LineChart {
            title: title.into(),
            x_label: String::new(),
            y_label: String::new(),
            log_x: false,
            log_y: false,
            y_range: None,
            series: Vec::new(),
            size: (800, 500),
        }
    }
    pub fn labels(mut self, x: impl Into<String>, y: impl Into<String>) -> Self {
        self.x_label = x.into();
        self.y_label = y.into();
        self
    }
    pub fn log_x(mut self) -> Self {
        self.log_x = true;
        self
    }
    pub fn log_y(mut self) -> Self {
        self.log_y = true;
        self
    }
    pub fn y_range(mut self, lo: f64, hi: f64) -> Self {
        self.y_range = Some((lo, hi));
        self
    }
    pub fn size(mut self, width: u32, height: u32) -> Self {
        self.size = (width, height);
        self
    }
    pub fn series(mut self, s: Series) -> Self {
        self.series.push(s);
        self
    }

    /// The finite points that the axes can show (positive where an axis is logarithmic).
    fn shown_points(&self, s: &Series) -> Vec<(f64, f64)> {
        s.points
            .iter()
            .copied()
            .filter(|&(x, y)| {
                x.is_finite()
                    && y.is_finite()
                    && (!self.log_x || x > 0.0)
                    && (!self.log_y || y > 0.0)
            })
            .collect()
    }

    /// Renders the chart. A chart without any drawable point shows its axes and "no data".
    pub fn render(&self) -> Result<Rgb> {
        fonts()?;
        let (w, h) = self.size;
        if w < 200 || h < 150 {
            return Err(Error::config(
                "figure size",
                format!("{w}×{h} px is too small for a chart (at least 200×150)"),
            ));
        }
        raster((w, h), &self.title, |root| self.draw(root))
    }

    /// Renders the chart into a PNG file.
    pub fn write_png(&self, path: &Path) -> Result<()> {
        self.render()?.write_png(path)
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let shown: Vec<Vec<(f64, f64)>> =
            self.series.iter().map(|s| self.shown_points(s)).collect();
        let all = shown.iter().flatten();
        let (mut x0, mut x1, mut y0, mut y1) = all.fold(
            (
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ),
            |(a, b, c, d), &(x, y)| (a.min(x), b.max(x), c.min(y), d.max(y)),
        );
        let empty = !x0.is_finite();
        if empty {
            (x0, x1) = if self.log_x { (1.0, 10.0) } else { (0.0, 1.0) };
            (y0, y1) = if self.log_y { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if let Some((lo, hi)) = self.y_range {
            (y0, y1) = (lo, hi);
        }
        (x0, x1) = widen(x0, x1, self.log_x);
        (y0, y1) = widen(y0, y1, self.log_y);

        root.fill(&WHITE)?;
        // Legend on the right, outside the plotting area, so it never covers the data.
        let legend_w = if self.series.iter().any(|s| !s.label.is_empty()) {
            let longest = self
                .series
                .iter()
                .map(|s| s.label.chars().count())
                .max()
                .unwrap_or(0);
            (longest as u32 * 8 + 60).min(root.dim_in_pixel().0 / 3)
        } else {
            0
        };
        let (plot_area, legend_area) = root.split_horizontally(root.dim_in_pixel().0 - legend_w);
        let mut builder = ChartBuilder::on(&plot_area);
        builder
            .caption(&self.title, (FAMILY, 20))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70);
        macro_rules! finish {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(self.x_label.as_str())
                    .y_desc(self.y_label.as_str())
                    .label_style((FAMILY, 13))
                    .axis_desc_style((FAMILY, 15))
                    .light_line_style(RGBColor(235, 235, 235))
                    .x_labels(8)
                    .y_labels(8)
                    .draw()?;
                for (i, (s, pts)) in self.series.iter().zip(&shown).enumerate() {
                    let color = rgb(palette(s.color.unwrap_or(i)));
                    let style = ShapeStyle::from(color).stroke_width(2);
                    match s.dash {
                        Dash::Solid => {
                            chart.draw_series(std::iter::once(PathElement::new(
                                pts.clone(),
                                style,
                            )))?;
                        }
                        Dash::Dashed => {
                            chart.draw_series(std::iter::once(DashedPathElement::new(
                                pts.clone().into_iter(),
                                9,
                                6,
                                style,
                            )))?;
                        }
                        Dash::Dotted => {
                            chart.draw_series(std::iter::once(DottedPathElement::new(
                                pts.clone(),
                                0,
                                6,
                                move |c| Circle::new(c, 1, style.filled()),
                            )))?;
                        }
                    }
                    if s.markers {
                        chart.draw_series(
                            pts.iter()
                                .map(|&p| Circle::new(p, 4, ShapeStyle::from(color).filled())),
                        )?;
                    }
                }
                if empty {
                    plot_area.draw(&Text::new(
                        "no data",
                        (
                            plot_area.dim_in_pixel().0 as i32 / 2 - 25,
                            plot_area.dim_in_pixel().1 as i32 / 2,
                        ),
                        (FAMILY, 16).into_font().color(&RGBColor(120, 120, 120)),
                    ))?;
                }
            }};
        }
        match (self.log_x, self.log_y) {
            (false, false) => finish!(builder.build_cartesian_2d(x0..x1, y0..y1)?),
            (true, false) => finish!(builder.build_cartesian_2d((x0..x1).log_scale(), y0..y1)?),
            (false, true) => finish!(builder.build_cartesian_2d(x0..x1, (y0..y1).log_scale())?),
            (true, true) => {
                finish!(builder.build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?)
            }
        }
        draw_legend(&legend_area, &self.series)?;
        Ok(())
    }
}

/// Widens a degenerate or tiny axis range: a curve that varies by 1e-4 of its value is drawn flat,
/// not magnified into a staircase with one tick label.
fn widen(lo: f64, hi: f64, log: bool) -> (f64, f64) {
    if log {
        let (lo, hi) = (lo.max(f64::MIN_POSITIVE), hi.max(f64::MIN_POSITIVE));
        if hi / lo < 1.5 {
            let mid = (lo * hi).sqrt();
            return (mid / 1.5, mid * 1.5);
        }
        return (lo / 1.1, hi * 1.1);
    }
    let scale = lo.abs().max(hi.abs());
    let min_span = (scale * 1e-3).max(1e-9);
    if hi - lo < min_span {
        let mid = 0.5 * (lo + hi);
        return (mid - min_span / 2.0, mid + min_span / 2.0);
    }
    let pad = 0.04 * (hi - lo);
    (lo - pad, hi + pad)
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[Series],
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if area.dim_in_pixel().0 == 0 {
        return Ok(());
    }
    let mut y = 48;
    for (i, s) in series
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.label.is_empty())
    {
        let color = rgb(palette(s.color.unwrap_or(i)));
        let style = ShapeStyle::from(color).stroke_width(2);
        let line = vec![(6, y), (40, y)];
        match s.dash {
            Dash::Solid => area.draw(&PathElement::new(line, style))?,
            Dash::Dashed => area.draw(&DashedPathElement::new(line, 9, 6, style))?,
            Dash::Dotted => area.draw(&DottedPathElement::new(line, 0, 6, move |c| {
                Circle::new(c, 1, style.filled())
            }))?,
        }
        if s.markers {
            area.draw(&Circle::new((23, y), 4, ShapeStyle::from(color).filled()))?;
        }
        area.draw(&Text::new(s.label.clone(), (46, y - 7), (FAMILY, 13)))?;
        y += 22;
    }
    Ok(())
}

/// Colour maps for images: perceptually ordered sequential maps and a diverging one for signed data
/// (gradients, differences).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Colormap {
    #[default]
    Gray,
    Viridis,
    Magma,
    /// Blue – white – red, for data around zero.
    Diverging,
}

impl Colormap {
    pub const ALL: [Colormap; 4] = [
        Colormap::Gray,
        Colormap::Viridis,
        Colormap::Magma,
        Colormap::Diverging,
    ];

    /// The name shown in menus.
    pub fn name(self) -> &'static str {
        match self {
            Colormap::Gray => "gray",
            Colormap::Viridis => "viridis",
            Colormap::Magma => "magma",
            Colormap::Diverging => "diverging",
        }
    }

    /// Control points at t = 0, 1/8, …, 1 (sampled from matplotlib's maps), linearly interpolated.
    fn stops(self) -> [[u8; 3]; 9] {
        match self {
            Colormap::Gray => std::array::from_fn(|i| {
                let v = (i * 255 / 8) as u8;
                [v, v, v]
            }),
            Colormap::Viridis => [
                [68, 1, 84],
                [71, 44, 122],
                [59, 81, 139],
                [44, 113, 142],
                [33, 144, 141],
                [39, 173, 129],
                [92, 200, 99],
                [170, 220, 50],
                [253, 231, 37],
            ],
            Colormap::Magma => [
                [0, 0, 4],
                [28, 16, 68],
                [79, 18, 123],
                [129, 37, 129],
                [181, 54, 122],
                [229, 80, 100],
                [251, 135, 97],
                [254, 194, 135],
                [252, 253, 191],
            ],
            // matplotlib's RdBu_r.
            Colormap::Diverging => [
                [5, 48, 97],
                [33, 102, 172],
                [67, 147, 195],
                [146, 197, 222],
                [247, 247, 247],
                [244, 165, 130],
                [214, 96, 77],
                [178, 24, 43],
                [103, 0, 31],
            ],
        }
    }

    /// The colour of `t` in [0, 1] (clamped; NaN maps to 0).
    pub fn map(self, t: f32) -> [u8; 3] {
        let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
        let stops = self.stops();
        let s = t * 8.0;
        let i = (s.floor() as usize).min(7);
        let f = s - i as f32;
        let (a, b) = (stops[i], stops[i + 1]);
        std::array::from_fn(|k| (a[k] as f32 + f * (b[k] as f32 - a[k] as f32)).round() as u8)
    }
}

/// Shapes of [`Marks`] drawn over a [`Heatmap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkShape {
    Circle,
    /// A downward triangle (the usual receiver symbol).
    Triangle,
    Cross,
}

/// Points drawn over a heatmap in its physical coordinates (sources, receivers), with a black
/// outline so they stay visible on any colour map.
#[derive(Debug, Clone, PartialEq)]
pub struct Marks {
    /// `(x, y)` in the heatmap's extent units.
    pub points: Vec<(f64, f64)>,
    pub shape: MarkShape,
    pub color: [u8; 3],
    /// Radius in pixels.
    pub size: u32,
}

/// A 2-D array drawn as a colour-mapped image with axes in physical units and a colour bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap<'a> {
    pub title: String,
    /// Row-major values, `rows × cols`; row 0 is drawn at the top.
    pub values: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub colormap: Colormap,
    /// Values mapped to the ends of the colour map; `None` takes the data's range (symmetric about
    /// zero for the diverging map).
    pub range: Option<(f32, f32)>,
    /// Physical extent of the columns and rows (e.g. metres): `(x0, x1)`, `(y_top, y_bottom)`.
    pub extent: ((f64, f64), (f64, f64)),
    pub x_label: String,
    pub y_label: String,
    pub colorbar_label: String,
    /// Width in pixels; the height follows the aspect ratio of the extent.
    pub width: u32,
    /// Point sets drawn over the image, in order.
    pub marks: Vec<Marks>,
}

impl<'a> Heatmap<'a> {
    /// A heatmap of `values` (`rows × cols`) with pixel-index axes.
    pub fn new(title: impl Into<String>, values: &'a [f32], rows: usize, cols: usize) -> Self {
        Heatmap {
            title: title.into(),
            values,
            rows,
            cols,
            colormap: Colormap::Viridis,
            range: None,
            extent: ((0.0, cols as f64), (0.0, rows as f64)),
            x_label: String::new(),
            y_label: String::new(),
            colorbar_label: String::new(),
            width: 640,
            marks: Vec::new(),
        }
    }
    pub fn marks(mut self, marks: Marks) -> Self {
        self.marks.push(marks);
        self
    }
    pub fn colormap(mut self, colormap: Colormap) -> Self {
        self.colormap = colormap;
        self
    }
    pub fn range(mut self, lo: f32, hi: f32) -> Self {
        self.range = Some((lo, hi));
        self
    }
    pub fn extent(mut self, x: (f64, f64), y: (f64, f64)) -> Self {
        self.extent = (x, y);
        self
    }
    pub fn labels(
        mut self,
        x: impl Into<String>,
        y: impl Into<String>,
        colorbar: impl Into<String>,
    ) -> Self {
        self.x_label = x.into();
        self.y_label = y.into();
        self.colorbar_label = colorbar.into();
        self
    }
    pub fn width(mut self, width: u32) -> Self {
        self.width = width;
        self
    }

    /// The value range mapped to the colour map's ends.
    pub fn value_range(&self) -> (f32, f32) {
        if let Some(r) = self.range {
            return r;
        }
        let (lo, hi) = self
            .values
            .iter()
            .filter(|v| v.is_finite())
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        if !lo.is_finite() {
            return (0.0, 1.0);
        }
        if self.colormap == Colormap::Diverging {
            let m = lo.abs().max(hi.abs()).max(f32::MIN_POSITIVE);
            return (-m, m);
        }
        if hi > lo {
            (lo, hi)
        } else {
            (lo - 0.5, lo + 0.5)
        }
    }

    pub fn render(&self) -> Result<Rgb> {
        fonts()?;
        if self.rows == 0 || self.cols == 0 || self.values.len() != self.rows * self.cols {
            return Err(Error::shape(
                format!("heatmap '{}'", self.title),
                &[self.rows, self.cols],
                &[self.values.len()],
            ));
        }
        let ((x0, x1), (y0, y1)) = self.extent;
        let aspect = ((y1 - y0).abs() / (x1 - x0).abs().max(f64::MIN_POSITIVE)).clamp(0.05, 20.0);
        let w = self.width.max(240);
        let plot_w = w.saturating_sub(190).max(50);
        let h = ((plot_w as f64 * aspect) as u32 + 110).clamp(160, 4000);
        raster((w, h), &self.title, |root| self.draw(root))
    }

    pub fn write_png(&self, path: &Path) -> Result<()> {
        self.render()?.write_png(path)
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        root.fill(&WHITE)?;
        let (lo, hi) = self.value_range();
        let span = if hi > lo { hi - lo } else { 1.0 };
        let (main, bar) = root.split_horizontally(root.dim_in_pixel().0 - 110);
        let ((x0, x1), (y0, y1)) = self.extent;
        let mut chart = ChartBuilder::on(&main)
            .caption(&self.title, (FAMILY, 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, y1..y0)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .label_style((FAMILY, 12))
            .axis_desc_style((FAMILY, 14))
            .draw()?;
        // One rectangle per screen pixel (nearest sample), not per array cell: a 4096² array draws in
        // the time of the figure's area.
        let (px_x, px_y) = chart.plotting_area().dim_in_pixel();
        let (px_x, px_y) = (px_x.max(1) as usize, px_y.max(1) as usize);
        let area = chart.plotting_area().strip_coord_spec();
        for py in 0..px_y {
            let r = (py * self.rows / px_y).min(self.rows - 1);
            for px in 0..px_x {
                let c = (px * self.cols / px_x).min(self.cols - 1);
                let v = self.values[r * self.cols + c];
                let color = if v.is_finite() {
                    rgb(self.colormap.map((v - lo) / span))
                } else {
                    RGBColor(255, 0, 255)
                };
                area.draw_pixel((px as i32, py as i32), &color)?;
            }
        }
        for m in &self.marks {
            let (fill, r) = (rgb(m.color).filled(), m.size.max(1) as i32);
            let outline = BLACK.stroke_width(1);
            for &(x, y) in &m.points {
                match m.shape {
                    MarkShape::Circle => {
                        chart.draw_series([
                            Circle::new((x, y), r, fill),
                            Circle::new((x, y), r, outline),
                        ])?;
                    }
                    MarkShape::Triangle => {
                        let tri = |style: ShapeStyle| {
                            EmptyElement::at((x, y))
                                + Polygon::new(vec![(-r, -r), (r, -r), (0, r)], style)
                        };
                        chart.draw_series([tri(fill)])?;
                        chart.draw_series([EmptyElement::at((x, y))
                            + PathElement::new(
                                vec![(-r, -r), (r, -r), (0, r), (-r, -r)],
                                outline,
                            )])?;
                    }
                    MarkShape::Cross => {
                        chart.draw_series([Cross::new((x, y), r, rgb(m.color).stroke_width(2))])?;
                    }
                }
            }
        }
        // Colour bar with five labelled values.
        let bh = bar.dim_in_pixel().1;
        let (top, bottom) = (40i32, bh as i32 - 50);
        let left = 10i32;
        for y in top..bottom {
            let t = 1.0 - (y - top) as f32 / (bottom - top).max(1) as f32;
            let c = rgb(self.colormap.map(t));
            bar.draw(&Rectangle::new([(left, y), (left + 18, y + 1)], c.filled()))?;
        }
        bar.draw(&Rectangle::new([(left, top), (left + 18, bottom)], BLACK))?;
        for k in 0..5 {
            let t = k as f32 / 4.0;
            let y = bottom - ((bottom - top) as f32 * t) as i32;
            let v = lo + t * (hi - lo);
            bar.draw(&Text::new(format_tick(v), (left + 24, y - 6), (FAMILY, 12)))?;
        }
        if !self.colorbar_label.is_empty() {
            bar.draw(&Text::new(
                self.colorbar_label.clone(),
                (2, bottom + 18),
                (FAMILY, 12),
            ))?;
        }
        Ok(())
    }
}

/// A compact tick label with four significant digits: plain for moderate magnitudes, scientific
/// otherwise.
fn format_tick(v: f32) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if (1e-2..1e5).contains(&a) {
        let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{v:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    } else {
        format!("{v:.2e}")
    }
}

/// Bars of stacked parts, one bar per category (e.g. a rank of a run, its time split into
/// gradient, denoiser, communication and idle), with a legend of the parts.
#[derive(Debug, Clone, PartialEq)]
pub struct StackedBars {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// Each part: its name and one value per category (non-finite and negative values count as 0).
    pub parts: Vec<(String, Vec<f64>)>,
    pub size: (u32, u32),
}

impl StackedBars {
    pub fn new(title: impl Into<String>, y_label: impl Into<String>) -> Self {
        StackedBars {
            title: title.into(),
            y_label: y_label.into(),
            categories: Vec::new(),
            parts: Vec::new(),
            size: (900, 480),
        }
    }

    pub fn categories(mut self, categories: Vec<String>) -> Self {
        self.categories = categories;
        self
    }

    pub fn part(mut self, name: impl Into<String>, values: Vec<f64>) -> Self {
        self.parts.push((name.into(), values));
        self
    }

    pub fn size(mut self, width: u32, height: u32) -> Self {
        self.size = (width, height);
        self
    }

    fn value(&self, part: usize, category: usize) -> f64 {
        let v = self.parts[part].1.get(category).copied().unwrap_or(0.0);
        if v.is_finite() && v > 0.0 { v } else { 0.0 }
    }

    /// Renders the chart; every part must have one value per category.
    pub fn render(&self) -> Result<Rgb> {
        fonts()?;
        if self.categories.is_empty() {
            return Err(Error::config(
                "bar chart",
                format!("`{}` has no categories", self.title),
            ));
        }
        if let Some((name, v)) = self
            .parts
            .iter()
            .find(|(_, v)| v.len() != self.categories.len())
        {
            return Err(Error::config(
                "bar chart",
                format!(
                    "`{}`: part `{name}` has {} values for {} categories",
                    self.title,
                    v.len(),
                    self.categories.len()
                ),
            ));
        }
        let (w, h) = self.size;
        if w < 200 || h < 150 {
            return Err(Error::config(
                "figure size",
                format!("{w}×{h} px is too small for a chart (at least 200×150)"),
            ));
        }
        raster((w, h), &self.title, |root| self.draw(root))
    }

    pub fn write_png(&self, path: &Path) -> Result<()> {
        self.render()?.write_png(path)
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let n = self.categories.len();
        let top = (0..n)
            .map(|c| (0..self.parts.len()).map(|p| self.value(p, c)).sum::<f64>())
            .fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.08 } else { 1.0 };
        root.fill(&WHITE)?;
        let longest = self
            .parts
            .iter()
            .map(|(name, _)| name.chars().count())
            .max()
            .unwrap_or(0);
        let legend_w = (longest as u32 * 8 + 60).min(root.dim_in_pixel().0 / 3);
        let (plot_area, legend_area) = root.split_horizontally(root.dim_in_pixel().0 - legend_w);
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(&self.title, (FAMILY, 20))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d((0..n).into_segmented(), 0.0..top)?;
        let categories = &self.categories;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(self.y_label.as_str())
            .label_style((FAMILY, 13))
            .axis_desc_style((FAMILY, 15))
            .light_line_style(RGBColor(235, 235, 235))
            .x_labels(n)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => categories.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_labels(8)
            .draw()?;
        let mut base = vec![0.0; n];
        for p in 0..self.parts.len() {
            let color = rgb(palette(p));
            chart.draw_series((0..n).map(|c| {
                let (lo, hi) = (base[c], base[c] + self.value(p, c));
                base[c] = hi;
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(c), lo),
                        (SegmentValue::Exact(c + 1), hi),
                    ],
                    color.filled(),
                );
                bar.set_margin(0, 0, 6, 6);
                bar
            }))?;
        }
        for (p, (name, _)) in self.parts.iter().enumerate() {
            let y = 50 + 22 * p as i32;
            legend_area.draw(&Rectangle::new(
                [(4, y - 6), (18, y + 6)],
                rgb(palette(p)).filled(),
            ))?;
            legend_area.draw(&Text::new(
                name.as_str(),
                (24, y - 7),
                (FAMILY, 13).into_font(),
            ))?;
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_bars_stack_their_parts() {
        let bars = StackedBars::new("time per rank", "s")
            .categories(vec!["r0".into(), "r1".into()])
            .part("gradient", vec![1.0, 2.0])
            .part("denoiser", vec![3.0, f64::NAN]);
        let img = bars.render().unwrap();
        // Both parts' colours are drawn, the first (bottom) one on both bars.
        assert!(count(&img, palette(0)) > 1000);
        assert!(count(&img, palette(1)) > 1000);
        let short = StackedBars::new("t", "s")
            .categories(vec!["a".into()])
            .part("x", vec![1.0, 2.0]);
        let e = short.render().unwrap_err();
        assert!(
            e.to_string()
                .contains("part `x` has 2 values for 1 categories"),
            "{e}"
        );
        let e = StackedBars::new("t", "s").render().unwrap_err();
        assert!(e.to_string().contains("no categories"), "{e}");
    }

    fn count(img: &Rgb, color: [u8; 3]) -> usize {
        img.data.chunks(3).filter(|p| *p == color).count()
    }

    #[test]
    fn a_line_chart_draws_each_series_in_its_colour_and_text() {
        let chart = LineChart::new("speedup")
            .labels("ranks", "speedup")
            .series(Series::new("total", vec![(1.0, 1.0), (2.0, 1.9), (4.0, 3.5)]).markers())
            .series(Series::new("ideal", vec![(1.0, 1.0), (4.0, 4.0)]).dash(Dash::Dashed));
        let img = chart.render().unwrap();
        assert_eq!((img.width, img.height), (800, 500));
        assert!(
            count(&img, palette(0)) > 200,
            "series 0 drawn in palette colour 0"
        );
        assert!(
            count(&img, palette(1)) > 50,
            "series 1 drawn in palette colour 1"
        );
        // Text (black glyph pixels) is drawn: title, labels, ticks, legend.
        let dark = img
            .data
            .chunks(3)
            .filter(|p| p.iter().all(|&v| v < 60))
            .count();
        assert!(dark > 500, "{dark} dark pixels");
    }

    #[test]
    fn a_flat_curve_is_not_magnified_and_an_empty_chart_still_renders() {
        let (lo, hi) = widen(30.0, 30.0, false);
        assert!(hi - lo > 0.02, "span {}", hi - lo);
        let (lo, hi) = widen(30.0, 30.0007, false);
        assert!(hi - lo >= 0.03 - 1e-9, "span {}", hi - lo);
        let img = LineChart::new("nothing").series(Series::new("nan", vec![(f64::NAN, 1.0)]));
        img.render().unwrap();
        let log = LineChart::new("log")
            .log_y()
            .series(Series::new("neg", vec![(1.0, -1.0)]));
        log.render().unwrap();
    }

    #[test]
    fn a_heatmap_maps_values_through_the_colour_map() {
        // Left half 0, right half 1: both ends of the map appear.
        let (rows, cols) = (20, 40);
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| if i % cols < cols / 2 { 0.0 } else { 1.0 })
            .collect();
        let img = Heatmap::new("model", &v, rows, cols)
            .colormap(Colormap::Magma)
            .render()
            .unwrap();
        assert!(count(&img, Colormap::Magma.map(0.0)) > 1000);
        assert!(count(&img, Colormap::Magma.map(1.0)) > 1000);
        let bad = Heatmap::new("bad", &v, rows, cols + 1).render();
        assert!(matches!(bad, Err(Error::ShapeMismatch { .. })));
    }

    #[test]
    fn diverging_ranges_are_symmetric_and_the_map_is_white_at_zero() {
        let v = [-1.0f32, 3.0, 0.5, 0.0];
        let h = Heatmap::new("g", &v, 2, 2).colormap(Colormap::Diverging);
        assert_eq!(h.value_range(), (-3.0, 3.0));
        assert_eq!(Colormap::Diverging.map(0.5), [247, 247, 247]);
        assert_eq!(Colormap::Gray.map(f32::NAN), [0, 0, 0]);
    }

    #[test]
    fn tick_labels_have_four_significant_digits() {
        assert_eq!(format_tick(3369.957), "3370");
        assert_eq!(format_tick(-0.55), "-0.55");
        assert_eq!(format_tick(1400.001), "1400");
        assert_eq!(format_tick(12.3456), "12.35");
        assert_eq!(format_tick(2.5e-5), "2.50e-5");
        assert_eq!(format_tick(0.0), "0");
    }

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
