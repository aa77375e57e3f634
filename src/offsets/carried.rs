//! The layouts tachyon carries for CPython 3.11 and 3.12, which have no
//! `_Py_DebugOffsets` table.
//!
//! Each is a list of (field, offset) pairs for x86-64 GIL release builds,
//! named like the debug-offsets fields where the concept is the same, so it
//! becomes a [`RawTable`] and is normalised into the same [`Offsets`] as a
//! 3.13+ table, by the same lists and checks (`spec.rs`) and the same
//! builder (`build.rs`): the unwinder has one code path, branching only on the few
//! normalised facts where 3.11/3.12 differ (the `_PyCFrame` indirection to
//! the current frame, 3.11's `is_entry` byte, `prev_instr`, the GIL in
//! `_PyRuntime` in 3.11, the main thread state embedded in the
//! interpreter).
//!
//! The values come from the versions' own headers (`pycore_runtime.h`,
//! `pycore_interp.h`, `cpython/pystate.h`, `pycore_frame.h`,
//! `cpython/code.h`, `unicodeobject.h`, `pycore_gc.h`), as compiled
//! `offsetof`s, and were checked on live interpreters: Debian 3.11.2 and
//! pyenv 3.11.7 (identical), pyenv 3.12.1 (3.12.10 identical in every field
//! used here). No field used here changed between those patch releases, so
//! one layout serves each minor version. A layout is never trusted on the
//! version alone: `runtime::verify` checks it against the live process
//! before the first sample, and a process it does not fit is refused.

use super::{Offsets, PyVersion, RawTable};
use crate::error::Result;

/// A carried layout: which versions it is for, and its fields.
pub struct Carried {
    pub minor: u8,
    /// Patch releases it was checked on, for messages and the README.
    pub checked_on: &'static str,
    pub fields: &'static [(&'static str, u64)],
}

const PY311: Carried = Carried {
    minor: 11,
    checked_on: "3.11.2, 3.11.7",
    fields: &[
        // _PyRuntimeState: sizeof is 166688; only leading fields and the
        // GIL are read.
        ("runtime_state.size", 166_688),
        // `_finalizing`: the thread state finalizing the runtime, NULL
        // while the program runs.
        ("runtime_state.finalizing", 24),
        ("runtime_state.interpreters_head", 40),
        ("runtime_state.interpreters_main", 48),
        ("runtime_state.main_thread", 80),
        // ceval.gil.locked (an int) and gilstate.tstate_current (the
        // holder, NULL while nobody holds the GIL).
        ("runtime_state.gil_locked", 376),
        ("runtime_state.gil_holder", 576),
        // PyInterpreterState
        ("interpreter_state.size", 107_752),
        ("interpreter_state.next", 0),
        ("interpreter_state.threads_head", 16),
        ("interpreter_state.runtime", 40),
        ("interpreter_state.id", 48),
        ("interpreter_state.gc", 648),
        ("interpreter_state.initial_thread", 107_392),
        // PyThreadState
        ("thread_state.size", 360),
        ("thread_state.prev", 0),
        ("thread_state.next", 8),
        ("thread_state.interp", 16),
        ("thread_state.status", 24),
        ("thread_state.cframe", 56),
        // curexc_type: set while an exception is being raised.
        ("thread_state.current_exception", 96),
        ("thread_state.thread_id", 152),
        ("thread_state.native_thread_id", 160),
        ("thread_state.datastack_chunk", 296),
        ("thread_state.datastack_top", 304),
        // exc_state.exc_value: the exception being handled.
        ("thread_state.handled_exception", 320),
        // The bottom `_PyCFrame`, where `cframe` points while no eval loop
        // runs on the thread.
        ("thread_state.root_cframe", 336),
        // _PyCFrame
        ("cframe.current_frame", 8),
        ("cframe.previous", 16),
        // _PyInterpreterFrame
        ("interpreter_frame.size", 80),
        ("interpreter_frame.executable", 32),
        ("interpreter_frame.previous", 48),
        ("interpreter_frame.instr_ptr", 56),
        ("interpreter_frame.is_entry", 68),
        ("interpreter_frame.owner", 69),
        ("interpreter_frame.localsplus", 72),
        // PyCodeObject
        ("code_object.size", 192),
        ("code_object.argcount", 56),
        ("code_object.localsplusnames", 96),
        ("code_object.localspluskinds", 104),
        ("code_object.firstlineno", 72),
        ("code_object.stacksize", 68),
        ("code_object.nlocalsplus", 76),
        ("code_object.filename", 112),
        ("code_object.qualname", 128),
        ("code_object.linetable", 136),
        ("code_object.co_code_adaptive", 184),
        // gc runtime state: `collecting`.
        ("gc.size", 256),
        ("gc.collecting", 200),
        // Objects.
        ("pyobject.size", 16),
        ("pyobject.ob_type", 8),
        ("type_object.size", 408),
        ("type_object.tp_name", 24),
        // Thread names (`offsets::objects`): `interp->modules`, dicts,
        // ints (`ob_size` is the signed digit count) and type flags; the
        // keys instances share are 464 bytes after the type (872).
        ("interpreter_state.imports_modules", 888),
        ("dict_object.size", 48),
        ("dict_object.ma_keys", 32),
        ("dict_object.ma_values", 40),
        ("long_object.size", 32),
        ("long_object.ob_size", 16),
        ("long_object.ob_digit", 24),
        // `dump --locals`: tuples and lists (`ob_size`, items), floats.
        ("tuple_object.size", 32),
        ("tuple_object.ob_size", 16),
        ("tuple_object.ob_item", 24),
        ("list_object.size", 40),
        ("list_object.ob_size", 16),
        ("list_object.ob_item", 24),
        ("float_object.size", 24),
        ("float_object.ob_fval", 16),
        ("type_object.tp_flags", 168),
        ("bytes_object.size", 40),
        ("bytes_object.ob_size", 16),
        ("bytes_object.ob_sval", 32),
        ("unicode_object.size", 80),
        ("unicode_object.state", 32),
        ("unicode_object.length", 16),
        ("unicode_object.asciiobject_size", 48),
        ("unicode_object.compactunicodeobject_size", 72),
    ],
};

const PY312: Carried = Carried {
    minor: 12,
    checked_on: "3.12.1, 3.12.10",
    fields: &[
        // _PyRuntimeState: its size differs between patch releases (459944
        // in 3.12.1, 459280 in 3.12.10) after the fields used here; this is
        // the larger.
        ("runtime_state.size", 459_944),
        ("runtime_state.finalizing", 24),
        ("runtime_state.interpreters_head", 40),
        ("runtime_state.interpreters_main", 48),
        ("runtime_state.main_thread", 64),
        // PyInterpreterState: the GIL is the interpreter's own `_gil`
        // (what `ceval.gil` points to in the main interpreter).
        ("interpreter_state.size", 383_552),
        ("interpreter_state.next", 0),
        ("interpreter_state.id", 8),
        ("interpreter_state.threads_head", 72),
        ("interpreter_state.runtime", 96),
        ("interpreter_state.gc", 112),
        ("interpreter_state.gil_runtime_state_holder", 1048),
        ("interpreter_state.gil_runtime_state_locked", 1056),
        // `ceval.gil`: the GIL in use; `&_gil` unless the interpreter
        // shares the main interpreter's.
        ("interpreter_state.ceval_gil", 384),
        // struct _gil_runtime_state
        ("gil_state.size", 208),
        ("gil_state.holder", 8),
        ("gil_state.locked", 16),
        ("interpreter_state.initial_thread", 383_264),
        // PyThreadState
        ("thread_state.size", 288),
        ("thread_state.prev", 0),
        ("thread_state.next", 8),
        ("thread_state.interp", 16),
        ("thread_state.status", 24),
        ("thread_state.cframe", 56),
        ("thread_state.current_exception", 96),
        ("thread_state.thread_id", 136),
        ("thread_state.native_thread_id", 144),
        ("thread_state.datastack_chunk", 232),
        ("thread_state.datastack_top", 240),
        ("thread_state.handled_exception", 256),
        ("thread_state.root_cframe", 272),
        // _PyCFrame
        ("cframe.current_frame", 0),
        ("cframe.previous", 8),
        // _PyInterpreterFrame
        ("interpreter_frame.size", 80),
        ("interpreter_frame.executable", 0),
        ("interpreter_frame.previous", 8),
        ("interpreter_frame.instr_ptr", 56),
        ("interpreter_frame.owner", 70),
        ("interpreter_frame.localsplus", 72),
        // `stacktop` (an int): the value stack's depth, in `localsplus`
        // slots, as of the frame's last call or suspension.
        ("interpreter_frame.stacktop", 64),
        // PyGenObject (and PyCoroObject, laid out alike): its frame, and
        // `gi_frame_state` (an int8) five bytes before it.
        ("gen_object.size", 80),
        ("gen_object.gi_iframe", 72),
        ("gen_object.gi_frame_state", 67),
        // PyCodeObject
        ("code_object.size", 200),
        // `ob_size`: the bytecode's length in code units.
        ("code_object.ob_size", 16),
        ("code_object.stacksize", 64),
        ("code_object.nlocalsplus", 72),
        ("code_object.argcount", 52),
        ("code_object.localsplusnames", 96),
        ("code_object.localspluskinds", 104),
        ("code_object.firstlineno", 68),
        ("code_object.framesize", 76),
        ("code_object.filename", 112),
        ("code_object.qualname", 128),
        ("code_object.linetable", 136),
        ("code_object.co_code_adaptive", 192),
        ("gc.size", 256),
        ("gc.collecting", 200),
        ("pyobject.size", 16),
        ("pyobject.ob_type", 8),
        ("type_object.size", 416),
        ("type_object.tp_name", 24),
        // Thread names: `interp->imports.modules`, dicts, ints (`lv_tag`)
        // and type flags; the keys instances share are at 880.
        ("interpreter_state.imports_modules", 944),
        ("dict_object.size", 48),
        ("dict_object.ma_keys", 32),
        ("dict_object.ma_values", 40),
        ("long_object.size", 32),
        ("long_object.lv_tag", 16),
        ("long_object.ob_digit", 24),
        // `dump --locals`: tuples and lists (`ob_size`, items), floats.
        ("tuple_object.size", 32),
        ("tuple_object.ob_size", 16),
        ("tuple_object.ob_item", 24),
        ("list_object.size", 40),
        ("list_object.ob_size", 16),
        ("list_object.ob_item", 24),
        ("float_object.size", 24),
        ("float_object.ob_fval", 16),
        ("type_object.tp_flags", 168),
        ("bytes_object.size", 40),
        ("bytes_object.ob_size", 16),
        ("bytes_object.ob_sval", 32),
        ("unicode_object.size", 64),
        ("unicode_object.state", 32),
        ("unicode_object.length", 16),
        ("unicode_object.asciiobject_size", 40),
        ("unicode_object.compactunicodeobject_size", 56),
    ],
};

/// Every carried layout.
pub const CARRIED: &[&Carried] = &[&PY311, &PY312];

/// The carried layout for `version`, if tachyon has one: 3.11 and 3.12
/// final releases and release candidates.
pub fn for_version(version: PyVersion) -> Option<&'static Carried> {
    let level_ok = version.is_final() || version.level == 0xC;
    if version.major != 3 || !level_ok {
        return None;
    }
    CARRIED.iter().copied().find(|c| c.minor == version.minor)
}

impl Carried {
    /// The layout as a table of `version`.
    pub fn table(&self, version: PyVersion) -> RawTable {
        RawTable {
            version,
            free_threaded: false,
            fields: self.fields.to_vec(),
        }
    }
}

impl Offsets {
    /// Normalise a carried 3.11/3.12 layout (see [`Carried::table`]) by the
    /// same checks and builder as a debug table: every field aligned and
    /// inside its struct.
    pub fn from_carried(pid: i32, raw: &RawTable) -> Result<Offsets> {
        super::build::offsets(pid, raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_carried_layout_normalises() {
        for c in CARRIED {
            let v = PyVersion::from_hex(0x0300_00f0 | (c.minor as u64) << 16);
            assert!(for_version(v).is_some());
            let o = Offsets::from_carried(1, &c.table(v)).unwrap();
            assert!(o.cframe_current_frame.is_some());
            assert!(o.cframe_previous.is_some() && o.tstate_root_cframe.is_some());
            assert!(o.cframe_size() <= 24);
            assert_eq!(o.frame_is_entry.is_some(), c.minor == 11);
            assert_eq!(o.gil_in_runtime, c.minor == 11);
        }
        for hex in [0x030a0df0u64, 0x030b00b1, 0x020706f0] {
            assert!(for_version(PyVersion::from_hex(hex)).is_none(), "{hex:#x}");
        }
    }
}
