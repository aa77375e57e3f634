//! `--heatmap` on the seed's worked example, report.py, under the sid
//! root's CPython 3.15: its numbers agree exactly with the collapsed
//! stacks of the same recording, line 36 (fingerprint's hashing) is the
//! hottest, the source is shown (read through /proc/PID/root live, from
//! the file system on replay) or said to be unavailable, and the pages load
//! in headless Chromium without console errors.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    RootDir, chromium, collapsed, sid_interpreters, sid_root, spawn, tachyon_ok as tachyon,
};

const REPORT: &str = include_str!("../fixtures/programs/report.py");

/// Line 36 of report.py: `h.update("\n".join(lines).encode())`, escaped.
const HOT_SOURCE: &str = "h.update(&quot;\\n&quot;.join(lines).encode())";

/// `tachyon run ARGS -- chroot SID python3.15 report.py` in `dir`.
fn run_report(dir: &RootDir, args: &[&str]) -> String {
    let py = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("python3.15 in the sid root");
    let root = sid_root().to_string_lossy().into_owned();
    let exe = py.exe.to_string_lossy().into_owned();
    let script = dir.inside("report.py");
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "chroot", &root, &exe, &script]);
    tachyon(&all, &dir.outside)
}

/// Per (file, line): self samples (the leaf) and total samples (on the
/// stack, once per stack), from collapsed stacks; and per file the same.
/// Collapsed stacks name files by their base name.
#[derive(Default)]
struct Counts {
    lines: BTreeMap<(String, u32), (u64, u64)>,
    files: BTreeMap<String, (u64, u64)>,
}

fn collapsed_counts(path: &Path) -> Counts {
    let mut c = Counts::default();
    for (stack, n) in collapsed::read(path) {
        // tid:N;file:func:line;...;leaf (a synthetic frame: its name only)
        let parse = |f: &str| -> Option<(String, u32)> {
            let (file, _func, line) = collapsed::frame_parts(f)?;
            Some((file.to_string(), line.parse().ok().filter(|&l| l > 0)?))
        };
        let frames: Vec<(String, u32)> = collapsed::frames(&stack)
            .skip(1)
            .filter_map(parse)
            .collect();
        let leaf = parse(collapsed::frames(&stack).next_back().unwrap());
        let mut seen_lines = Vec::new();
        let mut seen_files = Vec::new();
        for (i, k) in frames.iter().enumerate() {
            let is_leaf = i == frames.len() - 1 && leaf.as_ref() == Some(k);
            let e = c.lines.entry(k.clone()).or_default();
            if is_leaf {
                e.0 += n;
                c.files.entry(k.0.clone()).or_default().0 += n;
            }
            if !seen_lines.contains(k) {
                seen_lines.push(k.clone());
                e.1 += n;
            }
            if !seen_files.contains(&k.0) {
                seen_files.push(k.0.clone());
                c.files.entry(k.0.clone()).or_default().1 += n;
            }
        }
    }
    c
}

/// The rows of a file page: line -> (self, total), lines with samples only.
fn page_rows(page: &str) -> BTreeMap<u32, (u64, u64)> {
    let mut rows = BTreeMap::new();
    for l in page.lines().filter(|l| l.starts_with("<tr id=\"L")) {
        let cells: Vec<&str> = l.split("<td>").collect();
        let num = |s: &str| s.parse::<u64>().unwrap_or(0);
        let (s, t) = (num(cells[2]), num(cells[3]));
        if s + t > 0 {
            rows.insert(cells[1].parse().unwrap(), (s, t));
        }
    }
    rows
}

/// The index row of `file`: its page, self and total samples, and the
/// title of the section it is listed under.
fn index_row(index: &str, file: &str) -> (String, u64, u64, String) {
    let anchor = format!("\">{file}</a>");
    let at = index
        .find(&anchor)
        .unwrap_or_else(|| panic!("{file} not in the index:\n{index}"));
    let row_start = index[..at].rfind("<tr").unwrap();
    let row = index[row_start..].lines().next().unwrap();
    let page = row.split("href=\"").nth(1).unwrap();
    let page = page[..page.find('"').unwrap()].to_string();
    let cells: Vec<&str> = row.split("<td>").collect();
    let section = index[..at].rfind("<h2>").unwrap();
    let title = index[section + 4..].split(" <small>").next().unwrap();
    (
        page,
        cells[2].parse().unwrap(),
        cells[3].parse().unwrap(),
        title.to_string(),
    )
}

/// The path report.py has inside the root, made to exist on the host too
/// (so that `replay` finds the source there) until dropped.
struct HostCopy(PathBuf);

impl HostCopy {
    fn new(inside: &str) -> HostCopy {
        let p = PathBuf::from(inside);
        let dir = p.parent().unwrap();
        assert!(!dir.exists(), "{} exists on the host", dir.display());
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(&p, REPORT).unwrap();
        HostCopy(dir.to_path_buf())
    }
}

impl Drop for HostCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn hottest_self(rows: &BTreeMap<u32, (u64, u64)>) -> u32 {
    *rows.iter().max_by_key(|(_, (s, _))| *s).unwrap().0
}

#[test]
fn a_replayed_heatmap_agrees_with_the_collapsed_stacks_and_says_when_source_is_gone() {
    let dir = RootDir::new(&[("report.py", REPORT)]);
    let d = &dir.outside;
    let file = dir.inside("report.py");
    run_report(&dir, &["--binary", "-o", "rec.bin"]);
    tachyon(&["replay", "--collapsed", "-o", "c.txt", "rec.bin"], d);
    let counts = collapsed_counts(&d.join("c.txt"));
    let host = HostCopy::new(&file);
    let out = tachyon(&["replay", "--heatmap", "-o", "hm", "rec.bin"], d);
    assert!(out.contains("Heatmap output written to hm/"), "{out}");
    drop(host);

    let index = std::fs::read_to_string(d.join("hm/index.html")).unwrap();
    let (page, self_, total, section) = index_row(&index, &file);
    assert_eq!(section, "Your code");
    assert_eq!(
        (self_, total),
        counts.files["report.py"],
        "{file} in the index"
    );
    // The files of the collapsed stacks are those of the index.
    let parts: Vec<&str> = index.split("</a><td>").collect();
    let listed: std::collections::BTreeSet<String> = parts[..parts.len() - 1]
        .iter()
        .filter_map(|s| s.rsplit_once("\">"))
        .map(|(_, name)| {
            let name = name
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&");
            name.rsplit('/').next().unwrap().to_string()
        })
        .collect();
    assert_eq!(listed, counts.files.keys().cloned().collect());

    let html = std::fs::read_to_string(d.join("hm").join(&page)).unwrap();
    assert!(html.contains("def fingerprint(lines):"), "no source");
    assert!(html.contains(HOT_SOURCE));
    assert!(!html.contains("Source unavailable"));
    let rows = page_rows(&html);
    let expected: BTreeMap<u32, (u64, u64)> = counts
        .lines
        .iter()
        .filter(|((f, _), _)| f == "report.py")
        .map(|((_, l), &v)| (*l, v))
        .collect();
    assert_eq!(rows, expected, "per-line self and total of {file}");
    assert_eq!(hottest_self(&rows), 36, "{rows:?}");
    assert_eq!(rows.values().map(|r| r.0).sum::<u64>(), self_);
    assert!(rows.values().all(|r| r.1 <= total));

    // The source gone: the page says so and still has every line's counts.
    tachyon(&["replay", "--heatmap", "-o", "gone", "rec.bin"], d);
    let html = std::fs::read_to_string(d.join("gone").join(&page)).unwrap();
    assert!(html.contains("Source unavailable"), "{html}");
    assert!(!html.contains("def fingerprint"));
    assert_eq!(page_rows(&html), expected);
}

#[test]
fn a_live_heatmap_reads_source_through_the_target_and_loads_in_chromium() {
    let dir = RootDir::new(&[("report.py", REPORT)]);
    let d = &dir.outside;
    let file = dir.inside("report.py");
    // The path is the chroot's, not the host's: only /proc/PID/root has it.
    assert!(!Path::new(&file).exists());
    let out = run_report(&dir, &["--heatmap", "-o", "hm"]);
    assert!(out.contains("Heatmap output written to hm/"), "{out}");
    assert!(out.contains("  - Index: hm/index.html"), "{out}");

    let index = std::fs::read_to_string(d.join("hm/index.html")).unwrap();
    let (page, self_, total, section) = index_row(&index, &file);
    assert_eq!(section, "Your code");
    assert!(self_ > 0 && self_ <= total, "{self_} {total}");
    let html = std::fs::read_to_string(d.join("hm").join(&page)).unwrap();
    assert!(html.contains("def fingerprint(lines):"));
    assert!(html.contains(HOT_SOURCE));
    let rows = page_rows(&html);
    assert_eq!(hottest_self(&rows), 36, "{rows:?}");
    assert_eq!(rows.values().map(|r| r.0).sum::<u64>(), self_);
    // Line 49 calls fingerprint, whose line 36 is linked back to it.
    let l36 = html
        .lines()
        .find(|l| l.starts_with("<tr id=\"L36\""))
        .unwrap();
    assert!(l36.contains(&format!("href=\"{page}#L49\"")), "{l36}");
    let l49 = html
        .lines()
        .find(|l| l.starts_with("<tr id=\"L49\""))
        .unwrap();
    assert!(l49.contains(&format!("href=\"{page}#L36\"")), "{l49}");

    let url = |p: &str| format!("file://{}", d.join("hm").join(p).display());
    let dom = chromium(&url("index.html"), None);
    assert!(dom.contains(&format!("href=\"{page}\"")), "{dom}");
    let dom = chromium(&format!("{}#L36", url(&page)), None);
    assert!(dom.contains("<td>36</td>"), "{dom}");
    // The page's own script, driven: the toggle and the hot-only filter
    // (a copy of the page with a few lines appended that click them and
    // leave what they saw in the DOM).
    // A line with total samples and no self ones (which lines those are
    // depends on where the samples fell): hidden when hot-only shows Self.
    let caller_only = rows
        .iter()
        .find(|(_, (s, t))| *s == 0 && *t > 0)
        .map_or(1, |(l, _)| *l);
    let probe = format!(
        "<script>(function(){{var b=document.body,g=function(i){{return document.getElementById(i)}},\
        d=function(i){{return getComputedStyle(g(i)).display}},r=[];\
        g('bt').click();r.push(b.className);g('hot').click();r.push(d('L1'),d('L36'));\
        g('bs').click();r.push(b.className,d('L{caller_only}'));\
        b.setAttribute('data-probe',r.join('|'))}})();</script></body>"
    );
    std::fs::write(d.join("hm/probe.html"), html.replace("</body>", &probe)).unwrap();
    let dom = chromium(&url("probe.html"), None);
    assert!(
        dom.contains("data-probe=\"total|none|table-row|hot self|none\""),
        "{}",
        dom.lines().find(|l| l.contains("<body")).unwrap_or(&dom)
    );
    let probe = "<script>(function(){var q=document.getElementById('q');q.value='no such file';\
        q.dispatchEvent(new Event('input'));var n=0,r=document.querySelectorAll('tr[data-n]');\
        for(var i=0;i<r.length;i++)if(getComputedStyle(r[i]).display!='none')n++;\
        q.value='REPORT.PY';q.dispatchEvent(new Event('input'));var m=0;\
        for(var i=0;i<r.length;i++)if(getComputedStyle(r[i]).display!='none')m++;\
        document.body.setAttribute('data-probe',n+'|'+m)})();</script></body>";
    std::fs::write(d.join("hm/probe.html"), index.replace("</body>", probe)).unwrap();
    let dom = chromium(&url("probe.html"), None);
    assert!(dom.contains("data-probe=\"0|1\""), "{dom}");

    let shot = d.join("page.png");
    chromium(&format!("{}#L30", url(&page)), Some(&shot));
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000);
    if let Some(keep) = std::env::var_os("TACHYON_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

#[test]
fn a_followed_process_has_its_source_read_through_its_own_root() {
    // A command that starts Python twice: by the second, the first
    // process (and its /proc/PID/root) is gone.
    let burn = |tag: &str| {
        format!(
            "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 0.5:\n    pass  # {tag}\n"
        )
    };
    let dir = RootDir::new(&[("a.py", &burn("first")), ("b.py", &burn("second"))]);
    let py = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("python3.15 in the sid root");
    let exe = py.exe.to_string_lossy().into_owned();
    let root = sid_root().to_string_lossy().into_owned();
    let cmd = format!("{exe} {}; {exe} {}", dir.inside("a.py"), dir.inside("b.py"));
    let args = [
        "run",
        "--heatmap",
        "-o",
        "hm",
        "--",
        "chroot",
        &root,
        "sh",
        "-c",
        &cmd,
    ];
    tachyon(&args, &dir.outside);
    let index = std::fs::read_to_string(dir.outside.join("hm/index.html")).unwrap();
    for (file, tag) in [("a.py", "# first"), ("b.py", "# second")] {
        let (page, ..) = index_row(&index, &dir.inside(file));
        let html = std::fs::read_to_string(dir.outside.join("hm").join(page)).unwrap();
        assert!(html.contains(tag), "{file}: no source:\n{html}");
    }
}

/// The script lives inside the sid root only: its source comes through
/// the running target's /proc/PID/root.
#[test]
fn attach_writes_a_heatmap_with_the_running_target_s_source() {
    let py = sid_interpreters()
        .into_iter()
        .find(|i| i.minor == 15 && !i.debug)
        .expect("python3.15 in the sid root");
    let script = "def spin():\n    while True:\n        sum(range(5000))  # attached here\nprint('READY', flush=True)\nspin()\n";
    let mut t = spawn(&py, script, &[], &[]);
    t.wait_for("READY", Duration::from_secs(30));
    let out_dir =
        std::env::temp_dir().join(format!("tachyon-heatmap-attach-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let pid = t.pid().to_string();
    let out = tachyon(
        &[
            "attach",
            "-d",
            "1",
            "--heatmap",
            "-o",
            out_dir.to_str().unwrap(),
            &pid,
        ],
        &std::env::temp_dir(),
    );
    drop(t);
    assert!(out.contains("1 source file analyzed"), "{out}");
    let index = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(index.contains("target.py</a>"), "{index}");
    let page = std::fs::read_to_string(out_dir.join("file_0000.html")).unwrap();
    assert!(page.contains("sum(range(5000))  # attached here"), "{page}");
    let rows = page_rows(&page);
    assert_eq!(hottest_self(&rows), 3, "{rows:?}");
    let _ = std::fs::remove_dir_all(&out_dir);
}
