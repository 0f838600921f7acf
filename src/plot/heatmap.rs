//! Heatmaps: a 2-D array as a colour-mapped image with axes in physical units, a colour bar, and
//! marks and labelled rectangles drawn over it.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::RGBColor;

use super::{Colormap, Drawn, FAMILY, Figure, rgb};
use crate::error::{Error, Result};

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

/// A rectangle outlined over a heatmap in its physical coordinates (a tile, a rank's block), with
/// an optional label in its top-left corner on a white ground.
#[derive(Debug, Clone, PartialEq)]
pub struct Outline {
    /// `(x0, x1)` and `(y0, y1)` in the heatmap's extent units.
    pub x: (f64, f64),
    pub y: (f64, f64),
    pub color: [u8; 3],
    /// Stroke width in pixels.
    pub width: u32,
    pub label: Option<String>,
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
    /// Rectangles drawn over the image (after the marks), in order.
    pub outlines: Vec<Outline>,
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
            outlines: Vec::new(),
        }
    }
    pub fn marks(mut self, marks: Marks) -> Self {
        self.marks.push(marks);
        self
    }
    pub fn outline(mut self, outline: Outline) -> Self {
        self.outlines.push(outline);
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
}

impl Figure for Heatmap<'_> {
    fn title(&self) -> &str {
        &self.title
    }

    /// The height follows the aspect ratio of the extent.
    fn pixels(&self) -> Result<(u32, u32)> {
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
        Ok((w, h))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
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
        for o in &self.outlines {
            let style = rgb(o.color).stroke_width(o.width.max(1));
            let (xa, xb, ya, yb) = (o.x.0, o.x.1, o.y.0, o.y.1);
            chart.draw_series([PathElement::new(
                vec![(xa, ya), (xb, ya), (xb, yb), (xa, yb), (xa, ya)],
                style,
            )])?;
        }
        for o in &self.outlines {
            let Some(label) = &o.label else { continue };
            let (px, py) = chart.backend_coord(&(o.x.0.min(o.x.1), o.y.0.min(o.y.1)));
            let (px, py) = (px + o.width as i32 + 2, py + o.width as i32 + 2);
            let w = 8 * label.chars().count() as i32 + 6;
            root.draw(&Rectangle::new(
                [(px, py), (px + w, py + 16)],
                WHITE.filled(),
            ))?;
            root.draw(&Rectangle::new([(px, py), (px + w, py + 16)], rgb(o.color)))?;
            root.draw(&Text::new(label.clone(), (px + 2, py + 1), (FAMILY, 12)))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::{Rgb, count};

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
    fn outlines_are_drawn_in_their_colour_with_their_label() {
        let v = vec![0.0f32; 20 * 40];
        let plain = Heatmap::new("tiles", &v, 20, 40).render().unwrap();
        let red = [230, 20, 20];
        assert_eq!(count(&plain, red), 0);
        let outline = |label: Option<&str>| {
            Heatmap::new("tiles", &v, 20, 40)
                .outline(Outline {
                    x: (0.0, 20.0),
                    y: (0.0, 20.0),
                    color: red,
                    width: 3,
                    label: label.map(String::from),
                })
                .render()
                .unwrap()
        };
        let (bare, labelled) = (outline(None), outline(Some("r1")));
        // Four sides of a 3-pixel stroke around a square a quarter of the plot wide.
        assert!(count(&bare, red) > 400, "{}", count(&bare, red));
        // The label: a white ground with dark text, over the map's colour.
        let white = |img: &Rgb| count(img, [255, 255, 255]);
        let dark = |img: &Rgb| {
            img.data
                .chunks(3)
                .filter(|p| p.iter().all(|&c| c < 60))
                .count()
        };
        let ground = white(&labelled) - white(&bare);
        assert!(ground > 100, "the label's ground: {ground} pixels");
        assert!(dark(&labelled) > dark(&bare) + 10, "the label's text");
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
}
