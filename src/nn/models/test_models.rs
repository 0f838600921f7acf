//! Test networks for the spatial decomposition and its memory study, after the BigConv paper's
//! benchmark models: plain convolution stacks on 1-D, 2-D and 3-D data (CNN1D, CNN2D, CNN3D: 3-wide
//! kernels with ReLU, one dilated and one strided layer, so halos of 1, 2 and one-sided widths all
//! occur) and a small fully convolutional segmentation network (FCN2D: a strided encoder, a
//! transposed-convolution decoder with a skip addition, a 1×1 classifier). Weights are seeded He
//! initialisations; the networks are for timing, memory and exactness tests, not for use on data.

use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::nn::kernels::conv::{Conv, ConvTranspose, per_axis};
use crate::nn::layers::graph::Network;
use crate::nn::weights::source::{he, torch_default_bias};

/// Which test network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestModel {
    Cnn1d,
    Cnn2d,
    Cnn3d,
    Fcn2d,
}

impl TestModel {
    pub const ALL: [TestModel; 4] = [
        TestModel::Cnn1d,
        TestModel::Cnn2d,
        TestModel::Cnn3d,
        TestModel::Fcn2d,
    ];

    /// Spatial axes of the data it takes.
    pub fn rank(self) -> usize {
        match self {
            TestModel::Cnn1d => 1,
            TestModel::Cnn2d | TestModel::Fcn2d => 2,
            TestModel::Cnn3d => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TestModel::Cnn1d => "cnn1d",
            TestModel::Cnn2d => "cnn2d",
            TestModel::Cnn3d => "cnn3d",
            TestModel::Fcn2d => "fcn2d",
        }
    }

    /// The network with `channels` input channels, `width` hidden channels and seeded weights.
    pub fn build(self, channels: usize, width: usize, seed: u64) -> Result<Network> {
        if channels == 0 || width == 0 {
            return Err(Error::config(
                "model",
                format!("channels and width must be positive, got {channels} and {width}"),
            ));
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let r = self.rank();
        let conv = |rng: &mut rand::rngs::StdRng,
                    c_in: usize,
                    c_out: usize,
                    k: usize,
                    s: usize,
                    p: usize,
                    d: usize| {
            let [kernel, stride, mut pad] = per_axis(r, k, s, p);
            let mut dilation = [1; 3];
            for a in 3 - r..3 {
                dilation[a] = d;
                pad[a] = p;
            }
            let fan_in = c_in * kernel.iter().product::<usize>();
            let w = he(rng, c_out * fan_in, fan_in);
            let b = torch_default_bias(rng, c_out, fan_in);
            Conv::with_geometry(c_in, c_out, kernel, stride, pad, dilation, w, Some(b), true)
        };
        let mut net = Network::new(r, channels);
        match self {
            TestModel::Cnn1d | TestModel::Cnn2d | TestModel::Cnn3d => {
                // 3×3 (pad 1), 3×3 dilated 2 (pad 2), 3×3 stride 2 (pad 1), 3×3, 1×1 out.
                let layers = [
                    (channels, width, 3, 1, 1, 1),
                    (width, width, 3, 1, 2, 2),
                    (width, width, 3, 2, 1, 1),
                    (width, width, 3, 1, 1, 1),
                    (width, channels, 1, 1, 0, 1),
                ];
                for (i, &(ci, co, k, s, p, d)) in layers.iter().enumerate() {
                    let mut c = conv(&mut rng, ci, co, k, s, p, d);
                    c.relu = i + 1 < layers.len();
                    let x = net.last();
                    net.conv(&format!("layers.{i}"), x, None, c);
                }
            }
            TestModel::Fcn2d => {
                let e1 = net.conv("enc1", 0, None, conv(&mut rng, channels, width, 3, 1, 1, 1));
                let d1 = net.conv(
                    "down1",
                    e1,
                    None,
                    conv(&mut rng, width, 2 * width, 3, 2, 1, 1),
                );
                let e2 = net.conv(
                    "enc2",
                    d1,
                    None,
                    conv(&mut rng, 2 * width, 2 * width, 3, 1, 1, 1),
                );
                let [kernel, stride, pad] = per_axis(2, 2, 2, 0);
                let fan_in = 2 * width * 4;
                let w = he(&mut rng, 2 * width * width * 4, fan_in);
                let up = net.conv_transpose(
                    "up1",
                    e2,
                    ConvTranspose::with_geometry(
                        2 * width,
                        width,
                        kernel,
                        stride,
                        pad,
                        [1; 3],
                        [0; 3],
                        w,
                        Some(torch_default_bias(&mut rng, width, fan_in)),
                    ),
                );
                let sum = net.add(up, e1);
                let d = net.conv("dec1", sum, None, conv(&mut rng, width, width, 3, 1, 1, 1));
                let mut cls = conv(&mut rng, width, channels, 1, 1, 0, 1);
                cls.relu = false;
                net.conv("classifier", d, None, cls);
            }
        }
        Ok(net)
    }
}
