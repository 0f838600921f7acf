//! Reconstruction quality on the bundled presets: PnP must clearly beat the back-projection and the
//! plain least-squares solution, and the whole job must be deterministic.

use std::ops::ControlFlow;

use tessera::job::{self, JobSummary};
use tessera::optim::{AlgorithmConfig, CgConfig};
use tessera::preset::Preset;

fn run(preset: &Preset) -> JobSummary {
    let out = tempfile::tempdir().unwrap();
    job::run(preset, out.path(), &mut |_| ControlFlow::Continue(())).unwrap()
}

fn psnr(s: &JobSummary) -> f64 {
    s.reconstruction.as_ref().expect("a ground truth").psnr_db
}

fn adjoint_psnr(s: &JobSummary) -> f64 {
    s.back_projection
        .as_ref()
        .expect("a ground truth")
        .quality
        .psnr_db
}

#[test]
fn pnp_beats_backprojection_and_least_squares_on_the_quick_preset() {
    let pnp_preset = Preset::load("quick", &[]).unwrap().preset;
    let pnp = run(&pnp_preset);
    let mut ls_preset = pnp_preset.clone();
    ls_preset.algorithm = AlgorithmConfig::Cg(CgConfig {
        iterations: 100,
        ..Default::default()
    });
    let ls = run(&ls_preset);
    let p = psnr(&pnp);
    eprintln!(
        "PnP {p:.2} dB, least squares {:.2} dB, Aᵀy {:.2} dB",
        psnr(&ls),
        adjoint_psnr(&pnp)
    );
    assert!(
        p > adjoint_psnr(&pnp) + 2.0,
        "PnP {p} vs Aᵀy {}",
        adjoint_psnr(&pnp)
    );
    assert!(p > psnr(&ls) + 2.0, "PnP {p} vs LS {}", psnr(&ls));
}

/// Every array a run writes (reconstruction, ground truth, measurements), by file name.
fn arrays(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "npy"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_same_preset_gives_the_same_bytes() {
    let preset = Preset::load("quick", &["algorithm.iterations=5".into()])
        .unwrap()
        .preset;
    let dir = tempfile::tempdir().unwrap();
    let run_into = |name: &str| {
        let out = dir.path().join(name);
        job::run(&preset, out.as_path(), &mut |_| ControlFlow::Continue(())).unwrap();
        arrays(&out)
    };
    let a = run_into("a");
    let names: Vec<&str> = a.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"reconstruction.npy"), "{names:?}");
    assert_eq!(a, run_into("b"), "two runs of one preset differ");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let c = pool.install(|| run_into("c"));
    assert_eq!(a, c, "result depends on the thread count");
}

#[test]
fn the_bundled_tomography3d_preset_converges() {
    let preset = Preset::load("tomography3d", &[]).unwrap().preset;
    let s = run(&preset);
    let history: Vec<f64> = s.history.iter().map(|h| h.psnr_db.unwrap()).collect();
    eprintln!("tomography3d PSNR per iteration: {history:.2?}");
    // Every iteration improves on the last (it used to lose ~1 dB per iteration).
    for (k, w) in history.windows(2).enumerate() {
        assert!(
            w[1] >= w[0] - 1e-3,
            "iteration {}: {} → {}",
            k + 2,
            w[0],
            w[1]
        );
    }
    assert!(history.last().unwrap() > &(history[0] + 1.0), "{history:?}");
    // The baseline of a single tomography operator is its filtered back-projection.
    let b = s.back_projection.as_ref().unwrap();
    assert_eq!(b.method, tessera::job::BackProjectionMethod::Fbp);
    assert!(
        psnr(&s) > b.quality.psnr_db + 10.0,
        "{} vs FBP {}",
        psnr(&s),
        b.quality.psnr_db
    );
}

#[test]
fn a_stack_of_blurs_is_compared_with_its_mean_back_projection() {
    let preset = Preset::load(
        "multiblur",
        &[
            "image.size=[64, 96]".into(),
            "algorithm.iterations=3".into(),
            "tiling.patch_size=32".into(),
            "tiling.overlap=8".into(),
        ],
    )
    .unwrap()
    .preset;
    let s = run(&preset);
    let b = s.back_projection.as_ref().unwrap();
    assert_eq!(b.method, tessera::job::BackProjectionMethod::AdjointMean);
    // Σ Aᵢᵀyᵢ alone is 8× too bright (about −4 dB on a real photograph); the mean is a blurred copy
    // of the image, and PnP does better still.
    assert!(b.quality.psnr_db > 12.0, "{}", b.quality.psnr_db);
    assert!(
        psnr(&s) > b.quality.psnr_db,
        "{} vs {}",
        psnr(&s),
        b.quality.psnr_db
    );
}
