//! The real backend: a [`Client`] connection to `tessera serve`, optionally with the
//! [`LocalBackend`] child process it talks to (stopped when this is dropped, and the run it was
//! writing removed: see [`LocalChild`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::backend::{Backend, Incoming, Link, Starter};
use crate::error::Result;
use crate::io::run_dir::{STAGING_PREFIX, remove_abandoned_staging};
use crate::protocol::{Client, ClientEvent, Event, LocalBackend, LocalOptions, Request};

/// A local backend process and its output root. Stopping it (a restart, a new attach, closing the
/// window) kills its ranks mid-run, so the run they were staging can never be completed: once the
/// process is gone its staging folder is removed, rather than left in the user's output folder.
pub struct LocalChild {
    backend: Option<LocalBackend>,
    out_dir: PathBuf,
}

impl LocalChild {
    pub fn new(backend: LocalBackend, out_dir: PathBuf) -> LocalChild {
        LocalChild {
            backend: Some(backend),
            out_dir,
        }
    }
}

/// How long the ranks of a stopped backend get to die (they follow their launcher by
/// `PR_SET_PDEATHSIG`, a moment after it) before their staging folders are given up on.
const RANKS_GONE_WITHIN: Duration = Duration::from_secs(5);

impl Drop for LocalChild {
    fn drop(&mut self) {
        // Waits for the launcher to exit.
        drop(self.backend.take());
        let start = Instant::now();
        loop {
            let removed = remove_abandoned_staging(&self.out_dir);
            for r in &removed {
                tracing::info!(
                    "removed the unfinished run of the stopped backend: {}",
                    r.display()
                );
            }
            let left = std::fs::read_dir(&self.out_dir)
                .map(|d| {
                    d.flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with(STAGING_PREFIX))
                })
                .unwrap_or(false);
            if !left || start.elapsed() > RANKS_GONE_WITHIN {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A connection, and the local backend process when the workbench started it.
pub struct ServeBackend {
    client: Client,
    /// Kept alive as long as the connection: dropping it stops the child.
    _local: Option<LocalChild>,
    /// The handshake's welcome, handed to the app as the first event.
    welcome: Option<Event>,
    label: String,
}

impl ServeBackend {
    pub fn new(client: Client, local: Option<LocalChild>, label: String) -> ServeBackend {
        let w = client.welcome().clone();
        ServeBackend {
            welcome: Some(Event::Welcome {
                protocol: w.protocol,
                server: w.server,
                world_size: w.world_size,
                devices: w.devices,
                backend: w.backend,
            }),
            client,
            _local: local,
            label,
        }
    }
}

impl Backend for ServeBackend {
    fn send(&mut self, request: Request) -> Result<()> {
        self.client.send(request)
    }

    fn try_recv(&mut self) -> Option<Incoming> {
        if let Some(w) = self.welcome.take() {
            return Some(Incoming::Event(w));
        }
        self.client.try_recv().map(|e| match e {
            ClientEvent::Event(e) => Incoming::Event(e),
            ClientEvent::Disconnected(reason) => Incoming::Disconnected(reason),
        })
    }

    fn set_waker(&mut self, wake: Box<dyn Fn() + Send + Sync>) {
        self.client.set_waker(wake);
    }

    fn describe(&self) -> String {
        self.label.clone()
    }
}

/// Starts `tessera serve --ranks N` on this machine with `options` (its `ranks` replaced by the
/// number the user asks for) and connects to it.
pub fn local_starter(options: LocalOptions) -> Starter {
    Box::new(move |ranks| {
        let opts = LocalOptions {
            ranks,
            ..options.clone()
        };
        let (local, client) = LocalBackend::spawn_with(opts)?;
        let label = format!("local backend (outputs in {})", options.out_dir.display());
        let local = LocalChild::new(local, options.out_dir.clone());
        Ok(Box::new(ServeBackend::new(client, Some(local), label)) as Link)
    })
}
