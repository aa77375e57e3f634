//! The location table decoder on arbitrary `co_linetable` bytes and
//! `co_firstlineno` (both read from the target). Input: firstlineno (i32
//! LE), an address to look up (u32 LE), the table.
//!
//! Besides never panicking: entries are contiguous from address 0, there
//! are at most as many as bytes, and `locate` agrees with the walk.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tachyon::unwind::linetable::{entries, locate};

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let first = i32::from_le_bytes(data[0..4].try_into().unwrap());
    let addr = u32::from_le_bytes(data[4..8].try_into().unwrap());
    let table = &data[8..];
    let mut walk = entries(table, first);
    let mut next_start = 0u32;
    let mut count = 0usize;
    let mut found = None;
    for e in walk.by_ref() {
        assert_eq!(e.start, next_start, "entries are not contiguous");
        assert!(e.end > e.start && e.end - e.start <= 8);
        next_start = e.end;
        count += 1;
        assert!(count <= table.len(), "more entries than bytes");
        if found.is_none() && e.start <= addr && addr < e.end {
            found = e.loc;
        }
    }
    let _ = walk.failed();
    assert_eq!(locate(table, first, addr), found);
});
