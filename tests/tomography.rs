//! Tomography (2-D and 3-D parallel beam): parity with deepinv 0.5.0 fixtures, agreement with a
//! straightforward reference of the same discretisation, exact adjoints, FBP, configs and determinism.

#[path = "support/tomo_reference.rs"]
mod reference;

use std::path::PathBuf;

use proptest::prelude::*;
use tessera::io::npy::read_npy;
use tessera::linalg::deterministic_start;
use tessera::physics::tomography::{Angles, Tomography, TomographyConfig};
use tessera::physics::tomography3d::{Tomography3d, Tomography3dConfig};
use tessera::physics::{LinearPhysics, Physics, PhysicsConfig, adjoint_mismatch};
use tessera::{Error, Tensor};

fn fixture(name: &str) -> Tensor {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/deepinv")
        .join(format!("{name}.npy"));
    read_npy(&path).unwrap()
}

fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// Values of a 64×64 image restricted to the inscribed disc of radius 30 px (FBP is reliable there).
fn inside_disc(x: &[f32], w: usize) -> Vec<f32> {
    let c = (w as f32 - 1.0) / 2.0;
    let r_max = c - 1.5;
    (0..w * w)
        .filter(|k| {
            let (r, q) = ((k / w) as f32 - c, (k % w) as f32 - c);
            r * r + q * q <= r_max * r_max
        })
        .map(|k| x[k])
        .collect()
}

const CASES: [(bool, usize); 4] = [(false, 30), (false, 90), (true, 30), (true, 90)];

fn case_op(circle: bool, n: usize) -> Tomography {
    Tomography::new(64, &Angles::Count(n), circle, false).unwrap()
}

fn case_name(circle: bool, n: usize) -> String {
    format!("tomo_c{}_a{n}", circle as u8)
}

#[test]
fn sinograms_match_deepinv() {
    let x = fixture("tomo_x");
    for (circle, n) in CASES {
        let expected = fixture(&format!("{}_Ax", case_name(circle, n)));
        let y = case_op(circle, n).forward(&x).unwrap();
        assert_eq!(y.shape(), expected.shape());
        let err = rel_err(y.data(), expected.data());
        eprintln!("{} A: relative L2 error {err:.2e}", case_name(circle, n));
        assert!(err < 1e-4, "{}: {err}", case_name(circle, n));
    }
}

#[test]
fn adjoint_is_close_to_deepinv_autograd_adjoint() {
    // The brief asks for < 3 % (another discretisation would differ by a few percent); we reproduce
    // deepinv's exactly, so a much tighter bound guards against regressions.
    // deepinv's default adjoint is autograd through its own forward, i.e. the exact adjoint of the
    // same discretisation; ours should agree up to float rounding.
    for (circle, n) in CASES {
        let y = fixture(&format!("{}_Ax", case_name(circle, n)));
        let expected = fixture(&format!("{}_ATy", case_name(circle, n)));
        let aty = case_op(circle, n).adjoint(&y).unwrap();
        let err = rel_err(aty.data(), expected.data());
        eprintln!("{} Aᵀ: relative L2 error {err:.2e}", case_name(circle, n));
        assert!(err < 1e-4, "{}: {err}", case_name(circle, n));
    }
}

#[test]
fn fbp_matches_deepinv() {
    for (circle, n) in CASES {
        let y = fixture(&format!("{}_Ax", case_name(circle, n)));
        let expected = fixture(&format!("{}_fbp", case_name(circle, n)));
        let op = case_op(circle, n);
        let x = op.fbp(&y).unwrap();
        assert_eq!(x.shape(), expected.shape());
        let all = rel_err(x.data(), expected.data());
        let disc = rel_err(
            &inside_disc(x.data(), 64),
            &inside_disc(expected.data(), 64),
        );
        eprintln!(
            "{} FBP: relative L2 error {all:.2e} (whole image), {disc:.2e} (inside the disc)",
            case_name(circle, n)
        );
        assert!(
            disc < 1e-3 && all < 1e-3,
            "{}: {disc}, {all}",
            case_name(circle, n)
        );
        // The free-standing form is the same computation.
        let free = tessera::physics::tomography::fbp(&op, &y).unwrap();
        assert_eq!(free, x);
    }
}

#[test]
fn fbp_reconstructs_the_phantom() {
    let x = fixture("tomo_x");
    let op = case_op(false, 90);
    let rec = op.fbp(&op.forward(&x).unwrap()).unwrap();
    let err = rel_err(&inside_disc(rec.data(), 64), &inside_disc(x.data(), 64));
    assert!(err < 0.25, "{err}");
}

#[test]
fn matches_straightforward_reference() {
    for (w, circle, angles) in [
        (16usize, false, vec![0.0f32, 33.0, 90.0, 151.5]),
        (15, true, vec![10.0, 45.0, 200.0]),
        (9, false, vec![-20.0, 90.0, 359.0]),
    ] {
        let op = Tomography::new(w, &Angles::List(angles.clone()), circle, false).unwrap();
        let x = deterministic_start(&[1, 1, w, w], 7);
        let y = op.forward(&x).unwrap();
        let y_ref = reference::radon(x.data(), w, &angles, circle);
        assert!(rel_err(y.data(), &y_ref) < 1e-4, "A, w={w}");
        let v = deterministic_start(y.shape(), 8);
        let xt = op.adjoint(&v).unwrap();
        let xt_ref = reference::radon_adjoint(v.data(), w, &angles, circle);
        assert!(rel_err(xt.data(), &xt_ref) < 1e-4, "Aᵀ, w={w}");
    }
}

fn angles_strategy() -> impl Strategy<Value = Angles> {
    prop_oneof![
        (1usize..12).prop_map(Angles::Count),
        prop::collection::vec(-360.0f32..360.0, 1..6).prop_map(Angles::List),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn adjoint_is_exact_2d(
        w in 2usize..20,
        angles in angles_strategy(),
        circle in any::<bool>(),
        normalize in any::<bool>(),
        batch in 1usize..3,
        seed in 0u64..1000,
    ) {
        let op = Tomography::new(w, &angles, circle, normalize).unwrap();
        let x = deterministic_start(&[batch, 2, w, w], seed);
        let y = deterministic_start(&op.output_shape(x.shape()).unwrap(), seed + 1);
        let m = adjoint_mismatch(&op, &x, &y).unwrap();
        prop_assert!(m <= 1e-5, "mismatch {m}");
    }

    #[test]
    fn adjoint_is_exact_3d(
        w in 2usize..14,
        depth in 1usize..4,
        angles in angles_strategy(),
        circle in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let op = Tomography3d::new(w, &angles, circle, false).unwrap();
        let x = deterministic_start(&[1, 1, depth, w, w], seed);
        let y = deterministic_start(&op.output_shape(x.shape()).unwrap(), seed + 1);
        let m = adjoint_mismatch(&op, &x, &y).unwrap();
        prop_assert!(m <= 1e-5, "mismatch {m}");
    }
}

#[test]
fn normalized_operator_has_unit_norm() {
    let op = Tomography::new(24, &Angles::Count(20), false, true).unwrap();
    assert!(op.operator_norm() > 1.0);
    let norm_sq = op.op_norm_sq(&[1, 1, 24, 24]).unwrap();
    assert!((norm_sq - 1.0).abs() < 1e-3, "{norm_sq}");
    // FBP inverts the normalised operator like the unnormalised one.
    let plain = Tomography::new(24, &Angles::Count(20), false, false).unwrap();
    let x = deterministic_start(&[1, 1, 24, 24], 2);
    let a = op.fbp(&op.forward(&x).unwrap()).unwrap();
    let b = plain.fbp(&plain.forward(&x).unwrap()).unwrap();
    assert!(rel_err(a.data(), b.data()) < 1e-4);
}

#[test]
fn slices_of_3d_equal_2d() {
    let (w, d) = (12, 3);
    let angles = Angles::Count(9);
    let op2 = Tomography::new(w, &angles, true, false).unwrap();
    let op3 = Tomography3d::new(w, &angles, true, false).unwrap();
    let x = deterministic_start(&[2, 1, d, w, w], 5);
    let y3 = op3.forward(&x).unwrap();
    assert_eq!(y3.shape(), &[2, 1, d, w, 9]);
    let y2 = op2
        .forward(&x.clone().reshape(&[2 * d, 1, w, w]).unwrap())
        .unwrap();
    assert_eq!(y3.data(), y2.data());
    let back3 = op3.adjoint(&y3).unwrap();
    let back2 = op2.adjoint(&y2).unwrap();
    assert_eq!(back3.data(), back2.data());
    let fbp3 = op3.fbp(&y3).unwrap();
    let fbp2 = op2.fbp(&y2).unwrap();
    assert_eq!(fbp3.shape(), &[2, 1, d, w, w]);
    assert_eq!(fbp3.data(), fbp2.data());
}

#[test]
fn same_result_on_any_thread_count() {
    let op = Tomography::new(40, &Angles::Count(37), false, false).unwrap();
    let x = deterministic_start(&[2, 1, 40, 40], 9);
    let y = deterministic_start(&op.output_shape(x.shape()).unwrap(), 10);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            (
                op.forward(&x).unwrap(),
                op.adjoint(&y).unwrap(),
                op.fbp(&y).unwrap(),
            )
        })
    };
    let one = run(1);
    assert_eq!(one, run(1));
    assert_eq!(one, run(2));
    assert_eq!(one, run(3));
}

#[test]
fn shape_errors_are_reported() {
    let op = Tomography::new(16, &Angles::Count(5), false, false).unwrap();
    assert!(matches!(
        op.forward(&Tensor::zeros(&[1, 1, 16, 15])),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(op.forward(&Tensor::zeros(&[1, 16, 16])).is_err());
    assert!(op.adjoint(&Tensor::zeros(&[1, 1, 23, 4])).is_err());
    assert!(op.fbp(&Tensor::zeros(&[1, 1, 22, 5])).is_err());
    let op3 = Tomography3d::new(16, &Angles::Count(5), false, false).unwrap();
    assert!(op3.forward(&Tensor::zeros(&[1, 1, 16, 16])).is_err());
    assert!(op3.adjoint(&Tensor::zeros(&[1, 1, 2, 23, 4])).is_err());

    let cfg = TomographyConfig::default();
    let msg = cfg.build(&[1, 1, 16, 17]).unwrap_err().to_string();
    assert!(msg.contains("square"), "{msg}");
    let msg = cfg.build(&[1, 16, 16]).unwrap_err().to_string();
    assert!(msg.contains("(B, C, H, W)"), "{msg}");
    let msg = Tomography3dConfig::default()
        .build(&[1, 1, 16, 16])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("(B, C, D, H, W)"), "{msg}");
    assert!(Tomography::new(1, &Angles::Count(5), false, false).is_err());
}

#[test]
fn configs_parse_validate_and_build() {
    let cfg: TomographyConfig = toml::from_str("angles = 30\ncircle = true").unwrap();
    assert_eq!(cfg.angles, Angles::Count(30));
    assert!(cfg.circle && !cfg.normalize);
    let op = cfg.build(&[1, 1, 64, 64]).unwrap();
    assert_eq!(
        op.output_shape(&[2, 3, 64, 64]).unwrap(),
        vec![2, 3, 64, 30]
    );

    let cfg: TomographyConfig = toml::from_str("angles = [0.0, 45.5, 90]").unwrap();
    assert_eq!(cfg.angles, Angles::List(vec![0.0, 45.5, 90.0]));
    let op = cfg.build(&[1, 1, 64, 64]).unwrap();
    assert_eq!(op.output_shape(&[1, 1, 64, 64]).unwrap(), vec![1, 1, 91, 3]);

    assert!(toml::from_str::<TomographyConfig>("angels = 3").is_err());
    for bad in ["angles = 0", "angles = []", "angles = 100000"] {
        let cfg: TomographyConfig = toml::from_str(bad).unwrap();
        let msg = cfg.validate().unwrap_err().to_string();
        assert!(msg.contains("tomography.angles"), "{bad}: {msg}");
    }
    let cfg = TomographyConfig {
        angles: Angles::List(vec![1.0, f32::NAN]),
        ..Default::default()
    };
    assert!(cfg.validate().is_err());

    let cfg: Tomography3dConfig = toml::from_str("angles = 8").unwrap();
    let op = cfg.build(&[1, 1, 4, 20, 20]).unwrap();
    assert_eq!(
        op.output_shape(&[1, 1, 4, 20, 20]).unwrap(),
        vec![1, 1, 4, 29, 8]
    );
    let msg = toml::from_str::<Tomography3dConfig>("angles = 0")
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(msg.contains("tomography3d.angles"), "{msg}");

    // Through the physics config, as presets use it.
    let pc: PhysicsConfig = toml::from_str("kind = \"tomography\"\nangles = 12").unwrap();
    let op = pc.build(&[1, 1, 32, 32], None).unwrap();
    assert_eq!(
        op.output_shape(&[1, 1, 32, 32]).unwrap(),
        vec![1, 1, 46, 12]
    );
    let pc: PhysicsConfig = toml::from_str("kind = \"tomography3d\"\nangles = 12").unwrap();
    assert!(pc.build(&[1, 1, 32, 32], None).is_err());
}
