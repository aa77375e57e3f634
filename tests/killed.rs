//! A recording survives its profiler's death: `attach --binary` killed
//! with SIGKILL leaves, at the path asked for, a file `replay` reads up to
//! last flush (at least once a second); a recording cut at any byte
//! replays what was whole before the cut, more the later the cut; a
//! finished recording of several frames still replays in the reference.
//! All of it holds for `--compression none` too, whose block tables are
//! records of their own while it records (see `binfmt::writer`): cut
//! anywhere, a killed one replays its whole blocks.

mod common;

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Interp, RootDir, Running, TempDir, collapsed, sid_interpreters, spawn, tachyon_bin};
use tachyon::binfmt::reader::{BinaryReader, ReadOptions};

/// Two threads whose stacks keep changing, so blocks carry new frames.
const TARGET_PY: &str = r#"
import threading

def leaf(n):
    return sum(range(n))

def mid(k):
    for _ in range(k):
        leaf(500)

def worker():
    while True:
        for k in (1, 5, 20):
            mid(k)

threading.Thread(target=worker, name="Worker-1", daemon=True).start()
print("READY", flush=True)
while True:
    mid(3)
"#;

fn sid_314() -> Interp {
    sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 14 && !i.debug)
        .expect("sid python3.14")
}

fn recovering() -> ReadOptions {
    ReadOptions {
        recover: true,
        ..ReadOptions::default()
    }
}

/// Stacks stored in `bytes` (read as `replay` reads), and whether the
/// file says it was cut short.
fn stored(bytes: &[u8]) -> tachyon::Result<(u64, bool)> {
    let mut r = BinaryReader::new(Cursor::new(bytes), "t".into(), recovering())?;
    let n = r.replay(|_, _| {})?;
    Ok((n, r.info().truncated))
}

/// Start `tachyon attach --binary -o PATH PID` (own process group, killed
/// on drop).
fn record(pid: i32, path: &Path, extra: &[&str]) -> Running {
    let mut cmd = Command::new(tachyon_bin());
    cmd.arg("attach")
        .args(extra)
        .args(["--binary", "-o"])
        .arg(path)
        .arg(pid.to_string());
    Running::start(cmd)
}

/// Poll `path` until it holds more than `above` samples; the count.
fn wait_for_samples(path: &Path, above: u64, rec: &mut Running) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(bytes) = std::fs::read(path)
            && let Ok((n, _)) = stored(&bytes)
            && n > above
        {
            return n;
        }
        if let Some(st) = rec.child.try_wait().unwrap() {
            panic!("tachyon ended ({st}) before {path:?} held more than {above} samples");
        }
        assert!(
            Instant::now() < deadline,
            "{path:?} never held more than {above} samples while recording (files there: {:?})",
            std::fs::read_dir(path.parent().unwrap())
                .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tachyon replay --collapsed`: (samples in the output, stderr).
fn replay(path: &Path, dir: &Path) -> (u64, String) {
    let out_file = dir.join("replayed.txt");
    let out = Command::new(tachyon_bin())
        .args(["replay", "--collapsed", "-o"])
        .arg(&out_file)
        .arg(path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "replay of {path:?} failed: {err}");
    let n = collapsed::total(&collapsed::read(&out_file));
    (n, err)
}

/// Record with `extra` options, kill -9 tachyon once the file at the
/// asked-for path has grown past two flush points and holds `blocks`
/// block tables; the file and the samples seen on disk before the kill.
fn record_and_kill(tag: &str, extra: &[&str], blocks: usize) -> (PathBuf, Vec<u8>, u64) {
    let it = sid_314();
    let mut t = spawn(&it, TARGET_PY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    // The caller removes it, once done with the file.
    let dir = TempDir::new(tag);
    let dir = std::mem::ManuallyDrop::new(dir);
    let path = dir.join("k").join("rec.bin");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut rec = record(t.pid(), &path, extra);
    // Two flush points seen from outside, the second after the first:
    // the file at the asked-for path grows while recording.
    let first = wait_for_samples(&path, 0, &mut rec);
    let second = wait_for_samples(&path, first, &mut rec);
    let deadline = Instant::now() + Duration::from_secs(60);
    while block_ends(&std::fs::read(&path).unwrap()).len() < blocks {
        assert!(Instant::now() < deadline, "fewer than {blocks} blocks");
        std::thread::sleep(Duration::from_millis(100));
    }
    rec.kill_all();
    let _ = rec.child.wait();
    drop(t);
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes, second)
}

fn killed_recording_keeps_its_samples(tag: &str, extra: &[&str]) {
    let (path, bytes, second) = record_and_kill(tag, extra, 0);
    let dir = path.parent().unwrap().parent().unwrap().to_path_buf();
    let (n, truncated) = stored(&bytes).unwrap();
    assert!(truncated, "a killed recording reads as finished");
    assert!(
        n >= second,
        "{n} samples kept, fewer than the {second} on disk before the kill"
    );
    let (replayed, err) = replay(&path, &dir);
    assert_eq!(replayed, n);
    assert!(
        err.contains(&format!("truncated recording: {n} samples, up to ")),
        "{err}"
    );
    // No temporary left beside it.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["rec.bin"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_recording_killed_with_sigkill_keeps_its_samples() {
    killed_recording_keeps_its_samples("kill", &[]);
}

#[test]
fn an_uncompressed_recording_killed_with_sigkill_keeps_its_samples() {
    killed_recording_keeps_its_samples("kill-none", &["--compression", "none"]);
}

/// The offsets where a (whole) block table of `bytes` ends. Each opens with the
/// tag `TACHBLK1`, after its length: a zstd skippable frame (magic, u32
/// size, then the tag) or, uncompressed, a record of its own (u64 0, u32
/// size, its encoding byte, then the tag).
fn block_ends(bytes: &[u8]) -> Vec<usize> {
    let compressed = bytes[56] == 1;
    let size_at = if compressed { 4 } else { 5 };
    let mut ends = Vec::new();
    for at in 64 + 13..bytes.len().saturating_sub(8) {
        if &bytes[at..at + 8] == b"TACHBLK1" {
            let b = &bytes[at - size_at..at - size_at + 4];
            ends.push(at + u32::from_le_bytes(b.try_into().unwrap()) as usize);
        }
    }
    ends.retain(|&e| e <= bytes.len());
    ends
}

/// `bytes` (a finished recording, or one left by a kill) cut at every
/// byte of its first and last 4 KiB, at a stride elsewhere and on both
/// sides of every block table's end: each cut reads (from 64 bytes on),
/// holds at least what a shorter cut held, and all of `total` at the end;
/// a cut at a block's end holds more than one before it; the CLI replays
/// a few cuts as truncated recordings.
fn cuts_replay_whole_blocks(bytes: &[u8], total: u64, finished: bool, dir: &RootDir) {
    let ends = block_ends(bytes);
    assert!(ends.len() >= 2, "{} block tables in the file", ends.len());
    let mut cuts: Vec<usize> = (0..bytes.len())
        .filter(|&c| c < 4096 || c + 4096 >= bytes.len() || c % 97 == 0)
        .chain(ends.iter().flat_map(|&e| [e - 1, e, e + 1]))
        .filter(|&c| c <= bytes.len())
        .collect();
    cuts.sort();
    cuts.dedup();
    let mut last = 0;
    for &cut in &cuts {
        match stored(&bytes[..cut]) {
            Err(e) => {
                assert!(cut < 64, "cut at {cut} of {}: {e}", bytes.len());
                assert!(!e.to_string().contains('\n'));
            }
            Ok((n, cut_short)) => {
                assert!(cut >= 64);
                assert_eq!(cut_short, !finished || cut < bytes.len(), "cut at {cut}");
                assert!(n >= last, "cut at {cut}: {n} samples, {last} before");
                last = n;
            }
        }
    }
    assert_eq!(last, total);
    // Cut at a block's end, every sample of the blocks before it is there.
    let (at_end, _) = stored(&bytes[..ends[1]]).unwrap();
    let (before, _) = stored(&bytes[..ends[1] - 1]).unwrap();
    assert!(
        at_end > before,
        "block 2 added nothing ({before} -> {at_end})"
    );
    // The CLI on a few cuts: a message, never the footer's absurd size.
    for cut in [
        64,
        ends[0],
        (ends[1] + 10).min(bytes.len() - 1),
        bytes.len() - 1,
    ] {
        let p = dir.outside(&format!("cut{cut}.bin"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let (n, err) = replay(&p, &dir.outside);
        assert_eq!(n, stored(&bytes[..cut]).unwrap().0);
        assert!(err.contains("truncated recording: "), "{err}");
        assert!(!err.contains("footer"), "{err}");
    }
}

/// Record 3 s of all threads with `extra` options into the root's
/// `rec.bin`; its bytes and how many stacks it stores.
fn finished_recording(dir: &RootDir, extra: &[&str]) -> (Vec<u8>, u64) {
    let it = sid_314();
    let mut t = spawn(&it, TARGET_PY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let path = dir.outside("rec.bin");
    let args: Vec<&str> = ["-d", "3", "-a"].iter().chain(extra).copied().collect();
    let out = record(t.pid(), &path, &args).finish(Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(t);
    let bytes = std::fs::read(&path).unwrap();
    let (total, truncated) = stored(&bytes).unwrap();
    assert!(!truncated && total > 0);
    (bytes, total)
}

/// The root's `rec.bin` replays in the reference: all `total` stacks.
fn replays_in_the_reference(dir: &RootDir, total: u64) {
    let ref_text = common::reference_replays(dir);
    assert!(
        ref_text.contains(&format!("Replayed {total} samples")),
        "{ref_text}"
    );
}

#[test]
fn a_real_recording_cut_anywhere_replays_its_whole_blocks() {
    let dir = RootDir::new(&[]);
    let (bytes, total) = finished_recording(&dir, &[]);
    cuts_replay_whole_blocks(&bytes, total, true, &dir);
    // The whole file, of several blocks, replays in the reference.
    replays_in_the_reference(&dir, total);
}

/// An uncompressed recording keeps its block tables only while it
/// records (a finished one is the reference's format, which has no room
/// for them): it is the file a kill leaves that is cut anywhere.
#[test]
fn an_uncompressed_recording_cut_anywhere_replays_its_whole_blocks() {
    let (path, bytes, _) = record_and_kill("cut-none", &["--compression", "none", "-a"], 2);
    let (total, truncated) = stored(&bytes).unwrap();
    assert!(truncated && total > 0, "{total} samples");
    let dir = RootDir::new(&[]);
    cuts_replay_whole_blocks(&bytes, total, false, &dir);
    let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    // Finished, it replays in the reference, and in tachyon as finished.
    let (bytes, total) = finished_recording(&dir, &["--compression", "none"]);
    assert_eq!(bytes[56], 0, "not an uncompressed file");
    replays_in_the_reference(&dir, total);
    let (n, err) = replay(&dir.outside("rec.bin"), &dir.outside);
    assert_eq!(n, total);
    assert!(!err.contains("truncated"), "{err}");
}

#[test]
fn a_finished_recording_loses_nothing() {
    let it = sid_314();
    let mut t = spawn(&it, TARGET_PY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let dir = TempDir::new("done");
    let path = dir.join("rec.bin");
    let out = record(t.pid(), &path, &["-d", "2"]).finish(Duration::from_secs(60));
    drop(t);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}");
    let n: u64 = said
        .split("Binary profile written to ")
        .nth(1)
        .and_then(|s| s.split('(').nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no sample count in {said}"));
    let (replayed, err) = replay(&path, &dir);
    assert_eq!(replayed, n);
    assert!(!err.contains("truncated"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
