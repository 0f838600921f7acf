//! Parity of the wave solver with deepwave 0.1.0 (`tests/fixtures/deepwave`, made by
//! `scripts/make_deepwave_fixtures.py`): receiver data to 1e-8 relative in float64 (1e-4 in
//! float32) and the velocity gradient of the L2 misfit to 1e-4 relative (in practice far closer),
//! for every accuracy, a free surface, two sources per shot and a time step above the CFL limit.

use std::path::PathBuf;

use tessera::float::Float;
use tessera::io::read_npy_f64;
use tessera::physics::wave::{
    Accuracy, Gather, GradientOptions, GradientStrategy, L2Misfit, Shot, Solver, SolverSettings,
    VelocityModel,
};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deepwave")
}

fn load(name: &str) -> (Vec<usize>, Vec<f64>) {
    read_npy_f64(&dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn manifest() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap()
}

fn cells(name: &str) -> Vec<Vec<[usize; 2]>> {
    let (shape, v) = load(name);
    (0..shape[0])
        .map(|s| {
            (0..shape[1])
                .map(|i| {
                    let at = |k| v[(s * shape[1] + i) * 2 + k] as usize;
                    [at(0), at(1)]
                })
                .collect()
        })
        .collect()
}

fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

struct Case {
    settings: SolverSettings,
    shots: Vec<Shot>,
    wavelets: Vec<Vec<f64>>,
    v_true: VelocityModel<f64>,
    v_start: VelocityModel<f64>,
}

fn case(name: &str) -> Case {
    let m = manifest();
    let c = &m["cases"][name];
    let (nz, nx) = (
        m["grid"][0].as_u64().unwrap() as usize,
        m["grid"][1].as_u64().unwrap() as usize,
    );
    let dx = m["dx_m"].as_f64().unwrap();
    let freq = m["freq_hz"].as_f64().unwrap();
    let pml = m["pml_width"].as_u64().unwrap() as usize;
    let dt = c["dt"].as_f64().unwrap();
    let nt = c["nt"].as_u64().unwrap() as usize;
    let nsrc = c["nsrc"].as_u64().unwrap() as usize;
    let free = c["free"].as_bool().unwrap();
    let accuracy = Accuracy::try_from(c["accuracy"].as_u64().unwrap() as u32).unwrap();
    let sources = if nsrc > 1 {
        cells(&format!("{name}_sources.npy"))
    } else {
        cells("sources.npy")
    };
    let receivers = cells("receivers.npy");
    let shots: Vec<Shot> = sources
        .into_iter()
        .zip(receivers)
        .map(|(sources, receivers)| Shot { sources, receivers })
        .collect();
    let wavelets: Vec<Vec<f64>> = if nsrc > 1 {
        let (shape, amp) = load(&format!("{name}_amplitudes.npy"));
        let per_shot = shape[1] * shape[2];
        amp.chunks(per_shot).map(<[f64]>::to_vec).collect()
    } else {
        // deepwave.wavelets.ricker(freq, nt, dt, 1.5 / freq), the same for every shot (the file
        // holds the one of the 300-sample cases).
        let mine = tessera::physics::wave::wavelet::ricker(freq, nt, dt, Some(1.5 / freq));
        let (_, w) = load("ricker.npy");
        if w.len() == nt {
            assert!(rel_err(&mine, &w) < 1e-14, "ricker differs from deepwave's");
        }
        vec![mine; shots.len()]
    };
    let model = |f: &str| {
        let (shape, v) = load(f);
        assert_eq!(shape, vec![nz, nx]);
        VelocityModel::new(nz, nx, dx, dx, v).unwrap()
    };
    Case {
        settings: SolverSettings {
            accuracy,
            pml_width: [if free { 0 } else { pml }, pml, pml, pml],
            pml_freq_hz: freq,
            max_vel: None,
            free_surface: free,
            dt_s: dt,
            nt,
        },
        shots,
        wavelets,
        v_true: model("v_true.npy"),
        v_start: model("v_start.npy"),
    }
}

fn gathers(name: &str) -> Vec<Gather<f64>> {
    let (shape, d) = load(name);
    d.chunks(shape[1] * shape[2])
        .map(|c| Gather {
            receivers: shape[1],
            nt: shape[2],
            data: c.to_vec(),
        })
        .collect()
}

fn flat<T: Float>(g: &[Gather<T>]) -> Vec<f64> {
    g.iter()
        .flat_map(|g| g.data.iter().map(|v| v.to_f64()))
        .collect()
}

fn check<T: Float>(name: &str, data_tol: f64, grad_tol: f64) {
    let c = case(name);
    let m = manifest();
    let expected_ratio = m["cases"][name]["step_ratio"].as_u64().unwrap() as usize;
    let v_true = c.v_true.convert::<T>();
    let wavelets: Vec<Vec<T>> = c
        .wavelets
        .iter()
        .map(|w| w.iter().map(|&x| T::from_f64(x)).collect())
        .collect();
    let solver = Solver::new(&v_true, &c.settings).unwrap();
    assert_eq!(
        solver.step_ratio(),
        expected_ratio,
        "{name}: CFL step ratio"
    );
    let data = solver.forward(&c.shots, &wavelets).unwrap();
    let expected = gathers(&format!("{name}_data.npy"));
    let e = rel_err(&flat(&data), &flat(&expected));
    eprintln!("{name}: data relative error {e:.3e}");
    assert!(e < data_tol, "{name}: data relative error {e:.3e}");

    let observed: Vec<Gather<T>> = expected
        .iter()
        .map(|g| Gather {
            receivers: g.receivers,
            nt: g.nt,
            data: g.data.iter().map(|&x| T::from_f64(x)).collect(),
        })
        .collect();
    let start = Solver::new(&c.v_start.convert::<T>(), &c.settings).unwrap();
    let misfit = L2Misfit {
        observed: &observed,
        weight: 1.0,
        low_pass: None,
    };
    let per_shot = start
        .gradient(&c.shots, &wavelets, &misfit, &GradientOptions::default())
        .unwrap();
    let mut grad = vec![0.0; c.v_start.v.len()];
    let mut loss = 0.0;
    for s in &per_shot {
        loss += s.loss;
        for (g, x) in grad.iter_mut().zip(&s.gradient) {
            *g += x.to_f64();
        }
    }
    let want_loss = m["cases"][name]["loss"].as_f64().unwrap();
    assert!(
        (loss - want_loss).abs() < 10.0 * data_tol * want_loss,
        "{name}: loss {loss} vs {want_loss}"
    );
    let (_, expected_grad) = load(&format!("{name}_grad.npy"));
    let e = rel_err(&grad, &expected_grad);
    eprintln!("{name}: gradient relative error {e:.3e}");
    assert!(e < grad_tol, "{name}: gradient relative error {e:.3e}");
}

#[test]
fn accuracy_2_float64() {
    check::<f64>("acc2_f64", 1e-12, 1e-10);
}

#[test]
fn accuracy_4_float64() {
    check::<f64>("acc4_f64", 1e-12, 1e-10);
}

#[test]
fn accuracy_6_float64() {
    check::<f64>("acc6_f64", 1e-12, 1e-10);
}

#[test]
fn accuracy_8_float64() {
    check::<f64>("acc8_f64", 1e-12, 1e-10);
}

#[test]
fn accuracy_4_float32() {
    check::<f32>("acc4_f32", 1e-5, 1e-4);
}

#[test]
fn free_surface_float64() {
    check::<f64>("free_acc4_f64", 1e-12, 1e-10);
}

#[test]
fn two_sources_per_shot_float64() {
    check::<f64>("two_sources_acc6_f64", 1e-12, 1e-10);
}

#[test]
fn time_step_above_cfl_limit_float64() {
    check::<f64>("substep_acc4_f64", 1e-12, 1e-10);
}

#[test]
fn every_memory_strategy_gives_the_gradient() {
    let c = case("acc4_f64");
    let solver = Solver::new(&c.v_start, &c.settings).unwrap();
    let observed = gathers("acc4_f64_data.npy");
    let misfit = L2Misfit {
        observed: &observed,
        weight: 1.0,
        low_pass: None,
    };
    let run = |strategy, every| {
        let opts = GradientOptions {
            strategy,
            checkpoint_every: every,
            illumination: false,
        };
        solver
            .gradient(&c.shots, &c.wavelets, &misfit, &opts)
            .unwrap()
    };
    let store = run(GradientStrategy::StoreWavefield, None);
    for every in [None, Some(1), Some(7), Some(1000)] {
        let ck = run(GradientStrategy::Checkpoint, every);
        for (a, b) in store.iter().zip(&ck) {
            assert_eq!(
                a.gradient, b.gradient,
                "checkpointing recomputes bit for bit"
            );
            assert!(b.peak_bytes < a.peak_bytes || every == Some(1000) || every == Some(1));
        }
    }
    let bs = run(GradientStrategy::BoundarySaving, None);
    let (nz, nx) = (c.v_start.nz, c.v_start.nx);
    let r = 2;
    for (a, b) in store.iter().zip(&bs) {
        assert!(
            b.peak_bytes < a.peak_bytes / 4,
            "{} vs {}",
            b.peak_bytes,
            a.peak_bytes
        );
        // Exact (to the rounding of time reversal) away from the outermost r model cells.
        let inner = |g: &[f64]| -> Vec<f64> {
            (r..nz - r)
                .flat_map(|y| (r..nx - r).map(move |x| (y, x)))
                .map(|(y, x)| g[y * nx + x])
                .collect()
        };
        let e = rel_err(&inner(&b.gradient), &inner(&a.gradient));
        eprintln!("boundary saving vs stored wavefield (interior): {e:.3e}");
        assert!(e < 1e-9, "{e}");
    }
}
