//! Durability: the fsync-family calls of one steady-state ADD of each
//! variant, counted with `strace -f` when strace is installed. Its rows go in
//! the report's machine section, not in the figures.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::setup::Ctx;

pub fn count_fsyncs(ctx: &Ctx) -> Vec<(String, String)> {
    let scratch = ctx.scenario_dir("fsyncs");
    let dir = scratch.path();
    let subnet = "10.25.0.0/16";
    let variants = [
        ("suite: ipam-delegated (ds-pool + da-sequential)", ctx.stack(&dir.join("stack.sqlite"), subnet)),
        ("suite: ipam-da-sequential alone", ctx.sequential(&dir.join("sequential.sqlite"), subnet)),
        ("host-local", ctx.host_local(&dir.join("host-local"), subnet)),
    ];
    let mut out = Vec::new();
    for (name, p) in &variants {
        // Not the first ADD: the steady state, where the pool is registered.
        for i in 0..3 {
            p.run("ADD", &format!("fsync-warm-{i}")).expect_ok(name);
        }
        let log = dir.join("strace.log");
        let mut args: Vec<std::ffi::OsString> =
            vec!["-f".into(), "-qq".into(), "-e".into(), "trace=fsync,fdatasync,sync_file_range".into(), "-o".into()];
        args.push(log.clone().into());
        args.push(p.exe.clone().into());
        let strace = Path::new("/usr/bin/strace");
        if !strace.is_file() {
            return vec![("(strace not installed)".into(), "—".into())];
        }
        let mut child = Command::new(strace)
            .args(&args)
            .env_clear()
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", "fsync-probe")
            .env("CNI_NETNS", "/var/run/netns/fsync-probe")
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", &p.cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("strace");
        if let Some(mut pipe) = child.stdin.take() {
            let _ = pipe.write_all(&p.config);
        }
        let _ = child.wait();
        let text = fs::read_to_string(&log).unwrap_or_default();
        let count = |call: &str| text.lines().filter(|l| l.contains(&format!("{call}("))).count();
        out.push((
            name.to_string(),
            format!(
                "{} fsync, {} fdatasync, {} sync_file_range",
                count("fsync"),
                count("fdatasync"),
                count("sync_file_range")
            ),
        ));
    }
    out
}
