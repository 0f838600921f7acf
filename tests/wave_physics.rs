//! Physics checks of the wave solver that do not depend on a reference implementation: the direct
//! arrival against the analytic 2-D Green's function, absorption by the C-PML, reciprocity, the
//! adjoint of the Born operator (dot-product test), and the gradient against the misfit itself
//! (Taylor test, finite differences).

use tessera::physics::wave::wavelet::ricker;
use tessera::physics::wave::{
    Accuracy, Gather, GivenResidual, GradientOptions, GradientStrategy, L2Misfit, Shot, Solver,
    SolverSettings, VelocityModel,
};

/// A small deterministic generator (tests must not depend on the rand crate's stream).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
    fn below(&mut self, n: usize) -> usize {
        (((self.next() + 1.0) / 2.0) * n as f64) as usize % n
    }
}

fn layered(nz: usize, nx: usize, dx: f64) -> VelocityModel<f64> {
    let v = (0..nz * nx)
        .map(|i| {
            let (z, x) = ((i / nx) as f64, (i % nx) as f64);
            let mut v = 1800.0 + 12.0 * z;
            if z > 0.55 * nz as f64 + 0.1 * x {
                v += 400.0;
            }
            if ((z - 12.0) / 4.0).powi(2) + ((x - 35.0) / 7.0).powi(2) < 1.0 {
                v -= 250.0;
            }
            v
        })
        .collect();
    VelocityModel::new(nz, nx, dx, dx, v).unwrap()
}

fn settings(accuracy: Accuracy, free_surface: bool, dt_s: f64, nt: usize) -> SolverSettings {
    SolverSettings {
        accuracy,
        pml_width: [10; 4],
        pml_freq_hz: 20.0,
        // Pinned, so the discretisation does not move with the model under perturbation.
        max_vel: Some(3000.0),
        free_surface,
        dt_s,
        nt,
    }
}

fn small_survey() -> Vec<Shot> {
    vec![
        Shot {
            sources: vec![[2, 6]],
            receivers: (0..14).map(|i| [1, 2 + 4 * i]).collect(),
        },
        Shot {
            sources: vec![[3, 50], [20, 30]],
            receivers: (0..10).map(|i| [3 + 3 * i, 57]).collect(),
        },
    ]
}

fn wavelets(shots: &[Shot], nt: usize, dt: f64) -> Vec<Vec<f64>> {
    let w = ricker(20.0, nt, dt, Some(0.06));
    shots
        .iter()
        .map(|s| {
            (0..s.sources.len())
                .flat_map(|k| w.iter().map(move |v| v * (1.0 - 0.3 * k as f64)))
                .collect()
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn flat(g: &[Gather<f64>]) -> Vec<f64> {
    g.iter().flat_map(|g| g.data.iter().copied()).collect()
}

/// `−(1/2π) ∫₀^{acosh(vt/r)} s(t − (r/v)·cosh θ) dθ`: the field of `∇²u − u_tt/v² = s(t)·δ(x)`,
/// the time-domain form of `−(i/4)·H₀⁽¹⁾(ωr/v)·S(ω)` (the 2-D Green's function, Hankel function).
fn analytic_2d(s: &dyn Fn(f64) -> f64, r: f64, v: f64, t: f64) -> f64 {
    if t <= r / v {
        return 0.0;
    }
    let top = (v * t / r).acosh();
    let n = 4000;
    let h = top / n as f64;
    let mut acc = 0.0;
    for i in 0..=n {
        let th = i as f64 * h;
        let w = if i == 0 || i == n { 0.5 } else { 1.0 };
        acc += w * s(t - r / v * th.cosh());
    }
    -acc * h / (2.0 * std::f64::consts::PI)
}

#[test]
fn direct_arrival_matches_the_analytic_greens_function_better_with_higher_order() {
    let (n, dx, v) = (161, 5.0, 2000.0);
    let model = VelocityModel::new(n, n, dx, dx, vec![v; n * n]).unwrap();
    let (dt, nt, f0, peak) = (2e-4, 1250, 15.0, 0.08);
    let src = [80, 50];
    let offsets = [40usize, 60];
    let shot = Shot {
        sources: vec![src],
        receivers: offsets.iter().map(|&o| [80, 50 + o]).collect(),
    };
    let w = ricker(f0, nt, dt, Some(peak));
    // A point source of amplitude f in one cell is s(t) = f(t)·Δz·Δx in the continuous equation.
    let s = |t: f64| {
        let a = std::f64::consts::PI * f0 * (t - peak);
        (1.0 - 2.0 * a * a) * (-a * a).exp() * dx * dx
    };
    let mut errors = Vec::new();
    for acc in [Accuracy::Two, Accuracy::Four, Accuracy::Eight] {
        let mut set = settings(acc, false, dt, nt);
        set.pml_width = [20; 4];
        set.pml_freq_hz = f0;
        set.max_vel = None;
        let solver = Solver::new(&model, &set).unwrap();
        let data = solver
            .forward(std::slice::from_ref(&shot), std::slice::from_ref(&w))
            .unwrap();
        let mut num = 0.0;
        let mut den = 0.0;
        for (k, &o) in offsets.iter().enumerate() {
            let r = o as f64 * dx;
            for (i, &d) in data[0].trace(k).iter().enumerate() {
                let exact = analytic_2d(&s, r, v, i as f64 * dt);
                num += (d - exact) * (d - exact);
                den += exact * exact;
            }
        }
        errors.push((num / den).sqrt());
    }
    eprintln!("relative error of the direct arrival (accuracy 2, 4, 8): {errors:?}");
    assert!(errors[0] > errors[1] && errors[1] > errors[2], "{errors:?}");
    assert!(errors[2] < 1e-3, "{errors:?}");
}

#[test]
fn absorbing_layers_remove_the_energy() {
    let (n, dx) = (60, 10.0);
    let model = VelocityModel::new(n, n, dx, dx, vec![2000.0; n * n]).unwrap();
    let (dt, nt) = (1e-3, 700);
    let shot = Shot {
        sources: vec![[30, 30]],
        receivers: (0..n / 3)
            .flat_map(|i| (0..n / 3).map(move |j| [3 * i + 1, 3 * j + 1]))
            .collect(),
    };
    let w = ricker(15.0, nt, dt, Some(0.1));
    // Energy at receivers spread over the whole model, late in the record (the direct wave has left
    // after ~0.35 s) relative to its peak.
    let late_fraction = |width: usize| {
        let mut set = settings(Accuracy::Four, false, dt, nt);
        set.pml_width = [width; 4];
        set.pml_freq_hz = 15.0;
        let solver = Solver::new(&model, &set).unwrap();
        let d = solver
            .forward(std::slice::from_ref(&shot), std::slice::from_ref(&w))
            .unwrap();
        let energy: Vec<f64> = (0..nt)
            .map(|t| (0..d[0].receivers).map(|r| d[0].trace(r)[t].powi(2)).sum())
            .collect();
        let peak = energy.iter().cloned().fold(0.0, f64::max);
        let late = energy[nt - 150..].iter().cloned().fold(0.0, f64::max);
        late / peak
    };
    let (thick, thin) = (late_fraction(20), late_fraction(2));
    eprintln!("late/peak energy: 20-cell layers {thick:.2e}, 2-cell layers {thin:.2e}");
    assert!(thick < 1e-4, "{thick}");
    assert!(thin > 100.0 * thick, "{thin} vs {thick}");
}

#[test]
fn source_and_receiver_are_reciprocal() {
    let model = layered(40, 60, 8.0);
    let (dt, nt) = (8e-4, 260);
    let (a, b) = ([5usize, 8usize], [27usize, 49usize]);
    let shots = vec![
        Shot {
            sources: vec![a],
            receivers: vec![b],
        },
        Shot {
            sources: vec![b],
            receivers: vec![a],
        },
    ];
    let w = ricker(20.0, nt, dt, Some(0.06));
    for free in [false, true] {
        let solver = Solver::new(&model, &settings(Accuracy::Four, free, dt, nt)).unwrap();
        let d = solver.forward(&shots, &[w.clone(), w.clone()]).unwrap();
        // The update is (u⁺ − 2u + u⁻)/(v²dt²) = ∇²u − f·δ_source: a symmetric operator in space
        // and time, so G(a, b) = G(b, a) and the two traces agree.
        let (ab, ba) = (&d[0].data, &d[1].data);
        let diff: f64 = ab
            .iter()
            .zip(ba.iter())
            .map(|(x, y)| (x - y).powi(2))
            .sum::<f64>()
            .sqrt();
        let norm: f64 = ab.iter().map(|x| x * x).sum::<f64>().sqrt();
        eprintln!(
            "reciprocity (free surface {free}): relative difference {:.2e}",
            diff / norm
        );
        assert!(diff / norm < 1e-8, "{}", diff / norm);
    }
}

#[test]
fn born_operator_and_gradient_are_adjoint() {
    let mut rng = Lcg(3);
    let model = layered(40, 60, 8.0);
    let shots = small_survey();
    for (acc, free, dt, nt) in [
        (Accuracy::Four, false, 8e-4, 200),
        (Accuracy::Eight, true, 8e-4, 200),
        // Three internal steps per sample: resampling of wavelets and data is in the loop.
        (Accuracy::Two, false, 2.4e-3, 70),
    ] {
        let solver = Solver::new(&model, &settings(acc, free, dt, nt)).unwrap();
        let w = wavelets(&shots, nt, dt);
        let dv: Vec<f64> = (0..model.v.len()).map(|_| rng.next()).collect();
        let jdv = solver.born(&shots, &w, &dv).unwrap();
        let dd: Vec<Gather<f64>> = jdv
            .iter()
            .map(|g| Gather {
                receivers: g.receivers,
                nt: g.nt,
                data: g.data.iter().map(|_| rng.next()).collect(),
            })
            .collect();
        for strategy in [
            GradientStrategy::StoreWavefield,
            GradientStrategy::Checkpoint,
        ] {
            let opts = GradientOptions {
                strategy,
                ..Default::default()
            };
            let jt = solver
                .gradient(&shots, &w, &GivenResidual(&dd), &opts)
                .unwrap();
            let mut jtdd = vec![0.0; dv.len()];
            for s in &jt {
                for (a, b) in jtdd.iter_mut().zip(&s.gradient) {
                    *a += b;
                }
            }
            let (lhs, rhs) = (dot(&flat(&jdv), &flat(&dd)), dot(&dv, &jtdd));
            eprintln!(
                "⟨Jδv, δd⟩ = {lhs:.15e}, ⟨δv, Jᵀδd⟩ = {rhs:.15e} ({acc:?}, free {free}, {strategy:?})"
            );
            assert!((lhs - rhs).abs() <= 1e-11 * lhs.abs(), "{lhs} vs {rhs}");
        }
    }
}

/// The misfit of `model` against `observed`.
fn misfit(
    solver_for: &dyn Fn(&VelocityModel<f64>) -> Solver<f64>,
    model: &VelocityModel<f64>,
    shots: &[Shot],
    w: &[Vec<f64>],
    observed: &[Gather<f64>],
) -> f64 {
    let d = solver_for(model).forward(shots, w).unwrap();
    0.5 * flat(&d)
        .iter()
        .zip(&flat(observed))
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
}

#[test]
fn taylor_test_and_finite_differences_confirm_the_gradient() {
    let (dt, nt) = (8e-4, 200);
    let truth = layered(40, 60, 8.0);
    let shots = small_survey();
    let w = wavelets(&shots, nt, dt);
    let set = settings(Accuracy::Four, true, dt, nt);
    let solver_for = |m: &VelocityModel<f64>| Solver::new(m, &set).unwrap();
    let observed = solver_for(&truth).forward(&shots, &w).unwrap();
    // Start from a smoothed, slower model.
    let mut start = truth.clone();
    for v in start.v.iter_mut() {
        *v = 0.97 * *v + 20.0;
    }
    let l2 = L2Misfit {
        observed: &observed,
        weight: 1.0,
        low_pass: None,
    };
    let g = solver_for(&start)
        .gradient(&shots, &w, &l2, &GradientOptions::default())
        .unwrap();
    let j0: f64 = g.iter().map(|s| s.loss).sum();
    assert!((j0 - misfit(&solver_for, &start, &shots, &w, &observed)).abs() < 1e-12 * j0);
    let mut grad = vec![0.0; start.v.len()];
    for s in &g {
        for (a, b) in grad.iter_mut().zip(&s.gradient) {
            *a += b;
        }
    }

    // Taylor: |J(v + hδv) − J(v)| = O(h), |J(v + hδv) − J(v) − h⟨g, δv⟩| = O(h²).
    let mut rng = Lcg(11);
    let dv: Vec<f64> = (0..start.v.len()).map(|_| 5.0 * rng.next()).collect();
    let gdv = dot(&grad, &dv);
    let hs = [1.0, 0.5, 0.25, 0.125];
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for h in hs {
        let mut m = start.clone();
        for (v, d) in m.v.iter_mut().zip(&dv) {
            *v += h * d;
        }
        let jh = misfit(&solver_for, &m, &shots, &w, &observed);
        first.push((jh - j0).abs());
        second.push((jh - j0 - h * gdv).abs());
    }
    for k in 1..hs.len() {
        let s1 = (first[k - 1] / first[k]).log2();
        let s2 = (second[k - 1] / second[k]).log2();
        eprintln!(
            "Taylor slopes at h = {}: first order {s1:.3}, second order {s2:.3}",
            hs[k]
        );
        assert!((s1 - 1.0).abs() < 0.1, "first-order slope {s1}");
        assert!((s2 - 2.0).abs() < 0.1, "second-order slope {s2}");
    }

    // Central differences at random cells, a source cell and an edge cell (whose gradient includes
    // the replicated padding).
    let mut cells: Vec<usize> = (0..4).map(|_| rng.below(start.v.len())).collect();
    cells.push(2 * 60 + 6);
    cells.push(39 * 60 + 59);
    let scale = grad.iter().fold(0.0f64, |m, g| m.max(g.abs()));
    for i in cells {
        let eps = 1e-2;
        let mut plus = start.clone();
        plus.v[i] += eps;
        let mut minus = start.clone();
        minus.v[i] -= eps;
        let fd = (misfit(&solver_for, &plus, &shots, &w, &observed)
            - misfit(&solver_for, &minus, &shots, &w, &observed))
            / (2.0 * eps);
        let rel = (fd - grad[i]).abs() / grad[i].abs();
        eprintln!(
            "cell [{}, {}]: gradient {:.10e}, central difference {fd:.10e} (rel {rel:.1e})",
            i / 60,
            i % 60,
            grad[i]
        );
        assert!(
            (fd - grad[i]).abs() < 1e-6 * (grad[i].abs() + scale),
            "cell {i}: {} vs {fd}",
            grad[i]
        );
    }
}

/// With at least as many shots as threads each shot's time loop runs on one thread; with fewer,
/// each step's rows are spread over the pool. Both give the same bits (forward, Born, gradient).
#[test]
fn one_thread_per_shot_gives_the_bits_of_rows_over_threads() {
    let model = layered(40, 60, 8.0);
    let shots = small_survey();
    let (dt, nt) = (8e-4, 150);
    let solver = Solver::new(&model, &settings(Accuracy::Four, false, dt, nt)).unwrap();
    let w = wavelets(&shots, nt, dt);
    let mut rng = Lcg(7);
    let dv: Vec<f64> = (0..model.v.len()).map(|_| 1e-3 * rng.next()).collect();
    let observed: Vec<Gather<f64>> = solver
        .forward(&shots, &w)
        .unwrap()
        .into_iter()
        .map(|mut g| {
            g.data
                .iter_mut()
                .for_each(|v| *v *= 0.9 + 0.05 * rng.next());
            g
        })
        .collect();
    let misfit = L2Misfit {
        observed: &observed,
        weight: 1.0,
        low_pass: None,
    };
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let fwd = flat(&solver.forward(&shots, &w).unwrap());
            let born = flat(&solver.born(&shots, &w, &dv).unwrap());
            let mut grads = Vec::new();
            for strategy in [
                GradientStrategy::StoreWavefield,
                GradientStrategy::Checkpoint,
                GradientStrategy::BoundarySaving,
            ] {
                let opts = GradientOptions {
                    strategy,
                    ..Default::default()
                };
                for s in solver.gradient(&shots, &w, &misfit, &opts).unwrap() {
                    grads.push(s.loss);
                    grads.extend(s.gradient);
                }
            }
            (fwd, born, grads)
        })
    };
    // 2 shots on 2 threads: a shot per thread; on 4 threads: rows spread over the pool.
    let (a, b) = (run(2), run(4));
    assert!(a.0.iter().any(|&v| v != 0.0) && a.1.iter().any(|&v| v != 0.0));
    for (name, x, y) in [
        ("forward", &a.0, &b.0),
        ("born", &a.1, &b.1),
        ("gradient", &a.2, &b.2),
    ] {
        assert_eq!(x.len(), y.len(), "{name}");
        if let Some(i) = x
            .iter()
            .zip(y)
            .position(|(p, q)| p.to_bits() != q.to_bits())
        {
            panic!("{name}[{i}]: {} != {}", x[i], y[i]);
        }
    }
}
