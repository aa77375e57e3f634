//! Everything read from a target is untrusted. A reader that corrupts what
//! it returns from a real interpreter (flipped bits, zeroed or garbage
//! words, short data) must never make tachyon panic or loop: every sample
//! ends as a stack or as an error, quickly.

mod common;

use std::cell::Cell;
use std::time::{Duration, Instant};

use common::{sid_interpreters, spawn};
use tachyon::Result;
use tachyon::model::Sample;
use tachyon::process::linux::LinuxProcess;
use tachyon::process::{ProcessMemory, ReadReq};
use tachyon::unwind::{UnwindOptions, Unwinder};

/// A real reader whose results are corrupted now and then.
struct Chaos {
    inner: LinuxProcess,
    rng: Cell<u64>,
    /// One read in `every` is corrupted.
    every: u64,
}

impl Chaos {
    fn next(&self) -> u64 {
        // xorshift64*: deterministic per seed, so a failure can be replayed.
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn spoil(&self, buf: &mut [u8]) {
        if buf.is_empty() || !self.next().is_multiple_of(self.every) {
            return;
        }
        let r = self.next();
        let at = (r >> 8) as usize % buf.len();
        match r % 4 {
            // One flipped bit.
            0 => buf[at] ^= 1 << ((r >> 40) % 8),
            // A word of garbage.
            1 => {
                for (i, b) in buf[at..].iter_mut().take(8).enumerate() {
                    *b = (self.next() >> (i * 8)) as u8;
                }
            }
            // A zeroed stretch.
            2 => buf[at..].iter_mut().take(64).for_each(|b| *b = 0),
            // A huge value where a size or pointer might be.
            _ => buf[at..].iter_mut().take(8).for_each(|b| *b = 0xff),
        }
    }
}

impl ProcessMemory for Chaos {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(addr, buf)?;
        self.spoil(buf);
        Ok(())
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        self.inner.read_many(reqs)?;
        for r in reqs.iter_mut() {
            self.spoil(r.buf);
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

#[test]
fn corrupted_reads_never_panic_or_hang() {
    for it in sid_interpreters() {
        let mut t = spawn(&it, TARGET, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let rt = tachyon::attach(t.pid(), UnwindOptions::default())
            .unwrap()
            .runtime()
            .clone();
        for (seed, every) in [(1u64, 3u64), (2, 10), (3, 50)] {
            let mem = Chaos {
                inner: LinuxProcess::open(t.pid()).unwrap(),
                rng: Cell::new(0x9e37_79b9_7f4a_7c15 ^ seed ^ u64::from(it.minor) << 32),
                every,
            };
            let opts = UnwindOptions {
                all_threads: true,
                native: true,
                gc: true,
                cpu_status: false,
            };
            let mut u = Unwinder::new(mem, t.pid(), rt.clone(), opts);
            let mut s = Sample::default();
            let (mut ok, mut err) = (0, 0);
            let mut slowest = Duration::ZERO;
            for _ in 0..400 {
                let t0 = Instant::now();
                let before = u.cache_stats();
                let r = u.sample(&mut s);
                match &r {
                    Ok(()) => ok += 1,
                    Err(_) => err += 1,
                }
                let el = t0.elapsed();
                if el > Duration::from_millis(20) {
                    eprintln!(
                        "{}: slow corrupted sample, {el:?}: {} code loads, {} threads, {} frames, {:?}",
                        it.name,
                        u.cache_stats().1 - before.1,
                        s.threads.len(),
                        s.threads.iter().map(|t| t.frames.len()).sum::<usize>(),
                        r.err().map(|e| e.to_string())
                    );
                }
                slowest = slowest.max(el);
            }
            eprintln!(
                "{} seed {seed} (1 read in {every} spoiled): {ok} stacks, {err} errors, slowest sample {slowest:?}",
                it.name
            );
            assert!(
                slowest < Duration::from_millis(500),
                "{}: a corrupted sample took {slowest:?}",
                it.name
            );
        }
        // And the same unwinder state is no worse for it: clean reads
        // still give clean stacks.
        let mut u = tachyon::attach(t.pid(), UnwindOptions::default()).unwrap();
        let mut s = Sample::default();
        let good = (0..50).filter(|_| u.sample(&mut s).is_ok()).count();
        assert!(good >= 45, "{}: {good}/50 clean samples", it.name);
    }
}
