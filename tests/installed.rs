//! Which executables the tests run. By default, this build's, in the fast layout (target/<profile>/cni/);
//! with `IPAM_TEST_BIN_DIR` set, the ones installed there — scripts/test sets it
//! to /usr/lib/cni after `dpkg -i` of the package, and this file makes sure the
//! run really used those: the harness points there, a plugin started by the
//! harness is that file (seen from the delegate it runs), each executable
//! reports this build's version, and, with `IPAM_TEST_BUILT_FROM` set to the
//! directory the package was made from (target/release), each one carries the
//! same GNU build id as the binary built there (the package strips symbols but
//! keeps the build id, which the linker derives from the code).
//!
//! The `installed_package_*` tests check the installed Debian package itself
//! (its control data, its programs, completion, man pages and docs): they are
//! `#[ignore]`d, so a plain `cargo test` lists them as ignored, not as passed;
//! scripts/test's package stage runs them (`--include-ignored`) with
//! `IPAM_TEST_BIN_DIR`, `IPAM_TEST_BUILT_FROM` and `IPAM_TEST_DEB` set, and
//! each one fails when what it needs to check is not there.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;
use support::markdown::{is_local, link_targets, normalize};
use support::{bin_dir, suite_bin, Sandbox, BIN_DIR_VAR, SUITE_EXECUTABLES};

/// The directory of the build an installed run must match (see the module doc).
const BUILT_FROM_VAR: &str = "IPAM_TEST_BUILT_FROM";
/// The .deb file that was installed (scripts/test's package stage sets it).
const DEB_VAR: &str = "IPAM_TEST_DEB";
/// Where the package installs its docs.
const DOC_DIR: &str = "/usr/share/doc/cni-ipam-delegated";
const PACKAGE: &str = "cni-ipam-delegated";

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The variable's path, which an `installed_package_*` test cannot do without.
fn required(var: &str) -> PathBuf {
    env_dir(var).unwrap_or_else(|| {
        panic!("{var} is not set: this test checks the installed package (scripts/test's package stage sets it)")
    })
}

/// stdout of a command that must succeed.
fn output_of(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The files the package installed (`dpkg -L`), the package having been installed.
fn package_files() -> Vec<PathBuf> {
    output_of(Command::new("dpkg").args(["-L", PACKAGE])).lines().map(PathBuf::from).collect()
}

#[test]
fn the_harness_runs_the_executables_of_the_chosen_directory() {
    let expected = match env_dir(BIN_DIR_VAR) {
        Some(dir) => dir,
        // The test runs as target/<profile>/deps/<test>-<hash>; the fast
        // layout of the build is target/<profile>/cni/.
        None => std::env::current_exe().unwrap().parent().and_then(Path::parent).unwrap().join("cni"),
    };
    assert_eq!(bin_dir(), expected, "the directory of the executables under test");
    for name in SUITE_EXECUTABLES {
        let exe = suite_bin(name);
        assert_eq!(exe, expected.join(name));
        let meta = std::fs::metadata(&exe).unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
        assert!(
            meta.is_file() && meta.permissions().mode() & 0o111 != 0,
            "{} is not an executable file",
            exe.display()
        );
    }
}

#[test]
fn a_delegate_sees_the_executable_under_test_as_its_parent() {
    let sb = Sandbox::new();
    // A delegate that writes down which file its parent (ipam-delegated) runs.
    let seen = sb.path().join("parent-exe");
    let fake = sb.fakes_dir().join("who-ran-me");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\ncat >/dev/null\nreadlink /proc/$PPID/exe > '{}'\nexit 0\n", seen.display()),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = json!({
        "cniVersion": "1.0.0", "name": "which-net", "type": "bridge",
        "ipam": {"type": "ipam-delegated", "delegates": ["who-ran-me"], "database": sb.db()}
    });
    sb.cni("ipam-delegated", "DEL", &config, &[]).assert_quiet_success();
    let parent = std::fs::read_to_string(&seen).expect("the delegate ran");
    let expected = std::fs::canonicalize(suite_bin("ipam-delegated")).unwrap();
    assert_eq!(parent.trim_end(), expected.to_str().unwrap(), "the ipam-delegated that ran the delegate");
}

#[test]
fn every_executable_is_of_this_version() {
    for name in SUITE_EXECUTABLES {
        let exe = suite_bin(name);
        // Run with no CNI_COMMAND, a plugin names itself and its version on stderr.
        let out = Command::new(&exe).env_remove("CNI_COMMAND").stdin(Stdio::null()).output().unwrap();
        let banner = String::from_utf8_lossy(&out.stderr);
        let first = banner.lines().next().unwrap_or_default();
        let expected = format!("{name} {}:", env!("CARGO_PKG_VERSION"));
        assert!(
            out.status.success() && first.starts_with(&expected),
            "{}: {first:?}, expected {expected:?}…",
            exe.display()
        );
    }
    let out = Command::new(suite_bin("ipam-delegated")).arg("--version").env_remove("CNI_COMMAND").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("ipam-delegated {}", env!("CARGO_PKG_VERSION")));
}

#[test]
#[ignore = "checks the installed package: run by scripts/test's package stage"]
fn installed_package_executables_are_this_build() {
    let (installed, built) = (required(BIN_DIR_VAR), required(BUILT_FROM_VAR));
    // Every name is the one program built as ipam-delegated (the fast layout).
    for name in SUITE_EXECUTABLES {
        let (a, b) = (installed.join(name), built.join("ipam-delegated"));
        let id = gnu_build_id(&a).unwrap_or_else(|| panic!("{} has no GNU build id", a.display()));
        let want = gnu_build_id(&b).unwrap_or_else(|| panic!("{} has no GNU build id", b.display()));
        assert_eq!(hex(&id), hex(&want), "{} is not the build in {}", a.display(), b.display());
    }
}

#[test]
#[ignore = "checks the installed package: run by scripts/test's package stage"]
fn installed_package_control_data_says_what_it_is() {
    let deb = required(DEB_VAR);
    let field = |name: &str| output_of(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(name));
    assert_eq!(field("Package").trim(), PACKAGE);
    // Static programs: no dependency, and no empty Depends field either.
    assert_eq!(field("Depends").trim(), "", "Depends of {}", deb.display());
    let control = output_of(Command::new("dpkg-deb").arg("-I").arg(&deb).arg("control"));
    assert!(!control.lines().any(|l| l.starts_with("Depends:")), "{control}");
    // The short description is one whole line; the long one tells of cluster mode and cni-run.
    let description = field("Description");
    let mut lines = description.lines();
    let short = lines.next().unwrap_or_default();
    assert!(!short.is_empty() && short.len() <= 80, "short description: {short:?}");
    assert_eq!(short, env_description(), "the short description is the Cargo description, whole");
    let long = lines.map(str::trim).collect::<Vec<_>>().join(" ");
    for said in ["ipam-ds-cluster", "etcd", "cluster", "/usr/bin/cni-run", "/usr/lib/cni"] {
        assert!(long.contains(said), "the long description does not mention {said}: {long}");
    }
}

/// ipam-delegated's Cargo description, the package's short description.
fn env_description() -> String {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ipam-delegated/Cargo.toml")).unwrap();
    let line = manifest.lines().find_map(|l| l.strip_prefix("description = ")).expect("ipam-delegated's description");
    line.trim_matches('"').to_string()
}

#[test]
#[ignore = "checks the installed package: run by scripts/test's package stage"]
fn installed_package_programs_are_static() {
    let bin_dir = required(BIN_DIR_VAR);
    for exe in [bin_dir.join("ipam-delegated"), PathBuf::from("/usr/bin/cni-run")] {
        // ldd fails on a static program, saying so.
        let out = Command::new("ldd").arg(&exe).output().expect("running ldd");
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            said.contains("statically linked") || said.contains("not a dynamic executable"),
            "{}: {said}",
            exe.display()
        );
    }
}

#[test]
#[ignore = "checks the installed package: run by scripts/test's package stage"]
fn installed_package_docs_links_resolve_and_commands_are_installed_ones() {
    required(BIN_DIR_VAR);
    let installed = package_files();
    let docs: Vec<&PathBuf> =
        installed.iter().filter(|p| p.starts_with(DOC_DIR) && p.extension().is_some_and(|e| e == "md")).collect();
    for expected in
        ["README.md", "docs/install.md", "docs/walkthroughs.md", "examples/README.md", "ipam-ds-cluster/README.md"]
    {
        assert!(docs.iter().any(|p| **p == Path::new(DOC_DIR).join(expected)), "{DOC_DIR}/{expected} is not installed");
    }
    let mut links = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        for target in link_targets(&text).into_iter().filter(|t| is_local(t) && !t.starts_with('#')) {
            let file = target.split('#').next().unwrap();
            let resolved = normalize(&doc.parent().unwrap().join(file));
            assert!(
                // A file, or a directory of the package's (deploy/kubernetes/).
                installed.contains(&resolved) && (resolved.is_file() || resolved.is_dir()),
                "{}: the link {target} points at {}, which the package does not install",
                doc.display(),
                resolved.display()
            );
            links += 1;
        }
        // The walk-throughs' commands are the installed package's, not the repository's.
        if ["README.md", "docs/walkthroughs.md", "examples/README.md"]
            .iter()
            .any(|d| **doc == Path::new(DOC_DIR).join(d))
        {
            for repository_only in ["scripts/cni", "target/cni"] {
                assert!(!text.contains(repository_only), "{} still says {repository_only}", doc.display());
            }
        }
    }
    assert!(links >= 20, "only {links} relative links in the installed docs");
    // The runtime the walk-throughs use is on PATH, and runs.
    let help = output_of(Command::new("/usr/bin/cni-run").arg("--help"));
    assert!(help.contains("ADD"), "cni-run --help: {help}");
    assert!(installed.contains(&PathBuf::from("/usr/bin/cni-run")));
}

#[test]
#[ignore = "checks the installed package: run by scripts/test's package stage"]
fn installed_package_completion_completes_every_level() {
    required(BIN_DIR_VAR);
    let complete = |words: &[&str]| installed_completion(words);
    assert_eq!(complete(&["ipam-delegated", "c"]), ["check", "cluster", "completions"]);
    assert_eq!(
        complete(&["ipam-delegated", "list", "--"]),
        ["--container", "--database", "--help", "--identity", "--json", "--network", "--pool"]
    );
    let cluster = complete(&["ipam-delegated", "cluster", ""]);
    for expected in ["blocks", "release-node", "--conf"] {
        assert!(cluster.iter().any(|c| c == expected), "cluster <TAB>: {cluster:?} lacks {expected}");
    }
}

/// The candidates bash offers for `words` (the last is being completed), with
/// the completion bash-completion loads on demand, as an interactive shell does.
fn installed_completion(words: &[&str]) -> Vec<String> {
    let program = r#"
        set -u
        [ -f /usr/share/bash-completion/bash_completion ] || { echo "bash-completion is not installed" >&2; exit 3; }
        source /usr/share/bash-completion/bash_completion
        __load_completion ipam-delegated || { echo "bash-completion loads no completion for ipam-delegated" >&2; exit 3; }
        spec=$(complete -p ipam-delegated) || exit 3
        fn=$(sed -n 's/.* -F \([^ ]*\) .*/\1/p' <<<"$spec")
        COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
        COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
        prev=""; [ "$COMP_CWORD" -gt 0 ] && prev=${COMP_WORDS[COMP_CWORD-1]}
        "$fn" ipam-delegated "${COMP_WORDS[COMP_CWORD]}" "$prev"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = output_of(Command::new("bash").args(["--norc", "--noprofile", "-c", program, "bash"]).args(words));
    let mut candidates: Vec<String> = out.lines().filter(|l| !l.is_empty()).map(String::from).collect();
    candidates.sort();
    candidates
}

#[test]
#[ignore = "checks the installed package: run by scripts/test's package stage"]
fn installed_package_man_pages_name_option_values() {
    required(BIN_DIR_VAR);
    let page = output_of(Command::new("gzip").args(["-dc", "/usr/share/man/man1/ipam-delegated-list.1.gz"]));
    let plain = page.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "");
    let synopsis = plain.split(".SH SYNOPSIS\n").nth(1).and_then(|s| s.split("\n.SH").next()).expect("a SYNOPSIS");
    assert!(synopsis.contains("[--database <PATH>]") && synopsis.contains("[--network <NAME>]"), "{synopsis}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The NT_GNU_BUILD_ID note of a little-endian ELF64 file, found through its
/// program headers (PT_NOTE), which stripping keeps.
fn gnu_build_id(path: &Path) -> Option<Vec<u8>> {
    let data = std::fs::read(path).ok()?;
    let u16_at = |o: usize| Some(u16::from_le_bytes(data.get(o..o + 2)?.try_into().ok()?) as usize);
    let u32_at = |o: usize| Some(u32::from_le_bytes(data.get(o..o + 4)?.try_into().ok()?) as usize);
    let u64_at = |o: usize| Some(u64::from_le_bytes(data.get(o..o + 8)?.try_into().ok()?) as usize);
    if data.get(..6)? != b"\x7fELF\x02\x01" {
        return None; // not ELF64 little-endian
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    let align4 = |n: usize| (n + 3) & !3;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(ph)? != 4 {
            continue; // not PT_NOTE
        }
        let (mut at, end) = (u64_at(ph + 8)?, u64_at(ph + 8)? + u64_at(ph + 0x20)?);
        while at + 12 <= end {
            let (namesz, descsz, kind) = (u32_at(at)?, u32_at(at + 4)?, u32_at(at + 8)?);
            let name = data.get(at + 12..at + 12 + namesz)?;
            let desc_at = at + 12 + align4(namesz);
            if kind == 3 && name == b"GNU\0" {
                return Some(data.get(desc_at..desc_at + descsz)?.to_vec());
            }
            at = desc_at + align4(descsz);
        }
    }
    None
}
