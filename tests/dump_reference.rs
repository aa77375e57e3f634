//! `tachyon dump` against the reference, `python3.15 -m profiling.sampling
//! dump`, on the same still target (fixtures/targets/dump_threads.py: eleven
//! threads blocked in C in different kinds of frames). Both must agree on
//! the threads (same ids, same order), each thread's status labels, and
//! every line of every stack: `File "...", line N, in QUALNAME` and the
//! source line below it.
//!
//! The reference runs inside the sid root (`chroot ROOT python3.15 -m
//! profiling.sampling dump -a PID`); the chroot shares the PID namespace, so
//! it reads the same process. chroot always starts it in `/`, so tachyon
//! runs with its working directory `/` too: both then show file names
//! relative to `/` (`tmp/.../target.py`, `usr/lib/python3.15/threading.py`),
//! and the comparison needs no normalisation at all.
//!
//! Known differences, deliberately not exercised by the target:
//! - Source lines with trailing whitespace: the reference strips only the
//!   indentation, tachyon trims both ends (the target has no trailing
//!   whitespace on any line that is shown).
//! - Deep stacks: the reference refuses stacks beyond its own frame limit
//!   ("Too many stack frames"); tachyon reads them (see tests/oracle.rs).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{
    Interp, TempDir, machine_old_interpreters, release, sid_interpreters, spawn, tachyon_bin,
};

const TARGET_PY: &str = include_str!("../fixtures/targets/dump_threads.py");

/// Worker threads the target starts (its `KINDS`), plus the main thread.
const THREADS: usize = 11;

/// One thread's section of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    tid: u64,
    /// The header's details, e.g. ["main thread", "idle"].
    labels: Vec<String>,
    /// Everything below the header: frame lines and source lines, verbatim.
    lines: Vec<String>,
}

/// Split a dump into its thread sections. Panics (with the text) on a line
/// that fits neither format, so a changed format cannot pass silently.
fn parse_dump(who: &str, text: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    for line in text.lines() {
        if line.starts_with("Stack dump") {
            // tachyon quotes the thread's name after its id; the name
            // (`Thread-1 (work)`) may hold " (", the details never do.
            let (subject, rest) = line
                .rsplit_once(" (")
                .unwrap_or_else(|| panic!("{who}: bad header {line:?} in:\n{text}"));
            let tid = subject
                .split_once(", thread ")
                .and_then(|(_, t)| t.split(' ').next()?.parse().ok())
                .unwrap_or_else(|| panic!("{who}: no thread id in {line:?}"));
            let details = rest
                .strip_suffix("most recent call last):")
                .unwrap_or_else(|| panic!("{who}: bad header end {line:?}"));
            let labels = details
                .split("; ")
                .flat_map(|d| d.split(", "))
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            out.push(Section {
                tid,
                labels,
                lines: Vec::new(),
            });
        } else if line.is_empty() {
            continue;
        } else {
            let sec = out
                .last_mut()
                .unwrap_or_else(|| panic!("{who}: text before the first header:\n{text}"));
            assert!(
                line.starts_with("  ") || line == "No Python frames",
                "{who}: unexpected line {line:?} in:\n{text}"
            );
            sec.lines.push(line.to_owned());
        }
    }
    out
}

fn run(who: &str, cmd: &mut Command) -> String {
    cmd.current_dir("/")
        .env("NO_COLOR", "1")
        .env("PYTHON_COLORS", "0")
        .env("TERM", "dumb");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {who}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{who} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !stdout.contains('\x1b'),
        "{who} printed colour codes despite NO_COLOR:\n{stdout}"
    );
    stdout
}

fn tachyon_dump(pid: i32, all: bool) -> String {
    let mut cmd = Command::new(tachyon_bin());
    cmd.arg("dump");
    if all {
        cmd.arg("-a");
    }
    cmd.arg(pid.to_string());
    run("tachyon dump", &mut cmd)
}

fn reference_dump(interp: &Interp, pid: i32, all: bool) -> String {
    let root: &Path = interp.root.as_deref().expect("a sid interpreter");
    let mut cmd = Command::new("chroot");
    cmd.arg(root)
        .arg(&interp.exe)
        .args(["-m", "profiling.sampling", "dump"]);
    if all {
        cmd.arg("-a");
    }
    cmd.arg(pid.to_string());
    run("reference dump", &mut cmd)
}

/// The differences between two parsed dumps, as readable text.
fn differences(ours: &[Section], reference: &[Section]) -> Vec<String> {
    let mut errs = Vec::new();
    let ids = |v: &[Section]| v.iter().map(|s| s.tid).collect::<Vec<_>>();
    if ids(ours) != ids(reference) {
        errs.push(format!(
            "threads differ (in order):\n  tachyon:   {:?}\n  reference: {:?}",
            ids(ours),
            ids(reference)
        ));
    }
    for r in reference {
        let Some(t) = ours.iter().find(|s| s.tid == r.tid) else {
            continue;
        };
        if t.labels != r.labels {
            errs.push(format!(
                "thread {}: status labels differ: tachyon {:?}, reference {:?}",
                r.tid, t.labels, r.labels
            ));
        }
        if t.lines != r.lines {
            let first = t
                .lines
                .iter()
                .zip(&r.lines)
                .position(|(a, b)| a != b)
                .unwrap_or(t.lines.len().min(r.lines.len()));
            errs.push(format!(
                "thread {}: stacks differ from line {} of the section ({} vs {} lines)\n  tachyon:\n{}  reference:\n{}",
                r.tid,
                first + 1,
                t.lines.len(),
                r.lines.len(),
                indent(&t.lines),
                indent(&r.lines)
            ));
        }
    }
    errs
}

fn indent(lines: &[String]) -> String {
    lines.iter().map(|l| format!("    |{l}\n")).collect()
}

/// Sanity checks on the reference's own output, so that agreement on a
/// degenerate dump (no threads, no source lines) cannot pass.
fn check_reference_shape(interp: &Interp, pid: i32, reference: &[Section], all: bool) {
    let want = if all { THREADS } else { 1 };
    assert_eq!(
        reference.len(),
        want,
        "[{}] the reference dumped {} threads, the target has {want}: {reference:#?}",
        interp.name,
        reference.len()
    );
    let main = reference
        .iter()
        .find(|s| s.tid == pid as u64)
        .unwrap_or_else(|| panic!("[{}] no main thread in the reference dump", interp.name));
    assert!(
        main.labels.iter().any(|l| l == "main thread"),
        "[{}] main thread not labelled: {main:?}",
        interp.name
    );
    for s in reference {
        let frames = s.lines.iter().filter(|l| l.starts_with("  File ")).count();
        let sources = s.lines.iter().filter(|l| l.starts_with("    ")).count();
        assert!(
            frames > 0 && sources > 0,
            "[{}] thread {} has no frames or no source lines in the reference dump: {s:?}",
            interp.name,
            s.tid
        );
    }
}

fn compare_with_reference(interp: &Interp) {
    let mut target = spawn(interp, TARGET_PY, &[], &[]);
    target.wait_for("READY", Duration::from_secs(30));
    let pid = target.pid();
    for all in [true, false] {
        // The threads are blocked, but one may still be on its way from its
        // signal to its blocking call for an instant: retry a few times.
        let mut last = Vec::new();
        for attempt in 0..5 {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            let ours_text = tachyon_dump(pid, all);
            let ref_text = reference_dump(interp, pid, all);
            let ours = parse_dump("tachyon", &ours_text);
            let reference = parse_dump("reference", &ref_text);
            check_reference_shape(interp, pid, &reference, all);
            let errs = differences(&ours, &reference);
            if errs.is_empty() {
                eprintln!(
                    "[{}] dump{}: {} threads, {} lines, identical to the reference",
                    interp.name,
                    if all { " -a" } else { "" },
                    ours.len(),
                    ours.iter().map(|s| s.lines.len()).sum::<usize>()
                );
                last.clear();
                break;
            }
            last = errs;
            last.push(format!(
                "--- tachyon output ---\n{ours_text}--- reference output ---\n{ref_text}"
            ));
        }
        assert!(
            last.is_empty(),
            "[{}] `tachyon dump{}` disagrees with the reference:\n{}",
            interp.name,
            if all { " -a" } else { "" },
            last.join("\n")
        );
    }
}

#[test]
fn dump_agrees_with_the_reference() {
    let interps: Vec<Interp> = sid_interpreters()
        .into_iter()
        .filter(|i| i.minor == 15)
        .collect();
    assert_eq!(interps.len(), 2, "sid python3.15 and python3.15d expected");
    for interp in &interps {
        compare_with_reference(interp);
    }
}

/// `tachyon dump --json PID`, checked against docs/dump.schema.json (with
/// ajv) and read by `jq`: the document, parsed.
fn json_dump(who: &str, pid: i32, all: bool, dir: &Path) -> serde_json::Value {
    let mut cmd = Command::new(tachyon_bin());
    cmd.args(["dump", "--json"]);
    if all {
        cmd.arg("-a");
    }
    cmd.arg(pid.to_string());
    let text = run(who, &mut cmd);
    let file = dir.join("dump.json");
    std::fs::write(&file, &text).unwrap();
    common::validate_schema("docs/dump.schema.json", &[&file]);
    // A script's way in: jq finds every thread's id and innermost function.
    let jq = common::run_ok(
        "jq",
        Command::new("jq")
            .args(["-r", ".threads[] | \"\\(.tid) \\(.frames[0].function)\""])
            .arg(&file),
    );
    assert_eq!(
        jq.lines().count(),
        if all { THREADS } else { 1 },
        "{who}: jq sees {jq:?}"
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{who}: {e}:\n{text}"))
}

/// The text dump's sections, as the JSON document tells them: the same
/// lines, made from the frames' fields (file names relative to `/`, where
/// the dumps run).
fn sections_of(doc: &serde_json::Value) -> Vec<Section> {
    let threads = doc["threads"].as_array().expect("threads");
    threads
        .iter()
        .map(|t| {
            let mut lines = Vec::new();
            let frames = t["frames"].as_array().expect("frames");
            for f in frames.iter().rev() {
                let func = f["function"].as_str().unwrap();
                match (f["file"].as_str(), f["line"].as_i64()) {
                    (Some(file), Some(line)) => lines.push(format!(
                        "  File \"{}\", line {line}, in {func}",
                        file.strip_prefix('/').unwrap_or(file)
                    )),
                    (Some(file), None) => lines.push(format!(
                        "  File \"{}\", in {func}",
                        file.strip_prefix('/').unwrap_or(file)
                    )),
                    (None, _) => lines.push(format!("  {func}")),
                }
                if let Some(src) = f["source"].as_str() {
                    lines.push(format!("    {src}"));
                }
            }
            if frames.is_empty() {
                lines.push("No Python frames".into());
            }
            let labels = t["labels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap().to_owned())
                .collect();
            Section {
                tid: t["tid"].as_u64().unwrap(),
                labels,
                lines,
            }
        })
        .collect()
}

/// `dump --json` holds what the text dump shows (threads in order, their
/// labels, every frame and source line), in a document that passes its
/// schema, on every version; the status flags agree with the labels.
#[test]
fn dump_json_says_what_the_text_dump_says() {
    let mut interps = release(sid_interpreters());
    interps.extend(machine_old_interpreters());
    let dir = TempDir::new("dump-json");
    for interp in &interps {
        let mut target = spawn(interp, TARGET_PY, &[], &[]);
        target.wait_for("READY", Duration::from_secs(30));
        let pid = target.pid();
        let who = format!("[{}] dump --json", interp.name);
        let mut last = Vec::new();
        for attempt in 0..5 {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            let doc = json_dump(&who, pid, true, &dir.0);
            let text = parse_dump("tachyon", &tachyon_dump(pid, true));
            assert_eq!(doc["pid"], pid, "{who}");
            assert!(
                doc["python"]
                    .as_str()
                    .is_some_and(|v| v.starts_with(&format!("3.{}.", interp.minor))),
                "{who}: python {}",
                doc["python"]
            );
            for t in doc["threads"].as_array().unwrap() {
                let main = t["status"]["main_thread"].as_bool().unwrap();
                assert_eq!(main, t["tid"] == pid, "{who}: {t}");
                assert_eq!(main, t["name"] == "MainThread", "{who}: thread names: {t}");
            }
            last = differences(&sections_of(&doc), &text);
            if last.is_empty() {
                break;
            }
        }
        assert!(
            last.is_empty(),
            "{who} disagrees with the text dump:\n{}",
            last.join("\n")
        );
        eprintln!("{who}: the text dump's {THREADS} threads, line for line");
    }
}

/// A parent with two forked workers and a shell child; every one of them
/// ends soon after the parent does.
const TREE_PY: &str = r#"
import multiprocessing as mp, os, subprocess, time
parent = os.getpid()
def worker(started):
    started.release()
    while os.getppid() == parent:
        time.sleep(0.05)
if __name__ == "__main__":
    ctx = mp.get_context("fork")
    sh = subprocess.Popen(["sh", "-c", "while kill -0 %d 2>/dev/null; do sleep 0.1; done" % parent])
    started = ctx.Semaphore(0)
    procs = [ctx.Process(target=worker, args=(started,)) for i in range(2)]
    for p in procs:
        p.start()
    # READY once both workers are in `worker`, however slow the machine.
    for p in procs:
        started.acquire()
    print("READY", " ".join(str(p.pid) for p in procs), sh.pid, flush=True)
    while True:
        time.sleep(0.05)
"#;

/// `dump --subprocesses`: the parent, then each Python process below it,
/// in text and as a stream of JSON documents; the shell child is named as
/// not dumped.
#[test]
fn dump_subprocesses_dumps_every_python_process_below() {
    let dir = TempDir::new("dump-tree");
    for interp in release(sid_interpreters())
        .iter()
        .take(1)
        .chain(&machine_old_interpreters()[..1])
    {
        let mut target = spawn(interp, TREE_PY, &[], &[]);
        let ready = target.wait_for("READY", Duration::from_secs(30));
        let pids: Vec<i32> = ready
            .split_whitespace()
            .skip(1)
            .map(|p| p.parse().unwrap())
            .collect();
        let (workers, shell) = (&pids[..2], pids[2]);
        let pid = target.pid();
        let who = format!("[{}] dump --subprocesses", interp.name);
        let out = Command::new(tachyon_bin())
            .args(["dump", "--subprocesses", &pid.to_string()])
            .output()
            .unwrap();
        let (text, err) = (common::text(&out.stdout), common::text(&out.stderr));
        assert!(out.status.success(), "{who}: {err}");
        let sections: Vec<&str> = text.split("\nProcess ").collect();
        assert_eq!(
            sections.len(),
            3,
            "{who}: three processes expected:\n{text}"
        );
        assert!(
            text.starts_with(&format!("Process {pid}: ")),
            "{who}:\n{text}"
        );
        for (s, w) in sections[1..].iter().zip(workers) {
            assert!(
                s.starts_with(&format!("{w}: ")) && s.contains(", in worker\n"),
                "{who}: worker {w}'s section:\n{s}"
            );
        }
        assert!(
            err.contains("not dumped") && err.contains(&shell.to_string()),
            "{who}: the shell child {shell} is not named: {err}"
        );
        // JSON: one document per process, one after another.
        let json = run(
            &who,
            Command::new(tachyon_bin()).args(["dump", "-s", "--json", &pid.to_string()]),
        );
        let file = dir.0.join("tree.json");
        std::fs::write(&file, &json).unwrap();
        let listed = common::run_ok(
            "jq",
            Command::new("jq")
                .args(["-s", "-c", "map(.pid)"])
                .arg(&file),
        );
        assert_eq!(
            listed.trim(),
            format!("[{pid},{},{}]", workers[0], workers[1]),
            "{who}"
        );
        eprintln!("{who}: the parent and its {} workers", workers.len());
    }
}
