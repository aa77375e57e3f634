//! How much work `tachyon run` does while the interpreter starts, counted
//! (never timed): the files tachyon opens and the ptrace stops of the
//! program, for `run` of an empty script, per interpreter.
//!
//! Counted with strace on tachyon's main thread (not `-f`: tachyon
//! must be free to trace the program itself), which is the thread that
//! starts the program and waits for its runtime. Before the start-up was
//! fixed, a 3.11/3.12 under `run` was stopped after each of its ~500
//! start-up system calls and its 20-30 MB binary re-parsed at each stop:
//! 490-570 stops and 990-1,790 opens, where a bare start takes some 30 ms.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Interp, RootDir, Running, TempDir, tachyon_bin};

/// Most files tachyon may open for `run empty.py`: its own few (the
/// output, /proc entries of the program) and the interpreter's binaries
/// once each. The old start-up opened 990-1,790 on 3.11/3.12 (the maps
/// and each binary at every stop).
const MOST_OPENS: u64 = 100;

/// Most ptrace stops of the program: its exec, the loader's system calls
/// until libpython is mapped (about 90 for a pyenv build), the write of
/// the runtime's ready flag. The old start-up stopped a 3.11/3.12 490-570
/// times.
const MOST_STOPS: u64 = 200;

/// strace, which `scripts/provision-tools.sh` installs.
fn strace() -> PathBuf {
    ["/usr/bin/strace", "/bin/strace"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("MISSING TOOL: strace is not installed (run scripts/provision-tools.sh)")
        })
}

/// What strace saw tachyon do.
#[derive(Debug)]
struct Counts {
    /// Files opened, but for `/proc/N/stat`: tachyon reads those of every
    /// process on the machine to know the program's process tree, a
    /// number that depends on the machine.
    opens: u64,
    /// Waits that returned a stop of the program (a ptrace stop).
    stops: u64,
}

fn count(log: &str) -> Counts {
    let machine_scan = |l: &str| {
        l.split('"').nth(1).is_some_and(|path| {
            path.strip_prefix("/proc/")
                .and_then(|rest| rest.strip_suffix("/stat"))
                .is_some_and(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    Counts {
        opens: log
            .lines()
            .filter(|l| l.starts_with("openat(") && !machine_scan(l))
            .count() as u64,
        stops: log
            .lines()
            .filter(|l| l.starts_with("wait4(") && l.contains("WIFSTOPPED"))
            .count() as u64,
    }
}

/// Run tachyon with `args` under strace; it must succeed.
fn counted(args: &[&str], cwd: &Path, what: &str) -> Counts {
    let log = cwd.join("strace.txt");
    let mut cmd = Command::new(strace());
    cmd.args(["-e", "trace=openat,wait4", "-o"])
        .arg(&log)
        .arg("--")
        .arg(tachyon_bin())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        // As a user runs it: cargo's library path would have the loaders
        // of tachyon and of the program search more directories.
        .env_remove("LD_LIBRARY_PATH");
    let out = Running::start(cmd).finish(Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{what}: tachyon failed ({}):\n{}\n{}",
        out.status,
        common::text(&out.stdout),
        common::text(&out.stderr)
    );
    count(&std::fs::read_to_string(&log).expect("strace wrote no log"))
}

fn check(counts: &Counts, what: &str) {
    eprintln!("{what}: {counts:?}");
    assert!(
        counts.opens <= MOST_OPENS,
        "{what}: tachyon opened {} files while the program started (at most {MOST_OPENS}): are binaries parsed again at each stop?",
        counts.opens
    );
    assert!(
        counts.stops <= MOST_STOPS,
        "{what}: the program stopped {} times for tachyon (at most {MOST_STOPS}): is the interpreter stepped through its whole start-up?",
        counts.stops
    );
    // At least its exec: else strace did not see tachyon's tracer.
    assert!(counts.stops >= 1, "{what}: strace saw no stop at all");
}

/// A directory of the test's own holding an empty `empty.py`.
fn scratch(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    std::fs::write(dir.join("empty.py"), "").unwrap();
    dir
}

fn run_empty(interp: &Interp) {
    let dir = scratch(&interp.name);
    let exe = interp.exe.to_string_lossy().into_owned();
    let counts = counted(
        &["run", "--python", &exe, "-o", "out.pstats", "empty.py"],
        &dir.0,
        &interp.name,
    );
    check(&counts, &interp.name);
}

#[test]
fn run_of_3_11_and_3_12_does_not_step_through_their_start() {
    let _one = common::one_at_a_time();
    for interp in common::machine_old_interpreters() {
        run_empty(&interp);
    }
}

#[test]
fn run_of_a_shared_3_13_parses_its_binaries_once() {
    let _one = common::one_at_a_time();
    for interp in common::machine_supported_interpreters() {
        run_empty(&interp);
    }
}

#[test]
fn run_of_the_sid_interpreters_stays_cheap() {
    let _one = common::one_at_a_time();
    for interp in common::release(common::sid_interpreters()) {
        let root = interp
            .root
            .clone()
            .expect("sid interpreters live in a root");
        let scripts = RootDir::new(&[("empty.py", "")]);
        let dir = scratch(&interp.name);
        let (root, exe, script) = (
            root.to_string_lossy().into_owned(),
            interp.exe.to_string_lossy().into_owned(),
            scripts.inside("empty.py"),
        );
        let counts = counted(
            &[
                "run",
                "-o",
                "out.pstats",
                "--",
                "chroot",
                &root,
                &exe,
                &script,
            ],
            &dir.0,
            &interp.name,
        );
        check(&counts, &interp.name);
    }
}

/// Locating a runtime again in the same process image parses no binary
/// again: the facts of each image are kept.
#[test]
fn a_binary_is_parsed_once_per_image() {
    use tachyon::process::linux::LinuxProcess;
    let _one = common::one_at_a_time();
    let sleeper = "import time\nprint('READY', flush=True)\ntime.sleep(60)\n";
    for interp in common::machine_old_interpreters()
        .into_iter()
        .chain(common::machine_supported_interpreters())
    {
        let mut t = common::spawn(&interp, sleeper, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let proc = LinuxProcess::open(t.pid()).unwrap();
        let locate = || {
            let before = tachyon::runtime::elf_parses();
            tachyon::session::locate(&proc).unwrap_or_else(|e| panic!("{}: {e}", interp.name));
            tachyon::runtime::elf_parses() - before
        };
        // The first look parses each candidate once: the executable, a
        // libpython, extension modules named `*.cpython-*.so`.
        let first = locate();
        assert!(first >= 1, "{}: the first look parsed nothing", interp.name);
        for _ in 0..4 {
            let again = locate();
            assert_eq!(
                again, 0,
                "{}: a look at the same images parsed {again} binaries again",
                interp.name
            );
        }
    }
}
