//! Encoding of bulk floats between ranks (indexed tensors, or one vector of values): `(global index, tensor)` records in one buffer — a
//! postcard header (indices and shapes, the metadata encoding of `super::wire`) followed by every
//! record's values as raw little-endian `f32`, in record order. Leading and trailing values whose
//! bits are all zero (`+0.0`) are not sent but restored, so a term that fills only some channels of
//! an image (an operator split by channel) costs only its own channels, with the same bits.
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
    /// `+0.0` values before the sent ones.
    skip: u64,
    /// Values sent; the rest, after them, are `+0.0`.
    sent: u64,
}

/// The span of `data` outside which every value is `+0.0` (all bits zero).
fn kept_span(data: &[f32]) -> std::ops::Range<usize> {
    let zero = |v: &f32| v.to_bits() == 0;
    match data.iter().position(|v| !zero(v)) {
        None => 0..0,
        Some(first) => {
            let last = data
                .iter()
                .rposition(|v| !zero(v))
                .expect("a non-zero value");
            first..last + 1
        }
    }
}

/// Encodes `(index, tensor)` records.
pub fn encode(records: &[(usize, &Tensor)]) -> Result<Vec<u8>> {
    let slices: Vec<(usize, &[usize], &[f32])> = records
        .iter()
        .map(|(i, t)| (*i, t.shape(), t.data()))
        .collect();
    encode_slices(&slices)
}

/// Encodes `(index, shape, values)` records: [`encode`] without building tensors.
pub fn encode_slices(records: &[(usize, &[usize], &[f32])]) -> Result<Vec<u8>> {
    let spans: Vec<_> = records.iter().map(|(_, _, v)| kept_span(v)).collect();
    let header: Vec<RecordHeader> = records
        .iter()
        .zip(&spans)
        .map(|((i, shape, _), span)| RecordHeader {
            index: *i as u64,
            shape: shape.iter().map(|&d| d as u64).collect(),
            skip: span.start as u64,
            sent: span.len() as u64,
        })
        .collect();
    let mut out = wire::encode(&header)?;
    let values: usize = spans.iter().map(|s| s.len()).sum();
    out.reserve(4 * values);
    for ((_, _, v), span) in records.iter().zip(spans) {
        out.extend_from_slice(bytemuck::cast_slice(&v[span]));
    }
    Ok(out)
}

/// Encodes one vector of values (one record of one dimension).
pub fn encode_values(values: &[f32]) -> Result<Vec<u8>> {
    encode_slices(&[(0, &[values.len()], values)])
}

/// Decodes a vector written by [`encode_values`] on rank `from`; `what` names it in errors.
pub fn decode_values(from: usize, what: &str, bytes: &[u8]) -> Result<Vec<f32>> {
    let mut records = decode(from, bytes)?;
    match (records.pop(), records.is_empty()) {
        (Some((0, t)), true) if t.shape().len() == 1 => Ok(t.into_data()),
        _ => Err(Error::bad_peer_data(
            from,
            format!("{what}: expected one vector of values"),
        )),
    }
}

/// Decodes records written by [`encode`] on rank `from`.
pub fn decode(from: usize, bytes: &[u8]) -> Result<Vec<(usize, Tensor)>> {
    let bad =
        |what: String| Error::bad_peer_data(from, format!("malformed tensor message: {what}"));
    let (header, mut data) = postcard::take_from_bytes::<Vec<RecordHeader>>(bytes)
        .map_err(|e| bad(format!("unreadable header ({e})")))?;
    let mut out = Vec::with_capacity(header.len());
    for RecordHeader {
        index,
        shape,
        skip,
        sent,
    } in header
    {
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
        let numel = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .filter(|n| n.checked_mul(4).is_some())
            .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
        let (skip, sent) = match (usize::try_from(skip), usize::try_from(sent)) {
            (Ok(k), Ok(n)) if k.checked_add(n).is_some_and(|end| end <= numel) => (k, n),
            _ => {
                return Err(bad(format!(
                    "{sent} values after {skip} zeros in shape {shape:?}"
                )));
            }
        };
        let nbytes = 4 * sent;
        if nbytes > data.len() {
            return Err(bad(format!(
                "shape {shape:?} needs {nbytes} bytes, {} left",
                data.len()
            )));
        }
        let (values, rest) = data.split_at(nbytes);
        data = rest;
        let mut all = vec![0f32; numel];
        all[skip..skip + sent]
            .iter_mut()
            .zip(values.chunks_exact(4))
            .for_each(|(v, c)| *v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        let index = usize::try_from(index).map_err(|_| bad("index overflows".into()))?;
        out.push((index, Tensor::from_vec(&shape, all)?));
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
            skip: 0,
            sent: 1,
        }])
        .unwrap();
        let err = decode(2, &lying).unwrap_err();
        assert!(
            matches!(err, Error::BadPeerData { rank: 2, .. }) && err.to_string().contains("64"),
            "{err}"
        );
        // A shape whose byte count overflows, and one larger than the data.
        for (shape, skip, sent) in [
            (vec![u64::MAX, 2], 0, 2),
            (vec![1 << 20], 0, 1 << 20),
            (vec![4], 3, 2),
            (vec![4], u64::MAX, 1),
        ] {
            let header = RecordHeader {
                index: 0,
                shape,
                skip,
                sent,
            };
            let mut lying = wire::encode(&vec![header]).unwrap();
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

    /// Every prefix of a valid message and seeded random bytes decode to a named error, never a
    /// panic or a huge allocation.
    #[test]
    fn truncated_and_random_bytes_are_named_errors() {
        use rand::{RngExt, SeedableRng};
        let a = Tensor::from_fn(&[2, 3], |i| i as f32 + 0.5);
        let records = encode(&[(1, &a), (4, &a)]).unwrap();
        let values = encode_values(&[1.0, 0.0, -2.0]).unwrap();
        for cut in 0..records.len() {
            let e = decode(3, &records[..cut]).unwrap_err();
            assert!(matches!(e, Error::BadPeerData { rank: 3, .. }), "{e}");
        }
        for cut in 0..values.len() {
            let e = decode_values(3, "codes", &values[..cut]).unwrap_err();
            assert!(matches!(e, Error::BadPeerData { rank: 3, .. }), "{e}");
        }
        assert!(decode_values(0, "codes", &records).is_err(), "two records");
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        for _ in 0..2000 {
            let len = rng.random_range(0..64);
            let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if let Err(e) = decode(5, &bytes) {
                assert!(matches!(e, Error::BadPeerData { rank: 5, .. }), "{e}");
            }
            if let Err(e) = decode_values(5, "codes", &bytes) {
                assert!(matches!(e, Error::BadPeerData { rank: 5, .. }), "{e}");
            }
        }
        assert_eq!(
            decode_values(0, "codes", &values).unwrap(),
            vec![1.0, 0.0, -2.0]
        );
    }

    #[test]
    fn zeros_around_the_values_are_not_sent_and_come_back_with_their_bits() {
        // Channel 1 of 3 filled, the others +0.0: only channel 1 travels.
        let mut t = Tensor::zeros(&[1, 3, 4, 5]);
        t.data_mut()[20..40]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as f32 - 3.0);
        // A -0.0 is data, not padding: it is sent and keeps its sign.
        t.data_mut()[20] = -0.0;
        let bytes = encode(&[(1, &t)]).unwrap();
        let dense = encode(&[(1, &Tensor::from_fn(&[1, 3, 4, 5], |i| i as f32 + 1.0))]).unwrap();
        assert_eq!(
            dense.len() - bytes.len(),
            4 * 40,
            "two channels of zeros stay home"
        );
        let back = decode(0, &bytes).unwrap();
        let bits = |t: &Tensor| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back[0].1), bits(&t));
        let empty = Tensor::zeros(&[2, 2]);
        assert_eq!(
            decode(0, &encode(&[(0, &empty)]).unwrap()).unwrap()[0].1,
            empty
        );
    }
}
