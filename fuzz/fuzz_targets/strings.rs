//! `read_str`, `read_bytes` and `read_cstr` on arbitrary target memory,
//! with a real offsets table. Input: table index (u8), reader (u8: 0 str,
//! 1 bytes, 2 C string; for C strings bits 2-7 also scale the cap), the
//! object's offset in the image (u16 LE), then the memory image, mapped at
//! a fixed address; reads outside it fail as an unmapped page would.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tachyon::Error;
use tachyon::process::ProcessMemory;
use tachyon::unwind::objects::{MAX_BYTES, MAX_STR_CHARS, read_bytes, read_cstr, read_str};

#[path = "tables.rs"]
mod tables;

const BASE: u64 = 0x7f00_0000_0000;

struct Image<'a>(&'a [u8]);

impl ProcessMemory for Image<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> tachyon::Result<()> {
        let range = addr
            .checked_sub(BASE)
            .and_then(|o| usize::try_from(o).ok())
            .and_then(|o| Some(o..o.checked_add(buf.len())?))
            .filter(|r| r.end <= self.0.len())
            .ok_or_else(|| Error::corrupt("unmapped"))?;
        buf.copy_from_slice(&self.0[range]);
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let offs = tables::offsets(data[0]);
    let op = data[1];
    let addr = BASE + u64::from(u16::from_le_bytes([data[2], data[3]]));
    let mem = Image(&data[4..]);
    match op & 3 {
        0 => {
            if let Ok(s) = read_str(&mem, &offs, addr) {
                // Cut at MAX_STR_CHARS, plus the "..." marker.
                assert!(s.chars().count() as u64 <= MAX_STR_CHARS + 3);
            }
        }
        1 => {
            if let Ok(Some(b)) = read_bytes(&mem, &offs, addr) {
                assert!(b.len() as u64 <= MAX_BYTES);
            }
        }
        _ => {
            let max = 1 + usize::from(op >> 2) * 16;
            if let Ok(s) = read_cstr(&mem, addr, max) {
                assert!(s.len() <= max * 3, "lossy decoding at most triples");
            }
        }
    }
});
