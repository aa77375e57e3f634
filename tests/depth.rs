//! The thread's own count of its Python frames, which every walk is checked
//! against (`unwind::depth`), is read where each interpreter keeps it: two
//! ints of `PyThreadState` that no offsets table names, placed by version.
//! A program parked at a known depth must read as that depth, on every
//! interpreter tachyon supports from 3.12 (3.11 keeps no such count).

mod common;

use std::time::Duration;

use common::{
    Interp, free_threaded_interpreters, machine_old_interpreters, machine_supported_interpreters,
    sid_interpreters, spawn,
};
use tachyon::model::Sample;
use tachyon::process::ProcessMemory;
use tachyon::unwind::UnwindOptions;

/// `<module>` and 21 frames of `deep`, parked in `time.sleep`.
const PARKED: &str = r#"
import time
def deep(n):
    if n:
        return deep(n - 1)
    print("READY", flush=True)
    while True:
        time.sleep(0.01)
deep(20)
"#;
const FRAMES: u32 = 22;

/// The main thread's count, read from its state: the newest thread state
/// of the first interpreter, the only one in this program.
fn count_of_main<M: ProcessMemory>(u: &tachyon::unwind::Unwinder<M>) -> Option<u32> {
    let o = u.offsets();
    let mem = u.memory();
    let interp = mem
        .read_u64(u.runtime().address + o.runtime_interpreters_head)
        .unwrap();
    let tstate = mem.read_u64(interp + o.interp_threads_head).unwrap();
    let mut buf = vec![0u8; o.tstate_size as usize];
    mem.read(tstate, &mut buf).unwrap();
    tachyon::unwind::depth::counted(o, &buf)
}

fn check(it: &Interp) -> Option<String> {
    let mut target = spawn(it, PARKED, &[], &[]);
    target.wait_for("READY", Duration::from_secs(30));
    let opts = UnwindOptions {
        gc: false,
        ..Default::default()
    };
    let mut u = tachyon::attach(target.pid(), opts).unwrap();
    let counted = count_of_main(&u);
    let mut s = Sample::default();
    u.sample(&mut s).unwrap();
    let walked = s.threads.first().map_or(0, |t| t.frames.len());
    eprintln!("{}: counted {counted:?}, walked {walked}", it.name);
    let expected = (it.minor >= 12).then_some(FRAMES);
    if counted != expected || walked != FRAMES as usize {
        return Some(format!(
            "{}: the count reads {counted:?} (expected {expected:?}), the walk found {walked} frames (expected {FRAMES})",
            it.name
        ));
    }
    None
}

#[test]
fn a_parked_thread_counts_the_frames_it_holds() {
    let mut interps = sid_interpreters();
    interps.extend(machine_old_interpreters());
    interps.extend(machine_supported_interpreters());
    interps.extend(free_threaded_interpreters());
    let problems: Vec<String> = interps.iter().filter_map(check).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
