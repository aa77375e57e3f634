//! The few types every stage meets: frames interned once in a
//! [`FrameTable`], samples that refer to them by id.
//!
//! Collectors and the binary writer see `FrameId`s, never strings, so a
//! sample costs a few integers however deep its stack is.

use foldhash::HashMap;

/// Index of an interned string in a [`FrameTable`].
pub type StrId = u32;
/// Index of an interned frame in a [`FrameTable`].
pub type FrameId = u32;

/// What a frame stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// A Python function, with a file and a location.
    Python,
    /// `<GC>`: the garbage collector is running.
    Gc,
    /// `<native>`: a boundary where C code called back into Python, or
    /// another frame a profile names without a file.
    Native,
    /// `<truncated>`: the stack went on past [`MAX_DEPTH`] frames.
    Truncated,
    /// A frame whose memory or code object could not be read.
    Unreadable,
    /// A C, C++ or Rust function from a thread's native stack
    /// (`--native-frames`): the function's name; its source file and line
    /// (columns -1) when the module has debug information, else its
    /// module's file name as the file and no location.
    NativeFunction,
    /// `<task>`: an asyncio task in an async-aware stack, named by the
    /// task's name (file `<task>`, no location, as the reference shows it).
    Task,
}

impl FrameKind {
    /// A frame the profiler makes up (`<GC>`, `<native>`, `<truncated>`):
    /// it has a name, no file and no location.
    pub fn is_synthetic(self) -> bool {
        matches!(
            self,
            FrameKind::Gc | FrameKind::Native | FrameKind::Truncated
        )
    }

    /// The kind of a frame a profile names without a file: `<GC>`,
    /// `<truncated>`, else a `<native>`-like marker.
    pub fn synthetic_named(func: &str) -> FrameKind {
        match func {
            "<GC>" => FrameKind::Gc,
            "<truncated>" => FrameKind::Truncated,
            _ => FrameKind::Native,
        }
    }
}

/// The file name the formats that give every frame one use for a frame
/// without a file (the reference's `~`). Synthetic frames carry it as
/// their file string, so the binary format writes it and a profile read
/// back has it; [`FrameTable::intern`] turns it back into a synthetic
/// kind. Nothing else compares against it: code asks [`Frame::file`].
pub const NO_FILE: &str = "~";

/// Where in its source an instruction is: lines 1-based, columns 0-based,
/// a column -1 when the location table gives the line only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    pub line: i32,
    pub end_line: i32,
    pub col: i32,
    pub end_col: i32,
}

impl Location {
    /// A Python instruction its code's location table does not place
    /// (3.13+'s `__init__` shim): line -1, as the reference's live outputs
    /// show it. Files store it as they store no location.
    pub const UNPLACED: Location = Location {
        line: -1,
        end_line: -1,
        col: -1,
        end_col: -1,
    };
}

/// One frame: where in which function. `location` is `None` when there is
/// none to give: synthetic frames (`<GC>`, `<native>`, `<truncated>`) and
/// unreadable frames. Each file format turns `None` into its own sentinel
/// at its boundary.
///
/// `opcode` is the instruction the frame was at (the byte in
/// `co_code_adaptive`, specialised forms included; see [`crate::opcodes`]),
/// only with `--opcodes` and only when it could be read; `None` otherwise,
/// so without the flag frames are keyed exactly as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    pub kind: FrameKind,
    pub file: StrId,
    pub func: StrId,
    pub location: Option<Location>,
    pub opcode: Option<u8>,
}

impl Frame {
    /// The frame's file, `None` for a synthetic frame (which has none).
    pub fn file(&self) -> Option<StrId> {
        (!self.kind.is_synthetic()).then_some(self.file)
    }

    /// The line the reference's text outputs show: 0 without a location
    /// (its `location=None`).
    pub fn line(&self) -> i32 {
        self.location.map_or(0, |l| l.line)
    }
}

/// Interned frames and strings for one profile.
#[derive(Debug, Default, Clone)]
pub struct FrameTable {
    frames: Vec<Frame>,
    frame_index: HashMap<Frame, FrameId>,
    strings: Vec<Box<str>>,
    string_index: HashMap<Box<str>, StrId>,
}

impl FrameTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of string `s` if it is interned already.
    pub fn find_str(&self, s: &str) -> Option<StrId> {
        self.string_index.get(s).copied()
    }

    pub fn intern_str(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.string_index.get(s) {
            return id;
        }
        let id = self.strings.len() as StrId;
        self.strings.push(s.into());
        self.string_index.insert(s.into(), id);
        id
    }

    /// The id of frame `f`, interned on first sight. A frame made with
    /// kind `Python` but file [`NO_FILE`] and no location (as a profile
    /// read from a file gives it) is synthetic: it gets its kind here, so
    /// no stage after this one has to recognise it by its file.
    pub fn intern(&mut self, mut f: Frame) -> FrameId {
        if f.kind == FrameKind::Python
            && f.location.is_none()
            && self
                .strings
                .get(f.file as usize)
                .is_some_and(|s| &**s == NO_FILE)
        {
            f.kind = self
                .strings
                .get(f.func as usize)
                .map_or(FrameKind::Native, |name| FrameKind::synthetic_named(name));
        }
        if let Some(&id) = self.frame_index.get(&f) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.frames.push(f);
        self.frame_index.insert(f, id);
        id
    }

    /// A synthetic frame (`<GC>`, `<native>`, `<truncated>`); its file
    /// string is [`NO_FILE`], for the formats that write one.
    pub fn synthetic(&mut self, kind: FrameKind, name: &str) -> FrameId {
        let file = self.intern_str(NO_FILE);
        let func = self.intern_str(name);
        self.intern(Frame {
            kind,
            file,
            func,
            location: None,
            opcode: None,
        })
    }

    pub fn frame(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }

    pub fn str(&self, id: StrId) -> &str {
        &self.strings[id as usize]
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn strings(&self) -> &[Box<str>] {
        &self.strings
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }
}

/// The pool a thread named `name` belongs to: its name with every run of
/// digits made `*` (`Thread-5012 (handle)` → `Thread-* (handle)`,
/// `ThreadPoolExecutor-3_7` → `ThreadPoolExecutor-*_*`). A long profile
/// of a program that starts threads all the time counts its later
/// threads by pool, so that it keeps a bounded number of them.
pub fn thread_pool_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('*');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// Thread status flags, bit for bit the reference's (they are stored
/// verbatim in binary profiles).
pub mod status {
    pub const HAS_GIL: u32 = 1;
    pub const ON_CPU: u32 = 2;
    pub const UNKNOWN: u32 = 4;
    pub const GIL_REQUESTED: u32 = 8;
    pub const HAS_EXCEPTION: u32 = 16;
    pub const MAIN_THREAD: u32 = 32;
}

/// The stack of one thread at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadSample {
    /// The OS (native) thread id.
    pub tid: u64,
    pub interpreter_id: i64,
    /// `status::*` bits.
    pub status: u32,
    /// Leaf first.
    pub frames: Vec<FrameId>,
    /// The thread's name (`threading`'s, else the kernel's `comm`), interned
    /// in the sample's `FrameTable`; `None` when it could not be read.
    pub name: Option<StrId>,
}

/// Every sampled thread at one instant.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// When, in microseconds since the Unix epoch: the sampling loop's
    /// wall-clock start plus its monotonic clock, so times only grow, also
    /// across the processes of one profile, and a recording replays with
    /// the times it was taken at.
    pub timestamp_us: u64,
    pub threads: Vec<ThreadSample>,
    /// The process the threads belong to, in a profile of several processes
    /// (`--subprocesses --merge`); `None` when a profile has one process.
    pub pid: Option<u32>,
}

/// The most frames a sample's stack holds (a deeper one keeps its innermost
/// frames and ends in `<truncated>`), and the most a recording may hold.
/// CPython's default recursion limit is 1000; this leaves room for raised
/// limits while bounding a corrupt (cyclic) chain.
pub const MAX_DEPTH: usize = 16 * 1024;

/// The wall clock, in microseconds since the Unix epoch.
pub fn epoch_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What is being measured (`--mode`); the numbers are the reference's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Wall,
    Cpu,
    Gil,
    /// Everything, nothing skipped (dump, gecko).
    All,
    Exception,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Wall => "wall",
            Mode::Cpu => "cpu",
            Mode::Gil => "gil",
            Mode::All => "all",
            Mode::Exception => "exception",
        }
    }

    /// The reference's numeric code (binary files store it).
    pub fn code(self) -> u32 {
        match self {
            Mode::Wall => 0,
            Mode::Cpu => 1,
            Mode::Gil => 2,
            Mode::All => 3,
            Mode::Exception => 4,
        }
    }
}

/// What the sampler measured about itself.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    /// The requested interval between samples.
    pub interval_us: u64,
    /// Wall time from the first sample to the end.
    pub duration_s: f64,
    /// Samples attempted, including failed ones.
    pub attempts: u64,
    /// Samples that failed (torn or unreadable stacks).
    pub failures: u64,
    /// Samples taken while the runtime finalised (interpreter shutdown:
    /// its exit-time garbage collection, module teardown), counted among
    /// the attempts but left out of the profile.
    pub shutdown_samples: u64,
    pub mode: Mode,
    /// Sampling ended on Ctrl-C/SIGTERM rather than by time or exit.
    pub interrupted: bool,
    /// A merged profile of several processes (`--merge`): how many, and
    /// the sum of the time each was sampled (0 for one process). Its rate
    /// is per process: samples over process-seconds.
    pub processes: u32,
    pub process_seconds: f64,
    /// Thread samples counted under their pool, not their own thread
    /// (threads past the first 1,024: see `sample::pools`).
    pub pooled_thread_samples: u64,
    /// 3.15's frame cache, when on (`--frame-cache`): what it did.
    pub frame_cache: crate::unwind::anchor::FrameCache,
}

impl RunStats {
    /// The time the samples were taken over: the run's, or for a merged
    /// profile the sum of each process's.
    pub fn sampled_seconds(&self) -> f64 {
        if self.processes > 1 {
            self.process_seconds
        } else {
            self.duration_s
        }
    }

    /// Samples per second (per process, for a merged profile).
    pub fn rate(&self) -> f64 {
        let t = self.sampled_seconds();
        if t > 0.0 {
            self.attempts as f64 / t
        } else {
            0.0
        }
    }

    /// Samples expected at the requested rate over the run (over each
    /// process's time, for a merged profile).
    pub fn expected(&self) -> u64 {
        if self.interval_us == 0 {
            return 0;
        }
        (self.sampled_seconds() * 1e6 / self.interval_us as f64) as u64
    }

    /// Failed samples as a percentage of attempts.
    pub fn error_rate_pct(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            self.failures as f64 * 100.0 / self.attempts as f64
        }
    }

    /// Samples not taken (the profiler fell behind), as a percentage of the
    /// expected count.
    pub fn missed_pct(&self) -> f64 {
        let e = self.expected();
        if e == 0 || self.attempts >= e {
            0.0
        } else {
            (e - self.attempts) as f64 * 100.0 / e as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_back(t: &mut FrameTable, file: &str, func: &str, location: Option<Location>) -> Frame {
        let (file, func) = (t.intern_str(file), t.intern_str(func));
        let id = t.intern(Frame {
            kind: FrameKind::Python,
            file,
            func,
            location,
            opcode: None,
        });
        *t.frame(id)
    }

    #[test]
    fn a_frame_read_back_without_file_or_location_is_synthetic() {
        let mut t = FrameTable::new();
        let truncated = t.synthetic(FrameKind::Truncated, "<truncated>");
        let back = read_back(&mut t, NO_FILE, "<truncated>", None);
        assert_eq!(back.kind, FrameKind::Truncated);
        assert_eq!(t.intern(back), truncated, "one frame, however it was made");
        assert_eq!(read_back(&mut t, NO_FILE, "<GC>", None).kind, FrameKind::Gc);
        let other = read_back(&mut t, NO_FILE, "<idle>", None);
        assert_eq!((other.kind, other.file()), (FrameKind::Native, None));
    }

    #[test]
    fn a_python_frame_keeps_its_file() {
        let mut t = FrameTable::new();
        let at = Location {
            line: 3,
            end_line: 3,
            col: 0,
            end_col: 1,
        };
        let f = read_back(&mut t, NO_FILE, "f", Some(at));
        assert_eq!((f.kind, f.file()), (FrameKind::Python, Some(f.file)));
        let g = read_back(&mut t, "/app/a.py", "g", None);
        assert_eq!((g.kind, g.file()), (FrameKind::Python, Some(g.file)));
    }
}
