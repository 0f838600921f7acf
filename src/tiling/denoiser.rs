//! `TiledDenoiser`: any denoiser applied patch by patch — plan, extract in batches of
//! `max_batch_size` patches, denoise, assemble. The steps are public so the distributed layer can run
//! only the tiles a rank owns ([`TiledDenoiser::denoise_tiles`]) and assemble on one rank.

use super::plan::{Assembler, TilePlan};
use super::{TilingConfig, TilingStrategy};
use crate::denoise::Denoiser;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A denoiser that tiles its input (deepinv: a denoiser wrapped by `distribute` with a tiling
/// strategy, run on one process).
pub struct TiledDenoiser {
    pub inner: Box<dyn Denoiser>,
    pub strategy: Box<dyn TilingStrategy>,
    /// Patches per call of `inner`; `None` = all tiles of a batch group at once.
    pub max_batch_size: Option<usize>,
}

impl TiledDenoiser {
    pub fn new(
        inner: Box<dyn Denoiser>,
        strategy: Box<dyn TilingStrategy>,
        max_batch_size: Option<usize>,
    ) -> Self {
        TiledDenoiser {
            inner,
            strategy,
            max_batch_size,
        }
    }

    /// Wraps `inner` with the tiling of `config`.
    pub fn from_config(inner: Box<dyn Denoiser>, config: &TilingConfig) -> Result<Self> {
        Ok(Self::new(inner, config.build()?, config.max_batch_size))
    }

    /// The tile plan for an input of shape `(B, C, spatial…)`.
    pub fn plan(&self, x_shape: &[usize]) -> Result<TilePlan> {
        if !(3..=5).contains(&x_shape.len()) {
            return Err(Error::config(
                "tiling",
                format!("expected a (B, C, H, W) or (B, C, D, H, W) array, got shape {x_shape:?}"),
            ));
        }
        self.strategy.plan(&x_shape[2..])
    }

    /// Extracts, denoises and hands to `sink` the tiles `indices`, batch by batch: `sink(tiles,
    /// batch, secs)` gets a `(n·B, C, window…)` batch in [`TilePlan::extract`]'s order and the wall
    /// time of its denoiser call (the inner `denoise` alone: extraction and the sink not counted).
    pub fn process_batches(
        &self,
        plan: &TilePlan,
        x: &Tensor,
        indices: &[usize],
        sigma: f32,
        mut sink: impl FnMut(&[usize], Tensor, f64) -> Result<()>,
    ) -> Result<()> {
        for group in plan.batches(indices, self.max_batch_size) {
            let patches = plan.extract(x, &group)?;
            let t = std::time::Instant::now();
            let denoised = self.inner.denoise(&patches, sigma)?;
            let secs = t.elapsed().as_secs_f64();
            denoised.expect_shape(&format!("tiled {}", self.inner.name()), patches.shape())?;
            tracing::trace!(tiles = ?group, secs, "denoised a batch of patches");
            sink(&group, denoised, secs)?;
        }
        Ok(())
    }

    /// Denoises the tiles `indices` of `x` and returns `(tile index, patch (B, C, window…))` pairs,
    /// ready for [`TilePlan::assemble`] or an [`Assembler`] on another rank.
    pub fn denoise_tiles(
        &self,
        plan: &TilePlan,
        x: &Tensor,
        indices: &[usize],
        sigma: f32,
    ) -> Result<Vec<(usize, Tensor)>> {
        self.denoise_tiles_timed(plan, x, indices, sigma, &mut |_, _| {})
    }

    /// [`TiledDenoiser::denoise_tiles`], handing `on_batch` each batch's tiles and the seconds of
    /// its denoiser call.
    pub fn denoise_tiles_timed(
        &self,
        plan: &TilePlan,
        x: &Tensor,
        indices: &[usize],
        sigma: f32,
        on_batch: &mut dyn FnMut(&[usize], f64),
    ) -> Result<Vec<(usize, Tensor)>> {
        let batch = x.shape()[0];
        let mut out = Vec::with_capacity(indices.len());
        self.process_batches(plan, x, indices, sigma, |group, denoised, secs| {
            on_batch(group, secs);
            for (k, &i) in group.iter().enumerate() {
                out.push((i, denoised.batch_range(k * batch, (k + 1) * batch)));
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// [`Denoiser::denoise`], handing `on_batch` each batch's tiles and the seconds of its
    /// denoiser call.
    pub fn denoise_timed(
        &self,
        x: &Tensor,
        sigma: f32,
        on_batch: &mut dyn FnMut(&[usize], f64),
    ) -> Result<Tensor> {
        x.expect_rank("tiling", &[4, 5])?;
        let plan = self.plan(x.shape())?;
        let all: Vec<usize> = (0..plan.num_tiles()).collect();
        let mut asm = Assembler::new(&plan, x.shape())?;
        self.process_batches(&plan, x, &all, sigma, |group, denoised, secs| {
            on_batch(group, secs);
            asm.add_batch(group, &denoised)
        })?;
        asm.finish()
    }
}

impl Denoiser for TiledDenoiser {
    fn name(&self) -> String {
        format!("tiled({}, {})", self.inner.name(), self.strategy.name())
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        self.denoise_timed(x, sigma, &mut |_, _| {})
    }
}
