//! The reference's binary profile format (`--binary`, `replay`): record
//! once, view many ways.
//!
//! This module owns the on-disk layout of format version 1 as CPython
//! 3.15.2 writes it (little-endian): the 64-byte header (written last), the
//! per-thread sample records (REPEAT, FULL, SUFFIX and POP_PUSH encodings
//! with LEB128 varints), optionally one zstd stream over them, the block
//! tables a recording carries so that a cut file can be read ([`BlockTable`]:
//! zstd skippable frames, or uncompressed [`ENC_BLOCK`] records until the
//! recording is finished), the string
//! and frame tables, the 56-byte stats trailer and the 32-byte footer.
//! [`writer::BinaryWriter`] streams samples to a file in bounded memory;
//! [`reader::BinaryReader`] validates a file as untrusted input and gives
//! back the samples, a [`FrameTable`](crate::model::FrameTable) and the
//! stored statistics. Files written by either program are read by the
//! other.
//!
//! Thread names, which the reference's format has no place for, are
//! stored as extra strings of the string table that no frame refers to
//! ([`thread_name_record`]): the reference's reader loads them and ignores
//! them, tachyon's gives each thread its name back.
//!
//! Mapping to tachyon's model: a frame whose location is unknown (the
//! reference's `location=None`: `<GC>`, `<native>`, and Python frames whose
//! line is -1, such as the `__init__` shim) is stored with line -1 and reads
//! back as tachyon's "no location" (line 0, columns -1), which is what the
//! reference's replay shows; live, both show the shim at line -1. A frame's
//! opcode (`--opcodes`) is stored as is, 255 standing for none both ways.

pub mod reader;
pub mod writer;

use crate::error::Error;
use crate::model::{Mode, RunStats};

/// `"HCAT"` on disk: the magic number written in little-endian order.
pub const MAGIC: u32 = 0x5441_4348;
/// The only format version there is.
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_SIZE: u64 = 64;
pub const FOOTER_SIZE: u64 = 32;
/// Size of the stats trailer this module writes (3.15.2); the legacy
/// 32-byte trailer is read too.
pub const TRAILER_SIZE: u64 = 56;
pub const LEGACY_TRAILER_SIZE: u64 = 32;
pub const TRAILER_MAGIC: &[u8; 8] = b"TACHSTAT";
pub const TRAILER_VERSION: u32 = 1;
/// The reference keeps at most this many frames of a stack (the innermost
/// ones); its reader rejects deeper records.
pub const MAX_STACK_DEPTH: usize = 256;
/// tachyon's zstd level. The reference uses 5. tachyon's records are
/// 40% smaller before compression but compress less well: at level 5 a
/// churning profile's sample data took 7-9% more bytes than the
/// reference's writer makes of the same samples, at 7 it takes 0-1% more,
/// for about 0.2 us more per sample.
pub const DEFAULT_ZSTD_LEVEL: i32 = 7;
/// zstd's window: 256 KiB. The records repeat within far less (frames and
/// strings are defined once, stacks refer to the last ones), and a small
/// window keeps the compressor's history small (see [`ZSTD_HASH_LOG`] for
/// its tables). Any zstd reader, the reference's too, accepts it.
pub const ZSTD_WINDOW_LOG: u32 = 18;
/// zstd's match-finder tables: 2^16 entries. Level 7's own (2^20 for a
/// stream of unknown size) are sized for a window sixteen times larger:
/// about 5 MB cleared at every frame, some 1,200 page faults at start, and
/// each compression's probes spread over them. At 2^16 the tables take a
/// few hundred kilobytes and a churning profile compresses as well
/// (`tests/binary.rs` measures it against the reference's writer).
pub const ZSTD_HASH_LOG: u32 = 16;
/// The reference's cap on decompressed sample data.
pub const DEFAULT_MAX_DECOMPRESSED: u64 = 1 << 30;

/// Record encodings (the byte after a record's thread and interpreter ids).
pub(crate) const ENC_REPEAT: u8 = 0;
pub(crate) const ENC_FULL: u8 = 1;
pub(crate) const ENC_SUFFIX: u8 = 2;
pub(crate) const ENC_POP_PUSH: u8 = 3;
/// A block table in uncompressed sample data while it is recorded (see
/// [`writer`]): `u64 0, u32 size, ENC_BLOCK`, then `size` bytes of
/// [`BlockTable`]. The reference knows no such encoding: a finished file
/// has none (each became [`filler_records`]).
pub(crate) const ENC_BLOCK: u8 = 0xB1;
/// `thread_id u64, interpreter_id u32, encoding u8`.
pub(crate) const RECORD_HEADER_SIZE: usize = 13;
/// Smallest frame table entry: five one-byte varints and the opcode.
pub(crate) const MIN_FRAME_ENTRY: u64 = 7;
pub(crate) const OPCODE_NONE: u8 = 255;

/// Opens a string-table entry that names a thread: NUL bytes, which no
/// file name or function name holds.
pub(crate) const THREAD_NAME_TAG: &str = "\0tachyon:thread-name\0";

/// Opens the string-table entry that counts the samples taken during
/// interpreter shutdown, which no output shows (the reference's format has
/// no field for them).
pub(crate) const SHUTDOWN_TAG: &str = "\0tachyon:shutdown-samples\0";

/// The string-table entry counting `n` shutdown samples.
pub(crate) fn shutdown_record(n: u64) -> String {
    format!("{SHUTDOWN_TAG}{n}")
}

/// The count of a string-table entry written by [`shutdown_record`].
pub(crate) fn parse_shutdown_record(s: &str) -> Option<u64> {
    s.strip_prefix(SHUTDOWN_TAG)?.parse().ok()
}

/// The string-table entry naming thread `tid` of interpreter `iid`:
/// the tag, `tid:iid:`, the name.
pub(crate) fn thread_name_record(tid: u64, iid: u32, name: &str) -> String {
    format!("{THREAD_NAME_TAG}{tid}:{iid}:{name}")
}

/// The thread and name of a string-table entry written by
/// [`thread_name_record`]; `None` for any other string.
pub(crate) fn parse_thread_name_record(s: &str) -> Option<(u64, u32, &str)> {
    let rest = s.strip_prefix(THREAD_NAME_TAG)?;
    let (tid, rest) = rest.split_once(':')?;
    let (iid, name) = rest.split_once(':')?;
    Some((tid.parse().ok()?, iid.parse().ok()?, name))
}

/// The zstd skippable frame after a zstd frame of records that brought
/// new strings or frames (see [`writer`]): magic `0x184D2A5A`, u32 size,
/// then a [`BlockTable`].
pub const BLOCK_MAGIC: u32 = 0x184D_2A5A;
/// Any zstd skippable frame: these magics, masked.
pub(crate) const SKIPPABLE_MASK: u32 = 0xFFFF_FFF0;
pub(crate) const SKIPPABLE_BASE: u32 = 0x184D_2A50;
pub(crate) const ZSTD_FRAME_MAGIC: u32 = 0xFD2F_B528;
const BLOCK_TAG: &[u8; 8] = b"TACHBLK1";
/// The fixed part of a block table: tag, totals, firsts and counts, the
/// three section lengths.
pub(crate) const BLOCK_TABLE_FIXED: usize = 8 + 8 + 4 * 9;

/// What the frame before it needs besides earlier block tables: the strings,
/// frames and thread names first used in it, and the totals of samples
/// and threads up to its end. On disk, after the fixed fields, the three
/// sections (string-table entries, frame-table entries, string entries of
/// [`thread_name_record`]s) as one zstd frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockTable {
    pub samples_total: u64,
    pub threads_total: u32,
    /// Index of its first string (frame) in the file's string (frame)
    /// table: the number given by earlier blocks.
    pub first_string: u32,
    pub first_frame: u32,
    pub strings: u32,
    pub frames: u32,
    pub names: u32,
}

/// A decoded block table: the counts, and the three sections.
pub(crate) struct BlockSections {
    pub table: BlockTable,
    pub strings: Vec<u8>,
    pub frames: Vec<u8>,
    pub names: Vec<u8>,
}

impl BlockTable {
    /// The whole skippable frame (in zstd sample data).
    pub(crate) fn encode(&self, strings: &[u8], frames: &[u8], names: &[u8]) -> Vec<u8> {
        let payload = self.payload(strings, frames, names);
        let mut out = Vec::with_capacity(8 + payload.len());
        out.extend_from_slice(&BLOCK_MAGIC.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// The whole [`ENC_BLOCK`] record (in uncompressed sample data).
    pub(crate) fn encode_record(&self, strings: &[u8], frames: &[u8], names: &[u8]) -> Vec<u8> {
        let payload = self.payload(strings, frames, names);
        let mut out = Vec::with_capacity(RECORD_HEADER_SIZE + payload.len());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.push(ENC_BLOCK);
        out.extend_from_slice(&payload);
        out
    }

    /// The tag, the fixed fields and the sections, compressed.
    fn payload(&self, strings: &[u8], frames: &[u8], names: &[u8]) -> Vec<u8> {
        let mut raw = Vec::with_capacity(strings.len() + frames.len() + names.len());
        raw.extend_from_slice(strings);
        raw.extend_from_slice(frames);
        raw.extend_from_slice(names);
        // Small and written once a second: level 3, no tuning.
        let body = zstd::bulk::compress(&raw, 3).unwrap_or_default();
        let mut out = Vec::with_capacity(BLOCK_TABLE_FIXED + body.len());
        out.extend_from_slice(BLOCK_TAG);
        out.extend_from_slice(&self.samples_total.to_le_bytes());
        for v in [
            self.threads_total,
            self.first_string,
            self.first_frame,
            self.strings,
            self.frames,
            self.names,
            strings.len() as u32,
            frames.len() as u32,
            names.len() as u32,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&body);
        out
    }

    /// The payload of a skippable frame or block record (after its size);
    /// `None`
    /// unless it is a whole, consistent block table.
    pub(crate) fn decode(p: &[u8], max_bytes: u64) -> Option<BlockSections> {
        if p.len() < BLOCK_TABLE_FIXED || &p[..8] != BLOCK_TAG {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().unwrap_or_default());
        let samples_total = u64::from_le_bytes(p[8..16].try_into().ok()?);
        let w: Vec<u32> = (0..9).map(|i| u32_at(16 + 4 * i)).collect();
        let (ls, lf, ln) = (w[6] as u64, w[7] as u64, w[8] as u64);
        let total = ls + lf + ln;
        if total > max_bytes {
            return None;
        }
        let raw = zstd::bulk::decompress(&p[BLOCK_TABLE_FIXED..], total as usize).ok()?;
        if raw.len() as u64 != total {
            return None;
        }
        let (ls, lf) = (ls as usize, lf as usize);
        Some(BlockSections {
            table: BlockTable {
                samples_total,
                threads_total: w[0],
                first_string: w[1],
                first_frame: w[2],
                strings: w[3],
                frames: w[4],
                names: w[5],
            },
            strings: raw[..ls].to_vec(),
            frames: raw[ls..ls + lf].to_vec(),
            names: raw[ls + lf..].to_vec(),
        })
    }
}

/// Exactly `len` bytes of REPEAT records of no sample for thread `tid`
/// of interpreter `iid`: what a finished uncompressed file has where its
/// block tables were. Each is the 13-byte record header and a count of 0
/// in 1 to 10 bytes (`0x80`s, then 0), so 14 to 23 bytes: any `len` of
/// 14 to 23 or from 28 on (a block record is longer). The reference's
/// reader, and tachyon's, read a count of 0 as no sample; a thread that
/// had a record before is no new thread.
pub(crate) fn filler_records(tid: u64, iid: u32, len: usize) -> Vec<u8> {
    const MIN: usize = RECORD_HEADER_SIZE + 1;
    const MAX: usize = RECORD_HEADER_SIZE + 10;
    let n = len.div_ceil(MAX).max(1);
    debug_assert!(n * MIN <= len && len <= n * MAX, "no filler of {len} bytes");
    let mut extra = len.saturating_sub(n * MIN);
    let mut out = Vec::with_capacity(len);
    for _ in 0..n {
        let e = extra.min(MAX - MIN);
        extra -= e;
        out.extend_from_slice(&tid.to_le_bytes());
        out.extend_from_slice(&iid.to_le_bytes());
        out.push(ENC_REPEAT);
        out.extend(std::iter::repeat_n(0x80u8, e));
        out.push(0);
    }
    out
}

/// How the sample data is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    None,
    /// One zstd stream (the reference's default when zstd is available).
    #[default]
    Zstd,
}

impl Compression {
    pub fn code(self) -> u32 {
        match self {
            Compression::None => 0,
            Compression::Zstd => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
        }
    }
}

/// What was captured: the reference's capture features (header bits 4..8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CaptureConfig {
    pub all_threads: bool,
    pub native: bool,
    pub gc: bool,
    pub opcodes: bool,
    pub blocking: bool,
}

impl CaptureConfig {
    fn bits(self) -> u32 {
        (self.all_threads as u32)
            | (self.native as u32) << 1
            | (self.gc as u32) << 2
            | (self.opcodes as u32) << 3
            | (self.blocking as u32) << 4
    }

    fn from_bits(b: u32) -> Self {
        CaptureConfig {
            all_threads: b & 1 != 0,
            native: b & 2 != 0,
            gc: b & 4 != 0,
            opcodes: b & 8 != 0,
            blocking: b & 16 != 0,
        }
    }
}

/// The header's `profiling_config` word: mode + 1 in bits 0-2 (0: unknown),
/// bit 3 = capture features present, the features from bit 4.
pub(crate) fn encode_config(mode: Option<Mode>, capture: Option<CaptureConfig>) -> u32 {
    let m = mode.map_or(0, |m| m.code() + 1);
    let c = capture.map_or(0, |c| 8 | c.bits() << 4);
    m | c
}

pub(crate) fn decode_config(word: u32) -> Result<(Option<Mode>, Option<CaptureConfig>), String> {
    let mode = match word & 7 {
        0 => None,
        m => Some(mode_from_code(m - 1).ok_or("invalid profiling mode in header")?),
    };
    let features = word >> 4;
    if features & !0x1f != 0 || (word & 8 == 0 && features != 0) {
        return Err("invalid capture features in header".into());
    }
    let capture = (word & 8 != 0).then(|| CaptureConfig::from_bits(features));
    Ok((mode, capture))
}

fn mode_from_code(c: u32) -> Option<Mode> {
    Some(match c {
        0 => Mode::Wall,
        1 => Mode::Cpu,
        2 => Mode::Gil,
        3 => Mode::All,
        4 => Mode::Exception,
        _ => return None,
    })
}

/// The run's statistics as the stats trailer stores them (each optional).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StoredStats {
    pub duration_s: Option<f64>,
    /// Attempted samples per second.
    pub sample_rate: Option<f64>,
    /// Failed samples, percent of attempts.
    pub error_rate_pct: Option<f64>,
    /// Samples not taken, percent of the expected count (the reference's
    /// formula: may be negative when more were taken than expected).
    pub missed_pct: Option<f64>,
    /// Samples taken during interpreter shutdown, left out of the profile
    /// (kept as a string of the string table, see [`shutdown_record`]).
    pub shutdown_samples: Option<u64>,
}

impl StoredStats {
    /// What the reference stores at the end of a run.
    pub fn from_run(s: &RunStats) -> Self {
        let n = s.attempts as f64;
        let t = s.duration_s;
        let expected = s.expected() as f64;
        StoredStats {
            duration_s: Some(t),
            sample_rate: Some(if t > 0.0 { n / t } else { 0.0 }),
            error_rate_pct: Some(s.error_rate_pct()),
            missed_pct: Some(if expected > 0.0 {
                (expected - n) / expected * 100.0
            } else {
                0.0
            }),
            shutdown_samples: (s.shutdown_samples > 0).then_some(s.shutdown_samples),
        }
    }

    /// Back to [`RunStats`], as closely as the stored numbers allow.
    pub fn to_run(self, interval_us: u64, mode: Option<Mode>) -> RunStats {
        let duration_s = self
            .duration_s
            .filter(|d| d.is_finite() && *d >= 0.0)
            .unwrap_or(0.0);
        let rate = self
            .sample_rate
            .filter(|r| r.is_finite() && *r >= 0.0)
            .unwrap_or(0.0);
        let attempts = (rate * duration_s).round();
        let attempts = if attempts < u64::MAX as f64 {
            attempts as u64
        } else {
            0
        };
        let err = self
            .error_rate_pct
            .filter(|e| e.is_finite() && (0.0..=100.0).contains(e))
            .unwrap_or(0.0);
        RunStats {
            interval_us,
            duration_s,
            attempts,
            failures: (attempts as f64 * err / 100.0).round() as u64,
            shutdown_samples: self.shutdown_samples.unwrap_or(0),
            mode: mode.unwrap_or_default(),
            interrupted: false,
            ..RunStats::default()
        }
    }
}

/// Everything a file says about itself (header, trailer, footer).
#[derive(Debug, Clone, PartialEq)]
pub struct FileInfo {
    /// The writer's Python version (tachyon writes the target's, or zeros).
    pub python_version: (u8, u8, u8),
    pub start_time_us: u64,
    pub interval_us: u64,
    /// Per-thread stacks stored (a sample of N threads counts N).
    pub sample_count: u64,
    /// Distinct (thread id, interpreter id) pairs.
    pub thread_count: u32,
    pub string_count: u32,
    pub frame_count: u32,
    pub compression: Compression,
    pub mode: Option<Mode>,
    pub capture: Option<CaptureConfig>,
    pub stats: StoredStats,
    /// The file was written big-endian (read, never written, by tachyon).
    pub big_endian: bool,
    /// The file is a recording cut short (its writer was killed, or the
    /// file was cut): it holds what was flushed before the cut, its counts
    /// are those found there, and it has no statistics.
    pub truncated: bool,
}

impl FileInfo {
    /// The statistics the collectors need to render a replayed profile.
    pub fn run_stats(&self) -> RunStats {
        self.stats.to_run(self.interval_us, self.mode)
    }
}

/// What the writer did, as the reference reports it after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EncodingStats {
    pub repeat_records: u64,
    /// Samples carried by REPEAT records.
    pub repeat_samples: u64,
    pub full_records: u64,
    pub suffix_records: u64,
    pub pop_push_records: u64,
    /// Frame indices written in records.
    pub frames_written: u64,
    /// Frame indices the encodings did not have to write.
    pub frames_saved: u64,
    /// Sample data bytes before compression.
    pub bytes_written: u64,
}

impl EncodingStats {
    pub fn total_records(&self) -> u64 {
        self.repeat_records + self.full_records + self.suffix_records + self.pop_push_records
    }
}

/// An invalid file: one line that says what is wrong.
pub(crate) fn invalid(what: impl std::fmt::Display) -> Error {
    Error::InvalidProfile(format!("invalid binary profile: {what}"))
}

pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

pub(crate) fn zigzag(n: i32) -> u32 {
    ((n << 1) ^ (n >> 31)) as u32
}

pub(crate) fn unzigzag(u: u32) -> i32 {
    ((u >> 1) as i32) ^ -((u & 1) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_round_trips() {
        for n in [0, 1, -1, 2, -2, 63, -64, i32::MAX, i32::MIN] {
            assert_eq!(unzigzag(zigzag(n)), n);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(3), 6);
    }

    #[test]
    fn fillers_take_exactly_their_length() {
        for len in (14..=23).chain(28..200) {
            let f = filler_records(7, 1, len);
            assert_eq!(f.len(), len);
            let mut at = 0;
            while at < f.len() {
                assert_eq!(u64::from_le_bytes(f[at..at + 8].try_into().unwrap()), 7);
                assert_eq!(f[at + 12], ENC_REPEAT);
                at += RECORD_HEADER_SIZE;
                while f[at] == 0x80 {
                    at += 1;
                }
                assert_eq!(f[at], 0);
                at += 1;
            }
        }
    }

    #[test]
    fn config_word() {
        assert_eq!(encode_config(None, None), 0);
        assert_eq!(encode_config(Some(Mode::Wall), None), 1);
        let c = CaptureConfig {
            all_threads: true,
            gc: true,
            ..Default::default()
        };
        let w = encode_config(Some(Mode::Cpu), Some(c));
        assert_eq!(w, 2 | 8 | (1 << 4) | (1 << 6));
        assert_eq!(decode_config(w).unwrap(), (Some(Mode::Cpu), Some(c)));
        assert!(decode_config(6).is_err());
        assert!(decode_config(1 << 9 | 8).is_err());
        assert!(decode_config(1 << 4).is_err());
    }

    #[test]
    fn stats_back_to_run_stats() {
        let run = RunStats {
            interval_us: 1000,
            duration_s: 2.0,
            attempts: 1990,
            failures: 10,
            mode: Mode::Gil,
            interrupted: false,
            ..RunStats::default()
        };
        let back = StoredStats::from_run(&run).to_run(1000, Some(Mode::Gil));
        assert_eq!(back.attempts, 1990);
        assert_eq!(back.failures, 10);
        assert_eq!(back.mode, Mode::Gil);
        let junk = StoredStats {
            duration_s: Some(f64::NAN),
            sample_rate: Some(1e300),
            error_rate_pct: Some(-4.0),
            missed_pct: None,
            shutdown_samples: None,
        };
        let r = junk.to_run(1, None);
        assert_eq!((r.attempts, r.failures), (0, 0));
    }
}
