//! Subinterpreters: with `-a`, threads running in every interpreter are
//! sampled and carry their interpreter's id; by default only the main
//! thread of the main interpreter is.

mod common;

use std::time::Duration;

use common::{machine_old_interpreters, sid_interpreters, spawn};
use tachyon::model::Sample;
use tachyon::unwind::UnwindOptions;

const TARGET: &str = r#"
import threading, time
CODE = (
    "import threading, time\n"
    "def subfn():\n"
    "    print('SUB', threading.get_native_id(), flush=True); time.sleep(1000)\n"
    "subfn()\n"
)
# The subinterpreter is created in the thread that runs it: 3.11 records
# a thread state's OS thread when the state is created.
try:
    from concurrent import interpreters
    def run():
        interpreters.create().exec(CODE)
except ImportError:
    try:
        import _interpreters as xi  # 3.13
    except ImportError:
        import _xxsubinterpreters as xi  # 3.11, 3.12
    def run():
        xi.run_string(xi.create(), CODE)
threading.Thread(target=run).start()
time.sleep(1000)
"#;

#[test]
fn threads_of_subinterpreters_are_sampled_with_their_interpreter() {
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    for it in interps {
        let mut t = spawn(&it, TARGET, &[], &[]);
        let line = t.wait_for("SUB ", Duration::from_secs(30));
        let sub_tid: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut u = tachyon::attach(
            t.pid(),
            UnwindOptions {
                all_threads: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut s = Sample::default();
        let mut found = None;
        for _ in 0..100 {
            if u.sample(&mut s).is_ok() {
                found = s
                    .threads
                    .iter()
                    .find(|th| th.tid == sub_tid && th.interpreter_id != 0)
                    .cloned();
                if found.as_ref().is_some_and(|th| !th.frames.is_empty()) {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let th = found.unwrap_or_else(|| {
            panic!(
                "{}: no thread {sub_tid} in a subinterpreter: {:?}",
                it.name, s.threads
            )
        });
        let f = u.frames().frame(th.frames[0]);
        assert_eq!(u.frames().str(f.func), "subfn", "{}", it.name);
        assert_eq!(f.line(), 3, "{}", it.name);
        let interps: std::collections::HashSet<i64> =
            s.threads.iter().map(|t| t.interpreter_id).collect();
        assert!(
            interps.contains(&0) && interps.len() >= 2,
            "{}: {interps:?}",
            it.name
        );

        // Default: the main thread of the main interpreter only.
        let mut u = tachyon::attach(t.pid(), UnwindOptions::default()).unwrap();
        u.sample(&mut s).unwrap();
        assert_eq!(s.threads.len(), 1, "{}", it.name);
        assert_eq!(s.threads[0].tid, t.pid() as u64, "{}", it.name);
        assert_eq!(s.threads[0].interpreter_id, 0, "{}", it.name);
    }
}
