//! The per-row finite-difference kernels of one time step, forward and adjoint.
//!
//! A time step computes, for every cell inside the guard cells, the spatial term `w` (the Laplacian
//! plus, inside the absorbing layers, the C-PML corrections) and then the leapfrog update
//! `u⁺ = v²dt²·w + 2u − u⁻`. Arithmetic follows deepwave's `scalar_kernels.h` operation for
//! operation, so float64 results agree to rounding. A row is split into the left layer, the interior
//! and the right layer; interior rows of the interior run the plain Laplacian fused with the leapfrog
//! update (one pass), the hot loop; each absorbing-layer segment's leapfrog update follows its `w`
//! in a short loop of its own while the row is in cache (fused into the segment loop, the run-time
//! overlap checks LLVM adds for so many slices made the short layer loops run scalar). Every
//! segment cuts its arrays to the segment's length before the loop over `x` (no index arithmetic
//! or bounds checks inside), so LLVM vectorises the absorbing-layer segments too;
//! `step` compiles whole bands of rows for AVX2 and AVX-512 as well, chosen at run time. No fused
//! multiply-adds are used, so every instruction set gives the same bits. Steps run with subnormals
//! flushed to zero ([`FlushSubnormals`]), as deepwave's kernels do.
//!
//! The adjoint works on `β = v²dt²·λ` (λ the adjoint wavefield): then its interior update is the
//! same Laplacian as the forward one, and the absorbing-layer terms are deepwave's `backward_cell`
//! with `v²dt²·λ` replaced by `β`.

use crate::float::Float;

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

impl<T: Float, const R: usize> Coefs<T, R> {
    /// Coefficients from the stencil's `c¹ₖ`, `c²ₖ` and `[1/Δy, 1/Δx, 1/Δy², 1/Δx²]`.
    pub fn new(d1: [f64; R], d2: [f64; R], [rdy, rdx, rdy2, rdx2]: [f64; 4]) -> Self {
        Coefs {
            d1: d1.map(T::from_f64),
            d2: d2.map(T::from_f64),
            rdy: T::from_f64(rdy),
            rdx: T::from_f64(rdx),
            rdy2: T::from_f64(rdy2),
            rdx2: T::from_f64(rdx2),
        }
    }
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

/// Flushes subnormal floats to zero on this thread while alive (MXCSR's FTZ and DAZ bits, as
/// deepwave's `dw_ftz_daz_enter` does around its kernels), restoring the previous mode on drop.
///
/// Why: the stencil's numerical precursor ahead of every wavefront and the decaying fields in the
/// absorbing layers pass through the subnormal range, and arithmetic on subnormals takes a
/// microcode assist on x86 (tens to hundreds of cycles per instruction). Flushing changes results
/// only where a value would be below 1.2e-38 (f32) or 2.2e-308 (f64).
pub(crate) struct FlushSubnormals {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

impl FlushSubnormals {
    #[cfg(target_arch = "x86_64")]
    const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

    #[inline]
    pub fn new() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let mut saved: u32 = 0;
            // SAFETY: stmxcsr/ldmxcsr read and write this thread's SSE control register (SSE is
            // part of the x86-64 baseline); setting FTZ/DAZ changes only subnormal handling.
            unsafe {
                std::arch::asm!("stmxcsr [{}]", in(reg) &mut saved, options(nostack, preserves_flags));
                let mode = saved | Self::FTZ_DAZ;
                std::arch::asm!("ldmxcsr [{}]", in(reg) &mode, options(nostack, preserves_flags));
            }
            FlushSubnormals { saved }
        }
        #[cfg(not(target_arch = "x86_64"))]
        FlushSubnormals {}
    }
}

impl Drop for FlushSubnormals {
    #[inline]
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: restores the mode `new` read on this thread.
        unsafe {
            std::arch::asm!("ldmxcsr [{}]", in(reg) &self.saved, options(nostack, preserves_flags));
        }
    }
}

/// Cells per vector (16 float32 fill one AVX-512 register; a multiple of every narrower vector).
pub(crate) const LAYER_CHUNK: usize = 16;

/// Widens the column split `(lo, hi)` of a row `[r, nx − r)` so that each absorbing-layer segment
/// `[r, lo)`, `[hi, nx − r)` is `16·m + 1` cells, `m ≥ 2`. Why: the layer loops touch so many
/// slices that LLVM guards their vector path with run-time overlap checks and takes it only from 33
/// cells on (and leaves at least one cell to the scalar epilogue); a 20-cell layer (22 cells of
/// layer formula at accuracy 4) therefore ran entirely scalar, and the layers' scalar loops took
/// more time than the whole vectorised interior. The cells moved into a layer segment have zero
/// profiles (`a = b = ∂b = 0`) and zero ψ, ζ, where the layer formula equals the plain Laplacian
/// (results differ at most in the sign of a zero). Keeps the split when the interior is too narrow.
pub(crate) fn widen_layer_cols(cols: (usize, usize), nx: usize, r: usize) -> (usize, usize) {
    let (lo, hi, end) = (cols.0, cols.1, nx - r);
    let width = |n: usize| {
        if n == 0 {
            0
        } else {
            (n.max(2 * LAYER_CHUNK + 1) - 1).div_ceil(LAYER_CHUNK) * LAYER_CHUNK + 1
        }
    };
    let wlo = r + width(lo.saturating_sub(r));
    let whi = end.saturating_sub(width(end.saturating_sub(hi)));
    if wlo <= whi && wlo >= lo && whi <= hi {
        (wlo, whi)
    } else {
        cols
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
    /// Columns `[R, cols.0)` and `[cols.1, nx − R)` run the x-layer formula: the x layers and the
    /// cells next to them whose neighbours reach into a layer, widened by [`widen_layer_cols`].
    pub cols: (usize, usize),
    pub isa: Isa,
    /// Spread each step's rows over the rayon pool in bands; false: one thread steps all rows (the
    /// caller runs one shot per thread).
    pub parallel: bool,
}

/// Mutable rows a step writes (each of length `nx`): `w`, the next ψ and ζ. The forward updates ζ
/// in place (it reads ζ only at the cell itself); the adjoint reads ζ at neighbours, so there
/// `zeta_y`, `zeta_x` are the next buffers.
pub(crate) struct RowOut<'a, T> {
    pub w: &'a mut [T],
    pub psi_yn: &'a mut [T],
    pub psi_xn: &'a mut [T],
    pub zeta_y: &'a mut [T],
    pub zeta_x: &'a mut [T],
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

/// A field's `n` values from flat index `i`, and at offsets `∓(k+1)·stride` (before, after).
type Around<'a, T, const R: usize> = ([&'a [T]; R], [&'a [T]; R], &'a [T]);

#[inline(always)]
fn around<T, const R: usize>(field: &[T], i: usize, stride: usize, n: usize) -> Around<'_, T, R> {
    (
        std::array::from_fn(|k| &field[i - (k + 1) * stride..][..n]),
        std::array::from_fn(|k| &field[i + (k + 1) * stride..][..n]),
        &field[i..i + n],
    )
}

/// The leapfrog update of one row: `new = vv·w + 2·u − new` (`new` holds the previous level on
/// entry), applied right after each segment's `w` while it is in cache; the interior segment
/// computes both in one pass.
pub(crate) struct Leapfrog<'a, T> {
    /// `v²dt²` of the row.
    pub vv: &'a [T],
    pub new: &'a mut [T],
}

impl<T: Float, const R: usize> Kernel<'_, T, R> {
    /// `w` for row `y` of the forward step (ψ into the next buffers, ζ in place) or, with
    /// `ADJOINT`, of the adjoint step (β form, ψ and ζ into the next buffers), and the row's new
    /// time level. Each absorbing-layer segment's leapfrog update follows its `w` while the row is
    /// in cache; the interior segment of interior rows is the fused Laplacian.
    #[inline(always)]
    pub fn row<const ADJOINT: bool>(
        &self,
        y: usize,
        f: Fields<'_, T>,
        out: &mut RowOut<'_, T>,
        leap: &mut Leapfrog<'_, T>,
    ) {
        let (lo, hi, end) = (self.cols.0, self.cols.1, self.nx - R);
        let cur = &f.u[y * self.nx..(y + 1) * self.nx];
        if y < self.rows.0 || y >= self.rows.1 {
            self.seg::<ADJOINT, true, true>(y, R, lo, f, out);
            self.seg::<ADJOINT, true, false>(y, lo, hi, f, out);
            self.seg::<ADJOINT, true, true>(y, hi, end, f, out);
            leapfrog_segment(leap, out.w, cur, R, end);
        } else {
            self.seg::<ADJOINT, false, true>(y, R, lo, f, out);
            leapfrog_segment(leap, out.w, cur, R, lo);
            laplacian_leapfrog(&self.c, f.u, self.nx, y, lo, hi, out.w, leap);
            self.seg::<ADJOINT, false, true>(y, hi, end, f, out);
            leapfrog_segment(leap, out.w, cur, hi, end);
        }
    }

    #[inline(always)]
    fn seg<const ADJOINT: bool, const YP: bool, const XP: bool>(
        &self,
        y: usize,
        x0: usize,
        x1: usize,
        f: Fields<'_, T>,
        out: &mut RowOut<'_, T>,
    ) {
        if ADJOINT {
            self.adjoint_seg::<YP, XP>(y, x0, x1, f, out)
        } else {
            self.forward_seg::<YP, XP>(y, x0, x1, f, out)
        }
    }

    /// One segment `[x0, x1)` of row `y`. Every array is cut to the segment's length first, so
    /// the loop over `x` has no index arithmetic or bounds checks and vectorises; the y-layer
    /// profiles are constants of the row.
    #[inline(always)]
    fn forward_seg<const YP: bool, const XP: bool>(
        &self,
        y: usize,
        x0: usize,
        x1: usize,
        f: Fields<'_, T>,
        out: &mut RowOut<'_, T>,
    ) {
        if x1 <= x0 {
            return;
        }
        let (nx, n, i0) = (self.nx, x1 - x0, y * self.nx + x0);
        let c = &self.c;
        let one = T::ONE;
        let empty: &[T] = &[];
        let mid = &f.u[i0..i0 + n];
        let ups: [&[T]; R] = std::array::from_fn(|k| &f.u[i0 - (k + 1) * nx..][..n]);
        let downs: [&[T]; R] = std::array::from_fn(|k| &f.u[i0 + (k + 1) * nx..][..n]);
        let lefts: [&[T]; R] = std::array::from_fn(|k| &f.u[i0 - k - 1..][..n]);
        let rights: [&[T]; R] = std::array::from_fn(|k| &f.u[i0 + k + 1..][..n]);
        let w = &mut out.w[x0..x1];
        // y layer: ψ_y at the neighbours, the row's profile values.
        let (py_up, py_down, py_mid): ([&[T]; R], [&[T]; R], &[T]) = if YP {
            (
                std::array::from_fn(|k| &f.psi_y[i0 - (k + 1) * nx..][..n]),
                std::array::from_fn(|k| &f.psi_y[i0 + (k + 1) * nx..][..n]),
                &f.psi_y[i0..i0 + n],
            )
        } else {
            ([empty; R], [empty; R], empty)
        };
        let (ay_up, ay_down): ([T; R], [T; R]) = if YP {
            (
                std::array::from_fn(|k| self.y.a[y - k - 1]),
                std::array::from_fn(|k| self.y.a[y + k + 1]),
            )
        } else {
            ([T::ZERO; R], [T::ZERO; R])
        };
        let (ay, by, dby) = if YP {
            (self.y.a[y], self.y.b[y], self.y.db[y])
        } else {
            (T::ZERO, T::ZERO, T::ZERO)
        };
        let (psi_yn, zeta_y): (&mut [T], &mut [T]) = if YP {
            (&mut out.psi_yn[x0..x1], &mut out.zeta_y[x0..x1])
        } else {
            (&mut [], &mut [])
        };
        // x layer: ψ_x at the neighbours and the profiles, all varying along the row.
        let (px_left, px_right, px_mid): ([&[T]; R], [&[T]; R], &[T]) = if XP {
            (
                std::array::from_fn(|k| &f.psi_x[i0 - k - 1..][..n]),
                std::array::from_fn(|k| &f.psi_x[i0 + k + 1..][..n]),
                &f.psi_x[i0..i0 + n],
            )
        } else {
            ([empty; R], [empty; R], empty)
        };
        let (ax_left, ax_right): ([&[T]; R], [&[T]; R]) = if XP {
            (
                std::array::from_fn(|k| &self.x.a[x0 - k - 1..][..n]),
                std::array::from_fn(|k| &self.x.a[x0 + k + 1..][..n]),
            )
        } else {
            ([empty; R], [empty; R])
        };
        let (ax, bx, dbx) = if XP {
            (&self.x.a[x0..x1], &self.x.b[x0..x1], &self.x.db[x0..x1])
        } else {
            (empty, empty, empty)
        };
        let (psi_xn, zeta_x): (&mut [T], &mut [T]) = if XP {
            (&mut out.psi_xn[x0..x1], &mut out.zeta_x[x0..x1])
        } else {
            (&mut [], &mut [])
        };
        for x in 0..n {
            let u0 = mid[x];
            let wy = if YP {
                let (mut d1, mut d2, mut ap) = (T::ZERO, T::ZERO, T::ZERO);
                for k in 0..R {
                    let (p, m) = (downs[k][x], ups[k][x]);
                    d1 += c.d1[k] * (p - m);
                    d2 += c.d2[k] * ((p - u0) + (m - u0));
                    ap += c.d1[k] * (ay_down[k] * py_down[k][x] - ay_up[k] * py_up[k][x]);
                }
                let (d1, d2, ap) = (d1 * c.rdy, d2 * c.rdy2, ap * c.rdy);
                let tmp = (one + by) * d2 + dby * d1 + ap;
                let z = zeta_y[x];
                psi_yn[x] = by * d1 + ay * py_mid[x];
                zeta_y[x] = by * tmp + ay * z;
                (one + by) * tmp + ay * z
            } else {
                let mut d2 = T::ZERO;
                for k in 0..R {
                    d2 += c.d2[k] * ((downs[k][x] - u0) + (ups[k][x] - u0));
                }
                d2 * c.rdy2
            };
            let wx = if XP {
                let (mut d1, mut d2, mut ap) = (T::ZERO, T::ZERO, T::ZERO);
                for k in 0..R {
                    let (p, m) = (rights[k][x], lefts[k][x]);
                    d1 += c.d1[k] * (p - m);
                    d2 += c.d2[k] * ((p - u0) + (m - u0));
                    ap +=
                        c.d1[k] * (ax_right[k][x] * px_right[k][x] - ax_left[k][x] * px_left[k][x]);
                }
                let (d1, d2, ap) = (d1 * c.rdx, d2 * c.rdx2, ap * c.rdx);
                let (a, b) = (ax[x], bx[x]);
                let tmp = (one + b) * d2 + dbx[x] * d1 + ap;
                let z = zeta_x[x];
                psi_xn[x] = b * d1 + a * px_mid[x];
                zeta_x[x] = b * tmp + a * z;
                (one + b) * tmp + a * z
            } else {
                let mut d2 = T::ZERO;
                for k in 0..R {
                    d2 += c.d2[k] * ((rights[k][x] - u0) + (lefts[k][x] - u0));
                }
                d2 * c.rdx2
            };
            w[x] = wy + wx;
        }
    }

    /// One segment of the adjoint row, cut into equal-length slices like [`Self::forward_seg`].
    #[inline(always)]
    fn adjoint_seg<const YP: bool, const XP: bool>(
        &self,
        y: usize,
        x0: usize,
        x1: usize,
        f: Fields<'_, T>,
        out: &mut RowOut<'_, T>,
    ) {
        if x1 <= x0 {
            return;
        }
        let (nx, n, i0) = (self.nx, x1 - x0, y * self.nx + x0);
        let c = &self.c;
        let one = T::ONE;
        let empty: &[T] = &[];
        let mid = &f.u[i0..i0 + n];
        let ups: [&[T]; R] = std::array::from_fn(|k| &f.u[i0 - (k + 1) * nx..][..n]);
        let downs: [&[T]; R] = std::array::from_fn(|k| &f.u[i0 + (k + 1) * nx..][..n]);
        let lefts: [&[T]; R] = std::array::from_fn(|k| &f.u[i0 - k - 1..][..n]);
        let rights: [&[T]; R] = std::array::from_fn(|k| &f.u[i0 + k + 1..][..n]);
        let w = &mut out.w[x0..x1];
        // y layer: ψ_y, ζ_y at the neighbours; the profiles are constants of each row.
        let (py_up, py_down, py_mid): Around<'_, T, R> = if YP {
            around(f.psi_y, i0, nx, n)
        } else {
            ([empty; R], [empty; R], empty)
        };
        let (zy_up, zy_down, zy_mid): Around<'_, T, R> = if YP {
            around(f.zeta_y, i0, nx, n)
        } else {
            ([empty; R], [empty; R], empty)
        };
        let row = |r: usize| (one + self.y.b[r], self.y.b[r], self.y.db[r]);
        let zero = (T::ZERO, T::ZERO, T::ZERO);
        let y_up: [(T, T, T); R] = if YP {
            std::array::from_fn(|k| row(y - k - 1))
        } else {
            [zero; R]
        };
        let y_down: [(T, T, T); R] = if YP {
            std::array::from_fn(|k| row(y + k + 1))
        } else {
            [zero; R]
        };
        let (y_mid, ay) = if YP {
            (row(y), self.y.a[y])
        } else {
            ((T::ZERO, T::ZERO, T::ZERO), T::ZERO)
        };
        let (psi_yn, zeta_yn): (&mut [T], &mut [T]) = if YP {
            (&mut out.psi_yn[x0..x1], &mut out.zeta_y[x0..x1])
        } else {
            (&mut [], &mut [])
        };
        // x layer: ψ_x, ζ_x and the profiles at the neighbours.
        let (px_left, px_right, px_mid): Around<'_, T, R> = if XP {
            around(f.psi_x, i0, 1, n)
        } else {
            ([empty; R], [empty; R], empty)
        };
        let (zx_left, zx_right, zx_mid): Around<'_, T, R> = if XP {
            around(f.zeta_x, i0, 1, n)
        } else {
            ([empty; R], [empty; R], empty)
        };
        let (bx_left, bx_right, _): Around<'_, T, R> = if XP {
            around(self.x.b, x0, 1, n)
        } else {
            ([empty; R], [empty; R], empty)
        };
        let (dbx_left, dbx_right, _): Around<'_, T, R> = if XP {
            around(self.x.db, x0, 1, n)
        } else {
            ([empty; R], [empty; R], empty)
        };
        let (ax, bx) = if XP {
            (&self.x.a[x0..x1], &self.x.b[x0..x1])
        } else {
            (empty, empty)
        };
        let (psi_xn, zeta_xn): (&mut [T], &mut [T]) = if XP {
            (&mut out.psi_xn[x0..x1], &mut out.zeta_x[x0..x1])
        } else {
            (&mut [], &mut [])
        };
        for x in 0..n {
            let u0 = mid[x];
            let wy = if YP {
                // deepwave's PSI_TERM: (1 + b)·β + b·ζ at a neighbour.
                let (b1, b, _) = y_mid;
                let l0 = b1 * u0 + b * zy_mid[x];
                let q0 = b1 * l0;
                let (mut d1r, mut d2q, mut d1l) = (T::ZERO, T::ZERO, T::ZERO);
                for k in 0..R {
                    let (bp1, bp, dbp) = y_down[k];
                    let (bm1, bm, dbm) = y_up[k];
                    let lp = bp1 * downs[k][x] + bp * zy_down[k][x];
                    let lm = bm1 * ups[k][x] + bm * zy_up[k][x];
                    let rp = dbp * lp + bp * py_down[k][x];
                    let rm = dbm * lm + bm * py_up[k][x];
                    d1r += c.d1[k] * (rp - rm);
                    d2q += c.d2[k] * ((bp1 * lp - q0) + (bm1 * lm - q0));
                    d1l += c.d1[k] * (lp - lm);
                }
                psi_yn[x] = -ay * (d1l * c.rdy) + ay * py_mid[x];
                zeta_yn[x] = ay * u0 + ay * zy_mid[x];
                -(d1r * c.rdy) + d2q * c.rdy2
            } else {
                let mut d2 = T::ZERO;
                for k in 0..R {
                    d2 += c.d2[k] * ((downs[k][x] - u0) + (ups[k][x] - u0));
                }
                d2 * c.rdy2
            };
            let wx = if XP {
                let (b1, b) = (one + bx[x], bx[x]);
                let l0 = b1 * u0 + b * zx_mid[x];
                let q0 = b1 * l0;
                let (mut d1r, mut d2q, mut d1l) = (T::ZERO, T::ZERO, T::ZERO);
                for k in 0..R {
                    let (bp, bm) = (bx_right[k][x], bx_left[k][x]);
                    let (bp1, bm1) = (one + bp, one + bm);
                    let lp = bp1 * rights[k][x] + bp * zx_right[k][x];
                    let lm = bm1 * lefts[k][x] + bm * zx_left[k][x];
                    let rp = dbx_right[k][x] * lp + bp * px_right[k][x];
                    let rm = dbx_left[k][x] * lm + bm * px_left[k][x];
                    d1r += c.d1[k] * (rp - rm);
                    d2q += c.d2[k] * ((bp1 * lp - q0) + (bm1 * lm - q0));
                    d1l += c.d1[k] * (lp - lm);
                }
                let a = ax[x];
                psi_xn[x] = -a * (d1l * c.rdx) + a * px_mid[x];
                zeta_xn[x] = a * u0 + a * zx_mid[x];
                -(d1r * c.rdx) + d2q * c.rdx2
            } else {
                let mut d2 = T::ZERO;
                for k in 0..R {
                    d2 += c.d2[k] * ((rights[k][x] - u0) + (lefts[k][x] - u0));
                }
                d2 * c.rdx2
            };
            w[x] = wy + wx;
        }
    }
}

/// The interior's hot loop: the plain Laplacian `w = ∂²_y u + ∂²_x u` of row `y` over `[x0, x1)`
/// and the leapfrog update `new = vv·w + 2u − new` in one pass, with deepwave's operations in
/// deepwave's order (neighbour-minus-centre differences, no fused multiply-adds), so every
/// instruction set gives the same bits.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn laplacian_leapfrog<T: Float, const R: usize>(
    c: &Coefs<T, R>,
    u: &[T],
    nx: usize,
    y: usize,
    x0: usize,
    x1: usize,
    w: &mut [T],
    leap: &mut Leapfrog<'_, T>,
) {
    if x1 <= x0 {
        return;
    }
    let n = x1 - x0;
    // Whole windows of `LAYER_CHUNK` cells run vectorised; LLVM would run the rest (up to 15 cells
    // of a row, a scalar epilogue about as slow as the ~35 vector iterations of a 600-cell row)
    // cell by cell, so the row's final `LAYER_CHUNK` cells are recomputed as one vector into a
    // scratch and only the cells past the whole windows are kept. The same loop on the same inputs
    // gives the same bits, and the update, which reads the previous level, is never applied twice
    // to a cell.
    let whole = if n >= LAYER_CHUNK {
        n - n % LAYER_CHUNK
    } else {
        n
    };
    let vv = &leap.vv[x0..x1];
    let new = &mut leap.new[x0..x1];
    let w = &mut w[x0..x1];
    Window::<T, R>::new(u, nx, y, x0, whole, vv).run(c, &mut w[..whole], &mut new[..whole]);
    if whole < n {
        let start = n - LAYER_CHUNK;
        let keep = whole - start;
        let mut wt = [T::ZERO; LAYER_CHUNK];
        let mut nt = [T::ZERO; LAYER_CHUNK];
        nt[keep..].copy_from_slice(&new[whole..]);
        Window::<T, R>::new(u, nx, y, x0 + start, LAYER_CHUNK, &vv[start..])
            .run(c, &mut wt, &mut nt);
        w[whole..].copy_from_slice(&wt[keep..]);
        new[whole..].copy_from_slice(&nt[keep..]);
    }
}

/// The inputs of [`laplacian_leapfrog`] over a run of cells, every slice of the run's length.
struct Window<'a, T, const R: usize> {
    mid: &'a [T],
    ups: [&'a [T]; R],
    downs: [&'a [T]; R],
    lefts: [&'a [T]; R],
    rights: [&'a [T]; R],
    vv: &'a [T],
}

impl<'a, T: Float, const R: usize> Window<'a, T, R> {
    /// Cells `[x, x + len)` of row `y`.
    #[inline(always)]
    fn new(u: &'a [T], nx: usize, y: usize, x: usize, len: usize, vv: &'a [T]) -> Self {
        let row = &u[y * nx..(y + 1) * nx];
        Window {
            mid: &row[x..][..len],
            ups: std::array::from_fn(|k| &u[(y - k - 1) * nx + x..][..len]),
            downs: std::array::from_fn(|k| &u[(y + k + 1) * nx + x..][..len]),
            lefts: std::array::from_fn(|k| &row[x - k - 1..][..len]),
            rights: std::array::from_fn(|k| &row[x + k + 1..][..len]),
            vv: &vv[..len],
        }
    }

    /// The Laplacian into `w` and the update `new = vv·w + 2u − new`, cell by cell.
    #[inline(always)]
    fn run(&self, c: &Coefs<T, R>, w: &mut [T], new: &mut [T]) {
        let n = self.mid.len();
        let (w, new) = (&mut w[..n], &mut new[..n]);
        for i in 0..n {
            let u0 = self.mid[i];
            let mut dy = T::ZERO;
            let mut dx = T::ZERO;
            for k in 0..R {
                dy += c.d2[k] * ((self.downs[k][i] - u0) + (self.ups[k][i] - u0));
                dx += c.d2[k] * ((self.rights[k][i] - u0) + (self.lefts[k][i] - u0));
            }
            let wi = dy * c.rdy2 + dx * c.rdx2;
            w[i] = wi;
            new[i] = self.vv[i] * wi + T::TWO * u0 - new[i];
        }
    }
}

/// [`laplacian_leapfrog`] on its own (the time reversal of boundary saving), compiled for `isa`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn laplacian_leapfrog_on<T: Float, const R: usize>(
    isa: Isa,
    c: &Coefs<T, R>,
    u: &[T],
    nx: usize,
    y: usize,
    x0: usize,
    x1: usize,
    w: &mut [T],
    leap: &mut Leapfrog<'_, T>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        fn avx512<T: Float, const R: usize>(
            c: &Coefs<T, R>,
            u: &[T],
            nx: usize,
            y: usize,
            x0: usize,
            x1: usize,
            w: &mut [T],
            leap: &mut Leapfrog<'_, T>,
        ) {
            laplacian_leapfrog(c, u, nx, y, x0, x1, w, leap)
        }
        #[target_feature(enable = "avx2")]
        #[allow(clippy::too_many_arguments)]
        fn avx2<T: Float, const R: usize>(
            c: &Coefs<T, R>,
            u: &[T],
            nx: usize,
            y: usize,
            x0: usize,
            x1: usize,
            w: &mut [T],
            leap: &mut Leapfrog<'_, T>,
        ) {
            laplacian_leapfrog(c, u, nx, y, x0, x1, w, leap)
        }
        match isa {
            // SAFETY: `Isa::detect` returns these only when the CPU supports the instructions.
            Isa::Avx512 => return unsafe { avx512(c, u, nx, y, x0, x1, w, leap) },
            Isa::Avx2 => return unsafe { avx2(c, u, nx, y, x0, x1, w, leap) },
            Isa::Baseline => {}
        }
    }
    laplacian_leapfrog(c, u, nx, y, x0, x1, w, leap)
}

/// The leapfrog update of `[x0, x1)` of a row from its `w`.
#[inline(always)]
fn leapfrog_segment<T: Float>(
    leap: &mut Leapfrog<'_, T>,
    w: &[T],
    cur: &[T],
    x0: usize,
    x1: usize,
) {
    if x1 > x0 {
        leapfrog_generic(
            &leap.vv[x0..x1],
            &w[x0..x1],
            &cur[x0..x1],
            &mut leap.new[x0..x1],
        );
    }
}

/// `new = v·w + 2·cur − new` over a row segment (the leapfrog update; `new` holds the previous
/// level on entry). A plain loop on purpose: LLVM vectorises it four vectors at a time with a
/// one-vector epilogue loop, which covers a 33-cell layer segment; a loop over fixed 16-cell
/// chunks was vectorised across the chunks with gathers and scatters, several times slower.
#[inline(always)]
pub(crate) fn leapfrog_generic<T: Float>(v: &[T], w: &[T], cur: &[T], new: &mut [T]) {
    let n = new.len();
    let (v, w, cur) = (&v[..n], &w[..n], &cur[..n]);
    for i in 0..n {
        new[i] = v[i] * w[i] + T::TWO * cur[i] - new[i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in [-1, 1) from a fixed-seed xorshift, with exponents spread so that roundings differ.
    fn field<T: Float>(n: usize, seed: u64) -> Vec<T> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let unit = (s >> 11) as f64 / (1u64 << 53) as f64;
                T::from_f64((2.0 * unit - 1.0) * (1.0 + (s % 7) as f64))
            })
            .collect()
    }

    /// Every row width from 1 to 70 cells, every instruction set the CPU has, f32 and f64, accuracy
    /// 4 and 8: the windowed kernel writes exactly the bits of a plain cell-by-cell loop, touches
    /// no cell outside `[x0, x1)`, and applies the update once per cell.
    fn check<T: Float, const R: usize>() {
        let c = Coefs::<T, R>::new(
            [0.3; R].map(|x| x / 3.0),
            [0.7; R].map(|x| -x / 7.0),
            [0.11, 0.13, 1.7, 1.9],
        );
        let isas: Vec<Isa> = [Isa::Baseline, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&isa| match isa {
                Isa::Baseline => true,
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
                #[cfg(not(target_arch = "x86_64"))]
                _ => false,
            })
            .collect();
        let nz = 2 * R + 1;
        for width in 1..=70 {
            let nx = width + 2 * R + 3;
            let (x0, x1, y) = (R + 1, R + 1 + width, R);
            let u = field::<T>(nz * nx, width as u64);
            let vv = field::<T>(nx, 1000 + width as u64);
            let prev = field::<T>(nx, 2000 + width as u64);
            let mut w_ref = vec![T::ZERO; nx];
            let mut new_ref = prev.clone();
            for x in x0..x1 {
                let u0 = u[y * nx + x];
                let (mut dy, mut dx) = (T::ZERO, T::ZERO);
                for k in 0..R {
                    let (up, down) = (u[(y - k - 1) * nx + x], u[(y + k + 1) * nx + x]);
                    let (left, right) = (u[y * nx + x - k - 1], u[y * nx + x + k + 1]);
                    dy += c.d2[k] * ((down - u0) + (up - u0));
                    dx += c.d2[k] * ((right - u0) + (left - u0));
                }
                let wi = dy * c.rdy2 + dx * c.rdx2;
                w_ref[x] = wi;
                new_ref[x] = vv[x] * wi + T::TWO * u0 - prev[x];
            }
            for &isa in &isas {
                let mut w = vec![T::ZERO; nx];
                let mut new = prev.clone();
                let mut leap = Leapfrog {
                    vv: &vv,
                    new: &mut new,
                };
                laplacian_leapfrog_on(isa, &c, &u, nx, y, x0, x1, &mut w, &mut leap);
                let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&w),
                    bits(&w_ref),
                    "w, width {width}, {isa:?}, {}",
                    T::NAME
                );
                assert_eq!(
                    bits(&new),
                    bits(&new_ref),
                    "new, width {width}, {isa:?}, {}",
                    T::NAME
                );
            }
        }
    }

    #[test]
    fn interior_tail_window_gives_the_bits_of_a_cell_by_cell_loop() {
        check::<f32, 2>();
        check::<f32, 4>();
        check::<f64, 2>();
        check::<f64, 4>();
    }
}
