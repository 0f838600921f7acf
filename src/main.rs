//! The `tessera` binary: parses the command line and hands over to the library (see `cli`).

mod cli;

use std::process::ExitCode;

/// Counts live heap bytes for the memory studies (`tessera::heap`); a relaxed atomic add per call.
#[global_allocator]
static ALLOCATOR: tessera::heap::Counting = tessera::heap::Counting;

fn main() -> ExitCode {
    ALLOCATOR.activate();
    cli::main()
}
