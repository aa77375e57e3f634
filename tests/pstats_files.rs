//! pstats files load in Python's own `pstats`: every scenario's file,
//! written by tachyon, in sid's 3.13, 3.14 and 3.15 and the machine's
//! Debian 3.11, equal to the reference's file entry for entry. These need
//! the sid root (chroot, as root), so they live here rather than among the
//! unit tests, which run on any machine.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use tachyon::collect::pstats::{PstatsCollector, PstatsOptions};
use tachyon::collect::{Collector, Output};
use tachyon::model::RunStats;

/// The collectors' scenario loader, shared with the unit tests: it names
/// `crate::model`, which here is the library's.
pub use tachyon::model;
#[path = "../src/collect/scenarios.rs"]
#[allow(dead_code)]
mod fixtures;

use common::ensure_sid_root as sid_root;

/// A directory below the sid root, removed on drop.
struct RootTmp {
    root: PathBuf,
    dir: PathBuf,
}

impl RootTmp {
    fn new(root: &Path, tag: &str) -> Self {
        let dir = root.join(format!("tmp/tachyon-pstats-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        RootTmp {
            root: root.to_path_buf(),
            dir,
        }
    }

    fn inside(&self, name: &str) -> String {
        format!(
            "/{}",
            self.dir
                .join(name)
                .strip_prefix(&self.root)
                .unwrap()
                .display()
        )
    }
}

impl Drop for RootTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn python(root: Option<&Path>, exe: &str, script: &str, args: &[String]) -> String {
    let mut cmd = match root {
        Some(r) => {
            let mut c = Command::new("chroot");
            c.arg(r).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let out = cmd
        .arg("-I")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{exe} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Loads a pstats file with `pstats.Stats`; prints the class chosen
/// (`SampledStats` when the marker is there), then every number in a
/// fixed order. With a second file (the reference's), also checks the
/// raw dicts are equal, key order included; the reference's marker is
/// dropped first unless a third argument is given.
const LOAD: &str = r#"
import marshal, pstats, sys
st = pstats.Stats(sys.argv[1])
print(type(st).__name__)
print(st.total_calls, st.prim_calls, repr(st.total_tt))
for k in sorted(st.stats):
    cc, nc, tt, ct, callers = st.stats[k]
    print(k, cc, nc, repr(tt), repr(ct), sorted(callers.items()))
if len(sys.argv) > 2:
    ours = marshal.load(open(sys.argv[1], "rb"))
    ref = marshal.load(open(sys.argv[2], "rb"))
    if len(sys.argv) < 4:
        del ref[("__sampled__",)]
    assert ours == ref, (ours, ref)
    assert list(ours) == list(ref), "key order differs"
    print("identical to the reference")
"#;

fn write_file(sc: &fixtures::Scenario, path: &Path, marker: bool) {
    let mut c = PstatsCollector::new(Output::File(path.to_path_buf()), PstatsOptions::default())
        .with_sampled_marker(marker);
    for s in &sc.samples {
        c.collect(s, &sc.frames);
    }
    let stats = RunStats {
        interval_us: sc.interval_us,
        ..Default::default()
    };
    c.finish(&sc.frames, &stats).unwrap();
}

#[test]
fn marshal_file_loads_in_pstats_of_every_python() {
    let root = sid_root();
    assert!(
        root.join("usr/bin/python3.15").exists(),
        "MISSING INTERPRETER: {}/usr/bin/python3.15 (run scripts/provision-sid.sh)",
        root.display()
    );
    assert!(
        Path::new("/usr/bin/python3.11").exists(),
        "MISSING INTERPRETER: /usr/bin/python3.11 is one of the machine's interpreters"
    );
    let tmp = RootTmp::new(&root, "load");
    let sid = |minor: u8, args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| tmp.inside(a)).collect();
        python(
            Some(&root),
            &format!("/usr/bin/python3.{minor}"),
            LOAD,
            &args,
        )
    };
    let mut checked = 0;
    for sc in fixtures::scenarios() {
        let empty = sc
            .samples
            .iter()
            .all(|s| s.threads.iter().all(|t| t.frames.is_empty()));
        if empty {
            continue; // pstats.Stats refuses an empty profile (the reference's too)
        }
        let reference = format!("{}.ref.prof", sc.name);
        let portable = format!("{}.prof", sc.name);
        let marked = format!("{}.marked.prof", sc.name);
        std::fs::copy(fixtures::dir().join(&portable), tmp.dir.join(&reference)).unwrap();
        write_file(&sc, &tmp.dir.join(&portable), false);
        write_file(&sc, &tmp.dir.join(&marked), true);

        let want = sid(15, &[&reference]);
        let (class, numbers) = want.split_once('\n').unwrap();
        assert_eq!(class, "SampledStats", "{}", sc.name);
        let same = format!("{numbers}identical to the reference\n");

        // With the marker: the reference's file, entry for entry.
        let got = sid(15, &[&marked, &reference, "keep-marker"]);
        assert_eq!(got, format!("SampledStats\n{same}"), "{}", sc.name);

        // Portable: the same entries and numbers, read as classic Stats
        // by 3.15 and by every older pstats.
        let got = sid(15, &[&portable, &reference]);
        assert_eq!(got, format!("Stats\n{same}"), "{}", sc.name);
        for minor in [13, 14] {
            let got = sid(minor, &[&portable]);
            assert_eq!(got, format!("Stats\n{numbers}"), "3.{minor}, {}", sc.name);
        }
        let path = tmp.dir.join(&portable).display().to_string();
        let got = python(None, "/usr/bin/python3.11", LOAD, &[path]);
        assert_eq!(got, format!("Stats\n{numbers}"), "3.11, {}", sc.name);
        checked += 1;
    }
    assert_eq!(checked, 4);
}

/// Why the marker is off by default: pstats before 3.15 cannot load it.
#[test]
fn marked_file_fails_in_older_pstats() {
    let root = sid_root();
    let tmp = RootTmp::new(&root, "old");
    let sc = fixtures::scenarios().into_iter().next().unwrap();
    write_file(&sc, &tmp.dir.join("m.prof"), true);
    let out = Command::new("chroot")
        .arg(&root)
        .args([
            "/usr/bin/python3.14",
            "-I",
            "-c",
            "import pstats, sys; pstats.Stats(sys.argv[1])",
        ])
        .arg(tmp.inside("m.prof"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TypeError"));
}

/// A frame without a file (`<GC>`, `<native>`) is keyed `("~", 0, name)`
/// as in the reference's file, which Python's `pstats` prints by name
/// (`{GC}`), never as `~:0(...)` (tachyon's own table names it `<GC>`;
/// see the unit tests in `collect/pstats.rs`).
#[test]
fn frames_without_a_file_read_as_names_in_pstats() {
    let root = sid_root();
    let tmp = RootTmp::new(&root, "names");
    let sc = fixtures::scenarios()
        .into_iter()
        .find(|s| s.name == "basic")
        .expect("the basic scenario");
    write_file(&sc, &tmp.dir.join("b.prof"), false);
    const PRINT: &str = "import pstats, sys; pstats.Stats(sys.argv[1]).print_stats()";
    let shown = [
        python(
            Some(&root),
            "/usr/bin/python3.15",
            PRINT,
            &[tmp.inside("b.prof")],
        ),
        python(
            None,
            "/usr/bin/python3.11",
            PRINT,
            &[tmp.dir.join("b.prof").display().to_string()],
        ),
    ];
    for text in shown {
        assert!(!text.contains("~:0"), "{text}");
        assert!(text.contains("{GC}") && text.contains("{native}"), "{text}");
    }
}
