//! A steady stack's frames below the leaf are reused from the last walk
//! only while every byte under the leaf is unchanged (see
//! `src/unwind/reuse.rs`).
//!
//! The target keeps its leaf frame at one address while the frames below
//! it change: right under the leaf (`a` or `b`) and at the bottom (`x` or
//! `y`, under 100 identical frames). Each path lasts 2 ms, and the next
//! one differs only at the bottom, or only under the leaf, in turn.
//! Samples 0.5 ms apart rarely see a switch (which would make the next
//! walk start afresh), so most switches meet a kept walk that must not be
//! reused. The leaf's own line says which of the four paths it is on, and
//! the leaf is always decoded afresh, so a sample must agree with itself:
//! a reused part from another path would not. (The stack fits in one
//! data-stack chunk; the comparison of older chunks is covered by the unit
//! tests in `reuse.rs`.)
//!
//! A sample read while the target switches paths (the leaf returns, its
//! caller returns, the other caller is pushed at the same address, all in
//! the microsecond one system call copies the stack) can mix the two,
//! reused or not: no check can see that the chain's frames, all at their
//! usual addresses, were copied an instant apart. That is rare (about 1 in
//! 3,000 such samples); a reuse that went wrong would show a whole 2 ms
//! phase as the other path, every sample of it. So a hundredth of the
//! samples may disagree, no more.

mod common;

use std::time::{Duration, Instant};

use common::{machine_old_interpreters, sid_interpreters, spawn};
use tachyon::model::Sample;
use tachyon::unwind::UnwindOptions;

const TARGET: &str = r#"
import sys, time
sys.setrecursionlimit(10000)
PATH = 0
MID = None
def leaf():
    until = time.perf_counter() + 0.002
    if PATH == 0:
        while time.perf_counter() < until: pass
    elif PATH == 1:
        while time.perf_counter() < until: pass
    elif PATH == 2:
        while time.perf_counter() < until: pass
    else:
        while time.perf_counter() < until: pass
def a(): leaf()
def b(): leaf()
def down(n):
    if n:
        return down(n - 1)
    MID()
def x():
    global PATH
    PATH = 0 if MID is a else 1
    down(100)
def y():
    global PATH
    PATH = 2 if MID is a else 3
    down(100)
print("READY", flush=True)
while True:
    for MID in (a, b):
        x()
        y()
"#;

/// The leaf's line on each path (line 1 of `TARGET` is its `import`).
const PATH_LINES: [u32; 4] = [9, 11, 13, 15];
/// Walks that must have reused kept frames before the test ends.
const MIN_REUSED: u64 = 100;

/// Frames of `down` on the stack: `down(100)` down to `down(0)`.
const DOWN: usize = 101;

#[test]
fn frames_below_an_unchanged_leaf_are_reused_only_while_their_bytes_are() {
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    let mut problems = Vec::new();
    for it in &interps {
        let mut target = spawn(it, TARGET, &[], &[]);
        target.wait_for("READY", Duration::from_secs(30));
        let mut u = tachyon::attach(target.pid(), UnwindOptions::default()).unwrap();
        let mut s = Sample::default();
        let (mut checked, mut wrong, mut shown) = (0usize, 0usize, Vec::new());
        let start = Instant::now();
        // Until every path was seen often, whatever the machine's speed.
        let mut per_path = [0usize; 4];
        // Half a second covers some 60 cycles of the four paths on a quiet
        // machine; a busy one takes longer to see each path often.
        while (per_path.iter().any(|&n| n < 50)
            || u.reused_walks() < MIN_REUSED
            || start.elapsed() < Duration::from_millis(500))
            && start.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_micros(500));
            let before = u.reused_walks();
            if u.sample(&mut s).is_err() {
                continue;
            }
            let Some(th) = s.threads.first() else {
                continue;
            };
            let t = u.frames();
            let names: Vec<(String, u32)> = th
                .frames
                .iter()
                .map(|&id| {
                    let f = t.frame(id);
                    (t.str(f.func).to_owned(), f.line().max(0) as u32)
                })
                .collect();
            let Some(path) = names
                .first()
                .filter(|(f, _)| f == "leaf")
                .and_then(|(_, l)| PATH_LINES.iter().position(|&p| p == *l))
            else {
                continue;
            };
            checked += 1;
            per_path[path] += 1;
            let caller = if path % 2 == 0 { "a" } else { "b" };
            let bottom = if path < 2 { "x" } else { "y" };
            let funcs: Vec<&str> = names.iter().map(|(f, _)| f.as_str()).collect();
            let ok = funcs.len() == DOWN + 4
                && funcs[1] == caller
                && funcs[2..2 + DOWN].iter().all(|f| *f == "down")
                && funcs[2 + DOWN] == bottom
                && funcs[3 + DOWN] == "<module>";
            wrong += !ok as usize;
            if !ok && shown.len() < 3 {
                shown.push(format!(
                    "path {path}{}: {} frames: {:?} ... {:?}",
                    if u.reused_walks() > before {
                        " (reused)"
                    } else {
                        ""
                    },
                    funcs.len(),
                    &funcs[..funcs.len().min(3)],
                    &funcs[funcs.len().saturating_sub(3)..]
                ));
            }
        }
        let reused = u.reused_walks();
        eprintln!(
            "{}: {checked} samples on a known path {per_path:?}, {wrong} wrong {shown:?}, {reused} walks reused",
            it.name,
        );
        if wrong * 100 > checked {
            problems.push(format!(
                "{}: {wrong} of {checked} stacks from another path: {shown:?}",
                it.name
            ));
        }
        if per_path.iter().any(|&n| n < 50) {
            problems.push(format!(
                "{}: not every path seen 50 times in 30 s: {per_path:?}",
                it.name
            ));
        }
        // The fast path must have been taken, or this test tests nothing.
        // (On a quiet machine three samples in four reuse; a busy one
        // spaces them out, and a sample in a new path records afresh: the
        // loop samples until enough did.)
        if reused < MIN_REUSED {
            problems.push(format!(
                "{}: only {reused} of {checked} walks in 30 s reused the frames below the leaf",
                it.name
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
