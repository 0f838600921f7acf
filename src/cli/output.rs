//! Printing that never panics: `say!` writes a line to stdout, [`complain`] to stderr.
//!
//! `println!` panics when stdout is closed or full (`tessera presets | head -0`, `> /dev/full`).
//! Here a closed pipe is taken as "the reader has seen enough", and any other failure to write
//! stdout is remembered and turned into the command's error at the end ([`stdout_result`]), after
//! the work itself is done and saved. Failures to write stderr are ignored: there is nowhere left to
//! report them.

use std::fmt;
use std::io::Write;
use std::sync::Mutex;

/// The first error writing stdout, other than a closed pipe.
static STDOUT_ERROR: Mutex<Option<std::io::Error>> = Mutex::new(None);

/// Writes one line to stdout (see the module doc for what happens when it cannot).
pub fn line(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(e) = written
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        let mut first = STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(e);
    }
}

/// Writes one line to stderr, ignoring failure.
pub fn complain(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// An error if some output could not be written to stdout.
pub fn stdout_result() -> anyhow::Result<()> {
    match STDOUT_ERROR
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        Some(e) => Err(anyhow::anyhow!(
            "writing to standard output: {e} (what the command computed and wrote to files is \
             complete and kept)"
        )),
        None => Ok(()),
    }
}

/// `println!` that does not panic.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::output::line(format_args!($($arg)*))
    };
}
pub(crate) use say;
