//! Reader: every byte of the file is untrusted. Header, footer, trailer
//! and tables are checked against each other and the file's real size
//! before any sample is decoded; sample data is then decoded as a stream
//! (bounded memory, decompressed size capped), each record checked against
//! the tables and the header's counts. Any inconsistency is an
//! [`Error::InvalidProfile`] with a one-line reason; nothing panics, and
//! every loop is bounded by bytes actually present.
//!
//! A recording cut short (its writer killed, the file cut) is read, with
//! [`ReadOptions::recover`], up to the last flush before the cut (see
//! [`super::writer`]): the block tables stand in for the missing tables,
//! the data ends quietly at the first thing that is not whole, the counts
//! are those found, and [`FileInfo::truncated`] says so. Uncompressed
//! sample data may hold block records ([`super::ENC_BLOCK`], a recording
//! not finished): the decoder skips them.

use foldhash::{HashMap, HashMapExt};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::{
    Compression, DEFAULT_MAX_DECOMPRESSED, ENC_BLOCK, ENC_FULL, ENC_POP_PUSH, ENC_REPEAT,
    ENC_SUFFIX, FOOTER_SIZE, FORMAT_VERSION, FileInfo, HEADER_SIZE, LEGACY_TRAILER_SIZE, MAGIC,
    MIN_FRAME_ENTRY, OPCODE_NONE, RECORD_HEADER_SIZE, StoredStats, TRAILER_MAGIC, TRAILER_SIZE,
    TRAILER_VERSION, decode_config, invalid, parse_shutdown_record, parse_thread_name_record,
    unzigzag,
};
use crate::error::{Error, Result};
use crate::model::{
    Frame, FrameId, FrameKind, FrameTable, Location, RunStats, Sample, StrId, ThreadSample,
};

/// The words of the replay command for a file that is not a profile at all.
pub const NOT_A_PROFILE: &str = "Input file is not a binary sampling profile. The replay command only accepts files created with --binary";

/// Limits for reading untrusted files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// Most bytes the compressed sample data may expand to (the
    /// reference's cap: 1 GiB).
    pub max_decompressed: u64,
    /// Deepest stack accepted in a record.
    pub max_depth: usize,
    /// Read a file cut short (no footer, or the provisional header of a
    /// recording never finished) up to its last flush, rather than
    /// refuse it.
    pub recover: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_decompressed: DEFAULT_MAX_DECOMPRESSED,
            max_depth: crate::model::MAX_DEPTH,
            recover: false,
        }
    }
}

/// An open, validated binary profile; see the module documentation.
pub struct BinaryReader<R: Read + Seek> {
    src: R,
    name: String,
    info: FileInfo,
    table: FrameTable,
    /// Binary frame index → interned frame.
    frame_ids: Vec<FrameId>,
    /// Thread names stored in the string table, by (thread, interpreter).
    names: HashMap<(u64, u32), StrId>,
    /// Where the sample data ends (the string table of a whole file).
    data_end: u64,
    opts: ReadOptions,
    /// The latest timestamp replayed.
    last_timestamp_us: Option<u64>,
}

impl BinaryReader<BufReader<File>> {
    /// Open and validate `path`; a recording cut short is read up to its
    /// last flush ([`FileInfo::truncated`]).
    pub fn open(path: &Path) -> Result<Self> {
        let f = File::open(path)
            .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
        BinaryReader::new(
            BufReader::new(f),
            path.display().to_string(),
            ReadOptions {
                recover: true,
                ..ReadOptions::default()
            },
        )
    }
}

/// Fixed-width fields in the file's byte order.
struct Fixed<'a> {
    b: &'a [u8],
    be: bool,
}

impl Fixed<'_> {
    fn u32(&self, at: usize) -> u32 {
        let a: [u8; 4] = self.b[at..at + 4].try_into().unwrap_or_default();
        if self.be {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }

    fn u64(&self, at: usize) -> u64 {
        let a: [u8; 8] = self.b[at..at + 8].try_into().unwrap_or_default();
        if self.be {
            u64::from_be_bytes(a)
        } else {
            u64::from_le_bytes(a)
        }
    }

    fn f64(&self, at: usize) -> f64 {
        f64::from_bits(self.u64(at))
    }
}

/// A LEB128 varint from `b` at `*pos`.
fn varint_at(b: &[u8], pos: &mut usize, what: &str) -> Result<u64> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let Some(&byte) = b.get(*pos) else {
            return Err(invalid(format!("{what} is truncated")));
        };
        *pos += 1;
        if i == 9 && byte > 1 {
            return Err(invalid(format!("{what}: varint overflows 64 bits")));
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(invalid(format!("{what}: varint longer than 10 bytes")))
}

fn u32_of(v: u64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| invalid(format!("{what}: value {v} overflows 32 bits")))
}

impl<R: Read + Seek> BinaryReader<R> {
    /// Validate the file in `src` and load its tables; `name` names it in
    /// messages.
    pub fn new(mut src: R, name: String, opts: ReadOptions) -> Result<Self> {
        let io_err = |e| Error::io(format!("cannot read {name}"), e);
        let size = src.seek(SeekFrom::End(0)).map_err(io_err)?;
        let (hb, be) = read_header(&mut src, size, &io_err)?;
        let h = Fixed { b: &hb, be };
        // Whole: finished (its tables placed), the tables inside the file,
        // and a footer that gives the file's size. A cut file's last bytes
        // may read as that size by chance (block data that holds it), but
        // not with its tables past its end.
        let whole = size >= HEADER_SIZE + FOOTER_SIZE
            && h.u64(40) != 0
            && h.u64(40) <= size
            && footer_size(&mut src, size, be).map_err(io_err)? == size;
        if !whole && opts.recover {
            return BinaryReader::recover(src, name, opts, &hb, be, size);
        }
        refuse_unfinished(&h, size)?;
        let tail = Tail::read(&mut src, size, be, &io_err)?;
        let (string_off, frame_off) = check_tables(&h, &tail)?;
        let compression = compression_of(h.u32(56))?;
        let (mode, capture) = decode_config(h.u32(60)).map_err(invalid)?;
        let info = FileInfo {
            python_version: (hb[8], hb[9], hb[10]),
            start_time_us: h.u64(12),
            interval_us: h.u64(20),
            sample_count: h.u64(28),
            thread_count: h.u32(36),
            string_count: tail.string_count,
            frame_count: tail.frame_count,
            compression,
            mode,
            capture,
            stats: tail.stats,
            big_endian: be,
            truncated: false,
        };
        let mut tables = vec![0u8; (tail.tables_end - string_off) as usize];
        src.seek(SeekFrom::Start(string_off)).map_err(io_err)?;
        src.read_exact(&mut tables).map_err(io_err)?;
        let (table, frame_ids, names, shutdown) =
            parse_tables(&tables, (frame_off - string_off) as usize, &info)?;
        let mut info = info;
        info.stats.shutdown_samples = shutdown;
        Ok(BinaryReader {
            src,
            name,
            info,
            table,
            frame_ids,
            names,
            data_end: string_off,
            opts,
            last_timestamp_us: None,
        })
    }

    /// A file cut short: what it had flushed, with its block tables.
    fn recover(
        mut src: R,
        name: String,
        opts: ReadOptions,
        hb: &[u8; HEADER_SIZE as usize],
        be: bool,
        size: u64,
    ) -> Result<Self> {
        let io_err = |e| Error::io(format!("cannot read {name}"), e);
        let h = Fixed { b: hb, be };
        let compression = compression_of(h.u32(56))?;
        let (mode, capture) = decode_config(h.u32(60)).unwrap_or((None, None));
        // A whole file cut in its tables: the data ends where they start.
        let stated = h.u64(40);
        let end = if (HEADER_SIZE..=size).contains(&stated) {
            stated
        } else {
            size
        };
        let found = match compression {
            Compression::Zstd => scan_blocks(&mut src, end, opts.max_decompressed),
            Compression::None => scan_raw_blocks(&mut src, end),
        }
        .map_err(io_err)?;
        let mut tables = found.strings;
        let mut string_count = found.string_count;
        for entry in found.names.values() {
            tables.extend_from_slice(entry);
            string_count += 1;
        }
        let strings_len = tables.len();
        tables.extend_from_slice(&found.frames);
        let info = FileInfo {
            python_version: (hb[8], hb[9], hb[10]),
            start_time_us: h.u64(12),
            interval_us: h.u64(20),
            sample_count: found.samples,
            thread_count: found.threads,
            string_count,
            frame_count: found.frame_count,
            compression,
            mode,
            capture,
            stats: StoredStats::default(),
            big_endian: be,
            truncated: true,
        };
        let (table, frame_ids, names, _) = parse_tables(&tables, strings_len, &info)?;
        let mut r = BinaryReader {
            src,
            name,
            info,
            table,
            frame_ids,
            names,
            // After the last whole block, what the open frame had flushed.
            data_end: end,
            opts,
            last_timestamp_us: None,
        };
        // The counts, which no header holds: one pass over the data.
        let mut threads = std::collections::HashSet::new();
        let n = r.replay(|s, _| {
            threads.insert((s.threads[0].tid, s.threads[0].interpreter_id));
        })?;
        r.info.sample_count = n;
        r.info.thread_count = u32::try_from(threads.len()).unwrap_or(u32::MAX);
        r.last_timestamp_us = None;
        Ok(r)
    }

    /// The latest sample time replayed so far (of the file's own clock).
    pub fn last_timestamp_us(&self) -> Option<u64> {
        self.last_timestamp_us
    }

    pub fn info(&self) -> &FileInfo {
        &self.info
    }

    /// The frames the samples refer to.
    pub fn frames(&self) -> &FrameTable {
        &self.table
    }

    pub fn into_frames(self) -> FrameTable {
        self.table
    }

    /// The stored statistics, for the collectors.
    pub fn run_stats(&self) -> RunStats {
        self.info.run_stats()
    }

    /// Decode every stored stack, in file order, each as a [`Sample`] of
    /// one thread (as the reference replays them), given with the frame
    /// table its ids resolve in. Returns how many.
    pub fn replay(&mut self, mut f: impl FnMut(&Sample, &FrameTable)) -> Result<u64> {
        let name = self.name.clone();
        self.src
            .seek(SeekFrom::Start(HEADER_SIZE))
            .map_err(|e| Error::io(format!("cannot read {name}"), e))?;
        let region = (&mut self.src).take(self.data_end - HEADER_SIZE);
        let truncated = self.info.truncated;
        let inner: Box<dyn Read + '_> = match self.info.compression {
            Compression::None => Box::new(region),
            Compression::Zstd => Box::new(ZstdRegion::new(
                region,
                self.opts.max_decompressed,
                truncated,
            )?),
        };
        let mut bytes = Bytes::new(inner);
        let table = &self.table;
        let last = &mut self.last_timestamp_us;
        let mut f = |s: &Sample| {
            *last = Some(last.map_or(s.timestamp_us, |l| l.max(s.timestamp_us)));
            f(s, table)
        };
        let dec = Decoder {
            info: &self.info,
            frame_ids: &self.frame_ids,
            names: &self.names,
            max_depth: self.opts.max_depth,
            lenient: self.info.truncated,
        };
        dec.run(&mut bytes, &mut f).map_err(|e| match e {
            Error::Io { cause, .. } if cause.kind() == io::ErrorKind::InvalidData => {
                invalid(format!("sample data: {cause}"))
            }
            Error::Io { cause, .. } => Error::io(format!("cannot read {name}"), cause),
            e => e,
        })
    }

    /// Every stored stack, regrouped into samples: stacks are ordered by
    /// timestamp and those taken at the same instant (one per thread) form
    /// one [`Sample`]. Threads of one instant keep the file's order (the
    /// format does not store the order they were sampled in).
    pub fn read_samples(&mut self) -> Result<Vec<Sample>> {
        let mut all: Vec<(u64, ThreadSample)> = Vec::new();
        self.replay(|s, _| {
            for t in &s.threads {
                all.push((s.timestamp_us, t.clone()));
            }
        })?;
        all.sort_by_key(|(ts, _)| *ts);
        let mut out: Vec<Sample> = Vec::new();
        for (ts, t) in all {
            let same = out.last().is_some_and(|s| {
                s.timestamp_us == ts
                    && !s
                        .threads
                        .iter()
                        .any(|o| o.tid == t.tid && o.interpreter_id == t.interpreter_id)
            });
            if same {
                out.last_mut().unwrap().threads.push(t);
            } else {
                out.push(Sample {
                    pid: None,
                    timestamp_us: ts,
                    threads: vec![t],
                });
            }
        }
        Ok(out)
    }
}

/// The 64-byte header and its byte order, if it is a profile of the one
/// format version.
fn read_header<R: Read + Seek>(
    src: &mut R,
    size: u64,
    io_err: &dyn Fn(io::Error) -> Error,
) -> Result<([u8; HEADER_SIZE as usize], bool)> {
    if size < HEADER_SIZE {
        return Err(Error::InvalidProfile(format!(
            "{NOT_A_PROFILE} ({size} bytes: shorter than the {HEADER_SIZE}-byte header)"
        )));
    }
    let mut hb = [0u8; HEADER_SIZE as usize];
    src.seek(SeekFrom::Start(0)).map_err(io_err)?;
    src.read_exact(&mut hb).map_err(io_err)?;
    let be = match &hb[..4] {
        b if b == MAGIC.to_le_bytes() => false,
        b if b == MAGIC.to_be_bytes() => true,
        _ => {
            return Err(Error::InvalidProfile(format!(
                "{NOT_A_PROFILE} (bad magic number)"
            )));
        }
    };
    let version = Fixed { b: &hb, be }.u32(4);
    if version != FORMAT_VERSION {
        return Err(invalid(format!(
            "the file was created with Python {}.{}.{} in format version {version}; only version {FORMAT_VERSION} is supported",
            hb[8], hb[9], hb[10]
        )));
    }
    Ok((hb, be))
}

/// A file read strictly must have been finished and have room for its
/// footer.
fn refuse_unfinished(h: &Fixed, size: u64) -> Result<()> {
    if h.u64(40) == 0 {
        return Err(invalid(
            "the recording was never finished (its writer stopped before writing its tables); replay it with `tachyon replay` to get what it had flushed",
        ));
    }
    if size < HEADER_SIZE + FOOTER_SIZE {
        return Err(invalid(format!(
            "truncated: {size} bytes cannot hold the header and the footer"
        )));
    }
    Ok(())
}

fn compression_of(code: u32) -> Result<Compression> {
    match code {
        0 => Ok(Compression::None),
        1 => Ok(Compression::Zstd),
        c => Err(invalid(format!("unknown compression type {c}"))),
    }
}

/// What the end of a whole file holds: the footer's counts, the stats
/// trailer, and where the tables end.
struct Tail {
    string_count: u32,
    frame_count: u32,
    stats: StoredStats,
    tables_end: u64,
}

impl Tail {
    fn read<R: Read + Seek>(
        src: &mut R,
        size: u64,
        be: bool,
        io_err: &dyn Fn(io::Error) -> Error,
    ) -> Result<Tail> {
        let mut tail = vec![0u8; (size - HEADER_SIZE).min(FOOTER_SIZE + TRAILER_SIZE) as usize];
        src.seek(SeekFrom::Start(size - tail.len() as u64))
            .map_err(io_err)?;
        src.read_exact(&mut tail).map_err(io_err)?;
        let t = Fixed { b: &tail, be };
        let foot = tail.len() - FOOTER_SIZE as usize;
        let stated_size = t.u64(foot + 8);
        if stated_size != size {
            return Err(invalid(format!(
                "the footer gives the file size as {stated_size} bytes but it has {size} (truncated or appended to?)"
            )));
        }
        let (stats, trailer_size) = read_trailer(&t, foot, size - FOOTER_SIZE)?;
        Ok(Tail {
            string_count: t.u32(foot),
            frame_count: t.u32(foot + 4),
            stats,
            tables_end: size - FOOTER_SIZE - trailer_size,
        })
    }
}

/// The optional stats trailer, found by its magic just before the footer
/// (at `foot` of `t`, `tables_end` in the file): the stats and its size.
fn read_trailer(t: &Fixed, foot: usize, tables_end: u64) -> Result<(StoredStats, u64)> {
    let mut stats = StoredStats::default();
    if foot < 16 || &t.b[foot - 16..foot - 8] != TRAILER_MAGIC {
        return Ok((stats, 0));
    }
    let tv = t.u32(foot - 8);
    let tsize = u64::from(t.u32(foot - 4));
    if tv != TRAILER_VERSION {
        return Err(invalid(format!("unsupported stats trailer version {tv}")));
    }
    if tsize != TRAILER_SIZE && tsize != LEGACY_TRAILER_SIZE {
        return Err(invalid(format!("invalid stats trailer size {tsize}")));
    }
    if (foot as u64) < tsize || tables_end < HEADER_SIZE + tsize {
        return Err(invalid("the stats trailer does not fit in the file"));
    }
    let at = foot - tsize as usize;
    stats.duration_s = Some(t.f64(at));
    stats.sample_rate = Some(t.f64(at + 8));
    if tsize == TRAILER_SIZE {
        let present = t.u32(at + 32);
        if present & !3 != 0 || t.u32(at + 36) != 0 {
            return Err(invalid("invalid flags in the stats trailer"));
        }
        stats.error_rate_pct = (present & 1 != 0).then(|| t.f64(at + 16));
        stats.missed_pct = (present & 2 != 0).then(|| t.f64(at + 24));
    }
    Ok((stats, tsize))
}

/// The header's table offsets, if they lie in order inside the file and
/// the footer's counts fit between them.
fn check_tables(h: &Fixed, tail: &Tail) -> Result<(u64, u64)> {
    let (string_off, frame_off, tables_end) = (h.u64(40), h.u64(48), tail.tables_end);
    if !(HEADER_SIZE <= string_off && string_off <= frame_off && frame_off <= tables_end) {
        return Err(invalid(format!(
            "table offsets out of range (strings at {string_off}, frames at {frame_off}, tables end at {tables_end})"
        )));
    }
    if u64::from(tail.string_count) > frame_off - string_off {
        return Err(invalid(format!(
            "{} strings cannot fit in a {}-byte string table",
            tail.string_count,
            frame_off - string_off
        )));
    }
    if u64::from(tail.frame_count) > (tables_end - frame_off) / MIN_FRAME_ENTRY {
        return Err(invalid(format!(
            "{} frames cannot fit in a {}-byte frame table",
            tail.frame_count,
            tables_end - frame_off
        )));
    }
    Ok((string_off, frame_off))
}

/// The file size the footer states, if the file has a footer's room.
fn footer_size<R: Read + Seek>(src: &mut R, size: u64, be: bool) -> io::Result<u64> {
    let mut b = [0u8; FOOTER_SIZE as usize];
    src.seek(SeekFrom::Start(size - FOOTER_SIZE))?;
    src.read_exact(&mut b)?;
    Ok(Fixed { b: &b, be }.u64(8))
}

/// The block tables of a recording cut short, put together.
#[derive(Default)]
struct Recovered {
    /// The end of the last whole block table.
    end: u64,
    samples: u64,
    threads: u32,
    strings: Vec<u8>,
    string_count: u32,
    frames: Vec<u8>,
    frame_count: u32,
    /// Each thread's latest name record (a string-table entry).
    names: std::collections::BTreeMap<(u64, u32), Vec<u8>>,
}

/// Walk the sample data from the header to `end`: zstd frames of records,
/// each followed by its block table. Stops, without error, at the first
/// thing that is not whole or not consistent: what comes before it is
/// what the file holds.
fn scan_blocks<R: Read + Seek>(src: &mut R, end: u64, cap: u64) -> io::Result<Recovered> {
    use super::{BLOCK_MAGIC, BlockTable, SKIPPABLE_BASE, SKIPPABLE_MASK, ZSTD_FRAME_MAGIC};
    let mut found = Recovered {
        end: HEADER_SIZE,
        ..Recovered::default()
    };
    src.seek(SeekFrom::Start(HEADER_SIZE))?;
    let mut r = BufReader::new(src.take(end - HEADER_SIZE));
    let mut pos = HEADER_SIZE;
    let mut decoded = 0u64;
    // A whole zstd frame read since the last block table.
    let mut pending = false;
    loop {
        let mut m = [0u8; 4];
        if r.read_exact(&mut m).is_err() {
            break;
        }
        let magic = u32::from_le_bytes(m);
        if magic == ZSTD_FRAME_MAGIC {
            let Some((len, out)) = zstd_frame(&mut r, &m, cap.saturating_sub(decoded))? else {
                break;
            };
            pos += len;
            decoded += out;
            pending = true;
            continue;
        }
        if magic & SKIPPABLE_MASK != SKIPPABLE_BASE {
            break;
        }
        let mut sz = [0u8; 4];
        if r.read_exact(&mut sz).is_err() {
            break;
        }
        let sz = u64::from(u32::from_le_bytes(sz));
        if sz > end - pos - 8 {
            break;
        }
        let mut payload = Vec::new();
        (&mut r).take(sz).read_to_end(&mut payload)?;
        pos += 8 + sz;
        if magic != BLOCK_MAGIC {
            continue;
        }
        let Some(b) = BlockTable::decode(&payload, end) else {
            break;
        };
        if !pending || !add_block(&mut found, b) {
            break;
        }
        pending = false;
        found.end = pos;
    }
    Ok(found)
}

/// One zstd frame whose magic `m` was read: its length and decompressed
/// size, or `None` if it is cut, damaged, or expands past `cap`.
fn zstd_frame<R: io::BufRead>(r: &mut R, m: &[u8; 4], cap: u64) -> io::Result<Option<(u64, u64)>> {
    use zstd::stream::raw::Operation;
    let mut dec = zstd::stream::raw::Decoder::new()?;
    let mut out = vec![0u8; 64 * 1024];
    let mut produced = 0u64;
    let mut len = 4u64;
    let Ok(st) = dec.run_on_buffers(m, &mut out) else {
        return Ok(None);
    };
    produced += st.bytes_written as u64;
    loop {
        let input = r.fill_buf()?;
        if input.is_empty() {
            return Ok(None);
        }
        let Ok(st) = dec.run_on_buffers(input, &mut out) else {
            return Ok(None);
        };
        r.consume(st.bytes_read);
        len += st.bytes_read as u64;
        produced += st.bytes_written as u64;
        if produced > cap || (st.bytes_read == 0 && st.bytes_written == 0) {
            return Ok(None);
        }
        if st.remaining == 0 {
            return Ok(Some((len, produced)));
        }
    }
}

/// Walk uncompressed sample data from the header to `end`: records, and
/// after some, a block record. Stops, without error, at the first thing
/// that is not whole or not consistent, as [`scan_blocks`] does.
fn scan_raw_blocks<R: Read + Seek>(src: &mut R, end: u64) -> io::Result<Recovered> {
    use super::BlockTable;
    let mut found = Recovered {
        end: HEADER_SIZE,
        ..Recovered::default()
    };
    src.seek(SeekFrom::Start(HEADER_SIZE))?;
    let mut r = BufReader::new(src.take(end - HEADER_SIZE));
    let mut pos = HEADER_SIZE;
    // A record read since the last block table.
    let mut pending = false;
    loop {
        let mut hdr = [0u8; RECORD_HEADER_SIZE];
        if r.read_exact(&mut hdr).is_err() {
            break;
        }
        pos += RECORD_HEADER_SIZE as u64;
        if hdr[12] != ENC_BLOCK {
            let Some(len) = record_body_len(&mut r, hdr[12]) else {
                break;
            };
            pos += len;
            pending = true;
            continue;
        }
        let size = u64::from(Fixed { b: &hdr, be: false }.u32(8));
        if size > end - pos {
            break;
        }
        let mut payload = Vec::new();
        (&mut r).take(size).read_to_end(&mut payload)?;
        pos += size;
        let Some(b) = BlockTable::decode(&payload, end) else {
            break;
        };
        if !pending || !add_block(&mut found, b) {
            break;
        }
        pending = false;
        found.end = pos;
    }
    Ok(found)
}

/// The length of a sample record's body (after its header) of encoding
/// `enc`, read past; `None` if it is cut or no sample record.
fn record_body_len<R: io::BufRead>(r: &mut R, enc: u8) -> Option<u64> {
    let mut len = 0u64;
    let count = match enc {
        ENC_REPEAT => skip_varint(r, &mut len)?,
        ENC_FULL | ENC_SUFFIX | ENC_POP_PUSH => 1,
        _ => return None,
    };
    for _ in 0..count {
        // A sample: its time and status byte.
        skip_varint(r, &mut len)?;
        r.read_exact(&mut [0u8; 1]).ok()?;
        len += 1;
        if enc == ENC_REPEAT {
            continue;
        }
        if enc != ENC_FULL {
            // Shared or popped frames.
            skip_varint(r, &mut len)?;
        }
        for _ in 0..skip_varint(r, &mut len)? {
            skip_varint(r, &mut len)?;
        }
    }
    Some(len)
}

/// A varint read past, its length added to `len`.
fn skip_varint<R: io::BufRead>(r: &mut R, len: &mut u64) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let mut b = [0u8; 1];
        r.read_exact(&mut b).ok()?;
        *len += 1;
        v |= u64::from(b[0] & 0x7f).checked_shl(7 * i)?;
        if b[0] & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Add a block's tables to `found`; `false` if they do not follow on
/// from the blocks before or do not hold what they say.
fn add_block(found: &mut Recovered, b: super::BlockSections) -> bool {
    let t = b.table;
    let follows = t.first_string == found.string_count
        && t.first_frame == found.frame_count
        && t.samples_total >= found.samples
        && t.threads_total >= found.threads;
    // The (start, end) of each entry: a length and its bytes when
    // `fields` is 0, else `fields` varints and `tail` bytes.
    let entries = |bytes: &[u8], fields: usize, tail: usize| -> Option<Vec<(usize, usize)>> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let start = pos;
            if fields == 0 {
                let n = varint_at(bytes, &mut pos, "").ok()?;
                pos = pos.checked_add(usize::try_from(n).ok()?)?;
            } else {
                for _ in 0..fields {
                    varint_at(bytes, &mut pos, "").ok()?;
                }
                pos += tail;
            }
            if pos > bytes.len() {
                return None;
            }
            out.push((start, pos));
        }
        Some(out)
    };
    let (Some(strs), Some(frames), Some(names)) = (
        entries(&b.strings, 0, 0),
        entries(&b.frames, 6, 1),
        entries(&b.names, 0, 0),
    ) else {
        return false;
    };
    if !follows
        || strs.len() != t.strings as usize
        || frames.len() != t.frames as usize
        || names.len() != t.names as usize
    {
        return false;
    }
    for (a, z) in names {
        let entry = &b.names[a..z];
        let mut p = 0;
        let Ok(n) = varint_at(entry, &mut p, "") else {
            return false;
        };
        let text = String::from_utf8_lossy(&entry[p..p + n as usize]);
        let Some((tid, iid, _)) = parse_thread_name_record(&text) else {
            return false;
        };
        found.names.insert((tid, iid), entry.to_vec());
    }
    found.strings.extend_from_slice(&b.strings);
    found.frames.extend_from_slice(&b.frames);
    found.string_count += t.strings;
    found.frame_count += t.frames;
    found.samples = t.samples_total;
    found.threads = t.threads_total;
    true
}

/// Thread names by (thread, interpreter).
type Names = HashMap<(u64, u32), StrId>;

/// Parse the string table (`strings_len` bytes) and the frame table after
/// it, interning both, and the thread names and shutdown count among the
/// strings.
fn parse_tables(
    b: &[u8],
    strings_len: usize,
    info: &FileInfo,
) -> Result<(FrameTable, Vec<FrameId>, Names, Option<u64>)> {
    let mut table = FrameTable::new();
    let (str_ids, names, shutdown) =
        parse_strings(&b[..strings_len], info.string_count, &mut table)?;
    let frame_ids = parse_frames(&b[strings_len..], info, &str_ids, &mut table)?;
    Ok((table, frame_ids, names, shutdown))
}

/// `count` strings from `strs`, interned: each string's id (`StrId::MAX`
/// for a thread name or the shutdown count, which no frame may name), the
/// thread names and the shutdown count.
fn parse_strings(
    strs: &[u8],
    count: u32,
    table: &mut FrameTable,
) -> Result<(Vec<StrId>, Names, Option<u64>)> {
    let mut names = Names::new();
    let mut shutdown = None;
    let mut pos = 0;
    let mut str_ids = Vec::new();
    for i in 0..count {
        let what = format!("string {i}");
        let len = varint_at(strs, &mut pos, &what)?;
        if len > (strs.len() - pos) as u64 {
            return Err(invalid(format!("{what} runs past the string table")));
        }
        let s = String::from_utf8_lossy(&strs[pos..pos + len as usize]);
        pos += len as usize;
        if let Some((tid, iid, name)) = parse_thread_name_record(&s) {
            names.insert((tid, iid), table.intern_str(name));
            str_ids.push(StrId::MAX);
            continue;
        }
        if let Some(n) = parse_shutdown_record(&s) {
            shutdown = Some(n);
            str_ids.push(StrId::MAX);
            continue;
        }
        str_ids.push(table.intern_str(&s));
    }
    if pos != strs.len() {
        return Err(invalid(format!(
            "the string table holds {} bytes after its {count} strings",
            strs.len() - pos,
        )));
    }
    Ok((str_ids, names, shutdown))
}

/// The frame table `frames`, interned: each binary frame's id.
fn parse_frames(
    frames: &[u8],
    info: &FileInfo,
    str_ids: &[StrId],
    table: &mut FrameTable,
) -> Result<Vec<FrameId>> {
    let mut pos = 0;
    let mut frame_ids = Vec::new();
    for i in 0..info.frame_count {
        let frame = parse_frame(frames, &mut pos, i, info, str_ids, table)?;
        frame_ids.push(table.intern(frame));
    }
    if pos != frames.len() {
        return Err(invalid(format!(
            "the frame table holds {} bytes after its {} frames",
            frames.len() - pos,
            info.frame_count
        )));
    }
    Ok(frame_ids)
}

/// Frame `i` of the frame table, at `*pos` of `frames`.
fn parse_frame(
    frames: &[u8],
    pos: &mut usize,
    i: u32,
    info: &FileInfo,
    str_ids: &[StrId],
    table: &FrameTable,
) -> Result<Frame> {
    let what = format!("frame {i}");
    let mut field = |name: &str| -> Result<u32> {
        let what = format!("{what} ({name})");
        u32_of(varint_at(frames, pos, &what)?, &what)
    };
    let file = field("filename")?;
    let func = field("function name")?;
    let line = unzigzag(field("line")?);
    let end_delta = unzigzag(field("end line")?);
    let col = unzigzag(field("column")?);
    let end_col_delta = unzigzag(field("end column")?);
    if *pos >= frames.len() {
        return Err(invalid(format!("{what} is truncated")));
    }
    let opcode = Some(frames[*pos]).filter(|&op| op != OPCODE_NONE);
    *pos += 1;
    let (Some(&file), Some(&func)) = (
        str_ids.get(file as usize).filter(|&&s| s != StrId::MAX),
        str_ids.get(func as usize).filter(|&&s| s != StrId::MAX),
    ) else {
        return Err(invalid(format!(
            "{what} names string {} of {}",
            file.max(func),
            info.string_count
        )));
    };
    if line == -1 {
        // location None: tachyon's "no location".
        return Ok(Frame {
            opcode,
            kind: kind_without_location(table.str(file), table.str(func)),
            file,
            func,
            location: None,
        });
    }
    let (l0, l1, c0, c1) = NATIVE_LOCATION;
    if (line, end_delta, col, end_col_delta) == (l0, l1 - l0, c0, c1 - c0)
        && is_module_name(table.str(file))
    {
        return Ok(Frame {
            opcode,
            kind: FrameKind::NativeFunction,
            file,
            func,
            location: None,
        });
    }
    let overflow = || invalid(format!("{what}: location out of range"));
    let kind = match (end_delta, col, end_col_delta) {
        (0, -1, 0) if is_native_source(table.str(file)) => FrameKind::NativeFunction,
        _ => FrameKind::Python,
    };
    Ok(Frame {
        opcode,
        kind,
        file,
        func,
        location: Some(Location {
            line,
            end_line: line.checked_add(end_delta).ok_or_else(overflow)?,
            col,
            end_col: col.checked_add(end_col_delta).ok_or_else(overflow)?,
        }),
    })
}

/// What a frame stored without a location is, by its file and function.
fn kind_without_location(file: &str, func: &str) -> FrameKind {
    match (file, func) {
        ("~", "<GC>") => FrameKind::Gc,
        ("~", "<native>") => FrameKind::Native,
        ("<unknown file>", _) => FrameKind::Unreadable,
        ("<task>", _) => FrameKind::Task,
        _ => FrameKind::Python,
    }
}

/// How tachyon's writer stores a native function (`--native-frames`):
/// line 0 to 0, no columns (line, end line, column, end column).
pub const NATIVE_LOCATION: (i32, i32, i32, i32) = (0, 0, -1, -1);

/// A native frame's file: a module's file name (`libc.so.6`,
/// `spinext.cpython-314-x86_64-linux-gnu.so`, `python3.14`, `[vdso]`),
/// never a path, a `.py` file nor a `<...>` pseudo-file. With
/// [`NATIVE_LOCATION`] it tells a native frame from a Python one (whose
/// line 0 is its module's first instruction, with columns).
/// A native frame with a source line (`--native-frames` with debug
/// information) is stored as any frame with a line and no columns; its
/// file, a C, C++, Rust, Fortran or assembly source, tells it apart (no
/// Python code object names one).
fn is_native_source(file: &str) -> bool {
    const SOURCES: &[&str] = &[
        "c", "h", "cc", "cpp", "cxx", "c++", "hh", "hpp", "hxx", "inc", "rs", "s", "S", "asm", "f",
        "f90", "f95", "F", "F90",
    ];
    file.rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && SOURCES.contains(&ext))
}

fn is_module_name(file: &str) -> bool {
    !file.is_empty()
        && !file.contains('/')
        && !file.ends_with(".py")
        && !file.starts_with('<')
        && file != crate::model::NO_FILE
}

fn data_error(msg: impl Into<String>) -> Error {
    Error::Io {
        context: String::new(),
        cause: io::Error::new(io::ErrorKind::InvalidData, msg.into()),
    }
}

/// Bytes of the (decompressed) sample data, with a count of those read.
struct Bytes<R: Read> {
    r: R,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    consumed: u64,
}

impl<R: Read> Bytes<R> {
    fn new(r: R) -> Self {
        Bytes {
            r,
            buf: vec![0u8; 64 * 1024].into_boxed_slice(),
            pos: 0,
            len: 0,
            consumed: 0,
        }
    }

    /// The next byte, or `None` at the end of the data.
    fn next(&mut self) -> Result<Option<u8>> {
        if self.pos == self.len {
            let n = loop {
                match self.r.read(&mut self.buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        return Err(Error::Io {
                            context: String::new(),
                            cause: e,
                        });
                    }
                }
            };
            if n == 0 {
                return Ok(None);
            }
            self.pos = 0;
            self.len = n;
        }
        self.pos += 1;
        self.consumed += 1;
        Ok(Some(self.buf[self.pos - 1]))
    }
}

/// Decodes records; see [`BinaryReader::replay`].
struct Decoder<'a> {
    info: &'a FileInfo,
    frame_ids: &'a [FrameId],
    names: &'a Names,
    max_depth: usize,
    /// A recording cut short: the counts are not known beforehand, and
    /// the data ends at the first thing that is not whole.
    lenient: bool,
}

/// One thread's stack and time as the records so far leave them.
struct ThreadState {
    tid: u64,
    iid: u32,
    name: Option<StrId>,
    prev: Vec<FrameId>,
    prev_ts: u64,
}

/// What decoding keeps from one record to the next.
struct DecodeState {
    threads: Vec<ThreadState>,
    index: HashMap<(u64, u32), usize>,
    /// The sample handed out, reused.
    sample: Sample,
    /// The frames a record pushes, reused.
    pushed: Vec<FrameId>,
    /// Samples handed out so far.
    seen: u64,
}

impl DecodeState {
    fn new() -> Self {
        DecodeState {
            threads: Vec::new(),
            index: HashMap::new(),
            sample: Sample {
                pid: None,
                timestamp_us: 0,
                threads: vec![ThreadSample::default()],
            },
            pushed: Vec::new(),
            seen: 0,
        }
    }
}

/// A record's fixed part.
struct RecordHeader {
    tid: u64,
    iid: u32,
    enc: u8,
}

/// The bytes of one record: any end of the data inside it is a record
/// cut short.
struct Record<'b, R: Read> {
    b: &'b mut Bytes<R>,
    /// Where it starts in the data.
    start: u64,
}

impl<R: Read> Record<'_, R> {
    fn byte(&mut self) -> Result<u8> {
        let start = self.start;
        let b = &mut *self.b;
        b.next()?.ok_or_else(|| {
            data_error(format!(
                "truncated sample data: {} trailing bytes",
                b.consumed - start
            ))
        })
    }

    fn varint(&mut self, what: &str) -> Result<u64> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let byte = self.byte()?;
            if i == 9 && byte > 1 {
                return Err(data_error(format!("{what}: varint overflows 64 bits")));
            }
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(data_error(format!("{what}: varint longer than 10 bytes")))
    }

    /// The fixed part, whose first byte was read.
    fn header(&mut self, first: u8, big_endian: bool) -> Result<RecordHeader> {
        let mut hdr = [0u8; RECORD_HEADER_SIZE];
        hdr[0] = first;
        for byte in &mut hdr[1..] {
            *byte = self.byte()?;
        }
        let fx = Fixed {
            b: &hdr,
            be: big_endian,
        };
        Ok(RecordHeader {
            tid: fx.u64(0),
            iid: fx.u32(8),
            enc: hdr[12],
        })
    }

    /// A sample's timestamp delta and status byte.
    fn time_and_status(&mut self) -> Result<(u64, u8)> {
        let delta = self.varint("timestamp")?;
        Ok((delta, self.byte()?))
    }
}

impl Decoder<'_> {
    /// Decode every record of `b`, handing each sample to `f`; how many.
    fn run<R: Read>(&self, b: &mut Bytes<R>, f: &mut dyn FnMut(&Sample)) -> Result<u64> {
        let mut st = DecodeState::new();
        match self.decode(b, f, &mut st) {
            Err(Error::Io { cause, .. })
                if self.lenient && cause.kind() == io::ErrorKind::InvalidData =>
            {
                Ok(st.seen)
            }
            r => r,
        }
    }

    /// The most samples and threads the data may hold.
    fn limits(&self) -> (u64, u32) {
        if self.lenient {
            (u64::MAX, u32::MAX)
        } else {
            (self.info.sample_count, self.info.thread_count)
        }
    }

    fn decode<R: Read>(
        &self,
        b: &mut Bytes<R>,
        f: &mut dyn FnMut(&Sample),
        st: &mut DecodeState,
    ) -> Result<u64> {
        while let Some(first) = b.next()? {
            let start = b.consumed - 1;
            let mut rec = Record { b: &mut *b, start };
            self.record(&mut rec, first, st, f)?;
        }
        self.check_totals(st)
    }

    /// One record, whose first byte was read.
    fn record<R: Read>(
        &self,
        rec: &mut Record<R>,
        first: u8,
        st: &mut DecodeState,
        f: &mut dyn FnMut(&Sample),
    ) -> Result<()> {
        let h = rec.header(first, self.info.big_endian)?;
        if h.enc == ENC_BLOCK && self.info.compression == Compression::None {
            return self.skip_block(rec, &h);
        }
        let ti = self.thread_slot(st, &h)?;
        match h.enc {
            ENC_REPEAT => self.repeat(rec, st, ti, f),
            ENC_FULL => self.full(rec, st, ti, f),
            ENC_SUFFIX => self.suffix(rec, st, ti, f),
            ENC_POP_PUSH => self.pop_push(rec, st, ti, f),
            e => Err(data_error(format!("unknown record encoding {e}"))),
        }
    }

    /// The record's thread, new ones within the header's count.
    fn thread_slot(&self, st: &mut DecodeState, h: &RecordHeader) -> Result<usize> {
        if let Some(&i) = st.index.get(&(h.tid, h.iid)) {
            return Ok(i);
        }
        let (_, max_threads) = self.limits();
        if st.threads.len() as u64 >= u64::from(max_threads) {
            return Err(data_error(format!(
                "more threads than the header's {}",
                self.info.thread_count
            )));
        }
        st.threads.push(ThreadState {
            tid: h.tid,
            iid: h.iid,
            name: self.names.get(&(h.tid, h.iid)).copied(),
            prev: Vec::new(),
            prev_ts: self.info.start_time_us,
        });
        st.index.insert((h.tid, h.iid), st.threads.len() - 1);
        Ok(st.threads.len() - 1)
    }

    /// A block record: a recording's tables, not samples (the tables of a
    /// whole file hold the same).
    fn skip_block<R: Read>(&self, rec: &mut Record<R>, h: &RecordHeader) -> Result<()> {
        for _ in 0..h.iid {
            rec.byte()?;
        }
        Ok(())
    }

    /// REPEAT: samples of the thread's previous stack (none: the filler
    /// where a block record was).
    fn repeat<R: Read>(
        &self,
        rec: &mut Record<R>,
        st: &mut DecodeState,
        ti: usize,
        f: &mut dyn FnMut(&Sample),
    ) -> Result<()> {
        let count = rec.varint("repeat count")?;
        if count > self.limits().0 - st.seen {
            return Err(self.too_many_samples());
        }
        for _ in 0..count {
            let (delta, status) = rec.time_and_status()?;
            self.emit(st, ti, delta, status, f)?;
        }
        Ok(())
    }

    /// FULL: a stack of its own.
    fn full<R: Read>(
        &self,
        rec: &mut Record<R>,
        st: &mut DecodeState,
        ti: usize,
        f: &mut dyn FnMut(&Sample),
    ) -> Result<()> {
        let (delta, status) = rec.time_and_status()?;
        self.push_onto(rec, st, ti, 0)?;
        self.emit(st, ti, delta, status, f)
    }

    /// SUFFIX: frames pushed onto the outermost `shared` of the previous
    /// stack.
    fn suffix<R: Read>(
        &self,
        rec: &mut Record<R>,
        st: &mut DecodeState,
        ti: usize,
        f: &mut dyn FnMut(&Sample),
    ) -> Result<()> {
        let (delta, status) = rec.time_and_status()?;
        let depth = st.threads[ti].prev.len();
        let shared = rec.varint("shared frames")?;
        if shared > depth as u64 {
            return Err(data_error(format!(
                "a record shares {shared} frames of a {depth}-frame stack"
            )));
        }
        self.push_onto(rec, st, ti, shared as usize)?;
        self.emit(st, ti, delta, status, f)
    }

    /// POP_PUSH: the previous stack, `pop` innermost frames off, frames
    /// pushed.
    fn pop_push<R: Read>(
        &self,
        rec: &mut Record<R>,
        st: &mut DecodeState,
        ti: usize,
        f: &mut dyn FnMut(&Sample),
    ) -> Result<()> {
        let (delta, status) = rec.time_and_status()?;
        let depth = st.threads[ti].prev.len();
        let pop = rec.varint("popped frames")?;
        if pop > depth as u64 {
            return Err(data_error(format!(
                "a record pops {pop} frames of a {depth}-frame stack"
            )));
        }
        self.push_onto(rec, st, ti, depth - pop as usize)?;
        self.emit(st, ti, delta, status, f)
    }

    /// The record's pushed frames (a count, then the indices) put onto
    /// the outermost `keep` frames of the thread's previous stack.
    fn push_onto<R: Read>(
        &self,
        rec: &mut Record<R>,
        st: &mut DecodeState,
        ti: usize,
        keep: usize,
    ) -> Result<()> {
        let n = rec.varint("frame count")?;
        self.read_frames(rec, n, &mut st.pushed)?;
        let pushed = &st.pushed;
        if pushed.len() + keep > self.max_depth {
            return Err(data_error(format!(
                "a stack of {} frames (more than {})",
                pushed.len() + keep,
                self.max_depth
            )));
        }
        let prev = &mut st.threads[ti].prev;
        let tail = prev.len() - keep;
        prev.drain(..tail);
        prev.splice(0..0, pushed.iter().copied());
        Ok(())
    }

    /// `n` frame indices, resolved, into `out`.
    fn read_frames<R: Read>(
        &self,
        rec: &mut Record<R>,
        n: u64,
        out: &mut Vec<FrameId>,
    ) -> Result<()> {
        out.clear();
        if n > self.max_depth as u64 {
            return Err(data_error(format!(
                "a stack of {n} frames (more than {})",
                self.max_depth
            )));
        }
        for _ in 0..n {
            let i = rec.varint("frame index")?;
            let id = usize::try_from(i)
                .ok()
                .and_then(|i| self.frame_ids.get(i))
                .ok_or_else(|| {
                    data_error(format!(
                        "frame index {i} out of range ({} frames)",
                        self.frame_ids.len()
                    ))
                })?;
            out.push(*id);
        }
        Ok(())
    }

    /// Hand out a sample of thread `ti`'s stack, `delta` after its last.
    fn emit(
        &self,
        st: &mut DecodeState,
        ti: usize,
        delta: u64,
        status: u8,
        f: &mut dyn FnMut(&Sample),
    ) -> Result<()> {
        if st.seen >= self.limits().0 {
            return Err(self.too_many_samples());
        }
        st.seen += 1;
        let th = &mut st.threads[ti];
        th.prev_ts = th.prev_ts.wrapping_add(delta);
        st.sample.timestamp_us = th.prev_ts;
        let t = &mut st.sample.threads[0];
        t.tid = th.tid;
        t.interpreter_id = i64::from(th.iid);
        t.name = th.name;
        t.status = u32::from(status);
        t.frames.clear();
        t.frames.extend_from_slice(&th.prev);
        f(&st.sample);
        Ok(())
    }

    fn too_many_samples(&self) -> Error {
        data_error(format!(
            "more samples than the header's {}",
            self.info.sample_count
        ))
    }

    /// At the end of the data: the counts the header gave, unless the
    /// file was cut short.
    fn check_totals(&self, st: &DecodeState) -> Result<u64> {
        let seen = st.seen;
        if self.lenient {
            return Ok(seen);
        }
        if st.threads.len() as u64 != u64::from(self.info.thread_count) {
            return Err(data_error(format!(
                "thread count mismatch: the header says {}, the data holds {}",
                self.info.thread_count,
                st.threads.len()
            )));
        }
        if seen != self.info.sample_count {
            return Err(data_error(format!(
                "sample count mismatch: the header says {}, the data holds {seen}",
                self.info.sample_count
            )));
        }
        Ok(seen)
    }
}

/// The compressed sample data as a stream: zstd frames (tachyon writes
/// one per block, the reference one in all) and skippable frames (the
/// blocks' tables, skipped here), ending exactly where the region ends,
/// expanding to at most `cap` bytes.
struct ZstdRegion<R: Read> {
    src: R,
    inbuf: Box<[u8]>,
    in_pos: usize,
    in_len: usize,
    src_eof: bool,
    dec: zstd::stream::raw::Decoder<'static>,
    /// Between frames: the region may end here.
    at_boundary: bool,
    out_total: u64,
    cap: u64,
}

impl<R: Read> ZstdRegion<R> {
    /// `may_be_empty`: a region of no frame at all is data (a recording
    /// cut before its first block), not a truncated frame.
    fn new(src: R, cap: u64, may_be_empty: bool) -> Result<Self> {
        let dec = zstd::stream::raw::Decoder::new()
            .map_err(|e| Error::io("cannot start the zstd decoder", e))?;
        Ok(ZstdRegion {
            src,
            inbuf: vec![0u8; 64 * 1024].into_boxed_slice(),
            in_pos: 0,
            in_len: 0,
            src_eof: false,
            dec,
            at_boundary: may_be_empty,
            out_total: 0,
            cap,
        })
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl<R: Read> Read for ZstdRegion<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        use zstd::stream::raw::Operation;
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            if self.in_pos == self.in_len && !self.src_eof {
                let n = self.src.read(&mut self.inbuf)?;
                if n == 0 {
                    self.src_eof = true;
                } else {
                    self.in_pos = 0;
                    self.in_len = n;
                }
            }
            let input = &self.inbuf[self.in_pos..self.in_len];
            if input.is_empty() && self.at_boundary {
                return Ok(0);
            }
            let st = self
                .dec
                .run_on_buffers(input, out)
                .map_err(|e| bad(format!("zstd: {e}")))?;
            self.in_pos += st.bytes_read;
            if st.bytes_read > 0 || st.bytes_written > 0 {
                self.at_boundary = false;
            }
            if st.remaining == 0 {
                self.at_boundary = true;
            }
            self.out_total += st.bytes_written as u64;
            if self.out_total > self.cap {
                return Err(bad(format!(
                    "the sample data decompresses to more than {} bytes",
                    self.cap
                )));
            }
            if st.bytes_written > 0 {
                return Ok(st.bytes_written);
            }
            if st.bytes_read == 0 {
                if self.in_pos == self.in_len && self.src_eof {
                    return Err(bad(
                        "truncated compressed sample data (incomplete zstd frame)".into(),
                    ));
                }
                // zstd always takes input it is given; never spin.
                return Err(bad("the zstd decoder made no progress".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_frames_are_told_by_their_location_and_module_name() {
        assert!(is_module_name("libc.so.6"));
        assert!(is_module_name("python3.14"));
        assert!(is_module_name("[vdso]"));
        assert!(is_module_name("spinext.cpython-314-x86_64-linux-gnu.so"));
        // Python files: paths, .py names, pseudo-files.
        assert!(!is_module_name("/srv/app/jobs.py"));
        assert!(!is_module_name("jobs.py"));
        assert!(!is_module_name("<frozen importlib._bootstrap>"));
        assert!(!is_module_name("/usr/bin/pip"));
        assert!(!is_module_name("~"));
        assert!(!is_module_name(""));
    }
    use crate::binfmt::writer::{BinaryWriter, WriterOptions};
    use crate::binfmt::{EncodingStats, put_varint};
    use crate::model::Frame;

    #[test]
    fn native_frames_come_back_native_with_and_without_a_line() {
        let mut t = FrameTable::new();
        let mut native = |file: &str, func: &str, line: Option<i32>| {
            let (file, func) = (t.intern_str(file), t.intern_str(func));
            t.intern(Frame {
                opcode: None,
                kind: FrameKind::NativeFunction,
                file,
                func,
                location: line.map(|line| crate::model::Location {
                    line,
                    end_line: line,
                    col: -1,
                    end_col: -1,
                }),
            })
        };
        let frames = vec![
            native("libc.so.6", "clock_nanosleep", None),
            native(
                "/build/python3.14/Modules/timemodule.c",
                "time_sleep",
                Some(2187),
            ),
        ];
        let (bytes, _) = write(&[sample(1000, frames.clone())], &t, Compression::None);
        let mut back = Vec::new();
        BinaryReader::new(io::Cursor::new(&bytes), "t".into(), ReadOptions::default())
            .unwrap()
            .replay(|s, tab| {
                for &id in &s.threads[0].frames {
                    let f = tab.frame(id);
                    back.push((f.kind, tab.str(f.file).to_string(), f.line()));
                }
            })
            .unwrap();
        assert_eq!(
            back,
            [
                (FrameKind::NativeFunction, "libc.so.6".into(), 0),
                (
                    FrameKind::NativeFunction,
                    "/build/python3.14/Modules/timemodule.c".into(),
                    2187
                ),
            ]
        );
        assert!(is_native_source("timemodule.c") && is_native_source("/x/lib.rs"));
        assert!(!is_native_source("/srv/app.py") && !is_native_source(".c"));
    }

    fn table() -> (FrameTable, Vec<FrameId>) {
        let mut t = FrameTable::new();
        let file = t.intern_str("/a/m.py");
        let ids = (0..8)
            .map(|i| {
                let func = t.intern_str(&format!("f{i}"));
                t.intern(Frame {
                    opcode: None,
                    kind: FrameKind::Python,
                    file,
                    func,
                    location: Some(crate::model::Location {
                        line: i + 1,
                        end_line: i + 2,
                        col: 0,
                        end_col: 5,
                    }),
                })
            })
            .collect();
        (t, ids)
    }

    fn sample(ts: u64, frames: Vec<FrameId>) -> Sample {
        Sample {
            pid: None,
            timestamp_us: ts,
            threads: vec![ThreadSample {
                tid: 42,
                interpreter_id: 0,
                status: 3,
                frames,
                name: None,
            }],
        }
    }

    fn write(samples: &[Sample], t: &FrameTable, c: Compression) -> (Vec<u8>, EncodingStats) {
        let mut w = BinaryWriter::new(
            io::Cursor::new(Vec::new()),
            "t".into(),
            WriterOptions {
                compression: c,
                start_time_us: 500,
                ..WriterOptions::default()
            },
        )
        .unwrap();
        for s in samples {
            w.write_sample(s, t);
        }
        let enc = w.encoding_stats();
        (w.finish().unwrap().into_inner(), enc)
    }

    fn read(b: &[u8], opts: ReadOptions) -> Result<Vec<Sample>> {
        BinaryReader::new(io::Cursor::new(b), "t".into(), opts)?.read_samples()
    }

    /// The writer's output, shared: what a reader would find in the file
    /// at any moment of the recording.
    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::Mutex<io::Cursor<Vec<u8>>>>);

    impl io::Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().write(b)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl io::Seek for Shared {
        fn seek(&mut self, p: SeekFrom) -> io::Result<u64> {
            self.0.lock().unwrap().seek(p)
        }
    }

    impl Shared {
        fn bytes(&self) -> Vec<u8> {
            self.0.lock().unwrap().get_ref().clone()
        }
    }

    fn recovering() -> ReadOptions {
        ReadOptions {
            recover: true,
            ..ReadOptions::default()
        }
    }

    /// (tid, time, function names) of every stored stack, and the thread
    /// names (a file keeps each thread's latest).
    fn stacks(bytes: &[u8], opts: ReadOptions) -> Result<(FileInfo, Vec<String>)> {
        stacks_and_names(bytes, opts).map(|(i, s, _)| (i, s))
    }

    fn stacks_and_names(
        bytes: &[u8],
        opts: ReadOptions,
    ) -> Result<(FileInfo, Vec<String>, Vec<String>)> {
        let mut r = BinaryReader::new(io::Cursor::new(bytes), "t".into(), opts)?;
        let mut out = Vec::new();
        let mut tnames = Vec::new();
        r.replay(|s, tab| {
            let th = &s.threads[0];
            let names: Vec<&str> = th
                .frames
                .iter()
                .map(|&i| tab.str(tab.frame(i).func))
                .collect();
            out.push(format!("{} {} {names:?}", th.tid, s.timestamp_us));
            if let Some(n) = th.name {
                tnames.push(format!("{} {}", th.tid, tab.str(n)));
            }
        })?;
        tnames.dedup();
        Ok((r.info().clone(), out, tnames))
    }

    /// 240 samples of two threads with new frames (until sample 56) and a
    /// name along the way; a checkpoint every `per_block` calls. Returns the writer's output
    /// after each block (taken as it is being written, as a reader of a
    /// killed recording would find it) and the finished file.
    fn blocks_recording(c: Compression, per_block: usize) -> (Vec<(u64, Vec<u8>)>, Vec<u8>) {
        let (mut t, f) = table();
        let worker = t.intern_str("Worker-1");
        let out = Shared::default();
        let mut w = BinaryWriter::new(
            out.clone(),
            "t".into(),
            WriterOptions {
                compression: c,
                start_time_us: 500,
                // Each checkpoint may end a frame (the test takes them
                // faster than once a second).
                frame_every: std::time::Duration::ZERO,
                ..WriterOptions::default()
            },
        )
        .unwrap();
        let mut snapshots = Vec::new();
        for i in 0..240u64 {
            // New frames keep coming (f[0..8] over time); runs repeat.
            let depth = 1 + (i / 7 % 8) as usize;
            let mut s = sample(1000 + i * 100, f[..depth].to_vec());
            let mut other = s.threads[0].clone();
            other.tid = 43;
            other.frames = vec![f[(i / 30 % 8) as usize]];
            if i >= 40 {
                other.name = Some(worker);
            }
            s.threads.push(other);
            w.write_sample(&s, &t);
            if (i + 1) % per_block as u64 == 0 {
                w.checkpoint();
                snapshots.push((w.sample_count(), out.bytes()));
            }
        }
        w.finish().unwrap();
        (snapshots, out.bytes())
    }

    #[test]
    fn a_killed_recording_is_read_up_to_its_last_block() {
        for c in [Compression::Zstd, Compression::None] {
            a_killed_recording_of(c);
        }
    }

    fn a_killed_recording_of(c: Compression) {
        let (snaps, whole) = blocks_recording(c, 40);
        let (info, all) = stacks(&whole, ReadOptions::default()).unwrap();
        assert_eq!((info.sample_count, info.truncated), (480, false));
        assert_eq!(snaps.len(), 6);
        for (n, bytes) in &snaps {
            // Strictly, it is refused with a reason.
            let e = stacks(bytes, ReadOptions::default()).unwrap_err();
            assert!(e.to_string().contains("never finished"), "{e}");
            let (info, got) = stacks(bytes, recovering()).unwrap();
            assert!(info.truncated);
            assert_eq!(info.sample_count, *n);
            assert_eq!(got.len() as u64, *n);
            assert_eq!(got[..], all[..got.len()]);
        }
        // The thread's name (given at sample 40) comes with the next block
        // table (the block of 40-80 brings new frames).
        let names = |i: usize| stacks_and_names(&snaps[i].1, recovering()).unwrap().2;
        assert!(names(0).is_empty());
        assert_eq!(names(1), ["43 Worker-1"]);
    }

    #[test]
    fn a_cut_whose_last_bytes_read_as_its_size_is_still_a_cut() {
        // tests/killed.rs met it once: a finished 9,539-byte recording cut
        // at 512, whose bytes where a footer would be gave 512.
        let (_, whole) = blocks_recording(Compression::Zstd, 40);
        let cut = whole.len() / 2;
        let mut bytes = whole[..cut].to_vec();
        let at = cut - FOOTER_SIZE as usize + 8;
        bytes[at..at + 8].copy_from_slice(&(cut as u64).to_le_bytes());
        let (info, _) = stacks(&bytes, recovering()).unwrap();
        assert!(info.truncated);
    }

    #[test]
    fn a_recording_cut_at_any_byte_gives_every_whole_block_before_the_cut() {
        // A finished uncompressed file keeps no block tables: its
        // recording is cut.
        for (snap_i, c) in [
            (None, Compression::Zstd),
            (Some(2), Compression::Zstd),
            (Some(2), Compression::None),
            (Some(5), Compression::None),
        ] {
            let (snaps, whole) = blocks_recording(c, 40);
            let bytes = match snap_i {
                Some(i) => snaps[i].1.clone(),
                None => whole.clone(),
            };
            let (_, all) = stacks(&whole, ReadOptions::default()).unwrap();
            let mut last = 0;
            for cut in 0..=bytes.len() {
                let r = stacks(&bytes[..cut], recovering());
                if cut < HEADER_SIZE as usize {
                    let e = r.unwrap_err().to_string();
                    assert!(e.contains("not a binary sampling profile"), "{cut}: {e}");
                    continue;
                }
                let (info, got) = r.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
                let n = got.len() as u64;
                assert_eq!(
                    info.truncated,
                    snap_i.is_some() || cut < whole.len(),
                    "cut at {cut}"
                );
                assert!(n >= last, "cut at {cut}: {n} samples after {last}");
                // Cut where the writer had flushed: all it had written.
                if let Some((k, _)) = snaps.iter().find(|(_, b)| b.len() == cut) {
                    assert_eq!(n, *k, "cut at {cut}, a flush point");
                }
                assert_eq!(got[..], all[..got.len()], "cut at {cut}");
                last = n;
            }
            let want = snap_i.map_or(480, |i| snaps[i].0);
            assert_eq!(last, want);
        }
    }

    #[test]
    fn a_damaged_recording_cut_short_is_an_error_or_a_read_never_a_panic() {
        let (snaps, whole) = blocks_recording(Compression::Zstd, 40);
        let (raw_snaps, _) = blocks_recording(Compression::None, 40);
        for bytes in [&snaps[3].1, &whole, &raw_snaps[3].1] {
            for at in 0..bytes.len() {
                for x in [0x01u8, 0x80, 0xff] {
                    let mut b = bytes.clone();
                    b[at] ^= x;
                    // Cut too, so that the recovery path reads it.
                    let cut = &b[..bytes.len() - 1];
                    match stacks(cut, recovering()) {
                        Ok((info, got)) => assert_eq!(info.sample_count, got.len() as u64),
                        Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
                    }
                }
            }
        }
    }

    #[test]
    fn a_finished_uncompressed_recording_has_fillers_for_its_block_records() {
        let (snaps, whole) = blocks_recording(Compression::None, 40);
        let tag = |b: &[u8]| b.windows(8).filter(|w| w == b"TACHBLK1").count();
        let (_, last) = snaps.last().unwrap();
        assert!(tag(last) >= 2, "{} block records", tag(last));
        assert_eq!(tag(&whole), 0);
        // The same records where they were, and REPEATs of no sample
        // (thread 42, the first) where each block record was.
        let string_off = u64::from_le_bytes(whole[40..48].try_into().unwrap()) as usize;
        assert_eq!(string_off, last.len());
        let mut at = 64;
        let mut fillers = 0;
        while at < string_off {
            if last[at + 12] == crate::binfmt::ENC_BLOCK {
                let n = 13 + u32::from_le_bytes(last[at + 8..at + 12].try_into().unwrap()) as usize;
                let f = crate::binfmt::filler_records(42, 0, n);
                assert_eq!(whole[at..at + n], f[..]);
                fillers += 1;
                at += n;
                continue;
            }
            let n = 13 + record_body_len(&mut &last[at + 13..], last[at + 12]).unwrap() as usize;
            assert_eq!(whole[at..at + n], last[at..at + n]);
            at += n;
        }
        assert_eq!(fillers, tag(last));
        let (info, got) = stacks(&whole, ReadOptions::default()).unwrap();
        assert_eq!((info.truncated, got.len()), (false, 480));
    }

    #[test]
    fn an_idle_thread_comes_back_intact_after_its_memory_is_released() {
        use crate::binfmt::writer::IDLE_THREAD_US;
        let (t, f) = table();
        let mut samples = vec![sample(1000, vec![f[0], f[1]])];
        // Another thread alone for longer than the idle time.
        let mut ts = 2000;
        while ts < 3000 + IDLE_THREAD_US {
            let mut s = sample(ts, vec![f[2]]);
            s.threads[0].tid = 43;
            samples.push(s);
            ts += 100_000;
        }
        // The idle thread again: an empty stack (the writer's `prev` is
        // empty now, the reader's is not), then its old stack.
        for frames in [vec![], vec![f[0], f[1]], vec![f[0], f[1]], vec![]] {
            ts += 1000;
            samples.push(sample(ts, frames));
        }
        let (bytes, _) = write(&samples, &t, Compression::None);
        let mut r = BinaryReader::new(
            io::Cursor::new(&bytes[..]),
            "t".into(),
            ReadOptions::default(),
        )
        .unwrap();
        let got = r.read_samples().unwrap();
        let tab = r.frames().clone();
        let view = |ss: &[Sample], tab: &FrameTable| {
            let mut v: Vec<(u64, u64, Vec<String>)> = ss
                .iter()
                .flat_map(|s| s.threads.iter().map(move |th| (th, s.timestamp_us)))
                .map(|(th, ts)| {
                    let names = th
                        .frames
                        .iter()
                        .map(|&i| tab.str(tab.frame(i).func).to_string());
                    (th.tid, ts, names.collect())
                })
                .collect();
            v.sort();
            v
        };
        assert_eq!(view(&got, &tab), view(&samples, &t));
    }

    #[test]
    fn thread_names_round_trip_as_unreferenced_strings() {
        let (mut t, f) = table();
        let main = t.intern_str("MainThread");
        let renamed = t.intern_str("ThreadPoolExecutor-0_1");
        let mut a = sample(1000, vec![f[0]]);
        a.threads[0].name = Some(main);
        let mut other = a.threads[0].clone();
        other.tid = 43;
        other.name = None;
        a.threads.push(other);
        // The latest name is the one kept.
        let mut b = sample(2000, vec![f[0]]);
        b.threads[0].name = Some(renamed);
        let (bytes, _) = write(&[a, b], &t, Compression::None);
        let r = BinaryReader::new(
            io::Cursor::new(&bytes[..]),
            "t".into(),
            ReadOptions::default(),
        )
        .unwrap();
        // The file, f0 and one record: one string more than the frames need.
        assert_eq!(r.info().string_count, 3);
        let mut r = r;
        let got = r.read_samples().unwrap();
        let tab = r.frames().clone();
        let names: Vec<(u64, Option<&str>)> = got
            .iter()
            .flat_map(|s| &s.threads)
            .map(|t| (t.tid, t.name.map(|n| tab.str(n))))
            .collect();
        assert_eq!(
            names,
            vec![
                (42, Some("ThreadPoolExecutor-0_1")),
                (43, None),
                (42, Some("ThreadPoolExecutor-0_1"))
            ]
        );
        // The record is no frame's string.
        assert!(
            tab.frames()
                .iter()
                .all(|fr| !tab.str(fr.func).contains('\0'))
        );
        assert_eq!(
            crate::binfmt::parse_thread_name_record(&crate::binfmt::thread_name_record(
                7, 2, "a:b"
            )),
            Some((7, 2, "a:b"))
        );
        assert_eq!(crate::binfmt::parse_thread_name_record("MainThread"), None);
    }

    #[test]
    fn every_encoding_round_trips() {
        let (t, f) = table();
        // innermost first
        let stacks = [
            vec![],                                   // new thread, empty: REPEAT
            vec![f[0], f[1]],                         // FULL
            vec![f[0], f[1]],                         // REPEAT
            vec![f[2], f[0], f[1]],                   // SUFFIX (push)
            vec![f[3], f[1]],                         // POP_PUSH (pop 2, push 1)
            vec![f[4], f[5], f[6], f[7]],             // FULL (nothing shared)
            vec![f[0], f[1], f[2], f[3], f[5], f[7]], // shared 1 < 6/2: FULL
            vec![f[1], f[2], f[3], f[5], f[7]],       // POP_PUSH (pop 1)
        ];
        let samples: Vec<Sample> = stacks
            .iter()
            .enumerate()
            .map(|(i, s)| sample(400 + i as u64 * 10, s.clone()))
            .collect();
        for c in [Compression::None, Compression::Zstd] {
            let (bytes, enc) = write(&samples, &t, c);
            assert_eq!(
                (
                    enc.repeat_records,
                    enc.repeat_samples,
                    enc.full_records,
                    enc.suffix_records,
                    enc.pop_push_records
                ),
                (2, 2, 3, 1, 2)
            );
            let mut r =
                BinaryReader::new(io::Cursor::new(&bytes), "t".into(), ReadOptions::default())
                    .unwrap();
            assert_eq!(r.info().sample_count, 8);
            assert_eq!(r.info().thread_count, 1);
            assert_eq!(r.info().start_time_us, 500);
            let got = r.read_samples().unwrap();
            assert_eq!(got.len(), samples.len());
            for (g, w) in got.iter().zip(&samples) {
                assert_eq!(g.timestamp_us, w.timestamp_us);
                let (gt, wt) = (&g.threads[0], &w.threads[0]);
                assert_eq!((gt.tid, gt.status), (wt.tid, wt.status));
                let names =
                    |tab: &FrameTable, ids: &[FrameId]| -> Vec<(String, Option<Location>)> {
                        ids.iter()
                            .map(|&i| {
                                let fr = tab.frame(i);
                                (tab.str(fr.func).to_owned(), fr.location)
                            })
                            .collect()
                    };
                assert_eq!(names(r.frames(), &gt.frames), names(&t, &wt.frames));
            }
        }
    }

    #[test]
    fn empty_profile_and_synthetic_frames() {
        let (t, _) = table();
        for c in [Compression::None, Compression::Zstd] {
            let (bytes, _) = write(&[], &t, c);
            assert!(read(&bytes, ReadOptions::default()).unwrap().is_empty());
        }
        let mut t = FrameTable::new();
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let (bytes, _) = write(&[sample(1, vec![gc])], &t, Compression::Zstd);
        let mut r =
            BinaryReader::new(io::Cursor::new(&bytes), "t".into(), ReadOptions::default()).unwrap();
        let s = r.read_samples().unwrap();
        let f = r.frames().frame(s[0].threads[0].frames[0]);
        assert_eq!(*f, *t.frame(gc));
    }

    #[test]
    fn decompression_is_capped() {
        let (t, f) = table();
        let samples: Vec<Sample> = (0..5000)
            .map(|i| sample(i, vec![f[(i % 8) as usize], f[0]]))
            .collect();
        let (bytes, _) = write(&samples, &t, Compression::Zstd);
        assert_eq!(read(&bytes, ReadOptions::default()).unwrap().len(), 5000);
        let e = read(
            &bytes,
            ReadOptions {
                max_decompressed: 1000,
                ..ReadOptions::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("more than 1000 bytes"), "{e}");
        let e = read(
            &bytes,
            ReadOptions {
                max_depth: 1,
                ..ReadOptions::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("more than 1"), "{e}");
    }

    /// A raw file around hand-made sample data.
    fn raw_file(data: &[u8], samples: u64) -> Vec<u8> {
        let (t, f) = table();
        let (bytes, _) = write(&[sample(1, vec![f[0]])], &t, Compression::None);
        let string_off = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
        let frame_off = u64::from_le_bytes(bytes[48..56].try_into().unwrap()) as usize;
        let mut out = bytes[..64].to_vec();
        out.extend_from_slice(data);
        let shift = data.len() as i64 - (string_off as i64 - 64);
        out.extend_from_slice(&bytes[string_off..]);
        let fix = |o: usize| ((o as i64 + shift) as u64).to_le_bytes();
        out[28..36].copy_from_slice(&samples.to_le_bytes());
        out[40..48].copy_from_slice(&fix(string_off));
        out[48..56].copy_from_slice(&fix(frame_off));
        let n = out.len();
        out[n - 24..n - 16].copy_from_slice(&(n as u64).to_le_bytes());
        out
    }

    fn record(enc: u8, body: &[u8]) -> Vec<u8> {
        let mut r = 42u64.to_le_bytes().to_vec();
        r.extend_from_slice(&0u32.to_le_bytes());
        r.push(enc);
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn hand_made_records() {
        // The harness itself: one FULL record of frame 0.
        let ok = raw_file(&record(ENC_FULL, &[5, 1, 1, 0]), 1);
        let s = read(&ok, ReadOptions::default()).unwrap();
        assert_eq!(s[0].timestamp_us, 505);
        let bad = |data: Vec<u8>, n: u64, want: &str| {
            let e = read(&raw_file(&data, n), ReadOptions::default()).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(want), "{msg:?} lacks {want:?}");
            assert!(!msg.contains('\n'));
        };
        bad(record(ENC_FULL, &[0xff; 11]), 1, "varint");
        bad(
            record(
                ENC_FULL,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            ),
            1,
            "overflows 64 bits",
        );
        bad(
            record(ENC_FULL, &[5, 1, 1, 9]),
            1,
            "frame index 9 out of range",
        );
        bad(
            record(ENC_FULL, &[5, 1, 1]),
            1,
            "truncated sample data: 16 trailing bytes",
        );
        bad(record(9, &[]), 1, "unknown record encoding 9");
        // A repeat of no sample (the reference's reader takes it too).
        let mut none = record(ENC_REPEAT, &[0x80, 0]);
        none.extend(record(ENC_FULL, &[5, 1, 1, 0]));
        assert_eq!(
            read(&raw_file(&none, 1), ReadOptions::default())
                .unwrap()
                .len(),
            1
        );
        bad(record(ENC_REPEAT, &[3, 1, 1]), 1, "more samples than");
        bad(
            record(ENC_SUFFIX, &[5, 1, 1, 0]),
            1,
            "shares 1 frames of a 0-frame",
        );
        bad(record(ENC_POP_PUSH, &[5, 1, 2, 0]), 1, "pops 2 frames");
        bad(record(ENC_FULL, &[5, 1, 1, 0]), 2, "sample count mismatch");
        bad(
            record(ENC_FULL, &[5, 1, 1, 0])[..7].to_vec(),
            1,
            "7 trailing bytes",
        );
        let mut two = record(ENC_FULL, &[5, 1, 1, 0]);
        let mut other = record(ENC_FULL, &[5, 1, 1, 0]);
        other[0] = 43;
        two.append(&mut other);
        bad(two, 2, "more threads than the header's 1");
        let mut v = Vec::new();
        put_varint(&mut v, u64::MAX);
        assert_eq!(v.len(), 10);
        let mut body = vec![];
        body.extend_from_slice(&v);
        body.extend_from_slice(&[1, 1, 0]);
        // A delta of 2^64 - 1 wraps, as the reference's arithmetic does.
        let s = read(
            &raw_file(&record(ENC_FULL, &body), 1),
            ReadOptions::default(),
        )
        .unwrap();
        assert_eq!(s[0].timestamp_us, 499);
    }
}
