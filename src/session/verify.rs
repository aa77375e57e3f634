//! Checking a layout not proven on a real interpreter against the live
//! process before it is trusted: the [`crate::runtime::Check`] the session
//! gives [`crate::runtime::locate`] (it walks stacks with an unwinder, a
//! layer above the locator). Two kinds of layout get it: the ones tachyon
//! carries for 3.11/3.12 ([`carried`]), and free-threaded 3.14+ tables,
//! whose frames run per-thread copies of bytecode that no interpreter here
//! could show ([`bytecode_copies`]).
//!
//! For a carried layout, the version read from the binary picks the
//! layout; this decides whether
//! the process really has it. The interpreter list must point back to
//! `_PyRuntime`, the main interpreter must be in it with id 0, its thread
//! list must be a consistent doubly linked list of thread states that name
//! that interpreter, with the main thread's state (embedded in the
//! interpreter) naming the runtime's main thread and a live kernel thread,
//! and a walk of the main thread's stack must reach its bottom frame, with
//! every code object and name on the way decoding. A process that fails
//! is refused by name ([`Error::LayoutMismatch`]); one whose runtime is not
//! initialised yet (`_PyRuntime.initialized` is not 1) gets a
//! [`Error::NotPython`], which `run` waits out.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::model::Sample;
use crate::process::{LocalBytes, Target, plausible};
use crate::runtime::Runtime;
use crate::unwind::threads::{MAX_INTERPRETERS, MAX_THREADS};
use crate::unwind::{UnwindOptions, Unwinder};

/// Walks of the main thread tried, per check, before the layout is called
/// wrong: a running thread tears a walk now and then, a wrong layout every
/// time.
const WALK_TRIES: usize = 10;

/// Whole checks tried before the layout is called wrong: threads that
/// start and end while the lists are read can make one check fail on a
/// process that fits; a process that does not fit fails every time.
const CHECK_TRIES: usize = 20;

/// Check `rt` against the live process if its layout needs it: a carried
/// one, or a free-threaded 3.14+ table. Other tables were checked on real
/// interpreters of their versions; they are not walked here.
pub fn layout(proc: &dyn Target, rt: &Runtime) -> Result<()> {
    if rt.offsets.instr_ptr_is_prev {
        carried(proc, rt)
    } else if rt.offsets.frame_tlbc_index.is_some() {
        bytecode_copies(proc, rt)
    } else {
        Ok(())
    }
}

pub fn carried(proc: &dyn Target, rt: &Runtime) -> Result<()> {
    let mut last = None;
    for _ in 0..CHECK_TRIES {
        match check_once(proc, rt) {
            Err(e @ Error::LayoutMismatch { .. }) => last = Some(e),
            other => return other,
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Err(last.expect("at least one try"))
}

fn check_once(proc: &dyn Target, rt: &Runtime) -> Result<()> {
    let c = Checker { proc, rt };
    if !c.initialised()? {
        return Err(c.not_yet());
    }
    let o = &rt.offsets;
    let head = c.read(rt.address + o.runtime_interpreters_head)?;
    if head == 0 {
        return Err(c.not_yet());
    }
    let main_interp = c.read(rt.address + c.field("runtime_state.interpreters_main")?)?;
    c.interpreters(head, main_interp)?;
    let main_tstate = c.main_threads(main_interp)?;
    c.walk_main_thread(main_tstate)
}

/// One check of one runtime, as named steps.
struct Checker<'a> {
    proc: &'a dyn Target,
    rt: &'a Runtime,
}

impl Checker<'_> {
    fn mismatch(&self, what: String) -> Error {
        let t = if self.rt.raw.free_threaded { "t" } else { "" };
        Error::LayoutMismatch {
            pid: self.proc.pid(),
            version: format!("{}{t}", self.rt.raw.version),
            what,
        }
    }

    /// The error after the last try failed with `last`: its own mismatch,
    /// or `what` (and why the last try failed) as one.
    fn gave_up(&self, last: Option<Error>, what: &str) -> Error {
        match last {
            Some(e @ Error::LayoutMismatch { .. }) => e,
            e => self.mismatch(format!(
                "{what} ({})",
                e.map_or_else(String::new, |e| e.to_string())
            )),
        }
    }

    fn not_yet(&self) -> Error {
        Error::NotPython {
            pid: self.proc.pid(),
            why: format!(
                "its Python {} runtime is not initialised yet",
                self.rt.raw.version
            ),
        }
    }

    /// The offset of `name` in the carried layout.
    fn field(&self, name: &str) -> Result<u64> {
        self.rt
            .raw
            .get(name)
            .ok_or_else(|| self.mismatch(format!("{name} is missing from the layout")))
    }

    fn read(&self, addr: u64) -> Result<u64> {
        self.proc.read_u64(addr)
    }

    /// `_initialized` (+0) and `initialized` (+16) become 1 at the end of
    /// the runtime's and the interpreter's initialisation: before, the
    /// memory may not even hold `_PyRuntime` yet (the loader maps the file
    /// before its data segment), so nothing is checked.
    fn initialised(&self) -> Result<bool> {
        let mut flags = [0u8; 24];
        self.proc.read(self.rt.address, &mut flags)?;
        Ok(flags.u32_at(0) == Some(1) && flags.u32_at(16) == Some(1))
    }

    /// The interpreters from `head`: each points back to the runtime; the
    /// main one is among them, with id 0.
    fn interpreters(&self, head: u64, main_interp: u64) -> Result<()> {
        let (o, rt) = (&self.rt.offsets, self.rt);
        let interp_runtime = self.field("interpreter_state.runtime")?;
        let mut seen = HashSet::new();
        let mut interp = head;
        while interp != 0 {
            if !plausible(interp) || seen.len() >= MAX_INTERPRETERS || !seen.insert(interp) {
                return Err(self.mismatch(format!(
                    "the interpreter list reaches {interp:#x}, not an interpreter"
                )));
            }
            let back = self.read(interp + interp_runtime)?;
            if back != rt.address {
                return Err(self.mismatch(format!(
                    "the interpreter at {interp:#x} names {back:#x} as its runtime, not _PyRuntime at {:#x}",
                    rt.address
                )));
            }
            if interp == main_interp && self.read(interp + o.interp_id)? != 0 {
                return Err(self.mismatch("the main interpreter's id is not 0".into()));
            }
            interp = self.read(interp + o.interp_next)?;
        }
        if !seen.contains(&main_interp) {
            return Err(self.mismatch(format!(
                "the main interpreter ({main_interp:#x}) is not in the interpreter list"
            )));
        }
        Ok(())
    }

    /// The main interpreter's threads: a consistent doubly linked list of
    /// thread states naming it, the main thread's among them. Returns
    /// where the main thread's state is.
    fn main_threads(&self, main_interp: u64) -> Result<u64> {
        let o = &self.rt.offsets;
        let main_thread = self.read(self.rt.address + self.field("runtime_state.main_thread")?)?;
        let first = self.read(main_interp + o.interp_threads_head)?;
        if first == 0 {
            return Err(self.not_yet());
        }
        let main_tstate = main_interp.wrapping_add(o.interp_threads_main);
        let prev_off = self.field("thread_state.prev")?;
        let mut buf = vec![0u8; o.tstate_size as usize];
        let (mut t, mut prev, mut n, mut found_main) = (first, 0u64, 0usize, false);
        while t != 0 {
            if !plausible(t) || n >= MAX_THREADS {
                return Err(self.mismatch(format!(
                    "the thread list reaches {t:#x}, not a thread state"
                )));
            }
            n += 1;
            self.proc.read(t, &mut buf)?;
            let at = |off: u64| buf.u64_at(off).unwrap_or(u64::MAX);
            if at(o.tstate_interp) != main_interp {
                return Err(self.mismatch(format!(
                    "the thread state at {t:#x} does not name its interpreter"
                )));
            }
            if at(prev_off) != prev {
                return Err(self.mismatch(format!(
                    "the thread state at {t:#x} has a previous link that disagrees with the list"
                )));
            }
            let native = at(o.tstate_native_thread_id);
            if native != 0 && native >= 1 << 32 {
                return Err(self.mismatch(format!(
                    "the thread state at {t:#x} has native thread id {native}"
                )));
            }
            if t == main_tstate {
                found_main = true;
                self.main_thread_state(at(o.tstate_thread_id), main_thread, native)?;
            }
            prev = t;
            t = at(o.tstate_next);
        }
        if !found_main {
            return Err(self.mismatch(
                "the main thread's state is not in the main interpreter's thread list".into(),
            ));
        }
        Ok(main_tstate)
    }

    /// The main thread's state names the runtime's main thread (`thread_id`
    /// against `main_thread`) and a live kernel thread (`native`).
    fn main_thread_state(&self, thread_id: u64, main_thread: u64, native: u64) -> Result<()> {
        if thread_id != main_thread {
            return Err(self.mismatch(
                "the main thread's state does not name the runtime's main thread".into(),
            ));
        }
        if native == 0 {
            // Not bound to its OS thread yet: start-up.
            return Err(self.not_yet());
        }
        let tids = self.proc.thread_ids()?;
        let is_task = self
            .proc
            .host_tid(native)
            .is_some_and(|h| tids.contains(&(h as i32)));
        if !is_task {
            return Err(self.mismatch(format!(
                "the main thread's native id {native} is not a thread of the process"
            )));
        }
        Ok(())
    }

    /// A whole walk of the main thread. An empty stack counts only if the
    /// thread runs no eval loop: its `cframe` is then its root `_PyCFrame`.
    fn walk_main_thread(&self, main_tstate: u64) -> Result<()> {
        let (proc, rt, o) = (self.proc, self.rt, &self.rt.offsets);
        let root_cframe = main_tstate.wrapping_add(self.field("thread_state.root_cframe")?);
        let mut unwinder = Unwinder::new(proc, proc.pid(), rt.clone(), UnwindOptions::default());
        let mut sample = Sample::default();
        let mut last = None;
        for _ in 0..WALK_TRIES {
            match unwinder.sample(&mut sample) {
                Ok(()) if sample.threads.first().is_some_and(|t| !t.frames.is_empty()) => {
                    return Ok(());
                }
                Ok(()) => {
                    let cframe = self.read(main_tstate + o.tstate_current_frame)?;
                    if cframe == root_cframe {
                        return Ok(());
                    }
                    last = Some(self.mismatch(format!(
                        "the main thread shows no frame, but its cframe ({cframe:#x}) is not its root cframe"
                    )));
                }
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        Err(self.gave_up(last, "no walk of the main thread reached its bottom frame"))
    }
}

/// Whole samples of every thread tried before a table's bytecode rule is
/// called wrong: threads that run while they are read tear some walks.
const SAMPLE_TRIES: usize = 10;

/// The most bytecode read to check that a frame's instruction starts one.
const MAX_CHECKED_BYTECODE: u64 = 64 * 1024;
/// Bytecode read at least, to see its prologue end in `RESUME`.
const PROLOGUE_BYTES: u64 = 64;

/// A debug table whose frame and code rules were taken from headers, not
/// seen working on a real interpreter (free-threaded 3.14+), is checked on
/// the process itself: a sample of every thread must succeed, and each
/// Python frame in it must sit where its code object says instructions
/// are. Its instruction pointer must lie inside the copy of the bytecode
/// its `tlbc_index` selects, on the start of an instruction (walking that
/// copy from its first unit over each instruction's inline caches), and
/// its code's location table must give it a line. A rule that reads the
/// wrong copy or the wrong field fails this on the first frame it gets
/// wrong, and the process is refused by name ([`Error::LayoutMismatch`])
/// rather than shown with wrong lines. A process with no Python frame to
/// check yet passes: nothing can be shown wrong until one appears, and
/// each frame read later still needs an instruction inside its code.
pub fn bytecode_copies(proc: &dyn Target, rt: &Runtime) -> Result<()> {
    let c = Checker { proc, rt };
    let o = &rt.offsets;
    let head = c.read(rt.address + o.runtime_interpreters_head)?;
    if head == 0 || c.read(head + o.interp_threads_head)? == 0 {
        return Err(c.not_yet());
    }
    let opts = UnwindOptions {
        all_threads: true,
        ..UnwindOptions::default()
    };
    let mut unwinder = Unwinder::new(proc, proc.pid(), rt.clone(), opts);
    unwinder.keep_frame_places();
    let mut sample = Sample::default();
    let mut last = None;
    for _ in 0..SAMPLE_TRIES {
        match unwinder.sample(&mut sample) {
            Ok(()) => match c.frames_fit(&unwinder, &sample) {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            },
            Err(e) if e.is_fatal() => return Err(e),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    Err(c.gave_up(last, "no sample of its threads could be read whole"))
}

impl Checker<'_> {
    /// Every Python frame of `sample` sits on an instruction of the
    /// bytecode it runs, and has a line.
    fn frames_fit(&self, unwinder: &Unwinder<&dyn Target>, sample: &Sample) -> Result<()> {
        let ops = crate::opcodes::table(3, self.rt.raw.version.minor as u32)
            .ok_or_else(|| self.mismatch("no instruction table for this version".into()))?;
        for (i, thread) in sample.threads.iter().enumerate() {
            for p in unwinder.frame_places(i) {
                let Some(&id) = thread.frames.get(p.index) else {
                    continue;
                };
                let frame = unwinder.frames().frame(id);
                let name = unwinder.frames().str(frame.func);
                self.on_an_instruction(p, ops)
                    .map_err(|what| self.mismatch(format!("a frame of {name}: {what}")))?;
                if frame.location.is_none() {
                    return Err(self.mismatch(format!(
                        "a frame of {name} has no line in its code's location table"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Is the frame at `p` at the start of an instruction of the bytecode
    /// copy it runs? `Err` says how not.
    fn on_an_instruction(
        &self,
        p: &crate::unwind::frames::FramePlace,
        ops: &crate::opcodes::OpTable,
    ) -> std::result::Result<(), String> {
        let o = &self.rt.offsets;
        let units = self
            .read(p.code.wrapping_add(o.ob_type + 8))
            .map_err(|e| format!("its code object cannot be read ({e})"))?;
        let off = p
            .instr_ptr
            .checked_sub(p.copy)
            .filter(|&d| d % 2 == 0 && units < 1 << 27 && d < 2 * units)
            .ok_or_else(|| {
                format!(
                    "its instruction pointer {:#x} is not inside its bytecode at {:#x} ({units} code units)",
                    p.instr_ptr, p.copy
                )
            })?;
        // Through the frame's instruction, and far enough to pass the
        // code's prologue.
        let len = (off + 2).max((2 * units).min(PROLOGUE_BYTES));
        if len > MAX_CHECKED_BYTECODE {
            return Ok(());
        }
        let mut code = vec![0u8; len as usize];
        self.proc
            .read(p.copy, &mut code)
            .map_err(|e| format!("its bytecode cannot be read ({e})"))?;
        match ops.starts_instruction(&code, (off / 2) as usize) {
            Some(false) => Err(format!(
                "its instruction pointer is {} code units into bytecode at {:#x} that does not read as its code's instructions",
                off / 2,
                p.copy
            )),
            // `Some(true)`, or instrumented code, whose caches the
            // instrumentation hides: nothing to hold against it.
            _ => Ok(()),
        }
    }
}
