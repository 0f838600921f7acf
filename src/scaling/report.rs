//! The reports as files: a study's (`tessera bench scaling`), one finished run's (`tessera
//! report`; an inversion's or a training run's loss and per-rank times), and the model's section.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::csv::{rank_csv, summary_csv};
use super::figures::{figures, groups, run_figures};
use super::html::{csv_table, escape, write_page};
use super::performance;
use super::runs::{Configuration, Run, RunMetrics};
use crate::dist::profile::IterationProfile;
use crate::error::{Error, Result};
use crate::io;
use crate::plot::{Dash, Figure, LineChart, Rgb, Series};

/// Writes `rank_iterations.csv`, `summary.csv`, the figures as PNG files and `report.html` (the
/// same figures embedded, so the page stands alone) into `dir`; returns the report's path.
pub fn write_report(
    runs: &[Run],
    title: &str,
    dir: &Path,
    link: Option<performance::Link>,
) -> Result<PathBuf> {
    if runs.is_empty() {
        return Err(Error::config("scaling study", "no runs to report"));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating report folder", dir, e))?;
    let rank_csv_text = rank_csv(runs);
    let summary = summary_csv(runs);
    io::write_atomic(&dir.join("rank_iterations.csv"), rank_csv_text.as_bytes())?;
    io::write_atomic(&dir.join("summary.csv"), summary.as_bytes())?;
    let mut html = String::from(
        "<p>Figures are measurements on this machine unless labelled <b>model</b>. Files: \
         summary.csv, rank_iterations.csv, model.csv (model beside measurement).</p>\n\
         <h2>Summary</h2>\n",
    );
    html.push_str(&csv_table(&summary));
    let mut figures = figures(runs)?;
    if let Some(m) = model_section(runs, link)? {
        io::write_atomic(&dir.join("model.csv"), m.csv.as_bytes())?;
        html.push_str(&m.html);
        figures.push(m.figure);
    }
    write_page(dir, title, &html, figures)
}

/// Writes the report of one finished run (`run_dir` holds its `metrics.json`) into `out`:
/// `rank_iterations.csv`, the [`run_figures`] as PNG files and `report.html` with them embedded;
/// returns the report's path. A folder that is not a finished run, or a run by a tessera that did
/// not profile its ranks, is an error naming the file.
pub fn write_run_report(run_dir: &Path, out: &Path) -> Result<PathBuf> {
    if let Some(page) = write_fwi_or_training_report(run_dir, out)? {
        return Ok(page);
    }
    let metrics = RunMetrics::load(run_dir)?;
    let run = Run {
        config: Configuration {
            size: None,
            ranks: metrics.world_size,
            threads: None,
        },
        metrics,
        workload: None,
    };
    std::fs::create_dir_all(out).map_err(|e| Error::io("creating report folder", out, e))?;
    let runs = std::slice::from_ref(&run);
    io::write_atomic(&out.join("rank_iterations.csv"), rank_csv(runs).as_bytes())?;
    let m = &run.metrics;
    let mut ranks = String::from(
        "rank,threads,operators,tiles,gradient_s,denoiser_s,communication_s,idle_s,total_s,peak_rss_mib\n",
    );
    for r in &m.ranks {
        let sum = |f: &dyn Fn(&IterationProfile) -> f64| r.iterations.iter().map(f).sum::<f64>();
        let _ = writeln!(
            ranks,
            "{},{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.1}",
            r.rank,
            r.threads,
            r.operators.len(),
            m.tiles.iter().filter(|t| t.rank == r.rank).count(),
            sum(&|i| i.gradient.secs),
            sum(&|i| i.denoiser.secs),
            sum(&IterationProfile::communication_secs),
            sum(&IterationProfile::idle_secs),
            sum(&IterationProfile::total_secs),
            r.peak_rss_bytes as f64 / (1u64 << 20) as f64,
        );
    }
    let mut html = format!(
        "<p>Run folder: {}. {} rank(s), {} iteration(s), solve {:.3} s{}. Measured on the machine \
         that ran it. File: rank_iterations.csv (per rank and iteration).</p>\n<h2>Ranks</h2>\n",
        escape(&run_dir.display().to_string()),
        m.world_size,
        m.ranks.first().map_or(0, |r| r.iterations.len()),
        m.solve_secs,
        m.psnr_db()
            .map_or(String::new(), |p| format!(", PSNR {p:.2} dB")),
    );
    html.push_str(&csv_table(&ranks));
    let title = match m.name.as_str() {
        "" => "Run report".to_string(),
        name => format!("Run report: {name}"),
    };
    write_page(out, &title, &html, run_figures(runs)?)
}

/// The report of a full-waveform inversion (its `metrics.json` lists epochs, not iterations) or of
/// a training run (`train.json`, no `metrics.json`): the loss per epoch or step, and each rank's
/// time. `None` for an imaging run.
fn write_fwi_or_training_report(run_dir: &Path, out: &Path) -> Result<Option<PathBuf>> {
    let read = |name: &str| -> Result<Option<Vec<u8>>> {
        let path = run_dir.join(name);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("reading", path, e)),
        }
    };
    let bad = |name: &str, e: serde_json::Error| Error::format(run_dir.join(name), e.to_string());
    let (title, about, loss, ranks) = if let Some(bytes) = read(io::METRICS_FILE)? {
        let is_fwi = serde_json::from_slice::<serde_json::Value>(&bytes)
            .is_ok_and(|v| v.get("step_ratio").is_some() && v.get("history").is_some());
        if !is_fwi {
            return Ok(None);
        }
        let m: crate::fwi::FwiSummary =
            serde_json::from_slice(&bytes).map_err(|e| bad(io::METRICS_FILE, e))?;
        let mut ranks = String::from("rank,shots,forward_s,adjoint_s,communication_s\n");
        for r in 0..m.world_size {
            let of = |f: &dyn Fn(&crate::fwi::RankEpoch) -> f64| -> f64 {
                m.history
                    .iter()
                    .flat_map(|e| &e.ranks)
                    .filter(|x| x.rank == r)
                    .map(f)
                    .sum()
            };
            let _ = writeln!(
                ranks,
                "{r},{},{:.3},{:.3},{:.3}",
                of(&|x| x.shots.len() as f64),
                of(&|x| x.forward_secs),
                of(&|x| x.adjoint_secs),
                of(&|x| x.communication_secs)
            );
        }
        let about = format!(
            "A full-waveform inversion of a {}×{} model, {} shots, {} epoch(s) on {} rank(s), \
             solve {:.1} s; model error {}.",
            m.model_shape[0],
            m.model_shape[1],
            m.shots,
            m.history.len(),
            m.world_size,
            m.solve_secs,
            m.final_model_error
                .map_or("not known (no true model)".into(), |e| format!(
                    "{:.2} %",
                    100.0 * e
                ))
        );
        let loss: Vec<(f64, f64)> = m.history.iter().map(|e| (e.epoch as f64, e.loss)).collect();
        (
            format!("FWI report: {}", m.name),
            about,
            ("epoch", loss),
            ranks,
        )
    } else if let Some(bytes) = read(crate::io::TRAIN_SUMMARY_FILE)? {
        if let Ok(t) = serde_json::from_slice::<crate::train::TrainSummary>(&bytes) {
            let mut ranks = String::from("rank,compute_s,exchange_s\n");
            for (r, (c, x)) in t.compute_secs.iter().zip(&t.exchange_secs).enumerate() {
                let _ = writeln!(ranks, "{r},{c:.3},{x:.3}");
            }
            let about = format!(
                "Training {} ({} parameters) for {} step(s) on {} rank(s).",
                t.denoiser, t.parameters, t.steps, t.ranks
            );
            let loss = t.loss.iter().map(|p| (p.step as f64, p.loss)).collect();
            (
                format!("Training report: {}", t.name),
                about,
                ("step", loss),
                ranks,
            )
        } else {
            let d: crate::dsn::run::DsnSummary = serde_json::from_slice(&bytes)
                .map_err(|e| bad(crate::io::TRAIN_SUMMARY_FILE, e))?;
            let mut ranks = String::from("rank,domains,compute_s,exchange_s\n");
            for r in &d.per_rank {
                let domains: Vec<String> = r.domains.iter().map(|x| x.to_string()).collect();
                let _ = writeln!(
                    ranks,
                    "{},{},{:.3},{:.3}",
                    r.rank,
                    domains.join(" "),
                    r.compute_secs,
                    r.exchange_secs
                );
            }
            let about = format!(
                "A Multi-DSN of {} domains for {} epoch(s) on {} rank(s); last target accuracy {}.",
                d.domains.len(),
                d.epochs.len(),
                d.ranks,
                d.epochs.last().map_or("none".into(), |e| format!(
                    "{:.1} %",
                    100.0 * e.target_accuracy
                ))
            );
            let loss = d
                .epochs
                .iter()
                .map(|e| {
                    let n = e.losses.len().max(1) as f64;
                    (
                        e.epoch as f64 + 1.0,
                        e.losses.iter().map(|l| l.total()).sum::<f64>() / n,
                    )
                })
                .collect();
            (
                format!("Training report: {}", d.name),
                about,
                ("epoch", loss),
                ranks,
            )
        }
    } else {
        return Ok(None);
    };
    std::fs::create_dir_all(out).map_err(|e| Error::io("creating report folder", out, e))?;
    io::write_atomic(&out.join("ranks.csv"), ranks.as_bytes())?;
    let (x, points) = loss;
    let figure = crate::plot::LineChart::new("loss")
        .labels(x, "loss")
        .log_y()
        .series(crate::plot::Series::new("loss", points).markers())
        .render()?;
    let html = format!(
        "<p>Run folder: {}. {}</p>\n<h2>Ranks</h2>\n{}",
        escape(&run_dir.display().to_string()),
        escape(&about),
        csv_table(&ranks)
    );
    write_page(
        out,
        &title,
        &html,
        vec![("loss".into(), format!("loss per {x}"), figure)],
    )
    .map(Some)
}

/// The model's part of the report: a table of model beside measurement, predictions past this
/// machine, and a figure.
struct ModelSection {
    csv: String,
    html: String,
    figure: (String, String, Rgb),
}

/// Measured seconds per iteration of the slowest rank (first iteration left out when there are
/// more), for total, gradient, denoiser.
fn measured_per_iteration(m: &RunMetrics) -> [f64; 3] {
    let slowest = |f: &dyn Fn(&IterationProfile) -> f64| {
        m.ranks
            .iter()
            .map(|r| {
                let its = &r.iterations;
                let used = if its.len() > 1 { &its[1..] } else { &its[..] };
                used.iter().map(f).sum::<f64>() / used.len().max(1) as f64
            })
            .fold(0.0, f64::max)
    };
    [
        slowest(&IterationProfile::total_secs),
        slowest(&|i| i.gradient.secs),
        slowest(&|i| i.denoiser.secs),
    ]
}

/// The link the local runs communicated over: bytes moved over time spent moving them (waiting
/// excluded), from every multi-rank run's profiles; `None` without one.
fn local_link(runs: &[&Run]) -> Option<performance::Link> {
    let (mut bytes, mut secs) = (0.0, 0.0);
    for run in runs.iter().filter(|r| r.config.ranks > 1) {
        for r in &run.metrics.ranks {
            for i in &r.iterations {
                for p in [&i.gradient, &i.denoiser] {
                    bytes += p.bytes as f64;
                    secs += p.communication_secs;
                }
            }
        }
    }
    (bytes > 0.0 && secs > 0.0).then_some(performance::Link {
        latency_secs: 0.0,
        bytes_per_sec: bytes / secs,
    })
}

/// Columns of `model.csv` and of the report's model tables (seconds per iteration).
const MODEL_COLUMNS: &str = "kind,group,ranks,threads,total_s,gradient_s,denoiser_s,communication_s,\
                             idle_s,efficiency_bound,measured_total_s,measured_gradient_s,\
                             measured_denoiser_s,error_total_pct";

/// Rank counts the model predicts for past the measured ones.
const MODEL_RANKS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

fn model_section(runs: &[Run], link: Option<performance::Link>) -> Result<Option<ModelSection>> {
    let mut csv = format!("{MODEL_COLUMNS}\n");
    let mut html = String::from(
        "<h2>Model (per iteration)</h2>\n<p>Rows marked <b>model</b> are predicted: per-rank work from \
         the operator and tile assignment, per-unit costs calibrated on the group's run with the \
         fewest ranks, communication from the bytes each gather moves over the link. Rows marked \
         <b>model vs measured</b> put the prediction beside the measurement of the same \
         configuration (first iteration left out); error = model / measured − 1.</p>\n",
    );
    let mut chart = LineChart::new("Parallel efficiency: model past this machine, and measured")
        .labels("ranks", "efficiency")
        .y_range(0.0, 1.2)
        .log_x();
    let mut any = false;
    for (gi, (g, members)) in groups(runs).iter().enumerate() {
        let group: Vec<&Run> = members.iter().map(|&i| &runs[i]).collect();
        let base = group[0];
        let Some(work) = &base.workload else { continue };
        let costs = performance::Costs::measure(work, &base.metrics.ranks)?;
        let local = local_link(&group);
        let free = performance::Link {
            latency_secs: 0.0,
            bytes_per_sec: f64::INFINITY,
        };
        let here = local.unwrap_or(free);
        let past = link.or(local).unwrap_or(free);
        let _ = writeln!(
            html,
            "<h3>{}</h3>\n<p>Local link (fitted from the measured runs' bytes and communication \
             time): {}. Link past this machine: {}.</p>\n<table>\n<tr>{}</tr>",
            escape(g),
            describe_link(local),
            describe_link(Some(past)),
            MODEL_COLUMNS
                .split(',')
                .map(|c| format!("<th>{c}</th>"))
                .collect::<String>(),
        );
        let mut row =
            |kind: &str, p: &performance::Prediction, eff: f64, measured: Option<[f64; 3]>| {
                let err = measured.map(|m| (p.total_secs / m[0] - 1.0) * 100.0);
                let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
                let cells = [
                    kind.to_string(),
                    g.replace(',', ";"),
                    p.ranks.to_string(),
                    p.threads.to_string(),
                    format!("{:.4}", p.total_secs),
                    format!("{:.4}", p.gradient_secs),
                    format!("{:.4}", p.denoiser_secs),
                    format!("{:.4}", p.communication_secs),
                    format!("{:.4}", p.idle_secs),
                    format!("{eff:.4}"),
                    opt(measured.map(|m| m[0])),
                    opt(measured.map(|m| m[1])),
                    opt(measured.map(|m| m[2])),
                    err.map_or(String::new(), |e| format!("{e:+.1}")),
                ];
                let _ = writeln!(csv, "{}", cells.join(","));
                html.push_str("<tr>");
                for c in &cells {
                    let _ = write!(html, "<td>{}</td>", escape(c));
                }
                html.push_str("</tr>\n");
            };
        let mut measured_eff = Vec::new();
        let mut modelled_eff = Vec::new();
        let base_threads = base.metrics.ranks[0].threads.max(1);
        let t_base = performance::predict(work, &costs, &here, base.config.ranks, base_threads)?;
        for run in &group {
            let threads = run.metrics.ranks[0].threads.max(1);
            let p = performance::predict(work, &costs, &here, run.config.ranks, threads)?;
            let m = measured_per_iteration(&run.metrics);
            let ratio = run.config.ranks as f64 / base.config.ranks as f64;
            let eff = t_base.total_secs / p.total_secs / ratio;
            row("model vs measured", &p, eff, Some(m));
            measured_eff.push((
                run.config.ranks as f64,
                measured_per_iteration(&base.metrics)[0] / m[0] / ratio,
            ));
        }
        let one = performance::predict(work, &costs, &past, 1, base_threads)?;
        for n in MODEL_RANKS {
            let p = performance::predict(work, &costs, &past, n, base_threads)?;
            let eff = one.total_secs / p.total_secs / n as f64;
            row("model", &p, eff, None);
            modelled_eff.push((n as f64, eff));
        }
        html.push_str("</table>\n");
        chart = chart
            .series(
                Series::new(
                    format!("model, {base_threads} thr/rank ({g})"),
                    modelled_eff,
                )
                .color(gi)
                .dash(Dash::Dashed),
            )
            .series(
                Series::new(format!("measured ({g})"), measured_eff)
                    .color(gi)
                    .markers(),
            );
        any = true;
    }
    if !any {
        return Ok(None);
    }
    Ok(Some(ModelSection {
        csv,
        html,
        figure: (
            "model_efficiency".into(),
            "Model (dashed): the efficiency bound load imbalance and communication leave, each rank \
             with the base run's threads, against one rank; measured (markers): this machine's runs, \
             whose ranks share its cores."
                .into(),
            chart.render()?,
        ),
    }))
}

fn describe_link(link: Option<performance::Link>) -> String {
    match link {
        None => "none (no multi-rank run; communication not modelled)".into(),
        Some(l) if l.bytes_per_sec.is_infinite() => "free (not modelled)".into(),
        Some(l) => format!(
            "latency {:.1} µs, {:.3} GB/s",
            l.latency_secs * 1e6,
            l.bytes_per_sec / 1e9
        ),
    }
}
