//! 2-D constant-density acoustic wave physics, as deepwave 0.1.0's `scalar` propagator computes it:
//! `∂²u/∂t² = v²∇²u − v²f` on a regular grid, second order in time, spatial accuracy 2–8, C-PML
//! absorbing layers and an optional free surface; forward modelling of shots, the adjoint-state
//! gradient of a data misfit with respect to the velocity, and the Born operator.
//!
//! Kept apart as Devito does: the velocity model ([`velocity`], on a grid), the acquisition [`geometry`]
//! (source and receiver cells per shot), the [`wavelet`] and the [`solver`]. The solver is generic
//! over the float type ([`crate::float::Float`]): `f64` for the parity tests against deepwave, `f32` in production.
//! The inversion loop over ranks is [`crate::fwi`].

pub mod bench;
pub mod config;
pub mod geometry;
mod grid;
mod kernels;
pub mod pml;
pub mod resample;
pub mod solver;
pub mod stencil;
mod step;
pub mod velocity;
pub mod wavelet;

pub use config::{AcquisitionConfig, Precision, WaveConfig, WaveletConfig};
pub use geometry::{Acquisition, Cell, Shot};
pub use solver::{
    Gather, GivenResidual, GradientOptions, GradientStrategy, L2Misfit, Misfit, ShotGradient,
    Solver, SolverSettings, cfl_step_ratio,
};
pub use stencil::Accuracy;
pub use velocity::VelocityModel;
