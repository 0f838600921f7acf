//! Data for Multi-DSN, runnable with nothing downloaded: labelled scientific-looking images
//! (bright objects of a few shape classes on a smooth background) and domains made from them by
//! the project's physics — Gaussian blur, additive noise, contrast changes, parallel-beam
//! tomography followed by filtered back-projection — or a user's folder of images, one sub-folder
//! per class.
//!
//! Every image is a function of `(seed, domain, index)` only, so a domain's data do not depend on
//! the rank it is placed on.

use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::physics::Physics;
use crate::physics::blur::{Blur, Padding, gaussian_kernel};
use crate::physics::noise::NoiseConfig;
use crate::physics::tomography::{Angles, Tomography};
use crate::tensor::Tensor;

/// The shape classes of the generator, in label order.
pub const SHAPE_CLASSES: [&str; 6] = ["disk", "square", "ring", "cross", "triangle", "stripes"];

/// One physical change applied to a domain's images, in the order listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Transform {
    /// Isotropic Gaussian blur of standard deviation `sigma_px` (edges replicated).
    Blur { sigma_px: f32 },
    /// Additive white Gaussian noise of standard deviation `sigma`.
    Noise { sigma: f32 },
    /// `gain · x^gamma + offset` (on `max(x, 0)`).
    Contrast { gain: f32, gamma: f32, offset: f32 },
    /// Parallel-beam tomography with `angles` uniform angles, noise of standard deviation
    /// `noise_sigma` relative to the sinogram's peak, then filtered back-projection.
    Tomography { angles: usize, noise_sigma: f32 },
}

impl Transform {
    /// A short description (`blur σ 1.5 px`), for lists.
    pub fn summary(&self) -> String {
        match self {
            Transform::Blur { sigma_px } => format!("blur σ {sigma_px} px"),
            Transform::Noise { sigma } => format!("noise σ {sigma}"),
            Transform::Contrast {
                gain,
                gamma,
                offset,
            } => format!("contrast {gain}·x^{gamma} + {offset}"),
            Transform::Tomography {
                angles,
                noise_sigma,
            } => format!("tomography {angles} angles (noise {noise_sigma}) + FBP"),
        }
    }

    fn validate(&self, field: &str) -> Result<()> {
        let bad = |what: &str, v: f32| {
            Err(Error::config(
                field,
                format!("{what} must be finite and positive, got {v}"),
            ))
        };
        match *self {
            Transform::Blur { sigma_px } if !(sigma_px.is_finite() && sigma_px > 0.0) => {
                bad("sigma_px", sigma_px)
            }
            Transform::Blur { sigma_px } if sigma_px > crate::physics::blur::MAX_SIGMA_PX => {
                Err(Error::config(
                    field,
                    format!(
                        "sigma_px = {sigma_px} is over the {} px a blur accepts",
                        crate::physics::blur::MAX_SIGMA_PX
                    ),
                ))
            }
            Transform::Noise { sigma } if !(sigma.is_finite() && sigma >= 0.0) => {
                bad("sigma", sigma)
            }
            Transform::Contrast {
                gain,
                gamma,
                offset,
            } if !(gain.is_finite() && gamma.is_finite() && offset.is_finite() && gamma > 0.0) => {
                bad("gamma (and finite gain, offset)", gamma)
            }
            Transform::Tomography { angles: 0, .. } => {
                Err(Error::config(field, "tomography needs at least one angle"))
            }
            Transform::Tomography { noise_sigma, .. }
                if !(noise_sigma.is_finite() && noise_sigma >= 0.0) =>
            {
                bad("noise_sigma", noise_sigma)
            }
            _ => Ok(()),
        }
    }
}

/// Where a domain's images come from and what physics changes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DomainConfig {
    /// A label for reports (`source`, `blurred`, …).
    pub name: String,
    /// A folder with one sub-folder per class (sorted names = labels 0, 1, …) of PNG/JPEG/TIFF
    /// images; `None` = the shape generator.
    #[serde(default)]
    pub folder: Option<PathBuf>,
    /// Applied in order to every image.
    #[serde(default)]
    pub transforms: Vec<Transform>,
}

impl DomainConfig {
    pub fn validate(&self, field: &str) -> Result<()> {
        for (i, t) in self.transforms.iter().enumerate() {
            t.validate(&format!("{field}.transforms[{i}]"))?;
        }
        Ok(())
    }
}

/// A domain's images (`n × size × size`, row-major) and their labels.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainData {
    pub size: usize,
    pub images: Vec<f32>,
    pub labels: Vec<usize>,
}

impl DomainData {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn image(&self, i: usize) -> &[f32] {
        let k = self.size * self.size;
        &self.images[i * k..(i + 1) * k]
    }
}

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One generated image of class `class` (an index into [`SHAPE_CLASSES`]) from `rng`: an object of
/// random centre, size, orientation and brightness with soft (one-pixel) edges on a smooth
/// background ramp, values in about `0..1`.
pub fn shape_image(class: usize, size: usize, rng: &mut rand::rngs::StdRng) -> Vec<f32> {
    let s = size as f32;
    let r = s * rng.random_range(0.2f32..0.32);
    let cx = s * 0.5 + s * rng.random_range(-0.12f32..0.12);
    let cy = s * 0.5 + s * rng.random_range(-0.12f32..0.12);
    let theta = rng.random_range(0.0f32..std::f32::consts::PI);
    let (sin, cos) = theta.sin_cos();
    let bright = rng.random_range(0.6f32..1.0);
    let (bg, gx, gy) = (
        rng.random_range(0.0f32..0.15),
        rng.random_range(-0.1f32..0.1),
        rng.random_range(-0.1f32..0.1),
    );
    let period = r * rng.random_range(0.45f32..0.7);
    // Signed distance-like value: positive inside the object, in pixels.
    let inside = |x: f32, y: f32| -> f32 {
        let (dx, dy) = (x - cx, y - cy);
        let (u, v) = (cos * dx + sin * dy, -sin * dx + cos * dy);
        let d = (dx * dx + dy * dy).sqrt();
        match class {
            0 => r - d,
            1 => 0.85 * r - u.abs().max(v.abs()),
            2 => 0.3 * r - (d - 0.7 * r).abs(),
            3 => {
                let w = 0.3 * r;
                ((w - u.abs()).min(r - v.abs())).max((w - v.abs()).min(r - u.abs()))
            }
            4 => (0..3)
                .map(|k| {
                    let a = theta + k as f32 * 2.0 * std::f32::consts::PI / 3.0;
                    0.5 * r - (a.cos() * dx + a.sin() * dy)
                })
                .fold(f32::INFINITY, f32::min),
            _ => (r - d).min(period * 0.25 * (2.0 * std::f32::consts::PI * u / period).cos()),
        }
    };
    let mut img = Vec::with_capacity(size * size);
    for i in 0..size {
        for j in 0..size {
            let (x, y) = (j as f32 + 0.5, i as f32 + 0.5);
            let edge = (inside(x, y) + 0.5).clamp(0.0, 1.0);
            let back = bg + gx * (x / s - 0.5) + gy * (y / s - 0.5);
            img.push(back + edge * bright);
        }
    }
    img
}

/// `n` generated images of `classes` classes (labels drawn uniformly), image `i` a function of
/// `(seed, domain, i)` only.
pub fn generate(classes: usize, size: usize, n: usize, seed: u64, domain: usize) -> DomainData {
    let mut images = Vec::with_capacity(n * size * size);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        let mut rng = rand::rngs::StdRng::seed_from_u64(mix(mix(seed, domain as u64), i as u64));
        let class = rng.random_range(0..classes);
        images.extend(shape_image(class, size, &mut rng));
        labels.push(class);
    }
    DomainData {
        size,
        images,
        labels,
    }
}

/// Applies `transforms` to every image of `data`; noise draws are a function of `seed` and the
/// image's index.
pub fn apply(data: &mut DomainData, transforms: &[Transform], seed: u64) -> Result<()> {
    let s = data.size;
    let k = s * s;
    let mut tomo: Option<Tomography> = None;
    for (t_index, t) in transforms.iter().enumerate() {
        for i in 0..data.len() {
            let seed_i = mix(mix(seed, t_index as u64), i as u64);
            let img = &mut data.images[i * k..(i + 1) * k];
            let x = Tensor::from_vec(&[1, 1, s, s], img.to_vec())?;
            let y = match *t {
                Transform::Blur { sigma_px } => {
                    Blur::new(gaussian_kernel([sigma_px; 2], 0.0), Padding::Replicate)?
                        .forward(&x)?
                }
                Transform::Noise { sigma } => NoiseConfig::Gaussian { sigma }.apply(&x, seed_i)?,
                Transform::Contrast {
                    gain,
                    gamma,
                    offset,
                } => Tensor::from_vec(
                    &[1, 1, s, s],
                    img.iter()
                        .map(|v| gain * v.max(0.0).powf(gamma) + offset)
                        .collect(),
                )?,
                Transform::Tomography {
                    angles,
                    noise_sigma,
                } => {
                    if tomo
                        .as_ref()
                        .is_none_or(|op| op.angles_deg().len() != angles)
                    {
                        tomo = Some(Tomography::new(s, &Angles::Count(angles), true, false)?);
                    }
                    let op = tomo.as_ref().expect("built above");
                    let sino = op.forward(&x)?;
                    let peak = sino.data().iter().fold(0f32, |m, v| m.max(v.abs()));
                    let sino = NoiseConfig::Gaussian {
                        sigma: noise_sigma * peak.max(f32::MIN_POSITIVE),
                    }
                    .apply(&sino, seed_i)?;
                    op.fbp(&sino)?
                }
            };
            img.copy_from_slice(y.data());
        }
    }
    Ok(())
}

/// Reads a folder with one sub-folder per class (sorted by name: labels 0, 1, …), every image
/// converted to gray and resampled (bilinear) to `size × size`. Errors name the folder or file.
/// Files in the class sub-folders of `dir` (what [`read_folder`] would read), counted without
/// reading them; a folder that cannot be listed counts nothing here and fails when it is read.
pub fn count_images(dir: &Path) -> u64 {
    let listed = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .map(|e| e.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    };
    listed(dir)
        .iter()
        .filter(|p| p.is_dir())
        .map(|c| listed(c).iter().filter(|p| p.is_file()).count() as u64)
        .sum()
}

pub fn read_folder(dir: &Path, classes: usize, size: usize) -> Result<DomainData> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("reading the folder", dir, e))?;
    let mut class_dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    class_dirs.sort();
    if class_dirs.len() != classes {
        return Err(Error::format(
            dir,
            format!(
                "expected one sub-folder per class ({classes}), found {} sub-folders",
                class_dirs.len()
            ),
        ));
    }
    let mut data = DomainData {
        size,
        images: Vec::new(),
        labels: Vec::new(),
    };
    for (label, cdir) in class_dirs.iter().enumerate() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(cdir)
            .map_err(|e| Error::io("reading the folder", cdir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::format(cdir, "the class folder holds no images"));
        }
        for f in files {
            let t = crate::io::image::read_image(&f)?;
            let shape = t.shape();
            let (c, h, w) = (shape[1], shape[2], shape[3]);
            let plane = h * w;
            let gray: Vec<f32> = (0..plane)
                .map(|p| (0..c).map(|ch| t.data()[ch * plane + p]).sum::<f32>() / c as f32)
                .collect();
            data.images.extend(resample(&gray, h, w, size));
            data.labels.push(label);
        }
    }
    Ok(data)
}

/// Bilinear resampling of an `h × w` image to `size × size` (pixel centres aligned).
fn resample(img: &[f32], h: usize, w: usize, size: usize) -> Vec<f32> {
    if h == size && w == size {
        return img.to_vec();
    }
    let at = |y: usize, x: usize| img[y.min(h - 1) * w + x.min(w - 1)];
    let mut out = Vec::with_capacity(size * size);
    for i in 0..size {
        let fy = ((i as f32 + 0.5) * h as f32 / size as f32 - 0.5).max(0.0);
        let (y0, ty) = (fy.floor() as usize, fy.fract());
        for j in 0..size {
            let fx = ((j as f32 + 0.5) * w as f32 / size as f32 - 0.5).max(0.0);
            let (x0, tx) = (fx.floor() as usize, fx.fract());
            let top = at(y0, x0) * (1.0 - tx) + at(y0, x0 + 1) * tx;
            let bottom = at(y0 + 1, x0) * (1.0 - tx) + at(y0 + 1, x0 + 1) * tx;
            out.push(top * (1.0 - ty) + bottom * ty);
        }
    }
    out
}

/// A domain's data: `n` images (generated, or all of the folder's) with the domain's physics applied.
pub fn load_domain(
    cfg: &DomainConfig,
    domain: usize,
    classes: usize,
    size: usize,
    n: usize,
    seed: u64,
) -> Result<DomainData> {
    let mut data = match &cfg.folder {
        Some(dir) => read_folder(dir, classes, size)?,
        None => {
            if classes > SHAPE_CLASSES.len() {
                return Err(Error::config(
                    "model.classes",
                    format!(
                        "the shape generator has {} classes, {classes} were asked",
                        SHAPE_CLASSES.len()
                    ),
                ));
            }
            generate(classes, size, n, seed, domain)
        }
    };
    apply(&mut data, &cfg.transforms, mix(seed, 1000 + domain as u64))?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_images_depend_only_on_seed_domain_and_index_and_classes_differ() {
        let a = generate(6, 32, 40, 9, 2);
        let b = generate(6, 32, 40, 9, 2);
        assert_eq!(a, b);
        assert_ne!(a.images, generate(6, 32, 40, 9, 3).images);
        // Every class occurs and differs from the others in mean brightness pattern.
        for c in 0..6 {
            assert!(a.labels.contains(&c), "class {c} missing");
        }
        let v = &a.images;
        assert!(v.iter().all(|x| x.is_finite() && (-0.2..1.3).contains(x)));
    }

    #[test]
    fn physics_domains_change_the_images_as_their_physics_says() {
        let clean = generate(4, 32, 4, 1, 0);
        let energy = |d: &DomainData| {
            // Energy of the vertical differences: blur lowers it, noise raises it.
            let s = d.size;
            (0..d.len())
                .map(|i| {
                    let im = d.image(i);
                    (0..s * (s - 1))
                        .map(|p| (im[p + s] - im[p]).powi(2))
                        .sum::<f32>()
                })
                .sum::<f32>()
        };
        let mut blurred = clean.clone();
        apply(&mut blurred, &[Transform::Blur { sigma_px: 1.5 }], 0).unwrap();
        let e = Transform::Blur { sigma_px: 1e9 }
            .validate("domains[1].transforms[0]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("transforms[0]") && e.contains("500"), "{e}");
        assert!(energy(&blurred) < 0.8 * energy(&clean));
        let mut noisy = clean.clone();
        apply(&mut noisy, &[Transform::Noise { sigma: 0.2 }], 0).unwrap();
        assert!(energy(&noisy) > 1.5 * energy(&clean));
        let mut tomo = clean.clone();
        apply(
            &mut tomo,
            &[Transform::Tomography {
                angles: 60,
                noise_sigma: 0.0,
            }],
            0,
        )
        .unwrap();
        // FBP of 60 noiseless views reproduces the disk-inscribed image closely in the centre.
        let c = 16 * 32 + 16;
        for i in 0..tomo.len() {
            assert!(
                (tomo.image(i)[c] - clean.image(i)[c]).abs() < 0.15,
                "image {i}: {} vs {}",
                tomo.image(i)[c],
                clean.image(i)[c]
            );
        }
        assert_eq!(tomo.labels, clean.labels);
        let e = DomainConfig {
            name: "x".into(),
            folder: None,
            transforms: vec![Transform::Blur { sigma_px: -1.0 }],
        }
        .validate("domains[1]")
        .unwrap_err();
        assert!(e.to_string().contains("domains[1].transforms[0]"), "{e}");
    }

    #[test]
    fn folders_are_read_per_class_and_bad_folders_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_folder(&dir.path().join("nope"), 2, 8).unwrap_err();
        assert!(missing.to_string().contains("nope"), "{missing}");
        for (c, v) in [("a_disk", 50u8), ("b_square", 200u8)] {
            std::fs::create_dir(dir.path().join(c)).unwrap();
            for k in 0..2 {
                image::GrayImage::from_pixel(16, 12, image::Luma([v]))
                    .save(dir.path().join(c).join(format!("{k}.png")))
                    .unwrap();
            }
        }
        let d = read_folder(dir.path(), 2, 8).unwrap();
        assert_eq!(d.labels, [0, 0, 1, 1]);
        assert!((d.image(3)[5] - 200.0 / 255.0).abs() < 1e-6);
        let e = read_folder(dir.path(), 3, 8).unwrap_err();
        assert!(
            e.to_string().contains("one sub-folder per class (3)"),
            "{e}"
        );
        std::fs::create_dir(dir.path().join("c_empty")).unwrap();
        let e = read_folder(dir.path(), 3, 8).unwrap_err();
        assert!(e.to_string().contains("c_empty"), "{e}");
        std::fs::write(dir.path().join("c_empty").join("bad.png"), b"not a png").unwrap();
        let e = read_folder(dir.path(), 3, 8).unwrap_err();
        assert!(e.to_string().contains("bad.png"), "{e}");
    }
}
