//! One profile for a whole process tree (`--subprocesses --merge`): every
//! process's samples reach one collector.
//!
//! Each process is sampled on its own thread with its own unwinder and
//! [`FrameTable`]. Its collector is a [`Front`]: it keeps the samples in a
//! batch, each stamped with its process's pid, and sends the batch, with
//! the strings and frames its table gained since the last one, through a
//! channel that never blocks. The thread that owns the real collector runs
//! the [`Merger`]: it re-interns each process's strings and frames into
//! the one shared table (a map from the process's ids to the shared ones,
//! grown as batches come), rewrites the samples' ids and hands them on. A
//! slow collector thus delays no sampling thread: batches wait in the
//! channel.
//!
//! A process's table only grows (the session carries it across a
//! followed process or an exec), so a batch need only carry its tail.
//!
//! A child process that turns out not to be a Python process of its own (a
//! fork that execs another program at once) must leave nothing in the
//! profile: a front may hold its samples for a while ([`Feed::front`]'s
//! `hold`) and sends nothing before the hold is over. What a front holds
//! when it is dropped without [`Collector::finish`] is lost: the session
//! finishes every process's front whose profile counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use foldhash::HashMap;

use super::Collector;
use crate::error::Result;
use crate::model::{Frame, FrameId, FrameTable, RunStats, Sample, StrId};

/// A front sends its batch when it holds this many samples...
const BATCH_SAMPLES: usize = 256;
/// ...or when its oldest unsent sample is this old.
const BATCH_AGE: Duration = Duration::from_millis(20);

/// What a front sends: a process's new strings and frames (its table's
/// tail), its samples in its own ids, and its failed samples.
struct Batch {
    /// Which front (a table), not which process: a front may follow
    /// several processes with one table.
    source: u64,
    /// Processes new to the merger: pid and command line.
    named: Vec<(u32, String)>,
    strings: Vec<Box<str>>,
    frames: Vec<Frame>,
    samples: Vec<Sample>,
    failed: u64,
}

/// Names a process for the outputs: its command line (`python3 app.py`);
/// `None` once it is gone.
pub type Namer = fn(u32) -> Option<String>;

/// Makes the [`Front`]s of one merged profile; cloned freely. Once
/// [`Feed::close`]d, it makes no more: the merger then ends when the last
/// front is gone.
#[derive(Clone)]
pub struct Feed {
    tx: Arc<Mutex<Option<Sender<Batch>>>>,
    next_source: Arc<AtomicU64>,
    namer: Namer,
}

/// A merged profile: its [`Feed`] for the sampling threads and its
/// [`Merger`] for the thread that owns the collector.
pub fn channel_with(namer: Namer) -> (Feed, Merger) {
    let (tx, rx) = channel();
    let feed = Feed {
        tx: Arc::new(Mutex::new(Some(tx))),
        next_source: Arc::new(AtomicU64::new(0)),
        namer,
    };
    let merger = Merger {
        rx,
        table: FrameTable::new(),
        sources: HashMap::default(),
    };
    (feed, merger)
}

impl Feed {
    /// The front of process `pid`, holding its samples back until they
    /// span `hold` (or it is finished). `None` once the feed is closed.
    pub fn front(&self, pid: u32, hold: Duration) -> Option<Front> {
        let tx = self.tx.lock().ok()?.clone()?;
        Some(Front {
            tx,
            source: self.next_source.fetch_add(1, Ordering::Relaxed),
            pid,
            namer: self.namer,
            names: vec![(pid, (self.namer)(pid))],
            hold,
            committed: hold.is_zero(),
            first_us: None,
            batch: Vec::new(),
            failed: 0,
            oldest: None,
            sent_strings: 0,
            sent_frames: 0,
        })
    }

    /// Make no more fronts.
    pub fn close(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
    }
}

/// One process's collector in a merged profile; see the module
/// documentation.
pub struct Front {
    tx: Sender<Batch>,
    source: u64,
    pid: u32,
    namer: Namer,
    /// Processes followed whose names the merger does not have yet, with
    /// what each ran when first seen.
    names: Vec<(u32, Option<String>)>,
    hold: Duration,
    /// The samples may go on: held long enough, or finished.
    committed: bool,
    first_us: Option<u64>,
    batch: Vec<Sample>,
    failed: u64,
    /// When the oldest unsent sample was taken (this clock).
    oldest: Option<Instant>,
    /// How much of the process's table the merger has.
    sent_strings: usize,
    sent_frames: usize,
}

impl Front {
    /// Send what is held, with the table's tail.
    fn send(&mut self, frames: &FrameTable) {
        if !self.committed || (self.batch.is_empty() && self.failed == 0) {
            return;
        }
        // Named as late as possible: a child found just before it
        // exec'd runs its own command by now (if it still runs).
        let named = std::mem::take(&mut self.names)
            .into_iter()
            .map(|(pid, then)| {
                let name = (self.namer)(pid).or(then);
                (pid, name.unwrap_or_else(|| "python".into()))
            })
            .collect();
        let strings = frames
            .strings()
            .get(self.sent_strings..)
            .unwrap_or_default()
            .to_vec();
        let new_frames = frames
            .frames()
            .get(self.sent_frames..)
            .unwrap_or_default()
            .to_vec();
        self.sent_strings += strings.len();
        self.sent_frames += new_frames.len();
        let batch = Batch {
            source: self.source,
            named,
            strings,
            frames: new_frames,
            samples: std::mem::take(&mut self.batch),
            failed: std::mem::take(&mut self.failed),
        };
        self.oldest = None;
        // The merger gone (its thread failed): the samples have nowhere
        // to go, and sampling goes on regardless.
        let _ = self.tx.send(batch);
    }
}

impl Collector for Front {
    fn collect(&mut self, sample: &Sample, frames: &FrameTable) {
        let first = *self.first_us.get_or_insert(sample.timestamp_us);
        if !self.committed
            && sample.timestamp_us.saturating_sub(first) >= self.hold.as_micros() as u64
        {
            self.committed = true;
        }
        let mut s = sample.clone();
        s.pid = Some(self.pid);
        self.batch.push(s);
        let oldest = *self.oldest.get_or_insert_with(Instant::now);
        if self.batch.len() >= BATCH_SAMPLES || oldest.elapsed() >= BATCH_AGE {
            self.send(frames);
        }
    }

    fn collect_failed(&mut self) {
        self.failed += 1;
    }

    /// The samples held so far keep the previous process's pid; the
    /// table goes on (the session carries it into the next process).
    fn target_changed(&mut self, pid: i32) {
        if let Ok(pid) = u32::try_from(pid)
            && pid != self.pid
        {
            self.pid = pid;
            self.names.push((pid, (self.namer)(pid)));
        }
    }

    /// Send the rest: the process's profile is complete.
    fn finish(&mut self, frames: &FrameTable, _stats: &RunStats) -> Result<()> {
        self.committed = true;
        self.send(frames);
        Ok(())
    }
}

/// What a collector knows of the processes of a merged profile: each
/// one's command, and which process each thread is of (thread ids are
/// unique among the processes living at once).
#[derive(Debug, Default, Clone)]
pub struct Processes {
    commands: HashMap<u32, String>,
    threads: HashMap<u64, u32>,
}

impl Processes {
    /// Remember which process `sample`'s threads are of, if it says.
    pub fn note(&mut self, sample: &Sample) {
        if let Some(pid) = sample.pid {
            for t in &sample.threads {
                self.threads.insert(t.tid, pid);
            }
        }
    }

    pub fn name(&mut self, pid: u32, command: &str) {
        self.commands.insert(pid, command.to_string());
    }

    /// The process thread `tid` was last seen in; `None` in a profile of
    /// one process.
    pub fn of_thread(&self, tid: u64) -> Option<u32> {
        self.threads.get(&tid).copied()
    }

    /// What process `pid` runs (`python3 app.py`), else `python`.
    pub fn command(&self, pid: u32) -> &str {
        self.commands.get(&pid).map_or("python", String::as_str)
    }

    /// `python3 app.py (pid 42)`: a process's section's name.
    pub fn label(&self, pid: u32) -> String {
        format!("{} (pid {pid})", self.command(pid))
    }

    /// Several processes' samples (a merged profile).
    pub fn merged(&self) -> bool {
        !self.threads.is_empty()
    }
}

/// How one front's ids map to the shared table's.
#[derive(Default)]
struct Source {
    strings: Vec<StrId>,
    frames: Vec<FrameId>,
}

/// The collector thread's side; see the module documentation.
pub struct Merger {
    rx: Receiver<Batch>,
    table: FrameTable,
    sources: HashMap<u64, Source>,
}

impl Merger {
    /// Hand every process's samples to `sink` until the feed is closed
    /// and every front is gone; the shared table, which `sink` is then
    /// finished with.
    pub fn run(mut self, sink: &mut dyn Collector) -> FrameTable {
        while let Ok(batch) = self.rx.recv() {
            self.apply(batch, sink);
        }
        self.table
    }

    fn apply(&mut self, batch: Batch, sink: &mut dyn Collector) {
        let src = self.sources.entry(batch.source).or_default();
        for s in &batch.strings {
            src.strings.push(self.table.intern_str(s));
        }
        // A string id the front's table did not hold (never, from the
        // session's own tables) becomes `?`, not a panic; a frame id, a
        // frame left out of its stack.
        let string = |strings: &[StrId], id: StrId| strings.get(id as usize).copied();
        for f in &batch.frames {
            let file = string(&src.strings, f.file).unwrap_or_else(|| self.table.intern_str("?"));
            let func = string(&src.strings, f.func).unwrap_or_else(|| self.table.intern_str("?"));
            let id = self.table.intern(Frame { file, func, ..*f });
            src.frames.push(id);
        }
        for (pid, command) in &batch.named {
            sink.process_named(*pid, command);
        }
        for mut s in batch.samples {
            for t in &mut s.threads {
                t.frames.retain_mut(|f| match src.frames.get(*f as usize) {
                    Some(&shared) => {
                        *f = shared;
                        true
                    }
                    None => false,
                });
                t.name = t.name.and_then(|n| string(&src.strings, n));
            }
            sink.collect(&s, &self.table);
        }
        for _ in 0..batch.failed {
            sink.collect_failed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FrameKind, ThreadSample};

    /// A thread's sample as seen: pid, tid, frame names root first,
    /// thread name.
    type Seen = (Option<u32>, u64, Vec<String>, Option<String>);

    #[derive(Default)]
    struct Log {
        seen: Vec<Seen>,
        named: Vec<(u32, String)>,
        failed: u64,
    }

    impl Collector for Log {
        fn collect(&mut self, s: &Sample, t: &FrameTable) {
            for th in &s.threads {
                let names = th
                    .frames
                    .iter()
                    .rev()
                    .map(|&f| t.str(t.frame(f).func).to_string())
                    .collect();
                let name = th.name.map(|n| t.str(n).to_string());
                self.seen.push((s.pid, th.tid, names, name));
            }
        }
        fn collect_failed(&mut self) {
            self.failed += 1;
        }
        fn process_named(&mut self, pid: u32, command: &str) {
            self.named.push((pid, command.into()));
        }
        fn finish(&mut self, _: &FrameTable, _: &RunStats) -> Result<()> {
            Ok(())
        }
    }

    fn namer(pid: u32) -> Option<String> {
        Some(format!("cmd{pid}"))
    }

    fn func(t: &mut FrameTable, name: &str) -> FrameId {
        let file = t.intern_str("/x.py");
        let func = t.intern_str(name);
        t.intern(Frame {
            kind: FrameKind::Python,
            file,
            func,
            location: None,
            opcode: None,
        })
    }

    fn sample(ts: u64, tid: u64, frames: Vec<FrameId>, name: Option<StrId>) -> Sample {
        Sample {
            timestamp_us: ts,
            threads: vec![ThreadSample {
                tid,
                frames,
                name,
                ..Default::default()
            }],
            pid: None,
        }
    }

    #[test]
    fn two_tables_meet_in_one_with_their_pids() {
        let (feed, merger) = channel_with(namer);
        let (mut a, mut b) = (FrameTable::new(), FrameTable::new());
        // Same names, different ids in each table.
        let b_main = func(&mut b, "main");
        let a_work = func(&mut a, "work");
        let a_main = func(&mut a, "main");
        let b_work = func(&mut b, "work");
        let thread = b.intern_str("MainThread");
        let mut fa = feed.front(10, Duration::ZERO).unwrap();
        let mut fb = feed.front(11, Duration::ZERO).unwrap();
        fa.collect(&sample(1, 10, vec![a_work, a_main], None), &a);
        fb.collect(&sample(2, 11, vec![b_work, b_main], Some(thread)), &b);
        fb.collect_failed();
        // A frame interned after the first batch is sent with the next.
        let a_late = func(&mut a, "late");
        fa.collect(&sample(3, 10, vec![a_late, a_main], None), &a);
        fa.finish(&a, &RunStats::default()).unwrap();
        fb.finish(&b, &RunStats::default()).unwrap();
        feed.close();
        drop((fa, fb));
        let mut log = Log::default();
        let table = merger.run(&mut log);
        let mut seen = log.seen.clone();
        seen.sort();
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            seen,
            vec![
                (Some(10), 10, v(&["main", "late"]), None),
                (Some(10), 10, v(&["main", "work"]), None),
                (
                    Some(11),
                    11,
                    v(&["main", "work"]),
                    Some("MainThread".into())
                ),
            ]
        );
        // One frame per distinct function in the shared table.
        assert_eq!(table.len(), 3);
        log.named.sort();
        assert_eq!(log.named, [(10, "cmd10".into()), (11, "cmd11".into())]);
        assert_eq!(log.failed, 1);
    }

    #[test]
    fn ids_a_front_never_sent_cost_a_frame_not_a_panic() {
        let (feed, merger) = channel_with(namer);
        let tx = feed.tx.lock().unwrap().clone().unwrap();
        feed.close();
        let frame = Frame {
            kind: FrameKind::Python,
            file: 7,
            func: 0,
            location: None,
            opcode: None,
        };
        tx.send(Batch {
            source: 0,
            named: vec![],
            strings: vec!["f".into()],
            frames: vec![frame],
            samples: vec![sample(1, 1, vec![0, 99], Some(42))],
            failed: 0,
        })
        .unwrap();
        drop(tx);
        let mut log = Log::default();
        let table = merger.run(&mut log);
        let f = table.frame(0);
        assert_eq!((table.str(f.file), table.str(f.func)), ("?", "f"));
        assert_eq!(log.seen, [(None, 1, vec!["f".to_string()], None)]);
    }

    #[test]
    fn sampling_never_waits_for_the_merger() {
        // Nobody drains the channel while the front collects: it must
        // not block (a bounded channel would hang here).
        let (feed, merger) = channel_with(namer);
        let mut t = FrameTable::new();
        let f = func(&mut t, "busy");
        let mut front = feed.front(3, Duration::ZERO).unwrap();
        let n = 20 * BATCH_SAMPLES as u64 + 7;
        for i in 0..n {
            front.collect(&sample(i, 3, vec![f], None), &t);
        }
        front.finish(&t, &RunStats::default()).unwrap();
        drop(front);
        feed.close();
        let mut log = Log::default();
        merger.run(&mut log);
        assert_eq!(log.seen.len() as u64, n);
    }

    #[test]
    fn a_front_dropped_within_its_hold_leaves_nothing() {
        let (feed, merger) = channel_with(namer);
        let mut t = FrameTable::new();
        let f = func(&mut t, "parent_stack");
        let mut front = feed.front(5, Duration::from_secs(1)).unwrap();
        for i in 0..1000 {
            front.collect(&sample(i, 5, vec![f], None), &t);
        }
        drop(front);
        // A held front that lasts past its hold is kept whole.
        let mut kept = feed.front(6, Duration::from_millis(1)).unwrap();
        for i in 0..10 {
            kept.collect(&sample(i * 1000, 6, vec![f], None), &t);
        }
        kept.finish(&t, &RunStats::default()).unwrap();
        drop(kept);
        feed.close();
        assert!(feed.front(7, Duration::ZERO).is_none());
        let mut log = Log::default();
        merger.run(&mut log);
        assert_eq!(log.seen.len(), 10);
        assert!(log.seen.iter().all(|s| s.0 == Some(6)));
        assert_eq!(log.named, [(6, "cmd6".into())]);
    }
}
