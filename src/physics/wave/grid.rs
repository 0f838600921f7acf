//! The padded simulation grid: the model plus the absorbing layers plus `fd_pad` guard cells on each
//! side (deepwave pads the model by `fd_pad + pml_width` with edge replication), and the regions
//! where the solver needs the C-PML terms.

/// Geometry of the padded grid (row-major, `nz × nx` cells).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grid {
    /// Padded size.
    pub nz: usize,
    pub nx: usize,
    /// Model size.
    pub mz: usize,
    pub mx: usize,
    /// Padded position of model cell `[0, 0]`.
    pub top: usize,
    pub left: usize,
    /// Stencil radius (`fd_pad`).
    pub r: usize,
    /// Absorbing layer widths `[top, bottom, left, right]` (top 0 with a free surface).
    pub pml: [usize; 4],
    pub free_surface: bool,
}

/// Rows (or columns) `[r, lo)` and `[hi, n − r)` of an axis need the PML terms, `[lo, hi)` do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Band {
    pub lo: usize,
    pub hi: usize,
}

impl Grid {
    pub fn new(mz: usize, mx: usize, r: usize, pml: [usize; 4], free_surface: bool) -> Grid {
        Grid {
            nz: mz + 2 * r + pml[0] + pml[1],
            nx: mx + 2 * r + pml[2] + pml[3],
            mz,
            mx,
            top: r + pml[0],
            left: r + pml[2],
            r,
            pml,
            free_surface,
        }
    }

    pub fn cells(&self) -> usize {
        self.nz * self.nx
    }

    /// Cells updated per time step (everything inside the guard cells).
    pub fn updated_cells(&self) -> usize {
        (self.nz - 2 * self.r) * (self.nx - 2 * self.r)
    }

    /// Flat padded index of model cell `[row, col]`.
    pub fn index(&self, cell: [usize; 2]) -> usize {
        (cell[0] + self.top) * self.nx + cell[1] + self.left
    }

    /// Where the C-PML terms are non-zero: the layer plus the reach of `reach` stencil radii into
    /// the interior (deepwave's `_pml_region`: 2 radii forward, 3 for the adjoint).
    fn band(n: usize, lo_width: usize, hi_width: usize, r: usize, reach: usize) -> Band {
        let lo = (lo_width + reach * r).min(n - r);
        let hi = (n.saturating_sub(hi_width + reach * r)).max(lo);
        Band { lo, hi }
    }

    pub fn forward_rows(&self) -> Band {
        Self::band(self.nz, self.pml[0], self.pml[1], self.r, 2)
    }
    pub fn forward_cols(&self) -> Band {
        Self::band(self.nx, self.pml[2], self.pml[3], self.r, 2)
    }
    pub fn adjoint_rows(&self) -> Band {
        Self::band(self.nz, self.pml[0], self.pml[1], self.r, 3)
    }
    pub fn adjoint_cols(&self) -> Band {
        Self::band(self.nx, self.pml[2], self.pml[3], self.r, 3)
    }

    /// The region where the forward update is the plain Laplacian (no absorbing terms): the wavefield
    /// there can be stepped backwards in time exactly. A face without a layer (the free surface)
    /// reaches the guard cells.
    pub fn lossless_region(&self) -> (Band, Band) {
        let (rows, cols) = (self.forward_rows(), self.forward_cols());
        let pick = |b: Band, widths: [usize; 2], n: usize| Band {
            lo: if widths[0] == 0 { self.r } else { b.lo },
            hi: if widths[1] == 0 { n - self.r } else { b.hi },
        };
        (
            pick(rows, [self.pml[0], self.pml[1]], self.nz),
            pick(cols, [self.pml[2], self.pml[3]], self.nx),
        )
    }

    /// The model padded to the grid by repeating its edge values.
    pub fn pad<T: Copy>(&self, model: &[T]) -> Vec<T> {
        let mut out = Vec::with_capacity(self.cells());
        for y in 0..self.nz {
            let my = y.saturating_sub(self.top).min(self.mz - 1);
            let row = &model[my * self.mx..(my + 1) * self.mx];
            for x in 0..self.nx {
                out.push(row[x.saturating_sub(self.left).min(self.mx - 1)]);
            }
        }
        out
    }

    /// The adjoint of [`Grid::pad`]: each padded cell's value is added to the model cell it copies.
    pub fn fold(&self, padded: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.mz * self.mx];
        for y in 0..self.nz {
            let my = y.saturating_sub(self.top).min(self.mz - 1);
            for x in 0..self.nx {
                let mx = x.saturating_sub(self.left).min(self.mx - 1);
                out[my * self.mx + mx] += padded[y * self.nx + x];
            }
        }
        out
    }

    /// The model region of a padded array.
    pub fn crop<T: Copy>(&self, padded: &[T]) -> Vec<T> {
        let mut out = Vec::with_capacity(self.mz * self.mx);
        for y in 0..self.mz {
            let start = (y + self.top) * self.nx + self.left;
            out.extend_from_slice(&padded[start..start + self.mx]);
        }
        out
    }
}

/// The free surface (deepwave's `boundary="free"`): the field is odd about the guard row `r − 1`,
/// which holds zero; the guard rows above it take the negated mirror image of the rows below.
pub(crate) fn fill_free_surface<T: crate::float::Float>(field: &mut [T], nx: usize, r: usize) {
    for g in 0..r {
        let (head, tail) = field.split_at_mut((g + 1) * nx);
        let dst = &mut head[g * nx..];
        if g + 1 == r {
            dst.fill(T::ZERO);
        } else {
            let src = 2 * r - 2 - g;
            let src = &tail[(src - g - 1) * nx..(src - g) * nx];
            for (d, s) in dst.iter_mut().zip(src) {
                *d = -*s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_is_the_adjoint_of_pad() {
        let g = Grid::new(3, 4, 2, [5, 3, 2, 6], false);
        assert_eq!((g.nz, g.nx), (3 + 4 + 8, 4 + 4 + 8));
        let m: Vec<f64> = (0..12).map(|i| (i * i) as f64 * 0.37 - 1.0).collect();
        let p: Vec<f64> = (0..g.cells())
            .map(|i| ((i * 7) % 13) as f64 - 6.0)
            .collect();
        let pm = g.pad(&m);
        let fp = g.fold(&p);
        let lhs: f64 = pm.iter().zip(&p).map(|(a, b)| a * b).sum();
        let rhs: f64 = m.iter().zip(&fp).map(|(a, b)| a * b).sum();
        assert!((lhs - rhs).abs() < 1e-9);
        assert_eq!(g.crop(&pm), m);
        assert_eq!(pm[g.index([1, 2])], m[6]);
    }

    #[test]
    fn bands_follow_deepwave() {
        let g = Grid::new(50, 60, 2, [10, 10, 10, 10], false);
        assert_eq!(
            g.forward_rows(),
            Band {
                lo: 14,
                hi: g.nz - 14
            }
        );
        assert_eq!(
            g.adjoint_cols(),
            Band {
                lo: 16,
                hi: g.nx - 16
            }
        );
        let f = Grid::new(50, 60, 2, [0, 10, 10, 10], true);
        assert_eq!(f.lossless_region().0.lo, 2);
    }

    #[test]
    fn free_surface_is_an_odd_mirror_about_the_last_guard_row() {
        let (nx, r) = (3, 4);
        let mut f: Vec<f64> = (0..10 * nx).map(|i| i as f64 + 1.0).collect();
        fill_free_surface(&mut f, nx, r);
        // Row 3 is the surface; rows 2, 1, 0 mirror rows 4, 5, 6 with the sign flipped.
        assert!(f[3 * nx..4 * nx].iter().all(|&v| v == 0.0));
        for (g, m) in [(2, 4), (1, 5), (0, 6)] {
            for x in 0..nx {
                assert_eq!(f[g * nx + x], -f[m * nx + x]);
            }
        }
    }
}
