//! Reconstruction quality on the bundled presets: PnP must clearly beat the back-projection and the
//! plain least-squares solution, and the whole job must be deterministic.

use std::ops::ControlFlow;

use tessera::job::{self, JobSummary};
use tessera::optim::{AlgorithmConfig, CgConfig};
use tessera::preset::Preset;

fn run(preset: &Preset) -> JobSummary {
    let out = tempfile::tempdir().unwrap();
    job::run(preset, std::path::Path::new("."), out.path(), &mut |_| {
        ControlFlow::Continue(())
    })
    .unwrap()
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
    let p = pnp.reconstruction.psnr_db;
    eprintln!(
        "PnP {p:.2} dB, least squares {:.2} dB, Aᵀy {:.2} dB",
        ls.reconstruction.psnr_db, pnp.adjoint.psnr_db
    );
    assert!(
        p > pnp.adjoint.psnr_db + 2.0,
        "PnP {p} vs Aᵀy {}",
        pnp.adjoint.psnr_db
    );
    assert!(
        p > ls.reconstruction.psnr_db + 2.0,
        "PnP {p} vs LS {}",
        ls.reconstruction.psnr_db
    );
}

#[test]
fn the_same_preset_gives_the_same_numbers() {
    let preset = Preset::load("quick", &["algorithm.iterations=5".into()])
        .unwrap()
        .preset;
    let a = run(&preset);
    let b = run(&preset);
    assert_eq!(a.reconstruction.psnr_db, b.reconstruction.psnr_db);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let c = pool.install(|| run(&preset));
    assert_eq!(
        a.reconstruction.psnr_db, c.reconstruction.psnr_db,
        "result depends on the thread count"
    );
}
