//! Acquisition geometry: which grid cells each shot excites and records (Devito's
//! `AcquisitionGeometry`). Cells are `[row, col]` = `[depth index, x index]` of the model grid,
//! deepwave's `source_locations` / `receiver_locations` convention.

use crate::error::{Error, Result};

/// A grid cell `[row, col]`.
pub type Cell = [usize; 2];

/// One shot: its source cells (fired together with one wavelet each) and receiver cells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shot {
    pub sources: Vec<Cell>,
    pub receivers: Vec<Cell>,
}

/// All shots of a survey.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acquisition {
    pub shots: Vec<Shot>,
}

impl Acquisition {
    /// Checks that every cell lies in an `nz × nx` model and every shot has a source and a receiver.
    pub fn validate(&self, nz: usize, nx: usize) -> Result<()> {
        if self.shots.is_empty() {
            return Err(Error::config("acquisition", "there are no shots"));
        }
        for (s, shot) in self.shots.iter().enumerate() {
            if shot.sources.is_empty() {
                return Err(Error::config(
                    "acquisition",
                    format!("shot {s} has no source"),
                ));
            }
            if shot.receivers.is_empty() {
                return Err(Error::config(
                    "acquisition",
                    format!("shot {s} has no receiver"),
                ));
            }
            for (kind, cells) in [("source", &shot.sources), ("receiver", &shot.receivers)] {
                for (i, c) in cells.iter().enumerate() {
                    if c[0] >= nz || c[1] >= nx {
                        return Err(Error::config(
                            "acquisition",
                            format!(
                                "{kind} {i} of shot {s} is at cell {c:?}, outside the {nz}×{nx} model"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Number of shots.
    pub fn len(&self) -> usize {
        self.shots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shots.is_empty()
    }

    /// The largest number of receivers in a shot.
    pub fn max_receivers(&self) -> usize {
        self.shots
            .iter()
            .map(|s| s.receivers.len())
            .max()
            .unwrap_or(0)
    }
}

/// Evenly spaced cells: `count` cells from `first`, `step` apart (in cells, per axis; negative steps
/// allowed). Fails when a cell leaves the grid.
pub fn line(first: Cell, step: [i64; 2], count: usize, nz: usize, nx: usize) -> Result<Vec<Cell>> {
    (0..count)
        .map(|i| {
            let r = first[0] as i64 + step[0] * i as i64;
            let c = first[1] as i64 + step[1] * i as i64;
            if r < 0 || c < 0 || r as usize >= nz || c as usize >= nx {
                return Err(Error::config(
                    "acquisition",
                    format!(
                        "cell {i} of the line from {first:?} by {step:?} is at [{r}, {c}], outside the {nz}×{nx} model"
                    ),
                ));
            }
            Ok([r as usize, c as usize])
        })
        .collect()
}
