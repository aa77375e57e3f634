//! JSON Lines (`--jsonl`), the reference's record stream record for record
//! (`profiling/sampling/jsonl_collector.py`; its module docstring is the
//! specification). One compact JSON object a line, in this order:
//!
//! 1. `meta`: `sample_interval_usec` and `mode`;
//! 2. `string_table` chunks: `{"str_id", "value"}`, every file and function
//!    name once;
//! 3. `frame_table` chunks: `{"frame_id", "path_str_id", "func_str_id",
//!    "line", "end_line", "col", "end_col"}`, the last three omitted when
//!    unknown (`end_line` ≤ 0, `col`/`end_col` < 0);
//! 4. `agg` chunks: `{"frame_id", "self", "cumulative"}` for every frame,
//!    with the run's `samples_total` repeated on each chunk;
//! 5. `end`: `samples_total` again, the sign that the file is complete.
//!
//! A merged profile of several processes (`--subprocesses --merge`) adds,
//! after `meta`, a `process` record per process (`pid`, `command`,
//! `samples_total`), and its `agg` chunks come per process, each with its
//! `pid` and that process's `samples_total` (the tables stay shared; `end`
//! has every process's samples).
//!
//! Every record carries `"v":0` and the run's `run_id` (a random UUID4 in
//! hex). Chunks hold at most 256 entries. A sample is one thread's stack, so
//! `samples_total` counts non-empty stacks; `self` counts the samples a
//! frame was the leaf of, `cumulative` those it appeared in at all (once per
//! sample, however deep the recursion).
//!
//! Ids follow the reference's first-seen order (stacks leaf first, a
//! frame's function name interned before its file), not the
//! [`FrameTable`]'s, so the same samples give the same file. Frames are told
//! apart by file, function and full location (line, end line, columns), as
//! the reference does; tachyon frames differing only in a location field the
//! format omits (`end_line` 0 or -1) are one frame. Strings are escaped like
//! Python's `json.dumps`: everything outside printable ASCII becomes
//! `\uXXXX` (UTF-16, lower-case hex).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};

use serde::Serialize;

use super::atomic::AtomicFile;
use super::stacks::StackCounts;
use super::{Collector, Output, RunStats, write_stdout};
use crate::error::{Error, Result};
use crate::model::{FrameTable, Sample, StrId};

/// Entries per `string_table`, `frame_table` and `agg` record.
const CHUNK_SIZE: usize = 256;
/// The records' schema version (`"v"`).
const SCHEMA_VERSION: u32 = 0;

/// One exported frame; also its identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
struct JFrame {
    #[serde(rename = "path_str_id")]
    path: u32,
    #[serde(rename = "func_str_id")]
    func: u32,
    line: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_line: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    col: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_col: Option<i32>,
}

/// Counts per frame; see the module documentation.
pub struct JsonlCollector {
    output: Output,
    run_id: String,
    counts: StackCounts,
    /// A merged profile's counts per process.
    per_process: std::collections::BTreeMap<u32, StackCounts>,
    processes: super::merge::Processes,
}

/// What the records carry, in the reference's first-seen order.
struct Export {
    /// Exported string id → tachyon string id.
    strings: Vec<StrId>,
    /// Exported frame id → frame, self and cumulative samples.
    frames: Vec<JFrame>,
    self_counts: Vec<u64>,
    cumulative: Vec<u64>,
    samples_total: u64,
    /// Per process of a merged profile: its pid, samples, and per exported
    /// frame its self and cumulative samples.
    processes: Vec<(u32, u64, Vec<u64>, Vec<u64>)>,
}

impl JsonlCollector {
    pub fn new(output: Output) -> Self {
        JsonlCollector {
            output,
            run_id: uuid4_hex(),
            counts: StackCounts::new(),
            per_process: Default::default(),
            processes: Default::default(),
        }
    }

    /// The run's id, as every record carries it.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Strings and frames numbered as the reference numbers them while it
    /// streams (frames in first-seen order, a frame's function name
    /// before its file), with their counts.
    fn export(&self, table: &FrameTable) -> Export {
        let mut strings: Vec<StrId> = Vec::new();
        let mut str_ids: HashMap<StrId, u32> = HashMap::new();
        let mut str_id = |id: StrId| {
            *str_ids.entry(id).or_insert_with(|| {
                strings.push(id);
                (strings.len() - 1) as u32
            })
        };
        let k = self.counts.self_and_cumulative(|id| {
            let f = table.frame(id);
            let func = str_id(f.func);
            let path = str_id(f.file);
            JFrame {
                path,
                func,
                line: f.line(),
                end_line: f.location.map(|l| l.end_line).filter(|&l| l > 0),
                col: f.location.map(|l| l.col).filter(|&c| c >= 0),
                end_col: f.location.map(|l| l.end_col).filter(|&c| c >= 0),
            }
        });
        let index: HashMap<JFrame, usize> =
            k.keys.iter().enumerate().map(|(i, &f)| (f, i)).collect();
        let processes = self
            .per_process
            .iter()
            .map(|(&pid, counts)| {
                let (mut own, mut cum) = (vec![0; k.keys.len()], vec![0; k.keys.len()]);
                // Keyed by frame id; the process's frames are among the
                // whole profile's, exported above.
                let p = counts.self_and_cumulative(|id| id);
                for (j, &id) in p.keys.iter().enumerate() {
                    let f = table.frame(id);
                    let (Some(&path), Some(&func)) = (str_ids.get(&f.file), str_ids.get(&f.func))
                    else {
                        continue;
                    };
                    let jf = JFrame {
                        path,
                        func,
                        line: f.line(),
                        end_line: f.location.map(|l| l.end_line).filter(|&l| l > 0),
                        col: f.location.map(|l| l.col).filter(|&c| c >= 0),
                        end_col: f.location.map(|l| l.end_col).filter(|&c| c >= 0),
                    };
                    if let Some(&i) = index.get(&jf) {
                        own[i] += p.direct[j];
                        cum[i] += p.cumulative[j];
                    }
                }
                (pid, counts.total(), own, cum)
            })
            .collect();
        Export {
            strings,
            frames: k.keys,
            self_counts: k.direct,
            cumulative: k.cumulative,
            samples_total: self.counts.total(),
            processes,
        }
    }

    /// Every record, one a line.
    fn write_records<W: Write>(
        &self,
        w: &mut W,
        table: &FrameTable,
        stats: &RunStats,
    ) -> io::Result<()> {
        let x = self.export(table);
        write_record(
            w,
            &Meta {
                head: self.head("meta"),
                sample_interval_usec: stats.interval_us,
                mode: stats.mode.as_str(),
            },
        )?;
        for (pid, total, _, _) in &x.processes {
            write_record(
                w,
                &Process {
                    head: self.head("process"),
                    pid: *pid,
                    command: self.processes.command(*pid),
                    samples_total: *total,
                },
            )?;
        }
        self.write_tables(w, &x, table)?;
        self.write_aggs(w, &x)?;
        write_record(
            w,
            &End {
                head: self.head("end"),
                samples_total: x.samples_total,
            },
        )
    }

    /// Every record starts so: its type, the schema, the run.
    fn head(&self, kind: &'static str) -> Head<'_> {
        Head {
            kind,
            v: SCHEMA_VERSION,
            run_id: &self.run_id,
        }
    }

    /// The string and frame tables, [`CHUNK_SIZE`] entries a record.
    fn write_tables<W: Write>(&self, w: &mut W, x: &Export, table: &FrameTable) -> io::Result<()> {
        for (n, chunk) in x.strings.chunks(CHUNK_SIZE).enumerate() {
            let strings: Vec<StrEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, &id)| StrEntry {
                    str_id: (n * CHUNK_SIZE + i) as u32,
                    value: table.str(id),
                })
                .collect();
            write_record(
                w,
                &StringTable {
                    head: self.head("string_table"),
                    strings,
                },
            )?;
        }
        for (n, chunk) in x.frames.chunks(CHUNK_SIZE).enumerate() {
            let frames: Vec<FrameEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, &frame)| FrameEntry {
                    frame_id: (n * CHUNK_SIZE + i) as u32,
                    frame,
                })
                .collect();
            write_record(
                w,
                &FrameTableRecord {
                    head: self.head("frame_table"),
                    frames,
                },
            )?;
        }
        Ok(())
    }

    /// Each frame's self and cumulative samples, [`CHUNK_SIZE`] frames a
    /// record: for the whole profile, or per process of a merged one (its
    /// frames with samples only).
    fn write_aggs<W: Write>(&self, w: &mut W, x: &Export) -> io::Result<()> {
        let whole = (None, x.samples_total, &x.self_counts, &x.cumulative);
        let parts: Vec<_> = match x.processes.is_empty() {
            true => vec![whole],
            false => x
                .processes
                .iter()
                .map(|(pid, n, own, cum)| (Some(*pid), *n, own, cum))
                .collect(),
        };
        for (pid, samples_total, own, cum) in parts {
            for start in (0..x.frames.len()).step_by(CHUNK_SIZE) {
                let end = (start + CHUNK_SIZE).min(x.frames.len());
                let entries: Vec<AggEntry> = (start..end)
                    .filter(|&j| pid.is_none() || cum[j] > 0)
                    .map(|j| AggEntry {
                        frame_id: j as u32,
                        self_: own[j],
                        cumulative: cum[j],
                    })
                    .collect();
                if entries.is_empty() {
                    continue;
                }
                write_record(
                    w,
                    &Agg {
                        head: self.head("agg"),
                        pid,
                        kind: "frame",
                        scope: "final",
                        samples_total,
                        entries,
                    },
                )?;
            }
        }
        Ok(())
    }

    /// The file's text.
    fn render(&self, table: &FrameTable, stats: &RunStats) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_records(&mut out, table, stats)
            .expect("writing to memory cannot fail");
        out
    }
}

impl Collector for JsonlCollector {
    fn collect(&mut self, sample: &Sample, _frames: &FrameTable) {
        self.counts.add(sample);
        if let Some(pid) = sample.pid {
            self.per_process.entry(pid).or_default().add(sample);
        }
    }

    fn process_named(&mut self, pid: u32, command: &str) {
        self.processes.name(pid, command);
    }

    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()> {
        match &self.output {
            Output::Stdout => write_stdout(&self.render(frames, stats)),
            Output::File(path) => {
                let err = |e| Error::io(format!("cannot write {}", path.display()), e);
                let mut w = AtomicFile::create(path)?;
                self.write_records(&mut w, frames, stats).map_err(err)?;
                w.commit()?;
                crate::outln!("JSONL profile written to {}", path.display());
                Ok(())
            }
        }
    }
}

#[derive(Serialize)]
struct Head<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    v: u32,
    run_id: &'a str,
}

#[derive(Serialize)]
struct Meta<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    sample_interval_usec: u64,
    mode: &'static str,
}

#[derive(Serialize)]
struct StrEntry<'a> {
    str_id: u32,
    value: &'a str,
}

#[derive(Serialize)]
struct StringTable<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    strings: Vec<StrEntry<'a>>,
}

#[derive(Serialize)]
struct FrameEntry {
    frame_id: u32,
    #[serde(flatten)]
    frame: JFrame,
}

#[derive(Serialize)]
struct FrameTableRecord<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    frames: Vec<FrameEntry>,
}

#[derive(Serialize)]
struct AggEntry {
    frame_id: u32,
    #[serde(rename = "self")]
    self_: u64,
    cumulative: u64,
}

#[derive(Serialize)]
struct Process<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    pid: u32,
    command: &'a str,
    samples_total: u64,
}

#[derive(Serialize)]
struct Agg<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    /// The process counted, in a merged profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    kind: &'static str,
    scope: &'static str,
    samples_total: u64,
    entries: Vec<AggEntry>,
}

#[derive(Serialize)]
struct End<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    samples_total: u64,
}

/// One record and its newline, as `json.dumps(record, separators=(",",
/// ":"))` writes it.
fn write_record<W: Write, T: Serialize>(w: &mut W, record: &T) -> io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(&mut *w, PyFormatter);
    record.serialize(&mut ser).map_err(io::Error::other)?;
    w.write_all(b"\n")
}

/// serde_json's compact output with Python's `ensure_ascii`: serde_json
/// already escapes `"`, `\` and control characters as Python does
/// (`\n`-style where there is one, else `\u00XX`); this escapes the rest of
/// what is not printable ASCII (DEL and every non-ASCII character, as
/// UTF-16 code units).
struct PyFormatter;

impl serde_json::ser::Formatter for PyFormatter {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let plain = |c: char| (' '..='~').contains(&c);
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if plain(c) {
                continue;
            }
            writer.write_all(&fragment.as_bytes()[start..i])?;
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(writer, "\\u{u:04x}")?;
            }
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// `uuid.uuid4().hex`: 16 random bytes with the version (4) and variant
/// (RFC 4122) bits set, in lower-case hex.
fn uuid4_hex() -> String {
    let mut b = [0u8; 16];
    let urandom = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if urandom.is_err() {
        // std's randomly keyed SipHash, fed the time and the process id.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, half) in b.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            h.write_u128(now);
            h.write_u32(std::process::id());
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::Value;

    use super::*;
    use crate::collect::scenarios as fixtures;
    use crate::model::Mode;
    use crate::model::{Frame, FrameKind, ThreadSample};

    /// A scenario of `fixtures/reference/scenarios.json` or
    /// `fixtures/reference/jsonl/scenarios.json` (which adds entries with a
    /// full location and a mode), as `scripts/reference-jsonl.py` feeds it
    /// to the reference.
    struct Scenario {
        name: String,
        interval_us: u64,
        mode: Mode,
        frames: FrameTable,
        samples: Vec<Sample>,
    }

    fn load(path: &Path) -> Vec<Scenario> {
        fixtures::load(path)
            .into_iter()
            .map(|sc| {
                let mode = match sc.raw.get("jsonl_mode").and_then(Value::as_str) {
                    None | Some("wall") => Mode::Wall,
                    Some("cpu") => Mode::Cpu,
                    Some("gil") => Mode::Gil,
                    Some("all") => Mode::All,
                    Some("exception") => Mode::Exception,
                    Some(m) => panic!("unknown mode {m}"),
                };
                Scenario {
                    name: sc.name,
                    interval_us: sc.interval_us,
                    mode,
                    frames: sc.frames,
                    samples: sc.samples,
                }
            })
            .collect()
    }

    fn all_scenarios() -> Vec<Scenario> {
        let mut all = load(&fixtures::dir().join("scenarios.json"));
        all.extend(load(&fixtures::dir().join("jsonl/scenarios.json")));
        all
    }

    fn stats(sc: &Scenario) -> RunStats {
        RunStats {
            interval_us: sc.interval_us,
            mode: sc.mode,
            ..Default::default()
        }
    }

    fn collected(sc: &Scenario, output: Output) -> JsonlCollector {
        let mut c = JsonlCollector::new(output);
        for s in &sc.samples {
            c.collect(s, &sc.frames);
        }
        c
    }

    fn rendered(sc: &Scenario) -> String {
        let c = collected(sc, Output::Stdout);
        String::from_utf8(c.render(&sc.frames, &stats(sc))).unwrap()
    }

    /// The one `"run_id":"<32 hex>"` of a line, replaced by a fixed one.
    fn without_run_id(line: &str) -> String {
        let key = "\"run_id\":\"";
        let at = line.find(key).expect("a run_id") + key.len();
        let id = &line[at..at + 32];
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(&line[at + 32..at + 33], "\"");
        format!("{}RUN_ID{}", &line[..at], &line[at + 32..])
    }

    #[test]
    fn matches_reference_record_for_record() {
        let all = all_scenarios();
        assert!(all.len() >= 9);
        for sc in &all {
            let got = rendered(sc);
            let want = fixtures::read(&format!("jsonl/{}.jsonl", sc.name));
            assert!(got.ends_with('\n') && want.ends_with('\n'));
            let (got, want): (Vec<&str>, Vec<&str>) =
                (got.lines().collect(), want.lines().collect());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    without_run_id(g),
                    without_run_id(w),
                    "{}: record {i} differs",
                    sc.name
                );
            }
            assert_eq!(got.len(), want.len(), "{}: record count", sc.name);
        }
    }

    /// Every line is JSON, in the documented order, and the numbers agree
    /// with each other and with the samples.
    #[test]
    fn every_line_parses_and_the_sums_agree() {
        for sc in &all_scenarios() {
            let text = rendered(sc);
            let records: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let name = &sc.name;
            let run_id = records[0]["run_id"].as_str().unwrap();
            assert_eq!(run_id.len(), 32);
            assert_eq!(&run_id[12..13], "4", "{name}: a UUID4");
            let rank = |t: &str| {
                ["meta", "string_table", "frame_table", "agg", "end"]
                    .iter()
                    .position(|&k| k == t)
                    .unwrap()
            };
            let mut last = 0;
            for r in &records {
                assert_eq!(r["v"], 0);
                assert_eq!(r["run_id"], run_id);
                let k = rank(r["type"].as_str().unwrap());
                assert!(k >= last, "{name}: records out of order");
                last = k;
            }
            let of = |t: &'static str| records.iter().filter(move |r| r["type"] == t);
            assert_eq!(of("meta").count(), 1);
            assert_eq!(records[0]["type"], "meta");
            assert_eq!(records[0]["sample_interval_usec"], sc.interval_us);
            assert_eq!(records[0]["mode"], sc.mode.as_str());
            assert_eq!(records.last().unwrap()["type"], "end");
            assert_eq!(of("end").count(), 1);

            let expected_total = sc
                .samples
                .iter()
                .flat_map(|s| &s.threads)
                .filter(|t| !t.frames.is_empty())
                .count() as u64;
            let total = records.last().unwrap()["samples_total"].as_u64().unwrap();
            assert_eq!(total, expected_total, "{name}");

            let entries = |t: &'static str, field: &str| -> Vec<Value> {
                of(t)
                    .flat_map(|r| {
                        let list = r[field].as_array().unwrap();
                        assert!(!list.is_empty() && list.len() <= CHUNK_SIZE);
                        list.clone()
                    })
                    .collect()
            };
            let strings = entries("string_table", "strings");
            for (i, s) in strings.iter().enumerate() {
                assert_eq!(s["str_id"], i);
            }
            let frames = entries("frame_table", "frames");
            for (i, f) in frames.iter().enumerate() {
                assert_eq!(f["frame_id"], i);
                for k in ["path_str_id", "func_str_id"] {
                    assert!((f[k].as_u64().unwrap() as usize) < strings.len());
                }
                assert!(f["line"].is_i64());
                for k in ["end_line", "col", "end_col"] {
                    assert!(f.get(k).is_none_or(|v| v.as_i64().unwrap() >= 0));
                }
            }
            let agg = entries("agg", "entries");
            assert_eq!(agg.len(), frames.len());
            let mut self_sum = 0;
            for (i, a) in agg.iter().enumerate() {
                assert_eq!(a["frame_id"], i);
                let (s, c) = (
                    a["self"].as_u64().unwrap(),
                    a["cumulative"].as_u64().unwrap(),
                );
                assert!(s <= c && c <= total && c > 0, "{name}: frame {i}");
                self_sum += s;
            }
            // Every sample has exactly one leaf.
            assert_eq!(self_sum, total, "{name}");
            for r in of("agg") {
                assert_eq!(r["samples_total"], total);
                assert_eq!(
                    (&r["kind"], &r["scope"]),
                    (&"frame".into(), &"final".into())
                );
            }
        }
    }

    #[test]
    fn writes_the_file_and_says_so() {
        let sc = all_scenarios().into_iter().next().unwrap();
        let path = std::env::temp_dir().join(format!("tachyon-jsonl-{}.jsonl", std::process::id()));
        let mut c = collected(&sc, Output::File(path.clone()));
        c.finish(&sc.frames, &stats(&sc)).unwrap();
        let got = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(got.as_bytes(), c.render(&sc.frames, &stats(&sc)));
        assert!(got.contains(&format!("\"run_id\":\"{}\"", c.run_id())));
        let unwritable = Path::new("/nonexistent-dir/x.jsonl").to_path_buf();
        let mut c = collected(&sc, Output::File(unwritable));
        let err = c.finish(&sc.frames, &stats(&sc)).unwrap_err().to_string();
        assert!(
            err.starts_with("cannot write /nonexistent-dir/x.jsonl: "),
            "{err}"
        );
    }

    #[test]
    fn run_ids_are_random_uuid4s() {
        let (a, b) = (uuid4_hex(), uuid4_hex());
        assert_ne!(a, b);
        for id in [a, b] {
            assert_eq!(id.len(), 32);
            assert_eq!(&id[12..13], "4");
            assert!("89ab".contains(&id[16..17]));
        }
    }

    #[test]
    fn strings_are_escaped_like_python() {
        let mut out = Vec::new();
        write_record(&mut out, &"a\u{1}\t\u{7f}é\u{2028}😀\"\\/~").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"a\\u0001\\t\\u007f\\u00e9\\u2028\\ud83d\\ude00\\\"\\\\/~\"\n"
        );
    }

    #[test]
    fn frames_are_told_apart_by_the_exported_location_only() {
        let mut t = FrameTable::new();
        let (file, func) = (t.intern_str("/a/x.py"), t.intern_str("f"));
        let mk = |kind, end_line, col| Frame {
            opcode: None,
            kind,
            file,
            func,
            location: Some(crate::model::Location {
                line: 3,
                end_line,
                col,
                end_col: -1,
            }),
        };
        let a = t.intern(mk(FrameKind::Python, 0, -1));
        let b = t.intern(mk(FrameKind::Unreadable, -1, -5));
        let c = t.intern(mk(FrameKind::Python, 3, -1));
        let mut col = JsonlCollector::new(Output::Stdout);
        let sample = Sample {
            pid: None,
            timestamp_us: 0,
            threads: vec![ThreadSample {
                tid: 1,
                frames: vec![a, b, c],
                ..Default::default()
            }],
        };
        col.collect(&sample, &t);
        let x = col.export(&t);
        assert_eq!(x.frames.len(), 2);
        // a and b are one frame: self 1, cumulative 1 (once per sample).
        assert_eq!((x.self_counts[0], x.cumulative[0]), (1, 1));
        assert_eq!((x.self_counts[1], x.cumulative[1]), (0, 1));
        // The function name is interned before the file.
        assert_eq!(x.strings, vec![func, file]);
    }
}
