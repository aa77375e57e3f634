//! Copying a thread's data-stack chunks and walking its frame chain.
//!
//! Frames of ordinary calls live in the thread's data stack, a linked list
//! of chunks; copying each chunk whole costs one read and lets the walk
//! decode every frame in local memory. Frames elsewhere (generator and
//! coroutine frames inside their objects, entry frames on the C stack, the
//! 3.15 base frame inside the thread state) are read one by one.

use foldhash::HashSet;

use super::code::CodeCache;
use super::reuse::{Context, Tail};
use crate::error::{Error, Result, Torn};
use crate::model::{Frame, FrameId, FrameKind, FrameTable};
use crate::offsets::{GEN_EXC_VALUE_BEFORE_FRAME, Offsets};
use crate::opcodes::OpTable;
use crate::process::{LocalBytes, ProcessMemory, RANGES_PER_CALL, ReadReq};

/// `_PyStackChunk`: previous@0, size@8, top@16, data@24.
pub(super) const CHUNK_HEADER: u64 = 24;
/// The interpreter's chunk size; most chunks are exactly this.
pub const CHUNK_GUESS: usize = 16 * 1024;
/// Largest chunk we believe: CPython's chunks are 16 KiB unless one frame
/// needs more, and no real frame needs a megabyte. A corrupt size must not
/// turn one sample into a 16 MiB copy.
const MAX_CHUNK: u64 = 1024 * 1024;
const MAX_CHUNKS: usize = 1024;
/// Most bytes of data stack copied per thread and sample: a corrupt chain
/// of chunk pointers must not make one sample copy gigabytes.
const MAX_STACK_BYTES: usize = 8 * 1024 * 1024;
pub use crate::model::MAX_DEPTH;

/// Most frames outside the data stack remembered per thread for the next
/// sample's prefetch: a chain of generators delegating to one another
/// (`yield from`, `await`) has one per generator, and a 500-deep one is a
/// real stack. Read in one system call, they are one instant's frames.
pub const MAX_PREFETCH: usize = 1024;
/// Frames remembered beyond those the last walk visited: generators come
/// and go (an encoder's per-container generators), and a new one often
/// takes the memory of one that just ended, so recent addresses are worth
/// reading again.
pub const KEEP_STALE: usize = 32;
/// Frames outside the data stack a sample may read one by one beyond its
/// budget (a deep generator chain's first sample, before its frames are
/// prefetched): a read and a frame's bytes each.
pub const MAX_GRANTED_FRAMES: usize = 1024;
/// The largest `_PyInterpreterFrame` we read (the offsets table's frame
/// size is checked against it).
pub const MAX_FRAME_BYTES: u64 = 512;
/// Bytes read before every frame outside the data stack, with it: for a
/// generator's frame they hold its handled exception
/// ([`GEN_EXC_VALUE_BEFORE_FRAME`] before the frame), so the thread's
/// exception status costs no read of its own.
pub(super) const PREFIX: usize = GEN_EXC_VALUE_BEFORE_FRAME as usize;

/// Local copies of one thread's data-stack chunks, and of frames that live
/// elsewhere but were seen last time (entry frames on the C stack,
/// generator frames), read in the same system call as the first chunk.
/// Buffers are reused across samples, so steady-state sampling does not
/// allocate.
#[derive(Default)]
pub struct Chunks {
    bufs: Vec<(u64, Vec<u8>)>,
    used: usize,
    /// Prefetched single frames: (address, offset into `extra_buf`).
    extra: Vec<(u64, usize)>,
    extra_buf: Vec<u8>,
    /// A prepared load: the first chunk's address (0: none) and whether
    /// only its live part is read.
    pending: u64,
    pending_live: bool,
    /// The older chunks (all but the first) the last load found, as
    /// (address, length): a load reads them again in its first system call,
    /// since older chunks change only when the stack shrinks below them.
    last_chain: Vec<(u64, usize)>,
    /// Speculative copies of those chunks; the first `spec_n` are in use.
    spec: Vec<(u64, Vec<u8>)>,
    spec_n: usize,
    /// The last load stopped at our own caps (chunks or bytes), not at the
    /// end of the chain: frames beyond it are not in the copies.
    cut: bool,
    /// The last load's batch, with prefetched frames in it, failed.
    prefetch_failed: bool,
    /// The first chunk was read only from this offset on (0: whole): the
    /// frames below are vouched for by the 3.15 frame cache, not read
    /// (see [`super::anchor`]). Nothing below the window is found.
    window: u64,
}

/// Most older chunks per sample whose reads are granted beyond the budget
/// (see [`Chunks::complete`]).
pub const MAX_GRANTED_CHUNKS: usize = 256;

/// Most older chunks read speculatively in the first system call.
const MAX_SPEC_CHUNKS: usize = 512;

impl Chunks {
    /// Copy the chain of chunks starting at `first`. A chunk that cannot be
    /// read ends the chain: a walk that needs frames beyond it finds the
    /// stack torn.
    ///
    /// `current` is the thread's current frame. When it lies in the first
    /// chunk, only the chunk up to the end of that frame is copied: every
    /// live frame of the chunk lies below it, and the rest is dead space.
    /// `prefetch` are frames outside the data stack to read in the same
    /// system call.
    pub fn load(
        &mut self,
        mem: &dyn ProcessMemory,
        first: u64,
        current: u64,
        frame_size: u64,
        prefetch: &[u64],
        grant: &dyn Fn(u32, u64),
    ) -> Result<()> {
        self.prepare(first, current, frame_size, prefetch);
        let mut reqs = Vec::with_capacity(prefetch.len() + 1);
        self.requests(&mut reqs);
        let r = mem.read_many(&mut reqs);
        drop(reqs);
        match r {
            Err(e) if e.is_fatal() => Err(e),
            r => self.complete(mem, r.is_ok(), grant),
        }
    }

    /// Size the buffers for a load (see [`Chunks::load`]); the reads are
    /// then [`Chunks::requests`], batched by the caller with other
    /// threads' if it likes, and [`Chunks::complete`].
    pub fn prepare(&mut self, first: u64, current: u64, frame_size: u64, prefetch: &[u64]) {
        let live_end = current
            .checked_sub(first)
            .filter(|off| (CHUNK_HEADER..MAX_CHUNK).contains(off))
            .map(|off| (off + frame_size) as usize);
        self.prepare_len(first, live_end, frame_size, prefetch);
    }

    /// [`Chunks::prepare`] with the first chunk's length to read given:
    /// its live part when known, else `None` for a [`CHUNK_GUESS`]. The
    /// buffer is sized once, never through a larger size first (zeroing
    /// 16 KiB a thread a sample cost more than reading the live part).
    fn prepare_len(
        &mut self,
        first: u64,
        live_end: Option<usize>,
        frame_size: u64,
        prefetch: &[u64],
    ) {
        self.used = 0;
        self.extra.clear();
        self.prefetch_failed = false;
        self.window = 0;
        self.pending = first;
        self.pending_live = false;
        if first == 0 {
            return;
        }
        if self.bufs.is_empty() {
            self.bufs.push((0, Vec::new()));
        }
        self.pending_live = live_end.is_some();
        let (slot_addr, buf) = &mut self.bufs[0];
        *slot_addr = first;
        buf.resize(live_end.unwrap_or(CHUNK_GUESS), 0);
        // Each copy starts `PREFIX` bytes early: a generator's handled
        // exception lies there (see [`Chunks::before_prefetched`]).
        let piece = PREFIX + frame_size as usize;
        self.extra_buf.resize(prefetch.len() * piece, 0);
        self.extra.extend(
            prefetch
                .iter()
                .enumerate()
                .map(|(i, &a)| (a, i * piece + PREFIX)),
        );
        self.spec_n = 0;
        for &(a, len) in &self.last_chain {
            if a == first || self.spec_n >= MAX_SPEC_CHUNKS {
                continue;
            }
            if self.spec.len() <= self.spec_n {
                self.spec.push((0, Vec::new()));
            }
            let (addr, buf) = &mut self.spec[self.spec_n];
            *addr = a;
            buf.resize(len, 0);
            self.spec_n += 1;
        }
    }

    /// Like [`Chunks::prepare`], before the thread state is known: guess
    /// that the first chunk is `first` again and its live part fits in
    /// `len` bytes. [`Chunks::accept_guess`] then checks the guess against
    /// the fresh thread state.
    pub fn prepare_guess(&mut self, first: u64, len: usize, frame_size: u64, prefetch: &[u64]) {
        let len = len.clamp(CHUNK_HEADER as usize, MAX_CHUNK as usize);
        self.prepare_len(first, Some(len), frame_size, prefetch);
    }

    /// [`Chunks::prepare_guess`], reading the first chunk only from the
    /// frame at `from` up (the frame cache's vouched leaf): the frames
    /// below it are not copied. A `from` outside the guessed live part
    /// reads the whole chunk.
    pub fn prepare_window_guess(
        &mut self,
        first: u64,
        from: u64,
        len: usize,
        frame_size: u64,
        prefetch: &[u64],
    ) {
        self.prepare_guess(first, len, frame_size, prefetch);
        let len = self.bufs[0].1.len() as u64;
        if let Some(off) = from
            .checked_sub(first)
            .filter(|off| (CHUNK_HEADER..len).contains(off))
        {
            self.window = off;
            // Nothing below the window is read: no older chunk either.
            self.spec_n = 0;
        }
    }

    /// Was the first chunk read only from its window up (see
    /// [`Chunks::prepare_window_guess`])?
    pub fn windowed(&self) -> bool {
        self.window != 0
    }

    /// After a guessed load was read: is the guess right for a thread whose
    /// first chunk is `first` and current frame `current`? If so, keep only
    /// the live part; if not, the caller loads afresh.
    pub fn accept_guess(&mut self, first: u64, current: u64, frame_size: u64) -> bool {
        if self.pending == 0 || self.pending != first {
            return false;
        }
        let read = self.bufs[0].1.len() as u64;
        let lowest = CHUNK_HEADER.max(self.window);
        match current
            .checked_sub(first)
            .filter(|off| *off >= lowest)
            .and_then(|off| off.checked_add(frame_size))
        {
            Some(live_end) if live_end <= read => {
                self.bufs[0].1.truncate(live_end as usize);
                true
            }
            _ => false,
        }
    }

    /// Length of the live part of the first chunk of the last load.
    pub fn live_len(&self) -> usize {
        if self.used > 0 {
            self.bufs[0].1.len()
        } else {
            0
        }
    }

    /// The reads a prepared load needs: the first chunk and the prefetched
    /// frames.
    pub fn requests<'a>(&'a mut self, reqs: &mut Vec<ReadReq<'a>>) {
        if self.pending == 0 {
            return;
        }
        let addr = self.pending;
        let from = self.window as usize;
        reqs.push(ReadReq {
            addr: addr + from as u64,
            buf: &mut self.bufs[0].1[from..],
        });
        let piece = if self.extra.is_empty() {
            1
        } else {
            self.extra_buf.len() / self.extra.len()
        };
        for (&(a, _), piece) in self.extra.iter().zip(self.extra_buf.chunks_mut(piece)) {
            reqs.push(ReadReq {
                addr: a.wrapping_sub(PREFIX as u64),
                buf: piece,
            });
        }
        for (a, buf) in &mut self.spec[..self.spec_n] {
            reqs.push(ReadReq {
                addr: *a,
                buf: &mut buf[..],
            });
        }
    }

    /// Finish a prepared load after its requests were read (`read_ok`) or
    /// not: check the first chunk, read it again alone if needed, and copy
    /// the older chunks.
    ///
    /// Older chunks not read speculatively are read one by one: `grant` is
    /// called for each, to add to the sample's read budget (the caller
    /// grants up to [`MAX_GRANTED_CHUNKS`] per sample), as a deep stack's
    /// first sample needs a read per chunk.
    pub fn complete(
        &mut self,
        mem: &dyn ProcessMemory,
        read_ok: bool,
        grant: &dyn Fn(u32, u64),
    ) -> Result<()> {
        let first = std::mem::take(&mut self.pending);
        if first == 0 {
            return Ok(());
        }
        if !read_ok {
            self.prefetch_failed = !self.extra.is_empty();
            self.extra.clear();
            self.spec_n = 0;
            // Read again below, whole.
            self.window = 0;
        }
        self.cut = false;
        if self.window != 0 {
            // The window holds every frame the walk reads; the older
            // chunks are not needed, and stay guessed for the next load.
            self.bufs[0].0 = first;
            self.used = 1;
            self.spec_n = 0;
            return Ok(());
        }
        let mut addr = first;
        let mut fresh = read_ok;
        let mut copied = 0usize;
        while addr != 0 {
            if self.used >= MAX_CHUNKS || copied >= MAX_STACK_BYTES {
                self.cut = true;
                break;
            }
            if self.bufs.len() <= self.used {
                self.bufs.push((0, Vec::new()));
            }
            if self.used > 0 {
                fresh = self.take_speculative(addr);
            }
            if !plausible(addr) || self.bufs[..self.used].iter().any(|(a, _)| *a == addr) {
                // Not a chunk (or a cycle): frames beyond are not copied,
                // and the walk finds the chain torn there.
                break;
            }
            let Some((len, next)) = self.copy_chunk(mem, addr, fresh, grant)? else {
                break;
            };
            fresh = false;
            copied += len;
            addr = next;
        }
        self.spec_n = 0;
        self.last_chain.clear();
        self.last_chain.extend(
            self.bufs[1.min(self.used)..self.used]
                .iter()
                .map(|(a, b)| (*a, b.len())),
        );
        Ok(())
    }

    /// An older chunk at `addr`: take its speculative copy into the next
    /// buffer if the first call read one. True if it did.
    fn take_speculative(&mut self, addr: u64) -> bool {
        let used = self.used;
        match self.spec[..self.spec_n]
            .iter()
            .position(|(a, _)| *a == addr)
        {
            Some(k) => {
                std::mem::swap(&mut self.bufs[used].1, &mut self.spec[k].1);
                self.spec[k].0 = 0;
                true
            }
            None => false,
        }
    }

    /// Copy the chunk at `addr` into the next buffer (already there when
    /// `fresh`, else read now, an older one granted), sized by its header.
    /// Its length and the next (older) chunk's address; `None` if it is
    /// unreadable or not a chunk.
    fn copy_chunk(
        &mut self,
        mem: &dyn ProcessMemory,
        addr: u64,
        fresh: bool,
        grant: &dyn Fn(u32, u64),
    ) -> Result<Option<(usize, u64)>> {
        let live = self.used == 0 && self.pending_live;
        if !fresh && self.used > 0 {
            grant(2, CHUNK_GUESS as u64);
        }
        let (slot_addr, buf) = &mut self.bufs[self.used];
        if !fresh {
            if !live {
                buf.resize(CHUNK_GUESS, 0);
            }
            if let Err(e) = mem.read(addr, buf) {
                if e.is_fatal() {
                    return Err(e);
                }
                // Maybe the chunk is smaller than our guess and ends at a
                // mapping boundary: read the header for the real size.
                buf.truncate(CHUNK_HEADER as usize);
                if mem.read(addr, buf).is_err() {
                    return Ok(None);
                }
            }
        }
        let size = buf.u64_at(8).unwrap_or(0);
        if !(CHUNK_HEADER..=MAX_CHUNK).contains(&size) {
            return Ok(None);
        }
        if (size as usize) < buf.len() {
            buf.truncate(size as usize);
        } else if !live && size as usize > buf.len() {
            buf.resize(size as usize, 0);
            if mem.read(addr, buf).is_err() {
                return Ok(None);
            }
        }
        *slot_addr = addr;
        let next = buf.u64_at(0).unwrap_or(0);
        let len = buf.len();
        self.used += 1;
        Ok(Some((len, next)))
    }

    /// A prefetched frame of `len` bytes at `addr`.
    pub fn prefetched(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let &(_, off) = self.extra.iter().find(|(a, _)| *a == addr)?;
        self.extra_buf.get(off..off + len as usize)
    }

    /// The addresses of the prefetched frames, in the order the last
    /// walks met them.
    pub fn prefetched_addrs(&self) -> impl Iterator<Item = u64> + '_ {
        self.extra.iter().map(|&(a, _)| a)
    }

    /// The [`PREFIX`] bytes before a prefetched frame at `addr`, read in
    /// the same instant as the frame.
    pub fn before_prefetched(&self, addr: u64) -> Option<&[u8]> {
        let &(_, off) = self.extra.iter().find(|(a, _)| *a == addr)?;
        self.extra_buf.get(off.checked_sub(PREFIX)?..off)
    }

    /// The `len` bytes at remote `addr`, if they lie inside a copied
    /// chunk, with the chunk's place in the chain (0: the newest).
    pub fn find(&self, addr: u64, len: u64) -> Option<(usize, &[u8])> {
        self.bufs[..self.used]
            .iter()
            .enumerate()
            .find_map(|(i, (base, buf))| {
                let start = addr.checked_sub(*base)?;
                let end = start.checked_add(len)?;
                let lowest = if i == 0 { self.window } else { 0 }.max(CHUNK_HEADER);
                (start >= lowest && end <= buf.len() as u64)
                    .then(|| (i, &buf[start as usize..end as usize]))
            })
    }

    /// The `i`-th copied chunk (0: the newest): its address and copy.
    /// None past a window: such a load copied only the window's frames.
    pub fn copy(&self, i: usize) -> Option<(u64, &[u8])> {
        if self.window != 0 {
            return None;
        }
        self.bufs[..self.used].get(i).map(|(a, b)| (*a, &b[..]))
    }

    /// Did the last load's batch, with prefetched frames in it, fail? One
    /// of them may be unreadable: it is not to be read again.
    pub fn prefetch_failed(&self) -> bool {
        self.prefetch_failed
    }

    /// Did the last load stop at our caps rather than at the chain's end?
    pub fn cut(&self) -> bool {
        self.cut
    }

    /// How many chunks the last load copied.
    pub fn copied(&self) -> usize {
        self.used
    }
}

impl Walk<'_> {
    /// `--opcodes`: read the instruction of each frame in `at` (one batch)
    /// and replace its frame in `out` by the same frame with the opcode. A
    /// failed read costs the opcode, never the frame.
    fn read_opcodes(&mut self, t: &OpTable, out: &mut [FrameId], at: &[OpcodeAt]) {
        let spans = self.opcode_spans(t, at);
        let total: u64 = spans.iter().flatten().map(|s| s.1).sum();
        let mut buf = vec![0u8; total as usize];
        let batch_ok = self.read_spans(&spans, &mut buf);
        let mut pos = 0usize;
        let mut retries = 0usize;
        for (a, span) in at.iter().zip(&spans) {
            let Some((addr, len)) = *span else { continue };
            let bytes = &mut buf[pos..pos + len as usize];
            pos += len as usize;
            if !batch_ok {
                if retries >= OPCODE_RETRIES {
                    continue;
                }
                retries += 1;
                (self.grant)(1, len);
                if self.mem.read(addr, bytes).is_err() {
                    continue;
                }
            }
            if let Some(op) = decode_opcode(t, a, addr, bytes) {
                self.set_opcode(out, a.index, op);
            }
        }
    }

    /// The (start address, length) to read for each frame's opcode; `None`:
    /// nothing to read. A 3.11/3.12 frame's read starts at its code's first
    /// instruction (instruction boundaries are then exact) while the walk's
    /// allowance lasts, else it is the window before `prev_instr`.
    fn opcode_spans(&self, t: &OpTable, at: &[OpcodeAt]) -> Vec<Option<(u64, u64)>> {
        // 3.11/3.12 callers: the units up to `prev_instr`, to step back
        // over the calling instruction's caches.
        let window = if self.offs.instr_ptr_is_prev {
            (t.caches.iter().copied().max().unwrap_or(0) as u64 + 1).min(MAX_WINDOW)
        } else {
            1
        };
        let mut walked = 0u64;
        at.iter()
            .map(|a| {
                // Garbage (a torn frame) reads nothing: the bytecode lies
                // in user space, the pointer at an even offset within it.
                let off = a.instr_ptr.checked_sub(a.base)?;
                let end = a.instr_ptr.checked_add(2)?;
                if off % 2 != 0 || off >= 1 << 28 || a.base < USER_START || end > USER_END {
                    return None;
                }
                if a.walk && off + 2 <= MAX_CODE_WALK && walked + off + 2 <= CODE_WALK_BYTES {
                    walked += off + 2;
                    return Some((a.base, off + 2));
                }
                let units = if a.in_caches {
                    (off / 2 + 1).min(window)
                } else {
                    1
                };
                Some((end - 2 * units, 2 * units))
            })
            .collect()
    }

    /// Read every span into `buf`, one after another, in one batch
    /// (granted); false if the batch failed.
    fn read_spans(&self, spans: &[Option<(u64, u64)>], buf: &mut [u8]) -> bool {
        let calls = spans.iter().flatten().count().div_ceil(RANGES_PER_CALL);
        (self.grant)(calls as u32, buf.len() as u64);
        let mut reqs = Vec::with_capacity(spans.len());
        let mut rest = buf;
        for s in spans.iter().flatten() {
            let (piece, tail) = rest.split_at_mut(s.1 as usize);
            reqs.push(ReadReq {
                addr: s.0,
                buf: piece,
            });
            rest = tail;
        }
        self.mem.read_many(&mut reqs).is_ok()
    }

    /// Replace frame `out[index]` by the same frame at `op`.
    fn set_opcode(&mut self, out: &mut [FrameId], index: usize, op: u8) {
        if let Some(slot) = out.get_mut(index) {
            let f = *self.table.frame(*slot);
            *slot = self.table.intern(Frame {
                opcode: Some(op),
                ..f
            });
        }
    }
}

/// The data stack is one contiguous stack: a frame begins where its
/// caller's ends (`co_framesize` words on), in the same chunk, and the
/// newest ends at the thread's `datastack_top`, or below it while a frame
/// above it is being pushed or popped (an exception's unwinding leaves the
/// current frame to the caller before it clears the dying frame). Then the
/// frame above must link to the thread's current frame: the dying frame's
/// caller became current, and a pushed frame is linked to the frame that
/// calls it ([`Walk::links_to_current`]). A frame whose slot was read at
/// another instant than the state and the frames around it (a slot a
/// later call took) breaks this, however whole its links look: a frame
/// would be missing from the stack, or a stranger spliced in. (A stale
/// entry frame on the C stack, read when it still linked to a slot that a
/// later call, no larger, has taken since, leads the walk to that call: it
/// ends below the top, and the frame above it is its own callee, which
/// links to it, not to the thread's current frame.)
struct Contiguous {
    /// Where the next data-stack frame down must end: (chunk, address).
    above: Option<(usize, u64)>,
    /// `above` is the thread's `datastack_top`, a bound, not an address.
    at_top: bool,
    /// Past the frames the walk decodes: nothing more is checked.
    stopped: bool,
}

impl Contiguous {
    /// Checks that start from the newest frame's end, if known.
    fn new(newest_end: Option<u64>) -> Self {
        Contiguous {
            above: newest_end.map(|end| (0, end)),
            at_top: true,
            stopped: false,
        }
    }

    /// The data-stack frame at `addr` in chunk `chunk` (0: the newest),
    /// of `words` words (0: unknown, not checked), is the next one down.
    /// `Some(end)`: it is the newest and ends at `end`, below the top; the
    /// frame at `end` must link to the thread's current frame.
    fn check(&mut self, chunk: usize, addr: u64, words: u32) -> Result<Option<u64>> {
        if self.stopped {
            return Ok(None);
        }
        let mut below_top = None;
        if let Some((c, expected)) = self.above
            && c == chunk
            && words != 0
        {
            let end = addr.wrapping_add(8 * words as u64);
            if end != expected && !(self.at_top && end < expected) {
                return Err(Torn::NotContiguous {
                    addr,
                    end,
                    expected,
                }
                .into());
            }
            below_top = (end != expected).then_some(end);
        }
        self.above = Some((chunk, addr));
        self.at_top = false;
        Ok(below_top)
    }

    /// A data-stack frame with no code to size it by: the next one down is
    /// checked against where it begins.
    fn skip(&mut self, chunk: usize, addr: u64) {
        if !self.stopped {
            self.above = Some((chunk, addr));
            self.at_top = false;
        }
    }

    fn stop(&mut self) {
        self.stopped = true;
    }
}

/// Interned ids of the synthetic frames a walk may emit.
#[derive(Clone, Copy)]
pub struct Markers {
    pub gc: FrameId,
    pub native: FrameId,
    /// At the outer end of a stack deeper than [`MAX_DEPTH`]: the frames
    /// beyond it were left out.
    pub truncated: FrameId,
}

impl Markers {
    pub fn new(table: &mut FrameTable) -> Self {
        Markers {
            gc: table.synthetic(FrameKind::Gc, "<GC>"),
            native: table.synthetic(FrameKind::Native, "<native>"),
            truncated: table.synthetic(FrameKind::Truncated, "<truncated>"),
        }
    }
}

/// Could a frame, chunk, thread or interpreter state lie at `addr`? A
/// pointer that fails this is not followed: it would cost a read for
/// nothing.
pub use crate::process::{USER_END, USER_START, plausible};

/// Reads granted to a walk for each code object it loads: the code object,
/// its type's name (once), two strings and a byte string, each at most a
/// speculative read, an exact read and a data read.
pub const READS_PER_CODE_LOAD: u32 = 16;
/// Bytes granted per code object loaded: its largest location table and
/// names, with room to spare.
pub const BYTES_PER_CODE_LOAD: u64 = 128 * 1024;
/// Free-threaded 3.14+: finding where a bytecode copy starts reads the
/// code's array pointer, the array's size and one entry.
pub const READS_PER_COPY_LOOKUP: u32 = 3;
pub const BYTES_PER_COPY_LOOKUP: u64 = 24;

/// The span of a frame that holds its `previous` link and its code, as
/// (offset, length): one read of it re-checks both (16 bytes from 3.12,
/// where they lead the frame; 24 in 3.11).
fn link_span(o: &Offsets) -> (u64, usize) {
    let start = o.frame_previous.min(o.frame_executable);
    let end = o.frame_previous.max(o.frame_executable) + 8;
    (start, (end - start) as usize)
}

/// A frame's bytes as a walk has them.
pub(super) struct FrameBytes<'b> {
    pub(super) frame: &'b [u8],
    /// From the thread state's copy.
    in_tstate: bool,
    /// The [`PREFIX`] bytes before a frame outside the data stack.
    pub(super) before: Option<&'b [u8]>,
}

impl<'b> FrameBytes<'b> {
    fn new(frame: &'b [u8], in_tstate: bool, before: Option<&'b [u8]>) -> Self {
        FrameBytes {
            frame,
            in_tstate,
            before,
        }
    }
}

/// What one walk needs besides the memory.
pub struct Walk<'a> {
    pub mem: &'a dyn ProcessMemory,
    /// Adds to the sample's read budget (calls, bytes) before a code
    /// object is loaded: those reads are bounded by the load itself.
    pub grant: &'a dyn Fn(u32, u64),
    /// Adds one frame's read to the budget before a frame outside the data
    /// stack is read alone; the caller caps these per sample
    /// ([`MAX_GRANTED_FRAMES`]).
    pub grant_frame: &'a dyn Fn(),
    /// Adds reads (calls, bytes) to the budget for the proof of a 3.12
    /// generator's resumer ([`super::resumer`]), if the sample has
    /// [`super::resumer::MAX_GRANTED_READS`] left: false once it has not.
    pub grant_resume: &'a dyn Fn(u32, u64) -> bool,
    pub offs: &'a Offsets,
    pub code: &'a mut CodeCache,
    pub table: &'a mut FrameTable,
    pub chunks: &'a Chunks,
    pub markers: Markers,
    /// Emit `<native>` at C-to-Python boundaries.
    pub native: bool,
    /// The frame that started a running collection (3.15), or 0.
    pub gc_frame: u64,
    /// Code objects used by this walk (for 3.13 cache re-validation).
    pub used_codes: &'a mut Vec<u64>,
    /// The thread state's address and local copy: 3.15's base frame lives
    /// inside it.
    pub tstate: (u64, &'a [u8]),
    /// Frames outside the data stack and the thread state that this walk
    /// visited: the next sample prefetches them.
    pub outside: &'a mut Vec<u64>,
    /// Scratch: frames outside the data stack seen in this walk (cycles).
    pub seen: &'a mut HashSet<u64>,
    /// The chain is the thread's own, held to the thread's count of its
    /// frames (see [`super::depth`]); not a running task's chain, cut
    /// below its coroutine.
    pub counted: bool,
    /// 3.11, 3.12: where the first entry frame of the walk must link to
    /// (the outer `_PyCFrame`'s current frame; see [`super::cframe`]).
    pub entry_previous: Option<u64>,
    /// `--opcodes`: the target's instruction table; each Python frame then
    /// carries the opcode at its instruction pointer.
    pub opcodes: Option<&'static OpTable>,
    /// The thread's last walk below its leaf: reused when nothing under
    /// the leaf changed, recorded otherwise (see [`super::reuse`]). `None`
    /// for walks that are never kept (opcodes, task stacks).
    pub tail: Option<&'a mut Tail>,
    /// The 3.15 frame cache's mark vouches for the kept walk below the
    /// leaf (see [`super::anchor`]): it is reused without comparing the
    /// memory below, which this sample did not read. If it cannot be
    /// reused, the walk fails with [`Torn::NotVouched`].
    pub vouched: bool,
    /// `Py_None`, which a handled-exception slot may hold for "none".
    pub none_addr: Option<u64>,
    /// Out: a generator or coroutine on the walked chain is handling an
    /// exception (its `gi_exc_state`, on the thread's `exc_info` chain
    /// while it runs, holds one). Meaningful for a thread's whole stack.
    pub handles_exception: bool,
    /// Out, when asked for (`dump --locals`): where each Python frame of
    /// the output is in the target. Such walks are never kept (`tail`).
    pub places: Option<&'a mut Vec<FramePlace>>,
    /// Out, when asked for (`--native-frames`): the address of each entry
    /// frame met, leaf first (3.12+: on the C stack, inside its eval
    /// loop's native frame). Such walks are never kept (`tail`).
    pub entries: Option<&'a mut Vec<u64>>,
}

/// Where the Python frame at `index` of a walk's output (leaf first) is
/// in the target: its `_PyInterpreterFrame` and its code object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramePlace {
    pub index: usize,
    pub frame: u64,
    pub code: u64,
    /// Where it was (as read): a later read of the frame that finds it
    /// elsewhere reads another moment (or another call) of it.
    pub instr_ptr: u64,
    /// Where the bytecode it runs starts: its code's own, or (free-threaded
    /// 3.14+) the thread's copy.
    pub copy: u64,
}

/// Frames of one walk whose opcodes are read (`--opcodes`); the rest get
/// none. Their reads go in one batch.
pub const MAX_OPCODE_FRAMES: usize = MAX_DEPTH;
/// When the batch fails (one unreadable instruction pointer), the leafmost
/// frames whose opcodes are read again one by one; the others get none.
pub const OPCODE_RETRIES: usize = 8;
/// Reads granted to one walk for opcodes: its batch and its retries.
pub const OPCODE_READS_PER_WALK: u32 =
    (MAX_OPCODE_FRAMES.div_ceil(RANGES_PER_CALL) + OPCODE_RETRIES) as u32;

/// Most code units read for one 3.11/3.12 caller frame's opcode.
const MAX_WINDOW: u64 = 32;

/// 3.11/3.12: the most bytecode read to find one caller's instruction
/// from its code's start, and per walk for all callers.
const MAX_CODE_WALK: u64 = 64 * 1024;
const CODE_WALK_BYTES: u64 = 1024 * 1024;

/// Bytes granted to one walk for opcodes: its batch and its retries.
pub const OPCODE_BYTES_PER_WALK: u64 =
    2 * MAX_WINDOW * (MAX_OPCODE_FRAMES + OPCODE_RETRIES) as u64 + 2 * CODE_WALK_BYTES;

/// A Python frame of a walk whose opcode is to be read.
struct OpcodeAt {
    /// Its place in the walk's output.
    index: usize,
    /// Its instruction pointer and the start of its bytecode.
    instr_ptr: u64,
    base: u64,
    /// 3.11/3.12: its callee was pushed by the eval loop itself, so
    /// `prev_instr` points at the last cache unit of the calling
    /// instruction, not at the instruction.
    in_caches: bool,
    /// 3.11/3.12: any frame's `prev_instr` may point into caches (a leaf
    /// for an instant around a call or a return): its instruction is found
    /// by walking its code from the start.
    walk: bool,
}

impl Walk<'_> {
    /// Where the thread's newest data-stack frame ends (its
    /// `datastack_top`, read with its state), when the version tells.
    pub(super) fn newest_end(&self) -> Option<u64> {
        let at = self.offs.tstate_datastack_top?;
        self.tstate.1.u64_at(at).filter(|&top| top != 0)
    }

    /// The bytes of a frame outside the data stack as this sample has them
    /// without a read (in the thread state copy, or prefetched), and
    /// whether from the thread state.
    fn outside_frame(&self, addr: u64) -> Option<(&[u8], bool)> {
        let fsize = self.offs.frame_size;
        let (t, tbuf) = self.tstate;
        let in_tstate = addr
            .checked_sub(t)
            .and_then(|off| tbuf.get(off as usize..off.checked_add(fsize)? as usize));
        match in_tstate {
            Some(b) => Some((b, true)),
            None => self.chunks.prefetched(addr, fsize).map(|b| (b, false)),
        }
    }

    /// The bytes of the frame at `addr`: from its chunk's copy (`in_chunk`),
    /// the thread state's copy (`in_tstate` says so), a prefetched copy,
    /// or else read now into `local`. Frames outside the data stack come
    /// with the [`PREFIX`] bytes before them, when they were read.
    pub(super) fn frame_bytes<'b>(
        &'b self,
        addr: u64,
        in_chunk: Option<&'b [u8]>,
        local: &'b mut [u8; PREFIX + MAX_FRAME_BYTES as usize],
    ) -> Result<FrameBytes<'b>> {
        if let Some(frame) = in_chunk {
            return Ok(FrameBytes::new(frame, false, None));
        }
        if let Some((frame, in_tstate)) = self.outside_frame(addr) {
            let before = self.chunks.before_prefetched(addr);
            return Ok(FrameBytes::new(frame, in_tstate, before));
        }
        let buf = local
            .get_mut(..PREFIX + self.offs.frame_size as usize)
            .ok_or_else(|| Error::corrupt("frame size larger than 512 bytes"))?;
        (self.grant_frame)();
        let fail = |e: Error| match e {
            e if e.is_fatal() || matches!(e, Error::ReadBudget { .. }) => e,
            _ => Torn::UnreadableFrame { addr }.into(),
        };
        match self.mem.read(addr.wrapping_sub(PREFIX as u64), buf) {
            Ok(()) => {
                let (before, frame) = buf.split_at(PREFIX);
                Ok(FrameBytes::new(frame, false, Some(before)))
            }
            Err(e) if e.is_fatal() || matches!(e, Error::ReadBudget { .. }) => Err(e),
            Err(_) => {
                // The bytes before it are not ours to read (a frame at
                // the start of a mapping, or a recorded snapshot that has
                // only the frame): the frame alone, with no exception.
                let frame = &mut buf[PREFIX..];
                (self.grant_frame)();
                self.mem.read(addr, frame).map_err(fail)?;
                Ok(FrameBytes::new(frame, false, None))
            }
        }
    }

    /// Does the generator whose frame has `before` (the [`PREFIX`] bytes
    /// before it) handle an exception? Its `exc_value` is NULL or None when
    /// not.
    fn generator_handles(&self, before: Option<&[u8]>) -> bool {
        let exc = before.and_then(|b| b.u64_at(PREFIX as u64 - GEN_EXC_VALUE_BEFORE_FRAME));
        exc.is_some_and(|v| v != 0 && Some(v) != self.none_addr)
    }

    /// After a reuse of the last walk below the leaf: do the generators of
    /// that tail handle an exception? Their frames are unchanged, but a
    /// plain function above one may have entered or left an `except` block,
    /// which writes its item: the item is read fresh, with the frame's
    /// prefetched copy.
    fn tail_handles(&self, tail: &Tail) -> bool {
        let o = self.offs;
        tail.prefetch().any(|a| {
            self.chunks.prefetched(a, o.frame_size).is_some_and(|f| {
                f.u8_at(o.frame_owner) == Some(o.owners.generator)
                    && self.generator_handles(self.chunks.before_prefetched(a))
            })
        })
    }

    /// Past the leaf: if the last walk below it (`t`) holds for context
    /// `c` and every byte it read is unchanged, append its frames to `out`
    /// (and its code objects and prefetched frames to this walk's) and say
    /// so. See [`super::reuse`].
    fn reuse(&mut self, t: &mut Tail, c: &Context, out: &mut Vec<FrameId>) -> bool {
        if !(t.reusable(c)
            && out.len() + t.frames().len() < MAX_DEPTH
            && (self.vouched || t.same_memory(|i| self.chunks.copy(i), |a| self.outside_frame(a))))
        {
            return false;
        }
        out.extend_from_slice(t.frames());
        self.used_codes.extend_from_slice(t.codes());
        self.handles_exception |= self.tail_handles(t);
        for a in t.prefetch() {
            // Seen by this walk, as the frames it stepped past are: the
            // next sample's prefetch keeps each once, not once more a
            // sample (a parked thread's list grew by 32 stale copies).
            if self.seen.insert(a) && self.outside.len() < MAX_PREFETCH {
                self.outside.push(a);
            }
        }
        t.hit();
        true
    }

    /// The data-stack frame just stepped past (in chunk `chunk`, running
    /// `executable`, `words` long) lies where [`Contiguous`] says it must.
    fn check_contiguous(
        &mut self,
        c: &mut Cursor,
        chunk: usize,
        executable: u64,
        words: u32,
    ) -> Result<()> {
        let checked = match c.contiguous.check(chunk, c.last_addr, words) {
            Ok(Some(end)) => {
                c.pushing = true;
                self.links_to_current(end, c.current)
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if checked.is_err() {
            // Torn, most likely; or the size believed for this code
            // object is wrong (a corrupted load twice alike): too long, the
            // frame overlaps the next; too short, it seems to end below
            // the stack's top, where nothing links to it. Load it afresh,
            // so a wrong size cannot fail every sample.
            self.code.evict(executable);
        }
        checked
    }

    /// The newest data-stack frame ends at `end`, below the thread's
    /// `datastack_top`: the frame there (being pushed, or dying) must link
    /// to the thread's `current` frame (see [`Contiguous`]). One read of
    /// its `previous`, granted on top of the budget: a thread meets this
    /// only inside a call or a return. Read now, not taken from the
    /// chunk's copy when that reaches so far: a frame being pushed is
    /// linked a moment after the stack's top moves, and the copy, made
    /// with the top, often has the slot's old link (0.09% of samples of an
    /// exception unwinding 500 frames failed so on 3.13, none read now).
    fn links_to_current(&self, end: u64, current: u64) -> Result<()> {
        let at = end.wrapping_add(self.offs.frame_previous);
        let mut buf = [0u8; 8];
        (self.grant)(1, 8);
        match self.mem.read(at, &mut buf) {
            Ok(()) if u64::from_le_bytes(buf) == current => Ok(()),
            Err(e) if e.is_fatal() => Err(e),
            _ => Err(Torn::AboveNotLinked { end, current }.into()),
        }
    }

    /// The frame of the frame at `addr`, running `executable` at
    /// `instr_ptr`, from the code cache (which may read the code object,
    /// its names and its location table, granted from the budget). A code
    /// object that cannot be read is a torn stack. With the code's
    /// `co_framesize` (0: unknown).
    fn load_frame(&mut self, addr: u64, executable: u64, instr_ptr: u64) -> Result<(FrameId, u32)> {
        if !self.code.is_ready(executable) {
            (self.grant)(READS_PER_CODE_LOAD, BYTES_PER_CODE_LOAD);
        }
        match self
            .code
            .frame_sized(self.mem, self.offs, self.table, executable, instr_ptr)
        {
            Ok(sized) => Ok(sized),
            Err(e) if e.is_fatal() || matches!(e, Error::ReadBudget { .. } | Error::Torn(_)) => {
                Err(e)
            }
            Err(e) => Err(Torn::UnreadableCode {
                addr,
                code: executable,
                cause: e.to_string(),
            }
            .into()),
        }
    }

    /// Walk the chain from `current` to the bottom, pushing frames leaf
    /// first onto `out`. `base_frame` (3.15) is where a complete chain ends.
    ///
    /// Only a complete chain is a stack: one that ends where the
    /// interpreter roots it (3.13/3.14: an entry frame with no previous
    /// frame; 3.15: the thread's base frame). Every frame on the way must
    /// be readable, have an owner a frame in a stack has, and (for frames
    /// of the thread's data stack) lie in the data stack below its callee;
    /// no frame may be reached twice. Anything else is a torn read, an
    /// error that costs the sample. These checks come before each read, so
    /// garbage pointers cost no system calls. Only frames whose code slot
    /// is NULL are skipped: they are being pushed or popped this instant,
    /// and the chain through them is intact.
    ///
    /// A stack deeper than [`MAX_DEPTH`] keeps its innermost frames and
    /// ends in `<truncated>`; the walk still follows the chain to its root
    /// to check it is complete.
    pub fn run(
        &mut self,
        current: u64,
        base_frame: Option<u64>,
        out: &mut Vec<FrameId>,
    ) -> Result<()> {
        let mut at = Vec::new();
        let mut tail = self.tail.take();
        let walked = self.chain(current, base_frame, out, &mut at, tail.as_deref_mut());
        if let Some(t) = tail
            && !matches!(walked, Ok(true))
        {
            let chunks = self.chunks;
            t.finish(walked.is_ok(), current, out, self.used_codes, |i| {
                chunks.copy(i)
            });
        }
        walked?;
        if let Some(t) = self.opcodes {
            self.read_opcodes(t, out, &at);
        }
        Ok(())
    }

    /// The walk itself (see [`Walk::run`]); with `--opcodes`, notes in `at`
    /// where each Python frame's instruction is. True if it ended by
    /// reusing `tail`, the last walk below the leaf.
    fn chain(
        &mut self,
        current: u64,
        base_frame: Option<u64>,
        out: &mut Vec<FrameId>,
        at: &mut Vec<OpcodeAt>,
        mut tail: Option<&mut Tail>,
    ) -> Result<bool> {
        let mut c = Cursor::new(current, self.newest_end());
        self.seen.clear();
        let before = out.len();
        let codes_before = self.used_codes.len();
        let walked = match self.follow(&mut c, current, base_frame, out, at, tail.as_deref_mut()) {
            Err(Error::Torn(Torn::NoEntryFrame))
                if self.unlinked_generator(&c, out.len() - before) =>
            {
                self.walk_below_resumer(current, base_frame, out, at, tail)
            }
            Ok(reused) if c.leaf_generator => self.confirm_leaf(current).map(|()| reused),
            Ok(reused) => match c.fresh_leaf {
                Some((leaf, previous, code)) => {
                    self.confirm_fresh(leaf, previous, code).map(|()| reused)
                }
                None => Ok(reused),
            },
            r => r,
        }?;
        self.check_lone_fresh_leaf(&c, base_frame)?;
        self.check_depth(out, codes_before, c.pushing)?;
        Ok(walked)
    }

    /// 3.12-3.14: a newest frame at its first instruction, alone on an
    /// entry frame with no previous one, is torn. A push writes a frame's
    /// code before its link, and an entry frame lies on the C stack, where
    /// a stale one looks like any other: nothing vouches for that link
    /// (3.13's `__init__` shim was read so, linked where the slot's last
    /// occupant was, once in about 10,000 samples of a program calling
    /// `__init__`s in a loop; the re-read of [`Walk::confirm_fresh`] read
    /// the same). A thread's real first frame at its first instruction is
    /// an instant; the sample is read again.
    fn check_lone_fresh_leaf(&self, c: &Cursor, base_frame: Option<u64>) -> Result<()> {
        let separate_entry = base_frame.is_none() && self.offs.frame_is_entry.is_none();
        match c.fresh_leaf {
            Some((leaf, ..)) if separate_entry && c.visited == 2 && c.last_was_entry => {
                Err(Torn::LoneFreshLeaf { addr: leaf }.into())
            }
            _ => Ok(()),
        }
    }

    /// A whole stack holds as many Python frames as the thread counts on
    /// it, give or take the call or return under way (see
    /// [`super::depth`]): else the chain was read across a change that
    /// dropped frames or spliced in others, however whole its links look.
    /// That holds for a walk that found no frame too: a thread that counts
    /// frames but shows none is torn, not idle.
    fn check_depth(&self, out: &[FrameId], codes_before: usize, pushing: bool) -> Result<()> {
        if !self.counted || out.last() == Some(&self.markers.truncated) {
            return Ok(());
        }
        let walked = (self.used_codes.len() - codes_before) as u32;
        match super::depth::counted(self.offs, self.tstate.1) {
            Some(counted)
                if !super::depth::agrees(self.offs.version.minor, walked, counted, pushing) =>
            {
                Err(Torn::DepthMismatch { walked, counted }.into())
            }
            _ => Ok(()),
        }
    }

    /// A walk whose newest frame is a generator's, outside the data stack
    /// (3.13+), stands only if the thread's current frame is still that
    /// one after the walk. Nothing the walk copied with the thread's data
    /// stack vouches for such a frame: read a moment after the thread
    /// state, it may be one the thread has left (the generator finished,
    /// its memory went to another generator that another chain resumes),
    /// whose `previous` leads into a chain it was never part of (3.14:
    /// e -> g -> k2 for e -> g -> h -> k -> k2, about 1.4 stacks in 1,000
    /// of a deep yield-from program at 20 kHz without this; none with
    /// `--blocking`). One read of 8 bytes, only for such walks; 3.11/3.12
    /// keep their current frame in a C struct (`_PyCFrame`), checked by
    /// their entry links instead.
    fn confirm_leaf(&self, leaf: u64) -> Result<()> {
        let o = self.offs;
        if o.cframe_current_frame.is_some() {
            return Ok(());
        }
        (self.grant)(1, 8);
        let now = self
            .mem
            .read_u64(self.tstate.0.wrapping_add(o.tstate_current_frame))?;
        match now == leaf {
            true => Ok(()),
            false => Err(Torn::LeafLeft { leaf, now }.into()),
        }
    }

    /// Is the data-stack frame of `h` at its first instruction: pushed an
    /// instant ago (3.11/3.12: not started, one unit before its code)?
    fn at_first_instruction(&self, h: &Header) -> bool {
        let o = self.offs;
        let start = h.executable.wrapping_add(o.code_adaptive);
        h.owner == o.owners.thread
            && h.executable != 0
            && h.instr_ptr
                == if o.instr_ptr_is_prev {
                    start.wrapping_sub(2)
                } else {
                    start
                }
    }

    /// A walk whose newest frame is on the data stack at its first
    /// instruction stands only if that frame, read again once its push is
    /// long done, still runs the same code and links to the same frame. A
    /// call pushes its frame into the slot above the caller, code and
    /// instruction first, `previous` after: read in between (the thread
    /// state naming the frame read a moment later), the slot links
    /// wherever its last occupant did. A yield-from chain of generators
    /// on the heap pushes each generator's call into the same slot, so it
    /// held `h`'s call linked to `e` (for `e -> g -> h`) or `g`'s linked
    /// to `k`: in such a program at 20 kHz (3.13) about 1 stack in 6,000
    /// was such a splice, 1 in 2,000 on 3.14 and 3.15. By the second
    /// read the slot holds the finished push, or another call with other
    /// code or another link. 16 bytes, only for such walks.
    fn confirm_fresh(&self, leaf: u64, previous: u64, executable: u64) -> Result<()> {
        let o = self.offs;
        let (start, len) = link_span(o);
        let mut buf = [0u8; MAX_FRAME_BYTES as usize];
        let both = buf
            .get_mut(..len)
            .ok_or_else(|| Error::corrupt("frame fields past 512 bytes"))?;
        (self.grant)(1, len as u64);
        self.mem.read(leaf.wrapping_add(start), both)?;
        let now_previous = both.u64_at(o.frame_previous - start);
        let now_code = both
            .u64_at(o.frame_executable - start)
            .map(|c| c & o.tag_mask);
        match now_previous == Some(previous) && now_code == Some(executable) {
            true => Ok(()),
            false => Err(Torn::JustPushed {
                addr: leaf,
                previous,
            }
            .into()),
        }
    }

    /// The walk from where `c` is to the chain's end (see [`Walk::run`]).
    fn follow(
        &mut self,
        c: &mut Cursor,
        current: u64,
        base_frame: Option<u64>,
        out: &mut Vec<FrameId>,
        at: &mut Vec<OpcodeAt>,
        mut tail: Option<&mut Tail>,
    ) -> Result<bool> {
        let mut local = [0u8; PREFIX + MAX_FRAME_BYTES as usize];
        while c.addr != 0 {
            if c.visited == 1
                && !c.truncated
                && let Some(t) = tail.as_deref_mut()
                && self.reuse_or_record(t, current, c.addr, base_frame, out)
            {
                return Ok(true);
            }
            if c.visited == 1 && self.vouched {
                // Below the leaf only the vouched walk can go: this
                // sample read nothing there.
                return Err(Torn::NotVouched.into());
            }
            c.visited += 1;
            let addr = c.addr;
            let pos = self.place(c, addr)?;
            let mut h = self.header(addr, pos, &mut local, tail.as_deref_mut())?;
            let chunk = pos.map(|(i, _)| i);
            if h.tlbc_index != 0 {
                self.place_in_own_bytecode(&mut h);
            }
            self.check_header(addr, current, &h)?;
            if c.visited == 1 {
                c.leaf_generator = chunk.is_none() && h.owner == self.offs.owners.generator;
                c.fresh_leaf = (chunk.is_some() && self.at_first_instruction(&h)).then_some((
                    addr,
                    h.previous,
                    h.executable,
                ));
            }
            if h.owner == self.offs.owners.thread && chunk.is_none() {
                return self.thread_frame_outside(c, addr, out, tail.as_deref_mut());
            }
            self.step(c, addr, chunk, &h);
            if c.truncated {
                // Frames past the depth are not decoded, so not sized.
                c.contiguous.stop();
                continue;
            }
            self.emit(c, chunk, &h, out, at, tail.as_deref_mut())?;
        }
        self.finish(c, current, base_frame, out)
    }

    /// 3.12: did the walk `c` of a thread's stack, which showed `shown`
    /// frames, find only its current frame, a generator's frame outside
    /// the data stack with no previous frame? Then it may have been read
    /// while its resumer was linking it (see [`super::resumer`]).
    fn unlinked_generator(&self, c: &Cursor, shown: usize) -> bool {
        self.offs.resume.is_some()
            && c.visited == 1
            && shown == 1
            && !c.truncated
            && c.last_pos.is_none()
            && c.last_owner == Some(self.offs.owners.generator)
    }

    /// 3.12: the walk found only `current`, an unlinked generator's frame
    /// (see [`Walk::unlinked_generator`]), and showed it. If its resumer is
    /// proven, the stack is that frame over the resumer's whole chain,
    /// walked with every check of a walk (and never kept for reuse);
    /// otherwise the walk fails as it did.
    fn walk_below_resumer(
        &mut self,
        current: u64,
        base_frame: Option<u64>,
        out: &mut Vec<FrameId>,
        at: &mut Vec<OpcodeAt>,
        tail: Option<&mut Tail>,
    ) -> Result<bool> {
        let Some(resumer) = self.resumer_of(current)? else {
            return Err(Torn::NoEntryFrame.into());
        };
        if let Some(t) = tail {
            t.spoil();
        }
        let mut c = Cursor::new(resumer, self.newest_end());
        // The generator's frame above was pushed by the resumer's eval
        // loop (`--opcodes`: the resumer's `prev_instr` may be in caches).
        c.callee_inline = true;
        match self.follow(&mut c, current, base_frame, out, at, None) {
            Err(e) if !(e.is_fatal() || matches!(e, Error::ReadBudget { .. })) => {
                Err(Torn::NoEntryFrame.into())
            }
            r => r,
        }
    }

    /// Past the leaf: reuse the last walk from here (`leaf_previous`) if
    /// nothing below changed, and say so; else record this one.
    fn reuse_or_record(
        &mut self,
        t: &mut Tail,
        leaf: u64,
        leaf_previous: u64,
        base_frame: Option<u64>,
        out: &mut Vec<FrameId>,
    ) -> bool {
        let c = Context {
            tstate: self.tstate.0,
            leaf,
            leaf_previous,
            epoch: self.code.epoch(),
            gc_frame: self.gc_frame,
            native: self.native,
            base_frame,
            entry_expected: self.entry_previous,
            newest_end: self.newest_end(),
        };
        if self.reuse(t, &c, out) {
            return true;
        }
        t.begin(
            &c,
            out.len(),
            self.used_codes.len(),
            self.offs.frame_size as usize,
        );
        false
    }

    /// Where the frame at `addr` is: in a copied chunk (its place and
    /// bytes), or outside the data stack (`None`). The data stack is a
    /// stack: a caller lies below its callee, in the same chunk or an
    /// older one; a frame outside it is reached once.
    fn place<'b>(&'b self, c: &mut Cursor, addr: u64) -> Result<Option<(usize, &'b [u8])>> {
        if !plausible(addr) {
            return Err(Torn::BadAddress { addr }.into());
        }
        let pos = self.chunks.find(addr, self.offs.frame_size);
        if let Some((i, _)) = pos {
            if let Some((li, la)) = c.last_pos
                && (i < li || (i == li && addr >= la))
            {
                return Err(Torn::OutOfOrder { addr }.into());
            }
            c.last_pos = Some((i, addr));
        } else if self.seen.contains(&addr) {
            // (`step` adds each frame outside the data stack it passes.)
            return Err(Torn::Cycle { addr }.into());
        }
        Ok(pos)
    }

    /// Read (or find) the frame at `addr` and decode what the walk needs of
    /// it; note a frame outside the data stack in the tail being recorded.
    fn header(
        &self,
        addr: u64,
        pos: Option<(usize, &[u8])>,
        local: &mut [u8; PREFIX + MAX_FRAME_BYTES as usize],
        tail: Option<&mut Tail>,
    ) -> Result<Header> {
        let o = self.offs;
        let got = self.frame_bytes(addr, pos.map(|(_, b)| b), local)?;
        let fb = got.frame;
        if pos.is_none()
            && let Some(t) = tail
        {
            t.note_outside(addr, fb, got.in_tstate);
        }
        let bad = || Error::corrupt("short frame");
        let owner = fb.u8_at(o.frame_owner).ok_or_else(bad)?;
        // An entry frame opens an eval-loop invocation: C called into
        // Python here. 3.12+: a frame of its own, with no code to show;
        // 3.11: the invocation's first frame, marked by a flag.
        let entry_owner = o.owners.is_entry(owner);
        let executable = fb.u64_at(o.frame_executable).ok_or_else(bad)? & o.tag_mask;
        let instr_ptr = fb.u64_at(o.frame_instr_ptr).ok_or_else(bad)?;
        Ok(Header {
            previous: fb.u64_at(o.frame_previous).ok_or_else(bad)?,
            executable,
            instr_ptr,
            raw_ip: instr_ptr,
            copy: executable.wrapping_add(o.code_adaptive),
            tlbc_index: match o.frame_tlbc_index {
                Some(at) => fb.i32_at(at).ok_or_else(bad)?,
                None => 0,
            },
            owner,
            entry_owner,
            entry: entry_owner
                || o.frame_is_entry
                    .is_some_and(|off| fb.u8_at(off).is_some_and(|b| b != 0)),
            in_tstate: got.in_tstate,
            handles: owner == o.owners.generator && self.generator_handles(got.before),
        })
    }

    /// Free-threaded 3.14+: a frame that runs a copy of its code's bytecode
    /// (`tlbc_index` not 0) is placed in the code's own bytecode (see
    /// [`CodeCache::in_own_bytecode`]), the copy's lookup granted.
    fn place_in_own_bytecode(&mut self, h: &mut Header) {
        if h.executable == 0 {
            return;
        }
        if !self.code.has_copy(h.executable, h.tlbc_index) {
            (self.grant)(READS_PER_COPY_LOOKUP, BYTES_PER_COPY_LOOKUP);
        }
        (h.instr_ptr, h.copy) =
            self.code
                .in_own_bytecode(self.mem, self.offs, h.executable, h.raw_ip, h.tlbc_index);
    }

    /// The checks a frame's header must pass to belong to the chain
    /// starting at `current`.
    fn check_header(&mut self, addr: u64, current: u64, h: &Header) -> Result<()> {
        if !h.entry_owner && !self.offs.owners.is_code(h.owner) {
            return Err(Torn::UnknownOwner {
                addr,
                owner: h.owner,
            }
            .into());
        }
        // Only the newest frame can be caught half pushed or popped, its
        // code slot not yet (or no longer) set: a frame below it is a
        // caller, which runs a call. One without code there was read after
        // its slot went to another frame.
        if h.executable == 0 && !h.entry_owner && addr != current {
            return Err(Torn::NoCode { addr }.into());
        }
        // The newest eval loop's entry frame links to the frame that called
        // into it. Else the current frame was read in the instant the loop
        // had published its `_PyCFrame` but not yet its frame: it is a
        // stale one (see `cframe`).
        if h.entry
            && let Some(expected) = self.entry_previous.take()
            && h.previous != expected
        {
            return Err(Torn::StaleCurrentFrame {
                addr,
                previous: h.previous,
                expected,
            }
            .into());
        }
        Ok(())
    }

    /// A frame owned by the thread but outside its copied data stack: a
    /// stack larger than we copy, walked down through its oldest copied
    /// chunk, keeps what it has, truncated (its root cannot be checked);
    /// anything else is torn.
    fn thread_frame_outside(
        &self,
        c: &Cursor,
        addr: u64,
        out: &mut Vec<FrameId>,
        tail: Option<&mut Tail>,
    ) -> Result<bool> {
        if self.chunks.cut() && c.last_pos.map(|(i, _)| i + 1) == Some(self.chunks.copied()) {
            out.push(self.markers.truncated);
            if let Some(t) = tail {
                t.spoil();
            }
            return Ok(false);
        }
        Err(Torn::OutsideDataStack { addr }.into())
    }

    /// Move the cursor past the frame at `addr`, to its caller.
    fn step(&mut self, c: &mut Cursor, addr: u64, chunk: Option<usize>, h: &Header) {
        match chunk {
            // No code to size it by: the next frame is checked against
            // where this one begins.
            Some(i) if h.entry_owner || h.executable == 0 => c.contiguous.skip(i, addr),
            Some(_) => {}
            None => {
                self.seen.insert(addr);
                if !h.in_tstate && self.outside.len() < MAX_PREFETCH {
                    self.outside.push(addr);
                }
            }
        }
        self.handles_exception |= h.handles;
        c.last_was_entry = h.entry;
        c.last_owner = Some(h.owner);
        c.last_addr = addr;
        c.addr = h.previous;
    }

    /// Push what the frame just stepped past shows (its code's frame, and
    /// the `<GC>` and `<native>` markers around it), or mark the walk
    /// truncated when it would not fit.
    fn emit(
        &mut self,
        c: &mut Cursor,
        chunk: Option<usize>,
        h: &Header,
        out: &mut Vec<FrameId>,
        at: &mut Vec<OpcodeAt>,
        tail: Option<&mut Tail>,
    ) -> Result<()> {
        let gc = self.gc_frame != 0 && c.last_addr == self.gc_frame;
        // The entry frame of an eval-loop invocation: C called into Python
        // here. It holds no code of its own.
        let native = h.entry && self.native && h.previous != 0 && h.previous != self.gc_frame;
        let shown = !h.entry_owner && h.executable != 0;
        // Room for what this frame shows, and `<truncated>` after it.
        if out.len() + gc as usize + native as usize + shown as usize + 1 > MAX_DEPTH {
            c.truncated = true;
            if let Some(t) = tail {
                t.spoil();
            }
            return Ok(());
        }
        if gc {
            out.push(self.markers.gc);
        }
        // An entry frame has no code of ours. The newest frame whose code
        // slot is NULL is being pushed or popped at this very instant: its
        // caller below is intact, so skip it rather than lose the sample.
        if shown {
            let (id, words) = match self.code.frame_fast_sized(h.executable, h.instr_ptr) {
                Some(sized) => sized,
                None => {
                    if let Some(t) = tail {
                        t.spoil();
                    }
                    self.load_frame(c.last_addr, h.executable, h.instr_ptr)?
                }
            };
            if let Some(i) = chunk {
                // The newest frame only: a live frame is never called by a
                // generator's call frame (it calls nothing before
                // RETURN_GENERATOR), so a popped one can be only the leaf.
                if c.visited == 1
                    && h.owner == self.offs.owners.thread
                    && self
                        .code
                        .popped_generator_frame(h.executable, h.instr_ptr, self.offs)
                {
                    return Err(Torn::PoppedGeneratorFrame { addr: c.last_addr }.into());
                }
                self.check_contiguous(c, i, h.executable, words)?;
            }
            // Whichever way the frame was found (the frame table or the
            // code cache), it gets its opcode.
            if self.opcodes.is_some() && at.len() < MAX_OPCODE_FRAMES {
                at.push(OpcodeAt {
                    index: out.len(),
                    instr_ptr: h.raw_ip,
                    base: h.copy,
                    in_caches: self.offs.instr_ptr_is_prev && c.callee_inline,
                    walk: self.offs.instr_ptr_is_prev,
                });
            }
            if let Some(p) = self.places.as_deref_mut() {
                p.push(FramePlace {
                    index: out.len(),
                    frame: c.last_addr,
                    code: h.executable,
                    instr_ptr: h.raw_ip,
                    copy: h.copy,
                });
            }
            out.push(id);
            self.used_codes.push(h.executable);
        }
        if native {
            out.push(self.markers.native);
        }
        if h.entry
            && let Some(e) = self.entries.as_deref_mut()
        {
            e.push(c.last_addr);
        }
        if shown || h.entry {
            c.callee_inline = !h.entry;
        }
        Ok(())
    }

    /// The chain ended (a NULL `previous`): is it rooted where the
    /// interpreter roots a thread's stack?
    fn finish(
        &self,
        c: &Cursor,
        current: u64,
        base_frame: Option<u64>,
        out: &mut Vec<FrameId>,
    ) -> Result<bool> {
        if c.truncated {
            out.push(self.markers.truncated);
        }
        if current == 0 {
            return Ok(false);
        }
        match base_frame {
            Some(base) if base == 0 || c.last_addr != base => Err(Torn::NoBaseFrame.into()),
            None if !c.last_was_entry => Err(Torn::NoEntryFrame.into()),
            // 3.11 marks a generator's frame as an entry while C code
            // (`next()`, a `for` over it) runs it, linked to its caller; on
            // a yield the link is cut. A chain that ends there was read
            // across a yield: the thread's real root is further down.
            None if c.last_owner == Some(self.offs.owners.generator) => {
                Err(Torn::SuspendedGenerator.into())
            }
            _ => Ok(false),
        }
    }
}

/// The opcode of frame `a` from the `bytes` read for it at `addr`: by
/// walking its code from the start when the read began there, else the
/// last code unit's low byte (3.11/3.12 callers: the instruction behind
/// the caches).
fn decode_opcode(t: &OpTable, a: &OpcodeAt, addr: u64, bytes: &[u8]) -> Option<u8> {
    if a.walk && addr == a.base {
        return t.instruction_ending(bytes);
    }
    let mut ops = [0u8; MAX_WINDOW as usize];
    let n = (bytes.len() / 2).min(ops.len());
    for (o, unit) in ops.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = unit[0];
    }
    let &last = ops[..n].last()?;
    if a.in_caches {
        t.behind_caches(&ops[..n])
    } else {
        Some(last)
    }
}

/// Where a walk is, between one frame and the next.
struct Cursor {
    /// The thread's current frame, where the walk began.
    current: u64,
    /// The next frame to visit (0: the chain ended).
    addr: u64,
    /// The frame visited last, and what it was.
    last_addr: u64,
    last_was_entry: bool,
    /// The newest data-stack frame ends below the stack's top: a frame
    /// above it is being pushed (or popped) and links to it.
    pushing: bool,
    last_owner: Option<u8>,
    /// Where the last data-stack frame was: (chunk, address).
    last_pos: Option<(usize, u64)>,
    /// Where the next data-stack frame must end (see `Contiguous`).
    contiguous: Contiguous,
    /// Past [`MAX_DEPTH`]: frames are followed, not shown.
    truncated: bool,
    visited: usize,
    /// The last frame shown was pushed by the eval loop, not from C.
    callee_inline: bool,
    /// The newest frame is a generator's, outside the data stack (see
    /// [`Walk::confirm_leaf`]).
    leaf_generator: bool,
    /// The newest frame is on the data stack at its first instruction:
    /// (its address, `previous` and code), confirmed after the walk
    /// ([`Walk::confirm_fresh`]).
    fresh_leaf: Option<(u64, u64, u64)>,
}

impl Cursor {
    fn new(current: u64, newest_end: Option<u64>) -> Self {
        Cursor {
            current,
            addr: current,
            last_addr: 0,
            last_was_entry: false,
            pushing: false,
            last_owner: None,
            last_pos: None,
            contiguous: Contiguous::new(newest_end),
            truncated: false,
            visited: 0,
            callee_inline: false,
            leaf_generator: false,
            fresh_leaf: None,
        }
    }
}

/// What a walk reads of one frame.
struct Header {
    previous: u64,
    executable: u64,
    /// Where the frame is in its code, as a pointer into the code's own
    /// bytecode (`co_code_adaptive`): what the code cache knows it by.
    instr_ptr: u64,
    /// The instruction pointer as read: free-threaded 3.14+ point into the
    /// thread's own copy of the bytecode, which starts at `copy`.
    raw_ip: u64,
    copy: u64,
    /// Free-threaded 3.14+: which copy of the bytecode (0: the code's own).
    tlbc_index: i32,
    owner: u8,
    /// Owned by the eval loop's entry (3.12+: a shim frame of its own).
    entry_owner: bool,
    /// Opens an eval-loop invocation (3.11: flagged `is_entry`).
    entry: bool,
    /// Found in the thread state's copy.
    in_tstate: bool,
    /// A generator's frame whose generator handles an exception.
    handles: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_read_of_the_link_span_holds_a_frames_link_and_code() {
        use crate::offsets::{PyVersion, carried::CARRIED};
        let mut all: Vec<Offsets> = CARRIED
            .iter()
            .map(|c| {
                let v = PyVersion::from_hex(0x0300_00f0 | (c.minor as u64) << 16);
                Offsets::from_carried(1, &c.table(v)).unwrap()
            })
            .collect();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/offsets");
        for e in std::fs::read_dir(dir).unwrap() {
            let bytes = std::fs::read(e.unwrap().path()).unwrap();
            let raw = crate::offsets::RawTable::decode(1, &bytes).unwrap();
            all.push(Offsets::from_raw(1, &raw).unwrap());
        }
        assert_eq!(all.len(), 9, "3.11, 3.12 and the seven tables");
        for o in &all {
            let (start, len) = link_span(o);
            for field in [o.frame_previous, o.frame_executable] {
                assert!(
                    field >= start && field + 8 <= start + len as u64,
                    "{}",
                    o.version
                );
            }
            assert!(len <= MAX_FRAME_BYTES as usize, "{}", o.version);
        }
    }
}
