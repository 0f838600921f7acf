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

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::rc::Rc;

use super::state_dict::{FloatDtype, StateDict};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

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

/// A dict's (key, value) pairs.
type DictNode = Node<(Value, Value)>;

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

// ---------------------------------------------------------------------------------------------------
// Zip archive reader (central directory, zip64, stored and deflated entries).

struct ZipEntry {
    name: String,
    method: u16,
    flags: u16,
    local_header: usize,
    compressed: usize,
    uncompressed: usize,
}

struct Zip<'a> {
    bytes: &'a [u8],
    entries: Vec<ZipEntry>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

impl<'a> Zip<'a> {
    /// Reads the central directory (APPNOTE.TXT 4.3.12–4.3.16, zip64 in 4.3.14 and 4.5.3).
    fn parse(bytes: &'a [u8]) -> std::result::Result<Self, String> {
        const EOCD: u32 = 0x0605_4b50;
        let too_short = || "truncated (no end-of-central-directory record)".to_string();
        let search_from = bytes.len().checked_sub(22).ok_or_else(too_short)?;
        let search_to = search_from.saturating_sub(u16::MAX as usize);
        let eocd = (search_to..=search_from)
            .rev()
            .find(|&i| u32_at(bytes, i) == Some(EOCD))
            .ok_or_else(too_short)?;
        let mut count = u64::from(u16_at(bytes, eocd + 10).ok_or_else(too_short)?);
        let mut cd_size = u64::from(u32_at(bytes, eocd + 12).ok_or_else(too_short)?);
        let mut cd_offset = u64::from(u32_at(bytes, eocd + 16).ok_or_else(too_short)?);
        if count == 0xffff || cd_size == 0xffff_ffff || cd_offset == 0xffff_ffff {
            // zip64: a locator just before the EOCD points at the zip64 EOCD record.
            let bad = || "broken zip64 end-of-central-directory record".to_string();
            let locator = eocd.checked_sub(20).ok_or_else(bad)?;
            if u32_at(bytes, locator) != Some(0x0706_4b50) {
                return Err(bad());
            }
            let record =
                usize::try_from(u64_at(bytes, locator + 8).ok_or_else(bad)?).map_err(|_| bad())?;
            if u32_at(bytes, record) != Some(0x0606_4b50) {
                return Err(bad());
            }
            count = u64_at(bytes, record + 32).ok_or_else(bad)?;
            cd_size = u64_at(bytes, record + 40).ok_or_else(bad)?;
            cd_offset = u64_at(bytes, record + 48).ok_or_else(bad)?;
        }
        let cd = usize::try_from(cd_offset)
            .ok()
            .zip(usize::try_from(cd_size).ok())
            .and_then(|(o, s)| bytes.get(o..o.checked_add(s)?))
            .ok_or("central directory lies outside the file")?;
        // Each central entry takes at least 46 bytes: a larger count is a lie, not an allocation.
        if count > (cd.len() / 46) as u64 {
            return Err(format!(
                "central directory claims {count} entries in {} bytes",
                cd.len()
            ));
        }
        let mut entries = Vec::with_capacity(count as usize);
        let mut at = 0usize;
        for i in 0..count {
            let bad = || format!("central directory entry {i} is truncated or corrupt");
            if u32_at(cd, at) != Some(0x0201_4b50) {
                return Err(bad());
            }
            let flags = u16_at(cd, at + 8).ok_or_else(bad)?;
            let method = u16_at(cd, at + 10).ok_or_else(bad)?;
            let mut compressed = u64::from(u32_at(cd, at + 20).ok_or_else(bad)?);
            let mut uncompressed = u64::from(u32_at(cd, at + 24).ok_or_else(bad)?);
            let name_len = usize::from(u16_at(cd, at + 28).ok_or_else(bad)?);
            let extra_len = usize::from(u16_at(cd, at + 30).ok_or_else(bad)?);
            let comment_len = usize::from(u16_at(cd, at + 32).ok_or_else(bad)?);
            let mut local = u64::from(u32_at(cd, at + 42).ok_or_else(bad)?);
            let name = cd.get(at + 46..at + 46 + name_len).ok_or_else(bad)?;
            let extra = cd
                .get(at + 46 + name_len..at + 46 + name_len + extra_len)
                .ok_or_else(bad)?;
            // zip64 extended information (header id 1): the 64-bit values, in this order, of the
            // fields whose 32-bit slot holds 0xffffffff.
            let mut e = 0;
            while e + 4 <= extra.len() {
                let id = u16_at(extra, e).ok_or_else(bad)?;
                let len = usize::from(u16_at(extra, e + 2).ok_or_else(bad)?);
                let body = extra.get(e + 4..e + 4 + len).ok_or_else(bad)?;
                if id == 1 {
                    let mut f = 0;
                    for field in [&mut uncompressed, &mut compressed, &mut local] {
                        if *field == 0xffff_ffff {
                            *field = u64_at(body, f).ok_or_else(bad)?;
                            f += 8;
                        }
                    }
                }
                e += 4 + len;
            }
            let to_usize = |v: u64| usize::try_from(v).map_err(|_| bad());
            entries.push(ZipEntry {
                name: String::from_utf8_lossy(name).into_owned(),
                method,
                flags,
                local_header: to_usize(local)?,
                compressed: to_usize(compressed)?,
                uncompressed: to_usize(uncompressed)?,
            });
            at += 46 + name_len + extra_len + comment_len;
        }
        Ok(Zip { bytes, entries })
    }

    fn find(&self, name: &str) -> Option<&ZipEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// An entry's content: borrowed when stored (torch.save's case), inflated when deflated.
    fn read(&self, e: &ZipEntry) -> std::result::Result<Cow<'a, [u8]>, String> {
        let bad = |what: &str| format!("entry `{}`: {what}", e.name);
        if e.flags & 1 != 0 {
            return Err(bad("encrypted"));
        }
        let h = e.local_header;
        if u32_at(self.bytes, h) != Some(0x0403_4b50) {
            return Err(bad("local header missing"));
        }
        let name_len = usize::from(u16_at(self.bytes, h + 26).ok_or_else(|| bad("truncated"))?);
        let extra_len = usize::from(u16_at(self.bytes, h + 28).ok_or_else(|| bad("truncated"))?);
        let start = h + 30 + name_len + extra_len;
        let data = start
            .checked_add(e.compressed)
            .and_then(|end| self.bytes.get(start..end))
            .ok_or_else(|| bad("data extends past the end of the file"))?;
        match e.method {
            0 if e.compressed == e.uncompressed => Ok(Cow::Borrowed(data)),
            0 => Err(bad("stored sizes disagree")),
            8 => {
                // Deflate expands at most ~1032×; a larger claim is corrupt. Beyond that, inflating
                // to more than a few times the archive is refused rather than allocated (torch.save
                // itself never compresses).
                let limit = self.bytes.len().saturating_mul(8).saturating_add(64 << 20);
                if e.uncompressed / 1032 > e.compressed + 1 || e.uncompressed > limit {
                    return Err(bad("implausible uncompressed size"));
                }
                let mut out = Vec::with_capacity(e.uncompressed);
                flate2::read::DeflateDecoder::new(data)
                    .take(e.uncompressed as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|err| bad(&format!("inflating: {err}")))?;
                if out.len() != e.uncompressed {
                    return Err(bad("inflated size disagrees with the directory"));
                }
                Ok(Cow::Owned(out))
            }
            m => Err(bad(&format!("compression method {m} is not supported"))),
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The pickle machine.

/// Containers nested deeper than this are rejected (a state dict needs 4), so dropping a value never
/// recurses deeply.
const MAX_DEPTH: u32 = 64;

/// A list or dict. Pickle fills a container after creating (and memoising) it, and only then places
/// it inside another; so a container is frozen once it becomes an element, which keeps depths exact
/// and rules out cycles.
struct Node<T> {
    items: RefCell<Vec<T>>,
    frozen: Cell<bool>,
    depth: Cell<u32>,
}

impl<T> Node<T> {
    fn new() -> Rc<Self> {
        Rc::new(Node {
            items: RefCell::new(Vec::new()),
            frozen: Cell::new(false),
            depth: Cell::new(1),
        })
    }
}

/// Element sizes and dtype names of torch's typed storages (torch/storage.py, `_dtype_to_storage_type_map`).
#[derive(Debug, Clone, Copy)]
struct StorageKind {
    name: &'static str,
    dtype: &'static str,
    elem_bytes: usize,
    float: Option<FloatDtype>,
}

#[rustfmt::skip]
const STORAGE_KINDS: &[StorageKind] = &[
    StorageKind { name: "FloatStorage", dtype: "float32", elem_bytes: 4, float: Some(FloatDtype::F32) },
    StorageKind { name: "HalfStorage", dtype: "float16", elem_bytes: 2, float: Some(FloatDtype::F16) },
    StorageKind { name: "BFloat16Storage", dtype: "bfloat16", elem_bytes: 2, float: Some(FloatDtype::BF16) },
    StorageKind { name: "DoubleStorage", dtype: "float64", elem_bytes: 8, float: Some(FloatDtype::F64) },
    StorageKind { name: "LongStorage", dtype: "int64", elem_bytes: 8, float: None },
    StorageKind { name: "IntStorage", dtype: "int32", elem_bytes: 4, float: None },
    StorageKind { name: "ShortStorage", dtype: "int16", elem_bytes: 2, float: None },
    StorageKind { name: "CharStorage", dtype: "int8", elem_bytes: 1, float: None },
    StorageKind { name: "ByteStorage", dtype: "uint8", elem_bytes: 1, float: None },
    StorageKind { name: "BoolStorage", dtype: "bool", elem_bytes: 1, float: None },
    StorageKind { name: "ComplexFloatStorage", dtype: "complex64", elem_bytes: 8, float: None },
    StorageKind { name: "ComplexDoubleStorage", dtype: "complex128", elem_bytes: 16, float: None },
    StorageKind { name: "QInt8Storage", dtype: "qint8", elem_bytes: 1, float: None },
    StorageKind { name: "QUInt8Storage", dtype: "quint8", elem_bytes: 1, float: None },
    StorageKind { name: "QInt32Storage", dtype: "qint32", elem_bytes: 4, float: None },
    StorageKind { name: "UntypedStorage", dtype: "uint8 (untyped)", elem_bytes: 1, float: None },
];

/// A storage named by a persistent id; its bytes are fetched when a tensor is materialised.
struct StorageRef {
    key: String,
    kind: StorageKind,
    numel: usize,
}

/// A tensor as the pickle describes it: a strided view of a storage (checked when materialised, so
/// that errors can name the key).
struct TensorRef {
    storage: Rc<StorageRef>,
    offset: i64,
    size: Vec<i64>,
    stride: Vec<i64>,
}

/// The callables and classes a state dict's pickle may name; anything else is refused.
#[derive(Debug, Clone, Copy)]
enum Global {
    OrderedDict,
    RebuildTensorV2,
    RebuildTensor,
    RebuildParameter,
    RebuildParameterWithState,
    RebuildFromTypeV2,
    TensorClass,
    Storage(StorageKind),
    CodecsEncode,
}

impl Global {
    fn resolve(module: &str, name: &str) -> std::result::Result<Global, String> {
        Ok(match (module, name) {
            ("collections", "OrderedDict") => Global::OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
            ("torch._utils", "_rebuild_tensor") => Global::RebuildTensor,
            ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
            ("torch._utils", "_rebuild_parameter_with_state") => Global::RebuildParameterWithState,
            ("torch._tensor", "_rebuild_from_type_v2") => Global::RebuildFromTypeV2,
            ("torch", "Tensor") | ("torch.nn.parameter", "Parameter") => Global::TensorClass,
            ("_codecs", "encode") => Global::CodecsEncode,
            ("torch", storage) if STORAGE_KINDS.iter().any(|k| k.name == storage) => {
                Global::Storage(
                    *STORAGE_KINDS
                        .iter()
                        .find(|k| k.name == storage)
                        .expect("checked"),
                )
            }
            _ => {
                return Err(format!(
                    "unsupported global `{module}.{name}`: a weights file should hold only tensors \
                     (save `model.state_dict()` rather than the model or other Python objects)"
                ));
            }
        })
    }
}

#[derive(Clone)]
enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Rc<[Value]>, u32),
    List(Rc<Node<Value>>),
    Dict(Rc<DictNode>),
    Global(Global),
    Storage(Rc<StorageRef>),
    Tensor(Rc<TensorRef>),
}

impl Value {
    fn depth(&self) -> u32 {
        match self {
            Value::Tuple(_, d) => *d,
            Value::List(n) => n.depth.get(),
            Value::Dict(n) => n.depth.get(),
            _ => 0,
        }
    }

    fn freeze(&self) {
        match self {
            Value::List(n) => n.frozen.set(true),
            Value::Dict(n) => n.frozen.set(true),
            _ => {}
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// What a value is, for error messages.
    fn describe(&self) -> String {
        match self {
            Value::None => "None".into(),
            Value::Bool(b) => format!("bool {b}"),
            Value::Int(i) => format!("int {i}"),
            Value::Float(f) => format!("float {f}"),
            Value::Str(_) => "a string".into(),
            Value::Bytes(b) => format!("{} bytes", b.len()),
            Value::Tuple(t, _) => format!("a tuple of {}", t.len()),
            Value::List(l) => format!("a list of {}", l.items.borrow().len()),
            Value::Dict(d) => format!("a dict of {}", d.items.borrow().len()),
            Value::Global(g) => format!("{g:?}"),
            Value::Storage(_) => "a storage".into(),
            Value::Tensor(_) => "a tensor".into(),
        }
    }

    fn describe_key(&self) -> String {
        match self {
            Value::Str(s) => s.to_string(),
            Value::Int(i) => i.to_string(),
            other => other.describe(),
        }
    }
}

/// Adds `child` to a container of depth `depth`: freezes the child, then refuses if the container is
/// itself frozen (which also catches a container added to itself) or would nest too deep.
fn adopt(frozen: &Cell<bool>, depth: &Cell<u32>, child: &Value) -> std::result::Result<(), String> {
    child.freeze();
    if frozen.get() {
        return Err(
            "a container is modified after being placed in another (not a state dict)".into(),
        );
    }
    let d = child.depth() + 1;
    if d > MAX_DEPTH {
        return Err(format!("containers nested deeper than {MAX_DEPTH}"));
    }
    depth.set(depth.get().max(d));
    Ok(())
}

fn make_tuple(items: Vec<Value>) -> std::result::Result<Value, String> {
    let depth = items.iter().map(Value::depth).max().unwrap_or(0) + 1;
    if depth > MAX_DEPTH {
        return Err(format!("containers nested deeper than {MAX_DEPTH}"));
    }
    items.iter().for_each(Value::freeze);
    Ok(Value::Tuple(items.into(), depth))
}

/// A pickle interpreter for the opcodes torch.save emits (protocols 2–5), one pickle per `load`.
struct Unpickler<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    /// Storages by key, shared by every tensor that views them.
    storages: HashMap<String, Rc<StorageRef>>,
}

/// Names of pickle opcodes (CPython Lib/pickletools.py), for error messages.
#[rustfmt::skip]
fn opcode_name(op: u8) -> &'static str {
    match op {
        b'(' => "MARK", b'.' => "STOP", b'0' => "POP", b'1' => "POP_MARK", b'2' => "DUP",
        b'F' => "FLOAT", b'I' => "INT", b'J' => "BININT", b'K' => "BININT1", b'L' => "LONG",
        b'M' => "BININT2", b'N' => "NONE", b'P' => "PERSID", b'Q' => "BINPERSID", b'R' => "REDUCE",
        b'S' => "STRING", b'T' => "BINSTRING", b'U' => "SHORT_BINSTRING", b'V' => "UNICODE",
        b'X' => "BINUNICODE", b'a' => "APPEND", b'b' => "BUILD", b'c' => "GLOBAL", b'd' => "DICT",
        b'}' => "EMPTY_DICT", b'e' => "APPENDS", b'g' => "GET", b'h' => "BINGET", b'i' => "INST",
        b'j' => "LONG_BINGET", b'l' => "LIST", b']' => "EMPTY_LIST", b'o' => "OBJ", b'p' => "PUT",
        b'q' => "BINPUT", b'r' => "LONG_BINPUT", b's' => "SETITEM", b't' => "TUPLE",
        b')' => "EMPTY_TUPLE", b'u' => "SETITEMS", b'G' => "BINFLOAT", 0x80 => "PROTO",
        0x81 => "NEWOBJ", 0x82 => "EXT1", 0x83 => "EXT2", 0x84 => "EXT4", 0x85 => "TUPLE1",
        0x86 => "TUPLE2", 0x87 => "TUPLE3", 0x88 => "NEWTRUE", 0x89 => "NEWFALSE", 0x8a => "LONG1",
        0x8b => "LONG4", b'B' => "BINBYTES", b'C' => "SHORT_BINBYTES", 0x8c => "SHORT_BINUNICODE",
        0x8d => "BINUNICODE8", 0x8e => "BINBYTES8", 0x8f => "EMPTY_SET", 0x90 => "ADDITEMS",
        0x91 => "FROZENSET", 0x92 => "NEWOBJ_EX", 0x93 => "STACK_GLOBAL", 0x94 => "MEMOIZE",
        0x95 => "FRAME", 0x96 => "BYTEARRAY8", 0x97 => "NEXT_BUFFER", 0x98 => "READONLY_BUFFER",
        _ => "not a pickle opcode",
    }
}

type VmResult<T> = std::result::Result<T, String>;

impl<'a> Unpickler<'a> {
    fn new(data: &'a [u8]) -> Self {
        Unpickler {
            data,
            pos: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            storages: HashMap::new(),
        }
    }

    fn take(&mut self, n: usize) -> VmResult<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| {
                format!(
                    "truncated: {n} bytes wanted at byte {} of {}",
                    self.pos,
                    self.data.len()
                )
            })?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn byte(&mut self) -> VmResult<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> VmResult<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64_len(&mut self) -> VmResult<usize> {
        let n = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        // Checked against the remaining input by `take`; saturate so a huge value fails there.
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn text(&mut self, n: usize) -> VmResult<Rc<str>> {
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(Rc::from)
            .map_err(|_| format!("invalid UTF-8 string before byte {}", self.pos))
    }

    /// A newline-terminated line (GLOBAL's module and name).
    fn line(&mut self) -> VmResult<&'a str> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("truncated: unterminated GLOBAL")?;
        let s = std::str::from_utf8(&rest[..n]).map_err(|_| "invalid UTF-8 in GLOBAL")?;
        self.pos += n + 1;
        Ok(s)
    }

    fn pop(&mut self) -> VmResult<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(format!("stack underflow before byte {}", self.pos));
        }
        Ok(self.stack.pop().expect("checked"))
    }

    fn top(&self) -> VmResult<&Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(format!("stack underflow before byte {}", self.pos));
        }
        Ok(self.stack.last().expect("checked"))
    }

    fn pop_mark(&mut self) -> VmResult<Vec<Value>> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| format!("MARK missing before byte {}", self.pos))?;
        Ok(self.stack.split_off(mark))
    }

    fn memo_get(&self, i: u32) -> VmResult<Value> {
        self.memo
            .get(&i)
            .cloned()
            .ok_or_else(|| format!("memo entry {i} read before it was written"))
    }

    fn memo_put(&mut self, i: u32) -> VmResult<()> {
        let v = self.top()?.clone();
        self.memo.insert(i, v);
        Ok(())
    }

    /// Runs one pickle from the current position to its STOP and returns its value.
    fn load(&mut self) -> VmResult<Value> {
        self.stack.clear();
        self.marks.clear();
        self.memo.clear();
        loop {
            let at = self.pos;
            let op = self
                .byte()
                .map_err(|_| "truncated: the pickle ends without STOP".to_string())?;
            match op {
                0x80 => {
                    let proto = self.byte()?;
                    if proto > 5 {
                        return Err(format!("pickle protocol {proto} is not supported (≤ 5)"));
                    }
                }
                // FRAME only announces how many bytes follow; the data is read as usual.
                0x95 => {
                    let n = self.u64_len()?;
                    if n > self.data.len() - self.pos {
                        return Err(format!("FRAME of {n} bytes runs past the end at byte {at}"));
                    }
                }
                b'.' => {
                    let v = self.pop()?;
                    return Ok(v);
                }
                b'(' => self.marks.push(self.stack.len()),
                b'}' => self.stack.push(Value::Dict(Node::new())),
                b']' => self.stack.push(Value::List(Node::new())),
                b')' => self.stack.push(make_tuple(Vec::new())?),
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'K' => {
                    let v = self.byte()?;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                b'M' => {
                    let b = self.take(2)?;
                    self.stack
                        .push(Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))));
                }
                b'J' => {
                    let v = self.u32()? as i32;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        usize::from(self.byte()?)
                    } else {
                        self.u32()? as usize
                    };
                    let b = self.take(n)?;
                    if n > 8 {
                        return Err(format!("integer of {n} bytes at byte {at} exceeds 64 bits"));
                    }
                    // Little-endian two's complement, sign-extended.
                    let mut v: i64 = 0;
                    for (i, &byte) in b.iter().enumerate() {
                        v |= i64::from(byte) << (8 * i);
                    }
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        v |= -1i64 << (8 * n);
                    }
                    self.stack.push(Value::Int(v));
                }
                b'G' => {
                    let b = self.take(8)?;
                    let v = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                    self.stack.push(Value::Float(v));
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    let s = self.text(n)?;
                    self.stack.push(Value::Str(s));
                }
                0x8c => {
                    let n = usize::from(self.byte()?);
                    let s = self.text(n)?;
                    self.stack.push(Value::Str(s));
                }
                0x8d => {
                    let n = self.u64_len()?;
                    let s = self.text(n)?;
                    self.stack.push(Value::Str(s));
                }
                b'B' | b'C' | 0x8e | b'T' | b'U' => {
                    let n = match op {
                        b'C' | b'U' => usize::from(self.byte()?),
                        0x8e => self.u64_len()?,
                        _ => self.u32()? as usize,
                    };
                    let b = self.take(n)?;
                    // Python 2 strings (T, U) are bytes too; torch writes neither in a state dict.
                    self.stack.push(Value::Bytes(Rc::from(b)));
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.stack
                        .push(Value::Global(Global::resolve(module, name)?));
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Some(module), Some(name)) = (module.as_str(), name.as_str()) else {
                        return Err(format!("STACK_GLOBAL at byte {at} wants two strings"));
                    };
                    let g = Global::resolve(module, name)?;
                    self.stack.push(Value::Global(g));
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let v = self.call(&callable, &args)?;
                    self.stack.push(v);
                }
                b'b' => {
                    // Attribute state (an OrderedDict's `_metadata`, a parameter's attributes)
                    // carries nothing a forward pass needs.
                    let _state = self.pop()?;
                    match self.top()? {
                        Value::Dict(_) | Value::Tensor(_) => {}
                        other => {
                            return Err(format!(
                                "BUILD at byte {at} on {}, which takes no state",
                                other.describe()
                            ));
                        }
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let storage = self.persistent_load(&pid)?;
                    self.stack.push(storage);
                }
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    self.set_items(vec![key, value])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return Err(format!("SETITEMS at byte {at} with an odd number of items"));
                    }
                    self.set_items(items)?;
                }
                b'a' => {
                    let v = self.pop()?;
                    self.append(vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.append(items)?;
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return Err(format!("DICT at byte {at} with an odd number of items"));
                    }
                    self.stack.push(Value::Dict(Node::new()));
                    self.set_items(items)?;
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::List(Node::new()));
                    self.append(items)?;
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(make_tuple(items)?);
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.stack.push(make_tuple(items)?);
                }
                b'h' => {
                    let i = u32::from(self.byte()?);
                    self.stack.push(self.memo_get(i)?);
                }
                b'j' => {
                    let i = self.u32()?;
                    self.stack.push(self.memo_get(i)?);
                }
                b'q' => {
                    let i = u32::from(self.byte()?);
                    self.memo_put(i)?;
                }
                b'r' => {
                    let i = self.u32()?;
                    self.memo_put(i)?;
                }
                0x94 => {
                    let i = u32::try_from(self.memo.len()).map_err(|_| "memo overflow")?;
                    self.memo_put(i)?;
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?.clone();
                    self.stack.push(v);
                }
                _ => {
                    return Err(format!(
                        "unsupported pickle opcode 0x{op:02x} ({}) at byte {at}",
                        opcode_name(op)
                    ));
                }
            }
        }
    }

    fn set_items(&mut self, items: Vec<Value>) -> VmResult<()> {
        let Value::Dict(d) = self.top()?.clone() else {
            return Err(format!(
                "SETITEM(S) before byte {} on {}, not a dict",
                self.pos,
                self.top()?.describe()
            ));
        };
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            adopt(&d.frozen, &d.depth, &k)?;
            adopt(&d.frozen, &d.depth, &v)?;
            d.items.borrow_mut().push((k, v));
        }
        Ok(())
    }

    fn append(&mut self, items: Vec<Value>) -> VmResult<()> {
        let Value::List(l) = self.top()?.clone() else {
            return Err(format!(
                "APPEND(S) before byte {} on {}, not a list",
                self.pos,
                self.top()?.describe()
            ));
        };
        for v in items {
            adopt(&l.frozen, &l.depth, &v)?;
            l.items.borrow_mut().push(v);
        }
        Ok(())
    }

    /// `('storage', storage_type, key, location, numel[, view_metadata])`; the sixth field is the
    /// legacy format's, `None` unless the storage is a view (not supported).
    fn persistent_load(&mut self, pid: &Value) -> VmResult<Value> {
        let bad = || "persistent id is not ('storage', type, key, location, numel)".to_string();
        let Value::Tuple(t, _) = pid else {
            return Err(bad());
        };
        if !(t.len() == 5 || t.len() == 6) || t[0].as_str() != Some("storage") {
            return Err(bad());
        }
        let Value::Global(Global::Storage(kind)) = t[1] else {
            return Err(bad());
        };
        let key = t[2].as_str().ok_or_else(bad)?;
        let numel = t[4]
            .as_int()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(bad)?;
        if t.len() == 6 && !matches!(t[5], Value::None) {
            return Err(format!(
                "storage `{key}` is a legacy storage view, not supported"
            ));
        }
        if let Some(s) = self.storages.get(key) {
            if s.numel != numel || s.kind.name != kind.name {
                return Err(format!(
                    "storage `{key}` is described in two different ways"
                ));
            }
            return Ok(Value::Storage(s.clone()));
        }
        let s = Rc::new(StorageRef {
            key: key.to_string(),
            kind,
            numel,
        });
        self.storages.insert(key.to_string(), s.clone());
        Ok(Value::Storage(s))
    }

    fn call(&mut self, callable: &Value, args: &Value) -> VmResult<Value> {
        let Value::Global(g) = callable else {
            return Err(format!("REDUCE on {}, not a callable", callable.describe()));
        };
        let Value::Tuple(args, _) = args else {
            return Err(format!(
                "REDUCE of {g:?} with {} as arguments",
                args.describe()
            ));
        };
        let bad = || format!("{g:?} called with unexpected arguments");
        let int_tuple = |v: &Value| -> VmResult<Vec<i64>> {
            match v {
                Value::Tuple(t, _) => t.iter().map(|x| x.as_int().ok_or_else(bad)).collect(),
                _ => Err(bad()),
            }
        };
        match g {
            Global::OrderedDict if args.is_empty() => Ok(Value::Dict(Node::new())),
            Global::RebuildTensorV2 | Global::RebuildTensor if (4..=7).contains(&args.len()) => {
                let Value::Storage(storage) = &args[0] else {
                    return Err(bad());
                };
                Ok(Value::Tensor(Rc::new(TensorRef {
                    storage: storage.clone(),
                    offset: args[1].as_int().ok_or_else(bad)?,
                    size: int_tuple(&args[2])?,
                    stride: int_tuple(&args[3])?,
                })))
            }
            Global::RebuildParameter | Global::RebuildParameterWithState
                if (3..=4).contains(&args.len()) && matches!(args[0], Value::Tensor(_)) =>
            {
                Ok(args[0].clone())
            }
            // `_rebuild_from_type_v2(func, new_type, args, state)`: a tensor subclass or a tensor
            // with Python attributes; the attributes are dropped.
            Global::RebuildFromTypeV2 if args.len() == 4 => {
                if !matches!(args[1], Value::Global(Global::TensorClass)) {
                    return Err(format!(
                        "tensor of an unsupported type ({})",
                        args[1].describe()
                    ));
                }
                self.call(&args[0], &args[2])
            }
            Global::CodecsEncode if args.len() == 2 => match &args[0] {
                // Python 3 pickles bytes at protocol 2 as `_codecs.encode(text, 'latin1')`.
                Value::Str(s) => Ok(Value::Bytes(
                    s.chars()
                        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
                        .collect(),
                )),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pickle: &[u8]) -> VmResult<Value> {
        Unpickler::new(pickle).load()
    }

    #[test]
    fn long1_is_little_endian_twos_complement() {
        for (bytes, expected) in [
            (&b"\x8a\x01\xff."[..], -1i64),
            (b"\x8a\x02\x00\x01.", 256),
            (b"\x8a\x00.", 0),
            (b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80.", i64::MIN),
        ] {
            assert!(
                matches!(run(bytes), Ok(Value::Int(v)) if v == expected),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn self_containing_and_deeply_nested_containers_are_refused() {
        // EMPTY_LIST, BINPUT 0, BINGET 0, APPEND: a list appended to itself.
        let e = run(b"]q\x00h\x00a.").err().unwrap();
        assert!(e.contains("modified after"), "{e}");
        // 100 nested lists: ] ] a ] a … builds [[[…]]] one level per `]a`.
        let mut p = vec![b']'];
        for _ in 0..100 {
            p.extend_from_slice(b"]");
        }
        p.extend(std::iter::repeat_n(b'a', 100));
        p.push(b'.');
        let e = run(&p).err().unwrap();
        assert!(e.contains("nested deeper"), "{e}");
    }

    #[test]
    fn unknown_opcodes_and_globals_are_named() {
        let e = run(b"\x80\x02I1\n.").err().unwrap();
        assert!(e.contains("INT") && e.contains("0x49"), "{e}");
        let e = run(b"\x80\x02cos\nsystem\n.").err().unwrap();
        assert!(e.contains("`os.system`"), "{e}");
    }

    #[test]
    fn zip_offsets_near_usize_max_are_errors() {
        // One central-directory entry whose local-header offset comes from a zip64 extra field
        // holding u64::MAX - 1, then the end-of-central-directory record.
        let mut cd = Vec::new();
        cd.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        cd.extend_from_slice(&[0; 16]); // versions, flags, method, time, date, crc
        cd.extend_from_slice(&4u32.to_le_bytes()); // compressed
        cd.extend_from_slice(&4u32.to_le_bytes()); // uncompressed
        cd.extend_from_slice(&5u16.to_le_bytes()); // name length
        cd.extend_from_slice(&12u16.to_le_bytes()); // extra length
        cd.extend_from_slice(&[0; 10]); // comment length, disk, attributes
        cd.extend_from_slice(&0xffff_ffffu32.to_le_bytes()); // local header offset → zip64
        cd.extend_from_slice(b"a/x.y");
        cd.extend_from_slice(&1u16.to_le_bytes());
        cd.extend_from_slice(&8u16.to_le_bytes());
        cd.extend_from_slice(&(u64::MAX - 1).to_le_bytes());
        let mut zip = cd.clone();
        zip.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        zip.extend_from_slice(&[0; 4]);
        zip.extend_from_slice(&1u16.to_le_bytes());
        zip.extend_from_slice(&1u16.to_le_bytes());
        zip.extend_from_slice(&(cd.len() as u32).to_le_bytes());
        zip.extend_from_slice(&0u32.to_le_bytes());
        zip.extend_from_slice(&0u16.to_le_bytes());
        let z = Zip::parse(&zip).unwrap();
        assert_eq!(z.entries[0].local_header as u64, u64::MAX - 1);
        let e = z.read(&z.entries[0]).err().unwrap();
        assert!(e.contains("local header"), "{e}");
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
