//! `completions SHELL`: the shell's completion script, from the clap
//! definition, so that it always knows every command and option.

use clap_complete::aot::{generate, Bash, Fish, Zsh};

use super::cli::{definition, Shell};
use super::report::NAME;

pub fn script(shell: Shell) -> String {
    let mut cmd = definition();
    // Into memory first: the generators panic on a write error, and a
    // closed stdout (`| head`) is not worth a panic.
    let mut out = Vec::new();
    match shell {
        Shell::Bash => generate(Bash, &mut cmd, NAME, &mut out),
        Shell::Zsh => generate(Zsh, &mut cmd, NAME, &mut out),
        Shell::Fish => generate(Fish, &mut cmd, NAME, &mut out),
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    match shell {
        Shell::Bash => bash_case_arms_fixed(&text),
        _ => text,
    }
}

/// clap_complete's bash script (up to 4.6.11, the newest) names a subcommand's
/// case arm after the program name with its `-` replaced by `__subcmd__`
/// (`ipam__subcmd__delegated__subcmd__list)`) while the loop that walks the
/// words sets `cmd` with it replaced by `__` (`ipam__delegated__subcmd__list`):
/// for a hyphenated program no subcommand arm ever matched, and only the top
/// level completed. The arms are renamed to what the loop sets.
fn bash_case_arms_fixed(script: &str) -> String {
    let wrong = format!("{}__subcmd__", NAME.replace('-', "__subcmd__"));
    let right = format!("{}__subcmd__", NAME.replace('-', "__"));
    script.replace(&wrong, &right)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_knows_every_command() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = script(shell);
            for command in ["list", "pools", "metrics", "release", "forget-pool", "check", "completions", "man"] {
                assert!(text.contains(command), "{shell:?} lacks {command}");
            }
            assert!(text.contains("lock-timeout"), "{shell:?}");
        }
    }

    /// The candidates bash offers for `words` (the last one is the word being
    /// completed), from the script loaded into a real bash as bash-completion
    /// would load it: the function `complete -p ipam-delegated` names, called
    /// with COMP_WORDS and COMP_CWORD set as readline sets them.
    pub(crate) fn bash_candidates(script: &std::path::Path, words: &[&str]) -> Vec<String> {
        let program = r#"
            set -u
            source "$1"; shift
            spec=$(complete -p ipam-delegated) || { echo "no completion for ipam-delegated" >&2; exit 3; }
            fn=$(sed -n 's/.* -F \([^ ]*\) .*/\1/p' <<<"$spec")
            [ -n "$fn" ] || { echo "no -F function in: $spec" >&2; exit 3; }
            COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
            COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
            prev=""; [ "$COMP_CWORD" -gt 0 ] && prev=${COMP_WORDS[COMP_CWORD-1]}
            "$fn" ipam-delegated "${COMP_WORDS[COMP_CWORD]}" "$prev"
            printf '%s\n' "${COMPREPLY[@]}"
        "#;
        let out = std::process::Command::new("bash")
            .args(["--norc", "--noprofile", "-c", program, "bash"])
            .arg(script)
            .args(words)
            .output()
            .expect("running bash (Debian's essential bash)");
        assert!(
            out.status.success(),
            "bash: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        let mut candidates: Vec<String> =
            String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(String::from).collect();
        candidates.sort();
        candidates
    }

    #[test]
    fn bash_completes_the_options_and_commands_of_every_level() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ipam-delegated.bash");
        std::fs::write(&path, script(Shell::Bash)).unwrap();
        let complete = |words: &[&str]| bash_candidates(&path, words);
        assert_eq!(complete(&["ipam-delegated", "c"]), ["check", "cluster", "completions"], "the top level's commands");
        assert_eq!(
            complete(&["ipam-delegated", "list", "--"]),
            ["--container", "--database", "--help", "--identity", "--json", "--network", "--pool"],
            "list's options"
        );
        assert_eq!(complete(&["ipam-delegated", "release", "--i"]), ["--identity", "--ifname"], "release's options");
        let cluster = complete(&["ipam-delegated", "cluster", ""]);
        for expected in ["blocks", "release-node", "--conf"] {
            assert!(cluster.iter().any(|c| c == expected), "cluster <TAB>: {cluster:?} lacks {expected}");
        }
        assert_eq!(complete(&["ipam-delegated", "cluster", "--conf", "x", "release-node", "--g"]), ["--gone"]);
        assert_eq!(complete(&["ipam-delegated", "forget-pool", "--lo"]), ["--lock-timeout"]);
        assert_eq!(complete(&["ipam-delegated", "completions", "z"]), ["zsh"]);
    }
}
