//! Elastic runs (`--elastic`): the rendezvous through which the ranks that survive a lost rank form
//! the next generation of their group, and the re-plan of operators and tiles over them.
//!
//! The launcher ([`super::launch`]) is the authority on membership: it is every rank's parent, so
//! it knows for certain which processes are gone. It hosts a [`Coordinator`] (a rendezvous store that
//! outlives every rank); after a failed generation each survivor checks in ([`Member::rejoin`]) with
//! the last iteration it completed, and the launcher publishes a [`Verdict`]: the next generation's
//! [`Plan`] (members in the order of their old rank, a fresh port for the new group's own store, the
//! iteration to resume from: the minimum that the survivors completed) or a stop. Each rank keeps
//! its *slot* (its rank in generation 0) for life; its rank in a generation is its place in the
//! plan's members. What a rank of an elastic run needs of its job is here too: [`Elastic`] (the
//! member and how to join a generation) and the [`Recovery`] record a job's summary lists.
//! Design: `docs/ELASTIC.md`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Collective;
use super::denoise::{TileAssignment, assign_tiles};
use super::env::{RankInfo, RankSource};
use super::store::{StoreClient, StoreServer};
use super::wire;
use crate::error::{Error, Result};
use crate::tiling::TilePlan;

/// The launcher's coordinator address, set in the rank processes of an elastic run.
pub const STORE_ENV: &str = "TESSERA_ELASTIC_STORE";
/// A rank process's slot: its rank in generation 0, kept for life.
pub const SLOT_ENV: &str = "TESSERA_ELASTIC_SLOT";
/// Set in a replacement process the launcher started after a loss (`--respawn`): the generation
/// it joins, without state ([`Member::join_as_replacement`]).
pub const JOIN_ENV: &str = "TESSERA_ELASTIC_JOIN";
/// Test hook: `slot:iteration[:point]` makes the rank process of that slot (its rank when the run
/// started; a replacement's is the next unused one) kill itself (SIGKILL); a comma-separated list
/// names several processes, each at most once, so a run can lose a second rank, or a replacement,
/// after a recovery.
pub const DIE_AT_ENV: &str = "TESSERA_TEST_DIE_AT";
/// Test hook: `k` makes rank 0 of an elastic run wait (up to a minute) at the boundary after
/// iteration (an inversion's: epoch) `k` until a rank asks to join, and look at no other
/// boundary, so that a test's `tessera join` joins there; `k1,k2,…` names several boundaries,
/// for joins in turn.
pub const JOIN_AT_ENV: &str = "TESSERA_TEST_JOIN_AT";

/// How an elastic rank reaches the launcher and joins each new generation of its group.
pub struct Elastic<'a> {
    /// Lent, not given: a backend's member goes on through its jobs (its generation with it).
    pub member: &'a mut Member,
    /// Joins the group a plan describes, with the transport and timeouts of the first generation.
    pub join: &'a mut dyn FnMut(&RankInfo) -> Result<Box<dyn Collective>>,
    /// A replacement (`--respawn`): the plan of the generation it joined without state; it
    /// receives the run's state from the new rank 0 before the generation's first iteration.
    pub joined: Option<Plan>,
    /// What rank 0 sends each replacement ahead of the state: the command of a served job (a
    /// `tessera serve` rank starts knowing no job: from it, the replacement learns which job it
    /// joins). `None` for a run, whose replacements start with its command line.
    pub prelude: Option<&'a [u8]>,
}

/// One recovery from a lost rank, as the log and `metrics.json` record it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recovery {
    /// The generation the survivors formed (1 after the first loss).
    pub generation: u32,
    /// When this rank saw the loss, seconds since the run started.
    pub failed_at_secs: f64,
    /// What this rank saw fail.
    pub failure: String,
    /// The lost ranks (numbered as in the generation that lost them) and their slots (their rank
    /// when the run started).
    pub lost_ranks: Vec<usize>,
    pub lost_slots: Vec<usize>,
    /// The iteration (FWI: epoch) the survivors resumed after (0: from the start).
    pub resumed_from: usize,
    /// The members' slots in their new rank order.
    pub members: Vec<usize>,
    /// The members that joined this generation without state (replacements of lost ranks,
    /// `docs/ELASTIC.md`, "Replacements"); absent from records written before they existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joined: Vec<usize>,
    /// The new owners of operators, tiles or shots, by new rank.
    pub assignment: Assignment,
    /// Seconds from the loss (as this rank saw it: `failed_at_secs`) to the end of the first
    /// iteration after it (`None`: none was left).
    pub recovery_secs: Option<f64>,
    /// When the launcher saw the loss (it reaped the lost rank's process, or — when no process
    /// had ended — the first survivor checked in), seconds since the run started on this rank's
    /// clock; the launcher polls every 20 ms. `None` in records from before it was kept.
    #[serde(default)]
    pub lost_at_secs: Option<f64>,
    /// Seconds from `lost_at_secs` to the end of the first iteration (epoch) completed after the
    /// recovery: detection, check-in, re-forming the group and the redone work together (`None`:
    /// none was left, or an older record).
    #[serde(default)]
    pub since_loss_secs: Option<f64>,
}

impl Recovery {
    /// The record of a rank that joined generation `plan` after seeing `failure` at
    /// `failed_at_secs` (since the run started) and rewound to `resumed_from`.
    pub fn new(
        plan: &Plan,
        failed_at_secs: f64,
        failure: &Error,
        resumed_from: usize,
        assignment: Assignment,
    ) -> Recovery {
        Recovery {
            generation: plan.generation,
            failed_at_secs,
            failure: failure.to_string(),
            lost_ranks: plan.lost_ranks.clone(),
            lost_slots: plan.lost_slots.clone(),
            resumed_from,
            members: plan.members.clone(),
            joined: plan.joined.clone(),
            assignment,
            recovery_secs: None,
            lost_at_secs: None,
            since_loss_secs: None,
        }
    }

    /// For each rank of the new generation, its rank in the generation before (`None`: it joined
    /// without state). The survivors keep their old order ahead of the joiners (`decide`), so the
    /// survivors' old ranks are those that were not lost, in order.
    pub fn previous_ranks(&self) -> Vec<Option<usize>> {
        let survivors = self.members.len().saturating_sub(self.joined.len());
        let mut old =
            (0..survivors + self.lost_ranks.len()).filter(|r| !self.lost_ranks.contains(r));
        self.members
            .iter()
            .map(|slot| match self.joined.contains(slot) {
                true => None,
                false => old.next(),
            })
            .collect()
    }

    /// The log line of this recovery as rank `rank` of the new generation sees it, counting the
    /// run's progress in `unit`.
    pub fn describe(&self, unit: WorkUnit, rank: usize) -> String {
        let world = self.members.len();
        let a = &self.assignment;
        let shares = match a.batch_positions.is_empty() {
            true => format!(
                "operators by rank {:?}, tiles by rank {:?}",
                a.operators, a.tiles
            ),
            false => format!("batch positions by rank {:?}", a.batch_positions),
        };
        let what = match (self.lost_ranks.is_empty(), self.joined.is_empty()) {
            // Grown without a loss (`tessera join`).
            (true, false) => format!("rank(s) {:?} joined", self.joined),
            _ => format!(
                "lost rank(s) {:?} (slots {:?})",
                self.lost_ranks, self.lost_slots
            ),
        };
        format!(
            "generation {}: {what}; {world} rank(s) resume after {unit} {}; this is rank {rank} \
             of {world}; {shares}",
            self.generation, self.resumed_from
        )
    }
}

/// The losses one rank of an elastic run recovered from, in order, and the moment of the latest
/// until its first unit of work after it completes (the time it took to recover).
#[derive(Debug, Clone)]
pub struct Recoveries {
    run_started: Instant,
    list: Vec<Recovery>,
    /// Since when the latest recovery runs: this rank's failure, and the launcher's loss.
    recovering_since: Option<(Instant, Option<Instant>)>,
}

impl Recoveries {
    pub fn new(run_started: Instant) -> Recoveries {
        Recoveries {
            run_started,
            list: Vec::new(),
            recovering_since: None,
        }
    }

    /// Records [`Recovery::new`] for this rank, which saw `failure` at `failed_at`, joined
    /// generation `plan` and rewound to `resumed_from`; logged (`warn`; `info` for a group that
    /// grew without a loss, whose `failure` says so) as [`Recovery::describe`] says it for
    /// `(unit, rank)`.
    pub fn record(
        &mut self,
        plan: &Plan,
        (failed_at, failure): (Instant, &Error),
        resumed_from: usize,
        assignment: Assignment,
        (unit, rank): (WorkUnit, usize),
    ) {
        let since_start = |t: Instant| t.duration_since(self.run_started).as_secs_f64();
        let mut recovery = Recovery::new(
            plan,
            since_start(failed_at),
            failure,
            resumed_from,
            assignment,
        );
        let lost_at = plan.lost_at();
        recovery.lost_at_secs = lost_at.map(since_start);
        if plan.lost_slots.is_empty() {
            // Grown without a loss: nothing failed, nothing to warn about.
            recovery.failure = format!(
                "none: the group left generation {} after {unit} {resumed_from} for the rank(s) \
                 asking to join",
                plan.generation.saturating_sub(1)
            );
            tracing::info!("{}", recovery.describe(unit, rank));
        } else {
            tracing::warn!("{}", recovery.describe(unit, rank));
        }
        self.list.push(recovery);
        self.recovering_since = Some((failed_at, lost_at));
    }

    /// A unit of work completed: the first since a loss ends that recovery.
    pub fn work_completed(&mut self) {
        if let Some((failed_at, lost_at)) = self.recovering_since.take()
            && let Some(r) = self.list.last_mut()
        {
            r.recovery_secs = Some(failed_at.elapsed().as_secs_f64());
            r.since_loss_secs = lost_at.map(|t| t.elapsed().as_secs_f64());
        }
    }

    pub fn list(&self) -> &[Recovery] {
        &self.list
    }

    /// Rank 0's part of a hand-over (after the run's state): its recoveries, the one of this
    /// generation last, to each rank in `joiners`.
    pub fn hand_over(&self, comm: &dyn Collective, joiners: &[usize]) -> Result<()> {
        // As `metrics.json` holds them (a record leaves out its empty fields, which only a
        // self-describing encoding reads back).
        let bytes = serde_json::to_vec(&self.list)
            .map_err(|e| Error::Internal(format!("encoding the recoveries to hand over: {e}")))?;
        for &to in joiners {
            comm.send(to, &bytes)?;
        }
        Ok(())
    }

    /// A replacement's part: takes the recoveries rank `from` recorded before it joined `plan`'s
    /// generation (their times are on that rank's clock, since its run started), so its own
    /// `metrics.json` lists every recovery of the run if it becomes rank 0, and counts this
    /// generation. The first iteration it completes ends the recovery it joined in, timed from
    /// when it received the plan. A peer's bytes: anything else is [`Error::BadPeerData`].
    pub fn take_over(&mut self, comm: &dyn Collective, from: usize, plan: &Plan) -> Result<()> {
        self.take_over_bytes(from, &comm.recv(from)?, plan)
    }

    /// [`Self::take_over`] of the bytes rank `from` sent.
    fn take_over_bytes(&mut self, from: usize, bytes: &[u8], plan: &Plan) -> Result<()> {
        let list: Vec<Recovery> = serde_json::from_slice(bytes).map_err(|e| {
            Error::bad_peer_data(from, format!("unreadable recoveries handed over: {e}"))
        })?;
        let generations: Vec<u32> = list.iter().map(|r| r.generation).collect();
        if generations.last() != Some(&plan.generation) || !generations.is_sorted_by(|a, b| a < b) {
            return Err(Error::bad_peer_data(
                from,
                format!(
                    "it handed over recoveries of generations {generations:?} for generation {}",
                    plan.generation
                ),
            ));
        }
        self.list = list;
        let received = plan.received_at.unwrap_or_else(Instant::now);
        self.recovering_since = Some((received, plan.lost_at()));
        Ok(())
    }

    /// The generation this rank is in (0 before any loss).
    pub fn generation(&self) -> u32 {
        self.list.last().map_or(0, |r| r.generation)
    }
}

/// What an elastic run's progress is counted in: the survivors resume after an iteration
/// (imaging) or an epoch (an inversion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum WorkUnit {
    #[default]
    Iteration,
    Epoch,
}

impl std::fmt::Display for WorkUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkUnit::Iteration => "iteration",
            WorkUnit::Epoch => "epoch",
        })
    }
}

/// Failures that mean a peer is gone, after which the survivors may go on.
pub fn is_loss(e: &Error) -> bool {
    matches!(
        e,
        Error::PeerLost { .. } | Error::Comm { .. } | Error::Timeout { .. }
    )
}

/// What a survivor tells the launcher after its generation failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkin {
    /// The last iteration this rank completed (0: none), whose iterate it holds along with the one
    /// before it.
    pub completed_iteration: usize,
    /// What this rank saw fail.
    pub failure: String,
    /// This rank left a generation that did not fail, at an iteration boundary, so that ranks
    /// asking to join (`tessera join ADDR`) can ([`Member::leave_to_grow`]).
    pub grow: bool,
}

/// The next generation of an elastic group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// 0 is the group the launcher started; each recovery adds one.
    pub generation: u32,
    /// The members' slots in the order of their rank in the previous generation: the new rank of a
    /// slot is its position here.
    pub members: Vec<usize>,
    /// The ranks (of the previous generation) that were lost, and their slots.
    pub lost_ranks: Vec<usize>,
    pub lost_slots: Vec<usize>,
    /// The members that join without state (replacements the launcher started), after the
    /// survivors in `members`: they hold no iteration and receive the state of `resume_from`.
    pub joined: Vec<usize>,
    /// Port of the new group's own rendezvous store, hosted by its rank 0.
    pub master_port: u16,
    /// The iteration every member resumes after (the minimum the survivors completed).
    pub resume_from: usize,
    /// How long before publishing this plan the launcher saw the loss (it reaped a lost rank, or
    /// the first survivor checked in): with `received_at`, when the loss happened on a member's
    /// clock, for the recovery's `lost_at_secs` and `since_loss_secs`.
    pub since_loss: Duration,
    /// When this member received the plan (not sent: set by [`Member::rejoin`]).
    #[serde(skip)]
    pub received_at: Option<Instant>,
}

impl Plan {
    /// When the launcher saw the loss, on this member's clock (`None`: a plan it did not receive).
    pub fn lost_at(&self) -> Option<Instant> {
        self.received_at
            .map(|t| t.checked_sub(self.since_loss).unwrap_or(t))
    }

    /// The new rank of `slot` (`None`: not a member).
    pub fn rank_of(&self, slot: usize) -> Option<usize> {
        self.members.iter().position(|&s| s == slot)
    }

    /// The new ranks of the replacements that joined this generation without state.
    pub fn joiner_ranks(&self) -> Vec<usize> {
        self.joined
            .iter()
            .filter_map(|&s| self.rank_of(s))
            .collect()
    }

    /// On this generation's rank 0: sends each replacement that joined it `prelude`
    /// ([`Elastic::prelude`]) ahead of the state; other ranks send nothing.
    pub fn send_prelude(&self, comm: &dyn Collective, prelude: Option<&[u8]>) -> Result<()> {
        match prelude {
            Some(bytes) if comm.rank() == 0 => self
                .joiner_ranks()
                .into_iter()
                .try_for_each(|to| comm.send(to, bytes)),
            _ => Ok(()),
        }
    }

    /// How `slot` joins the new generation on this host.
    pub fn rank_info(&self, slot: usize) -> Result<RankInfo> {
        let rank = self.rank_of(slot).ok_or_else(|| {
            Error::Internal(format!(
                "slot {slot} is not a member of generation {} ({:?})",
                self.generation, self.members
            ))
        })?;
        let world = self.members.len();
        Ok(RankInfo {
            rank,
            world_size: world,
            local_rank: rank,
            local_world_size: world,
            master_addr: "127.0.0.1".into(),
            master_port: self.master_port,
            source: RankSource::Torchrun,
        })
    }
}

/// The launcher's answer to a failed generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    Continue(Plan),
    /// The run cannot go on (fewer than `min_ranks` remain, or the group failed without losing a
    /// rank); every rank stops with this reason.
    Stop {
        reason: String,
    },
}

fn checkin_key(generation: u32, slot: usize) -> String {
    format!("elastic/{generation}/checkin/{slot}")
}

fn join_key(generation: u32, slot: usize) -> String {
    format!("elastic/{generation}/join/{slot}")
}

fn verdict_key(generation: u32) -> String {
    format!("elastic/{generation}/verdict")
}

/// Set by the launcher when ranks asked to join generation `generation` without a loss: its rank
/// 0 sees it at an iteration boundary and the group leaves its generation there.
fn grow_key(generation: u32) -> String {
    format!("elastic/{generation}/grow")
}

/// What the launcher of a run that takes ranks joining later (`tessera join ADDR`) tells them.
const RUN_KEY: &str = "elastic/run";
/// The counter of join requests, shared by every `tessera join`: request `n` (from 0) takes slot
/// [`JoinableRun::first_join_slot`] + n.
const JOINS_KEY: &str = "elastic/joins";

fn join_request_key(n: usize) -> String {
    format!("elastic/join-request/{n}")
}

fn join_answer_key(slot: usize) -> String {
    format!("elastic/join-answer/{slot}")
}

fn joiner_lost_key(slot: usize) -> String {
    format!("elastic/joiner-lost/{slot}")
}

/// `tessera join ADDR`'s word that its rank (of `slot`) ended by a signal, `how`: the launcher
/// cannot reap a process it did not start, and counts it lost at once instead of waiting out the
/// check-in timeout for it ([`Coordinator::lost_joiners`]).
pub fn report_joiner_lost(addr: &str, slot: usize, how: &str, timeout: Duration) -> Result<()> {
    StoreClient::connect(addr, timeout)?.set(&joiner_lost_key(slot), how.as_bytes())
}

/// The run a joining rank runs: the launcher's record of its rank processes' command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinableRun {
    /// A rank process's arguments (this binary's, without `--ranks`); a joining host must see
    /// the same preset and input paths, relative to `cwd` (as torchrun assumes).
    pub args: Vec<String>,
    /// The launcher's working folder.
    pub cwd: String,
    /// The ranks the run started with.
    pub world: usize,
    /// The first slot a joining rank takes: beyond every slot the launcher uses (its ranks and
    /// at most as many `--respawn` replacements).
    pub first_join_slot: usize,
    /// Where a joining rank joins: at the next iteration (an inversion's: epoch) boundary.
    pub unit: WorkUnit,
    /// Why the run takes no joining rank (`None`: it does): a backend whose rank 0 is essential,
    /// a command line that is not UTF-8.
    pub refuses: Option<String>,
}

/// The answer to a join request: the generation the joining rank is to join at the next iteration
/// boundary, or why the run does not take it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinAnswer {
    Generation(u32),
    Refused(String),
}

/// A process that asked to join a running elastic run (`tessera join ADDR`): its slot, the
/// generation it joins and the run's command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joining {
    pub slot: usize,
    pub generation: u32,
    pub run: JoinableRun,
}

/// `tessera join ADDR`'s registration: reaches the launcher's store at `addr` (within `timeout`),
/// reads the run's record, takes the next join slot and asks to join; waits (up to `timeout`) for
/// the launcher to name the generation. Every failure names `addr`.
pub fn request_join(addr: &str, timeout: Duration) -> Result<Joining> {
    let named = |e: Error| match e {
        Error::Timeout { what, secs } => Error::Timeout {
            what: format!("{what} (joining the elastic run at {addr})"),
            secs,
        },
        Error::BadPeerData { rank, what } => Error::BadPeerData {
            rank,
            what: format!("{what} (joining the elastic run at {addr})"),
        },
        other => Error::PeerFailed {
            rank: 0,
            reason: format!("joining the elastic run at {addr}: {other}"),
        },
    };
    let mut client = StoreClient::connect(addr, timeout).map_err(named)?;
    // The launcher writes its record before it starts a rank: no wait.
    let advertised = client
        .wait(&[RUN_KEY.to_string()], Duration::ZERO)
        .map_err(named)?;
    let run_bytes = match advertised.map(|()| client.get(RUN_KEY, timeout)) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return Err(named(e)),
        Err(_) => {
            return Err(Error::config(
                "ADDR",
                format!(
                    "{addr} is a rendezvous store, but not the launcher of an elastic run that \
                     takes joining ranks (`tessera run PRESET --ranks N --elastic` prints the \
                     address to join)"
                ),
            ));
        }
    };
    let run: JoinableRun = wire::decode_from(0, "elastic run record", &run_bytes).map_err(named)?;
    if let Some(why) = &run.refuses {
        return Err(Error::Unsupported(format!(
            "the elastic run at {addr} takes no joining rank: {why}"
        )));
    }
    let n = client.add(JOINS_KEY, 1).map_err(named)?;
    let n = usize::try_from(n - 1)
        .map_err(|_| named(Error::bad_peer_data(0, format!("join counter {n}"))))?;
    let slot = run.first_join_slot + n;
    client
        .set(&join_request_key(n), &wire::encode(&slot)?)
        .map_err(named)?;
    let answer = client.get(&join_answer_key(slot), timeout).map_err(named)?;
    match wire::decode_from(0, "join answer", &answer).map_err(named)? {
        JoinAnswer::Generation(generation) => Ok(Joining {
            slot,
            generation,
            run,
        }),
        JoinAnswer::Refused(why) => Err(Error::Unsupported(format!(
            "the elastic run at {addr} refused rank {slot}: {why}"
        ))),
    }
}

/// A rank's side of the elastic rendezvous.
pub struct Member {
    client: StoreClient,
    /// The launcher's store.
    addr: String,
    pub slot: usize,
    /// The generation this rank is in now.
    pub generation: u32,
    /// How long a survivor waits for the launcher's verdict.
    verdict_timeout: Duration,
    /// A replacement ([`JOIN_ENV`]): the generation it is to join without state.
    pub replaces_into: Option<u32>,
}

impl Member {
    /// The member this process is, from the launcher's environment (`None`: not an elastic run).
    pub fn from_env(timeout: Duration) -> Result<Option<Member>> {
        let (Ok(addr), Ok(slot)) = (std::env::var(STORE_ENV), std::env::var(SLOT_ENV)) else {
            return Ok(None);
        };
        let slot = slot
            .parse()
            .map_err(|_| Error::config(SLOT_ENV, format!("`{slot}` is not a rank")))?;
        let replaces_into = match std::env::var(JOIN_ENV) {
            Ok(g) => Some(g.parse().map_err(|_| {
                Error::config(JOIN_ENV, format!("`{g}` is not a generation number"))
            })?),
            Err(_) => None,
        };
        Ok(Some(Member {
            client: StoreClient::connect(&addr, timeout)?,
            addr,
            slot,
            generation: 0,
            verdict_timeout: timeout,
            replaces_into,
        }))
    }

    /// Checks in for the next generation after this one failed, and waits for the launcher's plan.
    /// A stop comes back as [`Error::PeerLost`] naming a lost rank and the reason.
    pub fn rejoin(&mut self, completed_iteration: usize, failure: &Error) -> Result<Plan> {
        self.check_in(completed_iteration, failure.to_string(), false)
    }

    /// Checks in for the next generation after this rank left the current one, which did not
    /// fail, after iteration `completed_iteration` so that ranks asking to join can
    /// ([`GrowProbe`]); waits for the launcher's plan, which has them in `joined`.
    pub fn leave_to_grow(&mut self, completed_iteration: usize) -> Result<Plan> {
        let why = format!(
            "left generation {} after iteration {completed_iteration} for the rank(s) asking to \
             join",
            self.generation
        );
        self.check_in(completed_iteration, why, true)
    }

    /// Leaves the current generation after `completed` iterations (epochs: `unit`), to grow (every
    /// member left for ranks asking to join) or after `failure`; says which in the log, then
    /// checks in and waits for the launcher's plan.
    pub fn leave(
        &mut self,
        growing: bool,
        completed: usize,
        failure: &Error,
        unit: WorkUnit,
    ) -> Result<Plan> {
        match growing {
            true => {
                tracing::info!(
                    "generation {} ends after {unit} {completed}: rank(s) ask to join; checking \
                     in with the launcher",
                    self.generation
                );
                self.leave_to_grow(completed)
            }
            false => {
                tracing::warn!(
                    "generation {} failed after {unit} {completed}: {failure}; checking in with \
                     the launcher",
                    self.generation
                );
                self.rejoin(completed, failure)
            }
        }
    }

    /// The probe through which this generation's rank 0 learns, at each iteration boundary,
    /// whether ranks ask to join (a connection of its own to the launcher's store).
    pub fn grow_probe(&self) -> Result<GrowProbe> {
        let wait_at = match std::env::var(JOIN_AT_ENV) {
            Ok(list) => Some(
                list.split(',')
                    .map(|k| {
                        k.trim().parse().map_err(|_| {
                            Error::config(JOIN_AT_ENV, format!("`{k}` is not an iteration number"))
                        })
                    })
                    .collect::<Result<Vec<usize>>>()?,
            ),
            Err(_) => None,
        };
        Ok(GrowProbe {
            client: StoreClient::connect(&self.addr, self.verdict_timeout)?,
            wait_at,
        })
    }

    fn check_in(
        &mut self,
        completed_iteration: usize,
        failure: String,
        grow: bool,
    ) -> Result<Plan> {
        let next = self.generation + 1;
        let checkin = Checkin {
            completed_iteration,
            failure,
            grow,
        };
        self.client
            .set(&checkin_key(next, self.slot), &wire::encode(&checkin)?)?;
        let bytes = self.client.get(&verdict_key(next), self.verdict_timeout)?;
        let received_at = Instant::now();
        let verdict: Verdict = wire::decode_from(0, "elastic verdict", &bytes)?;
        match verdict {
            Verdict::Continue(plan) if plan.rank_of(self.slot).is_some() => {
                self.generation = next;
                Ok(Plan {
                    received_at: Some(received_at),
                    ..plan
                })
            }
            Verdict::Continue(plan) => Err(Error::Internal(format!(
                "the launcher left slot {} out of generation {next} ({:?})",
                self.slot, plan.members
            ))),
            Verdict::Stop { reason } => Err(Error::PeerLost {
                rank: self.slot,
                how: format!("is in a group that cannot go on: {reason}"),
            }),
        }
    }
}

/// Rank 0's look, at an iteration boundary, for ranks asking to join the next generation.
pub struct GrowProbe {
    client: StoreClient,
    /// The test hook [`JOIN_AT_ENV`].
    wait_at: Option<Vec<usize>>,
}

impl GrowProbe {
    /// Whether the launcher set the grow flag of generation `next` by the boundary after
    /// `iteration` (a look without waiting, but for the test hook's iteration).
    pub fn asked(&mut self, next: u32, iteration: usize) -> Result<bool> {
        let wait = match &self.wait_at {
            None => Duration::ZERO,
            Some(ks) if ks.contains(&iteration) => Duration::from_secs(60),
            // The test hook's run grows at its iterations only.
            Some(_) => return Ok(false),
        };
        Ok(self.client.wait(&[grow_key(next)], wait)?.is_ok())
    }

    /// The boundary after `completed` (an iteration or an epoch) of an elastic run that takes
    /// joining ranks, on every rank: rank 0 looks ([`GrowProbe::asked`]) whether ranks ask to
    /// join generation `next` and broadcasts its one-byte answer, so that every rank leaves its
    /// generation after the same iteration. This broadcast is the only per-iteration cost of
    /// `--elastic` while nobody joins.
    pub fn boundary(&mut self, comm: &dyn Collective, next: u32, completed: usize) -> Result<bool> {
        let asked = comm.rank() == 0 && self.asked(next, completed)?;
        let mut byte = vec![u8::from(asked)];
        comm.broadcast(&mut byte, 0)?;
        match byte[..] {
            [0] => Ok(false),
            [1] => Ok(true),
            _ => Err(Error::bad_peer_data(
                0,
                format!("its boundary's join verdict was {byte:?}, not one byte 0 or 1"),
            )),
        }
    }
}

impl Member {
    /// A replacement's check-in: this process (a fresh slot the launcher started after a loss)
    /// asks to join generation `generation` without state, and waits for the launcher's plan.
    pub fn join_as_replacement(&mut self, generation: u32) -> Result<Plan> {
        self.client
            .set(&join_key(generation, self.slot), &wire::encode(&self.slot)?)?;
        let bytes = self
            .client
            .get(&verdict_key(generation), self.verdict_timeout)?;
        let received_at = Instant::now();
        let verdict: Verdict = wire::decode_from(0, "elastic verdict", &bytes)?;
        match verdict {
            Verdict::Continue(plan) if plan.joined.contains(&self.slot) => {
                self.generation = generation;
                Ok(Plan {
                    received_at: Some(received_at),
                    ..plan
                })
            }
            Verdict::Continue(plan) => Err(Error::PeerLost {
                rank: self.slot,
                how: format!(
                    "was started to replace a lost rank, but generation {generation} formed \
                     without it ({:?})",
                    plan.members
                ),
            }),
            Verdict::Stop { reason } => Err(Error::PeerLost {
                rank: self.slot,
                how: format!(
                    "was started to replace a lost rank in a group that cannot go on: {reason}"
                ),
            }),
        }
    }
}

/// The launcher's side: the store that outlives every rank and the members of each generation.
pub struct Coordinator {
    server: StoreServer,
    client: StoreClient,
    /// Slots of the current generation, in rank order.
    members: Vec<usize>,
    generation: u32,
    min_ranks: usize,
}

impl Coordinator {
    /// Starts the coordinator of a group of `world` slots that may shrink to `min_ranks`.
    pub fn start(world: usize, min_ranks: usize) -> Result<Coordinator> {
        if min_ranks == 0 || min_ranks > world {
            return Err(Error::config(
                "distributed.min_ranks",
                format!("must be between 1 and the number of ranks ({world}), got {min_ranks}"),
            ));
        }
        let server = StoreServer::bind("127.0.0.1:0")?;
        let client = StoreClient::connect(&server.addr().to_string(), Duration::from_secs(10))?;
        Ok(Coordinator {
            server,
            client,
            members: (0..world).collect(),
            generation: 0,
            min_ranks,
        })
    }

    /// The address ranks reach it at ([`STORE_ENV`]).
    pub fn addr(&self) -> String {
        self.server.addr().to_string()
    }

    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// Which of `slots` have checked in for the next generation, with what they said.
    pub fn checked_in(&mut self, slots: &[usize]) -> Result<BTreeMap<usize, Checkin>> {
        let next = self.generation + 1;
        let mut found = BTreeMap::new();
        for &slot in slots {
            let key = checkin_key(next, slot);
            if self
                .client
                .wait(std::slice::from_ref(&key), Duration::ZERO)?
                .is_ok()
            {
                let bytes = self.client.get(&key, Duration::from_secs(1))?;
                found.insert(slot, wire::decode_from(slot, "elastic check-in", &bytes)?);
            }
        }
        Ok(found)
    }

    /// Which of `slots` (replacements the launcher started) asked to join the next generation.
    pub fn joining(&mut self, slots: &[usize]) -> Result<Vec<usize>> {
        let next = self.generation + 1;
        let mut found = Vec::new();
        for &slot in slots {
            let key = join_key(next, slot);
            if self
                .client
                .wait(std::slice::from_ref(&key), Duration::ZERO)?
                .is_ok()
            {
                found.push(slot);
            }
        }
        Ok(found)
    }

    /// The generation the next plan forms (a replacement checks in for it).
    pub fn next_generation(&self) -> u32 {
        self.generation + 1
    }

    /// Publishes the run's record for `tessera join ADDR` (without it, a join is refused as
    /// reaching a store that is not an elastic run's).
    pub fn advertise(&mut self, run: &JoinableRun) -> Result<()> {
        self.client.set(RUN_KEY, &wire::encode(run)?)
    }

    /// Which of the joined ranks `slots` their `tessera join` reported ended by a signal
    /// ([`report_joiner_lost`]), with how (a look without waiting; a joiner's bytes, shown as
    /// text whatever they are).
    pub fn lost_joiners(&mut self, slots: &[usize]) -> Result<Vec<(usize, String)>> {
        let mut lost = Vec::new();
        for &slot in slots {
            let key = joiner_lost_key(slot);
            if self
                .client
                .wait(std::slice::from_ref(&key), Duration::ZERO)?
                .is_ok()
            {
                let how = self.client.get(&key, Duration::from_secs(1))?;
                lost.push((slot, String::from_utf8_lossy(&how).into_owned()));
            }
        }
        Ok(lost)
    }

    /// The join requests that arrived since the last call (from request `*seen` on), each
    /// answered with the next generation, whose grow flag is set so that the group's rank 0
    /// leaves its generation at the next iteration boundary; their slots, in order.
    pub fn take_join_requests(&mut self, seen: &mut usize) -> Result<Vec<usize>> {
        let mut slots = Vec::new();
        loop {
            let key = join_request_key(*seen);
            if self
                .client
                .wait(std::slice::from_ref(&key), Duration::ZERO)?
                .is_err()
            {
                break;
            }
            let bytes = self.client.get(&key, Duration::from_secs(1))?;
            *seen += 1;
            // A joiner's bytes: a malformed request is left unanswered (that joiner times out),
            // never the run's failure.
            let slot: usize = match wire::decode_from(*seen - 1, "join request", &bytes) {
                Ok(slot) => slot,
                Err(e) => {
                    tracing::warn!("ignoring join request {}: {e}", *seen - 1);
                    continue;
                }
            };
            let next = self.next_generation();
            self.client.set(
                &join_answer_key(slot),
                &wire::encode(&JoinAnswer::Generation(next))?,
            )?;
            self.client.set(&grow_key(next), &[1])?;
            slots.push(slot);
        }
        Ok(slots)
    }

    /// Ends the wait of ranks that asked to join generation `next_generation()` when no such
    /// generation will form (the run completed first): they stop with `reason`.
    pub fn refuse_joiners(&mut self, reason: &str) -> Result<()> {
        let verdict = Verdict::Stop {
            reason: reason.to_string(),
        };
        self.client.set(
            &verdict_key(self.next_generation()),
            &wire::encode(&verdict)?,
        )
    }

    /// Decides the next generation from the survivors' check-ins (every live member's) and the
    /// replacements that asked to join, and publishes it; `master_port` is the new group's store
    /// port, `since_loss` how long ago the launcher saw the loss.
    pub fn publish(
        &mut self,
        survivors: &BTreeMap<usize, Checkin>,
        joiners: &[usize],
        (master_port, since_loss): (u16, Duration),
        admit: Option<&Admit>,
    ) -> Result<Verdict> {
        let next = self.generation + 1;
        let mut verdict = decide(
            next,
            &self.members,
            (survivors, joiners),
            self.min_ranks,
            master_port,
        );
        if let (Verdict::Continue(plan), Some(admit)) = (&verdict, admit) {
            let regroup = Regroup {
                previous: self.members.len(),
                survivors: plan.members.len() - plan.joined.len(),
                joiners: plan.joined.len(),
            };
            if let Err(why) = admit(regroup) {
                verdict = Verdict::Stop {
                    reason: format!(
                        "the {} rank(s) of generation {next} cannot hold the job: {why}",
                        plan.members.len()
                    ),
                };
            }
        }
        if let Verdict::Continue(plan) = &mut verdict {
            plan.since_loss = since_loss;
        }
        self.client
            .set(&verdict_key(next), &wire::encode(&verdict)?)?;
        if let Verdict::Continue(plan) = &verdict {
            self.members = plan.members.clone();
            self.generation = next;
        }
        Ok(verdict)
    }
}

/// The shape of a group the launcher is about to re-form, for its admission check ([`Admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regroup {
    /// The ranks of the generation that ended.
    pub previous: usize,
    /// Its members that go on: they hold their shares of the old generation now.
    pub survivors: usize,
    /// The ranks that join without state (replacements, `tessera join`).
    pub joiners: usize,
}

/// Whether a group the launcher is about to re-form can hold its job (the memory of the
/// survivors' shares after re-sharding, `job::regroup_admission`): `Err(why)` stops the run —
/// with its checkpoint, and the command that resumes it — instead of a generation that runs out
/// of memory.
pub type Admit = std::sync::Arc<dyn Fn(Regroup) -> std::result::Result<(), String> + Send + Sync>;

/// The verdict on generation `generation` given the previous members, the survivors' check-ins and
/// the replacements that asked to join (pure, for tests). Joiners hold no iteration: the resume
/// iteration is the survivors' minimum, and they follow the survivors (whose ranks stay in their
/// old order) in slot order. A generation needs a survivor (only survivors hold the state) and
/// `min_ranks` members, joiners included. Without a loss it forms only to grow: every member
/// checked in with [`Checkin::grow`] and a rank asked to join (`tessera join`).
pub fn decide(
    generation: u32,
    members: &[usize],
    (survivors, joiners): (&BTreeMap<usize, Checkin>, &[usize]),
    min_ranks: usize,
    master_port: u16,
) -> Verdict {
    let mut joined: Vec<usize> = joiners
        .iter()
        .copied()
        .filter(|s| !members.contains(s) && !survivors.contains_key(s))
        .collect();
    joined.sort_unstable();
    joined.dedup();
    // (rank in the previous generation, slot) of the members kept and lost.
    let (kept, lost): (Vec<_>, Vec<_>) = members
        .iter()
        .copied()
        .enumerate()
        .partition(|(_, slot)| survivors.contains_key(slot));
    let lost_ranks: Vec<usize> = lost.iter().map(|&(r, _)| r).collect();
    let lost_slots: Vec<usize> = lost.iter().map(|&(_, s)| s).collect();
    // Growing: every member left its generation at the same iteration boundary for the ranks
    // asking to join; a group that failed without a loss (one real failure among the check-ins)
    // would fail again, so it stops, joiners or not.
    let growing = !joined.is_empty() && survivors.values().all(|c| c.grow);
    if lost.is_empty() && !growing {
        let failure = survivors
            .values()
            .find(|c| !c.grow)
            .or_else(|| survivors.values().next())
            .map(|c| c.failure.clone())
            .unwrap_or_default();
        return Verdict::Stop {
            reason: format!("the group failed without losing a rank ({failure})"),
        };
    }
    if kept.is_empty() {
        return Verdict::Stop {
            reason: format!(
                "rank(s) {lost_ranks:?} were lost and none remain to hand the run's state to \
                 the {} replacement(s)",
                joined.len()
            ),
        };
    }
    if kept.len() + joined.len() < min_ranks {
        return Verdict::Stop {
            reason: format!(
                "rank(s) {lost_ranks:?} were lost and only {} remain, fewer than min_ranks = \
                 {min_ranks}",
                kept.len() + joined.len()
            ),
        };
    }
    let resume_from = survivors
        .values()
        .map(|c| c.completed_iteration)
        .min()
        .unwrap_or(0);
    Verdict::Continue(Plan {
        generation,
        members: kept
            .into_iter()
            .map(|(_, s): (usize, usize)| s)
            .chain(joined.iter().copied())
            .collect(),
        joined,
        lost_ranks,
        lost_slots,
        master_port,
        resume_from,
        since_loss: Duration::ZERO,
        received_at: None,
    })
}

/// Who owns what in one generation: operators and tiles (imaging) or shots (FWI) per rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// Operator indices per rank.
    pub operators: Vec<Vec<usize>>,
    /// Tile indices per rank (empty without distributed tiles).
    pub tiles: Vec<Vec<usize>>,
    /// FWI: the positions in each epoch's shot batch that each rank models (absent for imaging).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch_positions: Vec<Vec<usize>>,
}

impl Assignment {
    /// The assignment `DistributedStack` and `DistributedTiledDenoiser` make on `world` ranks.
    pub fn over(
        world: usize,
        operators: usize,
        tiles: Option<(&TilePlan, TileAssignment)>,
    ) -> Assignment {
        let mut by_rank = vec![Vec::new(); world];
        for i in 0..operators {
            by_rank[super::physics::owner(i, world)].push(i);
        }
        let mut tiles_by_rank = vec![Vec::new(); world];
        if let Some((plan, how)) = tiles {
            for (tile, rank) in assign_tiles(plan, world, how).into_iter().enumerate() {
                tiles_by_rank[rank].push(tile);
            }
        }
        Assignment {
            operators: by_rank,
            tiles: tiles_by_rank,
            batch_positions: Vec::new(),
        }
    }
}

/// Where [`DIE_AT_ENV`] makes a rank die in its iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiePoint {
    /// Before the iteration's first collective.
    Start,
    /// Inside the denoiser call.
    Denoiser,
    /// FWI: with the epoch's shots modelled, as the peers enter the shot gradients' collective.
    Gradients,
    /// At the iteration's start, the whole run dies at once (a full crash): SIGKILL to the
    /// launcher's process group — only when the launcher leads its own group, as a test starts it,
    /// else this rank alone dies.
    Crash,
}

/// The test hook [`DIE_AT_ENV`]: rank `rank` of generation 0 dies in iteration `iteration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DieAt {
    pub rank: usize,
    pub iteration: usize,
    pub point: DiePoint,
}

impl DieAt {
    /// Parses `rank:iteration[:start|denoiser|gradients|crash]`.
    pub fn parse(text: &str) -> Result<DieAt> {
        let bad = || {
            Error::config(
                DIE_AT_ENV,
                format!("`{text}` is not rank:iteration[:start|denoiser|gradients|crash]"),
            )
        };
        let parts: Vec<&str> = text.split(':').collect();
        let (rank, iteration, point) = match parts[..] {
            [r, i] => (r, i, DiePoint::Start),
            [r, i, "start"] => (r, i, DiePoint::Start),
            [r, i, "denoiser"] => (r, i, DiePoint::Denoiser),
            [r, i, "gradients"] => (r, i, DiePoint::Gradients),
            [r, i, "crash"] => (r, i, DiePoint::Crash),
            _ => return Err(bad()),
        };
        Ok(DieAt {
            rank: rank.parse().map_err(|_| bad())?,
            iteration: iteration.parse().map_err(|_| bad())?,
            point,
        })
    }

    /// Parses a comma-separated list of [`Self::parse`]'s entries, at most one per slot.
    pub fn parse_list(text: &str) -> Result<Vec<DieAt>> {
        let list = text
            .split(',')
            .map(DieAt::parse)
            .collect::<Result<Vec<_>>>()?;
        for (i, die) in list.iter().enumerate() {
            if list[..i].iter().any(|d| d.rank == die.rank) {
                return Err(Error::config(
                    DIE_AT_ENV,
                    format!(
                        "`{text}` names slot {} twice (a process dies once)",
                        die.rank
                    ),
                ));
            }
        }
        Ok(list)
    }

    /// The hook for the process of slot `slot` (its rank when the run started) when the list
    /// names it; read only by rank processes a launcher started (the caller checks).
    pub fn from_env(slot: usize) -> Result<Option<DieAt>> {
        let Ok(text) = std::env::var(DIE_AT_ENV) else {
            return Ok(None);
        };
        Ok(DieAt::parse_list(&text)?
            .into_iter()
            .find(|die| die.rank == slot))
    }

    /// Dies (SIGKILL to this process, as an outside kill would) when `iteration` at `point` is the
    /// one named.
    pub fn check(&self, iteration: usize, point: DiePoint) {
        let crash = self.point == DiePoint::Crash && point == DiePoint::Start;
        if iteration != self.iteration || (point != self.point && !crash) {
            return;
        }
        tracing::warn!(
            "{DIE_AT_ENV}: rank {} dies in iteration {iteration} ({:?})",
            self.rank,
            self.point
        );
        // SAFETY: getppid/getpgid only read this process's ids; kill(2) of this process, or of
        // the process group its parent (the launcher) leads, which holds the run's processes only.
        unsafe {
            if crash && libc::getpgid(0) == libc::getppid() {
                libc::kill(0, libc::SIGKILL);
            }
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::{Extent, TilingConfig, TilingKind};
    use proptest::prelude::*;

    fn checkin(k: usize) -> Checkin {
        Checkin {
            completed_iteration: k,
            failure: "rank 2 closed its connection".into(),
            grow: false,
        }
    }

    #[test]
    fn survivors_keep_their_order_and_resume_from_the_least_completed_iteration() {
        let survivors = BTreeMap::from([(0, checkin(7)), (3, checkin(6)), (1, checkin(7))]);
        let Verdict::Continue(plan) = decide(1, &[0, 1, 2, 3], (&survivors, &[]), 1, 4000) else {
            panic!("expected a plan");
        };
        assert_eq!(plan.members, vec![0, 1, 3]);
        assert_eq!((&plan.lost_ranks, &plan.lost_slots), (&vec![2], &vec![2]));
        assert_eq!(plan.resume_from, 6);
        assert_eq!(plan.rank_of(3), Some(2));
        assert_eq!(plan.rank_info(3).unwrap().world_size, 3);
    }

    #[test]
    fn a_group_below_min_ranks_or_without_a_loss_stops() {
        let one = BTreeMap::from([(1, checkin(3))]);
        assert!(matches!(
            decide(1, &[0, 1, 2], (&one, &[]), 2, 1),
            Verdict::Stop { reason } if reason.contains("min_ranks = 2")
        ));
        let all = BTreeMap::from([(0, checkin(3)), (1, checkin(3))]);
        assert!(matches!(
            decide(1, &[0, 1], (&all, &[]), 1, 1),
            Verdict::Stop { reason } if reason.contains("without losing")
        ));
    }

    #[test]
    fn replacements_follow_the_survivors_and_do_not_move_the_resume_iteration() {
        // Slot 1 of 3 was lost; slot 3 replaces it. Survivors completed 5 and 4 iterations.
        let survivors = BTreeMap::from([(2, checkin(4)), (0, checkin(5))]);
        let Verdict::Continue(plan) = decide(1, &[0, 1, 2], (&survivors, &[3]), 3, 1) else {
            panic!("expected a plan");
        };
        assert_eq!(plan.members, vec![0, 2, 3]);
        assert_eq!(plan.joined, vec![3]);
        assert_eq!((&plan.lost_ranks, &plan.lost_slots), (&vec![1], &vec![1]));
        assert_eq!(plan.resume_from, 4);
        assert_eq!(
            (plan.rank_of(0), plan.rank_of(2), plan.rank_of(3)),
            (Some(0), Some(1), Some(2))
        );
        // Joiners count toward min_ranks, in slot order; a member's slot is never taken as a
        // joiner (the launcher never reuses a slot).
        let Verdict::Continue(plan) = decide(2, &[0, 2, 3], (&survivors, &[5, 4, 2, 4]), 4, 1)
        else {
            panic!("expected a plan");
        };
        assert_eq!(plan.members, vec![0, 2, 4, 5]);
        assert_eq!(plan.joined, vec![4, 5]);
        assert_eq!(plan.lost_slots, vec![3]);
        // Without joiners the same loss is below min_ranks = 3.
        assert!(matches!(
            decide(1, &[0, 1, 2], (&survivors, &[]), 3, 1),
            Verdict::Stop { reason } if reason.contains("min_ranks = 3")
        ));
    }

    #[test]
    fn a_recovery_names_the_rank_each_member_had_before() {
        let recovery = |members: &[usize], survivors: &BTreeMap<usize, Checkin>, joiners| {
            let Verdict::Continue(plan) = decide(1, members, (survivors, joiners), 1, 1) else {
                panic!("expected a plan");
            };
            let failure = Error::Internal("lost".into());
            Recovery::new(&plan, 0.0, &failure, 0, Assignment::over(1, 0, None))
        };
        // Slot 1 (rank 1) of 3 lost, slot 3 joins: ranks 0 and 2 become 0 and 1.
        let two = BTreeMap::from([(0, checkin(4)), (2, checkin(4))]);
        assert_eq!(
            recovery(&[0, 1, 2], &two, &[3]).previous_ranks(),
            vec![Some(0), Some(2), None]
        );
        // Rank 0 (slot 5) and rank 2 (slot 1) of [5, 7, 1, 3] lost.
        let rest = BTreeMap::from([(7, checkin(2)), (3, checkin(2))]);
        assert_eq!(
            recovery(&[5, 7, 1, 3], &rest, &[]).previous_ranks(),
            vec![Some(1), Some(3)]
        );
    }

    /// A replacement takes over rank 0's recoveries (the one it joined in last) and ends that
    /// one at its first completed iteration; anything else rank 0 could send is an error that
    /// names it, and leaves the replacement's record as it was.
    #[test]
    fn a_replacement_takes_over_the_recoveries_and_refuses_any_other_bytes() {
        let plan_of = |generation, members: &[usize], survivors: &BTreeMap<usize, Checkin>| {
            let Verdict::Continue(plan) = decide(generation, members, (survivors, &[9]), 1, 1)
            else {
                panic!("expected a plan");
            };
            plan
        };
        let failure = Error::Internal("lost".into());
        let record =
            |plan: &Plan| Recovery::new(plan, 1.5, &failure, 2, Assignment::over(2, 3, None));
        let first = plan_of(
            1,
            &[0, 1, 2],
            &BTreeMap::from([(0, checkin(2)), (2, checkin(2))]),
        );
        let second = plan_of(
            2,
            &[0, 2, 9],
            &BTreeMap::from([(0, checkin(4)), (9, checkin(4))]),
        );
        let sent = serde_json::to_vec(&[record(&first), record(&second)]).unwrap();
        let mut mine = Recoveries::new(Instant::now());
        mine.take_over_bytes(0, &sent, &second).unwrap();
        assert_eq!(mine.generation(), 2);
        assert_eq!(mine.list()[0].lost_slots, vec![1]);
        assert_eq!(mine.list()[1].recovery_secs, None);
        mine.work_completed();
        assert!(mine.list()[1].recovery_secs.is_some());
        assert_eq!(
            mine.list()[0].recovery_secs,
            None,
            "only the last one is this rank's"
        );

        let out_of_order = serde_json::to_vec(&[record(&second), record(&second)]).unwrap();
        let only_first = serde_json::to_vec(&[record(&first)]).unwrap();
        let hostile: [(&[u8], &str); 6] = [
            (b"", "unreadable"),
            (&sent[..sent.len() / 2], "unreadable"),
            (b"{\"generation\": 2}", "unreadable"),
            (b"[]", "generations []"),
            (&only_first, "generations [1] for generation 2"),
            (&out_of_order, "generations [2, 2]"),
        ];
        for (bytes, says) in hostile {
            let mut fresh = Recoveries::new(Instant::now());
            match fresh.take_over_bytes(3, bytes, &second) {
                Err(Error::BadPeerData { rank: 3, what }) => assert!(what.contains(says), "{what}"),
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
            }
            assert!(fresh.list().is_empty());
        }
    }

    #[test]
    fn replacements_alone_cannot_carry_on_the_run() {
        let none = BTreeMap::new();
        assert!(matches!(
            decide(1, &[0, 1], (&none, &[2, 3]), 1, 1),
            Verdict::Stop { reason } if reason.contains("none remain")
        ));
        // A group that failed without a loss stops, joiners or not.
        let all = BTreeMap::from([(0, checkin(3)), (1, checkin(3))]);
        assert!(matches!(
            decide(1, &[0, 1], (&all, &[2]), 1, 1),
            Verdict::Stop { reason } if reason.contains("without losing")
        ));
    }

    fn leaving_to_grow(k: usize) -> Checkin {
        Checkin {
            completed_iteration: k,
            failure: "left for the rank(s) asking to join".into(),
            grow: true,
        }
    }

    #[test]
    fn a_group_grows_without_a_loss_only_when_every_member_left_to_grow() {
        let all = BTreeMap::from([(0, leaving_to_grow(3)), (1, leaving_to_grow(3))]);
        let Verdict::Continue(plan) = decide(1, &[0, 1], (&all, &[4]), 1, 1) else {
            panic!("expected a plan");
        };
        assert_eq!(plan.members, vec![0, 1, 4]);
        assert_eq!(plan.joined, vec![4]);
        assert!(plan.lost_ranks.is_empty() && plan.lost_slots.is_empty());
        assert_eq!((plan.resume_from, plan.joiner_ranks()), (3, vec![2]));
        let r = Recovery::new(&plan, 0.5, &Error::Cancelled("grow".into()), 3, {
            Assignment::over(3, 8, None)
        });
        assert!(
            r.describe(WorkUnit::Iteration, 0).starts_with(
                "generation 1: rank(s) [4] joined; 3 rank(s) resume after iteration 3"
            ),
            "{}",
            r.describe(WorkUnit::Iteration, 0)
        );
        // Leaving to grow without anyone to take in: a stop, not an empty growth.
        assert!(matches!(
            decide(1, &[0, 1], (&all, &[]), 1, 1),
            Verdict::Stop { reason } if reason.contains("without losing")
        ));
        // One real failure among the check-ins: the group failed, and stops, joiners or not.
        let mixed = BTreeMap::from([(0, leaving_to_grow(3)), (1, checkin(3))]);
        assert!(matches!(
            decide(1, &[0, 1], (&mixed, &[4]), 1, 1),
            Verdict::Stop { reason } if reason.contains("rank 2 closed its connection")
        ));
        // A member lost while the others left to grow: a loss as any other, the joiner taken in.
        let one = BTreeMap::from([(0, leaving_to_grow(3))]);
        let Verdict::Continue(plan) = decide(1, &[0, 1], (&one, &[4]), 1, 1) else {
            panic!("expected a plan");
        };
        assert_eq!((plan.members, plan.lost_slots), (vec![0, 4], vec![1]));
    }

    #[test]
    fn a_joiners_loss_reported_by_its_tessera_join_reaches_the_launcher_once_written() {
        let mut coordinator = Coordinator::start(2, 1).unwrap();
        let addr = coordinator.addr();
        let timeout = Duration::from_secs(5);
        assert_eq!(coordinator.lost_joiners(&[4, 5]).unwrap(), []);
        report_joiner_lost(&addr, 5, "was killed by signal 9 (SIGKILL)", timeout).unwrap();
        assert_eq!(
            coordinator.lost_joiners(&[4, 5]).unwrap(),
            [(5, "was killed by signal 9 (SIGKILL)".to_string())]
        );
        // A joiner's bytes are shown as text whatever they are; a slot not asked about is not
        // looked at.
        StoreClient::connect(&addr, timeout)
            .unwrap()
            .set(&joiner_lost_key(4), &[0xff, b'x'])
            .unwrap();
        assert_eq!(
            coordinator.lost_joiners(&[4]).unwrap(),
            [(4, "\u{fffd}x".to_string())]
        );
    }

    #[test]
    fn a_joining_rank_is_asked_in_at_the_next_boundary_and_joins_the_grown_plan() {
        let mut coordinator = Coordinator::start(2, 1).unwrap();
        let addr = coordinator.addr();
        let timeout = Duration::from_secs(5);
        // Before the launcher's record, the store is not one a rank can join.
        let err = request_join(&addr, timeout).unwrap_err().to_string();
        assert!(
            err.contains(&addr) && err.contains("not the launcher"),
            "{err}"
        );
        let run = JoinableRun {
            args: vec!["run".into(), "multiblur".into()],
            cwd: "/".into(),
            world: 2,
            first_join_slot: 4,
            unit: WorkUnit::Iteration,
            refuses: None,
        };
        coordinator.advertise(&run).unwrap();
        let member = |slot| Member {
            client: StoreClient::connect(&addr, timeout).unwrap(),
            addr: addr.clone(),
            slot,
            generation: 0,
            verdict_timeout: timeout,
            replaces_into: None,
        };
        let (mut rank0, mut rank1) = (member(0), member(1));
        let mut probe = rank0.grow_probe().unwrap();
        let mut seen = 0;
        assert!(
            coordinator
                .take_join_requests(&mut seen)
                .unwrap()
                .is_empty()
        );
        assert!(!probe.asked(1, 1).unwrap());
        let (plans, joined) = std::thread::scope(|s| {
            let joiner = s.spawn(|| {
                let joining = request_join(&addr, timeout)?;
                let mut m = member(joining.slot);
                assert_eq!(joining.run, run);
                m.join_as_replacement(joining.generation)
            });
            let slots = loop {
                let slots = coordinator.take_join_requests(&mut seen).unwrap();
                if !slots.is_empty() {
                    break slots;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            assert_eq!((slots, seen), (vec![4], 1));
            // Rank 0 sees the request at its next boundary; both ranks leave after iteration 2.
            assert!(probe.asked(1, 2).unwrap());
            let a = s.spawn(|| rank0.leave_to_grow(2));
            let b = s.spawn(|| rank1.leave_to_grow(2));
            let (survivors, joiners) = loop {
                let found = coordinator.checked_in(&[0, 1]).unwrap();
                let joiners = coordinator.joining(&[4]).unwrap();
                if found.len() == 2 && joiners.len() == 1 {
                    break (found, joiners);
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            coordinator
                .publish(&survivors, &joiners, (4321, Duration::ZERO), None)
                .unwrap();
            let plans = [a.join().unwrap().unwrap(), b.join().unwrap().unwrap()];
            (plans, joiner.join().unwrap().unwrap())
        });
        for plan in plans.iter().chain([&joined]) {
            assert_eq!(plan.members, vec![0, 1, 4]);
            assert_eq!((plan.joined.clone(), plan.resume_from), (vec![4], 2));
        }
        assert_eq!(coordinator.members(), &[0, 1, 4]);
        // A second joiner after the run completed: refused by name, not left waiting.
        std::thread::scope(|s| {
            let late = s.spawn(|| -> Result<Plan> {
                let joining = request_join(&addr, timeout)?;
                assert_eq!(joining.slot, 5);
                member(joining.slot).join_as_replacement(joining.generation)
            });
            while coordinator
                .take_join_requests(&mut seen)
                .unwrap()
                .is_empty()
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            coordinator.refuse_joiners("the run completed").unwrap();
            let err = late.join().unwrap().unwrap_err().to_string();
            assert!(err.contains("the run completed"), "{err}");
        });
    }

    #[test]
    fn a_replacement_joins_the_plan_the_survivors_receive() {
        let mut coordinator = Coordinator::start(2, 1).unwrap();
        let member = |slot| Member {
            client: StoreClient::connect(&coordinator.addr(), Duration::from_secs(5)).unwrap(),
            addr: coordinator.addr(),
            slot,
            generation: 0,
            verdict_timeout: Duration::from_secs(5),
            replaces_into: None,
        };
        let (mut survivor, mut replacement) = (member(0), member(2));
        let lost = Error::PeerLost {
            rank: 1,
            how: "closed its connection".into(),
        };
        let generation = coordinator.next_generation();
        let (kept, joined) = std::thread::scope(|s| {
            let kept = s.spawn(|| survivor.rejoin(2, &lost));
            let joined = s.spawn(|| replacement.join_as_replacement(generation));
            let (survivors, joiners) = loop {
                let found = coordinator.checked_in(&[0]).unwrap();
                let joiners = coordinator.joining(&[2]).unwrap();
                if found.len() == 1 && joiners.len() == 1 {
                    break (found, joiners);
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            coordinator
                .publish(&survivors, &joiners, (4321, Duration::ZERO), None)
                .unwrap();
            (
                kept.join().unwrap().unwrap(),
                joined.join().unwrap().unwrap(),
            )
        });
        assert_eq!(kept.members, vec![0, 2]);
        assert_eq!((kept.joined.clone(), kept.resume_from), (vec![2], 2));
        assert_eq!(kept.members, joined.members);
        assert_eq!(coordinator.members(), &[0, 2]);
        assert_eq!((survivor.generation, replacement.generation), (1, 1));
        let r = Recovery::new(&kept, 0.5, &lost, 2, Assignment::over(2, 2, None));
        assert_eq!(r.joined, vec![2]);
        // The record says who joined; a record without joiners keeps its old JSON.
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["joined"], serde_json::json!([2]));
        let old = Recovery::new(
            &losing_rank_1_of_3().0,
            0.5,
            &lost,
            2,
            Assignment::over(2, 2, None),
        );
        let json = serde_json::to_value(&old).unwrap();
        assert!(json.get("joined").is_none(), "{json}");
        let back: Recovery = serde_json::from_value(json).unwrap();
        assert!(back.joined.is_empty());
    }

    /// The plan of ranks 0 and 2 after rank 1 of 3 was lost after iteration 3, and its error.
    fn losing_rank_1_of_3() -> (Plan, Error) {
        let survivors = BTreeMap::from([(0, checkin(3)), (2, checkin(3))]);
        let Verdict::Continue(plan) = decide(1, &[0, 1, 2], (&survivors, &[]), 1, 1) else {
            panic!("expected a plan");
        };
        let lost = Error::PeerLost {
            rank: 1,
            how: "closed its connection".into(),
        };
        (plan, lost)
    }

    #[test]
    fn a_recovery_describes_itself_in_the_run_s_unit() {
        let (plan, lost) = losing_rank_1_of_3();
        let fwi = Assignment {
            operators: Vec::new(),
            tiles: Vec::new(),
            batch_positions: vec![vec![0, 1], vec![2, 3]],
        };
        let r = Recovery::new(&plan, 1.5, &lost, 3, fwi);
        assert_eq!((r.generation, r.resumed_from), (1, 3));
        assert_eq!(r.members, vec![0, 2]);
        assert_eq!(
            r.describe(WorkUnit::Epoch, 1),
            "generation 1: lost rank(s) [1] (slots [1]); 2 rank(s) resume after epoch 3; this is \
             rank 1 of 2; batch positions by rank [[0, 1], [2, 3]]"
        );
        let imaging = Recovery::new(&plan, 1.5, &lost, 3, Assignment::over(2, 3, None));
        let line = imaging.describe(WorkUnit::Iteration, 0);
        assert!(
            line.contains(
                "resume after iteration 3; this is rank 0 of 2; operators by rank \
                 [[0, 2], [1]]"
            ),
            "{line}"
        );
        assert!(!line.contains("epoch"), "{line}");
    }

    #[test]
    fn recoveries_time_each_loss_from_the_run_s_start_to_the_first_work_after_it() {
        let (mut plan, lost) = losing_rank_1_of_3();
        // Started 3 s ago, so the moments below are past and their elapsed times not zero.
        let started = Instant::now() - Duration::from_secs(3);
        let mut recoveries = Recoveries::new(started);
        recoveries.work_completed();
        assert_eq!(recoveries.generation(), 0);
        let failed_at = started + Duration::from_millis(1500);
        // The launcher saw the loss 0.25 s before the survivor's failure and 1 s before this
        // survivor received the plan.
        plan.received_at = Some(started + Duration::from_millis(2250));
        plan.since_loss = Duration::from_secs(1);
        let assignment = Assignment::over(2, 3, None);
        let unit = (WorkUnit::Iteration, 0);
        recoveries.record(&plan, (failed_at, &lost), 3, assignment, unit);
        assert_eq!(recoveries.generation(), 1);
        let [r] = recoveries.list() else {
            panic!("expected one recovery");
        };
        assert_eq!((r.failed_at_secs, r.recovery_secs), (1.5, None));
        assert_eq!((r.lost_at_secs, r.since_loss_secs), (Some(1.25), None));
        std::thread::sleep(Duration::from_millis(5));
        recoveries.work_completed();
        let r = recoveries.list()[0].clone();
        let (timed, since_loss) = (r.recovery_secs.unwrap(), r.since_loss_secs.unwrap());
        // Both end at the same instant; the launcher's loss came 0.25 s before this rank's.
        let now = started.elapsed().as_secs_f64();
        assert!(timed > 0.0 && timed <= now - 1.5 + 1e-6, "{timed}");
        assert!(
            (since_loss - timed - 0.25).abs() < 0.01,
            "{since_loss} vs {timed}"
        );
        // Only the first unit of work after the loss ends its recovery.
        std::thread::sleep(Duration::from_millis(2));
        recoveries.work_completed();
        assert_eq!(recoveries.list()[0], r);
    }

    #[test]
    fn die_at_parses_its_points_and_refuses_the_rest() {
        assert_eq!(
            DieAt::parse("2:5").unwrap(),
            DieAt {
                rank: 2,
                iteration: 5,
                point: DiePoint::Start
            }
        );
        assert_eq!(
            DieAt::parse("1:3:denoiser").unwrap().point,
            DiePoint::Denoiser
        );
        assert_eq!(DieAt::parse("0:4:crash").unwrap().point, DiePoint::Crash);
        for bad in ["", "2", "a:1", "1:2:later", "1:2:3:4"] {
            assert!(DieAt::parse(bad).is_err(), "{bad}");
        }
        let list = DieAt::parse_list("1:2,3:4:denoiser").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!((list[1].rank, list[1].iteration), (3, 4));
        assert_eq!(list[1].point, DiePoint::Denoiser);
        for bad in ["1:2,", "1:2,,3:4", "1:2,1:4", "1:2;3:4"] {
            let err = DieAt::parse_list(bad).unwrap_err().to_string();
            assert!(err.contains(DIE_AT_ENV), "{bad}: {err}");
        }
    }

    #[test]
    fn coordinator_publishes_the_plan_a_member_receives() {
        let mut coordinator = Coordinator::start(3, 1).unwrap();
        let mut members: Vec<Member> = (0..3)
            .map(|slot| Member {
                client: StoreClient::connect(&coordinator.addr(), Duration::from_secs(5)).unwrap(),
                addr: coordinator.addr(),
                slot,
                generation: 0,
                verdict_timeout: Duration::from_secs(5),
                replaces_into: None,
            })
            .collect();
        members.remove(1);
        let lost = Error::PeerLost {
            rank: 1,
            how: "closed its connection".into(),
        };
        let plans = std::thread::scope(|s| {
            let handles: Vec<_> = members
                .iter_mut()
                .map(|m| s.spawn(|| m.rejoin(4, &lost)))
                .collect();
            let survivors = loop {
                let found = coordinator.checked_in(&[0, 1, 2]).unwrap();
                if found.len() == 2 {
                    break found;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            let since_loss = Duration::from_millis(250);
            coordinator
                .publish(&survivors, &[], (4321, since_loss), None)
                .unwrap();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect::<Vec<_>>()
        });
        // Each member dates the loss on its own clock: the launcher's delay before its receipt.
        for plan in &plans {
            assert_eq!(plan.since_loss, Duration::from_millis(250));
            let received = plan.received_at.expect("a received plan is dated");
            assert_eq!(plan.lost_at(), Some(received - plan.since_loss));
        }
        let sent = |p: &Plan| Plan {
            received_at: None,
            ..p.clone()
        };
        assert_eq!(sent(&plans[0]), sent(&plans[1]));
        assert_eq!(plans[0].members, vec![0, 2]);
        assert_eq!(plans[0].master_port, 4321);
        assert_eq!(coordinator.members(), &[0, 2]);
        assert!(members.iter().all(|m| m.generation == 1));
    }

    proptest! {
        /// Any set of survivors, any iteration: every operator and tile is owned exactly once by a
        /// member of the new generation.
        #[test]
        fn replanning_owns_every_operator_and_tile_exactly_once(
            world in 1usize..9,
            lost_mask in any::<u16>(),
            completed in proptest::collection::vec(0usize..50, 8),
            operators in 1usize..13,
            size in 40usize..90,
            tile in 8usize..40,
            cost_aware in any::<bool>(),
        ) {
            let members: Vec<usize> = (0..world).collect();
            let survivors: BTreeMap<usize, Checkin> = members
                .iter()
                .filter(|&&s| lost_mask & (1 << s) == 0)
                .map(|&s| (s, checkin(completed[s])))
                .collect();
            let verdict = decide(1, &members, (&survivors, &[]), 1, 1);
            let plan = match verdict {
                Verdict::Continue(plan) => plan,
                Verdict::Stop { .. } => {
                    prop_assert!(survivors.is_empty() || survivors.len() == world);
                    return Ok(());
                }
            };
            prop_assert_eq!(plan.members.len(), survivors.len());
            prop_assert_eq!(
                plan.resume_from,
                survivors.values().map(|c| c.completed_iteration).min().unwrap()
            );
            let tiling = TilingConfig {
                kind: TilingKind::Overlap,
                patch_size: Extent::Uniform(tile),
                overlap: Some(Extent::Uniform(4)),
                ..TilingConfig::default()
            };
            let tile_plan = tiling.build().unwrap().plan(&[size, size + 3]).unwrap();
            let how = if cost_aware { TileAssignment::CostAware } else { TileAssignment::RoundRobin };
            let a = Assignment::over(plan.members.len(), operators, Some((&tile_plan, how)));
            let mut ops: Vec<usize> = a.operators.concat();
            ops.sort_unstable();
            prop_assert_eq!(ops, (0..operators).collect::<Vec<_>>());
            let mut tiles: Vec<usize> = a.tiles.concat();
            tiles.sort_unstable();
            prop_assert_eq!(tiles, (0..tile_plan.num_tiles()).collect::<Vec<_>>());
        }
    }
}
