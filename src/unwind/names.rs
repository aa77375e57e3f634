//! Thread names, as `threading` knows them (`MainThread`, `worker-3`,
//! `ThreadPoolExecutor-0_1`, not cut to 15 bytes), else the kernel's
//! `comm`.
//!
//! From an interpreter: `sys.modules` → the `threading` module → its
//! `_active` dict (`get_ident()` int → `Thread`) → each Thread's `_name`
//! instance attribute. A Thread's ident is the thread state's `thread_id`,
//! which is how a name finds its thread.
//!
//! Never on a sample's path: [`ThreadNames::apply`] runs after a sample is
//! complete and resolves only when a thread it has not named appears (at
//! most every [`MIN_GAP`]) or every [`REFRESH`]; in between a name is a
//! cache lookup by (native id, ident, interpreter): one OS thread can run
//! in several interpreters, with a Thread (and a name) in each. Every read is bounded by the caps of
//! [`super::dict`] and [`MAX_NAMED`]; a failure costs the names, never the
//! sample.

use foldhash::{HashMap, HashMapExt, HashSet};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::model::{FrameTable, StrId, ThreadSample};
use crate::offsets::Offsets;
use crate::offsets::objects::{
    ManagedDict, ObjectOffsets, TPFLAGS_HEAPTYPE, TPFLAGS_INLINE_VALUES, TPFLAGS_MANAGED_DICT,
};
use crate::process::{LocalBytes, ProcessMemory, ReadReq};

use super::dict::{self, MAX_NAME_CHARS};
use super::frames::plausible;

/// Shortest time between two resolutions prompted by new threads.
pub const MIN_GAP: Duration = Duration::from_millis(100);
/// Names are read again this often (threads rename themselves).
pub const REFRESH: Duration = Duration::from_secs(1);
/// Most threads named per interpreter.
pub const MAX_NAMED: usize = 4096;
/// Distinct thread names kept as they are; later names are kept as their
/// pool's (twice the threads the sampling loop keeps apart, see
/// `sample::pools`).
pub const MAX_NAMES_KEPT: usize = 2048;
/// Most interpreters whose `threading` is read per resolution.
pub const MAX_INTERPS_NAMED: usize = 8;
/// Most Threads whose attributes live in a materialised `__dict__` (a few
/// reads each) per interpreter and resolution.
const MAX_DICT_THREADS: usize = 16;

/// The name of each `threading` thread of the interpreter at `interp`, by
/// ident. `Ok(empty)` when the program never imported `threading`.
pub fn threading_names(
    mem: &dyn ProcessMemory,
    o: &Offsets,
    oo: &ObjectOffsets,
    interp: u64,
) -> Result<HashMap<u64, String>> {
    let modules = mem.read_u64(interp.wrapping_add(oo.interp_modules))?;
    if modules == 0 {
        // No `sys.modules` yet (starting) or any more (finalizing): no
        // names to read, nothing wrong.
        return Ok(HashMap::new());
    }
    let items = dict::read_dict(mem, oo, modules)?;
    let Some(threading) = dict::find_key(mem, o, &items, "threading")? else {
        return Ok(HashMap::new());
    };
    if !plausible(threading) {
        return Err(Error::corrupt("threading module at an impossible address"));
    }
    let globals = mem.read_u64(threading.wrapping_add(oo.module_dict))?;
    let items = dict::read_dict(mem, oo, globals)?;
    let active = dict::find_key(mem, o, &items, "_active")?
        .ok_or_else(|| Error::corrupt("threading has no _active"))?;
    let mut threads = dict::read_dict(mem, oo, active)?;
    threads.truncate(MAX_NAMED);

    // The idents: int keys, read in one batch.
    let isz = dict::int_read_size(oo);
    let mut ints = vec![0u8; isz * threads.len()];
    {
        let mut reqs: Vec<ReadReq<'_>> = threads
            .iter()
            .zip(ints.chunks_exact_mut(isz))
            .filter(|((k, _), _)| plausible(*k))
            .map(|(&(addr, _), buf)| ReadReq { addr, buf })
            .collect();
        mem.read_many(&mut reqs)?;
    }
    let objs: Vec<u64> = threads.iter().map(|&(_, t)| t).collect();
    let name_ptrs = attribute(mem, o, oo, &objs, "_name")?;
    let names = dict::read_strs(mem, o, &name_ptrs, MAX_NAME_CHARS)?;
    let mut out = HashMap::new();
    for ((i, &(k, _)), name) in threads.iter().enumerate().zip(names) {
        if !plausible(k) {
            continue;
        }
        if let (Some(ident), Some(name)) =
            (dict::decode_int(oo, &ints[i * isz..(i + 1) * isz]), name)
        {
            out.insert(ident, name);
        }
    }
    Ok(out)
}

/// What a type tells about its instances' attributes.
#[derive(Clone, Copy)]
struct TypeFacts {
    flags: u64,
    basicsize: u64,
    /// Index of the attribute among the type's shared keys, if there.
    index: Option<usize>,
}

/// The value pointer of instance attribute `attr` of each object in
/// `objs` (0 where it has none or it cannot be read), in a few batched
/// reads: the objects' headers, their types, the types' shared keys, the
/// values. Objects whose attributes live in a materialised dict cost a dict
/// read each (the first [`MAX_DICT_THREADS`]).
pub fn attribute(
    mem: &dyn ProcessMemory,
    o: &Offsets,
    oo: &ObjectOffsets,
    objs: &[u64],
    attr: &str,
) -> Result<Vec<u64>> {
    let heads = Heads::read(mem, o, objs)?;
    let types = heads.types(mem, o, oo, attr)?;
    let mut out = vec![0u8; 8 * objs.len()];
    let mut valid = vec![[0u8; 4]; objs.len()];
    let mut dicts: Vec<(usize, u64)> = Vec::new();
    {
        let mut reqs: Vec<ReadReq<'_>> = Vec::new();
        for (i, ((&obj, slot), v)) in objs
            .iter()
            .zip(out.chunks_exact_mut(8))
            .zip(valid.iter_mut())
            .enumerate()
        {
            let Some((tf, values, dict)) = heads.attributes_of(o, oo, &types, i, obj) else {
                continue;
            };
            if dict != 0 {
                dicts.push((i, dict));
            } else if let (Some(idx), true) = (tf.index, plausible(values)) {
                let at = values
                    .wrapping_add(oo.values_header)
                    .wrapping_add(8 * idx as u64);
                reqs.push(ReadReq {
                    addr: at,
                    buf: slot,
                });
                if oo.values_header != 0 {
                    reqs.push(ReadReq {
                        addr: values,
                        buf: &mut v[..],
                    });
                }
            }
        }
        mem.read_many(&mut reqs)?;
    }
    let mut ptrs: Vec<u64> = out
        .chunks_exact(8)
        .zip(&valid)
        .map(|(p, v)| {
            // 3.13+: `valid` (byte 3) is cleared when the values moved to a
            // dict; never set when no values were read, so check only there.
            let p = p.u64_at(0).unwrap_or(0);
            if oo.values_header != 0 && p != 0 && v[3] == 0 {
                0
            } else {
                p
            }
        })
        .collect();
    for &(i, d) in dicts.iter().take(MAX_DICT_THREADS) {
        if let Ok(items) = dict::read_dict(mem, oo, d) {
            ptrs[i] = dict::find_key(mem, o, &items, attr)?.unwrap_or(0);
        }
    }
    Ok(ptrs)
}

/// Each object's header and the 32 bytes before it (the managed-dict
/// words), read in one call.
struct Heads {
    bytes: Vec<u8>,
    each: usize,
}

impl Heads {
    /// Bytes before each object that its managed-dict words take.
    const PRE: u64 = 32;

    fn read(mem: &dyn ProcessMemory, o: &Offsets, objs: &[u64]) -> Result<Heads> {
        let each = (Self::PRE + o.ob_type + 8) as usize;
        let mut bytes = vec![0u8; each * objs.len()];
        let mut reqs: Vec<ReadReq<'_>> = objs
            .iter()
            .zip(bytes.chunks_exact_mut(each))
            .filter(|(a, _)| plausible(**a))
            .map(|(&a, buf)| ReadReq {
                addr: a.wrapping_sub(Self::PRE),
                buf,
            })
            .collect();
        mem.read_many(&mut reqs)?;
        drop(reqs);
        Ok(Heads { bytes, each })
    }

    fn head(&self, i: usize) -> &[u8] {
        &self.bytes[i * self.each..(i + 1) * self.each]
    }

    /// The objects' types (at most 8 distinct), each with what `attr`
    /// needs of it, or `None` where it could not be read.
    fn types(
        &self,
        mem: &dyn ProcessMemory,
        o: &Offsets,
        oo: &ObjectOffsets,
        attr: &str,
    ) -> Result<HashMap<u64, Option<TypeFacts>>> {
        let mut types: HashMap<u64, Option<TypeFacts>> = HashMap::new();
        for i in 0..self.bytes.len() / self.each.max(1) {
            if let Some(t) = self.head(i).u64_at(Self::PRE + o.ob_type) {
                types.entry(t).or_insert(None);
            }
        }
        if types.len() > 8 {
            return Err(Error::corrupt("too many thread types"));
        }
        let mut type_list: Vec<u64> = types.keys().copied().collect();
        type_list.sort_unstable();
        for &t in &type_list {
            types.insert(t, type_facts(mem, o, oo, t, attr).ok());
        }
        Ok(types)
    }

    /// Where object `i` (at `obj`) keeps its attributes, if its type has a
    /// managed dict: its type's facts, its inline values (0: none) and its
    /// dict (0: none).
    fn attributes_of<'t>(
        &self,
        o: &Offsets,
        oo: &ObjectOffsets,
        types: &'t HashMap<u64, Option<TypeFacts>>,
        i: usize,
        obj: u64,
    ) -> Option<(&'t TypeFacts, u64, u64)> {
        let h = self.head(i);
        if !plausible(obj) {
            return None;
        }
        let tf = h
            .u64_at(Self::PRE + o.ob_type)
            .and_then(|t| types.get(&t))?
            .as_ref()?;
        if tf.flags & TPFLAGS_MANAGED_DICT == 0 {
            return None;
        }
        // 3.11's values pointer, 8 bytes before the dict pointer.
        let w32 = h.u64_at(0).unwrap_or(0);
        let w24 = h.u64_at(Self::PRE - oo.managed_dict_before).unwrap_or(0);
        let (values, dict) = match oo.managed {
            ManagedDict::Split311 => (w32, w24),
            ManagedDict::Tagged312 if w24 & 1 == 1 => (w24.wrapping_add(1), 0),
            ManagedDict::Tagged312 => (0, w24),
            ManagedDict::Inline313 if w24 != 0 => (0, w24),
            ManagedDict::Inline313 if tf.flags & TPFLAGS_INLINE_VALUES != 0 => {
                (obj.wrapping_add(tf.basicsize), 0)
            }
            ManagedDict::Inline313 => (0, 0),
        };
        Some((tf, values, dict))
    }
}

/// A type's flags, basic size and where `attr` is among the keys its
/// instances share.
fn type_facts(
    mem: &dyn ProcessMemory,
    o: &Offsets,
    oo: &ObjectOffsets,
    t: u64,
    attr: &str,
) -> Result<TypeFacts> {
    if !plausible(t) {
        return Err(Error::corrupt("type at an impossible address"));
    }
    let mut b = vec![0u8; (oo.type_flags.max(oo.type_basicsize) + 8) as usize];
    mem.read(t, &mut b)?;
    let flags = b.u64_at(oo.type_flags).unwrap_or(0);
    let basicsize = b.u64_at(oo.type_basicsize).unwrap_or(0);
    if !(16..=4096).contains(&basicsize) {
        return Err(Error::corrupt("implausible basic size"));
    }
    let mut index = None;
    if flags & TPFLAGS_HEAPTYPE != 0 {
        let keys = mem.read_u64(t.wrapping_add(oo.heap_cached_keys))?;
        if keys != 0 {
            let k = dict::read_keys(mem, keys)?;
            let items: Vec<(u64, u64)> = k
                .entries
                .iter()
                .enumerate()
                .map(|(i, &(key, _))| (key, i as u64 + 1))
                .filter(|&(key, _)| key != 0)
                .collect();
            index = dict::find_key(mem, o, &items, attr)?.map(|i| i as usize - 1);
        }
    }
    Ok(TypeFacts {
        flags,
        basicsize,
        index,
    })
}

/// One thread of a sample, as names are keyed: its native id, its
/// `thread_id` (`threading`'s ident) and its interpreter's address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ThreadKey {
    pub tid: u64,
    pub ident: u64,
    pub interp: u64,
}

/// Names by thread, refreshed rarely (see the module's doc).
#[derive(Default)]
pub struct ThreadNames {
    cache: HashMap<ThreadKey, Option<StrId>>,
    last: Option<Instant>,
    /// Why the last resolution could not read `threading` (None: it could).
    pub why: Option<String>,
    /// Some resolution could read it: a later failure is a passing one (a
    /// program finalizing), not worth a word.
    pub ever_read: bool,
    /// Resolutions that could not read it.
    pub failures: u64,
    /// Resolutions so far.
    pub resolutions: u64,
    /// Distinct names interned as they are (see [`ThreadNames::intern`]).
    names_kept: usize,
}

impl ThreadNames {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a resolution is due for the threads `keys` at `now`.
    pub fn due(&self, keys: &[ThreadKey], now: Instant) -> bool {
        let Some(last) = self.last else {
            return true;
        };
        let age = now.saturating_duration_since(last);
        if age >= REFRESH {
            return true;
        }
        // Cheap first: most samples come sooner than MIN_GAP after the last.
        age >= MIN_GAP && keys.iter().any(|k| !self.cache.contains_key(k))
    }

    /// Name every thread of a completed sample (`keys[i]` is `threads[i]`'s),
    /// resolving first when `due` (what [`ThreadNames::due`] said at `now`).
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        mem: &dyn ProcessMemory,
        o: &Offsets,
        table: &mut FrameTable,
        threads: &mut [ThreadSample],
        keys: &[ThreadKey],
        due: bool,
        now: Instant,
    ) {
        if due {
            self.resolve(mem, o, table, keys, now);
        }
        // A thread new since the last resolution has no name until the
        // next one, at most MIN_GAP away: nothing is read for it now.
        for (t, k) in threads.iter_mut().zip(keys) {
            t.name = self.cache.get(k).copied().flatten();
        }
    }

    fn resolve(
        &mut self,
        mem: &dyn ProcessMemory,
        o: &Offsets,
        table: &mut FrameTable,
        keys: &[ThreadKey],
        now: Instant,
    ) {
        self.last = Some(now);
        self.resolutions += 1;
        let mut found: HashMap<(u64, u64), String> = HashMap::new();
        let mut interps: Vec<u64> = Vec::new();
        for k in keys {
            if !interps.contains(&k.interp) && interps.len() < MAX_INTERPS_NAMED {
                interps.push(k.interp);
            }
        }
        self.why = None;
        for &i in &interps {
            match threading_names(mem, o, &o.objects, i) {
                Ok(m) => {
                    self.ever_read = true;
                    found.extend(m.into_iter().map(|(id, n)| ((i, id), n)));
                }
                Err(e) => {
                    self.failures += 1;
                    self.why = Some(e.to_string());
                }
            }
        }
        let live: HashSet<ThreadKey> = keys.iter().copied().collect();
        self.cache.retain(|k, _| live.contains(k));
        for k in keys {
            let name = found
                .remove(&(k.interp, k.ident))
                .or_else(|| mem.thread_comm(k.tid));
            let id = name.map(|s| self.intern(table, &s));
            self.cache.insert(*k, id);
        }
    }

    /// Intern thread name `s`; past [`MAX_NAMES_KEPT`] distinct names, its
    /// pool's name instead (see [`crate::model::thread_pool_name`]), so a
    /// program that starts threads all the time does not grow the string
    /// table by a name a thread.
    fn intern(&mut self, table: &mut FrameTable, s: &str) -> StrId {
        if let Some(id) = table.find_str(s) {
            return id;
        }
        if self.names_kept < MAX_NAMES_KEPT {
            self.names_kept += 1;
            return table.intern_str(s);
        }
        table.intern_str(&crate::model::thread_pool_name(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_is_due_for_new_threads_at_most_every_gap() {
        let mut n = ThreadNames::new();
        let t0 = Instant::now();
        let a = ThreadKey {
            tid: 1,
            ident: 10,
            interp: 0x1000,
        };
        let b = ThreadKey { tid: 2, ..a };
        assert!(n.due(&[a], t0), "the first sample resolves");
        n.last = Some(t0);
        n.cache.insert(a, None);
        assert!(
            !n.due(&[a], t0 + MIN_GAP),
            "known threads wait for the refresh"
        );
        assert!(n.due(&[a], t0 + REFRESH));
        assert!(
            !n.due(&[a, b], t0 + MIN_GAP / 2),
            "a new thread waits out the gap"
        );
        assert!(n.due(&[a, b], t0 + MIN_GAP));
    }

    #[test]
    fn a_thread_is_named_from_the_cache_until_the_next_resolution() {
        // A reader with nothing in it: `threading` cannot be read, and
        // `comm` is all there is.
        struct Comm;
        impl ProcessMemory for Comm {
            fn read(&self, _: u64, _: &mut [u8]) -> Result<()> {
                Err(Error::corrupt("nothing here"))
            }
            fn thread_comm(&self, tid: u64) -> Option<String> {
                Some(format!("comm-{tid}"))
            }
        }
        let o = crate::offsets::carried::CARRIED[1];
        let v = crate::offsets::PyVersion::from_hex(0x030c_01f0);
        let offs = Offsets::from_carried(1, &o.table(v)).unwrap();
        let mut table = FrameTable::new();
        let mut n = ThreadNames::new();
        let a = ThreadKey {
            tid: 7,
            ident: 70,
            interp: 0x1000,
        };
        let b = ThreadKey { tid: 8, ..a };
        let t0 = Instant::now();
        let mut threads = vec![ThreadSample::default()];
        let step = |n: &mut ThreadNames,
                    table: &mut FrameTable,
                    threads: &mut [ThreadSample],
                    keys: &[ThreadKey],
                    at| {
            let due = n.due(keys, at);
            n.apply(&Comm, &offs, table, threads, keys, due, at);
        };
        step(&mut n, &mut table, &mut threads, &[a], t0);
        assert_eq!(threads[0].name.map(|s| table.str(s)), Some("comm-7"));
        assert!(n.why.is_some(), "the reason names came from comm");
        assert_eq!(n.resolutions, 1);
        // Within the gap a new thread waits, unnamed; the known one keeps
        // its name without a read.
        let mut two = vec![ThreadSample::default(), ThreadSample::default()];
        step(&mut n, &mut table, &mut two, &[a, b], t0 + MIN_GAP / 2);
        assert_eq!(n.resolutions, 1);
        assert_eq!(two[0].name.map(|s| table.str(s)), Some("comm-7"));
        assert_eq!(two[1].name, None);
        // After the gap it is resolved and named.
        step(&mut n, &mut table, &mut two, &[a, b], t0 + MIN_GAP);
        assert_eq!(n.resolutions, 2);
        assert_eq!(two[1].name.map(|s| table.str(s)), Some("comm-8"));
    }
}
