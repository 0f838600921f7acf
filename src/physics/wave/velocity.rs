//! The velocity model: `v[depth, x]` in m/s on a regular grid with spacings in metres (Devito's
//! `Model`). Knows nothing of sources, receivers or time stepping.

use crate::error::{Error, Result};
use crate::float::Float;
use crate::tensor::Tensor;

/// Velocity on `nz × nx` cells (row = depth), row-major, with the cell size in metres.
#[derive(Debug, Clone, PartialEq)]
pub struct VelocityModel<T> {
    pub nz: usize,
    pub nx: usize,
    pub dz_m: f64,
    pub dx_m: f64,
    pub v: Vec<T>,
}

impl<T: Float> VelocityModel<T> {
    /// A model from row-major values; every velocity must be finite and positive.
    pub fn new(nz: usize, nx: usize, dz_m: f64, dx_m: f64, v: Vec<T>) -> Result<Self> {
        if nz == 0 || nx == 0 {
            return Err(Error::config(
                "model",
                format!("the grid must not be empty, got {nz}×{nx}"),
            ));
        }
        if v.len() != nz * nx {
            return Err(Error::shape("velocity model", &[nz, nx], &[v.len()]));
        }
        for (name, d) in [("model.dz_m", dz_m), ("model.dx_m", dx_m)] {
            if !(d.is_finite() && d > 0.0) {
                return Err(Error::config(
                    name,
                    format!("grid spacing must be positive, got {d}"),
                ));
            }
        }
        if let Some(i) = v.iter().position(|x| !(x.is_finite() && x.to_f64() > 0.0)) {
            return Err(Error::config(
                "model",
                format!(
                    "velocity at cell [{}, {}] is {:?}; velocities must be finite and positive",
                    i / nx,
                    i % nx,
                    v[i]
                ),
            ));
        }
        Ok(VelocityModel {
            nz,
            nx,
            dz_m,
            dx_m,
            v,
        })
    }

    /// A model from a tensor of shape `(nz, nx)` or with leading axes of size 1.
    pub fn from_tensor(t: &Tensor, dz_m: f64, dx_m: f64) -> Result<Self> {
        let (nz, nx) = grid_of(t.shape(), "velocity model")?;
        Self::new(
            nz,
            nx,
            dz_m,
            dx_m,
            t.data().iter().map(|&x| T::from_f64(x as f64)).collect(),
        )
    }

    /// The model as an `(nz, nx)` f32 tensor.
    pub fn to_tensor(&self) -> Tensor {
        Tensor::from_vec(
            &[self.nz, self.nx],
            self.v.iter().map(|x| x.to_f64() as f32).collect(),
        )
        .expect("length is nz·nx")
    }

    /// Largest velocity (the CFL condition and the PML use it).
    pub fn max_velocity(&self) -> f64 {
        self.v.iter().map(|x| x.to_f64()).fold(0.0, f64::max)
    }

    /// Smallest velocity.
    pub fn min_velocity(&self) -> f64 {
        self.v
            .iter()
            .map(|x| x.to_f64())
            .fold(f64::INFINITY, f64::min)
    }

    /// The same model with values of another float type.
    pub fn convert<U: Float>(&self) -> VelocityModel<U> {
        VelocityModel {
            nz: self.nz,
            nx: self.nx,
            dz_m: self.dz_m,
            dx_m: self.dx_m,
            v: crate::float::convert(&self.v),
        }
    }
}

/// `(nz, nx)` of a 2-D array, allowing leading axes of size 1.
pub fn grid_of(shape: &[usize], what: &str) -> Result<(usize, usize)> {
    let n = shape.len();
    if n < 2 || shape[..n - 2].iter().any(|&d| d != 1) {
        return Err(Error::config(
            what,
            format!("expected a 2-D array (depth, x), got shape {shape:?}"),
        ));
    }
    Ok((shape[n - 2], shape[n - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_models() {
        assert!(VelocityModel::<f64>::new(2, 2, 1.0, 1.0, vec![1.0; 3]).is_err());
        assert!(VelocityModel::<f64>::new(2, 2, 0.0, 1.0, vec![1.0; 4]).is_err());
        let e = VelocityModel::<f64>::new(2, 2, 1.0, 1.0, vec![1.0, 1.0, -3.0, 1.0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("[1, 0]"), "{e}");
        assert!(VelocityModel::<f32>::new(1, 2, 1.0, 1.0, vec![f32::NAN, 1.0]).is_err());
        let t = Tensor::full(&[1, 1, 3, 4], 1500.0);
        let m = VelocityModel::<f64>::from_tensor(&t, 5.0, 5.0).unwrap();
        assert_eq!((m.nz, m.nx), (3, 4));
        assert!(
            VelocityModel::<f64>::from_tensor(&Tensor::full(&[2, 3, 4], 1.0), 1.0, 1.0).is_err()
        );
    }
}
