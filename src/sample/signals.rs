//! Ctrl-C, SIGTERM and SIGHUP: stop sampling, still write the profile.
//!
//! SIGHUP is what an ssh session that drops sends: it is treated as
//! SIGTERM, so the profile is written and a program started by `run` is
//! ended, never left orphaned. The handler only records the signal; the
//! loop checks it between samples (and at least every few milliseconds
//! while it sleeps). The live view's `q` asks to stop the same way,
//! without a signal.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

/// The first stopping signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: nix::libc::c_int) {
    let _ = RECEIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
}

/// Install the handlers for SIGINT, SIGTERM and SIGHUP.
pub fn install() {
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe.
        let _ = unsafe { sigaction(sig, &act) };
    }
}

/// Has the user asked us to stop?
pub fn interrupted() -> bool {
    RECEIVED.load(Ordering::SeqCst) != 0 || QUIT.load(Ordering::SeqCst)
}

/// The signal that asked us to stop, if any.
pub fn received() -> Option<Signal> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        n => Signal::try_from(n).ok(),
    }
}

/// The user asked to stop from inside tachyon (the live view's `q`).
static QUIT: AtomicBool = AtomicBool::new(false);

/// Stop sampling as Ctrl-C would, but as the user's plain wish to end the
/// profile: no signal is recorded (see [`quit_requested`]).
pub fn request_stop() {
    QUIT.store(true, Ordering::SeqCst);
}

/// Did the user end the profile from inside tachyon?
pub fn quit_requested() -> bool {
    QUIT.load(Ordering::SeqCst)
}
