//! Editors for the parts of a [`crate::preset::Preset`]: the physics stack, noise, denoiser, tiling
//! and algorithm. Each edits the config in place and says whether it changed; the app validates the
//! whole preset afterwards and shows the first error (named by its preset field).

use std::path::PathBuf;

use egui::{ComboBox, DragValue, TextureHandle, TextureOptions, Ui};

use super::preview::{Colormap, Contrast, Display, colorize};
use crate::denoise::{
    DenoiserConfig, GaussianConfig, MedianConfig, Threshold, TvConfig, WaveletConfig, WaveletKind,
};
use crate::dist::denoise::TileAssignment;
use crate::nn::{DncnnConfig, DrunetConfig, Engine, TorchDevice, TorchScriptConfig};
use crate::optim::{AlgorithmConfig, CgConfig, FbpConfig, Init, PnpConfig};
use crate::physics::blur::{Blur3dConfig, BlurConfig, Padding, gaussian_kernel};
use crate::physics::tomography::{Angles, TomographyConfig};
use crate::physics::tomography3d::Tomography3dConfig;
use crate::physics::{NoiseConfig, PhysicsConfig};
use crate::protocol::PreviewImage;
use crate::tiling::{Extent, TilingConfig, TilingKind};

/// Largest kernel side drawn as a thumbnail (larger Gaussians are described in words).
const MAX_THUMB_SIDE: usize = 255;

/// A kernel thumbnail and the parameters it was made from.
pub struct Thumb {
    key: ([f32; 2], f32),
    texture: TextureHandle,
    side: usize,
}

fn combo<T: PartialEq + Copy>(
    ui: &mut Ui,
    label: &str,
    value: &mut T,
    options: &[(T, &str)],
) -> bool {
    let current = options
        .iter()
        .find(|(v, _)| v == value)
        .map(|(_, n)| *n)
        .unwrap_or("?");
    let mut changed = false;
    ComboBox::from_label(label)
        .selected_text(current)
        .show_ui(ui, |ui| {
            for (v, name) in options {
                changed |= ui.selectable_value(value, *v, *name).changed();
            }
        });
    changed
}

/// A label and a value editor named by it (screen readers and tests find the editor by the label).
fn labelled(ui: &mut Ui, label: &str, value: DragValue<'_>) -> bool {
    ui.horizontal(|ui| {
        let l = ui.label(label);
        ui.add(value).labelled_by(l.id).changed()
    })
    .inner
}

fn drag_f32(
    ui: &mut Ui,
    label: &str,
    v: &mut f32,
    speed: f64,
    range: std::ops::RangeInclusive<f32>,
) -> bool {
    labelled(ui, label, DragValue::new(v).speed(speed).range(range))
}

fn drag_usize(
    ui: &mut Ui,
    label: &str,
    v: &mut usize,
    range: std::ops::RangeInclusive<usize>,
) -> bool {
    labelled(ui, label, DragValue::new(v).range(range))
}

/// The physics stack: add, remove, reorder and edit operators. `files` (the loaded measurement of
/// each operator, when measurements are loaded) moves with its operator and gets an empty entry for
/// an added one.
pub fn physics_stack(
    ui: &mut Ui,
    stack: &mut Vec<PhysicsConfig>,
    thumbs: &mut Vec<Option<Thumb>>,
    mut files: Option<&mut Vec<PathBuf>>,
) -> bool {
    let mut changed = false;
    let mut action: Option<(usize, i32)> = None; // (index, -1 up / +1 down / 0 remove)
    thumbs.resize_with(stack.len(), || None);
    if let Some(f) = files.as_deref_mut() {
        f.resize_with(stack.len(), PathBuf::new);
    }
    for (i, op) in stack.iter_mut().enumerate() {
        let title = match op {
            PhysicsConfig::Blur(_) => "blur",
            PhysicsConfig::Blur3d(_) => "blur 3-D",
            PhysicsConfig::Tomography(_) => "tomography",
            PhysicsConfig::Tomography3d(_) => "tomography 3-D",
        };
        ui.push_id(i, |ui| {
            egui::Frame::group(ui.style()).show(ui, |ui| {
                ui.horizontal(|ui| {
                    ui.strong(format!("#{i} {title}"));
                    if ui.small_button("up").on_hover_text("move up").clicked() {
                        action = Some((i, -1));
                    }
                    if ui.small_button("down").on_hover_text("move down").clicked() {
                        action = Some((i, 1));
                    }
                    if ui.small_button("remove").on_hover_text("remove").clicked() {
                        action = Some((i, 0));
                    }
                });
                changed |= match op {
                    PhysicsConfig::Blur(c) => blur(ui, c, &mut thumbs[i]),
                    PhysicsConfig::Blur3d(c) => blur3d(ui, c),
                    PhysicsConfig::Tomography(c) => tomography(ui, &mut c.angles, &mut c.circle),
                    PhysicsConfig::Tomography3d(c) => tomography(ui, &mut c.angles, &mut c.circle),
                };
            });
        });
    }
    if let Some((i, how)) = action {
        let files = files.as_deref_mut();
        match how {
            0 => {
                stack.remove(i);
                thumbs.remove(i);
                if let Some(f) = files {
                    f.remove(i);
                }
            }
            -1 if i > 0 => {
                stack.swap(i, i - 1);
                thumbs.swap(i, i - 1);
                if let Some(f) = files {
                    f.swap(i, i - 1);
                }
            }
            1 if i + 1 < stack.len() => {
                stack.swap(i, i + 1);
                thumbs.swap(i, i + 1);
                if let Some(f) = files {
                    f.swap(i, i + 1);
                }
            }
            _ => {}
        }
        changed = true;
    }
    ui.horizontal_wrapped(|ui| {
        ui.label("Add:");
        if ui.button("blur").clicked() {
            stack.push(PhysicsConfig::Blur(BlurConfig {
                sigma: Some([2.0, 1.0]),
                padding: Padding::Circular,
                ..Default::default()
            }));
            changed = true;
        }
        if ui.button("tomography").clicked() {
            stack.push(PhysicsConfig::Tomography(TomographyConfig {
                angles: Angles::Count(100),
                circle: true,
                normalize: false,
            }));
            changed = true;
        }
        if ui.button("blur 3-D").clicked() {
            stack.push(PhysicsConfig::Blur3d(Blur3dConfig {
                sigma: Some([1.0, 1.0, 1.0]),
                kernel_file: None,
                padding: Padding::Circular,
                method: Default::default(),
            }));
            changed = true;
        }
        if ui.button("tomography 3-D").clicked() {
            stack.push(PhysicsConfig::Tomography3d(Tomography3dConfig {
                angles: Angles::Count(60),
                circle: true,
                normalize: false,
            }));
            changed = true;
        }
    });
    if let Some(f) = files {
        f.resize_with(stack.len(), PathBuf::new);
    }
    changed
}

const PADDINGS: [(Padding, &str); 5] = [
    (Padding::Valid, "valid"),
    (Padding::Circular, "circular"),
    (Padding::Replicate, "replicate"),
    (Padding::Reflect, "reflect"),
    (Padding::Constant, "constant"),
];

fn blur(ui: &mut Ui, c: &mut BlurConfig, thumb: &mut Option<Thumb>) -> bool {
    let mut changed = false;
    match (&mut c.sigma, &c.kernel_file) {
        (Some(s), _) => {
            changed |= drag_f32(ui, "sigma rows (px)", &mut s[0], 0.05, 0.01..=500.0);
            changed |= drag_f32(ui, "sigma cols (px)", &mut s[1], 0.05, 0.01..=500.0);
            changed |= drag_f32(ui, "angle (deg)", &mut c.angle_deg, 0.5, -360.0..=360.0);
        }
        (None, Some(path)) => {
            ui.label(format!("kernel file: {}", path.display()));
        }
        (None, None) => {
            ui.label("no kernel");
        }
    }
    changed |= combo(ui, "padding", &mut c.padding, &PADDINGS);
    if let Some(sigma) = c.sigma {
        kernel_thumbnail(ui, sigma, c.angle_deg, thumb);
    }
    changed
}

/// Draws the Gaussian kernel (built locally with the operator's own code) as a small image.
fn kernel_thumbnail(ui: &mut Ui, sigma: [f32; 2], angle_deg: f32, thumb: &mut Option<Thumb>) {
    if !(sigma[0] > 0.0 && sigma[1] > 0.0 && angle_deg.is_finite()) {
        return;
    }
    let key = (sigma, angle_deg);
    if thumb.as_ref().map(|t| t.key) != Some(key) {
        // Side from deepinv's rule (2·int(σ/0.3 + 1) + 1) without building a huge kernel.
        let side = 2 * ((sigma[0].max(sigma[1]) / 0.3 + 1.0) as usize) + 1;
        if side > MAX_THUMB_SIDE {
            ui.label(format!("kernel {side}×{side} px (too large to preview)"));
            *thumb = None;
            return;
        }
        let k = gaussian_kernel(sigma, angle_deg);
        let img = PreviewImage {
            width: side as u32,
            height: side as u32,
            channels: 1,
            slice: None,
            pixels: k.data().to_vec(),
        };
        let max = img.pixels.iter().copied().fold(0.0f32, f32::max);
        let display = Display {
            contrast: Contrast::Range {
                lo: 0.0,
                hi: max.max(1e-12),
            },
            colormap: Colormap::Magma,
        };
        let (color, _) = colorize(&img, display);
        *thumb = Some(Thumb {
            key,
            texture: ui
                .ctx()
                .load_texture("kernel", color, TextureOptions::NEAREST),
            side,
        });
    }
    if let Some(t) = thumb {
        ui.horizontal(|ui| {
            ui.add(egui::Image::new((t.texture.id(), egui::vec2(64.0, 64.0))));
            ui.label(format!("kernel {0}×{0} px", t.side));
        });
    }
}

fn blur3d(ui: &mut Ui, c: &mut Blur3dConfig) -> bool {
    let mut changed = false;
    if let Some(s) = &mut c.sigma {
        changed |= drag_f32(ui, "sigma depth (px)", &mut s[0], 0.05, 0.01..=50.0);
        changed |= drag_f32(ui, "sigma rows (px)", &mut s[1], 0.05, 0.01..=50.0);
        changed |= drag_f32(ui, "sigma cols (px)", &mut s[2], 0.05, 0.01..=50.0);
    }
    changed |= combo(ui, "padding", &mut c.padding, &PADDINGS);
    changed
}

fn tomography(ui: &mut Ui, angles: &mut Angles, circle: &mut bool) -> bool {
    let mut changed = false;
    match angles {
        Angles::Count(n) => changed |= drag_usize(ui, "angles", n, 1..=36_000),
        Angles::List(list) => {
            ui.label(format!("{} angles (list)", list.len()));
            if ui.button("use a count").clicked() {
                *angles = Angles::Count(list.len().max(1));
                changed = true;
            }
        }
    }
    changed |= ui.checkbox(circle, "circle").changed();
    changed
}

/// Measurement noise: none, Gaussian or Poisson.
pub fn noise(ui: &mut Ui, noise: &mut Option<NoiseConfig>) -> bool {
    #[derive(PartialEq, Clone, Copy)]
    enum K {
        None,
        Gaussian,
        Poisson,
    }
    let mut kind = match noise {
        None => K::None,
        Some(NoiseConfig::Gaussian { .. }) => K::Gaussian,
        Some(NoiseConfig::Poisson { .. }) => K::Poisson,
    };
    let mut changed = combo(
        ui,
        "noise",
        &mut kind,
        &[
            (K::None, "none"),
            (K::Gaussian, "gaussian"),
            (K::Poisson, "poisson"),
        ],
    );
    if changed {
        *noise = match kind {
            K::None => None,
            K::Gaussian => Some(NoiseConfig::Gaussian { sigma: 0.03 }),
            K::Poisson => Some(NoiseConfig::Poisson { gain: 0.01 }),
        };
    }
    match noise {
        Some(NoiseConfig::Gaussian { sigma }) => {
            changed |= drag_f32(ui, "noise sigma", sigma, 0.001, 0.0..=10.0)
        }
        Some(NoiseConfig::Poisson { gain }) => {
            changed |= drag_f32(ui, "noise gain", gain, 0.001, 1e-6..=100.0)
        }
        None => {}
    }
    changed
}

/// The denoiser's kind and parameters.
pub fn denoiser(ui: &mut Ui, d: &mut Option<DenoiserConfig>) -> bool {
    #[derive(PartialEq, Clone, Copy)]
    enum K {
        None,
        Identity,
        Tv,
        Wavelet,
        Median,
        Gaussian,
        Drunet,
        Dncnn,
        Torchscript,
    }
    let mut kind = match d {
        None => K::None,
        Some(DenoiserConfig::Identity) => K::Identity,
        Some(DenoiserConfig::Tv(_)) => K::Tv,
        Some(DenoiserConfig::Wavelet(_)) => K::Wavelet,
        Some(DenoiserConfig::Median(_)) => K::Median,
        Some(DenoiserConfig::Gaussian(_)) => K::Gaussian,
        Some(DenoiserConfig::Drunet(_)) => K::Drunet,
        Some(DenoiserConfig::Dncnn(_)) => K::Dncnn,
        Some(DenoiserConfig::Torchscript(_)) => K::Torchscript,
    };
    let mut changed = combo(
        ui,
        "denoiser",
        &mut kind,
        &[
            (K::None, "none"),
            (K::Identity, "identity"),
            (K::Tv, "tv"),
            (K::Wavelet, "wavelet"),
            (K::Median, "median"),
            (K::Gaussian, "gaussian"),
            (K::Drunet, "drunet"),
            (K::Dncnn, "dncnn"),
            (K::Torchscript, "torchscript (libtorch)"),
        ],
    );
    if changed {
        *d = match kind {
            K::None => None,
            K::Identity => Some(DenoiserConfig::Identity),
            K::Tv => Some(DenoiserConfig::Tv(TvConfig::default())),
            K::Wavelet => Some(DenoiserConfig::Wavelet(WaveletConfig::default())),
            K::Median => Some(DenoiserConfig::Median(MedianConfig::default())),
            K::Gaussian => Some(DenoiserConfig::Gaussian(GaussianConfig::default())),
            K::Drunet => Some(DenoiserConfig::Drunet(DrunetConfig::default())),
            K::Dncnn => Some(DenoiserConfig::Dncnn(DncnnConfig::default())),
            K::Torchscript => Some(DenoiserConfig::Torchscript(TorchScriptConfig {
                model: PathBuf::new(),
                device: None,
            })),
        };
    }
    match d {
        Some(DenoiserConfig::Tv(c)) => {
            changed |= drag_usize(ui, "TV iterations", &mut c.n_it_max, 1..=100_000)
        }
        Some(DenoiserConfig::Wavelet(c)) => {
            changed |= combo(
                ui,
                "wavelet",
                &mut c.wavelet,
                &[
                    (WaveletKind::Haar, "haar"),
                    (WaveletKind::Db4, "db4"),
                    (WaveletKind::Db8, "db8"),
                ],
            );
            changed |= drag_usize(ui, "levels", &mut c.levels, 1..=16);
            changed |= combo(
                ui,
                "threshold",
                &mut c.threshold,
                &[(Threshold::Soft, "soft"), (Threshold::Hard, "hard")],
            );
        }
        Some(DenoiserConfig::Median(c)) => {
            changed |= drag_usize(ui, "kernel size", &mut c.kernel_size, 1..=31)
        }
        Some(DenoiserConfig::Gaussian(c)) => {
            changed |= drag_f32(ui, "sigma (px)", &mut c.sigma_px, 0.05, 0.0..=256.0)
        }
        Some(DenoiserConfig::Drunet(c)) => {
            changed |= network(ui, &mut c.weights, &mut c.engine, &mut c.inflate_3d);
            if c.engine == Engine::Torch {
                changed |= torch_device(ui, &mut c.device);
            }
            changed |= drag_usize(ui, "in channels", &mut c.in_channels, 1..=64);
            changed |= drag_usize(ui, "out channels", &mut c.out_channels, 1..=64);
            changed |= drag_usize(ui, "blocks per scale (nb)", &mut c.nb, 1..=64);
            ui.label(format!("channels per scale (nc): {:?}", c.nc));
        }
        Some(DenoiserConfig::Dncnn(c)) => {
            changed |= network(ui, &mut c.weights, &mut c.engine, &mut c.inflate_3d);
            changed |= drag_usize(ui, "in channels", &mut c.in_channels, 1..=64);
            changed |= drag_usize(ui, "out channels", &mut c.out_channels, 1..=64);
            changed |= drag_usize(ui, "depth", &mut c.depth, 2..=1000);
            changed |= drag_usize(ui, "features (nf)", &mut c.nf, 1..=4096);
        }
        Some(DenoiserConfig::Torchscript(c)) => {
            let mut text = c.model.display().to_string();
            ui.horizontal(|ui| {
                let l = ui.label("model (torch.jit.save, .pt)");
                if ui
                    .text_edit_singleline(&mut text)
                    .labelled_by(l.id)
                    .changed()
                {
                    c.model = PathBuf::from(text.trim());
                    changed = true;
                }
            });
            ui.label("forward(x, sigma) → denoised x; needs a build with --features torch");
            changed |= torch_device(ui, &mut c.device);
        }
        _ => {}
    }
    changed
}

/// Where libtorch runs a network: unset (TESSERA_TORCH_DEVICE, else the CPU), the CPU or a GPU.
fn torch_device(ui: &mut Ui, device: &mut Option<TorchDevice>) -> bool {
    combo(
        ui,
        "device",
        device,
        &[
            (None, "default"),
            (Some(TorchDevice::Cpu), "cpu"),
            (Some(TorchDevice::Cuda(0)), "cuda:0"),
            (Some(TorchDevice::Cuda(1)), "cuda:1"),
        ],
    )
}

/// What every neural denoiser has: the weights file, the engine, 2-D → 3-D inflation. An empty path
/// means random weights, which the network announces as meaningless.
fn network(
    ui: &mut Ui,
    weights: &mut Option<std::path::PathBuf>,
    engine: &mut Engine,
    inflate_3d: &mut bool,
) -> bool {
    let mut text = weights
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut changed = false;
    ui.horizontal(|ui| {
        ui.label("weights (.pth / .safetensors)");
        if ui.text_edit_singleline(&mut text).changed() {
            *weights = (!text.trim().is_empty()).then(|| text.trim().into());
            changed = true;
        }
    });
    if weights.is_none() {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            "no weights: random network, output meaningless (timing only)",
        );
    }
    changed |= combo(
        ui,
        "engine",
        engine,
        &[
            (Engine::Native, "native"),
            (Engine::Torch, "torch (libtorch)"),
        ],
    );
    changed |= ui
        .checkbox(inflate_3d, "inflate 2-D weights to 3-D")
        .changed();
    changed
}

/// Tiling on or off, strategy, patch size, overlap, max batch size, and who gets which tile.
pub fn tiling(ui: &mut Ui, t: &mut Option<TilingConfig>, assignment: &mut TileAssignment) -> bool {
    let mut on = t.is_some();
    let mut changed = ui.checkbox(&mut on, "tiled denoiser").changed();
    if changed {
        *t = on.then(|| TilingConfig {
            patch_size: Extent::Uniform(64),
            overlap: Some(Extent::Uniform(8)),
            ..Default::default()
        });
    }
    let Some(c) = t else { return changed };
    let before_kind = c.kind;
    changed |= combo(
        ui,
        "strategy",
        &mut c.kind,
        &[
            (TilingKind::Overlap, "overlap"),
            (TilingKind::Blend, "blend"),
            (TilingKind::Basic, "basic"),
        ],
    );
    if c.kind != before_kind {
        // Fields that only apply to the other kinds would fail validation.
        if c.kind == TilingKind::Basic {
            c.overlap = None;
            c.stride = None;
            c.pad_mode = None;
        } else {
            c.num_splits = None;
        }
    }
    match &mut c.patch_size {
        Extent::Uniform(p) => changed |= drag_usize(ui, "patch size (px)", p, 1..=16384),
        Extent::PerAxis(v) => {
            ui.label(format!("patch size {v:?} (per axis)"));
        }
    }
    if c.kind != TilingKind::Basic {
        let mut overlap = match &c.overlap {
            Some(Extent::Uniform(o)) => *o,
            None => 32,
            Some(Extent::PerAxis(v)) => v.first().copied().unwrap_or(32),
        };
        if drag_usize(ui, "overlap (px)", &mut overlap, 0..=4096) {
            c.overlap = Some(Extent::Uniform(overlap));
            changed = true;
        }
    }
    let mut batch = c.max_batch_size.unwrap_or(0);
    if drag_usize(ui, "max batch size (0 = all)", &mut batch, 0..=4096) {
        c.max_batch_size = (batch > 0).then_some(batch);
        changed = true;
    }
    changed |= combo(
        ui,
        "tiles to ranks",
        assignment,
        &[
            (TileAssignment::RoundRobin, "round robin"),
            (TileAssignment::CostAware, "cost aware"),
        ],
    );
    changed
}

/// Algorithm kind, iterations, step, denoiser strength, initialisation.
pub fn algorithm(ui: &mut Ui, a: &mut AlgorithmConfig) -> bool {
    #[derive(PartialEq, Clone, Copy)]
    enum K {
        Pnp,
        Cg,
        Fbp,
    }
    let mut kind = match a {
        AlgorithmConfig::Pnp(_) => K::Pnp,
        AlgorithmConfig::Cg(_) => K::Cg,
        AlgorithmConfig::Fbp(_) => K::Fbp,
    };
    let mut changed = combo(
        ui,
        "algorithm",
        &mut kind,
        &[(K::Pnp, "pnp"), (K::Cg, "cg"), (K::Fbp, "fbp")],
    );
    if changed {
        *a = match kind {
            K::Pnp => AlgorithmConfig::Pnp(PnpConfig::default()),
            K::Cg => AlgorithmConfig::Cg(CgConfig::default()),
            K::Fbp => AlgorithmConfig::Fbp(FbpConfig::default()),
        };
    }
    match a {
        AlgorithmConfig::Pnp(c) => {
            changed |= drag_usize(ui, "iterations", &mut c.iterations, 1..=100_000);
            let mut auto = c.step.is_none();
            if ui.checkbox(&mut auto, "step 0.99/L").changed() {
                c.step = if auto { None } else { Some(1.0) };
                changed = true;
            }
            if let Some(step) = &mut c.step {
                changed |= drag_f32(ui, "step", step, 0.01, 1e-6..=1e6);
            }
            changed |= drag_f32(
                ui,
                "denoiser strength",
                &mut c.denoiser_sigma,
                0.001,
                0.0..=10.0,
            );
            changed |= combo(
                ui,
                "init",
                &mut c.init,
                &[
                    (Init::Zeros, "zeros"),
                    (Init::Adjoint, "adjoint"),
                    (Init::Pinv, "pinv"),
                ],
            );
            changed |= ui
                .checkbox(&mut c.track_objective, "track objective")
                .changed();
        }
        AlgorithmConfig::Cg(c) => {
            changed |= drag_usize(ui, "iterations", &mut c.iterations, 1..=100_000);
            changed |= drag_f32(ui, "damping", &mut c.damping, 0.001, 0.0..=1e6);
        }
        AlgorithmConfig::Fbp(_) => {
            ui.label("filtered back-projection (one step)");
        }
    }
    changed
}
