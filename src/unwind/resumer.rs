//! 3.12: a generator's frame made the thread's current frame an instant
//! before it is linked to the frame that resumes it, and the proof that
//! finds that frame.
//!
//! 3.12.1 as pyenv's gcc builds it stores, in `FOR_ITER_GEN`, the resumed
//! generator's frame G as the eval loop's current frame about fifteen
//! instructions before it stores G's `previous` link to the resumer F (and
//! `YIELD_VALUE` cuts that link one instruction before it hands the
//! current frame back to F). A walk in that window finds G alone, its
//! `previous` NULL (cut at its last yield): a chain that does not end in
//! an entry frame. F is only in a register then, and F's own chain is
//! intact. Nothing names F, but F names G: the generator it resumes is on
//! top of its value stack, where `FOR_ITER_GEN` (and `SEND_GEN`) takes it
//! from.
//!
//! So when a 3.12 walk of a thread's stack is exactly such a G, the frames
//! that could be F are tried: the one the last walks met below G (the
//! next in the prefetch list), the newest frame of the data stack, the
//! other prefetched frames; and from each, up the chain of generators
//! each resumes (the frame of the generator on its stack top is the next
//! candidate). A candidate is F only if all of these hold:
//! 1. its instruction (`prev_instr`: the instruction being executed, or
//!    its last inline cache once the resume has stored it) is a
//!    `FOR_ITER_GEN` or `SEND_GEN` of its code, found by walking the
//!    code's bytecode from its start;
//! 2. its value stack (the slots of `localsplus` above its locals, within
//!    its code's stack size) holds G's generator: at its top (slot
//!    `stacktop - 1`) if its depth is stored, anywhere if the eval loop
//!    is executing it (see below);
//! 3. a generator's frame belongs to a generator that is executing; a
//!    frame of the data stack is its newest;
//! 4. the walk from it succeeds, with every check of a walk
//!    ([`super::frames`]).
//!
//! Then the stack is G over F's whole chain; otherwise the walk fails as
//! it did.
//!
//! Which slot of the stack: 3.12 keeps a frame's stack depth in
//! `stacktop` only while the frame does not run; the frame its eval loop
//! executes has -1 there, from its resume to its next call or suspension
//! (`_PyFrame_GetStackPointer`).
//! - A frame that has handed control on (`stacktop` stored) is checked at
//!   its top: a frame can hold G's generator deeper in its stack while it
//!   resumes another (`for a in g:` around `for b in h(g):`, where `h`
//!   iterates `g`), and taking it for F would lose `h`'s frame. A live
//!   frame below F that sits at `FOR_ITER_GEN` or `SEND_GEN` has its own
//!   callee's generator on top, never G's (G was not running before this
//!   resume); so the top leads up the chain, one generator at a time.
//! - The frame the eval loop executes (`stacktop` -1: F, until the resume
//!   stores F's depth just before the link) may hold G's generator in any
//!   slot of its value stack. That frame is F: check 4 proves it belongs
//!   to the innermost eval loop (its entry frame links to the outer
//!   loop's current frame), that loop executes one frame at a time, and
//!   the one it executes, at `FOR_ITER_GEN` or `SEND_GEN`, changes the
//!   current frame only to its stack top's generator's frame. A frame
//!   with -1 in an outer eval loop (one that called into C) fails check 4.
//!
//! The newest data-stack frame ends at the thread's `datastack_top`, but
//! where it begins the copy does not say: every place below the top where
//! a frame owned by the thread could begin, and whose code object's
//! `co_framesize` reaches exactly the top, is one. A dead frame's header
//! left in the unused part of a live frame's value stack can look like
//! that too, so the newest frame is taken only when exactly one place
//! qualifies (the live newest frame always does), and not at all when a
//! place's code object cannot be read.
//!
//! Everything here reads untrusted memory: every read is bounded and
//! granted from a per-sample allowance ([`MAX_GRANTED_READS`],
//! [`MAX_GRANTED_BYTES`]); when that is spent, the search stops.

use super::frames::{CHUNK_HEADER, MAX_FRAME_BYTES, PREFIX, Walk, plausible};
use crate::error::{Error, Result};
use crate::offsets::ResumeOffsets;
use crate::opcodes::OpTable;
use crate::process::LocalBytes;

/// Reads one sample may be granted for resumer proofs, over all its tries.
pub const MAX_GRANTED_READS: u32 = 128;
/// Bytes one sample may be granted for resumer proofs, over all its tries.
pub const MAX_GRANTED_BYTES: u64 = 2 << 20;

/// Candidates whose code and stack top one walk reads.
const MAX_PROBES: usize = 8;
/// Candidates one walk considers, read or not.
const MAX_CANDIDATES: usize = 64;
/// Places below the data stack's top whose code objects one walk reads
/// to find the newest frame: more that qualify locally, and it is not
/// looked for.
const MAX_PLACES: usize = 4;
/// The largest frame looked for below the data stack's top, in words.
const MAX_FRAME_WORDS: u64 = 1 << 16;
/// Most bytes of bytecode read to find one candidate's instruction.
const MAX_BYTECODE: u64 = 64 * 1024;
/// The largest value stack searched, in slots.
const MAX_STACK_SLOTS: i32 = 4096;

/// What a candidate frame is.
#[derive(Debug, PartialEq, Eq)]
enum Probe {
    /// It resumes the generator looked for (checks 1-3).
    Resumes,
    /// It resumes another generator, whose frame is here.
    ResumesOther(u64),
    /// Neither.
    No,
}

/// Why a read in a proof failed: a refused or fatal read ends the sample,
/// anything else only the candidate.
fn hard(e: &Error) -> bool {
    e.is_fatal() || matches!(e, Error::ReadBudget { .. })
}

/// What one search reads and has tried.
struct Search<'t> {
    r: ResumeOffsets,
    ops: &'t OpTable,
    /// `FOR_ITER_GEN`, `SEND_GEN`.
    resuming: [Option<u8>; 2],
    /// The generator object whose frame is the thread's current frame.
    generator: u64,
    /// `PyCode_Type`.
    code_type: u64,
    probes: usize,
    tried: Vec<u64>,
}

impl Walk<'_> {
    /// The thread's current frame `g`, a generator's frame with no previous
    /// frame, was the whole chain: the frame that resumed it, if one is
    /// proven by checks 1 to 3 (see the module's doc); the caller's walk
    /// from it is check 4.
    pub(super) fn resumer_of(&mut self, g: u64) -> Result<Option<u64>> {
        let o = self.offs;
        let Some(r) = o.resume else { return Ok(None) };
        let Some(ops) = crate::opcodes::table(o.version.major as u32, o.version.minor as u32)
        else {
            return Ok(None);
        };
        let (Some(generator), Some(code_type)) =
            (g.checked_sub(r.gen_iframe), self.code.code_type())
        else {
            return Ok(None);
        };
        let mut s = Search {
            r,
            ops,
            resuming: [ops.opcode("FOR_ITER_GEN"), ops.opcode("SEND_GEN")],
            generator,
            code_type,
            probes: 0,
            tried: vec![g],
        };
        // Where to start: the frame the last walks met below `g`, the newest
        // data-stack frame (its size in words), the other prefetched frames.
        let prefetched: Vec<u64> = self.chunks.prefetched_addrs().collect();
        let mut starts: Vec<(u64, Option<u64>)> = Vec::new();
        if let Some(i) = prefetched.iter().position(|&a| a == g)
            && let Some(&next) = prefetched.get(i + 1)
        {
            starts.push((next, None));
        }
        if let Some((newest, words)) = self.newest_data_frame(&s)? {
            starts.push((newest, Some(words)));
        }
        starts.extend(prefetched.iter().map(|&a| (a, None)));
        for (mut x, mut words) in starts {
            while s.tried.len() < MAX_CANDIDATES && s.probes < MAX_PROBES && !s.tried.contains(&x) {
                s.tried.push(x);
                match self.probe(&mut s, x, words)? {
                    Probe::Resumes => return Ok(Some(x)),
                    Probe::ResumesOther(next) => (x, words) = (next, None),
                    Probe::No => break,
                }
            }
        }
        Ok(None)
    }

    /// Checks 1 to 3 on the frame at `x`: a frame of the data stack only
    /// when it is the newest, found to be `words` long.
    fn probe(&mut self, s: &mut Search, x: u64, words: Option<u64>) -> Result<Probe> {
        let o = self.offs;
        let r = s.r;
        if !plausible(x) {
            return Ok(Probe::No);
        }
        let in_stack = self.chunks.find(x, o.frame_size);
        if in_stack.is_some() != words.is_some() {
            return Ok(Probe::No);
        }
        let mut local = [0u8; PREFIX + MAX_FRAME_BYTES as usize];
        let got = match self.frame_bytes(x, in_stack.map(|(_, b)| b), &mut local) {
            Ok(got) => got,
            Err(e) if hard(&e) => return Err(e),
            Err(_) => return Ok(Probe::No),
        };
        let f = got.frame;
        let owner = f.u8_at(o.frame_owner);
        let running = if words.is_some() {
            owner == Some(o.owners.thread)
        } else {
            let state = got
                .before
                .and_then(|b| b.u8_at(PREFIX as u64 - r.state_before_frame));
            owner == Some(o.owners.generator) && state.map(|v| v as i8) == Some(r.executing)
        };
        let (Some(code), Some(instr_ptr), Some(stacktop)) = (
            f.u64_at(o.frame_executable),
            f.u64_at(o.frame_instr_ptr),
            f.i32_at(r.frame_stacktop),
        ) else {
            return Ok(Probe::No);
        };
        if !running {
            return Ok(Probe::No);
        }
        let Some((locals, stack)) = self.resuming_depth(s, code, instr_ptr, words)? else {
            return Ok(Probe::No);
        };
        let slot = |i: i32| {
            x.wrapping_add(r.frame_localsplus)
                .wrapping_add(8 * i as u64)
        };
        if stacktop == -1 {
            // The frame the eval loop executes: its depth is in a register.
            let found = self.stack_holds(slot(locals), stack, s.generator)?;
            return Ok(if found { Probe::Resumes } else { Probe::No });
        }
        // Its depth stored: the top, above the locals.
        if stacktop <= locals || stacktop as i64 > locals as i64 + stack as i64 {
            return Ok(Probe::No);
        }
        let top = match self.chunks.find(slot(stacktop - 1), 8) {
            Some((_, b)) => b.u64_at(0),
            None => self.read_word(slot(stacktop - 1))?,
        };
        Ok(match top {
            Some(p) if p == s.generator => Probe::Resumes,
            Some(p) if plausible(p) && p.is_multiple_of(8) => {
                Probe::ResumesOther(p.wrapping_add(r.gen_iframe))
            }
            _ => Probe::No,
        })
    }

    /// Do the `n` slots from `at` (a value stack) hold `value`? From the
    /// data stack's copy, or read (granted).
    fn stack_holds(&self, at: u64, n: i32, value: u64) -> Result<bool> {
        if !(1..=MAX_STACK_SLOTS).contains(&n) {
            return Ok(false);
        }
        let len = 8 * n as u64;
        let holds = |b: &[u8]| b.chunks_exact(8).any(|w| w == value.to_le_bytes());
        if let Some((_, b)) = self.chunks.find(at, len) {
            return Ok(holds(b));
        }
        if !plausible(at) || !(self.grant_resume)(1, len) {
            return Ok(false);
        }
        let mut buf = vec![0u8; len as usize];
        match self.mem.read(at, &mut buf) {
            Ok(()) => Ok(holds(&buf)),
            Err(e) if hard(&e) => Err(e),
            Err(_) => Ok(false),
        }
    }

    /// Check 1 for a frame running `code` at `instr_ptr`: is its
    /// instruction a `FOR_ITER_GEN` or `SEND_GEN`? If so, its code's
    /// `co_nlocalsplus` and `co_stacksize`. With `words`, its code's
    /// `co_framesize` must be that. One read: the code object from its
    /// type to the instruction.
    fn resuming_depth(
        &mut self,
        s: &mut Search,
        code: u64,
        instr_ptr: u64,
        words: Option<u64>,
    ) -> Result<Option<(i32, i32)>> {
        let o = self.offs;
        let r = s.r;
        let Some(framesize_at) = o.code_framesize else {
            return Ok(None);
        };
        let base = code.wrapping_add(o.code_adaptive);
        let off = instr_ptr
            .checked_sub(base)
            .filter(|d| d.is_multiple_of(2) && d + 2 <= MAX_BYTECODE);
        let Some(off) = off.filter(|_| plausible(code) && code.is_multiple_of(8)) else {
            return Ok(None);
        };
        let start = [
            o.ob_type,
            r.code_units,
            r.code_stacksize,
            r.code_nlocalsplus,
            framesize_at,
        ]
        .into_iter()
        .min()
        .unwrap_or(0)
        .min(o.code_adaptive);
        let len = o.code_adaptive - start + off + 2;
        if !(self.grant_resume)(1, len) {
            return Ok(None);
        }
        s.probes += 1;
        let mut buf = vec![0u8; len as usize];
        match self.mem.read(code.wrapping_add(start), &mut buf) {
            Ok(()) => {}
            Err(e) if hard(&e) => return Err(e),
            Err(_) => return Ok(None),
        }
        let at = |field: u64| field - start;
        let own = (o.frame_size / 8).saturating_sub(1) as i64;
        let (Some(ty), Some(units), Some(stack), Some(locals), Some(framesize)) = (
            buf.u64_at(at(o.ob_type)),
            buf.u64_at(at(r.code_units)),
            buf.i32_at(at(r.code_stacksize)),
            buf.i32_at(at(r.code_nlocalsplus)),
            buf.i32_at(at(framesize_at)),
        ) else {
            return Ok(None);
        };
        let consistent = ty == s.code_type
            && off / 2 < units
            && (1..=MAX_STACK_SLOTS).contains(&stack)
            && locals >= 0
            && framesize as i64 == locals as i64 + stack as i64 + own
            && words.is_none_or(|w| w == framesize as u64);
        if !consistent {
            return Ok(None);
        }
        let op = s
            .ops
            .instruction_ending(&buf[at(o.code_adaptive) as usize..]);
        Ok((op.is_some() && s.resuming.contains(&op)).then_some((locals, stack)))
    }

    /// Eight bytes at `addr`, granted; `None` if unreadable (or nothing is
    /// granted any more).
    fn read_word(&self, addr: u64) -> Result<Option<u64>> {
        if !plausible(addr) || !(self.grant_resume)(1, 8) {
            return Ok(None);
        }
        let mut b = [0u8; 8];
        match self.mem.read(addr, &mut b) {
            Ok(()) => Ok(Some(u64::from_le_bytes(b))),
            Err(e) if hard(&e) => Err(e),
            Err(_) => Ok(None),
        }
    }

    /// The newest frame of the copied data stack and its size in words, if
    /// exactly one place below the thread's `datastack_top` can be it (see
    /// the module's doc).
    fn newest_data_frame(&mut self, s: &Search) -> Result<Option<(u64, u64)>> {
        let o = self.offs;
        let (Some(top), Some(framesize_at)) = (self.newest_end(), o.code_framesize) else {
            return Ok(None);
        };
        let Some((base, bytes)) = self.chunks.copy(0) else {
            return Ok(None);
        };
        let Some(top_off) = top
            .checked_sub(base)
            .filter(|&t| t <= bytes.len() as u64 && t.is_multiple_of(8))
        else {
            return Ok(None);
        };
        // Places where a frame owned by the thread could begin, as the
        // copy shows them (the live newest frame passes all of these).
        let own = o.frame_size / 8 - 1;
        let mut places: Vec<(u64, u64, u64)> = Vec::new();
        for words in own + 1..=MAX_FRAME_WORDS {
            let Some(at) = top_off
                .checked_sub(8 * words)
                .filter(|&a| a >= CHUNK_HEADER)
            else {
                break;
            };
            let f = bytes.get(at as usize..(at + o.frame_size) as usize);
            if let Some(code) = f.and_then(|f| could_be_frame(o, s.r, f, words)) {
                if places.len() == MAX_PLACES {
                    return Ok(None);
                }
                places.push((base + at, words, code));
            }
        }
        // Those whose code object is one and reaches the top.
        let mut found = None;
        for (addr, words, code) in places {
            let start = o.ob_type.min(framesize_at);
            let len = framesize_at + 4 - start;
            if !(self.grant_resume)(1, len) {
                return Ok(None);
            }
            let mut buf = [0u8; 128];
            let Some(buf) = buf.get_mut(..len as usize) else {
                return Ok(None);
            };
            match self.mem.read(code.wrapping_add(start), buf) {
                Ok(()) => {}
                Err(e) if hard(&e) => return Err(e),
                // It may have been the newest frame's: none is sure.
                Err(_) => return Ok(None),
            }
            let ty = buf.u64_at(o.ob_type - start);
            let size = buf.i32_at(framesize_at - start);
            if ty == Some(s.code_type) && size.is_some_and(|n| n as i64 == words as i64) {
                if found.is_some() {
                    return Ok(None);
                }
                found = Some((addr, words));
            }
        }
        Ok(found)
    }
}

/// Could a frame owned by the thread, `words` words long, begin where the
/// copy shows `f`? Its code object's address if so.
fn could_be_frame(
    o: &crate::offsets::Offsets,
    r: ResumeOffsets,
    f: &[u8],
    words: u64,
) -> Option<u64> {
    let own = o.frame_size / 8 - 1;
    let code = f.u64_at(o.frame_executable)?;
    let instr_ptr = f.u64_at(o.frame_instr_ptr)?;
    let previous = f.u64_at(o.frame_previous)?;
    let stacktop = f.i32_at(r.frame_stacktop)?;
    // Units past the one before the bytecode, where a frame not started
    // yet points: any even number within reason.
    let past = instr_ptr
        .wrapping_sub(code.wrapping_add(o.code_adaptive))
        .wrapping_add(2);
    let at_code = past.is_multiple_of(2) && past < 1 << 28;
    let ok = f.u8_at(o.frame_owner) == Some(o.owners.thread)
        && plausible(code)
        && code.is_multiple_of(8)
        && at_code
        && (previous == 0 || plausible(previous))
        // -1: the frame the eval loop executes.
        && stacktop >= -1
        && stacktop as i64 <= (words - own) as i64;
    ok.then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offsets::carried::CARRIED;
    use crate::offsets::{Offsets, PyVersion};

    fn offsets_312() -> Offsets {
        let c = CARRIED.iter().find(|c| c.minor == 12).unwrap();
        Offsets::from_carried(1, &c.table(PyVersion::from_hex(0x030c_01f0))).unwrap()
    }

    #[test]
    fn only_312_carries_what_a_resumer_proof_reads() {
        let o = offsets_312();
        let r = o.resume.unwrap();
        assert_eq!(
            (r.gen_iframe, r.state_before_frame, r.executing),
            (72, 5, 0)
        );
        assert_eq!((r.frame_stacktop, r.frame_localsplus), (64, 72));
        assert_eq!(
            (r.code_units, r.code_stacksize, r.code_nlocalsplus),
            (16, 64, 72)
        );
        let c = CARRIED.iter().find(|c| c.minor == 11).unwrap();
        let o11 = Offsets::from_carried(1, &c.table(PyVersion::from_hex(0x030b_07f0))).unwrap();
        assert!(o11.resume.is_none());
    }

    /// A frame header as the data stack would hold it.
    fn frame(o: &Offsets, code: u64, instr_ptr: u64, previous: u64, stacktop: i32) -> Vec<u8> {
        let mut f = vec![0u8; o.frame_size as usize];
        f[o.frame_executable as usize..][..8].copy_from_slice(&code.to_le_bytes());
        f[o.frame_instr_ptr as usize..][..8].copy_from_slice(&instr_ptr.to_le_bytes());
        f[o.frame_previous as usize..][..8].copy_from_slice(&previous.to_le_bytes());
        let st = o.resume.unwrap().frame_stacktop as usize;
        f[st..st + 4].copy_from_slice(&stacktop.to_le_bytes());
        f[o.frame_owner as usize] = o.owners.thread;
        f
    }

    #[test]
    fn a_place_below_the_top_must_look_like_a_frame_of_that_size() {
        let o = offsets_312();
        let r = o.resume.unwrap();
        let code = 0x7f00_1000_0000u64;
        let at = code + o.code_adaptive + 40;
        let caller = 0x7f00_2000_0000;
        let looks = |f: Vec<u8>| could_be_frame(&o, r, &f, 20);
        // A live frame of 20 words (11 slots beyond its own 9), started or
        // not, its stack full or empty or its depth in the eval loop's
        // register, the bottom one or not.
        assert_eq!(looks(frame(&o, code, at, caller, 11)), Some(code));
        assert!(looks(frame(&o, code, code + o.code_adaptive - 2, 0, 0)).is_some());
        // Its stack deeper than the frame, an odd or wild instruction, one
        // before the bytecode, no code, a previous frame no frame can be
        // at, another owner: no.
        assert!(looks(frame(&o, code, at, caller, 12)).is_none());
        assert!(looks(frame(&o, code, at, caller, -1)).is_some());
        assert!(looks(frame(&o, code, at, caller, -2)).is_none());
        assert!(looks(frame(&o, code, at + 1, caller, 3)).is_none());
        assert!(looks(frame(&o, code, at + (1 << 29), caller, 3)).is_none());
        assert!(looks(frame(&o, code, code + o.code_adaptive - 4, caller, 3)).is_none());
        assert!(looks(frame(&o, 0, at, caller, 3)).is_none());
        assert!(looks(frame(&o, code, at, 0x10, 3)).is_none());
        let mut generator = frame(&o, code, at, caller, 3);
        generator[o.frame_owner as usize] = o.owners.generator;
        assert!(looks(generator).is_none());
    }
}
