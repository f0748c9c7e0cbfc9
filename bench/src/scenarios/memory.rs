//! Peak resident memory of one ADD (the largest of 5 runs): of the full
//! stack, which in the fast layout is one process (the delegates run inside
//! ipam-delegated's), and of each delegate's name alone, each started by the
//! `--rusage-of` launcher; the launcher running /bin/true is the floor.

use std::path::Path;

use serde_json::json;

use crate::figures::Figures;
use crate::harness::{exec_rss, phase, Plugin, Run};
use crate::setup::{bytes, Ctx};

type RssCase = Box<dyn Fn(usize) -> Run>;

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let scratch = ctx.scenario_dir("memory");
    let dir = scratch.path();
    let subnet = "10.24.0.0/16";
    let started = phase("peak RSS");
    let db = dir.join("suite.sqlite");
    let selected = ctx.selected_config(&db, subnet);
    let cases: Vec<(&str, RssCase)> = vec![
        ("ipam-delegated (the full stack)", {
            let p = ctx.stack(&db, subnet);
            Box::new(move |i| p.run_rss("ADD", &format!("rss-stack-{i}")))
        }),
        ("ipam-ds-pool", {
            let p = ctx.selector(&db, subnet);
            Box::new(move |i| p.run_rss("ADD", &format!("rss-selector-{i}")))
        }),
        ("ipam-da-sequential", {
            let p = Plugin { exe: ctx.exe("ipam-da-sequential"), cni_path: ctx.bins.clone(), config: bytes(&selected) };
            Box::new(move |i| p.run_rss("ADD", &format!("rss-sequential-{i}")))
        }),
        ("ipam-da-static", {
            let exe = ctx.exe("ipam-da-static");
            let bins = ctx.bins.clone();
            let base = selected.clone();
            Box::new(move |i| {
                let mut config = base.clone();
                config["args"] = json!({ "cni": { "ips": [format!("10.24.9.{}", i + 10)] } });
                exec_rss(&exe, "ADD", &format!("rss-static-{i}"), &bins, &bytes(&config))
            })
        }),
        ("host-local", {
            let p = ctx.host_local(&dir.join("host-local"), subnet);
            Box::new(move |i| p.run_rss("ADD", &format!("rss-hl-{i}")))
        }),
    ];
    let floor = exec_rss(Path::new("/bin/true"), "ADD", "rss-floor", &ctx.bins, b"").maxrss_kib;
    fig.rss.push(("(floor: the launcher running /bin/true)".into(), floor));
    for (name, f) in &cases {
        let peak = (0..5).map(|i| f(i).expect_ok(name).maxrss_kib).max().unwrap_or(0);
        fig.rss.push((name.to_string(), peak));
    }
    eprintln!("    took {:.1?}", started.elapsed());
}
