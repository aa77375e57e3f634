//! The memory reader and the runtime locator under conditions a user can
//! meet: `process_vm_readv` forbidden (the `/proc/PID/mem` fallback), the
//! interpreter binary deleted after start (an upgrade under a running
//! service), and code objects freed and reallocated at the same address
//! (the code-object cache must not serve a dead function's name).

mod common;

use std::time::Duration;

use common::{sid_interpreters, spawn};
use tachyon::model::{FrameKind, Sample};
use tachyon::process::linux::LinuxProcess;
use tachyon::unwind::{UnwindOptions, Unwinder};

/// Leaf-first (file, function, line) of the main thread.
fn main_stack<M: tachyon::process::ProcessMemory>(
    u: &mut Unwinder<M>,
) -> Vec<(String, String, i32)> {
    let mut s = Sample::default();
    for _ in 0..50 {
        if u.sample(&mut s).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = s.threads.first().expect("a main thread");
    t.frames
        .iter()
        .map(|&id| {
            let f = u.frames().frame(id);
            assert_eq!(f.kind, FrameKind::Python);
            (
                u.frames().str(f.file).to_string(),
                u.frames().str(f.func).to_string(),
                f.line(),
            )
        })
        .collect()
}

const PARKED: &str =
    "import time\ndef parked():\n    print('READY', flush=True); time.sleep(1000)\nparked()\n";

#[test]
fn the_proc_mem_fallback_reads_the_same_stacks() {
    for it in sid_interpreters() {
        let mut t = spawn(&it, PARKED, &[], &[]);
        t.wait_for("READY", Duration::from_secs(20));
        let fast = tachyon::attach(t.pid(), UnwindOptions::default()).unwrap();
        let rt = fast.runtime().clone();
        let mut fast = fast;
        let slow_mem = LinuxProcess::open_via_proc_mem(t.pid()).unwrap();
        let mut slow = Unwinder::new(slow_mem, t.pid(), rt, UnwindOptions::default());
        let a = main_stack(&mut fast);
        let b = main_stack(&mut slow);
        assert_eq!(a, b, "{}", it.name);
        assert_eq!(a[0].1, "parked", "{}: {a:?}", it.name);
        assert_eq!(a[0].2, 3, "{}: {a:?}", it.name);
    }
}

#[test]
fn a_deleted_interpreter_binary_is_still_read() {
    for it in sid_interpreters().into_iter().filter(|i| !i.debug) {
        let root = it.root.clone().unwrap();
        // A private copy of the interpreter, deleted once it runs.
        let copy_inside = format!("/tmp/python3-deleted-{}-{}", std::process::id(), it.minor);
        let copy_outside = root.join(copy_inside.trim_start_matches('/'));
        std::fs::copy(root.join(it.exe.strip_prefix("/").unwrap()), &copy_outside).unwrap();
        let mut doomed = it.clone();
        doomed.exe = copy_inside.into();
        // Another test's child, forked while the copy was being written,
        // holds it open for writing until it execs: executing the copy
        // then fails with "Text file busy" for that instant. Try again.
        let mut tries = 0;
        let t = loop {
            let t = spawn(&doomed, PARKED, &[], &[]);
            match t.next_line(Duration::from_secs(20)) {
                Some(l) if l.starts_with("READY") => break t,
                _ if tries < 20 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => panic!("{}: the copy never ran: {other:?}", it.name),
            }
        };
        std::fs::remove_file(&copy_outside).unwrap();
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid())).unwrap();
        assert!(
            maps.contains("(deleted)"),
            "{}: the binary should show as deleted",
            it.name
        );
        let mut u = tachyon::attach(t.pid(), UnwindOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", it.name));
        let s = main_stack(&mut u);
        assert_eq!(s[0].1, "parked", "{}: {s:?}", it.name);
    }
}

/// The target makes a new function per round (unique name, same shape, so
/// the allocator hands out the old code object's address again), calls it,
/// reports the code object's address and blocks; the test samples, checks
/// the name, and releases it with SIGUSR1.
const CHURN: &str = r#"
import gc, signal, sys, _signal
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
src = "def f_{i}():\n    print('AT', {i}, id(sys._getframe().f_code), flush=True); _signal.sigwait([signal.SIGUSR1])\n"
for i in range(int(sys.argv[1])):
    ns = {"signal": signal, "sys": sys, "_signal": _signal}
    exec(src.format(i=i), ns)
    ns["f_%d" % i]()
    del ns
    gc.collect()
print("DONE", flush=True)
"#;

#[test]
fn a_code_object_reallocated_at_the_same_address_gets_its_own_name() {
    const ROUNDS: usize = 60;
    for it in sid_interpreters() {
        let mut t = spawn(&it, CHURN, &[], &[&ROUNDS.to_string()]);
        let mut u: Option<Unwinder<LinuxProcess>> = None;
        let mut addrs = std::collections::HashSet::new();
        let mut reused = 0;
        for i in 0..ROUNDS {
            let line = t.wait_for("AT ", Duration::from_secs(20));
            let mut f = line.split_whitespace().skip(1);
            assert_eq!(f.next(), Some(i.to_string().as_str()));
            if !addrs.insert(f.next().unwrap().to_string()) {
                reused += 1;
            }
            let un = u
                .get_or_insert_with(|| tachyon::attach(t.pid(), UnwindOptions::default()).unwrap());
            let s = main_stack(un);
            assert_eq!(s[0].1, format!("f_{i}"), "{} round {i}: {s:?}", it.name);
            assert_eq!(s[0].2, 2, "{} round {i}: {s:?}", it.name);
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(t.pid()),
                nix::sys::signal::Signal::SIGUSR1,
            )
            .unwrap();
        }
        t.wait_for("DONE", Duration::from_secs(20));
        assert!(
            reused > 0,
            "{}: no code object address was reused, the test proves nothing",
            it.name
        );
        eprintln!(
            "{}: {reused} of {ROUNDS} code objects reused an old address",
            it.name
        );
    }
}

/// A libpython whose `.PyRuntime` section header is renamed (the data stays
/// where it was): only the `_PyRuntime` dynamic symbol can find the runtime.
#[test]
fn the_runtime_is_found_through_the_dynamic_symbol_without_the_section() {
    let it = common::machine_supported_interpreters()
        .into_iter()
        .find(|i| i.name == "pyenv-3.13")
        .expect("pyenv 3.13 is one of the machine's interpreters");
    let lib_dir = it.exe.parent().unwrap().parent().unwrap().join("lib");
    let lib = lib_dir.join("libpython3.13.so.1.0");
    let tmp = std::env::temp_dir().join(format!("tachyon-nosection-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let renamed = tmp.join("libpython3.13.so.1.0");
    let st = std::process::Command::new("objcopy")
        .arg("--rename-section")
        .arg(".PyRuntime=.NoRuntime")
        .arg(&lib)
        .arg(&renamed)
        .status()
        .expect("objcopy (binutils) is needed for this test");
    assert!(st.success());
    let mut child = std::process::Command::new(&it.exe)
        .args(["-c", "import time\ndef parked():\n    print('READY', flush=True); time.sleep(1000)\nparked()\n"])
        .env("LD_LIBRARY_PATH", &tmp)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut std::process::Child, std::path::PathBuf);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
    let pid = child.id() as i32;
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _guard = Kill(&mut child, tmp.clone());
    assert_eq!(line.trim(), "READY");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        maps.contains(renamed.to_str().unwrap()),
        "the renamed libpython is not the one loaded"
    );
    let mut u = tachyon::attach(pid, UnwindOptions::default()).unwrap();
    assert_eq!(u.runtime().binary, renamed.to_str().unwrap());
    let s = main_stack(&mut u);
    assert_eq!(s[0].1, "parked", "{s:?}");
}

/// An interpreter linked into a program of another name (an embedding
/// application, a frozen app) is found through the main executable.
#[test]
fn an_interpreter_under_another_name_is_found() {
    for it in sid_interpreters().into_iter().filter(|i| !i.debug) {
        let root = it.root.clone().unwrap();
        let inside = format!("/tmp/myapp-{}-{}", std::process::id(), it.minor);
        let outside = root.join(inside.trim_start_matches('/'));
        std::fs::copy(root.join(it.exe.strip_prefix("/").unwrap()), &outside).unwrap();
        let mut renamed = it.clone();
        renamed.exe = inside.into();
        let mut t = spawn(&renamed, PARKED, &[], &[]);
        t.wait_for("READY", Duration::from_secs(20));
        let mut u = tachyon::attach(t.pid(), UnwindOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", it.name));
        let s = main_stack(&mut u);
        drop(t);
        let _ = std::fs::remove_file(&outside);
        assert_eq!(s[0].1, "parked", "{}: {s:?}", it.name);
    }
}
