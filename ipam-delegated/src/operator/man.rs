//! `man DIR`: the man pages, from the clap definition: ipam-delegated.1 and
//! one page per command, named as git names its own (ipam-delegated-list.1).

use std::fs;
use std::path::{Path, PathBuf};

use clap_mangen::Man;

use super::cli::definition;
use super::failure::{Failure, FileAction};
use super::report::{Report, NAME};

/// Writes the pages into `dir`, creating it, and reports the paths written.
pub fn run(dir: &Path) -> Result<Report, Failure> {
    fs::create_dir_all(dir).map_err(|error| Failure::File {
        action: FileAction::Create,
        path: dir.to_path_buf(),
        error,
    })?;
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
    // clap_mangen's own synopsis names an option without its value
    // (`[--database]`): the page's synopsis is written here instead.
    let synopsis = synopsis(command);
    let man =
        Man::new(command.clone().override_usage(synopsis)).source(format!("{NAME} {}", env!("CARGO_PKG_VERSION")));
    let path = dir.join(man.get_filename());
    let mut roff = Vec::new();
    man.render(&mut roff).and_then(|()| fs::write(&path, roff)).map_err(|error| Failure::File {
        action: FileAction::Write,
        path: path.clone(),
        error,
    })?;
    Ok(path)
}

/// The command's synopsis, every option with its value as `--help` shows it:
/// `ipam-delegated list [--network <NAME>] … [-h|--help]`; the options in the
/// order of the definition, then the positionals, then `<COMMAND>`.
fn synopsis(command: &clap::Command) -> String {
    // A usage given by hand (several forms, one per line: `release`) says
    // what the list of options cannot.
    let usage = command.clone().render_usage().to_string();
    if let Some(forms) = usage.strip_prefix("Usage: ").filter(|forms| forms.contains('\n')) {
        return forms.lines().map(str::trim).collect::<Vec<_>>().join("\n");
    }
    let name = command.get_bin_name().unwrap_or_else(|| command.get_name());
    let mut words = vec![name.to_string()];
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        let values = || {
            arg.get_value_names()
                .map(|names| names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()))
        };
        let mut word = if arg.is_positional() {
            values()
        } else {
            let flag = match (arg.get_short(), arg.get_long()) {
                (Some(short), Some(long)) => format!("-{short}|--{long}"),
                (Some(short), None) => format!("-{short}"),
                (None, Some(long)) => format!("--{long}"),
                (None, None) => continue,
            };
            if arg.get_action().takes_values() {
                format!("{flag} {}", values())
            } else {
                flag
            }
        };
        if !arg.is_required_set() {
            word = format!("[{word}]");
        }
        words.push(word);
    }
    if command.has_subcommands() {
        let value = command.get_subcommand_value_name().unwrap_or("COMMAND");
        words.push(if command.is_subcommand_required_set() { format!("<{value}>") } else { format!("[{value}]") });
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_page_per_command_and_none_for_help() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("man");
        let report = run(&out).unwrap_or_else(|failure| panic!("{failure}"));
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
                "ipam-delegated-cluster-reap.1",
                "ipam-delegated-install-cni.1",
                "ipam-delegated-agent.1",
                "ipam-delegated-completions.1",
                "ipam-delegated-man.1",
                "ipam-delegated-delegates.1",
            ]
        );
        let list = fs::read_to_string(out.join("ipam-delegated-list.1")).expect("the page of list");
        assert!(list.contains("\n.TH ipam-delegated-list 1 "), "{list}");
        assert!(list.contains("ipam\\-delegated list"), "{list}");
    }

    /// The SYNOPSIS section of a page: the lines between `.SH SYNOPSIS` and the next `.SH`.
    fn synopsis_of(page: &str) -> String {
        let after = page.split_once(".SH SYNOPSIS\n").map(|(_, rest)| rest).unwrap_or_else(|| panic!("{page}"));
        after.split("\n.SH ").next().unwrap().replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
    }

    #[test]
    fn a_synopsis_names_the_value_every_option_takes() {
        let dir = tempfile::tempdir().expect("tempdir");
        run(dir.path()).unwrap_or_else(|failure| panic!("{failure}"));
        let read = |name: &str| synopsis_of(&fs::read_to_string(dir.path().join(name)).expect(name));
        assert_eq!(
            read("ipam-delegated.1").trim(),
            "ipam-delegated [--database <PATH>] [-h|--help] [-V|--version] <COMMAND>"
        );
        assert_eq!(
            read("ipam-delegated-list.1").trim(),
            "ipam-delegated list [--network <NAME>] [--pool <NAME>] [--container <ID>] [--identity <ID>] [--json] \
             [--database <PATH>] [-h|--help]"
        );
        // Its two forms, one per line.
        assert_eq!(
            read("ipam-delegated-release.1").trim(),
            "ipam-delegated release [OPTIONS] --network <NAME> --container <ID> --ifname <NAME>\n.br\n\
             ipam-delegated release [OPTIONS] --identity <ID> [--network <NAME>]"
        );
        assert!(
            read("ipam-delegated-cluster.1").contains("[--conf <CONFLIST>]"),
            "{}",
            read("ipam-delegated-cluster.1")
        );
        assert!(read("ipam-delegated-completions.1").contains(" <SHELL>"), "{}", read("ipam-delegated-completions.1"));
        for page in fs::read_dir(dir.path()).unwrap() {
            let text = synopsis_of(&fs::read_to_string(page.unwrap().path()).unwrap());
            assert!(!text.contains("[--database]") && !text.contains("[--conf]"), "{text}");
        }
    }
}
