//! speedscope's file format (`--speedscope`): one "sampled" profile per
//! thread, named by its thread id, sharing one frame table. In a merged
//! profile of several processes (`--subprocesses --merge`), one per process
//! and thread, named `python3 app.py (pid 42) thread 43`, in pid order.
//!
//! - Frames are told apart by `(file, function, line)`, as the collapsed
//!   stacks and the flame graph tell them apart (a column does not split a
//!   frame); each has `name` (the function), `file` and `line`. A synthetic
//!   frame (`<GC>`, `<native>`, `<truncated>`) has its name only.
//! - A thread's samples are its stacks in time order, root first, each
//!   weighed in microseconds: the sampling interval. speedscope shows a
//!   weight in microseconds as time (µs, ms, s) in its time axis, tooltips
//!   and tables, so a frame reads as the time the samples stand for, the
//!   pstats table's seconds; a plain count (unit "none") would show bare
//!   numbers. Consecutive samples of the same stack are one entry with
//!   their weights added: speedscope merges them the same way when it
//!   reads the file, so nothing is lost and the file stays small. A run
//!   without an interval (none was stored) weighs each sample 1, unit
//!   "none".
//! - `startValue` is the thread's first sample, in microseconds since the
//!   epoch; `endValue` is that plus the thread's weights, since speedscope
//!   lays samples end to end over `endValue - startValue`.
//! - Threads come in thread-id order and frames in the order that walk
//!   first meets them, so a recording replayed gives the same file as the
//!   run that recorded it. The profile speedscope opens first is the main
//!   thread's, or else the thread with the most samples.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::stacks::{StackCounts, StackId};
use super::{Collector, Output, RunStats};
use crate::error::Result;
use crate::model::{FrameTable, Sample, StrId, status};

const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// Writes a speedscope file; see the module documentation.
pub struct SpeedscopeCollector {
    output: Output,
    counts: StackCounts,
    /// By (pid, tid); the pid 0 in a profile of one process.
    threads: BTreeMap<(u32, u64), Thread>,
    processes: super::merge::Processes,
}

/// One thread's samples: runs of one stack, in time order.
#[derive(Default)]
struct Thread {
    first_us: u64,
    runs: Vec<(StackId, u64)>,
    samples: u64,
    main: bool,
}

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    exporter: String,
    name: &'static str,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    shared: Shared<'a>,
    profiles: Vec<Profile>,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<Frame<'a>>,
}

#[derive(Serialize)]
struct Frame<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<i32>,
}

#[derive(Serialize)]
struct Profile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<u32>>,
    weights: Vec<u64>,
}

impl SpeedscopeCollector {
    pub fn new(output: Output) -> Self {
        SpeedscopeCollector {
            output,
            counts: StackCounts::new(),
            threads: BTreeMap::new(),
            processes: Default::default(),
        }
    }

    /// The file's JSON.
    fn render(&self, frames: &FrameTable, stats: &RunStats) -> Vec<u8> {
        let (unit, per_sample) = match stats.interval_us {
            0 => ("none", 1),
            us => ("microseconds", us),
        };
        let mut table: Vec<Frame> = Vec::new();
        let mut index: HashMap<(StrId, StrId, Option<i32>), u32> = HashMap::new();
        // Each distinct stack as frame indices, root first, made when the
        // walk first meets it.
        let mut stacks: Vec<Option<Vec<u32>>> = Vec::new();
        let mut profiles = Vec::new();
        for (&(pid, tid), t) in &self.threads {
            let mut samples: Vec<Vec<u32>> = Vec::with_capacity(t.runs.len());
            let mut weights: Vec<u64> = Vec::with_capacity(t.runs.len());
            for &(id, n) in &t.runs {
                let slot = id as usize;
                if stacks.len() <= slot {
                    stacks.resize(slot + 1, None);
                }
                let stack = stacks[slot].get_or_insert_with(|| {
                    self.counts
                        .stack(id)
                        .iter()
                        .rev()
                        .map(|&f| {
                            let f = frames.frame(f);
                            let line = f.location.map(|l| l.line);
                            *index.entry((f.file, f.func, line)).or_insert_with(|| {
                                table.push(Frame {
                                    name: frames.str(f.func),
                                    file: f.file().map(|file| frames.str(file)),
                                    line,
                                });
                                table.len() as u32 - 1
                            })
                        })
                        .collect()
                });
                let w = n.saturating_mul(per_sample);
                // Stacks that differ only in columns are one run.
                match (samples.last(), weights.last_mut()) {
                    (Some(last), Some(lw)) if last == stack => *lw = w.saturating_add(*lw),
                    _ => {
                        samples.push(stack.clone());
                        weights.push(w);
                    }
                }
            }
            let total = weights.iter().fold(0u64, |a, &w| a.saturating_add(w));
            profiles.push(Profile {
                kind: "sampled",
                name: match pid {
                    0 => format!("thread {tid}"),
                    pid => format!("{} thread {tid}", self.processes.label(pid)),
                },
                unit,
                start_value: t.first_us,
                end_value: t.first_us.saturating_add(total),
                samples,
                weights,
            });
        }
        let threads: Vec<&Thread> = self.threads.values().collect();
        let active = threads.iter().position(|t| t.main).unwrap_or_else(|| {
            // The first of the busiest.
            let most = threads.iter().map(|t| t.samples).max().unwrap_or(0);
            threads.iter().position(|t| t.samples == most).unwrap_or(0)
        });
        let file = File {
            schema: SCHEMA,
            exporter: format!("tachyon@{}", env!("CARGO_PKG_VERSION")),
            name: "tachyon",
            active_profile_index: active,
            shared: Shared { frames: table },
            profiles,
        };
        // Plain data (strings, integers): serializing it cannot fail.
        serde_json::to_vec(&file).unwrap_or_default()
    }
}

impl Collector for SpeedscopeCollector {
    fn process_named(&mut self, pid: u32, command: &str) {
        self.processes.name(pid, command);
    }

    fn collect(&mut self, sample: &Sample, _frames: &FrameTable) {
        let pid = sample.pid.unwrap_or(0);
        for ts in &sample.threads {
            if ts.frames.is_empty() {
                continue;
            }
            let id = self.counts.add_stack(ts.tid, &ts.frames, 1);
            let t = self.threads.entry((pid, ts.tid)).or_insert_with(|| Thread {
                first_us: sample.timestamp_us,
                ..Thread::default()
            });
            t.samples += 1;
            t.main |= ts.status & status::MAIN_THREAD != 0;
            match t.runs.last_mut() {
                Some((last, n)) if *last == id => *n += 1,
                _ => t.runs.push((id, 1)),
            }
        }
    }

    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()> {
        let json = self.render(frames, stats);
        self.output.write(&json, "Speedscope profile written to ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::scenarios as fixtures;
    use crate::model::{FrameKind, Location, ThreadSample};
    use serde_json::{Value, json};

    fn sample(ts: u64, threads: &[(u64, u32, &[u32])]) -> Sample {
        Sample {
            pid: None,
            timestamp_us: ts,
            threads: threads
                .iter()
                .map(|&(tid, status, f)| ThreadSample {
                    tid,
                    status,
                    frames: f.to_vec(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn stats(interval_us: u64) -> RunStats {
        RunStats {
            interval_us,
            ..RunStats::default()
        }
    }

    #[test]
    fn threads_frames_runs_and_weights() {
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
        let (f1, f1b, g5) = (
            t.intern(at(f, 1, 0)),
            t.intern(at(f, 1, 7)),
            t.intern(at(g, 5, 0)),
        );
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let mut c = SpeedscopeCollector::new(Output::Stdout);
        // Thread 9 (not main) first; thread 3 is the main thread.
        c.collect(&sample(1000, &[(9, 0, &[g5, f1]), (3, 32, &[f1])]), &t);
        c.collect(&sample(2000, &[(9, 0, &[g5, f1b]), (3, 32, &[])]), &t);
        c.collect(&sample(3000, &[(9, 0, &[gc, g5, f1])]), &t);
        let v: Value = serde_json::from_slice(&c.render(&t, &stats(1000))).unwrap();
        assert_eq!(v["$schema"], SCHEMA);
        assert_eq!(
            v["shared"]["frames"],
            json!([
                {"name": "f", "file": "/app/x.py", "line": 1},
                {"name": "g", "file": "/app/x.py", "line": 5},
                {"name": "<GC>"},
            ])
        );
        let p = &v["profiles"];
        assert_eq!(p[0]["name"], "thread 3");
        assert_eq!(p[0]["samples"], json!([[0]]));
        assert_eq!(p[0]["weights"], json!([1000]));
        assert_eq!(
            (&p[0]["startValue"], &p[0]["endValue"]),
            (&json!(1000), &json!(2000))
        );
        assert_eq!(p[1]["name"], "thread 9");
        // The column-only difference merges into one run of two.
        assert_eq!(p[1]["samples"], json!([[0, 1], [0, 1, 2]]));
        assert_eq!(p[1]["weights"], json!([2000, 1000]));
        assert_eq!(p[1]["unit"], "microseconds");
        assert_eq!(
            (&p[1]["startValue"], &p[1]["endValue"]),
            (&json!(1000), &json!(4000))
        );
        assert_eq!(v["activeProfileIndex"], 0, "the main thread");
    }

    #[test]
    fn without_an_interval_samples_are_counted() {
        let sc = fixtures::scenarios().into_iter().next().unwrap();
        let mut c = SpeedscopeCollector::new(Output::Stdout);
        for s in &sc.samples {
            c.collect(s, &sc.frames);
        }
        let v: Value = serde_json::from_slice(&c.render(&sc.frames, &stats(0))).unwrap();
        let mut total = 0;
        for p in v["profiles"].as_array().unwrap() {
            assert_eq!(p["unit"], "none");
            total += p["weights"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_u64().unwrap())
                .sum::<u64>();
        }
        assert_eq!(total, c.counts.total());
    }

    #[test]
    fn extreme_values_from_a_file_saturate_never_panic() {
        let mut t = FrameTable::new();
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let mut c = SpeedscopeCollector::new(Output::Stdout);
        c.collect(&sample(u64::MAX, &[(u64::MAX, 0, &[gc])]), &t);
        c.collect(&sample(u64::MAX, &[(u64::MAX, 0, &[gc])]), &t);
        let v: Value = serde_json::from_slice(&c.render(&t, &stats(u64::MAX))).unwrap();
        assert_eq!(v["profiles"][0]["weights"], json!([u64::MAX]));
        assert_eq!(v["profiles"][0]["endValue"], json!(u64::MAX));
    }

    #[test]
    fn no_samples_is_a_valid_empty_file() {
        let mut c = SpeedscopeCollector::new(Output::Stdout);
        let t = FrameTable::new();
        c.collect(&sample(5, &[(1, 0, &[])]), &t);
        let v: Value = serde_json::from_slice(&c.render(&t, &stats(100))).unwrap();
        assert_eq!(v["profiles"], json!([]));
        assert_eq!(v["activeProfileIndex"], 0);
    }
}
