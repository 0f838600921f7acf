//! A scaling study run here: every configuration of a preset (rank count × image size × threads
//! per rank) as a `tessera run … --ranks N` process group of the tessera binary, one after the
//! other so they do not compete for the cores, each into its own folder `OUT/runs/<slug>`, then read
//! back as a [`Run`]. The caller names the binary (`tessera bench scaling` passes its own), and
//! turns the runs into the report (`super::write_report`).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::performance::Workload;
use super::{Configuration, Run, RunMetrics, size_overrides};
use crate::error::{Error, Result};
use crate::preset::Preset;

/// What a study runs.
#[derive(Debug, Clone, Default)]
pub struct StudySpec {
    /// Bundled preset name or TOML file, as `tessera run` takes it.
    pub preset: String,
    /// `--set` overrides for every run.
    pub overrides: Vec<String>,
    /// Rank counts, each at least 1.
    pub ranks: Vec<usize>,
    /// Longest image sides (the sample and its blur widths scaled); empty: the preset's size.
    pub sizes: Vec<usize>,
    /// Threads per rank; empty: the default placement (cores / local ranks).
    pub threads_per_rank: Vec<usize>,
    /// The study's folder; `None`: `out/scaling-<preset name>`.
    pub out: Option<PathBuf>,
}

/// Where a study is, for the caller to show.
#[derive(Debug)]
pub enum StudyProgress<'a> {
    /// Configuration `index` (from 0) of `total` starts, writing into `dir`.
    Starting {
        index: usize,
        total: usize,
        config: &'a Configuration,
        dir: &'a Path,
    },
    /// A configuration finished with these metrics.
    Finished {
        config: &'a Configuration,
        metrics: &'a RunMetrics,
    },
    /// The performance model has no workload for this run (it is still measured and reported).
    NoModel {
        config: &'a Configuration,
        error: &'a Error,
    },
}

/// A finished study: the preset's name, the folder it wrote, and its runs in order.
#[derive(Debug)]
pub struct Study {
    pub name: String,
    pub out: PathBuf,
    pub runs: Vec<Run>,
}

/// Runs every configuration of `spec` as a process group of `exe` (the tessera binary). Every
/// configuration is checked (rank and thread counts, the resized presets) before the first run
/// starts; a run that fails stops the study.
pub fn run(
    exe: &Path,
    spec: &StudySpec,
    mut progress: impl FnMut(StudyProgress<'_>),
) -> Result<Study> {
    let loaded = Preset::load(&spec.preset, &spec.overrides)?;
    let preset = &loaded.preset;
    if spec.ranks.is_empty() || spec.ranks.contains(&0) {
        return Err(Error::config(
            "--ranks",
            "give rank counts of at least 1, e.g. --ranks 1,2",
        ));
    }
    if let Some(n) = (1..spec.ranks.len()).find_map(|i| {
        let n = spec.ranks[i];
        spec.ranks[..i].contains(&n).then_some(n)
    }) {
        return Err(Error::config(
            "--ranks",
            format!("{n} is given twice; give each rank count once"),
        ));
    }
    for &t in &spec.threads_per_rank {
        crate::dist::placement::check_threads("--threads-per-rank", t)?;
    }
    let axis = |values: &[usize]| -> Vec<Option<usize>> {
        match values {
            [] => vec![None],
            given => given.iter().copied().map(Some).collect(),
        }
    };
    let mut configs = Vec::new();
    for size in axis(&spec.sizes) {
        // Resize once per size: a bad size fails before any run starts.
        let resize = match size {
            Some(s) => size_overrides(preset, s)?,
            None => Vec::new(),
        };
        // Inputs and memory of every configuration, before the first one runs: a size or rank
        // count too large would otherwise be found only after the earlier runs.
        let overrides: Vec<String> = spec.overrides.iter().chain(&resize).cloned().collect();
        let sized = Preset::load(&spec.preset, &overrides)?;
        for &ranks in &spec.ranks {
            crate::job::check_inputs(&sized.preset, &[], ranks, ranks).map_err(|e| {
                let size = size.map_or("the preset's size".into(), |s| format!("size {s}"));
                for_configuration(e, &format!("{size} on {ranks} rank(s)"))
            })?;
        }
        for threads in axis(&spec.threads_per_rank) {
            for &ranks in &spec.ranks {
                let config = Configuration {
                    size,
                    ranks,
                    threads,
                };
                configs.push((config, resize.clone()));
            }
        }
    }
    let out = spec
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(format!("scaling-{}", preset.name)));
    let total = configs.len();
    let mut runs = Vec::with_capacity(total);
    for (index, (config, resize)) in configs.into_iter().enumerate() {
        let dir = out.join("runs").join(config.slug());
        progress(StudyProgress::Starting {
            index,
            total,
            config: &config,
            dir: &dir,
        });
        let overrides: Vec<String> = spec.overrides.iter().chain(&resize).cloned().collect();
        let mut cmd = Command::new(exe);
        cmd.args(["run", &spec.preset, "--quiet", "--ranks"])
            .arg(config.ranks.to_string())
            .arg("--out")
            .arg(&dir);
        for o in &overrides {
            cmd.args(["--set", o]);
        }
        if let Some(t) = config.threads {
            cmd.args(["--threads-per-rank", &t.to_string()]);
        }
        let status = cmd
            .status()
            .map_err(|e| Error::io("starting a run of the scaling study", exe, e))?;
        if !status.success() {
            return Err(Error::ChildFailed {
                what: format!("run {}", config.slug()),
                reason: format!(
                    "{status}; its output is above, its folder {}",
                    dir.display()
                ),
            });
        }
        let metrics = RunMetrics::load(&dir)?;
        progress(StudyProgress::Finished {
            config: &config,
            metrics: &metrics,
        });
        let workload = match Preset::load(&spec.preset, &overrides)
            .and_then(|p| Workload::of_preset(&p.preset))
        {
            Ok(w) => Some(w),
            Err(error) => {
                progress(StudyProgress::NoModel {
                    config: &config,
                    error: &error,
                });
                None
            }
        };
        runs.push(Run {
            config,
            metrics,
            workload,
        });
    }
    Ok(Study {
        name: preset.name.clone(),
        out,
        runs,
    })
}

/// `e`, found checking one configuration, saying which one where its message would not.
fn for_configuration(e: Error, which: &str) -> Error {
    match e {
        Error::InvalidConfig { field, reason } => {
            Error::config(field, format!("{reason} ({which})"))
        }
        Error::InsufficientMemory {
            needed_bytes,
            available_bytes,
            detail,
        } => Error::InsufficientMemory {
            needed_bytes,
            available_bytes,
            detail: format!("{detail}; {which}"),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(out: &Path) -> StudySpec {
        StudySpec {
            preset: "quick".into(),
            ranks: vec![1, 2],
            out: Some(out.to_path_buf()),
            ..StudySpec::default()
        }
    }

    #[test]
    fn a_run_that_fails_stops_the_study_and_names_its_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let mut started = Vec::new();
        let e = run(Path::new("/bin/false"), &spec(dir.path()), |p| {
            if let StudyProgress::Starting { config, .. } = p {
                started.push(config.slug());
            }
        })
        .unwrap_err();
        assert!(
            matches!(&e, Error::ChildFailed { what, .. } if what == "run n1"),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains(&dir.path().join("runs/n1").display().to_string()),
            "{e}"
        );
        assert_eq!(started, ["n1"]);
    }

    #[test]
    fn a_missing_binary_or_bad_counts_fail_before_any_run() {
        let dir = tempfile::tempdir().unwrap();
        let e = run(Path::new("/nonexistent/tessera"), &spec(dir.path()), |_| {}).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        let mut bad = spec(dir.path());
        bad.ranks = vec![1, 0];
        let e = run(Path::new("/bin/false"), &bad, |_| panic!("nothing starts")).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidConfig { field, .. } if field == "--ranks"),
            "{e}"
        );
    }
}
