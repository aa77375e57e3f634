//! Ctrl-C and SIGTERM: stop sampling, still write the profile.
//!
//! The handler only sets a flag; the loop checks it between samples.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: nix::libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Install the handlers for SIGINT and SIGTERM.
pub fn install() {
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe.
        let _ = unsafe { sigaction(sig, &act) };
    }
}

/// Has the user asked us to stop?
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
