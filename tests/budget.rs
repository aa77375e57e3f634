//! Bounded work per sample, whatever the memory holds: a sample asks the
//! reader for at most its budget of reads (a few dozen, plus what the
//! threads it finds, the code objects it loads and the older chunks it
//! reads one by one are granted, each grant capped), counted here by a
//! reader wrapped around the real one, against a real target whose
//! threads recurse, sleep, start and end all the time.

mod common;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::Duration;

use common::{Interp, machine_old_interpreters, sid_interpreters, spawn};
use tachyon::model::Sample;
use tachyon::process::linux::LinuxProcess;
use tachyon::process::{ProcessMemory, RANGES_PER_CALL, ReadReq};
use tachyon::unwind::{UnwindOptions, Unwinder, max_bytes_allowed, max_reads, read_budget};

const SAMPLES: usize = 2000;

/// The threads the target has at most: 20 workers, 3 short ones, main.
const MAX_TARGET_THREADS: usize = 24;

/// Twenty threads recursing 1 to 30 deep and sleeping, and short threads
/// started and joined in a loop.
const TARGET: &str = r#"
import random, threading, time
def rec(n, pause):
    if n:
        return rec(n - 1, pause)
    time.sleep(pause)
def worker(k):
    r = random.Random(k)
    while True:
        rec(r.randint(1, 30), r.random() * 0.002)
for k in range(20):
    threading.Thread(target=worker, args=(k,), daemon=True).start()
def short():
    rec(5, 0.0005)
print("READY", flush=True)
while True:
    ts = [threading.Thread(target=short) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
"#;

/// The real reader, counting what it is asked for.
struct Counting {
    inner: LinuxProcess,
    calls: Cell<u64>,
    bytes: Cell<u64>,
}

impl ProcessMemory for Counting {
    fn read(&self, addr: u64, buf: &mut [u8]) -> tachyon::Result<()> {
        self.calls.set(self.calls.get() + 1);
        self.bytes.set(self.bytes.get() + buf.len() as u64);
        self.inner.read(addr, buf)
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> tachyon::Result<()> {
        let ranges = reqs.iter().filter(|r| !r.buf.is_empty()).count();
        self.calls
            .set(self.calls.get() + ranges.div_ceil(RANGES_PER_CALL) as u64);
        let bytes: u64 = reqs.iter().map(|r| r.buf.len() as u64).sum();
        self.bytes.set(self.bytes.get() + bytes);
        self.inner.read_many(reqs)
    }
}

fn check(it: &Interp) -> Vec<String> {
    let mut t = spawn(it, TARGET, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let rt = tachyon::attach(t.pid(), UnwindOptions::default())
        .unwrap()
        .runtime()
        .clone();
    let mem = Counting {
        inner: LinuxProcess::open(t.pid()).unwrap(),
        calls: Cell::new(0),
        bytes: Cell::new(0),
    };
    let opts = UnwindOptions {
        all_threads: true,
        ..UnwindOptions::default()
    };
    let mut u = Unwinder::new(mem, t.pid(), rt, opts);
    let mut s = Sample::default();
    let mut dist: BTreeMap<u64, usize> = BTreeMap::new();
    let mut errors = BTreeMap::new();
    let mut problems = Vec::new();
    let (mut ok, mut max_bytes, mut loads_total, mut over_typical) = (0, 0u64, 0u64, 0);
    for i in 0..SAMPLES {
        let (c0, b0) = (u.memory().calls.get(), u.memory().bytes.get());
        let loads0 = u.cache_stats().1;
        let r = u.sample(&mut s);
        ok += r.is_ok() as usize;
        if let Err(e) = &r {
            let text = e.to_string();
            let msg: Vec<&str> = text
                .split(' ')
                .map(|w| if w.starts_with("0x") { "_" } else { w })
                .collect();
            *errors.entry(msg.join(" ")).or_insert(0usize) += 1;
        }
        let calls = u.memory().calls.get() - c0;
        let bytes = u.memory().bytes.get() - b0;
        let loads = u.cache_stats().1 - loads0;
        loads_total += loads;
        // The unwinder's own count agrees with ours.
        let (own_calls, own_bytes) = u.reads_used();
        if (own_calls as u64, own_bytes) != (calls, bytes) {
            problems.push(format!(
                "{} sample {i}: the unwinder counted {own_calls} reads, {own_bytes} bytes; the reader {calls}, {bytes}",
                it.name
            ));
        }
        // Within what the unwinder allowed this sample, and that within
        // what any sample may be allowed.
        let (allowed, allowed_bytes) = u.reads_allowed();
        if calls > allowed as u64 || bytes > allowed_bytes {
            problems.push(format!(
                "{} sample {i}: {calls} reads, {bytes} bytes; allowed {allowed}, {allowed_bytes}: {r:?}",
                it.name
            ));
        }
        if allowed as u64 > max_reads(loads) || allowed_bytes > max_bytes_allowed(loads) {
            problems.push(format!(
                "{} sample {i}: allowed {allowed} reads, {allowed_bytes} bytes ({loads} code objects loaded)",
                it.name
            ));
        }
        if calls > read_budget(MAX_TARGET_THREADS, loads, 0) {
            over_typical += 1;
        }
        max_bytes = max_bytes.max(bytes);
        *dist.entry(calls).or_default() += 1;
    }
    eprintln!(
        "{}: {ok}/{SAMPLES} samples; reads per sample (reads: samples) {dist:?}; most bytes {max_bytes}; {loads_total} code objects loaded; {over_typical} samples over the budget for {MAX_TARGET_THREADS} threads; errors {errors:?}",
        it.name
    );
    // Failing every sample early would pass the checks above; how many
    // fail depends on the machine's speed, so the bar is low.
    if ok * 20 < SAMPLES {
        problems.push(format!("{}: only {ok} good samples", it.name));
    }
    problems
}

#[test]
fn reads_per_sample_stay_within_the_budget() {
    let mut interps = sid_interpreters();
    // 3.11/3.12: one more read per sample, for the current frame behind
    // each thread's `_PyCFrame`, within the same budget.
    interps.extend(machine_old_interpreters());
    let problems: Vec<String> = interps.iter().flat_map(check).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
