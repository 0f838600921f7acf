//! The real backend: a [`Client`] connection to `tessera serve`, optionally with the
//! [`LocalBackend`] child process it talks to (stopped when this is dropped).

use super::backend::{Backend, Incoming, Link, Starter};
use crate::error::Result;
use crate::protocol::{Client, ClientEvent, Event, LocalBackend, LocalOptions, Request};

/// A connection, and the local backend process when the workbench started it.
pub struct ServeBackend {
    client: Client,
    /// Kept alive as long as the connection: dropping it stops the child.
    _local: Option<LocalBackend>,
    /// The handshake's welcome, handed to the app as the first event.
    welcome: Option<Event>,
    label: String,
}

impl ServeBackend {
    pub fn new(client: Client, local: Option<LocalBackend>, label: String) -> ServeBackend {
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
        Ok(Box::new(ServeBackend::new(client, Some(local), label)) as Link)
    })
}
