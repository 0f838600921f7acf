//! The study's tables as CSV: one line per run, rank and iteration, and one summary line per run.

use std::fmt::Write as _;

use super::runs::{Configuration, Run, scaling, times};
use crate::dist::profile::IterationProfile;
use crate::job::RankTimes;

fn csv_size(c: &Configuration) -> String {
    c.size.map_or(String::new(), |s| s.to_string())
}

fn csv_threads(r: &RankTimes) -> String {
    r.threads.to_string()
}

/// One line per run, rank and iteration.
pub fn rank_csv(runs: &[Run]) -> String {
    let mut s = String::from(
        "size,ranks,threads,rank,iteration,elapsed_s,gradient_s,gradient_comm_s,gradient_idle_s,gradient_bytes,\
         denoiser_s,denoiser_comm_s,denoiser_idle_s,denoiser_bytes,other_s,other_comm_s,other_idle_s,setup_s,setup_comm_s,setup_idle_s,peak_rss_bytes\n",
    );
    for run in runs {
        for r in &run.metrics.ranks {
            for it in &r.iterations {
                let _ = write!(
                    s,
                    "{},{},{},{},{},{:.6}",
                    csv_size(&run.config),
                    run.config.ranks,
                    csv_threads(r),
                    r.rank,
                    it.iteration,
                    it.elapsed_secs
                );
                for p in [&it.gradient, &it.denoiser] {
                    let _ = write!(
                        s,
                        ",{:.6},{:.6},{:.6},{}",
                        p.secs, p.communication_secs, p.idle_secs, p.bytes
                    );
                }
                let _ = writeln!(
                    s,
                    ",{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{}",
                    it.other.secs,
                    it.other.communication_secs,
                    it.other.idle_secs,
                    it.setup.secs,
                    it.setup.communication_secs,
                    it.setup.idle_secs,
                    it.peak_rss_bytes
                );
            }
        }
    }
    s
}

/// One line per run: times (slowest rank), speedup, efficiency, quality, memory.
pub fn summary_csv(runs: &[Run]) -> String {
    let mut s = String::from(
        "size,ranks,threads,iterations,total_s,gradient_s,denoiser_s,communication_s,idle_s,base_ranks,\
         speedup_total,speedup_gradient,speedup_denoiser,efficiency_total,efficiency_gradient,efficiency_denoiser,\
         psnr_db,peak_rss_bytes\n",
    );
    for (run, sc) in runs.iter().zip(scaling(runs)) {
        let m = &run.metrics;
        let t = times(m);
        let comm = m.slowest(IterationProfile::communication_secs);
        let idle = m.slowest(IterationProfile::idle_secs);
        let _ = writeln!(
            s,
            "{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{},{}",
            csv_size(&run.config),
            run.config.ranks,
            m.ranks.first().map_or(String::new(), csv_threads),
            m.ranks.first().map_or(0, |r| r.iterations.len()),
            t[0],
            t[1],
            t[2],
            comm,
            idle,
            sc.base_ranks,
            sc.speedup[0],
            sc.speedup[1],
            sc.speedup[2],
            sc.efficiency[0],
            sc.efficiency[1],
            sc.efficiency[2],
            m.psnr_db().map_or(String::new(), |p| format!("{p:.3}")),
            m.peak_rss_bytes()
        );
    }
    s
}
