//! CPython 3.11 and 3.12 end to end, through the real binary: `run` prints
//! the table, `attach` writes every output format, on the machine's Debian
//! python3.11 (static, non-PIE), pyenv 3.11.7 and pyenv 3.12.1 (shared
//! libpython). A missing interpreter fails the test. Their stacks are
//! checked frame for frame in tests/oracle.rs, `dump` in tests/errors.rs.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{Interp, Running, TempDir, machine_old_interpreters, spawn, tachyon_bin};

/// Run tachyon with `args` (failing the test after two minutes).
fn tachyon(args: &[&str], cwd: &std::path::Path) -> Output {
    let mut cmd = Command::new(tachyon_bin());
    cmd.args(args).current_dir(cwd);
    Running::start(cmd).finish(Duration::from_secs(120))
}

const WORK: &str = "import time\n\
def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\
def main():\n    t = time.time()\n    while time.time() - t < 0.7:\n        fib(15)\n\
main()\nprint('DONE', flush=True)\n";

fn exe(interp: &Interp) -> String {
    interp.exe.to_string_lossy().into_owned()
}

#[test]
fn run_prints_the_table() {
    for interp in machine_old_interpreters() {
        let dir = TempDir::new("run");
        std::fs::write(dir.0.join("work.py"), WORK).unwrap();
        // The interpreter started directly, and through a wrapper command.
        let wrapped = format!("{} work.py", exe(&interp));
        for args in [
            &["run", "--python", &exe(&interp), "work.py"][..],
            &["run", "--", "sh", "-c", &wrapped][..],
        ] {
            let out = tachyon(args, &dir.0);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{} {args:?}: {}\n{stdout}",
                interp.name,
                String::from_utf8_lossy(&out.stderr)
            );
            for needle in ["DONE", "Profile Stats:", "work.py:3(fib)", "Captured "] {
                assert!(
                    stdout.contains(needle),
                    "{} {args:?}: no {needle:?} in\n{stdout}",
                    interp.name
                );
            }
            println!("{} {args:?}:\n{stdout}", interp.name);
        }
    }
}

const THREADS: &str = "import threading, time\n\
def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\
def busy():\n    while True:\n        fib(12)\n\
def sleeper():\n    time.sleep(600)\n\
threading.Thread(target=sleeper, daemon=True).start()\n\
print('READY', flush=True)\nbusy()\n";

#[test]
fn attach_writes_every_format() {
    let formats: &[(&str, &str)] = &[
        ("--collapsed", "fib"),
        ("--flamegraph", "fib"),
        ("--gecko", "fib"),
        ("--jsonl", "fib"),
        ("--pstats", "fib"),
        ("--binary", ""),
    ];
    for interp in machine_old_interpreters() {
        let mut t = spawn(&interp, THREADS, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let dir = TempDir::new("attach");
        for (flag, needle) in formats {
            let path = dir.0.join(format!("out{flag}"));
            let out = tachyon(
                &[
                    "attach",
                    "-a",
                    "-d",
                    "0.5",
                    flag,
                    "-o",
                    path.to_str().unwrap(),
                    &t.pid().to_string(),
                ],
                &dir.0,
            );
            assert!(
                out.status.success(),
                "{} attach {flag}: {}",
                interp.name,
                String::from_utf8_lossy(&out.stderr)
            );
            let body = std::fs::read(&path).unwrap_or_default();
            assert!(!body.is_empty(), "{} {flag}: empty output", interp.name);
            let text = String::from_utf8_lossy(&body);
            assert!(
                text.contains(needle),
                "{} {flag}: no {needle:?} in the output",
                interp.name
            );
            if *flag == "--collapsed" {
                // Both threads, the sleeper in its own function.
                assert!(text.contains("sleeper"), "{}: {text}", interp.name);
            }
            if *flag == "--binary" {
                let back = dir.0.join("replayed.txt");
                let replayed = tachyon(
                    &[
                        "replay",
                        "--collapsed",
                        "-o",
                        back.to_str().unwrap(),
                        path.to_str().unwrap(),
                    ],
                    &dir.0,
                );
                let r = std::fs::read_to_string(&back).unwrap_or_default();
                assert!(
                    replayed.status.success() && r.contains("fib"),
                    "{} replay: {r} {}",
                    interp.name,
                    String::from_utf8_lossy(&replayed.stderr)
                );
            }
        }
        println!("{}: every format written", interp.name);
    }
}

/// Two threads, so the thread list has links to get wrong.
const SLEEPER: &str = "import threading, time\n\
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n\
def inner():\n    print('READY', flush=True)\n    time.sleep(600)\n\
inner()\n";

/// The carried layout is checked on the live process, not trusted on the
/// version: the other minor's layout, or the right one with a field the
/// walk depends on moved, is refused by name (LayoutMismatch), never used.
#[test]
fn a_layout_that_does_not_fit_is_refused() {
    use tachyon::Error;
    use tachyon::offsets::Offsets;
    use tachyon::offsets::carried::CARRIED;
    use tachyon::process::linux::LinuxProcess;
    use tachyon::session::check_layout;
    use tachyon::unwind::UnwindOptions;

    for interp in machine_old_interpreters() {
        let mut t = spawn(&interp, SLEEPER, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let proc = LinuxProcess::open(t.pid()).unwrap();
        let good = tachyon::attach(t.pid(), UnwindOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", interp.name))
            .runtime()
            .clone();
        check_layout(&proc, &good).unwrap();
        let version = good.raw.version;

        let mut variants = Vec::new();
        for c in CARRIED.iter().filter(|c| c.minor != interp.minor) {
            variants.push((format!("the 3.{} layout", c.minor), c.table(version)));
        }
        // Each moved by one field, within its struct. (co_qualname moved
        // onto co_name would still read as a name: the oracle test, not
        // this check, holds qualified names.)
        for (field, delta) in [
            ("interpreter_state.runtime", -8i64),
            ("interpreter_state.threads_head", -8),
            ("thread_state.interp", -8),
            ("thread_state.next", -8),
            ("thread_state.cframe", -8),
            (
                "cframe.current_frame",
                if interp.minor == 11 { -8 } else { 8 },
            ),
            (
                "interpreter_frame.executable",
                if interp.minor == 11 { -8 } else { 8 },
            ),
            ("interpreter_frame.previous", -8),
            ("code_object.qualname", 8),
            ("code_object.filename", 24),
        ] {
            let mut raw = good.raw.clone();
            let v = raw.get(field).unwrap();
            let moved = v.checked_add_signed(delta).unwrap();
            assert!(raw.set(field, moved));
            variants.push((format!("{field} = {moved} (not {v})"), raw));
        }
        for (what, raw) in variants {
            let Ok(offsets) = Offsets::from_carried(t.pid(), &raw) else {
                continue; // refused before any read: fine too
            };
            let mut rt = good.clone();
            rt.raw = raw;
            rt.offsets = offsets.into();
            match check_layout(&proc, &rt) {
                Err(e @ Error::LayoutMismatch { .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains(&format!("runs Python {version}")),
                        "{}: {msg}",
                        interp.name
                    );
                    println!("{} with {what}: {msg}", interp.name);
                }
                other => panic!("{} with {what}: {other:?}", interp.name),
            }
        }
    }
}

/// A subinterpreter that shares the main interpreter's GIL (as
/// `Py_NewInterpreter()` makes them, for mod_wsgi and the like), busy in
/// one thread while the main thread sleeps: its thread is seen holding the
/// GIL (3.12 reads it through the interpreter's `ceval.gil`; 3.11 has one
/// GIL per process), the sleeping main thread never.
#[test]
fn a_subinterpreter_sharing_the_gil_is_seen_holding_it() {
    use tachyon::model::{Sample, status};
    use tachyon::unwind::UnwindOptions;
    const SHARED: &str = "import threading, time, _xxsubinterpreters as xi\n\
CODE = \"import threading\\nprint('SUB', threading.get_native_id(), flush=True)\\nwhile True:\\n    pass\\n\"\n\
def run():\n    try:\n        sub = xi.create(isolated=False)\n    except TypeError:\n        sub = xi.create()\n    xi.run_string(sub, CODE)\n\
threading.Thread(target=run, daemon=True).start()\n\
time.sleep(1000)\n";
    for interp in machine_old_interpreters() {
        let mut t = spawn(&interp, SHARED, &[], &[]);
        let line = t.wait_for("SUB ", Duration::from_secs(30));
        let sub_tid: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut u = tachyon::attach(
            t.pid(),
            UnwindOptions {
                all_threads: true,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{}: {e}", interp.name));
        let mut s = Sample::default();
        let (mut held, mut ok) = (0, 0);
        for _ in 0..200 {
            if u.sample(&mut s).is_err() {
                continue;
            }
            ok += 1;
            for th in &s.threads {
                let gil = th.status & status::HAS_GIL != 0;
                if th.tid == t.pid() as u64 {
                    assert!(
                        !gil,
                        "{}: the sleeping main thread holds the GIL",
                        interp.name
                    );
                }
                if th.tid == sub_tid && th.interpreter_id != 0 && gil {
                    held += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            held > 0,
            "{}: in {ok} samples the busy subinterpreter thread never held the GIL",
            interp.name
        );
        println!("{}: held in {held} of {ok} samples", interp.name);
    }
}

/// Where a binary has neither the `_PyRuntime` symbol nor the `.PyRuntime`
/// section, `_PyRuntime` is found by a bounded scan of its writable data:
/// on the real interpreters the scan finds exactly what the symbol says.
#[test]
fn the_data_scan_finds_the_runtime_the_symbol_names() {
    use tachyon::process::linux::LinuxProcess;
    use tachyon::runtime::scan_mapped_file;
    use tachyon::unwind::UnwindOptions;
    for interp in machine_old_interpreters() {
        let mut t = spawn(&interp, SLEEPER, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let rt = tachyon::attach(t.pid(), UnwindOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", interp.name))
            .runtime()
            .clone();
        let proc = LinuxProcess::open(t.pid()).unwrap();
        let m = proc
            .maps()
            .unwrap()
            .into_iter()
            .find(|m| m.offset == 0 && m.path.as_deref() == Some(rt.binary.as_str()))
            .unwrap_or_else(|| panic!("{}: {} is not mapped", interp.name, rt.binary));
        let found = scan_mapped_file(&proc, &m).unwrap();
        assert_eq!(
            found,
            Some(rt.address),
            "{}: the scan of {} found {found:x?}, the symbol says {:#x}",
            interp.name,
            rt.binary,
            rt.address
        );
        println!(
            "{}: _PyRuntime at {:#x} by the scan too",
            interp.name, rt.address
        );
    }
}
