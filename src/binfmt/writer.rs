//! Streaming writer: samples are encoded per thread and written in blocks;
//! the final header is written last, by seeking back to the start.
//!
//! Memory stays bounded by the number of threads and distinct frames: each
//! thread keeps its previous stack and at most [`REPEAT_BUFFER`] bytes of
//! pending REPEAT entries; encoded records gather in a staging buffer.
//!
//! A recording survives the writer's death (`kill -9`, a power cut): a
//! provisional header goes first, and at a *checkpoint* (at least every
//! [`CHECKPOINT_EVERY`], sooner at the start, and whenever [`FLUSH_SIZE`]
//! bytes of records are staged) every sample so far reaches the file.
//! The records go into a zstd frame that a checkpoint flushes (a decoder
//! gets everything up to there) and keeps open, so it keeps its window;
//! when the records since the last end of a frame brought new strings or
//! frames, the checkpoint (the first at once, later ones at most once a
//! [`CHECKPOINT_EVERY`]) ends the frame instead and writes after it a
//! zstd skippable frame ([`super::BLOCK_MAGIC`], a block table) with the
//! strings, frames and thread names first used in it and the sample and
//! thread totals so far. Any zstd reader (the reference's too) reads the
//! frames one after another as one stream and skips the skippable ones,
//! so a complete file is the reference's format; a file cut anywhere is
//! read by [`super::reader`] up to the last flush before the cut. A
//! thread renamed since the last block table reads without its new name.
//!
//! `--compression none` writes the same block tables as records of their
//! own ([`super::ENC_BLOCK`]) among the sample records, on the same
//! schedule, and a cut file is read the same way. The reference's format
//! has no such record, so [`BinaryWriter::finish`], once the tables, the
//! footer and the header are written, overwrites each with REPEAT records
//! of no sample ([`super::filler_records`]): the finished file is one the
//! reference reads, as it reads a zstd one. (Killed between the header and
//! the last filler, the file is still read by tachyon, which skips block
//! records.)

use foldhash::{HashMap, HashMapExt};
use std::io::{Seek, SeekFrom, Write};
use zstd::stream::raw::{self, Operation};
use zstd::stream::zio;

use super::{
    Compression, DEFAULT_ZSTD_LEVEL, ENC_FULL, ENC_POP_PUSH, ENC_REPEAT, ENC_SUFFIX, EncodingStats,
    FOOTER_SIZE, FORMAT_VERSION, HEADER_SIZE, MAGIC, MAX_STACK_DEPTH, OPCODE_NONE, StoredStats,
    TRAILER_MAGIC, TRAILER_SIZE, TRAILER_VERSION, ZSTD_HASH_LOG, ZSTD_WINDOW_LOG, encode_config,
    put_varint, zigzag,
};
use crate::binfmt::CaptureConfig;
use crate::error::{Error, Result};
use crate::model::Mode;
use crate::model::{FrameId, FrameKind, FrameTable, Sample, StrId};

/// Pending REPEAT entries of one thread are written out at this size.
pub const REPEAT_BUFFER: usize = 16 * 1024;
/// Encoded records are handed to the output (and compressor) at this size.
pub const FLUSH_SIZE: usize = 512 * 1024;
/// A thread not sampled for this long (in the samples' own time) gives
/// back its previous stack and repeat buffer: a program that starts
/// threads all the time must not grow the writer for ever. Should the
/// thread come back, its next stack is written whole.
pub const IDLE_THREAD_US: u64 = 10_000_000;
/// Threads looked at for [`IDLE_THREAD_US`] per sample written.
const IDLE_CHECKS: usize = 4;
/// A block is written at least this often while samples come: what a
/// killed recording loses.
pub const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// The first block comes sooner, and the wait doubles up to
/// [`CHECKPOINT_EVERY`]: a recording killed in its first second keeps
/// most of it too.
pub const FIRST_CHECKPOINT: std::time::Duration = std::time::Duration::from_millis(125);

/// What goes into the header besides the counts.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterOptions {
    pub compression: Compression,
    /// zstd level (the reference uses 5).
    pub level: i32,
    pub interval_us: u64,
    /// Timestamps are stored as deltas from this one.
    pub start_time_us: u64,
    /// Stored in the header; the reference stores its own version. tachyon
    /// stores the profiled interpreter's, or zeros when unknown.
    pub python_version: (u8, u8, u8),
    pub mode: Option<Mode>,
    pub capture: Option<CaptureConfig>,
    /// After its first, a zstd frame ends (for new strings or frames) at
    /// most this often ([`CHECKPOINT_EVERY`]; zero: at every checkpoint).
    pub frame_every: std::time::Duration,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            compression: Compression::Zstd,
            level: DEFAULT_ZSTD_LEVEL,
            interval_us: 1000,
            start_time_us: 0,
            python_version: (0, 0, 0),
            mode: None,
            capture: None,
            frame_every: CHECKPOINT_EVERY,
        }
    }
}

/// A binary frame: the seven fields frames are deduplicated on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct BinFrame {
    file: u32,
    func: u32,
    line: i32,
    end_line: i32,
    col: i32,
    end_col: i32,
    opcode: u8,
}

struct ThreadState {
    tid: u64,
    iid: u32,
    prev: Vec<u32>,
    prev_ts: u64,
    /// Encoded `(delta, status)` entries of a REPEAT not yet written.
    repeat: Vec<u8>,
    repeat_n: u64,
    /// Its memory was given back (idle): the next stack is written whole,
    /// whatever it is, since `prev` no longer holds what the reader holds.
    released: bool,
    /// The thread's latest name (and its id in the caller's table).
    name_id: Option<StrId>,
    name: Option<Box<str>>,
    /// The name changed since the last block.
    name_dirty: bool,
}

enum Sink<W: Write> {
    Raw(W),
    /// The open zstd frame (see the module documentation).
    Zstd(ZstdWriter<W>),
    /// Finished, or poisoned by an error.
    Done,
}

/// A zstd frame being written to `W`.
type ZstdWriter<W> = zio::Writer<W, raw::Encoder<'static>>;

/// tachyon's zstd settings besides the level.
fn zstd_parameters() -> [raw::CParameter; 4] {
    [
        raw::CParameter::WindowLog(ZSTD_WINDOW_LOG),
        raw::CParameter::HashLog(ZSTD_HASH_LOG),
        raw::CParameter::ChainLog(ZSTD_HASH_LOG),
        // A torn frame is told from a whole one.
        raw::CParameter::ChecksumFlag(true),
    ]
}

/// A zstd encoder of tachyon's settings on `out`, starting a frame.
fn encoder<W: Write>(out: W, level: i32) -> std::io::Result<ZstdWriter<W>> {
    let mut enc = raw::Encoder::new(level)?;
    for p in zstd_parameters() {
        enc.set_parameter(p)?;
    }
    Ok(zio::Writer::new(out, enc))
}

/// End the frame `z`: the writer, and the encoder ready for the next
/// frame with its context (its tables: see `ZSTD_HASH_LOG`) kept: a
/// context made afresh for every frame cost its pages' first touches
/// again, about 650 page faults a frame.
fn end_zstd_frame<W: Write>(mut z: ZstdWriter<W>) -> std::io::Result<(W, raw::Encoder<'static>)> {
    z.finish()?;
    let (out, mut enc) = z.into_inner();
    enc.reinit()?;
    Ok((out, enc))
}

/// How many elements `a` and `b` share at their ends (stacks are leaf
/// first, so their root sides): in two slice comparisons when all but the
/// first may be shared (a steady stack whose leaf moved), else counted.
fn shared_tail<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    if n > 0 && a[1..] == b[1..] {
        return n - usize::from(a[0] != b[0]);
    }
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// Writes one binary profile; see the module documentation.
pub struct BinaryWriter<W: Write + Seek> {
    sink: Sink<W>,
    name: String,
    opts: WriterOptions,
    staging: Vec<u8>,
    threads: Vec<ThreadState>,
    thread_index: HashMap<(u64, u32), usize>,
    /// `FrameId` → binary frame index + 1 (0: not seen yet).
    frame_map: Vec<u32>,
    frames: Vec<BinFrame>,
    frame_index: HashMap<BinFrame, u32>,
    /// `StrId` → binary string index + 1.
    str_map: Vec<u32>,
    strings: Vec<Box<str>>,
    string_index: HashMap<Box<str>, u32>,
    sample_count: u64,
    stats: Option<StoredStats>,
    enc: EncodingStats,
    /// The last stack written, in the file's frame indices, and as the
    /// sample gave it: the same stack again (a steady thread, the usual
    /// case) is not mapped frame by frame again.
    stack: Vec<u32>,
    stack_ids: Vec<FrameId>,
    /// The next thread to look at for idleness.
    idle_cursor: usize,
    /// The first write error; later calls do nothing and `finish` reports it.
    failed: Option<std::io::Error>,
    /// Strings and frames already in a block's table.
    strings_in_blocks: usize,
    frames_in_blocks: usize,
    /// Block tables written (after a zstd frame, or among raw records).
    blocks: u64,
    /// Uncompressed: the bytes written so far (the next record's offset),
    /// and the (offset, length) of each block record, made fillers at the
    /// end.
    raw_pos: u64,
    raw_blocks: Vec<(u64, usize)>,
    /// Records went into the open zstd frame.
    frame_used: bool,
    last_frame_end: std::time::Instant,
    last_checkpoint: std::time::Instant,
    /// The wait from one block to the next (see [`FIRST_CHECKPOINT`]).
    checkpoint_wait: std::time::Duration,
}

impl<W: Write + Seek> BinaryWriter<W> {
    /// Start a profile in `out` at its current position 0. `name` names
    /// the output in error messages.
    pub fn new(mut out: W, name: String, opts: WriterOptions) -> Result<Self> {
        let io = |e| Error::io(format!("cannot write {name}"), e);
        // Provisional: no tables yet (offset 0), no counts.
        out.write_all(&header(&opts, 0, 0, 0, 0)).map_err(io)?;
        out.flush().map_err(io)?;
        let sink = match opts.compression {
            Compression::None => Sink::Raw(out),
            Compression::Zstd => Sink::Zstd(encoder(out, opts.level).map_err(io)?),
        };
        Ok(BinaryWriter {
            sink,
            name,
            opts,
            staging: Vec::with_capacity(FLUSH_SIZE + 4096),
            threads: Vec::new(),
            thread_index: HashMap::new(),
            frame_map: Vec::new(),
            frames: Vec::new(),
            frame_index: HashMap::new(),
            str_map: Vec::new(),
            strings: Vec::new(),
            string_index: HashMap::new(),
            sample_count: 0,
            stats: None,
            enc: EncodingStats::default(),
            stack: Vec::new(),
            stack_ids: Vec::new(),
            idle_cursor: 0,
            failed: None,
            strings_in_blocks: 0,
            frames_in_blocks: 0,
            blocks: 0,
            raw_pos: HEADER_SIZE,
            raw_blocks: Vec::new(),
            frame_used: false,
            last_frame_end: std::time::Instant::now(),
            last_checkpoint: std::time::Instant::now(),
            checkpoint_wait: FIRST_CHECKPOINT,
        })
    }

    /// The header's interval (it is written last, so it can be set late).
    pub fn set_interval(&mut self, interval_us: u64) {
        self.opts.interval_us = interval_us;
    }

    pub fn set_mode(&mut self, mode: Option<Mode>) {
        self.opts.mode = mode;
    }

    /// Statistics for the trailer; without them no trailer is written.
    pub fn set_stats(&mut self, stats: StoredStats) {
        self.stats = Some(stats);
    }

    /// Per-thread stacks written so far.
    pub fn sample_count(&self) -> u64 {
        self.sample_count
    }

    pub fn encoding_stats(&self) -> EncodingStats {
        self.enc
    }

    /// Write every thread of `sample`. Frame ids resolve in `table`, which
    /// must be the same (growing) table for the whole profile. A write
    /// error is kept and returned by [`finish`](Self::finish).
    pub fn write_sample(&mut self, sample: &Sample, table: &FrameTable) {
        if self.failed.is_some() {
            return;
        }
        for t in &sample.threads {
            let mut stack = std::mem::take(&mut self.stack);
            // The reference keeps the innermost MAX_STACK_DEPTH frames.
            let ids = &t.frames[..t.frames.len().min(MAX_STACK_DEPTH)];
            // Only the frames above the part shared with the last stack
            // (its root side, usually all but the leaf) are mapped again.
            let shared = shared_tail(&self.stack_ids, ids);
            let (new, old) = (ids.len() - shared, self.stack_ids.len() - shared);
            stack.splice(..old, ids[..new].iter().map(|&id| self.frame(id, table)));
            self.stack_ids.splice(..old, ids[..new].iter().copied());
            self.write_thread(
                t.tid,
                t.interpreter_id as u32,
                t.status as u8,
                sample.timestamp_us,
                &stack,
            );
            self.stack = stack;
            if let Some(n) = t.name
                && let Some(&i) = self.thread_index.get(&(t.tid, t.interpreter_id as u32))
            {
                let th = &mut self.threads[i];
                if th.name_id != Some(n) {
                    th.name_id = Some(n);
                    th.name = Some(table.str(n).into());
                    th.name_dirty = true;
                }
            }
        }
        self.release_idle(sample.timestamp_us);
        let now = std::time::Instant::now();
        if self.staging.len() >= FLUSH_SIZE
            || now - self.last_checkpoint >= self.checkpoint_wait
            || (self.new_tables() && now - self.last_frame_end >= self.opts.frame_every)
        {
            self.checkpoint();
        }
    }

    /// Strings or frames no block table holds yet.
    fn new_tables(&self) -> bool {
        self.strings.len() > self.strings_in_blocks || self.frames.len() > self.frames_in_blocks
    }

    /// Write every sample so far to the file as a block and flush it: a
    /// reader of the file, even if the writer dies now, gets them all.
    /// Called by itself at least every [`CHECKPOINT_EVERY`].
    pub fn checkpoint(&mut self) {
        self.last_checkpoint = std::time::Instant::now();
        self.checkpoint_wait = (self.checkpoint_wait * 2).min(CHECKPOINT_EVERY);
        if self.failed.is_some() {
            return;
        }
        for th in &mut self.threads {
            flush_repeat(th, &mut self.staging, &mut self.enc);
        }
        if self.staging.is_empty() {
            return;
        }
        let r = match &mut self.sink {
            Sink::Raw(_) => self.write_raw(),
            Sink::Zstd(z) => z.write_all(&self.staging),
            Sink::Done => Ok(()),
        };
        self.staging.clear();
        if let Err(e) = r {
            return self.fail(e);
        }
        if !matches!(self.sink, Sink::Zstd(_)) {
            return;
        }
        self.frame_used = true;
        // A frame ended costs its window (a few percent of the data per
        // frame): the first ends at once, the others at most once a
        // `frame_every` (what a killed run may lose of samples with new
        // frames), so the quick checkpoints of the start only flush.
        let r = if self.block_due() {
            self.end_frame(true)
        } else {
            // The frame goes on (and keeps its window): what is flushed
            // decodes with the tables already written.
            match &mut self.sink {
                Sink::Zstd(z) => z.flush(),
                _ => Ok(()),
            }
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    /// New strings or frames came since the last block table, and one is
    /// due: the first at once, then at most once a `frame_every`.
    fn block_due(&self) -> bool {
        self.new_tables()
            && (self.blocks == 0 || self.last_frame_end.elapsed() >= self.opts.frame_every)
    }

    /// Uncompressed: the staged records, then (when due) a block record,
    /// and flush.
    fn write_raw(&mut self) -> std::io::Result<()> {
        let block = self.block_due().then(|| {
            let (strings, frames, names) = self.block_sections();
            self.block_counts().encode_record(&strings, &frames, &names)
        });
        let Sink::Raw(w) = &mut self.sink else {
            return Ok(());
        };
        w.write_all(&self.staging)?;
        self.raw_pos += self.staging.len() as u64;
        if let Some(b) = &block {
            w.write_all(b)?;
        }
        w.flush()?;
        if let Some(b) = block {
            self.raw_blocks.push((self.raw_pos, b.len()));
            self.raw_pos += b.len() as u64;
            self.block_written();
        }
        Ok(())
    }

    /// End the open zstd frame, write its block table and flush; with
    /// `again`, open the next frame.
    fn end_frame(&mut self, again: bool) -> std::io::Result<()> {
        let (strings, frames, names) = self.block_sections();
        let table = self.block_counts().encode(&strings, &frames, &names);
        let Sink::Zstd(z) = std::mem::replace(&mut self.sink, Sink::Done) else {
            return Ok(());
        };
        let (mut out, enc) = end_zstd_frame(z)?;
        out.write_all(&table)?;
        out.flush()?;
        self.frame_used = false;
        self.block_written();
        self.sink = if again {
            Sink::Zstd(zio::Writer::new(out, enc))
        } else {
            Sink::Raw(out)
        };
        Ok(())
    }

    /// A block table is on its way to the file: what it holds is no
    /// longer new.
    fn block_written(&mut self) {
        self.blocks += 1;
        // The checkpoint's own instant: the next one a second later is due.
        self.last_frame_end = self.last_checkpoint;
        self.strings_in_blocks = self.strings.len();
        self.frames_in_blocks = self.frames.len();
        for th in &mut self.threads {
            th.name_dirty = false;
        }
    }

    /// What the block's records need that no earlier block gave (see
    /// [`super::BlockTable`]): its strings, frames and thread names, as
    /// table entries.
    fn block_sections(&self) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let mut strings = Vec::new();
        for s in &self.strings[self.strings_in_blocks..] {
            put_string(&mut strings, s);
        }
        let mut frames = Vec::new();
        for f in &self.frames[self.frames_in_blocks..] {
            put_frame(&mut frames, f);
        }
        let mut names = Vec::new();
        for (tid, iid, name) in self.dirty_names() {
            put_string(&mut names, &super::thread_name_record(tid, iid, name));
        }
        (strings, frames, names)
    }

    /// The threads renamed since the last block table.
    fn dirty_names(&self) -> impl Iterator<Item = (u64, u32, &str)> {
        self.threads
            .iter()
            .filter(|t| t.name_dirty)
            .filter_map(|t| Some((t.tid, t.iid, t.name.as_deref()?)))
    }

    /// The counts of the next block table.
    fn block_counts(&self) -> super::BlockTable {
        let n_names = self.dirty_names().count() as u32;
        super::BlockTable {
            samples_total: self.sample_count,
            threads_total: self.threads.len() as u32,
            first_string: self.strings_in_blocks as u32,
            first_frame: self.frames_in_blocks as u32,
            strings: (self.strings.len() - self.strings_in_blocks) as u32,
            frames: (self.frames.len() - self.frames_in_blocks) as u32,
            names: n_names,
        }
    }

    /// Give back the memory of a few threads not sampled for
    /// [`IDLE_THREAD_US`] (their pending repeats are written first). Only
    /// the thread's time and name stay: the reader goes on from that time.
    fn release_idle(&mut self, now: u64) {
        let n = self.threads.len();
        for _ in 0..IDLE_CHECKS.min(n) {
            self.idle_cursor = (self.idle_cursor + 1) % n;
            let th = &mut self.threads[self.idle_cursor];
            if now.saturating_sub(th.prev_ts) < IDLE_THREAD_US
                || (th.prev.capacity() == 0 && th.repeat.capacity() == 0)
            {
                continue;
            }
            flush_repeat(th, &mut self.staging, &mut self.enc);
            th.prev = Vec::new();
            th.repeat = Vec::new();
            th.released = true;
        }
    }

    /// Write one thread's stack (binary frame indices, innermost first).
    fn write_thread(&mut self, tid: u64, iid: u32, status: u8, ts: u64, stack: &[u32]) {
        let start = self.opts.start_time_us;
        let i = *self.thread_index.entry((tid, iid)).or_insert_with(|| {
            self.threads.push(ThreadState {
                tid,
                iid,
                prev: Vec::new(),
                prev_ts: start,
                repeat: Vec::new(),
                repeat_n: 0,
                released: false,
                name_id: None,
                name: None,
                name_dirty: false,
            });
            self.threads.len() - 1
        });
        self.sample_count += 1;
        let th = &mut self.threads[i];
        let delta = ts.wrapping_sub(th.prev_ts);
        th.prev_ts = ts;
        if !th.released && th.prev == stack {
            put_varint(&mut th.repeat, delta);
            th.repeat.push(status);
            th.repeat_n += 1;
            self.enc.frames_saved += stack.len() as u64;
            if th.repeat.len() >= REPEAT_BUFFER {
                flush_repeat(th, &mut self.staging, &mut self.enc);
            }
            return;
        }
        flush_repeat(th, &mut self.staging, &mut self.enc);
        th.released = false;
        let prev = &th.prev;
        let shared = shared_tail(prev, stack);
        let buf = &mut self.staging;
        let before = buf.len();
        let (enc, pushed) = if shared == 0 {
            (ENC_FULL, stack)
        } else if shared == prev.len() {
            (ENC_SUFFIX, &stack[..stack.len() - shared])
        } else if shared >= stack.len() / 2 {
            (ENC_POP_PUSH, &stack[..stack.len() - shared])
        } else {
            (ENC_FULL, stack)
        };
        buf.extend_from_slice(&tid.to_le_bytes());
        buf.extend_from_slice(&iid.to_le_bytes());
        buf.push(enc);
        put_varint(buf, delta);
        buf.push(status);
        match enc {
            ENC_FULL => self.enc.full_records += 1,
            ENC_SUFFIX => {
                self.enc.suffix_records += 1;
                put_varint(buf, shared as u64);
            }
            _ => {
                self.enc.pop_push_records += 1;
                put_varint(buf, (prev.len() - shared) as u64);
            }
        }
        put_varint(buf, pushed.len() as u64);
        for &f in pushed {
            put_varint(buf, f as u64);
        }
        self.enc.frames_written += pushed.len() as u64;
        self.enc.frames_saved += (stack.len() - pushed.len()) as u64;
        self.enc.bytes_written += (buf.len() - before) as u64;
        th.prev.clear();
        th.prev.extend_from_slice(stack);
    }

    /// The binary index of frame `id`, interning it (and its strings).
    fn frame(&mut self, id: FrameId, table: &FrameTable) -> u32 {
        let i = id as usize;
        if i >= self.frame_map.len() {
            self.frame_map.resize(table.len().max(i + 1), 0);
        }
        if self.frame_map[i] != 0 {
            return self.frame_map[i] - 1;
        }
        let f = table.frame(id);
        let file = self.string(f.file, table);
        let func = self.string(f.func, table);
        // The format's "no location" is -1 in every field.
        let location = f
            .location
            .filter(|_| !matches!(f.kind, FrameKind::Gc | FrameKind::Native));
        let bin = match location {
            // A native function (`--native-frames`): line 0 and no
            // columns, which the reader tells apart by its module's file
            // name (see `reader::NATIVE_LOCATION`); the reference shows
            // it at line 0.
            None if f.kind == FrameKind::NativeFunction => BinFrame {
                file,
                func,
                line: 0,
                end_line: 0,
                col: -1,
                end_col: -1,
                opcode: OPCODE_NONE,
            },
            None => BinFrame {
                file,
                func,
                line: -1,
                end_line: -1,
                col: -1,
                end_col: -1,
                opcode: f.opcode.unwrap_or(OPCODE_NONE),
            },
            Some(l) => BinFrame {
                file,
                func,
                line: l.line,
                end_line: l.end_line,
                col: l.col,
                end_col: l.end_col,
                opcode: f.opcode.unwrap_or(OPCODE_NONE),
            },
        };
        let next = self.frames.len() as u32;
        let idx = *self.frame_index.entry(bin).or_insert(next);
        if idx == next {
            self.frames.push(bin);
        }
        self.frame_map[i] = idx + 1;
        idx
    }

    fn string(&mut self, id: StrId, table: &FrameTable) -> u32 {
        let i = id as usize;
        if i >= self.str_map.len() {
            self.str_map.resize(table.strings().len().max(i + 1), 0);
        }
        if self.str_map[i] != 0 {
            return self.str_map[i] - 1;
        }
        let s = table.str(id);
        let idx = match self.string_index.get(s) {
            Some(&idx) => idx,
            None => {
                let idx = self.strings.len() as u32;
                self.strings.push(s.into());
                self.string_index.insert(s.into(), idx);
                idx
            }
        };
        self.str_map[i] = idx + 1;
        idx
    }

    fn fail(&mut self, e: std::io::Error) {
        if self.failed.is_none() {
            self.failed = Some(e);
        }
        self.sink = Sink::Done;
    }

    /// The first write error, if a write failed: the samples since are
    /// lost, so a sampling loop should stop.
    pub fn error(&self) -> Option<&std::io::Error> {
        self.failed.as_ref()
    }

    /// Write the pending repeats, the tables, the trailer, the footer and
    /// the header (then, uncompressed, the fillers); return the output.
    pub fn finish(mut self) -> Result<W> {
        self.checkpoint();
        if let Some(e) = self.failed.take() {
            return Err(Error::io(format!("cannot write {}", self.name), e));
        }
        let name = self.name.clone();
        let io = |e| Error::io(format!("cannot write {name}"), e);
        if self.frame_used {
            self.end_frame(false).map_err(io)?;
        }
        let mut out = match std::mem::replace(&mut self.sink, Sink::Done) {
            Sink::Raw(w) => w,
            // No samples at all: the one empty frame.
            Sink::Zstd(z) => end_zstd_frame(z).map_err(io)?.0,
            Sink::Done => return Err(super::invalid("the writer was already finished")),
        };
        let string_off = out.stream_position().map_err(io)?;
        let (tail, frame_off) = self.tables_and_footer(string_off);
        let file_size = string_off + tail.len() as u64;
        out.write_all(&tail).map_err(io)?;
        let h = header(
            &self.opts,
            self.sample_count,
            self.threads.len() as u32,
            string_off,
            frame_off,
        );
        // Everything else is on disk before the header makes it whole.
        out.flush().map_err(io)?;
        out.seek(SeekFrom::Start(0)).map_err(io)?;
        out.write_all(&h).map_err(io)?;
        out.flush().map_err(io)?;
        self.fill_raw_blocks(&mut out).map_err(io)?;
        out.seek(SeekFrom::Start(file_size)).map_err(io)?;
        out.flush().map_err(io)?;
        Ok(out)
    }

    /// What follows the sample data of a whole file, written at
    /// `string_off`: the string table (with the thread names), the frame
    /// table, the stats trailer and the footer; and the frame table's
    /// offset.
    fn tables_and_footer(&mut self, string_off: u64) -> (Vec<u8>, u64) {
        // Thread names: strings no frame refers to, which the reference's
        // reader loads and ignores (see `super::thread_name_record`).
        for th in &self.threads {
            if let Some(name) = &th.name {
                let rec = super::thread_name_record(th.tid, th.iid, name);
                self.strings.push(rec.into());
            }
        }
        if let Some(n) = self.stats.and_then(|s| s.shutdown_samples) {
            self.strings.push(super::shutdown_record(n).into());
        }
        let mut buf = Vec::new();
        for s in &self.strings {
            put_string(&mut buf, s);
        }
        let frame_off = string_off + buf.len() as u64;
        for f in &self.frames {
            put_frame(&mut buf, f);
        }
        if let Some(st) = self.stats {
            put_trailer(&mut buf, &st);
        }
        let file_size = string_off + buf.len() as u64 + FOOTER_SIZE;
        buf.extend_from_slice(&(self.strings.len() as u32).to_le_bytes());
        buf.extend_from_slice(&(self.frames.len() as u32).to_le_bytes());
        buf.extend_from_slice(&file_size.to_le_bytes());
        buf.extend_from_slice(&[0u8; 16]);
        (buf, frame_off)
    }

    /// Uncompressed: each block record becomes REPEAT records of no
    /// sample, of the first thread (whose first record comes before any
    /// block), so that the reference reads the file.
    fn fill_raw_blocks(&self, out: &mut W) -> std::io::Result<()> {
        let Some(th) = self.threads.first() else {
            return Ok(());
        };
        for &(at, len) in &self.raw_blocks {
            out.seek(SeekFrom::Start(at))?;
            out.write_all(&super::filler_records(th.tid, th.iid, len))?;
        }
        Ok(())
    }
}

/// The stats trailer (3.15.2's 56 bytes).
fn put_trailer(buf: &mut Vec<u8>, st: &StoredStats) {
    let present = st.error_rate_pct.is_some() as u32 | (st.missed_pct.is_some() as u32) << 1;
    for v in [
        st.duration_s,
        st.sample_rate,
        st.error_rate_pct,
        st.missed_pct,
    ] {
        buf.extend_from_slice(&v.unwrap_or(0.0).to_le_bytes());
    }
    buf.extend_from_slice(&present.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    buf.extend_from_slice(TRAILER_MAGIC);
    buf.extend_from_slice(&TRAILER_VERSION.to_le_bytes());
    buf.extend_from_slice(&(TRAILER_SIZE as u32).to_le_bytes());
}

/// The 64-byte header; a provisional one has `string_off` 0.
fn header(
    o: &WriterOptions,
    samples: u64,
    threads: u32,
    string_off: u64,
    frame_off: u64,
) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_SIZE as usize);
    h.extend_from_slice(&MAGIC.to_le_bytes());
    h.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    h.extend_from_slice(&[
        o.python_version.0,
        o.python_version.1,
        o.python_version.2,
        0,
    ]);
    h.extend_from_slice(&o.start_time_us.to_le_bytes());
    h.extend_from_slice(&o.interval_us.to_le_bytes());
    h.extend_from_slice(&samples.to_le_bytes());
    h.extend_from_slice(&threads.to_le_bytes());
    h.extend_from_slice(&string_off.to_le_bytes());
    h.extend_from_slice(&frame_off.to_le_bytes());
    h.extend_from_slice(&o.compression.code().to_le_bytes());
    h.extend_from_slice(&encode_config(o.mode, o.capture).to_le_bytes());
    debug_assert_eq!(h.len() as u64, HEADER_SIZE);
    h
}

/// A string-table entry: its length, its bytes.
fn put_string(buf: &mut Vec<u8>, s: &str) {
    put_varint(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

/// A frame-table entry.
fn put_frame(buf: &mut Vec<u8>, f: &BinFrame) {
    put_varint(buf, f.file as u64);
    put_varint(buf, f.func as u64);
    put_varint(buf, zigzag(f.line) as u64);
    let delta = |a: i32, b: i32| {
        if a == -1 || b == -1 {
            0
        } else {
            b.wrapping_sub(a)
        }
    };
    put_varint(buf, zigzag(delta(f.line, f.end_line)) as u64);
    put_varint(buf, zigzag(f.col) as u64);
    put_varint(buf, zigzag(delta(f.col, f.end_col)) as u64);
    buf.push(f.opcode);
}

/// Write `th`'s pending REPEAT entries as one record.
fn flush_repeat(th: &mut ThreadState, buf: &mut Vec<u8>, enc: &mut EncodingStats) {
    if th.repeat_n == 0 {
        return;
    }
    let before = buf.len();
    buf.extend_from_slice(&th.tid.to_le_bytes());
    buf.extend_from_slice(&th.iid.to_le_bytes());
    buf.push(ENC_REPEAT);
    put_varint(buf, th.repeat_n);
    buf.extend_from_slice(&th.repeat);
    enc.repeat_records += 1;
    enc.repeat_samples += th.repeat_n;
    enc.bytes_written += (buf.len() - before) as u64;
    th.repeat.clear();
    th.repeat_n = 0;
}

#[cfg(test)]
mod tests {
    use super::shared_tail;

    /// The compressor's context, with tachyon's settings, after it
    /// compressed a stream longer than its window: under a megabyte (level
    /// 7's own tables took about 5 MB).
    #[test]
    fn the_compressor_keeps_under_a_megabyte() {
        let mut cctx = zstd::zstd_safe::CCtx::create();
        cctx.set_parameter(zstd::zstd_safe::CParameter::CompressionLevel(
            super::DEFAULT_ZSTD_LEVEL,
        ))
        .unwrap();
        for p in super::zstd_parameters() {
            cctx.set_parameter(p).unwrap();
        }
        let data: Vec<u8> = (0u32..400_000)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 29) as u8)
            .collect();
        let mut out = vec![0u8; zstd::zstd_safe::compress_bound(data.len())];
        let n = cctx.compress2(&mut out[..], &data).unwrap();
        assert!(n > 0 && n < data.len());
        let size = cctx.sizeof();
        assert!(size < 1 << 20, "the compressor takes {size} bytes");
    }

    #[test]
    fn shared_tail_counts_the_common_root_side() {
        let counted = |a: &[u32], b: &[u32]| {
            a.iter()
                .rev()
                .zip(b.iter().rev())
                .take_while(|(x, y)| x == y)
                .count()
        };
        let cases: &[(&[u32], &[u32])] = &[
            (&[], &[]),
            (&[1], &[1]),
            (&[1], &[2]),
            (&[9, 2, 3], &[1, 2, 3]),
            (&[1, 2, 3], &[1, 2, 3]),
            (&[7, 8, 2, 3], &[1, 2, 3]),
            (&[2, 3], &[5, 1, 2, 3]),
            (&[1, 9, 3], &[1, 2, 3]),
            (&[1, 2, 4], &[1, 2, 3]),
        ];
        for &(a, b) in cases {
            assert_eq!(shared_tail(a, b), counted(a, b), "{a:?} {b:?}");
            assert_eq!(shared_tail(b, a), counted(b, a), "{b:?} {a:?}");
        }
    }
}
