//! Thread placement: how many compute threads each rank process starts.
//!
//! Ranks on one host share its cores. Without a choice every rank would start a thread per core
//! (rayon's default), so `N` local ranks would run `N × cores` threads on `cores` cores and
//! slow each other down (measured on a tiled DRUNet 1024² iteration: 2 ranks × 2 threads 63.9 s
//! against 2 ranks × 1 thread 59.9 s). The default is therefore `cores / local ranks` threads per
//! rank (at least one), as torchrun's one OpenMP thread per rank; `--threads-per-rank` or the
//! preset's `[distributed] threads_per_rank` override it. The choice is logged and recorded in
//! `metrics.json`.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The most threads a rank may be given (a typo guard, far above any machine's cores).
pub const MAX_THREADS_PER_RANK: usize = 1024;

/// Where the thread count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadSource {
    /// `--threads-per-rank`.
    Flag,
    /// `[distributed] threads_per_rank`.
    Preset,
    /// Cores divided by the ranks on this host.
    Default,
}

/// How many threads this rank runs, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub threads_per_rank: usize,
    /// Cores this process may use (affinity and cgroup limits included).
    pub cores: usize,
    /// Ranks on this host.
    pub local_ranks: usize,
    pub source: ThreadSource,
}

/// Fails unless `1 ≤ threads ≤ MAX_THREADS_PER_RANK`; `field` names the setting.
pub fn check_threads(field: &str, threads: usize) -> Result<()> {
    if threads == 0 || threads > MAX_THREADS_PER_RANK {
        return Err(Error::config(
            field,
            format!("must be between 1 and {MAX_THREADS_PER_RANK}, got {threads}"),
        ));
    }
    Ok(())
}

/// Cores this process may run on.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Placement {
    /// The flag wins over the preset, the preset over the default `cores / local_ranks`.
    pub fn choose(
        local_ranks: usize,
        cores: usize,
        flag: Option<usize>,
        preset: Option<usize>,
    ) -> Result<Placement> {
        let local_ranks = local_ranks.max(1);
        let cores = cores.max(1);
        let (threads_per_rank, source) = match (flag, preset) {
            (Some(t), _) => {
                check_threads("--threads-per-rank", t)?;
                (t, ThreadSource::Flag)
            }
            (None, Some(t)) => {
                check_threads("distributed.threads_per_rank", t)?;
                (t, ThreadSource::Preset)
            }
            (None, None) => ((cores / local_ranks).max(1), ThreadSource::Default),
        };
        Ok(Placement {
            threads_per_rank,
            cores,
            local_ranks,
            source,
        })
    }

    /// Threads of all local ranks together, against the cores they share.
    pub fn oversubscribed(&self) -> bool {
        self.threads_per_rank * self.local_ranks > self.cores
    }

    /// Sets the size of this process's global thread pool. The pool can be sized once per process:
    /// if something already started it with another size, that is an error naming both.
    pub fn apply(&self) -> Result<()> {
        let built = rayon::ThreadPoolBuilder::new()
            .num_threads(self.threads_per_rank)
            .build_global();
        let running = rayon::current_num_threads();
        match built {
            Ok(()) => Ok(()),
            Err(_) if running == self.threads_per_rank => Ok(()),
            Err(e) => Err(Error::Unsupported(format!(
                "cannot give this rank {} threads: its thread pool already runs {running} ({e})",
                self.threads_per_rank
            ))),
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.source {
            ThreadSource::Flag => "--threads-per-rank",
            ThreadSource::Preset => "preset distributed.threads_per_rank",
            ThreadSource::Default => "default: cores / local ranks",
        };
        write!(
            f,
            "{} local rank(s) × {} thread(s) on {} core(s) ({why})",
            self.local_ranks, self.threads_per_rank, self.cores
        )?;
        if self.oversubscribed() {
            write!(
                f,
                "; oversubscribed: {} threads share {} cores",
                self.threads_per_rank * self.local_ranks,
                self.cores
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_share_the_cores_unless_told_otherwise() {
        let p = Placement::choose(2, 8, None, None).unwrap();
        assert_eq!((p.threads_per_rank, p.source), (4, ThreadSource::Default));
        assert!(!p.oversubscribed());
        // More ranks than cores: one thread each, and the log says they are oversubscribed.
        let p = Placement::choose(3, 2, None, None).unwrap();
        assert_eq!(p.threads_per_rank, 1);
        assert!(
            p.to_string()
                .contains("oversubscribed: 3 threads share 2 cores"),
            "{p}"
        );
        let p = Placement::choose(2, 2, None, Some(2)).unwrap();
        assert_eq!((p.threads_per_rank, p.source), (2, ThreadSource::Preset));
        assert!(
            p.to_string()
                .contains("preset distributed.threads_per_rank")
        );
        let p = Placement::choose(2, 2, Some(1), Some(2)).unwrap();
        assert_eq!((p.threads_per_rank, p.source), (1, ThreadSource::Flag));
        assert_eq!(
            p.to_string(),
            "2 local rank(s) × 1 thread(s) on 2 core(s) (--threads-per-rank)"
        );
    }

    #[test]
    fn absurd_counts_name_their_setting() {
        let e = Placement::choose(1, 2, Some(0), None).unwrap_err();
        assert!(e.to_string().contains("--threads-per-rank"), "{e}");
        let e = Placement::choose(1, 2, None, Some(100_000)).unwrap_err();
        assert!(
            e.to_string().contains("distributed.threads_per_rank"),
            "{e}"
        );
    }
}
