//! The `tessera` binary: parses the command line and hands over to the library (see `cli`).

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
