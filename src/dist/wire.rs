//! Length-prefixed binary frames over any byte stream, with a maximum size.
//!
//! Every frame is `u32 little-endian length ‖ payload`. A length above the reader's bound is refused
//! before anything is allocated, so a malformed or hostile peer cannot make us allocate gigabytes.
//! Payload fields are written with [`Writer`] and read with [`Reader`], which never panics on short
//! or garbage input.

use std::io::{self, Read, Write};

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame larger than 4 GiB"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(payload)?;
    w.flush()
}

/// Reads one frame of at most `max_len` bytes.
pub fn read_frame(r: &mut impl Read, max_len: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds the limit of {max_len} bytes"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// Builds a payload.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self = self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }
    pub fn str(self, v: &str) -> Self {
        self.bytes(v.as_bytes())
    }
}

/// Reads a payload; every read checks the remaining length.
pub struct Reader<'a>(pub &'a [u8]);

fn short() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "truncated or malformed message")
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(short());
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    pub fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| short())?,
        ))
    }
    pub fn i64(&mut self) -> io::Result<i64> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| short())?,
        ))
    }
    pub fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let n = usize::try_from(self.u64()?).map_err(|_| short())?;
        self.take(n)
    }
    pub fn string(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| short())
    }
    pub fn finish(&self) -> io::Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(short())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_oversize_is_refused() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello").unwrap();
        assert_eq!(read_frame(&mut &buf[..], 16).unwrap(), b"hello");
        assert!(read_frame(&mut &buf[..], 4).is_err());
        // A length of 4 GiB with no body is refused without allocating.
        let huge = u32::MAX.to_le_bytes();
        assert!(read_frame(&mut &huge[..], 1 << 20).is_err());
        assert!(read_frame(&mut &buf[..7], 16).is_err());
    }

    #[test]
    fn reader_rejects_truncation() {
        let p = Writer::default().u8(3).str("key").i64(-5).0;
        let mut r = Reader(&p);
        assert_eq!(r.u8().unwrap(), 3);
        assert_eq!(r.string().unwrap(), "key");
        assert_eq!(r.i64().unwrap(), -5);
        r.finish().unwrap();
        let mut r = Reader(&p[..6]);
        r.u8().unwrap();
        assert!(r.string().is_err());
        // A byte-string length far beyond the payload is an error, not an allocation.
        let p = Writer::default().u64(u64::MAX).0;
        assert!(Reader(&p).bytes().is_err());
    }
}
