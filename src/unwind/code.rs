//! The code-object cache: code address to (file, qualified name, location
//! table), and (code, instruction) to an interned frame.
//!
//! A code object's fields never change while it lives, so a frame costs one
//! hash lookup once its code has been seen. The danger is a code object
//! freed and another allocated at the same address. 3.14+ count code-object
//! deallocations in `code_object_generation`, and the whole cache is dropped
//! when it moves. 3.13 has no such counter: there each code object keeps a
//! fingerprint (the pointers to its filename, qualname and location table,
//! and its first line) that the unwinder re-reads in one batched read per
//! sample, dropping entries whose fingerprint changed.
//!
//! A code object is trusted only once two loads, in different samples,
//! agree byte for byte (names, first line, location table): one read torn
//! by a code object freed under us, or a corrupted one, must not stay
//! cached for the rest of the run. Until then each sample that meets it
//! loads it again; a load that disagrees replaces the entry and starts its
//! probation anew. A steady program pays one extra load per code object.
//!
//! In front of the maps sits a direct-mapped table keyed by (code address,
//! instruction pointer): a frame seen before costs one indexed compare, not
//! two hash lookups. It holds frames of trusted code objects only. Every
//! change to the maps (clear, evict, replace) bumps an epoch that the
//! table's entries carry, so none outlives the entry it copies.

use foldhash::{HashMap, HashMapExt};

use super::linetable;
use super::objects::{read_bytes, read_cstr, read_str};
use crate::error::{Error, Result, Torn};
use crate::model::{Frame, FrameId, FrameKind, FrameTable, Location, StrId};
use crate::offsets::Offsets;
use crate::process::{LocalBytes, ProcessMemory};

/// What identifies a code object's contents: its first line and the
/// addresses of its filename, qualname and location table.
pub type Fingerprint = [u64; 4];

struct CodeInfo {
    file: StrId,
    func: StrId,
    firstlineno: i32,
    /// Code units of its bytecode (`Py_SIZE`), 0 when implausible: a
    /// frame whose instruction lies past them is torn (see
    /// [`CodeInfo::holds`]).
    units: u32,
    /// `co_framesize` in words, 0 when the version's offsets do not have
    /// it (see [`CodeCache::frame_fast_sized`]).
    framesize: u32,
    /// `None` when the table was too large to read: frames get no location.
    linetable: Option<Box<[u8]>>,
    fingerprint: Fingerprint,
    /// Two loads in different samples agreed (see the module's doc).
    trusted: bool,
    /// The sample that last loaded it: used as loaded within that sample.
    loaded_in: u64,
    /// Instruction offset (code units) to frame.
    locs: HashMap<u32, FrameId>,
    /// Generator, coroutine and async-generator code: the code unit of its
    /// `RETURN_GENERATOR` (after any `MAKE_CELL`/`COPY_FREE_VARS`), when
    /// its first units say where (see [`CodeCache::popped_generator_frame`]).
    generator_start: Option<u32>,
}

impl CodeInfo {
    /// Is code unit `addrq` inside this code's bytecode? A frame's
    /// instruction always is, from its push (its first unit) to its pop.
    /// One that is not was read half written: a data-stack slot caught
    /// while a new frame was pushed into it, its `previous` and
    /// instruction already the new frame's, its code still the old one's.
    /// Unknown sizes (0) hold everything.
    fn holds(&self, addrq: Option<u32>) -> bool {
        self.units == 0 || addrq.is_some_and(|a| a < self.units)
    }

    /// Did two loads read the same contents?
    fn same_as(&self, other: &CodeInfo) -> bool {
        self.file == other.file
            && self.func == other.func
            && self.firstlineno == other.firstlineno
            && self.units == other.units
            && self.framesize == other.framesize
            && self.linetable == other.linetable
            && self.fingerprint == other.fingerprint
            && self.generator_start == other.generator_start
    }
}

/// Slots of the direct-mapped frame table (a power of two).
const FAST_SLOTS: usize = 4096;

/// One slot of the direct-mapped table: the frame of `code` at `instr_ptr`,
/// valid while the cache's epoch is `epoch`.
#[derive(Clone, Copy, Default)]
struct FastEntry {
    code: u64,
    instr_ptr: u64,
    epoch: u32,
    id: FrameId,
    framesize: u32,
}

/// The slot for (code, instr_ptr): a multiplicative hash, so neighbouring
/// instructions of one code object spread over the table.
fn fast_slot(code: u64, instr_ptr: u64) -> usize {
    let h = (code ^ instr_ptr.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - FAST_SLOTS.trailing_zeros())) as usize
}

pub struct CodeCache {
    codes: HashMap<u64, CodeInfo>,
    /// Direct-mapped (code, instr_ptr) to frame, in front of `codes`.
    fast: Box<[FastEntry]>,
    /// Bumped whenever `codes` loses an entry; starts at 1, so a zeroed
    /// slot is never valid.
    epoch: u32,
    generation: Option<u64>,
    /// Address of `PyCode_Type`, learnt from the first code object whose
    /// type is named "code"; afterwards a cheap check that an executable
    /// pointer really points to a code object.
    code_type: Option<u64>,
    pub hits: u64,
    pub misses: u64,
    /// Code-object loads left in this sample (see [`CodeCache::new_sample`]).
    budget: u32,
    /// Code objects read from the target during this sample: fresh, so
    /// they need no re-validation.
    pub loaded: Vec<u64>,
    /// Counts samples ([`CodeCache::new_sample`]), for `CodeInfo::loaded_in`.
    sample: u64,
    /// Free-threaded 3.14+: (code, copy index) to where that copy of the
    /// code's bytecode starts (see [`CodeCache::copy_start`]).
    copies: HashMap<(u64, u32), u64>,
}

/// Most code objects loaded in one sample. A real first sample of a big
/// program loads a few hundred; a torn chain of garbage pointers could ask
/// for thousands, each a few reads.
const LOADS_PER_SAMPLE: u32 = 4096;

/// Most code objects kept: far more than a program runs at once.
const MAX_CACHED_CODES: usize = 200_000;

/// Most bytecode copies of one code object believed (a thread each), and
/// most remembered in all.
const MAX_COPIES: i64 = 1 << 16;
const MAX_COPIES_KEPT: usize = 1 << 18;

/// The span of a code object that holds the fingerprint fields, as
/// (start, length): one small read re-validates a cached code object.
pub fn fingerprint_span(offs: &Offsets) -> (u64, usize) {
    let start = offs
        .code_firstlineno
        .min(offs.code_filename)
        .min(offs.code_qualname)
        .min(offs.code_linetable);
    let end = (offs.code_firstlineno + 4)
        .max(offs.code_filename + 8)
        .max(offs.code_qualname + 8)
        .max(offs.code_linetable + 8);
    (start, (end - start) as usize)
}

/// Extract the fingerprint from bytes of a code object starting at `start`.
pub fn fingerprint(offs: &Offsets, bytes: &[u8], start: u64) -> Option<Fingerprint> {
    let at = |o: u64| o.checked_sub(start);
    Some([
        bytes.u32_at(at(offs.code_firstlineno)?)? as u64,
        bytes.u64_at(at(offs.code_filename)?)?,
        bytes.u64_at(at(offs.code_qualname)?)?,
        bytes.u64_at(at(offs.code_linetable)?)?,
    ])
}

impl Default for CodeCache {
    fn default() -> Self {
        CodeCache {
            codes: HashMap::new(),
            fast: vec![FastEntry::default(); FAST_SLOTS].into_boxed_slice(),
            epoch: 1,
            generation: None,
            code_type: None,
            hits: 0,
            misses: 0,
            budget: 0,
            loaded: Vec::new(),
            sample: 0,
            copies: HashMap::new(),
        }
    }
}

impl CodeCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Changes whenever a code object is dropped or replaced: frames
    /// decoded under one epoch stay true while it lasts.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Every frame the direct-mapped table holds is stale from now on.
    fn invalidate_fast(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Wrapped: old slots could look valid again. Wipe them.
            self.fast.fill(FastEntry::default());
            self.epoch = 1;
        }
    }

    /// The frame of `code` at `instr_ptr` if the direct-mapped table has
    /// it: no reads, no hashing. `None` means ask [`CodeCache::frame`].
    #[inline]
    pub fn frame_fast(&mut self, code: u64, instr_ptr: u64) -> Option<FrameId> {
        self.frame_fast_sized(code, instr_ptr).map(|(id, _)| id)
    }

    /// [`CodeCache::frame_fast`], with the code's `co_framesize` (0 when
    /// unknown): how many words of the data stack its frame takes.
    #[inline]
    pub fn frame_fast_sized(&mut self, code: u64, instr_ptr: u64) -> Option<(FrameId, u32)> {
        let e = self.fast[fast_slot(code, instr_ptr)];
        if e.epoch == self.epoch && e.code == code && e.instr_ptr == instr_ptr {
            self.hits += 1;
            Some((e.id, e.framesize))
        } else {
            None
        }
    }

    fn remember_fast(&mut self, code: u64, instr_ptr: u64, id: FrameId, framesize: u32) {
        self.fast[fast_slot(code, instr_ptr)] = FastEntry {
            code,
            instr_ptr,
            epoch: self.epoch,
            id,
            framesize,
        };
    }

    pub fn len(&self) -> usize {
        self.codes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.codes.is_empty()
    }

    /// Can a frame of the code object at `code` be made without reads? It
    /// can if the object is trusted or was loaded in this sample.
    pub fn is_ready(&self, code: u64) -> bool {
        self.codes
            .get(&code)
            .is_some_and(|c| c.trusted || c.loaded_in == self.sample)
    }

    /// The address of `PyCode_Type`, once a code object's type was named
    /// "code": an object of another type is no code object.
    pub fn code_type(&self) -> Option<u64> {
        self.code_type
    }

    pub fn clear(&mut self) {
        self.codes.clear();
        self.copies.clear();
        self.invalidate_fast();
    }

    /// Free-threaded 3.14+: a thread took or gave back a bytecode copy
    /// index, so a copy may have been freed: find each again.
    pub fn forget_copies(&mut self) {
        self.copies.clear();
    }

    /// Is where copy `index` of `code` starts known without reads?
    pub fn has_copy(&self, code: u64, index: i32) -> bool {
        index == 0 || u32::try_from(index).is_ok_and(|i| self.copies.contains_key(&(code, i)))
    }

    /// Free-threaded 3.14+: `instr_ptr`, into copy `index` of the bytecode
    /// of `code`, as a pointer into the code's own bytecode at the same
    /// offset (what locations are computed from), and where that copy
    /// starts. A copy that cannot be found, or a pointer outside it, gives
    /// 0: no place in the code, which makes the frame torn, never a guess.
    /// Copy 0 is the code's own bytecode: nothing moves.
    pub fn in_own_bytecode(
        &mut self,
        mem: &dyn ProcessMemory,
        offs: &Offsets,
        code: u64,
        instr_ptr: u64,
        index: i32,
    ) -> (u64, u64) {
        let own = code.wrapping_add(offs.code_adaptive);
        if index == 0 {
            return (instr_ptr, own);
        }
        match self.copy_start(mem, offs, code, index) {
            Some(copy) => match instr_ptr.checked_sub(copy) {
                Some(off) if off < 1 << 28 => (own.wrapping_add(off), copy),
                _ => (0, copy),
            },
            None => (0, own),
        }
    }

    /// Free-threaded 3.14+: where copy `index` of the bytecode of `code`
    /// starts (`co_tlbc->entries[index]`, each thread running its own
    /// copy), read once and remembered until the copies change. Copy 0 is
    /// the code's own `co_code_adaptive`. `None`: no such copy could be
    /// read (a torn frame or code object).
    fn copy_start(
        &mut self,
        mem: &dyn ProcessMemory,
        offs: &Offsets,
        code: u64,
        index: i32,
    ) -> Option<u64> {
        let own = code.wrapping_add(offs.code_adaptive);
        let (Some(at), Ok(i)) = (offs.code_tlbc, u32::try_from(index)) else {
            return None;
        };
        if i == 0 {
            return Some(own);
        }
        if let Some(&start) = self.copies.get(&(code, i)) {
            return Some(start);
        }
        let array = mem.read_u64(code.wrapping_add(at)).ok()?;
        if !crate::process::plausible(array) || array % 8 != 0 {
            return None;
        }
        let mut head = [0u8; 8];
        mem.read(array, &mut head).ok()?;
        let size = i64::from_le_bytes(head);
        if i64::from(i) >= size || size > MAX_COPIES {
            return None;
        }
        let start = mem.read_u64(array + 8 + 8 * u64::from(i)).ok()?;
        if !crate::process::plausible(start) || start % 2 != 0 {
            return None;
        }
        if self.copies.len() >= MAX_COPIES_KEPT {
            self.copies.clear();
        }
        self.copies.insert((code, i), start);
        Some(start)
    }

    /// Reset the per-sample load budget.
    pub fn new_sample(&mut self) {
        self.budget = LOADS_PER_SAMPLE;
        self.loaded.clear();
        self.sample += 1;
    }

    /// Drop everything if the interpreter's code-object generation moved.
    pub fn check_generation(&mut self, generation: u64) {
        if self.generation != Some(generation) {
            self.clear();
            self.generation = Some(generation);
        }
    }

    /// Cached code addresses with their fingerprints (for 3.13 re-validation).
    pub fn fingerprint_of(&self, code: u64) -> Option<&Fingerprint> {
        self.codes.get(&code).map(|c| &c.fingerprint)
    }

    pub fn evict(&mut self, code: u64) {
        if !self.copies.is_empty() {
            self.copies.retain(|&(c, _), _| c != code);
        }
        if self.codes.remove(&code).is_some() {
            self.invalidate_fast();
        }
    }

    /// The frame for code object `code` executing the instruction at
    /// `instr_ptr`.
    pub fn frame(
        &mut self,
        mem: &dyn ProcessMemory,
        offs: &Offsets,
        table: &mut FrameTable,
        code: u64,
        instr_ptr: u64,
    ) -> Result<FrameId> {
        self.frame_sized(mem, offs, table, code, instr_ptr)
            .map(|(id, _)| id)
    }

    /// [`CodeCache::frame`], with the code's `co_framesize` (0 when
    /// unknown).
    pub fn frame_sized(
        &mut self,
        mem: &dyn ProcessMemory,
        offs: &Offsets,
        table: &mut FrameTable,
        code: u64,
        instr_ptr: u64,
    ) -> Result<(FrameId, u32)> {
        let base = code.wrapping_add(offs.code_adaptive);
        // Code units since the start of the bytecode; anything implausible
        // (a torn instr_ptr) gets no location rather than a wild lookup.
        let addrq = instr_ptr
            .checked_sub(base)
            .filter(|d| d % 2 == 0 && *d < (1 << 28))
            .map(|d| (d / 2) as u32);
        if self.is_ready(code) {
            if let Some(hit) = self.known_location(code, instr_ptr, addrq) {
                return Ok(hit);
            }
        } else {
            self.load_checked(mem, offs, table, code)?;
        }
        // 3.11, 3.12: a frame that has not started yet points one code
        // unit before its bytecode; it is at its first line.
        let not_started = offs.instr_ptr_is_prev && instr_ptr == base.wrapping_sub(2);
        if !not_started && !self.codes[&code].holds(addrq) {
            return Err(Torn::OutsideItsCode { code, instr_ptr }.into());
        }
        Ok(self.locate_new(table, code, instr_ptr, addrq, not_started))
    }

    /// A cached code object's frame at code unit `addrq`, if that
    /// location was looked up before.
    fn known_location(
        &mut self,
        code: u64,
        instr_ptr: u64,
        addrq: Option<u32>,
    ) -> Option<(FrameId, u32)> {
        let info = &self.codes[&code];
        let &id = addrq.and_then(|a| info.locs.get(&a))?;
        self.hits += 1;
        let framesize = info.framesize;
        if info.trusted {
            self.remember_fast(code, instr_ptr, id, framesize);
        }
        Some((id, framesize))
    }

    /// Load the code object at `code` into the cache, within the
    /// sample's budget of loads. A second load that agrees with the first
    /// makes the entry trusted; one that disagrees replaces it, untrusted.
    fn load_checked(
        &mut self,
        mem: &dyn ProcessMemory,
        offs: &Offsets,
        table: &mut FrameTable,
        code: u64,
    ) -> Result<()> {
        if self.budget == 0 {
            return Err(Error::corrupt("too many code objects in one sample"));
        }
        self.budget -= 1;
        self.misses += 1;
        let fresh = match self.load(mem, offs, table, code) {
            Ok(fresh) => fresh,
            Err(e) => {
                // An entry on probation that cannot be read again is not
                // to be believed either.
                self.evict(code);
                return Err(e);
            }
        };
        let sample = self.sample;
        match self.codes.get_mut(&code) {
            Some(old) if old.same_as(&fresh) => {
                old.trusted = true;
                old.loaded_in = sample;
            }
            Some(old) => {
                // The two loads disagree: one was torn. Believe the newer
                // for this sample, trust neither yet.
                *old = CodeInfo {
                    loaded_in: sample,
                    ..fresh
                };
                self.invalidate_fast();
            }
            None => {
                if self.codes.len() >= MAX_CACHED_CODES {
                    // Dead code objects are never told to us on 3.13: start
                    // afresh now and then rather than grow without bound.
                    self.clear();
                }
                self.codes.insert(
                    code,
                    CodeInfo {
                        loaded_in: sample,
                        ..fresh
                    },
                );
            }
        }
        self.loaded.push(code);
        Ok(())
    }

    /// The frame of a cached code object at code unit `addrq`, looked up
    /// in its location table and remembered.
    fn locate_new(
        &mut self,
        table: &mut FrameTable,
        code: u64,
        instr_ptr: u64,
        addrq: Option<u32>,
        not_started: bool,
    ) -> (FrameId, u32) {
        let info = self.codes.get_mut(&code).expect("loaded by the caller");
        let location = match (addrq, &info.linetable) {
            // An instruction whose entry says it has no location (3.13+'s
            // `__init__` shim) is at line -1, as the reference's live
            // outputs show it; one that no entry covers has no location.
            (Some(a), Some(t)) => linetable::covering(t, info.firstlineno, a)
                .map(|loc| loc.unwrap_or(Location::UNPLACED)),
            _ if not_started => Some(Location {
                line: info.firstlineno,
                end_line: info.firstlineno,
                col: -1,
                end_col: -1,
            }),
            _ => None,
        };
        let id = table.intern(Frame {
            opcode: None,
            kind: FrameKind::Python,
            file: info.file,
            func: info.func,
            location,
        });
        let framesize = info.framesize;
        if let Some(a) = addrq {
            info.locs.insert(a, id);
            if info.trusted {
                self.remember_fast(code, instr_ptr, id, framesize);
            }
        }
        (id, framesize)
    }

    fn load(
        &mut self,
        mem: &dyn ProcessMemory,
        offs: &Offsets,
        table: &mut FrameTable,
        code: u64,
    ) -> Result<CodeInfo> {
        let mut buf = vec![0u8; offs.code_size as usize];
        mem.read(code, &mut buf)?;
        let short = || Error::corrupt("short code object");
        let ob_type = buf.u64_at(offs.ob_type).ok_or_else(short)?;
        match self.code_type {
            Some(t) if t != ob_type => {
                return Err(Error::corrupt(format!(
                    "executable at {code:#x} is not a code object"
                )));
            }
            Some(_) => {}
            None => {
                let name_ptr = mem.read_u64(ob_type.wrapping_add(offs.type_tp_name))?;
                let name = read_cstr(mem, name_ptr, 16)?;
                if name != "code" {
                    return Err(Error::corrupt(format!(
                        "executable at {code:#x} is a {name:?}, not a code object"
                    )));
                }
                self.code_type = Some(ob_type);
            }
        }
        let filename = buf.u64_at(offs.code_filename).ok_or_else(short)?;
        let qualname = buf.u64_at(offs.code_qualname).ok_or_else(short)?;
        let lt = buf.u64_at(offs.code_linetable).ok_or_else(short)?;
        let firstlineno = buf.i32_at(offs.code_firstlineno).ok_or_else(short)?;
        // `Py_SIZE`: a code object is a `PyVarObject`, its size after its
        // type, counted in code units.
        let units = buf
            .u64_at(offs.ob_type + 8)
            .filter(|&n| n < 1 << 27)
            .map_or(0, |n| n as u32);
        // A size no frame has (a torn read) is no size: nothing is checked.
        // Every frame has room for at least one stack slot beyond its own
        // words (a code object's stack size is at least 1).
        let own = (offs.frame_size / 8).saturating_sub(1) as i32;
        let framesize = match (offs.code_framesize, offs.code_framesize_sum) {
            (Some(at), _) => buf.i32_at(at),
            (None, Some((locals, stack))) => buf
                .i32_at(locals)
                .zip(buf.i32_at(stack))
                .filter(|&(l, s)| l >= 0 && s >= 1)
                .map(|(l, s)| l.saturating_add(s).saturating_add(own)),
            (None, None) => None,
        }
        .filter(|w| (own + 1..1 << 20).contains(w))
        .map_or(0, |w| w as u32);
        // Neither a file name nor a qualified name can hold a NUL: one
        // that does was read from a torn or corrupted string.
        let name = |addr| {
            read_str(mem, offs, addr).and_then(|s| match s.contains('\0') {
                true => Err(Error::corrupt("a code object's name holds a NUL")),
                false => Ok(s),
            })
        };
        let file = table.intern_str(&name(filename)?);
        let func = table.intern_str(&name(qualname)?);
        let linetable = read_bytes(mem, offs, lt)?.map(Vec::into_boxed_slice);
        let fingerprint = fingerprint(offs, &buf, 0).ok_or_else(short)?;
        let flags = buf.u32_at(offs.values.code_flags).ok_or_else(short)?;
        let generator_start = match flags & GENERATOR_LIKE {
            0 => None,
            _ => generator_start(mem, offs, code),
        };
        Ok(CodeInfo {
            file,
            func,
            firstlineno,
            units,
            framesize,
            linetable,
            fingerprint,
            trusted: false,
            loaded_in: 0,
            locs: HashMap::new(),
            generator_start,
        })
    }

    /// Is a frame of the thread's data stack running `code` at
    /// `instr_ptr` past its generator code's `RETURN_GENERATOR`? Calling a
    /// generator function pushes its frame on the data stack, and its
    /// first instruction, `RETURN_GENERATOR`, copies it into the new
    /// generator and pops it, leaving the slot's code and instruction as
    /// they were (an ordinary pop clears the code). A data-stack frame of
    /// such code past that instruction is therefore such a slot, named by
    /// a thread state read before the pop: never a live frame. Known only
    /// for code in the cache (the walk has just made its frame).
    pub fn popped_generator_frame(&self, code: u64, instr_ptr: u64, offs: &Offsets) -> bool {
        let Some(start) = self.codes.get(&code).and_then(|i| i.generator_start) else {
            return false;
        };
        past_unit(code.wrapping_add(offs.code_adaptive), instr_ptr, start)
    }
}

/// Is `instr_ptr` (into bytecode at `base`) past code unit `unit`? An
/// address before the bytecode (3.11/3.12's "not started yet") is not.
fn past_unit(base: u64, instr_ptr: u64, unit: u32) -> bool {
    instr_ptr
        .checked_sub(base)
        .filter(|d| d % 2 == 0)
        .is_some_and(|d| d / 2 > u64::from(unit))
}

/// `co_flags` of code whose call makes a generator, coroutine or async
/// generator (`CO_GENERATOR`, `CO_COROUTINE`, `CO_ASYNC_GENERATOR`).
const GENERATOR_LIKE: u32 = 0x20 | 0x80 | 0x200;
/// Code units read to find `RETURN_GENERATOR` after the prologue.
const GENERATOR_PROLOGUE_UNITS: usize = 16;

/// The code unit of the `RETURN_GENERATOR` of generator-like `code`: its
/// bytecode starts with cell and free-variable set-up, then that. `None`
/// when its first units do not read so (then nothing is checked).
fn generator_start(mem: &dyn ProcessMemory, offs: &Offsets, code: u64) -> Option<u32> {
    let ops = crate::opcodes::table(offs.version.major.into(), offs.version.minor.into())?;
    let mut units = [0u8; 2 * GENERATOR_PROLOGUE_UNITS];
    mem.read(code.wrapping_add(offs.code_adaptive), &mut units)
        .ok()?;
    return_generator_unit(ops, &units)
}

/// Where in the first code `units` (two bytes each) `RETURN_GENERATOR`
/// is, after nothing but cell and free-variable set-up.
fn return_generator_unit(ops: &crate::opcodes::OpTable, units: &[u8]) -> Option<u32> {
    let rg = ops.opcode("RETURN_GENERATOR")?;
    let prologue = ["MAKE_CELL", "COPY_FREE_VARS", "EXTENDED_ARG", "NOP"].map(|n| ops.opcode(n));
    for (i, unit) in units.chunks_exact(2).enumerate() {
        if unit[0] == rg {
            return Some(i as u32);
        }
        if !prologue.contains(&Some(unit[0])) {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> CodeInfo {
        CodeInfo {
            file: 0,
            func: 0,
            firstlineno: 1,
            units: 0,
            framesize: 0,
            linetable: None,
            fingerprint: [0; 4],
            trusted: true,
            loaded_in: 0,
            locs: HashMap::new(),
            generator_start: None,
        }
    }

    #[test]
    fn a_frame_in_a_bytecode_copy_is_placed_at_the_same_offset_in_its_code() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/offsets/3.14.10.bin");
        let raw = crate::offsets::RawTable::decode(1, &std::fs::read(path).unwrap()).unwrap();
        let mut offs = Offsets::from_raw(1, &raw).unwrap();
        // As a free-threaded 3.14 lays it out: the array just before the
        // bytecode.
        offs.code_tlbc = Some(offs.code_adaptive - 8);
        let (code, array, copy) = (0x7000_0000_1000u64, 0x7000_0010_0000u64, 0x7000_0055_0000);
        let own = code + offs.code_adaptive;
        let mut entries = Vec::new();
        for w in [3u64, own, 0x7000_0044_0000, copy] {
            entries.extend(w.to_le_bytes());
        }
        let mem = crate::process::Regions(vec![
            (code + offs.code_adaptive - 8, array.to_le_bytes().to_vec()),
            (array, entries),
        ]);
        let mut c = CodeCache::new();
        assert_eq!(
            c.in_own_bytecode(&mem, &offs, code, own + 6, 0),
            (own + 6, own)
        );
        assert!(!c.has_copy(code, 2));
        assert_eq!(
            c.in_own_bytecode(&mem, &offs, code, copy + 0x2a, 2),
            (own + 0x2a, copy)
        );
        assert!(c.has_copy(code, 2), "found once, remembered");
        // Outside its copy, or a copy the array does not have: no place.
        assert_eq!(c.in_own_bytecode(&mem, &offs, code, copy - 2, 2), (0, copy));
        assert_eq!(c.in_own_bytecode(&mem, &offs, code, copy, 3), (0, own));
        assert_eq!(c.in_own_bytecode(&mem, &offs, code, copy, -1), (0, own));
        c.forget_copies();
        assert!(!c.has_copy(code, 2));
    }

    #[test]
    fn a_generators_call_frame_is_popped_past_its_return_generator() {
        for minor in [11, 12, 13, 14, 15] {
            let ops = crate::opcodes::table(3, minor).unwrap();
            let op = |n: &str| ops.opcode(n).unwrap();
            let units = |ops: &[u8]| -> Vec<u8> { ops.iter().flat_map(|&o| [o, 0]).collect() };
            // def g(): yield 1
            let plain = units(&[op("RETURN_GENERATOR"), op("POP_TOP"), op("RESUME")]);
            assert_eq!(return_generator_unit(ops, &plain), Some(0), "3.{minor}");
            // A closure: its cells are made first.
            let closure = units(&[
                op("MAKE_CELL"),
                op("COPY_FREE_VARS"),
                op("RETURN_GENERATOR"),
                op("POP_TOP"),
            ]);
            assert_eq!(return_generator_unit(ops, &closure), Some(2), "3.{minor}");
            // Not a generator's start: nothing is checked.
            let other = units(&[op("RESUME"), op("RETURN_GENERATOR")]);
            assert_eq!(return_generator_unit(ops, &other), None, "3.{minor}");
        }
        // At RETURN_GENERATOR (unit 2) or before the bytecode: live; past it:
        // popped.
        let base = 0x1000;
        assert!(!past_unit(base, base + 4, 2));
        assert!(!past_unit(base, base - 2, 2));
        assert!(past_unit(base, base + 6, 2));
        assert!(
            !past_unit(base, base + 7, 2),
            "not an instruction's address"
        );
    }

    #[test]
    fn fast_table_hits_only_the_same_code_and_instruction() {
        let mut c = CodeCache::new();
        assert_eq!(c.frame_fast(0x1000, 0x1040), None);
        c.remember_fast(0x1000, 0x1040, 7, 0);
        assert_eq!(c.frame_fast(0x1000, 0x1040), Some(7));
        assert_eq!(c.frame_fast(0x1000, 0x1042), None);
        assert_eq!(c.frame_fast(0x2000, 0x1040), None);
        // A zeroed slot is never a hit, even for a zero key.
        assert_eq!(c.frame_fast(0, 0), None);
    }

    #[test]
    fn evicting_or_clearing_a_code_object_forgets_its_fast_frames() {
        let mut c = CodeCache::new();
        c.codes.insert(0x1000, info());
        c.remember_fast(0x1000, 0x1040, 7, 0);
        c.evict(0x3000); // not cached: nothing to forget
        assert_eq!(c.frame_fast(0x1000, 0x1040), Some(7));
        c.evict(0x1000);
        assert_eq!(c.frame_fast(0x1000, 0x1040), None);

        c.remember_fast(0x1000, 0x1040, 8, 0);
        c.check_generation(5);
        assert_eq!(c.frame_fast(0x1000, 0x1040), None);
        c.remember_fast(0x1000, 0x1040, 9, 0);
        c.check_generation(5);
        assert_eq!(c.frame_fast(0x1000, 0x1040), Some(9));
        c.clear();
        assert_eq!(c.frame_fast(0x1000, 0x1040), None);
    }

    #[test]
    fn a_wrapped_epoch_wipes_the_table() {
        let mut c = CodeCache::new();
        c.remember_fast(0x1000, 0x1040, 7, 0);
        c.epoch = u32::MAX;
        c.remember_fast(0x2000, 0x2040, 8, 0);
        c.clear();
        assert_eq!(c.epoch, 1);
        assert_eq!(c.frame_fast(0x1000, 0x1040), None);
        assert_eq!(c.frame_fast(0x2000, 0x2040), None);
    }
}
