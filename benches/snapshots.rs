//! Deterministic, offline benchmarks on the committed snapshots
//! (`fixtures/snapshots/`, made by `scripts/make-snapshots.sh`): no root,
//! no live target, the same memory every run.
//!
//! `cargo bench --bench snapshots` (criterion). Groups:
//! - `unwind_cold/3.X/DEPTH`: the first sample of a fresh unwinder (every
//!   code object read, every line table decoded, every frame interned);
//! - `unwind_warm/3.X/DEPTH`: a later sample (code objects cached, memory
//!   read speculatively), the steady state of a profile;
//! - `binfmt_encode/..`, `binfmt_decode/..`: the `.bin` writer and reader,
//!   per sample, on a stream of the snapshots' stacks (one depth repeated,
//!   or depths 10/50/200 in turn);
//! - `collect/..`: the counting layer (`StackCounts`) and two collectors,
//!   per sample, on the same streams.
//!
//! Times are the benchmark thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`),
//! not wall time: on a shared machine the time the thread spends waiting
//! for a core is not the code's cost. Compare runs with criterion's
//! baselines (`-- --save-baseline before`, then `-- --baseline before`);
//! repeat, interleaved, and read ratios, not absolute times.

use std::hint::black_box;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BatchSize, Throughput, criterion_group, criterion_main};
use tachyon::binfmt::reader::{BinaryReader, ReadOptions};
use tachyon::binfmt::writer::{BinaryWriter, WriterOptions};
use tachyon::collect::collapsed::CollapsedCollector;
use tachyon::collect::flamegraph::FlamegraphCollector;
use tachyon::collect::stacks::StackCounts;
use tachyon::collect::{Collector, Output};
use tachyon::model::{FrameTable, Sample};
use tachyon::session::snapshot::Snapshot;
use tachyon::unwind::{UnwindOptions, Unwinder};

const MINORS: [u8; 3] = [13, 14, 15];
const DEPTHS: [usize; 3] = [10, 50, 200];
/// Samples in each stream of the encode, decode and collect groups.
const STREAM: usize = 1000;

/// The calling thread's CPU time, in nanoseconds, as a criterion
/// measurement (shown like wall time).
struct ThreadCpu {
    wall: WallTime,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.wall.formatter()
    }
}

type Criterion = criterion::Criterion<ThreadCpu>;

fn path(minor: u8, depth: usize) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/snapshots")
        .join(format!("3.{minor}-depth{depth}.snap"))
}

fn open(minor: u8, depth: usize) -> Snapshot {
    let p = path(minor, depth);
    Snapshot::open(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/make-snapshots.sh)", p.display()))
}

fn unwind(c: &mut Criterion) {
    let opts = UnwindOptions::default();
    for (group, warm) in [("unwind_cold", false), ("unwind_warm", true)] {
        let mut g = c.benchmark_group(group);
        g.measurement_time(Duration::from_secs(2))
            .warm_up_time(Duration::from_secs(1));
        for minor in MINORS {
            for depth in DEPTHS {
                let snap = open(minor, depth);
                let name = format!("3.{minor}/{depth}");
                let mut s = Sample::default();
                // A sample that fails would time an error path: check first.
                let mut u = snap.clone().unwinder(opts);
                u.sample(&mut s).expect("the snapshot unwinds");
                assert_eq!(s.threads[0].frames.len(), depth);
                if warm {
                    g.bench_function(&name, |b| {
                        b.iter(|| {
                            u.sample(&mut s).expect("warm sample");
                            black_box(&s);
                        })
                    });
                } else {
                    g.bench_function(&name, |b| {
                        b.iter_batched(
                            || (snap.clone().unwinder(opts), Sample::default()),
                            |(mut u, mut s)| {
                                u.sample(&mut s).expect("cold sample");
                                (u, s)
                            },
                            BatchSize::SmallInput,
                        )
                    });
                }
            }
        }
        g.finish();
    }
}

/// Samples of 3.15 at each depth, their ids in one frame table.
fn stacks() -> (FrameTable, Vec<(usize, Sample)>) {
    let mut table = FrameTable::new();
    let mut out = Vec::new();
    for depth in DEPTHS {
        let snap = open(15, depth);
        let (pid, rt) = (snap.pid(), snap.runtime().clone());
        let mut u = Unwinder::with_frames(snap, pid, rt, UnwindOptions::default(), table);
        let mut s = Sample::default();
        u.sample(&mut s).expect("the snapshot unwinds");
        out.push((depth, s));
        table = u.into_frames();
    }
    (table, out)
}

/// The streams: each depth alone, then all three in turn; timestamps 1 ms
/// apart.
fn streams() -> (FrameTable, Vec<(String, Vec<Sample>)>) {
    let (table, one) = stacks();
    let stream = |pick: &dyn Fn(usize) -> usize| -> Vec<Sample> {
        (0..STREAM)
            .map(|i| {
                let mut s = one[pick(i)].1.clone();
                s.timestamp_us = 1_000_000 + 1000 * i as u64;
                s
            })
            .collect()
    };
    let mut v = Vec::new();
    for (k, (depth, _)) in one.iter().enumerate() {
        v.push((format!("depth{depth}"), stream(&|_| k)));
    }
    v.push(("mixed".to_string(), stream(&|i| i % one.len())));
    (table, v)
}

fn encode(samples: &[Sample], table: &FrameTable) -> Vec<u8> {
    let mut w = BinaryWriter::new(
        Cursor::new(Vec::new()),
        "bench".into(),
        WriterOptions::default(),
    )
    .expect("writer");
    for s in samples {
        w.write_sample(s, table);
    }
    w.finish().expect("finish").into_inner()
}

fn binfmt(c: &mut Criterion) {
    let (table, streams) = streams();
    let mut g = c.benchmark_group("binfmt_encode");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(STREAM as u64));
    for (name, samples) in &streams {
        g.bench_function(name, |b| b.iter(|| black_box(encode(samples, &table))));
    }
    g.finish();
    let mut g = c.benchmark_group("binfmt_decode");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(STREAM as u64));
    for (name, samples) in &streams {
        let bytes = encode(samples, &table);
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut r = BinaryReader::new(
                    Cursor::new(&bytes[..]),
                    "bench".into(),
                    ReadOptions::default(),
                )
                .expect("reader");
                let n = r.replay(|s, _| {
                    black_box(s);
                });
                assert_eq!(n.expect("replay"), STREAM as u64);
            })
        });
    }
    g.finish();
}

fn collect(c: &mut Criterion) {
    let (table, streams) = streams();
    let mut g = c.benchmark_group("collect");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(STREAM as u64));
    for (name, samples) in &streams {
        g.bench_function(format!("stacks/{name}"), |b| {
            b.iter(|| {
                let mut counts = StackCounts::new();
                for s in samples {
                    counts.add(s);
                }
                black_box(counts)
            })
        });
        g.bench_function(format!("collapsed/{name}"), |b| {
            b.iter(|| {
                let mut c = CollapsedCollector::new(Output::Stdout);
                for s in samples {
                    c.collect(s, &table);
                }
                black_box(c)
            })
        });
        g.bench_function(format!("flamegraph/{name}"), |b| {
            b.iter(|| {
                let mut c = FlamegraphCollector::new(Output::Stdout);
                for s in samples {
                    c.collect(s, &table);
                }
                black_box(c)
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = criterion::Criterion::default().with_measurement(ThreadCpu { wall: WallTime });
    targets = unwind, binfmt, collect
}
criterion_main!(benches);
