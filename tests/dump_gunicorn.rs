//! `dump --subprocesses` on a real pre-fork server: a gunicorn master
//! (from PyPI, installed by `scripts/provision-tools.sh`) with three sync
//! workers, one of them stuck in a request that never ends. One dump of
//! the master must hold the master and every worker, each once, parents
//! first, and show which worker is stuck and where.

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Running, TempDir, descendants, tachyon_bin, tools};

const APP_PY: &str = r#"
import time


def stuck_forever(environ):
    path = environ["PATH_INFO"]
    while True:
        time.sleep(3600)


def app(environ, start_response):
    if environ["PATH_INFO"] == "/stuck":
        stuck_forever(environ)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok\n"]
"#;

/// The JSON documents of one `dump -s --json` of `pid`, one per process.
fn dump_tree(pid: i32) -> Vec<serde_json::Value> {
    let out = Command::new(tachyon_bin())
        .args(["dump", "-s", "--json", &pid.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dump -s: {}",
        common::text(&out.stderr)
    );
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<serde_json::Value>()
        .map(|d| d.expect("one JSON document per process"))
        .collect()
}

/// Every file and function name of a dumped process's threads.
fn frames_of(doc: &serde_json::Value) -> Vec<(String, String)> {
    doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["frames"].as_array().unwrap().iter())
        .map(|f| {
            (
                f["file"].as_str().unwrap_or("").to_owned(),
                f["function"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn is_stuck(doc: &serde_json::Value) -> bool {
    frames_of(doc).iter().any(|(_, f)| f == "stuck_forever")
}

#[test]
fn dump_subprocesses_reads_a_gunicorn_master_and_its_workers() {
    let gunicorn = tools().join("gunicorn");
    assert!(
        gunicorn.join("gunicorn").is_dir(),
        "MISSING TOOL: gunicorn in {} (run scripts/provision-tools.sh)",
        gunicorn.display()
    );
    let dir = TempDir::new("gunicorn");
    std::fs::write(dir.path().join("app.py"), APP_PY).unwrap();
    let sock = dir.path().join("sock");
    let python = Path::new("/usr/bin/python3.11");
    assert!(python.exists(), "MISSING INTERPRETER: {}", python.display());
    let mut cmd = Command::new(python);
    cmd.args(["-m", "gunicorn", "-w", "3", "--timeout", "3600", "-b"])
        .arg(format!("unix:{}", sock.display()))
        .arg("app:app")
        .current_dir(dir.path())
        .env("PYTHONPATH", &gunicorn)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let server = Running::start(cmd);
    let master = server.pid();

    // Up: listening, with its three workers forked.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(sock.exists() && descendants(master).len() == 3) {
        assert!(
            Instant::now() < deadline,
            "gunicorn never started 3 workers"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // One request that never ends: one worker stuck in it.
    let mut client = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    client
        .write_all(b"GET /stuck HTTP/1.0\r\nHost: test\r\n\r\n")
        .unwrap();
    let docs = loop {
        let docs = dump_tree(master);
        if docs.iter().any(is_stuck) {
            break docs;
        }
        assert!(Instant::now() < deadline, "no worker took the request");
        std::thread::sleep(Duration::from_millis(100));
    };

    let pids: Vec<i64> = docs.iter().map(|d| d["pid"].as_i64().unwrap()).collect();
    let mut workers: Vec<i64> = descendants(master).into_iter().map(i64::from).collect();
    workers.sort_unstable();
    assert_eq!(pids[0], master as i64, "the master first: {pids:?}");
    let mut dumped_workers = pids[1..].to_vec();
    dumped_workers.sort_unstable();
    assert_eq!(dumped_workers, workers, "each worker once");
    assert!(
        frames_of(&docs[0])
            .iter()
            .any(|(file, _)| file.ends_with("gunicorn/arbiter.py")),
        "the master runs the arbiter: {:?}",
        frames_of(&docs[0])
    );
    for d in &docs[1..] {
        assert!(
            frames_of(d)
                .iter()
                .any(|(file, _)| file.ends_with("gunicorn/workers/sync.py")),
            "a sync worker: {:?}",
            frames_of(d)
        );
    }
    assert_eq!(
        docs.iter().filter(|d| is_stuck(d)).count(),
        1,
        "exactly one worker is stuck"
    );

    // The text dump: a section per process, the stuck one at its line.
    let out = Command::new(tachyon_bin())
        .args(["dump", "-s", &master.to_string()])
        .output()
        .unwrap();
    let text = common::text(&out.stdout);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    assert_eq!(text.matches("\nProcess ").count() + 1, 4, "{text}");
    assert!(
        text.contains(", in stuck_forever\n    time.sleep(3600)"),
        "{text}"
    );
    drop(client);
    drop(server);
}
