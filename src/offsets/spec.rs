//! What tachyon reads of a table, declared once: for each struct, the
//! bounds on its size and the fields read in it with their widths and the
//! versions that have them; and [`check`], the one function that walks the
//! lists.
//!
//! This is how CPython 3.15 validates its own `_Py_DebugOffsets` table
//! (`Python/debug_offsets_validation.h`): a list of the fields a reader
//! dereferences, each with the size of its C type, and one loop that
//! checks every offset is aligned and that the field ends inside the struct
//! the table says it belongs to. Debug tables (3.13+) and the carried
//! layouts (3.11, 3.12) go through the same lists, so a field is checked
//! the same way whichever source gave it.
//!
//! A few offsets are not bounded by one struct of their own (the bytecode
//! after the code object's header, a bytes object's data, the unicode
//! header sizes, 3.15's `err_stackitem.exc_value`): they are listed as
//! [`Width::Related`], read here and checked by the builder against the
//! fields they must follow.

use super::RawTable;
use crate::error::{Error, Result};

/// Caps on struct sizes: far above any real build, far below anything that
/// would let a corrupt table make us allocate or read wildly.
const MAX_RUNTIME: u64 = 4 * 1024 * 1024;
const MAX_INTERP: u64 = 4 * 1024 * 1024;
const MAX_TSTATE: u64 = 64 * 1024;
const MAX_GC: u64 = 64 * 1024;
const MAX_FRAME: u64 = 512;
const MAX_CODE: u64 = 4096;
/// Object headers read on every sample.
const MAX_HEADER: u64 = 1024;
/// The structs only thread names read.
const MAX_SMALL: u64 = 4096;

/// How big a struct may be.
#[derive(Debug, Clone, Copy)]
enum Size {
    /// `<section>.size` is in the table, between these bounds.
    Between(u64, u64),
    /// `<section>.size` is in the table, at least the size of the struct
    /// it embeds (another section, checked before it) and at most this.
    Embeds(&'static str, u64),
    /// The table gives no size (a carried `_PyCFrame`): this many bytes
    /// bound its fields.
    Fixed(u64),
    /// The table gives no size, and the fields are [`Width::Related`].
    Unsized,
}

/// How a field is bounded.
#[derive(Debug, Clone, Copy)]
enum Width {
    /// A field of this many bytes: aligned to them, inside its struct.
    Bytes(u64),
    /// An offset checked by the builder against the fields it must follow.
    Related,
}

/// One field read in a struct, for the minor versions `minors` (inclusive).
#[derive(Debug, Clone, Copy)]
struct Field {
    name: &'static str,
    width: Width,
    minors: (u8, u8),
}

const fn at(name: &'static str, width: u64) -> Field {
    Field {
        name,
        width: Width::Bytes(width),
        minors: (0, u8::MAX),
    }
}

const fn related(name: &'static str) -> Field {
    Field {
        name,
        width: Width::Related,
        minors: (0, u8::MAX),
    }
}

impl Field {
    const fn since(self, minor: u8) -> Field {
        Field {
            minors: (minor, u8::MAX),
            ..self
        }
    }
    const fn until(self, minor: u8) -> Field {
        Field {
            minors: (0, minor),
            ..self
        }
    }
    const fn only(self, minor: u8) -> Field {
        Field {
            minors: (minor, minor),
            ..self
        }
    }
}

/// One struct of the table.
struct Section {
    name: &'static str,
    size: Size,
    minors: (u8, u8),
    fields: &'static [Field],
}

const ALL: (u8, u8) = (0, u8::MAX);
/// The carried layouts (3.11, 3.12), which have no debug table.
const CARRIED: (u8, u8) = (11, 12);
/// Debug tables.
const DEBUG: (u8, u8) = (13, u8::MAX);

/// Every struct tachyon reads, in the order they are checked. Names are
/// those of the debug table where the concept is the same; the carried
/// layouts use the same names (see `carried.rs`).
const SECTIONS: &[Section] = &[
    Section {
        name: "runtime_state",
        size: Size::Between(8, u64::MAX / 2),
        minors: DEBUG,
        fields: &[at("interpreters_head", 8), at("finalizing", 8)],
    },
    Section {
        name: "runtime_state",
        size: Size::Between(64, MAX_RUNTIME),
        minors: CARRIED,
        fields: &[
            at("interpreters_head", 8),
            at("finalizing", 8),
            // 3.11: the GIL lives in `_PyRuntime`.
            at("gil_locked", 4).only(11),
            at("gil_holder", 8).only(11),
        ],
    },
    Section {
        name: "interpreter_state",
        size: Size::Between(64, MAX_INTERP),
        minors: ALL,
        fields: &[
            at("id", 8),
            at("next", 8),
            at("threads_head", 8),
            at("threads_main", 8).since(14),
            // 3.11, 3.12: the main thread state embedded in the interpreter.
            at("initial_thread", 8).until(12),
            at("gil_runtime_state_locked", 4).since(12),
            at("gil_runtime_state_holder", 8).since(12),
            // Free-threaded builds: whether the GIL was enabled at run
            // time. 3.13's tables give 0 for it; there `enabled` is the
            // first field of the GIL state (gdb, 3.13.15t).
            at("gil_runtime_state", 4).since(13),
            at("gil_runtime_state_enabled", 4).since(13),
            at("ceval_gil", 8).only(12),
            at("code_object_generation", 8).since(14),
            // Free-threaded 3.14+: bumped when a thread takes or frees a
            // bytecode copy index (0 in a GIL build's table).
            at("tlbc_generation", 4).since(14),
            at("gc", 8),
            at("imports_modules", 8),
        ],
    },
    Section {
        name: "gc",
        size: Size::Between(8, MAX_GC),
        minors: ALL,
        fields: &[at("collecting", 4), at("frame", 8).since(15)],
    },
    Section {
        name: "gil_state",
        size: Size::Between(24, MAX_SMALL),
        minors: (12, 12),
        fields: &[at("locked", 4), at("holder", 8)],
    },
    Section {
        name: "thread_state",
        size: Size::Between(64, MAX_TSTATE),
        minors: ALL,
        fields: &[
            at("next", 8),
            at("interp", 8),
            at("current_frame", 8).since(13),
            at("cframe", 8).until(12),
            at("root_cframe", 8).until(12),
            at("base_frame", 8).since(15),
            at("last_profiled_frame", 8).since(15),
            at("last_profiled_frame_seq", 8).since(15),
            at("thread_id", 8),
            at("native_thread_id", 8),
            at("datastack_chunk", 8),
            at("status", 4),
            at("exc_state", 8).since(15),
            at("holds_gil", 4).since(15),
            at("gil_requested", 4).since(15),
            at("current_exception", 8).since(15),
            at("current_exception", 8).until(12),
            at("handled_exception", 8).until(12),
            at("datastack_top", 8).until(12),
        ],
    },
    Section {
        // The bytes a sample copies of a `_PyCFrame` at most.
        name: "cframe",
        size: Size::Fixed(24),
        minors: CARRIED,
        fields: &[at("current_frame", 8), at("previous", 8)],
    },
    Section {
        name: "err_stackitem",
        size: Size::Unsized,
        minors: (15, u8::MAX),
        fields: &[related("exc_value")],
    },
    Section {
        name: "interpreter_frame",
        size: Size::Between(32, MAX_FRAME),
        minors: ALL,
        fields: &[
            at("previous", 8),
            at("executable", 8),
            at("instr_ptr", 8),
            at("owner", 1),
            at("is_entry", 1).only(11),
            // `dump --locals`: the value stack's end (a waited-for lock).
            at("localsplus", 8),
            at("stackpointer", 8).since(14),
            // Free-threaded 3.14+: which copy of its code's bytecode the
            // frame runs (0 in a GIL build's table).
            at("tlbc_index", 4).since(14),
            // 3.12: a resumer's value stack (`unwind::resumer`).
            at("stacktop", 4).only(12),
        ],
    },
    Section {
        // 3.12: a generator whose frame is current before it is linked
        // to its resumer (`unwind::resumer`).
        name: "gen_object",
        size: Size::Between(24, MAX_SMALL),
        minors: (12, 12),
        fields: &[at("gi_iframe", 8), at("gi_frame_state", 1)],
    },
    Section {
        name: "code_object",
        size: Size::Between(32, MAX_CODE),
        minors: ALL,
        fields: &[
            at("filename", 8),
            at("qualname", 8),
            at("linetable", 8),
            at("firstlineno", 4),
            at("framesize", 4).only(12),
            // 3.11: a frame's size; 3.12: a resumer's value stack.
            at("nlocalsplus", 4).until(12),
            at("stacksize", 4).until(12),
            at("ob_size", 8).only(12),
            related("co_code_adaptive"),
            // Free-threaded 3.14+: the array of bytecode copies.
            at("co_tlbc", 8).since(14),
            // `dump --locals`.
            at("argcount", 4),
            at("localsplusnames", 8),
            at("localspluskinds", 8),
        ],
    },
    Section {
        name: "pyobject",
        size: Size::Between(16, MAX_HEADER),
        minors: ALL,
        fields: &[at("ob_type", 8)],
    },
    Section {
        name: "type_object",
        size: Size::Between(32, MAX_HEADER),
        minors: ALL,
        fields: &[
            at("tp_name", 8),
            at("tp_flags", 8),
            at("tp_basicsize", 8).since(15),
        ],
    },
    Section {
        name: "bytes_object",
        size: Size::Between(16, MAX_HEADER),
        minors: ALL,
        fields: &[at("ob_size", 8), related("ob_sval")],
    },
    Section {
        name: "unicode_object",
        size: Size::Between(16, MAX_HEADER),
        minors: ALL,
        fields: &[
            at("state", 4),
            at("length", 8),
            related("asciiobject_size"),
            related("compactunicodeobject_size").since(15),
            related("compactunicodeobject_size").until(12),
        ],
    },
    Section {
        name: "dict_object",
        size: Size::Between(16, MAX_SMALL),
        minors: ALL,
        fields: &[at("ma_keys", 8), at("ma_values", 8)],
    },
    Section {
        name: "long_object",
        size: Size::Between(16, MAX_SMALL),
        minors: ALL,
        fields: &[
            // 3.11: `ob_size`, the signed digit count; then `lv_tag`.
            at("ob_size", 8).only(11),
            at("lv_tag", 8).since(12),
            at("ob_digit", 4),
        ],
    },
    // The containers and floats `dump --locals` shows (3.13's table has
    // no set; its layout is carried in `objects.rs`).
    Section {
        name: "tuple_object",
        size: Size::Between(24, MAX_SMALL),
        minors: ALL,
        fields: &[at("ob_size", 8), at("ob_item", 8)],
    },
    Section {
        name: "list_object",
        size: Size::Between(24, MAX_SMALL),
        minors: ALL,
        fields: &[at("ob_size", 8), at("ob_item", 8)],
    },
    Section {
        name: "set_object",
        size: Size::Between(24, MAX_SMALL),
        minors: (14, u8::MAX),
        fields: &[at("used", 8), at("mask", 8), at("table", 8)],
    },
    Section {
        name: "float_object",
        size: Size::Between(24, MAX_SMALL),
        minors: ALL,
        fields: &[at("ob_fval", 8)],
    },
    Section {
        name: "heap_type_object",
        size: Size::Embeds("type_object", MAX_SMALL),
        minors: (15, u8::MAX),
        fields: &[at("ht_cached_keys", 8)],
    },
];

fn applies((lo, hi): (u8, u8), minor: u8) -> bool {
    lo <= minor && minor <= hi
}

/// A table whose listed fields have all been checked: the values the
/// builder may use, and what it needs to refuse the table by name.
pub(super) struct Checked<'a> {
    raw: &'a RawTable,
    pid: i32,
    values: Vec<(String, u64)>,
}

/// Check every struct size and field the lists name for the table's
/// version, in list order; the first that fails refuses the table, naming it.
pub(super) fn check(pid: i32, raw: &RawTable) -> Result<Checked<'_>> {
    let minor = raw.version.minor;
    let mut c = Checked {
        raw,
        pid,
        values: Vec::new(),
    };
    for s in SECTIONS.iter().filter(|s| applies(s.minors, minor)) {
        let size = c.section_size(s)?;
        for f in s.fields.iter().filter(|f| applies(f.minors, minor)) {
            let name = format!("{}.{}", s.name, f.name);
            let v = c.raw_value(&name)?;
            if let Width::Bytes(width) = f.width {
                c.check(&name, v, width, size)?;
            }
            c.values.push((name, v));
        }
    }
    Ok(c)
}

impl Checked<'_> {
    pub fn minor(&self) -> u8 {
        self.raw.version.minor
    }

    pub fn err(&self, what: String) -> Error {
        Error::InvalidOffsets {
            pid: self.pid,
            version: self.raw.version.to_string(),
            what,
        }
    }

    fn raw_value(&self, name: &str) -> Result<u64> {
        self.raw
            .get(name)
            .ok_or_else(|| self.err(format!("{name} is missing")))
    }

    /// A checked value: a `<section>.size` or a field the lists name for
    /// this version. Anything else is refused as missing.
    pub fn get(&self, name: &str) -> Result<u64> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| self.err(format!("{name} is missing")))
    }

    /// A field only some versions have: `Some` when this one `has` it.
    pub fn get_if(&self, has: bool, name: &str) -> Result<Option<u64>> {
        has.then(|| self.get(name)).transpose()
    }

    /// The size of `s`, checked against its bounds.
    fn section_size(&mut self, s: &Section) -> Result<u64> {
        let (min, max) = match s.size {
            Size::Between(min, max) => (min, max),
            Size::Embeds(inner, max) => (self.get(&format!("{inner}.size"))?, max),
            Size::Fixed(n) => return Ok(n),
            Size::Unsized => return Ok(0),
        };
        let name = format!("{}.size", s.name);
        let v = self.raw_value(&name)?;
        if v < min || v > max {
            return Err(self.err(format!("{name} is {v}, expected between {min} and {max}")));
        }
        self.values.push((name, v));
        Ok(v)
    }

    /// `v`, the offset of a `width`-byte field named `name`: aligned and
    /// inside a struct of `size` bytes.
    pub fn check(&self, name: &str, v: u64, width: u64, size: u64) -> Result<u64> {
        if !v.is_multiple_of(width) {
            return Err(self.err(format!("{name} = {v} is not aligned to {width} bytes")));
        }
        if v.checked_add(width).is_none_or(|end| end > size) {
            return Err(self.err(format!(
                "{name} = {v} lies outside its struct of {size} bytes"
            )));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offsets::{PyVersion, carried};

    #[test]
    fn every_section_and_field_is_named_once_per_version() {
        for minor in 11..=15 {
            let mut seen = Vec::new();
            for s in SECTIONS.iter().filter(|s| applies(s.minors, minor)) {
                for f in s.fields.iter().filter(|f| applies(f.minors, minor)) {
                    let name = format!("{}.{}", s.name, f.name);
                    assert!(!seen.contains(&name), "3.{minor}: {name} twice");
                    seen.push(name);
                }
            }
        }
    }

    /// The walk refuses a table by the name of the size or field at fault,
    /// and lets the builder see only what it checked.
    #[test]
    fn the_walk_names_what_it_refuses() {
        let good = carried::CARRIED[1].table(PyVersion::from_hex(0x030c_01f0));
        let refused = |name: &str, v: Option<u64>, want: &str| {
            let mut raw = good.clone();
            match v {
                Some(v) => assert!(raw.set(name, v)),
                None => raw.fields.retain(|(n, _)| *n != name),
            }
            match check(1, &raw) {
                Err(Error::InvalidOffsets { what, .. }) => {
                    assert!(what.contains(name) && what.contains(want), "{what}")
                }
                Err(e) => panic!("{name}: {e}"),
                Ok(_) => panic!("{name} = {v:?}: accepted"),
            }
        };
        refused(
            "thread_state.size",
            Some(8),
            "expected between 64 and 65536",
        );
        refused("thread_state.next", Some(4), "not aligned to 8 bytes");
        refused(
            "thread_state.status",
            Some(288),
            "outside its struct of 288",
        );
        refused("cframe.previous", Some(24), "outside its struct of 24");
        refused("gil_state.holder", None, "is missing");
        let c = check(1, &good).unwrap();
        assert_eq!(c.get("thread_state.size").unwrap(), 288);
        // In the table, but not listed for 3.12: never handed out.
        assert!(good.get("runtime_state.main_thread").is_some());
        assert!(c.get("runtime_state.main_thread").is_err());
    }
}
