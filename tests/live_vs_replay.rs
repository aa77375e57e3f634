//! Record once, view many ways, and every way the same: samples of a real
//! interpreter go live into every output and into a binary recording at
//! the same time; the recording replayed into the same outputs must give
//! the same files, byte for byte (the JSON-lines run id, random per run,
//! aside; and 3.13+'s `__init__` shim, at line -1 live and 0 replayed as in
//! the reference, which this target does not call). A frame whose value changed on the way through the file (a
//! location sentinel, a synthetic frame's kind) shows up here.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{TempDir, sid_interpreters, spawn};
use tachyon::binfmt::CaptureConfig;
use tachyon::binfmt::reader::BinaryReader;
use tachyon::collect::binary::{BinaryCollector, BinaryOptions};
use tachyon::collect::collapsed::CollapsedCollector;
use tachyon::collect::flamegraph::FlamegraphCollector;
use tachyon::collect::gecko::GeckoCollector;
use tachyon::collect::heatmap::HeatmapCollector;
use tachyon::collect::jsonl::JsonlCollector;
use tachyon::collect::pprof::PprofCollector;
use tachyon::collect::pstats::{PstatsCollector, PstatsOptions};
use tachyon::collect::speedscope::SpeedscopeCollector;
use tachyon::collect::{Collector, Output};
use tachyon::dump::SourceReader;
use tachyon::model::{FrameTable, Mode, RunStats, Sample};
use tachyon::unwind::UnwindOptions;

/// Threads in recursion, generators, a C callback and the collector.
const TARGET: &str = r#"
import gc, threading, time
def down(n):
    return down(n - 1) if n else sum(range(300))
def gen():
    while True:
        yield down(7)
def worker():
    for _ in gen():
        pass
def churn():
    while True:
        junk = [[i] for i in range(2000)]
        gc.collect()
for f in (worker, churn):
    threading.Thread(target=f, daemon=True).start()
print("READY", flush=True)
while True:
    sorted(range(300), key=lambda x: down(3) and -x)
"#;

/// The formats that can be written from a recording, each to `dir`.
fn collectors(dir: &Path) -> Vec<(&'static str, Box<dyn Collector>)> {
    let f = |name: &str| Output::File(dir.join(name));
    vec![
        (
            "collapsed",
            Box::new(CollapsedCollector::new(f("collapsed.txt"))),
        ),
        (
            "pstats",
            Box::new(PstatsCollector::new(
                f("pstats.prof"),
                PstatsOptions::default(),
            )),
        ),
        (
            "flamegraph",
            Box::new(FlamegraphCollector::new(f("flame.html"))),
        ),
        ("jsonl", Box::new(JsonlCollector::new(f("profile.jsonl")))),
        ("gecko", Box::new(GeckoCollector::new(f("gecko.json")))),
        (
            "speedscope",
            Box::new(SpeedscopeCollector::new(f("speedscope.json"))),
        ),
        ("pprof", Box::new(PprofCollector::new(f("pprof.pb.gz")))),
        // Both read source from this file system: the live one is fed
        // after the target is gone, as the replayed one is.
        (
            "heatmap",
            Box::new(HeatmapCollector::new(
                dir.join("heatmap"),
                SourceReader::local(),
            )),
        ),
    ]
}

fn file_of(name: &str) -> &'static str {
    match name {
        "collapsed" => "collapsed.txt",
        "pstats" => "pstats.prof",
        "flamegraph" => "flame.html",
        "jsonl" => "profile.jsonl",
        "speedscope" => "speedscope.json",
        "pprof" => "pprof.pb.gz",
        "heatmap" => "heatmap",
        _ => "gecko.json",
    }
}

/// A file's bytes, with what differs by design between two writers of the
/// same samples taken out: the JSON-lines run id; and for a Firefox
/// Profiler profile, the order its shared tables were filled in (a
/// recording brings each thread's repeated stacks in a batch), so it is
/// compared by what it shows: each thread's samples (time and stack, by
/// name), markers, and the profile's interval and start.
fn normalized(name: &str, path: &Path) -> Vec<u8> {
    if path.is_dir() {
        // A directory (the heatmap): its files' names and bytes, by name.
        let mut names: Vec<PathBuf> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        let mut all = Vec::new();
        for p in names {
            all.extend_from_slice(
                format!("== {}\n", p.file_name().unwrap().to_string_lossy()).as_bytes(),
            );
            all.extend(normalized(name, &p));
        }
        return all;
    }
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if name == "gecko" {
        return gecko_view(&bytes).into_bytes();
    }
    if name != "jsonl" {
        return bytes;
    }
    let text = String::from_utf8(bytes).unwrap();
    text.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["run_id"] = serde_json::Value::Null;
            v.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
}

fn gecko_view(bytes: &[u8]) -> String {
    use serde_json::Value;
    let g: Value = serde_json::from_slice(bytes).unwrap();
    let strings = g["shared"]["stringArray"].as_array().unwrap();
    let s = |v: &Value| {
        v.as_u64()
            .map_or("null".to_string(), |i| strings[i as usize].to_string())
    };
    let mut out = format!(
        "interval {} start {}\n",
        g["meta"]["interval"], g["meta"]["startTime"]
    );
    let mut threads: Vec<String> = Vec::new();
    for t in g["threads"].as_array().unwrap() {
        let (st, ft, fu) = (&t["stackTable"], &t["frameTable"], &t["funcTable"]);
        let frame_text = |f: usize| {
            let func = ft["func"][f].as_u64().unwrap() as usize;
            format!(
                "{}@{}:{}:{}",
                s(&fu["name"][func]),
                s(&fu["fileName"][func]),
                ft["line"][f],
                ft["column"][f]
            )
        };
        let stack_text = |mut i: Option<u64>| {
            let mut parts = Vec::new();
            while let Some(k) = i {
                let k = k as usize;
                parts.push(frame_text(st["frame"][k].as_u64().unwrap() as usize));
                i = st["prefix"][k].as_u64();
            }
            parts.join(";")
        };
        let mut lines = vec![format!("thread {} {}", t["tid"], t["name"])];
        let samples = &t["samples"];
        for i in 0..samples["length"].as_u64().unwrap() as usize {
            lines.push(format!(
                "  {} {}",
                samples["time"][i],
                stack_text(samples["stack"][i].as_u64())
            ));
        }
        let m = &t["markers"];
        let mut markers: Vec<String> = (0..m["length"].as_u64().unwrap() as usize)
            .map(|i| {
                format!(
                    "  marker {} {} {}",
                    s(&m["name"][i]),
                    m["startTime"][i],
                    m["endTime"][i]
                )
            })
            .collect();
        markers.sort();
        lines.extend(markers);
        threads.push(lines.join("\n"));
    }
    threads.sort();
    out.push_str(&threads.join("\n"));
    out
}

#[test]
fn every_format_written_live_equals_the_same_format_from_replay() {
    for it in sid_interpreters().into_iter().filter(|i| !i.debug) {
        let mut t = spawn(&it, TARGET, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let opts = UnwindOptions {
            all_threads: true,
            native: true,
            cpu_status: true,
            ..Default::default()
        };
        let mut u = tachyon::attach(t.pid(), opts).unwrap();
        let mut samples: Vec<Sample> = Vec::new();
        let mut s = Sample::default();
        let mut failures = 0;
        let start = tachyon::model::epoch_us();
        for i in 0..400u64 {
            match u.sample(&mut s) {
                Ok(()) => {
                    s.timestamp_us = start + i * 1000;
                    samples.push(s.clone());
                }
                Err(_) => failures += 1,
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        drop(t);
        assert!(!samples.is_empty(), "{}: no samples", it.name);
        let frames: &FrameTable = u.frames();
        let stats = RunStats {
            interval_us: 1000,
            duration_s: 0.4,
            attempts: samples.len() as u64 + failures,
            failures,
            mode: Mode::Wall,
            interrupted: false,
            ..RunStats::default()
        };

        let dir = TempDir::new(&it.name);
        std::fs::create_dir_all(dir.join("live")).unwrap();
        std::fs::create_dir_all(dir.join("replay")).unwrap();
        let bin = dir.0.join("run.bin");
        let mut live = collectors(&dir.0.join("live"));
        let mut recorder = BinaryCollector::new(
            Output::File(bin.clone()),
            BinaryOptions {
                capture: Some(CaptureConfig {
                    all_threads: true,
                    native: true,
                    gc: true,
                    ..CaptureConfig::default()
                }),
                ..BinaryOptions::default()
            },
        )
        .unwrap();
        recorder.print_encoding_stats = false;
        for s in &samples {
            recorder.collect(s, frames);
            for (_, c) in &mut live {
                c.collect(s, frames);
            }
        }
        recorder.finish(frames, &stats).unwrap();
        for (_, c) in &mut live {
            c.finish(frames, &stats).unwrap();
        }

        let mut reader = BinaryReader::open(&bin).unwrap();
        let mut replayed = collectors(&dir.0.join("replay"));
        reader
            .replay(|s, table| {
                for (_, c) in &mut replayed {
                    c.collect(s, table);
                }
            })
            .unwrap();
        let stored = reader.run_stats();
        for (_, c) in &mut replayed {
            c.finish(reader.frames(), &stored).unwrap();
        }

        for (name, _) in &live {
            let a = normalized(name, &dir.0.join("live").join(file_of(name)));
            let b = normalized(name, &dir.0.join("replay").join(file_of(name)));
            if a != b {
                let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
                let show = |v: &[u8]| {
                    String::from_utf8_lossy(&v[at.saturating_sub(120)..(at + 120).min(v.len())])
                        .into_owned()
                };
                panic!(
                    "{}: {name} differs live and from replay at byte {at} of {}/{}:\n live: {}\nreplay: {}",
                    it.name,
                    a.len(),
                    b.len(),
                    show(&a),
                    show(&b)
                );
            }
        }
        eprintln!(
            "{}: {} samples, {} formats equal live and replayed",
            it.name,
            samples.len(),
            live.len()
        );
    }
}
