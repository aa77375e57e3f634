//! `tachyon run` and `tachyon attach` end to end, on real interpreters: the
//! seed's worked examples (report.py, pool.py) must lead to the same
//! conclusions as the reference, and every way a run can end (exit code,
//! Ctrl-C, SIGKILL, early exit, a missing script) must give a sensible
//! result and a written profile.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Interp, RootDir, collapsed, sid_interpreters, sid_root, tachyon_bin, text};

const REPORT: &str = include_str!("../fixtures/programs/report.py");
const POOL: &str = include_str!("../fixtures/programs/pool.py");

fn release(minor: u8) -> Interp {
    sid_interpreters()
        .into_iter()
        .find(|i| i.minor == minor && !i.debug)
        .unwrap()
}

/// `tachyon <args> -- chroot ROOT python script`, in `cwd`.
fn run_in_root(interp: &Interp, tachyon_args: &[&str], script: &str, cwd: &Path) -> Output {
    Command::new(tachyon_bin())
        .arg("run")
        .args(tachyon_args)
        .arg("--")
        .arg("chroot")
        .arg(sid_root())
        .arg(&interp.exe)
        .arg(script)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("cannot run tachyon")
}

#[derive(Debug)]
struct Row {
    direct: u64,
    cumulative: u64,
    tottime_s: f64,
    key: String,
}

/// Rows of the pstats table printed on stdout.
fn pstats_rows(stdout: &str) -> Vec<Row> {
    let mut lines = stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("nsamples"));
    let Some(header) = lines.next() else {
        return vec![];
    };
    let unit = if header.contains("tottime (ms)") {
        1e-3
    } else if header.contains("tottime (μs)") || header.contains("tottime (us)") {
        1e-6
    } else {
        1.0
    };
    let mut rows = Vec::new();
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || !f[0].contains('/') {
            break;
        }
        let (d, c) = f[0].split_once('/').unwrap();
        rows.push(Row {
            direct: d.parse().unwrap(),
            cumulative: c.parse().unwrap(),
            tottime_s: f[2].parse::<f64>().unwrap() * unit,
            key: f[5..].join(" "),
        });
    }
    rows
}

fn captured(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("Captured "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'Captured N samples' line in:\n{stdout}"))
}

fn error_rate(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("Error rate: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no 'Error rate' line in:\n{stdout}"))
}

#[test]
fn report_py_finds_the_hotspot_in_wall_and_cpu_mode_on_every_version() {
    for minor in [13, 14, 15] {
        let it = release(minor);
        let dir = RootDir::new(&[("report.py", REPORT)]);
        let out = run_in_root(&it, &["-l", "100"], &dir.inside("report.py"), &dir.outside);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}\n{}",
            it.name,
            stdout,
            text(&out.stderr)
        );
        assert!(
            stdout.contains("top: ('/api/item/0', 600)"),
            "program output must pass through:\n{stdout}"
        );
        let rows = pstats_rows(&stdout);
        assert!(!rows.is_empty(), "{}: no table:\n{stdout}", it.name);
        // The hottest CPU-bound function leads the CPU work; whether it
        // outweighs the 1 s sleep depends on the machine's speed.
        let top_cpu = rows
            .iter()
            .find(|r| !r.key.contains("(fetch_upstream)"))
            .unwrap();
        assert_eq!(
            top_cpu.key, "report.py:36(fingerprint)",
            "{}:\n{stdout}",
            it.name
        );
        let fetch = rows
            .iter()
            .find(|r| r.key == "report.py:41(fetch_upstream)")
            .unwrap_or_else(|| panic!("{}: no fetch_upstream row:\n{stdout}", it.name));
        assert!(
            (0.7..1.4).contains(&fetch.tottime_s),
            "{}: fetch_upstream {} s, expected about 1.0 s",
            it.name,
            fetch.tottime_s
        );
        // The whole program runs under <module> (the line that calls
        // main(); on a busy machine an import line can get samples of its
        // own and be listed too): its cumulative count covers every row's
        // direct samples.
        let module = rows
            .iter()
            .filter(|r| r.key.starts_with("report.py:") && r.key.ends_with("(<module>)"))
            .max_by_key(|r| r.cumulative)
            .unwrap_or_else(|| panic!("{}: no <module> row:\n{stdout}", it.name));
        assert!(
            module.cumulative >= top_cpu.direct + fetch.direct,
            "{}:\n{stdout}",
            it.name
        );
        // Every sample is counted somewhere: the run covers at least the
        // program's 1 s sleep.
        assert!(captured(&stdout) >= fetch.direct, "{}:\n{stdout}", it.name);
        assert!(error_rate(&stdout) < 1.0, "{}:\n{stdout}", it.name);

        let wall_sleep = fetch.direct;
        // In CPU mode the sleep disappears and the hot loop still leads.
        let out = run_in_root(
            &it,
            &["--mode", "cpu"],
            &dir.inside("report.py"),
            &dir.outside,
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}: {}", it.name, text(&out.stderr));
        let rows = pstats_rows(&stdout);
        assert_eq!(
            rows[0].key, "report.py:36(fingerprint)",
            "{} cpu:\n{stdout}",
            it.name
        );
        let sleeping: u64 = rows
            .iter()
            .filter(|r| r.key.contains("fetch_upstream"))
            .map(|r| r.direct)
            .sum();
        // A few samples catch the thread around its sleep, more on a busy
        // machine (woken, it waits runnable for a CPU, and runnable counts
        // as on CPU, as in the reference): a small part of the wall-mode
        // count, never most of it.
        assert!(
            sleeping * 10 < wall_sleep,
            "{} cpu: fetch_upstream has {sleeping} samples, wall mode {wall_sleep}:\n{stdout}",
            it.name
        );
    }
}

#[test]
fn pool_py_shows_the_workers_only_with_all_threads() {
    for minor in [13, 14, 15] {
        let it = release(minor);
        let dir = RootDir::new(&[("pool.py", POOL)]);
        let out = run_in_root(
            &it,
            &["-l", "4", "--no-summary"],
            &dir.inside("pool.py"),
            &dir.outside,
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}: {}", it.name, text(&out.stderr));
        let rows = pstats_rows(&stdout);
        assert!(
            rows[0].key.contains("Condition.wait"),
            "{} main only:\n{stdout}",
            it.name
        );
        assert!(
            !stdout.contains("(checksum)"),
            "{} main only shows checksum:\n{stdout}",
            it.name
        );

        let out = run_in_root(
            &it,
            &["-a", "-l", "4", "--no-summary"],
            &dir.inside("pool.py"),
            &dir.outside,
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}: {}", it.name, text(&out.stderr));
        let rows = pstats_rows(&stdout);
        assert_eq!(
            rows[0].key, "pool.py:8(checksum)",
            "{} -a:\n{stdout}",
            it.name
        );
        // Two workers, both inside checksum (running or waiting for the
        // GIL) for most of the run: checksum is on more than one thread
        // per sample taken. Counted in samples, since how many samples a
        // busy machine lets through varies, but not what they show.
        let checksum: u64 = rows
            .iter()
            .filter(|r| r.key.contains("checksum"))
            .map(|r| r.direct)
            .sum();
        let taken = captured(&stdout);
        assert!(
            checksum as f64 > taken as f64 * 1.2,
            "{}: checksum in {checksum} thread samples of {taken} samples:\n{stdout}",
            it.name
        );
    }
}

#[test]
fn exit_codes_pass_through_and_the_profile_is_written() {
    let it = release(15);
    let dir = RootDir::new(&[(
        "exit3.py",
        "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 0.3:\n    pass\nraise SystemExit(3)\n",
    )]);
    let out_file = dir.outside.join("out.txt");
    let out = run_in_root(
        &it,
        &["--collapsed", "-o", out_file.to_str().unwrap()],
        &dir.inside("exit3.py"),
        &dir.outside,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let collapsed = std::fs::read_to_string(&out_file).expect("collapsed file written");
    let line = collapsed.lines().next().expect("a stack");
    assert!(line.starts_with("tid:"), "{line}");
    assert!(collapsed.contains("exit3.py:<module>:3"), "{collapsed}");
}

#[test]
fn a_missing_script_is_a_clear_error() {
    let out = Command::new(tachyon_bin())
        .args(["run", "/nonexistent/script.py"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("script not found: /nonexistent/script.py"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// `attach` to a target, then do `during` to it or to tachyon.
fn attach_and(args: &[&str], during: impl FnOnce(&mut common::Target, u32)) -> (Output, bool) {
    let it = release(15);
    let mut t = common::spawn(
        &it,
        "import time\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.001)\n",
        &[],
        &[],
    );
    t.wait_for("READY", Duration::from_secs(20));
    let child = Command::new(tachyon_bin())
        .arg("attach")
        .args(args)
        .arg(t.pid().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tpid = child.id();
    std::thread::sleep(Duration::from_millis(700));
    during(&mut t, tpid);
    let out = child.wait_with_output().unwrap();
    let alive = t.child.try_wait().unwrap().is_none();
    (out, alive)
}

#[test]
fn attach_for_a_duration_leaves_the_target_running() {
    let (out, alive) = attach_and(&["-d", "1.5", "--collapsed", "-o", "/dev/null"], |_, _| {});
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The run lasts what -d says, and never takes more samples than the
    // schedule allows; how many it could take depends on the machine's load.
    let n = captured(&stdout);
    assert!(
        (1..=1501).contains(&n),
        "{n} samples in 1.5 s at 1 kHz:\n{stdout}"
    );
    assert!(stdout.contains(" in 1.5"), "{stdout}");
    assert!(alive, "attach must not end the target");
}

#[test]
fn ctrl_c_and_a_killed_target_still_write_the_profile() {
    let (out, _) = attach_and(&[], |_, tachyon| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(tachyon as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
    });
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("Interrupted by user."), "{stdout}");
    assert!(stdout.contains("Profile Stats:"), "{stdout}");
    assert!(captured(&stdout) > 0, "{stdout}");

    let (out, _) = attach_and(&[], |t, _| {
        t.child.kill().unwrap();
    });
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("Profile Stats:"), "{stdout}");
    assert!(captured(&stdout) > 0, "{stdout}");
}

#[test]
fn run_samples_from_the_first_line() {
    // A program whose whole life is a half-second loop on its third line,
    // started through a wrapper that execs the chrooted interpreter: the
    // race-free path, where tachyon holds the process from exec to exec
    // and releases it once its runtime is located. At 200 Hz the loop
    // should get about 100 samples. The rate is low and the test retried
    // because on a loaded 2-core machine a sampler's wake-ups can wait
    // several milliseconds for a CPU, which would say nothing about
    // tachyon.
    let script =
        "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 0.5: pass\n";
    let it = release(15);
    let dir = RootDir::new(&[("short.py", script)]);
    let wrapper = chroot_python(&dir, &it);
    // The script path must exist where tachyon checks it and where python
    // reads it: the same path inside and outside the root.
    let host_copy = dir.inside.clone();
    std::fs::create_dir_all(&host_copy).unwrap();
    std::fs::write(host_copy.join("short.py"), script).unwrap();
    let out_file = dir.outside.join("short.txt");
    // Both launch paths hold the program from its start: `--python` (the
    // interpreter under ptrace from exec) and `-- COMMAND` (the command
    // seized before its first instruction, followed through exec).
    type Form<'a> = (&'a str, &'a dyn Fn(&mut Command));
    let forms: [Form<'_>; 2] = [
        ("--python", &|c: &mut Command| {
            c.arg("--python").arg(&wrapper).arg(dir.inside("short.py"));
        }),
        ("-- COMMAND", &|c: &mut Command| {
            c.arg("--").arg(&wrapper).arg(dir.inside("short.py"));
        }),
    ];
    let mut report = String::new();
    let mut ok = true;
    for (name, form) in forms {
        let mut this_ok = false;
        for _attempt in 0..3 {
            let mut cmd = Command::new(tachyon_bin());
            cmd.args(["run", "-r", "200", "--collapsed", "-o"])
                .arg(&out_file);
            form(&mut cmd);
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{name}: {}", text(&out.stderr));
            let body = std::fs::read_to_string(&out_file).unwrap();
            let on_line_3 =
                collapsed::samples_with(&collapsed::parse(&body), "short.py:<module>:3");
            if on_line_3 >= 50 {
                this_ok = true;
                break;
            }
            report += &format!(
                "{name}: only {on_line_3} samples of a 500 ms loop at 200 Hz:\n{}{body}\n",
                text(&out.stdout)
            );
        }
        ok &= this_ok;
    }
    let _ = std::fs::remove_dir_all(&host_copy);
    assert!(ok, "{report}");
}

/// A wrapper script (`--python`) that execs the chrooted interpreter.
fn chroot_python(dir: &RootDir, it: &Interp) -> PathBuf {
    let wrapper = dir.outside.join("py.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec chroot {} {} \"$@\"\n",
            sid_root().display(),
            it.exe.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    wrapper
}

#[test]
fn run_dash_m_profiles_a_module_with_its_arguments() {
    for minor in [13, 14, 15] {
        let it = release(minor);
        let dir = RootDir::new(&[]);
        let py = chroot_python(&dir, &it);
        let out_file = dir.outside.join("m.txt");
        // timeit runs its statement in a loop it reports on: the profile
        // must show the module's own code, the output must pass through.
        let out = Command::new(tachyon_bin())
            .args(["run", "--collapsed", "-o"])
            .arg(&out_file)
            .arg("--python")
            .arg(&py)
            .args(["-m", "timeit", "-n", "200000", "-r", "3", "sum(range(50))"])
            .output()
            .unwrap();
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}: {}", it.name, text(&out.stderr));
        assert!(stdout.contains("200000 loops"), "{}: {stdout}", it.name);
        let collapsed = std::fs::read_to_string(&out_file).unwrap();
        assert!(
            collapsed.contains("timeit.py:Timer.timeit:"),
            "{}: {collapsed}",
            it.name
        );
        assert!(
            collapsed.contains("<timeit-src>:inner:"),
            "{}: {collapsed}",
            it.name
        );
    }
}

#[test]
fn sigterm_stops_sampling_and_writes_the_profile() {
    let it = release(15);
    let dir = RootDir::new(&[(
        "forever.py",
        "import time\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.001)\n",
    )]);
    let out_file = dir.outside.join("t.txt");
    let child = Command::new(tachyon_bin())
        .args(["run", "--collapsed", "-o"])
        .arg(&out_file)
        .arg("--")
        .arg("chroot")
        .arg(sid_root())
        .arg(&it.exe)
        .arg(dir.inside("forever.py"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tachyon = child.id() as i32;
    // Let it sample a while, then ask it to stop as a service manager would.
    std::thread::sleep(Duration::from_millis(800));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(tachyon),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert!(stdout.contains("Interrupted by user."), "{stdout}");
    assert!(captured(&stdout) > 0, "{stdout}");
    let collapsed = std::fs::read_to_string(&out_file).unwrap();
    assert!(collapsed.contains("forever.py:<module>:4"), "{collapsed}");
    // The program was ended with sampling, as the reference does: no
    // python process of this test is left.
    let left = std::process::Command::new("pgrep")
        .args(["-f", &dir.inside("forever.py")])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left running: {}",
        text(&left.stdout)
    );
}

#[test]
fn an_unwritable_output_fails_before_the_program_runs() {
    let it = release(15);
    let dir = RootDir::new(&[("hello.py", "print('program ran')\n")]);
    let out = run_in_root(
        &it,
        &["--collapsed", "-o", "/nonexistent/dir/out.txt"],
        &dir.inside("hello.py"),
        &dir.outside,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot write the output to /nonexistent/dir/out.txt"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        !text(&out.stdout).contains("program ran"),
        "the program must not run"
    );
}

#[test]
fn attach_blocking_samples_and_always_resumes_the_target() {
    let it = release(15);
    let mut t = common::spawn(
        &it,
        "import threading\ndef spin():\n    while True: pass\nfor _ in range(3):\n    threading.Thread(target=spin, daemon=True).start()\nprint('READY', flush=True)\nspin()\n",
        &[],
        &[],
    );
    t.wait_for("READY", Duration::from_secs(20));
    let out = Command::new(tachyon_bin())
        .args([
            "attach",
            "--blocking",
            "-a",
            "-d",
            "1",
            "--collapsed",
            "-o",
            "/dev/null",
        ])
        .arg(t.pid().to_string())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Stopping and resuming four threads per sample is slow (and slower on
    // a loaded machine): how many of the 1000 samples fit depends on it.
    assert!(captured(&stdout) > 0, "{stdout}");
    assert!(error_rate(&stdout) < 1.0, "{stdout}");
    // Every thread runs again: none is left in a ptrace stop.
    std::thread::sleep(Duration::from_millis(100));
    let states = common::procs::thread_states(t.pid());
    assert_eq!(states.len(), 4, "the target's threads: {states:?}");
    for (tid, state) in states {
        assert!(
            !matches!(state, 't' | 'T'),
            "thread {tid} is left stopped ({state})"
        );
    }
}

#[test]
fn a_command_running_several_pythons_is_followed_from_one_to_the_next() {
    // A shell that runs one interpreter, then another of another version:
    // both land in one profile, as a wrapper that probes an interpreter
    // before starting the real program would need.
    let dir = RootDir::new(&[
        (
            "a.py",
            "import time\ndef first():\n    t = time.perf_counter()\n    while time.perf_counter() - t < 0.3: pass\nfirst()\n",
        ),
        (
            "b.py",
            "import time\ndef second():\n    t = time.perf_counter()\n    while time.perf_counter() - t < 0.3: pass\nsecond()\n",
        ),
    ]);
    let out_file = dir.outside.join("two.txt");
    let script = format!(
        "python3.15 {}; python3.14 {}; exit 7",
        dir.inside("a.py"),
        dir.inside("b.py")
    );
    let out = Command::new(tachyon_bin())
        .args(["run", "--collapsed", "-o"])
        .arg(&out_file)
        .arg("--")
        .arg("chroot")
        .arg(sid_root())
        .args(["/bin/sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("following Python process"),
        "{}",
        text(&out.stderr)
    );
    let body = std::fs::read_to_string(&out_file).unwrap();
    let lines = collapsed::parse(&body);
    let count = |needle: &str| collapsed::samples_with(&lines, needle);
    // Each program busies itself for the same 0.3 s: both are in the
    // profile, in comparable amounts (how many samples depends on load).
    let (a, b) = (count("a.py:first:4"), count("b.py:second:4"));
    assert!(a > 0 && b > 0, "{body}");
    assert!(a <= 3 * b && b <= 3 * a, "{a} vs {b} samples:\n{body}");
}

#[test]
fn a_command_that_starts_no_python_is_a_clear_error() {
    let out = Command::new(tachyon_bin())
        .args(["run", "--", "sh", "-c", "echo no python here; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("no python here"),
        "the command runs"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("the command exited with code 3 without starting a Python process"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn run_through_uv_profiles_the_app_after_uvs_interpreter_probe() {
    // uv (from PyPI, installed by scripts/provision-tools.sh) runs a short
    // interpreter probe before the app when its cache is cold: the profile
    // must go on from the probe to the app.
    let py = common::machine_supported_interpreters()
        .into_iter()
        .find(|i| i.name == "pyenv-3.13")
        .expect("pyenv 3.13 is one of the machine's interpreters");
    let tools = std::env::var_os("TACHYON_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/tachyon/tools"));
    let uv = tools.join("uv/bin/uv");
    assert!(
        uv.exists(),
        "MISSING TOOL: {} (run scripts/provision-tools.sh)",
        uv.display()
    );
    let dir = std::env::temp_dir().join(format!("tachyon-uv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    struct Rm(PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _rm = Rm(dir.clone());
    std::fs::write(
        dir.join("app.py"),
        "import time\ndef work():\n    t = time.perf_counter()\n    while time.perf_counter() - t < 0.4: pass\nwork()\nprint('app done')\n",
    )
    .unwrap();
    let out_file = dir.join("uv.txt");
    let out = Command::new(tachyon_bin())
        .args(["run", "--collapsed", "-o"])
        .arg(&out_file)
        .arg("--")
        .arg(&uv)
        .args(["run", "--no-project", "--offline", "--python"])
        .arg(&py.exe)
        .arg("app.py")
        .current_dir(&dir)
        .env("UV_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(text(&out.stdout).contains("app done"));
    let body = std::fs::read_to_string(&out_file).unwrap();
    let work = collapsed::samples_with(&collapsed::parse(&body), "app.py:work:4");
    eprintln!("{work} samples of the app's 400 ms loop");
    // The profile went on from the probe into the app. How many of the
    // loop's 400 ms it saw depends on how soon, on a busy machine, the new
    // interpreter was found: at least some.
    assert!(
        work > 0 && err.contains("following Python process"),
        "{work} samples of a 400 ms loop:\n{err}\n{body}"
    );
}

#[test]
fn record_once_then_replay_as_table_collapsed_and_flame_graph() {
    let it = release(14);
    let dir = RootDir::new(&[("report.py", REPORT)]);
    let bin = dir.outside.join("run.bin");
    let out = run_in_root(
        &it,
        &["--binary", "-o", bin.to_str().unwrap()],
        &dir.inside("report.py"),
        &dir.outside,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("Binary profile written to"), "{stdout}");
    let replay = |args: &[&str]| {
        let out = Command::new(tachyon_bin())
            .arg("replay")
            .args(args)
            .arg(&bin)
            .current_dir(&dir.outside)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "replay {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    // The table: the same conclusion as sampling live.
    let table = replay(&["-l", "5"]);
    assert!(table.contains("Replaying "), "{table}");
    let recorded: u64 = table
        .lines()
        .find_map(|l| l.strip_prefix("Replaying "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{table}"));
    let rows = pstats_rows(&table);
    let top_cpu = rows
        .iter()
        .find(|r| !r.key.contains("(fetch_upstream)"))
        .unwrap();
    assert_eq!(top_cpu.key, "report.py:36(fingerprint)", "{table}");
    // Collapsed stacks.
    let collapsed_file = dir.outside.join("c.txt");
    replay(&["--collapsed", "-o", collapsed_file.to_str().unwrap()]);
    let collapsed = std::fs::read_to_string(&collapsed_file).unwrap();
    assert!(
        collapsed.contains("report.py:fingerprint:36"),
        "{collapsed}"
    );
    // A flame graph: one HTML file with the hot function in it.
    let html_file = dir.outside.join("f.html");
    let said = replay(&["--flamegraph", "-o", html_file.to_str().unwrap()]);
    assert!(said.contains("Flamegraph saved to"), "{said}");
    let html = std::fs::read_to_string(&html_file).unwrap();
    assert!(
        html.contains("<canvas id=\"fg\">") && html.contains("\"fingerprint\""),
        "not a flame graph"
    );
    // JSON lines: every line parses, the hot function is in the tables.
    let jsonl_file = dir.outside.join("p.jsonl");
    replay(&["--jsonl", "-o", jsonl_file.to_str().unwrap()]);
    let jsonl = std::fs::read_to_string(&jsonl_file).unwrap();
    for line in jsonl.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    assert!(jsonl.contains("\"fingerprint\""), "{jsonl}");
    // A Firefox Profiler profile: one thread whose samples are all there.
    let gecko_file = dir.outside.join("g.json");
    replay(&["--gecko", "-o", gecko_file.to_str().unwrap()]);
    let gecko: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&gecko_file).unwrap()).unwrap();
    let samples = gecko["threads"][0]["samples"]["length"].as_u64().unwrap();
    // Every recorded sample with a stack, as the collapsed stacks count them.
    let with_stack = collapsed::total(&collapsed::parse(&collapsed));
    assert!(
        with_stack > 0 && with_stack <= recorded,
        "{with_stack} of {recorded}"
    );
    assert_eq!(samples, with_stack, "samples in the gecko profile");
    // A differential flame graph of the recording against itself.
    let diff_file = dir.outside.join("d.html");
    let said = replay(&[
        "--diff-flamegraph",
        bin.to_str().unwrap(),
        "-o",
        diff_file.to_str().unwrap(),
    ]);
    assert!(said.contains("Differential flame graph:"), "{said}");
    assert!(
        std::fs::read_to_string(&diff_file)
            .unwrap()
            .contains("\"kind\":\"diff\"")
    );
    // A baseline recorded in another mode is refused before the program
    // starts.
    let out = run_in_root(
        &it,
        &["--mode", "cpu", "--diff-flamegraph", bin.to_str().unwrap()],
        &dir.inside("report.py"),
        &dir.outside,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("recorded in wall mode"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        !text(&out.stdout).contains("top:"),
        "the program must not have run"
    );
}
