//! The synthetic stacks and the reference's outputs for them
//! (`fixtures/reference/`, made by `scripts/gen-reference-fixtures.sh`),
//! shared by the collectors' tests: the unit tests here, and the
//! integration tests that load this same file (`tests/pstats_files.rs`,
//! whose crate root re-exports `tachyon::model` as `model`).
use std::path::PathBuf;

use serde_json::Value;

use crate::model::{Frame, FrameKind, FrameTable, NO_FILE, Sample, ThreadSample};

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference")
}

pub fn read(name: &str) -> String {
    let p = dir().join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Hand-made stacks, as the scripts under scripts/ feed them to the
/// reference's collectors.
pub struct Scenario {
    pub name: String,
    pub interval_us: u64,
    pub frames: FrameTable,
    pub samples: Vec<Sample>,
    /// The scenario's JSON, for collector-specific fields (`pstats`
    /// runs, `jsonl_mode`).
    pub raw: Value,
}

/// `fixtures/reference/scenarios.json`, the scenarios every collector
/// is compared on.
pub fn scenarios() -> Vec<Scenario> {
    load(&dir().join("scenarios.json"))
}

pub fn load(path: &std::path::Path) -> Vec<Scenario> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let all: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for sc in all["scenarios"].as_array().unwrap() {
        let mut frames = FrameTable::new();
        let mut stacks = std::collections::HashMap::new();
        for (name, entries) in sc["stacks"].as_object().unwrap() {
            let ids: Vec<u32> = entries
                .as_array()
                .unwrap()
                .iter()
                .map(|e| frame(&mut frames, e))
                .collect();
            stacks.insert(name.clone(), ids);
        }
        let mut samples = Vec::new();
        for s in sc["samples"].as_array().unwrap() {
            let threads: Vec<ThreadSample> = s["threads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| ThreadSample {
                    tid: t[0].as_u64().unwrap(),
                    frames: stacks[t[1].as_str().unwrap()].clone(),
                    ..Default::default()
                })
                .collect();
            for _ in 0..s["repeat"].as_u64().unwrap() {
                samples.push(Sample {
                    pid: None,
                    timestamp_us: 0,
                    threads: threads.clone(),
                });
            }
        }
        out.push(Scenario {
            name: sc["name"].as_str().unwrap().to_string(),
            interval_us: sc["interval_us"].as_u64().unwrap(),
            frames,
            samples,
            raw: sc.clone(),
        });
    }
    out
}

/// A frame entry: `[file, line, func]`, `[file, line, func, col]` or
/// `[file, line, func, col, end_line, end_col]`; `~` at line 0 is a
/// synthetic frame.
fn frame(t: &mut FrameTable, e: &Value) -> u32 {
    let int = |i: usize| e[i].as_i64().unwrap() as i32;
    let file = e[0].as_str().unwrap();
    let func = e[2].as_str().unwrap();
    let line = int(1);
    if file == NO_FILE && line == 0 {
        return t.synthetic(FrameKind::synthetic_named(func), func);
    }
    let (col, end_line, end_col) = match e.as_array().unwrap().len() {
        6 => (int(3), int(4), int(5)),
        4 => (int(3), line, int(3) + 1),
        _ => (0, line, 1),
    };
    let file = t.intern_str(file);
    let func = t.intern_str(func);
    t.intern(Frame {
        opcode: None,
        kind: FrameKind::Python,
        file,
        func,
        location: Some(crate::model::Location {
            line,
            end_line,
            col,
            end_col,
        }),
    })
}

/// A Python frame of `func` in `file` at `line` (column 0), interned in `t`.
pub fn py(t: &mut FrameTable, file: &str, func: &str, line: i32) -> u32 {
    let (file, func) = (t.intern_str(file), t.intern_str(func));
    t.intern(Frame {
        opcode: None,
        kind: FrameKind::Python,
        file,
        func,
        location: Some(crate::model::Location {
            line,
            end_line: line,
            col: 0,
            end_col: 1,
        }),
    })
}

/// A sample of one thread (tid 1), its frames given root first.
pub fn sample(root_first: &[u32]) -> Sample {
    Sample {
        pid: None,
        timestamp_us: 0,
        threads: vec![ThreadSample {
            tid: 1,
            frames: root_first.iter().rev().copied().collect(),
            ..Default::default()
        }],
    }
}
