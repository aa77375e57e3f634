//! The sampling loop: a fixed schedule, failures counted, never fatal.
//!
//! The next sample is due exactly one interval after the previous one was
//! due, not after it finished, so the rate does not drift. Far from the due
//! time the loop sleeps most of the gap; close to it, it spins; when late
//! (a slow sample, a busy machine), it samples at once and catches up.
//! Sampling ends when the duration is over, when the target exits, or on
//! Ctrl-C/SIGTERM, and in every case the collector still gets `finish`.
//!
//! One import reaches a layer above: [`Collector`], the trait of what the
//! loop feeds (`collect/`). The trait is the loop's output port; its
//! implementations (formats, the live view, recordings) sit above and
//! are chosen by the session, so the loop knows none of them.

pub mod pools;
pub mod signals;

use std::time::{Duration, Instant};

use crate::collect::Collector;
use crate::error::Error;
use crate::model::Sample;
use crate::model::{Mode, RunStats};
use crate::process::ProcessMemory;
use crate::unwind::Unwinder;

/// How close to a due sample the loop stops sleeping and spins. Spinning
/// longer buys nothing: a sample a few tens of microseconds late changes no
/// statistic (the schedule, not the wake-up, fixes the rate), while every
/// microsecond spun is the profiler's CPU time.
const SPIN: Duration = Duration::from_micros(5);

/// The longest single sleep. At low rates the gap between samples is
/// seconds or minutes; sleeping it in slices this long bounds how late a
/// signal, the end of `-d` or the target's exit is noticed.
const SLICE: Duration = Duration::from_millis(20);

/// How long a torn sample first waits before it is read again (see
/// [`Run::read`]): time for a target that was preempted in the middle of a
/// change to finish it. Each later wait is twice the one before.
const LATE_WAIT: Duration = Duration::from_micros(100);

/// How many times a torn sample is read again late, at most.
const LATE_TRIES: usize = 4;

/// The lowest sampling rate accepted: one sample every 100 seconds.
pub const MIN_RATE_HZ: f64 = 0.01;

/// How to sample.
#[derive(Debug, Clone)]
pub struct SampleConfig {
    pub interval: Duration,
    /// Stop after this long; `None`: until the target exits or Ctrl-C.
    pub duration: Option<Duration>,
    pub mode: Mode,
    /// Print the achieved rate once a second while sampling.
    pub realtime_stats: bool,
    /// Stop when this is set (by another thread: the session ending a
    /// child's profile).
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Why sampling stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    TargetExited,
    Interrupted,
    /// A fatal error (for example the permission to read was lost).
    Fatal,
    /// The output could not be written (a full disk): the samples since
    /// would be lost.
    OutputFailed,
    /// The configuration's `cancel` flag was set.
    Cancelled,
}

/// Parse a sampling rate the way the reference does: a number with an
/// optional `hz`, `khz`/`k` or `mhz` suffix (case-insensitive); a bare
/// number is Hz. Returns the interval.
pub fn parse_rate(s: &str) -> Result<Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = if let Some(n) = t.strip_suffix("mhz") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix("khz") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('k') {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("hz") {
        (n, 1.0)
    } else {
        (t.as_str(), 1.0)
    };
    let valid = !num.is_empty()
        && num.chars().all(|c| c.is_ascii_digit() || c == '.')
        && num.chars().filter(|&c| c == '.').count() <= 1
        && !num.starts_with('.')
        && !num.ends_with('.');
    if !valid {
        return Err(format!(
            "invalid sampling rate {s:?}: use a number with an optional suffix, e.g. 1000, 1khz, 10k, 0.5hz"
        ));
    }
    let hz: f64 = num
        .parse()
        .map_err(|_| format!("invalid sampling rate {s:?}"))?;
    let hz = hz * mult;
    if hz <= 0.0 {
        return Err("Sampling rate must be positive".into());
    }
    if hz < MIN_RATE_HZ {
        return Err(format!(
            "Sampling rate too low: {s} is under {MIN_RATE_HZ} Hz (one sample every {} seconds)",
            1.0 / MIN_RATE_HZ
        ));
    }
    let us = (1_000_000.0 / hz).floor();
    if us < 1.0 {
        return Err(format!(
            "Sampling rate too high: {s} is an interval under 1 microsecond"
        ));
    }
    Ok(Duration::from_micros(us as u64))
}

/// Something that stops the target for the duration of one sample
/// (`--blocking`): it returns a guard that resumes the target when dropped.
pub type Pause<'a> = &'a dyn Fn() -> crate::Result<Box<dyn std::any::Any>>;

/// What more is read of a stopped target after its Python stacks (native
/// frames), before it runs again.
pub trait WhileStopped {
    /// `entries`: per stack of `sample`, its entry frames' addresses
    /// ([`Unwinder::keep_entry_frames`]).
    fn complete(
        &mut self,
        sample: &mut Sample,
        frames: &mut crate::model::FrameTable,
        entries: &[Vec<u64>],
    ) -> crate::Result<()>;
}

impl<T: crate::process::Target + crate::native::stack::ThreadRegisters> WhileStopped
    for crate::native::NativeStacks<T>
{
    fn complete(
        &mut self,
        sample: &mut Sample,
        frames: &mut crate::model::FrameTable,
        entries: &[Vec<u64>],
    ) -> crate::Result<()> {
        crate::native::NativeStacks::complete(self, sample, frames, entries)
    }
}

/// How the target is stopped for each sample (`--blocking`,
/// `--native-frames`), and what is read while it is.
pub struct Blocking<'a> {
    pub pause: Pause<'a>,
    pub also: Option<&'a mut dyn WhileStopped>,
}

/// Run the loop until one of the stop conditions; returns the statistics
/// and why it stopped. `alive` tells whether the target still exists (asked
/// only after a failed sample).
pub fn run<M: ProcessMemory>(
    unwinder: &mut Unwinder<M>,
    collector: &mut dyn Collector,
    cfg: &SampleConfig,
    alive: &dyn Fn() -> bool,
    blocking: Option<Blocking<'_>>,
) -> (RunStats, StopReason) {
    let interval = cfg.interval;
    // Precise sleeps: the default 50 µs timer slack would make us either
    // late or spinning.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_timerslack(1);
    let start = Instant::now();
    let epoch_start = crate::model::epoch_us();
    let mut next = start;
    let sample = Sample::default();
    let stats = RunStats {
        interval_us: interval.as_micros() as u64,
        mode: cfg.mode,
        ..RunStats::default()
    };
    let mut rt = RealtimeStats::new(cfg.realtime_stats);
    // Why samples fail, one line each, for whoever wonders about the
    // error rate.
    let log_errors = std::env::var_os("TACHYON_LOG_FAILED_SAMPLES").is_some();
    let mut run = Run {
        unwinder,
        collector,
        cfg,
        alive,
        blocking,
        start,
        epoch_start,
        sample,
        stats,
        log_errors,
        pools: pools::ThreadPools::default(),
    };
    let reason = loop {
        if let Some(reason) = run.stop_asked() {
            break reason;
        }
        let now = Instant::now();
        let elapsed = now.duration_since(start);
        if let Some(d) = cfg.duration
            && elapsed >= d
        {
            break StopReason::Duration;
        }
        if now < next {
            if !run.wait(next - now, elapsed) {
                break StopReason::TargetExited;
            }
            continue;
        }
        if let Some(reason) = run.take(now, next + interval) {
            break reason;
        }
        rt.tick(now, run.stats.attempts);
        next += interval;
    };
    rt.done();
    let mut stats = run.stats;
    stats.frame_cache = run.unwinder.frame_cache().clone();
    stats.duration_s = start.elapsed().as_secs_f64();
    stats.interrupted = reason == StopReason::Interrupted;
    (stats, reason)
}

/// The sampling loop's state: what it samples with, into, on what
/// schedule, and what it counted so far.
struct Run<'a, 'b, M: ProcessMemory> {
    unwinder: &'a mut Unwinder<M>,
    collector: &'a mut dyn Collector,
    cfg: &'a SampleConfig,
    alive: &'a dyn Fn() -> bool,
    blocking: Option<Blocking<'b>>,
    start: Instant,
    /// `start` on the wall clock, in microseconds since the epoch.
    epoch_start: u64,
    /// Filled again by each sample (no allocation per sample).
    sample: Sample,
    stats: RunStats,
    log_errors: bool,
    /// Threads past the first thousand, counted by their pool.
    pools: pools::ThreadPools,
}

impl<M: ProcessMemory> Run<'_, '_, M> {
    /// A signal, or the session, asks the loop to stop.
    #[inline]
    fn stop_asked(&self) -> Option<StopReason> {
        if signals::interrupted() {
            return Some(StopReason::Interrupted);
        }
        if self
            .cfg
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        {
            return Some(StopReason::Cancelled);
        }
        None
    }

    /// Wait toward the next sample, due in `gap` (`elapsed` into the run).
    /// Sleep to just short of the due time (or the end of the run,
    /// whichever comes first), spin the rest: with the timer slack at its
    /// minimum a sleep overshoots by only a few microseconds. A long gap
    /// (a low rate) is slept in slices, so a signal, the deadline or the
    /// target's exit is noticed within one slice. `false`: the target is
    /// gone.
    #[inline]
    fn wait(&self, mut gap: Duration, elapsed: Duration) -> bool {
        if let Some(d) = self.cfg.duration {
            gap = gap.min(d - elapsed);
        }
        if gap > SLICE {
            std::thread::sleep(SLICE);
            return (self.alive)();
        } else if gap > SPIN {
            std::thread::sleep(gap - SPIN);
        } else {
            std::hint::spin_loop();
        }
        true
    }

    /// Take one sample, due `now` (the next is due at `next`), and give it
    /// to the collector (or count its failure). `Some`: why the loop stops.
    #[inline]
    fn take(&mut self, now: Instant, next: Instant) -> Option<StopReason> {
        self.stats.attempts += 1;
        let (taken, now) = match self.blocking.as_mut() {
            Some(b) => {
                let (unwinder, sample) = (&mut *self.unwinder, &mut self.sample);
                let taken = (b.pause)().and_then(|_guard| {
                    unwinder.sample(sample)?;
                    match b.also.as_deref_mut() {
                        Some(also) => {
                            let (table, entries) = unwinder.table_and_entries();
                            also.complete(sample, table, entries)
                        }
                        None => Ok(()),
                    }
                });
                (taken, now)
            }
            None => self.read(now, next),
        };
        let stats = &mut self.stats;
        match taken {
            // Interpreter shutdown: counted, not the program's profile.
            Ok(()) if self.unwinder.in_shutdown() => stats.shutdown_samples += 1,
            Ok(()) => {
                self.sample.timestamp_us =
                    self.epoch_start + now.duration_since(self.start).as_micros() as u64;
                filter_by_mode(&mut self.sample, self.cfg.mode);
                stats.pooled_thread_samples += self
                    .pools
                    .fold(&mut self.sample, self.unwinder.frames_mut());
                self.collector.collect(&self.sample, self.unwinder.frames());
                // The collector reports the error itself when it finishes.
                if self.collector.output_error().is_some() {
                    return Some(StopReason::OutputFailed);
                }
            }
            Err(Error::ProcessExited { .. }) => {
                stats.attempts -= 1;
                return Some(StopReason::TargetExited);
            }
            Err(e) if e.is_fatal() => {
                stats.attempts -= 1;
                crate::errln!("tachyon: sampling stopped: {e}");
                return Some(StopReason::Fatal);
            }
            Err(e) => {
                if self.log_errors {
                    crate::errln!("tachyon: failed sample: {e}");
                }
                if !(self.alive)() {
                    stats.attempts -= 1;
                    return Some(StopReason::TargetExited);
                }
                stats.failures += 1;
                self.collector.collect_failed();
            }
        }
        None
    }
}

impl<M: ProcessMemory> Run<'_, '_, M> {
    /// Read one sample of a running target, due `now`, and say when it was
    /// read. A torn sample whose quick retries (the unwinder's) all failed
    /// met the target halfway through a change, and most often stopped
    /// there: preempted by the profiler itself or by other work, it cannot
    /// finish the change while it is read, and each retry reads the same.
    /// (3.12.1's generator resume, for one, publishes the generator's frame
    /// as the current one before linking it to its caller.) Such a sample
    /// is read again after [`LATE_WAIT`], which lets the target run, then
    /// after waits twice as long each time, at most [`LATE_TRIES`] times:
    /// a target let run may stop in the middle of another change, or not
    /// get the CPU at once. A late read is made only while its wait and the
    /// read leave the sample due at `next` on time.
    /// With `--blocking` the target does not move: no late tries.
    fn read(&mut self, now: Instant, next: Instant) -> (crate::error::Result<()>, Instant) {
        let mut taken = self.unwinder.sample(&mut self.sample);
        let mut at = now;
        let mut wait = LATE_WAIT;
        for _ in 0..LATE_TRIES {
            if !matches!(taken, Err(Error::Torn(_))) {
                break;
            }
            // Room for the wait and a late read (one walk, no longer than
            // the first wait), before the next sample.
            if Instant::now() + wait + LATE_WAIT > next {
                break;
            }
            std::thread::sleep(wait);
            wait *= 2;
            at = Instant::now();
            taken = self.unwinder.sample(&mut self.sample);
        }
        (taken, at)
    }
}

/// Keep only the threads the mode is about. The unwinder already sets the
/// status bits; a sample with no thread left still counts as taken.
fn filter_by_mode(sample: &mut Sample, mode: Mode) {
    use crate::model::status;
    let need = match mode {
        Mode::Wall | Mode::All => return,
        Mode::Cpu => status::ON_CPU,
        Mode::Gil => status::HAS_GIL,
        Mode::Exception => status::HAS_EXCEPTION,
    };
    sample.threads.retain(|t| t.status & need != 0);
}

/// The reference's closing lines, on stdout.
pub fn print_summary(stats: &RunStats) {
    let n = stats.attempts;
    let t = stats.duration_s;
    let rate = stats.rate();
    let s = if n == 1 { "" } else { "s" };
    if stats.processes > 1 {
        // A merged profile: the processes were sampled at once, each at
        // the requested rate.
        let p = stats.processes;
        crate::outln!("Captured {n} sample{s} from {p} processes in {t:.2} seconds");
        crate::outln!("Sample rate: {rate:.2} samples/sec per process");
    } else {
        crate::outln!("Captured {n} sample{s} in {t:.2} seconds");
        crate::outln!("Sample rate: {rate:.2} samples/sec");
    }
    crate::outln!("Error rate: {:.2}", stats.error_rate_pct());
    if let Some(line) = shutdown_line(stats) {
        crate::outln!("{line}");
    }
    if let Some(line) = frame_cache_line(stats) {
        crate::outln!("{line}");
    }
    if stats.pooled_thread_samples > 0 {
        crate::outln!(
            "More than {} threads: later ones are counted by their pool (Thread-* ...): {} thread samples",
            pools::MAX_THREADS_APART,
            stats.pooled_thread_samples
        );
    }
    let expected = stats.expected();
    if n < expected && !stats.interrupted {
        crate::outln!(
            "Warning: missed {} samples from the expected total of {expected} ({:.2}%)",
            expected - n,
            stats.missed_pct()
        );
    }
}

/// The summary's word on the frame cache, when it turned itself off:
/// after how many thread samples read as their newest frame alone, and
/// why. (While it works, it says nothing: the profile is the same.)
pub fn frame_cache_line(stats: &RunStats) -> Option<String> {
    let c = &stats.frame_cache;
    let why = c.off_because.filter(|_| c.on)?;
    let hits = c.hits;
    let s = if hits == 1 { "" } else { "s" };
    Some(format!(
        "Frame cache turned off after {hits} thread sample{s} read as their newest frame alone: {why}"
    ))
}

/// The summary's word on samples taken during interpreter shutdown, when
/// there were any.
pub fn shutdown_line(stats: &RunStats) -> Option<String> {
    let n = stats.shutdown_samples;
    (n > 0).then(|| {
        let s = if n == 1 { "" } else { "s" };
        format!("{n} sample{s} during interpreter shutdown, not shown")
    })
}

/// `--realtime-stats`: the achieved rate, once a second, on one line.
struct RealtimeStats {
    on: bool,
    last_print: Option<Instant>,
    last_sample: Option<Instant>,
    min_hz: f64,
    max_hz: f64,
    sum_hz: f64,
    n: u64,
    /// The last update was written in place and needs a newline to end it.
    printed: bool,
}

impl RealtimeStats {
    fn new(on: bool) -> Self {
        RealtimeStats {
            on,
            last_print: None,
            last_sample: None,
            min_hz: f64::INFINITY,
            max_hz: 0.0,
            sum_hz: 0.0,
            n: 0,
            printed: false,
        }
    }

    fn tick(&mut self, now: Instant, total: u64) {
        if !self.on {
            return;
        }
        if let Some(prev) = self.last_sample {
            let dt = now.duration_since(prev).as_secs_f64();
            if dt > 0.0 {
                let hz = 1.0 / dt;
                self.min_hz = self.min_hz.min(hz);
                self.max_hz = self.max_hz.max(hz);
                self.sum_hz += hz;
                self.n += 1;
            }
        }
        self.last_sample = Some(now);
        let due = self
            .last_print
            .is_none_or(|p| now.duration_since(p) >= Duration::from_secs(1));
        if due && self.n >= 2 {
            let mean = self.sum_hz / self.n as f64;
            self.printed = crate::console::status_line(&format!(
                "Stats: {mean:.1}Hz ({:.1}µs) Min: {:.1}Hz Max: {:.1}Hz N={total}",
                1e6 / mean,
                self.min_hz,
                self.max_hz
            ));
            self.last_print = Some(now);
            self.min_hz = f64::INFINITY;
            self.max_hz = 0.0;
            self.sum_hz = 0.0;
            self.n = 0;
        }
    }

    fn done(&self) {
        if self.printed {
            crate::errln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_like_the_reference() {
        let us = |s| parse_rate(s).map(|d| d.as_micros());
        assert_eq!(us("1khz"), Ok(1000));
        assert_eq!(us("10k"), Ok(100));
        assert_eq!(us("10KHz"), Ok(100));
        assert_eq!(us("0.5"), Ok(2_000_000));
        assert_eq!(us("250hz"), Ok(4000));
        assert_eq!(us("1mhz"), Ok(1));
        assert!(parse_rate("0").unwrap_err().contains("positive"));
        assert!(parse_rate("2mhz").unwrap_err().contains("too high"));
        assert_eq!(us("0.01hz"), Ok(100_000_000));
        for low in ["0.00000000001hz", "0.009", "0.001hz"] {
            assert!(parse_rate(low).unwrap_err().contains("too low"), "{low}");
        }
        for bad in ["", "fast", "1 khz", "-5", "1.2.3", "hz"] {
            assert!(parse_rate(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn expected_and_missed_follow_the_interval() {
        let s = RunStats {
            interval_us: 1000,
            duration_s: 2.0,
            attempts: 1500,
            ..RunStats::default()
        };
        assert_eq!(s.expected(), 2000);
        assert!((s.missed_pct() - 25.0).abs() < 1e-9);
    }
}
