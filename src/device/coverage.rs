//! Which parts of a job have a device implementation: before a job runs on `--device cuda`, every
//! component of its preset that has none is named in one error, instead of the job falling back to
//! the CPU for it silently (issue 28). The table here is the one place that says what is on the GPU;
//! docs/GPU.md keeps the same list for users.

use super::Device;
use crate::error::{Error, Result};
use crate::optim::AlgorithmConfig;
use crate::physics::PhysicsConfig;
use crate::preset::Preset;

/// Whether an operator has a device twin (`device::ops`).
fn operator_on_gpu(config: &PhysicsConfig) -> bool {
    matches!(
        config,
        PhysicsConfig::Blur(_) | PhysicsConfig::Tomography(_)
    )
}

/// The components of `preset` with no device implementation yet, as a user would name them.
pub fn not_on_gpu(preset: &Preset) -> Vec<String> {
    let mut missing = Vec::new();
    for (i, op) in preset.physics.iter().enumerate() {
        if !operator_on_gpu(op) {
            missing.push(format!("physics #{i} ({})", physics_kind(op)));
        }
    }
    if let Some(noise) = &preset.noise {
        missing.push(format!("noise ({})", noise_kind(noise)));
    }
    missing.push("fidelity".into());
    if let Some(denoiser) = &preset.denoiser {
        missing.push(format!("denoiser {}", denoiser.kind_name()));
    }
    if preset.tiling.is_some() {
        missing.push("tiling".into());
    }
    missing.push(format!(
        "algorithm {}",
        match preset.algorithm {
            AlgorithmConfig::Pnp(_) => "pnp",
            AlgorithmConfig::Cg(_) => "cg",
            AlgorithmConfig::Fbp(_) => "fbp",
        }
    ));
    missing
}

fn physics_kind(config: &PhysicsConfig) -> &'static str {
    match config {
        PhysicsConfig::Blur(_) => "blur",
        PhysicsConfig::Blur3d(_) => "blur3d",
        PhysicsConfig::Tomography(_) => "tomography",
        PhysicsConfig::Tomography3d(_) => "tomography3d",
    }
}

fn noise_kind(config: &crate::physics::NoiseConfig) -> &'static str {
    match config {
        crate::physics::NoiseConfig::Gaussian { .. } => "gaussian",
        crate::physics::NoiseConfig::Poisson { .. } => "poisson",
    }
}

/// `Ok` when the job can run on `device`: always on the CPU; on a GPU only when every component
/// has a device implementation, else one error naming them all.
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
        let e = check(Device::Cuda(None), &preset).unwrap_err().to_string();
        assert!(e.contains("--device cuda: not on the GPU yet"), "{e}");
        // Its operator has a device twin; its algorithm loop has not.
        assert!(!e.contains("physics #0"), "{e}");
        assert!(e.contains("algorithm"), "{e}");
        let missing = not_on_gpu(&bundled("tomography3d"));
        assert!(
            missing.contains(&"physics #0 (tomography3d)".to_string()),
            "{missing:?}"
        );
    }
}
