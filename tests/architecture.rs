//! The dependency rules of docs/ARCHITECTURE.md, checked on the source: every top-level module
//! imports exactly what its row's "may import" column names, the numeric core ([`NUMERIC_CORE`])
//! imports only itself and the plumbing below it and never reaches the GUI, sockets or the protocol,
//! and no two files of a module use each other (file-level cycles).

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

/// The names that follow `prefix` in `code` ([`paths_after`] without the lines).
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    paths_after(code, prefix)
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// The numeric core, the one definition docs/ARCHITECTURE.md names: these modules import only each
/// other and [`CORE_MAY_ALSO_IMPORT`], and never the GUI, sockets or the protocol.
const NUMERIC_CORE: [&str; 9] = [
    "tensor", "linalg", "metrics", "fidelity", "physics", "denoise", "nn", "tiling", "optim",
];

/// The plumbing below the numeric core: its error type, its float trait, the counting allocator
/// and fallible allocation, and the file readers (a user's blur kernel, a network's weights).
const CORE_MAY_ALSO_IMPORT: [&str; 4] = ["error", "float", "heap", "io"];

/// The binary's module: `src/main.rs`, `src/cli.rs` and `src/cli/`, which reach the library as
/// `tessera::…` (their `crate::` is the binary itself).
const BINARY: &str = "cli";

/// The files of a top-level module: `src/NAME.rs` and everything under `src/NAME/` (for the
/// binary, `src/main.rs` too).
fn module_files(src: &Path, module: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src.join(format!("{module}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let dir = src.join(module);
    if dir.is_dir() {
        sources(&dir, &mut files);
    }
    if module == BINARY {
        files.push(src.join("main.rs"));
    }
    files
}

/// The library's top-level modules, as `src/lib.rs` declares them (`pub mod NAME;`), and the binary.
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut modules: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    modules.insert(BINARY.to_string());
    modules
}

/// One import of another top-level module, where the code names it.
#[derive(Debug, Clone)]
struct Import {
    module: String,
    to: String,
    at: String,
}

/// The first names of the paths that follow `prefix` in `code` — `prefix name`, or each item of
/// `prefix{a, b::{c, d}}` (nested groups skipped) — with the 1-based line where each appears.
/// `prefix` must start a path: `my_crate::` is no `crate::`.
fn paths_after(code: &str, prefix: &str) -> Vec<(String, usize)> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        let starts_path = code[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'));
        if !starts_path {
            continue;
        }
        let line = code[..i].matches('\n').count() + 1;
        let rest = &code[i + prefix.len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.push((ident(rest), line));
            continue;
        };
        let (mut depth, mut item_start) = (0usize, 0usize);
        for (j, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.push((ident(group[item_start..j].trim()), line));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push((ident(group[item_start..j].trim()), line));
                    item_start = j + 1;
                }
                _ => {}
            }
        }
    }
    out.retain(|(name, _)| !name.is_empty());
    out
}

/// Every import of one top-level module by another, at top-level granularity: `crate::X…` and
/// `super::…` chains that climb to the crate root in the library, `tessera::X…` in the binary. The
/// crate root's re-exports count as their modules (`crate::Tensor` is `tensor`).
fn imports() -> Vec<Import> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = top_level_modules(&src);
    let mut out = Vec::new();
    for module in &modules {
        for f in module_files(&src, module) {
            let rel = f.strip_prefix(&src).unwrap();
            let code = code(&f);
            let mut found = Vec::new();
            if module == BINARY {
                found.extend(paths_after(&code, "tessera::"));
            } else {
                found.extend(paths_after(&code, "crate::"));
                // `super::` climbs one level per use: from src/a.rs or src/a/mod.rs once reaches the
                // root, from src/a/b.rs twice. (Inside an inline module it climbs less; names that
                // are no top-level module are ignored below, so such a path adds nothing.)
                let mut levels = rel.components().count();
                if rel.file_name().is_some_and(|n| n == "mod.rs") {
                    levels -= 1;
                }
                found.extend(paths_after(&code, &"super::".repeat(levels)));
            }
            for (name, line) in found {
                let to = match name.as_str() {
                    "Error" | "Result" => "error".to_string(),
                    "Tensor" => "tensor".to_string(),
                    _ => name,
                };
                if &to != module && modules.contains(&to) {
                    out.push(Import {
                        module: module.clone(),
                        to,
                        at: format!("src/{}:{line}", rel.display()),
                    });
                }
            }
        }
    }
    out
}

/// The "may import" column of docs/ARCHITECTURE.md's module table: each row's module and the first
/// names of the paths in backticks in its last cell (`optim::adam` is `optim`; "—" is none).
fn documented_imports() -> BTreeMap<String, BTreeSet<String>> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
            .unwrap();
    let table = doc
        .split("## Modules")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a `## Modules` section");
    let backticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(|name| name.split("::").next().unwrap().to_string())
            .collect()
    };
    let mut rows = BTreeMap::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let module = backticked(cells[0])
            .into_iter()
            .next()
            .expect("a module in backticks");
        let may_import = backticked(cells.last().unwrap()).into_iter().collect();
        assert!(
            rows.insert(module.clone(), may_import).is_none(),
            "docs/ARCHITECTURE.md has two rows for `{module}`"
        );
    }
    rows
}

#[test]
fn every_module_imports_what_its_row_in_the_map_declares() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = top_level_modules(&src);
    let rows = documented_imports();
    let mut wrong = Vec::new();
    for m in &modules {
        if !rows.contains_key(m) {
            wrong.push(format!(
                "`{m}` has no row in docs/ARCHITECTURE.md's module table"
            ));
        }
    }
    for (m, may_import) in &rows {
        if !modules.contains(m) {
            wrong.push(format!(
                "docs/ARCHITECTURE.md has a row for `{m}`, no module of src/lib.rs"
            ));
        }
        for to in may_import {
            if !modules.contains(to) {
                wrong.push(format!("`{m}`'s row names `{to}`, no module of src/lib.rs"));
            }
        }
    }
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    for i in imports() {
        used.insert((i.module.clone(), i.to.clone()));
        let declared = i.to == "error" || rows.get(&i.module).is_some_and(|r| r.contains(&i.to));
        if !declared && rows.contains_key(&i.module) {
            wrong.push(format!(
                "{}: `{}` imports `{}`, which its row's \"may import\" column does not name",
                i.at, i.module, i.to
            ));
        }
    }
    for (m, may_import) in &rows {
        for to in may_import {
            if !used.contains(&(m.clone(), to.clone())) {
                wrong.push(format!(
                    "`{m}`'s row says it imports `{to}`, but no file of `{m}` does: a stale edge"
                ));
            }
        }
    }
    // Duplicate lines (the same import named on several lines of one file) say one thing once.
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "docs/ARCHITECTURE.md's module table and the code disagree:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_numeric_core_imports_only_itself_and_the_plumbing_below() {
    let mut wrong = Vec::new();
    for i in imports() {
        let core_module = NUMERIC_CORE.contains(&i.module.as_str());
        let allowed =
            NUMERIC_CORE.contains(&i.to.as_str()) || CORE_MAY_ALSO_IMPORT.contains(&i.to.as_str());
        if core_module && !allowed {
            wrong.push(format!(
                "{}: `{}` (numeric core) imports `{}`",
                i.at, i.module, i.to
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// docs/ARCHITECTURE.md defines the numeric core once, on the line that names `NUMERIC_CORE`: it
/// names the same modules as the constant here.
#[test]
fn the_map_names_the_numeric_core_as_the_test_does() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
            .unwrap();
    let start = doc
        .find("**The numeric core** is")
        .expect("docs/ARCHITECTURE.md defines **The numeric core**");
    let sentence = &doc[start..start + doc[start..].find("(the `NUMERIC_CORE`").unwrap()];
    let named: BTreeSet<&str> = sentence.split('`').skip(1).step_by(2).collect();
    let core: BTreeSet<&str> = NUMERIC_CORE.into_iter().collect();
    assert_eq!(
        named, core,
        "docs/ARCHITECTURE.md and NUMERIC_CORE disagree"
    );
}

#[test]
fn no_two_files_of_a_module_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    // Module path of every file ("physics::blur_engine"; a folder's mod.rs is the folder).
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
    for module in NUMERIC_CORE {
        for f in module_files(&src, module) {
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
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for import in imports() {
        if import.to != "error" && import.module != "cli" {
            edges.entry(import.module).or_default().insert(import.to);
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
