//! The validator alone: a real table (first byte picks which) with fields
//! overwritten, so every input reaches `Offsets::from_raw` past the
//! cookie and version checks. The rest of the input is 9-byte edits:
//! a field index (bit 7: add the value to the field instead of replacing
//! it) and a u64 LE.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tachyon::offsets::Offsets;

#[path = "tables.rs"]
mod tables;

fuzz_target!(|data: &[u8]| {
    let Some((&which, edits)) = data.split_first() else {
        return;
    };
    let mut raw = tables::raw(which);
    let names: Vec<&'static str> = raw.fields().iter().map(|(n, _)| *n).collect();
    for e in edits.chunks_exact(9) {
        let name = names[(e[0] & 0x7f) as usize % names.len()];
        let v = u64::from_le_bytes(e[1..9].try_into().unwrap());
        let new = if e[0] & 0x80 != 0 {
            raw.get(name).unwrap().wrapping_add(v)
        } else {
            v
        };
        raw.set(name, new);
    }
    if let Ok(o) = Offsets::from_raw(tables::PID, &raw) {
        tables::check(&o);
    }
});
