//! Scaling studies: the runs of one preset at several rank counts (and image sizes, threads per
//! rank), read back from their `metrics.json`, tabulated as CSV and drawn as a report.
//!
//! [`study`] runs each configuration as real rank processes of the tessera binary (`tessera bench
//! scaling`) and reads the run folders back. Times come from the per-rank, per-iteration profiles
//! the job writes (`dist::profile`): a run's time for a component is the slowest rank's sum over
//! the iterations (the ranks meet at collectives every iteration, so the slowest one sets the
//! pace). Speedup is `t_base / t_N` against the configuration with the fewest ranks of the same
//! size and threads, efficiency `speedup / (N / N_base)`, as in deepinv's scaling study. The
//! performance model ([`performance`]) extends a study past this machine; the report shows its
//! figures beside the measured ones and labels which is which.
//!
//! The files, in the order the data flows: `runs` (what a study reads back), `csv` (its tables),
//! `figures`, `html` (one self-contained page), `report` (the reports as files).

pub mod performance;
pub mod study;

mod csv;
mod figures;
mod html;
mod report;
mod runs;

pub use csv::{rank_csv, summary_csv};
pub use figures::{Captioned, figures, patch_map_figure, run_figures};
pub use report::{write_report, write_run_report};
pub use runs::{Configuration, Run, RunMetrics, Scaling, scaling, size_overrides};

#[cfg(test)]
mod tests {
    use super::html::base64;
    use super::runs::HistoryIn;
    use super::*;
    use crate::dist::patch_map::TileCost;
    use crate::dist::profile::{IterationProfile, PhaseProfile};
    use crate::job::RankTimes;
    use crate::plot::{Colormap, palette};
    use crate::preset::Preset;

    #[test]
    fn base64_matches_rfc_4648() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
    }

    fn run(ranks: usize, gradient: &[f64], denoiser: &[f64]) -> Run {
        let rank = |r: usize| RankTimes {
            rank: r,
            operators: vec![],
            gradient_secs: 0.0,
            denoiser_secs: 0.0,
            communication_secs: 0.0,
            total_secs: 0.0,
            idle_secs: 0.0,
            threads: 1,
            peak_rss_bytes: 1 << 20,
            iterations: (1..=2)
                .map(|k| IterationProfile {
                    iteration: k,
                    elapsed_secs: k as f64 * (gradient[r] + denoiser[r]),
                    gradient: PhaseProfile {
                        secs: gradient[r],
                        ..Default::default()
                    },
                    denoiser: PhaseProfile {
                        secs: denoiser[r],
                        ..Default::default()
                    },
                    other: PhaseProfile::default(),
                    setup: PhaseProfile::default(),
                    peak_rss_bytes: 1 << 20,
                })
                .collect(),
        };
        Run {
            workload: None,
            config: Configuration {
                size: None,
                ranks,
                threads: None,
            },
            metrics: RunMetrics {
                name: "test".into(),
                image_shape: vec![1, 1, 64, 64],
                tiles: Vec::new(),
                devices: Vec::new(),
                world_size: ranks,
                solve_secs: 0.0,
                reconstruction: None,
                history: (1..=2)
                    .map(|k| HistoryIn {
                        iteration: k,
                        psnr_db: Some(20.0 + k as f64),
                    })
                    .collect(),
                ranks: (0..ranks).map(rank).collect(),
            },
        }
    }

    #[test]
    fn speedup_and_efficiency_follow_the_slowest_rank() {
        // 1 rank: 4 s gradient + 2 s denoiser per iteration. 2 ranks: the gradient halves on rank
        // 0 but rank 1 takes 3 s (imbalance), the denoiser halves on both.
        let runs = vec![run(1, &[4.0], &[2.0]), run(2, &[2.0, 3.0], &[1.0, 1.0])];
        let sc = scaling(&runs);
        assert_eq!(sc[0].speedup, [1.0, 1.0, 1.0]);
        assert_eq!(sc[1].base_ranks, 1);
        assert_eq!(sc[1].speedup, [12.0 / 8.0, 8.0 / 6.0, 2.0]);
        assert_eq!(sc[1].efficiency, [0.75, 8.0 / 12.0, 1.0]);
        let summary = summary_csv(&runs);
        assert_eq!(summary.lines().count(), 3);
        assert!(
            summary
                .lines()
                .nth(2)
                .unwrap()
                .starts_with(",2,1,2,8.000000,6.000000,2.000000,"),
            "{summary}"
        );
        let ranks = rank_csv(&runs);
        assert_eq!(
            ranks.lines().count(),
            1 + 2 + 2 * 2,
            "one line per rank and iteration"
        );
    }

    #[test]
    fn the_report_stands_alone() {
        let runs = vec![run(1, &[4.0], &[2.0]), run(2, &[2.0, 3.0], &[1.0, 1.0])];
        let dir = tempfile::tempdir().unwrap();
        let html =
            std::fs::read_to_string(write_report(&runs, "study <x>", dir.path(), None).unwrap())
                .unwrap();
        assert_eq!(html.matches("data:image/png;base64,").count(), 8);
        assert!(html.contains("study &lt;x&gt;"));
        for f in [
            "strong_scaling",
            "speedup",
            "efficiency",
            "breakdown",
            "iteration_times",
            "psnr_time",
            "psnr_iteration",
            "peak_memory",
        ] {
            assert!(dir.path().join(format!("{f}.png")).is_file(), "{f}");
        }
        assert!(dir.path().join("summary.csv").is_file());
    }

    #[test]
    fn the_patch_map_colours_tiles_by_measured_cost() {
        let mut r = run(2, &[1.0, 1.0], &[1.0, 1.0]);
        assert!(patch_map_figure(&r.metrics, "map").unwrap().is_none());
        // Four 32² tiles of a 64² image, 0.5 to 2 s per call.
        r.metrics.tiles = (0..4)
            .map(|i| TileCost {
                index: i,
                rank: i % 2,
                window: vec![((i / 2 * 32) as i64 - 4, 40), ((i % 2 * 32) as i64 - 4, 40)],
                region: vec![(i / 2 * 32, 32), (i % 2 * 32, 32)],
                secs: (i + 1) as f64,
                calls: 2,
            })
            .collect();
        let img = patch_map_figure(&r.metrics, "map").unwrap().unwrap();
        let count = |c: [u8; 3]| img.data.chunks(3).filter(|p| *p == c).count();
        // The colour bar runs from 0 to the dearest tile: the tiles of 0.5, 1, 1.5 and 2 s per call
        // take a quarter, half, three quarters and all of it (the colour bar only a few pixels of
        // each).
        for t in [0.25, 0.5, 0.75, 1.0] {
            let n = count(Colormap::Magma.map(t));
            assert!(n > 5000, "{n} pixels of the colour at {t}");
        }
        // Rank outlines in the ranks' colours.
        assert!(count(palette(0)) > 200 && count(palette(1)) > 200);
        let stems: Vec<String> = run_figures(std::slice::from_ref(&r))
            .unwrap()
            .into_iter()
            .map(|f| f.0)
            .collect();
        assert_eq!(
            stems.last().map(String::as_str),
            Some("patch_map"),
            "{stems:?}"
        );
    }

    #[test]
    fn a_run_report_names_the_file_that_is_not_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let e = write_run_report(&dir.path().join("nowhere"), dir.path()).unwrap_err();
        assert!(e.to_string().starts_with("no such run folder"), "{e}");
        let e = write_run_report(dir.path(), dir.path()).unwrap_err();
        assert!(e.to_string().contains("metrics.json"), "{e}");
        std::fs::write(dir.path().join("metrics.json"), "{\"world_size\": 1}").unwrap();
        let e = write_run_report(dir.path(), dir.path()).unwrap_err();
        assert!(e.to_string().contains("metrics.json"), "{e}");
        assert!(!dir.path().join("report.html").exists());
    }

    #[test]
    fn sizes_scale_the_image_and_the_blurs() {
        let preset = Preset::load("multiblur", &[]).unwrap().preset;
        let o = size_overrides(&preset, 512).unwrap();
        assert_eq!(o[0], "image.size=[342,512]");
        assert_eq!(o.len(), 1 + 8);
        assert_eq!(
            o[1],
            "physics.0.sigma=[5.119999885559082,2.559999942779541]"
        );
        let resized = Preset::load("multiblur", &o).unwrap().preset;
        assert_eq!(resized.image.size, Some(vec![342, 512]));
        let e = size_overrides(&preset, 4).unwrap_err();
        assert!(e.to_string().contains("--sizes"), "{e}");
    }
}
