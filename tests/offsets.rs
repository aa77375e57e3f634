//! The `_Py_DebugOffsets` validator against the real tables.
//!
//! `fixtures/offsets/<version>[d].bin` are the raw tables of the test
//! interpreters (`d`: debug build), read out of live processes by the
//! library itself. Regenerate them with `scripts/regen-offsets-fixtures.sh`
//! (it runs the ignored test `regenerate_fixtures` below); the live test
//! here fails whenever a fixture no longer matches its interpreter.
//!
//! The mutation tests start from each real table and corrupt one field at a
//! time. The rule they enforce: a corrupt value is either refused with
//! `InvalidOffsets` naming the field, or it changes nothing tachyon uses
//! (the normalised `Offsets` come out identical).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Interp, Target, machine_supported_interpreters, sid_interpreters, spawn};
use tachyon::Error;
use tachyon::offsets::{COOKIE, Offsets, RawTable, layout};
use tachyon::process::linux::LinuxProcess;

const PID: i32 = 4242;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/offsets")
}

/// Every fixture: (file stem, bytes).
fn fixtures() -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(fixture_dir())
        .expect("fixtures/offsets is missing (scripts/regen-offsets-fixtures.sh)")
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "bin").then(|| {
                let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
                (stem, std::fs::read(&p).unwrap())
            })
        })
        .collect();
    v.sort();
    assert!(
        v.len() >= 6,
        "expected the six sid tables in {}",
        fixture_dir().display()
    );
    v
}

/// Start `interp`; returns the target and the version it reports
/// (`platform.python_version()`) and whether it is a debug build.
fn start(interp: &Interp) -> (Target, String, bool) {
    let mut t = spawn(
        interp,
        "import platform, sys, time\n\
         print('READY', platform.python_version(), int(hasattr(sys, 'gettotalrefcount')), flush=True)\n\
         time.sleep(600)\n",
        &[],
        &[],
    );
    let line = t.wait_for("READY ", Duration::from_secs(30));
    let mut w = line.split_whitespace().skip(1);
    let version = w.next().unwrap().to_string();
    let debug = w.next() == Some("1");
    (t, version, debug)
}

fn fixture_name(version: &str, debug: bool) -> String {
    format!("{version}{}", if debug { "d" } else { "" })
}

/// The table of a live target, read by the library.
fn live_table(pid: i32) -> (tachyon::runtime::Runtime, Vec<u8>) {
    let proc = LinuxProcess::open(pid).unwrap();
    let rt = tachyon::session::locate(&proc).unwrap_or_else(|e| panic!("locate {pid}: {e}"));
    let bytes = tachyon::runtime::table_bytes(&proc, &rt).unwrap();
    (rt, bytes)
}

fn interpreters() -> Vec<Interp> {
    let mut v = sid_interpreters();
    v.extend(machine_supported_interpreters());
    v
}

/// Writes the fixtures: `scripts/regen-offsets-fixtures.sh`.
#[test]
#[ignore = "writes fixtures/offsets; run by scripts/regen-offsets-fixtures.sh"]
fn regenerate_fixtures() {
    std::fs::create_dir_all(fixture_dir()).unwrap();
    for interp in interpreters() {
        let (t, version, debug) = start(&interp);
        let (rt, bytes) = live_table(t.pid());
        assert_eq!(rt.raw.version.to_string(), version, "{}", interp.name);
        let path = fixture_dir().join(format!("{}.bin", fixture_name(&version, debug)));
        std::fs::write(&path, &bytes).unwrap();
        println!(
            "{}: wrote {} ({} bytes)",
            interp.name,
            path.display(),
            bytes.len()
        );
    }
}

fn decode(bytes: &[u8]) -> tachyon::Result<RawTable> {
    RawTable::decode(PID, bytes)
}

fn offsets(raw: &RawTable) -> tachyon::Result<Offsets> {
    Offsets::from_raw(PID, raw)
}

#[test]
fn fixtures_decode_and_validate() {
    let fx = fixtures();
    for (name, bytes) in &fx {
        let version = name.trim_end_matches('d');
        let raw = decode(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            raw.version.to_string(),
            version,
            "{name}: version in the table"
        );
        assert!(!raw.free_threaded, "{name}");
        assert_eq!(
            Some(bytes.len()),
            layout::table_size(raw.version.minor),
            "{name}: size"
        );
        let o = offsets(&raw).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(o.version, raw.version);
        // Cross-checks against facts of every 64-bit GIL build: the object
        // header is refcount + type, a bytes object's data follows its size
        // and hash, and 3.13's tables lack the fields 3.14 added.
        assert_eq!(o.ob_type, 8, "{name}");
        assert_eq!(o.bytes_ob_sval, o.bytes_ob_size + 16, "{name}");
        assert_eq!(
            o.interp_code_object_generation.is_some(),
            raw.version.minor >= 14,
            "{name}"
        );
        assert_eq!(
            o.tstate_base_frame.is_some(),
            raw.version.minor >= 15,
            "{name}"
        );
        println!("{name}: {} fields, valid", raw.fields().len());
    }
    for minor in 13..=15 {
        for debug in ["", "d"] {
            assert!(
                fx.iter().any(|(n, _)| n.starts_with(&format!("3.{minor}."))
                    && n.ends_with(debug)
                    && (debug == "d") == n.ends_with('d')),
                "no fixture for a 3.{minor}{debug} build"
            );
        }
    }
}

#[test]
fn fixtures_match_live_interpreters() {
    let fx = fixtures();
    for interp in interpreters() {
        let (t, version, debug) = start(&interp);
        let name = fixture_name(&version, debug);
        let (rt, live) = live_table(t.pid());
        assert_eq!(
            rt.raw.version.to_string(),
            version,
            "{}: version",
            interp.name
        );
        let stored = fx
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("{}: no fixture {name}.bin (regenerate)", interp.name));
        assert!(
            stored.1 == live,
            "{}: fixtures/offsets/{name}.bin differs from the live table (regenerate)",
            interp.name
        );
        println!("{}: live table equals {name}.bin", interp.name);
    }
}

fn set_word(bytes: &mut [u8], index: usize, value: u64) {
    bytes[index * 8..index * 8 + 8].copy_from_slice(&value.to_le_bytes());
}

fn version_hex(major: u64, minor: u64, micro: u64, level: u64, serial: u64) -> u64 {
    (major << 24) | (minor << 16) | (micro << 8) | (level << 4) | serial
}

#[test]
fn header_corruption_is_refused_by_kind() {
    for (name, bytes) in fixtures() {
        let real = decode(&bytes).unwrap().version;

        let mut b = bytes.clone();
        b[..8].copy_from_slice(b"xdebugpz");
        match decode(&b) {
            Err(e @ Error::NotPython { .. }) => {
                assert!(e.to_string().contains("cookie"), "{name}: {e}")
            }
            other => panic!("{name}: wrong cookie gave {other:?}"),
        }
        assert!(matches!(decode(&bytes[..16]), Err(Error::NotPython { .. })));

        let unsupported = [
            (version_hex(3, 16, 0, 0xF, 0), "3.16.0"),
            (version_hex(3, 15, 0, 0xB, 1), "3.15.0b1"),
            (version_hex(3, 14, 0, 0xA, 7), "3.14.0a7"),
            (version_hex(3, 12, 4, 0xF, 0), "3.12.4"),
            (
                version_hex(4, real.minor as u64, 0, 0xF, 0),
                &*format!("4.{}.0", real.minor),
            ),
        ];
        for (hex, want) in unsupported {
            let mut b = bytes.clone();
            set_word(&mut b, 1, hex);
            match decode(&b) {
                Err(e @ Error::UnsupportedVersion { .. }) => {
                    let Error::UnsupportedVersion { found, .. } = &e else {
                        unreachable!()
                    };
                    assert_eq!(found, want, "{name}");
                    assert!(
                        e.to_string().contains(&format!("version {want} ")),
                        "{name}: {e}"
                    );
                }
                other => panic!("{name}: version {want} gave {other:?}"),
            }
        }

        // A release candidate of the same minor is read like the final.
        let mut b = bytes.clone();
        set_word(&mut b, 1, version_hex(3, real.minor as u64, 0, 0xC, 2));
        let rc = decode(&b).unwrap_or_else(|e| panic!("{name}: rc refused: {e}"));
        assert_eq!(rc.version.to_string(), format!("3.{}.0rc2", real.minor));
        offsets(&rc).unwrap_or_else(|e| panic!("{name}: rc refused: {e}"));

        // A GIL table flagged free-threaded: decoded, but 3.14+ tables of a
        // GIL build give no bytecode-copy fields, which a free-threaded
        // build must have: refused, naming the first.
        let mut b = bytes.clone();
        set_word(&mut b, 2, 1);
        let t = decode(&b).unwrap_or_else(|e| panic!("{name}: free_threaded=1 gave {e}"));
        assert!(t.free_threaded, "{name}");
        if real.minor > 13 {
            match offsets(&t) {
                Err(e @ Error::InvalidOffsets { .. }) => {
                    assert!(e.to_string().contains("tlbc"), "{name}: {e}")
                }
                other => panic!("{name}: a GIL table flagged free-threaded gave {other:?}"),
            }
        }

        match decode(&bytes[..bytes.len() - 8]) {
            Err(e @ Error::InvalidOffsets { .. }) => {
                assert!(e.to_string().contains("table is"), "{name}: {e}")
            }
            other => panic!("{name}: a short table gave {other:?}"),
        }
        assert!(COOKIE == &bytes[..8]);
    }
}

/// How the validator must treat a field tachyon reads.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A struct size: zero and huge are refused.
    Size,
    /// An offset of a `width`-byte field inside the struct whose size is
    /// `size`: misaligned and out-of-struct values are refused.
    Field { width: u64, size: &'static str },
    /// `co_code_adaptive`: the bytecode, after every header field, at most
    /// at the end of the struct.
    Bytecode,
    /// `ob_sval`: the data of a bytes object, after its size, inside the struct.
    BytesData,
    /// A unicode header size (where the characters start): 8-aligned, not
    /// beyond the unicode object.
    UnicodeHeader,
}

use Kind::*;

/// The fields tachyon reads (src/offsets/spec.rs lists and checks
/// exactly these), with the C type facts that bound them.
const SPEC: &[(&str, Kind)] = &[
    ("runtime_state.size", Size),
    (
        "runtime_state.interpreters_head",
        Field {
            width: 8,
            size: "runtime_state.size",
        },
    ),
    (
        "runtime_state.finalizing",
        Field {
            width: 8,
            size: "runtime_state.size",
        },
    ),
    ("interpreter_state.size", Size),
    (
        "interpreter_state.id",
        Field {
            width: 8,
            size: "interpreter_state.size",
        },
    ),
    (
        "interpreter_state.next",
        Field {
            width: 8,
            size: "interpreter_state.size",
        },
    ),
    (
        "interpreter_state.threads_head",
        Field {
            width: 8,
            size: "interpreter_state.size",
        },
    ),
    (
        "interpreter_state.threads_main",
        Field {
            width: 8,
            size: "interpreter_state.size",
        },
    ),
    (
        "interpreter_state.gc",
        Field {
            width: 8,
            size: "interpreter_state.size",
        },
    ),
    (
        "interpreter_state.gil_runtime_state_locked",
        Field {
            width: 4,
            size: "interpreter_state.size",
        },
    ),
    (
        "interpreter_state.gil_runtime_state_holder",
        Field {
            width: 8,
            size: "interpreter_state.size",
        },
    ),
    (
        "interpreter_state.code_object_generation",
        Field {
            width: 8,
            size: "interpreter_state.size",
        },
    ),
    ("gc.size", Size),
    (
        "gc.collecting",
        Field {
            width: 4,
            size: "gc.size",
        },
    ),
    (
        "gc.frame",
        Field {
            width: 8,
            size: "gc.size",
        },
    ),
    ("thread_state.size", Size),
    (
        "thread_state.next",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.interp",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.current_frame",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.base_frame",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.last_profiled_frame",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.last_profiled_frame_seq",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.thread_id",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.native_thread_id",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.datastack_chunk",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.status",
        Field {
            width: 4,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.holds_gil",
        Field {
            width: 4,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.gil_requested",
        Field {
            width: 4,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.current_exception",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "thread_state.exc_state",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    (
        "err_stackitem.exc_value",
        Field {
            width: 8,
            size: "thread_state.size",
        },
    ),
    ("interpreter_frame.size", Size),
    (
        "interpreter_frame.previous",
        Field {
            width: 8,
            size: "interpreter_frame.size",
        },
    ),
    (
        "interpreter_frame.executable",
        Field {
            width: 8,
            size: "interpreter_frame.size",
        },
    ),
    (
        "interpreter_frame.instr_ptr",
        Field {
            width: 8,
            size: "interpreter_frame.size",
        },
    ),
    (
        "interpreter_frame.owner",
        Field {
            width: 1,
            size: "interpreter_frame.size",
        },
    ),
    ("code_object.size", Size),
    (
        "code_object.filename",
        Field {
            width: 8,
            size: "code_object.size",
        },
    ),
    (
        "code_object.qualname",
        Field {
            width: 8,
            size: "code_object.size",
        },
    ),
    (
        "code_object.linetable",
        Field {
            width: 8,
            size: "code_object.size",
        },
    ),
    (
        "code_object.firstlineno",
        Field {
            width: 4,
            size: "code_object.size",
        },
    ),
    ("code_object.co_code_adaptive", Bytecode),
    (
        "code_object.argcount",
        Field {
            width: 4,
            size: "code_object.size",
        },
    ),
    (
        "code_object.localsplusnames",
        Field {
            width: 8,
            size: "code_object.size",
        },
    ),
    (
        "code_object.localspluskinds",
        Field {
            width: 8,
            size: "code_object.size",
        },
    ),
    (
        "interpreter_frame.localsplus",
        Field {
            width: 8,
            size: "interpreter_frame.size",
        },
    ),
    ("tuple_object.size", Size),
    (
        "tuple_object.ob_size",
        Field {
            width: 8,
            size: "tuple_object.size",
        },
    ),
    (
        "tuple_object.ob_item",
        Field {
            width: 8,
            size: "tuple_object.size",
        },
    ),
    ("list_object.size", Size),
    (
        "list_object.ob_size",
        Field {
            width: 8,
            size: "list_object.size",
        },
    ),
    (
        "list_object.ob_item",
        Field {
            width: 8,
            size: "list_object.size",
        },
    ),
    ("float_object.size", Size),
    (
        "float_object.ob_fval",
        Field {
            width: 8,
            size: "float_object.size",
        },
    ),
    ("set_object.size", Size),
    (
        "set_object.used",
        Field {
            width: 8,
            size: "set_object.size",
        },
    ),
    (
        "set_object.mask",
        Field {
            width: 8,
            size: "set_object.size",
        },
    ),
    (
        "set_object.table",
        Field {
            width: 8,
            size: "set_object.size",
        },
    ),
    ("pyobject.size", Size),
    (
        "pyobject.ob_type",
        Field {
            width: 8,
            size: "pyobject.size",
        },
    ),
    ("type_object.size", Size),
    (
        "type_object.tp_name",
        Field {
            width: 8,
            size: "type_object.size",
        },
    ),
    ("bytes_object.size", Size),
    (
        "bytes_object.ob_size",
        Field {
            width: 8,
            size: "bytes_object.size",
        },
    ),
    ("bytes_object.ob_sval", BytesData),
    ("unicode_object.size", Size),
    (
        "unicode_object.state",
        Field {
            width: 4,
            size: "unicode_object.size",
        },
    ),
    (
        "unicode_object.length",
        Field {
            width: 8,
            size: "unicode_object.size",
        },
    ),
    ("unicode_object.asciiobject_size", UnicodeHeader),
    ("unicode_object.compactunicodeobject_size", UnicodeHeader),
    // Thread names (src/offsets/objects.rs).
    (
        "interpreter_state.imports_modules",
        Field {
            width: 8,
            size: "interpreter_state.size",
        },
    ),
    ("dict_object.size", Size),
    (
        "dict_object.ma_keys",
        Field {
            width: 8,
            size: "dict_object.size",
        },
    ),
    (
        "dict_object.ma_values",
        Field {
            width: 8,
            size: "dict_object.size",
        },
    ),
    ("long_object.size", Size),
    (
        "long_object.lv_tag",
        Field {
            width: 8,
            size: "long_object.size",
        },
    ),
    (
        "long_object.ob_digit",
        Field {
            width: 4,
            size: "long_object.size",
        },
    ),
    (
        "type_object.tp_flags",
        Field {
            width: 8,
            size: "type_object.size",
        },
    ),
    (
        "type_object.tp_basicsize",
        Field {
            width: 8,
            size: "type_object.size",
        },
    ),
    ("heap_type_object.size", Size),
    (
        "heap_type_object.ht_cached_keys",
        Field {
            width: 8,
            size: "heap_type_object.size",
        },
    ),
];

/// Corrupt values for one field whose real value is `v`.
fn corruptions(raw: &RawTable, kind: Kind, v: u64) -> Vec<(&'static str, u64)> {
    let mut m = vec![("u64::MAX", u64::MAX), ("2^40", 1 << 40)];
    match kind {
        Size => m.extend([("zero", 0), ("one", 1)]),
        Field { width, size } => {
            let s = raw.get(size).unwrap();
            m.extend([
                ("at the struct's end", s),
                ("wraps around", u64::MAX - width + 1),
            ]);
            if width > 1 {
                m.extend([
                    ("misaligned by 1", v + 1),
                    ("misaligned by half", v + width / 2),
                ]);
                m.push(("straddles the struct's end", s - width / 2));
            }
        }
        Bytecode => {
            let s = raw.get("code_object.size").unwrap();
            m.extend([
                ("past the struct", s + 2),
                ("odd", v + 1),
                ("zero", 0),
                (
                    "inside the header",
                    raw.get("code_object.filename").unwrap(),
                ),
            ]);
        }
        BytesData => {
            let s = raw.get("bytes_object.size").unwrap();
            m.extend([
                ("at the struct's end", s),
                ("zero", 0),
                ("on ob_size", raw.get("bytes_object.ob_size").unwrap()),
            ]);
        }
        UnicodeHeader => {
            let s = raw.get("unicode_object.size").unwrap();
            m.extend([
                ("past the struct", s + 8),
                ("misaligned", v + 1),
                ("zero", 0),
            ]);
        }
    }
    m
}

#[test]
fn every_corrupt_field_is_refused_by_name_or_unused() {
    let mut problems = Vec::new();
    let mut refused = 0;
    let mut harmless = 0;
    for (name, bytes) in fixtures() {
        let raw = decode(&bytes).unwrap();
        let good = format!("{:?}", offsets(&raw).unwrap());
        let spec_for = |f: &str| SPEC.iter().find(|(n, _)| *n == f).map(|(_, k)| *k);
        for &(field, v) in raw.fields() {
            if ["version", "free_threaded"].contains(&field) {
                continue;
            }
            let muts = match spec_for(field) {
                Some(kind) => corruptions(&raw, kind, v),
                // Fields tachyon does not read: anything goes, nothing changes.
                None => vec![
                    ("u64::MAX", u64::MAX),
                    ("misaligned", v ^ 0x5a5a_0001),
                    ("zero", 0),
                ],
            };
            for (what, value) in muts {
                let mut bad = raw.clone();
                assert!(bad.set(field, value));
                match offsets(&bad) {
                    Err(Error::InvalidOffsets {
                        what: msg, version, ..
                    }) => {
                        assert_eq!(version, raw.version.to_string());
                        if msg.contains(field) {
                            refused += 1;
                        } else {
                            problems.push(format!("{name}: {field} {what} ({value}): refused, but the message does not name it: {msg}"));
                        }
                    }
                    Err(e) => problems.push(format!(
                        "{name}: {field} {what} ({value}): wrong error kind: {e}"
                    )),
                    Ok(o) if format!("{o:?}") == good => {
                        if spec_for(field).is_some() && !field.starts_with("runtime_state.size") {
                            problems.push(format!("{name}: {field} {what} ({value}): accepted and ignored, but tachyon reads this field"));
                        } else {
                            harmless += 1;
                        }
                    }
                    Ok(_) => problems.push(format!(
                        "{name}: {field} {what} ({value}): ACCEPTED, and the unwinder would use it"
                    )),
                }
            }
        }
        // The spec must name real fields of this version's layout (typos
        // would silently skip checks).
        for (f, _) in SPEC {
            let optional = [
                "interpreter_state.threads_main",
                "interpreter_state.code_object_generation",
                "gc.frame",
                "thread_state.base_frame",
                "thread_state.last_profiled_frame",
                "thread_state.last_profiled_frame_seq",
                "thread_state.holds_gil",
                "thread_state.gil_requested",
                "thread_state.current_exception",
                "thread_state.exc_state",
                "err_stackitem.exc_value",
                "unicode_object.compactunicodeobject_size",
                "type_object.tp_basicsize",
                "heap_type_object.size",
                "heap_type_object.ht_cached_keys",
                // 3.14+ only.
                "set_object.size",
                "set_object.used",
                "set_object.mask",
                "set_object.table",
            ];
            assert!(
                raw.get(f).is_some() || optional.contains(f),
                "{name}: {f} not in the layout"
            );
        }
    }
    println!("{refused} corruptions refused by name, {harmless} harmless (field unused)");
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// A table decoded with another minor version's layout must not validate:
/// every field would be read from the wrong slot.
#[test]
fn a_table_relabelled_as_another_minor_is_refused() {
    for (name, bytes) in fixtures() {
        let real = decode(&bytes).unwrap().version;
        for minor in [13u64, 14, 15] {
            if minor == real.minor as u64 {
                continue;
            }
            let mut b = bytes.clone();
            b.resize(layout::table_size(minor as u8).unwrap().max(b.len()), 0);
            set_word(&mut b, 1, version_hex(3, minor, 1, 0xF, 0));
            match decode(&b).and_then(|r| offsets(&r)) {
                Err(Error::InvalidOffsets { .. }) => {}
                other => panic!("{name} read as 3.{minor}: {other:?}"),
            }
        }
    }
}

/// tachyon writes the 3.15 frame-cache mark (`--frame-cache`): a table that
/// moves the mark or its count onto another field of the thread state (its
/// first word, the current frame, each other) is refused by name, so that
/// no write lands anywhere but the mark; the real tables give the fields
/// PyThreadState declares.
#[test]
fn a_315_mark_moved_onto_another_field_is_refused() {
    let mut checked = 0;
    for (name, bytes) in fixtures() {
        let raw = decode(&bytes).unwrap();
        if raw.version.minor != 15 {
            continue;
        }
        checked += 1;
        let o = offsets(&raw).unwrap();
        let get = |f: &str| raw.get(f).unwrap();
        let (mark, seq) = (
            get("thread_state.last_profiled_frame"),
            get("thread_state.last_profiled_frame_seq"),
        );
        assert_eq!(o.tstate_last_profiled, Some((mark, seq)), "{name}");
        assert_eq!(
            (mark, seq),
            (get("thread_state.base_frame") + 8, mark + 8),
            "{name}"
        );
        for (field, onto) in [
            ("thread_state.last_profiled_frame", 0),
            (
                "thread_state.last_profiled_frame",
                get("thread_state.current_frame"),
            ),
            ("thread_state.last_profiled_frame", seq),
            ("thread_state.last_profiled_frame_seq", mark),
            (
                "thread_state.last_profiled_frame_seq",
                get("thread_state.next"),
            ),
        ] {
            let mut bad = raw.clone();
            assert!(bad.set(field, onto));
            match offsets(&bad) {
                Err(Error::InvalidOffsets { what, .. }) if what.contains(field) => {}
                other => panic!("{name}: {field} moved to {onto}: {other:?}"),
            }
        }
    }
    assert!(checked > 0, "no 3.15 fixture");
}

/// Prints every `Offsets` tachyon computes, and the verdict on a fixed set
/// of corruptions of every field, for the live interpreters, the fixtures
/// and the carried layouts: run before and after a change to the
/// validator and diff the outputs (`cargo test --test offsets dump_offsets
/// -- --ignored --nocapture`).
#[test]
#[ignore = "prints offsets for a before/after comparison"]
fn dump_offsets() {
    let mut all = interpreters();
    all.extend(common::machine_old_interpreters());
    for interp in all {
        let (t, version, debug) = start(&interp);
        let proc = LinuxProcess::open(t.pid()).unwrap();
        let rt = tachyon::session::locate(&proc).unwrap();
        println!(
            "LIVE {} {}: {:?}",
            interp.name,
            fixture_name(&version, debug),
            rt.offsets
        );
    }
    let verdict = |r: tachyon::Result<Offsets>| match r {
        Ok(o) => format!("{o:?}"),
        Err(e) => format!("ERR {e}"),
    };
    let mut tables: Vec<(String, RawTable, bool)> = fixtures()
        .into_iter()
        .map(|(n, b)| (n, decode(&b).unwrap(), false))
        .collect();
    for c in tachyon::offsets::carried::CARRIED {
        let v = tachyon::offsets::PyVersion::from_hex(0x0300_01f0 | (c.minor as u64) << 16);
        tables.push((format!("carried-3.{}", c.minor), c.table(v), true));
    }
    for (name, raw, carried) in tables {
        let run = |r: &RawTable| {
            verdict(if carried {
                Offsets::from_carried(PID, r)
            } else {
                Offsets::from_raw(PID, r)
            })
        };
        println!("TABLE {name}: {}", run(&raw));
        for &(field, v) in raw.fields() {
            let size = field
                .rsplit_once('.')
                .and_then(|(s, _)| raw.get(&format!("{s}.size")))
                .unwrap_or(0);
            for value in [
                u64::MAX,
                1 << 40,
                0,
                1,
                v + 1,
                v + 2,
                v + 4,
                v + 8,
                v.saturating_sub(8),
                size,
                size.saturating_sub(2),
                size.saturating_sub(8),
            ] {
                let mut bad = raw.clone();
                bad.set(field, value);
                println!("MUT {name} {field}={value}: {}", run(&bad));
            }
        }
    }
}

/// The tables free-threaded 3.14 and 3.15 would carry, made from their
/// headers (scripts/probe-ft-tables.sh; these interpreters cannot be built
/// here). They pass the validator, and what tachyon takes from them is
/// what the headers say: their frames run per-thread copies of bytecode
/// (`co_tlbc`, selected by the frame's `tlbc_index`, which pushes the
/// frame's owner byte from 74 to 78), and their stack references carry
/// `Py_TAG_BITS` of their own (1 in 3.14t, 3 in 3.15).
#[test]
fn free_threaded_314_and_315_tables_give_their_bytecode_copies() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/offsets-ft");
    for minor in [14u8, 15] {
        let bytes = std::fs::read(dir.join(format!("3.{minor}t-headers.bin")))
            .expect("fixtures/offsets-ft is missing (scripts/probe-ft-tables.sh)");
        let names = layout::layout(minor).unwrap();
        assert_eq!(bytes.len(), names.len() * 8, "3.{minor}t: table size");
        let field = |name: &str| -> u64 {
            let i = names.iter().position(|n| *n == name).unwrap();
            u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap())
        };
        assert_eq!(field("free_threaded"), 1, "3.{minor}t");
        assert_eq!(field("pyobject.ob_type"), 24, "3.{minor}t");
        let raw = decode(&bytes).unwrap_or_else(|e| panic!("3.{minor}t: {e}"));
        let o = offsets(&raw).unwrap_or_else(|e| panic!("3.{minor}t: {e}"));
        assert!(o.free_threaded, "3.{minor}t");
        assert_eq!(
            o.frame_tlbc_index,
            Some(field("interpreter_frame.tlbc_index")),
            "3.{minor}t"
        );
        assert!(o.frame_owner > o.frame_tlbc_index.unwrap(), "3.{minor}t");
        assert_eq!(
            o.code_tlbc,
            Some(field("code_object.co_tlbc")),
            "3.{minor}t"
        );
        assert_eq!(o.code_tlbc.unwrap() + 8, o.code_adaptive, "3.{minor}t");
        assert_eq!(
            o.interp_tlbc_generation,
            Some(field("interpreter_state.tlbc_generation")),
            "3.{minor}t"
        );
        let tag_bits = if minor == 14 { 1 } else { 3 };
        assert_eq!(o.tag_mask, !tag_bits, "3.{minor}t");

        // Each bytecode-copy field moved onto its neighbour is refused.
        for (name, to) in [
            (
                "interpreter_frame.tlbc_index",
                field("interpreter_frame.instr_ptr"),
            ),
            ("code_object.co_tlbc", field("code_object.co_code_adaptive")),
            ("interpreter_state.tlbc_generation", 0),
        ] {
            let mut b = bytes.clone();
            let i = names.iter().position(|n| *n == name).unwrap();
            set_word(&mut b, i, to);
            match decode(&b).and_then(|r| offsets(&r)) {
                Err(e @ Error::InvalidOffsets { .. }) => {
                    assert!(e.to_string().contains(name), "3.{minor}t {name}: {e}")
                }
                other => panic!("3.{minor}t: {name} = {to} gave {other:?}"),
            }
        }
    }
}
