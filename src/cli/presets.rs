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
    for (name, text) in tessera::fwi::BUNDLED_FWI {
        match tessera::fwi::FwiPreset::from_toml(text, name, &[]) {
            Ok(p) => say!("ok       {:<14} {}", p.name, p.description),
            Err(e) => {
                failures += 1;
                say!("INVALID  {name:<14} {e}");
            }
        }
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
    match Preset::load(name, &[]) {
        Ok(p) => say!("ok       {:<14} {}", p.preset.name, p.preset.description),
        Err(e) => {
            *failures += 1;
            say!("INVALID  {name:<14} {e}");
        }
    }
}
