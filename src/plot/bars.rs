//! Stacked bars: one bar per category, its total split into parts, with a legend of the parts.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::RGBColor;

use super::{Drawn, FAMILY, Figure, chart_pixels, palette, rgb};
use crate::error::{Error, Result};

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
}

impl Figure for StackedBars {
    fn title(&self) -> &str {
        &self.title
    }

    /// Every part must have one value per category.
    fn pixels(&self) -> Result<(u32, u32)> {
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
        chart_pixels(self.size)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::count;

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
}
