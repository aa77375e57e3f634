//! `--opcodes`: the instruction each frame is at, on every supported
//! interpreter (the sid root's 3.13-3.15 and their debug builds, pyenv 3.13,
//! and 3.11/3.12 from pyenv and Debian), against the reference on 3.15.
//!
//! The target (fixtures/targets/opcodes_park.py) parks its main thread after
//! warm-up: the call in `outer` is then specialised (CALL_PY_EXACT_ARGS),
//! the property read in `inner` too (LOAD_ATTR_PROPERTY from 3.12; 3.11
//! cannot specialise it and leaves LOAD_ATTR_ADAPTIVE), and the getter sleeps
//! in a call made once (CALL; 3.11 specialises its PRECALL on first use).
//! 3.11/3.12 callers point at the last cache unit of their call, so this also
//! checks the step back over the caches.
//!
//! On 3.15 the differential flame graph of the parked target, live and
//! replayed with opcodes, shows each frame's instruction in its box's
//! tooltip when headless Chromium points at it, and no opcodes without.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    Interp, RootDir, TempDir, body_attr, machine_old_interpreters, machine_supported_interpreters,
    run_ok, sid_interpreters, spawn, tachyon_bin, tachyon_ok,
};

const TARGET_PY: &str = include_str!("../fixtures/targets/opcodes_park.py");

/// Every interpreter tachyon reads.
fn all_interpreters() -> Vec<Interp> {
    let mut v = sid_interpreters();
    v.extend(machine_supported_interpreters());
    v.extend(machine_old_interpreters());
    v
}

/// The frames of the parked stack, root first: (function, opcode shown).
fn expected(minor: u8) -> Vec<(&'static str, &'static str)> {
    let (property, sleep) = if minor == 11 {
        (
            "LOAD_ATTR_ADAPTIVE (LOAD_ATTR)",
            "PRECALL_NO_KW_BUILTIN_O (PRECALL)",
        )
    } else {
        ("LOAD_ATTR_PROPERTY (LOAD_ATTR)", "CALL")
    };
    vec![
        ("<module>", "CALL"),
        ("outer", "CALL_PY_EXACT_ARGS (CALL)"),
        ("inner", property),
        ("Box.slow", sleep),
    ]
}

/// `(function, opcode)` of each `File ...` line of a dump, root first;
/// `None` as the opcode where the line shows none.
fn frames_of(dump: &str) -> Vec<(String, Option<String>)> {
    dump.lines()
        .filter(|l| l.starts_with("  File "))
        .map(|l| {
            let (head, op) = match l.split_once("  opcode=") {
                Some((h, op)) => (h, Some(op.to_string())),
                None => (l, None),
            };
            let func = head.rsplit_once(", in ").map_or("", |(_, f)| f);
            (func.to_string(), op)
        })
        .collect()
}

/// tachyon's `dump --opcodes`, from `cwd`.
fn tachyon_dump(pid: i32, cwd: &Path) -> String {
    run_ok(
        "tachyon dump --opcodes",
        Command::new(tachyon_bin())
            .args(["dump", "--opcodes", &pid.to_string()])
            .current_dir(cwd),
    )
}

/// Dump until the main thread is in the getter's sleep (the target prints
/// READY just before it), or fail after a generous wait.
fn parked_dump(it: &Interp, pid: i32) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = tachyon_dump(pid, Path::new("/"));
        if d.contains("in Box.slow") && d.contains("time.sleep(1000)") {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "{}: the target never parked in its sleep:\n{d}",
            it.name
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_parked(it: &Interp) -> common::Target {
    let mut t = spawn(it, TARGET_PY, &[], &[]);
    t.wait_for("READY", Duration::from_secs(60));
    t
}

#[test]
fn dump_names_each_frames_instruction_on_every_version() {
    for it in all_interpreters() {
        let t = start_parked(&it);
        let d = parked_dump(&it, t.pid());
        let got: Vec<(String, Option<String>)> = frames_of(&d);
        let want: Vec<(String, Option<String>)> = expected(it.minor)
            .into_iter()
            .map(|(f, o)| (f.to_string(), Some(o.to_string())))
            .collect();
        assert_eq!(got, want, "{}: dump --opcodes:\n{d}", it.name);
        // Without the flag, no opcodes at all.
        let plain = run_ok(
            "tachyon dump",
            Command::new(tachyon_bin()).args(["dump", &t.pid().to_string()]),
        );
        assert!(!plain.contains("opcode="), "{}: {plain}", it.name);
    }
}

#[test]
fn dump_agrees_with_the_reference_on_3_15() {
    for it in sid_interpreters().into_iter().filter(|i| i.minor == 15) {
        let t = start_parked(&it);
        let ours = parked_dump(&it, t.pid());
        let root = it.root.as_deref().unwrap();
        let reference = run_ok(
            "reference dump --opcodes",
            Command::new("chroot")
                .arg(root)
                .arg(&it.exe)
                .args(["-m", "profiling.sampling", "dump", "--opcodes"])
                .arg(t.pid().to_string())
                .env("NO_COLOR", "1"),
        );
        let frame_lines = |s: &str| -> Vec<String> {
            s.lines()
                .filter(|l| l.starts_with("  File "))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(
            frame_lines(&ours),
            frame_lines(&reference),
            "{}: ours:\n{ours}\nreference:\n{reference}",
            it.name
        );
        assert!(reference.contains("opcode=CALL_PY_EXACT_ARGS (CALL)"));
    }
}

/// The reference's reader on a `.bin`: its capture config, then
/// `function<TAB>opcode<TAB>samples` for each frame that has an opcode.
const READ_BIN_PY: &str = r#"
import collections, sys
from profiling.sampling.binary_reader import BinaryReader
from profiling.sampling.opcode_utils import format_opcode
counts = collections.Counter()
class C:
    def collect(self, stack_frames, timestamps_us=None):
        n = len(timestamps_us) if timestamps_us else 1
        for interp in stack_frames:
            for t in interp.threads:
                for f in t.frame_info:
                    if f.opcode is not None:
                        counts[(f.funcname, format_opcode(f.opcode))] += n
with BinaryReader(sys.argv[1]) as r:
    print(r.get_info()["capture_config"]["opcodes"])
    r.replay_samples(C())
for (fn, op), n in sorted(counts.items()):
    print(f"{fn}\t{op}\t{n}")
"#;

/// The gecko profile's Opcode markers of its first thread, as
/// (name, function, line), and whether its schema has the Opcode entry.
fn gecko_opcodes(path: &Path) -> (bool, Vec<(String, String, i64)>) {
    let p: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let schema = p["meta"]["markerSchema"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["name"] == "Opcode");
    let strings = p["shared"]["stringArray"].as_array().unwrap();
    let m = &p["threads"][0]["markers"];
    let mut v = Vec::new();
    for i in 0..m["length"].as_u64().unwrap() as usize {
        let data = &m["data"][i];
        if data["type"] == "Opcode" {
            assert_eq!(m["category"][i], 7, "the Opcodes category");
            let name = strings[m["name"][i].as_u64().unwrap() as usize]
                .as_str()
                .unwrap();
            assert_eq!(data["opname"], name);
            v.push((
                name.to_string(),
                data["function"].as_str().unwrap().to_string(),
                data["line"].as_i64().unwrap(),
            ));
        }
    }
    v.sort();
    v.dedup();
    (schema, v)
}

#[test]
fn binary_recordings_carry_opcodes_both_ways_on_3_15() {
    for it in sid_interpreters().into_iter().filter(|i| i.minor == 15) {
        let t = start_parked(&it);
        parked_dump(&it, t.pid());
        let pid = t.pid().to_string();
        let dir = RootDir::new(&[("read_bin.py", READ_BIN_PY)]);
        let out = |f: &str| dir.outside(f).to_string_lossy().into_owned();
        // Ours, recorded live and replayed.
        tachyon_ok(
            &[
                "attach",
                "--binary",
                "--opcodes",
                "-d",
                "1",
                "-o",
                &out("ours.bin"),
                &pid,
            ],
            Path::new("/"),
        );
        tachyon_ok(
            &[
                "attach",
                "--gecko",
                "--opcodes",
                "-d",
                "1",
                "-o",
                &out("live.json"),
                &pid,
            ],
            Path::new("/"),
        );
        tachyon_ok(
            &[
                "replay",
                "--gecko",
                "-o",
                &out("replayed.json"),
                &out("ours.bin"),
            ],
            Path::new("/"),
        );
        // The reference's recording, replayed by tachyon.
        let root = it.root.as_deref().unwrap();
        let reference = |args: &[&str]| {
            run_ok(
                "reference",
                Command::new("chroot").arg(root).arg(&it.exe).args(args),
            )
        };
        reference(&[
            "-m",
            "profiling.sampling",
            "attach",
            "--binary",
            "--opcodes",
            "-d",
            "1",
            "-o",
            &dir.inside("ref.bin"),
            &pid,
        ]);
        tachyon_ok(
            &["replay", "--gecko", "-o", &out("ref.json"), &out("ref.bin")],
            Path::new("/"),
        );
        let want = vec![("CALL".to_string(), "Box.slow".to_string(), 16)];
        for f in ["live.json", "replayed.json", "ref.json"] {
            assert_eq!(
                gecko_opcodes(&dir.outside(f)),
                (true, want.clone()),
                "{}: {f}",
                it.name
            );
        }
        // The reference reads our recording as it reads its own: the same
        // frames at the same instructions, in every sample.
        let read = |f: &str| reference(&[&dir.inside("read_bin.py"), &dir.inside(f)]);
        let ours = read("ours.bin");
        let theirs = read("ref.bin");
        let shape = |s: &str| -> Vec<(String, String)> {
            s.lines()
                .skip(1)
                .map(|l| {
                    let v: Vec<&str> = l.split('\t').collect();
                    (v[0].to_string(), v[1].to_string())
                })
                .collect()
        };
        assert!(ours.starts_with("True\n"), "{}: {ours}", it.name);
        assert_eq!(shape(&ours), shape(&theirs), "{}", it.name);
        let want: Vec<(String, String)> = expected(15)
            .into_iter()
            .map(|(f, o)| (f.to_string(), o.to_string()))
            .collect();
        let mut sorted = want.clone();
        sorted.sort();
        assert_eq!(shape(&ours), sorted, "{}: {ours}", it.name);
    }
}

/// The flame graph's opcodes per function (call tree), as shown names.
fn flame_opcodes(html: &str) -> Vec<(String, String)> {
    let d = common::flame_data(html);
    let strings = d["strings"].as_array().unwrap();
    let frames = d["frames"].as_array().unwrap();
    let nodes = d["tree"]["nodes"].as_array().unwrap();
    let ops = d["tree"]["ops"].as_array().expect("ops in the tree");
    let mut v = Vec::new();
    for o in ops.chunks(3) {
        let node = o[0].as_u64().unwrap() as usize;
        let frame = nodes[2 * node + 1].as_u64().unwrap() as usize;
        let func = strings[frames[5 * frame].as_u64().unwrap() as usize]
            .as_str()
            .unwrap();
        let name = d["opnames"][o[1].as_u64().unwrap().to_string()]
            .as_str()
            .unwrap();
        v.push((func.to_string(), name.to_string()));
    }
    v.sort();
    v.dedup();
    v
}

#[test]
fn recordings_replay_into_flame_graphs_and_heatmaps_with_opcodes_on_every_version() {
    for it in all_interpreters() {
        let t = start_parked(&it);
        parked_dump(&it, t.pid());
        let dir = TempDir::new(&it.name);
        let at = |f: &str| dir.join(f).to_string_lossy().into_owned();
        tachyon_ok(
            &[
                "attach",
                "--binary",
                "--opcodes",
                "-d",
                "1",
                "-o",
                &at("r.bin"),
                &t.pid().to_string(),
            ],
            Path::new("/"),
        );
        tachyon_ok(
            &["replay", "--flamegraph", "-o", &at("f.html"), &at("r.bin")],
            Path::new("/"),
        );
        tachyon_ok(
            &["replay", "--heatmap", "-o", &at("h"), &at("r.bin")],
            Path::new("/"),
        );
        let mut want: Vec<(String, String)> = expected(it.minor)
            .into_iter()
            .map(|(f, o)| (f.to_string(), o.to_string()))
            .collect();
        want.sort();
        let html = std::fs::read_to_string(dir.join("f.html")).unwrap();
        assert_eq!(flame_opcodes(&html), want, "{}: flame graph", it.name);
        // The heatmap's page of the target: each frame's line has its panel.
        let page = std::fs::read_to_string(dir.join("h/file_0000.html")).unwrap();
        for (func, op) in expected(it.minor) {
            let line = match func {
                "<module>" => 32,
                "outer" => 28,
                "inner" => 22,
                _ => 16,
            };
            let row = page
                .lines()
                .find(|l| l.starts_with(&format!("<tr id=\"L{line}\"")))
                .unwrap_or_else(|| panic!("{}: no row for line {line}:\n{page}", it.name));
            assert!(
                row.contains("<details class=\"ops\"><summary>1 instruction</summary>")
                    && row.contains(&format!("<tr><td>{op}<td>")),
                "{}: line {line} should show {op}: {row}",
                it.name
            );
        }
    }
}

/// The release python3.15 of the sid root, parked on its specialised
/// instructions (checked with a dump), and a scratch directory `name`.
fn parked_315(name: &str) -> (Interp, common::Target, TempDir) {
    let it = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .unwrap();
    let t = start_parked(&it);
    parked_dump(&it, t.pid());
    (it, t, TempDir::new(name))
}

#[test]
fn a_live_flame_graph_with_opcodes_loads_in_chromium() {
    let (_it, t, dir) = parked_315("live");
    let page = dir.join("f.html");
    tachyon_ok(
        &[
            "attach",
            "--flamegraph",
            "--opcodes",
            "-d",
            "1",
            "-o",
            &page.to_string_lossy(),
            &t.pid().to_string(),
        ],
        Path::new("/"),
    );
    let html = std::fs::read_to_string(&page).unwrap();
    let mut want: Vec<(String, String)> = expected(15)
        .into_iter()
        .map(|(f, o)| (f.to_string(), o.to_string()))
        .collect();
    want.sort();
    assert_eq!(flame_opcodes(&html), want);
    let dom = common::chromium(&format!("file://{}", page.display()), None);
    assert!(
        dom.contains("data-ready="),
        "the page's script did not finish:\n{dom}"
    );
}

/// `html` with a script that points at the first box of each row above
/// the root (flame view, `rows` rows) and keeps each tooltip's text in
/// `data-tip1`, `data-tip2`, ..; then points at row `last` again, whose
/// tooltip stays shown.
fn hover_probe(html: &str, rows: usize, last: usize) -> String {
    html.replace(
        "</body>",
        &format!(
            "<script>(function(){{var c=document.getElementById('fg'),r=c.getBoundingClientRect(),\
             at=function(d){{c.dispatchEvent(new MouseEvent('mousemove',{{clientX:r.left+3,clientY:r.bottom-(d+0.5)*18,bubbles:true}}))}};\
             for(var d=1;d<={rows};d++){{at(d);document.body.dataset['tip'+d]=document.getElementById('tip').textContent;}}\
             at({last});}})();</script></body>"
        ),
    )
}

/// Per node of a page's call tree (`tree`), its function and, from the
/// embedded data, the shown names of the opcodes it has.
fn node_opcodes(html: &str) -> Vec<(String, Vec<String>)> {
    let d = common::flame_data(html);
    let strings = d["strings"].as_array().unwrap();
    let frames = d["frames"].as_array().unwrap();
    let nodes = d["tree"]["nodes"].as_array().unwrap();
    let mut v: Vec<(String, Vec<String>)> = nodes
        .chunks(2)
        .map(|n| match n[1].as_i64().unwrap() {
            -1 => ("all".to_string(), Vec::new()),
            f => (
                strings[frames[5 * f as usize].as_u64().unwrap() as usize]
                    .as_str()
                    .unwrap()
                    .to_string(),
                Vec::new(),
            ),
        })
        .collect();
    let ops = d["tree"]["ops"].as_array().cloned().unwrap_or_default();
    for o in ops.chunks(3) {
        let name = d["opnames"][o[1].as_u64().unwrap().to_string()]
            .as_str()
            .unwrap();
        v[o[0].as_u64().unwrap() as usize].1.push(name.to_string());
    }
    v
}

#[test]
fn a_diff_flame_graph_with_opcodes_shows_them_on_hover_in_chromium() {
    let (_it, t, dir) = parked_315("diff");
    let at = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let pid = t.pid().to_string();
    let attach = |args: &[&str]| {
        let mut all = vec!["attach", "-d", "1"];
        all.extend_from_slice(args);
        all.push(&pid);
        tachyon_ok(&all, Path::new("/"));
    };
    // The baseline, recorded with opcodes; a recording without them.
    attach(&["--binary", "--opcodes", "-o", &at("base.bin")]);
    attach(&["--binary", "-o", &at("plain.bin")]);
    // Live with --opcodes, and the recording with opcodes replayed.
    attach(&[
        "--diff-flamegraph",
        &at("base.bin"),
        "--opcodes",
        "-o",
        &at("live.html"),
    ]);
    tachyon_ok(
        &[
            "replay",
            "--diff-flamegraph",
            &at("base.bin"),
            "-o",
            &at("replay.html"),
            &at("base.bin"),
        ],
        Path::new("/"),
    );
    let mut want: Vec<(String, String)> = expected(15)
        .into_iter()
        .map(|(f, o)| (f.to_string(), o.to_string()))
        .collect();
    want.sort();
    for name in ["live.html", "replay.html"] {
        let html = std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(common::flame_data(&html)["kind"], "diff", "{name}");
        assert_eq!(flame_opcodes(&html), want, "{name}");
        // The pointer over each box of the parked stack: its tooltip names
        // the box's function and the instruction the page's data has for
        // it, the one the target is parked on.
        let nodes = node_opcodes(&html);
        let rows = expected(15).len();
        std::fs::write(dir.join("probe.html"), hover_probe(&html, rows, 2)).unwrap();
        let url = format!("file://{}", dir.join("probe.html").display());
        let dom = common::chromium(&url, None);
        assert!(
            dom.contains("data-ready="),
            "{name}: the script did not finish"
        );
        for (d, (func, op)) in expected(15).into_iter().enumerate() {
            let tip = body_attr(&dom, &format!("data-tip{}", d + 1))
                .unwrap_or_else(|| panic!("{name}: no tooltip on row {}", d + 1));
            let shown = func.replace('<', "&lt;").replace('>', "&gt;");
            assert!(tip.starts_with(&shown), "{name}, row {}: {tip}", d + 1);
            assert!(
                tip.contains(&format!("Instructions:{op} 100.00%")),
                "{name}, {func} should show {op}: {tip}"
            );
            assert!(
                nodes.contains(&(func.to_string(), vec![op.to_string()])),
                "{name}: {func} at {op} not in the data: {nodes:?}"
            );
            assert!(tip.contains("Baseline: "), "{name}: {tip}");
        }
        if name == "live.html" {
            let shot = dir.join("diff-opcodes.png");
            // Outer's tooltip, a specialised call, shown for the picture.
            chromium_shot(&url, &shot);
            common::keep_screenshot(&shot, "diff-opcodes.png");
        }
    }
    // Without opcodes, live or from a recording without them: no opcode
    // data, no instructions in the tooltips.
    attach(&[
        "--diff-flamegraph",
        &at("base.bin"),
        "-o",
        &at("live-plain.html"),
    ]);
    tachyon_ok(
        &[
            "replay",
            "--diff-flamegraph",
            &at("base.bin"),
            "-o",
            &at("replay-plain.html"),
            &at("plain.bin"),
        ],
        Path::new("/"),
    );
    for name in ["live-plain.html", "replay-plain.html"] {
        let html = std::fs::read_to_string(dir.join(name)).unwrap();
        let d = common::flame_data(&html);
        assert!(
            d.get("opnames").is_none() && d["tree"].get("ops").is_none(),
            "{name} has opcode data"
        );
        assert!(
            node_opcodes(&html).iter().any(|(f, _)| f == "outer"),
            "{name} draws the parked stack"
        );
        std::fs::write(dir.join("probe.html"), hover_probe(&html, 2, 2)).unwrap();
        let dom = common::chromium(
            &format!("file://{}", dir.join("probe.html").display()),
            None,
        );
        let tip = body_attr(&dom, "data-tip2").expect("a tooltip");
        assert!(
            tip.starts_with("outer") && !tip.contains("Instructions:"),
            "{name}: {tip}"
        );
    }
}

/// A screenshot of `url`, which must be a sizeable picture.
fn chromium_shot(url: &str, shot: &Path) {
    common::chromium(url, Some(shot));
    assert!(std::fs::metadata(shot).unwrap().len() > 10_000);
}

#[test]
fn opcodes_are_refused_where_the_reference_refuses_them() {
    for args in [
        &["attach", "--opcodes", "--collapsed", "1"][..],
        &["attach", "--opcodes", "1"][..],
        &["attach", "--opcodes", "--jsonl", "1"][..],
    ] {
        let out = Command::new(tachyon_bin()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--opcodes is only compatible with"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn generated_tables_match_the_interpreters() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = TempDir::new("gen");
    let fresh = dir.join("tables.rs");
    run_ok(
        "scripts/gen-opcodes.sh",
        Command::new(repo.join("scripts/gen-opcodes.sh")).arg(&fresh),
    );
    let fresh = std::fs::read_to_string(&fresh).unwrap();
    let checked_in = std::fs::read_to_string(repo.join("src/opcodes/tables.rs")).unwrap();
    assert!(
        fresh == checked_in,
        "src/opcodes/tables.rs is stale: run scripts/gen-opcodes.sh"
    );
}
