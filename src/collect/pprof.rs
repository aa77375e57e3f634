//! pprof (`--pprof`): a gzip-compressed `profile.proto`
//! (`perftools.profiles.Profile`), the format `go tool pprof` reads and
//! continuous-profiling services (Pyroscope, Parca) ingest.
//!
//! - One function per `(name, file)`, with no system name; its start line is 0 (unknown: the
//!   sampler reads where each instruction is, not where its function
//!   starts, and recordings do not keep it). Synthetic frames (`<GC>`,
//!   `<native>`, `<truncated>`) have no file.
//! - One location per distinct frame, told apart by `(file, function,
//!   line)` as the collapsed stacks tell them apart, each with one line.
//! - One sample per distinct (thread, stack), locations leaf first, with
//!   two values: `samples/count`, and that count times the interval in
//!   nanoseconds, typed by what was measured (`wall/nanoseconds`, or
//!   `cpu`/`gil` with `--mode`), which is also the period type. Each
//!   carries a `thread` label: the thread id; in a merged profile of
//!   several processes (`--subprocesses --merge`) also a numeric `pid`
//!   label, its process (`go tool pprof -tagfocus pid=42`).
//! - `time_nanos` is the run's first sample, `duration_nanos` the run's
//!   duration.
//! - Samples come in thread-id order, each thread's stacks in the order
//!   first seen, and every table in the order that walk first meets its
//!   entries, so a recording replayed gives the same bytes as the run that
//!   recorded it (the gzip header carries no time).
//!
//! The messages are written with `prost` from the few structs below, the
//! field numbers being `profile.proto`'s.

use std::collections::HashMap;
use std::io::Write as _;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;

use super::stacks::StackCounts;
use super::{Collector, Output, RunStats};
use crate::error::{Error, Result};
use crate::model::{Frame, FrameId, FrameTable, Mode, Sample, StrId};

/// `perftools.profiles.Profile`, the fields tachyon writes.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<PprofSample>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<PprofLocation>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct PprofSample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct PprofLocation {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// Writes a pprof profile; see the module documentation.
pub struct PprofCollector {
    output: Output,
    counts: StackCounts,
    first_us: Option<u64>,
    processes: super::merge::Processes,
}

/// The profile's string, function and location tables, filled as the
/// samples meet their frames: a location is a function at a line.
struct Tables<'f> {
    frames: &'f FrameTable,
    strings: Strings,
    functions: Vec<Function>,
    function_index: HashMap<(StrId, StrId), u64>,
    locations: Vec<PprofLocation>,
    location_index: HashMap<(StrId, StrId, i32), u64>,
}

impl<'f> Tables<'f> {
    fn new(frames: &'f FrameTable) -> Self {
        Tables {
            frames,
            strings: Strings::new(),
            functions: Vec::new(),
            function_index: HashMap::new(),
            locations: Vec::new(),
            location_index: HashMap::new(),
        }
    }

    fn value_type(&mut self, t: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: self.strings.get(t),
            unit: self.strings.get(unit),
        }
    }

    /// The location id of frame `id`, made on first sight.
    fn location(&mut self, id: FrameId) -> u64 {
        let f = *self.frames.frame(id);
        let line = f.line();
        if let Some(&l) = self.location_index.get(&(f.file, f.func, line)) {
            return l;
        }
        let function_id = self.function(&f);
        let id = self.locations.len() as u64 + 1;
        self.locations.push(PprofLocation {
            id,
            line: vec![Line {
                function_id,
                line: line.into(),
            }],
        });
        self.location_index.insert((f.file, f.func, line), id);
        id
    }

    /// The function id of frame `f`'s function in its file (none for a
    /// synthetic frame), made on first sight.
    fn function(&mut self, f: &Frame) -> u64 {
        if let Some(&id) = self.function_index.get(&(f.file, f.func)) {
            return id;
        }
        let name = self.strings.get(self.frames.str(f.func));
        let filename = f
            .file()
            .map_or(0, |file| self.strings.get(self.frames.str(file)));
        self.functions.push(Function {
            id: self.functions.len() as u64 + 1,
            name,
            // None: pprof would take a system name equal to the name for
            // a mangled C++ one and cut `<...>` out of it (`<module>`,
            // `<lambda>`).
            system_name: 0,
            filename,
            start_line: 0,
        });
        let id = self.functions.len() as u64;
        self.function_index.insert((f.file, f.func), id);
        id
    }
}

/// The string table: index 0 is "", as the format requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

impl PprofCollector {
    pub fn new(output: Output) -> Self {
        PprofCollector {
            output,
            counts: StackCounts::new(),
            first_us: None,
            processes: Default::default(),
        }
    }

    /// The profile, before compression.
    pub fn profile(&self, frames: &FrameTable, stats: &RunStats) -> Profile {
        let mut t = Tables::new(frames);
        let measured = match stats.mode {
            Mode::Cpu => "cpu",
            Mode::Gil => "gil",
            Mode::Wall | Mode::All | Mode::Exception => "wall",
        };
        let sample_type = vec![
            t.value_type("samples", "count"),
            t.value_type(measured, "nanoseconds"),
        ];
        let period_type = Some(t.value_type(measured, "nanoseconds"));
        let period = i64::try_from(stats.interval_us.saturating_mul(1000)).unwrap_or(i64::MAX);
        let samples = self.samples(&mut t, period);
        let duration = stats.duration_s * 1e9;
        let duration_nanos = if duration.is_finite() && duration > 0.0 {
            duration.min(i64::MAX as f64) as i64
        } else {
            0
        };
        Profile {
            sample_type,
            sample: samples,
            location: t.locations,
            function: t.functions,
            time_nanos: self
                .first_us
                .map_or(0, |us| i64::try_from(us.saturating_mul(1000)).unwrap_or(0)),
            duration_nanos,
            period_type,
            period,
            default_sample_type: t.strings.get(measured),
            string_table: t.strings.table,
        }
    }

    /// One sample per thread and stack of locations (stacks that differ
    /// only in columns are one), each thread's in first-seen order,
    /// labelled with its thread (and process, in a merged profile).
    fn samples(&self, t: &mut Tables<'_>, period: i64) -> Vec<PprofSample> {
        let thread_key = t.strings.get("thread");
        let mut samples: Vec<PprofSample> = Vec::new();
        let mut sample_index: HashMap<(u64, Vec<u64>), usize> = HashMap::new();
        let mut cells: Vec<_> = self.counts.cells().to_vec();
        cells.sort_by_key(|c| c.tid); // stable: each thread's stacks in first-seen order
        for cell in cells {
            let location_id: Vec<u64> = self
                .counts
                .stack(cell.stack)
                .iter()
                .map(|&id| t.location(id))
                .collect();
            let count = i64::try_from(cell.count).unwrap_or(i64::MAX);
            if let Some(&i) = sample_index.get(&(cell.tid, location_id.clone())) {
                let v = &mut samples[i].value;
                v[0] = v[0].saturating_add(count);
                v[1] = v[0].saturating_mul(period);
                continue;
            }
            sample_index.insert((cell.tid, location_id.clone()), samples.len());
            let mut label = vec![Label {
                key: thread_key,
                str: t.strings.get(&cell.tid.to_string()),
                num: 0,
            }];
            if let Some(pid) = self.processes.of_thread(cell.tid) {
                label.push(Label {
                    key: t.strings.get("pid"),
                    str: 0,
                    num: pid.into(),
                });
            }
            samples.push(PprofSample {
                location_id,
                value: vec![count, count.saturating_mul(period)],
                label,
            });
        }
        samples
    }

    /// The file's bytes: the profile, gzip-compressed.
    fn render(&self, frames: &FrameTable, stats: &RunStats) -> std::io::Result<Vec<u8>> {
        let raw = self.profile(frames, stats).encode_to_vec();
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&raw)?;
        gz.finish()
    }
}

impl Collector for PprofCollector {
    fn collect(&mut self, sample: &Sample, _frames: &FrameTable) {
        self.processes.note(sample);
        if sample.threads.iter().any(|t| !t.frames.is_empty()) {
            let t = sample.timestamp_us;
            self.first_us = Some(self.first_us.map_or(t, |f| f.min(t)));
        }
        self.counts.add(sample);
    }

    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()> {
        let bytes = self
            .render(frames, stats)
            .map_err(|e| Error::io("cannot compress the pprof profile", e))?;
        self.output.write(&bytes, "pprof profile written to ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::scenarios as fixtures;
    use crate::model::{FrameKind, Location, ThreadSample};
    use std::io::Read as _;

    fn sample(ts: u64, threads: &[(u64, &[u32])]) -> Sample {
        Sample {
            pid: None,
            timestamp_us: ts,
            threads: threads
                .iter()
                .map(|&(tid, f)| ThreadSample {
                    tid,
                    frames: f.to_vec(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn decoded(bytes: &[u8]) -> Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut raw)
            .unwrap();
        Profile::decode(raw.as_slice()).unwrap()
    }

    #[test]
    fn merged_samples_carry_their_pid() {
        let mut t = FrameTable::new();
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let mut c = PprofCollector::new(Output::Stdout);
        for (pid, tid) in [(40, 40), (41, 42)] {
            let mut s = sample(1000, &[(tid, &[gc])]);
            s.pid = Some(pid);
            c.collect(&s, &t);
        }
        let p = c.profile(&t, &RunStats::default());
        let s = |i: i64| p.string_table[i as usize].as_str();
        let labels: Vec<(&str, &str, &str, i64)> = p
            .sample
            .iter()
            .map(|x| {
                let (a, b) = (&x.label[0], &x.label[1]);
                (s(a.key), s(a.str), s(b.key), b.num)
            })
            .collect();
        assert_eq!(
            labels,
            [("thread", "40", "pid", 40), ("thread", "42", "pid", 41)]
        );
    }

    #[test]
    fn tables_samples_labels_and_times() {
        let mut t = FrameTable::new();
        let (file, f, g) = (
            t.intern_str("/app/x.py"),
            t.intern_str("f"),
            t.intern_str("g"),
        );
        let at = |func, line, col| crate::model::Frame {
            opcode: None,
            kind: FrameKind::Python,
            file,
            func,
            location: Some(Location {
                line,
                end_line: line,
                col,
                end_col: col + 1,
            }),
        };
        let (f1, f1b, f2, g5) = (
            t.intern(at(f, 1, 0)),
            t.intern(at(f, 1, 4)),
            t.intern(at(f, 2, 0)),
            t.intern(at(g, 5, 0)),
        );
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let mut c = PprofCollector::new(Output::Stdout);
        c.collect(&sample(7000, &[(9, &[g5, f1]), (3, &[f2])]), &t);
        c.collect(&sample(8000, &[(9, &[g5, f1b]), (3, &[gc, f2])]), &t);
        let stats = RunStats {
            interval_us: 1000,
            duration_s: 0.5,
            mode: Mode::Cpu,
            ..RunStats::default()
        };
        let p = decoded(&c.render(&t, &stats).unwrap());
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|v| (s(v.r#type), s(v.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        let pt = p.period_type.as_ref().unwrap();
        assert_eq!(
            (s(pt.r#type), s(pt.unit), p.period),
            ("cpu", "nanoseconds", 1_000_000)
        );
        assert_eq!((p.time_nanos, p.duration_nanos), (7_000_000, 500_000_000));
        // Functions f, g, <GC>; locations f:2, g:5, f:1, <GC> (thread 3 first).
        let funcs: Vec<(u64, &str, &str)> = p
            .function
            .iter()
            .map(|f| (f.id, s(f.name), s(f.filename)))
            .collect();
        assert_eq!(
            funcs,
            [
                (1, "f", "/app/x.py"),
                (2, "<GC>", ""),
                (3, "g", "/app/x.py")
            ]
        );
        let locs: Vec<(u64, u64, i64)> = p
            .location
            .iter()
            .map(|l| (l.id, l.line[0].function_id, l.line[0].line))
            .collect();
        assert_eq!(locs, [(1, 1, 2), (2, 2, 0), (3, 3, 5), (4, 1, 1)]);
        let samples: Vec<(&[u64], &[i64], &str, &str)> = p
            .sample
            .iter()
            .map(|x| {
                (
                    &x.location_id[..],
                    &x.value[..],
                    s(x.label[0].key),
                    s(x.label[0].str),
                )
            })
            .collect();
        assert_eq!(
            samples,
            [
                (&[1][..], &[1, 1_000_000][..], "thread", "3"),
                (&[2, 1][..], &[1, 1_000_000][..], "thread", "3"),
                // The column-only difference merged: one sample of two.
                (&[3, 4][..], &[2, 2_000_000][..], "thread", "9"),
            ]
        );
    }

    #[test]
    fn every_stack_counts_once_and_output_is_deterministic() {
        for sc in fixtures::scenarios() {
            let mut c = PprofCollector::new(Output::Stdout);
            for s in &sc.samples {
                c.collect(s, &sc.frames);
            }
            let stats = RunStats {
                interval_us: sc.interval_us,
                ..RunStats::default()
            };
            let bytes = c.render(&sc.frames, &stats).unwrap();
            assert_eq!(bytes, c.render(&sc.frames, &stats).unwrap());
            let p = decoded(&bytes);
            let total: i64 = p.sample.iter().map(|x| x.value[0]).sum();
            assert_eq!(total as u64, c.counts.total(), "{}", sc.name);
            for x in &p.sample {
                for &l in &x.location_id {
                    assert!(l >= 1 && l as usize <= p.location.len());
                }
            }
        }
    }

    #[test]
    fn extreme_values_from_a_file_saturate_never_panic() {
        let mut t = FrameTable::new();
        let (file, f) = (t.intern_str("x.py"), t.intern_str("f"));
        let frame = t.intern(crate::model::Frame {
            opcode: None,
            kind: FrameKind::Python,
            file,
            func: f,
            location: Some(Location {
                line: i32::MIN,
                end_line: i32::MAX,
                col: -1,
                end_col: -1,
            }),
        });
        let mut c = PprofCollector::new(Output::Stdout);
        c.collect(&sample(u64::MAX, &[(u64::MAX, &[frame, frame])]), &t);
        c.collect(&sample(0, &[(0, &[frame])]), &t);
        for duration_s in [f64::NAN, f64::INFINITY, -1.0, 1e300] {
            let stats = RunStats {
                interval_us: u64::MAX,
                duration_s,
                ..RunStats::default()
            };
            let p = decoded(&c.render(&t, &stats).unwrap());
            assert_eq!(p.period, i64::MAX);
            assert_eq!(p.time_nanos, 0);
            assert!(p.duration_nanos >= 0);
        }
    }

    #[test]
    fn an_empty_run_is_a_valid_profile() {
        let c = PprofCollector::new(Output::Stdout);
        let p = decoded(&c.render(&FrameTable::new(), &RunStats::default()).unwrap());
        assert!(p.sample.is_empty());
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.time_nanos, 0);
    }
}
