//! tessera: large-scale image reconstruction — physics operators, denoisers, tiling and algorithms.
//!
//! The numeric core (`tensor`, `linalg`, `metrics`, `fidelity`, `physics`, `denoise`, `nn`, `tiling`,
//! `optim`) knows nothing of sockets, processes or user interfaces, and reads files only through `io`
//! (a user's blur kernel, a network's weights). `io` and `samples` bring data in and out; `preset`
//! describes a whole experiment as TOML; `job` runs a preset and reports progress through a callback.
//! The binary (`cli`) parses arguments and calls the library, one file per subcommand; `dist` runs
//! the same job on several ranks (and splits neural networks over them by exact spatial decomposition, `dist::spatial`);
//! `train` trains the native neural denoisers; `dsn` trains multi-domain separation networks (a
//! classifier from one labelled and several unlabelled image domains) with each domain on its own
//! rank; `physics::wave` is 2-D acoustic wave propagation
//! (deepwave's `scalar`, with its exact adjoint gradient) and `fwi` runs full-waveform inversion on
//! it, data-parallel over the ranks of a group; `scaling` reads the runs of a scaling study back and
//! reports them (CSV, figures, one HTML page) beside a model that extends them past this machine.
//! See docs/ARCHITECTURE.md.
//!
//! ```
//! use tessera::Tensor;
//! use tessera::physics::{LinearPhysics, Physics, PhysicsConfig};
//!
//! // An anisotropic Gaussian blur with circular padding, as a preset would write it.
//! let config: PhysicsConfig =
//!     toml::from_str("kind = \"blur\"\nsigma = [2.0, 1.0]\nangle_deg = 30\npadding = \"circular\"")?;
//! let x = Tensor::full(&[1, 3, 32, 48], 0.5);
//! let blur = config.build(x.shape(), None)?;
//! let y = blur.forward(&x)?;
//! // A circular blur keeps a constant image constant, and Aᵀ is its exact adjoint.
//! assert!(y.data().iter().all(|v| (v - 0.5).abs() < 1e-5));
//! assert_eq!(blur.adjoint(&y)?.shape(), x.shape());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod denoise;
pub mod device;
pub mod dist;
pub mod dsn;
pub mod error;
pub mod fidelity;
pub mod float;
pub mod fwi;
#[cfg(feature = "gui")]
pub mod gui;
pub mod heap;
pub mod io;
pub mod job;
pub mod linalg;
pub mod memory;
pub mod metrics;
pub mod nn;
pub mod optim;
pub mod physics;
pub mod plot;
pub mod preset;
pub mod protocol;
pub mod samples;
pub mod scaling;
pub mod serve;
pub mod tensor;
pub mod tiling;
pub mod train;

pub use error::{Error, Result};
pub use tensor::Tensor;
