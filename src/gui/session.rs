//! What the workbench knows about the backend and its jobs, built only from [`Event`]s.
//!
//! [`Session::apply`] is the single place where events change state, so tests can feed events and
//! check what the panels will draw. Events of a job other than the current one (a late preview of a
//! cancelled run) are dropped.

use std::path::PathBuf;
use std::sync::Arc;

use crate::protocol::{Event, JobId, LogLevel, OperatorInfo, PatchMap, RankIteration};

/// Where a job stands.
#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    Idle,
    /// Submitted, not yet accepted or started.
    Submitted,
    Running {
        job: JobId,
    },
    /// Stop was asked; the job's own final event decides between finished and stopped.
    Stopping {
        job: JobId,
    },
    Finished {
        job: JobId,
    },
    Failed {
        error: String,
    },
    Cancelled {
        job: JobId,
    },
}

/// One iteration as the plots need it.
#[derive(Debug, Clone, PartialEq)]
pub struct IterationPoint {
    pub iteration: usize,
    pub psnr_db: Option<f64>,
    pub objective: Option<f64>,
    pub ranks: Vec<RankIteration>,
}

/// A line of the log panel.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub level: LogLevel,
    pub text: String,
}

/// Backend description from its `Welcome`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BackendInfo {
    pub server: String,
    pub world_size: usize,
    pub devices: Vec<crate::protocol::RankDevice>,
    pub transport: crate::dist::Transport,
}

/// Per-rank totals over a run, for the summary table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RankTotals {
    pub rank: usize,
    pub gradient_secs: f64,
    pub denoiser_secs: f64,
    pub communication_secs: f64,
    pub iterations: usize,
}

/// The state the panels draw.
#[derive(Debug, Default)]
pub struct Session {
    pub connected: bool,
    pub backend: Option<BackendInfo>,
    pub state: JobStateCell,
    pub job_name: String,
    pub iterations_planned: usize,
    pub image_shape: Vec<usize>,
    pub operators: Vec<OperatorInfo>,
    pub patch_map: Option<Arc<PatchMap>>,
    pub history: Vec<IterationPoint>,
    pub outputs: Vec<PathBuf>,
    pub summary_json: Option<String>,
    pub log: Vec<LogLine>,
    /// After a remote attach: adopt the next job that starts (the server replays the running one).
    pub adopt_next_job: bool,
    /// The newest error, shown in a banner until dismissed.
    pub error: Option<String>,
}

/// [`JobState`] with a default.
#[derive(Debug, Clone, PartialEq)]
pub struct JobStateCell(pub JobState);

impl Default for JobStateCell {
    fn default() -> Self {
        JobStateCell(JobState::Idle)
    }
}

/// Lines kept in the log panel.
const MAX_LOG_LINES: usize = 2000;

impl Session {
    pub fn state(&self) -> &JobState {
        &self.state.0
    }

    /// The job whose events are drawn.
    pub fn current_job(&self) -> Option<JobId> {
        match self.state.0 {
            JobState::Running { job }
            | JobState::Stopping { job }
            | JobState::Finished { job }
            | JobState::Cancelled { job } => Some(job),
            _ => None,
        }
    }

    pub fn is_busy(&self) -> bool {
        matches!(
            self.state.0,
            JobState::Submitted | JobState::Running { .. } | JobState::Stopping { .. }
        )
    }

    pub fn log(&mut self, level: LogLevel, text: impl Into<String>) {
        let text = text.into();
        if level == LogLevel::Error {
            self.error = Some(text.clone());
        }
        self.log.push(LogLine { level, text });
        if self.log.len() > MAX_LOG_LINES {
            let excess = self.log.len() - MAX_LOG_LINES;
            self.log.drain(..excess);
        }
    }

    /// A new run was submitted: forget the previous one's curves.
    pub fn submitted(&mut self) {
        self.adopt_next_job = false;
        self.state = JobStateCell(JobState::Submitted);
        self.history.clear();
        self.outputs.clear();
        self.summary_json = None;
        self.patch_map = None;
        self.error = None;
    }

    /// The connection is gone; a running job is lost with it.
    pub fn disconnected(&mut self, reason: &str) {
        self.connected = false;
        if self.is_busy() {
            self.state = JobStateCell(JobState::Failed {
                error: format!("the backend went away: {reason}"),
            });
        }
        self.log(LogLevel::Error, format!("backend disconnected: {reason}"));
    }

    /// Whether an event belongs to the current job (or the job just submitted).
    fn is_current(&self, job: JobId) -> bool {
        match self.state.0 {
            JobState::Submitted => true,
            _ => self.current_job() == Some(job),
        }
    }

    /// Applies one event. Previews are handled by the preview pump, not here.
    pub fn apply(&mut self, event: Event) {
        match event {
            Event::Welcome {
                server,
                world_size,
                devices,
                backend,
                ..
            } => {
                self.connected = true;
                self.log(
                    LogLevel::Info,
                    format!("connected to {server}: {world_size} rank(s) over {backend}"),
                );
                self.backend = Some(BackendInfo {
                    server,
                    world_size,
                    devices,
                    transport: backend,
                });
            }
            Event::Refused { reason } => {
                self.connected = false;
                self.log(
                    LogLevel::Error,
                    format!("the backend refused the connection: {reason}"),
                );
            }
            Event::Accepted { job } => {
                if self.state.0 == JobState::Submitted {
                    self.state = JobStateCell(JobState::Running { job });
                }
            }
            Event::Started {
                job,
                name,
                image_shape,
                operators,
                iterations,
                patch_map,
                world_size,
                ..
            } => {
                if !self.is_current(job) && !std::mem::take(&mut self.adopt_next_job) {
                    return;
                }
                if self.state.0 != (JobState::Stopping { job }) {
                    self.state = JobStateCell(JobState::Running { job });
                }
                self.log(
                    LogLevel::Info,
                    format!(
                        "job {job} ({name}) started: {} operator(s) on {image_shape:?}, {world_size} rank(s)",
                        operators.len()
                    ),
                );
                self.job_name = name;
                self.image_shape = image_shape;
                self.operators = operators;
                self.iterations_planned = iterations;
                self.patch_map = patch_map.map(Arc::new);
                self.history.clear();
            }
            Event::Iteration { job, report, ranks } => {
                if !self.is_current(job) {
                    return;
                }
                self.history.push(IterationPoint {
                    iteration: report.iteration,
                    psnr_db: report.psnr_db,
                    objective: report.objective,
                    ranks,
                });
            }
            Event::Preview { .. } => {}
            Event::Log {
                level,
                rank,
                message,
            } => {
                let text = match rank {
                    Some(r) => format!("[rank {r}] {message}"),
                    None => message,
                };
                self.log(level, text);
            }
            Event::Finished {
                job,
                run_dir,
                outputs,
                summary_json,
            } => {
                if !self.is_current(job) {
                    return;
                }
                // The server's word is final: a Stop that came after the last iteration did not
                // stop anything.
                self.state = JobStateCell(JobState::Finished { job });
                self.log(
                    LogLevel::Info,
                    format!(
                        "job {job} finished; {} output file(s) in {}",
                        outputs.len(),
                        run_dir.display()
                    ),
                );
                self.outputs = outputs.iter().map(|o| run_dir.join(o)).collect();
                self.summary_json = Some(summary_json);
            }
            Event::Cancelled {
                job,
                iterations,
                run_dir,
                outputs,
                summary_json,
            } => {
                if !self.is_current(job) {
                    return;
                }
                self.state = JobStateCell(JobState::Cancelled { job });
                self.log(
                    LogLevel::Info,
                    format!("job {job} cancelled after {iterations} iteration(s)"),
                );
                if let Some(dir) = run_dir {
                    self.outputs = outputs.iter().map(|o| dir.join(o)).collect();
                }
                self.summary_json = summary_json;
            }
            Event::Failed { job, error } => {
                if let Some(job) = job
                    && !self.is_current(job)
                {
                    return;
                }
                if self.is_busy() {
                    self.state = JobStateCell(JobState::Failed {
                        error: error.clone(),
                    });
                }
                self.log(LogLevel::Error, format!("job failed: {error}"));
            }
            Event::Status { .. } | Event::File { .. } | Event::FetchFailed { .. } => {}
        }
    }

    /// The user asked to stop the current job (its final event says how it ended).
    pub fn stopping(&mut self) {
        if let JobState::Running { job } = self.state.0 {
            self.state = JobStateCell(JobState::Stopping { job });
        }
    }

    /// Forgets the last run's results (a new preset was opened): curves, patch map, outputs.
    pub fn clear_run(&mut self) {
        if !self.is_busy() {
            self.state = JobStateCell(JobState::Idle);
        }
        self.history.clear();
        self.outputs.clear();
        self.summary_json = None;
        self.patch_map = None;
        self.operators.clear();
        self.image_shape.clear();
    }

    /// PSNR of the newest iteration that has one.
    pub fn latest_psnr(&self) -> Option<f64> {
        self.history.iter().rev().find_map(|p| p.psnr_db)
    }

    /// Per-rank sums over the iterations so far, by rank.
    pub fn rank_totals(&self) -> Vec<RankTotals> {
        let mut totals: Vec<RankTotals> = Vec::new();
        for p in &self.history {
            for r in &p.ranks {
                if totals.len() <= r.rank {
                    totals.resize_with(r.rank + 1, Default::default);
                }
                let t = &mut totals[r.rank];
                t.rank = r.rank;
                t.gradient_secs += r.gradient_secs;
                t.denoiser_secs += r.denoiser_secs;
                t.communication_secs += r.communication_secs;
                t.iterations += 1;
            }
        }
        totals.retain(|t| t.iterations > 0);
        totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{ComponentTimes, IterationReport};

    fn iteration(job: JobId, k: usize, psnr: f64) -> Event {
        Event::Iteration {
            job,
            report: IterationReport {
                iteration: k,
                iterations: 3,
                psnr_db: Some(psnr),
                ssim: None,
                objective: None,
                relative_change: 0.1,
                times: ComponentTimes::default(),
            },
            ranks: (0..2)
                .map(|rank| RankIteration {
                    rank,
                    gradient_secs: 0.5,
                    denoiser_secs: 0.25,
                    communication_secs: 0.125,
                })
                .collect(),
        }
    }

    #[test]
    fn events_of_other_jobs_are_dropped() {
        let mut s = Session::default();
        s.submitted();
        s.apply(Event::Accepted { job: 2 });
        s.apply(iteration(2, 1, 20.0));
        s.apply(iteration(1, 5, 99.0)); // a late event of an older job
        assert_eq!(s.history.len(), 1);
        assert_eq!(s.latest_psnr(), Some(20.0));
        s.apply(iteration(2, 2, 21.0));
        let totals = s.rank_totals();
        assert_eq!(totals.len(), 2);
        assert_eq!(totals[1].gradient_secs, 1.0);
        assert_eq!(totals[1].iterations, 2);
        s.apply(Event::Finished {
            job: 2,
            run_dir: "/tmp/run".into(),
            outputs: vec![],
            summary_json: "{}".into(),
        });
        assert_eq!(s.state(), &JobState::Finished { job: 2 });
    }

    #[test]
    fn a_dead_backend_fails_the_running_job_and_shows_an_error() {
        let mut s = Session::default();
        s.submitted();
        s.apply(Event::Accepted { job: 1 });
        s.disconnected("broken pipe");
        assert!(matches!(s.state(), JobState::Failed { .. }));
        assert!(s.error.as_deref().unwrap().contains("broken pipe"));
        assert!(!s.is_busy());
    }
}
