//! Finite-difference orders and their central-difference coefficients (deepwave's
//! `regular_grid.h`): first derivative `Σₖ c¹ₖ (f₊ₖ − f₋ₖ)`, second derivative
//! `Σₖ c²ₖ ((f₊ₖ − f₀) + (f₋ₖ − f₀))`, the latter written as neighbour-minus-centre differences so a
//! constant field has exactly zero curvature.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Spatial order of accuracy of the stencil (deepwave's `accuracy`): 2, 4, 6 or 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub enum Accuracy {
    Two,
    #[default]
    Four,
    Six,
    Eight,
}

impl TryFrom<u32> for Accuracy {
    type Error = Error;
    fn try_from(order: u32) -> Result<Self> {
        match order {
            2 => Ok(Accuracy::Two),
            4 => Ok(Accuracy::Four),
            6 => Ok(Accuracy::Six),
            8 => Ok(Accuracy::Eight),
            other => Err(Error::config(
                "accuracy",
                format!("{other} is not a supported order (2, 4, 6 or 8)"),
            )),
        }
    }
}

impl From<Accuracy> for u32 {
    fn from(a: Accuracy) -> u32 {
        a.order() as u32
    }
}

impl Accuracy {
    /// The order: 2, 4, 6 or 8.
    pub fn order(self) -> usize {
        match self {
            Accuracy::Two => 2,
            Accuracy::Four => 4,
            Accuracy::Six => 6,
            Accuracy::Eight => 8,
        }
    }

    /// Half-width of the stencil (deepwave's `FD_PAD`): cells read on each side.
    pub fn radius(self) -> usize {
        self.order() / 2
    }

    /// Coefficients `c¹ₖ`, k = 1..=radius, of the first derivative.
    pub fn first(self) -> &'static [f64] {
        match self {
            Accuracy::Two => &D1_2,
            Accuracy::Four => &D1_4,
            Accuracy::Six => &D1_6,
            Accuracy::Eight => &D1_8,
        }
    }

    /// Coefficients `c²ₖ`, k = 1..=radius, of the second derivative.
    pub fn second(self) -> &'static [f64] {
        match self {
            Accuracy::Two => &D2_2,
            Accuracy::Four => &D2_4,
            Accuracy::Six => &D2_6,
            Accuracy::Eight => &D2_8,
        }
    }
}

const D1_2: [f64; 1] = [1.0 / 2.0];
const D1_4: [f64; 2] = [8.0 / 12.0, -1.0 / 12.0];
const D1_6: [f64; 3] = [3.0 / 4.0, -3.0 / 20.0, 1.0 / 60.0];
const D1_8: [f64; 4] = [4.0 / 5.0, -1.0 / 5.0, 4.0 / 105.0, -1.0 / 280.0];
const D2_2: [f64; 1] = [1.0];
const D2_4: [f64; 2] = [4.0 / 3.0, -1.0 / 12.0];
const D2_6: [f64; 3] = [3.0 / 2.0, -3.0 / 20.0, 1.0 / 90.0];
const D2_8: [f64; 4] = [8.0 / 5.0, -1.0 / 5.0, 8.0 / 315.0, -1.0 / 560.0];

/// The first-derivative stencil applied to a sampled profile, zero in the `radius` cells at each
/// end (deepwave's `diffx1` of the PML profile `b`, giving `db/dx`).
pub fn first_derivative(f: &[f64], accuracy: Accuracy, inv_spacing: f64) -> Vec<f64> {
    let r = accuracy.radius();
    let c = accuracy.first();
    let mut out = vec![0.0; f.len()];
    if f.len() <= 2 * r {
        return out;
    }
    for (i, o) in out.iter_mut().enumerate().take(f.len() - r).skip(r) {
        let mut acc = 0.0;
        for (k, ck) in c.iter().enumerate() {
            acc += ck * (f[i + k + 1] - f[i - k - 1]);
        }
        *o = acc * inv_spacing;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_parse_and_stencils_are_exact_on_polynomials() {
        for order in [2u32, 4, 6, 8] {
            let a = Accuracy::try_from(order).unwrap();
            assert_eq!(u32::from(a), order);
            // f = x^p is differentiated exactly up to degree `order` (first) / order+1 (second).
            for p in 0..=order as i32 {
                let f = |x: f64| x.powi(p);
                let x0 = 0.3;
                let h = 0.01;
                let d1: f64 = a
                    .first()
                    .iter()
                    .enumerate()
                    .map(|(k, c)| c * (f(x0 + (k + 1) as f64 * h) - f(x0 - (k + 1) as f64 * h)))
                    .sum::<f64>()
                    / h;
                let exact = if p == 0 {
                    0.0
                } else {
                    p as f64 * x0.powi(p - 1)
                };
                assert!(
                    (d1 - exact).abs() < 1e-9,
                    "order {order}, p {p}: {d1} vs {exact}"
                );
                let d2: f64 = a
                    .second()
                    .iter()
                    .enumerate()
                    .map(|(k, c)| {
                        let s = (k + 1) as f64 * h;
                        c * ((f(x0 + s) - f(x0)) + (f(x0 - s) - f(x0)))
                    })
                    .sum::<f64>()
                    / (h * h);
                let exact = if p < 2 {
                    0.0
                } else {
                    (p * (p - 1)) as f64 * x0.powi(p - 2)
                };
                assert!(
                    (d2 - exact).abs() < 1e-6,
                    "order {order}, p {p}: {d2} vs {exact}"
                );
            }
        }
        assert!(Accuracy::try_from(3).is_err());
        let e: std::result::Result<Accuracy, _> = toml::Value::Integer(5).try_into();
        assert!(e.is_err());
    }
}
