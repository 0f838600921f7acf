//! Algorithm: PnP / CG / FBP, iterations, step, denoiser strength, initialisation.

use egui::Ui;

use super::{EditorPanel, problem_here};
use crate::gui::Workbench;
use crate::gui::widgets::{combo, kind_combo, number, same_variant};
use crate::optim::{AlgorithmConfig, CgConfig, FbpConfig, Init, PnpConfig};

pub struct AlgorithmPanel;

impl EditorPanel for AlgorithmPanel {
    fn title(&self) -> &'static str {
        "Algorithm"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool {
        let changed = algorithm(ui, &mut wb.doc.preset.algorithm);
        problem_here(ui, wb, "algorithm");
        changed
    }
}

fn algorithm(ui: &mut Ui, a: &mut AlgorithmConfig) -> bool {
    let mut changed = kind_combo(
        ui,
        "algorithm",
        a,
        &[
            ("pnp", || AlgorithmConfig::Pnp(PnpConfig::default())),
            ("cg", || AlgorithmConfig::Cg(CgConfig::default())),
            ("fbp", || AlgorithmConfig::Fbp(FbpConfig::default())),
        ],
        same_variant,
    );
    match a {
        AlgorithmConfig::Pnp(c) => {
            changed |= number(ui, "iterations", &mut c.iterations, 1.0, 1..=100_000);
            let mut auto = c.step.is_none();
            if ui.checkbox(&mut auto, "step 0.99/L").changed() {
                c.step = if auto { None } else { Some(1.0) };
                changed = true;
            }
            if let Some(step) = &mut c.step {
                changed |= number(ui, "step", step, 0.01, 1e-6..=1e6);
            }
            changed |= number(
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
            changed |= number(ui, "iterations", &mut c.iterations, 1.0, 1..=100_000);
            changed |= number(ui, "damping", &mut c.damping, 0.001, 0.0..=1e6);
        }
        AlgorithmConfig::Fbp(_) => {
            ui.label("filtered back-projection (one step)");
        }
    }
    changed
}
