//! `tessera presets`: the bundled presets and any files given, loaded and validated.

use std::path::PathBuf;

use anyhow::{Result, bail};

use tessera::preset::{BUNDLED, Preset};

use super::output::say;

pub(super) fn presets(files: &[PathBuf]) -> Result<()> {
    let mut failures = 0;
    for (name, _) in BUNDLED {
        report_preset(name, &mut failures);
    }
    let mut listed = |name: &str, loaded: tessera::Result<(String, String)>, how: &str| match loaded
    {
        Ok((p, description)) => say!("ok       {p:<14} {description}{how}"),
        Err(e) => {
            failures += 1;
            say!("INVALID  {name:<14} {e}");
        }
    };
    for (name, text) in tessera::fwi::BUNDLED_FWI {
        let p = tessera::fwi::FwiPreset::from_toml(text, name, &[]);
        listed(name, p.map(|p| (p.name, p.description)), "");
    }
    // Training presets (denoisers, then Multi-DSNs), which `tessera train NAME` runs.
    for (name, text) in tessera::train::BUNDLED {
        let p = tessera::train::TrainPreset::from_toml(text, name, &[]);
        listed(name, p.map(|p| (p.name, p.description)), " (tessera train)");
    }
    for (name, text) in tessera::dsn::run::BUNDLED {
        let p = tessera::dsn::run::DsnPreset::from_toml(text, name, &[]);
        listed(name, p.map(|p| (p.name, p.description)), " (tessera train)");
    }
    for f in files {
        report_preset(&f.to_string_lossy(), &mut failures);
    }
    if failures > 0 {
        bail!("{failures} preset(s) are invalid");
    }
    Ok(())
}

fn report_preset(name: &str, failures: &mut usize) {
    if let Ok(Some((p, _, _))) = tessera::fwi::FwiPreset::load(name, &[]) {
        say!("ok       {:<14} {}", p.name, p.description);
        return;
    }
    // A training preset file is validated as one (its own errors, not "run it with tessera train").
    let text = std::fs::read_to_string(name).unwrap_or_default();
    let training = if tessera::train::TrainPreset::is_train(&text) {
        Some(
            tessera::train::TrainPreset::from_toml(&text, name, &[])
                .map(|p| (p.name, p.description)),
        )
    } else if tessera::dsn::run::DsnPreset::is_dsn(&text) {
        Some(
            tessera::dsn::run::DsnPreset::from_toml(&text, name, &[])
                .map(|p| (p.name, p.description)),
        )
    } else {
        None
    };
    if let Some(loaded) = training {
        match loaded {
            Ok((p, description)) => say!("ok       {p:<14} {description} (tessera train)"),
            Err(e) => {
                *failures += 1;
                say!("INVALID  {name:<14} {e}");
            }
        }
        return;
    }
    match Preset::load(name, &[]) {
        Ok(p) => say!("ok       {:<14} {}", p.preset.name, p.preset.description),
        Err(e) => {
            *failures += 1;
            say!("INVALID  {name:<14} {e}");
        }
    }
}
