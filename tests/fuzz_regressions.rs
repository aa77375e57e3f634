//! Inputs the fuzz targets (`fuzz/`, `scripts/fuzz.sh`) found to break a
//! decoder of untrusted input, fed to the same public API. Each must give
//! an error or a correct result, never a panic (tests build with overflow
//! checks, like the fuzz targets).

use tachyon::unwind::linetable::{entries, locate};

/// `linetable` target, crash-8cb2c2d5a218d6c9b176a84991a0d733cdaad0fd:
/// `co_firstlineno` = i32::MAX and then a one-line-form entry (code 11:
/// line + 1) overflowed `Entries::next_entry` ("attempt to add with
/// overflow"; a release build wraps to a negative line instead). Both come
/// from the target's memory.
#[test]
fn linetable_line_overflow_past_i32_max() {
    // The fuzzer's input: firstlineno (i32 LE), address (u32 LE), table.
    let found: &[u8] = &[
        0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xd8, 0x15, 0x19, 0x8c,
        0x0a, 0xd8, 0x14, 0x18, 0x97, 0x4a, 0x91, 0x5a, 0x88, 0x04, 0x00, 0x03, 0x05, 0x27, 0xf1,
        0xf1, 0x23, 0xff, 0x03, 0x6c, 0xf0,
    ];
    let first = i32::from_le_bytes(found[..4].try_into().unwrap());
    let addr = u32::from_le_bytes(found[4..8].try_into().unwrap());
    let table = &found[8..];
    let _ = entries(table, first).count();
    let _ = locate(table, first, addr);

    // Reduced: one entry of code 11, length 1, columns 0..0.
    let table = [0x80 | (11 << 3), 0, 0];
    assert!(entries(&table, i32::MAX).all(|e| e.loc.is_none_or(|l| l.line > 0)));
    assert!(locate(&table, i32::MAX, 0).is_none_or(|l| l.line > 0));
}

/// Found while writing the `linetable` target, not by the fuzzer (60 s did
/// not reach it): a long-form entry (code 14) whose column varint sets bit
/// 31 (`2 << 30` in its sixth 6-bit group) reads as i32::MIN, and the
/// `- 1` that turns it into a 0-based column overflows.
#[test]
fn linetable_column_overflow_in_long_form() {
    // 1 << 31 as a 6-bit varint: five empty groups with "more", then 2.
    let big = [0x40, 0x40, 0x40, 0x40, 0x40, 0x02];
    // code 14, length 1; line delta 0, end line delta 0; then the column
    // and the end column, one of them big.
    let head = [0x80 | (14 << 3), 0, 0];
    for table in [
        [&head[..], &big, &[0]].concat(),
        [&head[..], &[1], &big].concat(),
    ] {
        let _ = entries(&table, 1).count();
        let _ = locate(&table, 1, 0);
    }
}
