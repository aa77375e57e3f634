//! Generator and coroutine frames are frames like any other.
//!
//! A generator's frame lives in the generator object, outside the thread's
//! data stack, and its `previous` link is re-pointed on every resume and
//! cut on every yield. Read one by one, at other instants than the thread
//! state that names them, such frames often look torn: the leaf yielded
//! between the two reads. The unwinder reads the frames it saw last time in
//! the same system call as the thread state, keeps them when a walk fails,
//! and tries a torn sample again at once, within the sample's budget; a
//! chain of generators delegating to one another (`yield from`) is read
//! whole, however deep, within a budget that grows with the frames it
//! needs.
//!
//! Each test counts its failures by reason and prints them.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Interp, machine_old_interpreters, release, sid_interpreters, spawn};
use tachyon::error::Error;
use tachyon::model::Sample;
use tachyon::process::ProcessMemory;
use tachyon::unwind::{UnwindOptions, Unwinder};

/// `leaf` yields into `mid`, which yields into `top`: the leaf and the
/// middle frame live in generator objects for the whole run.
const NESTED: &str = r#"
def leaf():
    i = 0
    while True:
        i += 1
        yield i
def mid():
    for x in leaf():
        yield x * 2
def top():
    s = 0
    for y in mid():
        s += y
print("READY", flush=True)
top()
"#;

/// `top` iterates `g` and, inside that loop, `h(g)`, which iterates `g`
/// too: while `h` resumes `g`, `top` holds `g` deeper in its stack, under
/// `h`'s generator. A stack of `leaf` over `top` would have lost `h`.
const SHARED: &str = r#"
def leaf():
    i = 0
    while True:
        i += 1
        yield i
def h(g):
    for x in g:
        yield x
def top():
    g = leaf()
    for a in g:
        for b in h(g):
            pass
print("READY", flush=True)
top()
"#;

/// A chain of DEPTH generators, each delegating to the next with `yield
/// from`; the innermost counts a while between values. Every frame of the
/// chain lives in its own generator object, and every value passes through
/// all of them.
const DEEP: &str = r#"
import sys
sys.setrecursionlimit(10000)
DEPTH = int(sys.argv[1])
def chain(n):
    if n == 0:
        i = 0
        while True:
            for _ in range(3000):
                i += 1
            yield i
    else:
        yield from chain(n - 1)
g = chain(DEPTH)
next(g)
print("READY", flush=True)
for x in g:
    pass
"#;

/// What sampling one target found.
#[derive(Default)]
struct Tally {
    ok: usize,
    /// Failed samples by reason (addresses left out so they group).
    errors: BTreeMap<String, usize>,
    /// Samples that needed more reads than their budget.
    over_budget: usize,
    /// Stacks seen, by how many frames of `func` they hold.
    depths: BTreeMap<usize, usize>,
    /// Stacks not rooted at `<module>`.
    rootless: usize,
    /// Stacks of a shape the program cannot have.
    misshapen: usize,
}

impl Tally {
    /// What every generator test asks of a run of `samples`: whole stacks
    /// only, none over budget, and at least one in `at_least` good.
    fn problems(&self, who: &str, samples: usize, at_least: usize) -> Vec<String> {
        let mut v = Vec::new();
        if self.rootless + self.misshapen > 0 {
            v.push(format!(
                "{who}: {} stacks without <module>, {} of another shape",
                self.rootless, self.misshapen
            ));
        }
        if self.over_budget > 0 {
            v.push(format!(
                "{who}: {} samples over budget: {:?}",
                self.over_budget, self.errors
            ));
        }
        if self.ok * at_least < samples {
            v.push(format!(
                "{who}: only {} of {samples} samples succeeded: {:?}",
                self.ok, self.errors
            ));
        }
        v
    }
}

fn reason(e: &Error) -> String {
    e.to_string()
        .split(' ')
        .map(|w| if w.starts_with("0x") { "_" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sample `n` times. A stack must have a shape `shape` accepts (leaf
/// first); it is counted by how many leading `func` frames it has.
fn tally<M: ProcessMemory>(
    u: &mut Unwinder<M>,
    n: usize,
    func: &str,
    shape: &dyn Fn(&[&str]) -> bool,
) -> Tally {
    let mut s = Sample::default();
    let mut t = Tally::default();
    for _ in 0..n {
        if let Err(e) = u.sample(&mut s) {
            if matches!(e, Error::ReadBudget { .. }) {
                t.over_budget += 1;
            }
            *t.errors.entry(reason(&e)).or_default() += 1;
            continue;
        }
        t.ok += 1;
        let table = u.frames();
        for th in &s.threads {
            let names: Vec<&str> = th
                .frames
                .iter()
                .map(|&id| table.str(table.frame(id).func))
                .collect();
            if names.last() != Some(&"<module>") {
                t.rootless += 1;
            }
            let k = names.iter().take_while(|f| **f == func).count();
            if !shape(&names) {
                t.misshapen += 1;
            }
            *t.depths.entry(k).or_default() += 1;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    t
}

fn attach(target: &common::Target) -> Unwinder<impl ProcessMemory> {
    let opts = UnwindOptions {
        gc: false,
        ..Default::default()
    };
    tachyon::attach(target.pid(), opts).unwrap()
}

fn interpreters() -> Vec<Interp> {
    let mut v = release(sid_interpreters());
    v.extend(machine_old_interpreters());
    v
}

/// A 500-deep `yield from` chain is a real stack: every sample of it fits
/// the budget, and every stack reported is the chain's frames (as many as
/// are resumed at that instant) over `<module>`, all 501 of them at times.
/// (Before the budget grew with the frames a walk reads, every first walk
/// of such a chain needed more than the flat 48 reads, and the prefetch
/// kept only 16 of its frames for the next sample.)
#[test]
fn a_500_deep_yield_from_chain_fits_the_budget_and_is_whole() {
    const DEPTH: usize = 500;
    const SAMPLES: usize = 400;
    let mut problems = Vec::new();
    for it in interpreters() {
        let mut target = spawn(&it, DEEP, &[], &[&DEPTH.to_string()]);
        target.wait_for("READY", Duration::from_secs(30));
        let mut u = attach(&target);
        // The chain's frames, then `<module>`: anything else between them
        // is a frame that is not there.
        let shape =
            |names: &[&str]| names.iter().take_while(|f| **f == "chain").count() + 1 == names.len();
        let t = tally(&mut u, SAMPLES, "chain", &shape);
        eprintln!(
            "{}: {} of {SAMPLES} good ({} whole chains), failed {:?}",
            it.name,
            t.ok,
            t.depths.get(&(DEPTH + 1)).unwrap_or(&0),
            t.errors
        );
        problems.extend(t.problems(&it.name, SAMPLES, 10));
        // Between values, the chain is suspended from its leaf down and
        // resumed from its root up: a stack holds any number of its frames,
        // and nothing else. It must reach the whole chain at times. On a
        // busy machine the target may not run during one burst of
        // samples (all of them then see one instant): more bursts, each
        // checked like the first, until it shows or ten have not.
        let mut depths = t.depths.clone();
        for _ in 0..10 {
            if depths.contains_key(&(DEPTH + 1)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            let more = tally(&mut u, SAMPLES, "chain", &shape);
            problems.extend(more.problems(&it.name, SAMPLES, 10));
            for (k, v) in more.depths {
                *depths.entry(k).or_default() += v;
            }
        }
        if !depths.contains_key(&(DEPTH + 1)) {
            problems.push(format!(
                "{}: no stack holds the whole chain: {:?}",
                it.name, depths
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Nested generators, resumed and suspended hundreds of thousands of times
/// a second: every stack is whole, and a torn sample is tried again, so
/// failures stay rare (the bar is low, as the rate depends on how the two
/// processes share the machine: printed for the record).
#[test]
fn nested_generators_are_sampled_whole() {
    const SAMPLES: usize = 3000;
    let mut problems = Vec::new();
    for it in interpreters() {
        let mut target = spawn(&it, NESTED, &[], &[]);
        target.wait_for("READY", Duration::from_secs(30));
        let mut u = attach(&target);
        // The leaf's callers, as far as they are resumed.
        let full = ["leaf", "mid", "top", "<module>"];
        let shape = |names: &[&str]| (0..full.len()).any(|i| names == &full[i..]);
        let t = tally(&mut u, SAMPLES, "", &shape);
        eprintln!(
            "{}: {} of {SAMPLES} good, failed {:?}",
            it.name, t.ok, t.errors
        );
        problems.extend(t.problems(&it.name, SAMPLES, 2));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A known call graph (`fixtures/targets/callgraph.py`): plain calls,
/// recursion, a C function (`sum`) calling a generator that delegates to
/// another, run as fast as they go by the main thread and short threads.
/// Every caller->callee pair of every stack reported is one the program
/// makes. A pair it never makes (`rec -> b` without `a`, `<module> -> g`
/// without `work` and `e`) is a frame lost or spliced in from a slot that
/// another call had taken: a wrong answer that looks right.
#[test]
fn every_reported_caller_callee_pair_is_in_the_call_graph() {
    const SAMPLES: usize = 20_000;
    let calls = common::CALLGRAPH_CALLS;
    let mut problems = Vec::new();
    for it in interpreters() {
        let mut target = spawn(&it, common::CALLGRAPH, &[], &[]);
        target.wait_for("READY", Duration::from_secs(30));
        // The target on one CPU, the sampler on another: the target then
        // runs while it is read, the case where slots change under reads.
        let _apart = Apart::new(target.pid());
        let opts = UnwindOptions {
            all_threads: true,
            ..UnwindOptions::default()
        };
        let mut u = tachyon::attach(target.pid(), opts).unwrap();
        let mut s = Sample::default();
        let (mut ok, mut stacks) = (0usize, 0usize);
        let mut errors: BTreeMap<String, usize> = BTreeMap::new();
        let mut wrong: BTreeMap<String, usize> = BTreeMap::new();
        for _ in 0..SAMPLES {
            if let Err(e) = u.sample(&mut s) {
                *errors.entry(reason(&e)).or_default() += 1;
                continue;
            }
            ok += 1;
            let table = u.frames();
            for th in &s.threads {
                stacks += 1;
                // (file is the target's, qualified name), leaf first.
                let frames: Vec<(bool, &str)> = th
                    .frames
                    .iter()
                    .map(|&id| {
                        let f = table.frame(id);
                        (table.str(f.file).ends_with("target.py"), table.str(f.func))
                    })
                    .collect();
                for pair in frames.windows(2) {
                    let ((callee_ours, callee), (caller_ours, caller)) = (pair[0], pair[1]);
                    // Pairs inside the target, and the one from threading
                    // into it.
                    if !callee_ours || !(caller_ours || caller == "Thread.run") {
                        continue;
                    }
                    if !calls.contains(&(caller, callee)) {
                        let whole: Vec<&str> = frames.iter().map(|f| f.1).collect();
                        *wrong
                            .entry(format!("{caller} -> {callee} in {}", whole.join(" < ")))
                            .or_default() += 1;
                    }
                }
            }
        }
        eprintln!(
            "{}: {ok} of {SAMPLES} good ({stacks} stacks), failed {errors:?}, wrong {wrong:?}",
            it.name
        );
        // The aim is none. What can be left (a C-stack entry frame read at
        // another instant than the data-stack slot it links to, when the
        // slot's new frame is no larger than the old) is rare: at most one
        // stack in 2,000 may hold a pair the program never makes. Before
        // the contiguity checks, one in 200 did on 3.15.
        let n_wrong: usize = wrong.values().sum();
        if n_wrong * 2000 > stacks.max(1) {
            problems.push(format!(
                "{}: {n_wrong} of {stacks} stacks with pairs the program never makes: {wrong:?}",
                it.name
            ));
        }
        if ok * 10 < SAMPLES {
            problems.push(format!(
                "{}: only {ok} of {SAMPLES} good: {errors:?}",
                it.name
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The target's threads on CPU 0 and this thread on CPU 1 while it lives
/// (on a machine with two CPUs or more; elsewhere nothing changes): the
/// target runs while it is read. This thread's own affinity comes back on
/// drop.
struct Apart {
    old: Option<libc::cpu_set_t>,
}

impl Apart {
    fn new(pid: i32) -> Apart {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus < 2 {
            return Apart { old: None };
        }
        // SAFETY: cpu_set_t is plain data; the calls get valid pointers and
        // its size.
        unsafe {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut old) != 0 {
                return Apart { old: None };
            }
            let mut zero: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut zero);
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(1, &mut one);
            for tid in common::procs::tids(pid) {
                libc::sched_setaffinity(tid, size, &zero);
            }
            libc::sched_setaffinity(0, size, &one);
            Apart { old: Some(old) }
        }
    }
}

impl Drop for Apart {
    fn drop(&mut self) {
        if let Some(old) = &self.old {
            // SAFETY: as above.
            unsafe {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), old);
            }
        }
    }
}

/// A sample that meets the target halfway through a change, while the
/// target is not running, reads the same half-made change on every quick
/// retry: 3.12.1's generator resume, for one, publishes the generator's
/// frame as the current one before linking it to its caller. So the
/// sampler reads such a sample again a little later, once the target has
/// had the CPU.
///
/// To make this happen on every machine, loaded or not, the target and
/// tachyon share one CPU at real-time priorities, tachyon's the higher:
/// whenever tachyon samples, the target is stopped wherever tachyon's
/// wake-up preempted it, and nothing else runs in between. Each run is
/// shorter than the kernel's real-time budget per second (950 ms), so the
/// two are never throttled together; a run that got far fewer samples than
/// due did not have CPU 0 when it asked, and is done again. The rate, 250 Hz, leaves room for
/// the late reads after a torn sample's quick retries even in a debug
/// build on a slow machine (here those retries took 0.4-0.6 ms of a 1 ms
/// interval, and CI, slower, missed the bound at 1 kHz). Before the late reads, 3.12.1 failed 1.2-2.0% of such
/// samples ("the chain did not end in an entry frame"); it must now fail
/// under 0.5%, and every stack must be whole.
#[test]
fn a_target_preempted_mid_resume_is_read_again_once_it_ran() {
    const RUNS: usize = 8;
    // A run's samples when tachyon had CPU 0 whenever it asked: 0.6 s at
    // 250 Hz.
    const DUE: u64 = 150;
    let mut problems = Vec::new();
    for it in interpreters() {
        let mut target = spawn(&it, NESTED, &[], &[]);
        target.wait_for("READY", Duration::from_secs(30));
        let dir = common::TempDir::new("preempted");
        let (mut samples, mut failed) = (0u64, 0u64);
        let mut misshapen = Vec::new();
        let (mut counted, mut starved) = (0, Vec::new());
        for run in 0..RUNS * 2 {
            if counted == RUNS {
                break;
            }
            let out = dir.path().join(format!("run{run}.txt"));
            let stdout = {
                let _rt = RealTime::on_cpu0(&common::procs::tids(target.pid()), 1);
                attach_on_cpu0_at_priority_2(target.pid(), &out)
            };
            let (n, rate) = captured(&stdout);
            // Out of real time for a while: no throttling in the next run.
            std::thread::sleep(Duration::from_millis(400));
            // Far fewer samples than due: CPU 0 was not ours (a host
            // that took the virtual CPU away, real-time throttling), and
            // a late read's wait may not have let the target run. Such a
            // run does not test the late reads: it is done again.
            if n * 10 < DUE * 9 {
                starved.push(n);
                continue;
            }
            counted += 1;
            samples += n;
            failed += (n as f64 * rate / 100.0).round() as u64;
            for (stack, _) in common::collapsed::read(&out) {
                let names: Vec<&str> = common::collapsed::frames(&stack)
                    .filter_map(|f| common::collapsed::frame_parts(f).map(|p| p.1))
                    .collect();
                let full = ["<module>", "top", "mid", "leaf"];
                if !(1..=full.len()).any(|k| names == full[..k]) {
                    misshapen.push(stack);
                }
            }
        }
        eprintln!(
            "{}: {failed} of {samples} failed; runs done again, with their samples: {starved:?}",
            it.name
        );
        if counted < RUNS {
            problems.push(format!(
                "{}: only {counted} of {} runs had CPU 0 when they asked; the others took {starved:?} of {DUE} samples",
                it.name,
                RUNS * 2
            ));
        }
        if failed * 200 > samples {
            problems.push(format!("{}: {failed} of {samples} samples failed", it.name));
        }
        if !misshapen.is_empty() {
            problems.push(format!("{}: stacks not whole: {misshapen:?}", it.name));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `tachyon attach -d 0.6 -r 250 PID --collapsed -o OUT` on CPU 0 at
/// real-time priority 2; its standard output.
fn attach_on_cpu0_at_priority_2(pid: i32, out: &std::path::Path) -> String {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(common::tachyon_bin());
    cmd.args(["attach", "-d", "0.6", "-r", "250", "--collapsed", "-o"])
        .arg(out)
        .arg(pid.to_string());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if RealTime::apply(0, 2) {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    common::run_ok("tachyon attach at real-time priority", &mut cmd)
}

/// The "Captured N samples" count and the error rate of a summary.
fn captured(stdout: &str) -> (u64, f64) {
    let field = |prefix: &str| -> &str {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {stdout}"))
    };
    let n = field("Captured ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let rate = field("Error rate: ").trim().parse().unwrap();
    (n, rate)
}

/// Threads on CPU 0 under SCHED_FIFO while it lives, back to the default
/// policy (on any CPU) on drop.
struct RealTime {
    tids: Vec<i32>,
}

impl RealTime {
    fn on_cpu0(tids: &[i32], priority: i32) -> RealTime {
        for &tid in tids {
            assert!(
                RealTime::apply(tid, priority),
                "cannot make thread {tid} real-time on CPU 0: {}",
                std::io::Error::last_os_error()
            );
        }
        RealTime {
            tids: tids.to_vec(),
        }
    }

    /// Thread `tid` (0: this one) on CPU 0 at SCHED_FIFO `priority`.
    fn apply(tid: i32, priority: i32) -> bool {
        // SAFETY: plain data and valid pointers with their sizes.
        unsafe {
            let mut cpu0: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut cpu0);
            let param = libc::sched_param {
                sched_priority: priority,
            };
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &cpu0) == 0
                && libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) == 0
        }
    }
}

impl Drop for RealTime {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe {
            let mut all: libc::cpu_set_t = std::mem::zeroed();
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            for c in 0..cpus {
                libc::CPU_SET(c, &mut all);
            }
            let param = libc::sched_param { sched_priority: 0 };
            for &tid in &self.tids {
                libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param);
                libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &all);
            }
        }
    }
}

/// A target stopped (SIGSTOP) at a random instant is read as it is: every
/// try of a sample reads the same state. 3.12.1's `FOR_ITER_GEN` makes
/// the resumed generator's frame the current one about fifteen
/// instructions before it links that frame to its resumer (and
/// `YIELD_VALUE` cuts the link an instruction before it hands the current
/// frame back), so a stop there left a chain of one generator frame with
/// no entry frame below it: 2-4% of such samples of the nested
/// generators failed, whatever the retries. The unwinder now proves which
/// frame resumed the generator (see `unwind::resumer`) and reads the
/// stack through it: at most one stop in 200 may fail, and every stack is
/// whole (the leaf's callers as far as they are resumed; a stack that
/// skipped `mid`, or `h` of [`SHARED`], would be a frame lost).
#[test]
fn a_target_stopped_mid_resume_is_read_whole() {
    const STOPS: usize = 1000;
    let programs: [(&str, &str, [&str; 4]); 2] = [
        ("nested", NESTED, ["leaf", "mid", "top", "<module>"]),
        ("shared", SHARED, ["leaf", "h", "top", "<module>"]),
    ];
    let mut problems = Vec::new();
    for it in interpreters() {
        for (name, program, full) in programs {
            let who = format!("{} {name}", it.name);
            problems.extend(stopped_samples(&it, &who, program, &full, STOPS));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Stop `program` `stops` times at random instants and sample it once each
/// time: what is wrong with the results (see
/// [`a_target_stopped_mid_resume_is_read_whole`]). Its stacks are `full`
/// (leaf first) from some frame on.
fn stopped_samples(
    it: &Interp,
    who: &str,
    program: &str,
    full: &[&str],
    stops: usize,
) -> Vec<String> {
    let mut target = spawn(it, program, &[], &[]);
    target.wait_for("READY", Duration::from_secs(30));
    let mut u = attach(&target);
    let pid = target.pid();
    let (mut failed, mut misshapen) = (BTreeMap::<String, usize>::new(), Vec::new());
    let mut shapes = BTreeMap::<usize, usize>::new();
    let mut s = Sample::default();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ pid as u64;
    for _ in 0..stops {
        // SAFETY: signals to our own child, which the target's drop reaps.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        while common::procs::state(pid) != Some('T') {
            std::thread::yield_now();
        }
        let r = u.sample(&mut s);
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        match r {
            Err(e) => *failed.entry(reason(&e)).or_default() += 1,
            Ok(()) => {
                let table = u.frames();
                let names: Vec<&str> = s.threads[0]
                    .frames
                    .iter()
                    .map(|&id| table.str(table.frame(id).func))
                    .collect();
                match (0..full.len()).find(|&i| names == full[i..]) {
                    Some(i) => *shapes.entry(full.len() - i).or_default() += 1,
                    None => misshapen.push(names.join(" < ")),
                }
            }
        }
        // Run 0 to 2 ms before the next stop.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_micros(seed % 2000));
    }
    let n_failed: usize = failed.values().sum();
    eprintln!(
        "{who}: {n_failed} of {stops} stopped samples failed {failed:?}; stacks by depth {shapes:?}"
    );
    let mut problems = Vec::new();
    if n_failed * 200 > stops {
        problems.push(format!(
            "{who}: {n_failed} of {stops} stopped samples failed: {failed:?}"
        ));
    }
    if !misshapen.is_empty() {
        problems.push(format!("{who}: stacks not whole: {misshapen:?}"));
    }
    // Every depth the program has, the leaf's whole chain among them.
    if shapes.len() < 3 || !shapes.contains_key(&full.len()) {
        problems.push(format!("{who}: stacks by depth {shapes:?}"));
    }
    problems
}
