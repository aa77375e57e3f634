//! Where a thread's name lives: `sys.modules`, dicts, ints, module objects
//! and instance attributes (managed dicts), per version.
//!
//! Only thread names need these. They are validated like every other
//! offset (aligned, inside their struct, else the table is refused naming
//! the field); what a read through them finds is untrusted as ever, and a
//! failed read costs the names, which then come from the kernel's `comm`.
//!
//! Facts (x86-64, GIL builds), from the versions' headers (`pycore_dict.h`,
//! `pycore_object.h`, `cpython/object.h`, `moduleobject.c`) and compiled
//! `offsetof`s on 3.11.7, 3.12.1 and 3.13.0, cross-checked with the 3.15
//! debug table (which gives `ht_cached_keys` and `tp_basicsize` itself):
//! - `PyDictKeysObject`: `dk_log2_size` u8 at 8, `dk_log2_index_bytes` u8
//!   at 9, `dk_kind` u8 at 10, `dk_nentries` at 24, indices at 32, then the
//!   entries (24-byte `{hash, key, value}` for general keys, 16-byte
//!   `{key, value}` for unicode and split keys). Same in 3.11-3.15.
//! - `PyModuleObject.md_dict` at 16; `tp_basicsize` at 32; `tp_flags` at 168.
//!   Free-threaded builds have a 32-byte object header (16 in GIL builds):
//!   what follows it moves by 16, so such offsets are counted from the
//!   header's size (`md_dict` right after it, `tp_basicsize` 16 after).
//! - `PyHeapTypeObject.ht_cached_keys` (the keys instances share) is 464
//!   bytes after the end of `PyTypeObject` (five method suites and three
//!   pointers): 872 in 3.11, 880 in 3.12-3.14, 888 in 3.15.
//! - Instance attributes of a managed-dict type: 3.11 keeps a values
//!   pointer 32 bytes before the object and a dict pointer 24 before it;
//!   3.12 one word 24 before it, a values pointer minus one (odd) or a
//!   dict; 3.13+ a dict pointer 24 before it and, with inline values, a
//!   `PyDictValues` at `obj + tp_basicsize` (`valid` byte at 3, values at 8).

use super::spec::Checked;
use crate::error::Result;

/// How instance attributes of a managed-dict type are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagedDict {
    /// 3.11: values pointer at -32, dict pointer at -24.
    Split311,
    /// 3.12: one word at -24: `values - 1` (odd) or a dict.
    Tagged312,
    /// 3.13+: dict pointer at -24 (free-threaded: -8); inline values at
    /// `tp_basicsize`.
    Inline313,
}

/// Offsets for reading dicts, ints, modules and instance attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectOffsets {
    /// `PyInterpreterState` → `sys.modules` (a dict pointer).
    pub interp_modules: u64,
    /// `ma_used`, the dict's item count, right after the object header.
    pub dict_used: u64,
    pub dict_keys: u64,
    pub dict_values: u64,
    /// Where the values start in a `PyDictValues` (0 before 3.13, which
    /// added a 4-byte header padded to 8).
    pub values_header: u64,
    /// `lv_tag` (3.12+: digit count << 3 | sign) or `ob_size` (3.11:
    /// signed digit count).
    pub long_tag: u64,
    pub long_size_is_signed_count: bool,
    pub long_digit: u64,
    pub module_dict: u64,
    pub type_basicsize: u64,
    pub type_flags: u64,
    pub heap_cached_keys: u64,
    pub managed: ManagedDict,
    /// How many bytes before a managed-dict object its dict pointer (3.12:
    /// its one word) sits: 24 in GIL builds, where the garbage collector's
    /// 16-byte head comes right before the object; 8 in free-threaded
    /// builds, which keep that state in the object header (3.13.15t,
    /// measured).
    pub managed_dict_before: u64,
}

/// `Py_TPFLAGS_*` bits used here.
pub const TPFLAGS_INLINE_VALUES: u64 = 1 << 2;
pub const TPFLAGS_MANAGED_DICT: u64 = 1 << 4;
pub const TPFLAGS_HEAPTYPE: u64 = 1 << 9;

/// Bytes between the end of `PyTypeObject` and `ht_cached_keys`.
const CACHED_KEYS_AFTER_TYPE: u64 = 464;

impl ObjectOffsets {
    /// From a checked debug table or carried layout (every field aligned
    /// and inside its struct), plus the relations between them and the
    /// per-version facts.
    pub(super) fn from_checked(c: &Checked) -> Result<Self> {
        let minor = c.minor();
        // 3.11's `ob_size` is the signed digit count; 3.12+ keep `lv_tag`.
        let (tag_name, signed) = match minor {
            11 => ("long_object.ob_size", true),
            _ => ("long_object.lv_tag", false),
        };
        let long_tag = c.get(tag_name)?;
        // Two 30-bit digits are read; the first one must fit the struct.
        let long_digit = c.get("long_object.ob_digit")?;
        if long_digit < long_tag + 8 {
            return Err(c.err(format!(
                "long_object.ob_digit = {long_digit} does not follow {tag_name} ({long_tag})"
            )));
        }
        let type_size = c.get("type_object.size")?;
        let header = object_header(c)?;
        let (type_basicsize, heap_cached_keys) = match minor {
            15.. => (
                c.get("type_object.tp_basicsize")?,
                c.get("heap_type_object.ht_cached_keys")?,
            ),
            // After the variable-size header's `ob_size` and `tp_name`.
            _ => (header + 16, type_size + CACHED_KEYS_AFTER_TYPE),
        };
        Ok(ObjectOffsets {
            interp_modules: c.get("interpreter_state.imports_modules")?,
            dict_used: header,
            dict_keys: c.get("dict_object.ma_keys")?,
            dict_values: c.get("dict_object.ma_values")?,
            values_header: if minor >= 13 { 8 } else { 0 },
            long_tag,
            long_size_is_signed_count: signed,
            long_digit,
            module_dict: header,
            type_basicsize,
            type_flags: c.get("type_object.tp_flags")?,
            heap_cached_keys,
            managed: match minor {
                11 => ManagedDict::Split311,
                12 => ManagedDict::Tagged312,
                _ => ManagedDict::Inline313,
            },
            managed_dict_before: if header == 16 { 24 } else { 8 },
        })
    }
}

/// Offsets for `dump --locals`: a frame's local slots, what its code
/// object says of them, and the objects shown as values.
///
/// Facts beside the tables (x86-64, GIL builds, 3.11-3.15, from
/// `cpython/code.h`, `setobject.h`, `cellobject.h`): `co_flags` is the int
/// at 48 and `co_kwonlyargcount` 8 bytes after `co_argcount`; a set's
/// `used`, `mask` and `table` are at 24, 32 and 40 (the 3.14+ tables say
/// so too), a cell's `ob_ref` at 16.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueOffsets {
    pub frame_localsplus: u64,
    pub code_flags: u64,
    pub code_argcount: u64,
    pub code_kwonlyargcount: u64,
    pub code_localsplusnames: u64,
    pub code_localspluskinds: u64,
    pub tuple_size: u64,
    pub tuple_items: u64,
    pub list_size: u64,
    pub list_items: u64,
    pub set_used: u64,
    pub set_mask: u64,
    pub set_table: u64,
    pub float_value: u64,
    pub cell_ref: u64,
    /// `_PyInterpreterFrame.stackpointer` (3.14+, whose frames keep it
    /// across a call into C): where a frame's value stack ends.
    pub frame_stackpointer: Option<u64>,
}

impl ValueOffsets {
    pub(super) fn from_checked(c: &Checked) -> Result<Self> {
        // Each after the fields it must follow: object headers first, a
        // frame's local slots last.
        let header = object_header(c)?;
        for (field, after) in [
            ("tuple_object.ob_size", header),
            ("list_object.ob_size", header),
            ("float_object.ob_fval", header),
            ("tuple_object.ob_item", c.get("tuple_object.ob_size")? + 8),
            ("list_object.ob_item", c.get("list_object.ob_size")? + 8),
            ("code_object.argcount", header + 8),
            (
                "code_object.localsplusnames",
                c.get("code_object.argcount")? + 12,
            ),
            (
                "code_object.localspluskinds",
                c.get("code_object.localsplusnames")? + 8,
            ),
            (
                "interpreter_frame.localsplus",
                c.get("interpreter_frame.instr_ptr")? + 8,
            ),
        ] {
            let v = c.get(field)?;
            if v < after {
                return Err(c.err(format!(
                    "{field} = {v} lies before the fields it follows (at least {after})"
                )));
            }
        }
        let argcount = c.get("code_object.argcount")?;
        let code_size = c.get("code_object.size")?;
        let kwonly = c.check(
            "code_object.kwonlyargcount (argcount + 8)",
            argcount + 8,
            4,
            code_size,
        )?;
        // `fill`, `used`, `mask`, `table` after the header.
        let (set_used, set_mask, set_table) = match c.minor() {
            14.. => (
                c.get("set_object.used")?,
                c.get("set_object.mask")?,
                c.get("set_object.table")?,
            ),
            _ => (header + 8, header + 16, header + 24),
        };
        // `co_flags` after the variable-size header and three pointers.
        let flags = header + 32;
        Ok(ValueOffsets {
            frame_localsplus: c.get("interpreter_frame.localsplus")?,
            code_flags: c.check(&format!("code_object.flags ({flags})"), flags, 4, code_size)?,
            code_argcount: argcount,
            code_kwonlyargcount: kwonly,
            code_localsplusnames: c.get("code_object.localsplusnames")?,
            code_localspluskinds: c.get("code_object.localspluskinds")?,
            tuple_size: c.get("tuple_object.ob_size")?,
            tuple_items: c.get("tuple_object.ob_item")?,
            list_size: c.get("list_object.ob_size")?,
            list_items: c.get("list_object.ob_item")?,
            set_used,
            set_mask,
            set_table,
            float_value: c.get("float_object.ob_fval")?,
            cell_ref: header,
            frame_stackpointer: match c.minor() {
                14.. => Some(stackpointer(c)?),
                _ => None,
            },
        })
    }
}

/// `sizeof(PyObject)`, where every object's own fields begin: 16 in GIL
/// builds, 32 in free-threaded ones (thread id, flags, mutex, GC bits and
/// two reference counts before `ob_type`). The offsets these files know
/// from the headers rather than from a table are counted from it.
fn object_header(c: &Checked) -> Result<u64> {
    let header = c.get("pyobject.size")?;
    let ob_type = c.get("pyobject.ob_type")?;
    if header != ob_type + 8 || !(16..=64).contains(&header) {
        return Err(c.err(format!(
            "pyobject.size = {header} does not end just after ob_type ({ob_type})"
        )));
    }
    Ok(header)
}

/// `interpreter_frame.stackpointer` (3.14+): a pointer in the frame's
/// header, after its instruction pointer and before its local slots.
fn stackpointer(c: &Checked) -> Result<u64> {
    let sp = c.get("interpreter_frame.stackpointer")?;
    let after = c.get("interpreter_frame.instr_ptr")? + 8;
    let before = c.get("interpreter_frame.localsplus")?;
    if sp < after || sp + 8 > before || sp % 8 != 0 {
        return Err(c.err(format!(
            "interpreter_frame.stackpointer = {sp} is not a pointer between instr_ptr and localsplus ({after}..{before})"
        )));
    }
    Ok(sp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::offsets::{Offsets, PyVersion, RawTable, carried};

    /// Real tables: Debian's 3.14.10 and 3.15.2, and the carried 3.12.
    fn real(minor: u8) -> RawTable {
        let bytes: &[u8] = match minor {
            14 => include_bytes!("../../fixtures/offsets/3.14.10.bin"),
            15 => include_bytes!("../../fixtures/offsets/3.15.2.bin"),
            _ => return carried::CARRIED[1].table(PyVersion::from_hex(0x030c_01f0)),
        };
        RawTable::decode(1, bytes).unwrap()
    }

    fn objects(raw: &RawTable) -> Result<ObjectOffsets> {
        let o = match raw.version.minor {
            12 => Offsets::from_carried(1, raw),
            _ => Offsets::from_raw(1, raw),
        };
        o.map(|o| o.objects)
    }

    #[test]
    fn cached_keys_follow_the_type_unless_the_table_says() {
        let o = objects(&real(14)).unwrap();
        assert_eq!(o.heap_cached_keys, 880);
        assert_eq!(o.managed, ManagedDict::Inline313);
        assert_eq!(o.values_header, 8);
        assert_eq!(o.type_basicsize, 32);
        // 3.15 gives it, and the rule agrees with what it gives.
        let raw = real(15);
        let type_size = raw.get("type_object.size").unwrap();
        let o = objects(&raw).unwrap();
        assert_eq!(o.heap_cached_keys, type_size + CACHED_KEYS_AFTER_TYPE);
        assert_eq!(o.type_basicsize, 32);
        let o = objects(&real(12)).unwrap();
        assert_eq!(o.heap_cached_keys, 880);
        assert_eq!(o.managed, ManagedDict::Tagged312);
        assert_eq!(o.values_header, 0);
    }

    #[test]
    fn missing_or_wild_fields_are_refused_by_name() {
        let named = |raw: &RawTable, name: &str| match objects(raw) {
            Err(Error::InvalidOffsets { what, .. }) => assert!(what.contains(name), "{what}"),
            other => panic!("{name}: {other:?}"),
        };
        for minor in [12, 14, 15] {
            let mut raw = real(minor);
            raw.fields.retain(|(n, _)| *n != "dict_object.ma_keys");
            named(&raw, "dict_object.ma_keys");
            let mut raw = real(minor);
            raw.set("interpreter_state.imports_modules", u64::MAX - 7);
            named(&raw, "imports_modules");
            let mut raw = real(minor);
            raw.set("long_object.ob_digit", 16);
            named(&raw, "long_object.ob_digit");
        }
        let mut raw = real(15);
        raw.set(
            "heap_type_object.size",
            raw.get("type_object.size").unwrap() - 8,
        );
        named(&raw, "heap_type_object.size");
    }
}
