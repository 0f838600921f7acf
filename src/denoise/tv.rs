//! Total-variation denoiser, deepinv's `TVDenoiser`: the prox of isotropic TV,
//! `argmin_u ½‖u − y‖² + ths·Σ_p ‖(∇u)_p‖₂`, with `ths` the call's σ.
//!
//! Solved as deepinv does, by Condat's over-relaxed Chambolle–Pock iteration (L. Condat, "A primal–dual
//! splitting method for convex optimization…", JOTA 2013), with primal step τ, dual step
//! `σ_d = 1/(τ·2^(ndim−1))` (ndim = 4 for images, 5 for volumes; 8 and 16 bound ‖∇‖² = 8 and 12) and
//! relaxation ρ:
//!
//! ```text
//! x  = (x₂ − τ∇ᵀu₂ + τy) / (1 + τ)
//! u  = proj_{‖·‖₂ ≤ ths}(u₂ + σ_d ∇(2x − x₂))     (per pixel, over the gradient's components)
//! x₂ ← x₂ + ρ(x − x₂),  u₂ ← u₂ + ρ(u − u₂)
//! ```
//!
//! stopping after `n_it_max` iterations or when `‖Δx₂‖/‖x₂‖ < crit` (after the second iteration).
//! ∇ is forward differences with a zero last difference (Neumann boundary), in 2-D or 3-D.
//!
//! Differences from deepinv: each plane (batch item, channel) stops on its own criterion (deepinv
//! measures the whole batch), and every call starts cold (x₂ = y, u₂ = 0): deepinv warm-starts from
//! the previous call, which would make results depend on call order, tiling and rank count.

use rayon::prelude::*;

use super::{Denoiser, check_sigma, map_planes};
use crate::error::Result;
use crate::tensor::Tensor;

/// The TV prox; fields keep deepinv's names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TvDenoiser {
    /// Maximum number of iterations.
    pub n_it_max: usize,
    /// Relative-change stopping criterion.
    pub crit: f32,
    /// Primal step size τ.
    pub tau: f32,
    /// Over-relaxation ρ ∈ (0, 2).
    pub rho: f32,
}

impl Denoiser for TvDenoiser {
    fn name(&self) -> String {
        format!("tv({} iterations)", self.n_it_max)
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        check_sigma("tv", sigma)?;
        if sigma == 0.0 {
            // The prox of the zero function; deepinv would divide by zero here.
            x.expect_rank("tv", &[4, 5])?;
            return Ok(x.clone());
        }
        map_planes("tv", x, |input, out, dims| {
            self.solve_plane(input, out, dims, sigma);
        })
    }
}

impl TvDenoiser {
    /// Runs the iteration on one plane; returns the number of iterations done.
    pub(crate) fn solve_plane(
        &self,
        y: &[f32],
        out: &mut [f32],
        dims: &[usize],
        ths: f32,
    ) -> usize {
        let axes = dims.len();
        let [d, h, w] = match *dims {
            [h, w] => [1, h, w],
            [d, h, w] => [d, h, w],
            _ => unreachable!("map_planes only passes 2-D or 3-D planes"),
        };
        // Steps along the transformed axes (D only for volumes), in the order of the dual components.
        let grid = Grid::new([d, h, w], axes);
        let tau = self.tau;
        let sigma_dual = 1.0 / (tau * (1u32 << (axes + 1)) as f32);
        let rho = self.rho;

        let n = y.len();
        let x2 = out;
        x2.copy_from_slice(y);
        let mut xbar = vec![0.0f32; n];
        let mut u2 = vec![0.0f32; n * axes];
        let min_rows = (1usize << 14).div_ceil(w).max(1);
        let mut done = 0;
        for it in 0..self.n_it_max {
            done = it + 1;
            // Primal step, its extrapolation 2x − x₂, and the relaxation of x₂, pixel by pixel.
            let (diff_sq, norm_sq) = x2
                .par_chunks_mut(w)
                .zip(xbar.par_chunks_mut(w))
                .enumerate()
                .with_min_len(min_rows)
                .map(|(row, (x2_row, xbar_row))| {
                    let (mut diff, mut norm) = (0.0f64, 0.0f64);
                    for i in 0..w {
                        let p = row * w + i;
                        let pos = grid.position(row, i);
                        let x_old = x2_row[i];
                        let x = (x_old - tau * grid.grad_adjoint(&u2, p, pos) + tau * y[p])
                            / (1.0 + tau);
                        xbar_row[i] = 2.0 * x - x_old;
                        let x_new = x_old + rho * (x - x_old);
                        x2_row[i] = x_new;
                        diff += ((x_new - x_old) as f64).powi(2);
                        norm += (x_new as f64).powi(2);
                    }
                    (diff, norm)
                })
                .reduce(|| (0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
            // Dual step: projected ascent on ∇(2x − x₂), relaxed in place.
            u2.par_chunks_mut(w * axes)
                .enumerate()
                .with_min_len(min_rows)
                .for_each(|(row, u_row)| {
                    let mut g = [0.0f32; 3];
                    for i in 0..w {
                        let p = row * w + i;
                        grid.grad(&xbar, p, grid.position(row, i), &mut g);
                        let u = &mut u_row[i * axes..(i + 1) * axes];
                        let mut norm_sq = 0.0f32;
                        for a in 0..axes {
                            g[a] = u[a] + sigma_dual * g[a];
                            norm_sq += g[a] * g[a];
                        }
                        let shrink = 1.0 / (norm_sq.sqrt() / ths).max(1.0);
                        for a in 0..axes {
                            u[a] += rho * (g[a] * shrink - u[a]);
                        }
                    }
                });
            let rel = diff_sq.sqrt() / (norm_sq.sqrt() + 1e-12);
            if it > 1 && rel < self.crit as f64 {
                break;
            }
        }
        done
    }
}

/// Index arithmetic of forward differences on a `[D, H, W]` plane.
#[derive(Clone, Copy)]
struct Grid {
    h: usize,
    axes: usize,
    /// Length and flat stride of each transformed axis (`D, H, W` for volumes, `H, W` for images).
    lens: [usize; 3],
    strides: [usize; 3],
}

impl Grid {
    fn new([d, h, w]: [usize; 3], axes: usize) -> Self {
        if axes == 3 {
            Grid {
                h,
                axes,
                lens: [d, h, w],
                strides: [h * w, w, 1],
            }
        } else {
            Grid {
                h,
                axes,
                lens: [h, w, 1],
                strides: [w, 1, 0],
            }
        }
    }

    /// Position along each transformed axis of column `i` of row `row` (rows run over D·H).
    #[inline]
    fn position(&self, row: usize, i: usize) -> [usize; 3] {
        if self.axes == 3 {
            [row / self.h, row % self.h, i]
        } else {
            [row, i, 0]
        }
    }

    /// (∇x)_p: `x[p + e_a] − x[p]`, zero on the last sample of each axis.
    #[inline]
    fn grad(&self, x: &[f32], p: usize, pos: [usize; 3], g: &mut [f32; 3]) {
        for a in 0..self.axes {
            g[a] = if pos[a] + 1 < self.lens[a] {
                x[p + self.strides[a]] - x[p]
            } else {
                0.0
            };
        }
    }

    /// (∇ᵀu)_p = Σ_a u_a[p − e_a]·[i ≥ 1] − u_a[p]·[i ≤ n − 2] (u interleaved: `u[q·axes + a]`).
    #[inline]
    fn grad_adjoint(&self, u: &[f32], p: usize, pos: [usize; 3]) -> f32 {
        let mut s = 0.0;
        for a in 0..self.axes {
            if pos[a] >= 1 {
                s += u[(p - self.strides[a]) * self.axes + a];
            }
            if pos[a] + 1 < self.lens[a] {
                s -= u[p * self.axes + a];
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ⟨∇x, u⟩ = ⟨x, ∇ᵀu⟩ on 2-D and 3-D grids.
    #[test]
    fn gradient_adjoint_is_its_transpose() {
        for dims in [[1usize, 5, 7], [4, 3, 6]] {
            let axes = if dims[0] == 1 { 2 } else { 3 };
            let [d, h, w] = dims;
            let grid = Grid::new(dims, axes);
            let n = d * h * w;
            let x: Vec<f32> = (0..n).map(|i| ((i * 7 % 11) as f32).sin()).collect();
            let u: Vec<f32> = (0..n * axes).map(|i| ((i * 5 % 13) as f32).cos()).collect();
            let mut lhs = 0.0f64;
            let mut g = [0.0f32; 3];
            let mut rhs = 0.0f64;
            for p in 0..n {
                let pos = grid.position(p / w, p % w);
                grid.grad(&x, p, pos, &mut g);
                for a in 0..axes {
                    lhs += (g[a] * u[p * axes + a]) as f64;
                }
                rhs += (x[p] * grid.grad_adjoint(&u, p, pos)) as f64;
            }
            assert!((lhs - rhs).abs() < 1e-4, "{dims:?}: {lhs} vs {rhs}");
        }
    }
}
