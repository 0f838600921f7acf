//! One time step over the whole grid, rows spread over the rayon pool in bands, and the state that
//! is stepped (Devito's `TimeFunction` buffers: two time levels plus the C-PML memory fields).

use rayon::prelude::*;

use super::kernels::{Fields, FlushSubnormals, Isa, Kernel, Leapfrog, RowOut};

/// `$name::<T, R, ADJOINT>(isa, args…)` runs `$band::<T, R, ADJOINT>(args…)` compiled for the
/// instruction set `isa` names: the band functions are `#[inline(always)]`, so each variant gets its own vectorised copy of every row
/// kernel (the baseline build targets any x86-64).
macro_rules! on_isa {
    ($name:ident, $band:ident, ($($arg:ident: $ty:ty),* $(,)?)) => {
        #[allow(clippy::too_many_arguments)]
        fn $name<T: Float, const R: usize, const ADJOINT: bool>(isa: Isa, $($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                #[allow(clippy::too_many_arguments)]
                fn avx512<T: Float, const R: usize, const ADJOINT: bool>($($arg: $ty),*) {
                    $band::<T, R, ADJOINT>($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                #[allow(clippy::too_many_arguments)]
                fn avx2<T: Float, const R: usize, const ADJOINT: bool>($($arg: $ty),*) {
                    $band::<T, R, ADJOINT>($($arg),*)
                }
                match isa {
                    // SAFETY: `Isa::detect` returns these only when the CPU supports them.
                    Isa::Avx512 => return unsafe { avx512::<T, R, ADJOINT>($($arg),*) },
                    Isa::Avx2 => return unsafe { avx2::<T, R, ADJOINT>($($arg),*) },
                    Isa::Baseline => {}
                }
            }
            let _ = isa;
            $band::<T, R, ADJOINT>($($arg),*)
        }
    };
}

on_isa!(
    band_on,
    band,
    (
        k: &Kernel<'_, T, R>,
        fields: Fields<'_, T>,
        v: &[T],
        born: Option<(&[T], &[T])>,
        grad_w: Option<GradientSource<'_, T>>,
        w: &mut [T],
        b: &mut BandMut<'_, T>,
    )
);
use crate::float::Float;

/// Rows per parallel task: enough work to amortise scheduling, small enough to balance the heavier
/// absorbing-layer rows across threads.
const BAND_ROWS: usize = 8;

/// The stepped state: `cur` (time t), `prev` (t − 1, overwritten by t + 1), ψ (double-buffered: the
/// stencil reads neighbours) and ζ (double-buffered only for the adjoint, which also reads
/// neighbours).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct State<T> {
    pub cur: Vec<T>,
    pub prev: Vec<T>,
    pub psi_y: Vec<T>,
    pub psi_x: Vec<T>,
    pub psi_yn: Vec<T>,
    pub psi_xn: Vec<T>,
    pub zeta_y: Vec<T>,
    pub zeta_x: Vec<T>,
    /// Empty for the forward state.
    pub zeta_yn: Vec<T>,
    pub zeta_xn: Vec<T>,
}

impl<T: Float> State<T> {
    pub fn zeros(cells: usize, adjoint: bool) -> Self {
        let z = || vec![T::ZERO; cells];
        let zn = || {
            if adjoint {
                vec![T::ZERO; cells]
            } else {
                Vec::new()
            }
        };
        State {
            cur: z(),
            prev: z(),
            psi_y: z(),
            psi_x: z(),
            psi_yn: z(),
            psi_xn: z(),
            zeta_y: z(),
            zeta_x: z(),
            zeta_yn: zn(),
            zeta_xn: zn(),
        }
    }

    /// After a step: the new level becomes current and the next ψ (and adjoint ζ) buffers swap in.
    pub fn rotate(&mut self) {
        std::mem::swap(&mut self.cur, &mut self.prev);
        std::mem::swap(&mut self.psi_y, &mut self.psi_yn);
        std::mem::swap(&mut self.psi_x, &mut self.psi_xn);
        if !self.zeta_yn.is_empty() {
            std::mem::swap(&mut self.zeta_y, &mut self.zeta_yn);
            std::mem::swap(&mut self.zeta_x, &mut self.zeta_xn);
        }
    }

    /// The part of the forward state a checkpoint must keep (everything but the scratch ψ buffers).
    pub fn snapshot(&self) -> [Vec<T>; 6] {
        [
            self.cur.clone(),
            self.prev.clone(),
            self.psi_y.clone(),
            self.psi_x.clone(),
            self.zeta_y.clone(),
            self.zeta_x.clone(),
        ]
    }

    pub fn restore(&mut self, snap: &[Vec<T>; 6]) {
        self.cur.copy_from_slice(&snap[0]);
        self.prev.copy_from_slice(&snap[1]);
        self.psi_y.copy_from_slice(&snap[2]);
        self.psi_x.copy_from_slice(&snap[3]);
        self.zeta_y.copy_from_slice(&snap[4]);
        self.zeta_x.copy_from_slice(&snap[5]);
    }
}

/// What a step writes besides the state, each optional.
#[derive(Default)]
pub(crate) struct Extras<'a, T> {
    /// The spatial term `w` of every row (the wavefield history the gradient needs).
    pub w_out: Option<&'a mut [T]>,
    /// `+= cur²` (illumination).
    pub energy: Option<&'a mut [T]>,
    /// `G += cur · w_fwd` on the columns `[c0, c1)` of the rows `[r0, r1)` (gradient accumulation).
    pub gradient: Option<Gradient<'a, T>>,
    /// `new += dv · w_bg` (the Born scattering source).
    pub born: Option<(&'a [T], &'a [T])>,
}

pub(crate) struct Gradient<'a, T> {
    pub acc: &'a mut [T],
    pub w_fwd: &'a [T],
    pub rows: (usize, usize),
    pub cols: (usize, usize),
}

/// Splits rows `[r, nz − r)` of a grid into bands of `BAND_ROWS` rows.
fn bands<T>(buf: &mut [T], nx: usize, r: usize, nz: usize) -> Vec<&mut [T]> {
    buf[r * nx..(nz - r) * nx]
        .chunks_mut(BAND_ROWS * nx)
        .collect()
}

fn optional_bands<T>(
    buf: Option<&mut [T]>,
    nx: usize,
    r: usize,
    nz: usize,
    n: usize,
) -> Vec<Option<&mut [T]>> {
    match buf {
        Some(b) => bands(b, nx, r, nz).into_iter().map(Some).collect(),
        None => (0..n).map(|_| None).collect(),
    }
}

/// Per-band mutable slices.
struct BandMut<'a, T> {
    y0: usize,
    new: &'a mut [T],
    psi_yn: &'a mut [T],
    psi_xn: &'a mut [T],
    zeta_y: &'a mut [T],
    zeta_x: &'a mut [T],
    w_out: Option<&'a mut [T]>,
    energy: Option<&'a mut [T]>,
    grad: Option<&'a mut [T]>,
}

#[allow(clippy::too_many_arguments)]
fn split_bands<'a, T>(
    nx: usize,
    nz: usize,
    r: usize,
    new: &'a mut [T],
    psi_yn: &'a mut [T],
    psi_xn: &'a mut [T],
    zeta_y: &'a mut [T],
    zeta_x: &'a mut [T],
    w_out: Option<&'a mut [T]>,
    energy: Option<&'a mut [T]>,
    grad: Option<&'a mut [T]>,
) -> Vec<BandMut<'a, T>> {
    let new = bands(new, nx, r, nz);
    let n = new.len();
    let mut psi_yn = bands(psi_yn, nx, r, nz).into_iter();
    let mut psi_xn = bands(psi_xn, nx, r, nz).into_iter();
    let mut zeta_y = bands(zeta_y, nx, r, nz).into_iter();
    let mut zeta_x = bands(zeta_x, nx, r, nz).into_iter();
    let mut w_out = optional_bands(w_out, nx, r, nz, n).into_iter();
    let mut energy = optional_bands(energy, nx, r, nz, n).into_iter();
    let mut grad = optional_bands(grad, nx, r, nz, n).into_iter();
    new.into_iter()
        .enumerate()
        .map(|(b, new)| BandMut {
            y0: r + b * BAND_ROWS,
            new,
            psi_yn: psi_yn.next().expect("same row count"),
            psi_xn: psi_xn.next().expect("same row count"),
            zeta_y: zeta_y.next().expect("same row count"),
            zeta_x: zeta_x.next().expect("same row count"),
            w_out: w_out.next().expect("same row count"),
            energy: energy.next().expect("same row count"),
            grad: grad.next().expect("same row count"),
        })
        .collect()
}

/// One forward step: `state.prev ← u(t+1)` for every row, ψ into the next buffers, ζ in place.
/// The caller injects sources into `state.prev` and then calls [`State::rotate`].
pub(crate) fn forward<T: Float, const R: usize>(
    k: &Kernel<'_, T, R>,
    nz: usize,
    v: &[T],
    state: &mut State<T>,
    extras: Extras<'_, T>,
) {
    let nx = k.nx;
    let State {
        cur,
        prev,
        psi_y,
        psi_x,
        psi_yn,
        psi_xn,
        zeta_y,
        zeta_x,
        ..
    } = state;
    let (cur, psi_y, psi_x) = (&cur[..], &psi_y[..], &psi_x[..]);
    let born = extras.born;
    let (grad, grad_w) = match extras.gradient {
        Some(g) => (Some(g.acc), Some((g.w_fwd, g.rows, g.cols))),
        None => (None, None),
    };
    let work = split_bands(
        nx,
        nz,
        R,
        prev,
        psi_yn,
        psi_xn,
        zeta_y,
        zeta_x,
        extras.w_out,
        extras.energy,
        grad,
    );
    let fields = Fields {
        u: cur,
        psi_y,
        psi_x,
        zeta_y: &[],
        zeta_x: &[],
    };
    run_bands::<T, R, false>(k, fields, v, born, grad_w, work);
}

/// The bands of one step on the rayon pool, each with subnormals flushed, one scratch row per
/// worker.
fn run_bands<T: Float, const R: usize, const ADJOINT: bool>(
    k: &Kernel<'_, T, R>,
    fields: Fields<'_, T>,
    v: &[T],
    born: Option<(&[T], &[T])>,
    grad_w: Option<GradientSource<'_, T>>,
    work: Vec<BandMut<'_, T>>,
) {
    let isa = k.isa;
    if !k.parallel {
        let _flush = FlushSubnormals::new();
        let mut w = vec![T::ZERO; k.nx];
        for mut b in work {
            band_on::<T, R, ADJOINT>(isa, k, fields, v, born, grad_w, &mut w, &mut b);
        }
        return;
    }
    work.into_par_iter().for_each_init(
        || vec![T::ZERO; k.nx],
        |w, mut b| {
            let _flush = FlushSubnormals::new();
            band_on::<T, R, ADJOINT>(isa, k, fields, v, born, grad_w, w, &mut b)
        },
    );
}

/// The rows of one band of a forward (or, with `ADJOINT`, adjoint) step, inlined into each
/// instruction-set variant.
#[inline(always)]
fn band<T: Float, const R: usize, const ADJOINT: bool>(
    k: &Kernel<'_, T, R>,
    fields: Fields<'_, T>,
    v: &[T],
    born: Option<(&[T], &[T])>,
    grad_w: Option<GradientSource<'_, T>>,
    w: &mut [T],
    b: &mut BandMut<'_, T>,
) {
    let nx = k.nx;
    let rows = b.new.len() / nx;
    for j in 0..rows {
        let y = b.y0 + j;
        let row = j * nx..(j + 1) * nx;
        let mut out = RowOut {
            w: &mut *w,
            psi_yn: &mut b.psi_yn[row.clone()],
            psi_xn: &mut b.psi_xn[row.clone()],
            zeta_y: &mut b.zeta_y[row.clone()],
            zeta_x: &mut b.zeta_x[row.clone()],
        };
        let base = y * nx;
        let mut leap = Leapfrog {
            vv: &v[base..base + nx],
            new: &mut b.new[row.clone()],
        };
        k.row::<ADJOINT>(y, fields, &mut out, &mut leap);
        tail(
            k,
            y,
            w,
            fields.u,
            &mut b.new[row.clone()],
            born,
            b.w_out.as_deref_mut().map(|s| &mut s[row.clone()]),
            b.energy.as_deref_mut().map(|s| &mut s[row.clone()]),
            b.grad
                .as_deref_mut()
                .map(|s| &mut s[row.clone()])
                .zip(grad_w),
        );
    }
}

/// One adjoint step (β form): `state.prev ← β(t)`, ψ and ζ into the next buffers; with a
/// gradient, `G += β(t+1)·w_fwd(t)`. The caller injects receiver residuals and rotates.
pub(crate) fn adjoint<T: Float, const R: usize>(
    k: &Kernel<'_, T, R>,
    nz: usize,
    v: &[T],
    state: &mut State<T>,
    extras: Extras<'_, T>,
) {
    let nx = k.nx;
    let State {
        cur,
        prev,
        psi_y,
        psi_x,
        psi_yn,
        psi_xn,
        zeta_y,
        zeta_x,
        zeta_yn,
        zeta_xn,
    } = state;
    let fields = Fields {
        u: &cur[..],
        psi_y: &psi_y[..],
        psi_x: &psi_x[..],
        zeta_y: &zeta_y[..],
        zeta_x: &zeta_x[..],
    };
    let (grad, grad_w) = match extras.gradient {
        Some(g) => (Some(g.acc), Some((g.w_fwd, g.rows, g.cols))),
        None => (None, None),
    };
    let work = split_bands(
        nx,
        nz,
        R,
        prev,
        psi_yn,
        psi_xn,
        zeta_yn,
        zeta_xn,
        extras.w_out,
        extras.energy,
        grad,
    );
    run_bands::<T, R, true>(k, fields, v, None, grad_w, work);
}

/// The forward `w` a gradient step correlates with, and the rows and columns where it does.
type GradientSource<'a, T> = (&'a [T], (usize, usize), (usize, usize));
type GradientRow<'a, T> = (&'a mut [T], GradientSource<'a, T>);

/// The optional outputs of one row, after its leapfrog update.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tail<T: Float, const R: usize>(
    k: &Kernel<'_, T, R>,
    y: usize,
    w: &[T],
    cur: &[T],
    new: &mut [T],
    born: Option<(&[T], &[T])>,
    w_out: Option<&mut [T]>,
    energy: Option<&mut [T]>,
    grad: Option<GradientRow<'_, T>>,
) {
    let nx = k.nx;
    let (x0, x1) = (R, nx - R);
    let base = y * nx;
    let cur_row = &cur[base..base + nx];
    if let Some((dv, wbg)) = born {
        let (dv, wbg) = (&dv[base + x0..base + x1], &wbg[base + x0..base + x1]);
        for ((n, d), b) in new[x0..x1].iter_mut().zip(dv).zip(wbg) {
            *n += *d * *b;
        }
    }
    if let Some(out) = w_out {
        out[x0..x1].copy_from_slice(&w[x0..x1]);
    }
    if let Some(e) = energy {
        for (e, &u) in e[x0..x1].iter_mut().zip(&cur_row[x0..x1]) {
            *e += u * u;
        }
    }
    if let Some((acc, (w_fwd, rows, cols))) = grad
        && y >= rows.0
        && y < rows.1
    {
        let wf = &w_fwd[base + cols.0..base + cols.1];
        for ((a, &u), &wf) in acc[cols.0..cols.1]
            .iter_mut()
            .zip(&cur_row[cols.0..cols.1])
            .zip(wf)
        {
            *a += u * wf;
        }
    }
}

/// Forward steps `levels` at once over one shot on the calling thread (temporal blocking): rows
/// are taken in blocks of `block_rows`, and for each block every level `l` (step `t0 + l`) advances
/// the rows that level `l − 1` has made ready, lagging it by `R` rows, so a block's fields are
/// still in L2 when the next level reads them instead of streaming the grid once per step.
///
/// Why the lag `R` suffices (every cell update is today's arithmetic, only the order over cells
/// changes, so results are equal as numbers). Level `l` reads u(t0+l) and ψ(t0+l) at rows
/// `y ± R`, u(t0+l−1) and ζ at row `y` only, and writes u(t0+l+1) over u(t0+l−1), ψ(t0+l+1) over
/// ψ(t0+l−1) and ζ in place. When level `l` writes rows `< e`, level `l − 1` has finished rows
/// `< e + R` (or all rows), so (1) every neighbour level `l` reads is final, and (2) the rows of
/// u(t0+l−1), ψ(t0+l−1) that level `l` overwrites are no longer read by level `l − 1`, whose
/// remaining rows `≥ e + R` read rows `≥ e`. ζ is read and written at its own row only, by the
/// levels in their order. Rows outside `[R, nz − R)` are never stepped; they are handed to
/// `after` with the first and last block.
///
/// `after(l, (r0, r1), u_new)` runs after level `l` has finished rows `[r0, r1)` (source
/// injection and receiver recording of step `t0 + l` go there; those rows are not read by a later
/// level before it returns). The state ends as after `levels` calls of [`forward`] and
/// [`State::rotate`].
pub(crate) fn forward_blocked<T: Float, const R: usize>(
    k: &Kernel<'_, T, R>,
    nz: usize,
    v: &[T],
    state: &mut State<T>,
    levels: usize,
    block_rows: usize,
    mut after: impl FnMut(usize, (usize, usize), &mut [T]),
) {
    let nx = k.nx;
    let (lo, hi) = (R, nz - R);
    if levels == 0 || hi <= lo {
        return;
    }
    let block_rows = block_rows.max(1);
    let _flush = FlushSubnormals::new();
    let mut w = vec![T::ZERO; nx];
    let State {
        cur,
        prev,
        psi_y,
        psi_x,
        psi_yn,
        psi_xn,
        zeta_y,
        zeta_x,
        ..
    } = state;
    let mut done = vec![lo; levels];
    let mut p = lo;
    while done[levels - 1] < hi {
        p += block_rows;
        for (l, done_l) in done.iter_mut().enumerate() {
            let (a, b) = (*done_l, p.saturating_sub(l * R).clamp(lo, hi));
            if b <= a {
                continue;
            }
            let (u, new, py, px, pyn, pxn) = if l % 2 == 0 {
                (
                    &cur[..],
                    &mut prev[..],
                    &psi_y[..],
                    &psi_x[..],
                    &mut psi_yn[..],
                    &mut psi_xn[..],
                )
            } else {
                (
                    &prev[..],
                    &mut cur[..],
                    &psi_yn[..],
                    &psi_xn[..],
                    &mut psi_y[..],
                    &mut psi_x[..],
                )
            };
            let fields = Fields {
                u,
                psi_y: py,
                psi_x: px,
                zeta_y: &[],
                zeta_x: &[],
            };
            let rows = a * nx..b * nx;
            let mut band_mut = BandMut {
                y0: a,
                new: &mut new[rows.clone()],
                psi_yn: &mut pyn[rows.clone()],
                psi_xn: &mut pxn[rows.clone()],
                zeta_y: &mut zeta_y[rows.clone()],
                zeta_x: &mut zeta_x[rows],
                w_out: None,
                energy: None,
                grad: None,
            };
            band_on::<T, R, false>(k.isa, k, fields, v, None, None, &mut w, &mut band_mut);
            *done_l = b;
            let r0 = if a == lo { 0 } else { a };
            let r1 = if b == hi { nz } else { b };
            after(l, (r0, r1), new);
        }
    }
    if levels % 2 == 1 {
        state.rotate();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physics::wave::grid::Grid;
    use crate::physics::wave::kernels::{Axis, Coefs, widen_layer_cols};
    use crate::physics::wave::pml;
    use crate::physics::wave::stencil::Accuracy;

    /// Steps a random state `steps` times with the kernel's column split replaced by `cols`.
    fn run(adj: bool, cols: Option<(usize, usize)>, steps: usize) -> State<f32> {
        run_with(adj, cols, steps, true)
    }

    /// [`run`], with the rows of each step spread over the pool (`parallel`) or on one thread.
    fn run_with(
        adj: bool,
        cols: Option<(usize, usize)>,
        steps: usize,
        parallel: bool,
    ) -> State<f32> {
        const R: usize = 2;
        let acc = Accuracy::Four;
        let grid = Grid::new(40, 90, R, [10; 4], false);
        let (nz, nx) = (grid.nz, grid.nx);
        let (dt, dx, vmax) = (4e-4, 4.0, 3000.0);
        let prof = |n, d| {
            let p = pml::profile(n, [10, 10], acc, d, dt, vmax, 25.0);
            let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
            [f(p.a), f(p.b), f(p.db)]
        };
        let (py, px) = (prof(nz, dx), prof(nx, dx));
        let (rows, band) = if adj {
            (grid.adjoint_rows(), grid.adjoint_cols())
        } else {
            (grid.forward_rows(), grid.forward_cols())
        };
        let k = Kernel::<f32, R> {
            nx,
            c: Coefs::new(
                std::array::from_fn(|i| acc.first()[i]),
                std::array::from_fn(|i| acc.second()[i]),
                [1.0 / dx, 1.0 / dx, 1.0 / (dx * dx), 1.0 / (dx * dx)],
            ),
            y: Axis {
                a: &py[0],
                b: &py[1],
                db: &py[2],
            },
            x: Axis {
                a: &px[0],
                b: &px[1],
                db: &px[2],
            },
            rows: (rows.lo, rows.hi),
            cols: cols.unwrap_or((band.lo, band.hi)),
            isa: Isa::detect(),
            parallel,
        };
        let vv: Vec<f32> = (0..nz * nx)
            .map(|i| 0.2 + 0.05 * ((i % 7) as f32) / 7.0)
            .collect();
        let mut s = State::zeros(nz * nx, adj);
        let mut seed = 12345u32;
        for y in R..nz - R {
            for x in R..nx - R {
                for f in [&mut s.cur, &mut s.prev] {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    f[y * nx + x] = (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                }
            }
        }
        for _ in 0..steps {
            if adj {
                adjoint(&k, nz, &vv, &mut s, Extras::default());
            } else {
                forward(&k, nz, &vv, &mut s, Extras::default());
            }
            s.rotate();
        }
        s
    }

    #[test]
    fn widened_layer_segments_give_the_same_numbers() {
        let grid = Grid::new(40, 90, 2, [10; 4], false);
        for adjoint in [false, true] {
            let band = if adjoint {
                grid.adjoint_cols()
            } else {
                grid.forward_cols()
            };
            let wide = widen_layer_cols((band.lo, band.hi), grid.nx, 2);
            assert!(wide.0 > band.lo && wide.1 < band.hi, "{wide:?} vs {band:?}");
            assert_eq!((wide.0 - 2) % 16, 1);
            assert_eq!((grid.nx - 2 - wide.1) % 16, 1);
            let (a, b) = (run(adjoint, None, 40), run(adjoint, Some(wide), 40));
            assert!(a.cur.iter().any(|&v| v != 0.0));
            assert!(
                a.psi_x.iter().any(|&v| v != 0.0),
                "the layers were exercised"
            );
            for (name, x, y) in [
                ("u", &a.cur, &b.cur),
                ("u-", &a.prev, &b.prev),
                ("psi_y", &a.psi_y, &b.psi_y),
                ("psi_x", &a.psi_x, &b.psi_x),
                ("zeta_y", &a.zeta_y, &b.zeta_y),
                ("zeta_x", &a.zeta_x, &b.zeta_x),
            ] {
                // `==`: the widened split may only flip the sign of a zero.
                if let Some(i) = x.iter().zip(y).position(|(p, q)| p != q) {
                    panic!("adjoint {adjoint}: {name}[{i}] {} != {}", x[i], y[i]);
                }
            }
        }
    }

    #[test]
    fn one_thread_per_shot_gives_the_bits_of_the_row_bands() {
        // Run inside a 3-thread pool so the band path really spreads rows over threads.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .expect("pool");
        for adjoint in [false, true] {
            let (a, b) = pool.install(|| {
                (
                    run_with(adjoint, None, 40, true),
                    run_with(adjoint, None, 40, false),
                )
            });
            assert!(a.psi_x.iter().any(|&v| v != 0.0), "layers exercised");
            for (name, x, y) in [
                ("u", &a.cur, &b.cur),
                ("u-", &a.prev, &b.prev),
                ("psi_y", &a.psi_y, &b.psi_y),
                ("psi_x", &a.psi_x, &b.psi_x),
                ("zeta_y", &a.zeta_y, &b.zeta_y),
                ("zeta_x", &a.zeta_x, &b.zeta_x),
            ] {
                if let Some(i) = x
                    .iter()
                    .zip(y)
                    .position(|(p, q)| p.to_bits() != q.to_bits())
                {
                    panic!("adjoint {adjoint}: {name}[{i}] {} != {}", x[i], y[i]);
                }
            }
        }
    }

    #[test]
    fn widening_keeps_a_split_that_cannot_widen() {
        // 12-cell layers become 33 cells: [2, 35) and [35, 68).
        assert_eq!(widen_layer_cols((14, 56), 70, 2), (35, 35));
        assert_eq!(widen_layer_cols((14, 86), 100, 2), (35, 65));
        // A 42-cell right layer becomes 49 cells.
        assert_eq!(widen_layer_cols((14, 56), 100, 2), (35, 49));
        assert_eq!(widen_layer_cols((20, 24), 44, 2), (20, 24));
        assert_eq!(widen_layer_cols((2, 68), 70, 2), (2, 68));
    }
}
