//! `tessera bench`: each benchmark or study run and printed; the studies that run configurations
//! as child process groups of this binary (`scaling`, `spatial-memory`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use tessera::dist;
use tessera::io;

use super::args::BenchWhat;
use super::group::{join_group, launch_local_group};
use super::output::say;

/// Whether `tessera bench denoisers` runs BM3D, and in which exchange folder (default: one under
/// the system's temporary folder).
enum Bm3dChoice {
    Off,
    In(Option<PathBuf>),
}

/// `tessera bench denoisers`: the PSNR table of the bundled denoisers.
fn bench_denoisers(
    photos: Vec<PathBuf>,
    sigmas: &[f32],
    out: Option<PathBuf>,
    weights: &[PathBuf],
    bm3d: Bm3dChoice,
) -> Result<()> {
    use tessera::train::{TrainImage, bm3d::Runner, data, eval};
    if let Some(bad) = sigmas.iter().find(|s| !(**s > 0.0 && **s <= 1.0)) {
        bail!("--sigma: noise levels must be in (0, 1], got {bad}");
    }
    let extra = weights
        .iter()
        .map(|p| eval::ExtraNet::load(p))
        .collect::<tessera::Result<Vec<_>>>()?;
    let photos = if photos.is_empty() {
        vec![
            PathBuf::from("tests/fixtures/photos/camera_128.png"),
            PathBuf::from("tests/fixtures/photos/astronaut_128.png"),
        ]
    } else {
        photos
    };
    // The held-out images of presets/train-dncnn-{grey,colour}.toml.
    let held_out = |grayscale| TrainImage {
        sample: Some(tessera::samples::Sample::Natural),
        size: Some(vec![256, 256]),
        seed: Some(1000),
        grayscale,
        ..TrainImage::default()
    };
    let mut images = data::load_images(
        &[held_out(true), held_out(false)],
        "held_out",
        Path::new(""),
        0,
        false,
        &[],
    )?;
    for p in &photos {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut file = TrainImage {
            path: Some(p.clone()),
            ..TrainImage::default()
        };
        let mut photo = data::load_images(&[file.clone()], "photos", Path::new(""), 0, false, &[])?;
        photo[0].name = name.clone();
        let colour = photo[0].image.shape()[1] == 3;
        images.append(&mut photo);
        // A colour photograph is also a grey one, for the grey network.
        if colour {
            file.grayscale = true;
            let mut grey = data::load_images(&[file], "photos", Path::new(""), 0, false, &[])?;
            grey[0].name = format!("{name} (grey)");
            images.append(&mut grey);
        }
    }
    let runner = match &bm3d {
        Bm3dChoice::Off => Err("left out (--no-bm3d)".to_string()),
        Bm3dChoice::In(_) => Runner::from_environment(),
    };
    let (rows, note) = match runner {
        Ok(r) => {
            let (dir, keep) = match &bm3d {
                Bm3dChoice::In(Some(d)) => (d.clone(), true),
                _ => (
                    std::env::temp_dir().join(format!("tessera-bm3d-{}", std::process::id())),
                    false,
                ),
            };
            say!(
                "BM3D: {} {} in {}",
                r.python.display(),
                r.script.display(),
                dir.display()
            );
            let scored = eval::psnr_table(&images, sigmas, 0, &extra, Some((&r, &dir)));
            if !keep {
                // Only this run's own temporary folder (named by its process id) is removed.
                let _ = std::fs::remove_dir_all(&dir);
            }
            match scored {
                Ok(rows) => (rows, None),
                Err(e @ tessera::Error::ChildFailed { .. }) => (
                    eval::psnr_table(&images, sigmas, 0, &extra, None)?,
                    Some(format!("BM3D failed, so its column is left out: {e}")),
                ),
                Err(e) => return Err(e.into()),
            }
        }
        Err(why) => (
            eval::psnr_table(&images, sigmas, 0, &extra, None)?,
            Some(format!("BM3D's column is left out: {why}")),
        ),
    };
    let mut table = eval::markdown(&rows);
    if let Some(note) = note {
        table.push_str(&format!("\n{note}\n"));
    }
    say!("{table}");
    if let Some(path) = out {
        io::write_atomic(&path, table.as_bytes())?;
    }
    Ok(())
}

pub(super) fn bench(what: BenchWhat) -> Result<()> {
    let threads = rayon::current_num_threads();
    match what {
        BenchWhat::Blur {
            width,
            height,
            repeats,
        } => {
            let r = tessera::physics::blur_bench::bench_blur_stack(width, height, repeats)?;
            say!("{r}\n(rayon threads: {threads})");
        }
        BenchWhat::Tomography {
            size,
            angles,
            repeats,
        } => {
            let r = tessera::physics::tomography::bench_tomography(size, angles, repeats)?;
            say!(
                "tomography 2-D parallel beam, {size}×{size}, {angles} angles, {} detector cells ({} threads):",
                r.n_det,
                r.threads
            );
            say!("  A    {:8.1} ms", r.forward_secs * 1e3);
            say!("  Aᵀ   {:8.1} ms", r.adjoint_secs * 1e3);
            say!("  FBP  {:8.1} ms", r.fbp_secs * 1e3);
            say!("  (single-threaded reference and ratios: cargo bench --bench tomography)");
        }
        BenchWhat::Scaling {
            preset,
            ranks,
            sizes,
            threads_per_rank,
            set,
            out,
            link,
        } => {
            let link = match link[..] {
                [] => None,
                [us, gbps] if us >= 0.0 && gbps > 0.0 && us.is_finite() && gbps.is_finite() => {
                    Some(tessera::scaling::performance::Link {
                        latency_secs: us * 1e-6,
                        bytes_per_sec: gbps * 1e9,
                    })
                }
                _ => bail!(
                    "--link: give LATENCY_US,GB_PER_S with latency ≥ 0 and bandwidth > 0, got {link:?}"
                ),
            };
            let spec = tessera::scaling::study::StudySpec {
                preset,
                overrides: set,
                ranks,
                sizes,
                threads_per_rank,
                out,
            };
            bench_scaling(&spec, link)?
        }
        BenchWhat::Denoisers {
            photos,
            sigma,
            out,
            weights,
            no_bm3d,
            bm3d_dir,
        } => {
            let bm3d = if no_bm3d {
                Bm3dChoice::Off
            } else {
                Bm3dChoice::In(bm3d_dir)
            };
            bench_denoisers(photos, &sigma, out, &weights, bm3d)?
        }
        BenchWhat::Wave {
            nz,
            nx,
            shots,
            nt,
            accuracy,
            repeats,
            no_gradient,
            json,
        } => {
            use tessera::physics::wave::bench::{WaveBenchSpec, bench_wave};
            let spec = WaveBenchSpec {
                nz,
                nx,
                shots,
                nt,
                accuracy,
                repeats,
                gradient: !no_gradient,
                ..WaveBenchSpec::default()
            };
            let r = bench_wave(&spec)?;
            if json {
                let mut v = serde_json::to_value(&r)?;
                v["forward_bandwidth_fraction"] = r.forward_bandwidth_fraction().into();
                say!("{v}");
            } else {
                say!("{r}");
            }
        }
        BenchWhat::SpatialMemory {
            models,
            sizes,
            ranks,
            forward_only,
            train_only,
            budget_mib,
            csv,
        } => bench_spatial_memory(
            &models,
            &sizes,
            &ranks,
            [!train_only, !forward_only],
            budget_mib,
            csv.as_deref(),
        )?,
        BenchWhat::SpatialMemoryRank {
            model,
            size,
            train,
            group,
        } => {
            use tessera::dist::spatial_memory::{MemorySpec, measure};
            if launch_local_group(&group)? {
                return Ok(());
            }
            let spec = MemorySpec {
                model: model.parse()?,
                size,
                train,
            };
            let comm = join_group(&group)?;
            if let Some(point) = measure(comm.as_ref(), spec)? {
                say!("{}", serde_json::to_string(&point)?);
            }
        }
        BenchWhat::Collectives {
            mib,
            ranks,
            repeats,
        } => {
            say!(
                "{}",
                dist::bench::bench_all_reduce(mib << 20, ranks, repeats)?
            );
        }
        BenchWhat::AllReduce {
            kib,
            repeats,
            json,
            group,
        } => {
            if launch_local_group(&group)? {
                return Ok(());
            }
            let comm = join_group(&group)?;
            let bytes: Vec<usize> = kib.iter().map(|k| k << 10).collect();
            let times = dist::bench::time_all_reduce(comm.as_ref(), &bytes, repeats)?;
            if comm.rank() == 0 {
                let ranks = comm.world_size();
                if json {
                    say!(
                        "{}",
                        serde_json::json!({ "ranks": ranks, "all_reduce": times })
                    );
                } else {
                    say!("all-reduce (sum) over {ranks} ranks, best of {repeats}:");
                    for t in &times {
                        say!("  {:>10} B  {:10.3} ms", t.bytes, t.secs * 1e3);
                    }
                }
                // The link a ring all-reduce of these times implies, for `bench scaling --link`.
                let samples: Vec<(f64, f64)> =
                    times.iter().map(|t| (t.bytes as f64, t.secs)).collect();
                match tessera::scaling::performance::Link::fit_all_reduce(ranks, &samples) {
                    Ok(l) => say!(
                        "fitted link: --link {:.1},{:.4}  (latency µs, GB/s)",
                        l.latency_secs * 1e6,
                        l.bytes_per_sec / 1e9
                    ),
                    Err(e) => say!("no link fitted: {e}"),
                }
            }
        }
    }
    Ok(())
}

/// `tessera bench spatial-memory`: each configuration runs as `bench spatial-memory-rank --ranks N`
/// (a real process group, so each rank's memory is its own process's), one after the other.
fn bench_spatial_memory(
    models: &[String],
    sizes: &[usize],
    ranks: &[usize],
    [forward, train]: [bool; 2],
    budget_mib: usize,
    csv: Option<&Path>,
) -> Result<()> {
    use tessera::dist::spatial_memory::{self as study, StudyModel};
    let models = models
        .iter()
        .map(|m| m.parse::<StudyModel>())
        .collect::<tessera::Result<Vec<_>>>()?;
    let modes: Vec<bool> = [(false, forward), (true, train)]
        .into_iter()
        .filter_map(|(t, on)| on.then_some(t))
        .collect();
    let exe = std::env::current_exe().context("finding this executable")?;
    let points = study::run_study(&exe, &models, sizes, ranks, &modes, |spec, n| {
        let mode = if spec.train { "train" } else { "forward" };
        eprintln!("{} {mode} {} on {n} rank(s)", spec.model.name(), spec.size);
    })?;
    let rows = study::rows(&points);
    say!(
        "{:<7} {:<7} {:>5} {:>5} {:>7} {:>10} {:>10} {:>9} {:>6} {:>5} {:>7} {:>9} {:>6} {:>9} {:>5}",
        "model",
        "mode",
        "size",
        "ranks",
        "grid",
        "MiB/rank",
        "1rank/N",
        "halo MiB",
        "ratio",
        "goal",
        "s",
        "live MiB",
        "ratio",
        "halo held",
        "goal"
    );
    for r in &rows {
        let opt =
            |v: Option<f64>, p: usize| v.map(|v| format!("{v:.p$}")).unwrap_or_else(|| "-".into());
        say!(
            "{:<7} {:<7} {:>5} {:>5} {:>7} {:>10.1} {:>10} {:>9.2} {:>6} {:>5} {:>7.2} {:>9} {:>6} {:>9.2} {:>5}",
            r.model,
            r.mode,
            r.size,
            r.ranks,
            format!("{}x{}x{}", r.grid[0], r.grid[1], r.grid[2]),
            r.max_working_mib,
            opt(r.ideal_mib, 1),
            r.largest_halo_mib,
            opt(r.ratio, 2),
            r.meets_goal
                .map(|b| if b { "yes" } else { "NO" })
                .unwrap_or("-"),
            r.secs,
            opt(r.max_live_mib, 1),
            opt(r.live_ratio, 2),
            r.halo_held_mib,
            r.live_meets_goal
                .map(|b| if b { "yes" } else { "NO" })
                .unwrap_or("-")
        );
    }
    say!(
        "MiB/rank: peak resident above the baseline; live MiB: peak live heap bytes (no allocator holes), ratio against one rank's the same way\ngoal: MiB/rank <= 1.15 x 1rank/N + halo (the largest exchange sent); 1rank/N = (one rank's - R) / N + R, R = a training step's two gradient buffers (2 x weights), held by every rank\nlive goal: every rank's live MiB <= 1.15 x (one rank's live, divided the same way) + the halo it holds at once for one layer (halo held: the largest rank's)"
    );
    say!(
        "largest side whose working memory fits {budget_mib} MiB per rank (line fitted over the sizes):"
    );
    for (spec, n, side) in study::largest_fitting(&points, budget_mib as f64 * 1024.0 * 1024.0) {
        let mode = if spec.train { "train" } else { "forward" };
        match side {
            Some(side) => say!("  {:<7} {:<7} {n} rank(s): {side}", spec.model.name(), mode),
            None => say!(
                "  {:<7} {:<7} {n} rank(s): no increasing fit",
                spec.model.name(),
                mode
            ),
        }
    }
    if let Some(path) = csv {
        tessera::io::write_atomic(path, study::csv(&rows).as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `tessera bench scaling`: the study (`tessera::scaling::study`, each configuration a process
/// group of this binary), then its report and summary.
fn bench_scaling(
    spec: &tessera::scaling::study::StudySpec,
    link: Option<tessera::scaling::performance::Link>,
) -> Result<()> {
    use tessera::scaling::study::{self, StudyProgress};
    let exe = std::env::current_exe().context("finding this executable")?;
    let done = study::run(&exe, spec, |p| match p {
        StudyProgress::Starting {
            index,
            total,
            config,
            dir,
        } => eprintln!(
            "[{}/{total}] {} → {}",
            index + 1,
            config.slug(),
            dir.display()
        ),
        StudyProgress::Finished { metrics, .. } => eprintln!(
            "    {:.2} s (slowest rank; gradient {:.2} s, denoiser {:.2} s)",
            metrics.total_secs(),
            metrics.gradient_secs(),
            metrics.denoiser_secs()
        ),
        StudyProgress::NoModel { config, error } => {
            eprintln!("    no model for {}: {error}", config.slug())
        }
    })
    .with_context(|| format!("scaling study of `{}`", spec.preset))?;
    let report = tessera::scaling::write_report(
        &done.runs,
        &format!("Scaling study: {}", done.name),
        &done.out,
        link,
    )
    .context("writing the scaling report")?;
    println!("{}", tessera::scaling::summary_csv(&done.runs));
    println!("report: {}", report.display());
    Ok(())
}
