//! torch.save files (`.pth`, `.pt`) read without Python: a zip reader, a small pickle machine, and
//! the few torch rebuild functions a `state_dict` needs, producing a [`StateDict`].
//!
//! Format (torch/serialization.py, `_save` and `_legacy_save`):
//! - zip archive (torch ≥ 1.6): entries `<name>/data.pkl` (the pickled object), `<name>/data/<key>`
//!   (one raw storage per key, stored uncompressed), `<name>/byteorder` (`little`/`big`).
//! - legacy (before 1.6, or `_use_new_zipfile_serialization=False`): consecutive pickles — magic
//!   number, protocol version, system info, the object, the sorted storage keys — then for each key an
//!   8-byte element count and the raw bytes.
//!
//! In the pickle, each tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, …)`
//! where `storage` comes from a persistent id `('storage', torch.FloatStorage, key, location, numel)`;
//! parameters wrap that in `_rebuild_parameter`, and the dict is a `collections.OrderedDict` whose
//! `_metadata` attribute (BUILD) is ignored.
//!
//! The input is untrusted: every length is checked against the bytes present before allocating,
//! nesting is bounded, containers cannot become cyclic, only the globals listed in [`Global`] are
//! accepted, and unknown opcodes or globals are errors that name them. Nothing here panics on bad
//! input.

mod pickle;
mod zip;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use super::state_dict::StateDict;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use pickle::*;
use zip::Zip;

/// The legacy format's first pickle: PROTO 2, LONG1 of the 10-byte magic number
/// 0x1950a86a20f9469cfc6c (torch/serialization.py `MAGIC_NUMBER`), STOP.
const LEGACY_MAGIC_PICKLE: &[u8] = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.";

/// Whether `bytes` starts like a torch.save file (zip archive or legacy pickle stream).
pub(crate) fn looks_like(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(LEGACY_MAGIC_PICKLE)
}

/// Parses a torch.save file held in memory; `path` is only used in error messages.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<StateDict> {
    let fail = |reason: String| Error::format(path, format!("pth: {reason}"));
    if bytes.starts_with(LEGACY_MAGIC_PICKLE) {
        return parse_legacy(path, bytes).map_err(fail);
    }
    let zip = Zip::parse(bytes).map_err(|e| fail(format!("zip: {e}")))?;
    // The archive's top folder is named after the file (or `archive`); find it through data.pkl.
    let pkl_name = zip
        .entries
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| *n == "data.pkl" || n.ends_with("/data.pkl"))
        .min_by_key(|n| n.len())
        .ok_or_else(|| {
            fail("zip archive has no `data.pkl`, so it was not written by torch.save".into())
        })?
        .to_string();
    let prefix = &pkl_name[..pkl_name.len() - "data.pkl".len()];
    if zip.find(&format!("{prefix}constants.pkl")).is_some() {
        return Err(fail(
            "this is a TorchScript module (torch.jit.save), not a state dict; save \
             `model.state_dict()` with torch.save, or run it with the `torch` feature"
                .into(),
        ));
    }
    let big_endian = match zip.find(&format!("{prefix}byteorder")) {
        None => false,
        Some(e) => match &*zip.read(e).map_err(|e| fail(format!("zip: {e}")))? {
            b"little" => false,
            b"big" => true,
            other => {
                return Err(fail(format!(
                    "`byteorder` says {:?}, expected `little` or `big`",
                    String::from_utf8_lossy(other)
                )));
            }
        },
    };
    let pkl_entry = zip.find(&pkl_name).expect("found above");
    let pkl = zip.read(pkl_entry).map_err(|e| fail(format!("zip: {e}")))?;
    let mut vm = Unpickler::new(&pkl);
    let root = vm.load().map_err(|e| fail(format!("{pkl_name}: {e}")))?;
    let storages = |key: &str| -> std::result::Result<Cow<'_, [u8]>, String> {
        let name = format!("{prefix}data/{key}");
        let entry = zip
            .find(&name)
            .ok_or_else(|| format!("storage `{name}` is missing from the archive"))?;
        zip.read(entry).map_err(|e| format!("zip: {e}"))
    };
    to_state_dict(path, root, bytes.len(), big_endian, &storages).map_err(fail)
}

/// The legacy stream: pickles for magic, protocol version, system info, the object and the storage
/// keys, then per key `numel: u64` and the raw bytes (torch/serialization.py `_legacy_save`).
fn parse_legacy(path: &Path, bytes: &[u8]) -> std::result::Result<StateDict, String> {
    let mut vm = Unpickler::new(bytes);
    vm.pos = LEGACY_MAGIC_PICKLE.len();
    match vm.load()? {
        Value::Int(1001) => {}
        other => {
            return Err(format!(
                "legacy format version {} (expected 1001)",
                other.describe()
            ));
        }
    }
    let sys_info = vm.load()?;
    let little_endian = match &sys_info {
        Value::Dict(d) => d
            .items
            .borrow()
            .iter()
            .find(|(k, _)| k.as_str() == Some("little_endian"))
            .map(|(_, v)| matches!(v, Value::Bool(true))),
        _ => None,
    }
    .ok_or("legacy header has no `little_endian` flag")?;
    let root = vm.load()?;
    let keys = vm.load()?;
    let Value::List(keys) = keys else {
        return Err(format!("legacy storage key list is {}", keys.describe()));
    };
    let mut pos = vm.pos;
    let mut data: HashMap<String, &[u8]> = HashMap::new();
    for key in keys.items.borrow().iter() {
        let key = key.as_str().ok_or("legacy storage key is not a string")?;
        let storage = vm
            .storages
            .get(key)
            .ok_or_else(|| format!("legacy storage `{key}` is listed but never used"))?;
        let header = bytes
            .get(pos..pos + 8)
            .ok_or_else(|| format!("file ends before storage `{key}`"))?;
        let header: [u8; 8] = header.try_into().expect("8 bytes");
        let numel = if little_endian {
            u64::from_le_bytes(header)
        } else {
            u64::from_be_bytes(header)
        };
        if numel != storage.numel as u64 {
            return Err(format!(
                "legacy storage `{key}` holds {numel} elements but the pickle says {}",
                storage.numel
            ));
        }
        let len = storage
            .numel
            .checked_mul(storage.kind.elem_bytes)
            .filter(|&n| n <= bytes.len() - pos - 8)
            .ok_or_else(|| format!("file ends inside storage `{key}`"))?;
        data.insert(key.to_string(), &bytes[pos + 8..pos + 8 + len]);
        pos += 8 + len;
    }
    let storages = |key: &str| -> std::result::Result<Cow<'_, [u8]>, String> {
        data.get(key)
            .map(|d| Cow::Borrowed(*d))
            .ok_or_else(|| format!("legacy storage `{key}` is not in the file"))
    };
    to_state_dict(path, root, bytes.len(), !little_endian, &storages)
}

// ---------------------------------------------------------------------------------------------------
// From the unpickled object to a StateDict.

/// Fetches a storage's raw bytes by key (from a zip entry, or a slice of a legacy file).
type StorageBytes<'s> = dyn Fn(&str) -> std::result::Result<Cow<'s, [u8]>, String> + 's;

/// Finds the tensor dict in `root` (the root itself, or the only tensor dict one level down) and
/// materialises its tensors as f32.
fn to_state_dict<'s>(
    path: &Path,
    root: Value,
    file_len: usize,
    big_endian: bool,
    storages: &StorageBytes<'s>,
) -> std::result::Result<StateDict, String> {
    let Value::Dict(root_dict) = &root else {
        return Err(format!(
            "the file holds {}, not a dict of tensors (save `model.state_dict()`)",
            root.describe()
        ));
    };
    let tensors = match tensor_entries(root_dict) {
        Ok(t) => t,
        Err(_) => {
            // A checkpoint: look for exactly one tensor dict among the values.
            let items = root_dict.items.borrow();
            let found: Vec<(String, &Rc<DictNode>)> = items
                .iter()
                .filter_map(|(k, v)| match v {
                    Value::Dict(d) if tensor_entries(d).is_ok_and(|t| !t.is_empty()) => {
                        Some((k.as_str().unwrap_or("?").to_string(), d))
                    }
                    _ => None,
                })
                .collect();
            match found.as_slice() {
                [(key, d)] => {
                    tracing::debug!("{}: using the state dict under `{key}`", path.display());
                    tensor_entries(d).expect("checked above")
                }
                [] => {
                    let keys: Vec<String> = items
                        .iter()
                        .take(12)
                        .map(|(k, v)| format!("`{}` ({})", k.describe_key(), v.describe()))
                        .collect();
                    return Err(format!(
                        "no dict of tensors found: the top-level dict mixes tensors with other values or \
                         holds none: {} entries ({}{})",
                        items.len(),
                        keys.join(", "),
                        if items.len() > 12 { ", …" } else { "" }
                    ));
                }
                several => {
                    let keys: Vec<String> = several.iter().map(|(k, _)| format!("`{k}`")).collect();
                    return Err(format!(
                        "the checkpoint holds several tensor dicts ({}); expected exactly one",
                        keys.join(", ")
                    ));
                }
            }
        }
    };
    // Tied weights share a storage and so appear once in the file but once per key here; f16 doubles
    // in f32. This bound admits both yet stops a crafted file from expanding without limit.
    let mut budget_bytes = file_len.saturating_mul(8).saturating_add(64 << 20);
    let mut sd = StateDict::new(path.display().to_string());
    for (key, t) in tensors {
        let values = materialise(&t, big_endian, storages, &mut budget_bytes)
            .map_err(|e| format!("key `{key}`: {e}"))?;
        sd.insert(key, values);
    }
    Ok(sd)
}

/// The (key, tensor) pairs of a dict whose keys are all strings and values all tensors; otherwise a
/// description of the first entry that is not.
fn tensor_entries(d: &DictNode) -> std::result::Result<Vec<(String, Rc<TensorRef>)>, String> {
    d.items
        .borrow()
        .iter()
        .map(|(k, v)| match (k, v) {
            (Value::Str(k), Value::Tensor(t)) => Ok((k.to_string(), t.clone())),
            _ => Err(format!(
                "its entry `{}` holds {}",
                k.describe_key(),
                v.describe()
            )),
        })
        .collect()
}

/// Reads one tensor's elements from its storage, gathering through the strides, as f32.
fn materialise<'s>(
    t: &TensorRef,
    big_endian: bool,
    storages: &StorageBytes<'s>,
    budget_bytes: &mut usize,
) -> std::result::Result<Tensor, String> {
    let kind = t.storage.kind;
    let dtype = kind.float.ok_or_else(|| {
        format!(
            "dtype {} ({}) is not supported (weights load from float32, float16, bfloat16 or float64)",
            kind.dtype, kind.name
        )
    })?;
    let as_usize = |v: &[i64], what: &str| -> std::result::Result<Vec<usize>, String> {
        v.iter()
            .map(|&x| usize::try_from(x).map_err(|_| format!("negative {what} {v:?}")))
            .collect()
    };
    let size = as_usize(&t.size, "size")?;
    let stride = as_usize(&t.stride, "stride")?;
    if size.len() != stride.len() {
        return Err(format!(
            "size {size:?} and stride {stride:?} differ in length"
        ));
    }
    let offset = usize::try_from(t.offset).map_err(|_| format!("negative offset {}", t.offset))?;
    let numel = size
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("size {size:?} overflows"))?;
    if numel == 0 {
        return Tensor::from_vec(&size, Vec::new()).map_err(|e| e.to_string());
    }
    let last = size
        .iter()
        .zip(&stride)
        .try_fold(offset, |acc, (&n, &s)| (n - 1).checked_mul(s)?.checked_add(acc))
        .filter(|&last| last < t.storage.numel)
        .ok_or_else(|| {
            format!(
                "size {size:?}, stride {stride:?} and offset {offset} reach past the storage's {} elements",
                t.storage.numel
            )
        })?;
    debug_assert!(last < t.storage.numel);
    let out_bytes = numel.saturating_mul(4);
    if out_bytes > *budget_bytes {
        return Err(format!(
            "size {size:?} expands beyond what the file can hold (a broadcast view?)"
        ));
    }
    *budget_bytes -= out_bytes;
    let bytes = storages(&t.storage.key)?;
    let es = dtype.size_bytes();
    if t.storage.numel.saturating_mul(es) > bytes.len() {
        return Err(format!(
            "storage `{}` has {} bytes, fewer than its {} elements of {}",
            t.storage.key,
            bytes.len(),
            t.storage.numel,
            kind.dtype
        ));
    }
    // C-contiguous (dims of size 1 may carry any stride): one slice.
    let mut expected = 1usize;
    let contiguous = size.iter().zip(&stride).rev().all(|(&n, &s)| {
        let ok = n == 1 || s == expected;
        expected *= n;
        ok
    });
    let values = if contiguous {
        dtype.decode_all(&bytes[offset * es..(offset + numel) * es], big_endian)
    } else {
        // Odometer over the multi-index; every position visited is ≤ `last`, checked above.
        let mut out = Vec::with_capacity(numel);
        let mut index = vec![0usize; size.len()];
        let mut pos = offset;
        for _ in 0..numel {
            out.push(dtype.decode(&bytes[pos * es..(pos + 1) * es], big_endian));
            for d in (0..size.len()).rev() {
                index[d] += 1;
                pos = pos.wrapping_add(stride[d]);
                if index[d] < size[d] {
                    break;
                }
                pos = pos.wrapping_sub(stride[d].wrapping_mul(size[d]));
                index[d] = 0;
            }
        }
        out
    };
    Tensor::from_vec(&size, values).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::pickle::VmResult;
    use super::*;
    use crate::nn::weights::state_dict::FloatDtype;

    fn run(pickle: &[u8]) -> VmResult<Value> {
        Unpickler::new(pickle).load()
    }

    #[test]
    fn a_dict_without_tensors_is_described() {
        // {'epoch': 3, 'name': 'x'}
        let root =
            run(b"\x80\x02}(X\x05\x00\x00\x00epochK\x03X\x04\x00\x00\x00nameX\x01\x00\x00\x00xu.")
                .unwrap();
        let none =
            |_: &str| -> std::result::Result<Cow<'static, [u8]>, String> { Err("none".into()) };
        let e = to_state_dict(Path::new("c.pth"), root, 100, false, &none).unwrap_err();
        assert!(
            e.contains("`epoch` (int 3)") && e.contains("`name` (a string)"),
            "{e}"
        );
        let list = run(b"\x80\x02]K\x01a.").unwrap();
        let e = to_state_dict(Path::new("c.pth"), list, 100, false, &none).unwrap_err();
        assert!(e.contains("a list of 1"), "{e}");
    }

    #[test]
    fn f16_conversion_matches_ieee() {
        let f = |h: u16| FloatDtype::F16.decode(&h.to_le_bytes(), false);
        assert_eq!(f(0x3c00), 1.0);
        assert_eq!(f(0xc000), -2.0);
        assert_eq!(f(0x7bff), 65504.0);
        assert_eq!(f(0x0001), 2f32.powi(-24));
        assert_eq!(f(0x8001), -(2f32.powi(-24)));
        assert_eq!(f(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(f(0x7c00), f32::INFINITY);
        assert!(f(0x7e00).is_nan());
        assert_eq!(f(0x8000).to_bits(), (-0.0f32).to_bits());
    }
}
