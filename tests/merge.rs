//! `--subprocesses --merge`: one output for the whole process tree, each
//! process a section of its own, on the sid interpreters (3.13, 3.14,
//! 3.15): a root per process in the collapsed stacks and the flame graph
//! (which loads in headless Chromium without console errors), process
//! tracks in gecko, a profile per process in speedscope (checked against
//! speedscope's own schema), process records in JSON lines, a pid label
//! on pprof samples (read by `go tool pprof`), one merged
//! pstats table that Python's `pstats` reads; under `run` and `attach`.
//! `--merge` without `--subprocesses`, and with `--binary`, are refused.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Interp, RootDir, Running, children, collapsed, go_pprof, ok, one_at_a_time, release,
    sid_interpreters, sid_root, tachyon_bin, text, validate_speedscope,
};
use serde_json::Value;

/// Loads a pstats file with the standard library: the functions it holds.
const LOAD_PSTATS: &str = r#"
import pstats, sys
s = pstats.Stats(sys.argv[1])
for (path, line, name), (cc, nc, tt, ct, callers) in s.stats.items():
    print("FUNC", name, nc)
"#;

fn py315() -> Interp {
    release(sid_interpreters())
        .into_iter()
        .find(|i| i.minor == 15)
        .expect("MISSING TOOL: sid python3.15")
}

/// A merged run's processes: the parent and the workers that took a task.
struct Tree {
    parent: u32,
    workers: Vec<u32>,
}

impl Tree {
    fn all(&self) -> BTreeSet<u32> {
        self.workers.iter().copied().chain([self.parent]).collect()
    }
}

/// `tachyon run --subprocesses --merge FORMAT -o DIR/NAME -- chroot SID
/// python POOL`, to its end; the processes it printed, and tachyon's
/// standard error.
fn run_pool(it: &Interp, dir: &RootDir, format: &str, name: &str) -> (Tree, String) {
    run_pool_with(it, dir, format, name, "fork")
}

/// [`run_pool`] with the pool's start `method`.
fn run_pool_with(
    it: &Interp,
    dir: &RootDir,
    format: &str,
    name: &str,
    method: &str,
) -> (Tree, String) {
    let cmd = children::run_python(it, dir, &["--merge", format], name, "pool.py", &[method]);
    let (stdout, stderr) = children::succeeds(&it.name, cmd, Duration::from_secs(180));
    let (workers, parent) = children::pool_pids(&stdout);
    let workers: Vec<u32> = workers.into_iter().map(|w| w as u32).collect();
    let parent = parent as u32;
    // The summary counts every process, and its rate is per process: each
    // is sampled at most at the requested (default 1 kHz) rate, where the
    // sum over processes would be about five times that.
    let captured = stdout
        .lines()
        .find(|l| l.starts_with("Captured "))
        .unwrap_or_else(|| panic!("{}: no summary in:\n{stdout}", it.name));
    let processes: usize = captured
        .split(" from ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}: no process count in {captured:?}", it.name));
    assert!(processes > workers.len(), "{}: {captured}", it.name);
    let rate: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Sample rate: "))
        .and_then(|r| r.strip_suffix(" samples/sec per process"))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("{}: no per-process rate in:\n{stdout}", it.name));
    assert!(
        rate > 0.0 && rate <= 1100.0,
        "{}: {rate} samples/sec per process",
        it.name
    );
    // One output: no file of a child's own beside it.
    let stem = Path::new(name).file_stem().unwrap().to_string_lossy();
    for w in &workers {
        let own = std::fs::read_dir(&dir.outside)
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| {
                e.file_name()
                    .to_string_lossy()
                    .contains(&format!("{stem}_{w}"))
            });
        assert!(
            own.is_none(),
            "{}: worker {w} has a file of its own",
            it.name
        );
    }
    (Tree { parent, workers }, stderr)
}

/// Collapsed lines by process: pid → (the process's command, its lines'
/// stacks and counts).
fn collapsed_sections(body: &str) -> BTreeMap<u32, (String, Vec<(String, u64)>)> {
    let mut out: BTreeMap<u32, (String, Vec<(String, u64)>)> = BTreeMap::new();
    for (stack, n) in collapsed::parse(body) {
        let line = &stack;
        let (first, rest) = stack.split_once(';').unwrap();
        let head = first
            .strip_prefix("process ")
            .unwrap_or_else(|| panic!("a line without its process: {line}"));
        let (pid, command) = head.split_once(' ').unwrap();
        let command = command
            .strip_prefix('(')
            .unwrap()
            .strip_suffix(')')
            .unwrap();
        let e = out
            .entry(pid.parse().unwrap())
            .or_insert_with(|| (command.to_string(), Vec::new()));
        assert_eq!(e.0, command, "one command per process: {line}");
        e.1.push((rest.to_string(), n));
    }
    out
}

#[test]
fn collapsed_has_a_section_per_process_on_every_sid_interpreter() {
    let _serial = one_at_a_time();
    let runs = release(sid_interpreters())
        .into_iter()
        .map(|it| (it, "fork"))
        // Spawned workers exec a new interpreter: followed into it, still
        // one section each.
        .chain([(py315(), "spawn")]);
    for (it, method) in runs {
        let dir = RootDir::new(&[("pool.py", children::POOL)]);
        let (tree, stderr) = run_pool_with(&it, &dir, "--collapsed", "out.txt", method);
        let body = std::fs::read_to_string(dir.outside("out.txt")).unwrap();
        let sections = collapsed_sections(&body);
        for w in &tree.workers {
            let (command, lines) = sections
                .get(w)
                .unwrap_or_else(|| panic!("{}: no section for worker {w}:\n{stderr}", it.name));
            // A fork runs its parent's command; a spawned worker its own.
            let runs = if method == "fork" {
                "pool.py"
            } else {
                "multiprocessing"
            };
            assert!(command.contains(runs), "{} {method}: {command}", it.name);
            assert!(
                collapsed::samples_with(lines, "burn_in_worker") > 0,
                "{}: worker {w}'s section has no burn_in_worker",
                it.name
            );
            // A section's threads are its process's own.
            assert!(lines.iter().all(|(s, _)| s.starts_with("tid:")));
        }
        let (_, parent) = sections
            .get(&tree.parent)
            .unwrap_or_else(|| panic!("{}: no section for the parent", it.name));
        assert!(
            collapsed::samples_with(parent, "<module>") > 0,
            "{}",
            it.name
        );
        // The parent only waits for the pool: the work is the workers'.
        assert_eq!(
            collapsed::samples_with(parent, "burn_in_worker"),
            0,
            "{}",
            it.name
        );
        // No process but the tree's.
        for pid in sections.keys() {
            assert!(
                tree.all().contains(pid) || stderr.contains(&format!("child process {pid}")),
                "{}: a section for {pid}, not profiled",
                it.name
            );
        }
    }
}

#[test]
fn the_flame_graph_has_a_root_per_process_and_loads_in_chromium() {
    let _serial = one_at_a_time();
    let it = py315();
    let dir = RootDir::new(&[("pool.py", children::POOL)]);
    let (tree, _) = run_pool(&it, &dir, "--flamegraph", "fg.html");
    let html = std::fs::read_to_string(dir.outside("fg.html")).unwrap();
    let v = common::flame_data(&html);
    let strings: Vec<&str> = v["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let frames: Vec<i64> = v["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    let nodes: Vec<i64> = v["tree"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    // Node 0 is "all"; its children are the processes, kind 6.
    let mut roots = BTreeMap::new();
    let mut under: BTreeMap<usize, usize> = BTreeMap::new();
    let mut labels = Vec::new();
    for (n, pair) in nodes.chunks(2).enumerate() {
        let label = if pair[1] < 0 {
            String::new()
        } else {
            strings[frames[pair[1] as usize * 5] as usize].to_string()
        };
        if n > 0 && pair[0] == 0 {
            let f = &frames[pair[1] as usize * 5..][..5];
            assert_eq!(f[4], 6, "a root that is no process: {label}");
            let pid: u32 = label
                .rsplit_once("(pid ")
                .and_then(|(_, p)| p.strip_suffix(')'))
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("a root not named by its pid: {label}"));
            assert!(label.contains("pool.py"), "{label}");
            roots.insert(pid, n);
        }
        // Each node's process root.
        let root = if n > 0 && pair[0] == 0 {
            n
        } else {
            under.get(&(pair[0] as usize)).copied().unwrap_or(0)
        };
        under.insert(n, root);
        labels.push(label);
    }
    assert_eq!(v["processes"].as_u64(), Some(roots.len() as u64));
    for pid in tree.all() {
        assert!(roots.contains_key(&pid), "no root for {pid}: {roots:?}");
    }
    for w in &tree.workers {
        let root = roots[w];
        assert!(
            labels
                .iter()
                .enumerate()
                .any(|(n, l)| l == "burn_in_worker" && under[&n] == root),
            "worker {w}'s root has no burn_in_worker"
        );
    }
    let dom = common::chromium(
        &format!("file://{}", dir.outside("fg.html").display()),
        None,
    );
    assert!(
        dom.contains("data-ready"),
        "the page's script did not finish"
    );
    assert!(dom.contains(">process</span>"), "no process in the legend");
}

fn json_file(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn gecko_speedscope_jsonl_and_pprof_have_each_process() {
    let _serial = one_at_a_time();
    let it = release(sid_interpreters())
        .into_iter()
        .find(|i| i.minor == 14)
        .expect("MISSING TOOL: sid python3.14");
    let dir = RootDir::new(&[("pool.py", children::POOL)]);

    // gecko: every thread under its own process's pid, named after it.
    let (tree, _) = run_pool(&it, &dir, "--gecko", "g.json");
    let g = json_file(&dir.outside("g.json"));
    let mut pids = BTreeSet::new();
    for t in g["threads"].as_array().unwrap() {
        let pid: u32 = t["pid"].as_str().unwrap().parse().unwrap();
        let name = t["processName"].as_str().unwrap();
        assert!(name.ends_with(&format!("(pid {pid})")), "{name}");
        pids.insert(pid);
    }
    for pid in tree.all() {
        assert!(pids.contains(&pid), "gecko: no thread of {pid}: {pids:?}");
    }

    // speedscope: valid, a profile per process and thread.
    let (tree, _) = run_pool(&it, &dir, "--speedscope", "s.json");
    validate_speedscope(&[&dir.outside("s.json")]);
    let s = json_file(&dir.outside("s.json"));
    // A frame per line: `burn_in_worker` is one at each of its lines.
    let burn: BTreeSet<usize> = s["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, f)| f["name"] == "burn_in_worker")
        .map(|(i, _)| i)
        .collect();
    assert!(!burn.is_empty(), "speedscope: no burn_in_worker frame");
    for pid in tree.all() {
        let mine: Vec<&Value> = s["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| {
                p["name"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("(pid {pid}) thread "))
            })
            .collect();
        assert!(!mine.is_empty(), "speedscope: no profile of {pid}");
        let burns = mine.iter().any(|p| {
            p["samples"].as_array().unwrap().iter().any(|st| {
                st.as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f.as_u64().is_some_and(|f| burn.contains(&(f as usize))))
            })
        });
        assert_eq!(burns, pid != tree.parent, "speedscope: {pid}'s stacks");
    }

    // JSON lines: a process record each, its agg records with its pid.
    let (tree, _) = run_pool(&it, &dir, "--jsonl", "j.jsonl");
    let records: Vec<Value> = std::fs::read_to_string(dir.outside("j.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |t: &'static str| records.iter().filter(move |r| r["type"] == t);
    let strings: BTreeMap<u64, &str> = of("string_table")
        .flat_map(|r| r["strings"].as_array().unwrap())
        .map(|e| (e["str_id"].as_u64().unwrap(), e["value"].as_str().unwrap()))
        .collect();
    let burn: BTreeSet<u64> = of("frame_table")
        .flat_map(|r| r["frames"].as_array().unwrap())
        .filter(|f| strings[&f["func_str_id"].as_u64().unwrap()] == "burn_in_worker")
        .map(|f| f["frame_id"].as_u64().unwrap())
        .collect();
    assert!(!burn.is_empty(), "jsonl: no burn_in_worker frame");
    let processes: BTreeMap<u64, u64> = of("process")
        .map(|r| {
            (
                r["pid"].as_u64().unwrap(),
                r["samples_total"].as_u64().unwrap(),
            )
        })
        .collect();
    for pid in tree.all() {
        let total = processes[&(pid as u64)];
        let aggs: Vec<&Value> = of("agg").filter(|r| r["pid"] == pid).collect();
        assert!(!aggs.is_empty(), "jsonl: no agg of {pid}");
        let mut burned = 0;
        for a in &aggs {
            assert_eq!(a["samples_total"].as_u64(), Some(total));
            for e in a["entries"].as_array().unwrap() {
                let c = e["cumulative"].as_u64().unwrap();
                assert!(c <= total, "jsonl: {pid}: {e}");
                if burn.contains(&e["frame_id"].as_u64().unwrap()) {
                    burned += c;
                }
            }
        }
        assert_eq!(burned > 0, pid != tree.parent, "jsonl: {pid}");
    }
    // Every agg is some process's; the end counts them all.
    assert!(of("agg").all(|r| r["pid"].is_u64()));
    let end = of("end").next().unwrap()["samples_total"].as_u64().unwrap();
    assert_eq!(end, processes.values().sum::<u64>());

    // pprof: one table, each sample with its process's pid label.
    let (tree, _) = run_pool(&it, &dir, "--pprof", "p.pb.gz");
    let tags = go_pprof(&["-tags"], &dir.outside("p.pb.gz"));
    let pids: BTreeSet<u32> = tags
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("pid:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.rsplit(": ").next()?.trim().parse().ok())
        .collect();
    for pid in tree.all() {
        assert!(pids.contains(&pid), "pprof: no pid label {pid}:\n{tags}");
    }
    for w in &tree.workers {
        let top = go_pprof(
            &["-top", "-tagfocus", &format!("pid={w}")],
            &dir.outside("p.pb.gz"),
        );
        assert!(top.contains("burn_in_worker"), "pprof: worker {w}:\n{top}");
    }
}

#[test]
fn a_merged_pstats_file_loads_in_python_with_the_workers_function() {
    let _serial = one_at_a_time();
    let it = py315();
    let dir = RootDir::new(&[("pool.py", children::POOL), ("load.py", LOAD_PSTATS)]);
    let (_, _) = run_pool(&it, &dir, "--pstats", "out.pstats");
    let out = Running::start({
        let mut c = Command::new("chroot");
        c.arg(sid_root())
            .arg(&it.exe)
            .arg(dir.inside("load.py"))
            .arg(dir.inside("out.pstats"));
        c
    })
    .finish(Duration::from_secs(30));
    let stdout = ok(out, "python's pstats");
    let calls = |name: &str| -> u64 {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix("FUNC "))
            .filter(|l| l.split_whitespace().next() == Some(name))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum()
    };
    assert!(calls("burn_in_worker") > 0, "{stdout}");
    assert!(calls("<module>") > 0, "{stdout}");
}

#[test]
fn attach_merges_the_workers_of_a_running_process() {
    let _serial = one_at_a_time();
    let it = py315();
    let mut target = common::spawn(&it, children::LONG_WORKERS, &[], &[]);
    let ready = target.wait_for("READY", Duration::from_secs(60));
    let workers: Vec<u32> = children::pids_after(&ready, "READY ")
        .into_iter()
        .map(|w| w as u32)
        .collect();
    assert_eq!(workers.len(), 2, "{ready}");
    let dir = RootDir::new(&[]);
    let mut cmd = Command::new(tachyon_bin());
    cmd.args([
        "attach",
        "--subprocesses",
        "--merge",
        "--collapsed",
        "-d",
        "2",
        "-o",
    ])
    .arg(dir.outside("out.txt"))
    .arg(target.pid().to_string());
    let started = Instant::now();
    let out = Running::start(cmd).finish(Duration::from_secs(120));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(started.elapsed() < Duration::from_secs(100));
    let body = std::fs::read_to_string(dir.outside("out.txt")).unwrap();
    let sections = collapsed_sections(&body);
    for w in &workers {
        let (_, lines) = sections
            .get(w)
            .unwrap_or_else(|| panic!("no section for worker {w}:\n{stderr}"));
        assert!(
            collapsed::samples_with(lines, "early_worker") > 0,
            "worker {w}"
        );
    }
    let (_, parent) = sections
        .get(&(target.pid() as u32))
        .unwrap_or_else(|| panic!("no section for the attached process:\n{stderr}"));
    assert!(collapsed::samples_with(parent, "<module>") > 0);
    assert_eq!(collapsed::samples_with(parent, "early_worker"), 0);
    assert_eq!(collapsed::samples_with(parent, "spin"), 0);
    // Only the output asked for: no file per worker.
    let files: Vec<String> = std::fs::read_dir(&dir.outside)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["out.txt"]);
    drop(target);
}

/// `run --subprocesses --merge -- COMMAND` running two programs one after
/// the other: each in the output once, under its own pid, whether the main
/// profile followed the second or it was profiled as a child.
#[test]
fn a_commands_programs_are_each_merged_once() {
    let _serial = one_at_a_time();
    let it = py315();
    let (a, b) = (children::work_of("a", 0.6), children::work_of("b", 0.6));
    let dir = RootDir::new(&[("a.py", &a), ("b.py", &b)]);
    let exe = it.exe.display().to_string();
    let script = format!("{exe} {}; {exe} {}", dir.inside("a.py"), dir.inside("b.py"));
    let mut cmd = Command::new(tachyon_bin());
    cmd.args(children::run_args(
        &["--merge", "--collapsed"],
        &dir.outside("out.txt"),
    ))
    .args(["sh", "-c", &script]);
    let (stdout, stderr) = children::succeeds(&it.name, cmd, Duration::from_secs(120));
    let pid_of = |tag: &str| -> u32 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(tag)?.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {tag:?} in {stdout}"))
    };
    let sections = collapsed_sections(&std::fs::read_to_string(dir.outside("out.txt")).unwrap());
    for (name, pid) in [("a", pid_of("a ")), ("b", pid_of("b "))] {
        let function = format!("work_of_{name}");
        for (p, (_, lines)) in &sections {
            let n = collapsed::samples_with(lines, &function);
            assert_eq!(n > 0, *p == pid, "{function} in process {p}:\n{stderr}");
        }
        // Sampled by one profile: followed, or a child, never both.
        let followed = stderr.contains(&format!("following Python process {pid}\n"));
        let child = stderr.contains(&format!("profiling child process {pid}\n"));
        assert!(
            !(followed && child),
            "{name} ({pid}) sampled twice:\n{stderr}"
        );
    }
}

/// `subprocess.run(["sleep", ...])` forks (vforks, on 3.13+) and execs a
/// program that is not Python: caught before its exec, such a child shows
/// only its parent's stack, so it has no section in the merged output.
#[test]
fn children_that_exec_another_program_leave_no_section() {
    let _serial = one_at_a_time();
    for it in release(sid_interpreters()) {
        let dir = RootDir::new(&[("sleeps.py", children::RUNS_SLEEP)]);
        let flags = ["--merge", "--collapsed"];
        let cmd = children::run_python(&it, &dir, &flags, "out.txt", "sleeps.py", &[]);
        let (stdout, stderr) = children::succeeds(&it.name, cmd, Duration::from_secs(120));
        assert!(stdout.contains("DONE"), "{stdout}");
        let body = std::fs::read_to_string(dir.outside("out.txt")).unwrap();
        let sections = collapsed_sections(&body);
        assert_eq!(
            sections.len(),
            1,
            "{}: {:?}\n{stderr}",
            it.name,
            sections.keys()
        );
    }
}

/// `tachyon ARGS` on a process that does not exist: refused before it
/// looks for one.
fn refused(args: &[&str]) -> String {
    let out = Command::new(tachyon_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: {}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    err.lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("{args:?}: no error line: {err}"))
        .to_string()
}

#[test]
fn merge_without_subprocesses_or_with_binary_is_refused() {
    for sub in [
        vec!["attach", "--merge", "--collapsed", "999999999"],
        vec!["run", "--merge", "--collapsed", "x.py"],
    ] {
        let line = refused(&sub);
        assert!(
            line.contains("--merge") && line.contains("use it with --subprocesses"),
            "{line}"
        );
    }
    let line = refused(&[
        "attach",
        "--subprocesses",
        "--merge",
        "--binary",
        "999999999",
    ]);
    assert!(
        line.contains("--merge cannot be combined with --binary"),
        "{line}"
    );
}
