//! `man DIR`: the man pages, from the clap definition: ipam-delegated.1 and
//! one page per command, named as git names its own (ipam-delegated-list.1).

use std::fs;
use std::path::{Path, PathBuf};

use clap_mangen::Man;

use super::cli::definition;
use super::{Failure, Report, NAME};

/// Writes the pages into `dir`, creating it, and reports the paths written.
pub fn run(dir: &Path) -> Result<Report, Failure> {
    fs::create_dir_all(dir).map_err(|e| Failure(format!("cannot create {}: {e}", dir.display())))?;
    // `help` is no page of its own; building gives each command its
    // "ipam-delegated-list" name and "ipam-delegated list" synopsis.
    let mut root = definition().disable_help_subcommand(true);
    root.build();
    let mut written = vec![page(&root, dir)?];
    for command in root.get_subcommands().filter(|c| !c.is_hide_set()) {
        written.push(page(command, dir)?);
        // `cluster blocks`, `cluster release-node`: pages of their own, which
        // the `cluster` page names.
        for sub in command.get_subcommands().filter(|c| !c.is_hide_set() && c.get_name() != "help") {
            written.push(page(sub, dir)?);
        }
    }
    Ok(Report::fine(written.iter().map(|path| format!("{}\n", path.display())).collect()))
}

fn page(command: &clap::Command, dir: &Path) -> Result<PathBuf, Failure> {
    let man = Man::new(command.clone()).source(format!("{NAME} {}", env!("CARGO_PKG_VERSION")));
    let path = dir.join(man.get_filename());
    let mut roff = Vec::new();
    man.render(&mut roff)
        .and_then(|()| fs::write(&path, roff))
        .map_err(|e| Failure(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_page_per_command_and_none_for_help() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("man");
        let report = run(&out).unwrap_or_else(|Failure(problem)| panic!("{problem}"));
        let names: Vec<String> = report
            .stdout
            .lines()
            .map(|line| line.strip_prefix(&format!("{}/", out.display())).unwrap_or(line).to_string())
            .collect();
        assert_eq!(
            names,
            [
                "ipam-delegated.1",
                "ipam-delegated-list.1",
                "ipam-delegated-pools.1",
                "ipam-delegated-metrics.1",
                "ipam-delegated-release.1",
                "ipam-delegated-forget-pool.1",
                "ipam-delegated-check.1",
                "ipam-delegated-cluster.1",
                "ipam-delegated-cluster-blocks.1",
                "ipam-delegated-cluster-release-node.1",
                "ipam-delegated-completions.1",
                "ipam-delegated-man.1",
            ]
        );
        let list = fs::read_to_string(out.join("ipam-delegated-list.1")).expect("the page of list");
        assert!(list.contains("\n.TH ipam-delegated-list 1 "), "{list}");
        assert!(list.contains("ipam\\-delegated list"), "{list}");
    }
}
