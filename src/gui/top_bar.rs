//! The top bar (backend status, ranks, Start/Restart, Attach…, Run, Stop, the job's state) and the
//! Attach… window.

use egui::{Color32, Sense, Ui, Vec2};

use super::Workbench;
use super::connection::Connecting;
use super::session::JobState;

pub fn top_bar(ui: &mut Ui, wb: &mut Workbench) {
    ui.horizontal(|ui| {
        ui.heading("tessera");
        ui.separator();
        let live = wb.conn.is_live();
        let color = if live {
            Color32::from_rgb(60, 180, 75)
        } else {
            Color32::GRAY
        };
        let (dot, _) = ui.allocate_exact_size(Vec2::splat(12.0), Sense::hover());
        ui.painter().circle_filled(dot.center(), 5.0, color);
        let status = match (live, &wb.session.backend) {
            (true, Some(info)) => format!(
                "{} — {} rank(s) over {}",
                wb.conn.label(),
                info.world_size,
                info.transport
            ),
            (true, None) => wb.conn.label().to_string(),
            (false, _) => "no backend".to_string(),
        };
        ui.label(status);
        let ranks_label = ui.label("ranks");
        ui.add(egui::DragValue::new(&mut wb.app_state.ranks).range(1..=64))
            .labelled_by(ranks_label.id);
        match wb.conn.connecting() {
            Some(what) => {
                ui.spinner();
                ui.label(match what {
                    Connecting::Local(n) => format!("starting {n} rank(s)…"),
                    Connecting::Remote(a) => format!("attaching to {a}…"),
                });
            }
            None => {
                let start = if live {
                    "Restart backend"
                } else {
                    "Start backend"
                };
                if ui.button(start).clicked() {
                    wb.start_backend();
                }
                if ui.button("Attach…").clicked() {
                    wb.attach_open = true;
                }
            }
        }
        ui.separator();
        let blocker = wb.run_blocker();
        let run = ui
            .add_enabled(blocker.is_none(), egui::Button::new("Run"))
            .on_hover_text("Ctrl+R");
        let run = match &blocker {
            Some(why) => run.on_disabled_hover_text(why.as_str()),
            None => run,
        };
        if run.clicked() {
            wb.run();
        }
        let busy = wb.session.is_busy();
        if ui
            .add_enabled(busy, egui::Button::new("Stop"))
            .on_hover_text("Ctrl+. or Escape")
            .clicked()
        {
            wb.stop();
        }
        ui.label(job_status(wb));
    });
}

fn job_status(wb: &Workbench) -> String {
    let s = &wb.session;
    let unit = s.unit().trim_end_matches("(s)");
    let progress = s
        .progress()
        .map(|(done, planned)| match planned {
            0 => format!(": {unit} {done}"),
            n => format!(": {unit} {done}/{n}"),
        })
        .unwrap_or_default();
    match s.state() {
        JobState::Idle => "idle".into(),
        JobState::Submitted if wb.stop_pending() => "submitted, stopping once accepted…".into(),
        JobState::Submitted => "submitted…".into(),
        JobState::Running { job } => format!("job {job} running{progress}"),
        JobState::Stopping { job } => format!("job {job} stopping{progress}…"),
        JobState::Finished { job } => format!("job {job} finished{progress}"),
        JobState::Cancelled { job } => format!("job {job} stopped{progress}"),
        JobState::Failed { .. } => "failed".into(),
    }
}

/// "Attach…": the address of a running `tessera serve` and its token.
pub fn attach_window(ctx: &egui::Context, wb: &mut Workbench) {
    if !wb.attach_open {
        return;
    }
    let mut open = true;
    let mut connect = false;
    egui::Window::new("Attach to a backend")
        .open(&mut open)
        .collapsible(false)
        .show(ctx, |ui| {
            ui.label(
                "A backend started with `tessera serve --listen HOST:PORT --token-file F` \
                 (through an SSH tunnel: ssh -L 7341:localhost:7341 cluster), or a Unix socket path.",
            );
            let addr_label = ui.label("address");
            ui.text_edit_singleline(&mut wb.app_state.attach_address)
                .labelled_by(addr_label.id);
            let token_label = ui.label("token");
            ui.add(egui::TextEdit::singleline(&mut wb.attach_token).password(true))
                .labelled_by(token_label.id);
            connect = ui.button("Connect").clicked();
        });
    if connect {
        let address = wb.app_state.attach_address.clone();
        let token = std::mem::take(&mut wb.attach_token);
        let token = (!token.trim().is_empty()).then(|| token.trim().to_string());
        wb.attach_remote(&address, token);
        open = false;
    }
    if !open {
        wb.attach_token.clear();
    }
    wb.attach_open = open;
}

pub fn log_panel(ui: &mut Ui, wb: &mut Workbench) {
    ui.horizontal(|ui| {
        ui.strong("Log");
        if ui.small_button("clear").clicked() {
            wb.session.log.clear();
        }
    });
    // Only the visible rows are laid out, so a long log costs nothing per frame.
    let row_height = ui.text_style_height(&egui::TextStyle::Monospace);
    let lines = &wb.session.log;
    egui::ScrollArea::vertical()
        .stick_to_bottom(true)
        .auto_shrink([false, false])
        .show_rows(ui, row_height, lines.len(), |ui, rows| {
            for line in &lines[rows] {
                let color = match line.level {
                    crate::protocol::LogLevel::Info => ui.visuals().text_color(),
                    crate::protocol::LogLevel::Warn => Color32::from_rgb(220, 160, 40),
                    crate::protocol::LogLevel::Error => super::widgets::ERROR_COLOR,
                };
                ui.label(egui::RichText::new(&line.text).color(color).monospace());
            }
        });
}
