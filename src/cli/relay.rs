//! `tessera relay` (hidden): the delaying TCP relay of the multi-host rehearsal
//! (`dist::relay`, started by scripts/netns-hosts.sh --delay). Runs until killed, one line per
//! connection opened and closed; a connection that ends in a failure is named on stderr.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use tessera::dist::relay::{self, Link, Relay, RelayEvent, Target};

use super::output::{complain, say};

pub(super) fn relay(
    delay: &str,
    listen: &[String],
    to: Option<SocketAddr>,
    to_net: Option<&str>,
    ready_file: Option<&Path>,
) -> Result<()> {
    let delay = relay::parse_delay(delay)?;
    let target = match (to, to_net) {
        (Some(a), _) => Target::Fixed(a),
        (None, Some(net)) => Target::parse_network(net)?,
        (None, None) => anyhow::bail!("--to or --to-net: where to relay connections"),
    };
    let mut addrs = Vec::new();
    for l in listen {
        addrs.extend(relay::parse_listen(l)?);
    }
    let relay = Relay::start(&addrs, Link::new(target, delay))?;
    if let Some(f) = ready_file {
        std::fs::write(f, b"").with_context(|| format!("writing {}", f.display()))?;
    }
    say!(
        "relay: {} address(es), one-way delay {:?}",
        relay.local_addrs().len(),
        delay
    );
    loop {
        match relay.next_event(Duration::from_secs(3600)) {
            Some(RelayEvent::Opened {
                client,
                dialled,
                target,
            }) => say!("relay: open {client} -> {target} (dialled {dialled})"),
            Some(RelayEvent::Closed(r)) => {
                let target = r.target.map_or("?".to_string(), |t| t.to_string());
                match r.error {
                    None => say!(
                        "relay: closed {} -> {target}: {} B there, {} B back",
                        r.client,
                        r.bytes_to_target,
                        r.bytes_to_client
                    ),
                    Some(e) => complain(format_args!(
                        "relay: {} -> {target} ended after {} B there, {} B back: {e}",
                        r.client, r.bytes_to_target, r.bytes_to_client
                    )),
                }
            }
            None => {}
        }
    }
}
