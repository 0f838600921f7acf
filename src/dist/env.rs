//! Rank discovery: who am I in the process group, how many of us are there, and where is rank 0.
//!
//! Sources, in this order: explicit CLI flags; torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`); Open MPI (`OMPI_COMM_WORLD_*`); PMI/PMIx
//! (`PMIX_RANK` / `PMI_RANK`, `PMI_SIZE`); slurm (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`,
//! master = first host of `SLURM_JOB_NODELIST`); otherwise a single process. Inconsistent or unparsable
//! values are errors that name the variable.

use crate::error::{Error, Result};

/// Port of the rendezvous store when none is given (torchrun's default).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// Where the rank information came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankSource {
    Flags,
    Torchrun,
    OpenMpi,
    Pmi,
    Slurm,
    Single,
}

/// This process's place in the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankInfo {
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: usize,
    pub local_world_size: usize,
    /// Host of rank 0's rendezvous store.
    pub master_addr: String,
    pub master_port: u16,
    pub source: RankSource,
}

/// Values given on the command line (they win over the environment).
#[derive(Debug, Clone, Default)]
pub struct RankFlags {
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
}

/// The launcher that started this process as a rank of a group it leads — torchrun, mpirun,
/// a PMI launcher, srun — if any (not `--rank`/`--world-size` given by hand, nor tessera's own
/// `--ranks N`, which sets none of these variables).
pub fn outside_launcher() -> Option<RankSource> {
    let info = RankInfo::discover(&RankFlags::default()).ok()?;
    match info.source {
        RankSource::Torchrun | RankSource::OpenMpi | RankSource::Pmi | RankSource::Slurm => {
            Some(info.source)
        }
        RankSource::Flags | RankSource::Single => None,
    }
}

impl RankInfo {
    /// A group of one.
    pub fn single() -> Self {
        RankInfo {
            rank: 0,
            world_size: 1,
            local_rank: 0,
            local_world_size: 1,
            master_addr: "127.0.0.1".into(),
            master_port: DEFAULT_MASTER_PORT,
            source: RankSource::Single,
        }
    }

    /// Whether every rank runs on this host (then Unix sockets can be used).
    pub fn single_host(&self) -> bool {
        self.local_world_size == self.world_size
    }

    /// Discovers the rank from flags and the process environment.
    pub fn discover(flags: &RankFlags) -> Result<Self> {
        Self::discover_with(flags, |k| std::env::var(k).ok())
    }

    /// Discovers the rank from flags and an environment lookup (for tests).
    pub fn discover_with(flags: &RankFlags, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let master_port = match flags.master_port {
            Some(p) => p,
            None => match env("MASTER_PORT") {
                Some(v) => parse::<u16>("MASTER_PORT", &v)?,
                None => DEFAULT_MASTER_PORT,
            },
        };
        let master_env = flags.master_addr.clone().or_else(|| env("MASTER_ADDR"));

        let info = if let (Some(rank), Some(world_size)) = (flags.rank, flags.world_size) {
            RankInfo {
                rank,
                world_size,
                local_rank: rank,
                local_world_size: world_size,
                master_addr: master_env.unwrap_or_else(|| "127.0.0.1".into()),
                master_port,
                source: RankSource::Flags,
            }
        } else if flags.rank.is_some() != flags.world_size.is_some() {
            return Err(Error::config(
                "--rank/--world-size",
                "give both --rank and --world-size, or neither",
            ));
        } else if let (Some(r), Some(w)) = (env("RANK"), env("WORLD_SIZE")) {
            let rank = parse("RANK", &r)?;
            let world_size = parse("WORLD_SIZE", &w)?;
            let local_rank = opt_parse(&env, "LOCAL_RANK")?.unwrap_or(rank);
            let local_world_size = opt_parse(&env, "LOCAL_WORLD_SIZE")?.unwrap_or(world_size);
            let master_addr = master_env.ok_or_else(|| {
                Error::config(
                    "MASTER_ADDR",
                    "torchrun-style launch (RANK, WORLD_SIZE set) without MASTER_ADDR",
                )
            })?;
            RankInfo {
                rank,
                world_size,
                local_rank,
                local_world_size,
                master_addr,
                master_port,
                source: RankSource::Torchrun,
            }
        } else if let Some(r) = env("OMPI_COMM_WORLD_RANK") {
            let vars = MpiVars {
                rank: "OMPI_COMM_WORLD_RANK",
                size: "OMPI_COMM_WORLD_SIZE",
                local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
                local_size: "OMPI_COMM_WORLD_LOCAL_SIZE",
                launcher: "Open MPI",
                source: RankSource::OpenMpi,
            };
            vars.read(&env, &r, master_env, master_port)?
        } else if let Some((var, r)) = env("PMIX_RANK")
            .map(|v| ("PMIX_RANK", v))
            .or_else(|| env("PMI_RANK").map(|v| ("PMI_RANK", v)))
        {
            let vars = MpiVars {
                rank: var,
                size: "PMI_SIZE",
                local_rank: "PMI_LOCAL_RANK",
                local_size: "PMI_LOCAL_SIZE",
                launcher: "PMI",
                source: RankSource::Pmi,
            };
            vars.read(&env, &r, master_env, master_port)?
        } else if let Some(r) = env("SLURM_PROCID") {
            let rank = parse("SLURM_PROCID", &r)?;
            let world_size = required(&env, "SLURM_NTASKS")?;
            let local_rank = opt_parse(&env, "SLURM_LOCALID")?.unwrap_or(rank);
            let local_world_size = match env("SLURM_NTASKS_PER_NODE") {
                Some(v) => parse_slurm_count("SLURM_NTASKS_PER_NODE", &v)?,
                None => world_size,
            };
            let master_addr = match master_env {
                Some(a) => a,
                None => {
                    let list = env("SLURM_JOB_NODELIST")
                        .or_else(|| env("SLURM_NODELIST"))
                        .ok_or_else(|| {
                            Error::config(
                                "SLURM_JOB_NODELIST",
                                "slurm launch without a node list or MASTER_ADDR",
                            )
                        })?;
                    first_slurm_host(&list)?
                }
            };
            RankInfo {
                rank,
                world_size,
                local_rank,
                local_world_size,
                master_addr,
                master_port,
                source: RankSource::Slurm,
            }
        } else {
            RankInfo {
                master_addr: master_env.unwrap_or_else(|| "127.0.0.1".into()),
                master_port,
                ..RankInfo::single()
            }
        };
        info.check()?;
        Ok(info)
    }

    fn check(&self) -> Result<()> {
        let what = format!("{:?}", self.source);
        if self.world_size == 0 {
            return Err(Error::config("world size", format!("is 0 ({what})")));
        }
        if self.rank >= self.world_size {
            return Err(Error::config(
                "rank",
                format!(
                    "rank {} is not below the world size {} ({what})",
                    self.rank, self.world_size
                ),
            ));
        }
        if self.local_world_size == 0 || self.local_world_size > self.world_size {
            return Err(Error::config(
                "local world size",
                format!(
                    "{} must be between 1 and the world size {} ({what})",
                    self.local_world_size, self.world_size
                ),
            ));
        }
        if self.local_rank >= self.local_world_size {
            return Err(Error::config(
                "local rank",
                format!(
                    "{} is not below the local world size {} ({what})",
                    self.local_rank, self.local_world_size
                ),
            ));
        }
        Ok(())
    }
}

/// The variable names of an MPI-style launcher (which does not say where rank 0 is).
struct MpiVars {
    rank: &'static str,
    size: &'static str,
    local_rank: &'static str,
    local_size: &'static str,
    launcher: &'static str,
    source: RankSource,
}

impl MpiVars {
    fn read(
        &self,
        env: &impl Fn(&str) -> Option<String>,
        rank_value: &str,
        master_env: Option<String>,
        master_port: u16,
    ) -> Result<RankInfo> {
        let rank = parse(self.rank, rank_value)?;
        let world_size = required(env, self.size)?;
        let local_rank = opt_parse(env, self.local_rank)?.unwrap_or(rank);
        let local_world_size = opt_parse(env, self.local_size)?.unwrap_or(world_size);
        let master_addr = local_master(master_env, local_world_size, world_size, self.launcher)?;
        Ok(RankInfo {
            rank,
            world_size,
            local_rank,
            local_world_size,
            master_addr,
            master_port,
            source: self.source,
        })
    }
}

fn parse<T: std::str::FromStr>(var: &str, value: &str) -> Result<T> {
    value
        .trim()
        .parse()
        .map_err(|_| Error::config(var, format!("`{value}` is not a valid number")))
}

fn required(env: &impl Fn(&str) -> Option<String>, var: &str) -> Result<usize> {
    let v = env(var).ok_or_else(|| Error::config(var, "is not set"))?;
    parse(var, &v)
}

fn opt_parse(env: &impl Fn(&str) -> Option<String>, var: &str) -> Result<Option<usize>> {
    env(var).map(|v| parse(var, &v)).transpose()
}

/// MPI-style launches do not say where rank 0 is: on one host it is loopback, else MASTER_ADDR is needed.
fn local_master(
    master: Option<String>,
    local: usize,
    world: usize,
    launcher: &str,
) -> Result<String> {
    match master {
        Some(a) => Ok(a),
        None if local == world => Ok("127.0.0.1".into()),
        None => Err(Error::config(
            "MASTER_ADDR",
            format!("{launcher} launch across hosts needs MASTER_ADDR (the host of rank 0)"),
        )),
    }
}

/// `SLURM_NTASKS_PER_NODE` may read `4` or `4(x2)`; the count is the leading number.
fn parse_slurm_count(var: &str, value: &str) -> Result<usize> {
    let head: String = value.chars().take_while(|c| c.is_ascii_digit()).collect();
    parse(var, &head)
}

/// The first host of a slurm node list: `node[003-006,010],gpu1` → `node003`.
pub fn first_slurm_host(list: &str) -> Result<String> {
    let bad = || {
        Error::config(
            "SLURM_JOB_NODELIST",
            format!("cannot read the node list `{list}`"),
        )
    };
    let list = list.trim();
    let first_end = {
        let mut depth = 0i32;
        list.char_indices()
            .find(|&(_, c)| {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .map(|(i, _)| i)
            .unwrap_or(list.len())
    };
    let first = &list[..first_end];
    if first.is_empty() {
        return Err(bad());
    }
    match first.find('[') {
        None => Ok(first.to_string()),
        Some(open) => {
            let close = first.rfind(']').ok_or_else(bad)?;
            let prefix = &first[..open];
            let ranges = &first[open + 1..close];
            let first_range = ranges.split(',').next().ok_or_else(bad)?;
            let start = first_range.split('-').next().ok_or_else(bad)?;
            if start.is_empty() || !start.chars().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            Ok(format!("{prefix}{start}{}", &first[close + 1..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn nothing_set_is_a_single_process() {
        let i = RankInfo::discover_with(&RankFlags::default(), env(&[])).unwrap();
        assert_eq!((i.rank, i.world_size, i.source), (0, 1, RankSource::Single));
    }

    #[test]
    fn flags_win_over_the_environment() {
        let flags = RankFlags {
            rank: Some(1),
            world_size: Some(3),
            ..Default::default()
        };
        let i =
            RankInfo::discover_with(&flags, env(&[("RANK", "0"), ("WORLD_SIZE", "2")])).unwrap();
        assert_eq!((i.rank, i.world_size, i.source), (1, 3, RankSource::Flags));
    }

    #[test]
    fn torchrun_variables() {
        let i = RankInfo::discover_with(
            &RankFlags::default(),
            env(&[
                ("RANK", "5"),
                ("WORLD_SIZE", "8"),
                ("LOCAL_RANK", "1"),
                ("LOCAL_WORLD_SIZE", "4"),
                ("MASTER_ADDR", "n1"),
                ("MASTER_PORT", "1234"),
            ]),
        )
        .unwrap();
        assert_eq!(
            i,
            RankInfo {
                rank: 5,
                world_size: 8,
                local_rank: 1,
                local_world_size: 4,
                master_addr: "n1".into(),
                master_port: 1234,
                source: RankSource::Torchrun,
            }
        );
        assert!(!i.single_host());
    }

    #[test]
    fn open_mpi_pmi_and_slurm() {
        let i = RankInfo::discover_with(
            &RankFlags::default(),
            env(&[
                ("OMPI_COMM_WORLD_RANK", "2"),
                ("OMPI_COMM_WORLD_SIZE", "3"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "3"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.source, i.master_addr.as_str()),
            (2, 3, RankSource::OpenMpi, "127.0.0.1")
        );
        let i = RankInfo::discover_with(
            &RankFlags::default(),
            env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]),
        )
        .unwrap();
        assert_eq!((i.rank, i.source), (1, RankSource::Pmi));
        let i = RankInfo::discover_with(
            &RankFlags::default(),
            env(&[
                ("SLURM_PROCID", "3"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_LOCALID", "1"),
                ("SLURM_NTASKS_PER_NODE", "2(x2)"),
                ("SLURM_JOB_NODELIST", "gpu[017-018,020],login"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (i.rank, i.local_world_size, i.master_addr.as_str()),
            (3, 2, "gpu017")
        );
    }

    #[test]
    fn inconsistent_values_are_named() {
        let error = |vars: &[(&str, &str)]| {
            RankInfo::discover_with(&RankFlags::default(), env(vars))
                .unwrap_err()
                .to_string()
        };
        let e = error(&[("RANK", "2"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")]);
        assert!(e.contains("rank 2") && e.contains("world size 2"), "{e}");
        let e = error(&[("RANK", "x"), ("WORLD_SIZE", "2")]);
        assert!(e.contains("RANK") && e.contains("`x`"), "{e}");
        let e = error(&[("RANK", "0"), ("WORLD_SIZE", "0"), ("MASTER_ADDR", "h")]);
        assert!(e.contains("world size"), "{e}");
        let e = error(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "99999"),
        ]);
        assert!(e.contains("MASTER_PORT"), "{e}");
        let e = error(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ]);
        assert!(e.contains("MASTER_ADDR"), "{e}");
    }

    #[test]
    fn slurm_node_lists() {
        assert_eq!(first_slurm_host("node01").unwrap(), "node01");
        assert_eq!(first_slurm_host("a,b").unwrap(), "a");
        assert_eq!(
            first_slurm_host("node[003-006,010],gpu1").unwrap(),
            "node003"
        );
        assert_eq!(first_slurm_host("r[1-2]-ib").unwrap(), "r1-ib");
        assert!(first_slurm_host("").is_err());
        assert!(first_slurm_host("n[x-2]").is_err());
    }
}
