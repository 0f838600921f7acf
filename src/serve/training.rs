//! Training jobs on the backend: a denoiser trained under spatial decomposition (`tessera train`
//! with a `[train]` preset) or a Multi-DSN (`kind = "dsn"`), run by every rank of the group as the
//! CLI runs them, with rank 0 streaming [`Event::TrainStarted`], then [`Event::TrainStep`] or
//! [`Event::DsnEpoch`] as the run reports, and a Stop honoured at the next report (rank 0's flag
//! is broadcast there, so every rank ends at the same step).
//!
//! Outputs go into a run folder of their own like every job's (staged, then moved into place);
//! the paths in its `train.json` are relative to that folder, so they stay true wherever the
//! folder is moved or fetched to.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::{JobContext, Outcome};
use crate::dsn::run::{DsnPreset, DsnSummary};
use crate::error::{Error, Result};
use crate::io::{RunDir, Staging};
use crate::protocol::{Event, TrainPlan};
use crate::train::{TrainPreset, TrainSummary, checkpoint};

/// A submitted training preset.
pub(super) enum TrainJob {
    Denoiser(Box<TrainPreset>),
    Dsn(Box<DsnPreset>),
}

impl TrainJob {
    /// The training job `preset_toml` describes; `Ok(None)` when it is not a training preset.
    /// Relative paths in it are the server's, from its working directory.
    pub(super) fn parse(preset_toml: &str) -> Result<Option<TrainJob>> {
        let here = Path::new("");
        if DsnPreset::is_dsn(preset_toml) {
            let mut p = DsnPreset::from_toml(preset_toml, "submitted Multi-DSN preset", &[])?;
            p.resolve_paths(here);
            return Ok(Some(TrainJob::Dsn(Box::new(p))));
        }
        if TrainPreset::is_train(preset_toml) {
            let mut p = TrainPreset::from_toml(preset_toml, "submitted training preset", &[])?;
            p.resolve_paths(here);
            return Ok(Some(TrainJob::Denoiser(Box::new(p))));
        }
        Ok(None)
    }

    pub(super) fn name(&self) -> &str {
        match self {
            TrainJob::Denoiser(p) => &p.name,
            TrainJob::Dsn(p) => &p.name,
        }
    }

    /// The network it trains, as `device::coverage::check_training` names it.
    pub(super) fn model(&self) -> &str {
        match self {
            TrainJob::Denoiser(p) => p.denoiser.kind_name(),
            TrainJob::Dsn(_) => "multidsn",
        }
    }

    pub(super) fn to_toml(&self) -> Result<String> {
        match self {
            TrainJob::Denoiser(p) => p.to_toml(),
            TrainJob::Dsn(p) => p.to_toml(),
        }
    }

    /// What the job will do, for [`Event::TrainStarted`].
    pub fn plan(&self) -> TrainPlan {
        match self {
            TrainJob::Denoiser(p) => TrainPlan::Denoiser {
                network: p.denoiser.kind_name().to_string(),
                steps: p.train.steps,
                sigmas: p.train.sigma.clone(),
            },
            TrainJob::Dsn(p) => TrainPlan::Dsn {
                domains: p.domains.iter().map(|d| d.name.clone()).collect(),
                epochs: p.train.epochs,
                steps_per_epoch: p.train.steps_per_epoch,
                similarity: match p.train.source_only {
                    true => "source only".into(),
                    false => p.train.similarity.name().into(),
                },
            },
        }
    }

    /// Refuses a job that cannot fit in this machine's memory on `world` ranks, `ranks_here` of
    /// them here (rank 0's precheck: the images are sized from their headers, not loaded).
    pub(super) fn check_memory(&self, world: usize, ranks_here: usize) -> Result<()> {
        let here = Path::new("");
        match self {
            TrainJob::Denoiser(p) => p.memory(here, world, ranks_here)?.check(),
            TrainJob::Dsn(p) => p.memory(here, world, ranks_here)?.check(),
        }
    }

    /// Whether the job can continue a stopped run (denoiser training keeps checkpoints).
    pub(super) fn resumes(&self) -> bool {
        matches!(self, TrainJob::Denoiser(_))
    }

    /// Runs the job on this rank; rank 0 stages and commits the run folder and streams events.
    /// With `resume_from` (a stopped denoiser run's folder, read on rank 0), the new folder starts
    /// with a copy of its checkpoint, the loss curve so far is streamed first, and training goes
    /// on from there.
    pub(super) fn run(
        &self,
        ctx: &JobContext<'_>,
        out: &RunDir,
        resume_from: Option<&Path>,
    ) -> Result<Outcome> {
        let job = ctx.job;
        let staging = match &ctx.coordinator {
            Some(c) => {
                c.hub.record(
                    job,
                    &Event::TrainStarted {
                        job,
                        name: self.name().to_string(),
                        world_size: ctx.group.get()?.world_size(),
                        devices: ctx.devices.to_vec(),
                        plan: self.plan(),
                    },
                );
                Some(Staging::create(out)?)
            }
            None => None,
        };
        // Only rank 0 writes; the others are given a folder they never touch.
        let out_dir = staging
            .as_ref()
            .map_or_else(|| PathBuf::from("."), |s| s.path().to_path_buf());
        if let (Some(from), Some(c)) = (resume_from, &ctx.coordinator) {
            checkpoint::copy(from, &out_dir)?;
            for point in &checkpoint::loss_curve(&out_dir)? {
                let point = point.into();
                c.hub.record(job, &Event::TrainStep { job, point });
            }
        }
        let control = crate::train::RunControl {
            stop_after: None,
            resume: resume_from.is_some(),
        };
        let cancelled = || {
            ctx.coordinator
                .as_ref()
                .is_some_and(|c| c.cancel.load(Ordering::SeqCst))
        };
        let group = ctx.group.get()?;
        let comm = group.as_ref();
        let base = Path::new("");
        let (stopped_early, steps, summary) = match self {
            TrainJob::Denoiser(p) => {
                let mut on_report = |point: &crate::train::LossPoint| {
                    if let Some(c) = &ctx.coordinator {
                        let point = point.into();
                        c.hub.record(job, &Event::TrainStep { job, point });
                    }
                    stop_if(cancelled())
                };
                let s = crate::train::train(p, base, &out_dir, comm, &control, &mut on_report)?;
                (s.stopped_early, s.steps, Summary::Denoiser(s))
            }
            TrainJob::Dsn(p) => {
                let mut on_epoch = |report: &crate::dsn::run::EpochReport| {
                    if let Some(c) = &ctx.coordinator {
                        let report = report.into();
                        c.hub.record(job, &Event::DsnEpoch { job, report });
                    }
                    stop_if(cancelled())
                };
                let s = crate::dsn::run::train(p, base, &out_dir, comm, &mut on_epoch)?;
                (s.stopped_early, s.epochs.len(), Summary::Dsn(s))
            }
        };
        let Some(staging) = staging else {
            return Ok(Outcome {
                stopped_early,
                steps,
                run_dir: PathBuf::new(),
                outputs: Vec::new(),
                summary_json: String::new(),
            });
        };
        let summary_json = summary.relative_to(staging.path())?;
        crate::io::write_atomic(
            &staging.path().join(crate::io::TRAIN_SUMMARY_FILE),
            summary_json.as_bytes(),
        )?;
        let outputs = files_under(staging.path())?;
        let run_dir = staging.commit(self.name())?;
        Ok(Outcome {
            stopped_early,
            steps,
            run_dir,
            outputs,
            summary_json,
        })
    }
}

fn stop_if(stop: bool) -> ControlFlow<()> {
    match stop {
        true => ControlFlow::Break(()),
        false => ControlFlow::Continue(()),
    }
}

enum Summary {
    Denoiser(TrainSummary),
    Dsn(DsnSummary),
}

impl Summary {
    /// `train.json` with the paths it names made relative to the run folder `dir`.
    fn relative_to(self, dir: &Path) -> Result<String> {
        let rel = |p: &Path| {
            p.strip_prefix(dir)
                .map_or_else(|_| p.to_path_buf(), Path::to_path_buf)
        };
        let json = match self {
            Summary::Denoiser(mut s) => {
                s.weights = rel(&s.weights);
                serde_json::to_string_pretty(&s)
            }
            Summary::Dsn(mut s) => {
                s.weights = rel(&s.weights);
                for r in &mut s.reconstructions {
                    *r = rel(r);
                }
                serde_json::to_string_pretty(&s)
            }
        };
        json.map_err(|e| Error::Internal(format!("train.json: {e}")))
    }
}

/// The files under `dir`, relative to it, sorted, `train.json` last (it marks a complete run).
fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    fn walk(root: &Path, here: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        let entries = std::fs::read_dir(here).map_err(|e| Error::io("listing", here, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("listing", here, e))?;
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    files.sort_by(|a, b| {
        (a == Path::new(crate::io::TRAIN_SUMMARY_FILE), a)
            .cmp(&(b == Path::new(crate::io::TRAIN_SUMMARY_FILE), b))
    });
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_presets_are_told_apart_from_imaging_and_fwi_presets() {
        let dsn = crate::dsn::run::BUNDLED[0].1;
        let train = crate::train::BUNDLED[0].1;
        let quick = include_str!("../../presets/quick.toml");
        assert!(matches!(TrainJob::parse(dsn), Ok(Some(TrainJob::Dsn(_)))));
        assert!(matches!(
            TrainJob::parse(train),
            Ok(Some(TrainJob::Denoiser(_)))
        ));
        assert!(matches!(TrainJob::parse(quick), Ok(None)));
        let fwi = include_str!("../../presets/fwi_marmousi.toml");
        assert!(matches!(TrainJob::parse(fwi), Ok(None)));
        // A broken training preset is an error naming the field, not "not a training preset".
        let bad = train.replace("steps = 400", "steps = 0");
        let e = TrainJob::parse(&bad).err().expect("steps = 0 is refused");
        assert!(e.to_string().contains("train.steps"), "{e}");
    }

    #[test]
    fn the_file_list_is_relative_sorted_and_ends_with_train_json() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("reconstructions")).unwrap();
        for f in ["train.json", "w.safetensors", "reconstructions/source.png"] {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        let files = files_under(dir.path()).unwrap();
        let want: Vec<PathBuf> = ["reconstructions/source.png", "w.safetensors", "train.json"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(files, want);
    }
}
