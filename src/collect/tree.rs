//! The call tree the flame graphs share, and how a frame is named and
//! classified for people (your code, the standard library, installed
//! packages, `<GC>`, `<native>`, unreadable).
//!
//! A [`CallTree`] merges root-first paths of keys (a key is whatever the
//! caller decides a box stands for: a function at a line, a function in a
//! file) into nodes. Each node keeps the samples that *ended* there per
//! *series*: a thread for the flame graph, "this run" and "the baseline"
//! for the differential one. Totals are sums over a node's subtree for
//! whichever series are asked for, so one tree answers "all threads" and
//! "thread N" alike. Nodes are numbered so that a parent comes before its
//! children, which lets every total be summed in one backward pass.

use std::collections::HashMap;
use std::hash::Hash;

use super::stacks::StackCounts;
use crate::model::{FrameId, FrameKind, FrameTable};

/// What a frame is, which decides its colour and its legend entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    User,
    Stdlib,
    ThirdParty,
    Gc,
    Native,
    Unreadable,
    /// A process's root in a merged profile (`--subprocesses --merge`).
    Process,
    /// A C, C++ or Rust function (`--native-frames`), its file the module.
    NativeCode,
}

impl Kind {
    /// The number the flame graph page knows the kind by.
    pub(crate) fn code(self) -> u8 {
        match self {
            Kind::User => 0,
            Kind::Stdlib => 1,
            Kind::ThirdParty => 2,
            Kind::Gc => 3,
            Kind::Native => 4,
            Kind::Unreadable => 5,
            Kind::Process => 6,
            Kind::NativeCode => 7,
        }
    }
}

/// User code, the standard library or an installed package, by path.
pub(crate) fn classify(file: &str) -> Kind {
    if file.split(['/', '\\']).any(is_packages_dir) {
        return Kind::ThirdParty;
    }
    if file.starts_with("<frozen") || file.split(['/', '\\']).any(is_stdlib_dir) {
        Kind::Stdlib
    } else {
        Kind::User
    }
}

/// A file as the live view names it: its path below the directory that
/// makes it an installed package (`site-packages`, `dist-packages`) or
/// part of the standard library (`python3.13`), else the whole path.
pub fn short_file(file: &str) -> &str {
    below_last_dir(file, is_packages_dir)
        .or_else(|| below_last_dir(file, is_stdlib_dir))
        .unwrap_or(file)
}

/// The part of `file` below the last directory `is_dir` accepts, when
/// something is below it.
fn below_last_dir(file: &str, is_dir: fn(&str) -> bool) -> Option<&str> {
    let mut below = None;
    let mut start = 0;
    for (i, c) in file.char_indices().filter(|&(_, c)| c == '/' || c == '\\') {
        if is_dir(&file[start..i]) {
            below = Some(i + c.len_utf8());
        }
        start = i + c.len_utf8();
    }
    below.map(|i| &file[i..]).filter(|rest| !rest.is_empty())
}

/// `site-packages`, `dist-packages`: where installed packages live.
fn is_packages_dir(p: &str) -> bool {
    p == "site-packages" || p == "dist-packages"
}

/// `python3.13` and the like (a directory the standard library lives in).
fn is_stdlib_dir(p: &str) -> bool {
    p.strip_prefix("python").is_some_and(|v| {
        let mut v = v.split('.');
        matches!((v.next(), v.next(), v.next()),
            (Some(major), Some(minor), None)
                if !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit())
                    && minor.bytes().take_while(u8::is_ascii_digit).count() > 0)
    })
}

/// A file as a dotted module name, for the "module names" labels: the
/// path below `site-packages`/`dist-packages` or the standard library's
/// directory (`json/decoder.py` → `json.decoder`), else the file's
/// directory and name (`/app/main.py` → `app.main`). A package's
/// `__init__` is its package; `<frozen runpy>` and other names that are
/// not paths stay as they are.
pub(crate) fn module_name(file: &str) -> String {
    if file.starts_with('<') || !file.contains(['/', '\\']) && !file.ends_with(".py") {
        return file.to_string();
    }
    let parts: Vec<&str> = file.split(['/', '\\']).filter(|p| !p.is_empty()).collect();
    let below = parts
        .iter()
        .rposition(|p| is_packages_dir(p) || is_stdlib_dir(p))
        .map(|i| &parts[i + 1..])
        .filter(|rest| !rest.is_empty());
    let mut names: Vec<&str> = match below {
        Some(rest) => rest.to_vec(),
        None => parts[parts.len().saturating_sub(2)..].to_vec(),
    };
    if let Some(last) = names.last_mut() {
        *last = last
            .strip_suffix(".py")
            .or_else(|| last.strip_suffix(".pyw"))
            .unwrap_or(last);
    }
    if names.len() > 1 && names.last() == Some(&"__init__") {
        names.pop();
    }
    names.join(".")
}

/// A frame as people see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Named<'a> {
    pub func: &'a str,
    /// `None` for synthetic (`<GC>`, `<native>`, `<truncated>`) and
    /// unreadable frames.
    pub file: Option<&'a str>,
    /// 0 when there is none.
    pub line: i32,
    pub kind: Kind,
}

/// How frame `id` is named and classified.
pub(crate) fn name(frames: &FrameTable, id: FrameId) -> Named<'_> {
    let f = frames.frame(id);
    let (file, func) = (frames.str(f.file), frames.str(f.func));
    let kind = match f.kind {
        FrameKind::Gc => Kind::Gc,
        FrameKind::Native | FrameKind::Truncated => Kind::Native,
        FrameKind::Unreadable => Kind::Unreadable,
        // `<task>`: no code of its own, coloured like other markers.
        FrameKind::Task => Kind::Native,
        FrameKind::Python => classify(file),
        FrameKind::NativeFunction => Kind::NativeCode,
    };
    // A `<task>` frame keeps its file (`<task>`), as the reference shows
    // it; a native function its module.
    let plain = matches!(
        f.kind,
        FrameKind::Python | FrameKind::Task | FrameKind::NativeFunction
    );
    Named {
        func,
        file: plain.then_some(file),
        line: if plain { f.line() } else { 0 },
        kind,
    }
}

/// What a box stands for, owned: a function, its file and (when lines
/// are told apart) its line. Frames differing only in column are one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FrameKey {
    pub func: Box<str>,
    pub file: Option<Box<str>>,
    pub line: i32,
    pub kind: Kind,
}

/// Frame keys interned once, numbered in the order first seen.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    pub list: Vec<FrameKey>,
    index: HashMap<FrameKey, u32>,
}

impl Keys {
    /// The key of frame `id`; `lines` tells lines apart (the flame graph)
    /// or not (the differential one, which matches functions).
    pub fn of(&mut self, frames: &FrameTable, id: FrameId, lines: bool) -> u32 {
        let n = name(frames, id);
        self.intern(FrameKey {
            func: n.func.into(),
            file: n.file.map(Into::into),
            line: if lines { n.line } else { 0 },
            kind: n.kind,
        })
    }

    /// The number of `key`, given when first seen.
    pub fn intern(&mut self, key: FrameKey) -> u32 {
        if let Some(&k) = self.index.get(&key) {
            return k;
        }
        let k = self.list.len() as u32;
        self.list.push(key.clone());
        self.index.insert(key, k);
        k
    }

    /// Keys for every frame of a table, computed on first use.
    pub fn mapper<'a>(
        &'a mut self,
        frames: &'a FrameTable,
        lines: bool,
    ) -> impl FnMut(FrameId) -> u32 + 'a {
        let mut cache = vec![u32::MAX; frames.len()];
        move |id| {
            let slot = &mut cache[id as usize];
            if *slot == u32::MAX {
                *slot = self.of(frames, id, lines);
            }
            *slot
        }
    }
}

/// One node of a [`CallTree`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    /// `u32::MAX` for the root.
    pub key: u32,
    /// The root is its own parent.
    pub parent: u32,
    pub children: Vec<u32>,
    /// Samples that ended here, per series: `(series, count)`, at most one
    /// entry per series.
    pub ends: Vec<(u32, u64)>,
}

/// Maps keyed by the tree's own small integers (node, key), with the fast
/// hasher of the hot paths (SipHash was most of the 20,000-stack case).
pub(crate) type IdMap<K, V> = foldhash::HashMap<K, V>;

/// Paths of keys merged into a tree; see the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct CallTree {
    pub nodes: Vec<Node>,
    index: IdMap<(u32, u32), u32>,
}

impl Default for CallTree {
    fn default() -> Self {
        Self::new()
    }
}

impl CallTree {
    pub fn new() -> Self {
        CallTree {
            nodes: vec![Node {
                key: u32::MAX,
                parent: 0,
                ..Node::default()
            }],
            index: IdMap::default(),
        }
    }

    /// The child of `parent` for `key`, made if new.
    pub fn child(&mut self, parent: u32, key: u32) -> u32 {
        if let Some(&c) = self.index.get(&(parent, key)) {
            return c;
        }
        let c = self.nodes.len() as u32;
        self.nodes.push(Node {
            key,
            parent,
            ..Node::default()
        });
        self.nodes[parent as usize].children.push(c);
        self.index.insert((parent, key), c);
        c
    }

    /// Count `n` samples of series `series` ending at the end of the
    /// root-first `path`; the node reached.
    pub fn add(&mut self, path: impl IntoIterator<Item = u32>, series: u32, n: u64) -> u32 {
        let mut node = 0;
        for key in path {
            node = self.child(node, key);
        }
        let ends = &mut self.nodes[node as usize].ends;
        match ends.iter_mut().find(|(s, _)| *s == series) {
            Some((_, c)) => *c += n,
            None => ends.push((series, n)),
        }
        node
    }

    /// Add every counted stack of `counts`, frames mapped to keys by
    /// `key`, each thread to the series `series(tid)`: root first (callers
    /// above... callees), or, `inverted`, leaf first (the functions that
    /// ran at the roots, their callers below them). Returns, per cell of
    /// `counts` (in its order), the node its stack ended at.
    pub fn add_stacks(
        &mut self,
        counts: &StackCounts,
        mut key: impl FnMut(FrameId) -> u32,
        mut series: impl FnMut(u64) -> u32,
        inverted: bool,
    ) -> Vec<u32> {
        let mut path = Vec::new();
        counts
            .cells()
            .iter()
            .map(|cell| {
                path.clear();
                let stack = counts.stack(cell.stack);
                if inverted {
                    path.extend(stack.iter().map(|&f| key(f)));
                } else {
                    path.extend(stack.iter().rev().map(|&f| key(f)));
                }
                self.add(path.iter().copied(), series(cell.tid), cell.count)
            })
            .collect()
    }

    /// Per node, the samples that ended there for the series `keep`
    /// accepts.
    pub fn ends(&self, mut keep: impl FnMut(u32) -> bool) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| {
                n.ends
                    .iter()
                    .filter(|(s, _)| keep(*s))
                    .map(|&(_, c)| c)
                    .sum()
            })
            .collect()
    }

    /// Per node, its subtree's samples, from per-node `ends` (as
    /// [`CallTree::ends`] gives them).
    pub fn totals(&self, ends: &[u64]) -> Vec<u64> {
        let mut t = ends.to_vec();
        for i in (1..self.nodes.len()).rev() {
            let p = self.nodes[i].parent as usize;
            t[p] += t[i];
        }
        t
    }

    /// Order every node's children by `order` (e.g. widest first).
    pub fn sort_children(&mut self, mut order: impl FnMut(u32, u32) -> std::cmp::Ordering) {
        for i in 0..self.nodes.len() {
            let mut ch = std::mem::take(&mut self.nodes[i].children);
            ch.sort_by(|&a, &b| order(a, b));
            self.nodes[i].children = ch;
        }
    }

    /// The nodes in depth-first order (a parent before its children,
    /// children in their order), with each one's depth (the root's is 0),
    /// skipping the subtrees `keep` refuses (the root is always kept).
    pub fn preorder(&self, mut keep: impl FnMut(u32) -> bool) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut todo = vec![(0u32, 0u32)];
        while let Some((i, d)) = todo.pop() {
            if i != 0 && !keep(i) {
                continue;
            }
            out.push((i, d));
            todo.extend(
                self.nodes[i as usize]
                    .children
                    .iter()
                    .rev()
                    .map(|&c| (c, d + 1)),
            );
        }
        out
    }
}

/// Self and cumulative samples per (series, key), from stacks: a key is
/// counted once per stack however often it recurs in it. The hot-spot
/// list's numbers, which, unlike a pruned tree's, miss nothing.
pub(crate) fn key_totals<S: Copy + Eq + Hash>(
    counts: &StackCounts,
    mut key: impl FnMut(FrameId) -> u32,
    mut series: impl FnMut(u64) -> S,
) -> IdMap<(S, u32), (u64, u64)> {
    let mut out: IdMap<(S, u32), (u64, u64)> = IdMap::default();
    let mut seen: Vec<u32> = Vec::new();
    for cell in counts.cells() {
        let s = series(cell.tid);
        seen.clear();
        for (depth, &f) in counts.stack(cell.stack).iter().enumerate() {
            let k = key(f);
            let e = out.entry((s, k)).or_default();
            if depth == 0 {
                e.0 += cell.count;
            }
            if !seen.contains(&k) {
                seen.push(k);
                e.1 += cell.count;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::scenarios::py;

    #[test]
    fn the_live_view_shows_installed_files_relative_to_where_they_are_installed() {
        for (path, shown) in [
            ("/usr/lib/python3.15/threading.py", "threading.py"),
            (
                "/usr/lib/python3.13/concurrent/futures/thread.py",
                "concurrent/futures/thread.py",
            ),
            (
                "/root/.pyenv/versions/3.12.1/lib/python3.12/json/decoder.py",
                "json/decoder.py",
            ),
            (
                "/v/lib/python3.14t/site-packages/requests/api.py",
                "requests/api.py",
            ),
            (
                "/usr/lib/python3/dist-packages/yaml/main.py",
                "yaml/main.py",
            ),
            (
                "/home/me/app/lib/python3.x/app.py",
                "/home/me/app/lib/python3.x/app.py",
            ),
            ("/tmp/pool.py", "/tmp/pool.py"),
            ("<frozen runpy>", "<frozen runpy>"),
        ] {
            assert_eq!(short_file(path), shown, "{path}");
        }
    }

    #[test]
    fn classification_by_path() {
        let long = "/home/someone/projects/with/a/very/long/path/pkg/mod.py";
        assert_eq!(classify(long), Kind::User);
        assert_eq!(
            classify("/venv/lib/python3.15/site-packages/req/api.py"),
            Kind::ThirdParty
        );
        assert_eq!(
            classify("/usr/lib/python3/dist-packages/req/api.py"),
            Kind::ThirdParty
        );
        assert_eq!(classify("/usr/lib/python3.13/os.py"), Kind::Stdlib);
        assert_eq!(classify("<frozen runpy>"), Kind::Stdlib);
        assert_eq!(classify("/home/me/python3.x/app.py"), Kind::User);
    }

    #[test]
    fn module_names() {
        assert_eq!(
            module_name("/usr/lib/python3.15/json/decoder.py"),
            "json.decoder"
        );
        assert_eq!(module_name("/usr/lib/python3.15/json/__init__.py"), "json");
        assert_eq!(module_name("/usr/lib/python3.15/threading.py"), "threading");
        assert_eq!(
            module_name("/v/lib/python3.12/site-packages/requests/api.py"),
            "requests.api"
        );
        assert_eq!(module_name("/tmp/fl_demo.py"), "tmp.fl_demo");
        assert_eq!(module_name("/app/src/main.py"), "src.main");
        assert_eq!(module_name("main.py"), "main");
        assert_eq!(module_name("<frozen runpy>"), "<frozen runpy>");
        assert_eq!(module_name("<string>"), "<string>");
    }

    #[test]
    fn synthetic_frames_have_no_file() {
        let mut t = FrameTable::new();
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let nat = t.synthetic(FrameKind::Native, "<native>");
        let f = py(&mut t, "/app/m.py", "main", 7);
        assert_eq!(
            name(&t, gc),
            Named {
                func: "<GC>",
                file: None,
                line: 0,
                kind: Kind::Gc
            }
        );
        assert_eq!(name(&t, nat).kind, Kind::Native);
        assert_eq!(name(&t, f).file, Some("/app/m.py"));
        assert_eq!(name(&t, f).line, 7);
    }

    #[test]
    fn tree_counts_per_series_and_sums_subtrees() {
        let mut tree = CallTree::new();
        // main -> work -> parse on series 0 (3) and 1 (1); main -> idle on 1 (2).
        let a = tree.add([1, 2, 3], 0, 3);
        let b = tree.add([1, 2, 3], 1, 1);
        assert_eq!(a, b);
        tree.add([1, 4], 1, 2);
        tree.add([1, 2], 0, 5);
        assert_eq!(tree.nodes.len(), 5);
        let all = tree.totals(&tree.ends(|_| true));
        assert_eq!(all, [11, 11, 9, 4, 2]);
        let one = tree.totals(&tree.ends(|s| s == 1));
        assert_eq!(one, [3, 3, 1, 1, 2]);
        let order: Vec<u32> = tree.preorder(|_| true).iter().map(|x| x.0).collect();
        assert_eq!(order, [0, 1, 2, 3, 4]);
        tree.sort_children(|a, b| one[b as usize].cmp(&one[a as usize]));
        let pre = tree.preorder(|n| n != 3);
        assert_eq!(pre, [(0, 0), (1, 1), (4, 2), (2, 2)]);
    }

    #[test]
    fn stacks_become_paths_and_key_totals_count_recursion_once() {
        let mut t = FrameTable::new();
        let m = py(&mut t, "/app/m.py", "main", 1);
        let f = py(&mut t, "/app/m.py", "f", 2);
        let f2 = py(&mut t, "/app/m.py", "f", 3);
        let mut c = StackCounts::new();
        c.add_stack(7, &[f, f, m], 2); // leaf first
        c.add_stack(8, &[f2, m], 1);
        let mut keys = Keys::default();
        let mut tree = CallTree::new();
        let ends = tree.add_stacks(&c, keys.mapper(&t, false), |tid| tid as u32, false);
        assert_eq!(ends, [3, 2]);
        // Inverted: f at the root, its callers below.
        let mut inv = CallTree::new();
        let ends = inv.add_stacks(&c, keys.mapper(&t, false), |tid| tid as u32, true);
        assert_eq!(ends, [3, 4]);
        assert_eq!(inv.nodes[1].key, 1);
        assert_eq!(inv.nodes[4].key, 0);
        assert_eq!(inv.nodes[4].parent, 1);
        assert_eq!(inv.totals(&inv.ends(|_| true))[1], 3);
        // Lines ignored: f:2 and f:3 are one key.
        assert_eq!(keys.list.len(), 2);
        let tot = key_totals(&c, keys.mapper(&t, false), |_| ());
        assert_eq!(tot[&((), 1)], (3, 3));
        assert_eq!(tot[&((), 0)], (0, 3));
        let mut lined = Keys::default();
        let tot = key_totals(&c, lined.mapper(&t, true), |tid| tid);
        assert_eq!(lined.list.len(), 3);
        assert_eq!(tot[&(8, 2)], (1, 1));
    }
}
