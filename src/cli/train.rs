//! `tessera train` here: a denoiser training preset or a Multi-DSN one, on this process group.

use std::path::PathBuf;

use anyhow::{Context, Result};

use tessera::dist;

use super::args::GroupArgs;
use super::group::{join_group, launch_local_group, place_threads};

/// Refuses training on a GPU (`--device`, else `TESSERA_DEVICE`) before anything runs: training is
/// not on the GPU yet, and the error names every missing part for the preset's network.
pub(super) fn check_device(name: &str, set: &[String], device: Option<&str>) -> Result<()> {
    use tessera::device::{Device, coverage};
    let chosen = Device::chosen(device.map(|d| Device::parse("--device", d)).transpose()?)?;
    if !chosen.is_cuda() {
        return Ok(());
    }
    let loading = || format!("loading training preset `{name}`");
    let model = match tessera::dsn::run::DsnPreset::load(name, set).with_context(loading)? {
        Some(_) => "multidsn",
        None => tessera::train::TrainPreset::load(name, set)
            .with_context(loading)?
            .0
            .denoiser
            .kind_name(),
    };
    coverage::check_training(chosen, model)?;
    Ok(())
}

pub(super) fn train(
    name: &str,
    set: &[String],
    out: Option<PathBuf>,
    control: &tessera::train::RunControl,
    quiet: bool,
    group: &GroupArgs,
) -> Result<()> {
    use tessera::train::TrainPreset;
    if let Some(dsn) = tessera::dsn::run::DsnPreset::load(name, set)
        .with_context(|| format!("loading training preset `{name}`"))?
    {
        if *control != tessera::train::RunControl::default() {
            anyhow::bail!(
                "--stop-after and --resume are for denoiser training presets, not Multi-DSN (`{name}`)"
            );
        }
        return train_dsn(dsn, out, quiet, group);
    }
    if group.ranks.is_some() && std::env::var_os(dist::launch::LAUNCHED_ENV).is_none() {
        // A bad preset fails here, before any rank starts.
        TrainPreset::load(name, set)
            .with_context(|| format!("loading training preset `{name}`"))?;
    }
    if launch_local_group(group)? {
        return Ok(());
    }
    place_threads(group, None)?;
    let comm = join_group(group)?;
    let (preset, base_dir) = TrainPreset::load(name, set)
        .with_context(|| format!("loading training preset `{name}`"))?;
    let out_dir = out.unwrap_or_else(|| PathBuf::from("out").join(&preset.name));
    let loud = !quiet && comm.rank() == 0;
    let steps = preset.train.steps;
    let summary = tessera::train::train(&preset, &base_dir, &out_dir, &*comm, control, &mut |p| {
        if loud {
            eprintln!(
                "step {:>6}/{steps}  loss {:.4e}  (PSNR {:.2} dB)",
                p.step + 1,
                p.loss,
                -10.0 * p.loss.log10()
            );
        }
        std::ops::ControlFlow::Continue(())
    })
    .with_context(|| format!("training `{}`", preset.name))?;
    if comm.rank() == 0 && !quiet {
        println!(
            "{}: {} parameters on {} rank(s), grid {:?}; weights {}",
            summary.denoiser,
            summary.parameters,
            summary.ranks,
            summary.grid,
            summary.weights.display()
        );
        for h in &summary.held_out {
            println!(
                "held out {} at sigma {}: noisy {:.2} dB, denoised {:.2} dB",
                h.image, h.sigma, h.noisy_psnr_db, h.denoised_psnr_db
            );
        }
        if summary.stopped_early {
            println!(
                "stopped after step {} of {steps}; continue with --resume {}",
                summary.steps,
                out_dir.display()
            );
        }
    }
    Ok(())
}

/// `tessera train` with a Multi-DSN preset: one line per epoch (per-domain losses, accuracies).
fn train_dsn(
    (preset, base_dir): (tessera::dsn::run::DsnPreset, PathBuf),
    out: Option<PathBuf>,
    quiet: bool,
    group: &GroupArgs,
) -> Result<()> {
    if launch_local_group(group)? {
        return Ok(());
    }
    place_threads(group, None)?;
    let comm = join_group(group)?;
    let out_dir = out.unwrap_or_else(|| PathBuf::from("out").join(&preset.name));
    let loud = !quiet && comm.rank() == 0;
    let names: Vec<String> = preset.domains.iter().map(|d| d.name.clone()).collect();
    let summary = tessera::dsn::run::train(&preset, &base_dir, &out_dir, &*comm, &mut |e| {
        if loud {
            let per: Vec<String> = e
                .losses
                .iter()
                .zip(&e.accuracy)
                .zip(&names)
                .map(|((l, a), n)| format!("{n} {:.3}/{:.0}%", l.total(), 100.0 * a))
                .collect();
            eprintln!(
                "epoch {:>3}  target accuracy {:5.1}%  [loss/accuracy: {}]",
                e.epoch + 1,
                100.0 * e.target_accuracy,
                per.join(", ")
            );
        }
        std::ops::ControlFlow::Continue(())
    })
    .with_context(|| format!("training `{}`", preset.name))?;
    if comm.rank() == 0 && !quiet {
        for r in &summary.per_rank {
            println!(
                "rank {}: domains {:?}, {:.1} s compute, {:.1} s exchange ({} received), peak memory {}",
                r.rank,
                r.domains,
                r.compute_secs,
                r.exchange_secs,
                tessera::error::human_bytes(r.received_bytes),
                r.peak_rss_bytes
                    .map_or("unknown".into(), tessera::error::human_bytes)
            );
        }
        println!(
            "{} domains on {} rank(s); weights {}, metrics {}",
            summary.domains.len(),
            summary.ranks,
            summary.weights.display(),
            out_dir.join(tessera::io::TRAIN_SUMMARY_FILE).display()
        );
    }
    Ok(())
}
