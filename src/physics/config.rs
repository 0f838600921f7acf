//! Serde configurations of the operators, as written in presets and `--physics` files.
//!
//! A config is plain data (validated, with defaults); [`PhysicsConfig::build`] turns it into a live
//! operator for a given image shape. Presets store configs, never operators.

use serde::{Deserialize, Serialize};

use super::LinearPhysics;
use super::blur::{Blur3dConfig, BlurConfig};
use super::noise::{NoiseConfig, Noisy};
use super::tomography::{Angles, TomographyConfig};
use super::tomography3d::Tomography3dConfig;
use crate::error::Result;

/// One operator of a physics stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PhysicsConfig {
    /// 2-D convolution (Gaussian or user kernel) with a padding mode.
    Blur(BlurConfig),
    /// 3-D convolution of volumes.
    Blur3d(Blur3dConfig),
    /// 2-D parallel-beam tomography.
    Tomography(TomographyConfig),
    /// 3-D parallel-beam tomography.
    Tomography3d(Tomography3dConfig),
}

impl PhysicsConfig {
    /// Checks every parameter's range; the error names the field.
    pub fn validate(&self) -> Result<()> {
        match self {
            PhysicsConfig::Blur(c) => c.validate(),
            PhysicsConfig::Blur3d(c) => c.validate(),
            PhysicsConfig::Tomography(c) => c.validate(),
            PhysicsConfig::Tomography3d(c) => c.validate(),
        }
    }

    /// The files the config names (a user kernel), for resolving them against the config's folder.
    pub fn paths_mut(&mut self) -> impl Iterator<Item = &mut std::path::PathBuf> {
        match self {
            PhysicsConfig::Blur(c) => c.kernel_file.as_mut(),
            PhysicsConfig::Blur3d(c) => c.kernel_file.as_mut(),
            PhysicsConfig::Tomography(_) | PhysicsConfig::Tomography3d(_) => None,
        }
        .into_iter()
    }

    /// Whether the operator acts on volumes `(B, C, D, H, W)` rather than images.
    pub fn is_volumetric(&self) -> bool {
        matches!(
            self,
            PhysicsConfig::Blur3d(_) | PhysicsConfig::Tomography3d(_)
        )
    }

    /// The operator split by angle into `parts` operators, each measuring a contiguous run of the
    /// projection angles ([`Angles::split`](super::tomography::Angles::split)); together they
    /// measure what the whole one does, so their stack computes the same least-squares problem with
    /// work that can be shared among up to `parts` ranks. Operators without angles (blurs) stay
    /// whole. A normalised operator cannot be split: each part would be scaled by its own norm.
    pub fn split_by_angle(&self, parts: usize, field: &str) -> Result<Vec<PhysicsConfig>> {
        let split = |angles: &Angles,
                     normalize: bool,
                     make: &dyn Fn(Angles) -> PhysicsConfig|
         -> Result<Vec<PhysicsConfig>> {
            if normalize {
                return Err(crate::error::Error::config(
                    field,
                    "a normalised tomography operator cannot be split by angle (each part would be scaled by its own norm); set normalize = false",
                ));
            }
            Ok(angles.split(parts, field)?.into_iter().map(make).collect())
        };
        match self {
            PhysicsConfig::Tomography(c) => split(&c.angles, c.normalize, &|angles| {
                PhysicsConfig::Tomography(TomographyConfig {
                    angles,
                    ..c.clone()
                })
            }),
            PhysicsConfig::Tomography3d(c) => split(&c.angles, c.normalize, &|angles| {
                PhysicsConfig::Tomography3d(Tomography3dConfig {
                    angles,
                    ..c.clone()
                })
            }),
            PhysicsConfig::Blur(_) | PhysicsConfig::Blur3d(_) => Ok(vec![self.clone()]),
        }
    }

    /// Builds the operator for inputs of shape `x_shape`, with optional measurement noise.
    pub fn build(
        &self,
        x_shape: &[usize],
        noise: Option<&NoiseConfig>,
    ) -> Result<Box<dyn LinearPhysics>> {
        self.validate()?;
        let op: Box<dyn LinearPhysics> = match self {
            PhysicsConfig::Blur(c) => Box::new(c.build()?),
            PhysicsConfig::Blur3d(c) => Box::new(c.build()?),
            PhysicsConfig::Tomography(c) => Box::new(c.build(x_shape)?),
            PhysicsConfig::Tomography3d(c) => Box::new(c.build(x_shape)?),
        };
        // Fail early, with the operator's own message, if the image does not suit the operator.
        op.output_shape(x_shape)?;
        Ok(match noise {
            Some(n) => {
                n.validate()?;
                Box::new(Noisy {
                    inner: op,
                    noise: n.clone(),
                })
            }
            None => op,
        })
    }
}
