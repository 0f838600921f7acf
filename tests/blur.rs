//! Blur operators: parity with deepinv 0.5.0 fixtures, exact adjoints (dot-product test) for every
//! padding, kernel parity and method, direct == FFT, closed-form operator norm, config errors.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tessera::physics::blur::{
    Blur, Blur3d, Blur3dConfig, BlurConfig, ConvMethod, Padding, gaussian_kernel,
    gaussian_kernel_3d,
};
use tessera::physics::{LinearPhysics, Physics, PhysicsConfig, adjoint_mismatch};
use tessera::{Error, Tensor};

fn fixture(name: &str) -> Tensor {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/deepinv")
        .join(name);
    tessera::io::read_npy(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// max |a − b| / max |b|.
fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.shape(), b.shape());
    let scale = b.data().iter().fold(0.0f32, |m, v| m.max(v.abs()));
    a.max_abs_diff(b) / scale
}

fn pseudo_random(shape: &[usize], seed: u32) -> Tensor {
    Tensor::from_fn(shape, |i| {
        let mut h = (i as u32).wrapping_mul(0x9E37_79B9) ^ seed.wrapping_mul(0x85EB_CA6B);
        h ^= h >> 15;
        h = h.wrapping_mul(0x2C1B_3C6D);
        h ^= h >> 12;
        (h % 20_001) as f32 / 10_000.0 - 1.0
    })
}

const PADDINGS: [Padding; 5] = [
    Padding::Valid,
    Padding::Circular,
    Padding::Replicate,
    Padding::Reflect,
    Padding::Constant,
];

fn padding_name(p: Padding) -> &'static str {
    match p {
        Padding::Valid => "valid",
        Padding::Circular => "circular",
        Padding::Replicate => "replicate",
        Padding::Reflect => "reflect",
        Padding::Constant => "constant",
    }
}

#[test]
fn gaussian_kernels_match_deepinv() {
    let cases: [([f32; 2], f32); 4] = [
        ([1.0, 1.0], 0.0),
        ([2.0, 0.5], 30.0),
        ([1.5, 3.5], 30.0),
        ([0.7, 2.3], 100.0),
    ];
    for (i, (sigma, angle)) in cases.iter().enumerate() {
        let want = fixture(&format!("gaussian_kernel_{i}.npy"));
        let got = gaussian_kernel(*sigma, *angle);
        assert_eq!(got.shape(), want.shape(), "kernel {i}");
        let err = got.max_abs_diff(&want);
        assert!(err <= 1e-6, "kernel {i}: max abs error {err}");
        eprintln!("gaussian kernel {i}: max abs error {err:e}");
    }
}

#[test]
fn blur_matches_deepinv_for_every_padding_kernel_and_method() {
    let x = fixture("blur_x.npy");
    let mut worst = 0.0f32;
    for padding in PADDINGS {
        for k in 0..3 {
            let kernel = fixture(&format!("gaussian_kernel_{k}.npy"));
            let stem = format!("blur_{}_{k}", padding_name(padding));
            let want_ax = fixture(&format!("{stem}_Ax.npy"));
            let v = fixture(&format!("{stem}_v.npy"));
            let want_atv = fixture(&format!("{stem}_ATv.npy"));
            for method in [ConvMethod::Direct, ConvMethod::Fft, ConvMethod::Auto] {
                let blur = Blur::with_method(kernel.clone(), padding, method).unwrap();
                let e_ax = rel_err(&blur.forward(&x).unwrap(), &want_ax);
                let e_atv = rel_err(&blur.adjoint(&v).unwrap(), &want_atv);
                assert!(e_ax <= 1e-5, "{stem} {method:?}: A error {e_ax}");
                assert!(e_atv <= 1e-5, "{stem} {method:?}: Aᵀ error {e_atv}");
                worst = worst.max(e_ax).max(e_atv);
            }
        }
    }
    eprintln!("worst relative error against deepinv: {worst:e}");
}

#[test]
fn even_kernel_centre_follows_deepinv_docstring_example() {
    // deepinv's Blur docstring: a 2×2 mean filter on a 16×16 image with one white pixel at (8, 8),
    // valid padding, shows ones at rows/cols 7..8 of the 15×15 output.
    let mut x = Tensor::zeros(&[1, 1, 16, 16]);
    x.data_mut()[8 * 16 + 8] = 1.0;
    for method in [ConvMethod::Direct, ConvMethod::Fft] {
        let blur =
            Blur::with_method(Tensor::full(&[1, 1, 2, 2], 0.25), Padding::Valid, method).unwrap();
        let y = blur.forward(&x).unwrap();
        assert_eq!(y.shape(), &[1, 1, 15, 15]);
        let at = |r: usize, c: usize| y.data()[r * 15 + c];
        for (r, c) in [(7, 7), (7, 8), (8, 7), (8, 8)] {
            assert!((at(r, c) - 0.25).abs() < 1e-6, "{method:?} ({r},{c})");
        }
        assert!(at(7, 9).abs() < 1e-6 && at(9, 7).abs() < 1e-6);
    }
}

fn kernel_2d(h: usize, w: usize, seed: u32) -> Tensor {
    // Positive and negative taps: a non-symmetric kernel catches flips and off-by-one centres.
    pseudo_random(&[1, 1, h, w], seed)
}

fn check_dot_2d(
    padding: Padding,
    kh: usize,
    kw: usize,
    h: usize,
    w: usize,
    method: ConvMethod,
    seed: u32,
) {
    let blur = Blur::with_method(kernel_2d(kh, kw, seed), padding, method).unwrap();
    let x_shape = [2, 2, h, w];
    let y_shape = blur.output_shape(&x_shape).unwrap();
    let x = pseudo_random(&x_shape, seed + 1);
    let y = pseudo_random(&y_shape, seed + 2);
    let mismatch = adjoint_mismatch(&blur, &x, &y).unwrap();
    assert!(
        mismatch <= 1e-5,
        "{padding:?} k={kh}×{kw} img={h}×{w} {method:?}: {mismatch:e}"
    );
}

fn padding_strategy() -> impl Strategy<Value = Padding> {
    prop::sample::select(PADDINGS.to_vec())
}

fn method_strategy() -> impl Strategy<Value = ConvMethod> {
    prop::sample::select(vec![ConvMethod::Direct, ConvMethod::Fft])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// ⟨Ax, y⟩ = ⟨x, Aᵀy⟩ for odd and even kernels and small odd images (down to the kernel's size),
    /// including kernels larger than the image for the non-valid paddings.
    #[test]
    fn blur_adjoint_is_exact(
        padding in padding_strategy(),
        method in method_strategy(),
        kh in 1usize..8, kw in 1usize..8,
        extra_h in 0usize..4, extra_w in 0usize..4,
        seed in 0u32..1000,
    ) {
        let (h, w) = if padding == Padding::Valid {
            // Odd image sizes at least as large as the kernel.
            ((kh + extra_h) | 1, (kw + extra_w) | 1)
        } else {
            ((1 + 2 * extra_h), (3 + 2 * extra_w))
        };
        check_dot_2d(padding, kh, kw, h, w, method, seed);
    }

    #[test]
    fn direct_and_fft_agree(
        padding in padding_strategy(),
        kh in 1usize..8, kw in 1usize..8,
        h in 7usize..45, w in 7usize..16,
        seed in 0u32..1000,
    ) {
        // h up to 44 includes primes above 31 (37, 41, 43), where circular FFT takes the padded path.
        let kernel = kernel_2d(kh, kw, seed);
        let direct = Blur::with_method(kernel.clone(), padding, ConvMethod::Direct).unwrap();
        let fft = Blur::with_method(kernel, padding, ConvMethod::Fft).unwrap();
        let x = pseudo_random(&[1, 3, h, w], seed + 1);
        let a = direct.forward(&x).unwrap();
        prop_assert!(rel_err(&fft.forward(&x).unwrap(), &a) < 1e-5);
        let y = pseudo_random(a.shape(), seed + 2);
        prop_assert!(rel_err(&fft.adjoint(&y).unwrap(), &direct.adjoint(&y).unwrap()) < 1e-5);
    }

    #[test]
    fn blur3d_adjoint_is_exact_and_methods_agree(
        circular in any::<bool>(),
        method in method_strategy(),
        kd in 1usize..5, kh in 1usize..5, kw in 1usize..5,
        extra in 0usize..3,
        seed in 0u32..1000,
    ) {
        let padding = if circular { Padding::Circular } else { Padding::Valid };
        let kernel = pseudo_random(&[1, 1, kd, kh, kw], seed);
        let blur = Blur3d::with_method(kernel.clone(), padding, method).unwrap();
        let x_shape = [1, 2, (kd + extra) | 1, (kh + extra + 1) | 1, (kw + 2 * extra) | 1];
        let x = pseudo_random(&x_shape, seed + 1);
        let y = pseudo_random(&blur.output_shape(&x_shape).unwrap(), seed + 2);
        let mismatch = adjoint_mismatch(&blur, &x, &y).unwrap();
        prop_assert!(mismatch <= 1e-5, "{padding:?} {method:?}: {mismatch:e}");
        let other = Blur3d::with_method(kernel, padding, ConvMethod::Direct).unwrap();
        prop_assert!(rel_err(&blur.forward(&x).unwrap(), &other.forward(&x).unwrap()) < 1e-5);
        prop_assert!(rel_err(&blur.adjoint(&y).unwrap(), &other.adjoint(&y).unwrap()) < 1e-5);
    }
}

/// An axis of one voxel between longer ones (`H = 1`): the FFT path on the volume's own grid (a
/// circular blur) is the direct one. Before, the FFT engine transformed depth along the wrong
/// stride on a `(D, 1, W)` grid (the device self-test's `4×1×6` case found it).
#[test]
fn blur3d_fft_is_direct_on_a_one_voxel_axis() {
    let kernel = pseudo_random(&[1, 1, 2, 3, 5], 21);
    for x_shape in [[2, 2, 4, 1, 6], [1, 1, 5, 1, 1], [1, 3, 6, 1, 8]] {
        let x = pseudo_random(&x_shape, 22);
        let [fft, direct] = [ConvMethod::Fft, ConvMethod::Direct]
            .map(|m| Blur3d::with_method(kernel.clone(), Padding::Circular, m).unwrap());
        let y = pseudo_random(&direct.output_shape(&x_shape).unwrap(), 23);
        let forward = rel_err(&fft.forward(&x).unwrap(), &direct.forward(&x).unwrap());
        let adjoint = rel_err(&fft.adjoint(&y).unwrap(), &direct.adjoint(&y).unwrap());
        assert!(
            forward < 1e-5 && adjoint < 1e-5,
            "{x_shape:?}: {forward:e}, {adjoint:e}"
        );
    }
}

#[test]
fn adjoint_holds_when_the_image_barely_exceeds_the_kernel() {
    for padding in PADDINGS {
        for method in [ConvMethod::Direct, ConvMethod::Fft] {
            for (k, n) in [(5, 5), (5, 7), (4, 5), (6, 7), (2, 3), (1, 1)] {
                check_dot_2d(padding, k, k, n, n, method, 7);
            }
        }
    }
}

#[test]
fn per_channel_kernels_act_per_channel() {
    let kernels = pseudo_random(&[1, 3, 3, 5], 11);
    let x = pseudo_random(&[2, 3, 9, 10], 12);
    for padding in PADDINGS {
        let blur = Blur::new(kernels.clone(), padding).unwrap();
        let y = blur.forward(&x).unwrap();
        let yv = pseudo_random(y.shape(), 13);
        assert!(adjoint_mismatch(&blur, &x, &yv).unwrap() < 1e-5);
        // Channel 1 of the result equals a single-kernel blur of channel 1.
        let k1 = Tensor::from_vec(&[3, 5], kernels.data()[15..30].to_vec()).unwrap();
        let single = Blur::new(k1, padding).unwrap();
        let x1 = Tensor::from_vec(&[1, 1, 9, 10], x.plane(1).to_vec()).unwrap();
        let y1 = single.forward(&x1).unwrap();
        assert!(
            y1.data()
                .iter()
                .zip(y.plane(1))
                .all(|(a, b)| (a - b).abs() < 1e-5)
        );
    }
}

#[test]
fn circular_fused_normal_operator_and_closed_form_norm() {
    let blur = Blur::with_method(
        gaussian_kernel([2.0, 0.7], 20.0),
        Padding::Circular,
        ConvMethod::Fft,
    )
    .unwrap();
    let shape = [1, 2, 23, 30];
    let x = pseudo_random(&shape, 3);
    let fused = blur.adjoint_forward(&x).unwrap();
    let plain = blur.adjoint(&blur.forward(&x).unwrap()).unwrap();
    assert!(rel_err(&fused, &plain) < 1e-5);

    let closed = blur.op_norm_sq(&shape).unwrap();
    let power =
        tessera::linalg::power_method(&shape, 500, 1e-9, |v| blur.adjoint(&blur.forward(v)?))
            .unwrap();
    assert!(
        (closed - power).abs() <= 1e-3 * closed,
        "closed {closed} vs power {power}"
    );
    // A normalised Gaussian passes the DC component unchanged: ‖A‖ = 1.
    assert!((closed - 1.0).abs() < 1e-5, "{closed}");

    // A kernel with negative taps: the maximum is not at DC.
    let edge = Blur::new(pseudo_random(&[1, 1, 3, 4], 5), Padding::Circular).unwrap();
    let closed = edge.op_norm_sq(&shape).unwrap();
    let power =
        tessera::linalg::power_method(&shape, 2000, 1e-10, |v| edge.adjoint(&edge.forward(v)?))
            .unwrap();
    assert!(
        (closed - power).abs() <= 1e-3 * closed,
        "closed {closed} vs power {power}"
    );
}

#[test]
fn blur3d_circular_norm_and_gaussian() {
    let blur = Blur3d::new(gaussian_kernel_3d([1.0, 0.6, 1.4]), Padding::Circular).unwrap();
    let shape = [1, 1, 9, 10, 11];
    assert!((blur.op_norm_sq(&shape).unwrap() - 1.0).abs() < 1e-5);
    assert!(Blur3d::new(gaussian_kernel_3d([1.0; 3]), Padding::Reflect).is_err());
    // A 2-D image is not a volume.
    assert!(blur.forward(&Tensor::zeros(&[1, 1, 10, 11])).is_err());
}

fn field_of(e: Error) -> String {
    match e {
        Error::InvalidConfig { field, .. } => field,
        other => panic!("expected a config error, got {other}"),
    }
}

#[test]
fn config_errors_name_the_field() {
    let bad = |c: BlurConfig| field_of(c.validate().unwrap_err());
    let base = BlurConfig::default();
    assert_eq!(
        bad(BlurConfig {
            sigma: Some([-1.0, 1.0]),
            ..base.clone()
        }),
        "blur.sigma"
    );
    assert_eq!(
        bad(BlurConfig {
            sigma: Some([f32::NAN, 1.0]),
            ..base.clone()
        }),
        "blur.sigma"
    );
    assert_eq!(
        bad(BlurConfig {
            sigma: None,
            ..base.clone()
        }),
        "blur.sigma"
    );
    assert_eq!(
        bad(BlurConfig {
            kernel_file: Some(PathBuf::from("k.npy")),
            ..base.clone()
        }),
        "blur.sigma"
    );
    assert_eq!(
        bad(BlurConfig {
            angle_deg: f32::INFINITY,
            ..base.clone()
        }),
        "blur.angle_deg"
    );
    let bad3 = |c: Blur3dConfig| field_of(c.validate().unwrap_err());
    let base3 = Blur3dConfig::default();
    assert_eq!(
        bad3(Blur3dConfig {
            padding: Padding::Reflect,
            ..base3.clone()
        }),
        "blur3d.padding"
    );
    assert_eq!(
        bad3(Blur3dConfig {
            sigma: Some([1.0, 0.0, 1.0]),
            ..base3
        }),
        "blur3d.sigma"
    );

    // Unknown fields and misspelt enum values are parse errors.
    assert!(toml::from_str::<BlurConfig>("sigma = [1.0, 2.0]\nangle = 3.0").is_err());
    assert!(toml::from_str::<BlurConfig>("sigma = [1.0, 2.0]\npadding = \"circ\"").is_err());
    let parsed: BlurConfig = toml::from_str(
        "sigma = [1.0, 2.0]\nangle_deg = 30\npadding = \"reflect\"\nmethod = \"fft\"",
    )
    .unwrap();
    assert_eq!(parsed.padding, Padding::Reflect);
    assert_eq!(parsed.method, ConvMethod::Fft);
}

#[test]
fn kernel_files_are_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("k.npy");
    tessera::io::write_npy(&good, &fixture("gaussian_kernel_1.npy")).unwrap();
    let cfg = BlurConfig {
        sigma: None,
        kernel_file: Some(good),
        padding: Padding::Circular,
        ..BlurConfig::default()
    };
    let from_file = cfg.build().unwrap();
    let from_sigma = BlurConfig {
        sigma: Some([2.0, 0.5]),
        angle_deg: 30.0,
        kernel_file: None,
        ..cfg.clone()
    };
    let x = fixture("blur_x.npy");
    let a = from_file.forward(&x).unwrap();
    assert!(rel_err(&from_sigma.build().unwrap().forward(&x).unwrap(), &a) < 1e-6);

    let nan = dir.path().join("nan.npy");
    tessera::io::write_npy(&nan, &Tensor::full(&[3, 3], f32::NAN)).unwrap();
    let err = BlurConfig {
        kernel_file: Some(nan),
        ..cfg.clone()
    }
    .build()
    .unwrap_err();
    assert_eq!(field_of(err), "blur.kernel_file");
    let empty = dir.path().join("empty.npy");
    tessera::io::write_npy(&empty, &Tensor::zeros(&[0, 3])).unwrap();
    let err = BlurConfig {
        kernel_file: Some(empty),
        ..cfg.clone()
    }
    .build()
    .unwrap_err();
    assert_eq!(field_of(err), "blur.kernel_file");
    let wrong = dir.path().join("wrong.npy");
    tessera::io::write_npy(&wrong, &Tensor::zeros(&[2, 1, 3, 3])).unwrap();
    let err = BlurConfig {
        kernel_file: Some(wrong),
        ..cfg
    }
    .build()
    .unwrap_err();
    assert_eq!(field_of(err), "blur.kernel_file");
}

#[test]
fn physics_config_builds_blur_and_checks_the_image() {
    let cfg: PhysicsConfig = toml::from_str("kind = \"blur\"\nsigma = [2.0, 2.0]").unwrap();
    let op = cfg.build(&[1, 3, 32, 32], None).unwrap();
    assert_eq!(
        op.output_shape(&[1, 3, 32, 32]).unwrap(),
        vec![1, 3, 18, 18]
    );
    // 15×15 kernel, valid padding, 10×40 image: a clear error rather than a panic.
    let err = cfg.build(&[1, 3, 10, 40], None).err().unwrap().to_string();
    assert!(err.contains("valid") && err.contains("kernel"), "{err}");
}

// ---- Stacks of circular blurs sharing FFTs (physics::stack::BlurFusion) ----

use tessera::physics::{Noisy, Stack, StackedLinearPhysics, noise::NoiseConfig};

/// Circular blurs by anisotropic Gaussians at several angles (kernel `side × side`, cut from a
/// Gaussian with σ = side/5), or per-channel random kernels, all with `method`.
fn blur_ops(
    n: usize,
    side: usize,
    per_channel: bool,
    method: ConvMethod,
) -> Vec<Box<dyn LinearPhysics>> {
    (0..n)
        .map(|i| {
            let kernel = if per_channel {
                kernel_2d_channels(side, i as u32)
            } else {
                let g = gaussian_kernel([side as f32 / 5.0, side as f32 / 9.0], 37.0 * i as f32);
                let big = g.shape()[2];
                let off = (big - side) / 2;
                Tensor::from_fn(&[1, 1, side, side], |j| {
                    g.data()[(off + j / side) * big + off + j % side]
                })
            };
            let blur = Blur::with_method(kernel, Padding::Circular, method).unwrap();
            // Every other operator behind a noise wrapper: fusion sees through it.
            if i % 2 == 1 {
                Box::new(Noisy {
                    inner: Box::new(blur) as Box<dyn LinearPhysics>,
                    noise: NoiseConfig::Gaussian { sigma: 0.1 },
                }) as Box<dyn LinearPhysics>
            } else {
                Box::new(blur) as Box<dyn LinearPhysics>
            }
        })
        .collect()
}

fn kernel_2d_channels(side: usize, seed: u32) -> Tensor {
    let k = pseudo_random(&[1, 3, side, side], seed + 11);
    Tensor::from_fn(k.shape(), |i| k.data()[i] + 1.2)
}

/// max |a − b| / max |b| over a list.
fn rel_err_all(a: &[Tensor], b: &[Tensor]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(a, b)| rel_err(a, b))
        .fold(0.0, f32::max)
}

/// (image H×W, kernel side, per-channel kernels, method) of the fused-stack tests: the linear FFT
/// grid (prime side), the image grid, a kernel larger than the image (taps wrap), the direct path
/// (Gram kernel only).
const FUSED_CASES: [([usize; 2], usize, bool, ConvMethod); 5] = [
    ([37, 50], 9, false, ConvMethod::Fft),
    ([32, 48], 7, false, ConvMethod::Auto),
    ([24, 30], 11, true, ConvMethod::Fft),
    ([8, 11], 15, false, ConvMethod::Fft),
    ([20, 16], 5, true, ConvMethod::Direct),
];

#[test]
fn fused_stack_equals_the_operator_by_operator_stack() {
    for (case, &(hw, side, per_channel, method)) in FUSED_CASES.iter().enumerate() {
        let n = 5;
        let fused = Stack::new(blur_ops(n, side, per_channel, method)).unwrap();
        let plain = Stack::unfused(blur_ops(n, side, per_channel, method)).unwrap();
        assert!(fused.is_fused() && !plain.is_fused(), "case {case}");
        let x = pseudo_random(&[2, 3, hw[0], hw[1]], 100 + case as u32);
        let ys: Vec<Tensor> = (0..n)
            .map(|i| pseudo_random(x.shape(), 200 + i as u32))
            .collect();
        let weights = [0.5, 1.0, 2.0, 0.25, 1.5];

        // A: per operator, the same arithmetic as the operator alone.
        assert_eq!(
            fused.forward(&x).unwrap(),
            plain.forward(&x).unwrap(),
            "case {case}: A"
        );
        let pairs = [
            (
                "Aᵀ",
                fused.adjoint(&ys).unwrap(),
                plain.adjoint(&ys).unwrap(),
            ),
            (
                "AᵀA",
                fused.adjoint_forward(&x).unwrap(),
                plain.adjoint_forward(&x).unwrap(),
            ),
            (
                "Σ wᵢAᵢᵀ(Aᵢx − yᵢ)",
                fused.residual_adjoint(&x, &ys, &weights).unwrap(),
                plain.residual_adjoint(&x, &ys, &weights).unwrap(),
            ),
        ];
        for (what, a, b) in pairs {
            let err = rel_err_all(&[a], &[b]);
            assert!(err <= 1e-5, "case {case}: {what}: relative error {err:e}");
        }
    }
}

#[test]
fn fused_stack_adjoint_passes_the_dot_product_test() {
    for (hw, method) in [([37, 50], ConvMethod::Fft), ([40, 64], ConvMethod::Auto)] {
        let stack = Stack::new(blur_ops(4, 9, false, method)).unwrap();
        assert!(stack.is_fused());
        let x = pseudo_random(&[1, 3, hw[0], hw[1]], 1);
        let ys: Vec<Tensor> = (0..4).map(|i| pseudo_random(x.shape(), 50 + i)).collect();
        let axs = stack.forward(&x).unwrap();
        let lhs: f64 = axs.iter().zip(&ys).map(|(a, y)| a.dot(y)).sum();
        let rhs = x.dot(&stack.adjoint(&ys).unwrap());
        let norm_ax = axs.iter().map(Tensor::norm_sq).sum::<f64>().sqrt();
        let norm_y = ys.iter().map(Tensor::norm_sq).sum::<f64>().sqrt();
        let mismatch = (lhs - rhs).abs() / (norm_ax * norm_y);
        assert!(
            mismatch <= 1e-5,
            "{hw:?}: ⟨Ax,y⟩ − ⟨x,Aᵀy⟩ relative {mismatch:e}"
        );
        // The Gram kernel is AᵀA: ⟨x, AᵀAx⟩ = ‖Ax‖².
        let xtatax = x.dot(&stack.adjoint_forward(&x).unwrap());
        let ax_sq = norm_ax * norm_ax;
        assert!(
            (xtatax - ax_sq).abs() <= 1e-5 * ax_sq,
            "{xtatax} vs {ax_sq}"
        );
    }
}

/// HQS's closed-form data step: `z = (a·Σ AᵢᵀAᵢ + I)⁻¹ r` satisfies `a·Σ AᵢᵀAᵢ z + z = r` (the
/// stack's own `AᵀA`) to f32 rounding, on the cases of the fused stack above (prime sides, a kernel
/// larger than the image, per-channel kernels, the direct path), for small and large `a`; a stack
/// without a fused Gram kernel, and a negative `a`, have no closed form. The check itself rounds
/// `a·AᵀA z` in f32, an error of about `ε·a·‖AᵀA‖` relative to `r`: the bound scales with it
/// (4.4e-5 measured at `a` = 250 on the first case, whose `‖AᵀA‖` is 3.9).
#[test]
fn fused_stack_inverts_its_shifted_normal_operator() {
    for (case, &(hw, side, per_channel, method)) in FUSED_CASES.iter().enumerate() {
        let stack = Stack::new(blur_ops(4, side, per_channel, method)).unwrap();
        let r = pseudo_random(&[2, 3, hw[0], hw[1]], 300 + case as u32);
        let norm = stack.op_norm_sq(r.shape()).unwrap() as f32;
        for a in [0.0f32, 0.03, 1.0, 250.0] {
            let z = stack.shifted_normal_inverse(&r, a).unwrap().unwrap();
            let mut back = stack.adjoint_forward(&z).unwrap();
            back.scale(a);
            back.add_assign(&z);
            let err = rel_err(&back, &r);
            let bound = 1e-6 * (1.0 + a * norm);
            assert!(
                err <= bound,
                "case {case}, a {a}, ‖AᵀA‖ {norm}: relative error {err:e} > {bound:e}"
            );
        }
        assert!(stack.shifted_normal_inverse(&r, -1.0).unwrap().is_none());
        let plain = Stack::unfused(blur_ops(4, side, per_channel, method)).unwrap();
        assert!(plain.shifted_normal_inverse(&r, 1.0).unwrap().is_none());
    }
    // Per-channel kernels need three channels: an error naming the operation, not a panic.
    let stack = Stack::new(blur_ops(2, 5, true, ConvMethod::Fft)).unwrap();
    let err = stack
        .shifted_normal_inverse(&Tensor::zeros(&[1, 2, 8, 8]), 1.0)
        .unwrap_err();
    assert!(err.to_string().contains("AᵀA"), "{err}");
}

#[test]
fn mixed_stacks_are_not_fused_and_errors_stay_named() {
    let mut ops = blur_ops(2, 9, false, ConvMethod::Fft);
    ops.push(Box::new(
        Blur::with_method(kernel_2d(7, 7, 3), Padding::Circular, ConvMethod::Fft).unwrap(),
    ));
    assert!(!Stack::new(ops).unwrap().is_fused(), "kernel sizes differ");
    let mut ops = blur_ops(2, 9, false, ConvMethod::Fft);
    ops.push(Box::new(
        Blur::with_method(kernel_2d(9, 9, 3), Padding::Reflect, ConvMethod::Fft).unwrap(),
    ));
    assert!(!Stack::new(ops).unwrap().is_fused(), "padding differs");

    let stack = Stack::new(blur_ops(2, 5, true, ConvMethod::Fft)).unwrap();
    // Per-channel kernels need three channels.
    assert!(stack.forward(&Tensor::zeros(&[1, 2, 8, 8])).is_err());
    let x = Tensor::zeros(&[1, 3, 8, 8]);
    let bad = vec![Tensor::zeros(&[1, 3, 8, 8]), Tensor::zeros(&[1, 3, 8, 9])];
    assert!(stack.residual_adjoint(&x, &bad, &[1.0, 1.0]).is_err());
    assert!(stack.adjoint(&bad).is_err());
    assert!(stack.adjoint(&bad[..1]).is_err());
}

#[test]
fn circular_fft_with_one_padded_axis_matches_direct() {
    // 37 rows (prime: padded to a fast length) × 64 columns (kept circular) and the transpose.
    for hw in [[37, 64], [64, 37], [683 / 10, 128]] {
        let kernel = kernel_2d(9, 7, 5);
        let fft = Blur::with_method(kernel.clone(), Padding::Circular, ConvMethod::Fft).unwrap();
        let direct = Blur::with_method(kernel, Padding::Circular, ConvMethod::Direct).unwrap();
        let x = pseudo_random(&[1, 2, hw[0], hw[1]], 9);
        let y = pseudo_random(&[1, 2, hw[0], hw[1]], 10);
        let err = rel_err(&fft.forward(&x).unwrap(), &direct.forward(&x).unwrap());
        assert!(err <= 1e-5, "{hw:?}: A relative error {err:e}");
        let err = rel_err(&fft.adjoint(&y).unwrap(), &direct.adjoint(&y).unwrap());
        assert!(err <= 1e-5, "{hw:?}: Aᵀ relative error {err:e}");
        let mismatch = adjoint_mismatch(&fft, &x, &y).unwrap();
        assert!(mismatch <= 1e-5, "{hw:?}: dot test {mismatch:e}");
    }
}
