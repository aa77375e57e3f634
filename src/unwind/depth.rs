//! The thread's own count of its Python frames, against the walk's.
//!
//! From 3.12 the interpreter counts each Python frame it pushes on a
//! thread's stack against the recursion limit (`py_recursion_remaining`
//! goes down by one for each frame entered, the 3.13+ `__init__` shim
//! included, and up by one for each frame left, returned or suspended),
//! so `py_recursion_limit - py_recursion_remaining` is how many frames
//! the thread's chain holds. It is read in the same copy of the thread
//! state as the current frame.
//!
//! A chain whose links all look whole can still be the wrong chain:
//! - 3.12 publishes a new eval loop's `_PyCFrame` before it sets its
//!   current frame; read in that instant, the current frame is what an
//!   earlier loop at the same place on the C stack left, often a live
//!   frame further down the same stack. The walk from it is whole and
//!   rooted, and misses every frame above it (2 to 10 frames missing in
//!   12 walks in 100 of a program that calls `__init__`s in a loop);
//! - a chain rooted at an entry frame but without the thread's own root
//!   (`work < Thread.run`, without `_bootstrap_inner` and `_bootstrap`,
//!   once on a 3.14 debug build; how it was read is not known).
//!
//! Each holds another number of frames than the thread counts: the walk is
//! torn, whatever it found at its root.
//!
//! The count and the current frame move a few instructions apart: a call
//! links its frame, then counts it (the 3.13 shim and its `__init__` are
//! linked together, then counted one by one); a return uncounts, then
//! unlinks; 3.12 counts a frame before linking it only while it pushes it,
//! 3.13+ also elsewhere. So a walk may find up to two frames more than the
//! count, and one fewer where the version allows it ([`agrees`]). Those
//! bounds are what programs of calls, `__init__`s, generators, threads and
//! exceptions showed with the target stopped for each sample (3.12 to
//! 3.15, release and debug builds, about 1.2 million walks, and `for`
//! loops over generators in tests/generators.rs); the stale current
//! frames above are 2 to 10 frames off.

use crate::offsets::Offsets;
use crate::process::LocalBytes;

/// Frames a walk may find above the thread's count (a 3.13 shim and its
/// `__init__` linked before either is counted).
const MORE: u32 = 2;

/// The number of Python frames the thread counts on its stack, from a
/// copy of its state; `None` where the version keeps no such count (3.11)
/// or the copy's counters are impossible (nothing to check against).
pub fn counted(o: &Offsets, tstate: &[u8]) -> Option<u32> {
    let (remaining, limit) = o.tstate_py_depth?;
    let remaining = tstate.i32_at(remaining)?;
    let limit = tstate.i32_at(limit)?;
    if limit <= 0 || remaining > limit {
        return None;
    }
    // A negative remaining count is a thread past its limit, raising
    // RecursionError: still a count.
    u32::try_from(i64::from(limit) - i64::from(remaining)).ok()
}

/// Does a walk that found `walked` Python frames agree with the thread's
/// count, on Python 3.`minor`? 3.12 counts a frame before it links it
/// only while pushing it above the walk's newest frame (`pushing`: the
/// data stack's top lies past that frame); elsewhere one frame fewer is
/// one missing below. 3.13+ also count some frames before linking them
/// with nothing pushed on the data stack (generators resumed by a `for`
/// loop, `__init__`s: up to 9 walks in 1,000 of stopped programs): one
/// fewer is always allowed there.
pub fn agrees(minor: u8, walked: u32, counted: u32, pushing: bool) -> bool {
    let fewer = u32::from(pushing || minor >= 13);
    walked + fewer >= counted && walked <= counted.saturating_add(MORE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_agrees_from_one_fewer_to_two_more() {
        for minor in [12, 13, 14, 15] {
            assert!(agrees(minor, 10, 10, false));
            assert!(agrees(minor, 12, 10, false));
            assert!(agrees(minor, 9, 10, true));
            assert!(!agrees(minor, 8, 10, true), "the 3.12 stale current frame");
            assert!(!agrees(minor, 13, 10, false));
            assert!(agrees(minor, 2, 0, false));
            assert!(!agrees(minor, 3, 0, true));
            assert!(!agrees(minor, 1, 3, true));
        }
        assert!(!agrees(12, 9, 10, false));
        assert!(agrees(13, 9, 10, false));
        assert!(agrees(14, 9, 10, false));
    }
}
