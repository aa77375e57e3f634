//! `dump --locals`: the lock a thread blocked in `lock.acquire()` or
//! `with lock:` waits for, and, for an `RLock`, the thread that holds it,
//! so that a deadlock reads "waits for RLock 0x... held by thread B".
//!
//! Only what is exact is said. The lock is the `self` of the call the
//! thread's newest Python frame is in: the frame's instruction is a
//! `CALL`, the callable on its value stack is the `acquire` (or
//! `__enter__`) method descriptor of `_thread.lock` or `_thread.RLock`, and
//! the object below it is of that very type. The value stack's end is
//! known only on 3.14 and newer, whose frames keep their stack pointer
//! across a call into C (`interpreter_frame.stackpointer`); older versions
//! get nothing. A `Lock` does not record its holder; an `RLock` records
//! its owner's `threading` ident, which names a thread of the dump.
//!
//! Layouts, from CPython 3.14/3.15's headers: a method descriptor is the
//! object header, then `d_type` and `d_name`; an `RLock` is the header,
//! then a `_PyRecursiveMutex` (its mutex byte, then the owner's ident);
//! a `Lock` is the header, then its mutex byte. Bit 0 of a mutex byte is
//! "locked".

use crate::error::{Error, Result};
use crate::opcodes::OpTable;
use crate::process::LocalBytes;

use super::frames::{FramePlace, plausible};
use super::locals::{LocalsReader, Objects};

/// Reads one lock question may cost.
pub const READS: u32 = 64;
pub const BYTES: u64 = 64 << 10;
/// Deepest value stack believed.
const MAX_STACK: u64 = 1 << 16;
/// The methods that wait for a lock.
const WAITING_METHODS: [&str; 3] = ["acquire", "__enter__", "acquire_lock"];

/// Which kind of lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// `threading.Lock` (`_thread.lock`): its holder is not recorded.
    Lock,
    /// `threading.RLock` (`_thread.RLock`): its owner's ident is.
    RLock,
}

impl LockKind {
    pub fn type_name(self) -> &'static str {
        match self {
            LockKind::Lock => "_thread.lock",
            LockKind::RLock => "_thread.RLock",
        }
    }
}

/// The lock a thread waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockWait {
    pub kind: LockKind,
    /// The lock object's address (`id(lock)`).
    pub addr: u64,
    /// Whether it was locked when read.
    pub locked: bool,
    /// An `RLock`'s owner, as `threading.get_ident()` names it.
    pub owner_ident: Option<u64>,
}

impl LocalsReader<'_> {
    /// The lock the frame at `p` (a thread's newest Python frame) waits
    /// for, when that is exactly known; `ops` names the target's opcodes.
    pub fn lock_wait(&self, p: &FramePlace, ops: &OpTable) -> Option<LockWait> {
        self.with_objects(READS, BYTES, |r| {
            let (callable, receiver) = call_receiver(r, p, ops).ok()??;
            lock_of(r, callable, receiver).ok()?
        })
    }
}

/// The callable and `self` of the `CALL` the frame at `p` is in, read
/// from its value stack; `None` when it is in no `CALL`, or its stack's end
/// is not kept (before 3.14).
fn call_receiver(r: &Objects, p: &FramePlace, ops: &OpTable) -> Result<Option<(u64, u64)>> {
    let o = r.o;
    let Some(sp_at) = o.values.frame_stackpointer else {
        return Ok(None);
    };
    let base = o.values.frame_localsplus;
    let head = r.frame_still(p, 0)?;
    let ip = p.instr_ptr;
    let slots = p.frame.wrapping_add(base);
    let sp = head.u64_at(sp_at).unwrap_or(0);
    if sp < slots || !(sp - slots).is_multiple_of(8) || (sp - slots) / 8 > MAX_STACK {
        return Err(Error::corrupt("a stack pointer outside its frame"));
    }
    let depth = (sp - slots) / 8;
    let mut instr = [0u8; 2];
    r.mem.read(ip, &mut instr)?;
    let (op, oparg) = (instr[0], instr[1] as u64);
    if ops.name(ops.base_of(op).unwrap_or(op)) != "CALL" || depth < oparg + 2 {
        return Ok(None);
    }
    // The stack ends with: the callable, `self` (or NULL), the arguments.
    let mut two = [0u8; 16];
    r.mem.read(slots + (depth - oparg - 2) * 8, &mut two)?;
    let callable = two.u64_at(0).unwrap_or(0) & o.tag_mask;
    let receiver = two.u64_at(8).unwrap_or(0) & o.tag_mask;
    Ok((plausible(callable) && plausible(receiver)).then_some((callable, receiver)))
}

/// The lock `receiver` is, when `callable` is one of its type's waiting
/// methods.
fn lock_of(r: &Objects, callable: u64, receiver: u64) -> Result<Option<LockWait>> {
    let o = r.o;
    let header = o.ob_type + 8;
    let lock_type = r.mem.read_u64(receiver.wrapping_add(o.ob_type))?;
    let kind = match r.type_name(lock_type)?.0.as_str() {
        "_thread.lock" => LockKind::Lock,
        "_thread.RLock" => LockKind::RLock,
        _ => return Ok(None),
    };
    let descr_type = r.mem.read_u64(callable.wrapping_add(o.ob_type))?;
    if r.type_name(descr_type)? != ("method_descriptor".to_owned(), false) {
        return Ok(None);
    }
    let mut descr = [0u8; 16];
    r.mem.read(callable.wrapping_add(header), &mut descr)?;
    let (d_type, d_name) = (descr.u64_at(0).unwrap_or(0), descr.u64_at(8).unwrap_or(0));
    if d_type != lock_type || !WAITING_METHODS.contains(&r.text(d_name)?.as_str()) {
        return Ok(None);
    }
    let mut state = [0u8; 16];
    r.mem.read(receiver.wrapping_add(header), &mut state)?;
    let locked = state[0] & 1 != 0;
    let owner = state.u64_at(8).unwrap_or(0);
    Ok(Some(LockWait {
        kind,
        addr: receiver,
        locked,
        owner_ident: (kind == LockKind::RLock && locked && owner != 0).then_some(owner),
    }))
}

/// A thread's wait, with the owner of an `RLock` found among the dump's
/// threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waited {
    pub lock: LockWait,
    /// The waiting frame's index in its stack (leaf first).
    pub frame: usize,
    /// The index, among the dump's stacks, of the owner's.
    pub owner: Option<usize>,
}
