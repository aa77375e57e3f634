//! ELF core files as process memory (`process::corefile`), on real cores
//! that `gdb`'s `gcore` makes of real interpreters: the core names the
//! process, its threads and its mapped files, holds the same bytes as the
//! live process where the interpreter keeps its state, and the unwinder
//! reads the same main-thread stack out of it as out of the live process.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{TempDir, machine_old_interpreters, release, run_ok, sid_interpreters, spawn};
use tachyon::model::Sample;
use tachyon::process::ProcessMemory;
use tachyon::process::corefile::CoreFile;
use tachyon::unwind::{UnwindOptions, Unwinder};

const PARKED: &str = r#"
import threading, time
def parked_worker():
    time.sleep(3600)
def parked_main():
    threading.Thread(target=parked_worker, daemon=True).start()
    time.sleep(0.3)
    print("READY", flush=True)
    time.sleep(3600)
parked_main()
"#;

/// The main thread's function names, leaf first.
fn names<M: ProcessMemory>(u: &Unwinder<M>, s: &Sample, tid: u64) -> Vec<String> {
    let t = s
        .threads
        .iter()
        .find(|t| t.tid == tid)
        .expect("the thread is sampled");
    let f = u.frames();
    t.frames
        .iter()
        .map(|&id| f.str(f.frame(id).func).to_owned())
        .collect()
}

#[test]
fn a_gcore_core_reads_as_its_live_process() {
    let dir = TempDir::new("corefile");
    let mut interps = release(sid_interpreters());
    interps.extend(machine_old_interpreters());
    for it in interps {
        let mut t = spawn(&it, PARKED, &[], &[]);
        t.wait_for("READY", Duration::from_secs(30));
        let pid = t.pid();
        let prefix = dir.0.join(format!("core-{}", it.name));
        run_ok(
            "gcore",
            Command::new("gcore")
                .arg("-o")
                .arg(&prefix)
                .arg(pid.to_string()),
        );
        let path = prefix.with_file_name(format!("core-{}.{pid}", it.name));
        let core = CoreFile::open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", it.name))
            .with_sysroot(None);
        assert_eq!(core.pid, Some(pid), "{}", it.name);
        let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
            .collect();
        tids.sort_unstable();
        let mut in_core = core.threads.clone();
        in_core.sort_unstable();
        assert_eq!(in_core, tids, "{}: the core's threads", it.name);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let exe_name = exe.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            core.files.iter().any(|f| f.path.ends_with(&exe_name)),
            "{}: {exe_name} is not among the core's mapped files: {:?}",
            it.name,
            core.files.iter().map(|f| &f.path).collect::<Vec<_>>()
        );
        // The unwinder on the core, with the runtime found in the live
        // process: the same main-thread stack. (Finding the runtime in the
        // core itself, and every thread, are `dump --core`'s next steps.)
        let mut live = tachyon::attach(pid, UnwindOptions::default()).unwrap();
        let opts = UnwindOptions::default();
        let rt = live.runtime().clone();
        let mut from_core = Unwinder::new(core, pid, rt, opts);
        let mut s = Sample::default();
        live.sample(&mut s).unwrap();
        let want = names(&live, &s, pid as u64);
        from_core
            .sample(&mut s)
            .unwrap_or_else(|e| panic!("{}: the core's stacks: {e}", it.name));
        assert_eq!(names(&from_core, &s, pid as u64), want, "{}", it.name);
        assert!(
            want.contains(&"parked_main".to_owned()),
            "{}: {want:?}",
            it.name
        );

        // A truncated core and a file that is no core: one clear error each.
        let bytes = std::fs::read(&path).unwrap();
        let cut = dir.0.join("truncated.core");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let e = CoreFile::open(&cut)
            .err()
            .expect("a truncated core is refused");
        assert!(e.to_string().contains("truncated"), "{}: {e}", it.name);
        let e = CoreFile::open(&exe)
            .err()
            .expect("an executable is no core");
        assert!(
            e.to_string().contains("not a core file"),
            "{}: {e}",
            it.name
        );
        // Outside every segment: an error, not zeros.
        assert!(from_core.memory().read(8, &mut [0u8; 8]).is_err());
        eprintln!(
            "{}: {} threads, {} mapped files, the live stacks",
            it.name,
            tids.len(),
            from_core.memory().files.len()
        );
    }
}
