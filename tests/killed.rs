//! A recording survives its profiler's death: `attach --binary` killed
//! with SIGKILL leaves, at the path asked for, a file `replay` reads up to
//! last flush (at least once a second); a recording cut at any byte
//! replays what was whole before the cut, more the later the cut; a
//! finished recording of several frames still replays in the reference.

mod common;

use std::io::Cursor;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    Interp, RootDir, Running, TempDir, collapsed, sid_interpreters, sid_root, spawn, tachyon_bin,
};
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

#[test]
fn a_recording_killed_with_sigkill_keeps_its_samples() {
    let it = sid_314();
    let mut t = spawn(&it, TARGET_PY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let dir = TempDir::new("kill");
    let path = dir.join("k").join("rec.bin");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut rec = record(t.pid(), &path, &[]);
    // Two flush points seen from outside, the second after the first:
    // the file at the asked-for path grows while recording.
    let first = wait_for_samples(&path, 0, &mut rec);
    let second = wait_for_samples(&path, first, &mut rec);
    rec.kill_all();
    let _ = rec.child.wait();
    drop(t);
    let bytes = std::fs::read(&path).unwrap();
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

/// The offsets where a block table of `bytes` ends (its skippable frame;
/// a frame ends with one when it brought new strings or frames).
fn block_ends(bytes: &[u8]) -> Vec<usize> {
    let magic = tachyon::binfmt::BLOCK_MAGIC.to_le_bytes();
    let mut ends = Vec::new();
    let mut at = 64;
    while at + 8 <= bytes.len() {
        if bytes[at..at + 4] == magic {
            let size = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            ends.push(at + 8 + size);
        }
        at += 1;
    }
    ends
}

#[test]
fn a_real_recording_cut_anywhere_replays_its_whole_blocks() {
    let it = sid_314();
    let mut t = spawn(&it, TARGET_PY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let dir = RootDir::new(&[]);
    let path = dir.outside("rec.bin");
    let out = record(t.pid(), &path, &["-d", "3", "-a"]).finish(Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(t);
    let bytes = std::fs::read(&path).unwrap();
    let (total, truncated) = stored(&bytes).unwrap();
    assert!(!truncated && total > 0);
    let ends = block_ends(&bytes);
    assert!(!ends.is_empty(), "no block table in the file");

    // Every byte of the first and last 4 KiB, a stride elsewhere, and both
    // sides of every block table's end.
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
                assert_eq!(cut_short, cut < bytes.len());
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
    for cut in [64, ends[0], ends[1] + 10, bytes.len() - 1] {
        let p = dir.outside(&format!("cut{cut}.bin"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let (n, err) = replay(&p, &dir.outside);
        assert_eq!(n, stored(&bytes[..cut]).unwrap().0);
        assert!(err.contains("truncated recording: "), "{err}");
        assert!(!err.contains("footer"), "{err}");
    }

    // The whole file, of several blocks, replays in the reference.
    let ref_out = Command::new("chroot")
        .arg(sid_root())
        .args(["/usr/bin/python3.15", "-m", "profiling.sampling", "replay"])
        .args([
            "--collapsed",
            "-o",
            &dir.inside("ref.txt"),
            &dir.inside("rec.bin"),
        ])
        .output()
        .unwrap();
    let ref_text = String::from_utf8_lossy(&ref_out.stdout);
    assert!(
        ref_out.status.success(),
        "{ref_text}{}",
        String::from_utf8_lossy(&ref_out.stderr)
    );
    assert!(
        ref_text.contains(&format!("Replayed {total} samples")),
        "{ref_text}"
    );
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
