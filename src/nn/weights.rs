//! Named weight tensors of a network (a PyTorch `state_dict`), and checked access to them.
//!
//! Loaders for `.pth` (torch.save's zip + pickle) and `.safetensors` produce a [`StateDict`]; a network
//! then takes every tensor it needs by name and shape with [`StateDict::take`], and
//! [`StateDict::finish`] rejects keys nobody took. So a missing, mis-shaped or unexpected key is an
//! error that names the key, never a silently wrong network.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

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
