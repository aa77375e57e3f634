//! `--native-frames`: real C frames between the Python frames, in true
//! call order, on every interpreter the machine has.
//!
//! A C extension is built in the test with gcc against each interpreter's
//! own headers: `spin_c(n)` loops in C, `call_back(fn)` calls a Python
//! function. The program's stack while it spins is `<module>` → `outer`
//! → `call_back` (C) → `inner` → `spin_c` (C): every stack tachyon
//! reports must be a whole, unspliced piece of that chain.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{
    Interp, RootDir, machine_old_interpreters, machine_supported_interpreters, sid_interpreters,
    spawn, tachyon_ok,
};

const EXTENSION: &str = r#"#define PY_SSIZE_T_CLEAN
#include <Python.h>
static volatile unsigned long sink;
static PyObject *spin_c(PyObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    for (long i = 0; i < n; i++) sink += i * 7;
    Py_RETURN_NONE;
}
static PyObject *call_back(PyObject *self, PyObject *fn) {
    PyObject *r = PyObject_CallNoArgs(fn);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {
    {"spin_c", spin_c, METH_O, "spin in C"},
    {"call_back", call_back, METH_O, "call fn from C"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "spinext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_spinext(void) { return PyModule_Create(&mod); }
"#;

/// The main thread spins through the chain; a second thread sleeps.
const PROGRAM: &str = r#"import sys, threading, time
sys.path.insert(0, sys.argv[1])
import spinext
def inner():
    spinext.spin_c(200000)
def outer():
    spinext.call_back(inner)
def sleeper():
    while True:
        time.sleep(10)
threading.Thread(target=sleeper, daemon=True).start()
print("ready", flush=True)
while True:
    outer()
"#;

/// Run `interp` with `args` (under chroot when it lives in a root): its
/// standard output.
fn run_python(interp: &Interp, args: &[&str]) -> String {
    let mut cmd = match &interp.root {
        Some(root) => {
            let mut c = Command::new("chroot");
            c.arg(root).arg(&interp.exe);
            c
        }
        None => Command::new(&interp.exe),
    };
    let out = cmd.args(args).output().expect("cannot run the interpreter");
    assert!(out.status.success(), "{}: {:?}", interp.name, out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Build the extension for `interp` into `dir`, with more gcc `flags`;
/// the directory to put on its `sys.path`, as the interpreter sees it.
fn build_extension(interp: &Interp, dir: &RootDir, flags: &[&str]) -> String {
    let info = run_python(
        interp,
        &[
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))",
        ],
    );
    let mut lines = info.lines();
    let (include, suffix) = (lines.next().unwrap(), lines.next().unwrap());
    let outside = |p: &str| match &interp.root {
        Some(root) => root.join(p.trim_start_matches('/')),
        None => PathBuf::from(p),
    };
    let include = outside(include);
    assert!(
        include.join("Python.h").exists(),
        "{}: no Python.h in {} (the sid root's python3.X-dev: scripts/provision-sid.sh)",
        interp.name,
        include.display()
    );
    std::fs::write(dir.outside("spinext.c"), EXTENSION).unwrap();
    let mut gcc = Command::new("gcc");
    gcc.args(["-shared", "-fPIC", "-O2"])
        .args(flags)
        .arg("-I")
        .arg(&include);
    if let Some(root) = &interp.root {
        // pyconfig.h includes its platform's copy by a path below the
        // root's /usr/include; the machine's own C headers come first.
        gcc.arg("-idirafter").arg(root.join("usr/include"));
    }
    let so = dir.outside(&format!("spinext{suffix}"));
    let out = gcc
        .arg(dir.outside("spinext.c"))
        .arg("-o")
        .arg(&so)
        .output()
        .expect("cannot run gcc");
    assert!(
        out.status.success(),
        "{}: gcc failed: {}",
        interp.name,
        String::from_utf8_lossy(&out.stderr)
    );
    match &interp.root {
        Some(_) => dir.inside.to_string_lossy().into_owned(),
        None => dir.outside.to_string_lossy().into_owned(),
    }
}

/// Each line of a collapsed profile as its frames (`file:func:line`, root
/// first) and its count.
fn stacks(collapsed: &str) -> Vec<(Vec<String>, u64)> {
    collapsed
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            let frames = stack.split(';').skip(1).map(str::to_string).collect();
            Some((frames, n.parse().ok()?))
        })
        .collect()
}

/// The function of a collapsed frame `file:func:line`.
fn func(frame: &str) -> &str {
    let mut parts = frame.rsplitn(3, ':');
    let _line = parts.next();
    parts.next().unwrap_or(frame)
}

/// The positions of the chain's frames in `frames`, in order, checked to
/// be a whole piece of `<module>` → `outer` → `call_back` → `inner` →
/// `spin_c`, nothing spliced between them but hidden frames.
fn check_chain(who: &str, frames: &[String]) -> usize {
    let chain = ["<module>", "outer", "call_back", "inner", "spin_c"];
    let found: Vec<&str> = frames
        .iter()
        .map(|f| func(f))
        .filter(|f| chain.contains(f))
        .collect();
    assert!(
        chain.starts_with(&found),
        "{who}: the stack is not a piece of the program's chain: {frames:?}"
    );
    for f in frames {
        if func(f) == "call_back" || func(f) == "spin_c" {
            assert!(
                f.starts_with("spinext"),
                "{who}: {f} is not named with its module: {frames:?}"
            );
        }
    }
    found.len()
}

fn interpreters() -> Vec<Interp> {
    let mut v = machine_old_interpreters();
    v.extend(machine_supported_interpreters());
    v.extend(sid_interpreters());
    v
}

/// The sid interpreter 3.`minor` (release build).
fn sid(minor: u8) -> Interp {
    sid_interpreters()
        .into_iter()
        .find(|i| i.minor == minor && !i.debug)
        .unwrap()
}

/// `program` started under `interp` and ready, with the extension built
/// with `flags` on its path (none when `flags` is `None`), and the
/// directory the test writes in.
fn start(interp: &Interp, program: &str, flags: Option<&[&str]>) -> (common::Target, RootDir) {
    let dir = RootDir::new(&[]);
    let args = match flags {
        Some(flags) => vec![build_extension(interp, &dir, flags)],
        None => Vec::new(),
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut target = spawn(interp, program, &[], &args);
    target.wait_for("ready", Duration::from_secs(60));
    (target, dir)
}

/// `tachyon attach OPTIONS -d SECONDS -r 200 --collapsed` on `target`,
/// written in `dir`: the collapsed profile and tachyon's summary.
fn attach(
    target: &common::Target,
    dir: &RootDir,
    options: &[&str],
    seconds: &str,
) -> (String, String) {
    let out = dir.outside("profile.txt");
    let pid = target.pid().to_string();
    let mut args = vec!["attach"];
    args.extend(options);
    args.extend(["-d", seconds, "-r", "200", "--collapsed", "-o"]);
    args.extend([out.to_str().unwrap(), &pid]);
    let stdout = tachyon_ok(&args, &dir.outside);
    (std::fs::read_to_string(&out).unwrap(), stdout)
}

#[test]
fn c_frames_sit_between_the_python_frames_that_call_them() {
    let mut failures = Vec::new();
    for interp in interpreters() {
        let (target, dir) = start(&interp, PROGRAM, Some(&[]));
        let (collapsed, stdout) = attach(&target, &dir, &["--native-frames", "-a"], "2");
        let who = &interp.name;
        let all = stacks(&collapsed);
        let whole: u64 = all
            .iter()
            .filter(|(f, _)| check_chain(who, f) == 5)
            .map(|(_, n)| n)
            .sum();
        assert!(
            whole > 0,
            "{who}: no stack shows the whole chain:\n{collapsed}\n{stdout}"
        );
        // The sleeping thread: the sleep's own C frames above it.
        // (A stripped libc may add unnamed frames of its own above it.)
        let sleeps = all.iter().any(|(f, _)| {
            f.iter()
                .position(|x| func(x) == "sleeper")
                .is_some_and(|at| {
                    f[at + 1..].iter().any(|l| {
                        let n = func(l);
                        // (libc's file, or its source where its debug
                        // file is installed)
                        n.contains("nanosleep") || n.contains("select") || n.contains("poll")
                    })
                })
        });
        if !sleeps {
            failures.push(format!(
                "{who}: no sleeping stack ends in the sleep's C call:\n{collapsed}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn all_keeps_the_interpreters_own_frames_and_the_threads_start() {
    let (target, dir) = start(&sid(14), PROGRAM, Some(&[]));
    let (collapsed, _) = attach(&target, &dir, &["--native-frames=all"], "1");
    let all = stacks(&collapsed);
    let full = all
        .iter()
        .find(|(f, _)| check_chain("all", f) == 5)
        .unwrap_or_else(|| panic!("no whole chain:\n{collapsed}"));
    let names: Vec<&str> = full.0.iter().map(|f| func(f)).collect();
    // The process's start, below the outermost Python frame.
    assert!(
        names.contains(&"Py_BytesMain") && names.contains(&"__libc_start_main"),
        "{names:?}"
    );
    // The interpreter's call machinery between call_back and inner.
    let cb = names.iter().position(|&n| n == "call_back").unwrap();
    let inner = names.iter().position(|&n| n == "inner").unwrap();
    assert!(
        names[cb + 1..inner].contains(&"PyObject_CallNoArgs"),
        "{names:?}"
    );
}

/// Two threads deadlocked on two locks, and the main thread spinning.
const DEADLOCK: &str = r#"import sys, threading, time
sys.path.insert(0, sys.argv[1])
import spinext
a = threading.Lock()
b = threading.Lock()
def t1():
    with a:
        time.sleep(0.2)
        with b:
            pass
def t2():
    with b:
        time.sleep(0.2)
        with a:
            pass
threading.Thread(target=t1, daemon=True).start()
threading.Thread(target=t2, daemon=True).start()
time.sleep(0.5)
print("ready", flush=True)
def inner():
    spinext.spin_c(200000)
def outer():
    spinext.call_back(inner)
while True:
    outer()
"#;

#[test]
fn dump_shows_both_deadlocked_threads_waiting_in_c() {
    let mut interps = machine_old_interpreters();
    interps.retain(|i| i.name == "pyenv-3.12");
    interps.extend(sid_interpreters().into_iter().filter(|i| i.minor == 15));
    assert_eq!(interps.len(), 3, "pyenv 3.12, sid 3.15 and 3.15d");
    for interp in interps {
        let (target, dir) = start(&interp, DEADLOCK, Some(&[]));
        let pid = target.pid().to_string();
        let who = &interp.name;
        // A dump is one instant: a few, until the main thread is inside
        // `inner` (not between calls, where debug builds spend longer).
        let mut text = String::new();
        for _ in 0..20 {
            text = tachyon_ok(&["dump", "--native-frames", "-a", &pid], &dir.outside);
            if text.contains("in inner") {
                break;
            }
        }
        // Each stack, most recent call last: its lines after the header.
        let stacks: Vec<&str> = text.split("Stack dump").skip(1).collect();
        for t in ["in t1", "in t2"] {
            let s = stacks
                .iter()
                .find(|s| s.contains(t))
                .unwrap_or_else(|| panic!("{who}: no stack {t}:\n{text}"));
            let after = &s[s.find(t).unwrap()..];
            // The lock's wait in the interpreter's C: 3.11/3.12 through
            // PyThread_acquire_lock_timed, 3.13+ through its parking lot.
            assert!(
                [
                    "[native] PyThread_acquire_lock_timed (",
                    "[native] _PySemaphore_Wait ("
                ]
                .iter()
                .any(|w| after.contains(w)),
                "{who}: the thread {t} does not show its wait in C:\n{s}"
            );
        }
        let main = stacks
            .iter()
            .find(|s| s.contains("in inner"))
            .unwrap_or_else(|| panic!("{who}: no stack in inner:\n{text}"));
        let (o, c, i) = (
            main.find("in outer").unwrap(),
            main.find("[native] call_back (spinext").unwrap_or(0),
            main.find("in inner").unwrap_or(0),
        );
        assert!(
            o < c && c < i,
            "{who}: call_back is not between outer and inner:\n{main}"
        );
        // As JSON, the native frames have their kind and module. A dump is
        // one instant, maybe one between calls of the extension (debug
        // builds spend longer there): a few dumps until one is inside it.
        let mut json = String::new();
        let in_extension = |json: &str| {
            let doc: serde_json::Value = serde_json::from_str(json).unwrap();
            doc["threads"][0]["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| {
                    f["kind"] == "native_function"
                        && (f["function"] == "spin_c" || f["function"] == "call_back")
                        && f["file"].as_str().unwrap_or("").starts_with("spinext")
                })
        };
        for _ in 0..20 {
            json = tachyon_ok(&["dump", "--native-frames", "--json", &pid], &dir.outside);
            let file = dir.outside("dump.json");
            std::fs::write(&file, &json).unwrap();
            common::validate_schema("docs/dump.schema.json", &[&file]);
            if in_extension(&json) {
                break;
            }
        }
        assert!(in_extension(&json), "{who}: {json}");
    }
}

/// numpy's C under the Python lines that call it: a matrix product in
/// BLAS, a sort in numpy's SIMD sort.
const NUMPY: &str = r#"import numpy as np
a = np.random.rand(300, 300)
x = np.random.rand(1_000_000)
def dot():
    return a @ a
def sort():
    return np.sort(x)
print("ready", flush=True)
while True:
    dot()
    sort()
"#;

#[test]
fn numpy_shows_blas_under_dot_and_its_sort_under_sort() {
    // The sid root's numpy is built for 3.14 and 3.15.
    for interp in sid_interpreters()
        .into_iter()
        .filter(|i| i.minor >= 14 && !i.debug)
    {
        let who = &interp.name;
        let (target, dir) = start(&interp, NUMPY, None);
        let (collapsed, stdout) = attach(&target, &dir, &["--native-frames"], "3");
        let all = stacks(&collapsed);
        // Below the Python function `py`, a native frame of a module
        // starting `module` whose name satisfies `named`.
        let under = |py: &str, module: &str, named: &dyn Fn(&str) -> bool| {
            all.iter().any(|(f, _)| {
                f.iter().position(|x| func(x) == py).is_some_and(|at| {
                    f[at + 1..]
                        .iter()
                        .any(|x| x.starts_with(module) && named(func(x)))
                })
            })
        };
        assert!(
            under("dot", "libblas", &|n| n.contains("gemm")),
            "{who}: no BLAS gemm under dot:\n{collapsed}\n{stdout}"
        );
        assert!(
            under("sort", "_multiarray_umath", &|n| n
                .to_lowercase()
                .contains("sort")),
            "{who}: no numpy sort under sort:\n{collapsed}\n{stdout}"
        );
        // numpy's SIMD sorts realign their stack (a CFA expression, which
        // framehop leaves to us): unwound, not failed. The threads are
        // stopped for each sample, so how many fail does not depend on the
        // machine's load; without the realigned rule it was 20-30%.
        let rate: f64 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("Error rate: "))
            .and_then(|r| r.trim().trim_end_matches('%').parse().ok())
            .unwrap_or_else(|| panic!("{who}: no error rate in:\n{stdout}"));
        assert!(rate < 10.0, "{who}: {rate}% of samples failed:\n{stdout}");
    }
}

#[test]
fn a_recording_keeps_native_frames_for_both_replays() {
    let interp = machine_old_interpreters()
        .into_iter()
        .find(|i| i.name == "pyenv-3.12")
        .unwrap();
    let (target, dir) = start(&interp, PROGRAM, Some(&[]));
    let pid = target.pid().to_string();
    let rec = dir.outside("rec.bin");
    tachyon_ok(
        &[
            "attach",
            "--native-frames",
            "--binary",
            "-d",
            "1",
            "-r",
            "200",
            "-o",
            rec.to_str().unwrap(),
            &pid,
        ],
        &dir.outside,
    );
    drop(target);
    // tachyon's replay: native frames again, in their own colour.
    tachyon_ok(
        &["replay", "--flamegraph", "-o", "f.html", "rec.bin"],
        &dir.outside,
    );
    let d = common::flame_data(&std::fs::read_to_string(dir.outside("f.html")).unwrap());
    let (strings, frames) = (
        d["strings"].as_array().unwrap(),
        d["frames"].as_array().unwrap(),
    );
    let kind_of = |name: &str| {
        frames
            .chunks(5)
            .find(|f| strings[f[0].as_u64().unwrap() as usize] == name)
            .map(|f| f[4].as_u64().unwrap())
    };
    assert_eq!(kind_of("spin_c"), Some(7), "spin_c: a native frame");
    assert_eq!(kind_of("call_back"), Some(7), "call_back: a native frame");
    assert_ne!(kind_of("inner"), Some(7), "inner: a Python frame");
    // The reference's replay reads it: the module as the file, line 0.
    common::reference_replays(&dir);
    let theirs = std::fs::read_to_string(dir.outside("ref.txt")).unwrap();
    assert!(
        stacks(&theirs)
            .iter()
            .any(|(f, _)| check_chain("reference", f) == 5),
        "the reference's replay lost the chain:\n{theirs}"
    );
}

/// The chain's stacks of `interp` sampled with the extension built with
/// `flags`: every stack must be a whole piece of the chain. Returns the
/// collapsed profile and tachyon's summary.
fn sample_chain(interp: &Interp, flags: &[&str]) -> (String, String) {
    let (target, dir) = start(interp, PROGRAM, Some(flags));
    let (collapsed, stdout) = attach(&target, &dir, &["--native-frames"], "2");
    for (f, _) in stacks(&collapsed) {
        check_chain(&interp.name, &f);
    }
    (collapsed, stdout)
}

#[test]
fn an_extension_without_unwind_tables_is_walked_by_frame_pointers_or_fails() {
    let interp = sid(15);
    let no_tables = ["-fno-asynchronous-unwind-tables", "-fno-unwind-tables"];
    // With frame pointers, framehop's fallback walks through it whole.
    let mut flags = no_tables.to_vec();
    flags.push("-fno-omit-frame-pointer");
    let (collapsed, stdout) = sample_chain(&interp, &flags);
    assert!(
        stacks(&collapsed)
            .iter()
            .any(|(f, _)| check_chain("frame pointers", f) == 5),
        "no whole chain through frame pointers:\n{collapsed}\n{stdout}"
    );
    // Without them the walk may be lost in it: failed samples, but every
    // stack reported is whole (sample_chain checks each).
    sample_chain(&interp, &no_tables);
}

/// Threads that start and end all the time (a few hundred a second), each
/// calling into C for a few milliseconds: long enough that a worker is in
/// C at most instants however loaded the machine, which slows the thread
/// starts as much as the spinning.
const CHURN: &str = r#"import sys, threading, time
sys.path.insert(0, sys.argv[1])
import spinext
def work():
    spinext.spin_c(2000000)
print("ready", flush=True)
while True:
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
"#;

#[test]
fn threads_that_come_and_go_cost_samples_not_the_profile() {
    let (mut target, dir) = start(&sid(14), CHURN, Some(&[]));
    let (collapsed, stdout) = attach(&target, &dir, &["--native-frames", "-a"], "2");
    // A worker's stack: its Python frames, then spin_c in C.
    assert!(
        stacks(&collapsed).iter().any(|(f, _)| {
            let names: Vec<&str> = f.iter().map(|x| func(x)).collect();
            names.ends_with(&["work", "spin_c"])
        }),
        "no worker in C:\n{collapsed}\n{stdout}"
    );
    // The program goes on after tachyon detached.
    assert!(
        target.child.try_wait().unwrap().is_none(),
        "the program ended"
    );
}

/// Code in an anonymous executable mapping (what a JIT makes): it calls
/// a Python callback through ctypes. It has no file, no symbol and no
/// unwind table.
const JIT: &str = r#"import ctypes, mmap
# push %rbp; mov %rsp,%rbp; mov %rdi,%rax; call *%rax; pop %rbp; ret
code = bytes([0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf8, 0xff, 0xd0, 0x5d, 0xc3])
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
CB = ctypes.CFUNCTYPE(None)
jit = ctypes.CFUNCTYPE(None, CB)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
def inner():
    s = 0
    for i in range(100000):
        s += i
cb = CB(inner)
def outer():
    jit(cb)
print("ready", flush=True)
while True:
    outer()
"#;

#[test]
fn code_in_an_anonymous_mapping_fails_samples_never_splices() {
    let (mut target, dir) = start(&sid(14), JIT, None);
    let (collapsed, stdout) = attach(&target, &dir, &["--native-frames"], "2");
    // A stack from outer to inner must pass through the JIT's frame: the
    // walk cannot unwind it (no table, no symbol to trust its frame
    // pointer by), so such samples fail rather than skip it.
    for (f, _) in stacks(&collapsed) {
        let names: Vec<&str> = f.iter().map(|x| func(x)).collect();
        if let (Some(o), Some(i)) = (
            names.iter().position(|&n| n == "outer"),
            names.iter().position(|&n| n == "inner"),
        ) {
            assert!(
                f[o..i].iter().any(|x| x.starts_with("[anonymous]:")),
                "outer and inner with no JIT frame between them: {f:?}"
            );
        }
    }
    assert!(stdout.contains("Error rate: "), "no summary:\n{stdout}");
    assert!(
        target.child.try_wait().unwrap().is_none(),
        "the program ended"
    );
}

/// The native frames of a `dump --native-frames --json` as (function,
/// file, line), per thread.
fn native_frames_by_thread(json: &str) -> Vec<Vec<(String, String, i64)>> {
    let doc: serde_json::Value = serde_json::from_str(json).unwrap();
    doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["frames"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["kind"] == "native_function")
                .map(|f| {
                    (
                        f["function"].as_str().unwrap_or("").to_string(),
                        f["file"].as_str().unwrap_or("").to_string(),
                        f["line"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .collect()
}

#[test]
fn debug_information_gives_native_frames_their_source_lines() {
    // sid's release 3.13 has its DWARF in a separate, compressed file
    // (python3.13-dbg's /usr/lib/debug/.build-id); 3.14d has its own. The
    // extension is built with -g.
    let interps: Vec<Interp> = sid_interpreters()
        .into_iter()
        .filter(|i| (i.minor, i.debug) == (13, false) || (i.minor, i.debug) == (14, true))
        .collect();
    assert_eq!(interps.len(), 2);
    for interp in interps {
        let who = &interp.name;
        let (target, dir) = start(&interp, PROGRAM, Some(&["-g"]));
        let pid = target.pid().to_string();
        let (mut sleep, mut spin) = (None, None);
        let mut json = String::new();
        for _ in 0..20 {
            let args = ["dump", "--native-frames", "-a", "--json", &pid];
            json = tachyon_ok(&args, &dir.outside);
            for frames in native_frames_by_thread(&json) {
                for (func, file, line) in frames {
                    if func.starts_with("time_sleep") {
                        sleep = Some((file, line));
                    } else if func == "spin_c" {
                        spin = Some((file, line));
                    }
                }
            }
            if sleep.is_some() && spin.is_some() {
                break;
            }
        }
        let (file, line) = sleep.unwrap_or_else(|| panic!("{who}: no time_sleep frame: {json}"));
        assert!(
            file.ends_with("Modules/timemodule.c") && line > 0,
            "{who}: time_sleep at {file}:{line}"
        );
        // spin_c's body is lines 4-8 of the extension's source.
        let (file, line) = spin.unwrap_or_else(|| panic!("{who}: no spin_c frame: {json}"));
        assert!(
            file.ends_with("spinext.c") && (4..=8).contains(&line),
            "{who}: spin_c at {file}:{line}"
        );
    }
}

#[test]
fn a_core_shows_the_native_frames_a_live_dump_shows() {
    // The deadlocked threads stand still: a live dump, then a core (gdb's
    // gcore) of the same instant as far as they are concerned. sid's 3.13
    // names its C by its separate debug file, found below --sysroot.
    let mut interps = machine_old_interpreters();
    interps.retain(|i| i.name == "pyenv-3.12");
    interps.push(sid(13));
    assert_eq!(interps.len(), 2);
    for interp in interps {
        let who = &interp.name;
        let (target, dir) = start(&interp, DEADLOCK, Some(&["-g"]));
        let pid = target.pid().to_string();
        let live = tachyon_ok(&["dump", "--native-frames", "-a", &pid], &dir.outside);
        let core = common::gcore(&target);
        let mut args = vec!["dump", "--native-frames", "-a", "--core"];
        args.push(core.to_str().unwrap());
        let sysroot = common::sysroot_args(&interp);
        args.extend(sysroot.iter().map(String::as_str));
        let dumped = tachyon_ok(&args, &dir.outside);
        // The two waiting threads' stacks, Python and native, line for line.
        let waiting = |text: &str, t: &str| -> String {
            text.split("Stack dump")
                .find(|s| s.contains(&format!("in {t}\n")))
                .map(|s| s.lines().skip(1).collect::<Vec<_>>().join("\n"))
                .unwrap_or_else(|| panic!("{who}: no stack in {t}:\n{text}"))
        };
        for t in ["t1", "t2"] {
            let (a, b) = (waiting(&live, t), waiting(&dumped, t));
            assert!(
                a.contains("[native] ") && a == b,
                "{who}: thread {t} live:\n{a}\nfrom its core:\n{b}"
            );
        }
    }
}
