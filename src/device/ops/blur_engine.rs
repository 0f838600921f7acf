//! The blurs' FFT path on the device: [`DeviceConv`] computes `physics::blur_engine::Conv`, the
//! engine of 2-D and 3-D blurs (deepinv's convolution, every padding: valid, circular, replicate,
//! reflect, constant; a 3-D blur takes valid and circular) on planes `[D, H, W]`, as pad → FFT →
//! product with the kernel's spectrum → inverse FFT → crop, and its adjoint as zero-pad → FFT →
//! product with the conjugate spectrum → inverse FFT → fold (the padding's adjoint). The padding
//! maps and the kernel placement come from the CPU engine itself (`Conv::fft_layout`,
//! `Conv::placed_kernel`); only the FFTs and the element loops run on the device.
//!
//! Grids: circular padding transforms an axis on the image's own length when that length has no
//! prime factor above 7 (cuFFT's fast radices), else — and for every other padding — the padded
//! extent `N + K − 1` rounded up to such a length, as the CPU's linear path does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{crop_grids, expect_len, int_arg, len_arg};
use crate::device::backend::{Arg, Backend, DeviceVec, LaunchConfig};
use crate::device::kernels;
use crate::error::{Error, Result};
use crate::physics::LinearPhysics;
use crate::physics::blur::{Blur, Blur3d};
use crate::physics::blur_engine::{AxisMap, Conv, ConvMethod, Padding};
use crate::physics::stack::BlurFusion;

/// Whether `n`'s prime factors are all at most 7.
fn smooth(mut n: usize) -> bool {
    for p in [2, 3, 5, 7] {
        while n > 1 && n.is_multiple_of(p) {
            n /= p;
        }
    }
    n == 1
}

/// A map as the kernels read it: the source index, or −1 for a zero.
fn map_arg(map: &AxisMap) -> Result<Vec<i32>> {
    map.iter()
        .map(|s| s.map_or(Ok(-1), |s| int_arg("convolution axis", s)))
        .collect()
}

/// The inverse of a map on `n` samples, as CSR: the grid positions copying sample `s` are
/// `idx[start[s]..start[s+1]]`, ascending.
fn inverse_map(map: &AxisMap, n: usize) -> Result<(Vec<i32>, Vec<i32>)> {
    let mut lists = vec![Vec::new(); n];
    for (r, s) in map.iter().enumerate() {
        if let Some(s) = s {
            lists[*s].push(int_arg("convolution grid", r)?);
        }
    }
    let mut start = Vec::with_capacity(n + 1);
    let mut idx = Vec::new();
    start.push(0);
    for list in lists {
        idx.extend(list);
        start.push(int_arg("convolution fold", idx.len())?);
    }
    if idx.is_empty() {
        // A buffer is never empty; this value is never read.
        idx.push(0);
    }
    Ok((start, idx))
}

/// Everything that depends on the input size: grid, maps, kernel spectra and FFT plans.
struct Layout<B: Backend> {
    dims: [usize; 3],
    out_dims: [usize; 3],
    grid: [usize; 3],
    crop: [usize; 3],
    /// Complex values per plane's spectrum.
    spectrum_len: usize,
    input_maps: [DeviceVec<B, i32>; 3],
    output_maps: [DeviceVec<B, i32>; 3],
    /// Per axis, the inverse of the input map (start, idx).
    fold: [(DeviceVec<B, i32>, DeviceVec<B, i32>); 3],
    /// One spectrum per kernel, over the grid's size `N` (so a forward–inverse pair is exact).
    kernel_spectra: DeviceVec<B, f32>,
    /// Plans by batch size.
    plans: Mutex<HashMap<usize, Arc<B::Fft>>>,
}

impl<B: Backend> Layout<B> {
    fn plan(&self, backend: &B, batch: usize) -> Result<Arc<B::Fft>> {
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(plan) = plans.get(&batch) {
            return Ok(plan.clone());
        }
        let plan = Arc::new(backend.fft_plan(self.grid, batch)?);
        plans.insert(batch, plan.clone());
        Ok(plan)
    }

    fn grid_len(&self) -> usize {
        self.grid.iter().product()
    }
}

/// The axes a circular convolution transforms on the image's own length (see the module docs).
fn circular_axes(conv: &Conv, dims: [usize; 3]) -> [bool; 3] {
    let circular = conv.padding() == Padding::Circular;
    dims.map(|n| circular && smooth(n))
}

/// The FFT grid of a blur's `conv` (2-D or 3-D) on inputs of `dims` and its spectrum's complex
/// values per plane, as [`DeviceConv`] will allocate them (for the memory estimate of a device
/// job, before any).
pub fn blur_grid(conv: &Conv, dims: [usize; 3]) -> ([usize; 3], usize) {
    let grid = conv.fft_layout(dims, circular_axes(conv, dims)).grid;
    (grid, grid[0] * grid[1] * (grid[2] / 2 + 1))
}

/// A convolution (one kernel, or one per channel) on the device; see the module docs.
pub struct DeviceConv<B: Backend> {
    conv: Conv,
    layouts: Mutex<HashMap<[usize; 3], Arc<Layout<B>>>>,
}

impl<B: Backend> DeviceConv<B> {
    /// The device twin of `conv` (its kernels, dims and padding; the method is always FFT here).
    pub(crate) fn new(conv: &Conv) -> DeviceConv<B> {
        DeviceConv {
            conv: Conv::new(
                conv.kernels().to_vec(),
                conv.kdims(),
                conv.padding(),
                ConvMethod::Fft,
            ),
            layouts: Mutex::new(HashMap::new()),
        }
    }

    /// The device twin of a 2-D blur.
    pub fn from_blur(blur: &Blur) -> DeviceConv<B> {
        DeviceConv::new(blur.conv())
    }

    /// The device twin of a 3-D blur (its planes are volumes `[D, H, W]`).
    pub fn from_blur3d(blur: &Blur3d) -> DeviceConv<B> {
        DeviceConv::new(blur.conv())
    }

    /// Output dims for input `dims` (as the CPU operator's).
    pub fn out_dims(&self, dims: [usize; 3]) -> Result<[usize; 3]> {
        self.conv.out_dims(dims).ok_or_else(|| {
            Error::config(
                "blur",
                format!(
                    "a valid convolution with a {:?} kernel needs an input at least that large, got {dims:?}",
                    self.conv.kdims()
                ),
            )
        })
    }

    fn layout(&self, backend: &B, dims: [usize; 3]) -> Result<Arc<Layout<B>>> {
        let mut layouts = self.layouts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = layouts.get(&dims) {
            return Ok(l.clone());
        }
        self.out_dims(dims)?;
        let circ = circular_axes(&self.conv, dims);
        let plain = self.conv.fft_layout(dims, circ);
        let grid = plain.grid;
        for n in grid {
            int_arg("FFT grid side", n)?;
        }
        let spectrum_len = grid[0] * grid[1] * (grid[2] / 2 + 1);
        let upload_map = |m: &AxisMap| DeviceVec::from_host(backend, &map_arg(m)?);
        let [i0, i1, i2] = &plain.input_maps;
        let [o0, o1, o2] = &plain.output_maps;
        let fold_axis = |i: usize| -> Result<(DeviceVec<B, i32>, DeviceVec<B, i32>)> {
            let (start, idx) = inverse_map(&plain.input_maps[i], dims[i])?;
            Ok((
                DeviceVec::from_host(backend, &start)?,
                DeviceVec::from_host(backend, &idx)?,
            ))
        };
        // Kernel spectra: the placed kernels, transformed on the device, over N.
        let kernels = self.conv.channels();
        let mut placed = Vec::with_capacity(kernels * grid.iter().product::<usize>());
        for ch in 0..kernels {
            placed.extend(self.conv.placed_kernel(ch, grid, circ));
        }
        let placed = DeviceVec::from_host(backend, &placed)?;
        let mut kernel_spectra = DeviceVec::zeros(backend, kernels * spectrum_len * 2)?;
        let plan = Arc::new(backend.fft_plan(grid, kernels)?);
        backend.fft_forward(&plan, placed.buffer(), kernel_spectra.buffer())?;
        let n = grid.iter().product::<usize>() as f32;
        super::vector::scale(backend, &mut kernel_spectra, 1.0 / n)?;
        let layout = Arc::new(Layout {
            dims,
            out_dims: plain.out_dims,
            grid,
            crop: plain.crop,
            spectrum_len,
            input_maps: [upload_map(i0)?, upload_map(i1)?, upload_map(i2)?],
            output_maps: [upload_map(o0)?, upload_map(o1)?, upload_map(o2)?],
            fold: [fold_axis(0)?, fold_axis(1)?, fold_axis(2)?],
            kernel_spectra,
            plans: Mutex::new(HashMap::from([(kernels, plan)])),
        });
        layouts.insert(dims, layout.clone());
        Ok(layout)
    }

    /// `xg ← pad(x)` onto the grid through `maps` (`src_dims` the source's dims).
    fn pad(
        &self,
        backend: &B,
        l: &Layout<B>,
        x: &DeviceVec<B, f32>,
        maps: &[DeviceVec<B, i32>; 3],
        src_dims: [usize; 3],
        planes: usize,
    ) -> Result<DeviceVec<B, f32>> {
        let xg = DeviceVec::zeros(backend, planes * l.grid_len())?;
        let [d, h, w] = src_dims.map(|n| Arg::I32(n as i32));
        let [gd, gh, gw] = l.grid.map(|n| Arg::I32(n as i32));
        backend.launch(
            &kernels::CONV_PAD,
            LaunchConfig::elementwise(planes * l.grid_len()),
            &[
                x.arg(),
                xg.arg(),
                maps[0].arg(),
                maps[1].arg(),
                maps[2].arg(),
                d,
                h,
                w,
                gd,
                gh,
                gw,
                Arg::I64(len_arg(planes)),
            ],
        )?;
        Ok(xg)
    }

    /// `FFT(grid)` for `planes` planes.
    fn transform(
        &self,
        backend: &B,
        l: &Layout<B>,
        grid: &DeviceVec<B, f32>,
        planes: usize,
    ) -> Result<DeviceVec<B, f32>> {
        let spec = DeviceVec::<B, f32>::zeros(backend, planes * l.spectrum_len * 2)?;
        let plan = l.plan(backend, planes)?;
        backend.fft_forward(&plan, grid.buffer(), spec.buffer())?;
        Ok(spec)
    }

    /// `spec ← spec · K̂` (or `· conj(K̂)`), plane `p` with its channel's kernel.
    fn multiply(
        &self,
        backend: &B,
        l: &Layout<B>,
        spec: &mut DeviceVec<B, f32>,
        planes: usize,
        channels: usize,
        conjugate: bool,
    ) -> Result<()> {
        expect_len("device spectrum", spec, planes * l.spectrum_len * 2)?;
        backend.launch(
            &kernels::SPECTRUM_MULTIPLY,
            LaunchConfig::elementwise(planes * l.spectrum_len),
            &[
                spec.arg(),
                l.kernel_spectra.arg(),
                Arg::I64(len_arg(l.spectrum_len)),
                Arg::I32(int_arg("kernels", self.conv.channels())?),
                Arg::I32(int_arg("channels", channels.max(1))?),
                Arg::I32(conjugate.into()),
                Arg::I64(len_arg(planes)),
            ],
        )
    }

    /// `IFFT(spec)` on the grid (`spec` is consumed: cuFFT may overwrite it).
    fn inverse(
        &self,
        backend: &B,
        l: &Layout<B>,
        spec: DeviceVec<B, f32>,
        planes: usize,
    ) -> Result<DeviceVec<B, f32>> {
        let grid = DeviceVec::zeros(backend, planes * l.grid_len())?;
        let plan = l.plan(backend, planes)?;
        backend.fft_inverse(&plan, spec.buffer(), grid.buffer())?;
        Ok(grid)
    }

    /// The output of `A` from the grid after the inverse transform.
    fn crop(
        &self,
        backend: &B,
        l: &Layout<B>,
        full: &DeviceVec<B, f32>,
        planes: usize,
    ) -> Result<DeviceVec<B, f32>> {
        crop_grids(backend, full, l.grid, l.out_dims, l.crop, planes)
    }

    /// The input-side image of the adjoint from the grid after the inverse transform: the fold.
    fn fold(
        &self,
        backend: &B,
        l: &Layout<B>,
        g: &DeviceVec<B, f32>,
        planes: usize,
    ) -> Result<DeviceVec<B, f32>> {
        let in_len = l.dims.iter().product::<usize>();
        let x = DeviceVec::zeros(backend, planes * in_len)?;
        let [d, h, w] = l.dims.map(|n| Arg::I32(n as i32));
        let [gd, gh, gw] = l.grid.map(|n| Arg::I32(n as i32));
        backend.launch(
            &kernels::CONV_FOLD,
            LaunchConfig::elementwise(planes * in_len),
            &[
                g.arg(),
                x.arg(),
                l.fold[0].0.arg(),
                l.fold[0].1.arg(),
                l.fold[1].0.arg(),
                l.fold[1].1.arg(),
                l.fold[2].0.arg(),
                l.fold[2].1.arg(),
                d,
                h,
                w,
                gd,
                gh,
                gw,
                Arg::I64(len_arg(planes)),
            ],
        )?;
        Ok(x)
    }

    /// Spectra of the `planes` planes of `x` (dims `dims`) on this convolution's grid; every
    /// convolution of a [`DeviceBlurStack`] accepts them.
    pub fn input_spectra(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        planes: usize,
        dims: [usize; 3],
    ) -> Result<DeviceVec<B, f32>> {
        let l = self.layout(backend, dims)?;
        expect_len("device blur", x, planes * dims.iter().product::<usize>())?;
        let xg = self.pad(backend, &l, x, &l.input_maps, dims, planes)?;
        self.transform(backend, &l, &xg, planes)
    }

    /// `A x` from [`Self::input_spectra`] of `x`.
    pub fn forward_from_spectra(
        &self,
        backend: &B,
        spectra: &DeviceVec<B, f32>,
        planes: usize,
        channels: usize,
        dims: [usize; 3],
    ) -> Result<DeviceVec<B, f32>> {
        let l = self.layout(backend, dims)?;
        let mut spec = spectra.duplicate(backend)?;
        self.multiply(backend, &l, &mut spec, planes, channels, false)?;
        let full = self.inverse(backend, &l, spec, planes)?;
        self.crop(backend, &l, &full, planes)
    }

    /// `A x` for `planes` planes of `dims`; plane `p` has channel `p % channels`.
    pub fn forward(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        planes: usize,
        channels: usize,
        dims: [usize; 3],
    ) -> Result<DeviceVec<B, f32>> {
        let l = self.layout(backend, dims)?;
        let mut spec = self.input_spectra(backend, x, planes, dims)?;
        self.multiply(backend, &l, &mut spec, planes, channels, false)?;
        let full = self.inverse(backend, &l, spec, planes)?;
        self.crop(backend, &l, &full, planes)
    }

    /// `conj(K̂)·Ŷ` of `y` (the output side of inputs of `dims`): the adjoint before its inverse
    /// transform.
    fn adjoint_spectra(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        planes: usize,
        channels: usize,
        dims: [usize; 3],
    ) -> Result<DeviceVec<B, f32>> {
        let l = self.layout(backend, dims)?;
        let out_len = l.out_dims.iter().product::<usize>();
        expect_len("device blur adjoint", y, planes * out_len)?;
        let g = self.pad(backend, &l, y, &l.output_maps, l.out_dims, planes)?;
        let mut spec = self.transform(backend, &l, &g, planes)?;
        self.multiply(backend, &l, &mut spec, planes, channels, true)?;
        Ok(spec)
    }

    /// The adjoint's image from (sums of) [`Self::adjoint_spectra`]: inverse transform and fold.
    fn adjoint_finish(
        &self,
        backend: &B,
        spec: DeviceVec<B, f32>,
        planes: usize,
        dims: [usize; 3],
    ) -> Result<DeviceVec<B, f32>> {
        let l = self.layout(backend, dims)?;
        let g = self.inverse(backend, &l, spec, planes)?;
        self.fold(backend, &l, &g, planes)
    }

    /// `Aᵀ y` for `planes` planes of the output of inputs of `dims`.
    pub fn adjoint(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        planes: usize,
        channels: usize,
        dims: [usize; 3],
    ) -> Result<DeviceVec<B, f32>> {
        let spec = self.adjoint_spectra(backend, y, planes, channels, dims)?;
        self.adjoint_finish(backend, spec, planes, dims)
    }
}

/// Images or volumes as the device operators see them: `count` planes (`B·C`) of `dims`, plane
/// `p` of channel `p % channels`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planes {
    pub count: usize,
    pub channels: usize,
    pub dims: [usize; 3],
    /// Volumes `(B, C, D, H, W)` (`D = 1` too), not images `(B, C, H, W)`: each operator takes
    /// one kind, as its CPU twin does, which `dims` alone cannot tell when `D = 1`.
    pub volumes: bool,
}

impl Planes {
    /// The planes of an image batch `(B, C, H, W)`.
    pub fn of_image([batch, channels, h, w]: [usize; 4]) -> Planes {
        Planes {
            count: batch * channels,
            channels,
            dims: [1, h, w],
            volumes: false,
        }
    }

    /// The planes of a volume batch `(B, C, D, H, W)`.
    pub fn of_volume([batch, channels, d, h, w]: [usize; 5]) -> Planes {
        Planes {
            count: batch * channels,
            channels,
            dims: [d, h, w],
            volumes: true,
        }
    }

    /// These planes when they are the kind operator `op` takes (`volumes`: a 3-D operator's),
    /// else the error its CPU twin would give, naming both.
    pub fn expect_kind(self, op: &str, volumes: bool) -> Result<Planes> {
        if self.volumes == volumes {
            return Ok(self);
        }
        let [d, h, w] = self.dims;
        let reason = match volumes {
            true => format!("a 3-D operator takes volumes (B, C, D, H, W), got images of {h}×{w}"),
            false => {
                format!("a 2-D operator takes images (B, C, H, W), got volumes of {d}×{h}×{w}")
            }
        };
        Err(Error::config(op, reason))
    }
}

/// What a fused stack's errors name.
const STACK: &str = "blur stack";

/// The weighted Gram convolution for the last weights asked for (their bits).
type GramCache<B> = Mutex<Option<(Vec<u32>, Arc<DeviceConv<B>>)>>;

/// The unit-weight Gram kernel's spectrum on an image grid itself, for `(a·ΣAᵢᵀAᵢ + I)⁻¹`: one
/// unscaled spectrum per kernel channel, and the FFT plans of that grid by batch size.
struct GramSpectrum<B: Backend> {
    kernels: usize,
    spectrum_len: usize,
    spectra: DeviceVec<B, f32>,
    plans: Mutex<HashMap<usize, Arc<B::Fft>>>,
}

/// [`GramSpectrum`]s by image dims (`None`: the kernels are too large for a Gram kernel).
type GramSpectra<B> = Mutex<HashMap<[usize; 3], Option<Arc<GramSpectrum<B>>>>>;

/// A stack of circular 2-D blurs of one kernel size on the device, with the CPU stack's shared
/// transforms (`physics::stack`, [`BlurFusion`]): `[Aᵢx]` from one transform of `x`; `Σ wᵢAᵢᵀyᵢ`
/// as spectra summed in operator order, then one inverse transform; `Σ wᵢAᵢᵀAᵢ x` as one
/// convolution with the weighted Gram kernel `Σ wᵢgᵢ` (the CPU's own kernel); the data-fidelity
/// gradient `Σ wᵢAᵢᵀ(Aᵢx − yᵢ)` as the difference of the two.
pub struct DeviceBlurStack<B: Backend> {
    ops: Vec<DeviceConv<B>>,
    fusion: BlurFusion,
    /// The weighted Gram convolution for the last weights asked for (their bits).
    gram: GramCache<B>,
    /// The unit-weight Gram kernel's spectrum by image dims.
    gram_spectra: GramSpectra<B>,
}

impl<B: Backend> DeviceBlurStack<B> {
    /// The device twin of a fused stack of `blurs`; an error unless they share a fusion key
    /// (circular padding, one kernel size and channel count).
    pub fn new(blurs: &[&Blur]) -> Result<Self> {
        let ops: Vec<&dyn LinearPhysics> = blurs.iter().map(|b| *b as &dyn LinearPhysics).collect();
        let fusion = BlurFusion::for_ops(&ops).ok_or_else(|| {
            Error::config(
                "physics",
                "a fused blur stack needs circular blurs of one kernel size",
            )
        })?;
        Ok(DeviceBlurStack {
            ops: blurs.iter().map(|b| DeviceConv::from_blur(b)).collect(),
            fusion,
            gram: Mutex::new(None),
            gram_spectra: Mutex::new(HashMap::new()),
        })
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn first(&self) -> Result<&DeviceConv<B>> {
        self.ops
            .first()
            .ok_or_else(|| Error::Internal("an empty blur stack".into()))
    }

    fn check_weights(&self, weights: &[f32]) -> Result<()> {
        if weights.len() != self.ops.len() {
            // The weights come from `fidelity`, one per operator: a mismatch is a bug.
            return Err(Error::Internal(format!(
                "data fidelity gradient: {} weights for a stack of {} operators",
                weights.len(),
                self.ops.len()
            )));
        }
        Ok(())
    }

    /// `[Aᵢx]` from one transform of `x`.
    pub fn forward(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<Vec<DeviceVec<B, f32>>> {
        let Planes {
            count,
            channels,
            dims,
            ..
        } = image.expect_kind(STACK, false)?;
        let spectra = self.first()?.input_spectra(backend, x, count, dims)?;
        self.ops
            .iter()
            .map(|op| op.forward_from_spectra(backend, &spectra, count, channels, dims))
            .collect()
    }

    /// `Σ wᵢAᵢᵀyᵢ`: the terms accumulated as spectra in operator order (as the CPU accumulates
    /// them: the first term scaled, the others added times their weight), one inverse transform.
    pub fn adjoint(
        &self,
        backend: &B,
        ys: &[DeviceVec<B, f32>],
        weights: &[f32],
        image: Planes,
    ) -> Result<DeviceVec<B, f32>> {
        self.check_weights(weights)?;
        let image = image.expect_kind(STACK, false)?;
        if ys.len() != self.ops.len() {
            return Err(Error::config(
                "physics",
                format!("{} measurements for {} operators", ys.len(), self.ops.len()),
            ));
        }
        let mut acc: Option<DeviceVec<B, f32>> = None;
        for ((op, y), &w) in self.ops.iter().zip(ys).zip(weights) {
            let mut term =
                op.adjoint_spectra(backend, y, image.count, image.channels, image.dims)?;
            match acc.as_mut() {
                None => {
                    super::vector::scale(backend, &mut term, w)?;
                    acc = Some(term);
                }
                Some(sum) => super::vector::axpy(backend, sum, w, &term)?,
            }
        }
        let acc = acc.ok_or_else(|| Error::Internal("an empty blur stack".into()))?;
        self.first()?
            .adjoint_finish(backend, acc, image.count, image.dims)
    }

    /// `Σ wᵢAᵢᵀAᵢ x` by the weighted Gram kernel; an error when the kernels are too large for
    /// one (the CPU then goes operator by operator).
    pub fn gram_apply(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        weights: &[f32],
        image: Planes,
    ) -> Result<DeviceVec<B, f32>> {
        self.check_weights(weights)?;
        let image = image.expect_kind(STACK, false)?;
        let bits: Vec<u32> = weights.iter().map(|w| w.to_bits()).collect();
        let conv = {
            let mut cached = self.gram.lock().unwrap_or_else(|p| p.into_inner());
            match cached.as_ref() {
                Some((b, conv)) if *b == bits => conv.clone(),
                _ => {
                    let gram = self.fusion.weighted_gram(weights).ok_or_else(|| {
                        Error::Unsupported(
                            "the blur kernels are too large for a Gram kernel on the device".into(),
                        )
                    })?;
                    let conv = Arc::new(DeviceConv::new(&gram));
                    *cached = Some((bits, conv.clone()));
                    conv
                }
            }
        };
        conv.forward(backend, x, image.count, image.channels, image.dims)
    }

    /// `(a·Σ AᵢᵀAᵢ + I)⁻¹ r` in closed form, as the CPU's `BlurFusion::shifted_normal_inverse`: the
    /// transform of `r` on the image grid itself (any size: the Gram kernel's inverse has no finite
    /// support, so no padded grid), a division by `n·(1 + a·Ĝ)`, the inverse transform. `None`
    /// when the kernels are too large for a Gram kernel (or `a < 0`): HQS then runs CG.
    pub fn shifted_normal_inverse(
        &self,
        backend: &B,
        r: &DeviceVec<B, f32>,
        a: f32,
        image: Planes,
    ) -> Result<Option<DeviceVec<B, f32>>> {
        if !(a >= 0.0 && a.is_finite()) {
            return Ok(None);
        }
        let Planes {
            count,
            channels,
            dims,
            ..
        } = image.expect_kind(STACK, false)?;
        let Some(g) = self.gram_spectrum(backend, dims)? else {
            return Ok(None);
        };
        let n = dims.iter().product::<usize>();
        expect_len("device (a·AᵀA + I)⁻¹", r, count * n)?;
        let plan = {
            let mut plans = g.plans.lock().unwrap_or_else(|p| p.into_inner());
            match plans.get(&count) {
                Some(plan) => plan.clone(),
                None => {
                    let plan = Arc::new(backend.fft_plan(dims, count)?);
                    plans.insert(count, plan.clone());
                    plan
                }
            }
        };
        let spec = DeviceVec::<B, f32>::zeros(backend, count * g.spectrum_len * 2)?;
        backend.fft_forward(&plan, r.buffer(), spec.buffer())?;
        backend.launch(
            &kernels::SPECTRUM_SHIFTED_INVERSE,
            LaunchConfig::elementwise(count * g.spectrum_len),
            &[
                spec.arg(),
                g.spectra.arg(),
                Arg::I64(len_arg(g.spectrum_len)),
                Arg::I32(int_arg("kernels", g.kernels)?),
                Arg::I32(int_arg("channels", channels.max(1))?),
                Arg::F32(a),
                Arg::I64(len_arg(n)),
                Arg::I64(len_arg(count)),
            ],
        )?;
        let out = DeviceVec::zeros(backend, count * n)?;
        backend.fft_inverse(&plan, spec.buffer(), out.buffer())?;
        Ok(Some(out))
    }

    /// The unit-weight Gram kernel's spectrum on the grid `dims`, made once per size.
    fn gram_spectrum(&self, backend: &B, dims: [usize; 3]) -> Result<Option<Arc<GramSpectrum<B>>>> {
        let mut cache = self.gram_spectra.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = cache.get(&dims) {
            return Ok(g.clone());
        }
        let spectrum = match self.fusion.weighted_gram(&vec![1.0; self.ops.len()]) {
            None => None,
            Some(gram) => {
                for n in dims {
                    int_arg("FFT grid side", n)?;
                }
                let kernels = gram.channels();
                let spectrum_len = dims[0] * dims[1] * (dims[2] / 2 + 1);
                let mut placed = Vec::with_capacity(kernels * dims.iter().product::<usize>());
                for ch in 0..kernels {
                    placed.extend(gram.placed_kernel(ch, dims, [true; 3]));
                }
                let placed = DeviceVec::from_host(backend, &placed)?;
                let spectra = DeviceVec::zeros(backend, kernels * spectrum_len * 2)?;
                let plan = backend.fft_plan(dims, kernels)?;
                backend.fft_forward(&plan, placed.buffer(), spectra.buffer())?;
                Some(Arc::new(GramSpectrum {
                    kernels,
                    spectrum_len,
                    spectra,
                    plans: Mutex::new(HashMap::new()),
                }))
            }
        };
        cache.insert(dims, spectrum.clone());
        Ok(spectrum)
    }

    /// The gradient of `Σ wᵢ/2‖Aᵢx − yᵢ‖²`: `(Σ wᵢgᵢ) ∗ x − Σ wᵢAᵢᵀyᵢ`.
    pub fn gradient(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        ys: &[DeviceVec<B, f32>],
        weights: &[f32],
        image: Planes,
    ) -> Result<DeviceVec<B, f32>> {
        let gram = self.gram_apply(backend, x, weights, image)?;
        let aty = self.adjoint(backend, ys, weights, image)?;
        super::vector::sub(backend, &gram, &aty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_maps_list_every_copy_in_order() {
        // A reflect-like map of 3 samples on 6 positions, with one zero.
        let map: AxisMap = vec![Some(1), Some(0), Some(1), Some(2), None, Some(1)];
        let (start, idx) = inverse_map(&map, 3).unwrap();
        assert_eq!(start, vec![0, 1, 4, 5]);
        assert_eq!(idx, vec![1, 0, 2, 5, 3]);
    }

    #[test]
    fn smooth_lengths_are_seven_smooth() {
        assert!(smooth(1) && smooth(2 * 3 * 5 * 7 * 8) && smooth(49));
        assert!(!smooth(11) && !smooth(683) && !smooth(2 * 13));
    }
}
