//! `dump --locals`: a frame's arguments and local variables, read out of
//! the target's memory (never by running code in it) and turned into
//! [`Value`]s: `None`, bools, ints, floats, `str`, `bytes`, and the first
//! few items of lists, tuples, sets and dicts, nested a few levels; any
//! other object is its type's name and address.
//!
//! Everything read is untrusted. Every read goes through one budget per
//! frame ([`Capped`]), sizes are capped before they are read, a builtin
//! type is recognised only by its name *and* being a static (not heap)
//! type, and a value that cannot be read whole is [`Value::Unreadable`],
//! never a wrong value.

use std::cell::Cell;

use crate::error::{Error, Result};
use crate::offsets::Offsets;
use crate::offsets::objects::TPFLAGS_HEAPTYPE;
use crate::process::pages::{PageCache, Pages};
use crate::process::{LocalBytes, ProcessMemory};

use super::dict::read_dict;
use super::frames::{FramePlace, plausible};
use super::objects::{decode_chars, read_cstr, read_str_prefix, read_str_raw};

/// Most locals shown per frame.
pub const MAX_LOCALS: usize = 1024;
/// Items shown of a container; the rest are counted.
pub const MAX_ITEMS: usize = 8;
/// How deep containers are shown inside containers.
pub const MAX_NESTING: usize = 3;
/// Characters of a `str` and bytes of a `bytes` shown.
pub const MAX_TEXT: usize = 200;
/// 30-bit digits of an `int` read (about 900 decimal digits); a longer
/// one is shown by its size.
const MAX_INT_DIGITS: u64 = 100;
/// Set slots scanned for the items shown.
const MAX_SET_SLOTS: u64 = 1024;
/// Reads and bytes one frame's locals may cost.
pub const READS_PER_FRAME: u32 = 8_000;
pub const BYTES_PER_FRAME: u64 = 4 << 20;

/// `co_localspluskinds` bits (3.11+).
const CO_FAST_HIDDEN: u8 = 0x10;
const CO_FAST_CELL: u8 = 0x40;
const CO_FAST_FREE: u8 = 0x80;
/// `co_flags` bits.
const CO_VARARGS: u32 = 0x4;
const CO_VARKEYWORDS: u32 = 0x8;

/// One value as read.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    /// An int, in decimal (sign included).
    Int(String),
    /// An int too long to read: its sign and 30-bit digit count.
    BigInt {
        negative: bool,
        digits: u64,
    },
    Float(f64),
    /// A `str`'s first characters and its length in characters.
    Str {
        text: String,
        len: u64,
    },
    /// A `bytes` object's first bytes and its length.
    Bytes {
        data: Vec<u8>,
        len: u64,
    },
    /// A list, tuple, set or frozenset: its first items and its length.
    Seq {
        kind: SeqKind,
        items: Vec<Value>,
        len: u64,
    },
    /// A dict: its first items, in order, and its length.
    Dict {
        items: Vec<(Value, Value)>,
        len: u64,
    },
    /// Any other object: its type's name and its address.
    Object {
        type_name: String,
        addr: u64,
    },
    /// A container nested deeper than [`MAX_NESTING`]: not read.
    Nested {
        type_name: String,
        len: u64,
    },
    /// What could not be read whole (torn, freed, or past the budget).
    Unreadable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqKind {
    List,
    Tuple,
    Set,
    FrozenSet,
}

impl SeqKind {
    pub fn type_name(self) -> &'static str {
        match self {
            SeqKind::List => "list",
            SeqKind::Tuple => "tuple",
            SeqKind::Set => "set",
            SeqKind::FrozenSet => "frozenset",
        }
    }
}

impl Value {
    /// The Python type name of the value, when known.
    pub fn type_name(&self) -> Option<&str> {
        Some(match self {
            Value::None => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt { .. } => "int",
            Value::Float(_) => "float",
            Value::Str { .. } => "str",
            Value::Bytes { .. } => "bytes",
            Value::Seq { kind, .. } => kind.type_name(),
            Value::Dict { .. } => "dict",
            Value::Object { type_name, .. } | Value::Nested { type_name, .. } => type_name,
            Value::Unreadable => return None,
        })
    }
}

/// What a local is to its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalKind {
    Argument,
    Local,
}

/// One local variable: its name, whether it is an argument, and its value
/// (`None`: unset, not bound yet or deleted).
#[derive(Debug, Clone, PartialEq)]
pub struct Local {
    pub name: String,
    pub kind: LocalKind,
    pub value: Option<Value>,
}

/// One frame's locals (`dump --locals`), or why they could not be read.
pub type FrameLocals = std::result::Result<Vec<Local>, String>;
/// Per frame index of a stack (leaf first), its frames' locals.
pub type ThreadLocals = std::collections::HashMap<usize, FrameLocals>;

/// A reader whose reads are counted against a budget: past it, every read
/// fails, so one hostile object cannot make a dump read without end.
pub struct Capped<'a> {
    inner: &'a dyn ProcessMemory,
    reads: Cell<u32>,
    bytes: Cell<u64>,
}

impl<'a> Capped<'a> {
    pub fn new(inner: &'a dyn ProcessMemory, reads: u32, bytes: u64) -> Self {
        Capped {
            inner,
            reads: Cell::new(reads),
            bytes: Cell::new(bytes),
        }
    }
}

impl ProcessMemory for Capped<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let (reads, bytes) = (self.reads.get(), self.bytes.get());
        if reads == 0 || bytes < buf.len() as u64 {
            return Err(Error::ReadBudget {
                calls: READS_PER_FRAME,
                bytes: BYTES_PER_FRAME,
            });
        }
        self.reads.set(reads - 1);
        self.bytes.set(bytes - buf.len() as u64);
        self.inner.read(addr, buf)
    }
}

/// Reads the locals of frames of one process, through one page cache for
/// the whole dump: objects allocated side by side (a frame's names, its
/// small values) cost one system call per page, not one per object.
pub struct LocalsReader<'a> {
    mem: &'a dyn ProcessMemory,
    o: &'a Offsets,
    pages: Pages,
}

impl<'a> LocalsReader<'a> {
    pub fn new(mem: &'a dyn ProcessMemory, o: &'a Offsets) -> Self {
        LocalsReader {
            mem,
            o,
            pages: Pages::default(),
        }
    }

    /// The locals of the frame at `p.frame`, in slot order (arguments
    /// first). An error when the code object's description of its locals
    /// cannot be read, or when the frame is no longer where the sample saw
    /// it (it returned, or moved on: its slots belong to another moment).
    pub fn frame_locals(&self, p: &FramePlace) -> Result<Vec<Local>> {
        self.with_objects(READS_PER_FRAME, BYTES_PER_FRAME, |r| {
            Self::read_locals(r, p)
        })
    }

    /// `f` on object reads within a budget of `reads` and `bytes`. The
    /// budget counts what is read from the target; pages read for one
    /// question serve the next ones for free.
    pub(super) fn with_objects<T>(
        &self,
        reads: u32,
        bytes: u64,
        f: impl FnOnce(&Objects) -> T,
    ) -> T {
        let capped = Capped::new(self.mem, reads, bytes);
        let mem = PageCache {
            inner: &capped,
            pages: &self.pages,
        };
        f(&Objects {
            mem: &mem,
            o: self.o,
            types: Default::default(),
        })
    }

    fn read_locals(r: &Objects, p: &FramePlace) -> Result<Vec<Local>> {
        let layout = r.code_layout(p.code)?;
        let slots = r.frame_slots(p, layout.names.len())?;
        let mut out = Vec::new();
        for (i, (name, kind)) in layout.names.iter().zip(&layout.kinds).enumerate() {
            if kind & CO_FAST_HIDDEN != 0 || out.len() >= MAX_LOCALS {
                continue;
            }
            let mut obj = slots[i] & r.o.tag_mask;
            if kind & (CO_FAST_CELL | CO_FAST_FREE) != 0 && obj != 0 {
                // Once the frame has started, the slot holds the cell.
                obj = r.through_cell(obj);
            }
            out.push(Local {
                name: name.clone(),
                kind: if i < layout.nargs {
                    LocalKind::Argument
                } else {
                    LocalKind::Local
                },
                value: (obj != 0).then(|| r.value(obj, 0)),
            });
        }
        Ok(out)
    }
}

/// What a code object says of its locals.
struct CodeLayout {
    names: Vec<String>,
    kinds: Vec<u8>,
    /// The first `nargs` slots are the arguments.
    nargs: usize,
}

/// Object reads through one frame's budget.
pub(super) struct Objects<'a> {
    pub(super) mem: &'a dyn ProcessMemory,
    pub(super) o: &'a Offsets,
    /// Type names already read for this frame (its values share few types).
    pub(super) types: std::cell::RefCell<std::collections::HashMap<u64, (String, bool)>>,
}

impl Objects<'_> {
    fn code_layout(&self, code: u64) -> Result<CodeLayout> {
        let v = &self.o.values;
        let mut buf = vec![0u8; self.o.code_size as usize];
        self.mem.read(code, &mut buf)?;
        let short = || Error::corrupt("short code object");
        let int = |at: u64| buf.i32_at(at).ok_or_else(short);
        let (argc, kwonly, flags) = (
            int(v.code_argcount)?,
            int(v.code_kwonlyargcount)?,
            int(v.code_flags)? as u32,
        );
        let names_at = buf.u64_at(v.code_localsplusnames).ok_or_else(short)?;
        let kinds_at = buf.u64_at(v.code_localspluskinds).ok_or_else(short)?;
        let names = self.tuple_items(names_at)?;
        if names.len() > 1 << 16 || !(0..1 << 16).contains(&argc) || !(0..1 << 16).contains(&kwonly)
        {
            return Err(Error::corrupt("code object with impossible local counts"));
        }
        let names = names
            .iter()
            .map(|&n| self.text(n))
            .collect::<Result<Vec<_>>>()?;
        let kinds = self.bytes_exact(kinds_at, names.len())?;
        let nargs = argc as usize
            + kwonly as usize
            + (flags & CO_VARARGS != 0) as usize
            + (flags & CO_VARKEYWORDS != 0) as usize;
        if nargs > names.len() {
            return Err(Error::corrupt(
                "code object with more arguments than locals",
            ));
        }
        Ok(CodeLayout {
            names,
            kinds,
            nargs,
        })
    }

    /// The frame's `n` local slots, read with its header in one read, once
    /// the header shows the frame still runs the code and instruction the
    /// sample saw.
    fn frame_slots(&self, p: &FramePlace, n: usize) -> Result<Vec<u64>> {
        let start = self.o.values.frame_localsplus as usize;
        let buf = self.frame_still(p, n)?;
        Ok(buf[start..start + n * 8]
            .chunks_exact(8)
            .map(|c| c.u64_at(0).unwrap_or(0))
            .collect())
    }

    /// The frame at `p.frame`, its header and its first `n` slots, in one
    /// read; an error when it no longer runs the code and instruction the
    /// sample saw (it returned, or moved on).
    pub(super) fn frame_still(&self, p: &FramePlace, n: usize) -> Result<Vec<u8>> {
        let o = self.o;
        if !plausible(p.frame) {
            return Err(Error::corrupt("frame at an impossible address"));
        }
        let start = o.values.frame_localsplus as usize;
        let mut buf = vec![0u8; start.max(o.frame_size as usize) + n * 8];
        self.mem.read(p.frame, &mut buf)?;
        let code = buf.u64_at(o.frame_executable).unwrap_or(0) & o.tag_mask;
        let ip = buf.u64_at(o.frame_instr_ptr).unwrap_or(0);
        if code != p.code || ip != p.instr_ptr {
            return Err(Error::corrupt(
                "the frame moved on after the stack was read (--blocking stops it)",
            ));
        }
        Ok(buf)
    }

    /// `n` words at `addr`.
    fn words(&self, addr: u64, n: usize) -> Result<Vec<u64>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        if !plausible(addr) {
            return Err(Error::corrupt("words at an impossible address"));
        }
        let mut buf = vec![0u8; n * 8];
        self.mem.read(addr, &mut buf)?;
        Ok(buf
            .chunks_exact(8)
            .map(|c| c.u64_at(0).unwrap_or(0))
            .collect())
    }

    /// The whole item list of a tuple of names (capped).
    fn tuple_items(&self, addr: u64) -> Result<Vec<u64>> {
        let (ty, len) = self.head(addr, self.o.values.tuple_size)?;
        if self.builtin(ty)? != Some(Builtin::Tuple) || len > 1 << 16 {
            return Err(Error::corrupt("co_localsplusnames is not a tuple"));
        }
        self.words(addr.wrapping_add(self.o.values.tuple_items), len as usize)
    }

    /// A name: the text of a `str` (whole, or an error).
    pub(super) fn text(&self, addr: u64) -> Result<String> {
        let mut buf = Vec::new();
        let raw = read_str_raw(self.mem, self.o, addr, &mut buf)?;
        if raw.cut {
            return Err(Error::corrupt("a local's name is too long"));
        }
        raw.decode(&buf)
    }

    /// Exactly `n` bytes of the `bytes` object at `addr`.
    fn bytes_exact(&self, addr: u64, n: usize) -> Result<Vec<u8>> {
        let (ty, len) = self.head(addr, self.o.bytes_ob_size)?;
        if self.builtin(ty)? != Some(Builtin::Bytes) || len != n as u64 {
            return Err(Error::corrupt("co_localspluskinds does not fit the names"));
        }
        let mut buf = vec![0u8; n];
        if n > 0 {
            self.mem
                .read(addr.wrapping_add(self.o.bytes_ob_sval), &mut buf)?;
        }
        Ok(buf)
    }

    /// An object's type and the word at `size_at` (a length).
    fn head(&self, addr: u64, size_at: u64) -> Result<(u64, u64)> {
        if !plausible(addr) {
            return Err(Error::corrupt(format!("object at {addr:#x}")));
        }
        let mut buf = vec![0u8; (size_at.max(self.o.ob_type) + 8) as usize];
        self.mem.read(addr, &mut buf)?;
        let ty = buf.u64_at(self.o.ob_type).unwrap_or(0);
        let len = buf.u64_at(size_at).unwrap_or(0);
        if len > i64::MAX as u64 {
            return Err(Error::corrupt("negative size"));
        }
        Ok((ty, len))
    }

    /// The object a cell holds, or the object itself when it is no cell
    /// (a frame that has not started yet holds the argument itself).
    fn through_cell(&self, obj: u64) -> u64 {
        let Ok(ty) = self.mem.read_u64(obj.wrapping_add(self.o.ob_type)) else {
            return obj;
        };
        match self.type_name(ty) {
            Ok((name, false)) if name == "cell" => self
                .mem
                .read_u64(obj.wrapping_add(self.o.values.cell_ref))
                .map_or(obj, |v| v & self.o.tag_mask),
            _ => obj,
        }
    }

    /// A type's name and whether it is a heap type.
    pub(super) fn type_name(&self, ty: u64) -> Result<(String, bool)> {
        if let Some(known) = self.types.borrow().get(&ty) {
            return Ok(known.clone());
        }
        let t = self.read_type_name(ty)?;
        let mut types = self.types.borrow_mut();
        if types.len() < MAX_LOCALS {
            types.insert(ty, t.clone());
        }
        Ok(t)
    }

    fn read_type_name(&self, ty: u64) -> Result<(String, bool)> {
        if !plausible(ty) {
            return Err(Error::corrupt("type at an impossible address"));
        }
        let name_ptr = self.mem.read_u64(ty.wrapping_add(self.o.type_tp_name))?;
        let flags = self
            .mem
            .read_u64(ty.wrapping_add(self.o.objects.type_flags))?;
        let name = read_cstr(self.mem, name_ptr, 64)?;
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(Error::corrupt("a type name that no type has"));
        }
        Ok((name, flags & TPFLAGS_HEAPTYPE != 0))
    }

    /// The builtin type `ty` is, if it is one of those shown.
    fn builtin(&self, ty: u64) -> Result<Option<Builtin>> {
        let (name, heap) = self.type_name(ty)?;
        Ok(if heap { None } else { Builtin::named(&name) })
    }

    /// The value of the object at `obj`, `depth` containers down.
    fn value(&self, obj: u64, depth: usize) -> Value {
        self.try_value(obj, depth).unwrap_or(Value::Unreadable)
    }

    fn try_value(&self, obj: u64, depth: usize) -> Result<Value> {
        if !plausible(obj) {
            return Err(Error::corrupt("object at an impossible address"));
        }
        let ty = self.mem.read_u64(obj.wrapping_add(self.o.ob_type))?;
        let (name, heap) = self.type_name(ty)?;
        let Some(b) = (!heap).then(|| Builtin::named(&name)).flatten() else {
            return Ok(Value::Object {
                type_name: name,
                addr: obj,
            });
        };
        let v = &self.o.values;
        let seq = |kind: SeqKind, len_at: u64| -> Result<Value> {
            let (_, len) = self.head(obj, len_at)?;
            if depth >= MAX_NESTING {
                return Ok(Value::Nested {
                    type_name: kind.type_name().into(),
                    len,
                });
            }
            let ptrs = match kind {
                SeqKind::Tuple => self.words(
                    obj.wrapping_add(v.tuple_items),
                    len.min(MAX_ITEMS as u64) as usize,
                )?,
                SeqKind::List => {
                    let items = self.mem.read_u64(obj.wrapping_add(v.list_items))?;
                    self.words(items, len.min(MAX_ITEMS as u64) as usize)?
                }
                SeqKind::Set | SeqKind::FrozenSet => self.set_items(obj, len)?,
            };
            let items = ptrs
                .iter()
                .map(|&p| self.value(p & self.o.tag_mask, depth + 1))
                .collect();
            Ok(Value::Seq { kind, items, len })
        };
        match b {
            Builtin::None => Ok(Value::None),
            Builtin::Bool => Ok(Value::Bool(self.int(obj)? != Value::Int("0".into()))),
            Builtin::Int => self.int(obj),
            Builtin::Float => {
                let bits = self.mem.read_u64(obj.wrapping_add(v.float_value))?;
                Ok(Value::Float(f64::from_bits(bits)))
            }
            Builtin::Str => {
                let mut buf = Vec::new();
                let raw = read_str_prefix(self.mem, self.o, obj, &mut buf, MAX_TEXT as u64)?;
                let text = decode_chars(raw.kind, raw.ascii, raw.data(&buf))
                    .ok_or_else(|| Error::corrupt("ASCII string holds non-ASCII bytes"))?;
                Ok(Value::Str {
                    text,
                    len: raw.length,
                })
            }
            Builtin::Bytes => {
                let (_, len) = self.head(obj, self.o.bytes_ob_size)?;
                let mut data = vec![0u8; len.min(MAX_TEXT as u64) as usize];
                if !data.is_empty() {
                    self.mem
                        .read(obj.wrapping_add(self.o.bytes_ob_sval), &mut data)?;
                }
                Ok(Value::Bytes { data, len })
            }
            Builtin::Tuple => seq(SeqKind::Tuple, v.tuple_size),
            Builtin::List => seq(SeqKind::List, v.list_size),
            Builtin::Set => seq(SeqKind::Set, v.set_used),
            Builtin::FrozenSet => seq(SeqKind::FrozenSet, v.set_used),
            Builtin::Dict => self.dict(obj, depth),
        }
    }

    /// The first item pointers of a set of `used` items.
    fn set_items(&self, obj: u64, used: u64) -> Result<Vec<u64>> {
        let v = &self.o.values;
        let mask = self.mem.read_u64(obj.wrapping_add(v.set_mask))?;
        let table = self.mem.read_u64(obj.wrapping_add(v.set_table))?;
        if mask >= 1 << 40 || used > mask + 1 {
            return Err(Error::corrupt("set with impossible geometry"));
        }
        let want = used.min(MAX_ITEMS as u64) as usize;
        let slots = (mask + 1).min(MAX_SET_SLOTS);
        if !plausible(table) {
            return Err(Error::corrupt("set table at an impossible address"));
        }
        let mut buf = vec![0u8; slots as usize * 16];
        self.mem.read(table, &mut buf)?;
        let mut out = Vec::new();
        for e in buf.chunks_exact(16) {
            let key = e.u64_at(0).unwrap_or(0);
            let hash = e.u64_at(8).unwrap_or(0) as i64;
            // Empty slots are NULL; removed ones hold a dummy key, hash -1.
            if key != 0 && hash != -1 && out.len() < want {
                out.push(key);
            }
        }
        Ok(out)
    }

    fn dict(&self, obj: u64, depth: usize) -> Result<Value> {
        let len = self
            .mem
            .read_u64(obj.wrapping_add(self.o.objects.dict_used))?;
        if len > i64::MAX as u64 {
            return Err(Error::corrupt("negative dict size"));
        }
        if depth >= MAX_NESTING {
            return Ok(Value::Nested {
                type_name: "dict".into(),
                len,
            });
        }
        if len == 0 {
            // Its keys are the interpreter's shared empty keys.
            return Ok(Value::Dict {
                items: Vec::new(),
                len,
            });
        }
        let entries = read_dict(self.mem, &self.o.objects, obj)?;
        let items = entries
            .iter()
            .take(MAX_ITEMS)
            .map(|&(k, v)| {
                (
                    self.value(k & self.o.tag_mask, depth + 1),
                    self.value(v & self.o.tag_mask, depth + 1),
                )
            })
            .collect();
        Ok(Value::Dict { items, len })
    }

    /// An int (or bool).
    fn int(&self, obj: u64) -> Result<Value> {
        let oo = &self.o.objects;
        let tag = self.mem.read_u64(obj.wrapping_add(oo.long_tag))?;
        let (negative, ndigits) = if oo.long_size_is_signed_count {
            let size = tag as i64;
            (size < 0, size.unsigned_abs())
        } else {
            match tag & 3 {
                1 => return Ok(Value::Int("0".into())),
                sign => (sign == 2, tag >> 3),
            }
        };
        if ndigits > MAX_INT_DIGITS {
            return Ok(Value::BigInt {
                negative,
                digits: ndigits,
            });
        }
        let mut buf = vec![0u8; ndigits as usize * 4];
        if ndigits > 0 {
            self.mem.read(obj.wrapping_add(oo.long_digit), &mut buf)?;
        }
        let mut digits = Vec::with_capacity(ndigits as usize);
        for c in buf.chunks_exact(4) {
            let d = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if d >= 1 << 30 {
                return Err(Error::corrupt("an int digit out of range"));
            }
            digits.push(d);
        }
        let mut s = decimal(&digits);
        if negative && s != "0" {
            s.insert(0, '-');
        }
        Ok(Value::Int(s))
    }
}

/// The decimal text of a number given as 30-bit digits, least
/// significant first.
pub fn decimal(digits: &[u32]) -> String {
    // Most significant first, in base 2^30; divide by 10^9 repeatedly.
    let mut n: Vec<u32> = digits.iter().rev().copied().collect();
    while n.first() == Some(&0) {
        n.remove(0);
    }
    if n.is_empty() {
        return "0".into();
    }
    let mut chunks = Vec::new();
    while !n.is_empty() {
        let mut rem = 0u64;
        for d in n.iter_mut() {
            let cur = (rem << 30) | u64::from(*d);
            *d = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        chunks.push(rem as u32);
        while n.first() == Some(&0) {
            n.remove(0);
        }
    }
    let mut s = chunks.last().map(u32::to_string).unwrap_or_default();
    for c in chunks.iter().rev().skip(1) {
        s.push_str(&format!("{c:09}"));
    }
    s
}

/// The builtin types shown as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Builtin {
    None,
    Bool,
    Int,
    Float,
    Str,
    Bytes,
    Tuple,
    List,
    Set,
    FrozenSet,
    Dict,
}

impl Builtin {
    fn named(name: &str) -> Option<Builtin> {
        Some(match name {
            "NoneType" => Builtin::None,
            "bool" => Builtin::Bool,
            "int" => Builtin::Int,
            "float" => Builtin::Float,
            "str" => Builtin::Str,
            "bytes" => Builtin::Bytes,
            "tuple" => Builtin::Tuple,
            "list" => Builtin::List,
            "set" => Builtin::Set,
            "frozenset" => Builtin::FrozenSet,
            "dict" => Builtin::Dict,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_of_any_size_are_written_in_decimal() {
        assert_eq!(decimal(&[]), "0");
        assert_eq!(decimal(&[5]), "5");
        // 2**30 and 2**60 + 1.
        assert_eq!(decimal(&[0, 1]), "1073741824");
        assert_eq!(decimal(&[1, 0, 1]), "1152921504606846977");
        // 10**30 = digits of 30 bits, least significant first.
        let mut n: u128 = 10u128.pow(30);
        let mut d = Vec::new();
        while n > 0 {
            d.push((n & ((1 << 30) - 1)) as u32);
            n >>= 30;
        }
        assert_eq!(decimal(&d), format!("1{}", "0".repeat(30)));
    }
}
