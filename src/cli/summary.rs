//! What a finished run prints, whether it ran here (`run`) or on a server (`attach`).

use tessera::job;

use super::output::say;

/// What a finished run prints (locally or attached).
pub(super) fn print_summary(summary: &job::JobSummary) {
    say!(
        "{}: {} in {:.2} s{} ({} iterations{}; gradient {:.2} s, denoiser {:.2} s)",
        summary.name,
        summary.algorithm,
        summary.solve_secs,
        over_generations(&summary.generations),
        summary.iterations,
        if summary.stopped_early {
            ", stopped early"
        } else {
            ""
        },
        summary.gradient_secs,
        summary.denoiser_secs
    );
    let ssim = |s: Option<f64>| s.map_or(String::new(), |s| format!(", SSIM {s:.4}"));
    match (&summary.reconstruction, &summary.back_projection) {
        (Some(r), Some(b)) => say!(
            "  reconstruction PSNR {:.2} dB{}   (back-projection {}: PSNR {:.2} dB)",
            r.psnr_db,
            ssim(r.ssim),
            match b.method {
                job::BackProjectionMethod::AdjointMean => "Σ Aᵢᵀyᵢ / n",
                job::BackProjectionMethod::Fbp => "FBP",
            },
            b.quality.psnr_db
        ),
        _ => say!("  no ground truth (measured data): PSNR and SSIM not computed"),
    }
    if summary.world_size > 1 {
        say!(
            "  {} ranks over {}{}:",
            summary.world_size,
            summary.backend,
            match summary.generations.len() {
                0 | 1 => "",
                _ => " (times summed over the generations each rank was in)",
            }
        );
        for r in &summary.ranks {
            say!(
                "    rank {}: operators {:?}, gradient {:.2} s, denoiser {:.2} s, communication {:.2} s",
                r.rank,
                r.operators,
                r.gradient_secs,
                r.denoiser_secs,
                r.communication_secs
            );
        }
    }
    if let Some(h) = &summary.halo_exchange
        && summary.world_size > 1
    {
        say!(
            "  spatial halos on grid {:?}: {} exchanges, {:.2} MB per denoiser call over all ranks, {}",
            h.grid,
            h.layers.len(),
            h.sent_bytes() as f64 / 1e6,
            match h.matches_prediction() {
                Some(true) => "each equal to its predicted halo volume",
                Some(false) => "NOT equal to the predicted halo volumes (see metrics.json)",
                None => "no prediction for this size (the network is padded or split first)",
            }
        );
    }
}

/// How an elastic run's solve time divides among the generations of its group (empty for one).
fn over_generations(generations: &[job::GenerationTimes]) -> String {
    if generations.len() < 2 {
        return String::new();
    }
    let parts: Vec<String> = generations
        .iter()
        .map(|g| {
            let done = match g.last_iteration > g.first_iteration {
                true => format!(
                    "iterations {}..={}",
                    g.first_iteration + 1,
                    g.last_iteration
                ),
                false => "no iteration".into(),
            };
            format!("{:.2} s on {} ranks for {done}", g.solve_secs, g.world_size)
        })
        .collect();
    format!(
        " summed over {} generations: {}",
        generations.len(),
        parts.join(", ")
    )
}

/// What a finished FWI run prints (locally or attached), less where its outputs are.
pub(super) fn print_fwi_summary(summary: &tessera::fwi::FwiSummary) {
    let last = summary.history.last();
    say!(
        "{}: {} epochs in {:.1} s{} on {} rank(s) × {} thread(s) over {}; final loss {:.4e}",
        summary.name,
        summary.epochs,
        summary.solve_secs,
        match summary.recoveries.len() {
            0 => String::new(),
            n => format!(
                " (summed over {} generations; lost slot(s) {:?})",
                n + 1,
                summary
                    .recoveries
                    .iter()
                    .flat_map(|r| r.lost_slots.iter().copied())
                    .collect::<Vec<_>>()
            ),
        },
        summary.world_size,
        summary.threads_per_rank,
        summary.backend,
        last.map_or(f64::NAN, |r| r.loss)
    );
    if let (Some(a), Some(b)) = (summary.initial_model_error, summary.final_model_error) {
        say!("  model error {:.2} % → {:.2} %", 100.0 * a, 100.0 * b);
    }
    say!(
        "  {} internal steps per sample, gradient by {:?}: {:.1} MiB per shot",
        summary.step_ratio,
        summary.gradient_strategy,
        summary.peak_bytes_per_shot as f64 / (1 << 20) as f64
    );
}
