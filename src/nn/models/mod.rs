//! The networks built from the layers (`super::layers`): deepinv's DRUNet ([`drunet`]) and DnCNN
//! ([`dncnn`]) with their weights' key names, and the small test networks of the spatial
//! decomposition and its memory study ([`test_models`]).

pub mod dncnn;
pub mod drunet;
pub mod test_models;
