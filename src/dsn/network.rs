//! The domain separation network (Bousmalis et al. 2016, fig. 1): per domain a private encoder, one
//! shared encoder, one shared decoder reconstructing each image from the sum of its private and
//! shared codes (`D(E_c(x) + E_p(x))`, the paper's eq. 4), a task classifier on the shared code and a
//! domain classifier behind a gradient reversal layer (DANN similarity). Forward and backward per
//! domain batch; the similarity term that couples domains (MMD) is computed by the caller from the
//! shared codes of every domain and handed in as a gradient, so that a domain's pass needs nothing
//! from other ranks but that gradient (`crate::dsn::parallel`).
//!
//! Encoders: conv 3×3 → ReLU → max-pool 2 → conv 3×3 → ReLU → max-pool 2 → linear to the code.
//! Decoder: linear → ReLU → reshape → (transposed conv 2× → conv 3×3 → ReLU) → transposed conv 2× →
//! conv 3×3 (the image). Parameters are grouped as *shared* (shared encoder, decoder, classifier,
//! domain classifier — replicated on every rank, gradients summed over domains) and *private* (one
//! encoder per domain, held only where the domain is placed).
//!
//! Spatial decomposition (`*_on` with a `Partition` of several ranks, `dsn::parallel`): the
//! convolutional trunks run on each rank's block of their maps with halo exchanges; a trunk's
//! output is all-gathered where a linear head or the loss needs the whole map (the encoders' last
//! feature maps, the decoder's images: small next to the trunks' activations), and the gradients
//! coming back are cut to each rank's block (the replicated part ran on every rank, so the
//! gather's adjoint, which would add the ranks' copies, is not what flows back).

use std::borrow::Cow;

use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::float::Float;
use crate::nn::kernels::conv::{Conv, ConvTranspose, Features, per_axis};
use crate::nn::layers::dense::{Linear, Mlp, MlpTape, relu, relu_backward, reverse_gradient};
use crate::nn::layers::losses::{difference_loss, scale_invariant_mse};
use crate::nn::layers::partition::{Partition, Region, Whole, copy_region};
use crate::nn::layers::pool::{Pool, PoolKind};
use crate::nn::weights::source::{he, torch_default_bias};
use crate::nn::{Gradients, Network, Tape};

/// The network's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DsnArch {
    /// Side of the square single-channel images, in pixels (a multiple of 4).
    pub image_size: usize,
    /// Channels of the first convolution (the second has twice as many).
    pub width: usize,
    /// Length of the shared and of the private codes.
    pub code: usize,
    /// Hidden units of the task and domain classifiers.
    pub hidden: usize,
    /// Classes of the task.
    pub classes: usize,
}

impl From<&DsnArch> for crate::memory::DsnNetwork {
    fn from(a: &DsnArch) -> Self {
        crate::memory::DsnNetwork {
            image_size: a.image_size,
            width: a.width,
            code: a.code,
            hidden: a.hidden,
            classes: a.classes,
        }
    }
}

impl Default for DsnArch {
    fn default() -> Self {
        DsnArch {
            image_size: 32,
            width: 8,
            code: 32,
            hidden: 32,
            classes: 4,
        }
    }
}

impl DsnArch {
    pub fn validate(&self) -> Result<()> {
        if self.image_size < 8 || !self.image_size.is_multiple_of(4) {
            return Err(Error::config(
                "model.image_size",
                format!(
                    "must be a multiple of 4 and at least 8, got {}",
                    self.image_size
                ),
            ));
        }
        for (name, v, min) in [
            ("model.width", self.width, 1),
            ("model.code", self.code, 1),
            ("model.hidden", self.hidden, 1),
            ("model.classes", self.classes, 2),
        ] {
            if v < min {
                return Err(Error::config(
                    name,
                    format!("must be at least {min}, got {v}"),
                ));
            }
        }
        Ok(())
    }

    /// Side of the feature maps after the two poolings.
    fn side4(&self) -> usize {
        self.image_size / 4
    }

    /// Values per image of the encoder trunk's output (= of the decoder's first feature map).
    fn trunk_len(&self) -> usize {
        2 * self.width * self.side4() * self.side4()
    }
}

/// The similarity loss between the shared codes of the domains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Similarity {
    /// Domain-adversarial: a domain classifier on the shared code behind a gradient reversal layer.
    Dann,
    /// Maximum mean discrepancy between the source's and each target's shared codes.
    Mmd,
}

impl Similarity {
    /// The preset's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Similarity::Dann => "dann",
            Similarity::Mmd => "mmd",
        }
    }
}

/// How the gradient reversal's factor λ grows over training with the DANN similarity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DannSchedule {
    /// Ganin & Lempitsky (ICML 2015, §5.2.2): λ_p = λ_max·(2/(1 + exp(−γ·p)) − 1) at training
    /// progress p ∈ [0, 1]: 0 at the start, when the shared codes are still noise and a full-strength
    /// adversary only pushes them around, and close to λ_max from p ≈ 0.5 on (γ = 10).
    #[default]
    Ramp,
    /// λ = λ_max from the first step.
    Constant,
}

impl DannSchedule {
    /// The reversal factor at training progress `progress` (clamped to [0, 1]).
    pub fn lambda(self, lambda_max: f64, gamma: f64, progress: f64) -> f64 {
        match self {
            DannSchedule::Constant => lambda_max,
            DannSchedule::Ramp => {
                let p = progress.clamp(0.0, 1.0);
                lambda_max * (2.0 / (1.0 + (-gamma * p).exp()) - 1.0)
            }
        }
    }
}

/// The coupling term handed to [`Dsn::backward`] for one domain batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SimilarityTerm<'a, T> {
    /// The domain classifier's cross-entropy; `lambda` scales the reversed gradient that reaches
    /// the shared encoder (the domain classifier itself descends the unscaled loss). With
    /// `clip_at_chance` the encoder ascends each image's cross-entropy only up to chance,
    /// min(CE_i, ln D) for D domains: once the classifier does worse than a uniform guess on an
    /// image, pushing further makes the code domain-*specific* again (confidently classified as
    /// another domain), which is what diverges without the clip.
    Dann { lambda: f64, clip_at_chance: bool },
    /// `loss`: this domain's part of the (weighted) MMD loss, to report; `grad`: the gradient of
    /// the weighted MMD terms with respect to this batch's shared code, from every domain's codes.
    Mmd { loss: f64, grad: &'a [T] },
}

/// The weight of each loss term (the DSN paper's α, β, γ and the task loss's).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LossWeights {
    pub task: f64,
    pub reconstruction: f64,
    pub difference: f64,
    pub similarity: f64,
}

impl Default for LossWeights {
    /// The paper's MNIST → MNIST-M values (α = 0.01 would be for 0..255 images; images here are
    /// 0..1, so the reconstruction weight is larger).
    fn default() -> Self {
        LossWeights {
            task: 1.0,
            reconstruction: 0.1,
            difference: 0.05,
            similarity: 0.25,
        }
    }
}

impl LossWeights {
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("losses.task", self.task),
            ("losses.reconstruction", self.reconstruction),
            ("losses.difference", self.difference),
            ("losses.similarity", self.similarity),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(
                    name,
                    format!("must be finite and non-negative, got {v}"),
                ));
            }
        }
        Ok(())
    }
}

/// A convolutional trunk and a linear map of its flattened output to a code.
#[derive(Clone, Debug)]
pub struct Encoder<T: Float = f32> {
    pub trunk: Network<T>,
    pub head: Linear<T>,
}

struct EncoderTape<T: Float> {
    trunk: Tape<T>,
    /// The whole trunk output, all-gathered from the ranks' blocks when the trunk ran spatially
    /// decomposed (`None` on one process, where the tape's output is the whole map).
    gathered: Option<Features<T>>,
}

/// This rank's block of a whole batch `x` (a view on one process).
fn block_of<'x, T: Float>(x: &'x Features<T>, space: &dyn Partition<T>) -> Cow<'x, Features<T>> {
    let whole = Region::whole(x.dims);
    let block = space.block(x.dims);
    if block == whole {
        Cow::Borrowed(x)
    } else {
        Cow::Owned(copy_region(x, &whole, &block))
    }
}

/// The whole map of `dims` on every rank, from every rank's block `y` (`None` on one process):
/// each rank's need is the whole map, so the halo exchange becomes an all-gather of the blocks.
fn gather_whole<T: Float>(
    y: &Features<T>,
    dims: [usize; 3],
    space: &dyn Partition<T>,
) -> Result<Option<Features<T>>> {
    let ranks = space.grid().ranks();
    if ranks == 1 {
        return Ok(None);
    }
    let needs = vec![Region::whole(dims); ranks];
    Ok(Some(space.gather(y, dims, &needs)?.into_owned()))
}

fn conv_layer(rng: &mut rand::rngs::StdRng, c_in: usize, c_out: usize, relu: bool) -> Conv<f32> {
    let fan_in = c_in * 9;
    Conv::new(
        2,
        c_in,
        c_out,
        3,
        1,
        1,
        he(rng, c_out * fan_in, fan_in),
        Some(torch_default_bias(rng, c_out, fan_in)),
        relu,
    )
}

fn up_layer(rng: &mut rand::rngs::StdRng, c: usize) -> ConvTranspose<f32> {
    let [kernel, stride, pad] = per_axis(2, 2, 2, 0);
    let fan_in = c * 4;
    ConvTranspose::with_geometry(
        c,
        c,
        kernel,
        stride,
        pad,
        [1; 3],
        [0; 3],
        he(rng, c * c * 4, fan_in),
        Some(torch_default_bias(rng, c, fan_in)),
    )
}

impl Encoder<f32> {
    fn new(arch: &DsnArch, rng: &mut rand::rngs::StdRng) -> Self {
        let w = arch.width;
        let mut trunk = Network::new(2, 1);
        trunk.conv("0", 0, None, conv_layer(rng, 1, w, true));
        trunk.pool(trunk.last(), Pool::new(2, PoolKind::Max, 2, 2, 0));
        trunk.conv("2", trunk.last(), None, conv_layer(rng, w, 2 * w, true));
        trunk.pool(trunk.last(), Pool::new(2, PoolKind::Max, 2, 2, 0));
        Encoder {
            trunk,
            head: Linear::he(arch.trunk_len(), arch.code, 0.5, rng),
        }
    }
}

impl<T: Float> Encoder<T> {
    fn param_count(&self) -> usize {
        self.trunk.param_count() + self.head.param_count()
    }

    /// The codes (`batch × code`) of the whole images `x`, and what the backward pass needs. The
    /// trunk runs on this rank's block of `x` over `space` (halos exchanged per layer); the head
    /// needs the whole flattened map, so the blocks of the trunk's output are all-gathered and
    /// every rank of `space` computes the same code (bitwise that of one process: the trunk's
    /// forward pass is, and the head then sees the same numbers).
    fn forward(
        &self,
        x: &Features<T>,
        space: &dyn Partition<T>,
    ) -> Result<(EncoderTape<T>, Vec<T>)> {
        let trunk = self
            .trunk
            .forward_train(block_of(x, space).into_owned(), x.dims, space)?;
        let dims = *trunk.dims().last().expect("a network has nodes");
        let gathered = gather_whole(trunk.output(), dims, space)?;
        let whole = gathered.as_ref().unwrap_or(trunk.output());
        let code = self.head.forward(&whole.data, x.batch);
        Ok((EncoderTape { trunk, gathered }, code))
    }

    /// The codes of the whole images `x` without keeping activations (inference).
    fn code(&self, x: &Features<T>, space: &dyn Partition<T>) -> Result<Vec<T>> {
        let y = self
            .trunk
            .forward(block_of(x, space).into_owned(), x.dims, space)?;
        let dims = *self
            .trunk
            .shapes(x.dims)?
            .last()
            .expect("a network has nodes");
        let gathered = gather_whole(&y, dims, space)?;
        Ok(self
            .head
            .forward(&gathered.as_ref().unwrap_or(&y).data, x.batch))
    }

    /// Adds the gradients of a loss whose gradient with respect to the codes is `dcode` to `grads`
    /// (trunk parameters, then the head's weight and bias). Decomposed, every rank of `space`
    /// holds the same `dcode` (the head ran replicated), so each takes its block of the head's
    /// input gradient — not the gather's adjoint, which would add the ranks' identical copies —
    /// and the trunk's backward pass sends halo gradients back and sums the weight gradients
    /// over the ranks.
    fn backward(
        &self,
        tape: &mut EncoderTape<T>,
        dcode: &[T],
        grads: &mut [T],
        space: &dyn Partition<T>,
    ) -> Result<()> {
        let out = tape.gathered.as_ref().unwrap_or(tape.trunk.output());
        let (gt, gh) = grads.split_at_mut(self.trunk.param_count());
        let (gw, gb) = gh.split_at_mut(self.head.weight.len());
        self.head
            .backward_params(&out.data, dcode, out.batch, gw, gb);
        let whole = Features {
            batch: out.batch,
            channels: out.channels,
            dims: out.dims,
            data: self.head.backward_input(dcode, out.batch),
        };
        let dy = if tape.gathered.is_some() {
            copy_region(&whole, &Region::whole(out.dims), &space.block(out.dims))
        } else {
            whole
        };
        let mut g = Gradients { data: gt.to_vec() };
        self.trunk
            .backward(&mut tape.trunk, dy, space, &mut g, false)?;
        gt.copy_from_slice(&g.data);
        Ok(())
    }

    fn params_mut(&mut self) -> Vec<&mut [T]> {
        let mut p = self.trunk.params_mut();
        p.push(self.head.weight.as_mut_slice());
        p.push(self.head.bias.as_mut_slice());
        p
    }

    fn params(&self) -> Vec<(String, Vec<usize>, &[T])> {
        let mut p = self.trunk.params();
        p.push((
            "head.weight".into(),
            vec![self.head.out_features, self.head.in_features],
            &self.head.weight,
        ));
        p.push((
            "head.bias".into(),
            vec![self.head.out_features],
            &self.head.bias,
        ));
        p
    }

    fn cast<U: Float>(&self) -> Encoder<U> {
        Encoder {
            trunk: self.trunk.cast(),
            head: cast_linear(&self.head),
        }
    }
}

fn cast_linear<T: Float, U: Float>(l: &Linear<T>) -> Linear<U> {
    let c = |v: &[T]| v.iter().map(|x| U::from_f64(x.to_f64())).collect();
    Linear::new(l.in_features, l.out_features, c(&l.weight), c(&l.bias))
}

/// The shared decoder: a linear map of a code to a feature map, then up-sampling convolutions.
#[derive(Clone, Debug)]
pub struct Decoder<T: Float = f32> {
    pub head: Linear<T>,
    pub trunk: Network<T>,
}

struct DecoderTape<T: Float> {
    code: Vec<T>,
    hidden: Vec<T>,
    trunk: Tape<T>,
    /// The whole reconstruction, all-gathered from the ranks' blocks when the trunk ran spatially
    /// decomposed (`None` on one process).
    gathered: Option<Features<T>>,
}

impl<T: Float> DecoderTape<T> {
    /// The whole reconstruction.
    fn output(&self) -> &Features<T> {
        self.gathered.as_ref().unwrap_or(self.trunk.output())
    }
}

impl Decoder<f32> {
    fn new(arch: &DsnArch, rng: &mut rand::rngs::StdRng) -> Self {
        let w = arch.width;
        let mut trunk = Network::new(2, 2 * w);
        trunk.conv_transpose("0", 0, up_layer(rng, 2 * w));
        trunk.conv("1", trunk.last(), None, conv_layer(rng, 2 * w, w, true));
        trunk.conv_transpose("2", trunk.last(), up_layer(rng, w));
        trunk.conv("3", trunk.last(), None, conv_layer(rng, w, 1, false));
        Decoder {
            head: Linear::he(arch.code, arch.trunk_len(), 1.0, rng),
            trunk,
        }
    }
}

impl<T: Float> Decoder<T> {
    fn param_count(&self) -> usize {
        self.head.param_count() + self.trunk.param_count()
    }

    /// Images (`batch × 1 × side × side`) from codes (`batch × code`); `side4` is a quarter side.
    /// Decomposed over `space`, the head runs replicated (every rank holds the codes), the trunk
    /// on this rank's block of the head's map, and the blocks of the images are all-gathered, so
    /// every rank holds the whole reconstruction — bitwise that of one process.
    fn forward(
        &self,
        code: Vec<T>,
        batch: usize,
        side4: usize,
        space: &dyn Partition<T>,
    ) -> Result<DecoderTape<T>> {
        let mut hidden = self.head.forward(&code, batch);
        relu(&mut hidden);
        let dims = [1, side4, side4];
        let x = Features {
            batch,
            channels: self.trunk.in_channels(),
            dims,
            data: hidden.clone(),
        };
        let trunk = self
            .trunk
            .forward_train(block_of(&x, space).into_owned(), dims, space)?;
        drop(x);
        let out_dims = *trunk.dims().last().expect("a network has nodes");
        let gathered = gather_whole(trunk.output(), out_dims, space)?;
        Ok(DecoderTape {
            code,
            hidden,
            trunk,
            gathered,
        })
    }

    /// Adds the parameter gradients (head, then trunk) to `grads`; returns the code's gradient.
    /// `dimage` is the gradient over the whole images (the same on every rank of `space`); each
    /// rank takes its block, and the blocks of the head map's gradient are all-gathered for the
    /// replicated head.
    fn backward(
        &self,
        tape: &mut DecoderTape<T>,
        dimage: Features<T>,
        grads: &mut [T],
        space: &dyn Partition<T>,
    ) -> Result<Vec<T>> {
        let batch = dimage.batch;
        let (gh, gt) = grads.split_at_mut(self.head.param_count());
        let mut g = Gradients { data: gt.to_vec() };
        let dy = if tape.gathered.is_some() {
            copy_region(
                &dimage,
                &Region::whole(dimage.dims),
                &space.block(dimage.dims),
            )
        } else {
            dimage
        };
        let dh_block = self
            .trunk
            .backward(&mut tape.trunk, dy, space, &mut g, true)?
            .expect("input gradient requested");
        let hidden_dims = tape.trunk.dims()[0];
        let mut dh = match gather_whole(&dh_block, hidden_dims, space)? {
            Some(whole) => whole.data,
            None => dh_block.data,
        };
        gt.copy_from_slice(&g.data);
        relu_backward(&tape.hidden, &mut dh);
        let (gw, gb) = gh.split_at_mut(self.head.weight.len());
        self.head.backward_params(&tape.code, &dh, batch, gw, gb);
        Ok(self.head.backward_input(&dh, batch))
    }

    fn params(&self) -> Vec<(String, Vec<usize>, &[T])> {
        let mut p = vec![
            (
                "head.weight".to_string(),
                vec![self.head.out_features, self.head.in_features],
                self.head.weight.as_slice(),
            ),
            (
                "head.bias".into(),
                vec![self.head.out_features],
                &self.head.bias,
            ),
        ];
        p.extend(self.trunk.params());
        p
    }

    fn params_mut(&mut self) -> Vec<&mut [T]> {
        let mut p = vec![
            self.head.weight.as_mut_slice(),
            self.head.bias.as_mut_slice(),
        ];
        p.extend(self.trunk.params_mut());
        p
    }

    fn cast<U: Float>(&self) -> Decoder<U> {
        Decoder {
            head: cast_linear(&self.head),
            trunk: self.trunk.cast(),
        }
    }
}

/// One domain's images (`batch × 1 × side × side`) and, for the source, their labels.
#[derive(Clone, Debug)]
pub struct DomainBatch<T: Float = f32> {
    pub domain: usize,
    pub images: Features<T>,
    pub labels: Option<Vec<usize>>,
}

/// A domain batch's forward pass: its codes, reconstruction, logits and what backward needs.
pub struct DomainForward<T: Float> {
    shared_tape: EncoderTape<T>,
    private_tape: EncoderTape<T>,
    pub shared_code: Vec<T>,
    pub private_code: Vec<T>,
    decoder: DecoderTape<T>,
    classifier: MlpTape<T>,
    domain_head: MlpTape<T>,
}

impl<T: Float> DomainForward<T> {
    /// The reconstruction from the shared and private codes together.
    pub fn reconstruction(&self) -> &Features<T> {
        self.decoder.output()
    }

    /// Task logits (`batch × classes`).
    pub fn logits(&self) -> &[T] {
        &self.classifier.output
    }
}

/// The weighted loss terms of one domain batch (0 where a term does not apply).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DomainLosses {
    pub task: f64,
    pub reconstruction: f64,
    pub difference: f64,
    pub similarity: f64,
}

impl DomainLosses {
    pub fn total(&self) -> f64 {
        self.task + self.reconstruction + self.difference + self.similarity
    }
}

/// Gradients of one domain batch's losses: shared parameters (flat, [`Dsn::shared_params_mut`]
/// order) and the domain's private encoder's.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainGrads<T: Float = f32> {
    pub shared: Vec<T>,
    pub private: Vec<T>,
}

/// A domain separation network holding the private encoders of the domains placed here.
#[derive(Clone, Debug)]
pub struct Dsn<T: Float = f32> {
    pub arch: DsnArch,
    /// Domains in all (source = 0).
    pub domains: usize,
    pub shared: Encoder<T>,
    /// `(domain, private encoder)` for the domains held here, in domain order.
    pub private: Vec<(usize, Encoder<T>)>,
    pub decoder: Decoder<T>,
    pub classifier: Mlp<T>,
    pub domain_head: Mlp<T>,
}

/// Seed of a part's initial weights: a function of the run's seed and the part only, so that every
/// partition of domains on ranks starts from the same weights.
fn part_seed(seed: u64, part: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(part.wrapping_mul(0xBF58_476D_1CE4_E5B9))
}

impl Dsn<f32> {
    /// He-initialised from `seed`, holding the private encoders of `held` (domain ids below
    /// `domains`).
    pub fn new(arch: DsnArch, domains: usize, held: &[usize], seed: u64) -> Result<Self> {
        arch.validate()?;
        if domains < 2 {
            return Err(Error::config(
                "domains",
                format!("a source and at least one target are needed, got {domains} domains"),
            ));
        }
        if let Some(&d) = held.iter().find(|&&d| d >= domains) {
            return Err(Error::config(
                "domains",
                format!("domain {d} does not exist (there are {domains})"),
            ));
        }
        let rng = |part: u64| rand::rngs::StdRng::seed_from_u64(part_seed(seed, part));
        let mut held = held.to_vec();
        held.sort_unstable();
        held.dedup();
        Ok(Dsn {
            arch,
            domains,
            shared: Encoder::new(&arch, &mut rng(0)),
            decoder: Decoder::new(&arch, &mut rng(1)),
            classifier: Mlp::he(&[arch.code, arch.hidden, arch.classes], 1.0, &mut rng(2)),
            domain_head: Mlp::he(&[arch.code, arch.hidden, domains], 1.0, &mut rng(3)),
            private: held
                .into_iter()
                .map(|d| (d, Encoder::new(&arch, &mut rng(100 + d as u64))))
                .collect(),
        })
    }
}

impl<T: Float> Dsn<T> {
    pub fn shared_param_count(&self) -> usize {
        self.shared.param_count()
            + self.decoder.param_count()
            + self.classifier.param_count()
            + self.domain_head.param_count()
    }

    pub fn private_param_count(&self) -> usize {
        self.shared.param_count()
    }

    /// The shared parameters, in gradient order: shared encoder, decoder, classifier, domain head.
    pub fn shared_params_mut(&mut self) -> Vec<&mut [T]> {
        let mut p = self.shared.params_mut();
        p.extend(self.decoder.params_mut());
        p.extend(self.classifier.params_mut());
        p.extend(self.domain_head.params_mut());
        p
    }

    pub fn private_params_mut(&mut self, domain: usize) -> Result<Vec<&mut [T]>> {
        Ok(self.private_mut(domain)?.params_mut())
    }

    /// Every parameter held here with its name (`shared_encoder.…`, `decoder.…`, `classifier.…`,
    /// `domain_classifier.…`, `private_encoder.{d}.…`) and shape, for saving.
    pub fn named_params(&self) -> Vec<(String, Vec<usize>, &[T])> {
        fn prefixed<'a, T>(
            prefix: &str,
            ps: Vec<(String, Vec<usize>, &'a [T])>,
        ) -> impl Iterator<Item = (String, Vec<usize>, &'a [T])> {
            ps.into_iter()
                .map(move |(n, s, v)| (format!("{prefix}.{n}"), s, v))
        }
        let mut out: Vec<_> = prefixed("shared_encoder", self.shared.params())
            .chain(prefixed("decoder", self.decoder.params()))
            .chain(prefixed("classifier", self.classifier.params()))
            .chain(prefixed("domain_classifier", self.domain_head.params()))
            .collect();
        for (d, e) in &self.private {
            out.extend(prefixed(&format!("private_encoder.{d}"), e.params()));
        }
        out
    }

    fn private(&self, domain: usize) -> Result<&Encoder<T>> {
        self.private
            .iter()
            .find(|(d, _)| *d == domain)
            .map(|(_, e)| e)
            .ok_or_else(|| Error::Internal(format!("domain {domain} is not held on this rank")))
    }

    fn private_mut(&mut self, domain: usize) -> Result<&mut Encoder<T>> {
        self.private
            .iter_mut()
            .find(|(d, _)| *d == domain)
            .map(|(_, e)| e)
            .ok_or_else(|| Error::Internal(format!("domain {domain} is not held on this rank")))
    }

    /// The same network in another precision.
    pub fn cast<U: Float>(&self) -> Dsn<U> {
        Dsn {
            arch: self.arch,
            domains: self.domains,
            shared: self.shared.cast(),
            private: self.private.iter().map(|(d, e)| (*d, e.cast())).collect(),
            decoder: self.decoder.cast(),
            classifier: self.classifier.cast(),
            domain_head: self.domain_head.cast(),
        }
    }

    fn check_batch(&self, b: &DomainBatch<T>) -> Result<()> {
        let s = self.arch.image_size;
        let x = &b.images;
        if x.channels != 1 || x.dims != [1, s, s] || x.batch == 0 {
            return Err(Error::shape(
                "DSN domain batch",
                &[x.batch.max(1), 1, s, s],
                &[x.batch, x.channels, x.dims[1], x.dims[2]],
            ));
        }
        if let Some(l) = &b.labels
            && l.len() != x.batch
        {
            return Err(Error::shape("DSN labels", &[x.batch], &[l.len()]));
        }
        Ok(())
    }

    /// The shared code alone (inference: classify with [`Dsn::classify`]).
    pub fn shared_code(&self, images: &Features<T>) -> Result<Vec<T>> {
        self.shared.code(images, &Whole)
    }

    /// Predicted classes of images from their shared codes.
    pub fn classify(&self, images: &Features<T>) -> Result<Vec<usize>> {
        self.classify_on(images, &Whole)
    }

    /// [`Dsn::classify`] with the shared encoder's trunk decomposed over `space` (every rank of
    /// it passes the whole `images` and gets every prediction).
    pub fn classify_on(
        &self,
        images: &Features<T>,
        space: &dyn Partition<T>,
    ) -> Result<Vec<usize>> {
        let code = self.shared.code(images, space)?;
        let logits = self.classifier.forward(&code, images.batch);
        Ok(crate::nn::layers::dense::argmax(&logits, self.arch.classes))
    }

    /// What the decoder makes of images of domain `domain` (held here) from parts of their codes:
    /// `[full, shared_only, private_only]`, each `batch × side × side` — the reconstruction from
    /// shared + private code (what training sees), from the shared code with the private code
    /// zeroed, and from the private code with the shared code zeroed.
    pub fn reconstruct_parts(&self, domain: usize, images: &Features<T>) -> Result<[Vec<T>; 3]> {
        self.reconstruct_parts_on(domain, images, &Whole)
    }

    /// [`Dsn::reconstruct_parts`] with the encoders' and the decoder's trunks decomposed over
    /// `space`.
    pub fn reconstruct_parts_on(
        &self,
        domain: usize,
        images: &Features<T>,
        space: &dyn Partition<T>,
    ) -> Result<[Vec<T>; 3]> {
        self.check_batch(&DomainBatch {
            domain,
            images: images.clone(),
            labels: None,
        })?;
        let n = images.batch;
        let shared = self.shared.code(images, space)?;
        let private = self.private(domain)?.code(images, space)?;
        let full: Vec<T> = shared.iter().zip(&private).map(|(a, b)| *a + *b).collect();
        let decode = |code: Vec<T>| -> Result<Vec<T>> {
            let tape = self.decoder.forward(code, n, self.arch.side4(), space)?;
            Ok(tape.output().data.clone())
        };
        Ok([decode(full)?, decode(shared)?, decode(private)?])
    }

    /// The forward pass of one domain batch.
    pub fn forward(&self, b: &DomainBatch<T>) -> Result<DomainForward<T>> {
        self.forward_on(b, &Whole)
    }

    /// [`Dsn::forward`] with the convolutional trunks (encoders and decoder) decomposed over
    /// `space`: every rank of it passes the whole batch, runs the trunks on its blocks (halos
    /// exchanged per layer), and holds the same codes, reconstructions, logits and losses — the
    /// linear heads, classifiers and losses run replicated on the all-gathered maps.
    pub fn forward_on(
        &self,
        b: &DomainBatch<T>,
        space: &dyn Partition<T>,
    ) -> Result<DomainForward<T>> {
        self.check_batch(b)?;
        let n = b.images.batch;
        let (shared_tape, shared_code) = self.shared.forward(&b.images, space)?;
        let (private_tape, private_code) = self.private(b.domain)?.forward(&b.images, space)?;
        let sum: Vec<T> = shared_code
            .iter()
            .zip(&private_code)
            .map(|(a, b)| *a + *b)
            .collect();
        let decoder = self.decoder.forward(sum, n, self.arch.side4(), space)?;
        let classifier = self.classifier.forward_train(shared_code.clone(), n);
        let domain_head = self.domain_head.forward_train(shared_code.clone(), n);
        Ok(DomainForward {
            shared_tape,
            private_tape,
            shared_code,
            private_code,
            decoder,
            classifier,
            domain_head,
        })
    }

    /// The source-only classifier's pass on a labelled batch: shared encoder → classifier →
    /// cross-entropy weighted by `task_weight`, forward and backward, nothing else. Returns the
    /// weighted loss and the gradient in [`Dsn::shared_params_mut`] layout (zero outside the shared
    /// encoder and the classifier) — what [`Dsn::backward`] gives a source batch when every other
    /// loss weight is 0, at the cost of the network without its target losses.
    pub fn task_backward(&self, b: &DomainBatch<T>, task_weight: f64) -> Result<(f64, Vec<T>)> {
        self.task_backward_on(b, task_weight, &Whole)
    }

    /// [`Dsn::task_backward`] with the shared encoder's trunk decomposed over `space`.
    pub fn task_backward_on(
        &self,
        b: &DomainBatch<T>,
        task_weight: f64,
        space: &dyn Partition<T>,
    ) -> Result<(f64, Vec<T>)> {
        self.check_batch(b)?;
        let labels = b.labels.as_ref().ok_or_else(|| {
            Error::Internal(format!("task loss on unlabelled domain {}", b.domain))
        })?;
        let n = b.images.batch;
        let (mut tape, code) = self.shared.forward(&b.images, space)?;
        let classifier = self.classifier.forward_train(code, n);
        let (ce, mut g) = crate::nn::layers::dense::softmax_cross_entropy(
            &classifier.output,
            labels,
            self.arch.classes,
        )?;
        let w = T::from_f64(task_weight);
        g.iter_mut().for_each(|v| *v *= w);
        let mut grads = vec![T::ZERO; self.shared_param_count()];
        let (g_enc, rest) = grads.split_at_mut(self.shared.param_count());
        let (_, rest) = rest.split_at_mut(self.decoder.param_count());
        let (g_cls, _) = rest.split_at_mut(self.classifier.param_count());
        let dcode = self.classifier.backward(&classifier, g, g_cls);
        self.shared.backward(&mut tape, &dcode, g_enc, space)?;
        Ok((task_weight * ce, grads))
    }

    /// The weighted losses of a domain batch and their gradients; `similarity` is the coupling term
    /// ([`SimilarityTerm`]).
    pub fn backward(
        &self,
        b: &DomainBatch<T>,
        f: &mut DomainForward<T>,
        weights: &LossWeights,
        similarity: SimilarityTerm<'_, T>,
    ) -> Result<(DomainLosses, DomainGrads<T>)> {
        self.backward_on(b, f, weights, similarity, &Whole)
    }

    /// [`Dsn::backward`] of a [`Dsn::forward_on`] pass over the same `space`: every rank of it
    /// gets the same gradients (the encoders' trunk gradients summed over its ranks).
    pub fn backward_on(
        &self,
        b: &DomainBatch<T>,
        f: &mut DomainForward<T>,
        weights: &LossWeights,
        similarity: SimilarityTerm<'_, T>,
        space: &dyn Partition<T>,
    ) -> Result<(DomainLosses, DomainGrads<T>)> {
        let n = b.images.batch;
        let scale = |g: &mut [T], w: f64| {
            let w = T::from_f64(w);
            g.iter_mut().for_each(|v| *v *= w);
        };
        let mut grads = DomainGrads {
            shared: vec![T::ZERO; self.shared_param_count()],
            private: vec![T::ZERO; self.private_param_count()],
        };
        let (g_enc, rest) = grads.shared.split_at_mut(self.shared.param_count());
        let (g_dec, rest) = rest.split_at_mut(self.decoder.param_count());
        let (g_cls, g_dom) = rest.split_at_mut(self.classifier.param_count());
        let mut losses = DomainLosses::default();
        let mut d_shared = vec![T::ZERO; f.shared_code.len()];
        let add = |acc: &mut [T], g: &[T]| acc.iter_mut().zip(g).for_each(|(a, b)| *a += *b);

        // Reconstruction (scale-invariant MSE) through the decoder into both codes.
        let (rec, mut d_img) = scale_invariant_mse(&b.images.data, &f.reconstruction().data, n)?;
        losses.reconstruction = weights.reconstruction * rec;
        scale(&mut d_img, weights.reconstruction);
        let out = f.reconstruction();
        let dimage = Features {
            batch: out.batch,
            channels: out.channels,
            dims: out.dims,
            data: d_img,
        };
        let d_sum = self
            .decoder
            .backward(&mut f.decoder, dimage, g_dec, space)?;
        add(&mut d_shared, &d_sum);
        let mut d_private = d_sum;

        // Difference (soft orthogonality of shared and private codes).
        let (diff, mut gs, mut gp) = difference_loss(&f.shared_code, &f.private_code, n)?;
        losses.difference = weights.difference * diff;
        scale(&mut gs, weights.difference);
        scale(&mut gp, weights.difference);
        add(&mut d_shared, &gs);
        add(&mut d_private, &gp);

        // Task loss on labelled (source) batches.
        if let Some(labels) = &b.labels {
            let (ce, mut g) = crate::nn::layers::dense::softmax_cross_entropy(
                &f.classifier.output,
                labels,
                self.arch.classes,
            )?;
            losses.task = weights.task * ce;
            scale(&mut g, weights.task);
            let dc = self.classifier.backward(&f.classifier, g, g_cls);
            add(&mut d_shared, &dc);
        }

        // Similarity.
        match similarity {
            SimilarityTerm::Dann {
                lambda,
                clip_at_chance,
            } => {
                let labels = vec![b.domain; n];
                let (ce, mut g) = crate::nn::layers::dense::softmax_cross_entropy(
                    &f.domain_head.output,
                    &labels,
                    self.domains,
                )?;
                // Row i of g is (softmax_i − onehot_i)/n, so p_i(own domain) = 1 + n·g[i][domain].
                let past_chance: Vec<bool> = (0..n)
                    .map(|i| {
                        let p = 1.0 + n as f64 * g[i * self.domains + b.domain].to_f64();
                        clip_at_chance && p < 1.0 / self.domains as f64
                    })
                    .collect();
                losses.similarity = weights.similarity * ce;
                scale(&mut g, weights.similarity);
                let mut dc = self.domain_head.backward(&f.domain_head, g, g_dom);
                let code = self.arch.code;
                for (row, _) in dc.chunks_mut(code).zip(&past_chance).filter(|(_, p)| **p) {
                    row.iter_mut().for_each(|v| *v = T::ZERO);
                }
                reverse_gradient(&mut dc, lambda);
                add(&mut d_shared, &dc);
            }
            SimilarityTerm::Mmd { loss, grad } => {
                if grad.len() != d_shared.len() {
                    return Err(Error::shape(
                        "MMD code gradient",
                        &[d_shared.len()],
                        &[grad.len()],
                    ));
                }
                losses.similarity = loss;
                add(&mut d_shared, grad);
            }
        }

        self.shared
            .backward(&mut f.shared_tape, &d_shared, g_enc, space)?;
        self.private(b.domain)?.backward(
            &mut f.private_tape,
            &d_private,
            &mut grads.private,
            space,
        )?;
        Ok((losses, grads))
    }
}

/// Gradients with respect to the shared codes of some domains: `(domain, gradient)`.
pub type CodeGrads<T> = Vec<(usize, Vec<T>)>;

/// The weighted MMD similarity terms `w·MMD(h_source, h_t)` for every target `t`, from the shared
/// codes of all domains (`codes[d]`, `batch × dim` each, domain 0 the source). Returns each
/// domain's reported loss (the term of target `t` is reported on `t`; the source reports 0) and,
/// for each domain in `wanted`, the gradient with respect to its codes. Terms are evaluated and
/// summed in target order, so every rank computes the same values for the same domain.
pub fn mmd_terms<T: Float>(
    codes: &[Vec<T>],
    dim: usize,
    weight: f64,
    wanted: &[usize],
) -> Result<(Vec<f64>, CodeGrads<T>)> {
    let mut losses = vec![0.0; codes.len()];
    let mut grads: Vec<(usize, Vec<T>)> = wanted
        .iter()
        .map(|&d| (d, vec![T::ZERO; codes[d].len()]))
        .collect();
    let wants_source = wanted.contains(&0);
    for t in 1..codes.len() {
        if !(wants_source || wanted.contains(&t)) {
            continue;
        }
        let (m, gx, gy) = crate::nn::layers::losses::mmd(
            &codes[0],
            &codes[t],
            dim,
            &crate::nn::layers::losses::MMD_BANDWIDTHS,
        )?;
        losses[t] = weight * m;
        let w = T::from_f64(weight);
        for (d, g) in grads.iter_mut() {
            let src = if *d == 0 {
                &gx
            } else if *d == t {
                &gy
            } else {
                continue;
            };
            g.iter_mut().zip(src).for_each(|(a, b)| *a += *b * w);
        }
    }
    Ok((losses, grads))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::nn::kernels::conv::testing::random;

    pub(crate) fn small_arch() -> DsnArch {
        DsnArch {
            image_size: 8,
            width: 2,
            code: 4,
            hidden: 5,
            classes: 3,
        }
    }

    fn batches(domains: usize, n: usize, rng: &mut rand::rngs::StdRng) -> Vec<DomainBatch<f64>> {
        use rand::RngExt;
        (0..domains)
            .map(|d| DomainBatch {
                domain: d,
                images: Features {
                    batch: n,
                    channels: 1,
                    dims: [1, 8, 8],
                    data: random(n * 64, rng),
                },
                labels: (d == 0).then(|| (0..n).map(|_| rng.random_range(0..3)).collect()),
            })
            .collect()
    }

    /// The gradient reversal factor of the DANN checks (not 1, so that a λ dropped or applied
    /// twice shows).
    const LAMBDA: f64 = 0.6;

    /// The whole model's loss over all domains, and (when `grads`) the summed shared gradient and
    /// each domain's private gradient.
    /// The weighted domain-classifier loss the encoders ascend: each image's cross-entropy, capped
    /// at ln D when `clip`.
    fn ascended(m: &Dsn<f64>, bs: &[DomainBatch<f64>], weight: f64, clip: bool) -> f64 {
        let d = m.domains;
        bs.iter()
            .map(|b| {
                let f = m.forward(b).unwrap();
                let logits = &f.domain_head.output;
                let n = b.images.batch;
                (0..n)
                    .map(|i| {
                        let row = &logits[i * d..(i + 1) * d];
                        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let lse = max + row.iter().map(|z| (z - max).exp()).sum::<f64>().ln();
                        let ce = lse - row[b.domain];
                        if clip { ce.min((d as f64).ln()) } else { ce }
                    })
                    .sum::<f64>()
                    * weight
                    / n as f64
            })
            .sum()
    }

    fn run(
        m: &Dsn<f64>,
        bs: &[DomainBatch<f64>],
        sim: Similarity,
        clip: bool,
    ) -> (f64, f64, Vec<f64>, Vec<Vec<f64>>) {
        let w = LossWeights {
            task: 1.0,
            reconstruction: 0.7,
            difference: 0.3,
            similarity: 0.5,
        };
        let mut fs: Vec<_> = bs.iter().map(|b| m.forward(b).unwrap()).collect();
        let codes: Vec<Vec<f64>> = fs.iter().map(|f| f.shared_code.clone()).collect();
        let all: Vec<usize> = (0..bs.len()).collect();
        let (mmd_l, mmd_g) = mmd_terms(&codes, m.arch.code, w.similarity, &all).unwrap();
        let (mut total, mut similarity) = (0.0, 0.0);
        let mut shared = vec![0.0; m.shared_param_count()];
        let mut private = Vec::new();
        for (d, (b, f)) in bs.iter().zip(&mut fs).enumerate() {
            let term = match sim {
                Similarity::Dann => SimilarityTerm::Dann {
                    lambda: LAMBDA,
                    clip_at_chance: clip,
                },
                Similarity::Mmd => SimilarityTerm::Mmd {
                    loss: mmd_l[d],
                    grad: &mmd_g[d].1,
                },
            };
            let (l, g) = m.backward(b, f, &w, term).unwrap();
            total += l.total();
            similarity += l.similarity;
            shared.iter_mut().zip(&g.shared).for_each(|(a, b)| *a += b);
            private.push(g.private);
        }
        (total, similarity, shared, private)
    }

    #[test]
    fn whole_model_gradients_match_finite_differences_in_f64() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let domains = 3;
        let m = Dsn::new(small_arch(), domains, &[0, 1, 2], 7)
            .unwrap()
            .cast::<f64>();
        let bs = batches(domains, 3, &mut rng);
        for (sim, clip) in [
            (Similarity::Dann, false),
            (Similarity::Dann, true),
            (Similarity::Mmd, false),
        ] {
            if clip {
                // Some images are past chance at these weights, some not: both paths are checked.
                let (capped, full) = (ascended(&m, &bs, 1.0, true), ascended(&m, &bs, 1.0, false));
                assert!(
                    capped < full - 1e-3,
                    "no image past chance: {capped} vs {full}"
                );
                assert!(capped > 0.0);
            }
            let (_, _, shared, private) = run(&m, &bs, sim, clip);
            let eps = 1e-6;
            let check = |fd: f64, an: f64, what: String| {
                assert!(
                    (fd - an).abs() <= 1e-6 * an.abs().max(1e-2),
                    "{sim:?} (clip {clip}) {what}: finite difference {fd} vs backward {an}"
                );
            };
            // The loss each parameter descends: with DANN the gradient reversal makes the encoders
            // ascend λ times the domain classifier's loss (capped at chance per image with the
            // clip), so their gradient is that of L − L_similarity − λ·L_ascended.
            let encoder_params = m.shared.param_count();
            let loss = |p: &Dsn<f64>, encoder: bool| {
                let (total, similarity, _, _) = run(p, &bs, sim, clip);
                if encoder && sim == Similarity::Dann {
                    total - similarity - LAMBDA * ascended(p, &bs, 0.5, clip)
                } else {
                    total
                }
            };
            let n = m.shared_param_count();
            // A stride through every tensor (the FD of each costs two passes over all domains).
            for i in (0..n).step_by(3) {
                let fd = {
                    let mut p = m.clone();
                    *flat_mut(p.shared_params_mut(), i) += eps;
                    let mut q = m.clone();
                    *flat_mut(q.shared_params_mut(), i) -= eps;
                    let e = i < encoder_params;
                    (loss(&p, e) - loss(&q, e)) / (2.0 * eps)
                };
                check(fd, shared[i], format!("shared parameter {i}"));
            }
            for (d, want) in private.iter().enumerate() {
                for i in (0..m.private_param_count()).step_by(5) {
                    let mut p = m.clone();
                    *flat_mut(p.private_params_mut(d).unwrap(), i) += eps;
                    let mut q = m.clone();
                    *flat_mut(q.private_params_mut(d).unwrap(), i) -= eps;
                    let fd = (loss(&p, true) - loss(&q, true)) / (2.0 * eps);
                    check(fd, want[i], format!("domain {d} private parameter {i}"));
                }
            }
        }
    }

    fn flat_mut(ps: Vec<&mut [f64]>, mut i: usize) -> &mut f64 {
        for p in ps {
            if i < p.len() {
                return &mut p[i];
            }
            i -= p.len();
        }
        panic!("parameter index out of range")
    }

    #[test]
    fn reconstruction_parts_are_the_full_shared_and_private_decodings() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let m = Dsn::new(small_arch(), 2, &[0, 1], 4).unwrap();
        let b = batches(2, 3, &mut rng).swap_remove(1).images;
        let x = Features {
            batch: b.batch,
            channels: 1,
            dims: b.dims,
            data: b.data.iter().map(|&v| v as f32).collect(),
        };
        let [full, shared, private] = m.reconstruct_parts(1, &x).unwrap();
        // The full part is what training reconstructs.
        let batch = DomainBatch {
            domain: 1,
            images: x.clone(),
            labels: None,
        };
        assert_eq!(full, m.forward(&batch).unwrap().reconstruction().data);
        assert_ne!(shared, full);
        assert_ne!(private, full);
        // An encoder whose code is zero leaves the other part equal to the full reconstruction,
        // which tells the shared part from the private one.
        let silence = |e: &mut Encoder<f32>| {
            e.head.weight.iter_mut().for_each(|v| *v = 0.0);
            e.head.bias.iter_mut().for_each(|v| *v = 0.0);
        };
        let mut no_private = m.clone();
        silence(&mut no_private.private[1].1);
        let [f, s, p] = no_private.reconstruct_parts(1, &x).unwrap();
        assert_eq!(f, s);
        assert_ne!(f, p);
        let mut no_shared = m.clone();
        silence(&mut no_shared.shared);
        let [f, s, p] = no_shared.reconstruct_parts(1, &x).unwrap();
        assert_eq!(f, p);
        assert_ne!(f, s);
        assert!(m.reconstruct_parts(2, &x).is_err());
    }

    #[test]
    fn task_backward_is_the_full_backward_without_the_other_losses() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let m = Dsn::new(small_arch(), 2, &[0, 1], 8).unwrap().cast::<f64>();
        let bs = batches(2, 4, &mut rng);
        let w = LossWeights {
            task: 0.7,
            reconstruction: 0.0,
            difference: 0.0,
            similarity: 0.0,
        };
        let mut f = m.forward(&bs[0]).unwrap();
        let (l, g) = m
            .backward(
                &bs[0],
                &mut f,
                &w,
                SimilarityTerm::Dann {
                    lambda: 1.0,
                    clip_at_chance: true,
                },
            )
            .unwrap();
        let (task, shared) = m.task_backward(&bs[0], 0.7).unwrap();
        assert_eq!(task, l.task);
        assert!(shared.iter().any(|&v| v != 0.0));
        assert_eq!(shared, g.shared);
        assert!(
            m.task_backward(&bs[1], 1.0).is_err(),
            "target batches have no labels"
        );
    }

    /// The conv trunks (encoders, decoder) on blocks of each image (uneven blocks, 1-D and 2-D
    /// grids) give the codes and losses of the whole image bitwise, and its gradients to 1e-12 in
    /// f64.
    #[test]
    fn trunks_on_image_blocks_give_the_whole_image_gradients_in_f64() {
        use crate::dist::spatial::SpatialPartition;
        use crate::dist::testutil::on_group;
        use crate::nn::Grid;
        use rand::RngExt;
        let arch = DsnArch {
            image_size: 16,
            ..small_arch()
        };
        let m = Dsn::new(arch, 2, &[0, 1], 5).unwrap().cast::<f64>();
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let bs: Vec<DomainBatch<f64>> = (0..2)
            .map(|d| DomainBatch {
                domain: d,
                images: Features {
                    batch: 3,
                    channels: 1,
                    dims: [1, 16, 16],
                    data: random(3 * 256, &mut rng),
                },
                labels: (d == 0).then(|| (0..3).map(|_| rng.random_range(0..3)).collect()),
            })
            .collect();
        let w = LossWeights::default();
        let term = SimilarityTerm::Dann {
            lambda: LAMBDA,
            clip_at_chance: true,
        };
        let pass = |space: &dyn Partition<f64>| {
            bs.iter()
                .map(|b| {
                    let mut f = m.forward_on(b, space).unwrap();
                    let (l, g) = m.backward_on(b, &mut f, &w, term, space).unwrap();
                    let task = m.task_backward_on(b, 0.5, space).ok();
                    let classes = m.classify_on(&b.images, space).unwrap();
                    (f.shared_code.clone(), l, g, task, classes)
                })
                .collect::<Vec<_>>()
        };
        let want = pass(&Whole);
        // 4×4 maps after the poolings: 3 columns split them 1 + 1 + 2.
        for shape in [[1, 1, 2], [1, 2, 1], [1, 1, 3], [1, 2, 2]] {
            let grid = Grid { shape };
            let got = on_group(grid.ranks(), |comm| {
                pass(&SpatialPartition::new(&*comm, grid).unwrap())
            });
            for (r, per_domain) in got.iter().enumerate() {
                for ((code, l, g, task, classes), (wcode, wl, wg, wtask, wclasses)) in
                    per_domain.iter().zip(&want)
                {
                    assert_eq!(code, wcode, "{shape:?} rank {r}: codes");
                    assert_eq!(l, wl, "{shape:?} rank {r}: losses");
                    assert_eq!(classes, wclasses);
                    let close = |a: &[f64], b: &[f64], what: &str| {
                        let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
                        let err = a.iter().zip(b).fold(0f64, |m, (x, y)| m.max((x - y).abs()));
                        assert!(
                            scale > 0.0 && err <= 1e-12 * scale,
                            "{shape:?} rank {r}: {what} error {err}"
                        );
                    };
                    close(&g.shared, &wg.shared, "shared gradient");
                    close(&g.private, &wg.private, "private gradient");
                    assert_eq!(task.is_some(), wtask.is_some());
                    if let (Some((t, tg)), Some((wt, wtg))) = (task, wtask) {
                        assert_eq!(t, wt);
                        close(tg, wtg, "task gradient");
                    }
                }
            }
        }
    }

    #[test]
    fn dann_ramp_follows_ganin_and_lempitsky() {
        let ramp = |p: f64| DannSchedule::Ramp.lambda(0.5, 10.0, p);
        assert_eq!(ramp(0.0), 0.0);
        // 2/(1 + e^(−γp)) − 1 = tanh(γp/2).
        for p in [0.05f64, 0.1, 0.25, 0.5, 0.9, 1.0] {
            let want = 0.5 * (5.0 * p).tanh();
            assert!(
                (ramp(p) - want).abs() < 1e-12,
                "p = {p}: {} vs {want}",
                ramp(p)
            );
        }
        assert!((ramp(0.1) - 0.5 * 0.462_117_157_260_009_76).abs() < 1e-12);
        assert!(ramp(0.5) > 0.49 && ramp(1.0) < 0.5);
        // Monotone, clamped outside [0, 1].
        assert!((1..=100).all(|i| ramp(i as f64 / 100.0) > ramp((i - 1) as f64 / 100.0)));
        assert_eq!(ramp(-1.0), 0.0);
        assert_eq!(ramp(3.0), ramp(1.0));
        assert!((DannSchedule::Ramp.lambda(1.0, 1.0, 1.0) - (0.5f64).tanh()).abs() < 1e-12);
        for p in [0.0, 0.3, 1.0] {
            assert_eq!(DannSchedule::Constant.lambda(0.7, 10.0, p), 0.7);
        }
    }

    #[test]
    fn initial_weights_do_not_depend_on_which_domains_are_held() {
        let all = Dsn::new(small_arch(), 4, &[0, 1, 2, 3], 3).unwrap();
        let some = Dsn::new(small_arch(), 4, &[2], 3).unwrap();
        assert_eq!(all.named_params()[..4], some.named_params()[..4]);
        let p2 = |m: &Dsn| {
            m.named_params()
                .into_iter()
                .filter(|(n, _, _)| n.starts_with("private_encoder.2."))
                .map(|(_, _, v)| v.to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(p2(&all), p2(&some));
        assert!(Dsn::new(small_arch(), 4, &[4], 3).is_err());
        let bad = DsnArch {
            image_size: 10,
            ..small_arch()
        };
        let e = Dsn::new(bad, 2, &[0], 3).unwrap_err();
        assert!(e.to_string().contains("model.image_size"), "{e}");
    }
}
