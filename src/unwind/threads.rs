//! Interpreters and their threads, and each thread's status flags.

use crate::model::status;
use crate::offsets::{GilFlag, Offsets};
use crate::process::LocalBytes;

/// Most interpreters and threads per interpreter we follow: far above real
/// programs, low enough that a corrupt (cyclic) list ends quickly.
pub const MAX_INTERPRETERS: usize = 256;
pub const MAX_THREADS: usize = 8192;

/// Facts read once per interpreter per sample.
pub struct InterpFacts {
    /// Where the interpreter state is.
    pub addr: u64,
    pub id: i64,
    pub next: u64,
    pub threads_head: u64,
    pub threads_main: u64,
    pub gil_holder: u64,
    /// 3.12: the GIL state this interpreter uses when it is not its own
    /// (the main interpreter's, shared); 0 otherwise. Its holder is read
    /// from there, into `gil_holder`.
    pub shared_gil: u64,
    pub gc_collecting: bool,
    pub gc_frame: u64,
    pub code_generation: Option<u64>,
    /// Free-threaded 3.14+: the generation of bytecode copy indices.
    pub tlbc_generation: Option<u32>,
}

impl InterpFacts {
    /// Decode from the interpreter-state prefix read for this sample, of
    /// the interpreter at `addr`. `runtime_gil_holder` is the GIL holder
    /// read from `_PyRuntime` when the GIL lives there (3.11).
    pub fn decode(
        o: &Offsets,
        b: &[u8],
        addr: u64,
        runtime_gil_holder: u64,
    ) -> Option<InterpFacts> {
        let id = b.u64_at(o.interp_id)? as i64;
        let gil_holder = if o.gil_in_runtime {
            runtime_gil_holder
        } else if b.u32_at(o.interp_gil_locked)? != 0 {
            b.u64_at(o.interp_gil_holder)?
        } else {
            0
        };
        let shared_gil = match o.interp_ceval_gil {
            Some(off) => {
                let own = addr.wrapping_add(o.interp_gil_locked.wrapping_sub(o.gil_state_locked));
                let used = b.u64_at(off)?;
                if used != own { used } else { 0 }
            }
            None => 0,
        };
        Some(InterpFacts {
            addr,
            id,
            shared_gil,
            next: b.u64_at(o.interp_next)?,
            threads_head: b.u64_at(o.interp_threads_head)?,
            threads_main: if !o.threads_main_embedded {
                b.u64_at(o.interp_threads_main)?
            } else if id == 0 {
                // 3.11, 3.12: the main interpreter's first thread state,
                // embedded in it, is its main thread's.
                addr.wrapping_add(o.interp_threads_main)
            } else {
                0
            },
            gil_holder,
            gc_collecting: b.u32_at(o.interp_gc_collecting)? != 0,
            gc_frame: match o.interp_gc_frame {
                Some(f) => b.u64_at(f)?,
                None => 0,
            },
            code_generation: match o.interp_code_object_generation {
                Some(g) => Some(b.u64_at(g)?),
                None => None,
            },
            tlbc_generation: match o.interp_tlbc_generation {
                Some(g) => Some(b.u32_at(g)?),
                None => None,
            },
        })
    }
}

/// Thread-list walks in a row without the interpreter's main thread after
/// which the list is believed: a few samples' tries.
pub const MAX_MAIN_UNLISTED: u32 = 32;

/// An interpreter's main thread is the oldest in its list, and stays
/// there. A walk of the list that ends without it read the list while a
/// thread was linked or unlinked (its `next` cleared, or not yet set), and
/// would show the threads before it as the whole process: it is torn.
/// Unless walks of that interpreter's list miss it [`MAX_MAIN_UNLISTED`]
/// times in a row: then its state really left the list (an embedding
/// deleted it), and the list is taken as it is until the main thread is
/// back in it. Counted per interpreter: one whose walks are whole does not
/// keep another's real miss torn for ever.
#[derive(Debug, Default)]
pub struct MainUnlisted {
    /// (interpreter, walks in a row that missed its main thread): only
    /// interpreters whose last walk missed it.
    missed: Vec<(u64, u32)>,
}

impl MainUnlisted {
    /// After a walk of interpreter `interp`'s list that reached its main
    /// thread (or has none to reach: `listed`), or did not: is that walk
    /// torn?
    pub fn torn(&mut self, interp: u64, listed: bool) -> bool {
        let at = self.missed.iter().position(|&(i, _)| i == interp);
        match (listed, at) {
            (true, Some(k)) => {
                self.missed.swap_remove(k);
                false
            }
            (true, None) => false,
            (false, Some(k)) => {
                let n = &mut self.missed[k].1;
                *n = n.saturating_add(1);
                *n <= MAX_MAIN_UNLISTED
            }
            (false, None) => {
                if self.missed.len() >= MAX_INTERPRETERS {
                    self.missed.clear();
                }
                self.missed.push((interp, 1));
                true
            }
        }
    }
}

/// Facts from one thread state.
pub struct ThreadFacts {
    pub native_id: u64,
    /// `pthread_t`: `threading`'s ident of the thread.
    pub thread_id: u64,
    pub next: u64,
    /// The current frame; 0 until read through `cframe` (3.11, 3.12; see
    /// [`super::cframe`]).
    pub current_frame: u64,
    /// 3.11, 3.12: `tstate->cframe`, the `_PyCFrame` that holds the current
    /// frame (0: none).
    pub cframe: u64,
    /// 3.11, 3.12: `current_frame` and `outer_cframe` were read from it.
    pub cframe_read: bool,
    /// 3.11, 3.12: `cframe->previous`, the outer eval loop's `_PyCFrame`.
    pub outer_cframe: u64,
    /// 3.11, 3.12: the outer `_PyCFrame`'s current frame, which the walk's
    /// first entry frame must link to (see [`super::cframe`]); `None`: not
    /// checked.
    pub entry_previous: Option<u64>,
    pub base_frame: Option<u64>,
    /// 3.15: the frame-cache anchor as read, (frame, sequence).
    pub anchor: Option<(u64, u64)>,
    pub datastack_chunk: u64,
    pub holds_gil: bool,
    pub gil_requested: bool,
    pub has_exception: bool,
}

impl ThreadFacts {
    /// Decode a copied thread state. `none_addr` is `Py_None`: a handled
    /// exception slot holding None means no exception.
    pub fn decode(o: &Offsets, b: &[u8], none_addr: Option<u64>) -> Option<ThreadFacts> {
        let holds_gil = match o.holds_gil {
            GilFlag::StatusBit { offset, bit } => b.u32_at(offset)? & (1 << bit) != 0,
            GilFlag::Int { offset } => b.u32_at(offset)? != 0,
            // Known only with the interpreter's GIL state: see `status`.
            GilFlag::Holder => false,
        };
        let gil_requested = match o.gil_requested {
            Some(off) => !holds_gil && b.u32_at(off)? != 0,
            None => false,
        };
        let is_exc = |v: u64| v != 0 && Some(v) != none_addr;
        let has_exception = is_exc(b.u64_at(o.tstate_current_exception)?)
            || is_exc(b.u64_at(o.tstate_handled_exception)?);
        let (current_frame, cframe) = match o.cframe_current_frame {
            None => (b.u64_at(o.tstate_current_frame)?, 0),
            Some(_) => (0, b.u64_at(o.tstate_current_frame)?),
        };
        Some(ThreadFacts {
            native_id: b.u64_at(o.tstate_native_thread_id)?,
            thread_id: b.u64_at(o.tstate_thread_id)?,
            next: b.u64_at(o.tstate_next)?,
            current_frame,
            cframe,
            cframe_read: false,
            outer_cframe: 0,
            entry_previous: None,
            base_frame: match o.tstate_base_frame {
                Some(f) => Some(b.u64_at(f)?),
                None => None,
            },
            anchor: match o.tstate_last_profiled {
                Some((f, s)) => Some((b.u64_at(f)?, b.u64_at(s)?)),
                None => None,
            },
            datastack_chunk: b.u64_at(o.tstate_datastack_chunk)?,
            holds_gil,
            gil_requested,
            has_exception,
        })
    }

    /// The reference's status bits. `os_state` is the kernel's scheduler
    /// letter when CPU state was asked for, else `None` (UNKNOWN).
    /// `is_gil_holder`: the interpreter's GIL state names this thread.
    pub fn status(&self, is_main: bool, is_gil_holder: bool, os_state: Option<char>) -> u32 {
        let mut s = 0;
        if self.holds_gil || is_gil_holder {
            s |= status::HAS_GIL;
        }
        if self.gil_requested {
            s |= status::GIL_REQUESTED;
        }
        if self.has_exception {
            s |= status::HAS_EXCEPTION;
        }
        if is_main {
            s |= status::MAIN_THREAD;
        }
        match os_state {
            Some('R') => s |= status::ON_CPU,
            Some('S' | 'D' | 'T' | 'Z' | 'I' | 'X') => {}
            // 't': stopped by a tracer, typically us (`--blocking`): whether
            // it was running a moment ago is unknown, not "idle".
            _ => s |= status::UNKNOWN,
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_without_the_main_thread_is_torn_until_it_stays_so() {
        const A: u64 = 0x1000;
        const B: u64 = 0x2000;
        let mut m = MainUnlisted::default();
        assert!(!m.torn(A, true));
        // A walk that missed it, then one that found it: the miss torn.
        assert!(m.torn(A, false));
        assert!(!m.torn(A, true));
        // Missed every time: torn MAX_MAIN_UNLISTED times, then believed
        // for as long as it stays out, whatever another interpreter's
        // walks find in between.
        let torn = (0..MAX_MAIN_UNLISTED + 10)
            .filter(|_| {
                assert!(!m.torn(B, true));
                m.torn(A, false)
            })
            .count();
        assert_eq!(torn, MAX_MAIN_UNLISTED as usize);
        assert!(!m.torn(A, false));
        // Another interpreter's miss is its own.
        assert!(m.torn(B, false));
        // Back in the list: checked again from scratch.
        assert!(!m.torn(A, true));
        assert!(m.torn(A, false));
    }
}
