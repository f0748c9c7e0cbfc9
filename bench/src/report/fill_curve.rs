//! ADD latency against pool fill: the table under the chart (chart.rs).

use std::fmt::Write as _;

use super::format::ratio;
use crate::figures::Figures;

pub fn section(fig: &Figures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## ADD latency against pool fill\n\n![ADD latency against fill](benchmarks/add-latency-vs-fill.svg)\n\n10.23.0.0/16 filled from its start to each level, the cursor on the last lease (as sequential allocation leaves a pool). Median of the trials at each level (each ADD is undone by a DEL and the cursor reset).\n");
    let _ = write!(s, "| fill |");
    for (name, _) in &fig.fill_curve {
        let _ = write!(s, " {name} (ms) |");
    }
    let _ = write!(s, " ratio |\n|---:|");
    for _ in &fig.fill_curve {
        s.push_str("---:|");
    }
    s.push_str("---:|\n");
    for (i, level) in fig.fill_levels().iter().enumerate() {
        let _ = write!(s, "| {}% |", level * 100.0);
        let vals: Vec<f64> =
            fig.fill_curve.iter().map(|(_, curve)| curve.get(i).map_or(0.0, |p| p.1.median_ms)).collect();
        for v in &vals {
            let _ = write!(s, " {v:.2} |");
        }
        let _ = writeln!(s, " {} |", if vals.len() == 2 { ratio(vals[0], vals[1]) } else { "—".into() });
    }
    s
}
