//! The docs' Markdown, read as far as the tests that hold the docs need it:
//! the targets of their links, and the anchors their headings make (as
//! GitHub makes them). Code is not read: neither a fenced block (its `# `
//! lines are shell comments) nor an inline code span.

use std::path::{Component, Path, PathBuf};

/// The targets of the links `[text](target)` of `text`, outside code, in order.
pub fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let mut rest = without_code_spans(line);
        while let Some(at) = rest.find("](") {
            rest = rest.split_off(at + 2);
            let Some(end) = rest.find(')') else { break };
            targets.push(rest[..end].to_string());
            rest = rest.split_off(end);
        }
    }
    targets
}

/// The inline code spans (`` `…` ``) of `text`, outside code blocks, in order.
pub fn code_spans(text: &str) -> Vec<String> {
    prose_lines(text).into_iter().flat_map(|line| line.split('`').skip(1).step_by(2).map(String::from)).collect()
}

/// Whether a link's target is a file or a place in this repository (or the
/// installed docs): not a URL, not an e-mail address.
pub fn is_local(target: &str) -> bool {
    !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:")
}

/// The anchors of the headings of `text`, as GitHub makes them: the heading's
/// text lower-cased, without its Markdown and without any character but
/// letters, digits, `-`, `_` and spaces, its spaces turned into `-`; a
/// repeated anchor gets `-1`, `-2`, … .
pub fn anchors(text: &str) -> Vec<String> {
    let (mut anchors, mut bases) = (Vec::new(), Vec::new());
    for line in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let repeats = bases.iter().filter(|b| **b == base).count();
        anchors.push(if repeats == 0 { base.clone() } else { format!("{base}-{repeats}") });
        bases.push(base);
    }
    anchors
}

/// A heading's anchor (see [`anchors`]).
pub fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading.trim();
    // A link in a heading reads as its text.
    while let Some(open) = rest.find("](") {
        text.push_str(&rest[..open]);
        rest = rest[open + 2..].split_once(')').map_or("", |(_, after)| after);
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The path with its `.` and `..` components resolved lexically.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The lines of `text` outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut in_fence = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence {
            lines.push(line);
        }
    }
    lines
}

/// `line` with its inline code spans (`` `…` ``) left out.
fn without_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect()
}
