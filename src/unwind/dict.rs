//! Dicts, small ints and short strings read out of the target in batches,
//! for thread names: a dict's items (combined or split), a key looked up
//! by its text, a non-negative int of at most two digits.
//!
//! Everything is untrusted: sizes are checked against the dict's own
//! geometry and capped ([`MAX_ENTRIES`], [`MAX_NAME_CHARS`]), addresses
//! must be plausible, and a batch that cannot be read is an error for the
//! caller to fall back from. None of this runs on a sample's hot path.

use crate::error::{Error, Result};
use crate::offsets::Offsets;
use crate::offsets::objects::ObjectOffsets;
use crate::process::{LocalBytes, ProcessMemory, ReadReq};

use super::frames::plausible;
use super::objects::decode_chars;

/// Most entries of one dict we read (`sys.modules` of a large program
/// holds a few thousand).
pub const MAX_ENTRIES: u64 = 1 << 14;
/// Longest string [`read_strs`] decodes: thread names and dict keys.
pub const MAX_NAME_CHARS: u64 = 1024;

/// `dk_kind` values.
pub const KEYS_GENERAL: u8 = 0;
pub const KEYS_SPLIT: u8 = 2;
const KEYS_HEADER: usize = 32;

/// A dict-keys object: its kind and its entries' (key, value) pointers, in
/// entry order (the value is meaningless for split keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub kind: u8,
    pub entries: Vec<(u64, u64)>,
}

/// Check a keys header and say where its entries are: (offset, count,
/// entry size).
pub fn keys_geometry(h: &[u8]) -> Result<(u64, u64, usize)> {
    let bad = |what: &str| Error::corrupt(format!("dict keys: {what}"));
    let log2_size = h.u8_at(8).ok_or_else(|| bad("short header"))? as u64;
    let log2_index = h.u8_at(9).ok_or_else(|| bad("short header"))? as u64;
    let kind = h.u8_at(10).ok_or_else(|| bad("short header"))?;
    let n = h.u64_at(24).ok_or_else(|| bad("short header"))?;
    if !(3..=30).contains(&log2_size) || !(log2_size..=log2_size + 3).contains(&log2_index) {
        return Err(bad("impossible table size"));
    }
    if kind > KEYS_SPLIT {
        return Err(bad("unknown kind"));
    }
    // At most two thirds of the table is usable.
    if n > (2 << log2_size) / 3 || n > MAX_ENTRIES {
        return Err(bad("too many entries"));
    }
    let size = if kind == KEYS_GENERAL { 24 } else { 16 };
    Ok((KEYS_HEADER as u64 + (1u64 << log2_index), n, size))
}

/// Read a dict-keys object at `addr`.
pub fn read_keys(mem: &dyn ProcessMemory, addr: u64) -> Result<Keys> {
    if !plausible(addr) {
        return Err(Error::corrupt(format!("dict keys at {addr:#x}")));
    }
    let mut h = [0u8; KEYS_HEADER];
    mem.read(addr, &mut h)?;
    let (off, n, size) = keys_geometry(&h)?;
    let mut buf = vec![0u8; n as usize * size];
    mem.read(addr.wrapping_add(off), &mut buf)?;
    let k = if size == 24 { 8 } else { 0 };
    let entries = buf
        .chunks_exact(size)
        .map(|e| (e.u64_at(k).unwrap_or(0), e.u64_at(k + 8).unwrap_or(0)))
        .collect();
    Ok(Keys {
        kind: h[10],
        entries,
    })
}

/// The values of a split dict (or of an object's shared-key attributes):
/// one pointer per entry of `keys`, at `values` (a `PyDictValues`).
pub fn split_values(
    mem: &dyn ProcessMemory,
    oo: &ObjectOffsets,
    keys: &Keys,
    values: u64,
) -> Result<Vec<(u64, u64)>> {
    let at = values.wrapping_add(oo.values_header);
    if !plausible(at) {
        return Err(Error::corrupt(format!("dict values at {values:#x}")));
    }
    let mut buf = vec![0u8; keys.entries.len() * 8];
    mem.read(at, &mut buf)?;
    Ok(keys
        .entries
        .iter()
        .zip(buf.chunks_exact(8))
        .map(|(&(k, _), v)| (k, v.u64_at(0).unwrap_or(0)))
        .filter(|&(k, v)| k != 0 && v != 0)
        .collect())
}

/// The (key, value) pointers of the dict at `addr`, combined or split.
pub fn read_dict(
    mem: &dyn ProcessMemory,
    oo: &ObjectOffsets,
    addr: u64,
) -> Result<Vec<(u64, u64)>> {
    if !plausible(addr) {
        return Err(Error::corrupt(format!("dict at {addr:#x}")));
    }
    let mut d = vec![0u8; (oo.dict_values + 8) as usize];
    mem.read(addr, &mut d)?;
    let keys = d.u64_at(oo.dict_keys).unwrap_or(0);
    let values = d.u64_at(oo.dict_values).unwrap_or(0);
    let k = read_keys(mem, keys)?;
    if values != 0 {
        return split_values(mem, oo, &k, values);
    }
    if k.kind == KEYS_SPLIT {
        return Err(Error::corrupt("split keys without values"));
    }
    Ok(k.entries
        .into_iter()
        .filter(|&(k, v)| k != 0 && v != 0)
        .collect())
}

/// Decode the `str` objects at `addrs`, in two batched reads: the headers,
/// then the characters. A string that is not compact, or longer than
/// `max_chars` (itself capped at [`MAX_NAME_CHARS`]), or at an impossible
/// address, is `None`.
pub fn read_strs(
    mem: &dyn ProcessMemory,
    o: &Offsets,
    addrs: &[u64],
    max_chars: u64,
) -> Result<Vec<Option<String>>> {
    let max_chars = max_chars.min(MAX_NAME_CHARS);
    let hl = o.unicode_ascii_size as usize;
    let mut heads = vec![0u8; hl * addrs.len()];
    {
        let mut reqs: Vec<ReadReq<'_>> = addrs
            .iter()
            .zip(heads.chunks_exact_mut(hl))
            .filter(|(a, _)| plausible(**a))
            .map(|(&addr, buf)| ReadReq { addr, buf })
            .collect();
        mem.read_many(&mut reqs)?;
    }
    // (data offset, kind, ascii, length) of each string worth reading.
    let shape: Vec<Option<(u64, u64, bool, u64)>> = addrs
        .iter()
        .zip(heads.chunks_exact(hl))
        .map(|(&a, h)| {
            if !plausible(a) {
                return None;
            }
            let state = h.u32_at(o.unicode_state)?;
            let len = h.u64_at(o.unicode_length)?;
            let kind = ((state >> 2) & 7) as u64;
            let compact = state & (1 << 5) != 0;
            let ascii = state & (1 << 6) != 0;
            if !compact || !matches!(kind, 1 | 2 | 4) || (ascii && kind != 1) || len > max_chars {
                return None;
            }
            let off = if ascii {
                o.unicode_ascii_size
            } else {
                o.unicode_compact_size
            };
            Some((off, kind, ascii, len))
        })
        .collect();
    let mut data: Vec<Vec<u8>> = shape
        .iter()
        .map(|s| vec![0u8; s.map_or(0, |(_, k, _, n)| (k * n) as usize)])
        .collect();
    {
        let mut reqs: Vec<ReadReq<'_>> = addrs
            .iter()
            .zip(&shape)
            .zip(data.iter_mut())
            .filter_map(|((&a, s), buf)| {
                let (off, ..) = (*s)?;
                (!buf.is_empty()).then(|| ReadReq {
                    addr: a.wrapping_add(off),
                    buf: &mut buf[..],
                })
            })
            .collect();
        mem.read_many(&mut reqs)?;
    }
    Ok(shape
        .iter()
        .zip(&data)
        .map(|(s, d)| {
            let (_, kind, ascii, _) = (*s)?;
            decode_chars(kind, ascii, d)
        })
        .collect())
}

/// The value stored under the `str` key `name` among `items`, if any.
pub fn find_key(
    mem: &dyn ProcessMemory,
    o: &Offsets,
    items: &[(u64, u64)],
    name: &str,
) -> Result<Option<u64>> {
    let keys: Vec<u64> = items.iter().map(|&(k, _)| k).collect();
    let texts = read_strs(mem, o, &keys, name.chars().count() as u64)?;
    Ok(items
        .iter()
        .zip(texts)
        .find(|(_, t)| t.as_deref() == Some(name))
        .map(|(&(_, v), _)| v))
}

/// Bytes [`decode_int`] needs: the header and two digits.
pub fn int_read_size(oo: &ObjectOffsets) -> usize {
    (oo.long_digit + 8) as usize
}

/// A non-negative `int` of at most two 30-bit digits (a thread ident),
/// from [`int_read_size`] bytes of it; `None` for anything else.
pub fn decode_int(oo: &ObjectOffsets, b: &[u8]) -> Option<u64> {
    let tag = b.u64_at(oo.long_tag)?;
    let ndigits = if oo.long_size_is_signed_count {
        let size = tag as i64;
        if size < 0 {
            return None;
        }
        size as u64
    } else {
        match tag & 3 {
            1 => return Some(0),
            0 => tag >> 3,
            _ => return None,
        }
    };
    if ndigits > 2 {
        return None;
    }
    let mut v = 0u64;
    for i in (0..ndigits).rev() {
        let d = b.u32_at(oo.long_digit + 4 * i)? as u64;
        if d >= 1 << 30 {
            return None;
        }
        v = (v << 30) | d;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offsets::objects::ManagedDict;

    fn oo(signed: bool) -> ObjectOffsets {
        ObjectOffsets {
            interp_modules: 0,
            dict_used: 16,
            managed_dict_before: 24,
            dict_keys: 32,
            dict_values: 40,
            values_header: 8,
            long_tag: 16,
            long_size_is_signed_count: signed,
            long_digit: 24,
            module_dict: 16,
            type_basicsize: 32,
            type_flags: 168,
            heap_cached_keys: 880,
            managed: ManagedDict::Inline313,
        }
    }

    fn int_bytes(tag: u64, digits: &[u32]) -> Vec<u8> {
        let mut b = vec![0u8; 24 + 4 * digits.len().max(2)];
        b[16..24].copy_from_slice(&tag.to_le_bytes());
        for (i, d) in digits.iter().enumerate() {
            b[24 + 4 * i..28 + 4 * i].copy_from_slice(&d.to_le_bytes());
        }
        b
    }

    #[test]
    fn ints_decode_in_both_layouts() {
        let ident: u64 = 0x7f12_3456_7640;
        let lo = (ident & ((1 << 30) - 1)) as u32;
        let hi = (ident >> 30) as u32;
        // 3.12+: digit count << 3, sign 0 (positive).
        assert_eq!(
            decode_int(&oo(false), &int_bytes(2 << 3, &[lo, hi])),
            Some(ident)
        );
        assert_eq!(decode_int(&oo(false), &int_bytes(1, &[])), Some(0));
        assert_eq!(decode_int(&oo(false), &int_bytes((1 << 3) | 2, &[5])), None);
        assert_eq!(decode_int(&oo(false), &int_bytes(3 << 3, &[1, 1, 1])), None);
        // 3.11: signed digit count.
        assert_eq!(decode_int(&oo(true), &int_bytes(2, &[lo, hi])), Some(ident));
        assert_eq!(decode_int(&oo(true), &int_bytes(-1i64 as u64, &[5])), None);
        // A digit with its top bits set is not an int's.
        assert_eq!(decode_int(&oo(true), &int_bytes(1, &[1 << 30])), None);
        // Short input is refused, not a panic.
        assert_eq!(decode_int(&oo(true), &[0u8; 20]), None);
    }

    fn keys_header(log2_size: u8, log2_index: u8, kind: u8, n: u64) -> Vec<u8> {
        let mut h = vec![0u8; 32];
        h[8] = log2_size;
        h[9] = log2_index;
        h[10] = kind;
        h[24..32].copy_from_slice(&n.to_le_bytes());
        h
    }

    #[test]
    fn keys_geometry_follows_the_header_and_refuses_lies() {
        // 8 slots, 1-byte indices: entries right after 8 index bytes.
        assert_eq!(
            keys_geometry(&keys_header(3, 3, 1, 5)).unwrap(),
            (40, 5, 16)
        );
        assert_eq!(
            keys_geometry(&keys_header(8, 9, 0, 100)).unwrap(),
            (32 + 512, 100, 24)
        );
        for h in [
            keys_header(3, 3, 1, 6),   // more than two thirds
            keys_header(3, 3, 3, 1),   // no such kind
            keys_header(40, 40, 1, 1), // absurd size
            keys_header(4, 2, 1, 1),   // index bytes below the slot count
            keys_header(20, 20, 1, MAX_ENTRIES + 1),
        ] {
            assert!(keys_geometry(&h).is_err(), "{h:?}");
        }
        assert!(keys_geometry(&[0u8; 10]).is_err());
    }

    use crate::process::Regions as Fake;

    fn ascii_str(s: &str) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        b[16..24].copy_from_slice(&(s.len() as u64).to_le_bytes());
        // compact, ASCII, one byte a character
        b[32..36].copy_from_slice(&(1u32 << 5 | 1 << 6 | 1 << 2).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
        b.push(0);
        b
    }

    fn keys(kind: u8, entries: &[(u64, u64)]) -> Vec<u8> {
        let mut b = keys_header(3, 3, kind, entries.len() as u64);
        b.extend_from_slice(&[0u8; 8]); // the indices, unused here
        for &(k, v) in entries {
            b.extend_from_slice(&k.to_le_bytes());
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn dict(keys: u64, values: u64) -> Vec<u8> {
        let mut b = vec![0u8; 48];
        b[32..40].copy_from_slice(&keys.to_le_bytes());
        b[40..48].copy_from_slice(&values.to_le_bytes());
        b
    }

    fn offsets() -> (Offsets, ObjectOffsets) {
        let c = crate::offsets::carried::CARRIED[1];
        let v = crate::offsets::PyVersion::from_hex(0x030c_01f0);
        let o = Offsets::from_carried(1, &c.table(v)).unwrap();
        let oo = o.objects.clone();
        (o, oo)
    }

    #[test]
    fn combined_and_split_dicts_are_read_and_searched_by_text() {
        let (o, oo) = offsets();
        assert_eq!(oo.values_header, 0, "3.12: values start at once");
        let (s1, s2, s3) = (0x10_0000u64, 0x10_1000u64, 0x10_2000u64);
        let (k, d, sk, sv, sd) = (0x20_0000u64, 0x20_1000, 0x20_2000, 0x20_3000, 0x20_4000);
        let mut values = Vec::new();
        values.extend_from_slice(&0x99u64.to_le_bytes());
        values.extend_from_slice(&0u64.to_le_bytes()); // deleted
        let mem = Fake(vec![
            (s1, ascii_str("threading")),
            (s2, ascii_str("threadinG")), // same length, other text
            (s3, ascii_str("_active")),
            (k, keys(1, &[(s2, 0x11), (s1, 0x22), (0, 0x33)])),
            (d, dict(k, 0)),
            (sk, keys(KEYS_SPLIT, &[(s3, 0), (s1, 0)])),
            (sv, values),
            (sd, dict(sk, sv)),
        ]);
        let items = read_dict(&mem, &oo, d).unwrap();
        assert_eq!(items, vec![(s2, 0x11), (s1, 0x22)]);
        assert_eq!(find_key(&mem, &o, &items, "threading").unwrap(), Some(0x22));
        assert_eq!(find_key(&mem, &o, &items, "threads").unwrap(), None);
        // Split: values by entry index; a NULL value is no item.
        let items = read_dict(&mem, &oo, sd).unwrap();
        assert_eq!(items, vec![(s3, 0x99)]);
        assert_eq!(find_key(&mem, &o, &items, "_active").unwrap(), Some(0x99));
        // Longer than asked for: not read at all.
        assert_eq!(
            read_strs(&mem, &o, &[s1, s3], 7).unwrap(),
            vec![None, Some("_active".to_owned())]
        );
        // Split keys without values, a dict at an impossible address and
        // unreadable keys are errors, not panics.
        let bad = Fake(vec![(sk, keys(KEYS_SPLIT, &[(s3, 0)])), (sd, dict(sk, 0))]);
        assert!(read_dict(&bad, &oo, sd).is_err());
        assert!(read_dict(&mem, &oo, 3).is_err());
        assert!(read_dict(&mem, &oo, s1).is_err());
    }
}
