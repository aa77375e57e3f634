//! The stack unwinder: from the runtime's address to the Python stack of
//! each thread, decoded in local memory, code objects cached.
//!
//! One call of [`Unwinder::sample`] reads, per interpreter, a prefix of the
//! interpreter state; per thread, the thread state and its data-stack
//! chunks; and only on a cache miss, code objects and their strings. A
//! frame that cannot be read costs that frame; a chain that turns out torn
//! (the target moved while we read) costs the sample, as an error the
//! sampler counts.

pub mod code;
pub mod frames;
pub mod linetable;
pub mod objects;
pub mod threads;

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::model::{FrameTable, Sample, ThreadSample};
use crate::offsets::Offsets;
use crate::process::{ProcessMemory, ReadReq};
use crate::runtime::Runtime;
use code::CodeCache;
use frames::{Chunks, Markers, Walk};
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
}

impl Default for UnwindOptions {
    fn default() -> Self {
        UnwindOptions {
            all_threads: false,
            native: false,
            gc: true,
            cpu_status: false,
        }
    }
}

pub struct Unwinder<M: ProcessMemory> {
    mem: M,
    pid: i32,
    runtime: Runtime,
    pub opts: UnwindOptions,
    table: FrameTable,
    code: CodeCache,
    markers: Markers,
    chunks: Chunks,
    interp_buf: Vec<u8>,
    tstate_buf: Vec<u8>,
    used_codes: Vec<u64>,
    generations: HashMap<u64, u64>,
    /// The parts of `PyInterpreterState` a sample needs, as merged
    /// (offset, length) ranges: a few dozen bytes instead of the 8 KiB prefix.
    interp_ranges: Vec<(u64, usize)>,
    /// Addresses the last sample found: the first interpreter and the
    /// thread it sampled. The next sample reads them speculatively in the
    /// same system call as the interpreter-list head (see `sample_once`).
    last_interp: u64,
    last_tstate: u64,
    /// Per thread state: frames outside its data stack seen last sample.
    prefetch: HashMap<u64, Vec<u64>>,
    outside: Vec<u64>,
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
            addr: base + off as u64,
            buf: piece,
        });
        buf = rest;
        at = off + len;
    }
}

impl<M: ProcessMemory> Unwinder<M> {
    pub fn new(mem: M, pid: i32, runtime: Runtime, opts: UnwindOptions) -> Self {
        let mut table = FrameTable::new();
        let markers = Markers::new(&mut table);
        let o = &runtime.offsets;
        let mut fields = vec![
            (o.interp_id, 8),
            (o.interp_next, 8),
            (o.interp_threads_head, 8),
            (o.interp_threads_main, 8),
            (o.interp_gil_locked, 4),
            (o.interp_gil_holder, 8),
            (o.interp_gc_collecting, 4),
        ];
        fields.extend(o.interp_code_object_generation.map(|g| (g, 8)));
        fields.extend(o.interp_gc_frame.map(|f| (f, 8)));
        let interp_ranges = merge_ranges(fields);
        let interp_buf = vec![0u8; o.interp_read_size as usize];
        let tstate_buf = vec![0u8; o.tstate_size as usize];
        Unwinder {
            mem,
            pid,
            runtime,
            opts,
            table,
            code: CodeCache::new(),
            markers,
            chunks: Chunks::default(),
            interp_buf,
            tstate_buf,
            used_codes: Vec::new(),
            generations: HashMap::new(),
            interp_ranges,
            last_interp: 0,
            last_tstate: 0,
            prefetch: HashMap::new(),
            outside: Vec::new(),
        }
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

    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// Code-object cache (hits, misses, entries), for statistics.
    pub fn cache_stats(&self) -> (u64, u64, usize) {
        (self.code.hits, self.code.misses, self.code.len())
    }

    /// Take one sample of the selected threads into `out.threads`
    /// (cleared first; its buffers are reused).
    pub fn sample(&mut self, out: &mut Sample) -> Result<()> {
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
        let o = self.runtime.offsets.clone();
        let head_addr = self.runtime.address + o.runtime_interpreters_head;

        // One system call for what the last sample found: the list head,
        // the first interpreter's fields and (main-thread mode) its main
        // thread state. Each guess is used only if the freshly read pointer
        // to it is unchanged; otherwise that part is read again.
        let mut head = [0u8; 8];
        let guess_interp = self.last_interp;
        let guess_tstate = if self.opts.all_threads {
            0
        } else {
            self.last_tstate
        };
        let speculated = {
            let mut reqs = vec![ReadReq {
                addr: head_addr,
                buf: &mut head,
            }];
            if guess_interp != 0 {
                push_ranges(
                    &mut reqs,
                    &mut self.interp_buf,
                    guess_interp,
                    &self.interp_ranges,
                );
            }
            if guess_tstate != 0 {
                reqs.push(ReadReq {
                    addr: guess_tstate,
                    buf: &mut self.tstate_buf,
                });
            }
            let n = reqs.len();
            match self.mem.read_many(&mut reqs) {
                Ok(()) => n > 1,
                Err(e) if e.is_fatal() => return Err(e),
                Err(_) => {
                    drop(reqs);
                    self.mem.read(head_addr, &mut head)?;
                    false
                }
            }
        };
        let mut interp_addr = u64::from_le_bytes(head);
        let mut first = true;
        let mut n_interps = 0;
        while interp_addr != 0 && n_interps < MAX_INTERPRETERS {
            n_interps += 1;
            if !(first && speculated && interp_addr == guess_interp) {
                let mut reqs = Vec::with_capacity(self.interp_ranges.len());
                push_ranges(
                    &mut reqs,
                    &mut self.interp_buf,
                    interp_addr,
                    &self.interp_ranges,
                );
                self.mem.read_many(&mut reqs)?;
            }
            let interp = InterpFacts::decode(&o, &self.interp_buf)
                .ok_or_else(|| Error::corrupt("short interpreter state"))?;
            if let Some(g) = interp.code_generation
                && self
                    .generations
                    .insert(interp_addr, g)
                    .is_some_and(|old| old != g)
            {
                self.code.clear();
            }
            if self.opts.all_threads {
                self.walk_interp_threads(&o, &interp, interp_addr, out, &mut n_threads)?;
            } else if interp.id == 0 {
                // The main interpreter (id 0) is the oldest, so it is last
                // in the list when subinterpreters exist.
                let main = if interp.threads_main != 0 {
                    interp.threads_main
                } else {
                    // No thread runs __main__ (embedding, shutdown): the
                    // oldest thread, last in the list, is the main one.
                    let mut tstates: Vec<u64> = Vec::new();
                    self.list_threads(&o, interp.threads_head, &mut tstates)?;
                    tstates.last().copied().unwrap_or(0)
                };
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
                self.last_tstate = if first { main } else { 0 };
                if first {
                    self.last_interp = interp_addr;
                }
                break;
            }
            if first {
                self.last_interp = interp_addr;
                self.last_tstate = 0;
            }
            first = false;
            interp_addr = interp.next;
        }
        out.threads.truncate(n_threads);
        Ok(())
    }

    fn list_threads(&self, o: &Offsets, head: u64, into: &mut Vec<u64>) -> Result<()> {
        let mut t = head;
        while t != 0 {
            if into.len() >= MAX_THREADS || into.contains(&t) {
                return Err(Error::corrupt("thread list too long or cyclic"));
            }
            into.push(t);
            t = self.mem.read_u64(t + o.tstate_next)?;
        }
        Ok(())
    }

    fn walk_interp_threads(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        _interp_addr: u64,
        out: &mut Sample,
        n: &mut usize,
    ) -> Result<()> {
        let mut t = interp.threads_head;
        let mut count = 0;
        while t != 0 {
            count += 1;
            if count > MAX_THREADS {
                return Err(Error::corrupt("thread list too long or cyclic"));
            }
            t = self.sample_thread(o, interp, t, false, out, n)?;
        }
        Ok(())
    }

    /// Sample one thread; returns the next thread state in its list.
    fn sample_thread(
        &mut self,
        o: &Offsets,
        interp: &InterpFacts,
        tstate: u64,
        prefetched: bool,
        out: &mut Sample,
        n: &mut usize,
    ) -> Result<u64> {
        if !prefetched {
            self.mem.read(tstate, &mut self.tstate_buf)?;
        }
        let t = ThreadFacts::decode(o, &self.tstate_buf, self.runtime.none_addr)
            .ok_or_else(|| Error::corrupt("short thread state"))?;
        let os_state = if self.opts.cpu_status {
            self.mem.os_thread_state(t.native_id)
        } else {
            None
        };
        let status = t.status(tstate == interp.threads_main, os_state);

        if *n == out.threads.len() {
            out.threads.push(ThreadSample::default());
        }
        let slot = &mut out.threads[*n];
        slot.tid = t.native_id;
        slot.interpreter_id = interp.id;
        slot.status = status;
        slot.frames.clear();

        if self.prefetch.len() > 4 * MAX_THREADS {
            self.prefetch.clear();
        }
        let prefetch = self.prefetch.entry(tstate).or_default();
        if t.current_frame != 0 {
            self.chunks.load(
                &self.mem,
                t.datastack_chunk,
                t.current_frame,
                o.frame_size,
                prefetch,
            )?;
        }
        self.outside.clear();
        let gc_frame = if self.opts.gc { interp.gc_frame } else { 0 };
        let mut walk = Walk {
            mem: &self.mem,
            offs: o,
            code: &mut self.code,
            table: &mut self.table,
            chunks: &self.chunks,
            markers: self.markers,
            native: self.opts.native,
            gc_frame,
            used_codes: &mut self.used_codes,
            tstate: (tstate, &self.tstate_buf),
            outside: &mut self.outside,
        };
        let walked = walk.run(t.current_frame, t.base_frame, &mut slot.frames);
        // Next time, fetch the frames that lay outside the data stack in
        // the same system call as the chunk.
        if let Some(p) = self.prefetch.get_mut(&tstate) {
            std::mem::swap(p, &mut self.outside);
        }
        walked?;
        // Versions without gc.frame (or a collection whose frame is not
        // set): the collection runs on the thread holding the GIL.
        if self.opts.gc
            && interp.gc_collecting
            && gc_frame == 0
            && tstate == interp.gil_holder
            && slot.frames.first() != Some(&self.markers.gc)
        {
            slot.frames.insert(0, self.markers.gc);
        }
        *n += 1;
        Ok(t.next)
    }

    /// 3.13 only: re-read the fingerprint of every code object the last
    /// sample used; evict the ones that changed. True if any did.
    fn revalidate_codes(&mut self) -> Result<bool> {
        let o = &self.runtime.offsets;
        let (start, len) = code::fingerprint_span(o);
        self.used_codes.sort_unstable();
        self.used_codes.dedup();
        let mut bufs = vec![0u8; len * self.used_codes.len()];
        let mut reqs: Vec<ReadReq<'_>> = self
            .used_codes
            .iter()
            .zip(bufs.chunks_mut(len))
            .map(|(&c, buf)| ReadReq {
                addr: c + start,
                buf,
            })
            .collect();
        let read_ok = self.mem.read_many(&mut reqs).is_ok();
        drop(reqs);
        let mut changed = false;
        for (i, &c) in self.used_codes.iter().enumerate() {
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

    /// The process id this unwinder reads.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}
