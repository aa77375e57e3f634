//! The formats other tools read, read by those tools: `--pprof` by `go
//! tool pprof` (Debian's golang-go), `--speedscope` checked against the
//! JSON schema the npm `speedscope` package ships, with ajv. Both tools
//! come from `scripts/provision-tools.sh`; a missing one fails the test.
//!
//! The numbers are checked against tachyon's own collapsed stacks of the
//! same recording (replayed into each format), so they must agree exactly;
//! live runs and `attach` are checked for what they show, not for counts,
//! which depend on the machine's load.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    RootDir, collapsed, go_pprof, sid_interpreters, sid_root, spawn, tachyon_bin,
    tachyon_ok as tachyon, text, validate_speedscope,
};

/// Two threads, both sampled at every instant (wall mode): the main
/// thread in `hot` for its whole life, the worker in `warm` for half of
/// it, so `hot` is the hottest function by about two to one, however
/// slow the machine.
const SCRIPT: &str = r#"
import threading, time
def hot():
    s = 0
    for i in range(20000):
        s += i
    return s
def warm():
    s = 0
    for i in range(20000):
        s += i
    return s
def worker():
    t = time.monotonic()
    while time.monotonic() - t < 0.6:
        warm()
threading.Thread(target=worker).start()
t = time.monotonic()
while time.monotonic() - t < 1.2:
    hot()
"#;

/// The default rate (1 kHz), as every profile here is taken.
const INTERVAL_US: u64 = 1000;

/// `tachyon run ARGS -- chroot SID python3.15 SCRIPT` in `dir`.
fn run_script(dir: &RootDir, args: &[&str]) -> String {
    let py = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .unwrap();
    let root = sid_root().to_string_lossy().into_owned();
    let exe = py.exe.to_string_lossy().into_owned();
    let script = dir.inside("s.py");
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "chroot", &root, &exe, &script]);
    tachyon(&all, &dir.outside)
}

/// The file in `dir` whose name starts with `prefix`: there must be one.
fn the_file(dir: &Path, prefix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    assert_eq!(found.len(), 1, "{prefix}*: {found:?}");
    found.into_iter().next().unwrap()
}

/// What the collapsed stacks say: samples per thread, and self samples
/// per function (the leaf frame's name).
struct Collapsed {
    per_thread: BTreeMap<String, u64>,
    self_by_func: BTreeMap<String, u64>,
}

impl Collapsed {
    fn read(path: &Path) -> Collapsed {
        let mut c = Collapsed {
            per_thread: BTreeMap::new(),
            self_by_func: BTreeMap::new(),
        };
        for (stack, n) in collapsed::read(path) {
            let mut frames = collapsed::frames(&stack);
            let tid = frames.next().unwrap().strip_prefix("tid:").unwrap();
            *c.per_thread.entry(tid.to_string()).or_default() += n;
            let leaf = frames.next_back().unwrap();
            // `file:func:line`, or a synthetic frame's bare name.
            let func = collapsed::frame_parts(leaf).map_or(leaf, |(_, f, _)| f);
            *c.self_by_func.entry(func.to_string()).or_default() += n;
        }
        c
    }

    fn total(&self) -> u64 {
        self.per_thread.values().sum()
    }

    fn hottest(&self) -> (&str, u64) {
        let (f, n) = self.self_by_func.iter().max_by_key(|(_, n)| **n).unwrap();
        (f, *n)
    }
}

/// `-top`: the total, and the first row's flat value and function.
fn pprof_top(out: &str) -> (u64, u64, String) {
    let total = out
        .lines()
        .find_map(|l| l.split_once("Total samples = ").map(|(_, t)| t))
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no total in:\n{out}"));
    let row = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .nth(1)
        .unwrap_or_else(|| panic!("no rows in:\n{out}"));
    let f: Vec<&str> = row.split_whitespace().collect();
    (total, f[0].parse().unwrap(), f[5..].join(" "))
}

/// `-tags`: each value of the `thread` label with its samples.
fn pprof_threads(out: &str) -> BTreeMap<String, u64> {
    out.lines()
        .skip_while(|l| !l.trim_start().starts_with("thread: Total"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let (n, tid) = l.trim().split_once(' ').unwrap();
            let tid = tid.rsplit_once(": ").unwrap().1;
            // A count prints as `1522.0`.
            let n: f64 = n.parse().unwrap_or_else(|_| panic!("{l:?} in:\n{out}"));
            (tid.to_string(), n as u64)
        })
        .collect()
}

#[test]
fn a_recording_as_pprof_and_speedscope_agrees_with_its_collapsed_stacks() {
    let dir = RootDir::new(&[("s.py", SCRIPT)]);
    run_script(&dir, &["-a", "--binary", "-o", "rec.bin"]);
    let d = &dir.outside;
    tachyon(&["replay", "--collapsed", "-o", "c.txt", "rec.bin"], d);
    tachyon(&["replay", "--pprof", "-o", "p.pb.gz", "rec.bin"], d);
    tachyon(&["replay", "--speedscope", "-o", "s.json", "rec.bin"], d);
    let collapsed = Collapsed::read(&d.join("c.txt"));
    let (hottest, hottest_n) = collapsed.hottest();
    assert_eq!(hottest, "hot", "collapsed: {:?}", collapsed.self_by_func);
    assert_eq!(collapsed.per_thread.len(), 2, "{:?}", collapsed.per_thread);

    // go tool pprof: the same total, hottest function and threads.
    let p = d.join("p.pb.gz");
    let top = go_pprof(&["-top", "-sample_index=samples"], &p);
    let (total, flat, name) = pprof_top(&top);
    assert_eq!(total, collapsed.total(), "pprof total:\n{top}");
    assert_eq!((name.as_str(), flat), ("hot", hottest_n), "{top}");
    let tags = go_pprof(&["-tags", "-sample_index=samples"], &p);
    assert_eq!(pprof_threads(&tags), collapsed.per_thread, "{tags}");
    // The time value is the count times the period, in nanoseconds.
    let raw = go_pprof(&["-raw"], &p);
    assert!(raw.contains("PeriodType: wall nanoseconds\n"), "{raw}");
    assert!(
        raw.contains(&format!("Period: {}\n", INTERVAL_US * 1000)),
        "{raw}"
    );
    assert!(raw.contains("samples/count wall/nanoseconds"), "{raw}");
    let mut counted = 0;
    for l in raw.lines() {
        let Some((values, _locations)) = l.split_once(':') else {
            continue;
        };
        let v: Vec<u64> = values
            .split_whitespace()
            .map_while(|x| x.parse().ok())
            .collect();
        if v.len() == 2 && values.split_whitespace().count() == 2 {
            assert_eq!(v[1], v[0] * INTERVAL_US * 1000, "{l}");
            counted += v[0];
        }
    }
    assert_eq!(counted, collapsed.total(), "{raw}");
    let wall = go_pprof(&["-top", "-sample_index=wall", "-unit=ms"], &p);
    assert!(
        wall.contains(&format!("Total samples = {}ms", collapsed.total())),
        "1 ms a sample:\n{wall}"
    );

    // speedscope: valid, and each thread's weight is its samples' time.
    let s = d.join("s.json");
    validate_speedscope(&[&s]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&s).unwrap()).unwrap();
    let mut weights = BTreeMap::new();
    let mut self_weight: BTreeMap<String, u64> = BTreeMap::new();
    let frames = v["shared"]["frames"].as_array().unwrap();
    for prof in v["profiles"].as_array().unwrap() {
        assert_eq!(prof["unit"], "microseconds");
        let tid = prof["name"]
            .as_str()
            .unwrap()
            .strip_prefix("thread ")
            .unwrap();
        let w: Vec<u64> = prof["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_u64().unwrap())
            .collect();
        let sum: u64 = w.iter().sum();
        assert_eq!(
            prof["endValue"].as_u64().unwrap() - prof["startValue"].as_u64().unwrap(),
            sum
        );
        weights.insert(tid.to_string(), sum / INTERVAL_US);
        for (stack, w) in prof["samples"].as_array().unwrap().iter().zip(w) {
            let leaf = stack.as_array().unwrap().last().unwrap().as_u64().unwrap();
            let name = frames[leaf as usize]["name"].as_str().unwrap();
            *self_weight.entry(name.to_string()).or_default() += w / INTERVAL_US;
        }
    }
    assert_eq!(weights, collapsed.per_thread);
    assert_eq!(self_weight, collapsed.self_by_func);
}

#[test]
fn run_and_attach_write_both_formats_under_their_default_names() {
    // run --pprof: pprof_<pid>.pb.gz, read by go tool pprof.
    let dir = RootDir::new(&[("s.py", SCRIPT)]);
    let out = run_script(&dir, &["-a", "--pprof"]);
    assert!(out.contains("pprof profile written to pprof_"), "{out}");
    let p = the_file(&dir.outside, "pprof_");
    assert!(p.to_string_lossy().ends_with(".pb.gz"), "{}", p.display());
    let top = go_pprof(&["-top", "-sample_index=samples"], &p);
    assert_eq!(pprof_top(&top).2, "hot", "{top}");
    let tags = go_pprof(&["-tags", "-sample_index=samples"], &p);
    assert_eq!(pprof_threads(&tags).len(), 2, "two threads:\n{tags}");

    // run --speedscope: speedscope_<pid>.json, valid.
    let out = run_script(&dir, &["-a", "--speedscope"]);
    assert!(
        out.contains("Speedscope profile written to speedscope_"),
        "{out}"
    );
    let s = the_file(&dir.outside, "speedscope_");
    assert!(s.to_string_lossy().ends_with(".json"), "{}", s.display());

    // attach: both formats of a running target.
    let py = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .unwrap();
    let mut t = spawn(
        &py,
        "import time\nprint('READY', flush=True)\nwhile True:\n    sum(range(1000))\n",
        &[],
        &[],
    );
    t.wait_for("READY", Duration::from_secs(30));
    let pid = t.pid().to_string();
    let d = &dir.outside;
    tachyon(
        &["attach", "-d", "0.5", "--pprof", "-o", "a.pb.gz", &pid],
        d,
    );
    tachyon(
        &["attach", "-d", "0.5", "--speedscope", "-o", "a.json", &pid],
        d,
    );
    drop(t);
    let top = go_pprof(&["-top"], &d.join("a.pb.gz"));
    assert!(top.contains("<module>"), "{top}");
    validate_speedscope(&[&s, &d.join("a.json")]);
}

#[test]
fn the_formats_refuse_each_other_and_binary() {
    let d = std::env::temp_dir();
    for args in [
        &["run", "--pprof", "--speedscope", "x.py"][..],
        &["run", "--binary", "--pprof", "x.py"],
        &["run", "--binary", "--speedscope", "x.py"],
        &["replay", "--pprof", "--collapsed", "x.bin"],
    ] {
        let out = Command::new(tachyon_bin())
            .args(args)
            .current_dir(&d)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains("cannot be used with"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}
