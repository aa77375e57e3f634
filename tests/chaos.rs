//! Everything read from a target is untrusted. A reader that corrupts what
//! it returns from a real interpreter (flipped bits, zeroed or garbage
//! words, short data) must never make tachyon panic or loop: every sample
//! ends as a stack or as an error, within its read budget (counted here in
//! reads and bytes asked of the reader, not in time, which depends on the
//! machine). And the unwinder that went through it is no worse for it:
//! once reads are clean again, it gives clean stacks.

mod common;

use std::cell::Cell;
use std::time::Duration;

use common::{machine_old_interpreters, sid_interpreters, spawn};
use tachyon::Result;
use tachyon::model::Sample;
use tachyon::process::linux::LinuxProcess;
use tachyon::process::{ProcessMemory, RANGES_PER_CALL, ReadReq};
use tachyon::unwind::{UnwindOptions, Unwinder, max_bytes_allowed, max_reads};

/// A real reader whose results are corrupted now and then, while `on`;
/// it counts the calls and bytes asked of it.
struct Chaos {
    inner: LinuxProcess,
    spoil: common::spoil::Spoil,
    calls: Cell<u64>,
    bytes: Cell<u64>,
}

impl Chaos {
    /// A reader of process `pid`, reading cleanly until its spoiling starts.
    fn open(pid: i32) -> Chaos {
        Chaos {
            inner: LinuxProcess::open(pid).unwrap(),
            spoil: Default::default(),
            calls: Cell::new(0),
            bytes: Cell::new(0),
        }
    }

    fn counted(&self) -> (u64, u64) {
        (self.calls.get(), self.bytes.get())
    }

    fn count(&self, calls: u64, bytes: u64) {
        self.calls.set(self.calls.get() + calls);
        self.bytes.set(self.bytes.get() + bytes);
    }
}

impl ProcessMemory for Chaos {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.count(1, buf.len() as u64);
        self.inner.read(addr, buf)?;
        self.spoil.apply(buf);
        Ok(())
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        let ranges = reqs.iter().filter(|r| !r.buf.is_empty()).count();
        let bytes = reqs.iter().map(|r| r.buf.len() as u64).sum();
        self.count(ranges.div_ceil(RANGES_PER_CALL) as u64, bytes);
        self.inner.read_many(reqs)?;
        for r in reqs.iter_mut() {
            self.spoil.apply(r.buf);
        }
        Ok(())
    }
}

const TARGET: &str = r#"
import threading, time
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def gen():
    while True:
        yield fib(12)
def worker():
    for _ in gen():
        pass
for _ in range(3):
    threading.Thread(target=worker, daemon=True).start()
print("READY", flush=True)
while True:
    sorted(range(200), key=lambda x: fib(8) and -x)
"#;

/// The target's own functions and the synthetic frames: anything else in
/// a stack is a name made up from corrupted memory.
const NAMES: &[&str] = &[
    "fib",
    "gen",
    "worker",
    "<module>",
    "<lambda>",
    "Thread.run",
    "Thread._bootstrap",
    "Thread._bootstrap_inner",
    "<native>",
    "<GC>",
];

/// Problems with one good sample's stacks: a root that is not the
/// interpreter's (`<module>` for the main thread, `Thread._bootstrap`
/// for the others), a name not in [`NAMES`].
fn unclean<M: ProcessMemory>(u: &Unwinder<M>, s: &Sample, pid: i32) -> Vec<String> {
    let t = u.frames();
    let mut v = Vec::new();
    for th in &s.threads {
        let names: Vec<&str> = th
            .frames
            .iter()
            .map(|&id| t.str(t.frame(id).func))
            .filter(|n| *n != "<native>" && *n != "<GC>")
            .collect();
        let want = if th.tid == pid as u64 {
            "<module>"
        } else {
            "Thread._bootstrap"
        };
        if names.last() != Some(&want) {
            v.push(format!("thread {}: root {:?}", th.tid, names.last()));
        }
        v.extend(
            names
                .iter()
                .filter(|n| !NAMES.contains(n))
                .map(|n| format!("thread {}: frame {n:?}", th.tid)),
        );
    }
    v
}

#[test]
fn corrupted_reads_never_panic_or_hang() {
    // 3.11/3.12 too: their cframe read is one more pointer to corrupt.
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    for it in interps {
        let mut t = spawn(&it, TARGET, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let rt = tachyon::attach(t.pid(), UnwindOptions::default())
            .unwrap()
            .runtime()
            .clone();
        let mem = Chaos::open(t.pid());
        let opts = UnwindOptions {
            all_threads: true,
            native: true,
            opcodes: true,
            ..Default::default()
        };
        // One unwinder through every round: what it learns and caches
        // from corrupted reads stays with it.
        let mut u = Unwinder::new(mem, t.pid(), rt, opts);
        let mut s = Sample::default();
        for (seed, every) in [(1u64, 3u64), (2, 10), (3, 50)] {
            u.memory().spoil.start(seed, it.minor, every);
            let (mut ok, mut err) = (0, 0);
            let (mut most_calls, mut most_bytes) = (0, 0);
            for _ in 0..400 {
                let (c0, b0) = u.memory().counted();
                let loads0 = u.cache_stats().1;
                match u.sample(&mut s) {
                    Ok(()) => ok += 1,
                    Err(_) => err += 1,
                }
                // Machine-independent bounds on the work: what the
                // reader was asked for, against the read budget.
                let (c1, b1) = u.memory().counted();
                let (calls, bytes) = (c1 - c0, b1 - b0);
                let loads = u.cache_stats().1 - loads0;
                let (allowed, allowed_bytes) = u.reads_allowed();
                assert!(
                    calls <= allowed as u64 && bytes <= allowed_bytes,
                    "{}: a corrupted sample asked for {calls} reads, {bytes} bytes (allowed {allowed}, {allowed_bytes})",
                    it.name
                );
                assert!(
                    allowed as u64 <= max_reads(loads) && allowed_bytes <= max_bytes_allowed(loads),
                    "{}: a corrupted sample was allowed {allowed} reads, {allowed_bytes} bytes",
                    it.name
                );
                most_calls = most_calls.max(calls);
                most_bytes = most_bytes.max(bytes);
            }
            eprintln!(
                "{} seed {seed} (1 read in {every} spoiled): {ok} stacks, {err} errors, at most {most_calls} reads and {most_bytes} bytes in a sample",
                it.name
            );
        }
        // And the same unwinder state is no worse for it: clean reads
        // give clean stacks.
        u.memory().spoil.stop();
        let (mut good, mut problems) = (0, Vec::new());
        let mut errors = std::collections::BTreeMap::<String, usize>::new();
        for _ in 0..50 {
            match u.sample(&mut s) {
                Ok(()) => {
                    good += 1;
                    problems.extend(unclean(&u, &s, t.pid()));
                }
                Err(e) => *errors.entry(e.to_string()).or_default() += 1,
            }
        }
        assert!(
            problems.is_empty(),
            "{}: stacks after the corrupted rounds: {problems:?}",
            it.name
        );
        assert!(
            good >= 10,
            "{}: {good}/50 clean samples; errors: {errors:?}",
            it.name
        );
        eprintln!(
            "{}: {good}/50 clean samples after the corrupted rounds",
            it.name
        );
    }
}

/// A real reader that, while `on`, tears every code object it loads: the
/// int32 field at `field` (the first line, say) grows by `by` (the rest of
/// the object is intact, so the load itself succeeds).
struct TornCode {
    inner: LinuxProcess,
    code_size: usize,
    field: usize,
    by: i32,
    on: Cell<bool>,
}

impl ProcessMemory for TornCode {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(addr, buf)?;
        if self.on.get() && buf.len() == self.code_size {
            let at = self.field..self.field + 4;
            let v = i32::from_le_bytes(buf[at.clone()].try_into().unwrap());
            buf[at].copy_from_slice(&(v + self.by).to_le_bytes());
        }
        Ok(())
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        self.inner.read_many(reqs)
    }
}

const PARKED: &str = r#"
import time
def parked():
    print("READY", flush=True)
    time.sleep(3600)  # PARKED
parked()  # CALLER
"#;

/// One torn load of a code object is not believed for the rest of the run:
/// from the next sample on, the lines are the target's. (3.14+ keep code
/// objects cached until the interpreter frees one; 3.11-3.13 re-check a
/// fingerprint that holds the first line, so this is the harder case there.)
#[test]
fn a_torn_code_object_load_does_not_stay_cached() {
    let line_of = |tag: &str| {
        PARKED
            .lines()
            .position(|l| l.contains(tag))
            .map(|i| i as u32 + 1)
            .unwrap()
    };
    let want = vec![line_of("# PARKED"), line_of("# CALLER")];
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    for it in interps {
        let mut t = spawn(&it, PARKED, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        // READY comes a line before the sleep: wait, with a clean reader,
        // until the target is parked in it.
        let mut probe = tachyon::attach(t.pid(), UnwindOptions::default()).unwrap();
        let mut s = Sample::default();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if probe.sample(&mut s).is_ok() {
                let f = probe.frames();
                let now: Vec<u32> = s.threads[0]
                    .frames
                    .iter()
                    .map(|&id| f.frame(id).line() as u32)
                    .collect();
                if now == want {
                    break;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{}: never parked",
                it.name
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let rt = probe.runtime().clone();
        let mem = TornCode {
            inner: LinuxProcess::open(t.pid()).unwrap(),
            code_size: rt.offsets.code_size as usize,
            field: rt.offsets.code_firstlineno as usize,
            by: 1000,
            on: Cell::new(true),
        };
        let mut u = Unwinder::new(mem, t.pid(), rt, UnwindOptions::default());
        let lines = |u: &Unwinder<TornCode>, s: &Sample| -> Vec<u32> {
            let f = u.frames();
            s.threads[0]
                .frames
                .iter()
                .map(|&id| f.frame(id).line() as u32)
                .collect()
        };
        u.sample(&mut s).unwrap();
        assert_eq!(
            lines(&u, &s),
            want.iter().map(|l| l + 1000).collect::<Vec<_>>(),
            "{}: the torn reader did not tear the first sample's code objects",
            it.name
        );
        u.memory().on.set(false);
        for n in 2..=5 {
            u.sample(&mut s).unwrap();
            assert_eq!(lines(&u, &s), want, "{}: sample {n}", it.name);
        }
    }
}

/// A frame size read wrong in every load (so believed: two loads agree)
/// fails the data stack's checks; it is not believed for the rest of the
/// run: once loads are right, so are the stacks. Too long, the newest
/// frame overlaps the stack's top or its caller; too short, it seems to
/// end below the top, where no frame links to it (under load, pyenv 3.11
/// once failed 65% of a run's samples so: that size was kept).
#[test]
fn a_frame_size_read_wrong_twice_is_unlearnt() {
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    for it in interps {
        let mut t = spawn(&it, PARKED, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let probe = tachyon::attach(t.pid(), UnwindOptions::default()).unwrap();
        let rt = probe.runtime().clone();
        let o = &rt.offsets;
        // The size itself (3.12+), or the stack size it is summed from.
        let field = o
            .code_framesize
            .or(o.code_framesize_sum.map(|(_, stack)| stack))
            .expect("every version sizes its frames") as usize;
        for (by, wrong) in [(3, "long"), (-3, "short")] {
            let mem = TornCode {
                inner: LinuxProcess::open(t.pid()).unwrap(),
                code_size: o.code_size as usize,
                field,
                by,
                on: Cell::new(true),
            };
            let mut u = Unwinder::new(mem, t.pid(), rt.clone(), UnwindOptions::default());
            let mut s = Sample::default();
            for n in 1..=4 {
                assert!(
                    u.sample(&mut s).is_err(),
                    "{}: sample {n} with frames 3 words too {wrong} passed the data stack's checks",
                    it.name
                );
            }
            u.memory().on.set(false);
            let good = (0..10).filter(|_| u.sample(&mut s).is_ok()).count();
            assert!(
                good >= 8,
                "{}: {good}/10 samples after frame sizes 3 words too {wrong} were right again",
                it.name
            );
        }
    }
}

/// `dump --locals` on corrupted reads: never a panic, and never more reads
/// or bytes per frame than its budget, however the objects are spoiled.
#[test]
fn corrupted_locals_never_panic_and_stay_in_budget() {
    use tachyon::unwind::locals::{BYTES_PER_FRAME, LocalsReader, READS_PER_FRAME};
    use tachyon::unwind::locks;
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    for it in interps {
        let mut t = spawn(&it, include_str!("../fixtures/targets/locals.py"), &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let mut u = tachyon::attach(t.pid(), UnwindOptions::default()).unwrap();
        u.keep_frame_places();
        let mut s = Sample::default();
        // READY comes a line before the sleep: sample until the leaf is
        // parked on it (until then its frame moves on between reads).
        let source = include_str!("../fixtures/targets/locals.py");
        let parked = source.lines().position(|l| l.contains("# PARKED")).unwrap() as i32 + 1;
        let mut places = Vec::new();
        for _ in 0..600 {
            if u.sample(&mut s).is_ok()
                && s.threads[0]
                    .frames
                    .first()
                    .map(|&id| u.frames().frame(id).line())
                    == Some(parked)
            {
                places = u.frame_places(0).to_vec();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            places.len() >= 2,
            "{}: never parked: frames {places:?}",
            it.name
        );
        let mem = Chaos::open(t.pid());
        // A reader per dump (its page cache lives as long as it does).
        let reader = || LocalsReader::new(&mem, u.offsets());
        let v = u.offsets().version;
        let ops = tachyon::opcodes::table(v.major as u32, v.minor as u32).unwrap();
        let (mut ok, mut failed) = (0, 0);
        for (seed, every) in [(1u64, 3u64), (2, 10), (3, 50)] {
            mem.spoil.start(seed, it.minor, every);
            for _ in 0..100 {
                for p in &places {
                    let (c0, b0) = mem.counted();
                    match reader().frame_locals(p) {
                        Ok(_) => ok += 1,
                        Err(_) => failed += 1,
                    }
                    let (c1, b1) = mem.counted();
                    assert!(
                        c1 - c0 <= READS_PER_FRAME as u64 && b1 - b0 <= BYTES_PER_FRAME,
                        "{}: one frame's locals took {} reads, {} bytes",
                        it.name,
                        c1 - c0,
                        b1 - b0
                    );
                    // The lock it waits for, if any: as bounded.
                    let _ = reader().lock_wait(p, ops);
                    let (c2, b2) = mem.counted();
                    assert!(
                        c2 - c1 <= locks::READS as u64 && b2 - b1 <= locks::BYTES,
                        "{}: one lock question took {} reads, {} bytes",
                        it.name,
                        c2 - c1,
                        b2 - b1
                    );
                }
            }
        }
        mem.spoil.stop();
        for p in &places {
            if let Err(e) = reader().frame_locals(p) {
                panic!(
                    "{}: clean reads of the frame at {:#x} fail: {e}",
                    it.name, p.frame
                );
            }
        }
        eprintln!(
            "{}: {ok} frames read, {failed} refused, on spoiled reads",
            it.name
        );
    }
}
