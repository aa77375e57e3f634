//! Where a thread's name lives: `sys.modules`, dicts, ints, module objects
//! and instance attributes (managed dicts), per version.
//!
//! Only thread names need these, and a thread name is a nicety: a table or
//! carried layout that lacks one of them, or gives an implausible value,
//! yields an [`ObjectOffsets`] error that says which, and names fall back
//! to the kernel's `comm`; sampling is not affected.
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

use super::RawTable;

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

impl ObjectOffsets {
    /// From a debug table or carried layout of `minor`; the error names the
    /// missing or implausible field.
    pub fn from_raw(raw: &RawTable, minor: u8, interp_size: u64) -> Result<Self, String> {
        let get = |n: &str| raw.get(n).ok_or_else(|| format!("{n} is not known"));
        let interp_modules = get("interpreter_state.imports_modules")?;
        if interp_modules % 8 != 0 || interp_modules + 8 > interp_size {
            return Err(format!(
                "interpreter_state.imports_modules = {interp_modules} is not a pointer field of the interpreter"
            ));
        }
        let type_size = get("type_object.size")?;
        let heap_cached_keys = match raw.get("heap_type_object.ht_cached_keys") {
            Some(v) => v,
            None => type_size + CACHED_KEYS_AFTER_TYPE,
        };
        let (long_tag, signed) = match raw.get("long_object.lv_tag") {
            Some(t) => (t, false),
            None => (get("long_object.ob_size")?, true),
        };
        let o = ObjectOffsets {
            interp_modules,
            dict_keys: get("dict_object.ma_keys")?,
            dict_values: get("dict_object.ma_values")?,
            values_header: if minor >= 13 { 8 } else { 0 },
            long_tag,
            long_size_is_signed_count: signed,
            long_digit: get("long_object.ob_digit")?,
            module_dict: 16,
            type_basicsize: raw.get("type_object.tp_basicsize").unwrap_or(32),
            type_flags: get("type_object.tp_flags")?,
            heap_cached_keys,
            managed: match minor {
                11 => ManagedDict::Split311,
                12 => ManagedDict::Tagged312,
                _ => ManagedDict::Inline313,
            },
        };
        for (name, v) in [
            ("dict_object.ma_keys", o.dict_keys),
            ("dict_object.ma_values", o.dict_values),
            ("type_object.tp_flags", o.type_flags),
            ("heap_type_object.ht_cached_keys", o.heap_cached_keys),
        ] {
            if v % 8 != 0 || v > 4096 {
                return Err(format!("{name} = {v} is implausible"));
            }
        }
        if o.long_digit > 64 || o.long_tag + 8 > o.long_digit {
            return Err(format!(
                "long_object.ob_digit = {} does not follow its size field",
                o.long_digit
            ));
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offsets::PyVersion;

    fn raw(minor: u8, fields: &[(&'static str, u64)]) -> RawTable {
        RawTable {
            version: PyVersion::from_hex(0x0300_00f0 | (minor as u64) << 16),
            free_threaded: false,
            fields: fields.to_vec(),
        }
    }

    const COMMON: &[(&str, u64)] = &[
        ("interpreter_state.imports_modules", 7688),
        ("dict_object.ma_keys", 32),
        ("dict_object.ma_values", 40),
        ("long_object.lv_tag", 16),
        ("long_object.ob_digit", 24),
        ("type_object.tp_flags", 168),
        ("type_object.size", 416),
    ];

    #[test]
    fn cached_keys_follow_the_type_unless_the_table_says() {
        let o = ObjectOffsets::from_raw(&raw(14, COMMON), 14, 200_000).unwrap();
        assert_eq!(o.heap_cached_keys, 880);
        assert_eq!(o.managed, ManagedDict::Inline313);
        assert_eq!(o.values_header, 8);
        // 3.15 gives it, and the rule agrees with what it gives.
        let mut f = COMMON.to_vec();
        f.retain(|(n, _)| *n != "type_object.size");
        f.push(("type_object.size", 424));
        let by_rule = ObjectOffsets::from_raw(&raw(15, &f), 15, 200_000).unwrap();
        f.push(("heap_type_object.ht_cached_keys", 888));
        let by_table = ObjectOffsets::from_raw(&raw(15, &f), 15, 200_000).unwrap();
        assert_eq!(by_rule, by_table);
    }

    #[test]
    fn missing_or_wild_fields_are_named() {
        let mut f = COMMON.to_vec();
        f.retain(|(n, _)| *n != "dict_object.ma_keys");
        let e = ObjectOffsets::from_raw(&raw(14, &f), 14, 200_000).unwrap_err();
        assert!(e.contains("dict_object.ma_keys"), "{e}");
        let e = ObjectOffsets::from_raw(&raw(14, COMMON), 14, 4096).unwrap_err();
        assert!(e.contains("imports_modules"), "{e}");
    }
}
