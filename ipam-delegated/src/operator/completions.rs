//! `completions SHELL`: the shell's completion script, from the clap
//! definition, so that it always knows every command and option.

use clap_complete::aot::{generate, Bash, Fish, Zsh};

use super::cli::{definition, Shell};
use super::NAME;

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
    String::from_utf8_lossy(&out).into_owned()
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
}
