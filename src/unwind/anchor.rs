//! The 3.15 frame cache (`--frame-cache`): the interpreter's own mark
//! vouches for a thread's frames below its leaf, so that a steady stack is
//! read as its leaf frame alone, whatever its depth.
//!
//! CPython 3.15 keeps two fields in each thread state for profilers:
//! `last_profiled_frame`, a frame the profiler marked, and
//! `last_profiled_frame_seq`, a count. When the interpreter pops (returns
//! from, raises out of, yields from) the marked frame, it moves the mark
//! to that frame's caller and adds one to the count. Nothing else changes
//! either field but a profiler's write.
//!
//! What tachyon does with them:
//! - **Mark.** After a walk whose leaf is not the marked frame, it writes
//!   the leaf's address into `last_profiled_frame`: eight bytes, one
//!   `process_vm_writev`. It never writes the count.
//! - **Vouch.** A sample that finds the mark on its leaf with count `S`,
//!   and keeps its walk below that leaf (a complete walk of trusted frames,
//!   see [`super::reuse`]), vouches for `(leaf, S)`.
//! - **Hit.** A later sample expecting one reads only the leaf's frame (a
//!   window of its chunk), and the thread state after it, last in the same
//!   system call (the kernel copies the ranges in order). If the state
//!   names the leaf as current and the mark reads `(leaf, S)`, the leaf
//!   was never popped between the vouching sample and that read: a pop
//!   would have moved the mark and the count, and the count never goes
//!   back. So the frame read before is the leaf's, nothing below it ran,
//!   and the kept frames below it are the stack's. The leaf itself is
//!   decoded as always (its line moves).
//! - Anything else (the mark elsewhere, the count moved, the leaf changed,
//!   the kept walk not reusable in this sample's context) reads and walks
//!   the whole stack as without the cache, and marks the new leaf.
//! - **Back off.** A program whose leaf changes between samples (deep
//!   recursion, many short calls) gets no hit, and marking each new leaf
//!   would cost a write a sample, and often a second read (a leaf found
//!   marked by chance, read alone, then whole). After [`FRUITLESS`] marks
//!   written without a hit, a thread's leaf is marked only once in
//!   [`BACKOFF`] samples that would mark it, until the next hit. Writing
//!   less never vouches for more: a hit still needs the mark found on the
//!   leaf with the count the vouching sample saw.
//!
//! **Another writer.** A second profiler (the reference uses the same
//! fields by default) writes the same mark. Its writes cannot make the
//! interpreter move the count, so a mark found elsewhere than tachyon put
//! it with the count unchanged can only be a foreign write: the cache
//! turns itself off for the rest of the run (and says so). A foreign write
//! that lands exactly where tachyon's would have is not seen that way, so
//! every [`AUDIT_EVERY`]th sample that could be a hit is instead read and
//! walked whole, and its frames below the leaf compared with the vouched
//! ones: a difference also turns the cache off.

/// Every this many samples of a thread that could be hits, one is read
/// whole and checked against the vouched frames instead.
pub const AUDIT_EVERY: u32 = 64;

/// Marks written without a hit before a thread's marks back off.
pub const FRUITLESS: u32 = 8;

/// Backed off, a thread's leaf is marked once in this many samples that
/// would mark it.
pub const BACKOFF: u32 = 32;

/// Why the cache turned itself off.
pub const FOREIGN: &str =
    "another profiler writes the same mark (the count did not move when the mark did)";
pub const AUDIT_FAILED: &str =
    "a stack read whole differed below its leaf from the frames the mark vouched for";
pub const CANNOT_WRITE: &str = "the mark cannot be written into the target";

/// A thread as the mark knows it: its state's address and its OS id (a
/// new thread may get an ended one's state, with a fresh mark and count).
pub type Thread = (u64, u64);

/// One thread's mark and what it vouches for.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mark {
    /// (thread state, leaf, count): the kept walk below `leaf` is vouched
    /// for while the mark reads `(leaf, count)`.
    pub vouched: Option<(Thread, u64, u64)>,
    /// (thread state, leaf, count seen by the writing sample): what this
    /// thread's mark was last set to.
    pub written: Option<(Thread, u64, u64)>,
    /// Samples that could have been hits since the last audit.
    pub since_audit: u32,
    /// Marks written since the last hit.
    pub fruitless: u32,
    /// Backed off: marks not written since the last one.
    pub skipped: u32,
}

impl Mark {
    /// The leaf whose frame alone the next sample of the thread whose
    /// state is at `tstate` should read, if a hit is likely (and this one
    /// is not an audit). (Which thread it is is known only once its state
    /// is read: [`Mark::covers`] decides.)
    pub fn window_leaf(&self, tstate: u64) -> Option<u64> {
        match self.vouched {
            Some((t, leaf, _)) if t.0 == tstate && self.since_audit + 1 < AUDIT_EVERY => Some(leaf),
            _ => None,
        }
    }

    /// A sample read as its leaf alone.
    pub fn hit(&mut self) {
        self.since_audit += 1;
        self.fruitless = 0;
        self.skipped = 0;
    }

    /// Is this sample of thread `tstate`, whose current frame is `leaf`
    /// and mark `found` (as read with its state), one that the vouched
    /// walk covers?
    pub fn covers(&self, tstate: Thread, leaf: u64, found: Option<(u64, u64)>) -> bool {
        matches!((self.vouched, found),
            (Some((t, l, s)), Some((f, fs))) if t == tstate && l == leaf && f == leaf && fs == s)
    }

    /// Was the mark moved by someone else? It was set to `written` by a
    /// sample that saw the count `S`; it reads `found` now. Only a pop of
    /// the marked frame moves it without a write, and a pop counts, so a
    /// mark elsewhere with the count still `S` was written by another.
    pub fn foreign(&self, tstate: Thread, found: Option<(u64, u64)>) -> bool {
        matches!((self.written, found),
            (Some((t, w, s)), Some((f, fs))) if t == tstate && f != w && fs == s)
    }

    /// After a walk of thread `tstate` whose leaf is `leaf`: what the mark
    /// (as `found` with the state) vouches for now, given whether the
    /// thread's kept walk is below this leaf (`kept`). True if the leaf
    /// must be marked (the mark is elsewhere, and the thread's marks are
    /// not backed off). A leaf of 0 is never marked nor vouched for.
    pub fn settle(
        &mut self,
        tstate: Thread,
        leaf: u64,
        found: Option<(u64, u64)>,
        kept: bool,
    ) -> bool {
        let Some((f, seq)) = found.filter(|_| leaf != 0) else {
            self.vouched = None;
            return false;
        };
        if f == leaf {
            self.vouched = kept.then_some((tstate, leaf, seq));
            return false;
        }
        self.vouched = None;
        if self.fruitless >= FRUITLESS && self.skipped + 1 < BACKOFF {
            self.skipped += 1;
            return false;
        }
        self.skipped = 0;
        self.fruitless = self.fruitless.saturating_add(1);
        self.written = Some((tstate, leaf, seq));
        true
    }
}

/// Most threads whose marks are kept: past it, those not in the last
/// sample are forgotten.
const MAX_MARKS: usize = 4096;

/// Every thread's mark, by its state's address: not by the unwinder's
/// slot, where a thread's place moves as others come and go (a mark left
/// in a slot would later meet its thread's mark moved by another slot's
/// write, and look foreign).
#[derive(Default)]
pub struct Marks {
    map: foldhash::HashMap<u64, (u64, Mark)>,
    sample: u64,
}

impl Marks {
    /// The mark of the thread whose state is at `tstate`, if any.
    pub fn get(&self, tstate: u64) -> Option<&Mark> {
        self.map.get(&tstate).map(|(_, m)| m)
    }

    /// The mark of the thread whose state is at `tstate`, made if new.
    pub fn entry(&mut self, tstate: u64) -> &mut Mark {
        let now = self.sample;
        let e = self.map.entry(tstate).or_insert((now, Mark::default()));
        e.0 = now;
        &mut e.1
    }

    /// A new sample: past [`MAX_MARKS`], forget the threads the last one
    /// did not see.
    pub fn new_sample(&mut self) {
        self.sample += 1;
        if self.map.len() > MAX_MARKS {
            let last = self.sample - 1;
            self.map.retain(|_, (seen, _)| *seen >= last);
        }
    }
}

/// The frame cache of one unwinder: on or off, and what it did.
#[derive(Debug, Default, Clone)]
pub struct FrameCache {
    /// Asked for, and the target has the fields.
    pub on: bool,
    /// Why it turned itself off during the run.
    pub off_because: Option<&'static str>,
    /// Thread samples whose frames below the leaf the mark vouched for.
    pub hits: u64,
    /// Marks written.
    pub writes: u64,
    /// Thread samples read whole to check vouched frames.
    pub audits: u64,
}

impl FrameCache {
    /// Is the cache in use now?
    pub fn active(&self) -> bool {
        self.on && self.off_because.is_none()
    }

    /// Add what `part` (another process of the same profile) did.
    pub fn add(&mut self, part: &FrameCache) {
        self.on |= part.on;
        self.off_because = self.off_because.or(part.off_because);
        self.hits += part.hits;
        self.writes += part.writes;
        self.audits += part.audits;
    }

    /// Turn it off for the rest of the run.
    pub fn turn_off(&mut self, why: &'static str) {
        if self.off_because.is_none() {
            self.off_because = Some(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thread = (0x1000, 7);
    const OTHER: Thread = (0x1000, 8);

    #[test]
    fn a_mark_vouches_only_once_found_on_the_leaf_with_a_kept_walk() {
        let mut m = Mark::default();
        // First sight: the mark is elsewhere; the leaf is to be marked.
        assert!(m.settle(T, 0x500, Some((0, 7)), true));
        assert_eq!(m.written, Some((T, 0x500, 7)));
        assert!(!m.covers(T, 0x500, Some((0x500, 7))));
        // Found on the leaf, but the walk was not kept: nothing vouched.
        assert!(!m.settle(T, 0x500, Some((0x500, 7)), false));
        assert!(!m.covers(T, 0x500, Some((0x500, 7))));
        // Found on the leaf with a kept walk: vouched for (leaf, 7).
        assert!(!m.settle(T, 0x500, Some((0x500, 7)), true));
        assert!(m.covers(T, 0x500, Some((0x500, 7))));
        assert_eq!(m.window_leaf(T.0), Some(0x500));
        assert_eq!(m.window_leaf(T.0 + 8), None, "another thread's state");
        assert!(
            !m.covers(OTHER, 0x500, Some((0x500, 7))),
            "another thread in the same state"
        );
        // The count moved (popped and pushed again at the same address),
        // another leaf, another thread: not covered.
        assert!(!m.covers(T, 0x500, Some((0x500, 8))));
        assert!(!m.covers(T, 0x540, Some((0x540, 7))));
        assert!(!m.covers(OTHER, 0x500, Some((0x500, 7))));
        // The leaf returned: the mark moved to its caller, the new leaf,
        // and counted one. Found there, it vouches for that leaf's walk.
        assert!(!m.settle(T, 0x4c0, Some((0x4c0, 8)), true));
        assert!(m.covers(T, 0x4c0, Some((0x4c0, 8))));
        assert!(!m.covers(T, 0x500, Some((0x500, 7))));
        // A callee pushed above: the mark is below the leaf, to be moved.
        assert!(m.settle(T, 0x540, Some((0x4c0, 8)), true));
        assert!(!m.covers(T, 0x540, Some((0x4c0, 8))));
        // No mark field (not 3.15): nothing.
        assert!(!m.settle(T, 0x4c0, None, true));
        assert_eq!(m.vouched, None);
        // No leaf to mark (a thread being made): nothing written.
        let w = m.written;
        assert!(!m.settle(T, 0, Some((0x4c0, 8)), true));
        assert_eq!((m.vouched, m.written), (None, w));
    }

    #[test]
    fn a_mark_moved_without_a_pop_is_a_foreign_write() {
        let mut m = Mark::default();
        assert!(m.settle(T, 0x500, Some((0x300, 7)), true));
        // Ours, untouched; or moved by pops (the count went up).
        assert!(!m.foreign(T, Some((0x500, 7))));
        assert!(!m.foreign(T, Some((0x4c0, 8))));
        assert!(!m.foreign(T, Some((0, 9))));
        // Elsewhere with the count unchanged: cleared or written by another.
        assert!(m.foreign(T, Some((0, 7))));
        assert!(m.foreign(T, Some((0x540, 7))));
        // Another thread in this state (a new one, its mark fresh) says
        // nothing.
        assert!(!m.foreign(OTHER, Some((0, 7))));
    }

    #[test]
    fn marks_without_hits_back_off_until_the_next_hit() {
        let mut m = Mark::default();
        // A new leaf every sample, the mark always elsewhere.
        let mut written = Vec::new();
        for i in 0..FRUITLESS + 3 * BACKOFF {
            let leaf = 0x500 + 0x40 * u64::from(i % 5);
            if m.settle(T, leaf, Some((0x300, 7)), true) {
                written.push(i);
            }
        }
        let first: Vec<u32> = (0..FRUITLESS).collect();
        assert_eq!(&written[..FRUITLESS as usize], &first[..]);
        let later: Vec<u32> = (1..=3).map(|k| FRUITLESS - 1 + k * BACKOFF).collect();
        assert_eq!(&written[FRUITLESS as usize..], &later[..]);
        // What was last written is what foreign writes are told from.
        let last = *written.last().unwrap();
        let leaf = 0x500 + 0x40 * u64::from(last % 5);
        assert_eq!(m.written, Some((T, leaf, 7)));
        // Found on its leaf, the mark still vouches, backed off or not.
        assert!(!m.settle(T, leaf, Some((leaf, 7)), true));
        assert!(m.covers(T, leaf, Some((leaf, 7))));
        // A hit ends the back-off: the next new leaf is marked at once.
        m.hit();
        assert!(m.settle(T, 0x900, Some((leaf, 7)), true));
    }

    #[test]
    fn every_audit_every_th_likely_hit_reads_the_whole_stack() {
        let mut m = Mark::default();
        m.settle(T, 0x500, Some((0x300, 7)), true);
        m.settle(T, 0x500, Some((0x500, 7)), true);
        let mut windows = 0;
        for _ in 0..AUDIT_EVERY {
            if m.window_leaf(T.0).is_some() {
                windows += 1;
                m.since_audit += 1;
            } else {
                m.since_audit = 0;
            }
        }
        assert_eq!(windows, AUDIT_EVERY - 1);
    }
}
