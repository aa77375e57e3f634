//! Interpreter shutdown is not the program's profile: a program that keeps
//! a lot of cyclic garbage alive until it exits spends a while in the
//! runtime's exit-time collection, with no Python frame left. Profiled with
//! `tachyon run` on pyenv 3.11 and 3.12 and sid's 3.13, 3.14 and 3.15, its
//! profile has no `<GC>` stack without a Python frame under it, the
//! program's own frames are there, and the summary counts the samples taken
//! during shutdown; the flame graph's page says the same number, and so
//! does `replay` of a recording (which the reference still reads).

mod common;

use common::{
    Interp, RootDir, collapsed, machine_old_interpreters, release, sid_interpreters, tachyon_ok,
};

/// A million objects in 600,000 cycles, reachable from a module global
/// until the runtime clears the modules at exit; then 0.3 s of work.
const PROGRAM: &str = "\
import time
class Node:
    __slots__ = ('other', 'payload')
keep = []
for i in range(600_000):
    a = Node(); b = Node(); a.other = b; b.other = a; a.payload = [b]; b.payload = (a,)
    keep.append(a)
del a, b
def work():
    end = time.time() + 0.3
    while time.time() < end:
        pass
work()
print('DONE', flush=True)
";

/// The interpreters the test needs: every one must be there.
fn interpreters() -> Vec<Interp> {
    let mut v: Vec<Interp> = machine_old_interpreters()
        .into_iter()
        .filter(|i| i.name.starts_with("pyenv-"))
        .collect();
    v.extend(release(sid_interpreters()));
    let minors: Vec<u8> = v.iter().map(|i| i.minor).collect();
    assert_eq!(minors, [11, 12, 13, 14, 15], "{v:?}");
    v
}

/// `tachyon run` of the program under `interp`, writing `out` with `flag`;
/// its standard output.
fn profile(interp: &Interp, dir: &RootDir, flag: &str, out: &str) -> String {
    let exe = interp.exe.to_string_lossy().into_owned();
    let root;
    let script;
    let mut args = vec!["run", flag, "-o", out, "--"];
    match &interp.root {
        Some(r) => {
            root = r.to_string_lossy().into_owned();
            script = dir.inside("exit.py");
            args.extend(["chroot", &root, &exe, &script]);
        }
        None => {
            script = dir.outside("exit.py").to_string_lossy().into_owned();
            args.extend([&exe[..], &script]);
        }
    }
    tachyon_ok(&args, &dir.outside)
}

/// The summary's count of shutdown samples.
fn shutdown_samples(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_suffix(" during interpreter shutdown, not shown"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of shutdown samples in:\n{stdout}"))
}

#[test]
fn exit_time_collection_is_counted_apart_not_profiled() {
    for interp in interpreters() {
        let dir = RootDir::new(&[("exit.py", PROGRAM)]);
        let stdout = profile(&interp, &dir, "--collapsed", "out.txt");
        let name = &interp.name;
        assert!(stdout.contains("DONE"), "{name}: {stdout}");
        let text = std::fs::read_to_string(dir.outside("out.txt")).unwrap();
        // Every stack has a Python frame: none is the runtime's alone.
        let frameless: Vec<String> = collapsed::parse(&text)
            .into_iter()
            .map(|(stack, _)| stack)
            .filter(|stack| {
                collapsed::frames(stack)
                    .skip(1)
                    .all(|f| f.starts_with('<') && !f.contains(':'))
            })
            .collect();
        assert!(frameless.is_empty(), "{name}: {frameless:?}");
        // The program's own frames stay (under two CPU burners, pyenv
        // 3.11 once showed only its `<module>` lines, no `work`).
        assert!(
            text.contains("exit.py:"),
            "{name}: the program's own frames:\n{text}"
        );
        let n = shutdown_samples(&stdout);
        assert!(n > 0, "{name}: {stdout}");
        eprintln!("{name}: {n} samples during shutdown left out");
    }
}

/// sid's python3.15.
fn py315() -> Interp {
    release(sid_interpreters())
        .into_iter()
        .find(|i| i.minor == 15)
        .expect("python3.15 in the sid root")
}

#[test]
fn the_flame_graph_page_counts_the_shutdown_samples() {
    let dir = RootDir::new(&[("exit.py", PROGRAM)]);
    let stdout = profile(&py315(), &dir, "--flamegraph", "f.html");
    page_counts(&dir, "f.html", shutdown_samples(&stdout));
}

#[test]
fn a_recording_keeps_its_shutdown_count_for_replay() {
    let dir = RootDir::new(&[("exit.py", PROGRAM)]);
    let stdout = profile(&py315(), &dir, "--binary", "rec.bin");
    let n = shutdown_samples(&stdout);
    assert!(n > 0, "{stdout}");
    let replayed = tachyon_ok(
        &["replay", "--flamegraph", "-o", "f.html", "rec.bin"],
        &dir.outside,
    );
    assert_eq!(shutdown_samples(&replayed), n, "{replayed}");
    page_counts(&dir, "f.html", n);
    // The count is a string no frame names: the reference reads past it.
    common::reference_replays(&dir);
}

/// The flame graph page `page` counts `n` shutdown samples and has no
/// `<GC>` root.
fn page_counts(dir: &RootDir, page: &str, n: u64) {
    let html = std::fs::read_to_string(dir.outside(page)).unwrap();
    let d = common::flame_data(&html);
    assert_eq!(d["stats"]["shutdown"].as_u64(), Some(n), "{}", d["stats"]);
    // No root of its own: the tree's roots are the program's frames.
    let strings = d["strings"].as_array().unwrap();
    let frames = d["frames"].as_array().unwrap();
    let nodes = d["tree"]["nodes"].as_array().unwrap();
    for pair in nodes.chunks(2).skip(1).filter(|p| p[0] == 0) {
        let f = pair[1].as_u64().unwrap() as usize;
        let func = strings[frames[5 * f].as_u64().unwrap() as usize].as_str();
        assert_ne!(func, Some("<GC>"), "a <GC> root");
    }
}
