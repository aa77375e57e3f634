//! Free-threaded CPython 3.13 (3.13t, PEP 703), built by
//! scripts/provision-ft.sh with a static and with a shared libpython, read
//! by the same binary as the GIL builds. Its object header is 32 bytes, not
//! 16, so every object's fields sit 16 bytes later; the debug table says
//! so, and the few offsets tachyon knows from the headers are counted from
//! the header's size. (That its stacks equal the interpreter's own record,
//! line for line and thread for thread, is tests/oracle.rs.)
//!
//! Without a GIL every thread runs while it is read: stacks must still be
//! whole. "Has the GIL" means nothing there, unless the GIL was enabled at
//! run time (`-X gil=1`, `PYTHON_GIL=1`): `--mode gil` is refused by name
//! without one and counts the holder with one.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Interp, free_threaded_interpreters, release, sid_interpreters};

/// Eight threads, each busy in a function of its own (`f0` ... `f7`) three
/// calls below `work`, and the main thread parked.
const BUSY8: &str = r#"
import threading, time
for i in range(8):
    exec("def f%d():\n    x = 0\n    while True:\n        x += 1\n" % i)
def down(n, leaf):
    return leaf() if n == 0 else down(n - 1, leaf)
def work(i):
    down(3, globals()["f%d" % i])
for i in range(8):
    threading.Thread(target=work, args=(i,), name="busy-%d" % i, daemon=True).start()
print("READY", flush=True)
time.sleep(1000)
"#;

/// [`BUSY8`] under `it` (with interpreter `options`), its threads
/// started; the target and its pid as an argument.
fn busy8(it: &Interp, options: &[&str]) -> (common::Target, String) {
    let mut target = common::spawn_with_options(it, options, BUSY8, &[], &[]);
    target.wait_for("READY", Duration::from_secs(30));
    let pid = target.pid().to_string();
    (target, pid)
}

/// tachyon with `args`; (success, stdout, stderr).
fn tachyon(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::tachyon_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("cannot run tachyon");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// The "Captured N samples" count and the error rate (%) of a summary.
fn summary(stdout: &str) -> (u64, f64) {
    let field = |prefix: &str| -> String {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {stdout}"))
            .to_string()
    };
    let captured = field("Captured ");
    let n = captured.split(' ').next().unwrap().parse().unwrap();
    (n, field("Error rate: ").trim().parse().unwrap())
}

/// A stack of [`BUSY8`], as function names from the root, is whole: the
/// main thread's `<module>` (over the sleep), or a thread's bootstrap down
/// to `work`, then `down` four times and its own `fN` (a prefix of that,
/// while a thread starts).
fn busy8_whole(names: &[&str]) -> bool {
    if names == ["<module>"] {
        return true;
    }
    let boot = ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"];
    let Some(rest) = names.strip_prefix(&boot[..]) else {
        return false;
    };
    let mut want: Vec<&str> = vec!["work", "down", "down", "down", "down"];
    if let Some(last) = rest.last()
        && last.starts_with('f')
        && rest.len() == want.len() + 1
    {
        want.push(last);
    }
    !rest.is_empty() && rest.len() <= want.len() && rest == &want[..rest.len()]
}

/// Function names of each collapsed stack in `path`, root first, with
/// their sample counts.
fn stacks(path: &std::path::Path) -> Vec<(Vec<String>, u64)> {
    common::collapsed::read(path)
        .into_iter()
        .map(|(stack, n)| {
            let names = common::collapsed::frames(&stack)
                .filter_map(|f| common::collapsed::frame_parts(f).map(|p| p.1.to_string()))
                .collect();
            (names, n)
        })
        .collect()
}

/// Sample BUSY8 with `attach -a` at `rate` (and `extra` options); the
/// samples taken, the error rate and the stacks that are not whole.
fn sample_busy8(target: &common::Target, rate: &str, extra: &[&str]) -> (u64, f64, Vec<String>) {
    let dir = common::TempDir::new("ft-busy8");
    let out = dir.path().join("busy8.txt");
    let pid = target.pid().to_string();
    let mut args = vec!["attach", "-a", "-d", "1.5", "-r", rate, "--collapsed", "-o"];
    let out_s = out.to_str().unwrap();
    args.push(out_s);
    args.extend_from_slice(extra);
    args.push(&pid);
    let (ok, stdout, stderr) = tachyon(&args);
    assert!(
        ok,
        "[{}] tachyon attach failed: {stderr}",
        target.interp.name
    );
    let (n, rate) = summary(&stdout);
    let broken = stacks(&out)
        .into_iter()
        .filter(|(names, _)| !busy8_whole(&names.iter().map(String::as_str).collect::<Vec<_>>()))
        .map(|(names, n)| format!("{} x{n}", names.join(";")))
        .collect();
    (n, rate, broken)
}

/// Eight busy threads on two cores, read at 1 kHz and 10 kHz (and 1 kHz
/// with `--blocking`): every stack reported is whole, on both 3.13t builds
/// and, for comparison, on the GIL 3.13 of the sid root in the same run.
/// The failure rates are printed side by side; what is asserted is what
/// tachyon guarantees whatever the load: no broken stack, and samples
/// taken.
#[test]
fn eight_busy_threads_are_read_whole() {
    let mut interps: Vec<Interp> = free_threaded_interpreters();
    interps.extend(
        release(sid_interpreters())
            .into_iter()
            .filter(|i| i.minor == 13),
    );
    let mut problems = Vec::new();
    for it in &interps {
        let (target, _) = busy8(it, &[]);
        for (rate, extra) in [
            ("1000", &[][..]),
            ("10000", &[][..]),
            ("1000", &["--blocking"][..]),
        ] {
            let (n, failed, broken) = sample_busy8(&target, rate, extra);
            eprintln!(
                "{} at {rate} Hz {extra:?}: {n} samples, {failed:.2}% failed, {} broken stacks",
                it.name,
                broken.len()
            );
            if n == 0 {
                problems.push(format!(
                    "{} at {rate} Hz {extra:?}: no sample taken",
                    it.name
                ));
            }
            if !broken.is_empty() {
                problems.push(format!(
                    "{} at {rate} Hz {extra:?}: stacks not whole: {broken:?}",
                    it.name
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `--mode gil` on a 3.13t whose GIL is disabled (the default) is refused
/// in one line that says why and what to use; with the GIL enabled at run
/// time (`-X gil=1`) it counts the holder: a busy thread, never the parked
/// main thread.
#[test]
fn gil_mode_needs_a_gil() {
    for it in free_threaded_interpreters() {
        let (target, pid) = busy8(&it, &[]);
        let dir = common::TempDir::new("ft-gil");
        let out = dir.path().join("gil.txt");
        let out_s = out.to_str().unwrap();
        let (ok, _, stderr) = tachyon(&[
            "attach",
            "-a",
            "-d",
            "0.5",
            "--mode",
            "gil",
            "--collapsed",
            "-o",
            out_s,
            &pid,
        ]);
        assert!(
            !ok,
            "[{}] --mode gil without a GIL was not refused",
            it.name
        );
        assert!(
            stderr.contains("free-threaded")
                && stderr.contains("GIL disabled")
                && stderr.contains("--mode cpu")
                && stderr.trim_end().lines().count() == 1,
            "[{}] the refusal does not say why in one line: {stderr}",
            it.name
        );
        drop(target);

        let (_target, pid) = busy8(&it, &["-X", "gil=1"]);
        let (ok, stdout, stderr) = tachyon(&[
            "attach",
            "-a",
            "-d",
            "0.5",
            "--mode",
            "gil",
            "--collapsed",
            "-o",
            out_s,
            &pid,
        ]);
        assert!(
            ok,
            "[{}] --mode gil with -X gil=1 failed: {stderr}",
            it.name
        );
        assert!(
            stdout.contains("its GIL enabled at run time"),
            "[{}] the summary does not say the GIL is on: {stdout}",
            it.name
        );
        let got = stacks(&out);
        assert!(
            !got.is_empty(),
            "[{}] --mode gil with a GIL counted nothing",
            it.name
        );
        for (names, _) in &got {
            assert!(
                names
                    .last()
                    .is_some_and(|f| f.starts_with('f') && f.len() == 2),
                "[{}] the GIL holder is not a busy thread: {names:?}",
                it.name
            );
        }
    }
}

/// `dump -a` of a 3.13t names every thread as `threading` does (read
/// through module and dict objects, whose fields the longer object header
/// moves) and shows each busy thread's own function.
#[test]
fn dump_names_the_threads() {
    for it in free_threaded_interpreters() {
        let (_target, pid) = busy8(&it, &[]);
        let (ok, stdout, stderr) = tachyon(&["dump", "-a", &pid]);
        assert!(ok, "[{}] dump failed: {stderr}", it.name);
        // The header says there is no GIL, before any thread's state.
        let first = stdout.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("Free-threaded Python 3.13.") && first.contains("no GIL"),
            "[{}] first line: {first}",
            it.name
        );
        let (ok, json, stderr) = tachyon(&["dump", "--json", &pid]);
        assert!(ok, "[{}] dump --json failed: {stderr}", it.name);
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        let python = doc["python"].as_str().unwrap_or_default();
        assert!(
            python.starts_with("3.13.") && python.ends_with('t'),
            "[{}] python: {python}",
            it.name
        );
        assert!(
            !stderr.contains("thread names are the kernel's"),
            "[{}] thread names were not read: {stderr}",
            it.name
        );
        for i in 0..8 {
            assert!(
                stdout.contains(&format!("\"busy-{i}\"")),
                "[{}] thread busy-{i} is not named in:\n{stdout}",
                it.name
            );
            assert!(
                stdout.contains(&format!("in f{i}")),
                "[{}] no frame of f{i} in:\n{stdout}",
                it.name
            );
        }
    }
}

/// A recording of a 3.13t (`--binary`) replays in tachyon and in the
/// reference's reader, and both give the same stacks and counts.
#[test]
fn a_recording_replays_in_tachyon_and_the_reference() {
    for it in free_threaded_interpreters() {
        let (target, pid) = busy8(&it, &[]);
        let dir = common::RootDir::new(&[]);
        let rec = dir.outside("rec.bin");
        let (ok, _, stderr) = tachyon(&[
            "attach",
            "-a",
            "-d",
            "0.5",
            "--binary",
            "-o",
            rec.to_str().unwrap(),
            &pid,
        ]);
        assert!(ok, "[{}] recording failed: {stderr}", it.name);
        drop(target);
        let ours = dir.outside("ours.txt");
        let (ok, _, stderr) = tachyon(&[
            "replay",
            "--collapsed",
            "-o",
            ours.to_str().unwrap(),
            rec.to_str().unwrap(),
        ]);
        assert!(ok, "[{}] tachyon's replay failed: {stderr}", it.name);
        common::reference_replays(&dir);
        let mine = common::collapsed::by_stack(&common::collapsed::read(&ours));
        let theirs = common::collapsed::by_stack(&common::collapsed::read(&dir.outside("ref.txt")));
        assert!(!mine.is_empty(), "[{}] the replay holds no stack", it.name);
        assert_eq!(
            mine, theirs,
            "[{}] tachyon's replay and the reference's differ",
            it.name
        );
        for stack in mine.keys() {
            let names: Vec<&str> = common::collapsed::frames(stack)
                .filter_map(|f| common::collapsed::frame_parts(f).map(|p| p.1))
                .collect();
            assert!(
                busy8_whole(&names),
                "[{}] replayed stack not whole: {stack}",
                it.name
            );
        }
    }
}

/// [`BUSY8`] under `it`, opened, and its runtime as tachyon located it.
fn busy8_runtime(
    it: &Interp,
) -> (
    common::Target,
    tachyon::process::linux::LinuxProcess,
    tachyon::runtime::Runtime,
) {
    let (target, _) = busy8(it, &[]);
    let proc = tachyon::process::linux::LinuxProcess::open(target.pid()).unwrap();
    let rt = tachyon::attach(target.pid(), tachyon::unwind::UnwindOptions::default())
        .unwrap_or_else(|e| panic!("[{}] {e}", it.name))
        .runtime()
        .clone();
    (target, proc, rt)
}

/// The check that stands between a free-threaded 3.14t/3.15t table (taken
/// from headers: no such interpreter runs here) and the samples read with
/// it, run on a live 3.13t whose eight threads run in parallel: the real
/// table passes it, and the same table with a field that places a frame
/// in its code moved (the instruction pointer, the bytecode's start, the
/// location table) is refused, by the validator or by the check itself,
/// never used. (The check puts every frame of a sample of every thread on
/// an instruction of the bytecode it runs, with a line. Fields 3.14t and
/// 3.15t share with their GIL builds, such as the first line, are the
/// GIL tables' and verified with them.)
#[test]
fn the_bytecode_check_passes_a_real_table_and_refuses_moved_fields() {
    use tachyon::Error;
    use tachyon::offsets::Offsets;
    use tachyon::session::check_bytecode;

    for it in free_threaded_interpreters() {
        let (target, proc, good) = busy8_runtime(&it);
        check_bytecode(&proc, &good).unwrap_or_else(|e| panic!("[{}] real table: {e}", it.name));

        let mut refused_by_check = 0;
        for (field, delta) in [
            ("interpreter_frame.instr_ptr", -8i64),
            ("interpreter_frame.instr_ptr", -16),
            ("code_object.co_code_adaptive", -8),
            ("code_object.co_code_adaptive", -16),
            ("code_object.co_code_adaptive", 8),
            ("code_object.linetable", -8),
        ] {
            let mut raw = good.raw.clone();
            let v = raw.get(field).unwrap();
            let moved = v.checked_add_signed(delta).unwrap();
            assert!(raw.set(field, moved));
            let what = format!("{field} = {moved} (not {v})");
            let Ok(offsets) = Offsets::from_raw(target.pid(), &raw) else {
                println!("[{}] {what}: refused by the validator", it.name);
                continue;
            };
            let mut rt = good.clone();
            rt.raw = raw;
            rt.offsets = offsets.into();
            match check_bytecode(&proc, &rt) {
                Err(e @ Error::LayoutMismatch { .. }) => {
                    let msg = e.to_string();
                    assert!(msg.contains("runs Python 3.13."), "[{}] {msg}", it.name);
                    assert!(msg.contains("t, but"), "[{}] {msg}", it.name);
                    println!("[{}] {what}: {msg}", it.name);
                    refused_by_check += 1;
                }
                other => panic!("[{}] {what}: {other:?}", it.name),
            }
        }
        assert!(
            refused_by_check > 0,
            "[{}] the validator refused every moved field: the check was not tried",
            it.name
        );
    }
}

/// The same check passes the GIL builds of 3.13, 3.14 and 3.15 (release
/// and debug), eight threads busy: it holds a real interpreter's frames to
/// nothing they do not do.
#[test]
fn the_bytecode_check_passes_every_gil_build() {
    use tachyon::session::check_bytecode;

    for it in sid_interpreters() {
        let (_target, proc, rt) = busy8_runtime(&it);
        check_bytecode(&proc, &rt).unwrap_or_else(|e| panic!("[{}] {e}", it.name));
    }
}
