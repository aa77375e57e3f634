//! Builds the normalised [`Offsets`] from a checked table: one builder for
//! every version, debug table or carried layout.
//!
//! [`spec::check`] has bounded every field the lists name. What is left is
//! per version: [`Quirks::of`] says which facts a version's table lacks and
//! where they come from (a neighbouring field plus a constant of that
//! version's C struct, or a carried field), and each step below derives one
//! of those facts and checks it like a field of its own, naming it.

use super::objects::{ObjectOffsets, ValueOffsets};
use super::spec::{self, Checked};
use super::{FrameOwners, GEN_EXC_VALUE_BEFORE_FRAME, GilFlag, Offsets, RawTable, ResumeOffsets};
use crate::error::Result;

/// What differs between versions beyond which fields their table has.
struct Quirks {
    minor: u8,
    /// 3.11, 3.12: a carried layout. The current frame is behind the
    /// thread's `_PyCFrame`, the main thread state is embedded in the
    /// interpreter, `instr_ptr` is `prev_instr` and no thread state flags
    /// the GIL.
    carried: bool,
    owners: FrameOwners,
    tag_mask: u64,
    /// Free-threaded 3.14+: each thread may run its own copy of a code
    /// object's bytecode (`co_tlbc`, chosen by the frame's `tlbc_index`).
    per_thread_bytecode: bool,
}

impl Quirks {
    fn of(minor: u8, free_threaded: bool) -> Quirks {
        // Entry frames of an eval-loop invocation: CSTACK (3) in 3.12 and
        // 3.13, also INTERPRETER (4) in 3.14, INTERPRETER (3) in 3.15.
        // 3.11 marks that invocation's first frame instead (`is_entry`).
        let entry = match minor {
            11 => [None, None],
            14 => [Some(3), Some(4)],
            _ => [Some(3), None],
        };
        Quirks {
            minor,
            carried: minor <= 12,
            owners: FrameOwners {
                thread: 0,
                generator: 1,
                frame_object: 2,
                entry,
            },
            // `_PyStackRef` tag bits (`Py_TAG_BITS`, 3.14+): two in a GIL
            // build; one in a free-threaded 3.14 (`Py_TAG_DEFERRED`); two
            // in every 3.15.
            tag_mask: match minor {
                ..=13 => !0,
                14 if free_threaded => !1,
                _ => !3,
            },
            per_thread_bytecode: free_threaded && minor >= 14,
        }
    }
}

/// Check `raw` against the lists and build its [`Offsets`].
pub(super) fn offsets(pid: i32, raw: &RawTable) -> Result<Offsets> {
    let c = spec::check(pid, raw)?;
    let q = Quirks::of(c.minor(), raw.free_threaded);
    let threads_main = threads_main(&c, &q)?;
    let code_generation = c.get_if(q.minor >= 14, "interpreter_state.code_object_generation")?;
    let gil = gil(&c, &q)?;
    let (gc_collecting, gc_frame) = gc(&c)?;
    let thread = thread(&c, &q)?;
    let framesize = frame_size(&c)?;
    let (unicode_ascii_size, unicode_compact_size) = unicode_headers(&c)?;
    let tlbc = per_thread_bytecode(&c, &q)?;
    let g = |name: &str| c.get(name);
    let mut o = Offsets {
        version: raw.version,
        free_threaded: raw.free_threaded,
        interp_gil_enabled: gil_enabled(&c, raw.free_threaded)?,
        runtime_interpreters_head: g("runtime_state.interpreters_head")?,
        runtime_finalizing: g("runtime_state.finalizing")?,
        interp_size: g("interpreter_state.size")?,
        interp_id: g("interpreter_state.id")?,
        interp_next: g("interpreter_state.next")?,
        interp_threads_head: g("interpreter_state.threads_head")?,
        interp_threads_main: threads_main,
        threads_main_embedded: q.carried,
        interp_gil_locked: gil.locked,
        interp_gil_holder: gil.holder,
        gil_in_runtime: gil.in_runtime,
        interp_ceval_gil: gil.ceval,
        gil_state_locked: gil.state_locked,
        gil_state_holder: gil.state_holder,
        interp_code_object_generation: code_generation,
        interp_tlbc_generation: tlbc.map(|t| t.generation),
        interp_gc_collecting: gc_collecting,
        interp_gc_frame: gc_frame,
        interp_read_size: 0,
        tstate_size: g("thread_state.size")?,
        tstate_next: g("thread_state.next")?,
        tstate_interp: g("thread_state.interp")?,
        tstate_current_frame: thread.current_frame,
        cframe_current_frame: thread.cframe_current_frame,
        cframe_previous: thread.cframe_previous,
        tstate_root_cframe: thread.root_cframe,
        tstate_base_frame: c.get_if(q.minor >= 15, "thread_state.base_frame")?,
        tstate_last_profiled: profiled_mark(&c, &q)?,
        tstate_py_depth: py_depth(&c, &q)?,
        tstate_thread_id: g("thread_state.thread_id")?,
        tstate_native_thread_id: g("thread_state.native_thread_id")?,
        tstate_datastack_chunk: g("thread_state.datastack_chunk")?,
        tstate_datastack_top: Some(thread.datastack_top),
        tstate_status: g("thread_state.status")?,
        holds_gil: thread.holds_gil,
        gil_requested: thread.gil_requested,
        tstate_current_exception: thread.current_exception,
        tstate_handled_exception: thread.handled_exception,
        frame_size: g("interpreter_frame.size")?,
        frame_previous: g("interpreter_frame.previous")?,
        frame_executable: g("interpreter_frame.executable")?,
        frame_instr_ptr: g("interpreter_frame.instr_ptr")?,
        frame_owner: g("interpreter_frame.owner")?,
        owners: q.owners,
        frame_is_entry: c.get_if(q.minor == 11, "interpreter_frame.is_entry")?,
        instr_ptr_is_prev: q.carried,
        frame_tlbc_index: tlbc.map(|t| t.index),
        code_size: g("code_object.size")?,
        code_framesize: framesize.words,
        code_framesize_sum: framesize.sum,
        code_filename: g("code_object.filename")?,
        code_qualname: g("code_object.qualname")?,
        code_linetable: g("code_object.linetable")?,
        code_firstlineno: g("code_object.firstlineno")?,
        code_adaptive: bytecode(&c, framesize.words)?,
        code_tlbc: tlbc.map(|t| t.copies),
        resume: resume(&c)?,
        ob_type: g("pyobject.ob_type")?,
        type_tp_name: g("type_object.tp_name")?,
        bytes_ob_size: g("bytes_object.ob_size")?,
        bytes_ob_sval: bytes_data(&c)?,
        unicode_state: g("unicode_object.state")?,
        unicode_length: g("unicode_object.length")?,
        unicode_ascii_size,
        unicode_compact_size,
        tag_mask: q.tag_mask,
        objects: ObjectOffsets::from_checked(&c)?,
        values: ValueOffsets::from_checked(&c)?,
    };
    o.interp_read_size = interp_read_size(&o);
    Ok(o)
}

/// Where the main thread's state is found: 3.14+ give it; 3.13's
/// `struct pythreads { next_unique_id; head; main; ... }` puts it a word
/// after the head; 3.11 and 3.12 embed it (`_initial_thread`), and a whole
/// thread state must fit in the interpreter there.
fn threads_main(c: &Checked, q: &Quirks) -> Result<u64> {
    let interp_size = c.get("interpreter_state.size")?;
    if q.carried {
        let tstate_size = c.get("thread_state.size")?;
        let main = c.get("interpreter_state.initial_thread")?;
        return c.check(
            "interpreter_state.initial_thread (a whole thread state)",
            main,
            8,
            interp_size.saturating_sub(tstate_size - 8),
        );
    }
    if q.minor == 13 {
        let main = c.get("interpreter_state.threads_head")? + 8;
        return c.check(
            "interpreter_state.threads_main (3.13: threads_head + 8)",
            main,
            8,
            interp_size,
        );
    }
    c.get("interpreter_state.threads_main")
}

/// Free-threaded builds: where the interpreter's `gil.enabled` flag is.
/// 3.13's tables give 0 for it (GIL builds' tables do on every version);
/// 3.13's `enabled` is the first field of the GIL state (gdb, 3.13.15t).
fn gil_enabled(c: &Checked, free_threaded: bool) -> Result<Option<u64>> {
    if !free_threaded {
        return Ok(None);
    }
    match c.get("interpreter_state.gil_runtime_state_enabled")? {
        0 => Ok(Some(c.get("interpreter_state.gil_runtime_state")?)),
        at => Ok(Some(at)),
    }
}

/// Where the GIL's locked flag and holder are.
struct Gil {
    locked: u64,
    holder: u64,
    in_runtime: bool,
    ceval: Option<u64>,
    state_locked: u64,
    state_holder: u64,
}

/// 3.11 keeps the GIL in `_PyRuntime`; 3.12+ in the interpreter, and
/// 3.12's `ceval.gil` names the one in use, whose fields must sit in the
/// interpreter's own GIL state as in a `struct _gil_runtime_state`.
fn gil(c: &Checked, q: &Quirks) -> Result<Gil> {
    if q.minor == 11 {
        return Ok(Gil {
            locked: c.get("runtime_state.gil_locked")?,
            holder: c.get("runtime_state.gil_holder")?,
            in_runtime: true,
            ceval: None,
            state_locked: 0,
            state_holder: 0,
        });
    }
    let mut gil = Gil {
        locked: c.get("interpreter_state.gil_runtime_state_locked")?,
        holder: c.get("interpreter_state.gil_runtime_state_holder")?,
        in_runtime: false,
        ceval: None,
        state_locked: 0,
        state_holder: 0,
    };
    if q.minor == 12 {
        gil.state_locked = c.get("gil_state.locked")?;
        gil.state_holder = c.get("gil_state.holder")?;
        let own = gil.locked.checked_sub(gil.state_locked);
        if own.is_none() || own != gil.holder.checked_sub(gil.state_holder) {
            return Err(c.err("the interpreter's GIL fields do not sit as in a GIL state".into()));
        }
        gil.ceval = Some(c.get("interpreter_state.ceval_gil")?);
    }
    Ok(gil)
}

/// `interp + gc + gc.collecting` and (3.15) `interp + gc + gc.frame`,
/// inside the interpreter.
fn gc(c: &Checked) -> Result<(u64, Option<u64>)> {
    let interp_size = c.get("interpreter_state.size")?;
    let gc = c.get("interpreter_state.gc")?;
    let collecting = c.check(
        "interpreter_state.gc + gc.collecting",
        gc + c.get("gc.collecting")?,
        4,
        interp_size,
    )?;
    let frame = match c.get_if(c.minor() >= 15, "gc.frame")? {
        Some(f) => Some(c.check("interpreter_state.gc + gc.frame", gc + f, 8, interp_size)?),
        None => None,
    };
    Ok((collecting, frame))
}

/// The thread-state facts that are not one field of every table.
struct Thread {
    current_frame: u64,
    cframe_current_frame: Option<u64>,
    cframe_previous: Option<u64>,
    root_cframe: Option<u64>,
    datastack_top: u64,
    holds_gil: GilFlag,
    gil_requested: Option<u64>,
    current_exception: u64,
    handled_exception: u64,
}

fn thread(c: &Checked, q: &Quirks) -> Result<Thread> {
    let (current_exception, handled_exception) = exceptions(c, q)?;
    let (holds_gil, gil_requested) = holds_gil(c, q)?;
    if q.carried {
        // The thread's bottom `_PyCFrame` is inside its state.
        let root = c.get("thread_state.root_cframe")?;
        let current = c.get("cframe.current_frame")?;
        c.check(
            "thread_state.root_cframe + cframe.current_frame",
            root + current,
            8,
            c.get("thread_state.size")?,
        )?;
        return Ok(Thread {
            current_frame: c.get("thread_state.cframe")?,
            cframe_current_frame: Some(current),
            cframe_previous: Some(c.get("cframe.previous")?),
            root_cframe: Some(root),
            datastack_top: c.get("thread_state.datastack_top")?,
            holds_gil,
            gil_requested,
            current_exception,
            handled_exception,
        });
    }
    Ok(Thread {
        current_frame: c.get("thread_state.current_frame")?,
        cframe_current_frame: None,
        cframe_previous: None,
        root_cframe: None,
        datastack_top: c.check(
            "thread_state.datastack_top (datastack_chunk + 8)",
            c.get("thread_state.datastack_chunk")? + 8,
            8,
            c.get("thread_state.size")?,
        )?,
        holds_gil,
        gil_requested,
        current_exception,
        handled_exception,
    })
}

/// The exception being raised and the one being handled. 3.15 and the
/// carried layouts give both; in the 3.13/3.14 `struct _ts`,
/// `current_exception` sits 40 bytes after `current_frame` (four
/// profiler/tracer pointers between) and 40 before `thread_id`, and
/// `exc_state` follows the three data-stack pointers from `datastack_chunk`.
fn exceptions(c: &Checked, q: &Quirks) -> Result<(u64, u64)> {
    let tstate_size = c.get("thread_state.size")?;
    if q.carried {
        return Ok((
            c.get("thread_state.current_exception")?,
            c.get("thread_state.handled_exception")?,
        ));
    }
    if q.minor >= 15 {
        let handled = c
            .get("thread_state.exc_state")?
            .saturating_add(c.get("err_stackitem.exc_value")?);
        c.check(
            "thread_state.exc_state + err_stackitem.exc_value",
            handled,
            8,
            tstate_size,
        )?;
        return Ok((c.get("thread_state.current_exception")?, handled));
    }
    let current_frame = c.get("thread_state.current_frame")?;
    let thread_id = c.get("thread_state.thread_id")?;
    let current = current_frame + 40;
    if thread_id.checked_sub(40) != Some(current) {
        return Err(c.err(format!(
            "thread_state.current_frame ({current_frame}) and thread_id ({thread_id}) do not frame current_exception as in CPython 3.{}",
            q.minor
        )));
    }
    let handled = c.get("thread_state.datastack_chunk")? + 24;
    c.check("thread_state.current_exception", current, 8, tstate_size)?;
    c.check("thread_state.exc_state", handled, 8, tstate_size)?;
    Ok((current, handled))
}

/// Where "holds the GIL" is: bit 5 of 3.13's `_status`, the `int` after it
/// in 3.14, a field of 3.15's table; the carried versions have no flag.
fn holds_gil(c: &Checked, q: &Quirks) -> Result<(GilFlag, Option<u64>)> {
    if q.carried {
        return Ok((GilFlag::Holder, None));
    }
    let status = c.get("thread_state.status")?;
    match q.minor {
        13 => Ok((
            GilFlag::StatusBit {
                offset: status,
                bit: 5,
            },
            None,
        )),
        14 => {
            let offset = c.check(
                "thread_state.holds_gil (status + 4)",
                status + 4,
                4,
                c.get("thread_state.size")?,
            )?;
            Ok((GilFlag::Int { offset }, None))
        }
        _ => Ok((
            GilFlag::Int {
                offset: c.get("thread_state.holds_gil")?,
            },
            Some(c.get("thread_state.gil_requested")?),
        )),
    }
}

/// How much of the data stack a frame of a code object takes: 3.13+ keep
/// `co_framesize` 8 bytes after `co_firstlineno` (`co_nlocalsplus`
/// between), 3.12 carries it, 3.11 sums `co_nlocalsplus` and `co_stacksize`.
fn frame_size(c: &Checked) -> Result<FrameSize> {
    let words = match c.minor() {
        11 => {
            return Ok(FrameSize {
                words: None,
                sum: Some((
                    c.get("code_object.nlocalsplus")?,
                    c.get("code_object.stacksize")?,
                )),
            });
        }
        12 => c.get("code_object.framesize")?,
        _ => c.check(
            "code_object.co_framesize (firstlineno + 8)",
            c.get("code_object.firstlineno")? + 8,
            4,
            c.get("code_object.size")?,
        )?,
    };
    Ok(FrameSize {
        words: Some(words),
        sum: None,
    })
}

/// `code_framesize` and `code_framesize_sum` of [`Offsets`].
struct FrameSize {
    words: Option<u64>,
    sum: Option<(u64, u64)>,
}

/// The bytecode (the code object's last, flexible member) starts at the
/// end of its header: after every field read, at most at the size.
fn bytecode(c: &Checked, framesize: Option<u64>) -> Result<u64> {
    let size = c.get("code_object.size")?;
    let adaptive = c.get("code_object.co_code_adaptive")?;
    let header_end = [
        c.get("code_object.filename")? + 8,
        c.get("code_object.qualname")? + 8,
        c.get("code_object.linetable")? + 8,
        framesize.map_or(0, |f| f + 4),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    if adaptive > size || adaptive < header_end || !adaptive.is_multiple_of(2) {
        return Err(c.err(format!(
            "code_object.co_code_adaptive = {adaptive} does not fit a code object of {size} bytes after its header fields"
        )));
    }
    Ok(adaptive)
}

/// Where a free-threaded 3.14+ build says which bytecode copy a frame runs.
#[derive(Clone, Copy)]
struct Tlbc {
    index: u64,
    copies: u64,
    generation: u64,
}

/// Free-threaded 3.14+: the frame's copy index, the code's array of
/// copies and the interpreter's generation of indices. The spec bounded
/// each; a real table also keeps them off the fields they sit beside: the
/// index after the frame's pointers (before its owner byte), the array
/// before the bytecode, the generation not at the interpreter's start.
fn per_thread_bytecode(c: &Checked, q: &Quirks) -> Result<Option<Tlbc>> {
    if !q.per_thread_bytecode {
        return Ok(None);
    }
    let index = c.get("interpreter_frame.tlbc_index")?;
    let after = c.get("interpreter_frame.instr_ptr")? + 8;
    if index < after {
        return Err(c.err(format!(
            "interpreter_frame.tlbc_index = {index} lies among the frame's pointers (before {after})"
        )));
    }
    let copies = c.get("code_object.co_tlbc")?;
    let adaptive = c.get("code_object.co_code_adaptive")?;
    let names_end = c.get("code_object.qualname")? + 8;
    if copies < names_end || copies + 8 > adaptive {
        return Err(c.err(format!(
            "code_object.co_tlbc = {copies} does not lie between the code's names and its bytecode ({names_end}..{adaptive})"
        )));
    }
    let generation = c.get("interpreter_state.tlbc_generation")?;
    if generation == 0 {
        return Err(c.err("interpreter_state.tlbc_generation is 0".into()));
    }
    Ok(Some(Tlbc {
        index,
        copies,
        generation,
    }))
}

/// 3.12+: where the thread's Python frame count is kept (see
/// [`Offsets::tstate_py_depth`]). No table names these two ints; their
/// place in `struct _ts` is fixed per version: right after the 4-byte
/// `_status` in 3.12, and in 3.13+ a fixed distance before
/// `current_frame` (3.13: `c_recursion_remaining`, `recursion_headroom`,
/// `tracing` and `what_event` between, then padding; 3.14 dropped the
/// first; 3.15 packs the rest without the padding). Each must lie inside
/// the thread state.
fn py_depth(c: &Checked, q: &Quirks) -> Result<Option<(u64, u64)>> {
    let remaining = match q.minor {
        11 => return Ok(None),
        12 => c.get("thread_state.status")?.checked_add(4),
        13 => c.get("thread_state.current_frame")?.checked_sub(28),
        14 => c.get("thread_state.current_frame")?.checked_sub(24),
        _ => c.get("thread_state.current_frame")?.checked_sub(20),
    };
    let Some(remaining) = remaining else {
        return Err(
            c.err("thread_state.current_frame leaves no room for the recursion counters".into())
        );
    };
    let size = c.get("thread_state.size")?;
    c.check("thread_state.py_recursion_remaining", remaining, 4, size)?;
    c.check("thread_state.py_recursion_limit", remaining + 4, 4, size)?;
    Ok(Some((remaining, remaining + 4)))
}

/// 3.15: the frame-cache mark and its count in the thread state. tachyon
/// writes the mark (`--frame-cache`), so a table that put it on another
/// field would have it write there: the spec bounded each, and a real
/// table also has them where `PyThreadState` declares them, one word
/// after another behind the current and base frames.
fn profiled_mark(c: &Checked, q: &Quirks) -> Result<Option<(u64, u64)>> {
    if q.minor < 15 {
        return Ok(None);
    }
    let current = c.get("thread_state.current_frame")?;
    let base = c.get("thread_state.base_frame")?;
    let mark = c.get("thread_state.last_profiled_frame")?;
    let seq = c.get("thread_state.last_profiled_frame_seq")?;
    for (name, at, after, what) in [
        (
            "thread_state.base_frame",
            base,
            current,
            "thread_state.current_frame",
        ),
        (
            "thread_state.last_profiled_frame",
            mark,
            base,
            "thread_state.base_frame",
        ),
        (
            "thread_state.last_profiled_frame_seq",
            seq,
            mark,
            "thread_state.last_profiled_frame",
        ),
    ] {
        if at != after + 8 {
            return Err(c.err(format!(
                "{name} = {at} does not follow {what} ({after}) as PyThreadState declares"
            )));
        }
    }
    Ok(Some((mark, seq)))
}

/// 3.12: where a generator's state lies before its frame (within the
/// bytes read before every frame outside the data stack), and the value
/// stack's fields of a frame and a code object; `FRAME_EXECUTING` is 0
/// (`pycore_frame.h`).
fn resume(c: &Checked) -> Result<Option<ResumeOffsets>> {
    if c.minor() != 12 {
        return Ok(None);
    }
    let iframe = c.get("gen_object.gi_iframe")?;
    let state = c.get("gen_object.gi_frame_state")?;
    let before = iframe
        .checked_sub(state)
        .filter(|b| (1..=GEN_EXC_VALUE_BEFORE_FRAME).contains(b));
    let Some(state_before_frame) = before else {
        return Err(c.err(format!(
            "gen_object.gi_frame_state = {state} is not within {GEN_EXC_VALUE_BEFORE_FRAME} bytes before gen_object.gi_iframe ({iframe})"
        )));
    };
    let stacktop = c.get("interpreter_frame.stacktop")?;
    let localsplus = c.get("interpreter_frame.localsplus")?;
    if stacktop + 4 > localsplus {
        return Err(c.err(format!(
            "interpreter_frame.stacktop = {stacktop} does not lie before interpreter_frame.localsplus ({localsplus})"
        )));
    }
    Ok(Some(ResumeOffsets {
        gen_iframe: iframe,
        state_before_frame,
        executing: 0,
        frame_stacktop: stacktop,
        frame_localsplus: localsplus,
        code_units: c.get("code_object.ob_size")?,
        code_stacksize: c.get("code_object.stacksize")?,
        code_nlocalsplus: c.get("code_object.nlocalsplus")?,
    }))
}

/// A bytes object's data follows its size, inside the struct (which ends
/// with `ob_sval[1]`).
fn bytes_data(c: &Checked) -> Result<u64> {
    let size = c.get("bytes_object.size")?;
    let ob_size = c.get("bytes_object.ob_size")?;
    let sval = c.get("bytes_object.ob_sval")?;
    if sval >= size || sval < ob_size + 8 {
        return Err(c.err(format!(
            "bytes_object.ob_sval = {sval} is not between bytes_object.ob_size + 8 and its struct's end ({size})"
        )));
    }
    Ok(sval)
}

/// `sizeof(PyASCIIObject)` and `sizeof(PyCompactUnicodeObject)`: where the
/// characters of a compact unicode object start. Before 3.15 the table
/// lacks the second; it is the first plus `utf8_length` and `utf8` (16
/// bytes) on every 64-bit build. Both are sizeofs of structs holding
/// pointers (8-aligned), and the characters follow them inside the object.
fn unicode_headers(c: &Checked) -> Result<(u64, u64)> {
    let size = c.get("unicode_object.size")?;
    let state = c.get("unicode_object.state")?;
    let length = c.get("unicode_object.length")?;
    let ascii = c.get("unicode_object.asciiobject_size")?;
    let compact = match c.minor() {
        13 | 14 => ascii.saturating_add(16),
        _ => c.get("unicode_object.compactunicodeobject_size")?,
    };
    if ascii < (state + 4).max(length + 8) || ascii > size || !ascii.is_multiple_of(8) {
        return Err(c.err(format!(
            "unicode_object.asciiobject_size = {ascii} does not fit after the state and length fields of a unicode object of {size} bytes"
        )));
    }
    if compact < ascii || compact > size || !compact.is_multiple_of(8) {
        return Err(c.err(format!(
            "unicode_object.compactunicodeobject_size = {compact} does not fit between unicode_object.asciiobject_size ({ascii}) and the unicode object's {size} bytes"
        )));
    }
    Ok((ascii, compact))
}

/// How much of `PyInterpreterState` one sample reads: the end of the last
/// field used in it (not an embedded main thread, not a GIL in `_PyRuntime`).
fn interp_read_size(o: &Offsets) -> u64 {
    let own_gil = !o.gil_in_runtime;
    [
        Some(o.interp_id + 8),
        Some(o.interp_next + 8),
        Some(o.interp_threads_head + 8),
        (!o.threads_main_embedded).then_some(o.interp_threads_main + 8),
        own_gil.then_some(o.interp_gil_locked + 4),
        own_gil.then_some(o.interp_gil_holder + 8),
        o.interp_code_object_generation.map(|g| g + 8),
        o.interp_tlbc_generation.map(|g| g + 4),
        Some(o.interp_gc_collecting + 4),
        o.interp_gc_frame.map(|f| f + 8),
        o.interp_ceval_gil.map(|g| g + 8),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(0)
}
