//! Distribution: how an imaging experiment shares its work among the ranks — operators cut by
//! angle or by channel so that more ranks than `[[physics]]` entries share the gradient, how
//! measurements are gathered and sums formed, per-rank noise streams and threads per rank. These
//! are properties of the experiment: 1 rank runs the same split stack as N.

use egui::Ui;

use super::{EditorPanel, problem_here};
use crate::dist::physics::{GatherStrategy, SumOrder};
use crate::dist::placement::MAX_THREADS_PER_RANK;
use crate::gui::Workbench;
use crate::gui::widgets::{combo, number};

pub struct DistributionPanel;

impl EditorPanel for DistributionPanel {
    fn title(&self) -> &'static str {
        "Distribution over ranks"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging()
    }

    fn default_open(&self) -> bool {
        false
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool {
        let preset = &mut wb.doc.preset;
        let d = &mut preset.distributed;
        let mut changed = optional_parts(
            ui,
            "split tomography by angle",
            "angle parts",
            &mut d.split_by_angle,
        );
        changed |= optional_parts(
            ui,
            "split operators by channel",
            "channel parts",
            &mut d.split_by_channel,
        );
        match preset.operators() {
            Ok(ops) if ops.len() != preset.physics.len() => {
                ui.label(format!(
                    "{} operators after splitting {} [[physics]] entries",
                    ops.len(),
                    preset.physics.len()
                ));
            }
            _ => {}
        }
        let d = &mut preset.distributed;
        changed |= combo(
            ui,
            "gather",
            &mut d.gather,
            &[
                (GatherStrategy::Concatenated, "one all-gather"),
                (GatherStrategy::Naive, "one all-gather per round"),
                (GatherStrategy::Broadcast, "a broadcast per result"),
            ],
        );
        changed |= combo(
            ui,
            "sums",
            &mut d.sum_order,
            &[
                (SumOrder::Exact, "exact (the bits of 1 rank)"),
                (SumOrder::AllReduce, "all-reduce (less traffic)"),
            ],
        );
        changed |= ui
            .checkbox(
                &mut d.seed_offset_by_rank,
                "noise seed offset by rank (data then depend on the rank count)",
            )
            .changed();
        let mut auto = d.threads_per_rank.is_none();
        if ui
            .checkbox(&mut auto, "threads per rank: cores / ranks")
            .changed()
        {
            d.threads_per_rank = if auto { None } else { Some(1) };
            changed = true;
        }
        if let Some(t) = &mut d.threads_per_rank {
            changed |= number(ui, "threads per rank", t, 1.0, 1..=MAX_THREADS_PER_RANK);
        }
        problem_here(ui, wb, "distributed");
        changed
    }
}

/// An optional count of parts: a checkbox that turns it on (at 2 parts) or off, and its field.
/// Too many parts for the stack is the document's problem, shown under the panel.
fn optional_parts(ui: &mut Ui, toggle: &str, label: &str, parts: &mut Option<usize>) -> bool {
    let mut on = parts.is_some();
    let mut changed = false;
    if ui.checkbox(&mut on, toggle).changed() {
        *parts = on.then_some(2);
        changed = true;
    }
    if let Some(n) = parts {
        changed |= number(ui, label, n, 1.0, 1..=1_000_000);
    }
    changed
}
