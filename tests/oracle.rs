//! The interpreter as oracle: a target records its own stacks with
//! `sys._getframe()` / `f_back` on the very line where each thread then
//! blocks in C, and tachyon's stacks must equal those records frame for
//! frame (file, qualified name, line; same order, same length), on every
//! test interpreter.
//!
//! The target (fixtures/targets/oracle.py) covers methods, closures,
//! generator and generator-expression frames, coroutines driven by
//! `send(None)`, Python called back from C (`sorted(key=)`, `map`), code
//! from `exec`/`compile` (`<string>` and a non-ASCII file name), names in
//! every string width (Latin-1, Cyrillic/CJK, outside the BMP), recursion
//! 300 and 2000 deep (many data-stack chunks), lambdas and a class body.
//! The interpreters: sid's 3.13-3.15 (release and debug), pyenv 3.13, the
//! free-threaded 3.13t builds (static and shared libpython), and the
//! 3.11/3.12 ones read through carried layouts (Debian 3.11.2 static,
//! pyenv 3.11.7 and 3.12.1 shared).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{
    Interp, free_threaded_interpreters, machine_old_interpreters, machine_supported_interpreters,
    sid_interpreters, spawn,
};
use tachyon::model::{FrameKind, Sample, status};
use tachyon::unwind::{UnwindOptions, Unwinder};

const ORACLE_PY: &str = include_str!("../fixtures/targets/oracle.py");

/// One frame as (file, qualified name, line).
type Fr = (String, String, i64);

/// Native thread id to frames, leaf first.
type Stacks = BTreeMap<u64, Vec<Fr>>;

fn parse_oracle(line: &str) -> Stacks {
    let json = line.strip_prefix("ORACLE ").expect("ORACLE prefix");
    let raw: BTreeMap<String, Vec<(String, String, i64)>> =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("bad ORACLE JSON ({e}): {json}"));
    raw.into_iter()
        .map(|(tid, frames)| (tid.parse().expect("numeric thread id"), frames))
        .collect()
}

/// The Python frames of every sampled thread, resolved to strings, plus
/// each thread's status bits.
fn resolve<M: tachyon::process::ProcessMemory>(
    unwinder: &Unwinder<M>,
    sample: &Sample,
) -> BTreeMap<u64, (u32, Vec<Fr>)> {
    let table = unwinder.frames();
    sample
        .threads
        .iter()
        .map(|t| {
            let frames = t
                .frames
                .iter()
                .map(|&id| table.frame(id))
                .filter(|f| f.kind == FrameKind::Python)
                .map(|f| {
                    (
                        table.str(f.file).to_owned(),
                        table.str(f.func).to_owned(),
                        f.line() as i64,
                    )
                })
                .collect();
            (t.tid, (t.status, frames))
        })
        .collect()
}

/// Also catches frames tachyon could not read: any non-Python frame in a
/// stack is reported (the default options emit none of `<native>`, and no
/// collection runs while every thread is blocked).
fn non_python_frames<M: tachyon::process::ProcessMemory>(
    unwinder: &Unwinder<M>,
    sample: &Sample,
) -> Vec<String> {
    let table = unwinder.frames();
    let mut v = Vec::new();
    for t in &sample.threads {
        for &id in &t.frames {
            let f = table.frame(id);
            if f.kind != FrameKind::Python {
                v.push(format!(
                    "thread {}: {:?} {}",
                    t.tid,
                    f.kind,
                    table.str(f.func)
                ));
            }
        }
    }
    v
}

fn fmt_stack(frames: &[Fr]) -> String {
    let mut s = String::new();
    for (i, (file, func, line)) in frames.iter().enumerate() {
        s.push_str(&format!("      #{i:<4} {file}:{line} in {func}\n"));
    }
    if frames.is_empty() {
        s.push_str("      (no frames)\n");
    }
    s
}

/// A readable diff of two stacks (leaf first): the first differing index,
/// a window of both around it, and the lengths.
fn diff_stacks(expected: &[Fr], got: &[Fr]) -> String {
    let first = expected
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or(expected.len().min(got.len()));
    let lo = first.saturating_sub(3);
    let window = |v: &[Fr]| {
        let hi = (first + 6).min(v.len());
        let mut s = String::new();
        for (i, (file, func, line)) in v.iter().enumerate().take(hi).skip(lo) {
            let mark = if i == first { ">>" } else { "  " };
            s.push_str(&format!("    {mark}#{i:<4} {file}:{line} in {func}\n"));
        }
        s
    };
    let full = |v: &[Fr]| {
        if v.len() <= 40 {
            fmt_stack(v)
        } else {
            format!("      ({} frames; window above)\n", v.len())
        }
    };
    format!(
        "  first difference at frame #{first} (leaf = #0); lengths: interpreter {} vs tachyon {}\n  \
         interpreter (around #{first}):\n{}  tachyon (around #{first}):\n{}  \
         interpreter, whole stack:\n{}  tachyon, whole stack:\n{}",
        expected.len(),
        got.len(),
        window(expected),
        window(got),
        full(expected),
        full(got),
    )
}

/// Compare every recorded thread; returns the mismatches as text.
fn compare(interp: &Interp, expected: &Stacks, got: &BTreeMap<u64, (u32, Vec<Fr>)>) -> Vec<String> {
    let mut errs = Vec::new();
    for (tid, want) in expected {
        match got.get(tid) {
            None => errs.push(format!(
                "[{}] thread {tid}: recorded by the interpreter, missing from tachyon's sample (tachyon saw threads {:?})",
                interp.name,
                got.keys().collect::<Vec<_>>()
            )),
            Some((_, have)) if have != want => errs.push(format!(
                "[{}] thread {tid} ({}): stacks differ\n{}",
                interp.name,
                want.iter()
                    .rev()
                    .find(|f| !f.0.ends_with("/threading.py"))
                    .map(|f| f.1.as_str())
                    .unwrap_or("?"),
                diff_stacks(want, have)
            )),
            Some(_) => {}
        }
    }
    errs
}

/// Sample until tachyon's stacks equal the records, or until the deadline
/// (a thread may still be between its record and its block for an
/// instant); non-fatal errors (a torn read) are retried.
fn sample_until_equal<M: tachyon::process::ProcessMemory>(
    interp: &Interp,
    unwinder: &mut Unwinder<M>,
    expected: &Stacks,
    check: impl Fn(&Sample, &BTreeMap<u64, (u32, Vec<Fr>)>) -> Vec<String>,
) -> (Sample, BTreeMap<u64, (u32, Vec<Fr>)>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut sample = Sample::default();
        let last_err = match unwinder.sample(&mut sample) {
            Ok(()) => {
                let got = resolve(unwinder, &sample);
                let mut errs = compare(interp, expected, &got);
                errs.extend(check(&sample, &got));
                errs.extend(
                    non_python_frames(unwinder, &sample)
                        .into_iter()
                        .map(|s| format!("[{}] unexpected non-Python frame: {s}", interp.name)),
                );
                if errs.is_empty() {
                    return (sample, got);
                }
                errs.join("\n")
            }
            Err(e) => {
                assert!(
                    !e.is_fatal(),
                    "[{}] fatal error while sampling: {e}",
                    interp.name
                );
                format!("[{}] last sample failed: {e}", interp.name)
            }
        };
        if Instant::now() > deadline {
            panic!(
                "tachyon disagrees with the interpreter's own record of its stacks:\n{last_err}"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn check_interpreter(interp: &Interp) {
    let mut target = spawn(interp, ORACLE_PY, &[], &[]);
    let line = target.wait_for("ORACLE ", Duration::from_secs(60));
    let expected = parse_oracle(&line);
    let pid = target.pid() as u64;

    // Guard the oracle itself: one record per thread kind plus main, and
    // the deep ones really are deep.
    assert_eq!(
        expected.len(),
        15,
        "[{}] the target recorded {} threads, expected 15 (14 workers and main)",
        interp.name,
        expected.len()
    );
    let main_rec = expected
        .get(&pid)
        .unwrap_or_else(|| panic!("[{}] no record for the main thread {pid}", interp.name));
    assert!(
        expected.values().any(|s| s.len() > 2000),
        "[{}] no stack deeper than 2000 frames was recorded",
        interp.name
    );

    // Every thread.
    let opts = UnwindOptions {
        all_threads: true,
        ..Default::default()
    };
    let mut unwinder = tachyon::attach(target.pid(), opts)
        .unwrap_or_else(|e| panic!("[{}] attach failed: {e}", interp.name));
    let (_, got) = sample_until_equal(interp, &mut unwinder, &expected, |_, got| {
        let mut errs = Vec::new();
        if got.len() != expected.len() {
            errs.push(format!(
                "[{}] tachyon sampled {} threads {:?}, the target has {} {:?}",
                interp.name,
                got.len(),
                got.keys().collect::<Vec<_>>(),
                expected.len(),
                expected.keys().collect::<Vec<_>>()
            ));
        }
        for (tid, (st, _)) in got {
            let is_main = *tid == pid;
            if (st & status::MAIN_THREAD != 0) != is_main {
                errs.push(format!(
                    "[{}] thread {tid}: MAIN_THREAD bit is {}, but the main thread is {pid}",
                    interp.name,
                    st & status::MAIN_THREAD != 0
                ));
            }
        }
        errs
    });
    let deepest = got.values().map(|(_, f)| f.len()).max().unwrap_or(0);
    eprintln!(
        "[{}] all threads: {} threads equal to the interpreter's records (deepest {deepest} frames)",
        interp.name,
        got.len()
    );

    // The default: the main thread only, flagged as such.
    let mut unwinder = tachyon::attach(target.pid(), UnwindOptions::default())
        .unwrap_or_else(|e| panic!("[{}] attach failed: {e}", interp.name));
    let main_only: Stacks = [(pid, main_rec.clone())].into_iter().collect();
    sample_until_equal(interp, &mut unwinder, &main_only, |sample, _| {
        let mut errs = Vec::new();
        if sample.threads.len() != 1 || sample.threads[0].tid != pid {
            errs.push(format!(
                "[{}] default options: expected exactly the main thread {pid}, got threads {:?}",
                interp.name,
                sample.threads.iter().map(|t| t.tid).collect::<Vec<_>>()
            ));
        }
        if let Some(t) = sample.threads.first()
            && t.status & status::MAIN_THREAD == 0
        {
            errs.push(format!(
                "[{}] default options: main thread status {:#x} lacks MAIN_THREAD",
                interp.name, t.status
            ));
        }
        errs
    });
    eprintln!("[{}] main thread only: equal", interp.name);
}

#[test]
fn stacks_equal_the_interpreters_own_record() {
    let mut interps = sid_interpreters();
    interps.extend(machine_supported_interpreters());
    interps.extend(free_threaded_interpreters());
    // 3.11 and 3.12, through the layouts tachyon carries.
    interps.extend(machine_old_interpreters());
    // One interpreter at a time on its own thread, so a failure in one
    // still lets the others report; all failures are collected.
    let mut failures = Vec::new();
    for interp in &interps {
        let i = interp.clone();
        let r = std::thread::spawn(move || check_interpreter(&i)).join();
        if let Err(p) = r {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            failures.push(format!("==== {} ====\n{msg}", interp.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} interpreters failed:\n{}",
        failures.len(),
        interps.len(),
        failures.join("\n\n")
    );
}
