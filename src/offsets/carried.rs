//! The layouts tachyon carries for CPython 3.11 and 3.12, which have no
//! `_Py_DebugOffsets` table.
//!
//! Each is a list of (field, offset) pairs for x86-64 GIL release builds,
//! named like the debug-offsets fields where the concept is the same, so it
//! becomes a [`RawTable`] and is normalised into the same [`Offsets`] as a
//! 3.13+ table: the unwinder has one code path, branching only on the few
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

use super::{FrameOwners, GilFlag, Offsets, PyVersion, RawTable, Validator};
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
        // PyCodeObject
        ("code_object.size", 192),
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
        // PyCodeObject
        ("code_object.size", 200),
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

/// Caps, as for debug tables.
const MAX_RUNTIME: u64 = 4 * 1024 * 1024;

impl Offsets {
    /// Normalise a carried 3.11/3.12 layout (see [`Carried::table`]). The
    /// same checks as for a debug table apply: every field aligned and
    /// inside its struct.
    pub fn from_carried(pid: i32, raw: &RawTable) -> Result<Offsets> {
        let v = Validator { raw, pid };
        let minor = raw.version.minor;
        let rt_size = v.size("runtime_state", 64, MAX_RUNTIME)?;
        let runtime_interpreters_head = v.field("runtime_state.interpreters_head", 8, rt_size)?;
        let runtime_finalizing = v.field("runtime_state.finalizing", 8, rt_size)?;

        let interp_size = v.size("interpreter_state", 64, super::MAX_INTERP)?;
        let inf = |name: &str, width| v.field(name, width, interp_size);
        let interp_id = inf("interpreter_state.id", 8)?;
        let interp_next = inf("interpreter_state.next", 8)?;
        let interp_threads_head = inf("interpreter_state.threads_head", 8)?;
        let tstate_size = v.size("thread_state", 64, super::MAX_TSTATE)?;
        // The embedded first thread state must fit in the interpreter.
        let interp_threads_main = inf("interpreter_state.initial_thread", 8)?;
        v.check(
            "interpreter_state.initial_thread (a whole thread state)",
            interp_threads_main,
            8,
            interp_size.saturating_sub(tstate_size - 8),
        )?;
        let gil_in_runtime = raw.get("runtime_state.gil_locked").is_some();
        let (interp_gil_locked, interp_gil_holder) = if gil_in_runtime {
            (
                v.field("runtime_state.gil_locked", 4, rt_size)?,
                v.field("runtime_state.gil_holder", 8, rt_size)?,
            )
        } else {
            (
                inf("interpreter_state.gil_runtime_state_locked", 4)?,
                inf("interpreter_state.gil_runtime_state_holder", 8)?,
            )
        };
        let (interp_ceval_gil, gil_state_locked, gil_state_holder) =
            match raw.get("interpreter_state.ceval_gil") {
                Some(_) => {
                    let gil_size = v.size("gil_state", 24, 4096)?;
                    let locked = v.field("gil_state.locked", 4, gil_size)?;
                    let holder = v.field("gil_state.holder", 8, gil_size)?;
                    // The interpreter's own GIL state holds the fields above.
                    let own = interp_gil_locked.checked_sub(locked);
                    if own.is_none() || own != interp_gil_holder.checked_sub(holder) {
                        return Err(v.err(
                            "the interpreter's GIL fields do not sit as in a GIL state".into(),
                        ));
                    }
                    (Some(inf("interpreter_state.ceval_gil", 8)?), locked, holder)
                }
                None => (None, 0, 0),
            };
        let gc = inf("interpreter_state.gc", 8)?;
        let gc_size = v.size("gc", 8, 64 * 1024)?;
        let interp_gc_collecting = gc + v.field("gc.collecting", 4, gc_size)?;
        v.check(
            "interpreter_state.gc + gc.collecting",
            interp_gc_collecting,
            4,
            interp_size,
        )?;

        let tf = |name: &str, width| v.field(name, width, tstate_size);
        let tstate_next = tf("thread_state.next", 8)?;
        let tstate_interp = tf("thread_state.interp", 8)?;
        let tstate_current_frame = tf("thread_state.cframe", 8)?;
        let cframe_current = v.field("cframe.current_frame", 8, 24)?;
        let cframe_current_frame = Some(cframe_current);
        let cframe_previous = Some(v.field("cframe.previous", 8, 24)?);
        let root_cframe = tf("thread_state.root_cframe", 8)?;
        v.check(
            "thread_state.root_cframe + cframe.current_frame",
            root_cframe + cframe_current,
            8,
            tstate_size,
        )?;
        let tstate_root_cframe = Some(root_cframe);
        let tstate_thread_id = tf("thread_state.thread_id", 8)?;
        let tstate_native_thread_id = tf("thread_state.native_thread_id", 8)?;
        let tstate_datastack_chunk = tf("thread_state.datastack_chunk", 8)?;
        let tstate_status = tf("thread_state.status", 4)?;
        let tstate_current_exception = tf("thread_state.current_exception", 8)?;
        let tstate_handled_exception = tf("thread_state.handled_exception", 8)?;

        let frame_size = v.size("interpreter_frame", 32, super::MAX_FRAME)?;
        let ff = |name: &str, width| v.field(name, width, frame_size);
        let frame_previous = ff("interpreter_frame.previous", 8)?;
        let frame_executable = ff("interpreter_frame.executable", 8)?;
        let frame_instr_ptr = ff("interpreter_frame.instr_ptr", 8)?;
        let frame_owner = ff("interpreter_frame.owner", 1)?;
        let frame_is_entry = match raw.get("interpreter_frame.is_entry") {
            Some(_) => Some(ff("interpreter_frame.is_entry", 1)?),
            None => None,
        };

        let code_size = v.size("code_object", 32, super::MAX_CODE)?;
        let cf = |name: &str, width| v.field(name, width, code_size);
        let code_filename = cf("code_object.filename", 8)?;
        let code_qualname = cf("code_object.qualname", 8)?;
        let code_linetable = cf("code_object.linetable", 8)?;
        let code_firstlineno = cf("code_object.firstlineno", 4)?;
        // 3.12 keeps a frame's size in words; 3.11 computes it from the
        // locals and the stack depth, plus the frame's own words.
        let (code_framesize, code_framesize_sum) = if minor == 12 {
            (Some(cf("code_object.framesize", 4)?), None)
        } else {
            let parts = (
                cf("code_object.nlocalsplus", 4)?,
                cf("code_object.stacksize", 4)?,
            );
            (None, Some(parts))
        };
        let tstate_datastack_top = tf("thread_state.datastack_top", 8)?;
        let code_adaptive = v.get("code_object.co_code_adaptive")?;
        if code_adaptive > code_size || code_adaptive < code_linetable + 8 {
            return Err(v.err(format!(
                "code_object.co_code_adaptive = {code_adaptive} does not fit a code object of {code_size} bytes"
            )));
        }

        let small = super::MAX_SMALL_OBJECT;
        let obj_size = v.size("pyobject", 16, small)?;
        let ob_type = v.field("pyobject.ob_type", 8, obj_size)?;
        let type_size = v.size("type_object", 32, small)?;
        let type_tp_name = v.field("type_object.tp_name", 8, type_size)?;
        let bytes_size = v.size("bytes_object", 16, small)?;
        let bytes_ob_size = v.field("bytes_object.ob_size", 8, bytes_size)?;
        let bytes_ob_sval = v.get("bytes_object.ob_sval")?;
        let uni_size = v.size("unicode_object", 16, small)?;
        let unicode_state = v.field("unicode_object.state", 4, uni_size)?;
        let unicode_length = v.field("unicode_object.length", 8, uni_size)?;
        let unicode_ascii_size = v.get("unicode_object.asciiobject_size")?;
        let unicode_compact_size = v.get("unicode_object.compactunicodeobject_size")?;
        if bytes_ob_sval >= bytes_size
            || unicode_ascii_size > unicode_compact_size
            || unicode_compact_size > uni_size
        {
            return Err(v.err("object header sizes are inconsistent".into()));
        }

        let objects = super::objects::ObjectOffsets::validate(&v, minor, interp_size)?;
        let owners = FrameOwners {
            thread: 0,
            generator: 1,
            frame_object: 2,
            // 3.12: shim frames owned by the C stack open each eval-loop
            // invocation; 3.11 marks that invocation's first frame instead.
            entry: [if minor == 12 { Some(3) } else { None }, None],
        };
        let mut interp_read_size = [interp_id, interp_next, interp_threads_head]
            .into_iter()
            .map(|o| o + 8)
            .chain([interp_gc_collecting + 4])
            .max()
            .unwrap_or(0);
        if !gil_in_runtime {
            interp_read_size = interp_read_size
                .max(interp_gil_locked + 4)
                .max(interp_gil_holder + 8);
        }
        if let Some(g) = interp_ceval_gil {
            interp_read_size = interp_read_size.max(g + 8);
        }

        Ok(Offsets {
            version: raw.version,
            runtime_interpreters_head,
            runtime_finalizing,
            interp_size,
            interp_id,
            interp_next,
            interp_threads_head,
            interp_threads_main,
            threads_main_embedded: true,
            interp_gil_locked,
            interp_gil_holder,
            gil_in_runtime,
            interp_ceval_gil,
            gil_state_locked,
            gil_state_holder,
            interp_code_object_generation: None,
            interp_gc_collecting,
            interp_gc_frame: None,
            interp_read_size,
            tstate_size,
            tstate_next,
            tstate_interp,
            tstate_current_frame,
            cframe_current_frame,
            cframe_previous,
            tstate_root_cframe,
            tstate_base_frame: None,
            tstate_thread_id,
            tstate_native_thread_id,
            tstate_datastack_chunk,
            tstate_datastack_top: Some(tstate_datastack_top),
            tstate_status,
            holds_gil: GilFlag::Holder,
            gil_requested: None,
            tstate_current_exception,
            tstate_handled_exception,
            frame_size,
            frame_previous,
            frame_executable,
            frame_instr_ptr,
            frame_owner,
            owners,
            frame_is_entry,
            instr_ptr_is_prev: true,
            code_size,
            code_framesize,
            code_framesize_sum,
            code_filename,
            code_qualname,
            code_linetable,
            code_firstlineno,
            code_adaptive,
            ob_type,
            type_tp_name,
            bytes_ob_size,
            bytes_ob_sval,
            unicode_state,
            unicode_length,
            unicode_ascii_size,
            unicode_compact_size,
            tag_mask: !0,
            objects,
        })
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
