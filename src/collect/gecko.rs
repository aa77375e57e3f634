//! Firefox Profiler profiles (`--gecko`), the reference's `GeckoCollector`
//! output: the *processed* profile format (`meta.version` 32,
//! `preprocessedProfileVersion` 57; the profiler upgrades it on load), one
//! thread per OS thread, each with its own stack, frame, function and
//! resource tables and a global string array, plus interval markers for
//! status changes: "Has GIL"/"No GIL", "On CPU"/"Off CPU", "Python Code"/
//! "Native Code", "Waiting for GIL", "Has Exception"/"No Exception" and
//! "GC Collecting".
//!
//! Tables, their order and the order strings are interned in are the
//! reference's, so for the same samples the JSON is the same apart from
//! `meta.startTime` (here the first sample's time, in ms since the epoch;
//! the reference's is its own monotonic clock), the machine fields
//! (`abi`, `oscpu`, `platform`, CPU counts) and `pid`, which like the
//! reference's is the profiler's own unless [`GeckoCollector::with_pid`]
//! says otherwise; and a track's `name`, which is the thread's name
//! (`MainThread`, `worker-3`) when the samples carry one, where the
//! reference always writes `Thread-<tid>`. In a merged profile of several
//! processes (`--subprocesses --merge`) each thread has its own process's
//! `pid` and `processName` (`python3 app.py (pid 42)`): a process track
//! each in the Firefox Profiler. Times are milliseconds from the first sample, as in the
//! reference's replay; markers start and end at sample times, and those still
//! open at the end are closed at the last sample (so one opened at the last
//! sample has length 0, as in the reference). The status bits must all be
//! real (the reference forces mode `all` for gecko), and no sample is
//! skipped as idle. With opcodes ([`GeckoCollector::with_opcodes`]), each
//! thread also gets the reference's "Opcode" interval markers: one span per
//! run of samples whose leaf frame stays at the same instruction (opcode,
//! line, column, function, file), named `NAME (BASE)`, with the reference's
//! `markerSchema` entry.
//!
//! Memory: a sample costs 12 bytes (stack index and time) per thread; stacks
//! are interned per thread as a prefix tree (`(frame, prefix)` → stack), so
//! each distinct stack costs one node per frame not shared with another.
//! The file is serialized straight from these columns, without a JSON tree,
//! to a temporary file renamed over the output at the end.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::iter::repeat_n;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use super::pstats::basename;
use super::{Collector, Output, RunStats};
use crate::error::{Error, Result};
use crate::model::{FrameId, FrameKind, FrameTable, Sample, StrId, status};
use crate::opcodes::OpTable;

const FORMAT_VERSION: u32 = 32;
const PREPROCESSED_VERSION: u32 = 57;

/// The reference's categories, in its order (markers name them by index).
const CATEGORIES: [(&str, &str); 9] = [
    ("Other", "grey"),
    ("Python", "yellow"),
    ("Native", "blue"),
    ("GC", "orange"),
    ("GIL", "green"),
    ("CPU", "purple"),
    ("Code Type", "red"),
    ("Opcodes", "magenta"),
    ("Exception", "lightblue"),
];
const CAT_PYTHON: u8 = 1;
const CAT_NATIVE: u8 = 2;
const CAT_GC: u8 = 3;
const CAT_GIL: u8 = 4;
const CAT_CPU: u8 = 5;
const CAT_CODE_TYPE: u8 = 6;
const CAT_OPCODES: u8 = 7;
const CAT_EXCEPTION: u8 = 8;

/// The interval markers: (name, category). Indices are the `Thread::open`
/// slots, and their order is the order open markers are closed at the end.
const MARKERS: [(&str, u8); 10] = [
    ("Has GIL", CAT_GIL),
    ("No GIL", CAT_GIL),
    ("On CPU", CAT_CPU),
    ("Off CPU", CAT_CPU),
    ("Python Code", CAT_CODE_TYPE),
    ("Native Code", CAT_CODE_TYPE),
    ("Waiting for GIL", CAT_GIL),
    ("GC Collecting", CAT_GC),
    ("Has Exception", CAT_EXCEPTION),
    ("No Exception", CAT_EXCEPTION),
];
const HAS_GIL: usize = 0;
const NO_GIL: usize = 1;
const ON_CPU: usize = 2;
const OFF_CPU: usize = 3;
const PYTHON_CODE: usize = 4;
const NATIVE_CODE: usize = 5;
const GIL_WAIT: usize = 6;
const GC: usize = 7;
const HAS_EXCEPTION: usize = 8;
const NO_EXCEPTION: usize = 9;

/// No prefix: a root stack.
const ROOT: u32 = u32::MAX;

/// Microseconds from the first sample as the reference's milliseconds.
fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// One interval marker; times in microseconds from the first sample.
#[derive(Debug, Clone)]
struct Marker {
    kind: u8,
    /// An "Opcode" marker: the instruction, not a `MARKERS` state.
    op: Option<OpSpan>,
    /// Index of the name in the string array.
    name: u32,
    start: u64,
    end: u64,
}

/// Where a thread's leaf frame is, for opcode markers: opcode, line,
/// column, function, file.
type OpState = (Option<u8>, Option<i32>, i32, StrId, StrId);

/// An opcode marker's data, as the reference writes it.
#[derive(Debug, Clone)]
struct OpSpan {
    opcode: u8,
    opname: Box<str>,
    base_opname: Box<str>,
    is_specialized: bool,
    line: Option<i32>,
    column: i32,
    function: Box<str>,
}

/// One thread's tables and state.
#[derive(Default)]
struct Thread {
    tid: u64,
    /// Its process, in a merged profile (`--subprocesses --merge`): the
    /// Firefox Profiler groups threads into a track per process.
    pid: Option<u32>,
    is_main: bool,
    /// The thread's latest name (`threading`'s, else the kernel's): the
    /// track's name; without one the reference's `Thread-<tid>`.
    name_id: Option<StrId>,
    name: Option<String>,
    /// Seen before: state changes from now on make markers.
    initialized: bool,
    /// When each `MARKERS` state began, while it lasts.
    open: [Option<u64>; 10],

    // stackTable: a prefix tree.
    stack_frame: Vec<u32>,
    stack_prefix: Vec<u32>,
    stack_category: Vec<u8>,
    stack_index: HashMap<(u32, u32), u32>,

    // frameTable, keyed (func, line, column) as the reference's.
    frame_func: Vec<u32>,
    frame_line: Vec<Option<i32>>,
    frame_column: Vec<Option<i32>>,
    frame_index: HashMap<(u32, Option<i32>, Option<i32>), u32>,
    /// Model frame → frame index: the per-sample fast path.
    by_model_frame: HashMap<FrameId, u32>,

    // funcTable, keyed (file, function).
    func_name: Vec<u32>,
    func_is_js: Vec<bool>,
    func_resource: Vec<u32>,
    func_file: Vec<Option<u32>>,
    func_line: Vec<Option<i32>>,
    func_index: HashMap<(StrId, StrId), u32>,

    // resourceTable, keyed by file.
    resource_name: Vec<u32>,
    resource_index: HashMap<StrId, u32>,

    // samples: compact columns.
    sample_stack: Vec<u32>,
    sample_time: Vec<u64>,

    markers: Vec<Marker>,
    /// Opcodes: where the leaf frame has been since when.
    op_state: Option<(OpState, u64)>,

    /// The last stack sampled, leaf first, and its index: threads often
    /// sit in one place.
    last_frames: Vec<FrameId>,
    last_stack: u32,
}

/// The reference's "Python" test: not `<...>`, or `<stdin>`/`<string>`.
fn is_python(file: &str) -> bool {
    !file.starts_with('<') || file == "<stdin>" || file == "<string>"
}

/// Writes a Firefox Profiler profile; see the module documentation.
pub struct GeckoCollector {
    output: Output,
    pid: String,
    machine: Machine,
    threads: Vec<Thread>,
    thread_index: HashMap<u64, usize>,
    strings: Vec<Box<str>>,
    string_index: HashMap<Box<str>, u32>,
    /// The first sample's timestamp: time 0.
    base_us: Option<u64>,
    /// Wall clock at the first sample (until then, at creation), ms since
    /// the epoch.
    start_time_ms: f64,
    /// The last sample's time, from `base_us`.
    last_us: u64,
    sample_count: u64,
    /// Distinct sample times: the samples, however their threads came.
    instants: std::collections::HashSet<u64>,
    /// Opcode markers, named with this table.
    opcodes: Option<&'static OpTable>,
    /// The processes of a merged profile, for their tracks' names.
    processes: super::merge::Processes,
}

impl GeckoCollector {
    pub fn new(output: Output) -> Self {
        let mut c = GeckoCollector {
            output,
            pid: std::process::id().to_string(),
            machine: Machine::this(),
            threads: Vec::new(),
            thread_index: HashMap::new(),
            strings: Vec::new(),
            string_index: HashMap::new(),
            base_us: None,
            start_time_ms: epoch_ms(),
            last_us: 0,
            sample_count: 0,
            instants: std::collections::HashSet::new(),
            opcodes: None,
            processes: Default::default(),
        };
        c.intern("(root)");
        c
    }

    /// The process id the threads are filed under (by default, like the
    /// reference, the profiler's own).
    pub fn with_pid(mut self, pid: u32) -> Self {
        self.pid = pid.to_string();
        self
    }

    /// Write the reference's "Opcode" markers, naming the frames' opcodes
    /// with `table` (the target's version).
    pub fn with_opcodes(mut self, table: Option<&'static OpTable>) -> Self {
        self.opcodes = table;
        self
    }

    /// Opcodes: the leaf of thread `th` is at `state` now; a change ends
    /// the span of the previous instruction.
    fn track_opcode(&mut self, th: usize, state: OpState, now: u64, frames: &FrameTable) {
        let prev = match &self.threads[th].op_state {
            Some((s, _)) if *s == state => return,
            prev => *prev,
        };
        self.threads[th].op_state = Some((state, now));
        if let Some((s, start)) = prev {
            self.add_opcode_marker(th, s, start, now, frames);
        }
    }

    fn add_opcode_marker(
        &mut self,
        th: usize,
        (opcode, line, column, func, _): OpState,
        start: u64,
        end: u64,
        frames: &FrameTable,
    ) {
        let (Some(opcode), Some(table)) = (opcode, self.opcodes) else {
            return;
        };
        let opname = table.format(opcode);
        let name = self.intern(&opname);
        self.threads[th].markers.push(Marker {
            kind: 0,
            op: Some(OpSpan {
                opcode,
                opname: opname.into(),
                base_opname: table.name(table.base[opcode as usize]).into(),
                is_specialized: table.base_of(opcode).is_some(),
                line,
                column,
                function: frames.str(func).into(),
            }),
            name,
            start,
            end,
        });
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.into());
        self.string_index.insert(s.into(), i);
        i
    }

    fn add_marker(&mut self, th: usize, kind: usize, start: u64, end: u64) {
        let name = self.intern(MARKERS[kind].0);
        self.threads[th].markers.push(Marker {
            kind: kind as u8,
            op: None,
            name,
            start,
            end,
        });
    }

    /// A two-state flag (`active` while `cond`): on its first sight a
    /// thread only records its state; afterwards a change ends the other
    /// state's marker.
    fn track(&mut self, th: usize, cond: bool, active: usize, inactive: usize, now: u64) {
        let (on, off) = if cond {
            (active, inactive)
        } else {
            (inactive, active)
        };
        let t = &mut self.threads[th];
        if !t.initialized {
            t.open[on] = Some(now);
            return;
        }
        t.open[on].get_or_insert(now);
        if let Some(start) = t.open[off].take() {
            self.add_marker(th, off, start, now);
        }
    }

    /// Ends the `kind` state if it is on.
    fn close(&mut self, th: usize, kind: usize, now: u64) {
        if let Some(start) = self.threads[th].open[kind].take() {
            self.add_marker(th, kind, start, now);
        }
    }

    fn thread(&mut self, tid: u64, status_bits: u32) -> usize {
        if let Some(&i) = self.thread_index.get(&tid) {
            return i;
        }
        let i = self.threads.len();
        self.threads.push(Thread {
            tid,
            is_main: status_bits & status::MAIN_THREAD != 0,
            ..Default::default()
        });
        self.thread_index.insert(tid, i);
        i
    }

    /// The function of a model frame, made on first sight.
    fn func(
        &mut self,
        th: usize,
        file: StrId,
        name: StrId,
        line: Option<i32>,
        frames: &FrameTable,
    ) -> u32 {
        if let Some(&i) = self.threads[th].func_index.get(&(file, name)) {
            return i;
        }
        let file_str = frames.str(file);
        let python = is_python(file_str);
        let name_idx = self.intern(frames.str(name));
        let resource = match self.threads[th].resource_index.get(&file) {
            Some(&r) => r,
            None => {
                let r_name = self.intern(basename(file_str));
                let t = &mut self.threads[th];
                let r = t.resource_name.len() as u32;
                t.resource_name.push(r_name);
                t.resource_index.insert(file, r);
                r
            }
        };
        let file_idx = python.then(|| self.intern(basename(file_str)));
        let t = &mut self.threads[th];
        let i = t.func_name.len() as u32;
        t.func_name.push(name_idx);
        t.func_is_js.push(python);
        t.func_resource.push(resource);
        t.func_file.push(file_idx);
        t.func_line.push(if python { line } else { None });
        t.func_index.insert((file, name), i);
        i
    }

    /// The frame-table index of a model frame, made on first sight.
    fn frame(&mut self, th: usize, id: FrameId, frames: &FrameTable) -> u32 {
        if let Some(&i) = self.threads[th].by_model_frame.get(&id) {
            return i;
        }
        let f = frames.frame(id);
        // Synthetic frames, and frames without a location, have no line:
        // the reference's `location=None`.
        let location = f.location.filter(|_| !f.kind.is_synthetic());
        let line = location.map(|l| l.line);
        let column = location.map(|l| l.col).filter(|&c| c >= 0);
        let func = self.func(th, f.file, f.func, line, frames);
        let t = &mut self.threads[th];
        let i = match t.frame_index.get(&(func, line, column)) {
            Some(&i) => i,
            None => {
                let i = t.frame_func.len() as u32;
                t.frame_func.push(func);
                t.frame_line.push(line);
                t.frame_column.push(column);
                t.frame_index.insert((func, line, column), i);
                i
            }
        };
        t.by_model_frame.insert(id, i);
        i
    }

    /// The stack of leaf-first `ids`, interned root first.
    fn stack(&mut self, th: usize, ids: &[FrameId], frames: &FrameTable) -> u32 {
        let mut prefix = ROOT;
        for &id in ids.iter().rev() {
            let frame = self.frame(th, id, frames);
            let t = &mut self.threads[th];
            prefix = match t.stack_index.get(&(frame, prefix)) {
                Some(&s) => s,
                None => {
                    let s = t.stack_frame.len() as u32;
                    let js = t.func_is_js[t.frame_func[frame as usize] as usize];
                    t.stack_frame.push(frame);
                    t.stack_prefix.push(prefix);
                    t.stack_category
                        .push(if js { CAT_PYTHON } else { CAT_NATIVE });
                    t.stack_index.insert((frame, prefix), s);
                    s
                }
            };
        }
        prefix
    }

    /// Closes the markers still open, at the last sample.
    fn finalize_markers(&mut self, frames: Option<&FrameTable>) {
        let end = self.last_us;
        for kind in 0..MARKERS.len() {
            for th in 0..self.threads.len() {
                self.close(th, kind, end);
            }
        }
        for th in 0..self.threads.len() {
            if let (Some((s, start)), Some(frames)) = (self.threads[th].op_state.take(), frames) {
                self.add_opcode_marker(th, s, start, end, frames);
            }
        }
    }

    /// The mean time between samples. A sample is an instant: a replayed
    /// recording brings the threads of one instant one at a time (and a
    /// thread's repeated stacks in a batch), so instants are counted from
    /// the threads' times, not from the calls.
    fn interval_ms(&self) -> f64 {
        if !self.instants.is_empty() && self.last_us > 0 {
            ms(self.last_us) / self.instants.len() as f64
        } else {
            1.0
        }
    }

    /// Closes the open markers and writes the profile to `w`. Call once.
    fn write_profile<W: Write>(
        &mut self,
        w: W,
        frames: Option<&FrameTable>,
    ) -> serde_json::Result<()> {
        self.finalize_markers(frames);
        let m = &self.machine;
        let empty: [(); 0] = [];
        let meta = MetaOut {
            interval: self.interval_ms(),
            start_time: self.start_time_ms,
            abi: &m.arch,
            misc: "Python profiler",
            oscpu: &m.arch,
            platform: &m.system,
            process_type: 0,
            categories: Seq(CATEGORIES.iter().map(|&(name, color)| CategoryOut {
                name,
                color,
                subcategories: ["Other"],
            })),
            stackwalk: 0,
            toolkit: "",
            version: FORMAT_VERSION,
            preprocessed_profile_version: PREPROCESSED_VERSION,
            app_build_id: "",
            physical_cpus: m.cpus,
            logical_cpus: m.cpus,
            cpu_name: "",
            product: "Python",
            symbolicated: true,
            marker_schema: if self.opcodes.is_some() {
                opcode_schema()
            } else {
                serde_json::Value::Array(Vec::new())
            },
            imported_from: "Tachyon Sampling Profiler",
            extensions: ExtensionsOut {
                id: empty,
                name: empty,
                base_url: empty,
                length: 0,
            },
        };
        let (pid, processes) = (&self.pid, &self.processes);
        let profile = ProfileOut {
            meta,
            libs: empty,
            threads: Seq(self.threads.iter().map(|t| ThreadOut { t, pid, processes })),
            pages: empty,
            shared: SharedOut {
                string_array: &self.strings,
                sources: SourcesOut {
                    length: 0,
                    uuid: empty,
                    filename: empty,
                },
            },
        };
        let mut w = w;
        serde_json::to_writer(&mut w, &profile)?;
        w.flush().map_err(serde_json::Error::io)
    }
}

/// What the profile says of the machine: `platform.machine()`,
/// `platform.system()` and `os.cpu_count()` in the reference.
struct Machine {
    arch: String,
    system: String,
    cpus: i64,
}

impl Machine {
    fn this() -> Self {
        let cpus = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
            .ok()
            .flatten()
            .unwrap_or(0)
            .max(0);
        Machine {
            arch: std::env::consts::ARCH.to_string(),
            system: platform().to_string(),
            cpus,
        }
    }
}

/// The wall clock, in ms since the epoch.
fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// What the reference prints once the file is written.
fn written_message(path: &Path) -> String {
    format!(
        "Gecko profile written to {}\nOpen in Firefox Profiler: https://profiler.firefox.com/\n",
        path.display()
    )
}

/// `platform.system()`.
fn platform() -> &'static str {
    match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Darwin",
        "windows" => "Windows",
        "freebsd" => "FreeBSD",
        other => other,
    }
}

impl Collector for GeckoCollector {
    fn process_named(&mut self, pid: u32, command: &str) {
        self.processes.name(pid, command);
    }

    fn collect(&mut self, sample: &Sample, frames: &FrameTable) {
        let base = *self.base_us.get_or_insert_with(|| {
            self.start_time_ms = sample.timestamp_us as f64 / 1000.0;
            sample.timestamp_us
        });
        let now = sample.timestamp_us.saturating_sub(base);
        self.sample_count += 1;
        self.instants.insert(now);
        self.last_us = self.last_us.max(now);
        for ts in &sample.threads {
            let th = self.thread(ts.tid, ts.status);
            if sample.pid.is_some() {
                self.threads[th].pid = sample.pid;
            }
            if let Some(n) = ts.name
                && self.threads[th].name_id != Some(n)
            {
                self.threads[th].name_id = Some(n);
                self.threads[th].name = Some(frames.str(n).to_owned());
            }
            let has_gil = ts.status & status::HAS_GIL != 0;
            let on_cpu = ts.status & status::ON_CPU != 0;
            self.track(th, has_gil, HAS_GIL, NO_GIL, now);
            self.track(th, on_cpu, ON_CPU, OFF_CPU, now);
            if has_gil {
                self.track(th, true, PYTHON_CODE, NATIVE_CODE, now);
            } else if on_cpu {
                self.track(th, true, NATIVE_CODE, PYTHON_CODE, now);
            } else if self.threads[th].initialized {
                self.close(th, PYTHON_CODE, now);
                self.close(th, NATIVE_CODE, now);
            }
            if ts.status & status::GIL_REQUESTED != 0 {
                self.threads[th].open[GIL_WAIT].get_or_insert(now);
            } else {
                self.close(th, GIL_WAIT, now);
            }
            let has_exception = ts.status & status::HAS_EXCEPTION != 0;
            self.track(th, has_exception, HAS_EXCEPTION, NO_EXCEPTION, now);
            let in_gc = ts
                .frames
                .iter()
                .any(|&id| frames.frame(id).kind == FrameKind::Gc);
            if in_gc {
                self.threads[th].open[GC].get_or_insert(now);
            } else {
                self.close(th, GC, now);
            }
            self.threads[th].initialized = true;

            if ts.frames.is_empty() {
                continue;
            }
            if self.opcodes.is_some() {
                let leaf = frames.frame(ts.frames[0]);
                let loc = leaf.location;
                let state = (
                    leaf.opcode,
                    loc.map(|l| l.line),
                    loc.map_or(-1, |l| l.col),
                    leaf.func,
                    leaf.file,
                );
                self.track_opcode(th, state, now, frames);
            }
            let stack = if self.threads[th].last_frames == ts.frames {
                self.threads[th].last_stack
            } else {
                let stack = self.stack(th, &ts.frames, frames);
                let t = &mut self.threads[th];
                t.last_frames.clone_from(&ts.frames);
                t.last_stack = stack;
                stack
            };
            let t = &mut self.threads[th];
            t.sample_stack.push(stack);
            t.sample_time.push(now);
        }
    }

    fn finish(&mut self, frames: &FrameTable, _stats: &RunStats) -> Result<()> {
        match self.output.clone() {
            Output::Stdout => {
                let out = std::io::stdout().lock();
                match self.write_profile(BufWriter::new(out), Some(frames)) {
                    Err(e) if e.io_error_kind() != Some(std::io::ErrorKind::BrokenPipe) => Err(
                        Error::io("cannot write to standard output", std::io::Error::other(e)),
                    ),
                    _ => Ok(()),
                }
            }
            Output::File(path) => {
                self.write_file(&path, frames)?;
                crate::out!("{}", written_message(&path));
                Ok(())
            }
        }
    }
}

impl GeckoCollector {
    /// Writes next to `path` and renames, so a reader never sees half a file.
    fn write_file(&mut self, path: &Path, frames: &FrameTable) -> Result<()> {
        let mut file = super::atomic::AtomicFile::create(path)?;
        self.write_profile(&mut file, Some(frames))
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e.into()))?;
        file.commit()
    }
}

// Serialization, straight from the columns.

/// A JSON array of an iterator's items.
struct Seq<I>(I);

impl<I> Serialize for Seq<I>
where
    I: Iterator + Clone,
    I::Item: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.0.clone())
    }
}

/// `n` nulls.
fn nulls(n: usize) -> Seq<std::iter::RepeatN<Option<()>>> {
    Seq(repeat_n(None, n))
}

#[derive(Serialize)]
struct ProfileOut<'a, T, C> {
    meta: MetaOut<'a, C>,
    libs: [(); 0],
    threads: T,
    pages: [(); 0],
    shared: SharedOut<'a>,
}

#[derive(Serialize)]
struct SharedOut<'a> {
    #[serde(rename = "stringArray")]
    string_array: &'a [Box<str>],
    sources: SourcesOut,
}

#[derive(Serialize)]
struct SourcesOut {
    length: usize,
    uuid: [(); 0],
    filename: [(); 0],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MetaOut<'a, C> {
    interval: f64,
    start_time: f64,
    abi: &'a str,
    misc: &'static str,
    oscpu: &'a str,
    platform: &'a str,
    process_type: u32,
    categories: C,
    stackwalk: u32,
    toolkit: &'static str,
    version: u32,
    preprocessed_profile_version: u32,
    #[serde(rename = "appBuildID")]
    app_build_id: &'static str,
    #[serde(rename = "physicalCPUs")]
    physical_cpus: i64,
    #[serde(rename = "logicalCPUs")]
    logical_cpus: i64,
    #[serde(rename = "CPUName")]
    cpu_name: &'static str,
    product: &'static str,
    symbolicated: bool,
    marker_schema: serde_json::Value,
    imported_from: &'static str,
    extensions: ExtensionsOut,
}

#[derive(Serialize)]
struct CategoryOut {
    name: &'static str,
    color: &'static str,
    subcategories: [&'static str; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ExtensionsOut {
    id: [(); 0],
    name: [(); 0],
    #[serde(rename = "baseURL")]
    base_url: [(); 0],
    length: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NativeSymbolsOut {
    lib_index: [(); 0],
    address: [(); 0],
    name: [(); 0],
    function_size: [(); 0],
    length: usize,
}

struct ThreadOut<'a> {
    t: &'a Thread,
    /// The pid of a thread whose process is not known (a profile of one).
    pid: &'a str,
    processes: &'a super::merge::Processes,
}

impl Serialize for ThreadOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let t = self.t;
        let mut m = s.serialize_map(None)?;
        self.process_entries(&mut m)?;
        sample_and_stack_tables(t, &mut m)?;
        frame_and_func_tables(t, &mut m)?;
        resource_and_symbol_tables(t, &mut m)?;
        markers_table(t, &mut m)?;
        m.end()
    }
}

impl ThreadOut<'_> {
    /// The thread's name, ids and process.
    fn process_entries<M: SerializeMap>(&self, m: &mut M) -> std::result::Result<(), M::Error> {
        let t = self.t;
        match &t.name {
            Some(name) => m.serialize_entry("name", name)?,
            None => m.serialize_entry("name", &format!("Thread-{}", t.tid))?,
        }
        m.serialize_entry("isMainThread", &t.is_main)?;
        m.serialize_entry("processStartupTime", &0)?;
        m.serialize_entry("processShutdownTime", &())?;
        m.serialize_entry("registerTime", &0)?;
        m.serialize_entry("unregisterTime", &())?;
        m.serialize_entry("pausedRanges", &[(); 0])?;
        match t.pid {
            Some(pid) => m.serialize_entry("pid", &pid.to_string())?,
            None => m.serialize_entry("pid", self.pid)?,
        }
        m.serialize_entry("tid", &t.tid)?;
        m.serialize_entry("processType", "default")?;
        match t.pid {
            Some(pid) => m.serialize_entry("processName", &self.processes.label(pid))?,
            None => m.serialize_entry("processName", "Python Process")?,
        }
        Ok(())
    }
}

/// `samples` (a stack and a time each) and `stackTable`.
fn sample_and_stack_tables<M: SerializeMap>(
    t: &Thread,
    m: &mut M,
) -> std::result::Result<(), M::Error> {
    let n = t.sample_stack.len();
    m.serialize_entry(
        "samples",
        &SamplesOut {
            stack: Seq(t.sample_stack.iter()),
            time: Seq(t.sample_time.iter().map(|&us| ms(us))),
            event_delay: nulls(n),
            weight: (),
            weight_type: "samples",
            length: n,
        },
    )?;

    let n = t.stack_frame.len();
    m.serialize_entry(
        "stackTable",
        &StackTableOut {
            frame: Seq(t.stack_frame.iter()),
            category: Seq(t.stack_category.iter()),
            subcategory: Seq(repeat_n(0, n)),
            prefix: Seq(t.stack_prefix.iter().map(|&p| (p != ROOT).then_some(p))),
            length: n,
        },
    )?;
    Ok(())
}

/// `frameTable` and `funcTable`.
fn frame_and_func_tables<M: SerializeMap>(
    t: &Thread,
    m: &mut M,
) -> std::result::Result<(), M::Error> {
    let n = t.frame_func.len();
    let category = |&f: &u32| {
        if t.func_is_js[f as usize] {
            CAT_PYTHON
        } else {
            CAT_NATIVE
        }
    };
    m.serialize_entry(
        "frameTable",
        &FrameTableOut {
            address: Seq(repeat_n(-1, n)),
            category: Seq(t.frame_func.iter().map(category)),
            subcategory: Seq(repeat_n(0, n)),
            func: Seq(t.frame_func.iter()),
            inner_window_id: nulls(n),
            implementation: nulls(n),
            optimizations: nulls(n),
            line: Seq(t.frame_line.iter().map(|l| l.filter(|&l| l != 0))),
            column: Seq(t.frame_column.iter()),
            inline_depth: Seq(repeat_n(0, n)),
            native_symbol: nulls(n),
            length: n,
        },
    )?;

    let n = t.func_name.len();
    m.serialize_entry(
        "funcTable",
        &FuncTableOut {
            name: Seq(t.func_name.iter()),
            is_js: Seq(t.func_is_js.iter()),
            relevant_for_js: Seq(t.func_is_js.iter()),
            resource: Seq(t.func_resource.iter()),
            file_name: Seq(t.func_file.iter()),
            line_number: Seq(t.func_line.iter()),
            column_number: nulls(n),
            length: n,
        },
    )?;
    Ok(())
}

/// `resourceTable` (a file each) and the empty `nativeSymbols`.
fn resource_and_symbol_tables<M: SerializeMap>(
    t: &Thread,
    m: &mut M,
) -> std::result::Result<(), M::Error> {
    let n = t.resource_name.len();
    m.serialize_entry(
        "resourceTable",
        &ResourceTableOut {
            lib: nulls(n),
            name: Seq(t.resource_name.iter()),
            host: nulls(n),
            type_: Seq(repeat_n(1, n)),
            length: n,
        },
    )?;

    m.serialize_entry(
        "nativeSymbols",
        &NativeSymbolsOut {
            lib_index: [],
            address: [],
            name: [],
            function_size: [],
            length: 0,
        },
    )?;
    Ok(())
}

/// `markers`: the thread's state intervals and instructions.
fn markers_table<M: SerializeMap>(t: &Thread, m: &mut M) -> std::result::Result<(), M::Error> {
    let k = &t.markers;
    m.serialize_entry(
        "markers",
        &MarkersOut {
            data: Seq(k.iter().map(|mk| match &mk.op {
                None => MarkerData::State {
                    type_: MARKERS[mk.kind as usize].0.replace(' ', ""),
                    duration: ms(mk.end) - ms(mk.start),
                    tid: t.tid,
                },
                Some(op) => MarkerData::Opcode {
                    type_: "Opcode",
                    opcode: op.opcode,
                    opname: &op.opname,
                    base_opname: &op.base_opname,
                    is_specialized: op.is_specialized,
                    line: op.line,
                    column: (op.column >= 0).then_some(op.column),
                    function: &op.function,
                    duration: ms(mk.end) - ms(mk.start),
                },
            })),
            name: Seq(k.iter().map(|mk| mk.name)),
            start_time: Seq(k.iter().map(|mk| ms(mk.start))),
            end_time: Seq(k.iter().map(|mk| ms(mk.end))),
            phase: Seq(repeat_n(1, k.len())),
            category: Seq(k.iter().map(|mk| match &mk.op {
                None => MARKERS[mk.kind as usize].1,
                Some(_) => CAT_OPCODES,
            })),
            length: k.len(),
        },
    )?;
    Ok(())
}

#[derive(Serialize)]
struct SamplesOut<A, B, C> {
    stack: A,
    time: B,
    #[serde(rename = "eventDelay")]
    event_delay: C,
    weight: (),
    #[serde(rename = "weightType")]
    weight_type: &'static str,
    length: usize,
}

#[derive(Serialize)]
struct StackTableOut<A, B, C, D> {
    frame: A,
    category: B,
    subcategory: C,
    prefix: D,
    length: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FrameTableOut<A, B, C, D, E, F, G, H, I, J, K> {
    address: A,
    category: B,
    subcategory: C,
    func: D,
    #[serde(rename = "innerWindowID")]
    inner_window_id: E,
    implementation: F,
    optimizations: G,
    line: H,
    column: I,
    inline_depth: J,
    native_symbol: K,
    length: usize,
}

#[derive(Serialize)]
struct FuncTableOut<A, B, C, D, E, F, G> {
    name: A,
    #[serde(rename = "isJS")]
    is_js: B,
    #[serde(rename = "relevantForJS")]
    relevant_for_js: C,
    resource: D,
    #[serde(rename = "fileName")]
    file_name: E,
    #[serde(rename = "lineNumber")]
    line_number: F,
    #[serde(rename = "columnNumber")]
    column_number: G,
    length: usize,
}

#[derive(Serialize)]
struct ResourceTableOut<A, B, C, D> {
    lib: A,
    name: B,
    host: C,
    #[serde(rename = "type")]
    type_: D,
    length: usize,
}

#[derive(Serialize)]
struct MarkersOut<A, B, C, D, E, F> {
    data: A,
    name: B,
    #[serde(rename = "startTime")]
    start_time: C,
    #[serde(rename = "endTime")]
    end_time: D,
    phase: E,
    category: F,
    length: usize,
}

#[derive(Serialize)]
#[serde(untagged)]
enum MarkerData<'a> {
    State {
        #[serde(rename = "type")]
        type_: String,
        duration: f64,
        tid: u64,
    },
    /// The reference's opcode marker data.
    Opcode {
        #[serde(rename = "type")]
        type_: &'static str,
        opcode: u8,
        opname: &'a str,
        base_opname: &'a str,
        is_specialized: bool,
        line: Option<i32>,
        column: Option<i32>,
        function: &'a str,
        duration: f64,
    },
}

/// The reference's `markerSchema` with `--opcodes`: one "Opcode" entry.
fn opcode_schema() -> serde_json::Value {
    serde_json::json!([{
        "name": "Opcode",
        "display": ["marker-table", "marker-chart"],
        "tooltipLabel": "{marker.data.opname}",
        "tableLabel": "{marker.data.opname} at line {marker.data.line}",
        "chartLabel": "{marker.data.opname}",
        "fields": [
            {"key": "opname", "label": "Opcode", "format": "string", "searchable": true},
            {"key": "base_opname", "label": "Base Opcode", "format": "string"},
            {"key": "is_specialized", "label": "Specialized", "format": "string"},
            {"key": "line", "label": "Line", "format": "integer"},
            {"key": "column", "label": "Column", "format": "integer"},
            {"key": "function", "label": "Function", "format": "string"},
            {"key": "duration", "label": "Duration", "format": "duration"},
        ],
    }])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::*;
    use crate::collect::scenarios as fixtures;
    use crate::model::{Frame, NO_FILE, ThreadSample};

    struct Scenario {
        name: String,
        frames: FrameTable,
        samples: Vec<Sample>,
    }

    /// fixtures/reference/gecko-scenarios.json, as tachyon's samples.
    fn scenarios() -> Vec<Scenario> {
        let all: Value = serde_json::from_str(&fixtures::read("gecko-scenarios.json")).unwrap();
        let mut out = Vec::new();
        for sc in all["scenarios"].as_array().unwrap() {
            let mut frames = FrameTable::new();
            let mut stacks = HashMap::new();
            for (name, entries) in sc["stacks"].as_object().unwrap() {
                let ids: Vec<FrameId> = entries
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| frame(&mut frames, e))
                    .collect();
                stacks.insert(name.clone(), ids);
            }
            let samples = sc["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| Sample {
                    pid: None,
                    timestamp_us: s["t"].as_u64().unwrap(),
                    threads: s["threads"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| ThreadSample {
                            tid: t[0].as_u64().unwrap(),
                            status: t[1].as_u64().unwrap() as u32,
                            frames: stacks[t[2].as_str().unwrap()].clone(),
                            ..Default::default()
                        })
                        .collect(),
                })
                .collect();
            out.push(Scenario {
                name: sc["name"].as_str().unwrap().to_string(),
                frames,
                samples,
            });
        }
        out
    }

    fn frame(t: &mut FrameTable, e: &Value) -> FrameId {
        let file = e[0].as_str().unwrap();
        let line = e[1].as_i64().unwrap() as i32;
        let func = e[2].as_str().unwrap();
        if file == NO_FILE && line == 0 {
            return t.synthetic(FrameKind::synthetic_named(func), func);
        }
        let col = e.get(3).and_then(Value::as_i64).unwrap_or(0) as i32;
        // Line -1 in a scenario: a frame that could not be read, which
        // the reference was fed as a location with line -1.
        let kind = if line == -1 {
            FrameKind::Unreadable
        } else {
            FrameKind::Python
        };
        let end_col = if col < 0 { -1 } else { col + 1 };
        let location = Some(crate::model::Location {
            line,
            end_line: line,
            col,
            end_col,
        });
        let (file, func) = (t.intern_str(file), t.intern_str(func));
        t.intern(Frame {
            opcode: None,
            kind,
            file,
            func,
            location,
        })
    }

    fn collected(sc: &Scenario) -> GeckoCollector {
        let mut c = GeckoCollector::new(Output::Stdout);
        for s in &sc.samples {
            c.collect(s, &sc.frames);
        }
        c
    }

    fn profile(c: &mut GeckoCollector) -> Value {
        let mut buf = Vec::new();
        c.write_profile(&mut buf, None).unwrap();
        serde_json::from_slice(&buf).unwrap()
    }

    /// The fields that depend on the machine, the clock or the pid, fixed
    /// as scripts/reference-gecko.py fixes them.
    fn normalize(mut p: Value) -> Value {
        let meta = &mut p["meta"];
        meta["startTime"] = json!(0.0);
        meta["abi"] = json!("MACHINE");
        meta["oscpu"] = json!("MACHINE");
        meta["platform"] = json!("SYSTEM");
        meta["physicalCPUs"] = json!(0);
        meta["logicalCPUs"] = json!(0);
        for t in p["threads"].as_array_mut().unwrap() {
            t["pid"] = json!("PID");
        }
        p
    }

    fn reference(name: &str) -> Value {
        serde_json::from_str(&fixtures::read(&format!("gecko-{name}.json"))).unwrap()
    }

    #[test]
    fn tracks_take_the_thread_name_when_known() {
        let mut sc = scenarios().into_iter().next().unwrap();
        let first = sc.samples[0].threads[0].tid;
        let (old, new) = (
            sc.frames.intern_str("before"),
            sc.frames.intern_str("worker-3"),
        );
        let n = sc.samples.len();
        for (i, s) in sc.samples.iter_mut().enumerate() {
            for t in &mut s.threads {
                if t.tid == first {
                    // Renamed on the way: the latest name wins.
                    t.name = Some(if i + 1 < n { old } else { new });
                }
            }
        }
        let p = profile(&mut collected(&sc));
        for t in p["threads"].as_array().unwrap() {
            let want = if t["tid"] == first {
                "worker-3".to_owned()
            } else {
                format!("Thread-{}", t["tid"])
            };
            assert_eq!(t["name"], want.as_str());
        }
    }

    #[test]
    fn matches_reference_field_for_field() {
        let all = scenarios();
        assert!(all.len() >= 4);
        for sc in &all {
            let got = normalize(profile(&mut collected(sc)));
            let want = reference(&sc.name);
            // Key order too: the reference writes the same members in the
            // same order.
            let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(&got), keys(&want), "{}: top-level keys", sc.name);
            assert_eq!(got["meta"], want["meta"], "{}: meta", sc.name);
            assert_eq!(got["shared"], want["shared"], "{}: shared", sc.name);
            let (g, w) = (
                got["threads"].as_array().unwrap(),
                want["threads"].as_array().unwrap(),
            );
            assert_eq!(g.len(), w.len(), "{}: threads", sc.name);
            for (g, w) in g.iter().zip(w) {
                assert_eq!(keys(g), keys(w), "{}: thread keys", sc.name);
                for (k, wv) in w.as_object().unwrap() {
                    assert_eq!(&g[k], wv, "{}: {} {k}", sc.name, w["name"]);
                }
            }
            assert_eq!(got, want, "{}", sc.name);
        }
    }

    #[test]
    fn byte_for_byte_as_reference_once_normalized() {
        for sc in &scenarios() {
            let mut c = collected(sc);
            c.start_time_ms = 0.0;
            c.pid = "PID".into();
            c.machine = Machine {
                arch: "MACHINE".into(),
                system: "SYSTEM".into(),
                cpus: 0,
            };
            let mut buf = Vec::new();
            c.write_profile(&mut buf, None).unwrap();
            let got = String::from_utf8(buf).unwrap();
            let want = fixtures::read(&format!("gecko-{}.json", sc.name));
            if got != want {
                let at = got
                    .bytes()
                    .zip(want.bytes())
                    .take_while(|(a, b)| a == b)
                    .count();
                let around = |s: &str| s[at.saturating_sub(80)..(at + 80).min(s.len())].to_string();
                panic!(
                    "{}: differs at byte {at}:\n got: {}\nwant: {}",
                    sc.name,
                    around(&got),
                    around(&want)
                );
            }
        }
    }

    /// Per thread: root-first stacks as `func (file:line)` text with their
    /// sample counts, and markers as (name, start, end): what the profile
    /// says, whatever its indices.
    type Resolved = BTreeMap<u64, (BTreeMap<Vec<String>, u64>, Vec<(String, f64, f64)>)>;

    fn resolve(p: &Value) -> Resolved {
        let strings = p["shared"]["stringArray"].as_array().unwrap();
        let s = |v: &Value| {
            strings[v.as_u64().unwrap() as usize]
                .as_str()
                .unwrap()
                .to_string()
        };
        let mut out = BTreeMap::new();
        for t in p["threads"].as_array().unwrap() {
            let (st, ft, fu) = (&t["stackTable"], &t["frameTable"], &t["funcTable"]);
            let mut stacks = BTreeMap::new();
            for idx in t["samples"]["stack"].as_array().unwrap() {
                let mut names = Vec::new();
                let mut at = idx.as_u64();
                while let Some(i) = at {
                    let f = st["frame"][i as usize].as_u64().unwrap() as usize;
                    let func = ft["func"][f].as_u64().unwrap() as usize;
                    let file = &fu["fileName"][func];
                    let file = if file.is_null() { "-".into() } else { s(file) };
                    names.push(format!(
                        "{} ({file}:{}:{})",
                        s(&fu["name"][func]),
                        ft["line"][f],
                        ft["column"][f]
                    ));
                    at = st["prefix"][i as usize].as_u64();
                }
                names.reverse();
                *stacks.entry(names).or_insert(0) += 1;
            }
            let m = &t["markers"];
            let mut markers: Vec<_> = (0..m["length"].as_u64().unwrap() as usize)
                .map(|i| {
                    (
                        s(&m["name"][i]),
                        m["startTime"][i].as_f64().unwrap(),
                        m["endTime"][i].as_f64().unwrap(),
                    )
                })
                .collect();
            markers.sort_by(|a, b| a.partial_cmp(b).unwrap());
            out.insert(t["tid"].as_u64().unwrap(), (stacks, markers));
        }
        out
    }

    #[test]
    fn same_stacks_counts_and_markers_as_reference() {
        for sc in &scenarios() {
            let got = profile(&mut collected(sc));
            let want = reference(&sc.name);
            assert_eq!(resolve(&got), resolve(&want), "{}", sc.name);
        }
        // The scenario exercises what it is meant to.
        let sc = scenarios()
            .into_iter()
            .find(|s| s.name == "states")
            .unwrap();
        let r = resolve(&profile(&mut collected(&sc)));
        assert_eq!(r.len(), 3);
        let names: std::collections::BTreeSet<_> = r
            .values()
            .flat_map(|(_, m)| m.iter().map(|x| x.0.clone()))
            .collect();
        let all: std::collections::BTreeSet<_> = MARKERS.iter().map(|m| m.0.to_string()).collect();
        assert_eq!(names, all);
        let main = &r[&100].0;
        assert_eq!(main.values().sum::<u64>(), 10, "one sample without frames");
        assert!(
            main.keys()
                .any(|k| k.last().unwrap().starts_with("<GC> (~:null:null)"))
        );
    }

    fn len(v: &Value) -> usize {
        v.as_array().unwrap().len()
    }

    fn idx(v: &Value) -> usize {
        v.as_u64().unwrap() as usize
    }

    /// The length of table `t`, checked against each of its columns.
    fn table(t: &Value, cols: &[&str]) -> usize {
        let n = idx(&t["length"]);
        for c in cols {
            assert_eq!(len(&t[*c]), n, "column {c}");
        }
        n
    }

    /// Every index in range, lengths right, prefixes acyclic, markers sane.
    fn check_consistent(p: &Value) {
        let n_strings = len(&p["shared"]["stringArray"]);
        let n_categories = len(&p["meta"]["categories"]);
        assert_eq!(p["meta"]["version"], 32);
        assert_eq!(p["meta"]["preprocessedProfileVersion"], 57);
        for t in p["threads"].as_array().unwrap() {
            let n_stack = check_stack_tables(t, n_strings, n_categories);
            check_samples(&t["samples"], n_stack);
            check_markers(p, t, n_categories);
        }
    }

    /// A thread's resource, function, frame and stack tables, each
    /// pointing into the one before; the number of stacks.
    fn check_stack_tables(t: &Value, n_strings: usize, n_categories: usize) -> usize {
        let (st, ft, fu, rt) = (
            &t["stackTable"],
            &t["frameTable"],
            &t["funcTable"],
            &t["resourceTable"],
        );
        let n_res = table(rt, &["lib", "name", "host", "type"]);
        for i in 0..n_res {
            assert!(idx(&rt["name"][i]) < n_strings);
        }
        let n_func = table(
            fu,
            &[
                "name",
                "isJS",
                "relevantForJS",
                "resource",
                "fileName",
                "lineNumber",
                "columnNumber",
            ],
        );
        for i in 0..n_func {
            assert!(idx(&fu["name"][i]) < n_strings);
            assert!(idx(&fu["resource"][i]) < n_res);
            let file = &fu["fileName"][i];
            assert!(file.is_null() || idx(file) < n_strings);
            assert_eq!(file.is_null(), !fu["isJS"][i].as_bool().unwrap());
        }
        let n_frame = table(
            ft,
            &[
                "address",
                "category",
                "subcategory",
                "func",
                "innerWindowID",
                "implementation",
                "optimizations",
                "line",
                "column",
                "inlineDepth",
                "nativeSymbol",
            ],
        );
        for i in 0..n_frame {
            assert!(idx(&ft["func"][i]) < n_func);
            assert!(idx(&ft["category"][i]) < n_categories);
            assert_eq!(ft["subcategory"][i], 0);
        }
        let n_stack = table(st, &["frame", "category", "subcategory", "prefix"]);
        for i in 0..n_stack {
            assert!(idx(&st["frame"][i]) < n_frame);
            assert!(idx(&st["category"][i]) < n_categories);
            // A prefix comes before its extensions: no cycles.
            let prefix = &st["prefix"][i];
            assert!(
                prefix.is_null() || idx(prefix) < i,
                "stack {i}: prefix {prefix}"
            );
        }
        n_stack
    }

    /// Samples on known stacks, in time order.
    fn check_samples(s: &Value, n_stack: usize) {
        let n_samples = table(s, &["stack", "time", "eventDelay"]);
        let mut last = f64::NEG_INFINITY;
        for i in 0..n_samples {
            assert!(idx(&s["stack"][i]) < n_stack);
            let time = s["time"][i].as_f64().unwrap();
            assert!(time >= last, "sample times go back");
            last = time;
        }
    }

    /// Markers named, in order, of their thread, as long as they say.
    fn check_markers(p: &Value, t: &Value, n_categories: usize) {
        let m = &t["markers"];
        let n_markers = table(
            m,
            &["data", "name", "startTime", "endTime", "phase", "category"],
        );
        for i in 0..n_markers {
            let name = p["shared"]["stringArray"][idx(&m["name"][i])]
                .as_str()
                .unwrap();
            let (start, end) = (
                m["startTime"][i].as_f64().unwrap(),
                m["endTime"][i].as_f64().unwrap(),
            );
            assert!(start <= end, "{name}: {start} > {end}");
            assert_eq!(m["phase"][i], 1);
            assert!(idx(&m["category"][i]) < n_categories);
            let data = &m["data"][i];
            assert_eq!(data["type"], name.replace(' ', ""));
            assert_eq!(data["tid"], t["tid"]);
            assert_eq!(data["duration"].as_f64().unwrap(), end - start);
        }
    }

    #[test]
    fn tables_are_consistent() {
        for sc in &scenarios() {
            check_consistent(&profile(&mut collected(sc)));
        }
    }

    #[test]
    fn markers_follow_status_changes() {
        let mut t = FrameTable::new();
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let (file, func) = (t.intern_str("/a/x.py"), t.intern_str("f"));
        let f = t.intern(Frame {
            opcode: None,
            kind: FrameKind::Python,
            file,
            func,
            location: Some(crate::model::Location {
                line: 3,
                end_line: 3,
                col: 4,
                end_col: 5,
            }),
        });
        let gil_cpu = status::HAS_GIL | status::ON_CPU | status::MAIN_THREAD;
        let steps: [(u64, u32, Vec<FrameId>); 6] = [
            (1_000, gil_cpu, vec![f]),
            (2_000, gil_cpu, vec![f]),
            (3_000, status::ON_CPU, vec![gc, f]),
            (4_000, status::GIL_REQUESTED, vec![gc, f]),
            (5_000, gil_cpu | status::HAS_EXCEPTION, vec![f]),
            (6_000, gil_cpu, vec![f]),
        ];
        let mut c = GeckoCollector::new(Output::Stdout).with_pid(77);
        for (ts, st, frames) in steps {
            let s = Sample {
                pid: None,
                timestamp_us: ts,
                threads: vec![ThreadSample {
                    tid: 5,
                    status: st,
                    frames,
                    ..Default::default()
                }],
            };
            c.collect(&s, &t);
        }
        let p = profile(&mut c);
        check_consistent(&p);
        assert_eq!(p["threads"][0]["pid"], "77");
        assert_eq!(p["threads"][0]["isMainThread"], true);
        assert_eq!(
            p["threads"][0]["samples"]["time"],
            json!([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
        );
        assert_eq!(p["meta"]["interval"], json!(5.0 / 6.0));
        let (_, markers) = resolve(&p).remove(&5).unwrap();
        let want: Vec<(String, f64, f64)> = vec![
            ("GC Collecting", 2.0, 4.0),
            ("Has Exception", 4.0, 5.0),
            ("Has GIL", 0.0, 2.0),
            ("Has GIL", 4.0, 5.0),
            ("Native Code", 2.0, 3.0),
            ("No Exception", 0.0, 4.0),
            ("No Exception", 5.0, 5.0),
            ("No GIL", 2.0, 4.0),
            ("Off CPU", 3.0, 4.0),
            ("On CPU", 0.0, 3.0),
            ("On CPU", 4.0, 5.0),
            ("Python Code", 0.0, 2.0),
            ("Python Code", 4.0, 5.0),
            ("Waiting for GIL", 3.0, 4.0),
        ]
        .into_iter()
        .map(|(n, s, e)| (n.to_string(), s, e))
        .collect();
        assert_eq!(markers, want);
    }

    #[test]
    fn stacks_share_prefixes_and_frames_ignore_end_columns() {
        let mut t = FrameTable::new();
        let (file, f, g) = (
            t.intern_str("/a/x.py"),
            t.intern_str("f"),
            t.intern_str("g"),
        );
        let mk = |func, line, end_col| Frame {
            opcode: None,
            kind: FrameKind::Python,
            file,
            func,
            location: Some(crate::model::Location {
                line,
                end_line: line,
                col: 1,
                end_col,
            }),
        };
        let root = t.intern(mk(f, 1, 2));
        let root_other_end = t.intern(mk(f, 1, 9));
        let leaf_a = t.intern(mk(g, 5, 2));
        let leaf_b = t.intern(mk(g, 6, 2));
        let mut c = GeckoCollector::new(Output::Stdout);
        for i in 0..1000u64 {
            let frames = match i % 3 {
                0 => vec![leaf_a, root],
                1 => vec![leaf_b, root_other_end],
                _ => vec![root],
            };
            let s = Sample {
                pid: None,
                timestamp_us: i * 1000,
                threads: vec![ThreadSample {
                    tid: 1,
                    frames,
                    ..Default::default()
                }],
            };
            c.collect(&s, &t);
        }
        let th = &c.threads[0];
        assert_eq!(th.stack_frame.len(), 3, "root, root→a, root→b");
        assert_eq!(th.frame_func.len(), 3);
        assert_eq!(th.func_name.len(), 2);
        assert_eq!(th.resource_name.len(), 1);
        assert_eq!(th.sample_stack.len(), 1000);
        let p = profile(&mut c);
        check_consistent(&p);
        let (stacks, _) = resolve(&p).remove(&1).unwrap();
        assert_eq!(
            stacks.values().copied().collect::<Vec<_>>(),
            vec![333, 334, 333]
        );
    }

    #[test]
    fn writes_the_file_and_says_so_like_the_reference() {
        let sc = scenarios()
            .into_iter()
            .find(|s| s.name == "states")
            .unwrap();
        let dir = std::env::temp_dir().join(format!("tachyon-gecko-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("profile.json");
        let mut c = GeckoCollector::new(Output::File(path.clone()));
        for s in &sc.samples {
            c.collect(s, &sc.frames);
        }
        c.finish(&sc.frames, &RunStats::default()).unwrap();
        let got: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(leftovers, 1, "no temporary file left");
        assert_eq!(normalize(got), reference("states"));
        let msg = written_message(Path::new("FILE"));
        assert_eq!(msg, fixtures::read("gecko-states.stdout"));
        // The first sample's time: live, the epoch-based sampling clock.
        let first = sc.samples[0].timestamp_us as f64 / 1000.0;
        assert_eq!(c.start_time_ms, first);
    }
}
