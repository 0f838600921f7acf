//! Which parts of a job have a device implementation: before a job runs on `--device cuda`, every
//! component of its preset that has none is named in one error, instead of the job falling back to
//! the CPU for it silently (issue 28). The table here is the one place that says what is on the GPU;
//! docs/GPU.md keeps the same list for users.

use super::Device;
use crate::denoise::DenoiserConfig;
use crate::error::{Error, Result};
use crate::fidelity::FidelityConfig;
use crate::optim::AlgorithmConfig;
use crate::physics::PhysicsConfig;
use crate::preset::Preset;
use crate::tiling::TilingKind;

/// Whether an operator has a device twin (`device::ops`, driven by `device::solve`). Every kind
/// has one today; a new kind must say here whether it does.
fn operator_on_gpu(config: &PhysicsConfig) -> bool {
    match config {
        PhysicsConfig::Blur(_)
        | PhysicsConfig::Blur3d(_)
        | PhysicsConfig::Tomography(_)
        | PhysicsConfig::Tomography3d(_) => true,
    }
}

/// The components of `preset` that have no device implementation yet, as a user would name them.
/// Any number of ranks may share the GPUs: their collectives are staged through the host
/// (`device::solve::DeviceObjective`). Noise is drawn once, on the host, when the measurements are simulated
/// (before they are uploaded), so it is not a component of the loop and is not listed.
pub fn not_on_gpu(preset: &Preset) -> Vec<String> {
    let mut missing = Vec::new();
    for (i, op) in preset.physics.iter().enumerate() {
        if !operator_on_gpu(op) {
            missing.push(format!("physics #{i} ({})", physics_kind(op)));
        }
    }
    if preset.distributed.split_by_channel.is_some_and(|n| n > 1) {
        missing.push("physics split by channel".into());
    }
    if let FidelityConfig::L1 { .. } = preset.fidelity {
        missing.push("fidelity l1".into());
    }
    // Only PnP runs the denoiser (a CG or FBP preset's section is not used).
    match &preset.denoiser {
        Some(DenoiserConfig::Tv(_) | DenoiserConfig::Wavelet(_)) | None => {}
        Some(_) if !matches!(preset.algorithm, AlgorithmConfig::Pnp(_)) => {}
        Some(denoiser) => missing.push(format!("denoiser {}", denoiser.kind_name())),
    }
    if let Some(tiling) = &preset.tiling {
        missing.push(format!("tiling {}", tiling_kind(tiling.kind)));
    }
    // PnP, CG and FBP all run on the device; FBP takes one 2-D or 3-D tomography (the CPU refuses
    // any other operator for FBP alike).
    // The device runs of an elastic group would resume on the CPU (job::run_elastic).
    if preset.distributed.elastic {
        missing.push("elastic runs".into());
    }
    missing
}

pub(crate) fn physics_kind(config: &PhysicsConfig) -> &'static str {
    match config {
        PhysicsConfig::Blur(_) => "blur",
        PhysicsConfig::Blur3d(_) => "blur3d",
        PhysicsConfig::Tomography(_) => "tomography",
        PhysicsConfig::Tomography3d(_) => "tomography3d",
    }
}

fn tiling_kind(kind: TilingKind) -> &'static str {
    match kind {
        TilingKind::Overlap => "overlap",
        TilingKind::Basic => "basic",
        TilingKind::Blend => "blend",
        TilingKind::Spatial => "spatial",
    }
}

/// `Ok` when a job can run on `device`: always on the CPU; on a GPU only when every component has
/// a device implementation, else one error naming them all.
pub fn check(device: Device, preset: &Preset) -> Result<()> {
    refuse_missing(device, not_on_gpu(preset))
}

/// `Ok` on the CPU or when nothing is `missing`; else the one error that names it all.
fn refuse_missing(device: Device, missing: Vec<String>) -> Result<()> {
    if !device.is_cuda() || missing.is_empty() {
        return Ok(());
    }
    Err(Error::Unsupported(format!(
        "--device {device}: not on the GPU yet: {} (docs/GPU.md lists what is); run on the CPU \
         (--device cpu) meanwhile",
        missing.join(", ")
    )))
}

/// The device a job runs on: `flag` (`--device` of `run` or `serve`), else the preset's
/// `[distributed] device`, else `TESSERA_DEVICE`, else the CPU. It is written into the preset's
/// `[distributed] device`, which `job` opens, unless the job stays on the CPU and the preset named
/// no device (then the preset is left as it was).
pub fn place(flag: Option<Device>, preset: &mut Preset) -> Result<Device> {
    let configured = match (flag, &preset.distributed.device) {
        (Some(device), _) => Some(device),
        (None, Some(text)) => Some(Device::parse("distributed.device", text)?),
        (None, None) => None,
    };
    let chosen = Device::chosen(configured)?;
    if chosen.is_cuda() || preset.distributed.device.is_some() {
        preset.distributed.device = Some(chosen.to_string());
    }
    Ok(chosen)
}

/// A full-waveform inversion on `device`: the wave kernels are not on the GPU yet.
pub fn check_fwi(device: Device) -> Result<()> {
    refuse_missing(device, vec!["fwi (the wave kernels)".into()])
}

/// Training on `device` (`tessera train`, a training job sent to `tessera serve`): `Ok` on the CPU;
/// on a GPU, one error naming every part of training that is not there yet, for the network
/// `model` (`drunet`, `dncnn`, `multidsn`). The device PnP's TV and operators do not train.
pub fn check_training(device: Device, model: &str) -> Result<()> {
    refuse_missing(
        device,
        vec![
            format!("training {model}: the network's forward and backward (cuDNN convolutions)"),
            "the adam optimiser".into(),
            "the training batches (crops, noise, augmentation)".into(),
            "the spatial decomposition's halo exchange".into(),
        ],
    )
}

/// What `tessera run` answers to `device` before any rank starts: `Ok` on the CPU; on a GPU, a
/// build without the `cuda` feature says how to rebuild, and a job with components not on the GPU
/// names them all ([`check`]) — never a CPU run. A job that passes runs on the device (`job` opens
/// it; a missing GPU or library is its error there).
pub fn check_run(device: Device, preset: &Preset) -> Result<()> {
    if !device.is_cuda() {
        return Ok(());
    }
    if !cfg!(feature = "cuda") {
        return Err(super::selftest::no_gpu_support(device));
    }
    check(device, preset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preset::BUNDLED;

    fn bundled(name: &str) -> Preset {
        let (_, text) = BUNDLED.iter().find(|(n, _)| *n == name).unwrap();
        Preset::from_toml(text, name, &[]).unwrap()
    }

    #[test]
    fn a_job_names_every_component_not_on_the_gpu() {
        let preset = bundled("tomography2d");
        assert!(check(Device::Cpu, &preset).is_ok());
        // The bundled 3-D tomography runs whole on the device.
        assert_eq!(not_on_gpu(&bundled("tomography3d")), Vec::<String>::new());
        // A preset with one of everything that is not on the GPU yet: one error lists them all
        // (and none of its operators, a 3-D blur included: each has a device twin).
        let mut preset = bundled("tomography2d");
        preset
            .physics
            .push(PhysicsConfig::Blur3d(Default::default()));
        preset.fidelity = FidelityConfig::L1 {
            reduction: Default::default(),
        };
        preset.denoiser = Some(DenoiserConfig::Median(Default::default()));
        preset.tiling = Some(crate::tiling::TilingConfig {
            kind: TilingKind::Spatial,
            ..Default::default()
        });
        preset.distributed.split_by_channel = Some(3);
        preset.distributed.elastic = true;
        let e = check(Device::Cuda(None), &preset).unwrap_err().to_string();
        assert!(e.contains("--device cuda: not on the GPU yet: "), "{e}");
        for part in [
            "physics split by channel",
            "fidelity l1",
            "denoiser median",
            "tiling spatial",
            "elastic runs",
        ] {
            assert!(e.contains(part), "{part} missing from: {e}");
        }
        assert!(!e.contains("physics #"), "{e}");
        preset.algorithm = AlgorithmConfig::Fbp(Default::default());
        let fbp = not_on_gpu(&preset);
        assert!(
            fbp.iter()
                .all(|m| !m.contains("fbp") && !m.starts_with("physics #")),
            "{fbp:?}"
        );
    }

    /// The device chosen for a job goes into its preset (what `job` opens); a CPU job whose
    /// preset named none leaves it as it was; a bad name is refused naming where it came from.
    #[test]
    fn the_chosen_device_is_written_into_the_preset() {
        let mut preset = bundled("quick");
        let before = preset.clone();
        if std::env::var_os("TESSERA_DEVICE").is_none() {
            assert_eq!(place(None, &mut preset).unwrap(), Device::Cpu);
            assert_eq!(preset, before);
        }
        assert_eq!(place(Some(Device::Cpu), &mut preset).unwrap(), Device::Cpu);
        assert_eq!(preset, before);
        let gpu = place(Some(Device::Cuda(Some(1))), &mut preset).unwrap();
        assert_eq!(gpu, Device::Cuda(Some(1)));
        assert_eq!(preset.distributed.device.as_deref(), Some("cuda:1"));
        // The flag wins over the preset; the preset's own device is used without one.
        assert_eq!(place(Some(Device::Cpu), &mut preset).unwrap(), Device::Cpu);
        assert_eq!(preset.distributed.device.as_deref(), Some("cpu"));
        preset.distributed.device = Some("cuda".into());
        assert_eq!(place(None, &mut preset).unwrap(), Device::Cuda(None));
        preset.distributed.device = Some("tpu".into());
        let e = place(None, &mut preset).unwrap_err().to_string();
        assert!(e.contains("distributed.device") && e.contains("tpu"), "{e}");
    }

    /// Training and FWI on a GPU are refused naming what is missing; the CPU passes.
    #[test]
    fn training_and_fwi_on_a_gpu_name_what_is_missing() {
        assert!(check_training(Device::Cpu, "drunet").is_ok());
        assert!(check_fwi(Device::Cpu).is_ok());
        let e = check_training(Device::Cuda(None), "drunet")
            .unwrap_err()
            .to_string();
        for part in [
            "--device cuda: not on the GPU yet: training drunet",
            "cuDNN",
            "adam",
            "crops, noise, augmentation",
            "--device cpu",
        ] {
            assert!(e.contains(part), "{part} missing from: {e}");
        }
        let e = check_fwi(Device::Cuda(Some(0))).unwrap_err().to_string();
        assert!(
            e.contains("--device cuda:0: not on the GPU yet: fwi (the wave kernels)"),
            "{e}"
        );
    }

    /// PnP with TV (any init, `pinv` included), CG least squares and FBP on 2-D tomography or
    /// blurs: every component has a device twin.
    #[test]
    fn pnp_tv_cg_and_fbp_on_tomography_or_blurs_are_on_the_gpu() {
        let mut preset = bundled("tomography2d");
        preset.denoiser = Some(DenoiserConfig::Tv(Default::default()));
        preset.tiling = None;
        for algorithm in [
            AlgorithmConfig::Pnp(Default::default()),
            AlgorithmConfig::Pnp(crate::optim::PnpConfig {
                init: crate::optim::Init::Pinv,
                ..Default::default()
            }),
            AlgorithmConfig::Cg(Default::default()),
            AlgorithmConfig::Fbp(Default::default()),
        ] {
            preset.algorithm = algorithm;
            assert_eq!(not_on_gpu(&preset), Vec::<String>::new());
            assert!(check(Device::Cuda(Some(0)), &preset).is_ok());
        }
        // CG takes no denoiser; a preset's leftover one is not run, so it is not listed.
        preset.algorithm = AlgorithmConfig::Cg(Default::default());
        preset.denoiser = Some(DenoiserConfig::Median(Default::default()));
        assert_eq!(not_on_gpu(&preset), Vec::<String>::new());
    }

    /// 3-D blurs of both their paddings, alone or beside a 3-D tomography, under PnP with TV or
    /// wavelets and under CG: every component has a device twin.
    #[test]
    fn three_d_blur_jobs_are_on_the_gpu() {
        use crate::physics::blur::{Blur3dConfig, Padding};
        let mut preset = bundled("tomography3d");
        let blur3d = |padding| {
            PhysicsConfig::Blur3d(Blur3dConfig {
                padding,
                ..Default::default()
            })
        };
        for physics in [
            vec![blur3d(Padding::Valid)],
            vec![blur3d(Padding::Circular), preset.physics[0].clone()],
        ] {
            preset.physics = physics;
            for (algorithm, denoiser) in [
                (
                    AlgorithmConfig::Pnp(Default::default()),
                    DenoiserConfig::Tv(Default::default()),
                ),
                (
                    AlgorithmConfig::Pnp(Default::default()),
                    DenoiserConfig::Wavelet(Default::default()),
                ),
                (
                    AlgorithmConfig::Cg(Default::default()),
                    DenoiserConfig::Median(Default::default()),
                ),
            ] {
                preset.algorithm = algorithm;
                preset.denoiser = Some(denoiser);
                assert_eq!(not_on_gpu(&preset), Vec::<String>::new());
                assert!(check(Device::Cuda(None), &preset).is_ok());
            }
        }
    }
}
