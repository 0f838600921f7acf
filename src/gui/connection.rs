//! The workbench's connection to a backend, kept apart from the panels: which [`Link`] is live,
//! starting a local backend or attaching to a remote one on a helper thread, and the generation
//! number that tells events of the current link from those of an older one.
//!
//! A new backend replaces the current one only once it is connected: a failed start or attach
//! (a refused connection, a wrong token) leaves the working backend as it was.

use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};

use super::backend::{Link, Starter};
use super::preview::{Pump, PumpMsg};
use crate::protocol::{BackendAddr, Request};

/// Events taken from the backend per frame (a flood must not stall a frame).
const MAX_EVENTS_PER_FRAME: usize = 1000;

/// What is being connected on the helper thread.
#[derive(Debug, Clone, PartialEq)]
pub enum Connecting {
    /// A local backend of this many ranks.
    Local(usize),
    /// A running `tessera serve` at this address.
    Remote(String),
}

/// What changed in [`Connection::poll`].
pub enum Change {
    /// The new link is live (the old one was let go); `remote` tells whether it is attached.
    Connected { label: String, remote: bool },
    /// Starting or attaching failed; the previous backend, if any, is still live.
    Failed { what: Connecting, error: String },
}

/// The live link and the one being connected.
pub struct Connection {
    link: Option<Link>,
    label: String,
    remote: bool,
    /// Generation of the live link; events of older ones are dropped.
    generation: u64,
    starter: Arc<Mutex<Starter>>,
    pending: Option<(Connecting, Receiver<crate::Result<Link>>)>,
}

impl Connection {
    pub fn new(starter: Starter) -> Connection {
        Connection {
            link: None,
            label: String::new(),
            remote: false,
            generation: 0,
            starter: Arc::new(Mutex::new(starter)),
            pending: None,
        }
    }

    /// Starts a local backend of `ranks` ranks on a helper thread; it replaces the current one
    /// when it is up. Does nothing while another start or attach is under way.
    pub fn start_local(&mut self, ranks: usize, wake: impl Fn() + Send + 'static) -> bool {
        if self.pending.is_some() {
            return false;
        }
        let starter = self.starter.clone();
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gui-start-backend".into())
            .spawn(move || {
                let mut start = starter.lock().unwrap_or_else(|p| p.into_inner());
                let _ = tx.send(start(ranks));
                wake();
            })
            .expect("spawning a thread");
        self.pending = Some((Connecting::Local(ranks), rx));
        true
    }

    /// Connects to a running `tessera serve` (`host:port`, perhaps through an SSH tunnel, or
    /// `unix:PATH`) on a helper thread; it replaces the current backend once the handshake is done.
    pub fn attach(
        &mut self,
        addr: BackendAddr,
        token: Option<String>,
        wake: impl Fn() + Send + 'static,
    ) -> bool {
        if self.pending.is_some() {
            return false;
        }
        let (tx, rx) = mpsc::channel();
        let shown = addr.to_string();
        std::thread::Builder::new()
            .name("gui-attach".into())
            .spawn(move || {
                let link = crate::protocol::Client::connect(&addr, token).map(|client| {
                    let label = format!("attached to {addr}");
                    Box::new(super::local::ServeBackend::new(client, None, label)) as Link
                });
                let _ = tx.send(link);
                wake();
            })
            .expect("spawning a thread");
        self.pending = Some((Connecting::Remote(shown), rx));
        true
    }

    /// What is being connected, if anything.
    pub fn connecting(&self) -> Option<&Connecting> {
        self.pending.as_ref().map(|(c, _)| c)
    }

    pub fn is_live(&self) -> bool {
        self.link.is_some()
    }

    pub fn is_remote(&self) -> bool {
        self.link.is_some() && self.remote
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Lets go of the live link; a local backend process is stopped on a helper thread, since
    /// stopping it can take a moment.
    pub fn drop_link(&mut self) {
        if let Some(old) = self.link.take() {
            self.generation += 1;
            let _ = std::thread::Builder::new()
                .name("gui-stop-backend".into())
                .spawn(move || drop(old));
        }
    }

    /// Uses `link` from now on (the previous one is let go).
    pub fn set_link(
        &mut self,
        mut link: Link,
        remote: bool,
        wake: impl Fn() + Send + Sync + 'static,
    ) {
        self.drop_link();
        self.generation += 1;
        self.label = link.describe();
        self.remote = remote;
        link.set_waker(Box::new(wake));
        self.link = Some(link);
    }

    /// Sends a request; an error means the link is gone (it is let go, and the reason returned).
    pub fn send(&mut self, request: Request) -> Result<(), String> {
        let Some(link) = self.link.as_mut() else {
            return Err("no backend is running: start one with \"Start backend\"".into());
        };
        link.send(request).map_err(|e| {
            self.drop_link();
            e.to_string()
        })
    }

    /// Takes a finished start or attach, and moves the live link's events into the pump (tagged
    /// with the generation) in the order they came.
    pub fn poll(&mut self, pump: &Pump, wake: impl Fn() + Send + Sync + 'static) -> Option<Change> {
        let mut change = None;
        if let Some((what, rx)) = &self.pending {
            match rx.try_recv() {
                Ok(Ok(link)) => {
                    let remote = matches!(what, Connecting::Remote(_));
                    self.pending = None;
                    self.set_link(link, remote, wake);
                    change = Some(Change::Connected {
                        label: self.label.clone(),
                        remote,
                    });
                }
                Ok(Err(e)) => {
                    change = Some(Change::Failed {
                        what: what.clone(),
                        error: e.to_string(),
                    });
                    self.pending = None;
                }
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => self.pending = None,
            }
        }
        if let Some(link) = self.link.as_mut() {
            for _ in 0..MAX_EVENTS_PER_FRAME {
                match link.try_recv() {
                    Some(e) => pump.send(PumpMsg::Incoming(self.generation, e)),
                    None => break,
                }
            }
        }
        change
    }
}
