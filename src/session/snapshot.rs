//! Snapshots: the target memory that samples read, saved to a file, and a
//! [`ProcessMemory`] that serves reads from such a file.
//!
//! [`Recorder`] wraps a live reader and keeps every range read through it;
//! [`record_passes`] runs fresh unwinders (main thread only, all threads)
//! for a few samples each, so the file serves a cold first sample and warm
//! later ones in either mode. [`Snapshot::from_recorder`] merges what was
//! read into sorted, disjoint ranges (a later read of the same bytes wins)
//! and carries what the unwinder needs besides memory: the runtime's
//! address, its binary's name, `Py_None`'s address and the offsets table.
//! For 3.13+ that is the table's own bytes, so [`Snapshot::from_bytes`]
//! rebuilds the [`Offsets`] through the same validated code as a live
//! attach; for 3.11/3.12 it is the version, whose carried layout is used.
//!
//! On disk: the magic `TACHSNAP`, a little-endian `u32` format version,
//! then the zstd-compressed payload (see [`Snapshot::to_bytes`]). A file is
//! untrusted input: every count and length is bounded and checked, a bad
//! file is an error that says so, never a panic. A read fully inside a
//! stored range succeeds; any other read fails as an unmapped read does.

use std::cell::{Cell, RefCell};
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::model::Sample;
use crate::offsets::{Offsets, PyVersion, RawTable, carried};
use crate::process::{ProcessMemory, ReadReq};
use crate::runtime::Runtime;
use crate::unwind::{UnwindOptions, Unwinder};

/// The first bytes of every snapshot file.
pub const MAGIC: &[u8; 8] = b"TACHSNAP";
/// The payload layout this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Largest payload, decompressed: far above what samples read (a deep
/// all-threads program reads a few MiB), far below what would hurt.
pub const MAX_PAYLOAD: u64 = 256 << 20;
/// Most ranges in one snapshot.
const MAX_RANGES: u32 = 1 << 20;
/// Most thread states (scheduler letters) in one snapshot.
const MAX_THREAD_STATES: u32 = 1 << 16;
/// Longest binary name kept.
const MAX_NAME: u32 = 4096;
/// Largest offsets table (3.15's is under 2 KiB).
const MAX_TABLE: u32 = 64 << 10;
/// zstd level for the payload: small files, still fast to write.
const ZSTD_LEVEL: i32 = 19;

/// Where the [`Offsets`] of a snapshot come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableSource {
    /// 3.13+: the bytes of the target's `_Py_DebugOffsets`.
    Debug(Vec<u8>),
    /// 3.11, 3.12: the `PY_VERSION_HEX` whose carried layout applies.
    Carried(u32),
}

/// A live reader that keeps a copy of every range read through it, and
/// every thread state asked of it. Disabled ([`Recorder::passthrough`]),
/// it only passes reads on.
pub struct Recorder<M> {
    inner: M,
    on: bool,
    reads: RefCell<Vec<(u64, Box<[u8]>)>>,
    bytes: Cell<u64>,
    overflow: Cell<bool>,
    states: RefCell<Vec<(u64, char)>>,
}

impl<M> Recorder<M> {
    /// A reader that records.
    pub fn new(inner: M) -> Self {
        Self::with(inner, true)
    }

    /// A reader that only passes reads on.
    pub fn passthrough(inner: M) -> Self {
        Self::with(inner, false)
    }

    fn with(inner: M, on: bool) -> Self {
        Recorder {
            inner,
            on,
            reads: RefCell::new(Vec::new()),
            bytes: Cell::new(0),
            overflow: Cell::new(false),
            states: RefCell::new(Vec::new()),
        }
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Bytes recorded so far (repeated reads counted each time).
    pub fn recorded_bytes(&self) -> u64 {
        self.bytes.get()
    }

    fn keep(&self, addr: u64, buf: &[u8]) {
        if !self.on || buf.is_empty() || self.overflow.get() {
            return;
        }
        if addr.checked_add(buf.len() as u64).is_none() {
            // No reader returns such bytes; keep the ranges well formed.
            return;
        }
        let total = self.bytes.get() + buf.len() as u64;
        if total > MAX_PAYLOAD {
            self.overflow.set(true);
            return;
        }
        self.bytes.set(total);
        self.reads.borrow_mut().push((addr, buf.into()));
    }
}

impl<M: ProcessMemory> ProcessMemory for Recorder<M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(addr, buf)?;
        self.keep(addr, buf);
        Ok(())
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        self.inner.read_many(reqs)?;
        for r in reqs.iter() {
            self.keep(r.addr, r.buf);
        }
        Ok(())
    }

    /// Passed through (a dump's fallback names), not kept in the file.
    fn thread_comm(&self, tid: u64) -> Option<String> {
        self.inner.thread_comm(tid)
    }

    fn os_thread_state(&self, tid: u64) -> Option<char> {
        let st = self.inner.os_thread_state(tid);
        if let (true, Some(c)) = (self.on, st) {
            let mut states = self.states.borrow_mut();
            match states.iter_mut().find(|(t, _)| *t == tid) {
                Some(s) => s.1 = c,
                None => states.push((tid, c)),
            }
        }
        st
    }
}

/// Sample through `rec` with fresh unwinders, main thread only and then
/// all threads, `samples` times each, so that what it records serves a
/// cold first sample and warm later ones in either mode. Returns how many
/// samples succeeded.
pub fn record_passes<M: ProcessMemory>(
    rec: &Recorder<M>,
    pid: i32,
    runtime: &Runtime,
    samples: usize,
) -> usize {
    let mut ok = 0;
    let mut s = Sample::default();
    for all_threads in [false, true] {
        let opts = UnwindOptions {
            all_threads,
            native: true,
            gc: true,
            cpu_status: true,
            opcodes: false,
            frame_cache: false,
        };
        let mut u = Unwinder::new(rec, pid, runtime.clone(), opts);
        for _ in 0..samples {
            ok += u.sample(&mut s).is_ok() as usize;
        }
    }
    ok
}

/// One stored range: `len` bytes of the target at `start`, at `at` in
/// [`Snapshot::data`].
#[derive(Debug, Clone, Copy)]
struct Range {
    start: u64,
    at: usize,
    len: usize,
}

/// Target memory and runtime facts saved from a live process: a
/// [`ProcessMemory`] an unwinder reads as it would the process.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pid: i32,
    runtime: Runtime,
    table: TableSource,
    ranges: Vec<Range>,
    data: Vec<u8>,
    states: Vec<(u64, char)>,
}

/// A snapshot file that cannot be used: one line saying what is wrong.
fn invalid(what: impl std::fmt::Display) -> Error {
    Error::io(
        "invalid snapshot",
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{what} (make it again with `tachyon dump --snapshot FILE PID`)"),
        ),
    )
}

/// A payload's offsets table: the target's own debug table, or the
/// version of the layout tachyon carries; decoded and validated.
fn read_table(c: &mut Cursor<'_>, pid: i32) -> Result<(TableSource, RawTable, Offsets)> {
    match c.u8("table kind")? {
        0 => {
            let n = c.count(MAX_TABLE, "table length")?;
            let bytes = c.take(n, "offsets table")?.to_vec();
            let raw = RawTable::decode(pid, &bytes)?;
            let offsets = Offsets::from_raw(pid, &raw)?;
            Ok((TableSource::Debug(bytes), raw, offsets))
        }
        1 => {
            let hex = c.u32("carried version")?;
            let v = PyVersion::from_hex(hex as u64);
            let layout = carried::for_version(v)
                .ok_or_else(|| invalid(format!("no carried layout for Python {v}")))?;
            let raw = layout.table(v);
            let offsets = Offsets::from_carried(pid, &raw)?;
            Ok((TableSource::Carried(hex), raw, offsets))
        }
        k => Err(invalid(format!("unknown table kind {k}"))),
    }
}

/// A payload's thread states, `(thread id, state letter)`, sorted.
fn read_states(c: &mut Cursor<'_>) -> Result<Vec<(u64, char)>> {
    let n = c.count(MAX_THREAD_STATES, "thread state count")?;
    let mut states = Vec::with_capacity(n);
    for _ in 0..n {
        let tid = c.u64("thread id")?;
        let st = c.u8("thread state")?;
        if !st.is_ascii_graphic() {
            return Err(invalid(format!("thread state byte {st:#x}")));
        }
        states.push((tid, st as char));
    }
    states.sort_unstable();
    Ok(states)
}

/// A payload's memory ranges, each non-empty and after the one before,
/// and their bytes, one after the other.
fn read_ranges(c: &mut Cursor<'_>) -> Result<(Vec<Range>, Vec<u8>)> {
    let total = c.b.len();
    let n = c.count(MAX_RANGES, "range count")?;
    let mut ranges: Vec<Range> = Vec::with_capacity(n.min(total / 13 + 1));
    let mut data = Vec::with_capacity(total.saturating_sub(c.at));
    let mut end_prev: Option<u64> = None;
    for i in 0..n {
        let start = c.u64("range address")?;
        let len = c.u32("range length")? as usize;
        let end = start
            .checked_add(len as u64)
            .filter(|_| len > 0)
            .ok_or_else(|| invalid(format!("range {i} is empty or wraps around")))?;
        if end_prev.is_some_and(|e| start < e) {
            return Err(invalid(format!(
                "range {i} at {start:#x} is out of order or overlaps the one before"
            )));
        }
        end_prev = Some(end);
        let b = c.take(len, "range bytes")?;
        ranges.push(Range {
            start,
            at: data.len(),
            len,
        });
        data.extend_from_slice(b);
    }
    Ok((ranges, data))
}

/// Bounds-checked little-endian reads from a payload.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| invalid(format!("truncated at {what}")))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }
    /// A `u32` count, at most `max`.
    fn count(&mut self, max: u32, what: &str) -> Result<usize> {
        let n = self.u32(what)?;
        if n > max {
            return Err(invalid(format!("{what}: {n} is more than {max}")));
        }
        Ok(n as usize)
    }
}

/// `PY_VERSION_HEX` of a version.
fn version_hex(v: PyVersion) -> u32 {
    (v.major as u32) << 24
        | (v.minor as u32) << 16
        | (v.micro as u32) << 8
        | ((v.level as u32) & 0xF) << 4
        | (v.serial as u32 & 0xF)
}

impl Snapshot {
    /// What the unwinder needs of a live runtime besides memory: its
    /// table's bytes (3.13+, read through `mem`) or its carried version.
    pub fn table_source(mem: &dyn ProcessMemory, rt: &Runtime) -> Result<TableSource> {
        let v = rt.raw.version;
        if v.minor < 13 && carried::for_version(v).is_some() {
            return Ok(TableSource::Carried(version_hex(v)));
        }
        let size = crate::offsets::layout::table_size(v.minor)
            .ok_or_else(|| Error::corrupt(format!("no table layout for Python {v}")))?;
        let mut bytes = vec![0u8; size];
        mem.read(rt.address, &mut bytes)?;
        Ok(TableSource::Debug(bytes))
    }

    /// A snapshot of everything `rec` read, for the runtime `runtime` of
    /// process `pid`.
    pub fn from_recorder<M>(
        rec: &Recorder<M>,
        pid: i32,
        runtime: &Runtime,
        table: TableSource,
    ) -> Result<Snapshot> {
        if rec.overflow.get() {
            return Err(Error::corrupt(format!(
                "the samples read more than {MAX_PAYLOAD} bytes: too much for a snapshot"
            )));
        }
        let reads = rec.reads.borrow();
        // The union of the ranges read, as sorted disjoint intervals
        // (touching ones joined: a read may span two recorded reads).
        let mut spans: Vec<(u64, u64)> = reads
            .iter()
            .map(|(a, b)| (*a, a.saturating_add(b.len() as u64)))
            .collect();
        spans.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (s, e) in spans {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let mut ranges = Vec::with_capacity(merged.len());
        let mut at = 0usize;
        for &(s, e) in &merged {
            let len = (e - s) as usize;
            ranges.push(Range { start: s, at, len });
            at += len;
        }
        let mut data = vec![0u8; at];
        // In the order read: the latest copy of a byte wins.
        for (a, b) in reads.iter() {
            let i = ranges.partition_point(|r| r.start <= *a) - 1;
            let r = ranges[i];
            let off = r.at + (a - r.start) as usize;
            data[off..off + b.len()].copy_from_slice(b);
        }
        let mut states = rec.states.borrow().clone();
        states.sort_unstable();
        Ok(Snapshot {
            pid,
            runtime: runtime.clone(),
            table,
            ranges,
            data,
            states,
        })
    }

    /// The process the snapshot was taken of.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn table(&self) -> &TableSource {
        &self.table
    }

    /// Ranges stored, and their bytes in all.
    pub fn size(&self) -> (usize, usize) {
        (self.ranges.len(), self.data.len())
    }

    /// An unwinder that reads this snapshot.
    pub fn unwinder(self, opts: UnwindOptions) -> Unwinder<Snapshot> {
        let (pid, rt) = (self.pid, self.runtime.clone());
        Unwinder::new(self, pid, rt, opts)
    }

    /// The uncompressed payload: pid (`i32`), runtime address, `Py_None`
    /// (a flag byte and an address), the binary's name, the table (kind 0:
    /// length and bytes; kind 1: version), thread states (tid, letter),
    /// then the ranges (address, length, bytes); integers little-endian,
    /// counts and lengths `u32`.
    fn payload(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(self.data.len() + 16 * self.ranges.len() + 4096);
        p.extend_from_slice(&self.pid.to_le_bytes());
        p.extend_from_slice(&self.runtime.address.to_le_bytes());
        p.push(self.runtime.none_addr.is_some() as u8);
        p.extend_from_slice(&self.runtime.none_addr.unwrap_or(0).to_le_bytes());
        let name = self.runtime.binary.as_bytes();
        let name = &name[..name.len().min(MAX_NAME as usize)];
        p.extend_from_slice(&(name.len() as u32).to_le_bytes());
        p.extend_from_slice(name);
        match &self.table {
            TableSource::Debug(b) => {
                p.push(0);
                p.extend_from_slice(&(b.len() as u32).to_le_bytes());
                p.extend_from_slice(b);
            }
            TableSource::Carried(v) => {
                p.push(1);
                p.extend_from_slice(&v.to_le_bytes());
            }
        }
        p.extend_from_slice(&(self.states.len() as u32).to_le_bytes());
        for &(tid, c) in &self.states {
            p.extend_from_slice(&tid.to_le_bytes());
            p.push(if c.is_ascii() { c as u8 } else { b'?' });
        }
        p.extend_from_slice(&(self.ranges.len() as u32).to_le_bytes());
        for r in &self.ranges {
            p.extend_from_slice(&r.start.to_le_bytes());
            p.extend_from_slice(&(r.len as u32).to_le_bytes());
            p.extend_from_slice(&self.data[r.at..r.at + r.len]);
        }
        p
    }

    /// The file's bytes: magic, format version, compressed payload.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let z = zstd::bulk::compress(&self.payload(), ZSTD_LEVEL)
            .map_err(|e| Error::io("cannot compress the snapshot", e))?;
        out.extend_from_slice(&z);
        Ok(out)
    }

    /// Write the snapshot to `path` (atomically: a reader never sees half).
    pub fn write(&self, path: &Path) -> Result<()> {
        crate::collect::atomic::write_file(path, &self.to_bytes()?)
    }

    /// Read a snapshot file.
    pub fn open(path: &Path) -> Result<Snapshot> {
        let cannot = |e| Error::io(format!("cannot read snapshot {}", path.display()), e);
        let mut f = std::fs::File::open(path).map_err(cannot)?;
        let mut bytes = Vec::new();
        // The compressed file is never bigger than its payload.
        (&mut f)
            .take(MAX_PAYLOAD + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
        Self::from_bytes(&bytes).map_err(|e| match e {
            Error::Io { cause, .. } if cause.kind() == std::io::ErrorKind::InvalidData => {
                Error::io(
                    format!("{} is not a usable snapshot", path.display()),
                    cause,
                )
            }
            e => e,
        })
    }

    /// Decode a snapshot file's bytes: checked throughout, the offsets
    /// table validated as for a live process.
    pub fn from_bytes(bytes: &[u8]) -> Result<Snapshot> {
        if bytes.len() < 12 || &bytes[..8] != MAGIC {
            return Err(invalid("not a tachyon snapshot (no TACHSNAP header)"));
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if version != FORMAT_VERSION {
            return Err(invalid(format!(
                "snapshot format {version}, this tachyon reads format {FORMAT_VERSION}"
            )));
        }
        let mut payload = Vec::new();
        zstd::stream::read::Decoder::new(&bytes[12..])
            .and_then(|d| d.take(MAX_PAYLOAD + 1).read_to_end(&mut payload))
            .map_err(|e| invalid(format!("bad compressed data ({e})")))?;
        if payload.len() as u64 > MAX_PAYLOAD {
            return Err(invalid(format!("more than {MAX_PAYLOAD} bytes of payload")));
        }
        Self::from_payload(&payload)
    }

    /// Decode a payload (a file's bytes after the header, decompressed).
    pub fn from_payload(p: &[u8]) -> Result<Snapshot> {
        let mut c = Cursor { b: p, at: 0 };
        let pid = c.u32("pid")? as i32;
        let address = c.u64("runtime address")?;
        let has_none = c.u8("Py_None flag")?;
        let none = c.u64("Py_None address")?;
        let none_addr = match has_none {
            0 => None,
            1 => Some(none),
            f => return Err(invalid(format!("Py_None flag {f}"))),
        };
        let n = c.count(MAX_NAME, "binary name length")?;
        let binary = String::from_utf8_lossy(c.take(n, "binary name")?).into_owned();
        let (table, raw, offsets) = read_table(&mut c, pid)?;
        let states = read_states(&mut c)?;
        let (ranges, data) = read_ranges(&mut c)?;
        if c.at != p.len() {
            return Err(invalid(format!(
                "{} bytes after the last range",
                p.len() - c.at
            )));
        }
        Ok(Snapshot {
            pid,
            runtime: Runtime {
                address,
                binary,
                raw,
                offsets: offsets.into(),
                none_addr,
            },
            table,
            ranges,
            data,
            states,
        })
    }

    /// The stored bytes of `[addr, addr + len)`, if one range holds them all.
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let i = self
            .ranges
            .partition_point(|r| r.start <= addr)
            .checked_sub(1)?;
        let r = self.ranges[i];
        let off = usize::try_from(addr - r.start).ok()?;
        let end = off.checked_add(len).filter(|&e| e <= r.len)?;
        self.data.get(r.at + off..r.at + end)
    }
}

impl ProcessMemory for Snapshot {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        match self.bytes(addr, buf.len()) {
            Some(b) => {
                buf.copy_from_slice(b);
                Ok(())
            }
            None => Err(Error::Read {
                addr,
                len: buf.len(),
                cause: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not in the snapshot (no sample read it)",
                ),
            }),
        }
    }

    fn os_thread_state(&self, tid: u64) -> Option<char> {
        self.states
            .binary_search_by_key(&tid, |&(t, _)| t)
            .ok()
            .map(|i| self.states[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FrameTable;
    use std::path::PathBuf;

    /// Where the program of the committed snapshots ran (see
    /// `scripts/make-snapshots.sh`).
    const FIXTURE_SCRIPT: &str = "/tmp/tachyon-snapshots/leaf.py";

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/snapshots")
    }

    /// Every committed snapshot: (minor, depth, path). A missing one fails.
    fn fixtures() -> Vec<(u8, usize, PathBuf)> {
        let mut v = Vec::new();
        for minor in [13u8, 14, 15] {
            for depth in [10usize, 50, 200] {
                let p = dir().join(format!("3.{minor}-depth{depth}.snap"));
                assert!(
                    p.exists(),
                    "MISSING FIXTURE {} (run scripts/make-snapshots.sh)",
                    p.display()
                );
                v.push((minor, depth, p));
            }
        }
        v
    }

    /// The 1-based line of leaf.py whose comment is `# MARKER`.
    fn line_of(marker: &str) -> i32 {
        let src = std::fs::read_to_string(dir().join("leaf.py")).unwrap();
        let tag = format!("# {marker}");
        let i = src
            .lines()
            .position(|l| l.trim_end().ends_with(&tag))
            .unwrap_or_else(|| panic!("leaf.py has no line marked {tag}"));
        i as i32 + 1
    }

    /// The stack leaf.py has at `depth`, leaf first, as (function, line).
    fn expected(depth: usize) -> Vec<(String, i32)> {
        let mut v = vec![
            ("leaf".to_string(), line_of("LEAF")),
            ("down".to_string(), line_of("TO-LEAF")),
        ];
        for _ in 0..depth - 3 {
            v.push(("down".to_string(), line_of("RECURSE")));
        }
        v.push(("<module>".to_string(), line_of("MODULE")));
        v
    }

    fn names(frames: &[u32], t: &FrameTable) -> Vec<(String, i32)> {
        frames
            .iter()
            .map(|&id| {
                let f = t.frame(id);
                assert_eq!(t.str(f.file), FIXTURE_SCRIPT);
                (t.str(f.func).to_string(), f.line())
            })
            .collect()
    }

    #[test]
    fn committed_snapshots_unwind_to_the_known_stack() {
        for (minor, depth, path) in fixtures() {
            let want = expected(depth);
            assert_eq!(want.len(), depth);
            for all_threads in [false, true] {
                let snap = Snapshot::open(&path).unwrap();
                assert_eq!(
                    snap.runtime().raw.version.minor,
                    minor,
                    "{}",
                    path.display()
                );
                assert!(matches!(snap.table(), TableSource::Debug(_)));
                let opts = UnwindOptions {
                    all_threads,
                    ..UnwindOptions::default()
                };
                let mut u = snap.unwinder(opts);
                let mut s = Sample::default();
                // The first sample is cold (every code object read), the
                // later ones warm (cached, read speculatively).
                for i in 0..5 {
                    u.sample(&mut s).unwrap_or_else(|e| {
                        panic!("{} all={all_threads} sample {i}: {e}", path.display())
                    });
                    assert_eq!(s.threads.len(), 1, "{}", path.display());
                    let got = names(&s.threads[0].frames, u.frames());
                    assert_eq!(got, want, "{} all={all_threads} sample {i}", path.display());
                }
                let (hits, misses, _) = u.cache_stats();
                assert!(misses >= 3 && hits > 0, "{}", path.display());
            }
        }
    }

    #[test]
    fn a_snapshot_survives_its_round_trip() {
        for (_, _, path) in fixtures() {
            let bytes = std::fs::read(&path).unwrap();
            let a = Snapshot::from_bytes(&bytes).unwrap();
            let b = Snapshot::from_bytes(&a.to_bytes().unwrap()).unwrap();
            assert_eq!(a.payload(), b.payload());
            assert_eq!(a.runtime.address, b.runtime.address);
            assert_eq!(a.runtime.binary, b.runtime.binary);
            assert!(a.runtime.binary.contains("python3."));
        }
    }

    /// A snapshot of two ranges, 0x1000..0x1010 and 0x2000..0x2004.
    fn small() -> Snapshot {
        let (_, _, path) = fixtures().remove(0);
        let mut s = Snapshot::open(&path).unwrap();
        s.ranges = vec![
            Range {
                start: 0x1000,
                at: 0,
                len: 16,
            },
            Range {
                start: 0x2000,
                at: 16,
                len: 4,
            },
        ];
        s.data = (0u8..20).collect();
        s
    }

    #[test]
    fn only_reads_inside_one_stored_range_succeed() {
        let s = small();
        let mut b = [0u8; 4];
        s.read(0x1004, &mut b).unwrap();
        assert_eq!(b, [4, 5, 6, 7]);
        s.read(0x2000, &mut b).unwrap();
        assert_eq!(b, [16, 17, 18, 19]);
        for addr in [0xffc, 0x100e, 0x1010, 0x1ffe, 0x2001, 0, u64::MAX - 1] {
            let e = s.read(addr, &mut b).unwrap_err();
            assert!(matches!(e, Error::Read { .. }), "{addr:#x}: {e}");
            assert!(!e.is_fatal());
        }
        s.read(0x5000, &mut []).unwrap();
    }

    #[test]
    fn damaged_files_are_errors_never_panics() {
        let (_, _, path) = fixtures().remove(0);
        let bytes = std::fs::read(&path).unwrap();
        for n in 0..bytes.len() {
            assert!(Snapshot::from_bytes(&bytes[..n]).is_err(), "cut at {n}");
        }
        let mut other = bytes.clone();
        other[8] = 2;
        let e = Snapshot::from_bytes(&other).unwrap_err().to_string();
        assert!(e.contains("format 2"), "{e}");
        let payload = Snapshot::from_bytes(&bytes).unwrap().payload();
        for n in 0..payload.len() {
            assert!(Snapshot::from_payload(&payload[..n]).is_err(), "cut at {n}");
        }
        // Every byte changed, one at a time: whatever it gives, no panic.
        for i in 0..payload.len() {
            let mut p = payload.clone();
            p[i] ^= 0xa5;
            let _ = Snapshot::from_payload(&p);
        }
        assert!(Snapshot::from_payload(&[payload.clone(), vec![0]].concat()).is_err());
    }

    #[test]
    fn overlapping_or_unsorted_ranges_are_refused() {
        let mut s = small();
        s.ranges[1].start = 0x100f;
        let e = Snapshot::from_payload(&s.payload())
            .unwrap_err()
            .to_string();
        assert!(e.contains("overlaps"), "{e}");
        let mut s = small();
        s.ranges[1].start = 0x10;
        assert!(Snapshot::from_payload(&s.payload()).is_err());
        let s = small();
        assert!(Snapshot::from_payload(&s.payload()).is_ok());
    }

    /// A memory of one block at 0x1000 that counts down its bytes on every
    /// read, so later reads differ from earlier ones.
    struct Ticking {
        tick: Cell<u8>,
    }

    impl ProcessMemory for Ticking {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
            if !(0x1000..0x1100).contains(&addr) {
                return Err(Error::corrupt("unmapped"));
            }
            self.tick.set(self.tick.get() + 1);
            buf.fill(self.tick.get());
            Ok(())
        }
        fn os_thread_state(&self, tid: u64) -> Option<char> {
            (tid == 7).then_some('R')
        }
    }

    #[test]
    fn a_recording_keeps_the_union_of_reads_and_the_latest_bytes() {
        let rt = small().runtime;
        let rec = Recorder::new(Ticking { tick: Cell::new(0) });
        let mut b = [0u8; 8];
        rec.read(0x1000, &mut b).unwrap(); // 1s at 0x1000..0x1008
        rec.read(0x1004, &mut b).unwrap(); // 2s at 0x1004..0x100c
        rec.read(0x100c, &mut b[..4]).unwrap(); // 3s, touching
        rec.read(0x1080, &mut b).unwrap(); // 4s, apart
        assert!(rec.read(0x9000, &mut b).is_err());
        assert_eq!(rec.os_thread_state(7), Some('R'));
        assert_eq!(rec.os_thread_state(8), None);
        let table = TableSource::Carried(0x030c_00f0);
        let s = Snapshot::from_recorder(&rec, 42, &rt, table).unwrap();
        assert_eq!(s.size(), (2, 16 + 8));
        let mut got = [0u8; 16];
        s.read(0x1000, &mut got).unwrap();
        assert_eq!(got, [1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3]);
        assert!(s.read(0x1008, &mut [0u8; 9]).is_err());
        assert_eq!(s.os_thread_state(7), Some('R'));
        assert_eq!(s.os_thread_state(8), None);
        // Through a file: a carried (3.12) table comes back as one.
        let back = Snapshot::from_bytes(&s.to_bytes().unwrap()).unwrap();
        assert_eq!(back.pid(), 42);
        assert_eq!(back.table(), &TableSource::Carried(0x030c_00f0));
        assert_eq!(back.runtime().raw.version.minor, 12);
        assert_eq!(back.payload(), s.payload());

        let off = Recorder::passthrough(Ticking { tick: Cell::new(0) });
        off.read(0x1000, &mut b).unwrap();
        assert_eq!(off.recorded_bytes(), 0);
    }
}
