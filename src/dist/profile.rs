//! Per-rank, per-iteration profiles of a run: for each phase of an iteration (gradient, denoiser,
//! other) the wall time, the time spent moving data in collectives, the time spent idle at a
//! collective waiting for the last rank to arrive, the bytes this rank contributed; and the peak
//! resident memory of the iteration.
//!
//! Flow: the job wraps its collective in a [`TimedCollective`] (which logs every call) and starts a
//! [`Profiler`]; the profiler estimates this rank's clock offset from rank 0 (ping-pong, the sample
//! with the shortest round trip, as in Cristian's algorithm; on one host the offset is ≈ 0), marks
//! the end of every iteration, and at the end all-gathers every rank's log. Idle time is then
//! computed from the logs of all ranks: the `k`-th collective call is the same operation on every
//! rank, so rank `r` waited `max_s(entry_s[k]) − entry_r[k]` for the last arrival (at most the call's
//! duration); the rest of the call moved data. A receive waited until its matching send started.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::collective::Collective;
use super::timed::{CallKind, CallRecord, Phase, TimedCollective, monotonic_ns};
use crate::error::Result;
use crate::optim::ComponentTimes;

/// Round trips used to estimate a rank's clock offset.
const CLOCK_SAMPLES: usize = 5;

/// One phase of one iteration on one rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseProfile {
    /// Wall time of the phase (communication and idle included).
    pub secs: f64,
    /// Time in collectives and messages moving data.
    pub communication_secs: f64,
    /// Time in collectives waiting for the last rank to arrive (or in a receive waiting for the
    /// sender).
    pub idle_secs: f64,
    /// Bytes this rank contributed to the phase's collectives and messages.
    pub bytes: u64,
}

impl PhaseProfile {
    /// Time computing: the wall time less communication and idle.
    pub fn compute_secs(&self) -> f64 {
        (self.secs - self.communication_secs - self.idle_secs).max(0.0)
    }
}

/// One iteration on one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationProfile {
    /// 1-based.
    pub iteration: usize,
    /// Seconds from the start of the solve to the end of this iteration, on this rank.
    pub elapsed_secs: f64,
    pub gradient: PhaseProfile,
    pub denoiser: PhaseProfile,
    /// The rest of the iteration: updates, metrics, per-iteration bookkeeping of the caller.
    pub other: PhaseProfile,
    /// The algorithm's set-up before its first iteration (e.g. the power method for the step
    /// size); only the first iteration has one.
    #[serde(default)]
    pub setup: PhaseProfile,
    /// Peak resident memory of the process during the iteration (bytes); since the start of the
    /// process where the peak cannot be reset.
    pub peak_rss_bytes: u64,
}

impl IterationProfile {
    pub fn total_secs(&self) -> f64 {
        self.gradient.secs + self.denoiser.secs + self.other.secs + self.setup.secs
    }
    pub fn communication_secs(&self) -> f64 {
        self.gradient.communication_secs
            + self.denoiser.communication_secs
            + self.other.communication_secs
            + self.setup.communication_secs
    }
    pub fn idle_secs(&self) -> f64 {
        self.gradient.idle_secs
            + self.denoiser.idle_secs
            + self.other.idle_secs
            + self.setup.idle_secs
    }
}

/// One iteration as this rank saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Mark {
    /// Calls logged by the end of the iteration.
    calls: usize,
    /// When the iteration began: the end of the previous one, or the start of the solve (so the
    /// iterations' times add up to the solve's).
    start_ns: u64,
    /// When the algorithm's work on the iteration began (its reported times back from the
    /// callback); in the first iteration, what comes before it is the algorithm's set-up.
    work_start_ns: u64,
    /// When the caller's per-iteration bookkeeping ended.
    end_ns: u64,
    gradient_secs: f64,
    denoiser_secs: f64,
    peak_rss_bytes: u64,
}

/// What each rank sends at the end: its clock offset, its call log and its iteration marks.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RankLog {
    /// Rank 0's clock minus this rank's, nanoseconds.
    offset_ns: i64,
    start_ns: u64,
    calls: Vec<CallRecord>,
    marks: Vec<Mark>,
}

/// Collects one rank's profile during a solve; [`Profiler::finish`] combines all ranks.
pub struct Profiler {
    timed: Arc<TimedCollective>,
    offset_ns: i64,
    start_calls: usize,
    start_ns: u64,
    marks: Vec<Mark>,
    /// Whether the kernel lets this process reset its peak-memory mark (Linux ≥ 4.0).
    peak_resets: bool,
}

impl Profiler {
    /// Starts profiling the solve (every rank calls this at the same point: it exchanges messages
    /// with rank 0 to estimate the clock offset). Following calls count as the first gradient step.
    pub fn start(timed: Arc<TimedCollective>) -> Result<Profiler> {
        timed.set_phase(Phase::Other);
        let offset_ns = clock_offset_ns(timed.as_ref())?;
        let peak_resets = reset_peak_rss();
        timed.set_phase(Phase::Gradient);
        Ok(Profiler {
            start_calls: timed.calls(),
            timed,
            offset_ns,
            start_ns: monotonic_ns(),
            marks: Vec::new(),
            peak_resets,
        })
    }

    /// Marks the end of an iteration whose algorithm-side times are `times`. Call it first thing
    /// in the iteration callback; call [`Profiler::next_iteration`] when the callback is done.
    pub fn iteration_done(&mut self, times: &ComponentTimes) {
        self.timed.set_phase(Phase::Other);
        let now = monotonic_ns();
        let start_ns = self.marks.last().map_or(self.start_ns, |m| m.end_ns);
        let work = times.gradient_secs + times.denoiser_secs + times.other_secs;
        self.marks.push(Mark {
            calls: self.timed.calls(),
            start_ns,
            work_start_ns: now.saturating_sub((work * 1e9) as u64).max(start_ns),
            end_ns: now,
            gradient_secs: times.gradient_secs,
            denoiser_secs: times.denoiser_secs,
            peak_rss_bytes: peak_rss_bytes().unwrap_or(0),
        });
        if self.peak_resets {
            self.peak_resets = reset_peak_rss();
        }
    }

    /// The per-iteration bookkeeping is over: the next calls belong to the next gradient step.
    /// (The calls made in between count as the finished iteration's "other" phase.)
    pub fn next_iteration(&mut self) {
        if let Some(m) = self.marks.last_mut() {
            m.calls = self.timed.calls();
            m.end_ns = monotonic_ns();
        }
        self.timed.set_phase(Phase::Gradient);
    }

    /// Gathers every rank's log and returns the profiles of all ranks (index = rank), on every rank.
    pub fn finish(self) -> Result<Vec<Vec<IterationProfile>>> {
        let mine = self.log();
        let logs = super::wire::all_gather_as(self.timed.as_ref(), "call log", &mine)?;
        Ok(profiles(&logs))
    }

    /// This rank's profile alone, when its group failed and its peers' logs cannot be gathered (an
    /// elastic run's lost generation): the time waited at collectives counts as communication, as
    /// no peer's entry time says how much of it was idle.
    pub fn finish_alone(self) -> Vec<IterationProfile> {
        profiles(std::slice::from_ref(&self.log()))
            .pop()
            .unwrap_or_default()
    }

    fn log(&self) -> RankLog {
        self.timed.set_phase(Phase::Other);
        RankLog {
            offset_ns: self.offset_ns,
            start_ns: self.start_ns,
            calls: self.timed.calls_since(self.start_calls),
            marks: self
                .marks
                .iter()
                .map(|m| Mark {
                    calls: m.calls - self.start_calls,
                    ..m.clone()
                })
                .collect(),
        }
    }
}

/// Per-rank profiles from every rank's log.
fn profiles(logs: &[RankLog]) -> Vec<Vec<IterationProfile>> {
    let idle = idle_per_call(logs);
    logs.iter()
        .zip(&idle)
        .map(|(log, idle)| {
            let mut out = Vec::with_capacity(log.marks.len());
            let mut first_call = 0;
            for (k, m) in log.marks.iter().enumerate() {
                let calls = first_call..m.calls.min(log.calls.len());
                let mut p = IterationProfile {
                    iteration: k + 1,
                    elapsed_secs: m.end_ns.saturating_sub(log.start_ns) as f64 * 1e-9,
                    peak_rss_bytes: m.peak_rss_bytes,
                    ..Default::default()
                };
                p.gradient.secs = m.gradient_secs;
                p.denoiser.secs = m.denoiser_secs;
                let wall = m.end_ns.saturating_sub(m.start_ns) as f64 * 1e-9;
                let setup_end = if k == 0 { m.work_start_ns } else { m.start_ns };
                p.setup.secs = setup_end.saturating_sub(m.start_ns) as f64 * 1e-9;
                p.other.secs = (wall - m.gradient_secs - m.denoiser_secs - p.setup.secs).max(0.0);
                for c in calls.clone() {
                    let call = &log.calls[c];
                    let phase = match call.phase {
                        _ if call.start_ns < setup_end => &mut p.setup,
                        Phase::Gradient => &mut p.gradient,
                        Phase::Denoiser => &mut p.denoiser,
                        Phase::Other => &mut p.other,
                    };
                    let waited = idle[c].min(call.secs());
                    phase.idle_secs += waited;
                    phase.communication_secs += call.secs() - waited;
                    phase.bytes += call.bytes;
                }
                out.push(p);
                first_call = calls.end;
            }
            out
        })
        .collect()
}

/// Seconds each call of each rank waited for its peers (index = rank, then call).
fn idle_per_call(logs: &[RankLog]) -> Vec<Vec<f64>> {
    // Entry times on rank 0's clock.
    let entry = |r: usize, c: &CallRecord| c.start_ns as i128 + logs[r].offset_ns as i128;
    let mut idle: Vec<Vec<f64>> = logs.iter().map(|l| vec![0.0; l.calls.len()]).collect();
    // Collectives: the k-th collective call of every rank is the same operation.
    let collectives: Vec<Vec<usize>> = logs
        .iter()
        .map(|l| {
            (0..l.calls.len())
                .filter(|&i| l.calls[i].kind.is_collective())
                .collect()
        })
        .collect();
    let rounds = collectives.iter().map(Vec::len).min().unwrap_or(0);
    for k in 0..rounds {
        let kind = logs[0].calls[collectives[0][k]].kind;
        if (0..logs.len()).any(|r| logs[r].calls[collectives[r][k]].kind != kind) {
            tracing::warn!(
                call = k,
                "ranks disagree on the kind of collective call {k}: idle time not attributed from here on"
            );
            break;
        }
        let last = (0..logs.len())
            .map(|r| entry(r, &logs[r].calls[collectives[r][k]]))
            .max()
            .unwrap_or(0);
        for (r, calls) in collectives.iter().enumerate() {
            let i = calls[k];
            idle[r][i] = ((last - entry(r, &logs[r].calls[i])).max(0) as f64) * 1e-9;
        }
    }
    // Receives: the j-th receive from `a` matches the j-th send from `a` to this rank.
    for (b, log) in logs.iter().enumerate() {
        let mut seen = vec![0usize; logs.len()];
        for (i, c) in log.calls.iter().enumerate() {
            let CallKind::Recv { from } = c.kind else {
                continue;
            };
            let Some(sender) = logs.get(from) else {
                continue;
            };
            let j = seen[from];
            seen[from] += 1;
            let send = sender
                .calls
                .iter()
                .filter(|s| s.kind == CallKind::Send { to: b })
                .nth(j);
            if let Some(s) = send {
                idle[b][i] = ((entry(from, s) - entry(b, c)).max(0) as f64) * 1e-9;
            }
        }
    }
    idle
}

/// This rank's clock offset from rank 0 (rank 0's clock minus this one's), in nanoseconds: rank 0
/// answers [`CLOCK_SAMPLES`] time requests of every other rank in turn over point-to-point messages;
/// the answer with the shortest round trip gives `t₀ − (t_send + t_receive)/2`.
pub fn clock_offset_ns(comm: &dyn Collective) -> Result<i64> {
    let (rank, world) = (comm.rank(), comm.world_size());
    if world == 1 {
        return Ok(0);
    }
    if rank == 0 {
        for peer in 1..world {
            for _ in 0..CLOCK_SAMPLES {
                comm.recv(peer)?;
                comm.send(peer, &super::wire::encode(&monotonic_ns())?)?;
            }
        }
        return Ok(0);
    }
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..CLOCK_SAMPLES {
        let t1 = monotonic_ns();
        comm.send(0, &[])?;
        let reply = comm.recv(0)?;
        let t2 = monotonic_ns();
        let t0: u64 = super::wire::decode_from(0, "clock reply", &reply)?;
        let rtt = t2.saturating_sub(t1);
        let offset = t0 as i128 - (t1 as i128 + t2 as i128) / 2;
        if best.is_none_or(|(b, _)| rtt < b) {
            best = Some((rtt, offset as i64));
        }
    }
    Ok(best.map_or(0, |(_, o)| o))
}

/// The process's peak resident memory (`VmHWM`), in bytes; `None` where `/proc` does not say.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Resets the peak-memory mark to the current resident size (`/proc/self/clear_refs`, value 5);
/// false where the kernel does not allow it.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::ReduceOp;
    use crate::dist::testutil::on_group;

    fn call(kind: CallKind, phase: Phase, start_ms: u64, end_ms: u64) -> CallRecord {
        CallRecord {
            kind,
            phase,
            bytes: 8,
            start_ns: start_ms * 1_000_000,
            end_ns: end_ms * 1_000_000,
        }
    }

    fn mark(calls: usize, end_ms: u64, gradient_secs: f64, denoiser_secs: f64) -> Mark {
        Mark {
            calls,
            start_ns: (end_ms - 100) * 1_000_000,
            work_start_ns: (end_ms - 100) * 1_000_000,
            end_ns: end_ms * 1_000_000,
            gradient_secs,
            denoiser_secs,
            peak_rss_bytes: 1 << 20,
        }
    }

    /// Two ranks; rank 1's clock runs 1000 ms ahead of rank 0's (offset −1000 ms). In the one
    /// iteration (0–100 ms on rank 0's clock) rank 0 arrives at the gradient's all-gather at 30 ms,
    /// rank 1 at 50 ms; both leave at 60 ms. Then rank 1 sends to rank 0 at 70 ms, which has waited
    /// in its receive since 65 ms.
    #[test]
    fn idle_is_the_wait_for_the_last_arrival_across_clock_offsets() {
        use CallKind::*;
        let ahead = 1000;
        let logs = vec![
            RankLog {
                offset_ns: 0,
                start_ns: 0,
                calls: vec![
                    call(AllGather, Phase::Gradient, 30, 60),
                    call(Recv { from: 1 }, Phase::Denoiser, 65, 72),
                ],
                marks: vec![mark(2, 100, 0.06, 0.03)],
            },
            RankLog {
                offset_ns: -(ahead as i64) * 1_000_000,
                start_ns: ahead * 1_000_000,
                calls: vec![
                    call(AllGather, Phase::Gradient, 50 + ahead, 60 + ahead),
                    call(Send { to: 0 }, Phase::Denoiser, 70 + ahead, 71 + ahead),
                ],
                marks: vec![mark(2, 100 + ahead, 0.06, 0.03)],
            },
        ];
        let p = profiles(&logs);
        let r0 = &p[0][0];
        assert!((r0.gradient.idle_secs - 0.020).abs() < 1e-9, "{r0:?}");
        assert!((r0.gradient.communication_secs - 0.010).abs() < 1e-9);
        assert!((r0.denoiser.idle_secs - 0.005).abs() < 1e-9);
        assert!((r0.denoiser.communication_secs - 0.002).abs() < 1e-9);
        assert_eq!(r0.gradient.bytes, 8);
        assert!((r0.other.secs - 0.01).abs() < 1e-9);
        assert!((r0.elapsed_secs - 0.1).abs() < 1e-9);
        assert!((r0.total_secs() - 0.1).abs() < 1e-9);
        let r1 = &p[1][0];
        assert!(
            r1.gradient.idle_secs.abs() < 1e-9,
            "the last to arrive waits for nobody"
        );
        assert!((r1.gradient.communication_secs - 0.010).abs() < 1e-9);
        assert!((r1.elapsed_secs - 0.1).abs() < 1e-9);
    }

    const STEP_SECS: f64 = 0.1;

    #[test]
    fn profiles_of_a_real_group_add_up() {
        for world in [1, 3] {
            let all = on_group(world, |comm| {
                let timed = Arc::new(TimedCollective::new(Box::new(comm)));
                let mut profiler = Profiler::start(timed.clone()).unwrap();
                for k in 0..2 {
                    // Rank r arrives r steps late at the gradient's all-reduce. Every rank works
                    // a step first: the start of an iteration's work is estimated from its
                    // measured times, to within scheduling noise, so a collective made in its
                    // first microseconds could count as setup on a loaded machine.
                    let t = std::time::Instant::now();
                    std::thread::sleep(std::time::Duration::from_secs_f64(
                        STEP_SECS * (timed.rank() + 1) as f64,
                    ));
                    let mut buf = vec![1.0f32; 1000];
                    timed.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                    let gradient_secs = t.elapsed().as_secs_f64();
                    let t = std::time::Instant::now();
                    timed.set_phase(Phase::Denoiser);
                    timed.all_gather(&[k as u8; 100]).unwrap();
                    let times = ComponentTimes {
                        gradient_secs,
                        denoiser_secs: t.elapsed().as_secs_f64(),
                        ..Default::default()
                    };
                    profiler.iteration_done(&times);
                    profiler.next_iteration();
                }
                profiler.finish().unwrap()
            });
            for p in &all {
                assert_eq!(p, &all[0], "every rank gets the same profiles");
            }
            let p = &all[0];
            assert_eq!(p.len(), world);
            for (r, its) in p.iter().enumerate() {
                assert_eq!(its.len(), 2);
                let summed: f64 = its.iter().map(IterationProfile::total_secs).sum();
                assert!(
                    (summed - its[1].elapsed_secs).abs() < 1e-3,
                    "rank {r}: iterations add up to {summed} s, the solve took {} s",
                    its[1].elapsed_secs
                );
                for it in its {
                    assert_eq!(it.gradient.bytes, 4000);
                    assert_eq!(it.denoiser.bytes, 100);
                    assert!(it.peak_rss_bytes > 0);
                    let late = STEP_SECS * (world - 1 - r) as f64;
                    if late > 0.0 {
                        // Rank r waited for the last rank, 100 ms per rank between them (more
                        // on a loaded machine, never much less).
                        assert!(
                            it.gradient.idle_secs > 0.5 * late,
                            "rank {r}: idle {} for a lateness of {late}",
                            it.gradient.idle_secs
                        );
                    } else {
                        assert!(it.gradient.idle_secs < 0.5 * STEP_SECS, "{it:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn peak_memory_is_read() {
        assert!(peak_rss_bytes().unwrap() > 0);
    }
}
