//! Collapsed stacks (`--collapsed`), the reference's format byte for byte:
//! one line per distinct (thread, stack), `tid:<tid>;<frame>;...;<frame>
//! <count>` from root to leaf, a frame being `basename(file):func:line` or,
//! for synthetic frames (file `~`, line 0), just the name (`<GC>`). Lines
//! are sorted by count, most first, then by text.
//!
//! Samples are counted by frame-id sequence (no strings per sample); lines
//! are rendered once, at the end. Stacks are told apart by `(file, line,
//! func)` with full paths, as the reference does, so frames differing only
//! in column merge, and two stacks differing only in a file's directory stay
//! two lines even when their text is the same (the reference prints both).
//!
//! In a merged profile of several processes (`--subprocesses --merge`)
//! each line starts with its process, `process <pid> (<command>);tid:...`,
//! so flame graph tools draw a root per process.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::merge::Processes;
use super::pstats::basename;
use super::stacks::StackCounts;
use super::{Collector, Output, RunStats};
use crate::error::Result;
use crate::model::{FrameTable, Sample, StrId};

/// Counts distinct stacks per thread; see the module documentation.
pub struct CollapsedCollector {
    output: Output,
    counts: StackCounts,
    processes: Processes,
}

impl CollapsedCollector {
    pub fn new(output: Output) -> Self {
        CollapsedCollector {
            output,
            counts: StackCounts::new(),
            processes: Processes::default(),
        }
    }

    /// The file's text.
    fn render(&self, frames: &FrameTable) -> String {
        // Merge stacks equal as (file, line, func) sequences.
        type Loc = (Option<StrId>, i32, StrId);
        let mut merged: HashMap<(u64, Vec<Loc>), u64> = HashMap::new();
        for cell in self.counts.cells() {
            let locs = self
                .counts
                .stack(cell.stack)
                .iter()
                .map(|&id| {
                    let f = frames.frame(id);
                    (f.file(), f.line(), f.func)
                })
                .collect();
            *merged.entry((cell.tid, locs)).or_insert(0) += cell.count;
        }
        let mut lines: Vec<(String, u64)> = merged
            .into_iter()
            .map(|((tid, locs), n)| {
                let mut s = match self.processes.of_thread(tid) {
                    Some(pid) => format!(
                        "process {pid} ({});tid:{tid}",
                        self.processes.command(pid).replace(';', ",")
                    ),
                    None => format!("tid:{tid}"),
                };
                for &(file, line, func) in locs.iter().rev() {
                    let func = frames.str(func);
                    match file {
                        None => {
                            let _ = write!(s, ";{func}");
                        }
                        Some(file) => {
                            let file = basename(frames.str(file));
                            let _ = write!(s, ";{file}:{func}:{line}");
                        }
                    }
                }
                (s, n)
            })
            .collect();
        lines.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut out = String::new();
        for (s, n) in lines {
            let _ = writeln!(out, "{s} {n}");
        }
        out
    }
}

impl Collector for CollapsedCollector {
    fn collect(&mut self, sample: &Sample, _frames: &FrameTable) {
        self.processes.note(sample);
        self.counts.add(sample);
    }

    fn process_named(&mut self, pid: u32, command: &str) {
        self.processes.name(pid, command);
    }

    fn finish(&mut self, frames: &FrameTable, _stats: &RunStats) -> Result<()> {
        let text = self.render(frames);
        self.output
            .write(text.as_bytes(), "Collapsed stack output written to ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::scenarios as fixtures;

    fn collected(sc: &fixtures::Scenario, output: Output) -> CollapsedCollector {
        let mut c = CollapsedCollector::new(output);
        for s in &sc.samples {
            c.collect(s, &sc.frames);
        }
        c
    }

    #[test]
    fn matches_reference_byte_for_byte() {
        let all = fixtures::scenarios();
        assert!(all.len() >= 5);
        for sc in &all {
            let got = collected(sc, Output::Stdout).render(&sc.frames);
            let want = fixtures::read(&format!("{}.collapsed.txt", sc.name));
            assert_eq!(got, want, "{}: collapsed output differs", sc.name);
        }
    }

    #[test]
    fn writes_the_file() {
        let sc = fixtures::scenarios().into_iter().next().unwrap();
        let path =
            std::env::temp_dir().join(format!("tachyon-collapsed-{}.txt", std::process::id()));
        let mut c = collected(&sc, Output::File(path.clone()));
        c.finish(&sc.frames, &RunStats::default()).unwrap();
        let got = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(got, fixtures::read(&format!("{}.collapsed.txt", sc.name)));
    }

    #[test]
    fn frames_differing_in_column_only_share_a_line() {
        let mut t = FrameTable::new();
        let (file, func) = (t.intern_str("/a/x.py"), t.intern_str("f"));
        let mk = |col| crate::model::Frame {
            opcode: None,
            kind: crate::model::FrameKind::Python,
            file,
            func,
            location: Some(crate::model::Location {
                line: 3,
                end_line: 3,
                col,
                end_col: col + 1,
            }),
        };
        let (a, b) = (t.intern(mk(1)), t.intern(mk(9)));
        let gc = t.synthetic(crate::model::FrameKind::Gc, "<GC>");
        let sample = |frames: Vec<crate::model::FrameId>| Sample {
            pid: None,
            timestamp_us: 0,
            threads: vec![crate::model::ThreadSample {
                tid: 9,
                frames,
                ..Default::default()
            }],
        };
        let mut c = CollapsedCollector::new(Output::Stdout);
        c.collect(&sample(vec![a]), &t);
        c.collect(&sample(vec![b]), &t);
        c.collect(&sample(vec![gc, b]), &t);
        assert_eq!(c.render(&t), "tid:9;x.py:f:3 2\ntid:9;x.py:f:3;<GC> 1\n");
    }

    #[test]
    fn synthetic_frames_read_back_from_a_recording_render_as_recorded() {
        use crate::binfmt::reader::{BinaryReader, ReadOptions};
        use crate::binfmt::writer::{BinaryWriter, WriterOptions};
        use crate::model::FrameKind;
        let mut t = FrameTable::new();
        let f = fixtures::py(&mut t, "/a/x.py", "f", 3);
        let truncated = t.synthetic(FrameKind::Truncated, "<truncated>");
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let native = t.synthetic(FrameKind::Native, "<native>");
        let sample = Sample {
            pid: None,
            timestamp_us: 1,
            threads: vec![crate::model::ThreadSample {
                tid: 9,
                frames: vec![gc, f, native, f, truncated],
                ..Default::default()
            }],
        };
        let mut w = BinaryWriter::new(
            std::io::Cursor::new(Vec::new()),
            "t".into(),
            WriterOptions::default(),
        )
        .unwrap();
        w.write_sample(&sample, &t);
        let bytes = w.finish().unwrap().into_inner();
        let mut r = BinaryReader::new(
            std::io::Cursor::new(bytes),
            "t".into(),
            ReadOptions::default(),
        )
        .unwrap();
        let back = r.read_samples().unwrap();
        let kinds: Vec<FrameKind> = back[0].threads[0]
            .frames
            .iter()
            .map(|&id| r.frames().frame(id).kind)
            .collect();
        use FrameKind::*;
        assert_eq!(kinds, [Gc, Python, Native, Python, Truncated]);
        let mut live = CollapsedCollector::new(Output::Stdout);
        live.collect(&sample, &t);
        let mut replayed = CollapsedCollector::new(Output::Stdout);
        replayed.collect(&back[0], r.frames());
        let text = "tid:9;<truncated>;x.py:f:3;<native>;x.py:f:3;<GC> 1\n";
        assert_eq!(live.render(&t), text);
        assert_eq!(replayed.render(r.frames()), text);
    }

    #[test]
    fn merged_lines_start_with_their_process() {
        let mut t = FrameTable::new();
        let (file, func) = (t.intern_str("/a/x.py"), t.intern_str("f"));
        let f = t.intern(crate::model::Frame {
            opcode: None,
            kind: crate::model::FrameKind::Python,
            file,
            func,
            location: None,
        });
        let sample = |pid, tid| Sample {
            timestamp_us: 0,
            threads: vec![crate::model::ThreadSample {
                tid,
                frames: vec![f],
                ..Default::default()
            }],
            pid: Some(pid),
        };
        let mut c = CollapsedCollector::new(Output::Stdout);
        c.process_named(5, "python3 a;b.py");
        c.collect(&sample(5, 5), &t);
        c.collect(&sample(5, 5), &t);
        c.collect(&sample(6, 6), &t);
        assert_eq!(
            c.render(&t),
            "process 5 (python3 a,b.py);tid:5;x.py:f:0 2\nprocess 6 (python);tid:6;x.py:f:0 1\n"
        );
    }
}
