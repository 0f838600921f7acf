//! The dependency rules of docs/ARCHITECTURE.md, checked on the source: no two files of a module
//! use each other (file-level cycles), and the numeric core never reaches the GUI, sockets or the
//! protocol.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its `#[cfg(test)]` module (tests may use
/// anything).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names that follow `prefix` in `code`: `prefix name`, or each name of `prefix{a, b::c}`.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        let rest = &code[i + prefix.len()..];
        if let Some(list) = rest.strip_prefix('{') {
            let end = list.find('}').unwrap_or(list.len());
            for item in list[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn no_two_files_of_a_module_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    // Module path of every file ("physics::conv"; a folder's mod.rs is the folder).
    let module = |p: &Path| -> Vec<String> {
        let rel = p.strip_prefix(&src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts
            .last()
            .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
        {
            parts.pop();
        }
        parts
    };
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let m = module(f);
        let Some((name, parent)) = m.split_last() else {
            continue;
        };
        let code = code(f);
        // Siblings reached as `super::x` or `crate::parent::x`.
        let mut siblings = names_after(&code, "super::");
        let crate_prefix = match parent.is_empty() {
            true => "crate::".to_string(),
            false => format!("crate::{}::", parent.join("::")),
        };
        siblings.extend(names_after(&code, &crate_prefix));
        let key = m.join("::");
        let parent_key = parent.join("::");
        for s in siblings {
            if &s != name {
                let sibling = if parent_key.is_empty() {
                    s
                } else {
                    format!("{parent_key}::{s}")
                };
                uses.entry(key.clone()).or_default().insert(sibling);
            }
        }
    }
    let mut cycles = Vec::new();
    for (a, targets) in &uses {
        for b in targets {
            if a < b && uses.get(b).is_some_and(|t| t.contains(a)) {
                cycles.push(format!("{a} ↔ {b}"));
            }
        }
    }
    assert!(cycles.is_empty(), "file-level cycles: {cycles:#?}");
}

#[test]
fn the_numeric_core_never_reaches_the_gui_sockets_or_the_protocol() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let core = [
        "tensor.rs",
        "linalg.rs",
        "metrics.rs",
        "fidelity.rs",
        "physics",
        "denoise",
        "nn",
        "tiling",
        "optim",
    ];
    let forbidden = [
        "egui",
        "eframe",
        "std::net",
        "UnixStream",
        "crate::protocol",
        "crate::serve",
        "crate::gui",
        "crate::job",
    ];
    let mut found = Vec::new();
    for part in core {
        let mut files = Vec::new();
        let p = src.join(part);
        if p.is_dir() {
            sources(&p, &mut files);
        } else {
            files.push(p);
        }
        for f in files {
            let code = code(&f);
            for bad in forbidden {
                if code.contains(bad) {
                    found.push(format!("{} uses {bad}", f.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_top_level_modules_depend_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if matches!(top.as_str(), "lib" | "main" | "cli") {
            continue;
        }
        for used in names_after(&code(f), "crate::") {
            if used != top && used != "Error" && used != "Result" && used != "Tensor" {
                edges.entry(top.clone()).or_default().insert(used);
            }
        }
    }
    // Depth-first search for a cycle.
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(i) = path.iter().position(|p| p == n) {
            cycles.push(format!("{} → {n}", path[i..].join(" → ")));
            return;
        }
        if !done.insert(n.to_string()) {
            return;
        }
        path.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            visit(m, edges, path, done, cycles);
        }
        path.pop();
    }
    // The one documented two-way edge: `denoise`'s config names the network configs of `nn`, and
    // `nn`'s networks implement `denoise::Denoiser`.
    edges.get_mut("denoise").map(|e| e.remove("nn"));
    let mut cycles = Vec::new();
    let mut done = BTreeSet::new();
    for n in edges.keys() {
        visit(n, &edges, &mut Vec::new(), &mut done, &mut cycles);
    }
    assert!(cycles.is_empty(), "module cycles: {cycles:#?}");
}

/// `nn`'s folders are layers (src/nn/mod.rs, docs/ARCHITECTURE.md): `kernels` ← `layers` ← `models`
/// ← the files at `nn`'s top, and `weights` beside them all, importing none. A folder's code names
/// other folders as `crate::nn::FOLDER::…`; the re-exported types (`crate::nn::Network`) are for the
/// rest of tessera, since inside `nn` they would hide which folder a file leans on.
#[test]
fn the_nn_folders_import_only_the_layers_below() {
    let nn = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/nn");
    let may_import: [(&str, &[&str]); 4] = [
        ("kernels", &[]),
        ("layers", &["kernels", "weights"]),
        ("models", &["kernels", "layers", "weights"]),
        ("weights", &[]),
    ];
    let mut found = Vec::new();
    for (folder, allowed) in may_import {
        let mut files = Vec::new();
        sources(&nn.join(folder), &mut files);
        assert!(!files.is_empty(), "no files in src/nn/{folder}");
        for f in files {
            for used in names_after(&code(&f), "crate::nn::") {
                if used != folder && !allowed.contains(&used.as_str()) {
                    found.push(format!("{} uses crate::nn::{used}", f.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// The protocol owns its types (docs/ARCHITECTURE.md, `protocol` row): outside its boundary files
/// — `convert.rs` (compute reports → the protocol's twins) and `preview.rs` (a `Tensor` → a
/// `PreviewImage`) — `src/protocol` names no module of tessera but the error type and the plumbing
/// it runs on, so no compute type reaches the wire or the workbench through it.
#[test]
fn the_protocol_names_compute_types_only_in_its_boundary_files() {
    let protocol = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protocol");
    let boundary = ["convert.rs", "preview.rs"];
    let plumbing = [
        "crate::error::",
        "crate::protocol::",
        "crate::dist::wire",
        "crate::dist::launch::",
        "crate::io::run_dir::",
    ];
    let mut files = Vec::new();
    sources(&protocol, &mut files);
    let mut found = Vec::new();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if boundary.contains(&name.as_str()) {
            continue;
        }
        let code = code(&f);
        for (i, _) in code.match_indices("crate::") {
            let path: String = code[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if !plumbing.iter().any(|p| path.starts_with(p)) {
                found.push(format!("src/protocol/{name} uses {path}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the protocol's own types only; convert compute types in convert.rs: {found:#?}"
    );
}
