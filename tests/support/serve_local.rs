//! A local `tessera serve` (the binary under test, on local ranks) driven through a protocol
//! `Client`: start one, submit a small quick preset, collect events until one matches. Shared by
//! tests/serve.rs and benches/serve.rs.

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use tessera::preset::Preset;
use tessera::protocol::{Client, ClientEvent, Event, LocalBackend, LocalOptions, Request};

pub const EXE: &str = env!("CARGO_BIN_EXE_tessera");
pub const WAIT: Duration = Duration::from_secs(120);

pub fn local(ranks: usize) -> (LocalBackend, Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = LocalOptions::new(ranks, dir.path().join("out"));
    opts.exe = Some(EXE.into());
    let (backend, client) = LocalBackend::spawn_with(opts).unwrap();
    (backend, client, dir)
}

/// The quick preset on a small image with `iterations`.
pub fn quick(iterations: usize) -> String {
    Preset::load(
        "quick",
        &[
            format!("algorithm.iterations={iterations}"),
            "image.size=[48, 40]".into(),
        ],
    )
    .unwrap()
    .preset
    .to_toml()
    .unwrap()
}

pub fn submit(client: &Client, preset_toml: String) {
    client
        .send(Request::Submit {
            preset_toml,
            inline: Vec::new(),
            files: Vec::new(),
            preview_max_side: 32,
        })
        .unwrap();
}

/// Collects events until `stop` matches one (included); panics on disconnection, or when no event
/// came for [`WAIT`] (a stalled backend; a long job on a loaded machine goes on while it streams).
pub fn until(client: &Client, mut stop: impl FnMut(&Event) -> bool) -> Vec<Event> {
    let mut seen = Vec::new();
    loop {
        match client.events().recv_timeout(WAIT) {
            Ok(ClientEvent::Event(e)) => {
                let done = stop(&e);
                seen.push(e);
                if done {
                    return seen;
                }
            }
            Ok(ClientEvent::Disconnected(why)) => panic!("disconnected: {why}; saw {seen:#?}"),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                panic!("no event for {WAIT:?}; saw {} events", seen.len())
            }
        }
    }
}

pub fn is_end(e: &Event) -> bool {
    matches!(
        e,
        Event::Finished { .. } | Event::Cancelled { .. } | Event::Failed { .. }
    )
}
