//! Denoiser and tiling: the denoiser's kind and parameters, the tiling strategy and sizes, which
//! rank gets which tile, and the patch map's legend.

use std::path::PathBuf;

use egui::{RichText, Ui};

use super::{EditorPanel, problem_here};
use crate::denoise::{
    DenoiserConfig, GaussianConfig, MedianConfig, Threshold, TvConfig, WaveletConfig, WaveletKind,
};
use crate::dist::denoise::TileAssignment;
use crate::gui::Workbench;
use crate::gui::patch_map::{LOST_COLOR, rank_color};
use crate::gui::widgets::{
    ERROR_COLOR, combo, committed_text, kind_combo, number, same_optional_variant,
};
use crate::nn::{DncnnConfig, DrunetConfig, Engine, TorchDevice, TorchScriptConfig};
use crate::tiling::{Extent, TilingConfig, TilingKind};

pub struct DenoiserPanel;

impl EditorPanel for DenoiserPanel {
    fn title(&self) -> &'static str {
        "Denoiser and tiling"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool {
        let mut changed = denoiser(ui, &mut wb.doc.preset.denoiser);
        problem_here(ui, wb, "denoiser");
        let preset = &mut wb.doc.preset;
        changed |= tiling(
            ui,
            &mut preset.tiling,
            &mut preset.distributed.tile_assignment,
        );
        problem_here(ui, wb, "tiling");
        if wb.doc.preset.tiling.is_some() {
            for w in &wb.doc.warnings {
                ui.colored_label(ui.visuals().warn_fg_color, w);
            }
            ui.checkbox(&mut wb.viewer.layers.patch_map.visible, "show patch map");
            patch_map_legend(ui, wb);
        }
        changed
    }
}

fn patch_map_legend(ui: &mut Ui, wb: &mut Workbench) {
    match wb.patch_map() {
        Some(Ok(map)) => {
            ui.horizontal_wrapped(|ui| {
                ui.label(format!("{} tiles:", map.tiles.len()));
                let lost_ranks = wb.lost_ranks_drawn();
                for (rank, n) in map.tiles_per_rank().iter().enumerate() {
                    let lost = lost_ranks.contains(&rank);
                    // A lost rank's name stays unused in the maps of the groups after it.
                    if *n == 0 && lost {
                        continue;
                    }
                    let text = match lost {
                        true => format!("□ rank {rank}: {n} (lost: reassigned next iteration)"),
                        false => format!("■ rank {rank}: {n}"),
                    };
                    let colour = match lost {
                        true => LOST_COLOR,
                        false => rank_color(rank),
                    };
                    ui.label(RichText::new(text).color(colour).strong());
                }
            });
        }
        // A refused plan is the document's problem, shown above; other errors here.
        Some(Err(e)) if wb.doc.problem.as_ref().is_none_or(|p| p.message != e) => {
            ui.colored_label(ERROR_COLOR, e);
        }
        _ => {}
    }
}

/// The denoiser's kind and parameters.
fn denoiser(ui: &mut Ui, d: &mut Option<DenoiserConfig>) -> bool {
    let mut changed = kind_combo(
        ui,
        "denoiser",
        d,
        &[
            ("none", || None),
            ("identity", || Some(DenoiserConfig::Identity)),
            ("tv", || Some(DenoiserConfig::Tv(TvConfig::default()))),
            ("wavelet", || {
                Some(DenoiserConfig::Wavelet(WaveletConfig::default()))
            }),
            ("median", || {
                Some(DenoiserConfig::Median(MedianConfig::default()))
            }),
            ("gaussian", || {
                Some(DenoiserConfig::Gaussian(GaussianConfig::default()))
            }),
            // The bundled architecture (issue #30), so that picking "drunet" runs trained weights
            // (on colour images the grey network in the opponent colour space).
            ("drunet", || {
                Some(DenoiserConfig::Drunet(
                    if crate::nn::bundled::DRUNET_PREFERRED {
                        DrunetConfig::bundled(3)
                    } else {
                        DrunetConfig::default()
                    },
                ))
            }),
            ("dncnn", || {
                Some(DenoiserConfig::Dncnn(DncnnConfig::bundled(3)))
            }),
            ("torchscript (libtorch)", || {
                Some(DenoiserConfig::Torchscript(TorchScriptConfig {
                    model: PathBuf::new(),
                    device: None,
                }))
            }),
        ],
        same_optional_variant,
    );
    match d {
        Some(DenoiserConfig::Tv(c)) => {
            changed |= number(ui, "TV iterations", &mut c.n_it_max, 1.0, 1..=100_000)
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
            changed |= number(ui, "levels", &mut c.levels, 1.0, 1..=16);
            changed |= combo(
                ui,
                "threshold",
                &mut c.threshold,
                &[(Threshold::Soft, "soft"), (Threshold::Hard, "hard")],
            );
        }
        Some(DenoiserConfig::Median(c)) => {
            changed |= number(ui, "kernel size", &mut c.kernel_size, 1.0, 1..=31)
        }
        Some(DenoiserConfig::Gaussian(c)) => {
            changed |= number(ui, "sigma (px)", &mut c.sigma_px, 0.05, 0.0..=256.0)
        }
        Some(DenoiserConfig::Drunet(c)) => {
            let bundled = c.bundled_weights().ok().flatten();
            changed |= network(
                ui,
                &mut c.weights,
                &mut c.engine,
                &mut c.inflate_3d,
                bundled,
            );
            if c.engine == Engine::Torch {
                changed |= torch_device(ui, &mut c.device);
            }
            changed |= number(ui, "in channels", &mut c.in_channels, 1.0, 1..=64);
            changed |= number(ui, "out channels", &mut c.out_channels, 1.0, 1..=64);
            changed |= ui
                .checkbox(
                    &mut c.opponent_colour,
                    "one-channel network on colour (opponent colour space)",
                )
                .changed();
            changed |= number(ui, "blocks per scale (nb)", &mut c.nb, 1.0, 1..=64);
            ui.label(format!("channels per scale (nc): {:?}", c.nc));
        }
        Some(DenoiserConfig::Dncnn(c)) => {
            let bundled = c.bundled_weights().ok().flatten();
            changed |= network(
                ui,
                &mut c.weights,
                &mut c.engine,
                &mut c.inflate_3d,
                bundled,
            );
            changed |= number(ui, "in channels", &mut c.in_channels, 1.0, 1..=64);
            changed |= number(ui, "out channels", &mut c.out_channels, 1.0, 1..=64);
            changed |= number(ui, "depth", &mut c.depth, 1.0, 2..=1000);
            changed |= number(ui, "features (nf)", &mut c.nf, 1.0, 1..=4096);
        }
        Some(DenoiserConfig::Torchscript(c)) => {
            let current = c.model.display().to_string();
            if let Some(text) = committed_text(ui, "model (torch.jit.save, .pt)", &current) {
                c.model = PathBuf::from(text.trim());
                changed = true;
            }
            ui.label("forward(x, sigma) → denoised x; needs a build with --features torch");
            changed |= torch_device(ui, &mut c.device);
        }
        Some(DenoiserConfig::Identity) | None => {}
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
/// means the `bundled` weights where the architecture has some, else random weights, which the
/// network announces as meaningless.
fn network(
    ui: &mut Ui,
    weights: &mut Option<PathBuf>,
    engine: &mut Engine,
    inflate_3d: &mut bool,
    bundled: Option<&crate::nn::bundled::BundledWeights>,
) -> bool {
    let current = weights
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut changed = false;
    if let Some(text) = committed_text(ui, "weights (.pth / .safetensors)", &current) {
        *weights = (!text.trim().is_empty()).then(|| text.trim().into());
        changed = true;
    }
    if let (None, Some(b)) = (&weights, bundled) {
        ui.label(format!("no weights file: {}", b.describe()));
    } else if weights.is_none() {
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
fn tiling(ui: &mut Ui, t: &mut Option<TilingConfig>, assignment: &mut TileAssignment) -> bool {
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
            (TilingKind::Spatial, "spatial (exact)"),
        ],
    );
    if c.kind != before_kind {
        // Fields that only apply to the other kinds would fail validation.
        match c.kind {
            TilingKind::Basic => {
                c.overlap = None;
                c.stride = None;
                c.pad_mode = None;
                c.even = false;
            }
            TilingKind::Overlap | TilingKind::Blend => c.num_splits = None,
            TilingKind::Spatial => {
                c.overlap = None;
                c.stride = None;
                c.pad_mode = None;
                c.num_splits = None;
                c.max_batch_size = None;
                c.even = false;
            }
        }
        if c.kind != TilingKind::Spatial {
            c.grid = None;
        }
    }
    if c.kind == TilingKind::Spatial {
        ui.label(
            "one block per rank; halos exchanged before every layer, so the result equals the \
             untiled network",
        );
        let error_id = ui.scope_id().with("tiling-grid-error");
        let current = c.grid.as_ref().map_or(String::new(), |g| {
            g.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join("x")
        });
        if let Some(text) = committed_text(ui, "ranks per axis (e.g. 2x2; empty = auto)", &current)
        {
            match parse_grid(&text) {
                Ok(grid) => {
                    c.grid = grid;
                    changed = true;
                    ui.data_mut(|d| d.remove::<String>(error_id));
                }
                Err(e) => {
                    ui.data_mut(|d| d.insert_temp(error_id, e));
                }
            }
        }
        if let Some(e) = ui.data(|d| d.get_temp::<String>(error_id)) {
            crate::gui::widgets::field_error(ui, &e);
        }
        return changed;
    }
    match &mut c.patch_size {
        Extent::Uniform(p) => changed |= number(ui, "patch size (px)", p, 1.0, 1..=16384),
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
        if number(ui, "overlap (px)", &mut overlap, 1.0, 0..=4096) {
            c.overlap = Some(Extent::Uniform(overlap));
            changed = true;
        }
        let even = ui
            .checkbox(&mut c.even, "even tiles")
            .on_hover_text(
                "keep the tile count but shrink the patches so they divide the image evenly \
                 (deepinv instead moves the last tile back, recomputing its neighbour)",
            )
            .changed();
        if even && c.even {
            // `even` chooses the stride.
            c.stride = None;
        }
        changed |= even;
    }
    let mut batch = c.max_batch_size.unwrap_or(0);
    if number(ui, "max batch size (0 = all)", &mut batch, 1.0, 0..=4096) {
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

/// `"2x2"`, `"2 x 1 x 1"` or `"4"` as ranks per axis; empty = chosen automatically.
fn parse_grid(text: &str) -> Result<Option<Vec<usize>>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let counts = text
        .split(['x', 'X', '×', ','])
        .map(|n| {
            n.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=256).contains(&n))
        })
        .collect::<Option<Vec<_>>>()
        .filter(|g| g.len() <= 3)
        .ok_or_else(|| format!("`{text}` is not 1 to 3 rank counts (1 to 256 each) such as 2x2"))?;
    Ok(Some(counts))
}

#[cfg(test)]
mod tests {
    use super::parse_grid;

    #[test]
    fn grids_parse_from_what_people_type() {
        assert_eq!(parse_grid(""), Ok(None));
        assert_eq!(parse_grid(" 2x2 "), Ok(Some(vec![2, 2])));
        assert_eq!(parse_grid("2 × 1 × 3"), Ok(Some(vec![2, 1, 3])));
        assert_eq!(parse_grid("4"), Ok(Some(vec![4])));
        for bad in ["0x2", "2x", "a", "1x1x1x1", "300"] {
            assert!(parse_grid(bad).is_err(), "{bad}");
        }
    }
}
