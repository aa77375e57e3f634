//! `tachyon dump --snapshot`: a snapshot made of a live, still target
//! unwinds, offline, to the very stacks the live dump printed, in
//! main-thread and all-threads mode, cold and warm, on every interpreter
//! tachyon reads (sid's 3.13/3.14/3.15 release and debug builds through
//! their offsets tables; the machine's 3.11/3.12 through the carried
//! layouts).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Interp, machine_old_interpreters, sid_interpreters, spawn, tachyon_bin};
use tachyon::dump::display_filename;
use tachyon::model::{FrameKind, Sample, status};
use tachyon::session::snapshot::{Snapshot, TableSource};
use tachyon::unwind::UnwindOptions;

/// Three threads parked at known depths: the main thread 30 frames of
/// `down` deep, two others 5 and 20. All are asleep in `leaf` before READY.
const TARGET: &str = r#"
import threading, time
ready = threading.Barrier(3)
def leaf():
    ready.wait()
    if threading.current_thread() is threading.main_thread():
        print("READY", flush=True)
    while True:
        time.sleep(3600)  # LEAF
def down(n):
    if n == 0:
        return leaf()  # TO-LEAF
    return down(n - 1)  # RECURSE
for k in (5, 20):
    threading.Thread(target=down, args=(k,), daemon=True).start()
down(30)  # MODULE
"#;

fn line_of(marker: &str) -> i32 {
    let tag = format!("# {marker}");
    TARGET
        .lines()
        .position(|l| l.trim_end().ends_with(&tag))
        .expect("marker") as i32
        + 1
}

/// The stack lines `tachyon dump` prints per thread id, in order.
fn live_stacks(text: &str) -> Vec<(u64, Vec<String>)> {
    let mut out: Vec<(u64, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if line.starts_with("Stack dump") {
            let tid = line
                .split(", thread ")
                .nth(1)
                .and_then(|r| r.split([' ', ',', ':']).next())
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("no thread id in {line:?}"));
            out.push((tid, Vec::new()));
        } else if line.starts_with("  File ") {
            out.last_mut()
                .unwrap_or_else(|| panic!("frame before a header in:\n{text}"))
                .1
                .push(line.to_string());
        }
    }
    out
}

fn check(it: &Interp) {
    let mut t = spawn(it, TARGET, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(100));
    let file = tempfile_path(&it.name);
    let out = Command::new(tachyon_bin())
        .args(["dump", "-a", "--snapshot"])
        .arg(&file)
        .arg(t.pid().to_string())
        .current_dir("/")
        .output()
        .expect("run tachyon");
    assert!(
        out.status.success(),
        "{}: {}",
        it.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("saved a snapshot"), "{}: {stderr}", it.name);
    let live = live_stacks(&text);
    assert_eq!(live.len(), 3, "{}: {text}", it.name);

    let snap = Snapshot::open(&file).unwrap_or_else(|e| panic!("{}: {e}", it.name));
    std::fs::remove_file(&file).ok();
    assert_eq!(snap.pid(), t.pid());
    assert_eq!(snap.runtime().raw.version.minor, it.minor, "{}", it.name);
    assert_eq!(
        matches!(snap.table(), TableSource::Carried(_)),
        it.minor < 13,
        "{}",
        it.name
    );
    // The target can go: the snapshot is all that is read from now on.
    drop(t);

    for all_threads in [true, false] {
        let opts = UnwindOptions {
            all_threads,
            cpu_status: true,
            opcodes: false,
            frame_cache: false,
            ..UnwindOptions::default()
        };
        let mut u = snap.clone().unwinder(opts);
        let mut s = Sample::default();
        for i in 0..4 {
            u.sample(&mut s)
                .unwrap_or_else(|e| panic!("{} all={all_threads} sample {i}: {e}", it.name));
            let table = u.frames();
            let got: Vec<(u64, Vec<String>)> = s
                .threads
                .iter()
                .map(|t| {
                    let lines = t
                        .frames
                        .iter()
                        .rev()
                        .map(|&id| table.frame(id))
                        .filter(|f| f.kind == FrameKind::Python)
                        .map(|f| {
                            let shown = display_filename(table.str(f.file), Some(Path::new("/")));
                            format!(
                                "  File \"{shown}\", line {}, in {}",
                                f.line(),
                                table.str(f.func)
                            )
                        })
                        .collect();
                    (t.tid, lines)
                })
                .collect();
            let want: Vec<(u64, Vec<String>)> = if all_threads {
                live.clone()
            } else {
                assert_eq!(got.len(), 1, "{}", it.name);
                live.iter()
                    .filter(|(t, _)| *t == got[0].0)
                    .cloned()
                    .collect()
            };
            assert_eq!(got, want, "{} all={all_threads} sample {i}", it.name);
            // The main thread's stack is the one the script makes.
            let main = s
                .threads
                .iter()
                .find(|t| t.status & status::MAIN_THREAD != 0)
                .unwrap_or_else(|| panic!("{}: no main thread", it.name));
            let main: Vec<(&str, i32)> = main
                .frames
                .iter()
                .map(|&id| (table.str(table.frame(id).func), table.frame(id).line()))
                .collect();
            let mut expect = vec![("leaf", line_of("LEAF")), ("down", line_of("TO-LEAF"))];
            expect.extend(std::iter::repeat_n(("down", line_of("RECURSE")), 30));
            expect.push(("<module>", line_of("MODULE")));
            assert_eq!(main, expect, "{} all={all_threads}", it.name);
        }
    }
}

fn tempfile_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "tachyon-snapshot-test-{}-{name}.snap",
        std::process::id()
    ))
}

#[test]
fn snapshots_of_sid_interpreters_unwind_like_the_live_dump() {
    for it in sid_interpreters() {
        check(&it);
    }
}

#[test]
fn snapshots_of_carried_layouts_unwind_like_the_live_dump() {
    for it in machine_old_interpreters() {
        check(&it);
    }
}

#[test]
fn a_damaged_snapshot_is_a_one_line_error() {
    let file = tempfile_path("damaged");
    std::fs::write(&file, b"TACHSNAP\x01\0\0\0garbage").unwrap();
    let e = Snapshot::open(&file).unwrap_err().to_string();
    std::fs::remove_file(&file).ok();
    assert!(e.contains("is not a usable snapshot"), "{e}");
    assert!(e.contains("tachyon dump --snapshot"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}
