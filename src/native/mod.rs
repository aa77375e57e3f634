//! Native frames (`--native-frames`): each sampled thread's C, C++ and
//! Rust frames, read from its registers and stack while it is stopped,
//! merged with its Python frames in true call order.
//!
//! A stage after the Python walk, for targets stopped for the sample:
//! 1. the thread's registers ([`stack::ThreadRegisters`]);
//! 2. its native frames, walked by framehop over the modules' unwind
//!    tables ([`modules`]), the stack read a page at a time
//!    ([`stack::StackPages`]);
//! 3. each frame named by its module's symbols ([`symbols`]);
//! 4. the eval loop's frames replaced by the Python frames they ran
//!    ([`merge`]).
//!
//! Native frames are [`FrameKind::NativeFunction`] frames: the function
//! as their name; the source file and line where the module has debug
//! information ([`debuginfo`]), else the module's file name as their file
//! and no line.

pub mod debuginfo;
pub mod merge;
pub mod modules;
pub mod realigned;
pub mod stack;
pub mod symbols;

use std::time::{Duration, Instant};

use foldhash::HashMap;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Unwinder as _};

use crate::error::{Error, Result};
use crate::model::{Frame, FrameId, FrameKind, FrameTable, Location, Sample, ThreadSample};
use crate::process::Target;
pub use merge::Keep;
use merge::Role;
use modules::{Bytes, EVAL_LOOP, Modules};
use realigned::FrameRule;
use stack::{StackPages, ThreadRegisters};

/// Native frames walked per thread at most.
pub const MAX_NATIVE_FRAMES: usize = 512;
/// The memory map is read again at most this often, when a walk meets an
/// address in no mapping we know of (a library loaded since).
const RESCAN_EVERY: Duration = Duration::from_millis(10);
/// Addresses named so far, kept at most (then forgotten all at once).
const MAX_NAMED: usize = 1 << 16;

/// The name given to a frame no symbol covers.
pub const UNKNOWN: &str = "<unknown native>";
/// The module of a frame in memory no file backs (JIT code).
pub const ANONYMOUS: &str = "[anonymous]";

/// Reads and merges native frames for one process.
pub struct NativeStacks<T> {
    target: T,
    keep: Keep,
    modules: Modules,
    unwinder: UnwinderX86_64<Bytes>,
    cache: CacheX86_64,
    last_scan: Option<Instant>,
    /// Frame and role by lookup address.
    named: HashMap<u64, (FrameId, Role)>,
    /// How each lookup address met so far is unwound.
    rules: HashMap<u64, FrameRule>,
    /// Where each function (by its start) has set up its frame pointer,
    /// `None` for one that does not keep one.
    fp_functions: HashMap<u64, Option<u64>>,
    /// The first frame of the last walk that was unwound by a frame
    /// pointer it may not have: the frames after it are not trusted.
    guessed: Option<usize>,
    cfi_context: Box<gimli::UnwindContext<usize>>,
    addrs: Vec<u64>,
    sps: Vec<u64>,
    walked: Vec<(FrameId, Role)>,
    merged: Vec<FrameId>,
    moved: Vec<Option<usize>>,
}

impl<T: Target + ThreadRegisters> NativeStacks<T> {
    /// Native frames of `target`, keeping what `keep` says. Its modules
    /// are loaded now.
    pub fn new(target: T, keep: Keep) -> Self {
        let mut n = NativeStacks {
            target,
            keep,
            modules: Modules::default(),
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            last_scan: None,
            named: HashMap::default(),
            rules: HashMap::default(),
            fp_functions: HashMap::default(),
            guessed: None,
            cfi_context: Box::new(gimli::UnwindContext::new()),
            addrs: Vec::new(),
            sps: Vec::new(),
            walked: Vec::new(),
            merged: Vec::new(),
            moved: Vec::new(),
        };
        n.rescan();
        n
    }

    /// The modules loaded so far.
    pub fn modules(&self) -> &Modules {
        &self.modules
    }

    /// Give every thread of `sample` (read while the target is stopped)
    /// its native frames, merged with its Python frames. A thread whose
    /// two stacks do not match fails the sample.
    ///
    /// `entries`: per thread, the addresses of its entry frames, which
    /// 3.12 and later keep on the C stack inside their eval loop's native
    /// frame: that frame is the eval loop's whatever its symbol (stripped
    /// builds name only part of the loop). 3.11's entries are Python
    /// frames; there the loop is known by its symbol.
    pub fn complete(
        &mut self,
        sample: &mut Sample,
        table: &mut FrameTable,
        entries: &[Vec<u64>],
    ) -> Result<()> {
        for (i, t) in sample.threads.iter_mut().enumerate() {
            let e = entries.get(i).map_or(&[][..], Vec::as_slice);
            self.complete_thread(t, table, e)?;
        }
        Ok(())
    }

    /// [`NativeStacks::complete`] for one thread, whose entry frames are
    /// `entries`. After it, [`NativeStacks::moved`] says where each of
    /// its Python frames went.
    pub fn complete_thread(
        &mut self,
        t: &mut ThreadSample,
        table: &mut FrameTable,
        entries: &[u64],
    ) -> Result<()> {
        let boundary = table.synthetic(FrameKind::Native, "<native>");
        self.walk(t.tid)?;
        self.name(table);
        self.mark_eval_frames(entries);
        self.drop_guessed(t.tid)?;
        merge::merge(
            &self.walked,
            &t.frames,
            boundary,
            self.keep,
            &mut self.merged,
            &mut self.moved,
        )
        .map_err(|m| Error::NativeMismatch {
            tid: t.tid,
            eval_frames: m.eval_frames,
            python_groups: m.python_groups,
        })?;
        std::mem::swap(&mut t.frames, &mut self.merged);
        Ok(())
    }

    /// Where each frame of the last thread's Python stack went in its
    /// merged stack, by index (leaf first); `None` for the boundaries,
    /// which merging removes.
    pub fn moved(&self) -> &[Option<usize>] {
        &self.moved
    }

    /// The native frames of thread `tid`, leaf first, as addresses to look
    /// up. A walk that meets an address in no known mapping reads the map
    /// again (a library loaded since) and walks again, once.
    fn walk(&mut self, tid: u64) -> Result<()> {
        let regs = self.target.registers(tid)?;
        for attempt in 0..2 {
            let complete = self.walk_once(regs)?;
            let unmapped = self.addrs.iter().any(|&a| !self.modules.known(a));
            if attempt == 0 && unmapped && self.rescan() {
                continue;
            }
            if !complete && self.keep == Keep::All {
                return Err(Error::NativeWalk {
                    tid,
                    why: "the walk stopped before the stack's end".into(),
                });
            }
            break;
        }
        Ok(())
    }

    /// One walk from `regs` into `self.addrs` and `self.sps` (each
    /// frame's stack pointer); true when it reached the stack's end (not
    /// an unreadable frame or the frame limit).
    fn walk_once(&mut self, regs: stack::Regs) -> Result<bool> {
        self.addrs.clear();
        self.sps.clear();
        self.guessed = None;
        let mut pages = StackPages::new(&self.target);
        let mut read = |a: u64| pages.word(a).ok_or(());
        let mut uregs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut at = FrameAddress::from_instruction_pointer(regs.ip);
        loop {
            if self.addrs.len() >= MAX_NATIVE_FRAMES {
                return Ok(false);
            }
            self.addrs.push(at.address_for_lookup());
            self.sps.push(uregs.sp());
            let addr = at.address_for_lookup();
            match frame_rule(&mut self.rules, &self.modules, &mut self.cfi_context, addr) {
                FrameRule::Realigned(rule) => match unwind_realigned(rule, &mut uregs, &mut read) {
                    Some(next) => {
                        at = next;
                        continue;
                    }
                    None => return Ok(false),
                },
                FrameRule::NoTable
                    if self.guessed.is_none()
                        && !frame_pointer_kept(
                            &self.target,
                            &self.modules,
                            &mut self.fp_functions,
                            at,
                        ) =>
                {
                    self.guessed = Some(self.addrs.len() - 1);
                }
                _ => {}
            }
            match self
                .unwinder
                .unwind_frame(at, &mut uregs, &mut self.cache, &mut read)
            {
                Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                    Some(next) => at = next,
                    None => return Ok(false),
                },
                Ok(None) => return Ok(true),
                Err(_) => return Ok(false),
            }
        }
    }

    /// A walk that went through a frame it could only guess at keeps the
    /// frames up to that one, when none after it runs the eval loop (they
    /// would be merged with Python frames they may not belong to); else
    /// the sample fails. With `Keep::All`, which shows every frame, it
    /// fails too.
    fn drop_guessed(&mut self, tid: u64) -> Result<()> {
        let Some(g) = self.guessed else {
            return Ok(());
        };
        let evals_after = self.walked[g + 1..].iter().any(|w| w.1 == Role::EvalLoop);
        if evals_after || self.keep == Keep::All {
            return Err(Error::NativeWalk {
                tid,
                why: "it runs through code without unwind information or a frame pointer".into(),
            });
        }
        self.walked.truncate(g + 1);
        Ok(())
    }

    /// Mark as the eval loop's every native frame whose stack holds one
    /// of `entries` (a frame's stack runs from its own stack pointer to
    /// its caller's).
    fn mark_eval_frames(&mut self, entries: &[u64]) {
        // The outermost frame's stack has no known end: never the loop's.
        // Nor has a frame unwound by a guess, nor those after it: their
        // stack pointers may be anywhere, and an entry frame there would
        // make a C frame pass for the loop.
        let trusted = self.guessed.unwrap_or(usize::MAX);
        for (i, w) in self.walked.iter_mut().enumerate().take(trusted) {
            let (Some(&lo), Some(&hi)) = (self.sps.get(i), self.sps.get(i + 1)) else {
                break;
            };
            if entries.iter().any(|e| (lo..hi).contains(e)) {
                w.1 = Role::EvalLoop;
            }
        }
    }

    /// Name the walked addresses: `self.walked` from `self.addrs`.
    fn name(&mut self, table: &mut FrameTable) {
        if self.named.len() > MAX_NAMED {
            self.named.clear();
        }
        self.walked.clear();
        for &a in &self.addrs {
            let named = match self.named.get(&a) {
                Some(&n) => n,
                None => {
                    let n = name_of(&self.modules, a, table, self.keep);
                    // An address in no module may be in one loaded later.
                    if self.modules.find(a).is_some() {
                        self.named.insert(a, n);
                    }
                    n
                }
            };
            self.walked.push(named);
        }
    }

    /// Read the memory map again, if not done in the last
    /// [`RESCAN_EVERY`]; true when it was.
    fn rescan(&mut self) -> bool {
        if self.last_scan.is_some_and(|t| t.elapsed() < RESCAN_EVERY) {
            return false;
        }
        self.last_scan = Some(Instant::now());
        let (added, removed) = self.modules.rescan(&self.target);
        if !removed.is_empty() || !added.is_empty() {
            self.named.clear();
            self.rules.clear();
            self.fp_functions.clear();
        }
        for start in removed {
            self.unwinder.remove_module(start);
        }
        for m in added {
            self.unwinder.add_module(m);
        }
        true
    }
}

/// How the frame at lookup address `addr` is unwound (by its table, by
/// its realignment rule, or by frame pointers alone), found once per
/// address. An address in no module, or in one without an `.eh_frame`,
/// has no table.
fn frame_rule(
    known: &mut HashMap<u64, FrameRule>,
    modules: &Modules,
    ctx: &mut gimli::UnwindContext<usize>,
    addr: u64,
) -> FrameRule {
    if let Some(&r) = known.get(&addr) {
        return r;
    }
    let Some(m) = modules.find(addr) else {
        return FrameRule::NoTable;
    };
    let rule = match m.cfi.as_ref() {
        Some(cfi) => cfi.rule(addr.wrapping_sub(m.bias), ctx),
        None => FrameRule::NoTable,
    };
    if known.len() > MAX_NAMED {
        known.clear();
    }
    known.insert(addr, rule);
    rule
}

/// Bytes of a function's start looked at for its frame pointer set-up.
const PROLOGUE_BYTES: usize = 24;

/// Where the frame pointer of a function whose code starts with `code` is
/// set up: the offset just past its `mov %rsp,%rbp`, when the function
/// begins with `push %rbp` (after an `endbr64`, if any) and sets it up
/// within its first instructions (gcc may put others in between).
fn frame_pointer_ready(code: &[u8]) -> Option<u64> {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    const MOV_RSP_RBP: [u8; 3] = [0x48, 0x89, 0xe5];
    let body = code.strip_prefix(&ENDBR64[..]).unwrap_or(code);
    let skipped = code.len() - body.len();
    if body.first() != Some(&0x55) {
        return None;
    }
    let at = body.windows(3).position(|w| w == MOV_RSP_RBP)?;
    Some((skipped + at + MOV_RSP_RBP.len()) as u64)
}

/// Can the frame at `addr`, which no unwind table covers, be unwound by
/// its frame pointer? Only when its function (known by a symbol) sets one
/// up, and the frame is past that and not tearing it down: a return
/// address (its call made from the function's body), or a leaf whose
/// instruction is neither a `ret` nor just after `pop %rbp`/`leave`.
/// Otherwise `%rbp` may hold a caller's frame pointer, and the walk would
/// skip frames without a sign.
fn frame_pointer_kept<M: crate::process::ProcessMemory>(
    mem: &M,
    modules: &Modules,
    known: &mut HashMap<u64, Option<u64>>,
    at: FrameAddress,
) -> bool {
    let addr = at.address_for_lookup();
    let Some(m) = modules.find(addr) else {
        return false;
    };
    let Some((start, _)) = m.symbols.lookup_start(addr.wrapping_sub(m.bias)) else {
        return false;
    };
    let start = start.wrapping_add(m.bias);
    let ready = *known.entry(start).or_insert_with(|| {
        let mut code = [0u8; PROLOGUE_BYTES];
        mem.read(start, &mut code).ok()?;
        frame_pointer_ready(&code)
    });
    let Some(ready) = ready else {
        return false;
    };
    if addr < start.wrapping_add(ready) {
        return false;
    }
    if at.is_return_address() {
        return true;
    }
    let mut around = [0u8; 2];
    mem.read(addr - 1, &mut around).is_ok()
        && around[1] != 0xc3
        && around[0] != 0x5d
        && around[0] != 0xc9
}

/// Unwind one realigned frame by `rule`: the caller's registers into
/// `regs`, and the caller's address; `None` when the stack cannot be read
/// or the result goes nowhere (the walk ends there, incomplete).
fn unwind_realigned(
    rule: realigned::Realigned,
    regs: &mut UnwindRegsX86_64,
    read: &mut impl FnMut(u64) -> std::result::Result<u64, ()>,
) -> Option<FrameAddress> {
    use realigned::SavedBp;
    let (sp, bp) = (regs.sp(), regs.bp());
    let cfa = read(bp.wrapping_add_signed(rule.cfa_at_bp)).ok()?;
    // The caller's stack lies above ours.
    if cfa <= sp {
        return None;
    }
    let ra = read(cfa.wrapping_add_signed(rule.ra_at_cfa)).ok()?;
    let caller_bp = match rule.bp {
        SavedBp::AtCfa(n) => read(cfa.wrapping_add_signed(n)).ok()?,
        SavedBp::AtBp(n) => read(bp.wrapping_add_signed(n)).ok()?,
        SavedBp::Same => bp,
    };
    regs.set_sp(cfa);
    regs.set_bp(caller_bp);
    FrameAddress::from_return_address(ra)
}

/// The frame and role of the native frame at lookup address `addr`. Its
/// source line is looked up only if a stack can show it (`keep`): the
/// eval loop is always replaced, the call machinery hidden unless `All`.
/// (A module's line tables are read on its first lookup: a profile that
/// shows none of libpython's frames never reads its debug file.)
fn name_of(modules: &Modules, addr: u64, table: &mut FrameTable, keep: Keep) -> (FrameId, Role) {
    let Some(m) = modules.find(addr) else {
        return (native_frame(table, ANONYMOUS, UNKNOWN, None), Role::Other);
    };
    let svma = addr.wrapping_sub(m.bias);
    let func = m.symbols.lookup(svma);
    let role = if m.eval.as_ref().is_some_and(|r| r.contains(&svma))
        || func.is_some_and(|f| f.starts_with(EVAL_LOOP))
    {
        Role::EvalLoop
    } else if !m.interpreter {
        Role::Other
    } else if func.is_some_and(|f| f.to_ascii_lowercase().contains("call")) {
        Role::Plumbing
    } else {
        Role::Interpreter
    };
    let shown = match role {
        Role::EvalLoop => false,
        Role::Plumbing => keep == Keep::All,
        Role::Interpreter | Role::Other => true,
    };
    let source = func
        .filter(|_| shown)
        .and(m.lines.as_ref())
        .and_then(|lines| lines.find(svma));
    let frame = match source {
        Some(s) => native_frame(table, &s.file, func.unwrap_or(UNKNOWN), Some(s.line)),
        None => native_frame(table, &m.name, func.unwrap_or(UNKNOWN), None),
    };
    (frame, role)
}

/// A native function's frame: its source file and line when the module's
/// debug information gives them, else its module as the file and no
/// location.
fn native_frame(table: &mut FrameTable, file: &str, func: &str, line: Option<u32>) -> FrameId {
    let file = table.intern_str(file);
    let func = table.intern_str(func);
    let location = line
        .and_then(|l| i32::try_from(l).ok())
        .map(|line| Location {
            line,
            end_line: line,
            col: -1,
            end_col: -1,
        });
    table.intern(Frame {
        kind: FrameKind::NativeFunction,
        file,
        func,
        location,
        opcode: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_pointer_set_ups_are_found_where_gcc_puts_them() {
        // push %rbp; mov %rsp,%rbp
        assert_eq!(
            frame_pointer_ready(&[0x55, 0x48, 0x89, 0xe5, 0x90]),
            Some(4)
        );
        // push %rbp; mov %rsi,%rdi; mov %rsp,%rbp (gcc -O2)
        let gcc = [0x55, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xe5, 0xe8];
        assert_eq!(frame_pointer_ready(&gcc), Some(7));
        // endbr64 first
        let cet = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5];
        assert_eq!(frame_pointer_ready(&cet), Some(8));
        // No push %rbp, or no frame pointer set up.
        assert_eq!(frame_pointer_ready(&[0x48, 0x89, 0xe5]), None);
        assert_eq!(frame_pointer_ready(&[0x55, 0x48, 0x83, 0xec, 0x10]), None);
    }
}
