//! `dump --locals` names the lock a blocked thread waits for, and an
//! RLock's holder, on real interpreters: a deadlock of two threads on a
//! Lock and an RLock, a `with rlock:` waiter, and a thread waiting to
//! enter a `Condition` another thread holds. The target prints what
//! Python itself says (`id()` of each lock, each thread's native id); the
//! dump must say exactly that on 3.14 and newer, whose frames keep their
//! value stack's end, and say nothing (never a guess) on 3.11 to 3.13.

mod common;

use std::time::{Duration, Instant};

use common::{
    TempDir, machine_old_interpreters, machine_supported_interpreters, sid_interpreters, spawn,
    tachyon_ok, validate_schema,
};

const LOCKS_PY: &str = r#"
import json, threading, time

first = threading.Lock()
second = threading.RLock()
cond = threading.Condition(threading.RLock())
holding = threading.Barrier(4)
tids = {}

def take_in_order(mine, theirs):
    tids[threading.current_thread().name] = threading.get_native_id()
    with mine:
        holding.wait()
        theirs.acquire()

def hold_the_condition():
    tids["cond-holder"] = threading.get_native_id()
    with cond:
        holding.wait()
        time.sleep(3600)

def wait_to_enter(lock):
    tids[threading.current_thread().name] = threading.get_native_id()
    holding.wait()
    with lock:
        pass

def start(name, target, *args):
    threading.Thread(target=target, args=args, name=name, daemon=True).start()

start("holder-a", take_in_order, first, second)
start("holder-b", take_in_order, second, first)
start("cond-holder", hold_the_condition)
holding.wait()
holding.reset()
holding = threading.Barrier(3)
start("with-waiter", wait_to_enter, second)
start("cond-waiter", wait_to_enter, cond)
holding.wait()
print("READY", json.dumps({"first": id(first), "second": id(second),
                           "cond_lock": id(cond._lock), "tids": tids}), flush=True)
time.sleep(3600)
"#;

/// The text dump's "Waiting for" line under each thread, by thread name.
fn wait_lines(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut thread = String::new();
    for line in text.lines() {
        if line.starts_with("Stack dump") {
            thread = line.split('"').nth(1).unwrap_or_default().to_owned();
        } else if let Some(w) = line.trim_start().strip_prefix("Waiting for ") {
            out.push((thread.clone(), w.to_owned()));
        }
    }
    out.sort();
    out
}

#[test]
fn dump_locals_names_the_lock_a_thread_waits_for_and_its_holder() {
    let dir = TempDir::new("dump-locks");
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    interps.extend(machine_supported_interpreters());
    for it in interps {
        let mut t = spawn(&it, LOCKS_PY, &[], &[]);
        let ready = t.wait_for("READY", Duration::from_secs(30));
        let facts: serde_json::Value = serde_json::from_str(&ready["READY ".len()..]).unwrap();
        let tid = |name: &str| facts["tids"][name].as_u64().unwrap();
        let addr = |name: &str| format!("{:#x}", facts[name].as_u64().unwrap());
        let p = t.pid().to_string();
        if it.minor < 14 {
            let text = tachyon_ok(&["dump", "-a", "-l", &p], dir.path());
            assert!(
                !text.contains("Waiting for"),
                "{}: a version whose frames do not keep their stack's end names no lock:\n{text}",
                it.name
            );
            continue;
        }
        let want = vec![
            (
                "cond-waiter".to_owned(),
                format!(
                    "<_thread.RLock at {}>, held by thread {} \"cond-holder\"",
                    addr("cond_lock"),
                    tid("cond-holder")
                ),
            ),
            (
                "holder-a".to_owned(),
                format!(
                    "<_thread.RLock at {}>, held by thread {} \"holder-b\"",
                    addr("second"),
                    tid("holder-b")
                ),
            ),
            (
                "holder-b".to_owned(),
                format!(
                    "<_thread.lock at {}>, held (a Lock does not record by whom)",
                    addr("first")
                ),
            ),
            (
                "with-waiter".to_owned(),
                format!(
                    "<_thread.RLock at {}>, held by thread {} \"holder-b\"",
                    addr("second"),
                    tid("holder-b")
                ),
            ),
        ];
        // The two waiters may take a moment to reach their `with`.
        let deadline = Instant::now() + Duration::from_secs(30);
        let text = loop {
            let text = tachyon_ok(&["dump", "-a", "-l", &p], dir.path());
            if wait_lines(&text) == want || Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(wait_lines(&text), want, "{}:\n{text}", it.name);
        assert!(
            text.contains(", in Condition.__enter__\n"),
            "{}: the condition's waiter waits inside Condition.__enter__:\n{text}",
            it.name
        );

        // The same facts in the JSON document, which its schema accepts.
        let json = tachyon_ok(&["dump", "-a", "-l", "--json", &p], dir.path());
        let file = dir.path().join(format!("locks-{}.json", it.name));
        std::fs::write(&file, &json).unwrap();
        validate_schema("docs/dump.schema.json", &[&file]);
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        let thread = |name: &str| {
            doc["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == name)
                .unwrap_or_else(|| panic!("{}: no thread {name}", it.name))
                .clone()
        };
        let a = &thread("holder-a")["waiting_for"];
        assert_eq!(a["lock_type"], "_thread.RLock", "{}: {a}", it.name);
        assert_eq!(a["address"], facts["second"], "{}: {a}", it.name);
        assert_eq!(
            a["owner_tid"].as_u64(),
            Some(tid("holder-b")),
            "{}",
            it.name
        );
        assert_eq!(a["owner_name"], "holder-b", "{}", it.name);
        let b = &thread("holder-b")["waiting_for"];
        assert_eq!(b["lock_type"], "_thread.lock", "{}: {b}", it.name);
        assert_eq!(b["locked"], true, "{}: {b}", it.name);
        assert!(b["owner_tid"].is_null(), "{}: {b}", it.name);
        assert!(
            thread("cond-holder")["waiting_for"].is_null(),
            "{}: a sleeping thread waits for no lock",
            it.name
        );
        eprintln!("{}: every wait named", it.name);
    }
}
