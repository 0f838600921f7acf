//! Operators restricted to a run of channels, so that one operator's work can be shared among ranks.
//!
//! Blurs and tomography act on each channel of a `(B, C, …)` input independently, so an operator
//! `A` splits into `A₀ … A_{p−1}`, part `k` measuring channels `[lo_k, hi_k)` of `A(x)`. Their stack
//! poses the same least-squares problem: `Σ AₖᵀAₖ x = AᵀA x`, each part's adjoint filling only its
//! own channels (the others are exact zeros, so the stack's ordered sums reproduce the whole
//! operator's bits). Parts are cut like torch's `tensor_split`: the first `C mod p` parts get one
//! channel more.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::{LinearPhysics, NoiseConfig, Noisy, Physics, PhysicsConfig};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Part `index` of `parts` contiguous channel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelPart {
    pub index: usize,
    pub parts: usize,
}

impl ChannelPart {
    /// The channels of this part among `channels`, or an error naming `field` when there are fewer
    /// channels than parts.
    pub fn range(&self, channels: usize, field: &str) -> Result<Range<usize>> {
        if self.parts == 0 || self.index >= self.parts {
            return Err(Error::config(
                field,
                format!("part {} of {} does not exist", self.index, self.parts),
            ));
        }
        if self.parts > channels {
            return Err(Error::config(
                field,
                format!(
                    "cannot split {channels} channel(s) into {} operators: give 1..={channels} parts",
                    self.parts
                ),
            ));
        }
        let (base, extra) = (channels / self.parts, channels % self.parts);
        let start = self.index * base + self.index.min(extra);
        Ok(start..start + base + usize::from(self.index < extra))
    }
}

/// One operator of a stack as a job builds it: a physics config, whole or restricted to a part of
/// the image's channels.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorSpec {
    pub config: PhysicsConfig,
    pub channels: Option<ChannelPart>,
}

impl OperatorSpec {
    pub fn whole(config: PhysicsConfig) -> Self {
        OperatorSpec {
            config,
            channels: None,
        }
    }

    /// The operator for inputs of shape `x_shape`, with optional measurement noise (applied to
    /// what this operator measures, i.e. to its channels only).
    pub fn build(
        &self,
        x_shape: &[usize],
        noise: Option<&NoiseConfig>,
    ) -> Result<Box<dyn LinearPhysics>> {
        let Some(part) = self.channels else {
            return self.config.build(x_shape, noise);
        };
        let slice = ChannelSlice::new(&self.config, part, x_shape)?;
        Ok(match noise {
            Some(n) => {
                n.validate()?;
                Box::new(Noisy {
                    inner: slice,
                    noise: n.clone(),
                })
            }
            None => Box::new(slice),
        })
    }

    /// The fraction of the whole operator's work this part does, for an input with `channels`.
    pub fn work_fraction(&self, channels: usize) -> f64 {
        match self.channels.and_then(|p| p.range(channels, "").ok()) {
            Some(r) => r.len() as f64 / channels as f64,
            None => 1.0,
        }
    }
}

/// `x ↦ A(x[:, lo..hi])`: an operator applied to a run of the input's channels; its adjoint puts
/// `Aᵀy` back into those channels of a zero image of the full shape.
pub struct ChannelSlice {
    inner: Box<dyn LinearPhysics>,
    channels: Range<usize>,
    /// The full input shape `(B, C, …)` the slice was built for.
    x_shape: Vec<usize>,
}

const FIELD: &str = "distributed.split_by_channel";

impl ChannelSlice {
    pub fn new(config: &PhysicsConfig, part: ChannelPart, x_shape: &[usize]) -> Result<Self> {
        if x_shape.len() < 3 {
            return Err(Error::config(
                FIELD,
                format!("needs a (B, C, …) input, got shape {x_shape:?}"),
            ));
        }
        let channels = part.range(x_shape[1], FIELD)?;
        let mut sub = x_shape.to_vec();
        sub[1] = channels.len();
        let inner = config.build(&sub, None).map_err(|e| {
            Error::config(
                FIELD,
                format!("{channels:?} of a {}-channel input: {e}", x_shape[1]),
            )
        })?;
        Ok(ChannelSlice {
            inner,
            channels,
            x_shape: x_shape.to_vec(),
        })
    }

    fn sub_shape(&self) -> Vec<usize> {
        let mut sub = self.x_shape.clone();
        sub[1] = self.channels.len();
        sub
    }

    fn check_input(&self, x_shape: &[usize]) -> Result<()> {
        if x_shape != self.x_shape.as_slice() {
            return Err(Error::shape("channel slice input", &self.x_shape, x_shape));
        }
        Ok(())
    }

    /// `x[:, lo..hi]`.
    fn take(&self, x: &Tensor) -> Result<Tensor> {
        self.check_input(x.shape())?;
        let plane: usize = self.x_shape[2..].iter().product();
        let c = self.x_shape[1];
        let mut data = Vec::with_capacity(self.x_shape[0] * self.channels.len() * plane);
        for b in 0..self.x_shape[0] {
            let at = (b * c + self.channels.start) * plane;
            data.extend_from_slice(&x.data()[at..at + self.channels.len() * plane]);
        }
        Tensor::from_vec(&self.sub_shape(), data)
    }

    /// `z` (of the sliced shape) written into channels `lo..hi` of a zero tensor of the full shape.
    fn put(&self, z: &Tensor) -> Result<Tensor> {
        let sub = self.sub_shape();
        if z.shape() != sub.as_slice() {
            return Err(Error::shape("channel slice adjoint", &sub, z.shape()));
        }
        let plane: usize = self.x_shape[2..].iter().product();
        let (c, run) = (self.x_shape[1], self.channels.len() * plane);
        let mut out = Tensor::zeros(&self.x_shape);
        for b in 0..self.x_shape[0] {
            let at = (b * c + self.channels.start) * plane;
            out.data_mut()[at..at + run].copy_from_slice(&z.data()[b * run..(b + 1) * run]);
        }
        Ok(out)
    }
}

impl Physics for ChannelSlice {
    fn name(&self) -> String {
        let r = &self.channels;
        match r.len() {
            1 => format!("{} [channel {}]", self.inner.name(), r.start),
            _ => format!("{} [channels {}..{}]", self.inner.name(), r.start, r.end),
        }
    }

    fn output_shape(&self, x_shape: &[usize]) -> Result<Vec<usize>> {
        self.check_input(x_shape)?;
        self.inner.output_shape(&self.sub_shape())
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.inner.forward(&self.take(x)?)
    }
}

impl LinearPhysics for ChannelSlice {
    fn adjoint(&self, y: &Tensor) -> Result<Tensor> {
        self.put(&self.inner.adjoint(y)?)
    }

    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor> {
        self.put(&self.inner.adjoint_forward(&self.take(x)?)?)
    }

    fn op_norm_sq(&self, x_shape: &[usize]) -> Result<f64> {
        self.check_input(x_shape)?;
        self.inner.op_norm_sq(&self.sub_shape())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physics::adjoint_mismatch;

    fn blur(padding: &str) -> PhysicsConfig {
        let toml = format!(
            "kind = \"blur\"\nsigma = [1.5, 0.8]\nangle_deg = 20.0\npadding = \"{padding}\""
        );
        toml::from_str(&toml).unwrap()
    }

    fn image(shape: &[usize], seed: u64) -> Tensor {
        let n = shape.iter().product();
        let mut s = seed;
        let data = (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect();
        Tensor::from_vec(shape, data).unwrap()
    }

    #[test]
    fn parts_cut_channels_like_tensor_split_and_too_many_parts_are_named() {
        let ranges: Vec<_> = (0..2)
            .map(|index| ChannelPart { index, parts: 2 }.range(3, "f").unwrap())
            .collect();
        assert_eq!(ranges, vec![0..2, 2..3]);
        let err = ChannelPart { index: 0, parts: 4 }
            .range(3, "distributed.split_by_channel")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("distributed.split_by_channel") && err.contains("3 channel"),
            "{err}"
        );
    }

    #[test]
    fn split_parts_are_adjoint_and_sum_to_the_whole_operator_bit_for_bit() {
        let shape = [2, 3, 17, 13];
        let x = image(&shape, 1);
        for padding in ["circular", "reflect", "valid"] {
            let config = blur(padding);
            let whole = config.build(&shape, None).unwrap();
            let parts: Vec<_> = (0..3)
                .map(|index| {
                    ChannelSlice::new(&config, ChannelPart { index, parts: 3 }, &shape).unwrap()
                })
                .collect();
            // The parts measure the whole operator's channels.
            let y = whole.forward(&x).unwrap();
            let plane: usize = y.shape()[2..].iter().product();
            for (k, p) in parts.iter().enumerate() {
                let yk = p.forward(&x).unwrap();
                for b in 0..2 {
                    let want = &y.data()[(b * 3 + k) * plane..(b * 3 + k + 1) * plane];
                    assert_eq!(&yk.data()[b * plane..(b + 1) * plane], want, "{padding}");
                }
                let r = image(&p.output_shape(&shape).unwrap(), 7 + k as u64);
                assert!(adjoint_mismatch(p, &x, &r).unwrap() < 1e-6, "{padding}");
            }
            // Σ AₖᵀAₖx in part order equals AᵀAx exactly: the other channels add exact zeros.
            let mut sum = Tensor::zeros(&shape);
            for p in &parts {
                let t = p.adjoint_forward(&x).unwrap();
                sum.data_mut()
                    .iter_mut()
                    .zip(t.data())
                    .for_each(|(s, v)| *s += v);
            }
            assert_eq!(
                sum.data(),
                whole.adjoint_forward(&x).unwrap().data(),
                "{padding}"
            );
        }
    }

    #[test]
    fn a_slice_refuses_inputs_of_another_shape() {
        let s = ChannelSlice::new(
            &blur("circular"),
            ChannelPart { index: 1, parts: 2 },
            &[1, 3, 8, 8],
        )
        .unwrap();
        assert!(s.forward(&Tensor::zeros(&[1, 2, 8, 8])).is_err());
        assert!(s.adjoint(&Tensor::zeros(&[1, 3, 8, 8])).is_err());
    }
}
