//! Networks as graphs of layers over the kernels (`super::kernels`): the graph with its inference,
//! training and backward passes ([`graph`]), the spatial blocks a rank holds and the halos each
//! layer needs ([`partition`]), pooling ([`pool`]), fully connected layers and classifier heads
//! ([`dense`]), and the training losses ([`losses`]). The models (`super::models`) are built from
//! these.

pub mod dense;
pub mod graph;
pub mod losses;
pub mod partition;
pub mod pool;
