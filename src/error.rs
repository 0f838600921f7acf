//! The library's error type: every fallible call in the numeric core returns `Result<T>`.
//!
//! Variants are structured so that a caller (CLI, GUI, a remote rank) can report precisely what was
//! wrong. Messages put the path last, after what went wrong.

use std::path::PathBuf;

/// Errors raised by tessera's library code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An array had the wrong shape for an operation.
    #[error("{op}: expected shape {expected:?}, got {got:?}")]
    ShapeMismatch {
        op: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// A configuration value is out of range or inconsistent; `field` names it as written in presets.
    #[error("invalid value for `{field}`: {reason}")]
    InvalidConfig { field: String, reason: String },
    /// An input array contains NaN or infinite values.
    #[error("{what} contains {count} non-finite value(s) (NaN or Inf)")]
    NonFinite { what: String, count: usize },
    /// A file could not be read or written.
    #[error("{action} failed: {source}: {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file was read but its content is not what it claims to be.
    #[error("{reason}: {}", path.display())]
    Format { path: PathBuf, reason: String },
    /// Something did not happen in time (a peer, a key in the rendezvous store, a connection).
    #[error("timed out after {secs:.1} s waiting for {what}")]
    Timeout { what: String, secs: f64 },
    /// A communication step failed.
    #[error("{context}: {source}")]
    Comm {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A peer rank is gone: it closed its connection, was killed, or stopped answering.
    #[error("rank {rank} {how}")]
    PeerLost { rank: usize, how: String },
    /// A peer rank failed on its own (bad input on its host, a full disk, …) and told the group,
    /// which stays in step for the next job.
    #[error("rank {rank} failed: {reason}")]
    PeerFailed { rank: usize, reason: String },
    /// A peer rank is alive but sent something that does not decode or does not fit (different
    /// builds, or ranks out of step).
    #[error("rank {rank} sent bad data: {what}")]
    BadPeerData { rank: usize, what: String },
    /// The work was stopped on request (Stop in the workbench, `Cancel` over the protocol).
    #[error("cancelled {0}")]
    Cancelled(String),
    /// A device or an accelerator library failed at run time (CUDA, NCCL, libtorch).
    #[error("{device}: {reason}")]
    Device { device: String, reason: String },
    /// A broken invariant inside tessera (a panicked thread, a value that cannot be encoded): a bug,
    /// not a problem with the input.
    #[error("internal error: {0}")]
    Internal(String),
    /// A job would need more memory than the machine has available (it is refused before it
    /// starts, rather than killed by the system).
    #[error(
        "not enough memory: the job needs {} but {} are available ({detail})",
        human_bytes(*needed_bytes),
        human_bytes(*available_bytes)
    )]
    InsufficientMemory {
        needed_bytes: u64,
        available_bytes: u64,
        detail: String,
    },
    /// A request that is valid in principle but not supported by this operator or build.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A process tessera started for one part of a study (a configuration's process group) failed
    /// or gave no readable result; its own error went to the stderr it shares.
    #[error("{what} failed: {reason}")]
    ChildFailed { what: String, reason: String },
}

impl Error {
    /// Shorthand for [`Error::InvalidConfig`].
    pub fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::ShapeMismatch`].
    pub fn shape(op: impl Into<String>, expected: &[usize], got: &[usize]) -> Self {
        Error::ShapeMismatch {
            op: op.into(),
            expected: expected.to_vec(),
            got: got.to_vec(),
        }
    }

    /// Shorthand for [`Error::Format`].
    pub fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::BadPeerData`].
    pub fn bad_peer_data(rank: usize, what: impl Into<String>) -> Self {
        Error::BadPeerData {
            rank,
            what: what.into(),
        }
    }

    /// The rank a failure started on and what it was, as a group reports it: a failure another
    /// rank told us about keeps its origin; anything else started on `this_rank`.
    pub fn origin(&self, this_rank: usize) -> (usize, String) {
        match self {
            Error::PeerFailed { rank, reason } => (*rank, reason.clone()),
            other => (this_rank, other.to_string()),
        }
    }

    /// Shorthand for [`Error::Io`].
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// `1.5 GiB`, `300 MiB`, `12 KiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{bytes} B"),
        _ => format!("{v:.1} {}", UNITS[u]),
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn sizes_read_like_a_person_writes_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(human_bytes((15 << 30) / 10), "1.5 GiB");
    }
}
