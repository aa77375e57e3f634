//! What the live view knows about the run so far: every sample's stack
//! counted per thread, each frame's row key (function, file, line) and
//! instruction (`--opcodes`), the threads with their names and states,
//! good and failed samples.
//!
//! The sampling side fills a [`Pending`] batch without any lock and merges
//! it into the [`Aggregate`] when the lock is free (see `collector`); the
//! drawing side reads the `Aggregate` under the lock (see `view`). Strings
//! are copied once per new frame or thread name, never per sample.

use foldhash::{HashMap, HashMapExt};
use std::time::Instant;

use crate::collect::stacks::StackCounts;
use crate::model::status;
use crate::opcodes::OpTable;

/// The text of one frame as the view shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RowKey {
    pub func: Box<str>,
    pub file: Box<str>,
    /// 0 when the frame has no location (`<GC>`, `<native>`).
    pub line: i32,
}

/// Thread samples by state: what the header's "Threads:" line shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateCounts {
    /// Thread samples seen (a thread in a sample).
    pub seen: u64,
    /// Holding the GIL.
    pub gil: u64,
    /// Waiting for the GIL (3.13+).
    pub waiting: u64,
    /// Raising or handling an exception.
    pub exception: u64,
    /// In the garbage collector (a `<GC>` leaf).
    pub gc: u64,
    /// On a CPU, when the mode reads it.
    pub on_cpu: u64,
}

impl StateCounts {
    /// Count one thread sample with `status` bits; `gc` when its leaf is
    /// the garbage collector.
    pub fn add(&mut self, bits: u32, gc: bool) {
        self.seen += 1;
        self.gil += u64::from(bits & status::HAS_GIL != 0);
        self.waiting += u64::from(bits & status::GIL_REQUESTED != 0);
        self.exception += u64::from(bits & status::HAS_EXCEPTION != 0);
        self.on_cpu += u64::from(bits & status::ON_CPU != 0);
        self.gc += u64::from(gc);
    }

    pub fn merge(&mut self, o: &StateCounts) {
        self.seen += o.seen;
        self.gil += o.gil;
        self.waiting += o.waiting;
        self.exception += o.exception;
        self.gc += o.gc;
        self.on_cpu += o.on_cpu;
    }
}

/// One thread as the view lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadInfo {
    pub tid: u64,
    /// `threading`'s name or the kernel's, once the unwinder reads it.
    pub name: Option<String>,
    /// Samples this thread was in.
    pub states: StateCounts,
    /// Its status bits in the last sample it was in.
    pub last_status: u32,
    /// Its leaf was `<GC>` in the last sample it was in.
    pub last_gc: bool,
    /// The number of the last good sample it was in.
    pub last_sample: u64,
}

/// What one thread did in a batch of samples.
#[derive(Debug, Clone, Default)]
pub struct ThreadDelta {
    /// `Some` when the name changed in this batch.
    pub name: Option<Option<String>>,
    pub states: StateCounts,
    pub last_status: u32,
    pub last_gc: bool,
    /// The batch-relative number of the last good sample it was in.
    pub last_sample: u64,
}

/// Samples taken since the last merge, kept by the sampling side.
#[derive(Debug, Default)]
pub struct Pending {
    /// Frames new since the last merge, in frame-id order.
    pub frames: Vec<RowKey>,
    /// Their opcodes (`--opcodes`), beside `frames`; missing means none.
    pub ops: Vec<Option<u8>>,
    pub counts: StackCounts,
    /// By thread id, in the order first seen in this batch.
    pub threads: Vec<(u64, ThreadDelta)>,
    pub good: u64,
    pub failed: u64,
    /// The process the samples now come from, when it changed.
    pub pid: Option<i32>,
    /// The instruction a thread's leaf frame was at (`--opcodes`):
    /// (thread, frame, opcode table of its process, opcode) → samples.
    /// Counted per sample, not per frame: frames are interned across the
    /// processes a run follows, where one byte names different
    /// instructions.
    pub leaf_ops: HashMap<LeafOp, u64>,
    /// The Pythons the samples came from since the last merge, each told
    /// when the process sampled changed: its opcode table, and whether it
    /// reports threads waiting for the GIL.
    pub pythons: Vec<PythonInfo>,
    /// The first sample's time, when this batch holds the run's first.
    pub first_sample: Option<Instant>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
            && self.leaf_ops.is_empty()
            && self.pythons.is_empty()
            && self.counts.is_empty()
            && self.threads.is_empty()
            && self.good == 0
            && self.failed == 0
            && self.pid.is_none()
    }

    /// The entry of thread `tid` in this batch.
    pub fn thread(&mut self, tid: u64) -> &mut ThreadDelta {
        // Few threads: a linear search beats hashing.
        let i = match self.threads.iter().position(|(t, _)| *t == tid) {
            Some(i) => i,
            None => {
                self.threads.push((tid, ThreadDelta::default()));
                self.threads.len() - 1
            }
        };
        &mut self.threads[i].1
    }
}

/// A leaf frame's instruction in the samples of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeafOp {
    pub tid: u64,
    pub frame: u32,
    /// Index into [`Aggregate::tables`].
    pub table: u16,
    pub op: u8,
}

/// What the view needs to know of the Python of the process sampled.
#[derive(Debug, Clone, Copy)]
pub struct PythonInfo {
    pub opcodes: Option<&'static OpTable>,
    /// 3.13+ report a thread waiting for the GIL; 3.11 and 3.12 cannot,
    /// nor can a free-threaded build, which has no GIL.
    pub gil_wait: bool,
}

impl PythonInfo {
    /// What a Python of `version` (free-threaded or not) reports.
    pub fn new(version: crate::offsets::PyVersion, free_threaded: bool) -> PythonInfo {
        let (major, minor) = (version.major, version.minor);
        PythonInfo {
            opcodes: crate::opcodes::table(major as u32, minor as u32),
            // A free-threaded build has no GIL to wait for (unless turned
            // on at run time, which the view does not follow): n/a.
            gil_wait: (major, minor) >= (3, 13) && !free_threaded,
        }
    }

    pub fn of(offsets: &crate::offsets::Offsets) -> PythonInfo {
        PythonInfo::new(offsets.version, offsets.free_threaded)
    }
}

/// How sampling ended, for the final view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The target exited.
    TargetExited,
    /// The `-d` duration was over.
    Duration,
    /// A signal, the user quitting, or an error: the view closes at once.
    Stopped,
}

/// The run so far, as the view reads it.
#[derive(Debug)]
pub struct Aggregate {
    /// Distinct rows, in the order first seen.
    pub keys: Vec<RowKey>,
    key_index: HashMap<RowKey, u32>,
    /// Frame id → row (index into `keys`); frames are never forgotten, so
    /// this survives a reset.
    pub frame_key: Vec<u32>,
    /// Frame id → the instruction it is at (`--opcodes`): frames of one
    /// row at different instructions are different frames, so the stacks'
    /// counts hold each row's instructions too.
    pub frame_op: Vec<Option<u8>>,
    /// The target's instruction names, with `--opcodes`.
    pub opcodes: Option<&'static OpTable>,
    /// The opcode table of each Python the run sampled, in order (the
    /// first target's first): what [`LeafOp::table`] indexes.
    pub tables: Vec<Option<&'static OpTable>>,
    /// Leaf instructions (`--opcodes`), counted per thread.
    pub leaf_ops: HashMap<LeafOp, u64>,
    /// The Python sampled now reports threads waiting for the GIL (else
    /// the view shows n/a, not 0%).
    pub gil_wait: bool,
    /// The samples are asyncio tasks (`--async-aware`): a task's sample
    /// carries no GIL or exception state of its thread, so the view shows
    /// none rather than every thread "released".
    pub tasks: bool,
    /// Each thread's distinct stacks (frame ids, leaf first), counted.
    pub counts: StackCounts,
    /// In the order first seen.
    pub threads: Vec<ThreadInfo>,
    pub states: StateCounts,
    pub good: u64,
    pub failed: u64,
    pub pid: i32,
    /// The requested interval, in microseconds.
    pub interval_us: u64,
    /// When the numbers started: the first sample, or the last reset.
    pub since: Option<Instant>,
    /// When sampling ended, and how.
    pub ended: Option<(Instant, Ended)>,
    /// Bumped by each reset, so the view drops what it kept (trends).
    pub generation: u64,
}

impl Aggregate {
    pub fn new(pid: i32, interval_us: u64) -> Self {
        Aggregate {
            keys: Vec::new(),
            key_index: HashMap::new(),
            frame_key: Vec::new(),
            frame_op: Vec::new(),
            opcodes: None,
            tables: vec![None],
            leaf_ops: HashMap::new(),
            gil_wait: true,
            tasks: false,
            counts: StackCounts::new(),
            threads: Vec::new(),
            states: StateCounts::default(),
            good: 0,
            failed: 0,
            pid,
            interval_us,
            since: None,
            ended: None,
            generation: 0,
        }
    }

    /// Name the frames' instructions with `table` (`--opcodes`).
    pub fn with_opcodes(mut self, table: Option<&'static OpTable>) -> Self {
        self.opcodes = table;
        self.tables = vec![table];
        self
    }

    /// The samples will be asyncio tasks' (`--async-aware`).
    pub fn with_tasks(mut self, tasks: bool) -> Self {
        self.tasks = tasks;
        self
    }

    /// Fold a batch in (and empty it).
    pub fn merge(&mut self, p: &mut Pending) {
        for (i, f) in p.frames.drain(..).enumerate() {
            self.frame_op.push(p.ops.get(i).copied().flatten());
            let k = match self.key_index.get(&f) {
                Some(&k) => k,
                None => {
                    let k = self.keys.len() as u32;
                    self.key_index.insert(f.clone(), k);
                    self.keys.push(f);
                    k
                }
            };
            self.frame_key.push(k);
        }
        p.ops.clear();
        // Tables are indexed in the order the collector was told them.
        for py in p.pythons.drain(..) {
            self.gil_wait = py.gil_wait;
            self.tables.push(py.opcodes);
        }
        for (k, n) in p.leaf_ops.drain() {
            *self.leaf_ops.entry(k).or_insert(0) += n;
        }
        for cell in p.counts.cells() {
            self.counts
                .add_stack(cell.tid, p.counts.stack(cell.stack), cell.count);
        }
        p.counts = StackCounts::new();
        let base = self.good;
        for (tid, d) in p.threads.drain(..) {
            let i = match self.threads.iter().position(|t| t.tid == tid) {
                Some(i) => i,
                None => {
                    self.threads.push(ThreadInfo {
                        tid,
                        ..ThreadInfo::default()
                    });
                    self.threads.len() - 1
                }
            };
            let t = &mut self.threads[i];
            if let Some(name) = d.name {
                t.name = name;
            }
            t.states.merge(&d.states);
            self.states.merge(&d.states);
            if d.states.seen > 0 {
                t.last_status = d.last_status;
                t.last_gc = d.last_gc;
                t.last_sample = base + d.last_sample;
            }
        }
        self.good += p.good;
        self.failed += p.failed;
        p.good = 0;
        p.failed = 0;
        if let Some(pid) = p.pid.take() {
            self.pid = pid;
        }
        if let Some(t) = p.first_sample.take() {
            self.since.get_or_insert(t);
        }
    }

    /// Forget the counts (the `r` key): frames, rows and thread names stay.
    pub fn reset(&mut self, now: Instant) {
        self.counts = StackCounts::new();
        self.leaf_ops.clear();
        for t in &mut self.threads {
            t.states = StateCounts::default();
            t.last_sample = 0;
        }
        self.states = StateCounts::default();
        self.good = 0;
        self.failed = 0;
        self.since = Some(now);
        self.generation += 1;
    }

    /// Samples attempted since `since`.
    pub fn attempts(&self) -> u64 {
        self.good + self.failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(f: &str, line: i32) -> RowKey {
        RowKey {
            func: f.into(),
            file: "a.py".into(),
            line,
        }
    }

    #[test]
    fn only_gil_builds_of_313_and_later_report_gil_waits() {
        use crate::offsets::PyVersion;
        let v = |minor: u64| PyVersion::from_hex(0x0300_00f0 | (minor << 16));
        assert!(PythonInfo::new(v(13), false).gil_wait);
        assert!(PythonInfo::new(v(15), false).gil_wait);
        assert!(!PythonInfo::new(v(12), false).gil_wait);
        // Free-threaded: no GIL to wait for; its opcodes are still named.
        let ft = PythonInfo::new(v(13), true);
        assert!(!ft.gil_wait);
        assert!(ft.opcodes.is_some());
    }

    #[test]
    fn merging_maps_frames_to_rows_and_adds_counts_and_states() {
        let mut a = Aggregate::new(7, 1000);
        // Frames 0 and 2 are the same row (same function, file and line).
        let mut p = Pending {
            frames: vec![key("f", 1), key("g", 2), key("f", 1)],
            ..Pending::default()
        };
        p.counts.add_stack(1, &[0, 1], 3);
        p.thread(1).states.add(status::HAS_GIL, false);
        p.thread(1).name = Some(Some("main".into()));
        p.thread(1).last_sample = 3;
        p.good = 3;
        p.failed = 1;
        a.merge(&mut p);
        assert!(p.is_empty());
        assert_eq!(a.frame_key, [0, 1, 0]);
        assert_eq!(a.keys.len(), 2);
        assert_eq!((a.good, a.failed, a.attempts()), (3, 1, 4));
        assert_eq!(a.threads[0].name.as_deref(), Some("main"));
        assert_eq!(a.states.gil, 1);

        // A second batch: thread numbers continue from the first.
        p.counts.add_stack(1, &[2, 1], 1);
        p.thread(1).states.add(status::GIL_REQUESTED, true);
        p.thread(1).last_sample = 1;
        p.thread(1).last_status = status::GIL_REQUESTED;
        p.good = 1;
        a.merge(&mut p);
        assert_eq!(a.threads[0].last_sample, 4);
        assert_eq!(a.threads[0].last_status, status::GIL_REQUESTED);
        assert_eq!(a.threads[0].name.as_deref(), Some("main"), "name kept");
        assert_eq!((a.states.waiting, a.states.gc, a.states.seen), (1, 1, 2));
        assert_eq!(a.counts.total(), 4);

        a.reset(Instant::now());
        assert_eq!((a.good, a.counts.total(), a.states.seen), (0, 0, 0));
        assert_eq!(a.frame_key.len(), 3, "frames survive a reset");
        assert_eq!(a.generation, 1);
    }
}
