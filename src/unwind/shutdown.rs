//! Interpreter shutdown: samples taken while the runtime finalises are not
//! the program's.
//!
//! Once `Py_FinalizeEx` has run the `atexit` handlers it sets
//! `_PyRuntime._finalizing` to the thread state doing the work, then
//! collects garbage, clears the modules and frees the interpreter. That
//! thread holds the GIL with no Python frame under it (or only a `<GC>`
//! marker, while the collector frees what the modules kept alive), and a
//! program that kept much cyclic garbage until exit spends a visible share
//! of its run there. The reference's samples show none of this, and a
//! profile that did would name the garbage collector as the hot spot.
//!
//! So a sample in which a thread holding the GIL has no Python frame asks
//! the runtime (one read of the 8-byte `_finalizing`) whether it is
//! finalising; if it is, the sample is a shutdown sample: the unwinder
//! returns no threads and says so ([`super::Unwinder::in_shutdown`]), and
//! the sampler counts it apart. A steady sample of a running program never
//! pays the read: its GIL holder has Python frames. A failed read counts as
//! "not finalising": the sample stays what it was.

use crate::model::{FrameKind, FrameTable, ThreadSample, status};
use crate::offsets::Offsets;
use crate::process::ProcessMemory;

/// Could this sample be the runtime's own shutdown work: a thread holds
/// the GIL and has no Python frame (nothing, or only markers such as
/// `<GC>`)?
pub fn may_be_shutdown(threads: &[ThreadSample], table: &FrameTable) -> bool {
    threads.iter().any(|t| {
        t.status & status::HAS_GIL != 0
            && !t
                .frames
                .iter()
                .any(|&f| matches!(table.frame(f).kind, FrameKind::Python | FrameKind::Task))
    })
}

/// Whether the runtime at `runtime` is finalising: its `_finalizing` is
/// set. `false` when the word cannot be read.
pub fn finalizing<M: ProcessMemory>(mem: &M, runtime: u64, o: &Offsets) -> bool {
    let mut word = [0u8; 8];
    mem.read(runtime.wrapping_add(o.runtime_finalizing), &mut word)
        .is_ok()
        && u64::from_le_bytes(word) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::scenarios::py;

    fn thread(status: u32, frames: Vec<u32>) -> ThreadSample {
        ThreadSample {
            tid: 1,
            status,
            frames,
            ..Default::default()
        }
    }

    #[test]
    fn only_a_gil_holder_without_python_frames_asks() {
        let mut t = FrameTable::new();
        let f = py(&mut t, "/app/main.py", "main", 3);
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let held = status::HAS_GIL;
        // The runtime's own work: nothing, or a <GC> marker, holding the GIL.
        assert!(may_be_shutdown(&[thread(held, vec![])], &t));
        assert!(may_be_shutdown(&[thread(held, vec![gc])], &t));
        // A program's collection, under its Python frames.
        assert!(!may_be_shutdown(&[thread(held, vec![gc, f])], &t));
        // A thread with no frames that waits (a C thread, a new thread).
        assert!(!may_be_shutdown(&[thread(0, vec![])], &t));
        assert!(!may_be_shutdown(
            &[thread(status::GIL_REQUESTED, vec![gc])],
            &t
        ));
        // One such thread among others is enough.
        assert!(may_be_shutdown(
            &[thread(0, vec![f]), thread(held, vec![gc])],
            &t
        ));
        assert!(!may_be_shutdown(&[], &t));
    }
}
