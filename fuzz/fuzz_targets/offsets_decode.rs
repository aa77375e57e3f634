//! `RawTable::decode` then `Offsets::from_raw` on arbitrary bytes, as read
//! from a target's `_Py_DebugOffsets`: either an error or offsets that keep
//! every promise of `tables::check`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tachyon::offsets::{Offsets, RawTable};

#[path = "tables.rs"]
mod tables;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = RawTable::decode(tables::PID, data) else {
        return;
    };
    if let Ok(o) = Offsets::from_raw(tables::PID, &raw) {
        tables::check(&o);
    }
});
