//! Named weight tensors of a network (a PyTorch `state_dict`), and checked access to them.
//!
//! Loaders for `.pth` (torch.save's zip + pickle) and `.safetensors` produce a [`StateDict`]; a network
//! then takes every tensor it needs by name and shape with [`StateDict::take`], and
//! [`StateDict::finish`] rejects keys nobody took. So a missing, mis-shaped or unexpected key is an
//! error that names the key, never a silently wrong network.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The stored element types that load as f32 (every other dtype is rejected, naming the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatDtype {
    F32,
    F16,
    BF16,
    F64,
}

impl FloatDtype {
    pub(crate) fn size_bytes(self) -> usize {
        match self {
            FloatDtype::F32 => 4,
            FloatDtype::F16 | FloatDtype::BF16 => 2,
            FloatDtype::F64 => 8,
        }
    }

    /// Decodes one element from exactly `size_bytes()` bytes. Conversion to f32 is exact except for
    /// f64, which rounds to nearest as torch's `.float()` does.
    pub(crate) fn decode(self, b: &[u8], big_endian: bool) -> f32 {
        match self {
            FloatDtype::F32 => {
                let a = [b[0], b[1], b[2], b[3]];
                f32::from_bits(if big_endian {
                    u32::from_be_bytes(a)
                } else {
                    u32::from_le_bytes(a)
                })
            }
            FloatDtype::F16 | FloatDtype::BF16 => {
                let a = [b[0], b[1]];
                let h = if big_endian {
                    u16::from_be_bytes(a)
                } else {
                    u16::from_le_bytes(a)
                };
                if self == FloatDtype::F16 {
                    f16_to_f32(h)
                } else {
                    // bfloat16 is the top half of an f32.
                    f32::from_bits(u32::from(h) << 16)
                }
            }
            FloatDtype::F64 => {
                let a = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
                (if big_endian {
                    f64::from_be_bytes(a)
                } else {
                    f64::from_le_bytes(a)
                }) as f32
            }
        }
    }

    /// Decodes a whole number of contiguous elements.
    pub(crate) fn decode_all(self, bytes: &[u8], big_endian: bool) -> Vec<f32> {
        bytes
            .chunks_exact(self.size_bytes())
            .map(|b| self.decode(b, big_endian))
            .collect()
    }
}

/// IEEE 754 binary16 → binary32, exact (every half value is representable as a float).
fn f16_to_f32(h: u16) -> f32 {
    let negative = h & 0x8000 != 0;
    let exp = u32::from((h >> 10) & 0x1f);
    let mantissa = u32::from(h & 0x3ff);
    let sign_bit = u32::from(negative) << 31;
    match exp {
        // Zero and subnormals: mantissa · 2⁻²⁴ (exact in f32).
        0 => {
            let v = mantissa as f32 * (1.0 / 16_777_216.0);
            if negative { -v } else { v }
        }
        // Inf and NaN keep their payload.
        0x1f => f32::from_bits(sign_bit | 0x7f80_0000 | (mantissa << 13)),
        // Normal: rebias the exponent from 15 to 127.
        _ => f32::from_bits(sign_bit | ((exp + 112) << 23) | (mantissa << 13)),
    }
}

/// Weight tensors by name, in f32 (converted from the file's dtype on load).
#[derive(Debug, Clone, Default)]
pub struct StateDict {
    /// Where the weights came from (a file path, or a description), for error messages.
    source: String,
    entries: BTreeMap<String, Tensor>,
}

impl StateDict {
    /// An empty dictionary whose errors mention `source`.
    pub fn new(source: impl Into<String>) -> Self {
        StateDict {
            source: source.into(),
            entries: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) one tensor.
    pub fn insert(&mut self, key: impl Into<String>, value: Tensor) {
        self.entries.insert(key.into(), value);
    }

    /// Where the weights came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The names still present, in sorted order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Every (name, tensor) pair, in sorted key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tensor `key`, without removing it.
    pub fn get(&self, key: &str) -> Option<&Tensor> {
        self.entries.get(key)
    }

    /// Removes and returns tensor `key`, which must have exactly `shape`.
    pub fn take(&mut self, key: &str, shape: &[usize]) -> Result<Tensor> {
        let t = self.entries.remove(key).ok_or_else(|| {
            Error::format(
                &self.source,
                format!("weights: missing key `{key}` (expected shape {shape:?})"),
            )
        })?;
        if t.shape() != shape {
            return Err(Error::format(
                &self.source,
                format!(
                    "weights: key `{key}` has shape {:?}, the network expects {shape:?}",
                    t.shape()
                ),
            ));
        }
        Ok(t)
    }

    /// Succeeds when every key was taken; otherwise names the keys the network does not use.
    pub fn finish(self) -> Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let extra: Vec<&str> = self.keys().take(8).collect();
        Err(Error::format(
            &self.source,
            format!(
                "weights: {} unexpected key(s) the network does not use: {}{}",
                self.entries.len(),
                extra.join(", "),
                if self.entries.len() > extra.len() {
                    ", …"
                } else {
                    ""
                }
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_checks_presence_and_shape_and_finish_names_leftovers() {
        let mut sd = StateDict::new("test.pth");
        sd.insert("a.weight", Tensor::zeros(&[2, 3]));
        sd.insert("b.weight", Tensor::zeros(&[4]));
        sd.insert("c.weight", Tensor::zeros(&[1]));
        let e = sd.take("a.weight", &[3, 2]).unwrap_err().to_string();
        assert!(e.contains("a.weight") && e.contains("[2, 3]"), "{e}");
        let e = sd.take("missing", &[1]).unwrap_err().to_string();
        assert!(e.contains("`missing`") && e.contains("test.pth"), "{e}");
        assert_eq!(sd.take("b.weight", &[4]).unwrap().shape(), &[4]);
        let e = sd.finish().unwrap_err().to_string();
        assert!(e.contains("c.weight") && !e.contains("b.weight"), "{e}");
    }
}
