//! Shared by the integration tests: the real interpreters to test against,
//! and targets that are always killed, even when a test fails.
//!
//! Interpreters come from two places:
//! - the Debian sid root built by `scripts/provision-sid.sh` (python3.13,
//!   3.14, 3.15 and their debug builds): mandatory; a missing one fails;
//! - the machine's own pythons (Debian python3.11, pyenv 3.10/3.11/3.12/3.13):
//!   mandatory too; a missing one fails the test that needs it.
#![allow(dead_code)]

pub mod children;

/// `fixtures/targets/callgraph.py`, a program of known calls.
pub const CALLGRAPH: &str = include_str!("../../fixtures/targets/callgraph.py");

/// Every caller -> callee pair [`CALLGRAPH`] makes: a reported stack with
/// any other pair is a frame lost or spliced in.
pub const CALLGRAPH_CALLS: &[(&str, &str)] = &[
    ("<module>", "work"),
    // 3.11: a list comprehension is a function of its own.
    ("<module>", "<listcomp>"),
    ("work", "rec"),
    ("work", "e"),
    ("rec", "rec"),
    ("rec", "a"),
    ("a", "b"),
    ("e", "g"),
    ("g", "h"),
    ("h", "k"),
    ("k", "k2"),
    ("Thread.run", "work"),
];
pub mod collapsed;
pub mod procs;
pub mod spoil;

// The names the tests knew these by before `procs`.
#[allow(unused_imports)]
pub use procs::{descendants, ppid};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Once;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One interpreter to start targets with.
#[derive(Debug, Clone)]
pub struct Interp {
    /// Short name for messages, e.g. `sid-3.15d`.
    pub name: String,
    /// Expected `major.minor`.
    pub minor: u8,
    pub debug: bool,
    /// `Some(root)`: the executable lives inside this root and runs under
    /// chroot; scripts must be written below the root.
    pub root: Option<PathBuf>,
    /// Path of the executable (inside the root, if any).
    pub exe: PathBuf,
}

/// The reference's `replay --collapsed` of the root dir's `rec.bin` (into
/// its `ref.txt`), which must succeed: its standard output.
pub fn reference_replays(dir: &RootDir) -> String {
    let out = Command::new("chroot")
        .arg(sid_root())
        .args(["/usr/bin/python3.15", "-m", "profiling.sampling", "replay"])
        .args([
            "--collapsed",
            "-o",
            &dir.inside("ref.txt"),
            &dir.inside("rec.bin"),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the reference's replay: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Where the sid root is (same default as the provisioning script).
pub fn sid_root() -> PathBuf {
    std::env::var_os("TACHYON_SID_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/tachyon/sid"))
}

static PROVISION: Once = Once::new();

/// Make sure the sid root exists and has /proc mounted (idempotent; the
/// test command runs the script first anyway, this covers `cargo test`
/// run by hand).
pub fn ensure_sid_root() -> PathBuf {
    PROVISION.call_once(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/provision-sid.sh");
        let st = Command::new("bash")
            .arg(&script)
            .stdout(Stdio::null())
            .status()
            .expect("cannot run scripts/provision-sid.sh");
        assert!(
            st.success(),
            "scripts/provision-sid.sh failed: the sid test interpreters are missing"
        );
    });
    sid_root()
}

/// The six interpreters of the sid root: every one must be there.
pub fn sid_interpreters() -> Vec<Interp> {
    let root = ensure_sid_root();
    let mut v = Vec::new();
    for minor in [13u8, 14, 15] {
        for debug in [false, true] {
            let exe = PathBuf::from(format!(
                "/usr/bin/python3.{minor}{}",
                if debug { "d" } else { "" }
            ));
            let outside = root.join(exe.strip_prefix("/").unwrap());
            assert!(
                outside.exists(),
                "MISSING INTERPRETER: {} (run scripts/provision-sid.sh)",
                outside.display()
            );
            v.push(Interp {
                name: format!("sid-3.{minor}{}", if debug { "d" } else { "" }),
                minor,
                debug,
                root: Some(root.clone()),
                exe,
            });
        }
    }
    v
}

/// The machine's own interpreters that tachyon must read (pyenv 3.13, with
/// the runtime in a shared libpython). A missing one fails the test.
pub fn machine_supported_interpreters() -> Vec<Interp> {
    machine_interpreters(&[("pyenv-3.13", 13, "~/.pyenv/versions/3.13.0/bin/python3.13")])
}

/// The machine's 3.11 and 3.12 interpreters, which have no debug offsets
/// table: tachyon reads them through the layouts it carries. Debian's
/// python3.11 is static (non-PIE), the pyenv ones use a shared libpython.
pub fn machine_old_interpreters() -> Vec<Interp> {
    machine_interpreters(&[
        ("debian-3.11", 11, "/usr/bin/python3.11"),
        ("pyenv-3.11", 11, "~/.pyenv/versions/3.11.7/bin/python3.11"),
        ("pyenv-3.12", 12, "~/.pyenv/versions/3.12.1/bin/python3.12"),
    ])
}

impl Interp {
    /// A free-threaded build (`python3.13t`).
    pub fn free_threaded(&self) -> bool {
        self.exe
            .file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with('t'))
    }
}

/// The free-threaded 3.13 builds (3.13t, PEP 703) that
/// scripts/provision-ft.sh builds inside the sid root: one with a static
/// libpython, one with a shared one. Every one must be there.
pub fn free_threaded_interpreters() -> Vec<Interp> {
    let root = ensure_sid_root();
    let mut v = Vec::new();
    for (name, prefix) in [
        ("ft-3.13t", "/opt/python3.13t"),
        ("ft-3.13t-shared", "/opt/python3.13t-shared"),
    ] {
        let exe = PathBuf::from(format!("{prefix}/bin/python3.13t"));
        let outside = root.join(exe.strip_prefix("/").unwrap());
        assert!(
            outside.exists(),
            "MISSING INTERPRETER: {name} ({}): run scripts/provision-ft.sh",
            outside.display()
        );
        v.push(Interp {
            name: name.to_string(),
            minor: 13,
            debug: false,
            root: Some(root.clone()),
            exe,
        });
    }
    v
}

/// A machine interpreter older than any layout tachyon has (pyenv 3.10),
/// which it must refuse with a message that names its version.
pub fn machine_too_old_interpreters() -> Vec<Interp> {
    machine_interpreters(&[("pyenv-3.10", 10, "~/.pyenv/versions/3.10.13/bin/python3.10")])
}

fn machine_interpreters(list: &[(&str, u8, &str)]) -> Vec<Interp> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let mut v = Vec::new();
    for (name, minor, path) in list {
        let exe = PathBuf::from(path.replace('~', &home));
        // The machine image carries these; a test must not pass by
        // skipping its interpreter.
        assert!(
            exe.exists(),
            "MISSING INTERPRETER: {name} ({}) is not on this machine",
            exe.display()
        );
        v.push(Interp {
            name: name.to_string(),
            minor: *minor,
            debug: false,
            root: None,
            exe,
        });
    }
    v
}

/// A running target process. Killed and reaped on drop, whatever happens.
pub struct Target {
    pub child: Child,
    pub interp: Interp,
    /// The script's directory as seen from outside (for cleanup).
    dir: PathBuf,
    lines: mpsc::Receiver<String>,
}

impl Target {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Wait for the next stdout line from the target.
    pub fn next_line(&self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Wait for a line starting with `prefix`; panics with the target's
    /// stderr if it does not come.
    pub fn wait_for(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return l,
                Ok(_) => continue,
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        let out = self.child.wait_with_output_ref();
        panic!(
            "{}: target never printed {prefix:?}; stderr:\n{out}",
            self.interp.name
        );
    }

    /// A path inside the target's filesystem for a file in its directory.
    pub fn outside_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

trait WaitRef {
    fn wait_with_output_ref(&mut self) -> String;
}

impl WaitRef for Child {
    fn wait_with_output_ref(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut s = String::new();
        if let Some(e) = self.stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A name no other directory of this test process has:
/// `tachyon-KIND-PID-N`.
fn unique_name(kind: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "tachyon-{kind}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Start `script` (Python source) under `interp` with `args`. Files in
/// `extra` (name, contents) are written beside it. The script is written
/// inside the interpreter's root so it runs there exactly as a containerised
/// program would; stdout is line-buffered back to the test.
pub fn spawn(interp: &Interp, script: &str, extra: &[(&str, &str)], args: &[&str]) -> Target {
    spawn_with_options(interp, &[], script, extra, args)
}

/// [`spawn`], with options for the interpreter itself (`-X gil=1`) before
/// the script.
pub fn spawn_with_options(
    interp: &Interp,
    options: &[&str],
    script: &str,
    extra: &[(&str, &str)],
    args: &[&str],
) -> Target {
    let name = unique_name("test");
    let (dir, inside_dir) = match &interp.root {
        Some(root) => (
            root.join("tmp").join(&name),
            PathBuf::from("/tmp").join(&name),
        ),
        None => {
            let d = std::env::temp_dir().join(&name);
            (d.clone(), d)
        }
    };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("target.py"), script).unwrap();
    for (n, c) in extra {
        std::fs::write(dir.join(n), c).unwrap();
    }
    let script_inside = inside_dir.join("target.py");
    let mut cmd = match &interp.root {
        Some(root) => {
            let mut c = Command::new("chroot");
            c.arg(root).arg(&interp.exe);
            c
        }
        None => Command::new(&interp.exe),
    };
    cmd.arg("-u").args(options).arg(&script_inside).args(args);
    cmd.env("PYTHONDONTWRITEBYTECODE", "1");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", interp.name));
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Target {
        child,
        interp: interp.clone(),
        dir,
        lines: rx,
    }
}

/// The interpreter's own `(major, minor, micro)`, asked of it: the sid root
/// follows Debian's current micro release, so tests never name one.
pub fn version_of(interp: &Interp) -> (u8, u8, u8) {
    let mut cmd = match &interp.root {
        Some(root) => {
            let mut c = Command::new("chroot");
            c.arg(root).arg(&interp.exe);
            c
        }
        None => Command::new(&interp.exe),
    };
    let out = cmd
        .args(["-c", "import sys; print(*sys.version_info[:3])"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", interp.name));
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u8> = text
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(v.len(), 3, "{}: version {text:?}", interp.name);
    (v[0], v[1], v[2])
}

/// Path of the built `tachyon` binary.
pub fn tachyon_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tachyon"))
}

/// Run tachyon with `args` in `cwd` (no input) and return its standard
/// output; fails the test, with both outputs, when tachyon fails.
pub fn tachyon_ok(args: &[&str], cwd: &Path) -> String {
    let out = Command::new(tachyon_bin())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("cannot run tachyon");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        out.status.success(),
        "tachyon {} failed ({}):\n{}\n{}",
        args.join(" "),
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A directory inside the sid root (so the chrooted interpreter sees it),
/// removed on drop.
pub struct RootDir {
    pub outside: PathBuf,
    pub inside: PathBuf,
}

impl RootDir {
    pub fn new(files: &[(&str, &str)]) -> RootDir {
        let name = unique_name("test-root");
        let outside = sid_root().join("tmp").join(&name);
        std::fs::create_dir_all(&outside).unwrap();
        for (n, c) in files {
            std::fs::write(outside.join(n), c).unwrap();
        }
        RootDir {
            outside,
            inside: Path::new("/tmp").join(name),
        }
    }
    pub fn inside(&self, f: &str) -> String {
        self.inside.join(f).to_string_lossy().into_owned()
    }
    pub fn outside(&self, f: &str) -> PathBuf {
        self.outside.join(f)
    }
}

impl Drop for RootDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.outside);
    }
}

/// A fresh directory of the test's own below the system's temporary
/// directory (`tachyon-test-TAG-PID-N`), removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(unique_name(&format!("test-{tag}")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A started command whose output two threads collect. On drop (and when
/// `finish` times out) it and every process below it are killed: all
/// started by the test.
pub struct Running {
    pub child: Child,
    what: String,
    own_group: bool,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Running {
    /// Start `cmd` in a process group of its own.
    pub fn start(cmd: Command) -> Running {
        Running::spawn(cmd, true)
    }

    /// Start `cmd` in the test's process group, as a terminal would run it
    /// (what reaches tachyon's group, reaches it).
    pub fn start_in_test_group(cmd: Command) -> Running {
        Running::spawn(cmd, false)
    }

    fn spawn(mut cmd: Command, own_group: bool) -> Running {
        use std::io::Read;
        use std::os::unix::process::CommandExt;
        let what = format!("{cmd:?}");
        if own_group {
            cmd.process_group(0);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let reader = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        };
        let out = reader(Box::new(child.stdout.take().unwrap()));
        let err = reader(Box::new(child.stderr.take().unwrap()));
        Running {
            child,
            what,
            own_group,
            out: Some(out),
            err: Some(err),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Kill the command and everything below it.
    pub fn kill_all(&mut self) {
        use nix::sys::signal::{Signal, kill, killpg};
        use nix::unistd::Pid;
        if self.own_group {
            let _ = killpg(Pid::from_raw(self.pid()), Signal::SIGKILL);
        }
        for p in descendants(self.pid()).into_iter().rev() {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        let _ = self.child.kill();
    }

    /// Wait for the command to end (killing it after `timeout`).
    pub fn finish(mut self, timeout: Duration) -> std::process::Output {
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        let deadline = std::time::Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                self.kill_all();
                let _ = self.child.wait();
                let out = text(self.out.take().unwrap().join().unwrap());
                let err = text(self.err.take().unwrap().join().unwrap());
                panic!(
                    "{} did not finish in {timeout:?}\nstdout:\n{out}\nstderr:\n{err}",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        std::process::Output {
            status,
            stdout: self.out.take().unwrap().join().unwrap(),
            stderr: self.err.take().unwrap().join().unwrap(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill_all();
        let _ = self.child.wait();
    }
}

/// The value of `name="..."` in the `<body>` tag of a dumped DOM.
pub fn body_attr(dom: &str, name: &str) -> Option<String> {
    let start = dom.find("<body")?;
    let tag = &dom[start..start + dom[start..].find('>')?];
    let pat = format!(" {name}=\"");
    let at = tag.find(&pat)? + pat.len();
    Some(tag[at..at + tag[at..].find('"')?].to_string())
}

/// The data a flame graph page embeds (its `<script id="data">`).
pub fn flame_data(html: &str) -> serde_json::Value {
    const OPEN: &str = "<script id=\"data\" type=\"application/json\">";
    let start = html.find(OPEN).expect("embedded data") + OPEN.len();
    let len = html[start..].find("</script>").expect("data ends");
    serde_json::from_str(&html[start..start + len]).expect("data is JSON")
}

/// With `TACHYON_SCREENSHOTS=DIR`, keep a screenshot there to look at.
pub fn keep_screenshot(shot: &Path, name: &str) {
    if let Some(dir) = std::env::var_os("TACHYON_SCREENSHOTS") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(shot, Path::new(&dir).join(name)).unwrap();
    }
}

/// Headless Chromium on `url` (a 1400×900 window): the DOM after the
/// page's scripts ran, or a screenshot. Fails on any console error, and
/// when Chromium is missing or takes over a minute.
pub fn chromium(url: &str, screenshot: Option<&Path>) -> String {
    let profile = std::env::temp_dir().join(unique_name("chromium"));
    let _ = std::fs::remove_dir_all(&profile);
    let mut cmd = Command::new("/usr/bin/chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1400,900",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    match screenshot {
        Some(p) => cmd.arg(format!("--screenshot={}", p.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out_path = profile.with_extension("out");
    let err_path = profile.with_extension("err");
    let mut child = cmd
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("MISSING TOOL: /usr/bin/chromium");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within a minute on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let dom = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&profile);
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    assert!(status.success(), "chromium failed on {url}: {err}");
    for bad in ["Uncaught", "ERROR:CONSOLE", ":CONSOLE("] {
        assert!(!err.contains(bad), "console error on {url}:\n{err}");
    }
    dom
}

/// Tests that start many CPU-bound processes (pools, bursts of forks) run
/// one at a time within a test binary, so that on a loaded 2-core machine
/// the profiler's threads are not starved by another test's workers.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes of a process's output as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The release builds among `interps`.
pub fn release(interps: Vec<Interp>) -> Vec<Interp> {
    interps.into_iter().filter(|i| !i.debug).collect()
}

/// Where `scripts/provision-tools.sh` installed the third-party tools.
pub fn tools() -> PathBuf {
    std::env::var_os("TACHYON_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/tachyon/tools"))
}

/// The standard output of a command that must have succeeded (`what` names
/// it in the failure, with both outputs).
pub fn ok(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Check speedscope files against speedscope's own schema (its npm
/// package), with ajv.
pub fn validate_speedscope(files: &[&Path]) -> String {
    let node_dir = tools().join("node");
    assert!(
        node_dir
            .join("node_modules/speedscope/dist/release/file-format-schema.json")
            .exists()
            && node_dir.join("node_modules/ajv").exists(),
        "MISSING TOOL: speedscope and ajv in {} (run scripts/provision-tools.sh)",
        node_dir.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/validate-speedscope.js");
    let out = Command::new("node")
        .arg(script)
        .arg(&node_dir)
        .args(files)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("MISSING TOOL: node ({e}; run scripts/provision-tools.sh)"));
    ok(out, "the speedscope schema check")
}

/// Check JSON files against the schema at `schema` (a path from the
/// project's root), with ajv.
pub fn validate_schema(schema: &str, files: &[&Path]) -> String {
    let node_dir = tools().join("node");
    assert!(
        node_dir.join("node_modules/ajv").exists(),
        "MISSING TOOL: ajv in {} (run scripts/provision-tools.sh)",
        node_dir.display()
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("node")
        .arg(root.join("tests/tools/validate-schema.js"))
        .arg(&node_dir)
        .arg(root.join(schema))
        .args(files)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("MISSING TOOL: node ({e}; run scripts/provision-tools.sh)"));
    ok(out, &format!("the check against {schema}"))
}

/// `go tool pprof ARGS FILE`: its standard output.
pub fn go_pprof(args: &[&str], file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("PPROF_TMPDIR", std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "MISSING TOOL: go ({e}; run scripts/provision-tools.sh, which installs golang-go)"
            )
        });
    ok(out, &format!("go tool pprof {}", args.join(" ")))
}

/// Run `cmd` (no input) to its end; its standard output, or fail the test
/// (`who` names it) with both outputs.
pub fn run_ok(who: &str, cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {who}: {e}"));
    ok(out, who)
}

/// Make a core of the running `t` with gdb's `gcore`, beside its script.
/// A sid interpreter's core is made by the sid root's own gdb: Debian 12's
/// gdb cannot read the thread stacks that sid's glibc guards with
/// `MADV_GUARD_INSTALL`, and writes them as zeros. Its file notes then
/// name the files as the root sees them (`--sysroot` finds them).
pub fn gcore(t: &Target) -> PathBuf {
    let pid = t.pid();
    let prefix = t.outside_path("core");
    let mut cmd = match &t.interp.root {
        Some(root) => {
            assert!(
                root.join("usr/bin/gcore").exists(),
                "MISSING TOOL: gdb in the sid root (run scripts/provision-sid.sh)"
            );
            let inside = Path::new("/").join(prefix.strip_prefix(root).unwrap());
            let mut c = Command::new("chroot");
            c.arg(root).arg("gcore").arg("-o").arg(inside);
            c
        }
        None => {
            let mut c = Command::new("gcore");
            c.arg("-o").arg(&prefix);
            c
        }
    };
    run_ok("gcore", cmd.arg(pid.to_string()));
    prefix.with_file_name(format!("core.{pid}"))
}

/// `--sysroot` for a core of `it`'s processes.
pub fn sysroot_args(it: &Interp) -> Vec<String> {
    match &it.root {
        Some(root) => vec!["--sysroot".into(), root.to_string_lossy().into_owned()],
        None => Vec::new(),
    }
}
