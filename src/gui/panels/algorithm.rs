//! Algorithm: PnP / CG / FBP, iterations, PnP's splitting (PGD or HQS), step, denoiser strength and
//! its schedule, DPIR's rule in one click, initialisation.

use egui::Ui;

use super::{EditorPanel, problem_here};
use crate::gui::Workbench;
use crate::gui::widgets::{combo, kind_combo, number, same_variant};
use crate::optim::{
    AlgorithmConfig, CgConfig, FbpConfig, Init, PnpConfig, SigmaSchedule, Splitting,
};

pub struct AlgorithmPanel;

impl EditorPanel for AlgorithmPanel {
    fn title(&self) -> &'static str {
        "Algorithm"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool {
        let noise = wb.doc.preset.noise.as_ref().map(|n| n.sigma());
        let changed = algorithm(ui, &mut wb.doc.preset.algorithm, noise);
        problem_here(ui, wb, "algorithm");
        changed
    }
}

/// `noise`: the measurement noise σ_n, for DPIR's rule.
fn algorithm(ui: &mut Ui, a: &mut AlgorithmConfig, noise: Option<f32>) -> bool {
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
            if let Some(sigma) = noise {
                let rule = ui.button(format!("DPIR rule (σ_n {sigma})")).on_hover_text(
                    "deepinv's DPIR for a σ-conditional denoiser: half-quadratic splitting, \
                         8 iterations, σ_d from 49/255 down to max(σ_n, 0.01) (docs/PNP.md)",
                );
                if rule.clicked() {
                    *c = PnpConfig {
                        clamp: c.clamp,
                        track_objective: c.track_objective,
                        ..PnpConfig::dpir(sigma)
                    };
                    changed = true;
                }
            }
            changed |= number(ui, "iterations", &mut c.iterations, 1.0, 1..=100_000);
            changed |= combo(
                ui,
                "splitting",
                &mut c.splitting,
                &[
                    (Splitting::Pgd, "gradient step (PGD)"),
                    (Splitting::Hqs, "data prox (HQS)"),
                ],
            );
            match c.splitting {
                Splitting::Pgd => {
                    let mut auto = c.step.is_none();
                    if ui.checkbox(&mut auto, "step 0.99/L").changed() {
                        c.step = if auto { None } else { Some(1.0) };
                        changed = true;
                    }
                    if let Some(step) = &mut c.step {
                        changed |= number(ui, "step", step, 0.01, 1e-6..=1e6);
                    }
                }
                Splitting::Hqs => {
                    changed |= number(ui, "HQS λ", &mut c.hqs_lambda, 0.01, 1e-6..=1e6);
                }
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
                "σ schedule",
                &mut c.sigma_schedule,
                &[
                    (SigmaSchedule::Constant, "constant"),
                    (SigmaSchedule::Dpir, "DPIR (falling)"),
                ],
            );
            if c.sigma_schedule == SigmaSchedule::Dpir {
                changed |= number(ui, "σ start", &mut c.sigma_start, 0.001, 1e-6..=10.0);
                changed |= number(
                    ui,
                    "schedule iterations",
                    &mut c.sigma_schedule_iterations,
                    1.0,
                    1..=100_000,
                );
            }
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
