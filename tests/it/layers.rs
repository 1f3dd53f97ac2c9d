//! The layering of docs/architecture.md#layers, held to the code: the table's rows (and the
//! steps of a cell, its `over`s) rank the crate's top-level modules, and no module's code
//! may name (`crate::…`) a module ranked above its own. Every module must be in the table.
//! Comments and unit-test modules are not read: a test may reach anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const ARCHITECTURE: &str = include_str!("../../docs/architecture.md");

/// Each module the table names, with its rank: 0 at the top, larger further down.
fn ranks() -> BTreeMap<String, usize> {
    let section = ARCHITECTURE
        .split("## Layers")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/architecture.md has a Layers section");
    let mut ranks = BTreeMap::new();
    let mut rank = 0;
    for row in section.lines().filter(|line| line.starts_with("| ")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let Some(modules) = cells.get(1) else { continue };
        for step in top_level(modules).split(" over ") {
            let names = backticked(step);
            if names.is_empty() {
                continue;
            }
            for name in names {
                ranks.entry(name).or_insert(rank);
            }
            rank += 1;
        }
    }
    ranks
}

/// The text outside parentheses: what a cell names, not what it says of it.
fn top_level(cell: &str) -> String {
    let mut depth = 0usize;
    cell.chars()
        .filter(|c| {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect()
}

/// `cli/`, `platforms/mod.rs` and `sign.rs` name the modules `cli`, `platforms` and `sign`.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|name| name.ends_with('/') || name.ends_with(".rs"))
        .map(|name| {
            let first = name.split('/').next().unwrap_or(name);
            first.trim_end_matches(".rs").to_owned()
        })
        .collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The crate's top-level modules and their files (`main.rs` is the binary, not one of them).
fn modules() -> BTreeMap<String, Vec<PathBuf>> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" || name == "main" {
            continue;
        }
        if path.is_dir() {
            modules.insert(name, rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            modules.insert(name, vec![path]);
        }
    }
    modules
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The code of a file: no `//` comments, no `#[cfg(test)] mod …` at its end.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|pair| pair[0].trim() == "#[cfg(test)]" && pair[1].trim_start().starts_with("mod "))
        .unwrap_or(lines.len());
    lines[..end]
        .iter()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a file's code names as `crate::<module>`.
fn named(code: &str) -> Vec<String> {
    code.split("crate::")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn every_module_is_in_the_layer_table_and_imports_only_its_own_step_or_below() {
    let ranks = ranks();
    let modules = modules();
    let unplaced: Vec<&String> = modules.keys().filter(|m| !ranks.contains_key(*m)).collect();
    assert!(
        unplaced.is_empty(),
        "modules docs/architecture.md#layers does not place: {unplaced:?}"
    );
    let mut up = Vec::new();
    for (module, files) in &modules {
        for file in files {
            for target in named(&code(file)) {
                let (Some(from), Some(to)) = (ranks.get(module), ranks.get(&target)) else {
                    continue;
                };
                if to < from {
                    let file = file.strip_prefix(src()).unwrap().display().to_string();
                    up.push(format!("{file} -> {target}"));
                }
            }
        }
    }
    up.sort();
    up.dedup();
    assert!(up.is_empty(), "imports that run up a layer: {up:#?}");
}

#[test]
fn the_table_is_read_as_written() {
    let ranks = ranks();
    // Rows, and the steps of a cell, in their order; a cell's list shares its step.
    assert!(ranks["cli"] < ranks["startup"]);
    assert_eq!(ranks["cli"], ranks["sign"]);
    assert!(ranks["console"] < ranks["admin"] && ranks["admin"] < ranks["http"]);
    assert_eq!(ranks["http"], ranks["error"]);
    assert!(ranks["dispatch"] < ranks["delivery"] && ranks["delivery"] < ranks["turn"]);
    assert_eq!(ranks["delivery"], ranks["ingress"]);
    assert!(ranks["turn"] < ranks["platforms"] && ranks["platforms"] < ranks["db"]);
    assert!(ranks["db"] < ranks["domain"]);
    // What a parenthesis explains is not a module of the row.
    assert!(!ranks.contains_key("args"));
    assert_eq!(top_level("`a/` (`b.rs` c) and `d.rs`"), "`a/`  and `d.rs`");
    assert_eq!(named("use crate::db::x; crate::domain::Y"), ["db", "domain"]);
}
