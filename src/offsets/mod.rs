//! The target's `_Py_DebugOffsets` table: decoded per layout, normalised,
//! validated.
//!
//! The table is the interpreter's own description of where its fields live,
//! so one tachyon binary reads every build of 3.13, 3.14 and 3.15 (release or
//! debug) without per-release constants. It is still untrusted input: every
//! offset the unwinder dereferences is checked here, once, for alignment and
//! for lying inside the struct size the same table reports. The handful of
//! facts older tables lack (3.13's main thread, the GIL bit before 3.15, the
//! exception slots before 3.15) come from per-version constants that are
//! cross-checked against fields the table does give. 3.11 and 3.12 have
//! no table: [`carried`] holds their layouts, normalised into the same
//! [`Offsets`].

pub mod asyncio;
pub mod carried;
pub mod layout;
pub mod objects;

use std::fmt;

use crate::error::{Error, Result};

/// The 8-byte cookie at the start of the table.
pub const COOKIE: &[u8; 8] = b"xdebugpy";

/// How far a generator's (or coroutine's) `gi_exc_state.exc_value` lies
/// before its embedded frame `gi_iframe`, on every version 3.11-3.15: the
/// 16-byte `_PyErr_StackItem`, `gi_origin_or_finalizer` and the word of
/// flag bytes come between. Measured on 3.11.2, 3.11.7, 3.12.1, 3.13.0 and
/// the sid 3.13/3.14/3.15 release and debug builds (exc_state at 48/40,
/// frame at 80/72). While the generator runs, its item is on the thread's
/// `exc_info` chain, and `exc_value` is the exception its handlers (and
/// those of the plain functions it calls) are handling.
pub const GEN_EXC_VALUE_BEFORE_FRAME: u64 = 32;

/// A `PY_VERSION_HEX`, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PyVersion {
    pub major: u8,
    pub minor: u8,
    pub micro: u8,
    /// 0xA alpha, 0xB beta, 0xC release candidate, 0xF final.
    pub level: u8,
    pub serial: u8,
}

impl PyVersion {
    pub fn from_hex(v: u64) -> Self {
        PyVersion {
            major: (v >> 24) as u8,
            minor: (v >> 16) as u8,
            micro: (v >> 8) as u8,
            level: ((v >> 4) & 0xF) as u8,
            serial: (v & 0xF) as u8,
        }
    }

    pub fn is_final(&self) -> bool {
        self.level == 0xF
    }
}

impl fmt::Display for PyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)?;
        match self.level {
            0xA => write!(f, "a{}", self.serial),
            0xB => write!(f, "b{}", self.serial),
            0xC => write!(f, "rc{}", self.serial),
            0xF => Ok(()),
            l => write!(f, " (release level {l:#x})"),
        }
    }
}

/// Where the "holds the GIL" flag of a thread lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GilFlag {
    /// A bit of the 32-bit `_status` word (3.13).
    StatusBit { offset: u64, bit: u32 },
    /// A whole `int` (3.14, 3.15).
    Int { offset: u64 },
    /// No flag in the thread state (3.11, 3.12): a thread holds the GIL
    /// when it is the GIL state's holder and the GIL is locked.
    Holder,
}

/// `enum _frameowner` values that matter to a walk, per version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameOwners {
    pub thread: u8,
    pub generator: u8,
    pub frame_object: u8,
    /// Entry frames of an eval-loop invocation (CSTACK in 3.13/3.14,
    /// INTERPRETER in 3.14/3.15): they hold no Python code.
    pub entry: [Option<u8>; 2],
}

impl FrameOwners {
    pub fn is_entry(&self, owner: u8) -> bool {
        self.entry.contains(&Some(owner))
    }
    pub fn is_code(&self, owner: u8) -> bool {
        owner == self.thread || owner == self.generator || owner == self.frame_object
    }
}

/// Everything the unwinder needs, normalised over versions. All offsets are
/// relative to the start of their struct and have been validated.
#[derive(Debug, Clone)]
pub struct Offsets {
    pub version: PyVersion,

    pub runtime_interpreters_head: u64,
    /// `_PyRuntime._finalizing`: the thread state finalizing the runtime
    /// (interpreter shutdown), NULL while the program runs.
    pub runtime_finalizing: u64,

    pub interp_size: u64,
    pub interp_id: u64,
    pub interp_next: u64,
    pub interp_threads_head: u64,
    pub interp_threads_main: u64,
    /// 3.11, 3.12: `interp_threads_main` is not a pointer field but the
    /// offset of the main interpreter's embedded first thread state
    /// (`_initial_thread`), which is its main thread's.
    pub threads_main_embedded: bool,
    pub interp_gil_locked: u64,
    pub interp_gil_holder: u64,
    /// 3.11: the GIL lives in `_PyRuntime`, not in the interpreter, and
    /// `interp_gil_locked`/`interp_gil_holder` are offsets into `_PyRuntime`.
    pub gil_in_runtime: bool,
    /// 3.12: `interp->ceval.gil`, the GIL the interpreter uses; when it is
    /// not its own (a subinterpreter sharing the main GIL), its locked flag
    /// and holder are read there, at these offsets of the GIL state.
    pub interp_ceval_gil: Option<u64>,
    pub gil_state_locked: u64,
    pub gil_state_holder: u64,
    pub interp_code_object_generation: Option<u64>,
    /// `interp + gc + gc.collecting` (an int).
    pub interp_gc_collecting: u64,
    /// `interp + gc + gc.frame` (3.15: the frame that started the collection).
    pub interp_gc_frame: Option<u64>,
    /// How much of `PyInterpreterState` one sample reads: the end of the last
    /// field used, not the whole (200+ KiB) struct.
    pub interp_read_size: u64,

    pub tstate_size: u64,
    pub tstate_next: u64,
    pub tstate_interp: u64,
    pub tstate_current_frame: u64,
    /// 3.11, 3.12: `tstate_current_frame` is the offset of `tstate->cframe`
    /// (a `_PyCFrame` on the thread's C stack), and the current frame is
    /// this far into that struct.
    pub cframe_current_frame: Option<u64>,
    /// 3.11, 3.12: the outer eval loop's `_PyCFrame` (`cframe->previous`).
    pub cframe_previous: Option<u64>,
    /// 3.11, 3.12: the thread's bottom `_PyCFrame`, inside its state; its
    /// `current_frame` is NULL.
    pub tstate_root_cframe: Option<u64>,
    pub tstate_base_frame: Option<u64>,
    pub tstate_thread_id: u64,
    pub tstate_native_thread_id: u64,
    pub tstate_datastack_chunk: u64,
    /// `tstate.datastack_top`: where the newest data-stack frame ends
    /// (3.13+: the word after `datastack_chunk`; not carried for 3.11/3.12).
    pub tstate_datastack_top: Option<u64>,
    pub tstate_status: u64,
    pub holds_gil: GilFlag,
    pub gil_requested: Option<u64>,
    pub tstate_current_exception: u64,
    /// `tstate.exc_state.exc_value`: the exception being handled.
    pub tstate_handled_exception: u64,

    pub frame_size: u64,
    pub frame_previous: u64,
    pub frame_executable: u64,
    pub frame_instr_ptr: u64,
    pub frame_owner: u64,
    pub owners: FrameOwners,
    /// 3.11: the `is_entry` byte of a frame, set on the first frame of each
    /// eval-loop invocation (a frame with code, unlike later entry frames).
    pub frame_is_entry: Option<u64>,
    /// 3.11, 3.12: `frame_instr_ptr` is `prev_instr`; a frame that has not
    /// started points one code unit before its bytecode.
    pub instr_ptr_is_prev: bool,

    pub code_size: u64,
    /// `co_framesize` (int32, in words): a frame of the code takes that
    /// much of the data stack. 3.13+: 8 bytes after `co_firstlineno`
    /// (`co_nlocalsplus` between); not carried for 3.11/3.12.
    pub code_framesize: Option<u64>,
    /// 3.11, which keeps no frame size: (`co_nlocalsplus`, `co_stacksize`),
    /// whose sum and the frame's own words (`frame_size` less its one
    /// `localsplus` slot) are the size.
    pub code_framesize_sum: Option<(u64, u64)>,
    pub code_filename: u64,
    pub code_qualname: u64,
    pub code_linetable: u64,
    pub code_firstlineno: u64,
    pub code_adaptive: u64,

    pub ob_type: u64,
    pub type_tp_name: u64,
    pub bytes_ob_size: u64,
    pub bytes_ob_sval: u64,

    pub unicode_state: u64,
    pub unicode_length: u64,
    pub unicode_ascii_size: u64,
    pub unicode_compact_size: u64,

    /// Mask that clears `_PyStackRef` tag bits (3.14+) off a pointer.
    pub tag_mask: u64,

    /// What thread names need: dicts, ints, instance attributes.
    pub objects: objects::ObjectOffsets,
}

/// The raw table: field name to value, in the version's layout.
#[derive(Debug, Clone)]
pub struct RawTable {
    pub version: PyVersion,
    pub free_threaded: bool,
    fields: Vec<(&'static str, u64)>,
}

impl RawTable {
    /// Decode the bytes of a table. `bytes` must start with the cookie.
    pub fn decode(pid: i32, bytes: &[u8]) -> Result<RawTable> {
        if bytes.len() < 24 || &bytes[..8] != COOKIE {
            return Err(Error::NotPython {
                pid,
                why: "no debug offsets cookie".into(),
            });
        }
        let word = |i: usize| -> u64 {
            u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]))
        };
        let version = PyVersion::from_hex(word(1));
        let free_threaded = word(2) != 0;
        let supported_level = version.is_final() || version.level == 0xC;
        let names = match layout::layout(version.minor) {
            Some(l) if version.major == 3 && supported_level => l,
            _ => {
                return Err(Error::UnsupportedVersion {
                    pid,
                    found: version.to_string(),
                });
            }
        };
        if free_threaded {
            return Err(Error::FreeThreaded {
                pid,
                version: version.to_string(),
            });
        }
        if bytes.len() < names.len() * 8 {
            return Err(Error::InvalidOffsets {
                pid,
                version: version.to_string(),
                what: format!(
                    "table is {} bytes, expected {}",
                    bytes.len(),
                    names.len() * 8
                ),
            });
        }
        let fields = names
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, n)| (*n, word(i)))
            .collect();
        Ok(RawTable {
            version,
            free_threaded,
            fields,
        })
    }

    pub fn get(&self, name: &str) -> Option<u64> {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    /// All fields, in layout order (for `--debug-offsets` style output and tests).
    pub fn fields(&self) -> &[(&'static str, u64)] {
        &self.fields
    }

    /// Overwrite one field (tests mutate real tables to exercise the validator).
    pub fn set(&mut self, name: &str, value: u64) -> bool {
        match self.fields.iter_mut().find(|(n, _)| *n == name) {
            Some(f) => {
                f.1 = value;
                true
            }
            None => false,
        }
    }
}

/// Caps on struct sizes: far above any real build, far below anything that
/// would let a corrupt table make us allocate or read wildly.
const MAX_TSTATE: u64 = 64 * 1024;
const MAX_INTERP: u64 = 4 * 1024 * 1024;
const MAX_FRAME: u64 = 512;
const MAX_CODE: u64 = 4096;
const MAX_SMALL_OBJECT: u64 = 1024;

struct Validator<'a> {
    raw: &'a RawTable,
    pid: i32,
}

impl Validator<'_> {
    fn err(&self, what: String) -> Error {
        Error::InvalidOffsets {
            pid: self.pid,
            version: self.raw.version.to_string(),
            what,
        }
    }

    fn get(&self, name: &str) -> Result<u64> {
        self.raw
            .get(name)
            .ok_or_else(|| self.err(format!("{name} is missing")))
    }

    /// A struct size: non-zero and under its cap.
    fn size(&self, section: &str, min: u64, max: u64) -> Result<u64> {
        let v = self.get(&format!("{section}.size"))?;
        if v < min || v > max {
            return Err(self.err(format!(
                "{section}.size is {v}, expected between {min} and {max}"
            )));
        }
        Ok(v)
    }

    /// A field of `width` bytes: aligned and inside `size`.
    fn field(&self, name: &str, width: u64, size: u64) -> Result<u64> {
        let v = self.get(name)?;
        self.check(name, v, width, size)?;
        Ok(v)
    }

    fn check(&self, name: &str, v: u64, width: u64, size: u64) -> Result<()> {
        if !v.is_multiple_of(width) {
            return Err(self.err(format!("{name} = {v} is not aligned to {width} bytes")));
        }
        if v.checked_add(width).is_none_or(|end| end > size) {
            return Err(self.err(format!(
                "{name} = {v} lies outside its struct of {size} bytes"
            )));
        }
        Ok(())
    }
}

impl Offsets {
    /// 3.11, 3.12: how many bytes of a `_PyCFrame` a sample copies, from
    /// its start through its current-frame and previous pointers (0: no
    /// `_PyCFrame` in this version).
    pub fn cframe_size(&self) -> u64 {
        match (self.cframe_current_frame, self.cframe_previous) {
            (Some(c), Some(p)) => c.max(p) + 8,
            (Some(c), None) => c + 8,
            _ => 0,
        }
    }

    /// Normalise and validate a decoded table.
    pub fn from_raw(pid: i32, raw: &RawTable) -> Result<Offsets> {
        let v = Validator { raw, pid };
        let minor = raw.version.minor;

        let rt_size = v.size("runtime_state", 8, u64::MAX / 2)?;
        let runtime_interpreters_head = v.field("runtime_state.interpreters_head", 8, rt_size)?;
        let runtime_finalizing = v.field("runtime_state.finalizing", 8, rt_size)?;

        let interp_size = v.size("interpreter_state", 64, MAX_INTERP)?;
        let interp_id = v.field("interpreter_state.id", 8, interp_size)?;
        let interp_next = v.field("interpreter_state.next", 8, interp_size)?;
        let interp_threads_head = v.field("interpreter_state.threads_head", 8, interp_size)?;
        let interp_threads_main = match raw.get("interpreter_state.threads_main") {
            Some(_) => v.field("interpreter_state.threads_main", 8, interp_size)?,
            // 3.13: `struct pythreads { next_unique_id; head; main; ... }`.
            None => {
                let m = interp_threads_head + 8;
                v.check(
                    "interpreter_state.threads_main (3.13: threads_head + 8)",
                    m,
                    8,
                    interp_size,
                )?;
                m
            }
        };
        let interp_gil_locked =
            v.field("interpreter_state.gil_runtime_state_locked", 4, interp_size)?;
        let interp_gil_holder =
            v.field("interpreter_state.gil_runtime_state_holder", 8, interp_size)?;
        let interp_code_object_generation = match raw
            .get("interpreter_state.code_object_generation")
        {
            Some(_) => Some(v.field("interpreter_state.code_object_generation", 8, interp_size)?),
            None => None,
        };
        let gc = v.field("interpreter_state.gc", 8, interp_size)?;
        let gc_size = v.size("gc", 8, 64 * 1024)?;
        let collecting = v.field("gc.collecting", 4, gc_size)?;
        let interp_gc_collecting = gc + collecting;
        v.check(
            "interpreter_state.gc + gc.collecting",
            interp_gc_collecting,
            4,
            interp_size,
        )?;
        let interp_gc_frame = match raw.get("gc.frame") {
            Some(_) => {
                let f = gc + v.field("gc.frame", 8, gc_size)?;
                v.check("interpreter_state.gc + gc.frame", f, 8, interp_size)?;
                Some(f)
            }
            None => None,
        };

        let tstate_size = v.size("thread_state", 64, MAX_TSTATE)?;
        let tf = |name: &str, width| v.field(name, width, tstate_size);
        let tstate_next = tf("thread_state.next", 8)?;
        let tstate_interp = tf("thread_state.interp", 8)?;
        let tstate_current_frame = tf("thread_state.current_frame", 8)?;
        let tstate_base_frame = match raw.get("thread_state.base_frame") {
            Some(_) => Some(tf("thread_state.base_frame", 8)?),
            None => None,
        };
        let tstate_thread_id = tf("thread_state.thread_id", 8)?;
        let tstate_native_thread_id = tf("thread_state.native_thread_id", 8)?;
        let tstate_datastack_chunk = tf("thread_state.datastack_chunk", 8)?;
        let tstate_status = tf("thread_state.status", 4)?;
        let (holds_gil, gil_requested, tstate_current_exception, tstate_handled_exception) =
            if minor >= 15 {
                let exc_state = tf("thread_state.exc_state", 8)?;
                let exc_value = v.get("err_stackitem.exc_value")?;
                let handled = exc_state.saturating_add(exc_value);
                v.check(
                    "thread_state.exc_state + err_stackitem.exc_value",
                    handled,
                    8,
                    tstate_size,
                )?;
                (
                    GilFlag::Int {
                        offset: tf("thread_state.holds_gil", 4)?,
                    },
                    Some(tf("thread_state.gil_requested", 4)?),
                    tf("thread_state.current_exception", 8)?,
                    handled,
                )
            } else {
                // 3.13/3.14 `struct _ts`: `current_exception` sits 40 bytes
                // after `current_frame` (four profiler/tracer pointers in
                // between) and 40 before `thread_id`; `exc_state` follows
                // the three data-stack pointers starting at `datastack_chunk`.
                let cur_exc = tstate_current_frame + 40;
                if tstate_thread_id.checked_sub(40) != Some(cur_exc) {
                    return Err(v.err(format!(
                        "thread_state.current_frame ({tstate_current_frame}) and thread_id ({tstate_thread_id}) do not frame current_exception as in CPython 3.{minor}"
                    )));
                }
                let handled = tstate_datastack_chunk + 24;
                v.check("thread_state.current_exception", cur_exc, 8, tstate_size)?;
                v.check("thread_state.exc_state", handled, 8, tstate_size)?;
                let gil = if minor == 13 {
                    GilFlag::StatusBit {
                        offset: tstate_status,
                        bit: 5,
                    }
                } else {
                    v.check(
                        "thread_state.holds_gil (status + 4)",
                        tstate_status + 4,
                        4,
                        tstate_size,
                    )?;
                    GilFlag::Int {
                        offset: tstate_status + 4,
                    }
                };
                (gil, None, cur_exc, handled)
            };

        let frame_size = v.size("interpreter_frame", 32, MAX_FRAME)?;
        let ff = |name: &str, width| v.field(name, width, frame_size);
        let frame_previous = ff("interpreter_frame.previous", 8)?;
        let frame_executable = ff("interpreter_frame.executable", 8)?;
        let frame_instr_ptr = ff("interpreter_frame.instr_ptr", 8)?;
        let frame_owner = ff("interpreter_frame.owner", 1)?;

        let code_size = v.size("code_object", 32, MAX_CODE)?;
        let cf = |name: &str, width| v.field(name, width, code_size);
        let code_filename = cf("code_object.filename", 8)?;
        let code_qualname = cf("code_object.qualname", 8)?;
        let code_linetable = cf("code_object.linetable", 8)?;
        let code_firstlineno = cf("code_object.firstlineno", 4)?;
        let code_adaptive = v.get("code_object.co_code_adaptive")?;
        let code_framesize = code_firstlineno + 8;
        v.check(
            "code_object.co_framesize (firstlineno + 8)",
            code_framesize,
            4,
            code_size,
        )?;
        let tstate_datastack_top = tstate_datastack_chunk + 8;
        v.check(
            "thread_state.datastack_top (datastack_chunk + 8)",
            tstate_datastack_top,
            8,
            tstate_size,
        )?;
        // The bytecode (the struct's last, flexible member) starts at the
        // end of the header: after every field read above, at most at the
        // size.
        let header_end = (code_filename + 8)
            .max(code_qualname + 8)
            .max(code_linetable + 8)
            .max(code_framesize + 4);
        if code_adaptive > code_size
            || code_adaptive < header_end
            || !code_adaptive.is_multiple_of(2)
        {
            return Err(v.err(format!(
                "code_object.co_code_adaptive = {code_adaptive} does not fit a code object of {code_size} bytes after its header fields"
            )));
        }

        let obj_size = v.size("pyobject", 16, MAX_SMALL_OBJECT)?;
        let ob_type = v.field("pyobject.ob_type", 8, obj_size)?;
        let type_size = v.size("type_object", 32, MAX_SMALL_OBJECT)?;
        let type_tp_name = v.field("type_object.tp_name", 8, type_size)?;
        let bytes_size = v.size("bytes_object", 16, MAX_SMALL_OBJECT)?;
        let bytes_ob_size = v.field("bytes_object.ob_size", 8, bytes_size)?;
        let bytes_ob_sval = v.get("bytes_object.ob_sval")?;
        // The data follows the size, inside the struct (it ends with ob_sval[1]).
        if bytes_ob_sval >= bytes_size || bytes_ob_sval < bytes_ob_size + 8 {
            return Err(v.err(format!(
                "bytes_object.ob_sval = {bytes_ob_sval} is not between bytes_object.ob_size + 8 and its struct's end ({bytes_size})"
            )));
        }
        let uni_size = v.size("unicode_object", 16, MAX_SMALL_OBJECT)?;
        let unicode_state = v.field("unicode_object.state", 4, uni_size)?;
        let unicode_length = v.field("unicode_object.length", 8, uni_size)?;
        let unicode_ascii_size = v.get("unicode_object.asciiobject_size")?;
        // Before 3.15 the table lacks sizeof(PyCompactUnicodeObject); it is
        // the ASCII header plus utf8_length and utf8 (16 bytes) on every
        // 64-bit build.
        let unicode_compact_size = raw
            .get("unicode_object.compactunicodeobject_size")
            .unwrap_or(unicode_ascii_size.saturating_add(16));
        // Both are sizeofs of structs holding pointers: 8-aligned. The
        // characters follow them, inside the unicode object.
        if unicode_ascii_size < (unicode_state + 4).max(unicode_length + 8)
            || unicode_ascii_size > uni_size
            || !unicode_ascii_size.is_multiple_of(8)
        {
            return Err(v.err(format!(
                "unicode_object.asciiobject_size = {unicode_ascii_size} does not fit after the state and length fields of a unicode object of {uni_size} bytes"
            )));
        }
        if unicode_compact_size < unicode_ascii_size
            || unicode_compact_size > uni_size
            || !unicode_compact_size.is_multiple_of(8)
        {
            return Err(v.err(format!(
                "unicode_object.compactunicodeobject_size = {unicode_compact_size} does not fit between unicode_object.asciiobject_size ({unicode_ascii_size}) and the unicode object's {uni_size} bytes"
            )));
        }

        let objects = objects::ObjectOffsets::validate(&v, minor, interp_size)?;

        let owners = match minor {
            13 => FrameOwners {
                thread: 0,
                generator: 1,
                frame_object: 2,
                entry: [Some(3), None],
            },
            14 => FrameOwners {
                thread: 0,
                generator: 1,
                frame_object: 2,
                entry: [Some(3), Some(4)],
            },
            _ => FrameOwners {
                thread: 0,
                generator: 1,
                frame_object: 2,
                entry: [Some(3), None],
            },
        };

        let interp_read_size = [
            interp_id + 8,
            interp_next + 8,
            interp_threads_head + 8,
            interp_threads_main + 8,
            interp_gil_locked + 4,
            interp_gil_holder + 8,
            interp_code_object_generation.map_or(0, |o| o + 8),
            interp_gc_collecting + 4,
            interp_gc_frame.map_or(0, |o| o + 8),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);

        Ok(Offsets {
            version: raw.version,
            runtime_interpreters_head,
            runtime_finalizing,
            interp_size,
            interp_id,
            interp_next,
            interp_threads_head,
            interp_threads_main,
            threads_main_embedded: false,
            interp_gil_locked,
            interp_gil_holder,
            gil_in_runtime: false,
            interp_ceval_gil: None,
            gil_state_locked: 0,
            gil_state_holder: 0,
            interp_code_object_generation,
            interp_gc_collecting,
            interp_gc_frame,
            interp_read_size,
            tstate_size,
            tstate_next,
            tstate_interp,
            tstate_current_frame,
            cframe_current_frame: None,
            cframe_previous: None,
            tstate_root_cframe: None,
            tstate_base_frame,
            tstate_thread_id,
            tstate_native_thread_id,
            tstate_datastack_chunk,
            tstate_status,
            holds_gil,
            gil_requested,
            tstate_current_exception,
            tstate_handled_exception,
            frame_size,
            frame_previous,
            frame_executable,
            frame_instr_ptr,
            frame_owner,
            owners,
            frame_is_entry: None,
            instr_ptr_is_prev: false,
            code_size,
            code_framesize: Some(code_framesize),
            code_framesize_sum: None,
            tstate_datastack_top: Some(tstate_datastack_top),
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
            tag_mask: if minor >= 14 { !3 } else { !0 },
            objects,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_formatting() {
        assert_eq!(PyVersion::from_hex(0x030f02f0).to_string(), "3.15.2");
        assert_eq!(PyVersion::from_hex(0x030f00c3).to_string(), "3.15.0rc3");
        assert_eq!(PyVersion::from_hex(0x031000a1).to_string(), "3.16.0a1");
        assert_eq!(PyVersion::from_hex(0x030e0af0).to_string(), "3.14.10");
    }

    fn table(version: u64, free_threaded: u64) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        b[..8].copy_from_slice(COOKIE);
        b[8..16].copy_from_slice(&version.to_le_bytes());
        b[16..24].copy_from_slice(&free_threaded.to_le_bytes());
        b
    }

    #[test]
    fn unknown_and_prerelease_versions_are_refused_by_name() {
        for (hex, name) in [
            (0x031000f0u64, "3.16.0"),
            (0x030f00b1, "3.15.0b1"),
            (0x030c01f0, "3.12.1"),
        ] {
            match RawTable::decode(1, &table(hex, 0)) {
                Err(Error::UnsupportedVersion { found, .. }) => assert_eq!(found, name),
                other => panic!("{hex:#x}: {other:?}"),
            }
        }
        assert!(matches!(
            RawTable::decode(1, &table(0x030e0af0, 1)),
            Err(Error::FreeThreaded { .. })
        ));
        let mut bad = table(0x030e0af0, 0);
        bad[0] = b'y';
        assert!(matches!(
            RawTable::decode(1, &bad),
            Err(Error::NotPython { .. })
        ));
    }
}
