//! Physics: the operator stack (add, remove, reorder, edit, with a kernel thumbnail for blurs) and
//! its measurements, simulated with a noise model or loaded from one file per operator.

use std::path::PathBuf;

use egui::{TextureHandle, TextureOptions, Ui};

use super::{EditorPanel, problem_here};
use crate::gui::Workbench;
use crate::gui::dialogs::DialogKind;
use crate::gui::measured::Measured;
use crate::gui::preview::{Colormap, Contrast, Display, colorize};
use crate::gui::widgets::{ERROR_COLOR, combo, kind_combo, number, same_optional_variant};
use crate::physics::blur::{Blur3dConfig, BlurConfig, Padding, gaussian_kernel};
use crate::physics::tomography::{Angles, TomographyConfig};
use crate::physics::tomography3d::Tomography3dConfig;
use crate::physics::{NoiseConfig, PhysicsConfig};
use crate::protocol::PreviewImage;

/// Largest kernel side drawn as a thumbnail (larger Gaussians are described in words).
const MAX_THUMB_SIDE: usize = 255;

/// A kernel thumbnail and the parameters it was made from.
struct Thumb {
    key: ([f32; 2], f32),
    texture: TextureHandle,
    side: usize,
}

/// The panel keeps one thumbnail per operator (they move with their operators).
#[derive(Default)]
pub struct PhysicsPanel {
    thumbs: Vec<Option<Thumb>>,
}

impl EditorPanel for PhysicsPanel {
    fn title(&self) -> &'static str {
        "Physics"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool {
        let preset = &mut wb.doc.preset;
        let files = preset.measurements.as_mut().map(|m| &mut m.paths);
        let mut changed = physics_stack(ui, &mut preset.physics, &mut self.thumbs, files);
        problem_here(ui, wb, "physics");
        changed |= measurements(ui, wb);
        changed
    }
}

/// Simulated measurements (with the noise editor) or one loaded file per operator.
fn measurements(ui: &mut Ui, wb: &mut Workbench) -> bool {
    let was = wb.doc.preset.measurements.is_some();
    let mut loaded = was;
    ui.horizontal(|ui| {
        ui.label("Measurements:");
        ui.radio_value(&mut loaded, false, "simulated");
        ui.radio_value(&mut loaded, true, "loaded");
    });
    if loaded != was {
        wb.set_measurements_loaded(loaded);
    }
    let Some(m) = &wb.doc.preset.measurements else {
        let changed = noise(ui, &mut wb.doc.preset.noise);
        problem_here(ui, wb, "noise");
        return changed;
    };
    let mut pick = None;
    for (i, path) in m.paths.iter().enumerate() {
        ui.horizontal(|ui| {
            if ui
                .small_button(format!("Load #{i}…"))
                .on_hover_text(format!("the measurement of operator #{i}"))
                .clicked()
            {
                pick = Some(i);
            }
            let text = wb.doc.measured.describe(path);
            match wb.doc.measured.get(path) {
                Some(Measured::Failed(_)) => ui.colored_label(ERROR_COLOR, text),
                _ => ui.label(text),
            }
            .on_hover_text(path.display().to_string());
        });
    }
    problem_here(ui, wb, "measurements");
    if let Some(i) = pick {
        wb.open_dialog(DialogKind::OpenMeasurement(i));
    }
    false
}

/// The physics stack: add, remove, reorder and edit operators. `files` (the loaded measurement of
/// each operator, when measurements are loaded) moves with its operator and gets an empty entry for
/// an added one.
fn physics_stack(
    ui: &mut Ui,
    stack: &mut Vec<PhysicsConfig>,
    thumbs: &mut Vec<Option<Thumb>>,
    mut files: Option<&mut Vec<PathBuf>>,
) -> bool {
    #[derive(Clone, Copy)]
    enum Action {
        Up,
        Down,
        Remove,
    }
    let mut changed = false;
    let mut action: Option<(usize, Action)> = None;
    thumbs.resize_with(stack.len(), || None);
    if let Some(f) = files.as_deref_mut() {
        f.resize_with(stack.len(), PathBuf::new);
    }
    for (i, op) in stack.iter_mut().enumerate() {
        ui.push_id(i, |ui| {
            egui::Frame::group(ui.style()).show(ui, |ui| {
                ui.horizontal(|ui| {
                    ui.strong(format!("#{i} {}", title(op)));
                    if ui.small_button("up").on_hover_text("move up").clicked() {
                        action = Some((i, Action::Up));
                    }
                    if ui.small_button("down").on_hover_text("move down").clicked() {
                        action = Some((i, Action::Down));
                    }
                    if ui.small_button("remove").on_hover_text("remove").clicked() {
                        action = Some((i, Action::Remove));
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
        let other = match how {
            Action::Up if i > 0 => Some(i - 1),
            Action::Down if i + 1 < stack.len() => Some(i + 1),
            _ => None,
        };
        match (how, other) {
            (Action::Remove, _) => {
                stack.remove(i);
                thumbs.remove(i);
                if let Some(f) = files.as_deref_mut() {
                    f.remove(i);
                }
            }
            (_, Some(j)) => {
                stack.swap(i, j);
                thumbs.swap(i, j);
                if let Some(f) = files.as_deref_mut() {
                    f.swap(i, j);
                }
            }
            _ => {}
        }
        changed = true;
    }
    ui.horizontal_wrapped(|ui| {
        ui.label("Add:");
        for op in [
            PhysicsConfig::Blur(BlurConfig {
                sigma: Some([2.0, 1.0]),
                padding: Padding::Circular,
                ..Default::default()
            }),
            PhysicsConfig::Tomography(TomographyConfig {
                angles: Angles::Count(100),
                circle: true,
                normalize: false,
            }),
            PhysicsConfig::Blur3d(Blur3dConfig {
                sigma: Some([1.0, 1.0, 1.0]),
                kernel_file: None,
                padding: Padding::Circular,
                method: Default::default(),
            }),
            PhysicsConfig::Tomography3d(Tomography3dConfig {
                angles: Angles::Count(60),
                circle: true,
                normalize: false,
            }),
        ] {
            if ui.button(title(&op)).clicked() {
                stack.push(op);
                changed = true;
            }
        }
    });
    if let Some(f) = files {
        f.resize_with(stack.len(), PathBuf::new);
    }
    changed
}

fn title(op: &PhysicsConfig) -> &'static str {
    match op {
        PhysicsConfig::Blur(_) => "blur",
        PhysicsConfig::Blur3d(_) => "blur 3-D",
        PhysicsConfig::Tomography(_) => "tomography",
        PhysicsConfig::Tomography3d(_) => "tomography 3-D",
    }
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
            changed |= number(ui, "sigma rows (px)", &mut s[0], 0.05, 0.01..=500.0);
            changed |= number(ui, "sigma cols (px)", &mut s[1], 0.05, 0.01..=500.0);
            changed |= number(ui, "angle (deg)", &mut c.angle_deg, 0.5, -360.0..=360.0);
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
            channel: None,
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
        changed |= number(ui, "sigma depth (px)", &mut s[0], 0.05, 0.01..=50.0);
        changed |= number(ui, "sigma rows (px)", &mut s[1], 0.05, 0.01..=50.0);
        changed |= number(ui, "sigma cols (px)", &mut s[2], 0.05, 0.01..=50.0);
    }
    changed |= combo(ui, "padding", &mut c.padding, &PADDINGS);
    changed
}

fn tomography(ui: &mut Ui, angles: &mut Angles, circle: &mut bool) -> bool {
    let mut changed = false;
    match angles {
        Angles::Count(n) => changed |= number(ui, "angles", n, 1.0, 1..=36_000),
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
fn noise(ui: &mut Ui, noise: &mut Option<NoiseConfig>) -> bool {
    let mut changed = kind_combo(
        ui,
        "noise",
        noise,
        &[
            ("none", || None),
            ("gaussian", || Some(NoiseConfig::Gaussian { sigma: 0.03 })),
            ("poisson", || Some(NoiseConfig::Poisson { gain: 0.01 })),
        ],
        same_optional_variant,
    );
    match noise {
        Some(NoiseConfig::Gaussian { sigma }) => {
            changed |= number(ui, "noise sigma", sigma, 0.001, 0.0..=10.0)
        }
        Some(NoiseConfig::Poisson { gain }) => {
            changed |= number(ui, "noise gain", gain, 0.001, 1e-6..=100.0)
        }
        None => {}
    }
    changed
}
