//! Rank-to-rank messages: bounded length-prefixed frames, and the one encoding of the metadata they
//! carry (job commands, timings, shapes, rendezvous-store requests, greetings).
//!
//! Every frame is `u32 little-endian length ‖ payload`. A length above the reader's bound is refused,
//! and below it the buffer grows as bytes arrive (never `vec![0; claimed_len]`), so a malformed or
//! hostile peer that announces a gigabyte and sends ten bytes costs ten bytes. The workbench
//! protocol (`crate::protocol::frame`) reads its frames with the same [`read_frame_or_end`].
//!
//! Metadata is encoded with postcard ([`encode`], [`decode`]): both ends are this crate, integers are
//! varints, and decoding from a slice that the frame already bounded cannot allocate more than the
//! slice holds (serde caps the capacity it reserves from a claimed sequence length). Bulk `f32`
//! data travels raw after a postcard header (`super::codec`).

use std::io::{self, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Bytes read per `read` call while a frame arrives.
const CHUNK_BYTES: usize = 64 << 10;

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame larger than 4 GiB"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(payload)?;
    w.flush()
}

/// Reads one frame of at most `max_len` bytes; a stream that ends, cleanly or not, is an
/// `UnexpectedEof` error.
pub fn read_frame(r: &mut impl Read, max_len: usize) -> io::Result<Vec<u8>> {
    read_frame_or_end(r, max_len)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the stream ended before a frame",
        )
    })
}

/// Reads one frame of at most `max_len` bytes. `Ok(None)`: the stream ended cleanly between
/// frames; a stream that ends inside a frame is an `UnexpectedEof` error saying how far it got.
pub fn read_frame_or_end(r: &mut impl Read, max_len: usize) -> io::Result<Option<Vec<u8>>> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut prefix[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(truncated(got, 4)),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(prefix) as usize;
    check_len(len, max_len)?;
    read_body(r, len).map(Some)
}

/// Fails when a frame's announced length is over the bound.
pub fn check_len(len: usize, max_len: usize) -> io::Result<()> {
    if len > max_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds the limit of {max_len} bytes"),
        ));
    }
    Ok(())
}

/// Reads `len` bytes, growing the buffer as they arrive.
pub fn read_body(r: &mut impl Read, len: usize) -> io::Result<Vec<u8>> {
    let mut payload = Vec::with_capacity(len.min(CHUNK_BYTES));
    while payload.len() < len {
        let start = payload.len();
        let want = (len - start).min(CHUNK_BYTES.max(start));
        payload.resize(start + want, 0);
        let mut filled = start;
        while filled < start + want {
            match r.read(&mut payload[filled..start + want]) {
                Ok(0) => return Err(truncated(filled, len)),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(payload)
}

fn truncated(got: usize, want: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the stream ended after {got} of {want} bytes"),
    )
}

/// Encodes a message. Fails only for values serde cannot represent (a bug, hence `Internal`).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(msg)
        .map_err(|e| Error::Internal(format!("encoding a message with postcard: {e}")))
}

/// Decodes a whole payload written by [`encode`]; trailing bytes are an error. The error text
/// says what did not fit (the caller names the peer).
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> std::result::Result<T, String> {
    let (msg, rest) = postcard::take_from_bytes::<T>(payload)
        .map_err(|e| format!("{e} (payload of {} bytes)", payload.len()))?;
    if !rest.is_empty() {
        return Err(format!("{} trailing byte(s) after the message", rest.len()));
    }
    Ok(msg)
}

/// [`decode`] of a message from rank `from`: a failure is [`Error::BadPeerData`] naming it.
pub fn decode_from<T: DeserializeOwned>(from: usize, what: &str, payload: &[u8]) -> Result<T> {
    decode(payload).map_err(|e| Error::bad_peer_data(from, format!("unreadable {what}: {e}")))
}

/// Every rank's `mine`, in rank order, through one `all_gather`.
pub fn all_gather_as<T: Serialize + DeserializeOwned>(
    comm: &dyn super::Collective,
    what: &str,
    mine: &T,
) -> Result<Vec<T>> {
    comm.all_gather(&encode(mine)?)?
        .iter()
        .enumerate()
        .map(|(rank, bytes)| decode_from(rank, what, bytes))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that serves `data` and records the largest buffer it was asked to fill.
    struct Recording<'a> {
        data: &'a [u8],
        largest_request: usize,
    }

    impl Read for Recording<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.largest_request = self.largest_request.max(buf.len());
            let n = buf.len().min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn frames_round_trip_and_oversize_is_refused() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello").unwrap();
        assert_eq!(read_frame(&mut &buf[..], 16).unwrap(), b"hello");
        assert!(read_frame(&mut &buf[..], 4).is_err());
        // A length of 4 GiB with no body is refused without allocating.
        let huge = u32::MAX.to_le_bytes();
        assert!(read_frame(&mut &huge[..], 1 << 20).is_err());
        let err = read_frame(&mut &buf[..7], 16).unwrap_err();
        assert!(err.to_string().contains("after 3 of 5 bytes"), "{err}");
        assert!(read_frame_or_end(&mut &[][..], 16).unwrap().is_none());
        assert!(read_frame(&mut &[][..], 16).is_err());
    }

    #[test]
    fn an_announced_length_is_not_allocated_before_the_bytes_arrive() {
        // 1 GiB announced (within the bound), ten bytes sent.
        let mut data = (1u32 << 30).to_le_bytes().to_vec();
        data.extend([7u8; 10]);
        let mut r = Recording {
            data: &data,
            largest_request: 0,
        };
        let err = read_frame(&mut r, 1 << 30).unwrap_err();
        assert!(err.to_string().contains("after 10 of"), "{err}");
        assert!(
            r.largest_request <= CHUNK_BYTES,
            "asked for {} bytes at once",
            r.largest_request
        );
        // Long frames still arrive whole.
        let body: Vec<u8> = (0..(3 * CHUNK_BYTES + 17)).map(|i| i as u8).collect();
        let mut framed = Vec::new();
        write_frame(&mut framed, &body).unwrap();
        assert_eq!(read_frame(&mut &framed[..], 1 << 30).unwrap(), body);
    }

    #[test]
    fn messages_round_trip_and_garbage_names_the_peer() {
        let msg = (3u64, "key".to_string(), vec![1.5f64, -2.0]);
        let bytes = encode(&msg).unwrap();
        assert_eq!(
            decode::<(u64, String, Vec<f64>)>(&bytes).unwrap(),
            msg.clone()
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode::<(u64, String, Vec<f64>)>(&longer).is_err());
        let err = decode_from::<(u64, String, Vec<f64>)>(2, "timings", &bytes[..4]).unwrap_err();
        assert!(
            matches!(err, Error::BadPeerData { rank: 2, .. })
                && err.to_string().contains("timings"),
            "{err}"
        );
        // A sequence length far beyond the payload is an error, not an allocation.
        let lying = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(decode::<Vec<u64>>(&lying).is_err());
    }
}
