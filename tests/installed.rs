//! Which executables the tests run. By default, this build's, in the fast layout (target/<profile>/cni/);
//! with `IPAM_TEST_BIN_DIR` set, the ones installed there — scripts/test sets it
//! to /usr/lib/cni after `dpkg -i` of the package, and this file makes sure the
//! run really used those: the harness points there, a plugin started by the
//! harness is that file (seen from the delegate it runs), each executable
//! reports this build's version, and, with `IPAM_TEST_BUILT_FROM` set to the
//! directory the package was made from (target/release), each one carries the
//! same GNU build id as the binary built there (the package strips symbols but
//! keeps the build id, which the linker derives from the code).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;
use support::{bin_dir, suite_bin, Sandbox, BIN_DIR_VAR, SUITE_EXECUTABLES};

/// The directory of the build an installed run must match (see the module doc).
const BUILT_FROM_VAR: &str = "IPAM_TEST_BUILT_FROM";

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
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
fn installed_executables_are_this_build() {
    let (Some(installed), Some(built)) = (env_dir(BIN_DIR_VAR), env_dir(BUILT_FROM_VAR)) else {
        eprintln!("{BIN_DIR_VAR} and {BUILT_FROM_VAR} are not both set: nothing to compare");
        return;
    };
    // Every name is the one program built as ipam-delegated (the fast layout).
    for name in SUITE_EXECUTABLES {
        let (a, b) = (installed.join(name), built.join("ipam-delegated"));
        let id = gnu_build_id(&a).unwrap_or_else(|| panic!("{} has no GNU build id", a.display()));
        let want = gnu_build_id(&b).unwrap_or_else(|| panic!("{} has no GNU build id", b.display()));
        assert_eq!(hex(&id), hex(&want), "{} is not the build in {}", a.display(), b.display());
    }
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
