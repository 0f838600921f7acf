//! The workbench (`tessera` with no arguments): an egui window that edits a preset, sends it to a
//! backend and draws the events that come back.
//!
//! Place in the flow: `gui → protocol → tessera serve → job`. The GUI never runs numerics on its UI
//! thread and never calls the algorithms: a run is a [`crate::protocol::Request::Submit`] of the
//! preset's TOML; iterations, previews and timings come back as [`crate::protocol::Event`]s.
//!
//! Modules, split the way egui's demo app is: [`app`] (the window's state and layout, the actions
//! panels share), [`settings`] (persisted state), [`panels`] (one file per editor panel) and
//! [`views`] (one file per view: live images, curves, profile, runs) — the seam where a new
//! experiment kind adds its own editors and views, see `docs/WORKBENCH.md` —, the backend apart in
//! [`connection`] (which link is live, starting and attaching) over [`backend`] (the `Backend`
//! seam, and a channel backend for tests) and [`local`] (`protocol::Client`, a `LocalBackend`
//! child); [`document`] (the edited preset, its inputs and the checks before Run), [`session`]
//! (state built from events), [`viewer`] (what the panes show), [`timeline`] (the run's previews
//! kept to scrub back through), [`roi`] (a box's statistics, profile and box CSV), [`preview`]
//! (float images → textures on a worker thread), [`history`] (runs on disk), [`fetch`] (a remote
//! run's files copied here), [`dialogs`] (typed paths, the system file dialog, dropped files),
//! [`patch_map`] (drawing tiles per rank), [`measured`] (loaded measurement files), [`widgets`],
//! [`fonts`], [`menu_bar`] (File, Edit, Job, Help and the shortcut list), [`top_bar`] (top bar,
//! Attach…, log).

pub mod app;
pub mod backend;
pub mod connection;
pub mod dialogs;
pub mod document;
pub mod fetch;
pub mod fonts;
pub mod history;
pub mod local;
pub mod measured;
pub mod menu_bar;
pub mod panels;
pub mod patch_map;
pub mod preview;
pub mod roi;
pub mod session;
pub mod settings;
pub mod timeline;
pub mod top_bar;
pub mod viewer;
pub mod views;
pub mod widgets;

pub use app::{Workbench, WorkbenchOptions};
pub use backend::{Backend, ChannelBackend, Incoming, Link, Starter, TestEnd};
pub use settings::AppState;

use crate::error::{Error, Result};

/// The eframe shell around [`Workbench`]: persists the app state on exit.
struct Shell {
    workbench: Workbench,
}

impl eframe::App for Shell {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.workbench.ui(ui);
    }

    fn on_exit(&mut self) {
        self.workbench.save_state();
    }
}

/// Opens the workbench window and returns when it is closed.
pub fn run_workbench(mut options: WorkbenchOptions) -> Result<()> {
    if options.state_path.is_none() {
        options.state_path = AppState::default_path();
    }
    let mut warning = None;
    if let Some(path) = &options.state_path {
        let (state, w) = AppState::load(path);
        options.state = state;
        warning = w;
    }
    let size = options.state.window_size;
    let native = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("tessera workbench")
            .with_inner_size(size),
        ..Default::default()
    };
    eframe::run_native(
        "tessera workbench",
        native,
        Box::new(move |_cc| {
            let mut workbench = Workbench::new(options);
            if let Some(w) = warning {
                tracing::warn!("{w}");
                workbench.session.log(crate::protocol::LogLevel::Warn, w);
            }
            Ok(Box::new(Shell { workbench }))
        }),
    )
    .map_err(|e| Error::Unsupported(format!("could not open the workbench window: {e}")))
}
