//! The docs hold together: every relative link and `#anchor` of every
//! Markdown file of the repository (the README, ARCHITECTURE.md, docs/, each
//! crate's README, examples/README.md, the benchmarks) points at a file or
//! directory that exists, and at a heading of it that exists; every path of
//! the repository that they name in code (`scripts/test`, `tests/e2e.rs`, …)
//! exists; and the README
//! gives the two commands first (tests/prerequisites.rs: CI runs the second). A doc moved or a heading renamed without
//! its links fails here, before a reader follows them.

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use support::markdown::{anchors, code_spans, is_local, link_targets, normalize, slug};
use support::repo;

/// Every `.md` file of the repository, outside `target/` and hidden directories.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            if path.is_dir() && !name.starts_with('.') && name != "target" {
                walk(&path, found);
            } else if name.ends_with(".md") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(repo(), &mut found);
    found.sort();
    found
}

/// What is wrong with the local links of `doc` (whose text is `text`): one
/// line per link that points at no file, or at no heading of its file.
fn broken_links(doc: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for target in link_targets(text).into_iter().filter(|t| is_local(t)) {
        let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
        let file = if path.is_empty() { doc.to_path_buf() } else { normalize(&doc.parent().unwrap().join(path)) };
        if !file.exists() {
            broken.push(format!("{}: ({target}): {} does not exist", doc.display(), file.display()));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        let headings =
            if file.is_file() { anchors(&fs::read_to_string(&file).unwrap_or_default()) } else { Vec::new() };
        if !headings.iter().any(|h| h == anchor) {
            broken.push(format!("{}: ({target}): {} has no heading #{anchor}", doc.display(), file.display()));
        }
    }
    broken
}

#[test]
fn every_relative_link_and_anchor_of_the_docs_points_at_something() {
    let docs = markdown_files();
    let relative: Vec<String> =
        docs.iter().map(|d| d.strip_prefix(repo()).unwrap().to_string_lossy().into_owned()).collect();
    // The README, the docs by reader that its "Where to go next" links, and each executable's reference.
    let by_reader = ["install", "walkthroughs", "cluster", "operations", "development", "contract"];
    let expected = ["README.md".to_string(), "ARCHITECTURE.md".into(), "examples/README.md".into()]
        .into_iter()
        .chain(by_reader.map(|d| format!("docs/{d}.md")))
        .chain(support::SUITE_EXECUTABLES.map(|exe| format!("{exe}/README.md")));
    for file in expected {
        assert!(relative.contains(&file), "{file} is not among the docs read: {relative:?}");
    }
    let (mut broken, mut links) = (Vec::new(), 0);
    for doc in &docs {
        let text = fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        links += link_targets(&text).iter().filter(|t| is_local(t)).count();
        broken.extend(broken_links(doc, &text));
    }
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
    assert!(links >= 100, "only {links} local links read in {} files", docs.len());
}

/// The paths of the repository that `text` names in code: a span that is one
/// word starting with a top-level directory of the repository and a `/`
/// (`shared/src/store/`, `tests/walkthrough.rs`), but not what a build makes
/// (`target/`) nor a pattern (`examples/*.conflist`, `<name>`, `$PREFIX/bin`).
fn repository_paths(text: &str) -> Vec<String> {
    let top_level: Vec<String> = fs::read_dir(repo())
        .expect("reading the repository")
        .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .filter(|name| !name.starts_with('.') && name != "target")
        .collect();
    code_spans(text)
        .into_iter()
        .filter(|span| !span.contains(|c: char| c.is_whitespace() || "<>*$…{}|".contains(c)))
        .filter(|span| span.split_once('/').is_some_and(|(first, _)| top_level.iter().any(|t| t == first)))
        .collect()
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let (mut missing, mut named) = (Vec::new(), 0);
    for doc in markdown_files() {
        let text = fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        for path in repository_paths(&text) {
            named += 1;
            if !repo().join(&path).exists() {
                missing.push(format!("{}: `{path}`", doc.display()));
            }
        }
    }
    assert!(missing.is_empty(), "paths that do not exist:\n{}", missing.join("\n"));
    assert!(named >= 100, "only {named} repository paths named in the docs");
}

#[test]
fn a_named_path_is_read_from_code_and_only_there() {
    let text = "`scripts/test` and `tests/nothing.rs`, `target/debian/`, `examples/*.conflist`, `cat scripts/x`\n\
                ```sh\n`scripts/in-a-block`\n```\nnot code: scripts/plain\n";
    assert_eq!(repository_paths(text), ["scripts/test", "tests/nothing.rs"]);
}

#[test]
fn a_link_to_a_missing_file_or_heading_is_found() {
    let readme = repo().join("README.md");
    let text = "[a](docs/install.md#on-kubernetes) [b](docs/nothing.md) [c](docs/install.md#no-such-heading)\n\
                [d](#no-such-heading-here) [e](#an-example) [f](deploy/kubernetes/) [`g`](ARCHITECTURE.md)\n\
                [h](https://example.com/nothing) `[i](in-code.md)`\n```sh\n[j](in-a-block.md)\n```\n";
    let broken = broken_links(&readme, text);
    let named: Vec<&str> = broken.iter().map(|b| b.split(": (").nth(1).unwrap().split(')').next().unwrap()).collect();
    assert_eq!(named, ["docs/nothing.md", "docs/install.md#no-such-heading", "#no-such-heading-here"], "{broken:#?}");
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(slug("DNS: the main plugin decides"), "dns-the-main-plugin-decides");
    assert_eq!(slug("Sticky addresses in the operator's tool"), "sticky-addresses-in-the-operators-tool");
    assert_eq!(slug("`ipam.sticky`, step by step"), "ipamsticky-step-by-step");
    assert_eq!(slug("See [the contract](docs/contract.md) here"), "see-the-contract-here");
    let text = "# Title\n## Notes\n```sh\n# not a heading\n```\n### Notes\n#not-a-heading\n## Notes\n";
    assert_eq!(anchors(text), ["title", "notes", "notes-1", "notes-2"]);
}

#[test]
fn the_readme_gives_the_two_commands_first() {
    let readme = support::read_repo_file("README.md");
    let start = readme.lines().position(|l| l == "```sh").expect("a ```sh block in the README");
    let block: Vec<&str> = readme.lines().skip(start + 1).take_while(|l| *l != "```").collect();
    let commands: Vec<&str> = block.iter().map(|l| l.split(" #").next().unwrap().trim()).collect();
    assert_eq!(commands, ["bash scripts/demo", "bash scripts/test"], "the README's first commands");
    assert!(start < 40, "the two commands start at line {}: near the top", start + 1);
}
