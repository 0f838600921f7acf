//! Training: the fields of a training preset that a user tunes between runs — for a denoiser, the
//! training image, the network's size and the optimisation (noise levels, steps, batch, crops,
//! learning rate); for a Multi-DSN, the network, the loss weights, the similarity term, the
//! schedule and the ranks each domain is split over, with the domains listed as the preset defines
//! them. Everything else stays as the preset file says (Save writes it all back).

use egui::Ui;

use super::{EditorPanel, problem_here};
use crate::denoise::DenoiserConfig;
use crate::dsn::network::Similarity;
use crate::dsn::run::DsnPreset;
use crate::gui::Workbench;
use crate::gui::document::Training;
use crate::gui::widgets::{combo, committed_text, number};
use crate::train::TrainPreset;

pub struct TrainingPanel;

impl EditorPanel for TrainingPanel {
    fn title(&self) -> &'static str {
        "Training set-up"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.training.is_some()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool {
        let changed = match wb.doc.training.as_mut() {
            Some(Training::Denoiser(p)) => denoiser_training(ui, p),
            Some(Training::Dsn(p)) => dsn_training(ui, p),
            None => return false,
        };
        for section in [
            "image",
            "denoiser",
            "train",
            "model",
            "losses",
            "domains",
            "distributed",
        ] {
            problem_here(ui, wb, section);
        }
        changed
    }
}

fn denoiser_training(ui: &mut Ui, p: &mut TrainPreset) -> bool {
    let mut changed = false;
    ui.strong("Training image");
    let Some(image) = p.image.as_mut() else {
        // A list of `[[images]]` (and `[[held_out]]`): listed here, edited in the TOML.
        for (title, list) in [("trained on", &p.images), ("held out", &p.held_out)] {
            ui.label(format!("{title} ({}):", list.len()));
            for (i, entry) in list.iter().enumerate() {
                ui.label(format!("  {i}. {}", entry.summary()));
            }
        }
        ui.label("(edit the lists in the preset file)");
        changed |= number(ui, "seed", &mut p.seed, 1.0, 0..=u64::MAX);
        return changed | training_network(ui, p);
    };
    match (&image.sample, &image.path) {
        (Some(sample), _) => {
            ui.label(format!("generated: {sample:?}"));
        }
        (None, Some(path)) => {
            ui.label(format!("file: {}", path.display()));
        }
        (None, None) => {
            ui.label("none");
        }
    }
    if let Some(size) = image.size.as_mut().filter(|s| s.len() == 2) {
        changed |= number(ui, "image height", &mut size[0], 1.0, 8..=16384);
        changed |= number(ui, "image width", &mut size[1], 1.0, 8..=16384);
    }
    changed |= ui.checkbox(&mut image.grayscale, "grey").changed();
    changed |= number(ui, "seed", &mut p.seed, 1.0, 0..=u64::MAX);
    changed | training_network(ui, p)
}

/// The network and optimisation part of a denoiser's training set-up.
fn training_network(ui: &mut Ui, p: &mut TrainPreset) -> bool {
    let mut changed = false;

    ui.strong("Network");
    match &mut p.denoiser {
        DenoiserConfig::Dncnn(c) => {
            ui.label(format!(
                "DnCNN, {} → {} channels",
                c.in_channels, c.out_channels
            ));
            changed |= number(ui, "convolutions", &mut c.depth, 1.0, 2..=1000);
            changed |= number(ui, "features", &mut c.nf, 1.0, 1..=4096);
        }
        DenoiserConfig::Drunet(c) => {
            ui.label(format!(
                "DRUNet, {} → {} channels, features {:?}",
                c.in_channels, c.out_channels, c.nc
            ));
            changed |= number(ui, "residual blocks", &mut c.nb, 1.0, 1..=64);
        }
        other => {
            ui.label(format!("{} (not trainable here)", other.kind_name()));
        }
    }
    if let Some(w) = p.denoiser.paths_mut().next() {
        ui.label(format!("starts from {}", w.display()));
    }

    ui.strong("Optimisation");
    let t = &mut p.train;
    let levels: Vec<String> = t.sigma.iter().map(|s| s.to_string()).collect();
    if let Some(text) = committed_text(ui, "noise levels", &levels.join(", ")) {
        // Unparsable entries are kept as NaN so that validation names the field.
        t.sigma = text
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap_or(f32::NAN))
            .collect();
        changed = true;
    }
    changed |= number(ui, "steps", &mut t.steps, 1.0, 1..=10_000_000);
    changed |= number(ui, "batch", &mut t.batch, 1.0, 1..=4096);
    let mut crop = t.crop.unwrap_or(0);
    if number(ui, "crop (0 = whole image)", &mut crop, 1.0, 0..=16384) {
        t.crop = (crop > 0).then_some(crop);
        changed = true;
    }
    changed |= number(ui, "learning rate", &mut t.learning_rate, 1e-5, 1e-7..=1.0);
    changed |= number(
        ui,
        "report every (steps)",
        &mut t.log_every,
        1.0,
        1..=1_000_000,
    );
    if let Some(name) = committed_text(ui, "weights file", &t.weights) {
        t.weights = name;
        changed = true;
    }
    changed
}

fn dsn_training(ui: &mut Ui, p: &mut DsnPreset) -> bool {
    let mut changed = false;
    ui.strong(format!("Domains ({})", p.domains.len()));
    for (i, d) in p.domains.iter().enumerate() {
        let role = if i == 0 { "source" } else { "target" };
        let from = match &d.folder {
            Some(f) => format!("folder {}", f.display()),
            None => "generated shapes".into(),
        };
        let physics: Vec<String> = d.transforms.iter().map(|t| t.summary()).collect();
        ui.label(format!(
            "{i}. {} ({role}): {from}{}",
            d.name,
            if physics.is_empty() {
                String::new()
            } else {
                format!(", {}", physics.join(" → "))
            }
        ));
    }
    changed |= number(ui, "seed", &mut p.seed, 1.0, 0..=u64::MAX);

    ui.strong("Network");
    let m = &mut p.model;
    changed |= number(ui, "image side", &mut m.image_size, 4.0, 8..=512);
    changed |= number(ui, "conv width", &mut m.width, 1.0, 1..=256);
    changed |= number(ui, "code length", &mut m.code, 1.0, 1..=4096);
    changed |= number(ui, "classifier hidden units", &mut m.hidden, 1.0, 1..=4096);

    ui.strong("Losses");
    let t = &mut p.train;
    changed |= ui
        .checkbox(
            &mut t.source_only,
            "source only (the baseline: task loss alone)",
        )
        .changed();
    if !t.source_only {
        changed |= combo(
            ui,
            "similarity",
            &mut t.similarity,
            &[
                (Similarity::Mmd, "MMD"),
                (Similarity::Dann, "DANN (gradient reversal)"),
            ],
        );
    }
    let w = &mut p.losses;
    changed |= number(ui, "task weight", &mut w.task, 0.01, 0.0..=1e6);
    changed |= number(
        ui,
        "reconstruction weight",
        &mut w.reconstruction,
        0.01,
        0.0..=1e6,
    );
    changed |= number(ui, "difference weight", &mut w.difference, 0.01, 0.0..=1e6);
    changed |= number(ui, "similarity weight", &mut w.similarity, 0.01, 0.0..=1e6);

    ui.strong("Schedule");
    changed |= number(ui, "epochs", &mut t.epochs, 1.0, 1..=100_000);
    changed |= number(
        ui,
        "steps per epoch",
        &mut t.steps_per_epoch,
        1.0,
        1..=1_000_000,
    );
    changed |= number(ui, "batch per domain", &mut t.batch, 1.0, 1..=4096);
    changed |= number(ui, "learning rate", &mut t.learning_rate, 1e-5, 1e-7..=1.0);
    changed |= number(
        ui,
        "training images",
        &mut t.train_images,
        1.0,
        1..=1_000_000,
    );
    changed |= number(
        ui,
        "held-out images",
        &mut t.test_images,
        1.0,
        1..=1_000_000,
    );

    ui.strong("Distribution");
    changed |= number(
        ui,
        "ranks per domain",
        &mut p.distributed.ranks_per_domain,
        1.0,
        1..=64,
    );
    ui.label(match p.distributed.ranks_per_domain {
        1 => "one rank per domain, whole images".to_string(),
        r => format!(
            "each domain's networks split over {r} ranks (halo exchange); run with a multiple of {r} ranks"
        ),
    });
    changed
}
