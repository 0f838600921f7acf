//! `tessera selftest --device cuda`: the device self-test (`tessera::device::selftest`) as a
//! command — the table on stdout, optionally a JSON report, a non-zero exit on any failure.

use std::path::Path;

use anyhow::{Context, Result, bail};
use tessera::device::Device;
use tessera::device::selftest::{Level, Report};

use super::output::say;

/// The report of the GPU `device` names.
#[cfg(feature = "cuda")]
fn report(device: Device, level: Level) -> tessera::Result<Report> {
    tessera::cuda::selftest(device, level)
}

/// A build without GPU support says how to get it.
#[cfg(not(feature = "cuda"))]
fn report(device: Device, _level: Level) -> tessera::Result<Report> {
    tessera::device::selftest::requires_gpu(device)?;
    Err(tessera::device::selftest::no_gpu_support(device))
}

pub fn run(device: &str, quick: bool, json: Option<&Path>) -> Result<()> {
    let device = Device::parse("--device", device)?;
    let level = if quick { Level::Quick } else { Level::Full };
    let report = report(device, level).context("device self-test")?;
    say!("{}", report.table().trim_end());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report).context("encoding the report")?;
        tessera::io::write_atomic(path, text.as_bytes())
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    let failed = report.failures();
    if failed > 0 {
        bail!(
            "{failed} of {} device checks are off by more than {:.0e}",
            report.checks.len(),
            report.tolerance
        );
    }
    Ok(())
}
