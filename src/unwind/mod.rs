//! The stack unwinder: from the runtime's address to the Python stack of
//! each thread, decoded in local memory, code objects cached.
//!
//! One call of [`Unwinder::sample`] reads, per interpreter, a prefix of the
//! interpreter state; per thread, the thread state and its data-stack
//! chunks; and only on a cache miss, code objects and their strings. A
//! frame that cannot be read costs that frame; a chain that turns out torn
//! (the target moved while we read) costs the sample, as an error the
//! sampler counts.

pub mod anchor;
pub mod asyncio;
pub mod cframe;
pub mod code;
pub mod depth;
pub mod dict;
pub mod frames;
pub mod guess;
pub mod linetable;
pub mod locals;
pub mod locks;
pub mod names;
pub mod objects;
pub mod resumer;
pub mod reuse;
pub mod shutdown;
pub mod threads;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::cell::Cell;

use crate::error::{Error, Result, Torn};
use crate::model::{FrameTable, Sample, ThreadSample};
use crate::offsets::{GilFlag, Offsets};
use crate::process::{LocalBytes, Metered, ProcessMemory, ReadReq, ReqPool};
use crate::runtime::Runtime;
use code::CodeCache;
use frames::{Chunks, Markers, Walk};
use guess::Speculation;
use names::{ThreadKey, ThreadNames};
use threads::{InterpFacts, MAX_INTERPRETERS, MAX_THREADS, ThreadFacts};

/// What to sample and what to put in the stacks.
#[derive(Debug, Clone, Copy)]
pub struct UnwindOptions {
    /// Every thread of every interpreter, not only the main thread.
    pub all_threads: bool,
    /// `<native>` frames where C code called back into Python.
    pub native: bool,
    /// `<GC>` frames while the garbage collector runs.
    pub gc: bool,
    /// Read each thread's scheduler state (costs a file read per thread).
    pub cpu_status: bool,
    /// Give each Python frame the opcode at its instruction pointer
    /// (`--opcodes`; one batched read per thread and sample).
    pub opcodes: bool,
    /// 3.15: use the interpreter's frame-cache mark, writing one pointer
    /// a thread into the target (`--frame-cache`; see [`anchor`]).
    pub frame_cache: bool,
}

impl UnwindOptions {
    /// The table naming the target's opcodes, when `--opcodes` asks for
    /// them: every walk (thread stacks, task stacks) takes it from here.
    pub fn opcode_table(&self, o: &Offsets) -> Option<&'static crate::opcodes::OpTable> {
        self.opcodes
            .then(|| crate::opcodes::table(o.version.major as u32, o.version.minor as u32))
            .flatten()
    }
}

impl Default for UnwindOptions {
    fn default() -> Self {
        UnwindOptions {
            all_threads: false,
            native: false,
            gc: true,
            cpu_status: false,
            opcodes: false,
            frame_cache: false,
        }
    }
}

/// Reads one sample may ask of the target, before the grants below: the
/// steady state needs one to three (see `sample_once`), a changed stack a
/// few more. Past the budget the sample fails with
/// [`Error::ReadBudget`], whatever the memory holds.
pub const READ_BUDGET: u32 = 48;
/// Tries one sample gets when the target changes its stack under the
/// reads (a torn chain). A generator's frame lives a short while between a
/// resume and a yield, often shorter than the time between the read of the
/// thread state that names it and the read of the frame: then a try fails
/// whatever we do, and the next, a few microseconds later, meets the
/// target elsewhere. Every try is within the one sample's read budget.
pub const SAMPLE_TRIES: u32 = 16;
/// Bytes one sample may read, before the grants below.
pub const BYTE_BUDGET: u64 = 32 << 20;
/// Granted per thread in the list (all-threads mode; every thread, up to
/// [`threads::MAX_THREADS`]): its state and its chunk, read alone when a
/// guess or a batch missed (as in a sample with no guess yet: each thread
/// of a program with hundreds of them is read alone).
pub const READS_PER_THREAD: u32 = 4;
/// Bytes granted per thread: the first [`BUDGET_THREADS`] threads room
/// for a deep chunk each, later ones less, so that the byte bound stays a
/// bound on a program with thousands of threads.
pub const BYTES_PER_THREAD: u64 = 2 << 20;
pub const BYTES_PER_LATER_THREAD: u64 = 256 << 10;
pub const BUDGET_THREADS: usize = 256;

/// Did interpreter `interp`'s counter move from what `seen` holds to `g`
/// (not on first sight)? Looked up before inserting: the usual sample
/// finds it unchanged.
fn moved<T: Copy + PartialEq>(seen: &mut HashMap<u64, T>, interp: u64, g: T) -> bool {
    seen.get(&interp) != Some(&g) && seen.insert(interp, g).is_some_and(|old| old != g)
}

/// The bytes granted to the `k`th thread of a sample's lists.
fn thread_bytes(k: usize) -> u64 {
    match k < BUDGET_THREADS {
        true => BYTES_PER_THREAD,
        false => BYTES_PER_LATER_THREAD,
    }
}
/// Granted per older data-stack chunk read alone (the first
/// [`frames::MAX_GRANTED_CHUNKS`] of a sample): a deep stack's first
/// sample, before the chunks are read speculatively.
pub const READS_PER_CHUNK: u32 = 2;
pub use frames::{
    BYTES_PER_CODE_LOAD, BYTES_PER_COPY_LOOKUP, MAX_GRANTED_CHUNKS, MAX_GRANTED_FRAMES,
    READS_PER_CODE_LOAD, READS_PER_COPY_LOOKUP,
};
/// Granted to a sample after which thread names are resolved (rarely: see
/// [`names`]); a resolution that needs more falls back to `comm`.
pub const NAME_READS: u32 = 512;
pub const NAME_BYTES: u64 = 8 << 20;

/// The most reads one sample may make, given the threads it found, the
/// code objects it loaded and the older chunks it had to read one by one.
pub fn read_budget(threads: usize, code_loads: u64, chunks: usize) -> u64 {
    READ_BUDGET as u64
        + READS_PER_THREAD as u64 * threads.min(MAX_THREADS) as u64
        + READS_PER_CODE_LOAD as u64 * code_loads
        + READS_PER_CHUNK as u64 * chunks.min(MAX_GRANTED_CHUNKS) as u64
}

/// The most reads any sample may make, whatever the memory holds, given
/// the code objects it loaded (each load is bounded by itself).
pub fn max_reads(code_loads: u64) -> u64 {
    read_budget(MAX_THREADS, code_loads, MAX_GRANTED_CHUNKS)
        + MAX_GRANTED_FRAMES as u64
        + resumer::MAX_GRANTED_READS as u64
        + NAME_READS as u64
        + frames::OPCODE_READS_PER_WALK as u64 * MAX_THREADS as u64
}

/// The most bytes any sample may read, given the code objects it loaded.
pub fn max_bytes_allowed(code_loads: u64) -> u64 {
    BYTE_BUDGET
        + BYTES_PER_THREAD * BUDGET_THREADS as u64
        + BYTES_PER_LATER_THREAD * (MAX_THREADS - BUDGET_THREADS) as u64
        + BYTES_PER_CODE_LOAD * code_loads
        + frames::CHUNK_GUESS as u64 * MAX_GRANTED_CHUNKS as u64
        + frames::MAX_FRAME_BYTES * MAX_GRANTED_FRAMES as u64
        + resumer::MAX_GRANTED_BYTES
        + NAME_BYTES
        + frames::OPCODE_BYTES_PER_WALK * MAX_THREADS as u64
}

pub struct Unwinder<M: ProcessMemory> {
    /// The reader, metered: each sample has a read budget.
    mem: Metered<M>,
    /// Bytes read of each thread state: its size, or more to take in its
    /// own base frame (see [`StateLen`]).
    state_len: StateLen,
    /// Per interpreter, thread-list walks in a row that did not reach its
    /// main thread.
    main_unlisted: threads::MainUnlisted,
    pid: i32,
    runtime: Runtime,
    pub opts: UnwindOptions,
    table: FrameTable,
    code: CodeCache,
    markers: Markers,
    interp_buf: Vec<u8>,
    used_codes: Vec<u64>,
    generations: HashMap<u64, u64>,
    /// Free-threaded 3.14+: each interpreter's generation of bytecode copy
    /// indices; a change forgets where the copies were.
    tlbc_generations: HashMap<u64, u32>,
    /// The parts of `PyInterpreterState` a sample needs, as merged
    /// (offset, length) ranges: a few dozen bytes instead of the 8 KiB prefix.
    interp_ranges: Vec<(u64, usize)>,
    /// What the last sample found, read speculatively by the next one
    /// (see [`guess`]).
    spec: Speculation,
    outside: Vec<u64>,
    /// All-threads mode: per-thread copies, reused across samples.
    slots: Vec<ThreadSlot>,
    order: Vec<usize>,
    /// Scratch for cycle checks (frames outside the data stack; threads).
    seen: HashSet<u64>,
    /// The request lists' allocation, reused sample after sample; and
    /// that of the requests read after the rest (see [`ThreadSlot::state_after`]).
    reqs: ReqPool,
    reqs_later: ReqPool,
    scratch: ThreadScratch,
    /// Older chunks granted reads in this sample.
    chunk_grants: Cell<usize>,
    /// Frames read alone this sample with a grant (see [`frame_grant`]).
    frame_grants: Cell<usize>,
    /// Reads (calls, bytes) granted this sample for 3.12 resumer proofs
    /// (see [`resume_grant`]).
    resume_grants: Cell<(u32, u64)>,
    /// Thread names, resolved after a sample, rarely.
    names: ThreadNames,
    /// Per thread of the sample being taken, what its name is keyed by.
    name_keys: Vec<ThreadKey>,
    /// Async-aware sampling (`--async-aware`): task stacks instead of
    /// thread stacks (see [`asyncio`]).
    asyncio: Option<asyncio::AsyncState>,
    /// The last sample found the runtime finalising ([`shutdown`]).
    in_shutdown: bool,
    /// Per thread of the last sample, where its Python frames are (`dump
    /// --locals`); `None` unless asked for.
    places: Option<Vec<Vec<frames::FramePlace>>>,
    /// Per thread of the last sample, its entry frames' addresses, when
    /// kept ([`Unwinder::keep_entry_frames`]).
    entries: Option<Vec<Vec<u64>>>,
    /// 3.15's frame cache (`--frame-cache`; see [`anchor`]).
    frame_cache: anchor::FrameCache,
}

/// All-threads mode: per-sample lists, kept so that their allocations are
/// reused sample after sample.
#[derive(Default)]
struct ThreadScratch {
    /// Each listed thread's facts, in list order.
    decoded: Vec<ThreadFacts>,
    /// The same, with the first chunk each thread's walk starts from.
    facts: Vec<(ThreadFacts, u64)>,
    /// Per slot: its chunks were read with its state.
    ready: Vec<bool>,
    /// Per slot: the thread is in this sample's list.
    in_order: Vec<bool>,
}

/// One thread's state copy and chunk copies (all-threads mode).
#[derive(Default)]
struct ThreadSlot {
    tstate: u64,
    buf: Vec<u8>,
    chunks: Chunks,
    /// 3.11, 3.12: the `_PyCFrame` (and the outer one's current frame)
    /// where the last sample found them, read in the same system call as
    /// the thread state.
    cframe: cframe::CFrameCopy,
    /// Its last walk below the leaf (see [`reuse`]).
    tail: reuse::Tail,
    /// The frame cache expects a hit: only the leaf's frame is read, and
    /// the thread state (with its mark) after it, last in the same system
    /// call: (asked, read). A mark found on the leaf with the vouched count
    /// then shows the leaf was never popped between the vouching sample
    /// and the state's read, so the leaf's frame read before it is the
    /// leaf's, over the vouched frames (see [`anchor`]).
    state_after: (bool, bool),
}

/// What the frame cache decided for one thread's walk.
#[derive(Default, Clone, Copy)]
struct CachePlan {
    /// The mark vouches for the kept walk below the leaf: only the leaf's
    /// frame was read.
    hit: bool,
    /// The mark vouched, but the whole stack was read: the walk's frames
    /// below the leaf are checked against the vouched ones.
    audit: bool,
}

/// What a sample's first read found (see `Unwinder::first_read`).
struct FirstRead {
    /// The first interpreter in the runtime's list.
    head: u64,
    /// 3.11: the GIL's holder from `_PyRuntime` (0: free or elsewhere).
    runtime_gil_holder: u64,
    /// The guesses were read in the same call (each still to be checked).
    speculated: bool,
    /// All-threads mode: the guessed thread states and their chunks were
    /// read in the same call (see [`push_guessed_states`]).
    threads: bool,
}

/// All-threads mode: requests for the thread states `guess` (the last
/// sample's list) into the first slots and, with `with_chunks`, each one's
/// first chunk as far as its stack reached lately, its frames outside the
/// data stack and (3.11/3.12) its current-frame slot, so that a thread's
/// frames are read in the same instant as its state. With the frame cache
/// (`cache`), a thread expected to hit has only its leaf read, and its
/// state onto `later`, read after it (see [`ThreadSlot::state_after`]).
#[allow(clippy::too_many_arguments)]
fn push_guessed_states<'a>(
    slots: &'a mut [ThreadSlot],
    spec: &Speculation,
    o: &Offsets,
    state_len: usize,
    guess: &[u64],
    with_chunks: bool,
    cache: bool,
    reqs: &mut Vec<ReadReq<'a>>,
    later: &mut Vec<ReadReq<'a>>,
) {
    let (guesses, prefetch) = (&spec.threads, &spec.prefetch);
    for (slot, &t) in slots.iter_mut().zip(guess) {
        slot.tstate = t;
        slot.buf.resize(state_len, 0);
        slot.state_after = (false, false);
        let ThreadSlot {
            buf,
            chunks,
            cframe,
            state_after,
            ..
        } = slot;
        match guesses.chunk(t) {
            Some(g) if with_chunks => {
                let cf = guesses.cframe(t).unwrap_or_default();
                cframe.requests(o, t, cf, reqs);
                let mark = spec.marks.get(t);
                prepare_chunk_guess(chunks, mark, cache, t, g, o.frame_size, prefetch.get(t));
                // A thread expected to hit: its state (and mark) read
                // after its leaf (see [`ThreadSlot::state_after`]).
                state_after.0 = chunks.windowed();
                let state = ReadReq {
                    addr: t,
                    buf: &mut buf[..],
                };
                match state_after.0 {
                    true => later.push(state),
                    false => reqs.push(state),
                }
                chunks.requests(reqs);
            }
            _ => {
                reqs.push(ReadReq {
                    addr: t,
                    buf: &mut buf[..],
                });
                cframe.requests(o, t, (0, 0), reqs);
                chunks.prepare(0, 0, o.frame_size, &[]);
            }
        }
    }
}

/// Most bytes a thread state's read may take beyond its size.
const MAX_STATE_EXTRA: u64 = 512;

/// How many bytes to read of each thread state. 3.15 keeps a thread's
/// base frame in its own `_PyThreadStateImpl`, at the same place for every
/// thread, ending past the state's size: read with the state, the walk
/// finds it in the state's copy, with no range of its own, and a new thread
/// costs one read less. How far it reaches is learnt from the states
/// decoded, once two agree (a torn state's pointer is not taken for the
/// run), and only ever grows; a base frame elsewhere changes nothing (it
/// is read as any frame outside the data stack).
#[derive(Debug, Clone, Copy)]
struct StateLen {
    len: usize,
    /// A longer length one state asked for, not yet confirmed.
    seen: usize,
}

impl StateLen {
    fn new(o: &Offsets) -> StateLen {
        StateLen {
            len: o.tstate_size as usize,
            seen: 0,
        }
    }

    /// After the state at `tstate` named `base` as its base frame.
    fn learn(&mut self, o: &Offsets, tstate: u64, base: Option<u64>) {
        self.learn_sized(o.tstate_size, o.frame_size, tstate, base);
    }

    /// [`StateLen::learn`] for states of `size` bytes and frames of
    /// `frame_size`.
    fn learn_sized(&mut self, size: u64, frame_size: u64, tstate: u64, base: Option<u64>) {
        let Some(end) = base
            .and_then(|b| b.checked_sub(tstate))
            .and_then(|off| off.checked_add(frame_size))
            .filter(|&end| end <= size + MAX_STATE_EXTRA)
            .map(|end| end as usize)
            .filter(|&end| end > self.len)
        else {
            return;
        };
        if end == self.seen {
            self.len = end;
        }
        self.seen = end;
    }
}

/// Prepare the speculative read of thread `tstate`'s first chunk in
/// `slot`: only from its vouched leaf up when the frame cache (`cache`)
/// expects a hit (see [`anchor`]), else its live part.
fn prepare_chunk_guess(
    chunks: &mut Chunks,
    mark: Option<&anchor::Mark>,
    cache: bool,
    tstate: u64,
    g: guess::ChunkGuess,
    frame_size: u64,
    prefetch: &[u64],
) {
    match mark.and_then(|m| m.window_leaf(tstate)).filter(|_| cache) {
        Some(leaf) => {
            chunks.prepare_window_guess(g.chunk, leaf, g.read_len(), frame_size, prefetch)
        }
        None => chunks.prepare_guess(g.chunk, g.read_len(), frame_size, prefetch),
    }
}

/// The interpreter-list head and, 3.11, the GIL state in `_PyRuntime`.
#[derive(Default)]
struct RuntimeHead {
    head: [u8; 8],
    gil_locked: [u8; 4],
    gil_holder: [u8; 8],
}

impl RuntimeHead {
    /// How many requests [`RuntimeHead::requests`] makes.
    fn len(&self, o: &Offsets) -> usize {
        if o.gil_in_runtime { 3 } else { 1 }
    }

    fn requests<'a>(
        &'a mut self,
        o: &Offsets,
        rt: u64,
        head_addr: u64,
        mut reqs: Vec<ReadReq<'a>>,
    ) -> Vec<ReadReq<'a>> {
        reqs.push(ReadReq {
            addr: head_addr,
            buf: &mut self.head,
        });
        if o.gil_in_runtime {
            reqs.push(ReadReq {
                addr: rt.wrapping_add(o.interp_gil_locked),
                buf: &mut self.gil_locked,
            });
            reqs.push(ReadReq {
                addr: rt.wrapping_add(o.interp_gil_holder),
                buf: &mut self.gil_holder,
            });
        }
        reqs
    }

    fn gil_holder(&self) -> u64 {
        if u32::from_le_bytes(self.gil_locked) != 0 {
            u64::from_le_bytes(self.gil_holder)
        } else {
            0
        }
    }
}

/// The grant for an older chunk read alone: [`READS_PER_CHUNK`] reads, for
/// the first [`MAX_GRANTED_CHUNKS`] of a sample.
/// The grant of one frame read alone (see [`Walk::grant_frame`]), the
/// first [`MAX_GRANTED_FRAMES`] of a sample.
fn frame_grant<'a, M: ProcessMemory>(
    mem: &'a Metered<M>,
    granted: &'a Cell<usize>,
    frame_size: u64,
) -> impl Fn() + 'a {
    move || {
        if granted.get() < MAX_GRANTED_FRAMES {
            granted.set(granted.get() + 1);
            mem.grant(1, frame_size);
        }
    }
}

/// The grant of reads for a 3.12 resumer proof (see
/// [`frames::Walk::grant_resume`]): up to [`resumer::MAX_GRANTED_READS`]
/// reads and [`resumer::MAX_GRANTED_BYTES`] bytes a sample, then none.
fn resume_grant<'a, M: ProcessMemory>(
    mem: &'a Metered<M>,
    granted: &'a Cell<(u32, u64)>,
) -> impl Fn(u32, u64) -> bool + 'a {
    move |calls, bytes| {
        let (c, b) = granted.get();
        let (c, b) = (c.saturating_add(calls), b.saturating_add(bytes));
        if c > resumer::MAX_GRANTED_READS || b > resumer::MAX_GRANTED_BYTES {
            return false;
        }
        granted.set((c, b));
        mem.grant(calls, bytes);
        true
    }
}

fn chunk_grant<'a, M: ProcessMemory>(
    mem: &'a Metered<M>,
    granted: &'a Cell<usize>,
) -> impl Fn(u32, u64) + 'a {
    move |_, bytes| {
        if granted.get() < MAX_GRANTED_CHUNKS {
            granted.set(granted.get() + 1);
            mem.grant(READS_PER_CHUNK, bytes);
        }
    }
}

/// Merge the (offset, width) fields into sorted, non-overlapping ranges,
/// joining neighbours closer than a cache line.
fn merge_ranges(mut fields: Vec<(u64, usize)>) -> Vec<(u64, usize)> {
    fields.sort_unstable();
    let mut out: Vec<(u64, usize)> = Vec::new();
    for (off, len) in fields {
        if let Some(last) = out.last_mut() {
            let end = last.0 + last.1 as u64;
            if off <= end + 64 {
                last.1 = (end.max(off + len as u64) - last.0) as usize;
                continue;
            }
        }
        out.push((off, len));
    }
    out
}

/// Requests that fill `ranges` of `buf` (a local copy of a struct at
/// `base`), pushed onto `reqs`.
fn push_ranges<'a>(
    reqs: &mut Vec<ReadReq<'a>>,
    mut buf: &'a mut [u8],
    base: u64,
    ranges: &[(u64, usize)],
) {
    let mut at = 0usize;
    for &(off, len) in ranges {
        let off = off as usize;
        let (_, rest) = std::mem::take(&mut buf).split_at_mut(off - at);
        let (piece, rest) = rest.split_at_mut(len);
        reqs.push(ReadReq {
            addr: base.wrapping_add(off as u64),
            buf: piece,
        });
        buf = rest;
        at = off + len;
    }
}

impl<M: ProcessMemory> Unwinder<M> {
    pub fn new(mem: M, pid: i32, runtime: Runtime, opts: UnwindOptions) -> Self {
        Self::with_frames(mem, pid, runtime, opts, FrameTable::new())
    }

    /// An unwinder that interns into an existing frame table, so a profile
    /// can go on into another process (frame ids stay meaningful to the
    /// collector that holds them).
    pub fn with_frames(
        mem: M,
        pid: i32,
        runtime: Runtime,
        opts: UnwindOptions,
        mut table: FrameTable,
    ) -> Self {
        let markers = Markers::new(&mut table);
        let o = &runtime.offsets;
        let mut fields = vec![
            (o.interp_id, 8),
            (o.interp_next, 8),
            (o.interp_threads_head, 8),
            (o.interp_gc_collecting, 4),
        ];
        if !o.threads_main_embedded {
            fields.push((o.interp_threads_main, 8));
        }
        if !o.gil_in_runtime {
            fields.extend([(o.interp_gil_locked, 4), (o.interp_gil_holder, 8)]);
        }
        fields.extend(o.interp_ceval_gil.map(|g| (g, 8)));
        fields.extend(o.interp_code_object_generation.map(|g| (g, 8)));
        fields.extend(o.interp_tlbc_generation.map(|g| (g, 4)));
        fields.extend(o.interp_gc_frame.map(|f| (f, 8)));
        let interp_ranges = merge_ranges(fields);
        let interp_buf = vec![0u8; o.interp_read_size as usize];
        // Slot 0 serves main-thread mode (and the speculative read).
        let slots = vec![ThreadSlot {
            tstate: 0,
            buf: vec![0u8; o.tstate_size as usize],
            ..ThreadSlot::default()
        }];
        let frame_cache = anchor::FrameCache {
            on: opts.frame_cache && o.tstate_last_profiled.is_some(),
            ..Default::default()
        };
        Unwinder {
            frame_cache,
            mem: Metered::new(mem),
            state_len: StateLen::new(o),
            main_unlisted: threads::MainUnlisted::default(),
            pid,
            runtime,
            opts,
            table,
            code: CodeCache::new(),
            markers,
            interp_buf,
            used_codes: Vec::new(),
            generations: HashMap::new(),
            tlbc_generations: HashMap::new(),
            interp_ranges,
            spec: Speculation::default(),
            outside: Vec::new(),
            slots,
            order: Vec::new(),
            seen: HashSet::new(),
            reqs: ReqPool::default(),
            reqs_later: ReqPool::default(),
            scratch: ThreadScratch::default(),
            chunk_grants: Cell::new(0),
            frame_grants: Cell::new(0),
            resume_grants: Cell::new((0, 0)),
            names: ThreadNames::new(),
            name_keys: Vec::new(),
            asyncio: None,
            in_shutdown: false,
            places: None,
            entries: None,
        }
    }

    /// From now on, note where each entry frame of a thread's stack is
    /// ([`Unwinder::entry_frames`]), as native frames need to find the
    /// eval loop on the C stack; such walks are never reused.
    pub fn keep_entry_frames(&mut self) {
        self.entries.get_or_insert_with(Vec::new);
    }

    /// The frame table to add frames to, and where the entry frames of
    /// each stack of the last sample are (leaf first; empty when not
    /// kept, see [`Unwinder::keep_entry_frames`]).
    pub fn table_and_entries(&mut self) -> (&mut FrameTable, &[Vec<u64>]) {
        (&mut self.table, self.entries.as_deref().unwrap_or_default())
    }

    /// From now on, note where each Python frame of a thread's stack is in
    /// the target ([`Unwinder::frame_places`]), as `dump --locals` needs;
    /// such walks are never reused by the next sample.
    pub fn keep_frame_places(&mut self) {
        self.places.get_or_insert_with(Vec::new);
    }

    /// Where the Python frames of the last sample's `thread`-th stack are
    /// (see [`Unwinder::keep_frame_places`]); empty when not kept.
    pub fn frame_places(&self, thread: usize) -> &[frames::FramePlace] {
        self.places
            .as_ref()
            .and_then(|p| p.get(thread))
            .map_or(&[], Vec::as_slice)
    }

    /// `threading`'s ident (`pthread_t`) of the last sample's
    /// `thread`-th stack's thread.
    pub fn thread_ident(&self, thread: usize) -> Option<u64> {
        self.name_keys.get(thread).map(|k| k.ident)
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn offsets(&self) -> &Offsets {
        &self.runtime.offsets
    }

    pub fn frames(&self) -> &FrameTable {
        &self.table
    }

    pub fn frames_mut(&mut self) -> &mut FrameTable {
        &mut self.table
    }

    /// Give up the frame table (see [`Unwinder::with_frames`]).
    pub fn into_frames(self) -> FrameTable {
        self.table
    }

    pub fn memory(&self) -> &M {
        self.mem.inner()
    }

    /// Whether the target has a GIL for a thread to hold: always in a GIL
    /// build; in a free-threaded build only when it was enabled at run
    /// time (the main interpreter's `gil.enabled`, read now).
    pub fn has_gil(&self) -> Result<bool> {
        let o = &self.runtime.offsets;
        let Some(enabled) = o.interp_gil_enabled else {
            return Ok(true);
        };
        let mem = self.mem.inner();
        let interp = mem.read_u64(
            self.runtime
                .address
                .wrapping_add(o.runtime_interpreters_head),
        )?;
        if interp == 0 {
            return Err(Error::corrupt("no interpreter in the runtime's list"));
        }
        let mut flag = [0u8; 4];
        mem.read(interp.wrapping_add(enabled), &mut flag)?;
        Ok(i32::from_le_bytes(flag) != 0)
    }

    /// Reads (calls, bytes) the last sample asked of the target.
    pub fn reads_used(&self) -> (u32, u64) {
        self.mem.used()
    }

    /// The read budget (calls, bytes) the last sample had, grants included.
    pub fn reads_allowed(&self) -> (u32, u64) {
        self.mem.limit()
    }

    /// Code-object cache (hits, misses, entries), for statistics.
    pub fn cache_stats(&self) -> (u64, u64, usize) {
        (self.code.hits, self.code.misses, self.code.len())
    }

    /// Take one sample of the selected threads into `out.threads`
    /// (cleared first; its buffers are reused). Every stack in it is
    /// complete; a torn one fails the sample (after [`SAMPLE_TRIES`]), and so
    /// does a sample that needs more reads than its budget.
    pub fn sample(&mut self, out: &mut Sample) -> Result<()> {
        self.mem.start(READ_BUDGET, BYTE_BUDGET);
        self.chunk_grants.set(0);
        self.frame_grants.set(0);
        self.resume_grants.set((0, 0));
        let mut r = self.sample_checked(out);
        let mut tries = 1;
        let mut before = (0, 0);
        while let Err(e) = &r
            && !e.is_fatal()
            && !self.mem.spent()
            && tries < SAMPLE_TRIES
        {
            // Torn: the target moved while we read. Again at once, within
            // the same budget; what the failed try learnt (thread states,
            // chunks, frames outside the data stack) is read in the next
            // one's first system call, which meets the target at another
            // moment. Not when another try as costly as the last would
            // not fit: the sample is torn, not over budget.
            let used = self.mem.used();
            let limit = self.mem.limit();
            let cost = (used.0 - before.0, used.1 - before.1);
            if used.0.saturating_add(cost.0) > limit.0 || used.1.saturating_add(cost.1) > limit.1 {
                break;
            }
            before = used;
            tries += 1;
            r = self.sample_checked(out);
        }
        if self.mem.spent() {
            // A read was refused, whatever the walk made of that.
            out.threads.clear();
            return Err(self.mem.budget_error());
        }
        if r.is_err() {
            out.threads.clear();
            return r;
        }
        // The runtime finalising: not the program's sample (see [`shutdown`]).
        self.in_shutdown = shutdown::may_be_shutdown(&out.threads, &self.table) && {
            self.mem.grant(1, 8);
            shutdown::finalizing(&self.mem, self.runtime.address, &self.runtime.offsets)
        };
        if self.in_shutdown {
            out.threads.clear();
            return r;
        }
        // Names, after the sample is decided: their reads are granted on
        // top of its budget, and failing them costs only names.
        self.name_keys.truncate(out.threads.len());
        let now = std::time::Instant::now();
        let due = self.names.due(&self.name_keys, now);
        if due {
            self.mem.grant(NAME_READS, NAME_BYTES);
        }
        self.names.apply(
            &self.mem,
            &self.runtime.offsets,
            &mut self.table,
            &mut out.threads,
            &self.name_keys,
            due,
            now,
        );
        r
    }

    /// Why thread names could not be read from `threading` (they came from
    /// `comm` then), or `None`: only when no resolution ever could, and at
    /// least `min_failures` tried, so a program's own start or end (its
    /// modules half built or torn down) says nothing.
    pub fn names_unavailable(&self, min_failures: u64) -> Option<&str> {
        let n = &self.names;
        n.why
            .as_deref()
            .filter(|_| !n.ever_read && n.failures >= min_failures)
    }

    /// The last sample found the runtime finalising (interpreter
    /// shutdown): it holds no threads, and is not the program's.
    pub fn in_shutdown(&self) -> bool {
        self.in_shutdown
    }

    /// How many times thread names were read from the target so far.
    pub fn name_resolutions(&self) -> u64 {
        self.names.resolutions
    }

    fn sample_checked(&mut self, out: &mut Sample) -> Result<()> {
        if self.asyncio.is_some() {
            return self.sample_tasks(out);
        }
        let r = self.sample_once(out);
        if r.is_ok() && self.runtime.offsets.interp_code_object_generation.is_none() {
            // 3.13: no generation counter; re-validate the code objects this
            // sample used, and walk again if one was replaced under us.
            if self.revalidate_codes()? {
                return self.sample_once(out);
            }
        }
        r
    }

    fn sample_once(&mut self, out: &mut Sample) -> Result<()> {
        let mut n_threads = 0usize;
        self.used_codes.clear();
        self.code.new_sample();
        self.spec.marks.new_sample();
        let o = self.runtime.offsets.clone();

        let guess_interp = self.spec.main.interp;
        let guess_tstate = if self.opts.all_threads {
            0
        } else {
            self.spec.main.tstate
        };
        // All threads: the first interpreter's thread states of the last
        // sample, read with the head.
        let mut pre = if self.opts.all_threads && guess_interp != 0 {
            self.spec.threads.take_list(guess_interp)
        } else {
            Vec::new()
        };
        while self.slots.len() < pre.len() {
            self.slots.push(ThreadSlot::default());
        }
        let FirstRead {
            head,
            runtime_gil_holder,
            speculated,
            threads,
        } = self.first_read(&o, guess_interp, guess_tstate, &pre)?;
        let mut pre = (!pre.is_empty()).then(|| std::mem::take(&mut pre));
        let mut interp_addr = head;
        let mut first = true;
        let mut n_interps = 0;
        while interp_addr != 0 && n_interps < MAX_INTERPRETERS {
            n_interps += 1;
            let already_read = first && speculated && interp_addr == guess_interp;
            let interp = self.read_interp(&o, interp_addr, already_read, runtime_gil_holder)?;
            if self.opts.all_threads {
                // The states read with the head are used only when they
                // were read with this interpreter's fields, in one instant.
                let states = if interp_addr == guess_interp {
                    pre.take().map(|list| (list, already_read && threads))
                } else {
                    None
                };
                self.walk_interp_threads(&o, &interp, interp_addr, states, out, &mut n_threads)?;
            } else if interp.id == 0 {
                // The main interpreter (id 0) is the oldest, so it is last
                // in the list when subinterpreters exist.
                let main = self.main_thread(&o, &interp)?;
                let prefetched = speculated
                    && first
                    && interp_addr == guess_interp
                    && main == guess_tstate
                    && main != 0;
                if main != 0 {
                    self.sample_thread(&o, &interp, main, prefetched, out, &mut n_threads)?;
                }
                // Guess the thread state next time only when its interpreter
                // is the list head, read in the same call.
                self.spec.main.tstate = if first { main } else { 0 };
                if first {
                    self.spec.main.interp = interp_addr;
                }
                break;
            }
            if first {
                self.spec.main.interp = interp_addr;
                self.spec.main.tstate = 0;
            }
            first = false;
            interp_addr = interp.next;
        }
        out.threads.truncate(n_threads);
        Ok(())
    }

    /// A sample's first system call: the interpreter-list head (and 3.11's
    /// GIL state in `_PyRuntime`) with what the last sample found: the
    /// first interpreter's fields, and in main-thread mode its main thread
    /// state, chunk and outside frames; 3.13's code fingerprints. In a
    /// steady state the whole sample is this one call. Each guess is used
    /// only if the freshly read pointer to it is unchanged; otherwise that
    /// part is read again. If the call fails (a guessed address is gone),
    /// the head alone is read again.
    fn first_read(
        &mut self,
        o: &Offsets,
        guess_interp: u64,
        guess_tstate: u64,
        guess_threads: &[u64],
    ) -> Result<FirstRead> {
        let head_addr = self.runtime.address + o.runtime_interpreters_head;
        let rt = self.runtime.address;
        let mut head = RuntimeHead::default();
        let speculated = {
            let mut reqs = head.requests(o, rt, head_addr, self.reqs.take());
            let mut later = self.reqs_later.take();
            if guess_interp != 0 {
                push_ranges(
                    &mut reqs,
                    &mut self.interp_buf,
                    guess_interp,
                    &self.interp_ranges,
                );
            }
            self.slots[0].cframe.forget();
            self.slots[0].state_after = (false, false);
            if guess_tstate != 0 {
                let state_len = self.state_len.len;
                let ThreadSlot {
                    buf,
                    chunks,
                    cframe,
                    state_after,
                    ..
                } = &mut self.slots[0];
                // 3.11/3.12: the current frame, where it was last time, in
                // the same instant as the state that names it.
                cframe.requests(
                    o,
                    guess_tstate,
                    (self.spec.main.cframe, self.spec.main.outer_cframe),
                    &mut reqs,
                );
                prepare_chunk_guess(
                    chunks,
                    self.spec.marks.get(guess_tstate),
                    self.frame_cache.active(),
                    guess_tstate,
                    self.spec.main.chunk,
                    o.frame_size,
                    self.spec.prefetch.get(guess_tstate),
                );
                // Expecting a hit: the state (and its mark) read after the
                // leaf (see [`ThreadSlot::state_after`]).
                state_after.0 = chunks.windowed();
                buf.resize(state_len, 0);
                let state = ReadReq {
                    addr: guess_tstate,
                    buf,
                };
                match state_after.0 {
                    true => later.push(state),
                    false => reqs.push(state),
                }
                chunks.requests(&mut reqs);
            } else if !guess_threads.is_empty() {
                push_guessed_states(
                    &mut self.slots,
                    &self.spec,
                    o,
                    self.state_len.len,
                    guess_threads,
                    true,
                    self.frame_cache.active(),
                    &mut reqs,
                    &mut later,
                );
            }
            let check_fp = self.spec.fingerprints.requests(
                o,
                o.interp_code_object_generation.is_none(),
                &mut reqs,
            );
            let n = reqs.len();
            reqs.append(&mut later);
            self.reqs_later.give(later);
            let r = self.mem.read_many_then(&mut reqs, n);
            self.reqs.give(reqs);
            if r.is_ok() {
                self.slots
                    .iter_mut()
                    .for_each(|s| s.state_after.1 = s.state_after.0);
            }
            if r.is_ok() && check_fp {
                self.spec.fingerprints.settle(o, &mut self.code);
            }
            match r {
                Ok(()) => n > head.len(o),
                Err(e) if e.is_fatal() => return Err(e),
                Err(_) => {
                    self.mem
                        .read_many(&mut head.requests(o, rt, head_addr, Vec::new()))?;
                    false
                }
            }
        };
        Ok(FirstRead {
            head: u64::from_le_bytes(head.head),
            runtime_gil_holder: head.gil_holder(),
            speculated,
            threads: speculated && !guess_threads.is_empty(),
        })
    }

    /// The facts of the interpreter at `interp_addr`, its fields read now
    /// unless `already_read` (by the first read, into `interp_buf`). A
    /// moved code-object generation drops the code cache.
    fn read_interp(
        &mut self,
        o: &Offsets,
        interp_addr: u64,
        already_read: bool,
        runtime_gil_holder: u64,
    ) -> Result<InterpFacts> {
        if !frames::plausible(interp_addr) {
            return Err(Error::corrupt(format!(
                "interpreter state at impossible address {interp_addr:#x}"
            )));
        }
        if !already_read {
            let mut reqs = Vec::with_capacity(self.interp_ranges.len());
            push_ranges(
                &mut reqs,
                &mut self.interp_buf,
                interp_addr,
                &self.interp_ranges,
            );
            self.mem.read_many(&mut reqs)?;
        }
        let mut interp = InterpFacts::decode(o, &self.interp_buf, interp_addr, runtime_gil_holder)
            .ok_or_else(|| Error::corrupt("short interpreter state"))?;
        if interp.shared_gil != 0 {
            interp.gil_holder = self.shared_gil_holder(o, interp.shared_gil)?;
        }
        self.note_generations(&interp);
        Ok(interp)
    }

    /// The thread state that runs `__main__` in `interp` (0: none).
    fn main_thread(&self, o: &Offsets, interp: &InterpFacts) -> Result<u64> {
        if interp.threads_main != 0 {
            return Ok(interp.threads_main);
        }
        // No thread runs __main__ (embedding, shutdown): the oldest
        // thread, last in the list, is the main one.
        let mut tstates: Vec<u64> = Vec::new();
        self.list_threads(o, interp.threads_head, &mut tstates)?;
        Ok(tstates.last().copied().unwrap_or(0))
    }

    fn list_threads(&self, o: &Offsets, head: u64, into: &mut Vec<u64>) -> Result<()> {
        let mut t = head;
        while t != 0 {
            if into.len() >= MAX_THREADS || into.contains(&t) || !frames::plausible(t) {
                return Err(Error::corrupt("thread list too long, cyclic or broken"));
            }
            into.push(t);
            self.mem.grant(1, 8);
            t = self.mem.read_u64(t.wrapping_add(o.tstate_next))?;
        }
        Ok(())
    }

    /// Sample every thread of one interpreter in three system calls
    /// whatever their number, in the steady state: the thread states the
    /// last sample found, all at once; then every thread's current chunk
    /// and prefetched frames, all at once; the walks run in local memory.
    /// A thread the guess missed costs one read of its own.
    fn walk_interp_threads(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        interp_addr: u64,
        states: Option<(Vec<u64>, bool)>,
        out: &mut Sample,
        n: &mut usize,
    ) -> Result<()> {
        let (n_guessed, chunks_ok) = self.list_interp_threads(o, interp, interp_addr, states)?;
        let mut scratch = std::mem::take(&mut self.scratch);
        let walked = self
            .decode_listed(o, &mut scratch, chunks_ok)
            .and_then(|()| {
                self.prepare_chunks(o, &mut scratch, chunks_ok, n_guessed);
                self.read_prepared_chunks(&mut scratch)
            })
            .and_then(|batch_ok| {
                self.sample_threads_facts(o, interp, &mut scratch, batch_ok, out, n)
            });
        self.scratch = scratch;
        walked
    }

    /// This sample's thread list of the interpreter at `interp_addr` (into
    /// `self.order`), from the states read with the first call (`states`)
    /// or the last sample's list read now; it becomes the next sample's
    /// guess. How many states were guessed, and whether their chunks were
    /// read with them.
    fn list_interp_threads(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        interp_addr: u64,
        states: Option<(Vec<u64>, bool)>,
    ) -> Result<(usize, bool)> {
        let (guess, read) =
            states.unwrap_or_else(|| (self.spec.threads.take_list(interp_addr), false));
        while self.slots.len() < guess.len() {
            self.slots.push(ThreadSlot::default());
        }
        let (guessed_ok, chunks_ok) = if read {
            (true, true)
        } else {
            self.read_guessed_states(o, &guess)?
        };
        self.follow_thread_list(o, interp, &guess, guessed_ok)?;
        // The next sample's guess, in this one's list's allocation.
        let n_guessed = guess.len();
        let mut next_guess = guess;
        next_guess.clear();
        next_guess.extend(self.order.iter().map(|&i| self.slots[i].tstate));
        self.spec.threads.set_list(interp_addr, next_guess);
        self.spec.forget_ended();
        Ok((n_guessed, chunks_ok))
    }

    /// Decode each listed thread's state into `scratch.decoded` (3.11,
    /// 3.12: with its current frame, from its `_PyCFrame`).
    fn decode_listed(
        &mut self,
        o: &Offsets,
        scratch: &mut ThreadScratch,
        chunks_ok: bool,
    ) -> Result<()> {
        let decoded = &mut scratch.decoded;
        decoded.clear();
        for &i in &self.order {
            let t = ThreadFacts::decode(o, &self.slots[i].buf, self.runtime.none_addr)
                .ok_or_else(|| Error::corrupt("short thread state"))?;
            self.state_len.learn(o, self.slots[i].tstate, t.base_frame);
            decoded.push(t);
        }
        if o.cframe_current_frame.is_some() {
            self.read_cframes(o, decoded, chunks_ok)?;
            for (&i, f) in self.order.iter().zip(decoded.iter()) {
                self.spec
                    .threads
                    .set_cframe(self.slots[i].tstate, (f.cframe, f.outer_cframe));
            }
        }
        Ok(())
    }

    /// Per listed thread: take the chunks read with its state if the guess
    /// holds (`scratch.ready`), else prepare their read; its facts and first
    /// chunk go to `scratch.facts`.
    fn prepare_chunks(
        &mut self,
        o: &Offsets,
        scratch: &mut ThreadScratch,
        chunks_ok: bool,
        n_guessed: usize,
    ) {
        let ThreadScratch {
            decoded,
            facts,
            ready,
            ..
        } = scratch;
        facts.clear();
        ready.clear();
        ready.resize(self.slots.len(), false);
        for (&i, f) in self.order.iter().zip(decoded.drain(..)) {
            let slot = &mut self.slots[i];
            let first = if f.current_frame != 0 {
                f.datastack_chunk
            } else {
                0
            };
            // Read with the state, from a guess that holds.
            ready[i] = chunks_ok
                && i < n_guessed
                && first != 0
                && slot
                    .chunks
                    .accept_guess(first, f.current_frame, o.frame_size);
            if !ready[i] {
                let pre = self.spec.prefetch.entry(slot.tstate);
                slot.chunks
                    .prepare(first, f.current_frame, o.frame_size, pre);
            }
            facts.push((f, first));
        }
    }

    /// Every listed thread's prepared chunks and outside frames, in one
    /// call. False if it failed (each thread then reads alone).
    fn read_prepared_chunks(&mut self, scratch: &mut ThreadScratch) -> Result<bool> {
        let ThreadScratch {
            ready, in_order, ..
        } = scratch;
        let mut reqs = self.reqs.take();
        in_order.clear();
        in_order.resize(self.slots.len(), false);
        for &i in &self.order {
            in_order[i] = true;
        }
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if in_order[i] && !ready[i] {
                slot.chunks.requests(&mut reqs);
            }
        }
        let r = if reqs.is_empty() {
            Ok(())
        } else {
            self.mem.read_many(&mut reqs)
        };
        self.reqs.give(reqs);
        match r {
            Ok(()) => Ok(true),
            Err(e) if e.is_fatal() => Err(e),
            Err(_) => Ok(false),
        }
    }

    /// All-threads mode, last step: each thread's chunks completed (alone
    /// after a failed batch) and its stack walked.
    fn sample_threads_facts(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        scratch: &mut ThreadScratch,
        batch_ok: bool,
        out: &mut Sample,
        n: &mut usize,
    ) -> Result<()> {
        let ready = &scratch.ready;
        for (k, (f, first)) in scratch.facts.drain(..).enumerate() {
            let idx = self.order[k];
            let slot = &mut self.slots[idx];
            // After a failed batch each thread reads alone, so one bad
            // address costs only its own thread's prefetch.
            {
                let grant = chunk_grant(&self.mem, &self.chunk_grants);
                slot.chunks
                    .complete(&self.mem, ready[idx] || batch_ok, &grant)?;
            }
            let tstate = slot.tstate;
            // Next time, guess the same first chunk, as far as the stack
            // reached lately (decaying, as in main-thread mode).
            self.spec
                .threads
                .set_chunk(tstate, first, slot.chunks.live_len());
            self.sample_prepared_thread(o, interp, idx, tstate, &f, out, n)?;
        }
        Ok(())
    }

    /// All-threads mode, first step: the thread states the last sample
    /// found, all in one system call; with each, if `guess` still holds,
    /// its chunk and 3.11/3.12 current-frame slot. Returns whether the
    /// states were read, and whether with their chunks.
    fn read_guessed_states(&mut self, o: &Offsets, guess: &[u64]) -> Result<(bool, bool)> {
        // The thread states the last sample found and, in the same system
        // call, each one's first chunk as far as its stack reached lately
        // and its frames outside the data stack: when the guesses hold, a
        // thread's frames are read in the same instant as its state, which
        // leaves the least time for them to change in between. If a
        // guessed chunk is gone (its thread ended), the states are read
        // again alone.
        let mut chunks_ok = false;
        let mut guessed_ok = false;
        for with_chunks in [true, false] {
            if guess.is_empty() || guessed_ok {
                break;
            }
            let mut reqs = self.reqs.take();
            let mut later = self.reqs_later.take();
            push_guessed_states(
                &mut self.slots,
                &self.spec,
                o,
                self.state_len.len,
                guess,
                with_chunks,
                self.frame_cache.active(),
                &mut reqs,
                &mut later,
            );
            let then = reqs.len();
            reqs.append(&mut later);
            self.reqs_later.give(later);
            let r = self.mem.read_many_then(&mut reqs, then);
            self.reqs.give(reqs);
            match r {
                Ok(()) => {
                    self.slots
                        .iter_mut()
                        .for_each(|s| s.state_after.1 = s.state_after.0);
                    guessed_ok = true;
                    chunks_ok = with_chunks;
                }
                Err(e) if e.is_fatal() => return Err(e),
                Err(_) => {}
            }
        }

        Ok((guessed_ok, chunks_ok))
    }

    /// All-threads mode, second step: follow the live thread list into
    /// `self.order` (slot indices), taking each state from the guessed
    /// batch when it was there, reading it alone otherwise.
    fn follow_thread_list(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        guess: &[u64],
        guessed_ok: bool,
    ) -> Result<()> {
        let tsize = self.state_len.len;
        // Follow the live list; take each state from the batch when it was
        // guessed, else read it now.
        self.order.clear();
        self.seen.clear();
        let mut extra = guess.len();
        let mut t = interp.threads_head;
        let mut tail = 0;
        while t != 0 {
            if self.order.len() >= MAX_THREADS || !frames::plausible(t) || !self.seen.insert(t) {
                return Err(Error::corrupt("thread list too long, cyclic or broken"));
            }
            self.mem
                .grant(READS_PER_THREAD, thread_bytes(self.order.len()));
            let k = self.order.len();
            let hit = if !guessed_ok {
                None
            } else if guess.get(k) == Some(&t) {
                // The usual case: the list did not change.
                Some(k)
            } else {
                guess
                    .iter()
                    .position(|&g| g == t)
                    .filter(|i| !self.order.contains(i))
            };
            let idx = match hit {
                Some(i) => i,
                None => {
                    if self.slots.len() <= extra {
                        self.slots.push(ThreadSlot::default());
                    }
                    let slot = &mut self.slots[extra];
                    slot.tstate = t;
                    slot.buf.resize(tsize, 0);
                    self.mem.read(t, &mut slot.buf)?;
                    extra += 1;
                    extra - 1
                }
            };
            self.order.push(idx);
            tail = t;
            t = self.slots[idx]
                .buf
                .u64_at(o.tstate_next)
                .ok_or_else(|| Error::corrupt("short thread state"))?;
        }
        self.check_main_listed(interp, tail)
    }

    /// A walk of the thread list that ended at `tail` without the
    /// interpreter's main thread is torn (see [`threads::MainUnlisted`]).
    fn check_main_listed(&mut self, interp: &InterpFacts, tail: u64) -> Result<()> {
        let listed = interp.threads_main == 0 || self.seen.contains(&interp.threads_main);
        match self.main_unlisted.torn(interp.addr, listed) {
            true => Err(Torn::MainThreadUnlisted { tail }.into()),
            false => Ok(()),
        }
    }

    /// 3.11, 3.12: every thread's current frame, through its `_PyCFrame`,
    /// and the outer `_PyCFrame`'s current frame its walk is checked
    /// against (see [`cframe`]). Those read with their thread states
    /// (`guessed`) at the addresses the states name are taken from there;
    /// the rest in one system call per step for all threads.
    fn read_cframes(&self, o: &Offsets, facts: &mut [ThreadFacts], guessed: bool) -> Result<()> {
        let mut todo: Vec<(&mut ThreadFacts, u64, &[u8])> = Vec::with_capacity(facts.len());
        for (f, &i) in facts.iter_mut().zip(&self.order) {
            let slot = &self.slots[i];
            if guessed {
                slot.cframe.settle(o, f, slot.tstate, &slot.buf);
            }
            todo.push((f, slot.tstate, &slot.buf[..]));
        }
        cframe::resolve(&self.mem, o, &mut todo)
    }

    /// Drop what an interpreter's counters say is stale: every cached
    /// code object when one was freed (3.14+), where the bytecode copies
    /// are when a copy index was taken or given back (free-threaded 3.14+).
    fn note_generations(&mut self, interp: &InterpFacts) {
        if let Some(g) = interp.code_generation
            && moved(&mut self.generations, interp.addr, g)
        {
            self.code.clear();
        }
        if let Some(g) = interp.tlbc_generation
            && moved(&mut self.tlbc_generations, interp.addr, g)
        {
            self.code.forget_copies();
        }
    }

    /// 3.12: the holder of the GIL state at `gil` (shared by a
    /// subinterpreter with the main interpreter), or 0 while it is free.
    fn shared_gil_holder(&self, o: &Offsets, gil: u64) -> Result<u64> {
        if !frames::plausible(gil) {
            return Err(Error::corrupt(format!(
                "interpreter's GIL at impossible address {gil:#x}"
            )));
        }
        let mut locked = [0u8; 4];
        let mut holder = [0u8; 8];
        self.mem.grant(1, 12);
        self.mem.read_many(&mut [
            ReadReq {
                addr: gil.wrapping_add(o.gil_state_locked),
                buf: &mut locked,
            },
            ReadReq {
                addr: gil.wrapping_add(o.gil_state_holder),
                buf: &mut holder,
            },
        ])?;
        Ok(if u32::from_le_bytes(locked) == 1 {
            u64::from_le_bytes(holder)
        } else {
            0
        })
    }

    /// Status and stack of a thread whose state and chunks are in
    /// `self.slots[idx]`.
    #[allow(clippy::too_many_arguments)]
    fn sample_prepared_thread(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        idx: usize,
        tstate: u64,
        t: &ThreadFacts,
        out: &mut Sample,
        n: &mut usize,
    ) -> Result<()> {
        let slot = self.open_thread_slot(o, interp, tstate, t, out, *n);
        let plan = self.cache_plan(o, idx, tstate, t)?;
        let vouched = plan.audit.then(|| self.slots[idx].tail.frames().to_vec());
        let mut walked =
            self.walk_thread(o, interp, idx, tstate, t, *n, plan.hit, &mut slot.frames);
        if matches!(walked, Err(Error::Torn(Torn::NotVouched))) {
            // The kept walk does not fit (its context moved): read and
            // walk the whole stack after all.
            self.reload_whole(o, idx, t)?;
            slot.frames.clear();
            walked = self.walk_thread(o, interp, idx, tstate, t, *n, false, &mut slot.frames);
        }
        if walked? {
            // A generator's handler: on the `exc_info` chain, not in the
            // thread state's own slots.
            slot.status |= crate::model::status::HAS_EXCEPTION;
        }
        if self.opts.gc
            && interp.gc_collecting
            && interp.gc_frame == 0
            && tstate == interp.gil_holder
        {
            self.mark_collecting(&mut slot.frames, *n);
        }
        self.settle_mark(o, idx, tstate, t, plan, vouched);
        *n += 1;
        Ok(())
    }

    /// Walk the stack of the thread in `self.slots[idx]` (the `n`-th of
    /// the sample) into `frames`, below the leaf from the kept walk if
    /// the frame cache's mark vouches for it (`vouched`). True if a
    /// generator on the stack handles an exception.
    #[allow(clippy::too_many_arguments)]
    fn walk_thread(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        idx: usize,
        tstate: u64,
        t: &ThreadFacts,
        n: usize,
        vouched: bool,
        frames: &mut Vec<crate::model::FrameId>,
    ) -> Result<bool> {
        if cframe::published_without_frame(o, tstate, t) {
            return Err(Torn::CFrameWithoutFrame { cframe: t.cframe }.into());
        }
        self.outside.clear();
        let gc_frame = if self.opts.gc { interp.gc_frame } else { 0 };
        let keeps_tail = self.keeps_tail(idx);
        let ts = &mut self.slots[idx];
        let readable = !ts.chunks.prefetch_failed();
        let opcodes = self.opts.opcode_table(o);
        let mem = &self.mem;
        let grant = |calls, bytes| mem.grant(calls, bytes);
        let grant_frame = frame_grant(mem, &self.frame_grants, o.frame_size);
        let grant_resume = resume_grant(mem, &self.resume_grants);
        let places = self.places.as_mut().map(|p| {
            p.resize_with(p.len().max(n + 1), Vec::new);
            let v = &mut p[n];
            v.clear();
            v
        });
        let entries = self.entries.as_mut().map(|p| {
            p.resize_with(p.len().max(n + 1), Vec::new);
            let v = &mut p[n];
            v.clear();
            v
        });
        let mut walk = Walk {
            mem,
            grant: &grant,
            grant_frame: &grant_frame,
            grant_resume: &grant_resume,
            seen: &mut self.seen,
            offs: o,
            code: &mut self.code,
            table: &mut self.table,
            chunks: &ts.chunks,
            markers: self.markers,
            native: self.opts.native,
            gc_frame,
            used_codes: &mut self.used_codes,
            tstate: (tstate, &ts.buf),
            outside: &mut self.outside,
            counted: true,
            entry_previous: t.entry_previous,
            opcodes,
            tail: keeps_tail.then_some(&mut ts.tail),
            vouched,
            none_addr: self.runtime.none_addr,
            handles_exception: false,
            places,
            entries,
        };
        let walked = walk.run(t.current_frame, t.base_frame, frames);
        let handles = walk.handles_exception;
        drop(grant_frame);
        drop(grant_resume);
        self.spec.prefetch.replace(
            tstate,
            &mut self.outside,
            &self.seen,
            walked.is_ok(),
            readable,
        );
        walked.map(|()| handles)
    }

    /// Is the walk of the thread in `self.slots[idx]` kept for the next
    /// (see [`reuse`])? Not with opcodes, frame places or entry frames
    /// asked for, nor past the first [`reuse::MAX_KEPT_THREADS`].
    fn keeps_tail(&self, idx: usize) -> bool {
        self.opts.opcode_table(&self.runtime.offsets).is_none()
            && self.places.is_none()
            && self.entries.is_none()
            && idx < reuse::MAX_KEPT_THREADS
    }

    /// The frame cache's part before a thread's walk (see [`anchor`]): a
    /// hit if the mark vouches for the kept walk below the leaf, only the
    /// leaf was read and the mark has not moved since; an audit if it
    /// vouches but the whole stack was read. A read of only the leaf that
    /// is no hit is completed by reading the whole stack.
    fn cache_plan(
        &mut self,
        o: &Offsets,
        idx: usize,
        tstate: u64,
        t: &ThreadFacts,
    ) -> Result<CachePlan> {
        let mut plan = CachePlan::default();
        let ts = &self.slots[idx];
        let windowed = ts.chunks.windowed();
        let thread = (tstate, t.native_id);
        let mark = self.spec.marks.get(tstate).copied().unwrap_or_default();
        if self.frame_cache.active() && mark.foreign(thread, t.anchor) {
            self.frame_cache.turn_off(anchor::FOREIGN);
        }
        if self.frame_cache.active()
            && mark.covers(thread, t.current_frame, t.anchor)
            && ts.tail.kept_below(tstate, t.current_frame)
        {
            // A hit needs the state read after the leaf; a window read
            // any other way (none is) is read whole below.
            plan.hit = windowed && ts.state_after == (true, true);
            plan.audit = !windowed;
        }
        if windowed && !plan.hit {
            self.reload_whole(o, idx, t)?;
        }
        Ok(plan)
    }

    /// Read the whole stack of the thread in `self.slots[idx]`, whose
    /// first chunk was read only from its vouched leaf up.
    fn reload_whole(&mut self, o: &Offsets, idx: usize, t: &ThreadFacts) -> Result<()> {
        let ts = &mut self.slots[idx];
        let first = if t.current_frame != 0 {
            t.datastack_chunk
        } else {
            0
        };
        let grant = chunk_grant(&self.mem, &self.chunk_grants);
        self.mem.grant(1, 0);
        ts.chunks.load(
            &self.mem,
            first,
            t.current_frame,
            o.frame_size,
            self.spec.prefetch.get(ts.tstate),
            &grant,
        )
    }

    /// The frame cache's part after a thread's walk (see [`anchor`]):
    /// count a hit, check an audit, vouch or mark the leaf.
    fn settle_mark(
        &mut self,
        o: &Offsets,
        idx: usize,
        tstate: u64,
        t: &ThreadFacts,
        plan: CachePlan,
        vouched: Option<Vec<crate::model::FrameId>>,
    ) {
        let Some((frame_at, _)) = o.tstate_last_profiled else {
            return;
        };
        if !(self.frame_cache.active() && self.keeps_tail(idx)) {
            return;
        }
        let ts = &mut self.slots[idx];
        let mark = self.spec.marks.entry(tstate);
        // A thread being made or unmade (no OS id yet, or only its base
        // frame) has nothing to vouch for, and its state's fields are
        // being set: not marked.
        let leaf = match t.native_id == 0 || Some(t.current_frame) == t.base_frame {
            true => 0,
            false => t.current_frame,
        };
        let kept = ts.tail.kept_below(tstate, leaf);
        if plan.hit {
            self.frame_cache.hits += 1;
            mark.hit();
        }
        if let Some(before) = vouched {
            self.frame_cache.audits += 1;
            mark.since_audit = 0;
            if kept && ts.tail.frames() != before {
                *mark = anchor::Mark::default();
                self.frame_cache.turn_off(anchor::AUDIT_FAILED);
                return;
            }
        }
        if mark.settle((tstate, t.native_id), leaf, t.anchor, kept) {
            match self
                .mem
                .write(tstate.wrapping_add(frame_at), &leaf.to_le_bytes())
            {
                Ok(()) => self.frame_cache.writes += 1,
                Err(_) => {
                    mark.written = None;
                    self.frame_cache.turn_off(anchor::CANNOT_WRITE);
                }
            }
        }
    }

    /// The `n`-th stack of `out`, made ready for thread `t` (state at
    /// `tstate`): its id, interpreter and status set, its frames empty, and
    /// the key its name is looked up by noted.
    fn open_thread_slot<'o>(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        tstate: u64,
        t: &ThreadFacts,
        out: &'o mut Sample,
        n: usize,
    ) -> &'o mut ThreadSample {
        let os_state = if self.opts.cpu_status {
            self.mem.os_thread_state(t.native_id)
        } else {
            None
        };
        let is_holder = o.holds_gil == GilFlag::Holder && tstate == interp.gil_holder;
        let status = t.status(tstate == interp.threads_main, is_holder, os_state);
        if n == out.threads.len() {
            out.threads.push(ThreadSample::default());
        }
        let key = ThreadKey {
            tid: t.native_id,
            ident: t.thread_id,
            interp: interp.addr,
        };
        if n == self.name_keys.len() {
            self.name_keys.push(key);
        } else {
            self.name_keys[n] = key;
        }
        let slot = &mut out.threads[n];
        slot.tid = t.native_id;
        slot.interpreter_id = interp.id;
        slot.status = status;
        slot.frames.clear();
        slot
    }

    /// The GIL holder's stack `n` while the collector runs, with no frame
    /// of its own for it: `<GC>` on top (the kept frame places move down
    /// one).
    fn mark_collecting(&mut self, frames: &mut Vec<crate::model::FrameId>, n: usize) {
        if frames.first() == Some(&self.markers.gc) {
            return;
        }
        frames.insert(0, self.markers.gc);
        if let Some(p) = self.places.as_mut() {
            p[n].iter_mut().for_each(|f| f.index += 1);
        }
    }

    /// Sample one thread (main-thread mode) through slot 0; its state is
    /// already there when `prefetched`.
    fn sample_thread(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        tstate: u64,
        prefetched: bool,
        out: &mut Sample,
        n: &mut usize,
    ) -> Result<()> {
        if !frames::plausible(tstate) {
            return Err(Error::corrupt(format!(
                "thread state at impossible address {tstate:#x}"
            )));
        }
        let slot = &mut self.slots[0];
        slot.tstate = tstate;
        if !prefetched {
            slot.buf.resize(self.state_len.len, 0);
            self.mem.read(tstate, &mut slot.buf)?;
        }
        let mut t = ThreadFacts::decode(o, &slot.buf, self.runtime.none_addr)
            .ok_or_else(|| Error::corrupt("short thread state"))?;
        self.state_len.learn(o, tstate, t.base_frame);
        if o.cframe_current_frame.is_some() {
            if prefetched {
                slot.cframe.settle(o, &mut t, tstate, &slot.buf);
            }
            cframe::resolve(&self.mem, o, &mut [(&mut t, tstate, &slot.buf[..])])?;
        }
        self.spec.main.cframe = t.cframe;
        self.spec.main.outer_cframe = t.outer_cframe;
        let prefetch = self.spec.prefetch.entry(tstate);
        let first = if t.current_frame != 0 {
            t.datastack_chunk
        } else {
            0
        };
        if prefetched
            && first != 0
            && slot
                .chunks
                .accept_guess(first, t.current_frame, o.frame_size)
        {
            let grant = chunk_grant(&self.mem, &self.chunk_grants);
            slot.chunks.complete(&self.mem, true, &grant)?;
        } else {
            let grant = chunk_grant(&self.mem, &self.chunk_grants);
            slot.chunks.load(
                &self.mem,
                first,
                t.current_frame,
                o.frame_size,
                prefetch,
                &grant,
            )?;
        }
        // Remember where the stack was, and how high it reached lately
        // (decaying, so one deep moment does not inflate reads for ever).
        self.spec.main.chunk = self.spec.main.chunk.next(first, slot.chunks.live_len());
        self.sample_prepared_thread(o, interp, 0, tstate, &t, out, n)
    }

    /// 3.13 only: re-read the fingerprint of every code object the last
    /// sample used; evict the ones that changed. True if any did.
    fn revalidate_codes(&mut self) -> Result<bool> {
        let o = &self.runtime.offsets;
        let (start, len) = code::fingerprint_span(o);
        self.used_codes.sort_unstable();
        self.used_codes.dedup();
        // Checked in this sample's first read, or read fresh during the
        // walk: only the rest needs a read now (usually none).
        self.code.loaded.sort_unstable();
        let to_check = self
            .spec
            .fingerprints
            .unchecked(&self.used_codes, &self.code.loaded);
        if to_check.is_empty() {
            return Ok(false);
        }
        let mut bufs = vec![0u8; len * to_check.len()];
        let mut reqs: Vec<ReadReq<'_>> = to_check
            .iter()
            .zip(bufs.chunks_mut(len))
            .map(|(&c, buf)| ReadReq {
                addr: c.wrapping_add(start),
                buf,
            })
            .collect();
        let read_ok = self.mem.read_many(&mut reqs).is_ok();
        drop(reqs);
        let mut changed = false;
        for (i, &c) in to_check.iter().enumerate() {
            let now = if read_ok {
                code::fingerprint(o, &bufs[i * len..(i + 1) * len], start)
            } else {
                None
            };
            if now.as_ref() != self.code.fingerprint_of(c) {
                self.code.evict(c);
                changed = true;
            }
        }
        Ok(changed)
    }

    /// What the 3.15 frame cache did so far (see [`anchor`]).
    pub fn frame_cache(&self) -> &anchor::FrameCache {
        &self.frame_cache
    }

    /// How many thread walks reused the frames of the last walk below an
    /// unchanged leaf (see [`reuse`]), over threads still sampled.
    pub fn reused_walks(&self) -> u64 {
        self.slots.iter().map(|s| s.tail.hits()).sum()
    }

    /// The process id this unwinder reads.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

#[cfg(test)]
mod tests {
    use super::StateLen;

    fn learnt(steps: &[(u64, Option<u64>)]) -> usize {
        let mut l = StateLen { len: 888, seen: 0 };
        for &(tstate, base) in steps {
            l.learn_sized(888, 120, tstate, base);
        }
        l.len
    }

    #[test]
    fn a_state_is_read_with_its_own_base_frame_once_two_agree() {
        // 3.15: an 888-byte state whose base frame (120 bytes) starts 856
        // bytes in is read as 976 bytes, once a second state agrees.
        let own = |t: u64| (t, Some(t + 856));
        assert_eq!(learnt(&[own(0x1000)]), 888);
        assert_eq!(learnt(&[own(0x1000), own(0x9000)]), 976);
        assert_eq!(learnt(&[own(0x1000), own(0x1000)]), 976);
        // A torn pointer in between is not taken, nor does it stay.
        assert_eq!(learnt(&[own(0x1000), (0x9000, Some(0x9000 + 900))]), 888);
        assert_eq!(learnt(&[(0x9000, Some(0x9000 + 900)), own(0x1000)]), 888);
        // Never shorter once learnt; none, or one that fits: as is.
        assert_eq!(learnt(&[own(0x1000), own(0x1000), (0x1000, None)]), 976);
        let fits = (0x1000, Some(0x1000 + 64));
        assert_eq!(learnt(&[fits, fits]), 888);
        // Below the state, far past it, or a wrapped address: not its own.
        for base in [0x800, 0x1000 + 4096, u64::MAX] {
            assert_eq!(learnt(&[(0x1000, Some(base)), (0x1000, Some(base))]), 888);
        }
    }
}
