//! `tessera join ADDR`: a rank that joins a running elastic run at its next iteration boundary
//! (`dist::elastic::request_join`, `docs/ELASTIC.md`, "Growing"). It registers with the launcher's
//! store, then runs the run's own rank command line as a child (the process a `--respawn`
//! replacement is), forwarding its output, and ends with it.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use tessera::dist::elastic::{self, request_join};
use tessera::dist::launch::{LAUNCHED_ENV, describe, die_with_parent};

use super::output::say;

pub(super) fn join(addr: &str, timeout_secs: usize) -> Result<()> {
    let timeout = Duration::from_secs(timeout_secs as u64);
    let joining = request_join(addr, timeout)?;
    let (slot, generation, run) = (joining.slot, joining.generation, joining.run);
    let cwd = Path::new(&run.cwd);
    if !cwd.is_dir() {
        bail!(
            "the elastic run at {addr} works in {}, which this host does not have (a joining \
             rank runs the run's command line there: same preset and input paths)",
            run.cwd
        );
    }
    say!(
        "joining the elastic run at {addr} as rank {slot}: it joins generation {generation} at \
         the run's next {} boundary",
        run.unit
    );
    let exe = std::env::current_exe().context("finding this executable")?;
    // Its place on this host (RANK/LOCAL_RANK: threads and cores) is one of the run's ranks'; its
    // rank in the group comes from the generation's plan.
    let place = (slot % run.world.max(1)).to_string();
    let world = run.world.to_string();
    let mut cmd = Command::new(&exe);
    cmd.args(&run.args)
        .current_dir(cwd)
        .env("RANK", &place)
        .env("WORLD_SIZE", &world)
        .env("LOCAL_RANK", &place)
        .env("LOCAL_WORLD_SIZE", &world)
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "0")
        .env(LAUNCHED_ENV, "1")
        .env(elastic::STORE_ENV, addr)
        .env(elastic::SLOT_ENV, slot.to_string())
        .env(elastic::JOIN_ENV, generation.to_string())
        .stdin(Stdio::null());
    die_with_parent(&mut cmd);
    let status = cmd
        .status()
        .with_context(|| format!("starting the joining rank {}", exe.display()))?;
    if !status.success() {
        if status.signal().is_some() {
            // The launcher cannot reap this rank: without this word it would wait out its
            // check-in timeout before the others go on.
            if let Err(e) = elastic::report_joiner_lost(addr, slot, &describe(status), timeout) {
                super::output::complain(format_args!(
                    "tessera join: could not tell the launcher at {addr} that rank {slot} is \
                     lost ({e}); it counts it lost after its check-in timeout"
                ));
            }
        }
        bail!(
            "the joining rank {slot} of the elastic run at {addr} {}",
            describe(status)
        );
    }
    say!("rank {slot} left the elastic run at {addr}: the run completed");
    Ok(())
}
