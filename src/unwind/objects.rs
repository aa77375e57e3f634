//! Reading Python objects out of the target: `str` (compact ASCII, UCS1,
//! UCS2, UCS4) and `bytes`, with caps, so a corrupt length cannot make us
//! read or allocate without bound.

use crate::error::{Error, Result};
use crate::offsets::Offsets;
use crate::process::{LocalBytes, ProcessMemory};

/// Longest name we decode; longer ones are cut and marked with `...`.
pub const MAX_STR_CHARS: u64 = 4096;
/// Longest location table we read (the reference uses the same cap).
pub const MAX_BYTES: u64 = 64 * 1024;

/// How much to read on the first try: the header plus a typical short name,
/// so most strings cost one system call.
const SPECULATIVE: usize = 256;

/// Read at `addr` as much of `want` bytes as one read gives, falling back
/// to exactly `need` bytes when the speculative read crosses into unmapped
/// memory.
fn read_head(mem: &dyn ProcessMemory, addr: u64, need: usize, buf: &mut Vec<u8>) -> Result<()> {
    buf.clear();
    buf.resize(SPECULATIVE.max(need), 0);
    if mem.read(addr, buf).is_ok() {
        return Ok(());
    }
    buf.truncate(need);
    mem.read(addr, buf)
}

/// Decode a `str` object.
pub fn read_str(mem: &dyn ProcessMemory, offs: &Offsets, addr: u64) -> Result<String> {
    let mut buf = Vec::new();
    let raw = read_str_raw(mem, offs, addr, &mut buf)?;
    raw.decode(&buf)
}

/// A `str` object's characters as read by [`read_str_raw`]: `kind` bytes
/// each at `buf[start..start + len]`, at most [`MAX_STR_CHARS`] of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStr {
    pub kind: u64,
    pub ascii: bool,
    /// Longer than [`MAX_STR_CHARS`] (or the reader's cap): cut, and
    /// shown with `...`.
    pub cut: bool,
    /// The whole string's length, in characters.
    pub length: u64,
    pub start: usize,
    pub len: usize,
}

impl RawStr {
    /// The characters' bytes in the buffer they were read into.
    pub fn data<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        &buf[self.start..self.start + self.len]
    }

    /// The text, as [`read_str`] gives it.
    pub fn decode(&self, buf: &[u8]) -> Result<String> {
        let mut s = decode_chars(self.kind, self.ascii, self.data(buf))
            .ok_or_else(|| Error::corrupt("ASCII string holds non-ASCII bytes"))?;
        if self.cut {
            s.push_str("...");
        }
        Ok(s)
    }
}

/// Read a `str` object into `buf` (reused: no allocation once it is large
/// enough), checked as [`read_str`] checks it, without decoding it.
pub fn read_str_raw(
    mem: &dyn ProcessMemory,
    offs: &Offsets,
    addr: u64,
    buf: &mut Vec<u8>,
) -> Result<RawStr> {
    read_str_prefix(mem, offs, addr, buf, MAX_STR_CHARS)
}

/// [`read_str_raw`], reading at most `max_chars` characters.
pub fn read_str_prefix(
    mem: &dyn ProcessMemory,
    offs: &Offsets,
    addr: u64,
    buf: &mut Vec<u8>,
    max_chars: u64,
) -> Result<RawStr> {
    if addr == 0 {
        return Err(Error::corrupt("NULL string pointer"));
    }
    let hdr_len = offs.unicode_compact_size as usize;
    read_head(mem, addr, hdr_len, buf)?;
    let state = buf
        .u32_at(offs.unicode_state)
        .ok_or_else(|| Error::corrupt("short unicode header"))?;
    let length = buf
        .u64_at(offs.unicode_length)
        .ok_or_else(|| Error::corrupt("short unicode header"))?;
    // GIL builds: interned bits 0-1, kind bits 2-4, compact bit 5, ascii bit 6.
    let kind = ((state >> 2) & 7) as u64;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !compact || !matches!(kind, 1 | 2 | 4) || (ascii && kind != 1) {
        return Err(Error::corrupt(format!(
            "not a compact str (state {state:#x})"
        )));
    }
    if length > i64::MAX as u64 {
        return Err(Error::corrupt("negative string length"));
    }
    let chars = length.min(max_chars.min(MAX_STR_CHARS));
    let data_off = if ascii {
        offs.unicode_ascii_size
    } else {
        offs.unicode_compact_size
    };
    let start = data_off as usize;
    let len = (chars * kind) as usize;
    // A whole string is followed by its NUL terminator (one character
    // wide): read it too, and a length torn or corrupted to end anywhere
    // else is refused rather than decoded (and cached) as a wrong name.
    let whole = chars == length;
    let with_nul = len + if whole { kind as usize } else { 0 };
    if buf.len() < start + with_nul {
        buf.truncate(start);
        buf.resize(start + with_nul, 0);
        mem.read(addr.wrapping_add(data_off), &mut buf[start..])?;
    }
    if buf[start + len..start + with_nul].iter().any(|&b| b != 0) {
        return Err(Error::corrupt("string not terminated at its length"));
    }
    Ok(RawStr {
        kind,
        ascii,
        cut: chars < length,
        length,
        start,
        len,
    })
}

/// The text of a compact string's characters (`kind` bytes each); `None`
/// when an ASCII string holds a byte above 127.
pub fn decode_chars(kind: u64, ascii: bool, data: &[u8]) -> Option<String> {
    Some(match kind {
        1 if ascii => {
            if !data.is_ascii() {
                return None;
            }
            String::from_utf8_lossy(data).into_owned()
        }
        1 => data.iter().map(|&b| b as char).collect(),
        2 => data
            .chunks_exact(2)
            .map(|c| char::from_u32(u16::from_le_bytes([c[0], c[1]]) as u32).unwrap_or('\u{fffd}'))
            .collect(),
        _ => data
            .chunks_exact(4)
            .map(|c| {
                char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('\u{fffd}')
            })
            .collect(),
    })
}

/// Read the contents of a `bytes` object; `None` when it is longer than
/// [`MAX_BYTES`] (treated as "no location" by callers, not as an error).
pub fn read_bytes(mem: &dyn ProcessMemory, offs: &Offsets, addr: u64) -> Result<Option<Vec<u8>>> {
    if addr == 0 {
        return Err(Error::corrupt("NULL bytes pointer"));
    }
    let hdr = offs.bytes_ob_sval as usize;
    let mut buf = Vec::new();
    read_head(mem, addr, hdr, &mut buf)?;
    let size = buf
        .u64_at(offs.bytes_ob_size)
        .ok_or_else(|| Error::corrupt("short bytes header"))?;
    if size > MAX_BYTES {
        return Ok(None);
    }
    let len = size as usize;
    if buf.len() >= hdr + len {
        buf.drain(..hdr);
        buf.truncate(len);
        return Ok(Some(buf));
    }
    let mut data = vec![0u8; len];
    mem.read(addr.wrapping_add(hdr as u64), &mut data)?;
    Ok(Some(data))
}

/// Read a NUL-terminated C string of at most `max` bytes (type names).
pub fn read_cstr(mem: &dyn ProcessMemory, addr: u64, max: usize) -> Result<String> {
    let mut buf = vec![0u8; max];
    // Shrink until readable: the string may sit near the end of a mapping.
    let mut len = max;
    loop {
        match mem.read(addr, &mut buf[..len]) {
            Ok(()) => break,
            Err(e) if len <= 8 => return Err(e),
            Err(_) => len /= 2,
        }
    }
    let end = buf[..len].iter().position(|&b| b == 0).unwrap_or(len);
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}
