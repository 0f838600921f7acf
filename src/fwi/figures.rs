//! The figures of an inversion (rank 0): `ricker.png`, `observed_data.png`, `loss.png` and the
//! per-epoch panels `epoch_NNNN.png`. Drawn with `crate::plot` once it is available on this branch;
//! until then these write nothing and say so in the log.

use std::path::{Path, PathBuf};

use super::run::{EpochReport, FwiSummary};
use crate::error::Result;
use crate::physics::wave::{Gather, Real};

/// The per-epoch panel: true model, inverted model, gradient, source and receiver illumination.
pub fn epoch_panel(
    _out_dir: &Path,
    report: &EpochReport,
    _grid: (usize, usize, f64, f64),
    _truth: Option<&[f32]>,
    _model: &[f32],
    _gradient: &[f32],
    _illumination: Option<(&[f32], &[f32])>,
) -> Result<()> {
    tracing::debug!(
        "epoch {}: figures are not drawn in this build",
        report.epoch
    );
    Ok(())
}

/// `ricker.png`, `observed_data.png`, `loss.png`.
pub fn summary_figures<T: Real>(
    _out_dir: &Path,
    _summary: &FwiSummary,
    _wavelet: &[f64],
    _dt_s: f64,
    _observed: &[Gather<T>],
) -> Result<Vec<PathBuf>> {
    Ok(Vec::new())
}
