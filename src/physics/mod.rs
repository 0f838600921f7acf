//! Physics: forward operators `A`, their adjoints, noise models and stacks of operators.
//!
//! Vocabulary follows deepinv's `physics/forward.py`: [`Physics`] is a (possibly noisy) forward model,
//! [`LinearPhysics`] adds the adjoint with defaults for `AᵀA`, the squared operator norm (power method)
//! and the pseudo-inverse (conjugate gradient) that an operator overrides where it has a closed form.
//! Concrete operators: [`blur`] (2-D/3-D convolution with every padding), [`tomography`] and
//! [`tomography3d`] (parallel beam), [`wave`] (2-D acoustic waves as deepwave's `scalar`, with the
//! exact adjoint gradient), [`channels`] (an operator on a run of the input's channels), [`noise`]
//! and [`stack`]. Operators are built from serde configs ([`config`]).

pub mod blur;
pub mod blur_bench;
pub(crate) mod blur_engine;
pub mod channels;
pub mod config;
pub(crate) mod fft;
pub mod noise;
pub mod stack;
pub mod tomography;
pub mod tomography3d;
pub mod wave;

use crate::error::Result;
use crate::linalg;
use crate::tensor::Tensor;

pub use config::PhysicsConfig;
pub use noise::{NoiseConfig, Noisy};
pub use stack::{Stack, StackedLinearPhysics};

/// A forward model `x ↦ A(x)`, optionally followed by noise.
pub trait Physics: Send + Sync {
    /// A short human-readable description, e.g. `blur(σ=(2,1), 30°, circular)`.
    fn name(&self) -> String;

    /// Shape of `A(x)` for an input of shape `x_shape`; errors when the input is not acceptable.
    fn output_shape(&self, x_shape: &[usize]) -> Result<Vec<usize>>;

    /// The noiseless forward operator.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// A measurement `y = N(A(x))`; the noise draws are a function of `seed` only.
    fn measure(&self, x: &Tensor, seed: u64) -> Result<Tensor> {
        let _ = seed;
        self.forward(x)
    }
}

/// Iterations and tolerance of the default power method.
pub const POWER_ITERS: usize = 100;
pub const POWER_TOL: f64 = 1e-4;
/// Iterations and tolerance of the default CG pseudo-inverse.
pub const PINV_ITERS: usize = 100;
pub const PINV_TOL: f64 = 1e-6;

/// A linear forward operator with its exact adjoint.
pub trait LinearPhysics: Physics {
    /// `Aᵀy`, the exact adjoint of [`Physics::forward`].
    fn adjoint(&self, y: &Tensor) -> Result<Tensor>;

    /// `AᵀA x`; override when a fused or closed form is cheaper.
    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor> {
        self.adjoint(&self.forward(x)?)
    }

    /// ‖A‖² (largest eigenvalue of AᵀA) for inputs of shape `x_shape`, by the power method from a
    /// deterministic start. Operators with a closed form override this.
    fn op_norm_sq(&self, x_shape: &[usize]) -> Result<f64> {
        linalg::power_method(x_shape, POWER_ITERS, POWER_TOL, |v| self.adjoint_forward(v))
    }

    /// `A†y`, the least-squares solution of `Ax = y` by CG on the normal equations, started at zero.
    fn pinv(&self, y: &Tensor) -> Result<Tensor> {
        let b = self.adjoint(y)?;
        let x0 = b.zeros_like();
        Ok(
            linalg::conjugate_gradient(&b, x0, PINV_ITERS, PINV_TOL, |v| self.adjoint_forward(v))?
                .x,
        )
    }

    /// The convolution this operator applies, if it is one whose Fourier transforms a [`Stack`] may
    /// share with its other operators (wrappers such as [`Noisy`] pass it through). A capability,
    /// not a type test: any operator that is a convolution may offer it.
    fn shared_fft(&self) -> Option<SharedFft<'_>> {
        None
    }
}

/// What [`LinearPhysics::shared_fft`] hands a stack: an operator's convolution engine, opaque outside
/// `physics` (the stack's fusion reads its [`blur_engine::FusionKey`], Gram kernels and spectra).
#[derive(Clone, Copy)]
pub struct SharedFft<'a>(&'a blur_engine::Conv);

impl<'a> SharedFft<'a> {
    pub(crate) fn new(conv: &'a blur_engine::Conv) -> SharedFft<'a> {
        SharedFft(conv)
    }

    pub(crate) fn conv(self) -> &'a blur_engine::Conv {
        self.0
    }
}

impl Physics for Box<dyn LinearPhysics> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn output_shape(&self, x_shape: &[usize]) -> Result<Vec<usize>> {
        (**self).output_shape(x_shape)
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        (**self).forward(x)
    }
    fn measure(&self, x: &Tensor, seed: u64) -> Result<Tensor> {
        (**self).measure(x, seed)
    }
}

impl LinearPhysics for Box<dyn LinearPhysics> {
    fn adjoint(&self, y: &Tensor) -> Result<Tensor> {
        (**self).adjoint(y)
    }
    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor> {
        (**self).adjoint_forward(x)
    }
    fn op_norm_sq(&self, x_shape: &[usize]) -> Result<f64> {
        (**self).op_norm_sq(x_shape)
    }
    fn pinv(&self, y: &Tensor) -> Result<Tensor> {
        (**self).pinv(y)
    }
    fn shared_fft(&self) -> Option<SharedFft<'_>> {
        (**self).shared_fft()
    }
}

/// Test helper shared by operator tests: the relative dot-product (adjoint) error
/// |⟨Ax,y⟩ − ⟨x,Aᵀy⟩| / (‖Ax‖‖y‖).
pub fn adjoint_mismatch(op: &dyn LinearPhysics, x: &Tensor, y: &Tensor) -> Result<f64> {
    let ax = op.forward(x)?;
    let aty = op.adjoint(y)?;
    let lhs = ax.dot(y);
    let rhs = x.dot(&aty);
    let scale = (ax.norm() * y.norm()).max(f64::MIN_POSITIVE);
    Ok((lhs - rhs).abs() / scale)
}
