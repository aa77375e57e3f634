//! `--live` driven as a user would: in a real terminal (a detached tmux
//! session of a fixed size), with keys sent to it and the screen read
//! back. Every wait polls the screen with a generous timeout; nothing
//! asserts a time or an absolute rate.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{RootDir, descendants, sid_interpreters, sid_root, tachyon_bin};

/// The main thread spins in `hot_main`; a worker thread alternates between
/// `worker_a` and `worker_b`. In wall mode both threads are in every
/// sample, so `hot_main` has about twice the self samples of either worker
/// function: the hottest row of all threads, absent from the worker's.
const WORKLOAD: &str = r#"
import threading, time, sys

def worker_a():
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        pass

def worker_b():
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        pass

def worker(stop):
    while not stop.is_set():
        worker_a()
        worker_b()

def hot_main(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

stop = threading.Event()
t = threading.Thread(target=worker, args=(stop,))
t.start()
hot_main(float(sys.argv[1]))
stop.set()
t.join()
"#;

/// The tests of this file one at a time: each keeps two threads of Python
/// busy, and the rate test's comparison should not depend on what the
/// others happen to run beside it.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A detached tmux session on a server of its own (so nothing of anyone
/// else's is touched), killed with everything in it on drop.
struct Tmux {
    socket: String,
    pane_pid: i32,
}

impl Tmux {
    /// Start `shell_command` in a `w`x`h` terminal.
    fn start(shell_command: &str, w: u16, h: u16) -> Tmux {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let socket = format!(
            "tachyon-live-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let st = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", &w.to_string(), "-y", &h.to_string()])
            .arg(shell_command)
            .stdin(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("MISSING TOOL: tmux ({e}); apt-get install tmux"));
        assert!(st.success(), "tmux new-session failed");
        let mut t = Tmux {
            socket,
            pane_pid: 0,
        };
        t.pane_pid = t
            .tmux(&["display-message", "-p", "#{pane_pid}"])
            .trim()
            .parse()
            .expect("the pane's pid");
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen as text.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Poll the screen until `ok` holds; panics with the screen if it does
    /// not within `timeout`.
    fn wait_for(&self, what: &str, timeout: Duration, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Once `ok` holds on the running view: pause the display (`p`), read
    /// it once it is still (two captures alike: a capture taken during a
    /// redraw mixes two screens), resume (`p`) and return what was read.
    fn still(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let timeout = Duration::from_secs(20);
        self.wait_for(what, timeout, &ok);
        self.keys(&["p"]);
        let deadline = Instant::now() + timeout;
        let s = loop {
            let a = self.screen();
            std::thread::sleep(Duration::from_millis(250));
            let b = self.screen();
            if a == b && a.contains("[PAUSED]") {
                break a;
            }
            assert!(
                Instant::now() < deadline,
                "the paused view never stood still ({what}):\n{b}"
            );
        };
        assert!(ok(&s), "{what}: no longer so once paused:\n{s}");
        self.keys(&["p"]);
        self.wait_for("the display to resume", timeout, |s| {
            !s.contains("[PAUSED]")
        });
        s
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        for p in descendants(self.pane_pid).into_iter().rev() {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        self.tmux(&["kill-server"]);
    }
}

/// `chroot ROOT python3.15 w.py SECONDS`, as shell words.
fn python_target(dir: &RootDir, seconds: &str) -> String {
    format!(
        "chroot {} {} {} {seconds}",
        sid_root().display(),
        python315().display(),
        dir.inside("w.py")
    )
}

fn python315() -> std::path::PathBuf {
    sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("sid python3.15")
        .exe
}

/// A shell command that runs `tachyon run ARGS -- TARGET` in `dir` (its
/// PID in `dir/tachyon.pid`), then prints its exit status and whether the
/// terminal is back in canonical mode, and waits to be read.
fn shell_command(dir: &RootDir, args: &[&str], target: &str) -> String {
    format!(
        "cd {}; sh -c 'echo $$ > tachyon.pid; exec \"$0\" \"$@\"' {} run {} -- {target}; echo TACHYON-EXIT=$?; echo TTY-MODE=$(stty -a | grep -o -- '-\\?icanon'); sleep 600",
        dir.outside.display(),
        tachyon_bin().display(),
        args.join(" "),
    )
}

/// The table's rows: the lines after the column header, up to the footer.
fn rows(screen: &str) -> Vec<&str> {
    screen
        .lines()
        .skip_while(|l| !l.contains("file:line"))
        .skip(1)
        .take_while(|l| !l.starts_with("nsamples:"))
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// Each row's self and cumulative samples (its first column, `self/cum`).
fn counts(screen: &str) -> Vec<(u64, u64)> {
    rows(screen)
        .iter()
        .filter_map(|r| {
            let (a, b) = r.split_whitespace().next()?.split_once('/')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

/// Is `v` in non-increasing order?
fn descending(v: impl IntoIterator<Item = u64>) -> bool {
    let v: Vec<u64> = v.into_iter().collect();
    v.windows(2).all(|w| w[0] >= w[1])
}

/// The function column of the first row.
fn first_function(screen: &str) -> Option<String> {
    let row = rows(screen).into_iter().next()?;
    row.split_whitespace()
        .find(|w| {
            w.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '<')
        })
        .map(str::to_string)
}

/// The view's header line (the first line of the screen).
fn header(screen: &str) -> &str {
    screen.lines().next().unwrap_or("")
}

/// After tachyon exits: its status, and the terminal's mode.
fn after_exit(t: &Tmux) -> (String, i32) {
    let s = t.wait_for("tachyon to exit", Duration::from_secs(60), |s| {
        s.contains("TTY-MODE=")
    });
    let code = s
        .lines()
        .find_map(|l| l.strip_prefix("TACHYON-EXIT="))
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(-1);
    (s, code)
}

/// The terminal is given back: the view is gone (main screen), the shell
/// runs on, the mode is canonical again (raw mode shows `-icanon`).
fn assert_restored(s: &str) {
    assert!(
        s.contains("TTY-MODE=icanon"),
        "terminal left in raw mode:\n{s}"
    );
    assert!(
        !s.contains("tachyon live │"),
        "the view is still on screen (alternate screen not left):\n{s}"
    );
    assert!(s.contains("Captured "), "no summary after the view:\n{s}");
}

#[test]
fn the_view_shows_the_hottest_function_sorts_switches_threads_and_quits() {
    let _serial = serial();
    let dir = RootDir::new(&[("w.py", WORKLOAD)]);
    let target = python_target(&dir, "120");
    let t = Tmux::start(&shell_command(&dir, &["--live", "-a"], &target), 160, 45);
    t.wait_for("the view", Duration::from_secs(60), |s| {
        s.contains("worker_a")
    });
    let s = t.still("hot_main as the hottest row", |s| {
        first_function(s).as_deref() == Some("hot_main")
    });
    assert!(header(&s).contains("Thread: ALL"), "{s}");
    assert!(
        s.contains("▼nsamples") && s.contains("Sort: Self samples"),
        "{s}"
    );
    assert!(descending(counts(&s).iter().map(|c| c.0)), "{s}");
    let pid: u32 = header(&s)
        .split("PID: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no PID in the header:\n{s}"));

    // A sort key: the marked column and the footer change.
    t.keys(&["s"]);
    let s = t.still("the sort to change", |s| s.contains("Sort: Self %"));
    assert!(!s.contains("▼nsamples") && s.contains("▼%"), "{s}");
    // On to cumulative time: rows in cumulative order, callers (with no
    // self samples) among the first.
    t.keys(&["s", "s", "s"]);
    let s = t.still("cumulative sort", |s| {
        s.contains("Sort: Cumulative time") && s.contains("▼cumtime")
    });
    let c = counts(&s);
    assert!(descending(c.iter().map(|c| c.1)), "{s}");
    assert!(
        !descending(c.iter().map(|c| c.0)),
        "still in self order:\n{s}"
    );

    // The main thread alone (first seen, its tid is the PID, its name
    // threading's): hot_main, no worker function.
    t.keys(&["S", "S", "S", "S", "Right"]);
    let main = format!("Thread: {pid} MainThread (1/");
    let s = t.still("the main thread's view", |s| {
        header(s).contains(&main) && s.contains("Sort: Self samples")
    });
    assert_eq!(first_function(&s).as_deref(), Some("hot_main"), "{s}");
    assert!(!rows(&s).iter().any(|r| r.contains("worker_")), "{s}");

    // The worker: its functions, no hot_main.
    t.keys(&["Right"]);
    let s = t.still("the worker's view", |s| header(s).contains("(2/"));
    let first = first_function(&s).unwrap_or_default();
    assert!(first.starts_with("worker_"), "{s}");
    assert!(!rows(&s).iter().any(|r| r.contains("hot_main")), "{s}");

    // (Each view above was read paused: p froze the display and resumed
    // it.) Help, closed by any key; then q quits, with exit status 0 though
    // the program was still running, and gives the terminal back.
    t.keys(&["h"]);
    t.wait_for("the help", Duration::from_secs(10), |s| {
        s.contains("tachyon live view: keys")
    });
    t.keys(&["x", "q"]);
    let (s, code) = after_exit(&t);
    assert_eq!(code, 0, "{s}");
    assert_restored(&s);
    assert!(!s.contains("Interrupted"), "q is no interruption:\n{s}");
}

/// The percentages of the "Top 3:" line.
fn top_shares(screen: &str) -> Vec<(String, f64)> {
    let Some(line) = screen.lines().find_map(|l| l.strip_prefix("Top 3: ")) else {
        return Vec::new();
    };
    line.split(" │ ")
        .filter_map(|e| {
            let (name, rest) = e.trim().split_once(". ")?.1.rsplit_once(" (")?;
            Some((name.to_string(), rest.strip_suffix("%)")?.parse().ok()?))
        })
        .collect()
}

/// The percentages of the thread list.
fn thread_shares(screen: &str) -> Vec<f64> {
    screen
        .lines()
        .filter_map(|l| {
            l.split_once("% of ")
                .filter(|(_, after)| after.contains("samples"))
        })
        .filter_map(|(before, _)| before.split_whitespace().last()?.parse().ok())
        .collect()
}

#[test]
fn with_all_threads_in_wall_mode_the_shares_add_up_and_a_function_is_listed_once() {
    let _serial = serial();
    let dir = RootDir::new(&[("w.py", WORKLOAD)]);
    let target = python_target(&dir, "120");
    let t = Tmux::start(&shell_command(&dir, &["--live", "-a"], &target), 160, 45);
    // Both threads are in every sample: each function's share is of the
    // two threads' samples, and each thread's too, so neither reads 100%.
    let s = t.still("the top functions and both threads", |s| {
        top_shares(s).len() == 3 && thread_shares(s).len() == 2
    });
    let top = top_shares(&s);
    let total: f64 = top.iter().map(|(_, p)| p).sum();
    assert!(total <= 100.5, "the top shares add up to {total}%:\n{s}");
    let names: Vec<&str> = top.iter().map(|(n, _)| n.as_str()).collect();
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(names.len(), unique.len(), "a function twice:\n{s}");
    let threads = thread_shares(&s);
    assert!(
        threads.iter().all(|&p| p < 99.0) && (threads.iter().sum::<f64>() - 100.0).abs() < 0.5,
        "thread shares {threads:?}:\n{s}"
    );
    // 3.15 says whether a thread waits for the GIL.
    assert!(!s.contains("n/a waiting for GIL"), "{s}");
    t.keys(&["q"]);
    let (s, code) = after_exit(&t);
    assert_eq!(code, 0, "{s}");
}

#[test]
fn on_python_3_12_waiting_for_the_gil_is_not_known_and_says_so() {
    let _serial = serial();
    let py312 = common::machine_old_interpreters()
        .into_iter()
        .find(|i| i.minor == 12)
        .expect("pyenv python3.12");
    // Attached: `run` of a 3.12 is slow to find its interpreter in a
    // debug build, which this test is not about.
    let target = common::spawn(&py312, WORKLOAD, &[], &["120"]);
    let command = format!(
        "{} attach --live {}; echo TACHYON-EXIT=$?; echo TTY-MODE=$(stty -a | grep -o -- '-\\?icanon'); sleep 600",
        tachyon_bin().display(),
        target.pid()
    );
    let t = Tmux::start(&command, 160, 45);
    let s = t.still("the threads line", |s| {
        s.contains("waiting for GIL") && s.contains("hot_main")
    });
    assert!(s.contains("n/a waiting for GIL"), "{s}");
    t.keys(&["q"]);
    let (s, code) = after_exit(&t);
    assert_eq!(code, 0, "{s}");
    drop(target);
}

#[test]
fn the_final_view_stays_after_the_target_exits_and_the_file_is_written() {
    let _serial = serial();
    let dir = RootDir::new(&[("w.py", WORKLOAD)]);
    let t = Tmux::start(
        &shell_command(
            &dir,
            &["--live", "--collapsed", "-o", "out.txt"],
            &python_target(&dir, "1.5"),
        ),
        120,
        30,
    );
    let s = t.wait_for("the end of the target", Duration::from_secs(60), |s| {
        s.contains("PROFILING COMPLETE: the target exited")
    });
    assert!(s.contains("hot_main"), "{s}");
    // It stays until a key: still there a second later.
    std::thread::sleep(Duration::from_secs(1));
    let s = t.screen();
    assert!(
        s.contains("PROFILING COMPLETE"),
        "the view left by itself:\n{s}"
    );
    // Resizing redraws; too small a terminal gets a message, and the view
    // comes back when it grows again.
    t.tmux(&["resize-window", "-x", "40", "-y", "10"]);
    t.wait_for("the too-small message", Duration::from_secs(10), |s| {
        s.contains("Terminal too small") && s.contains("40x10")
    });
    t.tmux(&["resize-window", "-x", "120", "-y", "30"]);
    t.wait_for("the view again", Duration::from_secs(10), |s| {
        s.contains("PROFILING COMPLETE") && s.contains("hot_main")
    });
    // Ctrl-C arrives as a key in raw mode, and quits like q.
    t.keys(&["C-c"]);
    let (s, code) = after_exit(&t);
    assert_eq!(code, 0, "the program's own status:\n{s}");
    assert_restored(&s);
    assert!(s.contains("Collapsed stack output written to"), "{s}");
    let collapsed = std::fs::read_to_string(dir.outside("out.txt")).expect("out.txt");
    assert!(collapsed.contains("hot_main"), "{collapsed}");
}

#[test]
fn sigterm_restores_the_terminal_and_shows_the_messages_held_meanwhile() {
    let _serial = serial();
    // A command running two Python programs in turn: the profile follows
    // into the second, and says so on standard error, under the view.
    let dir = RootDir::new(&[("w.py", WORKLOAD)]);
    let py = python315().display().to_string();
    let w = dir.inside("w.py");
    let target = format!(
        "chroot {} sh -c \"{py} {w} 0.5; {py} {w} 120\"",
        sid_root().display()
    );
    let args = ["--live", "--collapsed", "-o", "out.txt"];
    let t = Tmux::start(&shell_command(&dir, &args, &target), 140, 40);
    let s = t.wait_for("the view", Duration::from_secs(60), |s| {
        s.contains("tachyon live │")
    });
    let first_pid = header(&s)
        .split("PID: ")
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string();
    t.wait_for(
        "the second program in the view",
        Duration::from_secs(60),
        |s| s.contains("tachyon live │") && !header(s).contains(&format!("PID: {first_pid} ")),
    );
    let pid: i32 = std::fs::read_to_string(dir.outside("tachyon.pid"))
        .expect("tachyon.pid")
        .trim()
        .parse()
        .expect("a pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM to tachyon");
    let (s, _) = after_exit(&t);
    assert_restored(&s);
    assert!(s.contains("Interrupted by user."), "{s}");
    assert!(
        s.contains(&format!(
            "process {first_pid} exited; following Python process"
        )),
        "the message held under the view is not shown:\n{s}"
    );
    let collapsed = std::fs::read_to_string(dir.outside("out.txt")).expect("out.txt");
    assert!(collapsed.contains("hot_main"), "{collapsed}");
}

/// One function whose hottest line does integer additions (specialised
/// to `BINARY_OP_ADD_INT` once warm) and stores the sum: with `--opcodes`
/// its row's panel lists the instructions of that line.
const ADDING: &str = r#"
import sys, time

def spin(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while x >= 0:
        x = x + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1
        if x % 800000 == 0 and time.perf_counter() > end:
            break
    return x

spin(float(sys.argv[1]))
"#;

/// The location the instruction panel is about (`spin at /…/w.py:7`),
/// when there is a panel.
fn panel_location(screen: &str) -> Option<String> {
    let title = screen
        .lines()
        .find_map(|l| l.strip_prefix("─── Opcodes of "))?;
    Some(title.split(" (").next()?.trim().to_string())
}

/// The instructions the panel lists, as named on screen.
fn panel_ops(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|l| !l.starts_with("─── Opcodes of "))
        .skip(1)
        .take_while(|l| l.starts_with("  ["))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_once("] ")?.1.split_whitespace().collect();
            // The name, then the share and the samples.
            (words.len() > 2).then(|| words[..words.len() - 2].join(" "))
        })
        .collect()
}

#[test]
fn with_opcodes_a_selected_row_shows_the_instructions_its_line_ran() {
    let _serial = serial();
    let dir = RootDir::new(&[("w.py", ADDING)]);
    let hot = ADDING
        .lines()
        .position(|l| l.contains("x = x + 1"))
        .expect("the hot line")
        + 1;
    let on_hot = |s: &str| panel_location(s).is_some_and(|l| l.ends_with(&format!("w.py:{hot}")));
    let target = python_target(&dir, "120");
    let t = Tmux::start(
        &shell_command(&dir, &["--live", "--opcodes"], &target),
        160,
        45,
    );
    // At first the top row is selected: the hot line, once it leads, with
    // its specialised addition and its store among its instructions (each
    // listed once a sample has caught the line there: on a busy machine
    // the store may take a few hundred samples).
    let warm = |s: &str| {
        let ops = panel_ops(s);
        on_hot(s)
            && ops.iter().any(|n| n == "BINARY_OP_ADD_INT (BINARY_OP)")
            && ops.iter().any(|n| n.starts_with("STORE_FAST"))
    };
    t.wait_for("the hot line's instructions", Duration::from_secs(60), warm);
    let s = t.still("the hot line's instructions", warm);
    assert!(s.contains("j/k row"), "{s}");
    // Every instruction listed is one that line runs: loads of x and of
    // the constant, the additions, the store.
    let ops = panel_ops(&s);
    let family = [
        "LOAD_FAST",
        "LOAD_SMALL_INT",
        "LOAD_CONST",
        "BINARY_OP",
        "STORE_FAST",
    ];
    for name in &ops {
        assert!(
            family.iter().any(|f| name.starts_with(f)),
            "{name} is not an instruction of the hot line:\n{s}"
        );
    }

    // j selects the next row: the panel is about another location, one
    // of the table's rows.
    t.keys(&["j"]);
    let s = t.still("another row's panel", |s| {
        panel_location(s).is_some() && !on_hot(s)
    });
    let other = panel_location(&s).unwrap_or_default();
    let (func, at) = other.split_once(" at ").unwrap_or_default();
    let tail = at.rsplit('/').next().unwrap_or(at);
    assert!(
        rows(&s)
            .iter()
            .any(|r| r.contains(func) && r.contains(tail)),
        "{other} is not a row of the table:\n{s}"
    );
    // ↑ goes back up to the top row, ↓ down again.
    t.keys(&["Up"]);
    t.wait_for("the hot line again", Duration::from_secs(30), on_hot);
    t.keys(&["Down"]);
    t.wait_for("another row again", Duration::from_secs(30), |s| {
        panel_location(s).is_some() && !on_hot(s)
    });
    t.keys(&["q"]);
    let (s, code) = after_exit(&t);
    assert_eq!(code, 0, "{s}");
    assert_restored(&s);
}

#[test]
fn without_opcodes_there_is_no_panel_and_j_does_nothing() {
    let _serial = serial();
    let dir = RootDir::new(&[("w.py", ADDING)]);
    let target = python_target(&dir, "120");
    let t = Tmux::start(&shell_command(&dir, &["--live"], &target), 160, 45);
    t.wait_for("the view", Duration::from_secs(60), |s| {
        first_function(s).as_deref() == Some("spin")
    });
    t.keys(&["j", "Down", "k"]);
    let s = t.still("the view after j, ↓ and k", |s| {
        first_function(s).as_deref() == Some("spin")
    });
    assert!(
        !s.contains("Opcodes") && !s.contains("j/k row"),
        "a panel without --opcodes:\n{s}"
    );
    assert!(
        panel_location(&s).is_none() && panel_ops(&s).is_empty(),
        "{s}"
    );
    t.keys(&["q"]);
    let (s, code) = after_exit(&t);
    assert_eq!(code, 0, "{s}");
    assert_restored(&s);
}

/// `Sample rate: R samples/sec` from the summary on screen.
fn sample_rate(s: &str) -> f64 {
    s.lines()
        .find_map(|l| l.strip_prefix("Sample rate: "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no sample rate in:\n{s}"))
}

/// One 3-second run at 1 kHz, in a terminal, with or without the view.
fn rate_of_run(live: bool) -> f64 {
    let dir = RootDir::new(&[("w.py", WORKLOAD)]);
    // A file, not the table: the summary stays on the screen.
    let mut args = vec!["-a", "-r", "1khz", "-d", "3", "--collapsed", "-o", "c.txt"];
    if live {
        args.push("--live");
    }
    let t = Tmux::start(
        &shell_command(&dir, &args, &python_target(&dir, "30")),
        140,
        40,
    );
    if live {
        t.wait_for("the end of the duration", Duration::from_secs(60), |s| {
            s.contains("PROFILING COMPLETE: the duration is over")
        });
        // Enter leaves the final view too.
        t.keys(&["Enter"]);
    }
    let (s, code) = after_exit(&t);
    assert_eq!(code, 0, "{s}");
    sample_rate(&s)
}

#[test]
fn the_view_costs_the_sampler_no_rate() {
    let _serial = serial();
    // The best of three runs each, alternated, so a passing burst of load
    // on the machine does not decide. The bound is tolerant: on a machine
    // whose cores are all busy, drawing (the view's thread, the terminal)
    // takes CPU the sampler would otherwise get, whatever the design; a
    // sampler that waited on the view would lose far more.
    let mut plain: f64 = 0.0;
    let mut live: f64 = 0.0;
    for _ in 0..3 {
        plain = plain.max(rate_of_run(false));
        live = live.max(rate_of_run(true));
    }
    eprintln!("best rate with --live {live:.1} samples/s, without {plain:.1}");
    assert!(
        live >= 0.85 * plain,
        "with --live {live:.1} samples/s, without {plain:.1} samples/s"
    );
}

#[test]
fn without_a_terminal_it_is_refused_before_anything_starts() {
    let _serial = serial();
    sid_interpreters();
    let dir = RootDir::new(&[("w.py", WORKLOAD)]);
    let out = Command::new(tachyon_bin())
        .current_dir(Path::new(&dir.outside))
        .args(["run", "--live", "--"])
        .arg("chroot")
        .arg(sid_root())
        .args(["/usr/bin/python3.15", &dir.inside("w.py"), "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("tachyon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--live") && err.contains("needs a terminal"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // Nothing was sampled (a run would end with its summary).
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// An asyncio program whose busy task holds the GIL all the time.
const ASYNC_WORKLOAD: &str = r#"
import asyncio, sys, time

async def crunch():
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        x = 0
        for i in range(20000):
            x += i
        await asyncio.sleep(0)

async def main():
    await asyncio.gather(crunch(), asyncio.sleep(0.01))

asyncio.run(main())
"#;

#[test]
fn with_async_aware_the_view_shows_tasks_and_no_made_up_thread_states() {
    let _serial = serial();
    let dir = RootDir::new(&[("w.py", ASYNC_WORKLOAD)]);
    let t = Tmux::start(
        &shell_command(
            &dir,
            &["--live", "--async-aware"],
            &python_target(&dir, "60"),
        ),
        140,
        30,
    );
    // The busy task's own frame, under its task, in the table.
    let s = t.wait_for("the busy task's rows", Duration::from_secs(60), |s| {
        s.contains("crunch") && s.contains("<task>")
    });
    // Task samples carry no GIL state: the header says so rather than
    // showing the busy thread as having released the GIL all along.
    let threads = s
        .lines()
        .find(|l| l.starts_with("Threads:"))
        .unwrap_or_default()
        .to_string();
    assert!(
        threads.contains("not read with --async-aware") && !threads.contains("released GIL"),
        "{s}"
    );
    assert!(!s.contains("released GIL"), "a thread row says so:\n{s}");
    t.keys(&["q"]);
    let (s, code) = after_exit(&t);
    assert_eq!(code, 0, "{s}");
    assert_restored(&s);
}
