//! Distribution: how an imaging experiment shares its work among the ranks — operators cut by
//! angle or by channel so that more ranks than `[[physics]]` entries share the gradient, how
//! measurements are gathered and sums formed, per-rank noise streams and threads per rank. These
//! are properties of the experiment: 1 rank runs the same split stack as N. Below them, the
//! devices the last run computed on, per rank, with the memory it used there (a run on a GPU).

use egui::Ui;

use super::{EditorPanel, problem_here};
use crate::dist::physics::{GatherStrategy, SumOrder};
use crate::dist::placement::MAX_THREADS_PER_RANK;
use crate::gui::Workbench;
use crate::gui::widgets::{combo, number};
use crate::job::RankDeviceUse;

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
        device_lines(ui, &wb.session.devices_used);
        changed
    }
}

/// Each rank's device of the last run and the memory the job used there.
fn device_lines(ui: &mut Ui, devices: &[RankDeviceUse]) {
    if devices.is_empty() {
        return;
    }
    ui.separator();
    ui.strong("devices of the last run");
    for d in devices {
        ui.label(device_line(d));
    }
}

/// `rank 0: NVIDIA H100 80GB HBM3 (cuda:0), 1.2 GiB used of 80.0 GiB (estimated 2.0 GiB)`.
pub(crate) fn device_line(d: &RankDeviceUse) -> String {
    let human = crate::error::human_bytes;
    format!(
        "rank {}: {} ({}), {} used of {} (estimated {})",
        d.rank,
        d.name,
        d.device,
        human(d.peak_bytes),
        human(d.total_bytes),
        human(d.estimated_bytes)
    )
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
