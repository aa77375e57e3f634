//! `--async-aware` (run, attach, dump) on a real asyncio program
//! (fixtures/targets/asyncio_tasks.py: `gather` and `TaskGroup`, named
//! tasks, nested awaits, tasks blocked on a pipe read and in
//! `asyncio.sleep`, one CPU-busy task).
//!
//! - 3.15: tachyon's task chains equal the reference's on the same target
//!   in the same run (collapsed stacks compared as sets, and dump sections
//!   by task address).
//! - 3.14: the chains are the known structure of the target.
//! - 3.13: a clear message (its asyncio has no debug table).
//! - Combinations: the reference refuses -a, --native, --no-gc, --binary and
//!   non-wall modes; tachyon supports all but the modes, which it refuses
//!   with the reason.
//!
//! The busy task's own frames depend on the instant (it runs, or yields in
//! `asyncio.sleep(0)`), so its stacks are checked for their fixed part only;
//! the blocked tasks' stacks are fixed and compared whole.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::{Interp, RootDir, Target, collapsed, run_ok, sid_interpreters, spawn, tachyon_bin};

const TARGET_PY: &str = include_str!("../fixtures/targets/asyncio_tasks.py");

fn interp(minor: u8, debug: bool) -> Interp {
    sid_interpreters()
        .into_iter()
        .find(|i| i.minor == minor && i.debug == debug)
        .unwrap_or_else(|| panic!("MISSING INTERPRETER: sid python3.{minor}"))
}

fn start(it: &Interp) -> Target {
    let mut t = spawn(it, TARGET_PY, &[], &[]);
    t.wait_for("ready", Duration::from_secs(120));
    t
}

/// The line of the fixture holding `text` (1-based).
fn line_of(text: &str) -> usize {
    TARGET_PY
        .lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("fixture has no line {text:?}"))
        + 1
}

/// The stacks of the blocked tasks, root first as collapsed output shows
/// them, without the `tid:N;` prefix and with the standard library's line
/// numbers left out (`file:func`); the target's own lines are exact.
fn expected_blocked() -> BTreeSet<String> {
    let main = format!(
        "<task>:Task-1:0;target.py:main:{}",
        line_of("await asyncio.gather(outer, group, worker)")
    );
    let gathered = format!(
        "{main};<task>:gatherer:0;target.py:gathered:{}",
        line_of("await asyncio.gather(")
    );
    let grouped = format!(
        "{main};<task>:grouper:0;target.py:grouped:{};taskgroups.py:TaskGroup.__aexit__;taskgroups.py:TaskGroup._aexit",
        line_of("async with asyncio.TaskGroup() as tg:")
    );
    let child = line_of("await asyncio.sleep(3600 + n)");
    [
        format!(
            "{gathered};<task>:pipe-reader:0;target.py:pipe_waiter:{};target.py:read_pipe:{};streams.py:StreamReader.read;streams.py:StreamReader._wait_for_data",
            line_of("await read_pipe(reader)"),
            line_of("return await reader.read(1)")
        ),
        format!(
            "{gathered};<task>:sleeper:0;target.py:sleeper:{};target.py:sleeper_inner:{};tasks.py:sleep",
            line_of("await sleeper_inner()"),
            line_of("await asyncio.sleep(3600)")
        ),
        format!("{grouped};<task>:tg-child-1:0;target.py:group_child:{child};tasks.py:sleep"),
        format!("{grouped};<task>:tg-child-2:0;target.py:group_child:{child};tasks.py:sleep"),
    ]
    .into_iter()
    .collect()
}

/// The fixed root part of every stack of the busy task.
fn busy_prefix() -> String {
    format!(
        "<task>:Task-1:0;target.py:main:{};<task>:cpu-worker:0;",
        line_of("await asyncio.gather(outer, group, worker)")
    )
}

/// A collapsed stack without its `tid:N;` prefix.
fn strip_tid(stack: &str) -> &str {
    stack.split_once(';').map_or(stack, |(_, rest)| rest)
}

/// Leave out the standard library's line numbers (`file:func:N` becomes
/// `file:func` unless the file is the target's).
fn without_stdlib_lines(stack: &str) -> String {
    stack
        .split(';')
        .map(|f| {
            if f.starts_with("target.py:") || f.starts_with("<task>:") {
                f.to_owned()
            } else {
                f.rsplit_once(':').map_or(f, |(head, _)| head).to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn is_busy(stack: &str) -> bool {
    stack.contains("<task>:cpu-worker:0")
}

/// `tachyon attach ARGS --collapsed` for 1 s; the distinct stacks.
fn tachyon_collapsed(t: &Target, args: &[&str]) -> BTreeSet<String> {
    let dir = RootDir::new(&[]);
    let out = dir.outside("tachyon.txt");
    run_ok(
        "tachyon attach",
        Command::new(tachyon_bin())
            .arg("attach")
            .args(args)
            .args(["--collapsed", "-d", "1", "-o"])
            .arg(&out)
            .arg(t.pid().to_string()),
    );
    collapsed::stacks(&collapsed::read(&out))
}

/// The reference's `attach ARGS --collapsed` for 1 s, in the sid root.
fn reference_collapsed(t: &Target, args: &[&str]) -> BTreeSet<String> {
    let dir = RootDir::new(&[]);
    run_ok(
        "the reference's attach",
        Command::new("chroot")
            .arg(common::sid_root())
            .args(["python3.15", "-m", "profiling.sampling", "attach"])
            .args(args)
            .args(["--collapsed", "-d", "1", "-o"])
            .arg(dir.inside("reference.txt"))
            .arg(t.pid().to_string()),
    );
    collapsed::stacks(&collapsed::read(&dir.outside("reference.txt")))
}

/// Check the stacks of mode `all`: the blocked tasks' exactly, the busy
/// task's fixed part.
fn check_all_mode(who: &str, stacks: &BTreeSet<String>) {
    let (busy, blocked): (Vec<&String>, Vec<&String>) = stacks.iter().partition(|s| is_busy(s));
    let blocked: BTreeSet<String> = blocked
        .iter()
        .map(|s| without_stdlib_lines(strip_tid(s)))
        .collect();
    assert_eq!(
        blocked,
        expected_blocked(),
        "{who}: the blocked tasks' stacks are not the target's"
    );
    assert!(!busy.is_empty(), "{who}: no stack of the busy task");
    let busy_coro = format!(
        "{}target.py:busy:{}",
        busy_prefix(),
        line_of("await busy_leaf()")
    );
    for s in busy {
        assert!(
            strip_tid(s).starts_with(&busy_coro),
            "{who}: busy task's stack {s:?} does not start with {busy_coro:?}"
        );
    }
}

/// Check the stacks of mode `running`: every one is the busy task's (the
/// only one that runs), and its running code shows up.
fn check_running_mode(who: &str, stacks: &BTreeSet<String>) {
    assert!(!stacks.is_empty(), "{who}: no stack in mode running");
    let prefix = busy_prefix();
    // The busy task is the loop's current task a moment before its
    // coroutine is resumed and after it yields: caught then, its chain
    // has no frames of its own (the reference shows it so).
    let bare = prefix.trim_end_matches(';');
    for s in stacks {
        let s = strip_tid(s);
        assert!(
            s.starts_with(&prefix) || s == bare,
            "{who}: {s:?} is not the running task's chain"
        );
    }
    let crunch = format!(
        "target.py:busy:{};target.py:busy_leaf:{};target.py:crunch:",
        line_of("await busy_leaf()"),
        line_of("crunch(20000)")
    );
    assert!(
        stacks.iter().any(|s| s.contains(&crunch)),
        "{who}: the running task never showed its busy loop ({crunch}):\n{stacks:#?}"
    );
    // The task's coroutine is on the stack then: its stack ends at it,
    // without the event loop's frames that called into it.
    for s in stacks.iter().filter(|s| s.contains("target.py:crunch:")) {
        assert!(
            !s.contains("run_forever"),
            "{who}: the running task's stack goes on past its coroutine: {s:?}"
        );
    }
}

#[test]
fn task_chains_equal_the_references_on_3_15() {
    let it = interp(15, false);
    let t = start(&it);
    let ours = tachyon_collapsed(&t, &["--async-aware", "--async-mode", "all"]);
    let theirs = reference_collapsed(&t, &["--async-aware", "--async-mode", "all"]);
    check_all_mode("tachyon", &ours);
    check_all_mode("reference", &theirs);
    // Same target, same run: the blocked tasks' stacks are equal whole,
    // tids and the standard library's lines included.
    let blocked = |s: &BTreeSet<String>| -> BTreeSet<String> {
        s.iter().filter(|x| !is_busy(x)).cloned().collect()
    };
    assert_eq!(blocked(&ours), blocked(&theirs));

    let ours = tachyon_collapsed(&t, &["--async-aware"]);
    let theirs = reference_collapsed(&t, &["--async-aware"]);
    check_running_mode("tachyon", &ours);
    check_running_mode("reference", &theirs);
    let busy_loop = |s: &BTreeSet<String>| -> BTreeSet<String> {
        s.iter()
            .filter(|x| x.contains("target.py:crunch:"))
            .cloned()
            .collect()
    };
    assert!(
        !busy_loop(&ours).is_disjoint(&busy_loop(&theirs)),
        "no stack of the busy loop in common:\nours {ours:#?}\nreference {theirs:#?}"
    );
}

/// A dump's task sections: (task address, the lines below its header).
type Sections = Vec<(u64, String)>;

/// A dump's sections: task address to the lines below its header, with
/// tachyon's quoted thread name left out of the header.
fn dump_sections(who: &str, text: &str) -> Sections {
    let mut out: Vec<(u64, String)> = Vec::new();
    for line in text.lines() {
        if line.starts_with("Stack dump") {
            let task = line
                .split_once("(task ")
                .and_then(|(_, r)| r.split(';').next()?.parse().ok())
                .unwrap_or_else(|| panic!("{who}: no task in header {line:?}"));
            out.push((task, String::new()));
        } else if !line.is_empty() {
            let sec = out
                .last_mut()
                .unwrap_or_else(|| panic!("{who}: text before the first header:\n{text}"));
            sec.1.push_str(line);
            sec.1.push('\n');
        }
    }
    out
}

/// `dump --async-aware PID` by tachyon and by the reference, both from
/// `/` so that file names are shown alike (see dump_reference.rs): their
/// task sections.
fn both_dumps(pid: &str) -> (Sections, Sections) {
    let ours = run_ok(
        "tachyon dump",
        Command::new(tachyon_bin())
            .args(["dump", "--async-aware", pid])
            .current_dir("/"),
    );
    let theirs = run_ok(
        "the reference's dump",
        Command::new("chroot").arg(common::sid_root()).args([
            "python3.15",
            "-m",
            "profiling.sampling",
            "dump",
            "--async-aware",
            pid,
        ]),
    );
    (
        dump_sections("tachyon", &ours),
        dump_sections("reference", &theirs),
    )
}

#[test]
fn dump_shows_the_references_task_sections_on_3_15() {
    let it = interp(15, false);
    let t = start(&it);
    let pid = t.pid().to_string();
    let (ours, theirs) = both_dumps(&pid);
    assert_eq!(ours.len(), 5, "one section per leaf task:\n{ours:#?}");
    let ids = |v: &[(u64, String)]| v.iter().map(|s| s.0).collect::<BTreeSet<_>>();
    assert_eq!(ids(&ours), ids(&theirs), "the leaf tasks differ");
    for (id, lines) in &ours {
        if lines.contains("\"<task>\", in cpu-worker") {
            continue;
        }
        let reference = &theirs.iter().find(|s| s.0 == *id).unwrap().1;
        assert_eq!(lines, reference, "task {id}");
        assert!(
            lines.starts_with("  File \"<task>\", in Task-1\n"),
            "{lines}"
        );
    }
    // `--json`: the same leaf tasks, and each waiting one's chain of
    // functions as the reference shows it, in a document its schema passes.
    let json = run_ok(
        "tachyon dump --json",
        Command::new(tachyon_bin()).args(["dump", "--async-aware", "--json", &pid]),
    );
    let dir = RootDir::new(&[]);
    let file = dir.outside("dump.json");
    std::fs::write(&file, &json).unwrap();
    common::validate_schema("docs/dump.schema.json", &[&file]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let tasks = doc["tasks"].as_array().expect("tasks");
    let json_ids: BTreeSet<u64> = tasks.iter().map(|t| t["task"].as_u64().unwrap()).collect();
    assert_eq!(json_ids, ids(&theirs), "--json: the leaf tasks differ");
    let functions = |lines: &str| -> Vec<String> {
        lines
            .lines()
            .filter(|l| l.starts_with("  File "))
            .filter_map(|l| l.rsplit_once(", in ").map(|(_, f)| f.to_owned()))
            .collect()
    };
    for t in tasks {
        let chain: Vec<String> = t["frames"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .map(|f| f["function"].as_str().unwrap().to_owned())
            .collect();
        if chain.iter().any(|f| f == "cpu-worker") {
            continue;
        }
        let reference = &theirs.iter().find(|s| s.0 == t["task"]).unwrap().1;
        assert_eq!(chain, functions(reference), "--json: task {}", t["task"]);
    }
}

#[test]
fn task_chains_are_right_on_3_14_and_the_debug_builds() {
    for (minor, debug) in [(14, false), (14, true), (15, true)] {
        let it = interp(minor, debug);
        let t = start(&it);
        check_all_mode(
            &it.name,
            &tachyon_collapsed(&t, &["--async-aware", "--async-mode", "all"]),
        );
        check_running_mode(&it.name, &tachyon_collapsed(&t, &["--async-aware"]));
    }
}

#[test]
fn combinations_the_reference_refuses_work_or_say_why() {
    let it = interp(15, false);
    let t = start(&it);
    let pid = t.pid().to_string();
    // -a, --native and --no-gc: the task walk covers every thread anyway.
    check_all_mode(
        "tachyon -a --native --no-gc",
        &tachyon_collapsed(
            &t,
            &[
                "--async-aware",
                "--async-mode",
                "all",
                "-a",
                "--native",
                "--no-gc",
            ],
        ),
    );
    // --binary: the <task> frames survive the recording.
    let dir = RootDir::new(&[]);
    let bin = dir.outside("tasks.bin");
    run_ok(
        "tachyon attach --binary",
        Command::new(tachyon_bin())
            .args([
                "attach",
                "--async-aware",
                "--async-mode",
                "all",
                "--binary",
                "-d",
                "1",
                "-o",
            ])
            .arg(&bin)
            .arg(&pid),
    );
    let replayed = dir.outside("replayed.txt");
    run_ok(
        "tachyon replay",
        Command::new(tachyon_bin())
            .args(["replay", "--collapsed", "-o"])
            .arg(&replayed)
            .arg(&bin),
    );
    check_all_mode(
        "replayed recording",
        &collapsed::stacks(&collapsed::read(&replayed)),
    );
    // Modes select threads by their state; a task chain has none.
    let out = Command::new(tachyon_bin())
        .args(["attach", "--async-aware", "--mode", "cpu", "-d", "1", &pid])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--async-aware takes no --mode other than wall"),
        "{err}"
    );
    // --async-mode alone.
    let out = Command::new(tachyon_bin())
        .args(["attach", "--async-mode", "all", "-d", "1", &pid])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--async-aware"), "{err}");
}

/// Fails with exit status 1 and one line naming the problem.
fn refused(args: &[&str], needle: &str) {
    let out = Command::new(tachyon_bin())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "tachyon {args:?}: {err}");
    assert!(err.contains(needle), "tachyon {args:?}: {err}");
}

#[test]
fn python_3_13_gets_a_clear_message() {
    let it = interp(13, false);
    let t = start(&it);
    let pid = t.pid().to_string();
    let needle = "--async-aware needs Python 3.14 or newer";
    refused(&["attach", "--async-aware", "-d", "1", &pid], needle);
    refused(&["dump", "--async-aware", &pid], needle);
    // run: refused after the start, and the program is ended.
    let dir = RootDir::new(&[("t.py", TARGET_PY)]);
    let root = common::sid_root();
    refused(
        &[
            "run",
            "--async-aware",
            "-d",
            "5",
            "--",
            "chroot",
            root.to_str().unwrap(),
            "python3.13",
            &dir.inside("t.py"),
        ],
        needle,
    );
    let left = Command::new("pgrep")
        .args(["-f", &dir.inside("t.py")])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "the refused run left its program running"
    );
}

#[test]
fn a_3_14_process_without_asyncio_is_told_apart() {
    let it = interp(14, false);
    let mut t = spawn(
        &it,
        "import time\nprint('ready', flush=True)\ntime.sleep(600)\n",
        &[],
        &[],
    );
    t.wait_for("ready", Duration::from_secs(60));
    refused(
        &["dump", "--async-aware", &t.pid().to_string()],
        "has not imported asyncio",
    );
}

#[test]
fn run_finds_asyncio_once_a_3_14_program_imports_it() {
    // 3.14 maps asyncio's table only when `_asyncio` is imported: the
    // program starts without it, and the profile still gets its tasks.
    let wrapper = "import time, runpy, sys\ntime.sleep(0.5)\nrunpy.run_path(sys.argv[1], run_name='__main__')\n";
    let dir = RootDir::new(&[("wrap.py", wrapper), ("target.py", TARGET_PY)]);
    let out = dir.outside("run.txt");
    let root = common::sid_root();
    run_ok(
        "tachyon run",
        Command::new(tachyon_bin())
            .args([
                "run",
                "--async-aware",
                "--async-mode",
                "all",
                "-d",
                "4",
                "--collapsed",
                "-o",
            ])
            .arg(&out)
            .args(["--", "chroot", root.to_str().unwrap(), "python3.14"])
            .arg(dir.inside("wrap.py"))
            .arg(dir.inside("target.py")),
    );
    // From its first line: the start-up's stacks (tasks not yet awaited,
    // `main` in its first sleep) are there too, and the steady ones.
    let stacks: BTreeSet<String> = collapsed::stacks(&collapsed::read(&out))
        .iter()
        .map(|s| without_stdlib_lines(strip_tid(s)))
        .collect();
    let missing: Vec<String> = expected_blocked().difference(&stacks).cloned().collect();
    assert!(missing.is_empty(), "missing {missing:#?} in {stacks:#?}");
}

/// A real reader that spoils one read in `every` (a flipped bit, a word
/// of garbage or of 0xff, a zeroed stretch) while `on`, counting reads.
struct Spoiler {
    inner: tachyon::process::linux::LinuxProcess,
    spoil: common::spoil::Spoil,
    calls: std::cell::Cell<u64>,
}

impl tachyon::process::ProcessMemory for Spoiler {
    fn read(&self, addr: u64, buf: &mut [u8]) -> tachyon::Result<()> {
        self.calls.set(self.calls.get() + 1);
        self.inner.read(addr, buf)?;
        self.spoil.apply(buf);
        Ok(())
    }

    fn read_many(&self, reqs: &mut [tachyon::process::ReadReq<'_>]) -> tachyon::Result<()> {
        self.calls.set(self.calls.get() + 1);
        self.inner.read_many(reqs)?;
        for r in reqs.iter_mut() {
            self.spoil.apply(r.buf);
        }
        Ok(())
    }
}

#[test]
fn corrupted_task_memory_never_panics_and_leaves_no_trace() {
    use tachyon::model::Sample;
    use tachyon::process::linux::LinuxProcess;
    use tachyon::unwind::asyncio::AsyncMode;
    use tachyon::unwind::{UnwindOptions, Unwinder};
    for minor in [14, 15] {
        let it = interp(minor, false);
        let t = start(&it);
        let proc = LinuxProcess::open(t.pid()).unwrap();
        let rt = tachyon::session::locate(&proc).unwrap();
        let offsets = tachyon::runtime::asyncio::locate(&proc, &rt)
            .unwrap()
            .expect("asyncio is loaded");
        for mode in [AsyncMode::All, AsyncMode::Running] {
            let mem = Spoiler {
                inner: LinuxProcess::open(t.pid()).unwrap(),
                spoil: Default::default(),
                calls: std::cell::Cell::new(0),
            };
            let mut u = Unwinder::new(mem, t.pid(), rt.clone(), UnwindOptions::default());
            u.set_async(mode, Some(offsets.clone()), None);
            let mut s = Sample::default();
            let mut most = 0;
            for (seed, every) in [(1u64, 3u64), (2, 10), (3, 50)] {
                u.memory().spoil.start(seed, minor, every);
                for _ in 0..150 {
                    let c0 = u.memory().calls.get();
                    let _ = u.sample(&mut s);
                    most = most.max(u.memory().calls.get() - c0);
                }
            }
            // The same unwinder, on clean reads: the chains are right again
            // (names and code cached from spoiled reads would show here).
            u.memory().spoil.stop();
            // At least 30 samples, spread over time: a target descheduled
            // between two iterations of its loop (no task running) stays so
            // for a whole time slice on a busy machine.
            let mut stacks = BTreeSet::new();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let mut taken = 0;
            while taken < 30 || (stacks.is_empty() && std::time::Instant::now() < deadline) {
                taken += 1;
                std::thread::sleep(Duration::from_millis(2));
                if u.sample(&mut s).is_ok() {
                    for th in &s.threads {
                        let f = u.frames();
                        let names: Vec<String> = th
                            .frames
                            .iter()
                            .rev()
                            .map(|&id| {
                                let fr = f.frame(id);
                                let file = f.str(fr.file);
                                let base = file.rsplit('/').next().unwrap_or(file);
                                format!("{base}:{}:{}", f.str(fr.func), fr.line())
                            })
                            .collect();
                        stacks.insert(format!("tid:{};{}", th.tid, names.join(";")));
                    }
                }
            }
            eprintln!(
                "3.{minor} {mode:?}: at most {most} reads in a spoiled sample; {} clean stacks",
                stacks.len()
            );
            match mode {
                AsyncMode::All => check_all_mode(&format!("3.{minor} after spoiling"), &stacks),
                AsyncMode::Running => {
                    check_running_mode(&format!("3.{minor} after spoiling"), &stacks)
                }
            }
        }
    }
}

/// Async generators and a recursive coroutine, each in a named task
/// blocked in `asyncio.sleep`: a task whose coroutine is an `anext()`
/// awaitable, an `async for` over an async generator, an `aclose()` that
/// awaits in the generator's `finally`, `rec` awaiting itself three deep;
/// and one running task, a recursive coroutine that loops.
const AGEN_PY: &str = r#"
import asyncio

async def agen():
    await asyncio.sleep(3600)  # agen waits
    yield 1

async def agen2():
    await asyncio.sleep(3600)  # agen2 waits
    yield 2

async def consumer():
    async for x in agen2():  # consumer iterates
        pass

async def closer_gen():
    try:
        yield 1
    finally:
        await asyncio.sleep(3600)  # closer_gen finally waits

async def closer():
    g = closer_gen()
    await anext(g)
    await g.aclose()  # closer closes

async def rec(n):
    if n == 0:
        await asyncio.sleep(3600)  # rec bottom waits
        return
    await rec(n - 1)  # rec recurses

async def rec_busy(n):
    if n == 0:
        while True:
            sum(range(2000))  # rec_busy spins
            await asyncio.sleep(0)
    await rec_busy(n - 1)  # rec_busy recurses

async def main():
    ts = [
        asyncio.create_task(anext(agen()), name="anext-task"),
        asyncio.create_task(consumer(), name="consumer"),
        asyncio.create_task(closer(), name="closer"),
        asyncio.create_task(rec(3), name="rec"),
        asyncio.create_task(rec_busy(3), name="rec-busy"),
    ]
    await asyncio.sleep(0.2)
    print("ready", flush=True)
    await asyncio.gather(*ts)  # main gathers

asyncio.run(main())
"#;

/// `target.py:func:N` for the line of [`AGEN_PY`] marked `# mark`.
fn agen_frame(func: &str, mark: &str) -> String {
    let n = AGEN_PY
        .lines()
        .position(|l| l.ends_with(&format!("# {mark}")))
        .unwrap_or_else(|| panic!("no line marked {mark:?}"))
        + 1;
    format!("target.py:{func}:{n}")
}

fn start_agen(it: &Interp) -> Target {
    let mut t = spawn(it, AGEN_PY, &[], &[]);
    t.wait_for("ready", Duration::from_secs(120));
    t
}

/// The blocked tasks' stacks of [`AGEN_PY`] in mode `all`, collapsed
/// without tids and with the standard library's lines left out.
fn expected_agen_blocked() -> BTreeSet<String> {
    let main = format!("<task>:Task-1:0;{}", agen_frame("main", "main gathers"));
    let sleep = "tasks.py:sleep";
    let rec = agen_frame("rec", "rec recurses");
    [
        format!(
            "{main};<task>:anext-task:0;{};{sleep}",
            agen_frame("agen", "agen waits")
        ),
        format!(
            "{main};<task>:consumer:0;{};{};{sleep}",
            agen_frame("consumer", "consumer iterates"),
            agen_frame("agen2", "agen2 waits")
        ),
        format!(
            "{main};<task>:closer:0;{};{};{sleep}",
            agen_frame("closer", "closer closes"),
            agen_frame("closer_gen", "closer_gen finally waits")
        ),
        format!(
            "{main};<task>:rec:0;{rec};{rec};{rec};{};{sleep}",
            agen_frame("rec", "rec bottom waits")
        ),
    ]
    .into_iter()
    .collect()
}

fn agen_blocked(stacks: &BTreeSet<String>) -> BTreeSet<String> {
    stacks
        .iter()
        .filter(|s| !s.contains("<task>:rec-busy:0"))
        .map(|s| without_stdlib_lines(strip_tid(s)))
        .collect()
}

/// Mode `running`: the spinning task's stacks that show its loop hold all
/// four `rec_busy` frames and nothing of the event loop below them (with
/// `every`, each one; else at least one: the reference reads without
/// checking, and now and then shows a torn stack).
fn check_agen_running(who: &str, stacks: &BTreeSet<String>, every: bool) {
    let spin = agen_frame("rec_busy", "rec_busy spins");
    let rec = agen_frame("rec_busy", "rec_busy recurses");
    let want = format!(
        "<task>:Task-1:0;{};<task>:rec-busy:0;{rec};{rec};{rec};{spin}",
        agen_frame("main", "main gathers")
    );
    let spinning: Vec<&str> = stacks
        .iter()
        .map(|s| strip_tid(s))
        .filter(|s| s.contains(&spin))
        .collect();
    assert!(
        !spinning.is_empty(),
        "{who}: the spinning task never showed its loop:\n{stacks:#?}"
    );
    if every {
        // Root first: the task's part must be whole; a callee of the spin
        // line may sit above it (`sleep` read from the slot the last
        // iteration's call left, on the slower debug builds).
        for s in spinning {
            assert!(
                s == want || s.starts_with(&format!("{want};")),
                "{who}: the recursive task's running stack\n  got: {s}\n want: {want}"
            );
        }
    } else {
        assert!(
            spinning.contains(&want.as_str()),
            "{who}: no running stack of the recursive task is {want:?}:\n{spinning:#?}"
        );
    }
}

#[test]
fn async_generators_and_recursion_equal_the_references_on_3_15() {
    let it = interp(15, false);
    let t = start_agen(&it);
    let all = ["--async-aware", "--async-mode", "all"];
    let ours = tachyon_collapsed(&t, &all);
    let theirs = reference_collapsed(&t, &all);
    assert_eq!(agen_blocked(&ours), expected_agen_blocked(), "tachyon");
    assert_eq!(agen_blocked(&theirs), expected_agen_blocked(), "reference");
    let blocked = |s: &BTreeSet<String>| -> BTreeSet<String> {
        s.iter()
            .filter(|x| !x.contains("<task>:rec-busy:0"))
            .cloned()
            .collect()
    };
    assert_eq!(blocked(&ours), blocked(&theirs), "the same run, whole");

    let ours = tachyon_collapsed(&t, &["--async-aware", "--async-mode", "running"]);
    let theirs = reference_collapsed(&t, &["--async-aware", "--async-mode", "running"]);
    check_agen_running("tachyon", &ours, true);
    check_agen_running("reference", &theirs, false);
}

#[test]
fn a_dump_with_an_anext_task_shows_every_task_as_the_reference() {
    let it = interp(15, false);
    let t = start_agen(&it);
    let pid = t.pid().to_string();
    let (ours, theirs) = both_dumps(&pid);
    assert_eq!(ours.len(), 5, "one section per leaf task:\n{ours:#?}");
    let anext = ours
        .iter()
        .find(|s| s.1.contains("\"<task>\", in anext-task"))
        .unwrap_or_else(|| panic!("no anext task:\n{ours:#?}"));
    let under = anext.1.split_once("in anext-task\n").unwrap().1;
    let first = under.lines().next().unwrap_or("");
    assert!(
        first.contains("target.py\", line") && first.ends_with(", in agen"),
        "agen's frame is not right under its task:\n{}",
        anext.1
    );
    for (id, lines) in &ours {
        if lines.contains("\"<task>\", in rec-busy") {
            continue;
        }
        let reference = &theirs
            .iter()
            .find(|s| s.0 == *id)
            .unwrap_or_else(|| panic!("task {id} not in the reference's dump"))
            .1;
        assert_eq!(lines, reference, "task {id}");
    }
}

#[test]
fn async_generators_and_recursion_on_3_14_and_the_debug_builds() {
    for (minor, debug) in [(14, false), (14, true), (15, true)] {
        let it = interp(minor, debug);
        let t = start_agen(&it);
        let all = ["--async-aware", "--async-mode", "all"];
        assert_eq!(
            agen_blocked(&tachyon_collapsed(&t, &all)),
            expected_agen_blocked(),
            "{}",
            it.name
        );
        let running = tachyon_collapsed(&t, &["--async-aware", "--async-mode", "running"]);
        check_agen_running(&it.name, &running, true);
    }
}

/// Tasks whose coroutines hold arguments and locals, blocked in
/// `asyncio.sleep`, under one gathering task.
const LOCALS_PY: &str = r#"
import asyncio
async def leaf(n, label):
    data = {"n": n}
    await asyncio.sleep(3600)
async def main():
    tag = "main-tag"
    await asyncio.gather(leaf(1, "one"), leaf(2, "two"))
async def ready():
    await asyncio.sleep(0.2)
    print("ready", flush=True)
async def both():
    await asyncio.gather(main(), ready())
asyncio.run(both())
"#;

/// `dump --locals --async-aware`: each task's coroutine frames carry
/// their own arguments and locals, in text and JSON, on 3.14 and 3.15.
#[test]
fn dump_locals_shows_each_tasks_coroutine_locals() {
    for minor in [14, 15] {
        let it = interp(minor, false);
        let mut t = spawn(&it, LOCALS_PY, &[], &[]);
        t.wait_for("ready", Duration::from_secs(120));
        let pid = t.pid().to_string();
        let json = run_ok(
            "tachyon dump --locals --async-aware --json",
            Command::new(tachyon_bin()).args([
                "dump",
                "--locals",
                "--async-aware",
                "--json",
                "--blocking",
                &pid,
            ]),
        );
        let dir = RootDir::new(&[]);
        let file = dir.outside("dump.json");
        std::fs::write(&file, &json).unwrap();
        common::validate_schema("docs/dump.schema.json", &[&file]);
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        // Per leaf task: its `leaf` frame's (n, label, data), and the
        // `main` frame's tag above it.
        let mut seen = BTreeSet::new();
        for task in doc["tasks"].as_array().unwrap() {
            let frames = task["frames"].as_array().unwrap();
            let local = |function: &str, name: &str| -> Option<String> {
                let f = frames.iter().find(|f| f["function"] == function)?;
                let l = f["locals"].as_array()?.iter().find(|l| l["name"] == name)?;
                Some(l["repr"].as_str()?.to_owned())
            };
            let Some(n) = local("leaf", "n") else {
                continue;
            };
            assert_eq!(
                local("main", "tag").as_deref(),
                Some("'main-tag'"),
                "3.{minor}: {task:#}"
            );
            assert_eq!(
                local("leaf", "data"),
                Some(format!("{{'n': {n}}}")),
                "3.{minor}"
            );
            seen.insert((n, local("leaf", "label").unwrap()));
        }
        let want: BTreeSet<(String, String)> = [("1", "'one'"), ("2", "'two'")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(seen, want, "3.{minor}: the leaf tasks' locals:\n{json}");
        let text = run_ok(
            "tachyon dump --locals --async-aware",
            Command::new(tachyon_bin()).args(["dump", "-l", "--async-aware", &pid]),
        );
        assert!(
            text.contains("        label: 'two'\n") && text.contains("        tag: 'main-tag'\n"),
            "3.{minor}:\n{text}"
        );
    }
}
