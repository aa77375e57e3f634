//! tachyon: a sampling profiler for CPython 3.11 to 3.15 that reads a
//! Python process's stacks from outside.
//!
//! The data flows one way, one module a stage:
//! [`process`] (read another process) → [`runtime`] (find `_PyRuntime`) →
//! [`offsets`] (decode and validate `_Py_DebugOffsets`, or the layout
//! carried for 3.11/3.12) → [`unwind`] (threads,
//! chunks, frames, code objects, line tables) → [`dump`] (one snapshot, as a
//! traceback). [`model`] holds the types they share; [`sample`] drives
//! the sampling loop into [`collect`]'s outputs and [`live`]'s view;
//! [`session`] is the one way into a Python process ([`session::probe`],
//! [`session::open`], launching and following under ptrace) and owns a
//! profile's processes (the main one, the next, the children) for the
//! commands to start.

pub mod binfmt;
pub mod collect;
pub mod console;
pub mod dump;
pub mod error;
pub mod live;
pub mod model;
pub mod native;
pub mod offsets;
pub mod opcodes;
pub mod process;
pub mod pyrepr;
pub mod runtime;
pub mod sample;
pub mod session;
pub mod unwind;

pub use error::{Error, Result};

/// Open `pid`, find and validate its runtime, and build an unwinder for it
/// (the tests' way in; the commands open through [`session::open`]).
pub use session::open::attach;
