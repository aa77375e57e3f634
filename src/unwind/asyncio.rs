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

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::time::{Duration, Instant};

use super::dict::{decode_int, int_read_size};
use super::frames::{self, Chunks, Walk};
use super::names::ThreadKey;
use super::objects::read_str;
use super::threads::{InterpFacts, MAX_INTERPRETERS, ThreadFacts};
use super::{READS_PER_CODE_LOAD, Unwinder, push_ranges};
use crate::error::{Error, Result};
use crate::model::{
    Frame, FrameId, FrameKind, FrameTable, MAX_DEPTH, Sample, ThreadSample, status,
};
use crate::offsets::Offsets;
use crate::offsets::asyncio::{AsyncOffsets, TPFLAGS_LONG_SUBCLASS, TPFLAGS_UNICODE_SUBCLASS};
use crate::process::pages::{PageCache, Pages};
use crate::process::{LocalBytes, Metered, ProcessMemory};

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
    /// Per type address, its flags and whether two reads agreed on them.
    type_flags: HashMap<u64, (u64, bool)>,
}

/// One task as read: where it was found and what it is.
struct TaskNode {
    addr: u64,
    name: String,
    /// Leaf first.
    frames: Vec<FrameId>,
    parents: Vec<u64>,
    /// The thread it was found on (0: the interpreter's list) and how its
    /// name is looked up.
    key: ThreadKey,
    status: u32,
    interp_id: i64,
}

/// The tasks of one sample, in the order found; a task found again
/// replaces its earlier record (as the reference's dictionary does).
#[derive(Default)]
struct Graph {
    nodes: Vec<TaskNode>,
    index: HashMap<u64, usize>,
}

impl Graph {
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
    name: String,
    coro: u64,
    is_task: bool,
    awaited_by: u64,
    awaited_by_is_set: bool,
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
    type_flags: &'a mut HashMap<u64, (u64, bool)>,
    tasks_seen: &'a mut usize,
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

    fn read_task(&mut self, addr: u64) -> Result<(Vec<u8>, TaskFacts)> {
        if !frames::plausible(addr) {
            return Err(Error::corrupt(format!(
                "asyncio task at impossible address {addr:#x}"
            )));
        }
        let a = self.a;
        let mut buf = vec![0u8; a.task_size as usize];
        self.mem.read(addr, &mut buf)?;
        let short = || Error::corrupt("short task object");
        let name_obj = self.ptr(buf.u64_at(a.task_name).ok_or_else(short)?);
        let facts = TaskFacts {
            name: self.task_name(name_obj)?,
            coro: self.ptr(buf.u64_at(a.task_coro).ok_or_else(short)?),
            is_task: buf.u8_at(a.task_is_task).ok_or_else(short)? != 0,
            awaited_by: self.ptr(buf.u64_at(a.task_awaited_by).ok_or_else(short)?),
            awaited_by_is_set: buf.u8_at(a.task_awaited_by_is_set).ok_or_else(short)? != 0,
        };
        Ok((buf, facts))
    }

    /// A task's name: an int `n` (tasks named by asyncio's counter) shown
    /// as `Task-n`, or a str.
    fn task_name(&mut self, obj: u64) -> Result<String> {
        if !frames::plausible(obj) {
            return Err(Error::corrupt(format!(
                "task name at impossible address {obj:#x}"
            )));
        }
        let oo = &self.o.objects;
        let mut head = vec![0u8; int_read_size(oo).max(self.o.ob_type as usize + 8)];
        self.mem.read(obj, &mut head)?;
        let ty = head
            .u64_at(self.o.ob_type)
            .ok_or_else(|| Error::corrupt("short task name"))?;
        let cached = self.type_flags.get(&ty).copied();
        let flags = match cached {
            Some((f, true)) => f,
            _ => {
                if !frames::plausible(ty) {
                    return Err(Error::corrupt("task name of impossible type"));
                }
                let f = self.mem.read_u64(ty.wrapping_add(oo.type_flags))?;
                let kinds = f & (TPFLAGS_LONG_SUBCLASS | TPFLAGS_UNICODE_SUBCLASS);
                if kinds == TPFLAGS_LONG_SUBCLASS || kinds == TPFLAGS_UNICODE_SUBCLASS {
                    // Kept only when it names one kind, and believed once
                    // two reads agree: a torn read must not stay cached.
                    let confirmed = cached.is_some_and(|(old, _)| old == f);
                    self.type_flags.insert(ty, (f, confirmed));
                }
                f
            }
        };
        let decoded = if flags & TPFLAGS_LONG_SUBCLASS != 0 {
            decode_int(oo, &head)
                .map(|n| format!("Task-{n}"))
                .ok_or_else(|| Error::corrupt("task name is an int out of range"))
        } else if flags & TPFLAGS_UNICODE_SUBCLASS == 0 {
            Err(Error::corrupt("task name is neither an int nor a str"))
        } else {
            read_str(self.mem, self.o, obj)
        };
        if decoded.is_err() {
            // Perhaps the type was not what was cached: look again next time.
            self.type_flags.remove(&ty);
        }
        let mut s = decoded?;
        if let Some((cut, _)) = s.char_indices().nth(MAX_NAME_CHARS) {
            s.truncate(cut);
        }
        Ok(s)
    }

    /// The frame of code `exe` at `instr_ptr`, loading the code object
    /// (with its reads granted) if needed.
    fn frame(&mut self, exe: u64, instr_ptr: u64) -> Result<FrameId> {
        if !self.code.is_ready(exe) {
            self.meter
                .grant(READS_PER_CODE_LOAD, super::BYTES_PER_CODE_LOAD);
        }
        let id = self
            .code
            .frame(self.mem, self.o, self.table, exe, instr_ptr)?;
        self.used_codes.push(exe);
        Ok(id)
    }

    /// Push the frames of the coroutine at `coro` and of what it awaits,
    /// outermost first.
    fn coro_chain(&mut self, mut coro: u64, out: &mut Vec<FrameId>) -> Result<()> {
        let (o, a) = (self.o, self.a);
        let mut seen: HashSet<u64> = HashSet::new();
        let mut buf = vec![0u8; a.gen_size as usize];
        while coro != 0 {
            if seen.len() >= MAX_CORO_DEPTH || !seen.insert(coro) || !frames::plausible(coro) {
                return Err(Error::corrupt("coroutine chain too long, cyclic or broken"));
            }
            self.meter.grant(READS_PER_CORO, BYTES_PER_CORO);
            self.mem.read(coro, &mut buf)?;
            let short = || Error::corrupt("short coroutine object");
            let state = buf.u8_at(a.gen_frame_state).ok_or_else(short)? as i8;
            if state == a.gen_states.cleared {
                return Ok(());
            }
            let gen_type = buf.u64_at(o.ob_type).ok_or_else(short)?;
            let f = buf
                .get(a.gen_iframe as usize..(a.gen_iframe + o.frame_size) as usize)
                .ok_or_else(short)?;
            let exe = self.ptr(f.u64_at(o.frame_executable).ok_or_else(short)?);
            let owner = f.u8_at(o.frame_owner).ok_or_else(short)?;
            let instr_ptr = f.u64_at(o.frame_instr_ptr).ok_or_else(short)?;
            let sp = self.ptr(f.u64_at(a.frame_stackpointer).ok_or_else(short)?);
            if exe == 0 || o.owners.is_entry(owner) || !o.owners.is_code(owner) {
                // No code to show: the chain ends here.
                return Ok(());
            }
            out.push(self.frame(exe, instr_ptr)?);
            if !a.gen_states.yield_from.contains(&state) {
                return Ok(());
            }
            if owner != o.owners.generator {
                return Err(Error::corrupt(
                    "a suspended coroutine does not own its frame",
                ));
            }
            if sp == 0 {
                return Ok(());
            }
            // What it awaits sits just below the stack pointer; it continues
            // the chain only if it is a coroutine of the same type (not a
            // future or another iterator).
            let awaited = self.ptr(self.mem.read_u64(sp.wrapping_sub(a.await_below))?);
            if awaited == 0 || !frames::plausible(awaited) {
                return Ok(());
            }
            if self.mem.read_u64(awaited.wrapping_add(o.ob_type))? != gen_type {
                return Ok(());
            }
            coro = awaited;
        }
        Ok(())
    }

    /// The tasks awaiting a task: one object, or the members of a set.
    fn waiters(&mut self, t: &TaskFacts) -> Result<Vec<u64>> {
        if t.awaited_by == 0 {
            return Ok(Vec::new());
        }
        if !t.awaited_by_is_set {
            return Ok(vec![t.awaited_by]);
        }
        let a = self.a;
        let set = t.awaited_by;
        if !frames::plausible(set) {
            return Err(Error::corrupt("awaited_by set at impossible address"));
        }
        let mut sb = vec![0u8; a.set_size as usize];
        self.mem.read(set, &mut sb)?;
        let short = || Error::corrupt("short set object");
        let used = sb.u64_at(a.set_used).ok_or_else(short)?;
        let mask = sb.u64_at(a.set_mask).ok_or_else(short)?;
        let table = sb.u64_at(a.set_table).ok_or_else(short)?;
        if mask >= MAX_SET_SLOTS || used > mask + 1 || !frames::plausible(table) {
            return Err(Error::corrupt(format!(
                "awaited_by set with impossible geometry (used {used}, mask {mask})"
            )));
        }
        let mut entries = vec![0u8; ((mask + 1) * 16) as usize];
        self.meter.grant(1, entries.len() as u64);
        self.mem.read(table, &mut entries)?;
        let mut out = Vec::with_capacity(used as usize);
        for e in entries.chunks_exact(16) {
            if out.len() as u64 >= used {
                break;
            }
            let key = self.ptr(e.u64_at(0).unwrap_or(0));
            let hash = e.u64_at(8).unwrap_or(0) as i64;
            // Empty slots are NULL; removed ones hold a dummy key, hash -1.
            if key != 0 && hash != -1 {
                out.push(key);
            }
        }
        Ok(out)
    }

    /// Read the task at `addr` as a node with its coroutine chain.
    fn node(
        &mut self,
        addr: u64,
        key: ThreadKey,
        status: u32,
        interp_id: i64,
    ) -> Result<(TaskNode, TaskFacts)> {
        self.visit()?;
        let (_, t) = self.read_task(addr)?;
        let mut frames = Vec::new();
        if t.is_task && t.coro != 0 {
            self.coro_chain(t.coro, &mut frames)?;
            frames.reverse();
        }
        let parents = self.waiters(&t)?;
        let node = TaskNode {
            addr,
            name: t.name.clone(),
            frames,
            parents,
            key,
            status,
            interp_id,
        };
        Ok((node, t))
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
        let mut todo = vec![addr];
        while let Some(t) = todo.pop() {
            if graph.contains(t) {
                continue;
            }
            let (node, _) = self.node(t, key, status, interp_id)?;
            todo.extend(node.parents.iter().rev().copied());
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
        let a = self.a;
        let mut node = first;
        let mut seen: HashSet<u64> = HashSet::new();
        while node != head {
            if node == 0 || !frames::plausible(node) || !seen.insert(node) {
                return Err(Error::corrupt("asyncio task list broken or cyclic"));
            }
            let task = node.wrapping_sub(a.task_node);
            self.visit()?;
            let (buf, t) = self.read_task(task)?;
            let mut frames = Vec::new();
            if t.is_task && t.coro != 0 {
                self.coro_chain(t.coro, &mut frames)?;
                frames.reverse();
            }
            let parents = self.waiters(&t)?;
            graph.insert(TaskNode {
                addr: task,
                name: t.name,
                frames,
                parents,
                key,
                status,
                interp_id,
            });
            node = buf
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
            type_flags: HashMap::new(),
        });
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
        }
        self.asyncio = Some(st);
        r
    }

    fn sample_tasks_with(&mut self, st: &mut AsyncState, out: &mut Sample) -> Result<()> {
        out.threads.clear();
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
            return Err(Error::AsyncioNotLoaded);
        };
        self.used_codes.clear();
        self.code.new_sample();
        st.pages.borrow_mut().clear();
        st.tasks_seen = 0;
        if st.type_flags.len() > 64 {
            st.type_flags.clear();
        }
        let o = self.runtime.offsets.clone();
        let mut graph = Graph::default();
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
            let mut reqs = Vec::with_capacity(self.interp_ranges.len());
            push_ranges(
                &mut reqs,
                &mut self.interp_buf,
                interp_addr,
                &self.interp_ranges,
            );
            self.mem.read_many(&mut reqs)?;
            drop(reqs);
            let interp = InterpFacts::decode(&o, &self.interp_buf, interp_addr, 0)
                .ok_or_else(|| Error::corrupt("short interpreter state"))?;
            if let Some(g) = interp.code_generation
                && self
                    .generations
                    .insert(interp_addr, g)
                    .is_some_and(|old| old != g)
            {
                self.code.clear();
            }
            self.sample_interp_tasks(st, &a, &o, &interp, &mut graph)?;
            interp_addr = interp.next;
        }
        self.emit(st, &graph, out)
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
        let mut tstates = Vec::new();
        self.list_threads(o, interp.threads_head, &mut tstates)?;
        let tsize = a.thread_size.max(o.tstate_size) as usize;
        st.tstate_buf.resize(tsize, 0);
        for &tstate in &tstates {
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
                        continue;
                    }
                    let frames = self.running_task_frames(st, a, o, interp, tstate, &t, task)?;
                    let pages = PageCache {
                        inner: &self.mem,
                        pages: &st.pages,
                    };
                    let mut r = Reader {
                        meter: &self.mem,
                        mem: &pages,
                        o,
                        a,
                        code: &mut self.code,
                        table: &mut self.table,
                        used_codes: &mut self.used_codes,
                        type_flags: &mut st.type_flags,
                        tasks_seen: &mut st.tasks_seen,
                    };
                    // The running task itself, its frames from the thread.
                    let (mut node, _) = r.node(task, key, thread_status, interp.id)?;
                    node.frames = frames;
                    let parents = node.parents.clone();
                    graph.insert(node);
                    for p in parents {
                        r.with_waiters(graph, p, key, thread_status, interp.id)?;
                    }
                }
                AsyncMode::All => {
                    let head = tstate.wrapping_add(a.thread_tasks_head);
                    let first = word(a.thread_tasks_head + a.llist_next)?;
                    let pages = PageCache {
                        inner: &self.mem,
                        pages: &st.pages,
                    };
                    let mut r = Reader {
                        meter: &self.mem,
                        mem: &pages,
                        o,
                        a,
                        code: &mut self.code,
                        table: &mut self.table,
                        used_codes: &mut self.used_codes,
                        type_flags: &mut st.type_flags,
                        tasks_seen: &mut st.tasks_seen,
                    };
                    r.list(graph, head, first, key, thread_status, interp.id)?;
                }
            }
        }
        if st.mode == AsyncMode::All {
            // Tasks whose thread ended: the interpreter's own list.
            let head = interp.addr.wrapping_add(a.interp_tasks_head);
            let first = self.mem.read_u64(head.wrapping_add(a.llist_next))?;
            let key = ThreadKey {
                tid: 0,
                ident: 0,
                interp: interp.addr,
            };
            let pages = PageCache {
                inner: &self.mem,
                pages: &st.pages,
            };
            let mut r = Reader {
                meter: &self.mem,
                mem: &pages,
                o,
                a,
                code: &mut self.code,
                table: &mut self.table,
                used_codes: &mut self.used_codes,
                type_flags: &mut st.type_flags,
                tasks_seen: &mut st.tasks_seen,
            };
            r.list(graph, head, first, key, status::UNKNOWN, interp.id)?;
        }
        Ok(())
    }

    /// The running task's frames: the thread's stack from its current
    /// frame down to the frame of the task's coroutine (all of it if that
    /// frame is not on the stack).
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
    ) -> Result<Vec<FrameId>> {
        if !frames::plausible(task) {
            return Err(Error::corrupt("running task at impossible address"));
        }
        let coro = self.mem.read_u64(task.wrapping_add(a.task_coro))? & o.tag_mask;
        if !frames::plausible(coro) {
            return Err(Error::corrupt("running task without a coroutine"));
        }
        // The coroutine's frame is embedded in it; its code is the frame's
        // first word.
        let code = self.mem.read_u64(coro.wrapping_add(a.gen_iframe))? & o.tag_mask;
        if code == 0 {
            return Err(Error::corrupt("running task's coroutine has no code"));
        }
        let first = if t.current_frame != 0 {
            t.datastack_chunk
        } else {
            0
        };
        let mem = &self.mem;
        let granted = &self.chunk_grants;
        let grant_chunk = super::chunk_grant(mem, granted);
        st.chunks
            .load(mem, first, t.current_frame, o.frame_size, &[], &grant_chunk)?;
        let grant = |calls, bytes| mem.grant(calls, bytes);
        let mut frames = Vec::new();
        let mut outside = Vec::new();
        let mut walk = Walk {
            mem,
            grant: &grant,
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
            outside: &mut outside,
            stop_at: code,
            entry_previous: None,
            tail: None,
            opcodes: self.opts.opcode_table(o),
        };
        walk.run(t.current_frame, t.base_frame, &mut frames)?;
        Ok(frames)
    }

    /// One stack per leaf task, leaf first, up through its parents. Fails
    /// when the stacks would hold more than [`MAX_SAMPLE_FRAMES`] frames
    /// in all (a corrupt graph: many leaves over one long chain).
    fn emit(&mut self, st: &mut AsyncState, graph: &Graph, out: &mut Sample) -> Result<()> {
        let mut total = 0usize;
        for leaf in graph.leaves() {
            let frames = graph.stack(leaf, &mut self.table, self.markers.truncated);
            total += frames.len();
            if total > MAX_SAMPLE_FRAMES {
                return Err(Error::corrupt(format!(
                    "asyncio task stacks of more than {MAX_SAMPLE_FRAMES} frames in one sample"
                )));
            }
            let n = &graph.nodes[leaf];
            out.threads.push(ThreadSample {
                tid: n.key.tid,
                interpreter_id: n.interp_id,
                status: n.status,
                frames,
                name: None,
            });
            self.name_keys.push(n.key);
            st.leaves.push(n.addr);
        }
        Ok(())
    }
}

impl Graph {
    /// The tasks no other task awaits, in the order found.
    fn leaves(&self) -> Vec<usize> {
        let parents: HashSet<u64> = self
            .nodes
            .iter()
            .flat_map(|n| n.parents.iter().copied())
            .collect();
        (0..self.nodes.len())
            .filter(|&i| !parents.contains(&self.nodes[i].addr))
            .collect()
    }

    /// The stack of leaf task `leaf`: its frames, its `<task>` frame, its
    /// parent's frames and `<task>` frame, up to a task nobody awaits (or
    /// one not read). A task with several parents is named
    /// `"name (N parents)"` and continues to the lowest-addressed one. At
    /// most [`MAX_DEPTH`] frames, the last then `truncated`.
    fn stack(&self, leaf: usize, table: &mut FrameTable, truncated: FrameId) -> Vec<FrameId> {
        let task_file = table.intern_str("<task>");
        let mut frames: Vec<FrameId> = Vec::new();
        let mut seen: HashSet<u64> = HashSet::new();
        let mut cur = Some(&self.nodes[leaf]);
        while let Some(n) = cur {
            if !seen.insert(n.addr) || frames.len() > MAX_DEPTH {
                break;
            }
            frames.extend_from_slice(&n.frames);
            let (name, next) = match n.parents.len() {
                0 => (n.name.clone(), None),
                1 => (n.name.clone(), Some(n.parents[0])),
                k => (
                    format!("{} ({k} parents)", n.name),
                    n.parents.iter().copied().min(),
                ),
            };
            let func = table.intern_str(&name);
            frames.push(table.intern(Frame {
                kind: FrameKind::Task,
                file: task_file,
                func,
                location: None,
                opcode: None,
            }));
            cur = next.and_then(|p| self.index.get(&p).map(|&i| &self.nodes[i]));
        }
        if frames.len() > MAX_DEPTH {
            frames.truncate(MAX_DEPTH - 1);
            frames.push(truncated);
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(addr: u64, name: &str, parents: &[u64]) -> TaskNode {
        TaskNode {
            addr,
            name: name.into(),
            frames: Vec::new(),
            parents: parents.to_vec(),
            key: ThreadKey {
                tid: 1,
                ident: 1,
                interp: 1,
            },
            status: 0,
            interp_id: 0,
        }
    }

    /// The stack of `leaf` as `file:func` text, leaf first.
    fn text(g: &Graph, leaf: usize, t: &mut FrameTable) -> Vec<String> {
        let trunc = t.synthetic(FrameKind::Native, "<truncated>");
        g.stack(leaf, t, trunc)
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
        g.insert(node(0x10, "Task-1", &[]));
        g.insert(node(0x30, "a", &[0x10]));
        g.insert(node(0x20, "b", &[0x10]));
        let mut shared = node(0x40, "shared", &[0x30, 0x20]);
        shared.frames = vec![work];
        g.insert(shared);
        g.insert(node(0x50, "c", &[0x30]));
        let leaves: Vec<u64> = g.leaves().iter().map(|&i| g.nodes[i].addr).collect();
        assert_eq!(leaves, [0x40, 0x50]);
        assert_eq!(
            text(&g, 3, &mut t),
            [
                "app.py:work",
                "<task>:shared (2 parents)",
                "<task>:b",
                "<task>:Task-1"
            ]
        );
        assert_eq!(
            text(&g, 4, &mut t),
            ["<task>:c", "<task>:a", "<task>:Task-1"]
        );
    }

    #[test]
    fn a_cyclic_graph_ends_and_a_parent_not_read_ends_the_chain() {
        let mut t = FrameTable::new();
        let mut g = Graph::default();
        g.insert(node(0x10, "x", &[0x20]));
        g.insert(node(0x20, "y", &[0x10]));
        g.insert(node(0x30, "leaf", &[0x10]));
        g.insert(node(0x60, "orphan", &[0x99]));
        assert_eq!(text(&g, 2, &mut t), ["<task>:leaf", "<task>:x", "<task>:y"]);
        assert_eq!(text(&g, 3, &mut t), ["<task>:orphan"]);
    }

    #[test]
    fn a_task_found_twice_keeps_its_last_record() {
        let mut g = Graph::default();
        g.insert(node(8, "a", &[]));
        g.insert(node(16, "b", &[8]));
        g.insert(node(8, "a2", &[]));
        assert_eq!(g.nodes.len(), 2);
        assert_eq!(g.nodes[0].name, "a2");
        assert!(g.contains(16));
    }
}
