//! Colour maps from a value in [0, 1] to RGB, for heatmaps and the workbench's images.

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::Heatmap;

    #[test]
    fn diverging_ranges_are_symmetric_and_the_map_is_white_at_zero() {
        let v = [-1.0f32, 3.0, 0.5, 0.0];
        let h = Heatmap::new("g", &v, 2, 2).colormap(Colormap::Diverging);
        assert_eq!(h.value_range(), (-3.0, 3.0));
        assert_eq!(Colormap::Diverging.map(0.5), [247, 247, 247]);
        assert_eq!(Colormap::Gray.map(f32::NAN), [0, 0, 0]);
    }
}
