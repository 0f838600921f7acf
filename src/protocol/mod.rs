//! The workbench protocol: how a GUI (or any client) talks to a `tessera serve` coordinator.
//!
//! A connection carries length-prefixed frames (`u32` little-endian length, then a serde-encoded
//! message), each at most [`MAX_FRAME_BYTES`]. The client speaks first with [`Request::Hello`]
//! (protocol version and, for remote attach, the token); the server answers [`Event::Welcome`] or
//! [`Event::Refused`] and closes. After that the client sends requests and the server streams events.
//!
//! Flow: GUI → [`Request::Submit`] → coordinator (rank 0) broadcasts the job to its ranks → ranks run
//! `job::run_in_group` → rank 0 turns job events into [`Event`]s (iterations every step, previews
//! rate-limited and downsampled off the ranks' critical path) → GUI draws them.

pub mod messages;

pub use messages::*;
