//! STUB
use crate::error::Result;
use crate::tensor::Tensor;
use serde::{Deserialize, Serialize};
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sample {
    SheppLogan,
    SheppLogan3d,
    Natural,
}
pub fn generate(s: Sample, size: &[usize], _seed: u64) -> Result<Tensor> {
    let c = if s == Sample::Natural { 3 } else { 1 };
    Ok(Tensor::from_fn(&[&[1, c][..], size].concat(), |i| {
        ((i as f32) * 0.01).sin() * 0.5 + 0.5
    }))
}
