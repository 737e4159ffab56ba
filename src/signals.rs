//! Signals: SIGINT and SIGTERM set `shutdown`, SIGHUP sets `reload`, and
//! each also writes a byte to a self-pipe that the main loop sleeps on.
//!
//! The main loop has nothing to do between housekeeping passes (once a
//! second) in the default mode: it used to wake every 100 ms only to look
//! at these flags. Under emulation each such wake costs the machine a few
//! hundred microseconds of CPU, about 0.3% of one CPU for nothing; with the
//! pipe it sleeps until its next pass or until a signal comes.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGTERM};

pub struct Signals {
    pub shutdown: Arc<AtomicBool>,
    pub reload: Arc<AtomicBool>,
    /// The pipe's read end.
    wake: UnixStream,
}

impl Signals {
    /// Installs the handlers; call once.
    pub fn install() -> Result<Self> {
        let shutdown = Arc::new(AtomicBool::new(false));
        let reload = Arc::new(AtomicBool::new(false));
        let (wake, write) = UnixStream::pair().context("creating the signal pipe")?;
        // The handlers must never block on a full pipe: a full pipe
        // already wakes the reader.
        write
            .set_nonblocking(true)
            .context("creating the signal pipe")?;
        // Flag first, then the byte: the reader drains the pipe, then
        // looks at the flags, so no signal is missed.
        let (flag, w) = (shutdown.clone(), write.try_clone()?);
        ctrlc::set_handler(move || {
            flag.store(true, Ordering::Relaxed);
            let _ = (&w).write(&[0]);
        })
        .context("installing the SIGINT handler")?;
        for (sig, flag, name) in [(SIGTERM, &shutdown, "SIGTERM"), (SIGHUP, &reload, "SIGHUP")] {
            signal_hook::flag::register(sig, flag.clone())
                .and_then(|_| signal_hook::low_level::pipe::register(sig, write.try_clone()?))
                .with_context(|| format!("installing the {name} handler"))?;
        }
        Ok(Self {
            shutdown,
            reload,
            wake,
        })
    }

    /// Sleeps until a signal arrives or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        // A zero timeout would mean "block forever" to the socket.
        let timeout = timeout.max(Duration::from_millis(1));
        if self.wake.set_read_timeout(Some(timeout)).is_err() {
            std::thread::sleep(timeout);
            return;
        }
        // Timeout, EINTR or bytes: the caller looks at the flags either way.
        let _ = (&self.wake).read(&mut [0u8; 64]);
    }
}
