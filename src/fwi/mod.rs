//! Full-waveform inversion, data-parallel over the ranks of a process group (the seed's
//! torch.distributed loop on tessera's collectives).

pub mod adam;
pub mod batch;
