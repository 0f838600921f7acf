//! Encoding of indexed tensors for collectives: `(global index, tensor)` records in one buffer — a
//! postcard header (indices and shapes, the metadata encoding of `super::wire`) followed by every
//! record's values as raw little-endian `f32`, in record order.
//!
//! Decoding validates every shape against the bytes that follow before allocating, so a corrupted
//! message is an error naming the rank that sent it, never a panic or a huge allocation.

use serde::{Deserialize, Serialize};

use super::wire;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Most dimensions a record may have.
const MAX_DIMS: usize = 8;

#[derive(Serialize, Deserialize)]
struct RecordHeader {
    index: u64,
    shape: Vec<u64>,
}

/// Encodes `(index, tensor)` records.
pub fn encode(records: &[(usize, &Tensor)]) -> Result<Vec<u8>> {
    let header: Vec<RecordHeader> = records
        .iter()
        .map(|(i, t)| RecordHeader {
            index: *i as u64,
            shape: t.shape().iter().map(|&d| d as u64).collect(),
        })
        .collect();
    let mut out = wire::encode(&header)?;
    let values: usize = records.iter().map(|(_, t)| t.numel()).sum();
    out.reserve(4 * values);
    for (_, t) in records {
        out.extend_from_slice(bytemuck::cast_slice(t.data()));
    }
    Ok(out)
}

/// Decodes records written by [`encode`] on rank `from`.
pub fn decode(from: usize, bytes: &[u8]) -> Result<Vec<(usize, Tensor)>> {
    let bad =
        |what: String| Error::bad_peer_data(from, format!("malformed tensor message: {what}"));
    let (header, mut data) = postcard::take_from_bytes::<Vec<RecordHeader>>(bytes)
        .map_err(|e| bad(format!("unreadable header ({e})")))?;
    let mut out = Vec::with_capacity(header.len());
    for RecordHeader { index, shape } in header {
        if shape.len() > MAX_DIMS {
            return Err(bad(format!(
                "{} dimensions (at most {MAX_DIMS})",
                shape.len()
            )));
        }
        let shape: Vec<usize> = shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad("a dimension overflows".into()))?;
        let nbytes = shape
            .iter()
            .try_fold(4usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
        if nbytes > data.len() {
            return Err(bad(format!(
                "shape {shape:?} needs {nbytes} bytes, {} left",
                data.len()
            )));
        }
        let (values, rest) = data.split_at(nbytes);
        data = rest;
        let values: Vec<f32> = values
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let index = usize::try_from(index).map_err(|_| bad("index overflows".into()))?;
        out.push((index, Tensor::from_vec(&shape, values)?));
    }
    if !data.is_empty() {
        return Err(bad(format!("{} trailing bytes", data.len())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let a = Tensor::from_fn(&[1, 2, 3, 4], |i| i as f32);
        let b = Tensor::from_fn(&[2, 1, 5], |i| -(i as f32));
        let bytes = encode(&[(3, &a), (7, &b)]).unwrap();
        let back = decode(0, &bytes).unwrap();
        assert_eq!(back, vec![(3, a.clone()), (7, b)]);
        assert!(decode(0, &bytes[..bytes.len() - 1]).is_err());
        assert!(decode(0, &[0xff; 8]).is_err());
        assert!(decode(0, &[]).is_err());
        // A header that claims 64 dimensions.
        let lying = wire::encode(&vec![RecordHeader {
            index: 0,
            shape: vec![1; 64],
        }])
        .unwrap();
        let err = decode(2, &lying).unwrap_err();
        assert!(
            matches!(err, Error::BadPeerData { rank: 2, .. }) && err.to_string().contains("64"),
            "{err}"
        );
        // A shape whose byte count overflows, and one larger than the data.
        for shape in [vec![u64::MAX, 2], vec![1 << 20]] {
            let mut lying = wire::encode(&vec![RecordHeader { index: 0, shape }]).unwrap();
            lying.extend([0u8; 16]);
            assert!(decode(1, &lying).is_err());
        }
        let mut extra = encode(&[(0, &a)]).unwrap();
        extra.extend([0u8; 4]);
        assert!(
            decode(1, &extra)
                .unwrap_err()
                .to_string()
                .contains("trailing")
        );
    }
}
