//! The per-row finite-difference kernels of one time step, forward and adjoint.
//!
//! A time step computes, for every cell inside the guard cells, the spatial term `w` (the Laplacian
//! plus, inside the absorbing layers, the C-PML corrections) and then the leapfrog update
//! `u⁺ = v²dt²·w + 2u − u⁻`. Arithmetic follows deepwave's `scalar_kernels.h` operation for
//! operation, so float64 results agree to rounding. A row is split into the left layer, the interior
//! and the right layer; interior rows of the interior run the plain Laplacian, which is the hot loop
//! and is compiled for AVX2 and AVX-512 as well, chosen at run time. No fused multiply-adds are
//! used, so every instruction set gives the same bits.
//!
//! The adjoint works on `β = v²dt²·λ` (λ the adjoint wavefield): then its interior update is the
//! same Laplacian as the forward one, and the absorbing-layer terms are deepwave's `backward_cell`
//! with `v²dt²·λ` replaced by `β`.

use super::real::Real;

/// Stencil coefficients and reciprocal spacings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Coefs<T, const R: usize> {
    pub d1: [T; R],
    pub d2: [T; R],
    pub rdy: T,
    pub rdx: T,
    pub rdy2: T,
    pub rdx2: T,
}

/// C-PML profiles along one axis (padded length).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Axis<'a, T> {
    pub a: &'a [T],
    pub b: &'a [T],
    pub db: &'a [T],
}

/// Which vector instructions the hot loops use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    Baseline,
    Avx2,
    Avx512,
}

impl Isa {
    /// The best the CPU offers (`TESSERA_WAVE_ISA=baseline|avx2` lowers it, for benchmarks).
    pub fn detect() -> Isa {
        static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *ISA.get_or_init(|| {
            let cap = match std::env::var("TESSERA_WAVE_ISA").as_deref() {
                Ok("baseline") => Isa::Baseline,
                Ok("avx2") => Isa::Avx2,
                _ => Isa::Avx512,
            };
            #[cfg(target_arch = "x86_64")]
            {
                if cap == Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512f") {
                    return Isa::Avx512;
                }
                if cap != Isa::Baseline && std::arch::is_x86_feature_detected!("avx2") {
                    return Isa::Avx2;
                }
            }
            let _ = cap;
            Isa::Baseline
        })
    }
}

/// Everything a row kernel reads besides the fields: grid size, coefficients, profiles and the
/// column/row bands where the absorbing terms apply.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kernel<'a, T, const R: usize> {
    pub nx: usize,
    pub c: Coefs<T, R>,
    pub y: Axis<'a, T>,
    pub x: Axis<'a, T>,
    /// Rows `[R, rows.0)` and `[rows.1, nz − R)` are in the y layers.
    pub rows: (usize, usize),
    /// Columns `[R, cols.0)` and `[cols.1, nx − R)` are in the x layers.
    pub cols: (usize, usize),
    pub isa: Isa,
}

/// Mutable rows the forward kernel writes (each of length `nx`).
pub(crate) struct ForwardRow<'a, T> {
    pub w: &'a mut [T],
    pub psi_yn: &'a mut [T],
    pub psi_xn: &'a mut [T],
    pub zeta_y: &'a mut [T],
    pub zeta_x: &'a mut [T],
}

/// Mutable rows the adjoint kernel writes.
pub(crate) struct AdjointRow<'a, T> {
    pub w: &'a mut [T],
    pub psi_yn: &'a mut [T],
    pub psi_xn: &'a mut [T],
    pub zeta_yn: &'a mut [T],
    pub zeta_xn: &'a mut [T],
}

/// Read-only fields of the current time level.
#[derive(Clone, Copy)]
pub(crate) struct Fields<'a, T> {
    pub u: &'a [T],
    pub psi_y: &'a [T],
    pub psi_x: &'a [T],
    /// The adjoint reads ζ at neighbours (double-buffered); the forward updates it in place.
    pub zeta_y: &'a [T],
    pub zeta_x: &'a [T],
}

impl<T: Real, const R: usize> Kernel<'_, T, R> {
    /// `w` for row `y` of the forward step, updating the row's ψ (into the next buffer) and ζ.
    pub fn forward_row(&self, y: usize, f: Fields<'_, T>, out: &mut ForwardRow<'_, T>) {
        let (lo, hi, end) = (self.cols.0, self.cols.1, self.nx - R);
        if y < self.rows.0 || y >= self.rows.1 {
            self.forward_seg::<true, true>(y, R, lo, f, out);
            self.forward_seg::<true, false>(y, lo, hi, f, out);
            self.forward_seg::<true, true>(y, hi, end, f, out);
        } else {
            self.forward_seg::<false, true>(y, R, lo, f, out);
            laplacian(self.isa, &self.c, f.u, self.nx, y, lo, hi, out.w);
            self.forward_seg::<false, true>(y, hi, end, f, out);
        }
    }

    /// `w` for row `y` of the adjoint step (β form), writing the row's next ψ and ζ.
    pub fn adjoint_row(&self, y: usize, f: Fields<'_, T>, out: &mut AdjointRow<'_, T>) {
        let (lo, hi, end) = (self.cols.0, self.cols.1, self.nx - R);
        if y < self.rows.0 || y >= self.rows.1 {
            self.adjoint_seg::<true, true>(y, R, lo, f, out);
            self.adjoint_seg::<true, false>(y, lo, hi, f, out);
            self.adjoint_seg::<true, true>(y, hi, end, f, out);
        } else {
            self.adjoint_seg::<false, true>(y, R, lo, f, out);
            laplacian(self.isa, &self.c, f.u, self.nx, y, lo, hi, out.w);
            self.adjoint_seg::<false, true>(y, hi, end, f, out);
        }
    }

    #[inline(always)]
    fn forward_seg<const YP: bool, const XP: bool>(
        &self,
        y: usize,
        x0: usize,
        x1: usize,
        f: Fields<'_, T>,
        out: &mut ForwardRow<'_, T>,
    ) {
        let nx = self.nx;
        let c = &self.c;
        let one = T::ONE;
        for x in x0..x1 {
            let i = y * nx + x;
            let u0 = f.u[i];
            let wy = if YP {
                let (mut d1, mut d2, mut ap) = (T::ZERO, T::ZERO, T::ZERO);
                for k in 0..R {
                    let (p, m) = (i + (k + 1) * nx, i - (k + 1) * nx);
                    d1 += c.d1[k] * (f.u[p] - f.u[m]);
                    d2 += c.d2[k] * ((f.u[p] - u0) + (f.u[m] - u0));
                    ap += c.d1[k]
                        * (self.y.a[y + k + 1] * f.psi_y[p] - self.y.a[y - k - 1] * f.psi_y[m]);
                }
                let (d1, d2, ap) = (d1 * c.rdy, d2 * c.rdy2, ap * c.rdy);
                let (a, b) = (self.y.a[y], self.y.b[y]);
                let tmp = (one + b) * d2 + self.y.db[y] * d1 + ap;
                let z = out.zeta_y[x];
                out.psi_yn[x] = b * d1 + a * f.psi_y[i];
                out.zeta_y[x] = b * tmp + a * z;
                (one + b) * tmp + a * z
            } else {
                let mut d2 = T::ZERO;
                for k in 0..R {
                    d2 += c.d2[k] * ((f.u[i + (k + 1) * nx] - u0) + (f.u[i - (k + 1) * nx] - u0));
                }
                d2 * c.rdy2
            };
            let wx = if XP {
                let (mut d1, mut d2, mut ap) = (T::ZERO, T::ZERO, T::ZERO);
                for k in 0..R {
                    let (p, m) = (i + k + 1, i - k - 1);
                    d1 += c.d1[k] * (f.u[p] - f.u[m]);
                    d2 += c.d2[k] * ((f.u[p] - u0) + (f.u[m] - u0));
                    ap += c.d1[k]
                        * (self.x.a[x + k + 1] * f.psi_x[p] - self.x.a[x - k - 1] * f.psi_x[m]);
                }
                let (d1, d2, ap) = (d1 * c.rdx, d2 * c.rdx2, ap * c.rdx);
                let (a, b) = (self.x.a[x], self.x.b[x]);
                let tmp = (one + b) * d2 + self.x.db[x] * d1 + ap;
                let z = out.zeta_x[x];
                out.psi_xn[x] = b * d1 + a * f.psi_x[i];
                out.zeta_x[x] = b * tmp + a * z;
                (one + b) * tmp + a * z
            } else {
                let mut d2 = T::ZERO;
                for k in 0..R {
                    d2 += c.d2[k] * ((f.u[i + k + 1] - u0) + (f.u[i - k - 1] - u0));
                }
                d2 * c.rdx2
            };
            out.w[x] = wy + wx;
        }
    }

    #[inline(always)]
    fn adjoint_seg<const YP: bool, const XP: bool>(
        &self,
        y: usize,
        x0: usize,
        x1: usize,
        f: Fields<'_, T>,
        out: &mut AdjointRow<'_, T>,
    ) {
        let nx = self.nx;
        let c = &self.c;
        let one = T::ONE;
        // deepwave's PSI_TERM: (1 + b)·β + b·ζ at a neighbour.
        let lam_y =
            |row: usize, j: usize| (one + self.y.b[row]) * f.u[j] + self.y.b[row] * f.zeta_y[j];
        let lam_x =
            |col: usize, j: usize| (one + self.x.b[col]) * f.u[j] + self.x.b[col] * f.zeta_x[j];
        for x in x0..x1 {
            let i = y * nx + x;
            let wy = if YP {
                let l0 = lam_y(y, i);
                let q0 = (one + self.y.b[y]) * l0;
                let (mut d1r, mut d2q, mut d1l) = (T::ZERO, T::ZERO, T::ZERO);
                for k in 0..R {
                    let (yp, ym) = (y + k + 1, y - k - 1);
                    let (p, m) = (i + (k + 1) * nx, i - (k + 1) * nx);
                    let (lp, lm) = (lam_y(yp, p), lam_y(ym, m));
                    let rp = self.y.db[yp] * lp + self.y.b[yp] * f.psi_y[p];
                    let rm = self.y.db[ym] * lm + self.y.b[ym] * f.psi_y[m];
                    d1r += c.d1[k] * (rp - rm);
                    d2q += c.d2[k]
                        * (((one + self.y.b[yp]) * lp - q0) + ((one + self.y.b[ym]) * lm - q0));
                    d1l += c.d1[k] * (lp - lm);
                }
                let a = self.y.a[y];
                out.psi_yn[x] = -a * (d1l * c.rdy) + a * f.psi_y[i];
                out.zeta_yn[x] = a * f.u[i] + a * f.zeta_y[i];
                -(d1r * c.rdy) + d2q * c.rdy2
            } else {
                let u0 = f.u[i];
                let mut d2 = T::ZERO;
                for k in 0..R {
                    d2 += c.d2[k] * ((f.u[i + (k + 1) * nx] - u0) + (f.u[i - (k + 1) * nx] - u0));
                }
                d2 * c.rdy2
            };
            let wx = if XP {
                let l0 = lam_x(x, i);
                let q0 = (one + self.x.b[x]) * l0;
                let (mut d1r, mut d2q, mut d1l) = (T::ZERO, T::ZERO, T::ZERO);
                for k in 0..R {
                    let (xp, xm) = (x + k + 1, x - k - 1);
                    let (p, m) = (i + k + 1, i - k - 1);
                    let (lp, lm) = (lam_x(xp, p), lam_x(xm, m));
                    let rp = self.x.db[xp] * lp + self.x.b[xp] * f.psi_x[p];
                    let rm = self.x.db[xm] * lm + self.x.b[xm] * f.psi_x[m];
                    d1r += c.d1[k] * (rp - rm);
                    d2q += c.d2[k]
                        * (((one + self.x.b[xp]) * lp - q0) + ((one + self.x.b[xm]) * lm - q0));
                    d1l += c.d1[k] * (lp - lm);
                }
                let a = self.x.a[x];
                out.psi_xn[x] = -a * (d1l * c.rdx) + a * f.psi_x[i];
                out.zeta_xn[x] = a * f.u[i] + a * f.zeta_x[i];
                -(d1r * c.rdx) + d2q * c.rdx2
            } else {
                let u0 = f.u[i];
                let mut d2 = T::ZERO;
                for k in 0..R {
                    d2 += c.d2[k] * ((f.u[i + k + 1] - u0) + (f.u[i - k - 1] - u0));
                }
                d2 * c.rdx2
            };
            out.w[x] = wy + wx;
        }
    }
}

/// The plain Laplacian `w[x] = ∂²_y u + ∂²_x u` of row `y` for `x ∈ [x0, x1)`.
#[inline(always)]
fn laplacian_generic<T: Real, const R: usize>(
    c: &Coefs<T, R>,
    u: &[T],
    nx: usize,
    y: usize,
    x0: usize,
    x1: usize,
    w: &mut [T],
) {
    if x1 <= x0 {
        return;
    }
    let n = x1 - x0;
    let row = &u[y * nx..(y + 1) * nx];
    let mid = &row[x0..x1];
    let ups: [&[T]; R] = std::array::from_fn(|k| &u[(y - k - 1) * nx + x0..][..n]);
    let downs: [&[T]; R] = std::array::from_fn(|k| &u[(y + k + 1) * nx + x0..][..n]);
    let lefts: [&[T]; R] = std::array::from_fn(|k| &row[x0 - k - 1..][..n]);
    let rights: [&[T]; R] = std::array::from_fn(|k| &row[x0 + k + 1..][..n]);
    let w = &mut w[x0..x1];
    for i in 0..n {
        let u0 = mid[i];
        let mut dy = T::ZERO;
        let mut dx = T::ZERO;
        for k in 0..R {
            dy += c.d2[k] * ((downs[k][i] - u0) + (ups[k][i] - u0));
            dx += c.d2[k] * ((rights[k][i] - u0) + (lefts[k][i] - u0));
        }
        w[i] = dy * c.rdy2 + dx * c.rdx2;
    }
}

/// `new = v·w + 2·cur − new` over a row segment (the leapfrog update; `new` holds the previous
/// level on entry).
#[inline(always)]
fn leapfrog_generic<T: Real>(v: &[T], w: &[T], cur: &[T], new: &mut [T]) {
    let n = new.len();
    let (v, w, cur) = (&v[..n], &w[..n], &cur[..n]);
    for i in 0..n {
        new[i] = v[i] * w[i] + T::TWO * cur[i] - new[i];
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::*;

    #[target_feature(enable = "avx2")]
    pub(super) fn laplacian_avx2<T: Real, const R: usize>(
        c: &Coefs<T, R>,
        u: &[T],
        nx: usize,
        y: usize,
        x0: usize,
        x1: usize,
        w: &mut [T],
    ) {
        laplacian_generic(c, u, nx, y, x0, x1, w)
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn laplacian_avx512<T: Real, const R: usize>(
        c: &Coefs<T, R>,
        u: &[T],
        nx: usize,
        y: usize,
        x0: usize,
        x1: usize,
        w: &mut [T],
    ) {
        laplacian_generic(c, u, nx, y, x0, x1, w)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn leapfrog_avx2<T: Real>(v: &[T], w: &[T], cur: &[T], new: &mut [T]) {
        leapfrog_generic(v, w, cur, new)
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn leapfrog_avx512<T: Real>(v: &[T], w: &[T], cur: &[T], new: &mut [T]) {
        leapfrog_generic(v, w, cur, new)
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn laplacian<T: Real, const R: usize>(
    isa: Isa,
    c: &Coefs<T, R>,
    u: &[T],
    nx: usize,
    y: usize,
    x0: usize,
    x1: usize,
    w: &mut [T],
) {
    match isa {
        // SAFETY: `Isa::detect` returns these only when the CPU supports the instructions.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { simd::laplacian_avx512(c, u, nx, y, x0, x1, w) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { simd::laplacian_avx2(c, u, nx, y, x0, x1, w) },
        _ => laplacian_generic(c, u, nx, y, x0, x1, w),
    }
}

/// `new = v·w + 2·cur − new` (dispatching on the instruction set).
pub(crate) fn leapfrog<T: Real>(isa: Isa, v: &[T], w: &[T], cur: &[T], new: &mut [T]) {
    match isa {
        // SAFETY: `Isa::detect` returns these only when the CPU supports the instructions.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { simd::leapfrog_avx512(v, w, cur, new) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { simd::leapfrog_avx2(v, w, cur, new) },
        _ => leapfrog_generic(v, w, cur, new),
    }
}
