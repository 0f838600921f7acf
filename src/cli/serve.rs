//! `tessera serve`: the control address, its token file and the persistent group behind it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use tessera::dist::{self, RankInfo};

use super::args::GroupArgs;
use super::group::{join_as_started, join_with, place_threads, rank_flags, strip_option};

/// Default control address of `tessera serve` (loopback: reach it from elsewhere by SSH tunnel).
const DEFAULT_LISTEN: &str = "127.0.0.1:7341";

pub(super) fn serve(
    socket: Option<PathBuf>,
    listen: Option<String>,
    token_file: Option<&Path>,
    out: PathBuf,
    (device, elastic, respawn): (Option<&str>, bool, bool),
    group: &GroupArgs,
) -> Result<()> {
    use tessera::serve::{ElasticBackend, Endpoint, ServeOptions};
    // A bad name fails before the group forms; a job's device is checked when it is submitted.
    let device = device
        .map(|d| tessera::device::Device::parse("--device", d))
        .transpose()?;
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    if respawn && !elastic {
        bail!(
            "--respawn needs --elastic: a replacement joins the group that the survivors of a \
             lost rank re-form (docs/ELASTIC.md)"
        );
    }
    if elastic && !launched {
        if let super::run::ElasticMode::Checkpointed(_) = super::run::check_elastic(group, false)? {
            bail!(
                "tessera serve --elastic needs --ranks N (N ≥ 2): a backend under mpirun, srun or \
                 torchrun cannot re-form its group, and it keeps no checkpoint of a job to \
                 continue from (docs/ELASTIC.md)"
            );
        }
        if let Some(d) = device.as_ref().filter(|d| d.is_cuda()) {
            bail!(
                "--device {d} with --elastic: elastic jobs are not on the GPU yet (docs/GPU.md); \
                 serve on the CPU (--device cpu) meanwhile"
            );
        }
    }
    let endpoint = match (socket, listen) {
        (Some(p), _) => Endpoint::Unix(p),
        (None, Some(l)) if l.parse::<u16>().is_ok() => Endpoint::Tcp(format!("127.0.0.1:{l}")),
        (None, Some(l)) => Endpoint::Tcp(l),
        (None, None) => Endpoint::Tcp(DEFAULT_LISTEN.into()),
    };
    // TCP clients need the token; only rank 0 listens, but every rank checks the file so that a
    // bad one fails before the group forms.
    let token = match &endpoint {
        Endpoint::Unix(_) => None,
        Endpoint::Tcp(_) => {
            let path = match token_file {
                Some(f) => f.to_path_buf(),
                None => default_token_file()?,
            };
            let (token, created) = tessera::protocol::auth::Token::load_or_create(&path)
                .context("the token for TCP clients")?;
            if created && !launched {
                super::output::complain(format_args!(
                    "tessera serve: wrote a new random token to {} (clients need it)",
                    path.display()
                ));
            }
            Some(token)
        }
    };
    if let Some(n) = group.ranks.filter(|&n| n > 1 && !launched) {
        let args = strip_option(std::env::args_os().skip(1), "--ranks");
        if elastic {
            let options = dist::launch::ElasticOptions {
                min_ranks: 1,
                checkin_timeout: Duration::from_secs(group.rendezvous_timeout as u64),
                unit: dist::elastic::WorkUnit::Iteration,
                slot0_essential: Some(SLOT0_ESSENTIAL),
                respawn,
                // A served job's preset is not known when the group re-forms.
                admit: None,
            };
            dist::launch::launch_elastic(n, &args, options).context("elastic serve group")?;
        } else {
            dist::launch::launch(n, &args).context("local process group")?;
        }
        return Ok(());
    }
    place_threads(group, None)?;
    let mut member = match launched && elastic {
        true => {
            let timeout = Duration::from_secs(2 * group.rendezvous_timeout as u64);
            let member = dist::elastic::Member::from_env(timeout)
                .context("reaching the elastic launcher")?
                .context("--elastic: this rank was not started by an elastic launcher")?;
            Some(member)
        }
        false => None,
    };
    // A replacement (--respawn) joins the generation the launcher started it for.
    let (comm, joined) = join_as_started(group, member.as_mut())?;
    let elastic = member.map(|member| {
        let group = group.clone();
        ElasticBackend {
            member,
            join: Box::new(move |info: &RankInfo| join_with(&group, info)),
            joined,
        }
    });
    let info = RankInfo::discover(&rank_flags(group))?;
    let opts = ServeOptions {
        endpoint,
        token,
        out_dir: out,
        ranks_here: info.local_world_size,
        op_timeout: Some(Duration::from_secs(group.op_timeout as u64)),
        device,
    };
    tessera::serve::serve(comm, &opts, elastic).context("tessera serve")
}

/// Why an elastic backend cannot survive the loss of rank 0 (the launcher's message).
const SLOT0_ESSENTIAL: &str = "it holds the backend's control socket, its clients' connections \
     and the job queue, which no other rank can take over, so the backend stops (start it again; \
     the clients see the connection close)";

/// `$XDG_CONFIG_HOME/tessera/serve-token`, else `~/.config/tessera/serve-token` (the folder is
/// created private).
pub(super) fn default_token_file() -> Result<PathBuf> {
    let config = match (
        std::env::var_os("XDG_CONFIG_HOME"),
        std::env::var_os("HOME"),
    ) {
        (Some(x), _) if !x.is_empty() => PathBuf::from(x),
        (_, Some(h)) if !h.is_empty() => PathBuf::from(h).join(".config"),
        _ => bail!("no HOME to keep the token in; give --token-file FILE"),
    };
    let dir = config.join("tessera");
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(dir.join("serve-token"))
}
