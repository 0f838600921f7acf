//! tessera: large-scale image reconstruction — physics operators, denoisers, tiling and algorithms.
//!
//! The numeric core (`tensor`, `linalg`, `physics`, `fidelity`, `denoise`, `tiling`, `optim`,
//! `metrics`) knows nothing of files, sockets or user interfaces. `io` and `samples` bring data in and
//! out; `preset` describes a whole experiment as TOML; `job` runs a preset and reports progress through
//! a callback. The binary (`cli`) is a thin layer over `job`. See docs/ARCHITECTURE.md.

pub mod denoise;
pub mod dist;
pub mod error;
pub mod fidelity;
pub mod io;
pub mod job;
pub mod linalg;
pub mod metrics;
pub mod optim;
pub mod physics;
pub mod preset;
pub mod samples;
pub mod tensor;
pub mod tiling;

pub use error::{Error, Result};
pub use tensor::Tensor;
