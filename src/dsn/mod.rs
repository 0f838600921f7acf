//! Multi-domain separation networks (Multi-DSN; Bousmalis et al., NeurIPS 2016): a classifier
//! learnt from one labelled source domain and K unlabelled target domains together, with each
//! domain's private encoder on its own rank (domain parallelism).
//!
//! Flow: [`data`] makes labelled images and the domains (physics applied to them, or user folders)
//! → [`network`] runs one domain batch forward and backward → [`parallel`] places domains on the
//! group's ranks, exchanges the shared codes the similarity loss couples, sums the shared
//! parameters' gradients over domains in a fixed order and steps Adam → `tessera train` with a
//! `kind = "dsn"` preset writes weights and per-epoch metrics.
//!
//! Numeric core plus `dist::Collective` (as `train`): no sockets, protocol or GUI here.

pub mod data;
pub mod network;
pub mod parallel;
pub mod run;

pub use network::{
    DannSchedule, DomainBatch, DomainLosses, Dsn, DsnArch, LossWeights, Similarity, SimilarityTerm,
};
