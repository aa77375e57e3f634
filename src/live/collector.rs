//! The live view's collector: counts each sample into a batch of its own,
//! without any lock, and hands the batch to the view when the view is not
//! reading. The sampling loop therefore never waits on the view: a busy
//! lock only means the batch is handed over a sample later.

use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::collect::Collector;
use crate::error::Result;
use crate::model::{FrameKind, FrameTable, NO_FILE, RunStats, Sample, StrId};
use crate::opcodes::OpTable;

use super::aggregate::{Aggregate, LeafOp, Pending, PythonInfo, RowKey};

/// How often a batch is offered to the view: well under its redraw period,
/// so the numbers it draws are fresh.
const HAND_OVER: Duration = Duration::from_millis(20);

/// What the collector and the view share.
#[derive(Debug)]
pub struct Shared {
    pub agg: Mutex<Aggregate>,
}

impl Shared {
    /// `opcodes`: the target's instruction names, with `--opcodes`;
    /// `tasks`: the samples are asyncio tasks (`--async-aware`).
    pub fn new(
        pid: i32,
        interval_us: u64,
        opcodes: Option<&'static OpTable>,
        tasks: bool,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            agg: Mutex::new(
                Aggregate::new(pid, interval_us)
                    .with_opcodes(opcodes)
                    .with_tasks(tasks),
            ),
        })
    }

    /// The aggregate, waiting for the lock (never called by the sampling
    /// loop); a panic elsewhere does not hide the numbers.
    pub fn lock(&self) -> MutexGuard<'_, Aggregate> {
        self.agg.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Feeds the live view; see the module documentation.
pub struct LiveCollector {
    shared: Arc<Shared>,
    pending: Pending,
    /// Frames of the frame table already copied as row keys.
    frames_seen: usize,
    /// Each thread's last name id, to copy a name only when it changes.
    names: Vec<(u64, Option<StrId>)>,
    last_hand_over: Instant,
    started: bool,
    /// The index of the current process's opcode table in the
    /// aggregate's `tables` (0: the first target's).
    table: u16,
}

impl LiveCollector {
    pub fn new(shared: Arc<Shared>) -> Self {
        LiveCollector {
            shared,
            pending: Pending::default(),
            frames_seen: 0,
            names: Vec::new(),
            last_hand_over: Instant::now(),
            started: false,
            table: 0,
        }
    }

    /// Copy the frames the table gained since the last sample.
    fn copy_new_frames(&mut self, frames: &FrameTable) {
        let all = frames.frames();
        let strings = frames.strings();
        let text = |id: StrId| -> Box<str> {
            strings
                .get(id as usize)
                .cloned()
                .unwrap_or_else(|| "?".into())
        };
        for f in all.iter().skip(self.frames_seen) {
            self.pending.frames.push(RowKey {
                func: text(f.func),
                // The view shows a synthetic frame at `~:0`.
                file: f.file().map_or_else(|| NO_FILE.into(), text),
                line: f.line(),
            });
            self.pending.ops.push(f.opcode);
        }
        self.frames_seen = self.frames_seen.max(all.len());
    }

    /// One sample of a thread whose leaf was at an instruction.
    fn count_leaf_op(&mut self, k: LeafOp) {
        *self.pending.leaf_ops.entry(k).or_insert(0) += 1;
    }

    /// Hand the batch over if it is time and the view is not reading.
    fn offer(&mut self, now: Instant) {
        if now.duration_since(self.last_hand_over) < HAND_OVER {
            return;
        }
        let mut agg = match self.shared.agg.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        agg.merge(&mut self.pending);
        self.last_hand_over = now;
    }
}

impl Collector for LiveCollector {
    fn collect(&mut self, sample: &Sample, frames: &FrameTable) {
        let now = Instant::now();
        if !self.started {
            self.started = true;
            self.pending.first_sample = Some(now);
        }
        self.copy_new_frames(frames);
        self.pending.good += 1;
        let n = self.pending.good;
        for t in &sample.threads {
            let gc = t
                .frames
                .first()
                .and_then(|&f| frames.frames().get(f as usize))
                .is_some_and(|f| f.kind == FrameKind::Gc);
            let renamed = match self.names.iter_mut().find(|(tid, _)| *tid == t.tid) {
                Some((_, last)) if *last == t.name => false,
                Some((_, last)) => {
                    *last = t.name;
                    true
                }
                None => {
                    self.names.push((t.tid, t.name));
                    t.name.is_some()
                }
            };
            let d = self.pending.thread(t.tid);
            d.states.add(t.status, gc);
            d.last_status = t.status;
            d.last_gc = gc;
            d.last_sample = n;
            if renamed {
                d.name = Some(
                    t.name
                        .and_then(|id| frames.strings().get(id as usize))
                        .map(|s| s.to_string()),
                );
            }
            if !t.frames.is_empty() {
                self.pending.counts.add_stack(t.tid, &t.frames, 1);
            }
            let leaf = t.frames.first().copied();
            if let Some((frame, Some(op))) =
                leaf.map(|f| (f, frames.frames().get(f as usize).and_then(|x| x.opcode)))
            {
                self.count_leaf_op(LeafOp {
                    tid: t.tid,
                    frame,
                    table: self.table,
                    op,
                });
            }
        }
        self.offer(now);
    }

    fn collect_failed(&mut self) {
        self.pending.failed += 1;
        self.offer(Instant::now());
    }

    fn target_changed(&mut self, pid: i32) {
        self.pending.pid = Some(pid);
    }

    fn target_python(&mut self, offsets: &crate::offsets::Offsets) {
        self.pending.pythons.push(PythonInfo::of(offsets));
        self.table = self.table.saturating_add(1);
    }

    /// Nothing to write: the last batch goes to the view for its final
    /// numbers.
    fn finish(&mut self, _frames: &FrameTable, _stats: &RunStats) -> Result<()> {
        self.shared.lock().merge(&mut self.pending);
        Ok(())
    }
}

impl Drop for LiveCollector {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.shared.lock().merge(&mut self.pending);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ThreadSample, status};

    fn frame(t: &mut FrameTable, func: &str, line: i32) -> u32 {
        crate::collect::scenarios::py(t, "w.py", func, line)
    }

    #[test]
    fn a_held_lock_delays_the_hand_over_and_loses_nothing() {
        let shared = Shared::new(1, 1000, None, false);
        let mut c = LiveCollector::new(shared.clone());
        let mut t = FrameTable::new();
        let hot = frame(&mut t, "hot", 3);
        let main = frame(&mut t, "main", 9);
        // The same line at an instruction (--opcodes): another frame, the
        // same row.
        let mut at = *t.frame(hot);
        at.opcode = Some(42);
        let hot_at = t.intern(at);
        let name = t.intern_str("MainThread");
        let s = Sample {
            pid: None,
            timestamp_us: 0,
            threads: vec![ThreadSample {
                tid: 5,
                status: status::HAS_GIL,
                frames: vec![hot_at, main],
                name: Some(name),
                ..Default::default()
            }],
        };
        let view = shared.lock();
        for _ in 0..10 {
            c.collect(&s, &t);
        }
        c.collect_failed();
        // The view holds the lock: nothing was handed over, nothing waited.
        assert_eq!(view.good, 0);
        drop(view);
        c.last_hand_over = Instant::now() - HAND_OVER;
        c.collect(&s, &t);
        let agg = shared.lock();
        assert_eq!((agg.good, agg.failed), (11, 1));
        assert_eq!(agg.counts.total(), 11);
        assert_eq!(agg.keys.len(), 2);
        assert_eq!(&*agg.keys[agg.frame_key[hot as usize] as usize].func, "hot");
        assert_eq!(agg.frame_key[hot_at as usize], agg.frame_key[hot as usize]);
        assert_eq!(agg.frame_op[hot_at as usize], Some(42));
        assert_eq!(agg.frame_op[hot as usize], None);
        assert_eq!(agg.threads[0].name.as_deref(), Some("MainThread"));
        assert_eq!(agg.threads[0].last_sample, 11);
        assert_eq!(agg.states.gil, 11);
    }
}
