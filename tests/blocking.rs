//! Reliability of what tachyon does to and around the program: `--blocking`
//! stops and resumes a program whose threads come and go without ever
//! ending it, and says so honestly when another tracer holds it; `run`
//! ends everything it started when sampling ends first, with a sensible
//! exit status; a thread id stands for its process; an unprivileged user
//! reads their own Python inside a chroot.
//!
//! Every process a test starts is killed on drop, with every process below
//! it (the program's own children included).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Interp, RootDir, Running, procs, sid_interpreters, sid_root, tachyon_bin, text};

fn interp(minor: u8, debug: bool) -> Interp {
    sid_interpreters()
        .into_iter()
        .find(|i| i.minor == minor && i.debug == debug)
        .unwrap()
}

/// A program that keeps starting and joining short-lived threads for
/// `argv[1]` seconds, then says how many rounds it did.
const CHURN: &str = r#"import sys, threading, time
def work(n):
    s = 0
    for i in range(n):
        s += i
    return s
end = time.monotonic() + float(sys.argv[1])
print('STARTED', flush=True)
rounds = 0
while time.monotonic() < end:
    ts = [threading.Thread(target=work, args=(2000,)) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rounds += 1
print('CHURN DONE', rounds, flush=True)
"#;

fn chroot_cmd(it: &Interp, args: &[&str]) -> Command {
    let mut c = Command::new("chroot");
    c.arg(sid_root()).arg(&it.exe).args(args);
    c
}

/// The profile was written and holds samples of the churning threads.
fn assert_profile(path: &Path, who: &str) {
    let collapsed = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{who}: no profile at {}: {e}", path.display()));
    assert!(
        collapsed.lines().any(|l| l.contains("work")),
        "{who}: the profile has no sample of the threads' work:\n{collapsed}"
    );
}

#[test]
fn blocking_run_lets_a_thread_churning_program_finish() {
    for it in [interp(14, false), interp(15, true)] {
        let dir = RootDir::new(&[("churn.py", CHURN)]);
        let profile = dir.outside("churn.txt");
        let mut cmd = Command::new(tachyon_bin());
        cmd.args(["run", "--blocking", "-a", "-r", "1khz", "--collapsed", "-o"])
            .arg(&profile)
            .arg("--")
            .arg("chroot")
            .arg(sid_root())
            .arg(&it.exe)
            .args([&dir.inside("churn.py"), "5"]);
        let out = Running::start_in_test_group(cmd).finish(Duration::from_secs(120));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            stdout.contains("CHURN DONE"),
            "{}: the program did not finish its work:\n{stdout}\n{stderr}",
            it.name
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: run must end with the program's own exit code:\n{stdout}\n{stderr}",
            it.name
        );
        assert!(!stderr.contains("error"), "{}: {stderr}", it.name);
        assert_profile(&profile, &it.name);
    }
}

#[test]
fn blocking_attach_lets_a_thread_churning_program_finish() {
    for it in [interp(13, false), interp(15, false)] {
        let dir = RootDir::new(&[("churn.py", CHURN)]);
        let profile = dir.outside("churn.txt");
        let target =
            Running::start_in_test_group(chroot_cmd(&it, &["-u", &dir.inside("churn.py"), "5"]));
        // Give the interpreter a moment to start its runtime (tachyon
        // retries nothing at attach time).
        let started = Instant::now();
        loop {
            let maps = std::fs::read_to_string(format!("/proc/{}/maps", target.pid()));
            if maps.is_ok_and(|m| m.contains("python3.")) {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "no python");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        let mut cmd = Command::new(tachyon_bin());
        cmd.args([
            "attach",
            "--blocking",
            "-a",
            "-r",
            "1khz",
            "--collapsed",
            "-o",
        ])
        .arg(&profile)
        .arg(target.pid().to_string());
        let out = Running::start_in_test_group(cmd).finish(Duration::from_secs(120));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: attach failed:\n{stdout}\n{stderr}",
            it.name
        );
        assert!(!stderr.contains("error"), "{}: {stderr}", it.name);
        // The target ended on its own: tachyon followed it to the end.
        let ended = target.finish(Duration::from_secs(60));
        let status = ended.status;
        let (tout, terr) = (text(&ended.stdout), text(&ended.stderr));
        assert_eq!(
            status.code(),
            Some(0),
            "{}: target: {tout}\n{terr}",
            it.name
        );
        assert!(tout.contains("CHURN DONE"), "{}: {tout}\n{terr}", it.name);
        assert_profile(&profile, &it.name);
    }
}

/// Seizes the process given as argv[1] with ptrace, then waits.
const TRACER: &str = r#"import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_SEIZE = 0x4206
if libc.ptrace(PTRACE_SEIZE, int(sys.argv[1]), None, None) != 0:
    print('SEIZE FAILED', ctypes.get_errno(), flush=True)
    sys.exit(1)
print('TRACING', flush=True)
time.sleep(600)
"#;

#[test]
fn blocking_says_when_another_tracer_holds_the_target() {
    let it = interp(14, false);
    let dir = RootDir::new(&[("tracer.py", TRACER)]);
    let mut target = common::spawn(
        &it,
        "import time\nprint('READY', flush=True)\ntime.sleep(600)\n",
        &[],
        &[],
    );
    target.wait_for("READY", Duration::from_secs(30));
    let pid = target.pid();
    let mut tracer = Running::start_in_test_group(chroot_cmd(
        &it,
        &["-u", &dir.inside("tracer.py"), &pid.to_string()],
    ));
    let tracer_pid = tracer.pid();
    // Traced once the kernel says so.
    let deadline = Instant::now() + Duration::from_secs(30);
    while procs::status_field(pid, "TracerPid").expect("the target is there")
        != tracer_pid.to_string()
    {
        assert!(
            tracer.child.try_wait().unwrap().is_none(),
            "the test's tracer ended"
        );
        assert!(Instant::now() < deadline, "the test's tracer never seized");
        std::thread::sleep(Duration::from_millis(20));
    }
    let profile = dir.outside("p.txt");
    for args in [
        vec!["attach", "--blocking", "-d", "1", "--collapsed", "-o"],
        vec!["dump", "--blocking"],
    ] {
        let mut cmd = Command::new(tachyon_bin());
        cmd.args(&args);
        if args[0] == "attach" {
            cmd.arg(&profile);
        }
        cmd.arg(pid.to_string());
        let out = Running::start_in_test_group(cmd).finish(Duration::from_secs(60));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(
            stderr.contains(&format!(
                "process {pid} is already traced by python3.14 (PID {tracer_pid})"
            )) && stderr.contains("detach the other tool"),
            "{args:?}: {stderr}"
        );
        println!("{}", stderr.trim_end());
    }
    // Not stopped, not killed by our attempt.
    assert!(procs::alive(pid));
    assert!(target.child.try_wait().unwrap().is_none());
}

/// A Python process the test only knows by the pid it wrote to a file:
/// killed on drop if it is still there (and still ours: its command line
/// names this test's directory).
struct Stray {
    pidfile: PathBuf,
    marker: String,
}

impl Stray {
    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(&self.pidfile)
            .ok()?
            .trim()
            .parse()
            .ok()
    }
    /// Alive, and the process this test started?
    fn running(&self) -> bool {
        let Some(pid) = self.pid() else { return false };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        procs::alive(pid) && text(&cmdline).contains(&self.marker)
    }
}

impl Drop for Stray {
    fn drop(&mut self) {
        if self.running() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid().unwrap()),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[test]
fn run_for_a_duration_ends_every_process_the_command_started_and_exits_0() {
    let it = interp(14, false);
    let dir = RootDir::new(&[]);
    let pidfile = dir.inside("python.pid");
    // bash runs python as a child (the trailing echo keeps bash from
    // exec'ing it): ending only bash would leave python running.
    let script = format!(
        "{} -c 'import os, sys, time\nopen(sys.argv[1], \"w\").write(str(os.getpid()))\ntime.sleep(600)' {pidfile}\necho after\n",
        it.exe.display()
    );
    std::fs::write(dir.outside("script.sh"), script).unwrap();
    let stray = Stray {
        pidfile: dir.outside("python.pid"),
        marker: pidfile.clone(),
    };
    let profile = dir.outside("p.txt");
    let mut cmd = Command::new(tachyon_bin());
    cmd.args(["run", "-d", "1", "--collapsed", "-o"])
        .arg(&profile)
        .arg("--")
        .arg("chroot")
        .arg(sid_root())
        .args(["bash", &dir.inside("script.sh")]);
    let out = Running::start_in_test_group(cmd).finish(Duration::from_secs(60));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stray.pid().is_some(), "python never started:\n{stderr}");
    assert!(
        !stray.running(),
        "the python that bash started outlived `run -d`"
    );
    assert!(!stdout.contains("after"), "bash went on: {stdout}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "the duration was over: a success\n{stdout}\n{stderr}"
    );
    let collapsed = std::fs::read_to_string(&profile).unwrap_or_default();
    assert!(collapsed.contains("<module>"), "profile: {collapsed:?}");
}

#[test]
fn run_exits_0_when_the_duration_ended_the_program_and_with_its_code_otherwise() {
    let it = interp(15, false);
    let dir = RootDir::new(&[(
        "sleep.py",
        "import time\nprint('READY', flush=True)\ntime.sleep(600)\n",
    )]);
    let run = |extra: &[&str]| {
        let mut cmd = Command::new(tachyon_bin());
        cmd.arg("run")
            .args(extra)
            .args(["--collapsed", "-o"])
            .arg(dir.outside("p.txt"))
            .arg("--")
            .arg("chroot")
            .arg(sid_root())
            .arg(&it.exe)
            .arg(dir.inside("sleep.py"));
        Running::start_in_test_group(cmd)
    };
    let out = run(&["-d", "0.5"]).finish(Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Stopped by the user (SIGTERM to tachyon): the program's own end,
    // killed by the SIGTERM tachyon passed on.
    let r = run(&[]);
    std::thread::sleep(Duration::from_millis(1500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(r.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = r.finish(Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
}

#[test]
fn a_thread_id_given_as_the_pid_reads_its_process() {
    let it = interp(15, false);
    let mut target = common::spawn(
        &it,
        "import threading, time\n\
         def waiter():\n    print('TID', threading.get_native_id(), flush=True)\n    time.sleep(600)\n\
         threading.Thread(target=waiter).start()\n",
        &[],
        &[],
    );
    let line = target.wait_for("TID ", Duration::from_secs(30));
    let tid: i32 = line[4..].trim().parse().unwrap();
    let pid = target.pid();
    assert_ne!(tid, pid);
    let note = format!("{tid} is a thread of process {pid}; reading process {pid}");

    let out = Running::start_in_test_group({
        let mut c = Command::new(tachyon_bin());
        c.args(["dump", "-a", &tid.to_string()]);
        c
    })
    .finish(Duration::from_secs(60));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&note), "{stderr}");
    assert!(
        stdout.starts_with(&format!("Stack dump for PID {pid}")),
        "{stdout}"
    );
    assert!(stdout.contains("in waiter"), "{stdout}");

    // attach: the profile is named after the process, not the thread.
    let dir = RootDir::new(&[]);
    let mut c = Command::new(tachyon_bin());
    c.args(["attach", "-a", "-d", "0.5", "--collapsed", "-o"])
        .arg(&dir.outside)
        .arg(tid.to_string());
    let out = Running::start_in_test_group(c).finish(Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&note), "{stderr}");
    let profile = dir.outside(&format!("collapsed_{pid}.txt"));
    let collapsed = std::fs::read_to_string(&profile)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", profile.display(), text(&out.stdout)));
    assert!(collapsed.contains("waiter"), "{collapsed}");
}

/// The uid and gid of `nobody` and `nogroup` on this machine.
fn nobody() -> Option<(u32, u32)> {
    let uid = nix::unistd::User::from_name("nobody").ok()??.uid.as_raw();
    let gid = nix::unistd::Group::from_name("nogroup").ok()??.gid.as_raw();
    Some((uid, gid))
}

/// Sleeps in a known stack after allowing any process of its user to read
/// it, where Yama would otherwise allow only its parent (ptrace_scope 1;
/// without Yama the call fails harmlessly), and after saying it is ready.
const CHROOTED: &str = r#"import ctypes, os, sys, time
PR_SET_PTRACER, PR_SET_PTRACER_ANY = 0x59616D61, -1
ctypes.CDLL(None).prctl(PR_SET_PTRACER, ctypes.c_ulong(PR_SET_PTRACER_ANY), 0, 0, 0)
def outer_fn():
    inner_fn()
def inner_fn():
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(600)
outer_fn()
"#;

#[test]
fn an_unprivileged_user_reads_their_own_python_in_a_chroot() {
    let setpriv = Path::new("/usr/bin/setpriv");
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    // The machine has what this needs; a test never passes by skipping.
    assert!(
        nix::unistd::geteuid().is_root() && setpriv.exists() && scope.unwrap_or(0) <= 1,
        "needs root, setpriv and Yama ptrace_scope <= 1 (it is {scope:?})"
    );
    let (uid, gid) = nobody().expect("a nobody user");
    let dir = RootDir::new(&[("chrooted.py", CHROOTED)]);
    // The target writes its ready file here, as nobody; the profile too.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir.outside, std::fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new(setpriv);
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(tachyon_bin())
            .args(args);
        Running::start_in_test_group(c).finish(Duration::from_secs(60))
    };
    for it in sid_interpreters() {
        let ready = format!("ready-{}", it.name);
        // Started by root, which chroot needs; the interpreter itself runs
        // as nobody, inside the root.
        let mut c = Command::new("chroot");
        c.arg(format!("--userspec={uid}:{gid}"))
            .arg(sid_root())
            .arg(&it.exe)
            .arg(dir.inside("chrooted.py"))
            .arg(dir.inside(&ready));
        let target = Running::start_in_test_group(c);
        let pid = target.pid();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(dir.outside(&ready)).ok() != Some(pid.to_string()) {
            assert!(Instant::now() < deadline, "{}: target never ready", it.name);
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(
            status.contains(&format!("Uid:\t{uid}\t")),
            "{}: the target does not run as nobody:\n{status}",
            it.name
        );

        let out = as_nobody(&["dump", &pid.to_string()]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{}: dump as nobody: {stderr}",
            it.name
        );
        assert!(
            stdout.contains("in outer_fn") && stdout.contains("in inner_fn"),
            "{}: {stdout}",
            it.name
        );

        if it.minor == 15 && !it.debug {
            let profile_outside = dir.outside("p.txt");
            let out = as_nobody(&[
                "attach",
                "-d",
                "0.5",
                "--collapsed",
                "-o",
                profile_outside.to_str().unwrap(),
                &pid.to_string(),
            ]);
            assert!(
                out.status.success(),
                "{}: attach as nobody: {}",
                it.name,
                text(&out.stderr)
            );
            let collapsed = std::fs::read_to_string(&profile_outside).unwrap();
            assert!(collapsed.contains("inner_fn"), "{}: {collapsed}", it.name);
        }
        drop(target);
    }
}
