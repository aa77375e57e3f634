//! The multi-process scenarios of the `--subprocesses` tests, shared by
//! `subprocesses.rs` (a profile per child) and `merge.rs` (one merged
//! output): the programs, the `tachyon run` that profiles them in the sid
//! root, and the pids they print.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{Interp, RootDir, Running, sid_root, tachyon_bin, text};

/// A pool of four (fork, else the start method given) doing known CPU
/// work in `burn_in_worker`; the parent prints `WORKERS w... PARENT p`.
pub const POOL: &str = include_str!("../../fixtures/targets/pool.py");

/// Forked workers spinning (in `early_worker`, then `late_worker`) until
/// their parent is gone: two from the start (`READY w w`), two more once
/// the file `go` appears beside the script (`LATE w w`).
pub const LONG_WORKERS: &str = r#"
import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
parent = os.getpid()

def spin(name):
    s = 0
    while os.getppid() == parent:
        for i in range(3000):
            s += i

def early_worker():
    spin("early")

def late_worker():
    spin("late")

def start(fn):
    pid = os.fork()
    if pid == 0:
        fn()
        os._exit(0)
    return pid

early = [start(early_worker) for _ in range(2)]
sys.stdout.write("READY " + " ".join(map(str, early)) + "\n")
sys.stdout.flush()
while not os.path.exists(os.path.join(here, "go")):
    time.sleep(0.01)
late = [start(late_worker) for _ in range(2)]
sys.stdout.write("LATE " + " ".join(map(str, late)) + "\n")
sys.stdout.flush()
while True:
    time.sleep(1)
"#;

/// `subprocess.run(["sleep", ...])` twenty times: children that fork
/// (vfork, on 3.13+) and exec a program that is not Python; then `DONE`.
pub const RUNS_SLEEP: &str = r#"
import subprocess
for i in range(20):
    subprocess.run(["sleep", "0.02"])
print("DONE", flush=True)
"#;

/// A program that busies itself in `work_of_NAME` for `seconds`, then
/// prints `NAME PID`.
pub fn work_of(name: &str, seconds: f64) -> String {
    format!(
        "import os, sys, time\n\
         def work_of_{name}():\n    t = time.time()\n    while time.time() - t < {seconds}:\n        pass\n\
         work_of_{name}()\n\
         sys.stdout.write(\"{name} \" + str(os.getpid()) + \"\\n\")\n\
         sys.stdout.flush()\n"
    )
}

/// tachyon's words for `run --subprocesses FLAGS -o OUT -- chroot SID`
/// (the command to profile follows).
pub fn run_args(flags: &[&str], out: &Path) -> Vec<OsString> {
    let mut v: Vec<OsString> = ["run", "--subprocesses"].map(OsString::from).into();
    v.extend(flags.iter().map(OsString::from));
    v.extend([
        "-o".into(),
        out.into(),
        "--".into(),
        "chroot".into(),
        sid_root().into(),
    ]);
    v
}

/// `tachyon run --subprocesses FLAGS -o DIR/OUT -- chroot SID PYTHON
/// DIR/SCRIPT ARGS`.
pub fn run_python(
    it: &Interp,
    dir: &RootDir,
    flags: &[&str],
    out: &str,
    script: &str,
    args: &[&str],
) -> Command {
    let mut cmd = Command::new(tachyon_bin());
    cmd.args(run_args(flags, &dir.outside(out)))
        .arg(&it.exe)
        .arg(dir.inside(script))
        .args(args);
    cmd
}

/// `cmd` to its end (at most `timeout`): its standard output and error;
/// fails the test, with both, unless it succeeds.
pub fn succeeds(who: &str, cmd: Command, timeout: Duration) -> (String, String) {
    let out = Running::start(cmd).finish(timeout);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{who}: tachyon run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// The pids printed after `tag` on a line of `stdout`.
pub fn pids_after(stdout: &str, tag: &str) -> Vec<i32> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(tag))
        .unwrap_or_else(|| panic!("no {tag:?} line in:\n{stdout}"));
    // Another process's line may follow on the same line (two writers on
    // one pipe): the pids are the numbers up to the first other word.
    let pids: Vec<i32> = line
        .split_whitespace()
        .map_while(|p| p.parse().ok())
        .collect();
    assert!(!pids.is_empty(), "no pids after {tag:?} in:\n{stdout}");
    pids
}

/// The pool's `WORKERS w... PARENT p` line: the workers that took a task
/// and the parent.
pub fn pool_pids(stdout: &str) -> (Vec<i32>, i32) {
    let workers = pids_after(stdout, "WORKERS ");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("WORKERS "))
        .unwrap();
    let mut after = line.split_whitespace().skip(workers.len());
    assert_eq!(after.next(), Some("PARENT"), "{line}");
    // Another process's line may follow on the same line.
    let parent = after
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no parent's pid in {line}"));
    (workers, parent)
}
