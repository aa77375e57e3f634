//! The location-table decoder against the real interpreters: every code
//! object of several stdlib packages (and a synthetic module with the odd
//! shapes: multi-line expressions, lambdas, comprehensions, huge line jumps,
//! lines going backwards, very long lines, non-ASCII source) is compiled
//! inside each interpreter, which prints its `co_linetable` and
//! `co_positions()`. The decoder must give, for every code unit, exactly the
//! position Python reports (None mapped to -1).
//!
//! `co_positions()` yields one tuple per code unit (2 bytes of `co_code`),
//! CACHE entries and EXTENDED_ARG prefixes included: each gets the location
//! of the table entry covering it, which is what `locate` answers for a
//! `instr_ptr` pointing at any unit. The test also checks that the entries
//! tile `[0, len(co_code) / 2)` with no gap.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{
    Interp, RootDir, machine_old_interpreters, machine_supported_interpreters, run_ok,
    sid_interpreters, spawn, tachyon_ok,
};
use serde::Deserialize;
use tachyon::unwind::linetable::{Location, entries, locate};

/// Runs inside the target interpreter. argv[1]: comma-separated modules
/// whose source files (every `.py` of a package) are compiled.
const DUMP_SCRIPT: &str = r#"
import importlib, json, os, sys, types

SYNTH = '''
def f(a,
      b):
    x = [i * j
         for i in range(a)
         for j in range(b) if (i +
                                j) % 2]
    g = lambda q: (lambda r: q + r)(
        q)
    y = {k: v for k, v in zip(x,
        x)}
    return (x,
            y, g)
''' + "\n" * 70000 + '''
def far():
    return 1
''' + "def long():\n    return " + " + ".join("v%d" % i for i in range(150)) + "\n" + '''
async def agen():
    async with ctx() as c:
        async for z in c:
            yield z
    try:
        pass
    except* ValueError:
        pass
def back():
    return (1
''' + "\n" * 300 + ''', 2)
class K:
    def m(self): return super().m()
    \u00e9 = "\u00fcn\u00efcode"; \u210c = \u00e9 + "x" * 3
def big(n):
    return {''' + ", ".join("%d: n + %d" % (i, i) for i in range(400)) + '''}
'''

def walk(co, out):
    out.append(co)
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            walk(c, out)

sources = [("<synthetic>", SYNTH)]
for name in sys.argv[1].split(","):
    m = importlib.import_module(name)
    f = getattr(m, "__file__", None)
    if f and f.endswith(".py"):
        with open(f, "rb") as fh:
            sources.append((f, fh.read()))
    for d in getattr(m, "__path__", []):
        for fn in sorted(os.listdir(d)):
            if fn.endswith(".py") and fn != "__init__.py":
                p = os.path.join(d, fn)
                with open(p, "rb") as fh:
                    sources.append((p, fh.read()))

n = 0
for fname, src in sources:
    codes = []
    walk(compile(src, fname, "exec", dont_inherit=True), codes)
    for co in codes:
        print(json.dumps({
            "name": "%s:%s" % (fname, co.co_qualname),
            "first": co.co_firstlineno,
            "units": len(co.co_code) // 2,
            "table": co.co_linetable.hex(),
            "pos": [[-1 if x is None else x for x in p] for p in co.co_positions()],
        }))
        n += 1
print("DONE", n, flush=True)
"#;

const MODULES: &str = "json,asyncio,typing,argparse,email,dataclasses,unittest,http,collections,\
                       importlib,logging,concurrent.futures,xml.etree,enum,inspect,pathlib,re";

#[derive(Deserialize)]
struct CodeDump {
    name: String,
    first: i32,
    units: usize,
    table: String,
    pos: Vec<[i32; 4]>,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex from the target"))
        .collect()
}

/// A location as Python's `co_positions()` gives it, -1 for None.
fn as_tuple(l: Option<Location>) -> [i32; 4] {
    l.map_or([-1; 4], |l| [l.line, l.end_line, l.col, l.end_col])
}

#[derive(Default)]
struct Counts {
    codes: usize,
    units: usize,
    entries: usize,
    table_bytes: usize,
    /// Code units whose position has no column (None in Python).
    no_col: usize,
    /// Code units with no location at all.
    no_loc: usize,
    multi_line: usize,
}

/// Check one code object; push a description of each mismatch to `bad`.
fn check(c: &CodeDump, n: &mut Counts, bad: &mut Vec<String>) {
    let table = unhex(&c.table);
    let mut it = entries(&table, c.first);
    let ents: Vec<_> = it.by_ref().collect();
    if it.failed() {
        bad.push(format!("{}: decoder stopped on malformed bytes", c.name));
    }
    if c.pos.len() != c.units {
        bad.push(format!(
            "{}: Python gave {} positions for {} code units",
            c.name,
            c.pos.len(),
            c.units
        ));
    }
    // The entries must tile the code, in order, from unit 0.
    let mut expanded = Vec::with_capacity(c.units);
    for e in &ents {
        if e.start as usize != expanded.len() || e.end <= e.start {
            bad.push(format!(
                "{}: entry {e:?} does not follow unit {}",
                c.name,
                expanded.len()
            ));
            return;
        }
        expanded.extend(std::iter::repeat_n(e.loc, (e.end - e.start) as usize));
    }
    if expanded.len() != c.units {
        bad.push(format!(
            "{}: entries cover {} code units, the code has {}",
            c.name,
            expanded.len(),
            c.units
        ));
    }
    for (i, want) in c.pos.iter().enumerate() {
        let got = expanded.get(i).copied().map(as_tuple);
        let located = Some(as_tuple(locate(&table, c.first, i as u32)));
        if got != Some(*want) || located != Some(*want) {
            bad.push(format!(
                "{} (firstlineno {}, table {}): unit {i}: Python {want:?}, entries {got:?}, locate {located:?}",
                c.name, c.first, c.table
            ));
        }
        n.no_col += (want[2] == -1 && want[0] != -1) as usize;
        n.no_loc += (want[0] == -1) as usize;
        n.multi_line += (want[1] > want[0]) as usize;
    }
    // Past the end there is no location.
    if locate(&table, c.first, c.units as u32).is_some() {
        bad.push(format!(
            "{}: locate answers past the last code unit",
            c.name
        ));
    }
    n.codes += 1;
    n.units += c.pos.len();
    n.entries += ents.len();
    n.table_bytes += table.len();
}

fn check_interpreter(interp: &Interp) -> Result<Counts, Vec<String>> {
    let mut t = spawn(interp, DUMP_SCRIPT, &[], &[MODULES]);
    let mut n = Counts::default();
    let mut bad = Vec::new();
    let done = loop {
        let Some(line) = t.next_line(Duration::from_secs(120)) else {
            let err = t.child.kill().err();
            bad.push(format!(
                "{}: the dump script stopped early ({err:?})",
                interp.name
            ));
            return Err(bad);
        };
        if let Some(count) = line.strip_prefix("DONE ") {
            break count.trim().parse::<usize>().expect("DONE count");
        }
        let c: CodeDump = serde_json::from_str(&line).expect("a JSON line from the dump script");
        check(&c, &mut n, &mut bad);
    };
    if done != n.codes {
        bad.push(format!(
            "{}: script dumped {done} code objects, test read {}",
            interp.name, n.codes
        ));
    }
    if bad.is_empty() { Ok(n) } else { Err(bad) }
}

#[test]
fn location_tables_match_co_positions() {
    let mut interps = sid_interpreters();
    interps.extend(machine_supported_interpreters());
    // 3.11 and 3.12: the same table format.
    interps.extend(machine_old_interpreters());
    let mut failures = Vec::new();
    for interp in &interps {
        match check_interpreter(interp) {
            Ok(n) => {
                println!(
                    "{:<12} {:>6} code objects, {:>7} code units ({} entries, {} table bytes; {} units without column, {} without location, {} multi-line)",
                    interp.name,
                    n.codes,
                    n.units,
                    n.entries,
                    n.table_bytes,
                    n.no_col,
                    n.no_loc,
                    n.multi_line
                );
                // A real check needs real volume and every form of entry.
                assert!(
                    n.codes > 2000,
                    "{}: only {} code objects",
                    interp.name,
                    n.codes
                );
                assert!(
                    n.no_col > 0 && n.no_loc > 0 && n.multi_line > 0,
                    "{}: some entry forms never appeared",
                    interp.name
                );
            }
            Err(bad) => {
                let total = bad.len();
                failures.push(format!(
                    "{}: {total} mismatches, first ones:\n  {}",
                    interp.name,
                    bad.into_iter().take(10).collect::<Vec<_>>().join("\n  ")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A class whose Python `__init__` is called from a warm call site (3.13+
/// specialises it to go through the interpreter's `__init__` shim, whose
/// code has no location), parked inside that `__init__`.
const PARKED_IN_INIT: &str = r#"
import time
class A:
    def __init__(self, park):
        if park:
            print("READY", flush=True)
            while True:
                time.sleep(0.01)
def make(park):
    return A(park)
for _ in range(1000):
    make(False)
make(True)
"#;

/// The `__init__` shim frame of 3.13+ is at line -1 in live text outputs,
/// as the reference shows it (compared on 3.15 in the same run), never at
/// another line.
#[test]
fn the_init_shim_is_at_line_minus_one_as_the_reference_shows_it() {
    let interps: Vec<Interp> = sid_interpreters()
        .into_iter()
        .filter(|i| i.minor >= 13)
        .collect();
    assert!(
        interps.iter().any(|i| i.minor == 15),
        "no sid 3.15 to compare with the reference"
    );
    let shim = ";__init__:__init__:-1;target.py:A.__init__:";
    for it in &interps {
        let dir = RootDir::new(&[]);
        let mut t = spawn(it, PARKED_IN_INIT, &[], &[]);
        t.wait_for("READY", Duration::from_secs(60));
        let pid = t.pid().to_string();
        let ours = dir.outside("ours.txt");
        tachyon_ok(
            &[
                "attach",
                "--collapsed",
                "-d",
                "0.3",
                "-o",
                ours.to_str().unwrap(),
                &pid,
            ],
            Path::new("/"),
        );
        let ours = std::fs::read_to_string(&ours).unwrap();
        assert!(
            !ours.is_empty() && ours.lines().all(|l| l.contains(shim)),
            "{}: every stack passes the shim at line -1:\n{ours}",
            it.name
        );
        if it.minor == 15 {
            let root = it.root.as_deref().unwrap();
            run_ok(
                "the reference's attach --collapsed",
                Command::new("chroot").arg(root).arg(&it.exe).args([
                    "-m",
                    "profiling.sampling",
                    "attach",
                    "--collapsed",
                    "-d",
                    "1",
                    "-o",
                    &dir.inside("ref.txt"),
                    &pid,
                ]),
            );
            let theirs = std::fs::read_to_string(dir.outside("ref.txt")).unwrap();
            assert!(
                theirs.lines().any(|l| l.contains(shim)),
                "the reference shows the shim otherwise:\n{theirs}"
            );
        }
    }
}
