//! The suite's executables are one multicall program: this one. Started as
//! one of the delegates' names (a link to this file, as `scripts/install` and
//! the Debian package lay them out), it is that delegate; under any other
//! name it is ipam-delegated. And a delegate that the stack finds in CNI_PATH
//! runs inside this process when its file is this very program (the same
//! file as `/proc/self/exe`): it is then the code this process already has.

use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use shared::Builtin;

/// The delegates this program is, by the names they are installed as: the
/// suite's one list of its delegates. The installer (`install-cni`) links
/// these names; `scripts/install`, `scripts/package` and the bench ask the
/// built program for them (`ipam-delegated delegates`); the Debian package's
/// asset list and the manifests, which cannot ask, are checked against it
/// by the tests below. ARCHITECTURE.md's "Adding a delegate" says the rest.
pub const DELEGATES: [&Builtin; 5] = [
    &ipam_ds_pool::BUILTIN,
    &ipam_ds_cluster::BUILTIN,
    &ipam_da_static::BUILTIN,
    &ipam_da_sticky::BUILTIN,
    &ipam_da_sequential::BUILTIN,
];

/// The names the delegates are installed as, in [`DELEGATES`]' order.
pub fn names() -> impl Iterator<Item = &'static str> {
    DELEGATES.into_iter().map(|b| b.about.name)
}

/// The delegate installed as `name`, if it is one of this program's.
pub fn named(name: &OsStr) -> Option<&'static Builtin> {
    DELEGATES.into_iter().find(|b| OsStr::new(b.about.name) == name)
}

/// The name this process was started as: the last component of the path
/// given to execve (AT_EXECFN, which a caller cannot set apart from the file
/// it runs, as it can argv[0]), or of argv[0] if the kernel gave none.
pub fn started_as() -> Option<OsString> {
    // SAFETY: getauxval only reads the auxiliary vector; AT_EXECFN, when
    // present, points at a NUL-terminated string that lives as long as the
    // process and is never written.
    let execfn = unsafe { libc::getauxval(libc::AT_EXECFN) } as *const libc::c_char;
    let path = if execfn.is_null() {
        PathBuf::from(std::env::args_os().next()?)
    } else {
        // SAFETY: as above.
        PathBuf::from(OsStr::from_bytes(unsafe { CStr::from_ptr(execfn) }.to_bytes()))
    };
    path.file_name().map(OsStr::to_os_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of the repository, read as text; `path` is relative to the workspace root.
    fn repository_file(path: &str) -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The names in `text` of the lines that hold `before` NAME `after`,
    /// where NAME is a word of lowercase letters and hyphens.
    fn names_between(text: &str, before: &str, after: &str) -> Vec<String> {
        let mut found = Vec::new();
        for mut rest in text.lines() {
            while let Some(at) = rest.find(before) {
                rest = &rest[at + before.len()..];
                let end = rest.find(|c: char| !(c.is_ascii_lowercase() || c == '-')).unwrap_or(rest.len());
                if rest[end..].starts_with(after) {
                    found.push(rest[..end].to_string());
                }
            }
        }
        found
    }

    fn delegate_names() -> Vec<String> {
        names().map(String::from).collect()
    }

    #[test]
    fn every_delegate_is_started_by_its_name() {
        for name in names() {
            assert_eq!(named(OsStr::new(name)).map(|b| b.about.name), Some(name));
        }
        assert!(named(OsStr::new("ipam-delegated")).is_none(), "ipam-delegated is the orchestrator, not a delegate");
    }

    // cargo-deb's asset list cannot ask the program, so it is held to the list here.
    #[test]
    fn the_debian_package_links_and_documents_every_delegate() {
        let manifest = repository_file("ipam-delegated/Cargo.toml");
        let links = names_between(&manifest, r#"{ dest = "usr/lib/cni/"#, r#"", link_name = "ipam-delegated" }"#);
        assert_eq!(links, delegate_names(), "ipam-delegated/Cargo.toml: the package's links in /usr/lib/cni");
        let readmes = names_between(&manifest, r#"["target/release/doc/"#, r#"/README.md""#);
        let mut expected = vec!["ipam-delegated".to_string()];
        expected.extend(delegate_names());
        assert_eq!(readmes, expected, "ipam-delegated/Cargo.toml: the package's READMEs");
    }

    #[test]
    fn the_manifests_build_every_delegate() {
        let manifest = repository_file("ipam-delegated/Cargo.toml");
        let verbose = names_between(&manifest, r#"""#, r#"/verbose""#);
        let mut expected = vec!["shared".to_string()];
        expected.extend(delegate_names());
        assert_eq!(verbose, expected, "ipam-delegated/Cargo.toml: the verbose feature");
        let workspace = repository_file("Cargo.toml");
        for list in ["members = ", "default-members = "] {
            let line =
                workspace.lines().find(|l| l.starts_with(list)).unwrap_or_else(|| panic!("Cargo.toml: no {list}"));
            for name in names() {
                assert!(line.contains(&format!("\"{name}\"")), "Cargo.toml's workspace {list}misses {name}");
            }
        }
    }
}
