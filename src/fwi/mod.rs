//! Full-waveform inversion, data-parallel over the ranks of a process group: the reference
//! torch.distributed loop (velocity model replicated on every rank, shots split across ranks,
//! gradients summed, the same Adam step everywhere) on tessera's collectives and wave physics
//! ([`crate::physics::wave`]).
//!
//! [`config`] is the versioned TOML preset (`[model]`, `[acquisition]`, `[wavelet]`, `[wave]`,
//! `[fwi]`); [`run`] is the loop, reporting each epoch through a callback of [`FwiEvent`]s (the CLI
//! draws a progress bar; `serve` and the workbench can stream them as they do `JobEvent`s);
//! [`batch`] reproduces torch's `tensor_split` (the Adam step is `optim::adam::TorchAdam`); [`load`] reads models and data
//! (`.npy`, raw float32, SEG-Y); [`figures`] draws the outputs.

pub mod batch;
pub mod config;
pub mod figures;
pub mod load;
pub mod run;

pub use config::{BUNDLED_FWI, FwiPreset};
pub use run::{
    EpochReport, FwiEvent, FwiSummary, RankEpoch, check_elastic, run, run_elastic, run_in_group,
    run_in_group_from,
};
