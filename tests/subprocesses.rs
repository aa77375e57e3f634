//! `--subprocesses`: every Python process a target starts gets a profile of
//! its own (`<base>_<pid><ext>`), under `run` and `attach`, on the sid
//! interpreters (3.13, 3.14, 3.15); the reference's own `--subprocesses`
//! on 3.15 finds the same workers. No process is left behind or stopped.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    Interp, RootDir, Running, TempDir, children, collapsed, one_at_a_time, procs, release,
    sid_interpreters, sid_root, tachyon_bin, text,
};

/// A pre-fork server: three workers accept on one socket; each request
/// burns a little CPU in `handle_request_in_worker` and answers the
/// worker's pid. SIGTERM to the parent ends the workers and the server.
const PREFORK: &str = r#"
import os, signal, socket, sys, time

def handle_request_in_worker(conn):
    conn.recv(100)
    t = time.time()
    s = 0
    while time.time() - t < 0.1:
        for i in range(500):
            s += i
    conn.sendall(str(os.getpid()).encode())
    conn.close()

def worker(sock):
    while True:
        conn, _ = sock.accept()
        handle_request_in_worker(conn)

sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen(64)
workers = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        worker(sock)
        os._exit(0)
    workers.append(pid)

def stop(*_):
    for w in workers:
        os.kill(w, signal.SIGTERM)
    for w in workers:
        os.waitpid(w, 0)
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "port.tmp"), "w") as f:
    f.write(f"{sock.getsockname()[1]} {os.getpid()}")
os.rename(os.path.join(here, "port.tmp"), os.path.join(here, "port"))
while True:
    time.sleep(1)
"#;

const PARENT_OF_SUBPROCESS: &str = r#"
import os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
out = subprocess.run([sys.executable, os.path.join(here, "child.py")],
                     capture_output=True, text=True, check=True).stdout
sys.stdout.write("CHILD " + out.strip() + "\n")
sys.stdout.flush()
"#;

const CHILD: &str = r#"
import os, time
def child_work():
    t = time.time()
    s = 0
    while time.time() - t < 0.6:
        s += 1
child_work()
print(os.getpid())
"#;

/// `tachyon run --subprocesses --collapsed -o out.txt --python EXE ARGS`,
/// run in `dir` (for a machine interpreter, outside the sid root).
fn run_with_python(dir: &Path, it: &Interp, args: &[&str]) -> Command {
    let mut cmd = Command::new(tachyon_bin());
    cmd.current_dir(dir)
        .args(["run", "--subprocesses", "--collapsed", "-o", "out.txt"])
        .arg("--python")
        .arg(&it.exe)
        .args(args);
    cmd
}

/// `tachyon run --subprocesses --collapsed -o <dir>/out.txt -- chroot ROOT
/// python script args...`, to its end.
fn run_profiled(it: &Interp, dir: &RootDir, script: &str, args: &[&str]) -> (String, String) {
    let cmd = children::run_python(it, dir, &["--collapsed"], "out.txt", script, args);
    children::succeeds(&it.name, cmd, Duration::from_secs(180))
}

/// Samples of collapsed stacks in `file` that pass through `function`.
fn samples_in(file: &Path, function: &str) -> u64 {
    collapsed::samples_with(&collapsed::read(file), function)
}

/// Every child process of the test, none stopped or traced.
fn assert_not_stopped(pids: &[i32], what: &str) {
    for &pid in pids {
        let Some(tracer) = procs::status_field(pid, "TracerPid") else {
            continue;
        };
        assert_eq!(tracer, "0", "{what}: {pid} is still traced");
        let state = procs::state(pid);
        assert!(
            !matches!(state, Some('T' | 't')),
            "{what}: {pid} was left stopped ({state:?})"
        );
    }
}

#[test]
fn run_profiles_every_pool_worker_fork_and_spawn() {
    let _serial = one_at_a_time();
    // Free-threaded 3.13 too: the launcher, the tracer and the children's
    // watcher find its runtime as any other's.
    let mut interps = release(sid_interpreters());
    interps.extend(common::free_threaded_interpreters());
    for it in interps {
        for method in ["fork", "spawn"] {
            let dir = RootDir::new(&[("pool.py", children::POOL)]);
            let (stdout, stderr) = run_profiled(&it, &dir, "pool.py", &[method]);
            // The workers that took a task (on a loaded machine one may
            // start too late to get any).
            let workers = children::pids_after(&stdout, "WORKERS ");
            for w in &workers {
                let file = dir.outside(&format!("out_{w}.txt"));
                assert!(
                    samples_in(&file, "burn_in_worker") > 0,
                    "{} {method}: worker {w}'s profile has no burn_in_worker:\n{stderr}",
                    it.name
                );
            }
            // The main profile is the parent's: no worker's function there.
            assert_eq!(
                samples_in(&dir.outside("out.txt"), "burn_in_worker"),
                0,
                "{} {method}: the parent's profile holds a worker's samples",
                it.name
            );
            assert!(stderr.contains("profiling child process"), "{stderr}");
        }
    }
}

#[test]
fn run_profiles_a_subprocess_through_its_exec() {
    let _serial = one_at_a_time();
    for it in release(sid_interpreters()) {
        let dir = RootDir::new(&[("parent.py", PARENT_OF_SUBPROCESS), ("child.py", CHILD)]);
        let (stdout, stderr) = run_profiled(&it, &dir, "parent.py", &[]);
        let child = children::pids_after(&stdout, "CHILD ");
        assert_eq!(child.len(), 1, "{stdout}");
        let file = dir.outside(&format!("out_{}.txt", child[0]));
        assert!(
            samples_in(&file, "child_work") > 0,
            "{}: the subprocess's profile has no child_work:\n{stderr}",
            it.name
        );
    }
}

/// Send one request to the server; the answering worker's pid.
fn request(port: u16) -> Option<i32> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    s.write_all(b"hello").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer.trim().parse().ok()
}

#[test]
fn run_profiles_every_worker_of_a_prefork_server() {
    let _serial = one_at_a_time();
    for it in release(sid_interpreters()) {
        let dir = RootDir::new(&[("server.py", PREFORK)]);
        let cmd = children::run_python(&it, &dir, &["--collapsed"], "out.txt", "server.py", &[]);
        let running = Running::start(cmd);
        let deadline = Instant::now() + Duration::from_secs(60);
        let port_file = dir.outside("port");
        while !port_file.exists() {
            assert!(
                Instant::now() < deadline,
                "{}: the server never started",
                it.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let contents = std::fs::read_to_string(&port_file).unwrap();
        let mut parts = contents.split_whitespace();
        let port: u16 = parts.next().unwrap().parse().unwrap();
        let server: i32 = parts.next().unwrap().parse().unwrap();
        // Requests until each of the three workers answered a few.
        let mut answered: std::collections::HashMap<i32, u32> = Default::default();
        while answered.len() < 3 || answered.values().any(|&n| n < 3) {
            assert!(
                Instant::now() < deadline,
                "{}: not every worker answered: {answered:?}",
                it.name
            );
            if let Some(pid) = request(port) {
                *answered.entry(pid).or_default() += 1;
            }
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(server),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let out = running.finish(Duration::from_secs(120));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{}: {stdout}\n{stderr}", it.name);
        for w in answered.keys() {
            let file = dir.outside(&format!("out_{w}.txt"));
            assert!(
                samples_in(&file, "handle_request_in_worker") > 0,
                "{}: worker {w}'s profile has no handle_request_in_worker:\n{stderr}",
                it.name
            );
        }
    }
}

#[test]
fn attach_profiles_children_there_before_and_started_after() {
    let _serial = one_at_a_time();
    for it in sid_interpreters()
        .into_iter()
        .filter(|i| i.minor == 15 || !i.debug)
    {
        let mut target = common::spawn(&it, children::LONG_WORKERS, &[], &[]);
        let ready = target.wait_for("READY", Duration::from_secs(60));
        let early: Vec<i32> = children::pids_after(&ready, "READY ");
        let out_dir = TempDir::new("subprocesses");
        let mut cmd = Command::new(tachyon_bin());
        cmd.args(["attach", "--subprocesses", "--collapsed", "-d", "3", "-o"])
            .arg(out_dir.join("out.txt"))
            .arg(target.pid().to_string());
        let running = Running::start(cmd);
        // Both early workers are being profiled: their threads are there.
        let deadline = Instant::now() + Duration::from_secs(60);
        while procs::threads(running.pid()) < 4 {
            assert!(
                Instant::now() < deadline,
                "{}: tachyon never profiled the early workers",
                it.name
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::write(target.outside_path("go"), "").unwrap();
        let late_line = target.wait_for("LATE", Duration::from_secs(60));
        let late = children::pids_after(&late_line, "LATE ");
        let out = running.finish(Duration::from_secs(120));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{}: {stdout}\n{stderr}", it.name);
        let workers: Vec<i32> = early.iter().chain(&late).copied().collect();
        assert_not_stopped(&workers, &it.name);
        for (pids, function) in [(&early, "early_worker"), (&late, "late_worker")] {
            for w in pids {
                let file = out_dir.join(format!("out_{w}.txt"));
                assert!(
                    samples_in(&file, function) > 0,
                    "{}: worker {w}'s profile has no {function}:\n{stderr}",
                    it.name
                );
            }
        }
        assert!(samples_in(&out_dir.join("out.txt"), "<module>") > 0);
        drop(target);
        // The workers end with their parent (they watch it).
        let deadline = Instant::now() + Duration::from_secs(30);
        while workers
            .iter()
            .any(|w| Path::new(&format!("/proc/{w}")).exists())
        {
            if Instant::now() > deadline {
                for w in &workers {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(*w),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                panic!("{}: workers outlived their parent", it.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The reference's `run --subprocesses` on 3.15 writes a profile per child
/// too: both find every pool worker, with its function.
#[test]
fn every_pool_worker_is_found_as_the_reference_finds_it() {
    let _serial = one_at_a_time();
    let it = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("sid 3.15");
    let dir = RootDir::new(&[("pool.py", children::POOL)]);
    let out = Command::new("chroot")
        .arg(sid_root())
        .arg(&it.exe)
        .args([
            "-m",
            "profiling.sampling",
            "run",
            "--subprocesses",
            "--collapsed",
            "-o",
        ])
        .arg(dir.inside("ref.txt"))
        .arg(dir.inside("pool.py"))
        .arg("fork")
        .output()
        .expect("the reference runs");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "reference: {stdout}\n{stderr}");
    let ref_workers = children::pids_after(&stdout, "WORKERS ");
    let ref_found = ref_workers
        .iter()
        .filter(|w| {
            let f = dir.outside(&format!("ref_{w}.txt"));
            f.exists() && samples_in(&f, "burn_in_worker") > 0
        })
        .count();
    let (ours_out, _) = run_profiled(&it, &dir, "pool.py", &["fork"]);
    let ours = children::pids_after(&ours_out, "WORKERS ");
    let ours_found = ours
        .iter()
        .filter(|w| samples_in(&dir.outside(&format!("out_{w}.txt")), "burn_in_worker") > 0)
        .count();
    assert_eq!(ours_found, ours.len(), "tachyon missed a worker");
    assert!(
        ours_found >= ref_found,
        "the reference found {ref_found} workers' work, tachyon {ours_found}"
    );
}

/// 3.11 and 3.12 (pyenv's, with the runtime in a shared libpython, and
/// Debian's static 3.11): spawned workers exec an interpreter that maps
/// its runtime only after start; every worker is still profiled.
#[test]
fn run_profiles_spawned_workers_of_old_pythons() {
    let _serial = one_at_a_time();
    for it in common::machine_old_interpreters() {
        let dir = TempDir::new("subprocesses");
        std::fs::write(dir.join("pool.py"), children::POOL).unwrap();
        let cmd = run_with_python(&dir, &it, &["pool.py", "spawn"]);
        let out = Running::start(cmd).finish(Duration::from_secs(180));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{}: {stdout}\n{stderr}", it.name);
        for w in children::pids_after(&stdout, "WORKERS ") {
            let file = dir.join(format!("out_{w}.txt"));
            assert!(
                file.exists(),
                "{}: worker {w} has no profile:\n{stdout}\n{stderr}",
                it.name
            );
            assert!(
                samples_in(&file, "burn_in_worker") > 0,
                "{}: worker {w}'s profile has no burn_in_worker:\n{stderr}",
                it.name
            );
        }
    }
}

/// Without a format or `-o`, the parent's table goes to stdout and each
/// child's profile to `profile_<pid>.pstats` (the reference's name), a
/// file Python's `pstats` loads.
#[test]
fn default_child_output_is_a_pstats_file_per_child() {
    let _serial = one_at_a_time();
    let it = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 14 && !i.debug)
        .expect("sid 3.14");
    let dir = RootDir::new(&[("parent.py", PARENT_OF_SUBPROCESS), ("child.py", CHILD)]);
    let mut cmd = Command::new(tachyon_bin());
    cmd.current_dir(&dir.outside)
        .args(["run", "--subprocesses", "--", "chroot"])
        .arg(sid_root())
        .arg(&it.exe)
        .arg(dir.inside("parent.py"));
    let out = Running::start(cmd).finish(Duration::from_secs(180));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("Captured "), "no table:\n{stdout}");
    let child = children::pids_after(&stdout, "CHILD ")[0];
    let file = format!("profile_{child}.pstats");
    assert!(dir.outside(&file).exists(), "no {file}:\n{stderr}");
    let check = Command::new("chroot")
        .arg(sid_root())
        .arg(&it.exe)
        .arg("-c")
        .arg(format!(
            "import pstats; s = pstats.Stats({:?}); print(any(k[2] == 'child_work' for k in s.stats))",
            dir.inside(&file)
        ))
        .output()
        .unwrap();
    assert_eq!(
        text(&check.stdout).trim(),
        "True",
        "{}",
        text(&check.stderr)
    );
}

#[test]
fn subprocesses_is_refused_with_live() {
    let _serial = one_at_a_time();
    let out = Command::new(tachyon_bin())
        .args(["attach", "--subprocesses", "--live", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("--subprocesses") && err.contains("--live"),
        "{err}"
    );
}

/// `subprocess.run(["sleep", ...])` forks (vforks, on 3.13+) and execs a
/// program that is not Python: a fork caught before its exec shows only
/// its parent's stack, so no profile is written for it.
#[test]
fn children_that_exec_another_program_leave_no_profile() {
    let _serial = one_at_a_time();
    for it in release(sid_interpreters()) {
        let dir = RootDir::new(&[("sleeps.py", children::RUNS_SLEEP)]);
        let (stdout, stderr) = run_profiled(&it, &dir, "sleeps.py", &[]);
        assert!(stdout.contains("DONE"), "{stdout}");
        let files: Vec<String> = std::fs::read_dir(&dir.outside)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("out"))
            .collect();
        assert_eq!(files, ["out.txt"], "{}: {stderr}", it.name);
    }
}

/// `run --subprocesses -- COMMAND`: every Python process of the command
/// is profiled, the first into the main output, the others as children,
/// even when they are siblings rather than its descendants.
#[test]
fn run_command_profiles_every_python_process_of_the_command() {
    let _serial = one_at_a_time();
    let it = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 13 && !i.debug)
        .expect("sid 3.13");
    let (a, b) = (children::work_of("a", 0.8), children::work_of("b", 0.8));
    let dir = RootDir::new(&[("a.py", &a), ("b.py", &b)]);
    let exe = it.exe.display().to_string();
    let script = format!(
        "{exe} {} & {exe} {}; wait",
        dir.inside("a.py"),
        dir.inside("b.py")
    );
    let mut cmd = Command::new(tachyon_bin());
    cmd.args(children::run_args(
        &["--collapsed"],
        &dir.outside("out.txt"),
    ))
    .args(["sh", "-c", &script]);
    let (stdout, stderr) = children::succeeds(&it.name, cmd, Duration::from_secs(180));
    let pids = [
        children::pids_after(&stdout, "a ")[0],
        children::pids_after(&stdout, "b ")[0],
    ];
    // Each function is in exactly one profile: its process's.
    let mut files = vec![dir.outside("out.txt")];
    files.extend(pids.iter().map(|p| dir.outside(&format!("out_{p}.txt"))));
    for function in ["work_of_a", "work_of_b"] {
        let holding: Vec<_> = files
            .iter()
            .filter(|f| f.exists() && samples_in(f, function) > 0)
            .collect();
        assert_eq!(holding.len(), 1, "{function} in {holding:?}:\n{stderr}");
    }
}

/// The main process may exit before its children: their profiles go on
/// until they exit, and are written.
#[test]
fn children_outliving_the_attached_process_are_profiled_to_their_end() {
    let _serial = one_at_a_time();
    const LEAVES_WORKERS: &str = r#"
import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
sys.stdout.write("READY\n")
sys.stdout.flush()
while not os.path.exists(os.path.join(here, "go")):
    time.sleep(0.01)

def orphan_work():
    t = time.time()
    while time.time() - t < 1.5:
        pass

pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        time.sleep(0.3)
        orphan_work()
        os._exit(0)
    pids.append(pid)
with open(os.path.join(here, "pids"), "w") as f:
    f.write(" ".join(map(str, pids)))
# Exit (leaving the workers running) once the test says so.
while not os.path.exists(os.path.join(here, "exit")):
    time.sleep(0.01)
"#;
    let it = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("sid 3.15");
    let mut target = common::spawn(&it, LEAVES_WORKERS, &[], &[]);
    target.wait_for("READY", Duration::from_secs(60));
    let out_dir = TempDir::new("subprocesses");
    let mut cmd = Command::new(tachyon_bin());
    cmd.args(["attach", "--subprocesses", "--collapsed", "-o"])
        .arg(out_dir.join("out.txt"))
        .arg(target.pid().to_string());
    let running = Running::start(cmd);
    // Sampling has begun once tachyon runs its watcher thread.
    let deadline = Instant::now() + Duration::from_secs(60);
    while procs::threads(running.pid()) < 2 {
        assert!(Instant::now() < deadline, "tachyon never started sampling");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(target.outside_path("go"), "").unwrap();
    // Both workers are being profiled (a thread each) before the parent
    // exits: after, they are no longer below it.
    while procs::threads(running.pid()) < 4 {
        assert!(
            Instant::now() < deadline,
            "tachyon never profiled the workers"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(target.outside_path("exit"), "").unwrap();
    let out = running.finish(Duration::from_secs(120));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let pids = std::fs::read_to_string(target.outside_path("pids")).unwrap();
    for w in pids.split_whitespace() {
        let file = out_dir.join(format!("out_{w}.txt"));
        assert!(
            samples_in(&file, "orphan_work") > 0,
            "worker {w} has no orphan_work:\n{stderr}"
        );
    }
    assert!(stderr.contains("waiting for"), "{stderr}");
}

// ---- Under `run`, children are followed with ptrace fork events ----

/// The script of a burst: 30 children forked one after another, child `i`
/// running `work_i` for a few tens of milliseconds, then exiting. The work
/// is CPU time, not wall time: on a loaded machine a child lives as much
/// longer as tachyon's own threads are slowed.
fn burst_script() -> String {
    let mut s = String::from(
        "import os, sys, time\n\
         def spin():\n    t = time.process_time()\n    while time.process_time() - t < 0.05:\n        pass\n",
    );
    for i in 0..30 {
        s.push_str(&format!("def work_{i}():\n    spin()\n"));
    }
    s.push_str(
        "pids = []\n\
         for i in range(30):\n    pid = os.fork()\n    if pid == 0:\n        globals()[f'work_{i}']()\n        os._exit(0)\n    os.waitpid(pid, 0)\n    pids.append(pid)\n\
         sys.stdout.write('CHILDREN ' + ' '.join(map(str, pids)) + '\\n')\n\
         sys.stdout.flush()\n",
    );
    s
}

/// Every child of the burst has a profile with its own work, and only it.
fn assert_burst_profiled(name: &str, dir: &RootDir, stdout: &str, stderr: &str) {
    let forked = children::pids_after(stdout, "CHILDREN ");
    assert_eq!(forked.len(), 30, "{name}: {stdout}");
    for (i, pid) in forked.iter().enumerate() {
        let file = dir.outside(&format!("out_{pid}.txt"));
        assert!(
            file.exists(),
            "{name}: child {i} ({pid}) has no profile:\n{stderr}"
        );
        assert!(
            samples_in(&file, &format!(":work_{i}:")) > 0,
            "{name}: child {i} ({pid})'s profile has no work_{i}:\n{stderr}"
        );
        let other = (i + 1) % 30;
        assert_eq!(
            samples_in(&file, &format!(":work_{other}:")),
            0,
            "{name}: child {i} ({pid})'s profile holds work_{other}"
        );
    }
}

#[test]
fn run_profiles_every_child_of_a_burst_of_short_forks() {
    let _serial = one_at_a_time();
    let script = burst_script();
    for it in release(sid_interpreters()) {
        let dir = RootDir::new(&[("burst.py", &script)]);
        let (stdout, stderr) = run_profiled(&it, &dir, "burst.py", &[]);
        assert_burst_profiled(&it.name, &dir, &stdout, &stderr);
    }
}

/// A grandchild (double fork), a fork from a thread that is not the main
/// one, and a child that execs a new interpreter: each announces its pid
/// and has its work in its own profile.
const SHAPES: &str = r#"
import os, sys, threading, time

def spin():
    t = time.process_time()
    while time.process_time() - t < 0.1:
        pass

def say(tag):
    sys.stdout.write(f"{tag} {os.getpid()}\n")
    sys.stdout.flush()

def grandchild_work():
    spin()

def thread_child_work():
    spin()

# A double fork: the child forks the grandchild and exits at once. The
# pipe's end closes when the grandchild is done.
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    if os.fork() == 0:
        grandchild_work()
        say("GRANDCHILD")
        os._exit(0)
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
os.read(r, 1)

# A fork from a thread that is not the main thread.
def from_thread():
    pid = os.fork()
    if pid == 0:
        thread_child_work()
        say("THREADCHILD")
        os._exit(0)
    os.waitpid(pid, 0)
t = threading.Thread(target=from_thread)
t.start()
t.join()

# A child that execs a new interpreter.
code = "import os, sys, time\ndef exec_child_work():\n    t = time.process_time()\n    while time.process_time() - t < 0.1:\n        pass\nexec_child_work()\nsys.stdout.write(f'EXECCHILD {os.getpid()}\\n')\nsys.stdout.flush()\n"
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-c", code])
os.waitpid(pid, 0)
"#;

#[test]
fn run_profiles_a_grandchild_a_fork_from_a_thread_and_an_exec() {
    let _serial = one_at_a_time();
    for it in release(sid_interpreters()) {
        let dir = RootDir::new(&[("shapes.py", SHAPES)]);
        let (stdout, stderr) = run_profiled(&it, &dir, "shapes.py", &[]);
        for (tag, function) in [
            ("GRANDCHILD ", "grandchild_work"),
            ("THREADCHILD ", "thread_child_work"),
            ("EXECCHILD ", "exec_child_work"),
        ] {
            let pid = children::pids_after(&stdout, tag)[0];
            let file = dir.outside(&format!("out_{pid}.txt"));
            assert!(
                file.exists(),
                "{}: {tag}{pid} has no profile:\n{stdout}\n{stderr}",
                it.name
            );
            assert!(
                samples_in(&file, function) > 0,
                "{}: {tag}{pid}'s profile has no {function}:\n{stderr}",
                it.name
            );
            assert_eq!(
                samples_in(&dir.outside("out.txt"), function),
                0,
                "{}: the parent's profile holds {function}",
                it.name
            );
        }
    }
}

/// Exits with the code given, or is killed by the signal given, after a
/// child of its own came and went.
const EXITS: &str = r#"
import os, signal, sys
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
if sys.argv[1] == "code":
    sys.exit(3)
os.kill(os.getpid(), signal.SIGTERM)
"#;

#[test]
fn run_passes_the_program_exit_status_through_the_tracer() {
    let _serial = one_at_a_time();
    let it = release(sid_interpreters())
        .into_iter()
        .find(|i| i.minor == 14)
        .expect("sid 3.14");
    let dir = RootDir::new(&[("exits.py", EXITS)]);
    for (how, expected) in [("code", 3), ("signal", 128 + 15)] {
        let cmd = children::run_python(&it, &dir, &["--collapsed"], "out.txt", "exits.py", &[how]);
        let out = Running::start(cmd).finish(Duration::from_secs(120));
        assert_eq!(
            out.status.code(),
            Some(expected),
            "{how}: {}",
            text(&out.stderr)
        );
    }
}

/// A child stops itself with SIGSTOP; its parent sees it stopped (waitpid
/// with WUNTRACED), continues it with SIGCONT, sees it continued; the
/// child's SIGCONT handler runs; it exits with 7.
const STOPS: &str = r#"
import os, signal
def say(line):
    os.write(1, (line + "\n").encode())
got = []
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    signal.signal(signal.SIGCONT, lambda *a: got.append(1))
    os.kill(os.getpid(), signal.SIGSTOP)
    say(f"RESUMED handler ran {len(got)} time(s)")
    # Exit only once the parent saw us continued (an exit would hide it).
    os.read(r, 1)
    os._exit(7)
os.close(r)
_, st = os.waitpid(pid, os.WUNTRACED)
say(f"STOPPED {os.WIFSTOPPED(st) and os.WSTOPSIG(st)}")
os.kill(pid, signal.SIGCONT)
_, st = os.waitpid(pid, os.WCONTINUED)
say(f"CONTINUED {os.WIFCONTINUED(st)}")
os.close(w)
_, st = os.waitpid(pid, 0)
say(f"EXIT {os.WIFEXITED(st) and os.WEXITSTATUS(st)}")
"#;

#[test]
fn sigstop_and_sigcont_behave_as_without_tachyon() {
    let _serial = one_at_a_time();
    for it in release(sid_interpreters()) {
        let dir = RootDir::new(&[("stops.py", STOPS)]);
        let plain = Command::new("chroot")
            .arg(sid_root())
            .arg(&it.exe)
            .arg(dir.inside("stops.py"))
            .output()
            .expect("python runs");
        let expected = text(&plain.stdout);
        assert!(expected.contains("EXIT 7"), "{}: {expected}", it.name);
        let (stdout, stderr) = run_profiled(&it, &dir, "stops.py", &[]);
        let lines = |s: &str| -> Vec<String> {
            let mut v: Vec<String> = s
                .lines()
                .filter(|l| {
                    ["RESUMED", "STOPPED", "CONTINUED", "EXIT"]
                        .iter()
                        .any(|t| l.starts_with(t))
                })
                .map(String::from)
                .collect();
            v.sort();
            v
        };
        assert_eq!(lines(&stdout), lines(&expected), "{}: {stderr}", it.name);
    }
}

/// The program and two children each answer SIGTERM by writing their
/// TracerPid to `tracer_<pid>` and exiting 0; `ready` lists their pids.
const TERM_TELLS: &str = r#"
import os, signal, sys, time
here = os.path.dirname(os.path.abspath(__file__))
def on_term(*_):
    with open("/proc/self/status") as f:
        tp = [l.split()[1] for l in f if l.startswith("TracerPid:")][0]
    with open(os.path.join(here, f"tracer_{os.getpid()}"), "w") as f:
        f.write(tp)
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(0.01)
    kids.append(pid)
with open(os.path.join(here, "ready.tmp"), "w") as f:
    f.write(" ".join(map(str, [os.getpid()] + kids)))
os.rename(os.path.join(here, "ready.tmp"), os.path.join(here, "ready"))
while True:
    time.sleep(0.01)
"#;

/// The TracerPid each of `pids` wrote on SIGTERM.
fn tracer_pids_told(dir: &RootDir, pids: &[i32], stderr: &str) -> Vec<String> {
    pids.iter()
        .map(|p| {
            std::fs::read_to_string(dir.outside(&format!("tracer_{p}"))).unwrap_or_else(|e| {
                panic!("{p} did not exit by its SIGTERM handler ({e}):\n{stderr}")
            })
        })
        .collect()
}

/// The pids in `ready` (the program and its children), once it is there.
fn wait_ready(dir: &RootDir, deadline: Instant) -> Vec<i32> {
    loop {
        if let Ok(s) = std::fs::read_to_string(dir.outside("ready")) {
            return s.split_whitespace().map(|p| p.parse().unwrap()).collect();
        }
        assert!(Instant::now() < deadline, "the program never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn nothing_stays_traced_after_the_duration_or_sigint() {
    let _serial = one_at_a_time();
    let it = release(sid_interpreters())
        .into_iter()
        .find(|i| i.minor == 15)
        .expect("sid 3.15");
    for how in ["duration", "sigint"] {
        let dir = RootDir::new(&[("tells.py", TERM_TELLS)]);
        let flags: &[&str] = if how == "duration" {
            &["--collapsed", "-d", "1"]
        } else {
            &["--collapsed"]
        };
        let cmd = children::run_python(&it, &dir, flags, "out.txt", "tells.py", &[]);
        let running = Running::start(cmd);
        let tachyon = running.pid();
        let mut pids = Vec::new();
        if how == "sigint" {
            pids = wait_ready(&dir, Instant::now() + Duration::from_secs(60));
            // While profiled, the children are traced by a thread of tachyon.
            for p in &pids {
                let tracer = procs::status_field(*p, "TracerPid").unwrap();
                assert!(
                    Path::new(&format!("/proc/{tachyon}/task/{tracer}")).exists(),
                    "{p} is traced by {tracer}, not by tachyon ({tachyon})"
                );
            }
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(tachyon),
                nix::sys::signal::Signal::SIGINT,
            )
            .unwrap();
        }
        let out = running.finish(Duration::from_secs(120));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{how}: {}\n{stderr}", out.status);
        if how == "duration" {
            // What the program started in its second (on a slow machine,
            // perhaps not yet its children): the program itself at least.
            pids = std::fs::read_to_string(dir.outside("ready"))
                .map(|s| s.split_whitespace().map(|p| p.parse().unwrap()).collect())
                .unwrap_or_default();
            if pids.is_empty() {
                let told: Vec<_> = std::fs::read_dir(&dir.outside)
                    .unwrap()
                    .flatten()
                    .filter_map(|e| {
                        e.file_name()
                            .to_str()?
                            .strip_prefix("tracer_")?
                            .parse::<i32>()
                            .ok()
                    })
                    .collect();
                assert!(
                    !told.is_empty(),
                    "{how}: the program never answered SIGTERM:\n{stderr}"
                );
                pids = told;
            }
        }
        for (p, tracer) in pids.iter().zip(tracer_pids_told(&dir, &pids, &stderr)) {
            assert_eq!(tracer, "0", "{how}: {p} was still traced when it ended");
        }
    }
}

/// Under `strace -f` tachyon cannot trace the program (it is strace's):
/// it says so in one line and finds the children by scanning `/proc`.
#[test]
fn refused_ptrace_falls_back_to_scanning_for_children() {
    let _serial = one_at_a_time();
    let it = release(sid_interpreters())
        .into_iter()
        .find(|i| i.minor == 13)
        .expect("sid 3.13");
    let dir = RootDir::new(&[("shapes.py", SHAPES)]);
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-o", "/dev/null"])
        .arg(tachyon_bin())
        .args(children::run_args(
            &["--collapsed"],
            &dir.outside("out.txt"),
        ))
        .arg(&it.exe)
        .arg(dir.inside("shapes.py"));
    let out = Running::start(cmd).finish(Duration::from_secs(180));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let warnings = stderr
        .lines()
        .filter(|l| l.contains("cannot trace the program"))
        .count();
    assert_eq!(warnings, 1, "{stderr}");
    for (tag, function) in [
        ("THREADCHILD ", "thread_child_work"),
        ("EXECCHILD ", "exec_child_work"),
    ] {
        let pid = children::pids_after(&stdout, tag)[0];
        assert!(
            samples_in(&dir.outside(&format!("out_{pid}.txt")), function) > 0,
            "{tag}{pid}'s profile has no {function}:\n{stderr}"
        );
    }
}

/// The burst, started by the test: the program writes `ready` (its pid),
/// waits for `go`, forks its 30 children, then writes `done`.
fn burst_on_go_script() -> String {
    let burst = burst_script();
    format!(
        "import os, time\n\
         here = os.path.dirname(os.path.abspath(__file__))\n\
         open(os.path.join(here, 'ready.tmp'), 'w').write(str(os.getpid()))\n\
         os.rename(os.path.join(here, 'ready.tmp'), os.path.join(here, 'ready'))\n\
         while not os.path.exists(os.path.join(here, 'go')):\n    time.sleep(0.01)\n\
         {burst}\
         open(os.path.join(here, 'done'), 'w').close()\n"
    )
}

fn wait_until(what: &str, deadline: Instant, mut cond: impl FnMut() -> bool) {
    while !cond() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// However late tachyon runs, the tracer misses no child: with tachyon
/// stopped (SIGSTOP) the program's first fork waits for it. A `/proc` scan
/// (the fallback under `strace -f`) misses every child that lived and
/// ended while tachyon was stopped: no timing is assumed either way.
#[test]
fn a_burst_while_tachyon_is_stopped_is_caught_by_the_tracer_not_by_a_scan() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let _serial = one_at_a_time();
    let it = release(sid_interpreters())
        .into_iter()
        .find(|i| i.minor == 14)
        .expect("sid 3.14");
    let script = burst_on_go_script();
    for traced in [true, false] {
        let dir = RootDir::new(&[("burst.py", &script)]);
        let mut cmd = Command::new(if traced { "env" } else { "strace" });
        if !traced {
            cmd.args(["-f", "-o", "/dev/null"]);
        }
        cmd.arg(tachyon_bin())
            .args(children::run_args(
                &["--collapsed"],
                &dir.outside("out.txt"),
            ))
            .arg(&it.exe)
            .arg(dir.inside("burst.py"));
        let running = Running::start(cmd);
        let deadline = Instant::now() + Duration::from_secs(60);
        wait_until("the program is ready", deadline, || {
            dir.outside("ready").exists()
        });
        let program: i32 = std::fs::read_to_string(dir.outside("ready"))
            .unwrap()
            .parse()
            .unwrap();
        // tachyon: the program's parent (`env` and `strace` are its own).
        let tachyon = procs::ppid(program).expect("the program's parent");
        // Sampling has begun once tachyon runs its watcher (and tracer).
        let threads = if traced { 3 } else { 2 };
        wait_until("tachyon sampling", deadline, || {
            procs::threads(tachyon) >= threads
        });
        kill(Pid::from_raw(tachyon), Signal::SIGSTOP).unwrap();
        wait_until("tachyon stopped", deadline, || {
            matches!(procs::state(tachyon), Some('T' | 't'))
        });
        std::fs::write(dir.outside("go"), "").unwrap();
        if traced {
            // The program waits at its first fork for its stopped tracer.
            wait_until("the program held at its fork", deadline, || {
                procs::state(program) == Some('t')
            });
            assert!(!dir.outside("done").exists());
        } else {
            // The whole burst runs, and ends, unseen.
            wait_until("the burst done", deadline, || dir.outside("done").exists());
        }
        kill(Pid::from_raw(tachyon), Signal::SIGCONT).unwrap();
        let out = running.finish(Duration::from_secs(180));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{stdout}\n{stderr}");
        if traced {
            assert_burst_profiled(&it.name, &dir, &stdout, &stderr);
        } else {
            let forked = children::pids_after(&stdout, "CHILDREN ");
            let profiled: Vec<_> = forked
                .iter()
                .filter(|p| dir.outside(&format!("out_{p}.txt")).exists())
                .collect();
            assert!(
                profiled.is_empty(),
                "a scan found children that ended while tachyon was stopped: {profiled:?}\n{stderr}"
            );
        }
    }
}

/// The program, stopped and continued from outside while traced, stops
/// (makes no progress), goes on, and its SIGCONT handler runs once.
#[test]
fn the_program_stops_and_continues_from_outside() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    const WAITS: &str = r#"
import os, signal, time
here = os.path.dirname(os.path.abspath(__file__))
got = []
signal.signal(signal.SIGCONT, lambda *a: got.append(1))
if os.fork() == 0:
    os._exit(0)
os.wait()
open(os.path.join(here, "ready.tmp"), "w").write(str(os.getpid()))
os.rename(os.path.join(here, "ready.tmp"), os.path.join(here, "ready"))
while not os.path.exists(os.path.join(here, "go")):
    time.sleep(0.005)
os.write(1, f"CONT {len(got)}\n".encode())
"#;
    let _serial = one_at_a_time();
    let it = release(sid_interpreters())
        .into_iter()
        .find(|i| i.minor == 15)
        .expect("sid 3.15");
    let dir = RootDir::new(&[("waits.py", WAITS)]);
    let cmd = children::run_python(&it, &dir, &["--collapsed"], "out.txt", "waits.py", &[]);
    let running = Running::start(cmd);
    let deadline = Instant::now() + Duration::from_secs(60);
    let program = wait_ready(&dir, deadline)[0];
    kill(Pid::from_raw(program), Signal::SIGSTOP).unwrap();
    wait_until("the program stopped", deadline, || {
        matches!(procs::state(program), Some('T' | 't'))
    });
    std::fs::write(dir.outside("go"), "").unwrap();
    // Stopped, it cannot see `go`: still there, still stopped.
    std::thread::sleep(Duration::from_millis(50));
    assert!(matches!(procs::state(program), Some('T' | 't')));
    kill(Pid::from_raw(program), Signal::SIGCONT).unwrap();
    let out = running.finish(Duration::from_secs(120));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("CONT 1"), "{stdout}\n{stderr}");
}

/// Children that become Python through an exec, each running a short
/// function of its own for 0.3 s from its start and then saying its pid:
/// a `subprocess.run` of the interpreter, a shell that execs it, and a
/// fork that calls `os.execv`.
const EXEC_INTO_PYTHON: &str = r#"
import os, subprocess, sys

def child_code(function):
    return (
        "import os, sys, time\n"
        f"def {function}():\n"
        "    t = time.time()\n"
        "    while time.time() - t < 0.3:\n"
        "        pass\n"
        f"{function}()\n"
        "sys.stdout.write(str(os.getpid()))\n"
    )

def say(tag, pid):
    sys.stdout.write(f"{tag} {pid}\n")
    sys.stdout.flush()

out = subprocess.run([sys.executable, "-c", child_code("subprocess_work")],
                     capture_output=True, text=True, check=True).stdout
say("SUBPROCESS", out)
out = subprocess.run(["sh", "-c", 'exec "$0" -c "$1"', sys.executable,
                      child_code("shell_exec_work")],
                     capture_output=True, text=True, check=True).stdout
say("SHELLEXEC", out)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    os.dup2(w, 1)
    os.execv(sys.executable, [sys.executable, "-c", child_code("fork_exec_work")])
os.close(w)
out = os.read(r, 100).decode()
os.waitpid(pid, 0)
say("FORKEXEC", out)
"#;

/// Each child of [`EXEC_INTO_PYTHON`] has a profile with its function.
fn assert_exec_children_profiled(
    name: &str,
    out: impl Fn(&str) -> std::path::PathBuf,
    stdout: &str,
    stderr: &str,
) {
    for (tag, function) in [
        ("SUBPROCESS ", "subprocess_work"),
        ("SHELLEXEC ", "shell_exec_work"),
        ("FORKEXEC ", "fork_exec_work"),
    ] {
        let pid = children::pids_after(stdout, tag)[0];
        let file = out(&format!("out_{pid}.txt"));
        assert!(
            file.exists(),
            "{name}: {tag}{pid} has no profile:\n{stdout}\n{stderr}"
        );
        assert!(
            samples_in(&file, function) > 0,
            "{name}: {tag}{pid}'s profile has no {function}:\n{stderr}"
        );
    }
}

/// A child that execs an interpreter is held by the tracer until its
/// runtime is ready, as a fork is, so a short one is profiled from its
/// start: on the carried layouts of 3.11/3.12 (whose check takes long)
/// as on the sid interpreters.
#[test]
fn run_holds_a_child_that_execs_python_until_it_is_profiled() {
    let _serial = one_at_a_time();
    let old: Vec<Interp> = common::machine_old_interpreters()
        .into_iter()
        .filter(|i| i.name == "pyenv-3.11")
        .collect();
    assert_eq!(old.len(), 1, "MISSING INTERPRETER: pyenv-3.11");
    for it in old {
        let dir = TempDir::new("execs");
        std::fs::write(dir.join("execs.py"), EXEC_INTO_PYTHON).unwrap();
        let cmd = run_with_python(&dir, &it, &["execs.py"]);
        let (stdout, stderr) = children::succeeds(&it.name, cmd, Duration::from_secs(180));
        assert_exec_children_profiled(&it.name, |f| dir.join(f), &stdout, &stderr);
    }
    for it in release(sid_interpreters()) {
        let dir = RootDir::new(&[("execs.py", EXEC_INTO_PYTHON)]);
        let (stdout, stderr) = run_profiled(&it, &dir, "execs.py", &[]);
        assert_exec_children_profiled(&it.name, |f| dir.outside(f), &stdout, &stderr);
    }
}
