//! The workbench's side of a backend connection: requests go out through [`Backend::send`], events
//! are polled with [`Backend::try_recv`] from a channel that the connection's own thread fills, so
//! the UI thread never waits on a socket.
//!
//! A [`Link`] is one connection (to `tessera serve`, to a local backend the GUI started, or to a
//! test's [`ChannelBackend`]). When the backend dies it yields [`Incoming::Disconnected`]; the app
//! keeps running and can ask its [`Starter`] for a new link.

use std::sync::mpsc::{self, Receiver, Sender};

use crate::error::{Error, Result};
use crate::protocol::{Event, Request};

/// What arrives from a backend.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Event(Event),
    /// The connection is gone (the backend exited or the socket closed); the reason, for the log.
    Disconnected(String),
}

/// One connection (Send: it is made on a helper thread, and dropped on one, since stopping a
/// local backend process can take a moment).
pub trait Backend: Send {
    /// Queues a request; never blocks on the backend's work.
    fn send(&mut self, request: Request) -> Result<()>;
    /// The next event if one is waiting (never blocks).
    fn try_recv(&mut self) -> Option<Incoming>;
    /// Called from the connection's thread whenever an event arrives (the app passes egui's
    /// `request_repaint`); backends polled only by tests may ignore it.
    fn set_waker(&mut self, _wake: Box<dyn Fn() + Send + Sync>) {}
    /// Shown in the status bar, e.g. `local backend (2 ranks)`.
    fn describe(&self) -> String;
}

/// One live connection.
pub type Link = Box<dyn Backend>;

/// Starts a backend with this many ranks (the app calls it on a helper thread, at start-up and
/// when the user asks for a new one).
pub type Starter = Box<dyn FnMut(usize) -> Result<Link> + Send>;

/// A backend that is two channels: what the app sends arrives at [`TestEnd::requests`], what the
/// other end sends through [`TestEnd::events`] is drawn. Tests and the frame-time bench drive the
/// app through it.
pub struct ChannelBackend {
    requests: Sender<Request>,
    events: Receiver<Incoming>,
    closed: bool,
    label: String,
}

/// The far end of a [`ChannelBackend`].
pub struct TestEnd {
    pub requests: Receiver<Request>,
    pub events: Sender<Incoming>,
}

impl ChannelBackend {
    /// A connected pair.
    pub fn pair(label: &str) -> (Link, TestEnd) {
        let (req_tx, req_rx) = mpsc::channel();
        let (ev_tx, ev_rx) = mpsc::channel();
        let link: Link = Box::new(ChannelBackend {
            requests: req_tx,
            events: ev_rx,
            closed: false,
            label: label.to_string(),
        });
        (
            link,
            TestEnd {
                requests: req_rx,
                events: ev_tx,
            },
        )
    }
}

impl Backend for ChannelBackend {
    fn send(&mut self, request: Request) -> Result<()> {
        self.requests.send(request).map_err(|_| Error::PeerLost {
            rank: 0,
            how: "closed the connection".into(),
        })
    }

    fn try_recv(&mut self) -> Option<Incoming> {
        if self.closed {
            return None;
        }
        match self.events.try_recv() {
            Ok(e) => {
                self.closed = matches!(e, Incoming::Disconnected(_));
                Some(e)
            }
            Err(mpsc::TryRecvError::Empty) => None,
            // The far end was dropped: that is a dead backend.
            Err(mpsc::TryRecvError::Disconnected) => {
                self.closed = true;
                Some(Incoming::Disconnected(
                    "the backend closed the connection".into(),
                ))
            }
        }
    }

    fn describe(&self) -> String {
        self.label.clone()
    }
}

/// A starter that always fails with `reason` (a build without a backend, or a test of the error path).
pub fn unavailable(reason: &str) -> Starter {
    let reason = reason.to_string();
    Box::new(move |_| Err(Error::Unsupported(reason.clone())))
}
