//! The on-disk order of `_Py_DebugOffsets` for each minor version.
//!
//! Every entry after the 8-byte cookie is a `uint64_t`, so entry `n` sits at
//! byte `8 * n` and a layout is just the list of field names in order. The
//! lists were taken from CPython's headers (`pycore_runtime.h` for 3.13,
//! `pycore_debug_offsets.h` for 3.14 and 3.15) and checked against the
//! tables of the real interpreters in the test root (see
//! `tests/offsets.rs`). The table is only stable between patch releases of a
//! minor version, so an unknown minor gets no layout and is refused.

const HEAD: &[&str] = &["cookie", "version", "free_threaded"];
const RUNTIME: &[&str] = &[
    "runtime_state.size",
    "runtime_state.finalizing",
    "runtime_state.interpreters_head",
];
const INTERP_313: &[&str] = &[
    "interpreter_state.size",
    "interpreter_state.id",
    "interpreter_state.next",
    "interpreter_state.threads_head",
    "interpreter_state.gc",
    "interpreter_state.imports_modules",
    "interpreter_state.sysdict",
    "interpreter_state.builtins",
    "interpreter_state.ceval_gil",
    "interpreter_state.gil_runtime_state",
    "interpreter_state.gil_runtime_state_enabled",
    "interpreter_state.gil_runtime_state_locked",
    "interpreter_state.gil_runtime_state_holder",
];
const INTERP_314: &[&str] = &[
    "interpreter_state.size",
    "interpreter_state.id",
    "interpreter_state.next",
    "interpreter_state.threads_head",
    "interpreter_state.threads_main",
    "interpreter_state.gc",
    "interpreter_state.imports_modules",
    "interpreter_state.sysdict",
    "interpreter_state.builtins",
    "interpreter_state.ceval_gil",
    "interpreter_state.gil_runtime_state",
    "interpreter_state.gil_runtime_state_enabled",
    "interpreter_state.gil_runtime_state_locked",
    "interpreter_state.gil_runtime_state_holder",
    "interpreter_state.code_object_generation",
    "interpreter_state.tlbc_generation",
];
const TSTATE_313: &[&str] = &[
    "thread_state.size",
    "thread_state.prev",
    "thread_state.next",
    "thread_state.interp",
    "thread_state.current_frame",
    "thread_state.thread_id",
    "thread_state.native_thread_id",
    "thread_state.datastack_chunk",
    "thread_state.status",
];
const TSTATE_315: &[&str] = &[
    "thread_state.size",
    "thread_state.prev",
    "thread_state.next",
    "thread_state.interp",
    "thread_state.current_frame",
    "thread_state.base_frame",
    "thread_state.last_profiled_frame",
    "thread_state.last_profiled_frame_seq",
    "thread_state.thread_id",
    "thread_state.native_thread_id",
    "thread_state.datastack_chunk",
    "thread_state.status",
    "thread_state.holds_gil",
    "thread_state.gil_requested",
    "thread_state.current_exception",
    "thread_state.exc_state",
    "err_stackitem.exc_value",
];
const FRAME_313: &[&str] = &[
    "interpreter_frame.size",
    "interpreter_frame.previous",
    "interpreter_frame.executable",
    "interpreter_frame.instr_ptr",
    "interpreter_frame.localsplus",
    "interpreter_frame.owner",
];
const FRAME_314: &[&str] = &[
    "interpreter_frame.size",
    "interpreter_frame.previous",
    "interpreter_frame.executable",
    "interpreter_frame.instr_ptr",
    "interpreter_frame.localsplus",
    "interpreter_frame.owner",
    "interpreter_frame.stackpointer",
    "interpreter_frame.tlbc_index",
];
const CODE_313: &[&str] = &[
    "code_object.size",
    "code_object.filename",
    "code_object.name",
    "code_object.qualname",
    "code_object.linetable",
    "code_object.firstlineno",
    "code_object.argcount",
    "code_object.localsplusnames",
    "code_object.localspluskinds",
    "code_object.co_code_adaptive",
];
const CODE_314: &[&str] = &[
    "code_object.size",
    "code_object.filename",
    "code_object.name",
    "code_object.qualname",
    "code_object.linetable",
    "code_object.firstlineno",
    "code_object.argcount",
    "code_object.localsplusnames",
    "code_object.localspluskinds",
    "code_object.co_code_adaptive",
    "code_object.co_tlbc",
];
const PYOBJECT: &[&str] = &["pyobject.size", "pyobject.ob_type"];
const TYPE_313: &[&str] = &[
    "type_object.size",
    "type_object.tp_name",
    "type_object.tp_repr",
    "type_object.tp_flags",
];
const TYPE_315: &[&str] = &[
    "type_object.size",
    "type_object.tp_name",
    "type_object.tp_repr",
    "type_object.tp_flags",
    "type_object.tp_basicsize",
    "type_object.tp_dictoffset",
    "heap_type_object.size",
    "heap_type_object.ht_cached_keys",
];
const TUPLE_LIST: &[&str] = &[
    "tuple_object.size",
    "tuple_object.ob_item",
    "tuple_object.ob_size",
    "list_object.size",
    "list_object.ob_item",
    "list_object.ob_size",
];
const SET: &[&str] = &[
    "set_object.size",
    "set_object.used",
    "set_object.table",
    "set_object.mask",
];
const SCALARS: &[&str] = &[
    "dict_object.size",
    "dict_object.ma_keys",
    "dict_object.ma_values",
    "float_object.size",
    "float_object.ob_fval",
    "long_object.size",
    "long_object.lv_tag",
    "long_object.ob_digit",
    "bytes_object.size",
    "bytes_object.ob_size",
    "bytes_object.ob_sval",
];
const UNICODE_313: &[&str] = &[
    "unicode_object.size",
    "unicode_object.state",
    "unicode_object.length",
    "unicode_object.asciiobject_size",
];
const UNICODE_315: &[&str] = &[
    "unicode_object.size",
    "unicode_object.state",
    "unicode_object.length",
    "unicode_object.asciiobject_size",
    "unicode_object.compactunicodeobject_size",
];
const GC_313: &[&str] = &["gc.size", "gc.collecting"];
const GC_315: &[&str] = &[
    "gc.size",
    "gc.collecting",
    "gc.frame",
    "gc.generation_stats_size",
    "gc.generation_stats",
];
const TAIL_314: &[&str] = &[
    "gen_object.size",
    "gen_object.gi_name",
    "gen_object.gi_iframe",
    "gen_object.gi_frame_state",
    "llist_node.next",
    "llist_node.prev",
    "debugger_support.eval_breaker",
    "debugger_support.remote_debugger_support",
    "debugger_support.remote_debugging_enabled",
    "debugger_support.debugger_pending_call",
    "debugger_support.debugger_script_path",
    "debugger_support.debugger_script_path_size",
];

/// The field names of the table of CPython 3.`minor`, in order, or `None`
/// for a minor version whose layout tachyon does not know.
pub fn layout(minor: u8) -> Option<Vec<&'static str>> {
    let parts: &[&[&str]] = match minor {
        13 => &[
            HEAD,
            RUNTIME,
            INTERP_313,
            TSTATE_313,
            FRAME_313,
            CODE_313,
            PYOBJECT,
            TYPE_313,
            TUPLE_LIST,
            SCALARS,
            UNICODE_313,
            GC_313,
        ],
        14 => &[
            HEAD,
            RUNTIME,
            INTERP_314,
            TSTATE_313,
            FRAME_314,
            CODE_314,
            PYOBJECT,
            TYPE_313,
            TUPLE_LIST,
            SET,
            SCALARS,
            UNICODE_313,
            GC_313,
            TAIL_314,
        ],
        15 => &[
            HEAD,
            RUNTIME,
            INTERP_314,
            TSTATE_315,
            FRAME_314,
            CODE_314,
            PYOBJECT,
            TYPE_315,
            TUPLE_LIST,
            SET,
            SCALARS,
            UNICODE_315,
            GC_315,
            TAIL_314,
        ],
        _ => return None,
    };
    Some(parts.iter().flat_map(|p| p.iter().copied()).collect())
}

/// Size in bytes of the table of CPython 3.`minor`.
pub fn table_size(minor: u8) -> Option<usize> {
    layout(minor).map(|l| l.len() * 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_measured_tables() {
        // Sizes measured by compiling against each version's headers.
        assert_eq!(table_size(13), Some(584));
        assert_eq!(table_size(14), Some(760));
        assert_eq!(table_size(15), Some(888));
        assert_eq!(table_size(12), None);
        assert_eq!(table_size(16), None);
    }

    #[test]
    fn known_positions() {
        let pos = |minor, name| {
            layout(minor)
                .unwrap()
                .iter()
                .position(|f| *f == name)
                .unwrap()
                * 8
        };
        assert_eq!(pos(13, "thread_state.size"), 152);
        assert_eq!(pos(13, "gc.collecting"), 576);
        assert_eq!(pos(14, "interpreter_frame.size"), 248);
        assert_eq!(pos(14, "debugger_support.debugger_script_path_size"), 752);
        assert_eq!(pos(15, "err_stackitem.exc_value"), 304);
        assert_eq!(pos(15, "heap_type_object.size"), 528);
        assert_eq!(pos(15, "gc.frame"), 768);
        assert_eq!(pos(15, "unicode_object.compactunicodeobject_size"), 744);
    }
}
