//! Encoding of indexed tensors for collectives: `(global index, tensor)` records in one buffer.
//!
//! Decoding validates every length against the buffer before allocating, so a corrupted message
//! is an error, never a panic or a huge allocation.

use super::wire::{Reader, Writer};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Encodes `(index, tensor)` records.
pub fn encode(records: &[(usize, &Tensor)]) -> Vec<u8> {
    let bytes: usize = records
        .iter()
        .map(|(_, t)| 16 + 8 * t.ndim() + 4 * t.numel())
        .sum();
    let mut w = Writer(Vec::with_capacity(8 + bytes)).u64(records.len() as u64);
    for (i, t) in records {
        w = w.u64(*i as u64).u64(t.ndim() as u64);
        for &d in t.shape() {
            w = w.u64(d as u64);
        }
        w.0.extend_from_slice(bytemuck::cast_slice(t.data()));
    }
    w.0
}

/// Decodes records written by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<Vec<(usize, Tensor)>> {
    let bad = |what: &str| Error::config("message", format!("malformed tensor message: {what}"));
    let mut r = Reader(bytes);
    let n = r.u64().map_err(|_| bad("no record count"))? as usize;
    // Each record needs at least 16 bytes, which bounds a lying count.
    if n > bytes.len() / 16 + 1 {
        return Err(bad("record count larger than the message"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let index = r.u64().map_err(|_| bad("truncated record"))? as usize;
        let ndim = r.u64().map_err(|_| bad("truncated record"))? as usize;
        if ndim > 8 {
            return Err(bad("more than 8 dimensions"));
        }
        let mut shape = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            shape.push(r.u64().map_err(|_| bad("truncated shape"))? as usize);
        }
        let count = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad("shape overflows"))?;
        let nbytes = count.checked_mul(4).ok_or_else(|| bad("shape overflows"))?;
        if nbytes > r.0.len() {
            return Err(bad("data shorter than its shape"));
        }
        let (data, rest) = r.0.split_at(nbytes);
        r.0 = rest;
        let values: Vec<f32> = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        out.push((index, Tensor::from_vec(&shape, values)?));
    }
    r.finish().map_err(|_| bad("trailing bytes"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let a = Tensor::from_fn(&[1, 2, 3, 4], |i| i as f32);
        let b = Tensor::from_fn(&[2, 1, 5], |i| -(i as f32));
        let bytes = encode(&[(3, &a), (7, &b)]);
        let back = decode(&bytes).unwrap();
        assert_eq!(back, vec![(3, a), (7, b)]);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&[0xff; 8]).is_err());
        let mut lying = bytes.clone();
        lying[16..24].copy_from_slice(&64u64.to_le_bytes()); // ndim = 64
        assert!(decode(&lying).is_err());
        assert!(decode(&[]).is_err());
    }
}
