//! The libtorch engine (cargo feature `torch`): DRUNet and TorchScript denoisers run by libtorch
//! through tch, on the CPU or a CUDA GPU.
//!
//! Two ways in, both ending as a [`Denoiser`] that tiling and distribution use unchanged:
//! - [`TorchDrunet`] builds deepinv's DRUNet from a [`StateDict`] with deepinv's key names (the same
//!   network the native engine runs, for parity and for GPUs);
//! - [`TorchScriptDenoiser`] loads any module saved with `torch.jit.save` whose `forward` takes
//!   `(x, sigma)`, so a deepinv denoiser (or any other) can be brought in without porting it.
//!
//! libtorch itself is found at run time through the rpath that build.rs records (docs/TORCH.md).
//! Every libtorch call goes through tch's fallible `f_` functions: a libtorch exception becomes an
//! error, never a panic.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use tch::{Device, IValue, Kind, TchError};

use super::models::drunet::check_arch;
use super::weights::source::LayerKind::{self, Conv, Transposed};
use super::weights::source::WeightSource;
use super::{DrunetArch, StateDict};
use crate::denoise::Denoiser;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub use super::device::TorchDevice;

impl TorchDevice {
    /// The tch device; a CUDA request without a usable GPU is an error that says so.
    pub fn to_tch(self) -> Result<Device> {
        match self {
            TorchDevice::Cpu => Ok(Device::Cpu),
            TorchDevice::Cuda(n) => {
                let count = if tch::Cuda::is_available() {
                    tch::Cuda::device_count().max(0) as usize
                } else {
                    0
                };
                if n < count {
                    Ok(Device::Cuda(n))
                } else if count == 0 {
                    Err(Error::Unsupported(format!(
                        "device cuda:{n} was asked for, but libtorch sees no CUDA GPU (no GPU or \
                         driver here, or a CPU-only libtorch such as scripts/setup-torch.sh's lean \
                         mode; TESSERA_TORCH_MODE=full installs the CUDA libraries)"
                    )))
                } else {
                    Err(Error::Unsupported(format!(
                        "device cuda:{n} was asked for, but libtorch sees only {count} CUDA GPU(s)"
                    )))
                }
            }
        }
    }
}

/// The entry point for `[denoiser] kind = "torchscript"`: the model at `model` on
/// [`TorchDevice::chosen`]`(device)`.
pub fn build_torchscript(model: &Path, device: Option<TorchDevice>) -> Result<Box<dyn Denoiser>> {
    Ok(Box::new(TorchScriptDenoiser::load(
        model,
        TorchDevice::chosen(device)?,
    )?))
}

/// When a DRUNet's 2-D weights become 3-D: `now` (`inflate_3d`), or `on_demand` for the first
/// volume (no `dim` given).
pub struct Inflation {
    pub on_demand: bool,
    pub now: bool,
}

/// A libtorch error, with what tessera was doing when it happened.
fn torch_err(what: &str) -> impl Fn(TchError) -> Error + '_ {
    move |e| Error::Device {
        device: "libtorch".into(),
        reason: format!("{what}: {e}"),
    }
}

/// Copies a tessera array to libtorch (f32, same shape) on `device`.
fn to_torch(x: &Tensor, device: Device) -> Result<tch::Tensor> {
    let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
    tch::Tensor::f_from_slice(x.data())
        .and_then(|t| t.f_view(shape.as_slice()))
        .and_then(|t| t.f_to_device(device))
        .map_err(torch_err("copying an array to libtorch"))
}

/// Copies a libtorch tensor back to a tessera array (converting to f32 on the CPU).
fn from_torch(t: &tch::Tensor) -> Result<Tensor> {
    let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
    let flat = t
        .f_to_device(Device::Cpu)
        .and_then(|t| t.f_to_kind(Kind::Float))
        .and_then(|t| t.f_contiguous())
        .and_then(|t| t.f_view([-1i64]))
        .map_err(torch_err("copying a tensor from libtorch"))?;
    let data = Vec::<f32>::try_from(&flat).map_err(torch_err("reading a tensor"))?;
    Tensor::from_vec(&shape, data)
}

// ---------------------------------------------------------------------------------------------
// TorchScript
// ---------------------------------------------------------------------------------------------

/// How a TorchScript module takes σ; found on the first call and kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum SigmaForm {
    /// Not known yet.
    Unknown = 0,
    /// A 0-d tensor (what deepinv's denoisers broadcast over the batch).
    Scalar = 1,
    /// A `(B,)` tensor, one σ per batch item.
    PerItem = 2,
    /// A Python float (`float` in the scripted signature).
    Float = 3,
}

impl SigmaForm {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => SigmaForm::Scalar,
            2 => SigmaForm::PerItem,
            3 => SigmaForm::Float,
            _ => SigmaForm::Unknown,
        }
    }
}

/// A TorchScript module (saved with `torch.jit.save`) whose `forward(x, sigma)` denoises `x`.
///
/// `x` is passed as an f32 tensor `(B, C, H, W)` (or `(B, C, D, H, W)`) on the module's device, and
/// σ as a 0-d f32 tensor; a module that rejects that gets a `(B,)` tensor, then a float. The form
/// that works is kept for later calls. The module must return a tensor of `x`'s shape. It runs in
/// eval mode without autograd.
pub struct TorchScriptDenoiser {
    module: tch::CModule,
    device: Device,
    label: String,
    sigma_form: AtomicU8,
}

impl TorchScriptDenoiser {
    /// Loads `path` onto `device` (a CUDA device must be present: [`TorchDevice::to_tch`]).
    pub fn load(path: &Path, device: TorchDevice) -> Result<Self> {
        let dev = device.to_tch()?;
        if !path.is_file() {
            return Err(Error::io(
                "loading a TorchScript model",
                path,
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        let mut module = tch::CModule::load_on_device(path, dev).map_err(|e| {
            Error::format(
                path,
                format!("not a TorchScript model (torch.jit.save) that libtorch can load: {e}"),
            )
        })?;
        module.set_eval();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(TorchScriptDenoiser {
            module,
            device: dev,
            label: format!("torchscript({name}, {device})"),
            sigma_form: AtomicU8::new(SigmaForm::Unknown as u8),
        })
    }

    fn call(&self, x: &tch::Tensor, sigma: f32, form: SigmaForm) -> Result<tch::Tensor, TchError> {
        let opts = (Kind::Float, self.device);
        let s = match form {
            SigmaForm::Float => IValue::Double(sigma as f64),
            SigmaForm::PerItem => {
                IValue::Tensor(tch::Tensor::f_full([x.size()[0]], sigma as f64, opts)?)
            }
            SigmaForm::Scalar | SigmaForm::Unknown => {
                IValue::Tensor(tch::Tensor::f_full([0i64; 0], sigma as f64, opts)?)
            }
        };
        match self
            .module
            .forward_is(&[IValue::Tensor(x.shallow_clone()), s])?
        {
            IValue::Tensor(t) => Ok(t),
            other => Err(TchError::Kind(format!(
                "forward returned {}, not a tensor",
                ivalue_kind(&other)
            ))),
        }
    }
}

fn ivalue_kind(v: &IValue) -> &'static str {
    match v {
        IValue::None => "None",
        IValue::Tuple(_) => "a tuple",
        IValue::GenericList(_) | IValue::TensorList(_) => "a list",
        IValue::GenericDict(_) => "a dict",
        _ => "a non-tensor value",
    }
}

impl Denoiser for TorchScriptDenoiser {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        x.expect_rank("torchscript", &[4, 5])?;
        crate::denoise::check_sigma("torchscript", sigma)?;
        let xt = to_torch(x, self.device)?;
        let known = SigmaForm::from_u8(self.sigma_form.load(Ordering::Relaxed));
        let out = tch::no_grad(|| -> Result<tch::Tensor> {
            if known != SigmaForm::Unknown {
                return self
                    .call(&xt, sigma, known)
                    .map_err(torch_err("TorchScript forward(x, sigma)"));
            }
            let mut first_err = None;
            for form in [SigmaForm::Scalar, SigmaForm::PerItem, SigmaForm::Float] {
                match self.call(&xt, sigma, form) {
                    Ok(t) => {
                        self.sigma_form.store(form as u8, Ordering::Relaxed);
                        return Ok(t);
                    }
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            Err(Error::Unsupported(format!(
                "libtorch: TorchScript forward(x, sigma) failed with sigma as a 0-d tensor, a (B,) \
                 tensor and a float; with a 0-d tensor: {}",
                first_err.map(|e| e.to_string()).unwrap_or_default()
            )))
        })?;
        let y = from_torch(&out)?;
        if y.shape() != x.shape() {
            return Err(Error::shape(
                format!("{} output", self.label),
                x.shape(),
                y.shape(),
            ));
        }
        Ok(y)
    }
}

// ---------------------------------------------------------------------------------------------
// DRUNet
// ---------------------------------------------------------------------------------------------

/// One residual block `x + conv(relu(conv(x)))` (deepinv's `ResBlock`, mode "CRC").
struct ResBlock {
    conv1: tch::Tensor,
    conv2: tch::Tensor,
}

/// The weights of one network (2-D, or 3-D), on its device.
struct DrunetWeights {
    head: tch::Tensor,
    /// Per scale 1..=3: residual blocks, then the 2×2 stride-2 convolution.
    down: Vec<(Vec<ResBlock>, tch::Tensor)>,
    body: Vec<ResBlock>,
    /// Per scale 3..=1: the 2×2 stride-2 transposed convolution, then residual blocks.
    up: Vec<(tch::Tensor, Vec<ResBlock>)>,
    tail: tch::Tensor,
}

/// The networks of a [`TorchDrunet`]: the one it was built as, and with inflation on demand the 3-D
/// network made from the kept 2-D weights on the first volume.
struct Nets {
    main: DrunetWeights,
    inflatable: Option<StateDict>,
    inflated: Option<DrunetWeights>,
}

/// deepinv's DRUNet on libtorch (the architecture and key names of [`crate::nn::Drunet`]).
pub struct TorchDrunet {
    arch: DrunetArch,
    device: TorchDevice,
    dev: Device,
    random: bool,
    /// tch tensors are `Send` but not `Sync`; calls are serialised (libtorch parallelises inside
    /// each convolution).
    nets: Mutex<Nets>,
}

impl TorchDrunet {
    /// Builds the network from `dict` (deepinv's key names; every key must be used, with the shape
    /// `arch` implies) on `device`. With `inflate_3d`, `dict` holds 2-D weights for a 3-D `arch`,
    /// inflated as the native engine does ([`crate::nn::Drunet::from_state_dict`]).
    pub fn from_state_dict(
        arch: DrunetArch,
        dict: StateDict,
        inflate_3d: bool,
        device: TorchDevice,
    ) -> Result<Self> {
        let mut src = WeightSource::Dict {
            dict,
            inflate: inflate_3d,
        };
        Self::build(arch, &mut src, device, false)
    }

    /// Seeded random weights, as [`crate::nn::Drunet::random`]: for timing only.
    pub fn random(arch: DrunetArch, seed: u64, device: TorchDevice) -> Result<Self> {
        tracing::warn!(
            "DRUNet (torch engine) built with RANDOM weights (no `weights` file): its output is meaningless; use it for timing only"
        );
        Self::build(arch, &mut WeightSource::random(seed), device, true)
    }

    fn build(
        arch: DrunetArch,
        src: &mut WeightSource,
        device: TorchDevice,
        random: bool,
    ) -> Result<Self> {
        check_arch(&arch)?;
        let dev = device.to_tch()?;
        let main = DrunetWeights::build(&arch, arch.dim, src, dev)?;
        Ok(TorchDrunet {
            arch,
            device,
            dev,
            random,
            nets: Mutex::new(Nets {
                main,
                inflatable: None,
                inflated: None,
            }),
        })
    }

    /// Lets a 2-D network also denoise volumes `(B, C, D, H, W)` with its kernels inflated to 3-D
    /// (built on the first 5-D input from `dict`, the 2-D weights it was built from).
    pub fn with_inflation_on_demand(self, dict: StateDict) -> Self {
        if self.arch.dim == 2 {
            self.nets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .inflatable = Some(dict);
        }
        self
    }

    pub fn arch(&self) -> &DrunetArch {
        &self.arch
    }
}

impl DrunetWeights {
    /// Takes every weight from `src` (deepinv's key names) for a network of `rank` spatial axes.
    fn build(arch: &DrunetArch, rank: usize, src: &mut WeightSource, dev: Device) -> Result<Self> {
        let mut w = WeightTaker {
            src,
            dev,
            rank,
            nb: arch.nb,
        };
        let nc = arch.nc;
        let head = w.conv("m_head.weight", Conv, nc[0], arch.in_channels + 1, 3)?;
        let mut down = Vec::new();
        for k in 0..3 {
            let name = format!("m_down{}", k + 1);
            let b = w.blocks(&name, 0, nc[k], false)?;
            let conv = w.conv(
                &format!("{name}.{}.weight", arch.nb),
                Conv,
                nc[k + 1],
                nc[k],
                2,
            )?;
            down.push((b, conv));
        }
        // nn.Sequential flattens a single module away, so with nb = 1 the body's block has no index.
        let body = w.blocks("m_body", 0, nc[3], arch.nb == 1)?;
        let mut up = Vec::new();
        for k in (0..3).rev() {
            let name = format!("m_up{}", k + 1);
            // A transposed conv weight is (in, out, 2, 2).
            let convt = w.conv(&format!("{name}.0.weight"), Transposed, nc[k + 1], nc[k], 2)?;
            let b = w.blocks(&name, 1, nc[k], false)?;
            up.push((convt, b));
        }
        let tail = w.conv("m_tail.weight", Conv, arch.out_channels, nc[0], 3)?;
        Ok(DrunetWeights {
            head,
            down,
            body,
            up,
            tail,
        })
    }
}

/// Moves DRUNet's weights from a [`WeightSource`] (checked shapes, optional 2-D → 3-D inflation)
/// onto the device.
struct WeightTaker<'a> {
    src: &'a mut WeightSource,
    dev: Device,
    rank: usize,
    nb: usize,
}

impl WeightTaker<'_> {
    /// A weight of 2-D shape `(a, b, k, k)`, as `(a, b, k, k[, k])` for the network's rank.
    fn conv(
        &mut self,
        key: &str,
        kind: LayerKind,
        a: usize,
        b: usize,
        k: usize,
    ) -> Result<tch::Tensor> {
        let data = self.src.weight(key, kind, [a, b, k], self.rank)?;
        let mut shape = vec![a, b];
        shape.extend(std::iter::repeat_n(k, self.rank));
        to_torch(&Tensor::from_vec(&shape, data)?, self.dev)
    }

    /// `nb` residual blocks `{prefix}.{first + i}.res.{0,2}.weight` (or `{prefix}.res…` if `bare`).
    fn blocks(
        &mut self,
        prefix: &str,
        first: usize,
        c: usize,
        bare: bool,
    ) -> Result<Vec<ResBlock>> {
        (0..self.nb)
            .map(|i| {
                let p = if bare {
                    prefix.to_string()
                } else {
                    format!("{prefix}.{}", first + i)
                };
                Ok(ResBlock {
                    conv1: self.conv(&format!("{p}.res.0.weight"), Conv, c, c, 3)?,
                    conv2: self.conv(&format!("{p}.res.2.weight"), Conv, c, c, 3)?,
                })
            })
            .collect()
    }
}

/// `conv(x, w)` with no bias, for 2-D or 3-D (the kernel's rank decides).
fn conv(x: &tch::Tensor, w: &tch::Tensor, stride: i64, padding: i64) -> Result<tch::Tensor> {
    let d = w.dim() - 2;
    x.f_convolution(
        w,
        None::<tch::Tensor>,
        vec![stride; d].as_slice(),
        vec![padding; d].as_slice(),
        vec![1i64; d].as_slice(),
        false,
        vec![0i64; d].as_slice(),
        1,
    )
    .map_err(torch_err("DRUNet convolution"))
}

/// The 2×2 stride-2 transposed convolution that doubles every spatial size.
fn conv_up(x: &tch::Tensor, w: &tch::Tensor) -> Result<tch::Tensor> {
    let d = w.dim() - 2;
    x.f_convolution(
        w,
        None::<tch::Tensor>,
        vec![2i64; d].as_slice(),
        vec![0i64; d].as_slice(),
        vec![1i64; d].as_slice(),
        true,
        vec![0i64; d].as_slice(),
        1,
    )
    .map_err(torch_err("DRUNet transposed convolution"))
}

fn add(a: &tch::Tensor, b: &tch::Tensor) -> Result<tch::Tensor> {
    a.f_add(b).map_err(torch_err("DRUNet skip connection"))
}

fn res_blocks(mut x: tch::Tensor, blocks: &[ResBlock]) -> Result<tch::Tensor> {
    for b in blocks {
        let h = conv(&x, &b.conv1, 1, 1)?
            .f_relu()
            .map_err(torch_err("DRUNet ReLU"))?;
        x = add(&x, &conv(&h, &b.conv2, 1, 1)?)?;
    }
    Ok(x)
}

impl DrunetWeights {
    /// deepinv's `forward_unet`: the U-Net on `(x, σ map)`, spatial sizes multiples of 8.
    fn unet(&self, x0: &tch::Tensor) -> Result<tch::Tensor> {
        let x1 = conv(x0, &self.head, 1, 1)?;
        let mut skips = vec![x1.shallow_clone()];
        let mut x = x1;
        for (blocks, down) in &self.down {
            x = conv(&res_blocks(x, blocks)?, down, 2, 0)?;
            skips.push(x.shallow_clone());
        }
        x = res_blocks(x, &self.body)?;
        // x + x4 into up3, x + x3 into up2, x + x2 into up1, x + x1 into the tail.
        for (convt, blocks) in &self.up {
            let skip = skips.pop().expect("three skips for three up-steps");
            x = res_blocks(conv_up(&add(&x, &skip)?, convt)?, blocks)?;
        }
        let skip = skips.pop().expect("the head's output");
        conv(&add(&x, &skip)?, &self.tail, 1, 1)
    }
}

/// deepinv's `test_pad`: replicate-pads the end of every spatial axis to a multiple of `modulo`,
/// runs `f`, crops back.
fn pad_run(
    x: &tch::Tensor,
    modulo: i64,
    f: impl Fn(&tch::Tensor) -> Result<tch::Tensor>,
) -> Result<tch::Tensor> {
    let size = x.size();
    let spatial = &size[2..];
    // torch's pad list runs from the last axis backwards: (left, right) per axis.
    let pad: Vec<i64> = spatial
        .iter()
        .rev()
        .flat_map(|&s| [0, (s + modulo - 1) / modulo * modulo - s])
        .collect();
    let padded = if spatial.len() == 2 {
        x.f_replication_pad2d(pad.as_slice())
    } else {
        x.f_replication_pad3d(pad.as_slice())
    }
    .map_err(torch_err("DRUNet replicate padding"))?;
    let mut y = f(&padded)?;
    for (i, &s) in spatial.iter().enumerate() {
        y = y
            .f_narrow(2 + i as i64, 0, s)
            .map_err(torch_err("DRUNet crop"))?;
    }
    Ok(y)
}

/// deepinv's `test_onesplit` (2-D, `refield` = 64): runs `f` on four overlapping corner windows
/// whose sizes are multiples of `refield` and keeps each window's own quadrant.
fn onesplit_run(
    x: &tch::Tensor,
    refield: i64,
    f: impl Fn(&tch::Tensor) -> Result<tch::Tensor>,
) -> Result<tch::Tensor> {
    let size = x.size();
    let (h, w) = (size[2], size[3]);
    let (wh, ww) = (
        (h / 2 / refield + 1) * refield,
        (w / 2 / refield + 1) * refield,
    );
    let e = torch_err("DRUNet split");
    let window = |r0: i64, c0: i64| -> Result<tch::Tensor> {
        let part = x
            .f_narrow(2, r0, wh)
            .and_then(|t| t.f_narrow(3, c0, ww))
            .map_err(torch_err("DRUNet split"))?;
        f(&part)
    };
    let (top, left) = (h / 2, w / 2);
    let (bottom, right) = (h - top, w - left);
    let tl = window(0, 0)?
        .f_narrow(2, 0, top)
        .and_then(|t| t.f_narrow(3, 0, left));
    let tr = window(0, w - ww)?
        .f_narrow(2, 0, top)
        .and_then(|t| t.f_narrow(3, ww - right, right));
    let bl = window(h - wh, 0)?
        .f_narrow(2, wh - bottom, bottom)
        .and_then(|t| t.f_narrow(3, 0, left));
    let br = window(h - wh, w - ww)?
        .f_narrow(2, wh - bottom, bottom)
        .and_then(|t| t.f_narrow(3, ww - right, right));
    let (tl, tr, bl, br) = (
        tl.map_err(&e)?,
        tr.map_err(&e)?,
        bl.map_err(&e)?,
        br.map_err(&e)?,
    );
    let upper = tch::Tensor::f_cat(&[tl, tr], 3).map_err(&e)?;
    let lower = tch::Tensor::f_cat(&[bl, br], 3).map_err(&e)?;
    tch::Tensor::f_cat(&[upper, lower], 2).map_err(e)
}

impl Denoiser for TorchDrunet {
    fn name(&self) -> String {
        let a = &self.arch;
        format!(
            "drunet{}d(nc={:?}, nb={}, libtorch {}{})",
            a.dim,
            a.nc,
            a.nb,
            self.device,
            if self.random { ", RANDOM weights" } else { "" }
        )
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        let a = &self.arch;
        x.expect_rank("drunet", &[4, 5])?;
        crate::denoise::check_sigma("drunet", sigma)?;
        if x.shape()[1] != a.in_channels {
            let mut expected = x.shape().to_vec();
            expected[1] = a.in_channels;
            return Err(Error::shape("drunet input channels", &expected, x.shape()));
        }
        let rank = x.ndim() - 2;
        let mut nets = self
            .nets
            .lock()
            .map_err(|_| Error::Internal("drunet: an earlier call panicked".into()))?;
        if rank != a.dim {
            if rank == 3 && nets.inflatable.is_some() && nets.inflated.is_none() {
                let dict = nets.inflatable.clone().expect("checked");
                let mut src = WeightSource::Dict {
                    dict,
                    inflate: true,
                };
                nets.inflated = Some(DrunetWeights::build(a, 3, &mut src, self.dev)?);
            }
            if rank != 3 || nets.inflated.is_none() {
                return Err(Error::Unsupported(format!(
                    "this DRUNet is {}-D: it denoises ({}) arrays, not {}-D ones (a 2-D network \
                     with `weights` and no `dim` also takes volumes)",
                    a.dim,
                    if a.dim == 3 {
                        "B, C, D, H, W"
                    } else {
                        "B, C, H, W"
                    },
                    rank
                )));
            }
        }
        if x.numel() == 0 {
            return Ok(x.zeros_like());
        }
        let net = if rank == a.dim {
            &nets.main
        } else {
            nets.inflated.as_ref().expect("built above")
        };
        let y = tch::no_grad(|| -> Result<tch::Tensor> {
            let xt = to_torch(x, self.dev)?;
            let mut map_shape = xt.size();
            map_shape[1] = 1;
            // deepinv: x = cat(x, σ·1) along channels; the network sees in_channels + 1 inputs.
            let x0 =
                tch::Tensor::f_full(map_shape.as_slice(), sigma as f64, (Kind::Float, self.dev))
                    .and_then(|map| tch::Tensor::f_cat(&[xt, map], 1))
                    .map_err(torch_err("DRUNet σ map"))?;
            let spatial: Vec<i64> = x.spatial().iter().map(|&s| s as i64).collect();
            let unet = |t: &tch::Tensor| net.unet(t);
            // deepinv's DRUNet.forward: sizes that the three halvings keep whole and large enough
            // run as they are; small ones are padded to multiples of 16; large 2-D images of other
            // sizes go through test_onesplit. (deepinv has no large-3-D path; tessera pads those too.)
            if spatial.iter().all(|&s| s % 8 == 0 && s > 31) {
                unet(&x0)
            } else if rank == 3 || spatial.iter().any(|&s| s < 64) {
                pad_run(&x0, 16, unet)
            } else {
                onesplit_run(&x0, 64, unet)
            }
        })?;
        from_torch(&y)
    }
}

/// The engine entry point for presets (`[denoiser] kind = "drunet"`, `engine = "torch"`), called by
/// `DrunetConfig::build` with the architecture it resolved (the same rules as the native engine:
/// `dim` unset means 3 with `inflate_3d`, else the weights' rank, else 2), the loaded weights
/// (`None`: random weights from `seed`), the configured device and when to inflate 2-D weights. A
/// 2-D network with weights and no `dim` also takes volumes. The device is
/// [`TorchDevice::chosen`].
pub fn build_drunet(
    arch: DrunetArch,
    weights: Option<StateDict>,
    device: Option<TorchDevice>,
    inflation: Inflation,
    seed: u64,
) -> Result<Box<dyn Denoiser>> {
    let dim = arch.dim;
    let device = TorchDevice::chosen(device)?;
    Ok(Box::new(match weights {
        Some(dict) if inflation.on_demand && dim == 2 => {
            let spare = dict.clone();
            TorchDrunet::from_state_dict(arch, dict, false, device)?.with_inflation_on_demand(spare)
        }
        Some(dict) => TorchDrunet::from_state_dict(arch, dict, inflation.now, device)?,
        None => TorchDrunet::random(arch, seed, device)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_parses_and_cuda_without_gpu_is_a_clear_error() {
        assert_eq!(TorchDevice::parse("d", "cpu").unwrap(), TorchDevice::Cpu);
        assert_eq!(
            TorchDevice::parse("d", "cuda").unwrap(),
            TorchDevice::Cuda(0)
        );
        assert_eq!(
            TorchDevice::parse("d", "cuda:2").unwrap(),
            TorchDevice::Cuda(2)
        );
        let e = TorchDevice::parse("denoiser.device", "gpu")
            .unwrap_err()
            .to_string();
        assert!(e.contains("denoiser.device") && e.contains("gpu"), "{e}");
        if !tch::Cuda::is_available() {
            let e = TorchDevice::Cuda(0).to_tch().unwrap_err().to_string();
            assert!(e.contains("no CUDA GPU"), "{e}");
        }
    }

    #[test]
    fn arrays_round_trip_through_libtorch() {
        let x = Tensor::from_fn(&[2, 3, 4, 5], |i| i as f32 * 0.5 - 3.0);
        let t = to_torch(&x, Device::Cpu).unwrap();
        assert_eq!(t.size(), vec![2, 3, 4, 5]);
        assert_eq!(from_torch(&t).unwrap().data(), x.data());
    }

    /// The onesplit assembly must give back exactly the input when the network is the identity,
    /// and the pad/crop path must too: any off-by-one in the window arithmetic shows up here.
    #[test]
    fn split_and_pad_paths_reassemble_the_identity() {
        let x = Tensor::from_fn(&[1, 2, 130, 97], |i| (i % 1013) as f32);
        let t = to_torch(&x, Device::Cpu).unwrap();
        let id = |t: &tch::Tensor| Ok(t.shallow_clone());
        assert_eq!(
            from_torch(&onesplit_run(&t, 64, id).unwrap())
                .unwrap()
                .data(),
            x.data()
        );
        assert_eq!(
            from_torch(&pad_run(&t, 16, id).unwrap()).unwrap().data(),
            x.data()
        );
    }
}
