//! The networks built from the layers (`super::layers`): deepinv's DRUNet ([`drunet`]) and DnCNN
//! ([`dncnn`]) with their weights' key names, and the small test networks of the spatial
//! decomposition and its memory study ([`test_models`]).

pub mod dncnn;
pub mod drunet;
pub mod test_models;

/// A network's name for logs and reports: `what` (its kind and architecture, an open parenthesis)
/// closed with where its weights came from, or a warning that they are random.
fn described(what: String, weights_from: Option<&str>) -> String {
    match weights_from {
        Some(src) => format!("{what}, weights {src})"),
        None => format!("{what}, RANDOM WEIGHTS: output is meaningless)"),
    }
}
