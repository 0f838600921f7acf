//! Whole `tessera run` jobs on the emulated device (`device::emulator`: the device code and the
//! same CUDA C kernels on the CPU) against the same jobs on the CPU: the same output files, and
//! values equal to float rounding.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use super::{JobEvent, JobSummary, run_on};
use crate::device::backend::Backend;
use crate::device::emulator::{Emulator, take_downloads};
use crate::dist::SingleProcess;
use crate::io::{RunDir, read_array};
use crate::preset::Preset;
use crate::tensor::Tensor;

/// Runs `preset` into `dir/name` on the CPU (`device = false`) or the emulated device; `on_event`
/// sees its events.
fn run_into(
    preset: &Preset,
    dir: &Path,
    name: &str,
    device: bool,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> JobSummary {
    let out = RunDir::from(dir.join(name).as_path());
    let solver = device.then(|| Box::new(Arc::new(Emulator::new().unwrap())) as Box<_>);
    run_on(
        preset,
        &out,
        Box::new(SingleProcess),
        &[],
        solver,
        None,
        on_event,
    )
    .unwrap()
}

fn relative_error(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.sub(b).norm() / b.norm()
}

/// The device run's outputs are the CPU run's: the same files, the reconstruction within 1e-5
/// (relative L2), and PSNR/SSIM of every iteration and of metrics.json within 1e-3 dB / 1e-4.
/// The tolerance is float rounding: the element-wise steps and TV give the CPU's bits, but the
/// operators' device twins sum in another order (ray sums, FFTs), about 1e-7 relative per
/// application, which a few iterations of a contractive loop keep near 1e-6.
fn assert_same_run(preset_toml: &str) {
    assert_same_run_within(preset_toml, 1e-5, 1e-3);
}

/// [`assert_same_run`] with the reconstruction within `tolerance` (relative L2) and every PSNR
/// within `psnr_db`.
fn assert_same_run_within(preset_toml: &str, tolerance: f64, psnr_db: f64) {
    let preset = Preset::from_toml(preset_toml, "device test", &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut ignore = |_: JobEvent<'_>| ControlFlow::Continue(());
    let cpu = run_into(&preset, dir.path(), "cpu", false, &mut ignore);
    let device = run_into(&preset, dir.path(), "device", true, &mut ignore);
    assert_eq!(device.outputs, cpu.outputs);
    assert_eq!(device.algorithm, cpu.algorithm);
    assert_eq!(device.history.len(), cpu.history.len());
    for (d, c) in device.history.iter().zip(&cpu.history) {
        let (dp, cp) = (d.psnr_db.unwrap(), c.psnr_db.unwrap());
        assert!(
            (dp - cp).abs() <= psnr_db,
            "iteration {}: PSNR {dp} vs {cp}",
            c.iteration
        );
        assert_eq!(d.ssim.is_some(), c.ssim.is_some());
        if let (Some(ds), Some(cs)) = (d.ssim, c.ssim) {
            assert!((ds - cs).abs() <= 1e-4, "SSIM {ds} vs {cs}");
        }
    }
    let (dq, cq) = (
        device.reconstruction.as_ref().unwrap(),
        cpu.reconstruction.as_ref().unwrap(),
    );
    assert!((dq.psnr_db - cq.psnr_db).abs() <= psnr_db);
    let read = |run: &str, file: &str| read_array(&dir.path().join(run).join(file)).unwrap();
    let e = relative_error(
        &read("device", "reconstruction.npy"),
        &read("cpu", "reconstruction.npy"),
    );
    assert!(
        e <= tolerance,
        "{}: reconstruction: relative error {e:e}",
        preset.name
    );
    eprintln!("{}: reconstruction within {e:e} relative", preset.name);
    // The simulated measurements and the truth are the host's, uploaded: the same bits.
    for file in ["ground_truth.npy", "measurement_0.npy"] {
        if cpu.outputs.iter().any(|o| o.to_str() == Some(file)) {
            assert_eq!(
                read("device", file).data(),
                read("cpu", file).data(),
                "{file}"
            );
        }
    }
    for file in &cpu.outputs {
        assert!(dir.path().join("device").join(file).is_file(), "{file:?}");
    }
}

const TOMOGRAPHY: &str = r#"
version = 1
name = "tomography on the device"
seed = 3
[image]
sample = "shepp_logan"
size = [32, 32]
[[physics]]
kind = "tomography"
angles = 20
[noise]
kind = "gaussian"
sigma = 0.01
[denoiser]
kind = "tv"
n_it_max = 20
[algorithm]
kind = "pnp"
iterations = 8
denoiser_sigma = 0.01
init = "adjoint"
relaxation = 0.9
clamp = [0.0, 1.0]
track_objective = true
[output]
ssim_every = 4
"#;

#[test]
fn a_tomography_job_on_the_device_is_the_cpu_job() {
    assert_same_run(TOMOGRAPHY);
}

/// `preset` with its TV `[denoiser]` replaced by wavelet thresholding.
fn with_wavelets(preset: &str, wavelet: &str, levels: usize) -> String {
    preset.replace(
        "[denoiser]\nkind = \"tv\"\nn_it_max = 20\n",
        &format!("[denoiser]\nkind = \"wavelet\"\nwavelet = \"{wavelet}\"\nlevels = {levels}\n"),
    )
}

#[test]
fn a_pnp_wavelet_job_on_the_device_is_the_cpu_job() {
    let text = with_wavelets(TOMOGRAPHY, "db8", 3);
    assert!(text.contains("kind = \"wavelet\""), "{text}");
    assert_same_run(&text);
    // An odd image (every level extends an axis) and hard thresholding.
    let odd = with_wavelets(TOMOGRAPHY, "db4", 2)
        .replace("size = [32, 32]", "size = [33, 33]")
        .replace("[algorithm]", "threshold = \"hard\"\n[algorithm]");
    assert!(odd.contains("threshold = \"hard\""), "{odd}");
    assert_same_run(&odd);
}

/// `preset` with its `[algorithm]` section replaced by `algorithm` (and no denoiser when CG).
fn with_algorithm(preset: &str, algorithm: &str) -> String {
    let start = preset.find("[algorithm]").unwrap();
    let end = preset[start..]
        .find("\n[output]")
        .map_or(preset.len(), |i| start + i + 1);
    let mut text = format!("{}{algorithm}\n{}", &preset[..start], &preset[end..]);
    if algorithm.contains("\"cg\"") {
        let d = text.find("[denoiser]").unwrap();
        let e = d + text[d..].find("\n[").unwrap() + 1;
        text.replace_range(d..e, "");
    }
    text
}

const CG: &str = "[algorithm]\nkind = \"cg\"\niterations = 12\ntol = 1e-7";

/// CG least squares on the device is the CPU's: on a tomography and on a fused stack of circular
/// blurs and a stack of every padding, damped. The tolerance is float rounding again, but CG does
/// not contract it the way PnP does: the device's reductions (`⟨p, Ap⟩`, `‖r‖²`, f64 sums in
/// another order) and operators round differently at ~1e-7, which moves each step's `α`, `β` and
/// the search direction, and the conditioning of the normal equations amplifies that. Damped
/// (λ = 0.05 here), 12 iterations stay within 1e-4 relative (the selftest's f32 bound) and 1e-2 dB;
/// undamped CG on this 20-angle tomography already differs by 0.025 dB at iteration 8 (measured),
/// the semi-convergence of an ill-posed problem showing rounding as any perturbation.
#[test]
fn cg_jobs_on_the_device_are_the_cpu_jobs() {
    let damped = format!("{CG}\ndamping = 0.05");
    assert_same_run_within(&with_algorithm(TOMOGRAPHY, &damped), 1e-4, 1e-2);
    assert_same_run_within(
        &with_algorithm(&blurs(&["circular"; 3]), &damped),
        1e-4,
        1e-2,
    );
    assert_same_run_within(
        &with_algorithm(
            &blurs(&["valid", "circular", "replicate", "reflect", "constant"]),
            &damped,
        ),
        1e-4,
        1e-2,
    );
}

/// FBP on the device is the CPU's: the same ramp filter (cuFFT against rustfft) and the exact
/// back-projection, one pass, so the difference is one FFT's and one sum's float rounding (no
/// iteration amplifies it): 1e-5 relative and 1e-3 dB, on 32² and on an odd 33² with 17 angles.
#[test]
fn fbp_jobs_on_the_device_are_the_cpu_jobs() {
    let fbp = "[algorithm]\nkind = \"fbp\"";
    assert_same_run_within(&with_algorithm(TOMOGRAPHY, fbp), 1e-5, 1e-3);
    let odd = TOMOGRAPHY
        .replace("size = [32, 32]", "size = [33, 33]")
        .replace("angles = 20", "angles = 17");
    assert!(odd.contains("[33, 33]") && odd.contains("angles = 17"));
    assert_same_run_within(&with_algorithm(&odd, fbp), 1e-5, 1e-3);
}

/// PnP from `init = "pinv"`: the start is CG's least squares on the device (undamped, 100
/// iterations to tolerance 1e-6, `StackedLinearPhysics::pinv`), then PnP contracts the difference.
/// Undamped CG on the 20-angle tomography amplifies the rounding (above): the result is within
/// 2e-3 relative (6.3e-4 measured), every PSNR within 0.05 dB.
#[test]
fn pnp_from_pinv_on_the_device_is_the_cpu_run() {
    let pinv = TOMOGRAPHY.replace("init = \"adjoint\"", "init = \"pinv\"");
    assert!(pinv.contains("pinv"));
    assert_same_run_within(&pinv, 2e-3, 5e-2);
}

/// The bundled `tomography3d` preset (PnP with 3-D wavelets from the pinv), shrunk to an odd
/// 11³ volume and 13 angles, 4 iterations.
fn tomography3d() -> String {
    let (_, text) = crate::preset::BUNDLED
        .iter()
        .find(|(name, _)| *name == "tomography3d")
        .unwrap();
    let shrunk = text
        .replace("size = [32, 32, 32]", "size = [11, 11, 11]")
        .replace("angles = 60", "angles = 13")
        .replace("iterations = 20", "iterations = 4");
    assert!(
        shrunk.contains("[11, 11, 11]")
            && shrunk.contains("angles = 13")
            && shrunk.contains("iterations = 4"),
        "{shrunk}"
    );
    shrunk
}

/// The 3-D tomography preset on the device is the CPU run within the 2-D PnP job's tolerance,
/// started from the adjoint: from the preset's own pinv at this small size (13 angles through
/// 11³) undamped CG amplifies the rounding past the SSIM bound (0.9329 vs 0.9321 measured),
/// as on 2-D (`pnp_from_pinv_on_the_device_is_the_cpu_run`). FBP of a 3-D tomography within the 2-D
/// FBP's tolerance (one pass).
#[test]
fn tomography3d_jobs_on_the_device_are_the_cpu_jobs() {
    let adjoint = tomography3d().replace("init = \"pinv\"", "init = \"adjoint\"");
    assert!(adjoint.contains("init = \"adjoint\""), "{adjoint}");
    assert_same_run(&adjoint);
    let fbp = "[algorithm]\nkind = \"fbp\"";
    assert_same_run_within(&with_algorithm(&tomography3d(), fbp), 1e-5, 1e-3);
}

/// Circular blurs of one kernel size (fused on both sides) on a colour image, then blurs of every
/// padding (operator by operator).
#[test]
fn blur_stack_jobs_on_the_device_are_the_cpu_jobs() {
    assert_same_run(&blurs(&["circular"; 3]));
    assert_same_run(&blurs(&[
        "valid",
        "circular",
        "replicate",
        "reflect",
        "constant",
    ]));
}

/// PnP by half-quadratic splitting (DPIR's schedule) on a fused circular stack of a colour image
/// (each data step in closed form, on the device as on the CPU) and on blurs of every padding (by
/// CG on both). The first data steps solve `(γ·w·AᵀA + I) z = …` with γ ≈ 390 (σ 49/255 down to
/// 0.02, λ 0.23): a system of that condition amplifies the rounding of its right-hand side — the
/// inverse damps the image's low frequencies by up to `1 + γ·w·‖AᵀA‖` but passes the rounding's
/// high ones — so 5.3e-5 relative measured on the fused stack (where the inverse alone agrees to
/// 1.4e-7: the self-test) and 3.4e-5 on the mixed one; asserted 2e-4 relative and 0.01 dB, as the
/// pinv start's CG (`pnp_from_pinv_on_the_device_is_the_cpu_run`).
#[test]
fn hqs_jobs_on_the_device_are_the_cpu_jobs() {
    let hqs = |preset: String| {
        let out = preset.replace(
            "[algorithm]\nkind = \"pnp\"\n",
            "[algorithm]\nkind = \"pnp\"\nsplitting = \"hqs\"\nsigma_schedule = \"dpir\"\n\
             sigma_schedule_iterations = 4\n",
        );
        assert!(out.contains("splitting = \"hqs\""), "{out}");
        out
    };
    assert_same_run_within(&hqs(blurs(&["circular"; 3])), 2e-4, 1e-2);
    assert_same_run_within(
        &hqs(blurs(&["valid", "circular", "reflect", "constant"])),
        2e-4,
        1e-2,
    );
}

/// A 13³ volume under a valid and a circular 3-D Gaussian blur (kernels of 7³ and 5³), PnP+TV
/// from the adjoint, tracking the objective.
const BLUR3D: &str = r#"
version = 1
name = "3-D blurs on the device"
seed = 2
[image]
sample = "shepp_logan3d"
size = [13, 13, 13]
[[physics]]
kind = "blur3d"
sigma = [0.6, 0.4, 0.5]
padding = "valid"
[[physics]]
kind = "blur3d"
sigma = [0.3, 0.5, 0.4]
padding = "circular"
[noise]
kind = "gaussian"
sigma = 0.02
[denoiser]
kind = "tv"
n_it_max = 20
[algorithm]
kind = "pnp"
iterations = 6
denoiser_sigma = 0.02
init = "adjoint"
relaxation = 0.9
clamp = [0.0, 1.0]
track_objective = true
"#;

/// 3-D blurs (valid and circular, operator by operator as on the CPU) on the device are the CPU
/// jobs within the 2-D blur jobs' tolerances: PnP with TV, PnP with 3-D wavelets (db4, 2 levels,
/// on odd sides), and damped CG (the 2-D CG jobs' bound).
#[test]
fn blur3d_jobs_on_the_device_are_the_cpu_jobs() {
    assert_same_run(BLUR3D);
    let wavelets = with_wavelets(BLUR3D, "db4", 2);
    assert!(wavelets.contains("kind = \"wavelet\""), "{wavelets}");
    assert_same_run(&wavelets);
    let damped = format!("{CG}\ndamping = 0.05");
    assert_same_run_within(&with_algorithm(BLUR3D, &damped), 1e-4, 1e-2);
}

/// A colour image under one blur per padding of `paddings` (one kernel size: all circular ones
/// fuse), tracking the objective.
fn blurs(paddings: &[&str]) -> String {
    let blurs: String = paddings
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                "[[physics]]\nkind = \"blur\"\nsigma = [1.6, {}]\nangle_deg = {}\npadding = \"{p}\"\n",
                0.5 + 0.2 * i as f32,
                20 * i
            )
        })
        .collect();
    format!(
        "version = 1\nname = \"blurs\"\nseed = 1\n[image]\nsample = \"natural\"\nsize = [23, 19]\n{blurs}\
         [noise]\nkind = \"gaussian\"\nsigma = 0.02\n[denoiser]\nkind = \"tv\"\nn_it_max = 15\n\
         [algorithm]\nkind = \"pnp\"\niterations = 5\ndenoiser_sigma = 0.02\nclamp = [0.0, 1.0]\n\
         track_objective = true\n"
    )
}

/// Two ranks sharing the (emulated) device, each with its operators (0, 2, 4 and 1, 3), their
/// gradient terms staged through the host and the sockets, give one rank's bits: the result, every
/// PSNR and every objective value. So do a tomography split by angle, a fused stack (every rank
/// applies it whole), and two 3-D blurs (one per rank).
#[test]
fn two_device_ranks_give_one_ranks_bits() {
    use crate::dist::testutil::on_group;
    let split = format!("{TOMOGRAPHY}[distributed]\nsplit_by_angle = 2\n");
    let paddings = ["valid", "circular", "replicate", "reflect", "constant"];
    let cg_split = with_algorithm(&split, CG);
    let cg_blurs = with_algorithm(&blurs(&paddings), CG);
    for text in [
        blurs(&paddings),
        split,
        blurs(&["circular"; 2]),
        cg_split,
        cg_blurs,
        BLUR3D.to_string(),
    ] {
        let preset = Preset::from_toml(&text, "device test", &[]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let runs = |world: usize| {
            on_group(world, |comm| {
                let out = RunDir::from(dir.path().join(format!("{world}")).as_path());
                let mut ignore = |_: JobEvent<'_>| ControlFlow::Continue(());
                let solver: Box<dyn crate::device::solve::DeviceSolver> =
                    Box::new(Arc::new(Emulator::new().unwrap()));
                run_on(
                    &preset,
                    &out,
                    Box::new(comm),
                    &[],
                    Some(solver),
                    None,
                    &mut ignore,
                )
                .unwrap()
            })
        };
        let one = runs(1).remove(0);
        let two = runs(2).remove(0);
        let bits = |s: &JobSummary| -> Vec<(Option<u64>, Option<u64>, u64)> {
            s.history
                .iter()
                .map(|h| {
                    (
                        h.psnr_db.map(f64::to_bits),
                        h.objective.map(f64::to_bits),
                        h.relative_change.to_bits(),
                    )
                })
                .collect()
        };
        assert_eq!(bits(&two), bits(&one), "{}", preset.name);
        let read =
            |run: &str| read_array(&dir.path().join(run).join("reconstruction.npy")).unwrap();
        assert_eq!(read("2").data(), read("1").data(), "{}", preset.name);
    }
}

/// A CG job whose callback asks for no preview and has no SSIM due downloads the image once (the
/// result): the residual, search direction and their products stay on the device, and its
/// reductions (α, β, PSNR, relative change) come back as scalars.
#[test]
fn a_device_cg_job_downloads_only_the_result() {
    let text = with_algorithm(TOMOGRAPHY, CG).replace("ssim_every = 4", "ssim_every = 0");
    let preset = Preset::from_toml(&text, "device test", &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    take_downloads();
    let mut ignore = |_: JobEvent<'_>| ControlFlow::Continue(());
    let summary = run_into(&preset, dir.path(), "device", true, &mut ignore);
    let downloads = take_downloads();
    assert_eq!(summary.algorithm, "cg least squares");
    assert!(summary.history.len() > 3, "{}", summary.history.len());
    let image_bytes = 32 * 32 * 4;
    let images = downloads.iter().filter(|&&b| b == image_bytes).count();
    assert_eq!(images, 1, "downloads (bytes): {downloads:?}");
    assert!(
        downloads.iter().all(|&b| b == image_bytes || b <= 1024),
        "a download that is neither the image nor a scalar: {downloads:?}"
    );
}

/// The iterate leaves the device only when asked: for the preview the callback wants (iteration
/// 3 here), the SSIMs that are due (`ssim_every = 4`: 4 and 8) and the final result. PSNR, the
/// relative change and the objective are reductions on the device (scalar downloads).
#[test]
fn a_device_job_downloads_the_iterate_only_when_a_preview_or_ssim_is_due() {
    let preset = Preset::from_toml(TOMOGRAPHY, "device test", &[]).unwrap();
    let image_bytes = 32 * 32 * 4;
    let dir = tempfile::tempdir().unwrap();
    let mut cpu_preview = None;
    let mut on_cpu = |event: JobEvent<'_>| {
        if let JobEvent::Iteration { report, x, .. } = event
            && report.iteration == 3
        {
            cpu_preview = Some(x.to_host().unwrap().into_owned());
        }
        ControlFlow::Continue(())
    };
    run_into(&preset, dir.path(), "cpu", false, &mut on_cpu);
    take_downloads();
    let mut preview = None;
    let mut iterations = 0;
    let mut on_device = |event: JobEvent<'_>| {
        if let JobEvent::Iteration { report, x, .. } = event {
            iterations += 1;
            if report.iteration == 3 {
                preview = Some(x.to_host().unwrap().into_owned());
            }
        }
        ControlFlow::Continue(())
    };
    run_into(&preset, dir.path(), "device", true, &mut on_device);
    let downloads = take_downloads();
    assert_eq!(iterations, 8);
    let images = downloads.iter().filter(|&&b| b == image_bytes).count();
    assert_eq!(images, 4, "downloads (bytes): {downloads:?}");
    assert!(
        downloads.iter().all(|&b| b == image_bytes || b <= 1024),
        "a download that is neither the image nor a scalar: {downloads:?}"
    );
    let e = relative_error(&preview.unwrap(), &cpu_preview.unwrap());
    assert!(e <= 1e-5, "preview at iteration 3: relative error {e:e}");
}

/// The memory a device job is admitted with on one rank of one (`memory::device_job` of
/// `device::solve::footprint`), bytes.
fn admitted_bytes(preset: &Preset) -> u64 {
    let x_shape = super::truth_shape(&preset.image, preset.is_volumetric(), &[]).unwrap();
    let parts = crate::device::solve::footprint(preset, &x_shape, 1, 0).unwrap();
    crate::memory::device_job(parts, 1).per_rank_bytes()
}

/// `preset` on `backend` (an emulated device of a chosen size) into `dir/name`.
fn run_on_emulator(
    preset: &Preset,
    dir: &Path,
    name: &str,
    backend: &Arc<Emulator>,
) -> crate::error::Result<JobSummary> {
    let out = RunDir::from(dir.join(name).as_path());
    let mut ignore = |_: JobEvent<'_>| ControlFlow::Continue(());
    run_on(
        preset,
        &out,
        Box::new(SingleProcess),
        &[],
        Some(Box::new(backend.clone())),
        None,
        &mut ignore,
    )
}

/// The jobs the device runs: PnP+TV and CG on a tomography and on blur stacks (fused, and of
/// every padding), PnP with wavelets on a 2-D and a 3-D tomography, FBP on an even and an odd
/// tomography and on a 3-D one, PnP (TV, wavelets) and CG on 3-D blurs.
fn device_jobs() -> Vec<(&'static str, String)> {
    let damped = format!("{CG}\ndamping = 0.05");
    let fbp = "[algorithm]\nkind = \"fbp\"";
    let paddings = ["valid", "circular", "replicate", "reflect", "constant"];
    let odd = TOMOGRAPHY
        .replace("size = [32, 32]", "size = [33, 33]")
        .replace("angles = 20", "angles = 17");
    vec![
        ("pnp+tv tomography", TOMOGRAPHY.to_string()),
        (
            "pnp+wavelet tomography",
            with_wavelets(TOMOGRAPHY, "db8", 3),
        ),
        ("cg tomography", with_algorithm(TOMOGRAPHY, &damped)),
        ("pnp+tv fused blurs", blurs(&["circular"; 3])),
        ("pnp+tv blurs of every padding", blurs(&paddings)),
        (
            "cg blurs of every padding",
            with_algorithm(&blurs(&paddings), &damped),
        ),
        ("fbp", with_algorithm(TOMOGRAPHY, fbp)),
        ("fbp 33² with 17 angles", with_algorithm(&odd, fbp)),
        ("pnp+wavelet tomography3d", tomography3d()),
        ("fbp tomography3d", with_algorithm(&tomography3d(), fbp)),
        ("pnp+tv blur3d", BLUR3D.to_string()),
        ("pnp+wavelet blur3d", with_wavelets(BLUR3D, "haar", 2)),
        ("cg blur3d", with_algorithm(BLUR3D, &damped)),
    ]
}

/// A device with one byte less than the job's estimate refuses it before any work, with a message
/// naming the estimate, the free memory and the device: nothing allocated on the device, no run
/// folder. A device with exactly the estimate runs it, and its `metrics.json` says so.
#[test]
fn a_job_that_does_not_fit_the_device_is_refused_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    for (what, text) in device_jobs() {
        let preset = Preset::from_toml(&text, "device test", &[]).unwrap();
        let need = admitted_bytes(&preset);
        let small = Arc::new(Emulator::with_memory(need - 1));
        let e = run_on_emulator(&preset, dir.path(), "small", &small)
            .unwrap_err()
            .to_string();
        let human = crate::error::human_bytes;
        for part in [
            "not enough memory".to_string(),
            format!("the job needs {}", human(need)),
            format!("CPU emulator (g++) (emulator) has {} free", human(need - 1)),
            "device job: ≈".to_string(),
            "measurements".to_string(),
        ] {
            if what.starts_with("fbp") && part == "measurements" {
                continue;
            }
            assert!(e.contains(&part), "{what}: `{part}` missing from: {e}");
        }
        assert_eq!(
            small.meter().peak_bytes(),
            0,
            "{what}: allocated before refusing"
        );
        assert!(!dir.path().join("small").exists(), "{what}");
        let exact = Arc::new(Emulator::with_memory(need));
        let summary = run_on_emulator(&preset, dir.path(), what, &exact).unwrap();
        let [device] = summary.devices.as_slice() else {
            panic!("{what}: devices {:?}", summary.devices);
        };
        assert_eq!(device.estimated_bytes, need, "{what}");
        assert_eq!(device.total_bytes, need, "{what}");
        assert_eq!(
            (device.name.as_str(), device.device.as_str()),
            ("CPU emulator (g++)", "emulator")
        );
        assert!(
            device.peak_bytes > 0 && device.peak_bytes <= need,
            "{what}: {device:?}"
        );
    }
}

/// How much the estimate may exceed what a job's buffers measured at their peak on the device.
/// The estimate counts the largest buffers of each phase as if they were alive together (and a
/// GPU's cuFFT work areas, which the emulator does not allocate), so it is an upper bound; within
/// this factor it stays useful for admitting jobs.
const ESTIMATE_FACTOR: f64 = 3.0;

/// For every job the device runs, the estimate it was admitted with is an upper bound of the
/// device memory its buffers held at their peak (measured by the backend's meter), and at most
/// [`ESTIMATE_FACTOR`] times it; on two ranks sharing the device too (operators split 3 + 2).
#[test]
fn the_estimate_bounds_the_measured_peak() {
    let dir = tempfile::tempdir().unwrap();
    let check = |what: &str, d: &super::RankDeviceUse| {
        let ratio = d.estimated_bytes as f64 / d.peak_bytes as f64;
        eprintln!(
            "{what} (rank {}): peak {} B, estimate {} B, ratio {ratio:.2}",
            d.rank, d.peak_bytes, d.estimated_bytes
        );
        assert!(
            d.peak_bytes <= d.estimated_bytes && ratio <= ESTIMATE_FACTOR,
            "{what}: {d:?} (ratio {ratio:.2})"
        );
    };
    for (what, text) in device_jobs() {
        let preset = Preset::from_toml(&text, "device test", &[]).unwrap();
        let backend = Arc::new(Emulator::new().unwrap());
        let summary = run_on_emulator(&preset, dir.path(), what, &backend).unwrap();
        check(what, &summary.devices[0]);
    }
    use crate::dist::testutil::on_group;
    let paddings = ["valid", "circular", "replicate", "reflect", "constant"];
    let split = format!("{TOMOGRAPHY}[distributed]\nsplit_by_angle = 2\n");
    for (what, text) in [
        ("2 ranks: pnp+tv blurs of every padding", blurs(&paddings)),
        (
            "2 ranks: cg on a tomography split by angle",
            with_algorithm(&split, CG),
        ),
    ] {
        let preset = Preset::from_toml(&text, "device test", &[]).unwrap();
        let out = dir.path().join(what);
        let summaries = on_group(2, |comm| {
            let mut ignore = |_: JobEvent<'_>| ControlFlow::Continue(());
            let solver: Box<dyn crate::device::solve::DeviceSolver> =
                Box::new(Arc::new(Emulator::new().unwrap()));
            run_on(
                &preset,
                &RunDir::from(out.as_path()),
                Box::new(comm),
                &[],
                Some(solver),
                None,
                &mut ignore,
            )
            .unwrap()
        });
        let devices = &summaries[0].devices;
        assert_eq!(devices.len(), 2, "{what}");
        for (r, d) in devices.iter().enumerate() {
            assert_eq!(d.rank, r);
            check(what, d);
        }
    }
}

/// A device run's `metrics.json` holds each rank's device, which decodes as the summary's; a CPU
/// run's has no such field (its file is as before). The workbench's decoding of both is
/// `gui::session`'s test.
#[test]
fn metrics_json_carries_the_device_only_for_device_runs() {
    let preset = Preset::from_toml(TOMOGRAPHY, "device test", &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut ignore = |_: JobEvent<'_>| ControlFlow::Continue(());
    let cpu = run_into(&preset, dir.path(), "cpu", false, &mut ignore);
    let device = run_into(&preset, dir.path(), "device", true, &mut ignore);
    assert!(cpu.devices.is_empty());
    let metrics = |run: &JobSummary| {
        std::fs::read_to_string(run.run_dir.as_ref().unwrap().join("metrics.json")).unwrap()
    };
    let (cpu_json, device_json) = (metrics(&cpu), metrics(&device));
    assert!(!cpu_json.contains("\"devices\""), "{cpu_json}");
    let value: serde_json::Value = serde_json::from_str(&device_json).unwrap();
    let d = &value["devices"][0];
    assert_eq!(d["name"], "CPU emulator (g++)");
    assert_eq!(d["device"], "emulator");
    for field in ["total_bytes", "peak_bytes", "estimated_bytes"] {
        assert!(d[field].as_u64().is_some_and(|b| b > 0), "{field}: {d}");
    }
    let decoded: Vec<super::RankDeviceUse> =
        serde_json::from_value(value["devices"].clone()).unwrap();
    assert_eq!(decoded, device.devices);
}
