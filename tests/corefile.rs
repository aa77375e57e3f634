//! ELF core files as process memory (`process::corefile`) and `dump
//! --core`, on real cores of real interpreters: the cores `gdb`'s `gcore`
//! makes of stuck programs, and the kernel's of a real crash. The core
//! names the process, its threads and its mapped files; `dump --core`
//! finds the runtime in it and reads every thread's stack, locals
//! included, as a live dump read them just before; bad cores and wrong
//! executables get one clear line.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    Interp, TempDir, gcore, machine_old_interpreters, machine_supported_interpreters, release,
    run_ok, sid_interpreters, spawn, sysroot_args, tachyon_bin, tachyon_ok,
};
use tachyon::model::Sample;
use tachyon::process::ProcessMemory;
use tachyon::process::corefile::CoreFile;
use tachyon::unwind::{UnwindOptions, Unwinder};

const PARKED: &str = r#"
import threading, time
def parked_worker():
    time.sleep(3600)
def parked_main():
    threading.Thread(target=parked_worker, daemon=True).start()
    time.sleep(0.3)
    print("READY", flush=True)
    time.sleep(3600)
parked_main()
"#;

/// The main thread's function names, leaf first.
fn names<M: ProcessMemory>(u: &Unwinder<M>, s: &Sample, tid: u64) -> Vec<String> {
    let t = s
        .threads
        .iter()
        .find(|t| t.tid == tid)
        .expect("the thread is sampled");
    let f = u.frames();
    t.frames
        .iter()
        .map(|&id| f.str(f.frame(id).func).to_owned())
        .collect()
}

#[test]
fn a_gcore_core_reads_as_its_live_process() {
    let dir = TempDir::new("corefile");
    let mut interps = release(sid_interpreters());
    interps.extend(machine_old_interpreters());
    for it in interps {
        let mut t = spawn(&it, PARKED, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let pid = t.pid();
        let path = gcore(&t);
        let core = CoreFile::open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", it.name))
            .with_sysroot(it.root.clone());
        assert_eq!(core.pid, Some(pid), "{}", it.name);
        let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
            .collect();
        tids.sort_unstable();
        let mut in_core = core.threads.clone();
        in_core.sort_unstable();
        assert_eq!(in_core, tids, "{}: the core's threads", it.name);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let exe_name = exe.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            core.files.iter().any(|f| f.path.ends_with(&exe_name)),
            "{}: {exe_name} is not among the core's mapped files: {:?}",
            it.name,
            core.files.iter().map(|f| &f.path).collect::<Vec<_>>()
        );
        // The unwinder on the core, with the runtime found in the live
        // process: the same main-thread stack.
        let mut live = tachyon::attach(pid, UnwindOptions::default()).unwrap();
        let opts = UnwindOptions::default();
        let rt = live.runtime().clone();
        let mut from_core = Unwinder::new(core, pid, rt, opts);
        let mut s = Sample::default();
        live.sample(&mut s).unwrap();
        let want = names(&live, &s, pid as u64);
        from_core
            .sample(&mut s)
            .unwrap_or_else(|e| panic!("{}: the core's stacks: {e}", it.name));
        assert_eq!(names(&from_core, &s, pid as u64), want, "{}", it.name);
        assert!(
            want.contains(&"parked_main".to_owned()),
            "{}: {want:?}",
            it.name
        );

        // A truncated core and a file that is no core: one clear error each.
        let bytes = std::fs::read(&path).unwrap();
        let cut = dir.0.join(format!("truncated-{}.core", it.name));
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let e = CoreFile::open(&cut)
            .err()
            .expect("a truncated core is refused");
        assert!(e.to_string().contains("truncated"), "{}: {e}", it.name);
        let e = CoreFile::open(&exe)
            .err()
            .expect("an executable is no core");
        assert!(
            e.to_string().contains("not a core file"),
            "{}: {e}",
            it.name
        );
        // Outside every segment: an error, not zeros.
        assert!(from_core.memory().read(8, &mut [0u8; 8]).is_err());
        eprintln!(
            "{}: {} threads, {} mapped files, the live stacks",
            it.name,
            tids.len(),
            from_core.memory().files.len()
        );
    }
}

const STUCK_PY: &str = include_str!("../fixtures/targets/stuck.py");

/// What a dump says of each thread that a core must say too: its id,
/// name, frames (locals included) and the lock it waits for. Not its CPU
/// state: a core does not tell whether a thread was on a CPU.
fn threads_of(json: &str) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| serde_json::json!([t["tid"], t["name"], t["frames"], t["waiting_for"]]))
        .collect()
}

/// The function names of each thread of a `--json` dump, leaf first.
fn functions(threads: &[serde_json::Value]) -> Vec<Vec<String>> {
    threads
        .iter()
        .map(|t| {
            t[2].as_array()
                .unwrap()
                .iter()
                .map(|f| f["function"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .collect()
}

/// A live `dump -a -l --json` of `pid` once the stuck target has stopped
/// moving: every thread at its blocking call, two dumps in a row alike.
fn settled_dump(it: &Interp, pid: i32, cwd: &Path) -> Vec<serde_json::Value> {
    let p = pid.to_string();
    let args = ["dump", "-a", "-l", "--json", p.as_str()];
    let mut last = threads_of(&tachyon_ok(&args, cwd));
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(50));
        let now = threads_of(&tachyon_ok(&args, cwd));
        let f = functions(&now);
        let settled = f.len() == 4
            && f.iter()
                .filter(|t| t.first().map(String::as_str) == Some("take_in_order"))
                .count()
                == 2
            && f.iter()
                .any(|t| t.first().map(String::as_str) == Some("parked"))
            && f.iter().any(|t| t.iter().any(|n| n == "stuck_main"));
        if settled && now == last {
            return now;
        }
        last = now;
    }
    panic!(
        "{}: the stuck target never settled: {:?}",
        it.name,
        functions(&last)
    );
}

#[test]
fn a_core_dumps_every_thread_as_the_live_process_did() {
    let dir = TempDir::new("dump-core");
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    interps.extend(machine_supported_interpreters());
    let mut seen = Vec::new();
    for it in interps {
        let mut t = spawn(&it, STUCK_PY, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let pid = t.pid();
        let live = settled_dump(&it, pid, dir.path());
        let core = gcore(&t);
        let p = pid.to_string();
        let after = threads_of(&tachyon_ok(&["dump", "-a", "-l", "--json", &p], dir.path()));
        assert_eq!(after, live, "{}: the target moved while gcore ran", it.name);
        let core_s = core.to_string_lossy().into_owned();
        let mut args = vec!["dump", "-a", "-l", "--json", "--core", core_s.as_str()];
        let sysroot = sysroot_args(&it);
        args.extend(sysroot.iter().map(String::as_str));
        let from_core = threads_of(&tachyon_ok(&args, dir.path()));
        assert_eq!(
            from_core, live,
            "{}: the core's threads differ from the live dump's",
            it.name
        );
        // Locals are there, as live: the holders' own names and values.
        let text = serde_json::to_string(&from_core).unwrap();
        assert!(
            text.contains("holder-a") && text.contains("\"attempts\""),
            "{}: {text}",
            it.name
        );
        // The text dump of the core: its source lines, read below the sysroot.
        let mut plain = vec!["dump", "-a", "--core", core_s.as_str()];
        plain.extend(sysroot.iter().map(String::as_str));
        let out = tachyon_ok(&plain, dir.path());
        assert!(
            out.contains(&format!("Stack dump for PID {pid}")) && out.contains("theirs.acquire()"),
            "{}: {out}",
            it.name
        );
        seen.push(format!("{} ({} threads)", it.name, from_core.len()));
    }
    eprintln!("cores read as live: {}", seen.join(", "));
}

/// `tachyon dump ARGS`, which must fail: its one-line error.
fn dump_error(args: &[&str]) -> String {
    let out = Command::new(tachyon_bin())
        .arg("dump")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "dump {args:?} succeeded: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn bad_cores_and_wrong_files_get_one_clear_line() {
    let it = release(sid_interpreters())
        .into_iter()
        .find(|i| i.minor == 15)
        .unwrap();
    let root = it.root.clone().unwrap();
    let mut t = spawn(&it, STUCK_PY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let core = gcore(&t);
    let core_s = core.to_string_lossy().into_owned();
    let root_s = root.to_string_lossy().into_owned();

    // The files as the core names them are not here: say to give --sysroot.
    let e = dump_error(&["--core", &core_s]);
    assert!(
        e.contains("/usr/bin/python3.15") && e.contains("--sysroot"),
        "{e}"
    );
    // Another executable than the one the process ran: the build ids differ.
    let other = root
        .join("usr/bin/python3.14")
        .to_string_lossy()
        .into_owned();
    let e = dump_error(&["--core", &core_s, "--sysroot", &root_s, "--exe", &other]);
    assert!(e.contains("build id") && e.contains("python3.14"), "{e}");
    // An executable that is not there.
    let e = dump_error(&["--core", &core_s, "--exe", "/nonexistent/python3.15"]);
    assert!(
        e.contains("/nonexistent/python3.15") && e.contains("cannot be opened"),
        "{e}"
    );
    // --exe pointing at the right file works as --sysroot does for it.
    let exe = root
        .join("usr/bin/python3.15")
        .to_string_lossy()
        .into_owned();
    let out = tachyon_ok(&["dump", "--core", &core_s, "--exe", &exe], Path::new("/"));
    assert!(out.contains("stuck_main"), "{out}");
    // A core of a program that is not Python.
    let mut sleep_cmd = Command::new("sleep");
    sleep_cmd.arg("300");
    let mut sleeper = common::Running::start(sleep_cmd);
    let prefix = t.outside_path("sleep-core");
    run_ok(
        "gcore",
        Command::new("gcore")
            .arg("-o")
            .arg(&prefix)
            .arg(sleeper.pid().to_string()),
    );
    let sleep_core = prefix.with_file_name(format!("sleep-core.{}", sleeper.pid()));
    sleeper.kill_all();
    let e = dump_error(&["--core", &sleep_core.to_string_lossy()]);
    assert!(e.contains("not a Python") && e.contains("sleep"), "{e}");
    // A core cut short (a disk that filled while it was written).
    let bytes = std::fs::read(&core).unwrap();
    let cut = t.outside_path("cut.core");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let e = dump_error(&["--core", &cut.to_string_lossy(), "--sysroot", &root_s]);
    assert!(e.contains("truncated"), "{e}");
    // Not a core at all, and no file.
    let e = dump_error(&["--core", &exe]);
    assert!(e.contains("not a core file"), "{e}");
    let e = dump_error(&["--core", "/nonexistent/core"]);
    assert!(e.contains("/nonexistent/core"), "{e}");
    // Flags that need a live process.
    let out = Command::new(tachyon_bin())
        .args(["dump", "--core", &core_s, "--blocking"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

/// The kernel's core pattern for the test's duration: a plain `core` in
/// the crashing process's working directory, set only when it is not
/// already a file name there (and put back after).
struct CorePattern(Option<String>);

impl CorePattern {
    const PATH: &str = "/proc/sys/kernel/core_pattern";

    fn plain() -> CorePattern {
        let now = std::fs::read_to_string(Self::PATH).unwrap_or_default();
        let now = now.trim().to_owned();
        if !now.contains('/') && !now.starts_with('|') && now.starts_with("core") {
            return CorePattern(None);
        }
        std::fs::write(Self::PATH, "core").unwrap_or_else(|e| {
            panic!("MISSING PERMISSION: core_pattern is {now:?} and cannot be set to \"core\": {e}")
        });
        CorePattern(Some(now))
    }
}

impl Drop for CorePattern {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = std::fs::write(Self::PATH, old);
        }
    }
}

const CRASH_PY: &str = r#"
import ctypes, os, resource, threading, time
resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
os.chdir(os.path.dirname(os.path.abspath(__file__)))
def parked_beside():
    time.sleep(3600)
def crash_here(depth):
    if depth:
        return crash_here(depth - 1)
    ctypes.string_at(0)
threading.Thread(target=parked_beside, daemon=True).start()
time.sleep(0.2)
crash_here(3)
"#;

#[test]
fn a_crash_core_holds_the_stack_that_crashed() {
    let _pattern = CorePattern::plain();
    let dir = TempDir::new("crash-core");
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    interps.extend(machine_supported_interpreters());
    for it in interps {
        let mut t = spawn(&it, CRASH_PY, &[], &[]);
        let pid = t.pid();
        let status = t.child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(11), "{}: {status:?}", it.name);
        assert!(status.core_dumped(), "{}: no core was written", it.name);
        // `core`, `core.PID`, or what a kept pattern such as `core.%e.%p`
        // names: the file beside the script whose name starts so.
        let beside = t.outside_path("target.py").parent().unwrap().to_owned();
        let core = std::fs::read_dir(&beside)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("core"))
            .unwrap_or_else(|| panic!("{} (pid {pid}): no core beside the script", it.name));
        let core_s = core.to_string_lossy().into_owned();
        let mut args = vec!["dump", "-a", "--json", "--core", core_s.as_str()];
        let sysroot = sysroot_args(&it);
        args.extend(sysroot.iter().map(String::as_str));
        let threads = threads_of(&tachyon_ok(&args, dir.path()));
        let f = functions(&threads);
        let main = f
            .iter()
            .find(|t| t.contains(&"<module>".to_owned()))
            .unwrap_or_else(|| panic!("{}: no main thread: {f:?}", it.name));
        assert_eq!(main[0], "string_at", "{}: {main:?}", it.name);
        assert_eq!(
            main.iter().filter(|n| *n == "crash_here").count(),
            4,
            "{}: {main:?}",
            it.name
        );
        assert!(
            f.iter()
                .any(|t| t.first().map(String::as_str) == Some("parked_beside")),
            "{}: {f:?}",
            it.name
        );
    }
}
