//! Command-line interface: `run`, `join`, `serve`, `presets`, `apply`, `denoise`, `train`, `bench`, `report`,
//! `selftest`, and the hidden `relay` of the multi-host rehearsal;
//! no subcommand opens the workbench (`tessera::gui`).
//!
//! A thin layer over the library: `args` holds what clap parses, this file dispatches each
//! subcommand to its file, which loads its inputs, calls `tessera::job` or one operator/denoiser,
//! and reports errors once, with context naming the file and the problem. Every count and duration
//! a user gives is bounded, and printing never panics (a closed or full stdout is reported once, at
//! the end).

mod apply;
mod args;
mod attach;
mod bench;
mod group;
mod join;
mod output;
mod presets;
mod relay;
mod run;
mod selftest;
mod serve;
mod summary;
mod train;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;

use args::{Cli, Command};
use output::say;

/// Entry point: runs the command and turns errors into a message and exit code 1.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `--help`/`--version` go to stdout: a failed write fails them like any command's
            // output (exit 1), rather than exiting 0 with nothing printed.
            if let Err(w) = e.print() {
                output::complain(format_args!("error: writing to standard output: {w}"));
                return ExitCode::FAILURE;
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    use tracing_subscriber::prelude::*;
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colour codes only for a person at a terminal: a rank's stderr is a pipe to the
                // launcher, and logs are often redirected to files.
                .with_ansi(colour_logs())
                .with_filter(filter),
        )
        // Forwards rank 0's logs to workbench clients; inert outside `tessera serve`.
        .with(tessera::serve::logs::layer())
        .init();
    let result = match cli.command {
        Some(command) => dispatch(command),
        None => workbench(),
    }
    .and_then(|()| output::stdout_result());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            output::complain(format_args!("error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// `tessera` alone: the workbench with the quick sample and a local elastic backend of 2 ranks
/// (outputs in out/workbench/).
#[cfg(feature = "gui")]
fn workbench() -> Result<()> {
    let out_dir = std::env::current_dir()
        .context("finding the working directory")?
        .join("out")
        .join("workbench");
    let options = tessera::gui::WorkbenchOptions {
        starter: tessera::gui::local::local_starter(tessera::protocol::LocalOptions {
            // A lost local rank is survived and replaced (imaging jobs).
            elastic: true,
            ..tessera::protocol::LocalOptions::new(2, out_dir.clone())
        }),
        start_backend: true,
        preset: None,
        state_path: None,
        state: tessera::gui::AppState::default(),
        output_root: Some(out_dir),
    };
    tessera::gui::run_workbench(options).context("workbench")
}

/// `tessera` alone in a headless build: says why no window opens and what to type instead.
#[cfg(not(feature = "gui"))]
fn workbench() -> Result<()> {
    anyhow::bail!(
        "this tessera was built without the workbench (cargo's `gui` feature is off); give a \
         subcommand such as `tessera run quick` or `tessera serve` (`tessera --help` lists them)"
    )
}

fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Run {
            preset,
            set,
            out,
            replace,
            quiet,
            attach: Some(address),
            attached,
            elastic: _,
            respawn: _,
            device: _,
            resume: _,
            checkpoint_dir: _,
            group: _,
        } => {
            let _ = (out, replace);
            let preset = preset.context("--attach needs a preset")?;
            attach::run(&address, attached, &preset, &set, quiet, None)
        }
        Command::Run {
            preset,
            set,
            out,
            replace,
            quiet,
            elastic,
            respawn,
            device,
            attach: None,
            resume,
            checkpoint_dir,
            group,
            ..
        } => run::run(
            preset.as_deref(),
            &set,
            run::Continuation {
                resume,
                checkpoint_dir,
            },
            out,
            replace,
            quiet,
            (elastic, respawn),
            device.as_deref(),
            &group,
        ),
        Command::Serve {
            socket,
            listen,
            token_file,
            out,
            device,
            elastic,
            respawn,
            group,
        } => serve::serve(
            socket,
            listen,
            token_file.as_deref(),
            out,
            (device.as_deref(), elastic, respawn),
            &group,
        ),
        Command::Presets { files } => presets::presets(&files),
        Command::Apply {
            physics,
            adjoint,
            input_shape,
            noisy,
            seed,
            input,
            output,
        } => apply::apply(&physics, adjoint, input_shape, noisy, seed, &input, &output),
        Command::Bench { what } => bench::bench(what),
        Command::Join { addr, timeout } => join::join(&addr, timeout),
        Command::Relay {
            delay,
            listen,
            to,
            to_net,
            ready_file,
        } => relay::relay(
            &delay,
            &listen,
            to,
            to_net.as_deref(),
            ready_file.as_deref(),
        ),
        Command::Report { run_dir, out } => {
            let out = out.unwrap_or_else(|| run_dir.clone());
            let page = tessera::scaling::write_run_report(&run_dir, &out)
                .with_context(|| format!("reporting the run in {}", run_dir.display()))?;
            say!("{}", page.display());
            Ok(())
        }
        Command::Selftest {
            device,
            quick,
            json,
        } => selftest::run(&device, quick, json.as_deref()),
        Command::Denoise {
            denoiser,
            sigma,
            input,
            output,
        } => apply::denoise(&denoiser, sigma, &input, &output),
        Command::Train {
            preset,
            set,
            quiet,
            resume,
            attach: Some(address),
            attached,
            device,
            ..
        } => {
            train::check_device(&preset, &set, device.as_deref())?;
            attach::run(&address, attached, &preset, &set, quiet, resume)
        }
        Command::Train {
            preset,
            set,
            out,
            stop_after,
            resume,
            quiet,
            attach: None,
            device,
            group,
            ..
        } => {
            train::check_device(&preset, &set, device.as_deref())?;
            let control = tessera::train::RunControl {
                stop_after,
                resume: resume.is_some(),
            };
            train::train(&preset, &set, resume.or(out), &control, quiet, &group)
        }
    }
}

/// Whether log lines may carry ANSI colour codes: stderr is a terminal and `NO_COLOR` is unset
/// (<https://no-color.org>).
fn colour_logs() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
