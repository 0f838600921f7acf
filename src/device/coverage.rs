//! Which parts of a job have a device implementation: before a job runs on `--device cuda`, every
//! component of its preset that has none is named in one error, instead of the job falling back to
//! the CPU for it silently (issue 28). The table here is the one place that says what is on the GPU;
//! docs/GPU.md keeps the same list for users.

use super::Device;
use crate::denoise::DenoiserConfig;
use crate::error::{Error, Result};
use crate::fidelity::FidelityConfig;
use crate::optim::{AlgorithmConfig, Init};
use crate::physics::PhysicsConfig;
use crate::preset::Preset;
use crate::tiling::TilingKind;

/// Whether an operator has a device twin (`device::ops`, driven by `device::solve`).
fn operator_on_gpu(config: &PhysicsConfig) -> bool {
    matches!(
        config,
        PhysicsConfig::Blur(_) | PhysicsConfig::Tomography(_)
    )
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
    match &preset.denoiser {
        Some(DenoiserConfig::Tv(_)) | None => {}
        Some(denoiser) => missing.push(format!("denoiser {}", denoiser.kind_name())),
    }
    if let Some(tiling) = &preset.tiling {
        missing.push(format!("tiling {}", tiling_kind(tiling.kind)));
    }
    match &preset.algorithm {
        AlgorithmConfig::Pnp(c) if c.init == Init::Pinv => {
            missing.push("algorithm pnp with init = pinv".into());
        }
        AlgorithmConfig::Pnp(_) => {}
        AlgorithmConfig::Cg(_) => missing.push("algorithm cg".into()),
        AlgorithmConfig::Fbp(_) => missing.push("algorithm fbp".into()),
    }
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
    if !device.is_cuda() {
        return Ok(());
    }
    let missing = not_on_gpu(preset);
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Unsupported(format!(
        "--device {device}: not on the GPU yet: {} (docs/GPU.md lists what is); run on the CPU \
         (--device cpu) meanwhile",
        missing.join(", ")
    )))
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
        let missing = not_on_gpu(&bundled("tomography3d"));
        assert!(
            missing.contains(&"physics #0 (tomography3d)".to_string()),
            "{missing:?}"
        );
        // A preset with one of everything that is not on the GPU yet: one error lists them all.
        let mut preset = bundled("tomography2d");
        preset
            .physics
            .push(bundled("tomography3d").physics[0].clone());
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
            "physics #1 (tomography3d)",
            "physics split by channel",
            "fidelity l1",
            "denoiser median",
            "tiling spatial",
            "elastic runs",
        ] {
            assert!(e.contains(part), "{part} missing from: {e}");
        }
        assert!(!e.contains("physics #0"), "{e}");
        for (algorithm, name) in [
            (AlgorithmConfig::Cg(Default::default()), "algorithm cg"),
            (AlgorithmConfig::Fbp(Default::default()), "algorithm fbp"),
            (
                AlgorithmConfig::Pnp(crate::optim::PnpConfig {
                    init: Init::Pinv,
                    ..Default::default()
                }),
                "algorithm pnp with init = pinv",
            ),
        ] {
            preset.algorithm = algorithm;
            assert!(not_on_gpu(&preset).contains(&name.to_string()), "{name}");
        }
    }

    /// PnP with TV on 2-D tomography or blurs: every component has a device twin.
    #[test]
    fn pnp_tv_on_tomography_or_blurs_is_on_the_gpu() {
        let mut preset = bundled("tomography2d");
        preset.denoiser = Some(DenoiserConfig::Tv(Default::default()));
        preset.tiling = None;
        preset.algorithm = AlgorithmConfig::Pnp(Default::default());
        assert_eq!(not_on_gpu(&preset), Vec::<String>::new());
        assert!(check(Device::Cuda(Some(0)), &preset).is_ok());
    }
}
