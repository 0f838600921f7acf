//! DnCNN (Zhang et al. 2017, deepinv `models/dncnn.py`) on the native kernels: `depth` 3×3
//! convolutions (3×3×3 in 3-D) with `nf` channels and ReLU between them, no batch normalisation, and
//! the input added to the last convolution's output (residual learning). σ is not used.
//! Weight names are deepinv's: `in_conv.weight`, `conv_list.{i}.weight`, `out_conv.weight` (+ `.bias`).

use crate::denoise::{Denoiser, check_sigma};
use crate::error::{Error, Result};
use crate::nn::kernels::conv::{Conv, Features};
use crate::nn::layers::graph::Network;
use crate::nn::layers::partition::{BlockDenoiser, Grid, Partition, Whole};
use crate::nn::weights::StateDict;
use crate::nn::weights::source::{LayerKind, WeightSource};
use crate::tensor::Tensor;

/// The architecture of deepinv's `DnCNN(in_channels, out_channels, depth, bias, nf, dim)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DncnnArch {
    pub in_channels: usize,
    pub out_channels: usize,
    /// Convolutions in all (deepinv default 20), ≥ 2.
    pub depth: usize,
    /// Channels of the hidden layers (deepinv default 64).
    pub nf: usize,
    /// Convolutions carry biases (deepinv default true).
    pub bias: bool,
    /// Add the input to the output (deepinv always does; needs `in_channels == out_channels`).
    pub residual: bool,
    /// Spatial axes: 2 or 3.
    pub dim: usize,
}

impl Default for DncnnArch {
    fn default() -> Self {
        DncnnArch {
            in_channels: 3,
            out_channels: 3,
            depth: 20,
            nf: 64,
            bias: true,
            residual: true,
            dim: 2,
        }
    }
}

/// A DnCNN denoiser on the native engine.
pub struct Dncnn {
    arch: DncnnArch,
    net: Network,
    weights_from: Option<String>,
}

pub(crate) fn check_arch(a: &DncnnArch) -> Result<()> {
    for (field, v, lo, hi) in [
        ("denoiser.in_channels", a.in_channels, 1, 64),
        ("denoiser.out_channels", a.out_channels, 1, 64),
        ("denoiser.depth", a.depth, 2, 1000),
        ("denoiser.nf", a.nf, 1, 4096),
        ("denoiser.dim", a.dim, 2, 3),
    ] {
        if !(lo..=hi).contains(&v) {
            return Err(Error::config(
                field,
                format!("must be in {lo}..={hi}, got {v}"),
            ));
        }
    }
    if a.residual && a.in_channels != a.out_channels {
        return Err(Error::config(
            "denoiser.residual",
            format!(
                "a residual DnCNN needs in_channels == out_channels, got {} and {}",
                a.in_channels, a.out_channels
            ),
        ));
    }
    Ok(())
}

impl Dncnn {
    fn build(arch: DncnnArch, mut src: WeightSource, from: Option<String>) -> Result<Self> {
        check_arch(&arch)?;
        let mut net = Network::new(arch.dim, arch.in_channels);
        for i in 0..arch.depth {
            let (name, c_in, c_out) = if i == 0 {
                ("in_conv".to_string(), arch.in_channels, arch.nf)
            } else if i + 1 == arch.depth {
                ("out_conv".to_string(), arch.nf, arch.out_channels)
            } else {
                (format!("conv_list.{}", i - 1), arch.nf, arch.nf)
            };
            let w = src.weight(
                &format!("{name}.weight"),
                LayerKind::Conv,
                [c_out, c_in, 3],
                arch.dim,
            )?;
            let b = if arch.bias {
                Some(src.bias(&format!("{name}.bias"), c_out)?)
            } else {
                None
            };
            let last = i + 1 == arch.depth;
            let acc = (last && arch.residual).then_some(0);
            let x = net.last();
            net.conv(
                &name,
                x,
                acc,
                Conv::new(arch.dim, c_in, c_out, 3, 1, 1, w, b, !last),
            );
        }
        src.finish()?;
        Ok(Dncnn {
            arch,
            net,
            weights_from: from,
        })
    }

    /// Builds the network with the weights of `dict`; with `inflate_3d`, 2-D weights for a 3-D
    /// network. Every key must be used.
    pub fn from_state_dict(arch: DncnnArch, dict: StateDict, inflate_3d: bool) -> Result<Self> {
        let from = dict.source().to_string();
        let src = WeightSource::Dict {
            dict,
            inflate: inflate_3d,
        };
        Self::build(arch, src, Some(from))
    }

    /// Seeded random weights, for timing only (the output means nothing; a warning says so).
    pub fn random(arch: DncnnArch, seed: u64) -> Result<Self> {
        tracing::warn!(
            "DnCNN built with RANDOM weights (no `weights` file): its output is meaningless; use it for timing only"
        );
        Self::build(arch, WeightSource::random(seed), None)
    }
}

impl Dncnn {
    pub fn arch(&self) -> &DncnnArch {
        &self.arch
    }

    /// The network graph (for training and spatial decomposition).
    pub fn network(&self) -> &Network {
        &self.net
    }

    /// A denoiser around a network of this architecture (e.g. one just trained).
    pub fn from_network(arch: DncnnArch, net: Network, from: impl Into<String>) -> Result<Self> {
        check_arch(&arch)?;
        let want = Self::random_quiet(arch.clone())?;
        if net
            .params()
            .iter()
            .map(|(n, s, _)| (n.clone(), s.clone()))
            .collect::<Vec<_>>()
            != want
                .net
                .params()
                .iter()
                .map(|(n, s, _)| (n.clone(), s.clone()))
                .collect::<Vec<_>>()
        {
            return Err(Error::config(
                "denoiser",
                "the network's layers do not match the DnCNN architecture",
            ));
        }
        Ok(Dncnn {
            arch,
            net,
            weights_from: Some(from.into()),
        })
    }

    /// Seeded random weights without the warning (the caller replaces them).
    pub(crate) fn random_quiet(arch: DncnnArch) -> Result<Self> {
        Self::build(arch, WeightSource::random(0), None)
    }
}

impl Denoiser for Dncnn {
    fn name(&self) -> String {
        let a = &self.arch;
        let what = format!(
            "dncnn({}D, {}→{} channels, depth {}, nf {}",
            a.dim, a.in_channels, a.out_channels, a.depth, a.nf
        );
        super::described(what, self.weights_from.as_deref())
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        check_sigma("denoiser", sigma)?;
        x.expect_rank("dncnn", &[self.arch.dim + 2])?;
        if x.shape()[1] != self.arch.in_channels {
            return Err(Error::shape(
                "dncnn input channels",
                &[self.arch.in_channels],
                &[x.shape()[1]],
            ));
        }
        let dims = super::drunet::dims3(x.spatial());
        let input = Features {
            batch: x.shape()[0],
            channels: x.shape()[1],
            dims,
            data: x.data().to_vec(),
        };
        let y = self.net.forward(input, dims, &Whole)?;
        let mut shape = x.shape().to_vec();
        shape[1] = self.arch.out_channels;
        Tensor::from_vec(&shape, y.data)
    }

    fn as_block_denoiser(&self) -> Option<&dyn BlockDenoiser> {
        Some(self)
    }
}

impl BlockDenoiser for Dncnn {
    fn denoise_block(
        &self,
        x: &Features,
        dims: [usize; 3],
        spatial_axes: usize,
        sigma: f32,
        partition: &dyn Partition<f32>,
    ) -> Result<Features> {
        check_sigma("denoiser", sigma)?;
        if spatial_axes != self.arch.dim || x.channels != self.arch.in_channels {
            return Err(Error::shape(
                "dncnn input block (channels, spatial axes)",
                &[self.arch.in_channels, self.arch.dim],
                &[x.channels, spatial_axes],
            ));
        }
        self.net.forward(x.clone(), dims, partition)
    }

    fn out_channels(&self) -> usize {
        self.arch.out_channels
    }

    fn halo_volumes(
        &self,
        dims: [usize; 3],
        _spatial_axes: usize,
        grid: Grid,
    ) -> Result<Option<Vec<(String, usize)>>> {
        self.net.halo_volumes(dims, grid).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residual_dncnn_with_zero_weights_is_the_identity() {
        let arch = DncnnArch {
            in_channels: 1,
            out_channels: 1,
            depth: 3,
            nf: 4,
            ..DncnnArch::default()
        };
        let mut sd = StateDict::new("zeros");
        for (name, shape) in [
            ("in_conv", [4, 1]),
            ("conv_list.0", [4, 4]),
            ("out_conv", [1, 4]),
        ] {
            sd.insert(
                format!("{name}.weight"),
                Tensor::zeros(&[shape[0], shape[1], 3, 3]),
            );
            sd.insert(format!("{name}.bias"), Tensor::zeros(&[shape[0]]));
        }
        let net = Dncnn::from_state_dict(arch.clone(), sd.clone(), false).unwrap();
        let x = Tensor::from_fn(&[2, 1, 9, 7], |i| i as f32);
        assert_eq!(net.denoise(&x, 0.0).unwrap(), x);
        // A bias on the last layer shifts the output; an unused key is named.
        sd.insert("out_conv.bias", Tensor::full(&[1], 0.5));
        let net = Dncnn::from_state_dict(arch.clone(), sd.clone(), false).unwrap();
        let y = net.denoise(&x, 0.0).unwrap();
        assert!((y.data()[5] - x.data()[5] - 0.5).abs() < 1e-6);
        sd.insert("extra.weight", Tensor::zeros(&[1]));
        let e = Dncnn::from_state_dict(arch, sd, false)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("extra.weight"), "{e}");
    }
}
