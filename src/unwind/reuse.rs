//! The frames of the last walk under an unchanged leaf, reused.
//!
//! A steady thread's stack changes only at its top: the leaf's
//! instruction pointer moves and its locals change, but everything below
//! is the same bytes as in the last sample. The same bytes decode to the
//! same frames. So a walk decodes the leaf, and if everything the last
//! walk read below the leaf is byte for byte what it read then, it
//! appends the frames that walk found there instead of walking them
//! again. A comparison of copied memory costs far less than a lookup per
//! frame, which is what makes a deep steady stack cost about what a
//! shallow one does.
//!
//! "Everything read below the leaf" is:
//! - the copied data stack from the first chunk's start up to the leaf
//!   frame, and every older chunk, at the same addresses;
//! - each frame outside the data stack that the walk visited (entry frames
//!   on the C stack, generator frames, the 3.15 base frame inside the
//!   thread state), at the same address with the same bytes;
//! - the leaf's link to its caller.
//!
//! The decoding must not have changed either: the code cache's epoch
//! (bumped whenever it drops or replaces a code object), the frame that
//! started a garbage collection, whether `<native>` markers are shown, and
//! the 3.11/3.12 entry link the walk is checked against are the same. Only walks that found every frame in the
//! code cache's table of trusted code are kept: a frame from a code object
//! still on probation is decoded again next time. Walks with `--opcodes`,
//! truncated walks and task walks are never kept.
//!
//! The bytes are copied only when the leaf was at the same address in the
//! last sample too, so a churning stack costs no copies.

use crate::model::FrameId;

/// Most bytes of data stack kept per thread for the comparison: deeper
/// stacks are walked every time.
const MAX_KEPT: usize = 256 * 1024;

/// Most threads per sample whose walks are kept (the first in the
/// interpreter's list): with [`MAX_KEPT`], at most 16 MiB for a program
/// of deep stacks on thousands of threads; a few hundred KiB usually.
pub const MAX_KEPT_THREADS: usize = 64;

/// One thread's last walk below its leaf.
#[derive(Default)]
pub struct Tail {
    /// The rest of this struct describes a walk that can be reused.
    valid: bool,
    /// Being recorded by the walk under way (see [`Tail::begin`]).
    recording: bool,
    /// Recorded walks so far are reusable.
    eligible: bool,
    /// The context the walk was recorded in (see [`Context`]).
    ctx: Context,
    /// The leaf of the last walk (kept or not): the bytes are copied only
    /// for a leaf that stays.
    last_leaf: u64,
    /// The copied data stack: (chunk address, bytes compared) per chunk,
    /// the bytes one after another in `stack`.
    chunks: Vec<(u64, usize)>,
    stack: Vec<u8>,
    /// Frames outside the data stack: (address, offset into `outside_bytes`,
    /// read from the thread state copy).
    outside: Vec<(u64, usize, bool)>,
    outside_bytes: Vec<u8>,
    frame_size: usize,
    /// What the walk produced below the leaf.
    frames: Vec<FrameId>,
    codes: Vec<u64>,
    /// Where in the walk's output and code list the part below the leaf
    /// began, while recording.
    out_start: usize,
    codes_start: usize,
    /// Walks that reused this tail.
    hits: u64,
}

/// What a walk checks a kept tail against (see [`Tail::reusable`]): the
/// thread, its leaf frame's address and where it links to, and what the
/// decoding depends on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    pub tstate: u64,
    pub leaf: u64,
    pub leaf_previous: u64,
    pub epoch: u32,
    pub gc_frame: u64,
    /// `<native>` markers are emitted.
    pub native: bool,
    pub base_frame: Option<u64>,
    /// The 3.11/3.12 entry link the walk is checked against below the leaf.
    pub entry_expected: Option<u64>,
    /// Where the newest data-stack frame ends (see `frames::Contiguous`).
    pub newest_end: Option<u64>,
}

impl Tail {
    /// Is a walk kept below `leaf` of thread `tstate` (whatever the rest of
    /// its context)?
    pub fn kept_below(&self, tstate: u64, leaf: u64) -> bool {
        self.valid && self.ctx.tstate == tstate && self.ctx.leaf == leaf
    }

    /// Is the kept walk below this leaf reusable, as far as the context
    /// tells? The memory is compared by [`Tail::same_memory`].
    pub fn reusable(&self, c: &Context) -> bool {
        self.valid && self.ctx == *c
    }

    /// Is the memory below the leaf what it was? `chunk(i)` gives the
    /// address and copy of the i-th copied chunk (0: the newest);
    /// `frame(addr)` the bytes of a frame outside the data stack, and
    /// whether they come from the thread state copy.
    pub fn same_memory<'b>(
        &self,
        chunk: impl Fn(usize) -> Option<(u64, &'b [u8])>,
        frame: impl Fn(u64) -> Option<(&'b [u8], bool)>,
    ) -> bool {
        let mut at = 0;
        for (i, &(addr, len)) in self.chunks.iter().enumerate() {
            match chunk(i) {
                Some((a, b)) if a == addr && b.len() >= len => {
                    if b[..len] != self.stack[at..at + len] {
                        return false;
                    }
                }
                _ => return false,
            }
            at += len;
        }
        self.outside.iter().all(|&(addr, off, _)| {
            frame(addr).is_some_and(|(b, _)| {
                b.len() >= self.frame_size
                    && b[..self.frame_size] == self.outside_bytes[off..off + self.frame_size]
            })
        })
    }

    /// The kept frames and code objects below the leaf, and the frames
    /// outside the data stack the next sample should prefetch.
    pub fn frames(&self) -> &[FrameId] {
        &self.frames
    }

    /// A walk reused the kept frames.
    pub fn hit(&mut self) {
        self.hits += 1;
    }

    /// How many walks reused kept frames.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    pub fn codes(&self) -> &[u64] {
        &self.codes
    }

    pub fn prefetch(&self) -> impl Iterator<Item = u64> + '_ {
        self.outside
            .iter()
            .filter(|(_, _, in_tstate)| !in_tstate)
            .map(|&(a, _, _)| a)
    }

    /// A walk passed its leaf and goes on below it: record what it finds
    /// there from now on, with its context.
    pub fn begin(&mut self, c: &Context, out_len: usize, codes_len: usize, frame_size: usize) {
        self.valid = false;
        self.recording = true;
        self.eligible = true;
        self.ctx = *c;
        self.frame_size = frame_size;
        self.out_start = out_len;
        self.codes_start = codes_len;
        self.outside.clear();
        self.outside_bytes.clear();
    }

    /// While recording: a frame outside the data stack, read at `addr`.
    pub fn note_outside(&mut self, addr: u64, bytes: &[u8], in_tstate: bool) {
        if !self.recording {
            return;
        }
        match bytes.get(..self.frame_size) {
            Some(b) if self.outside.len() < 64 => {
                self.outside
                    .push((addr, self.outside_bytes.len(), in_tstate));
                self.outside_bytes.extend_from_slice(b);
            }
            _ => self.eligible = false,
        }
    }

    /// While recording: something below the leaf must be decoded afresh
    /// next time (a code object loaded, the stack truncated).
    pub fn spoil(&mut self) {
        self.eligible = false;
    }

    /// The walk ended. If it succeeded (`out` and `codes` are its output
    /// and code list) and stayed eligible, keep it, with a copy of the
    /// data stack below `leaf` (`chunks(i)` as in [`Tail::same_memory`])
    /// when the leaf was at the same address last time too.
    pub fn finish<'b>(
        &mut self,
        ok: bool,
        leaf: u64,
        out: &[FrameId],
        codes: &[u64],
        chunks: impl Fn(usize) -> Option<(u64, &'b [u8])>,
    ) {
        let stayed = std::mem::replace(&mut self.last_leaf, leaf) == leaf;
        let recording = std::mem::take(&mut self.recording);
        self.valid = false;
        if !(ok && recording && self.eligible && stayed) {
            return;
        }
        // The data stack below the leaf: the newest chunk up to the leaf
        // (which must lie in it), every older chunk whole.
        self.chunks.clear();
        self.stack.clear();
        let mut i = 0;
        while let Some((addr, b)) = chunks(i) {
            let len = if i == 0 {
                match leaf.checked_sub(addr) {
                    Some(off) if (off as usize) <= b.len() => off as usize,
                    _ => return,
                }
            } else {
                b.len()
            };
            if self.stack.len() + len > MAX_KEPT {
                return;
            }
            self.chunks.push((addr, len));
            self.stack.extend_from_slice(&b[..len]);
            i += 1;
        }
        if i == 0 {
            return;
        }
        self.frames.clear();
        self.frames
            .extend_from_slice(out.get(self.out_start..).unwrap_or(&[]));
        self.codes.clear();
        self.codes
            .extend_from_slice(codes.get(self.codes_start..).unwrap_or(&[]));
        self.valid = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(leaf: u64) -> Context {
        Context {
            tstate: 0x1000,
            leaf,
            leaf_previous: leaf - 0x40,
            epoch: 1,
            gc_frame: 0,
            native: false,
            base_frame: None,
            entry_expected: None,
            newest_end: None,
        }
    }

    /// A chunk at 0x10000 with the leaf at +0x80, and one older chunk.
    fn chunks(newest: &[u8], older: &[u8]) -> impl Fn(usize) -> Option<(u64, &'static [u8])> {
        let n: &'static [u8] = Box::leak(newest.to_vec().into_boxed_slice());
        let o: &'static [u8] = Box::leak(older.to_vec().into_boxed_slice());
        move |i| match i {
            0 => Some((0x10000, n)),
            1 => Some((0x20000, o)),
            _ => None,
        }
    }

    fn kept(newest: &[u8], older: &[u8]) -> Tail {
        let mut t = Tail::default();
        let c = ctx(0x10080);
        for _ in 0..2 {
            t.begin(&c, 1, 0, 8);
            t.note_outside(0x7000, &[9; 8], false);
            t.finish(true, 0x10080, &[7, 8, 9], &[0x500], chunks(newest, older));
        }
        t
    }

    #[test]
    fn a_walk_is_kept_only_once_its_leaf_stays() {
        let mut t = Tail::default();
        let c = ctx(0x10080);
        t.begin(&c, 1, 0, 8);
        t.finish(true, 0x10080, &[7, 8], &[], chunks(&[1; 0x100], &[2; 0x40]));
        assert!(!t.reusable(&c), "first sight of the leaf");
        t.begin(&c, 1, 0, 8);
        t.finish(true, 0x10080, &[7, 8], &[], chunks(&[1; 0x100], &[2; 0x40]));
        assert!(t.reusable(&c));
        assert_eq!(t.frames(), &[8]);
        t.begin(&c, 1, 0, 8);
        t.spoil();
        t.finish(true, 0x10080, &[7, 8], &[], chunks(&[1; 0x100], &[2; 0x40]));
        assert!(!t.reusable(&c), "a spoiled walk is not kept");
    }

    #[test]
    fn any_changed_byte_below_the_leaf_or_context_refuses_reuse() {
        let newest = [1u8; 0x100];
        let older = [2u8; 0x40];
        let t = kept(&newest, &older);
        let same_frame = |a: u64| (a == 0x7000).then_some((&[9u8; 8][..], false));
        assert!(t.reusable(&ctx(0x10080)));
        assert!(t.same_memory(chunks(&newest, &older), same_frame));
        assert_eq!(t.frames(), &[8, 9]);
        assert_eq!(t.prefetch().collect::<Vec<_>>(), vec![0x7000]);

        // Bytes above the leaf (its own frame) may change.
        let mut above = newest;
        above[0x90] = 0;
        assert!(t.same_memory(chunks(&above, &older), same_frame));
        // Below it, in either chunk, they may not.
        let mut below = newest;
        below[0x7f] = 0;
        assert!(!t.same_memory(chunks(&below, &older), same_frame));
        let mut old2 = older;
        old2[0] = 0;
        assert!(!t.same_memory(chunks(&newest, &old2), same_frame));
        // Nor may an outside frame, or be missing.
        assert!(!t.same_memory(chunks(&newest, &older), |a: u64| {
            (a == 0x7000).then_some((&[8u8; 8][..], false))
        }));
        assert!(!t.same_memory(chunks(&newest, &older), |_| None));

        let mut c = ctx(0x10080);
        c.leaf_previous += 8;
        assert!(!t.reusable(&c));
        let mut c = ctx(0x10080);
        c.epoch = 2;
        assert!(!t.reusable(&c));
        let mut c = ctx(0x10080);
        c.native = true;
        assert!(!t.reusable(&c));
        let mut c = ctx(0x10080);
        c.entry_expected = Some(5);
        assert!(!t.reusable(&c));
        assert!(!t.reusable(&ctx(0x10088)));
    }
}
