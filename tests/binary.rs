//! The binary profile format (`binfmt`, `BinaryCollector`, `tachyon
//! replay`) against real interpreters and against the reference:
//!
//! - round trip: real samples of every sid interpreter, written (zstd and
//!   uncompressed) and read back identical;
//! - compatibility both ways with `python3.15 -m profiling.sampling`: a
//!   file tachyon wrote replays in the reference to the same collapsed
//!   stacks as in `tachyon replay`, and a file the reference wrote replays
//!   in tachyon to the same collapsed stacks and pstats table as in the
//!   reference;
//! - corruption: every truncation and many byte flips of real files give
//!   an error, never a panic or a hang.

mod common;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Interp, Running, collapsed, sid_interpreters, sid_root, spawn, tachyon_bin};
use tachyon::binfmt::reader::{BinaryReader, ReadOptions};
use tachyon::binfmt::writer::{BinaryWriter, WriterOptions};
use tachyon::binfmt::{CaptureConfig, Compression, StoredStats};
use tachyon::collect::binary::{BinaryCollector, BinaryOptions};
use tachyon::collect::{Collector, Output};
use tachyon::model::{FrameKind, FrameTable, Sample};
use tachyon::model::{Mode, RunStats};
use tachyon::unwind::UnwindOptions;

/// Threads with changing stacks (recursion up and down, callbacks from C,
/// the garbage collector), so that every record encoding occurs.
const TARGET_PY: &str = r#"
import gc, threading, time

def down(n):
    if n == 0:
        s = 0
        for i in range(2000):
            s += i
        return s
    return down(n - 1) + 1

def wave():
    while True:
        for d in (3, 9, 15, 9, 3, 1, 12):
            down(d)

def key(x):
    time.sleep(0.0005)
    return x

def sorter():
    while True:
        sorted(range(50), key=key)

class Churn:
    def __init__(self):
        self.me = [self]

def churn():
    while True:
        for _ in range(2000):
            Churn()
        gc.collect()

for f in (wave, sorter, churn):
    threading.Thread(target=f, daemon=True).start()
print("READY", flush=True)
while True:
    time.sleep(0.002)
    down(5)
"#;

fn sid_315() -> Interp {
    sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("sid python3.15")
}

/// A directory inside the sid root (`inside` is its path there), removed
/// on drop.
struct ChrootDir {
    outside: PathBuf,
    inside: PathBuf,
}

impl ChrootDir {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "tachyon-bin-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let outside = sid_root().join("tmp").join(&name);
        std::fs::create_dir_all(&outside).unwrap();
        ChrootDir {
            outside,
            inside: PathBuf::from("/tmp").join(name),
        }
    }
}

impl Drop for ChrootDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.outside);
    }
}

/// Run the reference (`python3.15 -m profiling.sampling ARGS`) in the sid
/// root; panics with its output unless it succeeds. Killed after 120 s.
fn reference(args: &[&str]) -> String {
    let mut cmd = Command::new("chroot");
    cmd.arg(sid_root())
        .args(["/usr/bin/python3.15", "-m", "profiling.sampling"])
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = Running::start(cmd).finish(Duration::from_secs(120));
    common::ok(out, &format!("reference {args:?}"))
}

/// `tachyon ARGS`; panics unless it succeeds; returns stdout.
fn tachyon(args: &[&str]) -> String {
    common::run_ok(
        &format!("tachyon {args:?}"),
        Command::new(tachyon_bin()).args(args),
    )
}

/// `n` successful samples of the running target, all threads, about 1 ms
/// apart, with strictly increasing timestamps; and the frame table.
fn sample_target(it: &Interp, n: usize) -> (Vec<Sample>, FrameTable) {
    let mut t = spawn(it, TARGET_PY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(100));
    let opts = UnwindOptions {
        all_threads: true,
        native: true,
        cpu_status: true,
        opcodes: true,
        ..Default::default()
    };
    let mut u = tachyon::attach(t.pid(), opts)
        .unwrap_or_else(|e| panic!("{}: cannot attach: {e}", it.name));
    let start = Instant::now();
    let mut out = Vec::new();
    let mut s = Sample::default();
    let mut failed = 0;
    while out.len() < n {
        match u.sample(&mut s) {
            Ok(()) => {
                s.timestamp_us = start.elapsed().as_micros() as u64 + out.len() as u64;
                out.push(s.clone());
            }
            Err(e) => {
                failed += 1;
                assert!(failed < n, "{}: too many failed samples: {e}", it.name);
            }
        }
        std::thread::sleep(Duration::from_micros(700));
    }
    drop(t);
    (out, u.into_frames())
}

/// A frame as text with every field, the way a reader gives it back.
fn frame_text(t: &FrameTable, id: u32) -> String {
    let f = t.frame(id);
    // The format stores an unplaced instruction (the `__init__` shim, line
    // -1) as it stores no location, as the reference's format does.
    let (line, end_line, col, end_col) = match f.location {
        None => (0, 0, -1, -1),
        Some(l) if l == tachyon::model::Location::UNPLACED => (0, 0, -1, -1),
        Some(l) => (l.line, l.end_line, l.col, l.end_col),
    };
    let kind = match f.kind {
        FrameKind::Python | FrameKind::Unreadable => "py",
        FrameKind::NativeFunction => "native function",
        FrameKind::Gc => "gc",
        FrameKind::Native => "native",
        FrameKind::Truncated => "truncated",
        FrameKind::Task => "task",
    };
    format!(
        "{kind}|{}|{}|{line}|{end_line}|{col}|{end_col}",
        t.str(f.file),
        t.str(f.func)
    )
}

/// Samples as comparable text: per sample the timestamp, then its threads
/// sorted by id (the format does not keep their order within an instant),
/// each with its status and frames (the innermost 256, as stored).
fn samples_text(samples: &[Sample], t: &FrameTable) -> Vec<String> {
    samples
        .iter()
        .map(|s| {
            let mut threads: Vec<String> = s
                .threads
                .iter()
                .map(|th| {
                    let frames: Vec<String> = th
                        .frames
                        .iter()
                        .take(256)
                        .map(|&f| frame_text(t, f))
                        .collect();
                    format!(
                        "{}/{} s={} [{}]",
                        th.tid,
                        th.interpreter_id,
                        th.status,
                        frames.join(" < ")
                    )
                })
                .collect();
            threads.sort();
            format!("@{} {}", s.timestamp_us, threads.join(" ; "))
        })
        .collect()
}

fn write_file(
    samples: &[Sample],
    table: &FrameTable,
    compression: Compression,
    stats: Option<&RunStats>,
) -> Vec<u8> {
    let mut w = BinaryWriter::new(
        Cursor::new(Vec::new()),
        "test".into(),
        WriterOptions {
            compression,
            python_version: (3, 15, 2),
            mode: Some(Mode::Wall),
            capture: Some(CaptureConfig {
                all_threads: true,
                gc: true,
                native: true,
                ..Default::default()
            }),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for s in samples {
        w.write_sample(s, table);
    }
    if let Some(st) = stats {
        w.set_stats(StoredStats::from_run(st));
    }
    w.finish().unwrap().into_inner()
}

fn read_bytes(b: &[u8]) -> tachyon::Result<(Vec<Sample>, FrameTable)> {
    let mut r = BinaryReader::new(Cursor::new(b), "mem".into(), ReadOptions::default())?;
    let s = r.read_samples()?;
    Ok((s, r.into_frames()))
}

#[test]
fn round_trip_real_samples_on_every_interpreter() {
    for it in sid_interpreters() {
        let (samples, table) = sample_target(&it, 400);
        let threads: usize = samples.iter().map(|s| s.threads.len()).sum();
        let want = samples_text(&samples, &table);
        for compression in [Compression::Zstd, Compression::None] {
            let bytes = write_file(&samples, &table, compression, None);
            let (got, got_table) = read_bytes(&bytes)
                .unwrap_or_else(|e| panic!("{} {compression:?}: cannot read back: {e}", it.name));
            let r =
                BinaryReader::new(Cursor::new(&bytes), "m".into(), ReadOptions::default()).unwrap();
            assert_eq!(r.info().sample_count, threads as u64);
            assert_eq!(r.info().compression, compression);
            let got = samples_text(&got, &got_table);
            assert_eq!(got.len(), want.len(), "{} {compression:?}", it.name);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g, w, "{} {compression:?}: sample {i} differs", it.name);
            }
        }
        eprintln!(
            "{}: {} samples, {threads} thread stacks round-tripped",
            it.name,
            samples.len()
        );
    }
}

/// Collapsed lines as a sorted map (the reference sorts ties by text, as
/// tachyon does, but compare as sets of lines to say what differs).
fn collapsed_map(text: &str) -> BTreeMap<String, u64> {
    collapsed::by_stack(&collapsed::parse(text))
}

#[test]
fn tachyon_files_replay_in_the_reference() {
    let it = sid_315();
    let (samples, table) = sample_target(&it, 500);
    let dir = ChrootDir::new("t2r");
    let stats = RunStats {
        interval_us: 1000,
        duration_s: 0.5,
        attempts: 520,
        failures: 20,
        mode: Mode::Wall,
        interrupted: false,
        ..RunStats::default()
    };
    for compression in [Compression::Zstd, Compression::None] {
        let name = format!("t-{}.bin", compression.as_str());
        let bytes = write_file(&samples, &table, compression, Some(&stats));
        std::fs::write(dir.outside.join(&name), &bytes).unwrap();
        let inside = dir.inside.join(&name);
        let ref_out = dir.inside.join(format!("{name}.ref.txt"));
        let so = reference(&[
            "replay",
            "--collapsed",
            "-o",
            ref_out.to_str().unwrap(),
            inside.to_str().unwrap(),
        ]);
        let n: usize = samples.iter().map(|s| s.threads.len()).sum();
        assert!(so.contains(&format!("Replayed {n} samples")), "{so}");
        let ref_text =
            std::fs::read_to_string(dir.outside.join(format!("{name}.ref.txt"))).unwrap();
        let ours_path = dir.outside.join(format!("{name}.tachyon.txt"));
        let so = tachyon(&[
            "replay",
            "--collapsed",
            "-o",
            ours_path.to_str().unwrap(),
            dir.outside.join(&name).to_str().unwrap(),
        ]);
        assert!(so.contains(&format!("Replayed {n} samples")), "{so}");
        let ours = std::fs::read_to_string(&ours_path).unwrap();
        assert!(!ours.is_empty());
        assert_eq!(
            collapsed_map(&ours),
            collapsed_map(&ref_text),
            "{compression:?}"
        );
        assert_eq!(
            ours, ref_text,
            "{compression:?}: same lines, different order"
        );

        // The reference's reader sees the header, trailer and config as
        // written.
        let script = format!(
            "import _remote_debugging as r\ni = r.BinaryReader({:?}).get_info()\nprint(i['sample_count'], i['thread_count'], i['compression_type'], i['mode'], i['capture_features'], i['duration_sec'], round(i['error_rate'], 4))",
            inside.to_str().unwrap()
        );
        std::fs::write(dir.outside.join("info.py"), script).unwrap();
        let out = Command::new("chroot")
            .arg(sid_root())
            .arg("/usr/bin/python3.15")
            .arg(dir.inside.join("info.py"))
            .output()
            .unwrap();
        let info = String::from_utf8_lossy(&out.stdout);
        let threads = samples
            .iter()
            .flat_map(|s| s.threads.iter().map(|t| t.tid))
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        assert_eq!(
            info.trim(),
            format!("{n} {threads} {} 0 7 0.5 3.8462", compression.code()),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn binary_collector_file_replays_in_the_reference() {
    // Synthetic frames of every kind, a location-less Python frame, a deep
    // stack (the reference keeps the innermost 256 frames), and threads of
    // two interpreters.
    use tachyon::model::{Frame, ThreadSample};
    let mut t = FrameTable::new();
    let gc = t.synthetic(FrameKind::Gc, "<GC>");
    let native = t.synthetic(FrameKind::Native, "<native>");
    let (file, other) = (t.intern_str("/srv/app/x.py"), t.intern_str("/srv/lib/x.py"));
    let mut py = |file, name: &str, line: i32| {
        let func = t.intern_str(name);
        t.intern(Frame {
            opcode: None,
            kind: FrameKind::Python,
            file,
            func,
            location: Some(tachyon::model::Location {
                line,
                end_line: line,
                col: 4,
                end_col: 9,
            }),
        })
    };
    let main = py(file, "<module>", 1);
    let f = py(file, "f", 10);
    let f2 = py(file, "f", 11);
    let g = py(other, "g", 3);
    let shim = py(file, "__init__", -1);
    let rec: Vec<u32> = (0..300).map(|i| py(file, "rec", 100 + (i % 7))).collect();
    let stacks: Vec<Vec<u32>> = vec![
        vec![f, main],
        vec![f, main],
        vec![gc, f, main],
        vec![g, native, f2, main],
        vec![shim, g, main],
        vec![],
        rec.iter().copied().chain([main]).collect(),
        vec![g, main],
    ];
    let dir = ChrootDir::new("coll");
    let path = dir.outside.join("c.bin");
    let mut c = BinaryCollector::new(
        Output::File(path.clone()),
        BinaryOptions {
            compression: Compression::Zstd,
            python_version: Some((3, 14, 0)),
            capture: None,
            ..BinaryOptions::default()
        },
    )
    .unwrap();
    let mut ts = 0;
    for round in 0..30 {
        for (i, st) in stacks.iter().enumerate() {
            ts += 1000;
            let sample = Sample {
                pid: None,
                timestamp_us: ts,
                threads: vec![
                    ThreadSample {
                        tid: 7,
                        interpreter_id: 0,
                        status: 1,
                        frames: st.clone(),
                        name: None,
                    },
                    ThreadSample {
                        tid: 7,
                        interpreter_id: 1,
                        status: 2,
                        frames: stacks[(i + round) % stacks.len()].clone(),
                        name: None,
                    },
                ],
            };
            c.collect(&sample, &t);
        }
    }
    let stats = RunStats {
        interval_us: 1000,
        duration_s: 0.24,
        attempts: 240,
        failures: 0,
        mode: Mode::Gil,
        interrupted: false,
        ..RunStats::default()
    };
    c.finish(&t, &stats).unwrap();

    let r = BinaryReader::open(&path).unwrap();
    assert_eq!(r.info().sample_count, 480);
    assert_eq!(r.info().mode, Some(Mode::Gil));
    assert_eq!(r.info().python_version, (3, 14, 0));
    assert_eq!(r.run_stats().attempts, 240);

    let ref_out = dir.inside.join("c.ref.txt");
    reference(&[
        "replay",
        "--collapsed",
        "-o",
        ref_out.to_str().unwrap(),
        dir.inside.join("c.bin").to_str().unwrap(),
    ]);
    let ours_path = dir.outside.join("c.tachyon.txt");
    tachyon(&[
        "replay",
        "--collapsed",
        "-o",
        ours_path.to_str().unwrap(),
        path.to_str().unwrap(),
    ]);
    let ref_text = std::fs::read_to_string(dir.outside.join("c.ref.txt")).unwrap();
    let ours = std::fs::read_to_string(&ours_path).unwrap();
    assert_eq!(ours, ref_text);
    assert!(ours.contains(";<GC> "), "{ours}");
    assert!(ours.contains(";<native>;"), "{ours}");
    assert!(ours.contains("x.py:__init__:0"), "{ours}");
}

/// `python3.15 -m profiling.sampling run --binary` on a real script.
fn reference_file(dir: &ChrootDir, compression: &str) -> PathBuf {
    std::fs::write(dir.outside.join("w.py"), WORKLOAD_PY).unwrap();
    let name = format!("ref-{compression}.bin");
    reference(&[
        "run",
        "-a",
        "-r",
        "2khz",
        "--binary",
        "--compression",
        compression,
        "-o",
        dir.inside.join(&name).to_str().unwrap(),
        dir.inside.join("w.py").to_str().unwrap(),
    ]);
    dir.outside.join(name)
}

const WORKLOAD_PY: &str = r#"
import threading, time
def leaf(n):
    s = 0
    for i in range(n):
        s += i
    return s
def mid(k):
    for _ in range(k):
        leaf(5000)
def worker():
    t = time.time()
    while time.time() - t < 0.5:
        mid(3)
class K:
    def __init__(self):
        self.x = leaf(300)
def main():
    th = threading.Thread(target=worker)
    th.start()
    t = time.time()
    while time.time() - t < 0.5:
        mid(2)
        K()
        time.sleep(0.001)
    th.join()
main()
"#;

/// The pstats table of a replay, without the lines that name the file or
/// draw the progress bar (tachyon draws it on a terminal only), nor empty
/// lines.
fn table_only(out: &str) -> String {
    out.lines()
        .filter(|l| !l.starts_with("Replaying ") && !l.contains('█') && !l.contains('░'))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn reference_files_replay_in_tachyon() {
    let dir = ChrootDir::new("r2t");
    for compression in ["zstd", "none"] {
        let path = reference_file(&dir, compression);
        let inside = dir.inside.join(path.file_name().unwrap());

        // The reader takes it and agrees with the header.
        let mut r = BinaryReader::open(&path).unwrap();
        let info = r.info().clone();
        assert_eq!(info.python_version, common::version_of(&sid_315()));
        assert_eq!(
            info.compression,
            if compression == "zstd" {
                Compression::Zstd
            } else {
                Compression::None
            }
        );
        assert_eq!(info.mode, Some(Mode::Wall));
        assert!(info.capture.is_some_and(|c| c.all_threads));
        assert!(info.stats.duration_s.is_some_and(|d| d > 0.3));
        assert!(info.thread_count >= 2);
        let n = r.replay(|_, _| {}).unwrap();
        assert_eq!(n, info.sample_count);
        assert!(n > 0, "{n} samples");

        // Collapsed: byte for byte.
        let ref_out = dir.inside.join(format!("{compression}.ref.txt"));
        reference(&[
            "replay",
            "--collapsed",
            "-o",
            ref_out.to_str().unwrap(),
            inside.to_str().unwrap(),
        ]);
        let ours_path = dir.outside.join(format!("{compression}.tachyon.txt"));
        let so = tachyon(&[
            "replay",
            "--collapsed",
            "-o",
            ours_path.to_str().unwrap(),
            path.to_str().unwrap(),
        ]);
        assert!(
            so.starts_with(&format!(
                "Replaying {n} samples from {}\n  Sample interval: 500 us\n  Compression: {compression}\n",
                path.display()
            )),
            "{so}"
        );
        assert!(so.ends_with(&format!("Replayed {n} samples\n")), "{so}");
        let ref_text =
            std::fs::read_to_string(dir.outside.join(format!("{compression}.ref.txt"))).unwrap();
        let ours = std::fs::read_to_string(&ours_path).unwrap();
        assert_eq!(collapsed_map(&ours), collapsed_map(&ref_text));
        assert_eq!(ours, ref_text);
        assert!(
            !ours.contains("_sync_coordinator"),
            "the reference's own frames are filtered"
        );

        // The pstats table (stdout), every sort key.
        for sort in ["nsamples", "cumtime", "name"] {
            let theirs = reference(&["replay", "--sort", sort, inside.to_str().unwrap()]);
            let ours = tachyon(&["replay", "--sort", sort, path.to_str().unwrap()]);
            assert_eq!(table_only(&ours), table_only(&theirs), "--sort {sort}");
        }
    }
}

/// Every way of cutting or damaging `bytes` is an error or a (consistent)
/// read, never a panic or a hang; the structural damage listed is always
/// an error.
fn torture(what: &str, bytes: &[u8]) {
    let started = Instant::now();
    let full = read_bytes(bytes).unwrap_or_else(|e| panic!("{what}: intact file: {e}"));
    assert!(!full.0.is_empty());
    // Every truncation (in long sample data, every 5th).
    let string_off = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    let dense = |at: usize| at < 512 || at + 1024 > string_off || at.is_multiple_of(5);
    for len in (0..bytes.len()).filter(|&l| dense(l)) {
        assert!(
            read_bytes(&bytes[..len]).is_err(),
            "{what}: truncated to {len} of {} bytes, read fine",
            bytes.len()
        );
    }
    // Appended bytes.
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert!(read_bytes(&longer).is_err(), "{what}: appended byte");

    let r = BinaryReader::new(Cursor::new(bytes), "m".into(), ReadOptions::default()).unwrap();
    let info = r.info().clone();
    let size = bytes.len();
    // Header fields that must be exact: magic, version, sample and thread
    // counts, table offsets, compression, reserved config bits; footer
    // counts and size.
    let must_fail: Vec<usize> = [0..8, 28..48, 56..60]
        .into_iter()
        .flatten()
        .chain([63])
        .chain(size - 32..size - 16)
        .collect();
    for &at in &must_fail {
        for x in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.to_vec();
            b[at] ^= x;
            // A thread count raised or a sample count's high bits: still
            // inconsistent with the data, so still an error.
            assert!(
                read_bytes(&b).is_err(),
                "{what}: byte {at} ^ {x:#x} read fine"
            );
        }
    }
    // Every other byte, flipped a few ways: an error or a read, no panic.
    let mut errors = 0;
    let mut reads = 0;
    for at in (0..size).filter(|&a| dense(a)) {
        for x in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.to_vec();
            b[at] ^= x;
            match read_bytes(&b) {
                Ok(_) => reads += 1,
                Err(e) => {
                    errors += 1;
                    let msg = e.to_string();
                    assert!(!msg.contains('\n'), "{what}: multi-line error {msg:?}");
                }
            }
        }
    }
    // Sample data bytes made into endless varints.
    for at in (64..string_off).filter(|&a| dense(a)) {
        let mut b = bytes.to_vec();
        for v in b[at..(at + 12).min(string_off)].iter_mut() {
            *v |= 0x80;
        }
        let _ = read_bytes(&b);
    }
    eprintln!(
        "{what}: {size} bytes, {} samples; flips: {errors} errors, {reads} reads; {:.1} s",
        info.sample_count,
        started.elapsed().as_secs_f64()
    );
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "{what}: too slow"
    );
}

#[test]
fn corrupt_files_give_errors_never_panics() {
    let it = sid_315();
    let (samples, table) = sample_target(&it, 60);
    let stats = RunStats {
        interval_us: 1000,
        duration_s: 0.06,
        attempts: 60,
        failures: 0,
        mode: Mode::Wall,
        interrupted: false,
        ..RunStats::default()
    };
    torture(
        "tachyon/zstd",
        &write_file(&samples, &table, Compression::Zstd, Some(&stats)),
    );
    torture(
        "tachyon/none",
        &write_file(&samples, &table, Compression::None, Some(&stats)),
    );
    let dir = ChrootDir::new("bad");
    for c in ["zstd", "none"] {
        let bytes = std::fs::read(reference_file(&dir, c)).unwrap();
        torture(&format!("reference/{c}"), &bytes);
    }
}

#[test]
fn replay_errors_are_one_line() {
    let dir = std::env::temp_dir().join(format!("tachyon-replay-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "empty.bin",
            vec![],
            "is not a binary sampling profile. The replay command",
        ),
        (
            "text.bin",
            b"hello world".repeat(10),
            "not a binary sampling profile",
        ),
        (
            "version.bin",
            {
                let mut b = b"HCAT".to_vec();
                b.extend_from_slice(&2u32.to_le_bytes());
                b.extend_from_slice(&[3, 16, 0, 0]);
                b.resize(200, 0);
                b
            },
            "format version 2",
        ),
    ];
    for (name, bytes, want) in cases {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let out = Command::new(tachyon_bin())
            .args(["replay", p.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
    }
    let out = Command::new(tachyon_bin())
        .args(["replay", dir.join("missing.bin").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Threads started and ended all the time, each a few frames deep: the
/// workload where a profile's records change most (compare.sh's churn).
const CHURN_PY: &str = include_str!("../fixtures/targets/churn.py");

/// Run in the sid root: the reference's own reader replays a binary
/// profile into the reference's own writer (zstd), so both files hold the
/// same samples. Prints the number of samples replayed.
const REWRITE_PY: &str = r#"
import sys
from profiling.sampling.binary_reader import BinaryReader
from profiling.sampling.binary_collector import BinaryCollector

class Writer(BinaryCollector):
    def collect(self, frames, timestamps=None):
        # The reader hands a run of equal samples over at once.
        if isinstance(timestamps, list):
            for t in timestamps:
                super().collect(frames, t)
        else:
            super().collect(frames, timestamps)

src, dst = sys.argv[1], sys.argv[2]
with BinaryReader(src) as r:
    w = Writer(dst, r.get_info()["sample_interval_us"], compression="zstd")
    n = r.replay_samples(w)
    w.export(dst)
print(n)
"#;

/// The sample data's bytes in zstd frames and in skippable frames (block
/// tables), walking it frame by frame.
fn split_sample_data(mut d: &[u8]) -> (u64, u64, u64) {
    let (mut frames, mut skipped, mut count) = (0, 0, 0);
    while d.len() >= 8 {
        let magic = u32::from_le_bytes(d[..4].try_into().unwrap());
        let n = if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
            let n = 8 + u32::from_le_bytes(d[4..8].try_into().unwrap()) as usize;
            skipped += n as u64;
            n
        } else {
            let n = zstd::zstd_safe::find_frame_compressed_size(d).expect("a zstd frame");
            frames += n as u64;
            count += 1;
            n
        };
        d = &d[n..];
    }
    assert!(d.is_empty(), "{} bytes after the last frame", d.len());
    (frames, skipped, count)
}

/// The issue's target: a `.bin` file takes no more bytes per sample than
/// the reference's; held here within 5%. Measured on the same samples (the reference's writer
/// is given what tachyon recorded), so the comparison does not depend on
/// how many samples either profiler manages on this machine.
#[test]
fn a_churning_profile_is_no_larger_than_the_references_writer_makes_it() {
    let it = sid_315();
    let mut t = spawn(&it, CHURN_PY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let dir = ChrootDir::new("size");
    let ours = dir.outside.join("t.bin");
    tachyon(&[
        "attach",
        "-a",
        "-r",
        "5000",
        "-d",
        "2",
        "--binary",
        "-o",
        ours.to_str().unwrap(),
        &t.pid().to_string(),
    ]);
    drop(t);
    std::fs::write(dir.outside.join("rewrite.py"), REWRITE_PY).unwrap();
    let out = Command::new("chroot")
        .arg(sid_root())
        .arg("/usr/bin/python3.15")
        .arg(dir.inside.join("rewrite.py"))
        .arg(dir.inside.join("t.bin"))
        .arg(dir.inside.join("r.bin"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the reference's rewrite failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let (mine, _) = read_bytes(&std::fs::read(&ours).unwrap()).unwrap();
    let mine_n: u64 = mine.iter().map(|s| s.threads.len() as u64).sum();
    assert_eq!(replayed, mine_n, "the reference replayed other samples");
    assert!(replayed >= 1000, "only {replayed} samples: no measure");
    // The samples' part of each file: the zstd frames between the header
    // and the string table (whose offset the header holds at byte 40).
    // The tables after it hold each distinct frame and string once, the
    // same in both, plus tachyon's thread names and statistics: per file,
    // not per sample. So do the block tables among tachyon's frames (the
    // same strings and frames again, given as they first occur, so that a
    // killed recording can be read): they are left out too, and printed.
    let samples_part = |path: &std::path::Path| {
        let b = std::fs::read(path).unwrap();
        let string_off = u64::from_le_bytes(b[40..48].try_into().unwrap()) as usize;
        let (frames, tables, count) = split_sample_data(&b[64..string_off]);
        (frames, tables, count, b.len())
    };
    let (ours_part, ours_tables, ours_frames, ours_len) = samples_part(&ours);
    let (theirs_part, theirs_tables, theirs_frames, theirs_len) =
        samples_part(&dir.outside.join("r.bin"));
    assert_eq!(theirs_tables, 0);
    eprintln!(
        "tachyon's block tables: {ours_tables} bytes; zstd frames: {ours_frames}, the reference's {theirs_frames}"
    );
    eprintln!(
        "{replayed} samples: tachyon's sample data {ours_part} bytes, the reference writer's {theirs_part} (ratio {:.3}); whole files {ours_len} and {theirs_len}",
        ours_part as f64 / theirs_part as f64
    );
    // At zstd level 5 this was 1.07-1.09; at 7, 1.00-1.01 (see
    // binfmt::DEFAULT_ZSTD_LEVEL). The margin is for other samples. A
    // recording that can be read after a kill ends a zstd frame when new
    // strings or frames came, at most once a second: each such frame
    // costs its header and a fresh window, per second of recording and
    // not per sample. A loaded machine takes fewer samples a second, so
    // that share grows: each frame beyond the reference's gets 128 bytes.
    let per_frame = 128 * ours_frames.saturating_sub(theirs_frames);
    assert!(
        ours_part * 100 <= theirs_part * 105 + per_frame * 100,
        "{replayed} samples: tachyon's sample data takes {ours_part} bytes, the reference writer's {theirs_part}"
    );
}
