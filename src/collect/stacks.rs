//! The counting layer the outputs share: every distinct stack interned
//! once ([`StackId`]), counted per thread, in the order first seen; and,
//! from those counts, each key's self and cumulative samples (a key counted
//! once per stack however often it recurs in it).
//!
//! A sample costs one hash of its frame-id slice per thread, whatever the
//! output. Outputs walk the distinct stacks once at the end, so their work
//! grows with the number of distinct stacks, not of samples.
//!
//! First-seen order is the order of a streaming count: a key (a frame, a
//! location, a caller edge) is first met in the first stack, in time, that
//! holds it, and distinct stacks are kept in exactly that order. Outputs
//! whose bytes depend on the order keys were first seen (the reference's
//! pstats dict, its JSON-lines frame table) stay byte for byte the same.

use foldhash::{HashMap, HashMapExt};
use std::hash::Hash;

use crate::model::{FrameId, Sample};

/// Index of a distinct stack in a [`StackCounts`].
pub type StackId = u32;

/// One thread's count of one distinct stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    pub tid: u64,
    pub stack: StackId,
    pub count: u64,
}

/// Distinct stacks (leaf first) and how often each thread was seen in each.
#[derive(Debug, Default, Clone)]
pub struct StackCounts {
    stacks: Vec<Box<[FrameId]>>,
    stack_index: HashMap<Box<[FrameId]>, StackId>,
    cells: Vec<Cell>,
    cell_index: HashMap<(u64, StackId), u32>,
    /// Thread stacks counted (samples × threads with a non-empty stack).
    total: u64,
    /// Count every thread as one (thread id 0): for outputs that show no
    /// threads, so that a program starting threads all the time does not
    /// grow them a cell per thread and stack.
    pooled: bool,
}

impl StackCounts {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts that keep no thread apart (see the `pooled` field): the same
    /// stacks in the same first-seen order, one cell each.
    pub fn pooled() -> Self {
        StackCounts {
            pooled: true,
            ..Self::default()
        }
    }

    /// Count each non-empty thread stack of `sample` once.
    pub fn add(&mut self, sample: &Sample) {
        for t in &sample.threads {
            if !t.frames.is_empty() {
                self.add_stack(t.tid, &t.frames, 1);
            }
        }
    }

    /// Count `stack` (leaf first) `n` times for thread `tid`.
    pub fn add_stack(&mut self, tid: u64, stack: &[FrameId], n: u64) -> StackId {
        let tid = if self.pooled { 0 } else { tid };
        let id = match self.stack_index.get(stack) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as StackId;
                self.stacks.push(stack.into());
                self.stack_index.insert(stack.into(), id);
                id
            }
        };
        match self.cell_index.get(&(tid, id)) {
            Some(&c) => self.cells[c as usize].count += n,
            None => {
                self.cell_index.insert((tid, id), self.cells.len() as u32);
                self.cells.push(Cell {
                    tid,
                    stack: id,
                    count: n,
                });
            }
        }
        self.total += n;
        id
    }

    /// The frames of stack `id`, leaf first.
    pub fn stack(&self, id: StackId) -> &[FrameId] {
        &self.stacks[id as usize]
    }

    /// Every (thread, stack) count, in the order first seen.
    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// Thread stacks counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Distinct threads seen with a non-empty stack.
    pub fn threads(&self) -> usize {
        let mut tids: Vec<u64> = self.cells.iter().map(|c| c.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        tids.len()
    }

    /// Self and cumulative samples per key, where `key` maps a frame to
    /// what is counted (a frame, a location, a function), keys in the
    /// order first seen (see the module documentation).
    pub fn self_and_cumulative<K: Hash + Eq + Clone>(
        &self,
        mut key: impl FnMut(FrameId) -> K,
    ) -> KeyCounts<K> {
        let mut out = KeyCounts {
            keys: Vec::new(),
            index: HashMap::new(),
            direct: Vec::new(),
            cumulative: Vec::new(),
        };
        let mut last_cell = Vec::new();
        for (c, cell) in self.cells.iter().enumerate() {
            let stamp = c + 1;
            for (depth, &frame) in self.stack(cell.stack).iter().enumerate() {
                let k = out.intern(key(frame));
                if last_cell.len() <= k {
                    last_cell.resize(k + 1, 0);
                }
                if depth == 0 {
                    out.direct[k] += cell.count;
                }
                if last_cell[k] != stamp {
                    last_cell[k] = stamp;
                    out.cumulative[k] += cell.count;
                }
            }
        }
        out
    }
}

/// Self ("direct") and cumulative samples per key, keys in first-seen
/// order.
#[derive(Debug, Clone)]
pub struct KeyCounts<K> {
    pub keys: Vec<K>,
    index: HashMap<K, usize>,
    pub direct: Vec<u64>,
    pub cumulative: Vec<u64>,
}

impl<K: Hash + Eq + Clone> KeyCounts<K> {
    fn intern(&mut self, k: K) -> usize {
        if let Some(&i) = self.index.get(&k) {
            return i;
        }
        let i = self.keys.len();
        self.index.insert(k.clone(), i);
        self.keys.push(k);
        self.direct.push(0);
        self.cumulative.push(0);
        i
    }

    /// The position of `k`, if it was seen.
    pub fn position(&self, k: &K) -> Option<usize> {
        self.index.get(k).copied()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ThreadSample;

    fn sample(threads: &[(u64, &[FrameId])]) -> Sample {
        Sample {
            pid: None,
            timestamp_us: 0,
            threads: threads
                .iter()
                .map(|&(tid, f)| ThreadSample {
                    tid,
                    frames: f.to_vec(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn stacks_are_interned_once_and_counted_per_thread_in_first_seen_order() {
        let mut c = StackCounts::new();
        c.add(&sample(&[(1, &[3, 2, 1]), (2, &[3, 2, 1])]));
        c.add(&sample(&[(1, &[4, 1]), (2, &[])]));
        c.add(&sample(&[(1, &[3, 2, 1])]));
        let cells: Vec<(u64, &[FrameId], u64)> = c
            .cells()
            .iter()
            .map(|x| (x.tid, c.stack(x.stack), x.count))
            .collect();
        assert_eq!(
            cells,
            [
                (1, &[3, 2, 1][..], 2),
                (2, &[3, 2, 1][..], 1),
                (1, &[4, 1][..], 1)
            ]
        );
        assert_eq!(c.total(), 4);
    }

    #[test]
    fn pooled_counts_keep_one_cell_per_stack_in_the_same_order() {
        let mut c = StackCounts::pooled();
        let mut apart = StackCounts::new();
        // Threads that come and go, each seen with the same two stacks.
        for tid in 1..100u64 {
            for counts in [&mut c, &mut apart] {
                counts.add(&sample(&[(tid, &[3, 2, 1]), (tid + 1000, &[4, 1])]));
            }
        }
        let cells: Vec<(u64, &[FrameId], u64)> = c
            .cells()
            .iter()
            .map(|x| (x.tid, c.stack(x.stack), x.count))
            .collect();
        assert_eq!(cells, [(0, &[3, 2, 1][..], 99), (0, &[4, 1][..], 99)]);
        assert_eq!(apart.cells().len(), 198);
        assert_eq!(c.total(), apart.total());
        let key = |f: FrameId| f;
        assert_eq!(
            c.self_and_cumulative(key).keys,
            apart.self_and_cumulative(key).keys
        );
    }

    #[test]
    fn recursion_counts_once_in_cumulative_and_order_is_a_streaming_count() {
        let mut c = StackCounts::new();
        // f(7) recursing: 7 -> 7 -> 5; then 6 -> 5.
        c.add(&sample(&[(1, &[7, 7, 5])]));
        c.add(&sample(&[(1, &[6, 5])]));
        c.add(&sample(&[(1, &[7, 7, 5])]));
        let k = c.self_and_cumulative(|f| f);
        assert_eq!(k.keys, [7, 5, 6]);
        assert_eq!(k.direct, [2, 0, 1]);
        assert_eq!(k.cumulative, [2, 3, 1]);
        // A coarser key merges frames; still once per stack.
        let k = c.self_and_cumulative(|f| f % 2);
        assert_eq!(k.keys, [1, 0]);
        assert_eq!(k.direct, [2, 1]);
        assert_eq!(k.cumulative, [3, 1]);
    }
}
