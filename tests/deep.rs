//! Stacks deeper than the cap: the innermost frames up to the cap, marked
//! `<truncated>` at the outer end, are a good sample (the chain is still
//! followed to its root, so it is still checked complete); a chain that
//! loops back on itself is not, however deep it is.

mod common;

use std::cell::Cell;
use std::time::Duration;

use common::{Interp, sid_interpreters, spawn};
use tachyon::error::{Error, Torn};
use tachyon::model::Sample;
use tachyon::process::linux::LinuxProcess;
use tachyon::process::{ProcessMemory, ReadReq};
use tachyon::unwind::frames::MAX_DEPTH;
use tachyon::unwind::{READ_BUDGET, UnwindOptions, Unwinder};

const DEPTH: usize = 20_000;

/// Pure-Python recursion past the cap (Python-to-Python calls use no C
/// stack since 3.11, so only the recursion limit needs raising), then a
/// sleep at the bottom: the stack holds still while it is read.
const TARGET: &str = r#"
import sys, time
sys.setrecursionlimit(100_000)
def rec(n):
    if n == 0:
        print("DEEP", flush=True)
        while True:
            time.sleep(1)
    return rec(n - 1)
rec(int(sys.argv[1]))
"#;

/// The real reader, with one frame's `previous` pointer replaced in
/// whatever is read of it.
struct Loop {
    inner: LinuxProcess,
    /// (address of the pointer, value to show).
    patch: Cell<Option<(u64, u64)>>,
}

impl Loop {
    fn apply(&self, addr: u64, buf: &mut [u8]) {
        let Some((at, value)) = self.patch.get() else {
            return;
        };
        for (i, b) in value.to_le_bytes().iter().enumerate() {
            let a = at + i as u64;
            if let Some(off) = a.checked_sub(addr).filter(|o| *o < buf.len() as u64) {
                buf[off as usize] = *b;
            }
        }
    }
}

impl ProcessMemory for Loop {
    fn read(&self, addr: u64, buf: &mut [u8]) -> tachyon::Result<()> {
        self.inner.read(addr, buf)?;
        self.apply(addr, buf);
        Ok(())
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> tachyon::Result<()> {
        self.inner.read_many(reqs)?;
        for r in reqs.iter_mut() {
            self.apply(r.addr, r.buf);
        }
        Ok(())
    }
}

/// The main thread's frame addresses, leaf first, read by following the
/// chain directly (the target is asleep, so it holds still).
fn chain(u: &Unwinder<Loop>) -> Vec<u64> {
    let o = u.offsets();
    let mem = &u.memory().inner;
    let interp = mem
        .read_u64(u.runtime().address + o.runtime_interpreters_head)
        .unwrap();
    let tstate = mem.read_u64(interp + o.interp_threads_main).unwrap();
    let mut f = mem.read_u64(tstate + o.tstate_current_frame).unwrap();
    let mut v = Vec::new();
    while f != 0 && v.len() < 2 * DEPTH {
        v.push(f);
        f = mem.read_u64(f + o.frame_previous).unwrap();
    }
    v
}

fn check(it: &Interp) {
    let mut t = spawn(it, TARGET, &[], &[&DEPTH.to_string()]);
    t.wait_for("DEEP", Duration::from_secs(60));
    let rt = tachyon::attach(t.pid(), UnwindOptions::default())
        .unwrap()
        .runtime()
        .clone();
    for all_threads in [false, true] {
        let opts = UnwindOptions {
            all_threads,
            gc: false,
            ..UnwindOptions::default()
        };
        let mem = Loop {
            inner: LinuxProcess::open(t.pid()).unwrap(),
            patch: Cell::new(None),
        };
        let mut u = Unwinder::new(mem, t.pid(), rt.clone(), opts);
        let mut s = Sample::default();
        // The target sleeps: every sample must succeed, the first (which
        // reads the chunks one by one) and the later ones (which read
        // them all at once).
        for i in 0..20 {
            u.sample(&mut s)
                .unwrap_or_else(|e| panic!("{} sample {i}: {e}", it.name));
            assert_eq!(s.threads.len(), 1, "{}", it.name);
            let frames = &s.threads[0].frames;
            let names: Vec<&str> = frames
                .iter()
                .map(|&id| u.frames().str(u.frames().frame(id).func))
                .collect();
            assert_eq!(frames.len(), MAX_DEPTH, "{}", it.name);
            assert_eq!(names.last(), Some(&"<truncated>"), "{}", it.name);
            assert!(
                names[..MAX_DEPTH - 1].iter().all(|n| *n == "rec"),
                "{}: the innermost frames are all rec",
                it.name
            );
            if i > 0 {
                let (calls, _) = u.reads_used();
                assert!(
                    calls <= READ_BUDGET,
                    "{} sample {i}: {calls} reads",
                    it.name
                );
            }
        }
        eprintln!(
            "{} (all threads: {all_threads}): {} frames kept of {DEPTH}+, {} reads in a steady sample",
            it.name,
            s.threads[0].frames.len(),
            u.reads_used().0
        );

        // A loop in the chain fails the sample, whether it lies among the
        // frames kept or beyond the cap.
        let frames = chain(&u);
        assert!(frames.len() > DEPTH, "{}: {} frames", it.name, frames.len());
        let prev = u.offsets().frame_previous;
        for (victim, target) in [(50, 10), (DEPTH - 100, 100)] {
            u.memory()
                .patch
                .set(Some((frames[victim] + prev, frames[target])));
            let e = u
                .sample(&mut s)
                .expect_err(&format!("{}: a chain with a loop was reported", it.name));
            assert!(
                matches!(e, Error::Torn(Torn::OutOfOrder { .. } | Torn::Cycle { .. })),
                "{}: {e}",
                it.name
            );
            assert!(s.threads.is_empty(), "{}", it.name);
        }
        // And the same unwinder reads the intact chain again.
        u.memory().patch.set(None);
        u.sample(&mut s)
            .unwrap_or_else(|e| panic!("{} after the loop: {e}", it.name));
        assert_eq!(s.threads[0].frames.len(), MAX_DEPTH, "{}", it.name);
    }
    // The interpreter survived all this.
    assert!(
        t.child.try_wait().unwrap().is_none(),
        "{}: the target died",
        it.name
    );
}

#[test]
fn a_stack_deeper_than_the_cap_is_truncated_and_a_loop_fails() {
    for it in sid_interpreters() {
        check(&it);
    }
}
