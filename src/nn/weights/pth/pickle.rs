//! The pickle machine behind torch.save's files: the opcodes a state dict uses, containers that
//! cannot become cyclic or nest deeper than [`MAX_DEPTH`], and only the globals listed in [`Global`].

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use super::super::state_dict::FloatDtype;

/// Containers nested deeper than this are rejected (a state dict needs 4), so dropping a value never
/// recurses deeply.
/// A dict under construction: its (key, value) pairs.
pub(super) type DictNode = Node<(Value, Value)>;

pub(super) const MAX_DEPTH: u32 = 64;

/// A list or dict. Pickle fills a container after creating (and memoising) it, and only then places
/// it inside another; so a container is frozen once it becomes an element, which keeps depths exact
/// and rules out cycles.
pub(super) struct Node<T> {
    pub(super) items: RefCell<Vec<T>>,
    pub(super) frozen: Cell<bool>,
    pub(super) depth: Cell<u32>,
}

impl<T> Node<T> {
    pub(super) fn new() -> Rc<Self> {
        Rc::new(Node {
            items: RefCell::new(Vec::new()),
            frozen: Cell::new(false),
            depth: Cell::new(1),
        })
    }
}

/// Element sizes and dtype names of torch's typed storages (torch/storage.py, `_dtype_to_storage_type_map`).
#[derive(Debug, Clone, Copy)]
pub(super) struct StorageKind {
    pub(super) name: &'static str,
    pub(super) dtype: &'static str,
    pub(super) elem_bytes: usize,
    pub(super) float: Option<FloatDtype>,
}

#[rustfmt::skip]
pub(super) const STORAGE_KINDS: &[StorageKind] = &[
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
pub(super) struct StorageRef {
    pub(super) key: String,
    pub(super) kind: StorageKind,
    pub(super) numel: usize,
}

/// A tensor as the pickle describes it: a strided view of a storage (checked when materialised, so
/// that errors can name the key).
pub(super) struct TensorRef {
    pub(super) storage: Rc<StorageRef>,
    pub(super) offset: i64,
    pub(super) size: Vec<i64>,
    pub(super) stride: Vec<i64>,
}

/// The callables and classes a state dict's pickle may name; anything else is refused.
#[derive(Debug, Clone, Copy)]
pub(super) enum Global {
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
pub(super) enum Value {
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

    pub(super) fn as_str(&self) -> Option<&str> {
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
    pub(super) fn describe(&self) -> String {
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

    pub(super) fn describe_key(&self) -> String {
        match self {
            Value::Str(s) => s.to_string(),
            Value::Int(i) => i.to_string(),
            other => other.describe(),
        }
    }
}

/// Adds `child` to a container of depth `depth`: freezes the child, then refuses if the container is
/// itself frozen (which also catches a container added to itself) or would nest too deep.
pub(super) fn adopt(
    frozen: &Cell<bool>,
    depth: &Cell<u32>,
    child: &Value,
) -> std::result::Result<(), String> {
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

pub(super) fn make_tuple(items: Vec<Value>) -> std::result::Result<Value, String> {
    let depth = items.iter().map(Value::depth).max().unwrap_or(0) + 1;
    if depth > MAX_DEPTH {
        return Err(format!("containers nested deeper than {MAX_DEPTH}"));
    }
    items.iter().for_each(Value::freeze);
    Ok(Value::Tuple(items.into(), depth))
}

/// A pickle interpreter for the opcodes torch.save emits (protocols 2–5), one pickle per `load`.
pub(super) struct Unpickler<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    pub(super) stack: Vec<Value>,
    pub(super) marks: Vec<usize>,
    pub(super) memo: HashMap<u32, Value>,
    /// Storages by key, shared by every tensor that views them.
    pub(super) storages: HashMap<String, Rc<StorageRef>>,
}

/// Names of pickle opcodes (CPython Lib/pickletools.py), for error messages.
#[rustfmt::skip]
pub(super) fn opcode_name(op: u8) -> &'static str {
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

pub(super) type VmResult<T> = std::result::Result<T, String>;

impl<'a> Unpickler<'a> {
    pub(super) fn new(data: &'a [u8]) -> Self {
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
    pub(super) fn load(&mut self) -> VmResult<Value> {
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
}
