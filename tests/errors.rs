//! The errors a user meets, through the real binary: `tachyon dump PID`
//! must exit with status 1 and print exactly one line on stderr that says
//! what is wrong (and, where there is something to do, what to do). Plus
//! the cases that must *not* be errors: a shared-libpython interpreter, and
//! one whose ctypes loaded a second, never-initialised copy of libpython.

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    machine_old_interpreters, machine_supported_interpreters, machine_too_old_interpreters,
    sid_interpreters, spawn, tachyon_bin,
};

/// A process group started by the test (a wrapper and its children), killed
/// as a whole on drop.
struct Group {
    child: Child,
    /// Files to remove on drop.
    cleanup: Vec<PathBuf>,
}

impl Group {
    fn start(cmd: &mut Command) -> Group {
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        Group {
            child: cmd.spawn().expect("cannot start a test process"),
            cleanup: Vec::new(),
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Read stdout until a line starting with `prefix`.
    fn wait_for(&mut self, prefix: &str) {
        use std::io::{BufRead, BufReader};
        let out = self.child.stdout.take().expect("stdout was not piped");
        let mut lines = BufReader::new(out).lines();
        // The child is killed on drop, which ends this read if it hangs.
        let found = lines.any(|l| l.is_ok_and(|l| l.starts_with(prefix)));
        assert!(found, "the test process never printed {prefix:?}");
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // A plain kill(2) of the process group this test started.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
        for p in &self.cleanup {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Run `tachyon dump ARGS` (failing the test after 60 s).
fn tachyon(args: &[String], setup: impl FnOnce(&mut Command)) -> Output {
    let mut cmd = Command::new(tachyon_bin());
    cmd.arg("dump").args(args);
    setup(&mut cmd);
    common::Running::start(cmd).finish(Duration::from_secs(60))
}

fn dump(pid: i32) -> Output {
    tachyon(&[pid.to_string()], |_| {})
}

/// Assert the run failed the way every error must: status 1, nothing on
/// stdout, one line on stderr that contains each of `needles`. Returns the
/// line.
fn assert_error(out: &Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "exit status; stderr: {stderr}; stdout: {stdout}"
    );
    assert!(
        stdout.is_empty(),
        "stdout should be empty on error: {stdout}"
    );
    assert!(
        stderr.ends_with('\n') && stderr.matches('\n').count() == 1,
        "stderr must be exactly one line: {stderr:?}"
    );
    assert!(stderr.starts_with("tachyon: error: "), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks {n:?}: {stderr}");
    }
    stderr.trim_end().to_string()
}

fn assert_dumped(out: &Output, pid: i32, needles: &[&str]) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "dump of {pid} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(&format!("Stack dump for PID {pid}")),
        "{stdout}"
    );
    for n in needles {
        assert!(stdout.contains(n), "dump lacks {n:?}:\n{stdout}");
    }
    stdout
}

/// Dump a SLEEPER target once it is in its sleep: it prints READY just
/// before, so a loaded machine can catch it between the two.
fn dump_asleep(pid: i32) -> Output {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = dump(pid);
        if String::from_utf8_lossy(&out.stdout).contains("time.sleep(600)")
            || Instant::now() > deadline
        {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pid_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn no_such_process() {
    // A PID that just existed and was reaped: free unless reused at once.
    let pid = (0..20)
        .find_map(|_| {
            let mut c = Command::new("true").spawn().unwrap();
            let pid = c.id() as i32;
            c.wait().unwrap();
            (!pid_exists(pid)).then_some(pid)
        })
        .expect("every reaped PID was reused at once");
    let line = assert_error(&dump(pid), &[&format!("no such process: {pid}")]);
    println!("{line}");
    assert_error(&dump(0), &["no such process: 0"]);
}

#[test]
fn a_non_python_process() {
    let g = Group::start(Command::new("sleep").arg("100").stdout(Stdio::null()));
    let pid = g.pid();
    let line = assert_error(
        &dump(pid),
        &[&format!("process {pid} is not a Python process")],
    );
    println!("{line}");
}

const SLEEPER: &str = "import platform, time\n\
def outer_fn():\n    inner_fn()\n\
def inner_fn():\n    print('READY', platform.python_version(), flush=True)\n    time.sleep(600)\n\
outer_fn()\n";

/// 3.11 and 3.12 have no debug offsets table; the layouts tachyon
/// carries read them (see tests/old_pythons.rs for their stacks).
#[test]
fn old_pythons_dump() {
    for interp in &machine_old_interpreters() {
        let mut t = spawn(interp, SLEEPER, &[], &[]);
        let version = t.wait_for("READY ", Duration::from_secs(30))[6..]
            .trim()
            .to_string();
        assert!(
            version.starts_with(&format!("3.{}.", interp.minor)),
            "{}: {version}",
            interp.name
        );
        let s = assert_dumped(
            &dump_asleep(t.pid()),
            t.pid(),
            &["in outer_fn", "in inner_fn", "time.sleep(600)", "target.py"],
        );
        println!("{} ({version}):\n{s}", interp.name);
    }
}

/// Older than any layout tachyon has: refused with the version named.
#[test]
fn pythons_older_than_3_11_are_refused_by_version() {
    for interp in &machine_too_old_interpreters() {
        let mut t = spawn(interp, SLEEPER, &[], &[]);
        let version = t.wait_for("READY ", Duration::from_secs(30))[6..]
            .trim()
            .to_string();
        assert!(version.starts_with("3.10."), "{}: {version}", interp.name);
        let pid = t.pid();
        let line = assert_error(
            &dump(pid),
            &[
                &format!("unsupported Python version 3.10 in process {pid}"),
                "3.11 to 3.15",
            ],
        );
        println!("{}: {line}", interp.name);
    }
}

#[test]
fn pyenv_shared_libpython_dumps() {
    for interp in machine_supported_interpreters() {
        let mut t = spawn(&interp, SLEEPER, &[], &[]);
        t.wait_for("READY ", Duration::from_secs(30));
        let out = dump_asleep(t.pid());
        let s = assert_dumped(
            &out,
            t.pid(),
            &["in outer_fn", "in inner_fn", "time.sleep(600)", "target.py"],
        );
        println!("{}:\n{s}", interp.name);
    }
}

/// The libpython file of a shared build, found in the target's own map.
fn mapped_libpythons(pid: i32) -> Vec<(u64, String)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = *f.get(5)?;
            let base = path.rsplit('/').next()?;
            (f[2] == "00000000" && base.starts_with("libpython")).then(|| {
                let start = u64::from_str_radix(f[0].split('-').next().unwrap(), 16).unwrap();
                (start, path.to_string())
            })
        })
        .collect()
}

#[test]
fn a_second_libpython_loaded_by_ctypes_does_not_fool_it() {
    for interp in machine_supported_interpreters() {
        // Find the interpreter's libpython from a first run.
        let mut probe = spawn(&interp, SLEEPER, &[], &[]);
        probe.wait_for("READY ", Duration::from_secs(30));
        let libs = mapped_libpythons(probe.pid());
        drop(probe);
        // pyenv builds use a shared libpython: a missing one means the
        // test would check nothing, so it fails.
        let (_, lib) = libs
            .first()
            .unwrap_or_else(|| panic!("{}: no shared libpython mapped", interp.name));
        // A copy under another name: dlopen maps it again, with its own
        // (statically initialised, never started) _PyRuntime.
        let copy = std::env::temp_dir().join(format!("libpython-copy-{}.so", std::process::id()));
        std::fs::copy(lib, &copy).unwrap();
        let script = format!(
            "import ctypes\nctypes.CDLL({:?}, mode=ctypes.RTLD_LOCAL)\n{SLEEPER}",
            copy.to_str().unwrap()
        );
        let mut t = spawn(&interp, &script, &[], &[]);
        t.wait_for("READY ", Duration::from_secs(30));
        let _ = std::fs::remove_file(&copy);
        let libs = mapped_libpythons(t.pid());
        assert_eq!(
            libs.len(),
            2,
            "{}: expected two libpython copies mapped: {libs:?}",
            interp.name
        );
        println!("{}: mapped {libs:?}", interp.name);
        let out = dump(t.pid());
        assert_dumped(&out, t.pid(), &["in outer_fn", "in inner_fn"]);
    }
}

#[test]
fn a_wrapper_pid_is_not_python_but_its_child_is() {
    let interp = &sid_interpreters()[2]; // sid 3.14
    let root = interp.root.clone().unwrap();
    let mut g = Group::start(
        Command::new("chroot")
            .arg(&root)
            .arg("/bin/bash")
            .arg("-c")
            // The trailing `; true` keeps bash from exec'ing python.
            .arg(format!(
                "{} -u -c 'import time; print(\"READY\"); time.sleep(600)'; true",
                interp.exe.display()
            ))
            .stdout(Stdio::piped()),
    );
    g.wait_for("READY");
    let bash = g.pid();
    let line = assert_error(
        &dump(bash),
        &[
            &format!("process {bash} is not a Python process"),
            "give the PID of the python child",
        ],
    );
    println!("{line}");
    // Positive control: the python child itself dumps.
    let child = *common::procs::children(bash)
        .first()
        .expect("the python child of the wrapper");
    assert_dumped(&dump(child), child, &["in <module>"]);
}

#[test]
fn an_exited_unreaped_target_is_reported_as_exited() {
    let interp = &sid_interpreters()[0];
    let mut t = spawn(interp, "print('READY', flush=True)\n", &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let pid = t.pid();
    // Not reaped until `t` drops: a zombie, whose /proc entry remains.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = common::procs::state(pid).expect("a zombie keeps its /proc entry");
        if state == 'Z' {
            break;
        }
        assert!(Instant::now() < deadline, "target did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
    let line = assert_error(&dump(pid), &[&format!("process {pid} has exited")]);
    println!("{line}");
}

const EXITS_SOON: &str = "import os, sys\n\
def rec(n):\n    return sum(range(int(sys.argv[1]))) if n == 0 else rec(n - 1)\n\
print('READY', flush=True)\nrec(200)\nos._exit(0)\n";

/// Targets that exit while tachyon reads them: each run must either dump a
/// stack or fail with the one-line "has exited" (never a panic, a torn
/// stack, or a misleading "not a Python process").
#[test]
fn targets_exiting_mid_way() {
    let (mut dumped, mut exited) = (0, 0);
    for interp in sid_interpreters() {
        for i in 0..12 {
            // Work from microseconds to a few tens of milliseconds.
            let work = ["1000", "100000", "300000", "1000000"][i % 4];
            let mut t = spawn(&interp, EXITS_SOON, &[], &[work]);
            t.wait_for("READY", Duration::from_secs(30));
            let pid = t.pid();
            let out = dump(pid);
            if out.status.code() == Some(0) {
                // Caught anywhere from the print to the last frame of rec().
                assert_dumped(&out, pid, &["target.py", "in <module>"]);
                dumped += 1;
            } else {
                assert_error(&out, &[&format!("process {pid} has exited")]);
                exited += 1;
            }
        }
    }
    println!("{dumped} dumped while running, {exited} reported as exited");
    assert!(
        exited > 0,
        "no run caught an exit: the test did not test it"
    );
}

#[test]
fn permission_denied_says_what_to_do() {
    let t = sleeper_315();
    let pid = t.pid();
    // As nobody, which drops every capability.
    let out = dump_under_setpriv(
        pid,
        &["--reuid=nobody", "--regid=nogroup", "--clear-groups"],
    );
    let line = assert_error(&out, &[&format!("permission denied reading process {pid}")]);
    assert!(
        ["sudo", "CAP_SYS_PTRACE", "ptrace_scope"]
            .iter()
            .any(|w| line.contains(w)),
        "the message does not say what to do: {line}"
    );
    println!("{line}");
}

/// tachyon as root, but without CAP_SYS_PTRACE (setpriv drops it from the
/// bounding set, so the exec'd tachyon cannot have it).
fn dump_without_ptrace_rights(pid: i32) -> Output {
    dump_under_setpriv(pid, &["--bounding-set=-sys_ptrace"])
}

/// A sleeping sid 3.15 target, ready.
fn sleeper_315() -> common::Target {
    let interp = &sid_interpreters()[4]; // sid 3.15
    let mut t = spawn(interp, SLEEPER, &[], &[]);
    t.wait_for("READY ", Duration::from_secs(30));
    t
}

/// `tachyon dump PID` exec'd by `setpriv SETPRIV_ARGS --`.
fn dump_under_setpriv(pid: i32, setpriv_args: &[&str]) -> Output {
    // The suite runs as root on machines with setpriv (util-linux): a
    // test never passes by skipping its check.
    assert!(
        nix::unistd::geteuid().is_root() && Path::new("/usr/bin/setpriv").exists(),
        "the permission check needs root and /usr/bin/setpriv"
    );
    tachyon(&[pid.to_string()], |cmd| {
        let prog = cmd.get_program().to_owned();
        let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
        *cmd = Command::new("/usr/bin/setpriv");
        cmd.args(setpriv_args).arg("--").arg(prog).args(args);
    })
}

#[test]
fn a_refusal_names_its_real_cause_and_blames_seccomp_only_on_evidence() {
    // Root without CAP_SYS_PTRACE, a target holding it: the kernel refuses
    // for the capability, which is what the line must say; tachyon runs
    // under no seccomp filter here, so seccomp is not blamed.
    let t = sleeper_315();
    let pid = t.pid();
    let line = assert_error(
        &dump_without_ptrace_rights(pid),
        &[
            &format!("permission denied reading process {pid}"),
            "CAP_SYS_PTRACE",
        ],
    );
    assert!(!line.contains("seccomp"), "{line}");
    // A Python target is not taken for another program.
    assert!(!line.contains("names no Python"), "{line}");
    drop(t);

    // The same refusal of a process that is not Python says so too: the
    // PID may be the wrong one.
    let mut sleeper = Group::start(Command::new("sleep").arg("30"));
    sleeper.cleanup.clear();
    let line = assert_error(
        &dump_without_ptrace_rights(sleeper.pid()),
        &["CAP_SYS_PTRACE", "(sleep 30) names no Python"],
    );
    assert!(!line.contains("seccomp"), "{line}");
}
