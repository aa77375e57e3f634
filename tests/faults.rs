//! What happens around tachyon never loses the profile or kills the
//! program: standard output closed by its reader (`| head`) or full
//! (`> /dev/full`), standard error closed, a hangup (an ssh session that
//! drops), a full disk, an `-o` that names the input, and rates so low that
//! the next sample is minutes away. Every case runs the real binary against
//! a real CPython 3.15 from the sid root.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{RootDir, Target, sid_interpreters, sid_root, spawn, tachyon_bin, text};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn py315() -> common::Interp {
    sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("sid python3.15")
}

/// A standard output or error whose reader has already gone: the read end
/// of the pipe is closed before tachyon writes a byte.
fn closed_pipe() -> Stdio {
    let (r, w) = nix::unistd::pipe().expect("pipe");
    drop(r);
    Stdio::from(w)
}

fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .unwrap(),
    )
}

/// tachyon, killed and reaped on drop whatever happens.
struct Tachyon(Option<Child>);

impl Tachyon {
    fn start(args: &[&str], stdout: Stdio, stderr: Stdio) -> Tachyon {
        let child = Command::new(tachyon_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("cannot start tachyon");
        Tachyon(Some(child))
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.0.as_ref().unwrap().id() as i32)
    }

    /// Wait for the end (at most `limit`, then it is killed and the test
    /// fails).
    fn finish(mut self, limit: Duration) -> Output {
        let mut child = self.0.take().unwrap();
        let deadline = Instant::now() + limit;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "tachyon did not finish within {limit:?}; stdout:\n{}\nstderr:\n{}",
                    text(&out.stdout),
                    text(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child.wait_with_output().unwrap()
    }
}

impl Drop for Tachyon {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `tachyon run ARGS -- chroot SID python3.15 SCRIPT`.
fn run_args(args: &[&str], script_inside: &str) -> Vec<String> {
    let mut v: Vec<String> = ["run"].iter().chain(args).map(|s| s.to_string()).collect();
    v.push("--".into());
    v.push("chroot".into());
    v.push(sid_root().to_string_lossy().into_owned());
    v.push(py315().exe.to_string_lossy().into_owned());
    v.push(script_inside.into());
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A target that sleeps in a loop, ready once it printed READY.
fn sleeper() -> Target {
    let mut t = spawn(
        &py315(),
        "import time\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.001)\n",
        &[],
        &[],
    );
    t.wait_for("READY", Duration::from_secs(30));
    t
}

/// Recurses to a random depth over and over: a new stack nearly every
/// sample, so outputs grow fast.
const CHURN: &str = r#"
import random
def down(n):
    if n:
        return down(n - 1)
    return sum(range(50))
print("READY", flush=True)
while True:
    down(random.randrange(1, 80))
"#;

/// Busy for a moment, then exits with status 3.
const EXIT3: &str = "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 0.3:\n    pass\nraise SystemExit(3)\n";

fn assert_no_panic(out: &Output) {
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "tachyon panicked:\n{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}

#[test]
fn a_closed_stdout_keeps_the_profile_and_the_programs_exit_code() {
    let dir = RootDir::new(&[("exit3.py", EXIT3)]);
    let file = dir.outside.join("c.txt");
    let args = run_args(
        &["--collapsed", "-o", file.to_str().unwrap()],
        &dir.inside("exit3.py"),
    );
    let out =
        Tachyon::start(&strs(&args), closed_pipe(), Stdio::piped()).finish(Duration::from_secs(60));
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    let collapsed = std::fs::read_to_string(&file).expect("no profile written");
    assert!(collapsed.contains("exit3.py:<module>:3"), "{collapsed}");

    // The table itself on the closed pipe: a quiet end, the program's code.
    let args = run_args(&[], &dir.inside("exit3.py"));
    let out =
        Tachyon::start(&strs(&args), closed_pipe(), Stdio::piped()).finish(Duration::from_secs(60));
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
}

#[test]
fn a_full_stdout_is_reported_and_the_file_is_still_written() {
    let dir = RootDir::new(&[
        ("exit3.py", EXIT3),
        ("ok.py", "import time\ntime.sleep(0.3)\n"),
    ]);
    // The table is lost to the full device: said once, and the exit code
    // says it unless the program's own already says something failed.
    let args = run_args(&[], &dir.inside("ok.py"));
    let out =
        Tachyon::start(&strs(&args), dev_full(), Stdio::piped()).finish(Duration::from_secs(60));
    assert_no_panic(&out);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        ["tachyon: error: cannot write to standard output: No space left on device (os error 28)"]
    );
    let args = run_args(&[], &dir.inside("exit3.py"));
    let out =
        Tachyon::start(&strs(&args), dev_full(), Stdio::piped()).finish(Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));

    // A recording replaces an older one whole, though the summary is lost.
    let bin = dir.outside.join("r.bin");
    std::fs::write(&bin, b"an older recording").unwrap();
    let args = run_args(
        &["--binary", "-o", bin.to_str().unwrap()],
        &dir.inside("exit3.py"),
    );
    let out =
        Tachyon::start(&strs(&args), dev_full(), Stdio::piped()).finish(Duration::from_secs(60));
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_replays_with(&bin, "exit3.py:<module>:3");
}

/// The recording at `bin` replays, and its stacks hold `frame`.
fn assert_replays_with(bin: &std::path::Path, frame: &str) {
    let replay = Command::new(tachyon_bin())
        .args(["replay", "--collapsed", "-o", "/dev/stdout"])
        .arg(bin)
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", text(&replay.stderr));
    assert!(
        text(&replay.stdout).contains(frame),
        "{}",
        text(&replay.stdout)
    );
}

#[test]
fn attach_replay_and_dump_end_quietly_on_a_closed_stdout() {
    let t = sleeper();
    let pid = t.pid().to_string();
    let out = Tachyon::start(&["dump", &pid], closed_pipe(), Stdio::piped())
        .finish(Duration::from_secs(30));
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let dir = RootDir::new(&[]);
    let bin = dir.outside.join("r.bin");
    let out = Tachyon::start(
        &[
            "attach",
            "-d",
            "0.5",
            "--binary",
            "-o",
            bin.to_str().unwrap(),
            &pid,
        ],
        closed_pipe(),
        Stdio::piped(),
    )
    .finish(Duration::from_secs(30));
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = Tachyon::start(
        &["replay", bin.to_str().unwrap()],
        closed_pipe(),
        Stdio::piped(),
    )
    .finish(Duration::from_secs(30));
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Standard error closed while the achieved rate is printed on it.
    let out = Tachyon::start(
        &["attach", "-d", "1.5", "--realtime-stats", &pid],
        Stdio::piped(),
        closed_pipe(),
    )
    .finish(Duration::from_secs(30));
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains("Captured "),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_hangup_writes_the_profile_and_ends_the_program() {
    let t = sleeper();
    let dir = RootDir::new(&[(
        "forever.py",
        "import time\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.001)\n",
    )]);
    let bin = dir.outside.join("h.bin");
    let tachyon = Tachyon::start(
        &[
            "attach",
            "--binary",
            "-o",
            bin.to_str().unwrap(),
            &t.pid().to_string(),
        ],
        Stdio::piped(),
        Stdio::piped(),
    );
    std::thread::sleep(Duration::from_millis(700));
    kill(tachyon.pid(), Signal::SIGHUP).unwrap();
    let out = tachyon.finish(Duration::from_secs(30));
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("SIGHUP"),
        "{}",
        text(&out.stderr)
    );
    assert_replays_with(&bin, "target.py:<module>:4");

    // Under `run`, the program goes with the session rather than being
    // left behind as an orphan.
    let file = dir.outside.join("h.txt");
    let args = run_args(
        &["--collapsed", "-o", file.to_str().unwrap()],
        &dir.inside("forever.py"),
    );
    let tachyon = Tachyon::start(&strs(&args), Stdio::piped(), Stdio::piped());
    std::thread::sleep(Duration::from_millis(700));
    kill(tachyon.pid(), Signal::SIGHUP).unwrap();
    let out = tachyon.finish(Duration::from_secs(30));
    assert_no_panic(&out);
    let collapsed = std::fs::read_to_string(&file).expect("no profile written");
    assert!(collapsed.contains("forever.py:<module>:4"), "{collapsed}");
    let left = Command::new("pgrep")
        .args(["-f", &dir.inside("forever.py")])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left running after SIGHUP: {}",
        text(&left.stdout)
    );
}

/// A tmpfs of `kib` KiB mounted for the test, unmounted on drop.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn new(tag: &str, kib: u32) -> SmallDisk {
        let dir = std::env::temp_dir().join(format!("tachyon-full-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("mount");
        assert!(st.success(), "cannot mount a tmpfs (the tests run as root)");
        SmallDisk(dir)
    }

    fn files(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_full_disk_stops_sampling_and_keeps_what_a_recording_flushed() {
    let mut t = spawn(&py315(), CHURN, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let pid = t.pid().to_string();

    // A recording streams to the disk: the first failed write ends the
    // run, long before its duration.
    let disk = SmallDisk::new("bin", 32);
    let bin = disk.0.join("f.bin");
    let started = Instant::now();
    let out = Tachyon::start(
        &[
            "attach",
            "-r",
            "10khz",
            "-d",
            "120",
            "--binary",
            "--compression",
            "none",
            "-o",
            bin.to_str().unwrap(),
            &pid,
        ],
        Stdio::piped(),
        Stdio::piped(),
    )
    .finish(Duration::from_secs(110));
    assert_no_panic(&out);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(err.contains("is kept there"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    eprintln!("full disk noticed after {:?}", started.elapsed());
    // What it flushed before the disk filled replays.
    assert_eq!(disk.files().len(), 1, "{:?}", disk.files());
    let out = Tachyon::start(
        &[
            "replay",
            "--collapsed",
            "-o",
            "/dev/null",
            bin.to_str().unwrap(),
        ],
        Stdio::piped(),
        Stdio::piped(),
    )
    .finish(Duration::from_secs(60));
    assert_no_panic(&out);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let kept: u64 = err
        .split("truncated recording: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no \"truncated recording: N samples\": {err}"));
    assert!(kept > 0, "{err}");

    // A collapsed profile is written at the end: it fails whole.
    let disk = SmallDisk::new("txt", 4);
    let file = disk.0.join("c.txt");
    let out = Tachyon::start(
        &[
            "attach",
            "-d",
            "1",
            "--collapsed",
            "-o",
            file.to_str().unwrap(),
            &pid,
        ],
        Stdio::piped(),
        Stdio::piped(),
    )
    .finish(Duration::from_secs(60));
    assert_out_of_space(&out, &disk);
}

/// tachyon failed on the full disk, said so, and left no file there: its
/// standard error.
fn assert_out_of_space(out: &Output, disk: &SmallDisk) -> String {
    assert_no_panic(out);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(disk.files().is_empty(), "left behind: {:?}", disk.files());
    err
}

#[test]
fn replay_refuses_to_overwrite_its_input() {
    let t = sleeper();
    let dir = RootDir::new(&[]);
    let bin = dir.outside.join("r.bin");
    let out = Command::new(tachyon_bin())
        .args(["attach", "-d", "0.3", "--binary", "-o"])
        .arg(&bin)
        .arg(t.pid().to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let before = std::fs::read(&bin).unwrap();
    for how in [bin.clone(), dir.outside.join(".").join("r.bin")] {
        let out = Command::new(tachyon_bin())
            .args(["replay", "--collapsed", "-o"])
            .arg(&how)
            .arg(&bin)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("would destroy the input"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert_eq!(std::fs::read(&bin).unwrap(), before, "the input changed");
    }
}

/// The reported duration, from "Captured N samples in T seconds".
fn reported_seconds(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("Captured "))
        .and_then(|l| l.split(" in ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no 'Captured' line:\n{stdout}"))
}

#[test]
fn low_rates_still_end_on_time_on_a_signal_and_with_the_target() {
    // The next sample is 100 s away: -d 0.5 still ends the run at 0.5 s.
    let t = sleeper();
    let pid = t.pid().to_string();
    let out = Tachyon::start(
        &["attach", "-r", "0.01hz", "-d", "0.5", &pid],
        Stdio::piped(),
        Stdio::piped(),
    )
    .finish(Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let secs = reported_seconds(&text(&out.stdout));
    // Bounds relative to the 100 s interval, not to the machine's speed.
    assert!((0.5..10.0).contains(&secs), "-d 0.5 ran {secs} s");

    // SIGTERM is acted on at once, not at the next sample.
    let tachyon = Tachyon::start(
        &["attach", "-r", "0.01hz", &pid],
        Stdio::piped(),
        Stdio::piped(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let signalled = Instant::now();
    kill(tachyon.pid(), Signal::SIGTERM).unwrap();
    let out = tachyon.finish(Duration::from_secs(60));
    let took = signalled.elapsed();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        took < Duration::from_secs(10),
        "SIGTERM took {took:?} at a 100 s interval"
    );
    assert!(text(&out.stdout).contains("Interrupted by user."));

    // A program that exits between two samples ends the run then: its
    // 0.5 s of life, not the 100 s interval.
    let dir = RootDir::new(&[("short.py", "import time\ntime.sleep(0.5)\n")]);
    let args = run_args(&["-r", "0.01hz"], &dir.inside("short.py"));
    let out = Tachyon::start(&strs(&args), Stdio::piped(), Stdio::piped())
        .finish(Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let secs = reported_seconds(&text(&out.stdout));
    assert!(secs < 10.0, "a 0.5 s program sampled for {secs} s");
}
