//! `tessera selftest --device cuda`: every device operation against its CPU twin on seeded inputs
//! of awkward sizes (odd, prime, a few pixels, kernels larger than the image), forward and adjoint,
//! plus dot tests of each adjoint computed on the device; a table of relative errors, failed above
//! [`TOLERANCE`].
//!
//! Written against [`Backend`], so the unit tests run the same checks on the CPU emulator.

use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::Device;
use super::backend::{Backend, DeviceVec};
use super::ops::blur_engine::{DeviceBlurStack, DeviceConv, Planes};
use super::ops::tomography::{DeviceTomography, DeviceTomography3d};
use super::ops::{tv, vector, wavelet};
use super::solve::{self, HostOperator};
use crate::denoise::Denoiser;
use crate::denoise::tv::TvDenoiser;
use crate::denoise::wavelet::{Threshold, WaveletDenoiser, WaveletKind};
use crate::error::{Error, Result};
use crate::fidelity::FidelityConfig;
use crate::linalg::deterministic_start;
use crate::optim::pnp::PnpConfig;
use crate::optim::space::HostView;
use crate::optim::{IterationReport, Monitor, Reconstruction};
use crate::physics::blur::{Blur, Blur3d, gaussian_kernel, gaussian_kernel_3d};
use crate::physics::blur_engine::Padding;
use crate::physics::tomography::{Angles, Tomography};
use crate::physics::tomography3d::Tomography3d;
use crate::physics::{LinearPhysics, Physics, Stack, StackedLinearPhysics};
use crate::tensor::Tensor;

/// The largest relative error a check may show (f32 arithmetic, as issue 28 asks).
pub const TOLERANCE: f64 = 1e-4;

/// How many cases to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The awkward small cases only (the CPU emulator's unit test).
    Quick,
    /// Those plus sizes that fill a GPU: grid-stride loops that wrap, grids of thousands of blocks
    /// (`tessera selftest`).
    Full,
}

/// One comparison: an operation on one case, its relative error.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `tomography adjoint`, `blur forward`, `dot`, …
    pub operation: String,
    /// The case: shape, sizes, options.
    pub case: String,
    /// `‖device − cpu‖ / ‖cpu‖` (or the dot test's `|⟨Ax,y⟩ − ⟨x,Aᵀy⟩| / (‖Ax‖‖y‖)`).
    pub rel_error: f64,
    /// Wall time of the device side of the check, seconds (compilation included the first time).
    pub device_secs: f64,
}

impl Check {
    /// Within tolerance (NaN never passes).
    pub fn passed(&self) -> bool {
        self.rel_error <= TOLERANCE
    }
}

/// The time of one operation at a size that fills a GPU (the full level only).
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    pub operation: String,
    pub case: String,
    /// Median over the repeats, after one warm-up call; the device is synchronised around each.
    pub median_ms: f64,
    /// Bytes of the operation's input and output, once each, over the median time: the least
    /// memory traffic it can have, as a rate to hold against the device's bandwidth.
    pub min_traffic_gb_per_s: f64,
    /// The CPU twin's time on this machine (whole algorithm runs), milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<f64>,
}

/// The result of a self-test run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The device, as the backend describes it.
    pub device: String,
    /// The tolerance every check was held to.
    pub tolerance: f64,
    pub checks: Vec<Check>,
    pub timings: Vec<Timing>,
}

impl Report {
    pub fn failures(&self) -> usize {
        self.checks.iter().filter(|c| !c.passed()).count()
    }

    /// The table printed by `tessera selftest`.
    pub fn table(&self) -> String {
        let op_w = self
            .checks
            .iter()
            .map(|c| c.operation.len())
            .max()
            .unwrap_or(9)
            .max(9);
        let case_w = self
            .checks
            .iter()
            .map(|c| c.case.chars().count())
            .max()
            .unwrap_or(4)
            .max(4);
        let mut out = format!("device: {}\n", self.device);
        let _ = writeln!(
            out,
            "{:op_w$}  {:case_w$}  {:>10}  {:>9}  result",
            "operation", "case", "rel. error", "device ms"
        );
        for c in &self.checks {
            let pad = case_w - c.case.chars().count();
            let _ = writeln!(
                out,
                "{:op_w$}  {}{}  {:>10.2e}  {:>9.2}  {}",
                c.operation,
                c.case,
                " ".repeat(pad),
                c.rel_error,
                c.device_secs * 1e3,
                if c.passed() { "ok" } else { "FAILED" }
            );
        }
        if !self.timings.is_empty() {
            let op_w = self
                .timings
                .iter()
                .map(|t| t.operation.len())
                .max()
                .unwrap_or(9)
                .max(9);
            let case_w = self
                .timings
                .iter()
                .map(|t| t.case.chars().count())
                .max()
                .unwrap_or(4);
            let _ = writeln!(
                out,
                "\n{:op_w$}  {:case_w$}  {:>9}  {:>13}",
                "timing", "case", "median ms", "min. GB/s"
            );
            for t in &self.timings {
                let pad = case_w - t.case.chars().count();
                let cpu = t.cpu_ms.map_or(String::new(), |cpu| {
                    format!("  CPU {cpu:.1} ms, {:.1}× faster", cpu / t.median_ms)
                });
                let _ = writeln!(
                    out,
                    "{:op_w$}  {}{}  {:>9.3}  {:>13.1}{cpu}",
                    t.operation,
                    t.case,
                    " ".repeat(pad),
                    t.median_ms,
                    t.min_traffic_gb_per_s
                );
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "{} checks, {} failed (tolerance {TOLERANCE:.0e})",
            self.checks.len(),
            self.failures()
        );
        out
    }
}

/// `‖a − b‖ / ‖b‖` in f64 (‖a‖ when `b` is zero); NaN anywhere gives NaN.
pub fn rel_error(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::NAN;
    }
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (*x as f64, *y as f64);
        diff += (x - y) * (x - y);
        norm += y * y;
    }
    if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    }
}

/// A device operation from one array to another (a forward or an adjoint).
type DeviceMap<'a, B> = &'a dyn Fn(&DeviceVec<B, f32>) -> Result<DeviceVec<B, f32>>;

struct Run<'a, B: Backend> {
    backend: &'a B,
    /// The same backend, for what keeps it in arrays (`Array`).
    shared: &'a Arc<B>,
    level: Level,
    checks: Vec<Check>,
    timings: Vec<Timing>,
}

/// Timed calls per operation (after one warm-up).
const TIMED_REPEATS: usize = 10;

impl<B: Backend> Run<'_, B> {
    /// Times `device`, then records its result against `cpu`.
    fn compare(
        &mut self,
        operation: &str,
        case: &str,
        cpu: &[f32],
        device: impl FnOnce() -> Result<Vec<f32>>,
    ) -> Result<()> {
        let start = Instant::now();
        let got = device()?;
        self.record(operation, case, rel_error(&got, cpu), start);
        Ok(())
    }

    fn record(&mut self, operation: &str, case: &str, rel_error: f64, start: Instant) {
        self.checks.push(Check {
            operation: operation.into(),
            case: case.into(),
            rel_error,
            device_secs: start.elapsed().as_secs_f64(),
        });
    }

    /// Times `op`, synchronising around every call; `bytes` is its input plus output.
    fn time(
        &mut self,
        operation: &str,
        case: &str,
        bytes: usize,
        op: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        op()?;
        self.backend.synchronize()?;
        let mut ms = Vec::with_capacity(TIMED_REPEATS);
        for _ in 0..TIMED_REPEATS {
            let start = Instant::now();
            op()?;
            self.backend.synchronize()?;
            ms.push(start.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        let median_ms = ms[ms.len() / 2];
        self.timings.push(Timing {
            operation: operation.into(),
            case: case.into(),
            median_ms,
            min_traffic_gb_per_s: bytes as f64 / (median_ms * 1e-3) / 1e9,
            cpu_ms: None,
        });
        Ok(())
    }

    /// The workloads issue 28 measures: tomography 2048² with 100 angles and a colour 4096² blur
    /// (one anisotropic Gaussian; a stack of 8 is 8 of these), forward and adjoint; the vector
    /// operations on a colour 4096² image.
    fn timings(&mut self) -> Result<()> {
        let b = self.backend;
        let op = Tomography::new(2048, &Angles::Count(100), false, false)?;
        let dev = DeviceTomography::new(b, &op)?;
        let x = DeviceVec::from_host(b, deterministic_start(&[1, 1, 2048, 2048], 1).data())?;
        let y = dev.forward(b, &x, 1)?;
        let case = format!("1×1×2048², 100 angles, {} detector cells", dev.n_det());
        let bytes = 4 * (x.len() + y.len());
        self.time("tomography forward", &case, bytes, &mut || {
            dev.forward(b, &x, 1).map(drop)
        })?;
        self.time("tomography adjoint", &case, bytes, &mut || {
            dev.adjoint(b, &y, 1).map(drop)
        })?;
        self.time("tomography fbp", &case, bytes, &mut || {
            dev.fbp(b, &y, 1).map(drop)
        })?;
        let image = Planes::of_image([1, 3, 4096, 4096]);
        let x = DeviceVec::from_host(b, deterministic_start(&[1, 3, 4096, 4096], 2).data())?;
        for padding in [Padding::Circular, Padding::Reflect] {
            let kernel = gaussian_kernel([3.0, 1.0], 30.0);
            let side = kernel.shape()[2];
            let blur = Blur::new(kernel, padding)?;
            let case = format!("1×3×4096², {side}×{side} gaussian, {}", padding.as_str());
            self.time_conv("blur", &case, &DeviceConv::from_blur(&blur), &x, image)?;
        }
        // A 3-D blur of a 192³ volume by a 13³ Gaussian (circular: a 7-smooth side, no padding).
        let volume = Planes::of_volume([1, 1, 192, 192, 192]);
        let v = DeviceVec::from_host(b, deterministic_start(&[1, 1, 192, 192, 192], 3).data())?;
        for padding in [Padding::Circular, Padding::Valid] {
            let blur = Blur3d::new(gaussian_kernel_3d([1.0, 1.0, 1.5]), padding)?;
            let case = format!("1×1×192³, 13³ gaussian, {}", padding.as_str());
            let dev = DeviceConv::from_blur3d(&blur);
            self.time_conv("blur3d", &case, &dev, &v, volume)?;
        }
        let mut y = x.duplicate(b)?;
        let case = "3·4096² values";
        self.time("axpy", case, 12 * x.len(), &mut || {
            vector::axpy(b, &mut y, 1e-3, &x)
        })?;
        self.time("dot", case, 8 * x.len(), &mut || {
            vector::dot(b, &x, &y).map(drop)
        })?;
        Ok(())
    }

    /// Times `dev`'s forward on `x` (planes `image`) and its adjoint on that forward's output.
    fn time_conv(
        &mut self,
        name: &str,
        case: &str,
        dev: &DeviceConv<B>,
        x: &DeviceVec<B, f32>,
        image: Planes,
    ) -> Result<()> {
        let b = self.backend;
        let Planes {
            count,
            channels,
            dims,
            ..
        } = image;
        let y = dev.forward(b, x, count, channels, dims)?;
        let bytes = 4 * (x.len() + y.len());
        self.time(&format!("{name} forward"), case, bytes, &mut || {
            dev.forward(b, x, count, channels, dims).map(drop)
        })?;
        self.time(&format!("{name} adjoint"), case, bytes, &mut || {
            dev.adjoint(b, &y, count, channels, dims).map(drop)
        })
    }

    fn upload(&self, t: &Tensor) -> Result<DeviceVec<B, f32>> {
        DeviceVec::from_host(self.backend, t.data())
    }

    fn vectors(&mut self) -> Result<()> {
        let b = self.backend;
        let mut sizes = vec![1usize, 255, 257, 4099];
        if self.level == Level::Full {
            // 2²⁴ + 43 values: more than 65 535 blocks of 256, so the grid-stride loops wrap.
            sizes.extend([65_537, 1_000_003, 16_777_259]);
        }
        for (k, n) in sizes.into_iter().enumerate() {
            let case = format!("n = {n}");
            let x = deterministic_start(&[n], 10 + k as u64);
            let y = deterministic_start(&[n], 20 + k as u64).scaled(3.0);
            let (dx, dy) = (self.upload(&x)?, self.upload(&y)?);

            let mut cpu = y.clone();
            cpu.axpy(-0.7, &x);
            self.compare("axpy", &case, cpu.data(), || {
                let mut d = dy.duplicate(b)?;
                vector::axpy(b, &mut d, -0.7, &dx)?;
                d.to_host(b)
            })?;

            self.compare("scale", &case, y.scaled(0.3).data(), || {
                let mut d = dy.duplicate(b)?;
                vector::scale(b, &mut d, 0.3)?;
                d.to_host(b)
            })?;

            self.compare("sub", &case, y.sub(&x).data(), || {
                vector::sub(b, &dy, &dx)?.to_host(b)
            })?;

            let mut cpu = y.clone();
            cpu.clamp(-1.0, 2.0);
            self.compare("clamp", &case, cpu.data(), || {
                let mut d = dy.duplicate(b)?;
                vector::clamp(b, &mut d, -1.0, 2.0)?;
                d.to_host(b)
            })?;

            let start = Instant::now();
            let dot = vector::dot(b, &dx, &dy)?;
            let err = (dot - x.dot(&y)).abs() / (x.norm() * y.norm()).max(f64::MIN_POSITIVE);
            self.record("dot", &case, err, start);

            let start = Instant::now();
            let norm = vector::norm(b, &dy)?;
            self.record("norm", &case, (norm - y.norm()).abs() / y.norm(), start);
        }
        Ok(())
    }

    /// Forward, adjoint and the device dot test of one linear operator and its device twin.
    fn linear(
        &mut self,
        name: &str,
        case: &str,
        op: &dyn LinearPhysics,
        x: &Tensor,
        forward: DeviceMap<'_, B>,
        adjoint: DeviceMap<'_, B>,
    ) -> Result<()> {
        let b = self.backend;
        let y_cpu = op.forward(x)?;
        let y = deterministic_start(y_cpu.shape(), 7);
        let (dx, dy) = (self.upload(x)?, self.upload(&y)?);
        self.compare(&format!("{name} forward"), case, y_cpu.data(), || {
            forward(&dx)?.to_host(b)
        })?;
        let x_cpu = op.adjoint(&y)?;
        self.compare(&format!("{name} adjoint"), case, x_cpu.data(), || {
            adjoint(&dy)?.to_host(b)
        })?;
        let start = Instant::now();
        let (ax, aty) = (forward(&dx)?, adjoint(&dy)?);
        let lhs = vector::dot(b, &ax, &dy)?;
        let rhs = vector::dot(b, &dx, &aty)?;
        let scale = vector::norm(b, &ax)? * vector::norm(b, &dy)?;
        self.record(
            &format!("{name} dot test"),
            case,
            (lhs - rhs).abs() / scale.max(f64::MIN_POSITIVE),
            start,
        );
        Ok(())
    }

    /// [`Self::linear`] of a blur's device twin `dev` on `x`, planes `image`, against the CPU's `op`.
    fn conv(
        &mut self,
        name: &str,
        case: &str,
        op: &dyn LinearPhysics,
        dev: &DeviceConv<B>,
        x: &Tensor,
        image: Planes,
    ) -> Result<()> {
        let b = self.backend;
        self.linear(
            name,
            case,
            op,
            x,
            &|x| dev.forward(b, x, image.count, image.channels, image.dims),
            &|y| dev.adjoint(b, y, image.count, image.channels, image.dims),
        )
    }

    fn tomography(&mut self) -> Result<()> {
        let mut cases: Vec<(usize, Angles, bool, bool, [usize; 2])> = vec![
            (2, Angles::Count(3), false, false, [1, 1]),
            (17, Angles::Count(7), false, false, [2, 1]),
            (31, Angles::Count(13), true, false, [1, 3]),
            (
                64,
                Angles::List(vec![0.0, 1.5, 44.9, 90.0, 133.7, 179.9]),
                false,
                true,
                [1, 1],
            ),
            (97, Angles::Count(41), false, false, [1, 2]),
        ];
        if self.level == Level::Full {
            cases.push((509, Angles::Count(100), false, false, [1, 1]));
            cases.push((256, Angles::Count(180), true, false, [2, 3]));
        }
        for (width, angles, circle, normalize, [batch, channels]) in cases {
            let op = Tomography::new(width, &angles, circle, normalize)?;
            let dev = DeviceTomography::new(self.backend, &op)?;
            let planes = batch * channels;
            let case = format!(
                "{batch}×{channels}×{width}², {} angles{}{}",
                op.angles_deg().len(),
                if circle { ", circle" } else { "" },
                if normalize { ", normalized" } else { "" }
            );
            let x = deterministic_start(&[batch, channels, width, width], width as u64);
            let b = self.backend;
            self.linear(
                "tomography",
                &case,
                &op,
                &x,
                &|x| dev.forward(b, x, planes),
                &|y| dev.adjoint(b, y, planes),
            )?;
            let y = op.forward(&x)?;
            let dy = self.upload(&y)?;
            self.compare("tomography fbp", &case, op.fbp(&y)?.data(), || {
                dev.fbp(b, &dy, planes)?.to_host(b)
            })?;
        }
        self.tomography3d()
    }

    /// 3-D tomography (every slice through the 2-D engine at once): odd widths, one slice, several
    /// volumes and channels, circle and normalize.
    fn tomography3d(&mut self) -> Result<()> {
        let mut cases: Vec<(usize, usize, bool, bool, [usize; 3])> = vec![
            (17, 7, false, false, [1, 1, 1]),
            (13, 5, true, true, [2, 1, 3]),
            (23, 11, false, true, [1, 2, 5]),
        ];
        if self.level == Level::Full {
            cases.push((127, 90, true, false, [1, 1, 64]));
        }
        for (width, angles, circle, normalize, [batch, channels, depth]) in cases {
            let op = Tomography3d::new(width, &Angles::Count(angles), circle, normalize)?;
            let dev = DeviceTomography3d::new(self.backend, &op)?;
            let volumes = batch * channels;
            let case = format!(
                "{batch}×{channels}×{depth}×{width}², {angles} angles{}{}",
                if circle { ", circle" } else { "" },
                if normalize { ", normalized" } else { "" }
            );
            let x = deterministic_start(&[batch, channels, depth, width, width], width as u64);
            let b = self.backend;
            self.linear(
                "tomography3d",
                &case,
                &op,
                &x,
                &|x| dev.forward(b, x, volumes, depth),
                &|y| dev.adjoint(b, y, volumes, depth),
            )?;
            let y = op.forward(&x)?;
            let dy = self.upload(&y)?;
            self.compare("tomography3d fbp", &case, op.fbp(&y)?.data(), || {
                dev.fbp(b, &dy, volumes, depth)?.to_host(b)
            })?;
        }
        Ok(())
    }

    fn blur(&mut self) -> Result<()> {
        let paddings = [
            Padding::Valid,
            Padding::Circular,
            Padding::Replicate,
            Padding::Reflect,
            Padding::Constant,
        ];
        // Kernels: an anisotropic Gaussian, an even-sized random kernel, one kernel per channel,
        // and a kernel larger than the image (the paddings repeat).
        let gaussian = gaussian_kernel([2.0, 1.0], 30.0);
        let even = deterministic_start(&[1, 1, 4, 6], 3);
        let per_channel = deterministic_start(&[1, 3, 5, 3], 4);
        let large = deterministic_start(&[1, 1, 9, 11], 5);
        let wide = gaussian_kernel([6.0, 2.5], 60.0);
        let mut cases: Vec<(&str, &Tensor, [usize; 4])> = vec![
            ("gaussian", &gaussian, [1, 3, 37, 29]),
            ("4×6", &even, [2, 1, 16, 15]),
            ("5×3 per channel", &per_channel, [1, 3, 23, 31]),
            ("9×11", &large, [1, 1, 5, 7]),
            ("4×6", &even, [1, 2, 64, 48]),
        ];
        if self.level == Level::Full {
            cases.push(("wide gaussian", &wide, [1, 3, 513, 511]));
            cases.push(("wide gaussian", &wide, [2, 1, 1024, 683]));
        }
        for (kernel_name, kernel, shape) in cases {
            for padding in paddings {
                let Ok(blur) = Blur::new(kernel.clone(), padding) else {
                    continue;
                };
                if blur.output_shape(&shape).is_err() {
                    // A valid convolution of an image smaller than its kernel.
                    continue;
                }
                let [batch, channels, h, w] = shape;
                let case = format!(
                    "{kernel_name} on {batch}×{channels}×{h}×{w}, {}",
                    padding.as_str()
                );
                let x = deterministic_start(&shape, (h * w) as u64);
                let dev = DeviceConv::from_blur(&blur);
                self.conv("blur", &case, &blur, &dev, &x, Planes::of_image(shape))?;
            }
        }
        self.blur3d()
    }

    /// 3-D blurs ([`blur3d_cases`]).
    fn blur3d(&mut self) -> Result<()> {
        for (kernel_name, kernel, shape) in blur3d_cases(self.level) {
            for padding in [Padding::Valid, Padding::Circular] {
                let blur = Blur3d::new(kernel.clone(), padding)?;
                if blur.output_shape(&shape).is_err() {
                    // A valid convolution of a volume smaller than its kernel.
                    continue;
                }
                let [batch, channels, d, h, w] = shape;
                let case = format!(
                    "{kernel_name} on {batch}×{channels}×{d}×{h}×{w}, {}",
                    padding.as_str()
                );
                let x = deterministic_start(&shape, (d * h * w) as u64);
                let dev = DeviceConv::from_blur3d(&blur);
                self.conv("blur3d", &case, &blur, &dev, &x, Planes::of_volume(shape))?;
            }
        }
        Ok(())
    }
}

impl<B: Backend> Run<'_, B> {
    /// A fused stack of circular blurs (one kernel size): forward, `Σ wᵢAᵢᵀyᵢ`, the Gram product
    /// `Σ AᵢᵀAᵢx`, the data-fidelity gradient, and the stack's dot test, against `physics::Stack`.
    fn blur_stack(&mut self) -> Result<()> {
        let b = self.backend;
        // Four anisotropic Gaussians of one size (the side follows the largest σ), and weights.
        let kernels: Vec<Tensor> = [0.0f32, 45.0, 90.0, 135.0]
            .iter()
            .zip([1.0f32, 0.7, 1.3, 0.5])
            .map(|(&angle, minor)| gaussian_kernel([2.0, minor], angle))
            .collect();
        let weights = [1.0f32, 0.5, 2.0, 0.25];
        for shape in [[1, 3, 37, 29], [2, 1, 32, 48]] {
            let [batch, channels, h, w] = shape;
            let image = Planes::of_image(shape);
            let case = format!("4 gaussians on {batch}×{channels}×{h}×{w}, circular");
            let cpu = Stack::new(
                kernels
                    .iter()
                    .map(|k| {
                        Blur::new(k.clone(), Padding::Circular)
                            .map(|b| Box::new(b) as Box<dyn LinearPhysics>)
                    })
                    .collect::<Result<Vec<_>>>()?,
            )?;
            let blurs = kernels
                .iter()
                .map(|k| Blur::new(k.clone(), Padding::Circular))
                .collect::<Result<Vec<_>>>()?;
            let dev = DeviceBlurStack::<B>::new(&blurs.iter().collect::<Vec<_>>())?;
            let x = deterministic_start(&shape, 11);
            let ys: Vec<Tensor> = (0..kernels.len())
                .map(|i| deterministic_start(&shape, 12 + i as u64))
                .collect();
            let dx = self.upload(&x)?;
            let dys = ys
                .iter()
                .map(|y| self.upload(y))
                .collect::<Result<Vec<_>>>()?;
            let flat = |ts: &[Tensor]| {
                ts.iter()
                    .flat_map(|t| t.data().to_vec())
                    .collect::<Vec<_>>()
            };
            let download_all = |vs: Vec<DeviceVec<B, f32>>| -> Result<Vec<f32>> {
                let mut out = Vec::new();
                for v in vs {
                    out.extend(v.to_host(b)?);
                }
                Ok(out)
            };
            self.compare(
                "blur stack forward",
                &case,
                &flat(&cpu.forward(&x)?),
                || download_all(dev.forward(b, &dx, image)?),
            )?;
            let ones = vec![1.0; kernels.len()];
            self.compare(
                "blur stack adjoint",
                &case,
                cpu.adjoint(&ys)?.data(),
                || dev.adjoint(b, &dys, &ones, image)?.to_host(b),
            )?;
            self.compare(
                "blur stack AᵀA",
                &case,
                cpu.adjoint_forward(&x)?.data(),
                || dev.gram_apply(b, &dx, &ones, image)?.to_host(b),
            )?;
            // HQS's closed-form data step, at a DPIR-sized `γ·w` (37 and 29 are primes: the
            // image grid itself, no padded one).
            let a = 40.0;
            let cpu_inverse = cpu.shifted_normal_inverse(&x, a)?.ok_or_else(|| {
                Error::Internal("a fused stack of small kernels has a Gram kernel".into())
            })?;
            self.compare(
                "blur stack (a·AᵀA + I)⁻¹",
                &case,
                cpu_inverse.data(),
                || {
                    dev.shifted_normal_inverse(b, &dx, a, image)?
                        .ok_or_else(|| Error::Internal("no Gram kernel on the device".into()))?
                        .to_host(b)
                },
            )?;
            let gradient = cpu.residual_adjoint(&x, &ys, &weights)?;
            self.compare("blur stack gradient", &case, gradient.data(), || {
                dev.gradient(b, &dx, &dys, &weights, image)?.to_host(b)
            })?;
            let start = Instant::now();
            let ax = dev.forward(b, &dx, image)?;
            let aty = dev.adjoint(b, &dys, &ones, image)?;
            let (mut lhs, mut norms) = (0.0, (0.0, 0.0));
            for (a, y) in ax.iter().zip(&dys) {
                lhs += vector::dot(b, a, y)?;
                norms.0 += vector::dot(b, a, a)?;
                norms.1 += vector::dot(b, y, y)?;
            }
            let rhs = vector::dot(b, &dx, &aty)?;
            let scale = (norms.0 * norms.1).sqrt().max(f64::MIN_POSITIVE);
            self.record(
                "blur stack dot test",
                &case,
                (lhs - rhs).abs() / scale,
                start,
            );
        }
        Ok(())
    }

    /// Issue 28's blur-stack workload: 8 anisotropic Gaussians on a colour 4096² image.
    fn stack_timings(&mut self) -> Result<()> {
        let b = self.backend;
        let kernels: Vec<Tensor> = (0..8)
            .map(|i| gaussian_kernel([3.0, 1.0 + 0.2 * i as f32], 22.5 * i as f32))
            .collect();
        let blurs = kernels
            .iter()
            .map(|k| Blur::new(k.clone(), Padding::Circular))
            .collect::<Result<Vec<_>>>()?;
        let dev = DeviceBlurStack::<B>::new(&blurs.iter().collect::<Vec<_>>())?;
        let image = Planes::of_image([1, 3, 4096, 4096]);
        let x = DeviceVec::from_host(b, deterministic_start(&[1, 3, 4096, 4096], 4).data())?;
        let ys = dev.forward(b, &x, image)?;
        let weights = vec![1.0; 8];
        let side = kernels[0].shape()[2];
        let case = format!("8 gaussians {side}×{side} on 1×3×4096², circular");
        let image_bytes = 4 * x.len();
        self.time("blur stack forward", &case, 9 * image_bytes, &mut || {
            dev.forward(b, &x, image).map(drop)
        })?;
        self.time("blur stack adjoint", &case, 9 * image_bytes, &mut || {
            dev.adjoint(b, &ys, &weights, image).map(drop)
        })?;
        self.time("blur stack gradient", &case, 10 * image_bytes, &mut || {
            dev.gradient(b, &x, &ys, &weights, image).map(drop)
        })?;
        Ok(())
    }

    /// PnP with TV, `iterations` iterations (TV run to its cap), on the host stack `host` and on
    /// the device twins `ops` of its operators, from the measurements of `truth`: the final images
    /// and each run's wall time, seconds (the device's synchronised).
    fn pnp_pair(
        &self,
        host: &Stack,
        ops: &[HostOperator<'_>],
        truth: &Tensor,
        iterations: usize,
        step: Option<f32>,
    ) -> Result<[(Reconstruction, f64); 2]> {
        let ys = host.forward(truth)?;
        let fidelity = FidelityConfig::default();
        let tv = TvDenoiser {
            n_it_max: PNP_TV_ITERATIONS,
            crit: 0.0,
            tau: 0.01,
            rho: 1.99,
        };
        let cfg = PnpConfig {
            iterations,
            step,
            ..PnpConfig::default()
        };
        let monitor = Monitor {
            ground_truth: None,
            data_range: 1.0,
            ssim_every: 0,
        };
        let mut go_on = |_: &IterationReport, _: &Tensor| ControlFlow::Continue(());
        let start = Instant::now();
        let cpu = crate::optim::pnp(
            host,
            &fidelity,
            &tv as &dyn Denoiser,
            &ys,
            truth.shape(),
            &cfg,
            &monitor,
            &mut go_on,
        )?;
        let cpu_secs = start.elapsed().as_secs_f64();
        self.backend.synchronize()?;
        let start = Instant::now();
        let denoiser = solve::DeviceDenoiser::Tv(tv);
        let problem = solve::PnpProblem {
            host_physics: host,
            ops,
            fidelity: &fidelity,
            denoiser: &denoiser,
            ys: &ys,
            x_shape: truth.shape(),
            cfg: &cfg,
            monitor: &monitor,
            ranks: None,
        };
        // The iterate stays on the device: no preview is asked for.
        let device = solve::pnp(
            self.shared,
            &problem,
            &mut |_: &IterationReport, _: &dyn HostView| ControlFlow::Continue(()),
        )?;
        self.backend.synchronize()?;
        let device_secs = start.elapsed().as_secs_f64();
        Ok([(cpu, cpu_secs), (device, device_secs)])
    }

    /// Whole PnP+TV runs with every iteration on the device, against the CPU's: 2-D tomography and
    /// a fused colour blur stack; and the TV prox alone.
    fn pnp_runs(&mut self) -> Result<()> {
        let b = self.backend;
        let start = Instant::now();
        let y = deterministic_start(&[1, 3, 23, 17], 31);
        let prox = TvDenoiser {
            n_it_max: 40,
            crit: 1e-4,
            tau: 0.01,
            rho: 1.99,
        };
        let cpu = prox.denoise(&y, 0.2)?;
        let (dev, _) = tv::tv_prox(b, &prox, &self.upload(&y)?, 3, &[23, 17], 0.2)?;
        self.record(
            "tv prox",
            "1×3×23×17, 40 iterations",
            rel_error(&dev.to_host(b)?, cpu.data()),
            start,
        );

        // Wavelet thresholding: odd sides (each level extends them), a volume, db8 on an axis
        // shorter than its filter.
        for (shape, levels) in [(&[1usize, 3, 23, 17][..], 3), (&[1, 1, 9, 12, 7][..], 2)] {
            let start = Instant::now();
            let y = deterministic_start(shape, 37);
            let w = WaveletDenoiser {
                wavelet: WaveletKind::Db8,
                levels,
                threshold: Threshold::Soft,
            };
            let cpu = w.denoise(&y, 0.1)?;
            let planes = shape[0] * shape[1];
            let dev = wavelet::wavelet_denoise(b, &w, &self.upload(&y)?, planes, &shape[2..], 0.1)?;
            let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
            self.record(
                "wavelet db8 soft",
                &format!("{}, {levels} levels", dims.join("×")),
                rel_error(&dev.to_host(b)?, cpu.data()),
                start,
            );
        }

        let width = 33;
        let angles = Angles::Count(21);
        let truth = crate::samples::generate(crate::samples::Sample::SheppLogan, &[width], 0)?;
        let op = Tomography::new(width, &angles, false, false)?;
        let host = Stack::new(vec![Box::new(Tomography::new(
            width, &angles, false, false,
        )?)])?;
        self.pnp_run(
            "tomography 33², 21 angles",
            &host,
            &[HostOperator::Tomography(&op)],
            &truth,
        )?;

        let truth = crate::samples::natural_image(27, 20, 5);
        let (blurs, host) = gaussian_stack(3, 1.6)?;
        let ops: Vec<HostOperator> = blurs.iter().map(HostOperator::Blur).collect();
        self.pnp_run("3 circular gaussians on 1×3×27×20", &host, &ops, &truth)?;

        // 3-D blurs, a valid and a circular one, on a 13³ volume (3-D TV).
        let truth = crate::samples::shepp_logan_3d(13);
        let (blurs, host) = host_stack(|| {
            [Padding::Valid, Padding::Circular]
                .into_iter()
                .map(|p| Blur3d::new(gaussian_kernel_3d([0.6, 0.4, 0.5]), p))
                .collect()
        })?;
        let ops: Vec<HostOperator> = blurs.iter().map(HostOperator::Blur3d).collect();
        self.pnp_run(
            "7³ gaussians on 1×1×13³, valid and circular",
            &host,
            &ops,
            &truth,
        )
    }

    /// A [`Self::pnp_pair`] of 5 iterations recorded as a `pnp+tv run` of `case`: the device's
    /// result against the CPU's.
    fn pnp_run(
        &mut self,
        case: &str,
        host: &Stack,
        ops: &[HostOperator<'_>],
        truth: &Tensor,
    ) -> Result<()> {
        const ITERATIONS: usize = 5;
        let start = Instant::now();
        let [(cpu, _), (dev, _)] = self.pnp_pair(host, ops, truth, ITERATIONS, None)?;
        self.record(
            "pnp+tv run",
            &format!("{case}, {ITERATIONS} iterations"),
            rel_error(dev.x.data(), cpu.x.data()),
            start,
        );
        Ok(())
    }

    /// Issue 28's workloads as whole device-resident PnP+TV runs against the CPU's on this machine
    /// (3 iterations, TV [`PNP_TV_ITERATIONS`] iterations each, a fixed step so that neither run
    /// spends time deriving one): tomography 2048² with 100 angles, and 8 Gaussians on a colour
    /// 4096² image. Their results are checked against each other too.
    fn pnp_timings(&mut self) -> Result<()> {
        const ITERATIONS: usize = 3;
        let truth = deterministic_start(&[1, 1, 2048, 2048], 41);
        let angles = Angles::Count(100);
        let op = Tomography::new(2048, &angles, false, false)?;
        let host = Stack::new(vec![Box::new(Tomography::new(
            2048, &angles, false, false,
        )?)])?;
        let case = format!("tomography 1×1×2048², 100 angles, TV {PNP_TV_ITERATIONS} its");
        let start = Instant::now();
        let [(cpu, cpu_secs), (dev, dev_secs)] = self.pnp_pair(
            &host,
            &[HostOperator::Tomography(&op)],
            &truth,
            ITERATIONS,
            Some(1e-6),
        )?;
        let error = rel_error(dev.x.data(), cpu.x.data());
        self.record("pnp+tv run", &case, error, start);
        let run = (cpu_secs, dev_secs, ITERATIONS);
        self.record_run("pnp+tv iteration", &case, run, 4 * truth.numel());

        let truth = deterministic_start(&[1, 3, 4096, 4096], 42);
        let (blurs, host) = gaussian_stack(8, 3.0)?;
        let ops: Vec<HostOperator> = blurs.iter().map(HostOperator::Blur).collect();
        let case = format!("8 gaussians on 1×3×4096², circular, TV {PNP_TV_ITERATIONS} its");
        let start = Instant::now();
        let [(cpu, cpu_secs), (dev, dev_secs)] =
            self.pnp_pair(&host, &ops, &truth, ITERATIONS, Some(0.1))?;
        let error = rel_error(dev.x.data(), cpu.x.data());
        self.record("pnp+tv run", &case, error, start);
        let run = (cpu_secs, dev_secs, ITERATIONS);
        self.record_run("pnp+tv iteration", &case, run, 4 * truth.numel());
        Ok(())
    }

    /// A timing row for whole runs `(cpu_secs, device_secs, iterations)`: the device's time per
    /// iteration, the CPU's beside it; the traffic figure counts the image once in and once out
    /// per iteration.
    fn record_run(
        &mut self,
        operation: &str,
        case: &str,
        (cpu_secs, device_secs, iterations): (f64, f64, usize),
        image_bytes: usize,
    ) {
        let median_ms = device_secs * 1e3 / iterations as f64;
        self.timings.push(Timing {
            operation: operation.into(),
            case: case.into(),
            median_ms,
            min_traffic_gb_per_s: 2.0 * image_bytes as f64 / (median_ms * 1e-3) / 1e9,
            cpu_ms: Some(cpu_secs * 1e3 / iterations as f64),
        });
    }
}

/// The 3-D blurs' cases of `level`, each for both paddings (valid, circular; a valid one of a
/// volume smaller than its kernel is skipped): (the kernel's name, the kernel, the volume's shape).
/// Odd sides, `D = 1`, an axis of one voxel, a valid output one voxel thick, kernels larger than
/// the volume (circular wraps), an even kernel, one kernel per channel, `B·C > 1`.
pub(crate) fn blur3d_cases(level: Level) -> Vec<(&'static str, Tensor, [usize; 5])> {
    let gaussian = gaussian_kernel_3d([0.5, 0.8, 0.6]);
    let even = deterministic_start(&[1, 1, 3, 4, 2], 6);
    let per_channel = deterministic_start(&[1, 2, 3, 3, 3], 7);
    let flat = deterministic_start(&[1, 1, 1, 3, 5], 8);
    let mut cases = vec![
        ("7³ gaussian", gaussian.clone(), [1, 1, 9, 13, 11]),
        ("3×4×2", even, [2, 1, 5, 7, 6]),
        ("3³ per channel", per_channel, [1, 2, 3, 5, 4]),
        ("1×3×5", flat.clone(), [1, 3, 1, 9, 8]),
        ("1×3×5", flat, [2, 2, 4, 1, 6]),
        ("7³ gaussian", gaussian.clone(), [1, 1, 1, 6, 5]),
    ];
    if level == Level::Full {
        cases.push(("7³ gaussian", gaussian, [1, 2, 61, 127, 129]));
    }
    cases
}

/// TV iterations per denoiser call in the self-test's PnP runs (run to the cap: no early stop).
const PNP_TV_ITERATIONS: usize = 20;

/// `count` circular Gaussians of σ = (`sigma_px`, 1 + 0.2·i) at 22.5·i degrees, as device-twin
/// sources and as the CPU's stack: fused (one kernel size) while `sigma_px` ≥ 1 + 0.2·(count − 1).
fn gaussian_stack(count: usize, sigma_px: f32) -> Result<(Vec<Blur>, Stack)> {
    host_stack(|| {
        (0..count)
            .map(|i| {
                let kernel = gaussian_kernel([sigma_px, 1.0 + 0.2 * i as f32], 22.5 * i as f32);
                Blur::new(kernel, Padding::Circular)
            })
            .collect()
    })
}

/// The operators `make` builds, for their device twins, and the CPU's stack of another set of
/// them (a stack owns its operators).
fn host_stack<T: LinearPhysics + 'static>(
    make: impl Fn() -> Result<Vec<T>>,
) -> Result<(Vec<T>, Stack)> {
    let host = Stack::new(
        make()?
            .into_iter()
            .map(|op| Box::new(op) as Box<dyn LinearPhysics>)
            .collect(),
    )?;
    Ok((make()?, host))
}

/// Runs every check of `level` on `backend`.
pub fn run<B: Backend>(backend: &Arc<B>, level: Level) -> Result<Report> {
    let mut run = Run {
        backend: backend.as_ref(),
        shared: backend,
        level,
        checks: Vec::new(),
        timings: Vec::new(),
    };
    run.vectors()?;
    run.tomography()?;
    run.blur()?;
    run.blur_stack()?;
    run.pnp_runs()?;
    if level == Level::Full {
        run.timings()?;
        run.stack_timings()?;
        run.pnp_timings()?;
    }
    backend.synchronize()?;
    Ok(Report {
        device: backend.describe(),
        tolerance: TOLERANCE,
        checks: run.checks,
        timings: run.timings,
    })
}

/// `Ok` for a GPU; the CPU is not a device to test against itself.
pub fn requires_gpu(device: Device) -> Result<()> {
    if device.is_cuda() {
        return Ok(());
    }
    Err(Error::config(
        "device",
        "the self-test compares a GPU with the CPU: give --device cuda or cuda:N",
    ))
}

/// What a build without the `cuda` feature answers when asked for a GPU.
pub fn no_gpu_support(device: Device) -> Error {
    Error::Device {
        device: device.to_string(),
        reason: "this tessera was built without GPU support; rebuild with \
                 `cargo build --release --features cuda` (docs/GPU.md)"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::emulator::Emulator;

    /// The whole self-test, on the kernels compiled for the CPU: every check within tolerance.
    #[test]
    fn selftest_passes_on_the_emulator() {
        let report = run(&Arc::new(Emulator::new().unwrap()), Level::Quick).unwrap();
        println!("{}", report.table());
        assert!(report.checks.len() > 50);
        assert_eq!(report.failures(), 0, "{}", report.table());
    }

    /// The CPU is refused as a device to test; a build without GPU support says how to get it.
    #[test]
    fn the_cpu_is_refused_and_a_missing_feature_named() {
        let e = requires_gpu(Device::Cpu).unwrap_err().to_string();
        assert!(e.contains("--device cuda"), "{e}");
        assert!(requires_gpu(Device::Cuda(Some(1))).is_ok());
        let e = no_gpu_support(Device::Cuda(None)).to_string();
        assert!(
            e.starts_with("cuda: ") && e.contains("--features cuda"),
            "{e}"
        );
    }

    #[test]
    fn rel_error_catches_nan_and_differences() {
        assert_eq!(rel_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!(rel_error(&[f32::NAN], &[1.0]).is_nan());
        assert!(
            !Check {
                operation: "x".into(),
                case: String::new(),
                rel_error: f64::NAN,
                device_secs: 0.0
            }
            .passed()
        );
        assert!((rel_error(&[1.0, 1.0], &[1.0, 0.0]) - 1.0).abs() < 1e-12);
    }
}
