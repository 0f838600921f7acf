//! The images `tessera train` learns from and the held-out images it is scored on: generated
//! samples (each with its own seed), image files, and folders of them. Crops are drawn uniformly
//! over every crop position of every training image, so a small image is not drawn as often as a
//! large one; a held-out file is never a training image, even when it sits in a training folder.

use std::path::{Path, PathBuf};

use rand::RngExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::io::FileKind;
use crate::preset::ImageSource;
use crate::samples::Sample;
use crate::tensor::Tensor;

/// One entry of `[[images]]` / `[[held_out]]`: a generated sample, an image file, or a folder of
/// image files (`.png`, `.npy`, `.jpg`, `.tif`, `.nii`; read in name order).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainImage {
    /// A built-in sample (exclusive with `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<Sample>,
    /// The sample's size, `[H, W]` or `[D, H, W]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Vec<usize>>,
    /// The sample's seed (default: the preset's `seed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// A file or a folder of files, relative to the preset's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Convert colour to one channel (mean of R, G, B).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grayscale: bool,
}

impl TrainImage {
    /// One line saying what the entry is (for the workbench's list), e.g. `generated natural
    /// 512×512, seed 3, grey` or `photos/` (a file or a folder).
    pub fn summary(&self) -> String {
        let mut s = match (&self.sample, &self.path) {
            (Some(sample), _) => {
                let size = self.size.as_ref().map_or(String::new(), |d| {
                    let d: Vec<String> = d.iter().map(|n| n.to_string()).collect();
                    format!(" {}", d.join("×"))
                });
                format!("generated {sample:?}{size}").to_lowercase()
            }
            (None, Some(path)) => path.display().to_string(),
            (None, None) => "nothing (needs a sample or a path)".into(),
        };
        if let Some(seed) = self.seed {
            s.push_str(&format!(", seed {seed}"));
        }
        if self.grayscale {
            s.push_str(", grey");
        }
        s
    }

    /// The entry as an `[image]`-style source (the single-image form of a training preset).
    pub fn from_source(source: &ImageSource) -> TrainImage {
        TrainImage {
            sample: source.sample,
            size: source.size.clone(),
            seed: None,
            path: source.path.clone(),
            grayscale: source.grayscale,
        }
    }

    pub fn validate(&self, field: &str) -> Result<()> {
        match (&self.sample, &self.path) {
            (Some(_), Some(_)) => Err(Error::config(field, "give `sample` or `path`, not both")),
            (None, None) => Err(Error::config(field, "give `sample` or `path`")),
            (None, Some(_)) if self.size.is_some() || self.seed.is_some() => Err(Error::config(
                field,
                "`size` and `seed` belong to a generated `sample`, not to a file",
            )),
            _ => Ok(()),
        }
    }

    /// Whether the entry is a volume (a 3-D size or the 3-D phantom).
    pub fn volumetric(&self) -> bool {
        self.size.as_ref().is_some_and(|s| s.len() == 3)
            || self.sample == Some(Sample::SheppLogan3d)
    }
}

/// A loaded image: where it came from (for logs and errors) and its pixels `(1, C, …)`.
#[derive(Debug, Clone)]
pub struct NamedImage {
    pub name: String,
    pub image: Tensor,
}

/// Loads every entry of `entries` (`field` names the list in errors; relative paths against
/// `base_dir`; samples seeded with their own seed or `seed`), leaving out the files in `exclude`.
pub fn load_images(
    entries: &[TrainImage],
    field: &str,
    base_dir: &Path,
    seed: u64,
    volumetric: bool,
    exclude: &[PathBuf],
) -> Result<Vec<NamedImage>> {
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let here = format!("{field}[{i}]");
        entry.validate(&here)?;
        if let Some(sample) = entry.sample {
            let seed = entry.seed.unwrap_or(seed);
            let source = ImageSource {
                sample: Some(sample),
                size: entry.size.clone(),
                grayscale: entry.grayscale,
                ..ImageSource::default()
            };
            let image = crate::job::load_image(&source, volumetric, seed)
                .map_err(|e| Error::config(here.clone(), e.to_string()))?;
            out.push(NamedImage {
                name: format!(
                    "{sample:?} {:?} seed {seed}{}",
                    entry.size.as_deref().unwrap_or(&[]),
                    if entry.grayscale { " grey" } else { "" }
                ),
                image,
            });
            continue;
        }
        let path = crate::io::resolve(base_dir, entry.path.as_deref().unwrap_or(Path::new("")));
        for file in files_of(&path, &here)? {
            if is_excluded(&file, exclude) {
                continue;
            }
            let source = ImageSource {
                path: Some(file.clone()),
                grayscale: entry.grayscale,
                ..ImageSource::default()
            };
            let image = crate::job::load_image(&source, volumetric, seed)?;
            out.push(NamedImage {
                name: file.display().to_string(),
                image,
            });
        }
    }
    Ok(out)
}

/// The shape `(1, C, …)` of every image [`load_images`] would load from `entries`, read from the
/// files' headers and the samples' sizes without loading any: what the memory estimate needs.
pub fn shapes(
    entries: &[TrainImage],
    field: &str,
    base_dir: &Path,
    volumetric: bool,
    exclude: &[PathBuf],
) -> Result<Vec<Vec<usize>>> {
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let here = format!("{field}[{i}]");
        entry.validate(&here)?;
        let source = |path: Option<PathBuf>| ImageSource {
            sample: entry.sample,
            size: entry.size.clone(),
            path,
            grayscale: entry.grayscale,
            ..ImageSource::default()
        };
        if entry.sample.is_some() {
            out.push(
                crate::job::truth_shape(&source(None), volumetric, &[])
                    .map_err(|e| Error::config(here.clone(), e.to_string()))?,
            );
            continue;
        }
        let path = crate::io::resolve(base_dir, entry.path.as_deref().unwrap_or(Path::new("")));
        for file in files_of(&path, &here)? {
            if !is_excluded(&file, exclude) {
                out.push(crate::job::truth_shape(
                    &source(Some(file)),
                    volumetric,
                    &[],
                )?);
            }
        }
    }
    Ok(out)
}

/// The image files named by `path`: the file itself, or a folder's readable files in name order.
fn files_of(path: &Path, field: &str) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        if !path.is_file() {
            return Err(Error::config(
                field,
                format!("no such file or folder: {}", path.display()),
            ));
        }
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Error::io("listing", path, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && FileKind::from_path(p).is_some())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::config(
            field,
            format!(
                "the folder has no image files (.png, .npy, .jpg, .tif, .nii): {}",
                path.display()
            ),
        ));
    }
    Ok(files)
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

fn is_excluded(file: &Path, exclude: &[PathBuf]) -> bool {
    let file = canonical(file);
    exclude.iter().any(|e| canonical(e) == file)
}

/// The files that held-out entries name (folders expanded), resolved against `base_dir`.
pub fn held_out_files(entries: &[TrainImage], base_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if let Some(p) = &entry.path {
            files.extend(files_of(
                &crate::io::resolve(base_dir, p),
                &format!("held_out[{i}]"),
            )?);
        }
    }
    Ok(files)
}

/// Refuses a generated sample that is both a training and a held-out image.
pub fn check_disjoint(train: &[TrainImage], held_out: &[TrainImage], seed: u64) -> Result<()> {
    let key = |e: &TrainImage| {
        (
            e.sample,
            e.size.clone(),
            e.seed.unwrap_or(seed),
            e.grayscale,
        )
    };
    for (i, h) in held_out.iter().enumerate() {
        if h.sample.is_some() && train.iter().any(|t| t.sample.is_some() && key(t) == key(h)) {
            return Err(Error::config(
                format!("held_out[{i}]"),
                "the same generated sample (kind, size, seed) is also a training image; give it another seed",
            ));
        }
    }
    Ok(())
}

/// Draws a crop uniformly over every crop position of every image (`dims` per image, `crop` per
/// axis): the image's index and the crop's corner. With one image no index is drawn, so a
/// single-image preset draws the crops it drew before lists of images existed.
pub fn draw_crop(
    rng: &mut impl rand::Rng,
    dims: &[[usize; 3]],
    crop: [usize; 3],
) -> (usize, [isize; 3]) {
    let positions = |d: &[usize; 3]| (0..3).map(|a| d[a] - crop[a] + 1).product::<usize>();
    let index = if dims.len() == 1 {
        0
    } else {
        let total: usize = dims.iter().map(positions).sum();
        let mut r = rng.random_range(0..total);
        let mut i = 0;
        while r >= positions(&dims[i]) {
            r -= positions(&dims[i]);
            i += 1;
        }
        i
    };
    let d = dims[index];
    let corner = std::array::from_fn(|a| rng.random_range(0..=d[a] - crop[a]) as isize);
    (index, corner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn crops_come_from_every_image_in_proportion_to_their_crop_positions_and_stay_inside() {
        let dims = [[1, 40, 40], [1, 20, 30], [1, 16, 16]];
        let crop = [1, 16, 16];
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut counts = [0usize; 3];
        for _ in 0..20_000 {
            let (i, c) = draw_crop(&mut rng, &dims, crop);
            counts[i] += 1;
            for a in 0..3 {
                assert!(
                    c[a] >= 0 && c[a] as usize + crop[a] <= dims[i][a],
                    "{i} {c:?}"
                );
            }
        }
        // Positions: 25·25 = 625, 5·15 = 75, 1: shares 0.893, 0.107, 0.0014.
        let share = |n: usize| n as f64 / 20_000.0;
        assert!(
            (share(counts[0]) - 625.0 / 701.0).abs() < 0.01,
            "{counts:?}"
        );
        assert!((share(counts[1]) - 75.0 / 701.0).abs() < 0.01, "{counts:?}");
        assert!(counts[2] > 0, "{counts:?}");
    }

    #[test]
    fn one_image_draws_no_index() {
        let mut a = rand::rngs::StdRng::seed_from_u64(9);
        let mut b = rand::rngs::StdRng::seed_from_u64(9);
        let (i, c) = draw_crop(&mut a, &[[1, 50, 60]], [1, 8, 8]);
        // What the single-image loop drew before: one corner coordinate per axis, nothing else.
        let corner: [isize; 3] =
            std::array::from_fn(|ax| b.random_range(0..=[0usize, 42, 52][ax]) as isize);
        assert_eq!((i, c), (0, corner));
    }

    #[test]
    fn a_folder_loses_its_held_out_files_and_bad_entries_are_named() {
        let dir = tempfile::tempdir().unwrap();
        for (name, v) in [("a.npy", 0.25f32), ("b.npy", 0.5), ("notes.txt", 0.0)] {
            let p = dir.path().join(name);
            if name.ends_with(".npy") {
                crate::io::write_array(&p, &Tensor::from_fn(&[12, 14], |_| v)).unwrap();
            } else {
                std::fs::write(&p, "not an image").unwrap();
            }
        }
        let folder = TrainImage {
            path: Some(".".into()),
            ..TrainImage::default()
        };
        let held = [TrainImage {
            path: Some("b.npy".into()),
            ..TrainImage::default()
        }];
        let exclude = held_out_files(&held, dir.path()).unwrap();
        let got = load_images(
            std::slice::from_ref(&folder),
            "images",
            dir.path(),
            0,
            false,
            &exclude,
        )
        .unwrap();
        assert_eq!(got.len(), 1);
        assert!(got[0].name.ends_with("a.npy"), "{}", got[0].name);
        assert_eq!(got[0].image.shape(), &[1, 1, 12, 14]);

        let missing = TrainImage {
            path: Some("nothing-here".into()),
            ..TrainImage::default()
        };
        let e = load_images(&[folder, missing], "images", dir.path(), 0, false, &[]).unwrap_err();
        assert!(e.to_string().contains("images[1]"), "{e}");
        let both = TrainImage {
            sample: Some(Sample::Natural),
            path: Some("a.npy".into()),
            ..TrainImage::default()
        };
        let e = load_images(&[both], "images", dir.path(), 0, false, &[]).unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
        let sample = TrainImage {
            sample: Some(Sample::Natural),
            size: Some(vec![32, 32]),
            ..TrainImage::default()
        };
        let e = check_disjoint(
            std::slice::from_ref(&sample),
            std::slice::from_ref(&sample),
            0,
        )
        .unwrap_err();
        assert!(e.to_string().contains("held_out[0]"), "{e}");
        let other = TrainImage {
            seed: Some(5),
            ..sample.clone()
        };
        check_disjoint(&[sample], &[other], 0).unwrap();
    }
}
