//! Line charts: curves against a shared x axis, solid, dashed or dotted, with optional markers,
//! log axes and a legend outside the data.

use plotters::coord::Shift;
use plotters::element::{DashedPathElement, DottedPathElement};
use plotters::prelude::*;
use plotters::style::RGBColor;

use super::{Drawn, FAMILY, Figure, chart_pixels, palette, rgb};
use crate::error::Result;

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
}

impl Figure for LineChart {
    fn title(&self) -> &str {
        &self.title
    }

    /// A chart without any drawable point still has a size: it shows its axes and "no data".
    fn pixels(&self) -> Result<(u32, u32)> {
        chart_pixels(self.size)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
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

fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, series: &[Series]) -> Drawn<DB> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::count;

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
}
