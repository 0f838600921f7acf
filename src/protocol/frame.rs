//! Frames of the workbench protocol: `u32` little-endian length ‖ payload, the payload a message
//! encoded with postcard; the length is checked against a maximum before anything is allocated.
//!
//! Why postcard: both ends are this crate, so a self-describing format (JSON, CBOR) would only add
//! bytes; postcard writes integers as varints and `f32` as 4 raw bytes (an inline image or a preview
//! costs what its pixels cost), its wire format is specified and stable since 1.0, and it is a small,
//! pure-Rust dependency. Decoding reads from a slice already bounded by the frame length, and serde
//! caps the capacity it reserves from a claimed sequence length (`size_hint::cautious`), so a lying
//! length inside a frame cannot allocate more than the frame holds.
//!
//! Reading grows its buffer as bytes arrive (never `vec![0; claimed_len]`), so a peer that announces
//! 200 MiB and sends ten bytes costs ten bytes: frames and the postcard encoding are the ones ranks
//! use between themselves (`crate::dist::wire`). Every failure is an [`Error`]: `Comm` with
//! `UnexpectedEof` for a truncated frame, `InvalidData` for an oversized or undecodable one.

use std::io::{self, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::dist::wire;
use crate::error::{Error, Result};

fn invalid(context: &str, reason: String) -> Error {
    Error::Comm {
        context: context.into(),
        source: io::Error::new(io::ErrorKind::InvalidData, reason),
    }
}

/// Encodes one message (without the length prefix).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>> {
    wire::encode(msg)
}

/// Decodes one message from a whole payload; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T> {
    wire::decode(payload).map_err(|e| invalid("decoding a protocol message", e))
}

/// Writes one frame (length prefix and payload) and flushes.
pub fn write_frame(w: &mut impl Write, payload: &[u8], max_bytes: usize) -> Result<()> {
    wire::check_len(payload.len(), max_bytes)
        .and_then(|()| wire::write_frame(w, payload))
        .map_err(|source| Error::Comm {
            context: "writing a protocol frame".into(),
            source,
        })
}

/// Encodes `msg` and writes it as one frame.
pub fn write_message<T: Serialize>(w: &mut impl Write, msg: &T, max_bytes: usize) -> Result<()> {
    write_frame(w, &encode(msg)?, max_bytes)
}

/// Reads one frame of at most `max_bytes`. `Ok(None)`: the peer closed the stream cleanly between
/// frames; a stream that ends inside a frame is an `UnexpectedEof` error.
pub fn read_frame(r: &mut impl Read, max_bytes: usize) -> Result<Option<Vec<u8>>> {
    wire::read_frame_or_end(r, max_bytes).map_err(|source| Error::Comm {
        context: "reading a protocol frame".into(),
        source,
    })
}

/// Reads and decodes one message; `Ok(None)` when the peer closed the stream between frames.
pub fn read_message<T: DeserializeOwned>(r: &mut impl Read, max_bytes: usize) -> Result<Option<T>> {
    match read_frame(r, max_bytes)? {
        Some(payload) => decode(&payload).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{MAX_FRAME_BYTES, Request};

    #[test]
    fn a_frame_announcing_more_than_the_limit_is_refused() {
        let mut bytes = (1000u32).to_le_bytes().to_vec();
        bytes.extend([0u8; 8]);
        let err = read_frame(&mut &bytes[..], 999).unwrap_err();
        assert!(err.to_string().contains("exceeds the limit"), "{err}");
    }

    #[test]
    fn a_clean_close_is_none_and_a_partial_prefix_is_an_error() {
        assert!(read_frame(&mut &[][..], 10).unwrap().is_none());
        let err = read_frame(&mut &[1u8, 0][..], 10).unwrap_err();
        assert!(err.to_string().contains("after 2 of 4 bytes"), "{err}");
    }

    #[test]
    fn trailing_bytes_after_a_message_are_an_error() {
        let mut payload = encode(&Request::Status).unwrap();
        payload.push(0);
        assert!(decode::<Request>(&payload).is_err());
        assert!(write_frame(&mut Vec::new(), &[0u8; 11], 10).is_err());
        let _ = MAX_FRAME_BYTES;
    }
}
