//! One thread's native frames and its Python frames, made one stack in
//! true call order.
//!
//! Each invocation of the eval loop on the native stack runs the Python
//! frames from one entry frame up to the next: the Python walk marks those
//! boundaries (the `<native>` marker frames), so its frames fall into as
//! many groups as there are eval-loop invocations. Each eval-loop native
//! frame is replaced by its group. When the counts differ, the two walks
//! did not see the same stack (a thread just entering or leaving the loop,
//! or a native walk cut short): the sample fails rather than splice.

use crate::model::FrameId;

/// What a native frame is, as merging sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An invocation of the eval loop: replaced by Python frames.
    EvalLoop,
    /// The interpreter's own machinery (libpython, not the eval loop).
    Interpreter,
    /// The interpreter's call machinery (`*call*` functions): hidden by
    /// default also at the leaf.
    Plumbing,
    /// Anything else: extensions, libc, other libraries.
    Other,
}

/// Which native frames a stack keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Keep {
    /// Extensions' and libraries' frames, and the interpreter's own at the
    /// leaf (what the Python line is doing in C: a sleep, a lock wait);
    /// not the interpreter's frames between Python frames, nor what lies
    /// below the outermost Python frame (process and thread start).
    #[default]
    Useful,
    /// Every frame.
    All,
}

/// The native and Python stacks do not describe one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    pub eval_frames: usize,
    pub python_groups: usize,
}

/// Merge `native` (leaf first, each with its role) and `python` (leaf
/// first, groups split by `boundary` frames) into `out`, leaf first;
/// `moved[i]` says where `python[i]` went (`None`: a boundary, gone).
pub fn merge(
    native: &[(FrameId, Role)],
    python: &[FrameId],
    boundary: FrameId,
    keep: Keep,
    out: &mut Vec<FrameId>,
    moved: &mut Vec<Option<usize>>,
) -> Result<(), Mismatch> {
    out.clear();
    moved.clear();
    moved.resize(python.len(), None);
    let evals = native.iter().filter(|f| f.1 == Role::EvalLoop).count();
    if python.is_empty() {
        // No Python on this thread: its native stack is all there is.
        out.extend(native.iter().map(|f| f.0));
        return Ok(());
    }
    // A boundary below every Python frame marks the thread's base frame
    // (3.14+: a sentinel of the thread state, run by no eval loop).
    let python = match python.iter().rposition(|&f| f != boundary) {
        Some(last) => &python[..=last],
        None => python,
    };
    let mut groups = python.split(|&f| f == boundary);
    let python_groups = python.iter().filter(|&&f| f == boundary).count() + 1;
    if evals != python_groups {
        return Err(Mismatch {
            eval_frames: evals,
            python_groups,
        });
    }
    let mut seen = 0;
    // Where the next group starts in `python`.
    let mut at = 0;
    for &(id, role) in native {
        if role == Role::EvalLoop {
            let group = groups.next().unwrap_or_default();
            for (k, &f) in group.iter().enumerate() {
                moved[at + k] = Some(out.len());
                out.push(f);
            }
            at += group.len() + 1;
            seen += 1;
            continue;
        }
        let shown = match keep {
            Keep::All => true,
            Keep::Useful => match seen {
                // The leaf: what the innermost Python line runs in C.
                0 => role != Role::Plumbing,
                // Below the outermost Python frame: how the thread started.
                n if n == evals => false,
                _ => role == Role::Other,
            },
        };
        if shown {
            out.push(id);
        }
    }
    Ok(())
}

/// The stack `python` without its `boundary` frames, into `out`, as when
/// the native frames could not be merged; `moved` as [`merge`] gives it.
pub fn without_boundaries(
    python: &[FrameId],
    boundary: FrameId,
    out: &mut Vec<FrameId>,
    moved: &mut Vec<Option<usize>>,
) {
    out.clear();
    moved.clear();
    for &f in python {
        if f == boundary {
            moved.push(None);
        } else {
            moved.push(Some(out.len()));
            out.push(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Role::*;

    const B: FrameId = 99;

    #[test]
    fn eval_frames_become_their_python_groups() {
        // leaf: sleep(libc) <- time_sleep(interp) <- vectorcall(plumbing)
        // <- eval [inner] <- call(interp) <- call_back(ext) <- eval [outer,
        // <module>] <- main(interp) <- libc_start(other)
        let native = [
            (1, Other),
            (2, Interpreter),
            (3, Plumbing),
            (4, EvalLoop),
            (5, Plumbing),
            (6, Other),
            (7, EvalLoop),
            (8, Interpreter),
            (9, Other),
        ];
        let python = [20, B, 21, 22];
        let (mut out, mut moved) = (Vec::new(), Vec::new());
        merge(&native, &python, B, Keep::Useful, &mut out, &mut moved).unwrap();
        assert_eq!(out, [1, 2, 20, 6, 21, 22]);
        assert_eq!(moved, [Some(2), None, Some(4), Some(5)]);
        // The same below a base frame (a boundary at the root).
        let based = [20, B, 21, 22, B];
        merge(&native, &based, B, Keep::Useful, &mut out, &mut moved).unwrap();
        assert_eq!(out, [1, 2, 20, 6, 21, 22]);
        assert_eq!(moved, [Some(2), None, Some(4), Some(5), None]);
        merge(&native, &python, B, Keep::All, &mut out, &mut moved).unwrap();
        assert_eq!(out, [1, 2, 3, 20, 5, 6, 21, 22, 8, 9]);
        assert_eq!(moved, [Some(3), None, Some(6), Some(7)]);
        without_boundaries(&python, B, &mut out, &mut moved);
        assert_eq!(out, [20, 21, 22]);
        assert_eq!(moved, [Some(0), None, Some(1), Some(2)]);
    }

    #[test]
    fn counts_that_differ_are_a_mismatch() {
        let native = [(1, Other), (4, EvalLoop), (9, Other)];
        let (mut out, mut moved) = (Vec::new(), Vec::new());
        assert_eq!(
            merge(&native, &[20, B, 21], B, Keep::Useful, &mut out, &mut moved),
            Err(Mismatch {
                eval_frames: 1,
                python_groups: 2
            })
        );
        assert_eq!(
            merge(&native, &[], B, Keep::Useful, &mut out, &mut moved),
            Ok(()),
            "a thread without Python frames keeps its native stack"
        );
        assert_eq!(out, [1, 4, 9]);
    }
}
