//! `dump --locals` on real interpreters (3.11 to 3.15, release and debug
//! builds), against what the target itself says of its locals: the target
//! (fixtures/targets/locals.py) prints Python's own `repr` of each local
//! of its `show` frame and the `id()` of the objects shown by address,
//! then parks; tachyon's dump of that frame must say the same. And against
//! py-spy's `dump --locals` on the same process: every local py-spy names,
//! tachyon names too, with the same value where py-spy writes a plain
//! int, `None` or a bool.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{
    Interp, TempDir, free_threaded_interpreters, machine_old_interpreters, run_ok,
    sid_interpreters, spawn, tachyon_bin,
};
use serde_json::Value;

const TARGET: &str = include_str!("../fixtures/targets/locals.py");

/// Every interpreter the tests read: the sid root's release and debug
/// builds, free-threaded 3.13 (whose object header is 16 bytes longer),
/// Debian's and pyenv's 3.11, pyenv's 3.12.
fn interpreters() -> Vec<Interp> {
    let mut v = sid_interpreters();
    v.extend(free_threaded_interpreters());
    v.extend(machine_old_interpreters());
    v
}

/// `tachyon dump --locals --json --blocking PID`, checked against the
/// document's schema.
fn json_dump(who: &str, pid: i32, dir: &Path) -> Value {
    let text = run_ok(
        who,
        Command::new(tachyon_bin()).args([
            "dump",
            "--locals",
            "--json",
            "--blocking",
            &pid.to_string(),
        ]),
    );
    let file = dir.join(format!("{pid}.json"));
    std::fs::write(&file, &text).unwrap();
    common::validate_schema("docs/dump.schema.json", &[&file]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{who}: {e}:\n{text}"))
}

/// The locals of the main thread's frame running `function`, by name.
fn locals_of(who: &str, doc: &Value, function: &str) -> BTreeMap<String, Value> {
    let frames = doc["threads"][0]["frames"].as_array().expect("frames");
    let f = frames
        .iter()
        .find(|f| f["function"] == function)
        .unwrap_or_else(|| panic!("{who}: no frame {function} in {frames:#?}"));
    let locals = f["locals"]
        .as_array()
        .unwrap_or_else(|| panic!("{who}: {function} has no locals: {f:#}"));
    locals
        .iter()
        .map(|l| (l["name"].as_str().unwrap().to_owned(), l.clone()))
        .collect()
}

fn repr_of<'a>(who: &str, locals: &'a BTreeMap<String, Value>, name: &str) -> &'a str {
    let l = locals
        .get(name)
        .unwrap_or_else(|| panic!("{who}: no local {name:?} in {locals:#?}"));
    l["repr"]
        .as_str()
        .unwrap_or_else(|| panic!("{who}: {name} has no value: {l}"))
}

/// The dump of `show` and of its closure `inner` says what Python says.
fn check_against_python(who: &str, doc: &Value, expect: &Value) {
    let show = locals_of(who, doc, "show");
    let reprs = expect["reprs"].as_object().unwrap();
    // What is cut short or nested deeper than shown is checked apart.
    let apart = [
        "items",
        "nested",
        "long_text",
        "huge",
        "giant",
        "retries (inner)",
    ];
    for (name, want) in reprs.iter().filter(|(n, _)| !apart.contains(&n.as_str())) {
        assert_eq!(
            repr_of(who, &show, name),
            want.as_str().unwrap(),
            "{who}: local {name}"
        );
    }
    let long = repr_of(who, &show, "long_text");
    assert!(
        long.starts_with(&format!("'{}", "y".repeat(150))) && long.ends_with("... (5000 chars)"),
        "{who}: long_text {long}"
    );
    assert_eq!(show["long_text"]["truncated"], true, "{who}");
    // A 1 MiB string and a 10,000-item list, shown bounded.
    let mega = repr_of(who, &show, "mega_text");
    assert!(
        mega.len() < 300 && mega.ends_with("... (1048576 chars)"),
        "{who}: {mega}"
    );
    assert_eq!(
        repr_of(who, &show, "many_items"),
        "[0, 1, 2, 3, 4, 5, 6, 7, ... (10000 items)]",
        "{who}"
    );
    // 300 locals, every one; and a generator's own.
    let many = locals_of(who, doc, "many_locals");
    for i in [0, 150, 299] {
        assert_eq!(
            repr_of(who, &many, &format!("v{i}")),
            i.to_string(),
            "{who}"
        );
    }
    assert_eq!(many.len(), 301, "{who}: v0..v299 and then");
    let generator = locals_of(who, doc, "stepper");
    assert_eq!(
        repr_of(who, &generator, "in_generator"),
        "'gen-local'",
        "{who}"
    );
    assert_eq!(show["long_text"]["len"], 5000, "{who}");
    assert_eq!(
        repr_of(who, &show, "items"),
        "[1, 2.5, 'three', None, True, (4,), {5}, frozenset(), ... (11 items)]",
        "{who}"
    );
    assert_eq!(
        repr_of(who, &show, "nested"),
        "[[1, [2, <list of 2 items>]]]",
        "{who}"
    );
    // Long ints: their first and last digits, then too long to read.
    let digits = reprs["huge"].as_str().unwrap().trim_start_matches('-');
    let n = digits.len();
    assert_eq!(
        repr_of(who, &show, "huge"),
        format!("-{}...{} ({n} digits)", &digits[..20], &digits[n - 10..]),
        "{who}"
    );
    assert!(
        repr_of(who, &show, "giant").starts_with("<int of about "),
        "{who}: giant {}",
        repr_of(who, &show, "giant")
    );
    let ids = &expect["ids"];
    assert_eq!(
        repr_of(who, &show, "conn"),
        format!("<Conn at {}>", ids["conn"].as_str().unwrap()),
        "{who}"
    );
    assert_eq!(
        repr_of(who, &show, "inner"),
        format!("<function at {}>", ids["inner"].as_str().unwrap()),
        "{who}"
    );
    // Arguments (positional, *args, keyword-only, **kw) and the rest.
    for (name, kind) in [
        ("host", "argument"),
        ("port", "argument"),
        ("args", "argument"),
        ("token", "argument"),
        ("kw", "argument"),
        ("retries", "local"),
        ("state", "local"),
    ] {
        assert_eq!(show[name]["kind"], kind, "{who}: {name}");
    }
    // Typed JSON values.
    assert_eq!(show["port"]["value"], 47811, "{who}");
    assert_eq!(show["nothing"]["value"], Value::Null, "{who}");
    assert_eq!(show["flag"]["value"], true, "{who}");
    assert_eq!(
        show["big"]["value"],
        "1".to_owned() + &"0".repeat(40),
        "{who}"
    );
    assert_eq!(
        show["state"]["value"],
        serde_json::json!([["count", 2443879], ["name", "x"], [3, [1, 2]]]),
        "{who}"
    );
    // Not bound yet: `later` is assigned once `inner` returns.
    assert_eq!(show["later"]["unset"], true, "{who}");
    // The closure: its free variable, and a local deleted.
    let inner = locals_of(who, doc, "show.<locals>.inner");
    assert_eq!(
        repr_of(who, &inner, "retries"),
        reprs["retries (inner)"].as_str().unwrap(),
        "{who}: the free variable"
    );
    assert_eq!(inner["unset_here"]["unset"], true, "{who}");
}

/// `py-spy dump --locals`: per function, its locals' names and values.
fn py_spy_locals(pid: i32) -> BTreeMap<String, BTreeMap<String, String>> {
    let py_spy = common::tools().join("py-spy/bin/py-spy");
    let text = run_ok(
        "py-spy dump --locals",
        Command::new(&py_spy).args(["dump", "--locals", "--pid", &pid.to_string()]),
    );
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        let depth = line.len() - line.trim_start().len();
        let line = line.trim();
        match depth {
            4 => {
                let func = line.split(" (").next().unwrap_or("").to_owned();
                out.entry(func.clone()).or_default();
                current = Some(func);
            }
            12 => {
                if let (Some(f), Some((name, value))) = (&current, line.split_once(": ")) {
                    out.get_mut(f)
                        .unwrap()
                        .insert(name.to_owned(), value.to_owned());
                }
            }
            _ => {}
        }
    }
    out
}

/// Every local py-spy names in `show` and `inner`, tachyon names too; and
/// where py-spy writes a plain int, `None` or a bool, the same.
fn check_against_py_spy(who: &str, doc: &Value, pid: i32) -> usize {
    let theirs = py_spy_locals(pid);
    let mut compared = 0;
    for function in ["show", "show.<locals>.inner"] {
        let ours = locals_of(who, doc, function);
        let theirs = theirs
            .get(function)
            .unwrap_or_else(|| panic!("{who}: py-spy shows no {function}: {theirs:#?}"));
        for (name, value) in theirs {
            let l = ours.get(name).unwrap_or_else(|| {
                panic!("{who}: py-spy shows {function}'s {name}, tachyon does not")
            });
            let plain =
                value.parse::<i64>().is_ok() || ["None", "True", "False"].contains(&value.as_str());
            if plain {
                assert_eq!(l["repr"], value.as_str(), "{who}: {function}'s {name}");
                compared += 1;
            }
        }
    }
    compared
}

#[test]
fn locals_are_what_python_and_py_spy_say() {
    let dir = TempDir::new("locals");
    for it in interpreters() {
        let mut t = spawn(&it, TARGET, &[], &[]);
        let expect_line = t.wait_for("EXPECT ", Duration::from_secs(30));
        t.wait_for("READY", Duration::from_secs(30));
        let expect: Value =
            serde_json::from_str(expect_line.trim_start_matches("EXPECT ")).unwrap();
        let who = format!("[{}] dump --locals", it.name);
        // READY comes a line before the sleep: a few tries until the
        // closure's frame is parked in it.
        let mut doc = json_dump(&who, t.pid(), &dir.0);
        for _ in 0..20 {
            let leaf = &doc["threads"][0]["frames"][0]["function"];
            if leaf == "sleep" || leaf == "show.<locals>.inner" {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            doc = json_dump(&who, t.pid(), &dir.0);
        }
        check_against_python(&who, &doc, &expect);
        // py-spy does not read free-threaded builds ("Failed to find a
        // python interpreter"): Python's own reprs are the check there.
        let compared = if it.free_threaded() {
            0
        } else {
            let compared = check_against_py_spy(&who, &doc, t.pid());
            assert!(
                compared >= 4,
                "{who}: only {compared} values compared with py-spy"
            );
            compared
        };
        // The text dump writes the same values under the frame.
        let text = run_ok(
            &who,
            Command::new(tachyon_bin()).args(["dump", "--locals", &t.pid().to_string()]),
        );
        for line in [
            "      Arguments:",
            "        host: '127.0.0.1'",
            "      Locals:",
            "        later: <unset>",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{who}: no line {line:?} in:\n{text}"
            );
        }
        eprintln!("{who}: every local as Python says; {compared} values as py-spy says");
    }
}
