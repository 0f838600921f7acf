//! Where a rank computes: the [`Device`] a job asks for (`cpu`, `cuda`, `cuda:N`) and the device
//! layer behind it. Device operations ([`ops`]) are written once against the [`backend::Backend`]
//! seam and run on an NVIDIA GPU through `crate::cuda` (cargo feature `cuda`); each has a CPU twin
//! in the numeric core that [`selftest`] compares it with. The kernels are CUDA C ([`kernels`]),
//! compiled at run time by NVRTC; the unit tests run them on the CPU (`emulator`). docs/GPU.md
//! describes the design and what is not on the GPU yet.

pub mod array;
pub mod backend;
mod choice;
pub mod coverage;
pub mod kernels;
pub mod ops;
pub mod selftest;
pub mod solve;

#[cfg(test)]
pub(crate) mod emulator;

pub use choice::Device;
