//! The algorithms' problems on the device: the data term of a stack of operators with device twins
//! ([`DeviceObjective`], L2 fidelity, and its normal operator `Σ AᵢᵀAᵢ`) and the denoisers
//! ([`DeviceDenoiser`]: TV and wavelets), for `optim::pnp::pnp_loop` and `optim::cg::cg_loop` on
//! [`Array`]s whose values stay in the backend's memory for the whole run; [`pnp`] and [`cg`] run
//! the one PnP and CG loops on them. Their CPU twins are `optim::pnp::HostObjective`, the host
//! stack, `denoise::tv` and `denoise::wavelet`.

use std::sync::Arc;

use super::array::Array;
use super::backend::{Backend, DeviceVec};
use super::ops::blur_engine::{DeviceBlurStack, DeviceConv, Planes};
use super::ops::tomography::{DeviceTomography, DeviceTomography3d};
use super::ops::{tv, vector, wavelet};
use crate::denoise::DenoiserConfig;
use crate::denoise::tv::TvDenoiser;
use crate::denoise::wavelet::WaveletDenoiser;
use crate::dist::physics::{DistributedStack, owner};
use crate::dist::wire;
use crate::error::{Error, Result};
use crate::fidelity::{FidelityConfig, Reduction};
use crate::optim::cg::{CgConfig, NormalOperator, cg_loop, conjugate_gradient};
use crate::optim::pnp::{Init, Objective, PnpConfig, pnp_loop, step_size};
use crate::optim::space::{Iterate, Prox};
use crate::optim::{Monitor, Reconstruction, ViewCallback};
use crate::physics::blur::{Blur, Blur3d};
use crate::physics::blur_engine::Conv;
use crate::physics::channels::OperatorSpec;
use crate::physics::stack::BlurFusion;
use crate::physics::tomography::Tomography;
use crate::physics::tomography3d::Tomography3d;
use crate::physics::{LinearPhysics, StackedLinearPhysics};
use crate::physics::{PINV_ITERS, PINV_TOL, PhysicsConfig};
use crate::tensor::Tensor;

/// An operator of a host stack that has a device twin.
#[derive(Clone, Copy)]
pub enum HostOperator<'a> {
    Tomography(&'a Tomography),
    Tomography3d(&'a Tomography3d),
    Blur(&'a Blur),
    Blur3d(&'a Blur3d),
}

impl HostOperator<'_> {
    /// The CPU operator itself.
    fn physics(&self) -> &dyn LinearPhysics {
        match *self {
            HostOperator::Tomography(t) => t,
            HostOperator::Tomography3d(t) => t,
            HostOperator::Blur(b) => b,
            HostOperator::Blur3d(b) => b,
        }
    }
}

/// A preset's operator built on the host for its device twin (`HostOperator` borrows it).
pub enum BuiltOperator {
    Tomography(Tomography),
    Tomography3d(Tomography3d),
    Blur(Blur),
    Blur3d(Blur3d),
}

impl BuiltOperator {
    /// Builds operator `spec` of a job for images or volumes of shape `x_shape`; an operator split
    /// by channel, which has no device twin (`device::coverage` refuses such jobs first), says so.
    pub fn build(spec: &OperatorSpec, x_shape: &[usize]) -> Result<Self> {
        match (&spec.config, spec.channels) {
            (PhysicsConfig::Tomography(c), None) => Ok(Self::Tomography(c.build(x_shape)?)),
            (PhysicsConfig::Tomography3d(c), None) => Ok(Self::Tomography3d(c.build(x_shape)?)),
            (PhysicsConfig::Blur(c), None) => Ok(Self::Blur(c.build()?)),
            (PhysicsConfig::Blur3d(c), None) => Ok(Self::Blur3d(c.build()?)),
            (_, Some(_)) => Err(Error::Unsupported(
                "physics split by channel is not on the GPU yet".into(),
            )),
        }
    }

    /// A tomography's 2-D operator of every plane: a 2-D one itself, a 3-D one's slice operator.
    fn tomography(&self) -> Option<&Tomography> {
        match self {
            Self::Tomography(t) => Some(t),
            Self::Tomography3d(t) => Some(t.slice_operator()),
            Self::Blur(_) | Self::Blur3d(_) => None,
        }
    }

    pub fn host(&self) -> HostOperator<'_> {
        match self {
            Self::Tomography(t) => HostOperator::Tomography(t),
            Self::Tomography3d(t) => HostOperator::Tomography3d(t),
            Self::Blur(b) => HostOperator::Blur(b),
            Self::Blur3d(b) => HostOperator::Blur3d(b),
        }
    }
}

/// An operator's device twin on images of `Planes`.
trait DeviceLinear<B: Backend> {
    fn forward(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<DeviceVec<B, f32>>;

    fn adjoint(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<DeviceVec<B, f32>>;
}

impl<B: Backend> DeviceLinear<B> for DeviceTomography<B> {
    fn forward(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<DeviceVec<B, f32>> {
        DeviceTomography::forward(self, backend, x, flat(image)?)
    }

    fn adjoint(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<DeviceVec<B, f32>> {
        DeviceTomography::adjoint(self, backend, y, flat(image)?)
    }
}

/// The planes of a 2-D tomography's images, or an error for volumes.
fn flat(image: Planes) -> Result<usize> {
    Ok(image.expect_kind("tomography", false)?.count)
}

impl<B: Backend> DeviceLinear<B> for DeviceTomography3d<B> {
    fn forward(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<DeviceVec<B, f32>> {
        let image = image.expect_kind("tomography3d", true)?;
        DeviceTomography3d::forward(self, backend, x, image.count, image.dims[0])
    }

    fn adjoint(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<DeviceVec<B, f32>> {
        let image = image.expect_kind("tomography3d", true)?;
        DeviceTomography3d::adjoint(self, backend, y, image.count, image.dims[0])
    }
}

/// A 2-D or 3-D blur's device twin: one [`DeviceConv`] on planes `[D, H, W]` either way (`D = 1`
/// for images), taking the arrays its CPU twin takes.
struct DeviceBlur<B: Backend> {
    conv: DeviceConv<B>,
    /// A 3-D blur's volumes, else a 2-D blur's images.
    volumes: bool,
}

impl<B: Backend> DeviceBlur<B> {
    fn new(conv: &Conv, volumes: bool) -> Self {
        DeviceBlur {
            conv: DeviceConv::new(conv),
            volumes,
        }
    }

    fn planes(&self, image: Planes) -> Result<Planes> {
        image.expect_kind(if self.volumes { "blur3d" } else { "blur" }, self.volumes)
    }
}

impl<B: Backend> DeviceLinear<B> for DeviceBlur<B> {
    fn forward(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<DeviceVec<B, f32>> {
        let p = self.planes(image)?;
        self.conv.forward(backend, x, p.count, p.channels, p.dims)
    }

    fn adjoint(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<DeviceVec<B, f32>> {
        let p = self.planes(image)?;
        self.conv.adjoint(backend, y, p.count, p.channels, p.dims)
    }
}

/// The device twin of a stack: operator by operator (this rank's, with their indices in the
/// stack), or (as `physics::Stack` does when its operators are circular blurs of one kernel size,
/// on one rank) fused.
enum DeviceOperators<B: Backend> {
    Each(Vec<(usize, Box<dyn DeviceLinear<B>>)>),
    FusedBlurs(Box<DeviceBlurStack<B>>),
}

/// `(planes, channels, dims)` of an image `(B, C, H, W)` or a volume `(B, C, D, H, W)` (`B·C`
/// planes of `[D, H, W]`; each operator checks that it takes such planes).
fn planes_of(shape: &[usize], op: &str) -> Result<Planes> {
    match *shape {
        [b, c, h, w] => Ok(Planes::of_image([b, c, h, w])),
        [b, c, d, h, w] => Ok(Planes::of_volume([b, c, d, h, w])),
        _ => Err(Error::config(
            op,
            format!(
                "the device operators take images (B, C, H, W) or volumes (B, C, D, H, W), \
                 got shape {shape:?}"
            ),
        )),
    }
}

/// Adds `parts` in order (`physics::stack::sum_in_order`: `axpy` with 1 adds exactly).
fn sum_in_order<B: Backend>(
    backend: &B,
    parts: Vec<DeviceVec<B, f32>>,
) -> Result<DeviceVec<B, f32>> {
    let mut iter = parts.into_iter();
    let mut acc = iter
        .next()
        .ok_or_else(|| Error::Internal("a device stack with nothing to sum".into()))?;
    for p in iter {
        vector::axpy(backend, &mut acc, 1.0, &p)?;
    }
    Ok(acc)
}

/// The L2 data term `Σᵢ wᵢ/2‖Aᵢx − yᵢ‖²` of a stack on the device, with its measurements there.
///
/// With the stack's operators spread over ranks (`ranks`; a fused blur stack is not split: every
/// rank applies it whole), each rank holds the operators it owns (`dist::physics::owner`) and
/// their measurements; a sum over the operators stages every term
/// through the host (device → host → the group's transport → device) and adds them on the device
/// in operator order, as one rank does: 1 and N ranks give the same bits.
pub struct DeviceObjective<'g, B: Backend> {
    backend: Arc<B>,
    ops: DeviceOperators<B>,
    /// The measurements of the operators of `ops`, in their order.
    ys: Vec<DeviceVec<B, f32>>,
    /// The ranks' stack when the operators are spread over more than one rank.
    ranks: Option<&'g DistributedStack>,
    /// `wᵢ` of every operator (the fidelity's reduction over σ², as `FidelityConfig::grad`).
    weights: Vec<f32>,
    /// `f = value_scale·Σ‖Aᵢx − yᵢ‖²`.
    value_scale: f64,
}

impl<'g, B: Backend> DeviceObjective<'g, B> {
    /// Uploads the operators of a stack and its measurements `ys` (of every operator), this rank's
    /// share when `ranks` spreads them over several. Fails, naming what, for a fidelity that is
    /// not on the device.
    pub fn new(
        backend: &Arc<B>,
        ops: &[HostOperator<'_>],
        fidelity: &FidelityConfig,
        ys: &[Tensor],
        ranks: Option<&'g DistributedStack>,
    ) -> Result<Self> {
        fidelity.validate()?;
        let FidelityConfig::L2 { sigma, reduction } = *fidelity else {
            return Err(Error::Unsupported(
                "fidelity l1 is not on the GPU yet".into(),
            ));
        };
        if ops.len() != ys.len() || ops.is_empty() {
            return Err(Error::config(
                "physics",
                format!("{} measurements for {} operators", ys.len(), ops.len()),
            ));
        }
        let blurs: Option<Vec<&Blur>> = ops
            .iter()
            .map(|op| match op {
                HostOperator::Blur(b) => Some(*b),
                HostOperator::Blur3d(_)
                | HostOperator::Tomography(_)
                | HostOperator::Tomography3d(_) => None,
            })
            .collect();
        let fused = blurs.filter(|blurs| {
            let refs: Vec<&dyn LinearPhysics> =
                blurs.iter().map(|b| *b as &dyn LinearPhysics).collect();
            BlurFusion::for_ops(&refs).is_some()
        });
        // A fused stack costs about one operator: every rank applies all of it (as the CPU's Gram
        // kernel), with no communication and one rank's bits. Other stacks are split over ranks.
        let ranks = ranks.filter(|stack| stack.comm().world_size() > 1 && fused.is_none());
        let mine: Vec<usize> = match ranks {
            Some(stack) if stack.len() != ops.len() => {
                return Err(Error::Internal(format!(
                    "a device stack of {} operators for a group's stack of {}",
                    ops.len(),
                    stack.len()
                )));
            }
            Some(stack) => stack.local_indices(),
            None => (0..ops.len()).collect(),
        };
        let device_ops = match fused {
            Some(blurs) => DeviceOperators::FusedBlurs(Box::new(DeviceBlurStack::new(&blurs)?)),
            None => DeviceOperators::Each(
                mine.iter()
                    .map(|&i| -> Result<(usize, Box<dyn DeviceLinear<B>>)> {
                        let op: Box<dyn DeviceLinear<B>> = match ops[i] {
                            HostOperator::Tomography(t) => {
                                Box::new(DeviceTomography::new(backend.as_ref(), t)?)
                            }
                            HostOperator::Tomography3d(t) => {
                                Box::new(DeviceTomography3d::new(backend.as_ref(), t)?)
                            }
                            HostOperator::Blur(b) => Box::new(DeviceBlur::new(b.conv(), false)),
                            HostOperator::Blur3d(b) => Box::new(DeviceBlur::new(b.conv(), true)),
                        };
                        Ok((i, op))
                    })
                    .collect::<Result<_>>()?,
            ),
        };
        let scale = match reduction {
            Reduction::Sum => 1.0,
            Reduction::Mean => 1.0 / ys.len() as f64,
        };
        let w = scale as f32 / (sigma * sigma);
        Ok(DeviceObjective {
            backend: backend.clone(),
            ops: device_ops,
            ys: mine
                .iter()
                .map(|&i| DeviceVec::from_host(backend.as_ref(), ys[i].data()))
                .collect::<Result<_>>()?,
            ranks,
            weights: vec![w; mine.len()],
            value_scale: scale / (2.0 * (sigma as f64).powi(2)),
        })
    }

    /// The fidelity's weight `w`, the same for every operator (see `new`).
    fn weight(&self) -> f32 {
        self.weights.first().copied().unwrap_or(1.0)
    }

    /// `[Aᵢx]` on the device.
    fn forward(&self, x: &DeviceVec<B, f32>, image: Planes) -> Result<Vec<DeviceVec<B, f32>>> {
        let b = self.backend.as_ref();
        match &self.ops {
            DeviceOperators::FusedBlurs(stack) => stack.forward(b, x, image),
            DeviceOperators::Each(ops) => {
                ops.iter().map(|(_, op)| op.forward(b, x, image)).collect()
            }
        }
    }

    /// `Σᵢ termᵢ` over every operator of the stack, in operator order, from this rank's `terms`
    /// (index, values of an image of shape `x_shape`); see the type's docs for more than one rank.
    fn sum_terms(
        &self,
        x_shape: &[usize],
        terms: Vec<(usize, DeviceVec<B, f32>)>,
    ) -> Result<DeviceVec<B, f32>> {
        let b = self.backend.as_ref();
        let parts = match self.ranks {
            None => terms.into_iter().map(|(_, t)| t).collect(),
            Some(stack) => {
                let staged = terms
                    .into_iter()
                    .map(|(i, t)| Ok((i, Tensor::from_vec(x_shape, t.to_host(b)?)?)))
                    .collect::<Result<Vec<_>>>()?;
                stack
                    .gather_indexed(staged)?
                    .iter()
                    .map(|t| DeviceVec::from_host(b, t.data()))
                    .collect::<Result<_>>()?
            }
        };
        sum_in_order(b, parts)
    }

    /// `Σᵢ valueᵢ` over every operator, in operator order, from this rank's `(index, value)`s.
    fn sum_values(&self, values: Vec<(usize, f64)>) -> Result<f64> {
        let all = match self.ranks {
            None => values,
            Some(stack) => {
                let mut slots = vec![None; stack.len()];
                let gathered: Vec<Vec<(usize, f64)>> =
                    wire::all_gather_as(stack.comm().as_ref(), "objective terms", &values)?;
                for (rank, part) in gathered.into_iter().enumerate() {
                    for (i, v) in part {
                        match slots.get_mut(i) {
                            Some(slot @ None) if owner(i, stack.comm().world_size()) == rank => {
                                *slot = Some(v)
                            }
                            _ => {
                                return Err(Error::bad_peer_data(
                                    rank,
                                    format!("an objective term of operator {i} it does not own"),
                                ));
                            }
                        }
                    }
                }
                slots
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| {
                        v.map(|v| (i, v)).ok_or_else(|| {
                            Error::bad_peer_data(
                                owner(i, stack.comm().world_size()),
                                format!("sent no objective term of operator {i}"),
                            )
                        })
                    })
                    .collect::<Result<_>>()?
            }
        };
        Ok(all.into_iter().fold(0.0, |total, (_, v)| total + v))
    }

    /// `Σ Aᵢᵀyᵢ` over the stack, in operator order (`StackedLinearPhysics::adjoint`).
    pub fn adjoint_of_measurements(&self, x_shape: &[usize]) -> Result<Array<B>> {
        let image = planes_of(x_shape, "adjoint")?;
        let b = self.backend.as_ref();
        let values = match &self.ops {
            DeviceOperators::FusedBlurs(stack) => {
                stack.adjoint(b, &self.ys, &vec![1.0; self.ys.len()], image)?
            }
            DeviceOperators::Each(ops) => {
                let terms = ops
                    .iter()
                    .zip(&self.ys)
                    .map(|((i, op), y)| Ok((*i, op.adjoint(b, y, image)?)))
                    .collect::<Result<Vec<_>>>()?;
                self.sum_terms(x_shape, terms)?
            }
        };
        Array::on_device(&self.backend, x_shape, values)
    }

    fn check_measurements(&self, axs: &[DeviceVec<B, f32>]) -> Result<()> {
        for (ax, y) in axs.iter().zip(&self.ys) {
            if ax.len() != y.len() {
                return Err(Error::shape("device measurements", &[ax.len()], &[y.len()]));
            }
        }
        Ok(())
    }
}

impl<B: Backend> Objective<Array<B>> for DeviceObjective<'_, B> {
    fn gradient(&self, x: &Array<B>) -> Result<Array<B>> {
        let image = planes_of(x.shape(), "data fidelity gradient")?;
        let xv = x.device_values("data fidelity gradient")?;
        let b = self.backend.as_ref();
        let grad = match &self.ops {
            DeviceOperators::FusedBlurs(stack) => {
                stack.gradient(b, xv, &self.ys, &self.weights, image)?
            }
            DeviceOperators::Each(ops) => {
                let terms = ops
                    .iter()
                    .zip(&self.ys)
                    .zip(&self.weights)
                    .map(|(((i, op), y), &w)| {
                        let ax = op.forward(b, xv, image)?;
                        let mut r = vector::sub(b, &ax, y)?;
                        vector::scale(b, &mut r, w)?;
                        Ok((*i, op.adjoint(b, &r, image)?))
                    })
                    .collect::<Result<Vec<_>>>()?;
                self.sum_terms(x.shape(), terms)?
            }
        };
        Array::on_device(&self.backend, x.shape(), grad)
    }

    fn value(&self, x: &Array<B>) -> Result<f64> {
        let image = planes_of(x.shape(), "data fidelity")?;
        let axs = self.forward(x.device_values("data fidelity")?, image)?;
        self.check_measurements(&axs)?;
        let b = self.backend.as_ref();
        let indices: Vec<usize> = match &self.ops {
            DeviceOperators::FusedBlurs(_) => (0..axs.len()).collect(),
            DeviceOperators::Each(ops) => ops.iter().map(|(i, _)| *i).collect(),
        };
        let values = indices
            .into_iter()
            .zip(axs.iter().zip(&self.ys))
            .map(|(i, (ax, y))| {
                let r = vector::sub(b, ax, y)?;
                Ok((i, vector::dot(b, &r, &r)?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.sum_values(values)? * self.value_scale)
    }

    fn initial_point(&self, init: Init, x_shape: &[usize]) -> Result<Array<B>> {
        match init {
            Init::Zeros => Array::zeros(&self.backend, x_shape),
            Init::Adjoint => self.adjoint_of_measurements(x_shape),
            // `StackedLinearPhysics::pinv`: CG on the normal equations, on the device.
            Init::Pinv => conjugate_gradient(
                &self.adjoint_of_measurements(x_shape)?,
                PINV_ITERS,
                PINV_TOL,
                |v| self.normal(v),
                |_, _, _| Ok(true),
            ),
        }
    }

    /// The host's `w·Σ AᵢᵀAᵢ v` (every operator has the same weight `w`, the fidelity's).
    fn weighted_normal(&self, v: &Array<B>) -> Result<Array<B>> {
        let normal = self.normal(v)?;
        normal.scaled(self.weight())
    }

    fn weighted_adjoint_of_measurements(&self, x_shape: &[usize]) -> Result<Array<B>> {
        self.adjoint_of_measurements(x_shape)?.scaled(self.weight())
    }

    /// The fused stack's closed form (`DeviceBlurStack::shifted_normal_inverse`, as the host's);
    /// operators one by one have none (HQS runs CG on the device).
    fn shifted_normal_inverse(&self, r: &Array<B>, gamma: f32) -> Result<Option<Array<B>>> {
        let DeviceOperators::FusedBlurs(stack) = &self.ops else {
            return Ok(None);
        };
        let image = planes_of(r.shape(), "HQS data step")?;
        let rv = r.device_values("HQS data step")?;
        let a = gamma * self.weight();
        match stack.shifted_normal_inverse(self.backend.as_ref(), rv, a, image)? {
            Some(z) => Array::on_device(&self.backend, r.shape(), z).map(Some),
            None => Ok(None),
        }
    }
}

impl<B: Backend> NormalOperator<Array<B>> for DeviceObjective<'_, B> {
    /// `Σ AᵢᵀAᵢ v`: the fused stack's Gram kernel (unit weights, as the CPU's), or each operator's
    /// `Aᵀ(Av)` summed over the stack in operator order.
    fn normal(&self, v: &Array<B>) -> Result<Array<B>> {
        let image = planes_of(v.shape(), "normal operator")?;
        let vv = v.device_values("normal operator")?;
        let b = self.backend.as_ref();
        let values = match &self.ops {
            DeviceOperators::FusedBlurs(stack) => {
                stack.gram_apply(b, vv, &vec![1.0; self.ys.len()], image)?
            }
            DeviceOperators::Each(ops) => {
                let terms = ops
                    .iter()
                    .map(|(i, op)| Ok((*i, op.adjoint(b, &op.forward(b, vv, image)?, image)?)))
                    .collect::<Result<Vec<_>>>()?;
                self.sum_terms(v.shape(), terms)?
            }
        };
        Array::on_device(&self.backend, v.shape(), values)
    }
}

/// A denoiser that runs on the device: the TV prox (`denoise::tv`'s algorithm, `device::ops::tv`)
/// or wavelet thresholding (`denoise::wavelet`'s, `device::ops::wavelet`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DeviceDenoiser {
    Tv(TvDenoiser),
    Wavelet(WaveletDenoiser),
}

impl DeviceDenoiser {
    /// The preset's `[denoiser]` on the device, or an error naming a denoiser that is not there.
    pub fn from_config(config: &DenoiserConfig) -> Result<DeviceDenoiser> {
        match config {
            DenoiserConfig::Tv(c) => Ok(DeviceDenoiser::Tv(c.build()?)),
            DenoiserConfig::Wavelet(c) => Ok(DeviceDenoiser::Wavelet(c.build()?)),
            other => Err(Error::Unsupported(format!(
                "denoiser {} is not on the GPU yet",
                other.kind_name()
            ))),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            DeviceDenoiser::Tv(_) => "tv",
            DeviceDenoiser::Wavelet(_) => "wavelet",
        }
    }
}

impl<B: Backend> Prox<Array<B>> for DeviceDenoiser {
    fn denoise(&self, z: &Array<B>, sigma: f32) -> Result<Array<B>> {
        let name = self.name();
        crate::denoise::check_sigma(name, sigma)?;
        let shape = z.shape().to_vec();
        if !(shape.len() == 4 || shape.len() == 5) {
            return Err(Error::config(
                name,
                format!("expected a 4-D or 5-D array, got shape {shape:?}"),
            ));
        }
        let Some(backend) = z.backend() else {
            return Err(Error::Internal(format!(
                "device {name}: given an array in host memory"
            )));
        };
        let planes = shape[0] * shape[1];
        let values = z.device_values(name)?;
        let out = match self {
            // The CPU's TV returns its input unchanged at σ = 0.
            DeviceDenoiser::Tv(_) if sigma == 0.0 => return z.duplicate(),
            DeviceDenoiser::Tv(t) => {
                tv::tv_prox(backend.as_ref(), t, values, planes, &shape[2..], sigma)?.0
            }
            DeviceDenoiser::Wavelet(w) => {
                wavelet::wavelet_denoise(backend.as_ref(), w, values, planes, &shape[2..], sigma)?
            }
        };
        Array::on_device(&backend, &shape, out)
    }
}

/// A PnP problem for a device: the host stack (the step `0.99/L` is derived there when `cfg`
/// gives none, the CPU run's own value), its operators with device twins, the fidelity, the
/// denoiser, the measurements and the image's shape.
pub struct PnpProblem<'a> {
    pub host_physics: &'a dyn StackedLinearPhysics,
    pub ops: &'a [HostOperator<'a>],
    pub fidelity: &'a FidelityConfig,
    pub denoiser: &'a DeviceDenoiser,
    pub ys: &'a [Tensor],
    pub x_shape: &'a [usize],
    pub cfg: &'a PnpConfig,
    pub monitor: &'a Monitor<'a>,
    /// The group's stack when its operators are spread over ranks (`None`: this rank holds all).
    pub ranks: Option<&'a DistributedStack>,
}

/// A device's memory as a job sees it: what the device is, its free and total memory, and what
/// this rank's buffers hold now and at most since the job started ([`DeviceSolver::start_job`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMemory {
    /// `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// `cuda:0`.
    pub label: String,
    pub free_bytes: u64,
    pub total_bytes: u64,
    pub in_use_bytes: u64,
    pub peak_bytes: u64,
    /// Devices of this kind on the machine.
    pub device_count: usize,
}

/// A device that runs a job's algorithm, whatever its backend (`job` holds one per rank).
pub trait DeviceSolver {
    /// What the device is, for the log: `NVIDIA H100 80GB HBM3 (cuda:0)`.
    fn describe(&self) -> String;

    /// The device's memory now (see [`DeviceMemory`]).
    fn memory(&self) -> Result<DeviceMemory>;

    /// A job starts: its peak starts from what is in use now.
    fn start_job(&self);

    /// [`pnp`] on this device.
    fn pnp(
        &self,
        problem: &PnpProblem<'_>,
        on_iter: &mut ViewCallback<'_>,
    ) -> Result<Reconstruction>;

    /// [`cg`] on this device.
    fn cg(
        &self,
        problem: &LeastSquares<'_>,
        on_iter: &mut ViewCallback<'_>,
    ) -> Result<Reconstruction>;

    /// [`fbp`] on this device.
    fn fbp(&self, op: HostOperator<'_>, y: &Tensor) -> Result<Tensor>;
}

impl<B: Backend> DeviceSolver for Arc<B> {
    fn describe(&self) -> String {
        self.as_ref().describe()
    }

    fn memory(&self) -> Result<DeviceMemory> {
        let (name, label) = self.identity();
        let (free_bytes, total_bytes) = self.memory_info()?;
        let meter = self.meter();
        Ok(DeviceMemory {
            name,
            label,
            free_bytes,
            total_bytes,
            in_use_bytes: meter.in_use_bytes(),
            peak_bytes: meter.peak_bytes(),
            device_count: self.device_count(),
        })
    }

    fn start_job(&self) {
        self.meter().reset_peak();
    }

    fn pnp(
        &self,
        problem: &PnpProblem<'_>,
        on_iter: &mut ViewCallback<'_>,
    ) -> Result<Reconstruction> {
        pnp(self, problem, on_iter)
    }

    fn cg(
        &self,
        problem: &LeastSquares<'_>,
        on_iter: &mut ViewCallback<'_>,
    ) -> Result<Reconstruction> {
        cg(self, problem, on_iter)
    }

    fn fbp(&self, op: HostOperator<'_>, y: &Tensor) -> Result<Tensor> {
        fbp(self, op, y)
    }
}

/// PnP-PGD on the device: the measurements, iterate, gradient and denoiser's fields stay
/// in `backend`'s memory. PSNR is computed on the device; the iterate is downloaded only when the
/// callback asks for it (`HostView::to_host`), for an SSIM that is due, and at the end.
pub fn pnp<B: Backend>(
    backend: &Arc<B>,
    problem: &PnpProblem<'_>,
    on_iter: &mut ViewCallback<'_>,
) -> Result<Reconstruction> {
    let PnpProblem {
        host_physics,
        ops,
        fidelity,
        denoiser,
        ys,
        x_shape,
        cfg,
        monitor,
        ranks,
    } = *problem;
    cfg.validate()?;
    fidelity.validate()?;
    let step = step_size(host_physics, fidelity, x_shape, cfg)?;
    let objective = DeviceObjective::new(backend, ops, fidelity, ys, ranks)?;
    let run = pnp_loop(
        &objective, denoiser, x_shape, step, cfg, monitor, on_iter, None,
    )?;
    run.into_reconstruction()
}

/// Filtered back-projection of the sinograms `y` with the tomography `op` on the device:
/// `[B, C, detectors, angles]` → `[B, C, W, W]` for a 2-D one, `[B, C, D, detectors, angles]` →
/// `[B, C, D, W, W]` slice by slice for a 3-D one: `physics::tomography::Tomography::fbp`'s
/// filter and back-projection as kernels (the ramp filter through cuFFT). One pass, so only the
/// sinograms go up and the images come back.
pub fn fbp<B: Backend>(backend: &Arc<B>, op: HostOperator<'_>, y: &Tensor) -> Result<Tensor> {
    let (slice_op, lead) = match op {
        HostOperator::Tomography(t) => (t, 2),
        HostOperator::Tomography3d(t) => (t.slice_operator(), 3),
        HostOperator::Blur(_) | HostOperator::Blur3d(_) => {
            return Err(Error::config(
                "algorithm.kind",
                "fbp needs exactly one tomography operator",
            ));
        }
    };
    let (width, n_det, n_angles) = (
        slice_op.img_width(),
        slice_op.n_det(),
        slice_op.angles_deg().len(),
    );
    let s = y.shape();
    let mut expected: Vec<usize> = s.iter().take(lead).copied().collect();
    expected.resize(lead, 1);
    expected.extend([n_det, n_angles]);
    if s != expected.as_slice() {
        return Err(Error::shape("device fbp", &expected, s));
    }
    let mut image_shape = expected[..lead].to_vec();
    image_shape.extend([width, width]);
    let sinograms = DeviceVec::from_host(backend.as_ref(), y.data())?;
    let b = backend.as_ref();
    let images = match op {
        HostOperator::Tomography3d(t) => {
            DeviceTomography3d::new(b, t)?.fbp(b, &sinograms, s[0] * s[1], s[2])?
        }
        _ => DeviceTomography::new(b, slice_op)?.fbp(b, &sinograms, s[0] * s[1])?,
    };
    Tensor::from_vec(&image_shape, images.to_host(b)?)
}

/// A CG least-squares problem for a device: the stack's operators with device twins, their
/// measurements, the image's shape.
pub struct LeastSquares<'a> {
    pub ops: &'a [HostOperator<'a>],
    pub ys: &'a [Tensor],
    pub x_shape: &'a [usize],
    pub cfg: &'a CgConfig,
    pub monitor: &'a Monitor<'a>,
    /// The group's stack when its operators are spread over ranks (`None`: this rank holds all).
    pub ranks: Option<&'a DistributedStack>,
}

/// CG least squares on the device (`optim::cg::cg_loop`): the measurements, iterate, residual,
/// search direction and its image stay in `backend`'s memory; the host gets the reductions'
/// scalars, PSNR (a reduction there too), the iterate when the callback asks for it or an SSIM is
/// due, and the result.
pub fn cg<B: Backend>(
    backend: &Arc<B>,
    problem: &LeastSquares<'_>,
    on_iter: &mut ViewCallback<'_>,
) -> Result<Reconstruction> {
    let LeastSquares {
        ops,
        ys,
        x_shape,
        cfg,
        monitor,
        ranks,
    } = *problem;
    cfg.validate()?;
    // Least squares weighs every operator alike (`optim::least_squares`): the unit L2 data term's
    // operators and measurements, of which CG uses `Σ AᵢᵀAᵢ` and `Σ Aᵢᵀyᵢ`.
    let objective = DeviceObjective::new(backend, ops, &FidelityConfig::default(), ys, ranks)?;
    let b = objective.adjoint_of_measurements(x_shape)?;
    let run = cg_loop(&objective, b, cfg, monitor, on_iter)?;
    run.into_reconstruction()
}

const F32: u64 = 4;

/// Floats of an array of `shape`.
fn elems(shape: &[usize]) -> u64 {
    shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64))
}

/// (resident floats, work floats of one application over `slices` planes) of a tomography's
/// plane engine (`device::ops::tomography`), as it uploads and allocates them.
fn tomography_floats(t: &Tomography, slices: u64) -> (u64, u64) {
    let g = t.device_geometry();
    let (nd, na) = (g.n_det as u64, g.n_angles as u64);
    let len = crate::physics::tomography::ramp_len(g.n_det) as u64;
    let rays = g.ray_row0.len() + g.ray_col0.len() + g.ray_count.len() + g.ray_first.len();
    let resident = (rays + g.step_row.len() + g.step_col.len()) as u64
        + g.mask.as_ref().map_or(1, |m| m.len() as u64)
        + 2 * len
        + 1
        + na
        + len;
    let (w, stride) = (g.width as u64, g.stride as u64);
    // Forward: the bordered image and the sinogram; adjoint: the sinogram by angle
    // and the image.
    let work = slices * (stride * stride + nd * na).max(2 * nd * na + w * w);
    (resident, work)
}

/// (resident floats, work floats of one application over `image`) of a 2-D or 3-D blur's
/// convolution engine (`device::ops::blur_engine`), as it uploads and allocates them.
fn blur_floats(conv: &Conv, image: Planes) -> (u64, u64) {
    let (grid, spectrum) = super::ops::blur_engine::blur_grid(conv, image.dims);
    let (g, s) = (elems(&grid), 2 * spectrum as u64);
    let kernels = conv.channels() as u64;
    // The kernel spectra stay; the placed kernels and the maps are small beside them.
    let resident = kernels * (s + g) + 4 * grid.iter().sum::<usize>() as u64;
    // A padded grid and its spectrum, then the spectrum and the inverse grid, then the grid and
    // the cropped or folded result.
    let work = image.count as u64 * (g + s);
    (resident, work)
}

/// What one rank of a device job holds in the device's memory at its peak, as named parts in bytes
/// (`memory::device_job` sums them and checks them against the device's free memory before the
/// job starts). It follows the device code's buffers: the measurements of the operators this rank
/// owns, the operators' tables (rays, masks, kernel spectra, exactly as they are uploaded), the
/// algorithm's images (iterate, gradient, CG's vectors, TV's fields), one image per operator term
/// alive before a sum (every operator's when the terms are staged through the host), and the
/// largest work buffers of one operator application (padded grids and spectra); a GPU adds
/// cuFFT's work areas, about one batch of spectra. `x_shape` is the image's `(B, C, H, W)` or
/// the volume's `(B, C, D, H, W)`;
/// `world` ranks share the operators as `dist::physics::owner` does.
pub fn footprint(
    preset: &crate::preset::Preset,
    x_shape: &[usize],
    world: usize,
    rank: usize,
) -> Result<Vec<(String, u64)>> {
    let image = planes_of(x_shape, "device memory estimate")?;
    let image_floats = elems(x_shape);
    let planes = image.count as u64;
    // A tomography's planes: a 3-D one's slices (`B·C·D`), a 2-D one's images (`D = 1`).
    let slices = planes * image.dims[0] as u64;
    let specs = preset.operators()?;
    let built = specs
        .iter()
        .map(|spec| BuiltOperator::build(spec, x_shape))
        .collect::<Result<Vec<_>>>()?;
    let measurement_floats = built
        .iter()
        .map(|op| Ok(elems(&op.host().physics().output_shape(x_shape)?)))
        .collect::<Result<Vec<u64>>>()?;
    // (resident floats, work floats of one application) per operator.
    let sizes: Vec<(u64, u64)> = built
        .iter()
        .map(|op| match op {
            BuiltOperator::Tomography(t) => tomography_floats(t, slices),
            BuiltOperator::Tomography3d(t) => tomography_floats(t.slice_operator(), slices),
            BuiltOperator::Blur(b) => blur_floats(b.conv(), image),
            BuiltOperator::Blur3d(b) => blur_floats(b.conv(), image),
        })
        .collect();
    let blurs: Option<Vec<&Blur>> = built
        .iter()
        .map(|op| match op {
            BuiltOperator::Blur(b) => Some(b),
            BuiltOperator::Blur3d(_)
            | BuiltOperator::Tomography(_)
            | BuiltOperator::Tomography3d(_) => None,
        })
        .collect();
    let fused = blurs.is_some_and(|blurs| {
        let refs: Vec<&dyn LinearPhysics> =
            blurs.iter().map(|b| *b as &dyn LinearPhysics).collect();
        BlurFusion::for_ops(&refs).is_some()
    });
    let n = built.len();
    let split = world > 1 && !fused;
    let mine: Vec<usize> = match split {
        true => (0..n).filter(|&i| owner(i, world) == rank).collect(),
        false => (0..n).collect(),
    };
    let mut parts = Vec::new();
    let floats = |f: u64| f.saturating_mul(F32);
    let fbp = matches!(preset.algorithm, crate::optim::AlgorithmConfig::Fbp(_));
    if fbp {
        let (Some(t), 1) = (
            built.first().and_then(BuiltOperator::tomography),
            built.len(),
        ) else {
            return Err(Error::config(
                "algorithm.kind",
                "fbp needs exactly one tomography operator",
            ));
        };
        let g = t.device_geometry();
        let (nd, na, w) = (g.n_det as u64, g.n_angles as u64, g.width as u64);
        let len = crate::physics::tomography::ramp_len(g.n_det) as u64;
        parts.push(("sinograms".to_string(), floats(measurement_floats[0])));
        parts.push((
            "the operator's rays and filter".to_string(),
            floats(sizes[0].0),
        ));
        // The sinograms by column, zero-padded, their spectra, the filtered grid, its crop and
        // transpose, then the back-projection's own work and the image.
        let work = slices * (nd * na + na * len + na * (len + 2) + na * len + 2 * nd * na);
        parts.push(("filtering work buffers".to_string(), floats(work)));
        parts.push((
            "the back-projection and the image".to_string(),
            floats(slices * (nd * na + 2 * w * w)),
        ));
        parts.push((
            "FFT work areas (a GPU's cuFFT)".to_string(),
            floats(slices * na * (len + 2)),
        ));
        return Ok(parts);
    }
    let measurements: u64 = mine.iter().map(|&i| measurement_floats[i]).sum();
    parts.push((
        format!("measurements of {} operator(s)", mine.len()),
        floats(measurements),
    ));
    let mut resident: u64 = mine.iter().map(|&i| sizes[i].0).sum();
    if fused {
        // The weighted Gram kernel's convolution, on the same grid as the operators.
        resident += sizes.first().map_or(0, |s| s.0);
    }
    parts.push((
        "operator tables and kernel spectra".to_string(),
        floats(resident),
    ));
    let pnp = matches!(preset.algorithm, crate::optim::AlgorithmConfig::Pnp(_));
    // PnP: iterate, previous iterate, gradient, step, denoised, and the start; CG: x, r, p, Ap, b
    // and the normal operator's result.
    let mut algorithm = 6 * image_floats;
    let mut label = "CG's vectors";
    if pnp {
        match &preset.denoiser {
            Some(DenoiserConfig::Wavelet(w)) => {
                let w = w.build()?;
                let dims = &x_shape[2..];
                algorithm += wavelet::work_floats(dims, w.levels, image.count)?;
                label = "iterate, gradient and wavelet coefficients";
            }
            _ => {
                // TV: the primal copies (x2, x̄, δ) and the dual field of one value per axis.
                let axes = x_shape.len().saturating_sub(2) as u64;
                algorithm += (3 + axes) * image_floats;
                label = "iterate, gradient and TV fields";
            }
        }
    }
    parts.push((label.to_string(), floats(algorithm)));
    let terms = match (fused, split) {
        // The forward images of every operator (the objective) and the adjoints' spectra.
        (true, _) => measurement_floats.iter().sum::<u64>() + 2 * image_floats,
        // This rank's terms, then every operator's, uploaded from the host.
        (false, true) => (mine.len() + n) as u64 * image_floats,
        (false, false) => n as u64 * image_floats,
    };
    parts.push(("operator terms before their sum".to_string(), floats(terms)));
    let work = mine.iter().map(|&i| sizes[i].1).max().unwrap_or(0)
        + mine
            .iter()
            .map(|&i| measurement_floats[i])
            .max()
            .unwrap_or(0)
            * 2;
    parts.push(("one operator's work buffers".to_string(), floats(work)));
    let blur = |op: &BuiltOperator| matches!(op, BuiltOperator::Blur(_) | BuiltOperator::Blur3d(_));
    let fft = match fused || built.iter().any(blur) {
        true => mine.iter().map(|&i| sizes[i].1).max().unwrap_or(0) / 2,
        false => 0,
    };
    if fft > 0 {
        parts.push(("FFT work areas (a GPU's cuFFT)".to_string(), floats(fft)));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::denoise::Denoiser;
    use crate::device::emulator::Emulator;
    use crate::optim::IterationReport;
    use crate::physics::blur::{Padding, gaussian_kernel, gaussian_kernel_3d};
    use crate::physics::tomography::Angles;
    use crate::physics::{Physics, Stack};
    use crate::samples::{Sample, generate, natural_image};

    /// The relative L2 distance `‖a − b‖/‖b‖`.
    fn relative_error(a: &Tensor, b: &Tensor) -> f64 {
        assert_eq!(a.shape(), b.shape());
        a.sub(b).norm() / b.norm()
    }

    fn noisy(shape: &[usize], seed: usize) -> Tensor {
        Tensor::from_fn(shape, |i| {
            let t = (i * 7919 + seed * 104_729) as f32;
            0.5 + 0.3 * (t * 0.013).sin() + 0.1 * ((i * 2_654_435_761) % 1000) as f32 / 1000.0
        })
    }

    /// The device dot test of `(x, Ax)` and `(y, Aᵀy)`: `|⟨Ax, y⟩ − ⟨x, Aᵀy⟩| ≤ 1e-5·‖Ax‖‖y‖`.
    fn assert_dot_test<B: Backend>(
        b: &B,
        [x, ax]: [&DeviceVec<B, f32>; 2],
        [y, aty]: [&DeviceVec<B, f32>; 2],
        what: &str,
    ) {
        let lhs = vector::dot(b, ax, y).unwrap();
        let rhs = vector::dot(b, x, aty).unwrap();
        let scale = vector::norm(b, ax).unwrap() * vector::norm(b, y).unwrap();
        assert!(
            (lhs - rhs).abs() <= 1e-5 * scale,
            "{what}: dot test {lhs} vs {rhs}"
        );
    }

    /// 3-D tomography on the device: forward, adjoint and FBP of every slice in one call are the
    /// 2-D engine's on each slice alone (the same bits: the batching over `B·C·D` is exact), and
    /// the CPU's `Tomography3d` within the 2-D self-test's tolerance (float rounding of the ray
    /// sums and FFTs), on odd widths, `D = 1`, `B·C > 1`, circle and normalize on and off; the
    /// device's adjoint is its forward's transpose (dot test). FBP through `fbp`, as a job calls it.
    #[test]
    fn device_tomography3d_is_the_cpu_one_slice_by_slice() {
        let backend = Arc::new(Emulator::new().unwrap());
        let b = backend.as_ref();
        let cases: [(usize, usize, bool, bool, [usize; 3]); 5] = [
            (17, 7, false, false, [1, 1, 1]),
            (16, 9, true, false, [2, 1, 3]),
            (13, 5, false, true, [1, 2, 4]),
            (2, 3, false, true, [1, 1, 2]),
            (21, 11, true, true, [3, 2, 2]),
        ];
        for (seed, (width, angles, circle, normalize, [batch, channels, depth])) in
            cases.into_iter().enumerate()
        {
            let what = format!(
                "{batch}×{channels}×{depth}×{width}², {angles} angles, circle {circle}, normalize {normalize}"
            );
            let op = Tomography3d::new(width, &Angles::Count(angles), circle, normalize).unwrap();
            let dev = DeviceTomography3d::new(b, &op).unwrap();
            let x = noisy(&[batch, channels, depth, width, width], seed);
            let y_cpu = op.forward(&x).unwrap();
            let y = noisy(y_cpu.shape(), seed + 10);
            let (dx, dy) = (
                DeviceVec::from_host(b, x.data()).unwrap(),
                DeviceVec::from_host(b, y.data()).unwrap(),
            );
            let volumes = batch * channels;
            let ax = dev.forward(b, &dx, volumes, depth).unwrap();
            let aty = dev.adjoint(b, &dy, volumes, depth).unwrap();
            let fbp_dev = fbp(&backend, HostOperator::Tomography3d(&op), &y).unwrap();
            // Each slice alone through the 2-D engine.
            let plane = dev.slice_operator();
            let (n_img, n_sino) = (width * width, plane.n_det() * plane.n_angles());
            let (mut ax1, mut aty1, mut fbp1) = (Vec::new(), Vec::new(), Vec::new());
            for k in 0..volumes * depth {
                let xs = DeviceVec::from_host(b, &x.data()[k * n_img..(k + 1) * n_img]).unwrap();
                let ys = DeviceVec::from_host(b, &y.data()[k * n_sino..(k + 1) * n_sino]).unwrap();
                ax1.extend(plane.forward(b, &xs, 1).unwrap().to_host(b).unwrap());
                aty1.extend(plane.adjoint(b, &ys, 1).unwrap().to_host(b).unwrap());
                fbp1.extend(plane.fbp(b, &ys, 1).unwrap().to_host(b).unwrap());
            }
            let ax_host = ax.to_host(b).unwrap();
            let aty_host = aty.to_host(b).unwrap();
            assert_eq!(ax_host, ax1, "{what}: forward");
            assert_eq!(aty_host, aty1, "{what}: adjoint");
            assert_eq!(fbp_dev.data(), &fbp1[..], "{what}: fbp");
            let x_shape = x.shape().to_vec();
            let as_tensor = |shape: &[usize], v: Vec<f32>| Tensor::from_vec(shape, v).unwrap();
            let errors = [
                relative_error(&as_tensor(y_cpu.shape(), ax_host), &y_cpu),
                relative_error(&as_tensor(&x_shape, aty_host), &op.adjoint(&y).unwrap()),
                relative_error(&fbp_dev, &op.fbp(&y).unwrap()),
            ];
            println!("{what}: forward, adjoint, fbp relative errors {errors:?}");
            for (e, part) in errors.iter().zip(["forward", "adjoint", "fbp"]) {
                assert!(
                    *e <= crate::device::selftest::TOLERANCE,
                    "{what}: {part}: {e:e}"
                );
            }
            assert_eq!(fbp_dev.shape(), x.shape(), "{what}");
            assert_dot_test(b, [&dx, &ax], [&dy, &aty], &what);
        }
        // Bad shapes are errors naming what was wrong, never a panic.
        let op = Tomography3d::new(9, &Angles::Count(4), false, false).unwrap();
        let wrong = Tensor::zeros(&[1, 1, 2, 9, 4]);
        let e = fbp(&backend, HostOperator::Tomography3d(&op), &wrong)
            .unwrap_err()
            .to_string();
        assert!(e.contains("device fbp"), "{e}");
        let dev = DeviceTomography3d::new(b, &op).unwrap();
        let short = DeviceVec::<Emulator, f32>::zeros(b, 9 * 9).unwrap();
        assert!(dev.forward(b, &short, 1, 2).is_err());
    }

    /// The device TV gives the CPU's bits and stops each plane after the CPU's iteration count, on
    /// images and volumes of awkward sizes, stopping early or running to the cap.
    #[test]
    fn device_tv_is_the_cpu_tv() {
        let backend = Arc::new(Emulator::new().unwrap());
        for (shape, crit, n_it_max) in [
            (vec![2, 3, 17, 23], 1e-3f32, 200),
            (vec![1, 1, 31, 1], 1e-4, 50),
            (vec![1, 2, 5, 6, 7], 1e-3, 100),
            (vec![1, 1, 9, 8], 0.0, 12),
        ] {
            let tv = TvDenoiser {
                n_it_max,
                crit,
                tau: 0.01,
                rho: 1.99,
            };
            let y = noisy(&shape, shape.len());
            let cpu = Denoiser::denoise(&tv, &y, 0.1).unwrap();
            let planes = shape[0] * shape[1];
            let dims = &shape[2..];
            let cpu_counts: Vec<usize> = y
                .planes()
                .map(|plane| {
                    let mut out = vec![0.0; plane.len()];
                    tv.solve_plane(plane, &mut out, dims, 0.1)
                })
                .collect();
            let dev_y = DeviceVec::from_host(backend.as_ref(), y.data()).unwrap();
            let (out, counts) =
                tv::tv_prox(backend.as_ref(), &tv, &dev_y, planes, dims, 0.1).unwrap();
            assert_eq!(counts, cpu_counts, "{shape:?}");
            assert!(counts.iter().all(|&c| c > 2), "{counts:?}");
            assert_eq!(
                out.to_host(backend.as_ref()).unwrap(),
                cpu.data(),
                "{shape:?}"
            );
            // Through the Prox interface on an Array, with σ = 0 the identity.
            let z = Array::upload(&backend, &y).unwrap();
            let prox = DeviceDenoiser::Tv(tv);
            let d = Prox::denoise(&prox, &z, 0.1).unwrap().into_host().unwrap();
            assert_eq!(d.data(), cpu.data());
            let same = Prox::denoise(&prox, &z, 0.0).unwrap().into_host().unwrap();
            assert_eq!(same.data(), y.data());
            assert!(Prox::denoise(&prox, &z, f32::NAN).is_err());
        }
    }

    /// Device wavelet thresholding gives the CPU's bits: every mother wavelet, soft and hard, on
    /// images and volumes of odd, even and tiny sides (a level stops early, an axis shorter than
    /// the filter folds its taps), through the op and through the `Prox` interface.
    #[test]
    fn device_wavelets_are_the_cpu_wavelets() {
        use crate::denoise::wavelet::{Threshold, WaveletKind};
        let backend = Arc::new(Emulator::new().unwrap());
        let cases: [(&[usize], WaveletKind, usize, Threshold); 6] = [
            (&[2, 3, 37, 29], WaveletKind::Db8, 3, Threshold::Soft),
            (&[1, 1, 64, 48], WaveletKind::Db4, 4, Threshold::Hard),
            (&[1, 2, 5, 3], WaveletKind::Db8, 5, Threshold::Soft),
            (&[1, 1, 1, 9], WaveletKind::Haar, 2, Threshold::Soft),
            (&[1, 1, 9, 11, 7], WaveletKind::Db4, 2, Threshold::Soft),
            (&[1, 2, 4, 6, 8], WaveletKind::Haar, 3, Threshold::Hard),
        ];
        for (shape, wavelet, levels, threshold) in cases {
            let w = WaveletDenoiser {
                wavelet,
                levels,
                threshold,
            };
            let y = noisy(shape, shape.len() + levels);
            let planes = shape[0] * shape[1];
            let dev_y = DeviceVec::from_host(backend.as_ref(), y.data()).unwrap();
            for ths in [0.0, 0.05, 0.3] {
                let cpu = Denoiser::denoise(&w, &y, ths).unwrap();
                let out = wavelet::wavelet_denoise(
                    backend.as_ref(),
                    &w,
                    &dev_y,
                    planes,
                    &shape[2..],
                    ths,
                )
                .unwrap();
                assert_eq!(
                    out.to_host(backend.as_ref()).unwrap(),
                    cpu.data(),
                    "{shape:?} {wavelet:?} {levels} {threshold:?} {ths}"
                );
            }
            let z = Array::upload(&backend, &y).unwrap();
            let prox = DeviceDenoiser::Wavelet(w);
            let d = Prox::denoise(&prox, &z, 0.05).unwrap().into_host().unwrap();
            assert_eq!(d.data(), Denoiser::denoise(&w, &y, 0.05).unwrap().data());
            assert!(Prox::denoise(&prox, &z, -1.0).is_err());
        }
        // The estimate of the work buffers covers what the op allocates beyond its input.
        let meter = backend.meter();
        let shape = [2, 3, 37, 29];
        let w = WaveletDenoiser {
            wavelet: WaveletKind::Db8,
            levels: 3,
            threshold: Threshold::Soft,
        };
        let y = noisy(&shape, 7);
        let dev_y = DeviceVec::from_host(backend.as_ref(), y.data()).unwrap();
        meter.reset_peak();
        let before = meter.in_use_bytes();
        let out =
            wavelet::wavelet_denoise(backend.as_ref(), &w, &dev_y, 6, &shape[2..], 0.1).unwrap();
        let used = meter.peak_bytes() - before;
        let estimate = 4 * wavelet::work_floats(&shape[2..], 3, 6).unwrap();
        assert!(
            used > 0 && used <= estimate,
            "used {used} B, estimated {estimate} B"
        );
        drop(out);
    }

    struct Compared {
        cpu: Reconstruction,
        device: Reconstruction,
    }

    /// Runs PnP+TV on the CPU (`optim::pnp`) and on the emulated device (`device::solve::pnp`).
    fn run_both(
        host: &Stack,
        ops: &[HostOperator<'_>],
        truth: &Tensor,
        cfg: &PnpConfig,
    ) -> Compared {
        let ys = host.forward(truth).unwrap();
        let fidelity = FidelityConfig::default();
        let tv = TvDenoiser {
            n_it_max: 30,
            crit: 1e-5,
            tau: 0.01,
            rho: 1.99,
        };
        let monitor = Monitor {
            ground_truth: Some(truth),
            data_range: 1.0,
            ssim_every: 0,
        };
        let mut seen = 0;
        let mut count = |_: &IterationReport, x: &Tensor| {
            assert_eq!(x.shape(), truth.shape());
            seen += 1;
            ControlFlow::Continue(())
        };
        let cpu = crate::optim::pnp(
            host,
            &fidelity,
            &tv,
            &ys,
            truth.shape(),
            cfg,
            &monitor,
            &mut count,
        )
        .unwrap();
        let backend = Arc::new(Emulator::new().unwrap());
        let denoiser = DeviceDenoiser::Tv(tv);
        let problem = PnpProblem {
            host_physics: host,
            ops,
            fidelity: &fidelity,
            denoiser: &denoiser,
            ys: &ys,
            x_shape: truth.shape(),
            cfg,
            monitor: &monitor,
            ranks: None,
        };
        let device = crate::optim::with_host_iterates(&mut count, |on_iter| {
            pnp(&backend, &problem, on_iter)
        })
        .unwrap();
        assert_eq!(seen, 2 * cfg.iterations);
        Compared { cpu, device }
    }

    use std::ops::ControlFlow;

    /// The two runs agree: final images within `tolerance` (relative L2), every iteration's PSNR
    /// and relative change within it too.
    fn assert_close(c: &Compared, tolerance: f64, what: &str) {
        let e = relative_error(&c.device.x, &c.cpu.x);
        assert!(
            e <= tolerance,
            "{what}: relative error {e:e} > {tolerance:e}"
        );
        assert_eq!(c.device.history.len(), c.cpu.history.len());
        for (d, h) in c.device.history.iter().zip(&c.cpu.history) {
            let (dp, hp) = (d.psnr_db.unwrap(), h.psnr_db.unwrap());
            assert!((dp - hp).abs() <= 1e-3, "{what}: PSNR {dp} vs {hp}");
        }
        eprintln!("{what}: relative error {e:e}");
    }

    /// Every iteration's objective of the two runs within 1e-5 relative.
    fn assert_same_objectives(c: &Compared) {
        for (d, h) in c.device.history.iter().zip(&c.cpu.history) {
            let (dv, hv) = (d.objective.unwrap(), h.objective.unwrap());
            assert!(
                (dv - hv).abs() <= 1e-5 * hv.abs().max(1e-12),
                "objective {dv} vs {hv}"
            );
        }
    }

    /// PnP+TV on 2-D tomography: every operation on the device, within float rounding of the CPU.
    #[test]
    fn pnp_tv_on_tomography_matches_the_cpu() {
        let truth = generate(Sample::SheppLogan, &[25], 0).unwrap();
        let make = || Tomography::new(25, &Angles::Count(19), false, false).unwrap();
        let (op, host_op) = (make(), make());
        let host = Stack::new(vec![Box::new(host_op)]).unwrap();
        for init in [Init::Adjoint, Init::Zeros] {
            let cfg = PnpConfig {
                iterations: 6,
                relaxation: 0.8,
                clamp: Some([0.0, 1.0]),
                init,
                track_objective: true,
                ..PnpConfig::default()
            };
            let c = run_both(&host, &[HostOperator::Tomography(&op)], &truth, &cfg);
            assert_close(&c, 1e-5, "tomography");
            assert_same_objectives(&c);
        }
    }

    /// PnP+TV on a colour image and a stack of circular Gaussian blurs of one kernel size (fused on
    /// both sides), and on a stack mixing every padding (operator by operator).
    #[test]
    fn pnp_tv_on_blur_stacks_matches_the_cpu() {
        let truth = natural_image(21, 26, 4);
        // One kernel size (the larger σ is the same) for the fused stack.
        let gaussian = |s: f32, angle: f32, padding| {
            Blur::new(gaussian_kernel([1.6, s], angle), padding).unwrap()
        };
        let boxed = |blurs: Vec<Blur>| -> Vec<Box<dyn LinearPhysics>> {
            blurs
                .into_iter()
                .map(|b| Box::new(b) as Box<dyn LinearPhysics>)
                .collect()
        };
        let make_fused = || -> Vec<Blur> {
            (0..3)
                .map(|i| gaussian(0.6 + 0.4 * i as f32, 30.0 * i as f32, Padding::Circular))
                .collect()
        };
        let fused = make_fused();
        let host = Stack::new(boxed(make_fused())).unwrap();
        assert!(host.is_fused());
        let ops: Vec<HostOperator> = fused.iter().map(HostOperator::Blur).collect();
        let cfg = PnpConfig {
            iterations: 5,
            ..PnpConfig::default()
        };
        assert_close(
            &run_both(&host, &ops, &truth, &cfg),
            1e-5,
            "fused blur stack",
        );

        let paddings = [
            Padding::Valid,
            Padding::Circular,
            Padding::Replicate,
            Padding::Reflect,
            Padding::Constant,
        ];
        let make_mixed = || -> Vec<Blur> {
            paddings
                .iter()
                .enumerate()
                .map(|(i, &p)| gaussian(0.5 + 0.3 * i as f32, 20.0 * i as f32, p))
                .collect()
        };
        let mixed = make_mixed();
        let host = Stack::new(boxed(make_mixed())).unwrap();
        assert!(!host.is_fused());
        let ops: Vec<HostOperator> = mixed.iter().map(HostOperator::Blur).collect();
        assert_close(
            &run_both(&host, &ops, &truth, &cfg),
            1e-5,
            "blurs of every padding",
        );
    }

    /// A 3-D blur on the device, as a job's stack drives it (`DeviceBlur` on volumes): forward and
    /// adjoint are the CPU's `Blur3d` within the self-test's tolerance (FFTs against the CPU's
    /// direct or FFT path: float rounding), and the device's adjoint is its forward's transpose
    /// (dot test), on the self-test's cases (`selftest::blur3d_cases`: both paddings, odd sides,
    /// `D = 1`, an axis of one voxel, a valid output one voxel thick, a kernel larger than the
    /// volume, one kernel per channel, `B·C > 1`); a valid blur of a volume smaller than its kernel
    /// is refused by name, as on the CPU.
    #[test]
    fn device_blur3d_is_the_cpu_blur3d() {
        let backend = Emulator::new().unwrap();
        let b = &backend;
        let cases = crate::device::selftest::blur3d_cases(crate::device::selftest::Level::Quick);
        let mut run = 0;
        for (seed, (_, kernel, shape)) in cases.into_iter().enumerate() {
            for padding in [Padding::Valid, Padding::Circular] {
                let op = Blur3d::new(kernel.clone(), padding).unwrap();
                let what = format!("{:?} kernel on {shape:?}, {padding:?}", kernel.shape());
                let Ok(out_shape) = op.output_shape(&shape) else {
                    // A valid convolution of a volume smaller than its kernel: the device refuses
                    // it too, by name.
                    let dev = DeviceBlur::<Emulator>::new(op.conv(), true);
                    let x = DeviceVec::from_host(b, noisy(&shape, seed).data()).unwrap();
                    let image = planes_of(&shape, "test").unwrap();
                    let e = dev.forward(b, &x, image).err().unwrap().to_string();
                    assert!(e.contains("valid convolution"), "{what}: {e}");
                    continue;
                };
                run += 1;
                let dev = DeviceBlur::<Emulator>::new(op.conv(), true);
                let image = planes_of(&shape, "test").unwrap();
                let x = noisy(&shape, seed);
                let y = noisy(&out_shape, seed + 10);
                let (dx, dy) = (
                    DeviceVec::from_host(b, x.data()).unwrap(),
                    DeviceVec::from_host(b, y.data()).unwrap(),
                );
                let ax = dev.forward(b, &dx, image).unwrap();
                let aty = dev.adjoint(b, &dy, image).unwrap();
                let as_tensor = |shape: &[usize], v: &DeviceVec<Emulator, f32>| {
                    Tensor::from_vec(shape, v.to_host(b).unwrap()).unwrap()
                };
                let errors = [
                    relative_error(&as_tensor(&out_shape, &ax), &op.forward(&x).unwrap()),
                    relative_error(&as_tensor(&shape, &aty), &op.adjoint(&y).unwrap()),
                ];
                eprintln!("{what}: forward, adjoint relative errors {errors:?}");
                for (e, part) in errors.iter().zip(["forward", "adjoint"]) {
                    assert!(
                        *e <= crate::device::selftest::TOLERANCE,
                        "{what}: {part}: {e:e}"
                    );
                }
                assert_dot_test(b, [&dx, &ax], [&dy, &aty], &what);
            }
        }
        assert_eq!(run, 10, "cases that ran");
    }

    /// Each blur takes the arrays its CPU twin takes, else an error naming it: a 3-D blur refuses
    /// images (even as a `D = 1` volume would pass), a 2-D blur and a fused 2-D stack refuse
    /// volumes, a short input is named.
    #[test]
    fn blurs_refuse_the_other_kind_of_array_by_name() {
        let backend = Emulator::new().unwrap();
        let b = &backend;
        let blur3d = Blur3d::new(gaussian_kernel_3d([0.5; 3]), Padding::Circular).unwrap();
        let blur = Blur::new(gaussian_kernel([0.5, 0.5], 0.0), Padding::Circular).unwrap();
        let x = DeviceVec::from_host(b, &[0.5; 6 * 7]).unwrap();
        let image = planes_of(&[1, 1, 6, 7], "test").unwrap();
        let volume = planes_of(&[1, 1, 1, 6, 7], "test").unwrap();
        let dev3 = DeviceBlur::<Emulator>::new(blur3d.conv(), true);
        let dev2 = DeviceBlur::<Emulator>::new(blur.conv(), false);
        assert!(dev3.forward(b, &x, volume).is_ok());
        assert!(dev2.forward(b, &x, image).is_ok());
        for (e, name) in [
            (dev3.forward(b, &x, image).err(), "blur3d"),
            (dev3.adjoint(b, &x, image).err(), "blur3d"),
            (dev2.forward(b, &x, volume).err(), "blur"),
            (dev2.adjoint(b, &x, volume).err(), "blur"),
        ] {
            let e = e.unwrap().to_string();
            assert!(e.contains(&format!("`{name}`")), "{e}");
        }
        let stack = DeviceBlurStack::<Emulator>::new(&[&blur, &blur]).unwrap();
        let e = stack.forward(b, &x, volume).err().unwrap().to_string();
        assert!(e.contains("`blur stack`") && e.contains("volumes"), "{e}");
        let short = DeviceVec::from_host(b, &[0.5; 6 * 6]).unwrap();
        let e = dev3.forward(b, &short, volume).err().unwrap().to_string();
        assert!(e.contains("device blur"), "{e}");
    }

    /// PnP+TV on volumes under a stack of a valid and a circular 3-D blur and a 3-D tomography
    /// (operator by operator on both sides), from the adjoint and from zeros: within the 2-D blur
    /// stacks' tolerance of the CPU, the objective too.
    #[test]
    fn pnp_tv_on_a_blur3d_stack_matches_the_cpu() {
        let truth = crate::samples::shepp_logan_3d(11);
        let make = || -> (Vec<Blur3d>, Tomography3d) {
            let blurs = [Padding::Valid, Padding::Circular]
                .into_iter()
                .zip([[0.6, 0.4, 0.5], [0.3, 0.7, 0.4]])
                .map(|(p, sigma)| Blur3d::new(gaussian_kernel_3d(sigma), p).unwrap())
                .collect();
            let tomo = Tomography3d::new(11, &Angles::Count(9), false, false).unwrap();
            (blurs, tomo)
        };
        let (blurs, tomo) = make();
        let (host_blurs, host_tomo) = make();
        let mut host_ops: Vec<Box<dyn LinearPhysics>> = host_blurs
            .into_iter()
            .map(|b| Box::new(b) as Box<dyn LinearPhysics>)
            .collect();
        host_ops.push(Box::new(host_tomo));
        let host = Stack::new(host_ops).unwrap();
        assert!(!host.is_fused());
        let mut ops: Vec<HostOperator> = blurs.iter().map(HostOperator::Blur3d).collect();
        ops.push(HostOperator::Tomography3d(&tomo));
        for init in [Init::Adjoint, Init::Zeros] {
            let cfg = PnpConfig {
                iterations: 5,
                init,
                clamp: Some([0.0, 1.0]),
                track_objective: true,
                ..PnpConfig::default()
            };
            let c = run_both(&host, &ops, &truth, &cfg);
            assert_close(&c, 1e-5, "3-D blurs and a 3-D tomography");
            assert_same_objectives(&c);
        }
    }

    /// The normal operator `Σ AᵢᵀAᵢ` and `init = pinv` (CG on it) on 3-D blurs are the host
    /// stack's to float rounding: the normal operator within the self-test's tolerance of
    /// `adjoint_forward`, the pinv within the 2-D blur's pinv bound.
    #[test]
    fn normal_operator_and_pinv_on_3d_blurs_are_the_host_stacks() {
        let backend = Arc::new(Emulator::new().unwrap());
        let make = || -> Vec<Blur3d> {
            [Padding::Circular, Padding::Valid]
                .into_iter()
                .map(|p| Blur3d::new(gaussian_kernel_3d([0.4, 0.5, 0.3]), p).unwrap())
                .collect()
        };
        let (blurs, shape) = (make(), [1, 2, 7, 9, 8]);
        let stack = Stack::new(
            make()
                .into_iter()
                .map(|b| Box::new(b) as Box<dyn LinearPhysics>)
                .collect(),
        )
        .unwrap();
        let ys = stack.forward(&noisy(&shape, 6)).unwrap();
        let ops: Vec<HostOperator> = blurs.iter().map(HostOperator::Blur3d).collect();
        let objective =
            DeviceObjective::new(&backend, &ops, &FidelityConfig::default(), &ys, None).unwrap();
        let v = noisy(&shape, 7);
        let normal = objective
            .normal(&Array::upload(&backend, &v).unwrap())
            .unwrap()
            .into_host()
            .unwrap();
        let e = relative_error(&normal, &stack.adjoint_forward(&v).unwrap());
        assert!(e <= crate::device::selftest::TOLERANCE, "normal: {e:e}");
        let pinv = objective
            .initial_point(Init::Pinv, &shape)
            .unwrap()
            .into_host()
            .unwrap();
        let e = relative_error(&pinv, &stack.pinv(&ys).unwrap());
        assert!(e <= 1e-4, "pinv: relative error {e:e}");
    }

    /// What the device has no twin for says so by name instead of running on the CPU.
    #[test]
    fn missing_device_parts_are_named() {
        let backend = Arc::new(Emulator::new().unwrap());
        let blur = Blur::new(gaussian_kernel([1.0, 1.0], 0.0), Padding::Circular).unwrap();
        let y = Tensor::zeros(&[1, 1, 8, 8]);
        let l1 = FidelityConfig::L1 {
            reduction: Reduction::Sum,
        };
        let e = DeviceObjective::new(
            &backend,
            &[HostOperator::Blur(&blur)],
            &l1,
            std::slice::from_ref(&y),
            None,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("fidelity l1"), "{e}");
    }

    /// `init = pinv` is CG on the device: the host stack's `pinv` to float rounding on a
    /// well-conditioned blur (the CG's sums run in another order), zeros for zero measurements.
    #[test]
    fn pinv_on_the_device_is_the_host_stacks() {
        let backend = Arc::new(Emulator::new().unwrap());
        let blur = || Blur::new(gaussian_kernel([0.6, 0.6], 0.0), Padding::Circular).unwrap();
        let (device_blur, shape) = (blur(), [1, 1, 13, 11]);
        let stack = Stack::new(vec![Box::new(blur())]).unwrap();
        let y = stack.ops()[0].forward(&noisy(&shape, 4)).unwrap();
        let pinv = |y: &Tensor| {
            DeviceObjective::new(
                &backend,
                &[HostOperator::Blur(&device_blur)],
                &FidelityConfig::default(),
                std::slice::from_ref(y),
                None,
            )
            .unwrap()
            .initial_point(Init::Pinv, &shape)
            .unwrap()
            .into_host()
            .unwrap()
        };
        let host = stack.pinv(std::slice::from_ref(&y)).unwrap();
        let e = relative_error(&pinv(&y), &host);
        assert!(e <= 1e-4, "pinv: relative error {e:e}");
        let zero = pinv(&Tensor::zeros(&shape));
        assert!(zero.data().iter().all(|&v| v == 0.0));
    }
}
