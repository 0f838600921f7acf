//! NumPy `.npy` reading and writing (format versions 1–3), for images `(B,C,H,W)` and volumes.
//!
//! Reading accepts little- and big-endian f32, f64, and integer dtypes (converted to f32), C or Fortran
//! order; writing always produces version-1 little-endian f32 in C order, the format deepinv and numpy
//! read natively.

use std::path::Path;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

const MAGIC: &[u8] = b"\x93NUMPY";

/// Reads a `.npy` file into a tensor.
pub fn read_npy(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("reading", path, e))?;
    parse_npy(&bytes)
        .map_err(|reason| Error::format(path, format!("not a valid .npy file ({reason})")))
}

/// Reads a `.npy` file keeping 64-bit precision: its shape and values as f64 (integers converted).
pub fn read_npy_f64(path: &Path) -> Result<(Vec<usize>, Vec<f64>)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("reading", path, e))?;
    parse_npy_f64(&bytes)
        .map_err(|reason| Error::format(path, format!("not a valid .npy file ({reason})")))
}

/// Writes a tensor as a little-endian f32 `.npy` file, atomically.
pub fn write_npy(path: &Path, tensor: &Tensor) -> Result<()> {
    super::write_atomic(path, &encode_npy(tensor))
}

/// Encodes a tensor as `.npy` bytes (version 1.0, `<f4`, C order).
pub fn encode_npy(tensor: &Tensor) -> Vec<u8> {
    let shape = match tensor.shape() {
        [n] => format!("({n},)"),
        s => format!(
            "({})",
            s.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    // Total header length (magic + version + len + dict + newline) is padded to a multiple of 64.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(unpadded + 64 + tensor.numel() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in tensor.data() {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Parses `.npy` bytes; the error says what was wrong.
pub fn parse_npy(bytes: &[u8]) -> std::result::Result<Tensor, String> {
    let (shape, data) = parse_values(bytes, |v| v as f32)?;
    Tensor::from_vec(&shape, data).map_err(|e| e.to_string())
}

/// Parses `.npy` bytes into the shape and f64 values (C order).
pub fn parse_npy_f64(bytes: &[u8]) -> std::result::Result<(Vec<usize>, Vec<f64>), String> {
    parse_values(bytes, |v| v)
}

/// What a `.npy` header says: the shape, the dtype (little-endian?, kind, bytes per value), the
/// order, and where the data start.
struct Header {
    shape: Vec<usize>,
    count: usize,
    little: bool,
    kind: char,
    size: usize,
    fortran: bool,
    data_start: usize,
    descr: String,
}

/// Parses the header at the start of `bytes` (which may hold only the header).
fn parse_header(bytes: &[u8]) -> std::result::Result<Header, String> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err("missing the \\x93NUMPY magic".into());
    }
    if bytes.len() < 10 {
        return Err("truncated header (the file ends after the magic)".into());
    }
    let major = bytes[6];
    let (header_len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated header".into());
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(format!("unsupported format version {v}")),
    };
    let header_end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or("header longer than the file")?;
    let header =
        std::str::from_utf8(&bytes[start..header_end]).map_err(|_| "header is not text")?;
    for key in ["descr", "fortran_order", "shape"] {
        let quoted = |q: char| header.matches(&format!("{q}{key}{q}")).count();
        if quoted('\'') + quoted('"') > 1 {
            return Err(format!("header names '{key}' more than once"));
        }
    }
    let descr = dict_value(header, "descr").ok_or("header has no 'descr'")?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let fortran = dict_value(header, "fortran_order").ok_or("header has no 'fortran_order'")?;
    let fortran = match fortran {
        "True" => true,
        "False" => false,
        other => return Err(format!("bad fortran_order {other}")),
    };
    let shape_text = dict_value(header, "shape").ok_or("header has no 'shape'")?;
    // One tuple of integers: `(2, 3)`, `(5,)` or `()`; nested tuples are not a shape.
    let inner = shape_text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .filter(|t| !t.contains(['(', ')']))
        .ok_or_else(|| format!("bad shape {shape_text}"))?;
    let shape: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad shape {shape_text}"))
        })
        .collect::<std::result::Result<_, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or("shape overflows")?;
    let (little, kind, size) = parse_descr(descr)?;
    Ok(Header {
        shape,
        count,
        little,
        kind,
        size,
        fortran,
        data_start: header_end,
        descr: descr.to_string(),
    })
}

/// The shape a `.npy` file declares, from its header alone (the data are not read), so a job can
/// be sized before the file is loaded.
pub fn peek_npy_shape(path: &Path) -> Result<Vec<usize>> {
    use std::io::Read;
    // Version 2/3 headers may be long; numpy writes a few hundred bytes.
    const MAX_HEADER: u64 = 1 << 20;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_HEADER).read_to_end(&mut head))
        .map_err(|e| Error::io("reading", path, e))?;
    parse_header(&head)
        .map(|h| h.shape)
        .map_err(|reason| Error::format(path, format!("not a valid .npy file ({reason})")))
}

/// The shape and values (C order), each stored value read as f64 (exact for every dtype but
/// 64-bit integers beyond 2⁵³) and then converted by `out`.
fn parse_values<V: Copy + Default>(
    bytes: &[u8],
    out: impl Fn(f64) -> V,
) -> std::result::Result<(Vec<usize>, Vec<V>), String> {
    let Header {
        shape,
        count,
        little,
        kind,
        size,
        fortran,
        data_start,
        descr,
    } = parse_header(bytes)?;
    let payload = &bytes[data_start..];
    let need = count.checked_mul(size).ok_or("shape overflows")?;
    if payload.len() < need {
        return Err(format!(
            "data truncated: shape {shape:?} of {descr} needs {need} bytes, file has {}",
            payload.len()
        ));
    }
    let mut data = Vec::with_capacity(count);
    for chunk in payload[..need].chunks_exact(size) {
        let mut b = [0u8; 8];
        b[..size].copy_from_slice(chunk);
        if !little {
            b[..size].reverse();
        }
        let v = match (kind, size) {
            ('f', 4) => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            ('f', 8) => f64::from_le_bytes(b),
            ('u', 1) | ('b', 1) => b[0] as f64,
            ('i', 1) => b[0] as i8 as f64,
            ('u', 2) => u16::from_le_bytes([b[0], b[1]]) as f64,
            ('i', 2) => i16::from_le_bytes([b[0], b[1]]) as f64,
            ('u', 4) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            ('i', 4) => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            ('u', 8) => u64::from_le_bytes(b) as f64,
            ('i', 8) => i64::from_le_bytes(b) as f64,
            _ => return Err(format!("unsupported dtype {descr}")),
        };
        data.push(out(v));
    }
    if fortran && shape.len() > 1 {
        data = fortran_to_c(&data, &shape);
    }
    Ok((shape, data))
}

fn parse_descr(descr: &str) -> std::result::Result<(bool, char, usize), String> {
    let mut chars = descr.chars();
    let order = chars.next().ok_or("empty dtype")?;
    let little = match order {
        '<' | '|' | '=' => true,
        '>' => false,
        _ => return Err(format!("unsupported dtype {descr}")),
    };
    let kind = chars.next().ok_or("empty dtype")?;
    let size: usize = chars
        .as_str()
        .parse()
        .map_err(|_| format!("unsupported dtype {descr}"))?;
    if !matches!(size, 1 | 2 | 4 | 8) {
        return Err(format!("unsupported dtype {descr}"));
    }
    Ok((little, kind, size))
}

/// The textual value of `key` in numpy's header dict (a Python literal).
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let pos = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = header[pos + key.len() + 2..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

fn fortran_to_c<V: Copy + Default>(data: &[V], shape: &[usize]) -> Vec<V> {
    let n = data.len();
    let mut out = vec![V::default(); n];
    let nd = shape.len();
    let mut idx = vec![0usize; nd];
    for (c_index, o) in out.iter_mut().enumerate() {
        let mut rem = c_index;
        for d in (0..nd).rev() {
            idx[d] = rem % shape[d];
            rem /= shape[d];
        }
        let mut f_index = 0;
        for d in (0..nd).rev() {
            f_index = f_index * shape[d] + idx[d];
        }
        *o = data[f_index];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = Tensor::from_fn(&[1, 3, 5, 7], |i| i as f32 * 0.5 - 3.0);
        let bytes = encode_npy(&t);
        assert_eq!((bytes.len() - t.numel() * 4) % 64, 0);
        assert_eq!(parse_npy(&bytes).unwrap(), t);
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert!(parse_npy(b"hello world").is_err());
        let t = Tensor::zeros(&[4, 4]);
        let bytes = encode_npy(&t);
        let err = parse_npy(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(err.contains("truncated"), "{err}");
        let mut bad = bytes.clone();
        bad[8] = 0xff;
        bad[9] = 0xff;
        assert!(parse_npy(&bad).is_err());
    }

    #[test]
    fn reads_fortran_order_and_f64() {
        // 2x3 array [[0,1,2],[3,4,5]] stored column-major as f64.
        let header = "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }";
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        for v in [0.0f64, 3.0, 1.0, 4.0, 2.0, 5.0] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let t = parse_npy(&bytes).unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.data(), &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        bytes
    }

    #[test]
    fn nested_shapes_duplicate_keys_and_a_cut_after_the_magic_are_named() {
        let one = 1f32.to_le_bytes();
        let nested = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': ((((1,),),),), }",
            &one,
        );
        let e = parse_npy(&nested).unwrap_err();
        assert!(e.contains("bad shape"), "{e}");
        let twice = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'shape': (1,), }",
            &one,
        );
        let e = parse_npy(&twice).unwrap_err();
        assert!(e.contains("'shape' more than once"), "{e}");
        let e = parse_npy(MAGIC).unwrap_err();
        assert!(e.contains("ends after the magic"), "{e}");
        let e = parse_npy(b"\x93NUMP").unwrap_err();
        assert!(e.contains("magic"), "{e}");
        // The honest forms still read, and a header alone gives the shape.
        let ok = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
            &one,
        );
        assert_eq!(parse_npy(&ok).unwrap().shape(), &[1]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.npy");
        std::fs::write(
            &path,
            with_header(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (60000, 60000), }",
                &[],
            ),
        )
        .unwrap();
        assert_eq!(peek_npy_shape(&path).unwrap(), vec![60000, 60000]);
        assert!(read_npy(&path).is_err(), "the data are missing");
    }
}
