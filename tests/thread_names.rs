//! Thread names as `threading` knows them, on real interpreters: `tachyon
//! dump` shows each thread's full name (not the kernel's 15 bytes) on
//! every supported version, whatever holds the Thread's attributes
//! (inline values, a materialised `__dict__`, a dict grown past the shared
//! keys, a subclass); a thread `threading` does not know gets its kernel
//! name; and a recording keeps the names through `replay` while the
//! reference's reader still reads it.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::{
    Interp, RootDir, Target, free_threaded_interpreters, machine_old_interpreters,
    machine_supported_interpreters, sid_interpreters, sid_root, spawn, tachyon_bin,
};
use tachyon::binfmt::reader::BinaryReader;

/// Every thread reports `NAME <native id> <name>` once it runs under its
/// final name; the main thread prints `READY` (maybe before the others
/// report). A raw `_thread` thread sets its kernel name
/// and is unknown to `threading`.
const TARGET: &str = r#"
import _thread, concurrent.futures, os, sys, threading

ev = threading.Event()
lock = threading.Lock()

def report(name=None):
    with lock:
        print("NAME", threading.get_native_id(), name or threading.current_thread().name, flush=True)

def park():
    report()
    ev.wait()

def rename_then_park():
    threading.current_thread().name = "renamed-in-flight"
    park()

def raw():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write("raw-comm")
    report("raw-comm")
    ev.wait()

class Sub(threading.Thread):
    pass

started = []
def start(t):
    t.start()
    started.append(t)
    return t

start(threading.Thread(target=park, name="worker-3"))
start(threading.Thread(target=park, name="überlange-Thread-Bezeichnung-42"))
start(threading.Thread(target=rename_then_park))
seen = start(threading.Thread(target=park, name="dict-seen"))
seen.__dict__
many = start(threading.Thread(target=park, name="many-attrs"))
for i in range(40):
    setattr(many, f"x{i}", i)
sub = start(Sub(target=park, name="subclass-thread"))
sub.extra = 1
ex = concurrent.futures.ThreadPoolExecutor(max_workers=2)
ex.submit(park)
ex.submit(park)
_thread.start_new_thread(raw, ())
report()
with lock:
    # Under the lock too: a line printed by two threads at once would mix.
    print("READY", flush=True)
ev.wait()
"#;

/// The names every run must show (the executor's come from itself).
const MUST: &[&str] = &[
    "MainThread",
    "worker-3",
    "überlange-Thread-Bezeichnung-42",
    "renamed-in-flight",
    "dict-seen",
    "many-attrs",
    "subclass-thread",
    "ThreadPoolExecutor-0_0",
    "ThreadPoolExecutor-0_1",
    "raw-comm",
];

/// Start the target; its threads' names by native id.
fn start(it: &Interp) -> (Target, BTreeMap<u64, String>) {
    let t = spawn(it, TARGET, &[], &[]);
    let mut names = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut ready = false;
    // Threads report as they start, possibly after READY.
    while !ready || names.len() < MUST.len() {
        let line = t
            .next_line(deadline.saturating_duration_since(std::time::Instant::now()))
            .unwrap_or_else(|| {
                panic!(
                    "{}: the target stopped talking (ready: {ready}, names so far: {names:?})",
                    it.name
                )
            });
        if let Some(rest) = line.strip_prefix("NAME ") {
            let (tid, name) = rest.split_once(' ').unwrap();
            names.insert(tid.parse().unwrap(), name.to_owned());
        }
        ready |= line == "READY";
    }
    let mut got: Vec<&str> = names.values().map(String::as_str).collect();
    got.sort_unstable();
    let mut want = MUST.to_vec();
    want.sort_unstable();
    assert_eq!(got, want, "{}: the target's own names", it.name);
    (t, names)
}

/// The header of each thread in a `tachyon dump`, by native id.
fn dump_headers(pid: i32) -> BTreeMap<u64, String> {
    let out = Command::new(tachyon_bin())
        .args(["dump", "-a", &pid.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "dump failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .filter(|l| l.starts_with("Stack dump"))
        .map(|l| {
            let tid = l
                .split_once(", thread ")
                .and_then(|(_, r)| r.split(' ').next()?.parse().ok())
                .unwrap_or_else(|| panic!("no thread id in {l:?}"));
            (tid, l.to_owned())
        })
        .collect()
}

fn check_dump(it: &Interp) -> Vec<String> {
    let (t, names) = start(it);
    let headers = dump_headers(t.pid());
    let mut problems = Vec::new();
    for (tid, name) in &names {
        // Quoted (Rust's escaping), right after the id.
        let want = format!(", thread {tid} {name:?} (");
        match headers.get(tid) {
            Some(h) if h.contains(&want) => {}
            Some(h) => problems.push(format!("{}: {name}: header {h:?}", it.name)),
            None => problems.push(format!("{}: thread {tid} ({name}) not dumped", it.name)),
        }
    }
    problems
}

#[test]
fn dump_shows_full_names_on_313_314_315() {
    let mut interps = sid_interpreters();
    interps.extend(machine_supported_interpreters());
    interps.extend(free_threaded_interpreters());
    let problems: Vec<String> = interps.iter().flat_map(check_dump).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn dump_shows_full_names_on_311_312() {
    let problems: Vec<String> = machine_old_interpreters()
        .iter()
        .flat_map(check_dump)
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn run_ok(cmd: &mut Command, who: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {who}: {e}"));
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{who} failed: {so}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

#[test]
fn a_recording_keeps_the_names_and_the_reference_still_reads_it() {
    let dir = RootDir::new(&[]);
    for it in sid_interpreters().iter().filter(|i| !i.debug) {
        let (t, names) = start(it);
        let file = dir.outside.join(format!("{}.bin", it.name));
        run_ok(
            Command::new(tachyon_bin()).args([
                "attach",
                "-a",
                "-d",
                "1",
                "--binary",
                "-o",
                file.to_str().unwrap(),
                &t.pid().to_string(),
            ]),
            "tachyon attach --binary",
        );
        drop(t);

        // Every stored stack of a named thread carries its full name.
        let mut r = BinaryReader::open(&file).unwrap();
        let samples = r.read_samples().unwrap();
        let table = r.frames();
        let mut seen: BTreeMap<u64, String> = BTreeMap::new();
        for th in samples.iter().flat_map(|s| &s.threads) {
            let name = th.name.map(|n| table.str(n).to_owned());
            assert_eq!(
                name.as_ref(),
                names.get(&th.tid),
                "{}: thread {} replayed with another name",
                it.name,
                th.tid
            );
            seen.insert(th.tid, name.unwrap_or_default());
        }
        assert_eq!(seen, names, "{}: every thread recorded", it.name);

        // The reference's reader replays the file to the same stacks.
        let inside = dir.inside.join(format!("{}.bin", it.name));
        let theirs_inside = dir.inside.join(format!("{}.ref.txt", it.name));
        run_ok(
            Command::new("chroot").arg(sid_root()).args([
                "/usr/bin/python3.15",
                "-m",
                "profiling.sampling",
                "replay",
                "--collapsed",
                "-o",
                theirs_inside.to_str().unwrap(),
                inside.to_str().unwrap(),
            ]),
            "the reference's replay",
        );
        let ours_path = dir.outside.join(format!("{}.ours.txt", it.name));
        run_ok(
            Command::new(tachyon_bin()).args([
                "replay",
                "--collapsed",
                "-o",
                ours_path.to_str().unwrap(),
                file.to_str().unwrap(),
            ]),
            "tachyon replay",
        );
        let theirs =
            std::fs::read_to_string(dir.outside.join(format!("{}.ref.txt", it.name))).unwrap();
        let ours = std::fs::read_to_string(&ours_path).unwrap();
        assert!(!ours.is_empty(), "{}: empty replay", it.name);
        assert_eq!(ours, theirs, "{}: replays differ", it.name);
    }
}

/// Names cost nothing per sample: the first sample names every thread,
/// names are read again at most every [`REFRESH`] while no thread appears,
/// and a sample that resolves none stays a handful of reads.
#[test]
fn names_are_read_rarely_and_within_their_grant() {
    use std::time::Instant;
    use tachyon::model::Sample;
    use tachyon::unwind::names::REFRESH;
    use tachyon::unwind::{NAME_READS, READ_BUDGET, UnwindOptions};

    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    for it in interps.iter().filter(|i| !i.debug) {
        let (t, names) = start(it);
        let opts = UnwindOptions {
            all_threads: true,
            ..UnwindOptions::default()
        };
        let mut u = tachyon::attach(t.pid(), opts).unwrap();
        let mut s = Sample::default();
        let began = Instant::now();
        let mut first: Option<(u32, Duration)> = None;
        let mut steady_max = 0u32;
        let n = 200;
        for i in 0..n {
            let t0 = Instant::now();
            let before = u.name_resolutions();
            u.sample(&mut s)
                .unwrap_or_else(|e| panic!("{}: sample {i}: {e}", it.name));
            let (calls, _) = u.reads_used();
            if u.name_resolutions() > before {
                first.get_or_insert((calls, t0.elapsed()));
            } else if i >= 2 {
                // The first two samples load every code object, then load
                // it again to trust it (see unwind/code.rs): not steady.
                steady_max = steady_max.max(calls);
            }
            if i == 0 {
                let got: BTreeMap<u64, String> = s
                    .threads
                    .iter()
                    .map(|th| {
                        (
                            th.tid,
                            th.name
                                .map(|n| u.frames().str(n).to_owned())
                                .unwrap_or_default(),
                        )
                    })
                    .collect();
                assert_eq!(
                    got, names,
                    "{}: the first sample names every thread",
                    it.name
                );
            }
        }
        let elapsed = began.elapsed();
        let allowed = 1 + (elapsed.as_millis() / REFRESH.as_millis()) as u64;
        assert!(
            u.name_resolutions() <= allowed,
            "{}: {} resolutions in {elapsed:?} of {n} samples (at most {allowed})",
            it.name,
            u.name_resolutions()
        );
        // Steady samples of the all-threads walk: a handful of batched
        // reads, whatever names cost.
        assert!(
            steady_max < READ_BUDGET,
            "{}: a sample without a resolution read {steady_max} times",
            it.name
        );
        let (calls, took) = first.expect("the first sample resolves");
        // A refresh with everything else cached: what names alone cost,
        // within the grant for them.
        std::thread::sleep(REFRESH);
        let before = u.name_resolutions();
        let t0 = Instant::now();
        u.sample(&mut s).unwrap();
        let refresh_took = t0.elapsed();
        assert_eq!(u.name_resolutions(), before + 1, "{}: refreshed", it.name);
        let (refresh_calls, refresh_bytes) = u.reads_used();
        let name_calls = refresh_calls.saturating_sub(steady_max);
        assert!(
            name_calls <= NAME_READS,
            "{}: a refresh took {name_calls} reads",
            it.name
        );
        eprintln!(
            "{}: first sample with names: {calls} reads, {took:?}; steady samples at most {steady_max} reads; {} resolutions in {elapsed:?}; a refresh: {refresh_calls} reads, {refresh_bytes} bytes, {refresh_took:?}",
            it.name,
            u.name_resolutions() - 1
        );
    }
}

/// One OS thread running a subinterpreter has a name in each interpreter:
/// its Thread's in the main one, the subinterpreter's main thread's there.
#[test]
fn each_interpreter_names_its_own_threads() {
    const SUB: &str = r#"
import threading, time
CODE = (
    "import threading, time\n"
    "def park():\n"
    "    time.sleep(1000)\n"
    "threading.current_thread().name = 'sub-main'\n"
    "t = threading.Thread(target=park, name='sub-worker'); t.start()\n"
    "print('SUB', t.native_id, threading.get_native_id(), flush=True)\n"
    "park()\n"
)
try:
    from concurrent import interpreters
    def run():
        interpreters.create().exec(CODE)
except ImportError:
    import _interpreters as xi  # 3.13
    def run():
        xi.run_string(xi.create(), CODE)
threading.Thread(target=run, name="runner").start()
time.sleep(1000)
"#;
    for it in sid_interpreters().iter().filter(|i| !i.debug) {
        let mut t = spawn(it, SUB, &[], &[]);
        let line = t.wait_for("SUB ", Duration::from_secs(30));
        let ids: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap())
            .collect();
        let (worker, runner) = (ids[0], ids[1]);
        std::thread::sleep(Duration::from_millis(200));
        let out = Command::new(tachyon_bin())
            .args(["dump", "-a", &t.pid().to_string()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for want in [
            format!("thread {worker} \"sub-worker\" (interpreter 1;"),
            format!("thread {runner} \"sub-main\" (interpreter 1;"),
            format!("thread {runner} \"runner\" (interpreter 0;"),
            format!("thread {} \"MainThread\" (interpreter 0;", t.pid()),
        ] {
            assert!(text.contains(&want), "{}: no {want:?} in:\n{text}", it.name);
        }
    }
}

/// A program that put something else in `sys.modules["threading"]`:
/// names fall back to the kernel's, and tachyon says why, once.
const NO_THREADING: &str = r#"
import sys, threading, time
t = threading.Thread(target=time.sleep, args=(600,), name="long-worker-name-xyz", daemon=True)
t.start()
sys.modules["threading"] = 42
print("NAME", t.native_id, flush=True)
print("READY", flush=True)
time.sleep(600)
"#;

#[test]
fn unreadable_threading_falls_back_to_comm_and_says_why() {
    let mut problems = Vec::new();
    for it in sid_interpreters() {
        let t = spawn(&it, NO_THREADING, &[], &[]);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut tid = 0u64;
        loop {
            let line = t
                .next_line(deadline.saturating_duration_since(std::time::Instant::now()))
                .unwrap_or_else(|| panic!("{}: the target stopped talking", it.name));
            if let Some(rest) = line.strip_prefix("NAME ") {
                tid = rest.parse().unwrap();
            }
            if line == "READY" {
                break;
            }
        }
        let out = Command::new(tachyon_bin())
            .args(["dump", "-a", &t.pid().to_string()])
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        // The kernel's name: 3.14+ set it from threading's (cut to 15
        // bytes), 3.13 leaves the program's.
        let comm = std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", t.pid()))
            .unwrap_or_else(|e| panic!("{}: comm of {tid}: {e}", it.name));
        let header = format!(", thread {tid} {:?} (", comm.trim_end());
        if !out.status.success() || !stdout.contains(&header) {
            problems.push(format!("{}: no comm name in {stdout}{stderr}", it.name));
        }
        let notes = stderr
            .matches("the target's threading module could not be read")
            .count();
        if notes != 1 {
            problems.push(format!("{}: {notes} notes of why in {stderr:?}", it.name));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// 1,100 threads that live on, and the main thread.
const MANY: &str = r#"
import threading
ev = threading.Event()
for i in range(1100):
    threading.Thread(target=ev.wait, name=f"parked-{i}").start()
print("READY", flush=True)
ev.wait()
"#;

#[test]
fn threads_past_the_first_thousand_are_counted_by_their_pool() {
    // tachyon keeps 1,024 threads apart; the rest are counted by their
    // pool (their name, numbers made `*`), under ids above any real one,
    // so a program that starts threads all the time keeps a bounded
    // profile. Here all 1,101 threads are in every sample.
    const APART: usize = 1024;
    const POOL_BASE: u64 = 1 << 30;
    let it = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .unwrap();
    let mut t = spawn(&it, MANY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(60));
    let out = t.outside_path("many.json");
    let pid = t.pid().to_string();
    let args = ["attach", "-a", "-d", "1", "-r", "20", "--gecko", "-o"];
    let status = Command::new(tachyon_bin())
        .args(args)
        .args([out.to_str().unwrap(), &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let threads: Vec<(u64, String)> = doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["tid"].as_u64().unwrap(),
                t["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let (pooled, apart): (Vec<_>, Vec<_>) = threads.iter().partition(|(tid, _)| *tid >= POOL_BASE);
    // The first 1,024 in the interpreter's list, and the main thread
    // (the list's last) in any case.
    assert!(
        (APART..=APART + 1).contains(&apart.len()),
        "{} threads kept apart",
        apart.len()
    );
    assert!(apart.iter().any(|(_, n)| n == "MainThread"));
    assert!(
        apart
            .iter()
            .all(|(_, n)| n == "MainThread" || n.starts_with("parked-")),
        "{apart:?}"
    );
    // The other 77 parked threads: lanes of one pool.
    assert!(
        !pooled.is_empty() && pooled.len() <= 1101 - APART,
        "{pooled:?}"
    );
    let others: Vec<_> = pooled.iter().filter(|(_, n)| n != "parked-*").collect();
    assert!(others.is_empty(), "{others:?}");
}
