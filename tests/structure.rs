//! Rules of the source tree (issue #28).
//!
//! Every write to the API server goes through the one writer, `src/apply/`: no other source file of the provider names what `kube` needs to write (`PatchParams`, `PostParams`,
//! `DeleteParams`, a `kube::api::Patch`), calls a status write, or publishes an Event itself. Test code
//! (`#[cfg(test)]` modules) is left out: tests may write fixtures directly. Nor does any call an
//! apply verb (the public functions of `src/apply/mod.rs`) but the leader Lease and Events:
//! writes are planned (`model::plan`) and carried out by the runner (`apply::Target::run`).
//!
//! The layout docs (docs/development.md "Where things are", README.md "Repository layout") name
//! only paths that exist, and every source file of `src/` is under a path one of them names.

use std::path::{Path, PathBuf};

/// What only a write needs.
const WRITE_MARKERS: [&str; 12] = [
    "Patch::Apply",
    "Patch::Merge",
    "Patch::Json",
    "Patch::Strategic",
    "PatchParams",
    "PostParams",
    "DeleteParams",
    ".patch_status(",
    ".replace_status(",
    ".patch_metadata(",
    ".delete_collection(",
    ".publish(",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` outside `#[cfg(test)]` modules and comments, with their numbers.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((number, line)) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]" {
            // Skip the attribute's item: up to the end of its braces, or its `mod name;`.
            let mut depth = 0i32;
            let mut opened = false;
            for (_, line) in lines.by_ref() {
                depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
                opened |= line.contains('{');
                if (opened && depth <= 0) || (!opened && line.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        out.push((number + 1, line));
    }
    out
}

fn direct_writes(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let writer = root.join("src").join("apply");
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&writer)) {
        let text = std::fs::read_to_string(file).expect("read");
        for (number, line) in code_lines(&text) {
            for marker in WRITE_MARKERS {
                if line.contains(marker) {
                    found.push(format!(
                        "{}:{number}: {}",
                        file.strip_prefix(root).unwrap_or(file).display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn no_module_outside_the_writer_writes_to_the_api_server() {
    let found = direct_writes(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        found.is_empty(),
        "direct API writes outside src/apply/ (go through the writer):\n{}",
        found.join("\n")
    );
}

/// The check finds what it looks for: a write outside the writer, not one in a test module.
#[test]
fn the_check_sees_a_direct_write_and_skips_test_modules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("apply")).expect("mkdir");
    std::fs::write(
        src.join("apply").join("mod.rs"),
        "pub async fn w(api: &Api<X>) { api.patch_status(\"n\", &PatchParams::default(), &p).await; }\n",
    )
    .expect("write");
    std::fs::write(
        src.join("rogue.rs"),
        "// PatchParams in a comment is fine\nfn f() {\n    api.create(&PostParams::default(), &o);\n}\n#[cfg(test)]\nmod tests {\n    fn t() { api.delete(\"x\", &DeleteParams::default()); }\n}\n",
    )
    .expect("write");
    let found = direct_writes(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("src/rogue.rs:3:"), "{found:?}");
}

/// The apply verbs: the public functions of `src/apply/mod.rs`.
fn apply_verbs(root: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root.join("src/apply/mod.rs")).expect("read apply");
    code_lines(&text)
        .into_iter()
        .filter_map(|(_, line)| {
            let rest = line
                .strip_prefix("pub async fn ")
                .or(line.strip_prefix("pub fn "))?;
            Some(rest.split(['<', '(']).next()?.to_string())
        })
        .collect()
}

/// Who may call an apply verb outside the runner: the leader Lease and Events.
const VERB_CALLERS: [(&str, &str); 3] = [
    ("src/leader.rs", "create"),
    ("src/leader.rs", "replace"),
    ("src/context.rs", "event"),
];

/// Calls of an apply verb outside `src/apply/` (`apply::verb(`, or a verb imported from
/// `crate::apply`), but for [`VERB_CALLERS`].
fn verb_calls(root: &Path) -> Vec<String> {
    let verbs = apply_verbs(root);
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let writer = root.join("src").join("apply");
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&writer)) {
        let name = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(file).expect("read");
        let mut importing = false;
        for (number, line) in code_lines(&text) {
            importing |= line.contains("use crate::apply::");
            let words: Vec<&str> = line
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .collect();
            for verb in &verbs {
                let called = line.contains(&format!("apply::{verb}("))
                    || (importing && words.contains(&verb.as_str()));
                if called && !VERB_CALLERS.contains(&(name.as_str(), verb.as_str())) {
                    found.push(format!("{name}:{number}: {}", line.trim()));
                }
            }
            importing &= !line.contains(';');
        }
    }
    found
}

#[test]
fn no_apply_verb_is_called_outside_the_runner() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        apply_verbs(root).contains(&"create_or_get".to_string()),
        "{:?}",
        apply_verbs(root)
    );
    let found = verb_calls(root);
    assert!(
        found.is_empty(),
        "apply verbs called outside the runner (plan the writes: model::plan, apply::Target::run):\n{}",
        found.join("\n")
    );
}

/// The verb check sees a call and an import of a verb, and lets the Lease's through.
#[test]
fn the_verb_check_sees_calls_and_imports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("apply")).expect("mkdir");
    std::fs::write(
        src.join("apply").join("mod.rs"),
        "pub async fn merge_patch<K>(api: &Api<K>) {}\npub async fn create<K>() {}\n",
    )
    .expect("write");
    std::fs::write(
        src.join("rogue.rs"),
        "use crate::apply::{\n    Target, merge_patch,\n};\nfn f() {\n    crate::apply::merge_patch(&api);\n}\n",
    )
    .expect("write");
    std::fs::write(
        src.join("leader.rs"),
        "fn f() {\n    apply::create(&api, &lease);\n}\n",
    )
    .expect("write");
    let found = verb_calls(dir.path());
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("src/rogue.rs:2:"), "{found:?}");
    assert!(found[1].starts_with("src/rogue.rs:5:"), "{found:?}");
}

/// The `src/...` paths named in backticks in `text` (a folder ends with `/`).
fn named_paths(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| quoted.starts_with("src/"))
        .map(|quoted| {
            quoted
                .split_whitespace()
                .next()
                .unwrap_or(quoted)
                .to_string()
        })
        .collect()
}

#[test]
fn the_layout_docs_match_the_tree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut named = Vec::new();
    for doc in ["docs/development.md", "README.md"] {
        let text = std::fs::read_to_string(root.join(doc)).expect("read doc");
        let section = match doc {
            "README.md" => text.split("## Repository layout").nth(1),
            _ => text.split("## Where things are").nth(1),
        }
        .expect("layout section");
        let section = section.split("\n## ").next().unwrap_or(section);
        for path in named_paths(section) {
            assert!(
                root.join(&path).exists(),
                "{doc} names {path}, which does not exist"
            );
            named.push(path);
        }
    }
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let unnamed: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(root).unwrap_or(f).display().to_string())
        .filter(|f| !["src/lib.rs", "src/main.rs"].contains(&f.as_str()))
        .filter(|f| !f.ends_with("_tests.rs") && !f.ends_with("move_fixtures.rs"))
        .filter(|f| {
            !named
                .iter()
                .any(|n| f == n || (n.ends_with('/') && f.starts_with(n.as_str())))
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "source files no layout doc names (add them to docs/development.md or README.md):\n{}",
        unnamed.join("\n")
    );
}
