//! The test prerequisites are one list, scripts/test-packages: CI (.ci/run)
//! installs exactly it before `bash scripts/test`, README.md gives the one
//! command that installs it, and every package a script or test asks for
//! (`apt-get install NAME` in its message) is on it.

mod support;

use std::fs;
use std::path::PathBuf;

use support::{read_repo_file, repo};

/// The packages of scripts/test-packages: one a line, `#` starts a comment.
fn listed() -> Vec<String> {
    read_repo_file("scripts/test-packages")
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            assert!(!l.contains(char::is_whitespace), "one package a line: {l:?}");
            l.to_string()
        })
        .collect()
}

#[test]
fn ci_and_the_readme_install_the_one_list() {
    let packages = listed();
    for needed in ["containernetworking-plugins", "etcd-server", "dpkg-dev"] {
        assert!(packages.iter().any(|p| p == needed), "scripts/test-packages lacks {needed}");
    }
    let ci = read_repo_file(".ci/run");
    assert!(ci.contains("sed 's/#.*//' scripts/test-packages"), ".ci/run does not install scripts/test-packages");
    assert!(!ci.contains("apt-get install -y containernetworking"), ".ci/run has a list of its own");
    assert_eq!(ci.trim_end().lines().last(), Some("bash scripts/test"), ".ci/run ends with the README's test command");
    let readme = read_repo_file("README.md");
    assert!(
        readme.contains("apt-get install -y $(sed 's/#.*//' scripts/test-packages)"),
        "README.md does not give the command that installs scripts/test-packages"
    );
    assert!(readme.contains("cargo install cargo-deb --locked --version 3.8.0"), "README.md: cargo-deb");
    // The installed build links musl (scripts/build): its target and musl-gcc.
    assert!(packages.iter().any(|p| p == "musl-tools"), "scripts/test-packages lacks musl-tools");
    assert!(ci.contains("rustup target add \"$(uname -m)-unknown-linux-musl\""), ".ci/run: the musl target");
    assert!(readme.contains("rustup target add x86_64-unknown-linux-musl"), "README.md: the musl target");
}

#[test]
fn every_package_a_script_or_test_asks_for_is_listed() {
    let packages = listed();
    let mut files: Vec<PathBuf> = ["scripts/test", "scripts/need-protoc"].iter().map(|p| repo().join(p)).collect();
    for dir in ["tests", "tests/support", "tests/stack", "tests/netns", "tests/cluster_harness"] {
        for entry in fs::read_dir(repo().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests/prerequisites.rs") {
                files.push(path);
            }
        }
    }
    let mut asked = 0;
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        for (_, rest) in text.match_indices("apt-get install ").map(|(at, _)| text.split_at(at + 16)) {
            let words = rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == ' ')).next().unwrap();
            for name in words.split_whitespace().filter(|w| !w.starts_with('-')) {
                assert!(
                    packages.iter().any(|p| p == name),
                    "{} asks for {name}, which scripts/test-packages lacks",
                    file.display()
                );
                asked += 1;
            }
        }
    }
    assert!(asked >= 10, "only {asked} packages asked for");
}
