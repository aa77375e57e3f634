//! The command line as a user meets it, through the real binary: the table
//! agrees with the reference profiler's, `-o` writes a pstats file that
//! Python's own `pstats` loads, `--realtime-stats` reports while sampling,
//! `dump --blocking` always resumes the target, bad arguments give one clear
//! line, and output files get the reference's default names.
//!
//! Every process a test starts is in its own process group and killed with
//! it on drop, whatever happens.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{
    Interp, Running, ensure_sid_root, sid_interpreters, sid_root, spawn, tachyon_bin, text,
};

const REPORT: &str = include_str!("../fixtures/programs/report.py");

/// A short busy program that prints its PID (the same inside the chroot: no
/// PID namespace), so a test knows the name of the default output file.
const SHORT: &str = "import os, time\nprint('PID', os.getpid(), flush=True)\nt = time.perf_counter()\nwhile time.perf_counter() - t < 0.4:\n    pass\n";

fn py315() -> Interp {
    sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("sid python3.15")
}

/// A unique name for a scratch directory.
fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "tachyon-cli-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A scratch directory, removed on drop. `inside` is its path as seen by a
/// chrooted interpreter (equal to `outside` for a host directory).
struct Dir {
    outside: PathBuf,
    inside: PathBuf,
}

impl Dir {
    /// A directory below the sid root's /tmp, holding `files`.
    fn in_root(tag: &str, files: &[(&str, &str)]) -> Dir {
        let name = unique(tag);
        let outside = ensure_sid_root().join("tmp").join(&name);
        std::fs::create_dir_all(&outside).unwrap();
        for (n, c) in files {
            std::fs::write(outside.join(n), c).unwrap();
        }
        Dir {
            outside,
            inside: Path::new("/tmp").join(name),
        }
    }

    /// A directory on the host (the current directory of a run).
    fn on_host(tag: &str) -> Dir {
        let outside = std::env::temp_dir().join(unique(tag));
        std::fs::create_dir_all(&outside).unwrap();
        Dir {
            inside: outside.clone(),
            outside,
        }
    }

    fn inside(&self, f: &str) -> String {
        self.inside.join(f).to_string_lossy().into_owned()
    }

    fn outside(&self, f: &str) -> PathBuf {
        self.outside.join(f)
    }

    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.outside);
    }
}

/// `tachyon ARGS` in `cwd`.
fn tachyon_cmd(args: &[&str], cwd: &Path) -> Command {
    let mut c = Command::new(tachyon_bin());
    c.args(args).current_dir(cwd);
    c
}

fn tachyon(args: &[&str], cwd: &Path, timeout: Duration) -> Output {
    Running::start(tachyon_cmd(args, cwd)).finish(timeout)
}

/// `tachyon run ARGS -- chroot ROOT python3.15 SCRIPT`.
fn tachyon_run_cmd(args: &[&str], script_inside: &str, cwd: &Path) -> Command {
    let mut c = tachyon_cmd(&[&["run"], args, &["--", "chroot"]].concat(), cwd);
    c.arg(sid_root()).arg(py315().exe).arg(script_inside);
    c
}

/// The reference: `chroot ROOT python3.15 -m profiling.sampling run ARGS SCRIPT`.
fn reference_run_cmd(args: &[&str], script_inside: &str) -> Command {
    let mut c = Command::new("chroot");
    c.arg(sid_root())
        .arg(py315().exe)
        .args(["-m", "profiling.sampling", "run"])
        .args(args)
        .arg(script_inside)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NO_COLOR", "1")
        .env_remove("FORCE_COLOR");
    c
}

/// Remove ANSI escape sequences (CSI ... letter).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            if it.peek() == Some(&'[') {
                it.next();
                for c in it.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[derive(Debug)]
struct Row {
    sample_pct: f64,
    tottime: f64,
    key: String,
}

/// The rows of a pstats table, from either profiler's stdout: everything
/// after the header line, as long as lines have the five numeric columns.
/// Program output and the profiler's own statistics lines before the table
/// are skipped.
fn table(stdout: &str) -> Vec<Row> {
    let clean = strip_ansi(stdout);
    let mut lines = clean.lines().skip_while(|l| {
        !(l.trim_start().starts_with("nsamples") && l.contains("filename:lineno(function)"))
    });
    if lines.next().is_none() {
        return vec![];
    }
    let mut rows = Vec::new();
    for l in lines {
        let mut rest = l.trim_start();
        let mut fields = Vec::new();
        for _ in 0..5 {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            fields.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
        let Some((direct, _)) = fields[0].split_once('/') else {
            break;
        };
        let (Ok(_direct), Ok(sample_pct), Ok(tottime)) =
            (direct.parse::<u64>(), fields[1].parse(), fields[2].parse())
        else {
            break;
        };
        if rest.is_empty() || fields[2..].iter().any(|f| f.parse::<f64>().is_err()) {
            break;
        }
        rows.push(Row {
            sample_pct,
            tottime,
            key: rest.trim_end().to_string(),
        });
    }
    rows
}

fn share(rows: &[Row], key: &str) -> Option<f64> {
    rows.iter().find(|r| r.key == key).map(|r| r.sample_pct)
}

const FINGERPRINT: &str = "report.py:36(fingerprint)";
const FETCH: &str = "report.py:41(fetch_upstream)";

/// Compare one pair of runs; `Err` says what disagrees. Only what the
/// program guarantees is checked for each profiler alone (the 1 s sleep,
/// the hottest CPU-bound function); shares, which move with the machine's
/// speed and load, are only compared between the two profilers.
fn compare(ours: &str, reference: &str) -> Result<(), String> {
    let (a, b) = (table(ours), table(reference));
    if a.is_empty() || b.is_empty() {
        return Err("a table is missing".into());
    }
    for (who, rows) in [("tachyon", &a), ("reference", &b)] {
        if rows.len() > 30 {
            return Err(format!("{who} printed {} rows with -l 30", rows.len()));
        }
        let Some(fetch) = rows.iter().find(|r| r.key == FETCH) else {
            return Err(format!("{who}: no {FETCH} row"));
        };
        if !(0.7..1.4).contains(&fetch.tottime) {
            return Err(format!(
                "{who}: {FETCH} {} s, but it sleeps 1.0 s",
                fetch.tottime
            ));
        }
        let top_cpu = rows.iter().find(|r| r.key != FETCH).unwrap();
        if top_cpu.key != FINGERPRINT {
            return Err(format!("{who} ranks {} first among CPU work", top_cpu.key));
        }
    }
    for key in [FINGERPRINT, FETCH] {
        let (Some(x), Some(y)) = (share(&a, key), share(&b, key)) else {
            return Err(format!("no {key} row"));
        };
        if (x - y).abs() > 6.0 {
            return Err(format!(
                "{key}: tachyon {x}% vs reference {y}% (more than 6 points apart)"
            ));
        }
        eprintln!("{key}: tachyon {x}%, reference {y}%");
    }
    Ok(())
}

/// One CPU this test may run on (the last one allowed).
fn one_cpu() -> Option<usize> {
    use nix::sched::{CpuSet, sched_getaffinity};
    let set = sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    if cpus.len() > 1 {
        cpus.last().copied()
    } else {
        None
    }
}

/// `cmd` under `taskset -c CPU` (the whole process tree on that CPU).
fn pinned(cpu: Option<usize>, cmd: &Command) -> Command {
    let Some(cpu) = cpu else {
        let mut c = Command::new(cmd.get_program());
        c.args(cmd.get_args());
        copy_setup(cmd, &mut c);
        return c;
    };
    let mut c = Command::new("taskset");
    c.arg("-c")
        .arg(cpu.to_string())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    copy_setup(cmd, &mut c);
    c
}

fn copy_setup(from: &Command, to: &mut Command) {
    if let Some(d) = from.get_current_dir() {
        to.current_dir(d);
    }
    for (k, v) in from.get_envs() {
        match v {
            Some(v) => to.env(k, v),
            None => to.env_remove(k),
        };
    }
}

#[test]
fn the_table_agrees_with_the_reference_on_report_py() {
    let dir = Dir::in_root("agree", &[("report.py", REPORT)]);
    let script = dir.inside("report.py");
    // The shares of a CPU-bound and a sleeping function move with the
    // machine's load, so both profilers run at the same time on the same
    // CPU: the scheduler splits that CPU fairly between the two programs,
    // whatever else runs. A retry absorbs a burst that hits one run only;
    // a real disagreement fails every attempt.
    let cpu = one_cpu();
    let start = Instant::now();
    let mut failures = Vec::new();
    for attempt in 1..=3 {
        let ours = Running::start(pinned(
            cpu,
            &tachyon_run_cmd(&["-l", "30"], &script, &dir.outside),
        ));
        let theirs = Running::start(pinned(cpu, &reference_run_cmd(&["-l", "30"], &script)));
        let ours = ours.finish(Duration::from_secs(30));
        let theirs = theirs.finish(Duration::from_secs(30));
        let (o, t) = (text(&ours.stdout), text(&theirs.stdout));
        assert!(
            ours.status.success(),
            "tachyon failed:\n{o}\n{}",
            text(&ours.stderr)
        );
        assert!(
            theirs.status.success(),
            "the reference failed:\n{t}\n{}",
            text(&theirs.stderr)
        );
        for out in [&o, &t] {
            assert!(out.contains("top: ('/api/item/0', 600)"), "{out}");
        }
        match compare(&o, &t) {
            Ok(()) => return,
            Err(e) => failures.push(format!(
                "attempt {attempt}: {e}\n--- tachyon:\n{o}\n--- reference:\n{t}"
            )),
        }
        // Three attempts, unless they take long: a loaded machine stretches
        // one to 12 s, and a single attempt then decides (the retry is for
        // such load).
        if start.elapsed() > Duration::from_secs(40) {
            break;
        }
    }
    panic!("{}", failures.join("\n"));
}

/// Loads a pstats file with the standard library and prints the CPU-bound
/// function with the most tottime (the sleeping `fetch_upstream` aside: on
/// a fast machine it outweighs the CPU work) and the time of the sleep.
const LOAD_PSTATS: &str = r#"
import pstats, sys
s = pstats.Stats(sys.argv[1])
s.sort_stats("tottime")
cpu = [kv for kv in s.stats.items() if kv[0][2] != "fetch_upstream"]
(path, line, name), (cc, nc, tt, ct, callers) = max(cpu, key=lambda kv: kv[1][2])
print("TOP", name, path, tt)
print("SLEEP", sum(v[2] for k, v in s.stats.items() if k[2] == "fetch_upstream"))
print("TOTAL", s.total_tt)
"#;

/// (function with the most tottime, its tottime, total tottime).
fn top_of(out: &Output, who: &str) -> (String, f64, f64) {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{who} cannot load the pstats file:\n{stdout}\n{}",
        text(&out.stderr)
    );
    let top: Vec<&str> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("TOP "))
        .unwrap_or_else(|| panic!("{who}: {stdout}"))
        .split_whitespace()
        .collect();
    let total: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("TOTAL "))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("{who}: {stdout}"));
    (
        top[0].to_string(),
        top.last().unwrap().parse().unwrap(),
        total,
    )
}

#[test]
fn run_with_o_writes_a_pstats_file_that_python_loads() {
    let dir = Dir::in_root("pstats", &[("report.py", REPORT), ("load.py", LOAD_PSTATS)]);
    let file = dir.outside("out.pstats");
    let out = Running::start(tachyon_run_cmd(
        &["-o", file.to_str().unwrap()],
        &dir.inside("report.py"),
        &dir.outside,
    ))
    .finish(Duration::from_secs(30));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(file.is_file(), "no pstats file written:\n{stdout}");
    // Like the reference, writing a pstats file prints no table and no
    // "written to" line: the program's output, then the run statistics.
    assert!(!stdout.contains("Profile Stats:"), "{stdout}");
    assert!(!stdout.contains("written"), "{stdout}");
    assert!(stdout.contains("top: ('/api/item/0', 600)"), "{stdout}");
    assert!(stdout.contains("Captured "), "{stdout}");
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));

    let sid = Running::start({
        let mut c = Command::new("chroot");
        c.arg(sid_root())
            .arg(py315().exe)
            .arg(dir.inside("load.py"))
            .arg(dir.inside("out.pstats"));
        c
    })
    .finish(Duration::from_secs(20));
    let (name, tt, total) = top_of(&sid, "python3.15");
    assert_eq!(name, "fingerprint", "{}", text(&sid.stdout));
    assert!(tt > 0.0 && tt <= total, "{}", text(&sid.stdout));
    let sleep: f64 = text(&sid.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("SLEEP "))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}", text(&sid.stdout)));
    assert!(
        (0.7..1.4).contains(&sleep),
        "fetch_upstream sleeps 1 s, the file says {sleep} s"
    );

    let host = Path::new("/usr/bin/python3.11");
    assert!(
        host.exists(),
        "MISSING INTERPRETER: /usr/bin/python3.11 is one of the machine's interpreters"
    );
    {
        let old = Running::start({
            let mut c = Command::new(host);
            c.arg(dir.outside("load.py")).arg(&file);
            c
        })
        .finish(Duration::from_secs(20));
        let (name, tt2, _) = top_of(&old, "python3.11");
        assert_eq!(name, "fingerprint", "{}", text(&old.stdout));
        assert!(
            (tt - tt2).abs() < 1e-9,
            "3.15 and 3.11 read different numbers"
        );
    }
}

/// A target that loops with short sleeps; ready once it printed READY.
fn idle_target() -> common::Target {
    let mut t = spawn(
        &py315(),
        "import time\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.001)\n",
        &[],
        &[],
    );
    t.wait_for("READY", Duration::from_secs(20));
    t
}

#[test]
fn realtime_stats_update_while_sampling_and_the_summary_follows() {
    let t = idle_target();
    let host = Dir::on_host("rt");
    let pid = t.pid().to_string();
    let out = tachyon(
        &[
            "attach",
            "--realtime-stats",
            "-d",
            "2.5",
            "--collapsed",
            "-o",
            "/dev/null",
            &pid,
        ],
        &host.outside,
        Duration::from_secs(20),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // tachyon writes the updates to stderr (the reference: stdout). Not
    // on a terminal (here a pipe), each is a whole line: no escape codes,
    // nothing for the program's output to glue onto.
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\r'),
        "{stderr:?}"
    );
    let updates: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("Stats: "))
        .collect();
    assert!(updates.len() >= 2, "fewer than two updates: {stderr:?}");
    for u in &updates {
        let hz: f64 = u
            .strip_prefix("Stats: ")
            .and_then(|r| r.split("Hz").next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("not a stats update: {u:?} in {stderr:?}"));
        assert!(hz > 0.0 && u.contains("N="), "{u:?}");
    }
    assert!(
        stderr.ends_with('\n') && !stderr.ends_with("\n\n"),
        "the last update is not ended by one newline: {stderr:?}"
    );
    assert!(!stdout.contains("Stats:"), "{stdout}");
    let captured = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Captured "))
        .unwrap_or_else(|| panic!("no Captured line:\n{stdout}"));
    assert!(captured.contains(" in 2.5"), "{captured}");
    assert!(stdout.contains("\nSample rate: "), "{stdout}");
    assert!(stdout.contains("\nError rate: "), "{stdout}");
    drop(t);
}

const BUSY: &str = r#"
import threading, time

counter = 0

def busy_loop():
    global counter
    last = time.monotonic()
    while True:
        counter += 1
        if counter % 1000 == 0 and time.monotonic() - last > 0.02:
            last = time.monotonic()
            print("COUNT", counter, flush=True)

t = threading.Thread(target=busy_loop, daemon=True)
t.start()
t.join()
"#;

#[test]
fn dump_blocking_always_resumes_the_target() {
    let t = spawn(&py315(), BUSY, &[], &[]);
    let pid = t.pid();
    let count = |line: String| -> u64 {
        line.strip_prefix("COUNT ")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected target output {line:?}"))
    };
    // The newest counter value printed so far, waiting for one.
    let newest = || -> u64 {
        let mut last = t
            .next_line(Duration::from_secs(10))
            .map(count)
            .expect("the target stopped counting");
        while let Some(l) = t.next_line(Duration::ZERO) {
            last = count(l);
        }
        last
    };
    let mut before = newest();
    let host = Dir::on_host("dump");
    for i in 0..20 {
        let out = tachyon(
            &["dump", "--blocking", "-a", &pid.to_string()],
            &host.outside,
            Duration::from_secs(20),
        );
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "dump {i}: {stdout}\n{}",
            text(&out.stderr)
        );
        assert!(
            stdout.starts_with(&format!("Stack dump for PID {pid}")),
            "{stdout}"
        );
        assert!(
            stdout.contains(", in busy_loop\n"),
            "dump {i} lacks the busy function:\n{stdout}"
        );
        for (tid, state) in common::procs::thread_states(pid) {
            assert!(
                !matches!(state, 't' | 'T'),
                "after dump {i}, thread {tid} is left stopped ({state})"
            );
        }
        // The counter keeps advancing: wait for a value printed after the dump.
        while let Some(l) = t.next_line(Duration::ZERO) {
            before = before.max(count(l));
        }
        let after = newest();
        assert!(
            after > before,
            "after dump {i} the counter stays at {before}: the target was not resumed"
        );
        before = after;
    }
}

/// The run failed with one clear error line on stderr naming `needle`,
/// a non-zero status, and nothing on stdout.
fn assert_usage_error(args: &[&str], needle: &str) {
    let host = Dir::on_host("err");
    let out = tachyon(args, &host.outside, Duration::from_secs(20));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !out.status.success() && out.status.code().is_some(),
        "{args:?} should fail: {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.is_empty(), "{args:?}: stdout on error: {stdout}");
    // clap adds a blank line, possible values and a "try --help" hint;
    // tachyon's own errors are one line. Either way exactly one line says
    // what is wrong.
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
    let line = errors[0];
    assert!(
        line.starts_with("error: ") || line.starts_with("tachyon: error: "),
        "{args:?}: {stderr}"
    );
    assert!(
        line.contains(needle),
        "{args:?}: {needle:?} not in {line:?}"
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(host.names().is_empty(), "{args:?} wrote {:?}", host.names());
}

#[test]
fn bad_arguments_give_one_clear_line() {
    assert_usage_error(&["run", "-r", "0", "x.py"], "positive");
    assert_usage_error(&["run", "-r", "fast", "x.py"], "fast");
    assert_usage_error(&["attach", "-r", "fast", "1"], "--sampling-rate");
    assert_usage_error(&["run", "-d", "-1", "x.py"], "-1");
    assert_usage_error(&["run", "-d", "0", "x.py"], "positive");
    assert_usage_error(&["run", "--sort", "bogus", "x.py"], "bogus");
    assert_usage_error(
        &["run", "--collapsed", "--sort", "nsamples", "x.py"],
        "--sort",
    );
    assert_usage_error(&["run", "--collapsed", "-l", "5", "x.py"], "pstats");
    assert_usage_error(&["run", "--collapsed", "--pstats", "x.py"], "--pstats");
    assert_usage_error(&["run"], "nothing to run");
    assert_usage_error(&["attach"], "required");
    assert_usage_error(&["attach", "notapid"], "notapid");
    assert_usage_error(&["bogus-command"], "bogus-command");
    assert_usage_error(&["run", "-d", "1e20", "x.py"], "at most");
    assert_usage_error(&["run", "-d", "18446744073709551616", "x.py"], "at most");
    assert_usage_error(&["attach", "-r", "0.00000000001hz", "1"], "too low");
    // An option of ours, misspelt before the script: an argument error
    // with clap's suggestion, not "script not found: --flamgraph".
    assert_usage_error(&["run", "--flamgraph", "x.py"], "--flamgraph");
    assert_usage_error(&["run", "-x", "x.py"], "'-x'");
    // python's own option before the script: the tip is the command form.
    let host = Dir::on_host("dash-c");
    let out = tachyon(
        &["run", "-c", "pass"],
        &host.outside,
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("tip: -c is an option of python")
            && err.contains("tachyon run -- python3 -c pass"),
        "{err}"
    );
    // The heatmap is a directory: an existing file at -o is refused before
    // anything runs, and left as it was.
    let host = Dir::on_host("heatmap-file");
    let file = host.outside("taken.txt");
    std::fs::write(&file, "mine").unwrap();
    let out = tachyon(
        &["run", "--heatmap", "-o", file.to_str().unwrap(), "x.py"],
        &host.outside,
        Duration::from_secs(20),
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--heatmap writes a directory"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    let host = Dir::on_host("typo");
    let out = tachyon(
        &["run", "--flamgraph", "x.py"],
        &host.outside,
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("a similar argument exists: '--flamegraph'"),
        "{err}"
    );
    assert!(!err.contains("-- --flamgraph"), "{err}");

    // attach to a live process that is not Python.
    let sleeper = Running::start({
        let mut c = Command::new("sleep");
        c.arg("30");
        c
    });
    let pid = sleeper.child.id().to_string();
    assert_usage_error(&["attach", "-d", "1", &pid], "not a Python process");
    drop(sleeper);
}

#[test]
fn a_target_killed_under_attach_is_said_and_its_profile_kept() {
    let mut t = idle_target();
    let host = Dir::on_host("killed");
    let pid = t.pid().to_string();
    let out_file = host.outside("prof.txt");
    let cmd = tachyon_cmd(
        &[
            "attach",
            "--collapsed",
            "-o",
            out_file.to_str().unwrap(),
            &pid,
        ],
        &host.outside,
    );
    let run = Running::start(cmd);
    // Let it sample a while, then kill the target. The test is its parent
    // and does not reap it yet: its exit status is there to be read.
    std::thread::sleep(Duration::from_millis(700));
    t.child.kill().unwrap();
    let out = run.finish(Duration::from_secs(30));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.contains("exited")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].starts_with(&format!(
            "tachyon: target process {pid} exited (killed by SIGKILL) after "
        )),
        "{err}"
    );
    assert!(said[0].ends_with(" s"), "{err}");
    let profile = std::fs::read_to_string(&out_file).unwrap_or_default();
    assert!(!profile.trim().is_empty(), "no profile written: {err}");
    drop(t);
}

#[test]
fn a_program_killed_under_run_is_said() {
    let dir = Dir::in_root(
        "run-killed",
        &[(
            "k.py",
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
        )],
    );
    let cmd = tachyon_run_cmd(
        &["--collapsed", "-o", "/dev/null"],
        &dir.inside("k.py"),
        &dir.outside,
    );
    let out = Running::start(cmd).finish(Duration::from_secs(60));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{err}");
    assert!(
        err.lines()
            .any(|l| l == "tachyon: the program was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
}

#[test]
fn py_spy_spellings_rate_and_pid_are_accepted() {
    let t = idle_target();
    let host = Dir::on_host("pyspy");
    let pid = t.pid().to_string();
    // `--rate` is --sampling-rate, `--pid PID` the PID: no "similar
    // argument" error, a profile.
    for args in [
        vec![
            "attach",
            "--rate",
            "100",
            "-d",
            "0.5",
            "--collapsed",
            "-o",
            "/dev/null",
            &pid,
        ],
        vec![
            "attach",
            "--pid",
            &pid,
            "-d",
            "0.5",
            "--collapsed",
            "-o",
            "/dev/null",
        ],
        vec!["dump", "--pid", &pid],
    ] {
        let out = tachyon(&args, &host.outside, Duration::from_secs(20));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
        assert!(
            stderr.is_empty() || !stderr.contains("error"),
            "{args:?}: {stderr}"
        );
    }
    // Both a PID and --pid: one line says they conflict.
    assert_usage_error(&["attach", "--pid", "1", "2"], "cannot be used with");
    // The help names the spellings.
    let out = tachyon(
        &["attach", "--help"],
        &host.outside,
        Duration::from_secs(20),
    );
    let help = text(&out.stdout);
    assert!(
        help.contains("--rate") && help.contains("--pid <PID>"),
        "{help}"
    );
    drop(t);
}

#[test]
fn help_succeeds_and_names_the_main_flags() {
    let host = Dir::on_host("help");
    let out = tachyon(&["--help"], &host.outside, Duration::from_secs(20));
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}{}", text(&out.stderr));
    for w in ["run", "attach", "dump", "Usage"] {
        assert!(s.contains(w), "tachyon --help lacks {w:?}:\n{s}");
    }
    let out = tachyon(&["run", "--help"], &host.outside, Duration::from_secs(20));
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}{}", text(&out.stderr));
    for w in [
        "--sampling-rate",
        "--duration",
        "--all-threads",
        "--mode",
        "--collapsed",
        "--pstats",
        "--output",
        "--sort",
        "--limit",
        "--realtime-stats",
        "--module",
        "-r,",
        "-d,",
        "-a,",
        "-o,",
        "-l,",
    ] {
        assert!(s.contains(w), "tachyon run --help lacks {w:?}:\n{s}");
    }
    let out = tachyon(
        &["attach", "--help"],
        &host.outside,
        Duration::from_secs(20),
    );
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}{}", text(&out.stderr));
    assert!(s.contains("<PID>") && s.contains("--sampling-rate"), "{s}");
}

/// The PID a program printed first (`PID n`).
fn printed_pid(stdout: &str) -> u32 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("PID "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the program printed no PID:\n{stdout}"))
}

#[test]
fn outputs_get_the_default_names() {
    let root = Dir::in_root("names", &[("short.py", SHORT)]);
    let script = root.inside("short.py");

    // --collapsed without -o: collapsed_<pid>.txt in the current directory.
    let cwd = Dir::on_host("cwd");
    let out = Running::start(tachyon_run_cmd(&["--collapsed"], &script, &cwd.outside))
        .finish(Duration::from_secs(20));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let name = format!("collapsed_{}.txt", printed_pid(&stdout));
    assert_eq!(cwd.names(), vec![name.clone()], "{stdout}");
    assert!(
        stdout.contains(&format!("Collapsed stack output written to {name}")),
        "{stdout}"
    );
    let collapsed = std::fs::read_to_string(cwd.outside(&name)).unwrap();
    assert!(collapsed.contains("short.py:<module>:"), "{collapsed}");

    // -o DIR: the default name inside DIR, for both formats.
    let outdir = Dir::on_host("outdir");
    let o = outdir.outside.to_str().unwrap().to_string();
    let out = Running::start(tachyon_run_cmd(
        &["--collapsed", "-o", &o],
        &script,
        &cwd.outside,
    ))
    .finish(Duration::from_secs(20));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let collapsed_name = format!("collapsed_{}.txt", printed_pid(&stdout));
    assert_eq!(outdir.names(), vec![collapsed_name.clone()], "{stdout}");

    let out = Running::start(tachyon_run_cmd(&["-o", &o], &script, &cwd.outside))
        .finish(Duration::from_secs(20));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // The reference names it <format>_<pid>.<ext>: pstats_<pid>.pstats.
    let pstats_name = format!("pstats_{}.pstats", printed_pid(&stdout));
    let mut want = vec![collapsed_name, pstats_name.clone()];
    want.sort();
    assert_eq!(outdir.names(), want, "{stdout}");
    assert!(
        std::fs::metadata(outdir.outside(&pstats_name))
            .unwrap()
            .len()
            > 0,
        "empty pstats file"
    );
    // Nothing else landed in the current directory.
    assert_eq!(cwd.names(), vec![name]);

    // attach: the target's PID names the file.
    let t = idle_target();
    let cwd2 = Dir::on_host("cwd2");
    let out = tachyon(
        &["attach", "--collapsed", "-d", "0.5", &t.pid().to_string()],
        &cwd2.outside,
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(cwd2.names(), vec![format!("collapsed_{}.txt", t.pid())]);
}

/// What the stand-in browser wrote to `log` (the page it was asked to
/// open), once it did, or nothing after 20 s.
fn page_opened(log: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = std::fs::read_to_string(log).unwrap_or_default();
        if !s.is_empty() || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn browser_opens_the_html_output_once_written() {
    let dir = Dir::in_root("browser", &[("short.py", SHORT)]);
    // A stand-in browser that notes the page it was asked to open.
    let log = dir.outside("opened.log");
    let opener = dir.outside("opener.sh");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\necho \"$1\" >> {}\n", log.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let page = dir.outside("f.html");
    let mut cmd = tachyon_run_cmd(
        &["--flamegraph", "--browser", "-o", page.to_str().unwrap()],
        &dir.inside("short.py"),
        &dir.outside,
    );
    cmd.env("BROWSER", &opener);
    let out = Running::start(cmd).finish(Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(page.is_file(), "no page written");
    // The browser is started, not waited for.
    let opened = page_opened(&log);
    assert_eq!(opened.trim(), page.to_str().unwrap());

    // The heatmap: its index is the page opened.
    std::fs::remove_file(&log).unwrap();
    let heatmap = dir.outside("hm");
    let mut cmd = tachyon_run_cmd(
        &["--heatmap", "--browser", "-o", heatmap.to_str().unwrap()],
        &dir.inside("short.py"),
        &dir.outside,
    );
    cmd.env("BROWSER", &opener);
    let out = Running::start(cmd).finish(Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let index = heatmap.join("index.html");
    assert!(index.is_file(), "no heatmap index written");
    let opened = page_opened(&log);
    assert_eq!(opened.trim(), index.to_str().unwrap());

    // No browser at all: said in one line, the page written all the same.
    std::fs::remove_file(&page).unwrap();
    let mut cmd = tachyon_run_cmd(
        &["--flamegraph", "--browser", "-o", page.to_str().unwrap()],
        &dir.inside("short.py"),
        &dir.outside,
    );
    // A PATH with chroot and nothing else: no xdg-open, no open.
    let bin = dir.outside("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let chroot = ["/usr/sbin/chroot", "/usr/bin/chroot"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("chroot");
    std::os::unix::fs::symlink(chroot, bin.join("chroot")).unwrap();
    cmd.env("PATH", &bin).env("BROWSER", "/nonexistent/browser");
    let out = Running::start(cmd).finish(Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(page.is_file(), "no page written");
    let err = text(&out.stderr);
    assert!(err.contains("no browser to open"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    // No $BROWSER, and xdg-open finds no way to open it (it exits 3, as it
    // does on a machine without a desktop): said in one line that names the
    // page to open, the page written all the same.
    std::fs::remove_file(&page).unwrap();
    let xdg = bin.join("xdg-open");
    std::fs::write(
        &xdg,
        "#!/bin/sh\necho \"xdg-open: no method available for opening '$1'\" >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = tachyon_run_cmd(
        &["--flamegraph", "--browser", "-o", page.to_str().unwrap()],
        &dir.inside("short.py"),
        &dir.outside,
    );
    let path = format!("{}:/bin:/usr/bin", bin.display());
    cmd.env("PATH", &path).env_remove("BROWSER");
    let out = Running::start(cmd).finish(Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(page.is_file(), "no page written");
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("could not open a browser"), "{err}");
    assert!(lines[0].contains("exit status 3"), "{err}");
    assert!(lines[0].contains(page.to_str().unwrap()), "{err}");

    assert_usage_error(&["run", "--collapsed", "--browser", "x.py"], "--browser");
}
