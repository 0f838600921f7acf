//! `.safetensors` weight files: read into a [`StateDict`], and write one back (f32).
//!
//! The format (huggingface/safetensors, `README.md` "Format"): an 8-byte little-endian header length
//! `N`, then `N` bytes of JSON `{name: {"dtype", "shape", "data_offsets": [begin, end]}, …,
//! "__metadata__": {…}}`, then the raw little-endian tensor bytes, offsets relative to the end of the
//! header. Every length and offset is checked against the file before anything is allocated.

use std::io::Write;
use std::path::Path;

use serde_json::{Map, Value};

use super::state_dict::{FloatDtype, StateDict};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Headers larger than this are rejected (the reference implementation uses the same bound).
const MAX_HEADER_BYTES: u64 = 100 << 20;

/// Whether `bytes` starts like a safetensors file: a header length that fits, then a JSON object.
pub(crate) fn looks_like(bytes: &[u8]) -> bool {
    if bytes.len() < 10 {
        return false;
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    n >= 2 && n <= (bytes.len() - 8) as u64 && bytes[8] == b'{'
}

/// Parses a whole safetensors file held in memory; `path` is only used in error messages.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<StateDict> {
    let bad = |reason: String| Error::format(path, format!("safetensors: {reason}"));
    if bytes.len() < 8 {
        return Err(bad(format!(
            "file is {} bytes, shorter than the 8-byte header length",
            bytes.len()
        )));
    }
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let available = (bytes.len() - 8) as u64;
    if header_len > available || header_len > MAX_HEADER_BYTES {
        return Err(bad(format!(
            "header length {header_len} exceeds the {available} bytes that follow it"
        )));
    }
    let header_end = 8 + header_len as usize;
    let header: Map<String, Value> = serde_json::from_slice(&bytes[8..header_end])
        .map_err(|e| bad(format!("header is not a JSON object: {e}")))?;
    let data = &bytes[header_end..];

    let mut sd = StateDict::new(path.display().to_string());
    let mut ranges = Vec::with_capacity(header.len());
    for (key, info) in &header {
        if key == "__metadata__" {
            continue;
        }
        let bad_key = |reason: String| bad(format!("key `{key}`: {reason}"));
        let info = info
            .as_object()
            .ok_or_else(|| bad_key("entry is not a JSON object".into()))?;
        let dtype_name = info
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| bad_key("missing string field `dtype`".into()))?;
        let dtype = match dtype_name {
            "F32" => FloatDtype::F32,
            "F16" => FloatDtype::F16,
            "BF16" => FloatDtype::BF16,
            "F64" => FloatDtype::F64,
            other => {
                return Err(bad_key(format!(
                    "dtype {other} is not supported (weights load from F32, F16, BF16 or F64)"
                )));
            }
        };
        let shape = usize_array(info.get("shape"))
            .ok_or_else(|| bad_key("`shape` is not an array of non-negative integers".into()))?;
        let offsets = usize_array(info.get("data_offsets"))
            .filter(|o| o.len() == 2)
            .ok_or_else(|| {
                bad_key("`data_offsets` is not a pair of non-negative integers".into())
            })?;
        let (begin, end) = (offsets[0], offsets[1]);
        if begin > end || end > data.len() {
            return Err(bad_key(format!(
                "data_offsets [{begin}, {end}] lie outside the {} data bytes",
                data.len()
            )));
        }
        let numel = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| bad_key(format!("shape {shape:?} overflows")))?;
        if numel.checked_mul(dtype.size_bytes()) != Some(end - begin) {
            return Err(bad_key(format!(
                "shape {shape:?} of {dtype_name} needs {} bytes but data_offsets span {}",
                numel.saturating_mul(dtype.size_bytes()),
                end - begin
            )));
        }
        ranges.push((begin, end, key.as_str(), dtype, shape));
    }
    // The format forbids overlapping tensors; refusing them also bounds the decoded size by the file's.
    ranges.sort_by_key(|r| (r.0, r.1));
    for pair in ranges.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(bad(format!(
                "keys `{}` and `{}` overlap in the data section",
                pair[0].2, pair[1].2
            )));
        }
    }
    for (begin, end, key, dtype, shape) in ranges {
        let values = dtype.decode_all(&data[begin..end], false);
        sd.insert(key, Tensor::from_vec(&shape, values)?);
    }
    Ok(sd)
}

fn usize_array(v: Option<&Value>) -> Option<Vec<usize>> {
    v?.as_array()?
        .iter()
        .map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok()))
        .collect()
}

/// Writes every tensor of `sd` as F32, keys in sorted order, data packed in the same order.
pub fn write(sd: &StateDict, path: &Path) -> Result<()> {
    let mut header = Map::new();
    let mut metadata = Map::new();
    metadata.insert("format".into(), Value::from("pt"));
    header.insert("__metadata__".into(), Value::Object(metadata));
    let mut offset = 0usize;
    for (key, t) in sd.iter() {
        let len = t.numel() * 4;
        let mut info = Map::new();
        info.insert("dtype".into(), Value::from("F32"));
        info.insert("shape".into(), Value::from(t.shape().to_vec()));
        info.insert(
            "data_offsets".into(),
            Value::from(vec![offset, offset + len]),
        );
        header.insert(key.to_string(), Value::Object(info));
        offset += len;
    }
    let mut json = serde_json::to_vec(&Value::Object(header))
        .map_err(|e| Error::format(path, format!("safetensors: encoding the header: {e}")))?;
    // The reference writer pads the header with spaces so the data starts 8-byte aligned.
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let io = |e| Error::io("writing weights", path, e);
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(file);
    w.write_all(&(json.len() as u64).to_le_bytes())
        .map_err(io)?;
    w.write_all(&json).map_err(io)?;
    for (_, t) in sd.iter() {
        for v in t.data() {
            w.write_all(&v.to_le_bytes()).map_err(io)?;
        }
    }
    w.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data_len: usize) -> Vec<u8> {
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.resize(f.len() + data_len, 0);
        f
    }

    #[test]
    fn overlapping_or_out_of_range_tensors_are_refused() {
        let path = Path::new("t.safetensors");
        let ok = file(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[],"data_offsets":[8,10]}}"#,
            10,
        );
        assert!(looks_like(&ok));
        let sd = parse(path, &ok).unwrap();
        assert_eq!(sd.get("b").unwrap().shape(), &[] as &[usize]);
        // Two keys over the same bytes would let a small file decode to a huge one.
        let overlap = file(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            8,
        );
        let e = parse(path, &overlap).unwrap_err().to_string();
        assert!(
            e.contains("`a`") && e.contains("`b`") && e.contains("overlap"),
            "{e}"
        );
        let past_end = file(
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            8,
        );
        let e = parse(path, &past_end).unwrap_err().to_string();
        assert!(e.contains("`a`") && e.contains("outside"), "{e}");
        let wrong_len = file(
            r#"{"a":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}}"#,
            8,
        );
        let e = parse(path, &wrong_len).unwrap_err().to_string();
        assert!(e.contains("needs 6 bytes"), "{e}");
    }
}
