//! The location table (`co_linetable`, CPython 3.11+): instruction offset to
//! (line, end line, column, end column).
//!
//! The table is a run of entries. Each begins with a byte whose top bit is
//! set; bits 3-6 give the entry's form and bits 0-2 its length in code units,
//! minus one. Line numbers are deltas from the previous entry, starting at
//! `co_firstlineno`. Numbers use 6-bit varints (least significant group
//! first, 0x40 = more follows); signed ones fold the sign into bit 0.
//!
//! The bytes come from the target, so every read is bounds-checked and a
//! malformed table ends the walk with `None` rather than a panic.

pub use crate::model::Location;

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn varint(&mut self) -> Option<u32> {
        let mut b = self.byte()?;
        let mut val = (b & 0x3f) as u32;
        let mut shift = 0u32;
        while b & 0x40 != 0 {
            b = self.byte()?;
            shift += 6;
            if shift > 30 {
                return None;
            }
            val |= ((b & 0x3f) as u32) << shift;
        }
        Some(val)
    }

    fn svarint(&mut self) -> Option<i32> {
        let u = self.varint()?;
        let mag = (u >> 1) as i32;
        Some(if u & 1 != 0 { -mag } else { mag })
    }
}

/// One decoded entry: code units `[start, end)` have `loc` (`None`: the
/// table's "no location" form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub start: u32,
    pub end: u32,
    pub loc: Option<Location>,
}

/// Iterates the entries of a table.
pub struct Entries<'a> {
    r: Reader<'a>,
    addr: u32,
    line: i32,
    failed: bool,
}

/// Walk a whole table.
pub fn entries(table: &[u8], firstlineno: i32) -> Entries<'_> {
    Entries {
        r: Reader {
            bytes: table,
            pos: 0,
        },
        addr: 0,
        line: firstlineno,
        failed: false,
    }
}

impl Entries<'_> {
    /// True if the walk stopped on malformed bytes rather than the end.
    pub fn failed(&self) -> bool {
        self.failed
    }

    fn next_entry(&mut self) -> Option<Entry> {
        let first = self.r.byte()?;
        if first & 0x80 == 0 {
            return None;
        }
        let code = (first >> 3) & 0x0f;
        let start = self.addr;
        let end = start.checked_add((first & 7) as u32 + 1)?;
        let loc = match code {
            0..=9 => {
                let b = self.r.byte()?;
                if b & 0x80 != 0 {
                    return None;
                }
                let col = code as i32 * 8 + ((b >> 4) & 7) as i32;
                Some(Location {
                    line: self.line,
                    end_line: self.line,
                    col,
                    end_col: col + (b & 15) as i32,
                })
            }
            10..=12 => {
                self.line = self.line.checked_add(code as i32 - 10)?;
                let col = self.r.byte()? as i32;
                let end_col = self.r.byte()? as i32;
                Some(Location {
                    line: self.line,
                    end_line: self.line,
                    col,
                    end_col,
                })
            }
            13 => {
                self.line = self.line.checked_add(self.r.svarint()?)?;
                Some(Location {
                    line: self.line,
                    end_line: self.line,
                    col: -1,
                    end_col: -1,
                })
            }
            14 => {
                self.line = self.line.checked_add(self.r.svarint()?)?;
                let end_line = self.line.checked_add(self.r.varint()? as i32)?;
                // Columns are stored plus one; past i32 they are garbage.
                let col = i32::try_from(self.r.varint()?).ok()? - 1;
                let end_col = i32::try_from(self.r.varint()?).ok()? - 1;
                Some(Location {
                    line: self.line,
                    end_line,
                    col,
                    end_col,
                })
            }
            _ => None,
        };
        self.addr = end;
        Some(Entry { start, end, loc })
    }
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        if self.failed || self.r.pos >= self.r.bytes.len() {
            return None;
        }
        let at = self.r.pos;
        let e = self.next_entry();
        if e.is_none() && at < self.r.bytes.len() {
            self.failed = true;
        }
        e
    }
}

/// The location of the instruction at code unit `addrq`, or `None` when the
/// table gives none, does not cover it, or is malformed before reaching it.
pub fn locate(table: &[u8], firstlineno: i32, addrq: u32) -> Option<Location> {
    covering(table, firstlineno, addrq).flatten()
}

/// The entry covering code unit `addrq`: `Some(None)` when it says the
/// instruction has no location, `None` when no entry covers it (or the
/// table is malformed before one does).
pub fn covering(table: &[u8], firstlineno: i32, addrq: u32) -> Option<Option<Location>> {
    entries(table, firstlineno)
        .find(|e| e.start <= addrq && addrq < e.end)
        .map(|e| e.loc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_form() {
        // short form (code 2, length 1): col = 2*8 + 3 = 19, end = 19 + 4
        // one-line form (code 11, length 2): line + 1, cols 5..9
        // no-column form (code 13, length 1): line += -2 (svarint 5)
        // long form (code 14, length 3): line += 3, end_line = line + 1, cols 0..3
        // no-location form (code 15, length 1)
        let t = [
            0x80 | (2 << 3),
            0x34,
            0x80 | (11 << 3) | 1,
            5,
            9,
            0x80 | (13 << 3),
            5,
            0x80 | (14 << 3) | 2,
            6,
            1,
            1,
            4,
            0x80 | (15 << 3),
        ];
        let got: Vec<_> = entries(&t, 10).collect();
        assert_eq!(got.len(), 5);
        assert_eq!(
            got[0].loc,
            Some(Location {
                line: 10,
                end_line: 10,
                col: 19,
                end_col: 23
            })
        );
        assert_eq!((got[1].start, got[1].end), (1, 3));
        assert_eq!(
            got[1].loc,
            Some(Location {
                line: 11,
                end_line: 11,
                col: 5,
                end_col: 9
            })
        );
        assert_eq!(
            got[2].loc,
            Some(Location {
                line: 9,
                end_line: 9,
                col: -1,
                end_col: -1
            })
        );
        assert_eq!(
            got[3].loc,
            Some(Location {
                line: 12,
                end_line: 13,
                col: 0,
                end_col: 3
            })
        );
        assert_eq!(got[4].loc, None);
        assert_eq!(locate(&t, 10, 2).unwrap().line, 11);
        assert_eq!(locate(&t, 10, 6).unwrap().end_line, 13);
        assert_eq!(locate(&t, 10, 7), None);
        assert_eq!(locate(&t, 10, 99), None);
        // Unit 7 is covered by the no-location entry; unit 99 by none.
        assert_eq!(covering(&t, 10, 7), Some(None));
        assert_eq!(covering(&t, 10, 99), None);
        assert_eq!(covering(&t, 10, 0).flatten(), locate(&t, 10, 0));
    }

    #[test]
    fn malformed_tables_end_the_walk_without_panicking() {
        // Truncated after a short-form header; a continuation byte where an
        // entry should start; endless varint.
        for t in [
            &[0x80u8][..],
            &[0x05],
            &[0x80 | (13 << 3), 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f],
        ] {
            let mut e = entries(t, 1);
            assert!(e.by_ref().count() == 0);
            assert!(e.failed());
            assert_eq!(locate(t, 1, 0), None);
        }
    }
}
