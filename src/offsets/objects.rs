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
//! - `PyHeapTypeObject.ht_cached_keys` (the keys instances share) is 464
//!   bytes after the end of `PyTypeObject` (five method suites and three
//!   pointers): 872 in 3.11, 880 in 3.12-3.14, 888 in 3.15.
//! - Instance attributes of a managed-dict type: 3.11 keeps a values
//!   pointer 32 bytes before the object and a dict pointer 24 before it;
//!   3.12 one word 24 before it, a values pointer minus one (odd) or a
//!   dict; 3.13+ a dict pointer 24 before it and, with inline values, a
//!   `PyDictValues` at `obj + tp_basicsize` (`valid` byte at 3, values at 8).

use super::Validator;
use crate::error::Result;

/// How instance attributes of a managed-dict type are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagedDict {
    /// 3.11: values pointer at -32, dict pointer at -24.
    Split311,
    /// 3.12: one word at -24: `values - 1` (odd) or a dict.
    Tagged312,
    /// 3.13+: dict pointer at -24; inline values at `tp_basicsize`.
    Inline313,
}

/// Offsets for reading dicts, ints, modules and instance attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectOffsets {
    /// `PyInterpreterState` → `sys.modules` (a dict pointer).
    pub interp_modules: u64,
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
}

/// `Py_TPFLAGS_*` bits used here.
pub const TPFLAGS_INLINE_VALUES: u64 = 1 << 2;
pub const TPFLAGS_MANAGED_DICT: u64 = 1 << 4;
pub const TPFLAGS_HEAPTYPE: u64 = 1 << 9;

/// Bytes between the end of `PyTypeObject` and `ht_cached_keys`.
const CACHED_KEYS_AFTER_TYPE: u64 = 464;

/// Caps on the sizes of the small structs read here.
const MAX_SMALL: u64 = 4096;

impl ObjectOffsets {
    /// From a debug table or carried layout of `minor`, validated like
    /// every other offset: each field aligned and inside its struct, or the
    /// table is refused naming it.
    pub(super) fn validate(v: &Validator<'_>, minor: u8, interp_size: u64) -> Result<Self> {
        let raw = v.raw;
        let interp_modules = v.field("interpreter_state.imports_modules", 8, interp_size)?;
        let dict_size = v.size("dict_object", 16, MAX_SMALL)?;
        let dict_keys = v.field("dict_object.ma_keys", 8, dict_size)?;
        let dict_values = v.field("dict_object.ma_values", 8, dict_size)?;
        let long_size = v.size("long_object", 16, MAX_SMALL)?;
        let (tag_name, signed) = match raw.get("long_object.lv_tag") {
            Some(_) => ("long_object.lv_tag", false),
            None => ("long_object.ob_size", true),
        };
        let long_tag = v.field(tag_name, 8, long_size)?;
        // Two 30-bit digits are read; the first one must fit the struct.
        let long_digit = v.field("long_object.ob_digit", 4, long_size)?;
        if long_digit < long_tag + 8 {
            return Err(v.err(format!(
                "long_object.ob_digit = {long_digit} does not follow {tag_name} ({long_tag})"
            )));
        }
        let type_size = v.size("type_object", 32, MAX_SMALL)?;
        let type_flags = v.field("type_object.tp_flags", 8, type_size)?;
        let type_basicsize = match raw.get("type_object.tp_basicsize") {
            Some(_) => v.field("type_object.tp_basicsize", 8, type_size)?,
            None => 32,
        };
        let heap_cached_keys = match raw.get("heap_type_object.ht_cached_keys") {
            Some(_) => {
                let heap_size = v.size("heap_type_object", type_size, MAX_SMALL)?;
                v.field("heap_type_object.ht_cached_keys", 8, heap_size)?
            }
            None => type_size + CACHED_KEYS_AFTER_TYPE,
        };
        Ok(ObjectOffsets {
            interp_modules,
            dict_keys,
            dict_values,
            values_header: if minor >= 13 { 8 } else { 0 },
            long_tag,
            long_size_is_signed_count: signed,
            long_digit,
            module_dict: 16,
            type_basicsize,
            type_flags,
            heap_cached_keys,
            managed: match minor {
                11 => ManagedDict::Split311,
                12 => ManagedDict::Tagged312,
                _ => ManagedDict::Inline313,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::offsets::{PyVersion, RawTable};

    fn raw(minor: u8, fields: &[(&'static str, u64)]) -> RawTable {
        RawTable {
            version: PyVersion::from_hex(0x0300_00f0 | (minor as u64) << 16),
            free_threaded: false,
            fields: fields.to_vec(),
        }
    }

    const COMMON: &[(&str, u64)] = &[
        ("interpreter_state.imports_modules", 7688),
        ("dict_object.size", 48),
        ("dict_object.ma_keys", 32),
        ("dict_object.ma_values", 40),
        ("long_object.size", 32),
        ("long_object.lv_tag", 16),
        ("long_object.ob_digit", 24),
        ("type_object.tp_flags", 168),
        ("type_object.size", 416),
    ];

    fn validate(r: &RawTable) -> Result<ObjectOffsets> {
        let v = Validator { raw: r, pid: 1 };
        ObjectOffsets::validate(&v, r.version.minor, 200_000)
    }

    #[test]
    fn cached_keys_follow_the_type_unless_the_table_says() {
        let o = validate(&raw(14, COMMON)).unwrap();
        assert_eq!(o.heap_cached_keys, 880);
        assert_eq!(o.managed, ManagedDict::Inline313);
        assert_eq!(o.values_header, 8);
        // 3.15 gives it, and the rule agrees with what it gives.
        let mut f = COMMON.to_vec();
        f.retain(|(n, _)| *n != "type_object.size");
        f.push(("type_object.size", 424));
        let by_rule = validate(&raw(15, &f)).unwrap();
        f.extend([
            ("heap_type_object.size", 944),
            ("heap_type_object.ht_cached_keys", 888),
        ]);
        assert_eq!(by_rule, validate(&raw(15, &f)).unwrap());
    }

    #[test]
    fn missing_or_wild_fields_are_refused_by_name() {
        let named = |f: &[(&'static str, u64)], name: &str| match validate(&raw(14, f)) {
            Err(Error::InvalidOffsets { what, .. }) => assert!(what.contains(name), "{what}"),
            other => panic!("{name}: {other:?}"),
        };
        let mut f = COMMON.to_vec();
        f.retain(|(n, _)| *n != "dict_object.ma_keys");
        named(&f, "dict_object.ma_keys");
        let mut f = COMMON.to_vec();
        f.retain(|(n, _)| *n != "interpreter_state.imports_modules");
        f.push(("interpreter_state.imports_modules", u64::MAX - 7));
        named(&f, "imports_modules");
        let mut f = COMMON.to_vec();
        f.retain(|(n, _)| *n != "long_object.ob_digit");
        f.push(("long_object.ob_digit", 16));
        named(&f, "long_object.ob_digit");
    }
}
