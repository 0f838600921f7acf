//! The workbench's own state between sessions (window size, last folder, recent presets, ranks,
//! display), kept apart from experiments: a JSON file under the user's config folder.
//!
//! Every field has a default (`serde(default)`), so a file from an older or newer version loads
//! what it can; a corrupt file gives the defaults and a log line, never a crash.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::preview::Display;

/// Recent presets remembered.
pub const MAX_RECENT: usize = 8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppState {
    /// Inner window size in points.
    pub window_size: [f32; 2],
    /// Folder of the last file dialog.
    pub last_folder: Option<PathBuf>,
    /// Preset files, newest first.
    pub recent: Vec<PathBuf>,
    /// Ranks of the local backend.
    pub ranks: usize,
    pub display: Display,
    /// Last address typed into "Attach…" (the token is never stored).
    pub attach_address: String,
}

impl Default for AppState {
    fn default() -> Self {
        AppState {
            window_size: [1400.0, 900.0],
            last_folder: None,
            recent: Vec::new(),
            ranks: 2,
            display: Display::default(),
            attach_address: String::new(),
        }
    }
}

impl AppState {
    /// `$XDG_CONFIG_HOME/tessera/workbench.json`, else `~/.config/tessera/workbench.json`.
    pub fn default_path() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(base.join("tessera").join("workbench.json"))
    }

    /// Reads the state; a missing file gives the defaults silently, an unreadable or corrupt one
    /// gives the defaults and a message saying why.
    pub fn load(path: &Path) -> (AppState, Option<String>) {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return (AppState::default(), None);
            }
            Err(e) => {
                return (
                    AppState::default(),
                    Some(format!(
                        "could not read the workbench state ({e}), using defaults: {}",
                        path.display()
                    )),
                );
            }
        };
        match serde_json::from_str::<AppState>(&text) {
            Ok(mut s) => {
                s.sanitize();
                (s, None)
            }
            Err(e) => (
                AppState::default(),
                Some(format!(
                    "the workbench state is corrupt ({e}), using defaults: {}",
                    path.display()
                )),
            ),
        }
    }

    /// Writes the state atomically (creating the folder).
    pub fn save(&self, path: &Path) -> crate::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| crate::Error::io("creating the config folder", dir, e))?;
        }
        crate::io::write_json_atomic(path, self)
    }

    /// Puts `path` first in the recent list.
    pub fn remember(&mut self, path: &Path) {
        self.recent.retain(|p| p != path);
        self.recent.insert(0, path.to_path_buf());
        self.recent.truncate(MAX_RECENT);
    }

    /// Clamps values a hand-edited file could make absurd.
    fn sanitize(&mut self) {
        let ok = |v: f32| v.is_finite() && (200.0..=16384.0).contains(&v);
        if !ok(self.window_size[0]) || !ok(self.window_size[1]) {
            self.window_size = AppState::default().window_size;
        }
        self.ranks = self.ranks.clamp(1, 64);
        self.recent.truncate(MAX_RECENT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_partial_and_corrupt_files_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("workbench.json");
        assert_eq!(AppState::load(&path), (AppState::default(), None));

        let mut s = AppState::default();
        s.remember(Path::new("/a.toml"));
        s.remember(Path::new("/b.toml"));
        s.remember(Path::new("/a.toml"));
        s.save(&path).unwrap();
        let (back, warning) = AppState::load(&path);
        assert_eq!(warning, None);
        assert_eq!(
            back.recent,
            vec![PathBuf::from("/a.toml"), PathBuf::from("/b.toml")]
        );

        // A file from another version: unknown fields ignored, missing ones defaulted.
        std::fs::write(&path, r#"{"ranks": 3, "future": true}"#).unwrap();
        let (back, _) = AppState::load(&path);
        assert_eq!(back.ranks, 3);
        assert_eq!(back.window_size, AppState::default().window_size);

        std::fs::write(&path, "{not json").unwrap();
        let (back, warning) = AppState::load(&path);
        assert_eq!(back, AppState::default());
        assert!(warning.unwrap().contains("corrupt"));

        std::fs::write(&path, r#"{"ranks": 0, "window_size": [1e30, -1]}"#).unwrap();
        let (back, _) = AppState::load(&path);
        assert_eq!(
            (back.ranks, back.window_size),
            (1, AppState::default().window_size)
        );
    }
}
