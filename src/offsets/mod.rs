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
//! [`Offsets`] by the same code: [`spec`] lists what is read of each struct
//! and checks it, [`build`] derives the per-version facts and builds the
//! one [`Offsets`].

pub mod asyncio;
mod build;
pub mod carried;
pub mod layout;
pub mod objects;
mod spec;

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

/// 3.12: what proves which frame resumed a generator whose frame is
/// already the thread's current one but not yet linked to that frame
/// (see `unwind::resumer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeOffsets {
    /// `PyGenObject.gi_iframe`: a generator's frame lies this far into
    /// the object.
    pub gen_iframe: u64,
    /// How far before its frame a generator's `gi_frame_state` (an int8)
    /// lies: inside the bytes read before every frame outside the data
    /// stack ([`GEN_EXC_VALUE_BEFORE_FRAME`]).
    pub state_before_frame: u64,
    /// `gi_frame_state` while the generator runs (`FRAME_EXECUTING`).
    pub executing: i8,
    /// `_PyInterpreterFrame.stacktop` (an int) and `localsplus`: the value
    /// stack's top is slot `stacktop - 1` of `localsplus`.
    pub frame_stacktop: u64,
    pub frame_localsplus: u64,
    /// `PyCodeObject`: `ob_size` (code units), `co_stacksize` and
    /// `co_nlocalsplus` (ints).
    pub code_units: u64,
    pub code_stacksize: u64,
    pub code_nlocalsplus: u64,
}

/// Everything the unwinder needs, normalised over versions. All offsets are
/// relative to the start of their struct and have been validated.
#[derive(Debug, Clone)]
pub struct Offsets {
    pub version: PyVersion,
    /// A free-threaded build (PEP 703): no GIL unless it was enabled again
    /// at run time (see `interp_gil_enabled`).
    pub free_threaded: bool,
    /// Free-threaded builds: the interpreter's `gil.enabled` flag (an
    /// `int`), set when the GIL was turned on at run time (`PYTHON_GIL=1`,
    /// an extension that needs it).
    pub interp_gil_enabled: Option<u64>,

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
    /// Free-threaded 3.14+: `tlbc_indices.tlbc_generation` (a `uint32_t`),
    /// bumped when a thread takes or gives back its bytecode copy index.
    pub interp_tlbc_generation: Option<u64>,
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
    /// 3.15: the frame-cache anchor, `(last_profiled_frame,
    /// last_profiled_frame_seq)`: a frame the profiler marked, moved to
    /// its caller (and the count bumped) when the interpreter pops it (see
    /// `unwind::anchor`).
    pub tstate_last_profiled: Option<(u64, u64)>,
    /// 3.12+: `(py_recursion_remaining, py_recursion_limit)`, two ints.
    /// The interpreter counts every Python frame it pushes on a thread's
    /// stack against the limit, so limit - remaining is how many frames
    /// the thread's chain holds (see `unwind::depth`).
    pub tstate_py_depth: Option<(u64, u64)>,
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
    /// Free-threaded 3.14+: the frame's `tlbc_index` (an `int32_t`), which
    /// copy of its code's bytecode it runs: its `instr_ptr` points into
    /// `co_tlbc->entries[tlbc_index]` (entry 0 is `co_code_adaptive`).
    pub frame_tlbc_index: Option<u64>,

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
    /// Free-threaded 3.14+: `co_tlbc`, the code's `_PyCodeArray` of
    /// bytecode copies (`Py_ssize_t size; char *entries[size]`).
    pub code_tlbc: Option<u64>,
    /// 3.12: finding the resumer of a generator whose frame is current
    /// before it is linked (see [`ResumeOffsets`]).
    pub resume: Option<ResumeOffsets>,

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
    /// What `dump --locals` reads.
    pub values: objects::ValueOffsets,
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

    /// Normalise and validate a decoded debug table (3.13+): every field
    /// listed in [`spec`] is checked, then [`build`] derives the rest.
    pub fn from_raw(pid: i32, raw: &RawTable) -> Result<Offsets> {
        build::offsets(pid, raw)
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
        for hex in [0x030d0ff0, 0x030e0af0, 0x030f00c1] {
            let ft = RawTable::decode(1, &table(hex, 1)).expect("free-threaded tables are read");
            assert!(ft.free_threaded);
        }
        let mut bad = table(0x030e0af0, 0);
        bad[0] = b'y';
        assert!(matches!(
            RawTable::decode(1, &bad),
            Err(Error::NotPython { .. })
        ));
    }
}
