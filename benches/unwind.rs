//! How fast and how reliably tachyon reads stacks, side by side with the
//! reference (`_remote_debugging.RemoteUnwinder` of CPython 3.15, the engine
//! of `python -m profiling.sampling`), on the same target in the same run.
//!
//! `cargo bench --bench unwind` (needs root and the sid root of
//! `scripts/provision-sid.sh`). It prints ratios, not absolute times: the
//! machines are shared and noisy.
//!
//! Workloads, each in a real python3.15 (and tachyon alone on 3.13/3.14):
//! - `deep`: a 50-frame recursion parked in `time.sleep` (steady state: the
//!   same stack again and again);
//! - `fib`: recursive `fib` in a loop (call-heavy: frames pushed and popped
//!   all the time, where the reference loses many samples);
//! - `threads`: 30 threads parked 20 frames deep plus the main thread
//!   (only with all threads: a server's shape).
//!
//! Each workload is read main-thread-only (tachyon's and the reference's
//! default) and with all threads.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use tachyon::model::Sample;
use tachyon::unwind::UnwindOptions;

const DEEP: &str = r#"
import sys, time
def down(n):
    if n == 0:
        print("READY", flush=True)
        time.sleep(1000)
    down(n - 1)
down(50)
"#;

const FIB: &str = r#"
import sys
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
print("READY", flush=True)
while True:
    fib(22)
"#;

const THREADS: &str = r#"
import threading, time
def work(n):
    def deep(k):
        if k: return deep(k - 1)
        while True: time.sleep(0.01)
    deep(n)
for i in range(30):
    threading.Thread(target=work, args=(20,), daemon=True).start()
time.sleep(0.5)
print("READY", flush=True)
time.sleep(1000)
"#;

const SECONDS: f64 = 2.0;

struct Result {
    calls_per_s: f64,
    error_pct: f64,
}

fn tachyon_loop(pid: i32, all_threads: bool) -> Result {
    let mut u = tachyon::attach(
        pid,
        UnwindOptions {
            all_threads,
            ..Default::default()
        },
    )
    .expect("attach");
    let mut s = Sample::default();
    let (mut n, mut err) = (0u64, 0u64);
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < SECONDS {
        n += 1;
        if u.sample(&mut s).is_err() {
            err += 1;
        }
    }
    Result {
        calls_per_s: n as f64 / t0.elapsed().as_secs_f64(),
        error_pct: err as f64 * 100.0 / n as f64,
    }
}

fn reference_loop(root: &std::path::Path, pid: i32, all_threads: bool) -> Option<Result> {
    let all = if all_threads { "True" } else { "False" };
    let code = format!(
        r#"
import time, _remote_debugging
u = _remote_debugging.RemoteUnwinder({pid}, all_threads={all}, cache_frames=True)
n = err = 0
t0 = time.perf_counter()
while time.perf_counter() - t0 < {SECONDS}:
    n += 1
    try:
        u.get_stack_trace()
    except Exception:
        err += 1
print(n / (time.perf_counter() - t0), err * 100.0 / n)
"#
    );
    let out = Command::new("chroot")
        .arg(root)
        .args(["/usr/bin/python3.15", "-c", &code])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace().map(|w| w.parse::<f64>().ok());
    Some(Result {
        calls_per_s: it.next()??,
        error_pct: it.next()??,
    })
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` would pass
    // nothing: only run when asked to bench.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let interps = common::sid_interpreters();
    let root = common::sid_root();
    println!(
        "workload  threads  python      tachyon samples/s  err%   | reference samples/s  err%  | speed ratio"
    );
    for (name, script, modes) in [
        ("deep", DEEP, &[false, true][..]),
        ("fib", FIB, &[false, true][..]),
        ("threads", THREADS, &[true][..]),
    ] {
        for it in interps.iter().filter(|i| !i.debug) {
            let mut t = common::spawn(it, script, &[], &[]);
            t.wait_for("READY", Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(200));
            for &all in modes {
                let which = if all { "all" } else { "main" };
                let ours = tachyon_loop(t.pid(), all);
                let theirs = if it.minor == 15 {
                    reference_loop(&root, t.pid(), all)
                } else {
                    None
                };
                match theirs {
                    Some(r) => println!(
                        "{name:8}  {which:7}  {:10}  {:17.0}  {:5.2}  | {:19.0}  {:5.2} | {:.2}x",
                        it.name,
                        ours.calls_per_s,
                        ours.error_pct,
                        r.calls_per_s,
                        r.error_pct,
                        ours.calls_per_s / r.calls_per_s
                    ),
                    None => println!(
                        "{name:8}  {which:7}  {:10}  {:17.0}  {:5.2}  | (the reference cannot read 3.{})",
                        it.name, ours.calls_per_s, ours.error_pct, it.minor
                    ),
                }
            }
        }
    }
}
