//! 3.11 and 3.12: the `_PyCFrame` indirection, and the check that keeps a
//! stale current frame out of the profile.
//!
//! These versions reach a thread's current frame through
//! `tstate->cframe->current_frame`, where `cframe` is a local of the
//! innermost running `_PyEval_EvalFrameDefault`, on the thread's C stack.
//! Each eval-loop invocation links its `_PyCFrame` to the outer one
//! (`previous`, down to the root one inside the thread state), and its
//! entry frame (3.11: the frame marked `is_entry`; 3.12: the shim frame)
//! to the outer invocation's current frame.
//!
//! The eval loop publishes `tstate->cframe = &cframe` a few instructions
//! *before* it sets `cframe.current_frame`. A reader in that window reads
//! whatever the C stack held there before: often a frame of an earlier
//! call, popped since, whose chain can look complete. So a walk checks the
//! one link that proves the current frame is this invocation's: its first
//! entry frame must link to the outer `_PyCFrame`'s current frame
//! ([`ThreadFacts::entry_previous`]). That takes one more pointer per
//! thread, read where the last sample found it in the same system call as
//! the thread state, and only when the outer `_PyCFrame` is not the root
//! one (whose current frame is NULL, in the thread state already).

use crate::error::{Error, Result};
use crate::offsets::Offsets;
use crate::process::{LocalBytes, Metered, ProcessMemory, ReadReq};

use super::frames;
use super::threads::ThreadFacts;

/// Bytes of a `_PyCFrame` a sample copies, at most (3.11's whole struct).
const MAX_CFRAME: usize = 24;

/// One thread's `_PyCFrame` and its outer one's current frame, read where
/// the last sample found them, in the same call as the thread state.
#[derive(Default)]
pub struct CFrameCopy {
    /// Where `tstate->cframe` was guessed to be (0: not guessed).
    at: u64,
    buf: [u8; MAX_CFRAME],
    /// Where the outer `_PyCFrame` was guessed to be (0: not guessed).
    outer_at: u64,
    outer_buf: [u8; 8],
}

impl CFrameCopy {
    /// Nothing guessed this sample.
    pub fn forget(&mut self) {
        self.at = 0;
        self.outer_at = 0;
    }

    /// Requests for the `_PyCFrame` at `guess.0` and the current frame of
    /// the outer one at `guess.1` (either 0: not guessed). The root
    /// `_PyCFrame` of `tstate` is in the thread state: not requested.
    pub fn requests<'a>(
        &'a mut self,
        o: &Offsets,
        tstate: u64,
        guess: (u64, u64),
        reqs: &mut Vec<ReadReq<'a>>,
    ) {
        self.forget();
        let (Some(cur), size) = (o.cframe_current_frame, o.cframe_size() as usize) else {
            return;
        };
        if guess.0 == 0 || size > MAX_CFRAME {
            return;
        }
        self.at = guess.0;
        let (buf, outer_buf) = (&mut self.buf, &mut self.outer_buf);
        reqs.push(ReadReq {
            addr: guess.0,
            buf: &mut buf[..size],
        });
        if guess.1 != 0 && Some(guess.1) != root_cframe(o, tstate) {
            self.outer_at = guess.1;
            reqs.push(ReadReq {
                addr: guess.1.wrapping_add(cur),
                buf: outer_buf,
            });
        }
    }

    /// Take what the guesses, read with the thread state, got right into
    /// `f`: its current frame and outer `_PyCFrame` if `f.cframe` was
    /// guessed, and then the outer current frame if that was guessed too.
    /// What is still missing is read by [`resolve`].
    pub fn settle(&self, o: &Offsets, f: &mut ThreadFacts, tstate: u64, tbuf: &[u8]) {
        if self.at == 0 || f.cframe != self.at || !take_cframe(o, f, &self.buf) {
            return;
        }
        if self.outer_at != 0 && f.outer_cframe == self.outer_at {
            f.entry_previous = Some(u64::from_le_bytes(self.outer_buf));
        } else {
            outer_from_root(o, f, tstate, tbuf);
        }
    }
}

/// The root `_PyCFrame` of the thread state at `tstate`.
fn root_cframe(o: &Offsets, tstate: u64) -> Option<u64> {
    o.tstate_root_cframe.map(|r| tstate.wrapping_add(r))
}

/// Take the current frame and the outer `_PyCFrame` from a copy of the
/// first [`Offsets::cframe_size`] bytes of `f.cframe`.
fn take_cframe(o: &Offsets, f: &mut ThreadFacts, b: &[u8]) -> bool {
    let (Some(cur), Some(prev)) = (o.cframe_current_frame, o.cframe_previous) else {
        return false;
    };
    match (b.u64_at(cur), b.u64_at(prev)) {
        (Some(c), Some(p)) => {
            f.current_frame = c;
            f.outer_cframe = p;
            f.cframe_read = true;
            true
        }
        _ => false,
    }
}

/// When the outer `_PyCFrame` is the thread's root one, its current frame
/// is in the thread state copy `tbuf`: take it.
fn outer_from_root(o: &Offsets, f: &mut ThreadFacts, tstate: u64, tbuf: &[u8]) {
    if let (Some(root), Some(cur)) = (o.tstate_root_cframe, o.cframe_current_frame)
        && f.outer_cframe == tstate.wrapping_add(root)
    {
        f.entry_previous = tbuf.u64_at(root + cur);
    }
}

/// Complete what [`CFrameCopy::settle`] left open, for every thread in
/// `todo` (its facts, its state's address and copy): first the
/// `_PyCFrame`s, then the outer current frames, each step in one system
/// call for all threads, and each read alone if that call fails. Each
/// read is granted from the sample's budget.
pub fn resolve<M: ProcessMemory>(
    mem: &Metered<M>,
    o: &Offsets,
    todo: &mut [(&mut ThreadFacts, u64, &[u8])],
) -> Result<()> {
    let size = o.cframe_size() as usize;
    let Some(cur) = o.cframe_current_frame else {
        return Ok(());
    };
    if size > MAX_CFRAME {
        return Err(Error::corrupt("_PyCFrame layout larger than expected"));
    }
    // The `_PyCFrame`s themselves.
    let need: Vec<usize> = (0..todo.len())
        .filter(|&i| todo[i].0.cframe != 0 && !todo[i].0.cframe_read)
        .collect();
    let addrs: Vec<u64> = need.iter().map(|&i| todo[i].0.cframe).collect();
    let mut bufs = vec![[0u8; MAX_CFRAME]; need.len()];
    read_all(mem, &addrs, &mut bufs, size, "thread's cframe")?;
    for (&i, b) in need.iter().zip(&bufs) {
        let (f, tstate, tbuf) = &mut todo[i];
        if !take_cframe(o, f, &b[..size]) {
            return Err(Error::corrupt("short _PyCFrame copy"));
        }
        outer_from_root(o, f, *tstate, tbuf);
    }
    // The outer current frames, where the outer `_PyCFrame` is not the
    // root one.
    let need: Vec<usize> = (0..todo.len())
        .filter(|&i| {
            let f = &todo[i].0;
            f.current_frame != 0 && f.entry_previous.is_none()
        })
        .collect();
    let addrs: Vec<u64> = need
        .iter()
        .map(|&i| todo[i].0.outer_cframe.wrapping_add(cur))
        .collect();
    let mut bufs = vec![[0u8; MAX_CFRAME]; need.len()];
    read_all(mem, &addrs, &mut bufs, 8, "thread's outer cframe")?;
    for (&i, b) in need.iter().zip(&bufs) {
        todo[i].0.entry_previous = b.u64_at(0);
    }
    Ok(())
}

/// Read `len` bytes at each address into its buffer: in one call, or each
/// alone if that fails (so one bad address fails only its own read).
fn read_all<M: ProcessMemory>(
    mem: &Metered<M>,
    addrs: &[u64],
    bufs: &mut [[u8; MAX_CFRAME]],
    len: usize,
    what: &str,
) -> Result<()> {
    if addrs.is_empty() {
        return Ok(());
    }
    if let Some(&bad) = addrs.iter().find(|&&a| !frames::plausible(a)) {
        return Err(Error::corrupt(format!(
            "{what} at impossible address {bad:#x}"
        )));
    }
    let batch = {
        let mut reqs: Vec<ReadReq<'_>> = addrs
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&addr, b)| ReadReq {
                addr,
                buf: &mut b[..len],
            })
            .collect();
        mem.grant(1, (len * reqs.len()) as u64);
        mem.read_many(&mut reqs)
    };
    match batch {
        Ok(()) => Ok(()),
        Err(e) if e.is_fatal() => Err(e),
        Err(_) => {
            for (&addr, b) in addrs.iter().zip(bufs.iter_mut()) {
                mem.grant(1, len as u64);
                mem.read(addr, &mut b[..len])?;
            }
            Ok(())
        }
    }
}

/// 3.11/3.12: is the thread's current frame, read as NULL, the eval
/// loop's window between publishing its `_PyCFrame` and its frame? Only the
/// thread's root `_PyCFrame` (no eval loop running) holds no frame; any
/// other was published by a running loop, whose frame is on its way. Such
/// a thread is torn, not idle (3.11: 100, 3.12: 251 of 3,000 samples of a
/// program calling into Python from C in a loop showed no stack).
pub fn published_without_frame(o: &Offsets, tstate: u64, f: &ThreadFacts) -> bool {
    f.current_frame == 0
        && f.cframe != 0
        && root_cframe(o, tstate).is_some_and(|root| f.cframe != root)
}
