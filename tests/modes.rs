//! Thread status bits and synthetic frames, on every sid interpreter
//! (3.13, 3.14, 3.15, release and debug builds), on free-threaded 3.13
//! (static and shared; no GIL, so no GIL checks) and on the machine's 3.11
//! and 3.12 (Debian 3.11.2, pyenv 3.11.7 and 3.12.1, carried layouts).
//!
//! Library checks sample targets held in known states
//! (fixtures/targets/modes_*.py) and check each thread's bits: HAS_GIL
//! (3.13: a bit of `_status`; 3.14: the int after it; 3.15: a table field;
//! 3.11/3.12: the thread is the GIL state's holder while it is locked, in
//! `_PyRuntime` for 3.11, in the interpreter for 3.12), HAS_EXCEPTION
//! (3.13/3.14: derived offsets of `current_exception` and `exc_state`;
//! 3.11: `curexc_type`), ON_CPU, MAIN_THREAD, and the `<GC>` and
//! `<native>` frames (3.11: after a frame flagged `is_entry`). 3.11 and
//! 3.12 have no per-thread "waiting for the GIL" flag, so GIL_REQUESTED is
//! never set there (nothing here tests it).
//! Binary checks run `tachyon attach --mode gil|exception --collapsed` end
//! to end.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::collapsed::samples_in;
use common::{
    Interp, Target, TempDir, collapsed, free_threaded_interpreters, machine_old_interpreters,
    sid_interpreters, spawn, tachyon_bin,
};
use tachyon::model::{FrameKind, Sample, status};
use tachyon::unwind::{UnwindOptions, Unwinder};

const THREADS_PY: &str = include_str!("../fixtures/targets/modes_threads.py");
const GC_PY: &str = include_str!("../fixtures/targets/modes_gc.py");
const NATIVE_PY: &str = include_str!("../fixtures/targets/modes_native.py");
const EXCEPTIONS_PY: &str = include_str!("../fixtures/targets/modes_exceptions.py");
const UNWIND_PY: &str = include_str!("../fixtures/targets/modes_unwind.py");

/// Every sid interpreter, free-threaded 3.13, and the machine's 3.11 and
/// 3.12 (carried layouts).
fn modes_interpreters() -> Vec<Interp> {
    let mut v = sid_interpreters();
    v.extend(free_threaded_interpreters());
    v.extend(machine_old_interpreters());
    v
}

/// [`modes_interpreters`] that have a GIL: a free-threaded build has none
/// (tests/free_threaded.rs checks what `--mode gil` does there), and the
/// GIL is how 3.13 tells the thread that collects garbage.
fn gil_interpreters() -> Vec<Interp> {
    modes_interpreters()
        .into_iter()
        .filter(|i| !i.free_threaded())
        .collect()
}

/// One sampled thread: its status bits and its frames, leaf first, each
/// as the function's qualified name or the synthetic frame's name.
#[derive(Debug, Clone)]
struct Th {
    tid: u64,
    status: u32,
    frames: Vec<String>,
}

fn resolve<M: tachyon::process::ProcessMemory>(u: &Unwinder<M>, s: &Sample) -> Vec<Th> {
    let table = u.frames();
    s.threads
        .iter()
        .map(|t| Th {
            tid: t.tid,
            status: t.status,
            frames: t
                .frames
                .iter()
                .map(|&id| table.str(table.frame(id).func).to_owned())
                .collect(),
        })
        .collect()
}

/// Take `n` successful samples about `every` apart (failed samples, torn
/// by the running target, are retried; too many of them fail the test).
fn take<M: tachyon::process::ProcessMemory>(
    u: &mut Unwinder<M>,
    n: usize,
    every: Duration,
    what: &str,
) -> Vec<Vec<Th>> {
    let mut out = Vec::with_capacity(n);
    let mut sample = Sample::default();
    let mut errors = 0;
    while out.len() < n {
        match u.sample(&mut sample) {
            Ok(()) => out.push(resolve(u, &sample)),
            Err(e) => {
                errors += 1;
                assert!(
                    errors <= n / 4 + 5,
                    "{what}: {errors} failed samples, last: {e}"
                );
            }
        }
        std::thread::sleep(every);
    }
    if errors > 0 {
        eprintln!("{what}: {errors} failed samples retried");
    }
    out
}

fn attach(t: &Target, opts: UnwindOptions) -> Unwinder<tachyon::process::linux::LinuxProcess> {
    tachyon::attach(t.pid(), opts)
        .unwrap_or_else(|e| panic!("{}: cannot attach: {e}", t.interp.name))
}

fn all_threads() -> UnwindOptions {
    UnwindOptions {
        all_threads: true,
        ..UnwindOptions::default()
    }
}

/// Start modes_threads.py; returns the target and its role → tid map.
fn threads_target(it: &Interp) -> (Target, BTreeMap<String, u64>) {
    let (t, roles, _) = threads_target_says(it);
    (t, roles)
}

/// [`threads_target`], with what `sys.exception()` gave each blocking role.
fn threads_target_says(it: &Interp) -> (Target, BTreeMap<String, u64>, BTreeMap<String, bool>) {
    let mut t = spawn(it, THREADS_PY, &[], &[]);
    let line = t.wait_for("SAYS ", Duration::from_secs(30));
    let says: BTreeMap<String, bool> = serde_json::from_str(&line["SAYS ".len()..])
        .unwrap_or_else(|e| panic!("{}: bad SAYS line {line:?}: {e}", it.name));
    let line = t.wait_for("READY ", Duration::from_secs(30));
    let roles: BTreeMap<String, u64> = serde_json::from_str(&line["READY ".len()..])
        .unwrap_or_else(|e| panic!("{}: bad READY line {line:?}: {e}", it.name));
    assert_eq!(roles.len(), 12, "{}: {line}", it.name);
    assert_eq!(says.len(), 8, "{}: {says:?}", it.name);
    // Every thread is a few bytecodes from its blocking call: let it get there.
    std::thread::sleep(Duration::from_millis(150));
    (t, roles, says)
}

/// Per role: (samples where the thread was present, samples where `bit`
/// was set). Every role must be present in every sample.
fn count_bit(
    it: &Interp,
    samples: &[Vec<Th>],
    roles: &BTreeMap<String, u64>,
    bit: u32,
) -> BTreeMap<String, (usize, usize)> {
    let mut counts = BTreeMap::new();
    for (role, &tid) in roles {
        let mut seen = 0;
        let mut set = 0;
        for s in samples {
            if let Some(th) = s.iter().find(|th| th.tid == tid) {
                seen += 1;
                if th.status & bit != 0 {
                    set += 1;
                }
            }
        }
        assert_eq!(
            seen,
            samples.len(),
            "{}: thread {role} ({tid}) missing from some samples",
            it.name
        );
        counts.insert(role.clone(), (seen, set));
    }
    counts
}

/// A stack of one role's thread in a sample, for messages.
fn stack_of(samples: &[Vec<Th>], tid: u64) -> String {
    samples
        .last()
        .and_then(|s| s.iter().find(|t| t.tid == tid))
        .map(|t| format!("{:?} (status {:#x})", t.frames, t.status))
        .unwrap_or_default()
}

#[test]
fn gil_is_held_by_the_busy_thread_and_never_by_sleepers() {
    for it in gil_interpreters() {
        let (t, roles) = threads_target(&it);
        let mut u = attach(&t, all_threads());
        let samples = take(&mut u, 300, Duration::from_millis(1), &it.name);
        let counts = count_bit(&it, &samples, &roles, status::HAS_GIL);
        eprintln!("{}: HAS_GIL {counts:?}", it.name);
        let (n, busy) = counts["busy"];
        assert!(
            busy * 100 >= n * 80,
            "{}: busy thread holds the GIL in only {busy}/{n} samples; stack {}",
            it.name,
            stack_of(&samples, roles["busy"])
        );
        for (role, &(n, set)) in &counts {
            if role != "busy" {
                assert_eq!(
                    set,
                    0,
                    "{}: blocked thread {role} holds the GIL in {set}/{n} samples; stack {}",
                    it.name,
                    stack_of(&samples, roles[role])
                );
            }
        }
        // No sampled thread state other than these seven exists.
        assert!(
            samples.iter().all(|s| s.len() == roles.len()),
            "{}",
            it.name
        );
    }
}

/// HAS_EXCEPTION is what `sys.exception()` says in the thread: an
/// exception handled in the thread's own frames, or in a generator's or
/// coroutine's (whose handled exception lives in the object, on the
/// thread's `exc_info` chain while it runs), and not one a suspended
/// generator holds.
#[test]
fn has_exception_exactly_while_an_exception_is_handled() {
    for it in modes_interpreters() {
        let (t, roles, says) = threads_target_says(&it);
        let handling = [
            "in_except",
            "in_finally",
            "gen_except",
            "coro_except",
            "genexpr_callee",
            "outer_gen",
        ];
        for (role, &handles) in &says {
            assert_eq!(
                handles,
                handling.contains(&role.as_str()),
                "{}: the target's sys.exception() in {role}: {says:?}",
                it.name
            );
        }
        let mut u = attach(&t, all_threads());
        let samples = take(&mut u, 100, Duration::from_millis(2), &it.name);
        let counts = count_bit(&it, &samples, &roles, status::HAS_EXCEPTION);
        eprintln!("{}: HAS_EXCEPTION {counts:?}", it.name);
        for (role, &(n, set)) in &counts {
            let want = if says.get(role) == Some(&true) { n } else { 0 };
            assert_eq!(
                set,
                want,
                "{}: thread {role}: HAS_EXCEPTION in {set}/{n} samples, expected {want}; stack {}",
                it.name,
                stack_of(&samples, roles[role])
            );
        }
        // The blocked threads are where the target says they are.
        for (role, leaf) in [
            ("in_except", &["block", "says", "in_except"][..]),
            ("in_finally", &["block", "says", "in_finally"]),
            ("after_except", &["block", "says", "after_except"]),
            ("lock_waiter", &["block", "lock_waiter"]),
            ("gen_except", &["block", "says", "gen_except.<locals>.gen"]),
            (
                "coro_except",
                &["block", "says", "coro_except.<locals>.coro"],
            ),
            ("genexpr_callee", &["block", "says", "plain_handler"]),
            ("outer_gen", &["block", "says", "outer_gen.<locals>.inner"]),
            ("gen_suspended", &["block", "says", "gen_suspended"]),
        ] {
            let th = samples[0].iter().find(|t| t.tid == roles[role]).unwrap();
            assert_eq!(
                th.frames.get(..leaf.len()),
                Some(&leaf.iter().map(|f| f.to_string()).collect::<Vec<_>>()[..]),
                "{}: {role}",
                it.name
            );
        }
    }
}

#[test]
fn raised_exception_is_seen_while_it_unwinds_the_stack() {
    // modes_unwind.py raises 500 frames deep and catches at the top with an
    // empty handler. A sample with `down` frames on the stack and
    // HAS_EXCEPTION can only come from the raised-exception slot
    // (`current_exception`): no `except` block is active there.
    for it in modes_interpreters() {
        let mut t = spawn(&it, UNWIND_PY, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let mut u = attach(&t, UnwindOptions::default());
        let samples = take(&mut u, 400, Duration::from_micros(500), &it.name);
        let (mut deep, mut deep_exc) = (0, 0);
        for s in &samples {
            let th = &s[0];
            if th.frames.iter().filter(|f| *f == "down").count() >= 2 {
                deep += 1;
                if th.status & status::HAS_EXCEPTION != 0 {
                    deep_exc += 1;
                }
            }
        }
        eprintln!(
            "{}: {deep_exc}/{deep} deep samples with HAS_EXCEPTION",
            it.name
        );
        // Most samples fall inside the recursion; under load fewer do.
        assert!(deep >= 100, "{}: only {deep}/400 deep samples", it.name);
        // Both phases are seen: going down (no exception yet) and coming
        // back up (the exception raised). How the samples split between
        // them moves with the machine's load; that both occur does not.
        assert!(
            deep_exc > 0 && deep_exc < deep,
            "{}: HAS_EXCEPTION in {deep_exc}/{deep} samples inside the recursion",
            it.name
        );
    }
}

#[test]
fn on_cpu_for_the_busy_thread_only_and_unknown_without_cpu_status() {
    for it in modes_interpreters() {
        let (t, roles) = threads_target(&it);
        let mut u = attach(
            &t,
            UnwindOptions {
                cpu_status: true,
                opcodes: false,
                frame_cache: false,
                ..all_threads()
            },
        );
        let samples = take(&mut u, 150, Duration::from_millis(2), &it.name);
        let counts = count_bit(&it, &samples, &roles, status::ON_CPU);
        let unknown = count_bit(&it, &samples, &roles, status::UNKNOWN);
        eprintln!("{}: ON_CPU {counts:?}", it.name);
        let (n, busy) = counts["busy"];
        // Runnable counts as on CPU (the reference reads the same letter),
        // so a busy machine does not take it away.
        assert!(
            busy * 100 >= n * 60,
            "{}: busy thread ON_CPU in only {busy}/{n} samples",
            it.name
        );
        for (role, &(n, set)) in &counts {
            if role != "busy" {
                assert_eq!(
                    set, 0,
                    "{}: blocked thread {role} ON_CPU in {set}/{n} samples",
                    it.name
                );
            }
        }
        for (role, &(_, set)) in &unknown {
            assert_eq!(set, 0, "{}: {role} UNKNOWN with cpu_status", it.name);
        }

        // Without cpu_status the state is not read: UNKNOWN, never ON_CPU.
        u.opts.cpu_status = false;
        let samples = take(&mut u, 20, Duration::from_millis(1), &it.name);
        for s in &samples {
            for th in s {
                assert_eq!(
                    th.status & (status::ON_CPU | status::UNKNOWN),
                    status::UNKNOWN,
                    "{}: thread {}",
                    it.name,
                    th.tid
                );
            }
        }
    }
}

#[test]
fn main_thread_flag_is_on_the_main_thread_only() {
    for it in modes_interpreters() {
        let (t, roles) = threads_target(&it);
        assert_eq!(roles["main"], t.pid() as u64, "{}", it.name);
        let mut u = attach(&t, all_threads());
        let samples = take(&mut u, 30, Duration::from_millis(2), &it.name);
        let counts = count_bit(&it, &samples, &roles, status::MAIN_THREAD);
        for (role, &(n, set)) in &counts {
            let want = if role == "main" { n } else { 0 };
            assert_eq!(set, want, "{}: {role} MAIN_THREAD {set}/{n}", it.name);
        }
        // Without -a only the main thread is sampled, flagged as such.
        u.opts.all_threads = false;
        let samples = take(&mut u, 10, Duration::from_millis(2), &it.name);
        for s in &samples {
            assert_eq!(s.len(), 1, "{}", it.name);
            assert_eq!(s[0].tid, roles["main"], "{}", it.name);
            assert_ne!(s[0].status & status::MAIN_THREAD, 0, "{}", it.name);
            assert_eq!(
                s[0].frames.first().map(String::as_str),
                Some("block"),
                "{}",
                it.name
            );
        }
    }
}

#[test]
fn gc_frame_sits_on_the_caller_of_gc_collect_only_when_asked_for() {
    // 3.13t is left out: before 3.15's tables name the frame that started
    // a collection, the collecting thread is told by the GIL it holds, and
    // a free-threaded build has none (no `<GC>` is shown there).
    for it in gil_interpreters() {
        let mut t = spawn(&it, GC_PY, &[], &[]);
        t.wait_for("READY", Duration::from_secs(60));
        let mut u = attach(&t, UnwindOptions::default());
        let samples = take(&mut u, 300, Duration::from_millis(1), &it.name);
        let mut gc = 0;
        for s in &samples {
            let th = &s[0];
            let at = th.frames.iter().position(|f| f == "<GC>");
            if let Some(i) = at {
                gc += 1;
                assert_eq!(
                    (i, th.frames.get(1..).unwrap_or_default()),
                    (
                        0,
                        &["collect_forever".to_owned(), "<module>".to_owned()][..]
                    ),
                    "{}: <GC> must be the leaf, called by collect_forever: {:?}",
                    it.name,
                    th.frames
                );
            }
        }
        eprintln!("{}: <GC> in {gc}/{} samples", it.name, samples.len());
        assert!(
            gc * 100 >= samples.len() * 60,
            "{}: <GC> in only {gc}/{} samples of a program that mostly collects",
            it.name,
            samples.len()
        );

        u.opts.gc = false;
        let samples = take(&mut u, 150, Duration::from_millis(1), &it.name);
        for s in &samples {
            assert!(
                s[0].frames.iter().all(|f| f != "<GC>"),
                "{}: <GC> with gc off: {:?}",
                it.name,
                s[0].frames
            );
            assert_eq!(
                s[0].frames.last().map(String::as_str),
                Some("<module>"),
                "{}",
                it.name
            );
        }
    }
}

#[test]
fn native_frame_marks_the_call_from_c_back_into_python() {
    for it in modes_interpreters() {
        let mut t = spawn(&it, NATIVE_PY, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(100));
        let mut u = attach(
            &t,
            UnwindOptions {
                native: true,
                ..UnwindOptions::default()
            },
        );
        let s = take(&mut u, 5, Duration::from_millis(2), &it.name);
        // 3.15's chain ends in the thread's base frame, reached through an
        // entry frame with a predecessor: a `<native>` at the bottom too,
        // as in the reference. 3.13/3.14 chains end in an entry frame with
        // no predecessor.
        let mut want = vec!["key", "<native>", "caller", "<module>"];
        if it.minor >= 15 {
            want.push("<native>");
        }
        for th in s.iter().map(|s| &s[0]) {
            assert_eq!(th.frames, want, "{}: with native", it.name);
        }
        // The marker is a Native frame in the table, not a Python one.
        let kinds: Vec<FrameKind> = {
            let mut sample = Sample::default();
            u.sample(&mut sample).unwrap();
            sample.threads[0]
                .frames
                .iter()
                .map(|&id| u.frames().frame(id).kind)
                .collect()
        };
        assert_eq!(kinds[1], FrameKind::Native, "{}", it.name);

        u.opts.native = false;
        let s = take(&mut u, 5, Duration::from_millis(2), &it.name);
        for th in s.iter().map(|s| &s[0]) {
            assert_eq!(
                th.frames,
                ["key", "caller", "<module>"],
                "{}: without native",
                it.name
            );
        }
    }
}

/// `tachyon attach ARGS --collapsed -o FILE PID`; returns (stack, count)
/// lines of the collapsed file.
fn attach_collapsed(t: &Target, args: &[&str]) -> Vec<(String, u64)> {
    let dir = TempDir::new("modes");
    let out = dir.join("collapsed.txt");
    let started = Instant::now();
    let res = Command::new(tachyon_bin())
        .arg("attach")
        .args(args)
        .arg("--collapsed")
        .arg("-o")
        .arg(&out)
        .arg(t.pid().to_string())
        .output()
        .expect("cannot run tachyon");
    assert!(
        res.status.success(),
        "{}: tachyon attach {args:?} failed after {:?}: {}",
        t.interp.name,
        started.elapsed(),
        String::from_utf8_lossy(&res.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    collapsed::parse(&text)
}

#[test]
fn gil_mode_end_to_end_shows_the_busy_function_and_not_the_sleepers() {
    for it in gil_interpreters() {
        let (t, _) = threads_target(&it);
        let lines = attach_collapsed(&t, &["--mode", "gil", "-a", "-d", "1"]);
        let total: u64 = lines.iter().map(|(_, n)| n).sum();
        let busy = samples_in(&lines, "busy");
        eprintln!("{}: gil mode: busy {busy}/{total}", it.name);
        // How many of the 1000 samples a loaded machine lets through varies;
        // what they show does not.
        assert!(total > 0, "{}: no samples: {lines:?}", it.name);
        assert!(
            busy * 100 >= total * 95,
            "{}: busy in {busy}/{total}: {lines:?}",
            it.name
        );
        for f in [
            "sleeper",
            "lock_waiter",
            "in_except",
            "after_except",
            "in_finally",
            "block",
        ] {
            assert_eq!(samples_in(&lines, f), 0, "{}: {f}: {lines:?}", it.name);
        }
    }
}

#[test]
fn exception_mode_end_to_end_shows_the_raising_function() {
    for it in modes_interpreters() {
        let mut t = spawn(&it, EXCEPTIONS_PY, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let lines = attach_collapsed(&t, &["--mode", "exception", "-a", "-d", "1"]);
        let total: u64 = lines.iter().map(|(_, n)| n).sum();
        let raiser = samples_in(&lines, "raiser");
        let in_gen = samples_in(&lines, "handle_in_gen");
        let calm = samples_in(&lines, "calm");
        eprintln!(
            "{}: exception mode: raiser {raiser}, generator's handler {in_gen}, calm {calm}, total {total}",
            it.name
        );
        // The raisers hold the GIL about a third of the time each and have
        // an exception for part of that; the calm thread never has one. How
        // many samples land in a second depends on the machine: only that
        // some do.
        assert!(raiser > 0, "{}: raiser {raiser}: {lines:?}", it.name);
        assert!(in_gen > 0, "{}: handle_in_gen {in_gen}: {lines:?}", it.name);
        assert!(
            (raiser + samples_in(&lines, "gen_raiser")) * 100 >= total * 98,
            "{}: raisers {raiser}/{total}: {lines:?}",
            it.name
        );
        assert_eq!(calm, 0, "{}: {lines:?}", it.name);
    }
}
