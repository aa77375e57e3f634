//! The flame graph pages in headless Chromium: a live profile of a
//! two-thread program under the sid root's CPython 3.15 loads without
//! console errors and names its hottest function; the page's own script,
//! driven through the address (`#icicle&thread=TID`, `#inverted`,
//! `#labels=module`, `#search=RE`) and the pointer, switches to the icicle
//! view, filters to one thread, inverts the tree, labels by module,
//! highlights matches, shows tooltips and zooms; the differential page of a recording against itself loads the
//! same way. A recording made by the reference, drawn by both, gives the
//! same samples per thread, GIL held and waiting counts and hottest
//! function on both pages. A profile with an 80-frame stack, taller than
//! the window, opens on its widest boxes in the flame and icicle views
//! (measured on the canvas's pixels inside the first viewport). A synthetic profile of 20,000 distinct stacks (also as a
//! differential page) stays small and loads; its size and load-to-
//! interactive time are printed, not asserted.

mod common;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{
    RootDir, body_attr, chromium, keep_screenshot, sid_interpreters, sid_root,
    tachyon_ok as tachyon,
};
use tachyon::collect::binary::{BinaryCollector, BinaryOptions};
use tachyon::collect::diff_flamegraph::DiffFlamegraphCollector;
use tachyon::collect::flamegraph::FlamegraphCollector;
use tachyon::collect::{Collector, Output};
use tachyon::model::{
    Frame, FrameKind, FrameTable, Location, Mode, RunStats, Sample, ThreadSample, status,
};

/// The main thread computes for 1.5 s; a second thread sleeps 0.3 s.
const PROGRAM: &str = "\
import threading, time
def crunch(n):
    x = 0
    for i in range(n):
        x += i * i % 7
    return x
def sleeper():
    time.sleep(0.3)
t = threading.Thread(target=sleeper)
t.start()
end = time.time() + 1.5
while time.time() < end:
    crunch(20000)
t.join()
";

/// The functions of the hot-spot list, in order.
fn hot_spots(dom: &str) -> Vec<String> {
    dom.split("<li data-hot=\"")
        .skip(1)
        .filter_map(|li| {
            let b = li.find("<b>")? + 3;
            Some(li[b..b + li[b..].find("</b>")?].to_string())
        })
        .collect()
}

fn ready(dom: &str) -> f64 {
    body_attr(dom, "data-ready")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("the page's script did not finish:\n{dom}"))
}

#[test]
fn a_live_flame_graph_loads_and_its_views_work_in_chromium() {
    let py = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("python3.15 in the sid root");
    let dir = RootDir::new(&[("two.py", PROGRAM)]);
    let root = sid_root().to_string_lossy().into_owned();
    let exe = py.exe.to_string_lossy().into_owned();
    let script = dir.inside("two.py");
    let out = tachyon(
        &[
            "run", "-a", "--binary", "-o", "run.bin", "--", "chroot", &root, &exe, &script,
        ],
        &dir.outside,
    );
    assert!(out.contains("Binary profile written to"), "{out}");
    let said = tachyon(
        &["replay", "--flamegraph", "-o", "f.html", "run.bin"],
        &dir.outside,
    );
    assert!(said.contains("Flamegraph saved to"), "{said}");
    let html = std::fs::read_to_string(dir.outside("f.html")).unwrap();
    let d = common::flame_data(&html);
    let threads = d["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2, "{threads:?}");
    let url = format!("file://{}", dir.outside("f.html").display());

    // As opened: the flame view of all threads, crunch the hottest.
    let dom = chromium(&url, None);
    ready(&dom);
    assert_eq!(body_attr(&dom, "data-view").as_deref(), Some("flame"));
    assert_eq!(body_attr(&dom, "data-tree").as_deref(), Some("call"));
    assert_eq!(body_attr(&dom, "data-thread").as_deref(), Some("all"));
    let hot = hot_spots(&dom);
    assert_eq!(hot.first().map(String::as_str), Some("crunch"), "{hot:?}");
    let boxes: u64 = body_attr(&dom, "data-boxes").unwrap().parse().unwrap();
    assert!(boxes >= 4, "{boxes} boxes drawn");
    let total = d["stats"]["samples"].as_u64().unwrap();
    assert!(
        dom.contains(&format!("<dd id=\"s-samples\">{}</dd>", group(total))),
        "samples in the sidebar"
    );

    // Icicle, the sleeping thread alone: its own samples, its own hot spot.
    let (tid, n) = (
        threads[1][0].as_u64().unwrap(),
        threads[1][3].as_u64().unwrap(),
    );
    let dom = chromium(&format!("{url}#icicle&thread={tid}"), None);
    ready(&dom);
    assert_eq!(body_attr(&dom, "data-view").as_deref(), Some("icicle"));
    assert_eq!(body_attr(&dom, "data-thread"), Some(tid.to_string()));
    assert!(
        dom.contains(&format!(
            "<dd id=\"s-samples\">{} of {}</dd>",
            group(n),
            group(total)
        )),
        "the thread's samples in the sidebar"
    );
    let hot = hot_spots(&dom);
    assert!(
        hot.first()
            .is_some_and(|f| f.contains("sleep") || f.contains("wait")),
        "{hot:?}"
    );
    assert!(!hot.contains(&"crunch".to_string()), "{hot:?}");

    // The pointer, driven by a copy of the page with a few lines added:
    // over the first box above the root, a tooltip; a click on the first
    // box above that zooms into it.
    let probe = html.replace(
        "</body>",
        "<script>(function(){var c=document.getElementById('fg'),r=c.getBoundingClientRect(),\
         at=function(t,d){c.dispatchEvent(new MouseEvent(t,{clientX:r.left+3,clientY:r.bottom-(d+0.5)*18,bubbles:true}))};\
         at('mousemove',1);document.body.dataset.tip=document.getElementById('tip').textContent;\
         at('click',2);document.body.dataset.crumbs=document.getElementById('crumbs').textContent;})();</script></body>",
    );
    std::fs::write(dir.outside("probe.html"), probe).unwrap();
    let dom = chromium(
        &format!("file://{}", dir.outside("probe.html").display()),
        None,
    );
    let tip = body_attr(&dom, "data-tip").expect("a tooltip");
    assert!(tip.starts_with("&lt;module&gt;"), "{tip}");
    assert!(
        tip.contains("two.py:") && tip.contains("Samples: "),
        "{tip}"
    );
    assert!(tip.contains("GIL: held "), "GIL shares recorded: {tip}");
    let crumbs = body_attr(&dom, "data-crumbs").expect("zoomed");
    assert!(
        crumbs.starts_with("all › &lt;module&gt; (") && crumbs.contains("› crunch ("),
        "{crumbs}"
    );

    // The inverted tree: crunch itself is the widest root, so the first
    // box above the root is crunch's.
    let probe = html.replace(
        "</body>",
        "<script>(function(){var c=document.getElementById('fg'),r=c.getBoundingClientRect();\
         c.dispatchEvent(new MouseEvent('mousemove',{clientX:r.left+3,clientY:r.bottom-1.5*18,bubbles:true}));\
         document.body.dataset.tip=document.getElementById('tip').textContent;})();</script></body>",
    );
    std::fs::write(dir.outside("probe.html"), probe).unwrap();
    let dom = chromium(
        &format!("file://{}#inverted", dir.outside("probe.html").display()),
        None,
    );
    assert_eq!(body_attr(&dom, "data-tree").as_deref(), Some("inverted"));
    let tip = body_attr(&dom, "data-tip").expect("a tooltip");
    assert!(tip.starts_with("crunch"), "{tip}");

    // Module names instead of paths: two.py is module `<dir>.two`.
    let dom = chromium(&format!("{url}#labels=module"), None);
    assert_eq!(body_attr(&dom, "data-labels").as_deref(), Some("module"));
    let module = format!("{}.two", dir.inside.file_name().unwrap().to_string_lossy());
    assert!(
        dom.contains(&format!("<b>crunch</b><span>{module}</span>")),
        "{module} not in the hot spots"
    );

    // Search: crunch's boxes highlighted, with their share.
    let dom = chromium(&format!("{url}#search=crunch"), None);
    let matched: f64 = body_attr(&dom, "data-matched").unwrap().parse().unwrap();
    assert!(matched > 50.0 && matched <= 100.0, "{matched}");
    assert!(dom.contains("matched "), "the share is said");

    let shot = dir.outside("f.png");
    chromium(&format!("{url}#icicle"), Some(&shot));
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    keep_screenshot(&shot, "live-icicle.png");

    // The differential page of the recording against itself.
    let said = tachyon(
        &[
            "replay",
            "--diff-flamegraph",
            "run.bin",
            "-o",
            "d.html",
            "run.bin",
        ],
        &dir.outside,
    );
    assert!(said.contains("0 frames grew, 0 shrank"), "{said}");
    let dom = chromium(&format!("file://{}", dir.outside("d.html").display()), None);
    ready(&dom);
    assert_eq!(hot_spots(&dom).first().map(String::as_str), Some("crunch"));
    chromium(
        &format!("file://{}", dir.outside("d.html").display()),
        Some(&shot),
    );
    keep_screenshot(&shot, "live-diff.png");
}

/// The reference's page's data: its `const EMBEDDED_DATA = {...}`.
fn reference_data(html: &str) -> serde_json::Value {
    const OPEN: &str = "const EMBEDDED_DATA = ";
    let start = html.find(OPEN).expect("the reference's embedded data") + OPEN.len();
    serde_json::Deserializer::from_str(&html[start..])
        .into_iter::<serde_json::Value>()
        .next()
        .expect("a value")
        .expect("JSON")
}

/// Self samples per function name in the reference's tree.
fn reference_self(
    node: &serde_json::Value,
    strings: &[serde_json::Value],
    out: &mut std::collections::HashMap<String, u64>,
) {
    if let (Some(f), Some(n)) = (node["funcname"].as_u64(), node["self"].as_u64()) {
        *out.entry(strings[f as usize].as_str().unwrap().to_string())
            .or_default() += n;
    }
    for c in node["children"].as_array().into_iter().flatten() {
        reference_self(c, strings, out);
    }
}

#[test]
fn a_reference_recording_gives_the_reference_pages_numbers() {
    let py = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("python3.15 in the sid root");
    let dir = RootDir::new(&[("two.py", PROGRAM)]);
    let root = sid_root();
    let reference = |args: &[&str]| {
        let out = Command::new("chroot")
            .arg(&root)
            .arg(&py.exe)
            .args(["-m", "profiling.sampling"])
            .args(args)
            .current_dir(&dir.outside)
            .stdin(Stdio::null())
            .output()
            .expect("MISSING TOOL: chroot");
        assert!(
            out.status.success(),
            "reference {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // One recording by the reference, drawn by both.
    let bin = dir.inside("run.bin");
    reference(&["run", "-a", "--binary", "-o", &bin, &dir.inside("two.py")]);
    reference(&[
        "replay",
        "--flamegraph",
        "-o",
        &dir.inside("ref.html"),
        &bin,
    ]);
    tachyon(
        &["replay", "--flamegraph", "-o", "ours.html", "run.bin"],
        &dir.outside,
    );
    let theirs = reference_data(&std::fs::read_to_string(dir.outside("ref.html")).unwrap());
    let ours = common::flame_data(&std::fs::read_to_string(dir.outside("ours.html")).unwrap());

    // Samples, and per thread.
    assert_eq!(ours["stats"]["samples"], theirs["value"]);
    let threads = ours["threads"].as_array().unwrap();
    assert_eq!(threads.len(), theirs["threads"].as_array().unwrap().len());
    for t in threads {
        let tid = t[0].to_string();
        assert_eq!(t[3], theirs["thread_values"][&tid][0], "thread {tid}");
    }
    // GIL held and waited for, in all and per thread.
    let tree = &ours["tree"];
    let w = tree["w"].as_u64().unwrap() as usize;
    assert_eq!(w, 9, "status recorded");
    let ends: Vec<u64> = tree["ends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let count = |series: Option<u64>, col: usize| -> u64 {
        ends.chunks(w)
            .filter(|e| series.is_none_or(|s| e[1] == s))
            .map(|e| e[col])
            .sum()
    };
    let stats = &theirs["stats"]["thread_stats"];
    assert_eq!(count(None, 4), stats["has_gil"].as_u64().unwrap());
    assert_eq!(count(None, 5), stats["gil_requested"].as_u64().unwrap());
    for (k, t) in threads.iter().enumerate() {
        let per = &theirs["stats"]["per_thread_stats"][&t[0].to_string()];
        assert_eq!(count(Some(k as u64), 4), per["has_gil"].as_u64().unwrap());
        assert_eq!(
            count(Some(k as u64), 5),
            per["gil_requested"].as_u64().unwrap()
        );
        assert_eq!(
            count(Some(k as u64), 8),
            per["has_exception"].as_u64().unwrap()
        );
        assert_eq!(ours["gc"][k], per["gc_samples"], "GC samples");
    }
    // The hottest function by self samples.
    let strings = theirs["strings"].as_array().unwrap();
    let mut selfs = std::collections::HashMap::new();
    reference_self(&theirs, strings, &mut selfs);
    let (top, n) = selfs.iter().max_by_key(|(_, n)| **n).unwrap();
    let hot = &ours["hot"][0][0];
    let our_strings = ours["strings"].as_array().unwrap();
    assert_eq!(our_strings[hot[0].as_u64().unwrap() as usize], top.as_str());
    assert_eq!(hot[4].as_u64(), Some(*n), "{top}'s self samples");
}

/// `1234567` as `1,234,567`, as the page writes counts.
fn group(n: u64) -> String {
    tachyon::collect::binary::thousands(n)
}

/// A deterministic pseudo-random sequence (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `n` distinct stacks (leaf first) over 600 functions in user, standard
/// library and installed-package files, sharing prefixes as real ones do,
/// each with a Zipf-like count, on four threads.
fn synthetic(t: &mut FrameTable, n: usize, seed: u64) -> Vec<(u64, Vec<u32>, u64)> {
    let mut rng = Rng(seed);
    let files = [
        "/srv/app/handlers.py",
        "/srv/app/models.py",
        "/usr/lib/python3.15/json/decoder.py",
        "/usr/lib/python3.15/threading.py",
        "/venv/lib/python3.15/site-packages/sqlalchemy/orm/query.py",
        "/venv/lib/python3.15/site-packages/werkzeug/serving.py",
    ];
    let funcs: Vec<u32> = (0..600)
        .map(|i| {
            let file = t.intern_str(files[i % files.len()]);
            let func = t.intern_str(&format!("function_{i}"));
            t.intern(Frame {
                opcode: None,
                kind: FrameKind::Python,
                file,
                func,
                location: Some(Location {
                    line: 10 + (i as i32 % 50),
                    end_line: 10 + (i as i32 % 50),
                    col: 0,
                    end_col: 4,
                }),
            })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    while out.len() < n {
        // Callers from a narrow set near the root, wider deeper down.
        let depth = 8 + rng.below(30) as usize;
        let mut root_first = Vec::with_capacity(depth);
        for d in 0..depth {
            let span = (4 + d as u64 * 20).min(600);
            root_first.push(funcs[rng.below(span) as usize]);
        }
        let stack: Vec<u32> = root_first.into_iter().rev().collect();
        if seen.insert(stack.clone()) {
            let rank = out.len() as u64;
            let count = (3000 / (rank + 1)).max(1);
            out.push((1000 + rng.below(4), stack, count));
        }
    }
    out
}

/// Feed `stacks` to `c`, one sample per count; thread `1000 + i` named
/// `names[i]`.
fn feed(
    c: &mut dyn Collector,
    t: &FrameTable,
    stacks: &[(u64, Vec<u32>, u64)],
    names: &[Option<u32>],
) -> u64 {
    let mut total = 0;
    for (k, (tid, stack, count)) in stacks.iter().enumerate() {
        for i in 0..*count {
            let st = if (k as u64 + i).is_multiple_of(3) {
                status::HAS_GIL | status::ON_CPU
            } else {
                status::GIL_REQUESTED
            };
            c.collect(
                &Sample {
                    pid: None,
                    timestamp_us: total,
                    threads: vec![ThreadSample {
                        tid: *tid,
                        status: st,
                        frames: stack.clone(),
                        name: names.get((*tid - 1000) as usize).copied().flatten(),
                        ..Default::default()
                    }],
                },
                t,
            );
            total += 1;
        }
    }
    total
}

fn run_stats(samples: u64) -> RunStats {
    RunStats {
        interval_us: 1000,
        duration_s: samples as f64 / 1000.0,
        attempts: samples,
        failures: 0,
        mode: Mode::Wall,
        interrupted: false,
        ..RunStats::default()
    }
}

#[test]
fn twenty_thousand_distinct_stacks_stay_small_and_load() {
    let dir = common::TempDir::new("flame-20k");

    let mut t = FrameTable::new();
    let stacks = synthetic(&mut t, 20_000, 0x9e37_79b9_7f4a_7c15);
    // Three named threads, one whose name is unknown.
    let names: Vec<Option<u32>> = (0..4)
        .map(|i| (i < 3).then(|| t.intern_str(&format!("worker-{i}"))))
        .collect();
    let page = dir.join("flame.html");
    let mut c = FlamegraphCollector::new(Output::File(page.clone()));
    let n = feed(&mut c, &t, &stacks, &names);
    let start = Instant::now();
    c.finish(&t, &run_stats(n)).unwrap();
    let build = start.elapsed();

    // A baseline of the same stacks, every other one twice as often, for
    // the diff page.
    let base = dir.join("base.bin");
    let mut b = BinaryCollector::new(Output::File(base.clone()), BinaryOptions::default()).unwrap();
    b.print_encoding_stats = false;
    let base_stacks: Vec<_> = stacks
        .iter()
        .enumerate()
        .map(|(k, (tid, s, n))| {
            (
                *tid,
                s.clone(),
                if k.is_multiple_of(2) { n * 2 } else { *n },
            )
        })
        .collect();
    let bn = feed(&mut b, &t, &base_stacks, &names);
    b.finish(&t, &run_stats(bn)).unwrap();
    let diff_page = dir.join("diff.html");
    let mut dc = DiffFlamegraphCollector::new(&base, Output::File(diff_page.clone())).unwrap();
    feed(&mut dc, &t, &stacks, &names);
    dc.finish(&t, &run_stats(n)).unwrap();

    for (what, path) in [("flame graph", &page), ("diff flame graph", &diff_page)] {
        let html = std::fs::read_to_string(path).unwrap();
        let d = common::flame_data(&html);
        let drawn = d["tree"]["nodes"].as_array().unwrap().len() / 2;
        let inverted = d["inverted"]["nodes"].as_array().unwrap().len() / 2;
        let url = format!("file://{}", path.display());
        // The machine is shared: the best of three loads.
        let (mut ms, mut script, mut inv_ms) = (f64::MAX, f64::MAX, f64::MAX);
        let mut hot = Vec::new();
        for _ in 0..3 {
            let dom = chromium(&url, None);
            ms = ms.min(ready(&dom));
            script = script.min(body_attr(&dom, "data-script").unwrap().parse().unwrap());
            hot = hot_spots(&dom);
            assert!(!hot.is_empty());
            // Threads by name when known, else by id.
            if what == "flame graph" {
                assert!(dom.contains(">worker-1 (1001) · "), "named thread listed");
                assert!(dom.contains(">thread 1003 · "), "unnamed thread listed");
            }
            inv_ms = inv_ms.min(ready(&chromium(&format!("{url}#inverted"), None)));
        }
        eprintln!(
            "{what}: 20,000 distinct stacks, {n} samples: {} bytes, {drawn} nodes drawn ({} left out), \
             {inverted} inverted; written in {build:.2?}; load to interactive {ms:.0} ms (script \
             {script:.0} ms), inverted {inv_ms:.0} ms; hottest {}",
            html.len(),
            d["tree"]["dropped"],
            hot[0]
        );
        if std::env::var_os("TACHYON_SCREENSHOTS").is_some() {
            let shot = dir.join("shot.png");
            chromium(&format!("file://{}", path.display()), Some(&shot));
            keep_screenshot(&shot, &format!("20k-{}.png", what.replace(' ', "-")));
        }
        // A page that stays small: well under the reference's (~640 KB).
        assert!(html.len() < 400_000, "{what}: {} bytes", html.len());
        assert!(drawn > 100, "{what}: {drawn} nodes drawn");
    }
}

/// A page with a probe appended: after the page's own script, the share of
/// the first viewport's width that drawn boxes cover, per pixel row of the
/// canvas inside it (below the sticky header): the best row's share, and
/// how many pixel rows are at least 80% covered; and how far the canvas's
/// pane is scrolled.
fn with_viewport_probe(html: &str) -> String {
    html.replace(
        "</body>",
        "<script>(function(){var c=document.getElementById('fg'),r=c.getBoundingClientRect(),\
         hb=document.querySelector('header').getBoundingClientRect().bottom,\
         top=Math.max(r.top,hb),bot=Math.min(r.bottom,innerHeight),dpr=window.devicePixelRatio||1,\
         best=0,full=0;\
         if(bot>top){var W=c.width,y0=Math.floor((top-r.top)*dpr),h=Math.floor((bot-top)*dpr),\
         px=c.getContext('2d').getImageData(0,y0,W,h).data;\
         for(var y=0;y<h;y++){var n=0;for(var x=0;x<W;x++)if(px[4*(y*W+x)+3]>0)n++;\
         var f=n/W;if(f>best)best=f;if(f>=0.8)full++;}}\
         var b=document.body.dataset;b.cover=best.toFixed(3);b.fullrows=full/dpr;b.scrolled=Math.round(document.getElementById('main').scrollTop);\
         b.canvasheight=Math.round(r.height);})();</script></body>",
    )
}

/// A profile like the quick start's: most samples in a shallow program,
/// a tenth in an 80-frame chain of start-up imports. Opened in a
/// 1400×900 window, the first screen shows the widest boxes (the root and
/// the program's frames), in the flame view (the default, root at the
/// bottom) as in the icicle; the canvas is taller than the window.
#[test]
fn a_deep_profile_opens_on_its_widest_frames() {
    let dir = common::TempDir::new("flame-deep");

    let mut t = FrameTable::new();
    let mut py = |file: &str, func: &str, line: i32| {
        let file = t.intern_str(file);
        let func = t.intern_str(func);
        t.intern(Frame {
            opcode: None,
            kind: FrameKind::Python,
            file,
            func,
            location: Some(Location {
                line,
                end_line: line,
                col: 0,
                end_col: 4,
            }),
        })
    };
    let module = py("/app/report.py", "<module>", 40);
    let main = py("/app/report.py", "main", 30);
    let leaves = [
        py("/app/report.py", "parse", 10),
        py("/app/report.py", "render", 20),
    ];
    let imports: Vec<u32> = (0..79)
        .map(|i| {
            let f = [
                "_find_and_load",
                "_load_unlocked",
                "exec_module",
                "<module>",
            ][i % 4];
            py("<frozen importlib._bootstrap>", f, 1000 + i as i32)
        })
        .collect();
    let leaf_first = |root_first: Vec<u32>| root_first.into_iter().rev().collect::<Vec<u32>>();
    let mut stacks = vec![
        (1000, leaf_first(vec![module, main, leaves[0]]), 500),
        (1000, leaf_first(vec![module, main, leaves[1]]), 400),
    ];
    let deep: Vec<u32> = std::iter::once(module).chain(imports).collect();
    assert_eq!(deep.len(), 80);
    stacks.push((1000, leaf_first(deep), 100));
    let page = dir.join("deep.html");
    let mut c = FlamegraphCollector::new(Output::File(page.clone()));
    let n = feed(&mut c, &t, &stacks, &[]);
    c.finish(&t, &run_stats(n)).unwrap();
    let probe = dir.join("probe.html");
    std::fs::write(
        &probe,
        with_viewport_probe(&std::fs::read_to_string(&page).unwrap()),
    )
    .unwrap();
    keep_screenshot(&page, "deep.html");
    let url = format!("file://{}", probe.display());

    for view in ["", "#icicle"] {
        let dom = chromium(&format!("{url}{view}"), None);
        ready(&dom);
        let at = |name| body_attr(&dom, name).unwrap_or_else(|| panic!("no {name}"));
        let (cover, full): (f64, f64) = (
            at("data-cover").parse().unwrap(),
            at("data-fullrows").parse().unwrap(),
        );
        let height: f64 = at("data-canvasheight").parse().unwrap();
        eprintln!(
            "view {view:?}: {} · canvas {height} px, scrolled {} px; best row covers {cover}, {full} px rows over 80%",
            at("data-view"),
            at("data-scrolled")
        );
        assert!(
            height > 900.0,
            "the canvas ({height} px) is taller than the window"
        );
        // The root, <module> and main are each as wide as the profile.
        assert!(
            cover > 0.95 && full >= 3.0 * 17.0,
            "{view:?}: the first screen's boxes cover {cover} of its width at best, \
             {full} px rows over 80%"
        );
        let shot = dir.join("shot.png");
        chromium(&format!("{url}{view}"), Some(&shot));
        keep_screenshot(
            &shot,
            &format!(
                "deep-{}.png",
                if view.is_empty() { "flame" } else { "icicle" }
            ),
        );
    }
}
