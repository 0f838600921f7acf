//! The workbench protocol: how a GUI (or any client) talks to a `tessera serve` coordinator.
//!
//! A connection carries length-prefixed frames (`u32` little-endian length, then a postcard-encoded
//! message; see [`frame`]), each at most [`MAX_FRAME_BYTES`]. The client speaks first with
//! [`Request::Hello`] (protocol version and, for remote attach, the token); the server answers
//! [`Event::Welcome`] or [`Event::Refused`] and closes. After that the client sends requests and the
//! server streams events.
//!
//! Flow: GUI → [`Request::Submit`] → coordinator (rank 0) broadcasts the job to its ranks → ranks run
//! `job::run_in_group` → rank 0 turns job events into [`Event`]s (iterations every step, previews
//! rate-limited and downsampled off the ranks' critical path) → GUI draws them. The GUI side is
//! [`client::Client`] (and [`client::LocalBackend`] to start a backend on this machine); the server
//! side is `crate::serve`.
//!
//! The protocol owns every type on the wire: the reports, survey and patch map that events carry
//! are plain data in [`reports`], filled from the compute modules' types in one file (`convert`),
//! so a field added to a compute type or to `metrics.json` does not silently change the bytes.
//! `tests/protocol.rs` pins the bytes of every message for [`PROTOCOL_VERSION`].

pub mod auth;
pub mod client;
mod convert;
pub mod frame;
pub mod messages;
pub mod preview;
pub mod reports;
pub mod transport;

pub use client::{Client, ClientEvent, LocalBackend, LocalOptions, Welcome};
pub use messages::*;
pub use preview::Section;
pub use reports::*;
pub use transport::BackendAddr;
