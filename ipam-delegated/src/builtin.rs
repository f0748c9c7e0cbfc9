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

/// The delegates this program is, by the names they are installed as.
pub const DELEGATES: [&Builtin; 5] = [
    &ipam_ds_pool::BUILTIN,
    &ipam_ds_cluster::BUILTIN,
    &ipam_da_static::BUILTIN,
    &ipam_da_sticky::BUILTIN,
    &ipam_da_sequential::BUILTIN,
];

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
