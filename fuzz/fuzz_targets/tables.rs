//! The real `_Py_DebugOffsets` tables of the test interpreters
//! (`fixtures/offsets`), and the properties every validated table must
//! have. Shared by the offsets and strings targets.

#![allow(dead_code)]

use tachyon::offsets::{GilFlag, Offsets, RawTable};

/// In this order: the string seeds' first byte indexes it
/// (fuzz/gen_string_seeds.py).
pub const TABLES: [&[u8]; 7] = [
    include_bytes!("../../fixtures/offsets/3.13.0.bin"),
    include_bytes!("../../fixtures/offsets/3.13.18.bin"),
    include_bytes!("../../fixtures/offsets/3.13.18d.bin"),
    include_bytes!("../../fixtures/offsets/3.14.10.bin"),
    include_bytes!("../../fixtures/offsets/3.14.10d.bin"),
    include_bytes!("../../fixtures/offsets/3.15.2.bin"),
    include_bytes!("../../fixtures/offsets/3.15.2d.bin"),
];

pub const PID: i32 = 4242;

pub fn raw(i: u8) -> RawTable {
    RawTable::decode(PID, TABLES[i as usize % TABLES.len()]).expect("real table decodes")
}

pub fn offsets(i: u8) -> Offsets {
    Offsets::from_raw(PID, &raw(i)).expect("real table validates")
}

/// What the validator promises the unwinder: every field it reads lies,
/// aligned, inside its struct, and every struct is of bounded size.
pub fn check(o: &Offsets) {
    let inside = |name: &str, off: u64, width: u64, size: u64| {
        assert!(
            off.is_multiple_of(width) && off.checked_add(width).is_some_and(|e| e <= size),
            "{name} = {off} (width {width}) escapes its struct of {size} bytes: {o:?}"
        );
    };
    assert!(
        o.interp_size <= 4 << 20 && o.tstate_size <= 64 << 10,
        "{o:?}"
    );
    assert!(o.frame_size <= 512 && o.code_size <= 4096, "{o:?}");
    assert!(o.interp_read_size <= o.interp_size, "{o:?}");
    for (n, v, w) in [
        ("interp_id", o.interp_id, 8),
        ("interp_next", o.interp_next, 8),
        ("interp_threads_head", o.interp_threads_head, 8),
        ("interp_threads_main", o.interp_threads_main, 8),
        ("interp_gil_locked", o.interp_gil_locked, 4),
        ("interp_gil_holder", o.interp_gil_holder, 8),
        ("interp_gc_collecting", o.interp_gc_collecting, 4),
    ] {
        inside(n, v, w, o.interp_read_size);
    }
    if let Some(v) = o.interp_code_object_generation {
        inside("interp_code_object_generation", v, 8, o.interp_read_size);
    }
    if let Some(v) = o.interp_gc_frame {
        inside("interp_gc_frame", v, 8, o.interp_read_size);
    }
    let gil = match o.holds_gil {
        GilFlag::StatusBit { offset, bit } => {
            assert!(bit < 32, "{o:?}");
            offset
        }
        GilFlag::Int { offset } => offset,
        // No per-thread flag (3.11/3.12 carried layouts): nothing to check.
        GilFlag::Holder => o.tstate_status,
    };
    for (n, v, w) in [
        ("tstate_next", o.tstate_next, 8),
        ("tstate_interp", o.tstate_interp, 8),
        ("tstate_current_frame", o.tstate_current_frame, 8),
        ("tstate_thread_id", o.tstate_thread_id, 8),
        ("tstate_native_thread_id", o.tstate_native_thread_id, 8),
        ("tstate_datastack_chunk", o.tstate_datastack_chunk, 8),
        ("tstate_status", o.tstate_status, 4),
        ("holds_gil", gil, 4),
        ("tstate_current_exception", o.tstate_current_exception, 8),
        ("tstate_handled_exception", o.tstate_handled_exception, 8),
    ] {
        inside(n, v, w, o.tstate_size);
    }
    if let Some(v) = o.tstate_base_frame {
        inside("tstate_base_frame", v, 8, o.tstate_size);
    }
    if let Some(v) = o.gil_requested {
        inside("gil_requested", v, 4, o.tstate_size);
    }
    inside("frame_previous", o.frame_previous, 8, o.frame_size);
    inside("frame_executable", o.frame_executable, 8, o.frame_size);
    inside("frame_instr_ptr", o.frame_instr_ptr, 8, o.frame_size);
    inside("frame_owner", o.frame_owner, 1, o.frame_size);
    assert!(o.code_adaptive <= o.code_size, "{o:?}");
    inside("code_filename", o.code_filename, 8, o.code_adaptive);
    inside("code_qualname", o.code_qualname, 8, o.code_adaptive);
    inside("code_linetable", o.code_linetable, 8, o.code_adaptive);
    inside("code_firstlineno", o.code_firstlineno, 4, o.code_adaptive);
    inside("bytes_ob_size", o.bytes_ob_size, 8, o.bytes_ob_sval);
    inside("unicode_state", o.unicode_state, 4, o.unicode_ascii_size);
    inside("unicode_length", o.unicode_length, 8, o.unicode_ascii_size);
    assert!(o.unicode_ascii_size <= o.unicode_compact_size, "{o:?}");
    assert!(
        o.unicode_compact_size <= 1024 && o.bytes_ob_sval < 1024,
        "{o:?}"
    );
    assert!(o.ob_type < 1024 && o.type_tp_name < 1024, "{o:?}");
}
