//! A steady sample is one system call, whatever the mode: with every
//! thread parked, the guesses of the last sample (thread states, their
//! chunks, their frames outside the data stack, 3.11/3.12 current-frame
//! slots) hold, and are read with the interpreter list in the first call.
//! This is what makes a sample at 1 kHz cost one wake-up and one read.
//! And that call reads only what the stacks need: a few ranges a thread
//! (its state, its data-stack chunk, its entry frames on the C stack),
//! never the same frame twice.
//!
//! Real interpreters: the sid root's 3.13/3.14/3.15 (release and debug) and
//! the machine's 3.11/3.12, whose current frame goes through `_PyCFrame`.

mod common;

use std::time::Duration;

use common::{Interp, machine_old_interpreters, sid_interpreters, spawn};
use std::cell::Cell;

use tachyon::model::Sample;
use tachyon::process::linux::LinuxProcess;
use tachyon::process::{ProcessMemory, ReadReq};
use tachyon::unwind::{UnwindOptions, Unwinder};

/// The live reader, counting the ranges asked of it.
struct Counting {
    inner: LinuxProcess,
    ranges: Cell<usize>,
}

impl ProcessMemory for Counting {
    fn read(&self, addr: u64, buf: &mut [u8]) -> tachyon::error::Result<()> {
        self.ranges.set(self.ranges.get() + 1);
        self.inner.read(addr, buf)
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> tachyon::error::Result<()> {
        let n = reqs.iter().filter(|r| !r.buf.is_empty()).count();
        self.ranges.set(self.ranges.get() + n);
        self.inner.read_many(reqs)
    }
}

/// Most ranges a warm sample reads per thread: its state, its chunk, the
/// entry frames of its C stack, and slack for a guess not yet settled.
const RANGES_PER_THREAD: usize = 6;

const TARGET: &str = r#"
import threading, time
def park(n):
    if n:
        return park(n - 1)
    while True:
        time.sleep(0.2)
for i in range(6):
    threading.Thread(target=park, args=(12,), daemon=True).start()
time.sleep(0.3)
print("ready", flush=True)
park(8)
"#;

fn check(it: &Interp) {
    let mut t = spawn(it, TARGET, &[], &[]);
    t.wait_for("ready", Duration::from_secs(60));
    for all_threads in [true, false] {
        let opts = UnwindOptions {
            all_threads,
            ..UnwindOptions::default()
        };
        let rt = tachyon::attach(t.pid(), opts)
            .unwrap_or_else(|e| panic!("{}: cannot attach: {e}", it.name))
            .runtime()
            .clone();
        let mem = Counting {
            inner: LinuxProcess::open(t.pid()).unwrap(),
            ranges: Cell::new(0),
        };
        let mut u = Unwinder::new(mem, t.pid(), rt, opts);
        let mut s = Sample::default();
        let want = if all_threads { 7 } else { 1 };
        let (mut calls, mut ranges) = (Vec::new(), Vec::new());
        for i in 0..40 {
            u.memory().ranges.set(0);
            u.sample(&mut s)
                .unwrap_or_else(|e| panic!("{} sample {i}: {e}", it.name));
            assert_eq!(s.threads.len(), want, "{}: threads", it.name);
            calls.push(u.reads_used().0);
            ranges.push(u.memory().ranges.get());
        }
        // Ranges, once warm: bounded by the threads, whatever the samples
        // before kept in their guesses.
        let bound = RANGES_PER_THREAD * want + 8;
        assert!(
            ranges[5..].iter().all(|&r| r <= bound),
            "{} (all threads: {all_threads}): ranges per sample {ranges:?}, at most {bound}",
            it.name
        );
        // The first samples load (and re-check) code objects and learn the
        // guesses; once warm, the threads stay parked, so every guessed
        // address still holds: one call. A sample that meets something new
        // (a frame outside the guessed chunk, a code object) reads it in a
        // call of its own: more than half at one call, none over three.
        // Counts of calls, not times: they hold on any machine.
        let warm = &calls[5..];
        let one = warm.iter().filter(|&&c| c == 1).count();
        assert!(
            one * 2 > warm.len() && warm.iter().all(|&c| c <= 3),
            "{} (all threads: {all_threads}): calls per sample {calls:?}",
            it.name
        );
    }
}

#[test]
fn a_steady_sample_is_one_system_call() {
    let mut its = sid_interpreters();
    its.extend(machine_old_interpreters());
    for it in &its {
        check(it);
    }
}
