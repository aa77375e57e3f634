//! Async-aware sampling (`--async-aware`, 3.14+): stacks per asyncio task
//! instead of per thread, read through asyncio's own debug offsets.
//!
//! Per sample, for each thread of each interpreter:
//! - mode `running`: the thread's running task (`asyncio_running_task`
//!   while a loop runs), its stack being the thread's frames from the
//!   current one down to the task coroutine's frame; then every task that
//!   awaits it, and so on up;
//! - mode `all`: every task in the thread's task list (and, once per
//!   interpreter, the interpreter's list of tasks whose thread ended,
//!   under thread id 0), its stack being its coroutine chain: the task's
//!   coroutine, what that awaits (while it is a coroutine of the same
//!   type), and so on down.
//!
//! A task's parents are the tasks in its `awaited_by` (one task or a set).
//! From that graph each leaf task (one nobody awaits) gives one stack: its
//! frames, a `<task>` frame named after it, its parent's frames, the
//! parent's `<task>` frame, up to a root. A task with several parents
//! follows the one with the lowest address and is named
//! `"name (N parents)"`. That is the reference's presentation; each stack
//! becomes a [`ThreadSample`] of the thread the leaf task was found on, so
//! every output renders it unchanged.
//!
//! Everything read is untrusted: lists, sets and chains are bounded and
//! cycle-checked, each task is granted a few reads, and an impossible value
//! fails the sample.

use foldhash::{HashMap, HashMapExt, HashSet};
use std::time::{Duration, Instant};

use super::dict::{decode_int, int_read_size};
use super::frames::{self, Chunks, FramePlace, Walk};
use super::names::ThreadKey;
use super::objects::read_str_raw;
use super::threads::{InterpFacts, MAX_INTERPRETERS, ThreadFacts};
use super::{READS_PER_CODE_LOAD, Unwinder, push_ranges};
use crate::error::{Error, Result, Torn};
use crate::model::{
    Frame, FrameId, FrameKind, FrameTable, MAX_DEPTH, Sample, StrId, ThreadSample, status,
};
use crate::offsets::Offsets;
use crate::offsets::asyncio::{AsyncOffsets, TPFLAGS_LONG_SUBCLASS, TPFLAGS_UNICODE_SUBCLASS};
use crate::process::pages::{PageCache, Pages};
use crate::process::{LocalBytes, Metered, ProcessMemory};
use std::ops::Range;

/// Which tasks a sample shows (`--async-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncMode {
    /// Only each thread's running task and the tasks awaiting it.
    Running,
    /// Every task, suspended ones too.
    All,
}

/// Finds the asyncio offsets of the target, `Ok(None)` while asyncio is not
/// loaded there.
pub type Locator = Box<dyn FnMut() -> Result<Option<AsyncOffsets>>>;

/// How often a target without asyncio loaded is looked at again.
const RETRY: Duration = Duration::from_millis(100);
/// Most tasks one sample visits (the reference caps each list at 2<<15).
pub const MAX_TASKS: usize = 1 << 16;
/// Most coroutines in one task's chain.
const MAX_CORO_DEPTH: usize = 1024;
/// Most slots of an `awaited_by` set read (16 bytes each).
const MAX_SET_SLOTS: u64 = 1 << 14;
/// Most frames of all task stacks of one sample together.
const MAX_SAMPLE_FRAMES: usize = 4 << 20;
/// Longest task name kept, in characters (as the reference).
const MAX_NAME_CHARS: usize = 255;
/// Reads and bytes granted per task visited (the task, its name and its
/// name's type, its `awaited_by` set) and per coroutine of its chain.
const READS_PER_TASK: u32 = 8;
const BYTES_PER_TASK: u64 = 4 * crate::process::pages::PAGE;
const READS_PER_CORO: u32 = 3;
const BYTES_PER_CORO: u64 = 3 * crate::process::pages::PAGE;
/// Most entries of each task-name cache; a full cache starts over, so
/// memory stays flat however many tasks come and go.
const MAX_NAMES: usize = 4096;

/// Async-aware sampling state of an [`Unwinder`].
pub struct AsyncState {
    mode: AsyncMode,
    offsets: Option<AsyncOffsets>,
    locate: Option<Locator>,
    last_try: Option<Instant>,
    /// Per stack of the last sample, the leaf task's address (the
    /// reference's dump names sections by it).
    leaves: Vec<u64>,
    tstate_buf: Vec<u8>,
    chunks: Chunks,
    /// This sample's page cache, its task count, and the name types'
    /// flags (kept across samples).
    pages: Pages,
    tasks_seen: usize,
    /// Per type address, its flags.
    type_flags: Believed<u64>,
    /// Per type address, what kind of awaitable it is.
    kinds: Kinds,
    /// Stacks left out of the last sample because a task on them could
    /// not be read whole.
    broken: usize,
    /// Task names already interned, and the per-sample storage, kept so a
    /// steady sample allocates nothing per task.
    names: Names,
    scratch: Scratch,
    graph: Graph,
    tstates: Vec<u64>,
    /// Running mode: the running task's frames and parents.
    run_frames: Vec<FrameId>,
    run_outside: Vec<u64>,
    run_places: Vec<FramePlace>,
    run_parents: Vec<u64>,
}

/// Buffers and sets of one sample's reads, cleared rather than re-created.
#[derive(Default)]
struct Scratch {
    task: Vec<u8>,
    /// A name's head bytes, then (a str) its characters.
    head: Vec<u8>,
    /// A str name's cache key.
    key: Vec<u8>,
    coro: Vec<u8>,
    coro_seen: HashSet<u64>,
    list_seen: HashSet<u64>,
    set: Vec<u8>,
    set_entries: Vec<u8>,
    todo: Vec<u64>,
    /// `dump --locals`: where the frames of the chain being read are.
    places: Vec<FramePlace>,
}

/// Task names as interned strings, by what was read of them this sample
/// (never by the name object's address, which a freed name's successor
/// can reuse): an int name by its value, a str by its kind, its cut and
/// its raw characters. A hit thus always stands for the text read now.
#[derive(Default)]
struct Names {
    ints: HashMap<u64, StrId>,
    strs: HashMap<Box<[u8]>, StrId>,
}

impl Names {
    /// The name `Task-n` (an int name `n`).
    fn int(&mut self, n: u64, table: &mut FrameTable) -> StrId {
        if let Some(&id) = self.ints.get(&n) {
            return id;
        }
        let id = table.intern_str(truncated(format!("Task-{n}")).as_str());
        if self.ints.len() >= MAX_NAMES {
            self.ints.clear();
        }
        self.ints.insert(n, id);
        id
    }

    /// The name of the str at `obj`, read (and checked) into `buf` each
    /// time; decoded and interned only when its characters are new.
    fn str(
        &mut self,
        mem: &dyn ProcessMemory,
        o: &Offsets,
        obj: u64,
        buf: &mut Vec<u8>,
        key: &mut Vec<u8>,
        table: &mut FrameTable,
    ) -> Result<StrId> {
        let raw = read_str_raw(mem, o, obj, buf)?;
        key.clear();
        key.push(raw.kind as u8 | (raw.ascii as u8) << 3 | (raw.cut as u8) << 4);
        key.extend_from_slice(raw.data(buf));
        if let Some(&id) = self.strs.get(&key[..]) {
            return Ok(id);
        }
        let id = table.intern_str(&truncated(raw.decode(buf)?));
        if self.strs.len() >= MAX_NAMES {
            self.strs.clear();
        }
        self.strs.insert(key[..].into(), id);
        Ok(id)
    }
}

/// A name cut to [`MAX_NAME_CHARS`] characters.
fn truncated(mut s: String) -> String {
    if let Some((cut, _)) = s.char_indices().nth(MAX_NAME_CHARS) {
        s.truncate(cut);
    }
    s
}

/// What an object in a task's await chain is, told by its type's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AwaitKind {
    /// `coroutine`: a frame, and what it awaits.
    Coroutine,
    /// `generator` (a `types.coroutine` one): a frame; followed only from
    /// a generator.
    Generator,
    /// `async_generator`: a frame, and what it awaits.
    AsyncGen,
    /// `async_generator_asend` (`anext()`, `asend()`) or
    /// `async_generator_athrow` (`athrow()`, `aclose()`): no frame, the
    /// async generator it drives right after its object head.
    AsyncGenAwaitable,
    /// Anything else (a future, an iterator): the chain ends.
    Other,
}

impl AwaitKind {
    fn from_name(name: &[u8]) -> AwaitKind {
        match name {
            b"coroutine" => AwaitKind::Coroutine,
            b"generator" => AwaitKind::Generator,
            b"async_generator" => AwaitKind::AsyncGen,
            b"async_generator_asend" | b"async_generator_athrow" => AwaitKind::AsyncGenAwaitable,
            _ => AwaitKind::Other,
        }
    }
}

/// Longest type name [`Kinds::of`] reads (the names it knows are shorter).
const MAX_KIND_NAME: usize = 32;

/// Most entries of each type cache ([`Believed`]); a full cache starts over.
const MAX_TYPES: usize = 64;

/// Facts about type objects, by type address, kept across samples and
/// believed only once reads in two different samples agree. A torn read
/// seen twice within one sample (through its page cache) proves nothing,
/// and one that differs each time never stays: one bad read cannot, say,
/// hide a coroutine's frames for the rest of the run. (The code cache
/// trusts code objects by the same rule.)
struct Believed<V> {
    seen: HashMap<u64, Seen<V>>,
    /// The sample being read (counted by [`Believed::new_sample`]).
    sample: u64,
}

#[derive(Clone, Copy)]
struct Seen<V> {
    value: V,
    /// The sample it was first read in.
    sample: u64,
    confirmed: bool,
}

impl<V> Default for Believed<V> {
    fn default() -> Self {
        Believed {
            seen: HashMap::new(),
            sample: 0,
        }
    }
}

impl<V: Copy + PartialEq> Believed<V> {
    fn new_sample(&mut self) {
        self.sample += 1;
        if self.seen.len() > MAX_TYPES {
            self.seen.clear();
        }
    }

    /// What two samples agreed on for the type at `ty`, if they did.
    fn get(&self, ty: u64) -> Option<V> {
        self.seen.get(&ty).filter(|s| s.confirmed).map(|s| s.value)
    }

    /// `value` was read now for the type at `ty`.
    fn saw(&mut self, ty: u64, value: V) {
        let sample = self.sample;
        match self.seen.get_mut(&ty) {
            Some(old) if old.value == value => old.confirmed |= old.sample != sample,
            _ => {
                self.seen.insert(
                    ty,
                    Seen {
                        value,
                        sample,
                        confirmed: false,
                    },
                );
            }
        }
    }

    fn forget(&mut self, ty: u64) {
        self.seen.remove(&ty);
    }
}

/// What kind of awaitable each type is, by its `tp_name`: the kind and the
/// name bytes it was told by (two reads agree only on the same bytes).
type Kinds = Believed<(AwaitKind, [u8; MAX_KIND_NAME])>;

impl Kinds {
    /// The kind of the type at `ty`; a name that cannot be read is
    /// `Other`, not an error: it only ends the chain.
    fn of(
        &mut self,
        meter: &dyn Grant,
        mem: &dyn ProcessMemory,
        o: &Offsets,
        ty: u64,
    ) -> Result<AwaitKind> {
        if let Some((kind, _)) = self.get(ty) {
            return Ok(kind);
        }
        if !frames::plausible(ty) {
            return Ok(AwaitKind::Other);
        }
        meter.grant_reads(2, 2 * crate::process::pages::PAGE);
        let name_ptr = mem.read_u64(ty.wrapping_add(o.type_tp_name))?;
        let mut name = [0u8; MAX_KIND_NAME];
        if name_ptr == 0 || mem.read(name_ptr, &mut name).is_err() {
            return Ok(AwaitKind::Other);
        }
        let Some(len) = name.iter().position(|&b| b == 0).filter(|&l| l > 0) else {
            return Ok(AwaitKind::Other);
        };
        let kind = AwaitKind::from_name(&name[..len]);
        // What follows the NUL is not the name: two reads agree on the
        // name alone.
        name[len..].fill(0);
        self.saw(ty, (kind, name));
        Ok(kind)
    }
}

/// Granting reads to a sample's budget (a [`Metered`] memory's).
trait Grant {
    fn grant_reads(&self, calls: u32, bytes: u64);
}

impl<M: ProcessMemory> Grant for Metered<M> {
    fn grant_reads(&self, calls: u32, bytes: u64) {
        self.grant(calls, bytes);
    }
}

/// Memory as a running task's walk sees it: the word at `at` (a frame's
/// link to its caller) reads as `to`, so the walk ends right below the
/// task coroutine's frame, wherever its code recurs (`at` 0: no change).
struct Relinked<'a> {
    inner: &'a dyn ProcessMemory,
    at: u64,
    to: u64,
}

impl Relinked<'_> {
    fn patch(&self, addr: u64, buf: &mut [u8]) {
        if self.at == 0 {
            return;
        }
        let to = self.to.to_le_bytes();
        for (i, b) in to.iter().enumerate() {
            let a = self.at.wrapping_add(i as u64);
            if let Some(off) = a.checked_sub(addr)
                && let Some(slot) = buf.get_mut(off as usize)
            {
                *slot = *b;
            }
        }
    }
}

impl ProcessMemory for Relinked<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(addr, buf)?;
        self.patch(addr, buf);
        Ok(())
    }

    fn read_many(&self, reqs: &mut [crate::process::ReadReq<'_>]) -> Result<()> {
        self.inner.read_many(reqs)?;
        for r in reqs.iter_mut() {
            self.patch(r.addr, r.buf);
        }
        Ok(())
    }
}

/// Whether a failure reading one task's coroutine chain is that task's
/// alone (odd or torn memory), not the sample's (the process gone, the
/// sample's read budget spent).
fn task_local(e: &Error) -> bool {
    !e.is_fatal() && !matches!(e, Error::ReadBudget { .. })
}

/// One task as read: where it was found and what it is.
struct TaskNode {
    addr: u64,
    name: StrId,
    /// Leaf first, in [`Graph::frames`].
    frames: Range<usize>,
    /// In [`Graph::parents`].
    parents: Range<usize>,
    /// The thread it was found on (0: the interpreter's list) and how its
    /// name is looked up.
    key: ThreadKey,
    status: u32,
    interp_id: i64,
    /// Its coroutine chain could not be read: no stack through it is
    /// shown (each one left out is counted).
    broken: bool,
}

/// The tasks of one sample, in the order found; a task found again
/// replaces its earlier record (as the reference's dictionary does). Kept
/// across samples (cleared) with its scratch, so its storage is reused.
#[derive(Default)]
struct Graph {
    nodes: Vec<TaskNode>,
    index: HashMap<u64, usize>,
    /// The nodes' frames and parents (a replaced record's stay unused).
    frames: Vec<FrameId>,
    parents: Vec<u64>,
    /// `dump --locals`: where the frame at each position of `frames` is.
    places: HashMap<usize, FramePlace>,
    /// Scratch of [`Graph::find_leaves`] and [`Graph::stack`].
    awaited: HashSet<u64>,
    leaves: Vec<usize>,
    seen: HashSet<u64>,
    /// `"name (N parents)"` per name and N.
    multi: HashMap<(StrId, usize), StrId>,
}

impl Graph {
    fn clear(&mut self) {
        self.nodes.clear();
        self.index.clear();
        self.frames.clear();
        self.parents.clear();
        self.places.clear();
    }

    fn parents_of(&self, n: &TaskNode) -> &[u64] {
        &self.parents[n.parents.clone()]
    }

    fn insert(&mut self, n: TaskNode) {
        match self.index.get(&n.addr) {
            Some(&i) => self.nodes[i] = n,
            None => {
                self.index.insert(n.addr, self.nodes.len());
                self.nodes.push(n);
            }
        }
    }

    fn contains(&self, addr: u64) -> bool {
        self.index.contains_key(&addr)
    }
}

/// What a task object says, before its chain is read.
struct TaskFacts {
    name: StrId,
    coro: u64,
    is_task: bool,
    awaited_by: u64,
    awaited_by_is_set: bool,
}

/// A [`Reader`] of unwinder `$u`'s caches and async state `$st`'s,
/// reading through the sample's page cache.
macro_rules! task_reader {
    ($u:ident, $st:ident, $o:ident, $a:ident) => {
        Reader {
            meter: &$u.mem,
            mem: &PageCache {
                inner: &$u.mem,
                pages: &$st.pages,
            },
            o: $o,
            a: $a,
            code: &mut $u.code,
            table: &mut $u.table,
            used_codes: &mut $u.used_codes,
            type_flags: &mut $st.type_flags,
            kinds: &mut $st.kinds,
            tasks_seen: &mut $st.tasks_seen,
            names: &mut $st.names,
            scratch: &mut $st.scratch,
            keep_places: $u.places.is_some(),
        }
    };
}

/// Reading tasks and coroutines: the pieces of the unwinder a task walk
/// uses, borrowed apart.
struct Reader<'a, M: ProcessMemory> {
    /// The sample's budget: reads are granted here.
    meter: &'a Metered<M>,
    /// Reads go through the sample's page cache.
    mem: &'a dyn ProcessMemory,
    o: &'a Offsets,
    a: &'a AsyncOffsets,
    code: &'a mut super::code::CodeCache,
    table: &'a mut crate::model::FrameTable,
    used_codes: &'a mut Vec<u64>,
    /// `tp_flags` of the name objects' types (builtin `int` and `str`,
    /// in practice).
    type_flags: &'a mut Believed<u64>,
    kinds: &'a mut Kinds,
    tasks_seen: &'a mut usize,
    names: &'a mut Names,
    scratch: &'a mut Scratch,
    /// Note where each frame is (`dump --locals`).
    keep_places: bool,
}

impl<M: ProcessMemory> Reader<'_, M> {
    fn ptr(&self, v: u64) -> u64 {
        v & self.o.tag_mask
    }

    /// Count a task against the sample's cap and grant its reads.
    fn visit(&mut self) -> Result<()> {
        *self.tasks_seen += 1;
        if *self.tasks_seen > MAX_TASKS {
            return Err(Error::corrupt(format!(
                "more than {MAX_TASKS} asyncio tasks in one sample (a corrupt task list?)"
            )));
        }
        self.meter.grant(READS_PER_TASK, BYTES_PER_TASK);
        Ok(())
    }

    /// Read the task at `addr` (into `scratch.task`, where [`Reader::list`]
    /// finds its list link).
    fn read_task(&mut self, addr: u64) -> Result<TaskFacts> {
        if !frames::plausible(addr) {
            return Err(Error::corrupt(format!(
                "asyncio task at impossible address {addr:#x}"
            )));
        }
        let a = self.a;
        let buf = &mut self.scratch.task;
        buf.clear();
        buf.resize(a.task_size as usize, 0);
        self.mem.read(addr, buf)?;
        let short = || Error::corrupt("short task object");
        let name_obj = self.ptr(self.scratch.task.u64_at(a.task_name).ok_or_else(short)?);
        // The name first, as before (its reads leave the task buffer be).
        let name = self.task_name(name_obj)?;
        let buf = &self.scratch.task;
        Ok(TaskFacts {
            name,
            coro: self.ptr(buf.u64_at(a.task_coro).ok_or_else(short)?),
            is_task: buf.u8_at(a.task_is_task).ok_or_else(short)? != 0,
            awaited_by: self.ptr(buf.u64_at(a.task_awaited_by).ok_or_else(short)?),
            awaited_by_is_set: buf.u8_at(a.task_awaited_by_is_set).ok_or_else(short)? != 0,
        })
    }

    /// A task's name, interned: an int `n` (tasks named by asyncio's
    /// counter) shown as `Task-n`, or a str.
    fn task_name(&mut self, obj: u64) -> Result<StrId> {
        if !frames::plausible(obj) {
            return Err(Error::corrupt(format!(
                "task name at impossible address {obj:#x}"
            )));
        }
        let oo = &self.o.objects;
        let head = &mut self.scratch.head;
        head.clear();
        head.resize(int_read_size(oo).max(self.o.ob_type as usize + 8), 0);
        self.mem.read(obj, head)?;
        let ty = head
            .u64_at(self.o.ob_type)
            .ok_or_else(|| Error::corrupt("short task name"))?;
        let flags = match self.type_flags.get(ty) {
            Some(f) => f,
            None => {
                if !frames::plausible(ty) {
                    return Err(Error::corrupt("task name of impossible type"));
                }
                let f = self.mem.read_u64(ty.wrapping_add(oo.type_flags))?;
                let kinds = f & (TPFLAGS_LONG_SUBCLASS | TPFLAGS_UNICODE_SUBCLASS);
                if kinds == TPFLAGS_LONG_SUBCLASS || kinds == TPFLAGS_UNICODE_SUBCLASS {
                    // Kept only when it names one kind.
                    self.type_flags.saw(ty, f);
                }
                f
            }
        };
        let decoded = if flags & TPFLAGS_LONG_SUBCLASS != 0 {
            decode_int(oo, &self.scratch.head)
                .map(|n| self.names.int(n, self.table))
                .ok_or_else(|| Error::corrupt("task name is an int out of range"))
        } else if flags & TPFLAGS_UNICODE_SUBCLASS == 0 {
            Err(Error::corrupt("task name is neither an int nor a str"))
        } else {
            let Scratch { head, key, .. } = &mut *self.scratch;
            self.names.str(self.mem, self.o, obj, head, key, self.table)
        };
        if decoded.is_err() {
            // Perhaps the type was not what was cached: look again next time.
            self.type_flags.forget(ty);
        }
        decoded
    }

    /// The frame of code `exe` at `instr_ptr` in copy `tlbc_index` of its
    /// bytecode (free-threaded 3.14+; else 0), loading the code object
    /// (with its reads granted) if needed. Also returns where that copy
    /// starts.
    fn frame(&mut self, exe: u64, instr_ptr: u64, tlbc_index: i32) -> Result<(FrameId, u64)> {
        if !self.code.has_copy(exe, tlbc_index) {
            self.meter
                .grant(super::READS_PER_COPY_LOOKUP, super::BYTES_PER_COPY_LOOKUP);
        }
        let (at, copy) = self
            .code
            .in_own_bytecode(self.mem, self.o, exe, instr_ptr, tlbc_index);
        if !self.code.is_ready(exe) {
            self.meter
                .grant(READS_PER_CODE_LOAD, super::BYTES_PER_CODE_LOAD);
        }
        let id = self.code.frame(self.mem, self.o, self.table, exe, at)?;
        self.used_codes.push(exe);
        Ok((id, copy))
    }

    /// Push the frames of the coroutine at `coro` and of what it awaits,
    /// outermost first.
    fn coro_chain(&mut self, coro: u64, out: &mut Vec<FrameId>) -> Result<()> {
        let mut seen = std::mem::take(&mut self.scratch.coro_seen);
        let mut buf = std::mem::take(&mut self.scratch.coro);
        seen.clear();
        buf.clear();
        buf.resize(self.a.gen_size as usize, 0);
        let r = self.coro_chain_with(coro, out, &mut seen, &mut buf);
        self.scratch.coro_seen = seen;
        self.scratch.coro = buf;
        r
    }

    fn coro_chain_with(
        &mut self,
        mut obj: u64,
        out: &mut Vec<FrameId>,
        seen: &mut HashSet<u64>,
        buf: &mut [u8],
    ) -> Result<()> {
        let o = self.o;
        // The kind the object at hand must be, when its awaiter told.
        let mut expect: Option<AwaitKind> = None;
        while obj != 0 {
            if seen.len() >= MAX_CORO_DEPTH || !seen.insert(obj) || !frames::plausible(obj) {
                return Err(Error::corrupt("coroutine chain too long, cyclic or broken"));
            }
            self.meter.grant(READS_PER_CORO, BYTES_PER_CORO);
            self.mem.read(obj, buf)?;
            let short = || Error::corrupt("short coroutine object");
            let ty = buf.u64_at(o.ob_type).ok_or_else(short)?;
            let kind = match expect {
                Some(k) => k,
                None => self.kind(ty)?,
            };
            match kind {
                AwaitKind::Other => return Ok(()),
                AwaitKind::AsyncGenAwaitable => {
                    // `anext()`, `asend()`, `athrow()`, `aclose()`: no
                    // frame of its own; its async generator's comes next.
                    let agen = self.ptr(buf.u64_at(o.ob_type + 8).ok_or_else(short)?);
                    if agen == 0 || !frames::plausible(agen) {
                        return Ok(());
                    }
                    let agen_ty = self.mem.read_u64(agen.wrapping_add(o.ob_type))?;
                    if self.kind(agen_ty)? != AwaitKind::AsyncGen {
                        return Ok(());
                    }
                    expect = Some(AwaitKind::AsyncGen);
                    obj = agen;
                    continue;
                }
                AwaitKind::Coroutine | AwaitKind::Generator | AwaitKind::AsyncGen => {}
            }
            match self.gen_frame(obj, buf, out)? {
                Some(awaited) => {
                    obj = awaited;
                    expect = self.follows(ty, awaited)?;
                    if expect.is_none() {
                        return Ok(());
                    }
                }
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// Push the frame of the generator-like object read into `buf` (a
    /// coroutine, generator or async generator); what it awaits if it is
    /// suspended in an `await`/`yield from` (the object just below its
    /// stack pointer), else `None`.
    fn gen_frame(&mut self, obj: u64, buf: &[u8], out: &mut Vec<FrameId>) -> Result<Option<u64>> {
        let (o, a) = (self.o, self.a);
        let short = || Error::corrupt("short coroutine object");
        let state = buf.u8_at(a.gen_frame_state).ok_or_else(short)? as i8;
        if state == a.gen_states.cleared {
            return Ok(None);
        }
        let f = buf
            .get(a.gen_iframe as usize..(a.gen_iframe + o.frame_size) as usize)
            .ok_or_else(short)?;
        let exe = self.ptr(f.u64_at(o.frame_executable).ok_or_else(short)?);
        let owner = f.u8_at(o.frame_owner).ok_or_else(short)?;
        let instr_ptr = f.u64_at(o.frame_instr_ptr).ok_or_else(short)?;
        let sp = self.ptr(f.u64_at(a.frame_stackpointer).ok_or_else(short)?);
        if exe == 0 || o.owners.is_entry(owner) || !o.owners.is_code(owner) {
            // No code to show: the chain ends here.
            return Ok(None);
        }
        let tlbc_index = match o.frame_tlbc_index {
            Some(at) => f.i32_at(at).ok_or_else(short)?,
            None => 0,
        };
        let (id, copy) = self.frame(exe, instr_ptr, tlbc_index)?;
        if self.keep_places {
            self.scratch.places.push(FramePlace {
                index: out.len(),
                frame: obj.wrapping_add(a.gen_iframe),
                code: exe,
                instr_ptr,
                copy,
            });
        }
        out.push(id);
        if !a.gen_states.yield_from.contains(&state) {
            return Ok(None);
        }
        if owner != o.owners.generator {
            return Err(Error::corrupt(
                "a suspended coroutine does not own its frame",
            ));
        }
        if sp == 0 {
            return Ok(None);
        }
        let awaited = self.ptr(self.mem.read_u64(sp.wrapping_sub(a.await_below))?);
        Ok((awaited != 0 && frames::plausible(awaited)).then_some(awaited))
    }

    /// Whether the chain goes on from an object of type `ty` into the
    /// object it awaits, and as what: an object of the same type (the
    /// reference's rule: a coroutine awaiting a coroutine), a coroutine,
    /// or an async generator's awaitable. Anything else (a future, an
    /// iterator) ends it.
    fn follows(&mut self, ty: u64, awaited: u64) -> Result<Option<AwaitKind>> {
        let awaited_ty = self.mem.read_u64(awaited.wrapping_add(self.o.ob_type))?;
        let kind = self.kind(awaited_ty)?;
        let same = awaited_ty == ty && kind != AwaitKind::Other;
        Ok(match kind {
            AwaitKind::Coroutine | AwaitKind::AsyncGenAwaitable => Some(kind),
            _ if same => Some(kind),
            _ => None,
        })
    }

    /// The kind of awaitable type `ty` is (see [`Kinds`]).
    fn kind(&mut self, ty: u64) -> Result<AwaitKind> {
        self.kinds.of(self.meter, self.mem, self.o, ty)
    }

    /// Push the tasks awaiting a task: one object, or the members of a set.
    fn waiters(&mut self, t: &TaskFacts, out: &mut Vec<u64>) -> Result<()> {
        if t.awaited_by == 0 {
            return Ok(());
        }
        if !t.awaited_by_is_set {
            out.push(t.awaited_by);
            return Ok(());
        }
        let a = self.a;
        let set = t.awaited_by;
        if !frames::plausible(set) {
            return Err(Error::corrupt("awaited_by set at impossible address"));
        }
        let sb = &mut self.scratch.set;
        sb.clear();
        sb.resize(a.set_size as usize, 0);
        self.mem.read(set, sb)?;
        let short = || Error::corrupt("short set object");
        let used = sb.u64_at(a.set_used).ok_or_else(short)?;
        let mask = sb.u64_at(a.set_mask).ok_or_else(short)?;
        let table = sb.u64_at(a.set_table).ok_or_else(short)?;
        if mask >= MAX_SET_SLOTS || used > mask + 1 || !frames::plausible(table) {
            return Err(Error::corrupt(format!(
                "awaited_by set with impossible geometry (used {used}, mask {mask})"
            )));
        }
        let entries = &mut self.scratch.set_entries;
        entries.clear();
        entries.resize(((mask + 1) * 16) as usize, 0);
        self.meter.grant(1, entries.len() as u64);
        self.mem.read(table, entries)?;
        let mut found = 0u64;
        for e in entries.chunks_exact(16) {
            if found >= used {
                break;
            }
            let key = e.u64_at(0).unwrap_or(0) & self.o.tag_mask;
            let hash = e.u64_at(8).unwrap_or(0) as i64;
            // Empty slots are NULL; removed ones hold a dummy key, hash -1.
            if key != 0 && hash != -1 {
                out.push(key);
                found += 1;
            }
        }
        Ok(())
    }

    /// Read the task at `addr` as a node with its coroutine chain, its
    /// frames and parents pushed onto `graph`'s (the node not inserted).
    fn node(
        &mut self,
        graph: &mut Graph,
        addr: u64,
        key: ThreadKey,
        status: u32,
        interp_id: i64,
    ) -> Result<TaskNode> {
        self.visit()?;
        let t = self.read_task(addr)?;
        let f0 = graph.frames.len();
        let mut broken = false;
        self.scratch.places.clear();
        if t.is_task && t.coro != 0 {
            match self.coro_chain(t.coro, &mut graph.frames) {
                Ok(()) => {
                    let end = graph.frames.len();
                    graph.frames[f0..].reverse();
                    // Outermost first now: so are the places.
                    for mut p in self.scratch.places.drain(..) {
                        p.index = f0 + end - 1 - p.index;
                        graph.places.insert(p.index, p);
                    }
                }
                // One task's torn or odd chain costs its own stacks only.
                Err(e) if task_local(&e) => {
                    graph.frames.truncate(f0);
                    broken = true;
                }
                Err(e) => return Err(e),
            }
        }
        let p0 = graph.parents.len();
        self.waiters(&t, &mut graph.parents)?;
        Ok(TaskNode {
            addr,
            name: t.name,
            frames: f0..graph.frames.len(),
            parents: p0..graph.parents.len(),
            key,
            status,
            interp_id,
            broken,
        })
    }

    /// Add the task at `addr` and, recursively, every task awaiting it.
    fn with_waiters(
        &mut self,
        graph: &mut Graph,
        addr: u64,
        key: ThreadKey,
        status: u32,
        interp_id: i64,
    ) -> Result<()> {
        let mut todo = std::mem::take(&mut self.scratch.todo);
        todo.clear();
        todo.push(addr);
        let r = self.with_waiters_from(graph, &mut todo, key, status, interp_id);
        self.scratch.todo = todo;
        r
    }

    fn with_waiters_from(
        &mut self,
        graph: &mut Graph,
        todo: &mut Vec<u64>,
        key: ThreadKey,
        status: u32,
        interp_id: i64,
    ) -> Result<()> {
        while let Some(t) = todo.pop() {
            if graph.contains(t) {
                continue;
            }
            let node = self.node(graph, t, key, status, interp_id)?;
            todo.extend(graph.parents_of(&node).iter().rev().copied());
            graph.insert(node);
        }
        Ok(())
    }

    /// Every task of the list whose head node is at `head` (its `next`
    /// already read: `first`).
    #[allow(clippy::too_many_arguments)]
    fn list(
        &mut self,
        graph: &mut Graph,
        head: u64,
        first: u64,
        key: ThreadKey,
        status: u32,
        interp_id: i64,
    ) -> Result<()> {
        let mut seen = std::mem::take(&mut self.scratch.list_seen);
        seen.clear();
        let r = self.list_with(graph, &mut seen, head, first, key, status, interp_id);
        self.scratch.list_seen = seen;
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn list_with(
        &mut self,
        graph: &mut Graph,
        seen: &mut HashSet<u64>,
        head: u64,
        first: u64,
        key: ThreadKey,
        status: u32,
        interp_id: i64,
    ) -> Result<()> {
        let a = self.a;
        let mut node = first;
        while node != head {
            if node == 0 || !frames::plausible(node) || !seen.insert(node) {
                return Err(Error::corrupt("asyncio task list broken or cyclic"));
            }
            let task = node.wrapping_sub(a.task_node);
            let n = self.node(graph, task, key, status, interp_id)?;
            graph.insert(n);
            // The task's buffer still holds it: nothing read since reuses it.
            node = self
                .scratch
                .task
                .u64_at(a.task_node + a.llist_next)
                .ok_or_else(|| Error::corrupt("short task object"))?;
        }
        Ok(())
    }
}

impl<M: ProcessMemory> Unwinder<M> {
    /// Sample asyncio tasks instead of threads, from now on. `offsets`:
    /// the target's asyncio offsets if known; `locate` looks for them
    /// again (every 100 ms at most) while they are not.
    pub fn set_async(
        &mut self,
        mode: AsyncMode,
        offsets: Option<AsyncOffsets>,
        locate: Option<Locator>,
    ) {
        self.asyncio = Some(AsyncState {
            mode,
            offsets,
            locate,
            last_try: None,
            leaves: Vec::new(),
            tstate_buf: Vec::new(),
            chunks: Chunks::default(),
            pages: Pages::default(),
            tasks_seen: 0,
            type_flags: Believed::default(),
            kinds: Kinds::default(),
            broken: 0,
            names: Names::default(),
            scratch: Scratch::default(),
            graph: Graph::default(),
            tstates: Vec::new(),
            run_frames: Vec::new(),
            run_outside: Vec::new(),
            run_places: Vec::new(),
            run_parents: Vec::new(),
        });
    }

    /// Async-aware sampling: how many task stacks the last sample left out
    /// because a task on them could not be read whole.
    pub fn broken_task_stacks(&self) -> Option<usize> {
        self.asyncio.as_ref().map(|s| s.broken)
    }

    /// Async-aware sampling: per stack of the last sample, the address of
    /// its leaf task (the reference's dump names sections by it).
    pub fn task_leaves(&self) -> Option<&[u64]> {
        self.asyncio.as_ref().map(|s| &s.leaves[..])
    }

    pub(super) fn sample_tasks(&mut self, out: &mut Sample) -> Result<()> {
        let Some(mut st) = self.asyncio.take() else {
            return Ok(());
        };
        let r = self.sample_tasks_with(&mut st, out);
        if r.is_err() {
            st.leaves.clear();
            out.threads.clear();
        }
        self.asyncio = Some(st);
        r
    }

    /// The sample into `out.threads`, whose entries (and their frame
    /// lists) are reused.
    fn sample_tasks_with(&mut self, st: &mut AsyncState, out: &mut Sample) -> Result<()> {
        st.leaves.clear();
        self.name_keys.clear();
        if st.offsets.is_none() {
            let due = st.last_try.is_none_or(|t| t.elapsed() >= RETRY);
            if let (true, Some(locate)) = (due, st.locate.as_mut()) {
                st.last_try = Some(Instant::now());
                st.offsets = locate()?;
            }
        }
        let Some(a) = st.offsets.clone() else {
            out.threads.clear();
            return Err(Error::AsyncioNotLoaded);
        };
        self.used_codes.clear();
        self.code.new_sample();
        st.pages.clear();
        st.tasks_seen = 0;
        st.type_flags.new_sample();
        st.kinds.new_sample();
        st.broken = 0;
        let o = self.runtime.offsets.clone();
        let mut graph = std::mem::take(&mut st.graph);
        graph.clear();
        let r = self.sample_graph(st, &a, &o, &mut graph, out);
        st.graph = graph;
        r
    }

    fn sample_graph(
        &mut self,
        st: &mut AsyncState,
        a: &AsyncOffsets,
        o: &Offsets,
        graph: &mut Graph,
        out: &mut Sample,
    ) -> Result<()> {
        let mut interp_addr = self.mem.read_u64(
            self.runtime
                .address
                .wrapping_add(o.runtime_interpreters_head),
        )?;
        let mut n_interps = 0;
        while interp_addr != 0 {
            n_interps += 1;
            if n_interps > MAX_INTERPRETERS || !frames::plausible(interp_addr) {
                return Err(Error::corrupt("interpreter list too long or broken"));
            }
            let mut reqs = self.reqs.take();
            push_ranges(
                &mut reqs,
                &mut self.interp_buf,
                interp_addr,
                &self.interp_ranges,
            );
            let r = self.mem.read_many(&mut reqs);
            self.reqs.give(reqs);
            r?;
            let interp = InterpFacts::decode(o, &self.interp_buf, interp_addr, 0)
                .ok_or_else(|| Error::corrupt("short interpreter state"))?;
            self.note_generations(&interp);
            self.sample_interp_tasks(st, a, o, &interp, graph)?;
            interp_addr = interp.next;
        }
        self.emit(st, graph, out)
    }

    /// The tasks of one interpreter's threads (and, in mode `all`, of its
    /// own list) into `graph`.
    fn sample_interp_tasks(
        &mut self,
        st: &mut AsyncState,
        a: &AsyncOffsets,
        o: &Offsets,
        interp: &InterpFacts,
        graph: &mut Graph,
    ) -> Result<()> {
        let mut tstates = std::mem::take(&mut st.tstates);
        tstates.clear();
        let r = self.sample_threads_tasks(st, a, o, interp, graph, &mut tstates);
        st.tstates = tstates;
        r
    }

    fn sample_threads_tasks(
        &mut self,
        st: &mut AsyncState,
        a: &AsyncOffsets,
        o: &Offsets,
        interp: &InterpFacts,
        graph: &mut Graph,
        tstates: &mut Vec<u64>,
    ) -> Result<()> {
        self.list_threads(o, interp.threads_head, tstates)?;
        let tsize = a.thread_size.max(o.tstate_size) as usize;
        st.tstate_buf.resize(tsize, 0);
        for &tstate in tstates.iter() {
            self.thread_tasks(st, a, o, interp, graph, tstate)?;
        }
        if st.mode == AsyncMode::All {
            self.orphan_tasks(st, a, o, interp, graph)?;
        }
        Ok(())
    }

    /// The tasks of the thread whose state is at `tstate`: its running
    /// task and those waiting on it (mode `running`), or its whole list.
    fn thread_tasks(
        &mut self,
        st: &mut AsyncState,
        a: &AsyncOffsets,
        o: &Offsets,
        interp: &InterpFacts,
        graph: &mut Graph,
        tstate: u64,
    ) -> Result<()> {
        self.mem.read(tstate, &mut st.tstate_buf)?;
        let t = ThreadFacts::decode(o, &st.tstate_buf, self.runtime.none_addr)
            .ok_or_else(|| Error::corrupt("short thread state"))?;
        let key = ThreadKey {
            tid: t.native_id,
            ident: t.thread_id,
            interp: interp.addr,
        };
        let mut thread_status = status::UNKNOWN;
        if tstate == interp.threads_main {
            thread_status |= status::MAIN_THREAD;
        }
        let buf = &st.tstate_buf;
        let word = |off: u64| {
            buf.u64_at(off)
                .map(|v| v & o.tag_mask)
                .ok_or_else(|| Error::corrupt("short thread state"))
        };
        match st.mode {
            AsyncMode::Running => {
                let running_loop = word(a.thread_running_loop)?;
                let task = word(a.thread_running_task)?;
                if running_loop == 0 || task == 0 {
                    return Ok(());
                }
                self.running_task_frames(st, a, o, interp, tstate, &t, task)?;
                self.running_task(st, a, o, interp, graph, (task, key, thread_status))
            }
            AsyncMode::All => {
                let head = tstate.wrapping_add(a.thread_tasks_head);
                let first = word(a.thread_tasks_head + a.llist_next)?;
                task_reader!(self, st, o, a).list(graph, head, first, key, thread_status, interp.id)
            }
        }
    }

    /// Mode `running`: a thread's running task (its address, and the
    /// thread's key and status), with the frames read from the thread
    /// (`st.run_frames`), and the tasks waiting on it.
    fn running_task(
        &mut self,
        st: &mut AsyncState,
        a: &AsyncOffsets,
        o: &Offsets,
        interp: &InterpFacts,
        graph: &mut Graph,
        (task, key, thread_status): (u64, ThreadKey, u32),
    ) -> Result<()> {
        let mut r = task_reader!(self, st, o, a);
        let mut node = r.node(graph, task, key, thread_status, interp.id)?;
        let f0 = graph.frames.len();
        graph.frames.extend_from_slice(&st.run_frames);
        node.frames = f0..graph.frames.len();
        for p in &st.run_places {
            graph.places.insert(
                f0 + p.index,
                FramePlace {
                    index: f0 + p.index,
                    ..*p
                },
            );
        }
        node.broken = false;
        st.run_parents.clear();
        st.run_parents.extend_from_slice(graph.parents_of(&node));
        graph.insert(node);
        for &p in &st.run_parents {
            r.with_waiters(graph, p, key, thread_status, interp.id)?;
        }
        Ok(())
    }

    /// Mode `all`: tasks whose thread ended, in the interpreter's own list.
    fn orphan_tasks(
        &mut self,
        st: &mut AsyncState,
        a: &AsyncOffsets,
        o: &Offsets,
        interp: &InterpFacts,
        graph: &mut Graph,
    ) -> Result<()> {
        let head = interp.addr.wrapping_add(a.interp_tasks_head);
        let first = self.mem.read_u64(head.wrapping_add(a.llist_next))?;
        let key = ThreadKey {
            tid: 0,
            ident: 0,
            interp: interp.addr,
        };
        task_reader!(self, st, o, a).list(graph, head, first, key, status::UNKNOWN, interp.id)
    }

    /// The running task's frames, into `st.run_frames`: the thread's stack
    /// from its current frame down to the frame of the task's coroutine,
    /// told by its address (its code can recur above it). The walk sees the coroutine's frame
    /// linked straight to the thread's base frame, so it ends there and
    /// its end is checked as any thread's.
    #[allow(clippy::too_many_arguments)]
    fn running_task_frames(
        &mut self,
        st: &mut AsyncState,
        a: &AsyncOffsets,
        o: &Offsets,
        interp: &InterpFacts,
        tstate: u64,
        t: &ThreadFacts,
        task: u64,
    ) -> Result<()> {
        if !frames::plausible(task) {
            return Err(Error::corrupt("running task at impossible address"));
        }
        let coro = self.mem.read_u64(task.wrapping_add(a.task_coro))? & o.tag_mask;
        if !frames::plausible(coro) {
            return Err(Error::corrupt("running task without a coroutine"));
        }
        let coro = self.driven_generator(st, o, coro)?;
        // The coroutine's frame is embedded in it.
        let task_frame = coro.wrapping_add(a.gen_iframe);
        let first = if t.current_frame != 0 {
            t.datastack_chunk
        } else {
            0
        };
        let metered = &self.mem;
        let (at, to) = self.task_frame_cut(o, task_frame, t.base_frame)?;
        let relinked = Relinked {
            inner: metered,
            at,
            to,
        };
        let mem: &dyn ProcessMemory = &relinked;
        let granted = &self.chunk_grants;
        let grant_chunk = super::chunk_grant(metered, granted);
        st.chunks
            .load(mem, first, t.current_frame, o.frame_size, &[], &grant_chunk)?;
        let grant = |calls, bytes| metered.grant(calls, bytes);
        let grant_frame = super::frame_grant(metered, &self.frame_grants, o.frame_size);
        let grant_resume = super::resume_grant(metered, &self.resume_grants);
        st.run_frames.clear();
        st.run_outside.clear();
        st.run_places.clear();
        let places = self.places.is_some().then_some(&mut st.run_places);
        let mut walk = Walk {
            mem,
            grant: &grant,
            grant_frame: &grant_frame,
            grant_resume: &grant_resume,
            seen: &mut self.seen,
            offs: o,
            code: &mut self.code,
            table: &mut self.table,
            chunks: &st.chunks,
            markers: self.markers,
            native: self.opts.native,
            gc_frame: if self.opts.gc { interp.gc_frame } else { 0 },
            used_codes: &mut self.used_codes,
            tstate: (tstate, &st.tstate_buf),
            outside: &mut st.run_outside,
            counted: false,
            entry_previous: None,
            tail: None,
            vouched: false,
            none_addr: self.runtime.none_addr,
            handles_exception: false,
            places,
            entries: None,
            opcodes: self.opts.opcode_table(o),
        };
        walk.run(t.current_frame, t.base_frame, &mut st.run_frames)
    }

    /// Where the walk of a running task is cut (see [`Relinked`]): with a
    /// base frame (3.15), the task frame links to it; without (3.14), the
    /// entry frame the task frame was called from links to nothing. A
    /// task frame not called from an entry frame is not running at this
    /// instant (the task was read as running a moment before): the stack
    /// is torn, not the whole thread's.
    fn task_frame_cut(
        &self,
        o: &Offsets,
        task_frame: u64,
        base: Option<u64>,
    ) -> Result<(u64, u64)> {
        let link = task_frame.wrapping_add(o.frame_previous);
        if let Some(b) = base.filter(|&b| b != 0) {
            return Ok((link, b));
        }
        let caller = self.mem.read_u64(link)? & o.tag_mask;
        if caller == 0 || !frames::plausible(caller) {
            return Err(Torn::TaskFrameNotRunning { addr: task_frame }.into());
        }
        let mut owner = [0u8; 1];
        self.mem
            .read(caller.wrapping_add(o.frame_owner), &mut owner)?;
        if !o.owners.is_entry(owner[0]) {
            return Err(Torn::TaskFrameNotRunning { addr: task_frame }.into());
        }
        Ok((caller.wrapping_add(o.frame_previous), 0))
    }

    /// The generator whose frame runs for a task's coroutine object
    /// `coro`: itself, or the async generator an `anext()`/`asend()`/
    /// `athrow()` awaitable drives.
    fn driven_generator(&mut self, st: &mut AsyncState, o: &Offsets, coro: u64) -> Result<u64> {
        let ty = self.mem.read_u64(coro.wrapping_add(o.ob_type))?;
        if st.kinds.of(&self.mem, &self.mem, o, ty)? != AwaitKind::AsyncGenAwaitable {
            return Ok(coro);
        }
        let agen = self.mem.read_u64(coro.wrapping_add(o.ob_type + 8))? & o.tag_mask;
        if !frames::plausible(agen) {
            return Err(Error::corrupt(
                "running task's async generator awaitable is broken",
            ));
        }
        Ok(agen)
    }

    /// One stack per leaf task, leaf first, up through its parents, into
    /// `out.threads` (its entries reused). Fails when the stacks would hold
    /// more than [`MAX_SAMPLE_FRAMES`] frames in all (a corrupt graph: many
    /// leaves over one long chain).
    fn emit(&mut self, st: &mut AsyncState, graph: &mut Graph, out: &mut Sample) -> Result<()> {
        let mut total = 0usize;
        graph.find_leaves();
        if graph.leaves.is_empty() {
            out.threads.clear();
            return Ok(());
        }
        let task_file = self.table.intern_str("<task>");
        let mut n_out = 0;
        for i in 0..graph.leaves.len() {
            let leaf = graph.leaves[i];
            if n_out == out.threads.len() {
                out.threads.push(ThreadSample::default());
            }
            let ts = &mut out.threads[n_out];
            let places = self.places.as_mut().map(|p| {
                p.resize_with(p.len().max(n_out + 1), Vec::new);
                &mut p[n_out]
            });
            let whole = graph.stack(
                leaf,
                &mut self.table,
                task_file,
                self.markers.truncated,
                &mut ts.frames,
                places,
            );
            if !whole {
                st.broken += 1;
                continue;
            }
            total += ts.frames.len();
            if total > MAX_SAMPLE_FRAMES {
                return Err(Error::corrupt(format!(
                    "asyncio task stacks of more than {MAX_SAMPLE_FRAMES} frames in one sample"
                )));
            }
            let n = &graph.nodes[leaf];
            ts.tid = n.key.tid;
            ts.interpreter_id = n.interp_id;
            ts.status = n.status;
            ts.name = None;
            self.name_keys.push(n.key);
            st.leaves.push(n.addr);
            n_out += 1;
        }
        out.threads.truncate(n_out);
        Ok(())
    }
}

impl Graph {
    /// The tasks no other task awaits, in the order found, into
    /// `self.leaves`.
    fn find_leaves(&mut self) {
        self.awaited.clear();
        for n in &self.nodes {
            self.awaited
                .extend(self.parents[n.parents.clone()].iter().copied());
        }
        self.leaves.clear();
        for (i, n) in self.nodes.iter().enumerate() {
            if !self.awaited.contains(&n.addr) {
                self.leaves.push(i);
            }
        }
    }

    /// The stack of leaf task `leaf` into `frames`: its frames, its
    /// `<task>` frame (file `task_file`), its parent's frames and `<task>`
    /// frame, up to a task nobody awaits (or one not read). A task with
    /// several parents is named `"name (N parents)"` and continues to the
    /// lowest-addressed one. At most [`MAX_DEPTH`] frames, the last then
    /// `truncated`. False (the stack not whole) when a task on it is
    /// broken.
    fn stack(
        &mut self,
        leaf: usize,
        table: &mut FrameTable,
        task_file: StrId,
        truncated: FrameId,
        frames: &mut Vec<FrameId>,
        mut places: Option<&mut Vec<FramePlace>>,
    ) -> bool {
        frames.clear();
        if let Some(p) = places.as_deref_mut() {
            p.clear();
        }
        self.seen.clear();
        let mut cur = Some(leaf);
        while let Some(i) = cur {
            let n = &self.nodes[i];
            if !self.seen.insert(n.addr) || frames.len() > MAX_DEPTH {
                break;
            }
            if n.broken {
                frames.clear();
                return false;
            }
            if let Some(p) = places.as_deref_mut() {
                let at = frames.len();
                p.extend(n.frames.clone().filter_map(|i| {
                    let place = self.places.get(&i)?;
                    Some(FramePlace {
                        index: at + (i - n.frames.start),
                        ..*place
                    })
                }));
            }
            frames.extend_from_slice(&self.frames[n.frames.clone()]);
            let parents = &self.parents[n.parents.clone()];
            let (func, next) = match parents.len() {
                0 => (n.name, None),
                1 => (n.name, Some(parents[0])),
                k => {
                    let func = match self.multi.get(&(n.name, k)) {
                        Some(&id) => id,
                        None => {
                            let s = format!("{} ({k} parents)", table.str(n.name));
                            let id = table.intern_str(&s);
                            if self.multi.len() >= MAX_NAMES {
                                self.multi.clear();
                            }
                            self.multi.insert((n.name, k), id);
                            id
                        }
                    };
                    (func, parents.iter().copied().min())
                }
            };
            frames.push(table.intern(Frame {
                kind: FrameKind::Task,
                file: task_file,
                func,
                location: None,
                opcode: None,
            }));
            cur = next.and_then(|p| self.index.get(&p).copied());
        }
        if frames.len() > MAX_DEPTH {
            frames.truncate(MAX_DEPTH - 1);
            frames.push(truncated);
            if let Some(p) = places {
                p.retain(|p| p.index < MAX_DEPTH - 1);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Add a task to `g` as a walk would, its name interned in `t`.
    fn add(
        g: &mut Graph,
        t: &mut FrameTable,
        addr: u64,
        name: &str,
        parents: &[u64],
        frames: &[FrameId],
    ) {
        let f0 = g.frames.len();
        g.frames.extend_from_slice(frames);
        let p0 = g.parents.len();
        g.parents.extend_from_slice(parents);
        let name = t.intern_str(name);
        g.insert(TaskNode {
            addr,
            name,
            frames: f0..g.frames.len(),
            parents: p0..g.parents.len(),
            key: ThreadKey {
                tid: 1,
                ident: 1,
                interp: 1,
            },
            status: 0,
            interp_id: 0,
            broken: false,
        });
    }

    /// The stack of `leaf` as `file:func` text, leaf first.
    fn text(g: &mut Graph, leaf: usize, t: &mut FrameTable) -> Vec<String> {
        let trunc = t.synthetic(FrameKind::Truncated, "<truncated>");
        let task_file = t.intern_str("<task>");
        let mut frames = vec![trunc; 3]; // stale content, replaced
        g.stack(leaf, t, task_file, trunc, &mut frames, None);
        frames
            .iter()
            .map(|&f| {
                let f = t.frame(f);
                format!("{}:{}", t.str(f.file), t.str(f.func))
            })
            .collect()
    }

    #[test]
    fn stacks_run_from_each_leaf_to_its_root_through_the_lowest_parent() {
        let mut t = FrameTable::new();
        let mut g = Graph::default();
        // main (0x10) awaits a and b (gather); both await shared (2
        // parents); c is a leaf awaited by a.
        let code = t.intern_str("app.py");
        let f = t.intern_str("work");
        let work = t.intern(Frame {
            kind: FrameKind::Python,
            file: code,
            func: f,
            location: None,
            opcode: None,
        });
        // Twice: a graph cleared and filled again gives the same stacks.
        for _ in 0..2 {
            g.clear();
            add(&mut g, &mut t, 0x10, "Task-1", &[], &[]);
            add(&mut g, &mut t, 0x30, "a", &[0x10], &[]);
            add(&mut g, &mut t, 0x20, "b", &[0x10], &[]);
            add(&mut g, &mut t, 0x40, "shared", &[0x30, 0x20], &[work]);
            add(&mut g, &mut t, 0x50, "c", &[0x30], &[]);
            g.find_leaves();
            let leaves: Vec<u64> = g.leaves.iter().map(|&i| g.nodes[i].addr).collect();
            assert_eq!(leaves, [0x40, 0x50]);
            assert_eq!(
                text(&mut g, 3, &mut t),
                [
                    "app.py:work",
                    "<task>:shared (2 parents)",
                    "<task>:b",
                    "<task>:Task-1"
                ]
            );
            assert_eq!(
                text(&mut g, 4, &mut t),
                ["<task>:c", "<task>:a", "<task>:Task-1"]
            );
        }
    }

    #[test]
    fn a_cyclic_graph_ends_and_a_parent_not_read_ends_the_chain() {
        let mut t = FrameTable::new();
        let mut g = Graph::default();
        add(&mut g, &mut t, 0x10, "x", &[0x20], &[]);
        add(&mut g, &mut t, 0x20, "y", &[0x10], &[]);
        add(&mut g, &mut t, 0x30, "leaf", &[0x10], &[]);
        add(&mut g, &mut t, 0x60, "orphan", &[0x99], &[]);
        assert_eq!(
            text(&mut g, 2, &mut t),
            ["<task>:leaf", "<task>:x", "<task>:y"]
        );
        assert_eq!(text(&mut g, 3, &mut t), ["<task>:orphan"]);
    }

    #[test]
    fn a_broken_task_costs_only_the_stacks_through_it() {
        let mut t = FrameTable::new();
        let mut g = Graph::default();
        add(&mut g, &mut t, 0x10, "root", &[], &[]);
        add(&mut g, &mut t, 0x20, "bad", &[0x10], &[]);
        add(&mut g, &mut t, 0x30, "under-bad", &[0x20], &[]);
        add(&mut g, &mut t, 0x40, "fine", &[0x10], &[]);
        g.nodes[1].broken = true;
        g.find_leaves();
        assert_eq!(g.leaves, [2, 3]);
        let trunc = t.synthetic(FrameKind::Truncated, "<truncated>");
        let task_file = t.intern_str("<task>");
        let mut frames = vec![trunc];
        assert!(!g.stack(2, &mut t, task_file, trunc, &mut frames, None));
        assert!(frames.is_empty());
        assert_eq!(text(&mut g, 3, &mut t), ["<task>:fine", "<task>:root"]);
    }

    #[test]
    fn awaitables_are_told_apart_by_their_type_name() {
        assert_eq!(AwaitKind::from_name(b"coroutine"), AwaitKind::Coroutine);
        assert_eq!(
            AwaitKind::from_name(b"async_generator"),
            AwaitKind::AsyncGen
        );
        for n in [&b"async_generator_asend"[..], b"async_generator_athrow"] {
            assert_eq!(AwaitKind::from_name(n), AwaitKind::AsyncGenAwaitable);
        }
        for n in [&b"_asyncio.Future"[..], b"coroutine_wrapper", b""] {
            assert_eq!(AwaitKind::from_name(n), AwaitKind::Other);
        }
    }

    #[test]
    fn a_relinked_read_changes_only_the_link_word() {
        let at = 0x10_0000u64;
        let mem = Fake(vec![(at, vec![0xaa; 64])]);
        let r = Relinked {
            inner: &mem,
            at: at + 8,
            to: 0x1122_3344_5566_7788,
        };
        let mut whole = [0u8; 24];
        r.read(at, &mut whole).unwrap();
        assert_eq!(&whole[..8], &[0xaa; 8]);
        assert_eq!(u64::from_le_bytes(whole[8..16].try_into().unwrap()), r.to);
        assert_eq!(&whole[16..], &[0xaa; 8]);
        // A read of part of the word gets that part.
        let mut part = [0u8; 4];
        r.read(at + 12, &mut part).unwrap();
        assert_eq!(part, [0x44, 0x33, 0x22, 0x11]);
        let mut before = [0u8; 8];
        r.read(at, &mut before).unwrap();
        assert_eq!(before, [0xaa; 8]);
    }

    #[test]
    fn a_type_fact_is_believed_only_when_two_samples_agree() {
        let mut b = Believed::<u64>::default();
        b.new_sample();
        b.saw(0x10, 7);
        // Read again in the same sample (its page cache): proves nothing.
        b.saw(0x10, 7);
        assert_eq!(b.get(0x10), None);
        b.new_sample();
        // A torn read, then the true one, then the true one again.
        b.saw(0x10, 9);
        assert_eq!(b.get(0x10), None);
        b.new_sample();
        b.saw(0x10, 7);
        assert_eq!(b.get(0x10), None);
        b.new_sample();
        b.saw(0x10, 7);
        assert_eq!(b.get(0x10), Some(7));
        b.forget(0x10);
        assert_eq!(b.get(0x10), None);
    }

    #[test]
    fn a_task_found_twice_keeps_its_last_record() {
        let mut t = FrameTable::new();
        let mut g = Graph::default();
        add(&mut g, &mut t, 8, "a", &[16], &[]);
        add(&mut g, &mut t, 16, "b", &[], &[]);
        add(&mut g, &mut t, 8, "a2", &[], &[]);
        assert_eq!(g.nodes.len(), 2);
        assert_eq!(t.str(g.nodes[0].name), "a2");
        assert!(g.contains(16));
        // Only the last record's parents count: 16 is no longer awaited.
        g.find_leaves();
        assert_eq!(g.leaves, [0, 1]);
    }

    use crate::process::Regions as Fake;

    /// A compact str object (3.12 layout) of `kind` bytes a character.
    fn str_obj(s: &str, kind: u32) -> Vec<u8> {
        let ascii = kind == 1 && s.is_ascii();
        let mut b = vec![0u8; if ascii { 40 } else { 56 }];
        b[16..24].copy_from_slice(&(s.chars().count() as u64).to_le_bytes());
        let state = 1u32 << 5 | (ascii as u32) << 6 | kind << 2;
        b[32..36].copy_from_slice(&state.to_le_bytes());
        for c in s.chars().chain(['\0']) {
            b.extend_from_slice(&(c as u32).to_le_bytes()[..kind as usize]);
        }
        // Mapped memory goes on after it (at least a whole header).
        b.resize(b.len().max(64), 0);
        b
    }

    fn offsets_312() -> Offsets {
        let c = crate::offsets::carried::CARRIED[1];
        let v = crate::offsets::PyVersion::from_hex(0x030c_01f0);
        Offsets::from_carried(1, &c.table(v)).unwrap()
    }

    /// The name of the str at `at` in `mem`, through `names`.
    fn str_name(names: &mut Names, mem: &Fake, at: u64, t: &mut FrameTable) -> Result<String> {
        let o = offsets_312();
        let (mut buf, mut key) = (Vec::new(), Vec::new());
        let id = names.str(mem, &o, at, &mut buf, &mut key, t)?;
        Ok(t.str(id).to_owned())
    }

    #[test]
    fn a_str_name_is_taken_from_the_cache_only_for_the_same_characters() {
        let mut t = FrameTable::new();
        let mut names = Names::default();
        let at = 0x10_0000;
        let name = |s: &str, kind| Fake(vec![(at, str_obj(s, kind))]);
        assert_eq!(
            str_name(&mut names, &name("worker-1", 1), at, &mut t).unwrap(),
            "worker-1"
        );
        assert_eq!(names.strs.len(), 1);
        // The same object again: a hit, nothing new interned.
        let strings = t.strings().len();
        assert_eq!(
            str_name(&mut names, &name("worker-1", 1), at, &mut t).unwrap(),
            "worker-1"
        );
        assert_eq!((names.strs.len(), t.strings().len()), (1, strings));
        // Same address and length, other characters (a freed name's
        // successor, or a renamed task): not the cached name.
        assert_eq!(
            str_name(&mut names, &name("worker-2", 1), at, &mut t).unwrap(),
            "worker-2"
        );
        // Same bytes, another kind: "é" in UCS-1 vs "\u{e9}\0" read as UCS-2.
        assert_eq!(
            str_name(&mut names, &name("é", 1), at, &mut t).unwrap(),
            "é"
        );
        assert_eq!(
            str_name(&mut names, &name("é", 2), at, &mut t).unwrap(),
            "é"
        );
        assert_eq!(
            str_name(&mut names, &name("ā", 2), at, &mut t).unwrap(),
            "ā"
        );
        // Long names are cut as before, cached or not.
        let long = "n".repeat(300);
        for _ in 0..2 {
            let got = str_name(&mut names, &name(&long, 1), at, &mut t).unwrap();
            assert_eq!(got, long[..MAX_NAME_CHARS]);
        }
        // A broken str fails, whatever the cache holds.
        let mut torn = str_obj("worker-1", 1);
        torn[16..24].copy_from_slice(&7u64.to_le_bytes()); // length not at the NUL
        assert!(str_name(&mut names, &Fake(vec![(at, torn)]), at, &mut t).is_err());
        let mut bad = str_obj("worker-1", 1);
        bad[40] = 0xe9; // non-ASCII in an ASCII str
        assert!(str_name(&mut names, &Fake(vec![(at, bad)]), at, &mut t).is_err());
    }

    #[test]
    fn an_int_name_is_cached_by_its_value() {
        let mut t = FrameTable::new();
        let mut names = Names::default();
        let a = names.int(7, &mut t);
        assert_eq!(t.str(a), "Task-7");
        assert_eq!(names.int(7, &mut t), a);
        let b = names.int(8, &mut t);
        assert_eq!(t.str(b), "Task-8");
        assert_ne!(a, b);
    }

    #[test]
    fn the_name_caches_stay_bounded() {
        let mut t = FrameTable::new();
        let mut names = Names::default();
        for n in 0..3 * MAX_NAMES as u64 {
            let id = names.int(n, &mut t);
            assert_eq!(t.str(id), format!("Task-{n}"));
            assert!(names.ints.len() <= MAX_NAMES);
        }
        let at = 0x10_0000;
        for n in 0..MAX_NAMES + 10 {
            let s = format!("w{n}");
            let mem = Fake(vec![(at, str_obj(&s, 1))]);
            assert_eq!(str_name(&mut names, &mem, at, &mut t).unwrap(), s);
            assert!(names.strs.len() <= MAX_NAMES);
        }
        // After a reset, names are still right.
        let one = names.int(1, &mut t);
        assert_eq!(t.str(one), "Task-1");
        let mut g = Graph::default();
        for k in 2..MAX_NAMES + 10 {
            let ps: Vec<u64> = (1..=k as u64).map(|p| p << 8).collect();
            g.clear();
            add(&mut g, &mut t, 0x10, "m", &ps, &[]);
            let got = text(&mut g, 0, &mut t);
            assert_eq!(got, [format!("<task>:m ({k} parents)")]);
            assert!(g.multi.len() <= MAX_NAMES);
        }
    }
}
