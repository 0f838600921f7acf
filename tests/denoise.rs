//! Classical denoisers: wavelet transform properties and PyWavelets parity, the TV prox's optimality,
//! median and Gaussian against brute-force references, and configs built from TOML.
//!
//! PyWavelets reference values were computed with PyWavelets 1.9 / numpy (float64) from the same
//! inputs as [`signal`] (rounded to f32 first), with `pywt.wavedec2`/`wavedecn(..., mode=
//! "periodization")`, thresholding of every detail band, and `waverec2`/`waverecn`, cropped to the
//! input size.

// Reference values are printed with 8 significant digits, more than f32 holds.
#![allow(clippy::excessive_precision)]

use tessera::denoise::wavelet::wavedec;
use tessera::denoise::{
    Denoiser, DenoiserConfig, GaussianDenoiser, MedianFilter, Threshold, TvConfig, TvDenoiser,
    WaveletDenoiser, WaveletKind,
};
use tessera::{Error, Tensor};

const WAVELETS: [WaveletKind; 3] = [WaveletKind::Haar, WaveletKind::Db4, WaveletKind::Db8];

/// `sin(0.37 i) + 0.5 cos(1.91 i)` over the flat index: smooth enough to have structure, rough enough
/// to have large detail coefficients.
fn signal(shape: &[usize]) -> Tensor {
    Tensor::from_fn(shape, |i| {
        let i = i as f64;
        ((0.37 * i).sin() + 0.5 * (1.91 * i).cos()) as f32
    })
}

/// Deterministic pseudo-random values in [−1, 1) (a small LCG; no dependence on `rand`'s versions).
fn noise(shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    Tensor::from_fn(shape, |_| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    })
}

fn wavelet(kind: WaveletKind, levels: usize, threshold: Threshold) -> WaveletDenoiser {
    WaveletDenoiser {
        wavelet: kind,
        levels,
        threshold,
    }
}

fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol, "{what}[{i}]: got {g}, want {w}");
    }
}

// ---------------------------------------------------------------- wavelets

#[test]
fn wavelet_2d_odd_size_matches_pywavelets() {
    #[rustfmt::skip]
    let want = [
        3.5852864e-01, 3.3529719e-01, 6.3403430e-01, 9.8419469e-01, 7.9878402e-01, 5.7105941e-01,
        6.8670409e-01, 6.5166622e-01, -1.6004219e-01, 3.5205215e-02, -6.5714791e-02, -7.9730606e-01,
        -9.4027503e-01, -4.9425184e-01, -7.9366177e-01, -8.3058974e-01, -3.4641314e-01, 3.3109201e-02,
        2.0695907e-02, 5.5130810e-01, 7.7122187e-01, 6.4557034e-01, 8.4659083e-01, 9.3347673e-01,
        2.8625900e-01, -1.2304720e-01, 3.1181346e-01, -3.3743838e-01, -8.0449325e-01, -7.3825703e-01,
        -6.2328913e-01, -1.0792703e+00, -5.6335004e-01, 6.6230118e-02, 4.3173137e-02, -9.3600904e-02,
        7.7578879e-01, 7.3284302e-01, 8.3642691e-01, 9.9476816e-01, 6.6390401e-01, 2.1584133e-02,
        2.0787110e-02, -1.0263855e-01, -9.3195743e-01, -6.2200519e-01, -4.5123032e-01, -7.7928056e-01,
        -1.0104574e+00, -1.4322697e-01, -1.2484854e-01, -2.7917115e-01, 3.1450252e-01, 9.7524453e-01,
        5.2155768e-01, 7.9565424e-01, 1.0779262e+00, 5.1404809e-01, 2.4489827e-01, 5.3100759e-01,
        -2.4153476e-01, -8.3226461e-01, -3.7735631e-01,
    ];
    let x = signal(&[1, 1, 7, 9]);
    let y = wavelet(WaveletKind::Db4, 3, Threshold::Soft)
        .denoise(&x, 0.3)
        .unwrap();
    assert_close(y.data(), &want, 2e-5, "db4 soft 7×9");
}

#[test]
fn wavelet_approximation_matches_pywavelets_alignment() {
    // pywt.wavedec2(x, "db8", mode="periodization", level=2)[0] on a 12×10 input.
    #[rustfmt::skip]
    let want = [
        1.7404660e-01, -1.8244997e-01, -2.9097792e-01, 1.9638056e-01, -9.9679277e-02,
        -1.0896175e-01, 1.1494792e-01, -9.5243724e-02, -1.5457800e-01,
    ];
    let x = signal(&[12, 10]);
    let c = wavedec(x.data(), &[12, 10], WaveletKind::Db8, 2).unwrap();
    assert_eq!(c.approx_dims(), vec![3, 3]);
    assert_close(c.approx(), &want, 2e-5, "db8 approximation");
}

#[test]
fn wavelet_3d_matches_pywavelets() {
    let x = signal(&[1, 1, 5, 6, 7]);
    let picks = [0usize, 17, 50, 101, 150, 209];
    // (wavelet, levels, threshold, ths, values at `picks`, Σ y²)
    let cases = [
        (
            WaveletKind::Haar,
            2,
            Threshold::Hard,
            0.4,
            [
                6.5824749e-01,
                -4.5853773e-02,
                4.6962206e-03,
                -4.5625788e-01,
                -1.3726651e+00,
                4.4630066e-01,
            ],
            1.2743221e+02,
        ),
        (
            WaveletKind::Db8,
            3,
            Threshold::Soft,
            0.2,
            [
                2.6825718e-01,
                2.1453586e-01,
                -8.6691674e-02,
                -3.7356725e-01,
                -1.0895660e+00,
                5.5694327e-01,
            ],
            9.6591287e+01,
        ),
    ];
    for (kind, levels, th, ths, want, energy) in cases {
        let y = wavelet(kind, levels, th).denoise(&x, ths).unwrap();
        assert_eq!(y.shape(), x.shape());
        let got: Vec<f32> = picks.iter().map(|&i| y.data()[i]).collect();
        assert_close(&got, &want, 2e-5, &format!("{kind:?} {th:?} 3-D"));
        assert!((y.norm_sq() - energy).abs() < 1e-5 * energy, "{kind:?}");
    }
}

#[test]
fn wavelet_reconstruction_is_exact_on_odd_sizes() {
    for kind in WAVELETS {
        for (dims, levels) in [
            (vec![37usize, 23], 3usize),
            (vec![5, 3], 4),
            (vec![1, 9], 2),
            (vec![9, 7, 11], 3),
            (vec![3, 17, 6], 2),
        ] {
            let x = noise(&dims, 7);
            let c = wavedec(x.data(), &dims, kind, levels).unwrap();
            let back = c.reconstruct();
            let err = back
                .iter()
                .zip(x.data())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < 1e-5, "{kind:?} {dims:?}: max error {err}");
        }
    }
}

#[test]
fn wavelet_transform_preserves_energy() {
    // Divisible by 2^levels: no odd-size extension, so Ψ is exactly orthonormal — also when the
    // coarse levels are shorter than the filter (8×8 with db8).
    for kind in WAVELETS {
        for (dims, levels) in [
            (vec![32usize, 48], 3usize),
            (vec![8, 8], 3),
            (vec![8, 16, 8], 3),
            (vec![4, 4, 4], 2),
        ] {
            let x = noise(&dims, 3);
            let c = wavedec(x.data(), &dims, kind, levels).unwrap();
            assert_eq!(c.levels(), levels);
            let (ex, ec) = (x.norm_sq(), c.norm_sq());
            assert!(
                (ex - ec).abs() < 1e-5 * ex,
                "{kind:?} {dims:?}: ‖x‖² = {ex}, ‖Ψx‖² = {ec}"
            );
        }
    }
}

#[test]
fn wavelet_zero_threshold_is_identity() {
    for kind in WAVELETS {
        for th in [Threshold::Soft, Threshold::Hard] {
            for shape in [[2usize, 3, 19, 26].as_slice(), &[1, 2, 7, 10, 5]] {
                let x = noise(shape, 11);
                let y = wavelet(kind, 3, th).denoise(&x, 0.0).unwrap();
                assert!(y.max_abs_diff(&x) < 1e-5, "{kind:?} {th:?} {shape:?}");
            }
        }
    }
}

#[test]
fn wavelet_soft_and_hard_act_on_details_only() {
    // On an exactly orthonormal size, Ψ(D(x)) = ρ(Ψx): read the thresholding back in the coefficients.
    let ths = 0.3f32;
    let dims = [32usize, 32];
    let x = signal(&[1, 1, 32, 32]).add(&noise(&[1, 1, 32, 32], 5).scaled(0.3));
    let cx = wavedec(x.data(), &dims, WaveletKind::Db4, 2).unwrap();
    let dx = cx.details();
    assert!(dx.iter().any(|d| d.abs() > ths) && dx.iter().any(|d| d.abs() < ths));
    for th in [Threshold::Soft, Threshold::Hard] {
        let y = wavelet(WaveletKind::Db4, 2, th).denoise(&x, ths).unwrap();
        let cy = wavedec(y.data(), &dims, WaveletKind::Db4, 2).unwrap();
        assert_close(cy.approx(), cx.approx(), 1e-5, "approximation untouched");
        for (i, (&a, &b)) in dx.iter().zip(&cy.details()).enumerate() {
            let want = match th {
                Threshold::Soft => a.signum() * (a.abs() - ths).max(0.0),
                Threshold::Hard => {
                    if a.abs() < ths {
                        0.0
                    } else {
                        a
                    }
                }
            };
            assert!(
                (b - want).abs() < 1e-5,
                "{th:?} coefficient {i}: {a} → {b}, want {want}"
            );
        }
    }
    // Soft shrinks every surviving coefficient, hard keeps them: hard stays closer to x.
    let soft = wavelet(WaveletKind::Db4, 2, Threshold::Soft)
        .denoise(&x, ths)
        .unwrap();
    let hard = wavelet(WaveletKind::Db4, 2, Threshold::Hard)
        .denoise(&x, ths)
        .unwrap();
    assert!(hard.sub(&x).norm() < soft.sub(&x).norm());
}

#[test]
fn wavelet_keeps_constants_and_planes_independent() {
    let c = Tensor::full(&[1, 1, 13, 22], 0.7);
    for kind in WAVELETS {
        let y = wavelet(kind, 3, Threshold::Soft).denoise(&c, 10.0).unwrap();
        assert!(y.max_abs_diff(&c) < 1e-5, "{kind:?}");
    }
    // A batch equals its planes denoised one by one.
    let x = noise(&[2, 3, 17, 12], 9);
    let d = wavelet(WaveletKind::Db8, 3, Threshold::Hard);
    let y = d.denoise(&x, 0.25).unwrap();
    for p in 0..6 {
        let one = Tensor::from_vec(&[1, 1, 17, 12], x.plane(p).to_vec()).unwrap();
        let want = d.denoise(&one, 0.25).unwrap();
        assert_eq!(y.plane(p), want.data(), "plane {p}");
    }
}

// ---------------------------------------------------------------- total variation

/// ½‖u − y‖² + ths·Σ_p ‖(∇u)_p‖₂ with forward differences (zero at the last sample), per plane.
fn tv_objective(u: &Tensor, y: &Tensor, ths: f32) -> f64 {
    let dims = u.spatial().to_vec();
    let strides: Vec<usize> = (0..dims.len())
        .map(|a| dims[a + 1..].iter().product())
        .collect();
    let mut total = 0.5 * u.sub(y).norm_sq();
    for plane in u.planes() {
        for p in 0..plane.len() {
            let mut sq = 0.0f64;
            for a in 0..dims.len() {
                let i = (p / strides[a]) % dims[a];
                if i + 1 < dims[a] {
                    sq += ((plane[p + strides[a]] - plane[p]) as f64).powi(2);
                }
            }
            total += ths as f64 * sq.sqrt();
        }
    }
    total
}

fn tv() -> TvDenoiser {
    TvConfig::default().build().unwrap()
}

#[test]
fn tv_output_minimises_the_objective() {
    for shape in [[1usize, 2, 24, 20].as_slice(), &[1, 1, 8, 10, 9]] {
        let y = signal(shape).add(&noise(shape, 1).scaled(0.3));
        let ths = 0.15;
        let u = tv().denoise(&y, ths).unwrap();
        let fu = tv_objective(&u, &y, ths);
        assert!(fu < tv_objective(&y, &y, ths), "{shape:?}");
        // Near-optimality: small perturbations do not decrease F (F is 1-strongly convex, so a
        // perturbation δ raises it by about ½‖δ‖², far above the solver's residual).
        for seed in 0..4 {
            let delta = noise(shape, 100 + seed).scaled(0.02);
            let f = tv_objective(&u.add(&delta), &y, ths);
            assert!(f > fu, "{shape:?} seed {seed}: F(u+δ) = {f} < F(u) = {fu}");
        }
        // The solution keeps the mean of every plane (∇ᵀ sums to zero).
        for (pu, py) in u.planes().zip(y.planes()) {
            let (su, sy): (f32, f32) = (pu.iter().sum(), py.iter().sum());
            assert!((su - sy).abs() < 1e-3, "{shape:?}: mean moved {sy} → {su}");
        }
    }
}

#[test]
fn tv_constant_is_a_fixed_point_and_zero_ths_is_identity() {
    let c = Tensor::full(&[1, 1, 16, 16], -0.4);
    let y = tv().denoise(&c, 0.5).unwrap();
    assert!(y.max_abs_diff(&c) < 1e-6);
    let x = noise(&[1, 3, 9, 9], 4);
    assert_eq!(tv().denoise(&x, 0.0).unwrap(), x);
}

#[test]
fn tv_larger_threshold_gives_smoother_output() {
    let shape = [1usize, 1, 32, 32];
    let y = signal(&shape).add(&noise(&shape, 2).scaled(0.2));
    let total_variation = |u: &Tensor| tv_objective(u, u, 1.0);
    let mut last = total_variation(&y);
    for ths in [0.02f32, 0.1, 0.5] {
        let u = tv().denoise(&y, ths).unwrap();
        let now = total_variation(&u);
        assert!(now < last, "ths {ths}: TV {now} ≥ {last}");
        last = now;
    }
}

#[test]
fn tv_denoises_a_piecewise_constant_image() {
    let shape = [1usize, 1, 48, 48];
    let clean = Tensor::from_fn(&shape, |i| {
        let (r, c) = (i / 48, i % 48);
        if (12..36).contains(&r) && (10..30).contains(&c) {
            1.0
        } else {
            0.0
        }
    });
    let noisy = clean.add(&noise(&shape, 8).scaled(0.3));
    let den = tv().denoise(&noisy, 0.15).unwrap();
    let (e_in, e_out) = (noisy.sub(&clean).norm(), den.sub(&clean).norm());
    assert!(e_out < 0.5 * e_in, "error {e_in} → {e_out}");
}

// ---------------------------------------------------------------- median

/// Brute-force median with whole-sample reflection, for 2-D and 3-D planes.
fn median_reference(x: &Tensor, k: usize) -> Tensor {
    let reflect = |i: isize, n: usize| -> usize {
        if n == 1 {
            return 0;
        }
        let p = 2 * (n as isize - 1);
        let r = i.rem_euclid(p);
        (if r < n as isize { r } else { p - r }) as usize
    };
    let sp = x.spatial().to_vec();
    let (d, h, w) = if sp.len() == 3 {
        (sp[0], sp[1], sp[2])
    } else {
        (1, sp[0], sp[1])
    };
    let rd = if sp.len() == 3 { k as isize / 2 } else { 0 };
    let r = k as isize / 2;
    let mut out = x.zeros_like();
    let n = x.plane_len();
    for (pi, plane) in x.planes().enumerate() {
        for z in 0..d {
            for y in 0..h {
                for c in 0..w {
                    let mut v = Vec::new();
                    for dz in -rd..=rd {
                        for dy in -r..=r {
                            for dc in -r..=r {
                                let zz = reflect(z as isize + dz, d);
                                let yy = reflect(y as isize + dy, h);
                                let cc = reflect(c as isize + dc, w);
                                v.push(plane[(zz * h + yy) * w + cc]);
                            }
                        }
                    }
                    v.sort_by(f32::total_cmp);
                    out.data_mut()[pi * n + (z * h + y) * w + c] = v[v.len() / 2];
                }
            }
        }
    }
    out
}

#[test]
fn median_matches_brute_force_with_reflect_borders() {
    for (shape, k) in [
        (vec![2usize, 2, 6, 5], 3usize),
        (vec![1, 1, 6, 5], 5),
        (vec![1, 1, 3, 3], 7),
        (vec![1, 2, 4, 5, 3], 3),
        (vec![1, 1, 2, 6, 6], 5),
    ] {
        let x = noise(&shape, 21);
        let y = MedianFilter { kernel_size: k }.denoise(&x, 0.0).unwrap();
        assert_eq!(y, median_reference(&x, k), "{shape:?} k={k}");
    }
}

#[test]
fn median_removes_impulses_and_ignores_sigma() {
    let mut x = Tensor::full(&[1, 1, 9, 9], 0.5);
    x.data_mut()[4 * 9 + 4] = 100.0;
    x.data_mut()[0] = -50.0;
    let m = MedianFilter { kernel_size: 3 };
    let y = m.denoise(&x, 0.1).unwrap();
    assert_eq!(y, Tensor::full(&[1, 1, 9, 9], 0.5));
    assert_eq!(m.denoise(&x, 5.0).unwrap(), y);
    let x = noise(&[1, 1, 5, 4], 2);
    assert_eq!(MedianFilter { kernel_size: 1 }.denoise(&x, 0.0).unwrap(), x);
}

// ---------------------------------------------------------------- gaussian

#[test]
fn gaussian_matches_brute_force_convolution() {
    let k = tessera::denoise::gaussian::gaussian_kernel(1.2);
    let r = (k.len() / 2) as isize;
    let reflect = |i: isize, n: usize| -> usize {
        let p = 2 * (n as isize - 1);
        let m = i.rem_euclid(p);
        (if m < n as isize { m } else { p - m }) as usize
    };
    let (h, w) = (7usize, 11usize);
    let x = noise(&[1, 1, h, w], 6);
    let mut want = vec![0.0f32; h * w];
    for y in 0..h {
        for c in 0..w {
            let mut s = 0.0f64;
            for (i, ki) in k.iter().enumerate() {
                for (j, kj) in k.iter().enumerate() {
                    let yy = reflect(y as isize + i as isize - r, h);
                    let cc = reflect(c as isize + j as isize - r, w);
                    s += (*ki as f64) * (*kj as f64) * x.data()[yy * w + cc] as f64;
                }
            }
            want[y * w + c] = s as f32;
        }
    }
    let g = GaussianDenoiser {
        sigma_px: 1.2,
        px_per_sigma: 0.0,
    };
    assert_close(
        g.denoise(&x, 0.3).unwrap().data(),
        &want,
        1e-5,
        "gaussian 7×11",
    );
}

#[test]
fn gaussian_impulse_response_is_separable_in_3d() {
    let (d, h, w) = (15usize, 17usize, 19usize);
    let mut x = Tensor::zeros(&[1, 1, d, h, w]);
    x.data_mut()[(7 * h + 8) * w + 9] = 1.0;
    let g = GaussianDenoiser {
        sigma_px: 1.0,
        px_per_sigma: 0.0,
    };
    let y = g.denoise(&x, 0.0).unwrap();
    let k = tessera::denoise::gaussian::gaussian_kernel(1.0);
    let r = k.len() / 2;
    let at = |z: usize, yy: usize, c: usize| y.data()[(z * h + yy) * w + c];
    assert!((at(7, 8, 9) - k[r].powi(3)).abs() < 1e-7);
    assert!((at(6, 8, 11) - k[r - 1] * k[r] * k[r + 2]).abs() < 1e-7);
    let total: f32 = y.data().iter().sum();
    assert!((total - 1.0).abs() < 1e-5);
}

#[test]
fn gaussian_sigma_use_is_as_documented() {
    let x = noise(&[1, 2, 12, 14], 10);
    let fixed = GaussianDenoiser {
        sigma_px: 1.5,
        px_per_sigma: 0.0,
    };
    // px_per_sigma = 0: the call's σ is ignored.
    assert_eq!(
        fixed.denoise(&x, 0.0).unwrap(),
        fixed.denoise(&x, 0.8).unwrap()
    );
    // Otherwise std = sigma_px + px_per_sigma·σ.
    let scaled = GaussianDenoiser {
        sigma_px: 0.5,
        px_per_sigma: 2.0,
    };
    assert_eq!(
        scaled.denoise(&x, 0.5).unwrap(),
        fixed.denoise(&x, 0.0).unwrap()
    );
    // Zero width is the identity; constants are kept (normalised kernel, reflect boundary).
    let none = GaussianDenoiser {
        sigma_px: 0.0,
        px_per_sigma: 0.0,
    };
    assert_eq!(none.denoise(&x, 0.3).unwrap(), x);
    let c = Tensor::full(&[1, 1, 5, 6, 7], 2.0);
    assert!(fixed.denoise(&c, 0.0).unwrap().max_abs_diff(&c) < 1e-5);
}

// ---------------------------------------------------------------- shared behaviour

#[test]
fn configs_from_toml_build_working_denoisers() {
    let presets = [
        "kind = \"identity\"",
        "kind = \"tv\"\nn_it_max = 50",
        "kind = \"wavelet\"\nwavelet = \"haar\"\nlevels = 2\nthreshold = \"hard\"",
        "kind = \"median\"\nkernel_size = 5",
        "kind = \"gaussian\"\nsigma_px = 0.8",
    ];
    let x = signal(&[2, 1, 10, 13]);
    for text in presets {
        let cfg: DenoiserConfig = toml::from_str(text).unwrap();
        let d = cfg.build().unwrap();
        let y = d.denoise(&x, 0.1).unwrap();
        assert_eq!(y.shape(), x.shape(), "{}", d.name());
        y.check_finite(&d.name()).unwrap();
    }
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let denoisers: Vec<Box<dyn Denoiser>> = vec![
        Box::new(tv()),
        Box::new(wavelet(WaveletKind::Db8, 3, Threshold::Soft)),
        Box::new(MedianFilter { kernel_size: 3 }),
        Box::new(GaussianDenoiser {
            sigma_px: 1.0,
            px_per_sigma: 0.0,
        }),
    ];
    for d in &denoisers {
        assert!(
            d.denoise(&Tensor::zeros(&[4, 4]), 0.1).is_err(),
            "{}",
            d.name()
        );
        // Empty batches and one-pixel planes are fine.
        let empty = Tensor::zeros(&[0, 3, 8, 8]);
        assert_eq!(d.denoise(&empty, 0.1).unwrap().shape(), empty.shape());
        let dot = Tensor::full(&[1, 1, 1, 1], 3.0);
        let y = d.denoise(&dot, 0.1).unwrap();
        assert!(y.max_abs_diff(&dot) < 1e-6, "{}", d.name());
    }
    for d in &denoisers[..2] {
        let e = d.denoise(&Tensor::zeros(&[1, 1, 4, 4]), -0.1).unwrap_err();
        assert!(
            matches!(e, Error::InvalidConfig { .. }),
            "{}: {e}",
            d.name()
        );
    }
}

// ---------------------------------------------------------------- timings (not asserted)

/// Prints wall times on a 1024×1024×3 batch:
/// `cargo test --release --test denoise -- --ignored --nocapture timings`.
#[test]
#[ignore = "timing run; use --release"]
fn timings_1024x1024x3() {
    let x = signal(&[1, 3, 1024, 1024]).add(&noise(&[1, 3, 1024, 1024], 1).scaled(0.2));
    let cases: Vec<(Box<dyn Denoiser>, f32)> = vec![
        (
            Box::new(wavelet(WaveletKind::Haar, 3, Threshold::Soft)),
            0.1,
        ),
        (Box::new(wavelet(WaveletKind::Db4, 3, Threshold::Soft)), 0.1),
        (Box::new(wavelet(WaveletKind::Db8, 3, Threshold::Soft)), 0.1),
        (Box::new(wavelet(WaveletKind::Db8, 5, Threshold::Hard)), 0.1),
        (Box::new(MedianFilter { kernel_size: 3 }), 0.0),
        (Box::new(MedianFilter { kernel_size: 5 }), 0.0),
        (
            Box::new(GaussianDenoiser {
                sigma_px: 2.0,
                px_per_sigma: 0.0,
            }),
            0.0,
        ),
        (
            Box::new(TvDenoiser {
                n_it_max: 100,
                crit: 0.0,
                tau: 0.01,
                rho: 1.99,
            }),
            0.1,
        ),
    ];
    println!("rayon threads: {}", rayon::current_num_threads());
    for (d, sigma) in cases {
        let _ = d.denoise(&x, sigma).unwrap();
        let t = std::time::Instant::now();
        let reps = 3;
        for _ in 0..reps {
            let _ = d.denoise(&x, sigma).unwrap();
        }
        println!(
            "{:<36} {:>8.1} ms",
            d.name(),
            t.elapsed().as_secs_f64() * 1e3 / reps as f64
        );
    }
}
