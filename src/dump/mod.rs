//! `tachyon dump`: one snapshot of every selected thread, printed like a
//! traceback (root first, most recent call last), in the reference's words,
//! with each frame's source line read from the target's own filesystem.
//! Each header names its thread as `threading` knows it, quoted after the
//! thread id, when the name could be read (the reference shows no names).

pub mod json;
pub mod values;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::model::{FrameKind, FrameTable, NO_FILE, ThreadSample, status};
use crate::opcodes::OpTable;
use crate::unwind::locals::LocalKind;

/// The largest source file read.
const MAX_SOURCE_BYTES: u64 = 16 << 20;

/// Reads source lines as the target sees its files: through
/// `/proc/PID/root` (containers, chroots), relative names through
/// `/proc/PID/cwd`; or, for a recording whose process is gone, from this
/// file system ([`SourceReader::local`]), or below a directory holding
/// another machine's files ([`SourceReader::under`], a core file's
/// `--sysroot`). Each file is read once.
pub struct SourceReader {
    pid: Option<i32>,
    root: Option<PathBuf>,
    files: HashMap<String, Option<Vec<String>>>,
}

impl SourceReader {
    pub fn new(pid: i32) -> Self {
        SourceReader {
            pid: Some(pid),
            root: None,
            files: HashMap::new(),
        }
    }

    /// Files as this process sees them (replay of a recording).
    pub fn local() -> Self {
        SourceReader {
            pid: None,
            root: None,
            files: HashMap::new(),
        }
    }

    /// Absolute file names below `root` (this file system when `None`).
    pub fn under(root: Option<PathBuf>) -> Self {
        SourceReader {
            root,
            ..SourceReader::local()
        }
    }

    /// Read files not yet read through process `pid` from now on.
    pub fn follow(&mut self, pid: i32) {
        self.pid = Some(pid);
    }

    fn path_for(&self, filename: &str) -> Option<PathBuf> {
        // `~` as the reference reads it: no file (it reads no source for it).
        if filename.starts_with('<') || filename.is_empty() || filename == NO_FILE {
            return None;
        }
        Some(match self.pid {
            None => match &self.root {
                Some(root) if filename.starts_with('/') => root.join(&filename[1..]),
                _ => PathBuf::from(filename),
            },
            Some(pid) if filename.starts_with('/') => {
                PathBuf::from(format!("/proc/{pid}/root{filename}"))
            }
            Some(pid) => PathBuf::from(format!("/proc/{pid}/cwd/{filename}")),
        })
    }

    /// Every line of `filename`, without line breaks; `None` when it cannot
    /// be read (or is not a regular file of at most 16 MiB: no source file
    /// is that big). The first call reads the file, later ones reuse it.
    pub fn file(&mut self, filename: &str) -> Option<&[String]> {
        if !self.files.contains_key(filename) {
            let text = self
                .path_for(filename)
                .filter(|p| {
                    p.metadata()
                        .is_ok_and(|m| m.is_file() && m.len() <= MAX_SOURCE_BYTES)
                })
                .and_then(|p| std::fs::read(p).ok())
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .lines()
                        .map(str::to_owned)
                        .collect()
                });
            self.files.insert(filename.to_owned(), text);
        }
        self.files.get(filename)?.as_deref()
    }

    /// Line `line` (1-based) of `filename`, without its line break.
    pub fn line(&mut self, filename: &str, line: i32) -> Option<&str> {
        if line <= 0 {
            return None;
        }
        self.file(filename)?
            .get(line as usize - 1)
            .map(String::as_str)
    }
}

/// The reference's words for a thread's status bits.
pub fn status_labels(st: u32) -> Vec<&'static str> {
    let mut labels = Vec::new();
    for (flag, label) in [
        (status::MAIN_THREAD, "main thread"),
        (status::HAS_GIL, "has GIL"),
        (status::ON_CPU, "on CPU"),
        (status::GIL_REQUESTED, "waiting for GIL"),
        (status::HAS_EXCEPTION, "has exception"),
    ] {
        if st & flag != 0 {
            labels.push(label);
        }
    }
    let busy = status::HAS_GIL | status::GIL_REQUESTED | status::HAS_EXCEPTION;
    if st & busy == 0 && st & (status::UNKNOWN | status::ON_CPU) == 0 {
        labels.push("idle");
    }
    labels
}

/// A file name as the user would type it from here: relative to the
/// current directory when it lies below it, else as recorded.
pub fn display_filename(filename: &str, cwd: Option<&Path>) -> String {
    if let (Some(cwd), true) = (cwd, filename.starts_with('/'))
        && let Ok(rel) = Path::new(filename).strip_prefix(cwd)
        && !rel.as_os_str().is_empty()
    {
        return rel.to_string_lossy().into_owned();
    }
    filename.to_owned()
}

pub use crate::unwind::locals::{FrameLocals, ThreadLocals};
pub use crate::unwind::locks::{LockKind, Waited};

/// What one dump read: the process, its stacks, and what goes with them.
pub struct Dumped<'a> {
    pub pid: i32,
    /// The target's Python version (`3.13.15t` for a free-threaded build).
    pub python: String,
    /// A free-threaded build: whether its GIL was enabled at run time
    /// (`None` inside: the flag could not be read).
    pub free_threaded_gil: Option<Option<bool>>,
    /// Frames leaf first, as sampled.
    pub threads: &'a [ThreadSample],
    pub table: &'a FrameTable,
    /// Async-aware: each stack's leaf task's address.
    pub leaves: Option<&'a [u64]>,
    /// With `--locals`: per stack, its frames' locals.
    pub locals: Option<&'a [ThreadLocals]>,
    /// With `--locals`: per stack, the lock its thread waits for.
    pub waits: Option<&'a [Option<Waited>]>,
}

impl Dumped<'_> {
    fn locals_of(&self, thread: usize, frame: usize) -> Option<&FrameLocals> {
        self.locals?.get(thread)?.get(&frame)
    }

    /// The lock stack `thread`'s thread waits for, if known.
    pub fn wait_of(&self, thread: usize) -> Option<&Waited> {
        self.waits?.get(thread)?.as_ref()
    }

    /// What a thread's wait says, in words: `Waiting for <_thread.RLock
    /// at 0x...>, held by thread 123 "worker"`.
    pub fn wait_line(&self, w: &Waited) -> String {
        let lock = format!("<{} at {:#x}>", w.lock.kind.type_name(), w.lock.addr);
        let holder = match (w.lock.kind, w.lock.locked, w.owner, w.lock.owner_ident) {
            (_, false, _, _) => ", not held (about to be taken)".to_owned(),
            (LockKind::Lock, true, _, _) => ", held (a Lock does not record by whom)".to_owned(),
            (LockKind::RLock, true, Some(i), _) => {
                let t = &self.threads[i];
                match t.name {
                    Some(name) => format!(", held by thread {} {:?}", t.tid, self.table.str(name)),
                    None => format!(", held by thread {}", t.tid),
                }
            }
            (LockKind::RLock, true, None, Some(ident)) => {
                format!(", held by a thread not shown (ident {ident}; -a shows every thread)")
            }
            (LockKind::RLock, true, None, None) => ", held".to_owned(),
        };
        format!("Waiting for {lock}{holder}")
    }
}

/// The dump as text, as the reference prints it: per thread, or (async-
/// aware) per leaf task. `ops` names the frames' opcodes (`--opcodes`),
/// like the reference: `  opcode=NAME (BASE)` after the frame's line.
pub fn format_text(d: &Dumped, src: &mut SourceReader, ops: Option<&OpTable>) -> String {
    let text = match d.leaves {
        Some(leaves) => format_task_dump(d, leaves, src, ops),
        None => format_dump(d, src, ops),
    };
    match d.free_threaded_gil {
        // The threads' GIL states mean nothing without a GIL: say so first.
        Some(gil) => format!("{}\n{text}", free_threaded_line(&d.python, gil)),
        None => text,
    }
}

/// The line that opens the dump of a free-threaded build (and follows a
/// profile's summary).
/// `gil`: whether its GIL was enabled at run time; `None` when that could
/// not be read (the process gone), which is said rather than guessed.
pub fn free_threaded_line(python: &str, gil: Option<bool>) -> String {
    match gil {
        Some(true) => format!("Free-threaded Python {python}, its GIL enabled at run time"),
        Some(false) => {
            format!("Free-threaded Python {python}: no GIL, so no thread holds or waits for one")
        }
        None => format!("Free-threaded Python {python} (whether its GIL is on could not be read)"),
    }
}

fn format_dump(d: &Dumped, src: &mut SourceReader, ops: Option<&OpTable>) -> String {
    let (pid, threads, table) = (d.pid, d.threads, d.table);
    if threads.is_empty() {
        return format!("No Python stacks found for PID {pid}\n");
    }
    let cwd = std::env::current_dir().ok();
    let multi_interp = threads
        .iter()
        .any(|t| t.interpreter_id != threads[0].interpreter_id);
    let mut out = String::new();
    for (i, t) in threads.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let subject = subject(pid, i, t, table);
        let mut details: Vec<String> = Vec::new();
        if multi_interp {
            details.push(format!("interpreter {}", t.interpreter_id));
        }
        let labels = status_labels(t.status);
        if !labels.is_empty() {
            details.push(labels.join(", "));
        }
        details.push("most recent call last".into());
        let _ = writeln!(out, "{subject} ({}):", details.join("; "));
        if t.frames.is_empty() {
            out.push_str("No Python frames\n");
            continue;
        }
        write_frames(&mut out, d, i, cwd.as_deref(), src, ops);
    }
    out
}

/// The start of section `i`'s heading: `Stack dump[ for PID N], thread
/// TID ["name"]`.
fn subject(pid: i32, i: usize, t: &ThreadSample, table: &FrameTable) -> String {
    let mut subject = String::from("Stack dump");
    if i == 0 {
        let _ = write!(subject, " for PID {pid}");
    }
    let _ = write!(subject, ", thread {}", t.tid);
    if let Some(name) = t.name {
        // Quoted and escaped: a name may hold anything.
        let _ = write!(subject, " {:?}", table.str(name));
    }
    subject
}

/// Stack `i`'s frames, root first, with their source lines (and locals).
fn write_frames(
    out: &mut String,
    d: &Dumped,
    i: usize,
    cwd: Option<&Path>,
    src: &mut SourceReader,
    ops: Option<&OpTable>,
) {
    let (t, table) = (&d.threads[i], d.table);
    for (index, &id) in t.frames.iter().enumerate().rev() {
        let f = table.frame(id);
        let name = table.str(f.func);
        let file = table.str(f.file);
        if f.kind.is_synthetic() {
            let _ = writeln!(out, "  {name}");
            continue;
        }
        if f.kind == FrameKind::NativeFunction {
            match f.location {
                Some(l) => writeln!(out, "  [native] {name} ({file}:{})", l.line),
                None => writeln!(out, "  [native] {name} ({file})"),
            }
            .ok();
            continue;
        }
        let shown = display_filename(file, cwd);
        let line = f.line();
        if line > 0 {
            let _ = write!(out, "  File \"{shown}\", line {line}, in {name}");
        } else {
            let _ = write!(out, "  File \"{shown}\", in {name}");
        }
        if let (Some(op), Some(t)) = (f.opcode, ops) {
            let _ = write!(out, "  opcode={}", t.format(op));
        }
        out.push('\n');
        if f.kind == FrameKind::Python
            && let Some(line) = src.line(file, line)
            && !line.trim().is_empty()
        {
            // Like the reference (and tracebacks): strip the indentation only.
            let _ = writeln!(out, "    {}", line.trim_start());
        }
        if let Some(w) = d.wait_of(i).filter(|w| w.frame == index) {
            let _ = writeln!(out, "      {}", d.wait_line(w));
        }
        if let Some(locals) = d.locals_of(i, index) {
            write_locals(out, locals);
        }
    }
}

/// A frame's arguments, then its other locals, as py-spy's `--locals`
/// sorts them, each `name: value`.
fn write_locals(out: &mut String, locals: &FrameLocals) {
    let locals = match locals {
        Ok(l) => l,
        Err(why) => {
            let _ = writeln!(out, "      Locals: <unreadable: {why}>");
            return;
        }
    };
    for (kind, title) in [
        (LocalKind::Argument, "Arguments"),
        (LocalKind::Local, "Locals"),
    ] {
        let mut these = locals.iter().filter(|l| l.kind == kind).peekable();
        if these.peek().is_none() {
            continue;
        }
        let _ = writeln!(out, "      {title}:");
        for l in these {
            let _ = writeln!(out, "        {}", values::local_line(l));
        }
    }
}

/// An async-aware snapshot: one section per leaf task (`leaves[i]` is
/// `threads[i]`'s leaf task's address), its stack running up through the
/// tasks awaiting it, as the reference's dump shows them.
fn format_task_dump(
    d: &Dumped,
    leaves: &[u64],
    src: &mut SourceReader,
    ops: Option<&OpTable>,
) -> String {
    let (pid, threads, table) = (d.pid, d.threads, d.table);
    if threads.is_empty() {
        return format!("No Python stacks found for PID {pid}\n");
    }
    let cwd = std::env::current_dir().ok();
    let mut out = String::new();
    for (i, (t, leaf)) in threads.iter().zip(leaves).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let subject = subject(pid, i, t, table);
        let _ = writeln!(out, "{subject} (task {leaf}; most recent call last):");
        write_frames(&mut out, d, i, cwd.as_deref(), src, ops);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_threaded_line_never_guesses_the_gil() {
        let on = free_threaded_line("3.13.15t", Some(true));
        let off = free_threaded_line("3.13.15t", Some(false));
        let unknown = free_threaded_line("3.13.15t", None);
        assert!(on.contains("enabled at run time") && !on.contains("no GIL"));
        assert!(off.contains("no GIL"));
        assert!(!unknown.contains("no GIL") && !unknown.contains("enabled"));
        assert!(unknown.contains("could not be read"));
    }

    #[test]
    fn labels_follow_the_reference() {
        assert_eq!(
            status_labels(status::MAIN_THREAD),
            vec!["main thread", "idle"]
        );
        assert_eq!(
            status_labels(status::MAIN_THREAD | status::HAS_GIL | status::ON_CPU),
            vec!["main thread", "has GIL", "on CPU"]
        );
        assert_eq!(status_labels(status::UNKNOWN), Vec::<&str>::new());
        assert_eq!(
            status_labels(status::GIL_REQUESTED),
            vec!["waiting for GIL"]
        );
    }

    #[test]
    fn filenames_below_cwd_are_shown_relative() {
        let cwd = Path::new("/home/u/proj");
        assert_eq!(display_filename("/home/u/proj/a/b.py", Some(cwd)), "a/b.py");
        assert_eq!(
            display_filename("/usr/lib/x.py", Some(cwd)),
            "/usr/lib/x.py"
        );
        assert_eq!(display_filename("<string>", Some(cwd)), "<string>");
    }
}
